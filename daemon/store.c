/*
 * store.c - Redis connections, Lua scripts, reconnects, pub/sub.
 *
 * Facts this file is built around (../shared/notes, hiredis 0.14.1):
 *  - every pending callback runs once with reply == NULL on teardown;
 *  - hiredis frees the context right after onDisconnect, and right after
 *    onConnect reports an error; onDisconnect never fires for a context
 *    that never connected; so our pointer is cleared in both, and every
 *    teardown we start ourselves runs from our own libevent callback,
 *    never from inside a hiredis callback;
 *  - there are no async timeouts: libevent timers bound the connect, the
 *    handshake and the oldest command in flight;
 *  - "connected" is not "alive": a connection is up only after the
 *    replies to its handshake (AUTH, SCRIPT LOAD) arrived;
 *  - after SCRIPT FLUSH or a Redis restart EVALSHA answers NOSCRIPT: the
 *    command is sent again once as EVAL (which also caches the script).
 */
#include "store.h"
#include "addr.h"
#include "log.h"
#include "sentinel.h"
#include "util.h"
#include "scripts.h"

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* Grant scripts (acquire, handoff) put the new owner at this argv index
 * (EVALSHA sha numkeys + 3 pieces): a grant WAIT did not confirm is undone
 * by that owner's value. */
#define OWNER_ARG 6
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

static void conn_start(struct conn *c);
static void conn_kill(struct conn *c, const char *why);
static void queue_run(struct store *st);
static int cmd_start(struct cmd *c);
static void wait_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* --- helpers -------------------------------------------------------- */

/* The endpoint, by the parser config.c checked it with (addr.h). */
static int
parse_addr(struct store *st)
{
	struct addr a;
	char err[160];

	if (addr_parse_endpoint(st->addr, &a, err, sizeof err) != 0) {
		log_error("Redis address: %s", err);
		return -1;
	}
	st->is_unix = a.is_unix;
	st->port = a.port;
	st->host = a.is_unix ? xstrndup(a.path, strlen(a.path)) :
	    xstrndup(a.host, strlen(a.host));
	return 0;
}

static char *
joinstr(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = xmalloc(la + lb + 1);

	memcpy(s, a, la);
	memcpy(s + la, b, lb + 1);
	return s;
}

static int
timer_add_ms(struct event *ev, long ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	return event_add(ev, &tv);
}

/* --- commands ------------------------------------------------------- */

/*
 * Build a script call: argv = EVALSHA sha numkeys pieces...  Everything
 * lives in one allocation, kept for a NOSCRIPT retry.
 */
static struct cmd *
cmd_new(struct store *st, enum cmd_kind kind, enum script_id script,
    int nkeys, const struct piece *pieces, int npieces)
{
	size_t bytes = 0, off;
	char numkeys[16], *data;
	struct cmd *c;
	int argc = 3 + npieces, nklen;

	nklen = snprintf(numkeys, sizeof numkeys, "%d", nkeys);
	for (int i = 0; i < npieces; i++)
		bytes += pieces[i].l1 + pieces[i].l2;
	bytes += (size_t)nklen;
	c = xmalloc(sizeof *c + (size_t)argc * (sizeof(char *) +
	    sizeof(size_t)) + bytes);
	memset(c, 0, sizeof *c);
	c->st = st;
	c->kind = kind;
	c->script = script;
	c->argc = argc;
	c->argv = (const char **)(void *)(c + 1);
	c->argvlen = (size_t *)(void *)(c->argv + argc);
	data = (char *)(c->argvlen + argc);
	c->argv[0] = "EVALSHA";
	c->argvlen[0] = 7;
	c->argv[1] = scripts[script].sha;
	c->argvlen[1] = strlen(scripts[script].sha);
	memcpy(data, numkeys, (size_t)nklen);
	c->argv[2] = data;
	c->argvlen[2] = (size_t)nklen;
	off = (size_t)nklen;
	for (int i = 0; i < npieces; i++) {
		c->argv[3 + i] = data + off;
		c->argvlen[3 + i] = pieces[i].l1 + pieces[i].l2;
		if (pieces[i].l1)
			memcpy(data + off, pieces[i].p1, pieces[i].l1);
		off += pieces[i].l1;
		if (pieces[i].l2)
			memcpy(data + off, pieces[i].p2, pieces[i].l2);
		off += pieces[i].l2;
	}
	return c;
}

/* Tell the caller Redis could not answer. */
static void
cmd_fail(struct cmd *c)
{
	switch (c->kind) {
	case K_ACQUIRE:
		c->fn.acquire(c->arg, 0, 0, 0);
		break;
	case K_RELEASE:
	case K_UNDO:
		c->fn.release(c->arg, 0, 0);
		break;
	case K_RENEW:
		c->fn.renew(c->arg, 0, NULL, c->nrenew);
		break;
	case K_OWNER:
		c->fn.owner(c->arg, 0, NULL, 0, 0);
		break;
	}
}

static int
is_int(const redisReply *r)
{
	return r != NULL && r->type == REDIS_REPLY_INTEGER;
}

/*
 * Decode a script's reply for the caller: 0 delivered, 1 parked (a grant
 * waiting for its group's WAIT), -1 when its shape is wrong.
 */
