package conformance

// The conformance runner: replays tests/conformance/*.txt (grammar:
// tests/conformance/README.md) through this library's API, against servers
// started by the shared helper. One subtest per transcript:
//
//	go test ./conformance                      every transcript
//	go test ./conformance -run 'Transcripts/lost$'
//
// Each client action runs on a goroutine of its own with a context of its
// own: in Go the context is the task (see the package's comment), so two
// actions are two tasks and the library's local per-key lock keeps them
// apart. A hold is kept by client and key for the later unlock, renew,
// proclaim and expect steps.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	lockbroker "github.com/lockbroker/lockbroker/clients/go"
	"github.com/lockbroker/lockbroker/clients/go/internal/servers"
)

const stepBound = 10 * time.Second // any step without its own within=

var helper *servers.Helper

func TestMain(m *testing.M) { servers.Main(m, &helper) }

func TestTranscripts(t *testing.T) {
	root, err := servers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "tests", "conformance", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts (%v)", err)
	}
	sort.Strings(files)
	for _, f := range files {
		f := f
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		t.Run(name, func(t *testing.T) {
			text, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			r := newRun(t)
			defer r.end()
			for _, st := range expand(string(text)) {
				if err := r.step(st.text); err != nil {
					t.Fatalf("%s:%d: %s\n    %v", filepath.Base(f), st.line, st.text, err)
				}
			}
		})
	}
}

// ------------------------------------------------------------ parsing --

type step struct {
	line int
	text string
}

var repeatRE = regexp.MustCompile(`^repeat (\d+)\.\.(\d+) (.+)$`)

// expand drops blanks and comments and unrolls repeat steps.
func expand(text string) []step {
	var out []step
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if m := repeatRE.FindStringSubmatch(l); m != nil {
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			for n := a; n <= b; n++ {
				out = append(out, step{i + 1, strings.ReplaceAll(m[3], "{i}", strconv.Itoa(n))})
			}
			continue
		}
		out = append(out, step{i + 1, l})
	}
	return out
}

// words splits a step into what to do and its outcome (after "->").
func split(line string) (do, outcome []string, hasOutcome bool) {
	w := strings.Fields(line)
	for i, x := range w {
		if x == "->" {
			return w[:i], w[i+1:], true
		}
	}
	return w, nil, false
}

// options: positional words, name=value options, flags.
func options(words []string) (pos []string, opts map[string]string, flags map[string]bool) {
	opts, flags = map[string]string{}, map[string]bool{}
	for _, w := range words {
		if i := strings.IndexByte(w, '='); i > 0 {
			opts[w[:i]] = w[i+1:]
		} else if w == "shared" || w == "tls" {
			flags[w] = true
		} else {
			pos = append(pos, w)
		}
	}
	return
}

