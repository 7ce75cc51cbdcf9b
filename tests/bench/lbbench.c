/*
 * lbbench.c - load generator for lockbrokerd, and for Redis running lock
 * scripts directly (the baselines the broker is compared with).  One
 * process, one libevent loop, any number of connections; every mode stops
 * by itself (bounded time, bounded count) and prints one line of
 * name=value results on stdout for tests/bench/run.py to read.
 *
 *   lbbench pairs    --broker H:P | --redis H:P (--plain | --scripts DIR |
 *                    --library FILE)
 *                    --conns N --seconds S [--warmup S] [--max-pairs N]
 *       Each connection loops ACQUIRE k / RELEASE k on its own key, one
 *       request in flight (it waits for each reply).  --all N (broker
 *       only, protocol 1.2): ACQUIRE ALL N / RELEASE ALL N of its own N
 *       keys (k:0 .. k:N-1) instead.  Against Redis (one
 *       hiredis connection per simulated client, a client-id-sized owner)
 *       the same pair is one of:
 *       --plain: the plain fencing-lock pair a user would run instead of
 *         the broker (a Redis lock library's two scripts, this file's own
 *         text, SCRIPT LOAD then EVALSHA): acquire = GET (free?), INCR of
 *         a fence counter, SET k owner:token PX ttl; release = GET (still
 *         mine?), DEL, PUBLISH of the lock name on a channel.
 *       --scripts DIR: the broker's own scripts, EVALSHA of
 *         DIR/acquire.lua and DIR/release.lua (SCRIPT LOAD first,
 *         "-- @include" lines expanded as the broker's build does).
 *       --library FILE: the broker's own scripts as its Redis function
 *         library (FUNCTION LOAD of FILE, whose first line is
 *         "#!lua name=<lib>_<hash>"), FCALL acquire_<hash> / release_<hash>
 *         with the same keys and arguments as --scripts.
 *       The direct runs use their own key prefix and release channel
 *       (lbbench:), to which no broker is subscribed.
 *       Prints pair_* (ACQUIRE written -> RELEASE's reply read) and acq_*
 *       (ACQUIRE written -> its OK read: one request alone, through the
 *       broker or straight to Redis) percentiles.
 *
 *   lbbench handoff  --broker H:P [--broker H:P] --contenders N --seconds S
 *                    [--hold-ms 1] [--wait-ms 10000] [--permits P]
 *       N contenders (spread round-robin over the brokers) fight for one
 *       key: ACQUIRE k WAIT w, hold, RELEASE k, ACQUIRE again at once.
 *       A handoff is the time from one holder's RELEASE being written to
 *       the next holder's OK being read; it is filed as "same" or "cross"
 *       by whether the two contenders use the same broker.  With
 *       --permits P the key is a semaphore (ACQUIRE k LIMIT P WAIT w, 1.1)
 *       and up to P contenders hold it at once.  A hold lasts hold-ms
 *       from the OK read to the RELEASE written (HOLD_EARLY_US); hold_*
 *       says how long the holds really were.  --async (1.2): each
 *       ACQUIRE is sent with ASYNC, and a queued one's grant is the
 *       EVENT GRANTED line (the same figures, for the cost of ASYNC
 *       against a blocking WAIT).
 *
 *   lbbench sessions --broker H:P --sessions N [--keys K] [--depth D]
 *       Opens N sessions (each answers a PING), prints "ready sessions=N",
 *       and waits on stdin.  With --keys, a line on stdin makes every
 *       session acquire K distinct keys; then "ready locks=N".  EOF on
 *       stdin ends the run (so does --limit).
 *
 * --tls CAFILE (pairs, handoff, sessions): connect to the brokers' TLS
 * port instead, verifying their certificate against CAFILE (for the name
 * 127.0.0.1 or localhost).  The handshakes happen before the run starts;
 * the requests then go through SSL_write / SSL_read on the same loop.
 *
 * Timing is CLOCK_MONOTONIC, read in this process only, so RELEASE-sent
 * and OK-read times of different connections are comparable.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include <event2/event.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IN_CAP 1024		/* a reply line is far shorter */
#define OUT_CAP 512		/* one request line, or a few pipelined */
#define MAX_BROKERS 2
#define CONNECTS_AT_ONCE 256	/* below the broker's listen backlog */
#define DRAIN_GRACE_S 3		/* after the end: let requests finish */
#define TTL_MS "30000"		/* the broker's default_ttl_ms */
/*
 * A hold ends exactly hold_ms after its OK was read.  A timer (even a
 * timerfd one) wakes this process ~50-100 us late on the 2-core VM, more
 * under load, and that lateness used to be part of every hot-key cycle
 * (1.09 ms holds at p50).  So the timer is armed this much early and the
 * rest is polled through the event loop (a zero timeout: one epoll_wait
 * and one timerfd_settime per turn, other connections still served).
 */
#define HOLD_EARLY_US 200

enum mode { M_PAIRS, M_HANDOFF, M_SESSIONS };

/* What the pairs straight to Redis run (pairs --redis). */
enum direct {
	D_NONE,			/* through a broker */
	D_PLAIN,		/* --plain: the plain fencing-lock pair */
	D_SCRIPTS,		/* --scripts: the broker's scripts, EVALSHA */
	D_LIBRARY		/* --library: the broker's library, FCALL */
};

/* Per-connection protocol state. */
enum cstate {
	S_CONNECTING,
	S_HANDSHAKE,		/* --tls: TCP up, TLS handshake going on */
	S_IDLE,
	S_ACQUIRE,		/* ACQUIRE sent */
	S_HOLD,			/* holding, hold timer armed */
	S_RELEASE,		/* RELEASE sent */
	S_PING,
	S_CLOSED
};

/* A growable array of microsecond samples. */
struct samples {
	uint32_t *v;
	size_t n, cap;
};

/* One line-protocol connection to a broker. */
struct lconn {
	int fd;
	SSL *ssl;			/* --tls */
	int idx;
	int broker;
	enum cstate state;
	struct event *rev, *wev, *hold_ev;
	int64_t t_sent;			/* first request of the pair (ns) */
	int64_t t_acq;			/* ACQUIRE sent (ns) */
	int64_t t_ok;			/* handoff: its OK read (ns) */
	int64_t hold_end;		/* handoff: t_ok + hold (ns) */
	long sent, done;		/* sessions mode: ACQUIREs */
	size_t inlen, outlen;
	char key[64];
	char in[IN_CAP];
	char out[OUT_CAP];		/* unsent remainder of a write */
};

