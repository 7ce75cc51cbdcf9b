/*
 * session.c - one client connection: lines in, one reply per line out.
 *
 * A session runs one request at a time: while a request waits (for a key or
 * for Redis) later lines stay in the input buffer, which is what keeps
 * replies in request order and makes a waiting ACQUIRE hold back the
 * session's later requests.  Input is bounded by IN_HIGH (reading stops
 * past it); output by OUT_HIGH: past it the session stops taking requests
 * and reading until the client reads (a client that pipelines without
 * reading costs bounded memory).  Replies from the lock table never run
 * the next request directly: they schedule it (process_ev), so nothing
 * re-enters locks_*.
 *
 * I/O is done by hand on the socket rather than with a bufferevent: one
 * read() per readable event and one writev() per batch of replies, with
 * the write event registered only while output is stuck.  A bufferevent
 * added an ioctl(FIONREAD) and two epoll_ctl calls per request.
 *
 * End of input (the client half-closed, e.g. `nc -N`) is not the end of
 * the session: every line already received is answered, in order (a last
 * line without LF counts as a line), then the session closes after
 * flushing, which releases its locks.  The lock table is told at once
 * (locks_client_eof), so a waiting ACQUIRE is answered BUSY instead of
 * holding a queue place for a client that can no longer give up (issue 9,
 * D15).  A read or write error (reset, broken pipe) still ends the session
 * at once.
 *
 * A TLS session (tls_port; its handshake was done by handshake.c) runs
 * the same code over the same buffers, so every limit, the backpressure
 * and the EOF rules are the plain ones.  Only the two calls that move
 * bytes differ, chosen by s->ssl: SSL_read for read() (one per readable
 * event too; decrypted bytes left inside the SSL are taken on the next
 * loop turn, since the socket will not say readable for them) and
 * SSL_write of up to one record for evbuffer_write().  A close_notify
 * ends input as a FIN ends a plain session's; a TCP FIN without one ends
 * the session as a reset does, and an unterminated last line is never
 * run: someone on the path may have cut the stream at a record boundary
 * (issue 15).  The plain path is unchanged: one pointer test per read and
 * per write.
 */
#include "acl.h"
#include "broker.h"
#include "clientid.h"
#include "grace.h"
#include "keytab.h"
#include "locks.h"
#include "log.h"
#include "proto.h"
#include "stats.h"
#include "tokenhash.h"
#include "tls.h"
#include "util.h"

#include <event2/buffer.h>
#include <event2/event.h>

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define OUT_HIGH (64 * 1024)		/* stop taking requests past this */
#define READ_CHUNK 16384		/* bytes per read() */
#define CLOSE_GRACE_MS 5000		/* flush time before a forced close */
#define AUTH_LOG_MS 10000		/* ms between "wrong AUTH" log lines */
#define TLS_WRITE_MAX 16384		/* one TLS record's worth per write */

struct session {
	struct broker *b;
	int fd;
	struct event *rev, *wev;	/* readable / writable */
	struct evbuffer *in, *out;
	size_t in_high;			/* stop reading past this */
	int64_t close_at_ms;		/* closing: free by then at the latest */
	struct lclient *cl;
	struct grace *grace;		/* HELLO ... GRACE, or RESUME */
	struct event *process_ev;	/* run the next request, later */
	struct ssl_st *ssl;		/* NULL for a plain session */
	TAILQ_ENTRY(session) link;
	struct keytab_entry by_id;	/* in b->by_id while indexed */
	const struct acl_app *app;	/* NULL: no app (every key) */
	struct appstat *appstat;	/* app's counters, with app */
	char id[CLIENTID_LEN + 1];
	enum proto_cmd cmd;		/* the request in progress */
	unsigned busy:1;		/* a request awaits its reply */
	unsigned dispatching:1;		/* inside process_input() */
	unsigned closing:1;		/* close once output is flushed */
	unsigned events:1;		/* EVENTS ON */
	unsigned authed:1;		/* AUTH passed (or none needed) */
	unsigned reading:1;		/* rev is added */
	unsigned out_paused:1;		/* stopped for output past OUT_HIGH */
	unsigned writing:1;		/* wev is added */
	unsigned eof:1;			/* the client sends no more */
	unsigned broken:1;		/* reply lost: free, send no more */
	unsigned quit:1;		/* ended by QUIT */
	unsigned used:1;		/* took or asked for locks: no RESUME */
	unsigned killed:1;		/* resumed by another connection */
	unsigned await_record:1;	/* a grant's OK waits for its record */
	unsigned stashed:1;		/* and here it is */
	unsigned indexed:1;		/* by_id is in b->by_id */
	unsigned tls_failed:1;		/* no close_notify: SSL unusable */
	unsigned tls_read_wants_write:1;	/* SSL_read waits to write: not
					   reading until write_cb */
	long long stash_token;
	/*
	 * The subject CN of the client's certificate, when it sent one that
	 * verified against tls_ca_cert_file (tls_auth_clients yes or
	 * optional); "" otherwise.  Printable ASCII, no blanks.
	 */
	char peer_cn[TLS_CN_MAX + 1];
};

