package lockbroker

// What a Client is configured with, the options of Lock and Unlock, and
// the connection events its hook hears.

import (
	"crypto/tls"
	"net"
	"os"
	"strconv"
	"time"
)

// DefaultAddr is the broker's default address.
const DefaultAddr = "127.0.0.1:7711"

// DefaultGrace is Config.Grace's default: how long the broker keeps a
// session's holds after its connection breaks, for a RESUME, and so how
// long a crashed program's holds stay taken.
const DefaultGrace = 5 * time.Second

// DefaultPingInterval and DefaultPingTimeout are Config.PingInterval's
// and Config.PingTimeout's defaults. A broker whose host vanished (no FIN,
// no RST: only the idle PING notices) is found within their sum, 4 s, and
// the session resumed on another broker while the broker-side record of a
// DefaultGrace session still lives (the grace plus two of the broker's
// touch periods after its last touch: 6.7 s at the least).
const (
	DefaultPingInterval = 2 * time.Second
	DefaultPingTimeout  = 2 * time.Second
)

// NoGrace as Config.Grace asks for no grace session: a broken connection
// ends the session, and every hold with it.
const NoGrace time.Duration = -1

// Config says how a Client connects. A zero field takes its default.
type Config struct {
	// Brokers are "host:port" addresses (port 7711 when left out) of
	// brokers sharing one Redis and prefix. Connect takes the first that
	// answers; after a broken connection the session is resumed on the
	// next ones in turn. Default: 127.0.0.1:7711.
	Brokers []string
	// Name labels the session (HELLO <name>): 1..64 printable characters.
	Name string
	// Grace is how long the broker keeps the session's holds after its
	// connection breaks, for a RESUME (HELLO ... GRACE): also how long the
	// holds of a program that died without Close (killed, crashed) stay
	// taken. Default 5 s (DefaultGrace); a longer one rides out a longer
	// outage, such as a lone broker's restart. NoGrace for none. The
	// broker clamps it to its max_grace_ms.
	Grace time.Duration
	// Auth is the broker's auth_token, or an app's token (AUTH).
	Auth string
	// TLS, when not nil, connects with TLS (to the brokers' tls_port).
	// ServerName defaults to the host of the address dialled.
	TLS *tls.Config
	// PingInterval: after this long without a byte from the broker the
	// client sends PING; PingTimeout later, still without one, it declares
	// the connection dead and reconnects (a reply still arriving, however
	// long it takes, is no silence; nor is a 1.1 blocking wait). Defaults
	// 2 s and 2 s (DefaultPingInterval, DefaultPingTimeout); a negative
	// PingInterval turns the idle PING off. TCP keepalive and
	// TCP_USER_TIMEOUT (Linux) are set from their sum.
	PingInterval time.Duration
	PingTimeout  time.Duration
	// DialTimeout bounds one connection attempt: TCP, TLS and the
	// handshake (AUTH, HELLO, RESUME). Default 5 s.
	DialTimeout time.Duration
	// ReconnectBudget is how long the client keeps trying to reconnect
	// (and resume) before it reports every hold lost and fails requests
	// with ErrConnect; it then goes on trying in the background. Default:
	// the grace (30 s without one).
	ReconnectBudget time.Duration
	// OnEvent, when set, hears each connection event (connected,
	// disconnected, resumed, new session, reconnect failed), in order, on
	// a goroutine of the client's: it must not block for long.
	OnEvent func(ConnEvent)
	// OnCounter, when set, hears each event that moves the client's
	// Counters, in order, on the same goroutine as OnEvent.
	OnCounter func(CounterEvent)
	// Logger, when set, is told of connects, dropped connections, resumes,
	// new sessions, lost holds and a spent reconnect budget, one line each
	// (on the same goroutine as OnEvent). A *log.Logger is one.
	Logger Logger
	// AllowOldBroker accepts a broker older than protocol 1.2 (waits then
	// block the session: no CANCEL, no VALUE, WATCH or CHECK). For tests of
	// this library against a 1.1 broker only; LOCKBROKER_ALLOW_OLD=1 in the
	// environment sets it too.
	AllowOldBroker bool
}

// withDefaults fills the zero fields and checks the others.
func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = []string{DefaultAddr}
	}
	addrs := make([]string, len(cfg.Brokers))
	for i, a := range cfg.Brokers {
		full, err := brokerAddr(a)
		if err != nil {
			return cfg, err
		}
		addrs[i] = full
	}
	cfg.Brokers = addrs
	if cfg.Name != "" && !isWord(cfg.Name, maxWordLen) {
		return cfg, argError("a session name is 1..%d printable ASCII characters without blanks, not %q", maxWordLen, cfg.Name)
	}
	if cfg.Auth != "" && !isWord(cfg.Auth, maxWordLen) {
		return cfg, argError("a token is 1..%d printable ASCII characters without blanks", maxWordLen)
	}
	switch {
	case cfg.Grace == 0:
		cfg.Grace = DefaultGrace
	case cfg.Grace < 0:
		cfg.Grace = 0
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.ReconnectBudget <= 0 {
		cfg.ReconnectBudget = cfg.Grace
		if cfg.ReconnectBudget == 0 {
			cfg.ReconnectBudget = 30 * time.Second
		}
	}
	if !cfg.AllowOldBroker {
		cfg.AllowOldBroker = os.Getenv("LOCKBROKER_ALLOW_OLD") == "1"
	}
	return cfg, nil
}

