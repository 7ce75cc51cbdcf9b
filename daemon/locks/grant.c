/*
 * grant.c - who tries next.  lock_pump walks a key's FIFO from the head
 * and sends an attempt for each waiter that may go now; the first that
 * may not stops the walk (may_try).  An attempt's answer grants the key
 * (grant_local), keeps the waiter queued (held elsewhere: a wake or the
 * holder's PTTL; a lock delay; Redis refusing: a backoff), or answers it.
 * Also here: a wait's deadline, grants nobody takes any more (orphans,
 * released at once, and a release's answer), and ACQUIRE itself.
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#define PTTL_RETRY_MAX (86400LL * 1000)		/* longest retry timer */
#define REFUSED_MIN_MS 50		/* an attempt Redis refused: tried */
#define REFUSED_MAX_MS 1000		/* again with backoff */

/*
 * A grant whose reply took 2/3 of its TTL (a paused broker, a Redis stall
 * shorter than the watchdog) may expire before its first renewal lands:
 * it is released, not passed on.
 */
int
grant_too_late(int64_t sent_us, long ttl_ms)
{
	return (now_us() - sent_us) * 3 >= (int64_t)ttl_ms * 2000;
}

static void attempt_done(void *arg, int ok, int granted, long long n,
    long more);

/*
 * Tokens to ask Redis to set aside with an exclusive grant to w: some
 * when the waiter behind it could take the key from w early (w's TTL
 * outlasts its first renewal), none otherwise: each token set aside
 * raises the counter, which must not outrun the clock (tenure.lua).
 */
long
chain_want(const struct lclient *w)
{
	const struct lclient *n = w->wnext;

	return n != NULL && n->wkind == LK_EXCLUSIVE && w->wttl >
	    lk_renew_period(n->wttl) + PASS_MARGIN_MS ? PASS_BLOCK : 0;
}

/*
 * w's wait is over: it holds the key now (token, its TTL counted from
 * sent_us, as the request was sent) and is told so; since_us: when the
 * key was seen free for it (the handoff histogram), or 0.
 */
struct hold *
grant_local(struct lock *lk, struct lclient *w, long kind, long long token,
    int64_t sent_us, int64_t since_us)
{
	struct locks *lt = lk->lt;
	int64_t t = now_us();
	char *value = w->wvalue;	/* written with the grant: the hold's */
	struct hold *h;
	int marked = mark_take(w), recorded = w->rrecorded;

	histo_observe(&lt->stats.acquire_wait, t - w->wstart_us);
	if (since_us != 0)
		histo_observe(&lt->stats.handoff, t - since_us);
	w->wvalue = NULL;
	w->rrecorded = 0;
	waiter_remove(w);
	h = hold_start(lk, lk_holder(w), kind, token, w->wttl, sent_us,
	    w->wdelay);
	h->value = value;
	lt->stats.acquires++;
	lk_reply_waited(w, token, t - w->wstart_us);
	/* Redis's book-keeping of the wait after the answer, which it would
	 * only delay (each call sent wakes Redis, on the client's cores) */
	if (marked)
		mark_left(w, lk, STORE_WMARK_GRANTED);
	if (recorded)
		waiter_unrecord_of(w, lk, h->value);
	return h;
}

/*
 * max_locks_per_session binds every path to a new hold, not only the
 * request: a queued wait (ASYNC, or a blocking ACQUIRE while the session's
 * ASYNC grants fill its quota) whose turn comes while its session holds
 * the limit is answered LIMIT, and the key goes to the next waiter.
 */
int
waiter_over_limit(const struct lclient *w)
{
	const struct lclient *hc = w->owner != NULL ? w->owner : w;

	return (long)hc->nheld >= w->lt->cfg.max_locks_per_session;
}

/* w (waiting, no attempt in flight) is over its session's limit: it
 * leaves the queue with LK_LIMIT. */
static void
answer_over_limit(struct lclient *w)
{
	waiter_remove(w);
	w->lt->stats.acquire_errors++;
	lk_reply(w, LK_LIMIT, 0, WHY_LIMIT);
}

/* Answer the waiters at the head of lk's queue that their session's limit
 * keeps from the key now, so the next one may have it (a release's
 * hand-off looks for its target after this). */
