/*
 * lockctl.c - run a command while holding a lockbroker lock.
 *
 * lockctl connects to lockbrokerd, acquires KEY and runs CMD with the lock's
 * fencing token in its environment.  A lock belongs to the broker session,
 * so lockctl keeps the connection open while CMD runs and releases the lock
 * when CMD exits, then exits with CMD's status.  With --shared it takes a
 * read hold that other --shared runs share; with --limit N one of N permits
 * of a semaphore (protocol 1.1).  With --hold-at-least it
 * releases with RELEASE ... LINGER, so the key stays taken until that long
 * after it was acquired however fast CMD was.  If the lock is lost while
 * CMD runs (an EVENT LOST line, or the connection breaks) CMD gets SIGTERM,
 * SIGKILL after a grace, and lockctl exits 70.  The subcommands owner, stats
 * and ping print one broker reply.  libc only: one poll() loop over the
 * socket and a self-pipe fed by the signal handler; with --tls, OpenSSL
 * too (tls.c) on the same socket and loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "tls.h"

#ifndef LOCKBROKER_VERSION
#define LOCKBROKER_VERSION "unknown"
#endif

#define DEFAULT_HOST	"127.0.0.1"
#define DEFAULT_PORT	"7711"
#define DEFAULT_GRACE_S	5		/* -k: SIGTERM to SIGKILL */
#define GRACE_MAX_S	86400
#define MS_MAX		2147483647LL	/* largest WAIT/TTL the broker takes */
#define CONNECT_MS	5000		/* connect() to the broker */
#define REPLY_MS	10000		/* a reply, beyond any WAIT we asked for */
#define LINE_MAX_LEN	16384		/* longest reply line (STATS is longest) */
#define REQ_MAX_LEN	4096		/* longest request line we build */
#define TOKEN_MAX_LEN	64		/* AUTH token word (PROTO_NAME_MAX) */
#define FENCE_MAX_LEN	20		/* digits in a fencing token (2^64) */
#define SIGBYTE_KERNEL	0x80		/* self-pipe byte: sent by the kernel */
#define LIMIT_MAX	1000000LL	/* most permits ACQUIRE ... LIMIT takes */
#define OPT_HOLD	256		/* getopt value of --hold-at-least */
#define OPT_SHARED	257		/* getopt value of --shared */
#define OPT_LIMIT	258		/* getopt value of --limit */
#define OPT_TLS		259		/* --tls */
#define OPT_CACERT	260		/* --cacert */
#define OPT_CERT	261		/* --cert */
#define OPT_KEY		262		/* --key */

/* Where the broker listens: TCP host and numeric port, or a unix socket. */
struct target {
	int is_unix;
	char host[256];
	char port[8];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char name[300];			/* for messages: host:port or path */
	int tls;			/* --tls */
	struct ctls_opts tls_opts;	/* --cacert, --cert, --key */
};

/*
 * One broker connection.  Reply lines are read into in[]; EVENT lines that
 * arrive between replies are consumed here, and an EVENT LOST for watch_key
 * sets lost.
 */
struct conn {
	int fd;
	struct ssl_st *ssl;		/* --tls: on fd; NULL otherwise */
	char in[LINE_MAX_LEN];
	size_t inlen;
	const char *watch_key;
	int lost;
	char err[256];			/* why the last call failed */
};

/* What conn_reply() can return besides 0 (a reply) and -1 (failed). */
#define REPLY_SIGNAL	2		/* a signal is waiting in the self-pipe */

/* Forwarded to CMD (and ending lockctl before CMD starts). */
static const int fwd_signals[] = {
	SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2
};
#define NFWD (int)(sizeof fwd_signals / sizeof fwd_signals[0])

static int sig_rfd = -1, sig_wfd = -1;	/* the self-pipe */

static void vmsg(const char *fmt, va_list ap)
    __attribute__((format(printf, 1, 0)));
static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void conn_fail(struct conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void held_abandon(void);

/* One line on stderr, prefixed "lockctl: ". */
static void
vmsg(const char *fmt, va_list ap)
{
	char buf[1024];

	vsnprintf(buf, sizeof buf, fmt, ap);
	fprintf(stderr, "lockctl: %s\n", buf);
}

static void
msg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

/* A message, the held lock given back (see held_abandon), exit. */
static void
die(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	held_abandon();
	exit(code);
}

static void
usage(FILE *f)
{
	const char *h = getenv("LOCKBROKER_HOST");
	const char *p = getenv("LOCKBROKER_PORT");

	fprintf(f,
"usage: lockctl [options] KEY -- CMD [ARGS...]\n"
"       lockctl [options] owner KEY | stats | ping\n"
"\n"
"Hold lock KEY on lockbrokerd while CMD runs; exit with CMD's status.\n"
"CMD sees LOCKBROKER_KEY and LOCKBROKER_TOKEN (the fencing token).\n"
"\n"
"  -H host[:port]  broker address (now %s, port %s)\n"
"  -U path         broker unix socket instead of TCP\n"
"  -w WAIT_MS      wait up to this long for the lock (default 0: no wait)\n"
"  -t TTL_MS       lock TTL if the session dies with the broker (default:\n"
"                  the broker's)\n"
"  -E N            exit status when the lock is busy (default %d)\n"
"  -k SECONDS      after a lost lock, SIGTERM to SIGKILL grace (default %d)\n"
"  --hold-at-least MS\n"
"                  keep KEY taken until MS after it was acquired, even if\n"
"                  CMD ends sooner (default 0: release when CMD ends)\n"
"  --shared        a shared (read) hold: any number of --shared runs hold\n"
"                  KEY together, a run without it holds KEY alone\n"
"  --limit N       KEY is a semaphore of N permits (1..%lld): up to N runs\n"
"                  with --limit N hold it at once\n"
"  -a TOKEN_FILE   send AUTH with the token read from this file\n"
"  --tls           connect with TLS (to the broker's tls_port), verifying\n"
"                  its certificate against the host given to -H\n"
"  --cacert FILE   CA certificates (PEM) for that (default: the system's)\n"
"  --cert FILE, --key FILE\n"
"                  client certificate and its key, for a broker with\n"
"                  tls_auth_clients\n"
"  -h              this help\n"
"  -V              version\n"
"\n"
"Exit: CMD's status (128+N if killed by signal N); %d lock busy; %d lock\n"
"lost while CMD ran; %d usage; 1 broker or connection error;\n"
"126/127 CMD not executable/not found.\n"
"Environment: LOCKBROKER_HOST, LOCKBROKER_PORT.\n",
	    h != NULL && *h != '\0' ? h : DEFAULT_HOST,
	    p != NULL && *p != '\0' ? p : DEFAULT_PORT,
	    EX_TEMPFAIL, DEFAULT_GRACE_S, LIMIT_MAX, EX_TEMPFAIL, EX_SOFTWARE,
	    EX_USAGE);
}

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

static void
usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	fprintf(stderr,
	    "usage: lockctl [-H host[:port] | -U path] [-w WAIT_MS] [-t TTL_MS]"
	    " [-E N] [-k SECONDS]\n"
	    "               [--hold-at-least MS] [--shared | --limit N]"
	    " [-a TOKEN_FILE]\n"
	    "               [--tls [--cacert FILE] [--cert FILE --key FILE]]\n"
	    "               KEY -- CMD [ARGS...]\n"
	    "       lockctl [-H host[:port] | -U path] owner KEY | stats | ping\n"
	    "       lockctl -h | -V\n");
	exit(EX_USAGE);
}