static void process_input(struct session *s);
static void cmd_held(struct session *s);
static int flush(struct session *s);
static void session_release(struct session *s);

static void
send_line(struct session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Watch the socket for input, or stop.  While SSL_read waits to write
 * (tls_read_wants_write) input stays off whatever the caller asks: a
 * readable socket would only run SSL_read into the same wait again and
 * again; write_cb reads once the socket takes the write.
 */
static void
reading(struct session *s, int on)
{
	if (on && !s->reading && !s->tls_read_wants_write &&
	    event_add(s->rev, NULL) == 0) {
		s->reading = 1;
		/* decrypted bytes waiting inside the SSL: the socket will
		 * not wake us for them (part of a record will: its rest
		 * comes through the socket) */
		if (s->ssl != NULL && tls_pending(s->ssl))
			event_active(s->rev, EV_READ, 0);
	} else if (!on && s->reading) {
		event_del(s->rev);
		s->reading = 0;
	}
}

/*
 * A reply could not be queued (out of memory).  One reply per request is
 * the protocol's promise, so the session cannot go on: stop reading and
 * free it on a later loop turn (this may run inside a locks_* callback),
 * without sending what is queued (it may end in half a line).
 */
static void
broken(struct session *s)
{
	if (s->broken)
		return;
	log_warn("client %s: out of memory for a reply; closing", s->id);
	s->broken = 1;
	s->closing = 1;
	reading(s, 0);
	event_active(s->process_ev, EV_TIMEOUT, 0);
}

static void
send_line(struct session *s, const char *fmt, ...)
{
	struct evbuffer *out = s->out;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = evbuffer_add_vprintf(out, fmt, ap);
	va_end(ap);
	if (rc < 0 || evbuffer_add(out, "\r\n", 2) != 0)
		broken(s);
}

static void
send_err(struct session *s, enum proto_err code, const char *why)
{
	send_line(s, "ERR %s %s", proto_err_name(code), why);
}

/* Stop reading; free the session once its output is flushed. */
static void
close_after_flush(struct session *s)
{
	struct timeval grace = { CLOSE_GRACE_MS / 1000, 0 };

	s->closing = 1;
	s->close_at_ms = now_ms() + CLOSE_GRACE_MS;
	reading(s, 0);
	/* process_cb runs at the grace's end, or when output drained */
	event_add(s->process_ev, &grace);
}

/*
 * A half-closed session stuck on output it never reads (paused past
 * OUT_HIGH, with lines still to answer) would keep its locks for ever:
 * it gets the same grace as a closing one, counted from the EOF.  Not
 * from its last progress: a kernel takes more into a socket that is never
 * read every few seconds, which would stretch the grace without end.
 */
static void
eof_watch(struct session *s)
{
	int64_t left = s->close_at_ms - now_ms();
	struct timeval tv;

	if (!s->eof || s->closing || !s->out_paused)
		return;
	if (left < 0)
		left = 0;
	tv.tv_sec = (time_t)(left / 1000);
	tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
	event_add(s->process_ev, &tv);
}

/* --- replies from the lock table -------------------------------------- */

static enum proto_err
status_err(enum lk_status st)
{
	switch (st) {
	case LK_NOTHELD: return PERR_NOTHELD;
	case LK_LOST: return PERR_LOST;
	case LK_UNAVAILABLE: return PERR_UNAVAILABLE;
	case LK_LIMIT: return PERR_LIMIT;
	case LK_KIND: return PERR_BADARG;
	case LK_UPGRADE: return PERR_BADARG;
	default: return PERR_NONE;
	}
}

/* --- sessions by client-id, and what OWNER shows of them ------------- */

static void
index_del(struct session *s)
{
	if (s->indexed) {
		keytab_remove(s->b->by_id, &s->by_id);
		s->indexed = 0;
	}
}

/* Index s under its (current) client-id.  Two local sessions may carry
 * one id for a moment (a RESUME before the replaced one is freed): the
 * newer one is the session's owner, so it takes the entry. */
static void
index_add(struct session *s)
{
	struct keytab_entry *e;

	if (s->b->by_id == NULL)
		return;
	index_del(s);
	if ((e = keytab_find(s->b->by_id, s->id, CLIENTID_LEN)) != NULL) {
		struct session *o = (struct session *)(void *)((char *)e -
		    offsetof(struct session, by_id));

		index_del(o);
	}
	s->by_id.key = s->id;
	s->by_id.keylen = CLIENTID_LEN;
	keytab_insert(s->b->by_id, &s->by_id);
	s->indexed = 1;
}

/*
 * May s see the client-id of a holder whose owner is owner[0..len)?
 * Always without an app (no acl_file, as in version 1).  With one, only
 * when the broker can tell the holder is of the same app: s itself, or
 * another session of this broker that authenticated as an app of the
 * same name.  A holder on another broker, a detached grace session, or a
 * session of another app or of none is not shown (issue 15).
 */
static int
owner_visible(const struct session *s, const char *owner, size_t len)
{
	const struct keytab_entry *e;
	const struct session *o;

	if (s->app == NULL)
		return 1;
	if (len == CLIENTID_LEN && memcmp(owner, s->id, len) == 0)
		return 1;
	if (s->b->by_id == NULL ||
	    (e = keytab_find(s->b->by_id, owner, len)) == NULL)
		return 0;
	o = (const struct session *)(const void *)((const char *)e -
	    offsetof(struct session, by_id));
	return o->app != NULL && strcmp(acl_app_name(o->app),
	    acl_app_name(s->app)) == 0;
}

/*
 * OWNER's answer.  An exclusive lock: OK <client-id> <ttl-ms-left> <token>
 * (v1).  1.1, a shared lock: OK SHARED <holders> then <client-id>
 * <ttl-ms-left> <token> per holder shown; a semaphore: OK SEMAPHORE
 * <holders> <limit> then the same.  At most LK_OWNER_SHOWN holders are
 * shown, soonest to expire first: the line stays bounded.
 */
static void
send_owner(struct session *s, const struct lk_result *r)
{
	/* a holder: client-id (at most OWNER_MAX, "?" for foreign bytes)
	 * and two numbers */
	char line[64 + LK_OWNER_SHOWN * (OWNER_MAX + 48)];
	struct lk_holder shown[LK_OWNER_SHOWN];
	size_t len, nshown = r->nholders < LK_OWNER_SHOWN ? r->nholders :
	    LK_OWNER_SHOWN;
	int n;

	if (r->nholders == 0) {
		send_line(s, "OK -");
		return;
	}
	/* "?" stands for a client-id not shown, as for foreign values */
	for (size_t i = 0; i < nshown; i++) {
		shown[i] = r->holders[i];
		if (!owner_visible(s, shown[i].owner, shown[i].ownerlen)) {
			shown[i].owner = "?";
			shown[i].ownerlen = 1;
		}
	}
	if (r->kind == LK_EXCLUSIVE) {
		send_line(s, "OK %.*s %lld %lld", (int)shown[0].ownerlen,
		    shown[0].owner, shown[0].pttl, shown[0].token);
		return;
	}
	if (r->kind == LK_SHARED)
		n = snprintf(line, sizeof line, "OK SHARED %zu", r->total);
	else
		n = snprintf(line, sizeof line, "OK SEMAPHORE %zu %ld",
		    r->total, r->kind);
	len = n > 0 ? (size_t)n : 0;
	for (size_t i = 0; i < nshown && len < sizeof line; i++) {
		const struct lk_holder *h = &shown[i];

		n = snprintf(line + len, sizeof line - len, " %.*s %lld %lld",
		    (int)(h->ownerlen > OWNER_MAX ? OWNER_MAX : h->ownerlen),
		    h->owner, h->pttl, h->token);
		if (n < 0 || (size_t)n >= sizeof line - len)
			break;		/* cannot happen: sized above */
		len += (size_t)n;
	}
	send_line(s, "%.*s", (int)len, line);
}

/* ERR BADARG for a key of another kind than asked (LK_KIND, n) or a
 * shared hold asked for exclusive (LK_UPGRADE). */
static void
send_kind_err(struct session *s, const struct lk_result *r)
{
	if (r->status == LK_UPGRADE)
		send_err(s, PERR_BADARG, "this session holds the key SHARED: "
		    "RELEASE it first (no upgrade to exclusive)");
	else if (r->n > 0)
		send_line(s, "ERR BADARG the key is a semaphore with LIMIT %lld",
		    r->n);
	else
		send_err(s, PERR_BADARG, "the key is a lock, not a semaphore");
}

static void
on_reply(void *arg, const struct lk_result *r)
{
	struct session *s = arg;

	if (s->await_record && r->status == LK_OK) {
		s->stashed = 1;		/* session_grace_recorded sends it */
		s->stash_token = r->n;
		return;
	}
	if (r->status == LK_BUSY)
		send_line(s, "BUSY");
	else if (r->status == LK_KIND || r->status == LK_UPGRADE)
		send_kind_err(s, r);
	else if (r->status != LK_OK)
		send_err(s, status_err(r->status), r->why ? r->why : "");
	else if (s->cmd == CMD_OWNER)
		send_owner(s, r);
	else
		send_line(s, "OK %lld", r->n);
	s->busy = 0;
	if (!s->dispatching)
		event_active(s->process_ev, EV_TIMEOUT, 0);
}

static void
on_lost(void *arg, const char *key, size_t keylen, long long token)
{
	struct session *s = arg;

	if (s->events) {
		send_line(s, "EVENT LOST %.*s %lld", (int)keylen, key, token);
		if (!s->dispatching)
			event_active(s->process_ev, EV_TIMEOUT, 0);
	}
}

static void
on_changed(void *arg, const char *key, size_t keylen, unsigned holds,
    long ttl_ms, long kind, int fresh)
{
	struct session *s = arg;

	if (s->grace != NULL && grace_changed(s->grace, key, keylen, holds,
	    ttl_ms, kind, fresh))
		s->await_record = 1;
}

static int
on_doubt(void *arg)
{
	struct session *s = arg;

	return s->grace != NULL && grace_doubt(s->grace);
}

static const struct lk_client_ops client_ops = { on_reply, on_lost,
    on_changed, on_doubt };

/* --- grace sessions (grace.c) ---------------------------------------- */

/* The request in progress is answered: take the next one, later. */
static void
answered(struct session *s)
{
	s->busy = 0;
	if (!s->dispatching)
		event_active(s->process_ev, EV_TIMEOUT, 0);
}

void
session_grace_answer(struct session *s, enum proto_err err, const char *text)
{
	if (err == PERR_NONE)
		send_line(s, "%s", text);
	else
		send_err(s, err, text);
	if (s->cmd == CMD_RESUME && err != PERR_NONE)
		s->used = 0;		/* it holds nothing: it may try again */
	answered(s);
}

void
session_grace_drop(struct session *s)
{
	s->grace = NULL;
	session_grace_recorded(s);	/* an OK held back for it goes now */
}

void
session_grace_recorded(struct session *s)
{
	if (!s->await_record)
		return;
	s->await_record = 0;
	if (s->stashed) {
		s->stashed = 0;
		send_line(s, "OK %lld", s->stash_token);
		answered(s);
	}
}

void
session_grace_resumed(struct session *s, struct grace *g, struct lclient *cl,
    const char *cid)
{
	locks_client_free(s->cl);	/* a fresh session's: holds nothing */
	s->cl = cl;
	s->grace = g;
	locks_client_handover(cl, &client_ops, s, 0);
	log_debug("client %s resumed session %s", s->id, cid);
	index_del(s);			/* its key is the id: re-file it */
	memcpy(s->id, cid, CLIENTID_LEN);
	index_add(s);
	cmd_held(s);
	answered(s);
}

void
session_grace_kill(struct session *s)
{
	s->killed = 1;
	session_free(s);
}

static void
cmd_hello(struct session *s, const struct proto_req *req)
{
	long max = s->b->cfg->max_grace_ms, ms = req->grace_ms;

	if (req->word)
		log_debug("client %s is '%.*s'", s->id, (int)req->wordlen,
		    req->word);
	if (req->has_grace && ms > 0 && max == 0) {
		send_err(s, PERR_BADARG, "GRACE is off on this broker "
		    "(max_grace_ms 0)");
		return;
	}
	if (req->has_grace && ms == 0 && s->grace != NULL) {
		send_err(s, PERR_BADARG, "a grace session keeps a grace until "
		    "QUIT; give a small one instead");
		return;
	}
	if (!req->has_grace || ms == 0) {
		send_line(s, "OK %s lockbroker/%s", s->id, LOCKBROKER_VERSION);
		return;
	}
	s->used = 1;
	s->busy = 1;
	grace_hello(s->b, s, &s->grace, s->cl, s->id, ms > max ? max : ms,
	    s->app != NULL ? acl_app_name(s->app) : "");
}

static void
cmd_resume(struct session *s, const struct proto_req *req)
{
	if (s->used || s->grace != NULL) {
		send_err(s, PERR_BADARG, "RESUME must come before any lock "
		    "request or GRACE on a connection");
		return;
	}
	if (s->b->cfg->max_grace_ms == 0) {
		send_err(s, PERR_BADARG, "GRACE is off on this broker "
		    "(max_grace_ms 0)");
		return;
	}
	s->used = 1;
	s->busy = 1;
	s->grace = grace_resume(s->b, s, req->word, req->wordlen, req->word2,
	    req->word2len, s->app != NULL ? acl_app_name(s->app) : "");
}

/* --- requests -------------------------------------------------------- */

static void
add_key(void *arg, const char *key, size_t keylen)
{
	struct session *s = arg;

	if (evbuffer_add(s->out, " ", 1) != 0 ||
	    evbuffer_add(s->out, key, keylen) != 0)
		broken(s);
}

static void
cmd_held(struct session *s)
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

/* Compare in time independent of where the first difference is. */
static int
token_equal(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b);
	unsigned char diff = alen != blen;

	for (size_t i = 0; i < alen; i++)
		diff |= (unsigned char)(a[i] ^ b[blen ? i % blen : 0]);
	return diff == 0;
}

