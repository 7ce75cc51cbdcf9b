/*
 * proto.c - parse one request line of the lockbroker protocol.
 *
 * Grammar (proto/PROTOCOL.md has the full spec): words separated by spaces
 * or tabs; the verb and option words are case-insensitive; keys are
 * case-sensitive, 1..max_key_len bytes of 0x21..0x7e.  Any byte outside
 * 0x20..0x7e other than tab makes the whole line BADARG.  Pure: no I/O,
 * no allocation, so the fuzzer and the unit tests drive it directly.
 */
#include "proto.h"

#include <string.h>
#include <strings.h>

/* the longest valid request: ACQUIRE ALL <n> with 64 keys and its options */
#define MAX_WORDS (3 + PROTO_ALL_MAX + 8)

/* How the arguments after the verb are read. */
enum shape {
	SHAPE_NONE,		/* no argument */
	SHAPE_HELLO,		/* HELLO [name] [GRACE ms] */
	SHAPE_WORD,		/* exactly one word (AUTH token) */
	SHAPE_WORD2,		/* exactly two words (RESUME id secret) */
	SHAPE_KEY,		/* exactly one key */
	SHAPE_KEY_OPTS,		/* key then WAIT/TTL options */
	SHAPE_ONOFF,		/* ON or OFF */
	SHAPE_KEY_VALUE,	/* 1.2: key and a VALUE word (PROCLAIM) */
	SHAPE_KEY_TOKEN,	/* 1.2: key and a token (CHECK) */
	SHAPE_FENCED,		/* 1.2: SETIF, DELIF (parse_fenced) */
	SHAPE_PAGE		/* admin: [glob] then LIMIT n, CURSOR c */
};

struct cmd_def {
	const char *name;
	enum shape shape;
	unsigned opts;		/* OPT_* allowed after the key */
	const char *usage;
};

#define OPT_WAIT   1u
#define OPT_TTL    2u
#define OPT_LINGER 4u
#define OPT_SHARED 8u	/* 1.1: a flag, no value */
#define OPT_LIMIT  16u	/* 1.1 */
#define OPT_VALUE  32u	/* 1.2: a word of 1..PROTO_VALUE_MAX bytes */
#define OPT_ASYNC  64u	/* 1.2: a flag */
#define OPT_VFLAG  128u	/* 1.2: OWNER's VALUE, a flag */
#define OPT_DELAY  256u	/* 1.2: ACQUIRE ... DELAY <ms> */
#define OPT_ALL    512u	/* 1.2: the ALL <n> <key>... form is allowed */
#define OPT_GLOB   1024u	/* admin LOCKS: a glob may come first */