/* One hiredis connection standing in for a client of the scripts. */
struct rconn {
	redisAsyncContext *ac;
	int idx;
	int closed;
	int64_t t_sent;
	char key[64], kname[32], owner[40], value[64];
};

static struct {
	/* options */
	enum mode mode;
	struct sockaddr_in brokers[MAX_BROKERS];
	int nbrokers;
	char redis_host[64];
	int redis_port;
	const char *scripts;		/* --scripts DIR */
	const char *library;		/* --library FILE */
	enum direct direct;
	int forms;			/* how many of the three were given */
	const char *tag;
	int conns;
	double seconds, warmup, limit;
	long max_pairs;
	int hold_ms, wait_ms;
	int permits;			/* handoff: LIMIT, 0 for a plain lock */
	int all;			/* pairs: ACQUIRE ALL of so many keys */
	int async;			/* handoff --async: ACQUIRE ... ASYNC */
	int keys, depth;
	const char *tls_ca;		/* --tls: verify against this CA */
	SSL_CTX *tls;

	/* run */
	struct event_base *base;
	struct event *start_ev, *end_ev, *grace_ev, *limit_ev, *stdin_ev;
	struct lconn **lc;
	struct rconn **rc;
	int opened, connected, open, ready;
	int measuring, stopping, phase;
	int64_t t_begin, t_measure, t_end;
	long pairs_total, pairs_window, errors;
	struct samples lat;		/* pairs: ACQUIRE sent -> RELEASE's reply */
	struct samples acq;		/* pairs: ACQUIRE sent -> its OK */

	/* direct Redis: each call is "<cmd> <fn> numkeys keys... args..." */
	const char *call_cmd;		/* "EVALSHA" or "FCALL" */
	char acq_fn[128], rel_fn[128];	/* the scripts' SHA1s, or functions */
	char fence[64], delay[64], channel[64];

	/* handoff */
	int holding;			/* have OK, have not sent RELEASE */
	int max_holding;		/* the most at once, in the window */
	struct lconn *last_rel;		/* the last contender to RELEASE */
	int64_t t_last_rel;
	long acquisitions, self_again, overlaps, timeouts;
	int64_t max_wait;
	struct samples same, cross;
	struct samples hold;		/* OK read -> RELEASE written */
	long hold_polls;		/* turns spent polling for hold_end */

	/* sessions */
	long acquired;
} bn = {
	.seconds = 4, .warmup = 0.5, .limit = 60, .max_pairs = 10000000,
	.hold_ms = 1, .wait_ms = 10000, .conns = 1, .depth = 8,
	.tag = "b",
};

static void lconn_send(struct lconn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* --- small pieces --------------------------------------------------- */

static void __attribute__((noreturn, format(printf, 1, 2)))
die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("lbbench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double
secs(int64_t ns)
{
	return (double)ns / 1e9;
}

static void
samples_add(struct samples *s, int64_t ns)
{
	int64_t us = ns / 1000;

	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 4096;
		s->v = realloc(s->v, s->cap * sizeof *s->v);
		if (s->v == NULL)
			die("out of memory");
	}
	s->v[s->n++] = us < 0 ? 0 : us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile (q in 0..1) of a sorted array; 0 when empty. */
static uint32_t
pct(const struct samples *s, double q)
{
	size_t r;

	if (s->n == 0)
		return 0;
	r = (size_t)(q * (double)s->n + 0.999999);
	if (r < 1)
		r = 1;
	return s->v[(r > s->n ? s->n : r) - 1];
}

/* Print "<name>_n=.. <name>_p50_us=.. <name>_p99_us=.. <name>_max_us=..". */
static void
print_samples(const char *name, struct samples *s)
{
	if (s->n > 0)		/* v is NULL when empty: qsort wants non-NULL */
		qsort(s->v, s->n, sizeof *s->v, cmp_u32);
	printf(" %s_n=%zu %s_p50_us=%u %s_p99_us=%u %s_max_us=%u", name, s->n,
	    name, pct(s, 0.50), name, pct(s, 0.99), name, pct(s, 1.0));
}

static double
cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void
timer_s(struct event *ev, double s)
{
	struct timeval tv;

	tv.tv_sec = (time_t)s;
	tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
	event_add(ev, &tv);
}

static void
parse_hostport(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(s, ':');

	if (colon == NULL || (size_t)(colon - s) >= hostlen)
		die("bad address '%s' (want numeric-ip:port)", s);
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	*port = atoi(colon + 1);
	if (*port < 1 || *port > 65535)
		die("bad port in '%s'", s);
}

/* Raise our own open-files limit: 10,000 sessions need 10,000 fds. */
static void
raise_nofile(long want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		die("getrlimit: %s", strerror(errno));
	if (rl.rlim_cur >= (rlim_t)want)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < (rlim_t)want)
		die("open files limit %llu is below the %ld needed (ulimit -Hn)",
		    (unsigned long long)rl.rlim_cur, want);
}

/* --- the run's clock: start, warm-up, end, drain --------------------- */

static void
loop_exit(void)
{
	event_base_loopbreak(bn.base);
}

static void
end_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (bn.stopping)
		return;
	bn.stopping = 1;
	bn.t_end = now_ns();
	/* Connections finish what is in flight, then close; whatever is
	 * still out after the grace is abandoned. */
	timer_s(bn.grace_ev, DRAIN_GRACE_S);
	if (bn.open == 0)
		loop_exit();
}

static void
grace_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	loop_exit();
}

static void
measure_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	bn.measuring = 1;
	bn.t_measure = now_ns();
	timer_s(bn.end_ev, bn.seconds);
}

static void
limit_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	die("time limit (%.0f s) reached; giving up", bn.limit);
}

/* Everything is connected: run warm-up, then the measured window. */
static void
run_begin(void)
{
	bn.t_begin = now_ns();
	timer_s(bn.start_ev, bn.warmup);
}

/* A pair (or acquisition) finished at t: counts when inside the window. */
static int
in_window(int64_t t)
{
	return bn.measuring && (!bn.stopping || t <= bn.t_end);
}

/* --- line connections to a broker ----------------------------------- */

static void lconn_connected(struct lconn *c);
static void lconn_line(struct lconn *c, char *line, size_t len);
static void lconn_open_next(void);