/*
 * Count every wrong token, but log at most one line per AUTH_LOG_MS: an
 * unauthenticated client must not be able to flood the log (issue 9, D12).
 * The line says how many went unlogged since the previous one.
 */
static void
auth_failed(struct session *s)
{
	struct broker *b = s->b;
	int64_t now = now_ms();

	b->stats.auth_failures++;
	if (b->authfail_logged_ms != 0 &&
	    now - b->authfail_logged_ms < AUTH_LOG_MS) {
		b->authfail_unlogged++;
		return;
	}
	if (b->authfail_unlogged > 0)
		log_info("client %s: wrong AUTH token (and %llu more not "
		    "logged since the last such line)", s->id,
		    (unsigned long long)b->authfail_unlogged);
	else
		log_info("client %s: wrong AUTH token", s->id);
	b->authfail_logged_ms = now;
	b->authfail_unlogged = 0;
}

/*
 * Make s a session of app (from acl_app_named or acl_app_by_hash on
 * b->acl): it counts as authenticated, may use only the app's keys, and
 * keeps this app's patterns until it ends, whatever a reload does.  AUTH
 * calls it, and session_new for a verified client certificate whose CN
 * names an app.  Returns 0, or -1 (nothing changed) when s is already a
 * session of another app: a session never changes app.
 */
