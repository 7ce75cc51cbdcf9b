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
#include "grace_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static void timer_cb(evutil_socket_t fd, short what, void *arg);

/* Tell g's session how its HELLO GRACE or RESUME ended (not OK). */
void
grace_answer(struct grace *g, enum grace_status st, const char *why)
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
    long ttl_ms, long kind, long delay_ms, int fresh)
{
	(void)fresh;
	grace_changed(arg, key, keylen, holds, ttl_ms, kind, delay_ms, 0);
}

static int
ghost_doubt(void *arg)
{
	return grace_doubt(arg);
}

const struct lk_client_ops grace_ghost_ops = { ghost_reply, ghost_lost,
    ghost_changed, ghost_doubt, NULL, NULL };

/* --- lifetime --------------------------------------------------------- */

struct grace *
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

/* g is settled: out of the table, freed once its calls are answered. */
void
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

void
grace_abandon(struct grace *g)
{
	grace_leave(g, 0);
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
		grace_taken_over(g);
	} else if (ok && status < 0 && g->state == G_ATTACHED &&
	    grace_record_write_op(g, "write", "attached", grace_attached_px(g),
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
    unsigned holds, long ttl_ms, long kind, long delay_ms, int fresh)
{
	char num[4][24], val[HOLD_VAL_MAX];
	struct rargs r = RARGS(num);
	int l = holds == 0 ? 0 : grace_hold_val(val, holds, ttl_ms, kind,
	    delay_ms), rc;

	if (g == NULL || g->dead || g->quiet || g->opening ||
	    g->state == G_RESUMING)
		return 0;
	grace_rargs_str(&r, "key");
	grace_rargs_num(&r, (long long)g->gen);
	grace_rargs_add(&r, key, keylen);
	grace_rargs_add(&r, val, (size_t)l);
	fresh = fresh && g->arg != NULL;
	if (fresh) {
		struct keywrite *kw = xmalloc(sizeof *kw + keylen);

		kw->g = g;
		kw->keylen = keylen;
		memcpy(kw->key, key, keylen);
		if ((rc = grace_record_call_arg(g, &r, fresh_done, kw)) != 0)
			free(kw);
	} else {
		rc = grace_record_call(g, &r, grace_noop_done);
	}
	if (rc != 0)
		log_debug("session %s: record of '%.*s' not written (Redis "
		    "unreachable)", g->cid, (int)keylen, key);
	free(r.a);
	return fresh && rc == 0;
}

/* --- attached: HELLO GRACE, touches ------------------------------------ */

/* Another connection resumed the session: this one must go, and its
 * broker forget the holds (they are the other connection's now). */
void
grace_taken_over(struct grace *g)
{
	log_info("session %s was resumed on another connection", g->cid);
	if (g->state == G_ATTACHED && g->arg != NULL) {
		/* ends at once in grace_session_end(GRACE_TAKEN) */
		g->ops->taken(g->arg);
		return;
	}
	if (g->state == G_RESUMING && g->arg != NULL)
		grace_answer(g, GRACE_NOSESSION, "another connection resumed the "
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
			grace_timer_in(g, grace_touch_period(g));
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
			grace_taken_over(g);
		} else {
			g->fresh = 0;
			g->ops->answer(g->arg, GRACE_OK, g->cid, g->secret,
			    NULL);
		}
	} else if (!g->dead && ok && status == 0) {
		grace_taken_over(g);
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
	if (grace_record_write(g, "attached", grace_attached_px(g), write_done) != 0) {
		g->opening = 0;
		opening_failed(g, "Redis is unreachable");
		return;
	}
	grace_timer_in(g, grace_touch_period(g));
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
	*px = grace_attached_px(g);
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
		grace_taken_over(g);
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
	if (grace_record_write_op(g, "reclaim", state, px, reclaim_done, g) != 0)
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
		grace_taken_over(g);
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
		grace_taken_over(g);
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
	return grace_record_simple(g, "check", 0, NULL, doubt_done) == 0;
}

void
grace_store_up(struct broker *b)
{
	struct grace *g;

	if (b->stopping)
		return;
	TAILQ_FOREACH(g, &b->graces, link) {
		record_reclaim(g);
		grace_fields_flush(g);
	}
}

/* --- detached: the grace runs ------------------------------------------ */

static void end_send(struct grace *g);

/* Next: a check of the record, or the grace's end if sooner. */
static void
detached_timer(struct grace *g)
{
	long left = grace_left(g), p = grace_touch_period(g);

	grace_timer_in(g, left < p ? left : p);
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
		grace_taken_over(g);
	} else if (++g->ends < END_TRIES) {
		grace_timer_in(g, END_RETRY_MS);
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
	if (grace_record_simple(g, "end", TOMBSTONE_MS, g->quit ? "ended" :
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
		if (grace_record_simple(g, "touch", grace_attached_px(g), NULL,
		    check_done) != 0)
			log_debug("session %s: record not touched (Redis "
			    "unreachable)", g->cid);
		grace_fields_flush(g);
		grace_timer_in(g, grace_touch_period(g));
		break;
	case G_DETACHED:
		grace_fields_flush(g);
		if (now_ms() < g->end_at) {
			/* resumed elsewhere meanwhile?  (no other news may
			 * come: a session without locks has no renewals) */
			if (grace_record_simple(g, "check", 0, NULL, check_done) != 0)
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
	locks_client_handover(cl, &grace_ghost_ops, g, 1);
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
	if (grace_record_write(g, "detached", g->grace_ms + DETACHED_SLACK_MS,
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
				grace_answer(g, GRACE_UNAVAILABLE, "the broker is "
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
/* --- the admin view ---------------------------------------------------- */

long
grace_ms(const struct grace *g)
{
	return g->grace_ms;
}

void
grace_set_name(struct grace *g, const char *name)
{
	snprintf(g->name, sizeof g->name, "%s", name);
}

void
grace_each_detached(struct broker *b, void (*fn)(void *arg,
    const struct grace_detached *d), void *arg)
{
	struct grace *g;
	int64_t now = now_ms();

	TAILQ_FOREACH(g, &b->graces, link) {
		struct grace_detached d;

		if (g->state != G_DETACHED || g->dead)
			continue;
		d.cid = g->cid;
		d.name = g->name;
		d.app = g->app;
		d.grace_ms = g->grace_ms;
		d.left_ms = grace_left(g);
		d.since_ms = (long long)(now - (g->end_at - g->grace_ms));
		d.held = g->cl != NULL ? locks_held(g->cl, NULL, NULL) : 0;
		fn(arg, &d);
	}
}

int
grace_kill(struct broker *b, const char *cid)
{
	struct grace *g;

	TAILQ_FOREACH(g, &b->graces, link)
		if (g->state == G_DETACHED && !g->dead &&
		    memcmp(g->cid, cid, CLIENTID_LEN) == 0)
			break;
	if (g == NULL)
		return 0;
	log_info("session %s (detached): ended by an admin (KILL); its %zu "
	    "lock(s) are freed now", g->cid, g->cl != NULL ?
	    locks_held(g->cl, NULL, NULL) : 0);
	b->stats.detached--;
	g->quit = 1;
	locks_client_clean(g->cl);	/* no lock delay after a KILL */
	event_del(g->timer);
	end_send(g);
	return 1;
}
