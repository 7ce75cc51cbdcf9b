/*
 * test_config.c - the options table of daemon/config.c and its parsers.
 *
 * Defaults, the bounds of config_set, the conf file reader (comments,
 * blank lines, quotes, CRLF, "FILE:LINE: message" naming the bad line)
 * the address types (checked by daemon/addr.c's parsers, issue 9 defect 8)
 * and the cross-option checks of config_validate.  Conf files are written
 * to mkstemp() files and removed at the end of each test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "suites.h"

/* Write text to a new temp file; its path goes to path (PATH_LEN). */
#define PATH_LEN 64
static void
conf_file(char path[PATH_LEN], const char *text)
{
	size_t len = strlen(text);
	int fd;

	snprintf(path, PATH_LEN, "/tmp/lockbroker-conf-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
}

/* Load text as a conf file into cfg (after config_init); returns rc. */
static int
load_text(struct config *cfg, const char *text, char *err, size_t errlen,
    char path[PATH_LEN])
{
	int rc;

	conf_file(path, text);
	rc = config_load_file(cfg, path, err, errlen);
	unlink(path);
	return rc;
}

START_TEST(test_defaults)
{
	struct config cfg;
	char err[256];

	config_init(&cfg);
	ck_assert_str_eq(cfg.bind, "127.0.0.1");
	ck_assert_int_eq(cfg.port, 7711);
	ck_assert_str_eq(cfg.redis, "127.0.0.1:6379");
	ck_assert_str_eq(cfg.redis_password, "");
	ck_assert_str_eq(cfg.redis_user, "");
	ck_assert_int_eq(cfg.redis_timeout_ms, 1000);
	ck_assert_str_eq(cfg.prefix, "lockbroker");
	ck_assert_int_eq(cfg.default_ttl_ms, 30000);
	ck_assert_int_eq(cfg.min_ttl_ms, 250);
	ck_assert_int_eq(cfg.max_ttl_ms, 600000);
	ck_assert_int_eq(cfg.max_wait_ms, 2147483647);
	ck_assert_int_eq(cfg.max_line, 4096);
	ck_assert_int_eq(cfg.max_key_len, 256);
	ck_assert_int_eq(cfg.max_sessions, 10000);
	ck_assert_int_eq(cfg.max_locks_per_session, 1000);
	ck_assert_int_eq(cfg.max_waiters_per_session, 1000);
	ck_assert_int_eq(cfg.max_waiters, 100000);
	ck_assert_int_eq(cfg.tcp_keepalive_s, 10);
	ck_assert_str_eq(cfg.auth_token, "");
	ck_assert_int_eq(cfg.log_level, LL_INFO);
	ck_assert_str_eq(cfg.metrics_bind, "127.0.0.1");
	ck_assert_int_eq(cfg.metrics_port, 0);
	/* The defaults pass the cross-option checks. */
	ck_assert_int_eq(config_validate(&cfg, err, sizeof err), 0);
	config_free(&cfg);
	ck_assert_ptr_null(cfg.bind);
	ck_assert_ptr_null(cfg.prefix);
}
END_TEST

static const struct {
	const char *value;
	int ok;
} port_rows[] = {
	/* 0: no plain listener (issue 15: with tls_port or unixsocket,
	 * which the whole configuration's check asks for) */
	{ "0", 1 }, { "1", 1 }, { "7711", 1 }, { "65535", 1 },
	{ "65536", 0 }, { "-1", 0 }, { "", 0 }, { "80x", 0 }, { "x80", 0 },
	{ "99999999999999999999999", 0 },	/* overflows long */
};

START_TEST(test_port_bounds)
{
	struct config cfg;
	char err[256];
	const char *v = port_rows[_i].value;
	int rc;

	config_init(&cfg);
	err[0] = '\0';
	rc = config_set(&cfg, "port", v, err, sizeof err);
	if (port_rows[_i].ok) {
		ck_assert_msg(rc == 0, "port '%s' refused: %s", v, err);
		ck_assert_int_eq(cfg.port, strtol(v, NULL, 10));
	} else {
		ck_assert_msg(rc == -1, "port '%s' accepted", v);
		ck_assert_msg(strstr(err, "port") != NULL,
		    "message does not name the option: %s", err);
		ck_assert_int_eq(cfg.port, 7711);	/* unchanged */
	}
	config_free(&cfg);
}
END_TEST

/* Other integer options refuse values outside their own bounds. */
START_TEST(test_int_bounds)
{
	struct config cfg;
	char err[256];

	config_init(&cfg);
	ck_assert_int_eq(config_set(&cfg, "redis_timeout_ms", "49", err,
	    sizeof err), -1);
	ck_assert_int_eq(config_set(&cfg, "redis_timeout_ms", "50", err,
	    sizeof err), 0);
	ck_assert_int_eq(cfg.redis_timeout_ms, 50);
	ck_assert_int_eq(config_set(&cfg, "max_line", "63", err, sizeof err),
	    -1);
	ck_assert_int_eq(config_set(&cfg, "default_ttl_ms", "0", err,
	    sizeof err), -1);
	ck_assert_int_eq(config_set(&cfg, "max_wait_ms", "0", err,
	    sizeof err), 0);
	ck_assert_int_eq(config_set(&cfg, "max_wait_ms", "2147483648", err,
	    sizeof err), -1);
	ck_assert_int_eq(cfg.max_wait_ms, 0);
	ck_assert_int_eq(config_set(&cfg, "min_ttl_ms", "0", err, sizeof err),
	    -1);
	ck_assert_msg(strstr(err, "min_ttl_ms") != NULL, "err: %s", err);
	ck_assert_int_eq(config_set(&cfg, "min_ttl_ms", "1", err, sizeof err),
	    0);
	ck_assert_int_eq(cfg.min_ttl_ms, 1);
	config_free(&cfg);
}
END_TEST

/* A string of n 'x's (n < 1024). */
static const char *
xs(size_t n)
{
	static char buf[1024];

	memset(buf, 'x', n);
	buf[n] = '\0';
	return buf;
}

START_TEST(test_string_lengths)
{
	struct config cfg;
	char err[256];

	config_init(&cfg);
	ck_assert_int_eq(config_set(&cfg, "prefix", xs(64), err, sizeof err),
	    0);
	ck_assert_str_eq(cfg.prefix, xs(64));
	ck_assert_int_eq(config_set(&cfg, "prefix", xs(65), err, sizeof err),
	    -1);
	ck_assert_msg(strstr(err, "prefix") != NULL, "err: %s", err);
	ck_assert_str_eq(cfg.prefix, xs(64));		/* unchanged */
	ck_assert_int_eq(config_set(&cfg, "prefix", "", err, sizeof err), -1);

	/* Addresses are bounded by their parser, not a length. */
	ck_assert_int_eq(config_set(&cfg, "bind", xs(255), err, sizeof err),
	    -1);
	ck_assert_str_eq(cfg.bind, "127.0.0.1");
	ck_assert_int_eq(config_set(&cfg, "redis", "", err, sizeof err), -1);
	ck_assert_int_eq(config_set(&cfg, "auth_token", xs(64), err,
	    sizeof err), 0);
	ck_assert_int_eq(config_set(&cfg, "auth_token", xs(65), err,
	    sizeof err), -1);
	ck_assert_int_eq(config_set(&cfg, "auth_token", "", err, sizeof err),
	    0);
	ck_assert_str_eq(cfg.auth_token, "");
	ck_assert_int_eq(config_set(&cfg, "redis_password", xs(256), err,
	    sizeof err), -1);
	config_free(&cfg);
}
END_TEST

/*
 * The address options take exactly what the listeners and the store
 * take: the first four redis rows and "bind localhost" passed "-t" and
 * then failed at start-up (issue 9, defect 8).
 */
static const struct {
	const char *name, *value;
	int ok;
} addr_rows[] = {
	{ "bind", "127.0.0.1", 1 },
	{ "bind", "0.0.0.0", 1 },
	{ "bind", "::1", 1 },
	{ "bind", "::", 1 },
	{ "bind", "localhost", 0 },
	{ "bind", "[::1]", 0 },
	{ "bind", "127.0.0.1:7711", 0 },
	{ "bind", "", 0 },
	{ "metrics_bind", "::1", 1 },
	{ "metrics_bind", "localhost", 0 },
	{ "metrics_bind", "", 0 },
	{ "redis", "127.0.0.1:6379", 1 },
	{ "redis", "[::1]:6379", 1 },
	{ "redis", "unix:/tmp/x.sock", 1 },
	{ "redis", "127.0.0.1", 0 },
	{ "redis", "127.0.0.1:0", 0 },
	{ "redis", "127.0.0.1:70000", 0 },
	{ "redis", "unix:", 0 },
	{ "redis", "localhost:6379", 0 },
	{ "redis", "::1:6379", 0 },
};

START_TEST(test_addresses)
{
	struct config cfg, def;
	char err[512] = "", want[64];
	const char *name = addr_rows[_i].name, *v = addr_rows[_i].value;
	char **field;
	int rc;

	config_init(&cfg);
	config_init(&def);
	field = strcmp(name, "bind") == 0 ? &cfg.bind :
	    strcmp(name, "metrics_bind") == 0 ? &cfg.metrics_bind : &cfg.redis;
	rc = config_set(&cfg, name, v, err, sizeof err);
	if (addr_rows[_i].ok) {
		ck_assert_msg(rc == 0, "%s '%s' refused: %s", name, v, err);
		ck_assert_str_eq(*field, v);
	} else {
		ck_assert_msg(rc == -1, "%s '%s' accepted", name, v);
		/* "name: 'value' ..." -- which option, and what was wrong */
		snprintf(want, sizeof want, "%s: '%s", name, v);
		ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
		    "want prefix \"%s\", got \"%s\"", want, err);
		ck_assert_str_eq(*field, strcmp(name, "redis") == 0 ?
		    def.redis : def.bind);		/* unchanged */
	}
	config_free(&cfg);
	config_free(&def);
}
END_TEST