static int
session_set_app(struct session *s, const struct acl_app *app)
{
	struct appstat *st;

	if (s->app != NULL &&
	    strcmp(acl_app_name(s->app), acl_app_name(app)) != 0)
		return -1;
	st = appstat_get(s->b, acl_app_name(app));
	acl_app_hold(app);
	if (s->app != NULL) {
		/* the same app again (a later AUTH): the current list's
		 * patterns from now on; same name, same counters */
		acl_app_release(s->app);
		s->appstat->sessions--;
	}
	s->app = app;
	s->appstat = st;
	st->sessions++;
	s->authed = 1;
	return 0;
}

/* ERR DENIED, counted for the app and in total (logged at debug only:
 * never a log line per request). */
static void
send_denied(struct session *s, const char *key, size_t keylen)
{
	s->b->stats.denials++;
	s->appstat->denials++;
	log_debug("client %s (app %s): denied key %.*s", s->id,
	    acl_app_name(s->app), (int)keylen, key);
	send_line(s, "ERR DENIED app %s may not use this key",
	    acl_app_name(s->app));
}

/*
 * A request naming a key outside the session's app's patterns is answered
 * ERR DENIED before it reaches the lock table (an ACQUIRE never waits,
 * never queues, never reaches Redis).  A key the session holds may still
 * be released and renewed: after a RESUME by a session of another app it
 * may hold keys outside its patterns, and it can always give back what it
 * holds.  Returns 1 when denied (answered).
 */
