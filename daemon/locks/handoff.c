/*
 * handoff.c - RELEASE: a plain release; the last hold of a key with a
 * local waiter handed to it in the same script call (handoff_done); or,
 * from tokens Redis set aside, handed over at once with Redis brought up
 * to date behind it (the early hand-off, pass_local: see PASS_BLOCK).
 *
 * Fairness between brokers.  A release with a local waiter hands the lock
 * over in the same script call, which a waiter on another broker can never
 * win.  So once another broker announced a waiter for the key (the
 * "wanted" message, sent by its failed attempt), and this broker has
 * handed the key over HANDOFF_FAIR times in a row, the next release is a
 * plain one (with its PUBLISH, which wakes the remote waiter) and local
 * waiters hold back YIELD_MS -- time for the remote attempt to land first.
 * The announcement stands until that plain release: a remote waiter that
 * gave up meanwhile costs one needless yield, never a starved waiter.
 */
#include "locks_int.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define HANDOFF_FAIR 4
#define YIELD_MS 5

/*
 * The last hold of a lock with a local waiter: release it and grant it to
 * that waiter in one script call (an exclusive lock to an exclusive
 * waiter, a permit to a waiter for one).  Both sessions wait on the same
 * op.
 */
static void
handoff_done(void *arg, int ok, int granted, long long n, long more)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct locks *lt = op->lt;
	struct lclient *w = op->next;
	struct lclient *cl = lk_op_done(op);
	struct hold *h = cl != NULL ? hold_of(lk, cl) : NULL;

	lk->releasing--;
	if (!ok) {
		/* Neither half is known: free whichever happened as soon as
		 * Redis answers. */
		if (h != NULL) {
			hold_release_deferred(h, 0);
			lk_reply(cl, LK_UNAVAILABLE, 0, WHY_RELEASE_LATER);
		} else {
			pending_add(lt, PEND_RELEASE, lk, op->id, op->token);
		}
		pending_add(lt, PEND_FORGET, lk, op->next_id, 0);
		if (w != NULL && now_ms() >= w->deadline) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			lk_reply(w, LK_UNAVAILABLE, 0, lk_key_up(lk) ?
			    WHY_REFUSED : WHY_NO_ANSWER);
		} else if (w != NULL && lk_key_up(lk)) {
			lock_refused(lk, op->kind);	/* as in attempt_done */
		}
		/* else it stays queued for the reconnect, as in attempt_done */
	} else if (granted) {
		if (h != NULL)
			hold_end(h);	/* else ended when the session went */
		lt->stats.releases++;
		if (granted == -2)	/* in case its undo failed */
			pending_add(lt, PEND_FORGET, lk, op->next_id, 0);
		if (granted < 0) {
			/* released, but no token left to grant with, or the
			 * grant did not reach the replicas (undone) */
			if (w != NULL) {
				waiter_remove(w);
				lt->stats.acquire_errors++;
				if (granted == -1)
					lk_reply(w, LK_LIMIT, 0, WHY_EXHAUSTED);
				else
					lk_reply(w, LK_UNAVAILABLE, 0,
					    WHY_NOT_ACKED);
			}
		} else if (w != NULL && waiter_over_limit(w)) {
			/* its session's quota filled meanwhile: given back;
			 * it leaves with LIMIT, the next waiter tries */
			lt->stats.handoffs++;
			lt->stats.orphans++;
			release_orphan(lk, op->next_id, n);
			waiter_remove(w);
			lt->stats.acquire_errors++;
			lk_reply(w, LK_LIMIT, 0, WHY_LIMIT);
		} else if (w != NULL &&
		    !grant_too_late(op->sent_us, w->wttl)) {
			lt->stats.handoffs++;
			lk_rare_w(lk)->handoffs++;
			chain_start(lk, n, op->kind == LK_EXCLUSIVE ? more : 0);
			grant_local(lk, w, op->kind, n, op->sent_us,
			    op->sent_us);
		} else {
			/* its session left, or a reply so late the grant may
			 * have expired: the waiter (if any) tries again */
			lt->stats.handoffs++;
			lk_rare_w(lk)->handoffs++;
			lt->stats.orphans++;
			release_orphan(lk, op->next_id, n);
		}
		if (cl != NULL)
			lk_reply(cl, LK_OK, 0, NULL);
	} else if (h != NULL && h->pass_pending && h->released_again < 3 &&
	    release_again(h, op) == 0) {
		/* its own pass had not run (release_again): released again
		 * behind it; the waiter tries normally */
	} else if (h != NULL && !hold_doubt(h, 1, lk_cause_of((int)n))) {
		/* The releasing hold was gone; the waiter tries normally. */
		hold_end(h);
		lk_lost_count(lt, lk_cause_of((int)n));
		lk_reply(cl, LK_LOST, 0, WHY_LOST);
	}
	free(op);
	lock_pump(lk);
}

