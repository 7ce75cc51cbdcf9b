/*
 * test_waiter.c - a session's waiters (locks_waiter_new, ASYNC waits):
 * what a waiter is granted is its owner's hold; "queued" is said once,
 * before the reply, only when the wait goes on; a waiter freed while its
 * attempt is in flight gives the grant back (released, held by nobody).
 * Against the fake store (locks_env.h).
 */
#include <string.h>

#include "locks_env.h"
#include "suites.h"

/* What a waiter was told: its replies (struct rec) and its queued calls. */
struct wrec {
	struct rec r;
	int nqueued;
	int queued_before_reply;	/* replies seen when queued came */
};

static void
w_reply(void *arg, const struct lk_result *res)
{
	on_reply(&((struct wrec *)arg)->r, res);
}

static void
w_queued(void *arg)
{
	struct wrec *w = arg;

	w->nqueued++;
	w->queued_before_reply = w->r.nreplies;
}

static const struct lk_client_ops wops = { w_reply, on_lost, NULL, NULL,
    w_queued, NULL };

static struct lclient *
waiter(struct env *e, int owner, struct wrec *wr)
{
	memset(wr, 0, sizeof *wr);
	return locks_waiter_new(e->cl[owner], &wops, wr);
}

START_TEST(test_granted_to_its_owner)
{
	struct env e;
	struct wrec wr;
	struct held_list h = { 0 };
	struct lclient *w;
	struct fake_call *fc;

	env_start(&e, NULL);
	w = waiter(&e, 0, &wr);
	locks_acquire(w, "k", 1, LK_EXCLUSIVE, 1000, 5000);
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_str_eq(fc->value, ids[0]);	/* the owner's client-id */
	fake_acquire_done(fc, 1, 1, 42);
	ck_assert_int_eq(wr.r.nreplies, 1);
	ck_assert_int_eq(wr.r.status, LK_OK);
	ck_assert_int_eq(wr.r.n, 42);
	ck_assert_int_eq(wr.nqueued, 0);	/* granted at once */
	ck_assert_uint_eq(locks_held(e.cl[0], held_add, &h), 1);
	ck_assert_str_eq(h.keys[0], "k");
	ck_assert_uint_eq(locks_held(w, NULL, NULL), 0);
	locks_client_free(w);
	/* the owner's hold, released by the owner */
	release(&e, 0, "k");
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->value, value_of(0, 42));
	fake_release_done(fc, 1, 1);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	env_end(&e);
}
END_TEST

/* Held elsewhere: queued once, before the outcome; two waiters of one
 * owner wait for two keys while the owner holds a third. */
START_TEST(test_queued_then_granted)
{
	struct env e;
	struct wrec wb, wc;
	struct lclient *b, *c;

	env_start(&e, NULL);
	hold(&e, 0, "a", 5000, 1);
	b = waiter(&e, 0, &wb);
	c = waiter(&e, 0, &wc);
	locks_acquire(b, "b", 1, LK_EXCLUSIVE, 5000, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 3000);
	locks_acquire(c, "c", 1, LK_EXCLUSIVE, 5000, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 3000);
	ck_assert_int_eq(wb.nqueued, 1);
	ck_assert_int_eq(wb.queued_before_reply, 0);
	ck_assert_int_eq(wb.r.nreplies, 0);
	ck_assert_int_eq(wc.nqueued, 1);
	/* the owner goes on meanwhile */
	acquire(&e, 0, "a", 0, 5000);
	ck_assert_int_eq(e.rec[0].status, LK_OK);	/* reentrant, at once */
	/* c's key is released elsewhere: c is tried again and granted */
	locks_store_released(e.lt, "c", 1);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 9);
	ck_assert_int_eq(wc.r.status, LK_OK);
	ck_assert_int_eq(wc.r.n, 9);
	ck_assert_int_eq(wc.nqueued, 1);	/* said once */
	ck_assert(locks_holds_key(e.cl[0], "c", 1));
	ck_assert(locks_holds_key(e.cl[0], "a", 1));
	ck_assert(!locks_holds_key(e.cl[0], "b", 1));
	locks_client_free(b);		/* withdrawn: nothing left to say */
	locks_client_free(c);
	ck_assert_int_eq(wb.r.nreplies, 0);
	env_end(&e);
}
END_TEST

/* A waiter freed while its attempt is in flight: the grant that comes
 * back is released at once, under the owner's client-id and that exact
 * token; nobody holds the key. */
START_TEST(test_withdrawn_grant_is_given_back)
{
	struct env e;
	struct wrec wr;
	struct lclient *w;
	struct fake_call *fc;

	env_start(&e, NULL);
	w = waiter(&e, 0, &wr);
	locks_acquire(w, "k", 1, LK_EXCLUSIVE, 5000, 5000);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 3000);	/* queued */
	locks_store_released(e.lt, "k", 1);
	fc = take(&e, FAKE_ACQUIRE);		/* tried again: in flight */
	locks_client_free(w);			/* CANCEL */
	fake_acquire_done(fc, 1, 1, 77);
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->value, value_of(0, 77));
	fake_release_done(fc, 1, 1);
	ck_assert(!locks_holds_key(e.cl[0], "k", 1));
	ck_assert_int_eq(wr.r.nreplies, 0);	/* never told */
	env_end(&e);
}
END_TEST

/* The owner's limits bind its waiters: a waiter of an owner at
 * max_locks_per_session gets ERR LIMIT at once. */
START_TEST(test_owner_limits)
{
	struct env e;
	struct locks_cfg cfg = base_cfg;
	struct wrec wr;
	struct lclient *w;

	cfg.max_locks_per_session = 1;
	env_start(&e, &cfg);
	hold(&e, 0, "a", 5000, 1);
	w = waiter(&e, 0, &wr);
	locks_acquire(w, "b", 1, LK_EXCLUSIVE, 5000, 5000);
	ck_assert_int_eq(wr.r.status, LK_LIMIT);
	ck_assert_int_eq(wr.nqueued, 0);
	locks_client_free(w);
	env_end(&e);
}
END_TEST

Suite *
waiter_suite(void)
{
	Suite *s = suite_create("waiter");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_granted_to_its_owner);
	tcase_add_test(tc, test_queued_then_granted);
	tcase_add_test(tc, test_withdrawn_grant_is_given_back);
	tcase_add_test(tc, test_owner_limits);
	suite_add_tcase(s, tc);
	return s;
}
