/*
 * renew.c - renewal: RENEW, and the automatic renewal of every hold in
 * batches (one timer for the whole table); what a renewal finds lost;
 * and the jeopardy rule: a hold whose last confirmed grant, renewal or
 * pass, counted from its send, plus its TTL has passed is lost at once.
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* A batch of renewals: one script call for many holds.  A hold may end
 * while its renewal is in flight: the reply finds it again by key and
 * token (tokens are unique per key). */
struct renew_batch {
	struct locks *lt;
	int reassert;			/* after a reconnect: reassert.lua */
	int failover;			/* ... the first on a new master
					 * tenure: what it finds lost, the
					 * failover lost */
	int64_t sent_ms;
	size_t n;
	struct lock *lk[STORE_RENEW_BATCH];
	struct hold *h[STORE_RENEW_BATCH];	/* while sending only */
	long long token[STORE_RENEW_BATCH];
	long ttl[STORE_RENEW_BATCH];
};

static void
renew_one_done(void *arg, int ok, const int *renewed, size_t n)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct lclient *cl = lk_op_done(op);
	long long token = op->token;
	long ttl = op->ttl_ms;
	int64_t sent_ms = op->sent_us / 1000;
	struct hold *h = cl != NULL ? hold_of(lk, cl) : NULL;

	free(op);
	if (cl == NULL) {
		/* session gone meanwhile */
	} else if (!ok || n != 1) {
		lk_reply(cl, LK_UNAVAILABLE, 0, "Redis did not answer");
	} else if (h == NULL || h->token != token) {
		reply_not_held(cl, lk->name, lk->te.keylen, 0);
	} else if (renewed[0] == STORE_UNKNOWN) {
		lk_reply(cl, LK_UNAVAILABLE, 0, "Redis did not answer");
	} else if (renewed[0] == STORE_DONE) {
		h->confirmed_ms = sent_ms + ttl;
		h->ttl_ms = ttl;
		h->renew_at = now_ms() + lk_renew_period(ttl);
		renew_schedule(lk->lt, h->renew_at);
		lk->lt->stats.renewals++;
		lk_held_changed(h, h->count, 0);
		value_refresh(h);
		lk_reply(cl, LK_OK, ttl, NULL);
	} else if (!hold_doubt(h, 1, lk_cause_of(renewed[0]))) {
		/* Lost: say so now and forget it (no EVENT: this reply is
		 * the news). */
		hold_end(h);
		lk_lost_count(lk->lt, lk_cause_of(renewed[0]));
		lk_reply(cl, LK_LOST, 0, WHY_LOST);
	}
	lock_pump(lk);
}

static void
renew_item(struct store_renew_item *item, const struct hold *h, long ttl_ms)
{
	item->key = h->lk->name;
	item->keylen = h->lk->te.keylen;
	item->owner = h->cl->id;
	item->ownerlen = strlen(h->cl->id);
	item->token = h->token;
	item->ttl_ms = ttl_ms;
	item->kind = h->kind == LK_EXCLUSIVE ? STORE_EXCLUSIVE : h->kind;
}

void
locks_renew(struct lclient *cl, const char *key, size_t keylen, long ttl_ms)
{
	struct locks *lt = cl->lt;
	struct lock *lk = lock_find(lt, key, keylen);
	struct hold *h = lk != NULL ? hold_of(lk, cl) : NULL;
	struct store_renew_item item;
	struct op *op;

	if (h == NULL) {
		reply_not_held(cl, key, keylen, 0);
		return;
	}
	op = lk_op_new(lt, lk, cl);
	op->token = h->token;
	op->sent_us = now_us();
	op->ttl_ms = ttl_ms > 0 ? lk_clamp_ttl(lt, ttl_ms) : h->ttl_ms;
	renew_item(&item, h, op->ttl_ms);
	if (store_renew(lt->st, &item, 1, 0, renew_one_done, op) != 0) {
		lk_op_done(op);
		free(op);
		lk_reply(cl, LK_UNAVAILABLE, 0, "Redis is unreachable");
	}
}

/*
 * Auto-renewal: one timer for the whole table.  When it fires, every hold
 * due within a sixth of its TTL is renewed, up to STORE_RENEW_BATCH holds
 * per script call, so 100,000 locks cost a few hundred calls per renew
 * period, not 100,000.
 */
static void
renew_batch_done(void *arg, int ok, const int *renewed, size_t n)
{
	struct renew_batch *b = arg;
	struct locks *lt = b->lt;

	for (size_t i = 0; i < b->n; i++) {
		struct lock *lk = b->lk[i];
		struct hold *h = hold_by_token(lk, b->token[i]);
		int found = ok && i < n ? renewed[i] : STORE_UNKNOWN;

		/* a reassert that got no answer (its master down, or busy
		 * rejoining the cluster) is tried again at the next renewal:
		 * a plain renewal would report the lock lost where the
		 * reassert sets it again during a lock delay */
		if (b->reassert && h != NULL) {
			if (found != STORE_UNKNOWN)
				h->reclaim_until = 0;
			else if (h->reclaim_until == 0)
				h->reclaim_until = now_ms() +
				    lt->cfg.reclaim_ms;
		}
		if (found == STORE_DONE || found == STORE_SET_AGAIN) {
			if (h != NULL) {
				h->confirmed_ms = b->sent_ms + b->ttl[i];
				value_refresh(h);
			}
			lt->stats.renewals++;
			if (found == STORE_SET_AGAIN) {
				lt->stats.reclaimed++;
				log_info("lock '%s' (token %lld) set again in "
				    "Redis after a master change", lk->name,
				    b->token[i]);
			}
		} else if ((found == STORE_GONE || found == STORE_TAKEN) &&
		    h != NULL && !h->releasing && !h->gone) {
			hold_gone(h, b->failover ? LK_LOST_FAILOVER :
			    lk_cause_of(found));
		}
	}
	/* A key may be in the batch more than once (several holds here):
	 * each entry keeps its reference until its own pump, so no pump
	 * frees a lock a later entry still names. */
	for (size_t i = 0; i < b->n; i++) {
		b->lk[i]->refs--;
		lock_pump(b->lk[i]);
	}
	free(b);
}

