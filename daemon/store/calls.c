/*
 * calls.c - the broker's Redis in lock terms: the Lua script calls of
 * store.h (build, route, follow redirections, decode).
 *
 * Every call is a script call on the command link of its key's master
 * (node.c sends it: at most STORE_MAX_INFLIGHT in flight per link, the
 * rest queued; FCALL of the function library, EVALSHA without one; EVAL
 * after NOSCRIPT or "Function not found"; in single and Sentinel mode the
 * calls of one event-loop turn leave together as one batch call;
 * with redis_replica_acks, grants wait for one WAIT per link and turn).
 * Routing asks the topology (topo.h) which master serves the key's slot.
 * In cluster mode a call follows MOVED (to the slot's new master) and ASK
 * (ASKING, then the call, to a migration's target), and waits out
 * TRYAGAIN and CLUSTERDOWN with backoff until redis_timeout_ms after it
 * was made.  Each call carries its decoder, which alone knows its
 * script's reply.
 */
#include "store_int.h"
#include "log.h"
#include "resp.h"
#include "slot.h"
#include "util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERROR_LOG_MS 10000		/* quiet time between error logs */
#define CLUSTER_REDIRECTS 5		/* MOVED/ASK followed per call */
#define RETRY_MIN_MS 20			/* TRYAGAIN / CLUSTERDOWN backoff */
#define RETRY_MAX_MS 200

struct call;

/*
 * A call's decoder: r NULL, tell the caller Redis could not answer (link
 * lost, reply timeout, error reply).  Returns 0 (answered), 1 (a grant
 * waiting for replica acks, can_park: parked) or -1 (r has the wrong
 * shape: nothing told).
 */
typedef int call_decode_fn(struct call *c, const redisReply *r,
    int can_park);

/* A script call of store.h.  Owned by node.c from node_call on, then by
 * whoever its answer goes to (call_reply). */
struct call {
	struct cmd cmd;			/* what node.c sends: first */
	struct store *st;
	call_decode_fn *decode;
	union call_fn {
		store_acquire_fn *acquire;
		store_release_fn *release;
		store_renew_fn *renew;
		store_owner_fn *owner;
		store_check_fn *check;
		store_session_fn *session;
		store_takeover_fn *takeover;
	} fn;
	void *arg;
	size_t nrenew;
	int owner_arg;			/* argv index of the owner (grants) */
	long long token;		/* parked: the token granted */
	int slot;			/* its key's slot; -1 single mode */
	int redirects;			/* MOVED / ASK followed so far */
	long retry_ms;			/* next TRYAGAIN / CLUSTERDOWN wait */
	struct event *retry_ev;		/* that wait */
	struct call *rnext;		/* st->retrying */
};

static void
call_free(struct call *c)
{
	if (c->retry_ev != NULL)
		event_free(c->retry_ev);
	free(c);
}

/* --- replies ----------------------------------------------------------- */

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

/* OWNER: split a stored value (a lock's string, a set's holder) for the
 * caller; a value no broker wrote (foreign bytes under our prefix) shows
 * as "?", never echoed raw.  The owner is the client-id: a resumed
 * session's generation or a lingering release's mark ("/..." after it) is
 * the store's business.  h points into value. */
static void
holder_split(const char *value, size_t len, long long pttl,
    struct store_holder *h)
{
	const char *colon = printable(value, len) ?
	    memrchr(value, ':', len) : NULL;
	/* the owner ends at the token's colon, or at a '/' before it */
	const char *slash = colon != NULL ?
	    memchr(value, '/', (size_t)(colon - value)) : NULL;
	const char *end = slash != NULL && slash > value ? slash : colon;

	*h = (struct store_holder){ "?", 1, 0, pttl, NULL, 0 };
	if (!printable(value, len))
		return;
	if (colon == NULL) {
		h->owner = value;
		h->ownerlen = len;
		return;
	}
	h->token = strtoll(colon + 1, NULL, 10);
	if (colon != value) {
		h->owner = value;
		h->ownerlen = (size_t)(end - value);
	}
}

/*
 * owner.lua's reply: {} free; {value, pttl} held exclusive; {kind, total,
 * value, pttl, ...} held shared or a semaphore, at most STORE_OWNER_SHOWN
 * holders of total.  -1 when the shape is wrong.
 */
