/*
 * store.h - the broker's Redis: the only user of hiredis.
 *
 * A command connection per master (the Lua scripts, pipelined for every
 * session: one master, or in cluster mode one per master of the slot
 * map, each script routed by its key's slot) and one connection
 * subscribed to <prefix>:released.  All reconnect by themselves with
 * capped exponential backoff.  Callers speak in lock terms (acquire,
 * release, renew, owner) and never see a reply object.
 *
 * Contract: each store_* request returns -1 at once when the command
 * connection its key goes to is not up (store_key_up; the callback is
 * then never called), else 0 and its callback runs exactly once, later,
 * with ok = 0 when Redis could not answer (connection lost, reply
 * timeout, error reply).  Cluster redirections are followed inside.
 */
#ifndef LOCKBROKER_STORE_H
#define LOCKBROKER_STORE_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct histo;
struct store;

struct store_cfg {
	const char *addr;		/* host:port or unix:/path */
	const char *password;		/* "" = no AUTH */
	const char *user;		/* "" = default user */
	const char *prefix;
	long timeout_ms;		/* connect / reply timeout */
	/* Host names (resolve.h): "" asks resolv.conf's nameservers, else
	 * this "ip[:port]" only; an up connection's name is looked up again
	 * every resolve_ms (0: only when connecting). */
	const char *nameserver;
	long resolve_ms;
	const char *id;			/* this broker's id: STORE_ID_LEN bytes */
	/* Sentinel mode when sentinels is non-empty (addr is then only a
	 * name for logs). */
	const char *sentinels;		/* "ip:port,..." */
	const char *master_name;
	const char *sentinel_password;
	const char *sentinel_user;
	long lease_ms;			/* sentinel_lease_ms (lease.h) */
	/* Cluster mode when cluster is non-empty: seed nodes "ip:port,...". */
	const char *cluster;
	long lock_delay_ms;		/* tenure.lua: after a new tenure */
	long acks;			/* replicas a grant must reach (WAIT) */
	long ack_timeout_ms;
};

#define STORE_ID_LEN 36

struct store_hooks {
	void (*up)(void *arg);		/* a command connection ready */
	void (*down)(void *arg);	/* a command connection lost, or an
					 * attempt to make one failed */
	/* A lock was released somewhere (pub/sub). */
	void (*released)(void *arg, const char *key, size_t keylen);
	/* The holders or the value of a watched key changed somewhere
	 * (pub/sub "held <key>": a grant, a hand-off, a new value; only
	 * while the key's watch mark exists, store_watch). */
	void (*changed)(void *arg, const char *key, size_t keylen);
	/* A client of another broker waits for a key (pub/sub); writer: to
	 * hold it exclusive ("<broker-id> <key>"; a reader's or a permit
	 * waiter's is "<broker-id>+<key>", which brokers older than shared
	 * locks read as any waiter's); stamp > 0: a writer's mark was made
	 * with this stamp ("<broker-id>!<stamp> <key>", store_wmark; brokers
	 * older than writer marks find no such key and ignore it), else 0. */
	void (*wanted)(void *arg, const char *key, size_t keylen, int writer,
	    long long stamp, const char *from);
	/* WANTED notices (store_queue_report, store_queue_ask) of another
	 * broker (from: its id, STORE_ID_LEN bytes): its waiters for key
	 * and the oldest one's wait; a holder's request for such reports. */
	void (*queue)(void *arg, const char *from, const char *key,
	    size_t keylen, unsigned waiters, long oldest_ms);
	void (*ask)(void *arg, const char *key, size_t keylen, int to_me);
	/* The subscriber is (re)subscribed: messages may have been missed. */
	void (*subscribed)(void *arg);
	/* Cluster mode: the slot map changed, keys may live elsewhere now
	 * (a master reachable again for some). */
	void (*rerouted)(void *arg);
	/*
	 * The admin words (protocol 1.2), on the release channel (each may
	 * be NULL).  freed: FREE ended every hold of key on Redis, the
	 * greatest token among them token (store_free).  kill: a broker
	 * asks whoever has session cid to end it (store_kill_ask); request
	 * names the asker, for store_kill_told.  killed: the session of a
	 * request made by broker (its id, STORE_ID_LEN bytes) with number
	 * seq was ended by its owner.
	 */
	void (*freed)(void *arg, const char *key, size_t keylen,
	    long long token);
	void (*kill)(void *arg, const char *cid, size_t cidlen,
	    const char *request, size_t requestlen);
	void (*killed)(void *arg, const char *broker, size_t brokerlen,
	    unsigned long long seq);
	/* A release elsewhere granted key to this broker's waiter recorded
	 * with store_rwait (its channel "<prefix>:granted:<broker-id>"; wait-id
	 * wid, owner, TTL at most
	 * STORE_REMOTE_GRANT_MS in Redis until renewed), at grant_ms (Unix
	 * ms by Redis's clock): the grant's token.  Deliver it and renew it
	 * at once, or release it at once. */
	void (*granted)(void *arg, const char *key, size_t keylen,
	    unsigned long long wid, const char *owner, size_t ownerlen,
	    long long token, long long grant_ms);
	void *arg;
};

