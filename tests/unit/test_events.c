/*
 * test_events.c - what the store tells the lock table
 * (daemon/locks/events.c): a release elsewhere wakes the waiters here
 * (once, never lost, and a detached session's hold is checked at once);
 * Redis going away keeps waiters queued until it is back or their wait
 * is over; against the fake store (locks_env.h).
 */
#include <string.h>

#include "locks_env.h"
#include "suites.h"
#include "util.h"

/* Refused with a PTTL: silent until the pub/sub wake, then one attempt. */
START_TEST(test_remote_busy_waits_for_wake)
{
	struct env e;

	env_start(&e, NULL);
	queue_waiter(&e, 0, "k", 10000, 20000);
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

/*
 * Lost wake-up (fixed with struct lock's wakes count): the pub/sub
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

/* A wake while two readers' attempts are in flight retries each "held"
 * answer once, not for ever (it was a hot
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

/* A release message makes a detached (grace) session's read
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

/* --- Redis down -------------------------------------------------------- */

/*
 * A failover must not cost a waiter its turn.  Waiters stay
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
	queue_waiter(&e, 4, "k3", 10000, 20000);	/* held elsewhere */
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
	queue_waiter(&e, 0, "k", 50, 20000);
	fake_store_set_up(e.st, 0);
	locks_store_down(e.lt);
	run_ms(&e, 200);
	ck_assert_int_eq(e.rec[0].nreplies, 1);
	ck_assert_int_eq(e.rec[0].status, LK_UNAVAILABLE);
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

/*
 * A one-try ACQUIRE that comes while Redis's connection is being made
 * (store_key_coming) waits for it: tried once when it is up (no wait
 * announced, BUSY at once if held), answered ERR UNAVAILABLE as soon as
 * the attempt fails, or when redis_timeout_ms (what coming says) ran out.
 */
START_TEST(test_one_try_waits_for_the_connection_being_made)
{
	struct env e;
	struct fake_call *fc;
	int64_t t0;

	env_start(&e, NULL);
	fake_store_set_up(e.st, 0);
	fake_store_set_coming(e.st, 1000);
	acquire(&e, 0, "k", 0, 5000);
	acquire(&e, 1, "j", 0, 5000);
	ck_assert_int_eq(e.rec[0].nreplies, 0);		/* it waits */
	ck_assert_int_eq(e.rec[1].nreplies, 0);
	ck_assert_uint_eq(calls(&e, FAKE_ANY), 0);
	fake_store_set_up(e.st, 1);
	locks_store_up(e.lt);
	fc = take(&e, FAKE_ACQUIRE);
	ck_assert_str_eq(fc->key, "k");
	ck_assert_int_eq(fc->will_wait, 0);		/* one try */
	fake_acquire_done(fc, 1, 0, 20000);		/* held elsewhere */
	ck_assert_int_eq(e.rec[0].status, LK_BUSY);	/* at once */
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 9);
	ck_assert_int_eq(e.rec[1].status, LK_OK);
	/* the attempt fails: answered then, not at its deadline */
	fake_store_set_up(e.st, 0);
	acquire(&e, 2, "m", 0, 5000);
	ck_assert_int_eq(e.rec[2].nreplies, 0);
	fake_store_set_coming(e.st, 0);
	locks_store_down(e.lt);
	ck_assert_int_eq(e.rec[2].nreplies, 1);
	ck_assert_int_eq(e.rec[2].status, LK_UNAVAILABLE);
	/* no answer within what coming allows: ERR UNAVAILABLE then */
	fake_store_set_coming(e.st, 80);
	t0 = now_ms();
	acquire(&e, 3, "m", 0, 5000);
	run_ms(&e, 300);
	ck_assert_int_eq(e.rec[3].nreplies, 1);
	ck_assert_int_eq(e.rec[3].status, LK_UNAVAILABLE);
	ck_assert_int_ge(e.rec[3].at_ms - t0, 75);
	ck_assert_int_lt(e.rec[3].at_ms - t0, 290);
	/* down, not being made: refused at once, as before */
	fake_store_set_coming(e.st, 0);
	acquire(&e, 4, "m", 0, 5000);
	ck_assert_int_eq(e.rec[4].nreplies, 1);
	ck_assert_int_eq(e.rec[4].status, LK_UNAVAILABLE);
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

/* --- remote grants: a recorded waiter's attempt and its record's grant --- */

/* Client c waits for key held elsewhere and is recorded (fake records
 * on); returns its wait id. */
static unsigned long long
recorded_waiter(struct env *e, int c, const char *key)
{
	struct fake_call *fc;
	unsigned long long wid;

	fake_store_set_records(e->st, 1);
	queue_waiter(e, c, key, 10000, 20000);
	fc = take(e, FAKE_RWAIT);
	ck_assert_int_eq(fc->will_wait, 1);		/* record */
	wid = (unsigned long long)fc->seen;
	fake_release_done(fc, 1, STORE_DONE);
	return wid;
}

/* A wake sends the recorded waiter's attempt, which says it is recorded;
 * the grant's message (token) comes while it is in flight. */
static void
grant_during_attempt(struct env *e, unsigned long long wid, long long token)
{
	locks_store_released(e->lt, "k", 1);		/* a wake */
	ck_assert_uint_eq(pending(e, FAKE_ACQUIRE), 1);
	ck_assert_int_eq(fake_store_peek(e->st, FAKE_ACQUIRE, 0)->will_wait,
	    STORE_WAIT_RECORDED);
	locks_store_granted(e->lt, "k", 1, wid, ids[0], strlen(ids[0]), token,
	    wall_ms());
	ck_assert_int_eq(e->rec[0].nreplies, 0);	/* decided later */
}

/*
 * The grant's message comes while the waiter's attempt (sent on a wake)
 * is in flight, and the attempt then meets the grant in Redis: the
 * attempt says it is recorded, its answer (STORE_RECORD_GRANTED) writes
 * nothing, and the waiter holds the grant's token.  Before, the grant was
 * released as an orphan and the attempt took the key anew: the client
 * held another token than the one watchers were told.
 */
START_TEST(test_grant_heard_with_attempt_in_flight)
{
	struct env e;
	unsigned long long wid;

	env_start(&e, NULL);
	wid = recorded_waiter(&e, 0, "k");
	grant_during_attempt(&e, wid, 555);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, STORE_RECORD_GRANTED,
	    1900);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 555);
	ck_assert_uint_eq(pending(&e, FAKE_RELEASE), 0);	/* no orphan */
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);
	env_end(&e);
}
END_TEST

