package lockbroker

// A session across connections. A connection starts with a handshake
// (AUTH, HELLO [GRACE], EVENTS ON, and after a break RESUME) before it
// carries callers' requests. When a connection breaks, the client
// connects to the next broker of its list (any broker of the same Redis
// and prefix) and resumes the grace session there, retrying with backoff
// within the reconnect budget. Then it settles what the old connection
// left: a hold RESUME does not list is lost; a key it lists that no hold
// here knows of (its OK was lost with the connection) is released; waits
// the broker does not say QUEUED for are asked again; requests in flight
// are sent again where that is safe. A session that cannot be resumed is
// replaced by a new one: every hold is reported lost, waits and watches
// are asked again.
//
// A Session is one broker session of the client (a client-id and the holds
// it took). It ends the moment the client knows it is gone: Close, a
// connection that broke without a grace, a RESUME refused, the reconnect
// budget spent. A new connection after that starts a new Session.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"time"
)

// Session is one broker session of a client: its client-id, and a Done
// channel closed when it ends (Close, or the session was lost: every hold
// it had is lost then). Like etcd's concurrency.Session. A client that
// lost its session starts a new one on its next connection: call
// Client.Session (or Done) again for that one.
type Session struct {
	id   string
	done chan struct{}
	err  error // set once, before done is closed
}

func newSession(id string) *Session { return &Session{id: id, done: make(chan struct{})} }

// ClientID is the session's client-id (the owner the broker records).
func (s *Session) ClientID() string { return s.id }

// Done is closed when the session ends.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives; once Done is closed, why it ended:
// ErrClosed, or an *Error of ErrSessionLost saying how it was lost.
func (s *Session) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// end ends the session with err, once. Called with c.mu held.
func (s *Session) end(err error) {
	select {
	case <-s.done:
	default:
		s.err = err
		close(s.done)
	}
}

// attempt connects to addr and runs the handshake (resume: RESUME the
// session if it has a grace). The connection is not the session's yet.
func (c *Client) attempt(ctx context.Context, addr string, resume bool) (*conn, *resumeInfo, error) {
	cn, err := dialConn(ctx, c, addr)
	if err != nil {
		return nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = cn.nc.SetDeadline(dl)
	}
	rs, err := c.handshake(cn, resume)
	if err == nil {
		err = cn.nc.SetDeadline(time.Time{})
	}
	if err != nil {
		cn.raw.Close()
		return nil, nil, err
	}
	return cn, rs, nil
}

// handshake runs on a connection nobody else uses yet. Events that come
// (after a RESUME: QUEUED, outcomes, LOST, watch states) are routed as
// usual.
func (c *Client) handshake(cn *conn, resume bool) (*resumeInfo, error) {
	cfg := c.cfg
	c.mu.Lock()
	cid, secret := c.clientID, c.secret
	c.connGen++
	c.requeued = map[string]bool{}
	c.mu.Unlock()
	resume = resume && cfg.Grace > 0 && secret != ""

	var lines []string
	if cfg.Auth != "" {
		lines = append(lines, "AUTH "+cfg.Auth)
	}
	if resume {
		lines = append(lines, helloLine(cfg.Name, 0)) // the version; the session is RESUME's
	} else {
		lines = append(lines, helloLine(cfg.Name, cfg.Grace))
	}
	lines = append(lines, "EVENTS ON")
	if resume {
		lines = append(lines, "RESUME "+cid+" "+secret)
	}
	if err := cn.writeLines(lines); err != nil {
		return nil, err
	}
	if cfg.Auth != "" {
		line, err := c.handshakeReply(cn)
		if err != nil {
			return nil, err
		}
		if line != "OK" {
			return nil, errorFromReply(line, "AUTH")
		}
	}
	helloAnswer, err := c.handshakeReply(cn)
	if err != nil {
		return nil, err
	}
	if line, err := c.handshakeReply(cn); err != nil {
		return nil, err
	} else if line != "OK" {
		return nil, errorFromReply(line, "EVENTS ON")
	}
	rs := &resumeInfo{listed: map[string]bool{}}
	if resume {
		hello, err := c.checkHello(cn, helloAnswer)
		if err != nil {
			return nil, err
		}
		line, err := c.handshakeReply(cn)
		if err != nil {
			return nil, err
		}
		if keys, lerr := parseList(line); lerr == nil {
			// the events RESUME sends come after its OK: a PING's answer
			// comes after them all
			if err := cn.writeLines([]string{"PING"}); err != nil {
				return nil, err
			}
			if _, err := c.handshakeReply(cn); err != nil {
				return nil, err
			}
			for _, k := range keys {
				rs.listed[k] = true
			}
			rs.resumed = true
			c.mu.Lock()
			c.version, c.async = hello.version, versionAtLeast(hello.version, minVersion)
			c.mu.Unlock()
			return rs, nil
		}
		rerr := errorFromReply(line, "RESUME")
		if errors.Is(rerr, ErrUnavailable) || errors.Is(rerr, ErrProtocolError) {
			return nil, rerr // worth another try
		}
		// NOSESSION (the grace ran out, or never was), a wrong secret, ...:
		// a new session on this connection
		rs.reason = rerr
		if err := cn.writeLines([]string{helloLine(cfg.Name, cfg.Grace)}); err != nil {
			return nil, err
		}
		if helloAnswer, err = c.handshakeReply(cn); err != nil {
			return nil, err
		}
	}
	if cfg.Grace > 0 && !isOK(helloAnswer) {
		// GRACE refused (max_grace_ms 0, or Redis did not record it): a
		// session without one
		if err := cn.writeLines([]string{helloLine(cfg.Name, 0)}); err != nil {
			return nil, err
		}
		if helloAnswer, err = c.handshakeReply(cn); err != nil {
			return nil, err
		}
	}
	hello, err := c.checkHello(cn, helloAnswer)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.clientID, c.secret = hello.clientID, hello.secret
	c.version, c.async = hello.version, versionAtLeast(hello.version, minVersion)
	c.mu.Unlock()
	return rs, nil
}