void
limit_sweep(struct lock *lk)
{
	struct lclient *w, *next;

	for (w = lk->whead; w != NULL; w = next) {
		next = w->wnext;
		if (w->op != NULL)
			continue;
		if (!waiter_over_limit(w))
			return;
		answer_over_limit(w);
	}
}

/* Release in Redis a lock nobody local holds any more (session gone). */
void
release_orphan(struct lock *lk, const char *id, long long token)
{
	release_delayed(lk, id, token, 0);
}

/* The same, the key kept taken delay_ms more (a lingering release) when
 * delay_ms > 0: a lock delay after an unclean end of its session. */
void
release_delayed(struct lock *lk, const char *id, long long token,
    long delay_ms)
{
	struct locks *lt = lk->lt;
	struct op *op = lk_op_new(lt, lk, NULL);
	int rc;

	owner_copy(op->id, id);
	op->token = token;
	op->linger_ms = delay_ms > 0 ? delay_ms : 0;
	/* (its value too: a grant nobody takes may have written one) */
	if (lt->st == NULL)
		rc = -1;
	else if (op->linger_ms > 0)
		rc = store_linger(lt->st, lk->name, lk->te.keylen, op->id,
		    strlen(op->id), token, op->linger_ms, 1, release_done, op);
	else
		rc = store_release(lt->st, lk->name, lk->te.keylen, op->id,
		    strlen(op->id), token, 1, release_done, op);
	if (rc != 0) {
		/* Redis is down: free it as soon as Redis is back. */
		pending_add_until(lt, PEND_RELEASE, lk, id, token,
		    op->linger_ms > 0 ? now_ms() + op->linger_ms : 0, 0);
		lk_op_done(op);
		free(op);
		return;
	}
	lk->releasing++;
}

/*
 * h was handed over early and its pass has not reached Redis (refused,
 * and given up on: a cluster slot migrating under it answers TRYAGAIN
 * for as long as the migration lasts), so Redis still shows the hold it
 * was handed from, and its release (op) found that one: not a loss.  The
 * pass goes first now, and the release again behind it (calls about one
 * key keep their order).  0 when sent.
 */
int
release_again(struct hold *h, const struct op *op)
{
	struct lock *lk = h->lk;
	struct locks *lt = lk->lt;
	struct op *again;
	int rc;

	if (lt->st == NULL || !lk_key_up(lk))
		return -1;
	pass_before_release(lt, h);
	again = lk_op_new(lt, lk, h->cl);
	owner_copy(again->id, op->id);
	again->token = op->token;
	again->kind = op->kind;
	again->linger_ms = op->linger_ms;
	rc = again->linger_ms > 0 ? store_linger(lt->st, lk->name,
	    lk->te.keylen, again->id, strlen(again->id), again->token,
	    again->linger_ms, h->value != NULL, release_done, again) :
	    store_release(lt->st, lk->name, lk->te.keylen, again->id,
	    strlen(again->id), again->token, h->value != NULL, release_done,
	    again);
	if (rc != 0) {
		lk_op_done(again);
		free(again);
		return -1;
	}
	h->released_again++;
	lk->releasing++;
	return 0;
}

