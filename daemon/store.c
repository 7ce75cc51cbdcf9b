/*
 * store.c - the broker's Redis in lock terms: the Lua script calls.
 *
 * Every call is one EVALSHA on the pipelined command connection (at most
 * STORE_MAX_INFLIGHT in flight, the rest queued), sent again once as EVAL
 * after NOSCRIPT (a SCRIPT FLUSH, a restart or a failover empties the
 * script cache).  With redis_replica_acks, grants wait for one WAIT per
 * event-loop turn (group commit).  The connections themselves live in
 * store_conn.c; facts about hiredis 0.14 this relies on are listed there.
 */
#include "store_int.h"
#include "log.h"
#include "sentinel.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* Grant scripts (acquire, handoff) put the new owner at this argv index
 * (EVALSHA sha numkeys + 3 pieces): a grant WAIT did not confirm is undone
 * by that owner's value. */
#define OWNER_ARG 6

static int cmd_start(struct cmd *c);
static void queue_run(struct store *st);
static void wait_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* --- helpers -------------------------------------------------------- */

static char *
joinstr(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = xmalloc(la + lb + 1);

	memcpy(s, a, la);
	memcpy(s + la, b, lb + 1);
	return s;
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
		c->fn.owner(c->arg, 0, NULL, 0, 0, 0);
		break;
	}
}

int
store_is_int(const redisReply *r)
{
	return r != NULL && r->type == REDIS_REPLY_INTEGER;
}

/* The value format, "<client-id>:<token>", is known here only. */
static int
value_piece(struct piece *p, const char *owner, size_t ownerlen,
    long long token, char *buf, size_t buflen)
{
	int tl = snprintf(buf, buflen, ":%lld", token);

	*p = (struct piece){ owner, ownerlen, buf, (size_t)tl };
	return tl;
}

static int
printable(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)p[i] < 0x21 || (unsigned char)p[i] > 0x7e)
			return 0;
	return len > 0;
}

/* OWNER: split the stored value for the caller; a value no broker wrote
 * (foreign bytes under our prefix) shows as "?", never echoed raw. */
