/*
 * test_acl.c - the access list of daemon/front/acl.c: the acl_file
 * parser (good lines, every error with its line number, long lines,
 * duplicates, bad hex), the glob matcher (checked against a naive
 * recursive one too), lookups by hash and by name, the auth_token app,
 * and the SHA-256 of daemon/front/tokenhash.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acl.h"
#include "naive_glob.h"
#include "suites.h"
#include "tokenhash.h"

/* sha256("alpha-token") and sha256("beta-token"), as sha256sum prints */
#define HA "2c4b6b8b5b0f4c0f3e5f9b8e2f3b6a0d9f7e1c2b3a4d5e6f708192a3b4c5d6e7"
#define HB "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"

static struct acl *
parse(const char *text, char *err, size_t errlen)
{
	err[0] = '\0';
	return acl_parse(text, strlen(text), "acl", err, errlen);
}

/* text must fail, with exactly "acl:LINE: " then a message holding
 * needle. */
static void
refused(const char *text, unsigned line, const char *needle)
{
	char err[600], want[32];
	struct acl *acl = parse(text, err, sizeof err);

	if (acl != NULL) {
		acl_unref(acl);
		ck_abort_msg("accepted: %s", text);
	}
	snprintf(want, sizeof want, "acl:%u: ", line);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
	    "'%s' does not start with '%s' for %s", err, want, text);
	ck_assert_msg(strstr(err, needle) != NULL, "'%s' lacks '%s'", err,
	    needle);
}

static int
allows(const struct acl_app *a, const char *key)
{
	return acl_app_allows(a, key, strlen(key));
}

START_TEST(test_good_file)
{
	char err[256];
	struct acl *acl = parse(
	    "# apps of the shop\n"
	    "\n"
	    "   \t\n"
	    "  # indented comment\n"
	    "app billing token-sha256 " HA " keys billing:*,invoices:?\n"
	    "app\treports.v2\t token-sha256  " HB "\tkeys   reports:*  \r\n"
	    "app Shop_Front-1 token-sha256 " "0000000000000000000000000000000"
	    "000000000000000000000000000000000 keys x",	/* no final LF */
	    err, sizeof err);
	const struct acl_app *b, *r, *s;

	ck_assert_msg(acl != NULL, "%s", err);
	ck_assert_uint_eq(acl_count(acl), 3);
	b = acl_app_named(acl, "billing");
	r = acl_app_named(acl, "reports.v2");
	s = acl_app_named(acl, "Shop_Front-1");
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_nonnull(s);
	ck_assert_ptr_eq(acl_app_at(acl, 0), b);
	ck_assert_str_eq(acl_app_name(b), "billing");
	ck_assert_uint_eq(acl_app_line(b), 5);
	ck_assert_uint_eq(acl_app_line(r), 6);
	ck_assert_uint_eq(acl_app_line(s), 7);
	ck_assert_ptr_null(acl_app_named(acl, "Billing"));	/* case */
	ck_assert_ptr_null(acl_app_named(acl, "bill"));
	ck_assert_ptr_null(acl_app_named(NULL, "billing"));

	ck_assert(allows(b, "billing:1"));
	ck_assert(allows(b, "billing:"));
	ck_assert(allows(b, "invoices:7"));
	ck_assert(!allows(b, "invoices:77"));
	ck_assert(!allows(b, "reports:1"));
	ck_assert(!allows(b, "Billing:1"));
	ck_assert(allows(r, "reports:a/b:c"));	/* no path rules */
	ck_assert(!allows(r, "billing:1"));
	ck_assert(allows(s, "x"));
	ck_assert(!allows(s, "xx"));
	acl_unref(acl);
}
END_TEST

START_TEST(test_empty_files_are_valid)
{
	char err[256];
	const char *texts[] = { "", "\n", "# nothing\n\n", "\r\n  \t\r\n" };

	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		struct acl *acl = parse(texts[i], err, sizeof err);

		ck_assert_msg(acl != NULL, "%s", err);
		ck_assert_uint_eq(acl_count(acl), 0);
		ck_assert_ptr_null(acl_app_named(acl, "x"));
		acl_unref(acl);
	}
}
END_TEST

