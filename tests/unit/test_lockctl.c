/*
 * test_lockctl.c - lockctl's pure parsers and builders (lockctl/parse.c):
 * option values (numbers, host:port, words, a token file's bytes), the
 * words after them (which mode, which KEY and CMD, which options a mode
 * refuses) and the lines it speaks (ACQUIRE built; OK, fencing tokens,
 * EVENT lines read), one row per case.  The rest of lockctl (the connection, CMD and its
 * signals) is covered by tests/integration/tools/test_lockctl.py.
 */
#include <stdio.h>
#include <string.h>

#include "../../lockctl/parse.h"
#include "suites.h"

static const struct {
	const char *s;
	long long min, max;
	int rc;
	long long v;
} nums[] = {
	{ "0", 0, 10, 0, 0 },
	{ "10", 0, 10, 0, 10 },
	{ "11", 0, 10, -1, 0 },
	{ "0", 1, 10, -1, 0 },
	{ "007", 1, 65535, 0, 7 },
	{ "65535", 1, 65535, 0, 65535 },
	{ "65536", 1, 65535, -1, 0 },
	{ "", 0, 10, -1, 0 },
	{ "-1", -5, 10, -1, 0 },
	{ "+1", 0, 10, -1, 0 },
	{ " 1", 0, 10, -1, 0 },
	{ "1 ", 0, 10, -1, 0 },
	{ "1a", 0, 10, -1, 0 },
	{ "999999999999999999", 0, 999999999999999999LL, 0,
	    999999999999999999LL },
	{ "0000000000000000001", 0, 10, -1, 0 },	/* 19 digits */
};

START_TEST(test_parse_num)
{
	long long v = -42;

	ck_assert_int_eq(parse_num(nums[_i].s, nums[_i].min, nums[_i].max,
	    &v), nums[_i].rc);
	if (nums[_i].rc == 0)
		ck_assert_int_eq(v, nums[_i].v);
	else
		ck_assert_int_eq(v, -42);	/* untouched */
}
END_TEST

START_TEST(test_parse_num_null)
{
	long long v;

	ck_assert_int_eq(parse_num(NULL, 0, 10, &v), -1);
}
END_TEST

START_TEST(test_is_word)
{
	ck_assert_int_eq(is_word("abc", 3), 1);
	ck_assert_int_eq(is_word("abcd", 3), 0);
	ck_assert_int_eq(is_word("", 3), 0);
	ck_assert_int_eq(is_word("a b", 3), 0);
	ck_assert_int_eq(is_word("a\tb", 3), 0);
	ck_assert_int_eq(is_word("a\rb", 3), 0);
	ck_assert_int_eq(is_word("!~", 3), 1);		/* 0x21, 0x7e */
	ck_assert_int_eq(is_word("a\x7f", 3), 0);
	ck_assert_int_eq(is_word("\xc3\xa9", 3), 0);	/* UTF-8 */
}
END_TEST

static const struct {
	const char *s;
	int rc;
	const char *host, *port, *why;
} hostports[] = {
	{ "broker", 0, "broker", "7711", NULL },
	{ "broker:99", 0, "broker", "99", NULL },
	{ "broker:007", 0, "broker", "7", NULL },
	{ "10.0.0.1:7712", 0, "10.0.0.1", "7712", NULL },
	{ "[::1]", 0, "::1", "7711", NULL },
	{ "[::1]:8", 0, "::1", "8", NULL },
	{ "::1", 0, "::1", "7711", NULL },		/* IPv6, no port */
	{ "fe80::1:2", 0, "fe80::1:2", "7711", NULL },
	{ "[::1", -1, NULL, NULL, "missing ']'" },
	{ "[::1]x", -1, NULL, NULL, "junk after ']'" },
	{ "[::1]:", -1, NULL, NULL, "port must be a number 1..65535" },
	{ "[]:80", -1, NULL, NULL, "empty host" },
	{ ":80", -1, NULL, NULL, "empty host" },
	{ "", -1, NULL, NULL, "empty host" },
	{ "h:", -1, NULL, NULL, "port must be a number 1..65535" },
	{ "h:0", -1, NULL, NULL, "port must be a number 1..65535" },
	{ "h:65536", -1, NULL, NULL, "port must be a number 1..65535" },
	{ "h:x", -1, NULL, NULL, "port must be a number 1..65535" },
	{ "0123456789012345", -1, NULL, NULL, "host name too long" },
	{ "012345678901234:1", 0, "012345678901234", "1", NULL },
};

