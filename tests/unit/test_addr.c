/*
 * test_addr.c - the address parsers of daemon/addr.c.
 *
 * One row per input: what the listen-address parser (bind, metrics_bind)
 * and the Redis endpoint parser accept, with the fields they fill, and
 * what they refuse, with a word the message must hold.  These are the
 * values "lockbrokerd -t" used to pass and start-up then refused (issue 9,
 * defect 8), plus the edges around them.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <arpa/inet.h>

#include "addr.h"
#include "suites.h"

/* A string of n 'x's after "unix:/" (n < 200). */
static const char *
unix_path(size_t n)
{
	static char buf[256];

	memcpy(buf, "unix:/", 6);
	memset(buf + 6, 'x', n);
	buf[6 + n] = '\0';
	return buf;
}

static const struct {
	const char *text;
	int family;			/* 0: refused */
	const char *word;		/* refused: expected in the message */
} listen_rows[] = {
	{ "127.0.0.1", AF_INET, NULL },
	{ "0.0.0.0", AF_INET, NULL },
	{ "255.255.255.255", AF_INET, NULL },
	{ "::1", AF_INET6, NULL },
	{ "::", AF_INET6, NULL },
	{ "fe80::1:2", AF_INET6, NULL },
	{ "::ffff:127.0.0.1", AF_INET6, NULL },
	{ "localhost", 0, "numeric" },		/* names are not resolved */
	{ "example.com", 0, "numeric" },
	{ "", 0, "numeric" },
	{ "127.1", 0, "numeric" },		/* shortened IPv4 */
	{ "127.0.0.256", 0, "numeric" },
	{ "127.0.0.1:7711", 0, "numeric" },	/* the port is its own option */
	{ " 127.0.0.1", 0, "numeric" },
	{ "127.0.0.1 ", 0, "numeric" },
	{ "[::1]", 0, "brackets" },
	{ "fe80::1%lo", 0, "numeric" },		/* no zone suffix */
	{ "1111:2222:3333:4444:5555:6666:7777:8888:9999", 0, "numeric" },
	{ "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
	  0, "numeric" },
};

START_TEST(test_listen)
{
	const char *text = listen_rows[_i].text;
	struct addr a;
	char err[256] = "";
	int rc;

	memset(&a, 0x55, sizeof a);
	rc = addr_parse_listen(text, &a, err, sizeof err);
	if (listen_rows[_i].family != 0) {
		ck_assert_msg(rc == 0, "'%s' refused: %s", text, err);
		ck_assert_int_eq(a.family, listen_rows[_i].family);
		ck_assert_int_eq(a.is_unix, 0);
		ck_assert_str_eq(a.host, text);
		ck_assert_int_eq(a.port, 0);
		ck_assert_str_eq(a.path, "");
	} else {
		ck_assert_msg(rc == -1, "'%s' accepted", text);
		ck_assert_msg(strstr(err, listen_rows[_i].word) != NULL,
		    "'%s': message lacks '%s': %s", text,
		    listen_rows[_i].word, err);
		ck_assert_msg(strncmp(err, "'", 1) == 0 &&
		    strstr(err, text) != NULL, "'%s': message does not quote "
		    "the value: %s", text, err);
	}
}
END_TEST

