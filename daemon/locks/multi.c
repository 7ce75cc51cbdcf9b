/*
 * multi.c - ACQUIRE ALL (protocol 1.2): exclusive holds of a set of keys,
 * granted together by one script call per slot (store_acquire_all), or
 * none (locks.h says what a client is promised).
 *
 * A wait for a set (struct mwait) is not in its keys' FIFOs: it holds
 * nothing while it waits, so sessions naming keys in any order never
 * deadlock.  It refers to each key's entry (lk->rare->mrefs), so it hears of
 * every change there: a local release or grant pumps the key, which
 * schedules multi_cb (lt->multi_ev), and a release elsewhere (pub/sub) or
 * a holder's TTL running out does the same through the key's own wake.
 * multi_cb walks the waits oldest first and tries each whose keys are all
 * free as far as this broker knows (no hold, attempt or release here, not
 * held elsewhere at its last answer, no single waiter here that came
 * before it): FIFO among those that may go.  While its call is in flight
 * its keys count an exclusive attempt each, so nothing here races it.
 *
 * Patience: a wait for a set needs every key free at once, which single
 * requests for its keys rarely leave.  After LK_ALL_PATIENCE_MS its keys
 * stop going to single requests here that came after it (lk->rare->mhold_us:
 * lock_pump and the hand-off look at it), and its tries announce it on
 * the wanted channel, so brokers holding its keys let them go in turn.
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

struct mwait {
	TAILQ_ENTRY(mwait) link;	/* lt->mwaits, oldest first */
	struct locks *lt;
	struct lclient *cl;		/* who asked (NULL: gone meanwhile) */
	char id[OWNER_MAX + 1];		/* whose holds they would be */
	struct event *ev;		/* patience over, or the wait's end */
	int64_t start_us;
	int64_t deadline;		/* monotonic ms */
	int64_t sent_us;		/* its call in flight: sent then */
	long ttl_ms;
	unsigned inflight:1;		/* a store_acquire_all in flight */
	unsigned patient:1;		/* waited LK_ALL_PATIENCE_MS */
	unsigned queued:1;		/* not granted at once: it counts in
					 * its keys' queues (WANTED notices) */
	size_t n;
	struct lock *lk[LK_ALL_MAX];
	unsigned wakes[LK_ALL_MAX];	/* each key's wakes when its call
					 * went (a release heard meanwhile) */
};

static void mwait_try(struct mwait *mw);

/* mw was not granted at once: it waits, and counts in its keys' queues
 * (lk->rare->mqueued, moldest_us), which their holders may hear of (WANTED
 * notices). */
static void
mwait_queued(struct mwait *mw)
{
	if (mw->queued || mw->cl == NULL)
		return;
	mw->queued = 1;
	for (size_t i = 0; i < mw->n; i++) {
		struct lock *lk = mw->lk[i];
		struct lock_rare *x = lk_rare_w(lk);

		x->mqueued++;
		if (x->moldest_us == 0 || mw->start_us < x->moldest_us)
			x->moldest_us = mw->start_us;
		notice_queue_changed(lk, 1);
	}
}

/* The oldest wait naming lk that is patient (patient 1: waited
 * LK_ALL_PATIENCE_MS) or queued (0: not granted at once): its start, or
 * 0.  (mwaits is oldest first.) */
static int64_t
oldest_naming(const struct locks *lt, const struct lock *lk, int patient)
{
	const struct mwait *mw;

	TAILQ_FOREACH(mw, &lt->mwaits, link) {
		if (patient ? !mw->patient : !mw->queued)
			continue;
		for (size_t i = 0; i < mw->n; i++)
			if (mw->lk[i] == lk)
				return mw->start_us;
	}
	return 0;
}

/* mw ends (answered, or its client gone): its keys forget it and are
 * pumped (what it held back may go now). */
static void
mwait_end(struct mwait *mw)
{
	struct locks *lt = mw->lt;

	TAILQ_REMOVE(&lt->mwaits, mw, link);
	if (mw->cl != NULL && mw->cl->mw == mw)
		mw->cl->mw = NULL;
	if (mw->cl != NULL)
		lt->stats.waiters--;
	event_free(mw->ev);
	for (size_t i = 0; i < mw->n; i++) {
		struct lock *lk = mw->lk[i];

		lk->rare->mrefs--;	/* (its mrefs++ made lk->rare) */
		if (mw->queued) {
			lk->rare->mqueued--;
			lk->rare->moldest_us = oldest_naming(lt, lk, 0);
			notice_queue_changed(lk, 0);
		}
		lk->rare->mhold_us = oldest_naming(lt, lk, 1);
		lock_pump(lk);		/* may free lk: mw no longer names it */
	}
	free(mw);
}