static int
key_denied(struct session *s, const struct proto_req *req)
{
	if (s->app == NULL || acl_app_allows(s->app, req->key, req->keylen))
		return 0;
	if ((req->cmd == CMD_RELEASE || req->cmd == CMD_RENEW) &&
	    locks_holds_key(s->cl, req->key, req->keylen))
		return 0;
	send_denied(s, req->key, req->keylen);
	return 1;
}

/* AUTH with an access list: the token's SHA-256 names the app. */
static void
auth_app(struct session *s, const struct proto_req *req)
{
	unsigned char hash[ACL_HASH_LEN];
	const struct acl_app *app;

	if (tokenhash_sha256(req->word, req->wordlen, hash) != 0) {
		log_warn("client %s: cannot hash an AUTH token (libcrypto "
		    "failed)", s->id);
		send_err(s, PERR_NOAUTH, "the broker cannot check tokens now; "
		    "try again");
		return;
	}
	if ((app = acl_app_by_hash(s->b->acl, hash)) == NULL) {
		auth_failed(s);
		send_err(s, PERR_NOAUTH, "wrong token");
	} else if (session_set_app(s, app) != 0) {
		send_line(s, "ERR BADARG this session is app %s: AUTH cannot "
		    "change its app (open another connection)",
		    acl_app_name(s->app));
	} else {
		send_line(s, "OK");
	}
}

static void
cmd_auth(struct session *s, const struct proto_req *req)
{
	const char *want = s->b->cfg->auth_token;

	if (s->b->acl != NULL) {
		auth_app(s, req);
	} else if (want[0] == '\0') {
		send_err(s, PERR_BADARG, "no auth_token is configured");
	} else if (token_equal(req->word, req->wordlen, want)) {
		s->authed = 1;
		send_line(s, "OK");
	} else {
		auth_failed(s);
		send_err(s, PERR_NOAUTH, "wrong token");
	}
}

/*
 * May this line be parsed before AUTH?  Only AUTH, PING and QUIT may (and
 * blank lines, which get no reply): anything else gets ERR NOAUTH before
 * the parser looks at its arguments, so an unauthenticated client learns
 * nothing about limits such as max_key_len (issue 9, D11).  The verb is
 * the first word, delimited as proto_parse delimits words.
 */
static int
allowed_before_auth(const char *line, size_t len)
{
	static const enum proto_cmd open_cmds[] = { CMD_AUTH, CMD_PING,
	    CMD_QUIT };
	size_t i = 0, v;

	while (i < len && (line[i] == ' ' || line[i] == '\t'))
		i++;
	for (v = i; v < len && line[v] != ' ' && line[v] != '\t'; v++)
		;
	if (v == i)
		return 1;		/* blank: no reply either way */
	for (size_t c = 0; c < sizeof open_cmds / sizeof open_cmds[0]; c++) {
		const char *name = proto_cmd_name(open_cmds[c]);

		if (strlen(name) == v - i &&
		    strncasecmp(line + i, name, v - i) == 0)
			return 1;
	}
	return 0;
}