static void
lconn_close(struct lconn *c)
{
	if (c->state == S_CLOSED)
		return;
	event_del(c->rev);
	event_del(c->wev);
	if (c->hold_ev)
		event_del(c->hold_ev);
	if (c->ssl != NULL) {
		ERR_clear_error();
		if (SSL_shutdown(c->ssl) < 0)	/* one try */
			ERR_clear_error();
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	close(c->fd);
	c->state = S_CLOSED;
	if (--bn.open == 0 && bn.stopping)
		loop_exit();
}

static void
lconn_flush(struct lconn *c)
{
	ssize_t n;

	while (c->outlen > 0) {
		if (c->ssl != NULL) {
			size_t put = 0;
			int e;

			ERR_clear_error();
			if (SSL_write_ex(c->ssl, c->out, c->outlen, &put) != 1) {
				e = SSL_get_error(c->ssl, 0);
				if (e == SSL_ERROR_WANT_WRITE ||
				    e == SSL_ERROR_WANT_READ) {
					event_add(c->wev, NULL);
					return;
				}
				die("TLS write to broker failed (%d, %lu)", e,
				    ERR_get_error());
			}
			n = (ssize_t)put;
		} else
			n = send(c->fd, c->out, c->outlen, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			event_add(c->wev, NULL);
			return;
		}
		if (n < 0)
			die("send to broker: %s", strerror(errno));
		memmove(c->out, c->out + n, c->outlen - (size_t)n);
		c->outlen -= (size_t)n;
	}
}

/* Queue one request line (CRLF added) and write it at once. */
static void
lconn_send(struct lconn *c, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(c->out + c->outlen, OUT_CAP - c->outlen - 2, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= OUT_CAP - c->outlen - 2)
		die("request line too long for the output buffer");
	c->outlen += (size_t)n;
	c->out[c->outlen++] = '\r';
	c->out[c->outlen++] = '\n';
	lconn_flush(c);
}

static void lconn_handshake(struct lconn *c);

/* One SSL_read, like recv(): -1 with errno EAGAIN when nothing yet. */
static ssize_t
tls_recv(struct lconn *c)
{
	size_t got = 0;
	int e;

	ERR_clear_error();
	if (SSL_read_ex(c->ssl, c->in + c->inlen, IN_CAP - c->inlen, &got) == 1)
		return (ssize_t)got;
	e = SSL_get_error(c->ssl, 0);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		errno = EAGAIN;
		return -1;
	}
	ERR_clear_error();
	if (e == SSL_ERROR_ZERO_RETURN)
		return 0;
	errno = EPROTO;
	return -1;
}

static void
lconn_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lconn *c = arg;
	ssize_t n;
	size_t start = 0;

	(void)what;
	if (c->state == S_HANDSHAKE) {
		lconn_handshake(c);
		return;
	}
	n = c->ssl != NULL ? tls_recv(c) :
	    recv(fd, c->in + c->inlen, IN_CAP - c->inlen, 0);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		if (bn.stopping) {
			lconn_close(c);
			return;
		}
		die("broker closed connection %d (%s)", c->idx,
		    n == 0 ? "EOF" : strerror(errno));
	}
	c->inlen += (size_t)n;
	for (size_t i = 0; i < c->inlen && c->state != S_CLOSED; i++) {
		if (c->in[i] != '\n')
			continue;
		size_t len = i - start;
		if (len > 0 && c->in[start + len - 1] == '\r')
			len--;
		c->in[start + len] = '\0';
		lconn_line(c, c->in + start, len);
		start = i + 1;
	}
	if (c->state == S_CLOSED)
		return;
	memmove(c->in, c->in + start, c->inlen - start);
	c->inlen -= start;
	if (c->inlen == IN_CAP)
		die("reply line longer than %d bytes", IN_CAP);
	/* decrypted bytes the socket will not announce again */
	if (c->ssl != NULL && SSL_has_pending(c->ssl))
		event_active(c->rev, EV_READ, 0);
}

/* The connection is ready for requests: TCP up, and TLS if asked for. */
static void
lconn_ready(struct lconn *c)
{
	c->state = S_IDLE;
	event_add(c->rev, NULL);
	bn.connected++;
	lconn_connected(c);
	lconn_open_next();
}

static void
lconn_handshake(struct lconn *c)
{
	int ret, e;

	ERR_clear_error();
	if ((ret = SSL_connect(c->ssl)) == 1) {
		event_del(c->rev);
		lconn_ready(c);
		return;
	}
	e = SSL_get_error(c->ssl, ret);
	if (e == SSL_ERROR_WANT_READ)
		event_add(c->rev, NULL);
	else if (e == SSL_ERROR_WANT_WRITE)
		event_add(c->wev, NULL);
	else
		die("TLS handshake with broker failed: %s (verify: %s)",
		    ERR_reason_error_string(ERR_get_error()),
		    X509_verify_cert_error_string(SSL_get_verify_result(c->ssl)));
}

