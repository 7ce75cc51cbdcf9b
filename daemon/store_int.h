/*
 * store_int.h - what the two halves of the store share, and nothing else
 * includes: store.c (the lock scripts in lock terms: script calls, the
 * in-flight cap and queue, replica acknowledgement) and store_conn.c (the
 * Redis connections: connect, handshake and tenure, reconnect with
 * backoff, timeouts, following the master in Sentinel mode, pub/sub).
 */
#ifndef LOCKBROKER_STORE_INT_H
#define LOCKBROKER_STORE_INT_H

#include "store.h"
#include "addr.h"
#include "scripts.h"

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include <event2/event.h>
#include <stdint.h>

struct sentinel;

/* Replication ids of earlier tenures remembered: a master showing one is
 * a stale old master that woke up (ids are never reused). */
#define STORE_LEFT_MAX 8

#define ROLE_CHECK_MS 1000		/* is the master still one? */
#define ERROR_LOG_MS 10000		/* quiet time between error logs */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000

enum conn_state { C_DOWN, C_CONNECTING, C_HANDSHAKE, C_UP };

struct conn {
	struct store *st;
	const char *name;		/* "command" / "subscriber" */
	int subscriber;
	enum conn_state state;
	redisAsyncContext *ac;
	struct event *retry_ev;		/* reconnect after backoff */
	struct event *timeout_ev;	/* connect/handshake deadline */
	struct event *kill_ev;		/* deferred teardown */
	const char *kill_why;
	long backoff_ms;
	int handshake_left;		/* replies still awaited */
	int failing;			/* failed since last up: log quietly */
	int refused;			/* this context's handshake was refused */
	int resolving;			/* Sentinel mode: asking for the master */
	int dying;			/* hiredis is failing its callbacks: a
					 * peer close runs them before
					 * onDisconnect, so "up" is a lie */
	char last_refusal[160];		/* logged once until it changes */
	char addrstr[ADDR_HOST_LEN + 16];	/* where this context goes */
	char replid[64];		/* INFO's master_replid, handshake */
};

/*
 * Replica acknowledgement as a group commit: every grant script sent in
 * one event-loop turn joins the open group, and one WAIT sent at the end
 * of the turn (ack_ev) covers them all.  A grant's reply is parked until
 * that WAIT answers.  refs: the WAIT (until its reply, or until it turns
 * out it cannot be sent) plus each member whose reply has not come.
 */
struct ackgroup {
	struct store *st;
	struct cmd *parked;		/* granted, waiting for the WAIT */
	unsigned refs;
	int sent;			/* the WAIT is on the wire */
};

struct store {
	struct event_base *base;
	struct store_cfg cfg;		/* strings owned below */
	char *addr, *password, *user;
	char *lockpfx;			/* "<prefix>:lock:" */
	size_t lockpfxlen;
	char *fence;			/* "<prefix>:fence" */
	char *channel;			/* "<prefix>:released" */
	char *wanted;			/* "<prefix>:wanted" */
	char *tenure;			/* "<prefix>:tenure" */
	char *delay;			/* "<prefix>:lockdelay" */
	struct sentinel *sent;		/* Sentinel mode; NULL: one address */
	char replid[64];		/* the master's replication id now */
	char left[STORE_LEFT_MAX][64];	/* ids of tenures this broker left */
	unsigned nleft;
	uint64_t tenures;		/* replication ids seen */
	struct event *role_ev;		/* is it still the master? */
	struct ackgroup *agroup;	/* grants of this turn, WAIT to come */
	struct event *ack_ev;
	uint64_t acks_missed;		/* grants undone: WAIT fell short */
	int64_t errlog_ms;		/* last error reply logged */
	uint64_t errlog_quiet;		/* error replies not logged since */
	int freeing;
	char idsp[STORE_ID_LEN + 2];	/* "<broker-id> ": wanted messages */
	struct store_hooks hooks;
	struct conn cmd, sub;
	struct event *watchdog_ev;	/* checks the oldest command's age */
	size_t inflight;
	struct cmd *qhead, *qtail;	/* waiting for a place in flight */
	size_t queued;
	int64_t last_progress_ms;
	uint64_t reconnects;
	char *host;			/* parsed addr */
	int port;
	int is_unix;
};

/* One piece of an argument: p1 followed by p2 (either may be empty). */
struct piece {
	const char *p1;
	size_t l1;
	const char *p2;
	size_t l2;
};

enum cmd_kind { K_ACQUIRE, K_RELEASE, K_RENEW, K_OWNER, K_UNDO };

/* A script call in flight.  Owned by hiredis's callback from send on. */
struct cmd {
	struct store *st;
	struct cmd *qnext;		/* in the store's queue */
	enum cmd_kind kind;
	enum script_id script;
	int retried;
	int argc;
	const char **argv;
	size_t *argvlen;
	union cmd_fn {
		store_acquire_fn *acquire;
		store_release_fn *release;
		store_renew_fn *renew;
		store_owner_fn *owner;
	} fn;
	void *arg;
	size_t nrenew;
	struct ackgroup *group;		/* a grant waiting for replica acks */
	struct cmd *gnext;		/* parked in group */
	int owner_arg;			/* argv index of the owner (grants) */
	long long token;		/* parked: the token granted */
};

/* The command connection takes commands (not up, or tearing down: no). */
static inline int
store_cmd_usable(const struct store *st)
{
	return st->cmd.state == C_UP && !st->cmd.dying;
}

/* store_conn.c */
int sconn_parse_addr(struct store *st);
int sconn_timer_add_ms(struct event *ev, long ms);
void sconn_init(struct store *st, struct conn *c, const char *name,
    int subscriber);
void sconn_close(struct conn *c);
void sconn_start(struct conn *c);
/* Tear c down from our own event (never inside a hiredis callback). */
void sconn_kill(struct conn *c, const char *why);
void sconn_watchdog_cb(evutil_socket_t fd, short what, void *arg);
void sconn_role_cb(evutil_socket_t fd, short what, void *arg);
void sconn_switched(void *arg, const struct addr *from, const struct addr *to);

/* store.c */
int store_is_int(const redisReply *r);
/* Answer every queued command "unavailable" (the connection is gone). */
void store_queue_fail(struct store *st);

#endif