static int
cmd_deliver(struct cmd *c, redisReply *r)
{
	switch (c->kind) {
	case K_ACQUIRE:
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    !is_int(r->element[0]) || !is_int(r->element[1]))
			return -1;
		if (r->element[0]->integer < -1 || r->element[0]->integer > 2)
			return -1;
		if (c->group != NULL && r->element[0]->integer == 1) {
			c->token = r->element[1]->integer;
			c->gnext = c->group->parked;
			c->group->parked = c;
			return 1;
		}
		c->fn.acquire(c->arg, 1, (int)r->element[0]->integer,
		    r->element[1]->integer);
		return 0;
	case K_RELEASE:
	case K_UNDO:
		if (r->type != REDIS_REPLY_INTEGER)
			return -1;
		c->fn.release(c->arg, 1, r->integer == 1);
		return 0;
	case K_RENEW: {
		int done[STORE_RENEW_BATCH];

		if (r->type != REDIS_REPLY_ARRAY || r->elements != c->nrenew)
			return -1;
		for (size_t i = 0; i < r->elements; i++) {
			if (!is_int(r->element[i]))
				return -1;
			done[i] = (int)r->element[i]->integer;
		}
		c->fn.renew(c->arg, 1, done, c->nrenew);
		return 0;
	}
	case K_OWNER:
		if (r->type != REDIS_REPLY_ARRAY)
			return -1;
		if (r->elements == 0) {
			c->fn.owner(c->arg, 1, NULL, 0, 0);
			return 0;
		}
		if (r->elements != 2 ||
		    r->element[0]->type != REDIS_REPLY_STRING ||
		    !is_int(r->element[1]))
			return -1;
		c->fn.owner(c->arg, 1, r->element[0]->str,
		    (size_t)r->element[0]->len, r->element[1]->integer);
		return 0;
	}
	return -1;
}

static int cmd_send(struct cmd *c);

/* --- replica acknowledgement (group commit) -------------------------- */

static void
group_unref(struct ackgroup *g)
{
	if (--g->refs == 0)
		free(g);
}

/* c's reply came (or never will): it no longer holds its group open. */
static void
group_left(struct cmd *c)
{
	if (c->group != NULL) {
		group_unref(c->group);
		c->group = NULL;
	}
}

/* A grant sent this turn: the turn's WAIT must cover it. */
static void
group_join(struct cmd *c)
{
	struct store *st = c->st;
	struct ackgroup *g = st->agroup;

	if (g == NULL) {
		g = xcalloc(1, sizeof *g);
		g->st = st;
		g->refs = 1;		/* the WAIT */
		st->agroup = g;
		event_active(st->ack_ev, EV_TIMEOUT, 0);
	}
	g->refs++;
	c->group = g;
}

static void
undo_done(void *arg, int ok, int released)
{
	(void)arg;
	if (!ok)
		log_warn("could not undo a grant replicas did not acknowledge; "
		    "it expires with its TTL");
	else if (!released)
		log_debug("undone grant was already gone");
}

/*
 * A grant WAIT did not confirm: free it again (release.lua by its value),
 * so no one holds a lock a failover could hand to another.  -1 when the
 * release cannot even be sent.
 */
static int
group_undo(struct cmd *c)
{
	struct store *st = c->st;
	char token[24];
	int tl = snprintf(token, sizeof token, ":%lld", c->token);
	struct piece p[4] = {
		{ c->argv[3], c->argvlen[3], NULL, 0 },
		/* the value: "<owner>" ":<token>" */
		{ c->argv[c->owner_arg], c->argvlen[c->owner_arg], token,
		  (size_t)tl },
		{ st->channel, strlen(st->channel), NULL, 0 },
		{ c->argv[3] + st->lockpfxlen, c->argvlen[3] - st->lockpfxlen,
		  NULL, 0 },
	};
	struct cmd *u;

	if (st->cmd.state != C_UP)
		return -1;
	u = cmd_new(st, K_UNDO, SCRIPT_RELEASE, 1, p, 4);
	u->fn.release = undo_done;
	u->arg = st;
	return cmd_start(u);
}

/* The turn is over: one WAIT for every grant it sent. */
static void
ack_cb(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;
	struct ackgroup *g = st->agroup;

	(void)fd;
	(void)what;
	if (g == NULL)
		return;
	st->agroup = NULL;
	if (st->cmd.state == C_UP && st->cmd.ac != NULL &&
	    redisAsyncCommand(st->cmd.ac, wait_reply, g, "WAIT %ld %ld",
	    st->cfg.acks, st->cfg.ack_timeout_ms) == REDIS_OK) {
		g->sent = 1;
		if (st->inflight++ == 0)
			st->last_progress_ms = now_ms();
		return;
	}
	/* The connection went first: its members fail with it (their
	 * callbacks run with NULL replies, nothing is parked yet). */
	group_unref(g);
}

static void
wait_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct ackgroup *g = privdata;
	struct store *st = g->st;
	redisReply *r = reply;
	long long acked = -1;
	size_t undone = 0;
	struct cmd *c;

	(void)ac;
	st->inflight--;
	st->last_progress_ms = now_ms();
	if (r != NULL && r->type == REDIS_REPLY_INTEGER)
		acked = r->integer;
	while ((c = g->parked) != NULL) {
		g->parked = c->gnext;
		if (r == NULL) {
			cmd_fail(c);	/* unknown: the caller forgets it */
		} else if (acked >= st->cfg.acks) {
			c->fn.acquire(c->arg, 1, 1, c->token);
		} else if (group_undo(c) == 0) {
			undone++;
			c->fn.acquire(c->arg, 1, -2, 0);
		} else {
			cmd_fail(c);
		}
		free(c);
	}
	if (undone > 0) {
		st->acks_missed += undone;
		log_warn("WAIT: %lld of %ld replicas acknowledged; %zu grants "
		    "undone", acked, st->cfg.acks, undone);
	}
	if (r != NULL && r->type == REDIS_REPLY_ERROR)
		/* e.g. "WAIT cannot be used with replica instances" */
		conn_kill(&st->cmd, "WAIT refused: no longer the master?");
	group_unref(g);
}