/* One table: the parser, help text and docs tests walk it. */
static const struct cmd_def cmds[CMD__COUNT] = {
	[CMD_HELLO]   = { "HELLO",   SHAPE_HELLO, 0,
			  "HELLO [name] [GRACE <ms>]" },
	[CMD_ACQUIRE] = { "ACQUIRE", SHAPE_KEY_OPTS,
			  OPT_WAIT | OPT_TTL | OPT_SHARED | OPT_LIMIT |
			  OPT_VALUE | OPT_ASYNC | OPT_DELAY | OPT_ALL,
			  "ACQUIRE <key> [SHARED | LIMIT <n>] [WAIT <ms>] "
			  "[TTL <ms>] [VALUE <text>] [DELAY <ms>] [ASYNC] | "
			  "ACQUIRE ALL <n> <key>... [WAIT <ms>] [TTL <ms>] "
			  "[ASYNC]" },
	[CMD_RELEASE] = { "RELEASE", SHAPE_KEY_OPTS, OPT_LINGER | OPT_ALL,
			  "RELEASE <key> [LINGER <ms>] | RELEASE ALL <n> "
			  "<key>..." },
	[CMD_RENEW]   = { "RENEW",   SHAPE_KEY_OPTS, OPT_TTL,
			  "RENEW <key> [TTL <ms>]" },
	[CMD_OWNER]   = { "OWNER",   SHAPE_KEY_OPTS, OPT_VFLAG,
			  "OWNER <key> [VALUE]" },
	[CMD_HELD]    = { "HELD",    SHAPE_NONE, 0, "HELD" },
	[CMD_STATS]   = { "STATS",   SHAPE_NONE, 0, "STATS" },
	[CMD_PING]    = { "PING",    SHAPE_NONE, 0, "PING" },
	[CMD_QUIT]    = { "QUIT",    SHAPE_NONE, 0, "QUIT" },
	[CMD_EVENTS]  = { "EVENTS",  SHAPE_ONOFF, 0,
			  "EVENTS ON [WANTED] | EVENTS OFF" },
	[CMD_AUTH]    = { "AUTH",    SHAPE_WORD, 0, "AUTH <token>" },
	[CMD_RESUME]  = { "RESUME",  SHAPE_WORD2, 0,
			  "RESUME <client-id> <secret>" },
	[CMD_CANCEL]  = { "CANCEL",  SHAPE_KEY, OPT_ALL,
			  "CANCEL <key> | CANCEL ALL <n> <key>..." },
	[CMD_PROCLAIM] = { "PROCLAIM", SHAPE_KEY_VALUE, 0,
			  "PROCLAIM <key> <value>" },
	[CMD_WATCH]   = { "WATCH",   SHAPE_KEY, 0, "WATCH <key>" },
	[CMD_UNWATCH] = { "UNWATCH", SHAPE_KEY, 0, "UNWATCH <key>" },
	[CMD_CHECK]   = { "CHECK",   SHAPE_KEY_TOKEN, 0,
			  "CHECK <key> <token>" },
	[CMD_SETIF]   = { "SETIF",   SHAPE_FENCED, 0,
			  "SETIF <datakey> <value> HOLDING <key> <token> "
			  "[PX <ms>|KEEPTTL]" },
	[CMD_DELIF]   = { "DELIF",   SHAPE_FENCED, 0,
			  "DELIF <datakey> HOLDING <key> <token>" },
	[CMD_LOCKS]   = { "LOCKS",   SHAPE_PAGE, OPT_GLOB,
			  "LOCKS [<glob>] [LIMIT <n>] [CURSOR <c>]" },
	[CMD_SESSIONS] = { "SESSIONS", SHAPE_PAGE, 0,
			  "SESSIONS [CURSOR <c>] [LIMIT <n>]" },
	[CMD_KILL]    = { "KILL",    SHAPE_WORD, 0, "KILL <client-id>" },
	[CMD_FREE]    = { "FREE",    SHAPE_KEY, 0, "FREE <key>" },
};

static const char *const err_names[PERR__COUNT] = {
	[PERR_NONE] = NULL,
	[PERR_BADCMD] = "BADCMD",
	[PERR_BADARG] = "BADARG",
	[PERR_TOOLONG] = "TOOLONG",
	[PERR_NOAUTH] = "NOAUTH",
	[PERR_NOTHELD] = "NOTHELD",
	[PERR_LOST] = "LOST",
	[PERR_UNAVAILABLE] = "UNAVAILABLE",
	[PERR_LIMIT] = "LIMIT",
	[PERR_NOSESSION] = "NOSESSION",
	[PERR_DENIED] = "DENIED",
};

struct word {
	const char *p;
	size_t len;
};

static int
word_is(const struct word *w, const char *lit)
{
	size_t n = strlen(lit);

	return w->len == n && strncasecmp(w->p, lit, n) == 0;
}

/* Decimal digits only, 0..PROTO_MS_MAX; returns -1 on anything else. */
static long
parse_ms(const struct word *w)
{
	long long v = 0;

	if (w->len == 0)
		return -1;
	for (size_t i = 0; i < w->len; i++) {
		if (w->p[i] < '0' || w->p[i] > '9')
			return -1;
		v = v * 10 + (w->p[i] - '0');
		if (v > PROTO_MS_MAX)	/* checked per digit: no overflow */
			return -1;
	}
	return (long)v;
}

/*
 * Split into at most MAX_WORDS words.  Returns the word count, or -1 for a
 * byte outside 0x20..0x7e (tab aside), or MAX_WORDS + 1 for too many words.
 */
static int
split(const char *line, size_t len, struct word *w)
{
	int n = 0;
	size_t i = 0;

	for (size_t j = 0; j < len; j++) {
		unsigned char c = (unsigned char)line[j];
		if ((c < 0x20 && c != '\t') || c > 0x7e)
			return -1;
	}
	while (i < len) {
		while (i < len && (line[i] == ' ' || line[i] == '\t'))
			i++;
		if (i == len)
			break;
		if (n == MAX_WORDS)
			return MAX_WORDS + 1;
		w[n].p = line + i;
		while (i < len && line[i] != ' ' && line[i] != '\t')
			i++;
		w[n].len = (size_t)(line + i - w[n].p);
		n++;
	}
	return n;
}

