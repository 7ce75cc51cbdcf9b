/*
 * session.c - one client connection's protocol: lines in, one reply per
 * line out.
 *
 * A session runs one request at a time: while a request waits (for a key or
 * for Redis) later lines stay in its stream's input (net/stream.c), which
 * is what keeps replies in request order and makes a waiting ACQUIRE hold
 * back the session's later requests.  The stream moves the bytes, plain
 * or TLS, and applies the limits every client gets alike (line length,
 * input and output bounds, the end of input, close after flush); the
 * session parses each line, runs it, and writes its reply into the
 * stream's output.  Replies from the lock table never run the next
 * request directly: they ask the stream to hand over lines again later
 * (stream_more), so nothing re-enters locks_*.
 *
 * Waits that do not block (ACQUIRE ... ASYNC) are the exception: each is
 * a waiter of its own (awaits.c), so the session goes on, and its outcome
 * comes later as an EVENT line between replies.
 *
 * End of input (the client half-closed, e.g. `nc -N`) is not the end of
 * the session: every line already received is answered, in order, then
 * the session closes after flushing, which releases its locks.  The lock
 * table is told at once (locks_client_eof), so a waiting ACQUIRE is
 * answered BUSY instead of holding a queue place for a client that can no
 * longer give up.  A read or write error (reset, broken pipe) still ends
 * the session at once.
 */
#include "acl.h"
#include "awaits.h"
#include "broker.h"
#include "clientid.h"
#include "grace.h"
#include "keytab.h"
#include "locks.h"
#include "log.h"
#include "proto.h"
#include "stats.h"
#include "stream.h"
#include "tls.h"
#include "tokenhash.h"
#include "util.h"
#include "watches.h"

#include <event2/buffer.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define AUTH_LOG_MS 10000		/* ms between "wrong AUTH" log lines */

struct session {
	struct broker *b;
	struct stream *st;		/* its bytes, plain or TLS */
	struct evbuffer *out;		/* the stream's output: replies */
	struct lclient *cl;
	struct grace *grace;		/* HELLO ... GRACE, or RESUME */
	struct awaits *aw;		/* ASYNC waits, made at the first */
	struct watches *wa;		/* WATCHed keys, made at the first */
	TAILQ_ENTRY(session) link;
	struct keytab_entry by_id;	/* in b->by_id while indexed */
	const struct acl_app *app;	/* NULL: no app (every key) */
	struct appstat *appstat;	/* app's counters, with app */
	char id[CLIENTID_LEN + 1];
	enum proto_cmd cmd;		/* the request in progress */
	unsigned busy:1;		/* a request awaits its reply */
	unsigned dispatching:1;		/* inside on_lines() */
	unsigned events:1;		/* EVENTS ON */
	unsigned authed:1;		/* AUTH passed (or none needed) */
	unsigned broken:1;		/* reply lost: free, send no more */
	unsigned tls:1;			/* over TLS (counted in tls_sessions) */
	unsigned quit:1;		/* ended by QUIT */
	unsigned used:1;		/* took or asked for locks: no RESUME */
	unsigned killed:1;		/* resumed by another connection */
	unsigned await_record:1;	/* a grant's OK waits for its record */
	unsigned stashed:1;		/* and here it is */
	unsigned indexed:1;		/* by_id is in b->by_id */
	unsigned owner_value:1;		/* the OWNER in progress has VALUE */
	long long stash_token;
	/*
	 * The subject CN of the client's certificate, when it sent one that
	 * verified against tls_ca_cert_file (tls_auth_clients yes or
	 * optional); "" otherwise.  Printable ASCII, no blanks.
	 */
	char peer_cn[TLS_CN_MAX + 1];
};

static void cmd_held(struct session *s);

