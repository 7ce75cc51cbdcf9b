/*
 * test_grant.c - ACQUIRE on the lock table (daemon/locks/grant.c and
 * waiters.c): one attempt at a time per key, the FIFO of waiters, waits
 * on keys held elsewhere and their deadlines, clients that leave (orphan
 * grants), and the limits; against the fake store (locks_env.h).
 */
#include <string.h>

#include "locks_env.h"
#include "suites.h"

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

/* --- waiting on a key held elsewhere ------------------------------- */

/* A holder that died without releasing: retried when its PTTL runs out. */
START_TEST(test_remote_busy_retry_at_pttl)
{
	struct env e;

	env_start(&e, NULL);
	queue_waiter(&e, 0, "k", 10000, 20);
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 1);
	run_ms(&e, 100);
	ck_assert_uint_eq(calls(&e, FAKE_ACQUIRE), 2);	/* exactly one */
	ck_assert_int_eq(e.rec[0].nreplies, 0);
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 3);
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	env_end(&e);
}
END_TEST

/*
 * An OK after a Redis call or a wait carries its wait (lk_result.waited,
 * waited_us: what acquire_wait counts, and what the session counts for
 * its app); a reentrant OK, answered at once, carries none.
 */
START_TEST(test_grant_reports_its_wait)
{
	struct env e;
	struct locks_stats s;

	env_start(&e, NULL);
	hold(&e, 0, "k", 5000, 7);
	ck_assert_int_eq(e.rec[0].waited, 1);
	ck_assert_int_ge(e.rec[0].waited_us, 0);
	acquire(&e, 0, "k", 0, 5000);			/* reentrant */
	ck_assert_int_eq(e.rec[0].status, LK_OK);
	ck_assert_int_eq(e.rec[0].waited, 0);
	queue_waiter(&e, 1, "w", 10000, 20);		/* held elsewhere */
	run_ms(&e, 60);					/* retried at the PTTL */
	fake_acquire_done(take(&e, FAKE_ACQUIRE), 1, 1, 8);
	ck_assert_int_eq(e.rec[1].status, LK_OK);
	ck_assert_int_eq(e.rec[1].waited, 1);
	ck_assert_int_ge(e.rec[1].waited_us, 20000);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.acquire_wait.n, 2);		/* the same two */
	ck_assert_int_ge(s.acquire_wait.sum_us, e.rec[1].waited_us);
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
	queue_waiter(&e, 0, "k", 50, 20000);
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

/* --- clients that go away ------------------------------------------ */

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

/* --- limits ---------------------------------------------------------- */

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

Suite *
locks_grant_suite(void)
{
	Suite *s = suite_create("locks-grant");
	TCase *tc;

	tc = tcase_create("acquire-release");
	tcase_add_test(tc, test_acquire_free_key);
	tcase_add_test(tc, test_acquire_ttl_default_and_clamp);
	tcase_add_test(tc, test_reentrant);
	tcase_add_test(tc, test_same_key_fifo);
	tcase_add_test(tc, test_wait0_busy_local);
	tcase_add_test(tc, test_wait0_busy_remote);
	suite_add_tcase(s, tc);

	tc = tcase_create("waiting");
	tcase_add_test(tc, test_grant_reports_its_wait);
	tcase_add_test(tc, test_remote_busy_retry_at_pttl);
	tcase_add_test(tc, test_wait_deadline);
	tcase_add_test(tc, test_refused_attempt_keeps_place);
	suite_add_tcase(s, tc);

	tc = tcase_create("clients-gone");
	tcase_add_test(tc, test_freed_during_attempt_orphan);
	tcase_add_test(tc, test_orphan_then_next_waiter);
	tcase_add_test(tc, test_freed_while_holding_two);
	suite_add_tcase(s, tc);

	tc = tcase_create("limits");
	tcase_add_test(tc, test_limit_locks_per_session);
	tcase_add_test(tc, test_limit_waiters);
	suite_add_tcase(s, tc);
	return s;
}
