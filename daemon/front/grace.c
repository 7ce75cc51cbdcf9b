/*
 * grace.c - sessions that outlive their connection (grace sessions): the
 * record in Redis, detaching, resuming, the grace's end.
 *
 * A grace object lives from HELLO ... GRACE (or a RESUME) until its
 * record is settled: the session quit, its grace ran out, another
 * connection resumed it, or the broker stopped.  Its states:
 *
 *   ATTACHED  a session owns it (and the lock client); the record is
 *             touched every period, which is also how a resume elsewhere
 *             is noticed while the old connection is still open
 *   DETACHED  the connection ended without QUIT: the lock client is the
 *             grace object's, its holds renewed as before; the record is
 *             checked every period (a RESUME elsewhere is noticed there,
 *             or when a renewal finds a lock gone), and a timer ends the
 *             record (session.lua "end") when the grace runs out, which
 *             frees the locks only if that end won
 *   RESUMING  a RESUME won the record: the keys are taken over one by one
 *             (takeover.lua) before the session hears OK
 *   ENDING    QUIT or the grace's end: waiting for "end" to decide
 *
 * Every Redis call holds a reference; a settled object is freed when the
 * last reply is in (dead).  Record writes for single keys are not awaited:
 * on one master they are ordered with the grant that caused them, and a
 * key the record misses is only a key a RESUME does not give back (its
 * value still names the old generation, so nobody can mistake it for the
 * resumed session's): a takeover releases such holds here
 * (locks_client_taken), so nothing a replaced connection started stays in
 * Redis.
 *
 * A lock of a grace session found gone in Redis is not called lost before
 * the record says the session is still this connection's (grace_doubt):
 * a RESUME elsewhere rewrites every lock it takes over, so the old broker
 * would otherwise count (and tell) a loss for each of them.  When Redis
 * lost the record (a restart without persistence, a failover) the broker
 * writes it again, same generation and secret, as soon as it reconnects
 * (grace_store_up), as it reclaims the session's locks.
 */
#include "acl.h"
#include "grace.h"
#include "broker.h"
#include "clientid.h"
#include "locks.h"
#include "log.h"
#include "store.h"
#include "util.h"

#include <event2/event.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define TOUCH_MIN_MS 1000		/* record touch period bounds */
#define TOUCH_MAX_MS 10000
#define DETACHED_SLACK_MS 5000		/* record outlives a detached grace */
#define RESUME_SLACK_MS (2 * TOUCH_MAX_MS)	/* until the first touch */
#define END_RETRY_MS 1000		/* "end" unanswered: ask again */
#define END_TRIES 5			/* then leave the locks to their TTL */
/* An ended record stays this long: every connection left behind touches
 * it (and learns it is over) within a touch period. */
#define TOMBSTONE_MS (2 * TOUCH_MAX_MS + TOUCH_MIN_MS)
#define HOLD_VAL_MAX 48			/* "<holds> <ttl> [<kind>]" */

enum gstate { G_ATTACHED, G_DETACHED, G_RESUMING, G_ENDING };

struct grace {
	struct broker *b;
	TAILQ_ENTRY(grace) link;	/* b->graces */
	enum gstate state;
	const struct grace_ops *ops;	/* how its session is told */
	void *arg;			/* ATTACHED / RESUMING: its session
					 * (NULL: none) */
	struct lclient *cl;		/* owned here unless ATTACHED */
	char cid[CLIENTID_LEN + 1];
	char owner[OWNER_MAX + 1];	/* cid, or cid/gen */
	unsigned long gen;
	char secret[GRACE_SECRET_LEN + 1];
	char app[ACL_NAME_MAX + 1];	/* its session's app ("" none): only
					 * a session of it may resume it */
	long grace_ms;
	long old_grace_ms;		/* HELLO GRACE again: until recorded */
	int64_t end_at;			/* DETACHED: the grace's end (ms) */
	struct event *timer;		/* touch, check, grace's end, retry */
	unsigned refs;			/* Redis calls in flight */
	unsigned dead:1;		/* settled: free at refs 0 */
	unsigned quiet:1;		/* adopting: no per-key writes */
	unsigned opening:1;		/* HELLO GRACE awaits its answer */
	unsigned fresh:1;		/* made by that HELLO GRACE */
	unsigned failed:1;		/* RESUMING: a takeover got no answer */
	unsigned quit:1;		/* ENDING: its session said QUIT */
	unsigned ends;			/* "end" tries */
	unsigned pending;		/* RESUMING: takeovers in flight */
	struct gwait *waits;		/* RESUMING: the queued waits the
					 * record lists, for the session */
	size_t nwaits;
};

/* A queued wait (or a watched key: watch) read from the record by a
 * RESUME. */
struct gwait {
	char *key;
	size_t keylen;
	int watch;
	char val[GRACE_WAIT_VAL_MAX];
};

