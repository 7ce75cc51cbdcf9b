package integration

// The client's counters and their hook after one scripted run against
// real brokers (issue 34): a hold, a wait that times out, a hold lost in
// Redis, and a resume on the second broker after the first is killed.

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	lockbroker "github.com/lockbroker/lockbroker/clients/go"
)

func TestCountersAfterAScriptedRun(t *testing.T) {
	e := setup(t, "broker x1", "broker x2")
	var mu sync.Mutex
	var seen []string
	var waitSeconds float64
	resumed := make(chan struct{}, 1)
	c := e.client(lockbroker.Config{Grace: 10 * time.Second,
		OnCounter: func(ev lockbroker.CounterEvent) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, strings.TrimSpace(ev.Name+" "+ev.Key))
			if ev.Name == "waits" {
				waitSeconds += ev.Seconds
			}
		},
		OnEvent: func(ev lockbroker.ConnEvent) {
			if ev.Kind == lockbroker.Resumed {
				resumed <- struct{}{}
			}
		}}, "x1", "x2")
	other := e.client(lockbroker.Config{}, "x2")
	cx := ctx(t, 30*time.Second)

	a, err := c.Lock(cx, "a") // wait 1
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := a.Unlock(cx); err != nil { // hold 1, of 200 ms or more
		t.Fatal(err)
	}
	if _, err := other.Lock(cx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx(t, 300*time.Millisecond), "b"); !errors.Is(err, lockbroker.ErrLockTimeout) { // wait 2
		t.Fatal(err)
	}
	l, err := c.Lock(cx, "l", lockbroker.WithTTL(900*time.Millisecond)) // wait 3: renewed every 300 ms
	if err != nil {
		t.Fatal(err)
	}
	e.step("redis del l")
	waitClosed(t, l.Lost(), 10*time.Second, "l lost") // loss 1, hold 2
	r, err := c.Lock(cx, "r") // wait 4
	if err != nil {
		t.Fatal(err)
	}
	e.step("kill x1")
	select { // resume 1, reconnect 1
	case <-resumed:
	case <-time.After(10 * time.Second):
		t.Fatal("not resumed")
	}
	if err := r.Unlock(cx); err != nil { // hold 3
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the hook's events, on their goroutine

	n := c.Counters()
	if n.Waits != 4 || n.Holds != 3 || n.Losses != 1 || n.Resumes != 1 || n.Reconnects != 1 {
		t.Fatalf("%+v", n)
	}
	if n.WaitSecondsTotal < 0.3 || n.WaitSecondsTotal > 5 || n.HoldSecondsTotal < 0.2 || n.HoldSecondsTotal > 30 {
		t.Fatalf("%+v", n)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "waits a, holds a, waits b, waits l, losses l, holds l, waits r, reconnects, resumes, holds r"
	if got := strings.Join(seen, ", "); got != want {
		t.Fatalf("the hook heard %s\nwant %s", got, want)
	}
	if d := waitSeconds - n.WaitSecondsTotal; d > 1e-9 || d < -1e-9 {
		t.Fatalf("the hook's seconds %v, the total %v", waitSeconds, n.WaitSecondsTotal)
	}
}