/* Answer mw's client and end it. */
static void
mwait_answer(struct mwait *mw, enum lk_status st, long long n,
    const char *why)
{
	struct lclient *cl = mw->cl;

	if (cl != NULL) {
		cl->mw = NULL;
		if (st == LK_BUSY)
			cl->lt->stats.busy++;
		else
			cl->lt->stats.acquire_errors++;
		lk_reply(cl, st, n, why);
	}
	mwait_end(mw);
}

/* Whether every key of mw is free as far as this broker knows. */
static int
mwait_may_go(const struct mwait *mw)
{
	for (size_t i = 0; i < mw->n; i++) {
		const struct lock *lk = mw->lk[i];
		const struct lclient *w;

		if (lk->nholds || lk->attempts || lk->releasing ||
		    lk->remote_busy || !lk_key_up(lk))
			return 0;
		for (w = lk->whead; w != NULL; w = w->wnext)
			if (w->wstart_us <= mw->start_us)
				return 0;	/* a single request before it */
	}
	return 1;
}

/* The holds granted: the client holds every key, each with its token. */
static void
mwait_granted(struct mwait *mw, const long long *tokens)
{
	struct lclient *cl = mw->cl, *hc = lk_holder(cl);
	struct locks *lt = mw->lt;
	int64_t t = now_us();
	struct lk_result r = { .status = LK_OK, .tokens = tokens,
	    .ntokens = mw->n, .waited = 1, .waited_us = t - mw->start_us };

	histo_observe(&lt->stats.acquire_wait, t - mw->start_us);
	for (size_t i = 0; i < mw->n; i++) {
		hold_start(mw->lk[i], hc, LK_EXCLUSIVE, tokens[i], mw->ttl_ms,
		    mw->sent_us, 0);
		lt->stats.acquires++;
	}
	cl->mw = NULL;
	cl->ops->reply(cl->arg, &r);
	mwait_end(mw);
}

/* A grant nobody takes (the client left, a late answer, a limit): given
 * back, key by key. */
static void
mwait_give_back(struct mwait *mw, const long long *tokens)
{
	for (size_t i = 0; i < mw->n; i++) {
		mw->lt->stats.orphans++;
		release_orphan(mw->lk[i], mw->id, tokens[i]);
	}
}

static void
all_done(void *arg, int ok, const struct store_all_result *r)
{
	struct mwait *mw = arg;
	struct lclient *cl = mw->cl;
	int64_t now = now_ms();
	int over = cl != NULL && now >= mw->deadline;

	mw->inflight = 0;
	for (size_t i = 0; i < mw->n; i++) {
		mw->lk[i]->attempts--;
		mw->lk[i]->excl_attempt = 0;
	}
	if (ok && r->granted == 1 && (cl == NULL ||
	    grant_too_late(mw->sent_us, mw->ttl_ms) ||
	    (long)(lk_holder(cl)->nheld + mw->n) >
	    mw->lt->cfg.max_locks_per_session)) {
		mwait_give_back(mw, r->tokens);
		if (cl == NULL)
			mwait_end(mw);
		else if (grant_too_late(mw->sent_us, mw->ttl_ms) && over)
			mwait_answer(mw, LK_UNAVAILABLE, 0, WHY_TOO_SLOW);
		else if (!grant_too_late(mw->sent_us, mw->ttl_ms))
			mwait_answer(mw, LK_LIMIT, 0, WHY_LIMIT);
		else
			mwait_try(mw);
		return;
	}
	if (cl == NULL) {
		mwait_end(mw);
		return;
	}
	if (ok && r->granted == 1) {
		mwait_granted(mw, r->tokens);
		return;
	}
	if (ok && r->granted == 3) {
		struct lk_result res = { .status = LK_KIND, .n = r->kind,
		    .index = r->index };

		cl->mw = NULL;
		cl->lt->stats.acquire_errors++;
		cl->ops->reply(cl->arg, &res);
		mwait_end(mw);
		return;
	}
	if (ok && r->granted == -1) {
		mwait_answer(mw, LK_LIMIT, 0, WHY_EXHAUSTED);
		return;
	}
	if (ok && r->granted == 2) {
		/* free, but a lock delay runs */
		if (over) {
			mwait_answer(mw, LK_UNAVAILABLE, 0, WHY_DELAY);
			return;
		}
		for (size_t i = 0; i < mw->n; i++) {
			mw->lk[i]->remote_busy = 1;
			lk_rare_w(mw->lk[i])->busy_kind = LK_EXCLUSIVE;
			lock_retry_at(mw->lk[i], now + r->ms + 1);
		}
	} else if (ok) {
		/* held elsewhere: each such key waits for its wake (a
		 * release message, or its holder's TTL) */
		if (over) {
			mwait_answer(mw, LK_BUSY, 0, NULL);
			return;
		}
		for (size_t i = 0; i < r->nbusy; i++) {
			struct lock *lk = mw->lk[r->busy[i]];

			if (lk->wakes != mw->wakes[r->busy[i]]) {
				/* released (pub/sub) after the call went:
				 * "held" is stale news, as for a single
				 * attempt; tried again at once */
				event_active(lk->lt->multi_ev, 0, 0);
				continue;
			}
			lk->remote_busy = 1;
			lk_rare_w(lk)->busy_kind = LK_EXCLUSIVE;
			if (r->pttl[i] >= 0 && r->pttl[i] < 86400LL * 1000)
				lock_retry_at(lk, now + r->pttl[i] + 1);
		}
		mwait_queued(mw);
		lk_queued(cl);
	} else if (over) {
		mwait_answer(mw, LK_UNAVAILABLE, 0, WHY_NO_ANSWER);
		return;
	} else {
		/* Redis did not answer, or refused (an error reply): tried
		 * again after a while, or when it is back */
		for (size_t i = 0; i < mw->n; i++) {
			mw->lk[i]->remote_busy = 1;
			lk_rare_w(mw->lk[i])->busy_kind = LK_EXCLUSIVE;
			lock_retry_at(mw->lk[i], now + 100);
		}
	}
	/* its keys may free others' requests meanwhile */
	for (size_t i = 0; i < mw->n; i++)
		lock_pump(mw->lk[i]);
}