/* Decimal digits only, min..max; 0 on success, -1 otherwise. */
static int
parse_num(const char *s, long long min, long long max, long long *out)
{
	long long v = 0;
	size_t i;

	if (s == NULL || s[0] == '\0' || strlen(s) > 18)
		return -1;
	for (i = 0; s[i] != '\0'; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	if (v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/* An option as the user spelt it, for messages. */
static const char *
opt_name(int opt)
{
	static char buf[3];

	if (opt == OPT_HOLD)
		return "--hold-at-least";
	if (opt == OPT_SHARED)
		return "--shared";
	if (opt == OPT_LIMIT)
		return "--limit";
	if (opt == OPT_TLS)
		return "--tls";
	if (opt == OPT_CACERT)
		return "--cacert";
	if (opt == OPT_CERT)
		return "--cert";
	if (opt == OPT_KEY)
		return "--key";
	buf[0] = '-';
	buf[1] = (char)opt;
	buf[2] = '\0';
	return buf;
}

static long long
opt_num(int opt, const char *arg, long long min, long long max)
{
	long long v;

	if (parse_num(arg, min, max, &v) < 0)
		usage_error("%s wants a number %lld..%lld, not '%s'",
		    opt_name(opt), min, max, arg);
	return v;
}

/* A protocol word: 1..max bytes of 0x21..0x7e, so it cannot split a line. */
static int
is_word(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

/*
 * Split "host", "host:port", "[v6]" or "[v6]:port" (a bare address with
 * two or more colons is IPv6 without a port).  port is left alone when s
 * has none.  Returns -1 with *why set on a malformed address.
 */
static int
parse_hostport(const char *s, char *host, size_t hostlen, char *port,
    size_t portlen, const char **why)
{
	const char *h = s, *p = NULL, *colon;
	size_t hl;
	long long v;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (close == NULL) {
			*why = "missing ']'";
			return -1;
		}
		h = s + 1;
		hl = (size_t)(close - h);
		if (close[1] == ':')
			p = close + 2;
		else if (close[1] != '\0') {
			*why = "junk after ']'";
			return -1;
		}
	} else if ((colon = strchr(s, ':')) != NULL &&
	    strchr(colon + 1, ':') == NULL) {
		hl = (size_t)(colon - s);
		p = colon + 1;
	} else
		hl = strlen(s);
	if (hl == 0) {
		*why = "empty host";
		return -1;
	}
	if (hl >= hostlen) {
		*why = "host name too long";
		return -1;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	if (p != NULL) {
		if (parse_num(p, 1, 65535, &v) < 0) {
			*why = "port must be a number 1..65535";
			return -1;
		}
		snprintf(port, portlen, "%lld", v);
	}
	return 0;
}

/* ---------------------------------------------------------------- time -- */

static long long
now_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) < 0)
		die(1, "clock_gettime: %s", strerror(errno));
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* poll() timeout for an absolute deadline; -1 (forever) when none. */
static int
ms_left(long long deadline)
{
	long long left;

	if (deadline < 0)
		return -1;
	left = deadline - now_ms();
	if (left < 0)
		return 0;
	return left > INT_MAX ? INT_MAX : (int)left;
}

/* ------------------------------------------------------------- signals -- */

/*
 * The handler writes one byte per signal to the self-pipe: the signal
 * number, with SIGBYTE_KERNEL set when the kernel sent it (a terminal's ^C
 * or hangup goes to the whole foreground process group, so CMD already has
 * it and must not get it twice).
 */
static void
on_signal(int sig, siginfo_t *si, void *uctx)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t r;

	(void)uctx;
#ifdef SI_KERNEL
	if (si != NULL && sig != SIGCHLD && si->si_code == SI_KERNEL)
		b |= SIGBYTE_KERNEL;
#else
	(void)si;
#endif
	/* A full pipe already holds bytes that will wake the loop. */
	r = write(sig_wfd, &b, 1);
	(void)r;
	errno = saved;
}

static void
signals_init(void)
{
	struct sigaction sa;
	int fds[2];

	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
		die(1, "pipe2: %s", strerror(errno));
	sig_rfd = fds[0];
	sig_wfd = fds[1];
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	if (sigfillset(&sa.sa_mask) < 0)
		die(1, "sigfillset: %s", strerror(errno));
	for (int i = 0; i < NFWD; i++)
		if (sigaction(fwd_signals[i], &sa, NULL) < 0)
			die(1, "sigaction: %s", strerror(errno));
	sa.sa_flags |= SA_NOCLDSTOP;
	if (sigaction(SIGCHLD, &sa, NULL) < 0)
		die(1, "sigaction: %s", strerror(errno));
}

/* The next byte from the self-pipe, or -1 when it is empty. */
static int
signals_next(void)
{
	unsigned char b;
	ssize_t n;

	for (;;) {
		n = read(sig_rfd, &b, 1);
		if (n == 1)
			return b;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			die(1, "read self-pipe: %s", strerror(errno));
		return -1;
	}
}

/* ---------------------------------------------------------- connection -- */

static void
conn_fail(struct conn *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof c->err, fmt, ap);
	va_end(ap);
}

