/*
 * cleanup.c - what Redis must run as soon as it answers again, before any
 * new grant (enum pend_kind): releases and forgets (the pending list),
 * and early hand-offs' passes to run again (re-passes, oldest first,
 * ahead of the others); sent on the reconnect, or on a short timer with
 * backoff when Redis refused them on a live connection.
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* One clean-up to run (enum pend_kind: locks_int.h). */
struct pending {
	struct pending *next;
	struct locks *lt;
	enum pend_kind kind;
	char id[OWNER_MAX + 1];		/* PEND_PASS: the releasing hold's */
	long long token;		/* PEND_RELEASE, PEND_PASS */
	int64_t linger_until;		/* RELEASE ... LINGER: keep the key
					 * taken until then (monotonic ms) */
	unsigned counted:1;		/* its release is in stats already */
	char next_id[OWNER_MAX + 1];	/* PEND_PASS: the new holder's */
	long long next_token;
	long ttl_ms;
	int64_t sent_us;		/* PEND_PASS: when last sent */
	size_t keylen;
	char key[];
};

/*
 * Clean-ups are sent when the connection comes up; one that arises while
 * connected (an error reply, not a lost connection) is sent on a short
 * timer, so the key is not left to its TTL either.
 */
static void
pending_arm(struct locks *lt)
{
	if ((lt->npending == 0 && lt->npasses == 0) || lt->st == NULL ||
	    !store_link_up(lt->st) || evtimer_pending(lt->pending_ev, NULL))
		return;
	timer_add_ms(lt->pending_ev, lt->pending_retry_ms);
}

static void
pending_push(struct locks *lt, struct pending *p)
{
	/* Bounded: past it such keys just run out their TTL. */
	if (lt->npending >= PENDING_MAX) {
		int64_t now = now_ms();

		lt->pending_dropped++;
		if (lt->pending_logged_ms == 0 ||
		    now - lt->pending_logged_ms >= LIMIT_LOG_MS) {
			lt->pending_logged_ms = now;
			log_warn("%d Redis clean-ups pending: more are left to "
			    "their TTL (%llu so far)", PENDING_MAX,
			    (unsigned long long)lt->pending_dropped);
		}
		free(p);
		return;
	}
	lt->npending++;
	p->next = lt->pending;
	lt->pending = p;
	pending_arm(lt);
}

/* linger_until: a RELEASE ... LINGER's end (monotonic ms), or 0;
 * counted: the release is in stats.releases already. */
void
pending_add_until(struct locks *lt, enum pend_kind kind, const struct lock *lk,
    const char *id, long long token, int64_t linger_until, int counted)
{
	struct pending *p;

	for (p = lt->pending; p != NULL; p = p->next)
		if (p->kind == kind && p->token == token &&
		    p->keylen == lk->te.keylen &&
		    memcmp(p->key, lk->name, p->keylen) == 0 &&
		    strcmp(p->id, id) == 0) {
			if (linger_until > p->linger_until)
				p->linger_until = linger_until;
			return;		/* already to be done */
		}
	p = xcalloc(1, sizeof *p + lk->te.keylen);
	p->linger_until = linger_until;
	p->counted = counted ? 1 : 0;
	p->lt = lt;
	p->kind = kind;
	owner_copy(p->id, id);
	p->token = token;
	p->keylen = lk->te.keylen;
	memcpy(p->key, lk->name, lk->te.keylen);
	pending_push(lt, p);
}

void
pending_add(struct locks *lt, enum pend_kind kind, const struct lock *lk,
    const char *id, long long token)
{
	pending_add_until(lt, kind, lk, id, token, 0, 0);
}

/* cl now holds key again: a queued forget of its unanswered grant (by
 * client-id, any token) must not free the new hold. */
void
pending_drop(struct locks *lt, const char *key, size_t keylen, const char *id)
{
	struct pending **pp = &lt->pending;

	while (*pp != NULL) {
		struct pending *p = *pp;

		if (p->kind == PEND_FORGET && p->keylen == keylen &&
		    memcmp(p->key, key, keylen) == 0 && strcmp(p->id, id) == 0) {
			*pp = p->next;
			lt->npending--;
			free(p);
		} else {
			pp = &p->next;
		}
	}
}

static void
pending_done(void *arg, int ok, int released)
{
	struct pending *p = arg;
	struct locks *lt = p->lt;

	if (!ok) {
		/* connection lost: again at the reconnect; an error reply:
		 * again later, and later each time */
		if (lt->pending_retry_ms * 2 <= PENDING_RETRY_MAX_MS)
			lt->pending_retry_ms *= 2;
		pending_push(lt, p);
		return;
	}
	lt->pending_retry_ms = PENDING_RETRY_MIN_MS;
	if (released == STORE_DONE && p->kind == PEND_FORGET)
		lt->stats.orphans++;
	else if (released == STORE_DONE && !p->counted)
		lt->stats.releases++;
	free(p);
}

