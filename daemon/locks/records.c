/*
 * records.c - this broker's waiters recorded in Redis for remote grants
 * (remote.c tells the whole story): a waiter is recorded when its attempt
 * found the key held elsewhere (grant.c), once per wait, and forgotten
 * when its wait ends in any other way than a remote grant (waiters.c).
 * A forget that loses a race with a release's grant costs nothing but
 * that grant, which remote.c releases at once.
 */
#include "locks_int.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#define RECORD_KEEP_MS 1000	/* a record outlasts its wait by this */

/*
 * Whether w may be recorded: an exclusive single-key wait, with or
 * without a value (the record carries it, the grant writes it in its own
 * call), of any session, a grace session's too (its record lists the
 * hold before its client hears of it, as for any grant), within its
 * session's limit.
 *
 * A recorded waiter's own attempt can still reach Redis after a release
 * granted its record (an attempt sent on a wake while the record was on
 * its way, or after a release here): it says it is recorded
 * (STORE_WAIT_RECORDED), and acquire.lua, finding the waiter's own value
 * with no more than a remote grant's time to live, leaves the key to the
 * grant (STORE_RECORD_GRANTED) instead of taking it anew with another
 * token; a grant heard while the attempt is in flight waits for its
 * answer (remote.c).  So the waiter holds the token its watchers were
 * told (an election's observers see no token its leader never had).
 */
static int
may_record(struct lclient *w)
{
	struct lclient *hc = lk_holder(w);

	return w->wkind == LK_EXCLUSIVE && w->mw == NULL && !w->conn_wait &&
	    (long)hc->nheld < w->lt->cfg.max_locks_per_session &&
	    w->deadline > now_ms();
}

/* rwait.lua's answer.  Not recorded because the key is free now: the
 * release that freed it came between the waiter's attempt and this
 * (it was published: the waiter's listen mark was set); its retry, if
 * armed, goes now too. */
static void
recorded(void *arg, int ok, int released)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct lclient *w;

	lk_op_done(op);
	for (w = lk->whead; w != NULL; w = w->wnext)
		if (w->rwid == (unsigned long long)op->token)
			break;
	free(op);
	if (w != NULL && ok && released == STORE_GONE) {
		w->rrecorded = 0;
		if (lk_rare(lk)->retry_ev != NULL)
			timer_at_ms(lk->rare->retry_ev, now_ms());
	} else if (w != NULL && ok && released != STORE_DONE) {
		w->rrecorded = 0;	/* held otherwise: not recorded */
	}
	lock_gc(lk);
}

void
waiter_record(struct lclient *w)
{
	struct lock *lk = w->wlock;
	struct locks *lt = w->lt;
	struct op *op;

	if (lk == NULL || w->rrecorded || lt->st == NULL || !may_record(w))
		return;
	if (w->rwid == 0 && (w->rwid = ++lt->rwait_seq) == 0)
		w->rwid = ++lt->rwait_seq;	/* (wrapped: 0 is none) */
	op = lk_op_new(lt, lk, NULL);
	op->token = (long long)w->rwid;
	if (store_rwait(lt->st, lk->name, lk->te.keylen, 1, w->rwid, w->wttl,
	    w->id, strlen(w->id), w->wvalue, value_len(w->wvalue),
	    (long)(w->deadline - now_ms()) + RECORD_KEEP_MS, recorded,
	    op) != 0) {
		lk_op_done(op);
		free(op);
		return;
	}
	w->rrecorded = 1;
}

static void
forgotten(void *arg, int ok, int released)
{
	(void)arg;
	(void)ok;
	(void)released;
}

/* Forget w's record of its wait for lk, made with value (its wait may
 * have ended: the caller took rrecorded first, and the value). */
void
waiter_unrecord_of(struct lclient *w, const struct lock *lk,
    const char *value)
{
	if (w->lt->st != NULL && lk != NULL)
		(void)store_rwait(w->lt->st, lk->name, lk->te.keylen, 0, w->rwid,
		    w->wttl, w->id, strlen(w->id), value, value_len(value), 0,
		    forgotten, NULL);
}

void
waiter_unrecord(struct lclient *w)
{
	if (!w->rrecorded)
		return;
	w->rrecorded = 0;
	waiter_unrecord_of(w, w->wlock, w->wvalue);
}
