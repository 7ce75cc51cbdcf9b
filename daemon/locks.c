/*
 * locks.c - lock table: holds, FIFO waiters, wake-ups, batched renewal.
 *
 * A key's entry (struct lock) exists while anything refers to it: a local
 * hold, a waiter, or a Redis operation in flight (refs).  lock_pump() is
 * the one place that moves a key forward: each waiter from the head of the
 * FIFO whose kind goes with what is held and tried here (may_try) gets an
 * acquire attempt; the first that does not go stops the walk, so nobody
 * overtakes it (a waiting writer holds back the readers behind it).
 *
 * Kinds (issue 13): a key is a lock or a semaphore.  A lock has one
 * exclusive hold or any number of shared ones; a semaphore of n permits
 * has at most n holds.  Each hold (struct hold) has its own token, TTL
 * and renewal; Redis keeps a shared lock or a semaphore as a sorted set
 * (store.h), an exclusive lock as a string.
 * Every event that may unblock a key (release reply, attempt reply, pub/sub
 * message, retry timer, waiter leaving) ends in lock_pump(), which also
 * frees the entry once nothing refers to it -- so it is always the last
 * use of the entry by its caller.
 *
 * Wake-ups, never polling: a local release pumps at once; a release on
 * another broker arrives by pub/sub; a holder that died without releasing
 * is retried once when its PTTL (returned by the failed attempt) runs out.
 */
#include "locks.h"
#include "keytab.h"
#include "clientid.h"
#include "log.h"
#include "store.h"
#include "util.h"

#include <event2/event.h>
#include <sys/queue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RENEW_MIN_MS 1				/* floor of a renew period */
#define LIMIT_LOG_MS 10000			/* quiet time between limit logs */
/* The text after an ERR code, one place per reason. */
#define WHY_LOST "the lock expired or was taken in Redis"
#define WHY_RELEASED "RELEASE was answered ERR UNAVAILABLE; the broker " \
	"frees the lock in Redis"
#define WHY_RELEASE_LATER "Redis did not confirm the release; the broker " \
	"frees the lock as soon as Redis answers (RELEASE again answers OK 0)"
#define WHY_NO_ANSWER "Redis did not answer"
#define WHY_UNREACHABLE "Redis is unreachable"
#define WHY_TOO_SLOW "Redis answered too slowly for the TTL; the grant " \
	"was given back"
#define WHY_EXHAUSTED "the fencing counter reached 2^53-1; no token is " \
	"left to grant with"
#define WHY_DELAY "Redis changed master: keys that look free are granted " \
	"again once the lock delay ends"
#define WHY_NOT_ACKED "the grant did not reach redis_replica_acks " \
	"replicas in time and was undone"
#define WHY_WAIT_DOWN "Redis was unreachable when the WAIT ran out"
#define WHY_REFUSED "Redis refused the request (the broker log says why)"
#define PTTL_RETRY_MAX (86400LL * 1000)		/* longest retry timer */
#define PENDING_MAX 10000		/* Redis clean-ups remembered */
#define PENDING_RETRY_MIN_MS 100	/* clean-ups refused while connected: */
#define PENDING_RETRY_MAX_MS 2000	/* retried with backoff */
#define REFUSED_MIN_MS 50		/* an attempt Redis refused: tried */
#define REFUSED_MAX_MS 1000		/* again with backoff */
/*
 * Fairness between brokers.  A release with a local waiter hands the lock
 * over in the same script call, which a waiter on another broker can never
 * win.  So once another broker announced a waiter for the key (the
 * "wanted" message, sent by its failed attempt), and this broker has
 * handed the key over HANDOFF_FAIR times in a row, the next release is a
 * plain one (with its PUBLISH, which wakes the remote waiter) and local
 * waiters hold back YIELD_MS -- time for the remote attempt to land first.
 * The announcement stands until that plain release: a remote waiter that
 * gave up meanwhile costs one needless yield, never a starved waiter.
 */
#define HANDOFF_FAIR 4
#define YIELD_MS 5

/*
 * Local hand-offs without a Redis round trip (issue 14).  An exclusive
 * grant made while other waiters queue here sets PASS_BLOCK tokens aside
 * after its own (INCRBY: no other broker and no other key ever gets them),
 * and lk->chain_* remember them.  While they last, the release of a hold
 * of that chain passes the key straight to the next exclusive waiter,
 * with the next token: the waiter is told OK at once and pass.lua brings
 * Redis up to date behind it (not awaited; calls on one connection run in
 * order, so the new holder's renewals and release come after it).  Only
 * when Redis is known to keep the releasing hold's value past the new
 * holder's first renewal (hold.confirmed_ms, less PASS_MARGIN_MS): no
 * other broker can take the key before the call lands or the renewal
 * says it did not.  A pass that finds the chain gone from Redis ends the
 * chain here and the new holder is told it lost the key, as any holder
 * whose renewal finds it gone.
 */
#define PASS_BLOCK 32
#define PASS_MARGIN_MS 10

/*
 * A writer waiting on one broker is not overtaken by readers that arrive
 * after it on another (issue 23).  Its broker marks it in Redis
 * (store_wmark, wmark.lua) with the time it began waiting, when readers
 * may be involved: its attempt found the key held, or readers hold, wait
 * for or were announced for the key here (lock.shared_seen).  A reader
 * carries the writers it came after (lclient.wseen: those of other
 * brokers whose marks it knew of when it arrived, never a later one, so
 * no two brokers' waiters can each wait for the other's), and
 * sacquire.lua does not grant it while one of those marks lives.  The
 * mark is refreshed every MARK_REFRESH_MS while the writer waits, and
 * removed when it is granted or gives up; that of a broker that died ends
 * within MARK_TTL_MS.
 */
#define MARK_TTL_MS 3000
#define MARK_REFRESH_MS 1000

/* One session's hold of a key. */
struct hold {
	struct lock *lk;
	struct lclient *cl;
	TAILQ_ENTRY(hold) klink;	/* in lk->holds */
	TAILQ_ENTRY(hold) hlink;	/* in cl->held */
	TAILQ_ENTRY(hold) alink;	/* in lt->held (all holds) */
	long long token;
	unsigned count;			/* reentrant holds */
	long kind;			/* LK_EXCLUSIVE, LK_SHARED, permits */
	long ttl_ms;
	int64_t renew_at;		/* monotonic ms */
	int64_t confirmed_ms;		/* Redis keeps it at least until then:
					 * its last grant, renewal or pass
					 * confirmed, from the send, plus TTL
					 * (a pass not yet confirmed: the
					 * releasing hold's) */
	int64_t reclaim_until;		/* its reassert got no answer: renew
					 * it with reassert.lua until one comes,
					 * while a lock delay may run (ms) */
	unsigned releasing:1;		/* its release in flight */
	unsigned pass_pending:1;	/* handed over early, and the pass Redis
					 * refused waits to run again (instead
					 * of a renewal: see pass_done) */
	unsigned unsure:1;		/* a grace session's grant its record
					 * may not list (locks_client_taken) */
	unsigned gone:1;		/* Redis no longer shows it; its grace
					 * session checks whether it was
					 * resumed elsewhere (hold_doubt) */
	unsigned answer:1;		/* ... and the request in progress
					 * awaits that verdict */
	unsigned gone_cause:2;		/* ... why (enum lk_lost_cause), for
					 * when the verdict is "lost" */
};

struct lock {
	struct keytab_entry te;		/* te.key points at name */
	struct locks *lt;
	TAILQ_HEAD(, hold) holds;	/* local holds: one exclusive, or
					 * shared ones, or permits */
	unsigned nholds;
	long limit;			/* 0 a lock, n a semaphore: fixed while
					 * anything here holds or waits */
	struct lclient *whead, *wtail;	/* FIFO of local waiters */
	unsigned refs;			/* Redis operations in flight */
	unsigned attempts;		/* acquire attempts in flight */
	unsigned excl_attempt:1;	/* one of them exclusive (alone) */
	unsigned releasing;		/* releases in flight */
	unsigned remote_busy:1;		/* held elsewhere: wait for a wake */
	unsigned in_delay:1;		/* free, but a failover lock delay runs */
	unsigned wakes;			/* wakes so far: an attempt sent before
					 * the last one answered "held" may be
					 * stale news (struct op.wakes) */
	long busy_kind;			/* the kind whose attempt said "held
					 * elsewhere" (remote_busy) */
	struct event *retry_ev;		/* retry at the holder's PTTL */
	int64_t freed_us;		/* when seen free with waiters, or 0 */
	unsigned wanted:1;		/* a remote waiter announced itself */
	unsigned writer_wanted:1;	/* ... and it waits to hold exclusive */
	int64_t yield_until_ms;		/* local attempts wait until then */
	unsigned handoffs;		/* local handoffs in a row */
	long refused_ms;		/* Redis refused an attempt (OOM, BUSY):
					 * the next one after this long, which
					 * doubles while it lasts; 0 none */
	unsigned shared_seen:1;		/* readers here or announced: mark the
					 * writers waiting here */
	long long wstamp;		/* the latest writer mark of another
					 * broker heard of (0 none) */
	/* tokens set aside for local hand-offs (PASS_BLOCK): the chain's
	 * first (granted by Redis), the next to hand out, the last; 0 none */
	long long chain_first, chain_next, chain_last;
	char name[];
};

/*
 * A clean-up Redis must run as soon as it answers again, before any new
 * grant (they go first on the new connection):
 *  - PEND_FORGET: an acquire (or handoff) whose reply was lost with the
 *    connection may have taken the key for a client that was told ERR
 *    UNAVAILABLE: free it if Redis shows it as that client's (forget.lua);
 *  - PEND_RELEASE: a release that could not be sent, or whose reply was
 *    lost (a session that ended, a RELEASE answered ERR UNAVAILABLE): free
 *    it if Redis still shows that exact hold (release.lua).
 * Without this list such keys stayed taken for their whole TTL although
 * Redis was back at once (issue 9, defects 2 and 6).
 *  - PEND_PASS (a list of their own, lt->passes, run in the order they
 *    were made and before the others): an early hand-off whose pass.lua
 *    got no answer, run again (a no-op if it ran), so the reassert behind
 *    it finds the new holder's value whether or not the first call ran.
 */