static const struct {
	const char *text;
	int family;			/* 0: refused */
	const char *host;		/* accepted: host, or the unix path */
	int port;
	const char *word;		/* refused: expected in the message */
} endpoint_rows[] = {
	{ "127.0.0.1:6379", AF_INET, "127.0.0.1", 6379, NULL },
	{ "10.1.2.3:1", AF_INET, "10.1.2.3", 1, NULL },
	{ "10.1.2.3:65535", AF_INET, "10.1.2.3", 65535, NULL },
	{ "10.1.2.3:06379", AF_INET, "10.1.2.3", 6379, NULL },
	{ "[::1]:6379", AF_INET6, "::1", 6379, NULL },
	{ "[fe80::1:2]:7000", AF_INET6, "fe80::1:2", 7000, NULL },
	{ "unix:/tmp/x.sock", AF_UNIX, "/tmp/x.sock", 0, NULL },
	{ "unix:/", AF_UNIX, "/", 0, NULL },
	/* issue 9, defect 8: -t passed these, start-up refused them */
	{ "127.0.0.1", 0, NULL, 0, "no port" },
	{ "127.0.0.1:0", 0, NULL, 0, "out of range" },
	{ "127.0.0.1:70000", 0, NULL, 0, "out of range" },
	{ "unix:", 0, NULL, 0, "absolute path" },
	/* ... and their neighbours */
	{ "", 0, NULL, 0, "empty" },
	{ "127.0.0.1:", 0, NULL, 0, "no port" },
	{ "127.0.0.1:65536", 0, NULL, 0, "out of range" },
	{ "127.0.0.1:99999999999999999999", 0, NULL, 0, "out of range" },
	{ "127.0.0.1:-1", 0, NULL, 0, "not a port" },
	{ "127.0.0.1:+80", 0, NULL, 0, "not a port" },
	{ "127.0.0.1:80x", 0, NULL, 0, "not a port" },
	{ "127.0.0.1: 80", 0, NULL, 0, "not a port" },
	{ ":6379", 0, NULL, 0, "neither" },
	{ "127.1:6379", 0, NULL, 0, "neither" },	/* shortened, not a name */
	{ "10.0.0.300:6379", 0, NULL, 0, "neither" },
	{ "a_b.example:6379", 0, NULL, 0, "neither" },
	{ "-a.example:6379", 0, NULL, 0, "neither" },
	{ "a-.example:6379", 0, NULL, 0, "neither" },
	{ "a..example:6379", 0, NULL, 0, "neither" },
	{ ".example:6379", 0, NULL, 0, "neither" },
	{ "example.:6379", 0, NULL, 0, "neither" },
	{ "red is:6379", 0, NULL, 0, "neither" },
	{ "redis:", 0, NULL, 0, "no port" },
	{ "redis", 0, NULL, 0, "no port" },
	{ "::1:6379", 0, NULL, 0, "brackets" },
	{ "[::1]", 0, NULL, 0, "no :port" },
	{ "[::1]6379", 0, NULL, 0, "no :port" },
	{ "[::1]:", 0, NULL, 0, "no port" },
	{ "[::1]:0", 0, NULL, 0, "out of range" },
	{ "[127.0.0.1]:6379", 0, NULL, 0, "IPv6" },
	{ "[]:6379", 0, NULL, 0, "IPv6" },
	{ "[::1:6379", 0, NULL, 0, "IPv6" },
	{ "unix:tmp/x.sock", 0, NULL, 0, "absolute path" },
	{ "UNIX:/tmp/x.sock", 0, NULL, 0, "not a port" },
};

START_TEST(test_endpoint)
{
	const char *text = endpoint_rows[_i].text;
	struct addr a;
	char err[256] = "";
	int rc;

	memset(&a, 0x55, sizeof a);
	rc = addr_parse_endpoint(text, &a, err, sizeof err);
	if (endpoint_rows[_i].family != 0) {
		ck_assert_msg(rc == 0, "'%s' refused: %s", text, err);
		ck_assert_int_eq(a.family, endpoint_rows[_i].family);
		ck_assert_int_eq(a.is_unix, a.family == AF_UNIX);
		ck_assert_int_eq(a.port, endpoint_rows[_i].port);
		if (a.is_unix) {
			ck_assert_str_eq(a.path, endpoint_rows[_i].host);
			ck_assert_str_eq(a.host, "");
		} else {
			ck_assert_str_eq(a.host, endpoint_rows[_i].host);
			ck_assert_str_eq(a.path, "");
		}
	} else {
		ck_assert_msg(rc == -1, "'%s' accepted", text);
		ck_assert_msg(strstr(err, endpoint_rows[_i].word) != NULL,
		    "'%s': message lacks '%s': %s", text,
		    endpoint_rows[_i].word, err);
		/* a refusal leaves nothing half-filled behind */
		ck_assert_int_eq(a.family, 0);
		ck_assert_str_eq(a.host, "");
		ck_assert_str_eq(a.path, "");
	}
}
END_TEST

/* Host names: accepted as they are written, flagged, never numeric. */
static const struct {
	const char *text;
	const char *host;
	int port;
} name_rows[] = {
	{ "localhost:6379", "localhost", 6379 },
	{ "redis-master.prod.svc.cluster.local:6379",
	  "redis-master.prod.svc.cluster.local", 6379 },
	{ "Redis.Example.COM:1", "Redis.Example.COM", 1 },
	{ "r1:7000", "r1", 7000 },
	{ "1.2.3.x:7000", "1.2.3.x", 7000 },	/* last label not all digits */
	{ "3com.example:7000", "3com.example", 7000 },
};

START_TEST(test_endpoint_name)
{
	const char *text = name_rows[_i].text;
	struct addr a;
	char err[256] = "";

	memset(&a, 0x55, sizeof a);
	ck_assert_msg(addr_parse_endpoint(text, &a, err, sizeof err) == 0,
	    "'%s' refused: %s", text, err);
	ck_assert_int_eq(a.is_name, 1);
	ck_assert_int_eq(a.is_unix, 0);
	ck_assert_int_eq(a.family, AF_UNSPEC);
	ck_assert_str_eq(a.host, name_rows[_i].host);
	ck_assert_int_eq(a.port, name_rows[_i].port);
}
END_TEST

