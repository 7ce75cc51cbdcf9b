package lockbroker

// Leader election over VALUE and WATCH: a candidate waits for the key
// with its address as the hold's value (ACQUIRE <key> WAIT ... ASYNC VALUE
// <addr>, asked again each time the broker's wait runs out; the broker
// writes the value with the grant, so nobody sees the new leader without
// it); whoever holds it leads, and everyone who watches the key sees each
// leader, its value and token. The shape is etcd's concurrency.Election:
// Campaign, Resign, Leader, Observe.

import (
	"context"
	"errors"
	"sync"
)

// ErrNoLeader: nobody leads (Election.Leader).
var ErrNoLeader = errors.New("lockbroker: nobody leads")

// Election is one key used to elect a leader among clients.
type Election struct {
	c   *Client
	key string

	mu   sync.Mutex
	hold *Hold
}

// Leader is who leads an election's key: the leader's Value (its address,
// as it campaigned), its fencing Token and ClientID ("?" when the broker
// may not show it); the zero Leader (Token 0) while nobody leads. On
// Observe's channel, a Leader with Err set is the last one: the watch
// ended because of Err (the client closed, or a new session's broker
// refused to watch the key: ErrBadCommand from a broker without WATCH).
type Leader struct {
	Value    string
	Token    uint64
	ClientID string
	Err      error
}

// Election returns the election on key.
func (c *Client) Election(key string) *Election { return &Election{c: c, key: key} }

// Campaign runs for leader with value (e.g. this node's address) and
// returns once this client leads, or when ctx ends (ErrLockTimeout,
// ErrCancelled). The hold's Context is cancelled, and its Lost closed,
// if leadership is lost; Resign ends it. A broker that refuses the
// campaign (one without ACQUIRE ... VALUE: ErrBadArgument; ErrDenied, ...)
// is an error returned at once, never asked again.
func (e *Election) Campaign(ctx context.Context, value string) (*Hold, error) {
	e.mu.Lock()
	if e.hold != nil && e.hold.Err() == nil {
		e.mu.Unlock()
		return nil, usageError("%s: this Election leads already", e.key)
	}
	e.mu.Unlock()
	h, err := e.c.Lock(ctx, e.key, WithValue(value))
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.hold = h
	e.mu.Unlock()
	return h, nil
}

// Resign stops leading (the next candidate takes over at once). Resign
// when not leading, or after leadership was lost, does nothing.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	h := e.hold
	e.hold = nil
	e.mu.Unlock()
	if h == nil {
		return nil
	}
	if err := h.Unlock(ctx); err != nil && !errors.Is(err, ErrLockLost) {
		return err
	}
	return nil
}

// Leader is who leads now (OWNER ... VALUE); ErrNoLeader when nobody does.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	s, err := e.c.Owner(ctx, e.key)
	if err != nil {
		return Leader{}, err
	}
	if s.Kind != Exclusive {
		return Leader{}, ErrNoLeader
	}
	return LeaderOf(s), nil
}

// Observe delivers who leads at once and at each change (WATCH), latest
// only, until ctx ends or the watch ends (the channel is closed then; a
// last Leader with Err says why the watch ended when it was not ctx).
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	w, err := e.c.Watch(ctx, e.key)
	if err != nil {
		return nil, err
	}
	out := make(chan Leader, 1)
	go func() {
		defer close(out)
		put := func(l Leader) {
			select {
			case <-out:
			default:
			}
			out <- l
		}
		for s := range w.Changes() {
			put(LeaderOf(s))
		}
		if err := w.Err(); err != nil {
			put(Leader{Err: err})
		}
	}()
	return out, nil
}

// LeaderOf is the leader a key's state names: its exclusive holder; the
// zero Leader when nobody holds the key exclusive.
func LeaderOf(s KeyState) Leader {
	if s.Kind == Exclusive {
		return Leader{Value: s.Value, Token: s.Token, ClientID: s.ClientID}
	}
	return Leader{}
}
