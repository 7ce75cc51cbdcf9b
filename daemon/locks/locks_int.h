/*
 * locks_int.h - what the files of the lock table share, and nothing else.
 *
 * A key's entry (struct lock) exists while anything refers to it: a local
 * hold, a waiter, or a Redis operation in flight (refs).  lock_pump() is
 * the one place that moves a key forward: each waiter from the head of the
 * FIFO whose kind goes with what is held and tried here (may_try) gets an
 * acquire attempt; the first that does not go stops the walk, so nobody
 * overtakes it (a waiting writer holds back the readers behind it).
 *
 * Kinds (shared locks and semaphores): a key is a lock or a semaphore.  A
 * lock has one exclusive hold or any number of shared ones; a semaphore of
 * n permits has at most n holds.  Each hold (struct hold) has its own
 * token, TTL and renewal; Redis keeps a shared lock or a semaphore as a
 * sorted set (store.h), an exclusive lock as a string.
 * Every event that may unblock a key (release reply, attempt reply, pub/sub
 * message, retry timer, waiter leaving) ends in lock_pump(), which also
 * frees the entry once nothing refers to it -- so it is always the last
 * use of the entry by its caller.
 *
 * Wake-ups, never polling: a local release pumps at once; a release on
 * another broker arrives by pub/sub; a holder that died without releasing
 * is retried once when its PTTL (returned by the failed attempt) runs out.
 *
 * The files, lowest first; a file calls only the files above it in this
 * list (tests/layers ranks them: make check-deps holds the code to it):
 *   table.c    key entries, Redis operations, hold look-ups, the tokens
 *              set aside, the renewal timer kept due (calls no file here)
 *   marks.c    waiting writers marked in Redis (shared locks)
 *   records.c  waiters recorded in Redis for remote grants (remote.c)
 *   waiters.c  the FIFO of local waiters
 *   cleanup.c  clean-ups and re-passes waiting for Redis to answer again
 *   holds.c    a hold begins, ends, is lost, or doubted (hold_doubt)
 *   grant.c    lock_pump, attempts, grants, deadlines, orphans, ACQUIRE
 *   remote.c   remote grants: waiters recorded for a release elsewhere to
 *              grant them the key in its own call, and those grants
 *   values.c   a hold's value (1.2): replaced, kept fresh beside renewals
 *   multi.c    ACQUIRE ALL (1.2): waits for key sets, all or nothing
 *   renew.c    RENEW, batched renewal, the jeopardy rule
 *   handoff.c  RELEASE, the hand-off in one script call, the early pass
 *   watch.c    WATCH (1.2): watched keys read again as they change
 *   events.c   Redis up, down, rerouted; released, wanted, changed
 *   locks.c    the table's life, clients and their grace hooks, OWNER
 * Timers are made in locks_new and locks_client_new, so a lower file arms
 * them without naming the callback of a higher one.  Structs one file
 * alone uses live in it (struct pending, lostkey, renew_batch).
 */
#ifndef LOCKBROKER_LOCKS_INT_H
#define LOCKBROKER_LOCKS_INT_H

#include <event2/util.h>
#include <stdint.h>
#include <string.h>
#include <sys/queue.h>

#include "clientid.h"
#include "keytab.h"
#include "pool.h"
#include "locks.h"
#include "store.h"

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
#define WHY_LIMIT "this session holds max_locks_per_session keys"
#define PENDING_MAX 10000		/* Redis clean-ups remembered */
#define PENDING_RETRY_MIN_MS 100	/* clean-ups refused while connected: */
#define PENDING_RETRY_MAX_MS 2000	/* retried with backoff */

/*
 * Local hand-offs without a Redis round trip (the early hand-off).  An
 * exclusive grant made while other waiters queue here sets PASS_BLOCK
 * tokens aside after its own (INCRBY: no other broker and no other key
 * ever gets them), and lk->rare->chain_* remember them.  While they last, the
 * release of a hold of that chain passes the key straight to the next
 * exclusive waiter, with the next token: the waiter is told OK at once and
 * pass.lua brings Redis up to date behind it (not awaited; calls on one
 * connection run in order, so the new holder's renewals and release come
 * after it).  Only when Redis is known to keep the releasing hold's value
 * past the new holder's first renewal (hold.confirmed_ms, less
 * PASS_MARGIN_MS): no other broker can take the key before the call lands
 * or the renewal says it did not.  A pass that finds the chain gone from
 * Redis ends the chain here and the new holder is told it lost the key,
 * as any holder whose renewal finds it gone.
 */
