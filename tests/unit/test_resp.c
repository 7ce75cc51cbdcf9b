/*
 * test_resp.c - what the store reads that is not a script's reply:
 * redisReply questions (daemon/store/resp.c), the names it shares with
 * the scripts and the wanted channel's messages (daemon/store/keys.c);
 * and what it writes: a command's RESP form and its numbers, held to
 * hiredis's own formatting and to snprintf's.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#include "fake_link.h"
#include "keys.h"
#include "resp.h"
#include "suites.h"

START_TEST(test_info_field)
{
	const char *info = "# Replication\r\nrole:master\r\n"
	    "master_replid:abc123\r\nmaster_replid2:0000\r\n";
	char out[8];

	resp_info_field(info, "role", out, sizeof out);
	ck_assert_str_eq(out, "master");
	resp_info_field(info, "master_replid", out, sizeof out);
	ck_assert_str_eq(out, "abc123");	/* not master_replid2's */
	resp_info_field(info, "master_replid2", out, sizeof out);
	ck_assert_str_eq(out, "0000");
	resp_info_field(info, "master", out, sizeof out);
	ck_assert_str_eq(out, "");		/* a name is a whole name */
	resp_info_field("role:a-very-long-role\r\n", "role", out, sizeof out);
	ck_assert_str_eq(out, "a-very-");	/* cut to fit */
}
END_TEST

START_TEST(test_field_and_kinds)
{
	redisReply *r = reply_arr(5, reply_str("ip"), reply_str("10.0.0.1"),
	    reply_str("config-epoch"), reply_int(7), reply_str("odd"));

	ck_assert_str_eq(resp_field(r, "ip")->str, "10.0.0.1");
	ck_assert_int_eq(resp_field(r, "config-epoch")->integer, 7);
	ck_assert_ptr_null(resp_field(r, "odd"));	/* no value after */
	ck_assert_ptr_null(resp_field(r, "10.0.0.1"));	/* a value */
	ck_assert(resp_is_int(r->element[3]));
	ck_assert(!resp_is_int(r->element[0]));
	ck_assert(!resp_is_int(NULL));
	ck_assert(resp_is_str(r->element[0]));
	ck_assert(resp_str_is(r->element[0], "ip"));
	ck_assert(!resp_str_is(r->element[0], "i"));
	ck_assert(!resp_str_is(NULL, "ip"));
	reply_free(r);
}
END_TEST

/* --- what the store writes ---------------------------------------------- */

START_TEST(test_numbers_as_snprintf_writes_them)
{
	static const long long v[] = { 0, 1, 9, 10, -1, -10, 99, 100,
	    1795853986898482LL, 9007199254740991LL, LLONG_MAX, LLONG_MIN,
	    LLONG_MIN + 1 };
	char got[FMT_LL_MAX], want[32];

	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		int n = fmt_ll(got, v[i]);

		snprintf(want, sizeof want, "%lld", v[i]);
		ck_assert_str_eq(got, want);
		ck_assert_int_eq(n, (int)strlen(want));
	}
}
END_TEST

/* resp_command's form of argv against hiredis's (its NUL included), and
 * its cut: the exact size fits, one byte less does not. */
static void
same_as_hiredis(int argc, const char **argv, const size_t *argvlen)
{
	char *want = NULL, *buf;
	long long wl = redisFormatCommandArgv(&want, argc, argv, argvlen);
	size_t cap;

	ck_assert_int_gt(wl, 0);
	cap = (size_t)wl + 1;		/* and its NUL */
	buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(resp_command(buf, cap, argc, argv, argvlen),
	    (size_t)wl);
	ck_assert(memcmp(buf, want, (size_t)wl + 1) == 0);	/* NUL too */
	ck_assert_uint_eq(resp_command(buf, cap - 1, argc, argv, argvlen),
	    0);
	free(buf);
	free(want);
}

