//go:build linux

package lockbroker

// Socket options Go's net package does not set: TCP_USER_TIMEOUT (data
// unacknowledged for that long ends the connection, instead of the
// kernel's ~15 minutes of retransmissions) and the keepalive probe count.

import (
	"syscall"
	"time"
)

// tcpUserTimeout is Linux's TCP_USER_TIMEOUT (option 18 of IPPROTO_TCP);
// the syscall package does not name it.
const tcpUserTimeout = 18

// socketControl sets the options on the socket before it connects. A
// kernel that refuses one leaves it unset: the idle PING still runs.
func socketControl(deadAfter time.Duration) func(network, address string, rc syscall.RawConn) error {
	ms := int(deadAfter / time.Millisecond)
	return func(network, address string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, ms)
			_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 3)
		})
	}
}