#define PASS_BLOCK 32
#define PASS_MARGIN_MS 10

/* One session's hold of a key (the counters and flags last: no holes). */
#define HOLD_KIND_BITS 21		/* -1 .. 2^20 - 1 */
_Static_assert(LK_PERMITS_MAX == (1L << (HOLD_KIND_BITS - 1)) - 1,
    "a hold's kind field holds LK_EXCLUSIVE .. LK_PERMITS_MAX");

struct hold {
	struct lock *lk;
	struct lclient *cl;
	TAILQ_ENTRY(hold) klink;	/* in lk->holds */
	TAILQ_ENTRY(hold) hlink;	/* in cl->held */
	TAILQ_ENTRY(hold) alink;	/* in lt->held (all holds) */
	long long token;
	char *value;			/* 1.2 PROCLAIM: its value (NUL-ended,
					 * at most STORE_VALUE_MAX bytes), kept
					 * fresh beside renewals; NULL: none */
	int64_t noticed_ms;		/* its last EVENT WANTED (marks.c) */
	int64_t start_us;		/* granted (or adopted) here: the hold
					 * time histogram's start */
	int64_t renew_at;		/* monotonic ms */
	int64_t confirmed_ms;		/* Redis keeps it at least until then:
					 * its last grant, renewal or pass
					 * confirmed, from the send, plus TTL
					 * (a pass not yet confirmed: the
					 * releasing hold's) */
	int64_t reclaim_until;		/* its reassert got no answer: renew
					 * it with reassert.lua until one comes,
					 * while a lock delay may run (ms) */
	/* 32-bit fields, the kind beside the flags: a held lock costs its
	 * hold, so 100,000 holds are 1.6 MB less than with longs */
	int32_t delay_ms;		/* lock delay (ACQUIRE ... DELAY): kept
					 * taken that long after an unclean
					 * end of its session; 0: none
					 * (max_delay_ms <= 86,400,000) */
	int32_t ttl_ms;			/* (max_ttl_ms <= 2^31 - 1) */
	unsigned count;			/* reentrant holds */
	signed kind:HOLD_KIND_BITS;	/* LK_EXCLUSIVE, LK_SHARED, permits
					 * (at most PROTO_LIMIT_MAX) */
	unsigned notice_owed:1;		/* an EVENT WANTED waits for its turn
					 * (noticed_ms) */
	unsigned releasing:1;		/* its release in flight */
	unsigned pass_pending:1;	/* handed over early, and the pass Redis
					 * refused waits to run again (instead
					 * of a renewal: see pass_done) */
	unsigned released_again:2;	/* releases sent again behind that
					 * pass (release_done) */
	unsigned unsure:1;		/* a grace session's grant its record
					 * may not list (locks_client_taken) */
	unsigned gone:1;		/* Redis no longer shows it; its grace
					 * session checks whether it was
					 * resumed elsewhere (hold_doubt) */
	unsigned answer:1;		/* ... and the request in progress
					 * awaits that verdict */
	unsigned gone_cause:2;		/* ... why (enum lk_lost_cause), for
					 * when the verdict is "lost" */
	unsigned moved:1;		/* it ends here because another
					 * session took it over (RESUME): not
					 * a hold time */
};

/*
 * What a key needs only while it is contended (waiters, "held elsewhere",
 * hand-off chains and their fairness), refused, shared, or named by
 * ACQUIRE ALL: kept apart from struct lock, made on its first use and
 * freed with the entry, so that a key held alone costs its entry and its
 * hold and nothing more.  Read through lk_rare() (all zero while there is
 * none), written through lk_rare_w() (which makes it); a write of zero
 * that may find none leaves it unmade (if (lk->rare != NULL) ...).
 */