/* Label and name lengths: 63 and 253 bytes, not one more. */
START_TEST(test_endpoint_name_length)
{
	char text[400], l63[64], l61[62];
	struct addr a;
	char err[256];

	memset(l63, 'a', 63);
	l63[63] = '\0';
	memset(l61, 'b', 61);
	l61[61] = '\0';
	snprintf(text, sizeof text, "%s.x:1", l63);
	ck_assert_int_eq(addr_parse_endpoint(text, &a, err, sizeof err), 0);
	snprintf(text, sizeof text, "%sa.x:1", l63);
	ck_assert_int_eq(addr_parse_endpoint(text, &a, err, sizeof err), -1);
	/* 3 * 63 + 61 + 3 dots = 253 */
	snprintf(text, sizeof text, "%s.%s.%s.%s:1", l63, l63, l63, l61);
	ck_assert_int_eq(addr_parse_endpoint(text, &a, err, sizeof err), 0);
	ck_assert_uint_eq(strlen(a.host), 253);
	snprintf(text, sizeof text, "%s.%s.%s.%sb:1", l63, l63, l63, l61);
	ck_assert_int_eq(addr_parse_endpoint(text, &a, err, sizeof err), -1);
}
END_TEST

/* A name is the same name in any case, and never the same as a number. */
START_TEST(test_same_name)
{
	struct addr x, y;
	char err[256];
	struct sockaddr_storage ss;
	socklen_t len;

	ck_assert_int_eq(addr_parse_endpoint("redis.Example:6379", &x, err,
	    sizeof err), 0);
	ck_assert_int_eq(addr_parse_endpoint("REDIS.example:6379", &y, err,
	    sizeof err), 0);
	ck_assert(addr_same(&x, &y));
	ck_assert_int_eq(addr_parse_endpoint("redis.example:6380", &y, err,
	    sizeof err), 0);
	ck_assert(!addr_same(&x, &y));
	ck_assert_int_eq(addr_parse_endpoint("127.0.0.1:6379", &y, err,
	    sizeof err), 0);
	ck_assert(!addr_same(&x, &y));
	ck_assert(!addr_same(&y, &x));
	/* a name has no sockaddr: it must be resolved first */
	ck_assert_int_eq(addr_sockaddr(&x, 0, &ss, &len), -1);
}
END_TEST

/* dns_nameserver: a numeric host, port 53 unless given. */
static const struct {
	const char *text;
	int family;			/* 0: refused */
	const char *host;
	int port;
} ns_rows[] = {
	{ "127.0.0.1", AF_INET, "127.0.0.1", 53 },
	{ "10.96.0.10:53", AF_INET, "10.96.0.10", 53 },
	{ "127.0.0.1:5353", AF_INET, "127.0.0.1", 5353 },
	{ "::1", AF_INET6, "::1", 53 },
	{ "[::1]:5353", AF_INET6, "::1", 5353 },
	{ "ns.example", 0, NULL, 0 },		/* nothing to resolve it with */
	{ "ns.example:53", 0, NULL, 0 },
	{ "127.0.0.1:0", 0, NULL, 0 },
	{ "127.0.0.1:", 0, NULL, 0 },
	{ "[::1]", 0, NULL, 0 },
	{ "", 0, NULL, 0 },
};

START_TEST(test_nameserver)
{
	const char *text = ns_rows[_i].text;
	struct addr a;
	char err[256] = "";
	int rc = addr_parse_nameserver(text, &a, err, sizeof err);

	if (ns_rows[_i].family != 0) {
		ck_assert_msg(rc == 0, "'%s' refused: %s", text, err);
		ck_assert_int_eq(a.family, ns_rows[_i].family);
		ck_assert_str_eq(a.host, ns_rows[_i].host);
		ck_assert_int_eq(a.port, ns_rows[_i].port);
	} else {
		ck_assert_msg(rc == -1, "'%s' accepted", text);
		ck_assert_msg(err[0] != '\0', "'%s': no message", text);
	}
}
END_TEST

