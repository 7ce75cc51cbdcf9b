package lockbroker

// Holds: Client.Lock and what it returns. A Hold has its fencing token, a
// context that is cancelled when the hold ends (lost, unlocked, the client
// closed) and a Lost channel closed when it is lost; Err says why it
// ended. Mutex is the same with the shape of etcd's concurrency.Mutex.
// "The same task" (the package comment) is the hold's context: Lock looks
// for a live hold of its key among its context's values (holdMarker).

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Hold is one hold of a key by a client's session. Safe for concurrent use.
type Hold struct {
	c      *Client
	key    string
	token  uint64
	kind   Kind
	limit  int
	gen    uint64    // the connection it was granted on
	since  time.Time // when it was granted
	ctx    context.Context
	cancel context.CancelFunc
	lostCh chan struct{}

	// guarded by c.mu
	value     string
	err       error // nil while held; an *Error of ErrLockLost, ErrReleased, ErrClosed
	unlocking bool
	hasLocal  bool // holds the key's local lock
}

// holdMarker is the context key under which a hold's context carries it.
type holdMarker struct {
	c   *Client
	key string
}

// Lock takes key and returns the hold. It waits as long as ctx allows (no
// deadline: until granted) while another session, or another goroutine
// of this client, holds the key; the wait is the broker's (ACQUIRE ...
// WAIT <what is left of ctx's deadline> ASYNC), and when ctx ends first the
// broker is told CANCEL and Lock returns ErrLockTimeout (deadline) or
// ErrCancelled. Options: WithShared, WithLimit, WithTTL, WithValue.
//
// The hold's Context carries ctx's values. Lock from a context under this
// client's live hold of key fails at once with ErrUsage (see the package
// comment: the context is the task).
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Hold, error) {
	return c.lock(ctx, key, false, nil, opts)
}

// TryLock takes key if it is free now: ErrBusy if another session, or
// another goroutine of this client, holds it.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Hold, error) {
	return c.lock(ctx, key, true, nil, opts)
}