static void
renew_send(struct locks *lt, struct renew_batch *b)
{
	struct store_renew_item items[STORE_RENEW_BATCH];

	for (size_t i = 0; i < b->n; i++)
		renew_item(&items[i], b->h[i], b->ttl[i]);
	b->sent_ms = now_ms();
	if (store_renew(lt->st, items, b->n, b->reassert, renew_batch_done,
	    b) != 0) {
		/* Redis is down: the reconnect renews everything at once. */
		for (size_t i = 0; i < b->n; i++)
			b->lk[i]->refs--;
		free(b);
	}
}

/*
 * Jeopardy: h's last confirmed grant, renewal or pass, counted from when
 * it was sent, plus its TTL has passed, and nothing newer is confirmed:
 * Redis may have dropped the key, and another broker granted it.  The
 * broker can no longer vouch for the hold, so it ends as lost now (the
 * session is told at once: EVENT LOST, then ERR LOST), not when Redis
 * answers again; the key is freed in Redis then if it still shows this
 * hold (a release of that exact value).
 */
static void
hold_jeopardy(struct hold *h, int64_t now)
{
	struct lock *lk = h->lk;
	struct locks *lt = lk->lt;

	log_debug("lock '%s' (token %lld): no renewal confirmed for its TTL "
	    "(%lld ms past)", lk->name, h->token,
	    (long long)(now - h->confirmed_ms));
	if (h->pass_pending)
		pass_forsake(lt, h);
	pending_add_until(lt, PEND_RELEASE, lk, h->cl->id, h->token, 0, 1);
	hold_lost(h, 1, LK_LOST_JEOPARDY);
}

void
renew_tick(struct locks *lt, int all)
{
	int64_t now = now_ms(), next = 0;
	struct renew_batch *batch[2] = { NULL, NULL };	/* renew, reassert */
	struct hold *h, *hnext;
	int up = lt->st != NULL && store_is_up(lt->st);

	lt->renew_due = 0;
	for (h = TAILQ_FIRST(&lt->held); h != NULL; h = hnext) {
		int due = all || h->renew_at - h->ttl_ms / 6 <= now;
		/* past the lock delay a reassert is a renewal with more keys
		 * (which a migrating slot answers TRYAGAIN) */
		int ra = all || h->reclaim_until > now;
		struct renew_batch *b = batch[ra];

		hnext = TAILQ_NEXT(h, alink);
		if (!h->releasing && !h->gone && h->confirmed_ms <= now) {
			struct lock *lk = h->lk;

			hold_jeopardy(h, now);
			lock_pump(lk);	/* frees no hold: hnext stays */
			continue;
		}
		if (due)
			h->renew_at = now + lk_renew_period(h->ttl_ms);
		/* Not renewed: a release in flight, no Redis (the reconnect
		 * renews everything at once), a pass to run again first (it
		 * renews, when it runs; a reassert decides, though), or a
		 * hold found gone whose session's record decides. */
		if (due && !h->releasing && !h->gone && up &&
		    (!h->pass_pending || ra)) {
			if (b == NULL) {
				b = batch[ra] = xmalloc(sizeof *b);
				b->lt = lt;
				b->reassert = ra;
				b->failover = ra && lt->failover;
				b->n = 0;
			}
			b->lk[b->n] = h->lk;
			b->h[b->n] = h;
			b->token[b->n] = h->token;
			b->ttl[b->n] = h->ttl_ms;
			b->n++;
			h->lk->refs++;
			if (b->n == STORE_RENEW_BATCH) {
				renew_send(lt, b);
				batch[ra] = NULL;
			}
		}
		if (next == 0 || h->renew_at < next)
			next = h->renew_at;
		/* the moment the broker stops vouching for it, unless a
		 * renewal is confirmed first */
		if (!h->releasing && !h->gone && h->confirmed_ms < next)
			next = h->confirmed_ms;
	}
	for (int i = 0; i < 2; i++)
		if (batch[i] != NULL)
			renew_send(lt, batch[i]);
	if (next != 0)
		renew_schedule(lt, next);
}

void
renew_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	renew_tick(arg, 0);
}

/* End the holds the broker can no longer vouch for (hold_jeopardy),
 * pumping none of their keys yet. */
void
jeopardy_sweep(struct locks *lt)
{
	int64_t now = now_ms();
	struct hold *h, *hnext;

	for (h = TAILQ_FIRST(&lt->held); h != NULL; h = hnext) {
		struct lock *lk = h->lk;

		hnext = TAILQ_NEXT(h, alink);
		if (h->releasing || h->gone || h->confirmed_ms > now)
			continue;
		hold_jeopardy(h, now);
		lock_gc(lk);		/* frees no hold: hnext stays */
	}
}