/* One key being taken over by a resumed session. */
struct takeover {
	struct grace *g;
	unsigned holds;
	long ttl_ms;
	int64_t sent_us;		/* when takeover.lua was sent */
	long kind;
	size_t keylen;
	char key[];
};

static void timer_cb(evutil_socket_t fd, short what, void *arg);

/* Tell g's session how its HELLO GRACE or RESUME ended (not OK). */
static void
answer(struct grace *g, enum grace_status st, const char *why)
{
	g->ops->answer(g->arg, st, g->cid, NULL, why);
}

/* The lock client ops while no session speaks for g. */
static void
ghost_reply(void *arg, const struct lk_result *r)
{
	(void)arg;
	(void)r;
}

static void
ghost_lost(void *arg, const char *key, size_t keylen, long long token)
{
	(void)arg;
	(void)key;
	(void)keylen;
	(void)token;
}

static void
ghost_changed(void *arg, const char *key, size_t keylen, unsigned holds,
    long ttl_ms, long kind, int fresh)
{
	(void)fresh;
	grace_changed(arg, key, keylen, holds, ttl_ms, kind, 0);
}

static int
ghost_doubt(void *arg)
{
	return grace_doubt(arg);
}

static const struct lk_client_ops ghost_ops = { ghost_reply, ghost_lost,
    ghost_changed, ghost_doubt, NULL };

/* --- lifetime --------------------------------------------------------- */

static struct grace *
grace_new(struct broker *b, const char *cid)
{
	struct grace *g = xcalloc(1, sizeof *g);

	g->b = b;
	memcpy(g->cid, cid, CLIENTID_LEN);
	g->cid[CLIENTID_LEN] = '\0';
	owner_copy(g->owner, cid);
	g->gen = 1;
	if ((g->timer = evtimer_new(b->base, timer_cb, g)) == NULL)
		fatalx("cannot create a grace timer");
	TAILQ_INSERT_TAIL(&b->graces, g, link);
	b->stats.grace_sessions++;
	return g;
}

static void
waits_free(struct grace *g)
{
	for (size_t i = 0; i < g->nwaits; i++)
		free(g->waits[i].key);
	free(g->waits);
	g->waits = NULL;
	g->nwaits = 0;
}

static void
grace_unref(struct grace *g)
{
	if (--g->refs > 0 || !g->dead)
		return;
	waits_free(g);
	event_free(g->timer);
	free(g);
}

/* g is settled: out of the table, freed once its calls are answered. */
static void
grace_settle(struct grace *g)
{
	struct broker *b = g->b;

	if (g->dead)
		return;
	if (g->state == G_DETACHED)
		b->stats.detached--;
	g->dead = 1;
	if (g->arg != NULL)
		g->ops->dropped(g->arg);
	g->arg = NULL;
	event_del(g->timer);
	TAILQ_REMOVE(&b->graces, g, link);
	b->stats.grace_sessions--;
	g->refs++;
	grace_unref(g);
}

/* Leave g's holds to Redis (another session owns them, or the broker
 * stops) and settle; taken: a RESUME elsewhere took the session over
 * (what it did not take is released: locks_client_taken). */
static void
grace_leave(struct grace *g, int taken)
{
	struct lclient *cl = g->cl;

	g->cl = NULL;
	if (cl != NULL && taken)
		locks_client_taken(cl);
	else if (cl != NULL)
		locks_client_abandon(cl);
	grace_settle(g);
}

static void
grace_abandon(struct grace *g)
{
	grace_leave(g, 0);
}

static void
timer_in(struct grace *g, long ms)
{
	timer_add_ms(g->timer, ms);
}

static long
touch_period(const struct grace *g)
{
	long p = g->grace_ms / 3;

	return p < TOUCH_MIN_MS ? TOUCH_MIN_MS : p > TOUCH_MAX_MS ?
	    TOUCH_MAX_MS : p;
}

/* An attached record outlives a broker that stops touching it by the
 * grace. */
static long
attached_px(const struct grace *g)
{
	return g->grace_ms + 2 * touch_period(g);
}

/* --- record calls ------------------------------------------------------ */

/* Argument list builder for session.lua. */
struct rargs {
	struct store_str *a;
	size_t n, cap;
	char (*num)[24];		/* numbers written out, one per slot */
	size_t nnum, numcap;
};

#define RARGS(nums) \
	{ .num = (nums), .numcap = sizeof (nums) / sizeof (nums)[0] }

static void
rargs_add(struct rargs *r, const char *p, size_t len)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 16;
		r->a = realloc(r->a, r->cap * sizeof *r->a);
		if (r->a == NULL)
			fatalx("out of memory");
	}
	r->a[r->n++] = (struct store_str){ p, len };
}

static void
rargs_str(struct rargs *r, const char *p)
{
	rargs_add(r, p, strlen(p));
}

/* Numbers live in one array sized up front (no pointer moves). */
static void
rargs_num(struct rargs *r, long long v)
{
	int l;

	if (r->nnum == r->numcap)
		fatalx("grace: more numbers than the call has room for");
	l = snprintf(r->num[r->nnum], sizeof r->num[0], "%lld", v);

	rargs_add(r, r->num[r->nnum++], (size_t)l);
}