enum pend_kind { PEND_FORGET, PEND_RELEASE, PEND_PASS };

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

struct lclient {
	struct locks *lt;
	char id[OWNER_MAX + 1];
	const struct lk_client_ops *ops;
	void *arg;
	TAILQ_HEAD(, hold) held;
	size_t nheld;
	struct lostkey *lost;
	/* The request in progress, when it waits on a key or on Redis. */
	struct lock *wlock;		/* the key it waits for */
	struct lclient *wnext;		/* next waiter on wlock */
	long wkind;			/* what it asks for */
	long wttl;			/* TTL to acquire with */
	int64_t deadline;		/* monotonic ms; wait ends */
	int64_t wstart_us;		/* when the wait began */
	struct event *deadline_ev;
	struct op *op;			/* its Redis operation in flight */
	long long wseen;		/* a waiting reader: the writers it came
					 * after (store_acquire's seen) */
	unsigned wmarked:1;		/* a waiting writer marked in Redis */
	TAILQ_ENTRY(lclient) mlink;	/* in lt->marked while wmarked */
	unsigned no_wait:1;		/* EOF seen: ACQUIREs are one try */
	unsigned detached:1;		/* a grace session with no connection:
					 * its holds may be resumed elsewhere */
	unsigned closing:1;		/* being freed: no more news */
	unsigned resumable:1;		/* a grace session's: no early
					 * hand-off from its holds */
	unsigned doubting:1;		/* ops->doubt asked: holds are gone */
	unsigned doubt_again:1;		/* another found gone since the ask */
	unsigned answer_due:1;		/* a reply waits for the verdict */
};

/* One Redis operation for one key (or for OWNER, none). */
struct op {
	struct locks *lt;
	struct lock *lk;		/* holds a ref; NULL for OWNER */
	struct lclient *cl;		/* requester; NULL once it is gone */
	struct lclient *next;		/* handoff: the waiter it goes to */
	char next_id[OWNER_MAX + 1];
	int64_t sent_us;
	long long token;
	long kind;			/* an attempt's: what it asks for */
	unsigned wakes;			/* an attempt's: lk->wakes when sent */
	long ttl_ms;
	long linger_ms;			/* release: RELEASE ... LINGER */
	long long prev_token;		/* pass: the releasing hold's token */
	char prev_id[OWNER_MAX + 1];	/* pass: the releasing hold's owner */
	char id[OWNER_MAX + 1];	/* the hold's (or requester's) owner */
};

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

struct locks {
	struct event_base *base;
	struct locks_cfg cfg;
	struct store *st;
	struct keytab *keys;
	TAILQ_HEAD(, hold) held;
	struct event *renew_ev;
	int64_t renew_due;		/* when renew_ev fires; 0 = not armed */
	int64_t limit_logged_ms;	/* last "limit reached" log line */
	struct pending *pending;	/* clean-ups for when Redis is back */
	size_t npending;
	struct pending *passes, *passes_tail;	/* PEND_PASS, oldest first */
	size_t npasses;
	struct event *pending_ev;	/* flush them while connected */
	long pending_retry_ms;
	int64_t pending_logged_ms;	/* last "too many clean-ups" line */
	uint64_t pending_dropped;
	uint64_t tenures;		/* store_tenures when last up */
	int failover;			/* the reassert of this reconnect
					 * follows a new master tenure */
	TAILQ_HEAD(, lclient) marked;	/* waiting writers marked in Redis */
	struct event *mark_ev;		/* refreshes their marks */
	struct locks_stats stats;
};

static void lock_pump(struct lock *lk);

/* Redis can be asked about lk (cluster mode: its slot's master is up). */
static int
key_up(const struct lock *lk)
{
	return lk->lt->st != NULL && store_key_up(lk->lt->st, lk->name,
	    lk->te.keylen);
}

/*
 * Clean-ups are sent when the connection comes up; one that arises while
 * connected (an error reply, not a lost connection) is sent on a short
 * timer, so the key is not left to its TTL either.
 */
static void
pending_arm(struct locks *lt)
{
	struct timeval tv;

	if ((lt->npending == 0 && lt->npasses == 0) || lt->st == NULL ||
	    !store_link_up(lt->st) || evtimer_pending(lt->pending_ev, NULL))
		return;
	tv.tv_sec = lt->pending_retry_ms / 1000;
	tv.tv_usec = (suseconds_t)(lt->pending_retry_ms % 1000) * 1000;
	if (event_add(lt->pending_ev, &tv) != 0)
		fatalx("cannot arm a timer");
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
static void
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

static void
pending_add(struct locks *lt, enum pend_kind kind, const struct lock *lk,
    const char *id, long long token)
{
	pending_add_until(lt, kind, lk, id, token, 0, 0);
}

/* cl now holds key again: a queued forget of its unanswered grant (by
 * client-id, any token) must not free the new hold. */
static void
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

/* --- small pieces ---------------------------------------------------- */

static void
reply(struct lclient *cl, enum lk_status status, long long n, const char *why)
{
	struct lk_result r = { .status = status, .n = n, .why = why };

	cl->ops->reply(cl->arg, &r);
}

/* Tell a client that keeps a record of its holds (grace sessions);
 * count 0: the hold ended. */
static void
held_changed(const struct hold *h, unsigned count, int fresh)
{
	struct lclient *cl = h->cl;

	if (cl->ops->changed != NULL && !cl->closing)
		cl->ops->changed(cl->arg, h->lk->name, h->lk->te.keylen, count,
		    h->ttl_ms, h->kind, fresh);
}

/* A TTL asked for, within [min_ttl_ms, max_ttl_ms]: below the floor the
 * key could expire in Redis before its first renewal lands (issue 9,
 * defect 5). */
static long
clamp_ttl(const struct locks *lt, long ttl_ms)
{
	if (ttl_ms <= 0)
		ttl_ms = lt->cfg.default_ttl_ms;
	if (ttl_ms < lt->cfg.min_ttl_ms)
		ttl_ms = lt->cfg.min_ttl_ms;
	return ttl_ms > lt->cfg.max_ttl_ms ? lt->cfg.max_ttl_ms : ttl_ms;
}

static long
renew_period(long ttl_ms)
{
	return ttl_ms / 3 > RENEW_MIN_MS ? ttl_ms / 3 : RENEW_MIN_MS;
}

static void
timer_at(struct event *ev, int64_t when_ms)
{
	int64_t d = when_ms - now_ms();
	struct timeval tv;

	if (d < 0)
		d = 0;
	tv.tv_sec = (time_t)(d / 1000);
	tv.tv_usec = (suseconds_t)(d % 1000) * 1000;
	if (event_add(ev, &tv) != 0)
		fatalx("cannot arm a timer");
}

static struct lock *
lock_find(struct locks *lt, const char *key, size_t keylen)
{
	struct keytab_entry *e = keytab_find(lt->keys, key, keylen);

	return e ? (struct lock *)(void *)e : NULL;
}

static struct lock *
lock_get(struct locks *lt, const char *key, size_t keylen)
{
	struct lock *lk = lock_find(lt, key, keylen);

	if (lk != NULL)
		return lk;
	lk = xcalloc(1, sizeof *lk + keylen + 1);
	memcpy(lk->name, key, keylen);
	lk->te.key = lk->name;
	lk->te.keylen = keylen;
	lk->lt = lt;
	TAILQ_INIT(&lk->holds);
	keytab_insert(lt->keys, &lk->te);
	return lk;
}

/* Free the entry if nothing refers to it any more. */
static void
lock_gc(struct lock *lk)
{
	if (lk->nholds || lk->whead || lk->refs || lk->attempts ||
	    lk->releasing)
		return;
	keytab_remove(lk->lt->keys, &lk->te);
	if (lk->retry_ev)
		event_free(lk->retry_ev);
	free(lk);
}

static struct op *
op_new(struct locks *lt, struct lock *lk, struct lclient *cl)
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
static struct lclient *
op_done(struct op *op)
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

/* --- waiters --------------------------------------------------------- */

static void
mark_done(void *arg, int ok, int released)
{
	(void)arg;
	(void)ok;
	(void)released;
}

/* Mark w, an exclusive waiter, in Redis (see MARK_TTL_MS) if not yet. */
static void
mark_wait(struct lclient *w)
{
	struct locks *lt = w->lt;
	struct lock *lk = w->wlock;
	struct timeval tv = { MARK_REFRESH_MS / 1000,
	    (MARK_REFRESH_MS % 1000) * 1000 };

	if (w->wmarked || lk == NULL || w->wkind != LK_EXCLUSIVE ||
	    lt->st == NULL || now_ms() >= w->deadline ||
	    store_wmark(lt->st, lk->name, lk->te.keylen, w->id, strlen(w->id),
	    STORE_WMARK_WAIT, MARK_TTL_MS, mark_done, NULL) != 0)
		return;
	w->wmarked = 1;
	TAILQ_INSERT_TAIL(&lt->marked, w, mlink);
	if (!evtimer_pending(lt->mark_ev, NULL) &&
	    event_add(lt->mark_ev, &tv) != 0)
		fatalx("cannot arm a timer");
}

/* w waits no more: granted, or it gave up (which wakes the readers its
 * mark held back). */
static void
mark_leave(struct lclient *w, int op)
{
	struct locks *lt = w->lt;

	if (!w->wmarked)
		return;
	w->wmarked = 0;
	TAILQ_REMOVE(&lt->marked, w, mlink);
	if (lt->st != NULL && w->wlock != NULL)
		(void)store_wmark(lt->st, w->wlock->name, w->wlock->te.keylen,
		    w->id, strlen(w->id), op, 0, mark_done, NULL);
}

static void
mark_cb(evutil_socket_t fd, short what, void *arg)
{
	struct locks *lt = arg;
	struct lclient *w;
	struct timeval tv = { MARK_REFRESH_MS / 1000,
	    (MARK_REFRESH_MS % 1000) * 1000 };

	(void)fd;
	(void)what;
	TAILQ_FOREACH(w, &lt->marked, mlink)
		(void)store_wmark(lt->st, w->wlock->name, w->wlock->te.keylen,
		    w->id, strlen(w->id), STORE_WMARK_WAIT, MARK_TTL_MS,
		    mark_done, NULL);
	if (!TAILQ_EMPTY(&lt->marked) && event_add(lt->mark_ev, &tv) != 0)
		fatalx("cannot arm a timer");
}

/* Readers hold, wait for or were announced for lk: its writers waiting
 * here, not being tried, are marked from now on. */
static void
shared_seen(struct lock *lk)
{
	struct lclient *w;

	if (lk->shared_seen)
		return;
	lk->shared_seen = 1;
	for (w = lk->whead; w != NULL; w = w->wnext)
		if (w->wkind == LK_EXCLUSIVE && w->op == NULL)
			mark_wait(w);
}

static void
waiter_push(struct lock *lk, struct lclient *cl, long kind, long wait_ms,
    long ttl_ms)
{
	cl->wlock = lk;
	cl->wnext = NULL;
	cl->wkind = kind;
	lk->limit = kind > 0 ? kind : 0;
	cl->wttl = ttl_ms;
	cl->wseen = kind == LK_SHARED ? -1 : 0;	/* -1: its first attempt */
	cl->wstart_us = now_us();
	cl->deadline = cl->wstart_us / 1000 + wait_ms;
	if (lk->wtail)
		lk->wtail->wnext = cl;
	else
		lk->whead = cl;
	lk->wtail = cl;
	if (wait_ms > 0)
		timer_at(cl->deadline_ev, cl->deadline);
	cl->lt->stats.waiters++;
	if (kind == LK_SHARED)
		shared_seen(lk);
}

static void
waiter_remove(struct lclient *cl)
{
	struct lock *lk = cl->wlock;
	struct lclient **pp, *prev = NULL;

	if (lk == NULL)
		return;
	mark_leave(cl, STORE_WMARK_GAVE_UP);	/* (a grant left it first) */
	for (pp = &lk->whead; *pp != NULL; prev = *pp, pp = &(*pp)->wnext) {
		if (*pp == cl) {
			*pp = cl->wnext;
			if (lk->wtail == cl)
				lk->wtail = prev;
			break;
		}
	}
	cl->wlock = NULL;
	cl->wnext = NULL;
	event_del(cl->deadline_ev);
	cl->lt->stats.waiters--;
	if (lk->whead == NULL) {
		/* "held elsewhere" was news for these waiters only: the next
		 * one to come asks Redis afresh */
		lk->remote_busy = 0;
		if (lk->retry_ev != NULL)
			event_del(lk->retry_ev);
	}
}

/* The wait of cl ran out while no attempt of its was in flight. */
static void
deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lclient *cl = arg;
	struct lock *lk = cl->wlock;

	(void)fd;
	(void)what;
	if (lk == NULL || cl->op != NULL)
		return;	/* its attempt's reply decides */
	waiter_remove(cl);
	if (!key_up(lk)) {
		/* BUSY would claim the key is held: we cannot know */
		cl->lt->stats.acquire_errors++;
		reply(cl, LK_UNAVAILABLE, 0, WHY_WAIT_DOWN);
	} else if (lk->in_delay) {
		cl->lt->stats.acquire_errors++;
		reply(cl, LK_UNAVAILABLE, 0, WHY_DELAY);
	} else if (lk->refused_ms != 0) {
		/* Redis kept refusing its attempts: nobody knows who holds it */
		cl->lt->stats.acquire_errors++;
		reply(cl, LK_UNAVAILABLE, 0, WHY_REFUSED);
	} else {
		cl->lt->stats.busy++;
		reply(cl, LK_BUSY, 0, NULL);
	}
	lock_pump(lk);
}

