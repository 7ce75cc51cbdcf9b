/*
 * holds.c - a session's hold of a key begins, ends, or is lost: told to
 * its session and counted by cause; a grace session's hold found gone
 * waits for its record's verdict instead (hold_doubt); and the keys a
 * client lost, which its next RELEASE or RENEW of them is told of once.
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/*
 * A lock this client held that it no longer does, and what RELEASE and
 * RENEW of it answer once: ERR LOST when it was found lost; for RELEASE,
 * OK 0 when the client's own RELEASE was answered ERR UNAVAILABLE and the
 * broker took the release over (the client's goal is met either way).
 */
struct lostkey {
	struct lostkey *next;
	long long token;
	unsigned released:1;		/* a RELEASE handed to the pending list */
	size_t keylen;
	char key[];
};

/* *found: 0 not there, 1 lost, 2 released by the broker for the client. */
static void
lost_forget(struct lclient *cl, const char *key, size_t keylen, int *found)
{
	struct lostkey **pp;

	*found = 0;
	for (pp = &cl->lost; *pp != NULL; pp = &(*pp)->next) {
		struct lostkey *k = *pp;
		if (k->keylen == keylen && memcmp(k->key, key, keylen) == 0) {
			*pp = k->next;
			*found = k->released ? 2 : 1;
			free(k);
			return;
		}
	}
}

/* Remember lk for cl's next RELEASE/RENEW of it (struct lostkey). */
static void
lost_remember(struct lclient *cl, const struct lock *lk, long long token,
    int released)
{
	struct lostkey *k = xmalloc(sizeof *k + lk->te.keylen);

	k->token = token;
	k->released = released ? 1 : 0;
	k->keylen = lk->te.keylen;
	memcpy(k->key, lk->name, lk->te.keylen);
	k->next = cl->lost;
	cl->lost = k;
}

/* cl is being freed: forget the keys it lost. */
void
lost_clear(struct lclient *cl)
{
	while (cl->lost != NULL) {
		struct lostkey *k = cl->lost;
		cl->lost = k->next;
		free(k);
	}
}

/* Not held by cl: lost (say so once, then forget), released by the broker
 * on cl's behalf after an ERR UNAVAILABLE, or never held? */
void
reply_not_held(struct lclient *cl, const char *key, size_t keylen,
    int releasing)
{
	int found;

	lost_forget(cl, key, keylen, &found);
	if (found == 2 && releasing) {
		/* counted in releases when the broker's release runs */
		lk_reply(cl, LK_OK, 0, NULL);
	} else if (found != 0) {
		lk_reply(cl, LK_LOST, 0, found == 2 ? WHY_RELEASED : WHY_LOST);
	} else {
		lk_reply(cl, LK_NOTHELD, 0, "this session does not hold the key");
	}
}

struct hold *
hold_start(struct lock *lk, struct lclient *cl, long kind, long long token,
    long ttl, int64_t sent_us, long delay_ms)
{
	struct locks *lt = lk->lt;
	struct hold *h = pool_get(lt->pool, sizeof *h);
	int found;

	lost_forget(cl, lk->name, lk->te.keylen, &found);
	pending_drop(lt, lk->name, lk->te.keylen, cl->id);
	h->lk = lk;
	h->cl = cl;
	h->kind = kind;
	h->token = token;
	h->count = 1;
	h->ttl_ms = ttl;
	h->delay_ms = delay_ms > 0 ? delay_ms : 0;
	h->start_us = now_us();
	h->unsure = cl->resumable;
	/* The TTL started in Redis at most when the request was sent. */
	h->renew_at = sent_us / 1000 + lk_renew_period(ttl);
	h->confirmed_ms = sent_us / 1000 + ttl;
	lk->limit = kind > 0 ? kind : 0;
	TAILQ_INSERT_TAIL(&lk->holds, h, klink);
	TAILQ_INSERT_TAIL(&cl->held, h, hlink);
	TAILQ_INSERT_TAIL(&lt->held, h, alink);
	lk->nholds++;
	cl->nheld++;
	lt->stats.locks_held++;
	renew_schedule(lt, h->renew_at);
	lk_held_changed(h, 1, 1);
	notice_hold_start(h);
	return h;
}