/*
 * A Redis error reply (NOREPLICAS, MISCONF, BUSY, OOM...) comes back for
 * every script while it lasts: log the first, then at most one line per
 * ERROR_LOG_MS saying how many were not logged.
 */
static void
error_logged(struct store *st, const char *script, const char *err)
{
	int64_t now = now_ms();

	if (st->errlog_ms != 0 && now - st->errlog_ms < ERROR_LOG_MS) {
		st->errlog_quiet++;
		return;
	}
	if (st->errlog_quiet > 0)
		log_warn("Redis error from %s: %s (and %llu more errors not "
		    "logged)", script, err,
		    (unsigned long long)st->errlog_quiet);
	else
		log_warn("Redis error from %s: %s", script, err);
	st->errlog_ms = now;
	st->errlog_quiet = 0;
}

static void
cmd_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct cmd *c = privdata;
	struct store *st = c->st;
	redisReply *r = reply;
	int rc;

	(void)ac;
	st->inflight--;
	st->last_progress_ms = now_ms();
	if (r == NULL) {
		group_left(c);
		cmd_fail(c);
		free(c);
		return;
	}
	queue_run(st);
	if (r->type == REDIS_REPLY_ERROR && !c->retried &&
	    strncmp(r->str, "NOSCRIPT", 8) == 0 && st->cmd.state == C_UP) {
		group_left(c);	/* the resend joins the group of its turn */
		/* Script cache flushed: send the text once; EVAL caches it. */
		c->retried = 1;
		c->argv[0] = "EVAL";
		c->argvlen[0] = 4;
		c->argv[1] = scripts[c->script].text;
		c->argvlen[1] = strlen(scripts[c->script].text);
		log_info("script %s not cached in Redis: sent as EVAL",
		    scripts[c->script].name);
		if (cmd_send(c) == 0)
			return;
		cmd_fail(c);
		free(c);
		return;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		error_logged(st, scripts[c->script].name, r->str);
		group_left(c);
		cmd_fail(c);
		free(c);
		if (strncmp(r->str, "READONLY", 8) == 0)
			conn_kill(&st->cmd, "Redis is a replica now");
		return;
	}
	if ((rc = cmd_deliver(c, r)) == 1) {
		/* parked in its group (which the WAIT keeps alive) */
		group_unref(c->group);
		c->group = NULL;
		return;
	}
	if (rc != 0) {
		log_error("unexpected reply shape from %s (type %d)",
		    scripts[c->script].name, r->type);
		cmd_fail(c);
	}
	group_left(c);
	free(c);
}

static int
cmd_send(struct cmd *c)
{
	struct store *st = c->st;

	if (st->cmd.state != C_UP || st->cmd.ac == NULL)
		return -1;
	if (redisAsyncCommandArgv(st->cmd.ac, cmd_reply, c, c->argc,
	    c->argv, c->argvlen) != REDIS_OK)
		return -1;
	if (st->inflight++ == 0)
		st->last_progress_ms = now_ms();
	if (c->kind == K_ACQUIRE && st->cfg.acks > 0)
		group_join(c);
	return 0;
}

/* Send queued commands while there is room in flight. */
static void
queue_run(struct store *st)
{
	while (st->qhead != NULL && st->inflight < STORE_MAX_INFLIGHT) {
		struct cmd *c = st->qhead;

		st->qhead = c->qnext;
		if (st->qhead == NULL)
			st->qtail = NULL;
		st->queued--;
		if (cmd_send(c) != 0) {
			cmd_fail(c);
			free(c);
		}
	}
}

/* Answer every queued command "unavailable" (the connection is gone). */
static void
queue_fail(struct store *st)
{
	struct cmd *c;

	while ((c = st->qhead) != NULL) {
		st->qhead = c->qnext;
		if (st->qhead == NULL)
			st->qtail = NULL;
		st->queued--;
		cmd_fail(c);
		free(c);
	}
}

/* Send a new command, or queue it when STORE_MAX_INFLIGHT are in flight;
 * on failure it is freed and -1 returned. */
static int
cmd_start(struct cmd *c)
{
	struct store *st = c->st;

	if (st->cmd.state == C_UP && st->inflight >= STORE_MAX_INFLIGHT) {
		c->qnext = NULL;
		if (st->qtail)
			st->qtail->qnext = c;
		else
			st->qhead = c;
		st->qtail = c;
		st->queued++;
		return 0;
	}
	if (cmd_send(c) == 0)
		return 0;
	free(c);
	return -1;
}

/* Build and start one script call; -1 (nothing started) when down. */
static int
script_call(struct store *st, enum cmd_kind kind, enum script_id script,
    int nkeys, const struct piece *p, int np, union cmd_fn fn, void *arg)
{
	struct cmd *c;

	if (st->cmd.state != C_UP)
		return -1;
	c = cmd_new(st, kind, script, nkeys, p, np);
	c->fn = fn;
	c->arg = arg;
	c->owner_arg = OWNER_ARG;
	return cmd_start(c);
}