static void
tls_setup(void)
{
	if ((bn.tls = SSL_CTX_new(TLS_client_method())) == NULL ||
	    SSL_CTX_load_verify_locations(bn.tls, bn.tls_ca, NULL) != 1)
		die("--tls %s: cannot load the CA", bn.tls_ca);
	SSL_CTX_set_verify(bn.tls, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(bn.tls, SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

static void
lconn_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lconn *c = arg;
	int err = 0;
	socklen_t len = sizeof err;

	(void)what;
	if (c->state == S_HANDSHAKE) {
		lconn_handshake(c);
		return;
	}
	if (c->state != S_CONNECTING) {
		lconn_flush(c);
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
		die("connect to broker: %s", strerror(err ? err : errno));
	if (bn.tls == NULL) {
		lconn_ready(c);
		return;
	}
	if ((c->ssl = SSL_new(bn.tls)) == NULL || SSL_set_fd(c->ssl, fd) != 1 ||
	    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl),
	    "127.0.0.1") != 1)
		die("cannot set up TLS");
	SSL_set_connect_state(c->ssl);
	c->state = S_HANDSHAKE;
	lconn_handshake(c);
}

static void hold_cb(evutil_socket_t fd, short what, void *arg);

static struct lconn *
lconn_new(int idx, int broker)
{
	struct lconn *c = calloc(1, sizeof *c);
	int one = 1, fd;

	if (c == NULL)
		die("out of memory");
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->fd = fd;
	c->idx = idx;
	c->broker = broker;
	c->state = S_CONNECTING;
	c->rev = event_new(bn.base, fd, EV_READ | EV_PERSIST, lconn_read_cb, c);
	c->wev = event_new(bn.base, fd, EV_WRITE, lconn_write_cb, c);
	if (bn.mode == M_HANDOFF)
		c->hold_ev = evtimer_new(bn.base, hold_cb, c);
	if (c->rev == NULL || c->wev == NULL ||
	    (bn.mode == M_HANDOFF && c->hold_ev == NULL))
		die("cannot create events");
	if (connect(fd, (struct sockaddr *)&bn.brokers[broker],
	    sizeof bn.brokers[broker]) != 0 && errno != EINPROGRESS)
		die("connect to broker: %s", strerror(errno));
	event_add(c->wev, NULL);
	bn.open++;
	return c;
}

/* Keep at most CONNECTS_AT_ONCE connects in progress. */
static void
lconn_open_next(void)
{
	while (bn.opened < bn.conns &&
	    bn.opened - bn.connected < CONNECTS_AT_ONCE) {
		int i = bn.opened++;
		bn.lc[i] = lconn_new(i, i % bn.nbrokers);
	}
}

/* --- pairs through the broker ---------------------------------------- */

/* pairs --all: " ALL <n> <key>:0 ... <key>:<n-1>" */
static const char *
all_keys(const struct lconn *c)
{
	static char buf[OUT_CAP];
	size_t len = 0;
	int n = snprintf(buf, sizeof buf, " ALL %d", bn.all);

	for (int i = 0; n > 0 && (size_t)n < sizeof buf - len && i < bn.all;
	    i++) {
		len += (size_t)n;
		n = snprintf(buf + len, sizeof buf - len, " %s:%d", c->key, i);
	}
	if (n < 0 || (size_t)n >= sizeof buf - len)
		die("--all: the keys do not fit a request line");
	return buf;
}

static void
pair_start(struct lconn *c)
{
	c->t_sent = now_ns();
	c->state = S_ACQUIRE;
	if (bn.all > 0)
		lconn_send(c, "ACQUIRE%s", all_keys(c));
	else
		lconn_send(c, "ACQUIRE %s", c->key);
}

static void
pairs_line(struct lconn *c, const char *line)
{
	int ok = strncmp(line, "OK", 2) == 0;

	if (c->state == S_ACQUIRE && ok) {
		int64_t t = now_ns();

		if (in_window(t))
			samples_add(&bn.acq, t - c->t_sent);
		c->state = S_RELEASE;
		if (bn.all > 0)
			lconn_send(c, "RELEASE%s", all_keys(c));
		else
			lconn_send(c, "RELEASE %s", c->key);
		return;
	}
	if (c->state == S_RELEASE && ok) {
		int64_t t = now_ns();

		bn.pairs_total++;
		if (in_window(t)) {
			bn.pairs_window++;
			samples_add(&bn.lat, t - c->t_sent);
			if (bn.pairs_window >= bn.max_pairs)
				end_cb(-1, 0, NULL);
		}
	} else {
		if (bn.errors++ < 5)
			fprintf(stderr, "lbbench: conn %d: unexpected reply "
			    "'%s'\n", c->idx, line);
		if (bn.errors > 1000)
			die("too many unexpected replies");
	}
	if (bn.stopping)
		lconn_close(c);
	else
		pair_start(c);
}

/* --- handoff --------------------------------------------------------- */

static void
handoff_acquire(struct lconn *c)
{
	c->t_acq = now_ns();
	c->state = S_ACQUIRE;
	if (bn.permits > 0)
		lconn_send(c, "ACQUIRE %s LIMIT %d WAIT %d%s", c->key,
		    bn.permits, bn.wait_ms, bn.async ? " ASYNC" : "");
	else
		lconn_send(c, "ACQUIRE %s WAIT %d%s", c->key, bn.wait_ms,
		    bn.async ? " ASYNC" : "");
}

/*
 * Arm the hold timer HOLD_EARLY_US before hold_end.  The delay is counted
 * from now, not from the loop's cached time (which is when epoll_wait
 * returned, before this turn's other callbacks).
 */
static void
hold_arm(struct lconn *c)
{
	int64_t left = c->hold_end - (int64_t)HOLD_EARLY_US * 1000 - now_ns();
	struct timeval tv = { 0, 0 };

	if (left > 0) {
		tv.tv_sec = (time_t)(left / 1000000000);
		tv.tv_usec = (suseconds_t)(left % 1000000000 / 1000);
	}
	if (event_base_update_cache_time(bn.base) != 0 ||
	    evtimer_add(c->hold_ev, &tv) != 0)
		die("cannot arm the hold timer");
}

static void
hold_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lconn *c = arg;

	(void)fd;
	(void)what;
	if (now_ns() < c->hold_end) {
		/* woken early on purpose: poll the last few us */
		static const struct timeval zero = { 0, 0 };

		bn.hold_polls++;
		evtimer_add(c->hold_ev, &zero);
		return;
	}
	bn.holding--;
	bn.last_rel = c;
	bn.t_last_rel = now_ns();
	if (in_window(bn.t_last_rel))
		samples_add(&bn.hold, bn.t_last_rel - c->t_ok);
	c->state = S_RELEASE;
	lconn_send(c, "RELEASE %s", c->key);
}

static void
handoff_line(struct lconn *c, const char *line)
{
	int64_t t = now_ns();
	size_t kl = strlen(c->key);
	char granted[64];

	if (c->state == S_ACQUIRE && strcmp(line, "OK QUEUED") == 0)
		return;			/* --async: the grant comes as an EVENT */
	if (c->state == S_ACQUIRE && strncmp(line, "EVENT TIMEOUT ", 14) == 0)
		line = "BUSY";
	else if (c->state == S_ACQUIRE &&
	    strncmp(line, "EVENT GRANTED ", 14) == 0 &&
	    strncmp(line + 14, c->key, kl) == 0 && line[14 + kl] == ' ') {
		/* read as a plain grant: "OK <token>" */
		snprintf(granted, sizeof granted, "OK %s", line + 15 + kl);
		line = granted;
	}
	if (c->state == S_ACQUIRE && strncmp(line, "OK ", 3) == 0) {
		/* more holders than the key has permits: a bug */
		if (bn.holding >= (bn.permits > 0 ? bn.permits : 1))
			bn.overlaps++;
		bn.holding++;
		if (in_window(t)) {
			bn.acquisitions++;
			if (bn.holding > bn.max_holding)
				bn.max_holding = bn.holding;
			if (t - c->t_acq > bn.max_wait)
				bn.max_wait = t - c->t_acq;
			if (bn.last_rel == c)
				bn.self_again++;
			if (bn.last_rel != NULL)
				samples_add(bn.last_rel->broker == c->broker ?
				    &bn.same : &bn.cross, t - bn.t_last_rel);
		}
		c->state = S_HOLD;
		c->t_ok = t;
		c->hold_end = t + (int64_t)bn.hold_ms * 1000000;
		hold_arm(c);
		return;
	}
	if (c->state == S_ACQUIRE && strcmp(line, "BUSY") == 0) {
		bn.timeouts++;		/* WAIT ran out */
		handoff_acquire(c);
		return;
	}
	if (c->state == S_RELEASE && strncmp(line, "OK", 2) == 0) {
		if (bn.stopping)
			lconn_close(c);
		else
			handoff_acquire(c);
		return;
	}
	die("contender %d: unexpected reply '%s' in state %d", c->idx, line,
	    (int)c->state);
}

