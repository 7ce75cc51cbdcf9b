/*
 * test_locks.c - the lock table of daemon/locks.c, against a fake store.
 *
 * locks.c is linked with fake_store.c instead of store.c: every Redis
 * request it makes is queued, and the test answers it by hand (granted or
 * not, a token, a PTTL, ok = 0), so each test controls the exact order of
 * events and asserts what locks.c asked of Redis and what it answered its
 * clients.  This is a unit test of the broker's semantics (serialization
 * per key, FIFO waiters, wake-ups, orphans, renewal, limits); the real
 * Redis scripts are covered by tests/integration.
 *
 * Each test builds its own event_base (Check forks per test) and runs it
 * only where timers matter, with event_base_loopexit bounding the run.
 * Reply callbacks record into one struct rec per client.  Immediate
 * answers arrive before the locks_* call returns, so "no reply yet" is
 * checked right after a call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "fake_store.h"
#include "locks.h"
#include "log.h"
#include "util.h"
#include "suites.h"

#define NCL 5			/* clients per test */
#define HIST 32

/* What one client was told. */
struct rec {
	int nreplies;
	enum lk_status status;		/* of the last reply */
	long long n;
	int64_t at_ms;			/* when the last reply came */
	int ok_seq;			/* global order of its last LK_OK */
	enum lk_status hist[HIST];
	int nlost;
	char lostkey[64];
	long long losttoken;
};

static int ok_seq;

static void
on_reply(void *arg, const struct lk_result *res)
{
	struct rec *r = arg;

	if (r->nreplies < HIST)
		r->hist[r->nreplies] = res->status;
	r->nreplies++;
	r->status = res->status;
	r->n = res->n;
	r->at_ms = now_ms();
	if (res->status == LK_OK)
		r->ok_seq = ++ok_seq;
}

static void
on_lost(void *arg, const char *key, size_t keylen, long long token)
{
	struct rec *r = arg;

	r->nlost++;
	ck_assert_uint_lt(keylen, sizeof r->lostkey);
	memcpy(r->lostkey, key, keylen);
	r->lostkey[keylen] = '\0';
	r->losttoken = token;
}

static const struct lk_client_ops ops = { on_reply, on_lost, NULL, NULL };

/* 36-byte client-ids, as clientid.c makes them. */
static const char *const ids[NCL] = {
	"aaaaaaaa-0000-4000-8000-000000000001",
	"bbbbbbbb-0000-4000-8000-000000000002",
	"cccccccc-0000-4000-8000-000000000003",
	"dddddddd-0000-4000-8000-000000000004",
	"eeeeeeee-0000-4000-8000-000000000005",
};

static const struct locks_cfg base_cfg = {
	.default_ttl_ms = 30000,
	.max_ttl_ms = 600000,
	.max_wait_ms = 60000,
	.max_locks_per_session = 1000,
	.max_waiters = 1000,
};

struct env {
	struct event_base *base;
	struct store *st;
	struct locks *lt;
	struct lclient *cl[NCL];
	struct rec rec[NCL];
};

static void
env_start(struct env *e, const struct locks_cfg *cfg)
{
	memset(e, 0, sizeof *e);
	log_set_level(LOG_ERROR);	/* lost/limit lines are expected here */
	e->base = event_base_new();
	ck_assert_ptr_nonnull(e->base);
	e->st = fake_store_new();
	e->lt = locks_new(e->base, cfg != NULL ? cfg : &base_cfg);
	locks_set_store(e->lt, e->st);
	for (int i = 0; i < NCL; i++)
		e->cl[i] = locks_client_new(e->lt, ids[i], &ops, &e->rec[i]);
}

/* The client is gone (tests that free one early call this). */
static void
env_free_client(struct env *e, int i)
{
	locks_client_free(e->cl[i]);
	e->cl[i] = NULL;
}

/*
 * Answer what is still pending with ok = 0, free every client, and check
 * that the table is empty then: an entry left behind would be a leak in
 * the daemon.
 */
static void
env_end(struct env *e)
{
	struct locks_stats s;

	fake_store_drain(e->st);
	for (int i = 0; i < NCL; i++)
		env_free_client(e, i);
	ck_assert_uint_eq(fake_store_pending(e->st, FAKE_ANY), 0);
	locks_get_stats(e->lt, &s);
	ck_assert_msg(s.keys == 0, "%zu lock entries left behind", s.keys);
	ck_assert_uint_eq(s.locks_held, 0);
	ck_assert_uint_eq(s.waiters, 0);
	locks_free(e->lt);
	store_free(e->st);
	event_base_free(e->base);
}

/* Run the event loop for ms milliseconds. */
static void
run_ms(struct env *e, long ms)
{
	struct timeval tv = { .tv_sec = ms / 1000,
	    .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

	event_base_loopexit(e->base, &tv);
	event_base_dispatch(e->base);
}

static void
acquire(struct env *e, int c, const char *key, long wait_ms, long ttl_ms)
{
	locks_acquire(e->cl[c], key, strlen(key), LK_EXCLUSIVE, wait_ms,
	    ttl_ms);
}

static void
release(struct env *e, int c, const char *key)
{
	locks_release(e->cl[c], key, strlen(key), 0);
}

/* The oldest pending request of kind, which must exist. */
static struct fake_call *
take(struct env *e, enum fake_kind kind)
{
	struct fake_call *c = fake_store_take(e->st, kind);

	ck_assert_msg(c != NULL, "no pending store request of kind %d", kind);
	return c;
}

static size_t
pending(const struct env *e, enum fake_kind kind)
{
	return fake_store_pending(e->st, kind);
}

static size_t
calls(const struct env *e, enum fake_kind kind)
{
	return fake_store_calls(e->st, kind);
}

/* Client c acquires a free key: one attempt, granted with token. */
static void
hold(struct env *e, int c, const char *key, long ttl_ms, long long token)
{
	struct fake_call *fc;
	int before = e->rec[c].nreplies;

	acquire(e, c, key, 0, ttl_ms);
	fc = take(e, FAKE_ACQUIRE);
	ck_assert_str_eq(fc->key, key);
	fake_acquire_done(fc, 1, 1, token);
	ck_assert_int_eq(e->rec[c].nreplies, before + 1);
	ck_assert_int_eq(e->rec[c].status, LK_OK);
	ck_assert_int_eq(e->rec[c].n, token);
}

/* "<client-id>:<token>", the value locks.c must store for a hold. */
static const char *
value_of(int c, long long token)
{
	static char buf[64];

	snprintf(buf, sizeof buf, "%s:%lld", ids[c], token);
	return buf;
}

struct held_list {
	int n;
	char keys[8][32];
};

static void
held_add(void *arg, const char *key, size_t keylen)
{
	struct held_list *h = arg;

	ck_assert_int_lt(h->n, 8);
	ck_assert_uint_lt(keylen, sizeof h->keys[0]);
	memcpy(h->keys[h->n], key, keylen);
	h->keys[h->n][keylen] = '\0';
	h->n++;
}

/* --- acquire and release --------------------------------------------- */

START_TEST(test_acquire_free_key)
{
	struct env e;
	struct fake_call *fc;
	struct held_list h = { 0 };

	env_start(&e, NULL);
	acquire(&e, 0, "k", 0, 5000);
	ck_assert_int_eq(e.rec[0].nreplies, 0);		/* Redis decides */
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 1);
	ck_assert_uint_eq(calls(&e, FAKE_ANY), 1);
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_str_eq(fc->key, "k");
	ck_assert_uint_eq(fc->keylen, 1);
	ck_assert_uint_eq(fc->valuelen, 36);
	ck_assert_str_eq(fc->value, ids[0]);		/* owner: client-id */
	ck_assert_int_eq(fc->ttl_ms, 5000);
	fake_acquire_done(fc, 1, 1, 42);
	ck_assert_int_eq(e.rec[0].nreplies, 1);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 42);
	ck_assert_uint_eq(locks_held(e.cl[0], held_add, &h), 1);
	ck_assert_int_eq(h.n, 1);
	ck_assert_str_eq(h.keys[0], "k");
	ck_assert_uint_eq(calls(&e, FAKE_ANY), 1);	/* nothing else */
	env_end(&e);
}
END_TEST

/* TTL 0 means the default; a TTL above max_ttl_ms is clamped. */
START_TEST(test_acquire_ttl_default_and_clamp)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	acquire(&e, 0, "a", 0, 0);
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_int_eq(fc->ttl_ms, base_cfg.default_ttl_ms);
	fake_acquire_done(fc, 1, 1, 1);
	acquire(&e, 1, "b", 0, base_cfg.max_ttl_ms + 1);
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_int_eq(fc->ttl_ms, base_cfg.max_ttl_ms);
	fake_acquire_done(fc, 1, 1, 2);
	env_end(&e);
}
END_TEST

START_TEST(test_reentrant)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, 7);
	acquire(&e, 0, "k", 0, 5000);
	ck_assert_int_eq(e.rec[0].nreplies, 2);		/* at once */
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 7);		/* same token */
	acquire(&e, 0, "k", 1000, 0);
	ck_assert_int_eq(e.rec[0].nreplies, 3);
	ck_assert_int_eq(e.rec[0].n, 7);
	ck_assert_uint_eq(calls(&e, FAKE_ANY), 1);	/* no store call */

	release(&e, 0, "k");
	ck_assert_int_eq(e.rec[0].nreplies, 4);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 2);		/* holds left */
	release(&e, 0, "k");
	ck_assert_int_eq(e.rec[0].nreplies, 5);
	ck_assert_int_eq(e.rec[0].n, 1);
	ck_assert_uint_eq(calls(&e, FAKE_ANY), 1);

	release(&e, 0, "k");				/* the last one */
	ck_assert_int_eq(e.rec[0].nreplies, 5);		/* Redis decides */
	ck_assert_uint_eq(calls(&e, FAKE_RELEASE), 1);
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->key, "k");
	ck_assert_str_eq(fc->value, value_of(0, 7));
	fake_release_done(fc, 1, 1);
	ck_assert_int_eq(e.rec[0].nreplies, 6);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 0);
	ck_assert_uint_eq(locks_held(e.cl[0], NULL, NULL), 0);
	release(&e, 0, "k");
	ck_assert_int_eq(e.rec[0].status, LK_NOTHELD);
	env_end(&e);
}
END_TEST