func ms(s string) (time.Duration, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a time in ms: %q", s)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// --------------------------------------------------------------- a run --

type run struct {
	t       *testing.T
	mu      sync.Mutex
	clients map[string]*client // by name; nil: its connect failed
	vars    map[string]uint64
	calls   map[string]*asyncCall
}

type client struct {
	c         *lockbroker.Client
	mu        sync.Mutex
	holds     map[string]*lockbroker.Hold
	elections map[string]*lockbroker.Election
	watches   map[string]*lockbroker.Watcher
	leaders   map[string]*leaderView
	events    map[string]int // reported, not yet counted by an expect
}

type leaderView struct {
	mu    sync.Mutex
	have  bool
	value string
}

type asyncCall struct {
	cancel  context.CancelFunc
	done    chan struct{}
	outcome outcome
}

// outcome is what a call gave: its conformance words and how long it took.
type outcome struct {
	words []string
	took  time.Duration
	hold  *lockbroker.Hold
}

func newRun(t *testing.T) *run {
	if err := helper.Reset(); err != nil {
		t.Fatalf("reset: %v", err)
	}
	os.Unsetenv("LOCKBROKER_ALLOW_OLD")
	return &run{t: t, clients: map[string]*client{}, vars: map[string]uint64{}, calls: map[string]*asyncCall{}}
}

// end closes every client still open and waits for the calls still
// running (bounded).
func (r *run) end() {
	for _, c := range r.clients {
		if c != nil {
			c.c.Close()
		}
	}
	for _, a := range r.calls {
		a.cancel()
		select {
		case <-a.done:
		case <-time.After(stepBound):
		}
	}
	os.Unsetenv("LOCKBROKER_ALLOW_OLD")
}

func (r *run) step(line string) error {
	do, out, hasOut := split(line)
	if len(do) == 0 {
		return nil
	}
	switch do[0] {
	case "client":
		return r.newClient(do[1:], out)
	case "await", "cancel":
		if len(do) != 2 || !hasOut {
			return fmt.Errorf("%s <name> -> <outcome>", do[0])
		}
		a := r.calls[do[1]]
		if a == nil {
			return fmt.Errorf("no call %q", do[1])
		}
		if do[0] == "cancel" {
			a.cancel()
		}
		select {
		case <-a.done:
		case <-time.After(stepBound):
			return fmt.Errorf("%s did not end within %v", do[1], stepBound)
		}
		return r.check(a.outcome, out)
	case "assert":
		return r.assert(do[1:])
	}
	if _, isClient := r.clients[do[0]]; isClient {
		return r.clientStep(do, out, hasOut)
	}
	// a server step: the helper's business
	if err := helper.Step(line); err != nil {
		return err
	}
	if do[0] == "broker" && len(do) > 1 {
		b, err := helper.Broker(do[1])
		if err == nil && !b.Speaks12() {
			// a broker of this branch may speak 1.1 until protocol 1.2
			// lands: test the 1.1 parts now (requires 1.2 still fails)
			os.Setenv("LOCKBROKER_ALLOW_OLD", "1")
		}
	}
	return nil
}

// client <c> <b>[,<b>...] [tls] [auth=] [grace=] [ping=] [name=] [-> ok | error CODE]
func (r *run) newClient(args, out []string) error {
	pos, opts, flags := options(args)
	if len(pos) != 2 {
		return errors.New("client <name> <broker>[,<broker>...]")
	}
	name := pos[0]
	cfg := lockbroker.Config{Auth: opts["auth"], Name: opts["name"]}
	for _, bn := range strings.Split(pos[1], ",") {
		b, err := helper.Broker(bn)
		if err != nil {
			return err
		}
		if flags["tls"] {
			cfg.Brokers = append(cfg.Brokers, b.TLSAddr())
			pem, err := os.ReadFile(b.CA)
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			cfg.TLS = &tls.Config{RootCAs: pool}
		} else {
			cfg.Brokers = append(cfg.Brokers, b.Addr())
		}
	}
	if g, ok := opts["grace"]; ok {
		d, err := ms(g)
		if err != nil {
			return err
		}
		cfg.Grace = d
		if d == 0 {
			cfg.Grace = lockbroker.NoGrace
		}
	}
	if p, ok := opts["ping"]; ok {
		d, err := ms(p)
		if err != nil {
			return err
		}
		cfg.PingInterval, cfg.PingTimeout = d, d
	}
	cl := &client{holds: map[string]*lockbroker.Hold{}, elections: map[string]*lockbroker.Election{},
		watches: map[string]*lockbroker.Watcher{}, leaders: map[string]*leaderView{}, events: map[string]int{}}
	cfg.OnEvent = func(ev lockbroker.ConnEvent) {
		cl.mu.Lock()
		cl.events[ev.Kind.String()]++
		cl.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepBound)
	defer cancel()
	start := time.Now()
	c, err := lockbroker.Connect(ctx, cfg)
	r.clients[name] = nil
	if err == nil {
		cl.c = c
		r.clients[name] = cl
	}
	if out == nil {
		out = []string{"ok"}
	}
	return r.check(outcome{words: words(err), took: time.Since(start)}, out)
}

// clientStep: <c> <action> ... [async=<name>] [-> outcome], or
// <c> expect ...
func (r *run) clientStep(do, out []string, hasOut bool) error {
	cl := r.clients[do[0]]
	if cl == nil {
		return fmt.Errorf("client %s is not connected", do[0])
	}
	if len(do) < 2 {
		return errors.New("<client> <action>")
	}
	if do[1] == "expect" {
		return r.expect(cl, do[2:])
	}
	pos, opts, flags := options(do[1:])
	asyncName := opts["async"]
	delete(opts, "async")
	ctx, cancel := context.WithCancel(context.Background())
	fn, err := r.action(cl, pos, opts, flags)
	if err != nil {
		cancel()
		return err
	}
	a := &asyncCall{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		start := time.Now()
		o := fn(ctx)
		o.took = time.Since(start)
		a.outcome = o
	}()
	if asyncName != "" {
		if hasOut {
			return errors.New("an async action has no outcome (await it)")
		}
		r.calls[asyncName] = a
		return nil
	}
	if !hasOut {
		return errors.New("an action needs -> <outcome> (or async=<name>)")
	}
	defer cancel()
	select {
	case <-a.done:
	case <-time.After(stepBound):
		return fmt.Errorf("the call did not end within %v", stepBound)
	}
	return r.check(a.outcome, out)
}

// action turns a client action into a call of the library.
func (r *run) action(cl *client, pos []string, opts map[string]string, flags map[string]bool) (func(context.Context) outcome, error) {
	verb := pos[0]
	key := ""
	if len(pos) > 1 {
		key = pos[1]
	}
	c := cl.c
	hold := func() *lockbroker.Hold {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return cl.holds[key]
	}
	noHold := outcome{words: []string{"error", "USAGE"}}
	switch verb {
	case "lock", "elect":
		var lopts []lockbroker.LockOption
		if flags["shared"] {
			lopts = append(lopts, lockbroker.WithShared())
		}
		if l, ok := opts["limit"]; ok {
			n, err := strconv.Atoi(l)
			if err != nil {
				return nil, err
			}
			lopts = append(lopts, lockbroker.WithLimit(n))
		}
		if v, ok := opts["ttl"]; ok {
			d, err := ms(v)
			if err != nil {
				return nil, err
			}
			lopts = append(lopts, lockbroker.WithTTL(d))
		}
		if v, ok := opts["value"]; ok {
			lopts = append(lopts, lockbroker.WithValue(v))
		}
		var wait time.Duration
		if v, ok := opts["wait"]; ok {
			d, err := ms(v)
			if err != nil {
				return nil, err
			}
			wait = d
		}
		if verb == "elect" && len(pos) < 3 {
			return nil, errors.New("elect <key> <value>")
		}
		return func(ctx context.Context) outcome {
			var h *lockbroker.Hold
			var err error
			switch {
			case verb == "elect":
				if wait > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, wait)
					defer cancel()
				}
				cl.mu.Lock()
				e := cl.elections[key]
				if e == nil {
					e = c.Election(key)
					cl.elections[key] = e
				}
				cl.mu.Unlock()
				h, err = e.Campaign(ctx, pos[2])
			case wait > 0:
				wctx, cancel := context.WithTimeout(ctx, wait)
				defer cancel()
				h, err = c.Lock(wctx, key, lopts...)
			default:
				h, err = c.TryLock(ctx, key, lopts...)
			}
			if err != nil {
				return outcome{words: words(err)}
			}
			cl.mu.Lock()
			cl.holds[key] = h
			cl.mu.Unlock()
			return outcome{words: []string{"held", strconv.FormatUint(h.Token(), 10)}, hold: h}
		}, nil
	case "unlock":
		var uopts []lockbroker.UnlockOption
		if v, ok := opts["linger"]; ok {
			d, err := ms(v)
			if err != nil {
				return nil, err
			}
			uopts = append(uopts, lockbroker.WithLinger(d))
		}
		return func(ctx context.Context) outcome {
			h := hold()
			if h == nil {
				return noHold
			}
			err := h.Unlock(ctx, uopts...)
			cl.mu.Lock()
			if cl.holds[key] == h {
				delete(cl.holds, key)
			}
			cl.mu.Unlock()
			return outcome{words: words(err)}
		}, nil
	case "renew":
		var ttl time.Duration
		if v, ok := opts["ttl"]; ok {
			d, err := ms(v)
			if err != nil {
				return nil, err
			}
			ttl = d
		}
		return func(ctx context.Context) outcome {
			h := hold()
			if h == nil {
				return noHold
			}
			_, err := h.Renew(ctx, ttl)
			return outcome{words: words(err)}
		}, nil
	case "proclaim":
		if len(pos) < 3 {
			return nil, errors.New("proclaim <key> <value>")
		}
		return func(ctx context.Context) outcome {
			h := hold()
			if h == nil {
				return noHold
			}
			return outcome{words: words(h.Proclaim(ctx, pos[2]))}
		}, nil
	case "owner":
		return func(ctx context.Context) outcome {
			s, err := c.Owner(ctx, key)
			if err != nil {
				return outcome{words: words(err)}
			}
			return outcome{words: stateWords(s)}
		}, nil
	case "check":
		if len(pos) < 3 {
			return nil, errors.New("check <key> <tok>")
		}
		tok, err := r.token(pos[2])
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) outcome {
			res, err := c.Check(ctx, key, tok)
			switch {
			case err != nil:
				return outcome{words: words(err)}
			case res.Current:
				return outcome{words: []string{"current"}}
			case res.Token == 0:
				return outcome{words: []string{"stale", "-"}}
			}
			return outcome{words: []string{"stale", strconv.FormatUint(res.Token, 10)}}
		}, nil
	case "watch":
		return func(ctx context.Context) outcome {
			w, err := c.Watch(context.Background(), key)
			if err != nil {
				return outcome{words: words(err)}
			}
			cl.mu.Lock()
			cl.watches[key] = w
			cl.mu.Unlock()
			return outcome{words: []string{"ok"}}
		}, nil
	case "unwatch":
		return func(ctx context.Context) outcome {
			cl.mu.Lock()
			w := cl.watches[key]
			delete(cl.watches, key)
			cl.mu.Unlock()
			if w != nil {
				w.Close()
			}
			return outcome{words: []string{"ok"}}
		}, nil
	case "resign":
		return func(ctx context.Context) outcome {
			cl.mu.Lock()
			e := cl.elections[key]
			delete(cl.holds, key)
			cl.mu.Unlock()
			if e == nil {
				return outcome{words: []string{"ok"}}
			}
			return outcome{words: words(e.Resign(ctx))}
		}, nil
	case "close":
		return func(ctx context.Context) outcome {
			return outcome{words: words(c.Close())}
		}, nil
	case "exit":
		// the program ends without an explicit close: Go has no exit
		// hook, so what ends the session is the README's defer c.Close()
		return func(ctx context.Context) outcome {
			return outcome{words: words(c.Close())}
		}, nil
	}
	return nil, fmt.Errorf("unknown action %q", verb)
}

