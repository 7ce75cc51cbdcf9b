/*
 * awaits.c - a session's ASYNC waits (awaits.h).
 *
 * One struct await per key the session waits for, found by key while it
 * is live.  A wait ends in the lock table's callbacks, where its waiter
 * may not be freed (the table is still using it): an ended wait leaves
 * the key index at once (the key may be waited for again, CANCEL finds
 * nothing) and its waiter is freed on the next loop turn (reap_ev).
 */
#include "awaits.h"
#include "keytab.h"
#include "locks.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

enum await_state {
	AW_ASKING,		/* the ACQUIRE is not answered yet */
	AW_QUEUED,		/* answered "queued": the wait runs */
	AW_HELD_BACK,		/* granted; told once its record is in */
	AW_ENDED,		/* told its outcome: waiter to free */
};

struct await {
	struct keytab_entry by_key;	/* in aw->keys unless ended */
	struct awaits *aw;
	struct lclient *w;		/* its waiter (locks_waiter_new) */
	TAILQ_ENTRY(await) link;	/* in aw->ended once ended */
	enum await_state state;
	unsigned record_wait;		/* its grant waits for the record: the
					 * writes to come (ALL: one per key) */
	unsigned resumed:1;		/* queued again after a RESUME */
	unsigned full:1;		/* may not queue (await_info.full) */
	long kind, ttl_ms;
	int64_t deadline;		/* Unix ms */
	char *value;			/* its VALUE (NUL-ended), NULL none */
	long delay_ms;			/* its DELAY, < 0 none */
	unsigned cancel_due:1;		/* CANCEL waits for that record */
	long long token;		/* held back: the grant's */
	long long *tokens;		/* ... an ALL grant's (nkeys) */
	int nkeys;			/* an ALL wait's keys (key: its name) */
	size_t keylen;
	char key[];
};

struct awaits {
	const struct await_ops *ops;
	void *arg;
	struct keytab *keys;		/* live waits by key */
	TAILQ_HEAD(, await) ended;	/* their waiters freed by reap_ev */
	struct event *reap_ev;
};

static void
end_wait(struct await *a)
{
	struct awaits *aw = a->aw;

	keytab_remove(aw->keys, &a->by_key);
	a->state = AW_ENDED;
	TAILQ_INSERT_TAIL(&aw->ended, a, link);
	event_active(aw->reap_ev, EV_TIMEOUT, 0);
}

static void
await_free(struct await *a)
{
	locks_client_free(a->w);
	free(a->value);
	free(a->tokens);
	free(a);
}



static void
reap_cb(evutil_socket_t fd, short what, void *arg)
{
	struct awaits *aw = arg;
	struct await *a;

	(void)fd;
	(void)what;
	while ((a = TAILQ_FIRST(&aw->ended)) != NULL) {
		TAILQ_REMOVE(&aw->ended, a, link);
		await_free(a);
	}
}

/* --- the waiter's callbacks (inside the lock table) ----------------- */

static void
w_reply(void *arg, const struct lk_result *r)
{
	struct await *a = arg;
	struct awaits *aw = a->aw;

	if (a->state == AW_HELD_BACK || a->state == AW_ENDED)
		return;		/* a waiter answers once per ACQUIRE */
	if (a->state == AW_ASKING && !a->resumed) {
		end_wait(a);
		aw->ops->reply(aw->arg, r);
		return;
	}
	/* queued, or resumed (whose first answer is its outcome) */
	if (r->status == LK_OK && a->record_wait) {
		a->state = AW_HELD_BACK;
		a->token = r->n;
		if (r->ntokens > 0) {
			a->tokens = xcalloc(r->ntokens, sizeof *a->tokens);
			memcpy(a->tokens, r->tokens, r->ntokens *
			    sizeof *r->tokens);
		}
		return;
	}
	end_wait(a);
	aw->ops->outcome(aw->arg, a->key, a->keylen, r);
}

static void
w_queued(void *arg)
{
	struct await *a = arg;
	struct await_info info;

	if (a->state != AW_ASKING)
		return;
	if (a->full) {
		/* it would queue, and the session has its bound of queued
		 * waits: withdrawn (its waiter is freed on the next turn,
		 * giving back a grant in flight), answered LIMIT */
		struct lk_result r = { .status = LK_LIMIT, .why = "this session "
		    "has max_waiters_per_session ASYNC waits queued" };

		end_wait(a);
		if (a->resumed)
			a->aw->ops->outcome(a->aw->arg, a->key, a->keylen, &r);
		else
			a->aw->ops->reply(a->aw->arg, &r);
		return;
	}
	a->state = AW_QUEUED;
	info.key = a->key;
	info.keylen = a->keylen;
	info.kind = a->kind;
	info.ttl_ms = a->ttl_ms;
	info.deadline = a->deadline;
	info.resumed = a->resumed;
	info.value = a->value;
	info.valuelen = a->value != NULL ? strlen(a->value) : 0;
	info.delay_ms = a->delay_ms;
	a->aw->ops->queued(a->aw->arg, &info);
}

/* A waiter holds nothing (its grants are its owner's): no loss, no
 * record, no doubt of its own. */
