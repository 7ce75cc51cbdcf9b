/*
 * test_proto.c - proto_parse() against tables of valid and hostile lines.
 *
 * Each row is one line and what the parser must make of it: an error code,
 * "empty", or the command with its key, word and options.  Every line is
 * copied into a buffer of exactly its length (no NUL after it), so an ASan
 * build catches a parser that reads past len, and the request is filled
 * with garbage first, so a parser that leaves a field unset is caught too.
 * Error rows sit next to a valid twin that differs in the one thing the
 * row is about, so a parser that refuses everything fails as well.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "suites.h"

#define KEYMAX 256	/* the default max_key_len */

struct row {
	const char *line;
	size_t len;
	enum proto_err err;
	int empty;
	enum proto_cmd cmd;
	const char *key;	/* NULL: the request must carry no key */
	const char *word;	/* NULL: no HELLO name / AUTH token */
	int has_wait, has_ttl;
	long wait_ms, ttl_ms;
	int on;
};

/* sizeof, not strlen: rows may hold NUL bytes. */
#define OK(s, c)	.line = (s), .len = sizeof(s) - 1, .cmd = (c)
#define ERR(s, e)	.line = (s), .len = sizeof(s) - 1, .err = (e)
#define EMPTY(s)	.line = (s), .len = sizeof(s) - 1, .empty = 1
#define KEY(k)		.key = (k)
#define WORD(w)		.word = (w)
#define WAIT(ms)	.has_wait = 1, .wait_ms = (ms)
#define TTL(ms)		.has_ttl = 1, .ttl_ms = (ms)
#define ON		.on = 1

#define NROWS(t)	((int)(sizeof(t) / sizeof((t)[0])))

/* The line with non-printable bytes escaped, for failure messages. */
static const char *
esc(const char *p, size_t len)
{
	static char bufs[2][160];	/* two live results per message */
	static int next;
	char *out = bufs[next++ & 1];
	size_t o = 0, outsz = sizeof bufs[0];

	for (size_t i = 0; i < len && o + 8 < outsz; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c >= 0x20 && c <= 0x7e && c != '\\')
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, outsz - o,
			    "\\x%02x", c);
	}
	if (o + 8 >= outsz)
		memcpy(out + o, "...", 4);
	else
		out[o] = '\0';
	return out;
}

static const char *
errname(enum proto_err e)
{
	return e == PERR_NONE ? "NONE" : proto_err_name(e);
}

/*
 * Parse len bytes of line with the given key limit, the way the session
 * does: from a buffer holding exactly those bytes.  The buffer is returned
 * in *bufp (caller frees) so key/word pointers can be checked against it.
 */
static enum proto_err
parse(const char *line, size_t len, size_t max_key_len, struct proto_req *req,
    int *empty, const char **why, char **bufp)
{
	struct proto_limits lim = { .max_key_len = max_key_len };
	char *buf = malloc(len ? len : 1);

	ck_assert_ptr_nonnull(buf);
	memcpy(buf, line, len);
	memset(req, 0xa5, sizeof *req);
	*empty = 0x5a;
	*why = NULL;
	*bufp = buf;
	return proto_parse(buf, len, &lim, req, empty, why);
}

/* p[0..n) lies inside buf[0..len). */
static int
inside(const char *p, size_t n, const char *buf, size_t len)
{
	return p != NULL && p >= buf && n <= len && (size_t)(p - buf) <= len - n;
}

static void
check_row(const struct row *r)
{
	struct proto_req req;
	const char *why, *l = esc(r->line, r->len);
	char *buf;
	int empty;
	enum proto_err err;

	err = parse(r->line, r->len, KEYMAX, &req, &empty, &why, &buf);
	ck_assert_msg(err == r->err, "\"%s\": got %s, want %s (why: %s)",
	    l, errname(err), errname(r->err), why ? why : "(null)");
	ck_assert_msg(why != NULL, "\"%s\": why left NULL", l);
	if (err != PERR_NONE) {
		ck_assert_msg(why[0] != '\0', "\"%s\": error without a reason", l);
		ck_assert_msg(empty == 0, "\"%s\": error but empty=%d", l, empty);
		free(buf);
		return;
	}
	ck_assert_msg(empty == r->empty, "\"%s\": empty=%d, want %d",
	    l, empty, r->empty);
	if (r->empty) {
		free(buf);
		return;
	}
	ck_assert_msg(req.cmd == r->cmd, "\"%s\": cmd %s, want %s",
	    l, proto_cmd_name(req.cmd), proto_cmd_name(r->cmd));
	if (r->key == NULL) {
		ck_assert_msg(req.key == NULL, "\"%s\": unexpected key", l);
	} else {
		size_t n = strlen(r->key);
		ck_assert_msg(inside(req.key, req.keylen, buf, r->len),
		    "\"%s\": key does not point into the line", l);
		ck_assert_msg(req.keylen == n &&
		    memcmp(req.key, r->key, n) == 0, "\"%s\": key \"%s\", want "
		    "\"%s\"", l, esc(req.key, req.keylen), r->key);
	}
	if (r->word == NULL) {
		ck_assert_msg(req.word == NULL, "\"%s\": unexpected word", l);
	} else {
		size_t n = strlen(r->word);
		ck_assert_msg(inside(req.word, req.wordlen, buf, r->len),
		    "\"%s\": word does not point into the line", l);
		ck_assert_msg(req.wordlen == n &&
		    memcmp(req.word, r->word, n) == 0, "\"%s\": word \"%s\", "
		    "want \"%s\"", l, esc(req.word, req.wordlen), r->word);
	}
	ck_assert_msg(req.has_wait == r->has_wait, "\"%s\": has_wait=%d",
	    l, req.has_wait);
	ck_assert_msg(req.has_ttl == r->has_ttl, "\"%s\": has_ttl=%d",
	    l, req.has_ttl);
	if (r->has_wait)
		ck_assert_msg(req.wait_ms == r->wait_ms, "\"%s\": wait_ms=%ld",
		    l, req.wait_ms);
	if (r->has_ttl)
		ck_assert_msg(req.ttl_ms == r->ttl_ms, "\"%s\": ttl_ms=%ld",
		    l, req.ttl_ms);
	if (r->cmd == CMD_EVENTS)
		ck_assert_msg(req.on == r->on, "\"%s\": on=%d", l, req.on);
	free(buf);
}

/* Every command in each of its valid forms. */
static const struct row valid_rows[] = {
	{ OK("HELLO", CMD_HELLO) },
	{ OK("HELLO my-app/2.1", CMD_HELLO), WORD("my-app/2.1") },
	{ OK("ACQUIRE k", CMD_ACQUIRE), KEY("k") },
	{ OK("ACQUIRE k WAIT 5", CMD_ACQUIRE), KEY("k"), WAIT(5) },
	{ OK("ACQUIRE k TTL 7", CMD_ACQUIRE), KEY("k"), TTL(7) },
	{ OK("ACQUIRE k WAIT 5 TTL 7", CMD_ACQUIRE), KEY("k"), WAIT(5), TTL(7) },
	{ OK("ACQUIRE k TTL 7 WAIT 5", CMD_ACQUIRE), KEY("k"), WAIT(5), TTL(7) },
	{ OK("RELEASE k", CMD_RELEASE), KEY("k") },
	{ OK("RENEW k", CMD_RENEW), KEY("k") },
	{ OK("RENEW k TTL 9", CMD_RENEW), KEY("k"), TTL(9) },
	{ OK("OWNER k", CMD_OWNER), KEY("k") },
	{ OK("HELD", CMD_HELD) },
	{ OK("STATS", CMD_STATS) },
	{ OK("PING", CMD_PING) },
	{ OK("QUIT", CMD_QUIT) },
	{ OK("EVENTS ON", CMD_EVENTS), ON },
	{ OK("EVENTS OFF", CMD_EVENTS) },
	{ OK("AUTH s3cret", CMD_AUTH), WORD("s3cret") },
	/* Keys: any of 0x21..0x7e, including words that look like options. */
	{ OK("ACQUIRE !", CMD_ACQUIRE), KEY("!") },
	{ OK("ACQUIRE ~", CMD_ACQUIRE), KEY("~") },
	{ OK("ACQUIRE app:db/orders#42@eu-1.x_y", CMD_ACQUIRE),
	  KEY("app:db/orders#42@eu-1.x_y") },
	{ OK("ACQUIRE \"'`\\{}[]()<>|;&$%^*=+?,", CMD_ACQUIRE),
	  KEY("\"'`\\{}[]()<>|;&$%^*=+?,") },
	{ OK("ACQUIRE WAIT", CMD_ACQUIRE), KEY("WAIT") },
	{ OK("ACQUIRE TTL TTL 5", CMD_ACQUIRE), KEY("TTL"), TTL(5) },
	{ OK("ACQUIRE 12345 WAIT 1", CMD_ACQUIRE), KEY("12345"), WAIT(1) },
	{ OK("RELEASE ACQUIRE", CMD_RELEASE), KEY("ACQUIRE") },
	{ OK("HELLO HELLO", CMD_HELLO), WORD("HELLO") },
};