func (c *Client) lock(ctx context.Context, key string, try bool, m *Mutex, opts []LockOption) (*Hold, error) {
	spec := lockSpec{kind: Exclusive}
	for _, o := range opts {
		o(&spec)
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := spec.check(); err != nil {
		return nil, err
	}
	if h, _ := ctx.Value(holdMarker{c, key}).(*Hold); h != nil && h.Err() == nil {
		return nil, usageError("%s is held under this context already (its hold's context): a second Lock by the same task would wait for itself", key)
	}
	if err := ctx.Err(); err != nil {
		return nil, ctxError(key, err)
	}
	a := &acquire{key: key, spec: spec, try: try, parent: ctx, mutex: m, done: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok && !try {
		a.deadline = dl
	}
	start := time.Now()
	defer func() {
		c.mu.Lock()
		c.count("waits", key, time.Since(start).Seconds())
		c.mu.Unlock()
	}()
	c.mu.Lock()
	if err := c.usable(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.startAcquire(a)
	c.mu.Unlock()
	c.flush()
	select {
	case <-a.done:
	case <-ctx.Done():
		c.mu.Lock()
		a.cancel(c, ctxError(key, ctx.Err())) // a grant that came first stays
		c.mu.Unlock()
	}
	return a.hold, a.err
}

func ctxError(key string, err error) error {
	if err == context.DeadlineExceeded {
		return timeoutError(key)
	}
	return keyError(key, ErrCancelled, "the wait was cancelled (its context ended)")
}

// newHold: a granted. Called with c.mu held.
func (c *Client) newHold(a *acquire, tok uint64) *Hold {
	h := &Hold{c: c, key: a.key, token: tok, kind: a.spec.kind, limit: a.spec.limit,
		value: a.spec.value, gen: c.connGen, since: time.Now(), lostCh: make(chan struct{})}
	parent := a.parent
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(valuesOnly{parent})
	h.ctx, h.cancel = context.WithValue(ctx, holdMarker{c, a.key}, h), cancel
	h.hasLocal, a.hasLocal = a.hasLocal, false
	c.holds[a.key] = h
	return h
}

// lose: the hold is gone: why says how the library learnt it ("" for the
// broker's word, whose line is reply), cause is the session's end if that
// was it. Its context is cancelled, Lost closed, and the key is free for
// this client's other goroutines: the broker holds nothing for it any
// more. Counted and logged. Called with c.mu held.
func (c *Client) lose(h *Hold, why, reply string, cause error) {
	if h.err != nil {
		return
	}
	err := lostError(h.key, h.token, why, reply, cause)
	h.err = err
	close(h.lostCh)
	h.cancel()
	c.count("losses", h.key, 0)
	c.holdEnded(h)
	c.logf("%v", err)
	c.forget(h)
}

// endHold: the hold ended without a loss (why: ErrReleased, ErrClosed).
func (c *Client) endHold(h *Hold, why error) {
	if h.err == nil {
		h.err = why
		h.cancel()
		c.holdEnded(h)
	}
	c.forget(h)
}

// holdEnded counts a hold that ended (released, lost, closed), once.
func (c *Client) holdEnded(h *Hold) {
	c.count("holds", h.key, time.Since(h.since).Seconds())
}

func (c *Client) forget(h *Hold) {
	if c.holds[h.key] == h {
		delete(c.holds, h.key)
	}
	if h.hasLocal {
		h.hasLocal = false
		c.localRelease(h.key)
	}
}

// releaseAnswered: the reply to a hold's RELEASE. The key's local lock
// goes to the next Lock of this client now (after the broker's answer).
func (c *Client) releaseAnswered(r *call, line string) {
	h := r.hold
	var err error
	if n, ok := okCount(line); ok {
		if n > 0 {
			// the session holds it still: a count the library lost track
			// of (a reentrant grant it never saw); give those back too,
			// before the key's local lock lets the next Lock ask
			if c.holds[h.key] == h {
				delete(c.holds, h.key)
			}
			c.strayRelease(h.key)
		}
	} else {
		err = errorFromReply(line, shownRequest(r.line))
		switch {
		case h.lostErr() != nil && (errors.Is(err, ErrLockLost) || errors.Is(err, ErrNotHeld)):
			err = h.err
		case errors.Is(err, ErrLockLost):
			c.lose(h, "", line, nil)
			err = h.err
		case errors.Is(err, ErrUnavailable):
			// the broker frees the key once Redis answers: released
			err = nil
		}
	}
	c.endHold(h, ErrReleased)
	r.settle(line, err)
}

// lostErr is the hold's loss, or nil.
func (h *Hold) lostErr() error {
	if errors.Is(h.err, ErrLockLost) {
		return h.err
	}
	return nil
}

// Key is the key held.
func (h *Hold) Key() string { return h.key }

// Token is the hold's fencing token: send it with every write to the
// resource, and let the resource refuse a token lower than the highest it
// has seen for the key.
func (h *Hold) Token() uint64 { return h.token }

// Kind is Exclusive, Shared or Semaphore.
func (h *Hold) Kind() Kind { return h.kind }

// Value is the hold's value (WithValue, Proclaim); "" for none.
func (h *Hold) Value() string {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.value
}

// Context is cancelled when the hold ends: lost, unlocked, or the client
// closed. Run the work the hold protects under it. It carries the values
// of the context Lock was given (not its deadline).
func (h *Hold) Context() context.Context { return h.ctx }

// Lost is closed when the hold is lost (not when it is unlocked).
func (h *Hold) Lost() <-chan struct{} { return h.lostCh }

// Err says why the hold ended: nil while it is held; an *Error of
// ErrLockLost once lost (ErrSessionLost too when the session that held it
// ended); ErrReleased after Unlock; ErrClosed after the client's Close.
func (h *Hold) Err() error {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.err
}

// Unlock releases the hold (RELEASE; WithLinger: RELEASE ... LINGER). A
// lost hold's Unlock sends nothing and returns its loss (a RELEASE
// could end a later hold of the key); a second Unlock is ErrUsage.
func (h *Hold) Unlock(ctx context.Context, opts ...UnlockOption) error {
	var linger time.Duration
	for _, o := range opts {
		o(&linger)
	}
	c := h.c
	c.mu.Lock()
	if le := h.lostErr(); le != nil {
		c.mu.Unlock()
		return le
	}
	if h.err == ErrClosed {
		c.mu.Unlock()
		return ErrClosed
	}
	if h.err != nil || h.unlocking {
		c.mu.Unlock()
		return usageError("the hold of %s was unlocked already", h.key)
	}
	h.unlocking = true
	_, err := c.sendAndWait(ctx, &call{op: opRelease, line: releaseLine(h.key, linger), key: h.key, hold: h, done: make(chan struct{})})
	return err
}

// request sends RENEW or PROCLAIM for a live hold.
func (h *Hold) request(ctx context.Context, line, value string) (string, error) {
	c := h.c
	c.mu.Lock()
	if le := h.lostErr(); le != nil {
		c.mu.Unlock()
		return "", le
	}
	if h.err != nil || h.unlocking {
		c.mu.Unlock()
		return "", usageError("the hold of %s was unlocked", h.key)
	}
	if err := c.usable(); err != nil {
		c.mu.Unlock()
		return "", err
	}
	return c.sendAndWait(ctx, &call{op: opHold, line: line, key: h.key, hold: h, value: value, done: make(chan struct{})})
}

// Renew sets the key's TTL in Redis now (RENEW; ttl 0: its current TTL)
// and returns the TTL set. The broker renews held keys by itself: this
// only changes how long the hold would outlive a dead broker.
func (h *Hold) Renew(ctx context.Context, ttl time.Duration) (time.Duration, error) {
	reply, err := h.request(ctx, renewLine(h.key, ttl), "")
	if err != nil {
		return 0, err
	}
	ms, err := strconv.ParseInt(strings.TrimPrefix(reply, "OK "), 10, 64)
	if err != nil {
		return 0, protoError("not a RENEW answer: %q", reply)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Proclaim replaces the hold's value (PROCLAIM: same token, no new hold).
// Protocol 1.2.
func (h *Hold) Proclaim(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	_, err := h.request(ctx, "PROCLAIM "+h.key+" "+value, value)
	return err
}

// Mutex is a key of a Client used as a lock, as etcd's
// concurrency.Mutex: Lock, Unlock, Token. A Mutex is one task's: a second
// Lock through it while it holds (or is taking) the key fails at once with
// ErrUsage. Goroutines that exclude each other each use their own Mutex
// (or Client.Lock) over a shared Client.
type Mutex struct {
	c    *Client
	key  string
	opts []LockOption

	mu     sync.Mutex
	hold   *Hold
	taking bool
}

// NewMutex returns a Mutex on key; opts apply to each Lock.
func (c *Client) NewMutex(key string, opts ...LockOption) *Mutex {
	return &Mutex{c: c, key: key, opts: opts}
}

// Lock takes the key as Client.Lock does.
func (m *Mutex) Lock(ctx context.Context) error { return m.lock(ctx, false) }

// TryLock takes the key if it is free now (ErrBusy if not).
func (m *Mutex) TryLock(ctx context.Context) error { return m.lock(ctx, true) }

func (m *Mutex) lock(ctx context.Context, try bool) error {
	m.mu.Lock()
	if m.taking || (m.hold != nil && m.hold.Err() == nil) {
		m.mu.Unlock()
		return usageError("%s is held or being taken through this Mutex: a second Lock by the same task would wait for itself", m.key)
	}
	m.taking = true
	m.mu.Unlock()
	h, err := m.c.lock(ctx, m.key, try, m, m.opts)
	m.mu.Lock()
	m.taking = false
	if err == nil {
		m.hold = h
	}
	m.mu.Unlock()
	return err
}

// Unlock releases the hold Lock took (see Hold.Unlock).
func (m *Mutex) Unlock(ctx context.Context, opts ...UnlockOption) error {
	m.mu.Lock()
	h := m.hold
	m.hold = nil
	m.mu.Unlock()
	if h == nil {
		return usageError("%s is not locked through this Mutex", m.key)
	}
	return h.Unlock(ctx, opts...)
}

// Hold is the Mutex's current hold (nil when not locked).
func (m *Mutex) Hold() *Hold {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hold
}

// Token is the current hold's fencing token (0 when not locked).
func (m *Mutex) Token() uint64 {
	if h := m.Hold(); h != nil {
		return h.token
	}
	return 0
}

// valuesOnly is a context with its parent's values and none of its
// cancellation (Go 1.21's context.WithoutCancel): a hold outlives the
// deadline its Lock waited with.
type valuesOnly struct{ parent context.Context }

func (v valuesOnly) Deadline() (time.Time, bool)       { return time.Time{}, false }
func (v valuesOnly) Done() <-chan struct{}             { return nil }
func (v valuesOnly) Err() error                        { return nil }
func (v valuesOnly) Value(key interface{}) interface{} { return v.parent.Value(key) }
