/*
 * cmd.h - what lockctl asks the broker: AUTH, one query (owner KEY, stats,
 * ping), the admin view (locks, kill, free), KEY -- CMD or elect KEY -- CMD: acquire KEY, run CMD under it
 * (child.c), give it back; or watch KEY: print its events.  Each returns
 * lockctl's exit status or exits (die).
 */
#ifndef LOCKCTL_CMD_H
#define LOCKCTL_CMD_H

#include "conn.h"

struct opts {
	struct target target;
	long long wait_ms;		/* -w */
	long long ttl_ms;		/* -t, 0 when not given */
	long long busy_code;		/* -E */
	long long grace_s;		/* -k */
	long long hold_ms;		/* --hold-at-least, 0 when not given */
	long long delay_ms;		/* --delay, 0 when not given */
	int shared;			/* --shared */
	long long limit;		/* --limit, 0 when not given */
	const char *value;		/* --value (elect), NULL when not given */
	const char *auth_file;		/* -a */
};

/* AUTH with the token from path; exits 1 if it cannot be read or fails. */
void cmd_auth(struct conn *c, const char *path);
/* owner KEY, stats, ping, and the admin view's kill CLIENT-ID and free
 * KEY: one request, its reply on stdout (0), or any other reply on stderr
 * (err_status: 1, or for kill and free EX_SOFTWARE, 70). */
int cmd_query(struct conn *c, const char *req, int err_status);
/* locks [GLOB]: every page of LOCKS, one holder per line on stdout. */
int cmd_locks(struct conn *c, const char *glob);
/*
 * Acquire KEY and run CMD under it: KEY -- CMD, and elect KEY -- CMD,
 * which is the same exclusive hold with o->value as the leader's value.
 * Returns lockctl's exit status.
 */
int cmd_locked(struct conn *c, const struct opts *o, const char *key,
    char **cmd);
/*
 * watch KEY: WATCH it and print each event's text on stdout, a line at a
 * time, until SIGINT or SIGTERM (QUIT, then 0; another signal N that
 * lockctl catches: 128+N) or the end of the connection (exits 1).
 */
int cmd_watch(struct conn *c, const char *key);

#endif
