package lockbroker

// The session against the scripted broker of fake_test.go: reply and
// event routing, ASYNC waits and their cancel races, the local key lock,
// the version check, the idle PING, and what a reconnect settles.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestVersionCheck(t *testing.T) {
	t.Setenv("LOCKBROKER_ALLOW_OLD", "")
	for _, tc := range []struct {
		version  string
		allowOld bool
		ok       bool
	}{{"1.1.0", false, false}, {"1.0.0", false, false}, {"1.1.0", true, true}, {"1.2.0", false, true}, {"2.0.0", false, true}} {
		fb := newFakeBroker(t)
		done := make(chan error, 1)
		go func() {
			c, err := Connect(context.Background(), Config{Brokers: []string{fb.addr}, AllowOldBroker: tc.allowOld})
			if c != nil {
				c.closeNow()
			}
			done <- err
		}()
		fc := fb.accept()
		fc.hello(tc.version, "cid", "s")
		err := <-done
		if tc.ok && err != nil {
			t.Errorf("%s allowOld=%v: %v", tc.version, tc.allowOld, err)
		}
		if !tc.ok && !errors.Is(err, ErrVersion) {
			t.Errorf("%s: %v, want ErrVersion", tc.version, err)
		}
	}
}

// connectOld connects a client to fb playing a 1.1 broker (AllowOldBroker).
func connectOld(t *testing.T, fb *fakeBroker, cfg Config) (*Client, *fakeConn) {
	t.Helper()
	cfg.Brokers, cfg.AllowOldBroker = []string{fb.addr}, true
	done := make(chan *Client, 1)
	go func() {
		c, err := Connect(context.Background(), cfg)
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	fc := fb.accept()
	fc.hello("1.1.0", "cid", "s")
	c := <-done
	if c == nil {
		t.FailNow()
	}
	t.Cleanup(c.closeNow)
	return c, fc
}

// noDisconnect fails the test if the client declared a connection dead.
func noDisconnect(t *testing.T, ev *events) {
	t.Helper()
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.seen {
		if e.Kind == Disconnected {
			t.Fatalf("the connection was declared dead: %v", e.Err)
		}
	}
}

func TestOldBrokerWaitsBlocking(t *testing.T) {
	c, fc := connectOld(t, newFakeBroker(t), Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ch := goLock(ctx, c, "k")
	line := fc.expect("ACQUIRE k WAIT *")
	if strings.HasSuffix(line, "ASYNC") {
		t.Fatalf("a 1.1 broker got %q", line)
	}
	fc.send("OK 5")
	if r := waitLock(t, ch); r.err != nil || r.h.Token() != 5 {
		t.Fatal(r.err)
	}
}

// A 1.1 broker holds every reply back behind a blocking wait: no PING
// goes out meanwhile, and the wait's silence is not the broker's.
func TestOldBrokerBlockingWaitIsNoSilence(t *testing.T) {
	ev := newEvents()
	c, fc := connectOld(t, newFakeBroker(t), Config{PingInterval: 100 * time.Millisecond,
		PingTimeout: 200 * time.Millisecond, OnEvent: ev.hook})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ch := goLock(ctx, c, "k")
	line := fc.next()
	for line == "PING" { // an idle PING may come first
		fc.send("OK PONG")
		line = fc.next()
	}
	if !strings.HasPrefix(line, "ACQUIRE k WAIT ") {
		t.Fatalf("the client sent %q", line)
	}
	fc.quiet(800 * time.Millisecond)
	fc.send("OK 5")
	if r := waitLock(t, ch); r.err != nil || r.h.Token() != 5 {
		t.Fatal(r.err)
	}
	noDisconnect(t, ev)
}

func TestEventLostGoesToItsHold(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	b := lockNow(t, c, fc, "b", "11")
	a := lockNow(t, c, fc, "a", "12")
	owner := make(chan error, 1)
	go func() {
		s, err := c.Owner(context.Background(), "x")
		if err == nil && s.Kind != Free {
			err = errors.New("not free: " + s.String())
		}
		owner <- err
	}()
	fc.expect("OWNER x VALUE")
	// a stale event (another token) first, then a's, between two replies
	fc.send("EVENT LOST a 999")
	time.Sleep(50 * time.Millisecond)
	if isClosed(a.Lost()) {
		t.Fatal("an EVENT LOST of another token ended the hold")
	}
	fc.send("EVENT LOST a 12", "OK -")
	if err := <-owner; err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	case <-time.After(fakeWait):
		t.Fatal("a was not reported lost")
	}
	if !errors.Is(a.Err(), ErrLockLost) || errors.Is(a.Err(), ErrSessionLost) || a.Context().Err() == nil {
		t.Fatalf("a: %v, ctx %v", a.Err(), a.Context().Err())
	}
	if b.Err() != nil || isClosed(b.Lost()) || b.Context().Err() != nil {
		t.Fatalf("b was touched: %v", b.Err())
	}
	// a lost hold's unlock sends nothing: the next line is b's release
	if err := a.Unlock(context.Background()); !errors.Is(err, ErrLockLost) {
		t.Fatalf("unlock of a lost hold: %v", err)
	}
	go b.Unlock(context.Background())
	fc.expect("RELEASE b")
	fc.send("OK 0")
	// the key is free for this client again: a new Lock reaches the fake
	h := lockNow(t, c, fc, "a", "13")
	if h.Token() != 13 {
		t.Fatal(h.Token())
	}
}

// cancelQueued: a Lock of key whose wait the broker queued is cancelled
// by its context; the client sends CANCEL.
func cancelQueued(t *testing.T, c *Client, fc *fakeConn, key string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := goLock(ctx, c, key)
	fc.expect("ACQUIRE " + key + " WAIT 2147483647 ASYNC")
	fc.send("OK QUEUED")
	time.Sleep(50 * time.Millisecond)
	cancel()
	if r := waitLock(t, ch); !errors.Is(r.err, ErrCancelled) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("%v", r.err)
	}
	fc.expect("CANCEL " + key)
}