/*
 * A key's kind, as an acquire asks for it and Redis stores it (shared
 * locks and semaphores):
 * STORE_EXCLUSIVE a lock held by one (a string "<client-id>:<token>");
 * 0 a lock held shared, by any number of readers; n > 0 a semaphore of n
 * permits.  Shared locks and semaphores are one sorted set per key, a
 * member "<client-id>:<token>" per holder scored by its expiry.
 */
#define STORE_EXCLUSIVE (-1L)

/* granted 1: n is the token; 0: held by another, n is the holder's PTTL
 * (-1: no expiry); 2: free, but a lock delay runs n ms more (a new master
 * tenure); 3: the key is of another kind than asked (n: 0 a lock, shared
 * or exclusive; > 0 a semaphore of n permits), nothing was written;
 * -1: the fencing counter is exhausted (2^53-1); -2: granted, but
 * WAIT did not confirm it reached the replicas, so it was undone (or the
 * undo failed: the caller frees such a grant by owner, to be sure).  For a
 * handoff, -1 and -2 mean the release happened and the grant did not.
 * STORE_RECORD_GRANTED (an exclusive attempt with will_wait
 * STORE_WAIT_RECORDED): a release granted the key to the waiter's record,
 * its message is on the way (store_hooks.granted), n: the grant's PTTL;
 * nothing was written.
 * more (granted 1 only): tokens n+1 .. n+more were set aside with it for
 * this broker's next holders of the key (store_pass); 0 none. */
#define STORE_RECORD_GRANTED 4
typedef void store_acquire_fn(void *arg, int ok, int granted, long long n,
    long more);
/*
 * What Redis showed of a hold a call looked for (renew, reassert,
 * release): STORE_DONE the call did what it was for; STORE_GONE the key no
 * longer showed the hold, nor anyone's (it expired, or was deleted);
 * STORE_TAKEN another holds the key; STORE_SET_AGAIN (reassert only)
 * absent, and set again during a lock delay; STORE_UNKNOWN no answer for
 * it (cluster mode: its master did not answer, the others did).
 */
#define STORE_DONE 1
#define STORE_GONE 0
#define STORE_SET_AGAIN 2
#define STORE_TAKEN 3
#define STORE_UNKNOWN (-1)
/* released: STORE_DONE, STORE_GONE or STORE_TAKEN (forget and linger
 * answer STORE_DONE or STORE_GONE). */
typedef void store_release_fn(void *arg, int ok, int released);
/* renewed[i]: STORE_DONE (renewed), STORE_SET_AGAIN, STORE_GONE,
 * STORE_TAKEN or STORE_UNKNOWN, as above. */
typedef void store_renew_fn(void *arg, int ok, const int *renewed, size_t n);
/*
 * A holder as OWNER shows it: its client-id and token, with owner "?"
 * (token 0) for a value no broker wrote (foreign bytes are never passed
 * on), and the ms its hold has left (-1: no expiry).
 */