/* --- sessions -------------------------------------------------------- */

static void
sessions_acquire_more(struct lconn *c)
{
	while (c->sent < bn.keys && c->sent - c->done < bn.depth) {
		lconn_send(c, "ACQUIRE %s:%ld", c->key, c->sent);
		c->sent++;
	}
}

static void
sessions_line(struct lconn *c, const char *line)
{
	if (c->state == S_PING) {
		if (strcmp(line, "OK PONG") != 0)
			die("session %d: PING answered '%s'", c->idx, line);
		c->state = S_IDLE;
		if (++bn.ready == bn.conns) {
			printf("ready sessions=%d seconds=%.3f\n", bn.conns,
			    secs(now_ns() - bn.t_begin));
			fflush(stdout);
			event_add(bn.stdin_ev, NULL);
		}
		return;
	}
	if (strncmp(line, "OK ", 3) != 0)
		die("session %d: ACQUIRE answered '%s'", c->idx, line);
	c->done++;
	sessions_acquire_more(c);
	if (++bn.acquired == (long)bn.conns * bn.keys) {
		printf("ready locks=%ld seconds=%.3f\n", bn.acquired,
		    secs(now_ns() - bn.t_measure));
		fflush(stdout);
	}
}

static void
stdin_cb(evutil_socket_t fd, short what, void *arg)
{
	char buf[256];
	ssize_t n = read(fd, buf, sizeof buf);

	(void)what;
	(void)arg;
	if (n < 0 && errno == EINTR)
		return;
	if (n <= 0) {
		loop_exit();	/* EOF: the driver is done with us */
		return;
	}
	if (bn.phase == 0 && bn.keys > 0) {
		bn.phase = 1;
		bn.t_measure = now_ns();
		for (int i = 0; i < bn.conns; i++)
			sessions_acquire_more(bn.lc[i]);
	}
}

/* --- line-connection dispatch ---------------------------------------- */

static void
lconn_connected(struct lconn *c)
{
	switch (bn.mode) {
	case M_PAIRS:
		snprintf(c->key, sizeof c->key, "%s:p%d:%d", bn.tag, bn.conns,
		    c->idx);
		break;
	case M_HANDOFF:
		snprintf(c->key, sizeof c->key, "%s:hot", bn.tag);
		break;
	case M_SESSIONS:
		snprintf(c->key, sizeof c->key, "%s:s%d", bn.tag, c->idx);
		c->state = S_PING;
		lconn_send(c, "PING");
		return;
	}
	if (bn.connected < bn.conns)
		return;
	/* All connected: everyone starts together. */
	for (int i = 0; i < bn.conns; i++) {
		if (bn.mode == M_PAIRS)
			pair_start(bn.lc[i]);
		else
			handoff_acquire(bn.lc[i]);
	}
	run_begin();
}

static void
lconn_line(struct lconn *c, char *line, size_t len)
{
	if (len == 0)
		return;
	switch (bn.mode) {
	case M_PAIRS:
		pairs_line(c, line);
		break;
	case M_HANDOFF:
		handoff_line(c, line);
		break;
	case M_SESSIONS:
		sessions_line(c, line);
		break;
	}
}

/* --- pairs straight to Redis ----------------------------------------- */

static void rpair_start(struct rconn *r);

static void
rconn_close(struct rconn *r)
{
	if (r->closed)
		return;
	r->closed = 1;
	redisAsyncDisconnect(r->ac);
	if (--bn.open == 0 && bn.stopping)
		loop_exit();
}

static void
rpair_next(struct rconn *r, int failed, const redisReply *rep)
{
	if (failed) {
		if (bn.errors++ < 5)
			fprintf(stderr, "lbbench: redis conn %d: %s\n", r->idx,
			    rep && rep->type == REDIS_REPLY_ERROR ? rep->str :
			    "unexpected reply");
		if (bn.errors > 1000)
			die("too many unexpected replies from Redis");
	}
	if (bn.stopping)
		rconn_close(r);
	else
		rpair_start(r);
}

static void
rrel_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct rconn *r = privdata;
	redisReply *rep = reply;
	int64_t t = now_ns();

	(void)ac;
	if (rep == NULL) {
		if (bn.stopping)
			return;
		die("Redis connection %d lost", r->idx);
	}
	if (rep->type != REDIS_REPLY_INTEGER || rep->integer != 1) {
		rpair_next(r, 1, rep);
		return;
	}
	bn.pairs_total++;
	if (in_window(t)) {
		bn.pairs_window++;
		samples_add(&bn.lat, t - r->t_sent);
		if (bn.pairs_window >= bn.max_pairs)
			end_cb(-1, 0, NULL);
	}
	rpair_next(r, 0, rep);
}

/*
 * The token an acquire granted, from its reply: the plain pair's acquire
 * answers the token (nil when the key is held); the broker's acquire.lua
 * {1, token, more} (more: the tokens set aside, issue 14), {0, pttl} when
 * held.  -1 when it did not grant.
 */
static int
acquire_token(const redisReply *rep, long long *token)
{
	if (bn.direct == D_PLAIN) {
		if (rep->type != REDIS_REPLY_INTEGER)
			return -1;
		*token = rep->integer;
		return 0;
	}
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2 ||
	    rep->element[0]->type != REDIS_REPLY_INTEGER ||
	    rep->element[0]->integer != 1 ||
	    rep->element[1]->type != REDIS_REPLY_INTEGER)
		return -1;
	*token = rep->element[1]->integer;
	return 0;
}

