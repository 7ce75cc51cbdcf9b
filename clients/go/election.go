package lockbroker

// Leader election over VALUE and WATCH: a candidate waits for the key
// with its address as the hold's value (ACQUIRE <key> WAIT ... ASYNC VALUE
// <addr>, asked again each time the broker's wait runs out); whoever holds
// it leads, and everyone who watches the key sees the leader's value.
// The shape is etcd's concurrency.Election: Campaign, Resign, Leader,
// Observe.

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

// Election returns the election on key.
func (c *Client) Election(key string) *Election { return &Election{c: c, key: key} }

// Campaign runs for leader with value (e.g. this node's address) and
// returns once this client leads, or when ctx ends (ErrLockTimeout,
// ErrCancelled). The hold's Context is cancelled, and its Lost closed,
// if leadership is lost; Resign ends it.
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

// Leader is the value of the leader now (OWNER ... VALUE), ErrNoLeader
// when nobody leads.
func (e *Election) Leader(ctx context.Context) (string, error) {
	s, err := e.c.Owner(ctx, e.key)
	if err != nil {
		return "", err
	}
	if s.Kind != Exclusive {
		return "", ErrNoLeader
	}
	return s.Value, nil
}

// Observe delivers the leader's value ("" while nobody leads) at once and
// at each change, latest only, until ctx ends or the client closes (the
// channel is closed then).
func (e *Election) Observe(ctx context.Context) (<-chan string, error) {
	w, err := e.c.Watch(ctx, e.key)
	if err != nil {
		return nil, err
	}
	out := make(chan string, 1)
	go func() {
		defer close(out)
		for s := range w.Changes() {
			select {
			case <-out:
			default:
			}
			out <- LeaderOf(s)
		}
	}()
	return out, nil
}

// LeaderOf is the leader's value a key's state names: the exclusive
// holder's value, "" when nobody holds the key.
func LeaderOf(s KeyState) string {
	if s.Kind == Exclusive {
		return s.Value
	}
	return ""
}
