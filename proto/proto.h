/*
 * proto.h - the lockbroker line protocol, parsed without any I/O.
 *
 * proto_parse() turns one request line (LF and CR already stripped) into a
 * struct proto_req.  It knows libc only: no libevent, no Redis, no sessions,
 * so unit tests and the fuzzer can call it millions of times.  The command
 * table (name, arity, help) lives in proto.c and is walked by the parser and
 * by anything that lists commands.
 */
#ifndef LOCKBROKER_PROTO_H
#define LOCKBROKER_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION "1"
#define PROTO_MS_MAX 2147483647L	/* largest WAIT/TTL value accepted */
#define PROTO_NAME_MAX 64		/* longest HELLO name / AUTH token word */
#define PROTO_LIMIT_MAX 1000000L	/* most permits a LIMIT may give */
#define PROTO_VALUE_MAX 256		/* 1.2: longest VALUE, bytes */
#define PROTO_TOKEN_MAX 9007199254740991LL	/* 2^53-1: CHECK's token */
#define PROTO_ALL_MIN 2			/* 1.2: ACQUIRE ALL <n>: 2..64 keys */
#define PROTO_ALL_MAX 64
#define PROTO_DATA_MAX 1024		/* 1.2: longest SETIF value, bytes */
#define PROTO_PAGE_MAX 100		/* admin LOCKS, SESSIONS: most entries
					 * a reply holds (LIMIT, its default) */
#define PROTO_CURSOR_MAX 64		/* admin: longest CURSOR word */
#define PROTO_GLOB_MAX 1024		/* admin LOCKS: longest glob (an
					 * access list's pattern) */

enum proto_cmd {
	CMD_HELLO,
	CMD_ACQUIRE,
	CMD_RELEASE,
	CMD_RENEW,
	CMD_OWNER,
	CMD_HELD,
	CMD_STATS,
	CMD_PING,
	CMD_QUIT,
	CMD_EVENTS,
	CMD_AUTH,
	CMD_RESUME,			/* 1.1 */
	CMD_CANCEL,			/* 1.2: withdraw an ASYNC wait */
	CMD_PROCLAIM,			/* 1.2: a new VALUE for a hold */
	CMD_WATCH,			/* 1.2: events on a key's holders */
	CMD_UNWATCH,			/* 1.2 */
	CMD_CHECK,			/* 1.2: is a token's hold alive? */
	CMD_SETIF,			/* 1.2: a write fenced by a hold */
	CMD_DELIF,			/* 1.2: a delete fenced by a hold */
	CMD_LOCKS,			/* 1.2 admin: who holds what, paged */
	CMD_SESSIONS,			/* 1.2 admin: this broker's sessions */
	CMD_KILL,			/* 1.2 admin: end a session anywhere */
	CMD_FREE,			/* 1.2 admin: free every hold of a key */
	CMD__COUNT
};

/* The closed set of error codes a reply can carry (ERR <CODE> <text>). */
enum proto_err {
	PERR_NONE = 0,
	PERR_BADCMD,
	PERR_BADARG,
	PERR_TOOLONG,
	PERR_NOAUTH,
	PERR_NOTHELD,
	PERR_LOST,
	PERR_UNAVAILABLE,
	PERR_LIMIT,
	PERR_NOSESSION,			/* 1.1: RESUME of an unknown session */
	PERR_DENIED,			/* 1.1: a key outside the app's patterns */
	PERR__COUNT
};

/*
 * Key limits.  A lowered max_key_len (SIGHUP) applies to new keys only:
 * a session must still be able to RELEASE, RENEW and ask OWNER of a longer
 * key it took before (it can always give back what it took).
 */
struct proto_limits {
	size_t max_key_len;		/* ACQUIRE: longest new key, bytes */
	size_t max_held_key_len;	/* RELEASE, RENEW, OWNER (0: as above) */
};

/*
 * A parsed request.  Pointers point into the caller's line buffer, which
 * must outlive the request.  has_* say whether an option was given.
 */
struct proto_req {
	enum proto_cmd cmd;
	const char *key;		/* ACQUIRE, RELEASE, RENEW, OWNER */
	size_t keylen;
	const char *word;		/* HELLO name, AUTH token, RESUME
					 * client-id, KILL's, LOCKS glob (may
					 * be NULL) */
	size_t wordlen;
	const char *word2;		/* RESUME secret, admin CURSOR */
	size_t word2len;
	const char *value;		/* 1.2: ACQUIRE ... VALUE, PROCLAIM's */
	size_t valuelen;		/* 0: none given */
	int async;			/* 1.2: ACQUIRE ... ASYNC */
	int with_value;			/* 1.2: OWNER <key> VALUE */
	long long token;		/* 1.2: CHECK's token; SETIF's, DELIF's
					 * (of the hold on key) */
	const char *datakey;		/* 1.2: SETIF, DELIF: the key written */
	size_t datakeylen;
	const char *data;		/* 1.2: SETIF's value */
	size_t datalen;
	int has_px, keepttl;		/* 1.2: SETIF ... PX <ms> | KEEPTTL */
	long px_ms;
	int has_wait, has_ttl, has_grace, has_linger, has_delay;
	long wait_ms, ttl_ms, grace_ms, linger_ms;
	long delay_ms;			/* 1.2: ACQUIRE ... DELAY <ms> */
	int on;				/* EVENTS ON (1) / OFF (0) */
	int wanted;			/* 1.2: EVENTS ON WANTED */
	/* 1.2: ACQUIRE ALL <n> <key>..., RELEASE ALL ..., CANCEL ALL ...:
	 * nkeys (0: the one-key form) distinct keys, key/keylen the first */
	int nkeys;
	const char *keys[PROTO_ALL_MAX];
	size_t keylens[PROTO_ALL_MAX];
	int shared;			/* 1.1: ACQUIRE ... SHARED */
	long limit;			/* 1.1: ACQUIRE ... LIMIT n; admin
					 * LOCKS, SESSIONS ... LIMIT n (0:
					 * none) */
};

/*
 * Parse one line of len bytes (no LF; a trailing CR is the caller's to
 * drop).  Returns PERR_NONE and fills req, or an error code with *why set
 * to a static, human-readable reason.  An empty or blank line returns
 * PERR_NONE with *empty set to 1: it gets no reply.
 */
enum proto_err proto_parse(const char *line, size_t len,
    const struct proto_limits *lim, struct proto_req *req, int *empty,
    const char **why);

/* The upper-case name of a command ("ACQUIRE"). */
const char *proto_cmd_name(enum proto_cmd cmd);

/* The upper-case code word of an error ("BADARG"), or NULL for PERR_NONE. */
const char *proto_err_name(enum proto_err err);

/* Walk the command table: name and one-line usage, for help and docs tests. */
struct proto_cmd_info {
	const char *name;
	const char *usage;
};
const struct proto_cmd_info *proto_cmd_info(enum proto_cmd cmd);

#endif