START_TEST(test_commands_as_hiredis_writes_them)
{
	const char *one[] = { "PING" };
	const char *fcall[] = { "FCALL", "lean_0123456789abcdef", "5",
	    "bench:fence", "bench:lockdelay", "", "x\r\n$3\r\n*" };
	size_t onel[] = { 4 }, fcl[7];
	static char big[20000];
	const char *bigv[] = { "SET", "k", big };
	size_t bigl[] = { 3, 1, sizeof big };
	char buf[64];

	for (int i = 0; i < 7; i++)
		fcl[i] = strlen(fcall[i]);
	fcl[6]++;			/* a NUL inside: bytes, not a string */
	same_as_hiredis(1, one, onel);
	same_as_hiredis(7, fcall, fcl);
	memset(big, 'v', sizeof big);
	same_as_hiredis(3, bigv, bigl);
	/* a command past the buffer: 0, and the caller formats otherwise */
	ck_assert_uint_eq(resp_command(buf, sizeof buf, 3, bigv, bigl), 0);
}
END_TEST

/* --- names and wanted messages ------------------------------------------ */

#define ID "11111111-2222-3333-4444-555555555555"
#define OTHER "99999999-2222-3333-4444-555555555555"

static char got_key[64], got_from[STORE_ID_LEN + 1];
static int got, got_writer, got_queue, got_ask, got_to_me;
static long long got_stamp;
static unsigned got_n;
static long got_ms;

static void
on_wanted(void *arg, const char *key, size_t keylen, int writer,
    long long stamp, const char *from)
{
	(void)arg;
	got++;
	snprintf(got_key, sizeof got_key, "%.*s", (int)keylen, key);
	snprintf(got_from, sizeof got_from, "%.*s", STORE_ID_LEN, from);
	got_writer = writer;
	got_stamp = stamp;
}

static void
on_queue(void *arg, const char *from, const char *key, size_t keylen,
    unsigned n, long ms)
{
	(void)arg;
	got_queue++;
	snprintf(got_key, sizeof got_key, "%.*s", (int)keylen, key);
	snprintf(got_from, sizeof got_from, "%.*s", STORE_ID_LEN, from);
	got_n = n;
	got_ms = ms;
}

static void
on_ask(void *arg, const char *key, size_t keylen, int to_me)
{
	(void)arg;
	got_ask++;
	snprintf(got_key, sizeof got_key, "%.*s", (int)keylen, key);
	got_to_me = to_me;
}

static void
hear(const struct store_keys *k, const char *msg)
{
	struct store_hooks h = { .wanted = on_wanted, .queue = on_queue,
	    .ask = on_ask };

	got = got_queue = got_ask = 0;
	got_key[0] = '\0';
	keys_wanted_msg(k, &h, msg, strlen(msg));
}

START_TEST(test_names)
{
	struct store_keys k, c;

	keys_init(&k, "lb", ID, 0);
	keys_init(&c, "lb", NULL, 1);
	ck_assert_str_eq(k.lockpfx, "lb:lock:");
	ck_assert_uint_eq(k.lockpfxlen, 8);
	ck_assert_str_eq(k.sesspfx, "lb:session:");
	ck_assert_str_eq(k.writers, "lb:writers:");
	ck_assert_str_eq(k.channel, "lb:released");
	ck_assert_str_eq(k.wanted, "lb:wanted");
	ck_assert_str_eq(k.fence, "lb:fence");
	ck_assert_str_eq(k.tenure, "lb:tenure");
	ck_assert_str_eq(k.delay, "lb:lockdelay");
	ck_assert_str_eq(k.idsp, ID " ");
	ck_assert_str_eq(k.idplus, ID "+");
	/* cluster mode: per slot, the tag follows */
	ck_assert_str_eq(c.channel, "lb:released:{");
	ck_assert_str_eq(c.fence, "lb:fence:{");
	ck_assert_str_eq(c.lockpfx, "lb:lock:");
	ck_assert_uint_eq(strspn(c.idsp, "-"), STORE_ID_LEN);
	keys_free(&k);
	keys_free(&c);
}
END_TEST