void
release_done(void *arg, int ok, int released)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct lclient *cl = lk_op_done(op);
	struct hold *h = cl != NULL ? hold_of(lk, cl) : NULL;

	lk->releasing--;
	if (ok && h != NULL && released != STORE_DONE && h->pass_pending &&
	    h->released_again < 3 && release_again(h, op) == 0) {
		free(op);	/* its second try answers */
		return;
	}
	if (!ok && h != NULL) {
		/* It may or may not have reached Redis: run it again as soon
		 * as Redis answers, and stop holding it here. */
		hold_release_deferred(h, op->linger_ms);
		lk_reply(cl, LK_UNAVAILABLE, 0, WHY_RELEASE_LATER);
	} else if (!ok) {
		/* A session's end or an orphan grant: the same, unanswered
		 * (a LINGER too: its session left while it was sent). */
		pending_add_until(lk->lt, PEND_RELEASE, lk, op->id, op->token,
		    op->linger_ms > 0 ? now_ms() + op->linger_ms : 0, 0);
	} else if (h == NULL) {
		if (released == STORE_DONE)
			lk->lt->stats.releases++;
	} else if (released != STORE_DONE &&
	    hold_doubt(h, 1, lk_cause_of(released))) {
		/* resumed elsewhere, or lost: its record decides */
	} else {
		hold_end(h);
		if (released == STORE_DONE) {
			lk->lt->stats.releases++;
			lk_reply(cl, LK_OK, 0, NULL);
		} else {
			lk_lost_count(lk->lt, lk_cause_of(released));
			lk_reply(cl, LK_LOST, 0, WHY_LOST);
		}
	}
	if (ok && lk->whead != NULL && op->linger_ms == 0) {
		lk_rare_w(lk)->freed_us = now_us();
		/* a permit or a read hold given back here may be what a
		 * waiter here was told was taken */
		if (op->kind != LK_EXCLUSIVE)
			lk->remote_busy = 0;
	}
	free(op);
	lock_pump(lk);
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock *lk = arg;

	(void)fd;
	(void)what;
	lk->remote_busy = 0;
	if (lk->rare != NULL)
		lk->rare->yield_until_ms = 0;
	lock_pump(lk);
}

/* Pump the key again at when (ms), e.g. when a dead holder's TTL ends. */
void
lock_retry_at(struct lock *lk, int64_t when)
{
	struct lock_rare *x = lk_rare_w(lk);

	if (x->retry_ev == NULL &&
	    (x->retry_ev = evtimer_new(lk->lt->base, retry_cb, lk)) == NULL)
		fatalx("cannot create retry timer");
	timer_at_ms(x->retry_ev, when);
}

/* Redis refused an attempt for the key (an error reply on a live
 * connection): the waiters hold back, and the key is tried again after a
 * backoff, REFUSED_MIN_MS doubling to REFUSED_MAX_MS while it lasts. */
void
lock_refused(struct lock *lk, long kind)
{
	struct lock_rare *x = lk_rare_w(lk);

	x->refused_ms = x->refused_ms == 0 ? REFUSED_MIN_MS :
	    x->refused_ms * 2 > REFUSED_MAX_MS ? REFUSED_MAX_MS :
	    x->refused_ms * 2;
	lk->remote_busy = 1;
	x->busy_kind = kind;
	lock_retry_at(lk, now_ms() + x->refused_ms);
}

/*
 * Whether a request of this kind may ask Redis now, as far as this broker
 * knows: an exclusive one when nothing is held or tried here; a shared
 * one beside shared holds and attempts, unless a waiter on another broker
 * announced itself (a writer: the reads here drain first, see YIELD_MS);
 * a permit while holds and attempts here are fewer than the limit.
 */
static int
may_try(const struct lock *lk, long kind)
{
	if (kind == LK_EXCLUSIVE)
		return lk->nholds == 0 && lk->attempts == 0;
	if (lk->excl_attempt || hold_excl(lk) != NULL)
		return 0;
	if (kind == LK_SHARED)
		return !(writer_elsewhere(lk) && lk->nholds > 0);
	return lk->nholds + lk->attempts < (unsigned long)kind;
}

/* A waiter not being tried: it waits for something here or elsewhere. */
static int
has_blocked_waiter(const struct lock *lk)
{
	const struct lclient *w;

	for (w = lk->whead; w != NULL; w = w->wnext)
		if (w->op == NULL)
			return 1;
	return 0;
}