/* --- holding --------------------------------------------------------- */

static void renew_schedule(struct locks *lt, int64_t when);

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

/* cl's hold of lk, or NULL. */
static struct hold *
hold_of(const struct lock *lk, const struct lclient *cl)
{
	struct hold *h;

	TAILQ_FOREACH(h, &lk->holds, klink)
		if (h->cl == cl)
			return h;
	return NULL;
}

/* The hold of lk with this token (unique per key), or NULL. */
static struct hold *
hold_by_token(const struct lock *lk, long long token)
{
	struct hold *h;

	TAILQ_FOREACH(h, &lk->holds, klink)
		if (h->token == token)
			return h;
	return NULL;
}

/* lk's exclusive hold, or NULL (it is then alone). */
static struct hold *
hold_excl(const struct lock *lk)
{
	struct hold *h = TAILQ_FIRST(&lk->holds);

	return h != NULL && h->kind == LK_EXCLUSIVE ? h : NULL;
}

static struct hold *
hold_start(struct lock *lk, struct lclient *cl, long kind, long long token,
    long ttl, int64_t sent_us)
{
	struct locks *lt = lk->lt;
	struct hold *h = xcalloc(1, sizeof *h);
	int found;

	lost_forget(cl, lk->name, lk->te.keylen, &found);
	pending_drop(lt, lk->name, lk->te.keylen, cl->id);
	h->lk = lk;
	h->cl = cl;
	h->kind = kind;
	h->token = token;
	h->count = 1;
	h->ttl_ms = ttl;
	h->unsure = cl->resumable;
	/* The TTL started in Redis at most when the request was sent. */
	h->renew_at = sent_us / 1000 + renew_period(ttl);
	h->confirmed_ms = sent_us / 1000 + ttl;
	lk->limit = kind > 0 ? kind : 0;
	TAILQ_INSERT_TAIL(&lk->holds, h, klink);
	TAILQ_INSERT_TAIL(&cl->held, h, hlink);
	TAILQ_INSERT_TAIL(&lt->held, h, alink);
	lk->nholds++;
	cl->nheld++;
	lt->stats.locks_held++;
	renew_schedule(lt, h->renew_at);
	held_changed(h, 1, 1);
	return h;
}

