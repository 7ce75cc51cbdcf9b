package lockbroker

// One connection to one broker: the socket (plain or TLS, with keepalive
// and TCP_USER_TIMEOUT), the requests written on it and not answered yet,
// and its three goroutines: a reader (each line to Client.dispatch), a
// writer (the bytes callers queued, in the order they queued them) and a
// pinger (an idle PING with a reply deadline). A connection is used once:
// when it breaks, the client makes a new one.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// maxReplyLine bounds one line from the broker (a HELD or RESUME answer
// lists keys: 16 MiB is far above any broker limit).
const maxReplyLine = 16 << 20

type conn struct {
	c    *Client
	addr string
	nc   net.Conn // the stream: TLS or the socket itself
	raw  net.Conn // the socket: closed to end the connection at once
	rd   *bufio.Reader
	born time.Time
	// when bytes last came from the broker, as time since born (pinger):
	// a long reply still arriving is no silence
	lastRead atomic.Int64
	done     chan struct{} // closed when the connection is lost

	// guarded by c.mu
	pending  fifo   // written (or queued to write), not answered
	out      []byte // queued for the writer
	spare    []byte
	cond     *sync.Cond // on c.mu: out has bytes, or lost
	writing  bool       // a goroutine writes (out is the next batch)
	lost     bool
	blocking int // 1.1 blocking waits in flight: the PING would wait behind them
}

// dialConn connects to addr: TCP with the liveness options, then TLS.
func dialConn(ctx context.Context, c *Client, addr string) (*conn, error) {
	cfg := c.cfg
	dead := cfg.deadAfter()
	idle := dead / 3
	if idle < time.Second {
		idle = time.Second
	}
	d := net.Dialer{KeepAlive: idle, Control: socketControl(dead)}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	nc := raw
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		if tc.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				tc.ServerName = host
			}
		}
		t := tls.Client(raw, tc)
		if err := t.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		nc = t
	}
	cn := &conn{c: c, addr: addr, nc: nc, raw: raw, born: time.Now(), done: make(chan struct{})}
	cn.rd = bufio.NewReaderSize(liveReader{cn}, 64<<10)
	cn.cond = sync.NewCond(&c.mu)
	return cn, nil
}

// liveReader is what the line reader reads from: every read that brings
// bytes sets lastRead, whether or not they end a line.
type liveReader struct{ cn *conn }

func (r liveReader) Read(p []byte) (int, error) {
	n, err := r.cn.nc.Read(p)
	if n > 0 {
		r.cn.lastRead.Store(int64(time.Since(r.cn.born)))
	}
	return n, err
}

// readLine reads one line, without its CR LF.
func (cn *conn) readLine() (string, error) {
	line, err := cn.rd.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			if len(long) > maxReplyLine {
				return "", protoError("a line from the broker over %d bytes", maxReplyLine)
			}
			line, err = cn.rd.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil {
		if err == io.EOF {
			err = errors.New("the broker closed the connection")
		}
		return "", err
	}
	n := len(line) - 1
	if n > 0 && line[n-1] == '\r' {
		n--
	}
	return string(line[:n]), nil
}

// send puts r on this connection: its line on the output, r in line for
// its reply. Someone must then write the output: the writer goroutine
// (cond.Signal) or the caller (Client.flush). Called with c.mu held.
func (cn *conn) send(r req) {
	text, ok := r.text(cn.c)
	if !ok {
		return
	}
	cn.pending.push(r)
	if r.blocks() {
		cn.blocking++
	}
	cn.out = append(cn.out, text...)
	cn.out = append(cn.out, '\n')
}

// writeBatch writes the output: taken under c.mu, written without it,
// its buffer given back under it. One write at a time (writing) keeps the
// lines in order; lines queued meanwhile go in the next batch. Called, and
// returns, with c.mu held.
func (cn *conn) writeBatch() error {
	buf := cn.out
	cn.out, cn.spare = cn.spare[:0], nil
	cn.writing = true
	cn.c.mu.Unlock()
	_, err := cn.nc.Write(buf)
	cn.c.mu.Lock()
	cn.writing = false
	cn.spare = buf[:0]
	if len(cn.out) > 0 {
		cn.cond.Signal()
	}
	return err
}