struct holdvals {
	struct rargs *r;
	char (*val)[HOLD_VAL_MAX];
	size_t n;
};

/* A hold's value in the record: "<holds> <ttl>" for an exclusive lock
 * (as before shared locks), "<holds> <ttl> <kind>" for a shared hold (0)
 * or a permit (n). */
static int
hold_val(char *buf, unsigned holds, long ttl_ms, long kind)
{
	return kind == LK_EXCLUSIVE ? snprintf(buf, HOLD_VAL_MAX, "%u %ld",
	    holds, ttl_ms) : snprintf(buf, HOLD_VAL_MAX, "%u %ld %ld", holds,
	    ttl_ms, kind);
}

static void
add_hold(void *arg, const char *key, size_t keylen, unsigned holds,
    long ttl_ms, long kind)
{
	struct holdvals *h = arg;
	int l = hold_val(h->val[h->n], holds, ttl_ms, kind);

	rargs_add(h->r, key, keylen);
	rargs_add(h->r, h->val[h->n++], (size_t)l);
}

/* A session.lua call for g; the callback gets arg (g itself, or a
 * struct naming g first). */
static int
record_call_arg(struct grace *g, struct rargs *r, store_session_fn *fn,
    void *arg)
{
	int rc;

	g->refs++;
	rc = store_session(g->b->store, g->cid, CLIENTID_LEN, r->a, r->n,
	    fn, arg);
	if (rc != 0)
		g->refs--;
	return rc;
}

static int
record_call(struct grace *g, struct rargs *r, store_session_fn *fn)
{
	return record_call_arg(g, r, fn, g);
}

/* A fresh grant's record write: which key it was for. */
struct keywrite {
	struct grace *g;
	size_t keylen;
	char key[];
};

static void write_done(void *arg, int ok, long long status,
    const struct store_str *rest, size_t n);
static void check_done(void *arg, int ok, long long status,
    const struct store_str *rest, size_t n);
static void detached_timer(struct grace *g);
static void resumed_done(void *arg, int ok, long long status,
    const struct store_str *rest, size_t n);
static void taken_over(struct grace *g);

/*
 * The whole record: session.lua "write" (op) with the state and every
 * hold.  Used by HELLO GRACE (attached), a detach, a resumed session's
 * first write, and to make the record again when Redis lost it ("write",
 * or "reclaim": only if Redis lost it).  The callback gets arg.
 */
static int
record_write_op(struct grace *g, const char *op, const char *state, long px,
    store_session_fn *fn, void *arg)
{
	size_t nheld = g->cl != NULL ? locks_held(g->cl, NULL, NULL) : 0;
	char num[8][24];
	struct rargs r = RARGS(num);
	struct holdvals h = { &r, NULL, 0 };
	int rc;

	h.val = xcalloc(nheld + 1, sizeof *h.val);
	rargs_str(&r, op);
	rargs_num(&r, (long long)g->gen);
	rargs_str(&r, g->secret);
	rargs_num(&r, g->grace_ms);
	rargs_num(&r, px);
	rargs_str(&r, g->b->id);
	rargs_str(&r, state);
	rargs_str(&r, g->app);
	if (g->cl != NULL)
		locks_holds(g->cl, add_hold, &h);
	rc = record_call_arg(g, &r, fn, arg);
	free(h.val);
	free(r.a);
	return rc;
}

static int
record_write(struct grace *g, const char *state, long px,
    store_session_fn *fn)
{
	return record_write_op(g, "write", state, px, fn, g);
}

static void
noop_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	(void)ok;
	(void)status;
	(void)rest;
	(void)n;
	grace_unref(arg);
}

/* A fresh grant's record write is in: its session may say OK now. */
static void
fresh_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	struct keywrite *kw = arg;
	struct grace *g = kw->g;

	(void)rest;
	(void)n;
	if (!ok)
		log_info("session %s: Redis did not confirm the record of a "
		    "new lock; a RESUME may not give it back", g->cid);
	if (g->dead) {
		/* its session is gone or taken over */
	} else if (ok && status == 0) {
		/* resumed elsewhere: this connection goes, its OK unsaid, and
		 * the new lock (the old generation's, in no record the RESUME
		 * read) is released at once (locks_client_taken) */
		taken_over(g);
	} else if (ok && status < 0 && g->state == G_ATTACHED &&
	    record_write_op(g, "write", "attached", attached_px(g),
	    fresh_done, kw) == 0) {
		/* the record was gone: the OK waits for it written again */
		grace_unref(g);
		return;
	} else {
		if (ok && status > 0 && g->cl != NULL)
			locks_recorded(g->cl, kw->key, kw->keylen);
		if (g->arg != NULL)
			g->ops->recorded(g->arg, kw->key, kw->keylen);
	}
	free(kw);
	grace_unref(g);
}

