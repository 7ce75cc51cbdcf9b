/*
 * table.c - the lock table's data: key entries, the Redis operations in
 * flight, hold look-ups, the tokens set aside for early hand-offs, and the
 * renewal timer kept due.  Nothing here decides: it calls no other file
 * of locks/ (the order: locks_int.h).
 */
#include "locks_int.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#define RENEW_MIN_MS 1				/* floor of a renew period */

/* Redis can be asked about lk (cluster mode: its slot's master is up). */
int
lk_key_up(const struct lock *lk)
{
	return lk->lt->st != NULL && store_key_up(lk->lt->st, lk->name,
	    lk->te.keylen);
}

/* lk's connection is being made: ms a request may wait for it, else 0. */
long
lk_key_coming(const struct lock *lk)
{
	return lk->lt->st != NULL ? store_key_coming(lk->lt->st, lk->name,
	    lk->te.keylen) : 0;
}

void
lk_reply(struct lclient *cl, enum lk_status status, long long n, const char *why)
{
	struct lk_result r = { .status = status, .n = n, .why = why };

	cl->ops->reply(cl->arg, &r);
}

/* The wait of w goes on: say so once per ACQUIRE, to a client that
 * wants to know (ops->queued: a waiter of locks_waiter_new). */
void
lk_queued(struct lclient *w)
{
	if (w->told_queued || w->ops->queued == NULL)
		return;
	w->told_queued = 1;
	w->ops->queued(w->arg);
}

/* OK token to an ACQUIRE that waited or went to Redis: wait_us from the
 * request to now (the acquire_wait histogram's sample, which the client's
 * side may count per app too). */
void
lk_reply_waited(struct lclient *cl, long long token, int64_t wait_us)
{
	struct lk_result r = { .status = LK_OK, .n = token,
	    .waited = 1, .waited_us = wait_us };

	cl->ops->reply(cl->arg, &r);
}

/* Tell a client that keeps a record of its holds (grace sessions);
 * count 0: the hold ended. */
void
lk_held_changed(const struct hold *h, unsigned count, int fresh)
{
	struct lclient *cl = h->cl;

	if (cl->ops->changed != NULL && !cl->closing)
		cl->ops->changed(cl->arg, h->lk->name, h->lk->te.keylen, count,
		    h->ttl_ms, h->kind, h->delay_ms, fresh);
}

/* A TTL asked for, within [min_ttl_ms, max_ttl_ms]: below the floor the
 * key could expire in Redis before its first renewal lands. */
long
lk_clamp_ttl(const struct locks *lt, long ttl_ms)
{
	if (ttl_ms <= 0)
		ttl_ms = lt->cfg.default_ttl_ms;
	if (ttl_ms < lt->cfg.min_ttl_ms)
		ttl_ms = lt->cfg.min_ttl_ms;
	return ttl_ms > lt->cfg.max_ttl_ms ? lt->cfg.max_ttl_ms : ttl_ms;
}

long
lk_renew_period(long ttl_ms)
{
	return ttl_ms / 3 > RENEW_MIN_MS ? ttl_ms / 3 : RENEW_MIN_MS;
}

/* A value's own copy (NUL-ended), NULL for none. */
char *
value_copy(const char *text, size_t len)
{
	char *v;

	if (text == NULL || len == 0)
		return NULL;
	v = xmalloc(len + 1);
	memcpy(v, text, len);
	v[len] = '\0';
	return v;
}

struct lock *
lock_find(struct locks *lt, const char *key, size_t keylen)
{
	struct keytab_entry *e = keytab_find(lt->keys, key, keylen);

	return e ? (struct lock *)(void *)e : NULL;
}

struct lock *
lock_get(struct locks *lt, const char *key, size_t keylen)
{
	struct lock *lk = lock_find(lt, key, keylen);

	if (lk != NULL)
		return lk;
	lk = pool_get(lt->pool, sizeof *lk + keylen + 1);
	memcpy(lk->name, key, keylen);
	lk->te.key = lk->name;
	lk->te.keylen = keylen;
	lk->lt = lt;
	TAILQ_INIT(&lk->holds);
	keytab_insert(lt->keys, &lk->te);
	return lk;
}

