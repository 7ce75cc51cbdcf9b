module lockbroker

go 1.19