struct store_holder {
	const char *owner;
	size_t ownerlen;
	long long token;
	long long pttl;
	const char *value;		/* store_owner_value, exclusive: the
					 * hold's value (NULL: none) */
	size_t valuelen;
};
#define STORE_OWNER_SHOWN 16		/* most holders OWNER lists */
#define STORE_VALUE_MAX 256		/* longest value of a hold (VALUE) */
/*
 * kind: STORE_EXCLUSIVE, 0 (shared) or the permits (see above); h: n
 * holders (n 0: free), soonest to expire first, at most STORE_OWNER_SHOWN
 * of total.  Valid during the call only.
 */
typedef void store_owner_fn(void *arg, int ok, long kind,
    const struct store_holder *h, size_t n, size_t total);
/* check.lua's answer: current 1 when a live hold of the key has the
 * token; else the current token (the exclusive holder's, the newest live
 * one of a shared lock or semaphore), 0 when the key is free. */
typedef void store_check_fn(void *arg, int ok, int current,
    long long token);

/*
 * A session record's answer (session.lua): status, then the rest of the
 * reply as strings (integers written out), valid during the call only.
 */
struct store_str {
	const char *p;
	size_t len;
};
typedef void store_session_fn(void *arg, int ok, long long status,
    const struct store_str *rest, size_t n);

/* A hold, as Redis stores it: the store alone knows the value format
 * ("<client-id>:<token>"); callers speak owners and tokens. */
struct store_renew_item {
	const char *key;
	size_t keylen;
	const char *owner;		/* client-id */
	size_t ownerlen;
	long long token;
	long ttl_ms;
	long kind;			/* STORE_EXCLUSIVE, 0 shared, n permits */
};

#define STORE_RENEW_BATCH 256		/* most keys in one renew call */
/*
 * Most script calls in flight on the command connection; more wait in a
 * queue.  One connection with ~256 in flight already reaches Redis's own
 * ceiling (docs/HIREDIS.md); past it only latency and memory grow.
 */
#define STORE_MAX_INFLIGHT 256

struct store *store_new(struct event_base *base, const struct store_cfg *cfg,
    const struct store_hooks *hooks);
/* Drop both connections (pending callbacks run with ok = 0) and free. */
void store_free(struct store *st);
/* The store serves: some command connection is up (cluster: the slot map
 * is known too), and in Sentinel mode the lease is held (lease.h).  Grants
 * and renewals go out only then; store_acquire, store_handoff,
 * store_pass, store_renew and store_takeover return -1 otherwise. */
int store_is_up(const struct store *st);
/* Some command connection is up, lease or not: clean-ups (releases,
 * forgets) may be sent. */
int store_link_up(const struct store *st);
/* The command connection key's script would go to is up (and, Sentinel
 * mode, the lease is held). */
int store_key_up(const struct store *st, const char *key, size_t keylen);
/*
 * key's connection is not up but being made (the broker starts, or
 * reconnects; topo.h's coming): the ms a request may wait for it
 * (redis_timeout_ms), else 0.  store_owner and store_check then wait for
 * it (failed if the attempt fails, or after that long); other calls
 * return -1 as while it is down.
 */
long store_key_coming(const struct store *st, const char *key,
    size_t keylen);
/* Sentinel mode: ms the lease has left (0: none); -1 in other modes. */
long long store_lease_ms(const struct store *st);
/* Shutting down: if the command connection waits out a backoff, try to
 * reconnect now, with the shortest backoff after. */
