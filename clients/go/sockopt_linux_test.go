//go:build linux

package lockbroker

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// The socket carries TCP_USER_TIMEOUT (option 18) and keepalive, from the
// ping settings: a peer that stops acknowledging ends the connection.
func TestSocketOptions(t *testing.T) {
	c, _ := connectFake(t, newFakeBroker(t), Config{PingInterval: 2 * time.Second, PingTimeout: 3 * time.Second})
	c.mu.Lock()
	raw := c.conn.raw.(*net.TCPConn)
	c.mu.Unlock()
	rc, err := raw.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var uto, ka, cnt, idle int
	var gerr error
	err = rc.Control(func(fd uintptr) {
		get := func(level, opt int) int {
			v, err := syscall.GetsockoptInt(int(fd), level, opt)
			if err != nil && gerr == nil {
				gerr = err
			}
			return v
		}
		uto = get(syscall.IPPROTO_TCP, tcpUserTimeout)
		ka = get(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		cnt = get(syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT)
		idle = get(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
	})
	if err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if uto != 5000 || ka != 1 || cnt != 3 || idle != 2 {
		t.Fatalf("TCP_USER_TIMEOUT %d ms (want 5000), SO_KEEPALIVE %d, TCP_KEEPCNT %d, TCP_KEEPIDLE %d s (want 2: a third, rounded up)", uto, ka, cnt, idle)
	}
}
