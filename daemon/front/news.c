/*
 * news.c - what comes back to a session later from the layers below, in
 * wire words: the lock table's replies (OK, BUSY, ERR, OWNER's forms) and
 * lost locks; a grace session's statuses (HELLO GRACE, RESUME, its
 * record); ASYNC waits' outcomes (EVENT GRANTED, TIMEOUT, FAILED, QUEUED);
 * and watched keys' states (EVENT HOLDER, EVENT FREE).  Each comes through
 * an ops table the lower layer was given (session_int.h).
 */
#include "awaits.h"
#include "grace.h"
#include "locks.h"
#include "log.h"
#include "session_int.h"
#include "stream.h"
#include "util.h"
#include "watches.h"

#include <event2/buffer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ACQUIRE ALL's OK: a token per key, in the request's order. */
static void
send_tokens(struct session *s, const long long *tokens, size_t n)
{
	if (evbuffer_add(s->out, "OK", 2) != 0) {
		broken(s);
		return;
	}
	for (size_t i = 0; i < n && !s->broken; i++)
		if (evbuffer_add_printf(s->out, " %lld", tokens[i]) < 0)
			broken(s);
	if (!s->broken && evbuffer_add(s->out, "\r\n", 2) != 0)
		broken(s);
}

static void relall_next(struct session *s, const struct lk_result *r);

