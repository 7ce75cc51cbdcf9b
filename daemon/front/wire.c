/*
 * wire.c - a session's lines out: a reply or an EVENT line into its
 * stream's output, an error in the protocol's form, and what happens when
 * a reply cannot be queued (session_int.h).
 */
#include "locks.h"
#include "log.h"
#include "session_int.h"
#include "stream.h"
#include "util.h"

#include <event2/buffer.h>

#include <stdarg.h>
#include <stdio.h>

/*
 * A reply could not be queued (out of memory).  One reply per request is
 * the protocol's promise, so the session cannot go on: the stream sends
 * nothing more and is closed on a later loop turn (this may run inside a
 * locks_* callback), without what is queued (it may end in half a line).
 */
void
broken(struct session *s)
{
	if (s->broken)
		return;
	log_warn("client %s: out of memory for a reply; closing", s->id);
	s->broken = 1;
	stream_broken(s->st);
}

/* Most lines fit this: formatted on the stack and added to the output
 * in one piece with their CR LF (one evbuffer_add, not two). */
#define LINE_STACK 256

void
send_line(struct session *s, const char *fmt, ...)
{
	struct evbuffer *out = s->out;
	char line[LINE_STACK];
	va_list ap;
	int n, rc;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof line - 2, fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof line - 2) {
		line[n] = '\r';
		line[n + 1] = '\n';
		if (evbuffer_add(out, line, (size_t)n + 2) != 0)
			broken(s);
		return;
	}
	va_start(ap, fmt);		/* a long line: formatted in place */
	rc = evbuffer_add_vprintf(out, fmt, ap);
	va_end(ap);
	if (rc < 0 || evbuffer_add(out, "\r\n", 2) != 0)
		broken(s);
}

/*
 * "OK <n>": the reply of every grant (its token) and every release, so
 * the one on each request's path; written without a format, the same
 * bytes as "OK %lld".
 */
void
send_ok_num(struct session *s, long long n)
{
	char line[3 + FMT_LL_MAX + 2] = "OK ";
	size_t len = 3 + (size_t)fmt_ll(line + 3, n);

	line[len++] = '\r';
	line[len++] = '\n';
	if (evbuffer_add(s->out, line, len) != 0)
		broken(s);
}

void
send_err(struct session *s, enum proto_err code, const char *why)
{
	send_line(s, "ERR %s %s", proto_err_name(code), why);
}

/* --- replies from the lock table -------------------------------------- */

enum proto_err
status_err(enum lk_status st)
{
	switch (st) {
	case LK_NOTHELD: return PERR_NOTHELD;
	case LK_LOST: return PERR_LOST;
	case LK_UNAVAILABLE: return PERR_UNAVAILABLE;
	case LK_LIMIT: return PERR_LIMIT;
	case LK_KIND: return PERR_BADARG;
	case LK_UPGRADE: return PERR_BADARG;
	case LK_BADARG: return PERR_BADARG;
	default: return PERR_NONE;
	}
}

/* The request in progress is answered: take the next one, later. */
void
answered(struct session *s)
{
	s->busy = 0;
	if (!s->dispatching)
		stream_more(s->st);
}

static void
add_key(void *arg, const char *key, size_t keylen)
{
	struct session *s = arg;

	if (evbuffer_add(s->out, " ", 1) != 0 ||
	    evbuffer_add(s->out, key, keylen) != 0)
		broken(s);
}

/* The keys the session holds: HELD's reply, and RESUME's. */
void
send_held(struct session *s)
{
	if (evbuffer_add_printf(s->out, "OK %zu",
	    locks_held(s->cl, NULL, NULL)) < 0) {
		broken(s);
		return;
	}
	locks_held(s->cl, add_key, s);
	if (!s->broken && evbuffer_add(s->out, "\r\n", 2) != 0)
		broken(s);
}