const struct lock_rare lock_rare_none;

/* lk's rare state to write: made on first use (locks_int.h). */
struct lock_rare *
lk_rare_w(struct lock *lk)
{
	if (lk->rare == NULL)
		lk->rare = xcalloc(1, sizeof *lk->rare);
	return lk->rare;
}

/* Free an entry out of the table, with its rare state. */
void
lock_free(struct lock *lk)
{
	if (lk->rare != NULL) {
		if (lk->rare->retry_ev != NULL)
			event_free(lk->rare->retry_ev);
		free(lk->rare);
	}
	pool_put(lk->lt->pool, lk, sizeof *lk + lk->te.keylen + 1);
}

/* Free the entry if nothing refers to it any more. */
void
lock_gc(struct lock *lk)
{
	if (lk->nholds || lk->whead || lk->refs || lk->attempts ||
	    lk->releasing || lk_rare(lk)->mrefs || lk->nt)
		return;		/* (notices: marks.c frees lk after them) */
	keytab_remove(lk->lt->keys, &lk->te);
	lock_free(lk);
}

struct op *
lk_op_new(struct locks *lt, struct lock *lk, struct lclient *cl)
{
	struct op *op = xcalloc(1, sizeof *op);

	op->lt = lt;
	op->lk = lk;
	op->cl = cl;
	if (lk)
		lk->refs++;
	if (cl)
		cl->op = op;
	return op;
}

/* The op's reply arrived: detach it from both ends. */
struct lclient *
lk_op_done(struct op *op)
{
	struct lclient *cl = op->cl;

	if (op->lk)
		op->lk->refs--;
	if (cl)
		cl->op = NULL;
	if (op->next)
		op->next->op = NULL;
	return cl;
}

/* cl's hold of lk, or NULL. */
struct hold *
hold_of(const struct lock *lk, const struct lclient *cl)
{
	struct hold *h;

	TAILQ_FOREACH(h, &lk->holds, klink)
		if (h->cl == cl)
			return h;
	return NULL;
}

/* The hold of lk with this token (unique per key), or NULL. */
struct hold *
hold_by_token(const struct lock *lk, long long token)
{
	struct hold *h;

	TAILQ_FOREACH(h, &lk->holds, klink)
		if (h->token == token)
			return h;
	return NULL;
}

/* lk's exclusive hold, or NULL (it is then alone). */
struct hold *
hold_excl(const struct lock *lk)
{
	struct hold *h = TAILQ_FIRST(&lk->holds);

	return h != NULL && h->kind == LK_EXCLUSIVE ? h : NULL;
}

/* The hold of lk of the session with client-id id, or NULL. */
struct hold *
hold_of_id(const struct lock *lk, const char *id)
{
	struct hold *h;

	TAILQ_FOREACH(h, &lk->holds, klink)
		if (strcmp(h->cl->id, id) == 0)
			return h;
	return NULL;
}

/* The tokens after a grant's own that Redis set aside (PASS_BLOCK). */
void
chain_start(struct lock *lk, long long token, long more)
{
	struct lock_rare *x = more > 0 ? lk_rare_w(lk) : lk->rare;

	if (x == NULL)
		return;		/* no chain, and none to end */
	x->chain_first = more > 0 ? token : 0;
	x->chain_next = more > 0 ? token + 1 : 0;
	x->chain_last = more > 0 ? token + more : 0;
}

/* No more local hand-offs from those tokens: the chain may be gone from
 * Redis, or Redis be another (a failover). */
void
chain_end(struct lock *lk)
{
	chain_start(lk, 0, 0);
}

/* Make sure the renew timer fires no later than when. */
void
renew_schedule(struct locks *lt, int64_t when)
{
	if (lt->renew_due != 0 && lt->renew_due <= when)
		return;
	lt->renew_due = when;
	timer_at_ms(lt->renew_ev, when);
}
