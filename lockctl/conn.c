/*
 * conn.c - lockctl's connection to the broker (see conn.h): connect with a
 * deadline, TCP keepalive, TLS on the same socket, and lines in and out
 * through one poll() per wait.
 */
#include "conn.h"
#include "util.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONNECT_MS	5000		/* connect() to the broker */

static void conn_fail(struct conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
conn_fail(struct conn *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof c->err, fmt, ap);
	va_end(ap);
}

void
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
 * 0 timed out, -1 poll failed (errno set), REPLY_SIGNAL if wake_fd (-1:
 * none) is readable.
 */
static int
wait_fd(int fd, short ev, long long deadline, int wake_fd)
{
	struct pollfd p[2];
	int n;

	for (;;) {
		p[0].fd = fd;
		p[0].events = ev;
		p[0].revents = 0;
		p[1].fd = wake_fd;
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

	r = wait_fd(fd, POLLOUT, deadline, -1);
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

int
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

int
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
			int r = wait_fd(c->fd, ev, deadline, -1);
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

int
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

int
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

int
conn_event(struct conn *c, const char *line)
{
	if (!is_event(line))
		return 0;
	if (c->watch_key != NULL && event_lost(line, c->watch_key)) {
		if (!c->lost)
			conn_fail(c, "broker says %s", line);
		c->lost = 1;
	}
	return 1;
}

int
conn_next(struct conn *c, char *out, size_t outlen, long long deadline,
    int wake_fd)
{
	int r;

	if (c->fd < 0) {
		conn_fail(c, "not connected");
		return -1;
	}
	for (;;) {
		r = conn_line(c, out, outlen);
		if (r != 0)
			return r;
		/* bytes inside the SSL: poll() would not see them */
		r = conn_pending(c) ? 1 :
		    wait_fd(c->fd, POLLIN, deadline, wake_fd);
		if (r == REPLY_SIGNAL || r == 0)
			return r;
		if (r < 0) {
			conn_fail(c, "poll: %s", strerror(errno));
			return -1;
		}
		if (conn_fill(c) < 0)
			return -1;
	}
}

int
conn_reply(struct conn *c, char *out, size_t outlen, long long timeout_ms,
    int wake_fd)
{
	long long deadline = now_ms() + timeout_ms;
	int r;

	while ((r = conn_next(c, out, outlen, deadline, wake_fd)) == 1)
		if (!conn_event(c, out))
			return 0;
	if (r == 0)
		conn_fail(c, "no reply from broker within %lld ms",
		    timeout_ms);
	return r;
}

int
conn_call(struct conn *c, const char *req, char *out, size_t outlen)
{
	if (conn_send(c, req) < 0)
		return -1;
	return conn_reply(c, out, outlen, REPLY_MS, -1);
}

int
conn_pending(const struct conn *c)
{
	return c->ssl != NULL && ctls_pending(c->ssl);
}
