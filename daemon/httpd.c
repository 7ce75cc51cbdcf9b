/*
 * httpd.c - a small, bounded HTTP/1.x server for one page (GET /metrics).
 *
 * It replaces libevent's evhttp, which has no bound on connections and no
 * deadline for a request (its timeouts start again with every byte read):
 * ~16,000 idle /metrics connections took every descriptor, and the broker
 * then spun on accept() and logged each failure, serving no new client.
 * Here:
 *  - at most max_conns connections; past it a new one is accepted and
 *    closed at once, so its descriptor comes back and the listener never
 *    stalls on it;
 *  - each request must arrive whole and its answer be written within
 *    timeout_ms of the connection's start or of the previous answer being
 *    written, whatever trickles in meanwhile; so an idle keep-alive
 *    connection closes after timeout_ms too;
 *  - a request head is at most HEAD_MAX bytes, and nothing more is read
 *    while an answer is being written;
 *  - an accept error (EMFILE, ...) pauses the listener for ACCEPT_PAUSE_MS
 *    and is logged at most once per LOG_QUIET_MS, with the count since,
 *    as refusals at max_conns are.
 * Answers: 200 and the page for GET of the path (a query is ignored), 404
 * for another path, 405 for another method, 400 for what does not parse
 * (httphead.c), 431 for a head over HEAD_MAX.  A request with a body,
 * HTTP/1.0 without keep-alive, Connection: close, and every answer but
 * 200 and 404 close the connection once written.
 */
#include "httpd.h"
#include "addr.h"
#include "httphead.h"
#include "log.h"
#include "util.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#define HEAD_MAX 8192			/* longest request head */
#define ACCEPT_PAUSE_MS 100		/* after an accept error */
#define LOG_QUIET_MS 10000		/* between two lines of one kind */

/* A log line at most once per LOG_QUIET_MS, saying how many it skipped. */
struct quiet_log {
	int64_t logged_ms;
	unsigned long long skipped;
};

struct hconn {
	struct httpd *h;
	TAILQ_ENTRY(hconn) link;
	int fd;
	struct event *rev, *wev, *deadline;
	struct evbuffer *in, *out;
	unsigned reading:1, writing:1;
	unsigned answered:1;		/* an answer is queued or being written */
	unsigned closing:1;		/* close once it is written */
	unsigned eof:1;			/* the client sends no more */
};

struct httpd {
	struct event_base *base;
	struct httpd_cfg cfg;
	char *path, *content_type;	/* copies */
	struct evconnlistener *listener;
	struct event *resume_ev;	/* the pause after an accept error */
	TAILQ_HEAD(, hconn) conns;
	size_t nconns;
	unsigned long long refused;
	struct quiet_log refused_log, error_log;
};

static void process(struct hconn *c);

/* Whether to log now; *skipped: the lines not logged since the last. */
static int
quiet_log_due(struct quiet_log *q, unsigned long long *skipped)
{
	int64_t now = now_ms();

	if (q->logged_ms != 0 && now - q->logged_ms < LOG_QUIET_MS) {
		q->skipped++;
		return 0;
	}
	*skipped = q->skipped;
	q->logged_ms = now;
	q->skipped = 0;
	return 1;
}

static void
tv_ms(struct timeval *tv, long ms)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)(ms % 1000) * 1000;
}

/* --- one connection --------------------------------------------------- */

static void
conn_free(struct hconn *c)
{
	struct httpd *h = c->h;

	TAILQ_REMOVE(&h->conns, c, link);
	h->nconns--;
	if (c->rev != NULL)
		event_free(c->rev);
	if (c->wev != NULL)
		event_free(c->wev);
	if (c->deadline != NULL)
		event_free(c->deadline);
	if (c->in != NULL)
		evbuffer_free(c->in);
	if (c->out != NULL)
		evbuffer_free(c->out);
	if (close(c->fd) != 0)
		log_debug("close: %s", strerror(errno));
	free(c);
}

static void
reading(struct hconn *c, int on)
{
	if (on && !c->reading && !c->eof && event_add(c->rev, NULL) == 0)
		c->reading = 1;
	else if (!on && c->reading) {
		event_del(c->rev);
		c->reading = 0;
	}
}

/* The next request (and the answer's writing) must be done within the
 * timeout from now. */
static void
deadline_from_now(struct hconn *c)
{
	struct timeval tv;

	tv_ms(&tv, c->h->cfg.timeout_ms);
	if (event_add(c->deadline, &tv) != 0)
		fatalx("cannot arm a timer");
}

/*
 * Write what is queued.  Returns 1 when c was freed.  Once an answer is
 * out: close (closing), or give the next request a new deadline (only
 * then: bytes trickling in never move it).
 */
