/*
 * test_httphead.c - the HTTP request-head parser of the /metrics server
 * (daemon/httphead.c): where a head ends, and what a head says, for good
 * heads and hostile ones, one row per case.
 */
#include <string.h>

#include "httphead.h"
#include "suites.h"

/* Where the head ends, or 0 while incomplete. */
static const struct {
	const char *in;
	size_t len;			/* of the head; 0: incomplete */
} len_rows[] = {
	{ "GET / HTTP/1.1\r\n\r\n", 18 },
	{ "GET / HTTP/1.1\n\n", 16 },
	{ "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n", 27 },
	{ "GET / HTTP/1.1\r\nHost: x\r\n", 0 },
	{ "GET / HTTP/1.1\r\n\r", 0 },
	{ "", 0 },
	{ "\r\n\r\n", 4 },		/* an empty request line: parse says no */
};

START_TEST(test_head_len)
{
	const char *in = len_rows[_i].in;

	ck_assert_uint_eq(http_head_len(in, strlen(in)), len_rows[_i].len);
}
END_TEST

/* A whole head: parsed (ok) with these fields, or refused. */
static const struct {
	const char *in;
	int ok, get, keep_alive, has_body;
	const char *path;
} parse_rows[] = {
	{ "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 1, 1, 1, 0,
	  "/metrics" },
	{ "GET /metrics HTTP/1.0\r\n\r\n", 1, 1, 0, 0, "/metrics" },
	{ "GET /metrics HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 1, 1, 1,
	  0, "/metrics" },
	{ "GET /metrics HTTP/1.1\r\nconnection: te, CLOSE\r\n\r\n", 1, 1, 0,
	  0, "/metrics" },
	{ "GET /metrics?x=1&y HTTP/1.1\n\n", 1, 1, 1, 0, "/metrics" },
	{ "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\n", 1, 0, 1, 1,
	  "/metrics" },
	{ "GET /metrics HTTP/1.1\r\nContent-Length: 000\r\n\r\n", 1, 1, 1, 0,
	  "/metrics" },
	{ "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 1, 1,
	  1, 1, "/metrics" },
	{ "get /metrics HTTP/1.1\r\n\r\n", 1, 0, 1, 0, "/metrics" },
	{ "GET /metrics HTTP/1.1\r\nX-Empty:\r\n\r\n", 1, 1, 1, 0,
	  "/metrics" },
	/* refused */
	{ "GET /metrics HTTP/2.0\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET /metrics HTTP/1.1x\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET /metrics\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET  /metrics HTTP/1.1\r\n\r\n", 0, 0, 0, 0, NULL },
	{ " GET /metrics HTTP/1.1\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET metrics HTTP/1.1\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET http://h/metrics HTTP/1.1\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET /metrics HTTP/1.1\r\nNoColon\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET /metrics HTTP/1.1\r\n: v\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET /metrics HTTP/1.1\r\nName : v\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET /metrics HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 0, 0, 0, 0,
	  NULL },
	{ "GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 0, 0, 0, 0,
	  NULL },
	{ "GET /metrics HTTP/1.1\r\nContent-Length:\r\n\r\n", 0, 0, 0, 0,
	  NULL },
	{ "GET /me\x01trics HTTP/1.1\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET /metrics HTTP/1.1\r\nA: \x7f\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "\r\n\r\n", 0, 0, 0, 0, NULL },
	{ "GET /metrics HTTP/1.1\r\n", 0, 0, 0, 0, NULL },	/* no end */
};

START_TEST(test_head_parse)
{
	const char *in = parse_rows[_i].in;
	struct http_head h;
	int rc = http_head_parse(in, strlen(in), &h);

	ck_assert_msg((rc == 0) == parse_rows[_i].ok, "row %d: %s", _i, in);
	if (rc != 0)
		return;
	ck_assert_int_eq(h.get, parse_rows[_i].get);
	ck_assert_int_eq(h.keep_alive, parse_rows[_i].keep_alive);
	ck_assert_int_eq(h.has_body, parse_rows[_i].has_body);
	ck_assert_uint_eq(h.pathlen, strlen(parse_rows[_i].path));
	ck_assert(memcmp(h.path, parse_rows[_i].path, h.pathlen) == 0);
}
END_TEST

/* A NUL inside the head is refused, not read as its end. */
START_TEST(test_head_nul)
{
	static const char in[] = "GET /metrics HTTP/1.1\r\nA: b\0c\r\n\r\n";
	struct http_head h;

	ck_assert_int_eq(http_head_parse(in, sizeof in - 1, &h), -1);
}
END_TEST

Suite *
httphead_suite(void)
{
	Suite *s = suite_create("httphead");
	TCase *tc = tcase_create("head");

	tcase_add_loop_test(tc, test_head_len, 0,
	    (int)(sizeof len_rows / sizeof len_rows[0]));
	tcase_add_loop_test(tc, test_head_parse, 0,
	    (int)(sizeof parse_rows / sizeof parse_rows[0]));
	tcase_add_test(tc, test_head_nul);
	suite_add_tcase(s, tc);
	return s;
}
