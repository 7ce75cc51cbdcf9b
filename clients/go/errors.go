package lockbroker

// Errors: one sentinel per broker ERR code and per outcome, tested with
// errors.Is; the types behind them (BrokerError, LostError, ConnectError)
// carry the details for errors.As.

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// The broker's ERR codes (proto/PROTOCOL.md, "Replies"). A *BrokerError
// with that Code matches its sentinel: errors.Is(err, ErrDenied).
var (
	ErrBadCommand  = errors.New("lockbroker: BADCMD")
	ErrBadArgument = errors.New("lockbroker: BADARG")
	ErrTooLong     = errors.New("lockbroker: TOOLONG")
	ErrNoAuth      = errors.New("lockbroker: NOAUTH")
	ErrNotHeld     = errors.New("lockbroker: NOTHELD")
	ErrUnavailable = errors.New("lockbroker: UNAVAILABLE")
	ErrLimit       = errors.New("lockbroker: LIMIT")
	ErrNoSession   = errors.New("lockbroker: NOSESSION")
	ErrDenied      = errors.New("lockbroker: DENIED")
	// ErrLost: the hold is gone (ERR LOST, EVENT LOST, not kept across a
	// reconnect). Both *BrokerError{Code: "LOST"} and *LostError match it.
	ErrLost = errors.New("lockbroker: LOST")
)

var codeErrors = map[string]error{
	"BADCMD":      ErrBadCommand,
	"BADARG":      ErrBadArgument,
	"TOOLONG":     ErrTooLong,
	"NOAUTH":      ErrNoAuth,
	"NOTHELD":     ErrNotHeld,
	"LOST":        ErrLost,
	"UNAVAILABLE": ErrUnavailable,
	"LIMIT":       ErrLimit,
	"NOSESSION":   ErrNoSession,
	"DENIED":      ErrDenied,
}

// Outcomes that are not broker errors.
var (
	// ErrBusy: one try (TryLock), and the key is held, by another session
	// or by another task of this client.
	ErrBusy = errors.New("lockbroker: the key is held")
	// ErrTimeout: the wait ran out (the context's deadline, or the broker's
	// EVENT TIMEOUT). It matches context.DeadlineExceeded too.
	ErrTimeout error = &wrapError{"lockbroker: the wait ran out", context.DeadlineExceeded}
	// ErrCancelled: the caller's context was cancelled while it waited (the
	// broker was told CANCEL). It matches context.Canceled too.
	ErrCancelled error = &wrapError{"lockbroker: the wait was cancelled", context.Canceled}
	// ErrSessionLost: the session could not be resumed after its
	// connection broke; every hold of it was lost. A *LostError of such a
	// hold matches both ErrSessionLost and ErrLost.
	ErrSessionLost = errors.New("lockbroker: the session could not be resumed")
	// ErrUsage: the library was misused: a second Lock of a key by the
	// task holding it (see Client.Lock), a hold unlocked twice, a closed
	// client.
	ErrUsage = errors.New("lockbroker: usage")
	// ErrClosed: the client is closed (an ErrUsage).
	ErrClosed error = &wrapError{"lockbroker: the client is closed", ErrUsage}
	// ErrReleased is what Hold.Err says after Unlock.
	ErrReleased = errors.New("lockbroker: the hold was released")
	// ErrConnect: no broker could be reached (at Dial, or past the
	// reconnect budget). A *ConnectError says which and why.
	ErrConnect = errors.New("lockbroker: no broker could be reached")
	// ErrVersion: the broker speaks a protocol older than 1.2.
	ErrVersion = errors.New("lockbroker: the broker is too old")
	// ErrProtocol: the broker answered something this library cannot read.
	ErrProtocol = errors.New("lockbroker: protocol error")
)

// wrapError is a message that also matches another error (its Unwrap).
type wrapError struct {
	msg  string
	also error
}

func (e *wrapError) Error() string { return e.msg }
func (e *wrapError) Unwrap() error { return e.also }

// Timeout lets code that checks net-style timeouts see ErrTimeout as one.
func (e *wrapError) Timeout() bool { return e.also == context.DeadlineExceeded }

// BrokerError is an ERR reply: ERR <Code> <Text>, answering Request.
// errors.Is matches it with the sentinel of its code (ErrDenied, ...).
type BrokerError struct {
	Code    string // BADCMD, BADARG, ..., DENIED
	Text    string // for people: may change between versions
	Request string // the request's verb and key (never AUTH's token)
}

func (e *BrokerError) Error() string {
	s := "lockbroker: ERR " + e.Code
	if e.Text != "" {
		s += " " + e.Text
	}
	if e.Request != "" {
		s += " (" + e.Request + ")"
	}
	return s
}

func (e *BrokerError) Is(target error) bool {
	return target != nil && codeErrors[e.Code] == target
}

// errorFromReply turns a reply line that is not the expected one into an
// error: a *BrokerError for ERR lines.
func errorFromReply(line, request string) error {
	if !strings.HasPrefix(line, "ERR ") {
		return protoError("unexpected answer %q to %s", line, request)
	}
	rest := strings.TrimPrefix(line, "ERR ")
	code, text := rest, ""
	if i := strings.IndexByte(rest, ' '); i >= 0 {
		code, text = rest[:i], rest[i+1:]
	}
	return &BrokerError{Code: code, Text: text, Request: request}
}

// requestName is what an error says of a request line: its verb and key,
// never the arguments of AUTH or RESUME (secrets).
func requestName(line string) string {
	w := strings.Fields(line)
	if len(w) == 0 {
		return ""
	}
	switch w[0] {
	case "AUTH", "RESUME":
		return w[0]
	}
	if len(w) > 1 {
		return w[0] + " " + w[1]
	}
	return w[0]
}

// LostError is why a hold was lost: Reason says how the library learnt it
// (EVENT LOST, ERR LOST, not kept by RESUME, the session could not be
// resumed). It matches ErrLost, and ErrSessionLost when the session ended.
type LostError struct {
	Key     string
	Token   uint64
	Reason  string
	Session bool // the whole session was lost, not only this hold
}

func (e *LostError) Error() string {
	return fmt.Sprintf("lockbroker: lost %s (token %d): %s", e.Key, e.Token, e.Reason)
}

func (e *LostError) Is(target error) bool {
	return target == ErrLost || (e.Session && target == ErrSessionLost)
}

// ConnectError: no broker of Addrs could be reached; Err is the last
// attempt's error. It matches ErrConnect.
type ConnectError struct {
	Addrs []string
	Err   error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("lockbroker: no broker of %s could be reached: %v", strings.Join(e.Addrs, ","), e.Err)
}

func (e *ConnectError) Is(target error) bool { return target == ErrConnect }
func (e *ConnectError) Unwrap() error        { return e.Err }

func argError(format string, a ...interface{}) error {
	return fmt.Errorf("lockbroker: "+format+": %w", append(a, ErrBadArgument)...)
}

func usageError(format string, a ...interface{}) error {
	return fmt.Errorf("lockbroker: "+format+": %w", append(a, ErrUsage)...)
}

func protoError(format string, a ...interface{}) error {
	return fmt.Errorf("lockbroker: "+format+": %w", append(a, ErrProtocol)...)
}

// keyError says which key an outcome is about, keeping its sentinel.
func keyError(key string, err error) error {
	return fmt.Errorf("%w (%s)", err, key)
}