int
store_acquire(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long ttl_ms, int will_wait,
    store_acquire_fn *fn, void *arg)
{
	char ttl[24];
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms);
	struct piece p[8] = {
		{ st->lockpfx, st->lockpfxlen, key, keylen },
		{ st->fence, strlen(st->fence), NULL, 0 },
		{ st->delay, strlen(st->delay), NULL, 0 },
		{ owner, ownerlen, NULL, 0 },		/* argv[OWNER_ARG] */
		{ ttl, (size_t)tl, NULL, 0 },
		{ st->wanted, strlen(st->wanted), NULL, 0 },
		{ st->idsp, STORE_ID_LEN + 1, key, keylen },
		{ will_wait ? "1" : "0", 1, NULL, 0 },
	};
	return script_call(st, K_ACQUIRE, SCRIPT_ACQUIRE, 3, p, 8,
	    (union cmd_fn){ .acquire = fn }, arg);
}

int
store_handoff(struct store *st, const char *key, size_t keylen,
    const char *value, size_t valuelen, const char *next_owner,
    size_t next_ownerlen, long ttl_ms, store_acquire_fn *fn, void *arg)
{
	char ttl[24];
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms);
	struct piece p[7] = {
		{ st->lockpfx, st->lockpfxlen, key, keylen },
		{ st->fence, strlen(st->fence), NULL, 0 },
		{ value, valuelen, NULL, 0 },
		{ next_owner, next_ownerlen, NULL, 0 },	/* argv[OWNER_ARG] */
		{ ttl, (size_t)tl, NULL, 0 },
		{ st->channel, strlen(st->channel), NULL, 0 },
		{ key, keylen, NULL, 0 },
	};
	return script_call(st, K_ACQUIRE, SCRIPT_HANDOFF, 2, p, 7,
	    (union cmd_fn){ .acquire = fn }, arg);
}

int
store_release(struct store *st, const char *key, size_t keylen,
    const char *value, size_t valuelen, store_release_fn *fn, void *arg)
{
	struct piece p[4] = {
		{ st->lockpfx, st->lockpfxlen, key, keylen },
		{ value, valuelen, NULL, 0 },
		{ st->channel, strlen(st->channel), NULL, 0 },
		{ key, keylen, NULL, 0 },
	};
	return script_call(st, K_RELEASE, SCRIPT_RELEASE, 1, p, 4,
	    (union cmd_fn){ .release = fn }, arg);
}

int
store_forget(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, store_release_fn *fn, void *arg)
{
	struct piece p[4] = {
		{ st->lockpfx, st->lockpfxlen, key, keylen },
		{ owner, ownerlen, NULL, 0 },
		{ st->channel, strlen(st->channel), NULL, 0 },
		{ key, keylen, NULL, 0 },
	};
	return script_call(st, K_RELEASE, SCRIPT_FORGET, 1, p, 4,
	    (union cmd_fn){ .release = fn }, arg);
}

int
store_renew(struct store *st, const struct store_renew_item *items, size_t n,
    int reassert, store_renew_fn *fn, void *arg)
{
	struct piece p[3 * STORE_RENEW_BATCH + 1];
	char ttls[STORE_RENEW_BATCH][24];
	size_t nk = reassert ? n + 1 : n;	/* reassert: + the lock delay */
	struct cmd *c;

	if (st->cmd.state != C_UP || n == 0 || n > STORE_RENEW_BATCH)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int tl = snprintf(ttls[i], sizeof ttls[i], "%ld",
		    items[i].ttl_ms);
		p[i] = (struct piece){ st->lockpfx, st->lockpfxlen,
		    items[i].key, items[i].keylen };
		p[nk + i] = (struct piece){ items[i].value, items[i].valuelen,
		    NULL, 0 };
		p[nk + n + i] = (struct piece){ ttls[i], (size_t)tl, NULL, 0 };
	}
	if (reassert)
		p[n] = (struct piece){ st->delay, strlen(st->delay), NULL, 0 };
	c = cmd_new(st, K_RENEW, reassert ? SCRIPT_REASSERT : SCRIPT_RENEW,
	    (int)nk, p, (int)(nk + 2 * n));
	c->fn.renew = fn;
	c->arg = arg;
	c->nrenew = n;
	return cmd_start(c);
}

int
store_owner(struct store *st, const char *key, size_t keylen,
    store_owner_fn *fn, void *arg)
{
	struct piece p[1] = { { st->lockpfx, st->lockpfxlen, key, keylen } };
	return script_call(st, K_OWNER, SCRIPT_OWNER, 1, p, 1,
	    (union cmd_fn){ .owner = fn }, arg);
}

/* --- connections ---------------------------------------------------- */

static struct conn *
conn_of(redisAsyncContext *ac)
{
	return ac->data;
}

static void
conn_became_up(struct conn *c)
{
	struct store *st = c->st;

	event_del(c->timeout_ev);
	c->state = C_UP;
	c->backoff_ms = BACKOFF_MIN_MS;
	c->failing = 0;
	c->last_refusal[0] = '\0';
	log_info("Redis %s connection up (%s)", c->name, c->addrstr);
	if (!c->subscriber) {
		st->last_progress_ms = now_ms();
		if (st->hooks.up)
			st->hooks.up(st->hooks.arg);
	} else if (st->hooks.subscribed) {
		st->hooks.subscribed(st->hooks.arg);
	}
}

