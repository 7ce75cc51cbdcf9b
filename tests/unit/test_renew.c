/*
 * test_renew.c - renewal on the lock table (daemon/locks/renew.c): holds
 * renewed in batches, what a renewal finds lost (and its cause), and the
 * jeopardy rule: a hold whose last confirmed renewal, counted from its
 * send, plus its TTL has passed is lost at once; against the fake store
 * (locks_env.h).
 */
#include <string.h>

#include "locks_env.h"
#include "suites.h"

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

/* --- jeopardy: the broker's own count of a hold's TTL -------------- */

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

Suite *
locks_renew_suite(void)
{
	Suite *s = suite_create("locks-renew");
	TCase *tc;

	tc = tcase_create("renewal");
	tcase_add_test(tc, test_renew_batch);
	tcase_add_test(tc, test_renew_lost);
	tcase_add_test(tc, test_renew_every_holder);
	tcase_add_test(tc, test_renew_all_holders_lost);
	suite_add_tcase(s, tc);

	tc = tcase_create("jeopardy");
	tcase_add_test(tc, test_jeopardy_tells_holder_at_once);
	tcase_add_test(tc, test_jeopardy_counts_from_confirmed_send);
	tcase_add_test(tc, test_lost_causes);
	suite_add_tcase(s, tc);
	return s;
}