struct lock_rare {
	long busy_kind;			/* the kind whose attempt said "held
					 * elsewhere" (remote_busy) */
	struct event *retry_ev;		/* retry at the holder's PTTL */
	int64_t freed_us;		/* when seen free with waiters, or 0 */
	int64_t writer_until_ms;	/* a remote writer waits: readers here
					 * hold back until then (marks.c) */
	int64_t yield_until_ms;		/* local attempts wait until then */
	unsigned handoffs;		/* local handoffs in a row */
	long refused_ms;		/* Redis refused an attempt (OOM, BUSY):
					 * the next one after this long, which
					 * doubles while it lasts; 0 none */
	long long wstamp;		/* the latest writer mark of another
					 * broker heard of (0 none) */
	/* tokens set aside for local hand-offs (PASS_BLOCK): the chain's
	 * first (granted by Redis), the next to hand out, the last; 0 none */
	long long chain_first, chain_next, chain_last;
	unsigned mrefs;			/* ACQUIRE ALL waits naming the key */
	unsigned mqueued;		/* ... of them not granted at once */
	int64_t mhold_us;		/* the start of the oldest of them that
					 * waited LK_ALL_PATIENCE_MS: single
					 * requests that came later hold back
					 * (0 none) */
	int64_t moldest_us;		/* ... the oldest queued one's start (0
					 * none) */
	/* a remote grant heard while its waiter's attempt was in flight,
	 * decided when that answers (remote.c): token 0 none */
	long long rg_token, rg_ms;
	uint32_t rg_wid;
};

/* A key's entry; its fields in order of size, so no padding. */
struct lock {
	struct keytab_entry te;		/* te.key points at name */
	struct locks *lt;
	TAILQ_HEAD(, hold) holds;	/* local holds: one exclusive, or
					 * shared ones, or permits */
	struct lclient *whead, *wtail;	/* FIFO of local waiters (every
					 * request waits here while it is
					 * tried) */
	struct notice *nt;		/* WANTED notices (marks.c), NULL while
					 * none concern the key; keeps lk */
	struct lock_rare *rare;		/* NULL while none is needed */
	long limit;			/* 0 a lock, n a semaphore: fixed while
					 * anything here holds or waits */
	unsigned nholds;
	unsigned refs;			/* Redis operations in flight */
	unsigned attempts;		/* acquire attempts in flight */
	unsigned releasing;		/* releases in flight */
	unsigned wakes;			/* wakes so far: an attempt sent before
					 * the last one answered "held" may be
					 * stale news (struct op.wakes) */
	unsigned excl_attempt:1;	/* one of the attempts exclusive
					 * (alone) */
	unsigned remote_busy:1;		/* held elsewhere: wait for a wake */
	unsigned in_delay:1;		/* free, but a failover lock delay runs */
	unsigned wanted:1;		/* a remote waiter announced itself */
	unsigned writer_wanted:1;	/* ... and it waits to hold exclusive:
					 * readers here hold back until
					 * writer_until_ms (marks.c) */
	unsigned shared_seen:1;		/* readers here or announced: mark the
					 * writers waiting here */
	char name[];
};

/* lk's rare state to read: zeros while it has none (table.c). */
extern const struct lock_rare lock_rare_none;
static inline const struct lock_rare *
lk_rare(const struct lock *lk)
{
	return lk->rare != NULL ? lk->rare : &lock_rare_none;
}

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
 * Redis was back at once.
 *  - PEND_PASS (a list of their own, lt->passes, run in the order they
 *    were made and before the others): an early hand-off whose pass.lua
 *    got no answer, run again (a no-op if it ran), so the reassert behind
 *    it finds the new holder's value whether or not the first call ran.
 */
enum pend_kind { PEND_FORGET, PEND_RELEASE, PEND_PASS };

struct pending;			/* cleanup.c */
struct lostkey;			/* holds.c */

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
	char *wvalue;			/* the value to acquire with (1.2,
					 * exclusive; NUL-ended), NULL none:
					 * the hold takes it when granted */
	long wdelay;			/* ... and its lock delay (0: none) */
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
	unsigned clean:1;		/* ends cleanly: no lock delay */
	unsigned notices:1;		/* wants WANTED notices of its holds */
	unsigned wcounted:1;		/* its wait counts in its key's queue
					 * (queued: lk_queued) */
	unsigned closing:1;		/* being freed: no more news */
	unsigned resumable:1;		/* a grace session's: no early
					 * hand-off from its holds */
	unsigned doubting:1;		/* ops->doubt asked: holds are gone */
	unsigned doubt_again:1;		/* another found gone since the ask */
	unsigned answer_due:1;		/* a reply waits for the verdict */
	/* A waiter of another client's (locks_waiter_new): owner holds what
	 * it is granted. */
	struct lclient *owner;
	unsigned told_queued:1;		/* ops->queued said for this ACQUIRE */
	unsigned conn_wait:1;		/* a one-try ACQUIRE that came while
					 * Redis's connection was being made:
					 * it waits for that, then is tried
					 * once (lock_pump) */
	unsigned rrecorded:1;		/* a record of its wait for remote
					 * grants may be in Redis (records.c) */
	uint32_t rwid;			/* ... that wait's id, 0 none (in the
					 * hole before mw: no growth) */
	struct mwait *mw;		/* its ACQUIRE ALL in progress */
};

