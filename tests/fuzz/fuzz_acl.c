/*
 * fuzz_acl.c - libFuzzer target for the acl_file parser and the glob
 * matcher of daemon/front/acl.c (access lists).
 *
 * The first byte picks the mode.  Even: the rest is an access list file,
 * parsed from a buffer of exactly its length (ASan sees any read past
 * the end); a refusal must name a line that exists ("fuzz:LINE: ..."), an
 * accepted list must hold valid names in line order, each found by
 * acl_app_named, and take the auth_token app.  Odd: the rest is a pattern
 * and a key split at the first NUL, matched by acl_glob_match and, when
 * both are short, by a naive recursive matcher that must agree; the
 * pattern part is also parsed as a list of globs alone (acl_parse_globs,
 * conf fenced_write_keys), which must accept exactly what an acl_file
 * line's keys list accepts and match keys alike.
 *
 *   make fuzz FUZZ_SECONDS=60     (a third of the time goes here)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "../unit/naive_glob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "fuzz_acl: %s (line %d)\n", #cond,	\
		    __LINE__);						\
		abort();						\
	}								\
} while (0)

#define NAIVE_MAX 14			/* naive matching is exponential */

/*
 * list[0..n) (no NUL in it) as a list of globs alone and as the keys list
 * of an acl_file line: accepted by both or by neither (a list the line
 * holds as one word of printable bytes, within the line limit), and when
 * accepted, key matched alike.  Alone, a list of more than ACL_LINE_MAX
 * bytes is refused; one that fits that but not the line after its head
 * is compared with nothing.
 */
static void
fuzz_globs(const char *list, size_t n, const char *key, size_t kl)
{
	static const char head[] = "app x token-sha256 "
	    "0000000000000000000000000000000000000000000000000000000000000000"
	    " keys ";
	size_t hl = sizeof head - 1;
	char *z = malloc(n + 1), *line = malloc(hl + n + 1), err[700];
	struct acl *g, *f;
	int word = n > 0;	/* one word of printable bytes */

	CHECK(z != NULL && line != NULL);
	memcpy(z, list, n);
	z[n] = '\0';
	memcpy(line, head, hl);
	memcpy(line + hl, list, n);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)list[i] < 0x21 ||
		    (unsigned char)list[i] > 0x7e)
			word = 0;
	g = acl_parse_globs(z, "globs", err, sizeof err);
	if (g == NULL)
		CHECK(strncmp(err, "globs: ", 7) == 0);
	else
		CHECK(acl_count(g) == 1 && acl_app_named(g, "globs") == NULL);
	if (word && hl + n <= ACL_LINE_MAX) {
		f = acl_parse(line, hl + n, "f", err, sizeof err);
		CHECK((g != NULL) == (f != NULL));
		if (g != NULL && f != NULL)
			CHECK(acl_app_allows(acl_app_at(g, 0), key, kl) ==
			    acl_app_allows(acl_app_at(f, 0), key, kl));
		acl_unref(f);
	} else if (!word || n > ACL_LINE_MAX) {
		CHECK(g == NULL);
	}	/* (else a list longer than the line leaves after its head) */
	acl_unref(g);
	free(line);
	free(z);
}

static void
fuzz_glob(const char *d, size_t n)
{
	const char *nul = memchr(d, '\0', n);
	size_t pl = nul ? (size_t)(nul - d) : n / 2;
	const char *s = d + pl + (nul != NULL);
	size_t sl = n - pl - (nul != NULL);
	int got;

	fuzz_globs(d, pl, s, sl);	/* no NUL before pl */
	/* a lone trailing '\' is refused by the parser: never matched */
	if (pl > 0 && d[pl - 1] == '\\') {
		size_t k = 0;

		while (k < pl && d[pl - 1 - k] == '\\')
			k++;
		if (k % 2 == 1)
			pl--;
	}
	got = acl_glob_match(d, pl, s, sl);
	if (pl <= NAIVE_MAX && sl <= NAIVE_MAX)
		CHECK(got == naive_glob(d, pl, s, sl));
	/* every key matches "*", and a pattern without * ? \ only itself */
	CHECK(acl_glob_match("*", 1, s, sl));
	if (memchr(d, '*', pl) == NULL && memchr(d, '?', pl) == NULL &&
	    memchr(d, '\\', pl) == NULL)
		CHECK(got == (pl == sl && memcmp(d, s, pl) == 0));
}

static void
fuzz_file(const char *d, size_t n)
{
	static const unsigned char h[ACL_HASH_LEN] = { 1, 2, 3 };
	char *buf = malloc(n ? n : 1), err[700];
	struct acl *acl;
	size_t lines = 1;

	CHECK(buf != NULL);
	memcpy(buf, d, n);
	for (size_t i = 0; i < n; i++)
		lines += buf[i] == '\n';
	acl = acl_parse(buf, n, "fuzz", err, sizeof err);
	if (acl == NULL) {
		char *end;
		unsigned long no;

		CHECK(strncmp(err, "fuzz:", 5) == 0);
		no = strtoul(err + 5, &end, 10);
		CHECK(end != err + 5 && end[0] == ':' && end[1] == ' ');
		CHECK(no >= 1 && no <= lines);
		free(buf);
		return;
	}
	for (size_t i = 0; i < acl_count(acl); i++) {
		const struct acl_app *a = acl_app_at(acl, i);
		const char *name = acl_app_name(a);

		CHECK(acl_name_ok(name, strlen(name)));
		CHECK(acl_app_named(acl, name) == a);
		CHECK(acl_app_line(a) >= 1 && acl_app_line(a) <= lines);
		CHECK(i == 0 || acl_app_line(a) > acl_app_line(acl_app_at(acl,
		    i - 1)));
		(void)acl_app_allows(a, buf, n < 300 ? n : 300);
		CHECK(acl_app_by_hash(acl, h) == NULL ||
		    acl_app_line(acl_app_by_hash(acl, h)) != 0);
	}
	if (acl_add_token_app(acl, "default", h, err, sizeof err) == 0) {
		const struct acl_app *t = acl_app_by_hash(acl, h);

		CHECK(t != NULL && acl_app_line(t) == 0);
		CHECK(acl_app_allows(t, "any:key", 7));
		CHECK(acl_app_named(acl, "default") == NULL);
	} else {
		CHECK(acl_app_named(acl, "default") != NULL ||
		    acl_app_by_hash(acl, h) != NULL);
	}
	acl_unref(acl);
	free(buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 1)
		fuzz_glob((const char *)data + 1, size - 1);
	else
		fuzz_file((const char *)data + 1, size - 1);
	return 0;
}