static int
owner_decode(struct call *c, const redisReply *r, int can_park)
{
	struct store_holder h[STORE_OWNER_SHOWN];
	size_t n;

	(void)can_park;
	if (r == NULL) {
		c->fn.owner(c->arg, 0, STORE_EXCLUSIVE, NULL, 0, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY)
		return -1;
	if (r->elements == 0) {
		c->fn.owner(c->arg, 1, STORE_EXCLUSIVE, NULL, 0, 0);
		return 0;
	}
	if ((r->elements == 2 || r->elements == 3) &&
	    r->element[0]->type == REDIS_REPLY_STRING) {
		const redisReply *text = r->elements == 3 ? r->element[2] : NULL;

		if (!resp_is_int(r->element[1]) || (text != NULL &&
		    text->type != REDIS_REPLY_STRING))
			return -1;
		holder_split(r->element[0]->str, (size_t)r->element[0]->len,
		    r->element[1]->integer, &h[0]);
		/* a value is shown only as the broker checks it: printable,
		 * at most STORE_VALUE_MAX bytes */
		if (text != NULL && text->len <= STORE_VALUE_MAX &&
		    printable(text->str, (size_t)text->len)) {
			h[0].value = text->str;
			h[0].valuelen = (size_t)text->len;
		}
		c->fn.owner(c->arg, 1, STORE_EXCLUSIVE, h, 1, 1);
		return 0;
	}
	n = (r->elements - 2) / 2;
	if (r->elements < 4 || r->elements % 2 != 0 ||
	    n > STORE_OWNER_SHOWN || !resp_is_int(r->element[0]) ||
	    !resp_is_int(r->element[1]) || r->element[0]->integer < 0 ||
	    r->element[0]->integer > LONG_MAX ||
	    r->element[1]->integer < (long long)n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const redisReply *v = r->element[2 + 2 * i];
		const redisReply *pttl = r->element[3 + 2 * i];

		if (v->type != REDIS_REPLY_STRING || !resp_is_int(pttl))
			return -1;
		holder_split(v->str, (size_t)v->len, pttl->integer, &h[i]);
	}
	c->fn.owner(c->arg, 1, (long)r->element[0]->integer, h, n,
	    (size_t)r->element[1]->integer);
	return 0;
}

/* A session record's reply: {status, ...} or a bare status. */
static int
session_decode(struct call *c, const redisReply *r, int can_park)
{
	struct store_str *rest;
	char (*num)[24];
	size_t n;

	(void)can_park;
	if (r == NULL) {
		c->fn.session(c->arg, 0, 0, NULL, 0);
		return 0;
	}
	if (resp_is_int(r)) {
		c->fn.session(c->arg, 1, r->integer, NULL, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
	    !resp_is_int(r->element[0]))
		return -1;
	n = r->elements - 1;
	rest = xcalloc(n + 1, sizeof *rest);
	num = xcalloc(n + 1, sizeof *num);
	for (size_t i = 0; i < n; i++) {
		const redisReply *e = r->element[i + 1];

		if (resp_is_int(e)) {
			int l = snprintf(num[i], sizeof num[i], "%lld",
			    e->integer);
			rest[i] = (struct store_str){ num[i], (size_t)l };
		} else if (e->type == REDIS_REPLY_STRING) {
			rest[i] = (struct store_str){ e->str, (size_t)e->len };
		} else {
			free(rest);
			free(num);
			return -1;
		}
	}
	c->fn.session(c->arg, 1, r->element[0]->integer, rest, n);
	free(rest);
	free(num);
	return 0;
}

/* A script's answer about a hold (1, 0 or 3: store.h's STORE_DONE,
 * STORE_GONE, STORE_TAKEN); anything else reads as gone. */
static int
found_of(long long v)
{
	return v == STORE_DONE || v == STORE_TAKEN ? (int)v : STORE_GONE;
}

/*
 * A grant's reply (acquire, handoff, takeover): {granted, n} or {granted,
 * n, more}.  max: the highest granted its script answers (3, another
 * kind, from acquire scripts only).  A grant (1) waiting for replica acks
 * is parked, its token kept.
 */
static int
grant_decode(struct call *c, const redisReply *r, int can_park, int max)
{
	long more;

	if (r == NULL) {
		c->fn.acquire(c->arg, 0, 0, 0, 0);
		return 0;
	}
	/* a grant's third element: tokens set aside after it */
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
	    r->elements > 3 || !resp_is_int(r->element[0]) ||
	    !resp_is_int(r->element[1]) || (r->elements == 3 &&
	    !resp_is_int(r->element[2])))
		return -1;
	/* (of a shared attempt not granted: the writers it came after,
	 * sacquire.lua) */
	more = r->elements == 3 && (r->element[0]->integer == 1 ||
	    r->element[0]->integer == 0) &&
	    r->element[2]->integer > 0 ? (long)r->element[2]->integer : 0;
	if (r->element[0]->integer < -1 || r->element[0]->integer > max)
		return -1;
	if (can_park && r->element[0]->integer == 1) {
		c->token = r->element[1]->integer;
		return 1;
	}
	c->fn.acquire(c->arg, 1, (int)r->element[0]->integer,
	    r->element[1]->integer, more);
	return 0;
}

static int
acquire_decode(struct call *c, const redisReply *r, int can_park)
{
	return grant_decode(c, r, can_park, 3);
}

/* takeover.lua: {granted, token} or {1, token, text}, text the hold's
 * value (shown only as the broker checks values: printable, at most
 * STORE_VALUE_MAX bytes). */
static int
takeover_decode(struct call *c, const redisReply *r, int can_park)
{
	const redisReply *text;

	(void)can_park;
	if (r == NULL) {
		c->fn.takeover(c->arg, 0, 0, 0, NULL, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
	    r->elements > 3 || !resp_is_int(r->element[0]) ||
	    !resp_is_int(r->element[1]) || r->element[0]->integer < 0 ||
	    r->element[0]->integer > 1)
		return -1;
	text = r->elements == 3 ? r->element[2] : NULL;
	if (text != NULL && (text->type != REDIS_REPLY_STRING ||
	    text->len > STORE_VALUE_MAX || !printable(text->str,
	    (size_t)text->len)))
		text = NULL;
	c->fn.takeover(c->arg, 1, (int)r->element[0]->integer,
	    r->element[1]->integer, text != NULL ? text->str : NULL,
	    text != NULL ? (size_t)text->len : 0);
	return 0;
}

/* release, forget, linger, wmark, pass (store_pass_fn is of the same
 * type), and a grant's undo: what Redis showed of the hold */
static int
release_decode(struct call *c, const redisReply *r, int can_park)
{
	(void)can_park;
	if (r == NULL) {
		c->fn.release(c->arg, 0, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_INTEGER)
		return -1;
	c->fn.release(c->arg, 1, found_of(r->integer));
	return 0;
}

static int
renew_decode(struct call *c, const redisReply *r, int can_park)
{
	int done[STORE_RENEW_BATCH];

	(void)can_park;
	if (r == NULL) {
		c->fn.renew(c->arg, 0, NULL, c->nrenew);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != c->nrenew)
		return -1;
	for (size_t i = 0; i < r->elements; i++) {
		if (!resp_is_int(r->element[i]))
			return -1;
		done[i] = (int)r->element[i]->integer;
	}
	c->fn.renew(c->arg, 1, done, c->nrenew);
	return 0;
}

/* --- routing ----------------------------------------------------------- */

/*
 * Where a call goes, worked out once per call: the master, the slot (-1
 * in single and Sentinel mode) and the tag that closes the slot's own
 * key and channel names, which end in "{" in cluster mode (store_new):
 * tag = "<tag>}", "" otherwise.
 */
struct route {
	struct node *node;		/* NULL: no master known */
	int slot;
	size_t taglen;
	char tag[SLOT_TAG_MAX + 2];
};

static void
route_slot(const struct store *st, int slot, struct route *r)
{
	const struct topo *tp = &st->topo;

	r->slot = slot;
	r->node = tp->ops->node_of(tp->t, slot);
	if (slot < 0) {
		r->tag[0] = '\0';
		r->taglen = 0;
		return;
	}
	r->taglen = (size_t)snprintf(r->tag, sizeof r->tag, "%s}",
	    slot_tag((unsigned)slot));
}

int
calls_key_slot(const struct store *st, const char *key, size_t keylen)
{
	return !st->topo.sharded ? -1 :
	    (int)slot_of(st->keys.lockpfx, st->keys.lockpfxlen, key, keylen);
}

static void
route_of(const struct store *st, const char *key, size_t keylen,
    struct route *r)
{
	route_slot(st, calls_key_slot(st, key, keylen), r);
}

/* Sentinel mode: whether the lease allows grants and renewals (always,
 * in the other modes). */
static int
may_grant(const struct store *st)
{
	return st->topo.ops->may_grant(st->topo.t);
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

/* --- cluster redirections -------------------------------------------- */

static int
has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/*
 * "MOVED <slot> <host>:<port>" or "ASK ...": follow it.  An empty host
 * means the host of the node that answered.  0 when c is on its way
 * again; -1 to fail it (malformed, too many redirections, no node).
 */
static int
redirect(struct call *c, const char *err, int ask)
{
	struct store *st = c->st;
	const struct topo *tp = &st->topo;
	const char *sp = strchr(err, ' '), *hp, *colon;
	char host[ADDR_HOST_LEN], *end;
	long slot, port;
	struct node *to;
	size_t hl;

	if (sp == NULL)
		return -1;
	slot = strtol(sp + 1, &end, 10);
	if (end == sp + 1 || *end != ' ' || slot < 0 || slot >= SLOT_COUNT)
		return -1;
	hp = end + 1;
	if ((colon = strrchr(hp, ':')) == NULL)
		return -1;
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || port <= 0 || port > 65535)
		return -1;
	hl = (size_t)(colon - hp);
	if (hl > 0 && hp[0] == '[' && hp[hl - 1] == ']') {
		hp++;
		hl -= 2;
	}
	if (hl == 0) {
		hp = c->cmd.node->host;
		hl = strlen(hp);
	}
	if (hl >= sizeof host)
		return -1;
	memcpy(host, hp, hl);
	host[hl] = '\0';
	c->cmd.node->redirects++;
	st->env.redirects++;
	tp->ops->refresh(tp->t);
	if (++c->redirects > CLUSTER_REDIRECTS) {
		log_warn("%s for slot %ld: more than %d redirections, given up",
		    ask ? "ASK" : "MOVED", slot, CLUSTER_REDIRECTS);
		return -1;
	}
	to = ask ? tp->ops->asked(tp->t, host, (int)port) :
	    tp->ops->moved(tp->t, (int)slot, host, (int)port);
	if (to == NULL)
		return -1;
	c->cmd.asking = ask;
	return node_call(to, &c->cmd);
}

static int retry_later(struct call *c);

static void
retry_fire(evutil_socket_t fd, short what, void *arg)
{
	struct call *c = arg, **pp;
	struct store *st = c->st;
	const struct topo *tp = &st->topo;
	struct node *n;

	(void)fd;
	(void)what;
	for (pp = &st->retrying; *pp != NULL; pp = &(*pp)->rnext)
		if (*pp == c) {
			*pp = c->rnext;
			break;
		}
	c->rnext = NULL;
	c->redirects = 0;	/* a fresh try, by the map */
	n = tp->ops->node_of(tp->t, c->slot);
	if (n != NULL && node_usable(n)) {
		if (node_call(n, &c->cmd) == 0)
			return;
	} else if (retry_later(c) == 0) {
		return;		/* no master for it yet: wait on */
	}
	c->decode(c, NULL, 0);
	call_free(c);
}

/*
 * TRYAGAIN (a migration has the keys of c's slot on both sides) or
 * CLUSTERDOWN (no master serves the slot now): ask again later, routed
 * by the map again, until redis_timeout_ms after c was made.  0 when
 * scheduled.
 */
static int
retry_later(struct call *c)
{
	struct store *st = c->st;
	int64_t left = c->cmd.born_ms + st->cfg.timeout_ms - now_ms();

	if (c->slot < 0 || left <= 0)
		return -1;
	if (c->retry_ev == NULL &&
	    (c->retry_ev = evtimer_new(st->base, retry_fire, c)) == NULL)
		return -1;
	c->retry_ms = c->retry_ms == 0 ? RETRY_MIN_MS :
	    c->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : c->retry_ms * 2;
	timer_add_ms(c->retry_ev, c->retry_ms < left ? c->retry_ms : left);
	c->cmd.asking = 0;
	c->rnext = st->retrying;
	st->retrying = c;
	return 0;
}

/* Cluster error replies a call survives: 0 when c is on its way again. */
static int
cluster_error(struct call *c, const char *err)
{
	const struct topo *tp = &c->st->topo;

	if (has_prefix(err, "MOVED "))
		return redirect(c, err, 0);
	if (has_prefix(err, "ASK "))
		return redirect(c, err, 1);
	if (has_prefix(err, "CLUSTERDOWN")) {
		tp->ops->refresh(tp->t);
		return retry_later(c);
	}
	if (has_prefix(err, "TRYAGAIN"))
		return retry_later(c);
	return -1;
}

/* --- calls ------------------------------------------------------------ */

/*
 * Redis answered c (node.c: a library or script gone, and the batch, are
 * taken care of), or
 * could not (r NULL): follow a cluster redirection, log an error reply,
 * or decode it for the caller, parking a grant in its WAIT's group.
 */
static int
call_reply(struct cmd *cmd, const redisReply *r, int can_park)
{
	struct call *c = (struct call *)cmd;
	struct store *st = c->st;
	struct node *n = cmd->node;
	int rc;

	if (r == NULL) {
		c->decode(c, NULL, 0);
		call_free(c);
		return CMD_DONE;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		if (st->topo.sharded && cluster_error(c, r->str) == 0)
			return CMD_DONE;	/* on its way again */
		error_logged(st, scripts[cmd->script].name, r->str);
		c->decode(c, NULL, 0);
		call_free(c);
		if (strncmp(r->str, "READONLY", 8) == 0)
			node_kill(n, "Redis is a replica now");
		return CMD_DONE;
	}
	if ((rc = c->decode(c, r, can_park)) == 1)
		return CMD_PARK;	/* until its WAIT answers */
	if (rc != 0) {
		log_error("unexpected reply shape from %s (type %d)",
		    scripts[cmd->script].name, r->type);
		c->decode(c, NULL, 0);
	}
	call_free(c);
	return CMD_DONE;
}

/* One script call routed by r; NULL when its master is not up. */
static struct call *
call_new(struct store *st, const struct route *r, call_decode_fn *decode,
    enum script_id script, int nkeys, const struct piece *p, int np)
{
	struct call *c;

	if (!node_usable(r->node))
		return NULL;
	c = (struct call *)cmd_new(sizeof *c, script, nkeys, p, np);
	c->cmd.reply = call_reply;
	c->cmd.node = r->node;
	c->st = st;
	c->decode = decode;
	c->slot = r->slot;
	return c;
}

/* Start c; -1 (c freed, its callback never called) when it cannot go. */
static int
call_start(struct call *c)
{
	if (node_call(c->cmd.node, &c->cmd) == 0)
		return 0;
	call_free(c);
	return -1;
}

/* --- replica acknowledgement ------------------------------------------ */

static size_t side_prefix(const char *base, const struct route *r, char *buf,
    size_t buflen);

/*
 * The undo of grant c ran (or not): only now is its caller told, -2
 * either way.  The caller also frees the key by owner later (a pending
 * forget, a no-op when this undo worked), so a grant nobody was told of
 * never stays for its whole TTL when the undo itself is refused.
 */
static void
undo_done(void *arg, int ok, int released)
{
	struct call *c = arg;

	if (!ok)
		log_warn("could not undo a grant replicas did not acknowledge; "
		    "it is freed by owner later");
	else if (released != STORE_DONE)
		log_debug("undone grant was already gone");
	c->fn.acquire(c->arg, 1, -2, 0, 0);
	call_free(c);
}

/*
 * A grant WAIT did not confirm: free it again (release.lua by its value),
 * so no one holds a lock a failover could hand to another.  -1 when the
 * release cannot even be sent.
 */
static int
group_undo(struct call *c)
{
	struct store *st = c->st;
	const char **argv = c->cmd.argv;
	const size_t *argvlen = c->cmd.argvlen;
	char token[24], vk[256];
	struct route r;
	struct piece p[5];
	struct call *u;
	const char *name = argv[3] + st->keys.lockpfxlen;
	size_t namelen = argvlen[3] - st->keys.lockpfxlen;

	route_slot(st, c->slot, &r);
	r.node = c->cmd.node;	/* where the grant was made, map or not */
	p[0] = (struct piece){ argv[3], argvlen[3], NULL, 0 };
	/* a value the grant wrote goes with it */
	p[1] = (struct piece){ vk, side_prefix(st->keys.values, &r, vk,
	    sizeof vk), name, namelen };
	value_piece(&p[2], argv[c->owner_arg], argvlen[c->owner_arg],
	    c->token, token, sizeof token);
	p[3] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r.tag, r.taglen };
	p[4] = (struct piece){ name, namelen, NULL, 0 };
	if ((u = call_new(st, &r, release_decode, SCRIPT_RELEASE, 2, p,
	    5)) == NULL)
		return -1;
	u->fn.release = undo_done;
	u->arg = c;			/* answered and freed by undo_done */
	return call_start(u);
}

/* A parked grant's WAIT answered (node.h's cmd_acked_fn). */
static int
grant_acked(struct cmd *cmd, int ok)
{
	struct call *c = (struct call *)cmd;

	if (ok == 1)
		c->fn.acquire(c->arg, 1, 1, c->token, 0);
	else if (ok == 0 && group_undo(c) == 0)
		return 1;	/* undo_done answers and frees it */
	else		/* unknown: the caller forgets it */
		c->fn.acquire(c->arg, 0, 0, 0, 0);
	call_free(c);
	return 0;
}

/* --- the calls of store.h ---------------------------------------------- */

/* Build and start one script call routed by r; -1 (nothing started)
 * when its master is not up. */
static int
script_call(struct store *st, const struct route *r, call_decode_fn *decode,
    enum script_id script, int nkeys, const struct piece *p, int np,
    union call_fn fn, void *arg)
{
	struct call *c = call_new(st, r, decode, script, nkeys, p, np);

	if (c == NULL)
		return -1;
	c->fn = fn;
	c->arg = arg;
	return call_start(c);
}

/* A grant script (acquire, handoff): the new owner is at argv index
 * owner_arg, so a grant WAIT did not confirm can be undone by value. */
static int
grant_call(struct store *st, const struct route *r, enum script_id script,
    int nkeys, const struct piece *p, int np, int owner_arg, int tenure_arg,
    store_acquire_fn *fn, void *arg)
{
	struct call *c = call_new(st, r, acquire_decode, script, nkeys, p, np);

	if (c == NULL)
		return -1;
	c->cmd.acked = grant_acked;
	c->fn.acquire = fn;
	c->arg = arg;
	c->owner_arg = owner_arg;
	c->cmd.tenure_arg = tenure_arg;
	return call_start(c);
}

/*
 * Cluster mode's last arguments of grant and reassert scripts: the
 * master's replication ids and the lock delay (lib/slot_tenure.lua), as
 * placeholders: node.c fills them from the master the call is sent to,
 * which a redirection may change.  Returns the count added.
 */
static int
tenure_pieces(struct piece *p)
{
	for (int i = 0; i < TENURE_ARGS; i++)
		p[i] = (struct piece){ NULL, 0, NULL, 0 };
	return TENURE_ARGS;
}

/*
 * The keys of a grant script: the lock, its counter and lock delay, and
 * in cluster mode the slot's tenure (those of the key's slot, r).
 * single_nk: how many of them the script takes in single and Sentinel
 * mode.  Returns the count set in p.
 */
static int
grant_keys(const struct store *st, const char *key, size_t keylen,
    const struct route *r, int single_nk, struct piece *p)
{
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	p[1] = (struct piece){ st->keys.fence, strlen(st->keys.fence), r->tag,
	    r->taglen };
	p[2] = (struct piece){ st->keys.delay, strlen(st->keys.delay), r->tag,
	    r->taglen };
	p[3] = (struct piece){ st->keys.tenure, strlen(st->keys.tenure), r->tag,
	    r->taglen };
	return r->slot < 0 ? single_nk : 4;
}

/*
 * The name of a key's writer marks (wmark.lua) into buf: "<prefix>:
 * writers:" and the key, in cluster mode with the slot's tag between, so
 * the marks live in the lock's slot.  Returns the length of what comes
 * before the key.
 */
static size_t
side_prefix(const char *base, const struct route *r, char *buf,
    size_t buflen)
{
	int n = snprintf(buf, buflen, "%s%s%.*s", base, r->slot >= 0 ?
	    "{" : "", (int)r->taglen, r->tag);

	return n < 0 ? 0 : (size_t)n < buflen ? (size_t)n : buflen - 1;
}

static size_t
writers_prefix(const struct store *st, const struct route *r, char *buf,
    size_t buflen)
{
	return side_prefix(st->keys.writers, r, buf, buflen);
}

/*
 * The first two keys of value.lua and owner.lua ... VALUE: the lock key
 * and its value key ("<prefix>:value:", in cluster mode the slot's tag,
 * the key: in the lock's slot), routed to the key's node.  vk holds the
 * value key's prefix (256 bytes).
 */
static void
value_keys(struct store *st, const char *key, size_t keylen,
    struct route *r, struct piece *p, char *vk)
{
	route_of(st, key, keylen, r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	p[1] = (struct piece){ vk, side_prefix(st->keys.values, r, vk, 256),
	    key, keylen };
}

/*
 * Buffers for the names of a key's value key and watch mark (protocol
 * 1.2), which grant scripts take after their own keys.
 */
struct side_names {
	char vk[256], wk[256];
};

/* Add the key's watch mark to p (a grant reads whether watchers wait for
 * news), and its value key when the grant writes a value or deletes the
 * replaced hold's (with_value): keys nobody watches and holds without
 * values cost their scripts as little as before values.  Returns how many
 * (lib/holders.lua, grant_extras). */
static int
watch_keys(const struct store *st, const char *key, size_t keylen,
    const struct route *r, struct piece *p, struct side_names *b,
    int with_value)
{
	p[0] = (struct piece){ b->wk, side_prefix(st->keys.watched, r, b->wk,
	    sizeof b->wk), key, keylen };
	if (!with_value)
		return 1;
	p[1] = (struct piece){ b->vk, side_prefix(st->keys.values, r, b->vk,
	    sizeof b->vk), key, keylen };
	return 2;
}

/* pass.lua's arguments after its own: the release channel, the lock name
 * and the value text (none: left out; acquire.lua and handoff.lua take
 * the text alone, and find the channel and the name in their own
 * arguments).  Returns how many. */
static int
watch_args(const struct store *st, const char *key, size_t keylen,
    const struct route *r, struct piece *p, const char *text, size_t textlen)
{
	p[0] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r->tag, r->taglen };
	p[1] = (struct piece){ key, keylen, NULL, 0 };
	if (textlen == 0)
		return 2;
	p[2] = (struct piece){ text, textlen, NULL, 0 };
	return 3;
}

/*
 * Tokens a grant may set aside for local hand-offs (store_pass): none
 * with redis_replica_acks, where a grant counts only once replicas have
 * it, which a hand-off Redis hears of afterwards cannot wait for.
 */
static long
reserve_of(const struct store *st, long reserve)
{
	return st->cfg.acks > 0 || reserve < 0 ? 0 :
	    reserve > STORE_RESERVE_MAX ? STORE_RESERVE_MAX : reserve;
}

/*
 * acquire.lua (exclusive) or sacquire.lua (shared, a permit: ARGV[6] is the
 * kind); both take the owner as ARGV[1], so a grant WAIT did not confirm is
 * undone by value alike (group_undo).
 */
int
store_acquire(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long kind, long ttl_ms, int will_wait,
    long reserve, long long seen, const char *text, size_t textlen,
    store_acquire_fn *fn, void *arg)
{
	char ttl[24], kd[24], rs[24], sn[24], wk[256];
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms), ta = 0, nk, np;
	int kl = snprintf(kd, sizeof kd, "%ld", kind);
	int rl = snprintf(rs, sizeof rs, "%ld", reserve_of(st, reserve));
	int sl = snprintf(sn, sizeof sn, "%lld", kind == 0 ? seen : 0);
	struct side_names sides;
	struct piece p[24];
	struct route r;

	if (kind < STORE_EXCLUSIVE || !may_grant(st) ||
	    (kind != STORE_EXCLUSIVE && textlen > 0))
		return -1;

	route_of(st, key, keylen, &r);
	np = nk = grant_keys(st, key, keylen, &r, 3, p);
	if (kind != STORE_EXCLUSIVE) {
		/* sacquire.lua: the writers waiting (wmark.lua) */
		p[np++] = (struct piece){ wk, writers_prefix(st, &r, wk,
		    sizeof wk), key, keylen };
		nk++;
	}
	nk += watch_keys(st, key, keylen, &r, &p[np], &sides, textlen > 0);
	np = nk;
	p[np++] = (struct piece){ owner, ownerlen, NULL, 0 };
	p[np++] = (struct piece){ ttl, (size_t)tl, NULL, 0 };
	p[np++] = (struct piece){ st->keys.wanted, strlen(st->keys.wanted), r.tag,
	    r.taglen };
	p[np++] = (struct piece){ kind == STORE_EXCLUSIVE ? st->keys.idsp :
	    st->keys.idplus, STORE_ID_LEN + 1, key, keylen };
	p[np++] = (struct piece){ will_wait ? "1" : "0", 1, NULL, 0 };
	if (kind != STORE_EXCLUSIVE) {
		p[np++] = (struct piece){ kd, (size_t)kl, NULL, 0 };
		p[np++] = (struct piece){ sn, (size_t)sl, NULL, 0 };
	} else {
		p[np++] = (struct piece){ rs, (size_t)rl, NULL, 0 };
	}
	if (r.slot >= 0) {
		ta = 3 + np;
		np += tenure_pieces(&p[np]);
	}
	if (textlen > 0)
		p[np++] = (struct piece){ text, textlen, NULL, 0 };
	return grant_call(st, &r, kind == STORE_EXCLUSIVE ? SCRIPT_ACQUIRE :
	    SCRIPT_SACQUIRE, nk, p, np, 3 + nk, ta, fn, arg);
}

int
store_handoff(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token,
    const char *next_owner, size_t next_ownerlen, long ttl_ms, long reserve,
    const char *text, size_t textlen, int had_value, store_acquire_fn *fn,
    void *arg)
{
	char ttl[24], tok[24], rs[24];
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms), ta = 0, nk, np;
	int rl = snprintf(rs, sizeof rs, "%ld", reserve_of(st, reserve));
	struct side_names sides;
	struct piece p[24];
	struct route r;

	if (!may_grant(st))
		return -1;
	route_of(st, key, keylen, &r);
	np = nk = grant_keys(st, key, keylen, &r, 2, p);
	nk += watch_keys(st, key, keylen, &r, &p[np], &sides,
	    textlen > 0 || had_value);
	np = nk;
	value_piece(&p[np++], owner, ownerlen, token, tok, sizeof tok);
	p[np++] = (struct piece){ next_owner, next_ownerlen, NULL, 0 };
	p[np++] = (struct piece){ ttl, (size_t)tl, NULL, 0 };
	p[np++] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[np++] = (struct piece){ key, keylen, NULL, 0 };
	p[np++] = (struct piece){ rs, (size_t)rl, NULL, 0 };
	if (r.slot >= 0) {
		ta = 3 + np;
		np += tenure_pieces(&p[np]);
	}
	if (textlen > 0)
		p[np++] = (struct piece){ text, textlen, NULL, 0 };
	return grant_call(st, &r, SCRIPT_HANDOFF, nk, p, np, 3 + nk + 1, ta,
	    fn, arg);
}