int
grace_changed(struct grace *g, const char *key, size_t keylen,
    unsigned holds, long ttl_ms, long kind, int fresh)
{
	char num[4][24], val[HOLD_VAL_MAX];
	struct rargs r = RARGS(num);
	int l = holds == 0 ? 0 : hold_val(val, holds, ttl_ms, kind), rc;

	if (g == NULL || g->dead || g->quiet || g->opening ||
	    g->state == G_RESUMING)
		return 0;
	rargs_str(&r, "key");
	rargs_num(&r, (long long)g->gen);
	rargs_add(&r, key, keylen);
	rargs_add(&r, val, (size_t)l);
	fresh = fresh && g->arg != NULL;
	if (fresh) {
		struct keywrite *kw = xmalloc(sizeof *kw + keylen);

		kw->g = g;
		kw->keylen = keylen;
		memcpy(kw->key, key, keylen);
		if ((rc = record_call_arg(g, &r, fresh_done, kw)) != 0)
			free(kw);
	} else {
		rc = record_call(g, &r, noop_done);
	}
	if (rc != 0)
		log_debug("session %s: record of '%.*s' not written (Redis "
		    "unreachable)", g->cid, (int)keylen, key);
	free(r.a);
	return fresh && rc == 0;
}

/* One field of the record that nothing waits for: op "wait" or "watch",
 * val "" to delete it. */
static int
record_field(struct grace *g, const char *op, const char *key, size_t keylen,
    const char *val)
{
	char num[4][24];
	struct rargs r = RARGS(num);
	int rc;

	if (g == NULL || g->dead || g->opening || g->state == G_RESUMING)
		return -1;
	rargs_str(&r, op);
	rargs_num(&r, (long long)g->gen);
	rargs_add(&r, key, keylen);
	rargs_str(&r, val);
	rc = record_call(g, &r, noop_done);
	free(r.a);
	return rc;
}

int
grace_wait(struct grace *g, const char *key, size_t keylen, const char *val)
{
	return record_field(g, "wait", key, keylen, val != NULL ? val : "");
}

int
grace_watch(struct grace *g, const char *key, size_t keylen, int on)
{
	return record_field(g, "watch", key, keylen, on ? "1" : "");
}

static int
record_simple(struct grace *g, const char *op, long long arg,
    const char *arg2, store_session_fn *fn)
{
	char num[4][24];
	struct rargs r = RARGS(num);
	int rc;

	rargs_str(&r, op);
	rargs_num(&r, (long long)g->gen);
	rargs_num(&r, arg);
	if (arg2 != NULL)
		rargs_str(&r, arg2);
	rc = record_call(g, &r, fn);
	free(r.a);
	return rc;
}

/* --- attached: HELLO GRACE, touches ------------------------------------ */


/* Another connection resumed the session: this one must go, and its
 * broker forget the holds (they are the other connection's now). */
static void
taken_over(struct grace *g)
{
	log_info("session %s was resumed on another connection", g->cid);
	if (g->state == G_ATTACHED && g->arg != NULL) {
		/* ends at once in grace_session_end(GRACE_TAKEN) */
		g->ops->taken(g->arg);
		return;
	}
	if (g->state == G_RESUMING && g->arg != NULL)
		answer(g, GRACE_NOSESSION, "another connection resumed the "
		    "session meanwhile");
	grace_leave(g, 1);
}

/*
 * HELLO GRACE not recorded: a session made a grace one by it is not; a
 * grace session already (HELLO GRACE again) keeps the grace its record
 * has, and is told so.
 */
static void
opening_failed(struct grace *g, const char *why)
{
	const struct grace_ops *ops = g->ops;
	void *arg = g->arg;		/* g may be freed by grace_settle */
	char text[160];

	if (g->fresh) {
		g->cl = NULL;		/* the session's */
		grace_settle(g);
		snprintf(text, sizeof text, "%s; it has no grace", why);
	} else {
		g->grace_ms = g->old_grace_ms;
		if (g->state == G_ATTACHED)
			timer_in(g, touch_period(g));
		snprintf(text, sizeof text, "%s; the session keeps its grace "
		    "of %ld ms", why, g->grace_ms);
	}
	ops->answer(arg, GRACE_UNAVAILABLE, NULL, NULL, text);
}

static void
write_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	struct grace *g = arg;

	(void)rest;
	(void)n;
	if (!g->dead && g->opening && g->arg == NULL) {
		g->opening = 0;		/* its connection is gone */
	} else if (!g->dead && g->opening) {
		g->opening = 0;
		if (!ok) {
			opening_failed(g, "Redis did not record the session");
		} else if (status == 0) {
			/* resumed elsewhere: like any request of a replaced
			 * connection, no answer; the connection goes */
			taken_over(g);
		} else {
			g->fresh = 0;
			g->ops->answer(g->arg, GRACE_OK, g->cid, g->secret,
			    NULL);
		}
	} else if (!g->dead && ok && status == 0) {
		taken_over(g);
	}
	grace_unref(g);
}

