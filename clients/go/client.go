package lockbroker

// The Client: one session with a broker, shared by any number of
// goroutines. Requests are written as they come (pipelined) and each reply
// goes to the request it answers; EVENT lines go to the hold, wait or
// watch they name. Everything the session is (holds, queued waits,
// watches, the local key locks, requests in flight) is guarded by one
// mutex, c.mu; the connection's goroutines and the callers take it in turn.

import (
	"context"
	"errors"
	"sort"
	"sync"
)

type clientState int

const (
	stUp           clientState = iota // a connection carries the session
	stReconnecting                    // connecting (again), within the budget
	stDown                            // past the budget: requests fail at once
	stClosing                         // Close sent QUIT
	stClosed
)

// errDropped settles a request nobody waits for when its connection broke.
var errDropped error = &wrapError{"lockbroker: the connection was lost before the reply", ErrConnect}

// Client is a session with a broker (one connection at a time), safe for
// use by any number of goroutines. Make one with Dial or Connect; Close it
// when done.
type Client struct {
	cfg    Config
	notify *notifier
	closed chan struct{} // closed by Close: stops reconnecting

	mu       sync.Mutex
	state    clientState
	conn     *conn  // the connection carrying the session (stUp)
	addrIdx  int    // the broker in use, or tried last
	connGen  uint64 // +1 per connection's handshake
	queued   []req  // to write once a connection is up
	dropped  []req  // in flight when the last connection broke
	holds    map[string]*Hold
	waits    map[string]*acquire // queued waits (OK QUEUED), by key
	watches  map[string]*watchEntry
	local    localLocks
	requeued map[string]bool // EVENT QUEUED after a RESUME
	downErr  error           // why requests fail (stDown)

	clientID string
	secret   string   // the resume secret ("" without a grace session)
	sess     *Session // the session now (nil before the first connection)
	counts   Counters
	version  [3]int
	async    bool // the broker speaks 1.2: ASYNC waits
}

// Dial connects to the broker at addr ("host:port") with the defaults of
// Config: a 5 s grace session, an idle PING after 2 s of silence.
func Dial(ctx context.Context, addr string) (*Client, error) {
	return Connect(ctx, Config{Brokers: []string{addr}})
}

// Connect connects to the first of cfg.Brokers that answers and starts a
// session. It fails with the broker's error (ErrNotAuthenticated: a wrong
// token), ErrVersion (a broker older than protocol 1.2), or ErrConnect
// when no broker could be reached.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// connecting: what the handshake's events ask to send waits for install
	c := &Client{cfg: cfg, closed: make(chan struct{}), state: stReconnecting,
		holds: map[string]*Hold{}, waits: map[string]*acquire{},
		watches: map[string]*watchEntry{}, requeued: map[string]bool{}}
	if cfg.OnEvent != nil || cfg.OnCounter != nil || cfg.Logger != nil {
		c.notify = newNotifier()
	}
	var answered, last error
	for i, addr := range cfg.Brokers {
		actx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
		cn, rs, err := c.attempt(actx, addr, false)
		cancel()
		if err == nil {
			c.mu.Lock()
			c.addrIdx = i
			c.install(cn, rs)
			c.mu.Unlock()
			return c, nil
		}
		last = err
		if answered == nil && !isConnectFailure(err) {
			answered = err // a broker said no (NOAUTH, too old): say that
		}
		if ctx.Err() != nil {
			break
		}
	}
	if c.notify != nil {
		c.notify.close()
	}
	if answered != nil {
		return nil, answered
	}
	return nil, connectError(cfg.Brokers, last)
}

// ClientID is the session's client-id (the owner the broker records).
func (c *Client) ClientID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientID
}

// Session is the client's broker session now. It ends when the client is
// closed or the session is lost (see Session); a new connection after a
// loss starts a new one.
func (c *Client) Session() *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}

// Done is closed when the client's session now ends: Close, or it was lost
// (its connection broke without a grace, a RESUME was refused, no broker
// answered within the reconnect budget). Every hold of it is lost then.
// As etcd's Session.Done. It is Session().Done().
func (c *Client) Done() <-chan struct{} { return c.Session().Done() }