/* The attempt ran in Redis before the release (held), the grant's
 * message came before its answer: the grant is still the waiter's. */
START_TEST(test_grant_heard_before_a_held_answer)
{
	struct env e;
	unsigned long long wid;

	env_start(&e, NULL);
	wid = recorded_waiter(&e, 0, "k");
	grant_during_attempt(&e, wid, 556);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 0, 20000);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 556);
	ck_assert_uint_eq(pending(&e, FAKE_RELEASE), 0);
	ck_assert_uint_eq(pending(&e, FAKE_RWAIT), 0);	/* not recorded anew */
	env_end(&e);
}
END_TEST

/* STORE_RECORD_GRANTED first: the waiter waits for the grant's message;
 * should none come, it tries again when the grant runs out (pttl). */
START_TEST(test_record_granted_waits_for_the_message)
{
	struct env e;
	unsigned long long wid;

	env_start(&e, NULL);
	wid = recorded_waiter(&e, 0, "k");
	locks_store_released(e.lt, "k", 1);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, STORE_RECORD_GRANTED, 30);
	ck_assert_int_eq(e.rec[0].nreplies, 0);
	run_ms(&e, 10);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);	/* it waits */
	run_ms(&e, 50);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 1);	/* ran out */
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 600);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].n, 600);
	(void)wid;
	env_end(&e);
}
END_TEST

Suite *
locks_events_suite(void)
{
	Suite *s = suite_create("locks-events");
	TCase *tc;

	tc = tcase_create("wakes");
	tcase_add_test(tc, test_remote_busy_waits_for_wake);
	tcase_add_test(tc, test_wake_during_attempt_not_lost);
	tcase_add_test(tc, test_wake_with_two_attempts_retries_once);
	tcase_add_test(tc, test_release_checks_detached_read_at_once);
	suite_add_tcase(s, tc);

	tc = tcase_create("remote-grants");
	tcase_add_test(tc, test_grant_heard_with_attempt_in_flight);
	tcase_add_test(tc, test_grant_heard_before_a_held_answer);
	tcase_add_test(tc, test_record_granted_waits_for_the_message);
	suite_add_tcase(s, tc);

	tc = tcase_create("redis-down");
	tcase_add_test(tc, test_store_down_keeps_waiters_queued);
	tcase_add_test(tc, test_wait_runs_out_while_down);
	tcase_add_test(tc, test_store_not_up);
	tcase_add_test(tc, test_store_not_up_wait_runs_out);
	tcase_add_test(tc, test_store_refuses_request);
	tcase_add_test(tc, test_one_try_waits_for_the_connection_being_made);
	suite_add_tcase(s, tc);
	return s;
}