/*
 * Three clients want one key with a WAIT: one attempt in flight at a
 * time, the next only after the holder's release is confirmed, and the
 * grants in arrival order (0, then 2, then 1: not client order).
 */
START_TEST(test_same_key_fifo)
{
	static const int order[3] = { 0, 2, 1 };
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	for (int i = 0; i < 3; i++) {
		acquire(&e, order[i], "k", 10000, 5000);
		ck_assert_int_eq(e.rec[order[i]].nreplies, 0);
		ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 1);
	}
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 1);

	/* The first grant is an attempt; each later one a handoff: the
	 * holder's release and the next waiter's grant in one call. */
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_str_eq(fc->value, ids[order[0]]);
	fake_acquire_done(fc, 1, 1, 100);
	ck_assert_int_eq(e.rec[order[0]].status, LK_OK);
	ck_assert_int_eq(e.rec[order[0]].n, 100);
	for (int i = 0; i < 3; i++) {
		int c = order[i];

		/* The holder is local: nobody else is tried meanwhile. */
		ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);
		release(&e, c, "k");
		if (i == 2) {
			fc = take(&e, FAKE_RELEASE);
			ck_assert_str_eq(fc->value, value_of(c, 100 + i));
			fake_release_done(fc, 1, 1);
		} else {
			int next = order[i + 1];

			fc = take(&e, FAKE_HANDOFF);
			ck_assert_str_eq(fc->value, value_of(c, 100 + i));
			ck_assert_msg(strcmp(fc->next_owner, ids[next]) == 0,
			    "handoff %d to %s, want client %d", i,
			    fc->next_owner, next);
			ck_assert_int_eq(e.rec[next].nreplies, 0);
			fake_acquire_done(fc, 1, 1, 101 + i);
			ck_assert_int_eq(e.rec[next].status, LK_OK);
			ck_assert_int_eq(e.rec[next].n, 101 + i);
		}
		ck_assert_int_eq(e.rec[c].status, LK_OK);
		ck_assert_int_eq(e.rec[c].n, 0);
	}
	ck_assert_int_lt(e.rec[0].ok_seq, e.rec[2].ok_seq);
	ck_assert_int_lt(e.rec[2].ok_seq, e.rec[1].ok_seq);
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 1);
	ck_assert_uint_eq(calls(&e, FAKE_HANDOFF), 2);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	env_end(&e);
}
END_TEST

/* WAIT 0 (or none) on a key another local client holds: BUSY at once. */
START_TEST(test_wait0_busy_local)
{
	struct env e;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, 1);
	acquire(&e, 1, "k", 0, 5000);
	ck_assert_int_eq(e.rec[1].nreplies, 1);
	ck_assert_int_eq(e.rec[1].status, LK_BUSY);
	acquire(&e, 1, "k", -1, 5000);			/* no WAIT given */
	ck_assert_int_eq(e.rec[1].nreplies, 2);
	ck_assert_int_eq(e.rec[1].status, LK_BUSY);
	ck_assert_uint_eq(calls(&e, FAKE_ANY), 1);	/* no store call */
	env_end(&e);
}
END_TEST

/* One try on a key held in Redis by another broker: BUSY on the reply. */
START_TEST(test_wait0_busy_remote)
{
	struct env e;

	env_start(&e, NULL);
	acquire(&e, 0, "k", 0, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 20000);
	ck_assert_int_eq(e.rec[0].nreplies, 1);
	ck_assert_int_eq(e.rec[0].status, LK_BUSY);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	env_end(&e);
}
END_TEST

/* --- waiting on a key held elsewhere ----------------------------------- */

/* Refused with a PTTL: silent until the pub/sub wake, then one attempt. */
START_TEST(test_remote_busy_waits_for_wake)
{
	struct env e;

	env_start(&e, NULL);
	acquire(&e, 0, "k", 10000, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 20000);
	ck_assert_int_eq(e.rec[0].nreplies, 0);		/* still waiting */
	run_ms(&e, 30);
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 1);	/* no polling */

	locks_store_released(e.lt, "other", 5);		/* another key */
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 1);
	locks_store_released(e.lt, "k", 1);
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 2);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 1);
	locks_store_released(e.lt, "k", 1);		/* one in flight */
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 2);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 9);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 9);
	env_end(&e);
}
END_TEST

/* A holder that died without releasing: retried when its PTTL runs out. */
START_TEST(test_remote_busy_retry_at_pttl)
{
	struct env e;

	env_start(&e, NULL);
	acquire(&e, 0, "k", 10000, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 20);
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 1);
	run_ms(&e, 100);
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 2);	/* exactly one */
	ck_assert_int_eq(e.rec[0].nreplies, 0);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 3);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	env_end(&e);
}
END_TEST

/* WAIT 50 on a key held elsewhere: BUSY when the 50 ms are over. */
START_TEST(test_wait_deadline)
{
	struct env e;
	int64_t t0;

	env_start(&e, NULL);
	t0 = now_ms();
	acquire(&e, 0, "k", 50, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 20000);
	ck_assert_int_eq(e.rec[0].nreplies, 0);
	run_ms(&e, 200);
	ck_assert_int_eq(e.rec[0].nreplies, 1);
	ck_assert_int_eq(e.rec[0].status, LK_BUSY);
	ck_assert_msg(e.rec[0].at_ms - t0 >= 45 && e.rec[0].at_ms - t0 < 190,
	    "BUSY after %lld ms, want ~50", (long long)(e.rec[0].at_ms - t0));
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 1);
	env_end(&e);
}
END_TEST

/*
 * Lost wake-up (fixed in locks.c with the 'woken' bit): the pub/sub
 * message of a release and the reply to our attempt come on different
 * connections, so the message can be handled first: our attempt ran while
 * the other broker still held the key, the holder then released and
 * published.  Without the fix, the "not granted" reply armed the retry
 * only at the old holder's PTTL -- or never, when PTTL is -1 -- and the
 * waiter slept on a free key.  A wake during an attempt must make a
 * refused attempt retry at once.
 */
START_TEST(test_wake_during_attempt_not_lost)
{
	struct env e;

	env_start(&e, NULL);
	acquire(&e, 0, "k", 10000, 5000);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 1);
	locks_store_released(e.lt, "k", 1);		/* message first */
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 1);	/* one in flight */
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 20000);
	run_ms(&e, 50);
	ck_assert_msg(calls(&e, FAKE_ACQUIRE) == 2,
	    "the wake that came while the attempt was in flight was "
	    "lost; no new attempt until the old holder's PTTL (20 s)");
	env_end(&e);
}
END_TEST

/* --- clients that go away ----------------------------------------------- */

/* Granted after the client left: released in Redis, nobody answered. */
START_TEST(test_freed_during_attempt_orphan)
{
	struct env e;
	struct fake_call *fc;
	struct locks_stats s;

	env_start(&e, NULL);
	acquire(&e, 0, "k", 0, 5000);
	fc = take(&e, FAKE_ACQUIRE);
	env_free_client(&e, 0);
	ck_assert_uint_eq(calls(&e, FAKE_ANY), 1);	/* nothing yet */
	fake_acquire_done(fc, 1, 1, 77);
	ck_assert_int_eq(e.rec[0].nreplies, 0);
	ck_assert_uint_eq(pending(&e, FAKE_RELEASE), 1);
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->key, "k");
	ck_assert_str_eq(fc->value, value_of(0, 77));
	fake_release_done(fc, 1, 1);
	ck_assert_int_eq(e.rec[0].nreplies, 0);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.orphans, 1);
	ck_assert_uint_eq(s.keys, 0);
	env_end(&e);
}
END_TEST

/* An orphan release comes before the next local waiter's attempt. */
START_TEST(test_orphan_then_next_waiter)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	acquire(&e, 0, "k", 0, 5000);
	acquire(&e, 1, "k", 10000, 5000);
	fc = take(&e, FAKE_ACQUIRE);
	env_free_client(&e, 0);
	fake_acquire_done(fc, 1, 1, 5);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);
	fake_release_done(take(&e, FAKE_RELEASE), 1, 1);
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_str_eq(fc->value, ids[1]);
	fake_acquire_done(fc, 1, 1, 6);
	ck_assert_int_eq(e.rec[1].status, LK_OK);
	env_end(&e);
}
END_TEST

START_TEST(test_freed_while_holding_two)
{
	struct env e;
	struct fake_call *fc;
	int seen1 = 0, seen2 = 0;

	env_start(&e, NULL);
	hold(&e, 0, "k1", 5000, 11);
	hold(&e, 0, "k2", 5000, 12);
	ck_assert_uint_eq(calls(&e, FAKE_RELEASE), 0);
	env_free_client(&e, 0);
	ck_assert_uint_eq(pending(&e, FAKE_RELEASE), 2);
	while ((fc = fake_store_take(e.st, FAKE_RELEASE)) != NULL) {
		if (strcmp(fc->key, "k1") == 0) {
			ck_assert_str_eq(fc->value, value_of(0, 11));
			seen1++;
		} else {
			ck_assert_str_eq(fc->key, "k2");
			ck_assert_str_eq(fc->value, value_of(0, 12));
			seen2++;
		}
		fake_release_done(fc, 1, 1);
	}
	ck_assert_int_eq(seen1, 1);
	ck_assert_int_eq(seen2, 1);
	ck_assert_int_eq(e.rec[0].nreplies, 2);		/* the two grants */
	env_end(&e);
}
END_TEST

/* --- renewal ------------------------------------------------------------- */

