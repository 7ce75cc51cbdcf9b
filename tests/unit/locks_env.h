/*
 * locks_env.h - what the unit tests of the lock table (daemon/locks/)
 * share: a table on a fake store, NCL clients whose replies are recorded,
 * and the steps the tests are written in.
 *
 * The lock table is linked with fake_store.c instead of the store: every
 * Redis request it makes is queued, and the test answers it by hand
 * (granted or not, a token, a PTTL, ok = 0), so each test controls the
 * exact order of events and asserts what the table asked of Redis and
 * what it answered its clients.  These are unit tests of the broker's
 * semantics (serialization per key, FIFO waiters, wake-ups, orphans,
 * renewal, limits); the real Redis scripts are covered by
 * tests/integration.
 *
 * Each test builds its own event_base (Check forks per test) and runs it
 * only where timers matter, with event_base_loopexit bounding the run.
 * Reply callbacks record into one struct rec per client.  Immediate
 * answers arrive before the locks_* call returns, so "no reply yet" is
 * checked right after a call.
 */
#ifndef LOCKBROKER_TEST_LOCKS_ENV_H
#define LOCKBROKER_TEST_LOCKS_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "fake_store.h"
#include "locks.h"
#include "util.h"

#define NCL 5			/* clients per test */
#define HIST 32

/* What one client was told. */
struct rec {
	int nreplies;
	enum lk_status status;		/* of the last reply */
	long long n;
	int64_t at_ms;			/* when the last reply came */
	int ok_seq;			/* global order of its last LK_OK */
	int waited;			/* of the last reply: lk_result.waited */
	int64_t waited_us;		/* ... and waited_us */
	enum lk_status hist[HIST];
	int nlost;
	char lostkey[64];
	long long losttoken;
};

struct env {
	struct event_base *base;
	struct store *st;
	struct locks *lt;
	struct lclient *cl[NCL];
	struct rec rec[NCL];
};

struct held_list {
	int n;
	char keys[8][32];
};

/* Clients record what they are told (struct rec) through these. */
extern const struct lk_client_ops ops;
void on_reply(void *arg, const struct lk_result *res);
void on_lost(void *arg, const char *key, size_t keylen, long long token);
/* 36-byte client-ids, as clientid.c makes them. */
extern const char *const ids[NCL];
extern const struct locks_cfg base_cfg;

void env_start(struct env *e, const struct locks_cfg *cfg);
/* The client is gone (tests that free one early call this). */
void env_free_client(struct env *e, int i);
/*
 * Answer what is still pending with ok = 0, free every client, and check
 * that the table is empty then: an entry left behind would be a leak in
 * the daemon.
 */
void env_end(struct env *e);
/* Run the event loop for ms milliseconds. */
void run_ms(struct env *e, long ms);
void acquire(struct env *e, int c, const char *key, long wait_ms, long ttl_ms);
void release(struct env *e, int c, const char *key);
/* The oldest pending request of kind, which must exist. */
struct fake_call *take(struct env *e, enum fake_kind kind);
size_t pending(const struct env *e, enum fake_kind kind);
size_t calls(const struct env *e, enum fake_kind kind);
/* Client c acquires a free key: one attempt, granted with token. */
void hold(struct env *e, int c, const char *key, long ttl_ms, long long token);
/* "<client-id>:<token>", the value the table must store for a hold. */
const char *value_of(int c, long long token);
void held_add(void *arg, const char *key, size_t keylen);
int renew_has(const struct fake_call *fc, const char *key, const char *value,
    long ttl);
void acquire_k(struct env *e, int c, const char *key, long kind, long wait_ms);
/* Answer the oldest pending attempt, which must be client c's, of kind. */
void grant(struct env *e, int c, long kind, long long token);
/* Client c asks for key (exclusive, TTL 5000 ms) and Redis answers "held
 * elsewhere" with this PTTL: with a WAIT, c is queued, waiting for a
 * wake or for the PTTL to run out. */
void queue_waiter(struct env *e, int c, const char *key, long wait_ms,
    long long pttl);

#endif