static const char *noted;
static int nnoted;

static void
note(const char *name)
{
	noted = name;
	nnoted++;
}

/* A reload keeps the running bind (an address option needs a restart). */
START_TEST(test_keep_static_address)
{
	struct config cur, next;
	char err[256];

	config_init(&cur);
	config_init(&next);
	ck_assert_int_eq(config_set(&next, "bind", "::1", err, sizeof err), 0);
	ck_assert_int_eq(config_set(&next, "min_ttl_ms", "7", err, sizeof err),
	    0);
	nnoted = 0;
	config_keep_static(&cur, &next, note);
	ck_assert_int_eq(nnoted, 1);
	ck_assert_str_eq(noted, "bind");
	ck_assert_str_eq(next.bind, "127.0.0.1");
	ck_assert_int_eq(next.min_ttl_ms, 7);		/* live */
	config_free(&cur);
	config_free(&next);
}
END_TEST

START_TEST(test_unknown_option)
{
	struct config cfg;
	char err[256];

	config_init(&cfg);
	ck_assert_int_eq(config_set(&cfg, "prot", "7711", err, sizeof err),
	    -1);
	ck_assert_msg(strstr(err, "unknown") != NULL && strstr(err, "prot"),
	    "err: %s", err);
	ck_assert_int_eq(config_set(&cfg, "", "1", err, sizeof err), -1);
	ck_assert_int_eq(config_set(&cfg, "PORT", "1", err, sizeof err), -1);
	ck_assert_int_eq(cfg.port, 7711);
	ck_assert(config_has("port"));
	ck_assert(config_has("max_waiters"));
	ck_assert(!config_has("prot"));
	ck_assert(!config_has(""));
	config_free(&cfg);
}
END_TEST