void store_kick(struct store *st);
size_t store_inflight(const struct store *st);
uint64_t store_reconnects(const struct store *st);
/* The master the command connection is up on ("ip:port"), or "-". */
const char *store_master(const struct store *st);
/* Master tenures (replication ids) seen, the first connection included. */
uint64_t store_tenures(const struct store *st);
/* Grants undone because WAIT did not confirm them. */
uint64_t store_acks_missed(const struct store *st);
/* Masters with a command connection up. */
unsigned store_nodes_up(const struct store *st);
/* Cluster mode: MOVED and ASK replies followed; slot map changes. */
uint64_t store_redirects(const struct store *st);
uint64_t store_map_changes(const struct store *st);
/* Visit every master node: "ip:port", connection up, in flight + queued,
 * redirections it sent, its script calls' round trips (a batch is one;
 * since its link last came up at a new address).  For /metrics and
 * STATS. */
void store_each_node(const struct store *st, void (*fn)(void *arg,
    const char *addr, int up, size_t inflight, uint64_t redirects,
    const struct histo *rtt), void *arg);

/* will_wait: a BUSY answer makes the script announce the wait (wanted);
 * STORE_WAIT_RECORDED: so does it, and the waiter is recorded
 * (store_rwait): a value of the owner's own that lives no longer than a
 * remote grant is that grant, answered STORE_RECORD_GRANTED, not taken
 * anew.
 * text (exclusive only; textlen 0: none): the hold's value (ACQUIRE ...
 * VALUE), written in the grant's own call (acquire.lua).  Every grant
 * tells the key's watchers while its watch mark exists.
 * kind: STORE_EXCLUSIVE (acquire.lua), else shared or a permit
 * (sacquire.lua).  reserve: tokens to set aside after an exclusive grant
 * (at most STORE_RESERVE_MAX; none with redis_replica_acks: more is 0).
 * seen (shared only): the waiting writers of other brokers the reader
 * came after, which it does not overtake: -1 those marked before this
 * call, 0 none, else those whose marks' stamps are not later (see
 * store_wmark); a shared attempt not granted (granted 0) answers in more
 * the latest stamp of the marks it saw (0 none), for its next tries. */
#define STORE_RESERVE_MAX 32	/* scripts/lib/holders.lua's cap */
#define STORE_WAIT_RECORDED 2
int store_acquire(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long kind, long ttl_ms, int will_wait,
    long reserve, long long seen, const char *text, size_t textlen,
    store_acquire_fn *fn, void *arg);
/*
 * ACQUIRE ALL (protocol 1.2): exclusive holds of n keys (2..STORE_ALL_MAX)
 * for owner, granted together or none (acquire_all.lua, one call per
 * slot: in cluster mode the slots are taken in slot order, and when a
 * later one is busy the earlier ones are given back before the answer).
 * What the callback gets (valid during the call only):
 *   granted 1   tokens[0..n): each key's new token, in the keys' order;
 *   granted 0   held elsewhere: busy[0..nbusy) the indexes of the keys
 *               found held, pttl[] their PTTLs (-1 no expiry);
 *   granted 2   every key free, but a lock delay runs ms more;
 *   granted 3   key index is of another kind (kind 0 shared, n permits);
 *   granted -1  the fencing counter has no n tokens left.
 */
#define STORE_ALL_MAX 64
struct store_all_result {
	int granted;
	const long long *tokens;
	size_t n;
	const size_t *busy;
	const long long *pttl;
	size_t nbusy;
	long long ms;
	size_t index;
	long kind;
};
typedef void store_all_fn(void *arg, int ok, const struct store_all_result *r);
int store_acquire_all(struct store *st, const char *const *keys,
    const size_t *keylens, size_t n, const char *owner, size_t ownerlen,
    long ttl_ms, int will_wait, store_all_fn *fn, void *arg);

/*
 * The mark of an exclusive waiter (owner) on key, which readers on other
 * brokers do not overtake (wmark.lua): STORE_WMARK_WAIT makes it (its
 * stamp: Redis's time now, announced to the other brokers, which hear it
 * through the wanted hook) or refreshes it, for ttl_ms; STORE_WMARK_GRANTED
 * and STORE_WMARK_GAVE_UP remove it, the latter waking waiters elsewhere.
 * The callback's released is not used.
 */
