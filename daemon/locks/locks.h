/*
 * locks.h - the broker's lock table, in domain terms.
 *
 * Per key: the local sessions holding it (hold count, token, TTL each),
 * a FIFO of local waiters, and the Redis operations in flight, so
 * same-key requests are serialized here and never race each other in
 * Redis: one exclusive attempt or release at a time, or several attempts
 * for holds that go together (shared holds, permits below the limit).
 * A key is a lock (held by one, or shared by readers) or a semaphore of
 * n permits.  Renewal of every hold is batched.
 * Nothing here sees a protocol line or a Redis reply.
 *
 * A client (one per session) has at most one request in progress; every
 * request gets exactly one reply through ops->reply, never from inside
 * the locks_* call that made it... except immediate answers, which are
 * delivered before that call returns.  Callers must not re-enter locks_*
 * from the reply callback (sessions defer their next request).
 */
#ifndef LOCKBROKER_LOCKS_H
#define LOCKBROKER_LOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "histo.h"

struct event_base;
struct store;
struct locks;
struct lclient;

/* What an ACQUIRE asks for: an exclusive hold, a shared one, or one of
 * n > 0 permits (the key is then a semaphore). */
#define LK_EXCLUSIVE (-1L)
#define LK_SHARED 0L
#define LK_PERMITS_MAX ((1L << 20) - 1)	/* the most n a hold can record */

/* LK_KIND: the key is of another kind than asked (lk_result.n: 0 a lock,
 * n > 0 a semaphore of n permits); LK_UPGRADE: the session holds the key
 * shared and asked for it exclusive. */
enum lk_status { LK_OK, LK_BUSY, LK_NOTHELD, LK_LOST, LK_UNAVAILABLE,
    LK_LIMIT, LK_KIND, LK_UPGRADE, LK_BADARG };

/* A holder OWNER shows (valid during the reply only); at most
 * LK_OWNER_SHOWN are. */
#define LK_OWNER_SHOWN 16
struct lk_holder {
	const char *owner;		/* client-id, "?" for foreign bytes */
	size_t ownerlen;
	long long token;
	long long pttl;			/* ms left, -1 no expiry */
	const char *value;		/* locks_owner_value, exclusive: the
					 * hold's value (NULL: none) */
	size_t valuelen;
};

struct lk_result {
	enum lk_status status;
	/* OK: the token (acquire), holds left (release), TTL set (renew). */
	long long n;
	/* owner: the key's kind (LK_EXCLUSIVE, LK_SHARED, permits) and
	 * nholders of total holders (0: free), soonest to expire first. */
	long kind;
	const struct lk_holder *holders;
	size_t nholders, total;
	const char *why;		/* for errors: a short reason */
	/* waited: an ACQUIRE's OK after a wait or a Redis call, waited_us
	 * from the request to the grant (the acquire_wait sample). */
	int waited;
	int64_t waited_us;
	/* ACQUIRE ALL's OK: ntokens tokens, in the keys' order (n unused);
	 * LK_KIND for it: index is the key's */
	const long long *tokens;
	size_t ntokens;
	size_t index;
};

struct lk_client_ops {
	void (*reply)(void *arg, const struct lk_result *res);
	/* A held lock was found lost (renewal saw it gone or another's). */
	void (*lost)(void *arg, const char *key, size_t keylen,
	    long long token);
	/* Optional (grace sessions record their holds in Redis): a hold of
	 * the client changed; holds 0 when it ended (released, lost); fresh
	 * when it was just granted (its OK follows at once); kind as the
	 * hold was asked for (LK_EXCLUSIVE, LK_SHARED, permits); delay_ms
	 * its lock delay (ACQUIRE ... DELAY), 0 none. */
	void (*changed)(void *arg, const char *key, size_t keylen,
	    unsigned holds, long ttl_ms, long kind, long delay_ms, int fresh);
	/* Optional (grace sessions): a hold of a resumable client was found
	 * gone in Redis, which may only mean that a RESUME elsewhere took
	 * the session over.  Returns 1 when the owner checks and then calls
	 * locks_doubt_settled (still its session: a loss after all) or
	 * locks_client_taken (taken over: no loss); 0 when it cannot: the
	 * hold is reported lost at once. */
	int (*doubt)(void *arg);
	/* Optional (a waiter of locks_waiter_new): the ACQUIRE in progress
	 * was not granted at once and waits on (its wait runs): said once
	 * per ACQUIRE, before its reply, which comes later. */
	void (*queued)(void *arg);
	/* Optional (EVENTS ON WANTED, locks_client_notices): waiters of any
	 * broker queue for key, which the client holds: how many, and the
	 * oldest one's wait (ms).  At most once a second per key. */
	void (*wanted)(void *arg, const char *key, size_t keylen,
	    unsigned waiters, long oldest_ms);
};