START_TEST(test_hash_lookup)
{
	unsigned char h[ACL_HASH_LEN];
	char err[256];
	struct acl *acl = parse("app a token-sha256 " HA " keys *\n"
	    "app b token-sha256 " HB " keys *\n", err, sizeof err);

	ck_assert_msg(acl != NULL, "%s", err);
	for (int i = 0; i < ACL_HASH_LEN; i++) {
		unsigned v;

		sscanf(&HB[2 * i], "%2x", &v);
		h[i] = (unsigned char)v;
	}
	ck_assert_str_eq(acl_app_name(acl_app_by_hash(acl, h)), "b");
	h[ACL_HASH_LEN - 1] ^= 1;
	ck_assert_ptr_null(acl_app_by_hash(acl, h));
	ck_assert_ptr_null(acl_app_by_hash(NULL, h));
	acl_unref(acl);
}
END_TEST

/* Upper-case hex is the same hash. */
START_TEST(test_hex_case)
{
	char err[256], line[200];
	struct acl *acl;
	unsigned char h[ACL_HASH_LEN];

	snprintf(line, sizeof line, "app a token-sha256 %s keys *\n",
	    "ABCDEF0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789");
	acl = parse(line, err, sizeof err);
	ck_assert_msg(acl != NULL, "%s", err);
	for (int i = 0; i < ACL_HASH_LEN / 8; i++)
		memcpy(h + 8 * i, "\xab\xcd\xef\x01\x23\x45\x67\x89", 8);
	ck_assert_ptr_nonnull(acl_app_by_hash(acl, h));
	acl_unref(acl);
}
END_TEST

START_TEST(test_errors_name_their_line)
{
	char big[ACL_LINE_MAX + 200], pat[ACL_PATTERN_MAX + 200];
	char many[(ACL_APPS_MAX + 1) * 100];
	size_t off = 0;

	refused("# one\nbogus line here\n", 2, "not a known line");
	refused("\n\napps a token-sha256 " HA " keys *\n", 3,
	    "not a known line");
	refused("app a token-sha256 " HA " keys\n", 1, "too few words");
	refused("app a token-sha256 " HA "\n", 1, "too few words");
	refused("app\n", 1, "too few words");
	refused("app a token-sha256 " HA " keys x, y\n", 1, "extra words");
	refused("app a token-sha256 " HA " keys x y\n", 1, "extra words");
	refused("app a tokensha256 " HA " keys x\n", 1, "expected "
	    "token-sha256");
	refused("app a token-sha1 " HA " keys x\n", 1, "expected "
	    "token-sha256");
	refused("app a token-sha256 " HA " key x\n", 1, "expected keys");
	/* names */
	refused("app a:b token-sha256 " HA " keys x\n", 1, "bad app name");
	refused("app a/b token-sha256 " HA " keys x\n", 1, "bad app name");
	refused("app a,b token-sha256 " HA " keys x\n", 1, "bad app name");
	refused("app a=b token-sha256 " HA " keys x\n", 1, "bad app name");
	refused("app a\"b token-sha256 " HA " keys x\n", 1, "bad app name");
	refused("app aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaa token-sha256 " HA " keys x\n", 1, "bad app name");
	/* hashes */
	refused("app a token-sha256 " HA "0 keys x\n", 1, "65 characters");
	refused("app a token-sha256 abc keys x\n", 1, "3 characters");
	refused("app a token-sha256 "
	    "2c4b6b8b5b0f4c0f3e5f9b8e2f3b6a0d9f7e1c2b3a4d5e6f708192a3b4c5d6eg"
	    " keys x\n", 1, "not hex (character 64)");
	refused("app a token-sha256 "
	    "x c4b6b8b5b0f4c0f3e5f9b8e2f3b6a0d9f7e1c2b3a4d5e6f708192a3b4c5d6e7"
	    " keys x\n", 1, "extra words");
	refused("app a token-sha256 "
	    "-c4b6b8b5b0f4c0f3e5f9b8e2f3b6a0d9f7e1c2b3a4d5e6f708192a3b4c5d6e7"
	    " keys x\n", 1, "not hex (character 1)");
	/* duplicates */
	refused("app a token-sha256 " HA " keys x\n"
	    "# b\n"
	    "app a token-sha256 " HB " keys y\n", 3,
	    "'a' is defined twice (first on line 1)");
	refused("app a token-sha256 " HA " keys x\n"
	    "app b token-sha256 " HA " keys y\n", 2,
	    "same token hash as app 'a' (line 1)");
	/* patterns */
	refused("app a token-sha256 " HA " keys x,,y\n", 1, "empty pattern");
	refused("app a token-sha256 " HA " keys x,\n", 1, "empty pattern");
	refused("app a token-sha256 " HA " keys ,x\n", 1, "empty pattern");
	refused("app a token-sha256 " HA " keys x\\\n", 1, "lone '\\'");
	refused("app a token-sha256 " HA " keys [ab]*\n", 1, "character "
	    "classes are not supported");
	refused("app a token-sha256 " HA " keys a]\n", 1, "character "
	    "classes are not supported");
	/* bytes */
	refused("app a token-sha256 " HA " keys x\n\x01\n", 2, "byte 0x01 at "
	    "column 1");
	refused("app a token-sha256 " HA " keys caf\xc3\xa9\n", 1,
	    "byte 0xc3 at column 93:");
	refused("x\ry\n", 1, "byte 0x0d at column 2");
	{
		/* a NUL in the middle of the text */
		static const char t[] = "# ok\nap\0p\n";
		char err[300];
		struct acl *acl = acl_parse(t, sizeof t - 1, "acl", err,
		    sizeof err);

		ck_assert_ptr_null(acl);
		ck_assert_str_eq(err, "acl:2: byte 0x00 at column 3: only "
		    "printable ASCII and tabs are allowed");
	}
	/* a line over ACL_LINE_MAX: refused with its number */
	memset(big, 'x', sizeof big);
	memcpy(big, "\n\napp a token-sha256 " HA " keys ",
	    strlen("\n\napp a token-sha256 " HA " keys "));
	big[sizeof big - 1] = '\0';
	refused(big, 3, "line longer than 4096 bytes");
	/* ACL_LINE_MAX exactly (CR excluded) is fine */
	{
		char line[ACL_LINE_MAX + 3], err[300];
		struct acl *acl;
		size_t head = strlen("app a token-sha256 " HA " keys ");

		memcpy(line, "app a token-sha256 " HA " keys ", head);
		for (size_t i = head; i < ACL_LINE_MAX; i++)
			line[i] = (i - head) % 9 == 8 ? ',' : 'k';
		memcpy(line + ACL_LINE_MAX, "\r\n", 3);
		acl = parse(line, err, sizeof err);
		ck_assert_msg(acl != NULL, "%s", err);
		acl_unref(acl);
	}
	/* a pattern over ACL_PATTERN_MAX */
	memset(pat, 'p', sizeof pat);
	off = strlen("app a token-sha256 " HA " keys ");
	memcpy(pat, "app a token-sha256 " HA " keys ", off);
	pat[off + ACL_PATTERN_MAX + 1] = '\n';
	pat[off + ACL_PATTERN_MAX + 2] = '\0';
	off = 0;
	refused(pat, 1, "pattern longer than 1024 bytes");
	/* more than ACL_APPS_MAX apps */
	for (int i = 0; i <= ACL_APPS_MAX; i++)
		off += (size_t)snprintf(many + off, sizeof many - off,
		    "app a%d token-sha256 %064x keys k\n", i, i);
	refused(many, ACL_APPS_MAX + 1, "more than 1024 apps");
}
END_TEST

