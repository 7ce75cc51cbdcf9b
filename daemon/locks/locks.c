/*
 * locks.c - the lock table's life, its clients (one per session) and
 * their grace hooks, OWNER, CHECK and the writes fenced by a hold
 * (SETIF, DELIF): the entry points of locks.h that belong to no one
 * concern below (ACQUIRE is in grant.c, RELEASE in handoff.c,
 * RENEW in renew.c, the store's hooks in events.c; locks_int.h gives the
 * order of the files).
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>

/* --- the table ------------------------------------------------------- */

struct locks *
locks_new(struct event_base *base, const struct locks_cfg *cfg)
{
	struct locks *lt = xcalloc(1, sizeof *lt);

	lt->base = base;
	lt->cfg = *cfg;
	lt->keys = keytab_new();
	lt->pool = pool_new();
	watch_init(lt);
	TAILQ_INIT(&lt->held);
	TAILQ_INIT(&lt->mwaits);
	if ((lt->multi_ev = event_new(base, -1, 0, multi_cb, lt)) == NULL)
		fatalx("cannot create an event");
	TAILQ_INIT(&lt->marked);
	lt->renew_ev = evtimer_new(base, renew_cb, lt);
	lt->pending_ev = evtimer_new(base, pending_cb, lt);
	lt->mark_ev = evtimer_new(base, mark_cb, lt);
	TAILQ_INIT(&lt->notices);
	lt->notice_ev = evtimer_new(base, notice_cb, lt);
	lt->report_ev = event_new(base, -1, 0, report_cb, lt);
	if (lt->renew_ev == NULL || lt->pending_ev == NULL ||
	    lt->mark_ev == NULL || lt->notice_ev == NULL ||
	    lt->report_ev == NULL)
		fatalx("cannot create renew timers");
	lt->pending_retry_ms = PENDING_RETRY_MIN_MS;
	lt->stats.hold.bounds = histo_hold_bounds_us;
	return lt;
}

void
locks_set_store(struct locks *lt, struct store *st)
{
	lt->st = st;
}

void
locks_set_cfg(struct locks *lt, const struct locks_cfg *cfg)
{
	lt->cfg = *cfg;
}

static int
free_entry(struct keytab_entry *e, void *arg)
{
	struct lock *lk = (struct lock *)(void *)e;

	(void)arg;
	keytab_remove(lk->lt->keys, e);
	notice_free(lk);
	lock_free(lk);
	return 0;
}

/* Call after every client is freed and the store is gone. */
void
locks_free(struct locks *lt)
{
	if (lt == NULL)
		return;
	cleanup_free(lt);
	watch_free(lt);
	multi_free(lt);
	keytab_each(lt->keys, free_entry, NULL);
	keytab_free(lt->keys);
	event_free(lt->renew_ev);
	event_free(lt->pending_ev);
	event_free(lt->mark_ev);
	event_free(lt->notice_ev);
	event_free(lt->report_ev);
	event_free(lt->multi_ev);
	pool_free(lt->pool);	/* after every entry and hold went back */
	free(lt);
}

void
locks_get_stats(const struct locks *lt, struct locks_stats *out)
{
	*out = lt->stats;
	out->keys = keytab_count(lt->keys);
}

/* --- clients --------------------------------------------------------- */

struct lclient *
locks_client_new(struct locks *lt, const char *id,
    const struct lk_client_ops *ops, void *arg)
{
	struct lclient *cl = xcalloc(1, sizeof *cl);

	cl->lt = lt;
	owner_copy(cl->id, id);
	cl->ops = ops;
	cl->arg = arg;
	TAILQ_INIT(&cl->held);
	cl->deadline_ev = evtimer_new(lt->base, deadline_cb, cl);
	if (cl->deadline_ev == NULL)
		fatalx("cannot create waiter timer");
	return cl;
}

struct lclient *
locks_waiter_new(struct lclient *owner, const struct lk_client_ops *ops,
    void *arg)
{
	struct lclient *w = locks_client_new(owner->lt, owner->id, ops, arg);

	w->owner = owner;
	return w;
}

