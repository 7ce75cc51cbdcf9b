/*
 * locks_env.c - the lock table on a fake store, for the unit tests of
 * daemon/locks/ (see locks_env.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <event2/event.h>

#include "locks_env.h"
#include "log.h"

static int ok_seq;

void
on_reply(void *arg, const struct lk_result *res)
{
	struct rec *r = arg;

	if (r->nreplies < HIST)
		r->hist[r->nreplies] = res->status;
	r->nreplies++;
	r->status = res->status;
	r->n = res->n;
	r->waited = res->waited;
	r->waited_us = res->waited_us;
	r->at_ms = now_ms();
	if (res->status == LK_OK)
		r->ok_seq = ++ok_seq;
}

void
on_lost(void *arg, const char *key, size_t keylen, long long token)
{
	struct rec *r = arg;

	r->nlost++;
	ck_assert_uint_lt(keylen, sizeof r->lostkey);
	memcpy(r->lostkey, key, keylen);
	r->lostkey[keylen] = '\0';
	r->losttoken = token;
}

const struct lk_client_ops ops = { on_reply, on_lost, NULL, NULL, NULL,
    NULL };

const char *const ids[NCL] = {
	"aaaaaaaa-0000-4000-8000-000000000001",
	"bbbbbbbb-0000-4000-8000-000000000002",
	"cccccccc-0000-4000-8000-000000000003",
	"dddddddd-0000-4000-8000-000000000004",
	"eeeeeeee-0000-4000-8000-000000000005",
};

const struct locks_cfg base_cfg = {
	.default_ttl_ms = 30000,
	.max_ttl_ms = 600000,
	.max_wait_ms = 60000,
	.max_locks_per_session = 1000,
	.max_waiters = 1000,
};

void
env_start(struct env *e, const struct locks_cfg *cfg)
{
	memset(e, 0, sizeof *e);
	log_set_level(LL_ERROR);	/* lost/limit lines are expected here */
	e->base = event_base_new();
	ck_assert_ptr_nonnull(e->base);
	e->st = fake_store_new();
	e->lt = locks_new(e->base, cfg != NULL ? cfg : &base_cfg);
	locks_set_store(e->lt, e->st);
	for (int i = 0; i < NCL; i++)
		e->cl[i] = locks_client_new(e->lt, ids[i], &ops, &e->rec[i]);
}

void
env_free_client(struct env *e, int i)
{
	locks_client_free(e->cl[i]);
	e->cl[i] = NULL;
}

void
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

void
run_ms(struct env *e, long ms)
{
	struct timeval tv = { .tv_sec = ms / 1000,
	    .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

	event_base_loopexit(e->base, &tv);
	event_base_dispatch(e->base);
}

void
acquire(struct env *e, int c, const char *key, long wait_ms, long ttl_ms)
{
	locks_acquire(e->cl[c], key, strlen(key), LK_EXCLUSIVE, wait_ms,
	    ttl_ms);
}

void
release(struct env *e, int c, const char *key)
{
	locks_release(e->cl[c], key, strlen(key), 0);
}

struct fake_call *
take(struct env *e, enum fake_kind kind)
{
	struct fake_call *c = fake_store_take(e->st, kind);

	ck_assert_msg(c != NULL, "no pending store request of kind %d", kind);
	return c;
}

size_t
pending(const struct env *e, enum fake_kind kind)
{
	return fake_store_pending(e->st, kind);
}

size_t
calls(const struct env *e, enum fake_kind kind)
{
	return fake_store_calls(e->st, kind);
}

void
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

const char *
value_of(int c, long long token)
{
	static char buf[64];

	snprintf(buf, sizeof buf, "%s:%lld", ids[c], token);
	return buf;
}

void
held_add(void *arg, const char *key, size_t keylen)
{
	struct held_list *h = arg;

	ck_assert_int_lt(h->n, 8);
	ck_assert_uint_lt(keylen, sizeof h->keys[0]);
	memcpy(h->keys[h->n], key, keylen);
	h->keys[h->n][keylen] = '\0';
	h->n++;
}

int
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

void
acquire_k(struct env *e, int c, const char *key, long kind, long wait_ms)
{
	locks_acquire(e->cl[c], key, strlen(key), kind, wait_ms, 5000);
}

void
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

void
queue_waiter(struct env *e, int c, const char *key, long wait_ms,
    long long pttl)
{
	acquire(e, c, key, wait_ms, 5000);
	fake_acquire_done(take(e, FAKE_ACQUIRE), 1, 0, pttl);
}