static void
random_secret(char out[GRACE_SECRET_LEN + 1])
{
	unsigned char raw[GRACE_SECRET_LEN / 2];
	size_t got = 0;

	while (got < sizeof raw) {
		ssize_t n = getrandom(raw + got, sizeof raw - got, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fatalx("getrandom: %s", strerror(errno));
		got += (size_t)n;
	}
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

void
grace_hello(struct broker *b, const struct grace_ops *ops, void *arg,
    struct grace **gp, struct lclient *cl, const char *id, long grace_ms,
    const char *app)
{
	struct grace *g = *gp;

	if (g == NULL) {
		g = *gp = grace_new(b, id);
		random_secret(g->secret);
		g->state = G_ATTACHED;
		g->fresh = 1;
	}
	g->ops = ops;
	g->arg = arg;
	g->cl = cl;
	snprintf(g->app, sizeof g->app, "%s", app);
	locks_client_resumable(cl);
	g->old_grace_ms = g->grace_ms;
	g->grace_ms = grace_ms;
	g->opening = 1;
	if (record_write(g, "attached", attached_px(g), write_done) != 0) {
		g->opening = 0;
		opening_failed(g, "Redis is unreachable");
		return;
	}
	timer_in(g, touch_period(g));
}

/* --- checks: resumed elsewhere, or lost? ------------------------------ */

/* The time left of a detached grace. */
static long
grace_left(const struct grace *g)
{
	int64_t left = g->end_at - now_ms();

	return left > 0 ? (long)left : 0;
}

/* The record the broker would write for g now: its state and PX. */
static const char *
record_state(const struct grace *g, long *px)
{
	if (g->state == G_DETACHED) {
		*px = grace_left(g) + DETACHED_SLACK_MS;
		return "detached";
	}
	*px = attached_px(g);
	return "attached";
}

static void
reclaim_done(void *arg, int ok, long long status,
    const struct store_str *rest, size_t n)
{
	struct grace *g = arg;

	(void)rest;
	(void)n;
	if (!g->dead && ok && status == 0)
		taken_over(g);
	else if (!g->dead && ok && status == 2)
		log_info("session %s: its record was gone from Redis; written "
		    "again (generation %lu, %zu lock(s))", g->cid, g->gen,
		    g->cl != NULL ? locks_held(g->cl, NULL, NULL) : 0);
	grace_unref(g);
}

/* Write g's record again if Redis lost it (a check found none, or the
 * connection to Redis came back: a restart or a failover may have lost
 * it).  Only an attached or detached session has a record to write. */
static void
record_reclaim(struct grace *g)
{
	const char *state;
	long px;

	if (g->dead || g->opening || (g->state != G_ATTACHED &&
	    g->state != G_DETACHED))
		return;
	state = record_state(g, &px);
	if (record_write_op(g, "reclaim", state, px, reclaim_done, g) != 0)
		log_debug("session %s: record not reclaimed (Redis "
		    "unreachable)", g->cid);
}

/* A periodic touch (attached) or check (detached) of g's record. */
static void
check_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	struct grace *g = arg;

	(void)rest;
	(void)n;
	if (!g->dead && ok && status == 0)
		taken_over(g);
	else if (!g->dead && ok && status < 0)
		record_reclaim(g);
	grace_unref(g);
}

/* The check a lost lock asked for (grace_doubt). */
static void
doubt_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	struct grace *g = arg;

	(void)rest;
	(void)n;
	if (g->dead || g->cl == NULL) {
		/* settled meanwhile: its lock client is gone */
	} else if (ok && status == 0) {
		taken_over(g);
	} else {
		/* still this session's (or Redis cannot say): lost */
		if (ok && status < 0)
			record_reclaim(g);
		locks_doubt_settled(g->cl);
	}
	grace_unref(g);
}

int
grace_doubt(struct grace *g)
{
	if (g == NULL || g->dead)
		return 0;
	if (g->state == G_ENDING)
		return 1;	/* the end decides: freed, or taken over */
	return record_simple(g, "check", 0, NULL, doubt_done) == 0;
}

void
grace_store_up(struct broker *b)
{
	struct grace *g;

	if (b->stopping)
		return;
	TAILQ_FOREACH(g, &b->graces, link)
		record_reclaim(g);
}

/* --- detached: the grace runs ------------------------------------------ */

static void end_send(struct grace *g);

/* Next: a check of the record, or the grace's end if sooner. */
static void
detached_timer(struct grace *g)
{
	long left = grace_left(g), p = touch_period(g);

	timer_in(g, left < p ? left : p);
}

