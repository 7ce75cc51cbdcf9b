/*
 * awaits.h - a session's waits that do not block it (ACQUIRE ... WAIT
 * <ms> ASYNC, protocol 1.2).
 *
 * Each wait is a waiter of the session's lock client (locks_waiter_new):
 * it queues for its key while the session goes on with other requests,
 * and what it is granted is the session's hold.  The ACQUIRE itself is
 * answered once, through ops->reply (granted at once, BUSY, an error) or
 * ops->queued (it waits on); a queued wait's outcome comes later through
 * ops->outcome, exactly once, unless the wait is cancelled or the session
 * ends first.  Speaks in the lock table's terms; the session puts them in
 * wire words.
 */
#ifndef LOCKBROKER_AWAITS_H
#define LOCKBROKER_AWAITS_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct lclient;
struct lk_result;

/* A wait as it was asked for. */
struct await_info {
	const char *key;
	size_t keylen;
	long kind, ttl_ms;
	int64_t deadline;		/* Unix ms (wall_ms) */
	int resumed;			/* queued again after a RESUME */
	const char *value;		/* ACQUIRE ... VALUE (1.2), NULL none */
	size_t valuelen;
	long delay_ms;			/* ACQUIRE ... DELAY (1.2), < 0 none;
					 * not in a grace record's wait: a
					 * wait queued again after a RESUME
					 * has none */
	int full;			/* the session has its bound of queued
					 * waits: answered at once (granted,
					 * BUSY, an error) it goes on, but one
					 * that would queue is answered LIMIT */
	/* ACQUIRE ALL ... ASYNC (1.2): nkeys keys (0: one key, key); key
	 * is then the wait's name, "ALL <n> <key>..." as on the wire, which
	 * CANCEL ALL names it by and its EVENT lines carry */
	int nkeys;
	const char *const *keys;
	const size_t *keylens;
};

struct await_ops {
	/* The ACQUIRE's own reply: as locks_acquire gave it (not for a
	 * resumed wait: its first answer is an outcome, or queued). */
	void (*reply)(void *arg, const struct lk_result *r);
	/* The ACQUIRE waits on: it is answered "queued" (a resumed wait:
	 * the session is told it is queued again). */
	void (*queued)(void *arg, const struct await_info *info);
	/* A queued wait for key ended: granted (LK_OK, r->n the token),
	 * timed out (LK_BUSY) or failed (another status). */
	void (*outcome)(void *arg, const char *key, size_t keylen,
	    const struct lk_result *r);
	/* A CANCEL that awaits_cancel left waiting is answered: n is 0
	 * (the grant it raced won, and its outcome was told first). */
	void (*cancelled)(void *arg, int n);
};

struct awaits;

struct awaits *awaits_new(struct event_base *base,
    const struct await_ops *ops, void *arg);
/* Withdraw every wait, telling no one (QUIT, the session's end); before
 * the owner's lock client is freed. */
void awaits_free(struct awaits *aw);

/* Waits queued or being answered now. */
size_t awaits_count(const struct awaits *aw);
/* Whether the session waits for key (queued or being answered). */
int awaits_has(const struct awaits *aw, const char *key, size_t keylen);
/*
 * ACQUIRE key ... ASYNC for owner, waiting until info->deadline:
 * answered through ops->reply or ops->queued (info->resumed: through
 * ops->outcome or ops->queued), maybe before this returns.  The caller
 * checked that no wait for key exists and that the count is below its
 * bound.
 */
void awaits_acquire(struct awaits *aw, struct lclient *owner,
    const struct await_info *info);
/*
 * CANCEL key: 1 when a queued wait was withdrawn (a grant in flight for it
 * is given back by the lock table), 0 when none was queued.  A withdrawn
 * wait is told nothing.  -1: the wait was granted and its outcome waits
 * for the grace record; the CANCEL is answered through ops->cancelled
 * after that outcome.
 */
int awaits_cancel(struct awaits *aw, const char *key, size_t keylen);

/*
 * A grace session's fresh grant of key must be in its record before the
 * holder is told.  awaits_hold_for_record: 1 when key's queued wait is the
 * one being granted (its outcome now waits for awaits_recorded), 0 when
 * no queued wait of key (the grant is the session's own request's).
 * awaits_recorded: 1 when key's withheld outcome was sent; all: every
 * withheld outcome goes (the session is no longer a grace one).
 */
int awaits_hold_for_record(struct awaits *aw, const char *key,
    size_t keylen);
int awaits_recorded(struct awaits *aw, const char *key, size_t keylen);
void awaits_recorded_all(struct awaits *aw);

#endif
