package lockbroker

// Errors: one sentinel per kind, tested with errors.Is, and one type,
// *Error, behind every error about a key or a session, for errors.As. The
// kinds are the same in every lockbroker library (the README's table maps
// each to the wire).

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// The kinds every lockbroker library has. An *Error of that kind matches
// its sentinel: errors.Is(err, ErrDenied).
var (
	// ErrLockLost: the hold is gone: the broker said so (ERR LOST, EVENT
	// LOST), or the session that held it ended (its connection dropped
	// without a grace, a RESUME was refused, the reconnect budget ran out:
	// then it matches ErrSessionLost too).
	ErrLockLost = errors.New("lockbroker: the lock was lost")
	// ErrLockTimeout: the wait ran out (the context's deadline, or the
	// broker's EVENT TIMEOUT). It matches context.DeadlineExceeded too.
	ErrLockTimeout error = &wrapError{"lockbroker: the wait ran out", context.DeadlineExceeded}
	// ErrNotHeld: ERR NOTHELD: the session does not hold the key.
	ErrNotHeld = errors.New("lockbroker: not held")
	// ErrUnavailable: ERR UNAVAILABLE (or a wait's EVENT FAILED ...
	// UNAVAILABLE): the broker cannot reach Redis; nothing was granted.
	ErrUnavailable = errors.New("lockbroker: the broker cannot reach Redis")
	// ErrLimitExceeded: ERR LIMIT (or EVENT FAILED ... LIMIT): a broker
	// limit was reached; nothing changed.
	ErrLimitExceeded = errors.New("lockbroker: a broker limit was reached")
	// ErrDenied: ERR DENIED: the key is outside the patterns of this
	// client's app.
	ErrDenied = errors.New("lockbroker: denied")
	// ErrBadArgument: ERR BADARG, or an argument the library refuses
	// before sending anything.
	ErrBadArgument = errors.New("lockbroker: bad argument")
	// ErrNotAuthenticated: ERR NOAUTH: no token, or a wrong one.
	ErrNotAuthenticated = errors.New("lockbroker: not authenticated")
	// ErrSessionLost: the session could not be resumed after its
	// connection broke (or had no grace); every hold of it was lost.
	ErrSessionLost = errors.New("lockbroker: the session was lost")
	// ErrProtocolError: the broker sent a line this library cannot read.
	ErrProtocolError = errors.New("lockbroker: protocol error")
	// ErrClosed: the client is closed (an ErrUsage).
	ErrClosed error = &wrapError{"lockbroker: the client is closed", ErrUsage}
)

// The library's own situations, and the broker codes no kind above has.
var (
	// ErrBadCommand: ERR BADCMD: the broker does not know a word this
	// library needs (it is older). Never retried.
	ErrBadCommand = errors.New("lockbroker: the broker does not know the command")
	// ErrTooLong: ERR TOOLONG: a request line over the broker's max_line.
	ErrTooLong = errors.New("lockbroker: the request line is too long")
	// ErrNoSession: ERR NOSESSION: the session to resume is gone (the cause
	// of an ErrSessionLost).
	ErrNoSession = errors.New("lockbroker: no such session")
	// ErrBusy: one try (TryLock), and the key is held, by another session
	// or by another task of this client.
	ErrBusy = errors.New("lockbroker: the key is held")
	// ErrCancelled: the caller's context was cancelled while it waited (the
	// broker was told CANCEL). It matches context.Canceled too.
	ErrCancelled error = &wrapError{"lockbroker: the wait was cancelled", context.Canceled}
	// ErrUsage: the library was misused: a second Lock of a key by the
	// task holding it (see Client.Lock), a hold unlocked twice, a closed
	// client.
	ErrUsage = errors.New("lockbroker: usage")
	// ErrReleased is what Hold.Err says after Unlock.
	ErrReleased = errors.New("lockbroker: the hold was released")
	// ErrConnect: no broker could be reached (at Dial, or past the
	// reconnect budget).
	ErrConnect = errors.New("lockbroker: no broker could be reached")
	// ErrVersion: the broker speaks a protocol older than 1.2.
	ErrVersion = errors.New("lockbroker: the broker is too old")
)

// codeErrors: the kind of each broker ERR code (proto/PROTOCOL.md).
var codeErrors = map[string]error{
	"BADCMD":      ErrBadCommand,
	"BADARG":      ErrBadArgument,
	"TOOLONG":     ErrTooLong,
	"NOAUTH":      ErrNotAuthenticated,
	"NOTHELD":     ErrNotHeld,
	"LOST":        ErrLockLost,
	"UNAVAILABLE": ErrUnavailable,
	"LIMIT":       ErrLimitExceeded,
	"NOSESSION":   ErrNoSession,
	"DENIED":      ErrDenied,
}

// wrapError is a message that also matches another error (its Unwrap).
type wrapError struct {
	msg  string
	also error
}

func (e *wrapError) Error() string { return e.msg }
func (e *wrapError) Unwrap() error { return e.also }

// Timeout lets code that checks net-style timeouts see ErrLockTimeout as one.
func (e *wrapError) Timeout() bool { return e.also == context.DeadlineExceeded }

