/*
 * test_kinds.c - shared locks and semaphores on the lock table: readers
 * tried together, FIFO across kinds (a waiting writer is not overtaken,
 * here or, by its mark in Redis, on another broker: daemon/locks/marks.c),
 * a semaphore's limit, kinds that do not mix; against the fake store
 * (locks_env.h).
 */
#include <string.h>

#include "locks_env.h"
#include "suites.h"

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

/* ... but only for a while, and not past the writer giving up: the
 * announcement holds the readers here back WRITER_HINT_MS (1 s), and a
 * release message for the key (the writer's broker removed its mark and
 * told the others) ends it at once.  Then readers ask Redis, whose marks
 * decide. */
START_TEST(test_remote_writer_forgotten)
{
	struct env e;

	env_start(&e, NULL);
	acquire_k(&e, 0, "k", LK_SHARED, 1000);
	grant(&e, 0, LK_SHARED, 10);
	locks_store_wanted(e.lt, "k", 1, 1, 0);
	acquire_k(&e, 1, "k", LK_SHARED, 5000);
	acquire_k(&e, 2, "k", LK_SHARED, 0);	/* one try: held back */
	ck_assert_int_eq(e.rec[2].status, LK_BUSY);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	locks_store_released(e.lt, "k", 1);	/* the writer gave up */
	grant(&e, 1, LK_SHARED, 11);
	/* heard again, then nothing: the waiting reader asks Redis when the
	 * hint runs out, not when the reads here end */
	locks_store_wanted(e.lt, "k", 1, 1, 0);
	acquire_k(&e, 3, "k", LK_SHARED, 5000);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);
	run_ms(&e, 700);
	ck_assert_uint_eq(pending(&e, FAKE_ACQUIRE), 0);
	run_ms(&e, 500);
	grant(&e, 3, LK_SHARED, 12);
	acquire_k(&e, 4, "k", LK_SHARED, 0);	/* one try: asks Redis */
	grant(&e, 4, LK_SHARED, 13);
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

/* A writer told "held elsewhere" (by readers there) leaves;
 * the reader behind it tries at once instead of waiting for a wake. */
START_TEST(test_reader_behind_a_gone_writer_tries_at_once)
{
	struct env e;

	env_start(&e, NULL);
	queue_waiter(&e, 0, "k", 5000, 20000);
	acquire_k(&e, 1, "k", LK_SHARED, 5000);
	ck_assert_uint_eq(pending(&e, FAKE_ANY), 0);	/* behind the writer */
	env_free_client(&e, 0);
	grant(&e, 1, LK_SHARED, 10);
	env_end(&e);
}
END_TEST

/* A reader or a permit waiter announced elsewhere ("+") does
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
locks_kinds_suite(void)
{
	Suite *s = suite_create("locks-kinds");
	TCase *tc;

	tc = tcase_create("kinds");
	tcase_add_test(tc, test_shared_tried_together);
	tcase_add_test(tc, test_writer_not_overtaken);
	tcase_add_test(tc, test_remote_writer_holds_back_readers);
	tcase_add_test(tc, test_remote_writer_forgotten);
	tcase_add_test(tc, test_semaphore_limit_and_handoff);
	tcase_add_test(tc, test_kind_mismatch);
	tcase_add_test(tc, test_reentrant_kinds);
	tcase_add_test(tc, test_reader_behind_a_gone_writer_tries_at_once);
	tcase_add_test(tc, test_remote_reader_does_not_hold_back_readers);
	tcase_add_test(tc, test_gone_holder_frees_permit);
	tcase_add_test(tc, test_reader_carries_the_writers_it_came_after);
	suite_add_tcase(s, tc);
	return s;
}
