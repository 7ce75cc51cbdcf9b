package integration

// The tests of the protocol 1.2 words (ASYNC waits with CANCEL, VALUE,
// OWNER ... VALUE, CHECK, WATCH, election). They fail at once, saying so,
// while the broker speaks an older protocol.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	lockbroker "github.com/lockbroker/lockbroker/clients/go"
)

// 100 waits on different keys at once over one client; one is cancelled
// midway (CANCEL: the key never becomes that client's), the others are
// granted when the keys are released.
func TestHundredWaitsOneCancelled(t *testing.T) {
	e := setup(t, "broker b1")
	e.requires12("b1")
	c1 := e.client(lockbroker.Config{}, "b1")
	c2 := e.client(lockbroker.Config{}, "b1")
	c3 := e.client(lockbroker.Config{}, "b1")
	cx := ctx(t, 40*time.Second)
	held := make([]*lockbroker.Hold, 100)
	for i := range held {
		h, err := c1.TryLock(cx, fmt.Sprintf("q%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held[i] = h
	}
	type result struct {
		h   *lockbroker.Hold
		err error
	}
	results := make([]chan result, 100)
	cancels := make([]context.CancelFunc, 100)
	for i := range results {
		results[i] = make(chan result, 1)
		wcx, cancel := context.WithTimeout(cx, 30*time.Second)
		cancels[i] = cancel
		go func(i int) {
			h, err := c2.Lock(wcx, fmt.Sprintf("q%d", i))
			results[i] <- result{h, err}
		}(i)
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if st, err := c2.Stats(cx); err != nil || st["waiters"] != "100" {
		t.Fatalf("waiters %s (%v): the waits are not all in the broker at once", st["waiters"], err)
	}
	cancels[50]()
	if r := <-results[50]; !errors.Is(r.err, lockbroker.ErrCancelled) {
		t.Fatalf("the cancelled wait: %v", r.err)
	}
	for _, h := range held {
		if err := h.Unlock(cx); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range results {
		if i == 50 {
			continue
		}
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("wait %d: %v", i, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("wait %d not granted", i)
		}
	}
	if _, err := c3.TryLock(cx, "q50"); err != nil {
		t.Fatalf("the cancelled wait's key: %v", err)
	}
}

// A value on an exclusive hold, OWNER ... VALUE from another broker,
// CHECK of a current and of a stale token, PROCLAIM.
func TestValueOwnerCheck(t *testing.T) {
	e := setup(t, "broker b1", "broker b2")
	e.requires12("b1", "b2")
	e.needs("VALUE", "CHECK")
	c1 := e.client(lockbroker.Config{}, "b1")
	c2 := e.client(lockbroker.Config{}, "b2")
	cx := ctx(t, 20*time.Second)
	h, err := c1.Lock(cx, "svc:primary", lockbroker.WithValue("10.0.0.7:8080"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c2.Owner(cx, "svc:primary")
	if err != nil || st.Token != h.Token() || st.Value != "10.0.0.7:8080" {
		t.Fatalf("%+v %v", st, err)
	}
	if r, err := c2.Check(cx, "svc:primary", h.Token()); err != nil || !r.Current {
		t.Fatalf("%+v %v", r, err)
	}
	if err := h.Proclaim(cx, "10.0.0.7:9090"); err != nil || h.Value() != "10.0.0.7:9090" {
		t.Fatal(err)
	}
	if st, _ := c2.Owner(cx, "svc:primary"); st.Value != "10.0.0.7:9090" || st.Token != h.Token() {
		t.Fatalf("%+v", st)
	}
	if err := h.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	if r, err := c2.Check(cx, "svc:primary", h.Token()); err != nil || r.Current || r.Token != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	h2, err := c2.TryLock(cx, "svc:primary")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c1.Check(cx, "svc:primary", h.Token()); err != nil || r.Current || r.Token != h2.Token() {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := c1.TryLock(cx, "svc:readers", lockbroker.WithShared(), lockbroker.WithValue("x")); !errors.Is(err, lockbroker.ErrBadArgument) {
		t.Fatal(err)
	}
}

// WATCH: the current state at once, then every change, whichever broker
// made it.
func TestWatch(t *testing.T) {
	e := setup(t, "broker b1", "broker b2")
	e.requires12("b1", "b2")
	e.needs("WATCH", "VALUE")
	c1 := e.client(lockbroker.Config{}, "b1")
	c2 := e.client(lockbroker.Config{}, "b2")
	cx := ctx(t, 20*time.Second)
	w, err := c2.Watch(cx, "jobs:k")
	if err != nil {
		t.Fatal(err)
	}
	want := func(desc string, ok func(lockbroker.KeyState) bool) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case s, open := <-w.Changes():
				if !open {
					t.Fatalf("the watch ended waiting for %s", desc)
				}
				if ok(s) {
					return
				}
			case <-deadline:
				s, _ := w.State()
				t.Fatalf("no %s (last %v)", desc, s)
			}
		}
	}
	want("free", func(s lockbroker.KeyState) bool { return s.Kind == lockbroker.Free })
	h, err := c1.Lock(cx, "jobs:k", lockbroker.WithValue("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	want("host-a", func(s lockbroker.KeyState) bool { return s.Token == h.Token() && s.Value == "host-a" })
	if err := h.Proclaim(cx, "host-b"); err != nil {
		t.Fatal(err)
	}
	want("host-b", func(s lockbroker.KeyState) bool { return s.Token == h.Token() && s.Value == "host-b" })
	if err := h.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	want("free", func(s lockbroker.KeyState) bool { return s.Kind == lockbroker.Free })
	p, err := c1.Lock(cx, "jobs:k", lockbroker.WithLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	want("semaphore 1 3", func(s lockbroker.KeyState) bool {
		return s.Kind == lockbroker.Semaphore && s.Holders == 1 && s.Limit == 3
	})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-w.Changes(); open {
		t.Fatal("a closed watch still delivers")
	}
	_ = p
}

// Leader election: one leader at a time, the next candidate takes over
// when it resigns, everyone sees who leads.
func TestElection(t *testing.T) {
	e := setup(t, "broker b1", "broker b2")
	e.requires12("b1", "b2")
	e.needs("WATCH", "VALUE")
	c1 := e.client(lockbroker.Config{}, "b1")
	c2 := e.client(lockbroker.Config{}, "b2")
	c3 := e.client(lockbroker.Config{}, "b1")
	cx := ctx(t, 20*time.Second)
	obs, err := c3.Election("svc:leader").Observe(cx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	leader := "?"
	var tokens []uint64 // each leader's, as the observer saw them
	go func() {
		for l := range obs {
			mu.Lock()
			leader = l.Value
			if l.Token != 0 {
				tokens = append(tokens, l.Token)
			}
			mu.Unlock()
		}
	}()
	expect := func(v string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			got := leader
			mu.Unlock()
			if got == v {
				return
			}
		}
		t.Fatalf("the leader is not %q", v)
	}
	expect("")
	e1, e2 := c1.Election("svc:leader"), c2.Election("svc:leader")
	h1, err := e1.Campaign(cx, "10.0.0.1:80")
	if err != nil {
		t.Fatal(err)
	}
	expect("10.0.0.1:80")
	if l, err := c2.Election("svc:leader").Leader(cx); err != nil || l.Value != "10.0.0.1:80" || l.Token != h1.Token() {
		t.Fatal(l, err)
	}
	second := make(chan *lockbroker.Hold, 1)
	go func() {
		h, err := e2.Campaign(cx, "10.0.0.2:80")
		if err != nil {
			t.Error(err)
		}
		second <- h
	}()
	time.Sleep(300 * time.Millisecond)
	if err := e1.Resign(cx); err != nil {
		t.Fatal(err)
	}
	h2 := <-second
	if h2 == nil || h2.Token() <= h1.Token() {
		t.Fatal("the second leader")
	}
	expect("10.0.0.2:80")
	c2.Close()
	expect("")
	mu.Lock()
	defer mu.Unlock()
	if len(tokens) != 2 || tokens[0] != h1.Token() || tokens[1] != h2.Token() {
		t.Fatalf("the observer saw the leaders' tokens %v, want %d then %d", tokens, h1.Token(), h2.Token())
	}
}
