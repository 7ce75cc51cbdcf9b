package integration

// The integration tests' fixture: real Redis and brokers, started and
// faulted by the shared helper (tests/conformance/servers.py), one helper
// for the whole test binary, reset before each test.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	lockbroker "github.com/lockbroker/lockbroker/clients/go"
	"github.com/lockbroker/lockbroker/clients/go/internal/servers"
)

var helper *servers.Helper

func TestMain(m *testing.M) { servers.Main(m, &helper) }

type env struct {
	t *testing.T
}

// setup resets the helper and runs the test's server steps. A broker of
// this branch may speak 1.1 until protocol 1.2 lands: the library is then
// told to accept it (LOCKBROKER_ALLOW_OLD=1), so the 1.1 parts are tested
// now and the version check stays real on a 1.2 broker.
func setup(t *testing.T, steps ...string) *env {
	t.Helper()
	if err := helper.Reset(); err != nil {
		t.Fatalf("reset: %v\n%s", err, helper.Log())
	}
	e := &env{t: t}
	old := false
	for _, s := range steps {
		e.step(s)
		if w := strings.Fields(s); w[0] == "broker" && !e.broker(w[1]).Speaks12() {
			old = true
		}
	}
	if old {
		t.Setenv("LOCKBROKER_ALLOW_OLD", "1")
	}
	return e
}

func (e *env) step(line string) {
	e.t.Helper()
	if err := helper.Step(line); err != nil {
		e.t.Fatalf("%s: %v\n%s", line, err, helper.Log())
	}
}

func (e *env) broker(name string) servers.Broker {
	e.t.Helper()
	b, err := helper.Broker(name)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// requires12 fails a test of the protocol 1.2 words at once, saying why,
// while the broker speaks an older protocol.
func (e *env) requires12(names ...string) {
	e.t.Helper()
	for _, n := range names {
		if b := e.broker(n); !b.Speaks12() {
			e.t.Fatalf("needs protocol 1.2: broker %s speaks lockbroker/%s", n, b.Version)
		}
	}
}

// needs fails the test, saying why, if the broker lacks one of these words
// (VALUE, WATCH, CHECK): a broker under test without a word is a failure,
// not a skip.
func (e *env) needs(words ...string) {
	e.t.Helper()
	e.step("needs " + strings.Join(words, " "))
}

// client connects to the named brokers (in that order) with cfg.
func (e *env) client(cfg lockbroker.Config, names ...string) *lockbroker.Client {
	e.t.Helper()
	c, err := e.dial(cfg, names...)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) dial(cfg lockbroker.Config, names ...string) (*lockbroker.Client, error) {
	e.t.Helper()
	for _, n := range names {
		b := e.broker(n)
		if cfg.TLS != nil {
			cfg.Brokers = append(cfg.Brokers, b.TLSAddr())
		} else {
			cfg.Brokers = append(cfg.Brokers, b.Addr())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockbroker.Connect(ctx, cfg)
	if err == nil {
		e.t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// tlsConfig trusts the helper's CA.
func (e *env) tlsConfig(name string) *tls.Config {
	e.t.Helper()
	pem, err := os.ReadFile(e.broker(name).CA)
	if err != nil {
		e.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		e.t.Fatal("the helper's CA does not parse")
	}
	return &tls.Config{RootCAs: pool}
}

// ctx bounds a test's calls.
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// eventLog records a client's connection events.
type eventLog struct {
	mu   sync.Mutex
	seen []lockbroker.EventKind
}

func (l *eventLog) hook(ev lockbroker.ConnEvent) {
	l.mu.Lock()
	l.seen = append(l.seen, ev.Kind)
	l.mu.Unlock()
}

func (l *eventLog) waitFor(t *testing.T, kind lockbroker.EventKind, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		for _, k := range l.seen {
			if k == kind {
				l.mu.Unlock()
				return
			}
		}
		l.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %v event within %v (saw %v)", kind, within, l.seen)
}

func waitClosed(t *testing.T, ch <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("%s within %v", what, within)
	}
}