static void
send_line(struct session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * A reply could not be queued (out of memory).  One reply per request is
 * the protocol's promise, so the session cannot go on: the stream sends
 * nothing more and is closed on a later loop turn (this may run inside a
 * locks_* callback), without what is queued (it may end in half a line).
 */
static void
broken(struct session *s)
{
	if (s->broken)
		return;
	log_warn("client %s: out of memory for a reply; closing", s->id);
	s->broken = 1;
	stream_broken(s->st);
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
 * session of another app or of none is not shown (access lists).
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
	if (r->kind == LK_EXCLUSIVE && s->owner_value) {
		/* 1.2, OWNER <key> VALUE: the value, or "-" */
		send_line(s, "OK %.*s %lld %lld %.*s", (int)shown[0].ownerlen,
		    shown[0].owner, shown[0].pttl, shown[0].token,
		    shown[0].value != NULL ? (int)shown[0].valuelen : 1,
		    shown[0].value != NULL ? shown[0].value : "-");
		return;
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

	if (r->waited && s->appstat != NULL)
		histo_observe(s->appstat->wait, r->waited_us);
	if (s->await_record && r->status == LK_OK) {
		s->stashed = 1;		/* on_grace_recorded sends it */
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
	else if (s->cmd == CMD_PROCLAIM)
		send_line(s, "OK");
	else if (s->cmd == CMD_CHECK && r->kind == 1)
		send_line(s, "OK CURRENT");
	else if (s->cmd == CMD_CHECK && r->n > 0)
		send_line(s, "OK STALE %lld", r->n);
	else if (s->cmd == CMD_CHECK)
		send_line(s, "OK STALE -");
	else
		send_line(s, "OK %lld", r->n);
	s->busy = 0;
	if (!s->dispatching)
		stream_more(s->st);
}

static void
on_lost(void *arg, const char *key, size_t keylen, long long token)
{
	struct session *s = arg;

	if (s->events) {
		send_line(s, "EVENT LOST %.*s %lld", (int)keylen, key, token);
		if (!s->dispatching)
			stream_more(s->st);
	}
}

static void
on_changed(void *arg, const char *key, size_t keylen, unsigned holds,
    long ttl_ms, long kind, int fresh)
{
	struct session *s = arg;

	if (s->grace != NULL && grace_changed(s->grace, key, keylen, holds,
	    ttl_ms, kind, fresh) && !awaits_hold_for_record(s->aw, key,
	    keylen))
		s->await_record = 1;	/* the request's own grant */
}

static int
on_doubt(void *arg)
{
	struct session *s = arg;

	return s->grace != NULL && grace_doubt(s->grace);
}

static const struct lk_client_ops client_ops = { on_reply, on_lost,
    on_changed, on_doubt, NULL };

/* --- grace sessions (grace.c): its statuses in wire words ----------- */

/* The request in progress is answered: take the next one, later. */
static void
answered(struct session *s)
{
	s->busy = 0;
	if (!s->dispatching)
		stream_more(s->st);
}

_Static_assert(GRACE_PERMITS_MAX == PROTO_LIMIT_MAX,
    "a grace record's permits are a LIMIT's");

static enum proto_err
grace_err(enum grace_status st)
{
	switch (st) {
	case GRACE_OK: return PERR_NONE;
	case GRACE_BADARG: return PERR_BADARG;
	case GRACE_NOSESSION: return PERR_NOSESSION;
	case GRACE_BADSECRET: return PERR_NOAUTH;
	case GRACE_DENIED: return PERR_DENIED;
	case GRACE_UNAVAILABLE: return PERR_UNAVAILABLE;
	}
	return PERR_UNAVAILABLE;
}

/* A key watched before HELLO GRACE made the record: in it now. */
static void
record_watch(void *arg, const char *key, size_t keylen)
{
	struct session *s = arg;

	(void)grace_watch(s->grace, key, keylen, 1);
}

/* HELLO GRACE or RESUME answered. */
static void
on_grace_answer(void *arg, enum grace_status st, const char *cid,
    const char *secret, const char *why)
{
	struct session *s = arg;

	if (st == GRACE_OK) {
		send_line(s, "OK %s lockbroker/%s %s", cid, LOCKBROKER_VERSION,
		    secret);
		if (s->grace != NULL)
			watches_each(s->wa, record_watch, s);
	} else {
		send_err(s, grace_err(st), why);
		if (s->cmd == CMD_RESUME)
			s->used = 0;	/* it holds nothing: it may try again */
	}
	answered(s);
}

/* The record write a fresh grant's OK (or EVENT GRANTED) waited for is
 * in. */
static void
on_grace_recorded(void *arg, const char *key, size_t keylen)
{
	struct session *s = arg;

	if (key != NULL && s->aw != NULL && awaits_recorded(s->aw, key,
	    keylen))
		return;
	if (!s->await_record)
		return;
	s->await_record = 0;
	if (s->stashed) {
		s->stashed = 0;
		send_line(s, "OK %lld", s->stash_token);
		answered(s);
	}
}

/* The grace object is settled: no longer a grace session. */
static void
on_grace_dropped(void *arg)
{
	struct session *s = arg;

	s->grace = NULL;
	if (s->aw != NULL)
		awaits_recorded_all(s->aw);
	on_grace_recorded(s, NULL, 0);	/* an OK held back for it goes now */
}

/* RESUME won: become client-id cid, with its lock client and holds. */
static void
on_grace_resumed(void *arg, struct grace *g, struct lclient *cl,
    const char *cid)
{
	struct session *s = arg;

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

/* Another connection resumed this session: close it now, leaving its
 * holds to that connection. */
static void
on_grace_taken(void *arg)
{
	struct session *s = arg;

	s->killed = 1;
	session_free(s);
}

static void on_grace_watch_found(void *arg, const char *key, size_t keylen);
static void on_grace_wait_found(void *arg, const char *key, size_t keylen,
    const char *val);

static const struct grace_ops session_grace_ops = { on_grace_answer,
    on_grace_resumed, on_grace_recorded, on_grace_dropped, on_grace_taken,
    on_grace_wait_found, on_grace_watch_found };

/* --- ASYNC waits (awaits.c): their answers in wire words ------------ */

/* A queued wait of a grace session is in its record, so that a RESUME
 * (here or on another broker) queues it again with its deadline. */
static void
record_wait(struct session *s, const struct await_info *info)
{
	char val[GRACE_WAIT_VAL_MAX];

	if (s->grace == NULL)
		return;
	snprintf(val, sizeof val, "%ld %ld %lld%s%.*s", info->kind,
	    info->ttl_ms, (long long)info->deadline, info->valuelen > 0 ?
	    " " : "", (int)info->valuelen, info->valuelen > 0 ? info->value :
	    "");
	(void)grace_wait(s->grace, info->key, info->keylen, val);
}

static void
on_await_queued(void *arg, const struct await_info *info)
{
	struct session *s = arg;

	record_wait(s, info);
	if (info->resumed) {
		send_line(s, "EVENT QUEUED %.*s", (int)info->keylen,
		    info->key);
		if (!s->dispatching)
			stream_more(s->st);
		return;
	}
	send_line(s, "OK QUEUED");
	answered(s);
}

/* EVENT lines of waits go whether or not EVENTS ON was said: the client
 * asked for them with ASYNC. */
static void
on_await_outcome(void *arg, const char *key, size_t keylen,
    const struct lk_result *r)
{
	struct session *s = arg;

	if (s->grace != NULL)
		(void)grace_wait(s->grace, key, keylen, NULL);
	if (r->waited && s->appstat != NULL)
		histo_observe(s->appstat->wait, r->waited_us);
	if (r->status == LK_OK)
		send_line(s, "EVENT GRANTED %.*s %lld", (int)keylen, key, r->n);
	else if (r->status == LK_BUSY)
		send_line(s, "EVENT TIMEOUT %.*s", (int)keylen, key);
	else
		send_line(s, "EVENT FAILED %.*s %s", (int)keylen, key,
		    proto_err_name(status_err(r->status) != PERR_NONE ?
		    status_err(r->status) : PERR_UNAVAILABLE));
	if (!s->dispatching)
		stream_more(s->st);
}

static void
on_await_cancelled(void *arg, int n)
{
	struct session *s = arg;

	send_line(s, "OK %d", n);
	answered(s);
}

static const struct await_ops session_await_ops = { on_reply,
    on_await_queued, on_await_outcome, on_await_cancelled };

static struct awaits *
session_awaits(struct session *s)
{
	if (s->aw == NULL)
		s->aw = awaits_new(s->b->base, &session_await_ops, s);
	return s->aw;
}

/* A wait the resumed session's record lists ("<kind> <ttl> <deadline>"):
 * queued again here with what is left of its deadline (its place in the
 * key's queue is not kept), or told its outcome. */
static void
on_grace_wait_found(void *arg, const char *key, size_t keylen,
    const char *val)
{
	struct session *s = arg;
	struct await_info info = { key, keylen, LK_EXCLUSIVE, 0, 0, 1, NULL,
	    0 };
	long long token = locks_token_of(s->cl, key, keylen), deadline = 0;
	int end = 0;

	if (sscanf(val, "%ld %ld %lld%n", &info.kind, &info.ttl_ms,
	    &deadline, &end) != 3 || awaits_has(s->aw, key, keylen))
		return;
	info.deadline = deadline;
	if (val[end] == ' ' && val[end + 1] != '\0') {
		/* its VALUE (1.2) */
		info.value = val + end + 1;
		info.valuelen = strlen(info.value);
	}
	if (token > 0) {
		/* granted, its EVENT unsent when the connection dropped */
		struct lk_result r = { .status = LK_OK, .n = token };

		on_await_outcome(s, key, keylen, &r);
		return;
	}
	awaits_acquire(session_awaits(s), s->cl, &info);
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
	grace_hello(s->b, &session_grace_ops, s, &s->grace, s->cl, s->id,
	    ms > max ? max : ms, s->app != NULL ? acl_app_name(s->app) : "");
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
	s->grace = grace_resume(s->b, &session_grace_ops, s, req->word,
	    req->wordlen, req->word2, req->word2len, s->app != NULL ?
	    acl_app_name(s->app) : "");
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
 * unauthenticated client must not be able to flood the log.
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
 * nothing about limits such as max_key_len.  The verb is
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

static void
cmd_acquire(struct session *s, const struct proto_req *req)
{
	long kind = req->shared ? LK_SHARED : req->limit > 0 ? req->limit :
	    LK_EXCLUSIVE;
	long wait_ms = req->has_wait ? req->wait_ms : -1;
	long ttl_ms = req->has_ttl ? req->ttl_ms : 0;
	struct await_info info;

	if (awaits_has(s->aw, req->key, req->keylen)) {
		send_err(s, PERR_BADARG, req->async ? "this session already "
		    "waits for the key" : "this session waits for the key "
		    "(ASYNC): CANCEL it first");
		return;
	}
	if (req->async && awaits_count(s->aw) >=
	    (size_t)s->b->cfg->max_waiters_per_session) {
		send_err(s, PERR_LIMIT, "this session has "
		    "max_waiters_per_session ASYNC waits queued");
		return;
	}
	s->used = 1;
	s->busy = 1;
	if (!req->async) {
		locks_acquire_value(s->cl, req->key, req->keylen, kind,
		    wait_ms, ttl_ms, req->value, req->valuelen);
		return;
	}
	info.key = req->key;
	info.keylen = req->keylen;
	info.kind = kind;
	info.ttl_ms = ttl_ms;
	info.deadline = wall_ms() + (wait_ms > s->b->cfg->max_wait_ms ?
	    s->b->cfg->max_wait_ms : wait_ms > 0 ? wait_ms : 0);
	info.resumed = 0;
	info.value = req->value;
	info.valuelen = req->valuelen;
	awaits_acquire(session_awaits(s), s->cl, &info);
}

/* --- WATCH (1.2): key states in wire words ---------------------------- */

/*
 * EVENT HOLDER <key> <client-id> <token> <value|->, EVENT HOLDER <key>
 * SHARED <n>, EVENT HOLDER <key> SEMAPHORE <n> <limit>, EVENT FREE <key>:
 * sent whether or not EVENTS ON was said (the client asked with WATCH),
 * between replies.  A client not reading its output (past
 * STREAM_OUT_HIGH) gets the key's latest state once it has read it.
 */
static int
on_watch_state(void *arg, const char *key, size_t keylen,
    const struct lk_key_state *st)
{
	struct session *s = arg;
	const char *owner = st->owner;
	size_t ownerlen = st->ownerlen;

	if (stream_out_full(s->st))
		return 0;
	switch (st->kind) {
	case LK_KEY_FREE:
		send_line(s, "EVENT FREE %.*s", (int)keylen, key);
		break;
	case LK_KEY_EXCLUSIVE:
		if (!owner_visible(s, owner, ownerlen)) {
			owner = "?";
			ownerlen = 1;
		}
		send_line(s, "EVENT HOLDER %.*s %.*s %lld %.*s", (int)keylen,
		    key, (int)ownerlen, owner, st->token,
		    st->value != NULL ? (int)st->valuelen : 1,
		    st->value != NULL ? st->value : "-");
		break;
	case LK_KEY_SHARED:
		send_line(s, "EVENT HOLDER %.*s SHARED %zu", (int)keylen, key,
		    st->holders);
		break;
	case LK_KEY_SEMAPHORE:
		send_line(s, "EVENT HOLDER %.*s SEMAPHORE %zu %ld",
		    (int)keylen, key, st->holders, st->limit);
		break;
	}
	if (!s->dispatching)
		stream_more(s->st);
	return 1;
}

static const struct watches_ops session_watch_ops = { on_watch_state };

static struct watches *
session_watches(struct session *s)
{
	if (s->wa == NULL)
		s->wa = watches_new(s->b->locks, &session_watch_ops, s);
	return s->wa;
}

/* Watch key (WATCH, or a RESUME's record); returns as watches_add. */
static int
watch_key(struct session *s, const char *key, size_t keylen)
{
	int n = watches_add(session_watches(s), key, keylen,
	    (size_t)s->b->cfg->max_watches_per_session);

	if (n == 1 && s->grace != NULL)
		(void)grace_watch(s->grace, key, keylen, 1);
	return n;
}

/* A key the resumed session's record lists as watched: watched again,
 * its current state told. */
static void
on_grace_watch_found(void *arg, const char *key, size_t keylen)
{
	struct session *s = arg;

	(void)watches_add(session_watches(s), key, keylen,
	    (size_t)s->b->cfg->max_watches_per_session);
}

static void
cmd_watch(struct session *s, const struct proto_req *req)
{
	if (watch_key(s, req->key, req->keylen) < 0) {
		send_err(s, PERR_LIMIT, "this session watches "
		    "max_watches_per_session keys");
		return;
	}
	s->used = 1;
	send_line(s, "OK");
}

static void
cmd_unwatch(struct session *s, const struct proto_req *req)
{
	int n = watches_remove(s->wa, req->key, req->keylen);

	if (n > 0 && s->grace != NULL)
		(void)grace_watch(s->grace, req->key, req->keylen, 0);
	send_line(s, "OK %d", n);
}

static void
cmd_cancel(struct session *s, const struct proto_req *req)
{
	int n = awaits_cancel(s->aw, req->key, req->keylen);

	if (n < 0) {
		s->busy = 1;	/* after the grant's EVENT: on_await_cancelled */
		return;
	}
	if (n > 0 && s->grace != NULL)
		(void)grace_wait(s->grace, req->key, req->keylen, NULL);
	send_line(s, "OK %d", n);
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
		stream_close(s->st);
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
		cmd_acquire(s, req);
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
		s->owner_value = req->with_value != 0;
		if (req->with_value)
			locks_owner_value(s->cl, req->key, req->keylen);
		else
			locks_owner(s->cl, req->key, req->keylen);
		return;
	case CMD_CANCEL:
		if (key_denied(s, req))
			return;
		cmd_cancel(s, req);
		return;
	case CMD_CHECK:
		if (key_denied(s, req))
			return;
		s->busy = 1;
		locks_check(s->cl, req->key, req->keylen, req->token);
		return;
	case CMD_PROCLAIM:
		if (key_denied(s, req))
			return;
		s->busy = 1;
		locks_proclaim(s->cl, req->key, req->keylen, req->value,
		    req->valuelen);
		return;
	case CMD_WATCH:
		if (key_denied(s, req))
			return;
		cmd_watch(s, req);
		return;
	case CMD_UNWATCH:
		cmd_unwatch(s, req);
		return;
	case CMD__COUNT:
		break;
	}
	send_err(s, PERR_BADCMD, "unknown command");
}

/* --- the stream's lines ------------------------------------------- */

/* Run the lines the stream has, one request at a time (ops->lines). */
static int
on_lines(void *arg)
{
	struct session *s = arg;
	struct broker *b = s->b;
	struct proto_limits lim = { (size_t)b->cfg->max_key_len,
	    (size_t)b->held_key_len };

	s->dispatching = 1;
	/* states of watched keys the client was not reading when they came
	 * (its output has drained, or it sent more) */
	watches_flush(s->wa);
	while (!s->busy) {
		struct proto_req req;
		enum proto_err err;
		const char *why;
		int empty;
		long len = stream_line(s->st, b->linebuf);

		if (len == STREAM_PAUSED) {
			/* The client is not reading: neither do we, until
			 * the stream sees the output drained. */
			b->stats.paused++;
			break;
		}
		if (len == STREAM_NONE)
			break;
		if (len == STREAM_TOOLONG) {
			b->stats.toolong++;
			send_err(s, PERR_TOOLONG, "line longer than max_line "
			    "bytes; closing");
			stream_close(s->st);
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
	return s->busy;
}

/* The client sends no more: a waiting ACQUIRE may answer BUSY now. */
static void
on_eof(void *arg)
{
	struct session *s = arg;

	locks_client_eof(s->cl);
}

static void
on_closed(void *arg)
{
	session_free(arg);
}

static const struct stream_ops stream_ops = { on_lines, on_eof, on_closed };

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
	if ((s->st = stream_new(b->base, fd, ssl, (size_t)b->cfg->max_line,
	    &stream_ops, s, s->id)) == NULL) {
		/* The caller closes fd. */
		log_warn("cannot set up a session: out of memory");
		free(s);
		return NULL;
	}
	s->out = stream_out(s->st);
	s->tls = ssl != NULL;
	s->cl = locks_client_new(b->locks, s->id, &client_ops, s);
	index_add(s);
	if (s->peer_cn[0] != '\0' && b->acl != NULL) {
		/* A verified certificate whose CN names an app makes the
		 * session that app's, as AUTH with the app's token would;
		 * another CN leaves it to AUTH. */
		const struct acl_app *app = acl_app_named(b->acl, s->peer_cn);

		if (app != NULL)
			(void)session_set_app(s, app);
	}
	TAILQ_INSERT_TAIL(&b->sessions, s, link);
	b->nsessions++;
	if (s->tls)
		b->stats.tls_sessions++;
	b->stats.accepted++;
	log_debug("client %s connected (fd %d%s%s%s)", s->id, fd,
	    s->tls ? ", TLS" : "", s->peer_cn[0] ? ", CN " : "",
	    s->peer_cn);
	return s;
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
	if (s->tls)
		b->stats.tls_sessions--;
	awaits_free(s->aw);	/* queued waits go silently, before s->cl */
	watches_free(s->wa);	/* (a grace record keeps them for a RESUME) */
	if (s->grace != NULL)
		grace_session_end(s->grace, s->cl, s->killed ? GRACE_TAKEN :
		    s->quit ? GRACE_QUIT : GRACE_LOST);
	else
		locks_client_free(s->cl);
	stream_free(s->st);
	free(s);
}