// Err is Session().Err(): nil while the session lives, then why it ended
// (ErrClosed, or an *Error of ErrSessionLost). To read why the session
// whose Done you waited on ended, keep that Session: c.Err() is the next
// one's once a new session has begun.
func (c *Client) Err() error { return c.Session().Err() }

// Counters are the client's counters now (see Counters).
func (c *Client) Counters() Counters {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts
}

// count: one event that moves the counters (name: waits, holds, losses,
// resumes, reconnects), told to the hook. Called with c.mu held.
func (c *Client) count(name, key string, seconds float64) {
	n := &c.counts
	switch name {
	case "waits":
		n.Waits++
		n.WaitSecondsTotal += seconds
	case "holds":
		n.Holds++
		n.HoldSecondsTotal += seconds
	case "losses":
		n.Losses++
	case "resumes":
		n.Resumes++
	case "reconnects":
		n.Reconnects++
	}
	if fn := c.cfg.OnCounter; fn != nil {
		ev := CounterEvent{Name: name, Key: key, Seconds: seconds}
		c.notify.post(func() { fn(ev) })
	}
}

// logf writes to Config.Logger, if any, off c.mu (on the hook's goroutine).
func (c *Client) logf(format string, a ...interface{}) {
	if l := c.cfg.Logger; l != nil {
		c.notify.post(func() { l.Printf("lockbroker: "+format, a...) })
	}
}

// Version is the protocol version the broker in use speaks (1.2.0).
func (c *Client) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return versionString(c.version)
}

// Broker is the address of the broker in use (or tried last).
func (c *Client) Broker() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.Brokers[c.addrIdx]
}

// usable says why a request cannot be made now (nil: it can).
func (c *Client) usable() error {
	switch c.state {
	case stDown:
		return c.downErr
	case stClosing, stClosed:
		return ErrClosed
	}
	return nil
}

// submit queues r: written at once on a live connection (by the
// connection's writer goroutine), else when the next one is up; failed at
// once when none can be (closed, down).
func (c *Client) submit(r req) {
	if c.place(r) {
		c.conn.cond.Signal()
	}
}

// submitOwn queues r for a caller that writes it itself (flush, once it
// let c.mu go): one goroutine hand-off less per request.
func (c *Client) submitOwn(r req) { c.place(r) }

// place puts r on the connection's output, or where it waits or fails;
// true when it went to the output.
func (c *Client) place(r req) bool {
	switch c.state {
	case stUp:
		c.conn.send(r)
		return true
	case stReconnecting:
		c.queued = append(c.queued, r)
	case stClosing:
		if c.conn != nil {
			c.conn.send(r)
			return true
		}
		r.fail(c, ErrClosed)
	case stDown:
		r.fail(c, c.downErr)
	default:
		r.fail(c, ErrClosed)
	}
	return false
}

// flush writes the connection's output on the caller's goroutine, unless
// a write is under way (the writer goroutine then writes it next). Called
// without c.mu.
func (c *Client) flush() {
	c.mu.Lock()
	cn := c.conn
	if cn == nil || cn.writing || len(cn.out) == 0 {
		c.mu.Unlock()
		return
	}
	err := cn.writeBatch()
	c.mu.Unlock()
	if err != nil {
		c.connLost(cn, err)
	}
}

// roundTrip sends a request and waits for its reply line (OK or BUSY; an
// ERR is its error). A caller whose ctx ends stops waiting; the request
// still goes (its reply is dropped).
func (c *Client) roundTrip(ctx context.Context, r *call) (string, error) {
	c.mu.Lock()
	if err := c.usable(); err != nil {
		c.mu.Unlock()
		return "", err
	}
	return c.sendAndWait(ctx, r)
}