static int
renew_has(const struct fake_call *fc, const char *key, const char *value,
    long ttl)
{
	for (size_t i = 0; i < fc->n; i++)
		if (strcmp(fc->items[i].key, key) == 0 &&
		    strcmp(fc->items[i].value, value) == 0 &&
		    fc->items[i].ttl_ms == ttl)
			return 1;
	return 0;
}

/* Three keys with one TTL are renewed by one store call carrying all. */
START_TEST(test_renew_batch)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	hold(&e, 0, "k1", 30, 1);
	hold(&e, 0, "k2", 30, 2);
	hold(&e, 0, "k3", 30, 3);
	ck_assert_uint_eq(calls(&e, FAKE_RENEW), 0);	/* not at once */
	run_ms(&e, 15);
	ck_assert_uint_ge(calls(&e, FAKE_RENEW), 1);
	for (size_t i = 0; (fc = fake_store_peek(e.st, FAKE_RENEW, i)); i++) {
		ck_assert_uint_eq(fc->n, 3);
		ck_assert(renew_has(fc, "k1", value_of(0, 1), 30));
		ck_assert(renew_has(fc, "k2", value_of(0, 2), 30));
		ck_assert(renew_has(fc, "k3", value_of(0, 3), 30));
	}
	ck_assert_int_eq(e.rec[0].nlost, 0);
	env_end(&e);
}
END_TEST

/* Renewal finds a key gone: lost() once, then RELEASE says LOST, NOTHELD. */
START_TEST(test_renew_lost)
{
	struct env e;
	struct fake_call *fc;
	int renewed[3];
	struct held_list h = { 0 };

	env_start(&e, NULL);
	hold(&e, 0, "k1", 30, 1);
	hold(&e, 0, "k2", 30, 2);
	hold(&e, 0, "k3", 30, 3);
	run_ms(&e, 15);
	fc = take(&e, FAKE_RENEW);
	ck_assert_uint_eq(fc->n, 3);
	for (size_t i = 0; i < 3; i++)
		renewed[i] = strcmp(fc->items[i].key, "k2") != 0;
	fake_renew_done(fc, 1, renewed, 3);
	ck_assert_int_eq(e.rec[0].nlost, 1);
	ck_assert_str_eq(e.rec[0].lostkey, "k2");
	ck_assert_int_eq(e.rec[0].losttoken, 2);
	ck_assert_int_eq(e.rec[0].nreplies, 3);		/* no reply for it */
	ck_assert_uint_eq(locks_held(e.cl[0], held_add, &h), 2);
	ck_assert_str_eq(h.keys[0], "k1");
	ck_assert_str_eq(h.keys[1], "k3");

	release(&e, 0, "k2");
	ck_assert_int_eq(e.rec[0].nreplies, 4);
	ck_assert_int_eq(e.rec[0].status, LK_LOST);
	release(&e, 0, "k2");
	ck_assert_int_eq(e.rec[0].nreplies, 5);
	ck_assert_int_eq(e.rec[0].status, LK_NOTHELD);
	ck_assert_uint_eq(calls(&e, FAKE_RELEASE), 0);	/* never to Redis */
	env_end(&e);
}
END_TEST

/* --- jeopardy: the broker's own count of a hold's TTL -------------------- */

/* Redis away: a hold whose last confirmed renewal (from its send) plus its
 * TTL has passed is reported lost at that moment, not when Redis answers
 * again; then its key is freed in Redis first thing, by its exact value,
 * and the reassert does not set it again. */
START_TEST(test_jeopardy_tells_holder_at_once)
{
	struct env e;
	struct fake_call *fc;
	struct locks_stats s;
	int64_t t0 = now_ms();

	env_start(&e, NULL);
	hold(&e, 0, "k", 600, 7);
	hold(&e, 1, "other", 30000, 8);
	fake_store_set_up(e.st, 0);
	locks_store_down(e.lt);
	run_ms(&e, 450);
	ck_assert_int_eq(e.rec[0].nlost, 0);
	run_ms(&e, 250);
	ck_assert_int_eq(e.rec[0].nlost, 1);
	ck_assert_str_eq(e.rec[0].lostkey, "k");
	ck_assert_int_eq(e.rec[0].losttoken, 7);
	ck_assert_int_eq(e.rec[1].nlost, 0);	/* its TTL runs on */
	ck_assert_int_le(now_ms() - t0, 750);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.lost, 1);
	ck_assert_uint_eq(s.lost_by[LK_LOST_JEOPARDY], 1);
	release(&e, 0, "k");
	ck_assert_int_eq(e.rec[0].status, LK_LOST);
	fake_store_set_up(e.st, 1);
	locks_store_up(e.lt);
	fc = take(&e, FAKE_ANY);		/* the clean-up first */
	ck_assert_int_eq(fc->kind, FAKE_RELEASE);
	ck_assert_str_eq(fc->value, value_of(0, 7));
	fake_release_done(fc, 1, STORE_DONE);
	fc = take(&e, FAKE_RENEW);		/* the reassert: "other" only */
	ck_assert_uint_eq(fc->n, 1);
	ck_assert_str_eq(fc->items[0].key, "other");
	fake_renew_done(fc, 1, (const int[]){ STORE_DONE }, 1);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.releases, 0);	/* not a client's release */
	env_end(&e);
}
END_TEST

/* Renewals answered in time keep a hold alive however long it is held;
 * one renewal that never answers does not end it before the last
 * confirmed one (from its send) plus the TTL. */
START_TEST(test_jeopardy_counts_from_confirmed_send)
{
	struct env e;
	struct fake_call *fc;
	int64_t t0 = now_ms(), sent;

	env_start(&e, NULL);
	hold(&e, 0, "k", 300, 7);
	for (int i = 0; i < 4; i++) {		/* 4 x 100 ms: past a TTL */
		run_ms(&e, 110);
		fc = take(&e, FAKE_RENEW);
		fake_renew_done(fc, 1, (const int[]){ STORE_DONE }, 1);
	}
	ck_assert_int_eq(e.rec[0].nlost, 0);
	ck_assert_int_ge(now_ms() - t0, 400);
	run_ms(&e, 110);			/* renewal sent, no answer */
	fc = take(&e, FAKE_RENEW);
	sent = now_ms();
	while (e.rec[0].nlost == 0 && now_ms() - sent < 1000)
		run_ms(&e, 20);
	ck_assert_int_eq(e.rec[0].nlost, 1);
	/* the last confirmed renewal was sent a renew period (100 ms)
	 * before this one, which went out up to 110 ms before "sent" */
	ck_assert_int_ge(now_ms() - sent, 80);
	ck_assert_int_le(now_ms() - sent, 300);
	fake_renew_done(fc, 1, (const int[]){ STORE_DONE }, 1);	/* late */
	while ((fc = fake_store_take(e.st, FAKE_RENEW)) != NULL)
		fake_renew_done(fc, 1, (const int[]){ STORE_DONE }, 1);
	ck_assert_int_eq(e.rec[0].nlost, 1);
	run_ms(&e, 500);		/* its value freed, renewed or not */
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->value, value_of(0, 7));
	fake_release_done(fc, 1, STORE_DONE);
	env_end(&e);
}
END_TEST

/* Each loss is counted by its cause: gone (expired), another's (taken),
 * and what the first reassert on a new master tenure finds (failover). */
START_TEST(test_lost_causes)
{
	struct env e;
	struct fake_call *fc;
	struct locks_stats s;

	env_start(&e, NULL);
	locks_store_up(e.lt);		/* the first tenure */
	hold(&e, 0, "a", 300, 1);
	hold(&e, 0, "b", 300, 2);
	hold(&e, 1, "c", 300, 3);
	run_ms(&e, 110);
	fc = take(&e, FAKE_RENEW);
	ck_assert_uint_eq(fc->n, 3);
	fake_renew_done(fc, 1, (const int[]){ STORE_GONE, STORE_TAKEN,
	    STORE_DONE }, 3);
	ck_assert_int_eq(e.rec[0].nlost, 2);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.lost_by[LK_LOST_EXPIRED], 1);
	ck_assert_uint_eq(s.lost_by[LK_LOST_TAKEN], 1);
	/* a failover: the reassert on the new tenure finds c gone */
	fake_store_set_up(e.st, 0);
	locks_store_down(e.lt);
	fake_store_new_tenure(e.st);
	fake_store_set_up(e.st, 1);
	locks_store_up(e.lt);
	fc = take(&e, FAKE_RENEW);
	fake_renew_done(fc, 1, (const int[]){ STORE_GONE }, 1);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.lost_by[LK_LOST_FAILOVER], 1);
	ck_assert_uint_eq(s.lost, 3);
	/* a RELEASE that finds its hold taken */
	hold(&e, 2, "d", 30000, 4);
	release(&e, 2, "d");
	fake_release_done(take(&e, FAKE_RELEASE), 1, STORE_TAKEN);
	ck_assert_int_eq(e.rec[2].status, LK_LOST);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.lost_by[LK_LOST_TAKEN], 2);
	ck_assert_uint_eq(s.lost, 4);
	env_end(&e);
}
END_TEST

/* Redis refuses an attempt (OOM, BUSY: an error reply on a live
 * connection): the waiter keeps its place and tries again after a
 * backoff, until its WAIT runs out (then ERR UNAVAILABLE, not BUSY). */
START_TEST(test_refused_attempt_keeps_place)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	acquire(&e, 0, "k", 10000, 5000);
	acquire(&e, 1, "k", 10000, 5000);	/* behind 0 */
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 0, 0, 0);	/* refused */
	ck_assert_int_eq(e.rec[0].nreplies, 0);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);	/* not at once */
	run_ms(&e, 80);
	fc = take(&e, FAKE_ACQUIRE);		/* tried again: 0 first */
	ck_assert_str_eq(fc->value, ids[0]);
	fake_acquire_done(fc, 1, 1, 9);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[1].nreplies, 0);
	/* a one-try request while Redis refuses: answered at once */
	acquire(&e, 2, "j", 0, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 0, 0, 0);
	ck_assert_int_eq(e.rec[2].status, LK_UNAVAILABLE);
	/* a short WAIT that runs out while Redis refuses */
	acquire(&e, 3, "j", 150, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 0, 0, 0);
	for (int i = 0; i < 6 && e.rec[3].nreplies == 0; i++) {
		run_ms(&e, 50);
		while ((fc = fake_store_take(e.st, FAKE_ACQUIRE)) != NULL)
			fake_acquire_done(fc, 0, 0, 0);
	}
	ck_assert_int_eq(e.rec[3].nreplies, 1);
	ck_assert_int_eq(e.rec[3].status, LK_UNAVAILABLE);
	env_end(&e);
}
END_TEST

