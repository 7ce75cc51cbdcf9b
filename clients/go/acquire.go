package lockbroker

// ACQUIRE ... ASYNC and its outcome: an OK <token> at once, BUSY, or
// OK QUEUED and later one event (GRANTED, TIMEOUT, FAILED). The wait lives
// in the broker, so the session goes on serving the client's other
// goroutines meanwhile, and a caller that gives up sends CANCEL; a grant
// that races the cancel is given back (RELEASE), so a key is never left
// held by nobody. The WAIT sent is what is left of the caller's deadline
// (none: the protocol's longest, asked again each time the broker's
// clamped wait runs out).

import (
	"context"
	"strings"
	"time"
)

type acqState int

const (
	aLocal   acqState = iota // behind the client's local lock on the key
	aNew                     // to be written
	aSent                    // written, not answered
	aQueued                  // OK QUEUED: the outcome comes as an event
	aDropped                 // its connection broke: asked again on the next
	aDone                    // ended (a hold, or an error)
)

type acquire struct {
	key      string
	spec     lockSpec
	try      bool      // one try: BUSY is ErrBusy
	deadline time.Time // zero: none
	parent   context.Context
	mutex    *Mutex // the Mutex asking, if any

	state     acqState
	line      string // the ACQUIRE as last sent
	hasLocal  bool   // holds the key's local lock
	blocking  bool  // sent as a 1.1 blocking wait
	cancelErr error // the caller gave up with this

	// what the caller gets (settled once; the request may go on after a
	// cancel, to withdraw the wait or give back a grant)
	done    chan struct{}
	settled bool
	hold    *Hold
	err     error
}

func (a *acquire) waiting() bool { return a.state == aLocal && a.cancelErr == nil }

func (a *acquire) blocks() bool { return a.blocking }

func (a *acquire) settle(h *Hold, err error) {
	if a.settled {
		return
	}
	a.settled = true
	a.hold, a.err = h, err
	close(a.done)
}

func (a *acquire) text(c *Client) (string, bool) {
	if a.state == aDone {
		return "", false
	}
	if a.cancelErr != nil {
		a.finish(c, a.cancelErr)
		return "", false
	}
	var waitMS int64
	switch {
	case a.try:
	case a.deadline.IsZero():
		waitMS = maxMS
	default:
		left := time.Until(a.deadline)
		if left <= 0 {
			a.finish(c, timeoutError(a.key))
			return "", false
		}
		waitMS = toMS(left)
	}
	a.blocking = !c.async && waitMS > 0
	a.state = aSent
	a.line = acquireLine(a.key, a.spec, waitMS, c.async)
	return a.line, true
}

func (a *acquire) reply(c *Client, line string) {
	switch {
	case a.state == aDone:
		// cannot happen (a sent request ends by its reply); a grant
		// nobody takes is given back all the same
		if _, ok := okToken(line); ok {
			c.strayRelease(a.key)
		}
	case line == "OK QUEUED":
		a.state = aQueued
		c.waits[a.key] = a
		if a.cancelErr != nil {
			c.submit(&call{op: opCancel, line: "CANCEL " + a.key, key: a.key, acq: a, internal: true})
		}
	case line == "BUSY":
		a.notGranted(c)
	default:
		if tok, ok := okToken(line); ok {
			a.granted(c, tok)
		} else if len(line) > 3 && line[:3] == "OK " {
			a.finish(c, errorFromReply(line, a.line))
		} else {
			a.finish(c, errorFromReply(line, a.line))
		}
	}
}

// event: the outcome of the queued wait.
func (a *acquire) event(c *Client, ev event) {
	if c.waits[a.key] == a {
		delete(c.waits, a.key)
	}
	switch ev.kind {
	case "GRANTED":
		if len(ev.args) < 1 {
			a.finish(c, protoError("EVENT GRANTED %s without a token", a.key))
			return
		}
		tok, err := parseToken(ev.args[0])
		if err != nil {
			a.finish(c, err)
			return
		}
		a.granted(c, tok)
	case "TIMEOUT":
		a.notGranted(c)
	default: // FAILED <CODE>
		code := "UNAVAILABLE"
		if len(ev.args) > 0 {
			code = ev.args[0]
		}
		kind := codeErrors[code]
		if kind == nil {
			kind = ErrProtocolError
		}
		a.finish(c, &Error{Kind: kind, Code: code, Key: a.key, Text: "the wait failed: " +
			strings.TrimPrefix(kind.Error(), "lockbroker: "), Reply: ev.line, Request: a.line})
	}
}

func (a *acquire) granted(c *Client, tok uint64) {
	if a.cancelErr != nil {
		c.strayRelease(a.key)
		a.finish(c, a.cancelErr)
		return
	}
	h := c.newHold(a, tok)
	a.state = aDone
	a.settle(h, nil)
}

func (a *acquire) notGranted(c *Client) {
	switch {
	case a.cancelErr != nil:
		a.finish(c, a.cancelErr)
	case a.try:
		a.finish(c, busyError(a.key))
	case a.deadline.IsZero() || time.Until(a.deadline) > time.Millisecond:
		a.state = aNew // the broker clamped the wait: ask again
		c.submit(a)
	default:
		a.finish(c, timeoutError(a.key))
	}
}

// finish ends it without a hold; the key's local lock goes to the next.
func (a *acquire) finish(c *Client, err error) {
	if a.state == aDone {
		return
	}
	a.state = aDone
	if c.waits[a.key] == a {
		delete(c.waits, a.key)
	}
	if a.hasLocal {
		a.hasLocal = false
		c.localRelease(a.key)
	}
	a.settle(nil, err)
}

// cancel: the caller gave up (its context ended). The caller hears err
// now; the wait is withdrawn (CANCEL) and a grant that comes anyway is
// given back.
func (a *acquire) cancel(c *Client, err error) {
	if a.state == aDone || a.cancelErr != nil {
		return
	}
	a.cancelErr = err
	switch a.state {
	case aQueued:
		c.submit(&call{op: opCancel, line: "CANCEL " + a.key, key: a.key, acq: a, internal: true})
	case aLocal, aNew, aDropped:
		a.finish(c, err)
	}
	// aSent: the reply decides (OK QUEUED: CANCEL; OK: give it back)
	a.settle(nil, err)
}

func (a *acquire) dropped(c *Client, rs *resumeInfo) bool {
	if a.state == aDone {
		return false
	}
	if a.cancelErr != nil {
		a.finish(c, a.cancelErr)
		return false
	}
	if rs.resumed && c.requeued[a.key] {
		a.state = aQueued // its OK QUEUED was lost, not the wait
		c.waits[a.key] = a
		return false
	}
	a.state = aDropped
	return true
}

func (a *acquire) fail(c *Client, err error) { a.finish(c, err) }

// busyError: a one-try take found key held.
func busyError(key string) error {
	return keyError(key, ErrBusy, "held by another session (or another task of this client)")
}

// timeoutError: a wait for key ran out.
func timeoutError(key string) error {
	return keyError(key, ErrLockTimeout, "not granted in time: another session held it all along")
}

// okToken reads OK <token>.
func okToken(line string) (uint64, bool) {
	if len(line) < 4 || line[:3] != "OK " {
		return 0, false
	}
	t, err := parseToken(line[3:])
	return t, err == nil
}