START_TEST(test_parse_hostport)
{
	char host[16] = "?", port[8] = "7711";
	const char *why = NULL;
	int rc = parse_hostport(hostports[_i].s, host, sizeof host, port,
	    sizeof port, &why);

	ck_assert_int_eq(rc, hostports[_i].rc);
	if (rc == 0) {
		ck_assert_str_eq(host, hostports[_i].host);
		ck_assert_str_eq(port, hostports[_i].port);
	} else {
		ck_assert_ptr_nonnull(why);
		ck_assert_str_eq(why, hostports[_i].why);
	}
}
END_TEST

static const struct {
	const char *in, *out;
} trims[] = {
	{ "tok", "tok" },
	{ "tok\n", "tok" },
	{ "tok\r\n", "tok" },
	{ "tok \t\r\n\n", "tok" },
	{ "a b\n", "a b" },		/* inside: is_word refuses it */
	{ " tok", " tok" },		/* only the end is trimmed */
	{ "\n", "" },
	{ "", "" },
};

START_TEST(test_token_trim)
{
	char buf[32];
	size_t len = strlen(trims[_i].in);

	memcpy(buf, trims[_i].in, len);
	memset(buf + len, 'X', sizeof buf - len);	/* no NUL given */
	ck_assert_uint_eq(token_trim(buf, len), strlen(trims[_i].out));
	ck_assert_str_eq(buf, trims[_i].out);
}
END_TEST

static const struct {
	int shared;
	long long limit, wait_ms, ttl_ms, delay_ms;
	const char *value;
	const char *line;
} acquires[] = {
	{ 0, 0, 0, 0, 0, NULL, "ACQUIRE k" },
	{ 0, 0, 500, 0, 0, NULL, "ACQUIRE k WAIT 500" },
	{ 0, 0, 0, 9000, 0, NULL, "ACQUIRE k TTL 9000" },
	{ 0, 0, 500, 9000, 0, NULL, "ACQUIRE k WAIT 500 TTL 9000" },
	{ 1, 0, 0, 0, 0, NULL, "ACQUIRE k SHARED" },
	{ 1, 0, 500, 9000, 0, NULL, "ACQUIRE k SHARED WAIT 500 TTL 9000" },
	{ 0, 3, 0, 0, 0, NULL, "ACQUIRE k LIMIT 3" },
	{ 0, 3, 2147483647LL, 1, 0, NULL,
	    "ACQUIRE k LIMIT 3 WAIT 2147483647 TTL 1" },
	/* elect: an exclusive hold with the leader's value */
	{ 0, 0, 0, 0, 0, "10.0.0.1:80", "ACQUIRE k VALUE 10.0.0.1:80" },
	{ 0, 0, 60000, 900, 0, "v", "ACQUIRE k WAIT 60000 TTL 900 VALUE v" },
	/* --delay: a lock delay after an unclean end */
	{ 0, 0, 500, 0, 30000, NULL, "ACQUIRE k WAIT 500 DELAY 30000" },
	{ 0, 0, 0, 900, 1, "v", "ACQUIRE k TTL 900 DELAY 1 VALUE v" },
};

START_TEST(test_acquire_line)
{
	char req[128];

	ck_assert_int_eq(acquire_line(req, sizeof req, "k",
	    acquires[_i].shared, acquires[_i].limit, acquires[_i].wait_ms,
	    acquires[_i].ttl_ms, acquires[_i].delay_ms, acquires[_i].value), 0);
	ck_assert_str_eq(req, acquires[_i].line);
}
END_TEST