START_TEST(test_log_level)
{
	struct config cfg;
	char err[256];

	config_init(&cfg);
	ck_assert_int_eq(config_set(&cfg, "log_level", "debug", err,
	    sizeof err), 0);
	ck_assert_int_eq(cfg.log_level, LL_DEBUG);
	ck_assert_int_eq(config_set(&cfg, "log_level", "error", err,
	    sizeof err), 0);
	ck_assert_int_eq(cfg.log_level, LL_ERROR);
	ck_assert_int_eq(config_set(&cfg, "log_level", "loud", err,
	    sizeof err), -1);
	ck_assert_int_eq(cfg.log_level, LL_ERROR);
	config_free(&cfg);
}
END_TEST

/* Comments, blank lines, indentation, tabs, CRLF and quotes. */
START_TEST(test_file_ok)
{
	struct config cfg;
	char err[512] = "", path[PATH_LEN];
	int rc;

	config_init(&cfg);
	rc = load_text(&cfg,
	    "# lockbrokerd.conf\n"
	    "\n"
	    "   # an indented comment\n"
	    "port 8000\n"
	    "\t\n"
	    "  bind\t\t::1  \n"
	    "redis_password \"\"\n"
	    "auth_token \"two words\"\n"
	    "prefix \"quoted\"\n"
	    "max_waiters 5\r\n"
	    "log_level warn", err, sizeof err, path);
	ck_assert_msg(rc == 0, "load failed: %s", err);
	ck_assert_int_eq(cfg.port, 8000);
	ck_assert_str_eq(cfg.bind, "::1");
	ck_assert_str_eq(cfg.redis_password, "");
	ck_assert_str_eq(cfg.auth_token, "two words");
	ck_assert_str_eq(cfg.prefix, "quoted");
	ck_assert_int_eq(cfg.max_waiters, 5);
	ck_assert_int_eq(cfg.log_level, LL_WARN);
	/* Untouched options keep their defaults. */
	ck_assert_str_eq(cfg.redis, "127.0.0.1:6379");
	config_free(&cfg);
}
END_TEST

