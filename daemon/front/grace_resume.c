/*
 * grace_resume.c - RESUME: a session taken over from its record (on this
 * broker or another), its keys taken over one by one (takeover.lua, their
 * values with them), its queued waits and watched keys handed to the new
 * session (grace_int.h).
 */
#include "grace_int.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One key being taken over by a resumed session. */
struct takeover {
	struct grace *g;
	unsigned holds;
	long ttl_ms;
	int64_t sent_us;		/* when takeover.lua was sent */
	long kind;
	long delay_ms;			/* its lock delay, 0: none */
	size_t keylen;
	char key[];
};

/* --- resuming ----------------------------------------------------------- */

static void resumed_done(void *arg, int ok, long long status,
    const struct store_str *rest, size_t n);

static void
resume_finish(struct grace *g)
{
	g->quiet = 0;
	if (g->failed) {
		/* Some keys are the new generation's in Redis, some maybe
		 * not: a RESUME again takes them all (any earlier
		 * generation's value is taken over). */
		if (g->arg != NULL)
			grace_answer(g, GRACE_UNAVAILABLE, "Redis did not answer for "
			    "every key; send RESUME again");
		grace_abandon(g);
		return;
	}
	/* OK only once the record, checked against this generation, says
	 * so: a RESUME that raced this one and came later has won. */
	if (grace_record_write(g, "attached", grace_attached_px(g), resumed_done) != 0) {
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
			grace_answer(g, ok ? GRACE_NOSESSION : GRACE_UNAVAILABLE, ok ?
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
		grace_timer_in(g, grace_touch_period(g));
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
	grace_waits_free(g);
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
	    textlen, t->delay_ms) != 0) {
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

/* "<holds> <ttl> [<kind> [<delay>]]" as written by grace_hold_val. */
static void
hold_parse(const struct store_str *v, unsigned *holds, long *ttl, long *kind,
    long *delay_ms)
{
	char buf[HOLD_VAL_MAX];
	size_t l = v->len < sizeof buf - 1 ? v->len : sizeof buf - 1;
	char *end, *kend;

	memcpy(buf, v->p, l);
	buf[l] = '\0';
	*holds = (unsigned)strtoul(buf, &end, 10);
	*ttl = strtol(end, &end, 10);
	*kind = strtol(end, &kend, 10);
	*delay_ms = kend != end && *kind == LK_EXCLUSIVE ?
	    strtol(kend, NULL, 10) : 0;
	if (*delay_ms < 0 || *delay_ms > GRACE_DELAY_MAX)
		*delay_ms = 0;
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
			grace_taken_over(o);
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

	grace_waits_free(g);
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
			grace_answer(g, GRACE_UNAVAILABLE, "Redis is unreachable");
		else if (g->arg != NULL && status == -3)
			grace_answer(g, GRACE_BADSECRET, "wrong secret");
		else if (g->arg != NULL && status == -2)
			grace_answer(g, GRACE_NOSESSION, "the session expired: its "
			    "grace ran out and its locks were freed");
		else if (g->arg != NULL && status == -4)
			grace_answer(g, GRACE_NOSESSION, "the session ended with "
			    "QUIT");
		else if (g->arg != NULL && status == -5)
			grace_answer(g, GRACE_DENIED, "the session is another app's");
		else if (g->arg != NULL)
			grace_answer(g, GRACE_NOSESSION, "no such session: it never "
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
	g->cl = locks_client_new(g->b->locks, g->owner, &grace_ghost_ops, g);
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
		hold_parse(&rest[i + 1], &t->holds, &t->ttl_ms, &t->kind,
		    &t->delay_ms);
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
	grace_rargs_str(&r, "resume");
	grace_rargs_add(&r, secret, secretlen);
	grace_rargs_str(&r, b->id);
	grace_rargs_num(&r, RESUME_SLACK_MS);
	grace_rargs_str(&r, g->app);
	if (grace_record_call(g, &r, resume_done) != 0) {
		grace_answer(g, GRACE_UNAVAILABLE, "Redis is unreachable");
		grace_settle(g);
		g = NULL;
	}
	free(r.a);
	return g;
}