void
lock_pump(struct lock *lk)
{
	struct locks *lt = lk->lt;
	struct lclient *w, *next;

	if (lt->st != NULL && !lk_key_up(lk)) {
		/* waiters wait out the reconnect (locks_store_up pumps); one
		 * whose wait is over (a one-try request has no timer) is
		 * answered now, not after the outage */
		waiters_expire(lk);
		lock_gc(lk);
		return;
	}
	/* From the head: those being tried are passed, the first that may
	 * not go now stops the walk (FIFO across kinds). */
	for (w = lk->whead; w != NULL; w = next) {
		struct op *op;

		next = w->wnext;
		if (w->op != NULL)
			continue;
		if (lk->releasing || !may_try(lk, w->wkind) ||
		    (lk->remote_busy && !(lk_rare(lk)->busy_kind ==
		    LK_EXCLUSIVE && w->wkind == LK_SHARED)) ||
		    (lk_rare(lk)->mhold_us != 0 &&
		    w->wstart_us > lk->rare->mhold_us)) {
			/* (a writer's "held elsewhere" may be readers there,
			 * which a reader may join); a reader held back by a
			 * writer's announcement asks Redis when it ends */
			if (w->wkind == LK_SHARED && writer_elsewhere(lk) &&
			    (lk_rare(lk)->retry_ev == NULL ||
			    !evtimer_pending(lk->rare->retry_ev, NULL)))
				lock_retry_at(lk,
				    lk_rare(lk)->writer_until_ms);
			break;
		}
		if (lk_rare(lk)->yield_until_ms > now_ms()) {
			/* a remote waiter's turn: try after it had its go */
			lock_retry_at(lk, lk->rare->yield_until_ms);
			return;
		}
		if (waiter_over_limit(w)) {
			answer_over_limit(w);
			continue;
		}
		if (w->conn_wait) {
			/* its connection is made: one try, as asked */
			w->conn_wait = 0;
			w->deadline = now_ms();
			event_del(w->deadline_ev);
		}
		op = lk_op_new(lt, lk, w);
		op->sent_us = now_us();
		op->kind = w->wkind;
		op->wakes = lk->wakes;
		owner_copy(op->id, w->id);
		/* (a recorded waiter's attempt may meet its record's grant:
		 * acquire.lua then leaves the key to the grant's message) */
		if (store_acquire(lt->st, lk->name, lk->te.keylen, w->id,
		    strlen(w->id), w->wkind, w->wttl, w->deadline <= now_ms() ?
		    0 : w->rrecorded ? STORE_WAIT_RECORDED : 1,
		    w->wkind == LK_EXCLUSIVE ? chain_want(w) : 0,
		    w->wkind == LK_SHARED ? w->wseen : 0, w->wvalue,
		    value_len(w->wvalue), attempt_done, op) == 0) {
			lk->attempts++;
			if (w->wkind == LK_EXCLUSIVE)
				lk->excl_attempt = 1;
			continue;
		}
		lk_op_done(op);
		free(op);
		waiter_remove(w);
		lt->stats.acquire_errors++;
		lk_reply(w, LK_UNAVAILABLE, 0, "Redis is unreachable");
	}
	/* an ACQUIRE ALL naming the key may go now: tried on the next turn,
	 * with every key of its set (multi.c) */
	if (lk_rare(lk)->mrefs != 0 && lt->multi_ev != NULL)
		event_active(lt->multi_ev, EV_TIMEOUT, 0);
	lock_gc(lk);
}

/* --- remote grants (remote.c hears them) ------------------------------ */

static struct lclient *
waiter_by_rwid(const struct lock *lk, unsigned long long wid)
{
	struct lclient *w;

	for (w = lk->whead; w != NULL; w = w->wnext)
		if (w->rwid == wid)
			return w;
	return NULL;
}

/* A remote grant here that nobody takes: released at once (its release
 * may grant the key to the next record, on any broker). */
static void
grant_refused(struct lock *lk, const char *id, long long token)
{
	lk->lt->stats.orphans++;
	release_orphan(lk, id, token);
}

/*
 * The remote grant (id, token, made at grant_ms on the master's clock)
 * for w (NULL: no wait here takes it): delivered as a grant here, or
 * released at once.
 */
