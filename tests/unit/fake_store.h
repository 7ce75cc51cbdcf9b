/*
 * fake_store.h - a hand-driven stand-in for daemon/store.c in unit tests.
 *
 * fake_store.c defines every function of store.h, so the lock table's
 * tests (locks_env.h) link daemon/locks/ against it instead of hiredis
 * (and test_grace.c daemon/front/grace.c, whose record calls it answers
 * the same way).  Each request is recorded (kind, key, owner or value,
 * TTL, callback and its argument) in a FIFO the test inspects; nothing is
 * answered until the test completes the call with one of the
 * fake_*_done() functions, which run the callback exactly once -- later
 * than the request, as the real store does -- and free the record.  Two
 * switches reproduce the store's failure modes: the command connection
 * down (store_is_up 0, requests -1) and requests refused while
 * store_is_up still says 1.
 */
#ifndef LOCKBROKER_FAKE_STORE_H
#define LOCKBROKER_FAKE_STORE_H

#include <stddef.h>

#include "store.h"

enum fake_kind { FAKE_ACQUIRE, FAKE_RELEASE, FAKE_RENEW, FAKE_OWNER,
    FAKE_HANDOFF, FAKE_PASS, FAKE_SESSION, FAKE_TAKEOVER, FAKE_RWAIT,
    FAKE__COUNT };
#define FAKE_ANY (-1)

struct fake_item {
	char *key;			/* NUL-terminated copies */
	size_t keylen;
	char *value;
	size_t valuelen;
	long ttl_ms;
	long kind;			/* STORE_EXCLUSIVE, 0 shared, permits */
};

struct fake_call {
	struct fake_call *next;
	enum fake_kind kind;
	/* ACQUIRE: key, value = owner, akind, ttl_ms, will_wait.  RELEASE: key,
	 * value.  OWNER: key.  RENEW: n items; key, value, ttl_ms mirror
	 * items[0].  HANDOFF: key, value (the releasing hold), next_owner = the
	 * next owner, ttl_ms (its TTL); completed with fake_acquire_done.
	 * ACQUIRE and HANDOFF: reserve, the tokens asked to be set aside.
	 * PASS: key, value (the new holder's), next_owner (the releasing
	 * hold's value), ttl_ms; completed with fake_pass_done.
	 * SESSION (session.lua): key = the client-id, args[0..nargs) its
	 * ARGV (NUL-terminated copies); completed with fake_session_done.
	 * TAKEOVER: key, value = the client-id, gen, ttl_ms; completed with
	 * fake_acquire_done (no value) or fake_takeover_done.
	 * ACQUIRE, HANDOFF, PASS: text, the new holder's VALUE (NULL none).
	 * RWAIT (with fake_store_set_records): key, value = the owner,
	 * will_wait = 1 record / 0 forget, seen = the wait id, text its
	 * value; completed with fake_release_done. */
	char *key;
	size_t keylen;
	char *value;
	size_t valuelen;
	long ttl_ms;
	long akind;			/* ACQUIRE: what it asks for */
	int will_wait;
	long reserve;
	long long seen;			/* ACQUIRE, shared: the writers it
					 * came after (store.h) */
	char *next_owner;
	size_t next_ownerlen;
	size_t n;
	struct fake_item *items;
	char **args;
	size_t nargs;
	unsigned long gen;
	char *text;
	int had_value;			/* HANDOFF, PASS: the releasing hold
					 * had a value (deleted with it) */
	union {
		store_acquire_fn *acquire;
		store_release_fn *release;
		store_renew_fn *renew;
		store_owner_fn *owner;
		store_pass_fn *pass;
		store_session_fn *session;
		store_takeover_fn *takeover;
	} fn;
	void *arg;
};

struct store *fake_store_new(void);
/* up = 0: store_is_up() says 0 and every request returns -1. */
void fake_store_set_up(struct store *st, int up);
/* While not up, store_key_coming answers ms (0: the link is down, not
 * being made). */
void fake_store_set_coming(struct store *st, long ms);
/* on = 1: store_rwait records waiters for remote grants (FAKE_RWAIT
 * calls); 0 (the default): it refuses, as in cluster mode. */
void fake_store_set_records(struct store *st, int on);
/* fail = 1: requests return -1 although store_is_up() says 1. */
void fake_store_set_fail(struct store *st, int fail);
/* A new master tenure (store_tenures one more): the next reconnect's
 * reassert finds losses of a failover. */
void fake_store_new_tenure(struct store *st);
/* Requests waiting for an answer, of one kind or FAKE_ANY. */
size_t fake_store_pending(const struct store *st, int kind);
/* Requests accepted since creation, of one kind or FAKE_ANY. */
size_t fake_store_calls(const struct store *st, int kind);
/* The i-th oldest pending request of kind (or FAKE_ANY), or NULL. */
struct fake_call *fake_store_peek(const struct store *st, int kind,
    size_t i);
/* Unlink the oldest pending request of kind, or NULL; complete it with
 * the matching fake_*_done(). */
struct fake_call *fake_store_take(struct store *st, int kind);
/* Answer every pending request with ok = 0 (the store's behaviour on
 * disconnect), after setting the store down so no new one is queued. */
void fake_store_drain(struct store *st);

/* Run the call's callback once with these results, then free the call. */
void fake_acquire_done(struct fake_call *c, int ok, int granted,
    long long n);
/* The same, with more tokens set aside after n (store.h). */
void fake_grant_done(struct fake_call *c, int ok, int granted, long long n,
    long more);
void fake_release_done(struct fake_call *c, int ok, int released);
/* A TAKEOVER's answer with the hold's value (text NULL: none). */
void fake_takeover_done(struct fake_call *c, int ok, int granted,
    long long token, const char *text);
void fake_pass_done(struct fake_call *c, int ok, int passed);
void fake_renew_done(struct fake_call *c, int ok, const int *renewed,
    size_t n);
/* An exclusive lock's owner (NULL: free). */
void fake_owner_done(struct fake_call *c, int ok, const char *owner,
    long long token,
    long long pttl);
/* session.lua's answer: status, then rest[0..n) as strings. */
void fake_session_done(struct fake_call *c, int ok, long long status,
    const char *const *rest, size_t n);
/* Free a taken call without answering it. */
void fake_call_free(struct fake_call *c);

#endif