/* The hold is over here: unlink and free it (its lock stays). */
static void
hold_end(struct hold *h)
{
	struct lock *lk = h->lk;
	struct lclient *cl = h->cl;

	TAILQ_REMOVE(&lk->holds, h, klink);
	TAILQ_REMOVE(&cl->held, h, hlink);
	TAILQ_REMOVE(&lk->lt->held, h, alink);
	lk->nholds--;
	cl->nheld--;
	lk->lt->stats.locks_held--;
	held_changed(h, 0, 0);
	free(h);
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

/* cl's RELEASE could not be confirmed: the broker frees the key in Redis
 * as soon as Redis answers (pending list) and a RELEASE sent again answers
 * OK 0.  The hold ends here, so the key is no longer renewed, and other
 * sessions of this broker ask Redis again instead of waiting on a hold
 * that may be gone (issue 9, defect 6). */
static void
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
static void
lost_count(struct locks *lt, enum lk_lost_cause cause)
{
	lt->stats.lost++;
	lt->stats.lost_by[cause]++;
}

/* What Redis showed of a hold it no longer has: a cause. */
static enum lk_lost_cause
cause_of(int found)
{
	return found == STORE_TAKEN ? LK_LOST_TAKEN : LK_LOST_EXPIRED;
}

/* The hold is lost: tell its session, free it. */
static void
hold_lost(struct hold *h, int remember, enum lk_lost_cause cause)
{
	struct lock *lk = h->lk;
	struct lclient *cl = h->cl;
	long long token = h->token;

	hold_end(h);
	lost_count(lk->lt, cause);
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
static int
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
static void
hold_gone(struct hold *h, enum lk_lost_cause cause)
{
	if (!hold_doubt(h, 0, cause))
		hold_lost(h, 1, cause);
}

/* --- acquire --------------------------------------------------------- */

/*
 * A grant whose reply took 2/3 of its TTL (a paused broker, a Redis stall
 * shorter than the watchdog) may expire before its first renewal lands:
 * it is released, not passed on.
 */
static int
grant_too_late(int64_t sent_us, long ttl_ms)
{
	return (now_us() - sent_us) * 3 >= (int64_t)ttl_ms * 2000;
}

static void attempt_done(void *arg, int ok, int granted, long long n,
    long more);
static void release_done(void *arg, int ok, int released);

/* The tokens after a grant's own that Redis set aside (PASS_BLOCK). */
static void
chain_start(struct lock *lk, long long token, long more)
{
	lk->chain_first = more > 0 ? token : 0;
	lk->chain_next = more > 0 ? token + 1 : 0;
	lk->chain_last = more > 0 ? token + more : 0;
}

/* No more local hand-offs from those tokens: the chain may be gone from
 * Redis, or Redis be another (a failover). */
static void
chain_end(struct lock *lk)
{
	chain_start(lk, 0, 0);
}

/* Whether Redis keeps h's value past w's first renewal, were w given the
 * key now (h's last confirmation, from its send, plus its TTL). */
static int
outlives_renewal(const struct hold *h, const struct lclient *w)
{
	return h->confirmed_ms - now_ms() > renew_period(w->wttl) +
	    PASS_MARGIN_MS;
}

/*
 * Tokens to ask Redis to set aside with an exclusive grant to w: some
 * when the waiter behind it could take the key from w early (w's TTL
 * outlasts its first renewal), none otherwise: each token set aside
 * raises the counter, which must not outrun the clock (tenure.lua).
 */
static long
chain_want(const struct lclient *w)
{
	const struct lclient *n = w->wnext;

	return n != NULL && n->wkind == LK_EXCLUSIVE && w->wttl >
	    renew_period(n->wttl) + PASS_MARGIN_MS ? PASS_BLOCK : 0;
}

/*
 * w's wait is over: it holds the key now (token, its TTL counted from
 * sent_us, as the request was sent) and is told so; since_us: when the
 * key was seen free for it (the handoff histogram), or 0.
 */
static struct hold *
grant_local(struct lock *lk, struct lclient *w, long kind, long long token,
    int64_t sent_us, int64_t since_us)
{
	struct locks *lt = lk->lt;
	int64_t t = now_us();
	struct hold *h;

	histo_observe(&lt->stats.acquire_wait, t - w->wstart_us);
	if (since_us != 0)
		histo_observe(&lt->stats.handoff, t - since_us);
	mark_leave(w, STORE_WMARK_GRANTED);
	waiter_remove(w);
	h = hold_start(lk, w, kind, token, w->wttl, sent_us);
	lt->stats.acquires++;
	reply(w, LK_OK, token, NULL);
	return h;
}

/* Release in Redis a lock nobody local holds any more (session gone). */
static void
release_orphan(struct lock *lk, const char *id, long long token)
{
	struct op *op = op_new(lk->lt, lk, NULL);

	owner_copy(op->id, id);
	op->token = token;
	if (lk->lt->st == NULL || store_release(lk->lt->st, lk->name,
	    lk->te.keylen, op->id, strlen(op->id), token, release_done,
	    op) != 0) {
		/* Redis is down: free it as soon as Redis is back. */
		pending_add(lk->lt, PEND_RELEASE, lk, id, token);
		op_done(op);
		free(op);
		return;
	}
	lk->releasing++;
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock *lk = arg;

	(void)fd;
	(void)what;
	lk->remote_busy = 0;
	lk->yield_until_ms = 0;
	lock_pump(lk);
}

/* Pump the key again at when (ms), e.g. when a dead holder's TTL ends. */
static void
lock_retry_at(struct lock *lk, int64_t when)
{
	if (lk->retry_ev == NULL &&
	    (lk->retry_ev = evtimer_new(lk->lt->base, retry_cb, lk)) == NULL)
		fatalx("cannot create retry timer");
	timer_at(lk->retry_ev, when);
}

/* Redis refused an attempt for the key (an error reply on a live
 * connection): the waiters hold back, and the key is tried again after a
 * backoff, REFUSED_MIN_MS doubling to REFUSED_MAX_MS while it lasts. */
static void
lock_refused(struct lock *lk, long kind)
{
	lk->refused_ms = lk->refused_ms == 0 ? REFUSED_MIN_MS :
	    lk->refused_ms * 2 > REFUSED_MAX_MS ? REFUSED_MAX_MS :
	    lk->refused_ms * 2;
	lk->remote_busy = 1;
	lk->busy_kind = kind;
	lock_retry_at(lk, now_ms() + lk->refused_ms);
}

/* Redis is away: answer the waiters whose wait is over. */
static void
waiters_expire(struct lock *lk)
{
	struct lclient *w, *next;
	int64_t now = now_ms();

	for (w = lk->whead; w != NULL; w = next) {
		next = w->wnext;
		if (w->op != NULL || now < w->deadline)
			continue;
		waiter_remove(w);
		w->lt->stats.acquire_errors++;
		reply(w, LK_UNAVAILABLE, 0, WHY_WAIT_DOWN);
	}
}

/*
 * Whether a request of this kind may ask Redis now, as far as this broker
 * knows: an exclusive one when nothing is held or tried here; a shared
 * one beside shared holds and attempts, unless a waiter on another broker
 * announced itself (a writer: the reads here drain first, see YIELD_MS);
 * a permit while holds and attempts here are fewer than the limit.
 */
static int
may_try(const struct lock *lk, long kind)
{
	if (kind == LK_EXCLUSIVE)
		return lk->nholds == 0 && lk->attempts == 0;
	if (lk->excl_attempt || hold_excl(lk) != NULL)
		return 0;
	if (kind == LK_SHARED)
		return !(lk->writer_wanted && lk->nholds > 0);
	return lk->nholds + lk->attempts < (unsigned long)kind;
}

/* A waiter not being tried: it waits for something here or elsewhere. */
static int
has_blocked_waiter(const struct lock *lk)
{
	const struct lclient *w;

	for (w = lk->whead; w != NULL; w = w->wnext)
		if (w->op == NULL)
			return 1;
	return 0;
}

static void
lock_pump(struct lock *lk)
{
	struct locks *lt = lk->lt;
	struct lclient *w, *next;

	if (lt->st != NULL && !key_up(lk)) {
		/* waiters wait out the reconnect (locks_store_up pumps); one
		 * whose wait is over (a one-try request has no timer) is
		 * answered now, not after the outage */
		waiters_expire(lk);
		lock_gc(lk);
		return;
	}
	/* From the head: those being tried are passed, the first that may
	 * not go now stops the walk (FIFO across kinds). */
	for (w = lk->whead; w != NULL; w = next) {
		struct op *op;

		next = w->wnext;
		if (w->op != NULL)
			continue;
		if (lk->releasing || !may_try(lk, w->wkind) ||
		    (lk->remote_busy && !(lk->busy_kind == LK_EXCLUSIVE &&
		    w->wkind == LK_SHARED)))
			break;	/* (a writer's "held elsewhere" may be readers
				 * there, which a reader may join) */
		if (lk->yield_until_ms > now_ms()) {
			/* a remote waiter's turn: try after it had its go */
			lock_retry_at(lk, lk->yield_until_ms);
			return;
		}
		op = op_new(lt, lk, w);
		op->sent_us = now_us();
		op->kind = w->wkind;
		op->wakes = lk->wakes;
		owner_copy(op->id, w->id);
		if (store_acquire(lt->st, lk->name, lk->te.keylen, w->id,
		    strlen(w->id), w->wkind, w->wttl, w->deadline > now_ms(),
		    w->wkind == LK_EXCLUSIVE ? chain_want(w) : 0,
		    w->wkind == LK_SHARED ? w->wseen : 0, attempt_done,
		    op) == 0) {
			lk->attempts++;
			if (w->wkind == LK_EXCLUSIVE)
				lk->excl_attempt = 1;
			continue;
		}
		op_done(op);
		free(op);
		waiter_remove(w);
		lt->stats.acquire_errors++;
		reply(w, LK_UNAVAILABLE, 0, "Redis is unreachable");
	}
	lock_gc(lk);
}

static void
attempt_done(void *arg, int ok, int granted, long long n, long more)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct locks *lt = op->lt;
	struct lclient *w = op_done(op);
	char id[OWNER_MAX + 1];

	int64_t freed_us = lk->freed_us;	/* a handoff, if granted now */
	int64_t sent_us = op->sent_us;
	long kind = op->kind;
	unsigned sent_wakes = op->wakes;

	memcpy(id, op->id, sizeof id);		/* the requester's client-id */
	free(op);
	lk->attempts--;
	if (kind == LK_EXCLUSIVE)
		lk->excl_attempt = 0;
	lk->freed_us = 0;
	lk->in_delay = 0;
	if (ok)
		lk->refused_ms = 0;
	if (kind == LK_SHARED && ok && granted == 0 && more > lk->wstamp)
		lk->wstamp = more;	/* a writer's mark it saw */
	if (w != NULL && kind == LK_SHARED && w->wseen < 0)
		w->wseen = ok && granted == 0 ? more : lk->wstamp;
	if (!ok && key_up(lk)) {
		/* An error reply on a live connection (NOREPLICAS, MISCONF,
		 * OOM, BUSY...): the script did not run.  An outage like any
		 * other: the waiter keeps its place until its WAIT runs out,
		 * and tries again after a backoff (at once would hammer
		 * Redis for the whole wait). */
		if (w != NULL && now_ms() >= w->deadline) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			reply(w, LK_UNAVAILABLE, 0, WHY_REFUSED);
		} else if (w != NULL) {
			lock_refused(lk, kind);
		}
	} else if (!ok) {
		/* The connection went: the grant may have happened. */
		pending_add(lt, PEND_FORGET, lk, id, 0);
		if (w != NULL && now_ms() >= w->deadline) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			reply(w, LK_UNAVAILABLE, 0, WHY_NO_ANSWER);
		}
		/* else it stays queued: the reconnect pumps it, after the
		 * forget above (a failover must not cost a waiter its turn) */
	} else if (granted == -1 || granted == -2) {
		if (granted == -2)	/* in case its undo failed */
			pending_add(lt, PEND_FORGET, lk, id, 0);
		if (w) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			if (granted == -1)
				reply(w, LK_LIMIT, 0, WHY_EXHAUSTED);
			else
				reply(w, LK_UNAVAILABLE, 0, WHY_NOT_ACKED);
		}
	} else if (granted == 3) {
		/* another kind in Redis: say which (nothing was written) */
		if (w != NULL) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			reply(w, LK_KIND, n, NULL);
		}
	} else if (granted == 2 && w != NULL && now_ms() >= w->deadline) {
		/* free, but a lock delay runs: nobody may have it yet */
		waiter_remove(w);
		lt->stats.acquire_errors++;
		reply(w, LK_UNAVAILABLE, 0, WHY_DELAY);
	} else if (granted == 2 && w != NULL) {
		lk->remote_busy = 1;	/* try again when the delay ends */
		lk->busy_kind = kind;
		lk->in_delay = 1;
		lock_retry_at(lk, now_ms() + (n < PTTL_RETRY_MAX ? n : 0) + 1);
	} else if (granted == 2) {
		/* its session left meanwhile */
	} else if (granted && (w == NULL ||
	    grant_too_late(sent_us, w->wttl))) {
		/* Its session left while the attempt was in flight; or the
		 * reply came so late (a paused broker, a slow Redis) that the
		 * lock may have expired already: not a grant to pass on.  The
		 * key was free, so BUSY would be a lie: the waiter tries again
		 * after the release if its wait allows, else hears that Redis
		 * was too slow (issue 9, defect 4). */
		lt->stats.orphans++;
		release_orphan(lk, id, n);
		if (w != NULL && now_ms() >= w->deadline) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			reply(w, LK_UNAVAILABLE, 0, WHY_TOO_SLOW);
		}
	} else if (granted) {
		lk->handoffs = 0;
		chain_start(lk, n, kind == LK_EXCLUSIVE ? more : 0);
		grant_local(lk, w, kind, n, sent_us, freed_us);
	} else if (w != NULL && now_ms() >= w->deadline) {
		waiter_remove(w);
		lt->stats.busy++;
		reply(w, LK_BUSY, 0, NULL);
	} else if (w != NULL && sent_wakes != lk->wakes) {
		/* Released (pub/sub, on the other connection) after our
		 * attempt was sent: lock_pump below tries again at once.
		 * Once per wake: the next answer is compared with this one's
		 * count (several attempts in flight share the key's). */
	} else if (w != NULL) {
		/* Held elsewhere: wait for a pub/sub wake, or for its TTL
		 * to run out if its holder died without releasing. */
		lk->remote_busy = 1;
		lk->busy_kind = kind;
		/* A foreign key may carry any PTTL: past a day, the waiter's
		 * own deadline (or a pub/sub wake) comes first anyway. */
		if (n >= 0 && n < PTTL_RETRY_MAX)
			lock_retry_at(lk, now_ms() + n + 1);
	}
	if (ok && granted == 0 && kind == LK_EXCLUSIVE && w != NULL &&
	    w->wlock == lk)
		mark_wait(w);	/* held: readers may be involved */
	lock_pump(lk);
}