/* Verbs and option words ignore case; keys and names keep it. */
static const struct row case_rows[] = {
	{ OK("acquire k wait 5 ttl 6", CMD_ACQUIRE), KEY("k"), WAIT(5), TTL(6) },
	{ OK("AcQuIrE k WaIt 5 tTl 6", CMD_ACQUIRE), KEY("k"), WAIT(5), TTL(6) },
	{ OK("hello", CMD_HELLO) },
	{ OK("release k", CMD_RELEASE), KEY("k") },
	{ OK("Renew k Ttl 3", CMD_RENEW), KEY("k"), TTL(3) },
	{ OK("owner k", CMD_OWNER), KEY("k") },
	{ OK("held", CMD_HELD) },
	{ OK("sTaTs", CMD_STATS) },
	{ OK("ping", CMD_PING) },
	{ OK("Quit", CMD_QUIT) },
	{ OK("events on", CMD_EVENTS), ON },
	{ OK("Events Off", CMD_EVENTS) },
	{ OK("auth Tok", CMD_AUTH), WORD("Tok") },
	{ OK("ACQUIRE MyKey", CMD_ACQUIRE), KEY("MyKey") },
	{ OK("acquire MYKEY", CMD_ACQUIRE), KEY("MYKEY") },
	{ OK("OWNER myKEY", CMD_OWNER), KEY("myKEY") },
	{ OK("release wait", CMD_RELEASE), KEY("wait") },
	{ OK("HELLO MixedCase", CMD_HELLO), WORD("MixedCase") },
};

/* Spaces and tabs separate words, in any number, before and after. */
static const struct row blank_rows[] = {
	{ EMPTY("") },
	{ EMPTY(" ") },
	{ EMPTY("\t") },
	{ EMPTY("  \t \t\t   ") },
	{ OK("ACQUIRE\tk\tWAIT\t5\tTTL\t6", CMD_ACQUIRE), KEY("k"), WAIT(5),
	  TTL(6) },
	{ OK("ACQUIRE \t k \t\t WAIT  5", CMD_ACQUIRE), KEY("k"), WAIT(5) },
	{ OK("   PING", CMD_PING) },
	{ OK("PING   ", CMD_PING) },
	{ OK("\tPING\t", CMD_PING) },
	{ OK(" \t RELEASE\tk \t", CMD_RELEASE), KEY("k") },
	{ OK("HELLO\tname", CMD_HELLO), WORD("name") },
	/* A blank inside a word splits it: "PI NG" is the verb PI. */
	{ ERR("PI NG", PERR_BADCMD) },
	{ ERR("PING\t1", PERR_BADARG) },
};

/* A byte outside 0x20..0x7e (tab aside) anywhere makes the line BADARG. */
static const struct row byte_rows[] = {
	{ ERR("\0", PERR_BADARG) },
	{ ERR("PING\0", PERR_BADARG) },
	{ ERR("AC\0QUIRE k", PERR_BADARG) },
	{ ERR("PING\x01", PERR_BADARG) },
	{ ERR("PING\x1f", PERR_BADARG) },
	{ ERR("PING\r", PERR_BADARG) },		/* the caller strips the CR */
	{ ERR("PING\n", PERR_BADARG) },
	{ ERR("PING\nPING", PERR_BADARG) },
	{ ERR("PING\v", PERR_BADARG) },
	{ ERR("PING\f", PERR_BADARG) },
	{ ERR("\x1b[A", PERR_BADARG) },
	{ ERR("ACQUIRE k\x7f", PERR_BADARG) },
	{ ERR("ACQUIRE k\x80", PERR_BADARG) },
	{ ERR("ACQUIRE k\xff", PERR_BADARG) },
	{ ERR("ACQUIRE caf\xc3\xa9", PERR_BADARG) },	/* UTF-8 */
	{ ERR("ACQUIRE k WAIT 5\x01", PERR_BADARG) },
	{ ERR("HELLO n\xe2\x80\x8b", PERR_BADARG) },
	/* Refused as a whole: not "empty", not BADCMD for an unknown verb. */
	{ ERR(" \x01 ", PERR_BADARG) },
	{ ERR("\x01", PERR_BADARG) },
	{ ERR("NOSUCHVERB \x02", PERR_BADARG) },
	/* The edges of the allowed range. */
	{ OK("ACQUIRE !~", CMD_ACQUIRE), KEY("!~") },
	{ OK("ACQUIRE k ", CMD_ACQUIRE), KEY("k") },
};