// Error is every error the library returns about a key, a request or a
// session. Its message says what happened to which key, for people
// ("lost:py: the lock was lost (token 1795805345549156)"); the fields say
// the rest. errors.Is(err, Kind) holds, and so does errors.Is(err, x) for
// what Err matches (a hold lost with its session: ErrSessionLost).
type Error struct {
	Kind    error  // the sentinel: ErrLockLost, ErrDenied, ...
	Code    string // the broker's code (DENIED, ...); "" when the library found it
	Key     string // the key it concerns; "" for a session's or connection's error
	Token   uint64 // a lost hold's fencing token; else 0
	Text    string // what happened, in words (the broker's text, or the library's)
	Reply   string // the broker's line that said it (ERR ..., EVENT ...); "" when none
	Request string // the request it answered (AUTH's token and RESUME's secret left out); "" when none
	Err     error  // the cause (a network error, why a session ended); nil when none
}

func (e *Error) Error() string {
	s := e.Text
	if s == "" {
		s = strings.TrimPrefix(e.Kind.Error(), "lockbroker: ")
	}
	if e.Kind == ErrLockLost && e.Token != 0 {
		s = fmt.Sprintf("the lock was lost (token %d)", e.Token)
		if e.Text != "" {
			s += ": " + e.Text
		}
	}
	if e.Key != "" {
		s = e.Key + ": " + s
	} else {
		s = "lockbroker: " + s
	}
	if e.Err != nil && e.Kind != ErrLockLost {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches the error's kind, and what the kind matches (ErrLockTimeout:
// context.DeadlineExceeded; ErrClosed: ErrUsage).
func (e *Error) Is(target error) bool { return target != nil && errors.Is(e.Kind, target) }

// Unwrap is the cause.
func (e *Error) Unwrap() error { return e.Err }

// errorFromReply turns a reply line that is not the expected one into an
// error: the kind of its ERR code, about the request's key.
func errorFromReply(line, request string) error {
	if !strings.HasPrefix(line, "ERR ") {
		return &Error{Kind: ErrProtocolError, Key: requestKey(request), Text: "an answer this library cannot read",
			Reply: line, Request: request}
	}
	rest := strings.TrimPrefix(line, "ERR ")
	code, text := rest, ""
	if i := strings.IndexByte(rest, ' '); i >= 0 {
		code, text = rest[:i], rest[i+1:]
	}
	kind := codeErrors[code]
	if kind == nil {
		kind, text = ErrProtocolError, "an unknown error code: "+rest
	}
	e := &Error{Kind: kind, Code: code, Key: requestKey(request), Text: text, Reply: line, Request: request}
	if kind == ErrBadCommand {
		e.Text = fmt.Sprintf("the broker does not know %s (%s): it speaks an older protocol than this library needs",
			strings.SplitN(request, " ", 2)[0], text)
	}
	return e
}

// shownRequest is a request line as an error may show it: AUTH's token
// and RESUME's secret left out.
func shownRequest(line string) string {
	w := strings.Fields(line)
	switch {
	case len(w) == 0:
		return ""
	case w[0] == "AUTH":
		return "AUTH ..."
	case w[0] == "RESUME" && len(w) > 1:
		return "RESUME " + w[1] + " ..."
	}
	return line
}

// keyed: the verbs whose second word is a key.
var keyed = map[string]bool{"ACQUIRE": true, "RELEASE": true, "RENEW": true, "OWNER": true, "CANCEL": true,
	"CHECK": true, "PROCLAIM": true, "WATCH": true, "UNWATCH": true}

// requestKey is the key a request line names, or "".
func requestKey(line string) string {
	w := strings.SplitN(line, " ", 3)
	if len(w) > 1 && keyed[w[0]] {
		return w[1]
	}
	return ""
}

// lostError: key's hold with token is lost; why says how the library
// learnt it ("" for the broker's own word, whose line is reply); cause:
// the session's end, if that was it.
func lostError(key string, token uint64, why, reply string, cause error) *Error {
	return &Error{Kind: ErrLockLost, Code: "LOST", Key: key, Token: token, Text: why, Reply: reply, Err: cause}
}

// keyError: an outcome of a take of key that is not a broker error.
func keyError(key string, kind error, text string) error {
	return &Error{Kind: kind, Key: key, Text: text}
}

func argError(format string, a ...interface{}) error {
	return &Error{Kind: ErrBadArgument, Text: fmt.Sprintf(format, a...)}
}

func usageError(format string, a ...interface{}) error {
	return &Error{Kind: ErrUsage, Text: fmt.Sprintf(format, a...)}
}

func protoError(format string, a ...interface{}) error {
	return &Error{Kind: ErrProtocolError, Text: fmt.Sprintf(format, a...)}
}

// connectError: no broker of addrs could be reached; err is the last
// attempt's.
func connectError(addrs []string, err error) error {
	return &Error{Kind: ErrConnect, Text: "no broker of " + strings.Join(addrs, ",") + " could be reached", Err: err}
}