/* Log a limit being hit, at most once per LIMIT_LOG_MS. */
static void
limit_hit(struct locks *lt, const char *which)
{
	int64_t now = now_ms();

	if (lt->limit_logged_ms != 0 && now - lt->limit_logged_ms <
	    LIMIT_LOG_MS)
		return;
	lt->limit_logged_ms = now;
	log_warn("%s reached: ACQUIRE answered ERR LIMIT", which);
}

/* The key's kind here (0 a lock, n a semaphore of n permits) while
 * anything holds, waits or is tried here; -1 when nothing does. */
static long
lock_kind_here(const struct lock *lk)
{
	if (lk == NULL || (lk->nholds == 0 && lk->whead == NULL &&
	    lk->attempts == 0))
		return -1;
	return lk->limit;
}

void
locks_acquire(struct lclient *cl, const char *key, size_t keylen,
    long kind, long wait_ms, long ttl_ms)
{
	struct locks *lt = cl->lt;
	struct lock *lk = lock_find(lt, key, keylen);
	struct hold *h = lk != NULL ? hold_of(lk, cl) : NULL;
	long here = lock_kind_here(lk);

	if (here >= 0 && here != (kind > 0 ? kind : 0)) {
		/* a semaphore's limit is fixed while anyone here holds or
		 * waits; Redis says the same of holders elsewhere */
		lt->stats.acquire_errors++;
		reply(cl, LK_KIND, here, NULL);
		return;
	}
	if (h != NULL && kind == LK_EXCLUSIVE && h->kind == LK_SHARED) {
		/* no silent upgrade: two readers doing it deadlock */
		lt->stats.acquire_errors++;
		reply(cl, LK_UPGRADE, 0, NULL);
		return;
	}
	if (h != NULL) {
		/* reentrant; an exclusive hold covers a shared request */
		h->count++;
		lt->stats.acquires++;
		held_changed(h, h->count, 0);
		reply(cl, LK_OK, h->token, NULL);
		return;
	}
	if ((long)cl->nheld >= lt->cfg.max_locks_per_session) {
		limit_hit(lt, "max_locks_per_session");
		lt->stats.acquire_errors++;
		reply(cl, LK_LIMIT, 0, "this session holds max_locks_per_session"
		    " keys");
		return;
	}
	if (wait_ms < 0 || cl->no_wait)
		wait_ms = 0;
	if (wait_ms > lt->cfg.max_wait_ms)
		wait_ms = lt->cfg.max_wait_ms;
	/* Redis unreachable (or no Sentinel lease): a one-try request
	 * answers at once; one with WAIT queues as during any outage, and
	 * is tried when Redis answers again, or answered ERR UNAVAILABLE
	 * when its WAIT runs out (deadline_cb). */
	if (lt->st == NULL || (wait_ms == 0 &&
	    !store_key_up(lt->st, key, keylen))) {
		lt->stats.acquire_errors++;
		reply(cl, LK_UNAVAILABLE, 0, WHY_UNREACHABLE);
		return;
	}
	if (lk != NULL && wait_ms == 0 &&
	    (has_blocked_waiter(lk) || !may_try(lk, kind))) {
		/* Someone is ahead, or what is held here excludes it: the
		 * key will not be free for a one-try request.  (A release
		 * alone in flight is no one: the request queues behind it
		 * and asks Redis.) */
		lt->stats.busy++;
		reply(cl, LK_BUSY, 0, NULL);
		return;
	}
	if (wait_ms > 0 && (long)lt->stats.waiters >= lt->cfg.max_waiters) {
		limit_hit(lt, "max_waiters");
		lt->stats.acquire_errors++;
		reply(cl, LK_LIMIT, 0, "max_waiters ACQUIREs are waiting");
		return;
	}
	lk = lock_get(lt, key, keylen);
	waiter_push(lk, cl, kind, wait_ms, clamp_ttl(lt, ttl_ms));
	lock_pump(lk);
	if (cl->wlock == lk && cl->op == NULL) {
		/* not tried at once: it waits behind others here.  A reader
		 * came after the writers elsewhere heard of so far; a writer
		 * is marked if readers are involved */
		if (kind == LK_SHARED && cl->wseen < 0)
			cl->wseen = lk->wstamp;
		else if (kind == LK_EXCLUSIVE && (lk->shared_seen ||
		    lk->remote_busy))
			mark_wait(cl);
	}
}

/* --- release --------------------------------------------------------- */

/* Not held by cl: lost (say so once, then forget), released by the broker
 * on cl's behalf after an ERR UNAVAILABLE, or never held? */
static void
reply_not_held(struct lclient *cl, const char *key, size_t keylen,
    int releasing)
{
	int found;

	lost_forget(cl, key, keylen, &found);
	if (found == 2 && releasing) {
		/* counted in releases when the broker's release runs */
		reply(cl, LK_OK, 0, NULL);
	} else if (found != 0) {
		reply(cl, LK_LOST, 0, found == 2 ? WHY_RELEASED : WHY_LOST);
	} else {
		reply(cl, LK_NOTHELD, 0, "this session does not hold the key");
	}
}

static void
release_done(void *arg, int ok, int released)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct lclient *cl = op_done(op);
	struct hold *h = cl != NULL ? hold_of(lk, cl) : NULL;

	lk->releasing--;
	if (!ok && h != NULL) {
		/* It may or may not have reached Redis: run it again as soon
		 * as Redis answers, and stop holding it here. */
		hold_release_deferred(h, op->linger_ms);
		reply(cl, LK_UNAVAILABLE, 0, WHY_RELEASE_LATER);
	} else if (!ok) {
		/* A session's end or an orphan grant: the same, unanswered
		 * (a LINGER too: its session left while it was sent). */
		pending_add_until(lk->lt, PEND_RELEASE, lk, op->id, op->token,
		    op->linger_ms > 0 ? now_ms() + op->linger_ms : 0, 0);
	} else if (h == NULL) {
		if (released == STORE_DONE)
			lk->lt->stats.releases++;
	} else if (released != STORE_DONE &&
	    hold_doubt(h, 1, cause_of(released))) {
		/* resumed elsewhere, or lost: its record decides */
	} else {
		hold_end(h);
		if (released == STORE_DONE) {
			lk->lt->stats.releases++;
			reply(cl, LK_OK, 0, NULL);
		} else {
			lost_count(lk->lt, cause_of(released));
			reply(cl, LK_LOST, 0, WHY_LOST);
		}
	}
	if (ok && lk->whead != NULL && op->linger_ms == 0) {
		lk->freed_us = now_us();
		/* a permit or a read hold given back here may be what a
		 * waiter here was told was taken */
		if (op->kind != LK_EXCLUSIVE)
			lk->remote_busy = 0;
	}
	free(op);
	lock_pump(lk);
}

/*
 * The last hold of a lock with a local waiter: release it and grant it to
 * that waiter in one script call (an exclusive lock to an exclusive
 * waiter, a permit to a waiter for one).  Both sessions wait on the same
 * op.
 */
static void
handoff_done(void *arg, int ok, int granted, long long n, long more)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct locks *lt = op->lt;
	struct lclient *w = op->next;
	struct lclient *cl = op_done(op);
	struct hold *h = cl != NULL ? hold_of(lk, cl) : NULL;

	lk->releasing--;
	if (!ok) {
		/* Neither half is known: free whichever happened as soon as
		 * Redis answers. */
		if (h != NULL) {
			hold_release_deferred(h, 0);
			reply(cl, LK_UNAVAILABLE, 0, WHY_RELEASE_LATER);
		} else {
			pending_add(lt, PEND_RELEASE, lk, op->id, op->token);
		}
		pending_add(lt, PEND_FORGET, lk, op->next_id, 0);
		if (w != NULL && now_ms() >= w->deadline) {
			waiter_remove(w);
			lt->stats.acquire_errors++;
			reply(w, LK_UNAVAILABLE, 0, key_up(lk) ?
			    WHY_REFUSED : WHY_NO_ANSWER);
		} else if (w != NULL && key_up(lk)) {
			lock_refused(lk, op->kind);	/* as in attempt_done */
		}
		/* else it stays queued for the reconnect, as in attempt_done */
	} else if (granted) {
		if (h != NULL)
			hold_end(h);	/* else ended when the session went */
		lt->stats.releases++;
		if (granted == -2)	/* in case its undo failed */
			pending_add(lt, PEND_FORGET, lk, op->next_id, 0);
		if (granted < 0) {
			/* released, but no token left to grant with, or the
			 * grant did not reach the replicas (undone) */
			if (w != NULL) {
				waiter_remove(w);
				lt->stats.acquire_errors++;
				if (granted == -1)
					reply(w, LK_LIMIT, 0, WHY_EXHAUSTED);
				else
					reply(w, LK_UNAVAILABLE, 0,
					    WHY_NOT_ACKED);
			}
		} else if (w != NULL &&
		    !grant_too_late(op->sent_us, w->wttl)) {
			lt->stats.handoffs++;
			lk->handoffs++;
			chain_start(lk, n, op->kind == LK_EXCLUSIVE ? more : 0);
			grant_local(lk, w, op->kind, n, op->sent_us,
			    op->sent_us);
		} else {
			/* its session left, or a reply so late the grant may
			 * have expired: the waiter (if any) tries again */
			lt->stats.handoffs++;
			lk->handoffs++;
			lt->stats.orphans++;
			release_orphan(lk, op->next_id, n);
		}
		if (cl != NULL)
			reply(cl, LK_OK, 0, NULL);
	} else if (h != NULL && !hold_doubt(h, 1, cause_of((int)n))) {
		/* The releasing hold was gone; the waiter tries normally. */
		hold_end(h);
		lost_count(lt, cause_of((int)n));
		reply(cl, LK_LOST, 0, WHY_LOST);
	}
	free(op);
	lock_pump(lk);
}