/* Why a held lock was lost: counted per cause (STATS lost_*, /metrics
 * lockbroker_lost_locks_total{cause=...}). */
enum lk_lost_cause {
	LK_LOST_EXPIRED,	/* Redis no longer had it: its TTL ran out
				 * there, or it was deleted */
	LK_LOST_TAKEN,		/* Redis showed another holder */
	LK_LOST_JEOPARDY,	/* no renewal was confirmed within its TTL
				 * (counted from the renewal's send): the
				 * broker could no longer vouch for it */
	LK_LOST_FAILOVER,	/* a new master tenure (a failover, a Redis
				 * restart) did not keep it, and it could
				 * not be set again */
	LK_LOST_CAUSES
};

struct locks_cfg {
	long default_ttl_ms;
	long max_ttl_ms;
	long max_wait_ms;
	long max_locks_per_session;
	long max_waiters;
	long min_ttl_ms;		/* 0: no floor */
	long reclaim_ms;		/* how long after a master change a
					 * lock may be reclaimed (lock delay) */
};

struct locks_stats {
	uint64_t acquires;		/* ACQUIREs answered OK (new or reentrant) */
	uint64_t busy;			/* ACQUIREs answered BUSY */
	uint64_t acquire_errors;	/* ACQUIREs answered ERR */
	uint64_t releases;		/* locks freed by RELEASE or session end */
	uint64_t renewals;		/* keys renewed in Redis */
	uint64_t lost;			/* held locks found lost */
	uint64_t lost_by[LK_LOST_CAUSES];	/* ... by cause */
	uint64_t reclaimed;		/* held locks set again in Redis after
					 * a master change lost them */
	uint64_t orphans;		/* grants for gone sessions, released */
	uint64_t handoffs;		/* releases that granted a local waiter
					 * in the same script call, or at once */
	uint64_t early_handoffs;	/* of those, granted at once: Redis
					 * brought up to date behind them */
	uint64_t fair_yields;		/* releases that let a remote waiter
					 * try first */
	size_t locks_held;		/* holds of local sessions now (keys
					 * held, shared holds and permits) */
	size_t waiters;			/* ACQUIREs waiting now */
	size_t keys;			/* lock table entries */
	struct histo acquire_wait;	/* ACQUIRE to OK, for granted waits */
	struct histo handoff;		/* key seen free to next local grant */
	struct histo hold;		/* grant to end of a hold here (not
					 * one another session took over) */
};

struct locks *locks_new(struct event_base *base, const struct locks_cfg *cfg);
void locks_set_store(struct locks *lt, struct store *st);
/* Live changes of limits (SIGHUP). */
void locks_set_cfg(struct locks *lt, const struct locks_cfg *cfg);
void locks_free(struct locks *lt);
void locks_get_stats(const struct locks *lt, struct locks_stats *out);

/* Store hooks (see store.h), arg is the struct locks. */
void locks_store_up(void *arg);
void locks_store_down(void *arg);
void locks_store_released(void *arg, const char *key, size_t keylen);
/* writer: the remote waiter asks for an exclusive hold; stamp > 0: its
 * mark's (store_wmark), else 0. */
void locks_store_wanted(void *arg, const char *key, size_t keylen,
    int writer, long long stamp);
void locks_store_subscribed(void *arg);
/* A release elsewhere granted key to this broker's recorded waiter wid
 * (store.h's granted hook; remote.c). */
void locks_store_granted(void *arg, const char *key, size_t keylen,
    unsigned long long wid, const char *owner, size_t ownerlen,
    long long token, long long grant_ms);