/* A line that does not fit is refused, never cut (a cut VALUE would be
 * another value); one that fits exactly is built. */
START_TEST(test_acquire_line_too_long)
{
	char req[32];

	/* "ACQUIRE k WAIT 500 VALUE 123456" is 31 bytes and its NUL */
	ck_assert_int_eq(acquire_line(req, sizeof req, "k", 0, 0, 500, 0, 0,
	    "123456"), 0);
	ck_assert_str_eq(req, "ACQUIRE k WAIT 500 VALUE 123456");
	ck_assert_int_eq(acquire_line(req, sizeof req, "k", 0, 0, 500, 0, 0,
	    "1234567"), -1);
	ck_assert_int_eq(acquire_line(req, sizeof req, "k", 0, 0, 500,
	    2147483647LL, 0, "v"), -1);
	ck_assert_int_eq(acquire_line(req, 8, "k", 0, 0, 0, 0, 0, NULL), -1);
	ck_assert_int_eq(acquire_line(req, 0, "k", 0, 0, 0, 0, 0, NULL), -1);
}
END_TEST

/*
 * The words after the options: mode, KEY, where CMD starts (its index in
 * the words, -1: none), or the usage message.  A first word followed
 * directly by "--" is always a KEY (issue 32): "elect -- cmd" runs cmd
 * under the lock named "elect".
 */
#define W(...)	{ __VA_ARGS__, NULL }
static const struct {
	const char *words[7];
	int rc;
	enum lc_mode mode;
	const char *key;
	int cmd_at;
	const char *why;
} args[] = {
	{ W("k", "--", "true"), 0, MODE_RUN, "k", 2, NULL },
	{ W("k", "--", "sh", "-c", "x"), 0, MODE_RUN, "k", 2, NULL },
	{ W("k", "--", "--"), 0, MODE_RUN, "k", 2, NULL },
	{ W("elect", "k", "--", "cmd", "-x"), 0, MODE_ELECT, "k", 3, NULL },
	{ W("elect", "--", "cmd"), 0, MODE_RUN, "elect", 2, NULL },
	{ W("elect", "--", "cmd", "--", "x"), 0, MODE_RUN, "elect", 2, NULL },
	{ W("elect", "elect", "--", "cmd"), 0, MODE_ELECT, "elect", 3, NULL },
	{ W("elect", "watch", "--", "cmd"), 0, MODE_ELECT, "watch", 3, NULL },
	{ W("watch", "k"), 0, MODE_WATCH, "k", -1, NULL },
	{ W("watch", "--", "cmd"), 0, MODE_RUN, "watch", 2, NULL },
	{ W("watch", "elect"), 0, MODE_WATCH, "elect", -1, NULL },
	{ W("owner", "k"), 0, MODE_OWNER, "k", -1, NULL },
	{ W("owner", "--", "cmd"), 0, MODE_RUN, "owner", 2, NULL },
	{ W("stats"), 0, MODE_STATS, NULL, -1, NULL },
	{ W("stats", "--", "cmd"), 0, MODE_RUN, "stats", 2, NULL },
	{ W("ping"), 0, MODE_PING, NULL, -1, NULL },
	{ W("locks"), 0, MODE_LOCKS, NULL, -1, NULL },
	{ W("locks", "orders:*"), 0, MODE_LOCKS, "orders:*", -1, NULL },
	{ W("locks", "--", "cmd"), 0, MODE_RUN, "locks", 2, NULL },
	{ W("kill", "3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10"), 0, MODE_KILL,
	    "3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10", -1, NULL },
	{ W("free", "k"), 0, MODE_FREE, "k", -1, NULL },
	{ W("free", "--", "cmd"), 0, MODE_RUN, "free", 2, NULL },
	{ W("locks", "a", "b"), -1, 0, NULL, -1,
	    "locks takes at most one GLOB" },
	{ W("locks", "a b"), -1, 0, NULL, -1,
	    "GLOB must be printable ASCII without blanks" },
	{ W("kill"), -1, 0, NULL, -1, "kill takes one CLIENT-ID" },
	{ W("kill", "a", "b"), -1, 0, NULL, -1, "kill takes one CLIENT-ID" },
	{ W("kill", ""), -1, 0, NULL, -1,
	    "CLIENT-ID must be printable ASCII without blanks" },
	{ W("free"), -1, 0, NULL, -1, "free takes one KEY" },
	{ W("Elect", "k", "--", "x"), -1, 0, NULL, -1,
	    "missing -- between KEY and CMD" },	/* names are exact */
	{ { NULL }, -1, 0, NULL, -1, "missing KEY" },
	{ W("k"), -1, 0, NULL, -1, "missing -- CMD after KEY" },
	{ W("k", "true"), -1, 0, NULL, -1, "missing -- between KEY and CMD" },
	{ W("k", "--"), -1, 0, NULL, -1, "missing CMD after --" },
	{ W("elect"), -1, 0, NULL, -1, "elect takes KEY -- CMD" },
	{ W("elect", "k"), -1, 0, NULL, -1, "missing -- CMD after KEY" },
	{ W("elect", "k", "cmd"), -1, 0, NULL, -1,
	    "missing -- between KEY and CMD" },
	{ W("elect", "k", "--"), -1, 0, NULL, -1, "missing CMD after --" },
	{ W("elect", "--"), -1, 0, NULL, -1, "missing CMD after --" },
	{ W("elect", "a b", "--", "x"), -1, 0, NULL, -1,
	    "KEY must be printable ASCII without blanks" },
	{ W("watch"), -1, 0, NULL, -1, "watch takes one KEY" },
	{ W("watch", "k", "x"), -1, 0, NULL, -1, "watch takes one KEY" },
	{ W("watch", "k", "--"), -1, 0, NULL, -1, "watch takes one KEY" },
	{ W("watch", ""), -1, 0, NULL, -1,
	    "KEY must be printable ASCII without blanks" },
	{ W("owner"), -1, 0, NULL, -1, "owner takes one KEY" },
	{ W("stats", "x"), -1, 0, NULL, -1, "stats takes no arguments" },
	{ W("ping", "x"), -1, 0, NULL, -1, "ping takes no arguments" },
	{ W("bad key", "--", "true"), -1, 0, NULL, -1,
	    "KEY must be printable ASCII without blanks" },
};
#undef W