START_TEST(test_wanted_messages)
{
	struct store_keys k;

	keys_init(&k, "lb", ID, 0);
	hear(&k, OTHER " some key");		/* a writer waits */
	ck_assert_int_eq(got, 1);
	ck_assert_str_eq(got_key, "some key");
	ck_assert_int_eq(got_writer, 1);
	ck_assert_int_eq(got_stamp, 0);
	hear(&k, OTHER "+k");			/* a reader, a permit */
	ck_assert_int_eq(got, 1);
	ck_assert_str_eq(got_key, "k");
	ck_assert_int_eq(got_writer, 0);
	hear(&k, OTHER "!1700000000123 k 2");	/* a writer's mark */
	ck_assert_int_eq(got, 1);
	ck_assert_str_eq(got_key, "k 2");
	ck_assert_int_eq(got_writer, 1);
	ck_assert_int_eq(got_stamp, 1700000000123LL);
	hear(&k, ID " mine");			/* our own: skipped */
	ck_assert_int_eq(got, 0);
	hear(&k, ID "!5 mine");
	ck_assert_int_eq(got, 0);
	/* other shapes: ignored */
	hear(&k, OTHER " ");
	ck_assert_int_eq(got, 0);
	hear(&k, OTHER "!0 k");			/* no stamp */
	ck_assert_int_eq(got, 0);
	hear(&k, OTHER "!12k");			/* no space */
	ck_assert_int_eq(got, 0);
	hear(&k, OTHER "!12 ");			/* no key */
	ck_assert_int_eq(got, 0);
	hear(&k, "short");
	ck_assert_int_eq(got, 0);
	keys_free(&k);
}
END_TEST

/* WANTED notices: queue reports and a holder's asks (notice.lua). */
START_TEST(test_queue_messages)
{
	struct store_keys k;

	keys_init(&k, "lb", ID, 0);
	hear(&k, OTHER "=3 1250 orders:42");
	ck_assert_int_eq(got_queue, 1);
	ck_assert_int_eq(got, 0);		/* not a waiter's announcement */
	ck_assert_str_eq(got_key, "orders:42");
	ck_assert_str_eq(got_from, OTHER);
	ck_assert_uint_eq(got_n, 3);
	ck_assert_int_eq(got_ms, 1250);
	hear(&k, OTHER "=0 0 k");		/* that broker's queue emptied */
	ck_assert_int_eq(got_queue, 1);
	ck_assert_uint_eq(got_n, 0);
	hear(&k, OTHER "?0 k");			/* every broker asked */
	ck_assert_int_eq(got_ask, 1);
	ck_assert_str_eq(got_key, "k");
	ck_assert_int_eq(got_to_me, 0);
	hear(&k, OTHER "?" ID " k");		/* this one asked */
	ck_assert_int_eq(got_ask, 1);
	ck_assert_int_eq(got_to_me, 1);
	hear(&k, OTHER "?" OTHER " k");		/* another one: not ours */
	ck_assert_int_eq(got_ask, 0);
	hear(&k, ID "=1 5 k");			/* our own: skipped */
	ck_assert_int_eq(got_queue, 0);
	/* other shapes: ignored */
	hear(&k, OTHER "=1 k");
	ck_assert_int_eq(got_queue, 0);
	hear(&k, OTHER "=x 1 k");
	ck_assert_int_eq(got_queue, 0);
	hear(&k, OTHER "=1 2 ");
	ck_assert_int_eq(got_queue, 0);
	hear(&k, OTHER "?0 ");
	ck_assert_int_eq(got_ask, 0);
	keys_free(&k);
}
END_TEST

static int got_granted, got_changed, got_released;
static unsigned long long got_wid;
static long long got_token, got_grant_ms;
static char got_owner[64];