/* ms values: decimal digits only, 0..2147483647; TTL at least 1. */
static const struct row ms_rows[] = {
	{ OK("ACQUIRE k WAIT 0", CMD_ACQUIRE), KEY("k"), WAIT(0) },
	{ OK("ACQUIRE k WAIT 1", CMD_ACQUIRE), KEY("k"), WAIT(1) },
	{ OK("ACQUIRE k WAIT 2147483647", CMD_ACQUIRE), KEY("k"),
	  WAIT(2147483647L) },
	{ OK("ACQUIRE k WAIT 007", CMD_ACQUIRE), KEY("k"), WAIT(7) },
	{ OK("ACQUIRE k WAIT 1000000000", CMD_ACQUIRE), KEY("k"),
	  WAIT(1000000000L) },
	{ ERR("ACQUIRE k WAIT 2147483648", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 4294967296", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 4294967297", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 9999999999", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 99999999999", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 18446744073709551617", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT -1", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT -0", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT +1", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 1e3", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 0x10", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 1.5", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 5ms", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT five", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 1_000", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 1,000", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT", PERR_BADARG) },		/* empty value */
	{ ERR("ACQUIRE k WAIT \t ", PERR_BADARG) },
	{ OK("ACQUIRE k TTL 1", CMD_ACQUIRE), KEY("k"), TTL(1) },
	{ OK("ACQUIRE k TTL 2147483647", CMD_ACQUIRE), KEY("k"),
	  TTL(2147483647L) },
	{ ERR("ACQUIRE k TTL 0", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL 000", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL 2147483648", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL -1", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL +1", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL 1e3", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL 0x10", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL", PERR_BADARG) },
	{ OK("RENEW k TTL 1", CMD_RENEW), KEY("k"), TTL(1) },
	{ OK("RENEW k TTL 2147483647", CMD_RENEW), KEY("k"), TTL(2147483647L) },
	{ ERR("RENEW k TTL 0", PERR_BADARG) },
	{ ERR("RENEW k TTL 2147483648", PERR_BADARG) },
	{ ERR("RENEW k TTL -1", PERR_BADARG) },
	{ ERR("RENEW k TTL 1e3", PERR_BADARG) },
};

/* Options: known words only, where allowed, once each, with a value. */
static const struct row option_rows[] = {
	{ ERR("ACQUIRE k WAIT 1 WAIT 2", PERR_BADARG) },
	{ ERR("ACQUIRE k wait 1 WAIT 1", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL 1 TTL 2", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL 5 WAIT 1 TTL 5", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 1 TTL 2 WAIT 3", PERR_BADARG) },
	{ ERR("RENEW k TTL 5 ttl 5", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 5 TTL", PERR_BADARG) },
	{ ERR("ACQUIRE k TTL 5 WAIT", PERR_BADARG) },
	{ ERR("RENEW k TTL", PERR_BADARG) },
	{ ERR("ACQUIRE k TIMEOUT 5", PERR_BADARG) },
	{ ERR("ACQUIRE k WAITS 5", PERR_BADARG) },
	{ ERR("ACQUIRE k WAI 5", PERR_BADARG) },
	{ ERR("ACQUIRE k TT 5", PERR_BADARG) },
	{ ERR("ACQUIRE k 5", PERR_BADARG) },
	{ ERR("ACQUIRE k 5 WAIT", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 5 5", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 5 TTL 6 extra", PERR_BADARG) },
	{ ERR("ACQUIRE k WAIT 5 TTL 6 WAIT", PERR_BADARG) },
	{ ERR("ACQUIRE k1 k2", PERR_BADARG) },
	{ ERR("RENEW k WAIT 5", PERR_BADARG) },
	{ ERR("RENEW k TTL 5 WAIT 5", PERR_BADARG) },
	{ ERR("RELEASE k WAIT 5", PERR_BADARG) },
	{ ERR("RELEASE k TTL 5", PERR_BADARG) },
	{ ERR("OWNER k WAIT 5", PERR_BADARG) },
	{ ERR("OWNER k TTL 5", PERR_BADARG) },
};

/* How many arguments each command takes. */
static const struct row arity_rows[] = {
	{ ERR("ACQUIRE", PERR_BADARG) },
	{ ERR("RELEASE", PERR_BADARG) },
	{ ERR("RENEW", PERR_BADARG) },
	{ ERR("OWNER", PERR_BADARG) },
	{ ERR("RELEASE a b", PERR_BADARG) },
	{ ERR("OWNER a b", PERR_BADARG) },
	{ ERR("HELD x", PERR_BADARG) },
	{ ERR("STATS x", PERR_BADARG) },
	{ ERR("STATS reset", PERR_BADARG) },
	{ ERR("PING x", PERR_BADARG) },
	{ ERR("QUIT now", PERR_BADARG) },
	/* HELLO takes 0 or 1 word. */
	{ OK("HELLO", CMD_HELLO) },
	{ OK("HELLO a", CMD_HELLO), WORD("a") },
	{ ERR("HELLO a b", PERR_BADARG) },
	/* AUTH takes exactly one. */
	{ ERR("AUTH", PERR_BADARG) },
	{ OK("AUTH a", CMD_AUTH), WORD("a") },
	{ ERR("AUTH a b", PERR_BADARG) },
	/* EVENTS takes ON or OFF, nothing else. */
	{ OK("EVENTS ON", CMD_EVENTS), ON },
	{ OK("EVENTS off", CMD_EVENTS) },
	{ OK("EVENTS oN", CMD_EVENTS), ON },
	{ ERR("EVENTS", PERR_BADARG) },
	{ ERR("EVENTS ON OFF", PERR_BADARG) },
	{ ERR("EVENTS OFF ON", PERR_BADARG) },
	{ ERR("EVENTS 1", PERR_BADARG) },
	{ ERR("EVENTS 0", PERR_BADARG) },
	{ ERR("EVENTS O", PERR_BADARG) },
	{ ERR("EVENTS ONN", PERR_BADARG) },
	{ ERR("EVENTS OF", PERR_BADARG) },
	{ ERR("EVENTS OFFF", PERR_BADARG) },
	{ ERR("EVENTS yes", PERR_BADARG) },
};

/* Unknown verbs are BADCMD, whatever follows them. */
static const struct row verb_rows[] = {
	{ ERR("FOO", PERR_BADCMD) },
	{ ERR("PINGX", PERR_BADCMD) },
	{ ERR("PIN", PERR_BADCMD) },
	{ ERR("P", PERR_BADCMD) },
	{ ERR("ACQUIRES k", PERR_BADCMD) },
	{ ERR("ACQUIR k", PERR_BADCMD) },
	{ ERR("LOCK k", PERR_BADCMD) },
	{ ERR("GET k", PERR_BADCMD) },
	{ ERR("WAIT 5", PERR_BADCMD) },
	{ ERR("TTL 5", PERR_BADCMD) },
	{ ERR("OK", PERR_BADCMD) },
	{ ERR("ERR", PERR_BADCMD) },
	{ ERR("k ACQUIRE", PERR_BADCMD) },
	{ ERR("_PING", PERR_BADCMD) },
	{ ERR("~", PERR_BADCMD) },
	{ ERR("PING PONG x x x x x x x x x x", PERR_BADARG) },
	{ ERR("BOGUS x x x x x x x x x x x x", PERR_BADCMD) },
};

static enum proto_err parse_str(const char *line, size_t max_key_len,
    struct proto_req *req, char **bufp);
static char *make_line(const char *verb, size_t n, char c, const char *tail);

/* Protocol 1.2: ASYNC and VALUE on ACQUIRE, OWNER ... VALUE, CANCEL,
 * PROCLAIM, WATCH, UNWATCH, CHECK; and their errors, each beside a valid
 * twin above or here.  The 1.2 fields are checked by test_v12_fields. */
static const struct row v12_rows[] = {
	{ OK("ACQUIRE k ASYNC", CMD_ACQUIRE), KEY("k") },
	{ OK("ACQUIRE k WAIT 5 async", CMD_ACQUIRE), KEY("k"), WAIT(5) },
	{ OK("ACQUIRE k VALUE 10.0.0.7:8080", CMD_ACQUIRE), KEY("k") },
	{ OK("ACQUIRE k WAIT 5 TTL 7 VALUE v ASYNC", CMD_ACQUIRE), KEY("k"),
	  WAIT(5), TTL(7) },
	{ OK("ACQUIRE ASYNC ASYNC", CMD_ACQUIRE), KEY("ASYNC") },
	{ OK("ACQUIRE VALUE VALUE VALUE", CMD_ACQUIRE), KEY("VALUE") },
	{ OK("ACQUIRE k SHARED ASYNC WAIT 1", CMD_ACQUIRE), KEY("k"),
	  WAIT(1) },
	{ ERR("ACQUIRE k ASYNC ASYNC", PERR_BADARG) },
	{ ERR("ACQUIRE k VALUE", PERR_BADARG) },
	{ ERR("ACQUIRE k VALUE a VALUE b", PERR_BADARG) },
	{ ERR("ACQUIRE k SHARED VALUE v", PERR_BADARG) },
	{ ERR("ACQUIRE k VALUE v LIMIT 2", PERR_BADARG) },
	{ ERR("ACQUIRE k VALUE a b", PERR_BADARG) },
	{ ERR("RELEASE k ASYNC", PERR_BADARG) },
	{ ERR("RENEW k VALUE v", PERR_BADARG) },
	{ OK("OWNER k VALUE", CMD_OWNER), KEY("k") },
	{ ERR("OWNER k VALUE v", PERR_BADARG) },
	{ ERR("OWNER k VALUE VALUE", PERR_BADARG) },
	{ ERR("OWNER k ASYNC", PERR_BADARG) },
	{ OK("CANCEL k", CMD_CANCEL), KEY("k") },
	{ ERR("CANCEL", PERR_BADARG) },
	{ ERR("CANCEL k WAIT 5", PERR_BADARG) },
	{ OK("PROCLAIM k v", CMD_PROCLAIM), KEY("k") },
	{ ERR("PROCLAIM k", PERR_BADARG) },
	{ ERR("PROCLAIM k a b", PERR_BADARG) },
	{ OK("WATCH k", CMD_WATCH), KEY("k") },
	{ OK("unwatch k", CMD_UNWATCH), KEY("k") },
	{ ERR("WATCH", PERR_BADARG) },
	{ ERR("WATCH a b", PERR_BADARG) },
	{ OK("CHECK k 1795346669878170", CMD_CHECK), KEY("k") },
	{ OK("CHECK k 9007199254740991", CMD_CHECK), KEY("k") },
	{ ERR("CHECK k 9007199254740992", PERR_BADARG) },
	{ ERR("CHECK k 0", PERR_BADARG) },
	{ ERR("CHECK k -1", PERR_BADARG) },
	{ ERR("CHECK k 12a", PERR_BADARG) },
	{ ERR("CHECK k", PERR_BADARG) },
	{ ERR("CHECK k 1 2", PERR_BADARG) },
	/* ALL <n> <key>... (2..64 distinct keys); a key named ALL stays one */
	{ OK("ACQUIRE ALL 2 a b WAIT 5 ASYNC", CMD_ACQUIRE), KEY("a"),
	  WAIT(5) },
	{ OK("RELEASE ALL 2 a b", CMD_RELEASE), KEY("a") },
	{ OK("CANCEL all 3 a b c", CMD_CANCEL), KEY("a") },
	{ OK("ACQUIRE ALL", CMD_ACQUIRE), KEY("ALL") },
	{ OK("ACQUIRE ALL WAIT 5", CMD_ACQUIRE), KEY("ALL"), WAIT(5) },
	{ OK("RELEASE ALL", CMD_RELEASE), KEY("ALL") },
	{ ERR("ACQUIRE ALL 1 a", PERR_BADARG) },
	{ ERR("ACQUIRE ALL 65 a", PERR_BADARG) },
	{ ERR("ACQUIRE ALL 0", PERR_BADARG) },
	{ ERR("ACQUIRE ALL 2 a", PERR_BADARG) },
	{ ERR("ACQUIRE ALL 2 a a", PERR_BADARG) },
	{ ERR("ACQUIRE ALL 2 a b c", PERR_BADARG) },
	{ ERR("ACQUIRE ALL 2 a b SHARED", PERR_BADARG) },
	{ ERR("ACQUIRE ALL 2 a b VALUE v", PERR_BADARG) },
	{ ERR("ACQUIRE ALL 2 a b DELAY 5", PERR_BADARG) },
	{ ERR("RELEASE ALL 2 a b LINGER 5", PERR_BADARG) },
	{ ERR("OWNER ALL 2 a b", PERR_BADARG) },
	/* DELAY (exclusive only) and EVENTS ON WANTED */
	{ OK("ACQUIRE k DELAY 5000 WAIT 1", CMD_ACQUIRE), KEY("k"), WAIT(1) },
	{ ERR("ACQUIRE k DELAY", PERR_BADARG) },
	{ ERR("ACQUIRE k DELAY 1 DELAY 2", PERR_BADARG) },
	{ ERR("ACQUIRE k SHARED DELAY 1", PERR_BADARG) },
	{ ERR("ACQUIRE k LIMIT 2 DELAY 1", PERR_BADARG) },
	{ ERR("RELEASE k DELAY 1", PERR_BADARG) },
	{ OK("EVENTS ON WANTED", CMD_EVENTS), ON },
	{ OK("events on wanted", CMD_EVENTS), ON },
	{ ERR("EVENTS OFF WANTED", PERR_BADARG) },
	{ ERR("EVENTS WANTED", PERR_BADARG) },
	{ ERR("EVENTS ON WANTED WANTED", PERR_BADARG) },
	/* SETIF, DELIF: the key is the lock's (HOLDING <key>); the data
	 * key, the value and the TTL are checked by test_fenced_fields */
	{ OK("SETIF d v HOLDING k 1", CMD_SETIF), KEY("k") },
	{ OK("setif d v holding k 9007199254740991 px 5000", CMD_SETIF),
	  KEY("k") },
	{ OK("SETIF d v HOLDING k 7 KEEPTTL", CMD_SETIF), KEY("k") },
	{ OK("DELIF d HOLDING k 7", CMD_DELIF), KEY("k") },
	{ OK("SETIF HOLDING HOLDING HOLDING HOLDING 3", CMD_SETIF),
	  KEY("HOLDING") },
	{ OK("DELIF PX HOLDING KEEPTTL 3", CMD_DELIF), KEY("KEEPTTL") },
	{ ERR("SETIF", PERR_BADARG) },
	{ ERR("SETIF d", PERR_BADARG) },
	{ ERR("SETIF d v k 1", PERR_BADARG) },
	{ ERR("SETIF d v OWNING k 1", PERR_BADARG) },
	{ ERR("SETIF d HOLDING k 1", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 0", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k -1", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 12a", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 9007199254740992", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 PX", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 PX 0", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 PX x", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 PX 2147483648", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 PX 5 KEEPTTL", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 KEEPTTL PX 5", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 KEEPTTL KEEPTTL", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 PX 5 PX 6", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 TTL 5", PERR_BADARG) },
	{ ERR("SETIF d v HOLDING k 1 extra", PERR_BADARG) },
	{ ERR("DELIF", PERR_BADARG) },
	{ ERR("DELIF d HOLDING k", PERR_BADARG) },
	{ ERR("DELIF d v HOLDING k 1", PERR_BADARG) },
	{ ERR("DELIF d HOLDING k 1 KEEPTTL", PERR_BADARG) },
	{ ERR("DELIF d HOLDING k 1 PX 5", PERR_BADARG) },
	{ ERR("DELIF d HOLDING k 0", PERR_BADARG) },
};

/* ALL's keys point into the line, in order; DELAY's and WANTED's fields. */
START_TEST(test_all_fields)
{
	struct proto_req req;
	char *buf;

	ck_assert_int_eq(parse_str("ACQUIRE ALL 3 x yy zzz TTL 9", KEYMAX, &req,
	    &buf), PERR_NONE);
	ck_assert_int_eq(req.nkeys, 3);
	ck_assert_uint_eq(req.keylens[1], 2);
	ck_assert(memcmp(req.keys[2], "zzz", 3) == 0);
	ck_assert_int_eq(req.has_ttl, 1);
	free(buf);
	ck_assert_int_eq(parse_str("ACQUIRE ALL TTL 9", KEYMAX, &req, &buf),
	    PERR_NONE);
	ck_assert_int_eq(req.nkeys, 0);
	free(buf);
	ck_assert_int_eq(parse_str("ACQUIRE k DELAY 60000", KEYMAX, &req,
	    &buf), PERR_NONE);
	ck_assert_int_eq(req.has_delay, 1);
	ck_assert_int_eq(req.delay_ms, 60000);
	free(buf);
	ck_assert_int_eq(parse_str("ACQUIRE k", KEYMAX, &req, &buf),
	    PERR_NONE);
	ck_assert_int_eq(req.has_delay, 0);
	free(buf);
	ck_assert_int_eq(parse_str("EVENTS ON WANTED", KEYMAX, &req, &buf),
	    PERR_NONE);
	ck_assert_int_eq(req.on, 1);
	ck_assert_int_eq(req.wanted, 1);
	free(buf);
	ck_assert_int_eq(parse_str("EVENTS ON", KEYMAX, &req, &buf),
	    PERR_NONE);
	ck_assert_int_eq(req.wanted, 0);
	free(buf);
}
END_TEST
/* The admin words: LOCKS [glob] [LIMIT n] [CURSOR c], SESSIONS [CURSOR
 * c] [LIMIT n], KILL <client-id>, FREE <key>; each error beside a valid
 * twin.  The glob is the word, the cursor and LIMIT are checked by
 * test_admin_fields. */
static const struct row admin_rows[] = {
	{ OK("LOCKS", CMD_LOCKS) },
	{ OK("locks orders:*", CMD_LOCKS), WORD("orders:*") },
	{ OK("LOCKS LIMIT 5", CMD_LOCKS) },
	{ OK("LOCKS a?b LIMIT 100 CURSOR 7.0", CMD_LOCKS), WORD("a?b") },
	{ OK("LOCKS CURSOR 7.0 LIMIT 1", CMD_LOCKS) },
	{ OK("LOCKS LIMIT", CMD_LOCKS), WORD("LIMIT") },
	{ OK("LOCKS CURSOR LIMIT 3", CMD_LOCKS), WORD("CURSOR") },
	{ ERR("LOCKS LIMIT 0", PERR_BADARG) },
	{ ERR("LOCKS LIMIT 101", PERR_BADARG) },
	{ ERR("LOCKS LIMIT x", PERR_BADARG) },
	{ ERR("LOCKS LIMIT 5 LIMIT 6", PERR_BADARG) },
	{ ERR("LOCKS CURSOR 1 CURSOR 2", PERR_BADARG) },
	{ ERR("LOCKS a b", PERR_BADARG) },
	{ ERR("LOCKS a LIMIT", PERR_BADARG) },
	{ ERR("LOCKS a WAIT 5", PERR_BADARG) },
	{ OK("SESSIONS", CMD_SESSIONS) },
	{ OK("SESSIONS CURSOR 0 LIMIT 10", CMD_SESSIONS) },
	{ ERR("SESSIONS x", PERR_BADARG) },
	{ ERR("SESSIONS LIMIT 101", PERR_BADARG) },
	{ ERR("SESSIONS CURSOR", PERR_BADARG) },
	{ OK("KILL 3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10", CMD_KILL),
	  WORD("3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10") },
	{ ERR("KILL", PERR_BADARG) },
	{ ERR("KILL a b", PERR_BADARG) },
	{ OK("FREE k", CMD_FREE), KEY("k") },
	{ ERR("FREE", PERR_BADARG) },
	{ ERR("FREE k 1", PERR_BADARG) },
};

START_TEST(test_valid_forms) { check_row(&valid_rows[_i]); } END_TEST
START_TEST(test_v12) { check_row(&v12_rows[_i]); } END_TEST
START_TEST(test_admin) { check_row(&admin_rows[_i]); } END_TEST

/* The admin listings' LIMIT and CURSOR, and their bounds. */
START_TEST(test_admin_fields)
{
	static const struct {
		const char *verb;
		size_t max;
		char c;
	} bounds[] = {
		{ "LOCKS CURSOR", PROTO_CURSOR_MAX, 'c' },
		{ "LOCKS", PROTO_GLOB_MAX, '*' },
	};
	struct proto_req req;
	char *buf, *line;

	ck_assert_int_eq(parse_str("LOCKS g LIMIT 007 CURSOR 12.0.ab.5",
	    KEYMAX, &req, &buf), PERR_NONE);
	ck_assert_int_eq(req.limit, 7);
	ck_assert_uint_eq(req.word2len, 9);
	ck_assert(memcmp(req.word2, "12.0.ab.5", 9) == 0);
	free(buf);
	ck_assert_int_eq(parse_str("SESSIONS", KEYMAX, &req, &buf),
	    PERR_NONE);
	ck_assert_int_eq(req.limit, 0);
	ck_assert_ptr_null(req.word2);
	ck_assert_ptr_null(req.word);
	free(buf);
	/* a CURSOR of 64 bytes passes, 65 do not; a glob 1024 and 1025 */
	for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
		for (size_t extra = 0; extra < 2; extra++) {
			line = make_line(bounds[i].verb, bounds[i].max + extra,
			    bounds[i].c, "");
			ck_assert_int_eq(parse_str(line, KEYMAX, &req, &buf),
			    extra ? PERR_BADARG : PERR_NONE);
			if (!extra)
				ck_assert_uint_eq(bounds[i].c == 'c' ?
				    req.word2len : req.wordlen, bounds[i].max);
			free(buf);
			free(line);
		}
	}
}
END_TEST

/* The 1.2 fields: the value points into the line, flags and the token. */
START_TEST(test_v12_fields)
{
	struct proto_req req;
	char *buf;
	char big[300];
	static const char line[] = "ACQUIRE k VALUE 10.0.0.7:8080 ASYNC";

	ck_assert_int_eq(parse_str(line, KEYMAX, &req, &buf), PERR_NONE);
	ck_assert_int_eq(req.async, 1);
	ck_assert_uint_eq(req.valuelen, 13);
	ck_assert(memcmp(req.value, "10.0.0.7:8080", 13) == 0);
	/* (buf holds the line's bytes only: no NUL to strlen) */
	ck_assert(inside(req.value, req.valuelen, buf, sizeof line - 1));
	free(buf);
	ck_assert_int_eq(parse_str("ACQUIRE k", KEYMAX, &req, &buf),
	    PERR_NONE);
	ck_assert_int_eq(req.async, 0);
	ck_assert_uint_eq(req.valuelen, 0);
	free(buf);
	ck_assert_int_eq(parse_str("OWNER k VALUE", KEYMAX, &req, &buf),
	    PERR_NONE);
	ck_assert_int_eq(req.with_value, 1);
	free(buf);
	ck_assert_int_eq(parse_str("OWNER k", KEYMAX, &req, &buf), PERR_NONE);
	ck_assert_int_eq(req.with_value, 0);
	free(buf);
	ck_assert_int_eq(parse_str("PROCLAIM k leader-2", KEYMAX, &req, &buf),
	    PERR_NONE);
	ck_assert_uint_eq(req.valuelen, 8);
	ck_assert(memcmp(req.value, "leader-2", 8) == 0);
	free(buf);
	ck_assert_int_eq(parse_str("CHECK k 9007199254740991", KEYMAX, &req,
	    &buf), PERR_NONE);
	ck_assert(req.token == 9007199254740991LL);
	free(buf);
	/* VALUE: 256 bytes pass, 257 do not */
	memcpy(big, "PROCLAIM k ", 11);
	memset(big + 11, 'v', 256);
	big[11 + 256] = '\0';
	ck_assert_int_eq(parse_str(big, KEYMAX, &req, &buf), PERR_NONE);
	ck_assert_uint_eq(req.valuelen, 256);
	free(buf);
	big[11 + 256] = 'v';
	big[11 + 257] = '\0';
	ck_assert_int_eq(parse_str(big, KEYMAX, &req, &buf), PERR_BADARG);
	free(buf);
}
END_TEST
/*
 * SETIF and DELIF: the data key and the value point into the line; the
 * data key is bound by max_key_len, the lock key by the held-key limit
 * (as CHECK's), the value by PROTO_DATA_MAX; PX and KEEPTTL as given.
 */
START_TEST(test_fenced_fields)
{
	struct proto_limits lim = { .max_key_len = 4,
	    .max_held_key_len = 8 };
	struct proto_req req;
	const char *why;
	char *buf, *line;
	int empty;
	static const char l1[] = "SETIF data v4l HOLDING lock 42 PX 1500";

	ck_assert_int_eq(parse_str(l1, KEYMAX, &req, &buf), PERR_NONE);
	ck_assert_int_eq(req.cmd, CMD_SETIF);
	ck_assert(req.datakeylen == 4 && memcmp(req.datakey, "data", 4) == 0);
	ck_assert(inside(req.datakey, req.datakeylen, buf, sizeof l1 - 1));
	ck_assert(req.datalen == 3 && memcmp(req.data, "v4l", 3) == 0);
	ck_assert(inside(req.data, req.datalen, buf, sizeof l1 - 1));
	ck_assert(req.keylen == 4 && memcmp(req.key, "lock", 4) == 0);
	ck_assert(req.token == 42 && req.has_px && req.px_ms == 1500 &&
	    !req.keepttl);
	ck_assert(req.valuelen == 0 && !req.has_ttl && !req.has_wait);
	free(buf);
	ck_assert_int_eq(parse_str("SETIF d v HOLDING k 1 keepttl", KEYMAX,
	    &req, &buf), PERR_NONE);
	ck_assert(req.keepttl && !req.has_px);
	free(buf);
	ck_assert_int_eq(parse_str("SETIF d v HOLDING k 1", KEYMAX, &req,
	    &buf), PERR_NONE);
	ck_assert(!req.keepttl && !req.has_px);
	free(buf);
	ck_assert_int_eq(parse_str("DELIF dk HOLDING k 9", KEYMAX, &req,
	    &buf), PERR_NONE);
	ck_assert_int_eq(req.cmd, CMD_DELIF);
	ck_assert(req.datakeylen == 2 && req.data == NULL && req.datalen == 0);
	ck_assert(req.token == 9 && !req.keepttl && !req.has_px);
	free(buf);
	/* other commands carry none of it */
	ck_assert_int_eq(parse_str("CHECK k 9", KEYMAX, &req, &buf),
	    PERR_NONE);
	ck_assert(req.datakey == NULL && req.data == NULL);
	free(buf);

	/* the value: 1024 bytes pass, 1025 do not */
	line = make_line("SETIF d", PROTO_DATA_MAX, 'v', " HOLDING k 1");
	ck_assert_int_eq(parse_str(line, KEYMAX, &req, &buf), PERR_NONE);
	ck_assert_uint_eq(req.datalen, PROTO_DATA_MAX);
	free(buf);
	free(line);
	line = make_line("SETIF d", PROTO_DATA_MAX + 1, 'v', " HOLDING k 1");
	ck_assert_int_eq(parse_str(line, KEYMAX, &req, &buf), PERR_BADARG);
	free(buf);
	free(line);

	/* the data key: max_key_len; the lock key: the held-key limit */
	ck_assert_int_eq(proto_parse("DELIF dddd HOLDING kkkkkkkk 1", 29, &lim,
	    &req, &empty, &why), PERR_NONE);
	ck_assert_int_eq(proto_parse("DELIF ddddd HOLDING k 1", 23, &lim,
	    &req, &empty, &why), PERR_BADARG);
	ck_assert_int_eq(proto_parse("DELIF d HOLDING kkkkkkkkk 1", 27, &lim,
	    &req, &empty, &why), PERR_BADARG);
	ck_assert_int_eq(proto_parse("SETIF ddddd v HOLDING k 1", 25, &lim,
	    &req, &empty, &why), PERR_BADARG);
}
END_TEST
START_TEST(test_case) { check_row(&case_rows[_i]); } END_TEST
START_TEST(test_blanks) { check_row(&blank_rows[_i]); } END_TEST
START_TEST(test_bytes) { check_row(&byte_rows[_i]); } END_TEST
START_TEST(test_ms_values) { check_row(&ms_rows[_i]); } END_TEST
START_TEST(test_options) { check_row(&option_rows[_i]); } END_TEST
START_TEST(test_arity) { check_row(&arity_rows[_i]); } END_TEST
START_TEST(test_verbs) { check_row(&verb_rows[_i]); } END_TEST

/* "<verb> <n x c><tail>" in a fresh buffer. */
static char *
make_line(const char *verb, size_t n, char c, const char *tail)
{
	size_t vl = strlen(verb), tl = strlen(tail);
	char *s = malloc(vl + 1 + n + tl + 1);

	ck_assert_ptr_nonnull(s);
	memcpy(s, verb, vl);
	s[vl] = ' ';
	memset(s + vl + 1, c, n);
	memcpy(s + vl + 1 + n, tail, tl + 1);
	return s;
}

static enum proto_err
parse_str(const char *line, size_t max_key_len, struct proto_req *req,
    char **bufp)
{
	const char *why;
	int empty;
	enum proto_err e;

	e = parse(line, strlen(line), max_key_len, req, &empty, &why, bufp);
	if (e == PERR_NONE)
		ck_assert_int_eq(empty, 0);
	return e;
}

/* Keys of 1 and max_key_len bytes pass, one more is BADARG, for every
 * command that takes a key and with options after the key. */
START_TEST(test_key_length)
{
	static const struct {
		const char *verb, *tail;
		enum proto_cmd cmd;
	} forms[] = {
		{ "ACQUIRE", "", CMD_ACQUIRE },
		{ "ACQUIRE", " WAIT 1 TTL 2", CMD_ACQUIRE },
		{ "RELEASE", "", CMD_RELEASE },
		{ "RENEW", "", CMD_RENEW },
		{ "RENEW", " TTL 2", CMD_RENEW },
		{ "OWNER", "", CMD_OWNER },
	};
	static const size_t lens[] = { 1, KEYMAX - 1, KEYMAX, KEYMAX + 1,
	    KEYMAX + 2, 4096 };

	for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
		for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
			char *line = make_line(forms[f].verb, lens[i], 'K',
			    forms[f].tail);
			struct proto_req req;
			char *buf;
			enum proto_err e = parse_str(line, KEYMAX, &req, &buf);

			if (lens[i] <= KEYMAX) {
				ck_assert_msg(e == PERR_NONE, "%s key of %zu%s: %s",
				    forms[f].verb, lens[i], forms[f].tail,
				    errname(e));
				ck_assert_int_eq(req.cmd, forms[f].cmd);
				ck_assert_uint_eq(req.keylen, lens[i]);
				ck_assert_ptr_eq(req.key,
				    buf + strlen(forms[f].verb) + 1);
			} else {
				ck_assert_msg(e == PERR_BADARG, "%s key of %zu%s: %s",
				    forms[f].verb, lens[i], forms[f].tail,
				    errname(e));
			}
			free(buf);
			free(line);
		}
	}
}
END_TEST

/* A lowered max_key_len binds new keys (ACQUIRE) only: RELEASE, RENEW and
 * OWNER take keys up to max_held_key_len (issue 9, defect 10). */
START_TEST(test_held_key_limit)
{
	static const struct {
		const char *verb;
		size_t keylen;
		enum proto_err want;
	} cases[] = {
		{ "ACQUIRE", 4, PERR_NONE }, { "ACQUIRE", 5, PERR_BADARG },
		{ "RELEASE", 5, PERR_NONE }, { "RELEASE", 100, PERR_NONE },
		{ "RELEASE", 101, PERR_BADARG }, { "RENEW", 100, PERR_NONE },
		{ "RENEW", 101, PERR_BADARG }, { "OWNER", 100, PERR_NONE },
		{ "OWNER", 101, PERR_BADARG },
	};
	struct proto_limits lim = { .max_key_len = 4, .max_held_key_len = 100 };

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *line = make_line(cases[i].verb, cases[i].keylen, 'h', "");
		struct proto_req req;
		const char *why;
		int empty;
		enum proto_err e = proto_parse(line, strlen(line), &lim, &req,
		    &empty, &why);

		ck_assert_msg(e == cases[i].want, "%s key of %zu: %s",
		    cases[i].verb, cases[i].keylen, errname(e));
		free(line);
	}
}
END_TEST

/* The key limit is the caller's, not a constant inside the parser. */
START_TEST(test_key_limit_from_caller)
{
	static const struct {
		size_t limit, keylen;
		enum proto_err want;
	} cases[] = {
		{ 4, 4, PERR_NONE }, { 4, 5, PERR_BADARG },
		{ 1, 1, PERR_NONE }, { 1, 2, PERR_BADARG },
		{ 1000, 1000, PERR_NONE }, { 1000, 1001, PERR_BADARG },
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *line = make_line("OWNER", cases[i].keylen, 'x', "");
		struct proto_req req;
		char *buf;
		enum proto_err e = parse_str(line, cases[i].limit, &req, &buf);

		ck_assert_msg(e == cases[i].want, "limit %zu, key %zu: %s",
		    cases[i].limit, cases[i].keylen, errname(e));
		if (e == PERR_NONE)
			ck_assert_uint_eq(req.keylen, cases[i].keylen);
		free(buf);
		free(line);
	}
}
END_TEST

/* HELLO names and AUTH tokens: up to PROTO_NAME_MAX bytes. */
START_TEST(test_word_length)
{
	static const char *const verbs[] = { "HELLO", "AUTH" };

	for (size_t v = 0; v < 2; v++) {
		for (size_t n = PROTO_NAME_MAX - 1; n <= PROTO_NAME_MAX + 1; n++) {
			char *line = make_line(verbs[v], n, 'n', "");
			struct proto_req req;
			char *buf;
			enum proto_err e = parse_str(line, KEYMAX, &req, &buf);

			if (n <= PROTO_NAME_MAX) {
				ck_assert_msg(e == PERR_NONE, "%s %zu: %s",
				    verbs[v], n, errname(e));
				ck_assert_uint_eq(req.wordlen, n);
				ck_assert_ptr_eq(req.word,
				    buf + strlen(verbs[v]) + 1);
			} else {
				ck_assert_msg(e == PERR_BADARG, "%s %zu: %s",
				    verbs[v], n, errname(e));
			}
			free(buf);
			free(line);
		}
	}
}
END_TEST

/* Lines of thousands of words are refused without trouble; blanks
 * between words, however many, do not count as words. */
START_TEST(test_many_words)
{
	static const struct {
		const char *head, *rep;
		enum proto_err want;
	} cases[] = {
		{ "PING", " x", PERR_BADARG },
		{ "HELD", "\tx", PERR_BADARG },
		{ "ACQUIRE k", " WAIT 1", PERR_BADARG },
		{ "ACQUIRE k", " TTL 1", PERR_BADARG },
		{ "RELEASE k", " k", PERR_BADARG },
		{ "HELLO", " name", PERR_BADARG },
		{ "EVENTS", " ON", PERR_BADARG },
		{ "NOSUCH", " x", PERR_BADCMD },
	};
	const size_t reps = 20000;

	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		size_t hl = strlen(cases[c].head), rl = strlen(cases[c].rep);
		char *line = malloc(hl + reps * rl + 1), *buf;
		struct proto_req req;
		enum proto_err e;

		ck_assert_ptr_nonnull(line);
		memcpy(line, cases[c].head, hl);
		for (size_t i = 0; i < reps; i++)
			memcpy(line + hl + i * rl, cases[c].rep, rl);
		line[hl + reps * rl] = '\0';
		e = parse_str(line, KEYMAX, &req, &buf);
		ck_assert_msg(e == cases[c].want, "%s + %zu x \"%s\": %s",
		    cases[c].head, reps, esc(cases[c].rep, rl), errname(e));
		free(buf);
		free(line);
	}
}
END_TEST

/* Append n blanks b, then the string s. */
static char *
put(char *p, size_t n, char b, const char *s)
{
	size_t sl = strlen(s);

	memset(p, b, n);
	memcpy(p + n, s, sl + 1);
	return p + n + sl;
}

START_TEST(test_many_blanks)
{
	const size_t n = 10000;
	char *line = malloc(4 * n + 64), *buf, *p;
	struct proto_req req;

	ck_assert_ptr_nonnull(line);
	p = put(line, n, ' ', "ACQUIRE");
	p = put(p, n, '\t', "k");
	p = put(p, n, ' ', "WAIT 3\t\tTTL");
	put(p, n, '\t', "4 ");
	ck_assert_int_eq(parse_str(line, KEYMAX, &req, &buf), PERR_NONE);
	ck_assert_int_eq(req.cmd, CMD_ACQUIRE);
	ck_assert_uint_eq(req.keylen, 1);
	ck_assert_int_eq(req.key[0], 'k');
	ck_assert(req.has_wait && req.wait_ms == 3);
	ck_assert(req.has_ttl && req.ttl_ms == 4);
	free(buf);
	free(line);
}
END_TEST

/* Only len bytes are read: what follows in memory is not the line's. */
START_TEST(test_reads_only_len)
{
	static const char line[] = "ACQUIRE abc WAIT 5";
	struct proto_limits lim = { .max_key_len = KEYMAX };
	struct proto_req req;
	const char *why;
	int empty;

	ck_assert_int_eq(proto_parse(line, 4, &lim, &req, &empty, &why),
	    PERR_BADCMD);				/* "ACQU" */
	ck_assert_int_eq(proto_parse(line, 9, &lim, &req, &empty, &why),
	    PERR_NONE);					/* "ACQUIRE a" */
	ck_assert_uint_eq(req.keylen, 1);
	ck_assert_ptr_eq(req.key, line + 8);
	ck_assert(!req.has_wait);
	ck_assert_int_eq(proto_parse(line, 17, &lim, &req, &empty, &why),
	    PERR_BADARG);				/* "... WAIT" */
	ck_assert_int_eq(proto_parse(line, 0, &lim, &req, &empty, &why),
	    PERR_NONE);
	ck_assert_int_eq(empty, 1);
}
END_TEST

/*
 * An option with no value is refused even right after a line that had one
 * at the same place: a parser that looked one word past the end would find
 * the previous line's value still on its stack (the rows in the tables run
 * one per process and cannot see that).
 */
START_TEST(test_missing_value_after_full_line)
{
	static const char *const pairs[][2] = {
		{ "ACQUIRE k WAIT 5 TTL 6", "ACQUIRE k WAIT" },
		{ "ACQUIRE k TTL 6 WAIT 5", "ACQUIRE k TTL" },
		{ "ACQUIRE k WAIT 5 TTL 6", "ACQUIRE k WAIT 5 TTL" },
		{ "RENEW k TTL 6", "RENEW k TTL" },
	};
	struct proto_limits lim = { .max_key_len = KEYMAX };

	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		struct proto_req req;
		const char *why;
		size_t l0 = strlen(pairs[i][0]), l1 = strlen(pairs[i][1]);
		int empty;
		enum proto_err e0, e1;

		/* Back to back, so nothing runs between them to clear the
		 * stack. */
		e0 = proto_parse(pairs[i][0], l0, &lim, &req, &empty, &why);
		e1 = proto_parse(pairs[i][1], l1, &lim, &req, &empty, &why);
		ck_assert_msg(e0 == PERR_NONE, "\"%s\": %s", pairs[i][0],
		    errname(e0));
		ck_assert_msg(e1 == PERR_BADARG, "\"%s\" after \"%s\": %s",
		    pairs[i][1], pairs[i][0], errname(e1));
	}
}
END_TEST

/* A request struct reused from a previous line keeps nothing of it. */
START_TEST(test_req_reused)
{
	struct proto_limits lim = { .max_key_len = KEYMAX };
	struct proto_req req;
	const char *why;
	int empty;

	ck_assert_int_eq(proto_parse("ACQUIRE k WAIT 1 TTL 2", 22, &lim, &req,
	    &empty, &why), PERR_NONE);
	ck_assert_int_eq(proto_parse("HELLO", 5, &lim, &req, &empty, &why),
	    PERR_NONE);
	ck_assert_ptr_null(req.key);
	ck_assert_ptr_null(req.word);
	ck_assert(!req.has_wait && !req.has_ttl);
	ck_assert_int_eq(proto_parse("EVENTS ON", 9, &lim, &req, &empty, &why),
	    PERR_NONE);
	ck_assert_int_eq(proto_parse("EVENTS OFF", 10, &lim, &req, &empty,
	    &why), PERR_NONE);
	ck_assert_int_eq(req.on, 0);
	ck_assert_int_eq(proto_parse("", 0, &lim, &req, &empty, &why),
	    PERR_NONE);
	ck_assert_int_eq(empty, 1);
	ck_assert_int_eq(proto_parse("PING", 4, &lim, &req, &empty, &why),
	    PERR_NONE);
	ck_assert_int_eq(empty, 0);
}
END_TEST

/* Every command's table name parses back to that command, and the usage
 * line starts with it. */
START_TEST(test_cmd_table)
{
	struct proto_limits lim = { .max_key_len = KEYMAX };

	for (int c = 0; c < CMD__COUNT; c++) {
		const struct proto_cmd_info *info = proto_cmd_info(c);
		const char *name = proto_cmd_name(c), *why;
		struct proto_req req;
		int empty;
		enum proto_err e;

		ck_assert_ptr_nonnull(info);
		ck_assert_str_eq(info->name, name);
		ck_assert_msg(strncmp(info->usage, name, strlen(name)) == 0,
		    "usage \"%s\" for %s", info->usage, name);
		e = proto_parse(name, strlen(name), &lim, &req, &empty, &why);
		/* Bare verb: fine, or BADARG for a missing argument. */
		ck_assert_msg(e == PERR_NONE || e == PERR_BADARG, "%s: %s",
		    name, errname(e));
		if (e == PERR_NONE)
			ck_assert_int_eq(req.cmd, c);
	}
	ck_assert_ptr_null(proto_cmd_info(CMD__COUNT));
	ck_assert_str_eq(proto_cmd_name(CMD_ACQUIRE), "ACQUIRE");
	ck_assert_str_eq(proto_cmd_name(CMD_RELEASE), "RELEASE");
}
END_TEST

/* The closed set of error words, exactly as they go on the wire. */
START_TEST(test_err_names)
{
	static const struct {
		enum proto_err e;
		const char *name;
	} names[] = {
		{ PERR_BADCMD, "BADCMD" }, { PERR_BADARG, "BADARG" },
		{ PERR_TOOLONG, "TOOLONG" }, { PERR_NOAUTH, "NOAUTH" },
		{ PERR_NOTHELD, "NOTHELD" }, { PERR_LOST, "LOST" },
		{ PERR_UNAVAILABLE, "UNAVAILABLE" }, { PERR_LIMIT, "LIMIT" },
		{ PERR_NOSESSION, "NOSESSION" },
		{ PERR_DENIED, "DENIED" },
	};

	ck_assert_int_eq(sizeof names / sizeof names[0], PERR__COUNT - 1);
	ck_assert_ptr_null(proto_err_name(PERR_NONE));
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		ck_assert_str_eq(proto_err_name(names[i].e), names[i].name);
}
END_TEST

/* Protocol 1.1: HELLO ... GRACE, RESUME, RELEASE ... LINGER. */
static enum proto_err
parse1(const char *line, struct proto_req *req)
{
	struct proto_limits lim = { .max_key_len = KEYMAX };
	const char *why;
	int empty;

	return proto_parse(line, strlen(line), &lim, req, &empty, &why);
}

START_TEST(test_grace_words)
{
	struct proto_req req;

	ck_assert_int_eq(parse1("HELLO GRACE 5000", &req), PERR_NONE);
	ck_assert(req.has_grace && req.grace_ms == 5000 && req.word == NULL);
	ck_assert_int_eq(parse1("hello app grace 0", &req), PERR_NONE);
	ck_assert(req.has_grace && req.grace_ms == 0);
	ck_assert_int_eq((int)req.wordlen, 3);
	/* a session may still be called GRACE */
	ck_assert_int_eq(parse1("HELLO GRACE", &req), PERR_NONE);
	ck_assert(!req.has_grace && req.wordlen == 5);
	ck_assert_int_eq(parse1("HELLO GRACE GRACE 1", &req), PERR_NONE);
	ck_assert(req.has_grace && req.wordlen == 5);
	ck_assert_int_eq(parse1("HELLO a GRACE x", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("HELLO a GRACE -1", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("HELLO a b GRACE 1", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("HELLO a GRACE", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("HELLO a GRACE 2147483648", &req),
	    PERR_BADARG);

	ck_assert_int_eq(parse1("RESUME id secret", &req), PERR_NONE);
	ck_assert_int_eq(req.cmd, CMD_RESUME);
	ck_assert(req.wordlen == 2 && req.word2len == 6);
	ck_assert_int_eq(parse1("RESUME id", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("RESUME", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("RESUME a b c", &req), PERR_BADARG);

	ck_assert_int_eq(parse1("RELEASE k LINGER 1500", &req), PERR_NONE);
	ck_assert(req.has_linger && req.linger_ms == 1500 && !req.has_ttl);
	ck_assert_int_eq(parse1("RELEASE k linger 0", &req), PERR_NONE);
	ck_assert(req.has_linger && req.linger_ms == 0);
	ck_assert_int_eq(parse1("RELEASE k LINGER 1 LINGER 2", &req),
	    PERR_BADARG);
	ck_assert_int_eq(parse1("RELEASE k TTL 5", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("RELEASE k WAIT 5", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k LINGER 5", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("RENEW k LINGER 5", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("RELEASE k", &req), PERR_NONE);
	ck_assert(!req.has_linger);
}
END_TEST

/* 1.1: ACQUIRE ... SHARED and ACQUIRE ... LIMIT n (issue 13). */
START_TEST(test_kind_words)
{
	struct proto_req req;

	ck_assert_int_eq(parse1("ACQUIRE k SHARED", &req), PERR_NONE);
	ck_assert(req.shared && req.limit == 0 && !req.has_wait);
	ck_assert_int_eq(parse1("acquire k wait 5 shared ttl 7", &req),
	    PERR_NONE);
	ck_assert(req.shared && req.wait_ms == 5 && req.ttl_ms == 7);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 3 WAIT 10 TTL 20", &req),
	    PERR_NONE);
	ck_assert(!req.shared && req.limit == 3 && req.wait_ms == 10 &&
	    req.ttl_ms == 20);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 1000000", &req), PERR_NONE);
	ck_assert(req.limit == 1000000);
	ck_assert_int_eq(parse1("ACQUIRE k", &req), PERR_NONE);
	ck_assert(!req.shared && req.limit == 0);
	/* a key may be called SHARED or LIMIT */
	ck_assert_int_eq(parse1("ACQUIRE SHARED", &req), PERR_NONE);
	ck_assert(!req.shared && req.keylen == 6);
	ck_assert_int_eq(parse1("ACQUIRE LIMIT LIMIT 2", &req), PERR_NONE);
	ck_assert(req.limit == 2 && req.keylen == 5);

	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 0", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 1000001", &req),
	    PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 00000003", &req),
	    PERR_NONE);
	ck_assert(req.limit == 3);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 01000001", &req),
	    PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT -1", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT x", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k SHARED LIMIT 2", &req),
	    PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 2 SHARED", &req),
	    PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k SHARED SHARED", &req),
	    PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 2 LIMIT 2", &req),
	    PERR_BADARG);
	ck_assert_int_eq(parse1("ACQUIRE k SHARED 5", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("RELEASE k SHARED", &req), PERR_BADARG);
	ck_assert_int_eq(parse1("RENEW k LIMIT 2", &req), PERR_BADARG);
	/* the longest request: 8 words */
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 2 WAIT 1 TTL 2", &req),
	    PERR_NONE);
	ck_assert_int_eq(parse1("ACQUIRE k LIMIT 2 WAIT 1 TTL 2 x", &req),
	    PERR_BADARG);
}
END_TEST

Suite *
proto_suite(void)
{
	Suite *s = suite_create("proto");
	TCase *tc;

	tc = tcase_create("tables");
	tcase_add_loop_test(tc, test_valid_forms, 0, NROWS(valid_rows));
	tcase_add_loop_test(tc, test_v12, 0, NROWS(v12_rows));
	tcase_add_test(tc, test_v12_fields);
	tcase_add_test(tc, test_all_fields);
	tcase_add_test(tc, test_fenced_fields);
	tcase_add_loop_test(tc, test_admin, 0, NROWS(admin_rows));
	tcase_add_test(tc, test_admin_fields);
	tcase_add_loop_test(tc, test_case, 0, NROWS(case_rows));
	tcase_add_loop_test(tc, test_blanks, 0, NROWS(blank_rows));
	tcase_add_loop_test(tc, test_bytes, 0, NROWS(byte_rows));
	tcase_add_loop_test(tc, test_ms_values, 0, NROWS(ms_rows));
	tcase_add_loop_test(tc, test_options, 0, NROWS(option_rows));
	tcase_add_loop_test(tc, test_arity, 0, NROWS(arity_rows));
	tcase_add_loop_test(tc, test_verbs, 0, NROWS(verb_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("limits");
	tcase_add_test(tc, test_key_length);
	tcase_add_test(tc, test_key_limit_from_caller);
	tcase_add_test(tc, test_held_key_limit);
	tcase_add_test(tc, test_word_length);
	tcase_add_test(tc, test_many_words);
	tcase_add_test(tc, test_many_blanks);
	tcase_add_test(tc, test_reads_only_len);
	tcase_add_test(tc, test_missing_value_after_full_line);
	tcase_add_test(tc, test_req_reused);
	tcase_add_test(tc, test_grace_words);
	tcase_add_test(tc, test_kind_words);
	suite_add_tcase(s, tc);

	tc = tcase_create("tables-of-names");
	tcase_add_test(tc, test_cmd_table);
	tcase_add_test(tc, test_err_names);
	suite_add_tcase(s, tc);
	return s;
}