/* Run one parsed request.  Sets busy when the reply comes later. */
static void
dispatch(struct session *s, const struct proto_req *req)
{
	s->cmd = req->cmd;
	switch (req->cmd) {
	case CMD_HELLO:
		cmd_hello(s, req);
		return;
	case CMD_RESUME:
		cmd_resume(s, req);
		return;
	case CMD_PING:
		send_line(s, "OK PONG");
		return;
	case CMD_QUIT:
		s->quit = 1;
		send_line(s, "OK");
		close_after_flush(s);
		return;
	case CMD_HELD:
		cmd_held(s);
		return;
	case CMD_STATS:
		if (stats_line(s->b, s->out) != 0)
			broken(s);
		return;
	case CMD_EVENTS:
		s->events = (unsigned)req->on;
		send_line(s, "OK");
		return;
	case CMD_AUTH:
		cmd_auth(s, req);
		return;
	case CMD_ACQUIRE:
		if (key_denied(s, req))
			return;
		s->used = 1;
		s->busy = 1;
		locks_acquire(s->cl, req->key, req->keylen,
		    req->shared ? LK_SHARED : req->limit > 0 ? req->limit :
		    LK_EXCLUSIVE, req->has_wait ? req->wait_ms : -1,
		    req->has_ttl ? req->ttl_ms : 0);
		return;
	case CMD_RELEASE:
		if (key_denied(s, req))
			return;
		s->busy = 1;
		locks_release(s->cl, req->key, req->keylen,
		    req->has_linger ? req->linger_ms : 0);
		return;
	case CMD_RENEW:
		if (key_denied(s, req))
			return;
		s->busy = 1;
		locks_renew(s->cl, req->key, req->keylen,
		    req->has_ttl ? req->ttl_ms : 0);
		return;
	case CMD_OWNER:
		if (key_denied(s, req))
			return;
		s->busy = 1;
		locks_owner(s->cl, req->key, req->keylen);
		return;
	case CMD__COUNT:
		break;
	}
	send_err(s, PERR_BADCMD, "unknown command");
}

/*
 * Take the next complete line out of the input, into b->linebuf.
 * Returns its length (CR/LF stripped), -1 when no full line is there yet,
 * -2 when the line is over max_line (the session must be closed).  After
 * EOF, bytes without an LF are the last line: a client that ends its
 * input without a final LF still gets its answer.  A TLS session only
 * gets here after a close_notify (tls_in).
 */
static long
next_line(struct session *s)
{
	struct evbuffer *in = s->in;
	size_t max = (size_t)s->b->cfg->max_line, have, len;
	struct evbuffer_ptr eol;
	size_t eol_len;

	eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
	if (eol.pos < 0) {
		struct evbuffer_ptr p;
		char last;

		have = evbuffer_get_length(in);
		if (have == 0 || (have <= max && !s->eof))
			return -1;
		if (s->eof && have <= max + 1) {
			if (evbuffer_remove(in, s->b->linebuf, have) !=
			    (int)have)
				return -2;
			len = have;
			if (s->b->linebuf[len - 1] == '\r')
				len--;
			return len > max ? -2 : (long)len;
		}
		/* max bytes and a CR may still be a valid line */
		if (have == max + 1 &&
		    evbuffer_ptr_set(in, &p, max, EVBUFFER_PTR_SET) == 0 &&
		    evbuffer_copyout_from(in, &p, &last, 1) == 1 && last == '\r')
			return -1;
		return -2;
	}
	len = (size_t)eol.pos;
	if (len > max + 1) {
		return -2;
	}
	if (evbuffer_remove(in, s->b->linebuf, len + 1) != (int)(len + 1))
		return -2;
	if (len > 0 && s->b->linebuf[len - 1] == '\r')
		len--;
	if (len > max)
		return -2;
	return (long)len;
}

static void
process_input(struct session *s)
{
	struct broker *b = s->b;
	struct proto_limits lim = { (size_t)b->cfg->max_key_len,
	    (size_t)b->held_key_len };
	struct evbuffer *out = s->out;

	s->dispatching = 1;
	while (!s->busy && !s->closing) {
		struct proto_req req;
		enum proto_err err;
		const char *why;
		int empty;
		long len;

		if (evbuffer_get_length(out) > OUT_HIGH) {
			/* The client is not reading: neither do we, until
			 * flush() sees the output drained. */
			b->stats.paused++;
			s->out_paused = 1;
			reading(s, 0);
			break;
		}
		if ((len = next_line(s)) == -1)
			break;
		if (len == -2) {
			b->stats.toolong++;
			send_err(s, PERR_TOOLONG, "line longer than max_line "
			    "bytes; closing");
			close_after_flush(s);
			break;
		}
		if (!s->authed &&
		    !allowed_before_auth(b->linebuf, (size_t)len)) {
			send_err(s, PERR_NOAUTH, "send AUTH <token> first");
			continue;
		}
		err = proto_parse(b->linebuf, (size_t)len, &lim, &req, &empty,
		    &why);
		if (err != PERR_NONE)
			send_err(s, err, why);
		else if (!empty)
			dispatch(s, &req);
	}
	s->dispatching = 0;
	if (s->eof && !s->busy && !s->closing && !s->out_paused &&
	    evbuffer_get_length(s->in) == 0)
		close_after_flush(s);	/* every line answered */
	if (!s->closing && !s->eof &&
	    evbuffer_get_length(s->in) < s->in_high &&
	    evbuffer_get_length(out) <= OUT_HIGH)
		reading(s, 1);
}

/* --- libevent callbacks ---------------------------------------------- */