/* A watched key's holders or value changed elsewhere (store.h). */
void locks_store_changed(void *arg, const char *key, size_t keylen);
/* WANTED notices (marks.c): another broker's queue for key (store.h's
 * queue hook), a holder's ask for such reports (ask), a waiter of
 * broker from announced itself (the wanted hook's, any kind). */
void locks_store_queue(void *arg, const char *from, const char *key,
    size_t keylen, unsigned waiters, long oldest_ms);
void locks_store_ask(void *arg, const char *key, size_t keylen, int to_me);
void locks_store_waiter_heard(void *arg, const char *from, const char *key,
    size_t keylen);
void locks_store_rerouted(void *arg);
/*
 * FREE (the admin view, on any broker: the store's freed hook): Redis no
 * longer has any hold of key with a token up to token.  Each such hold of
 * a session here is lost now (EVENT LOST, ERR LOST on its next RELEASE or
 * RENEW, gone from HELD and from a grace record), and the waiters here try
 * at once.  Returns how many holds ended.
 */
size_t locks_store_freed(void *arg, const char *key, size_t keylen,
    long long token);
/* Clean-ups (releases, forgets, early hand-offs to bring into Redis)
 * waiting for Redis to answer again. */
size_t locks_pending(const struct locks *lt);

/* id: the owner its holds carry in Redis (clientid.h, OWNER_MAX). */
struct lclient *locks_client_new(struct locks *lt, const char *id,
    const struct lk_client_ops *ops, void *arg);
/*
 * A waiter of owner's (ASYNC waits): a client of its own, so the owner
 * may wait for many keys at once and go on with other requests
 * meanwhile.  Its ACQUIRE waits and is answered through ops as any
 * client's, but what it is granted is owner's hold: owner renews,
 * releases and lists it, owner's ops hear of its record and its loss.
 * It holds nothing itself; locks_client_free withdraws its wait (a grant
 * in flight is given back: released in Redis, held by nobody).  owner
 * must outlive it.
 */
struct lclient *locks_waiter_new(struct lclient *owner,
    const struct lk_client_ops *ops, void *arg);
/* The session is gone: release what it holds, drop what it waits for.
 * A hold taken with a lock delay (ACQUIRE ... DELAY) is kept taken in
 * Redis for that delay (a lingering release), unless the session ended
 * cleanly: locks_client_clean first (QUIT, KILL, the broker stopping). */
void locks_client_free(struct lclient *cl);
void locks_client_clean(struct lclient *cl);
/* on: cl hears of waiters for what it holds (ops->wanted). */
void locks_client_notices(struct lclient *cl, int on);
/*
 * The client will send nothing more (EOF, e.g. a half-close): a waiting
 * ACQUIRE is answered BUSY now (or by its attempt in flight, if it is not
 * granted), and later ACQUIREs are one try each.  A gone client must not
 * hold a place in a queue.
 */
void locks_client_eof(struct lclient *cl);
/*
 * Grace sessions (grace.c).  handover: cl goes to a new owner (ops, arg);
 * its request in progress is dropped, a grant on its way is freed, never
 * handed to it; with detached 1 the connection is gone but the holds stay
 * (renewed as before, and checked at once on a release message: they may
 * have been resumed elsewhere), and ops/arg get what is left to say
 * (replies of its releases in flight, lost locks).  abandon: free cl
 * and forget its holds here without touching Redis (another session owns
 * them now, or they are left in Redis for one).  adopt: cl holds key with
 * this token as Redis says (a resumed session): another local session's
 * hold of it is stale and ends as lost; -1 if that one is being released.
 * sent_us: when the call that set its TTL (ttl_ms) in Redis was sent: the
 * broker vouches for the hold until then plus its TTL, and no longer
 * without a renewal confirmed meanwhile.
 */
void locks_client_handover(struct lclient *cl, const struct lk_client_ops *ops,
    void *arg, int detached);
/* cl is a grace session's: RESUME may move its holds to another broker
 * without this one hearing of it at once, so none of them is handed on
 * before Redis confirms the release (no early hand-off). */