static enum proto_err
bad(const char **why, const char *text)
{
	*why = text;
	return PERR_BADARG;
}

static enum proto_err
parse_key(const struct word *w, const struct proto_limits *lim,
    struct proto_req *req, const char **why)
{
	size_t max = lim->max_key_len;

	if (req->cmd != CMD_ACQUIRE && req->cmd != CMD_WATCH &&
	    lim->max_held_key_len > max)
		max = lim->max_held_key_len;
	/* split() already refused bytes outside 0x20..0x7e and words hold
	 * no blanks, so only the length is left to check. */
	if (w->len > max)
		return bad(why, "key too long");
	req->key = w->p;
	req->keylen = w->len;
	return PERR_NONE;
}

/* A VALUE: one word (split() made it 0x21..0x7e) of 1..PROTO_VALUE_MAX
 * bytes. */
static enum proto_err
parse_value(const struct word *w, struct proto_req *req, const char **why)
{
	if (w->len > PROTO_VALUE_MAX)
		return bad(why, "VALUE longer than 256 bytes");
	req->value = w->p;
	req->valuelen = w->len;
	return PERR_NONE;
}

/* A token: decimal 1..2^53-1, or -1. */
static long long
parse_token(const struct word *w)
{
	long long v = 0;

	if (w->len == 0 || w->len > 16)
		return -1;
	for (size_t i = 0; i < w->len; i++) {
		if (w->p[i] < '0' || w->p[i] > '9')
			return -1;
		v = v * 10 + (w->p[i] - '0');
	}
	return v >= 1 && v <= PROTO_TOKEN_MAX ? v : -1;
}

/* LIMIT's value: decimal 1..PROTO_LIMIT_MAX (leading zeros allowed, as
 * for ms), or -1. */
static long
parse_limit(const struct word *w)
{
	long v = parse_ms(w);

	return v >= 1 && v <= PROTO_LIMIT_MAX ? v : -1;
}

static enum proto_err
parse_opts(const struct word *w, int n, unsigned allowed,
    struct proto_req *req, const char **why)
{
	for (int i = 0; i < n; i += 2) {
		unsigned opt;
		long v;

		if (word_is(&w[i], "WAIT"))
			opt = OPT_WAIT;
		else if (word_is(&w[i], "TTL"))
			opt = OPT_TTL;
		else if (word_is(&w[i], "LINGER"))
			opt = OPT_LINGER;
		else if (word_is(&w[i], "SHARED"))
			opt = OPT_SHARED;
		else if (word_is(&w[i], "LIMIT"))
			opt = OPT_LIMIT;
		else if (word_is(&w[i], "VALUE"))
			opt = (allowed & OPT_VFLAG) ? OPT_VFLAG : OPT_VALUE;
		else if (word_is(&w[i], "ASYNC"))
			opt = OPT_ASYNC;
		else if (word_is(&w[i], "DELAY"))
			opt = OPT_DELAY;
		else
			return bad(why, "unknown option");
		if (!(allowed & opt))
			return bad(why, "option not allowed here");
		if (opt == OPT_ASYNC || opt == OPT_VFLAG) {
			int *flag = opt == OPT_ASYNC ? &req->async :
			    &req->with_value;

			if (*flag)
				return bad(why, opt == OPT_ASYNC ? "ASYNC given "
				    "twice" : "VALUE given twice");
			*flag = 1;
			i--;		/* a flag: no value follows */
			continue;
		}
		if (opt == OPT_VALUE) {
			if (req->valuelen > 0)
				return bad(why, "VALUE given twice");
			if (i + 1 >= n)
				return bad(why, "VALUE needs a word of 1..256 "
				    "printable bytes");
			if (parse_value(&w[i + 1], req, why) != PERR_NONE)
				return PERR_BADARG;
			continue;
		}
		if (opt == OPT_SHARED) {
			if (req->shared)
				return bad(why, "SHARED given twice");
			if (req->limit > 0)
				return bad(why, "SHARED and LIMIT exclude "
				    "each other");
			req->shared = 1;
			i--;		/* a flag: no value follows */
			continue;
		}
		if (i + 1 >= n)
			return bad(why, opt == OPT_LIMIT ? "LIMIT needs a "
			    "number of permits" : "option needs a value in ms");
		if (opt == OPT_LIMIT) {
			if (req->limit > 0)
				return bad(why, "LIMIT given twice");
			if (req->shared)
				return bad(why, "SHARED and LIMIT exclude "
				    "each other");
			if ((req->limit = parse_limit(&w[i + 1])) < 0) {
				req->limit = 0;
				return bad(why, "LIMIT must be decimal "
				    "1..1000000");
			}
			continue;
		}
		if ((v = parse_ms(&w[i + 1])) < 0)
			return bad(why, "ms must be decimal 0..2147483647");
		if (opt == OPT_WAIT) {
			if (req->has_wait)
				return bad(why, "WAIT given twice");
			req->has_wait = 1;
			req->wait_ms = v;
		} else if (opt == OPT_DELAY) {
			if (req->has_delay)
				return bad(why, "DELAY given twice");
			req->has_delay = 1;
			req->delay_ms = v;
		} else if (opt == OPT_LINGER) {
			if (req->has_linger)
				return bad(why, "LINGER given twice");
			req->has_linger = 1;
			req->linger_ms = v;
		} else {
			if (req->has_ttl)
				return bad(why, "TTL given twice");
			if (v < 1)
				return bad(why, "TTL must be at least 1 ms");
			req->has_ttl = 1;
			req->ttl_ms = v;
		}
	}
	return PERR_NONE;
}