static void
end_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	struct grace *g = arg;
	struct lclient *cl;

	(void)rest;
	(void)n;
	if (g->dead || g->state != G_ENDING) {
		grace_unref(g);
		return;
	}
	if ((ok && status == 1) || (!ok && g->quit &&
	    g->ends + 1 >= END_TRIES)) {
		/* no RESUME can take them now (or, after QUIT, Redis cannot
		 * say): free them as any session's, pending list included.
		 * A grace that ran out counts once it won: one that a RESUME
		 * elsewhere had taken over ended nothing here. */
		if (!g->quit)
			g->b->stats.grace_expired++;
		cl = g->cl;
		g->cl = NULL;
		locks_client_free(cl);
		grace_settle(g);
	} else if (ok) {
		taken_over(g);
	} else if (++g->ends < END_TRIES) {
		timer_in(g, END_RETRY_MS);
	} else {
		log_warn("session %s: Redis did not settle its record; its "
		    "locks are left to expire at their TTL", g->cid);
		grace_abandon(g);
	}
	grace_unref(g);
}

static void
end_send(struct grace *g)
{
	g->state = G_ENDING;
	if (record_simple(g, "end", TOMBSTONE_MS, g->quit ? "ended" :
	    "expired", end_done) != 0) {
		g->refs++;
		end_done(g, 0, 0, NULL, 0);
	}
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct grace *g = arg;

	(void)fd;
	(void)what;
	switch (g->state) {
	case G_ATTACHED:
		if (record_simple(g, "touch", attached_px(g), NULL,
		    check_done) != 0)
			log_debug("session %s: record not touched (Redis "
			    "unreachable)", g->cid);
		timer_in(g, touch_period(g));
		break;
	case G_DETACHED:
		if (now_ms() < g->end_at) {
			/* resumed elsewhere meanwhile?  (no other news may
			 * come: a session without locks has no renewals) */
			if (record_simple(g, "check", 0, NULL, check_done) != 0)
				log_debug("session %s: record not checked "
				    "(Redis unreachable)", g->cid);
			detached_timer(g);
			break;
		}
		log_info("session %s: its grace of %ld ms ran out", g->cid,
		    g->grace_ms);
		g->b->stats.detached--;
		end_send(g);
		break;
	case G_ENDING:
		end_send(g);
		break;
	case G_RESUMING:
		break;
	}
}

void
grace_session_end(struct grace *g, struct lclient *cl, enum grace_end how)
{
	g->arg = NULL;
	if (g->state == G_RESUMING) {
		/* cl is the session's own, empty; the resumed holds are
		 * g->cl, detached when the takeovers are in (resume_finish) */
		locks_client_free(cl);
		return;
	}
	g->cl = cl;
	event_del(g->timer);
	locks_client_handover(cl, &ghost_ops, g, 1);
	if (g->opening && g->fresh && how == GRACE_LOST) {
		/* gone before it heard its secret: nobody can resume it */
		how = GRACE_QUIT;
	}
	g->opening = 0;		/* nobody to answer */
	if (how == GRACE_TAKEN || g->dead) {
		grace_leave(g, how == GRACE_TAKEN);
		return;
	}
	if (how == GRACE_QUIT) {
		g->quit = 1;
		end_send(g);
		return;
	}
	g->state = G_DETACHED;
	g->end_at = now_ms() + g->grace_ms;
	g->b->stats.detached++;
	if (!g->b->stopping)
		log_info("session %s: connection ended without QUIT; its %zu "
		    "lock(s) are kept for its grace of %ld ms", g->cid,
		    locks_held(cl, NULL, NULL), g->grace_ms);
	if (record_write(g, "detached", g->grace_ms + DETACHED_SLACK_MS,
	    write_done) != 0)
		log_info("session %s: Redis unreachable; the record says it "
		    "is attached until it expires", g->cid);
	if (g->b->stopping)
		return;		/* grace_stop leaves it to Redis */
	detached_timer(g);
}

size_t
grace_stop(struct broker *b, int final)
{
	struct grace *g, *next;
	size_t n = 0, locks = 0;

	for (g = TAILQ_FIRST(&b->graces); g != NULL; g = next) {
		next = TAILQ_NEXT(g, link);
		if (final && g->state != G_DETACHED) {
			if (g->arg != NULL && g->state == G_RESUMING)
				answer(g, GRACE_UNAVAILABLE, "the broker is "
				    "stopping");
			grace_abandon(g);
			continue;
		}
		if (g->state != G_DETACHED)
			continue;
		n++;
		locks += g->cl != NULL ? locks_held(g->cl, NULL, NULL) : 0;
		grace_abandon(g);
	}
	if (n > 0)
		log_info("stopping: %zu detached grace session(s) with %zu "
		    "lock(s) left in Redis for RESUME on another broker; "
		    "unless resumed, the locks expire at their TTL", n, locks);
	return n;
}

/* --- resuming ----------------------------------------------------------- */

static void
resume_finish(struct grace *g)
{
	g->quiet = 0;
	if (g->failed) {
		/* Some keys are the new generation's in Redis, some maybe
		 * not: a RESUME again takes them all (any earlier
		 * generation's value is taken over). */
		if (g->arg != NULL)
			answer(g, GRACE_UNAVAILABLE, "Redis did not answer for "
			    "every key; send RESUME again");
		grace_abandon(g);
		return;
	}
	/* OK only once the record, checked against this generation, says
	 * so: a RESUME that raced this one and came later has won. */
	if (record_write(g, "attached", attached_px(g), resumed_done) != 0) {
		g->refs++;
		resumed_done(g, 0, 0, NULL, 0);
	}
}