/* --- Redis down, limits -------------------------------------------------- */

/*
 * Issue 10: a failover must not cost a waiter its turn.  Waiters stay
 * queued while Redis is away (an attempt that died with the connection
 * too); when Redis is back the clean-ups go first, then the reassert of
 * held locks, then every queued waiter asks again.
 */
START_TEST(test_store_down_keeps_waiters_queued)
{
	struct env e;
	struct fake_call *inflight;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, 1);
	acquire(&e, 1, "k", 10000, 5000);		/* queued behind 0 */
	acquire(&e, 4, "k3", 10000, 5000);		/* held elsewhere */
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 20000);
	acquire(&e, 2, "k2", 10000, 5000);		/* attempt in flight */
	acquire(&e, 3, "k2", 10000, 5000);		/* queued behind 2 */
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 1);
	inflight = fake_store_peek(e.st, FAKE_ACQUIRE, 0);
	ck_assert_str_eq(inflight->key, "k2");

	fake_store_set_up(e.st, 0);
	locks_store_down(e.lt);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 0, 0, 0);	/* no answer */
	for (int c = 1; c < NCL; c++)
		ck_assert_int_eq(e.rec[c].nreplies, 0);
	ck_assert_int_eq(e.rec[0].nreplies, 1);		/* holder: untouched */
	ck_assert_uint_eq(locks_held(e.cl[0], NULL, NULL), 1);

	fake_store_set_up(e.st, 1);
	locks_store_up(e.lt);
	/* first the forget of 2's unanswered attempt, then k's reassert,
	 * then the waiters at the heads of k2 and k3 */
	inflight = fake_store_peek(e.st, FAKE_ANY, 0);
	ck_assert_int_eq(inflight->kind, FAKE_RELEASE);
	ck_assert_str_eq(inflight->key, "k2");
	ck_assert_int_eq(fake_store_peek(e.st, FAKE_ANY, 1)->kind, FAKE_RENEW);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 2);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 77);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 78);
	ck_assert_int_eq(e.rec[2].status, LK_OK);
	ck_assert_int_eq(e.rec[4].status, LK_OK);
	ck_assert_int_eq(e.rec[1].nreplies, 0);		/* still behind 0 */
	ck_assert_int_eq(e.rec[3].nreplies, 0);		/* behind 2 */
	fake_store_drain(e.st);
	env_end(&e);
}
END_TEST

/* A wait that runs out while Redis is away is not BUSY: nobody knows. */
START_TEST(test_wait_runs_out_while_down)
{
	struct env e;

	env_start(&e, NULL);
	acquire(&e, 0, "k", 50, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 20000);
	fake_store_set_up(e.st, 0);
	locks_store_down(e.lt);
	run_ms(&e, 200);
	ck_assert_int_eq(e.rec[0].nreplies, 1);
	ck_assert_int_eq(e.rec[0].status, LK_UNAVAILABLE);
	env_end(&e);
}
END_TEST

START_TEST(test_limit_locks_per_session)
{
	struct locks_cfg cfg = base_cfg;
	struct env e;

	cfg.max_locks_per_session = 2;
	env_start(&e, &cfg);
	hold(&e, 0, "a", 5000, 1);
	hold(&e, 0, "b", 5000, 2);
	acquire(&e, 0, "c", 1000, 5000);
	ck_assert_int_eq(e.rec[0].nreplies, 3);
	ck_assert_int_eq(e.rec[0].status, LK_LIMIT);
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 2);
	acquire(&e, 0, "a", 0, 5000);			/* reentrant: fine */
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 1);
	acquire(&e, 1, "c", 0, 5000);			/* per session */
	ck_assert_int_eq(e.rec[1].nreplies, 0);
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 3);
	env_end(&e);
}
END_TEST

START_TEST(test_limit_waiters)
{
	struct locks_cfg cfg = base_cfg;
	struct env e;

	cfg.max_waiters = 1;
	env_start(&e, &cfg);
	hold(&e, 0, "k", 5000, 1);
	acquire(&e, 1, "k", 10000, 5000);		/* the one waiter */
	ck_assert_int_eq(e.rec[1].nreplies, 0);
	acquire(&e, 2, "k", 10000, 5000);
	ck_assert_int_eq(e.rec[2].nreplies, 1);
	ck_assert_int_eq(e.rec[2].status, LK_LIMIT);
	ck_assert_uint_eq(calls(&e, FAKE_ANY), 1);
	env_end(&e);
}
END_TEST

/* Redis unreachable: a one-try ACQUIRE answers at once; one with WAIT
 * queues as in any outage and is tried when Redis answers again. */
START_TEST(test_store_not_up)
{
	struct env e;

	env_start(&e, NULL);
	fake_store_set_up(e.st, 0);
	acquire(&e, 0, "k", 0, 5000);
	ck_assert_int_eq(e.rec[0].nreplies, 1);
	ck_assert_int_eq(e.rec[0].status, LK_UNAVAILABLE);
	acquire(&e, 1, "k", 10000, 5000);
	ck_assert_int_eq(e.rec[1].nreplies, 0);		/* it waits */
	ck_assert_uint_eq(calls(&e, FAKE_ANY), 0);
	fake_store_set_up(e.st, 1);
	locks_store_up(e.lt);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 5);
	ck_assert_int_eq(e.rec[1].status, LK_OK);
	ck_assert_int_eq(e.rec[1].n, 5);
	env_end(&e);
}
END_TEST

/* ... and one whose WAIT runs out first answers ERR UNAVAILABLE then. */
START_TEST(test_store_not_up_wait_runs_out)
{
	struct env e;
	int64_t t0 = now_ms();

	env_start(&e, NULL);
	fake_store_set_up(e.st, 0);
	acquire(&e, 0, "k", 100, 5000);
	ck_assert_int_eq(e.rec[0].nreplies, 0);
	run_ms(&e, 250);
	ck_assert_int_eq(e.rec[0].nreplies, 1);
	ck_assert_int_eq(e.rec[0].status, LK_UNAVAILABLE);
	ck_assert_int_ge(e.rec[0].at_ms - t0, 95);
	env_end(&e);
}
END_TEST

/* store_is_up says yes but the request is refused: answered at once too. */
START_TEST(test_store_refuses_request)
{
	struct env e;

	env_start(&e, NULL);
	fake_store_set_fail(e.st, 1);
	acquire(&e, 0, "k", 10000, 5000);
	ck_assert_int_eq(e.rec[0].nreplies, 1);
	ck_assert_int_eq(e.rec[0].status, LK_UNAVAILABLE);
	env_end(&e);
}
END_TEST

/*
 * Handoff whose releasing hold was already lost in Redis: the releaser
 * hears LOST and the waiter gets an ordinary attempt next.
 */
START_TEST(test_handoff_releaser_lost)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, 7);
	acquire(&e, 1, "k", 10000, 5000);
	release(&e, 0, "k");
	fake_acquire_done(take(&e, FAKE_HANDOFF), 1, 0, 0);
	ck_assert_int_eq(e.rec[0].status, LK_LOST);
	ck_assert_int_eq(e.rec[1].nreplies, 0);
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_str_eq(fc->value, ids[1]);
	fake_acquire_done(fc, 1, 1, 8);
	ck_assert_int_eq(e.rec[1].status, LK_OK);
	ck_assert_int_eq(e.rec[1].n, 8);
	env_end(&e);
}
END_TEST

/* The waiter leaves while the handoff is in flight: the grant it got in
 * Redis is released at once, with its id and the new token. */
START_TEST(test_handoff_to_gone_waiter)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, 7);
	acquire(&e, 1, "k", 10000, 5000);
	release(&e, 0, "k");
	fc = take(&e, FAKE_HANDOFF);
	env_free_client(&e, 1);
	fake_acquire_done(fc, 1, 1, 8);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->value, value_of(1, 8));
	fake_release_done(fc, 1, 1);
	env_end(&e);
}
END_TEST

/*
 * Fairness: another broker announced a waiter ("wanted"); after
 * HANDOFF_FAIR (4) handoffs in a row the next release is plain (it
 * publishes) and the local waiter holds back ~5 ms before its attempt.
 */
START_TEST(test_fair_release_after_handoffs)
{
	struct env e;
	struct fake_call *fc;
	long long token = 10;
	int holder = 0;
	int64_t t0;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, token);
	for (int i = 0; i < 4; i++) {
		int next = 1 - holder;

		acquire(&e, next, "k", 10000, 5000);
		locks_store_wanted(e.lt, "k", 1, 1, 0);
		release(&e, holder, "k");
		fc = take(&e, FAKE_HANDOFF);
		fake_acquire_done(fc, 1, 1, ++token);
		ck_assert_int_eq(e.rec[next].status, LK_OK);
		holder = next;
	}
	acquire(&e, 1 - holder, "k", 10000, 5000);
	locks_store_wanted(e.lt, "k", 1, 1, 0);
	release(&e, holder, "k");
	ck_assert_uint_eq(pending(&e, FAKE_HANDOFF), 0);
	fake_release_done(take(&e, FAKE_RELEASE), 1, 1);
	t0 = now_ms();
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);	/* yielding */
	run_ms(&e, 30);
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_msg(now_ms() - t0 >= 4, "local attempt did not yield");
	fake_acquire_done(fc, 1, 1, ++token);
	ck_assert_int_eq(e.rec[1 - holder].status, LK_OK);
	env_end(&e);
}
END_TEST