void
grant_remote(struct lock *lk, struct lclient *w, const char *id,
    long long token, long long grant_ms)
{
	struct locks *lt = lk->lt;
	struct hold *h;
	int64_t now, left, redis_now;
	long trust;

	/* Redis keeps the grant trust ms from grant_ms, unless renewed: this
	 * broker vouches for half of that, less what has passed since on the
	 * master's clock (never less than what has) */
	trust = w != NULL && w->wttl < STORE_REMOTE_GRANT_MS ? w->wttl :
	    STORE_REMOTE_GRANT_MS;
	if (store_redis_now(lt->st, &redis_now) != 0)
		left = 0;		/* no sample: not trusted */
	else
		left = trust / 2 - (redis_now - grant_ms);
	if (left > trust / 2)
		left = trust / 2;	/* (a sample older than the grant) */
	if (w != NULL) {
		/* (a key whose store is not up, or a Sentinel lease not held,
		 * grants nothing here, as for an attempt) */
		int takes = w->rrecorded && w->op == NULL &&
		    lk->nholds == 0 && left > 0 && lk_key_up(lk);

		w->rrecorded = 0;	/* the grant took its record: a "held"
					 * answer records it anew */
		if (!takes)
			w = NULL;
	}
	if (w == NULL && (h = hold_by_token(lk, token)) != NULL &&
	    strcmp(h->cl->id, id) == 0) {
		lock_pump(lk);	/* told twice: it holds that grant already */
		return;
	}
	if (w == NULL) {
		log_debug("key '%s': remote grant %lld for a wait no longer "
		    "here: released", lk->name, token);
		grant_refused(lk, id, token);
		lock_pump(lk);
		return;
	}
	if (waiter_over_limit(w)) {
		grant_refused(lk, id, token);
		waiter_remove(w);
		lt->stats.acquire_errors++;
		lk_reply(w, LK_LIMIT, 0, WHY_LIMIT);
		lock_pump(lk);
		return;
	}
	lk->remote_busy = 0;
	if (lk_rare(lk)->retry_ev != NULL)
		event_del(lk->rare->retry_ev);
	if (lk->rare != NULL)
		lk->rare->handoffs = 0;
	chain_end(lk);
	now = now_ms();
	h = grant_local(lk, w, LK_EXCLUSIVE, token, now_us(), 0);
	/* until the renewal sent now answers */
	h->confirmed_ms = now + left;
	h->renew_at = now;
	renew_schedule(lt, now);
	lock_pump(lk);
}

struct lclient *
grant_waiter_of(const struct lock *lk, unsigned long long wid, const char *id)
{
	struct lclient *w = waiter_by_rwid(lk, wid);

	return w != NULL && strcmp(w->id, id) == 0 ? w : NULL;
}

/* A remote grant heard while the attempt of its waiter (client-id id)
 * was in flight (remote.c keeps it on the key): taken or released now
 * that the attempt answered.  Pumps lk. */
static void
stash_taken(struct lock *lk, const char *id)
{
	struct lock_rare *x = lk->rare;
	long long token;

	if (x == NULL || x->rg_token == 0)
		return;
	token = x->rg_token;
	x->rg_token = 0;
	grant_remote(lk, grant_waiter_of(lk, x->rg_wid, id), id, token,
	    x->rg_ms);
}