/*
 * The connection is gone (ac already freed or being freed by hiredis):
 * forget it, schedule the next attempt, tell the owner.
 */
static void
conn_lost(struct conn *c, const char *why)
{
	struct store *st = c->st;
	int was_up = c->state == C_UP;

	c->ac = NULL;
	c->state = C_DOWN;
	event_del(c->timeout_ev);
	if (was_up || !c->failing)
		log_warn("Redis %s connection %s (%s): %s; retrying in %ld ms",
		    c->name, was_up ? "lost" : "failed",
		    c->addrstr[0] ? c->addrstr : st->addr, why, c->backoff_ms);
	else
		log_debug("Redis %s connection failed: %s; retrying in %ld ms",
		    c->name, why, c->backoff_ms);
	c->failing = 1;
	timer_add_ms(c->retry_ev, c->backoff_ms);
	c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS :
	    c->backoff_ms * 2;
	if (!c->subscriber)
		queue_fail(st);
	if (was_up && !c->subscriber) {
		st->reconnects++;
		if (st->hooks.down)
			st->hooks.down(st->hooks.arg);
		/* A subscriber on a Redis we can no longer reach is as
		 * suspect; resubscribing later retries every waiter. */
		if (st->sub.ac != NULL)
			conn_kill(&st->sub, "command connection lost");
	}
}

static void
on_connect(const redisAsyncContext *ac, int status);
static void
on_disconnect(const redisAsyncContext *ac, int status);

/*
 * Redis refused the handshake (wrong password, unknown user, ...).  The
 * replies queued behind the refused AUTH fail too (NOAUTH): only the first
 * counts, and the same refusal is logged once, not on every retry.
 */
static void
handshake_refused(struct conn *c, const char *why)
{
	if (c->refused)
		return;
	c->refused = 1;
	if (strncmp(c->last_refusal, why, sizeof c->last_refusal - 1) != 0) {
		log_error("Redis %s handshake refused: %s (retrying with backoff)",
		    c->name, why);
		snprintf(c->last_refusal, sizeof c->last_refusal, "%s", why);
	}
	conn_kill(c, "handshake refused");
}

static void
handshake_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct conn *c = privdata;
	redisReply *r = reply;

	if (c->ac != ac || r == NULL)
		return;		/* an old context tearing down */
	if (r->type == REDIS_REPLY_ERROR) {
		handshake_refused(c, r->str);
		return;
	}
	if (--c->handshake_left == 0 && !c->subscriber)
		conn_became_up(c);
}

/* Copy the value of "name:value" from an INFO text into out ("" if none). */
static void
info_field(const char *info, const char *name, char *out, size_t outlen)
{
	size_t nl = strlen(name);
	const char *p = info;

	out[0] = '\0';
	while (p != NULL && *p != '\0') {
		if (strncmp(p, name, nl) == 0 && p[nl] == ':') {
			size_t vl = strcspn(p + nl + 1, "\r\n");

			if (vl >= outlen)
				vl = outlen - 1;
			memcpy(out, p + nl + 1, vl);
			out[vl] = '\0';
			return;
		}
		if ((p = strchr(p, '\n')) != NULL)
			p++;
	}
}

/*
 * The tenure is joined (tenure.lua ran): the connection is up.  A new
 * replication id means a failover or a Redis back without its data: the
 * lock table reclaims its locks (reassert.lua) before new grants.
 */
static void
tenure_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct conn *c = privdata;
	struct store *st = c->st;
	redisReply *r = reply;
	long long started, delay;

	if (c->ac != ac || r == NULL)
		return;
	if (r->type == REDIS_REPLY_ERROR) {
		handshake_refused(c, r->str);
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    !is_int(r->element[0]) || !is_int(r->element[1])) {
		handshake_refused(c, "unexpected reply from tenure.lua");
		return;
	}
	started = r->element[0]->integer;
	delay = r->element[1]->integer;
	if (strcmp(c->replid, st->replid) != 0) {
		if (st->replid[0] != '\0')
			log_warn("Redis %s is a new master tenure (replication id "
			    "%.8s, was %.8s): reclaiming held locks%s; free keys "
			    "wait %lld ms", c->addrstr, c->replid, st->replid,
			    started ? ", counter raised" : "", delay);
		else if (started)
			log_info("Redis %s: tenure %.8s started", c->addrstr,
			    c->replid);
		st->tenures++;
		memcpy(st->replid, c->replid, sizeof st->replid);
	}
	if (--c->handshake_left == 0)
		conn_became_up(c);
}

/* INFO replication: only a master is used; its replication id names the
 * tenure (tenure.lua). */
