/*
 * parse.c - lockctl's pure parsers and builders: see parse.h.
 */
#include "parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int
parse_num(const char *s, long long min, long long max, long long *out)
{
	long long v = 0;
	size_t i;

	if (s == NULL || s[0] == '\0' || strlen(s) > 18)
		return -1;
	for (i = 0; s[i] != '\0'; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	if (v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int
is_word(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

int
parse_hostport(const char *s, char *host, size_t hostlen, char *port,
    size_t portlen, const char **why)
{
	const char *h = s, *p = NULL, *colon;
	size_t hl;
	long long v;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (close == NULL) {
			*why = "missing ']'";
			return -1;
		}
		h = s + 1;
		hl = (size_t)(close - h);
		if (close[1] == ':')
			p = close + 2;
		else if (close[1] != '\0') {
			*why = "junk after ']'";
			return -1;
		}
	} else if ((colon = strchr(s, ':')) != NULL &&
	    strchr(colon + 1, ':') == NULL) {
		hl = (size_t)(colon - s);
		p = colon + 1;
	} else
		hl = strlen(s);
	if (hl == 0) {
		*why = "empty host";
		return -1;
	}
	if (hl >= hostlen) {
		*why = "host name too long";
		return -1;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	if (p != NULL) {
		if (parse_num(p, 1, 65535, &v) < 0) {
			*why = "port must be a number 1..65535";
			return -1;
		}
		snprintf(port, portlen, "%lld", v);
	}
	return 0;
}

size_t
token_trim(char *tok, size_t len)
{
	while (len > 0 && (tok[len - 1] == '\n' || tok[len - 1] == '\r' ||
	    tok[len - 1] == ' ' || tok[len - 1] == '\t'))
		len--;
	tok[len] = '\0';
	return len;
}

/*
 * The words after the subcommands' names: what each takes, and the usage
 * message when the words do not fit.  One row per subcommand; a first
 * word that names none is a KEY.
 */
static const struct subcmd {
	const char *name;
	enum lc_mode mode;
	int takes_key;			/* a KEY after the name (2: optional) */
	int takes_cmd;			/* then -- CMD [ARGS...] */
	const char *usage;
} subcmds[] = {
	{ "elect", MODE_ELECT, 1, 1, "elect takes KEY -- CMD" },
	{ "watch", MODE_WATCH, 1, 0, "watch takes one KEY" },
	{ "owner", MODE_OWNER, 1, 0, "owner takes one KEY" },
	{ "stats", MODE_STATS, 0, 0, "stats takes no arguments" },
	{ "ping", MODE_PING, 0, 0, "ping takes no arguments" },
	{ "locks", MODE_LOCKS, 2, 0, "locks takes at most one GLOB" },
	{ "kill", MODE_KILL, 1, 0, "kill takes one CLIENT-ID" },
	{ "free", MODE_FREE, 1, 0, "free takes one KEY" },
};

/*
 * "KEY -- CMD [ARGS...]" from w (n words): the key, and CMD after the
 * "--" the caller saw at w[1].
 */
static int
key_cmd(int n, char **w, struct lc_args *a, const char **why)
{
	if (n < 3) {
		*why = "missing CMD after --";
		return -1;
	}
	a->key = w[0];
	a->cmd = w + 2;
	return 0;
}

int
parse_args(int nargs, char **argv, struct lc_args *a, const char **why)
{
	const struct subcmd *sc = NULL;
	size_t i;

	memset(a, 0, sizeof *a);
	if (nargs < 1) {
		*why = "missing KEY";
		return -1;
	}
	for (i = 0; i < sizeof subcmds / sizeof subcmds[0]; i++)
		if (strcmp(argv[0], subcmds[i].name) == 0)
			sc = &subcmds[i];
	/* "KEY -- CMD" wins, so a lock may be called "elect" or "stats". */
	if (nargs >= 2 && strcmp(argv[1], "--") == 0) {
		a->mode = MODE_RUN;
		if (key_cmd(nargs, argv, a, why) < 0)
			return -1;
	} else if (sc == NULL) {
		*why = nargs == 1 ? "missing -- CMD after KEY" :
		    "missing -- between KEY and CMD";
		return -1;
	} else if (sc->takes_cmd) {
		a->mode = sc->mode;
		if (nargs < 2) {
			*why = sc->usage;
			return -1;
		}
		if (nargs < 3 || strcmp(argv[2], "--") != 0) {
			*why = nargs == 2 ? "missing -- CMD after KEY" :
			    "missing -- between KEY and CMD";
			return -1;
		}
		if (key_cmd(nargs - 1, argv + 1, a, why) < 0)
			return -1;
	} else {
		a->mode = sc->mode;
		if (sc->takes_key == 2 ? nargs > 2 :
		    nargs != 1 + sc->takes_key) {
			*why = sc->usage;
			return -1;
		}
		a->key = sc->takes_key && nargs == 2 ? argv[1] : NULL;
	}
	if (a->key != NULL && !is_word(a->key, KEY_MAX_LEN)) {
		*why = a->mode == MODE_KILL ? "CLIENT-ID must be printable "
		    "ASCII without blanks" : a->mode == MODE_LOCKS ? "GLOB must "
		    "be printable ASCII without blanks" : "KEY must be "
		    "printable ASCII without blanks";
		return -1;
	}
	return 0;
}

const char *
args_conflict(const struct lc_args *a, int shared, long long limit,
    const char *value)
{
	if (shared && a->mode != MODE_RUN)
		return "--shared is for KEY -- CMD only";
	if (limit > 0 && a->mode != MODE_RUN)
		return "--limit is for KEY -- CMD only";
	if (value != NULL && a->mode != MODE_ELECT)
		return "--value is for elect only";
	return NULL;
}

static int line_add(char *req, size_t len, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Append to the line at req (used: *n bytes of len) what fmt says; -1
 * once it no longer fits (req then holds a truncated line).
 */
static int
line_add(char *req, size_t len, size_t *n, const char *fmt, ...)
{
	va_list ap;
	int r;

	if (*n >= len)
		return -1;
	va_start(ap, fmt);
	r = vsnprintf(req + *n, len - *n, fmt, ap);
	va_end(ap);
	if (r < 0 || (size_t)r >= len - *n)
		return -1;
	*n += (size_t)r;
	return 0;
}

int
acquire_line(char *req, size_t len, const char *key, int shared,
    long long limit, long long wait_ms, long long ttl_ms, long long delay_ms,
    const char *value)
{
	size_t n = 0;

	if (len == 0 || line_add(req, len, &n, "ACQUIRE %s", key) < 0)
		return -1;
	if (shared && line_add(req, len, &n, " SHARED") < 0)
		return -1;
	if (!shared && limit > 0 &&
	    line_add(req, len, &n, " LIMIT %lld", limit) < 0)
		return -1;
	if (wait_ms > 0 && line_add(req, len, &n, " WAIT %lld", wait_ms) < 0)
		return -1;
	if (ttl_ms > 0 && line_add(req, len, &n, " TTL %lld", ttl_ms) < 0)
		return -1;
	if (delay_ms > 0 &&
	    line_add(req, len, &n, " DELAY %lld", delay_ms) < 0)
		return -1;
	if (value != NULL && line_add(req, len, &n, " VALUE %s", value) < 0)
		return -1;
	return 0;
}

int
reply_ok(const char *reply)
{
	return strncmp(reply, "OK", 2) == 0 &&
	    (reply[2] == '\0' || reply[2] == ' ');
}

int
reply_token(const char *reply, char *token)
{
	if (strlen(reply) < 4 || strlen(reply + 3) > FENCE_MAX_LEN ||
	    strspn(reply + 3, "0123456789") != strlen(reply + 3))
		return -1;
	memcpy(token, reply + 3, strlen(reply + 3) + 1);
	return 0;
}

/* The next word of *p (blanks are single spaces), NUL-ended in place;
 * NULL when none is left. */
static char *
next_word(char **p)
{
	char *w = *p, *sp;

	if (w == NULL || *w == '\0')
		return NULL;
	if ((sp = strchr(w, ' ')) != NULL) {
		*sp = '\0';
		*p = sp + 1;
	} else {
		*p = w + strlen(w);
	}
	return w;
}

int
locks_page(char *reply, char **cursor, char **entries, size_t *n)
{
	char *p = reply, *w;
	long long count;

	if ((w = next_word(&p)) == NULL || strcmp(w, "OK") != 0 ||
	    (*cursor = next_word(&p)) == NULL || (w = next_word(&p)) ==
	    NULL || parse_num(w, 0, PAGE_MAX, &count) < 0)
		return -1;
	*n = 0;
	for (long long i = 0; i < count; i++) {
		char *start = p;

		for (int k = 0; k < PAGE_WORDS; k++) {
			if ((w = next_word(&p)) == NULL)
				return -1;
			if (k > 0)
				w[-1] = ' ';	/* the entry's own blanks */
		}
		entries[(*n)++] = start;
	}
	return *p == '\0' ? 0 : -1;
}

int
is_event(const char *line)
{
	return strncmp(line, "EVENT ", 6) == 0;
}

int
event_lost(const char *line, const char *key)
{
	char k[REQ_MAX_LEN];
	char token[FENCE_MAX_LEN + 2];

	return sscanf(line, "EVENT LOST %4095s %21s", k, token) == 2 &&
	    strcmp(k, key) == 0;
}

const char *
event_text(const char *line)
{
	return is_event(line) ? line + 6 : NULL;
}