enum { STORE_WMARK_WAIT, STORE_WMARK_GRANTED, STORE_WMARK_GAVE_UP };
int store_wmark(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, int op, long ttl_ms,
    store_release_fn *fn, void *arg);
/*
 * WANTED notices (EVENTS ON WANTED), on the key's wanted channel
 * (notice.lua): store_queue_report tells the other brokers how many
 * waiters this one has for key and how long the oldest has waited (they
 * hear it through the queue hook); store_queue_ask asks the brokers with
 * waiters for key to report (the ask hook), for a holder here that wants
 * notices: to, a broker's id (STORE_ID_LEN bytes), asks that one only,
 * which answers even with no waiter; NULL asks every broker.  Fire and
 * forget.
 */
int store_queue_report(struct store *st, const char *key, size_t keylen,
    unsigned waiters, long oldest_ms);
int store_queue_ask(struct store *st, const char *key, size_t keylen,
    const char *to);
/*
 * Release owner's hold (token) and give the key to next_owner in one call
 * (an exclusive lock to an exclusive waiter, a permit to a waiter for one):
 * the callback gets granted = 1 and the new token, or granted = 0 when the
 * releasing hold was already lost (the key is then left alone).  text:
 * the next owner's value, as store_acquire's; had_value: the releasing
 * hold has one, which goes.
 */
int store_handoff(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token,
    const char *next_owner, size_t next_ownerlen, long ttl_ms, long reserve,
    const char *text, size_t textlen, int had_value, store_acquire_fn *fn,
    void *arg);
/*
 * A local hand-off made already (early hand-off): the key went, without
 * asking Redis, from prev_owner's hold (prev_token) to owner with token (a
 * token set aside with an earlier grant), told OK at once.  pass.lua puts
 * it in Redis: passed STORE_DONE when Redis showed the releasing hold (or
 * the new one: the call run again) and now shows the new one, TTL ttl_ms
 * from now; STORE_GONE or STORE_TAKEN when it showed nothing, or another's
 * (the key was lost; nothing written).  text: the new holder's value, as
 * store_acquire's, written with it.
 */
typedef void store_pass_fn(void *arg, int ok, int passed);
int store_pass(struct store *st, const char *key, size_t keylen,
    const char *prev_owner, size_t prev_ownerlen, long long prev_token,
    const char *owner, size_t ownerlen, long long token, long ttl_ms,
    const char *text, size_t textlen, int had_value, store_pass_fn *fn,
    void *arg);
/* Free key if Redis still shows owner's hold with token, and its value
 * with it when it has one (had_value; forget always looks: release.lua,
 * forget.lua).  Sent whether or not the Sentinel lease is held. */
int store_release(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, int had_value,
    store_release_fn *fn, void *arg);
/* Free key if Redis shows it held by owner (any token): for acquires
 * whose reply was lost with a connection.  released: STORE_DONE when
 * freed. */
int store_forget(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, store_release_fn *fn, void *arg);
/*
 * Remote grants (rwait.c, scripts/rwait.lua): record (record 1) a waiter
 * of this broker for key (wait-id wid, unique here; the TTL it asks, its
 * owner, its value or NULL, 0: written with the grant) so that a release
 * elsewhere grants it the key in the release's own call, FIFO by first
 * record; or forget it (record 0, with the same words) when its wait
 * ends otherwise.  keep_ms: how long the record must last at least.
 * released: STORE_DONE recorded (forgotten); STORE_GONE not recorded (the
 * key is free, or not held exclusive by another: try it again).  -1 (not
 * sent) in cluster mode, with redis_replica_acks, or for an owner that
 * cannot be a record's word.
 */
#define STORE_OWNER_MAX 64
#define STORE_REMOTE_GRANT_MS 2000	/* lib/holders.lua REMOTE_GRANT_MS */
/*
 * The master's clock now (Unix ms), never behind it by more than the
 * clocks' drift: from this broker's last announce (every second) to that
 * master, counted from when the call was made.  -1 with no sample of the
 * current master in the last seconds (a new master, Redis unreachable),
 * and in cluster mode.  What a remote grant's age is measured with.
 */