// expect lost|held|watch|leader|event ...
func (r *run) expect(cl *client, args []string) error {
	pos, opts, _ := options(args)
	if len(pos) < 2 {
		return errors.New("expect <what> <key|name> ...")
	}
	within := 5 * time.Second
	if v, ok := opts["within"]; ok {
		d, err := ms(v)
		if err != nil {
			return err
		}
		within = d
	}
	what, key := pos[0], pos[1]
	cl.mu.Lock()
	h := cl.holds[key]
	cl.mu.Unlock()
	switch what {
	case "lost":
		if h == nil {
			return fmt.Errorf("no hold of %s", key)
		}
		select {
		case <-h.Lost():
			return nil
		case <-time.After(within):
			return fmt.Errorf("%s not reported lost within %v (Err: %v)", key, within, h.Err())
		}
	case "held":
		if h == nil {
			return fmt.Errorf("no hold of %s", key)
		}
		if len(pos) > 2 {
			if err := r.match(pos[2], h.Token()); err != nil {
				return err
			}
		}
		var hold time.Duration
		if v, ok := opts["for"]; ok {
			d, err := ms(v)
			if err != nil {
				return err
			}
			hold = d
		}
		select {
		case <-h.Lost():
			return fmt.Errorf("%s was lost: %v", key, h.Err())
		case <-time.After(hold):
		}
		if err := h.Err(); err != nil {
			return fmt.Errorf("%s ended: %v", key, err)
		}
		return nil
	case "watch":
		cl.mu.Lock()
		w := cl.watches[key]
		cl.mu.Unlock()
		if w == nil {
			return fmt.Errorf("%s is not watched", key)
		}
		// the state's words as written: "shared" and "value=..." are
		// parts of it here, not a flag and an option
		var state []string
		for _, x := range args[2:] {
			if !strings.HasPrefix(x, "within=") {
				state = append(state, x)
			}
		}
		var last lockbroker.KeyState
		return r.eventually(within, func() error {
			s, ok := w.State()
			last = s
			if !ok {
				return errors.New("no state yet")
			}
			return r.matchState(state, s)
		}, func() string { return "last state: " + strings.Join(stateWords(last), " ") })
	case "leader":
		if len(pos) < 3 {
			return errors.New("expect leader <key> <value|->")
		}
		v, err := r.leaderView(cl, key)
		if err != nil {
			return err
		}
		want := pos[2]
		if want == "-" {
			want = ""
		}
		var got string
		return r.eventually(within, func() error {
			v.mu.Lock()
			have := v.have
			got = v.value
			v.mu.Unlock()
			if !have || got != want {
				return errors.New("not yet")
			}
			return nil
		}, func() string { return fmt.Sprintf("the leader is %q", got) })
	case "event":
		return r.eventually(within, func() error {
			cl.mu.Lock()
			defer cl.mu.Unlock()
			if cl.events[key] > 0 {
				cl.events[key]--
				return nil
			}
			return errors.New("not yet")
		}, func() string {
			cl.mu.Lock()
			defer cl.mu.Unlock()
			return fmt.Sprintf("events seen: %v", cl.events)
		})
	}
	return fmt.Errorf("unknown expectation %q", what)
}