static void
resumed_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	struct grace *g = arg;

	(void)rest;
	(void)n;
	if (g->dead) {
		grace_unref(g);
		return;
	}
	if (!ok || status != 1) {
		if (g->arg != NULL)
			answer(g, ok ? GRACE_NOSESSION : GRACE_UNAVAILABLE, ok ?
			    "another connection resumed the session meanwhile" :
			    "Redis did not confirm the session; send RESUME "
			    "again");
		grace_abandon(g);
		grace_unref(g);
		return;
	}
	g->b->stats.resumes++;
	log_info("session %s resumed (generation %lu) with %zu lock(s)",
	    g->cid, g->gen, locks_held(g->cl, NULL, NULL));
	g->state = G_ATTACHED;
	if (g->arg == NULL) {
		/* its new connection is gone already */
		grace_session_end(g, g->cl, GRACE_LOST);
	} else {
		timer_in(g, touch_period(g));
		g->ops->resumed(g->arg, g, g->cl, g->cid);
		/* then the waits it had queued, queued again by the session,
		 * and the keys it watched, watched again */
		for (size_t i = 0; i < g->nwaits && g->arg != NULL &&
		    !g->dead; i++) {
			const struct gwait *w = &g->waits[i];

			if (w->watch && g->ops->watch_found != NULL)
				g->ops->watch_found(g->arg, w->key, w->keylen);
			else if (!w->watch && g->ops->wait_found != NULL)
				g->ops->wait_found(g->arg, w->key, w->keylen,
				    w->val);
		}
	}
	waits_free(g);
	grace_unref(g);
}

static void
released_done(void *arg, int ok, int released)
{
	(void)ok;
	(void)released;
	grace_unref(arg);
}

static void
takeover_done(void *arg, int ok, int granted, long long token,
    const char *text, size_t textlen)
{
	struct takeover *t = arg;
	struct grace *g = t->g;

	/* (text: the hold's value, which goes on with it) */
	if (!ok) {
		g->failed = 1;
	} else if (granted == 1 && !g->dead && locks_adopt(g->cl, t->key,
	    t->keylen, t->kind, token, t->holds, t->ttl_ms, t->sent_us, text,
	    textlen) != 0) {
		/* a stale hold here is being released: rare; free the key
		 * rather than leave it taken, unlisted, until its TTL */
		log_warn("session %s: '%.*s' was being released here by "
		    "another session; not resumed, freed", g->cid,
		    (int)t->keylen, t->key);
		g->refs++;
		if (store_release(g->b->store, t->key, t->keylen, g->owner,
		    strlen(g->owner), token, 1, released_done, g) != 0)
			g->refs--;
	}
	free(t);
	if (--g->pending == 0 && !g->dead)
		resume_finish(g);
	grace_unref(g);
}

/* "<holds> <ttl> [<kind>]" as written by hold_val. */
static void
hold_parse(const struct store_str *v, unsigned *holds, long *ttl, long *kind)
{
	char buf[HOLD_VAL_MAX];
	size_t l = v->len < sizeof buf - 1 ? v->len : sizeof buf - 1;
	char *end, *kend;

	memcpy(buf, v->p, l);
	buf[l] = '\0';
	*holds = (unsigned)strtoul(buf, &end, 10);
	*ttl = strtol(end, &end, 10);
	*kind = strtol(end, &kend, 10);
	if (kend == end || *kind < 0 || *kind > GRACE_PERMITS_MAX)
		*kind = LK_EXCLUSIVE;
	if (*holds == 0)
		*holds = 1;
}

/*
 * The connections of this broker that g's RESUME replaced: earlier
 * generations of its client-id, a RESUME in progress included once Redis
 * gave it its (lower) generation.  One still waiting for that is left
 * alone: it comes later, so it wins, and the record tells g so
 * (resumed_done).
 */
static void
take_over_local(struct grace *g)
{
	struct grace *o, *next;

	for (o = TAILQ_FIRST(&g->b->graces); o != NULL; o = next) {
		next = TAILQ_NEXT(o, link);
		if (o != g && o->gen < g->gen && (o->state != G_RESUMING ||
		    o->gen > 1) && strcmp(o->cid, g->cid) == 0) {
			/* may free other entries (a session's): restart */
			taken_over(o);
			next = TAILQ_FIRST(&g->b->graces);
		}
	}
}

/* The record's queued waits (key, value pairs), then after an empty pair
 * its watched keys, kept for the session until the RESUME is answered. */