static void
on_granted(void *arg, const char *key, size_t keylen, unsigned long long wid,
    const char *owner, size_t ownerlen, long long token, long long grant_ms)
{
	(void)arg;
	got_granted++;
	snprintf(got_key, sizeof got_key, "%.*s", (int)keylen, key);
	snprintf(got_owner, sizeof got_owner, "%.*s", (int)ownerlen, owner);
	got_wid = wid;
	got_token = token;
	got_grant_ms = grant_ms;
}

static void
on_changed(void *arg, const char *key, size_t keylen)
{
	(void)arg;
	(void)key;
	(void)keylen;
	got_changed++;
}

static void
on_released(void *arg, const char *key, size_t keylen)
{
	(void)arg;
	(void)key;
	(void)keylen;
	got_released++;
}

/* msg on a channel, read by reader (keys_released_msg, keys_granted_msg)
 * with the counters above cleared. */
static void
hear_on(void (*reader)(const struct store_hooks *, const char *, size_t),
    const char *msg)
{
	struct store_hooks h = { .granted = on_granted, .changed = on_changed,
	    .released = on_released };

	got_granted = got_changed = got_released = 0;
	got_key[0] = '\0';
	reader(&h, msg, strlen(msg));
}

static void
hear_release(const char *msg)
{
	hear_on(keys_released_msg, msg);
}

static void
hear_granted(const char *msg)
{
	hear_on(keys_granted_msg, msg);
}

/* A remote grant's message (lib/holders.lua, remote_grant), on this
 * broker's own channel; the channel's name. */
START_TEST(test_granted_messages)
{
	struct store_keys k, c;

	keys_init(&k, "lb", ID, 0);
	keys_init(&c, "lb", ID, 1);
	ck_assert_str_eq(k.granted, "lb:granted:" ID);
	ck_assert_ptr_null(c.granted);	/* cluster mode: no remote grants */
	hear_granted("jobs:7 42 c-1/2 1234567 1700000000123");
	ck_assert_int_eq(got_granted, 1);
	ck_assert_int_eq(got_changed + got_released, 0);
	ck_assert_str_eq(got_key, "jobs:7");
	ck_assert_str_eq(got_owner, "c-1/2");
	ck_assert_uint_eq(got_wid, 42);
	ck_assert_int_eq(got_token, 1234567);
	ck_assert_int_eq(got_grant_ms, 1700000000123LL);
	/* other shapes: ignored */
	hear_granted("jobs:7 42 c 1");
	ck_assert_int_eq(got_granted, 0);
	hear_granted("jobs:7 x c 1 2");
	ck_assert_int_eq(got_granted, 0);
	hear_granted("jobs:7 42 c 1 2 3");
	ck_assert_int_eq(got_granted, 0);
	hear_granted(" 42 c 1 2");
	ck_assert_int_eq(got_granted, 0);
	/* the release channel's messages are what they were */
	hear_release("jobs:7");
	ck_assert_int_eq(got_released, 1);
	ck_assert_int_eq(got_granted, 0);
	keys_free(&k);
	keys_free(&c);
}
END_TEST

Suite *
resp_suite(void)
{
	Suite *s = suite_create("resp");
	TCase *tc = tcase_create("replies");
	TCase *tk = tcase_create("keys");
	TCase *tw = tcase_create("written");

	tcase_add_test(tc, test_info_field);
	tcase_add_test(tc, test_field_and_kinds);
	tcase_add_test(tw, test_numbers_as_snprintf_writes_them);
	tcase_add_test(tw, test_commands_as_hiredis_writes_them);
	tcase_add_test(tk, test_names);
	tcase_add_test(tk, test_wanted_messages);
	tcase_add_test(tk, test_queue_messages);
	tcase_add_test(tk, test_granted_messages);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, tk);
	suite_add_tcase(s, tw);
	return s;
}