START_TEST(test_parse_args)
{
	char *words[7];
	struct lc_args a;
	const char *why = NULL;
	int n = 0;

	while (args[_i].words[n] != NULL) {
		words[n] = (char *)args[_i].words[n];
		n++;
	}
	words[n] = NULL;
	ck_assert_int_eq(parse_args(n, words, &a, &why), args[_i].rc);
	if (args[_i].rc < 0) {
		ck_assert_ptr_nonnull(why);
		ck_assert_str_eq(why, args[_i].why);
		return;
	}
	ck_assert_int_eq(a.mode, args[_i].mode);
	if (args[_i].key == NULL)
		ck_assert_ptr_null(a.key);
	else
		ck_assert_str_eq(a.key, args[_i].key);
	if (args[_i].cmd_at < 0)
		ck_assert_ptr_null(a.cmd);
	else
		ck_assert_ptr_eq(a.cmd, words + args[_i].cmd_at);
}
END_TEST

/* A KEY up to the room left for the options, not one byte more. */
START_TEST(test_parse_args_key_length)
{
	static char key[KEY_MAX_LEN + 2];
	char *words[] = { "watch", key, NULL };
	struct lc_args a;
	const char *why = NULL;

	memset(key, 'k', KEY_MAX_LEN);
	ck_assert_int_eq(parse_args(2, words, &a, &why), 0);
	key[KEY_MAX_LEN] = 'k';
	ck_assert_int_eq(parse_args(2, words, &a, &why), -1);
	ck_assert_str_eq(why, "KEY must be printable ASCII without blanks");
}
END_TEST