static void
info_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct conn *c = privdata;
	struct store *st = c->st;
	redisReply *r = reply;
	char role[32], why[80];

	if (c->ac != ac || r == NULL)
		return;
	if (r->type != REDIS_REPLY_STRING) {
		handshake_refused(c, r->type == REDIS_REPLY_ERROR ? r->str :
		    "unexpected reply to INFO");
		return;
	}
	info_field(r->str, "role", role, sizeof role);
	if (strcmp(role, "master") != 0) {
		snprintf(why, sizeof why, "not a master (role:%s)", role);
		handshake_refused(c, why);
		return;
	}
	info_field(r->str, "master_replid", c->replid, sizeof c->replid);
	if (redisAsyncCommand(ac, tenure_reply, c,
	    "EVALSHA %s 3 %s %s %s %s %s %ld", scripts[SCRIPT_TENURE].sha,
	    st->fence, st->tenure, st->delay, c->replid, st->replid,
	    st->cfg.lock_delay_ms) != REDIS_OK) {
		conn_kill(c, "cannot send tenure.lua");
		return;
	}
	/* +1 for tenure.lua before -1 for INFO: not up yet */
	c->handshake_left++;
	c->handshake_left--;
}

/* Every ROLE_CHECK_MS: a master demoted while we stay connected (a frozen
 * old master that woke up, REPLICAOF) must not take grants. */
static void
role_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct store *st = privdata;
	redisReply *r = reply;

	if (r == NULL || st->cmd.ac != ac || st->cmd.state != C_UP)
		return;
	if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, "master") != 0)
		conn_kill(&st->cmd, "Redis is no longer a master (ROLE)");
}

static void
role_cb(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;

	(void)fd;
	(void)what;
	if (st->cmd.state == C_UP && st->cmd.ac != NULL &&
	    redisAsyncCommand(st->cmd.ac, role_reply, st, "ROLE") != REDIS_OK)
		log_debug("ROLE not sent");
}

static void
sub_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct conn *c = privdata;
	struct store *st = c->st;
	redisReply *r = reply, *kind;

	if (c->ac != ac || r == NULL)
		return;
	if (r->type == REDIS_REPLY_ERROR) {
		handshake_refused(c, r->str);
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING) {
		conn_kill(c, "unexpected reply on subscriber");
		return;
	}
	kind = r->element[0];
	if (strcmp(kind->str, "subscribe") == 0) {
		/* the count of channels subscribed: up once both are */
		if (r->element[2]->type == REDIS_REPLY_INTEGER &&
		    r->element[2]->integer == 2)
			conn_became_up(c);
	} else if (strcmp(kind->str, "message") == 0 &&
	    r->element[1]->type == REDIS_REPLY_STRING &&
	    r->element[2]->type == REDIS_REPLY_STRING) {
		const char *chan = r->element[1]->str;
		const char *key = r->element[2]->str;
		size_t keylen = (size_t)r->element[2]->len;

		if (strcmp(chan, st->channel) == 0 && st->hooks.released)
			st->hooks.released(st->hooks.arg, key, keylen);
		else if (strcmp(chan, st->wanted) == 0 && st->hooks.wanted &&
		    keylen > STORE_ID_LEN + 1 &&
		    memcmp(key, st->idsp, STORE_ID_LEN + 1) != 0)
			/* "<broker-id> <key>"; our own announcements skipped */
			st->hooks.wanted(st->hooks.arg, key + STORE_ID_LEN + 1,
			    keylen - STORE_ID_LEN - 1);
	}
}

static void
send_auth(struct conn *c)
{
	struct store *st = c->st;

	if (st->password[0] == '\0')
		return;
	if (st->user[0] != '\0')
		redisAsyncCommand(c->ac, handshake_reply, c, "AUTH %s %s",
		    st->user, st->password);
	else
		redisAsyncCommand(c->ac, handshake_reply, c, "AUTH %s",
		    st->password);
	c->handshake_left++;
}

static void
on_connect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct conn *c = conn_of(ac);
	struct store *st = c->st;

	if (c->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees ac when we return; no onDisconnect follows. */
		conn_lost(c, ac->errstr[0] ? ac->errstr : ac->c.errstr);
		return;
	}
	c->state = C_HANDSHAKE;
	c->handshake_left = 0;
	c->refused = 0;
	send_auth(c);
	if (c->subscriber) {
		redisAsyncCommand(ac, sub_reply, c, "SUBSCRIBE %s %s",
		    st->channel, st->wanted);
	} else {
		for (int i = 0; i < SCRIPT__COUNT; i++) {
			redisAsyncCommand(ac, handshake_reply, c,
			    "SCRIPT LOAD %s", scripts[i].text);
			c->handshake_left++;
		}
		/* then: is it the master, and of which tenure? */
		redisAsyncCommand(ac, info_reply, c, "INFO replication");
		c->handshake_left++;
	}
}

static void
on_disconnect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct conn *c = conn_of(ac);

	if (c->ac != ac)
		return;		/* we started this teardown ourselves */
	/* hiredis drops a subscribed connection on any error reply, so a
	 * refused handshake can end here before our own teardown runs */
	conn_lost(c, c->refused ? "handshake refused" :
	    status == REDIS_OK ? "closed" :
	    (ac->errstr[0] ? ac->errstr : "error"));
}