// grantNext: the next line is next's ACQUIRE of key; granted with tok.
func grantNext(t *testing.T, fc *fakeConn, next <-chan lockResult, key string, tok uint64) {
	t.Helper()
	fc.expect("ACQUIRE " + key + " *")
	fc.send("OK " + formatToken(tok))
	if r := waitLock(t, next); r.err != nil || r.h.Token() != tok {
		t.Fatalf("%+v", r)
	}
}

func TestQueuedWaitCancelled(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	cancelQueued(t, c, fc, "k")
	// the next Lock of the key waits for the CANCEL's answer
	next := goLock(context.Background(), c, "k")
	fc.quiet(100 * time.Millisecond)
	fc.send("OK 1")
	grantNext(t, fc, next, "k", 9)
}

func TestGrantRacingCancelIsGivenBack(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	cancelQueued(t, c, fc, "k")
	next := goLock(context.Background(), c, "k")
	fc.send("EVENT GRANTED k 7", "OK 0") // the grant won the race
	fc.expect("RELEASE k")               // given back, before the next Lock
	fc.send("OK 0")
	grantNext(t, fc, next, "k", 8)
}

func TestWaitDeadlineAndOutcomes(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ch := goLock(ctx, c, "k")
	line := fc.expect("ACQUIRE k WAIT *")
	ms, _ := strconv.Atoi(strings.Fields(line)[3])
	if ms < 2500 || ms > 3000 {
		t.Fatalf("WAIT %d for a 3 s deadline", ms)
	}
	// the broker's clamped wait ran out before the caller's: asked again
	fc.send("OK QUEUED", "EVENT TIMEOUT k")
	line = fc.expect("ACQUIRE k WAIT *")
	if ms2, _ := strconv.Atoi(strings.Fields(line)[3]); ms2 > ms || ms2 < 2000 {
		t.Fatalf("second WAIT %d after %d", ms2, ms)
	}
	fc.send("OK QUEUED", "EVENT GRANTED k 21")
	r := waitLock(t, ch)
	if r.err != nil || r.h.Token() != 21 {
		t.Fatalf("%+v", r)
	}
	if _, ok := r.h.Context().Deadline(); ok {
		t.Fatal("the hold's context has the wait's deadline")
	}
	go r.h.Unlock(context.Background())
	fc.expect("RELEASE k")
	fc.send("OK 0")

	ch = goLock(context.Background(), c, "k")
	fc.expect("ACQUIRE k *")
	fc.send("OK QUEUED", "EVENT FAILED k LIMIT")
	if r := waitLock(t, ch); !errors.Is(r.err, ErrLimitExceeded) {
		t.Fatal(r.err)
	}
	ch = goLock(context.Background(), c, "k")
	fc.expect("ACQUIRE k *")
	fc.send("ERR DENIED app x may not use this key")
	if r := waitLock(t, ch); !errors.Is(r.err, ErrDenied) {
		t.Fatal(r.err)
	}
	// one try
	go func() {
		_, err := c.TryLock(context.Background(), "k")
		if !errors.Is(err, ErrBusy) {
			t.Errorf("TryLock: %v", err)
		}
	}()
	fc.expect("ACQUIRE k ASYNC")
	fc.send("BUSY")
	fc.quiet(50 * time.Millisecond)
}