/*
 * 1.2's multi-key form after the verb: "ALL <n> <key>..." with n 2..64
 * and n distinct keys.  ALL is that form only when a count follows it,
 * so a key named ALL keeps working: returns 0 then (not this form), else
 * the words taken (2 + n), or -1 with *why set (a count out of 2..64).
 */
static int
parse_all(const struct word *w, int nargs, const struct proto_limits *lim,
    struct proto_req *req, const char **why)
{
	long n;

	if (nargs < 2 || !word_is(&w[0], "ALL"))
		return 0;
	n = parse_ms(&w[1]);
	if (n < 0)
		return 0;	/* a key named ALL and its options */
	if (n < PROTO_ALL_MIN || n > PROTO_ALL_MAX) {
		/* (no option is a number: no v1 line reads so) */
		*why = "ALL <n> takes 2..64 keys";
		return -1;
	}
	if (nargs < 2 + n) {
		*why = "ALL <n> takes n keys (2..64)";
		return -1;
	}
	for (long i = 0; i < n; i++) {
		if (parse_key(&w[2 + i], lim, req, why) != PERR_NONE)
			return -1;
		for (long j = 0; j < i; j++)
			if (req->keylens[j] == w[2 + i].len &&
			    memcmp(req->keys[j], w[2 + i].p, w[2 + i].len) == 0) {
				*why = "ALL names a key twice";
				return -1;
			}
		req->keys[i] = w[2 + i].p;
		req->keylens[i] = w[2 + i].len;
	}
	req->nkeys = (int)n;
	req->key = req->keys[0];
	req->keylen = req->keylens[0];
	return 2 + (int)n;
}

/* The options a request of shape SHAPE_KEY_OPTS or SHAPE_KEY may take
 * after its key, or its ALL form's keys (only WAIT, TTL and ASYNC go with
 * ALL). */
static enum proto_err
parse_after_keys(const struct word *w, int nargs, const struct cmd_def *def,
    const struct proto_limits *lim, struct proto_req *req, const char **why)
{
	int took = (def->opts & OPT_ALL) ? parse_all(w, nargs, lim, req, why) :
	    0;

	if (took < 0)
		return PERR_BADARG;
	if (took == 0) {
		if (nargs < 1)
			return bad(why, "missing key");
		if (def->shape == SHAPE_KEY && nargs != 1)
			return bad(why, "takes exactly one key");
		if (parse_key(&w[0], lim, req, why) != PERR_NONE)
			return PERR_BADARG;
		took = 1;
	}
	if (parse_opts(&w[took], nargs - took, def->opts & ~OPT_ALL, req,
	    why) != PERR_NONE)
		return PERR_BADARG;
	if (req->nkeys > 0 && (req->shared || req->limit > 0 ||
	    req->valuelen > 0 || req->has_delay || req->has_linger))
		return bad(why, "only WAIT, TTL and ASYNC go with ALL");
	if (req->valuelen > 0 && (req->shared || req->limit > 0))
		return bad(why, "VALUE is for exclusive holds: not with "
		    "SHARED or LIMIT");
	if (req->has_delay && (req->shared || req->limit > 0))
		return bad(why, "DELAY is for exclusive holds: not with "
		    "SHARED or LIMIT");
	return PERR_NONE;
}