static void
owner_deliver(struct cmd *c, const char *value, size_t len, long long pttl)
{
	const char *colon = printable(value, len) ?
	    memrchr(value, ':', len) : NULL;

	if (!printable(value, len))
		c->fn.owner(c->arg, 1, "?", 1, 0, pttl);
	else if (colon == NULL)
		c->fn.owner(c->arg, 1, value, len, 0, pttl);
	else if (colon == value)
		c->fn.owner(c->arg, 1, "?", 1, strtoll(colon + 1, NULL, 10),
		    pttl);
	else
		c->fn.owner(c->arg, 1, value, (size_t)(colon - value),
		    strtoll(colon + 1, NULL, 10), pttl);
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
		    !store_is_int(r->element[0]) || !store_is_int(r->element[1]))
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
			if (!store_is_int(r->element[i]))
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
			c->fn.owner(c->arg, 1, NULL, 0, 0, 0);
			return 0;
		}
		if (r->elements != 2 ||
		    r->element[0]->type != REDIS_REPLY_STRING ||
		    !store_is_int(r->element[1]))
			return -1;
		owner_deliver(c, r->element[0]->str,
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

/*
 * The undo of grant c ran (or not): only now is its caller told, -2
 * either way.  The caller also frees the key by owner later (a pending
 * forget, a no-op when this undo worked), so a grant nobody was told of
 * never stays for its whole TTL when the undo itself is refused.
 */
static void
undo_done(void *arg, int ok, int released)
{
	struct cmd *c = arg;

	if (!ok)
		log_warn("could not undo a grant replicas did not acknowledge; "
		    "it is freed by owner later");
	else if (!released)
		log_debug("undone grant was already gone");
	c->fn.acquire(c->arg, 1, -2, 0);
	free(c);
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
	struct piece p[4] = {
		{ c->argv[3], c->argvlen[3], NULL, 0 },
		{ NULL, 0, NULL, 0 },			/* the value, below */
		{ st->channel, strlen(st->channel), NULL, 0 },
		{ c->argv[3] + st->lockpfxlen, c->argvlen[3] - st->lockpfxlen,
		  NULL, 0 },
	};
	struct cmd *u;

	value_piece(&p[1], c->argv[c->owner_arg], c->argvlen[c->owner_arg],
	    c->token, token, sizeof token);
	if (!store_cmd_usable(st))
		return -1;
	u = cmd_new(st, K_UNDO, SCRIPT_RELEASE, 1, p, 4);
	u->fn.release = undo_done;
	u->arg = c;			/* answered and freed by undo_done */
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
	if (r == NULL)
		st->cmd.dying = 1;
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
			continue;	/* undo_done answers and frees it */
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
		sconn_kill(&st->cmd, "WAIT refused: no longer the master?");
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
		st->cmd.dying = 1;	/* before the caller reacts to it */
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
			sconn_kill(&st->cmd, "Redis is a replica now");
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

	if (!store_cmd_usable(st) || st->cmd.ac == NULL)
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
void
store_queue_fail(struct store *st)
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

	if (store_cmd_usable(st) && st->inflight >= STORE_MAX_INFLIGHT) {
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

	if (!store_cmd_usable(st))
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
    const char *owner, size_t ownerlen, long long token,
    const char *next_owner, size_t next_ownerlen, long ttl_ms,
    store_acquire_fn *fn, void *arg)
{
	char ttl[24], tok[24];
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms);
	struct piece p[7] = {
		{ st->lockpfx, st->lockpfxlen, key, keylen },
		{ st->fence, strlen(st->fence), NULL, 0 },
		{ NULL, 0, NULL, 0 },			/* the value, below */
		{ next_owner, next_ownerlen, NULL, 0 },	/* argv[OWNER_ARG] */
		{ ttl, (size_t)tl, NULL, 0 },
		{ st->channel, strlen(st->channel), NULL, 0 },
		{ key, keylen, NULL, 0 },
	};

	value_piece(&p[2], owner, ownerlen, token, tok, sizeof tok);
	return script_call(st, K_ACQUIRE, SCRIPT_HANDOFF, 2, p, 7,
	    (union cmd_fn){ .acquire = fn }, arg);
}

int
store_release(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token,
    store_release_fn *fn, void *arg)
{
	char tok[24];
	struct piece p[4] = {
		{ st->lockpfx, st->lockpfxlen, key, keylen },
		{ NULL, 0, NULL, 0 },			/* the value, below */
		{ st->channel, strlen(st->channel), NULL, 0 },
		{ key, keylen, NULL, 0 },
	};

	value_piece(&p[1], owner, ownerlen, token, tok, sizeof tok);
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
	char ttls[STORE_RENEW_BATCH][24], toks[STORE_RENEW_BATCH][24];
	size_t nk = reassert ? n + 1 : n;	/* reassert: + the lock delay */
	struct cmd *c;

	if (!store_cmd_usable(st) || n == 0 || n > STORE_RENEW_BATCH)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int tl = snprintf(ttls[i], sizeof ttls[i], "%ld",
		    items[i].ttl_ms);
		p[i] = (struct piece){ st->lockpfx, st->lockpfxlen,
		    items[i].key, items[i].keylen };
		value_piece(&p[nk + i], items[i].owner, items[i].ownerlen,
		    items[i].token, toks[i], sizeof toks[i]);
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
		struct sentinel_hooks sh = { sconn_switched, st };
		char err[256];

		st->sent = sentinel_new(base, &sc, &sh, err, sizeof err);
		if (st->sent == NULL) {
			log_error("Sentinel mode: %s", err);
			store_free(st);
			return NULL;
		}
	} else if (sconn_parse_addr(st) != 0) {
		store_free(st);
		return NULL;
	}
	st->cfg.sentinels = st->cfg.master_name = NULL;	/* not kept */
	st->cfg.sentinel_password = st->cfg.sentinel_user = NULL;
	sconn_init(st, &st->cmd, "command", 0);
	sconn_init(st, &st->sub, "subscriber", 1);
	st->watchdog_ev = event_new(base, -1, EV_PERSIST, sconn_watchdog_cb, st);
	st->role_ev = event_new(base, -1, EV_PERSIST, sconn_role_cb, st);
	st->ack_ev = event_new(base, -1, 0, ack_cb, st);
	if (st->watchdog_ev == NULL || st->role_ev == NULL || st->ack_ev == NULL)
		fatalx("cannot create Redis timers");
	tick.tv_sec = cfg->timeout_ms / 4 / 1000;
	tick.tv_usec = (cfg->timeout_ms / 4 % 1000) * 1000;
	event_add(st->watchdog_ev, &tick);
	tick.tv_sec = ROLE_CHECK_MS / 1000;
	tick.tv_usec = (ROLE_CHECK_MS % 1000) * 1000;
	event_add(st->role_ev, &tick);
	sconn_start(&st->cmd);
	sconn_start(&st->sub);
	return st;
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
	store_queue_fail(st);
	sconn_close(&st->cmd);
	sconn_close(&st->sub);
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

int
store_is_up(const struct store *st)
{
	return store_cmd_usable(st);
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