void locks_client_resumable(struct lclient *cl);
void locks_client_abandon(struct lclient *cl);
/*
 * cl's session was resumed elsewhere: abandon it, but release (under
 * cl's own, earlier owner) each hold the session's record may not list
 * (a grant whose record write Redis did not confirm, or refused because
 * the RESUME had come first): the RESUME did not take those over, and
 * nobody else would ever renew or free them.  Releasing one the RESUME
 * did take over is a no-op (its value carries the new generation).
 */
void locks_client_taken(struct lclient *cl);
/* The record of cl's session lists its hold of key (the write of a fresh
 * grant was confirmed): a takeover leaves that hold to the RESUME. */
void locks_recorded(struct lclient *cl, const char *key, size_t keylen);
/* The check asked for by ops->doubt found the session still cl's: the
 * holds found gone meanwhile were lost (told and counted now). */
void locks_doubt_settled(struct lclient *cl);
/* value (valuelen 0: none): the exclusive hold's value, which Redis kept
 * and the hold keeps fresh from now on. */
int locks_adopt(struct lclient *cl, const char *key, size_t keylen,
    long kind, long long token, unsigned holds, long ttl_ms, int64_t sent_us,
    const char *value, size_t valuelen, long delay_ms);
/* Visit cl's holds with their counts, TTLs, kinds and lock delays. */
void locks_holds(const struct lclient *cl, void (*fn)(void *arg,
    const char *key, size_t keylen, unsigned holds, long ttl_ms, long kind,
    long delay_ms), void *arg);

/* kind: LK_EXCLUSIVE, LK_SHARED or n permits; wait_ms < 0: none given
 * (one try); ttl_ms <= 0: the default. */
void locks_acquire(struct lclient *cl, const char *key, size_t keylen,
    long kind, long wait_ms, long ttl_ms);
/*
 * The same with a value (ACQUIRE ... VALUE, protocol 1.2; exclusive only;
 * 1..LK_VALUE_MAX printable bytes, checked by the parser; valuelen 0:
 * none): written in Redis by the grant's own script call, whenever and
 * however the grant comes (at once, after a wait, handed over).  A
 * reentrant ACQUIRE with a value replaces the hold's and is answered OK
 * (the same token) once Redis holds it: LK_LOST, LK_UNAVAILABLE else.
 * delay_ms (exclusive; < 0: none given): the hold's lock delay, kept
 * taken that long after its session ends without a clean end (see
 * locks_client_free); a reentrant ACQUIRE with one sets the hold's.
 */
#define LK_VALUE_MAX 256
void locks_acquire_value(struct lclient *cl, const char *key, size_t keylen,
    long kind, long wait_ms, long ttl_ms, const char *value, size_t valuelen,
    long delay_ms);
/*
 * ACQUIRE ALL (protocol 1.2): exclusive holds of n distinct keys
 * (LK_ALL_MIN..LK_ALL_MAX), granted together or none, answered once:
 * LK_OK with ntokens tokens; LK_BUSY (a key held: at once without a wait,
 * or when it ran out); LK_BADARG (a key this session holds, or redis_
 * replica_acks set); LK_KIND (a key of another kind: index, n); LK_LIMIT
 * (the n keys would pass max_locks_per_session, or the counter); as
 * ACQUIRE otherwise.  While it waits it holds nothing (no deadlock with
 * requests that name keys in another order); it is tried when every key
 * is free as far as this broker knows, FIFO among such waits, and after
 * LK_ALL_PATIENCE_MS later single-key requests here stop taking its keys.
 */
#define LK_ALL_MIN 2
#define LK_ALL_MAX 64
#define LK_ALL_PATIENCE_MS 1000
void locks_acquire_all(struct lclient *cl, const char *const *keys,
    const size_t *keylens, size_t n, long wait_ms, long ttl_ms);

/* linger_ms > 0: the last hold leaves the key taken that long (LINGER). */
void locks_release(struct lclient *cl, const char *key, size_t keylen,
    long linger_ms);
void locks_renew(struct lclient *cl, const char *key, size_t keylen,
    long ttl_ms);
/* CHECK: is token's hold of key alive in Redis (any broker, any kind)?
 * Answered LK_OK with kind 1 (current) or 0 (stale; n the current
 * token, 0 when free), or LK_UNAVAILABLE. */
void locks_check(struct lclient *cl, const char *key, size_t keylen,
    long long token);
