package lockbroker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAcquireLine(t *testing.T) {
	rows := []struct {
		spec  lockSpec
		wait  int64
		async bool
		want  string
	}{
		{lockSpec{kind: Exclusive}, 0, true, "ACQUIRE k ASYNC"},
		{lockSpec{kind: Exclusive}, 0, false, "ACQUIRE k"},
		{lockSpec{kind: Shared}, 250, true, "ACQUIRE k SHARED WAIT 250 ASYNC"},
		{lockSpec{kind: Semaphore, limit: 3}, 0, true, "ACQUIRE k LIMIT 3 ASYNC"},
		{lockSpec{kind: Exclusive, ttl: 1500 * time.Microsecond, value: "10.0.0.7:80"}, 9, true,
			"ACQUIRE k VALUE 10.0.0.7:80 WAIT 9 TTL 2 ASYNC"},
	}
	for _, r := range rows {
		if got := acquireLine("k", r.spec, r.wait, r.async); got != r.want {
			t.Errorf("acquireLine(%+v, %d, %v) = %q, want %q", r.spec, r.wait, r.async, got, r.want)
		}
	}
}

func TestLockSpecCheck(t *testing.T) {
	bad := []lockSpec{
		{kind: Shared, value: "x"},
		{kind: Semaphore, limit: 0},
		{kind: Semaphore, limit: maxLimit + 1},
		{kind: Semaphore, limit: 2, value: "x"},
		{kind: Exclusive, value: "has blank"},
		{kind: Exclusive, value: strings.Repeat("v", maxValueLen+1)},
		{kind: Exclusive, ttl: -time.Second},
		{kind: Free},
	}
	for _, s := range bad {
		if err := s.check(); !errors.Is(err, ErrBadArgument) {
			t.Errorf("%+v: %v, want ErrBadArgument", s, err)
		}
	}
	good := []lockSpec{{kind: Exclusive}, {kind: Shared}, {kind: Semaphore, limit: maxLimit},
		{kind: Exclusive, value: strings.Repeat("v", maxValueLen)}}
	for _, s := range good {
		if err := s.check(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"", "a b", "tab\tkey", "é", strings.Repeat("k", maxKeyLen+1), "nul\x00"} {
		if err := checkKey(k); !errors.Is(err, ErrBadArgument) {
			t.Errorf("checkKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"k", "orders:42", "{tag}:x", strings.Repeat("k", maxKeyLen)} {
		if err := checkKey(k); err != nil {
			t.Errorf("checkKey(%q) = %v", k, err)
		}
	}
}

func TestToMS(t *testing.T) {
	rows := map[time.Duration]int64{0: 0, -time.Second: 0, time.Microsecond: 1, time.Millisecond: 1,
		1001 * time.Microsecond: 2, time.Hour * 24 * 30: maxMS}
	for d, want := range rows {
		if got := toMS(d); got != want {
			t.Errorf("toMS(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestParseHello(t *testing.T) {
	h, err := parseHello("OK 3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10 lockbroker/1.2.0 9f0c3e1a")
	if err != nil || h.clientID != "3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10" || h.version != [3]int{1, 2, 0} || h.secret != "9f0c3e1a" {
		t.Fatalf("got %+v, %v", h, err)
	}
	if h, err := parseHello("OK id lockbroker/1.10.3-rc1"); err != nil || h.version != [3]int{1, 10, 3} || h.secret != "" {
		t.Fatalf("got %+v, %v", h, err)
	}
	for _, bad := range []string{"OK id", "OK id redis/7.0", "OK id lockbroker/x.y", "OK id lockbroker/1", "ERR NOAUTH x"} {
		if _, err := parseHello(bad); !errors.Is(err, ErrProtocolError) {
			t.Errorf("parseHello(%q) = %v", bad, err)
		}
	}
	rows := []struct {
		v  [3]int
		ok bool
	}{{[3]int{1, 0, 0}, false}, {[3]int{1, 1, 9}, false}, {[3]int{1, 2, 0}, true}, {[3]int{1, 3, 0}, true}, {[3]int{2, 0, 0}, true}, {[3]int{0, 9, 0}, false}}
	for _, r := range rows {
		if versionAtLeast(r.v, minVersion) != r.ok {
			t.Errorf("versionAtLeast(%v) != %v", r.v, r.ok)
		}
	}
}

func TestParseOwner(t *testing.T) {
	rows := map[string]KeyState{
		"OK -":                       {Kind: Free},
		"OK SHARED 2 a 10 5 b 11 6":  {Kind: Shared, Holders: 2},
		"OK SEMAPHORE 2 3 a 10 5":    {Kind: Semaphore, Holders: 2, Limit: 3},
		"OK cid 29998 1795346669878": {Kind: Exclusive, Holders: 1, ClientID: "cid", TTL: 29998 * time.Millisecond, Token: 1795346669878},
		"OK ? 5 17 10.0.0.7:8080":    {Kind: Exclusive, Holders: 1, ClientID: "?", TTL: 5 * time.Millisecond, Token: 17, Value: "10.0.0.7:8080"},
		"OK cid 5 17 -":              {Kind: Exclusive, Holders: 1, ClientID: "cid", TTL: 5 * time.Millisecond, Token: 17},
	}
	for line, want := range rows {
		got, err := parseOwner(line)
		if err != nil || got != want {
			t.Errorf("parseOwner(%q) = %+v, %v; want %+v", line, got, err, want)
		}
	}
	for _, bad := range []string{"OK", "OK SHARED", "OK SEMAPHORE 2", "OK cid x 5", "OK cid 5 0", "BUSY"} {
		if _, err := parseOwner(bad); err == nil {
			t.Errorf("parseOwner(%q) accepted", bad)
		}
	}
}

func TestParseCheckAndTokens(t *testing.T) {
	if r, err := parseCheck("OK CURRENT"); err != nil || !r.Current {
		t.Errorf("CURRENT: %+v %v", r, err)
	}
	if r, err := parseCheck("OK STALE 42"); err != nil || r.Current || r.Token != 42 {
		t.Errorf("STALE 42: %+v %v", r, err)
	}
	if r, err := parseCheck("OK STALE -"); err != nil || r.Current || r.Token != 0 {
		t.Errorf("STALE -: %+v %v", r, err)
	}
	for _, bad := range []string{"OK", "OK STALE", "OK STALE x", "OK FRESH"} {
		if _, err := parseCheck(bad); err == nil {
			t.Errorf("parseCheck(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "0", "-1", "1e5", "9007199254740992", "12345678901234567", " 1"} {
		if _, err := parseToken(bad); err == nil {
			t.Errorf("parseToken(%q) accepted", bad)
		}
	}
	if tok, err := parseToken("9007199254740991"); err != nil || tok != maxToken {
		t.Errorf("max token: %d %v", tok, err)
	}
	for _, n := range []uint64{1, 9, 10, 1795346669878170, maxToken} {
		if got, _ := parseToken(formatToken(n)); got != n {
			t.Errorf("formatToken(%d) round trip: %d", n, got)
		}
	}
}

func TestEventsAndWatchStates(t *testing.T) {
	ev, err := parseEvent("EVENT HOLDER k cid 17 host-a")
	if err != nil || ev.kind != "HOLDER" || ev.key != "k" || len(ev.args) != 3 {
		t.Fatalf("%+v %v", ev, err)
	}
	rows := map[string]KeyState{
		"EVENT HOLDER k cid 17 host-a": {Kind: Exclusive, Holders: 1, ClientID: "cid", Token: 17, Value: "host-a"},
		"EVENT HOLDER k ? 17 -":        {Kind: Exclusive, Holders: 1, ClientID: "?", Token: 17},
		"EVENT HOLDER k SHARED 2":      {Kind: Shared, Holders: 2},
		"EVENT HOLDER k SEMAPHORE 1 3": {Kind: Semaphore, Holders: 1, Limit: 3},
		"EVENT FREE k":                 {Kind: Free},
	}
	for line, want := range rows {
		ev, _ := parseEvent(line)
		got, err := watchState(ev)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", line, got, err, want)
		}
	}
	for _, bad := range []string{"EVENT HOLDER k", "EVENT HOLDER k SHARED x", "EVENT HOLDER k cid 0 v", "EVENT HOLDER k SEMAPHORE 1"} {
		ev, _ := parseEvent(bad)
		if _, err := watchState(ev); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := parseEvent("EVENT LOST"); err == nil {
		t.Error("EVENT without key accepted")
	}
}

func TestParseListAndStats(t *testing.T) {
	if keys, err := parseList("OK 2 a b"); err != nil || len(keys) != 2 {
		t.Errorf("%v %v", keys, err)
	}
	if keys, err := parseList("OK 0"); err != nil || len(keys) != 0 {
		t.Errorf("%v %v", keys, err)
	}
	for _, bad := range []string{"OK 2 a", "OK", "OK x", "ERR NOSESSION gone"} {
		if _, err := parseList(bad); err == nil {
			t.Errorf("parseList(%q) accepted", bad)
		}
	}
	m, err := parseStats("OK version=1.2.0 sessions=3 junk")
	if err != nil || m["version"] != "1.2.0" || m["sessions"] != "3" || len(m) != 2 {
		t.Errorf("%v %v", m, err)
	}
}

func TestErrors(t *testing.T) {
	err := errorFromReply("ERR DENIED app billing may not use this key", "ACQUIRE reports:x WAIT 5000 ASYNC")
	var e *Error
	if !errors.As(err, &e) || e.Code != "DENIED" || !errors.Is(err, ErrDenied) || errors.Is(err, ErrLockLost) {
		t.Fatalf("%#v", err)
	}
	// issue 34: what happened to which key, for people; the broker's line and the request beside it
	if err.Error() != "reports:x: app billing may not use this key" || e.Key != "reports:x" ||
		e.Reply != "ERR DENIED app billing may not use this key" || e.Request != "ACQUIRE reports:x WAIT 5000 ASYNC" {
		t.Errorf("%q %#v", err, e)
	}
	for code, sentinel := range codeErrors {
		if !errors.Is(errorFromReply("ERR "+code+" x", "R"), sentinel) {
			t.Errorf("ERR %s does not match its sentinel", code)
		}
	}
	if err := errorFromReply("ERR BADCMD unknown command", "WATCH k"); !strings.HasPrefix(err.Error(),
		"k: the broker does not know WATCH (unknown command)") {
		t.Error(err)
	}
	if !errors.Is(timeoutError("k"), ErrLockTimeout) || !errors.Is(timeoutError("k"), context.DeadlineExceeded) {
		t.Error("ErrLockTimeout does not match context.DeadlineExceeded")
	}
	if !errors.Is(ErrClosed, ErrUsage) {
		t.Error("ErrClosed is not an ErrUsage")
	}
	lost := lostError("lost:py", 1795805345549156, "", "EVENT LOST lost:py 1795805345549156", nil)
	if lost.Error() != "lost:py: the lock was lost (token 1795805345549156)" || !errors.Is(lost, ErrLockLost) ||
		errors.Is(lost, ErrSessionLost) {
		t.Errorf("%q", lost)
	}
	gone := lostError("k", 7, "the session could not be resumed", "",
		&Error{Kind: ErrSessionLost, Text: "the session could not be resumed"})
	if gone.Error() != "k: the lock was lost (token 7): the session could not be resumed" ||
		!errors.Is(gone, ErrLockLost) || !errors.Is(gone, ErrSessionLost) {
		t.Errorf("%q", gone)
	}
	if shownRequest("AUTH s3cret") != "AUTH ..." || shownRequest("RESUME id secret") != "RESUME id ..." ||
		shownRequest("ACQUIRE k WAIT 5") != "ACQUIRE k WAIT 5" {
		t.Error("shownRequest shows a secret or drops the request")
	}
	if _, err := brokerAddr("host"); err != nil {
		t.Error(err)
	}
	if a, _ := brokerAddr("[::1]:7000"); a != "[::1]:7000" {
		t.Error(a)
	}
	if a, _ := brokerAddr("h"); a != "h:7711" {
		t.Error(a)
	}
	for _, bad := range []string{"", "h:0", "h:x", ":7711"} {
		if _, err := brokerAddr(bad); err == nil {
			t.Errorf("brokerAddr(%q) accepted", bad)
		}
	}
}