func isOK(line string) bool { return line == "OK" || (len(line) > 3 && line[:3] == "OK ") }

// checkHello reads HELLO's answer and refuses a broker older than 1.2.
func (c *Client) checkHello(cn *conn, line string) (helloReply, error) {
	if !isOK(line) {
		return helloReply{}, errorFromReply(line, "HELLO")
	}
	h, err := parseHello(line)
	if err != nil {
		return h, err
	}
	if !versionAtLeast(h.version, minVersion) && !c.cfg.AllowOldBroker {
		return h, fmt.Errorf("%w: %s speaks lockbroker/%s; this library needs protocol %d.%d or later",
			ErrVersion, cn.addr, versionString(h.version), minVersion[0], minVersion[1])
	}
	return h, nil
}

// handshakeReply reads the next reply line, routing events on the way.
func (c *Client) handshakeReply(cn *conn) (string, error) {
	for {
		line, err := cn.readLine()
		if err != nil {
			return "", err
		}
		if !isEvent(line) {
			if line == "" {
				continue
			}
			return line, nil
		}
		ev, err := parseEvent(line)
		if err != nil {
			return "", err
		}
		c.mu.Lock()
		c.handleEvent(ev)
		c.mu.Unlock()
	}
}

// install makes cn the session's connection, after settling what the
// last one left. Called with c.mu held.
func (c *Client) install(cn *conn, rs *resumeInfo) {
	first := c.sess == nil
	wasDown := c.state == stDown
	front := c.reconcile(rs)
	if !rs.resumed {
		c.sess = newSession(c.clientID)
	}
	c.conn, c.state, c.downErr = cn, stUp, nil
	for _, r := range front {
		cn.send(r)
	}
	queued := c.queued
	c.queued = nil
	for _, r := range queued {
		cn.send(r)
	}
	cn.start()
	if !first {
		c.count("reconnects", "", 0)
	}
	switch {
	case first:
		c.logf("connected to %s: session %s (lockbroker/%s, grace %v)", cn.addr, c.clientID,
			versionString(c.version), c.graceNow())
		c.emit(Connected, cn.addr, nil)
	case rs.resumed:
		c.count("resumes", "", 0)
		c.logf("session %s resumed on %s, holding %d keys", c.clientID, cn.addr, len(rs.listed))
		c.emit(Resumed, cn.addr, nil)
	default:
		why := rs.reason
		if why == nil && wasDown {
			why = errors.New("the session was given up after the reconnect budget")
		}
		c.logf("new session %s on %s (the last one was lost: %v)", c.clientID, cn.addr, why)
		c.emit(NewSession, cn.addr, why)
	}
}

// graceNow is the grace the session has (0: none).
func (c *Client) graceNow() time.Duration {
	if c.secret == "" {
		return 0
	}
	return c.cfg.Grace
}

