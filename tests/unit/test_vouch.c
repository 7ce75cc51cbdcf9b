/*
 * test_vouch.c - the Sentinel lease's arithmetic (daemon/vouch.c).
 *
 * Answers to SENTINEL MASTER written by hand: how long one vouches
 * (down-after less the sentinel's own s_down clock: the oldest unanswered
 * ping, or with its link down the last good reply), which flags vouch
 * for nothing, and how many answers a lease needs (a majority, more when
 * the quorum is below one), at which epoch, naming which master.
 */
#include <string.h>

#include "addr.h"
#include "vouch.h"
#include "suites.h"

static struct addr
ep(const char *text)
{
	struct addr a;
	char err[160];

	ck_assert_int_eq(addr_parse_endpoint(text, &a, err, sizeof err), 0);
	return a;
}

/* A healthy answer: sent at 1000, down-after 5000, nothing pending. */
static struct vouch_answer
answer(const char *master, long long epoch)
{
	struct vouch_answer a = {
		.valid = 1, .sent_ms = 1000, .down_after_ms = 5000,
		.ping_sent_ms = 0, .ok_reply_ms = 300, .epoch = epoch,
		.quorum = 2, .flags = VOUCH_F_MASTER, .master = ep(master),
	};

	return a;
}

START_TEST(test_flags)
{
	ck_assert_uint_eq(vouch_flags("master"), VOUCH_F_MASTER);
	ck_assert_uint_eq(vouch_flags("s_down,master"),
	    VOUCH_F_MASTER | VOUCH_F_DOWN);
	ck_assert_uint_eq(vouch_flags("master,o_down"),
	    VOUCH_F_MASTER | VOUCH_F_DOWN);
	ck_assert_uint_eq(vouch_flags("master,failover_in_progress"),
	    VOUCH_F_MASTER | VOUCH_F_DOWN | VOUCH_F_FAILOVER);
	ck_assert_uint_eq(vouch_flags("master,disconnected"),
	    VOUCH_F_MASTER | VOUCH_F_DISCONNECTED);
	ck_assert_uint_eq(vouch_flags("master_down"), 0);	/* not "master" */
	ck_assert_uint_eq(vouch_flags("slave"), 0);
	ck_assert_uint_eq(vouch_flags(""), 0);
}
END_TEST

/* One answer: from the send, down-after less the sentinel's s_down clock
 * less the margin. */
START_TEST(test_until)
{
	struct vouch_answer a = answer("10.0.0.1:6379", 3);

	/* no ping pending: its next ping, after the answer, starts the
	 * clock; the last good reply's age does not count */
	ck_assert_int_eq(vouch_until(&a, 0), 1000 + 5000 - VOUCH_MARGIN_MS);
	a.ping_sent_ms = 800;		/* a ping unanswered for 800 ms */
	ck_assert_int_eq(vouch_until(&a, 0), 1000 + 5000 - 800 -
	    VOUCH_MARGIN_MS);
	a.ping_sent_ms = 0;		/* link down, no ping pending: */
	a.flags |= VOUCH_F_DISCONNECTED;	/* since the last good reply */
	ck_assert_int_eq(vouch_until(&a, 0), 1000 + 5000 - 300 -
	    VOUCH_MARGIN_MS);
	a.flags = VOUCH_F_MASTER;
	ck_assert_int_eq(vouch_until(&a, 2000), 1000 + 2000);	/* capped */
	ck_assert_int_eq(vouch_until(&a, 9000), 1000 + 5000 -
	    VOUCH_MARGIN_MS);
	a.flags |= VOUCH_F_DOWN;	/* flagged: nothing */
	ck_assert_int_le(vouch_until(&a, 0), a.sent_ms);
	a.flags = 0;			/* not reported as a master */
	ck_assert_int_le(vouch_until(&a, 0), a.sent_ms);
	a = answer("10.0.0.1:6379", 3);
	a.valid = 0;
	ck_assert_int_le(vouch_until(&a, 0), a.sent_ms);
	/* a ping pending longer than down-after: past already */
	a = answer("10.0.0.1:6379", 3);
	a.ping_sent_ms = 6000;
	ck_assert_int_lt(vouch_until(&a, 0), a.sent_ms);
}
END_TEST

/* Three sentinels, quorum 2: two must vouch; the lease ends with the
 * second latest answer. */
START_TEST(test_majority)
{
	struct addr m = ep("10.0.0.1:6379");
	struct vouch_answer a[3] = { answer("10.0.0.1:6379", 3),
	    answer("10.0.0.1:6379", 3), answer("10.0.0.1:6379", 3) };
	char why[160];

	a[0].ping_sent_ms = 100;	/* ends at 5800 */
	a[1].ping_sent_ms = 400;	/* 5500 */
	a[2].ping_sent_ms = 900;	/* 5000 */
	ck_assert_int_eq(vouch_lease(a, 3, 3, &m, 1500, 0, why, sizeof why),
	    5500);
	a[0].valid = 0;			/* one silent: the other two */
	ck_assert_int_eq(vouch_lease(a, 3, 3, &m, 1500, 0, why, sizeof why),
	    5000);
	a[1].flags |= VOUCH_F_DOWN;	/* and one flags it down: none */
	ck_assert_int_eq(vouch_lease(a, 3, 3, &m, 1500, 0, why, sizeof why),
	    0);
	ck_assert_ptr_nonnull(strstr(why, "1 of the 2 sentinels needed"));
	/* answers that have run out count for nothing */
	a[0].valid = 1;
	a[1].flags = VOUCH_F_MASTER;
	ck_assert_int_eq(vouch_lease(a, 3, 3, &m, 5600, 0, why, sizeof why),
	    0);
	/* no master connection: no lease */
	ck_assert_int_eq(vouch_lease(a, 3, 3, NULL, 1500, 0, why, sizeof why),
	    0);
	ck_assert_ptr_nonnull(strstr(why, "no master"));
}
END_TEST

