package lockbroker

// A scripted in-process broker for the unit tests of the session: the
// test plays the broker's side line by line (what it must read, what it
// answers, which events it sends, when it drops the connection), on a
// real TCP socket of 127.0.0.1. It speaks only what each test scripts:
// the broker's behaviour is tested against real brokers (integration).

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

const fakeWait = 5 * time.Second // how long the fake waits for a line

type fakeBroker struct {
	t     *testing.T
	ln    net.Listener
	addr  string
	conns chan *fakeConn
}

func newFakeBroker(t *testing.T) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBroker{t: t, ln: ln, addr: ln.Addr().String(), conns: make(chan *fakeConn, 16)}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			fb.conns <- newFakeConn(t, nc)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return fb
}

// accept is the next connection the client makes.
func (fb *fakeBroker) accept() *fakeConn {
	fb.t.Helper()
	select {
	case fc := <-fb.conns:
		return fc
	case <-time.After(fakeWait):
		fb.t.Fatal("the client did not connect")
		return nil
	}
}

type fakeConn struct {
	t     *testing.T
	nc    net.Conn
	lines chan string // closed at EOF
}

func newFakeConn(t *testing.T, nc net.Conn) *fakeConn {
	fc := &fakeConn{t: t, nc: nc, lines: make(chan string, 1024)}
	go func() {
		rd := bufio.NewReader(nc)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				close(fc.lines)
				return
			}
			fc.lines <- strings.TrimRight(l, "\r\n")
		}
	}()
	t.Cleanup(func() { nc.Close() })
	return fc
}

// next is the next line the client sends.
func (fc *fakeConn) next() string {
	fc.t.Helper()
	select {
	case l, ok := <-fc.lines:
		if !ok {
			fc.t.Fatal("the client closed the connection")
		}
		return l
	case <-time.After(fakeWait):
		fc.t.Fatal("the client sent nothing")
	}
	return ""
}

// expect reads the next line: equal to want, or starting with it when
// want ends in "*".
func (fc *fakeConn) expect(want string) string {
	fc.t.Helper()
	got := fc.next()
	if strings.HasSuffix(want, "*") && strings.HasPrefix(got, strings.TrimSuffix(want, "*")) {
		return got
	}
	if got != want {
		fc.t.Fatalf("the client sent %q, want %q", got, want)
	}
	return got
}

// quiet checks the client sends nothing for d.
func (fc *fakeConn) quiet(d time.Duration) {
	fc.t.Helper()
	select {
	case l, ok := <-fc.lines:
		if ok {
			fc.t.Fatalf("the client sent %q, want nothing", l)
		}
	case <-time.After(d):
	}
}

// closed waits until the client closes the connection.
func (fc *fakeConn) closed() {
	fc.t.Helper()
	deadline := time.After(fakeWait)
	for {
		select {
		case _, ok := <-fc.lines:
			if !ok {
				return
			}
		case <-deadline:
			fc.t.Fatal("the client kept the connection open")
		}
	}
}

func (fc *fakeConn) send(lines ...string) {
	fc.t.Helper()
	if _, err := fc.nc.Write([]byte(strings.Join(lines, "\r\n") + "\r\n")); err != nil {
		fc.t.Fatal(err)
	}
}

// hello plays a fresh session's handshake: HELLO GRACE 5000, EVENTS ON.
func (fc *fakeConn) hello(version, cid, secret string) {
	fc.t.Helper()
	fc.expect("HELLO GRACE 5000")
	fc.expect("EVENTS ON")
	fc.send("OK "+cid+" lockbroker/"+version+" "+secret, "OK")
}

// resume plays a RESUME's handshake up to the RESUME line.
func (fc *fakeConn) resume(cid, secret string) {
	fc.t.Helper()
	fc.expect("HELLO")
	fc.expect("EVENTS ON")
	fc.expect("RESUME " + cid + " " + secret)
	fc.send("OK tmp-id lockbroker/1.2.0", "OK")
}

// events records the hook's events.
type events struct {
	mu   sync.Mutex
	seen []ConnEvent
	ch   chan ConnEvent
}

func newEvents() *events { return &events{ch: make(chan ConnEvent, 64)} }

func (e *events) hook(ev ConnEvent) {
	e.mu.Lock()
	e.seen = append(e.seen, ev)
	e.mu.Unlock()
	e.ch <- ev
}

// wait is the next event of kind (others are skipped).
func (e *events) wait(t *testing.T, kind EventKind) ConnEvent {
	t.Helper()
	deadline := time.After(fakeWait)
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v event", kind)
		}
	}
}

// connectFake connects a client to fb, playing the handshake of a 1.2
// broker (client-id cid-1, secret s1).
func connectFake(t *testing.T, fb *fakeBroker, cfg Config) (*Client, *fakeConn) {
	t.Helper()
	cfg.Brokers = append([]string{fb.addr}, cfg.Brokers...)
	type result struct {
		c   *Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := Connect(context.Background(), cfg)
		done <- result{c, err}
	}()
	fc := fb.accept()
	fc.hello("1.2.0", "cid-1", "s1")
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.c.closeNow() })
	return r.c, fc
}

// closeNow ends a test's client without waiting for a QUIT's answer.
func (c *Client) closeNow() {
	c.mu.Lock()
	if c.state == stClosing || c.state == stClosed {
		c.mu.Unlock()
		return
	}
	c.shutdown()
	c.mu.Unlock()
	if c.notify != nil {
		c.notify.close()
	}
}

type lockResult struct {
	h   *Hold
	err error
}

// goLock runs Lock on a goroutine of its own.
func goLock(ctx context.Context, c *Client, key string, opts ...LockOption) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		h, err := c.Lock(ctx, key, opts...)
		ch <- lockResult{h, err}
	}()
	return ch
}

func waitLock(t *testing.T, ch <-chan lockResult) lockResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(fakeWait):
		t.Fatal("Lock did not return")
	}
	return lockResult{}
}

// lockNow takes key through the fake, which grants it with token.
func lockNow(t *testing.T, c *Client, fc *fakeConn, key, token string) *Hold {
	t.Helper()
	ch := goLock(context.Background(), c, key)
	fc.expect("ACQUIRE " + key + " WAIT *")
	fc.send("OK " + token)
	r := waitLock(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.h
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