int
store_wmark(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, int op, long ttl_ms,
    store_release_fn *fn, void *arg)
{
	char wk[256], num[24];
	struct route r;
	struct piece p[8];

	route_of(st, key, keylen, &r);
	p[0] = (struct piece){ wk, writers_prefix(st, &r, wk, sizeof wk), key,
	    keylen };
	p[1] = op == STORE_WMARK_WAIT ? (struct piece){ "wait", 4, NULL, 0 } :
	    (struct piece){ "leave", 5, NULL, 0 };
	p[2] = (struct piece){ owner, ownerlen, NULL, 0 };
	p[3] = (struct piece){ st->keys.idsp, STORE_ID_LEN, NULL, 0 };
	p[4] = (struct piece){ num, op == STORE_WMARK_WAIT ?
	    (size_t)snprintf(num, sizeof num, "%ld", ttl_ms) : 1, NULL, 0 };
	if (op != STORE_WMARK_WAIT)
		num[0] = op == STORE_WMARK_GAVE_UP ? '1' : '0';
	p[5] = (struct piece){ st->keys.wanted, strlen(st->keys.wanted), r.tag,
	    r.taglen };
	p[6] = (struct piece){ key, keylen, NULL, 0 };
	p[7] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	return script_call(st, &r, release_decode, SCRIPT_WMARK, 1, p, 8,
	    (union call_fn){ .release = fn }, arg);
}