/* Broker gone from under us (or never reached): keep the fd closed. */
static void
conn_close(struct conn *c)
{
	if (c->ssl != NULL) {
		ctls_close(c->ssl);
		c->ssl = NULL;
	}
	if (c->fd >= 0 && close(c->fd) < 0 && errno != EINTR)
		msg("close: %s", strerror(errno));
	c->fd = -1;
}

/*
 * Wait for fd to become ready for ev until deadline.  Returns 1 ready,
 * 0 timed out, -1 poll failed (errno set), REPLY_SIGNAL if with_signals
 * and the self-pipe has a byte.
 */
static int
wait_fd(int fd, short ev, long long deadline, int with_signals)
{
	struct pollfd p[2];
	int n;

	for (;;) {
		p[0].fd = fd;
		p[0].events = ev;
		p[0].revents = 0;
		p[1].fd = with_signals ? sig_rfd : -1;
		p[1].events = POLLIN;
		p[1].revents = 0;
		n = poll(p, 2, ms_left(deadline));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (p[1].revents != 0)
			return REPLY_SIGNAL;
		if (p[0].revents != 0)
			return 1;
		if (n == 0 || ms_left(deadline) == 0)
			return 0;
	}
}

/* Finish a non-blocking connect(); 0 connected, -1 with errno set. */
static int
connect_wait(int fd, long long deadline)
{
	int r, soerr = 0;
	socklen_t len = sizeof soerr;

	r = wait_fd(fd, POLLOUT, deadline, 0);
	if (r < 0)
		return -1;
	if (r == 0) {
		errno = ETIMEDOUT;
		return -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
		return -1;
	if (soerr != 0) {
		errno = soerr;
		return -1;
	}
	return 0;
}

/*
 * TCP keepalive, so that a broker host that vanishes without a FIN is
 * noticed in about half a minute rather than never.  Best effort.
 */
static void
tcp_tune(int fd)
{
	int on = 1;

	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) < 0)
		msg("SO_KEEPALIVE: %s", strerror(errno));
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) < 0)
		msg("TCP_NODELAY: %s", strerror(errno));
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL) && defined(TCP_KEEPCNT)
	{
		int idle = 10, intvl = 5, cnt = 3;

		if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle,
		    sizeof idle) < 0 ||
		    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl,
		    sizeof intvl) < 0 ||
		    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt,
		    sizeof cnt) < 0)
			msg("TCP keepalive options: %s", strerror(errno));
	}
#endif
}

/*
 * Connect to the broker.  The socket is non-blocking and close-on-exec, so
 * CMD never inherits the session that holds its lock.  Returns 0, or -1
 * with c->err set.
 */
static int
conn_open(struct conn *c, const struct target *t)
{
	long long deadline = now_ms() + CONNECT_MS;
	struct addrinfo hints, *res = NULL, *ai;
	int fd, r, saved = 0;

	c->fd = -1;
	c->inlen = 0;
	c->lost = 0;
	c->err[0] = '\0';
	if (t->is_unix) {
		struct sockaddr_un sun;

		memset(&sun, 0, sizeof sun);
		sun.sun_family = AF_UNIX;
		memcpy(sun.sun_path, t->path, strlen(t->path) + 1);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
		    0);
		if (fd < 0) {
			conn_fail(c, "socket: %s", strerror(errno));
			return -1;
		}
		if (connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0 &&
		    (errno != EINPROGRESS || connect_wait(fd, deadline) < 0)) {
			conn_fail(c, "cannot connect to %s: %s", t->name,
			    strerror(errno));
			close(fd);
			return -1;
		}
		c->fd = fd;
		return 0;
	}

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
	r = getaddrinfo(t->host, t->port, &hints, &res);
	if (r != 0) {
		conn_fail(c, "%s: %s", t->host, r == EAI_SYSTEM ?
		    strerror(errno) : gai_strerror(r));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
		    ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
		    ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
		    (errno == EINPROGRESS && connect_wait(fd, deadline) == 0)) {
			c->fd = fd;
			break;
		}
		saved = errno;
		close(fd);
	}
	freeaddrinfo(res);
	if (c->fd < 0) {
		conn_fail(c, "cannot connect to %s: %s", t->name,
		    strerror(saved != 0 ? saved : ECONNREFUSED));
		return -1;
	}
	tcp_tune(c->fd);
	if (t->tls && (c->ssl = ctls_open(c->fd, t->host, &t->tls_opts,
	    deadline - now_ms() > 0 ? deadline - now_ms() : 1, c->err,
	    sizeof c->err)) == NULL) {
		char why[sizeof c->err];

		snprintf(why, sizeof why, "%s", c->err);
		conn_fail(c, "%s: %s", t->name, why);
		conn_close(c);
		return -1;
	}
	return 0;
}

/*
 * One send() or SSL_write.  Like send(): bytes, or -1 with errno (EAGAIN
 * to wait for *ev, which is then set; else c->err is set).
 */
static ssize_t
conn_write(struct conn *c, const char *buf, size_t len, short *ev)
{
	ssize_t n;
	long r;

	*ev = POLLOUT;
	if (c->ssl == NULL) {
		n = send(c->fd, buf, len, MSG_NOSIGNAL);
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			conn_fail(c, "send: %s", strerror(errno));
		return n;
	}
	r = ctls_write(c->ssl, buf, len, c->err, sizeof c->err);
	if (r > 0)
		return (ssize_t)r;
	if (r == CTLS_WANT_READ || r == CTLS_WANT_WRITE) {
		*ev = r == CTLS_WANT_READ ? POLLIN : POLLOUT;
		errno = EAGAIN;
		return -1;
	}
	errno = EPIPE;
	return -1;
}