int store_redis_now(struct store *st, int64_t *ms);
int store_rwait(struct store *st, const char *key, size_t keylen, int record,
    unsigned long long wid, long ttl_ms, const char *owner,
    size_t ownerlen, const char *value, size_t valuelen, long keep_ms,
    store_release_fn *fn, void *arg);
/* reassert: on a new connection, also set again keys found absent while
 * a lock delay runs (reassert.lua). */
int store_renew(struct store *st, const struct store_renew_item *items,
    size_t n, int reassert, store_renew_fn *fn, void *arg);
int store_owner(struct store *st, const char *key, size_t keylen,
    store_owner_fn *fn, void *arg);
/*
 * Write the value of owner's exclusive hold (token) of key (PROCLAIM), or
 * refresh its TTL to the lock's (renewals): value.lua.  released:
 * STORE_DONE written, STORE_GONE the key is free, STORE_TAKEN another
 * holds it (nothing written then).
 */
int store_value(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, const char *text,
    size_t textlen, store_release_fn *fn, void *arg);
/* The same, and an exclusive holder's value (VALUE, PROCLAIM) in h. */
int store_owner_value(struct store *st, const char *key, size_t keylen,
    store_owner_fn *fn, void *arg);
/*
 * WATCH: the key's holders, as store_owner_value reads them, and its watch
 * mark set (or kept) for mark_ms, so that every script that changes the
 * key's holders or value tells it (the changed hook) until then; mark_ms
 * 0 reads only.
 */
int store_watch(struct store *st, const char *key, size_t keylen,
    long mark_ms, store_owner_fn *fn, void *arg);
/* Is token's hold of key alive in Redis now (CHECK)?  Read only. */
int store_check(struct store *st, const char *key, size_t keylen,
    long long token, store_check_fn *fn, void *arg);
/*
 * A fenced write (SETIF, DELIF): set datakey to value (valuelen 0: delete
 * datakey) only if token's hold of key is alive in Redis, as store_check
 * reads it, in one call (setif.lua, delif.lua): no grant, expiry or
 * release falls between the check and the write.  datakey is the app's
 * own name, no prefix; in cluster mode it must be in the lock key's slot
 * (store_same_slot).  ttl_ms: the data key's TTL, 0 none (as SET),
 * STORE_KEEPTTL the one it has.  released: STORE_DONE written (deleted, or
 * absent already), STORE_GONE the hold is not alive (nothing written).
 * Sent only while grants may be (the Sentinel lease): a write to a master
 * the sentinels no longer vouch for may be lost with it.
 */
#define STORE_KEEPTTL (-1L)
int store_fenced(struct store *st, const char *key, size_t keylen,
    long long token, const char *datakey, size_t datakeylen,
    const char *value, size_t valuelen, long ttl_ms, store_release_fn *fn,
    void *arg);
/* Whether one script may name key's lock and datakey: always, but in
 * cluster mode only when datakey is in the lock key's slot. */
int store_same_slot(const struct store *st, const char *key, size_t keylen,
    const char *datakey, size_t datakeylen);

/*
 * RELEASE ... LINGER: end owner's hold (token) but leave the key taken
 * for linger_ms, renewed by no one.  released 1: done; 0: it was lost.
 */
int store_linger(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, long linger_ms,
    int had_value, store_release_fn *fn, void *arg);
/*
 * Grace sessions (grace.c).  store_session runs session.lua on the record
 * of client-id cid with args (ARGV); store_takeover gives generation gen
 * of session cid the hold an earlier generation had on key: granted 1
 * and the token, or 0 when the key is not the session's.
 */
int store_session(struct store *st, const char *cid, size_t cidlen,
    const struct store_str *args, size_t nargs, store_session_fn *fn,
    void *arg);
/* takeover: granted 1 and the token, or 0; text (textlen 0: none): the
 * exclusive hold's value, which goes on with it (valid during the call). */
typedef void store_takeover_fn(void *arg, int ok, int granted,
    long long token, const char *text, size_t textlen);