int
store_release(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, int had_value,
    store_release_fn *fn, void *arg)
{
	char tok[24], vk[256];
	struct route r;
	struct piece p[5];
	int nk = had_value ? 2 : 1;

	value_keys(st, key, keylen, &r, p, vk);
	value_piece(&p[nk], owner, ownerlen, token, tok, sizeof tok);
	p[nk + 1] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r.tag, r.taglen };
	p[nk + 2] = (struct piece){ key, keylen, NULL, 0 };
	return script_call(st, &r, release_decode, SCRIPT_RELEASE, nk, p,
	    nk + 3, (union call_fn){ .release = fn }, arg);
}

int
store_pass(struct store *st, const char *key, size_t keylen,
    const char *prev_owner, size_t prev_ownerlen, long long prev_token,
    const char *owner, size_t ownerlen, long long token, long ttl_ms,
    const char *text, size_t textlen, int had_value, store_pass_fn *fn,
    void *arg)
{
	char prev[24], val[24], ttl[24];
	struct side_names sides;
	struct route r;
	struct piece p[9];
	int nk, np;

	if (!may_grant(st))
		return -1;
	route_of(st, key, keylen, &r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	nk = 1 + watch_keys(st, key, keylen, &r, &p[1], &sides,
	    textlen > 0 || had_value);
	value_piece(&p[nk], prev_owner, prev_ownerlen, prev_token, prev,
	    sizeof prev);
	value_piece(&p[nk + 1], owner, ownerlen, token, val, sizeof val);
	p[nk + 2] = (struct piece){ ttl, (size_t)snprintf(ttl, sizeof ttl,
	    "%ld", ttl_ms), NULL, 0 };
	np = nk + 3 + watch_args(st, key, keylen, &r, &p[nk + 3], text,
	    textlen);
	return script_call(st, &r, release_decode, SCRIPT_PASS, nk, p, np,
	    (union call_fn){ .release = fn }, arg);
}

int
store_forget(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, store_release_fn *fn, void *arg)
{
	char vk[256];
	struct route r;
	struct piece p[5];

	value_keys(st, key, keylen, &r, p, vk);
	p[2] = (struct piece){ owner, ownerlen, NULL, 0 };
	p[3] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[4] = (struct piece){ key, keylen, NULL, 0 };
	return script_call(st, &r, release_decode, SCRIPT_FORGET, 2, p, 5,
	    (union call_fn){ .release = fn }, arg);
}

/*
 * One renew (or reassert) call for items that all live in one slot (or,
 * single mode, on the one master).  Cluster mode's reassert also names
 * the slot's counter and tenure, for lib/slot_tenure.lua.
 */
static int
renew_call(struct store *st, const struct route *r,
    const struct store_renew_item *items, size_t n, int reassert,
    store_renew_fn *fn, void *arg)
{
	struct piece p[3 * STORE_RENEW_BATCH + 3 + TENURE_ARGS];
	/* "<ttl>" exclusive, "<ttl>:<kind>" shared or a permit */
	char ttls[STORE_RENEW_BATCH][48], toks[STORE_RENEW_BATCH][24];
	int cl = reassert && r->slot >= 0, ta = 0;
	size_t nk = !reassert ? n : cl ? n + 3 : n + 1, np = nk + 2 * n;
	struct call *c;

	if (n == 0 || n > STORE_RENEW_BATCH)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (items[i].kind < STORE_EXCLUSIVE)
			return -1;
	for (size_t i = 0; i < n; i++) {
		int tl = items[i].kind == STORE_EXCLUSIVE ?
		    snprintf(ttls[i], sizeof ttls[i], "%ld", items[i].ttl_ms) :
		    snprintf(ttls[i], sizeof ttls[i], "%ld:%ld",
		    items[i].ttl_ms, items[i].kind);
		p[i] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen,
		    items[i].key, items[i].keylen };
		value_piece(&p[nk + i], items[i].owner, items[i].ownerlen,
		    items[i].token, toks[i], sizeof toks[i]);
		p[nk + n + i] = (struct piece){ ttls[i], (size_t)tl, NULL, 0 };
	}
	if (reassert)
		p[n] = (struct piece){ st->keys.delay, strlen(st->keys.delay), r->tag,
		    r->taglen };
	if (cl) {
		p[n + 1] = (struct piece){ st->keys.fence, strlen(st->keys.fence),
		    r->tag, r->taglen };
		p[n + 2] = (struct piece){ st->keys.tenure, strlen(st->keys.tenure),
		    r->tag, r->taglen };
		ta = 3 + (int)np;
		np += (size_t)tenure_pieces(&p[np]);
	}
	if ((c = call_new(st, r, renew_decode, reassert ? SCRIPT_REASSERT :
	    SCRIPT_RENEW, (int)nk, p, (int)np)) == NULL)
		return -1;
	c->fn.renew = fn;
	c->arg = arg;
	c->nrenew = n;
	c->cmd.tenure_arg = ta;
	return call_start(c);
}