/* Without a remote waiter, handoffs go on however many there were. */
START_TEST(test_no_wanted_keeps_handing_off)
{
	struct env e;
	long long token = 10;
	int holder = 0;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, token);
	for (int i = 0; i < 12; i++) {
		int next = 1 - holder;

		acquire(&e, next, "k", 10000, 5000);
		release(&e, holder, "k");
		fake_acquire_done(take(&e, FAKE_HANDOFF), 1, 1, ++token);
		ck_assert_int_eq(e.rec[next].status, LK_OK);
		holder = next;
	}
	ck_assert_uint_eq(calls(&e, FAKE_RELEASE), 0);
	env_end(&e);
}
END_TEST

/* --- kinds: shared locks and semaphores (issue 13) -------------------- */

static void
acquire_k(struct env *e, int c, const char *key, long kind, long wait_ms)
{
	locks_acquire(e->cl[c], key, strlen(key), kind, wait_ms, 5000);
}

/* Answer the oldest pending attempt, which must be client c's, of kind. */
static void
grant(struct env *e, int c, long kind, long long token)
{
	struct fake_call *fc = take(e, FAKE_ACQUIRE);

	ck_assert_str_eq(fc->value, ids[c]);
	ck_assert_int_eq(fc->akind, kind == LK_EXCLUSIVE ? STORE_EXCLUSIVE :
	    kind);
	fake_acquire_done(fc, 1, 1, token);
	ck_assert_int_eq(e->rec[c].status, LK_OK);
	ck_assert_int_eq(e->rec[c].n, token);
}

/* Shared waiters at the head are tried together, not one after another. */
START_TEST(test_shared_tried_together)
{
	struct env e;

	env_start(&e, NULL);
	for (int c = 0; c < 3; c++)
		acquire_k(&e, c, "k", LK_SHARED, 1000);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 3);
	for (int c = 0; c < 3; c++)
		grant(&e, c, LK_SHARED, 10 + c);
	/* a fourth one-try reader beside them asks Redis too */
	acquire_k(&e, 3, "k", LK_SHARED, 0);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 1);
	grant(&e, 3, LK_SHARED, 20);
	/* while a one-try writer is BUSY at once, without a Redis call */
	acquire_k(&e, 4, "k", LK_EXCLUSIVE, 0);
	ck_assert_int_eq(e.rec[4].status, LK_BUSY);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	env_end(&e);
}
END_TEST

/*
 * FIFO across kinds: a writer waiting behind readers is not overtaken by
 * readers that come after it; when it is done, the readers behind it are
 * tried together.
 */
START_TEST(test_writer_not_overtaken)
{
	struct env e;

	env_start(&e, NULL);
	acquire_k(&e, 0, "k", LK_SHARED, 1000);
	grant(&e, 0, LK_SHARED, 10);
	acquire_k(&e, 1, "k", LK_EXCLUSIVE, 1000);	/* waits, no attempt */
	acquire_k(&e, 2, "k", LK_SHARED, 1000);	/* behind the writer */
	acquire_k(&e, 3, "k", LK_SHARED, 1000);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	ck_assert_int_eq(e.rec[2].nreplies, 0);
	acquire_k(&e, 4, "k", LK_SHARED, 0);		/* one try: someone waits */
	ck_assert_int_eq(e.rec[4].status, LK_BUSY);

	release(&e, 0, "k");		/* a read is never handed over */
	ck_assert_uint_eq(pending(&e, FAKE_HANDOFF), 0);
	fake_release_done(take(&e, FAKE_RELEASE), 1, 1);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 1);	/* the writer */
	grant(&e, 1, LK_EXCLUSIVE, 11);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);

	release(&e, 1, "k");		/* next is a reader: plain release */
	fake_release_done(take(&e, FAKE_RELEASE), 1, 1);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 2);	/* together */
	grant(&e, 2, LK_SHARED, 12);
	grant(&e, 3, LK_SHARED, 13);
	env_end(&e);
}
END_TEST

/* A remote writer announced (wanted): readers here stop joining the
 * reads held here, so the reads drain and the writer gets its turn. */
START_TEST(test_remote_writer_holds_back_readers)
{
	struct env e;

	env_start(&e, NULL);
	acquire_k(&e, 0, "k", LK_SHARED, 1000);
	grant(&e, 0, LK_SHARED, 10);
	locks_store_wanted(e.lt, "k", 1, 1, 0);
	acquire_k(&e, 1, "k", LK_SHARED, 1000);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	release(&e, 0, "k");
	fake_release_done(take(&e, FAKE_RELEASE), 1, 1);
	/* the reader waits a moment: the writer's attempt goes first */
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);
	run_ms(&e, 30);
	grant(&e, 1, LK_SHARED, 12);
	env_end(&e);
}
END_TEST

/* A semaphore of 2: two permits tried at once, the third waits here
 * without asking Redis, and a release hands a permit over in one call. */
START_TEST(test_semaphore_limit_and_handoff)
{
	struct env e;
	struct fake_call *fc;
	struct locks_stats st;

	env_start(&e, NULL);
	for (int c = 0; c < 3; c++)
		acquire_k(&e, c, "s", 2, 1000);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 2);
	grant(&e, 0, 2, 10);
	grant(&e, 1, 2, 11);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	ck_assert_int_eq(e.rec[2].nreplies, 0);
	locks_get_stats(e.lt, &st);
	ck_assert_uint_eq(st.locks_held, 2);

	release(&e, 0, "s");
	fc = take(&e, FAKE_HANDOFF);
	ck_assert_str_eq(fc->value, value_of(0, 10));
	ck_assert_str_eq(fc->next_owner, ids[2]);
	fake_acquire_done(fc, 1, 1, 12);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[2].status, LK_OK);
	ck_assert_int_eq(e.rec[2].n, 12);
	/* Redis full with holders elsewhere: the attempt waits for a wake */
	release(&e, 1, "s");
	fake_release_done(take(&e, FAKE_RELEASE), 1, 1);
	acquire_k(&e, 3, "s", 2, 1000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 500);
	ck_assert_int_eq(e.rec[3].nreplies, 0);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	locks_store_released(e.lt, "s", 1);
	grant(&e, 3, 2, 13);
	env_end(&e);
}
END_TEST

/* A key's kind is fixed while anything here holds or waits on it; Redis
 * says the same of holders elsewhere (granted 3). */
START_TEST(test_kind_mismatch)
{
	struct env e;

	env_start(&e, NULL);
	acquire_k(&e, 0, "s", 3, 0);
	grant(&e, 0, 3, 10);
	acquire_k(&e, 1, "s", 4, 1000);
	ck_assert_int_eq(e.rec[1].status, LK_KIND);
	ck_assert_int_eq(e.rec[1].n, 3);
	acquire_k(&e, 1, "s", LK_EXCLUSIVE, 1000);
	ck_assert_int_eq(e.rec[1].status, LK_KIND);
	acquire_k(&e, 1, "s", LK_SHARED, 0);
	ck_assert_int_eq(e.rec[1].status, LK_KIND);
	acquire_k(&e, 0, "s", 5, 0);		/* its own holder too */
	ck_assert_int_eq(e.rec[0].status, LK_KIND);

	acquire_k(&e, 2, "l", LK_SHARED, 0);
	grant(&e, 2, LK_SHARED, 11);
	acquire_k(&e, 3, "l", 2, 0);
	ck_assert_int_eq(e.rec[3].status, LK_KIND);
	ck_assert_int_eq(e.rec[3].n, 0);		/* a lock */
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);

	/* Redis knows a kind this broker does not */
	acquire_k(&e, 4, "r", 2, 1000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 3, 7);
	ck_assert_int_eq(e.rec[4].status, LK_KIND);
	ck_assert_int_eq(e.rec[4].n, 7);
	env_end(&e);
}
END_TEST

/* Reentrant per session; a shared hold asked exclusive is refused (two
 * readers upgrading would wait for each other forever); an exclusive
 * hold covers a shared request. */
START_TEST(test_reentrant_kinds)
{
	struct env e;

	env_start(&e, NULL);
	acquire_k(&e, 0, "k", LK_SHARED, 0);
	grant(&e, 0, LK_SHARED, 10);
	acquire_k(&e, 0, "k", LK_SHARED, 0);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 10);
	acquire_k(&e, 0, "k", LK_EXCLUSIVE, 1000);
	ck_assert_int_eq(e.rec[0].status, LK_UPGRADE);

	acquire_k(&e, 1, "x", LK_EXCLUSIVE, 0);
	grant(&e, 1, LK_EXCLUSIVE, 11);
	acquire_k(&e, 1, "x", LK_SHARED, 0);
	ck_assert_int_eq(e.rec[1].status, LK_OK);
	ck_assert_int_eq(e.rec[1].n, 11);
	release(&e, 1, "x");
	ck_assert_int_eq(e.rec[1].n, 1);		/* one hold left */

	acquire_k(&e, 2, "s", 2, 0);
	grant(&e, 2, 2, 12);
	acquire_k(&e, 2, "s", 2, 0);
	ck_assert_int_eq(e.rec[2].status, LK_OK);
	ck_assert_int_eq(e.rec[2].n, 12);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	env_end(&e);
}
END_TEST

/* Every hold of a key is renewed in the batch, each with its own value
 * and kind; one found lost ends alone. */