// start runs the connection's goroutines; called once it carries the
// session (after the handshake).
func (cn *conn) start() {
	go cn.readLoop()
	go cn.writeLoop()
	go cn.pingLoop()
}

func (cn *conn) readLoop() {
	for {
		line, err := cn.readLine()
		if err != nil {
			cn.c.connLost(cn, err)
			return
		}
		if err := cn.c.dispatch(cn, line); err != nil {
			cn.c.connLost(cn, err)
			return
		}
	}
}

func (cn *conn) writeLoop() {
	c := cn.c
	c.mu.Lock()
	for {
		for (len(cn.out) == 0 || cn.writing) && !cn.lost {
			cn.cond.Wait()
		}
		if cn.lost {
			c.mu.Unlock()
			return
		}
		if err := cn.writeBatch(); err != nil {
			c.mu.Unlock()
			c.connLost(cn, err)
			return
		}
	}
}

// pingLoop: after PingInterval without a byte from the broker, PING; if
// PingTimeout passes after it without any, the connection is dead (a
// broker that stopped answering keeps its TCP connection open: only this
// notices it). A 1.1 blocking wait holds the PING's answer back: no PING
// goes out while one is in flight.
func (cn *conn) pingLoop() {
	c := cn.c
	every, deadline := c.cfg.PingInterval, c.cfg.PingTimeout
	if every < 0 {
		return
	}
	t := time.NewTimer(every)
	defer t.Stop()
	pingAt := time.Duration(-1) // since born; -1: no PING outstanding
	for {
		select {
		case <-t.C:
		case <-cn.done:
			return
		}
		now := time.Since(cn.born)
		last := time.Duration(cn.lastRead.Load())
		if pingAt >= 0 {
			if last < pingAt {
				if now-pingAt >= deadline {
					c.connLost(cn, fmt.Errorf("no answer to PING within %v", deadline))
					return
				}
				t.Reset(pingAt + deadline - now)
				continue
			}
			pingAt = -1
		}
		if idle := now - last; idle < every {
			t.Reset(every - idle)
			continue
		}
		c.mu.Lock()
		ok := !cn.lost && cn.blocking == 0
		if ok {
			cn.send(&call{op: opPing, line: "PING", internal: true})
			cn.cond.Signal()
		}
		c.mu.Unlock()
		if ok {
			pingAt = now
			t.Reset(deadline)
		} else {
			t.Reset(every)
		}
	}
}

// close ends the connection at once (the socket, under any TLS).
// Called with c.mu held, once.
func (cn *conn) close() {
	cn.lost = true
	cn.cond.Broadcast()
	close(cn.done)
	cn.raw.Close()
}

// handshakeIO: the handshake writes and reads the connection itself,
// before its goroutines run, within the attempt's deadline.
func (cn *conn) writeLines(lines []string) error {
	var b []byte
	for _, l := range lines {
		b = append(b, l...)
		b = append(b, '\n')
	}
	_, err := cn.nc.Write(b)
	return err
}

// fifo is the queue of requests waiting for their replies.
type fifo struct {
	items []req
	head  int
}

func (f *fifo) push(r req) { f.items = append(f.items, r) }

func (f *fifo) pop() (req, bool) {
	if f.head == len(f.items) {
		return nil, false
	}
	r := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	switch {
	case f.head == len(f.items):
		f.items, f.head = f.items[:0], 0
	case f.head >= 1024 && f.head*2 >= len(f.items):
		n := copy(f.items, f.items[f.head:])
		for i := n; i < len(f.items); i++ {
			f.items[i] = nil
		}
		f.items, f.head = f.items[:n], 0
	}
	return r, true
}

func (f *fifo) len() int { return len(f.items) - f.head }

// drain empties the queue, oldest first.
func (f *fifo) drain() []req {
	out := append([]req(nil), f.items[f.head:]...)
	f.items, f.head = nil, 0
	return out
}