static const struct lk_client_ops waiter_ops = { w_reply, NULL, NULL,
    NULL, w_queued, NULL };

/* --- the session's calls ------------------------------------------- */

struct awaits *
awaits_new(struct event_base *base, const struct await_ops *ops, void *arg)
{
	struct awaits *aw = xcalloc(1, sizeof *aw);

	aw->ops = ops;
	aw->arg = arg;
	aw->keys = keytab_new();
	TAILQ_INIT(&aw->ended);
	aw->reap_ev = event_new(base, -1, 0, reap_cb, aw);
	if (aw->reap_ev == NULL)
		fatalx("cannot create an event");
	return aw;
}

static int
free_one(struct keytab_entry *e, void *arg)
{
	struct await *a = (struct await *)e;

	keytab_remove(arg, e);
	await_free(a);
	return 0;
}

void
awaits_free(struct awaits *aw)
{
	if (aw == NULL)
		return;
	keytab_each(aw->keys, free_one, aw->keys);
	reap_cb(-1, 0, aw);
	event_free(aw->reap_ev);
	keytab_free(aw->keys);
	free(aw);
}

size_t
awaits_count(const struct awaits *aw)
{
	return aw != NULL ? keytab_count(aw->keys) : 0;
}

static struct await *
find(const struct awaits *aw, const char *key, size_t keylen)
{
	return aw != NULL ? (struct await *)keytab_find(aw->keys, key,
	    keylen) : NULL;
}

int
awaits_has(const struct awaits *aw, const char *key, size_t keylen)
{
	return find(aw, key, keylen) != NULL;
}

void
awaits_acquire(struct awaits *aw, struct lclient *owner,
    const struct await_info *info)
{
	struct await *a = xcalloc(1, sizeof *a + info->keylen);
	int64_t left = info->deadline - wall_ms();

	a->aw = aw;
	a->keylen = info->keylen;
	memcpy(a->key, info->key, info->keylen);
	a->by_key.key = a->key;
	a->by_key.keylen = a->keylen;
	a->state = AW_ASKING;
	a->resumed = info->resumed ? 1 : 0;
	a->full = info->full ? 1 : 0;
	a->nkeys = info->nkeys;
	a->kind = info->kind;
	a->ttl_ms = info->ttl_ms;
	a->deadline = info->deadline;
	a->delay_ms = info->delay_ms;
	if (info->valuelen > 0) {
		a->value = xmalloc(info->valuelen + 1);
		memcpy(a->value, info->value, info->valuelen);
		a->value[info->valuelen] = '\0';
	}
	keytab_insert(aw->keys, &a->by_key);
	a->w = locks_waiter_new(owner, &waiter_ops, a);
	if (info->nkeys > 0)
		locks_acquire_all(a->w, info->keys, info->keylens,
		    (size_t)info->nkeys, left > 0 ? (long)(left < LONG_MAX ?
		    left : LONG_MAX) : 0, a->ttl_ms);
	else
		locks_acquire_value(a->w, a->key, a->keylen, a->kind,
		    left > 0 ? (long)(left < LONG_MAX ? left : LONG_MAX) : 0,
		    a->ttl_ms, info->value, info->valuelen, info->delay_ms);
}

int
awaits_cancel(struct awaits *aw, const char *key, size_t keylen)
{
	struct await *a = find(aw, key, keylen);

	if (a != NULL && a->state == AW_HELD_BACK) {
		a->cancel_due = 1;	/* granted: answered once it is told */
		return -1;
	}
	if (a == NULL || a->state != AW_QUEUED)
		return 0;
	keytab_remove(aw->keys, &a->by_key);
	await_free(a);			/* a grant in flight is given back */
	return 1;
}

int
awaits_hold_for_record(struct awaits *aw, const char *key, size_t keylen)
{
	struct await *a = find(aw, key, keylen);

	if (a == NULL || !(a->state == AW_QUEUED || (a->state == AW_ASKING &&
	    a->resumed)))
		return 0;
	a->record_wait = 1;
	return 1;
}

/* Tell a held-back grant: its outcome, then a CANCEL that waited. */
static void
tell_held_back(struct await *a)
{
	struct awaits *aw = a->aw;
	struct lk_result r = { .status = LK_OK, .n = a->token };
	int cancel = a->cancel_due;

	/* (an ALL wait is never held back: a grace session has none) */

	end_wait(a);
	aw->ops->outcome(aw->arg, a->key, a->keylen, &r);
	if (cancel)
		aw->ops->cancelled(aw->arg, 0);
}

int
awaits_recorded(struct awaits *aw, const char *key, size_t keylen)
{
	struct await *a = find(aw, key, keylen);

	if (a == NULL || a->state != AW_HELD_BACK)
		return 0;
	tell_held_back(a);
	return 1;
}

static int
tell_one(struct keytab_entry *e, void *arg)
{
	struct await *a = (struct await *)e;

	(void)arg;
	if (a->state == AW_HELD_BACK)
		tell_held_back(a);	/* removes e: allowed */
	return 0;
}

void
awaits_recorded_all(struct awaits *aw)
{
	if (aw != NULL)
		keytab_each(aw->keys, tell_one, NULL);
}