/* The first waiter not being tried, if it may take h's place at once: an
 * exclusive lock goes to an exclusive waiter, a permit to a waiter for
 * one (a shared hold is never handed over: its readers go together). */
static struct lclient *
handoff_target(const struct lock *lk, const struct hold *h)
{
	struct lclient *w;

	for (w = lk->whead; w != NULL && w->op != NULL; w = w->wnext)
		;
	if (w == NULL || h->kind == LK_SHARED || w->wkind != h->kind)
		return NULL;
	return w;
}

static void repass_push(struct locks *lt, struct pending *p);
static struct pending *repass_unlink(struct locks *lt, const struct hold *h);
static void pass_before_release(struct locks *lt, struct hold *h);

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
static void
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
	if (h != NULL && key_up(lk))
		h->pass_pending = 1;
	pending_arm(lt);
}

/* pass.lua answered (see PASS_BLOCK) for the hold with op->token. */
static void
pass_done(void *arg, int ok, int passed)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct hold *h;

	op_done(op);
	h = hold_by_token(lk, op->token);
	if (ok && passed == STORE_DONE) {
		if (h != NULL)
			h->confirmed_ms = op->sent_us / 1000 + op->ttl_ms;
	} else if (ok) {
		/* Redis shows another value than the releasing hold's: the
		 * key is lost for this holder, and for each later one of the
		 * chain (their calls find the same). */
		chain_end(lk);
		if (h != NULL && !h->releasing)
			hold_lost(h, 1, cause_of(passed));
	} else {
		pass_later(lk, op, h);
	}
	free(op);
	lock_pump(lk);
}

/* h's token is of the chain of tokens set aside, and one is left. */
static int
chain_covers(const struct lock *lk, const struct hold *h)
{
	return lk->chain_next != 0 && lk->chain_next <= lk->chain_last &&
	    h->token >= lk->chain_first && h->token < lk->chain_next;
}

/*
 * The last hold h of an exclusive lock ends (RELEASE, or its session
 * went): pass the key to w, the next waiter here (handoff_target), at
 * once if the chain allows (see PASS_BLOCK).  Returns 1 when done: h has
 * ended and the waiter was told OK; 0 when the key must go through Redis
 * as before.
 */
static int
pass_local(struct lock *lk, struct hold *h, struct lclient *w)
{
	struct locks *lt = lk->lt;
	int64_t confirmed = h->confirmed_ms;
	struct hold *nh;
	struct op *op;

	if (w == NULL || lt->st == NULL || !key_up(lk) ||
	    h->kind != LK_EXCLUSIVE || h->cl->resumable || h->releasing ||
	    lk->releasing || lk->attempts || !chain_covers(lk, h) ||
	    !outlives_renewal(h, w) ||
	    (lk->handoffs >= HANDOFF_FAIR && lk->wanted))
		return 0;	/* (a remote waiter's turn: release_send) */
	op = op_new(lt, lk, NULL);
	owner_copy(op->id, w->id);
	owner_copy(op->prev_id, h->cl->id);
	op->token = lk->chain_next;
	op->prev_token = h->token;
	op->ttl_ms = w->wttl;
	op->sent_us = now_us();
	lk->chain_next++;
	lk->handoffs++;
	lt->stats.handoffs++;
	lt->stats.early_handoffs++;
	lt->stats.releases++;
	hold_end(h);
	/* Redis keeps the key (h's value) until then, or longer once
	 * pass.lua has answered.  The OK first: the session's write is then
	 * queued in this loop turn ahead of the store's write to Redis
	 * (hand-off p50 88-95 -> ~55 us, lbbench handoff, 8 contenders). */
	nh = grant_local(lk, w, LK_EXCLUSIVE, op->token, op->sent_us,
	    op->sent_us);
	nh->confirmed_ms = confirmed;
	if (store_pass(lt->st, lk->name, lk->te.keylen, op->prev_id,
	    strlen(op->prev_id), op->prev_token, w->id, strlen(w->id),
	    op->token, w->wttl, pass_done, op) != 0) {
		/* (not while key_up) as a pass without an answer, but lk
		 * stays for the caller, which pumps it */
		op_done(op);
		pass_later(lk, op, nh);
		free(op);
	}
	return 1;
}

/* Hand over to w (handoff_target), or release plainly when there is
 * none or a remote waiter is owed a turn. */
static int
release_send(struct lock *lk, struct hold *h, struct op *op,
    struct lclient *w)
{
	struct locks *lt = lk->lt;
	int64_t now = now_ms();

	if (lt->st == NULL)
		return -1;
	if (!key_up(lk))
		w = NULL;	/* a release goes out anyway (a lease gap) */
	if (op->linger_ms > 0)
		return store_linger(lt->st, lk->name, lk->te.keylen, op->id,
		    strlen(op->id), op->token, op->linger_ms, release_done, op);
	if (w != NULL && lk->handoffs >= HANDOFF_FAIR && lk->wanted) {
		lk->handoffs = 0;
		lk->wanted = lk->writer_wanted = 0;
		lk->yield_until_ms = now + YIELD_MS;
		lt->stats.fair_yields++;
		w = NULL;
	}
	if (w == NULL && h->kind == LK_SHARED && lk->nholds > 1) {
		/* other reads here go on: a writer waiting elsewhere (wanted)
		 * still waits for them, and the readers here still hold back
		 * for it */
	} else if (w == NULL && h->kind == LK_SHARED) {
		if (lk->writer_wanted && lk->whead != NULL) {
			/* the last read here, and a writer waits elsewhere:
			 * the readers here let it go first */
			lk->yield_until_ms = now + YIELD_MS;
			lt->stats.fair_yields++;
		}
		lk->wanted = lk->writer_wanted = 0;	/* this release
							 * publishes */
	} else if (w == NULL) {
		lk->wanted = lk->writer_wanted = 0;	/* this release
							 * publishes */
	}
	if (w == NULL) {
		return store_release(lt->st, lk->name, lk->te.keylen, op->id,
		    strlen(op->id), op->token, release_done, op);
	}
	op->next = w;
	owner_copy(op->next_id, w->id);
	op->sent_us = now_us();
	if (store_handoff(lt->st, lk->name, lk->te.keylen, op->id,
	    strlen(op->id), op->token, w->id, strlen(w->id), w->wttl,
	    h->kind == LK_EXCLUSIVE ? chain_want(w) : 0, handoff_done,
	    op) != 0) {
		op->next = NULL;
		return -1;
	}
	w->op = op;
	return 0;
}

void
locks_release(struct lclient *cl, const char *key, size_t keylen,
    long linger_ms)
{
	struct locks *lt = cl->lt;
	struct lock *lk = lock_find(lt, key, keylen);
	struct hold *h = lk != NULL ? hold_of(lk, cl) : NULL;
	struct lclient *w;
	struct op *op;

	if (h == NULL) {
		reply_not_held(cl, key, keylen, 1);
		return;
	}
	if (h->count > 1) {
		h->count--;
		held_changed(h, h->count, 0);
		reply(cl, LK_OK, h->count, NULL);
		return;
	}
	pass_before_release(lt, h);
	w = handoff_target(lk, h);	/* (the FIFO walked once) */
	if (linger_ms <= 0 && pass_local(lk, h, w)) {
		reply(cl, LK_OK, 0, NULL);
		return;
	}
	op = op_new(lt, lk, cl);
	owner_copy(op->id, cl->id);
	op->token = h->token;
	op->kind = h->kind;
	op->linger_ms = linger_ms > lt->cfg.max_ttl_ms ? lt->cfg.max_ttl_ms :
	    linger_ms > 0 ? linger_ms : 0;
	if (release_send(lk, h, op, w) != 0) {
		linger_ms = op->linger_ms;
		op_done(op);
		free(op);
		hold_release_deferred(h, linger_ms);
		reply(cl, LK_UNAVAILABLE, 0, WHY_RELEASE_LATER);
		lock_pump(lk);
		return;
	}
	h->releasing = 1;
	lk->releasing++;
}

/* --- renew ----------------------------------------------------------- */

