/*
 * parse.h - lockctl's pure parsers and builders (no I/O, no exit): the
 * values of its options (numbers, host:port, words), the words after
 * them (which mode: KEY -- CMD, elect, watch, owner, stats, ping, and
 * the admin view's locks, kill, free), and
 * the lines it speaks (ACQUIRE built; OK, fencing tokens, EVENT lines
 * read).  tests/unit/test_lockctl.c covers them.
 */
#ifndef LOCKCTL_PARSE_H
#define LOCKCTL_PARSE_H

#include <stddef.h>

#define LINE_MAX_LEN	65536		/* longest reply line: a LOCKS page
					   stays under 64 KiB, CR LF included */
#define REQ_MAX_LEN	4096		/* longest request line we build */
#define FENCE_MAX_LEN	20		/* digits in a fencing token (2^64) */
#define KEY_MAX_LEN	(REQ_MAX_LEN - 64)	/* room left for the options */
#define VALUE_MAX_LEN	256		/* ACQUIRE ... VALUE <text> (1.2) */

/* Decimal digits only, min..max; 0 on success, -1 otherwise. */
int parse_num(const char *s, long long min, long long max, long long *out);
/* A protocol word: 1..max bytes of 0x21..0x7e, so it cannot split a line. */
int is_word(const char *s, size_t max);
/*
 * Split "host", "host:port", "[v6]" or "[v6]:port" (a bare address with
 * two or more colons is IPv6 without a port).  port is left alone when s
 * has none.  Returns -1 with *why set on a malformed address.
 */
int parse_hostport(const char *s, char *host, size_t hostlen, char *port,
    size_t portlen, const char **why);
/*
 * A token file's len bytes in tok (room for len + 1): the blanks and line
 * ends at its end dropped, NUL-terminated.  Returns the length left.
 */
size_t token_trim(char *tok, size_t len);

/* What lockctl was asked to do: the words after the options. */
enum lc_mode {
	MODE_RUN,			/* KEY -- CMD: run CMD under the lock */
	MODE_ELECT,			/* elect KEY -- CMD: run CMD while leader */
	MODE_WATCH,			/* watch KEY: print its holder changes */
	MODE_OWNER,			/* owner KEY */
	MODE_STATS,			/* stats */
	MODE_PING,			/* ping */
	MODE_LOCKS,			/* locks [GLOB]: every page of LOCKS */
	MODE_KILL,			/* kill CLIENT-ID */
	MODE_FREE			/* free KEY */
};

struct lc_args {
	enum lc_mode mode;
	const char *key;		/* NULL for stats and ping (and locks
					   without a GLOB); kill's CLIENT-ID,
					   locks' GLOB */
	char **cmd;			/* CMD [ARGS...], NULL-terminated; NULL
					   but for run and elect */
};

/*
 * Read the nargs words of argv (NULL-terminated) left after the options.
 * A first word followed directly by "--" is always a KEY, so a lock may
 * be called "elect" or "stats"; otherwise a subcommand's name picks it.
 * Returns 0, or -1 with *why a usage message.
 */
int parse_args(int nargs, char **argv, struct lc_args *a, const char **why);
/*
 * Options that the mode a does not take: --shared and --limit (limit > 0)
 * are for KEY -- CMD only, --value (value != NULL) for elect only.  NULL
 * when they fit, else the usage message.
 */
const char *args_conflict(const struct lc_args *a, int shared,
    long long limit, const char *value);

/*
 * The ACQUIRE line for key: "ACQUIRE KEY [SHARED | LIMIT n] [WAIT ms]
 * [TTL ms] [DELAY ms] [VALUE text]" (limit, wait_ms, ttl_ms, delay_ms: 0
 * when not given; value: NULL).  Returns 0, or -1 when it does not fit in
 * len bytes.
 */
int acquire_line(char *req, size_t len, const char *key, int shared,
    long long limit, long long wait_ms, long long ttl_ms, long long delay_ms,
    const char *value);
/* Is reply "OK" or "OK ..."? */
int reply_ok(const char *reply);
/* The fencing token of ACQUIRE's "OK <token>" (reply_ok already) into
 * token (FENCE_MAX_LEN + 1 bytes): 0, or -1 when it has none. */
int reply_token(const char *reply, char *token);
/*
 * A page of the admin view's LOCKS: "OK <cursor> <n>" then n entries of 9
 * words (PAGE_WORDS).  Splits reply in place: *cursor and each of the n
 * entries (at most PAGE_MAX, into entries) become NUL-ended strings
 * within it.  0, or -1 when reply is not such a page (an ERR, or words
 * that do not add up).
 */
#define PAGE_WORDS 9
#define PAGE_MAX 100
int locks_page(char *reply, char **cursor, char **entries, size_t *n);
/* Is line unsolicited ("EVENT ...")? */
int is_event(const char *line);
/* Is line "EVENT LOST <key> <token>" for key? */
int event_lost(const char *line, const char *key);
/*
 * What watch prints of an event line: the text after "EVENT " ("HOLDER
 * k <client-id> <token> <value|->", "FREE k", ...), or NULL when line is
 * no event.
 */
const char *event_text(const char *line);

#endif