/*
 * Cluster mode: a renew batch is split by slot (a script's keys must
 * share one), and the caller answered once, when every part has.
 */
struct renew_gather {
	store_renew_fn *fn;
	void *arg;
	size_t n;
	unsigned left;			/* parts not answered yet */
	int anyok;
	int renewed[STORE_RENEW_BATCH];
};

struct renew_part {
	struct renew_gather *g;
	size_t n;
	unsigned short idx[STORE_RENEW_BATCH];	/* into the caller's items */
};

static void
gather_done(struct renew_gather *g)
{
	if (--g->left > 0)
		return;
	g->fn(g->arg, g->anyok, g->renewed, g->n);
	free(g);
}

static void
part_done(void *arg, int ok, const int *renewed, size_t n)
{
	struct renew_part *part = arg;
	struct renew_gather *g = part->g;

	for (size_t i = 0; ok && i < n && i < part->n; i++)
		g->renewed[part->idx[i]] = renewed[i];
	g->anyok |= ok;
	free(part);
	gather_done(g);
}

static int
renew_by_slot(struct store *st, const struct store_renew_item *items,
    size_t n, int reassert, store_renew_fn *fn, void *arg)
{
	unsigned short slotof[STORE_RENEW_BATCH];
	unsigned char done[STORE_RENEW_BATCH] = { 0 };
	struct store_renew_item sub[STORE_RENEW_BATCH];
	struct renew_gather *g = xcalloc(1, sizeof *g);

	g->fn = fn;
	g->arg = arg;
	g->n = n;
	g->left = 1;		/* this loop, until it is over */
	for (size_t i = 0; i < n; i++) {
		slotof[i] = (unsigned short)slot_of(st->keys.lockpfx, st->keys.lockpfxlen,
		    items[i].key, items[i].keylen);
		g->renewed[i] = -1;	/* unknown unless a part answers */
	}
	for (size_t i = 0; i < n; i++) {
		struct renew_part *part;
		struct route r;

		if (done[i])
			continue;
		route_slot(st, slotof[i], &r);
		part = xmalloc(sizeof *part);
		part->g = g;
		part->n = 0;
		for (size_t j = i; j < n; j++)
			if (!done[j] && slotof[j] == slotof[i]) {
				done[j] = 1;
				sub[part->n] = items[j];
				part->idx[part->n++] = (unsigned short)j;
			}
		g->left++;
		if (renew_call(st, &r, sub, part->n, reassert, part_done,
		    part) != 0) {
			g->left--;	/* its master is down: unknown */
			free(part);
		}
	}
	if (g->left == 1 && !g->anyok) {
		free(g);	/* nothing went out: as if Redis were down */
		return -1;
	}
	gather_done(g);
	return 0;
}