START_TEST(test_escapes)
{
	char err[256];
	struct acl *acl = parse("app a token-sha256 " HA
	    " keys lit\\*,co\\,mma,\\[x\\],q\\?,back\\\\slash,\\a*\n", err,
	    sizeof err);
	const struct acl_app *a;

	ck_assert_msg(acl != NULL, "%s", err);
	a = acl_app_at(acl, 0);
	ck_assert(allows(a, "lit*"));
	ck_assert(!allows(a, "lit"));
	ck_assert(!allows(a, "litx"));
	ck_assert(allows(a, "co,mma"));
	ck_assert(!allows(a, "co"));
	ck_assert(!allows(a, "mma"));
	ck_assert(allows(a, "[x]"));
	ck_assert(allows(a, "q?"));
	ck_assert(!allows(a, "qq"));
	ck_assert(allows(a, "back\\slash"));
	ck_assert(allows(a, "abc"));
	acl_unref(acl);
}
END_TEST

static int
m(const char *pat, const char *s)
{
	return acl_glob_match(pat, strlen(pat), s, strlen(s));
}

START_TEST(test_glob)
{
	ck_assert(m("*", ""));
	ck_assert(m("*", "anything:at/all"));
	ck_assert(m("", ""));
	ck_assert(!m("", "a"));
	ck_assert(m("a", "a"));
	ck_assert(!m("a", "A"));
	ck_assert(m("?", "x"));
	ck_assert(!m("?", ""));
	ck_assert(!m("?", "xy"));
	ck_assert(m("a*b", "ab"));
	ck_assert(m("a*b", "a:/:b"));
	ck_assert(!m("a*b", "a:/:bc"));
	ck_assert(m("a*b*c", "abbbcbc"));
	ck_assert(m("*:*:*", "a:b:c"));
	ck_assert(!m("*:*:*", "a:b"));
	ck_assert(m("**", "x"));
	ck_assert(m("*?", "x"));
	ck_assert(!m("*??", "x"));
	ck_assert(m("orders:*:lock", "orders:42:lock"));
	ck_assert(!m("orders:*:lock", "orders:42:locks"));
	ck_assert(m("\\*", "*"));
	ck_assert(!m("\\*", "x"));
	ck_assert(m("\\?", "?"));
	ck_assert(!m("\\?", "a"));
	/* the worst case stays linear-ish: no exponential backtracking */
	{
		char s[4097], p[64];

		memset(s, 'a', 4096);
		s[4096] = '\0';
		snprintf(p, sizeof p, "*a*a*a*a*a*a*a*a*a*a*a*a*b");
		ck_assert(!m(p, s));
	}
}
END_TEST