/*
 * TLS for evbuffer_write(): write up to one record from the front of the
 * output (SSL_write copies it into its record; the pullup only joins the
 * chunks of small replies).  Returns bytes written, or -1 with errno
 * EAGAIN (wait for writability) or EPIPE (the connection failed).
 */
static int
tls_out(struct session *s)
{
	size_t len = evbuffer_get_length(s->out);
	unsigned char *p;
	long n;

	if (len > TLS_WRITE_MAX)
		len = TLS_WRITE_MAX;
	if ((p = evbuffer_pullup(s->out, (ev_ssize_t)len)) == NULL) {
		errno = ENOMEM;
		return -1;
	}
	n = tls_write(s->ssl, p, len);
	if (n > 0) {
		if (evbuffer_drain(s->out, (size_t)n) != 0) {
			errno = ENOMEM;
			return -1;
		}
		return (int)n;
	}
	/* TLS_WANT_READ cannot happen: with renegotiation off (tls.c) only
	 * a handshake makes SSL_write read, and ours is over. */
	if (n != TLS_WANT_WRITE)
		s->tls_failed = 1;
	errno = n == TLS_WANT_WRITE ? EAGAIN : EPIPE;
	return -1;
}

/*
 * TLS for read(): one SSL_read.  Returns bytes, 0 at the end of input (a
 * close_notify), or -1 with errno EAGAIN (nothing yet), EPROTO (the
 * connection failed) or ECONNRESET (the TCP stream ended without a
 * close_notify: the session is lost, as after a reset, and a last line
 * without LF is dropped with it, never run).  SSL_read may have to write
 * first (an answer to the peer's TLS 1.3 key update, with the socket
 * full): then input stops, the write event is added and write_cb reads
 * again.
 */
static ssize_t
tls_in(struct session *s, char *buf, size_t len)
{
	long n = tls_read(s->ssl, buf, len);

	if (n >= 0)
		return (ssize_t)n;
	switch (n) {
	case TLS_WANT_WRITE:
		s->tls_read_wants_write = 1;
		reading(s, 0);
		if (!s->writing && event_add(s->wev, NULL) == 0)
			s->writing = 1;
		errno = EAGAIN;
		break;
	case TLS_TRUNCATED:
		s->tls_failed = 1;
		log_debug("client %s: TCP stream ended without a TLS "
		    "close_notify: lost (%zu bytes of input not run)", s->id,
		    evbuffer_get_length(s->in));
		errno = ECONNRESET;
		break;
	case TLS_FAILED:
		s->tls_failed = 1;
		errno = EPROTO;
		break;
	default:			/* TLS_WANT_READ */
		errno = EAGAIN;
		break;
	}
	return -1;
}

/*
 * Write what is queued.  Returns 1 when the session was freed (closing and
 * flushed, or the peer is gone): the caller must not touch it again.
 */
static int
flush(struct session *s)
{
	size_t left;

	if (s->broken) {
		session_free(s);
		return 1;
	}
	while ((left = evbuffer_get_length(s->out)) > 0) {
		int n = s->ssl == NULL ? evbuffer_write(s->out, s->fd) :
		    tls_out(s);

		if (n > 0)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
		    errno == EINTR))
			break;
		session_free(s);	/* reset, broken pipe */
		return 1;
	}
	if (left > 0 && !s->writing && event_add(s->wev, NULL) == 0)
		s->writing = 1;
	else if (left == 0 && s->writing && !s->tls_read_wants_write) {
		event_del(s->wev);
		s->writing = 0;
	}
	if (left == 0 && s->closing) {
		session_free(s);
		return 1;
	}
	if (s->out_paused && left <= OUT_HIGH / 2) {
		/* Output drained (maybe all in this very writev, so the
		 * write event never fires): take requests and read again. */
		s->out_paused = 0;
		event_active(s->process_ev, EV_TIMEOUT, 0);
	}
	return 0;
}

static void
read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	char buf[READ_CHUNK];
	ssize_t n;

	(void)what;
	n = s->ssl == NULL ? read(fd, buf, sizeof buf) :
	    tls_in(s, buf, sizeof buf);
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
	    errno != EINTR) {
		session_free(s);	/* reset: release its locks */
		return;
	}
	if (n == 0) {
		/* Half-closed (or closed): answer what came, then end. */
		s->eof = 1;
		s->close_at_ms = now_ms() + CLOSE_GRACE_MS;
		reading(s, 0);	/* EOF stays readable: stop polling */
		locks_client_eof(s->cl);	/* may answer (BUSY) now */
		process_input(s);
		if (!flush(s))
			eof_watch(s);
		return;
	}
	if (n > 0 && evbuffer_add(s->in, buf, (size_t)n) != 0) {
		log_warn("client %s: out of memory for input; closing", s->id);
		session_free(s);
		return;
	}
	if (evbuffer_get_length(s->in) >= s->in_high)
		reading(s, 0);		/* process_input resumes it */
	process_input(s);
	if (flush(s))
		return;
	/* More decrypted input inside the SSL: next turn, as if the socket
	 * said readable again (others get their turn first).  Never after
	 * a read that found nothing (n < 0): what the SSL holds then is at
	 * most part of a record, and re-reading it every loop turn until
	 * its rest comes (maybe never) spun a core (issue 15). */
	if (n > 0 && s->ssl != NULL && s->reading && tls_pending(s->ssl))
		event_active(s->rev, EV_READ, 0);
}