/* A quoted "" empties an option that had a value. */
START_TEST(test_file_empty_quotes)
{
	struct config cfg;
	char err[512] = "", path[PATH_LEN];

	config_init(&cfg);
	ck_assert_int_eq(config_set(&cfg, "auth_token", "secret", err,
	    sizeof err), 0);
	ck_assert_int_eq(load_text(&cfg, "auth_token \"\"\n", err, sizeof err,
	    path), 0);
	ck_assert_str_eq(cfg.auth_token, "");
	/* ...and is refused where the empty string is. */
	ck_assert_int_eq(load_text(&cfg, "prefix \"\"\n", err, sizeof err,
	    path), -1);
	config_free(&cfg);
}
END_TEST

static const struct {
	const char *text;
	int line;
	const char *word;		/* expected in the message */
} bad_rows[] = {
	{ "port -1\n", 1, "port" },
	{ "# c\n\nport 7000\n  # c\n\nport 65536\nbind ::1\n", 6, "port" },
	{ "\n\n\n\nnosuch 1\n", 5, "nosuch" },
	{ "# x\nprefix \"a\"\nmax_line 10\n", 3, "max_line" },
	{ "port 1\r\nport 2\r\nport x\r\n", 3, "port" },
	{ "log_level info\nlog_level shout\n", 2, "log_level" },
	{ "port 7000\nbind localhost\n", 2, "bind" },
	{ "redis 127.0.0.1:6379\n\nredis 127.0.0.1\n", 3, "redis" },
};

/* The error names the file and the line it is on. */
START_TEST(test_file_bad_line)
{
	struct config cfg;
	char err[512] = "", path[PATH_LEN], want[PATH_LEN + 16];
	int rc;

	config_init(&cfg);
	rc = load_text(&cfg, bad_rows[_i].text, err, sizeof err, path);
	ck_assert_int_eq(rc, -1);
	snprintf(want, sizeof want, "%s:%d: ", path, bad_rows[_i].line);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
	    "want prefix '%s', got '%s'", want, err);
	ck_assert_msg(strstr(err + strlen(want), bad_rows[_i].word) != NULL,
	    "message does not name '%s': %s", bad_rows[_i].word, err);
	config_free(&cfg);
}
END_TEST

