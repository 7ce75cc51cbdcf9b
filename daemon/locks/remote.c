/*
 * remote.c - remote grants: the cross-broker hand-off in one Redis round
 * trip.  An exclusive waiter here whose attempt found
 * the key held elsewhere is recorded in Redis (store_rwait): a release on
 * any broker then grants it the key in its own script call, FIFO by the
 * records' first time (lib/holders.lua, remote_grant), and publishes the
 * grant on this broker's own channel; it reaches it as
 * locks_store_granted.  Today's path,
 * where the release publishes, this broker wakes and sends its own
 * attempt, took two round trips.
 *
 * Recorded: single-key exclusive waits, with or without a value (the
 * grant writes it in the same call), within their session's
 * max_locks_per_session; a grace session's too: its grant goes through
 * grant_local as any other, so its record lists the hold before its
 * client hears of it.  The store refuses to record in cluster mode and
 * with redis_replica_acks.  A recorded waiter's own attempt that meets
 * its record's grant in Redis leaves the key to it (records.c); a grant
 * heard while such an attempt is in flight is decided when it answers.
 *
 * A grant in Redis lasts at most STORE_REMOTE_GRANT_MS until this broker
 * renews it: delivered, its hold is renewed at once (the jeopardy clock
 * counts from that renewal, and until it answers trusts half the grant's
 * time, counted from the grant's time in the message); not deliverable
 * (the wait ended or was answered, its attempt is in flight, its
 * session's limit is full, the message came after half that time: a
 * paused broker; the store is not up, or the Sentinel lease not held),
 * it is released at once and counted in orphans.  A broker killed -9
 * is granted nothing: the release's PUBLISH of the grant reaches nobody,
 * and the script tries the next record instead.  The grant's age is
 * measured on the master's clock (store_redis_now: this broker's clock
 * may be set apart from it by any amount); without a recent sample of it
 * (a new master, no announce answered lately) a grant is not trusted
 * either.  A broker that hangs with its connections open never renews
 * its grants: they are free again STORE_REMOTE_GRANT_MS later; records of
 * a broker whose announcement ended are skipped (announce.lua).
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

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
static void
remote_take(struct lock *lk, struct lclient *w, const char *id,
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

/* The waiter of wait id wid whose client-id is id, or NULL. */
static struct lclient *
waiter_of(const struct lock *lk, unsigned long long wid, const char *id)
{
	struct lclient *w = waiter_by_rwid(lk, wid);

	return w != NULL && strcmp(w->id, id) == 0 ? w : NULL;
}

void
locks_store_granted(void *arg, const char *key, size_t keylen,
    unsigned long long wid, const char *owner, size_t ownerlen,
    long long token, long long grant_ms)
{
	struct locks *lt = arg;
	struct lock *lk;
	struct lclient *w;
	struct lock_rare *x;
	char id[OWNER_MAX + 1];

	if (ownerlen == 0 || ownerlen > OWNER_MAX || token <= 0 ||
	    keylen == 0)
		return;
	memcpy(id, owner, ownerlen);
	id[ownerlen] = '\0';
	lk = lock_get(lt, key, keylen);
	w = waiter_of(lk, wid, id);
	if (w != NULL && w->op != NULL && w->rrecorded) {
		/*
		 * Its attempt is in flight: it ran in Redis before the
		 * release (it answers "held") or after it (a record's grant:
		 * acquire.lua answers STORE_RECORD_GRANTED, writing nothing).
		 * Either way the grant is its: taken when that answers
		 * (remote_stashed), so the waiter holds the token its
		 * watchers were told.
		 */
		x = lk_rare_w(lk);
		if (x->rg_token != 0)
			grant_refused(lk, id, x->rg_token);	/* (never) */
		x->rg_token = token;
		x->rg_ms = grant_ms;
		x->rg_wid = (uint32_t)wid;
		return;
	}
	remote_take(lk, w, id, token, grant_ms);
}

void
remote_stashed(struct lock *lk, const char *id)
{
	struct lock_rare *x = lk->rare;
	long long token;

	if (x == NULL || x->rg_token == 0)
		return;
	token = x->rg_token;
	x->rg_token = 0;
	remote_take(lk, waiter_of(lk, x->rg_wid, id), id, token, x->rg_ms);
}