static void
write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	(void)what;
	if (s->tls_read_wants_write) {
		/* the socket takes the write now: read again, and input
		 * resumes (process_input turns it on) */
		s->tls_read_wants_write = 0;
		read_cb(fd, EV_READ, s);	/* it flushes too */
		return;
	}
	flush(s);		/* resumes a paused session once drained */
}

static void
process_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	(void)fd;
	(void)what;
	if (s->broken) {
		session_free(s);
		return;
	}
	if (s->closing) {
		int64_t left = s->close_at_ms - now_ms();

		if (left <= 0) {
			session_free(s);	/* the client never read it */
		} else if (!flush(s)) {
			/* woken early (an EVENT line): keep the grace timer */
			struct timeval tv = { (time_t)(left / 1000),
			    (suseconds_t)(left % 1000) * 1000 };
			event_add(s->process_ev, &tv);
		}
		return;
	}
	if (s->eof && s->out_paused && now_ms() >= s->close_at_ms) {
		/* half-closed, and no reply read for the whole grace */
		session_free(s);
		return;
	}
	process_input(s);
	if (!flush(s))
		eof_watch(s);
}

struct session *
session_new(struct broker *b, int fd, struct ssl_st *ssl, const char *peer_cn)
{
	struct session *s = xcalloc(1, sizeof *s);

	s->b = b;
	/* peer_cn: the CN of the client certificate that verified (see the
	 * struct); with an access list it may name the session's app */
	snprintf(s->peer_cn, sizeof s->peer_cn, "%s", peer_cn);
	clientid_new(s->id);
	s->authed = b->cfg->auth_token[0] == '\0' && b->acl == NULL;
	s->fd = fd;
	s->in_high = (size_t)b->cfg->max_line * 2 + 2 > READ_CHUNK ?
	    (size_t)b->cfg->max_line * 2 + 2 : READ_CHUNK;
	if (evutil_make_socket_nonblocking(fd) != 0 ||
	    (s->process_ev = event_new(b->base, -1, 0, process_cb, s)) == NULL ||
	    (s->rev = event_new(b->base, fd, EV_READ | EV_PERSIST, read_cb,
	    s)) == NULL ||
	    (s->wev = event_new(b->base, fd, EV_WRITE | EV_PERSIST, write_cb,
	    s)) == NULL ||
	    (s->in = evbuffer_new()) == NULL ||
	    (s->out = evbuffer_new()) == NULL) {
		/* The caller closes fd. */
		log_warn("cannot set up a session: out of memory");
		session_release(s);
		return NULL;
	}
	s->cl = locks_client_new(b->locks, s->id, &client_ops, s);
	index_add(s);
	s->ssl = ssl;		/* from here on, session_free frees it */
	if (s->peer_cn[0] != '\0' && b->acl != NULL) {
		/* A verified certificate whose CN names an app makes the
		 * session that app's, as AUTH with the app's token would
		 * (issue 15); another CN leaves it to AUTH. */
		const struct acl_app *app = acl_app_named(b->acl, s->peer_cn);

		if (app != NULL)
			(void)session_set_app(s, app);
	}
	reading(s, 1);
	TAILQ_INSERT_TAIL(&b->sessions, s, link);
	b->nsessions++;
	if (ssl != NULL)
		b->stats.tls_sessions++;
	b->stats.accepted++;
	log_debug("client %s connected (fd %d%s%s%s)", s->id, fd,
	    ssl != NULL ? ", TLS" : "", s->peer_cn[0] ? ", CN " : "",
	    s->peer_cn);
	return s;
}

/* Free what session_new made; safe on a half-built session. */
static void
session_release(struct session *s)
{
	if (s->process_ev)
		event_free(s->process_ev);
	if (s->rev)
		event_free(s->rev);
	if (s->wev)
		event_free(s->wev);
	if (s->in)
		evbuffer_free(s->in);
	if (s->out)
		evbuffer_free(s->out);
	free(s);
}

void
session_free(struct session *s)
{
	struct broker *b = s->b;

	log_debug("client %s gone", s->id);
	TAILQ_REMOVE(&b->sessions, s, link);
	b->nsessions--;
	index_del(s);
	if (s->app != NULL) {
		s->appstat->sessions--;
		acl_app_release(s->app);
		s->app = NULL;
	}
	if (s->ssl != NULL) {
		b->stats.tls_sessions--;
		/* our close_notify, unless the connection already failed */
		tls_close(s->ssl, !s->tls_failed && !s->broken);
		s->ssl = NULL;
	}
	if (s->grace != NULL)
		grace_session_end(s->grace, s->cl, s->killed ? GRACE_TAKEN :
		    s->quit ? GRACE_QUIT : GRACE_LOST);
	else
		locks_client_free(s->cl);
	if (close(s->fd) != 0)
		log_debug("close: %s", strerror(errno));
	session_release(s);
}
