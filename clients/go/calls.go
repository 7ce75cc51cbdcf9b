package lockbroker

// The requests of a session's pipeline. Replies come in request order, so
// the oldest request written takes the next reply line. Each request says
// what its reply means (reply), what becomes of it when its connection
// breaks before the reply (dropped: sent again, or settled), and how it
// ends when no connection can carry it (fail). acquire.go has ACQUIRE's.

import (
	"strconv"
	"strings"
)

// req is a request in the pipeline. Every method is called with c.mu held.
type req interface {
	// text is the line to write now (without LF); false drops it unsent.
	text(c *Client) (string, bool)
	// reply handles its reply line.
	reply(c *Client, line string)
	// dropped: the connection broke before the reply; true to send it
	// again on the next connection (after the session is settled).
	dropped(c *Client, rs *resumeInfo) bool
	// fail ends it with err, unsent.
	fail(c *Client, err error)
	// blocks: a 1.1 blocking wait, which holds back the later replies.
	blocks() bool
}

// resumeInfo is what a new connection's handshake found: whether the
// session was resumed, and the keys RESUME listed.
type resumeInfo struct {
	resumed bool
	listed  map[string]bool
	reason  error // why a RESUME was refused (a new session took over)
}

type callOp int

const (
	opPlain   callOp = iota // OWNER, CHECK, HELD, STATS, PING: asked again after a break
	opPing                  // the idle PING: nobody waits for it
	opRelease               // RELEASE of a hold
	opStray                 // RELEASE of a grant nobody here holds
	opHold                  // RENEW, PROCLAIM of a hold
	opCancel                // CANCEL of a queued wait
	opWatch                 // WATCH
	opUnwatch               // UNWATCH
	opQuit                  // QUIT
)

// call is every request but ACQUIRE.
type call struct {
	op       callOp
	line     string
	key      string
	hold     *Hold       // opRelease, opHold
	value    string      // PROCLAIM's new value
	acq      *acquire    // opCancel: the wait (nil: a wait nobody here wants)
	entry    *watchEntry // opWatch
	internal bool        // nobody waits for the outcome

	done    chan struct{} // closed when settled
	result  string        // the reply line
	err     error
	settled bool
}

func newCall(op callOp, line, key string) *call {
	return &call{op: op, line: line, key: key, done: make(chan struct{})}
}

func (r *call) settle(line string, err error) {
	if r.settled {
		return
	}
	r.settled = true
	r.result, r.err = line, err
	if r.done != nil {
		close(r.done)
	}
}

func (r *call) blocks() bool { return false }

func (r *call) text(c *Client) (string, bool) {
	if r.settled {
		return "", false
	}
	if r.op == opCancel && r.acq != nil && r.acq.state == aDone {
		r.settle("OK 0", nil) // its outcome came meanwhile
		return "", false
	}
	return r.line, true
}

func (r *call) reply(c *Client, line string) {
	switch r.op {
	case opRelease:
		c.releaseAnswered(r, line)
		return
	case opStray:
		// more holds of the key left: a count the library lost track of
		if n, ok := okCount(line); ok && n > 0 && c.holds[r.key] == nil {
			c.strayRelease(r.key)
		}
	case opHold:
		if strings.HasPrefix(line, "ERR LOST") {
			c.lose(r.hold, "", line, nil)
			r.settle("", r.hold.err)
			return
		}
		if line == "OK" && r.value != "" && r.hold.err == nil {
			r.hold.value = r.value
		}
	case opCancel:
		// OK 1: withdrawn. OK 0: its outcome event came before this reply
		// (the wait is done already), or the broker had none.
		if a := r.acq; a != nil && a.state != aDone {
			a.finish(c, a.cancelErr)
		}
	case opWatch:
		if e := r.entry; e != nil {
			if strings.HasPrefix(line, "OK") {
				e.answered(nil)
			} else {
				c.watchFailed(e, errorFromReply(line, r.line))
			}
		}
	}
	if strings.HasPrefix(line, "ERR ") {
		r.settle(line, errorFromReply(line, shownRequest(r.line)))
	} else {
		r.settle(line, nil)
	}
}

func (r *call) dropped(c *Client, rs *resumeInfo) bool {
	switch r.op {
	case opPlain:
		return true
	case opRelease:
		if rs.resumed && rs.listed[r.key] {
			return true // still the session's: release it again
		}
		// the old session's end freed it (or it was lost before)
		h := r.hold
		err := h.lostErr()
		c.endHold(h, ErrReleased)
		r.settle("", err)
		return false
	case opHold:
		if rs.resumed && rs.listed[r.key] && r.hold.err == nil {
			return true
		}
		c.lose(r.hold, "not kept across the reconnect", "", nil)
		r.settle("", r.hold.err)
		return false
	case opCancel:
		if a := r.acq; a != nil {
			if c.waits[a.key] == a && a.state == aQueued {
				return true // still queued after the RESUME
			}
			if a.state != aDone {
				a.finish(c, a.cancelErr)
			}
		}
		r.settle("OK 0", nil)
		return false
	case opWatch:
		if r.entry != nil && c.watches[r.key] == r.entry {
			return true // WATCH again: OK, then the state again
		}
	case opUnwatch:
		if rs.resumed {
			return true // a resumed session's watches are set again
		}
	}
	// opPing, opStray (reconcile releases what RESUME lists and nobody
	// holds), opQuit, and the rest
	r.settle("", errDropped)
	return false
}

func (r *call) fail(c *Client, err error) {
	switch r.op {
	case opCancel:
		if a := r.acq; a != nil && a.state != aDone {
			a.finish(c, a.cancelErr)
		}
	case opWatch:
		if r.entry != nil {
			c.watchFailed(r.entry, err)
		}
	case opRelease:
		c.endHold(r.hold, ErrReleased)
	}
	r.settle("", err)
}

// okCount reads OK <n> (RELEASE's holds left).
func okCount(line string) (int, bool) {
	if !strings.HasPrefix(line, "OK ") {
		return 0, false
	}
	n, err := strconv.Atoi(line[3:])
	return n, err == nil
}
