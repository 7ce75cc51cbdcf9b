/*
 * test_handoff.c - RELEASE with a local waiter (daemon/locks/handoff.c):
 * the hand-off in one script call, fairness to a waiter on another
 * broker, and the early hand-off (a pass from tokens set aside, Redis
 * brought up to date behind it); against the fake store (locks_env.h).
 */
#include <string.h>

#include "locks_env.h"
#include "suites.h"

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

/* --- local hand-offs without a round trip (early hand-off) ----------- */

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

/* A release sent while its hold's pass was in flight, and the pass then
 * given up on (a cluster slot migrating: TRYAGAIN until the call's time
 * ran out): Redis still shows the hold it was handed from, which is no
 * loss.  The pass goes again first and the release behind it. */
START_TEST(test_release_behind_a_pass_given_up)
{
	struct env e;
	struct fake_call *pass, *fc;
	struct locks_stats s;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, 10);
	acquire(&e, 1, "k", 10000, 5000);
	acquire(&e, 2, "k", 10000, 5000);
	release(&e, 0, "k");
	fake_grant_done(take(&e, FAKE_HANDOFF), 1, 1, 11, 32);
	release(&e, 1, "k");			/* early: to 2, token 12 */
	ck_assert_int_eq(e.rec[2].n, 12);
	pass = take(&e, FAKE_PASS);		/* in flight */
	release(&e, 2, "k");			/* nobody waits: to Redis */
	fc = take(&e, FAKE_RELEASE);
	ck_assert_str_eq(fc->value, value_of(2, 12));
	fake_pass_done(pass, 0, 0);		/* given up */
	fake_release_done(fc, 1, STORE_TAKEN);	/* 1's value there */
	ck_assert_int_eq(e.rec[2].nlost, 0);
	ck_assert_int_ne(e.rec[2].status, LK_LOST);
	fc = take(&e, FAKE_PASS);		/* the pass first ... */
	ck_assert_str_eq(fc->value, value_of(2, 12));
	fake_pass_done(fc, 1, 1);
	fc = take(&e, FAKE_RELEASE);		/* ... then the release */
	ck_assert_str_eq(fc->value, value_of(2, 12));
	fake_release_done(fc, 1, STORE_DONE);
	ck_assert_int_eq(e.rec[2].status, LK_OK);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.lost, 0);
	ck_assert_uint_eq(locks_held(e.cl[2], NULL, NULL), 0);
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

Suite *
locks_handoff_suite(void)
{
	Suite *s = suite_create("locks-handoff");
	TCase *tc;

	tc = tcase_create("handoff");
	tcase_add_test(tc, test_handoff_releaser_lost);
	tcase_add_test(tc, test_handoff_to_gone_waiter);
	tcase_add_test(tc, test_fair_release_after_handoffs);
	tcase_add_test(tc, test_no_wanted_keeps_handing_off);
	suite_add_tcase(s, tc);

	tc = tcase_create("early-handoff");
	tcase_add_test(tc, test_pass_answers_at_once);
	tcase_add_test(tc, test_pass_finds_key_gone);
	tcase_add_test(tc, test_pass_only_while_redis_keeps_the_hold);
	tcase_add_test(tc, test_pass_unanswered_connection_lost);
	tcase_add_test(tc, test_pass_refused);
	tcase_add_test(tc, test_release_behind_a_pass_given_up);
	tcase_add_test(tc, test_pass_refused_until_jeopardy);
	tcase_add_test(tc, test_no_pass_from_a_grace_session);
	tcase_add_test(tc, test_pass_at_session_end);
	suite_add_tcase(s, tc);
	return s;
}