/* Open a context to host:port (or the unix socket at host). */
static void
conn_connect(struct conn *c, const char *host, int port, int is_unix)
{
	struct store *st = c->st;
	redisAsyncContext *ac;

	if (is_unix)
		snprintf(c->addrstr, sizeof c->addrstr, "unix:%s", host);
	else
		snprintf(c->addrstr, sizeof c->addrstr, strchr(host, ':') ?
		    "[%s]:%d" : "%s:%d", host, port);
	if (is_unix)
		ac = redisAsyncConnectUnix(host);
	else
		ac = redisAsyncConnect(host, port);
	if (ac == NULL || ac->err) {
		const char *why = ac ? ac->errstr : "out of memory";
		c->ac = NULL;
		c->state = C_CONNECTING;
		conn_lost(c, why);
		if (ac)
			redisAsyncFree(ac);
		return;
	}
	ac->data = c;
	c->ac = ac;
	c->state = C_CONNECTING;
	if (redisLibeventAttach(ac, st->base) != REDIS_OK) {
		c->ac = NULL;
		conn_lost(c, "cannot attach to event loop");
		redisAsyncFree(ac);
		return;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	if (!is_unix && redisEnableKeepAlive(&ac->c) != REDIS_OK)
		log_debug("keepalive not enabled on Redis %s connection",
		    c->name);
	timer_add_ms(c->timeout_ev, st->cfg.timeout_ms);
}

/* Sentinel mode: the sentinels named a master (or none, why says). */
static void
resolved(void *arg, const struct addr *master, const char *why)
{
	struct conn *c = arg;

	c->resolving = 0;
	if (c->st->freeing)
		return;
	if (master == NULL) {
		conn_lost(c, why != NULL ? why : "the sentinels named no master");
		return;
	}
	conn_connect(c, master->host, master->port, 0);
}

/*
 * (Re)connect.  In Sentinel mode every connect asks the sentinels first:
 * after any loss the master may have moved (the address is checked by
 * the handshake's INFO, as a sentinel's answer may be stale).
 */
static void
conn_start(struct conn *c)
{
	struct store *st = c->st;

	if (st->sent == NULL) {
		conn_connect(c, st->host, st->port, st->is_unix);
		return;
	}
	if (c->resolving)
		return;
	c->resolving = 1;
	c->state = C_CONNECTING;
	c->addrstr[0] = '\0';
	sentinel_resolve(st->sent, resolved, c);
}

/* The sentinels say the master moved: follow it now. */
static void
on_switched(void *arg, const struct addr *from, const struct addr *to)
{
	struct store *st = arg;
	char a[ADDR_HOST_LEN + 16], b[ADDR_HOST_LEN + 16];

	snprintf(b, sizeof b, strchr(to->host, ':') ? "[%s]:%d" : "%s:%d",
	    to->host, to->port);
	if (from != NULL)
		snprintf(a, sizeof a, strchr(from->host, ':') ? "[%s]:%d" :
		    "%s:%d", from->host, from->port);
	else
		snprintf(a, sizeof a, "-");
	log_warn("Redis master switched from %s to %s", a, b);
	if (st->cmd.ac != NULL && strcmp(st->cmd.addrstr, b) != 0)
		conn_kill(&st->cmd, "the master moved");
	if (st->sub.ac != NULL && strcmp(st->sub.addrstr, b) != 0)
		conn_kill(&st->sub, "the master moved");
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	conn_start(arg);
}

/* Deferred teardown: runs from libevent, never inside hiredis. */
static void
kill_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	redisAsyncContext *ac = c->ac;

	(void)fd;
	(void)what;
	if (ac == NULL)
		return;
	/* Mark it gone first: the NULL callbacks redisAsyncFree runs, and
	 * its onDisconnect, must see a connection that is already down. */
	conn_lost(c, c->kill_why);
	redisAsyncFree(ac);
}

static void
conn_kill(struct conn *c, const char *why)
{
	/* Already going (the event is active): keep the first reason. */
	if (event_pending(c->kill_ev, EV_TIMEOUT, NULL))
		return;
	c->kill_why = why;
	event_active(c->kill_ev, EV_TIMEOUT, 0);
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)what;
	if (c->state == C_CONNECTING || c->state == C_HANDSHAKE)
		conn_kill(c, c->state == C_CONNECTING ? "connect timed out" :
		    "no answer to handshake");
}

/* The oldest command in flight waited too long: Redis is not answering. */
static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;

	(void)fd;
	(void)what;
	if (st->cmd.state == C_UP && st->inflight > 0 &&
	    now_ms() - st->last_progress_ms > st->cfg.timeout_ms)
		conn_kill(&st->cmd, "Redis stopped answering");
}

static void
conn_init(struct store *st, struct conn *c, const char *name, int subscriber)
{
	c->st = st;
	c->name = name;
	c->subscriber = subscriber;
	c->state = C_DOWN;
	c->backoff_ms = BACKOFF_MIN_MS;
	c->retry_ev = evtimer_new(st->base, retry_cb, c);
	c->timeout_ev = evtimer_new(st->base, timeout_cb, c);
	c->kill_ev = evtimer_new(st->base, kill_cb, c);
	if (!c->retry_ev || !c->timeout_ev || !c->kill_ev)
		fatalx("cannot create Redis timers");
}