/* Send one request line (LF added).  0, or -1 with c->err set. */
static int
conn_send(struct conn *c, const char *line)
{
	char buf[REQ_MAX_LEN + 1];
	size_t len = strlen(line), off = 0;
	long long deadline = now_ms() + REPLY_MS;

	if (c->fd < 0) {
		conn_fail(c, "not connected");
		return -1;
	}
	if (len >= REQ_MAX_LEN) {
		conn_fail(c, "request too long (%zu bytes)", len);
		return -1;
	}
	memcpy(buf, line, len);
	buf[len++] = '\n';
	while (off < len) {
		short ev;
		ssize_t n = conn_write(c, buf + off, len - off, &ev);

		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			int r = wait_fd(c->fd, ev, deadline, 0);
			if (r > 0)
				continue;
			conn_fail(c, "send: %s", r == 0 ?
			    "broker not reading" : strerror(errno));
			return -1;
		}
		if (n == 0)
			conn_fail(c, "send: wrote nothing");
		return -1;
	}
	return 0;
}

/*
 * Read what the socket has now into c->in.  1 read something, 0 nothing
 * yet, -1 EOF or error (c->err set).
 */
static int
conn_fill(struct conn *c)
{
	ssize_t n;

	if (c->inlen == sizeof c->in) {
		conn_fail(c, "reply line longer than %d bytes", LINE_MAX_LEN);
		return -1;
	}
	if (c->ssl != NULL) {
		long r = ctls_read(c->ssl, c->in + c->inlen,
		    sizeof c->in - c->inlen, c->err, sizeof c->err);

		if (r == CTLS_WANT_READ || r == CTLS_WANT_WRITE)
			return 0;
		if (r == CTLS_FAILED)
			return -1;
		n = (ssize_t)r;
	} else
		n = read(c->fd, c->in + c->inlen, sizeof c->in - c->inlen);
	if (n > 0) {
		c->inlen += (size_t)n;
		return 1;
	}
	if (n == 0) {
		conn_fail(c, "broker closed the connection");
		return -1;
	}
	if (errno == EINTR || errno == EAGAIN)
		return 0;
	conn_fail(c, "read: %s", strerror(errno));
	return -1;
}

/*
 * Take one complete line out of c->in into out (LF and CR dropped).
 * 1 got a line, 0 no complete line yet, -1 line does not fit in out.
 */
static int
conn_line(struct conn *c, char *out, size_t outlen)
{
	char *lf = memchr(c->in, '\n', c->inlen);
	size_t n, used;

	if (lf == NULL)
		return 0;
	used = (size_t)(lf - c->in) + 1;
	n = used - 1;
	if (n > 0 && c->in[n - 1] == '\r')
		n--;
	if (n >= outlen) {
		conn_fail(c, "reply line longer than %zu bytes", outlen - 1);
		return -1;
	}
	memcpy(out, c->in, n);
	out[n] = '\0';
	memmove(c->in, c->in + used, c->inlen - used);
	c->inlen -= used;
	return 1;
}

/*
 * An unsolicited line: "EVENT LOST <key> <token>" for our key marks the
 * lock lost; other events are ignored.  Returns 1 if line was an event.
 */
static int
conn_event(struct conn *c, const char *line)
{
	char key[REQ_MAX_LEN];
	char token[FENCE_MAX_LEN + 2];

	if (strncmp(line, "EVENT ", 6) != 0)
		return 0;
	if (c->watch_key != NULL &&
	    sscanf(line, "EVENT LOST %4095s %21s", key, token) == 2 &&
	    strcmp(key, c->watch_key) == 0) {
		if (!c->lost)
			conn_fail(c, "broker says %s", line);
		c->lost = 1;
	}
	return 1;
}

/*
 * Read the reply to the last request into out, skipping EVENT lines.
 * Returns 0 with a reply, -1 (c->err set) on EOF, error or no reply
 * within timeout_ms, or, if with_signals, REPLY_SIGNAL when a signal is
 * waiting (the caller drains the self-pipe and may call again).
 */
static int
conn_reply(struct conn *c, char *out, size_t outlen, long long timeout_ms,
    int with_signals)
{
	long long deadline = now_ms() + timeout_ms;
	int r;

	if (c->fd < 0) {
		conn_fail(c, "not connected");
		return -1;
	}
	for (;;) {
		r = conn_line(c, out, outlen);
		if (r < 0)
			return -1;
		if (r > 0) {
			if (conn_event(c, out))
				continue;
			return 0;
		}
		/* bytes inside the SSL: poll() would not see them */
		r = c->ssl != NULL && ctls_pending(c->ssl) ? 1 :
		    wait_fd(c->fd, POLLIN, deadline, with_signals);
		if (r == REPLY_SIGNAL)
			return REPLY_SIGNAL;
		if (r < 0) {
			conn_fail(c, "poll: %s", strerror(errno));
			return -1;
		}
		if (r == 0) {
			conn_fail(c, "no reply from broker within %lld ms",
			    timeout_ms);
			return -1;
		}
		if (conn_fill(c) < 0)
			return -1;
	}
}

/*
 * One request and its reply, with signals left in the self-pipe for
 * later: used where lockctl will be done in moments anyway.
 */
static int
conn_call(struct conn *c, const char *req, char *out, size_t outlen)
{
	if (conn_send(c, req) < 0)
		return -1;
	return conn_reply(c, out, outlen, REPLY_MS, 0);
}