/*
 * SETIF <datakey> <value> HOLDING <key> <token> [PX <ms>|KEEPTTL]
 * DELIF <datakey> HOLDING <key> <token>
 * w: the words after the verb, n of them.  The data key is a new key
 * (max_key_len); the lock key one that may have been taken under a larger
 * limit (max_held_key_len), as CHECK's.
 */
static enum proto_err
parse_fenced(const struct word *w, int n, const struct proto_limits *lim,
    struct proto_req *req, const char **why)
{
	int setif = req->cmd == CMD_SETIF, i = setif ? 2 : 1;
	long v;

	if (n < i + 3 || !word_is(&w[i], "HOLDING"))
		return bad(why, setif ? "takes <datakey> <value> HOLDING <key> "
		    "<token> [PX <ms>|KEEPTTL]" : "takes <datakey> HOLDING "
		    "<key> <token>");
	if (w[0].len > lim->max_key_len)
		return bad(why, "data key too long");
	req->datakey = w[0].p;
	req->datakeylen = w[0].len;
	if (setif) {
		/* one word: split() made it 1.. bytes of 0x21..0x7e */
		if (w[1].len > PROTO_DATA_MAX)
			return bad(why, "value longer than 1024 bytes");
		req->data = w[1].p;
		req->datalen = w[1].len;
	}
	if (parse_key(&w[i + 1], lim, req, why) != PERR_NONE)
		return PERR_BADARG;
	if ((req->token = parse_token(&w[i + 2])) < 0)
		return bad(why, "token must be decimal 1..2^53-1");
	i += 3;
	if (i == n)
		return PERR_NONE;
	if (!setif)
		return bad(why, "DELIF takes no option");
	if (word_is(&w[i], "KEEPTTL") && i + 1 == n) {
		req->keepttl = 1;
		return PERR_NONE;
	}
	if (!word_is(&w[i], "PX"))
		return bad(why, word_is(&w[i], "KEEPTTL") ? "PX and KEEPTTL "
		    "exclude each other, and come once" : "unknown option "
		    "(PX <ms> or KEEPTTL)");
	if (i + 1 == n || (v = parse_ms(&w[i + 1])) < 1)
		return bad(why, "PX must be decimal 1..2147483647 ms");
	if (i + 2 != n)
		return bad(why, "PX and KEEPTTL exclude each other, and come "
		    "once");
	req->has_px = 1;
	req->px_ms = v;
	return PERR_NONE;
}

/*
 * The admin listings' words (LOCKS, SESSIONS): a glob first when the
 * command takes one and the count of words is odd (so a glob may be
 * called LIMIT or CURSOR, as a session may be called GRACE), then LIMIT
 * <n> (1..PROTO_PAGE_MAX) and CURSOR <c> (a word of at most
 * PROTO_CURSOR_MAX bytes, read by the broker), in any order, each once.
 */
static enum proto_err
parse_page(const struct word *w, int n, unsigned allowed,
    struct proto_req *req, const char **why)
{
	int i = 0;

	if ((allowed & OPT_GLOB) && n % 2 == 1) {
		if (w[0].len > PROTO_GLOB_MAX)
			return bad(why, "glob longer than 1024 bytes");
		req->word = w[0].p;
		req->wordlen = w[0].len;
		i = 1;
	}
	for (; i < n; i += 2) {
		if (i + 1 >= n)
			return bad(why, (allowed & OPT_GLOB) ? "takes [<glob>] "
			    "[LIMIT <n>] [CURSOR <c>]" : "takes [CURSOR <c>] "
			    "[LIMIT <n>]");
		if (word_is(&w[i], "LIMIT")) {
			long v = parse_ms(&w[i + 1]);

			if (req->limit > 0)
				return bad(why, "LIMIT given twice");
			if (v < 1 || v > PROTO_PAGE_MAX)
				return bad(why, "LIMIT must be decimal 1..100");
			req->limit = v;
		} else if (word_is(&w[i], "CURSOR")) {
			if (req->word2 != NULL)
				return bad(why, "CURSOR given twice");
			if (w[i + 1].len > PROTO_CURSOR_MAX)
				return bad(why, "CURSOR longer than 64 bytes");
			req->word2 = w[i + 1].p;
			req->word2len = w[i + 1].len;
		} else {
			return bad(why, "unknown option");
		}
	}
	return PERR_NONE;
}

enum proto_err
proto_parse(const char *line, size_t len, const struct proto_limits *lim,
    struct proto_req *req, int *empty, const char **why)
{
	struct word w[MAX_WORDS];
	const struct cmd_def *def = NULL;
	int n, nargs;

