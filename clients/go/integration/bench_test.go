package integration

// Pairs per second one client object reaches: ACQUIRE + RELEASE of a key in
// a loop, against a broker the helper starts (with logging at warn), or
// the one at $LOCKBROKER_BENCH_ADDR (one started as the repository's make
// bench starts its own). make bench runs them:
//
//	go test -run '^$' -bench Pairs -benchtime 5s ./integration

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	lockbroker "github.com/lockbroker/lockbroker/clients/go"
)

func benchPairs(b *testing.B, goroutines int, try bool) {
	cfg := lockbroker.Config{Brokers: []string{os.Getenv("LOCKBROKER_BENCH_ADDR")}, AllowOldBroker: true}
	if cfg.Brokers[0] == "" {
		if err := helper.Reset(); err != nil {
			b.Fatal(err)
		}
		if err := helper.Step("broker b1 log_level=warn"); err != nil {
			b.Fatal(err)
		}
		info, err := helper.Broker("b1")
		if err != nil {
			b.Fatal(err)
		}
		cfg.Brokers[0] = info.Addr()
	}
	lock := func(c *lockbroker.Client, ctx context.Context, key string) (*lockbroker.Hold, error) {
		if try {
			return c.TryLock(ctx, key)
		}
		return c.Lock(ctx, key)
	}
	c, err := lockbroker.Connect(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := b.N / goroutines
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(key string) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				h, err := lock(c, ctx, key)
				if err != nil {
					b.Error(err)
					return
				}
				if err := h.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}(fmt.Sprintf("bench:%d", g))
	}
	wg.Wait()
	b.ReportMetric(float64(per*goroutines)/time.Since(start).Seconds(), "pairs/s")
}

// One goroutine: each pair waits for its two round trips. Lock (no
// deadline: ACQUIRE ... WAIT <longest> ASYNC), or TryLock (ACQUIRE, as the
// broker's own lbbench pairs sends).
func BenchmarkPairs1(b *testing.B)    { benchPairs(b, 1, false) }
func BenchmarkPairs1Try(b *testing.B) { benchPairs(b, 1, true) }

// Eight goroutines over the same client, each on its own key: the
// requests of the eight share one pipelined connection.
func BenchmarkPairs8(b *testing.B)    { benchPairs(b, 8, false) }
func BenchmarkPairs8Try(b *testing.B) { benchPairs(b, 8, true) }