static void
renew_one_done(void *arg, int ok, const int *renewed, size_t n)
{
	struct op *op = arg;
	struct lock *lk = op->lk;
	struct lclient *cl = op_done(op);
	long long token = op->token;
	long ttl = op->ttl_ms;
	int64_t sent_ms = op->sent_us / 1000;
	struct hold *h = cl != NULL ? hold_of(lk, cl) : NULL;

	free(op);
	if (cl == NULL) {
		/* session gone meanwhile */
	} else if (!ok || n != 1) {
		reply(cl, LK_UNAVAILABLE, 0, "Redis did not answer");
	} else if (h == NULL || h->token != token) {
		reply_not_held(cl, lk->name, lk->te.keylen, 0);
	} else if (renewed[0] == STORE_UNKNOWN) {
		reply(cl, LK_UNAVAILABLE, 0, "Redis did not answer");
	} else if (renewed[0] == STORE_DONE) {
		h->confirmed_ms = sent_ms + ttl;
		h->ttl_ms = ttl;
		h->renew_at = now_ms() + renew_period(ttl);
		renew_schedule(lk->lt, h->renew_at);
		lk->lt->stats.renewals++;
		held_changed(h, h->count, 0);
		reply(cl, LK_OK, ttl, NULL);
	} else if (!hold_doubt(h, 1, cause_of(renewed[0]))) {
		/* Lost: say so now and forget it (no EVENT: this reply is
		 * the news). */
		hold_end(h);
		lost_count(lk->lt, cause_of(renewed[0]));
		reply(cl, LK_LOST, 0, WHY_LOST);
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
	op = op_new(lt, lk, cl);
	op->token = h->token;
	op->sent_us = now_us();
	op->ttl_ms = ttl_ms > 0 ? clamp_ttl(lt, ttl_ms) : h->ttl_ms;
	renew_item(&item, h, op->ttl_ms);
	if (store_renew(lt->st, &item, 1, 0, renew_one_done, op) != 0) {
		op_done(op);
		free(op);
		reply(cl, LK_UNAVAILABLE, 0, "Redis is unreachable");
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
			if (h != NULL)
				h->confirmed_ms = b->sent_ms + b->ttl[i];
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
			    cause_of(found));
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

/* An early hand-off's pass that waits to run again (refused) for h:
 * never mind it, the key is freed instead (the releasing hold's value
 * here; h's own by the caller).  One in flight frees it itself when it
 * fails (repass_done). */
static void
pass_forsake(struct locks *lt, const struct hold *h)
{
	struct pending *p = repass_unlink(lt, h);

	if (p == NULL)
		return;
	pending_add_until(lt, PEND_RELEASE, h->lk, p->id, p->token, 0, 1);
	free(p);
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

static void
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
			h->renew_at = now + renew_period(h->ttl_ms);
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

/* After a reconnect: every queued waiter asks Redis again (behind the
 * clean-ups and the reassert on the pipe). */
static int
pump_waiting(struct keytab_entry *e, void *arg)
{
	struct lock *lk = (struct lock *)(void *)e;

	(void)arg;
	if (lk->whead != NULL)
		lock_pump(lk);	/* may free lk: keytab_each allows it */
	return 0;
}

/* The slot map changed: the same, and no early hand-off from tokens set
 * aside by a master the key's slot may have left. */
static int
pump_rerouted(struct keytab_entry *e, void *arg)
{
	chain_end((struct lock *)(void *)e);
	return pump_waiting(e, arg);
}

static void
renew_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	renew_tick(arg, 0);
}

/* Make sure the renew timer fires no later than when. */
static void
renew_schedule(struct locks *lt, int64_t when)
{
	if (lt->renew_due != 0 && lt->renew_due <= when)
		return;
	lt->renew_due = when;
	timer_at(lt->renew_ev, when);
}

/* --- owner ----------------------------------------------------------- */

_Static_assert(LK_OWNER_SHOWN == STORE_OWNER_SHOWN, "OWNER's holders");

static void
owner_done(void *arg, int ok, long kind, const struct store_holder *sh,
    size_t n, size_t total)
{
	struct op *op = arg;
	struct lclient *cl = op_done(op);
	struct lk_holder h[STORE_OWNER_SHOWN];
	struct lk_result r = { .status = LK_OK, .holders = h, .total = total,
	    .kind = kind == STORE_EXCLUSIVE ? LK_EXCLUSIVE : kind };

	free(op);
	if (cl == NULL)
		return;
	if (!ok) {
		reply(cl, LK_UNAVAILABLE, 0, WHY_NO_ANSWER);
		return;
	}
	for (r.nholders = 0; r.nholders < n && r.nholders < STORE_OWNER_SHOWN;
	    r.nholders++) {
		h[r.nholders] = (struct lk_holder){ sh[r.nholders].owner,
		    sh[r.nholders].ownerlen, sh[r.nholders].token,
		    sh[r.nholders].pttl };
	}
	cl->ops->reply(cl->arg, &r);
}

void
locks_owner(struct lclient *cl, const char *key, size_t keylen)
{
	struct op *op = op_new(cl->lt, NULL, cl);

	if (cl->lt->st == NULL || store_owner(cl->lt->st, key, keylen,
	    owner_done, op) != 0) {
		op_done(op);
		free(op);
		reply(cl, LK_UNAVAILABLE, 0, "Redis is unreachable");
	}
}

/* --- store events ---------------------------------------------------- */

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
	p->sent_us = now_us();
	if (store_pass(lt->st, p->key, p->keylen, p->id, strlen(p->id),
	    p->token, p->next_id, strlen(p->next_id), p->next_token,
	    p->ttl_ms, repass_done, p) != 0)
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
static void
pass_before_release(struct locks *lt, struct hold *h)
{
	struct pending *p;

	if (h->pass_pending && (p = repass_unlink(lt, h)) != NULL)
		repass_send(lt, p);
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

/* The hold of lk of the session with client-id id, or NULL. */
static struct hold *
hold_of_id(const struct lock *lk, const char *id)
{
	struct hold *h;

	TAILQ_FOREACH(h, &lk->holds, klink)
		if (strcmp(h->cl->id, id) == 0)
			return h;
	return NULL;
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
			    now_ms()), pending_done, p);
		else
			rc = store_release(lt->st, p->key, p->keylen, p->id,
			    strlen(p->id), p->token, pending_done, p);
		if (rc != 0)
			pending_push(lt, p);
	}
}

static void
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

/* End the holds the broker can no longer vouch for (hold_jeopardy),
 * pumping none of their keys yet. */
static void
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

void
locks_store_up(void *arg)
{
	struct locks *lt = arg;
	uint64_t tenures = lt->st != NULL ? store_tenures(lt->st) : 0;

	/* Holds whose TTL ran out by the broker's own count while Redis was
	 * away are lost whatever Redis says now: the reassert below must not
	 * set them again.  Their keys are freed with the clean-ups. */
	jeopardy_sweep(lt);
	/* Clean-ups first: they go ahead of any new grant on the pipe;
	 * early hand-offs Redis may not have heard of, ahead of all. */
	lt->pending_retry_ms = PENDING_RETRY_MIN_MS;
	repass_flush(lt);
	pending_flush(lt);
	/* Held locks may have expired while Redis was away, or been lost
	 * with a failed master's writes: reassert them all now, which also
	 * finds the lost ones (after a new master tenure: lost with the
	 * failover).  Then the waiters, behind them on the pipe. */
	lt->failover = lt->tenures != 0 && tenures != lt->tenures;
	lt->tenures = tenures;
	renew_tick(lt, 1);
	lt->failover = 0;
	keytab_each(lt->keys, pump_waiting, NULL);
}

void
locks_store_rerouted(void *arg)
{
	struct locks *lt = arg;

	/* Some keys' master changed: what waited for theirs may go now. */
	lt->pending_retry_ms = PENDING_RETRY_MIN_MS;
	repass_flush(lt);
	pending_flush(lt);
	keytab_each(lt->keys, pump_rerouted, NULL);
}

size_t
locks_pending(const struct locks *lt)
{
	return lt->npending;
}

static int
hold_waiters(struct keytab_entry *e, void *arg)
{
	struct lock *lk = (struct lock *)(void *)e;

	(void)arg;
	if (key_up(lk))
		return 0;	/* cluster mode: its master is another one */
	/* "held elsewhere" is stale news once the connection is gone; the
	 * tokens set aside may be a master's that fails over */
	lk->remote_busy = 0;
	chain_end(lk);
	if (lk->retry_ev)
		event_del(lk->retry_ev);
	waiters_expire(lk);
	lock_gc(lk);		/* may free lk: keytab_each allows it */
	return 0;
}

void
locks_store_down(void *arg)
{
	struct locks *lt = arg;

	/* Waiters stay queued through a reconnect (a failover must not
	 * cost them their turn); one whose WAIT runs out meanwhile is
	 * answered ERR UNAVAILABLE, and locks_store_up retries the rest.
	 * Cluster mode: only keys of the master that went. */
	keytab_each(lt->keys, hold_waiters, NULL);
}

/*
 * The key may be free now (a release elsewhere, or messages possibly
 * missed).  An attempt in flight may have run before that release: mark
 * it, so a "held" answer to it is retried at once instead of slept on.
 */
static void
lock_wake(struct lock *lk)
{
	struct hold *x = hold_excl(lk), *h;

	if (x != NULL && !x->releasing && !x->gone) {
		/* Released elsewhere while a session here holds it alone:
		 * that hold is stale (its session was resumed on another
		 * broker, or the lock was lost).  Check it now, not at its
		 * next renewal, so the waiters here do not wait for that. */
		x->renew_at = now_ms();
		renew_schedule(lk->lt, x->renew_at);
		return;
	}
	/* A shared hold or a permit released elsewhere is news for the
	 * waiters here; but a detached session's hold here may be stale the
	 * same way (resumed elsewhere and released there): check those now
	 * too, so a writer here does not wait for their renewal. */
	TAILQ_FOREACH(h, &lk->holds, klink)
		if (h->cl->detached && !h->releasing && !h->gone) {
			h->renew_at = now_ms();
			renew_schedule(lk->lt, h->renew_at);
		}
	if (lk->attempts)
		lk->wakes++;		/* their "held" answers are retried */
	if (!lk->remote_busy)
		return;
	lk->freed_us = now_us();
	lk->remote_busy = 0;
	if (lk->retry_ev)
		event_del(lk->retry_ev);
	lock_pump(lk);
}

void
locks_store_wanted(void *arg, const char *key, size_t keylen, int writer,
    long long stamp)
{
	struct lock *lk = lock_find(arg, key, keylen);

	/* News for any key this broker has (holds, is acquiring, or has
	 * waiters for): its next releases owe the remote waiter a turn; a
	 * writer's also holds back the readers here (may_try); a reader's
	 * makes the writers here be marked.  A writer's mark (stamp) only
	 * holds back the readers that arrive here from now on (wseen): its
	 * writer announced itself already if it waits for a holder (or its
	 * attempt will), and a second "wanted" would cost a second fair
	 * yield. */
	if (lk != NULL && stamp > 0) {
		if (stamp > lk->wstamp)
			lk->wstamp = stamp;
	} else if (lk != NULL) {
		lk->wanted = 1;
		if (writer)
			lk->writer_wanted = 1;
		else
			shared_seen(lk);
	}
}

void
locks_store_released(void *arg, const char *key, size_t keylen)
{
	struct lock *lk = lock_find(arg, key, keylen);

	if (lk != NULL)
		lock_wake(lk);
}

static int
wake_waiting(struct keytab_entry *e, void *arg)
{
	struct lock *lk = (struct lock *)(void *)e;

	(void)arg;
	lock_wake(lk);		/* may free lk: keytab_each allows it */
	return 0;
}