START_TEST(test_renew_every_holder)
{
	struct env e;
	struct fake_call *fc;
	int renewed[2] = { 1, 0 };

	env_start(&e, NULL);
	acquire_k(&e, 0, "s", 3, 0);
	acquire_k(&e, 1, "s", 3, 0);
	grant(&e, 0, 3, 10);
	grant(&e, 1, 3, 11);
	run_ms(&e, 1800);		/* 5000 ms TTL: due at 1667 - 833 */
	fc = take(&e, FAKE_RENEW);
	ck_assert_uint_eq(fc->n, 2);
	ck_assert_str_eq(fc->items[0].value, value_of(0, 10));
	ck_assert_str_eq(fc->items[1].value, value_of(1, 11));
	ck_assert_int_eq(fc->items[0].kind, 3);
	ck_assert_int_eq(fc->items[1].kind, 3);
	fake_renew_done(fc, 1, renewed, 2);
	ck_assert_int_eq(e.rec[0].nlost, 0);
	ck_assert_int_eq(e.rec[1].nlost, 1);
	ck_assert_int_eq(e.rec[1].losttoken, 11);
	ck_assert_uint_eq(locks_held(e.cl[0], NULL, NULL), 1);
	ck_assert_uint_eq(locks_held(e.cl[1], NULL, NULL), 0);
	release(&e, 1, "s");
	ck_assert_int_eq(e.rec[1].status, LK_LOST);
	env_end(&e);
}
END_TEST

/* Every hold of a key found lost in one renew batch: each ends, and the
 * key's entry goes once nothing refers to it (the batch named it twice;
 * freeing it at the first of them was a use after free, found by
 * test_shared under ASan). */
START_TEST(test_renew_all_holders_lost)
{
	struct env e;
	struct fake_call *fc;
	int renewed[2] = { 0, 0 };
	struct locks_stats st;

	env_start(&e, NULL);
	acquire_k(&e, 0, "r", LK_SHARED, 0);
	acquire_k(&e, 1, "r", LK_SHARED, 0);
	grant(&e, 0, LK_SHARED, 10);
	grant(&e, 1, LK_SHARED, 11);
	run_ms(&e, 1800);
	fc = take(&e, FAKE_RENEW);
	ck_assert_uint_eq(fc->n, 2);
	fake_renew_done(fc, 1, renewed, 2);
	ck_assert_int_eq(e.rec[0].nlost, 1);
	ck_assert_int_eq(e.rec[1].nlost, 1);
	locks_get_stats(e.lt, &st);
	ck_assert_uint_eq(st.keys, 0);
	ck_assert_uint_eq(st.locks_held, 0);
	env_end(&e);
}
END_TEST

/* Review of issue 13, finding 2: a wake while two readers' attempts are
 * in flight retries each "held" answer once, not for ever (it was a hot
 * loop of ~25,000 attempts/s while a LINGER kept the key taken). */
START_TEST(test_wake_with_two_attempts_retries_once)
{
	struct env e;

	env_start(&e, NULL);
	acquire_k(&e, 0, "k", LK_SHARED, 5000);
	acquire_k(&e, 1, "k", LK_SHARED, 5000);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 2);
	locks_store_released(e.lt, "k", 1);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 3000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 3000);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 2);	/* once each */
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 3000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 3000);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);	/* now they wait */
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 4);
	locks_store_released(e.lt, "k", 1);
	grant(&e, 0, LK_SHARED, 10);
	grant(&e, 1, LK_SHARED, 11);
	env_end(&e);
}
END_TEST

/* Finding 3: a writer told "held elsewhere" (by readers there) leaves;
 * the reader behind it tries at once instead of waiting for a wake. */
START_TEST(test_reader_behind_a_gone_writer_tries_at_once)
{
	struct env e;

	env_start(&e, NULL);
	acquire_k(&e, 0, "k", LK_EXCLUSIVE, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 20000);
	acquire_k(&e, 1, "k", LK_SHARED, 5000);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);	/* behind the writer */
	env_free_client(&e, 0);
	grant(&e, 1, LK_SHARED, 10);
	env_end(&e);
}
END_TEST

/* Finding 4: a reader or a permit waiter announced elsewhere ("+") does
 * not hold back the readers here; only a writer does. */
START_TEST(test_remote_reader_does_not_hold_back_readers)
{
	struct env e;

	env_start(&e, NULL);
	acquire_k(&e, 0, "k", LK_SHARED, 0);
	grant(&e, 0, LK_SHARED, 10);
	locks_store_wanted(e.lt, "k", 1, 0, 0);
	acquire_k(&e, 1, "k", LK_SHARED, 0);
	grant(&e, 1, LK_SHARED, 11);
	locks_store_wanted(e.lt, "k", 1, 1, 0);
	acquire_k(&e, 2, "k", LK_SHARED, 0);
	ck_assert_int_eq(e.rec[2].status, LK_BUSY);
	env_end(&e);
}
END_TEST

/* Finding 6: a release message makes a detached (grace) session's read
 * hold here renew at once: it may be resumed elsewhere and released
 * there, and a writer here must not wait for its renewal. */
START_TEST(test_release_checks_detached_read_at_once)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	acquire_k(&e, 0, "k", LK_SHARED, 0);
	grant(&e, 0, LK_SHARED, 10);
	locks_client_handover(e.cl[0], &ops, &e.rec[0], 1);
	acquire_k(&e, 1, "k", LK_EXCLUSIVE, 5000);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	locks_store_released(e.lt, "k", 1);
	run_ms(&e, 20);
	fc = take(&e, FAKE_RENEW);
	ck_assert_str_eq(fc->items[0].value, value_of(0, 10));
	{
		int lost[1] = { 0 };

		fake_renew_done(fc, 1, lost, 1);
	}
	grant(&e, 1, LK_EXCLUSIVE, 11);
	env_end(&e);
}
END_TEST

/* A session that goes frees each of its holds; the permit it frees lets
 * a waiter here in. */
START_TEST(test_gone_holder_frees_permit)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	acquire_k(&e, 0, "s", 1, 0);
	grant(&e, 0, 1, 10);
	acquire_k(&e, 1, "s", 1, 1000);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	env_free_client(&e, 0);
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->value, value_of(0, 10));
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);	/* behind it */
	fake_release_done(fc, 1, 1);
	grant(&e, 1, 1, 11);
	env_end(&e);
}
END_TEST

/* --- local hand-offs without a round trip (issue 14) ------------------ */

/*
 * 0 holds k (token 10) with 1, 2 and 3 queued; its release goes through
 * Redis (handoff.lua), which sets PASS_BLOCK tokens aside (more = 32) as
 * others wait behind 1.  Returns with 1 holding token 11 of that chain.
 */
static void
chain_of_waiters(struct env *e, long ttl_ms)
{
	struct fake_call *fc;

	hold(e, 0, "k", 5000, 10);
	for (int c = 1; c <= 3; c++)
		acquire(e, c, "k", 10000, ttl_ms);
	release(e, 0, "k");
	fc = take(e, FAKE_HANDOFF);
	ck_assert_int_eq(fc->reserve, 32);	/* 2 and 3 wait behind 1 */
	fake_grant_done(fc, 1, 1, 11, 32);
	ck_assert_int_eq(e->rec[1].status, LK_OK);
	ck_assert_int_eq(e->rec[1].n, 11);
}

/* Releases along the chain answer both sides at once, with the chain's
 * next tokens in order, and bring Redis up to date behind them. */
START_TEST(test_pass_answers_at_once)
{
	struct env e;
	struct fake_call *fc;
	struct locks_stats s;

	env_start(&e, NULL);
	chain_of_waiters(&e, 5000);
	release(&e, 1, "k");
	ck_assert_int_eq(e.rec[1].status, LK_OK);	/* at once */
	ck_assert_int_eq(e.rec[1].n, 0);
	ck_assert_int_eq(e.rec[2].status, LK_OK);
	ck_assert_int_eq(e.rec[2].n, 12);
	ck_assert_int_lt(e.rec[2].ok_seq, e.rec[1].ok_seq);	/* next first */
	release(&e, 2, "k");				/* before Redis heard */
	ck_assert_int_eq(e.rec[3].status, LK_OK);
	ck_assert_int_eq(e.rec[3].n, 13);
	ck_assert_uint_eq(pending(&e, FAKE_HANDOFF), 0);
	ck_assert_uint_eq(pending(&e, FAKE_RELEASE), 0);
	ck_assert_uint_eq(pending(&e, FAKE_PASS), 2);
	fc = take(&e, FAKE_PASS);
	ck_assert_str_eq(fc->value, value_of(2, 12));
	ck_assert_str_eq(fc->next_owner, value_of(1, 11));	/* exact */
	ck_assert_int_eq(fc->ttl_ms, 5000);
	fake_pass_done(fc, 1, 1);
	fc = take(&e, FAKE_PASS);
	ck_assert_str_eq(fc->value, value_of(3, 13));
	ck_assert_str_eq(fc->next_owner, value_of(2, 12));
	fake_pass_done(fc, 1, 1);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.handoffs, 3);
	ck_assert_uint_eq(s.early_handoffs, 2);
	ck_assert_uint_eq(s.releases, 3);
	release(&e, 3, "k");			/* nobody waits: through Redis */
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->value, value_of(3, 13));
	fake_release_done(fc, 1, 1);
	ck_assert_int_eq(e.rec[3].status, LK_OK);
	env_end(&e);
}
END_TEST

/* Redis shows no hold of the chain (a key deleted during a burst): the
 * holder after it is told it lost the key, and the chain ends here: the
 * next waiter asks Redis. */
START_TEST(test_pass_finds_key_gone)
{
	struct env e;
	struct fake_call *first, *second, *fc;

	env_start(&e, NULL);
	chain_of_waiters(&e, 5000);
	acquire(&e, 4, "k", 10000, 5000);
	release(&e, 1, "k");
	release(&e, 2, "k");
	ck_assert_int_eq(e.rec[3].n, 13);
	first = take(&e, FAKE_PASS);
	second = take(&e, FAKE_PASS);
	fake_pass_done(first, 1, 0);
	ck_assert_int_eq(e.rec[3].nlost, 0);	/* its own call tells */
	fake_pass_done(second, 1, 0);
	ck_assert_int_eq(e.rec[3].nlost, 1);
	ck_assert_str_eq(e.rec[3].lostkey, "k");
	ck_assert_int_eq(e.rec[3].losttoken, 13);
	ck_assert_int_eq(e.rec[4].nreplies, 0);
	fc = take(&e, FAKE_ACQUIRE);		/* no pass off a broken chain */
	ck_assert_str_eq(fc->value, ids[4]);
	fake_grant_done(fc, 1, 1, 50, 0);
	ck_assert_int_eq(e.rec[4].n, 50);
	release(&e, 3, "k");
	ck_assert_int_eq(e.rec[3].status, LK_LOST);
	env_end(&e);
}
END_TEST