int store_takeover(struct store *st, const char *key, size_t keylen,
    const char *cid, size_t cidlen, unsigned long gen, long ttl_ms,
    store_takeover_fn *fn, void *arg);

/*
 * The admin view (protocol 1.2: LOCKS, KILL, FREE) and the HELLO names
 * it shows.
 *
 * store_locks: one page of the holders of every lock key whose name
 * matches glob (globlen 0: every key; an access list's syntax, checked
 * by the caller: '*', '?', '\'), read with SCAN, never KEYS: at most
 * limit holders (1..STORE_LOCKS_MAX), fewer (even none) when the page's
 * SCAN calls ran out first, from cursor ("0" or empty: the first page).
 * Cluster mode: the cursor walks every master, one after another (in the
 * order of the lowest slot each serves).  Returns STORE_BADCURSOR at
 * once for a cursor no page gave, -1 when the master to read is not up.
 * The callback gets the holders (valid during the call), each with the
 * cursor that goes on right after it, and the cursor after the last
 * ("0": no more pages).
 */
#define STORE_LOCKS_MAX 100		/* most holders in one page */
#define STORE_CURSOR_MAX 64		/* longest cursor text */
#define STORE_BADCURSOR (-2)
struct store_lock_entry {
	const char *key;		/* the lock's name */
	size_t keylen;
	long kind;			/* STORE_EXCLUSIVE, 0 shared, n permits */
	const char *owner;		/* client-id ("?": bytes no broker
					 * wrote) */
	size_t ownerlen;
	long long token;		/* 0: none readable */
	long long pttl;			/* ms left, -1 no expiry */
	long long age_ms;		/* since the grant, as its token says
					 * (a token is at least the master's
					 * clock in us at its grant) */
	const char *name;		/* the holder's HELLO name (NULL none) */
	size_t namelen;
	const char *value;		/* an exclusive hold's value (NULL) */
	size_t valuelen;
	const char *cursor;		/* the page after this holder */
};
typedef void store_locks_fn(void *arg, int ok,
    const struct store_lock_entry *e, size_t n, const char *next);
int store_locks(struct store *st, const char *glob, size_t globlen,
    const char *cursor, size_t cursorlen, size_t limit, store_locks_fn *fn,
    void *arg);
/* FREE: end every hold of key in Redis (free.lua): n holds freed (0:
 * none was held), token the greatest of theirs; every broker hears
 * "freed" (the freed hook), its own included. */
typedef void store_freed_fn(void *arg, int ok, long long n, long long token);
int store_free_key(struct store *st, const char *key, size_t keylen,
    store_freed_fn *fn, void *arg);
/*
 * KILL: ask whoever has session cid to end it (every broker's kill hook
 * hears it, this one's too): request number seq, answered through the
 * killed hook by the owner's store_kill_told with the request it heard.
 * store_kill_end: nobody answered: end the session's live grace record in
 * Redis itself (kill.lua): found 1 with its generation and the keys it
 * lists (valid during the call), which the caller frees by owner
 * (store_forget); found 0: no live record.  The callbacks of ask and told
 * get released STORE_DONE when published.
 */
int store_kill_ask(struct store *st, const char *cid, size_t cidlen,
    unsigned long long seq, store_release_fn *fn, void *arg);
int store_kill_told(struct store *st, const char *cid, size_t cidlen,
    const char *request, size_t requestlen, store_release_fn *fn, void *arg);
typedef void store_kill_fn(void *arg, int ok, int found, unsigned long gen,
    const struct store_str *keys, size_t n);
int store_kill_end(struct store *st, const char *cid, size_t cidlen,
    long tombstone_ms, store_kill_fn *fn, void *arg);
/* The HELLO name of session cid, for LOCKS on every broker (name.lua):
 * written with px ms to live, or deleted (namelen 0). */
int store_name(struct store *st, const char *cid, size_t cidlen,
    const char *name, size_t namelen, long px, store_release_fn *fn,
    void *arg);

#endif