/* Try mw now if its keys may go. */
static void
mwait_try(struct mwait *mw)
{
	struct locks *lt = mw->lt;
	const char *keys[LK_ALL_MAX];
	size_t lens[LK_ALL_MAX];

	if (mw->inflight || mw->cl == NULL || !mwait_may_go(mw))
		return;
	for (size_t i = 0; i < mw->n; i++) {
		keys[i] = mw->lk[i]->name;
		lens[i] = mw->lk[i]->te.keylen;
	}
	mw->sent_us = now_us();
	for (size_t i = 0; i < mw->n; i++)
		mw->wakes[i] = mw->lk[i]->wakes;
	if (lt->st == NULL || store_acquire_all(lt->st, keys, lens, mw->n,
	    mw->id, strlen(mw->id), mw->ttl_ms, mw->deadline > now_ms(),
	    all_done, mw) != 0)
		return;		/* Redis away: tried again when it is back */
	mw->inflight = 1;
	for (size_t i = 0; i < mw->n; i++) {
		mw->lk[i]->attempts++;
		mw->lk[i]->excl_attempt = 1;
	}
}

void
multi_cb(evutil_socket_t fd, short what, void *arg)
{
	struct locks *lt = arg;
	struct mwait *mw, *next;

	(void)fd;
	(void)what;
	for (mw = TAILQ_FIRST(&lt->mwaits); mw != NULL; mw = next) {
		next = TAILQ_NEXT(mw, link);
		mwait_try(mw);
	}
}

/* mw's timer: its patience ran out, or its wait did. */
static void
mwait_timer(evutil_socket_t fd, short what, void *arg)
{
	struct mwait *mw = arg;
	int64_t now = now_ms();

	(void)fd;
	(void)what;
	if (!mw->patient && now >= mw->start_us / 1000 + LK_ALL_PATIENCE_MS) {
		mw->patient = 1;
		for (size_t i = 0; i < mw->n; i++) {
			struct lock_rare *x = lk_rare_w(mw->lk[i]);

			if (x->mhold_us == 0 || x->mhold_us > mw->start_us)
				x->mhold_us = mw->start_us;
		}
	}
	if (now >= mw->deadline && !mw->inflight) {
		/* BUSY would claim a key is held: unknown while Redis is
		 * away */
		int up = 1;

		for (size_t i = 0; i < mw->n; i++)
			up = up && lk_key_up(mw->lk[i]);
		mwait_answer(mw, up ? LK_BUSY : LK_UNAVAILABLE, 0, up ? NULL :
		    WHY_WAIT_DOWN);
		return;
	}
	if (now < mw->deadline)
		timer_at_ms(mw->ev, mw->patient ? mw->deadline :
		    (mw->deadline < mw->start_us / 1000 + LK_ALL_PATIENCE_MS ?
		    mw->deadline : mw->start_us / 1000 + LK_ALL_PATIENCE_MS));
	mwait_try(mw);
}

