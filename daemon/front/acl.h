/*
 * acl.h - per-app access: which app a token (or a certificate's CN) names,
 * and which keys that app may use (access lists).
 *
 * An access list is read from conf acl_file, one app per line:
 *
 *     app <name> token-sha256 <64 hex> keys <glob>[,<glob>...] [admin]
 *
 * (an app whose line ends in "admin" may use the admin words: LOCKS,
 * SESSIONS, KILL, FREE; brokers before them refuse such a line).
 *
 * acl_parse() is pure (libc only: no I/O, no hashing), so unit tests and
 * the fuzzer (tests/fuzz/fuzz_acl.c) can call it directly; acl_load()
 * reads a file and hands it to acl_parse().  Tokens are never stored: the
 * file holds their SHA-256, and the caller hashes what AUTH sends
 * (tokenhash.h) before acl_app_by_hash() compares in constant time.
 *
 * A parsed list is immutable and reference-counted: sessions hold the app
 * they authenticated as (acl_app_hold) across a SIGHUP that swaps the
 * broker's list, so an app's patterns never change under a live session.
 */
#ifndef LOCKBROKER_ACL_H
#define LOCKBROKER_ACL_H

#include <stddef.h>

#define ACL_NAME_MAX 64			/* longest app name */
#define ACL_HASH_LEN 32			/* SHA-256 */
#define ACL_LINE_MAX 4096		/* longest line, LF excluded */
#define ACL_PATTERN_MAX 1024		/* longest glob, escapes included */
#define ACL_APPS_MAX 1024		/* most apps in one file */
#define ACL_FILE_MAX (1024 * 1024)	/* largest file acl_load reads */

struct acl;
struct acl_app;

/*
 * Parse an access list held in text[0..len) (need not be NUL-terminated;
 * a NUL byte in it is an error).  source names it in messages.  Returns
 * the list (refs 1), or NULL with "SOURCE:LINE: message" in err.  An
 * empty list (no app line) is valid.
 */
struct acl *acl_parse(const char *text, size_t len, const char *source,
    char *err, size_t errlen);

/*
 * A list of globs alone, in the syntax of an acl_file line's keys list
 * ("<glob>[,<glob>...]", checked alike), e.g. conf fenced_write_keys:
 * a list of one app, called name, with those patterns and no token (no
 * session authenticates as it: acl_app_at(list, 0) is for matching
 * keys).  NULL with "name: message" in err for a bad or empty list.
 */
struct acl *acl_parse_globs(const char *globs, const char *name, char *err,
    size_t errlen);

/* Read path (at most ACL_FILE_MAX bytes) and parse it.  NULL + err. */
struct acl *acl_load(const char *path, char *err, size_t errlen);

/*
 * Add the app of conf auth_token: named name, every key ("*"), reached by
 * its token hash only (acl_app_named never returns it, so a certificate
 * cannot name it).  Refused (-1 + err) when the file already has an app
 * of that name, or one with the same token: either would make AUTH
 * ambiguous.  Call before the list is shared.
 */
int acl_add_token_app(struct acl *acl, const char *name,
    const unsigned char hash[ACL_HASH_LEN], char *err, size_t errlen);

/* Drop a reference; the last one frees the list. NULL is fine. */
void acl_unref(struct acl *acl);

size_t acl_count(const struct acl *acl);
const struct acl_app *acl_app_at(const struct acl *acl, size_t i);

/*
 * The app whose stored hash equals hash, or NULL.  Every app's hash is
 * compared in full, whether or not an earlier one matched, so the time
 * taken says nothing about which app (if any) a token belongs to.
 */
const struct acl_app *acl_app_by_hash(const struct acl *acl,
    const unsigned char hash[ACL_HASH_LEN]);

/*
 * The app called name (a NUL-terminated string, e.g. a verified client
 * certificate's CN), or NULL: no such app, acl NULL, or name is the
 * auth_token app's (session.c makes a session with such a CN that app's).
 */
const struct acl_app *acl_app_named(const struct acl *acl, const char *name);

const char *acl_app_name(const struct acl_app *app);
/* The file line the app was defined on (0: the auth_token app). */
unsigned acl_app_line(const struct acl_app *app);
/* Whether the app's line ends in "admin" (never the auth_token app). */
int acl_app_admin(const struct acl_app *app);
/* Whether key[0..keylen) matches one of the app's patterns. */
int acl_app_allows(const struct acl_app *app, const char *key,
    size_t keylen);

/* Keep app's list alive while a session uses it; drop with _release. */
void acl_app_hold(const struct acl_app *app);
void acl_app_release(const struct acl_app *app);

/*
 * Match s[0..slen) against the glob pat[0..patlen): '*' matches any run
 * of bytes (':' and '/' included: keys have no path rules), '?' exactly
 * one byte, '\' makes the next byte literal, every other byte itself
 * (case-sensitive).  pat must be well-formed (acl_parse checks: no
 * trailing '\').  Worst case O(patlen * slen), no recursion.
 */
int acl_glob_match(const char *pat, size_t patlen, const char *s,
    size_t slen);

/*
 * Whether p[0..len) is a well-formed glob: 1..ACL_PATTERN_MAX bytes, no
 * trailing lone '\\', no '[' or ']' unescaped (no character classes).
 * 1, or 0 with the reason in why.
 */
int acl_glob_ok(const char *p, size_t len, char *why, size_t whylen);

/* Whether name is a valid app name: 1..ACL_NAME_MAX of [A-Za-z0-9._-]. */
int acl_name_ok(const char *name, size_t len);

#endif