/* Send one script call: "<cmd> <fn> numkeys" then argv (keys, args). */
static void
rconn_call(struct rconn *r, redisCallbackFn *cb, const char *fn,
    int nkeys, int argc, const char **argv)
{
	const char *all[10];
	size_t len[10];
	char nk[8];

	if (argc + 3 > 10)
		die("too many script arguments");
	snprintf(nk, sizeof nk, "%d", nkeys);
	all[0] = bn.call_cmd;
	all[1] = fn;
	all[2] = nk;
	for (int i = 0; i < argc; i++)
		all[3 + i] = argv[i];
	for (int i = 0; i < argc + 3; i++)
		len[i] = strlen(all[i]);
	if (redisAsyncCommandArgv(r->ac, cb, r, argc + 3, all, len) !=
	    REDIS_OK)
		die("cannot send to Redis");
}

static void
racq_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct rconn *r = privdata;
	redisReply *rep = reply;
	long long token;
	int64_t t = now_ns();

	(void)ac;
	if (rep == NULL) {
		if (bn.stopping)
			return;
		die("Redis connection %d lost", r->idx);
	}
	if (acquire_token(rep, &token) != 0) {
		rpair_next(r, 1, rep);
		return;
	}
	if (in_window(t))
		samples_add(&bn.acq, t - r->t_sent);
	/* both releases: KEYS[1] lock key; ARGV value, channel, lock name */
	snprintf(r->value, sizeof r->value, "%s:%lld", r->owner, token);
	rconn_call(r, rrel_cb, bn.rel_fn, 1, 4, (const char *[]){ r->key,
	    r->value, bn.channel, r->kname });
}

static void
rpair_start(struct rconn *r)
{
	r->t_sent = now_ns();
	/* the plain acquire: KEYS lock key, fence; ARGV owner, TTL */
	if (bn.direct == D_PLAIN)
		rconn_call(r, racq_cb, bn.acq_fn, 2, 4, (const char *[]){
		    r->key, bn.fence, r->owner, TTL_MS });
	/* acquire.lua: KEYS lock key, fence, lock delay; ARGV owner, TTL */
	else
		rconn_call(r, racq_cb, bn.acq_fn, 3, 5, (const char *[]){
		    r->key, bn.fence, bn.delay, r->owner, TTL_MS });
}

static void
rconn_connect_cb(const redisAsyncContext *ac, int status)
{
	(void)ac;
	if (status != REDIS_OK)
		die("connect to Redis: %s", ac->errstr);
	if (++bn.connected < bn.conns)
		return;
	for (int i = 0; i < bn.conns; i++)
		rpair_start(bn.rc[i]);
	run_begin();
}

static void
rconn_disconnect_cb(const redisAsyncContext *ac, int status)
{
	(void)ac;
	if (status != REDIS_OK && !bn.stopping)
		die("Redis connection lost: %s", ac->errstr);
}

/* A whole file, NUL-terminated (malloc'd); dies on failure. */
static char *
read_text(const char *path, size_t *lenp)
{
	char *text;
	FILE *f;
	long len;

	if ((f = fopen(path, "rb")) == NULL)
		die("%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	if (len <= 0 || (text = malloc((size_t)len + 1)) == NULL ||
	    fread(text, 1, (size_t)len, f) != (size_t)len)
		die("cannot read %s", path);
	fclose(f);
	text[len] = '\0';
	*lenp = (size_t)len;
	return text;
}

/*
 * The plain fencing-lock pair: what a user runs instead of the broker, the
 * two scripts of a Redis lock library.  acquire takes a free key with the
 * next token of a fence counter; release frees the key only while it
 * still holds the caller's value, and says so on a channel (the key's
 * waiters, if any, would be subscribed there).
 */
static const char plain_acquire[] =
    "-- KEYS[1] the lock, KEYS[2] the fence counter; ARGV[1] owner,\n"
    "-- ARGV[2] TTL ms.  The token granted, or nil when the key is held.\n"
    "if redis.call('GET', KEYS[1]) then return false end\n"
    "local t = redis.call('INCR', KEYS[2])\n"
    "redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'PX', ARGV[2])\n"
    "return t\n";
static const char plain_release[] =
    "-- KEYS[1] the lock; ARGV[1] the value acquire set, ARGV[2] the\n"
    "-- channel, ARGV[3] the lock name.  1 when released, else 0.\n"
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "redis.call('DEL', KEYS[1])\n"
    "redis.call('PUBLISH', ARGV[2], ARGV[3])\n"
    "return 1\n";

/* SCRIPT LOAD text; its SHA1 goes to sha (41 bytes). */
static void
script_load(redisContext *ctx, const char *name, const char *text,
    char *sha)
{
	redisReply *rep = redisCommand(ctx, "SCRIPT LOAD %s", text);

	if (rep == NULL || rep->type != REDIS_REPLY_STRING || rep->len != 40)
		die("SCRIPT LOAD %s: %s", name, rep && rep->str ? rep->str :
		    ctx->errstr);
	memcpy(sha, rep->str, 41);
	freeReplyObject(rep);
}

/*
 * Read a script file, with each "-- @include NAME" line replaced by
 * DIR/lib/NAME as scripts/embed.sh does for the broker (the same text, so
 * the same script), and SCRIPT LOAD it; the SHA goes to sha (41 bytes).
 */
static void
load_script(redisContext *ctx, const char *name, char *sha)
{
	static const char inc[] = "-- @include ";
	char path[512], *text, *out, *line, *nl;
	size_t len, cap, n = 0;

	snprintf(path, sizeof path, "%s/%s", bn.scripts, name);
	text = read_text(path, &len);
	cap = len + 1;
	if ((out = malloc(cap)) == NULL)
		die("out of memory");
	for (line = text; *line != '\0'; line = nl) {
		size_t ll, piece;
		char *lib = NULL, *p;

		nl = strchr(line, '\n');
		nl = nl != NULL ? nl + 1 : line + strlen(line);
		ll = (size_t)(nl - line);
		p = line;
		piece = ll;
		if (strncmp(line, inc, sizeof inc - 1) == 0) {
			snprintf(path, sizeof path, "%s/lib/%.*s", bn.scripts,
			    (int)(ll - (sizeof inc - 1) - (line[ll - 1] ==
			    '\n')), line + sizeof inc - 1);
			p = lib = read_text(path, &piece);
		}
		if (n + piece + 1 > cap) {
			cap = (n + piece + 1) * 2;
			if ((out = realloc(out, cap)) == NULL)
				die("out of memory");
		}
		memcpy(out + n, p, piece);
		n += piece;
		free(lib);
	}
	out[n] = '\0';
	script_load(ctx, name, out, sha);
	free(out);
	free(text);
}