static void
attempt_done(void *arg, int ok, int granted, long long n, long more)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct locks *lt = op->lt;
	struct lclient *w = lk_op_done(op);
	char id[OWNER_MAX + 1];

	int64_t freed_us = lk_rare(lk)->freed_us;	/* a handoff, if
							 * granted now */
	int64_t sent_us = op->sent_us;
	long kind = op->kind;
	unsigned sent_wakes = op->wakes;

	memcpy(id, op->id, sizeof id);		/* the requester's client-id */
	free(op);
	lk->attempts--;
	if (kind == LK_EXCLUSIVE)
		lk->excl_attempt = 0;
	if (lk->rare != NULL) {
		lk->rare->freed_us = 0;
		if (ok)
			lk->rare->refused_ms = 0;
	}
	lk->in_delay = 0;
	if (kind == LK_SHARED && ok && granted == 0 &&
	    more > lk_rare(lk)->wstamp)
		lk_rare_w(lk)->wstamp = more;	/* a writer's mark it saw */
	if (w != NULL && kind == LK_SHARED && w->wseen < 0)
		w->wseen = ok && granted == 0 ? more : lk_rare(lk)->wstamp;
	if (!ok && lk_key_up(lk)) {
		/* An error reply on a live connection (NOREPLICAS, MISCONF,
		 * OOM, BUSY...): the script did not run.  An outage like any
		 * other: the waiter keeps its place until its WAIT runs out,
		 * and tries again after a backoff (at once would hammer
		 * Redis for the whole wait). */
		if (w != NULL && now_ms() >= w->deadline) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			lk_reply(w, LK_UNAVAILABLE, 0, WHY_REFUSED);
		} else if (w != NULL) {
			lock_refused(lk, kind);
		}
	} else if (!ok) {
		/* The connection went: the grant may have happened. */
		pending_add(lt, PEND_FORGET, lk, id, 0);
		if (w != NULL && now_ms() >= w->deadline) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			lk_reply(w, LK_UNAVAILABLE, 0, WHY_NO_ANSWER);
		}
		/* else it stays queued: the reconnect pumps it, after the
		 * forget above (a failover must not cost a waiter its turn) */
	} else if (granted == -1 || granted == -2) {
		if (granted == -2)	/* in case its undo failed */
			pending_add(lt, PEND_FORGET, lk, id, 0);
		if (w) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			if (granted == -1)
				lk_reply(w, LK_LIMIT, 0, WHY_EXHAUSTED);
			else
				lk_reply(w, LK_UNAVAILABLE, 0, WHY_NOT_ACKED);
		}
	} else if (granted == 3) {
		/* another kind in Redis: say which (nothing was written) */
		if (w != NULL) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			lk_reply(w, LK_KIND, n, NULL);
		}
	} else if (granted == STORE_RECORD_GRANTED && w != NULL &&
	    now_ms() < w->deadline) {
		/* A release granted the key to its record: the grant's
		 * message brings it (remote.c); should none come, the grant
		 * runs out in n ms and the key is tried again. */
		lk->remote_busy = 1;
		lk_rare_w(lk)->busy_kind = kind;
		lock_retry_at(lk, now_ms() + (n > 0 && n < PTTL_RETRY_MAX ?
		    n : 0) + 1);
	} else if (granted == STORE_RECORD_GRANTED) {
		/* its wait is over: the grant, when it comes, is released */
		if (w != NULL) {
			waiter_remove(w);
			lt->stats.busy++;
			lk_reply(w, LK_BUSY, 0, NULL);
		}
	} else if (granted == 2 && w != NULL && now_ms() >= w->deadline) {
		/* free, but a lock delay runs: nobody may have it yet */
		waiter_remove(w);
		lt->stats.acquire_errors++;
		lk_reply(w, LK_UNAVAILABLE, 0, WHY_DELAY);
	} else if (granted == 2 && w != NULL) {
		lk->remote_busy = 1;	/* try again when the delay ends */
		lk_rare_w(lk)->busy_kind = kind;
		lk->in_delay = 1;
		lock_retry_at(lk, now_ms() + (n < PTTL_RETRY_MAX ? n : 0) + 1);
	} else if (granted == 2) {
		/* its session left meanwhile */
	} else if (granted && w != NULL && waiter_over_limit(w)) {
		/* another grant filled its session's quota meanwhile: given
		 * back, and the key goes to the next waiter */
		lt->stats.orphans++;
		release_orphan(lk, id, n);
		answer_over_limit(w);
	} else if (granted && (w == NULL ||
	    grant_too_late(sent_us, w->wttl))) {
		/* Its session left while the attempt was in flight; or the
		 * reply came so late (a paused broker, a slow Redis) that the
		 * lock may have expired already: not a grant to pass on.  The
		 * key was free, so BUSY would be a lie: the waiter tries again
		 * after the release if its wait allows, else hears that Redis
		 * was too slow. */
		lt->stats.orphans++;
		release_orphan(lk, id, n);
		if (w != NULL && now_ms() >= w->deadline) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			lk_reply(w, LK_UNAVAILABLE, 0, WHY_TOO_SLOW);
		}
	} else if (granted) {
		if (lk->rare != NULL)
			lk->rare->handoffs = 0;
		chain_start(lk, n, kind == LK_EXCLUSIVE ? more : 0);
		grant_local(lk, w, kind, n, sent_us, freed_us);
	} else if (w != NULL && now_ms() >= w->deadline) {
		waiter_remove(w);
		lt->stats.busy++;
		lk_reply(w, LK_BUSY, 0, NULL);
	} else if (w != NULL && sent_wakes != lk->wakes) {
		/* Released (pub/sub, on the other connection) after our
		 * attempt was sent: lock_pump below tries again at once.
		 * Once per wake: the next answer is compared with this one's
		 * count (several attempts in flight share the key's). */
	} else if (w != NULL) {
		/* Held elsewhere: wait for a pub/sub wake, or for its TTL
		 * to run out if its holder died without releasing. */
		lk->remote_busy = 1;
		lk_rare_w(lk)->busy_kind = kind;
		/* A foreign key may carry any PTTL: past a day, the waiter's
		 * own deadline (or a pub/sub wake) comes first anyway. */
		if (n >= 0 && n < PTTL_RETRY_MAX)
			lock_retry_at(lk, now_ms() + n + 1);
	}
	if (ok && granted == 0 && kind == LK_EXCLUSIVE && w != NULL &&
	    w->wlock == lk) {
		mark_wait(w);	/* held: readers may be involved */
		waiter_record(w);	/* a release elsewhere may grant it */
	}
	if (w != NULL && w->wlock == lk) {
		notice_waiting(w);
		lk_queued(w);	/* not granted at once: its wait goes on */
	}
	if (lk->rare != NULL && lk->rare->rg_token != 0)
		stash_taken(lk, id);		/* (pumps lk) */
	else
		lock_pump(lk);
}