/*
 * SETIF, DELIF: write datakey (the app's own Redis name) only if token's
 * hold of key is alive in Redis (any broker, any kind), in one Redis call:
 * value (valuelen 0: delete datakey) with TTL ttl_ms (0: none, as SET;
 * LK_KEEPTTL: the TTL datakey has).  Replies LK_OK (written, or deleted
 * or absent already), LK_NOTHELD (the hold is not alive: nothing
 * written) or LK_UNAVAILABLE.
 */
#define LK_KEEPTTL (-1L)
void locks_fenced(struct lclient *cl, const char *key, size_t keylen,
    long long token, const char *datakey, size_t datakeylen,
    const char *value, size_t valuelen, long ttl_ms);
void locks_owner(struct lclient *cl, const char *key, size_t keylen);
/* PROCLAIM: replace the value of cl's exclusive hold of key (text,
 * 1..256 printable bytes, checked by the parser).  Replies LK_OK,
 * LK_NOTHELD, LK_LOST or LK_UNAVAILABLE. */
void locks_proclaim(struct lclient *cl, const char *key, size_t keylen,
    const char *text, size_t textlen);
/* OWNER <key> VALUE: the same, with an exclusive holder's value. */
void locks_owner_value(struct lclient *cl, const char *key, size_t keylen);

/*
 * WATCH (protocol 1.2): a key's holders, told to a watcher as they change.
 * Each watched key has one entry per broker, however many watch it, and
 * one Redis read in flight at a time: it is read when a watcher comes,
 * when any broker changes its holders or value (pub/sub: a release, or
 * "held" while the key's watch mark exists, which the entry keeps set),
 * when a holder's TTL would run out, and after Redis or pub/sub was away.
 * Each watcher is told the state a read found when it differs from the
 * last it was told, never an exclusive holder with a lower token than one
 * it was told (a failover that lost writes), and first the current state.
 */
enum lk_key_kind { LK_KEY_FREE, LK_KEY_EXCLUSIVE, LK_KEY_SHARED,
    LK_KEY_SEMAPHORE };
struct lk_key_state {
	enum lk_key_kind kind;
	const char *owner;		/* exclusive: client-id */
	size_t ownerlen;
	long long token;		/* exclusive */
	const char *value;		/* exclusive: its value (NULL none) */
	size_t valuelen;
	size_t holders;			/* shared, semaphore: how many */
	long limit;			/* semaphore: permits */
};
struct lk_watch;
struct lk_watch_ops {
	/* key's state (valid during the call).  Returns 1 when told, 0 when
	 * the watcher cannot take it now (its client is not reading):
	 * locks_watch_flush tells it the state of then. */
	int (*state)(void *arg, const char *key, size_t keylen,
	    const struct lk_key_state *s);
};
struct lk_watch *locks_watch(struct locks *lt, const char *key,
    size_t keylen, const struct lk_watch_ops *ops, void *arg);
/* WATCH of a key watched already: tell the current state again (after a
 * read, as for a new watcher). */
void locks_watch_again(struct lk_watch *w);
/* Tell w the key's state now if it was not taken (ops->state said 0).
 * Returns 0 when w still owes it (not taken again). */
int locks_watch_flush(struct lk_watch *w);
void locks_unwatch(struct lk_watch *w);
/* Keys watched on this broker (entries), and reads sent. */
size_t locks_watched_keys(const struct locks *lt);

/* The token of cl's hold of key, 0 when it holds none. */
long long locks_token_of(const struct lclient *cl, const char *key,
    size_t keylen);
int locks_holds_key(const struct lclient *cl, const char *key, size_t keylen);

/* The admin view (LOCKS): this broker's waiters for key now, blocking
 * and ASYNC; the ms since the hold of key with token began here (granted,
 * or adopted by a RESUME here), -1 when no session here has it. */
size_t locks_waiting(struct locks *lt, const char *key, size_t keylen);
long long locks_hold_age(struct locks *lt, const char *key,
    size_t keylen, long long token);

/* Visit the keys cl holds, in acquisition order; returns the count. */
size_t locks_held(const struct lclient *cl,
    void (*fn)(void *arg, const char *key, size_t keylen), void *arg);

#endif