// leaderView starts the client's election watch of key on first use.
func (r *run) leaderView(cl *client, key string) (*leaderView, error) {
	cl.mu.Lock()
	v := cl.leaders[key]
	cl.mu.Unlock()
	if v != nil {
		return v, nil
	}
	ch, err := cl.c.Election(key).Observe(context.Background())
	if err != nil {
		return nil, err
	}
	v = &leaderView{}
	go func() {
		for l := range ch {
			if l.Err != nil {
				return // the watch ended: the expectation fails, saying the last leader
			}
			v.mu.Lock()
			v.have, v.value = true, l.Value
			v.mu.Unlock()
		}
	}()
	cl.mu.Lock()
	cl.leaders[key] = v
	cl.mu.Unlock()
	return v, nil
}

func (r *run) eventually(within time.Duration, ok func() error, last func() string) error {
	deadline := time.Now().Add(within)
	for {
		if ok() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v; %s", within, last())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ------------------------------------------------------------ outcomes --

// words is the conformance word for what a call returned.
func words(err error) []string {
	if err == nil {
		return []string{"ok"}
	}
	var be *lockbroker.Error
	switch {
	case errors.Is(err, lockbroker.ErrLockTimeout):
		return []string{"timeout"}
	case errors.Is(err, lockbroker.ErrBusy):
		return []string{"busy"}
	case errors.Is(err, lockbroker.ErrCancelled):
		return []string{"cancelled"}
	case errors.Is(err, lockbroker.ErrLockLost):
		return []string{"error", "LOST"}
	case errors.Is(err, lockbroker.ErrSessionLost):
		return []string{"error", "SESSION"}
	case errors.As(err, &be) && be.Code != "":
		return []string{"error", be.Code}
	case errors.Is(err, lockbroker.ErrBadArgument):
		return []string{"error", "BADARG"}
	case errors.Is(err, lockbroker.ErrUsage):
		return []string{"error", "USAGE"}
	case errors.Is(err, lockbroker.ErrConnect):
		return []string{"error", "CONNECT"}
	case errors.Is(err, lockbroker.ErrVersion):
		return []string{"error", "VERSION"}
	case errors.Is(err, lockbroker.ErrProtocolError):
		return []string{"error", "PROTOCOL"}
	}
	return []string{"error", "(" + err.Error() + ")"}
}

func stateWords(s lockbroker.KeyState) []string {
	switch s.Kind {
	case lockbroker.Exclusive:
		v := s.Value
		if v == "" {
			v = "-"
		}
		return []string{"exclusive", strconv.FormatUint(s.Token, 10), "value=" + v}
	case lockbroker.Shared:
		return []string{"shared", strconv.Itoa(s.Holders)}
	case lockbroker.Semaphore:
		return []string{"semaphore", strconv.Itoa(s.Holders), strconv.Itoa(s.Limit)}
	}
	return []string{"free"}
}

// check compares what a call gave with the transcript's outcome.
func (r *run) check(got outcome, want []string) error {
	if len(want) == 0 {
		return errors.New("no outcome")
	}
	if last := want[len(want)-1]; strings.HasPrefix(last, "after=") {
		want = want[:len(want)-1]
		lo, hi, ok := strings.Cut(strings.TrimPrefix(last, "after="), "..")
		a, err1 := ms(lo)
		b, err2 := ms(hi)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("bad %s", last)
		}
		if got.took < a || got.took > b {
			return fmt.Errorf("got %s after %v, want within %v..%v", strings.Join(got.words, " "), got.took, a, b)
		}
	}
	fail := func() error {
		return fmt.Errorf("got %s, want %s", strings.Join(got.words, " "), strings.Join(want, " "))
	}
	g := got.words
	switch want[0] {
	case "held":
		if g[0] != "held" {
			return fail()
		}
		if len(want) > 1 {
			tok, _ := strconv.ParseUint(g[1], 10, 64)
			return r.match(want[1], tok)
		}
		return nil
	case "stale":
		if g[0] != "stale" || len(want) < 2 {
			return fail()
		}
		if want[1] == "-" || g[1] == "-" {
			if want[1] != g[1] {
				return fail()
			}
			return nil
		}
		tok, _ := strconv.ParseUint(g[1], 10, 64)
		return r.match(want[1], tok)
	case "free", "exclusive", "shared", "semaphore":
		if g[0] == "error" {
			return fail()
		}
		return r.matchState(want, parseStateWords(g))
	}
	if strings.Join(g, " ") != strings.Join(want, " ") {
		return fail()
	}
	return nil
}

func parseStateWords(w []string) lockbroker.KeyState {
	n := func(i int) int {
		if i < len(w) {
			v, _ := strconv.Atoi(w[i])
			return v
		}
		return 0
	}
	switch w[0] {
	case "exclusive":
		tok, _ := strconv.ParseUint(w[1], 10, 64)
		v := strings.TrimPrefix(w[2], "value=")
		if v == "-" {
			v = "" // no value
		}
		return lockbroker.KeyState{Kind: lockbroker.Exclusive, Holders: 1, Token: tok, Value: v}
	case "shared":
		return lockbroker.KeyState{Kind: lockbroker.Shared, Holders: n(1)}
	case "semaphore":
		return lockbroker.KeyState{Kind: lockbroker.Semaphore, Holders: n(1), Limit: n(2)}
	}
	return lockbroker.KeyState{Kind: lockbroker.Free}
}

// matchState: free · exclusive [<tok>] [value=<text>|value=-] · shared
// <holders> · semaphore <holders> <limit>; parts left out are not checked.
func (r *run) matchState(want []string, s lockbroker.KeyState) error {
	fail := func() error {
		return fmt.Errorf("state %s, want %s", strings.Join(stateWords(s), " "), strings.Join(want, " "))
	}
	if len(want) == 0 || want[0] != strings.ToLower(s.Kind.String()) {
		return fail()
	}
	switch want[0] {
	case "exclusive":
		for _, w := range want[1:] {
			if strings.HasPrefix(w, "value=") {
				v := strings.TrimPrefix(w, "value=")
				if v == "-" {
					v = ""
				}
				if v != s.Value {
					return fail()
				}
			} else if err := r.match(w, s.Token); err != nil {
				return err
			}
		}
	case "shared", "semaphore":
		for i, w := range want[1:] {
			n, err := strconv.Atoi(w)
			if err != nil {
				return fmt.Errorf("bad state %v", want)
			}
			if (i == 0 && n != s.Holders) || (i == 1 && n != s.Limit) {
				return fail()
			}
		}
	}
	return nil
}

// match binds a $variable on its first appearance, then compares; a
// literal compares.
func (r *run) match(word string, tok uint64) error {
	if strings.HasPrefix(word, "$") {
		if v, ok := r.vars[word]; ok {
			if v != tok {
				return fmt.Errorf("token %d, want %s = %d", tok, word, v)
			}
			return nil
		}
		r.vars[word] = tok
		return nil
	}
	v, err := strconv.ParseUint(word, 10, 64)
	if err != nil || v != tok {
		return fmt.Errorf("token %d, want %s", tok, word)
	}
	return nil
}

func (r *run) token(word string) (uint64, error) {
	if strings.HasPrefix(word, "$") {
		v, ok := r.vars[word]
		if !ok {
			return 0, fmt.Errorf("%s is not bound", word)
		}
		return v, nil
	}
	return strconv.ParseUint(word, 10, 64)
}

// assert <tok> <op> <tok>, op: < = !=
func (r *run) assert(args []string) error {
	if len(args) != 3 {
		return errors.New("assert <tok> <op> <tok>")
	}
	a, err := r.token(args[0])
	if err != nil {
		return err
	}
	b, err := r.token(args[2])
	if err != nil {
		return err
	}
	ok := false
	switch args[1] {
	case "<":
		ok = a < b
	case "=":
		ok = a == b
	case "!=":
		ok = a != b
	default:
		return fmt.Errorf("unknown op %q", args[1])
	}
	if !ok {
		return fmt.Errorf("%s (%d) %s %s (%d) is false", args[0], a, args[1], args[2], b)
	}
	return nil
}
