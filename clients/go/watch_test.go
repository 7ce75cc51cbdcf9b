package lockbroker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Watchers of one key share the session's one WATCH; each sees the latest
// state; UNWATCH goes when the last one closes.
func TestWatchersShareOneWatch(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	type res struct {
		w   *Watcher
		err error
	}
	first := make(chan res, 1)
	go func() {
		w, err := c.Watch(context.Background(), "k")
		first <- res{w, err}
	}()
	fc.expect("WATCH k")
	fc.send("OK", "EVENT HOLDER k cid 5 host-a")
	r1 := <-first
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	if s := <-r1.w.Changes(); s.Kind != Exclusive || s.Token != 5 || s.Value != "host-a" {
		t.Fatalf("%+v", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w2, err := c.Watch(ctx, "k") // no second WATCH: the state it has already
	if err != nil {
		t.Fatal(err)
	}
	if s := <-w2.Changes(); s.Token != 5 {
		t.Fatalf("%+v", s)
	}
	// states a reader did not read are replaced by the latest
	fc.send("EVENT HOLDER k cid 6 host-b", "EVENT HOLDER k SHARED 2", "EVENT FREE k")
	deadline := time.After(fakeWait)
	for {
		s, _ := r1.w.State()
		if s.Kind == Free {
			break
		}
		select {
		case <-deadline:
			t.Fatal("no FREE")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if s := <-r1.w.Changes(); s.Kind != Free {
		t.Fatalf("the unread states were not replaced by the latest: %+v", s)
	}
	cancel() // w2's context: it ends, the key stays watched for r1
	for range w2.Changes() {
	}
	go c.Ping(context.Background())
	fc.expect("PING")
	fc.send("OK PONG")
	r1.w.Close()
	fc.expect("UNWATCH k")
	fc.send("OK 1")
	if _, open := <-r1.w.Changes(); open {
		t.Fatal("a closed watcher delivers")
	}
	// refused: ERR LIMIT
	go func() {
		_, err := c.Watch(context.Background(), "z")
		first <- res{nil, err}
	}()
	fc.expect("WATCH z")
	fc.send("ERR LIMIT max_watches_per_session")
	if r := <-first; !errors.Is(r.err, ErrLimitExceeded) {
		t.Fatal(r.err)
	}
}

// observeFree starts e.Observe against fc, whose key is free; its channel,
// with the first (nobody leads) read.
func observeFree(t *testing.T, e *Election, fc *fakeConn) <-chan Leader {
	t.Helper()
	obs := make(chan (<-chan Leader), 1)
	go func() {
		ch, err := e.Observe(context.Background())
		if err != nil {
			t.Error(err)
		}
		obs <- ch
	}()
	fc.expect("WATCH " + e.key)
	fc.send("OK", "EVENT FREE "+e.key)
	ch := <-obs
	if l := <-ch; l != (Leader{}) {
		t.Fatalf("leader %+v while free", l)
	}
	return ch
}

func TestElectionObserveAndCampaign(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	e := c.Election("svc")
	ch := observeFree(t, e, fc)
	got := make(chan lockResult, 1)
	go func() {
		h, err := e.Campaign(context.Background(), "10.0.0.1:80")
		got <- lockResult{h, err}
	}()
	fc.expect("ACQUIRE svc VALUE 10.0.0.1:80 WAIT 2147483647 ASYNC")
	fc.send("OK QUEUED", "EVENT GRANTED svc 9", "EVENT HOLDER svc cid-1 9 10.0.0.1:80")
	r := waitLock(t, got)
	if r.err != nil || r.h.Value() != "10.0.0.1:80" {
		t.Fatal(r.err)
	}
	if l := <-ch; l != (Leader{Value: "10.0.0.1:80", Token: 9, ClientID: "cid-1"}) {
		t.Fatalf("leader %+v", l)
	}
	if _, err := e.Campaign(context.Background(), "x"); !errors.Is(err, ErrUsage) {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Resign(context.Background()) }()
	fc.expect("RELEASE svc")
	fc.send("OK 0", "EVENT FREE svc")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l := <-ch; l != (Leader{}) {
		t.Fatalf("leader %+v after resigning", l)
	}
	go func() {
		l, err := e.Leader(context.Background())
		if l != (Leader{}) || !errors.Is(err, ErrNoLeader) {
			t.Errorf("Leader: %+v %v", l, err)
		}
		done <- nil
	}()
	fc.expect("OWNER svc VALUE")
	fc.send("OK -")
	<-done
}

// RENEW and PROCLAIM of a hold the broker says is lost end it; RELEASE
// answered UNAVAILABLE is the broker's to finish: the hold is released.
func TestHoldRequests(t *testing.T) {
	c, fc := connectFake(t, newFakeBroker(t), Config{})
	h := lockNow(t, c, fc, "a", "1")
	type res struct {
		ttl time.Duration
		err error
	}
	got := make(chan res, 1)
	go func() {
		ttl, err := h.Renew(context.Background(), 2500*time.Millisecond)
		got <- res{ttl, err}
	}()
	fc.expect("RENEW a TTL 2500")
	fc.send("OK 2500")
	if r := <-got; r.err != nil || r.ttl != 2500*time.Millisecond {
		t.Fatalf("%+v", r)
	}
	go func() { got <- res{0, h.Proclaim(context.Background(), "v2")} }()
	fc.expect("PROCLAIM a v2")
	fc.send("OK")
	if r := <-got; r.err != nil || h.Value() != "v2" {
		t.Fatal(r.err, h.Value())
	}
	go func() {
		_, err := h.Renew(context.Background(), 0)
		got <- res{0, err}
	}()
	fc.expect("RENEW a")
	fc.send("ERR LOST the lock expired")
	if r := <-got; !errors.Is(r.err, ErrLockLost) || !isClosed(h.Lost()) {
		t.Fatal(r.err)
	}
	if err := h.Proclaim(context.Background(), "v3"); !errors.Is(err, ErrLockLost) {
		t.Fatalf("proclaim of a lost hold: %v", err)
	}
	b := lockNow(t, c, fc, "b", "2")
	done := make(chan error, 1)
	go func() { done <- b.Unlock(context.Background(), WithLinger(1500*time.Millisecond)) }()
	fc.expect("RELEASE b LINGER 1500")
	fc.send("ERR UNAVAILABLE redis unreachable")
	if err := <-done; err != nil || b.Err() != ErrReleased {
		t.Fatal(err, b.Err())
	}
}

// A broker that refuses a word the election needs fails loudly: Campaign
// returns the broker's error at once (one ACQUIRE, never asked again); a
// WATCH refused now is Watch's error; one refused by a new session's
// broker ends the watch with that error (Watcher.Err, and a last Leader
// with Err on Observe's channel).
func TestRefusedWordsFailLoudly(t *testing.T) {
	fb := newFakeBroker(t)
	c, fc := connectFake(t, fb, Config{})
	e := c.Election("lead")
	got := make(chan lockResult, 1)
	go func() {
		h, err := e.Campaign(context.Background(), "10.0.0.1:80")
		got <- lockResult{h, err}
	}()
	fc.expect("ACQUIRE lead VALUE 10.0.0.1:80 WAIT 2147483647 ASYNC")
	fc.send("ERR BADARG VALUE is not supported by this broker yet")
	r := waitLock(t, got)
	if !errors.Is(r.err, ErrBadArgument) || r.err.Error() != "lead: VALUE is not supported by this broker yet" {
		t.Fatalf("Campaign: %v", r.err)
	}
	fc.quiet(300 * time.Millisecond) // not asked again

	wch := make(chan error, 1)
	go func() {
		_, err := c.Watch(context.Background(), "x")
		wch <- err
	}()
	fc.expect("WATCH x")
	fc.send("ERR BADCMD unknown command")
	if err := <-wch; !errors.Is(err, ErrBadCommand) {
		t.Fatalf("Watch: %v", err)
	}

	leaders := observeFree(t, e, fc)
	fc.nc.Close() // the session cannot be resumed: the new one watches again
	fc2 := fb.accept()
	fc2.resume("cid-1", "s1")
	fc2.send("ERR NOSESSION the session expired")
	fc2.expect("HELLO GRACE 5000")
	fc2.send("OK cid-2 lockbroker/1.2.0 s2")
	fc2.expect("WATCH lead")
	fc2.send("ERR BADCMD unknown command")
	var last Leader
	for l := range leaders {
		last = l
	}
	if !errors.Is(last.Err, ErrBadCommand) {
		t.Fatalf("the last leader: %+v", last)
	}
}
