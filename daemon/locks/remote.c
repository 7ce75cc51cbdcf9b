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

#include <string.h>

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
	w = grant_waiter_of(lk, wid, id);
	if (w != NULL && w->op != NULL && w->rrecorded) {
		/*
		 * Its attempt is in flight: it ran in Redis before the
		 * release (it answers "held") or after it (a record's grant:
		 * acquire.lua answers STORE_RECORD_GRANTED, writing nothing).
		 * Either way the grant is its: taken when that answers
		 * (grant.c, stash_taken), so the waiter holds the token its
		 * watchers were told.
		 */
		x = lk_rare_w(lk);
		if (x->rg_token != 0)	/* (never: one attempt at a time) */
			grant_remote(lk, NULL, id, x->rg_token, x->rg_ms);
		x->rg_token = token;
		x->rg_ms = grant_ms;
		x->rg_wid = (uint32_t)wid;
		return;
	}
	grant_remote(lk, w, id, token, grant_ms);
}