int
store_renew(struct store *st, const struct store_renew_item *items, size_t n,
    int reassert, store_renew_fn *fn, void *arg)
{
	struct route r;

	if (n == 0 || n > STORE_RENEW_BATCH || !may_grant(st))
		return -1;
	if (st->topo.sharded)
		return renew_by_slot(st, items, n, reassert, fn, arg);
	route_slot(st, -1, &r);
	return renew_call(st, &r, items, n, reassert, fn, arg);
}

int
store_owner(struct store *st, const char *key, size_t keylen,
    store_owner_fn *fn, void *arg)
{
	struct piece p[1] = { { st->keys.lockpfx, st->keys.lockpfxlen, key, keylen } };
	struct route r;

	route_of(st, key, keylen, &r);
	return script_call(st, &r, owner_decode, SCRIPT_OWNER, 1, p, 1,
	    (union call_fn){ .owner = fn }, arg);
}

int
store_value(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, const char *text,
    size_t textlen, store_release_fn *fn, void *arg)
{
	char vk[256], wk[256], tok[24];
	struct route r;
	struct piece p[7];

	value_keys(st, key, keylen, &r, p, vk);
	p[2] = (struct piece){ wk, side_prefix(st->keys.watched, &r, wk,
	    sizeof wk), key, keylen };
	value_piece(&p[3], owner, ownerlen, token, tok, sizeof tok);
	p[4] = (struct piece){ text, textlen, NULL, 0 };
	p[5] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[6] = (struct piece){ key, keylen, NULL, 0 };
	return script_call(st, &r, release_decode, SCRIPT_VALUE, 3, p, 7,
	    (union call_fn){ .release = fn }, arg);
}

