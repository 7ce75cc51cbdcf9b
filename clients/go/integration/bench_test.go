package integration

// Pairs per second one client object reaches: ACQUIRE + RELEASE of a key in
// a loop, against a broker started as make bench starts its own (logging
// at warn). make bench runs them:
//
//	go test -run '^$' -bench Pairs -benchtime 5s ./integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"lockbroker"
)

func benchPairs(b *testing.B, goroutines int) {
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
	cfg := lockbroker.Config{Brokers: []string{info.Addr()}, AllowOldBroker: !info.Speaks12()}
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
				h, err := c.Lock(ctx, key)
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

// One goroutine: each pair waits for its two round trips.
func BenchmarkPairs1(b *testing.B) { benchPairs(b, 1) }

// Eight goroutines over the same client, each on its own key: the
// requests of the eight share one pipelined connection.
func BenchmarkPairs8(b *testing.B) { benchPairs(b, 8) }
