/*
 * values.c - a hold's value (protocol 1.2: ACQUIRE ... VALUE, PROCLAIM):
 * where a leader is reached, shown beside the lock (OWNER ... VALUE,
 * WATCH).  A value comes with its grant (the grant scripts write it in
 * the same call: grant.c, handoff.c); here it is replaced by its holder
 * (PROCLAIM, a reentrant ACQUIRE ... VALUE) and kept fresh beside the
 * renewals, since Redis keeps it with the lock's TTL (value.lua).
 */
#include "locks_int.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* A refresh's answer: nothing to do (a loss is the renewal's to find). */
static void
value_refreshed(void *arg, int ok, int released)
{
	(void)arg;
	(void)ok;
	(void)released;
}

/*
 * value.lua sets the value key's TTL to the lock's PTTL when it runs, so
 * after each confirmed renewal of a hold with a value the value is written
 * again: it lives as long as the lock.  Best effort: a refresh that fails
 * leaves the value to expire with the lock's previous TTL at worst.
 */
void
value_refresh(struct hold *h)
{
	if (h->value == NULL || h->lk->lt->st == NULL)
		return;
	(void)store_value(h->lk->lt->st, h->lk->name, h->lk->te.keylen,
	    h->cl->id, strlen(h->cl->id), h->token, h->value,
	    strlen(h->value), value_refreshed, NULL);
}

/* value.lua answered a PROCLAIM or a reentrant ACQUIRE ... VALUE
 * (op->kind 1: the latter, which counts as one more hold once done). */
static void
value_done(void *arg, int ok, int released)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	long long token = op->token;
	int reentrant = op->kind == 1;
	struct lclient *cl = lk_op_done(op);
	struct hold *h = cl != NULL ? hold_of(lk, lk_holder(cl)) : NULL;

	free(op);
	if (cl == NULL) {
		/* session gone meanwhile */
	} else if (!ok) {
		if (reentrant)
			lk->lt->stats.acquire_errors++;
		lk_reply(cl, LK_UNAVAILABLE, 0, "Redis did not answer");
	} else if (h == NULL || h->token != token) {
		reply_not_held(cl, lk->name, lk->te.keylen, 0);
	} else if (released == STORE_DONE && reentrant) {
		h->count++;
		lk->lt->stats.acquires++;
		lk_held_changed(h, h->count, 0);
		lk_reply(cl, LK_OK, h->token, NULL);
	} else if (released == STORE_DONE) {
		lk_reply(cl, LK_OK, 0, NULL);
	} else if (cl != h->cl) {
		/* an ASYNC wait's reentrant ACQUIRE: the loss is its owner's
		 * news (EVENT LOST), the answer this request's */
		hold_gone(h, lk_cause_of(released));
		lk_reply(cl, LK_LOST, 0, WHY_LOST);
	} else if (!hold_doubt(h, 1, lk_cause_of(released))) {
		hold_end(h);
		lk_lost_count(lk->lt, lk_cause_of(released));
		lk_reply(cl, LK_LOST, 0, WHY_LOST);
	}
	lock_pump(lk);
}

/*
 * Replace the value of h, an exclusive hold (cl's, or its owner's for a
 * waiter), with text, and answer cl once Redis holds it.  The hold keeps
 * the new text whatever the write's fate: renewals write it again
 * (value_refresh).  reentrant: an ACQUIRE ... VALUE of a key held, which
 * is one more hold when done and answers the token.
 */
void
value_write(struct lclient *cl, struct hold *h, const char *text,
    size_t textlen, int reentrant)
{
	struct locks *lt = cl->lt;
	struct lock *lk = h->lk;
	struct op *op;

	free(h->value);
	h->value = value_copy(text, textlen);
	op = lk_op_new(lt, lk, cl);
	op->token = h->token;
	op->kind = reentrant ? 1 : 0;
	if (lt->st == NULL || store_value(lt->st, lk->name, lk->te.keylen,
	    h->cl->id, strlen(h->cl->id), h->token, text, textlen, value_done,
	    op) != 0) {
		lk_op_done(op);
		free(op);
		if (reentrant)
			lt->stats.acquire_errors++;
		lk_reply(cl, LK_UNAVAILABLE, 0, "Redis is unreachable");
	}
}

void
locks_acquire_value(struct lclient *cl, const char *key, size_t keylen,
    long kind, long wait_ms, long ttl_ms, const char *value, size_t valuelen,
    long delay_ms)
{
	struct lock *lk = lock_find(cl->lt, key, keylen);
	struct hold *h = lk != NULL ? hold_of(lk, lk_holder(cl)) : NULL;

	if (h != NULL && valuelen > 0 && kind == LK_EXCLUSIVE &&
	    h->kind == LK_EXCLUSIVE) {
		/* reentrant with a new value: answered once Redis has it */
		if (delay_ms >= 0)
			h->delay_ms = delay_ms;
		value_write(cl, h, value, valuelen, 1);
		return;
	}
	acquire_with(cl, key, keylen, kind, wait_ms, ttl_ms, value, valuelen,
	    delay_ms);
}

void
locks_proclaim(struct lclient *cl, const char *key, size_t keylen,
    const char *text, size_t textlen)
{
	struct lock *lk = lock_find(cl->lt, key, keylen);
	struct hold *h = lk != NULL ? hold_of(lk, cl) : NULL;

	if (h == NULL || h->kind != LK_EXCLUSIVE || textlen == 0 ||
	    textlen > STORE_VALUE_MAX) {
		reply_not_held(cl, key, keylen, 0);
		return;
	}
	value_write(cl, h, text, textlen, 0);
}
