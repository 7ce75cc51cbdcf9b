//go:build !linux

package lockbroker

import (
	"syscall"
	"time"
)

// socketControl: TCP_USER_TIMEOUT is Linux's; elsewhere keepalive (set by
// the dialer) and the idle PING notice a dead connection.
func socketControl(deadAfter time.Duration) func(network, address string, rc syscall.RawConn) error {
	return nil
}