static void
waits_read(struct grace *g, const struct store_str *w, size_t n)
{
	int watches = 0;

	waits_free(g);
	g->waits = xcalloc(n / 2 + 1, sizeof *g->waits);
	for (size_t i = 0; i + 1 < n; i += 2) {
		struct gwait *gw = &g->waits[g->nwaits];
		size_t l = w[i + 1].len < sizeof gw->val - 1 ? w[i + 1].len :
		    sizeof gw->val - 1;

		if (w[i].len == 0) {
			watches = 1;
			continue;
		}
		gw->watch = watches;
		gw->key = xstrndup(w[i].p, w[i].len);
		gw->keylen = w[i].len;
		memcpy(gw->val, w[i + 1].p, l);
		gw->val[l] = '\0';
		g->nwaits++;
	}
}

static void
resume_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	struct grace *g = arg;

	if (g->dead) {
		grace_unref(g);
		return;
	}
	if (!ok || status != 1 || n < 2) {
		if (g->arg != NULL && !ok)
			answer(g, GRACE_UNAVAILABLE, "Redis is unreachable");
		else if (g->arg != NULL && status == -3)
			answer(g, GRACE_BADSECRET, "wrong secret");
		else if (g->arg != NULL && status == -2)
			answer(g, GRACE_NOSESSION, "the session expired: its "
			    "grace ran out and its locks were freed");
		else if (g->arg != NULL && status == -4)
			answer(g, GRACE_NOSESSION, "the session ended with "
			    "QUIT");
		else if (g->arg != NULL && status == -5)
			answer(g, GRACE_DENIED, "the session is another app's");
		else if (g->arg != NULL)
			answer(g, GRACE_NOSESSION, "no such session: it never "
			    "had a grace, or it ended");
		if (status == -3)
			g->b->stats.resume_refused++;
		grace_settle(g);
		grace_unref(g);
		return;
	}
	g->gen = strtoul(rest[0].p, NULL, 10);
	g->grace_ms = strtol(rest[1].p, NULL, 10);
	snprintf(g->owner, sizeof g->owner, "%s/%lu", g->cid, g->gen);
	/* the connection it replaces, if it is this broker's */
	take_over_local(g);
	g->cl = locks_client_new(g->b->locks, g->owner, &ghost_ops, g);
	locks_client_resumable(g->cl);
	g->quiet = 1;
	g->pending = 1;		/* this loop, until it is over */
	for (size_t i = 2; i + 1 < n; i += 2) {
		struct takeover *t;

		if (rest[i].len == 0) {
			/* the holds end here: the queued waits follow */
			waits_read(g, rest + i + 2, n - i - 2);
			break;
		}
		t = xmalloc(sizeof *t + rest[i].len);

		t->g = g;
		t->keylen = rest[i].len;
		memcpy(t->key, rest[i].p, rest[i].len);
		hold_parse(&rest[i + 1], &t->holds, &t->ttl_ms, &t->kind);
		t->sent_us = now_us();
		g->refs++;
		g->pending++;
		if (store_takeover(g->b->store, t->key, t->keylen, g->cid,
		    CLIENTID_LEN, g->gen, t->ttl_ms, takeover_done, t) != 0) {
			g->refs--;
			g->pending--;
			g->failed = 1;
			free(t);
		}
	}
	if (--g->pending == 0)
		resume_finish(g);
	grace_unref(g);
}

struct grace *
grace_resume(struct broker *b, const struct grace_ops *ops, void *arg,
    const char *id, size_t idlen, const char *secret, size_t secretlen,
    const char *app)
{
	char cid[CLIENTID_LEN + 1];
	struct grace *g;
	char num[4][24];
	struct rargs r = RARGS(num);

	for (size_t i = 0; i < idlen; i++)
		if (strchr("0123456789abcdef-", id[i]) == NULL || id[i] == '\0')
			idlen = 0;
	if (idlen != CLIENTID_LEN) {
		ops->answer(arg, GRACE_BADARG, NULL, NULL, "not a client-id");
		return NULL;
	}
	memcpy(cid, id, CLIENTID_LEN);
	cid[CLIENTID_LEN] = '\0';
	if (!store_is_up(b->store)) {
		/* Redis unreachable, or (Sentinel mode) no lease: nothing
		 * may be taken over, and the record must not move yet */
		ops->answer(arg, GRACE_UNAVAILABLE, NULL, NULL, "Redis is "
		    "unreachable");
		return NULL;
	}
	g = grace_new(b, cid);
	g->state = G_RESUMING;
	g->ops = ops;
	g->arg = arg;
	snprintf(g->app, sizeof g->app, "%s", app);
	memcpy(g->secret, secret, secretlen < GRACE_SECRET_LEN ? secretlen :
	    GRACE_SECRET_LEN);
	rargs_str(&r, "resume");
	rargs_add(&r, secret, secretlen);
	rargs_str(&r, b->id);
	rargs_num(&r, RESUME_SLACK_MS);
	rargs_str(&r, g->app);
	if (record_call(g, &r, resume_done) != 0) {
		answer(g, GRACE_UNAVAILABLE, "Redis is unreachable");
		grace_settle(g);
		g = NULL;
	}
	free(r.a);
	return g;
}
