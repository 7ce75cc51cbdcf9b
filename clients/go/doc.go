// Package lockbroker is the Go client of lockbroker, a broker of named
// locks over a line protocol with Redis as the shared store (protocol 1.2
// or later; proto/PROTOCOL.md in the repository).
//
// A Client is one session with a broker, over one connection, shared by
// any number of goroutines: requests are pipelined, replies go to their
// callers, EVENT lines to the hold, wait or watch they name. Every call
// takes a context.Context.
//
//	client, err := lockbroker.Dial(ctx, "127.0.0.1:7711")
//	defer client.Close()
//	hold, err := client.Lock(ctx, "orders:42") // waits as long as ctx allows
//	defer hold.Unlock(ctx)
//	write(hold.Context(), hold.Token())        // cancelled if the hold is lost
//
// Waits happen in the broker (ACQUIRE ... ASYNC): a context that ends
// first sends CANCEL. Goroutines sharing a client exclude each other on a
// key: a local lock per key stands in front of the broker's per-session
// reentrancy.
//
// # The same task
//
// Go has no goroutine identity, so the library takes the context as the
// task: a hold's Context() (and every context derived from it) is the work
// done under that hold. Lock of a key from a context under this client's
// live hold of that key fails at once with ErrUsage: that Lock would
// otherwise wait for a hold its own task keeps. So does a second Lock
// through a Mutex that holds (or is taking) its key. Every other Lock of a
// key the client holds waits for the hold to end (TryLock: ErrBusy).
//
// # Connections
//
// With a grace session (Config.Grace, default 5 s) a broken connection is
// resumed on the same or another broker of Config.Brokers (RESUME), holds
// and tokens unchanged; a dead connection is noticed by TCP keepalive,
// TCP_USER_TIMEOUT and an idle PING with a reply deadline. Config.OnEvent
// hears each reconnect and resume; Client.Session (Done, Err) ends when
// the session does. The grace is also how long a program that ended
// without Close (Go has no exit hook: defer c.Close()) or crashed keeps its
// locks.
//
// # Errors
//
// Every error about a key, a request or a session is an *Error whose
// message says what happened to which key; its Kind is one of the
// sentinels (ErrLockLost, ErrLockTimeout, ErrNotHeld, ErrUnavailable,
// ErrLimitExceeded, ErrDenied, ErrBadArgument, ErrNotAuthenticated,
// ErrSessionLost, ErrProtocolError, ErrClosed, ...), tested with errors.Is.
package lockbroker
