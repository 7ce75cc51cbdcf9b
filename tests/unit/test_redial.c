/*
 * test_redial.c - the reconnect policy (daemon/base/redial.c).
 *
 * The waits a connection that keeps failing goes through (doubling from
 * min_ms, capped at max_ms), their reset when it comes up, the "loud
 * once, then quiet" flag its owner logs by, and the retry timer itself,
 * on a real event base.
 */
#include <event2/event.h>

#include "redial.h"
#include "suites.h"

static int retries;

static void
count_retry(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	retries++;
}

START_TEST(test_backoff_sequence)
{
	static const long want[] = { 50, 100, 200, 400, 800, 1600, 2000,
	    2000, 2000 };
	struct event_base *base = event_base_new();
	struct redial r;

	redial_init(&r, base, count_retry, NULL, REDIAL_MIN_MS, REDIAL_MAX_MS);
	ck_assert(!redial_pending(&r));
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		ck_assert_int_eq(redial_failed(&r, NULL), want[i]);
		ck_assert(redial_pending(&r));
	}
	redial_free(&r);
	event_base_free(base);
}
END_TEST

/* Up: the next failure waits min_ms again; and an odd cap is kept. */
START_TEST(test_reset_on_up)
{
	struct event_base *base = event_base_new();
	struct redial r;

	redial_init(&r, base, count_retry, NULL, 10, 35);
	ck_assert_int_eq(redial_failed(&r, NULL), 10);
	ck_assert_int_eq(redial_failed(&r, NULL), 20);
	ck_assert_int_eq(redial_failed(&r, NULL), 35);
	ck_assert_int_eq(redial_failed(&r, NULL), 35);
	ck_assert_int_eq(redial_ok(&r), 1);	/* it had been failing */
	ck_assert_int_eq(redial_ok(&r), 0);
	ck_assert_int_eq(redial_failed(&r, NULL), 10);
	ck_assert_int_eq(redial_failed(&r, NULL), 20);
	/* a hint to try now: quick again, though not up */
	redial_reset(&r);
	ck_assert_int_eq(redial_failed(&r, NULL), 10);
	redial_free(&r);
	event_base_free(base);
}
END_TEST

/* Loud on the first failure since up (or since made), quiet after it. */
START_TEST(test_quiet_logging)
{
	struct event_base *base = event_base_new();
	struct redial r;
	int loud = -1;

	redial_init(&r, base, count_retry, NULL, REDIAL_MIN_MS, REDIAL_MAX_MS);
	redial_failed(&r, &loud);
	ck_assert_int_eq(loud, 1);
	for (int i = 0; i < 5; i++) {
		redial_failed(&r, &loud);
		ck_assert_int_eq(loud, 0);
	}
	redial_reset(&r);		/* not up: stays quiet */
	redial_failed(&r, &loud);
	ck_assert_int_eq(loud, 0);
	redial_ok(&r);
	redial_failed(&r, &loud);
	ck_assert_int_eq(loud, 1);
	redial_failed(&r, &loud);
	ck_assert_int_eq(loud, 0);
	/* let go: quiet from now on, no retry armed */
	redial_ok(&r);
	redial_cancel(&r);
	redial_idle(&r);
	ck_assert(!redial_pending(&r));
	redial_failed(&r, &loud);
	ck_assert_int_eq(loud, 0);
	redial_free(&r);
	event_base_free(base);
}
END_TEST

/* The retry is a timer that calls the owner back once per failure, and
 * a cancelled one does not. */
START_TEST(test_retry_fires)
{
	struct event_base *base = event_base_new();
	struct redial r;

	retries = 0;
	redial_init(&r, base, count_retry, NULL, 1, 4);
	redial_failed(&r, NULL);
	ck_assert_int_eq(event_base_loop(base, EVLOOP_ONCE), 0);
	ck_assert_int_eq(retries, 1);
	ck_assert(!redial_pending(&r));
	redial_failed(&r, NULL);
	redial_cancel(&r);
	ck_assert(!redial_pending(&r));
	ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 1);
	ck_assert_int_eq(retries, 1);
	redial_free(&r);
	event_base_free(base);
}
END_TEST

Suite *
redial_suite(void)
{
	Suite *s = suite_create("redial");
	TCase *tc = tcase_create("policy");

	tcase_add_test(tc, test_backoff_sequence);
	tcase_add_test(tc, test_reset_on_up);
	tcase_add_test(tc, test_quiet_logging);
	tcase_add_test(tc, test_retry_fires);
	suite_add_tcase(s, tc);
	return s;
}