// deadAfter is how long unanswered data may sit before the connection is
// dead: the kernel's TCP_USER_TIMEOUT and keepalive are set from it.
func (cfg Config) deadAfter() time.Duration {
	if cfg.PingInterval < 0 {
		return 2 * cfg.PingTimeout
	}
	return cfg.PingInterval + cfg.PingTimeout
}

// brokerAddr: "host", "host:port", "[v6]:port" -> "host:port".
func brokerAddr(a string) (string, error) {
	if host, port, err := net.SplitHostPort(a); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
			return "", argError("a broker address is host[:port], not %q", a)
		}
		return a, nil
	}
	if a == "" {
		return "", argError("a broker address is host[:port], not %q", a)
	}
	return net.JoinHostPort(a, "7711"), nil
}

// Logger is what Config.Logger takes: a *log.Logger has this method (the
// module targets Go 1.19, which has no log/slog).
type Logger interface {
	Printf(format string, v ...interface{})
}

// Counters are what a client counts of its own life (Client.Counters),
// the same names in every lockbroker library. Each only goes up, from 0
// when the client was made.
type Counters struct {
	// Waits: takes of a key that ended, whatever their outcome (Lock,
	// TryLock, Mutex, Campaign); WaitSecondsTotal: the time they lasted,
	// from the call to the outcome.
	Waits            uint64
	WaitSecondsTotal float64
	// Holds: holds that ended (released, lost, or ended with the client);
	// HoldSecondsTotal: how long they were held, from the grant to the end.
	Holds            uint64
	HoldSecondsTotal float64
	// Losses: holds lost (ErrLockLost).
	Losses uint64
	// Resumes: sessions resumed after a broken connection.
	Resumes uint64
	// Reconnects: connections made again after one broke (the resumes, and
	// new sessions that took a lost one's place).
	Reconnects uint64
}

// CounterEvent is what Config.OnCounter hears: Name is the counter that
// moved by one (waits, holds, losses, resumes, reconnects), Key the key it
// was about ("" for resumes and reconnects), Seconds what WaitSecondsTotal
// or HoldSecondsTotal grew by (else 0).
type CounterEvent struct {
	Name    string
	Key     string
	Seconds float64
}

// LockOption changes what Lock asks for.
type LockOption func(*lockSpec)

// WithShared takes a shared (read) hold: beside other shared holders,
// never beside an exclusive one.
func WithShared() LockOption { return func(s *lockSpec) { s.kind = Shared } }

// WithLimit takes one of the n permits of the semaphore key.
func WithLimit(n int) LockOption {
	return func(s *lockSpec) { s.kind = Semaphore; s.limit = n }
}

// WithTTL sets the key's TTL in Redis (the broker renews it while the
// session lives: it only bounds how long a dead broker's hold outlives it).
func WithTTL(d time.Duration) LockOption { return func(s *lockSpec) { s.ttl = d } }

// WithValue puts a value on an exclusive hold (1..256 printable ASCII
// characters without blanks, e.g. 10.0.0.7:8080): Owner and watchers see
// it. Protocol 1.2.
func WithValue(v string) LockOption { return func(s *lockSpec) { s.value = v } }

// UnlockOption changes what Unlock does.
type UnlockOption func(*time.Duration)

// WithLinger keeps the key taken for d after the release, renewed by no
// one: a job that finished early still keeps others from running it again
// in that window (RELEASE ... LINGER).
func WithLinger(d time.Duration) UnlockOption { return func(l *time.Duration) { *l = d } }

// EventKind says what happened to a client's connection.
type EventKind int

const (
	// Connected: Connect started the session.
	Connected EventKind = iota
	// Disconnected: the connection broke; the client reconnects.
	Disconnected
	// Resumed: the session was resumed on a broker (holds kept).
	Resumed
	// NewSession: the session could not be resumed; a fresh one took its
	// place and the old one's holds were reported lost.
	NewSession
	// ReconnectFailed: the reconnect budget ran out: every hold was
	// reported lost; the client goes on trying in the background.
	ReconnectFailed
)

func (k EventKind) String() string {
	switch k {
	case Connected:
		return "connected"
	case Disconnected:
		return "disconnected"
	case Resumed:
		return "resumed"
	case NewSession:
		return "new_session"
	case ReconnectFailed:
		return "reconnect_failed"
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// ConnEvent is what Config.OnEvent hears: the kind, the broker address it
// concerns, and the error behind a Disconnected, NewSession or
// ReconnectFailed.
type ConnEvent struct {
	Kind   EventKind
	Broker string
	Err    error
}
