package lockbroker

// The wire words of protocol 1.2 without any I/O: what goes into a request
// line (checked before it is sent), and what a reply or event line says.
// proto/PROTOCOL.md is the 1.0/1.1 protocol; the 1.2 words (ASYNC, CANCEL,
// VALUE, PROCLAIM, WATCH, CHECK) are the client libraries' brief.

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

const (
	maxKeyLen   = 256        // the broker's default max_key_len
	maxValueLen = 256        // VALUE: 1..256 bytes
	maxWordLen  = 64         // HELLO's name, AUTH's token
	maxMS       = 2147483647 // the largest <ms> the protocol takes
	maxLimit    = 1000000    // LIMIT n: 1..1000000
	maxToken    = 1<<53 - 1  // tokens stay below 2^53
)

// minVersion is the oldest protocol this library speaks: ASYNC waits,
// CANCEL, VALUE, WATCH and CHECK came with 1.2.
var minVersion = [2]int{1, 2}

// Kind is what a hold or a key is: an exclusive lock, a shared (read)
// lock, a semaphore's permit; Free for a key nobody holds.
type Kind int

const (
	Free Kind = iota
	Exclusive
	Shared
	Semaphore
)

func (k Kind) String() string {
	switch k {
	case Free:
		return "free"
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Semaphore:
		return "semaphore"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// KeyState is who holds a key: the answer of Client.Owner and each state a
// Watcher sees. Holders counts the sessions holding it (1 for exclusive);
// ClientID, Token and Value describe an exclusive holder (ClientID is "?"
// when the broker may not show it: another app's session; Value is "" when
// the hold has none); Limit is a semaphore's; TTL is what an OWNER saw left
// of the exclusive hold (0 in a watch's states).
type KeyState struct {
	Kind     Kind
	Holders  int
	Limit    int
	ClientID string
	Token    uint64
	Value    string
	TTL      time.Duration
}

func (s KeyState) String() string {
	switch s.Kind {
	case Exclusive:
		v := s.Value
		if v == "" {
			v = "-"
		}
		return fmt.Sprintf("exclusive %s %d %s", s.ClientID, s.Token, v)
	case Shared:
		return fmt.Sprintf("shared %d", s.Holders)
	case Semaphore:
		return fmt.Sprintf("semaphore %d %d", s.Holders, s.Limit)
	}
	return "free"
}

// CheckResult is CHECK's answer: Current when the token's hold is alive in
// Redis now; otherwise Token is the current holder's token (exclusive: the
// holder's; shared or permits: the newest live one), 0 when the key is free.
type CheckResult struct {
	Current bool
	Token   uint64
}

// isWord: 1..max bytes of 0x21..0x7e (printable ASCII without blanks).
func isWord(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func checkKey(key string) error {
	if !isWord(key, maxKeyLen) {
		return argError("a key is 1..%d printable ASCII characters without blanks, not %q", maxKeyLen, key)
	}
	return nil
}

func checkValue(value string) error {
	if !isWord(value, maxValueLen) {
		return argError("a value is 1..%d printable ASCII characters without blanks, not %q", maxValueLen, value)
	}
	return nil
}

// toMS turns a duration into the protocol's whole milliseconds, rounded up
// (a wait of 1.5 ms must not end before 1.5 ms) and kept in 0..maxMS.
func toMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms > maxMS {
		ms = maxMS
	}
	return ms
}

// lockSpec is what a Lock asks for beside its key and wait.
type lockSpec struct {
	kind  Kind // Exclusive, Shared or Semaphore
	limit int  // Semaphore's permits
	ttl   time.Duration
	value string
}

func (s lockSpec) check() error {
	switch s.kind {
	case Exclusive:
	case Shared:
		if s.value != "" {
			return argError("a value goes on an exclusive hold only")
		}
	case Semaphore:
		if s.limit < 1 || s.limit > maxLimit {
			return argError("a limit is 1..%d, not %d", maxLimit, s.limit)
		}
		if s.value != "" {
			return argError("a value goes on an exclusive hold only")
		}
	default:
		return argError("a lock is exclusive, shared or a semaphore's permit")
	}
	if s.ttl < 0 {
		return argError("a TTL is > 0, not %v", s.ttl)
	}
	if s.value != "" {
		return checkValue(s.value)
	}
	return nil
}

// acquireLine: ACQUIRE <key> [SHARED | LIMIT n] [VALUE v] [WAIT ms] [TTL ms]
// [ASYNC]. waitMS 0 is one try.
func acquireLine(key string, s lockSpec, waitMS int64, async bool) string {
	var b strings.Builder
	b.Grow(len(key) + len(s.value) + 64)
	b.WriteString("ACQUIRE ")
	b.WriteString(key)
	switch s.kind {
	case Shared:
		b.WriteString(" SHARED")
	case Semaphore:
		b.WriteString(" LIMIT ")
		b.WriteString(strconv.Itoa(s.limit))
	}
	if s.value != "" {
		b.WriteString(" VALUE ")
		b.WriteString(s.value)
	}
	if waitMS > 0 {
		b.WriteString(" WAIT ")
		b.WriteString(strconv.FormatInt(waitMS, 10))
	}
	if s.ttl > 0 {
		b.WriteString(" TTL ")
		b.WriteString(strconv.FormatInt(toMS(s.ttl), 10))
	}
	if async {
		b.WriteString(" ASYNC")
	}
	return b.String()
}

func releaseLine(key string, linger time.Duration) string {
	if ms := toMS(linger); ms > 0 {
		return "RELEASE " + key + " LINGER " + strconv.FormatInt(ms, 10)
	}
	return "RELEASE " + key
}

func renewLine(key string, ttl time.Duration) string {
	if ms := toMS(ttl); ms > 0 {
		return "RENEW " + key + " TTL " + strconv.FormatInt(ms, 10)
	}
	return "RENEW " + key
}

// helloLine: HELLO [name] [GRACE ms]; grace 0 asks for none.
func helloLine(name string, grace time.Duration) string {
	s := "HELLO"
	if name != "" {
		s += " " + name
	}
	if ms := toMS(grace); ms > 0 {
		s += " GRACE " + strconv.FormatInt(ms, 10)
	}
	return s
}

// ------------------------------------------------------------- replies --

// replyWord is the first word of a reply line: OK, BUSY or ERR; "" for a
// line that is none of them (a broker that speaks another protocol).
func replyWord(line string) string {
	w := line
	if i := strings.IndexByte(line, ' '); i >= 0 {
		w = line[:i]
	}
	switch w {
	case "OK", "BUSY", "ERR":
		return w
	}
	return ""
}

func parseToken(w string) (uint64, error) {
	if len(w) == 0 || len(w) > 16 {
		return 0, protoError("not a fencing token: %q", w)
	}
	for i := 0; i < len(w); i++ {
		if w[i] < '0' || w[i] > '9' {
			return 0, protoError("not a fencing token: %q", w)
		}
	}
	t, err := strconv.ParseUint(w, 10, 64)
	if err != nil || t == 0 || t > maxToken {
		return 0, protoError("not a fencing token: %q", w)
	}
	return t, nil
}

// helloReply is what HELLO answers: OK <client-id> lockbroker/<v> [<secret>].
type helloReply struct {
	clientID string
	version  [3]int
	secret   string
}

func parseHello(line string) (helloReply, error) {
	var h helloReply
	w := strings.Fields(line)
	if len(w) < 3 || w[0] != "OK" || !strings.HasPrefix(w[2], "lockbroker/") {
		return h, protoError("not a HELLO answer: %q", line)
	}
	h.clientID = w[1]
	parts := strings.SplitN(strings.TrimPrefix(w[2], "lockbroker/"), ".", 3)
	for i, p := range parts {
		// a version may carry a suffix after its patch number (1.2.0-rc1)
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(p[:end])
		if err != nil || (i < 2 && end != len(p)) {
			return h, protoError("HELLO answer without a version: %q", line)
		}
		h.version[i] = n
	}
	if len(parts) < 2 {
		return h, protoError("HELLO answer without a version: %q", line)
	}
	if len(w) > 3 {
		h.secret = w[3]
	}
	return h, nil
}

func versionAtLeast(v [3]int, min [2]int) bool {
	return v[0] > min[0] || (v[0] == min[0] && v[1] >= min[1])
}

func versionString(v [3]int) string {
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
}

// parseList reads OK <n> [key ...] (HELD, RESUME).
func parseList(line string) ([]string, error) {
	w := strings.Fields(line)
	if len(w) < 2 || w[0] != "OK" {
		return nil, protoError("not an OK <n> <keys> answer: %q", line)
	}
	n, err := strconv.Atoi(w[1])
	if err != nil || n != len(w)-2 {
		return nil, protoError("not an OK <n> <keys> answer: %q", line)
	}
	return w[2:], nil
}

func valueWord(w string) string {
	if w == "-" {
		return ""
	}
	return w
}

// parseOwner reads the reply to OWNER <key> VALUE (or plain OWNER).
func parseOwner(line string) (KeyState, error) {
	w := strings.Fields(line)
	bad := func() (KeyState, error) { return KeyState{}, protoError("not an OWNER answer: %q", line) }
	if len(w) < 2 || w[0] != "OK" {
		return bad()
	}
	switch w[1] {
	case "-":
		return KeyState{Kind: Free}, nil
	case "SHARED":
		if len(w) < 3 {
			return bad()
		}
		n, err := strconv.Atoi(w[2])
		if err != nil {
			return bad()
		}
		return KeyState{Kind: Shared, Holders: n}, nil
	case "SEMAPHORE":
		if len(w) < 4 {
			return bad()
		}
		n, err1 := strconv.Atoi(w[2])
		l, err2 := strconv.Atoi(w[3])
		if err1 != nil || err2 != nil {
			return bad()
		}
		return KeyState{Kind: Semaphore, Holders: n, Limit: l}, nil
	}
	if len(w) < 4 {
		return bad()
	}
	ttl, err := strconv.ParseInt(w[2], 10, 64)
	if err != nil {
		return bad()
	}
	tok, err := parseToken(w[3])
	if err != nil {
		return bad()
	}
	s := KeyState{Kind: Exclusive, Holders: 1, ClientID: w[1], Token: tok, TTL: time.Duration(ttl) * time.Millisecond}
	if len(w) > 4 {
		s.Value = valueWord(w[4])
	}
	return s, nil
}

// parseCheck reads OK CURRENT | OK STALE <token|->.
func parseCheck(line string) (CheckResult, error) {
	w := strings.Fields(line)
	if len(w) == 2 && w[0] == "OK" && w[1] == "CURRENT" {
		return CheckResult{Current: true}, nil
	}
	if len(w) == 3 && w[0] == "OK" && w[1] == "STALE" {
		if w[2] == "-" {
			return CheckResult{}, nil
		}
		t, err := parseToken(w[2])
		if err != nil {
			return CheckResult{}, protoError("not a CHECK answer: %q", line)
		}
		return CheckResult{Token: t}, nil
	}
	return CheckResult{}, protoError("not a CHECK answer: %q", line)
}

// -------------------------------------------------------------- events --

// event is one EVENT <kind> <key> [args...] line: kind is LOST, GRANTED,
// TIMEOUT, FAILED, QUEUED, HOLDER or FREE (others are ignored).
type event struct {
	kind string
	key  string
	args []string
	line string // the whole line, as errors show it
}

func isEvent(line string) bool { return strings.HasPrefix(line, "EVENT ") }

func parseEvent(line string) (event, error) {
	w := strings.Fields(line)
	if len(w) < 3 || w[0] != "EVENT" {
		return event{}, protoError("not an event: %q", line)
	}
	return event{kind: w[1], key: w[2], args: w[3:], line: line}, nil
}

// watchState is the key state an EVENT HOLDER or EVENT FREE line tells.
func watchState(ev event) (KeyState, error) {
	a := ev.args
	bad := func() (KeyState, error) {
		return KeyState{}, protoError("not a watch event: %s %s %s", ev.kind, ev.key, strings.Join(a, " "))
	}
	if ev.kind == "FREE" {
		return KeyState{Kind: Free}, nil
	}
	if len(a) < 2 {
		return bad()
	}
	switch a[0] {
	case "SHARED":
		n, err := strconv.Atoi(a[1])
		if err != nil {
			return bad()
		}
		return KeyState{Kind: Shared, Holders: n}, nil
	case "SEMAPHORE":
		if len(a) < 3 {
			return bad()
		}
		n, err1 := strconv.Atoi(a[1])
		l, err2 := strconv.Atoi(a[2])
		if err1 != nil || err2 != nil {
			return bad()
		}
		return KeyState{Kind: Semaphore, Holders: n, Limit: l}, nil
	}
	if len(a) < 3 {
		return bad()
	}
	tok, err := parseToken(a[1])
	if err != nil {
		return bad()
	}
	return KeyState{Kind: Exclusive, Holders: 1, ClientID: a[0], Token: tok, Value: valueWord(a[2])}, nil
}

// parseStats reads OK name=value ... into a map.
func parseStats(line string) (map[string]string, error) {
	w := strings.Fields(line)
	if len(w) < 1 || w[0] != "OK" {
		return nil, protoError("not a STATS answer: %q", line)
	}
	m := make(map[string]string, len(w))
	for _, kv := range w[1:] {
		if i := strings.IndexByte(kv, '='); i > 0 {
			m[kv[:i]] = kv[i+1:]
		}
	}
	return m, nil
}
