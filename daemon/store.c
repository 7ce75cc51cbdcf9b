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
#include "util.h"
#include "scripts.h"

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

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
	char last_refusal[160];		/* logged once until it changes */
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

enum cmd_kind { K_ACQUIRE, K_RELEASE, K_RENEW, K_OWNER };

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
};

static void conn_start(struct conn *c);
static void conn_kill(struct conn *c, const char *why);
static void queue_run(struct store *st);

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

/* Decode a script's reply for the caller; -1 when its shape is wrong. */
static int
cmd_deliver(struct cmd *c, redisReply *r)
{
	switch (c->kind) {
	case K_ACQUIRE:
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    !is_int(r->element[0]) || !is_int(r->element[1]))
			return -1;
		if (r->element[0]->integer < -1 || r->element[0]->integer > 1)
			return -1;
		c->fn.acquire(c->arg, 1, (int)r->element[0]->integer,
		    r->element[1]->integer);
		return 0;
	case K_RELEASE:
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
			done[i] = r->element[i]->integer == 1;
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

static void
cmd_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct cmd *c = privdata;
	struct store *st = c->st;
	redisReply *r = reply;

	(void)ac;
	st->inflight--;
	st->last_progress_ms = now_ms();
	if (r == NULL) {
		cmd_fail(c);
		free(c);
		return;
	}
	queue_run(st);
	if (r->type == REDIS_REPLY_ERROR && !c->retried &&
	    strncmp(r->str, "NOSCRIPT", 8) == 0 && st->cmd.state == C_UP) {
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
		log_warn("Redis error from %s: %s", scripts[c->script].name,
		    r->str);
		cmd_fail(c);
	} else if (cmd_deliver(c, r) != 0) {
		log_error("unexpected reply shape from %s (type %d)",
		    scripts[c->script].name, r->type);
		cmd_fail(c);
	}
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
	return cmd_start(c);
}

int
store_acquire(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long ttl_ms, int will_wait,
    store_acquire_fn *fn, void *arg)
{
	char ttl[24];
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms);
	struct piece p[7] = {
		{ st->lockpfx, st->lockpfxlen, key, keylen },
		{ st->fence, strlen(st->fence), NULL, 0 },
		{ owner, ownerlen, NULL, 0 },
		{ ttl, (size_t)tl, NULL, 0 },
		{ st->wanted, strlen(st->wanted), NULL, 0 },
		{ st->idsp, STORE_ID_LEN + 1, key, keylen },
		{ will_wait ? "1" : "0", 1, NULL, 0 },
	};
	return script_call(st, K_ACQUIRE, SCRIPT_ACQUIRE, 2, p, 7,
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
		{ next_owner, next_ownerlen, NULL, 0 },
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
    store_renew_fn *fn, void *arg)
{
	struct piece p[3 * STORE_RENEW_BATCH];
	char ttls[STORE_RENEW_BATCH][24];
	struct cmd *c;

	if (st->cmd.state != C_UP || n == 0 || n > STORE_RENEW_BATCH)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int tl = snprintf(ttls[i], sizeof ttls[i], "%ld",
		    items[i].ttl_ms);
		p[i] = (struct piece){ st->lockpfx, st->lockpfxlen,
		    items[i].key, items[i].keylen };
		p[n + i] = (struct piece){ items[i].value, items[i].valuelen,
		    NULL, 0 };
		p[2 * n + i] = (struct piece){ ttls[i], (size_t)tl, NULL, 0 };
	}
	c = cmd_new(st, K_RENEW, SCRIPT_RENEW, (int)n, p, (int)(3 * n));
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
	log_info("Redis %s connection up (%s)", c->name, st->addr);
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
		    c->name, was_up ? "lost" : "failed", st->addr, why,
		    c->backoff_ms);
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

static void
conn_start(struct conn *c)
{
	struct store *st = c->st;
	redisAsyncContext *ac;

	if (st->is_unix)
		ac = redisAsyncConnectUnix(st->host);
	else
		ac = redisAsyncConnect(st->host, st->port);
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
	if (!st->is_unix && redisEnableKeepAlive(&ac->c) != REDIS_OK)
		log_debug("keepalive not enabled on Redis %s connection",
		    c->name);
	timer_add_ms(c->timeout_ev, st->cfg.timeout_ms);
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
	memset(st->idsp, '-', STORE_ID_LEN);
	if (cfg->id != NULL)
		memcpy(st->idsp, cfg->id, strnlen(cfg->id, STORE_ID_LEN));
	st->idsp[STORE_ID_LEN] = ' ';
	st->idsp[STORE_ID_LEN + 1] = '\0';
	st->hooks = *hooks;
	if (parse_addr(st) != 0) {
		store_free(st);
		return NULL;
	}
	conn_init(st, &st->cmd, "command", 0);
	conn_init(st, &st->sub, "subscriber", 1);
	st->watchdog_ev = event_new(base, -1, EV_PERSIST, watchdog_cb, st);
	if (st->watchdog_ev == NULL)
		fatalx("cannot create Redis watchdog");
	tick.tv_sec = cfg->timeout_ms / 4 / 1000;
	tick.tv_usec = (cfg->timeout_ms / 4 % 1000) * 1000;
	event_add(st->watchdog_ev, &tick);
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
	st->hooks.down = NULL;	/* shutting down: nobody to tell */
	st->hooks.up = NULL;
	st->cmd.state = C_DOWN;	/* callbacks below may not queue more */
	queue_fail(st);
	conn_close(&st->cmd);
	conn_close(&st->sub);
	if (st->watchdog_ev)
		event_free(st->watchdog_ev);
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