/* owner.lua with the value key as KEYS[2]. */
int
store_owner_value(struct store *st, const char *key, size_t keylen,
    store_owner_fn *fn, void *arg)
{
	char vk[256];
	struct route r;
	struct piece p[2];

	value_keys(st, key, keylen, &r, p, vk);
	return script_call(st, &r, owner_decode, SCRIPT_OWNER, 2, p, 2,
	    (union call_fn){ .owner = fn }, arg);
}

/* watch.lua: the holders as owner.lua ... VALUE reads them, and the
 * key's watch mark set for mark_ms (0: not touched). */
int
store_watch(struct store *st, const char *key, size_t keylen, long mark_ms,
    store_owner_fn *fn, void *arg)
{
	char vk[256], wk[256], ms[24];
	struct route r;
	struct piece p[4];

	value_keys(st, key, keylen, &r, p, vk);
	p[2] = (struct piece){ wk, side_prefix(st->keys.watched, &r, wk,
	    sizeof wk), key, keylen };
	p[3] = (struct piece){ ms, (size_t)snprintf(ms, sizeof ms, "%ld",
	    mark_ms > 0 ? mark_ms : 0), NULL, 0 };
	return script_call(st, &r, owner_decode, SCRIPT_WATCH, 3, p, 4,
	    (union call_fn){ .owner = fn }, arg);
}