/* The wait of cl ran out while no attempt of its was in flight. */
void
deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lclient *cl = arg;
	struct lock *lk = cl->wlock;

	(void)fd;
	(void)what;
	if (lk == NULL || cl->op != NULL)
		return;	/* its attempt's reply decides */
	waiter_remove(cl);
	if (!lk_key_up(lk)) {
		/* BUSY would claim the key is held: we cannot know */
		cl->lt->stats.acquire_errors++;
		lk_reply(cl, LK_UNAVAILABLE, 0, cl->conn_wait ?
		    WHY_UNREACHABLE : WHY_WAIT_DOWN);
	} else if (lk->in_delay) {
		cl->lt->stats.acquire_errors++;
		lk_reply(cl, LK_UNAVAILABLE, 0, WHY_DELAY);
	} else if (lk_rare(lk)->refused_ms != 0) {
		/* Redis kept refusing its attempts: nobody knows who holds it */
		cl->lt->stats.acquire_errors++;
		lk_reply(cl, LK_UNAVAILABLE, 0, WHY_REFUSED);
	} else {
		cl->lt->stats.busy++;
		lk_reply(cl, LK_BUSY, 0, NULL);
	}
	lock_pump(lk);
}

/* Log a limit being hit, at most once per LIMIT_LOG_MS. */
static void
limit_hit(struct locks *lt, const char *which)
{
	int64_t now = now_ms();

	if (lt->limit_logged_ms != 0 && now - lt->limit_logged_ms <
	    LIMIT_LOG_MS)
		return;
	lt->limit_logged_ms = now;
	log_warn("%s reached: ACQUIRE answered ERR LIMIT", which);
}

/* The key's kind here (0 a lock, n a semaphore of n permits) while
 * anything holds, waits or is tried here; -1 when nothing does. */
static long
lock_kind_here(const struct lock *lk)
{
	if (lk == NULL || (lk->nholds == 0 && lk->whead == NULL &&
	    lk->attempts == 0))
		return -1;
	return lk->limit;
}

void
locks_acquire(struct lclient *cl, const char *key, size_t keylen,
    long kind, long wait_ms, long ttl_ms)
{
	acquire_with(cl, key, keylen, kind, wait_ms, ttl_ms, NULL, 0, -1);
}

/* ACQUIRE, and its value (exclusive; none: valuelen 0) for the grant to
 * write; a reentrant one with a value is values.c's. */