void
locks_store_subscribed(void *arg)
{
	struct locks *lt = arg;

	/* Messages may have been missed while unsubscribed: retry once. */
	keytab_each(lt->keys, wake_waiting, NULL);
}

/* --- clients --------------------------------------------------------- */

struct lclient *
locks_client_new(struct locks *lt, const char *id,
    const struct lk_client_ops *ops, void *arg)
{
	struct lclient *cl = xcalloc(1, sizeof *cl);

	cl->lt = lt;
	owner_copy(cl->id, id);
	cl->ops = ops;
	cl->arg = arg;
	TAILQ_INIT(&cl->held);
	cl->deadline_ev = evtimer_new(lt->base, deadline_cb, cl);
	if (cl->deadline_ev == NULL)
		fatalx("cannot create waiter timer");
	return cl;
}

void
locks_client_free(struct lclient *cl)
{
	struct locks *lt;
	struct lock *lk;
	struct hold *h;

	if (cl == NULL)
		return;
	lt = cl->lt;
	cl->closing = 1;
	if (cl->op != NULL) {
		/* its reply finds nobody */
		if (cl->op->cl == cl)
			cl->op->cl = NULL;
		if (cl->op->next == cl)
			cl->op->next = NULL;
	}
	if ((lk = cl->wlock) != NULL) {
		waiter_remove(cl);
		lock_pump(lk);
	}
	while ((h = TAILQ_FIRST(&cl->held)) != NULL) {
		long long token = h->token;
		int releasing = h->releasing;

		lk = h->lk;
		pass_before_release(lt, h);
		if (!releasing && pass_local(lk, h, handoff_target(lk, h))) {
			lock_pump(lk);
			continue;	/* passed on: h has ended */
		}
		hold_end(h);
		if (!releasing)
			release_orphan(lk, cl->id, token);
		lock_pump(lk);
	}
	while (cl->lost != NULL) {
		struct lostkey *k = cl->lost;
		cl->lost = k->next;
		free(k);
	}
	event_free(cl->deadline_ev);
	free(cl);
	(void)lt;
}

void
locks_client_eof(struct lclient *cl)
{
	struct lock *lk = cl->wlock;

	cl->no_wait = 1;
	if (lk == NULL)
		return;
	cl->deadline = now_ms();
	if (cl->op != NULL)
		return;		/* its attempt's reply answers, BUSY or OK */
	waiter_remove(cl);
	if (cl->lt->st != NULL && !key_up(lk)) {
		cl->lt->stats.acquire_errors++;
		reply(cl, LK_UNAVAILABLE, 0, WHY_WAIT_DOWN);
	} else {
		cl->lt->stats.busy++;
		reply(cl, LK_BUSY, 0, NULL);
	}
	lock_pump(lk);
}

void
locks_client_handover(struct lclient *cl, const struct lk_client_ops *ops,
    void *arg, int detached)
{
	struct lock *lk = cl->wlock;

	if (lk != NULL) {
		/* a grant on its way finds nobody, and is freed */
		if (cl->op != NULL && cl->op->cl == cl)
			cl->op->cl = NULL;
		if (cl->op != NULL && cl->op->next == cl)
			cl->op->next = NULL;
		cl->op = NULL;
		waiter_remove(cl);
		lock_pump(lk);
	}
	/* its own release or renewal in flight still ends its hold; a
	 * verdict it waited for (hold_doubt) is nobody's to hear now */
	cl->answer_due = 0;
	cl->ops = ops;
	cl->arg = arg;
	cl->detached = detached ? 1 : 0;
}

void
locks_client_resumable(struct lclient *cl)
{
	cl->resumable = 1;
}

/* Forget cl's holds here without touching Redis, but for those a
 * takeover leaves behind (taken: see locks_client_taken); free cl. */
static void
client_abandon(struct lclient *cl, int taken)
{
	struct hold *h;

	cl->closing = 1;
	while ((h = TAILQ_FIRST(&cl->held)) != NULL) {
		struct lock *lk = h->lk;
		long long token = h->token;
		int orphan = taken && h->unsure && !h->releasing && !h->gone;

		hold_end(h);
		if (orphan) {
			cl->lt->stats.orphans++;
			release_orphan(lk, cl->id, token);
		}
		lock_pump(lk);
	}
	locks_client_free(cl);
}

void
locks_client_abandon(struct lclient *cl)
{
	client_abandon(cl, 0);
}

void
locks_client_taken(struct lclient *cl)
{
	client_abandon(cl, 1);
}

void
locks_recorded(struct lclient *cl, const char *key, size_t keylen)
{
	struct lock *lk = lock_find(cl->lt, key, keylen);
	struct hold *h = lk != NULL ? hold_of(lk, cl) : NULL;

	if (h != NULL)
		h->unsure = 0;
}

/* cl's first hold found gone (hold_doubt), or NULL. */
static struct hold *
first_gone(const struct lclient *cl)
{
	struct hold *h;

	TAILQ_FOREACH(h, &cl->held, hlink)
		if (h->gone)
			return h;
	return NULL;
}

void
locks_doubt_settled(struct lclient *cl)
{
	int answer = cl->answer_due;
	struct hold *h;

	if (!cl->doubting)
		return;
	cl->doubting = 0;
	if (cl->doubt_again) {
		/* a hold was found gone after that check was sent: the
		 * takeover may have come in between, so ask again */
		cl->doubt_again = 0;
		if (cl->ops->doubt != NULL && cl->ops->doubt(cl->arg)) {
			cl->doubting = 1;
			return;
		}
	}
	cl->answer_due = 0;
	while ((h = first_gone(cl)) != NULL) {
		struct lock *lk = h->lk;

		if (h->answer) {
			/* the answer is the news: no EVENT, nothing kept */
			enum lk_lost_cause cause = h->gone_cause;

			hold_end(h);
			lost_count(cl->lt, cause);
		} else {
			hold_lost(h, 1, h->gone_cause);
		}
		lock_pump(lk);
	}
	if (answer)
		reply(cl, LK_LOST, 0, WHY_LOST);
}

int
locks_adopt(struct lclient *cl, const char *key, size_t keylen, long kind,
    long long token, unsigned holds, long ttl_ms, int64_t sent_us)
{
	struct locks *lt = cl->lt;
	struct lock *lk = lock_get(lt, key, keylen);
	struct hold *h, *next;

	/* Redis just showed the key as cl's: a hold here it excludes is
	 * stale (e.g. of a session resumed on another broker, which passed
	 * the key on there without a release message). */
	for (h = TAILQ_FIRST(&lk->holds); h != NULL; h = next) {
		next = TAILQ_NEXT(h, klink);
		if (h->cl == cl || (kind != LK_EXCLUSIVE &&
		    h->kind != LK_EXCLUSIVE && h->kind == kind))
			continue;
		if (h->releasing) {
			lock_gc(lk);
			return -1;	/* its release's reply ends that hold */
		}
		hold_lost(h, 1, LK_LOST_TAKEN);
	}
	if ((h = hold_of(lk, cl)) == NULL) {
		h = hold_start(lk, cl, kind, token, clamp_ttl(lt, ttl_ms),
		    sent_us);
		/* what the takeover set in Redis, whatever the clamp says */
		h->confirmed_ms = sent_us / 1000 + ttl_ms;
	}
	h->unsure = 0;			/* it came from the record */
	h->count = holds > 0 ? holds : 1;
	lk->remote_busy = 0;
	return 0;
}

void
locks_holds(const struct lclient *cl, void (*fn)(void *arg, const char *key,
    size_t keylen, unsigned holds, long ttl_ms, long kind), void *arg)
{
	const struct hold *h;

	TAILQ_FOREACH(h, &cl->held, hlink)
		fn(arg, h->lk->name, h->lk->te.keylen, h->count, h->ttl_ms,
		    h->kind);
}

int
locks_holds_key(const struct lclient *cl, const char *key, size_t keylen)
{
	const struct lock *lk = lock_find(cl->lt, key, keylen);

	return lk != NULL && hold_of(lk, cl) != NULL;
}

size_t
locks_held(const struct lclient *cl,
    void (*fn)(void *arg, const char *key, size_t keylen), void *arg)
{
	const struct hold *h;

	if (fn != NULL)
		TAILQ_FOREACH(h, &cl->held, hlink)
			fn(arg, h->lk->name, h->lk->te.keylen);
	return cl->nheld;
}

/* --- table ----------------------------------------------------------- */

struct locks *
locks_new(struct event_base *base, const struct locks_cfg *cfg)
{
	struct locks *lt = xcalloc(1, sizeof *lt);

	lt->base = base;
	lt->cfg = *cfg;
	lt->keys = keytab_new();
	TAILQ_INIT(&lt->held);
	TAILQ_INIT(&lt->marked);
	lt->renew_ev = evtimer_new(base, renew_cb, lt);
	lt->pending_ev = evtimer_new(base, pending_cb, lt);
	lt->mark_ev = evtimer_new(base, mark_cb, lt);
	if (lt->renew_ev == NULL || lt->pending_ev == NULL ||
	    lt->mark_ev == NULL)
		fatalx("cannot create renew timers");
	lt->pending_retry_ms = PENDING_RETRY_MIN_MS;
	return lt;
}

void
locks_set_store(struct locks *lt, struct store *st)
{
	lt->st = st;
}

void
locks_set_cfg(struct locks *lt, const struct locks_cfg *cfg)
{
	lt->cfg = *cfg;
}

static int
free_entry(struct keytab_entry *e, void *arg)
{
	struct lock *lk = (struct lock *)(void *)e;

	(void)arg;
	keytab_remove(lk->lt->keys, e);
	if (lk->retry_ev)
		event_free(lk->retry_ev);
	free(lk);
	return 0;
}

/* Call after every client is freed and the store is gone. */
void
locks_free(struct locks *lt)
{
	if (lt == NULL)
		return;
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
	keytab_each(lt->keys, free_entry, NULL);
	keytab_free(lt->keys);
	event_free(lt->renew_ev);
	event_free(lt->pending_ev);
	event_free(lt->mark_ev);
	free(lt);
}

void
locks_get_stats(const struct locks *lt, struct locks_stats *out)
{
	*out = lt->stats;
	out->keys = keytab_count(lt->keys);
}