// sendAndWait sends r for a caller holding c.mu (let go here) and waits
// for its reply, or for ctx to end (the request still goes).
func (c *Client) sendAndWait(ctx context.Context, r *call) (string, error) {
	c.submitOwn(r)
	c.mu.Unlock()
	c.flush()
	select {
	case <-r.done:
		return r.result, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// dispatch: one line read from cn. An error ends the connection.
func (c *Client) dispatch(cn *conn, line string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn.lost {
		return nil
	}
	if isEvent(line) {
		ev, err := parseEvent(line)
		if err != nil {
			return err
		}
		c.handleEvent(ev)
		return nil
	}
	if line == "" {
		return nil
	}
	if replyWord(line) == "" {
		return protoError("not a reply: %q", line)
	}
	r, ok := cn.pending.pop()
	if !ok {
		return protoError("a reply nobody asked for: %q", line)
	}
	if r.blocks() {
		cn.blocking--
	}
	r.reply(c, line)
	return nil
}

// handleEvent routes an EVENT line to what it names.
func (c *Client) handleEvent(ev event) {
	switch ev.kind {
	case "LOST":
		// EVENT LOST <key> <token>: that hold, not an earlier one's news
		if h := c.holds[ev.key]; h != nil && len(ev.args) > 0 && ev.args[0] == formatToken(h.token) {
			c.lose(h, "", ev.line, nil)
		}
	case "GRANTED", "TIMEOUT", "FAILED":
		if a := c.findWait(ev.key); a != nil {
			a.event(c, ev)
		} else if ev.kind == "GRANTED" {
			c.strayRelease(ev.key)
		}
	case "QUEUED":
		c.requeued[ev.key] = true
	case "HOLDER", "FREE":
		if e := c.watches[ev.key]; e != nil {
			if s, err := watchState(ev); err == nil {
				e.changed(s)
			}
		}
	}
}

// findWait is the wait an outcome event names: a queued one, or while a
// new connection is settled, one whose OK QUEUED the old one lost.
func (c *Client) findWait(key string) *acquire {
	if a := c.waits[key]; a != nil {
		return a
	}
	for _, r := range c.dropped {
		if a, ok := r.(*acquire); ok && a.key == key && a.state != aDone {
			return a
		}
	}
	return nil
}

// strayRelease gives back a grant nobody here holds (its caller gave up,
// or a RESUME listed a key whose OK was lost with the connection).
func (c *Client) strayRelease(key string) {
	if c.holds[key] != nil {
		return
	}
	c.submit(&call{op: opStray, line: "RELEASE " + key, key: key, internal: true})
}

// localRelease passes key's local lock to the next Lock of this client.
func (c *Client) localRelease(key string) {
	if w := c.local.release(key); w != nil {
		a := w.(*acquire)
		a.hasLocal = true
		a.state = aNew
		c.submit(a)
	}
}

// startAcquire puts a behind the key's local lock, or queues it for the
// caller to flush.
func (c *Client) startAcquire(a *acquire) {
	if c.local.take(a.key) {
		a.hasLocal = true
		a.state = aNew
		c.submitOwn(a) // the caller flushes
		return
	}
	if a.try {
		a.state = aDone
		a.settle(nil, busyError(a.key))
		return
	}
	a.state = aLocal
	c.local.wait(a.key, a)
}

// Ping asks the broker for OK PONG.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.roundTrip(ctx, newCall(opPlain, "PING", ""))
	return err
}

// Owner says who holds key, on any broker of the same Redis and prefix
// (OWNER <key> VALUE: with the exclusive holder's value).
func (c *Client) Owner(ctx context.Context, key string) (KeyState, error) {
	if err := checkKey(key); err != nil {
		return KeyState{}, err
	}
	c.mu.Lock()
	line := "OWNER " + key
	if c.async {
		line += " VALUE"
	}
	c.mu.Unlock()
	reply, err := c.roundTrip(ctx, newCall(opPlain, line, key))
	if err != nil {
		return KeyState{}, err
	}
	return parseOwner(reply)
}

// Check says whether token's hold of key is alive in Redis now (CHECK):
// a resource can ask before it accepts a write. Protocol 1.2.
func (c *Client) Check(ctx context.Context, key string, token uint64) (CheckResult, error) {
	if err := checkKey(key); err != nil {
		return CheckResult{}, err
	}
	if token == 0 || token > maxToken {
		return CheckResult{}, argError("a token is 1..2^53-1, not %d", token)
	}
	reply, err := c.roundTrip(ctx, newCall(opPlain, "CHECK "+key+" "+formatToken(token), key))
	if err != nil {
		return CheckResult{}, err
	}
	res, err := parseCheck(reply)
	if err == nil && res.Current {
		res.Token = token
	}
	return res, err
}

// Held lists the keys the session holds, as the broker knows them.
func (c *Client) Held(ctx context.Context) ([]string, error) {
	reply, err := c.roundTrip(ctx, newCall(opPlain, "HELD", ""))
	if err != nil {
		return nil, err
	}
	keys, err := parseList(reply)
	sort.Strings(keys)
	return keys, err
}

// Stats is the broker's STATS, by name.
func (c *Client) Stats(ctx context.Context) (map[string]string, error) {
	reply, err := c.roundTrip(ctx, newCall(opPlain, "STATS", ""))
	if err != nil {
		return nil, err
	}
	return parseStats(reply)
}

// Close ends the session (QUIT: the broker releases every hold at once)
// and the connection, waiting at most PingTimeout for QUIT's answer. Every
// hold's context is cancelled (Err: ErrClosed), waits and watches end.
// Calls after Close fail with ErrClosed.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.PingTimeout)
	defer cancel()
	return c.Shutdown(ctx)
}

