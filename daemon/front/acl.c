/*
 * acl.c - the access list: parse acl_file, find an app, match its globs.
 *
 * Pure code (libc only, no logging, no hashing): every failure comes back
 * as a "SOURCE:LINE: message" in the caller's buffer, and allocation
 * failures as "out of memory" rather than an abort, so the fuzzer can run
 * the parser on anything.  The format and the glob syntax are documented
 * in proto/PROTOCOL.md ("Access lists") and conf/lockbrokerd.conf.
 */
#include "acl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct acl_pattern {
	char *p;			/* as written, escapes kept */
	size_t len;
};

struct acl_app {
	struct acl *acl;		/* the list it belongs to (refs) */
	char name[ACL_NAME_MAX + 1];
	unsigned char hash[ACL_HASH_LEN];
	unsigned line;			/* 0: the auth_token app */
	unsigned admin:1;		/* "admin" ended its line: the admin
					 * words (LOCKS, KILL, ...) are its */
	struct acl_pattern *pats;
	size_t npats;
};

struct acl {
	unsigned refs;
	struct acl_app **apps;		/* pointers: apps never move */
	size_t napps, cap;
};

/* --- globs -------------------------------------------------------------- */

int
acl_glob_match(const char *pat, size_t patlen, const char *s, size_t slen)
{
	size_t p = 0, i = 0, star_p = SIZE_MAX, star_i = 0;

	/*
	 * Greedy with one backtrack point, the last '*' seen: a later star
	 * can match anything an earlier one could have left over, so there
	 * is never a reason to go back further (no recursion, no blow-up).
	 */
	while (i < slen) {
		if (p < patlen && pat[p] == '*') {
			star_p = ++p;
			star_i = i;
			continue;
		}
		if (p < patlen) {
			size_t q = p;
			int any = pat[q] == '?';

			if (pat[q] == '\\' && q + 1 < patlen)
				q++;
			if (any || pat[q] == s[i]) {
				p = q + 1;
				i++;
				continue;
			}
		}
		if (star_p == SIZE_MAX)
			return 0;
		p = star_p;
		i = ++star_i;
	}
	while (p < patlen && pat[p] == '*')
		p++;
	return p == patlen;
}