START_TEST(test_file_line_too_long)
{
	struct config cfg;
	char err[512] = "", path[PATH_LEN], want[PATH_LEN + 16];
	char *text = malloc(4096);

	ck_assert_ptr_nonnull(text);
	snprintf(text, 4096, "port 1\nauth_token %s\n", xs(1020));
	config_init(&cfg);
	ck_assert_int_eq(load_text(&cfg, text, err, sizeof err, path), -1);
	snprintf(want, sizeof want, "%s:2: ", path);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "got '%s'", err);
	config_free(&cfg);
	free(text);
}
END_TEST

START_TEST(test_file_missing)
{
	struct config cfg;
	char err[512] = "";

	config_init(&cfg);
	ck_assert_int_eq(config_load_file(&cfg, "/nonexistent/lockbroker.conf",
	    err, sizeof err), -1);
	ck_assert_msg(strncmp(err, "/nonexistent/lockbroker.conf: ", 30) == 0,
	    "got '%s'", err);
	config_free(&cfg);
}
END_TEST

/* Bounds of min_ttl_ms <= default_ttl_ms <= max_ttl_ms, each alone in
 * range; err must name both options of the broken pair. */
static const struct {
	const char *min, *def, *max;
	const char *word1, *word2;	/* NULL: valid */
} ttl_rows[] = {
	{ "250", "30000", "600000", NULL, NULL },
	{ "1000", "1000", "1000", NULL, NULL },
	{ "1", "1", "2147483647", NULL, NULL },
	{ "1001", "1000", "600000", "min_ttl_ms", "default_ttl_ms" },
	{ "250", "1001", "1000", "default_ttl_ms", "max_ttl_ms" },
	{ "5000", "30000", "1000", "default_ttl_ms", "max_ttl_ms" },
	{ "5000", "1000", "2000", "min_ttl_ms", "default_ttl_ms" },
};

START_TEST(test_validate_ttl_order)
{
	struct config cfg;
	char err[256] = "";
	int rc;

	config_init(&cfg);
	ck_assert_int_eq(config_set(&cfg, "min_ttl_ms", ttl_rows[_i].min, err,
	    sizeof err), 0);
	ck_assert_int_eq(config_set(&cfg, "default_ttl_ms", ttl_rows[_i].def,
	    err, sizeof err), 0);
	ck_assert_int_eq(config_set(&cfg, "max_ttl_ms", ttl_rows[_i].max, err,
	    sizeof err), 0);
	rc = config_validate(&cfg, err, sizeof err);
	if (ttl_rows[_i].word1 == NULL) {
		ck_assert_msg(rc == 0, "row %d refused: %s", _i, err);
	} else {
		ck_assert_msg(rc == -1, "row %d accepted", _i);
		ck_assert_msg(strstr(err, ttl_rows[_i].word1) != NULL &&
		    strstr(err, ttl_rows[_i].word2) != NULL, "row %d: %s", _i,
		    err);
	}
	config_free(&cfg);
}
END_TEST

START_TEST(test_validate_ttls)
{
	struct config cfg;
	char err[256] = "";

	config_init(&cfg);
	ck_assert_int_eq(config_set(&cfg, "max_ttl_ms", "1000", err,
	    sizeof err), 0);
	ck_assert_int_eq(config_set(&cfg, "default_ttl_ms", "1001", err,
	    sizeof err), 0);		/* each alone is in range */
	ck_assert_int_eq(config_validate(&cfg, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "default_ttl_ms") != NULL, "err: %s", err);
	ck_assert_int_eq(config_set(&cfg, "default_ttl_ms", "1000", err,
	    sizeof err), 0);
	ck_assert_int_eq(config_validate(&cfg, err, sizeof err), 0);
	config_free(&cfg);
}
END_TEST