/* The unix path must fit in sun_path with its NUL: 107 bytes, not 108. */
START_TEST(test_endpoint_unix_path_length)
{
	size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
	struct addr a;
	char err[256] = "";

	/* "/" plus n 'x's is n + 1 bytes */
	ck_assert_int_eq(addr_parse_endpoint(unix_path(max - 1), &a, err,
	    sizeof err), 0);
	ck_assert_uint_eq(strlen(a.path), max);
	ck_assert_int_eq(addr_parse_endpoint(unix_path(max), &a, err,
	    sizeof err), -1);
	ck_assert_msg(strstr(err, "longer than 107") != NULL, "err: %s", err);
}
END_TEST

/* A message cut short by a small buffer is still a terminated string. */
START_TEST(test_small_err_buffer)
{
	struct addr a;
	char err[8];

	memset(err, 'z', sizeof err);
	ck_assert_int_eq(addr_parse_endpoint("localhost", &a, err,
	    sizeof err), -1);
	ck_assert_uint_lt(strlen(err), sizeof err);
	memset(err, 'z', sizeof err);
	ck_assert_int_eq(addr_parse_listen("localhost", &a, err, sizeof err),
	    -1);
	ck_assert_uint_lt(strlen(err), sizeof err);
}
END_TEST

START_TEST(test_sockaddr)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	struct addr a;
	char err[256], buf[INET6_ADDRSTRLEN];

	ck_assert_int_eq(addr_parse_listen("127.0.0.1", &a, err, sizeof err),
	    0);
	ck_assert_int_eq(addr_sockaddr(&a, 7711, &ss, &len), 0);
	{
		struct sockaddr_in *sin = (struct sockaddr_in *)(void *)&ss;

		ck_assert_int_eq(len, sizeof *sin);
		ck_assert_int_eq(sin->sin_family, AF_INET);
		ck_assert_int_eq(ntohs(sin->sin_port), 7711);
		ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr), 0x7f000001u);
	}

	ck_assert_int_eq(addr_parse_endpoint("[::1]:6379", &a, err,
	    sizeof err), 0);
	ck_assert_int_eq(addr_sockaddr(&a, 0, &ss, &len), 0);	/* own port */
	{
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)(void *)&ss;

		ck_assert_int_eq(len, sizeof *sin6);
		ck_assert_int_eq(sin6->sin6_family, AF_INET6);
		ck_assert_int_eq(ntohs(sin6->sin6_port), 6379);
		ck_assert_ptr_nonnull(inet_ntop(AF_INET6, &sin6->sin6_addr, buf,
		    sizeof buf));
		ck_assert_str_eq(buf, "::1");
	}

	ck_assert_int_eq(addr_parse_endpoint("unix:/run/r.sock", &a, err,
	    sizeof err), 0);
	ck_assert_int_eq(addr_sockaddr(&a, 0, &ss, &len), 0);
	{
		struct sockaddr_un *sun = (struct sockaddr_un *)(void *)&ss;

		ck_assert_int_eq(len, sizeof *sun);
		ck_assert_int_eq(sun->sun_family, AF_UNIX);
		ck_assert_str_eq(sun->sun_path, "/run/r.sock");
	}

	/* Not filled by a parser (or refused by one): no address. */
	memset(&a, 0, sizeof a);
	ck_assert_int_eq(addr_sockaddr(&a, 1, &ss, &len), -1);
	ck_assert_int_eq(addr_parse_listen("127.0.0.1", &a, err, sizeof err),
	    0);
	ck_assert_int_eq(addr_sockaddr(&a, 65536, &ss, &len), -1);
}
END_TEST

Suite *
addr_suite(void)
{
	Suite *s = suite_create("addr");
	TCase *tc;

	tc = tcase_create("listen");
	tcase_add_loop_test(tc, test_listen, 0,
	    (int)(sizeof listen_rows / sizeof listen_rows[0]));
	suite_add_tcase(s, tc);

	tc = tcase_create("endpoint");
	tcase_add_loop_test(tc, test_endpoint, 0,
	    (int)(sizeof endpoint_rows / sizeof endpoint_rows[0]));
	tcase_add_loop_test(tc, test_endpoint_name, 0,
	    (int)(sizeof name_rows / sizeof name_rows[0]));
	tcase_add_test(tc, test_endpoint_name_length);
	tcase_add_test(tc, test_same_name);
	tcase_add_test(tc, test_endpoint_unix_path_length);
	tcase_add_test(tc, test_small_err_buffer);
	suite_add_tcase(s, tc);

	tc = tcase_create("nameserver");
	tcase_add_loop_test(tc, test_nameserver, 0,
	    (int)(sizeof ns_rows / sizeof ns_rows[0]));
	suite_add_tcase(s, tc);

	tc = tcase_create("sockaddr");
	tcase_add_test(tc, test_sockaddr);
	suite_add_tcase(s, tc);
	return s;
}
