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
#include "calls_int.h"
#include "log.h"
#include "resp.h"
#include "util.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERROR_LOG_MS 10000		/* quiet time between error logs */
#define CLUSTER_REDIRECTS 5		/* MOVED/ASK followed per call */
#define RETRY_MIN_MS 20			/* TRYAGAIN / CLUSTERDOWN backoff */
#define RETRY_MAX_MS 200

static int retry_later(struct call *c);

static void
call_free(struct call *c)
{
	node_cmd_done(&c->cmd);		/* (a cluster retry given up) */
	if (c->retry_ev != NULL)
		event_free(c->retry_ev);
	free(c);
}

/* The value format, "<client-id>:<token>", is known here only. */
int
calls_value_piece(struct piece *p, const char *owner, size_t ownerlen,
    long long token, char *buf, size_t buflen)
{
	int tl;

	assert(buflen >= FMT_LL_MAX + 1);	/* ':' and any long long */
	(void)buflen;
	buf[0] = ':';
	tl = 1 + fmt_ll(buf + 1, token);
	*p = (struct piece){ owner, ownerlen, buf, (size_t)tl };
	return tl;
}

void
calls_route_slot(const struct store *st, int slot, struct route *r)
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

void
calls_route_of(const struct store *st, const char *key, size_t keylen,
    struct route *r)
{
	calls_route_slot(st, calls_key_slot(st, key, keylen), r);
}

/* Sentinel mode: whether the lease allows grants and renewals (always,
 * in the other modes). */
int
calls_may_grant(const struct store *st)
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

/* One script call routed by r; NULL when its master is not up (a read:
 * nor being connected to, store_key_coming). */
struct call *
calls_new(struct store *st, const struct route *r, call_decode_fn *decode,
    enum script_id script, int nkeys, const struct piece *p, int np)
{
	struct call *c;

	if (!node_usable(r->node) && !(script_kind[script] == SCRIPT_READS &&
	    node_coming(r->node)))
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
int
calls_start(struct call *c)
{
	if (node_call(c->cmd.node, &c->cmd) == 0)
		return 0;
	call_free(c);
	return -1;
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

	calls_route_slot(st, c->slot, &r);
	r.node = c->cmd.node;	/* where the grant was made, map or not */
	p[0] = (struct piece){ argv[3], argvlen[3], NULL, 0 };
	/* a value the grant wrote goes with it */
	p[1] = (struct piece){ vk, calls_side_prefix(st->keys.values, &r, vk,
	    sizeof vk), name, namelen };
	calls_value_piece(&p[2], argv[c->owner_arg], argvlen[c->owner_arg],
	    c->token, token, sizeof token);
	p[3] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r.tag, r.taglen };
	p[4] = (struct piece){ name, namelen, NULL, 0 };
	if ((u = calls_new(st, &r, decode_release, SCRIPT_RELEASE, 2, p,
	    5)) == NULL)
		return -1;
	u->fn.release = undo_done;
	u->arg = c;			/* answered and freed by undo_done */
	return calls_start(u);
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

/* Build and start one script call routed by r; -1 (nothing started)
 * when its master is not up. */
int
calls_script(struct store *st, const struct route *r, call_decode_fn *decode,
    enum script_id script, int nkeys, const struct piece *p, int np,
    union call_fn fn, void *arg)
{
	struct call *c = calls_new(st, r, decode, script, nkeys, p, np);

	if (c == NULL)
		return -1;
	c->fn = fn;
	c->arg = arg;
	return calls_start(c);
}

/* A grant script (acquire, handoff): the new owner is at argv index
 * owner_arg, so a grant WAIT did not confirm can be undone by value. */
int
calls_grant(struct store *st, const struct route *r, enum script_id script,
    int nkeys, const struct piece *p, int np, int owner_arg, int tenure_arg,
    store_acquire_fn *fn, void *arg)
{
	struct call *c = calls_new(st, r, decode_acquire, script, nkeys, p, np);

	if (c == NULL)
		return -1;
	c->cmd.acked = grant_acked;
	c->fn.acquire = fn;
	c->arg = arg;
	c->owner_arg = owner_arg;
	c->cmd.tenure_arg = tenure_arg;
	return calls_start(c);
}

/*
 * The name of a key's writer marks (wmark.lua) into buf: "<prefix>:
 * writers:" and the key, in cluster mode with the slot's tag between, so
 * the marks live in the lock's slot.  Returns the length of what comes
 * before the key.
 */
size_t
calls_side_prefix(const char *base, const struct route *r, char *buf,
    size_t buflen)
{
	int n = snprintf(buf, buflen, "%s%s%.*s", base, r->slot >= 0 ?
	    "{" : "", (int)r->taglen, r->tag);

	return n < 0 ? 0 : (size_t)n < buflen ? (size_t)n : buflen - 1;
}

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