/*
 * FUNCTION LOAD the broker's function library (FILE, its first line
 * "#!lua name=<lib>_<hash>"); its functions are <script>_<hash>.  A
 * library of that name already loaded is the same text (the name is its
 * hash), so "already exists" is fine.
 */
static void
load_library(redisContext *ctx, const char *path)
{
	static const char shebang[] = "#!lua name=";
	char *text, *name, *hash;
	size_t len, nlen;
	redisReply *rep;

	text = read_text(path, &len);
	if (strncmp(text, shebang, sizeof shebang - 1) != 0)
		die("%s: not a function library (no '%s' line)", path,
		    shebang);
	name = text + sizeof shebang - 1;
	nlen = strcspn(name, " \r\n");
	hash = memrchr(name, '_', nlen);
	if (hash == NULL || hash + 1 == name + nlen)
		die("%s: library name '%.*s' has no _<hash>", path, (int)nlen,
		    name);
	hash++;
	snprintf(bn.acq_fn, sizeof bn.acq_fn, "acquire_%.*s",
	    (int)(name + nlen - hash), hash);
	snprintf(bn.rel_fn, sizeof bn.rel_fn, "release_%.*s",
	    (int)(name + nlen - hash), hash);
	rep = redisCommand(ctx, "FUNCTION LOAD %s", text);
	if (rep == NULL || (rep->type != REDIS_REPLY_STRING &&
	    !(rep->type == REDIS_REPLY_ERROR &&
	    strstr(rep->str, "already exists") != NULL)))
		die("FUNCTION LOAD %s: %s", path, rep && rep->str ? rep->str :
		    ctx->errstr);
	freeReplyObject(rep);
	free(text);
}

static void
redis_setup(void)
{
	redisContext *ctx = redisConnect(bn.redis_host, bn.redis_port);
	const char *pfx = "lbbench";

	if (ctx == NULL || ctx->err)
		die("connect to Redis %s:%d: %s", bn.redis_host, bn.redis_port,
		    ctx ? ctx->errstr : "out of memory");
	switch (bn.direct) {
	case D_PLAIN:
		bn.call_cmd = "EVALSHA";
		script_load(ctx, "plain acquire", plain_acquire, bn.acq_fn);
		script_load(ctx, "plain release", plain_release, bn.rel_fn);
		break;
	case D_SCRIPTS:
		bn.call_cmd = "EVALSHA";
		load_script(ctx, "acquire.lua", bn.acq_fn);
		load_script(ctx, "release.lua", bn.rel_fn);
		break;
	case D_LIBRARY:
		bn.call_cmd = "FCALL";
		load_library(ctx, bn.library);
		break;
	case D_NONE:
		die("no direct form");
	}
	redisFree(ctx);
	/* Our own prefix: no broker is subscribed to this channel.  The
	 * plain pair's counter is its own: the broker's acquire.lua starts
	 * its counter near the clock in us (> 10^15), where Lua's
	 * number-to-text would write the token in exponent form. */
	snprintf(bn.fence, sizeof bn.fence, "%s:%s", pfx,
	    bn.direct == D_PLAIN ? "plainfence" : "fence");
	snprintf(bn.delay, sizeof bn.delay, "%s:lockdelay", pfx);
	snprintf(bn.channel, sizeof bn.channel, "%s:released", pfx);
	bn.rc = calloc((size_t)bn.conns, sizeof *bn.rc);
	if (bn.rc == NULL)
		die("out of memory");
	for (int i = 0; i < bn.conns; i++) {
		struct rconn *r = calloc(1, sizeof *r);

		if (r == NULL)
			die("out of memory");
		r->idx = i;
		snprintf(r->kname, sizeof r->kname, "%s:p%d:%d", bn.tag,
		    bn.conns, i);
		snprintf(r->key, sizeof r->key, "%s:lock:%s", pfx, r->kname);
		/* the length of a broker client-id (a UUID) */
		snprintf(r->owner, sizeof r->owner,
		    "%08x-0000-4000-8000-%012x", (unsigned)getpid(),
		    (unsigned)i);
		r->ac = redisAsyncConnect(bn.redis_host, bn.redis_port);
		if (r->ac == NULL || r->ac->err)
			die("connect to Redis: %s", r->ac ? r->ac->errstr :
			    "out of memory");
		if (redisLibeventAttach(r->ac, bn.base) != REDIS_OK)
			die("cannot attach hiredis to libevent");
		redisAsyncSetConnectCallback(r->ac, rconn_connect_cb);
		redisAsyncSetDisconnectCallback(r->ac, rconn_disconnect_cb);
		bn.rc[i] = r;
		bn.open++;
	}
}

/* --- main ------------------------------------------------------------ */

static void
usage(void)
{
	fputs("usage: lbbench pairs    --broker H:P | --redis H:P (--plain |\n"
	    "                         --scripts DIR | --library FILE)\n"
	    "                         --conns N [--seconds S] [--warmup S]"
	    " [--max-pairs N] [--all N]\n"
	    "       lbbench handoff  --broker H:P [--broker H:P] --conns N\n"
	    "                         [--seconds S] [--hold-ms MS] [--wait-ms MS]\n"
	    "                         [--permits P] [--async]\n"
	    "       lbbench sessions --broker H:P --conns N [--keys K] [--depth D]\n"
	    "common: [--tag T] (key namespace) [--limit S] (hard time limit)\n"
	    "        [--tls CAFILE] (brokers' TLS port, verified as 127.0.0.1)\n",
	    stderr);
	exit(2);
}