/* The first waiter not being tried, if it may take h's place at once: an
 * exclusive lock goes to an exclusive waiter, a permit to a waiter for
 * one (a shared hold is never handed over: its readers go together). */
struct lclient *
handoff_target(const struct lock *lk, const struct hold *h)
{
	struct lclient *w;

	for (w = lk->whead; w != NULL && w->op != NULL; w = w->wnext)
		;
	if (w == NULL || h->kind == LK_SHARED || w->wkind != h->kind)
		return NULL;
	/* an ACQUIRE ALL waiting long for the key comes before later ones:
	 * the key is set free for it instead */
	if (lk_rare(lk)->mhold_us != 0 && w->wstart_us > lk->rare->mhold_us)
		return NULL;
	return w;
}

/* pass.lua answered (see PASS_BLOCK) for the hold with op->token. */
static void
pass_done(void *arg, int ok, int passed)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct hold *h;

	lk_op_done(op);
	h = hold_by_token(lk, op->token);
	if (ok && passed == STORE_DONE) {
		if (h != NULL)
			h->confirmed_ms = op->sent_us / 1000 + op->ttl_ms;
	} else if (ok) {
		/* Redis shows another value than the releasing hold's: the
		 * key is lost for this holder, and for each later one of the
		 * chain (their calls find the same). */
		chain_end(lk);
		if (h != NULL && !h->releasing)
			hold_lost(h, 1, lk_cause_of(passed));
	} else {
		pass_later(lk, op, h);
	}
	free(op);
	lock_pump(lk);
}

/* h's token is of the chain of tokens set aside, and one is left. */
static int
chain_covers(const struct lock *lk, const struct hold *h)
{
	const struct lock_rare *x = lk_rare(lk);

	return x->chain_next != 0 && x->chain_next <= x->chain_last &&
	    h->token >= x->chain_first && h->token < x->chain_next;
}

/* Whether Redis keeps h's value past w's first renewal, were w given the
 * key now (h's last confirmation, from its send, plus its TTL). */
static int
outlives_renewal(const struct hold *h, const struct lclient *w)
{
	return h->confirmed_ms - now_ms() > lk_renew_period(w->wttl) +
	    PASS_MARGIN_MS;
}

/*
 * The last hold h of an exclusive lock ends (RELEASE, or its session
 * went): pass the key to w, the next waiter here (handoff_target), at
 * once if the chain allows (see PASS_BLOCK).  Returns 1 when done: h has
 * ended and the waiter was told OK; 0 when the key must go through Redis
 * as before.
 */
int
pass_local(struct lock *lk, struct hold *h, struct lclient *w)
{
	struct locks *lt = lk->lt;
	int64_t confirmed = h->confirmed_ms;
	int had_value = h->value != NULL;
	struct hold *nh;
	struct op *op;

	if (w == NULL || lt->st == NULL || !lk_key_up(lk) ||
	    h->kind != LK_EXCLUSIVE || h->cl->resumable || h->releasing ||
	    lk->releasing || lk->attempts || !chain_covers(lk, h) ||
	    !outlives_renewal(h, w) ||
	    (lk_rare(lk)->handoffs >= HANDOFF_FAIR && lk->wanted))
		return 0;	/* (a remote waiter's turn: release_send) */
	op = lk_op_new(lt, lk, NULL);
	owner_copy(op->id, w->id);
	owner_copy(op->prev_id, h->cl->id);
	op->token = lk->rare->chain_next;	/* (chain_covers: it is) */
	op->prev_token = h->token;
	op->ttl_ms = w->wttl;
	op->sent_us = now_us();
	lk->rare->chain_next++;
	lk->rare->handoffs++;
	lt->stats.handoffs++;
	lt->stats.early_handoffs++;
	lt->stats.releases++;
	hold_end(h);
	/* Redis keeps the key (h's value) until then, or longer once
	 * pass.lua has answered.  The OK first: the session's write is then
	 * queued in this loop turn ahead of the store's write to Redis
	 * (hand-off p50 88-95 -> ~55 us, lbbench handoff, 8 contenders). */
	nh = grant_local(lk, w, LK_EXCLUSIVE, op->token, op->sent_us,
	    op->sent_us);
	nh->confirmed_ms = confirmed;
	if (store_pass(lt->st, lk->name, lk->te.keylen, op->prev_id,
	    strlen(op->prev_id), op->prev_token, w->id, strlen(w->id),
	    op->token, w->wttl, nh->value, value_len(nh->value), had_value,
	    pass_done, op) != 0) {
		/* (not while key_up) as a pass without an answer, but lk
		 * stays for the caller, which pumps it */
		lk_op_done(op);
		pass_later(lk, op, nh);
		free(op);
	}
	return 1;
}