func TestLocalExclusion(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	h := lockNow(t, c, fc, "k", "3")
	second := goLock(context.Background(), c, "k")
	if _, err := c.TryLock(context.Background(), "k"); !errors.Is(err, ErrBusy) {
		t.Fatalf("TryLock while another task holds: %v", err)
	}
	if _, err := c.Lock(h.Context(), "k"); !errors.Is(err, ErrUsage) {
		t.Fatalf("Lock under the hold's own context: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	if _, err := c.Lock(ctx, "k"); !errors.Is(err, ErrLockTimeout) || time.Since(start) < 90*time.Millisecond {
		t.Fatalf("a deadline while another task holds: %v after %v", err, time.Since(start))
	}
	cancel()
	m := c.NewMutex("m")
	go func() { _ = m.Lock(context.Background()) }()
	fc.expect("ACQUIRE m *")
	fc.send("OK 30")
	for m.Hold() == nil {
		time.Sleep(time.Millisecond)
	}
	if err := m.Lock(context.Background()); !errors.Is(err, ErrUsage) {
		t.Fatalf("second Lock through the same Mutex: %v", err)
	}
	if m.Token() != 30 {
		t.Fatal(m.Token())
	}
	// none of that reached the broker: the next line is k's release
	go h.Unlock(context.Background())
	fc.expect("RELEASE k")
	fc.quiet(50 * time.Millisecond) // the second Lock waits for the answer
	fc.send("OK 0")
	fc.expect("ACQUIRE k *")
	fc.send("OK 4")
	if r := waitLock(t, second); r.err != nil || r.h.Token() != 4 {
		t.Fatalf("%+v", r)
	}
	if err := h.Unlock(context.Background()); !errors.Is(err, ErrUsage) {
		t.Fatalf("second unlock: %v", err)
	}
}

func TestReleaseCountDriftGivenBack(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	h := lockNow(t, c, fc, "k", "5")
	done := make(chan error, 1)
	go func() { done <- h.Unlock(context.Background()) }()
	fc.expect("RELEASE k")
	fc.send("OK 1")
	fc.expect("RELEASE k")
	fc.send("OK 0")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestIdlePingDeadline(t *testing.T) {
	ev := newEvents()
	fb := newFakeBroker(t)
	c, fc := connectFake(t, fb, Config{PingInterval: 100 * time.Millisecond, PingTimeout: 150 * time.Millisecond, OnEvent: ev.hook})
	_ = c
	fc.expect("PING")
	fc.send("OK PONG")
	start := time.Now()
	fc.expect("PING") // about 100 ms later; not answered
	fc.closed()
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("dead after %v without an answer", d)
	}
	if e := ev.wait(t, Disconnected); !strings.Contains(e.Err.Error(), "PING") {
		t.Fatal(e.Err)
	}
	fc2 := fb.accept()
	fc2.resume("cid-1", "s1")
	fc2.send("OK 0")
	fc2.expect("PING")
	fc2.send("OK PONG")
	ev.wait(t, Resumed)
}

// A reply that takes longer than PingTimeout to arrive is no silence: the
// PING sent while it comes waits behind it, and each read of it counts.
func TestIdlePingWaitsForALongReply(t *testing.T) {
	ev := newEvents()
	fb := newFakeBroker(t)
	c, fc := connectFake(t, fb, Config{PingInterval: 100 * time.Millisecond, PingTimeout: 150 * time.Millisecond, OnEvent: ev.hook})
	type held struct {
		keys []string
		err  error
	}
	done := make(chan held, 1)
	go func() {
		keys, err := c.Held(context.Background())
		done <- held{keys, err}
	}()
	fc.expect("HELD")
	fc.expect("PING") // 100 ms without a byte from the broker
	// the answer, a piece every 50 ms over 4 times PingTimeout
	reply := "OK 3 orders:1 orders:2 orders:3"
	for i := 0; i < len(reply); i += 3 {
		end := i + 3
		if end > len(reply) {
			end = len(reply)
		}
		if _, err := fc.nc.Write([]byte(reply[i:end])); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fc.send("", "OK PONG")
	r := <-done
	if r.err != nil || strings.Join(r.keys, ",") != "orders:1,orders:2,orders:3" {
		t.Fatalf("%+v", r)
	}
	noDisconnect(t, ev)
}

func TestResumeSettlesHolds(t *testing.T) {
	ev := newEvents()
	fb := newFakeBroker(t)
	c, fc := connectFake(t, fb, Config{OnEvent: ev.hook})
	a := lockNow(t, c, fc, "a", "1")
	b := lockNow(t, c, fc, "b", "2")
	ch := goLock(context.Background(), c, "c")
	fc.expect("ACQUIRE c *")
	fc.nc.Close() // c's OK is lost with the connection
	fc2 := fb.accept()
	fc2.resume("cid-1", "s1")
	fc2.send("OK 2 a c") // c was granted; b was not kept
	fc2.expect("PING")
	fc2.send("OK PONG")
	fc2.expect("RELEASE c") // a grant nobody here knows of
	fc2.send("OK 0")
	fc2.expect("ACQUIRE c *") // asked again
	fc2.send("OK 7")
	if r := waitLock(t, ch); r.err != nil || r.h.Token() != 7 {
		t.Fatalf("%+v", r)
	}
	ev.wait(t, Resumed)
	if a.Err() != nil {
		t.Fatalf("a: %v", a.Err())
	}
	if err := b.Err(); !errors.Is(err, ErrLockLost) || errors.Is(err, ErrSessionLost) {
		t.Fatalf("b: %v", err)
	}
	if c.ClientID() != "cid-1" {
		t.Fatal(c.ClientID())
	}
}

func TestResumeRequeuedWait(t *testing.T) {
	fb := newFakeBroker(t)
	c, fc := connectFake(t, fb, Config{})
	ch := goLock(context.Background(), c, "k")
	fc.expect("ACQUIRE k *")
	fc.send("OK QUEUED")
	time.Sleep(50 * time.Millisecond)
	fc.nc.Close()
	fc2 := fb.accept()
	fc2.resume("cid-1", "s1")
	fc2.send("OK 0", "EVENT QUEUED k")
	fc2.expect("PING")
	fc2.send("OK PONG", "EVENT GRANTED k 8")
	if r := waitLock(t, ch); r.err != nil || r.h.Token() != 8 {
		t.Fatalf("%+v", r)
	}
	go c.Ping(context.Background())
	fc2.expect("PING") // no second ACQUIRE: the wait was still queued
}

func TestNewSessionWhenResumeRefused(t *testing.T) {
	ev := newEvents()
	fb := newFakeBroker(t)
	c, fc := connectFake(t, fb, Config{OnEvent: ev.hook})
	a := lockNow(t, c, fc, "a", "1")
	ch := goLock(context.Background(), c, "w")
	fc.expect("ACQUIRE w *")
	fc.send("OK QUEUED")
	wch := make(chan *Watcher, 1)
	go func() {
		w, err := c.Watch(context.Background(), "x")
		if err != nil {
			t.Error(err)
		}
		wch <- w
	}()
	fc.expect("WATCH x")
	fc.send("OK", "EVENT FREE x")
	w := <-wch
	fc.nc.Close()
	fc2 := fb.accept()
	fc2.resume("cid-1", "s1")
	fc2.send("ERR NOSESSION the session expired")
	fc2.expect("HELLO GRACE 5000")
	fc2.send("OK cid-2 lockbroker/1.2.0 s2")
	got := map[string]bool{}
	got[strings.Fields(fc2.next())[0]] = true
	got[strings.Fields(fc2.next())[0]] = true
	if !got["ACQUIRE"] || !got["WATCH"] {
		t.Fatalf("after a new session: %v", got)
	}
	fc2.send("OK QUEUED", "OK", "EVENT HOLDER x other 5 v", "EVENT GRANTED w 6")
	if e := ev.wait(t, NewSession); !errors.Is(e.Err, ErrNoSession) {
		t.Fatal(e.Err)
	}
	if err := a.Err(); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("a: %v", err)
	}
	if r := waitLock(t, ch); r.err != nil || r.h.Token() != 6 {
		t.Fatalf("%+v", r)
	}
	if c.ClientID() != "cid-2" {
		t.Fatal(c.ClientID())
	}
	deadline := time.Now().Add(fakeWait)
	for {
		if s, _ := w.State(); s.Kind == Exclusive && s.Token == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch did not go on")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReconnectBudget(t *testing.T) {
	ev := newEvents()
	fb := newFakeBroker(t)
	c, fc := connectFake(t, fb, Config{OnEvent: ev.hook, ReconnectBudget: 300 * time.Millisecond, DialTimeout: 200 * time.Millisecond})
	a := lockNow(t, c, fc, "a", "1")
	fb.ln.Close()
	fc.nc.Close()
	select {
	case <-a.Lost():
	case <-time.After(fakeWait):
		t.Fatal("the hold outlived the budget")
	}
	if !errors.Is(a.Err(), ErrSessionLost) {
		t.Fatal(a.Err())
	}
	ev.wait(t, ReconnectFailed)
	if err := c.Ping(context.Background()); !errors.Is(err, ErrConnect) {
		t.Fatalf("a request past the budget: %v", err)
	}
}

func TestCloseQuits(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	h := lockNow(t, c, fc, "a", "1")
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	fc.expect("QUIT")
	fc.send("OK")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.Err() != ErrClosed || h.Context().Err() == nil || isClosed(h.Lost()) {
		t.Fatalf("hold after Close: %v", h.Err())
	}
	if _, err := c.Lock(context.Background(), "b"); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrUsage) {
		t.Fatal(err)
	}
}

// A line the broker should not send while the session starts (here a
// grant nobody asked for) is handled like any other: given back once the
// connection carries the session.
func TestEventDuringFirstHandshake(t *testing.T) {
	fb := newFakeBroker(t)
	done := make(chan *Client, 1)
	go func() {
		c, err := Connect(context.Background(), Config{Brokers: []string{fb.addr}})
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	fc := fb.accept()
	fc.expect("HELLO GRACE 5000")
	fc.expect("EVENTS ON")
	fc.send("EVENT GRANTED stray 4", "OK cid lockbroker/1.2.0 s", "OK")
	c := <-done
	if c == nil {
		t.FailNow()
	}
	defer c.closeNow()
	fc.expect("RELEASE stray")
}

// A hundred waits of one client are in the broker at once (ASYNC: none
// holds back the others); each outcome event goes to its own wait; one
// cancelled midway sends CANCEL and is granted nothing.
func TestHundredWaitsOverOneSession(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	results := make([]<-chan lockResult, 100)
	cancels := make([]context.CancelFunc, 100)
	for i := range results {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cancels[i] = cancel
		results[i] = goLock(ctx, c, "q"+strconv.Itoa(i))
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		w := strings.Fields(fc.expect("ACQUIRE q*"))
		if w[len(w)-1] != "ASYNC" || seen[w[1]] {
			t.Fatalf("%v", w)
		}
		seen[w[1]] = true
		fc.send("OK QUEUED")
	}
	cancels[50]()
	if r := waitLock(t, results[50]); !errors.Is(r.err, ErrCancelled) {
		t.Fatal(r.err)
	}
	fc.expect("CANCEL q50")
	fc.send("OK 1")
	for i := 99; i >= 0; i-- { // outcomes in another order than the waits
		if i != 50 {
			fc.send("EVENT GRANTED q" + strconv.Itoa(i) + " " + strconv.Itoa(1000+i))
		}
	}
	for i, ch := range results {
		if i == 50 {
			continue
		}
		if r := waitLock(t, ch); r.err != nil || r.h.Key() != "q"+strconv.Itoa(i) || r.h.Token() != uint64(1000+i) {
			t.Fatalf("wait %d: %+v", i, r)
		}
	}
	c.mu.Lock()
	n := len(c.holds)
	c.mu.Unlock()
	if n != 99 {
		t.Fatalf("%d holds, want 99", n)
	}
}