// Shutdown is Close, waiting for QUIT's answer until ctx ends (then the
// connection is closed all the same: the broker releases the session's
// holds when it notices).
func (c *Client) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.state == stClosing || c.state == stClosed {
		c.mu.Unlock()
		<-c.closed
		return nil
	}
	var quit *call
	if c.state == stUp {
		quit = newCall(opQuit, "QUIT", "")
		c.submitOwn(quit)
	}
	c.state = stClosing
	c.mu.Unlock()
	if quit != nil {
		c.flush()
		select {
		case <-quit.done:
		case <-ctx.Done():
		}
	}
	c.mu.Lock()
	c.shutdown()
	c.mu.Unlock()
	if c.notify != nil {
		c.notify.close()
	}
	return nil
}

// shutdown ends everything with ErrClosed (Close, with c.mu held).
func (c *Client) shutdown() {
	c.state = stClosed
	close(c.closed)
	if cn := c.conn; cn != nil {
		c.conn = nil
		cn.close()
		c.dropped = append(c.dropped, cn.pending.drain()...)
	}
	reqs := append(c.dropped, c.queued...)
	c.dropped, c.queued = nil, nil
	for _, r := range reqs {
		r.fail(c, ErrClosed)
	}
	for _, a := range c.waits {
		a.finish(c, ErrClosed)
	}
	c.local.each(func(w localWaiter) { w.(*acquire).finish(c, ErrClosed) })
	for _, h := range c.holds {
		c.endHold(h, ErrClosed)
	}
	if c.sess != nil {
		c.sess.end(ErrClosed)
	}
	for _, e := range c.watches {
		e.end(ErrClosed)
	}
	c.watches = map[string]*watchEntry{}
}

// emit posts a connection event to the hook (in order, off c.mu).
func (c *Client) emit(kind EventKind, addr string, err error) {
	if c.cfg.OnEvent == nil {
		return
	}
	fn, ev := c.cfg.OnEvent, ConnEvent{Kind: kind, Broker: addr, Err: err}
	c.notify.post(func() { fn(ev) })
}

func formatToken(t uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + t%10)
		t /= 10
		if t == 0 {
			break
		}
	}
	return string(b[i:])
}

// isConnectFailure: the attempt reached no broker that answered (as
// opposed to one that said no: a wrong token, too old a version).
func isConnectFailure(err error) bool {
	var e *Error
	return !(errors.As(err, &e) && e.Code != "") && !errors.Is(err, ErrVersion)
}
