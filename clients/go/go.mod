module github.com/lockbroker/lockbroker/clients/go

go 1.19