/* Who holds what cl is granted: its owner for a waiter, else itself. */
static inline struct lclient *
lk_holder(struct lclient *cl)
{
	return cl->owner != NULL ? cl->owner : cl;
}

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

struct locks {
	struct event_base *base;
	struct locks_cfg cfg;
	struct store *st;
	struct keytab *keys;
	struct pool *pool;		/* lock entries and holds (pool.h) */
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
	struct keytab *watched;		/* watch.c: keys watched here */
	TAILQ_HEAD(, mwait) mwaits;	/* multi.c: ACQUIRE ALL waits, FIFO */
	struct event *multi_ev;		/* tries them (a key may be free) */
	TAILQ_HEAD(, notice) notices;	/* marks.c: keys with notice state */
	struct event *notice_ev;	/* ... its timer: owed notices, reports
					 * refreshed, reports heard expiring */
	int64_t notice_at_ms;		/* ... when it fires */
	struct event *report_ev;	/* ... queue reports, once per turn */
	uint32_t rwait_seq;		/* the last wait-id (records.c) */
	struct locks_stats stats;
};

/* table.c */
int lk_key_up(const struct lock *lk);
long lk_key_coming(const struct lock *lk);
void lk_queued(struct lclient *w);
void lk_reply(struct lclient *cl, enum lk_status status, long long n,
    const char *why);
void lk_reply_waited(struct lclient *cl, long long token, int64_t wait_us);
void lk_held_changed(const struct hold *h, unsigned count, int fresh);
long lk_clamp_ttl(const struct locks *lt, long ttl_ms);
long lk_renew_period(long ttl_ms);
struct lock *lock_find(struct locks *lt, const char *key, size_t keylen);
struct lock *lock_get(struct locks *lt, const char *key, size_t keylen);
struct lock_rare *lk_rare_w(struct lock *lk);
void lock_free(struct lock *lk);
void lock_gc(struct lock *lk);
struct op *lk_op_new(struct locks *lt, struct lock *lk, struct lclient *cl);
struct lclient *lk_op_done(struct op *op);
struct hold *hold_of(const struct lock *lk, const struct lclient *cl);
struct hold *hold_by_token(const struct lock *lk, long long token);
struct hold *hold_excl(const struct lock *lk);
struct hold *hold_of_id(const struct lock *lk, const char *id);
char *value_copy(const char *text, size_t len);
/* The length of a value (value_copy's), 0 for none. */
static inline size_t
value_len(const char *v)
{
	return v != NULL ? strlen(v) : 0;
}
void chain_start(struct lock *lk, long long token, long more);
void chain_end(struct lock *lk);
void renew_schedule(struct locks *lt, int64_t when);

/* marks.c */
struct notice;
void notice_waiting(struct lclient *w);
void notice_queue_changed(struct lock *lk, int grew);
void notice_hold_start(struct hold *h);
void notice_free(struct lock *lk);
void notice_cb(evutil_socket_t fd, short what, void *arg);
void report_cb(evutil_socket_t fd, short what, void *arg);
void mark_wait(struct lclient *w);
void mark_leave(struct lclient *w, int op);
int mark_take(struct lclient *w);
void mark_left(struct lclient *w, const struct lock *lk, int op);
void mark_cb(evutil_socket_t fd, short what, void *arg);
void shared_seen(struct lock *lk);
void writer_heard(struct lock *lk);
int writer_elsewhere(const struct lock *lk);

/* waiters.c */
void waiter_push(struct lock *lk, struct lclient *cl, long kind, long wait_ms,
    long ttl_ms);