/* An early hand-off's pass.lua to run again (PEND_PASS), after the
 * others: they go in the order they were made. */
static void
repass_push(struct locks *lt, struct pending *p)
{
	if (lt->npasses >= PENDING_MAX) {
		/* the reassert of the new holder still decides: at worst it
		 * is reported lost and the old value runs out its TTL */
		lt->pending_dropped++;
		free(p);
		return;
	}
	p->next = NULL;
	if (lt->passes_tail != NULL)
		lt->passes_tail->next = p;
	else
		lt->passes = p;
	lt->passes_tail = p;
	lt->npasses++;
}

/*
 * An early hand-off's pass that Redis did not take: no answer (the
 * connection went: it may or may not have run) or refused (OOM, READONLY:
 * its one write, the SET, did not run).  Either is an outage: no more
 * hand-offs from the chain, and the pass runs again (a no-op if it ran)
 * -- first thing on the reconnect, ahead of the reassert that then finds
 * the new holder's value; or, refused on a live connection, on the
 * clean-up timer with backoff, instead of the new holder's renewals --
 * until it runs, or the new holder's TTL runs out by the broker's count
 * (hold_jeopardy: it is lost then, and both values are freed).
 */
void
pass_later(struct lock *lk, const struct op *op, struct hold *h)
{
	struct locks *lt = lk->lt;
	struct pending *p = xcalloc(1, sizeof *p + lk->te.keylen);

	chain_end(lk);
	p->lt = lt;
	p->kind = PEND_PASS;
	owner_copy(p->id, op->prev_id);
	p->token = op->prev_token;
	owner_copy(p->next_id, op->id);
	p->next_token = op->token;
	p->ttl_ms = op->ttl_ms;
	p->sent_us = op->sent_us;
	p->keylen = lk->te.keylen;
	memcpy(p->key, lk->name, lk->te.keylen);
	repass_push(lt, p);
	if (h != NULL && lk_key_up(lk))
		h->pass_pending = 1;
	pending_arm(lt);
}

static void
repass_done(void *arg, int ok, int passed)
{
	struct pending *p = arg;
	struct locks *lt = p->lt;
	struct lock *lk = lock_find(lt, p->key, p->keylen);
	struct hold *h = lk != NULL ? hold_by_token(lk, p->next_token) : NULL;

	if (!ok && h == NULL && lk != NULL) {
		/* the new holder is gone (released, lost, its session
		 * ended: its own value's release is on its way): nothing to
		 * move any more, only the releasing hold's value to free */
		pending_add_until(lt, PEND_RELEASE, lk, p->id, p->token, 0, 1);
		free(p);
		return;
	}
	if (!ok) {
		/* again on the next reconnect, or (refused) the timer */
		repass_push(lt, p);
		pending_arm(lt);
		return;
	}
	if (h != NULL) {
		h->pass_pending = 0;
		if (passed == STORE_DONE) {
			h->confirmed_ms = p->sent_us / 1000 + p->ttl_ms;
		} else {
			/* Not passed: the reassert behind it (a reconnect)
			 * finds the holder lost, or sets it again during a
			 * lock delay (the failover lost the old value); on a
			 * live connection a renewal now says which. */
			h->renew_at = now_ms();
			renew_schedule(lt, h->renew_at);
		}
	}
	free(p);
}

/* p (unlinked) to Redis now; back in the list when it cannot go. */
static void
repass_send(struct locks *lt, struct pending *p)
{
	struct lock *lk = lock_find(lt, p->key, p->keylen);
	/* the new holder's value goes with it (none if it has gone) */
	const struct hold *h = lk != NULL ? hold_by_token(lk, p->next_token) :
	    NULL;
	const char *value = h != NULL ? h->value : NULL;

	p->sent_us = now_us();
	if (store_pass(lt->st, p->key, p->keylen, p->id, strlen(p->id),
	    p->token, p->next_id, strlen(p->next_id), p->next_token,
	    p->ttl_ms, value, value_len(value), 1, repass_done, p) != 0)
		repass_push(lt, p);
}