int
acl_name_ok(const char *name, size_t len)
{
	if (len == 0 || len > ACL_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

/* --- the list ----------------------------------------------------------- */

static void
app_free(struct acl_app *a)
{
	if (a == NULL)
		return;
	for (size_t i = 0; i < a->npats; i++)
		free(a->pats[i].p);
	free(a->pats);
	free(a);
}

static void
acl_free(struct acl *acl)
{
	for (size_t i = 0; i < acl->napps; i++)
		app_free(acl->apps[i]);
	free(acl->apps);
	free(acl);
}

static void
acl_ref(struct acl *acl)
{
	acl->refs++;
}

void
acl_unref(struct acl *acl)
{
	if (acl != NULL && --acl->refs == 0)
		acl_free(acl);
}

void
acl_app_hold(const struct acl_app *app)
{
	acl_ref(app->acl);
}

void
acl_app_release(const struct acl_app *app)
{
	acl_unref(app->acl);
}

size_t
acl_count(const struct acl *acl)
{
	return acl != NULL ? acl->napps : 0;
}

const struct acl_app *
acl_app_at(const struct acl *acl, size_t i)
{
	return i < acl_count(acl) ? acl->apps[i] : NULL;
}

const char *
acl_app_name(const struct acl_app *app)
{
	return app->name;
}

unsigned
acl_app_line(const struct acl_app *app)
{
	return app->line;
}

int
acl_app_admin(const struct acl_app *app)
{
	return app->admin;
}

int
acl_app_allows(const struct acl_app *app, const char *key, size_t keylen)
{
	for (size_t i = 0; i < app->npats; i++)
		if (acl_glob_match(app->pats[i].p, app->pats[i].len, key,
		    keylen))
			return 1;
	return 0;
}

/* Equal in time independent of where (or whether) they differ. */
static int
hash_equal(const unsigned char *a, const unsigned char *b)
{
	unsigned char diff = 0;

	for (size_t i = 0; i < ACL_HASH_LEN; i++)
		diff |= a[i] ^ b[i];
	return diff == 0;
}

const struct acl_app *
acl_app_by_hash(const struct acl *acl, const unsigned char hash[ACL_HASH_LEN])
{
	const struct acl_app *found = NULL;

	/* no early exit: every app costs the same whatever matched */
	for (size_t i = 0; i < acl_count(acl); i++)
		if (hash_equal(acl->apps[i]->hash, hash) && found == NULL)
			found = acl->apps[i];
	return found;
}

const struct acl_app *
acl_app_named(const struct acl *acl, const char *name)
{
	for (size_t i = 0; i < acl_count(acl); i++)
		if (acl->apps[i]->line != 0 &&
		    strcmp(acl->apps[i]->name, name) == 0)
			return acl->apps[i];
	return NULL;
}

static const struct acl_app *
find_name(const struct acl *acl, const char *name)
{
	for (size_t i = 0; i < acl->napps; i++)
		if (strcmp(acl->apps[i]->name, name) == 0)
			return acl->apps[i];
	return NULL;
}

static const struct acl_app *
find_hash(const struct acl *acl, const unsigned char *hash)
{
	for (size_t i = 0; i < acl->napps; i++)
		if (memcmp(acl->apps[i]->hash, hash, ACL_HASH_LEN) == 0)
			return acl->apps[i];
	return NULL;
}

/* Append a (taken over: freed here on failure).  0, or -1 when OOM. */
static int
app_append(struct acl *acl, struct acl_app *a)
{
	if (acl->napps == acl->cap) {
		size_t cap = acl->cap ? acl->cap * 2 : 8;
		struct acl_app **n = realloc(acl->apps, cap * sizeof *n);

		if (n == NULL) {
			app_free(a);
			return -1;
		}
		acl->apps = n;
		acl->cap = cap;
	}
	a->acl = acl;
	acl->apps[acl->napps++] = a;
	return 0;
}

int
acl_add_token_app(struct acl *acl, const char *name,
    const unsigned char hash[ACL_HASH_LEN], char *err, size_t errlen)
{
	const struct acl_app *same;
	struct acl_app *a;

	if ((same = find_name(acl, name)) != NULL) {
		snprintf(err, errlen, "acl_file line %u: the app name '%s' is "
		    "taken by auth_token's app when auth_token is set: rename "
		    "the app", same->line, name);
		return -1;
	}
	if ((same = find_hash(acl, hash)) != NULL) {
		snprintf(err, errlen, "acl_file line %u: app '%s' has "
		    "auth_token's token: AUTH could not tell the two apart",
		    same->line, same->name);
		return -1;
	}
	if ((a = calloc(1, sizeof *a)) == NULL ||
	    (a->pats = calloc(1, sizeof *a->pats)) == NULL ||
	    (a->pats[0].p = malloc(2)) == NULL) {
		app_free(a);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(a->pats[0].p, "*", 2);
	a->npats = 1;
	a->pats[0].len = 1;
	snprintf(a->name, sizeof a->name, "%s", name);
	memcpy(a->hash, hash, ACL_HASH_LEN);
	if (app_append(acl, a) != 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

/* --- the parser --------------------------------------------------------- */

/* One line being parsed: where to report, and its words. */
struct pline {
	const char *src;
	unsigned no;
	char *err;
	size_t errlen;
};

static int
perr(const struct pline *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
perr(const struct pline *l, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (l->no == 0)		/* a list of globs alone: no file line */
		snprintf(l->err, l->errlen, "%s: %s", l->src, msg);
	else
		snprintf(l->err, l->errlen, "%s:%u: %s", l->src, l->no, msg);
	return -1;
}

static int
is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int
acl_glob_ok(const char *p, size_t len, char *why, size_t whylen)
{
	if (len == 0) {
		snprintf(why, whylen, "empty pattern");
		return 0;
	}
	if (len > ACL_PATTERN_MAX) {
		snprintf(why, whylen, "pattern longer than %d bytes",
		    ACL_PATTERN_MAX);
		return 0;
	}
	for (size_t i = 0; i < len; i++) {
		if (p[i] == '\\') {
			if (++i == len) {
				snprintf(why, whylen, "pattern '%.*s' ends in a "
				    "lone '\\'", (int)len, p);
				return 0;
			}
		} else if (p[i] == '[' || p[i] == ']') {
			snprintf(why, whylen, "'%c' in pattern '%.*s': character "
			    "classes are not supported (write \\%c for the "
			    "character itself)", p[i], (int)len,
			    p, p[i]);
			return 0;
		}
	}
	return 1;
}

/* Check one glob of the keys list and add it to a.  0 or -1 + err. */
static int
add_pattern(const struct pline *l, struct acl_app *a, const char *p,
    size_t len, size_t *cap)
{
	struct acl_pattern *np;
	char why[512];

	if (len == 0)
		return perr(l, "empty pattern in the keys list (two commas, or "
		    "one at an end)");
	if (!acl_glob_ok(p, len, why, sizeof why))
		return perr(l, "%s", why);
	if (a->npats == *cap) {
		size_t ncap = *cap ? *cap * 2 : 4;

		if ((np = realloc(a->pats, ncap * sizeof *np)) == NULL)
			return perr(l, "out of memory");
		a->pats = np;
		*cap = ncap;
	}
	if ((a->pats[a->npats].p = malloc(len + 1)) == NULL)
		return perr(l, "out of memory");
	memcpy(a->pats[a->npats].p, p, len);
	a->pats[a->npats].p[len] = '\0';
	a->pats[a->npats].len = len;
	a->npats++;
	return 0;
}

/* Split the keys list at unescaped commas. */
static int
add_patterns(const struct pline *l, struct acl_app *a, const char *v,
    size_t len)
{
	size_t i = 0, start = 0, cap = 0;

	for (;;) {
		if (i < len && v[i] == '\\') {
			/* the escaped byte (a comma too); a lone '\' at the
			 * end stays in the pattern, add_pattern refuses it */
			i = i + 2 > len ? len : i + 2;
			continue;
		}
		if (i >= len || v[i] == ',') {
			if (add_pattern(l, a, v + start, i - start, &cap) != 0)
				return -1;
			if (i >= len)
				return 0;
			start = i + 1;
		}
		i++;
	}
}

#define NWORDS 6
#define NWORDS_MAX 7		/* and "admin" */

/*
 * One non-blank, non-comment line: "app NAME token-sha256 HEX keys
 * GLOBS [admin]", words separated by blanks.  Adds the app to acl.
 */
static int
parse_app(const struct pline *l, struct acl *acl, const char *s, size_t len)
{
	const char *w[NWORDS_MAX + 1];
	size_t wl[NWORDS_MAX + 1], n = 0, i = 0;
	const struct acl_app *same;
	struct acl_app *a;

	while (i < len && n <= NWORDS_MAX) {
		while (i < len && is_blank(s[i]))
			i++;
		if (i == len)
			break;
		w[n] = s + i;
		while (i < len && !is_blank(s[i]))
			i++;
		wl[n] = (size_t)(s + i - w[n]);
		n++;
	}
	if (wl[0] != 3 || memcmp(w[0], "app", 3) != 0)
		return perr(l, "'%.*s' is not a known line (expected \"app "
		    "<name> token-sha256 <hex> keys <glob>[,<glob>...]\")",
		    (int)(wl[0] > 40 ? 40 : wl[0]), w[0]);
	if (n < NWORDS)
		return perr(l, "too few words (expected \"app <name> "
		    "token-sha256 <hex> keys <glob>[,<glob>...]\")");
	if (n > NWORDS_MAX || (n == NWORDS_MAX && (wl[NWORDS] != 5 ||
	    memcmp(w[NWORDS], "admin", 5) != 0)))
		return perr(l, "extra words after the keys list (patterns are "
		    "separated by commas, without blanks; only \"admin\" may "
		    "follow them)");
	if (!acl_name_ok(w[1], wl[1]))
		return perr(l, "bad app name '%.*s': 1..%d characters of "
		    "A-Z a-z 0-9 . _ -", (int)(wl[1] > 80 ? 80 : wl[1]), w[1],
		    ACL_NAME_MAX);
	if (wl[2] != 12 || memcmp(w[2], "token-sha256", 12) != 0)
		return perr(l, "expected token-sha256 after the app name, "
		    "found '%.*s'", (int)(wl[2] > 40 ? 40 : wl[2]), w[2]);
	if (wl[3] != 2 * ACL_HASH_LEN)
		return perr(l, "the token hash has %zu characters: a SHA-256 "
		    "is %d hex digits", wl[3], 2 * ACL_HASH_LEN);
	if (wl[4] != 4 || memcmp(w[4], "keys", 4) != 0)
		return perr(l, "expected keys after the token hash, found "
		    "'%.*s'", (int)(wl[4] > 40 ? 40 : wl[4]), w[4]);
	if (acl->napps >= ACL_APPS_MAX)
		return perr(l, "more than %d apps", ACL_APPS_MAX);
	if ((a = calloc(1, sizeof *a)) == NULL)
		return perr(l, "out of memory");
	memcpy(a->name, w[1], wl[1]);
	a->line = l->no;
	a->admin = n == NWORDS_MAX;
	for (size_t k = 0; k < ACL_HASH_LEN; k++) {
		int hi = hexval(w[3][2 * k]), lo = hexval(w[3][2 * k + 1]);

		if (hi < 0 || lo < 0) {
			app_free(a);
			return perr(l, "the token hash is not hex (character "
			    "%zu)", 2 * k + (hi < 0 ? 1 : 2));
		}
		a->hash[k] = (unsigned char)(hi << 4 | lo);
	}
	if ((same = find_name(acl, a->name)) != NULL) {
		app_free(a);
		return perr(l, "app '%.*s' is defined twice (first on line "
		    "%u)", (int)wl[1], w[1], same->line);
	}
	if ((same = find_hash(acl, a->hash)) != NULL) {
		app_free(a);
		return perr(l, "app '%.*s' has the same token hash as app '%s' "
		    "(line %u): AUTH could not tell them apart", (int)wl[1],
		    w[1], same->name, same->line);
	}
	if (add_patterns(l, a, w[5], wl[5]) != 0) {
		app_free(a);
		return -1;
	}
	if (app_append(acl, a) != 0)
		return perr(l, "out of memory");
	return 0;
}

struct acl *
acl_parse(const char *text, size_t len, const char *source, char *err,
    size_t errlen)
{
	struct pline l = { source, 0, err, errlen };
	struct acl *acl = calloc(1, sizeof *acl);
	size_t off = 0;

	if (acl == NULL) {
		snprintf(err, errlen, "%s: out of memory", source);
		return NULL;
	}
	acl->refs = 1;
	while (off < len) {
		const char *s = text + off, *nl = memchr(s, '\n', len - off);
		size_t n = nl != NULL ? (size_t)(nl - s) : len - off, b = 0;

		off += n + (nl != NULL);
		l.no++;
		if (n > 0 && s[n - 1] == '\r')
			n--;		/* CRLF files */
		if (n > ACL_LINE_MAX) {
			perr(&l, "line longer than %d bytes", ACL_LINE_MAX);
			goto fail;
		}
		for (size_t i = 0; i < n; i++) {
			unsigned char c = (unsigned char)s[i];

			if ((c < 0x20 && c != '\t') || c > 0x7e) {
				perr(&l, "byte 0x%02x at column %zu: only "
				    "printable ASCII and tabs are allowed",
				    c, i + 1);
				goto fail;
			}
		}
		while (b < n && is_blank(s[b]))
			b++;
		if (b == n || s[b] == '#')
			continue;	/* blank, or a comment */
		if (parse_app(&l, acl, s + b, n - b) != 0)
			goto fail;
	}
	return acl;
fail:
	acl_free(acl);
	return NULL;
}

struct acl *
acl_parse_globs(const char *globs, const char *name, char *err,
    size_t errlen)
{
	struct pline l = { name, 0, err, errlen };
	struct acl *acl = calloc(1, sizeof *acl);
	struct acl_app *a = calloc(1, sizeof *a);
	size_t len = strlen(globs);

	if (acl == NULL || a == NULL) {
		free(acl);
		free(a);
		snprintf(err, errlen, "%s: out of memory", name);
		return NULL;
	}
	acl->refs = 1;
	snprintf(a->name, sizeof a->name, "%s", name);
	/* no list longer than an acl_file line could hold (conf's own values
	 * are shorter; this bounds one given on the command line) */
	if (len > ACL_LINE_MAX) {
		perr(&l, "longer than %d bytes, an acl_file line's limit",
		    ACL_LINE_MAX);
		goto fail;
	}
	/* an acl_file line's words hold no blank nor any byte a key cannot */
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)globs[i] < 0x21 ||
		    (unsigned char)globs[i] > 0x7e) {
			perr(&l, "byte 0x%02x at %zu: patterns are printable "
			    "ASCII, separated by commas without blanks",
			    (unsigned char)globs[i], i + 1);
			goto fail;
		}
	if (add_patterns(&l, a, globs, len) != 0)
		goto fail;
	if (app_append(acl, a) != 0) {
		a = NULL;	/* freed by app_append */
		perr(&l, "out of memory");
		goto fail;
	}
	return acl;
fail:
	app_free(a);
	acl_free(acl);
	return NULL;
}

struct acl *
acl_load(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	struct acl *acl = NULL;
	char *buf;
	size_t len = 0;

	if (f == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	/* one byte more than allowed, to tell "too large" from "full" */
	if ((buf = malloc(ACL_FILE_MAX + 1)) == NULL) {
		snprintf(err, errlen, "%s: out of memory", path);
		fclose(f);
		return NULL;
	}
	len = fread(buf, 1, ACL_FILE_MAX + 1, f);
	if (ferror(f))
		snprintf(err, errlen, "%s: read error", path);
	else if (len > ACL_FILE_MAX)
		snprintf(err, errlen, "%s: larger than %d bytes", path,
		    ACL_FILE_MAX);
	else
		acl = acl_parse(buf, len, path, err, errlen);
	free(buf);
	fclose(f);
	return acl;
}