void
locks_client_free(struct lclient *cl)
{
	struct locks *lt;
	struct lock *lk;
	struct hold *h;

	if (cl == NULL)
		return;
	lt = cl->lt;
	cl->closing = 1;
	if (cl->op != NULL) {
		/* its reply finds nobody */
		if (cl->op->cl == cl)
			cl->op->cl = NULL;
		if (cl->op->next == cl)
			cl->op->next = NULL;
	}
	if ((lk = cl->wlock) != NULL) {
		waiter_remove(cl);
		lock_pump(lk);
	}
	multi_client_gone(cl);
	while ((h = TAILQ_FIRST(&cl->held)) != NULL) {
		long long token = h->token;
		int releasing = h->releasing;
		/* a lock delay: the key stays taken, so not handed on */
		long delay = cl->clean ? 0 : h->delay_ms;

		lk = h->lk;
		pass_before_release(lt, h);
		if (!releasing && delay == 0)
			limit_sweep(lk);
		if (!releasing && delay == 0 &&
		    pass_local(lk, h, handoff_target(lk, h))) {
			lock_pump(lk);
			continue;	/* passed on: h has ended */
		}
		hold_end(h);
		if (!releasing)
			release_delayed(lk, cl->id, token, delay);
		lock_pump(lk);
	}
	lost_clear(cl);
	free(cl->wvalue);
	event_free(cl->deadline_ev);
	free(cl);
	(void)lt;
}

void
locks_client_clean(struct lclient *cl)
{
	if (cl != NULL)
		cl->clean = 1;
}

void
locks_client_eof(struct lclient *cl)
{
	struct lock *lk = cl->wlock;

	cl->no_wait = 1;
	multi_client_eof(cl);
	if (lk == NULL)
		return;
	cl->deadline = now_ms();
	if (cl->op != NULL)
		return;		/* its attempt's reply answers, BUSY or OK */
	waiter_remove(cl);
	if (cl->lt->st != NULL && !lk_key_up(lk)) {
		cl->lt->stats.acquire_errors++;
		lk_reply(cl, LK_UNAVAILABLE, 0, WHY_WAIT_DOWN);
	} else {
		cl->lt->stats.busy++;
		lk_reply(cl, LK_BUSY, 0, NULL);
	}
	lock_pump(lk);
}

int
locks_holds_key(const struct lclient *cl, const char *key, size_t keylen)
{
	const struct lock *lk = lock_find(cl->lt, key, keylen);

	return lk != NULL && hold_of(lk, cl) != NULL;
}

long long
locks_token_of(const struct lclient *cl, const char *key, size_t keylen)
{
	const struct lock *lk = lock_find(cl->lt, key, keylen);
	const struct hold *h = lk != NULL ? hold_of(lk, cl) : NULL;

	return h != NULL ? h->token : 0;
}

size_t
locks_held(const struct lclient *cl,
    void (*fn)(void *arg, const char *key, size_t keylen), void *arg)
{
	const struct hold *h;

	if (fn != NULL)
		TAILQ_FOREACH(h, &cl->held, hlink)
			fn(arg, h->lk->name, h->lk->te.keylen);
	return cl->nheld;
}

/* --- grace sessions -------------------------------------------------- */

void
locks_client_handover(struct lclient *cl, const struct lk_client_ops *ops,
    void *arg, int detached)
{
	struct lock *lk = cl->wlock;

	if (lk != NULL) {
		/* a grant on its way finds nobody, and is freed */
		if (cl->op != NULL && cl->op->cl == cl)
			cl->op->cl = NULL;
		if (cl->op != NULL && cl->op->next == cl)
			cl->op->next = NULL;
		cl->op = NULL;
		waiter_remove(cl);
		lock_pump(lk);
	}
	multi_client_gone(cl);	/* (a grant on its way is given back) */
	/* its own release or renewal in flight still ends its hold; a
	 * verdict it waited for (hold_doubt) is nobody's to hear now */
	cl->answer_due = 0;
	cl->ops = ops;
	cl->arg = arg;
	cl->detached = detached ? 1 : 0;
}

void
locks_client_resumable(struct lclient *cl)
{
	cl->resumable = 1;
}

/* Forget cl's holds here without touching Redis, but for those a
 * takeover leaves behind (taken: see locks_client_taken); free cl. */
static void
client_abandon(struct lclient *cl, int taken)
{
	struct hold *h;

	cl->closing = 1;
	while ((h = TAILQ_FIRST(&cl->held)) != NULL) {
		struct lock *lk = h->lk;
		long long token = h->token;
		int orphan = taken && h->unsure && !h->releasing && !h->gone;

		h->moved = 1;	/* it goes on in another session */
		hold_end(h);
		if (orphan) {
			cl->lt->stats.orphans++;
			release_orphan(lk, cl->id, token);
		}
		lock_pump(lk);
	}
	locks_client_free(cl);
}