static int
flush(struct hconn *c)
{
	while (evbuffer_get_length(c->out) > 0) {
		int n = evbuffer_write(c->out, c->fd);

		if (n > 0)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
		    errno == EINTR)) {
			if (!c->writing && event_add(c->wev, NULL) == 0)
				c->writing = 1;
			return 0;
		}
		conn_free(c);		/* reset, broken pipe */
		return 1;
	}
	if (c->writing) {
		event_del(c->wev);
		c->writing = 0;
	}
	if (c->closing) {
		conn_free(c);
		return 1;
	}
	if (c->answered) {
		c->answered = 0;
		deadline_from_now(c);
	}
	return 0;
}

/* Queue one answer; body NULL: a short text of its own. */
static void
answer(struct hconn *c, int code, const char *reason, struct evbuffer *body,
    int keep_alive)
{
	char text[64];
	size_t len;
	int rc;

	if (body == NULL) {
		snprintf(text, sizeof text, "%d %s\n", code, reason);
		len = strlen(text);
	} else {
		len = evbuffer_get_length(body);
	}
	rc = evbuffer_add_printf(c->out, "HTTP/1.1 %d %s\r\n"
	    "Content-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n", code,
	    reason, body != NULL ? c->h->content_type :
	    "text/plain; charset=utf-8", len, code == 405 ?
	    "Allow: GET\r\n" : "", keep_alive ? "" : "Connection: close\r\n");
	if (rc < 0 || (body != NULL ? evbuffer_add_buffer(c->out, body) :
	    evbuffer_add(c->out, text, len)) != 0) {
		log_warn("/metrics: out of memory for an answer");
		evbuffer_drain(c->out, evbuffer_get_length(c->out));
		keep_alive = 0;
	}
	c->answered = 1;
	if (!keep_alive)
		c->closing = 1;
}

/* The request whose head is in buf[0..len): answer it. */
static void
serve(struct hconn *c, const char *buf, size_t len)
{
	struct httpd *h = c->h;
	struct http_head hd;
	struct evbuffer *body;

	if (http_head_parse(buf, len, &hd) != 0) {
		answer(c, 400, "Bad Request", NULL, 0);
		return;
	}
	if (!hd.get) {
		answer(c, 405, "Method Not Allowed", NULL, 0);
		return;
	}
	if (hd.pathlen != strlen(h->path) ||
	    memcmp(hd.path, h->path, hd.pathlen) != 0) {
		answer(c, 404, "Not Found", NULL, hd.keep_alive &&
		    !hd.has_body);
		return;
	}
	if ((body = evbuffer_new()) == NULL || h->cfg.page(h->cfg.arg,
	    body) != 0) {
		answer(c, 500, "Internal Server Error", NULL, 0);
	} else {
		answer(c, 200, "OK", body, hd.keep_alive && !hd.has_body);
	}
	if (body != NULL)
		evbuffer_free(body);
}

/*
 * The next request, if its head is all in: answered (queued), returns 1.
 * Returns 0 when more input is needed (or, at the end of input, never
 * comes: the connection then closes).
 */
static int
next_request(struct hconn *c)
{
	char head[HEAD_MAX];
	size_t have = evbuffer_get_length(c->in), len;
	ev_ssize_t got;

	if (have > HEAD_MAX)
		have = HEAD_MAX;
	if ((got = evbuffer_copyout(c->in, head, have)) < 0)
		got = 0;
	len = http_head_len(head, (size_t)got);
	if (len == 0 && (size_t)got >= HEAD_MAX) {
		answer(c, 431, "Request Header Fields Too Large", NULL, 0);
		return 1;
	}
	if (len == 0) {
		if (c->eof)
			c->closing = 1;		/* nothing more will come */
		return 0;
	}
	evbuffer_drain(c->in, len);
	serve(c, head, len);
	return 1;
}

/* Answer the requests that are in, one at a time: nothing more is read
 * or parsed while an answer is being written. */
static void
process(struct hconn *c)
{
	while (!c->closing && evbuffer_get_length(c->out) == 0 &&
	    next_request(c))
		if (flush(c))
			return;
	if (flush(c))
		return;
	reading(c, !c->closing && evbuffer_get_length(c->out) == 0 &&
	    evbuffer_get_length(c->in) <= HEAD_MAX);
}

static void
read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct hconn *c = arg;
	size_t have = evbuffer_get_length(c->in);
	int n;

	(void)what;
	if (have > HEAD_MAX) {
		reading(c, 0);		/* process answers 431 */
		process(c);
		return;
	}
	n = evbuffer_read(c->in, fd, (int)(HEAD_MAX + 1 - have));
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
	    errno != EINTR) {
		conn_free(c);
		return;
	}
	if (n == 0) {
		c->eof = 1;	/* answer what came, then close */
		reading(c, 0);
	}
	process(c);
}

static void
write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct hconn *c = arg;

	(void)fd;
	(void)what;
	if (!flush(c))
		process(c);	/* the next request, if one is in */
}

static void
deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	conn_free(arg);		/* too slow: a request, or idle */
}