/* A prefix with a space can only come in quotes; validate refuses it. */
START_TEST(test_validate_prefix)
{
	struct config cfg;
	char err[512] = "", path[PATH_LEN];

	config_init(&cfg);
	ck_assert_int_eq(load_text(&cfg, "prefix \"a b\"\n", err, sizeof err,
	    path), 0);
	ck_assert_str_eq(cfg.prefix, "a b");
	ck_assert_int_eq(config_validate(&cfg, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "prefix") != NULL, "err: %s", err);
	config_free(&cfg);
}
END_TEST

/* Cluster mode: seeds alone validate; with redis, the Sentinel options
 * or a brace in the prefix they do not, and the error says why. */
START_TEST(test_validate_cluster)
{
	static const char *const bad[][2] = {
		{ "redis 127.0.0.1:6379\n", "exclusive" },
		{ "redis_sentinels 127.0.0.1:26379\nredis_master_name m\n",
		  "exclusive" },
		{ "redis_master_name m\n", "exclusive" },
		{ "prefix a{b\n", "brace" },
		{ "prefix ab}\n", "brace" },
	};
	struct config cfg;
	char err[512] = "", path[PATH_LEN], text[256];

	config_init(&cfg);
	ck_assert_int_eq(load_text(&cfg, "redis_cluster 127.0.0.1:7000,"
	    "[::1]:7001\n", err, sizeof err, path), 0);
	ck_assert_str_eq(cfg.redis_cluster, "127.0.0.1:7000,[::1]:7001");
	ck_assert_int_eq(config_validate(&cfg, err, sizeof err), 0);
	config_free(&cfg);
	config_init(&cfg);
	ck_assert_int_eq(load_text(&cfg, "redis_cluster unix:/tmp/x\n", err,
	    sizeof err, path), -1);
	config_free(&cfg);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		config_init(&cfg);
		snprintf(text, sizeof text, "redis_cluster 127.0.0.1:7000\n%s",
		    bad[i][0]);
		ck_assert_int_eq(load_text(&cfg, text, err, sizeof err, path),
		    0);
		ck_assert_int_eq(config_validate(&cfg, err, sizeof err), -1);
		ck_assert_msg(strstr(err, bad[i][1]) != NULL, "%s: %s",
		    bad[i][0], err);
		config_free(&cfg);
	}
}
END_TEST

Suite *
config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = tcase_create("set");
	tcase_add_test(tc, test_defaults);
	tcase_add_loop_test(tc, test_port_bounds, 0,
	    (int)(sizeof port_rows / sizeof port_rows[0]));
	tcase_add_test(tc, test_int_bounds);
	tcase_add_test(tc, test_string_lengths);
	tcase_add_test(tc, test_unknown_option);
	tcase_add_loop_test(tc, test_addresses, 0,
	    (int)(sizeof addr_rows / sizeof addr_rows[0]));
	tcase_add_test(tc, test_keep_static_address);
	tcase_add_test(tc, test_log_level);
	suite_add_tcase(s, tc);

	tc = tcase_create("file");
	tcase_add_test(tc, test_file_ok);
	tcase_add_test(tc, test_file_empty_quotes);
	tcase_add_loop_test(tc, test_file_bad_line, 0,
	    (int)(sizeof bad_rows / sizeof bad_rows[0]));
	tcase_add_test(tc, test_file_line_too_long);
	tcase_add_test(tc, test_file_missing);
	suite_add_tcase(s, tc);

	tc = tcase_create("validate");
	tcase_add_test(tc, test_validate_ttls);
	tcase_add_loop_test(tc, test_validate_ttl_order, 0,
	    (int)(sizeof ttl_rows / sizeof ttl_rows[0]));
	tcase_add_test(tc, test_validate_prefix);
	tcase_add_test(tc, test_validate_cluster);
	suite_add_tcase(s, tc);
	return s;
}