static void
parse_args(int argc, char **argv)
{
	if (argc < 2)
		usage();
	if (strcmp(argv[1], "pairs") == 0)
		bn.mode = M_PAIRS;
	else if (strcmp(argv[1], "handoff") == 0)
		bn.mode = M_HANDOFF;
	else if (strcmp(argv[1], "sessions") == 0)
		bn.mode = M_SESSIONS;
	else
		usage();
	for (int i = 2; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(o, "--plain") == 0) {	/* takes no value */
			bn.direct = D_PLAIN;
			bn.forms++;
			continue;
		}
		if (strcmp(o, "--async") == 0) {	/* takes no value */
			bn.async = 1;
			continue;
		}
		if (v == NULL)
			usage();
		i++;
		if (strcmp(o, "--broker") == 0) {
			char host[64];
			int port;
			struct sockaddr_in *sa;

			if (bn.nbrokers == MAX_BROKERS)
				die("at most %d brokers", MAX_BROKERS);
			parse_hostport(v, host, sizeof host, &port);
			sa = &bn.brokers[bn.nbrokers++];
			sa->sin_family = AF_INET;
			sa->sin_port = htons((uint16_t)port);
			if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
				die("bad IPv4 address '%s'", host);
		} else if (strcmp(o, "--redis") == 0) {
			parse_hostport(v, bn.redis_host, sizeof bn.redis_host,
			    &bn.redis_port);
		} else if (strcmp(o, "--scripts") == 0) {
			bn.scripts = v;
			bn.direct = D_SCRIPTS;
			bn.forms++;
		} else if (strcmp(o, "--library") == 0) {
			bn.library = v;
			bn.direct = D_LIBRARY;
			bn.forms++;
		} else if (strcmp(o, "--tag") == 0) {
			bn.tag = v;
		} else if (strcmp(o, "--conns") == 0 ||
		    strcmp(o, "--contenders") == 0 ||
		    strcmp(o, "--sessions") == 0) {
			bn.conns = atoi(v);
		} else if (strcmp(o, "--seconds") == 0) {
			bn.seconds = atof(v);
		} else if (strcmp(o, "--warmup") == 0) {
			bn.warmup = atof(v);
		} else if (strcmp(o, "--limit") == 0) {
			bn.limit = atof(v);
		} else if (strcmp(o, "--max-pairs") == 0) {
			bn.max_pairs = atol(v);
		} else if (strcmp(o, "--hold-ms") == 0) {
			bn.hold_ms = atoi(v);
		} else if (strcmp(o, "--wait-ms") == 0) {
			bn.wait_ms = atoi(v);
		} else if (strcmp(o, "--permits") == 0) {
			bn.permits = atoi(v);
		} else if (strcmp(o, "--all") == 0) {
			bn.all = atoi(v);
		} else if (strcmp(o, "--keys") == 0) {
			bn.keys = atoi(v);
		} else if (strcmp(o, "--depth") == 0) {
			bn.depth = atoi(v);
		} else if (strcmp(o, "--tls") == 0) {
			bn.tls_ca = v;
		} else {
			usage();
		}
	}
	if (bn.conns < 1 || bn.seconds <= 0 || bn.warmup < 0 ||
	    bn.limit <= 0 || bn.max_pairs < 1 || bn.hold_ms < 0 ||
	    bn.wait_ms < 0 || bn.keys < 0 || bn.depth < 1 ||
	    bn.permits < 0 || bn.permits > 1000000)
		die("an option is out of range");
	if (bn.permits > 0 && bn.mode != M_HANDOFF)
		die("--permits is for handoff");
	if (bn.forms > 1)
		die("only one of --plain, --scripts, --library");
	if (bn.mode == M_PAIRS && bn.nbrokers == 0 &&
	    (bn.redis_port == 0 || bn.direct == D_NONE))
		die("pairs needs --broker, or --redis and one of --plain, "
		    "--scripts, --library");
	if (bn.direct != D_NONE && (bn.mode != M_PAIRS || bn.nbrokers > 0))
		die("--plain, --scripts and --library are for pairs --redis");
	if (bn.mode != M_PAIRS && bn.nbrokers == 0)
		die("--broker is required");
	if (bn.tls_ca != NULL && bn.nbrokers == 0)
		die("--tls is for brokers");
}

int
main(int argc, char **argv)
{
	struct event_config *ecfg;
	int direct;

	parse_args(argc, argv);
	direct = bn.direct != D_NONE;
	raise_nofile(bn.conns + 64L);
	/* Precise timers: a 1 ms hold should be 1 ms, not 1-2. */
	if ((ecfg = event_config_new()) == NULL ||
	    event_config_set_flag(ecfg, EVENT_BASE_FLAG_PRECISE_TIMER) != 0 ||
	    (bn.base = event_base_new_with_config(ecfg)) == NULL)
		die("cannot create the event loop");
	event_config_free(ecfg);
	bn.start_ev = evtimer_new(bn.base, measure_cb, NULL);
	bn.end_ev = evtimer_new(bn.base, end_cb, NULL);
	bn.grace_ev = evtimer_new(bn.base, grace_cb, NULL);
	bn.limit_ev = evtimer_new(bn.base, limit_cb, NULL);
	bn.stdin_ev = event_new(bn.base, 0, EV_READ | EV_PERSIST, stdin_cb,
	    NULL);
	if (!bn.start_ev || !bn.end_ev || !bn.grace_ev || !bn.limit_ev ||
	    !bn.stdin_ev)
		die("cannot create events");
	timer_s(bn.limit_ev, bn.limit);

	if (bn.tls_ca != NULL)
		tls_setup();
	if (direct) {
		redis_setup();
	} else {
		bn.lc = calloc((size_t)bn.conns, sizeof *bn.lc);
		if (bn.lc == NULL)
			die("out of memory");
		if (bn.mode == M_SESSIONS)
			bn.t_begin = now_ns();
		lconn_open_next();
	}
	if (event_base_dispatch(bn.base) < 0)
		die("event loop failed");

	switch (bn.mode) {
	case M_PAIRS: {
		double win = secs((bn.stopping ? bn.t_end : now_ns()) -
		    bn.t_measure);

		printf("pairs=%ld seconds=%.3f rate=%.1f total=%ld errors=%ld "
		    "conns=%d cpu_s=%.3f", bn.pairs_window, win,
		    win > 0 ? (double)bn.pairs_window / win : 0.0,
		    bn.pairs_total, bn.errors, bn.conns, cpu_seconds());
		print_samples("pair", &bn.lat);
		print_samples("acq", &bn.acq);
		putchar('\n');
		break;
	}
	case M_HANDOFF: {
		double win = secs(bn.t_end - bn.t_measure);

		printf("acquisitions=%ld seconds=%.3f rate=%.1f "
		    "max_wait_us=%lld self_again=%ld overlaps=%ld timeouts=%ld "
		    "permits=%d max_holders=%d",
		    bn.acquisitions, win,
		    win > 0 ? (double)bn.acquisitions / win : 0.0,
		    (long long)(bn.max_wait / 1000), bn.self_again, bn.overlaps,
		    bn.timeouts, bn.permits, bn.max_holding);
		print_samples("same", &bn.same);
		print_samples("cross", &bn.cross);
		print_samples("hold", &bn.hold);
		printf(" hold_polls=%ld", bn.hold_polls);
		putchar('\n');
		break;
	}
	case M_SESSIONS:
		break;
	}
	fflush(stdout);
	/* Sockets and contexts go with the process: the broker and Redis
	 * see the connections close. */
	return 0;
}