static void
conn_new(struct httpd *h, evutil_socket_t fd)
{
	struct hconn *c = calloc(1, sizeof *c);

	if (c == NULL) {
		close(fd);
		return;
	}
	c->h = h;
	c->fd = fd;
	TAILQ_INSERT_TAIL(&h->conns, c, link);
	h->nconns++;
	if (evutil_make_socket_nonblocking(fd) != 0 ||
	    (c->rev = event_new(h->base, fd, EV_READ | EV_PERSIST, read_cb,
	    c)) == NULL ||
	    (c->wev = event_new(h->base, fd, EV_WRITE | EV_PERSIST, write_cb,
	    c)) == NULL ||
	    (c->deadline = evtimer_new(h->base, deadline_cb, c)) == NULL ||
	    (c->in = evbuffer_new()) == NULL ||
	    (c->out = evbuffer_new()) == NULL) {
		log_warn("/metrics: cannot set up a connection: out of memory");
		conn_free(c);
		return;
	}
	deadline_from_now(c);
	reading(c, 1);
}

/* --- the listener ------------------------------------------------------ */

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct httpd *h = arg;
	unsigned long long skipped;

	(void)l;
	(void)sa;
	(void)salen;
	if ((long)h->nconns < h->cfg.max_conns) {
		conn_new(h, fd);
		return;
	}
	/* Accepted and closed at once: the descriptor comes back, and the
	 * kernel's queue does not fill with connections nobody serves. */
	if (close(fd) != 0)
		log_debug("close: %s", strerror(errno));
	h->refused++;
	if (quiet_log_due(&h->refused_log, &skipped))
		log_warn("/metrics: metrics_max_connections (%ld) reached: "
		    "closing new connections at once (%llu so far; %llu since "
		    "the last such line)", h->cfg.max_conns, h->refused,
		    skipped);
}

static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct httpd *h = arg;

	(void)fd;
	(void)what;
	evconnlistener_enable(h->listener);
}

static void
accept_error_cb(struct evconnlistener *l, void *arg)
{
	struct httpd *h = arg;
	int err = EVUTIL_SOCKET_ERROR();
	unsigned long long skipped;
	struct timeval tv;

	/* EMFILE and friends: pause a moment rather than spin */
	evconnlistener_disable(l);
	tv_ms(&tv, ACCEPT_PAUSE_MS);
	if (event_add(h->resume_ev, &tv) != 0)
		evconnlistener_enable(l);
	if (quiet_log_due(&h->error_log, &skipped))
		log_warn("/metrics: accept: %s (accepting again in %d ms; "
		    "%llu such errors not logged since the last line)",
		    evutil_socket_error_to_string(err), ACCEPT_PAUSE_MS,
		    skipped);
}

struct httpd *
httpd_new(struct event_base *base, const struct httpd_cfg *cfg, char *err,
    size_t errlen)
{
	struct httpd *h;
	struct sockaddr_storage ss;
	socklen_t sslen;
	struct addr a;
	char msg[256];

	if (addr_parse_listen(cfg->bind, &a, msg, sizeof msg) != 0) {
		snprintf(err, errlen, "metrics_bind: %s", msg);
		return NULL;
	}
	if (addr_sockaddr(&a, (int)cfg->port, &ss, &sslen) != 0) {
		snprintf(err, errlen, "metrics_bind: no socket address for "
		    "'%s'", cfg->bind);
		return NULL;
	}
	h = xcalloc(1, sizeof *h);
	h->base = base;
	h->cfg = *cfg;
	h->path = xstrndup(cfg->path, strlen(cfg->path));
	h->content_type = xstrndup(cfg->content_type,
	    strlen(cfg->content_type));
	TAILQ_INIT(&h->conns);
	if ((h->resume_ev = evtimer_new(base, resume_cb, h)) == NULL)
		fatalx("cannot create a timer");
	h->listener = evconnlistener_new_bind(base, accept_cb, h,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
	    128, (struct sockaddr *)&ss, (int)sslen);
	if (h->listener == NULL) {
		snprintf(err, errlen, "cannot listen on %s:%ld: %s", cfg->bind,
		    cfg->port, strerror(errno));
		httpd_free(h);
		return NULL;
	}
	evconnlistener_set_error_cb(h->listener, accept_error_cb);
	return h;
}

void
httpd_free(struct httpd *h)
{
	struct hconn *c;

	if (h == NULL)
		return;
	while ((c = TAILQ_FIRST(&h->conns)) != NULL)
		conn_free(c);
	if (h->listener != NULL)
		evconnlistener_free(h->listener);
	event_free(h->resume_ev);
	free(h->path);
	free(h->content_type);
	free(h);
}

size_t
httpd_conns(const struct httpd *h)
{
	return h->nconns;
}

unsigned long long
httpd_refused(const struct httpd *h)
{
	return h->refused;
}
