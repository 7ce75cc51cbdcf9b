package lockbroker

// Watches (WATCH): every change of a key's holders, whichever broker made
// it. The session watches a key once however many Watchers follow it;
// each Watcher's channel holds the latest state only, so a slow reader
// never holds up the session (it may skip states that changed back).

import "context"

// watchEntry is one key this session watches, for all its Watchers.
type watchEntry struct {
	key       string
	state     KeyState
	have      bool
	watchers  []*Watcher
	ready     chan struct{} // closed once WATCH is answered
	readyDone bool
	err       error
}

func (e *watchEntry) answered(err error) {
	if !e.readyDone {
		e.readyDone = true
		e.err = err
		close(e.ready)
	}
}

func (e *watchEntry) changed(s KeyState) {
	e.state, e.have = s, true
	for _, w := range e.watchers {
		w.push(s)
	}
}

func (e *watchEntry) end(err error) {
	e.answered(err)
	for _, w := range e.watchers {
		w.end(err)
	}
	e.watchers = nil
}

// watchFailed: WATCH was refused (ERR LIMIT, ERR DENIED, ERR BADCMD from a
// broker without WATCH, ...): at Watch, or by a new session's broker when
// the client watches its keys again. Its Watchers end with that error.
func (c *Client) watchFailed(e *watchEntry, err error) {
	if c.watches[e.key] == e {
		delete(c.watches, e.key)
	}
	e.end(err)
}

// Watcher follows one key. Changes gives each new state (the latest
// only); State the latest one seen.
type Watcher struct {
	c    *Client
	key  string
	e    *watchEntry
	ch   chan KeyState
	stop chan struct{}

	// guarded by c.mu
	state  KeyState
	have   bool
	closed bool
	err    error // why it ended, when it was not Close or its context
}

// push replaces the unread state, if any, with s (c.mu held: the only
// sender).
func (w *Watcher) push(s KeyState) {
	if w.closed {
		return
	}
	w.state, w.have = s, true
	select {
	case <-w.ch:
	default:
	}
	w.ch <- s
}

func (w *Watcher) end(err error) {
	if !w.closed {
		w.closed = true
		w.err = err
		close(w.ch)
		close(w.stop)
	}
}

// Watch follows key's holders until ctx ends or the Watcher is closed
// (WATCH; then UNWATCH). The key's current state comes at once on
// Changes, then each change. The watch survives reconnects (the broker
// sends the state again). Protocol 1.2.
func (c *Client) Watch(ctx context.Context, key string) (*Watcher, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	w := &Watcher{c: c, key: key, ch: make(chan KeyState, 1), stop: make(chan struct{})}
	c.mu.Lock()
	if err := c.usable(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	e := c.watches[key]
	if e == nil {
		e = &watchEntry{key: key, ready: make(chan struct{})}
		c.watches[key] = e
		c.submit(&call{op: opWatch, line: "WATCH " + key, key: key, entry: e, internal: true})
	}
	if e.readyDone && e.err != nil {
		c.mu.Unlock()
		return nil, e.err
	}
	e.watchers = append(e.watchers, w)
	w.e = e
	if e.have {
		w.push(e.state)
	}
	c.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		w.Close()
		return nil, ctx.Err()
	}
	if e.err != nil {
		w.Close()
		return nil, e.err
	}
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				w.Close()
			case <-w.stop:
			}
		}()
	}
	return w, nil
}

// Key is the key watched.
func (w *Watcher) Key() string { return w.key }

// Changes delivers the key's states: the latest one not read yet. It is
// closed when the watch ends (Close, ctx, the client closed, WATCH
// refused by a new session's broker): Err says why.
func (w *Watcher) Changes() <-chan KeyState { return w.ch }

// Err is nil while the watch runs, and after Close or its context ended
// it; ErrClosed once the client closed; the broker's error if it refused
// to watch the key again on a new session (ErrBadCommand from a broker
// without WATCH, ErrLimitExceeded, ErrDenied). The watch is not asked
// again then.
func (w *Watcher) Err() error {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.err
}

// State is the latest state seen (false: none yet).
func (w *Watcher) State() (KeyState, bool) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.state, w.have
}

// Close ends the watch (UNWATCH once no Watcher of the client follows
// the key).
func (w *Watcher) Close() error {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.closed {
		return nil
	}
	w.end(nil)
	e := w.e
	for i, x := range e.watchers {
		if x == w {
			e.watchers = append(e.watchers[:i], e.watchers[i+1:]...)
			break
		}
	}
	if len(e.watchers) == 0 && c.watches[w.key] == e {
		delete(c.watches, w.key)
		if c.state == stUp || c.state == stReconnecting {
			c.submit(&call{op: opUnwatch, line: "UNWATCH " + w.key, key: w.key, internal: true})
		}
	}
	return nil
}