// reconcile settles what the last connection left (see the file comment)
// and returns the requests to send first on the new one.
func (c *Client) reconcile(rs *resumeInfo) []req {
	var front []req
	if !rs.resumed {
		// before the requests the old connection left are settled: a
		// RELEASE on its way is then the loss it is, not a release
		if rs.reason != nil {
			c.endSession("the session could not be resumed", rs.reason)
		} else {
			c.endSession("the connection was lost, and the session with it", nil)
		}
	}
	if rs.resumed {
		releasing := map[string]bool{}
		for _, r := range c.dropped {
			if cl, ok := r.(*call); ok && cl.op == opRelease {
				releasing[cl.key] = true
			}
		}
		for key, h := range c.holds {
			// a hold granted on this connection (a wait's EVENT GRANTED
			// after the RESUME) is not in its list
			if h.gen < c.connGen && !rs.listed[key] && !releasing[key] {
				c.lose(h, "the resumed session no longer held it", "", nil)
			}
		}
		keys := make([]string, 0, len(rs.listed))
		for k := range rs.listed {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, key := range keys {
			if c.holds[key] == nil {
				front = append(front, &call{op: opStray, line: "RELEASE " + key, key: key, internal: true})
			}
		}
	}
	for key, a := range c.waits {
		delete(c.waits, key)
		if a.dropped(c, rs) { // (still queued in the broker: back in c.waits)
			front = append(front, a)
		}
	}
	dropped := c.dropped
	c.dropped = nil
	rewatch := map[string]bool{}
	for _, r := range dropped {
		if r.dropped(c, rs) {
			front = append(front, r)
			if cl, ok := r.(*call); ok && cl.op == opWatch {
				rewatch[cl.key] = true
			}
		}
	}
	if rs.resumed {
		// a wait the broker still queues that nobody here wants any more
		for key := range c.requeued {
			if c.waits[key] == nil {
				front = append(front, &call{op: opCancel, line: "CANCEL " + key, key: key, internal: true})
			}
		}
	} else {
		for key, e := range c.watches {
			if !rewatch[key] {
				front = append(front, &call{op: opWatch, line: "WATCH " + key, key: key, entry: e, internal: true})
			}
		}
	}
	c.requeued = map[string]bool{}
	return front
}

// endSession: the session is gone (how: text; why: cause); every hold of
// it is lost, and its Done is closed. Once per session: a session ended
// already (its connection had no grace) is not told again.
func (c *Client) endSession(text string, cause error) {
	if c.sess == nil || c.sess.Err() != nil {
		return
	}
	err := &Error{Kind: ErrSessionLost, Text: text, Err: cause}
	for _, h := range c.holds {
		c.lose(h, text, "", err)
	}
	c.sess.end(err)
}

// connLost: cn broke (read or write error, no answer to PING, a line
// that is not the protocol). The client reconnects.
func (c *Client) connLost(cn *conn, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn.lost {
		return
	}
	cn.close()
	if c.conn != cn {
		return
	}
	c.conn = nil
	c.dropped = append(c.dropped, cn.pending.drain()...)
	switch c.state {
	case stClosing:
		reqs := c.dropped
		c.dropped = nil
		for _, r := range reqs {
			r.fail(c, ErrClosed)
		}
	case stUp:
		c.state = stReconnecting
		c.emit(Disconnected, cn.addr, err)
		if c.secret == "" {
			// no grace: the broker ended the session with the connection
			c.logf("connection to %s lost (%v); the session had no grace: its holds are lost", cn.addr, err)
			c.endSession("the connection dropped and the session had no grace", err)
		} else {
			c.logf("connection to %s lost (%v); resuming the session", cn.addr, err)
		}
		go c.reconnect()
	}
}

// reconnect tries the brokers in turn, starting with the next one after
// the broker that was lost, until one takes the session (resumed, or a new
// one). Past the budget it gives the session up (giveUp) and goes on
// trying, less often.
func (c *Client) reconnect() {
	cfg := c.cfg
	n := len(cfg.Brokers)
	start := time.Now()
	pause, maxPause := 50*time.Millisecond, time.Second
	c.mu.Lock()
	idx := c.addrIdx
	c.mu.Unlock()
	given := false
	for i := 1; ; i++ {
		select {
		case <-c.closed:
			return
		default:
		}
		idx = (idx + 1) % n
		ctx, cancel := context.WithTimeout(context.Background(), cfg.DialTimeout)
		cn, rs, err := c.attempt(ctx, cfg.Brokers[idx], true)
		cancel()
		if err == nil {
			c.mu.Lock()
			if c.state == stClosing || c.state == stClosed {
				c.mu.Unlock()
				cn.raw.Close()
				return
			}
			c.addrIdx = idx
			c.install(cn, rs)
			c.mu.Unlock()
			return
		}
		if !given && time.Since(start) >= cfg.ReconnectBudget {
			given = true
			maxPause = 5 * time.Second
			c.mu.Lock()
			c.giveUp(connectError(cfg.Brokers, err))
			c.mu.Unlock()
		}
		if i%n != 0 {
			continue // the next broker at once; a pause after each round
		}
		// jitter: clients cut off together do not come back in step
		d := pause/2 + time.Duration(rand.Int63n(int64(pause)))
		t := time.NewTimer(d)
		select {
		case <-c.closed:
			t.Stop()
			return
		case <-t.C:
		}
		if pause *= 2; pause > maxPause {
			pause = maxPause
		}
	}
}

// giveUp: the reconnect budget ran out. Every hold is lost, every request
// fails with err, and so do new ones until a connection is made.
func (c *Client) giveUp(err error) {
	if c.state != stReconnecting {
		return
	}
	c.state, c.downErr = stDown, err
	c.logf("no broker could be reached within %v (%v): the session and its holds are lost; trying on",
		c.cfg.ReconnectBudget, err)
	c.endSession("no broker could be reached within the reconnect budget", err)
	// what was waiting fails with the session's end (it matches err too)
	gone := c.sess.Err()
	reqs := append(c.dropped, c.queued...)
	c.dropped, c.queued = nil, nil
	for _, a := range c.waits {
		a.finish(c, gone)
	}
	for _, r := range reqs {
		r.fail(c, gone)
	}
	c.emit(ReconnectFailed, "", err)
}