void
acquire_with(struct lclient *cl, const char *key, size_t keylen, long kind,
    long wait_ms, long ttl_ms, const char *value, size_t valuelen,
    long delay_ms)
{
	struct locks *lt = cl->lt;
	struct lclient *hc = lk_holder(cl);	/* who holds what it gets */
	struct lock *lk = lock_find(lt, key, keylen);
	struct hold *h = lk != NULL ? hold_of(lk, hc) : NULL;
	long here = lock_kind_here(lk);
	long coming = 0;

	if (here >= 0 && here != (kind > 0 ? kind : 0)) {
		/* a semaphore's limit is fixed while anyone here holds or
		 * waits; Redis says the same of holders elsewhere */
		lt->stats.acquire_errors++;
		lk_reply(cl, LK_KIND, here, NULL);
		return;
	}
	if (h != NULL && kind == LK_EXCLUSIVE && h->kind == LK_SHARED) {
		/* no silent upgrade: two readers doing it deadlock */
		lt->stats.acquire_errors++;
		lk_reply(cl, LK_UPGRADE, 0, NULL);
		return;
	}
	if (h != NULL) {
		/* reentrant; an exclusive hold covers a shared request */
		h->count++;
		if (delay_ms >= 0 && h->kind == LK_EXCLUSIVE)
			h->delay_ms = delay_ms;
		lt->stats.acquires++;
		lk_held_changed(h, h->count, 0);
		lk_reply(cl, LK_OK, h->token, NULL);
		return;
	}
	if ((long)hc->nheld >= lt->cfg.max_locks_per_session) {
		limit_hit(lt, "max_locks_per_session");
		lt->stats.acquire_errors++;
		lk_reply(cl, LK_LIMIT, 0, WHY_LIMIT);
		return;
	}
	if (wait_ms < 0 || hc->no_wait)
		wait_ms = 0;
	if (wait_ms > lt->cfg.max_wait_ms)
		wait_ms = lt->cfg.max_wait_ms;
	/* Redis unreachable (or no Sentinel lease): a one-try request
	 * answers at once, unless the connection is being made (the broker
	 * starts, or reconnects): it waits for that, redis_timeout_ms at
	 * most (coming), and is tried once then; one with WAIT queues as
	 * during any outage, and is tried when Redis answers again, or
	 * answered ERR UNAVAILABLE when its WAIT runs out (deadline_cb). */
	if (lt->st != NULL && wait_ms == 0 && !store_key_up(lt->st, key, keylen))
		coming = store_key_coming(lt->st, key, keylen);
	if (lt->st == NULL || (wait_ms == 0 && coming == 0 &&
	    !store_key_up(lt->st, key, keylen))) {
		lt->stats.acquire_errors++;
		lk_reply(cl, LK_UNAVAILABLE, 0, WHY_UNREACHABLE);
		return;
	}
	if (lk != NULL && wait_ms == 0 && (has_blocked_waiter(lk) ||
	    !may_try(lk, kind) || lk_rare(lk)->mhold_us != 0)) {
		/* Someone is ahead, or what is held here excludes it: the
		 * key will not be free for a one-try request.  (A release
		 * alone in flight is no one: the request queues behind it
		 * and asks Redis.) */
		lt->stats.busy++;
		lk_reply(cl, LK_BUSY, 0, NULL);
		return;
	}
	if (wait_ms > 0 && (long)lt->stats.waiters >= lt->cfg.max_waiters) {
		limit_hit(lt, "max_waiters");
		lt->stats.acquire_errors++;
		lk_reply(cl, LK_LIMIT, 0, "max_waiters ACQUIREs are waiting");
		return;
	}
	lk = lock_get(lt, key, keylen);
	waiter_push(lk, cl, kind, coming > 0 ? coming : wait_ms,
	    lk_clamp_ttl(lt, ttl_ms));
	cl->conn_wait = coming > 0;
	if (kind == LK_EXCLUSIVE) {
		cl->wvalue = value_copy(value, valuelen);
		cl->wdelay = delay_ms > 0 ? delay_ms : 0;
	}
	lock_pump(lk);
	if (cl->wlock == lk && cl->op == NULL && !cl->conn_wait) {
		/* not tried at once: it waits behind others here.  A reader
		 * came after the writers elsewhere heard of so far; a writer
		 * is marked if readers are involved */
		if (kind == LK_SHARED && cl->wseen < 0)
			cl->wseen = lk_rare(lk)->wstamp;
		else if (kind == LK_EXCLUSIVE && (lk->shared_seen ||
		    lk->remote_busy))
			mark_wait(cl);
		notice_waiting(cl);
		lk_queued(cl);
	}
}