/* No pass when Redis may drop the releasing hold's value before the new
 * holder's first renewal: a TTL of 300 ms left against a renewal 10 s
 * out.  The key goes through Redis. */
START_TEST(test_pass_only_while_redis_keeps_the_hold)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, 10);
	acquire(&e, 1, "k", 10000, 300);
	acquire(&e, 2, "k", 10000, 30000);
	acquire(&e, 3, "k", 10000, 30000);
	release(&e, 0, "k");
	fc = take(&e, FAKE_HANDOFF);
	ck_assert_int_eq(fc->reserve, 0);	/* 2 could not take it early */
	fake_grant_done(fc, 1, 1, 11, 32);
	release(&e, 1, "k");
	ck_assert_int_eq(e.rec[2].nreplies, 0);
	ck_assert_uint_eq(pending(&e, FAKE_PASS), 0);
	fc = take(&e, FAKE_HANDOFF);
	ck_assert_str_eq(fc->value, value_of(1, 11));
	ck_assert_int_eq(fc->reserve, 32);
	fake_grant_done(fc, 1, 1, 44, 32);
	ck_assert_int_eq(e.rec[2].n, 44);
	release(&e, 2, "k");			/* a long hold: passed */
	ck_assert_int_eq(e.rec[3].n, 45);
	ck_assert_uint_eq(pending(&e, FAKE_PASS), 1);
	env_end(&e);
}
END_TEST

/* The connection goes with passes unanswered: on the reconnect they run
 * again, in order, ahead of everything else (each a no-op if it ran),
 * then the reassert finds the last holder's value; no new early hand-off
 * from tokens set aside on a master that may have failed over. */
START_TEST(test_pass_unanswered_connection_lost)
{
	struct env e;
	struct fake_call *fc;
	struct locks_stats s;

	env_start(&e, NULL);
	chain_of_waiters(&e, 5000);
	acquire(&e, 4, "k", 10000, 5000);
	release(&e, 1, "k");
	release(&e, 2, "k");
	ck_assert_int_eq(e.rec[3].n, 13);
	fake_store_set_up(e.st, 0);
	locks_store_down(e.lt);
	fake_store_drain(e.st);			/* both passes: ok = 0 */
	ck_assert_int_eq(e.rec[3].nlost, 0);
	fake_store_set_up(e.st, 1);
	locks_store_up(e.lt);
	fc = take(&e, FAKE_ANY);
	ck_assert_int_eq(fc->kind, FAKE_PASS);
	ck_assert_str_eq(fc->next_owner, value_of(1, 11));
	ck_assert_str_eq(fc->value, value_of(2, 12));
	fake_pass_done(fc, 1, 1);
	fc = take(&e, FAKE_ANY);
	ck_assert_int_eq(fc->kind, FAKE_PASS);
	ck_assert_str_eq(fc->next_owner, value_of(2, 12));
	ck_assert_str_eq(fc->value, value_of(3, 13));
	fake_pass_done(fc, 1, 1);
	fc = take(&e, FAKE_ANY);
	ck_assert_int_eq(fc->kind, FAKE_RENEW);
	ck_assert_str_eq(fc->value, value_of(3, 13));
	fake_renew_done(fc, 1, (const int[]){ 1 }, 1);
	ck_assert_int_eq(e.rec[3].nlost, 0);
	release(&e, 3, "k");			/* chain ended: via Redis */
	ck_assert_uint_eq(pending(&e, FAKE_PASS), 0);
	fc = take(&e, FAKE_HANDOFF);
	ck_assert_str_eq(fc->value, value_of(3, 13));
	fake_grant_done(fc, 1, 1, 44, 0);
	ck_assert_int_eq(e.rec[4].n, 44);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.releases, 4);	/* each release once */
	env_end(&e);
}
END_TEST

/* A pass refused by Redis (OOM, READONLY: its SET did not run) is an
 * outage, not a loss: the new holder keeps the key, is not renewed (its
 * value is not in Redis yet), and the pass runs again on the clean-up
 * timer until Redis takes it. */
START_TEST(test_pass_refused)
{
	struct env e;
	struct fake_call *fc;
	struct locks_stats s;

	env_start(&e, NULL);
	chain_of_waiters(&e, 5000);
	release(&e, 1, "k");
	ck_assert_int_eq(e.rec[2].n, 12);
	fake_pass_done(take(&e, FAKE_PASS), 0, 0);	/* store still up */
	ck_assert_int_eq(e.rec[2].nlost, 0);
	ck_assert_uint_eq(locks_held(e.cl[2], NULL, NULL), 1);
	run_ms(&e, 150);			/* the clean-up timer */
	fc = take(&e, FAKE_PASS);		/* again, the same pass */
	ck_assert_str_eq(fc->value, value_of(2, 12));
	ck_assert_str_eq(fc->next_owner, value_of(1, 11));
	fake_pass_done(fc, 0, 0);		/* refused again */
	ck_assert_uint_eq(pending(&e, FAKE_RENEW), 0);
	run_ms(&e, 350);
	fc = take(&e, FAKE_PASS);
	fake_pass_done(fc, 1, 1);		/* Redis took it */
	ck_assert_int_eq(e.rec[2].nlost, 0);
	ck_assert_uint_eq(pending(&e, FAKE_PASS), 0);
	release(&e, 2, "k");			/* chain ended: via Redis */
	fc = take(&e, FAKE_HANDOFF);
	ck_assert_str_eq(fc->value, value_of(2, 12));
	fake_grant_done(fc, 1, 1, 44, 0);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.lost, 0);
	fake_store_drain(e.st);
	env_end(&e);
}
END_TEST

/* A pass refused until the new holder's TTL has run out by the broker's
 * count (it inherited the releasing hold's confirmation): the holder is
 * told it lost the key then (jeopardy), and both values are freed. */
START_TEST(test_pass_refused_until_jeopardy)
{
	struct env e;
	struct fake_call *fc;
	struct locks_stats s;
	int released = 0;
	int64_t t0 = now_ms();

	env_start(&e, NULL);
	chain_of_waiters(&e, 600);
	release(&e, 1, "k");			/* 1's hold: 600 ms */
	ck_assert_int_eq(e.rec[2].n, 12);
	fake_pass_done(take(&e, FAKE_PASS), 0, 0);
	while (e.rec[2].nlost == 0 && now_ms() - t0 < 2000) {
		run_ms(&e, 50);
		while ((fc = fake_store_take(e.st, FAKE_PASS)) != NULL)
			fake_pass_done(fc, 0, 0);	/* OOM, still */
	}
	ck_assert_int_eq(e.rec[2].nlost, 1);
	ck_assert_int_ge(now_ms() - t0, 590);
	ck_assert_int_le(now_ms() - t0, 800);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.lost_by[LK_LOST_JEOPARDY], 1);
	/* 3, next in line, asks Redis: the key still shows 1's value */
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 5000);
	run_ms(&e, 300);
	while ((fc = fake_store_take(e.st, FAKE_RELEASE)) != NULL) {
		ck_assert(strcmp(fc->value, value_of(1, 11)) == 0 ||
		    strcmp(fc->value, value_of(2, 12)) == 0);
		released++;
		fake_release_done(fc, 1, STORE_GONE);
	}
	ck_assert_int_eq(released, 2);
	ck_assert_uint_eq(pending(&e, FAKE_PASS), 0);
	fake_store_drain(e.st);
	env_end(&e);
}
END_TEST


/* A grace session's hold is never passed on early: RESUME may have moved
 * it to another broker already. */
START_TEST(test_no_pass_from_a_grace_session)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	chain_of_waiters(&e, 5000);
	locks_client_resumable(e.cl[1]);
	release(&e, 1, "k");
	ck_assert_int_eq(e.rec[2].nreplies, 0);
	ck_assert_uint_eq(pending(&e, FAKE_PASS), 0);
	fc = take(&e, FAKE_HANDOFF);
	ck_assert_str_eq(fc->value, value_of(1, 11));
	fake_grant_done(fc, 1, 1, 44, 0);
	ck_assert_int_eq(e.rec[2].n, 44);
	env_end(&e);
}
END_TEST

/* A holder's session ends with a waiter behind it: passed at once too. */
START_TEST(test_pass_at_session_end)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	chain_of_waiters(&e, 5000);
	env_free_client(&e, 1);
	ck_assert_int_eq(e.rec[2].status, LK_OK);
	ck_assert_int_eq(e.rec[2].n, 12);
	ck_assert_uint_eq(pending(&e, FAKE_RELEASE), 0);
	fc = take(&e, FAKE_PASS);
	ck_assert_str_eq(fc->value, value_of(2, 12));
	ck_assert_str_eq(fc->next_owner, value_of(1, 11));
	fake_pass_done(fc, 1, 1);
	env_end(&e);
}
END_TEST

/* --- grace sessions: resumed elsewhere, or lost? ------------------------ */

static int doubts;

static int
on_doubt(void *arg)
{
	(void)arg;
	doubts++;
	return 1;
}

static const struct lk_client_ops grace_ops = { on_reply, on_lost, NULL,
    on_doubt };

/* Client 0 as a grace session's lock client (resumable, with a doubt
 * hook). */
static void
grace_client(struct env *e)
{
	locks_client_free(e->cl[0]);
	e->cl[0] = locks_client_new(e->lt, ids[0], &grace_ops, &e->rec[0]);
	locks_client_resumable(e->cl[0]);
	doubts = 0;
}