/* The hold is over here: unlink and free it (its lock stays); its time
 * is counted unless another session carries it on (h->moved). */
void
hold_end(struct hold *h)
{
	struct lock *lk = h->lk;
	struct lclient *cl = h->cl;

	if (!h->moved)
		histo_observe(&lk->lt->stats.hold, now_us() - h->start_us);
	TAILQ_REMOVE(&lk->holds, h, klink);
	TAILQ_REMOVE(&cl->held, h, hlink);
	TAILQ_REMOVE(&lk->lt->held, h, alink);
	lk->nholds--;
	cl->nheld--;
	lk->lt->stats.locks_held--;
	lk_held_changed(h, 0, 0);
	free(h->value);
	pool_put(lk->lt->pool, h, sizeof *h);
}

/* cl's RELEASE could not be confirmed: the broker frees the key in Redis
 * as soon as Redis answers (pending list) and a RELEASE sent again answers
 * OK 0.  The hold ends here, so the key is no longer renewed, and other
 * sessions of this broker ask Redis again instead of waiting on a hold
 * that may be gone. */
void
hold_release_deferred(struct hold *h, long linger_ms)
{
	struct lock *lk = h->lk;
	struct lclient *cl = h->cl;

	/* a LINGER still counts from now */
	pending_add_until(lk->lt, PEND_RELEASE, lk, cl->id, h->token,
	    linger_ms > 0 ? now_ms() + linger_ms : 0, 0);
	lost_remember(cl, lk, h->token, 1);
	hold_end(h);
}

static const char *const lost_cause_name[LK_LOST_CAUSES] = {
	"expired", "taken", "jeopardy", "failover"
};

/* Count a lost lock (STATS lost and lost_<cause>). */
void
lk_lost_count(struct locks *lt, enum lk_lost_cause cause)
{
	lt->stats.lost++;
	lt->stats.lost_by[cause]++;
}

/* What Redis showed of a hold it no longer has: a cause. */
enum lk_lost_cause
lk_cause_of(int found)
{
	return found == STORE_TAKEN ? LK_LOST_TAKEN : LK_LOST_EXPIRED;
}

/* The hold is lost: tell its session, free it. */
void
hold_lost(struct hold *h, int remember, enum lk_lost_cause cause)
{
	struct lock *lk = h->lk;
	struct lclient *cl = h->cl;
	long long token = h->token;

	hold_end(h);
	lk_lost_count(lk->lt, cause);
	log_info("lock '%s' (token %lld) of client %s was lost (%s)", lk->name,
	    token, cl->id, lost_cause_name[cause]);
	if (remember)
		lost_remember(cl, lk, token, 0);
	if (cl->ops->lost)
		cl->ops->lost(cl->arg, lk->name, lk->te.keylen, token);
}

/*
 * h is gone from Redis (a renewal, a release or a RENEW found another
 * value there).  A grace session's hold may only have been taken over by
 * a RESUME elsewhere (takeover.lua gave it the new generation's value):
 * that is no loss, and neither the session nor the lost counter may hear
 * of one.  So its session checks its record first (ops->doubt) and then
 * settles: taken over (locks_client_taken, nothing said) or lost after
 * all (locks_doubt_settled).  Meanwhile h is neither renewed nor
 * released.  answer: the request in progress (RELEASE, RENEW) waits for
 * the verdict: ERR LOST, or no answer at all.  Returns 0 when no check
 * can be made: the caller reports the loss at once, as for any session.
 */
int
hold_doubt(struct hold *h, int answer, enum lk_lost_cause cause)
{
	struct lclient *cl = h->cl;

	if (!cl->resumable || cl->closing || cl->ops->doubt == NULL)
		return 0;
	h->gone_cause = cause;
	if (cl->doubting)
		cl->doubt_again = 1;	/* the check in flight may predate it */
	else if (cl->ops->doubt(cl->arg))
		cl->doubting = 1;
	else
		return 0;
	h->gone = 1;
	h->releasing = 0;
	if (answer) {
		h->answer = 1;
		cl->answer_due = 1;
	}
	return 1;
}

/* A renewal found h gone (cause: what Redis showed). */
void
hold_gone(struct hold *h, enum lk_lost_cause cause)
{
	if (!hold_doubt(h, 0, cause))
		hold_lost(h, 1, cause);
}
