/*
 * test_resumable.c - the locks of a grace session (resumable: its holds
 * may be taken over by a RESUME on another broker): a hold found gone
 * waits for the session's record (hold_doubt, locks_doubt_settled), and a
 * takeover releases only the grants the record may not list
 * (locks_client_taken); against the fake store (locks_env.h).
 */
#include <string.h>

#include "locks_env.h"
#include "suites.h"

static int doubts;

static int
on_doubt(void *arg)
{
	(void)arg;
	doubts++;
	return 1;
}

static const struct lk_client_ops grace_ops = { on_reply, on_lost, NULL,
    on_doubt, NULL, NULL };

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
 * The hold-time histogram counts a hold when it ends here (a RELEASE),
 * from its grant; holds a RESUME elsewhere took over go on in another
 * session and are not counted when they end here.
 */
START_TEST(test_hold_time_counts_ended_holds_not_taken_ones)
{
	struct env e;
	struct locks_stats s;

	env_start(&e, NULL);
	grace_client(&e);
	hold(&e, 0, "a", 30000, 1);
	hold(&e, 0, "b", 30000, 2);
	locks_recorded(e.cl[0], "a", 1);
	locks_recorded(e.cl[0], "b", 1);
	hold(&e, 1, "c", 30000, 3);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.hold.n, 0);		/* held: not yet */
	run_ms(&e, 20);
	release(&e, 1, "c");
	fake_release_done(take(&e, FAKE_RELEASE), 1, 1);
	ck_assert_int_eq(e.rec[1].status, LK_OK);
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.hold.n, 1);
	ck_assert_int_ge(s.hold.sum_us, 20000);
	ck_assert_ptr_eq(histo_bounds(&s.hold), histo_hold_bounds_us);
	locks_client_taken(e.cl[0]);
	e.cl[0] = NULL;
	ck_assert_uint_eq(pending(&e, FAKE_RELEASE), 0);	/* recorded */
	locks_get_stats(e.lt, &s);
	ck_assert_uint_eq(s.hold.n, 1);
	env_end(&e);
}
END_TEST

Suite *
locks_resumable_suite(void)
{
	Suite *s = suite_create("locks-resumable");
	TCase *tc;

	tc = tcase_create("grace");
	tcase_add_test(tc, test_grace_hold_gone_waits_for_the_record);
	tcase_add_test(tc, test_grace_taken_releases_only_unrecorded_grants);
	tcase_add_test(tc, test_hold_time_counts_ended_holds_not_taken_ones);
	suite_add_tcase(s, tc);
	return s;
}