void
locks_client_abandon(struct lclient *cl)
{
	client_abandon(cl, 0);
}

void
locks_client_taken(struct lclient *cl)
{
	client_abandon(cl, 1);
}

void
locks_recorded(struct lclient *cl, const char *key, size_t keylen)
{
	struct lock *lk = lock_find(cl->lt, key, keylen);
	struct hold *h = lk != NULL ? hold_of(lk, cl) : NULL;

	if (h != NULL)
		h->unsure = 0;
}

/* cl's first hold found gone (hold_doubt), or NULL. */
static struct hold *
first_gone(const struct lclient *cl)
{
	struct hold *h;

	TAILQ_FOREACH(h, &cl->held, hlink)
		if (h->gone)
			return h;
	return NULL;
}

void
locks_doubt_settled(struct lclient *cl)
{
	int answer = cl->answer_due;
	struct hold *h;

	if (!cl->doubting)
		return;
	cl->doubting = 0;
	if (cl->doubt_again) {
		/* a hold was found gone after that check was sent: the
		 * takeover may have come in between, so ask again */
		cl->doubt_again = 0;
		if (cl->ops->doubt != NULL && cl->ops->doubt(cl->arg)) {
			cl->doubting = 1;
			return;
		}
	}
	cl->answer_due = 0;
	while ((h = first_gone(cl)) != NULL) {
		struct lock *lk = h->lk;

		if (h->answer) {
			/* the answer is the news: no EVENT, nothing kept */
			enum lk_lost_cause cause = h->gone_cause;

			hold_end(h);
			lk_lost_count(cl->lt, cause);
		} else {
			hold_lost(h, 1, h->gone_cause);
		}
		lock_pump(lk);
	}
	if (answer)
		lk_reply(cl, LK_LOST, 0, WHY_LOST);
}

int
locks_adopt(struct lclient *cl, const char *key, size_t keylen, long kind,
    long long token, unsigned holds, long ttl_ms, int64_t sent_us,
    const char *value, size_t valuelen, long delay_ms)
{
	struct locks *lt = cl->lt;
	struct lock *lk = lock_get(lt, key, keylen);
	struct hold *h, *next;

	/* Redis just showed the key as cl's: a hold here it excludes is
	 * stale (e.g. of a session resumed on another broker, which passed
	 * the key on there without a release message). */
	for (h = TAILQ_FIRST(&lk->holds); h != NULL; h = next) {
		next = TAILQ_NEXT(h, klink);
		if (h->cl == cl || (kind != LK_EXCLUSIVE &&
		    h->kind != LK_EXCLUSIVE && h->kind == kind))
			continue;
		if (h->releasing) {
			lock_gc(lk);
			return -1;	/* its release's reply ends that hold */
		}
		hold_lost(h, 1, LK_LOST_TAKEN);
	}
	if ((h = hold_of(lk, cl)) == NULL) {
		h = hold_start(lk, cl, kind, token, lk_clamp_ttl(lt, ttl_ms),
		    sent_us, delay_ms);
		/* what the takeover set in Redis, whatever the clamp says */
		h->confirmed_ms = sent_us / 1000 + ttl_ms;
	}
	h->unsure = 0;			/* it came from the record */
	if (h->kind == LK_EXCLUSIVE)
		h->delay_ms = delay_ms > 0 ? delay_ms : 0;
	h->count = holds > 0 ? holds : 1;
	if (valuelen > 0 && h->kind == LK_EXCLUSIVE) {
		/* kept fresh from now on by this hold's renewals */
		free(h->value);
		h->value = value_copy(value, valuelen);
	}
	lk->remote_busy = 0;
	return 0;
}

void
locks_holds(const struct lclient *cl, void (*fn)(void *arg, const char *key,
    size_t keylen, unsigned holds, long ttl_ms, long kind, long delay_ms),
    void *arg)
{
	const struct hold *h;

	TAILQ_FOREACH(h, &cl->held, hlink)
		fn(arg, h->lk->name, h->lk->te.keylen, h->count, h->ttl_ms,
		    h->kind, h->delay_ms);
}

/* --- the admin view ----------------------------------------------------- */

size_t
locks_waiting(struct locks *lt, const char *key, size_t keylen)
{
	const struct lock *lk = lock_find(lt, key, keylen);
	size_t n = 0;

	for (const struct lclient *w = lk != NULL ? lk->whead : NULL; w != NULL;
	    w = w->wnext)
		n++;
	return n;
}

