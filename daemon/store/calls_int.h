/*
 * calls_int.h - what the files of the store's script calls share, and
 * nothing else: a call, its route, its decoder.
 *
 * The files, lowest first (tests/layers ranks them):
 *   decode.c    each script's reply, decoded for its caller
 *   calls.c     a call's life: route it, send it (node.c), follow cluster
 *               redirections, undo a grant replicas did not take, answer
 *   requests.c  the calls of store.h: each one's keys and arguments
 */
#ifndef LOCKBROKER_CALLS_INT_H
#define LOCKBROKER_CALLS_INT_H

#include <hiredis/hiredis.h>

#include "slot.h"
#include "store_int.h"

struct event;

/*
 * A call's decoder: r NULL, tell the caller Redis could not answer (link
 * lost, reply timeout, error reply).  Returns 0 (answered), 1 (a grant
 * waiting for replica acks, can_park: parked) or -1 (r has the wrong
 * shape: nothing told).
 */
typedef int call_decode_fn(struct call *c, const redisReply *r,
    int can_park);

/*
 * locks.lua's page (the admin view), as decode_locks reads it for
 * requests.c: where the next page starts, Redis's clock, and each holder
 * with its value split into owner and token (valid during the call).
 */
struct locks_raw {
	struct store_str scan;		/* SCAN cursor to go on from ("0":
					 * the master is done) */
	struct store_str hash;		/* "" or: in that batch, after this
					 * key hash ... */
	long long token;		/* ... and this token */
	long long now_us;
	struct locks_raw_entry {
		struct store_str scan, hash, name, owner;
		long kind;
		long long token, pttl;
	} e[STORE_LOCKS_MAX];
	size_t n;
};
typedef void calls_locks_fn(void *arg, int ok, const struct locks_raw *p);
/* peek.lua: one string per key (p NULL: absent), valid during the call */
typedef void calls_peek_fn(void *arg, int ok, const struct store_str *v,
    size_t n);
/* announce.lua: <prefix>:listenall set, the master's clock (Unix ms), and
 * now_ms() when the call was made (announce.c) */
typedef void calls_announce_fn(void *arg, int ok, int listenall,
    long long redis_ms, int64_t made_ms);

/* A script call of store.h.  Owned by node.c from node_call on, then by
 * whoever its answer goes to (call_reply). */
struct call {
	struct cmd cmd;			/* what node.c sends: first */
	struct store *st;
	call_decode_fn *decode;
	union call_fn {
		store_acquire_fn *acquire;
		store_release_fn *release;
		store_renew_fn *renew;
		store_owner_fn *owner;
		store_check_fn *check;
		store_session_fn *session_rec;	/* a session record's */
		store_takeover_fn *takeover;
		store_all_fn *all;
		store_freed_fn *free;
		store_kill_fn *kill;
		calls_locks_fn *locks_page;	/* a LOCKS page */
		calls_peek_fn *peek;
		calls_announce_fn *announce;
	} fn;
	void *arg;
	size_t nrenew;
	int owner_arg;			/* argv index of the owner (grants) */
	long long token;		/* parked: the token granted */
	int slot;			/* its key's slot; -1 single mode */
	int redirects;			/* MOVED / ASK followed so far */
	long retry_ms;			/* next TRYAGAIN / CLUSTERDOWN wait */
	struct event *retry_ev;		/* that wait */
	struct call *rnext;		/* st->retrying */
};

/*
 * Where a call goes, worked out once per call: the master, the slot (-1
 * in single and Sentinel mode) and the tag that closes the slot's own
 * key and channel names, which end in "{" in cluster mode (store_new):
 * tag = "<tag>}", "" otherwise.
 */
/*
 * Where a call goes, worked out once per call: the master, the slot (-1
 * in single and Sentinel mode) and the tag that closes the slot's own
 * key and channel names, which end in "{" in cluster mode (store_new):
 * tag = "<tag>}", "" otherwise.
 */
struct route {
	struct node *node;		/* NULL: no master known */
	int slot;
	size_t taglen;
	char tag[SLOT_TAG_MAX + 2];
};

/* decode.c */
/* 1..len bytes of 0x21..0x7e: what the broker shows of Redis's bytes. */
int decode_printable(const char *p, size_t len);
int decode_owner(struct call *c, const redisReply *r, int can_park);
int decode_session(struct call *c, const redisReply *r, int can_park);
int decode_acquire(struct call *c, const redisReply *r, int can_park);
int decode_takeover(struct call *c, const redisReply *r, int can_park);
int decode_release(struct call *c, const redisReply *r, int can_park);
int decode_renew(struct call *c, const redisReply *r, int can_park);
int decode_check(struct call *c, const redisReply *r, int can_park);
int decode_all(struct call *c, const redisReply *r, int can_park);
int decode_locks(struct call *c, const redisReply *r, int can_park);
int decode_peek(struct call *c, const redisReply *r, int can_park);
int decode_announce(struct call *c, const redisReply *r, int can_park);
int decode_free(struct call *c, const redisReply *r, int can_park);
int decode_kill(struct call *c, const redisReply *r, int can_park);

/* calls.c */
/* buf: room for ":<token>" (FMT_LL_MAX + 1 bytes at least) */
int calls_value_piece(struct piece *p, const char *owner, size_t ownerlen,
    long long token, char *buf, size_t buflen);
size_t calls_side_prefix(const char *base, const struct route *r, char *buf,
    size_t buflen);
void calls_route_slot(const struct store *st, int slot, struct route *r);
void calls_route_of(const struct store *st, const char *key, size_t keylen,
    struct route *r);
int calls_may_grant(const struct store *st);
struct call *calls_new(struct store *st, const struct route *r,
    call_decode_fn *decode, enum script_id script, int nkeys,
    const struct piece *p, int np);
int calls_start(struct call *c);
int calls_script(struct store *st, const struct route *r,
    call_decode_fn *decode, enum script_id script, int nkeys,
    const struct piece *p, int np, union call_fn fn, void *arg);
int calls_grant(struct store *st, const struct route *r,
    enum script_id script, int nkeys, const struct piece *p, int np,
    int owner_arg, int tenure_arg, store_acquire_fn *fn, void *arg);

/* requests.c: the admin view's reads (pages.c pages them) */
int calls_locks(struct store *st, int slot, const char *pattern,
    size_t patlen, const char *scan, const char *hash, long long token,
    size_t limit, size_t calls, size_t count, calls_locks_fn *fn, void *arg);
int calls_peek(struct store *st, int slot, const struct store_str *keys,
    size_t n, calls_peek_fn *fn, void *arg);

#endif