void waiter_remove(struct lclient *cl);
void waiters_expire(struct lock *lk);

/* cleanup.c */
void pending_add_until(struct locks *lt, enum pend_kind kind,
    const struct lock *lk, const char *id, long long token,
    int64_t linger_until, int counted);
void pending_add(struct locks *lt, enum pend_kind kind, const struct lock *lk,
    const char *id, long long token);
void pending_drop(struct locks *lt, const char *key, size_t keylen,
    const char *id);
void pass_later(struct lock *lk, const struct op *op, struct hold *h);
void pass_before_release(struct locks *lt, struct hold *h);
void pass_forsake(struct locks *lt, const struct hold *h);
void pending_cb(evutil_socket_t fd, short what, void *arg);
void cleanup_run(struct locks *lt);
void cleanup_free(struct locks *lt);

/* holds.c */
void lost_clear(struct lclient *cl);
void reply_not_held(struct lclient *cl, const char *key, size_t keylen,
    int releasing);
struct hold *hold_start(struct lock *lk, struct lclient *cl, long kind,
    long long token, long ttl, int64_t sent_us, long delay_ms);
void hold_end(struct hold *h);
void hold_release_deferred(struct hold *h, long linger_ms);
void lk_lost_count(struct locks *lt, enum lk_lost_cause cause);
enum lk_lost_cause lk_cause_of(int found);
void hold_lost(struct hold *h, int remember, enum lk_lost_cause cause);
int hold_doubt(struct hold *h, int answer, enum lk_lost_cause cause);
void hold_gone(struct hold *h, enum lk_lost_cause cause);

/* records.c: waiters recorded for remote grants (remote.c) */
void waiter_record(struct lclient *w);
void waiter_unrecord(struct lclient *w);
void waiter_unrecord_of(struct lclient *w, const struct lock *lk,
    const char *value);
/* grant.c */
int grant_too_late(int64_t sent_us, long ttl_ms);
long chain_want(const struct lclient *w);
struct hold *grant_local(struct lock *lk, struct lclient *w, long kind,
    long long token, int64_t sent_us, int64_t since_us);
int waiter_over_limit(const struct lclient *w);
void limit_sweep(struct lock *lk);
void release_orphan(struct lock *lk, const char *id, long long token);
/* Remote grants (remote.c hears them): the waiter of wait id wid whose
 * client-id is id, or NULL; the grant (id, token, made at grant_ms on the
 * master's clock) delivered to w, or released at once when w is NULL or
 * cannot take it.  Pumps lk. */
struct lclient *grant_waiter_of(const struct lock *lk, unsigned long long wid,
    const char *id);
void grant_remote(struct lock *lk, struct lclient *w, const char *id,
    long long token, long long grant_ms);
void release_delayed(struct lock *lk, const char *id, long long token,
    long delay_ms);
void release_done(void *arg, int ok, int released);
int release_again(struct hold *h, const struct op *op);
void lock_refused(struct lock *lk, long kind);
void lock_pump(struct lock *lk);
void deadline_cb(evutil_socket_t fd, short what, void *arg);
void acquire_with(struct lclient *cl, const char *key, size_t keylen,
    long kind, long wait_ms, long ttl_ms, const char *value, size_t valuelen,
    long delay_ms);
void lock_retry_at(struct lock *lk, int64_t when);

/* multi.c */
struct mwait;
void multi_cb(evutil_socket_t fd, short what, void *arg);
void multi_client_gone(struct lclient *cl);
void multi_client_eof(struct lclient *cl);
void multi_free(struct locks *lt);

/* values.c */
void value_refresh(struct hold *h);
void value_write(struct lclient *cl, struct hold *h, const char *text,
    size_t textlen, int reentrant);

/* renew.c */
void renew_tick(struct locks *lt, int all);
void renew_cb(evutil_socket_t fd, short what, void *arg);
void jeopardy_sweep(struct locks *lt);

/* handoff.c */
struct lclient *handoff_target(const struct lock *lk, const struct hold *h);
int pass_local(struct lock *lk, struct hold *h, struct lclient *w);

/* watch.c */
void watch_init(struct locks *lt);
void watch_free(struct locks *lt);
void watch_poke(struct locks *lt, const char *key, size_t keylen);
void watch_all(struct locks *lt);

#endif