/* check.lua: {1} current, {0, token} stale (-1: free). */
static int
check_decode(struct call *c, const redisReply *r, int can_park)
{
	(void)can_park;
	if (r == NULL) {
		c->fn.check(c->arg, 0, 0, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
	    !resp_is_int(r->element[0]))
		return -1;
	if (r->element[0]->integer == 1) {
		c->fn.check(c->arg, 1, 1, 0);
		return 0;
	}
	if (r->elements != 2 || !resp_is_int(r->element[1]))
		return -1;
	c->fn.check(c->arg, 1, 0, r->element[1]->integer > 0 ?
	    r->element[1]->integer : 0);
	return 0;
}

int
store_check(struct store *st, const char *key, size_t keylen,
    long long token, store_check_fn *fn, void *arg)
{
	char num[24];
	int l = snprintf(num, sizeof num, "%lld", token);
	struct piece p[2] = {
		{ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen },
		{ num, (size_t)l, NULL, 0 },
	};
	struct route r;

	route_of(st, key, keylen, &r);
	return script_call(st, &r, check_decode, SCRIPT_CHECK, 1, p, 2,
	    (union call_fn){ .check = fn }, arg);
}

int
store_linger(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, long linger_ms,
    int had_value, store_release_fn *fn, void *arg)
{
	char tok[24], ms[24], vk[256];
	int ml = snprintf(ms, sizeof ms, "%ld", linger_ms);
	struct route r;
	struct piece p[6];
	int nk = had_value ? 2 : 1;

	value_keys(st, key, keylen, &r, p, vk);
	value_piece(&p[nk], owner, ownerlen, token, tok, sizeof tok);
	p[nk + 1] = (struct piece){ ms, (size_t)ml, NULL, 0 };
	p[nk + 2] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r.tag, r.taglen };
	p[nk + 3] = (struct piece){ key, keylen, NULL, 0 };
	return script_call(st, &r, release_decode, SCRIPT_LINGER, nk, p,
	    nk + 4, (union call_fn){ .release = fn }, arg);
}

/* Record arguments per call: 7 + 2 per key, for max_locks_per_session
 * up to its largest value and then some. */
#define SESSION_ARGS_MAX (1 << 22)

int
store_session(struct store *st, const char *cid, size_t cidlen,
    const struct store_str *args, size_t nargs, store_session_fn *fn,
    void *arg)
{
	struct piece *p;
	struct route r;
	int rc;

	if (nargs + 1 > SESSION_ARGS_MAX)
		return -1;
	route_slot(st, !st->topo.sharded ? -1 :
	    (int)slot_of(st->keys.sesspfx, st->keys.sesspfxlen, cid, cidlen),
	    &r);
	p = xcalloc(nargs + 1, sizeof *p);
	p[0] = (struct piece){ st->keys.sesspfx, st->keys.sesspfxlen, cid, cidlen };
	for (size_t i = 0; i < nargs; i++)
		p[i + 1] = (struct piece){ args[i].p, args[i].len, NULL, 0 };
	rc = script_call(st, &r, session_decode, SCRIPT_SESSION, 1, p,
	    (int)nargs + 1, (union call_fn){ .session = fn }, arg);
	free(p);
	return rc;
}

int
store_takeover(struct store *st, const char *key, size_t keylen,
    const char *cid, size_t cidlen, unsigned long gen, long ttl_ms,
    store_takeover_fn *fn, void *arg)
{
	char g[24], ttl[24], vk[256];
	int gl = snprintf(g, sizeof g, "%lu", gen);
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms);
	struct route r;
	struct piece p[5];

	if (!may_grant(st))
		return -1;
	value_keys(st, key, keylen, &r, p, vk);
	p[2] = (struct piece){ cid, cidlen, NULL, 0 };
	p[3] = (struct piece){ g, (size_t)gl, NULL, 0 };
	p[4] = (struct piece){ ttl, (size_t)tl, NULL, 0 };
	return script_call(st, &r, takeover_decode, SCRIPT_TAKEOVER, 2, p, 5,
	    (union call_fn){ .takeover = fn }, arg);
}

/* --- what the facade asks ---------------------------------------------- */

size_t
calls_retrying(const struct store *st)
{
	size_t sum = 0;

	for (const struct call *c = st->retrying; c != NULL; c = c->rnext)
		sum++;
	return sum;
}

void
calls_drop(struct store *st)
{
	struct call *c;

	while ((c = st->retrying) != NULL) {
		st->retrying = c->rnext;
		c->decode(c, NULL, 0);
		call_free(c);
	}
}