/* A quorum below a majority: so many must vouch that those who do not
 * are fewer than a quorum (quorum 1 of 3: all three). */
START_TEST(test_small_quorum)
{
	struct addr m = ep("10.0.0.1:6379");
	struct vouch_answer a[3] = { answer("10.0.0.1:6379", 3),
	    answer("10.0.0.1:6379", 3), answer("10.0.0.1:6379", 3) };

	a[1].quorum = 1;
	ck_assert_int_gt(vouch_lease(a, 3, 3, &m, 1500, 0, NULL, 0), 0);
	a[2].valid = 0;
	ck_assert_int_eq(vouch_lease(a, 3, 3, &m, 1500, 0, NULL, 0), 0);
	/* five sentinels, quorum 3: three (a majority) */
	{
		struct vouch_answer b[5];

		for (int i = 0; i < 5; i++) {
			b[i] = answer("10.0.0.1:6379", 3);
			b[i].quorum = 3;
		}
		b[0].valid = b[1].valid = 0;
		ck_assert_int_gt(vouch_lease(b, 5, 3, &m, 1500, 0, NULL, 0),
		    0);
		b[2].valid = 0;
		ck_assert_int_eq(vouch_lease(b, 5, 3, &m, 1500, 0, NULL, 0),
		    0);
	}
}
END_TEST

/* Only answers at the newest epoch naming our master count; sentinels
 * that name different masters at one epoch give no lease. */
START_TEST(test_epochs_and_masters)
{
	struct addr m = ep("10.0.0.1:6379");
	struct vouch_answer a[3] = { answer("10.0.0.1:6379", 3),
	    answer("10.0.0.1:6379", 3), answer("10.0.0.2:6379", 4) };
	char why[160];

	/* the newest epoch is 4, and it names another master */
	ck_assert_int_eq(vouch_lease(a, 3, 4, &m, 1500, 0, why, sizeof why),
	    0);
	/* at epoch 3, two name ours (the third is of epoch 4: ignored) */
	ck_assert_int_gt(vouch_lease(a, 3, 3, &m, 1500, 0, why, sizeof why),
	    0);
	/* following the new master: one of 3 vouches */
	{
		struct addr n = ep("10.0.0.2:6379");

		ck_assert_int_eq(vouch_lease(a, 3, 4, &n, 1500, 0, why,
		    sizeof why), 0);
		a[1] = answer("10.0.0.2:6379", 4);
		ck_assert_int_gt(vouch_lease(a, 3, 4, &n, 1500, 0, why,
		    sizeof why), 0);
	}
	/* two masters at one epoch: no lease, whichever is followed */
	a[0] = answer("10.0.0.1:6379", 4);
	ck_assert_int_eq(vouch_lease(a, 3, 4, &m, 1500, 0, why, sizeof why),
	    0);
	ck_assert_ptr_nonnull(strstr(why, "different masters"));
	/* ... unless one is the failover's leader, which raised the epoch
	 * at the promotion and names the old master until the replicas are
	 * moved: it abstains, and the two naming the new master vouch */
	{
		struct addr n = ep("10.0.0.2:6379");

		a[1] = answer("10.0.0.2:6379", 4);
		a[0].flags |= VOUCH_F_DOWN | VOUCH_F_FAILOVER;
		ck_assert_int_gt(vouch_lease(a, 3, 4, &n, 1500, 0, why,
		    sizeof why), 0);
		ck_assert_int_eq(vouch_lease(a, 3, 4, &m, 1500, 0, why,
		    sizeof why), 0);
		ck_assert_ptr_null(strstr(why, "different masters"));
		/* without the flag the same answers give nothing */
		a[0].flags = VOUCH_F_MASTER;
		ck_assert_int_eq(vouch_lease(a, 3, 4, &n, 1500, 0, why,
		    sizeof why), 0);
	}
	/* [::1] and its longer spelling are one address */
	{
		struct addr v6 = ep("[::1]:6379");
		struct vouch_answer b[1] = { answer("[0:0:0:0:0:0:0:1]:6379",
		    1) };

		ck_assert_int_gt(vouch_lease(b, 1, 1, &v6, 1500, 0, NULL, 0),
		    0);
	}
}
END_TEST

Suite *
vouch_suite(void)
{
	Suite *s = suite_create("vouch");
	TCase *tc = tcase_create("lease");

	tcase_add_test(tc, test_flags);
	tcase_add_test(tc, test_until);
	tcase_add_test(tc, test_majority);
	tcase_add_test(tc, test_small_quorum);
	tcase_add_test(tc, test_epochs_and_masters);
	suite_add_tcase(s, tc);
	return s;
}