static uint64_t
lost_count(const struct env *e)
{
	struct locks_stats s;

	locks_get_stats(e->lt, &s);
	return s.lost;
}

/*
 * A grace session's lock found gone by a renewal is no loss until its
 * record says the session is still its own (a RESUME elsewhere rewrites
 * every lock it takes over): not told, not counted, not renewed again,
 * until locks_doubt_settled; a RELEASE answered "not yours" waits for the
 * verdict too.
 */
START_TEST(test_grace_hold_gone_waits_for_the_record)
{
	struct env e;
	struct fake_call *fc;
	int renewed[2];

	env_start(&e, NULL);
	grace_client(&e);
	hold(&e, 0, "k1", 30, 1);
	hold(&e, 0, "k2", 30, 2);
	run_ms(&e, 15);
	fc = take(&e, FAKE_RENEW);
	for (size_t i = 0; i < fc->n; i++)
		renewed[i] = strcmp(fc->items[i].key, "k1") != 0;
	fake_renew_done(fc, 1, renewed, fc->n);
	ck_assert_int_eq(doubts, 1);
	ck_assert_int_eq(e.rec[0].nlost, 0);
	ck_assert_uint_eq(lost_count(&e), 0);
	ck_assert_uint_eq(locks_held(e.cl[0], NULL, NULL), 2);
	while ((fc = fake_store_take(e.st, FAKE_RENEW)) != NULL)
		fake_renew_done(fc, 1, (int[]){ 1, 1 }, fc->n);
	run_ms(&e, 15);				/* k1 is not renewed again */
	for (size_t i = 0; (fc = fake_store_peek(e.st, FAKE_RENEW, i)); i++)
		ck_assert(!renew_has(fc, "k1", value_of(0, 1), 30));
	release(&e, 0, "k2");
	fc = take(&e, FAKE_RELEASE);
	fake_release_done(fc, 1, 0);		/* k2 gone too */
	ck_assert_int_eq(doubts, 1);		/* one check for both */
	ck_assert_int_eq(e.rec[0].nreplies, 2);	/* no answer yet */
	locks_doubt_settled(e.cl[0]);		/* a check sent before k2 */
	ck_assert_int_eq(doubts, 2);		/* ... so ask again */
	ck_assert_int_eq(e.rec[0].nreplies, 2);
	locks_doubt_settled(e.cl[0]);		/* still ours: both lost */
	ck_assert_int_eq(e.rec[0].nreplies, 3);
	ck_assert_int_eq(e.rec[0].status, LK_LOST);
	ck_assert_int_eq(e.rec[0].nlost, 1);	/* k1: an event; k2: the reply */
	ck_assert_str_eq(e.rec[0].lostkey, "k1");
	ck_assert_uint_eq(lost_count(&e), 2);
	ck_assert_uint_eq(locks_held(e.cl[0], NULL, NULL), 0);
	env_end(&e);
}
END_TEST

/*
 * Taken over by a RESUME elsewhere: nothing is told or counted, and a
 * grant the session's record may not list (not confirmed) is released
 * under the client's own owner, while one the record lists is left to the
 * RESUME.
 */
START_TEST(test_grace_taken_releases_only_unrecorded_grants)
{
	struct env e;
	struct fake_call *fc;
	struct locks_stats s;

	env_start(&e, NULL);
	grace_client(&e);
	hold(&e, 0, "rec", 30000, 1);
	locks_recorded(e.cl[0], "rec", 3);
	hold(&e, 0, "new", 30000, 2);
	release(&e, 0, "rec");
	fake_release_done(take(&e, FAKE_RELEASE), 1, 0);
	ck_assert_int_eq(doubts, 1);
	locks_client_taken(e.cl[0]);
	e.cl[0] = NULL;
	ck_assert_int_eq(e.rec[0].nreplies, 2);	/* the two grants only */
	ck_assert_int_eq(e.rec[0].nlost, 0);
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->key, "new");
	ck_assert_str_eq(fc->value, value_of(0, 2));
	fake_release_done(fc, 1, 1);
	ck_assert_uint_eq(pending(&e, FAKE_RELEASE), 0);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.lost, 0);
	ck_assert_uint_eq(s.orphans, 1);
	env_end(&e);
}
END_TEST

/*
 * A reader carries the writers (of other brokers) it came after, which
 * sacquire.lua does not let it overtake: its first attempt, sent as it
 * arrives, asks for "those marked before this call" (-1) and learns their
 * latest stamp from the answer; a reader that arrives while others wait
 * here is not tried at once and carries the latest writer mark heard of
 * (a "wanted" message with a stamp) or seen by an attempt here.
 */
START_TEST(test_reader_carries_the_writers_it_came_after)
{
	struct env e;
	struct fake_call *fc;

	env_start(&e, NULL);
	locks_acquire(e.cl[0], "k", 1, LK_SHARED, 5000, 0);
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_int_eq(fc->seen, -1);
	fake_grant_done(fc, 1, 0, 1000, 555);	/* held; a writer, 555 */
	locks_store_wanted(e.lt, "k", 1, 1, 777);	/* another writer */
	locks_acquire(e.cl[1], "k", 1, LK_SHARED, 5000, 0);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);	/* behind */
	locks_store_wanted(e.lt, "k", 1, 1, 0);	/* plain: no stamp */
	locks_store_released(e.lt, "k", 1);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 2);
	ck_assert_int_eq(fake_store_peek(e.st, FAKE_ACQUIRE, 0)->seen, 555);
	ck_assert_int_eq(fake_store_peek(e.st, FAKE_ACQUIRE, 1)->seen, 777);
	env_end(&e);
}
END_TEST

Suite *
locks_suite(void)
{
	Suite *s = suite_create("locks");
	TCase *tc;

	tc = tcase_create("acquire-release");
	tcase_add_test(tc, test_acquire_free_key);
	tcase_add_test(tc, test_acquire_ttl_default_and_clamp);
	tcase_add_test(tc, test_reentrant);
	tcase_add_test(tc, test_same_key_fifo);
	tcase_add_test(tc, test_wait0_busy_local);
	tcase_add_test(tc, test_wait0_busy_remote);
	suite_add_tcase(s, tc);

	tc = tcase_create("handoff");
	tcase_add_test(tc, test_handoff_releaser_lost);
	tcase_add_test(tc, test_handoff_to_gone_waiter);
	tcase_add_test(tc, test_fair_release_after_handoffs);
	tcase_add_test(tc, test_no_wanted_keeps_handing_off);
	suite_add_tcase(s, tc);

	tc = tcase_create("waiting");
	tcase_add_test(tc, test_remote_busy_waits_for_wake);
	tcase_add_test(tc, test_remote_busy_retry_at_pttl);
	tcase_add_test(tc, test_wait_deadline);
	tcase_add_test(tc, test_wake_during_attempt_not_lost);
	suite_add_tcase(s, tc);

	tc = tcase_create("clients-gone");
	tcase_add_test(tc, test_freed_during_attempt_orphan);
	tcase_add_test(tc, test_orphan_then_next_waiter);
	tcase_add_test(tc, test_freed_while_holding_two);
	suite_add_tcase(s, tc);

	tc = tcase_create("renewal");
	tcase_add_test(tc, test_renew_batch);
	tcase_add_test(tc, test_renew_lost);
	suite_add_tcase(s, tc);

	tc = tcase_create("jeopardy");
	tcase_add_test(tc, test_jeopardy_tells_holder_at_once);
	tcase_add_test(tc, test_jeopardy_counts_from_confirmed_send);
	tcase_add_test(tc, test_lost_causes);
	tcase_add_test(tc, test_refused_attempt_keeps_place);
	suite_add_tcase(s, tc);

	tc = tcase_create("down-and-limits");
	tcase_add_test(tc, test_store_down_keeps_waiters_queued);
	tcase_add_test(tc, test_wait_runs_out_while_down);
	tcase_add_test(tc, test_limit_locks_per_session);
	tcase_add_test(tc, test_limit_waiters);
	tcase_add_test(tc, test_store_not_up);
	tcase_add_test(tc, test_store_not_up_wait_runs_out);
	tcase_add_test(tc, test_store_refuses_request);
	suite_add_tcase(s, tc);

	tc = tcase_create("kinds");
	tcase_add_test(tc, test_shared_tried_together);
	tcase_add_test(tc, test_writer_not_overtaken);
	tcase_add_test(tc, test_remote_writer_holds_back_readers);
	tcase_add_test(tc, test_semaphore_limit_and_handoff);
	tcase_add_test(tc, test_kind_mismatch);
	tcase_add_test(tc, test_reentrant_kinds);
	tcase_add_test(tc, test_renew_every_holder);
	tcase_add_test(tc, test_renew_all_holders_lost);
	tcase_add_test(tc, test_wake_with_two_attempts_retries_once);
	tcase_add_test(tc, test_reader_behind_a_gone_writer_tries_at_once);
	tcase_add_test(tc, test_remote_reader_does_not_hold_back_readers);
	tcase_add_test(tc, test_release_checks_detached_read_at_once);
	tcase_add_test(tc, test_gone_holder_frees_permit);
	suite_add_tcase(s, tc);

	tc = tcase_create("early-handoff");
	tcase_add_test(tc, test_pass_answers_at_once);
	tcase_add_test(tc, test_pass_finds_key_gone);
	tcase_add_test(tc, test_pass_only_while_redis_keeps_the_hold);
	tcase_add_test(tc, test_pass_unanswered_connection_lost);
	tcase_add_test(tc, test_pass_refused);
	tcase_add_test(tc, test_pass_refused_until_jeopardy);
	tcase_add_test(tc, test_no_pass_from_a_grace_session);
	tcase_add_test(tc, test_pass_at_session_end);
	tcase_add_test(tc, test_grace_hold_gone_waits_for_the_record);
	tcase_add_test(tc, test_grace_taken_releases_only_unrecorded_grants);
	tcase_add_test(tc, test_reader_carries_the_writers_it_came_after);
	suite_add_tcase(s, tc);
	return s;
}