/* --shared and --limit are for KEY -- CMD only, --value for elect only. */
START_TEST(test_args_conflict)
{
	struct lc_args a;

	memset(&a, 0, sizeof a);
	a.mode = MODE_RUN;
	ck_assert_ptr_null(args_conflict(&a, 1, 0, NULL));
	ck_assert_ptr_null(args_conflict(&a, 0, 3, NULL));
	ck_assert_str_eq(args_conflict(&a, 0, 0, "v"),
	    "--value is for elect only");
	a.mode = MODE_ELECT;
	ck_assert_ptr_null(args_conflict(&a, 0, 0, "v"));
	ck_assert_ptr_null(args_conflict(&a, 0, 0, NULL));
	ck_assert_str_eq(args_conflict(&a, 1, 0, "v"),
	    "--shared is for KEY -- CMD only");
	ck_assert_str_eq(args_conflict(&a, 0, 2, NULL),
	    "--limit is for KEY -- CMD only");
	a.mode = MODE_WATCH;
	ck_assert_str_eq(args_conflict(&a, 0, 0, "v"),
	    "--value is for elect only");
	ck_assert_str_eq(args_conflict(&a, 1, 0, NULL),
	    "--shared is for KEY -- CMD only");
	a.mode = MODE_OWNER;
	ck_assert_str_eq(args_conflict(&a, 0, 2, NULL),
	    "--limit is for KEY -- CMD only");
	a.mode = MODE_STATS;
	ck_assert_ptr_null(args_conflict(&a, 0, 0, NULL));
}
END_TEST

START_TEST(test_reply_ok)
{
	ck_assert_int_eq(reply_ok("OK"), 1);
	ck_assert_int_eq(reply_ok("OK 17"), 1);
	ck_assert_int_eq(reply_ok("OK PONG"), 1);
	ck_assert_int_eq(reply_ok("OKAY"), 0);
	ck_assert_int_eq(reply_ok("ok"), 0);
	ck_assert_int_eq(reply_ok("O"), 0);
	ck_assert_int_eq(reply_ok(""), 0);
	ck_assert_int_eq(reply_ok("BUSY"), 0);
	ck_assert_int_eq(reply_ok("ERR LOST x"), 0);
}
END_TEST

static const struct {
	const char *reply;
	int rc;
	const char *token;
} tokens[] = {
	{ "OK 42", 0, "42" },
	{ "OK 0", 0, "0" },
	{ "OK 18446744073709551615", 0, "18446744073709551615" },
	{ "OK 184467440737095516150", -1, NULL },	/* 21 digits */
	{ "OK", -1, NULL },
	{ "OK ", -1, NULL },
	{ "OK 4x", -1, NULL },
	{ "OK -4", -1, NULL },
	{ "OK 4 5", -1, NULL },
};

START_TEST(test_reply_token)
{
	char token[FENCE_MAX_LEN + 1] = "untouched";

	ck_assert_int_eq(reply_token(tokens[_i].reply, token), tokens[_i].rc);
	ck_assert_str_eq(token, tokens[_i].rc == 0 ? tokens[_i].token :
	    "untouched");
}
END_TEST

/* A LOCKS page: its cursor and its 9-word entries, split in place; a
 * page whose words do not add up is refused. */