static void
on_reply(void *arg, const struct lk_result *r)
{
	struct session *s = arg;

	if (r->waited && s->appstat != NULL)
		histo_observe(s->appstat->wait, r->waited_us);
	if (s->relall != NULL) {
		relall_next(s, r);	/* RELEASE ALL: the next key */
		return;
	}
	if (s->await_record && r->status == LK_OK) {
		s->stashed = 1;		/* news_grace_recorded sends it */
		s->stash_token = r->n;
		if (r->ntokens > 0) {
			s->stash_tokens = xcalloc(r->ntokens,
			    sizeof *s->stash_tokens);
			memcpy(s->stash_tokens, r->tokens, r->ntokens *
			    sizeof *r->tokens);
			s->stash_n = r->ntokens;
		}
		return;
	}
	if (r->status == LK_BUSY)
		send_line(s, "BUSY");
	else if (r->status == LK_KIND && r->ntokens == 0 &&
	    s->cmd == CMD_ACQUIRE && s->all)
		send_line(s, "ERR BADARG key %zu of ALL is %s", r->index + 1,
		    r->n > 0 ? "a semaphore" : "held shared");
	else if (r->status == LK_KIND || r->status == LK_UPGRADE)
		send_kind_err(s, r);
	else if (r->status == LK_OK && r->ntokens > 0)
		send_tokens(s, r->tokens, r->ntokens);
	else if (r->status != LK_OK)
		send_err(s, status_err(r->status), r->why ? r->why : "");
	else if (s->cmd == CMD_OWNER)
		send_owner(s, r);
	else if (s->cmd == CMD_PROCLAIM || s->cmd == CMD_SETIF ||
	    s->cmd == CMD_DELIF)
		send_line(s, "OK");
	else if (s->cmd == CMD_CHECK && r->kind == 1)
		send_line(s, "OK CURRENT");
	else if (s->cmd == CMD_CHECK && r->n > 0)
		send_line(s, "OK STALE %lld", r->n);
	else if (s->cmd == CMD_CHECK)
		send_line(s, "OK STALE -");
	else
		send_ok_num(s, r->n);
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

/* EVENTS ON WANTED: waiters queue for a key the session holds. */
static void
on_wanted(void *arg, const char *key, size_t keylen, unsigned waiters,
    long oldest_ms)
{
	struct session *s = arg;

	if (s->events && s->wanted) {
		send_line(s, "EVENT WANTED %.*s %u %ld", (int)keylen, key,
		    waiters, oldest_ms);
		if (!s->dispatching)
			stream_more(s->st);
	}
}

static void
on_changed(void *arg, const char *key, size_t keylen, unsigned holds,
    long ttl_ms, long kind, long delay_ms, int fresh)
{
	struct session *s = arg;

	if (fresh && holds > 0)
		names_held(s);		/* its name beside its holds */
	if (s->grace != NULL && grace_changed(s->grace, key, keylen, holds,
	    ttl_ms, kind, delay_ms, fresh) &&
	    !awaits_hold_for_record(s->aw, key, keylen))
		s->await_record++;	/* the request's own grant (ACQUIRE
					 * ALL: one per key) */
}

static int
on_doubt(void *arg)
{
	struct session *s = arg;

	return s->grace != NULL && grace_doubt(s->grace);
}

const struct lk_client_ops session_client_ops = { on_reply, on_lost,
    on_changed, on_doubt, NULL, on_wanted };

/* --- grace sessions (grace.c): its statuses in wire words ----------- */

_Static_assert(GRACE_PERMITS_MAX == PROTO_LIMIT_MAX,
    "a grace record's permits are a LIMIT's");
_Static_assert(PROTO_LIMIT_MAX <= LK_PERMITS_MAX,
    "a hold records any LIMIT's permits");

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
void
news_grace_answer(void *arg, enum grace_status st, const char *cid,
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
void
news_grace_recorded(void *arg, const char *key, size_t keylen)
{
	struct session *s = arg;

	if (key != NULL && s->aw != NULL && awaits_recorded(s->aw, key,
	    keylen))
		return;
	if (!s->await_record)
		return;
	if (key != NULL && --s->await_record > 0)
		return;		/* another key of an ACQUIRE ALL to come */
	s->await_record = 0;
	if (s->stashed) {
		s->stashed = 0;
		if (s->stash_n > 0)
			send_tokens(s, s->stash_tokens, s->stash_n);
		else
			send_line(s, "OK %lld", s->stash_token);
		free(s->stash_tokens);
		s->stash_tokens = NULL;
		s->stash_n = 0;
		answered(s);
	}
}

/* The grace object is settled: no longer a grace session. */
void
news_grace_dropped(void *arg)
{
	struct session *s = arg;

	s->grace = NULL;
	if (s->aw != NULL)
		awaits_recorded_all(s->aw);
	news_grace_recorded(s, NULL, 0);	/* an OK held back for it goes now */
}

/* RESUME won: become client-id cid, with its lock client and holds. */
void
news_grace_resumed(void *arg, struct grace *g, struct lclient *cl,
    const char *cid)
{
	struct session *s = arg;

	locks_client_free(s->cl);	/* a fresh session's: holds nothing */
	s->cl = cl;
	s->grace = g;
	locks_client_handover(cl, &session_client_ops, s, 0);
	log_debug("client %s resumed session %s", s->id, cid);
	index_del(s);			/* its key is the id: re-file it */
	memcpy(s->id, cid, CLIENTID_LEN);
	index_add(s);
	if (locks_held(cl, NULL, NULL) > 0)
		names_held(s);		/* the name this connection gave */
	send_held(s);
	answered(s);
}

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
/* EVENT GRANTED ALL <n> <key> <token>...: the wait's name "ALL <n>
 * <key>..." with each key's token after it. */
static void
send_granted_all(struct session *s, const char *name, size_t len,
    const long long *tokens, size_t n)
{
	const char *p = name, *end = name + len;
	size_t words = 0, k = 0;

	if (evbuffer_add(s->out, "EVENT GRANTED", 13) != 0) {
		broken(s);
		return;
	}
	while (p < end && !s->broken) {
		const char *w = p;

		while (p < end && *p != ' ')
			p++;
		if (evbuffer_add_printf(s->out, " %.*s", (int)(p - w), w) < 0)
			broken(s);
		if (words++ >= 2 && k < n &&
		    evbuffer_add_printf(s->out, " %lld", tokens[k++]) < 0)
			broken(s);
		if (p < end)
			p++;
	}
	if (!s->broken && evbuffer_add(s->out, "\r\n", 2) != 0)
		broken(s);
}

static void
on_await_outcome(void *arg, const char *key, size_t keylen,
    const struct lk_result *r)
{
	struct session *s = arg;

	if (s->grace != NULL)
		(void)grace_wait(s->grace, key, keylen, NULL);
	if (r->waited && s->appstat != NULL)
		histo_observe(s->appstat->wait, r->waited_us);
	if (r->status == LK_OK && r->ntokens > 0)
		send_granted_all(s, key, keylen, r->tokens, r->ntokens);
	else if (r->status == LK_OK)
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

struct awaits *
session_awaits(struct session *s)
{
	if (s->aw == NULL)
		s->aw = awaits_new(s->b->base, &session_await_ops, s);
	return s->aw;
}

/* A wait the resumed session's record lists ("<kind> <ttl> <deadline>
 * [<value>]"): queued again here with what is left of its deadline (its
 * place in the key's queue is not kept), or told its outcome: granted
 * when the session holds the key (its EVENT was unsent when the
 * connection dropped), else timed out when its deadline has passed --
 * nothing is granted after a deadline.  A wait told its outcome before
 * the RESUME is not in the record (its removal is retried until Redis
 * takes it, grace_wait), so it gets no line at all. */
void
news_grace_wait_found(void *arg, const char *key, size_t keylen,
    const char *val)
{
	struct session *s = arg;
	struct await_info info = { .key = key, .keylen = keylen,
	    .kind = LK_EXCLUSIVE, .resumed = 1, .delay_ms = -1 };
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
	if (info.deadline <= wall_ms()) {
		struct lk_result r = { .status = LK_BUSY };

		on_await_outcome(s, key, keylen, &r);	/* EVENT TIMEOUT */
		return;
	}
	info.full = awaits_count(s->aw) >=
	    (size_t)s->b->cfg->max_waiters_per_session;
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

struct watches *
session_watches(struct session *s)
{
	if (s->wa == NULL)
		s->wa = watches_new(s->b->locks, &session_watch_ops, s);
	return s->wa;
}

/* Watch key (WATCH, or a RESUME's record); returns as watches_add. */
int
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
void
news_grace_watch_found(void *arg, const char *key, size_t keylen)
{
	struct session *s = arg;

	(void)watches_add(session_watches(s), key, keylen,
	    (size_t)s->b->cfg->max_watches_per_session);
}


/* --- RELEASE ALL (1.2) ------------------------------------------------- */

/*
 * RELEASE ALL <n> <key>...: the keys released one after the other, each
 * as RELEASE (one request of the lock table at a time, the next from the
 * session's own turn, never from inside a reply), then one line: OK and
 * each key's holds left, in order; or, when one failed, the first
 * failure's error naming its key, after the others were released.
 */
struct relall {
	size_t n, next;
	unsigned inflight:1;
	int failed;			/* the first key that failed, -1 none */
	enum proto_err err;
	char why[160];
	long long left[PROTO_ALL_MAX];
	char *keys[PROTO_ALL_MAX];
	size_t lens[PROTO_ALL_MAX];
};

static void
relall_free(struct relall *ra)
{
	for (size_t i = 0; i < ra->n; i++)
		free(ra->keys[i]);
	free(ra);
}

/* A release of RELEASE ALL answered. */
static void
relall_next(struct session *s, const struct lk_result *r)
{
	struct relall *ra = s->relall;
	size_t i = ra->next - 1;

	ra->inflight = 0;
	if (r->status == LK_OK) {
		ra->left[i] = r->n;
	} else if (ra->failed < 0) {
		ra->failed = (int)i;
		ra->err = status_err(r->status);
		snprintf(ra->why, sizeof ra->why, "%s", r->why != NULL ?
		    r->why : "");
	}
	if (!s->dispatching)
		stream_more(s->st);
}

void
news_relall_step(struct session *s)
{
	struct relall *ra = s->relall;

	while (ra != NULL && !ra->inflight && ra->next < ra->n) {
		ra->inflight = 1;
		ra->next++;
		locks_release(s->cl, ra->keys[ra->next - 1],
		    ra->lens[ra->next - 1], 0);
	}
	if (ra == NULL || ra->inflight || ra->next < ra->n)
		return;
	s->relall = NULL;
	if (ra->failed >= 0) {
		send_line(s, "ERR %s %.*s: %s", proto_err_name(ra->err),
		    (int)ra->lens[ra->failed], ra->keys[ra->failed],
		    ra->why);
	} else {
		send_tokens(s, ra->left, ra->n);
	}
	relall_free(ra);
	s->busy = 0;
}

/* The session ends: a RELEASE ALL's state goes (its holds are released
 * with the session's). */
void
news_relall_free(struct session *s)
{
	if (s->relall != NULL)
		relall_free(s->relall);
	s->relall = NULL;
}

void
news_relall_start(struct session *s, const struct proto_req *req)
{
	struct relall *ra = xcalloc(1, sizeof *ra);

	ra->n = (size_t)req->nkeys;
	ra->failed = -1;
	for (size_t i = 0; i < ra->n; i++) {
		ra->keys[i] = xmalloc(req->keylens[i] + 1);
		memcpy(ra->keys[i], req->keys[i], req->keylens[i]);
		ra->lens[i] = req->keylens[i];
	}
	s->relall = ra;
	s->busy = 1;
	news_relall_step(s);
}