/* h's pass waits in the list (pass_pending): unlink and return it. */
static struct pending *
repass_unlink(struct locks *lt, const struct hold *h)
{
	struct pending **pp, *prev = NULL;

	for (pp = &lt->passes; *pp != NULL; prev = *pp, pp = &(*pp)->next) {
		struct pending *p = *pp;

		if (p->next_token != h->token || p->keylen !=
		    h->lk->te.keylen || memcmp(p->key, h->lk->name,
		    p->keylen) != 0)
			continue;
		*pp = p->next;
		if (lt->passes_tail == p)
			lt->passes_tail = prev;
		lt->npasses--;
		return p;
	}
	return NULL;		/* in flight now */
}

/* h ends by a release (RELEASE, its session's end) while its pass waits:
 * the pass goes first, on the same connection, so the release finds the
 * value it releases. */
void
pass_before_release(struct locks *lt, struct hold *h)
{
	struct pending *p;

	if (h->pass_pending && (p = repass_unlink(lt, h)) != NULL)
		repass_send(lt, p);
}

/* An early hand-off's pass that waits to run again (refused) for h:
 * never mind it, the key is freed instead (the releasing hold's value
 * here; h's own by the caller).  One in flight frees it itself when it
 * fails (repass_done). */
void
pass_forsake(struct locks *lt, const struct hold *h)
{
	struct pending *p = repass_unlink(lt, h);

	if (p == NULL)
		return;
	pending_add_until(lt, PEND_RELEASE, h->lk, p->id, p->token, 0, 1);
	free(p);
}

/* Run the passes again, oldest first; what cannot be sent stays. */
static void
repass_flush(struct locks *lt)
{
	struct pending *list = lt->passes, *p;

	lt->passes = lt->passes_tail = NULL;
	lt->npasses = 0;
	while ((p = list) != NULL) {
		list = p->next;
		repass_send(lt, p);
	}
}

/*
 * Send every pending clean-up; what cannot be sent stays for next time.
 * A key with a Redis operation in flight is left for later: a clean-up
 * sent behind an acquire of the same client (acquire.lua may answer the
 * old token) would free the grant that client is about to be told of.
 */
static void
pending_flush(struct locks *lt)
{
	struct pending *list = lt->pending, *p;

	lt->pending = NULL;
	lt->npending = 0;
	while ((p = list) != NULL) {
		struct lock *lk = lock_find(lt, p->key, p->keylen);
		int rc;

		list = p->next;
		if (p->kind == PEND_FORGET && lk != NULL &&
		    hold_of_id(lk, p->id) != NULL) {
			free(p);	/* that client holds it now */
			continue;
		}
		if (lk != NULL && (lk->attempts || lk->releasing || lk->refs)) {
			pending_push(lt, p);
			continue;
		}
		if (p->kind == PEND_FORGET)
			rc = store_forget(lt->st, p->key, p->keylen, p->id,
			    strlen(p->id), pending_done, p);
		else if (p->linger_until > now_ms())
			rc = store_linger(lt->st, p->key, p->keylen, p->id,
			    strlen(p->id), p->token, (long)(p->linger_until -
			    now_ms()), 1, pending_done, p);
		else	/* (a value of the hold, if it had one, goes too) */
			rc = store_release(lt->st, p->key, p->keylen, p->id,
			    strlen(p->id), p->token, 1, pending_done, p);
		if (rc != 0)
			pending_push(lt, p);
	}
}

void
pending_cb(evutil_socket_t fd, short what, void *arg)
{
	struct locks *lt = arg;
	size_t before = lt->npending + lt->npasses;

	(void)fd;
	(void)what;
	if (lt->st == NULL || !store_link_up(lt->st))
		return;		/* the reconnect flushes them */
	repass_flush(lt);
	pending_flush(lt);
	/* what stayed (its key busy, or Redis refusing) waits longer */
	if (lt->npending + lt->npasses >= before && lt->pending_retry_ms * 2 <=
	    PENDING_RETRY_MAX_MS)
		lt->pending_retry_ms *= 2;
	pending_arm(lt);
}

/* Redis answers again (a reconnect, or keys rerouted to a master that
 * is up): the clean-ups go now, ahead of any new grant on the pipe, and
 * early hand-offs Redis may not have heard of ahead of all. */
void
cleanup_run(struct locks *lt)
{
	lt->pending_retry_ms = PENDING_RETRY_MIN_MS;
	repass_flush(lt);
	pending_flush(lt);
}

/* The table is being freed: forget what was left to do. */
void
cleanup_free(struct locks *lt)
{
	while (lt->pending != NULL) {
		struct pending *p = lt->pending;
		lt->pending = p->next;
		free(p);
	}
	while (lt->passes != NULL) {
		struct pending *p = lt->passes;
		lt->passes = p->next;
		free(p);
	}
}

size_t
locks_pending(const struct locks *lt)
{
	return lt->npending;
}