START_TEST(test_locks_page)
{
	char page[] = "OK 12.0.ab.7 2 k lock c - 7 5 29000 0 - "
	    "s shared d w-1 8 6 29001 2 v";
	char one[] = "OK 0 0";
	char *cursor, *e[PAGE_MAX];
	size_t n = 99;
	static const char *bad[] = {
		"OK 0 1 k lock c - 7 5 29000 0",	/* 8 words */
		"OK 0 1 k lock c - 7 5 29000 0 - x",	/* 10 */
		"OK 0 2 k lock c - 7 5 29000 0 -",	/* 1 entry, not 2 */
		"OK 0",
		"OK 0 x",
		"OK 0 101",
		"ERR DENIED admin words are off",
		"",
	};

	ck_assert_int_eq(locks_page(page, &cursor, e, &n), 0);
	ck_assert_str_eq(cursor, "12.0.ab.7");
	ck_assert_uint_eq(n, 2);
	ck_assert_str_eq(e[0], "k lock c - 7 5 29000 0 -");
	ck_assert_str_eq(e[1], "s shared d w-1 8 6 29001 2 v");
	ck_assert_int_eq(locks_page(one, &cursor, e, &n), 0);
	ck_assert_str_eq(cursor, "0");
	ck_assert_uint_eq(n, 0);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char buf[128];

		snprintf(buf, sizeof buf, "%s", bad[i]);
		ck_assert_msg(locks_page(buf, &cursor, e, &n) == -1,
		    "accepted \"%s\"", bad[i]);
	}
}
END_TEST

START_TEST(test_events)
{
	ck_assert_int_eq(is_event("EVENT LOST k 5"), 1);
	ck_assert_int_eq(is_event("EVENT SOMETHING new"), 1);
	ck_assert_int_eq(is_event("EVENTS"), 0);
	ck_assert_int_eq(is_event("OK 5"), 0);
	ck_assert_int_eq(event_lost("EVENT LOST k 5", "k"), 1);
	ck_assert_int_eq(event_lost("EVENT LOST k 5", "kk"), 0);
	ck_assert_int_eq(event_lost("EVENT LOST kk 5", "k"), 0);
	ck_assert_int_eq(event_lost("EVENT LOST k", "k"), 0);	/* no token */
	ck_assert_int_eq(event_lost("EVENT GONE k 5", "k"), 0);
	ck_assert_int_eq(event_lost("OK 5", "k"), 0);
}
END_TEST

/* What watch prints: the event line without "EVENT ", nothing else. */
START_TEST(test_event_text)
{
	ck_assert_str_eq(event_text("EVENT HOLDER k 7c3-id 17 10.0.0.1:80"),
	    "HOLDER k 7c3-id 17 10.0.0.1:80");
	ck_assert_str_eq(event_text("EVENT HOLDER k SHARED 2"),
	    "HOLDER k SHARED 2");
	ck_assert_str_eq(event_text("EVENT FREE k"), "FREE k");
	ck_assert_str_eq(event_text("EVENT "), "");
	ck_assert_ptr_null(event_text("OK"));
	ck_assert_ptr_null(event_text("EVENTS ON"));
	ck_assert_ptr_null(event_text("EVENT"));
	ck_assert_ptr_null(event_text("ERR BADCMD unknown command"));
}
END_TEST

Suite *
lockctl_suite(void)
{
	Suite *s = suite_create("lockctl");
	TCase *tc = tcase_create("parse");

	tcase_add_loop_test(tc, test_parse_num, 0,
	    (int)(sizeof nums / sizeof nums[0]));
	tcase_add_test(tc, test_parse_num_null);
	tcase_add_test(tc, test_is_word);
	tcase_add_loop_test(tc, test_parse_hostport, 0,
	    (int)(sizeof hostports / sizeof hostports[0]));
	tcase_add_loop_test(tc, test_token_trim, 0,
	    (int)(sizeof trims / sizeof trims[0]));
	tcase_add_loop_test(tc, test_acquire_line, 0,
	    (int)(sizeof acquires / sizeof acquires[0]));
	tcase_add_test(tc, test_acquire_line_too_long);
	tcase_add_loop_test(tc, test_parse_args, 0,
	    (int)(sizeof args / sizeof args[0]));
	tcase_add_test(tc, test_parse_args_key_length);
	tcase_add_test(tc, test_args_conflict);
	tcase_add_test(tc, test_reply_ok);
	tcase_add_loop_test(tc, test_reply_token, 0,
	    (int)(sizeof tokens / sizeof tokens[0]));
	tcase_add_test(tc, test_events);
	tcase_add_test(tc, test_locks_page);
	tcase_add_test(tc, test_event_text);
	suite_add_tcase(s, tc);
	return s;
}