/* AUTH with the token from path; exits 1 if it cannot be read or fails. */
static void
conn_auth(struct conn *c, const char *path)
{
	char tok[256], req[300], reply[LINE_MAX_LEN];
	ssize_t n;
	size_t len = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(1, "%s: %s", path, strerror(errno));
	while (len < sizeof tok) {
		n = read(fd, tok + len, sizeof tok - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die(1, "%s: %s", path, strerror(errno));
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (close(fd) < 0)
		die(1, "%s: close: %s", path, strerror(errno));
	if (len == sizeof tok)
		die(1, "%s: token file too long", path);
	while (len > 0 && (tok[len - 1] == '\n' || tok[len - 1] == '\r' ||
	    tok[len - 1] == ' ' || tok[len - 1] == '\t'))
		len--;
	tok[len] = '\0';
	if (!is_word(tok, TOKEN_MAX_LEN))
		die(1, "%s: token must be 1..%d printable characters without "
		    "blanks", path, TOKEN_MAX_LEN);
	snprintf(req, sizeof req, "AUTH %s", tok);
	explicit_bzero(tok, sizeof tok);
	if (conn_call(c, req, reply, sizeof reply) < 0) {
		explicit_bzero(req, sizeof req);
		die(1, "AUTH: %s", c->err);
	}
	explicit_bzero(req, sizeof req);
	if (strncmp(reply, "OK", 2) != 0 || (reply[2] != '\0' &&
	    reply[2] != ' '))
		die(1, "AUTH refused: %s", reply);
}

/* Is reply "OK" or "OK ..."? */
static int
reply_ok(const char *reply)
{
	return strncmp(reply, "OK", 2) == 0 &&
	    (reply[2] == '\0' || reply[2] == ' ');
}

/* ------------------------------------------------------------ the lock -- */

/*
 * The lock lockctl holds from ACQUIRE's OK on, so that every way out (CMD
 * done, or die() on the way) gives it back through held_release().
 */
static struct {
	struct conn *c;			/* NULL: nothing held, or given back */
	const char *key;
	long long since;		/* now_ms() when ACQUIRE answered OK */
	long long at_least;		/* --hold-at-least, 0 when not given */
} held;

/*
 * Give the held lock back, once.  While less than --hold-at-least has
 * passed since it was acquired, RELEASE KEY LINGER <left>: the broker drops
 * the hold but leaves the key taken in Redis for <left> ms more, renewed
 * by nobody, and waiters get it when that runs out.  Otherwise a plain
 * RELEASE.  "Acquired" is when the OK arrived, a little after Redis took
 * the key, so the key stays taken a little longer than asked, never
 * shorter.  A broker older than protocol 1.1 refuses LINGER: the lock is
 * then released at once, with a warning.
 * Returns 0 released (an error reply such as ERR UNAVAILABLE is shown),
 * 1 the lock had been lost (reply says how, or c->lost), -1 the broker
 * could not be asked (c->err says why).
 */
static int
held_release(char *reply, size_t replylen)
{
	struct conn *c = held.c;
	char req[REQ_MAX_LEN];
	long long left;

	if (c == NULL) {
		snprintf(reply, replylen, "no lock held");
		return 1;
	}
	held.c = NULL;			/* once, even if a die() comes back here */
	left = held.at_least - (now_ms() - held.since);
	if (left > 0)
		snprintf(req, sizeof req, "RELEASE %s LINGER %lld", held.key,
		    left);
	else
		snprintf(req, sizeof req, "RELEASE %s", held.key);
	if (conn_call(c, req, reply, replylen) < 0)
		return -1;
	if (left > 0 && (strncmp(reply, "ERR BADARG", 10) == 0 ||
	    strncmp(reply, "ERR BADCMD", 10) == 0)) {
		msg("%s: %s; the broker predates LINGER (protocol 1.1), so "
		    "%s is released now", req, reply, held.key);
		snprintf(req, sizeof req, "RELEASE %s", held.key);
		if (conn_call(c, req, reply, replylen) < 0)
			return -1;
	}
	if (c->lost || strncmp(reply, "ERR LOST", 8) == 0 ||
	    strncmp(reply, "ERR NOTHELD", 11) == 0)
		return 1;
	if (!reply_ok(reply))
		msg("%s: %s", req, reply);
	return 0;
}

/*
 * lockctl is ending early (die): with --hold-at-least, still keep the key
 * taken for the rest of that time if the broker can be asked.  Without it
 * there is nothing to do: the session ends with lockctl, which releases.
 */
static void
held_abandon(void)
{
	char reply[LINE_MAX_LEN];

	if (held.c != NULL && held.at_least > 0 && held.c->fd >= 0 &&
	    !held.c->lost)
		(void)held_release(reply, sizeof reply);
}

/* ---------------------------------------------------------- subcommands -- */

/* owner KEY, stats, ping: one request, its reply on stdout. */
static int
run_query(struct conn *c, const char *req)
{
	char reply[LINE_MAX_LEN];

	if (conn_call(c, req, reply, sizeof reply) < 0)
		die(1, "%s", c->err);
	conn_close(c);
	if (!reply_ok(reply)) {
		msg("%s", reply);
		return 1;
	}
	if (printf("%s\n", reply) < 0 || fflush(stdout) == EOF)
		die(1, "stdout: %s", strerror(errno));
	return 0;
}

/* ------------------------------------------------------------- run CMD -- */

struct run {
	const char *key;
	char **argv;
	pid_t pid;
	int status;			/* waitpid() status once exited */
	int exited;
	int lost;			/* stopping CMD because of a lost lock */
	int killed;			/* SIGKILL sent */
	long long kill_at;		/* when SIGKILL is due */
	long long grace_ms;
};

/* Status as a shell shows it: exit code, or 128+N for signal N. */
static int
exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

/*
 * fork and exec CMD.  Signals are blocked across fork so the child runs no
 * handler of ours (it would write to our self-pipe); it gets default
 * dispositions, our original mask, and (Linux) SIGKILL if lockctl dies
 * without releasing it: by then the lock is gone.
 */
static void
child_start(struct run *r)
{
	sigset_t all, old;
	pid_t parent = getpid();

	if (sigfillset(&all) < 0 || sigprocmask(SIG_BLOCK, &all, &old) < 0)
		die(1, "sigprocmask: %s", strerror(errno));
	r->pid = fork();
	if (r->pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (r->pid == 0) {
		int e;

		for (int i = 0; i < NFWD; i++)
			if (signal(fwd_signals[i], SIG_DFL) == SIG_ERR)
				_exit(126);
		if (signal(SIGCHLD, SIG_DFL) == SIG_ERR ||
		    sigprocmask(SIG_SETMASK, &old, NULL) < 0)
			_exit(126);
#ifdef __linux__
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ||
		    getppid() != parent)
			_exit(126);
#else
		(void)parent;
#endif
		execvp(r->argv[0], r->argv);
		e = errno;
		fprintf(stderr, "lockctl: %s: %s\n", r->argv[0], strerror(e));
		_exit(e == ENOENT ? 127 : 126);
	}
	if (sigprocmask(SIG_SETMASK, &old, NULL) < 0)
		msg("sigprocmask: %s", strerror(errno));
}

static void
child_reap(struct run *r)
{
	pid_t p;

	if (r->exited)
		return;
	do
		p = waitpid(r->pid, &r->status, WNOHANG);
	while (p < 0 && errno == EINTR);
	if (p == r->pid)
		r->exited = 1;
	else if (p < 0)
		die(1, "waitpid: %s", strerror(errno));
}

static void
child_signal(struct run *r, int sig)
{
	if (!r->exited && kill(r->pid, sig) < 0 && errno != ESRCH)
		msg("kill %ld: %s", (long)r->pid, strerror(errno));
}

/* The lock is gone: start stopping CMD (once). */
static void
run_lose(struct run *r, const char *why)
{
	if (r->lost)
		return;
	r->lost = 1;
	msg("lock %s lost (%s); stopping %s", r->key, why, r->argv[0]);
	child_signal(r, SIGTERM);
	r->kill_at = now_ms() + r->grace_ms;
}

/*
 * Wait for CMD to exit while watching the session: forward signals, stop
 * CMD if the lock is lost.  Every turn blocks in poll() until the socket,
 * the self-pipe or the SIGKILL deadline has something.
 */
static void
run_wait(struct run *r, struct conn *c)
{
	char line[LINE_MAX_LEN];
	struct pollfd p[2];
	int n, b;

	while (!r->exited) {
		p[0].fd = sig_rfd;
		p[0].events = POLLIN;
		p[0].revents = 0;
		p[1].fd = c->fd;	/* -1 once the session is gone */
		p[1].events = POLLIN;
		p[1].revents = 0;
		n = poll(p, 2, c->ssl != NULL && ctls_pending(c->ssl) ? 0 :
		    r->lost && !r->killed ? ms_left(r->kill_at) : -1);
		if (n < 0 && errno != EINTR) {
			msg("poll: %s; killing %s", strerror(errno),
			    r->argv[0]);
			child_signal(r, SIGKILL);
			while (waitpid(r->pid, &r->status, 0) < 0 &&
			    errno == EINTR)
				;
			r->lost = r->exited = 1;
			return;
		}
		while ((b = signals_next()) >= 0) {
			int sig = b & ~SIGBYTE_KERNEL;

			if (sig != SIGCHLD && !(b & SIGBYTE_KERNEL))
				child_signal(r, sig);
		}
		child_reap(r);
		if (c->fd >= 0 && (p[1].revents != 0 ||
		    (c->ssl != NULL && ctls_pending(c->ssl)))) {
			if (conn_fill(c) < 0) {
				conn_close(c);
				run_lose(r, c->err);
			}
			while (c->fd >= 0 &&
			    (n = conn_line(c, line, sizeof line)) != 0) {
				if (n < 0) {
					conn_close(c);
					run_lose(r, c->err);
				} else if (!conn_event(c, line))
					msg("unexpected line from broker: %s",
					    line);
				else if (c->lost)
					run_lose(r, c->err);
			}
		}
		if (r->lost && !r->killed && !r->exited &&
		    ms_left(r->kill_at) == 0) {
			msg("%s still running after %lld s; sending SIGKILL",
			    r->argv[0], r->grace_ms / 1000);
			child_signal(r, SIGKILL);
			r->killed = 1;
		}
	}
}

struct opts {
	struct target target;
	long long wait_ms;		/* -w */
	long long ttl_ms;		/* -t, 0 when not given */
	long long busy_code;		/* -E */
	long long grace_s;		/* -k */
	long long hold_ms;		/* --hold-at-least, 0 when not given */
	int shared;			/* --shared */
	long long limit;		/* --limit, 0 when not given */
	const char *auth_file;		/* -a */
};

/*
 * The ACQUIRE line for KEY: "ACQUIRE KEY [SHARED | LIMIT n] [WAIT ms]
 * [TTL ms]".  KEY was checked to leave room for the options.
 */
static void
acquire_line(char *req, size_t len, const struct opts *o, const char *key)
{
	int n = snprintf(req, len, "ACQUIRE %s", key);

	if (o->shared)
		n += snprintf(req + n, len - (size_t)n, " SHARED");
	else if (o->limit > 0)
		n += snprintf(req + n, len - (size_t)n, " LIMIT %lld",
		    o->limit);
	if (o->wait_ms > 0)
		n += snprintf(req + n, len - (size_t)n, " WAIT %lld",
		    o->wait_ms);
	if (o->ttl_ms > 0)
		snprintf(req + n, len - (size_t)n, " TTL %lld", o->ttl_ms);
}

/*
 * ACQUIRE was refused with an ERR reply: say what was asked and what the
 * broker said, and for SHARED or LIMIT refused as an unknown option, that
 * the broker is older than the words (protocol 1.1).  A key that is a
 * semaphore of another LIMIT, or a lock where a semaphore was asked (or
 * the other way round), comes back as the broker's own ERR BADARG text.
 */
static void __attribute__((noreturn))
acquire_refused(const struct opts *o, const char *req, const char *reply)
{
	if ((o->shared || o->limit > 0) &&
	    (strncmp(reply, "ERR BADCMD", 10) == 0 ||
	    strncmp(reply, "ERR BADARG unknown option", 25) == 0))
		die(1, "%s: %s (the broker predates %s, protocol 1.1)", req,
		    reply, o->shared ? "SHARED" : "LIMIT");
	die(1, "%s: %s", req, reply);
}

/*
 * Acquire KEY and run CMD under it.  Returns lockctl's exit status.
 */
static int
run_locked(struct conn *c, const struct opts *o, const char *key, char **cmd)
{
	char req[REQ_MAX_LEN], reply[LINE_MAX_LEN], token[FENCE_MAX_LEN + 1];
	struct run r;
	int rv, b;

	if (conn_call(c, "HELLO lockctl", reply, sizeof reply) < 0)
		die(1, "HELLO: %s", c->err);
	if (!reply_ok(reply))
		die(1, "HELLO refused: %s", reply);

	acquire_line(req, sizeof req, o, key);
	if (conn_send(c, req) < 0)
		die(1, "ACQUIRE: %s", c->err);
	/* Waiting may take long: a signal now ends lockctl. */
	while ((rv = conn_reply(c, reply, sizeof reply,
	    o->wait_ms + REPLY_MS, 1)) == REPLY_SIGNAL) {
		while ((b = signals_next()) >= 0) {
			int sig = b & ~SIGBYTE_KERNEL;

			if (sig == SIGCHLD)
				continue;
			msg("%s while waiting for lock %s; giving up",
			    strsignal(sig), key);
			exit(128 + sig);
		}
	}
	if (rv < 0)
		die(1, "ACQUIRE %s: %s", key, c->err);
	if (strcmp(reply, "BUSY") == 0) {
		char what[64] = "";

		if (o->limit > 0)
			snprintf(what, sizeof what, " (LIMIT %lld: every "
			    "permit taken)", o->limit);
		if (o->wait_ms > 0)
			msg("lock %s is busy%s (waited %lld ms)", key, what,
			    o->wait_ms);
		else
			msg("lock %s is busy%s", key, what);
		return (int)o->busy_code;
	}
	if (!reply_ok(reply))
		acquire_refused(o, req, reply);
	if (strlen(reply) < 4 || strlen(reply + 3) > FENCE_MAX_LEN ||
	    strspn(reply + 3, "0123456789") != strlen(reply + 3))
		die(1, "ACQUIRE %s: reply without a fencing token: %s", key,
		    reply);
	memcpy(token, reply + 3, strlen(reply + 3) + 1);
	held.c = c;
	held.key = key;
	held.since = now_ms();
	held.at_least = o->hold_ms;

	/* Ask to be told of a lost lock; an older broker refuses, fine. */
	c->watch_key = key;
	if (conn_call(c, "EVENTS ON", reply, sizeof reply) < 0)
		die(1, "EVENTS ON: %s", c->err);
	if (c->lost)
		die(EX_SOFTWARE, "lock %s lost before %s started", key, cmd[0]);

	if (setenv("LOCKBROKER_KEY", key, 1) < 0 ||
	    setenv("LOCKBROKER_TOKEN", token, 1) < 0)
		die(1, "setenv: %s", strerror(errno));

	memset(&r, 0, sizeof r);
	r.key = key;
	r.argv = cmd;
	r.grace_ms = o->grace_s * 1000;
	child_start(&r);
	run_wait(&r, c);

	if (r.lost) {
		msg("%s stopped (%s); lock %s was lost", cmd[0],
		    WIFSIGNALED(r.status) ? strsignal(WTERMSIG(r.status)) :
		    "exited", key);
		/* Only a failed poll() leaves the session to ask. */
		held_abandon();
		return EX_SOFTWARE;
	}
	/* CMD is done: give the lock back and say whether we still had it. */
	rv = held_release(reply, sizeof reply);
	if (rv < 0) {
		msg("lock %s may have been lost before %s ended: RELEASE: %s",
		    key, cmd[0], c->err);
		return EX_SOFTWARE;
	}
	if (rv > 0) {
		msg("lock %s was lost before %s ended: %s", key, cmd[0],
		    c->lost ? c->err : reply);
		return EX_SOFTWARE;
	}
	/* Polite goodbye; closing the session releases everything anyway. */
	if (conn_call(c, "QUIT", reply, sizeof reply) < 0)
		c->err[0] = '\0';
	conn_close(c);
	return exit_code(r.status);
}

/* Fill o->target from -H/-U and the environment; usage error if bad. */
static void
target_init(struct target *t, const char *opt_h, const char *opt_u)
{
	const char *env_h = getenv("LOCKBROKER_HOST");
	const char *env_p = getenv("LOCKBROKER_PORT");
	const char *why = "";
	long long v;

	memset(t, 0, sizeof *t);
	if (opt_u != NULL) {
		if (opt_h != NULL)
			usage_error("-H and -U exclude each other");
		if (opt_u[0] == '\0' || strlen(opt_u) >= sizeof t->path)
			usage_error("-U: socket path empty or longer than %zu",
			    sizeof t->path - 1);
		t->is_unix = 1;
		memcpy(t->path, opt_u, strlen(opt_u) + 1);
		snprintf(t->name, sizeof t->name, "%s", t->path);
		return;
	}
	snprintf(t->host, sizeof t->host, "%s", DEFAULT_HOST);
	snprintf(t->port, sizeof t->port, "%s", DEFAULT_PORT);
	if (env_p != NULL && env_p[0] != '\0') {
		if (parse_num(env_p, 1, 65535, &v) < 0)
			usage_error("LOCKBROKER_PORT must be 1..65535, not '%s'",
			    env_p);
		snprintf(t->port, sizeof t->port, "%lld", v);
	}
	if (env_h != NULL && env_h[0] != '\0' && opt_h == NULL &&
	    parse_hostport(env_h, t->host, sizeof t->host, t->port,
	    sizeof t->port, &why) < 0)
		usage_error("LOCKBROKER_HOST '%s': %s", env_h, why);
	if (opt_h != NULL && parse_hostport(opt_h, t->host, sizeof t->host,
	    t->port, sizeof t->port, &why) < 0)
		usage_error("-H '%s': %s", opt_h, why);
	snprintf(t->name, sizeof t->name, strchr(t->host, ':') != NULL ?
	    "[%s]:%s" : "%s:%s", t->host, t->port);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "hold-at-least", required_argument, NULL, OPT_HOLD },
		{ "shared", no_argument, NULL, OPT_SHARED },
		{ "limit", required_argument, NULL, OPT_LIMIT },
		{ "tls", no_argument, NULL, OPT_TLS },
		{ "cacert", required_argument, NULL, OPT_CACERT },
		{ "cert", required_argument, NULL, OPT_CERT },
		{ "key", required_argument, NULL, OPT_KEY },
		{ NULL, 0, NULL, 0 }
	};
	static struct conn c;
	struct opts o;
	struct ctls_opts tls_opts = { NULL, NULL, NULL };
	const char *opt_h = NULL, *opt_u = NULL, *key;
	int tls = 0;
	char req[REQ_MAX_LEN];
	int ch, nargs;

	memset(&o, 0, sizeof o);
	o.busy_code = EX_TEMPFAIL;
	o.grace_s = DEFAULT_GRACE_S;
	opterr = 0;
	/* '+': stop at KEY, so CMD's own options are never ours. */
	while ((ch = getopt_long(argc, argv, "+:hVH:U:w:t:E:k:a:", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'h':
			usage(stdout);
			if (fflush(stdout) == EOF)
				die(1, "stdout: %s", strerror(errno));
			return 0;
		case 'V':
			if (printf("lockctl %s\n", LOCKBROKER_VERSION) < 0 ||
			    fflush(stdout) == EOF)
				die(1, "stdout: %s", strerror(errno));
			return 0;
		case 'H':
			opt_h = optarg;
			break;
		case 'U':
			opt_u = optarg;
			break;
		case 'w':
			o.wait_ms = opt_num(ch, optarg, 0, MS_MAX);
			break;
		case 't':
			o.ttl_ms = opt_num(ch, optarg, 1, MS_MAX);
			break;
		case 'E':
			o.busy_code = opt_num(ch, optarg, 0, 255);
			break;
		case 'k':
			o.grace_s = opt_num(ch, optarg, 0, GRACE_MAX_S);
			break;
		case 'a':
			o.auth_file = optarg;
			break;
		case OPT_HOLD:
			o.hold_ms = opt_num(ch, optarg, 0, MS_MAX);
			break;
		case OPT_SHARED:
			o.shared = 1;
			break;
		case OPT_LIMIT:
			o.limit = opt_num(ch, optarg, 1, LIMIT_MAX);
			break;
		case OPT_TLS:
			tls = 1;
			break;
		case OPT_CACERT:
			tls_opts.cacert = optarg;
			break;
		case OPT_CERT:
			tls_opts.cert = optarg;
			break;
		case OPT_KEY:
			tls_opts.key = optarg;
			break;
		case ':':
			usage_error("%s needs an argument", opt_name(optopt));
		default:
			if (optopt == 0)	/* an unknown --word */
				usage_error("unknown option %s",
				    argv[optind - 1]);
			if (optopt == OPT_SHARED || optopt == OPT_TLS)
				usage_error("%s takes no value",
				    opt_name(optopt));
			usage_error("unknown option -%c", optopt);
		}
	}
	argv += optind;
	nargs = argc - optind;
	if (nargs == 0)
		usage_error("missing KEY");
	if (o.shared && o.limit > 0)
		usage_error("--shared and --limit exclude each other");
	target_init(&o.target, opt_h, opt_u);
	if (!tls && (tls_opts.cacert || tls_opts.cert || tls_opts.key))
		usage_error("--cacert, --cert and --key need --tls");
	if ((tls_opts.cert == NULL) != (tls_opts.key == NULL))
		usage_error("--cert and --key go together");
	if (tls && o.target.is_unix)
		usage_error("--tls is for TCP (-H); the unix socket is plain");
	o.target.tls = tls;
	o.target.tls_opts = tls_opts;

	/* "KEY -- CMD" wins, so a lock may be called "stats". */
	if (nargs >= 2 && strcmp(argv[1], "--") == 0) {
		key = argv[0];
		if (nargs < 3)
			usage_error("missing CMD after --");
		if (!is_word(key, REQ_MAX_LEN - 64))
			usage_error("KEY must be printable ASCII without blanks");
		signals_init();
		if (conn_open(&c, &o.target) < 0)
			die(1, "%s", c.err);
		if (o.auth_file != NULL)
			conn_auth(&c, o.auth_file);
		return run_locked(&c, &o, key, argv + 2);
	}
	if (o.shared || o.limit > 0)
		usage_error("%s is for KEY -- CMD only", o.shared ? "--shared" :
		    "--limit");
	if (strcmp(argv[0], "owner") == 0) {
		if (nargs != 2)
			usage_error("owner takes one KEY");
		if (!is_word(argv[1], REQ_MAX_LEN - 64))
			usage_error("KEY must be printable ASCII without blanks");
		snprintf(req, sizeof req, "OWNER %s", argv[1]);
	} else if (strcmp(argv[0], "stats") == 0 ||
	    strcmp(argv[0], "ping") == 0) {
		if (nargs != 1)
			usage_error("%s takes no arguments", argv[0]);
		snprintf(req, sizeof req, "%s",
		    argv[0][0] == 's' ? "STATS" : "PING");
	} else if (nargs == 1)
		usage_error("missing -- CMD after KEY");
	else
		usage_error("missing -- between KEY and CMD");
	signals_init();
	if (conn_open(&c, &o.target) < 0)
		die(1, "%s", c.err);
	if (o.auth_file != NULL)
		conn_auth(&c, o.auth_file);
	return run_query(&c, req);
}