void
locks_acquire_all(struct lclient *cl, const char *const *keys,
    const size_t *keylens, size_t n, long wait_ms, long ttl_ms)
{
	struct locks *lt = cl->lt;
	struct lclient *hc = lk_holder(cl);
	struct mwait *mw;

	if (n < LK_ALL_MIN || n > LK_ALL_MAX) {
		lk_reply(cl, LK_BADARG, 0, "ALL takes 2..64 keys");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct lock *lk = lock_find(lt, keys[i], keylens[i]);

		if (lk != NULL && hold_of(lk, hc) != NULL) {
			lt->stats.acquire_errors++;
			lk_reply(cl, LK_BADARG, 0, "this session holds one of "
			    "the keys: ACQUIRE ALL takes only keys it does "
			    "not hold");
			return;
		}
		if (lk != NULL && lk->limit > 0 && (lk->nholds || lk->whead)) {
			struct lk_result r = { .status = LK_KIND,
			    .n = lk->limit, .index = i };

			lt->stats.acquire_errors++;
			cl->ops->reply(cl->arg, &r);
			return;
		}
	}
	if ((long)(hc->nheld + n) > lt->cfg.max_locks_per_session) {
		lt->stats.acquire_errors++;
		lk_reply(cl, LK_LIMIT, 0, "the keys would pass "
		    "max_locks_per_session");
		return;
	}
	if (wait_ms < 0 || hc->no_wait)
		wait_ms = 0;
	if (wait_ms > lt->cfg.max_wait_ms)
		wait_ms = lt->cfg.max_wait_ms;
	if (lt->st == NULL || (wait_ms == 0 && !store_is_up(lt->st))) {
		lt->stats.acquire_errors++;
		lk_reply(cl, LK_UNAVAILABLE, 0, WHY_UNREACHABLE);
		return;
	}
	if (wait_ms > 0 && (long)lt->stats.waiters >= lt->cfg.max_waiters) {
		lt->stats.acquire_errors++;
		lk_reply(cl, LK_LIMIT, 0, "max_waiters ACQUIREs are waiting");
		return;
	}
	mw = xcalloc(1, sizeof *mw);
	mw->lt = lt;
	mw->cl = cl;
	owner_copy(mw->id, hc->id);
	mw->start_us = now_us();
	mw->deadline = mw->start_us / 1000 + wait_ms;
	mw->ttl_ms = lk_clamp_ttl(lt, ttl_ms);
	mw->n = n;
	if ((mw->ev = evtimer_new(lt->base, mwait_timer, mw)) == NULL)
		fatalx("cannot create a timer");
	for (size_t i = 0; i < n; i++) {
		mw->lk[i] = lock_get(lt, keys[i], keylens[i]);
		lk_rare_w(mw->lk[i])->mrefs++;
	}
	TAILQ_INSERT_TAIL(&lt->mwaits, mw, link);
	cl->mw = mw;
	cl->told_queued = 0;
	lt->stats.waiters++;
	mwait_try(mw);
	if (mw->inflight)
		;	/* its answer decides, or its timer after it */
	else if (wait_ms == 0) {
		/* a one-try request: a key is held or tried here */
		mwait_answer(mw, LK_BUSY, 0, NULL);
		return;
	} else {
		mwait_queued(mw);
		lk_queued(cl);
	}
	timer_at_ms(mw->ev, wait_ms > LK_ALL_PATIENCE_MS ?
	    mw->start_us / 1000 + LK_ALL_PATIENCE_MS : mw->deadline);
}

void
multi_client_gone(struct lclient *cl)
{
	struct mwait *mw = cl->mw;

	if (mw == NULL)
		return;
	cl->mw = NULL;
	cl->lt->stats.waiters--;
	if (mw->inflight) {
		mw->cl = NULL;	/* its answer gives back what it took */
		return;
	}
	mw->cl = NULL;
	mwait_end(mw);
}

void
multi_client_eof(struct lclient *cl)
{
	struct mwait *mw = cl->mw;

	if (mw == NULL)
		return;
	mw->deadline = now_ms();
	if (!mw->inflight)
		mwait_answer(mw, LK_BUSY, 0, NULL);
}

/* The table goes: every client is gone, so every wait is too. */
void
multi_free(struct locks *lt)
{
	struct mwait *mw;

	while ((mw = TAILQ_FIRST(&lt->mwaits)) != NULL) {
		TAILQ_REMOVE(&lt->mwaits, mw, link);
		event_free(mw->ev);
		free(mw);
	}
}