struct store *
store_new(struct event_base *base, const struct store_cfg *cfg,
    const struct store_hooks *hooks)
{
	struct store *st = xcalloc(1, sizeof *st);
	struct timeval tick;

	st->base = base;
	st->addr = xstrndup(cfg->addr, strlen(cfg->addr));
	st->password = xstrndup(cfg->password, strlen(cfg->password));
	st->user = xstrndup(cfg->user, strlen(cfg->user));
	st->cfg = *cfg;
	st->cfg.addr = st->addr;
	st->cfg.password = st->password;
	st->cfg.user = st->user;
	st->cfg.prefix = NULL;
	st->lockpfx = joinstr(cfg->prefix, ":lock:");
	st->lockpfxlen = strlen(st->lockpfx);
	st->fence = joinstr(cfg->prefix, ":fence");
	st->channel = joinstr(cfg->prefix, ":released");
	st->wanted = joinstr(cfg->prefix, ":wanted");
	st->tenure = joinstr(cfg->prefix, ":tenure");
	st->delay = joinstr(cfg->prefix, ":lockdelay");
	memset(st->idsp, '-', STORE_ID_LEN);
	if (cfg->id != NULL)
		memcpy(st->idsp, cfg->id, strnlen(cfg->id, STORE_ID_LEN));
	st->idsp[STORE_ID_LEN] = ' ';
	st->idsp[STORE_ID_LEN + 1] = '\0';
	st->hooks = *hooks;
	if (cfg->sentinels != NULL && cfg->sentinels[0] != '\0') {
		struct sentinel_cfg sc = {
			.sentinels = cfg->sentinels,
			.master_name = cfg->master_name,
			.password = cfg->sentinel_password,
			.user = cfg->sentinel_user,
			/* "a few hundred ms" per sentinel (sentinel-clients) */
			.timeout_ms = cfg->timeout_ms < 500 ? cfg->timeout_ms : 500,
		};
		struct sentinel_hooks sh = { on_switched, st };
		char err[256];

		st->sent = sentinel_new(base, &sc, &sh, err, sizeof err);
		if (st->sent == NULL) {
			log_error("Sentinel mode: %s", err);
			store_free(st);
			return NULL;
		}
	} else if (parse_addr(st) != 0) {
		store_free(st);
		return NULL;
	}
	st->cfg.sentinels = st->cfg.master_name = NULL;	/* not kept */
	st->cfg.sentinel_password = st->cfg.sentinel_user = NULL;
	conn_init(st, &st->cmd, "command", 0);
	conn_init(st, &st->sub, "subscriber", 1);
	st->watchdog_ev = event_new(base, -1, EV_PERSIST, watchdog_cb, st);
	st->role_ev = event_new(base, -1, EV_PERSIST, role_cb, st);
	st->ack_ev = event_new(base, -1, 0, ack_cb, st);
	if (st->watchdog_ev == NULL || st->role_ev == NULL || st->ack_ev == NULL)
		fatalx("cannot create Redis timers");
	tick.tv_sec = cfg->timeout_ms / 4 / 1000;
	tick.tv_usec = (cfg->timeout_ms / 4 % 1000) * 1000;
	event_add(st->watchdog_ev, &tick);
	tick.tv_sec = ROLE_CHECK_MS / 1000;
	tick.tv_usec = (ROLE_CHECK_MS % 1000) * 1000;
	event_add(st->role_ev, &tick);
	conn_start(&st->cmd);
	conn_start(&st->sub);
	return st;
}

static void
conn_close(struct conn *c)
{
	redisAsyncContext *ac = c->ac;

	c->ac = NULL;
	c->state = C_DOWN;
	if (ac != NULL)
		redisAsyncFree(ac);
	if (c->retry_ev)
		event_free(c->retry_ev);
	if (c->timeout_ev)
		event_free(c->timeout_ev);
	if (c->kill_ev)
		event_free(c->kill_ev);
	c->retry_ev = c->timeout_ev = c->kill_ev = NULL;
}

void
store_free(struct store *st)
{
	if (st == NULL)
		return;
	st->freeing = 1;
	st->hooks.down = NULL;	/* shutting down: nobody to tell */
	st->hooks.up = NULL;
	if (st->sent != NULL)
		sentinel_free(st->sent);	/* resolves answer, ignored */
	st->sent = NULL;
	if (st->agroup != NULL) {
		/* its WAIT will never be sent; members fail below */
		group_unref(st->agroup);
		st->agroup = NULL;
	}
	st->cmd.state = C_DOWN;	/* callbacks below may not queue more */
	queue_fail(st);
	conn_close(&st->cmd);
	conn_close(&st->sub);
	if (st->watchdog_ev)
		event_free(st->watchdog_ev);
	if (st->role_ev)
		event_free(st->role_ev);
	if (st->ack_ev)
		event_free(st->ack_ev);
	free(st->tenure);
	free(st->delay);
	free(st->addr);
	free(st->password);
	free(st->user);
	free(st->lockpfx);
	free(st->fence);
	free(st->channel);
	free(st->wanted);
	free(st->host);
	free(st);
}

void
store_kick(struct store *st)
{
	struct conn *c = &st->cmd;

	/* Waiting out a backoff: try now, and quickly after (shutdown has
	 * only a short budget). */
	c->backoff_ms = BACKOFF_MIN_MS;
	if (c->state == C_DOWN && c->retry_ev != NULL &&
	    event_pending(c->retry_ev, EV_TIMEOUT, NULL)) {
		event_del(c->retry_ev);
		conn_start(c);
	}
}

int
store_is_up(const struct store *st)
{
	return st->cmd.state == C_UP;
}

size_t
store_inflight(const struct store *st)
{
	return st->inflight + st->queued;
}

uint64_t
store_reconnects(const struct store *st)
{
	return st->reconnects;
}

const char *
store_master(const struct store *st)
{
	return st->cmd.state == C_UP ? st->cmd.addrstr : "-";
}

uint64_t
store_tenures(const struct store *st)
{
	return st->tenures;
}

uint64_t
store_acks_missed(const struct store *st)
{
	return st->acks_missed;
}