/* Hand over to w (handoff_target), or release plainly when there is
 * none or a remote waiter is owed a turn. */
static int
release_send(struct lock *lk, struct hold *h, struct op *op,
    struct lclient *w)
{
	struct locks *lt = lk->lt;
	int64_t now = now_ms();

	if (lt->st == NULL)
		return -1;
	if (!lk_key_up(lk))
		w = NULL;	/* a release goes out anyway (a lease gap) */
	if (op->linger_ms > 0)
		return store_linger(lt->st, lk->name, lk->te.keylen, op->id,
		    strlen(op->id), op->token, op->linger_ms, h->value != NULL,
		    release_done, op);
	if (w != NULL && lk_rare(lk)->handoffs >= HANDOFF_FAIR &&
	    lk->wanted) {
		lk->rare->handoffs = 0;
		lk->wanted = lk->writer_wanted = 0;
		lk->rare->yield_until_ms = now + YIELD_MS;
		lt->stats.fair_yields++;
		w = NULL;
	}
	if (w == NULL && h->kind == LK_SHARED && lk->nholds > 1) {
		/* other reads here go on: a writer waiting elsewhere (wanted)
		 * still waits for them, and the readers here still hold back
		 * for it */
	} else if (w == NULL && h->kind == LK_SHARED) {
		if (writer_elsewhere(lk) && lk->whead != NULL) {
			/* the last read here, and a writer waits elsewhere:
			 * the readers here let it go first */
			lk_rare_w(lk)->yield_until_ms = now + YIELD_MS;
			lt->stats.fair_yields++;
		}
		lk->wanted = lk->writer_wanted = 0;	/* this release
							 * publishes */
	} else if (w == NULL) {
		lk->wanted = lk->writer_wanted = 0;	/* this release
							 * publishes */
	}
	if (w == NULL) {
		return store_release(lt->st, lk->name, lk->te.keylen, op->id,
		    strlen(op->id), op->token, h->value != NULL, release_done,
		    op);
	}
	op->next = w;
	owner_copy(op->next_id, w->id);
	op->sent_us = now_us();
	if (store_handoff(lt->st, lk->name, lk->te.keylen, op->id,
	    strlen(op->id), op->token, w->id, strlen(w->id), w->wttl,
	    h->kind == LK_EXCLUSIVE ? chain_want(w) : 0, w->wvalue,
	    value_len(w->wvalue), h->value != NULL, handoff_done, op) != 0) {
		op->next = NULL;
		return -1;
	}
	w->op = op;
	return 0;
}

void
locks_release(struct lclient *cl, const char *key, size_t keylen,
    long linger_ms)
{
	struct locks *lt = cl->lt;
	struct lock *lk = lock_find(lt, key, keylen);
	struct hold *h = lk != NULL ? hold_of(lk, cl) : NULL;
	struct lclient *w;
	struct op *op;

	if (h == NULL) {
		reply_not_held(cl, key, keylen, 1);
		return;
	}
	if (h->count > 1) {
		h->count--;
		lk_held_changed(h, h->count, 0);
		lk_reply(cl, LK_OK, h->count, NULL);
		return;
	}
	pass_before_release(lt, h);
	limit_sweep(lk);
	w = handoff_target(lk, h);	/* (the FIFO walked once) */
	if (linger_ms <= 0 && pass_local(lk, h, w)) {
		lk_reply(cl, LK_OK, 0, NULL);
		return;
	}
	op = lk_op_new(lt, lk, cl);
	owner_copy(op->id, cl->id);
	op->token = h->token;
	op->kind = h->kind;
	op->linger_ms = linger_ms > lt->cfg.max_ttl_ms ? lt->cfg.max_ttl_ms :
	    linger_ms > 0 ? linger_ms : 0;
	if (release_send(lk, h, op, w) != 0) {
		linger_ms = op->linger_ms;
		lk_op_done(op);
		free(op);
		hold_release_deferred(h, linger_ms);
		lk_reply(cl, LK_UNAVAILABLE, 0, WHY_RELEASE_LATER);
		lock_pump(lk);
		return;
	}
	h->releasing = 1;
	lk->releasing++;
}