long long
locks_hold_age(struct locks *lt, const char *key, size_t keylen,
    long long token)
{
	const struct lock *lk = lock_find(lt, key, keylen);
	const struct hold *h = lk != NULL ? hold_by_token(lk, token) : NULL;

	return h != NULL ? (long long)((now_us() - h->start_us) / 1000) : -1;
}

/* --- reads (OWNER, CHECK), and writes fenced by a hold --------------- */

_Static_assert(LK_OWNER_SHOWN == STORE_OWNER_SHOWN, "OWNER's holders");

/* A read's answer came: its client, or NULL when it is gone or was
 * answered UNAVAILABLE here. */
static struct lclient *
read_answered(struct op *op, int ok)
{
	struct lclient *cl = lk_op_done(op);

	free(op);
	if (cl != NULL && !ok) {
		lk_reply(cl, LK_UNAVAILABLE, 0, WHY_NO_ANSWER);
		return NULL;
	}
	return cl;
}

/* A read could not be sent: answered UNAVAILABLE at once. */
static void
read_unsent(struct lclient *cl, struct op *op)
{
	lk_op_done(op);
	free(op);
	lk_reply(cl, LK_UNAVAILABLE, 0, "Redis is unreachable");
}

static void
owner_done(void *arg, int ok, long kind, const struct store_holder *sh,
    size_t n, size_t total)
{
	struct lclient *cl = read_answered(arg, ok);
	struct lk_holder h[STORE_OWNER_SHOWN];
	struct lk_result r = { .status = LK_OK, .holders = h, .total = total,
	    .kind = kind == STORE_EXCLUSIVE ? LK_EXCLUSIVE : kind };

	if (cl == NULL)
		return;
	for (r.nholders = 0; r.nholders < n && r.nholders < STORE_OWNER_SHOWN;
	    r.nholders++) {
		h[r.nholders] = (struct lk_holder){ sh[r.nholders].owner,
		    sh[r.nholders].ownerlen, sh[r.nholders].token,
		    sh[r.nholders].pttl, sh[r.nholders].value,
		    sh[r.nholders].valuelen };
	}
	cl->ops->reply(cl->arg, &r);
}

static void
check_done(void *arg, int ok, int current, long long token)
{
	struct lclient *cl = read_answered(arg, ok);
	struct lk_result r = { .status = LK_OK, .kind = current, .n = token };

	if (cl != NULL)
		cl->ops->reply(cl->arg, &r);
}

void
locks_check(struct lclient *cl, const char *key, size_t keylen,
    long long token)
{
	struct op *op = lk_op_new(cl->lt, NULL, cl);

	if (cl->lt->st == NULL || store_check(cl->lt->st, key, keylen, token,
	    check_done, op) != 0)
		read_unsent(cl, op);
}

_Static_assert(LK_KEEPTTL == STORE_KEEPTTL, "SETIF ... KEEPTTL");

static void
fenced_done(void *arg, int ok, int written)
{
	struct lclient *cl = read_answered(arg, ok);

	if (cl == NULL)
		return;
	if (written == STORE_DONE)
		lk_reply(cl, LK_OK, 0, NULL);
	else
		lk_reply(cl, LK_NOTHELD, 0, "the hold is not alive in Redis: "
		    "nothing written");
}

/* A write with a read's life: a client gone before Redis answers is not
 * answered (lk_op_done), and the write is made or not all the same. */
void
locks_fenced(struct lclient *cl, const char *key, size_t keylen,
    long long token, const char *datakey, size_t datakeylen,
    const char *value, size_t valuelen, long ttl_ms)
{
	struct op *op = lk_op_new(cl->lt, NULL, cl);

	if (cl->lt->st == NULL || store_fenced(cl->lt->st, key, keylen, token,
	    datakey, datakeylen, value, valuelen, ttl_ms, fenced_done,
	    op) != 0)
		read_unsent(cl, op);
}

static void
owner_ask(struct lclient *cl, const char *key, size_t keylen,
    int (*ask)(struct store *, const char *, size_t, store_owner_fn *,
    void *))
{
	struct op *op = lk_op_new(cl->lt, NULL, cl);

	if (cl->lt->st == NULL || ask(cl->lt->st, key, keylen, owner_done,
	    op) != 0)
		read_unsent(cl, op);
}

void
locks_owner(struct lclient *cl, const char *key, size_t keylen)
{
	owner_ask(cl, key, keylen, store_owner);
}

void
locks_owner_value(struct lclient *cl, const char *key, size_t keylen)
{
	owner_ask(cl, key, keylen, store_owner_value);
}
