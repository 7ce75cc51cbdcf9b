package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockbroker "github.com/lockbroker/lockbroker/clients/go"
)

// Take a key, keep it past its TTL (the broker renews it), renew it by
// hand, release it: the next holder gets a greater token.
func TestTakeRenewRelease(t *testing.T) {
	e := setup(t, "broker b1")
	c1 := e.client(lockbroker.Config{}, "b1")
	c2 := e.client(lockbroker.Config{}, "b1")
	cx := ctx(t, 20*time.Second)
	h, err := c1.Lock(cx, "orders:42", lockbroker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.TryLock(cx, "orders:42"); !errors.Is(err, lockbroker.ErrBusy) {
		t.Fatalf("another client: %v", err)
	}
	time.Sleep(1500 * time.Millisecond)
	if h.Err() != nil {
		t.Fatalf("lost past its TTL: %v", h.Err())
	}
	st, err := c2.Owner(cx, "orders:42")
	if err != nil || st.Kind != lockbroker.Exclusive || st.Token != h.Token() || st.ClientID != c1.ClientID() {
		t.Fatalf("owner %+v, %v; want %s %d", st, err, c1.ClientID(), h.Token())
	}
	if ttl, err := h.Renew(cx, 2*time.Second); err != nil || ttl != 2*time.Second {
		t.Fatalf("renew: %v %v", ttl, err)
	}
	if _, err := h.Renew(cx, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	if h.Err() != lockbroker.ErrReleased || h.Context().Err() == nil {
		t.Fatalf("after Unlock: %v", h.Err())
	}
	h2, err := c2.TryLock(cx, "orders:42")
	if err != nil || h2.Token() <= h.Token() {
		t.Fatalf("next holder: %v, token %d after %d", err, h2.Token(), h.Token())
	}
}

// holders runs n goroutines over one client, each taking key rounds times
// and checking nobody else of them holds it meanwhile; the tokens of the
// grants, in the order they were held, strictly increase.
func holders(t *testing.T, c *lockbroker.Client, key string, n, rounds int) {
	var inside, maxInside int32
	var mu sync.Mutex
	var tokens []uint64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	cx := ctx(t, 60*time.Second)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				h, err := c.Lock(cx, key)
				if err != nil {
					errs <- err
					return
				}
				now := atomic.AddInt32(&inside, 1)
				mu.Lock()
				if now > maxInside {
					maxInside = now
				}
				tokens = append(tokens, h.Token())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				atomic.AddInt32(&inside, -1)
				if err := h.Unlock(cx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if maxInside != 1 {
		t.Fatalf("%d goroutines held %s at once", maxInside, key)
	}
	if len(tokens) != n*rounds {
		t.Fatalf("%d grants, want %d", len(tokens), n*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d has token %d after %d: a reentrant grant, not a new one", i, tokens[i], tokens[i-1])
		}
	}
}

// Two goroutines of one process, one client, one key: they never overlap
// (the broker alone would let the second in: same session, reentrant).
func TestTwoGoroutinesNeverOverlap(t *testing.T) {
	e := setup(t, "broker b1")
	holders(t, e.client(lockbroker.Config{}, "b1"), "stock:7", 2, 25)
}

// Fifty holders in one process on one key.
func TestFiftyHoldersOneKey(t *testing.T) {
	e := setup(t, "broker b1")
	holders(t, e.client(lockbroker.Config{}, "b1"), "hot", 50, 2)
}

// A wait ends at the caller's deadline; one granted meanwhile ends at
// once with the hold.
func TestWaitAndDeadline(t *testing.T) {
	e := setup(t, "broker b1")
	c1 := e.client(lockbroker.Config{}, "b1")
	c2 := e.client(lockbroker.Config{}, "b1")
	cx := ctx(t, 20*time.Second)
	h1, err := c1.Lock(cx, "jobs:nightly")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	short, cancel := context.WithTimeout(cx, 400*time.Millisecond)
	_, err = c2.Lock(short, "jobs:nightly")
	cancel()
	if d := time.Since(start); !errors.Is(err, lockbroker.ErrLockTimeout) || !errors.Is(err, context.DeadlineExceeded) || d < 350*time.Millisecond || d > 3*time.Second {
		t.Fatalf("%v after %v", err, d)
	}
	got := make(chan error, 1)
	var h2 *lockbroker.Hold
	start = time.Now()
	go func() {
		long, cancel := context.WithTimeout(cx, 8*time.Second)
		defer cancel()
		var err error
		h2, err = c2.Lock(long, "jobs:nightly")
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := h1.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 3*time.Second {
		t.Fatalf("granted after %v", d)
	}
	if h2.Token() <= h1.Token() {
		t.Fatalf("token %d after %d", h2.Token(), h1.Token())
	}
}

// Shared holds beside each other and a writer after them; a semaphore of
// two permits with three clients.
func TestSharedAndLimit(t *testing.T) {
	e := setup(t, "broker b1", "broker b2")
	c1 := e.client(lockbroker.Config{}, "b1")
	c2 := e.client(lockbroker.Config{}, "b2")
	c3 := e.client(lockbroker.Config{}, "b1")
	cx := ctx(t, 20*time.Second)
	r1, err1 := c1.Lock(cx, "catalog", lockbroker.WithShared())
	r2, err2 := c2.Lock(cx, "catalog", lockbroker.WithShared())
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := c3.TryLock(cx, "catalog"); !errors.Is(err, lockbroker.ErrBusy) {
		t.Fatalf("writer among readers: %v", err)
	}
	r3, err := c3.TryLock(cx, "catalog", lockbroker.WithShared())
	if err != nil || r3.Kind() != lockbroker.Shared {
		t.Fatal(err)
	}
	if st, err := c1.Owner(cx, "catalog"); err != nil || st.Kind != lockbroker.Shared || st.Holders != 3 {
		t.Fatalf("%+v %v", st, err)
	}
	for _, h := range []*lockbroker.Hold{r3, r1, r2} {
		if err := h.Unlock(cx); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c3.TryLock(cx, "catalog")
	if err != nil || w.Token() <= r1.Token() || w.Token() <= r2.Token() {
		t.Fatalf("writer after readers: %v", err)
	}
	if _, err := c1.TryLock(cx, "catalog", lockbroker.WithShared()); !errors.Is(err, lockbroker.ErrBusy) {
		t.Fatalf("reader beside a writer: %v", err)
	}
	if err := w.Unlock(cx); err != nil {
		t.Fatal(err)
	}

	p1, err1 := c1.TryLock(cx, "api:quota", lockbroker.WithLimit(2))
	p2, err2 := c2.TryLock(cx, "api:quota", lockbroker.WithLimit(2))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := c3.TryLock(cx, "api:quota", lockbroker.WithLimit(2)); !errors.Is(err, lockbroker.ErrBusy) {
		t.Fatalf("a third permit of two: %v", err)
	}
	if _, err := c3.TryLock(cx, "api:quota", lockbroker.WithLimit(3)); !errors.Is(err, lockbroker.ErrBadArgument) {
		t.Fatalf("another limit: %v", err)
	}
	third := make(chan error, 1)
	go func() {
		wcx, cancel := context.WithTimeout(cx, 5*time.Second)
		defer cancel()
		h, err := c3.Lock(wcx, "api:quota", lockbroker.WithLimit(2))
		if err == nil && h.Kind() != lockbroker.Semaphore {
			err = fmt.Errorf("kind %v", h.Kind())
		}
		third <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := p1.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	if st, err := c1.Owner(cx, "api:quota"); err != nil || st.Kind != lockbroker.Semaphore || st.Holders != 2 || st.Limit != 2 {
		t.Fatalf("%+v %v", st, err)
	}
	_ = p2
}

// A key deleted in Redis: its hold, and only it, is reported lost, while
// another request of the same client is in flight.
func TestLostGoesToItsHoldWhileInFlight(t *testing.T) {
	e := setup(t, "broker b1")
	c1 := e.client(lockbroker.Config{}, "b1")
	c2 := e.client(lockbroker.Config{}, "b1")
	cx := ctx(t, 20*time.Second)
	b, err := c1.Lock(cx, "b", lockbroker.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c1.Lock(cx, "a", lockbroker.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := c2.Lock(cx, "c")
	if err != nil {
		t.Fatal(err)
	}
	inflight := make(chan error, 1)
	go func() {
		wcx, cancel := context.WithTimeout(cx, 8*time.Second)
		defer cancel()
		_, err := c1.Lock(wcx, "c")
		inflight <- err
	}()
	time.Sleep(200 * time.Millisecond)
	e.step("redis del a")
	waitClosed(t, a.Lost(), 5*time.Second, "a reported lost")
	if !errors.Is(a.Err(), lockbroker.ErrLockLost) || a.Context().Err() == nil {
		t.Fatalf("a: %v", a.Err())
	}
	time.Sleep(time.Second)
	if b.Err() != nil {
		t.Fatalf("b: %v", b.Err())
	}
	select {
	case err := <-inflight:
		t.Fatalf("the wait in flight ended: %v", err)
	default:
	}
	if err := hc.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	if err := <-inflight; err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(cx); !errors.Is(err, lockbroker.ErrLockLost) {
		t.Fatalf("unlock of a lost hold: %v", err)
	}
	if err := b.Unlock(cx); err != nil {
		t.Fatal(err)
	}
}

// kill -9 the client's broker: the session is resumed on the second
// broker, with its holds and their tokens.
func TestResumeOnSecondBroker(t *testing.T) {
	e := setup(t, "broker b1", "broker b2")
	log := &eventLog{}
	c1 := e.client(lockbroker.Config{Grace: 10 * time.Second, OnEvent: log.hook}, "b1", "b2")
	c2 := e.client(lockbroker.Config{}, "b2")
	cx := ctx(t, 20*time.Second)
	h, err := c1.Lock(cx, "orders:42", lockbroker.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c1.Lock(cx, "catalog", lockbroker.WithShared(), lockbroker.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	id := c1.ClientID()
	e.step("kill b1")
	log.waitFor(t, lockbroker.Resumed, 8*time.Second)
	if h.Err() != nil || s.Err() != nil {
		t.Fatalf("lost across the resume: %v %v", h.Err(), s.Err())
	}
	if c1.Broker() != e.broker("b2").Addr() || c1.ClientID() != id {
		t.Fatalf("on %s as %s", c1.Broker(), c1.ClientID())
	}
	st, err := c2.Owner(cx, "orders:42")
	if err != nil || st.Token != h.Token() || st.ClientID != id {
		t.Fatalf("owner after the resume: %+v %v", st, err)
	}
	if _, err := c2.TryLock(cx, "orders:42"); !errors.Is(err, lockbroker.ErrBusy) {
		t.Fatal(err)
	}
	if _, err := c1.TryLock(cx, "orders:43"); err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	h2, err := c2.TryLock(cx, "orders:42")
	if err != nil || h2.Token() <= h.Token() {
		t.Fatalf("%v", err)
	}
	if err := s.Unlock(cx); err != nil {
		t.Fatal(err)
	}
}

// TLS with the helper's CA; a client that does not trust it is refused.
func TestTLS(t *testing.T) {
	e := setup(t, "broker b1 tls")
	c1 := e.client(lockbroker.Config{TLS: e.tlsConfig("b1")}, "b1")
	c2 := e.client(lockbroker.Config{}, "b1")
	cx := ctx(t, 20*time.Second)
	h, err := c1.Lock(cx, "secure:k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.TryLock(cx, "secure:k"); !errors.Is(err, lockbroker.ErrBusy) {
		t.Fatal(err)
	}
	if err := h.Unlock(cx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dial(lockbroker.Config{TLS: &tls.Config{}}, "b1"); !errors.Is(err, lockbroker.ErrConnect) {
		t.Fatalf("a client without the CA: %v", err)
	}
}

// AUTH: a wrong or missing token is refused at connect; an app's session
// is denied keys outside its patterns, at once even with a wait.
func TestAuthAndDenied(t *testing.T) {
	e := setup(t, "broker b1 auth=s3cret-token",
		"broker b2 app=billing:billing-token:billing:*,invoices:*")
	if _, err := e.dial(lockbroker.Config{Auth: "wrong"}, "b1"); !errors.Is(err, lockbroker.ErrNotAuthenticated) {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := e.dial(lockbroker.Config{}, "b1"); !errors.Is(err, lockbroker.ErrNotAuthenticated) {
		t.Fatalf("no token: %v", err)
	}
	cx := ctx(t, 20*time.Second)
	c1 := e.client(lockbroker.Config{Auth: "s3cret-token"}, "b1")
	if _, err := c1.TryLock(cx, "anything:1"); err != nil {
		t.Fatal(err)
	}
	c2 := e.client(lockbroker.Config{Auth: "billing-token"}, "b2")
	if _, err := c2.TryLock(cx, "invoices:2024-06"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wcx, cancel := context.WithTimeout(cx, 3*time.Second)
	defer cancel()
	_, err := c2.Lock(wcx, "reports:daily")
	var be *lockbroker.Error
	if !errors.Is(err, lockbroker.ErrDenied) || !errors.As(err, &be) || be.Code != "DENIED" || time.Since(start) > time.Second {
		t.Fatalf("%v after %v", err, time.Since(start))
	}
	if _, err := c2.Owner(cx, "reports:daily"); !errors.Is(err, lockbroker.ErrDenied) {
		t.Fatal(err)
	}
}

// Without a grace session a restarted broker frees the holds: they are
// reported lost (the session's), a new session goes on working.
func TestNoGraceNewSession(t *testing.T) {
	e := setup(t, "broker b1")
	log := &eventLog{}
	c := e.client(lockbroker.Config{Grace: lockbroker.NoGrace, OnEvent: log.hook}, "b1")
	cx := ctx(t, 20*time.Second)
	h, err := c.Lock(cx, "deploy:api")
	if err != nil {
		t.Fatal(err)
	}
	id := c.ClientID()
	e.step("restart b1")
	waitClosed(t, h.Lost(), 5*time.Second, "the hold reported lost")
	if !errors.Is(h.Err(), lockbroker.ErrSessionLost) {
		t.Fatal(h.Err())
	}
	log.waitFor(t, lockbroker.NewSession, 8*time.Second)
	h2, err := c.Lock(cx, "deploy:api")
	if err != nil || h2.Token() <= h.Token() || c.ClientID() == id {
		t.Fatalf("%v", err)
	}
}