	memset(req, 0, sizeof *req);
	*empty = 0;
	*why = "";
	n = split(line, len, w);
	if (n < 0)
		return bad(why, "line has bytes outside printable ASCII");
	if (n == 0) {
		*empty = 1;
		return PERR_NONE;
	}
	for (int c = 0; c < CMD__COUNT; c++) {
		if (word_is(&w[0], cmds[c].name)) {
			def = &cmds[c];
			req->cmd = (enum proto_cmd)c;
			break;
		}
	}
	if (def == NULL) {
		*why = "unknown command";
		return PERR_BADCMD;
	}
	if (n > MAX_WORDS)
		return bad(why, "too many arguments");
	nargs = n - 1;
	switch (def->shape) {
	case SHAPE_NONE:
		if (nargs != 0)
			return bad(why, "takes no arguments");
		return PERR_NONE;
	case SHAPE_HELLO:
		/* GRACE is an option only as the word before the last: a
		 * session may still be named "GRACE" */
		if (nargs >= 2 && word_is(&w[nargs - 1], "GRACE")) {
			if ((req->grace_ms = parse_ms(&w[nargs])) < 0)
				return bad(why, "GRACE must be decimal "
				    "0..2147483647 ms");
			req->has_grace = 1;
			nargs -= 2;
		}
		/* FALLTHROUGH */
	case SHAPE_WORD:
		if (nargs > 1 || (def->shape == SHAPE_WORD && nargs == 0))
			return bad(why, def->shape == SHAPE_WORD ?
			    "takes one argument" : "takes at most a name and "
			    "GRACE <ms>");
		if (nargs == 1) {
			if (w[1].len > PROTO_NAME_MAX)
				return bad(why, "argument too long");
			req->word = w[1].p;
			req->wordlen = w[1].len;
		}
		return PERR_NONE;
	case SHAPE_WORD2:
		if (nargs != 2)
			return bad(why, "takes two arguments");
		if (w[1].len > PROTO_NAME_MAX || w[2].len > PROTO_NAME_MAX)
			return bad(why, "argument too long");
		req->word = w[1].p;
		req->wordlen = w[1].len;
		req->word2 = w[2].p;
		req->word2len = w[2].len;
		return PERR_NONE;
	case SHAPE_KEY:
	case SHAPE_KEY_OPTS:
		return parse_after_keys(&w[1], nargs, def, lim, req, why);
	case SHAPE_KEY_VALUE:
		if (nargs != 2)
			return bad(why, "takes a key and a value");
		if (parse_key(&w[1], lim, req, why) != PERR_NONE)
			return PERR_BADARG;
		return parse_value(&w[2], req, why);
	case SHAPE_KEY_TOKEN:
		if (nargs != 2)
			return bad(why, "takes a key and a token");
		if (parse_key(&w[1], lim, req, why) != PERR_NONE)
			return PERR_BADARG;
		if ((req->token = parse_token(&w[2])) < 0)
			return bad(why, "token must be decimal 1..2^53-1");
		return PERR_NONE;
	case SHAPE_FENCED:
		return parse_fenced(&w[1], nargs, lim, req, why);
	case SHAPE_PAGE:
		return parse_page(&w[1], nargs, def->opts, req, why);
	case SHAPE_ONOFF:
		if (nargs == 2 && word_is(&w[1], "ON") &&
		    word_is(&w[2], "WANTED")) {
			/* 1.2: and notices of waiters (EVENT WANTED) */
			req->on = 1;
			req->wanted = 1;
			return PERR_NONE;
		}
		if (nargs != 1)
			return bad(why, "takes ON [WANTED] or OFF");
		if (word_is(&w[1], "ON"))
			req->on = 1;
		else if (word_is(&w[1], "OFF"))
			req->on = 0;
		else
			return bad(why, "takes ON or OFF");
		return PERR_NONE;
	}
	return bad(why, "internal: unknown shape");
}

const char *
proto_cmd_name(enum proto_cmd cmd)
{
	return (unsigned)cmd < CMD__COUNT ? cmds[cmd].name : "?";
}

const char *
proto_err_name(enum proto_err err)
{
	return (unsigned)err < PERR__COUNT ? err_names[err] : "?";
}

const struct proto_cmd_info *
proto_cmd_info(enum proto_cmd cmd)
{
	static struct proto_cmd_info info;

	if ((unsigned)cmd >= CMD__COUNT)
		return NULL;
	info.name = cmds[cmd].name;
	info.usage = cmds[cmd].usage;
	return &info;
}