START_TEST(test_glob_against_naive)
{
	static const char alpha[] = "ab*?\\";
	unsigned seed = 12345;

	for (int n = 0; n < 200000; n++) {
		char p[8], s[8];
		size_t pl, sl;

		seed = seed * 1103515245u + 12345u;
		pl = (seed >> 16) % 7;
		seed = seed * 1103515245u + 12345u;
		sl = (seed >> 16) % 7;
		for (size_t i = 0; i < pl; i++) {
			seed = seed * 1103515245u + 12345u;
			p[i] = alpha[(seed >> 16) % 5];
		}
		for (size_t i = 0; i < sl; i++) {
			seed = seed * 1103515245u + 12345u;
			s[i] = alpha[(seed >> 16) % 5];
		}
		if (pl > 0 && p[pl - 1] == '\\' &&
		    (pl < 2 || p[pl - 2] != '\\'))
			pl--;	/* a lone trailing '\' is refused at parse */
		ck_assert_msg(acl_glob_match(p, pl, s, sl) ==
		    naive_glob(p, pl, s, sl), "pattern '%.*s' key '%.*s'",
		    (int)pl, p, (int)sl, s);
	}
}
END_TEST

START_TEST(test_names)
{
	ck_assert(acl_name_ok("a", 1));
	ck_assert(acl_name_ok("billing.example.com", 19));
	ck_assert(acl_name_ok("A-z_0.9", 7));
	ck_assert(!acl_name_ok("", 0));
	ck_assert(!acl_name_ok("a b", 3));
	ck_assert(!acl_name_ok("a:b", 3));
	ck_assert(!acl_name_ok("a,b", 3));
	ck_assert(!acl_name_ok("a\"b", 3));
	ck_assert(acl_name_ok("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	    "xxxxxxxxxxxx", 64));
	ck_assert(!acl_name_ok("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	    "xxxxxxxxxxxxx", 65));
}
END_TEST

START_TEST(test_token_app)
{
	unsigned char h[ACL_HASH_LEN], hb[ACL_HASH_LEN];
	char err[256];
	struct acl *acl = parse("app a token-sha256 " HA " keys a:*\n"
	    "app default2 token-sha256 " HB " keys x\n", err, sizeof err);
	const struct acl_app *d;

	ck_assert_msg(acl != NULL, "%s", err);
	ck_assert_int_eq(tokenhash_sha256("admin", 5, h), 0);
	ck_assert_int_eq(acl_add_token_app(acl, "default", h, err,
	    sizeof err), 0);
	ck_assert_uint_eq(acl_count(acl), 3);
	d = acl_app_by_hash(acl, h);
	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(acl_app_name(d), "default");
	ck_assert_uint_eq(acl_app_line(d), 0);
	ck_assert(allows(d, "anything:at/all"));
	/* a certificate cannot name the token app */
	ck_assert_ptr_null(acl_app_named(acl, "default"));
	acl_unref(acl);

	/* the name taken in the file: refused, naming the line */
	acl = parse("\napp default token-sha256 " HA " keys a:*\n", err,
	    sizeof err);
	ck_assert_ptr_nonnull(acl);
	ck_assert_int_eq(acl_add_token_app(acl, "default", h, err,
	    sizeof err), -1);
	ck_assert_msg(strstr(err, "line 2") && strstr(err, "'default'"),
	    "%s", err);
	acl_unref(acl);

	/* the same token as an app of the file: refused */
	for (int i = 0; i < ACL_HASH_LEN; i++) {
		unsigned v;

		sscanf(&HB[2 * i], "%2x", &v);
		hb[i] = (unsigned char)v;
	}
	acl = parse("app a token-sha256 " HA " keys a:*\n"
	    "app b token-sha256 " HB " keys b:*\n", err, sizeof err);
	ck_assert_ptr_nonnull(acl);
	ck_assert_int_eq(acl_add_token_app(acl, "default", hb, err,
	    sizeof err), -1);
	ck_assert_msg(strstr(err, "line 2") && strstr(err, "'b'"), "%s", err);
	acl_unref(acl);
}
END_TEST

/* A list of globs alone (conf fenced_write_keys): the keys list's syntax
 * and checks, one app with no token; errors name the list, no line. */
START_TEST(test_globs_alone)
{
	static const char *const bad[] = { "", "a,", ",a", "a,,b", "a b",
	    "a,\tb", "x[1]", "a\\", "a\x7f" };
	char err[256];
	struct acl *acl = acl_parse_globs("fw:*,orders:??,lit\\*,c\\,d",
	    "fenced_write_keys", err, sizeof err);
	const struct acl_app *a;

	ck_assert_msg(acl != NULL, "%s", err);
	ck_assert_uint_eq(acl_count(acl), 1);
	a = acl_app_at(acl, 0);
	ck_assert_str_eq(acl_app_name(a), "fenced_write_keys");
	ck_assert(allows(a, "fw:") && allows(a, "fw:a/b:c"));
	ck_assert(allows(a, "orders:42") && !allows(a, "orders:421"));
	ck_assert(allows(a, "lit*") && !allows(a, "litx"));
	ck_assert(allows(a, "c,d") && !allows(a, "c"));
	ck_assert(!allows(a, "xfw:1") && !allows(a, "FW:1"));
	/* no session authenticates as it */
	ck_assert_ptr_null(acl_app_named(acl, "fenced_write_keys"));
	acl_unref(acl);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ck_assert_msg(acl_parse_globs(bad[i], "fenced_write_keys", err,
		    sizeof err) == NULL, "'%s' accepted", bad[i]);
		ck_assert_msg(strncmp(err, "fenced_write_keys: ", 19) == 0 &&
		    strstr(err, ":0:") == NULL, "%s", err);
	}
	/* no longer than an acl_file line (one given on the command line) */
	{
		char *list = malloc(ACL_LINE_MAX + 2);

		ck_assert_ptr_nonnull(list);
		for (size_t i = 0; i < ACL_LINE_MAX + 1; i++)
			list[i] = i % 100 == 99 ? ',' : 'a';	/* patterns */
		list[ACL_LINE_MAX - 1] = 'a';
		list[ACL_LINE_MAX] = '\0';
		acl = acl_parse_globs(list, "fenced_write_keys", err,
		    sizeof err);
		ck_assert_msg(acl != NULL, "%s", err);
		acl_unref(acl);
		list[ACL_LINE_MAX] = 'a';
		list[ACL_LINE_MAX + 1] = '\0';
		ck_assert_ptr_null(acl_parse_globs(list, "fenced_write_keys",
		    err, sizeof err));
		ck_assert_msg(strstr(err, "longer than") != NULL, "%s", err);
		free(list);
	}
}
END_TEST

/* "admin" after the keys list makes an app an admin (the admin words);
 * any other word there is refused, as is "admin" anywhere else; the
 * auth_token app never is one. */
START_TEST(test_admin_word)
{
	unsigned char h[ACL_HASH_LEN];
	char err[256];
	struct acl *acl = parse("app ops token-sha256 " HA " keys *  admin\n"
	    "app a token-sha256 " HB " keys a:*\n", err, sizeof err);

	ck_assert_msg(acl != NULL, "%s", err);
	ck_assert_str_eq(acl_app_name(acl_app_at(acl, 0)), "ops");
	ck_assert_int_eq(acl_app_admin(acl_app_at(acl, 0)), 1);
	ck_assert_int_eq(acl_app_admin(acl_app_at(acl, 1)), 0);
	ck_assert(allows(acl_app_at(acl, 0), "x"));
	ck_assert_int_eq(tokenhash_sha256("tok", 3, h), 0);
	ck_assert_int_eq(acl_add_token_app(acl, "default", h, err,
	    sizeof err), 0);
	ck_assert_int_eq(acl_app_admin(acl_app_by_hash(acl, h)), 0);
	acl_unref(acl);

	refused("app a token-sha256 " HA " keys x admins\n", 1, "extra words");
	refused("app a token-sha256 " HA " keys x ADMIN\n", 1, "extra words");
	refused("app a token-sha256 " HA " keys x admin admin\n", 1,
	    "extra words");
	/* "admin" as the keys list is a pattern, not the word */
	acl = parse("app a token-sha256 " HA " keys admin\n", err, sizeof err);
	ck_assert_msg(acl != NULL, "%s", err);
	ck_assert_int_eq(acl_app_admin(acl_app_at(acl, 0)), 0);
	ck_assert(allows(acl_app_at(acl, 0), "admin"));
	acl_unref(acl);
}
END_TEST

/* The glob check LOCKS shares with the access list's patterns. */
START_TEST(test_glob_ok)
{
	char why[256];

	ck_assert(acl_glob_ok("orders:*", 8, why, sizeof why));
	ck_assert(acl_glob_ok("a\\[b\\]", 6, why, sizeof why));
	ck_assert(acl_glob_ok("?", 1, why, sizeof why));
	ck_assert(!acl_glob_ok("a[bc]", 5, why, sizeof why));
	ck_assert_msg(strstr(why, "character classes") != NULL, "%s", why);
	ck_assert(!acl_glob_ok("ab\\", 3, why, sizeof why));
	ck_assert_msg(strstr(why, "lone") != NULL, "%s", why);
	ck_assert(!acl_glob_ok("", 0, why, sizeof why));
}
END_TEST

/* Sessions keep a list alive after the broker dropped it (SIGHUP). */
START_TEST(test_refcount)
{
	char err[256];
	struct acl *acl = parse("app a token-sha256 " HA " keys a:*\n", err,
	    sizeof err);
	const struct acl_app *a = acl_app_named(acl, "a");

	acl_app_hold(a);
	acl_unref(acl);			/* the broker's reference */
	ck_assert(allows(a, "a:1"));	/* still valid (ASan would tell) */
	acl_app_release(a);
	acl_unref(NULL);
}
END_TEST

START_TEST(test_sha256)
{
	static const unsigned char abc[ACL_HASH_LEN] = {
		0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41,
		0x40, 0xde, 0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3,
		0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00,
		0x15, 0xad };
	unsigned char h[ACL_HASH_LEN];

	ck_assert_int_eq(tokenhash_sha256("abc", 3, h), 0);
	ck_assert_mem_eq(h, abc, ACL_HASH_LEN);
}
END_TEST

START_TEST(test_load)
{
	char path[] = "/tmp/lockbroker-acl-XXXXXX", err[512];
	const char text[] = "app a token-sha256 " HA " keys a:*\nbad\n";
	int fd = mkstemp(path);
	struct acl *acl;
	FILE *f;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, sizeof text - 1),
	    (ssize_t)(sizeof text - 1));
	close(fd);
	acl = acl_load(path, err, sizeof err);
	ck_assert_ptr_null(acl);
	ck_assert_msg(strncmp(err, path, strlen(path)) == 0 &&
	    strncmp(err + strlen(path), ":2: ", 4) == 0, "%s", err);
	/* too large */
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	for (int i = 0; i <= ACL_FILE_MAX / 8; i++)
		fputs("#######\n", f);
	fclose(f);
	ck_assert_ptr_null(acl_load(path, err, sizeof err));
	ck_assert_msg(strstr(err, "larger than") != NULL, "%s", err);
	unlink(path);
	ck_assert_ptr_null(acl_load(path, err, sizeof err));
	ck_assert_msg(strstr(err, "No such file") != NULL, "%s", err);
}
END_TEST

Suite *
acl_suite(void)
{
	Suite *s = suite_create("acl");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_good_file);
	tcase_add_test(tc, test_empty_files_are_valid);
	tcase_add_test(tc, test_hash_lookup);
	tcase_add_test(tc, test_hex_case);
	tcase_add_test(tc, test_errors_name_their_line);
	tcase_add_test(tc, test_escapes);
	tcase_add_test(tc, test_glob);
	tcase_add_test(tc, test_glob_against_naive);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_token_app);
	tcase_add_test(tc, test_globs_alone);
	tcase_add_test(tc, test_admin_word);
	tcase_add_test(tc, test_glob_ok);
	tcase_add_test(tc, test_refcount);
	tcase_add_test(tc, test_sha256);
	tcase_add_test(tc, test_load);
	suite_add_tcase(s, tc);
	return s;
}
