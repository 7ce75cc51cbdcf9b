/*
 * store.c - the broker's Redis in lock terms: the Lua script calls.
 *
 * Every call is a script call on the pipelined command connection of its
 * key's master (at most STORE_MAX_INFLIGHT in flight per connection, the
 * rest queued), sent again once as EVAL after NOSCRIPT (a SCRIPT FLUSH, a
 * restart or a failover empties the script cache).  In single and
 * Sentinel mode the calls started in one event-loop turn leave together
 * at its end as one EVALSHA of the batch script (scripts/embed.sh), each
 * answered from its element of the reply as if it had gone alone; a call
 * alone goes as its own script's EVALSHA, and nothing waits for company
 * (issue 14; "batches" below says how and why).  With
 * redis_replica_acks, grants wait for one WAIT per connection and
 * event-loop turn (group commit).  In cluster mode a call follows MOVED
 * (to the slot's new master) and ASK (ASKING, then the call, to a
 * migration's target), and waits out TRYAGAIN and CLUSTERDOWN with
 * backoff until redis_timeout_ms after it was made.  Each master's
 * command link (link.c) is made, and its handshake defined, here; the
 * slot map lives in cluster.c.
 */
#include "store_int.h"
#include "lease.h"
#include "log.h"
#include "resp.h"
#include "sentinel.h"
#include "slot.h"
#include "sub.h"
#include "util.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define TENURE_ARGS 4	/* replid, replid2, the earlier replid, delay */

struct batch;

static int cmd_start(struct cmd *c);
static int batch_send(struct batch *b);
static void wait_reply(redisAsyncContext *ac, void *reply, void *privdata);
static void store_queue_run(struct node *n);
static void store_queue_fail(struct node *n);
static void store_serving(struct store *st);


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
	c->slot = -1;
	c->born_ms = now_ms();
	c->argc = argc;
	c->nkeys = nkeys;
	c->bytes = bytes + (size_t)argc * 16;	/* and RESP's framing */
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

static void
cmd_free(struct cmd *c)
{
	if (c->retry_ev != NULL)
		event_free(c->retry_ev);
	free(c);
}

/* Tell the caller Redis could not answer. */
static void
cmd_fail(struct cmd *c)
{
	switch (c->kind) {
	case K_ACQUIRE:
		c->fn.acquire(c->arg, 0, 0, 0, 0);
		break;
	case K_RELEASE:
	case K_UNDO:
		c->fn.release(c->arg, 0, 0);
		break;
	case K_PASS:
		c->fn.pass(c->arg, 0, 0);
		break;
	case K_RENEW:
		c->fn.renew(c->arg, 0, NULL, c->nrenew);
		break;
	case K_OWNER:
		c->fn.owner(c->arg, 0, STORE_EXCLUSIVE, NULL, 0, 0);
		break;
	case K_TAKEOVER:
		c->fn.acquire(c->arg, 0, 0, 0, 0);
		break;
	case K_SESSION:
		c->fn.session(c->arg, 0, 0, NULL, 0);
		break;
	}
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

	*h = (struct store_holder){ "?", 1, 0, pttl };
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
owner_deliver(struct cmd *c, const redisReply *r)
{
	struct store_holder h[STORE_OWNER_SHOWN];
	size_t n;

	if (r->type != REDIS_REPLY_ARRAY)
		return -1;
	if (r->elements == 0) {
		c->fn.owner(c->arg, 1, STORE_EXCLUSIVE, NULL, 0, 0);
		return 0;
	}
	if (r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING) {
		if (!resp_is_int(r->element[1]))
			return -1;
		holder_split(r->element[0]->str, (size_t)r->element[0]->len,
		    r->element[1]->integer, &h[0]);
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
session_deliver(struct cmd *c, redisReply *r)
{
	struct store_str *rest;
	char (*num)[24];
	size_t n;

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
		redisReply *e = r->element[i + 1];

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
 * Decode a script's reply for the caller: 0 delivered, 1 parked (a grant
 * waiting for its group's WAIT), -1 when its shape is wrong.
 */
static int
cmd_deliver(struct cmd *c, redisReply *r)
{
	long more;

	switch (c->kind) {
	case K_SESSION:
		return session_deliver(c, r);
	case K_TAKEOVER:
	case K_ACQUIRE:
		/* a grant's third element: tokens set aside after it */
		if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
		    r->elements > 3 || !resp_is_int(r->element[0]) ||
		    !resp_is_int(r->element[1]) || (r->elements == 3 &&
		    !resp_is_int(r->element[2])))
			return -1;
		/* (of a shared attempt not granted: the writers it came
		 * after, sacquire.lua) */
		more = r->elements == 3 && (r->element[0]->integer == 1 ||
		    r->element[0]->integer == 0) &&
		    r->element[2]->integer > 0 ? (long)r->element[2]->integer :
		    0;
		/* 3 (another kind) from acquire scripts only, never parked */
		if (r->element[0]->integer < -1 || r->element[0]->integer >
		    (c->kind == K_ACQUIRE ? 3 : 2))
			return -1;
		if (c->kind == K_ACQUIRE && c->group != NULL &&
		    r->element[0]->integer == 1) {
			c->token = r->element[1]->integer;
			c->gnext = c->group->parked;
			c->group->parked = c;
			return 1;
		}
		c->fn.acquire(c->arg, 1, (int)r->element[0]->integer,
		    r->element[1]->integer, more);
		return 0;
	case K_RELEASE:
	case K_UNDO:
		if (r->type != REDIS_REPLY_INTEGER)
			return -1;
		c->fn.release(c->arg, 1, found_of(r->integer));
		return 0;
	case K_PASS:
		if (r->type != REDIS_REPLY_INTEGER)
			return -1;
		c->fn.pass(c->arg, 1, found_of(r->integer));
		return 0;
	case K_RENEW: {
		int done[STORE_RENEW_BATCH];

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
	case K_OWNER:
		return owner_deliver(c, r);
	}
	return -1;
}

static int cmd_send(struct cmd *c);

/* Sentinel mode: whether the lease allows grants and renewals (always,
 * in the other modes). */
static int
lease_ok(const struct store *st)
{
	return st->lease == NULL || (lease_held(st->lease) &&
	    st->one->tenure_joined);
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
	r->slot = slot;
	if (slot < 0) {
		r->node = st->one;
		r->tag[0] = '\0';
		r->taglen = 0;
		return;
	}
	r->node = cluster_node_of(st->cl, (unsigned)slot);
	r->taglen = (size_t)snprintf(r->tag, sizeof r->tag, "%s}",
	    slot_tag((unsigned)slot));
}

static int
key_slot(const struct store *st, const char *key, size_t keylen)
{
	return st->cl == NULL ? -1 :
	    (int)slot_of(st->keys.lockpfx, st->keys.lockpfxlen, key, keylen);
}

static void
route_of(const struct store *st, const char *key, size_t keylen,
    struct route *r)
{
	route_slot(st, key_slot(st, key, keylen), r);
}

/* One script call routed by r; NULL when its master is not up. */
static struct cmd *
call_new(struct store *st, const struct route *r, enum cmd_kind kind,
    enum script_id script, int nkeys, const struct piece *p, int np)
{
	struct cmd *c;

	if (!node_usable(r->node))
		return NULL;
	c = cmd_new(st, kind, script, nkeys, p, np);
	c->node = r->node;
	c->slot = r->slot;
	return c;
}

/* Start c; -1 (c freed, its callback never called) when it cannot go. */
static int
call_start(struct cmd *c)
{
	if (cmd_start(c) == 0)
		return 0;
	cmd_free(c);
	return -1;
}

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

/* A grant sent this turn: the turn's WAIT on its connection covers it. */
static void
group_join(struct cmd *c)
{
	struct node *n = c->node;
	struct ackgroup *g = n->agroup;

	if (g == NULL) {
		g = xcalloc(1, sizeof *g);
		g->node = n;
		g->refs = 1;		/* the WAIT */
		n->agroup = g;
		event_active(n->ack_ev, EV_TIMEOUT, 0);
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
	else if (released != STORE_DONE)
		log_debug("undone grant was already gone");
	c->fn.acquire(c->arg, 1, -2, 0, 0);
	cmd_free(c);
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
	struct route r;
	struct piece p[4];
	struct cmd *u;

	route_slot(st, c->slot, &r);
	r.node = c->node;	/* where the grant was made, map or not */
	p[0] = (struct piece){ c->argv[3], c->argvlen[3], NULL, 0 };
	value_piece(&p[1], c->argv[c->owner_arg], c->argvlen[c->owner_arg],
	    c->token, token, sizeof token);
	p[2] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[3] = (struct piece){ c->argv[3] + st->keys.lockpfxlen,
	    c->argvlen[3] - st->keys.lockpfxlen, NULL, 0 };
	if ((u = call_new(st, &r, K_UNDO, SCRIPT_RELEASE, 1, p, 4)) == NULL)
		return -1;
	u->fn.release = undo_done;
	u->arg = c;			/* answered and freed by undo_done */
	return call_start(u);
}

/* The turn is over: one WAIT for every grant it sent on n. */
static void
ack_cb(evutil_socket_t fd, short what, void *arg)
{
	struct node *n = arg;
	struct store *st = n->st;
	struct ackgroup *g = n->agroup;

	(void)fd;
	(void)what;
	if (g == NULL)
		return;
	n->agroup = NULL;
	if (n->link.state == LINK_UP && n->link.ac != NULL &&
	    link_sendf(&n->link, wait_reply, g, "WAIT %ld %ld", st->cfg.acks,
	    st->cfg.ack_timeout_ms) == 0) {
		g->sent = 1;
		if (n->inflight++ == 0)
			n->last_progress_ms = now_ms();
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
	struct node *n = g->node;
	struct store *st = n->st;
	redisReply *r = reply;
	long long acked = -1;
	size_t undone = 0;
	struct cmd *c;

	(void)ac;
	n->inflight--;
	n->last_progress_ms = now_ms();
	if (r == NULL)
		link_dying(&n->link);
	if (r != NULL && r->type == REDIS_REPLY_INTEGER)
		acked = r->integer;
	while ((c = g->parked) != NULL) {
		g->parked = c->gnext;
		if (r == NULL) {
			cmd_fail(c);	/* unknown: the caller forgets it */
		} else if (acked >= st->cfg.acks) {
			c->fn.acquire(c->arg, 1, 1, c->token, 0);
		} else if (group_undo(c) == 0) {
			undone++;
			continue;	/* undo_done answers and frees it */
		} else {
			cmd_fail(c);
		}
		cmd_free(c);
	}
	if (undone > 0) {
		st->acks_missed += undone;
		log_warn("WAIT on %s: %lld of %ld replicas acknowledged; %zu "
		    "grants undone", n->link.addrstr, acked, st->cfg.acks,
		    undone);
	}
	if (r != NULL && r->type == REDIS_REPLY_ERROR)
		/* e.g. "WAIT cannot be used with replica instances" */
		link_kill(&n->link, "WAIT refused: no longer the master?");
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
redirect(struct cmd *c, const char *err, int ask)
{
	struct store *st = c->st;
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
		hp = c->node->host;
		hl = strlen(hp);
	}
	if (hl >= sizeof host)
		return -1;
	memcpy(host, hp, hl);
	host[hl] = '\0';
	c->node->redirects++;
	st->redirects++;
	cluster_refresh(st->cl);
	if (++c->redirects > CLUSTER_REDIRECTS) {
		log_warn("%s for slot %ld: more than %d redirections, given up",
		    ask ? "ASK" : "MOVED", slot, CLUSTER_REDIRECTS);
		return -1;
	}
	to = ask ? cluster_node_at(st->cl, host, (int)port) :
	    cluster_moved(st->cl, (unsigned)slot, host, (int)port);
	if (to == NULL)
		return -1;
	group_left(c);		/* a resend joins its new turn's group */
	c->node = to;
	c->asking = ask;
	return cmd_start(c);
}

static int retry_later(struct cmd *c);

static void
retry_fire(evutil_socket_t fd, short what, void *arg)
{
	struct cmd *c = arg, **pp;
	struct store *st = c->st;
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
	n = cluster_node_of(st->cl, (unsigned)c->slot);
	if (n != NULL && node_usable(n)) {
		c->node = n;
		if (cmd_start(c) == 0)
			return;
	} else if (retry_later(c) == 0) {
		return;		/* no master for it yet: wait on */
	}
	cmd_fail(c);
	cmd_free(c);
}

/*
 * TRYAGAIN (a migration has the keys of c's slot on both sides) or
 * CLUSTERDOWN (no master serves the slot now): ask again later, routed
 * by the map again, until redis_timeout_ms after c was made.  0 when
 * scheduled.
 */
static int
retry_later(struct cmd *c)
{
	struct store *st = c->st;
	int64_t left = c->born_ms + st->cfg.timeout_ms - now_ms();

	if (c->slot < 0 || left <= 0)
		return -1;
	if (c->retry_ev == NULL &&
	    (c->retry_ev = evtimer_new(st->base, retry_fire, c)) == NULL)
		return -1;
	c->retry_ms = c->retry_ms == 0 ? RETRY_MIN_MS :
	    c->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : c->retry_ms * 2;
	timer_add_ms(c->retry_ev, c->retry_ms < left ? c->retry_ms : left);
	group_left(c);
	c->asking = 0;
	c->rnext = st->retrying;
	st->retrying = c;
	return 0;
}

/* Cluster error replies a call survives: 0 when c is on its way again. */
static int
cluster_error(struct cmd *c, const char *err)
{
	if (has_prefix(err, "MOVED "))
		return redirect(c, err, 0);
	if (has_prefix(err, "ASK "))
		return redirect(c, err, 1);
	if (has_prefix(err, "CLUSTERDOWN")) {
		cluster_refresh(c->st->cl);
		return retry_later(c);
	}
	if (has_prefix(err, "TRYAGAIN"))
		return retry_later(c);
	return -1;
}

/* --- sending ----------------------------------------------------------- */

/* A call's argv (EVALSHA <sha> ...) as EVAL <text> ...: after NOSCRIPT
 * (a SCRIPT FLUSH or a restart emptied the cache), EVAL caches it again. */
static void
as_eval(const char **argv, size_t *argvlen, enum script_id script)
{
	argv[0] = "EVAL";
	argvlen[0] = 4;
	argv[1] = scripts[script].text;
	argvlen[1] = strlen(scripts[script].text);
}

/*
 * Redis answered c, alone or as its element of a batch's reply (c's
 * place in flight is given back already): send it again as EVAL after
 * NOSCRIPT, follow a cluster redirection, or decode it for the caller
 * (cmd_deliver), parking a grant in its group.
 */
static void
cmd_done(struct cmd *c, redisReply *r)
{
	struct store *st = c->st;
	struct node *n = c->node;
	int rc;

	if (r->type == REDIS_REPLY_ERROR && !c->retried &&
	    strncmp(r->str, "NOSCRIPT", 8) == 0 && n->link.state == LINK_UP) {
		group_left(c);	/* the resend joins the group of its turn */
		/* Script cache flushed: send the text once; EVAL caches it. */
		c->retried = 1;
		as_eval(c->argv, c->argvlen, c->script);
		log_info("script %s not cached in Redis %s: sent as EVAL",
		    scripts[c->script].name, n->link.addrstr);
		if (cmd_send(c) == 0)
			return;
		cmd_fail(c);
		cmd_free(c);
		return;
	}
	if (r->type == REDIS_REPLY_ERROR && st->cl != NULL &&
	    cluster_error(c, r->str) == 0)
		return;
	if (r->type == REDIS_REPLY_ERROR) {
		error_logged(st, scripts[c->script].name, r->str);
		group_left(c);
		cmd_fail(c);
		cmd_free(c);
		if (strncmp(r->str, "READONLY", 8) == 0)
			link_kill(&n->link, "Redis is a replica now");
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
	cmd_free(c);
}

static void
cmd_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct cmd *c = privdata;
	struct node *n = c->node;

	(void)ac;
	n->inflight--;
	n->last_progress_ms = now_ms();
	if (reply == NULL) {
		link_dying(&n->link);	/* before the caller reacts to it */
		group_left(c);
		cmd_fail(c);
		cmd_free(c);
		return;
	}
	store_queue_run(n);
	cmd_done(c, reply);
}

/*
 * Cluster mode: the tenure of the master c goes to (a redirection may
 * have changed it since the call was built), and what is left of the
 * lock delay since this broker joined that tenure: a slot first reached
 * long after a failover needs none, as every broker reasserted its locks
 * when it reached the new master.
 */
static void
cmd_tenure(struct cmd *c)
{
	struct node *n = c->node;
	const char *id[TENURE_ARGS] = { n->replid, n->replid2,
	    n->prev_replid, c->tenure_delay };
	long left;

	if (c->tenure_arg <= 0)
		return;
	left = c->st->cfg.lock_delay_ms - (long)(now_ms() - n->tenure_ms);
	snprintf(c->tenure_delay, sizeof c->tenure_delay, "%ld",
	    left > 0 ? left : 0);
	for (int i = 0; i < TENURE_ARGS; i++) {
		c->argv[c->tenure_arg + i] = id[i];
		c->argvlen[c->tenure_arg + i] = strlen(id[i]);
	}
}

/* c is on the wire (alone or in a batch): it holds a place in flight, and
 * a grant joins its turn's group commit (replica acks). */
static void
cmd_sent(struct cmd *c)
{
	struct node *n = c->node;

	if (n->inflight++ == 0)
		n->last_progress_ms = now_ms();
	if (c->kind == K_ACQUIRE && c->st->cfg.acks > 0)
		group_join(c);
}

static int
cmd_send(struct cmd *c)
{
	struct node *n = c->node;

	if (!node_usable(n) || n->link.ac == NULL)
		return -1;
	cmd_tenure(c);
	/* ASK: this one command, and only it, goes to the target */
	if (c->asking && link_sendf(&n->link, NULL, NULL, "ASKING") != 0)
		return -1;
	c->asking = 0;
	if (link_send(&n->link, cmd_reply, c, c->argc, c->argv, c->argvlen) !=
	    0)
		return -1;
	cmd_sent(c);
	return 0;
}

/* --- batches (issue 14) ------------------------------------------------ */

/*
 * Single and Sentinel mode send script calls in batches: the calls started
 * in one event-loop turn on a node go to Redis as one EVALSHA of the batch
 * script (scripts/embed.sh), which runs each as its own script would and
 * answers one element per call; each element is then handled exactly as
 * that call's own reply would be (cmd_done: errors, NOSCRIPT, the replica
 * ack group, cmd_deliver's decoding).  Redis then parses, looks up and
 * answers one command where it did up to STORE_BATCH_MAX, and the broker
 * writes and reads once.
 *
 * Nothing waits for company: calls wait in the node's queue (in the order
 * they were started) only until the end of the turn, when flush_ev sends
 * every one that has a place in flight, cut into batches of at most
 * STORE_BATCH_MAX calls and STORE_BATCH_BYTES; a call alone goes as its
 * own EVALSHA, as before batches.  Since every call leaves through the
 * queue, calls reach Redis in the order they were started, inside a
 * batch and from one batch to the next (a handoff and then a renewal of
 * its new holder depend on it).  A call of a batch counts as one in
 * flight (STORE_MAX_INFLIGHT, the watchdog, store_inflight): what is
 * bounded is the work Redis has been given, whatever its packing.
 *
 * Not in cluster mode: a script's keys must share one slot, so a batch
 * could only join calls of one slot, which calls on different lock names
 * rarely share (16384 slots), while a batch's MOVED, ASK or TRYAGAIN
 * would have to be taken apart and each call redirected on its own.  The
 * load is spread over the masters there anyway; each call goes alone.
 */
struct batch {
	struct node *node;
	struct cmd *head;		/* its calls, in order (qnext) */
	size_t n;
	int retried;			/* sent again as EVAL (NOSCRIPT) */
	int argc;
	const char **argv;		/* into the calls' own argv */
	size_t *argvlen;
};

#define BATCH_NUM 24			/* room for a count, written out */

static int
batching(const struct node *n)
{
	return n->st->cl == NULL;
}

/* Fail every call of b (the batch could not go, or the connection went
 * with it) and free it. */
static void
batch_fail(struct batch *b)
{
	struct cmd *c, *next;

	for (c = b->head; c != NULL; c = next) {
		next = c->qnext;
		group_left(c);
		cmd_fail(c);
		cmd_free(c);
	}
	free(b);
}

static void
batch_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct batch *b = privdata;
	struct node *n = b->node;
	redisReply *r = reply;
	struct cmd *c, *next;
	size_t i = 0;

	(void)ac;
	n->inflight -= b->n;
	n->last_progress_ms = now_ms();
	if (r == NULL) {
		link_dying(&n->link);	/* before the callers react to it */
		batch_fail(b);
		return;
	}
	store_queue_run(n);
	if (r->type == REDIS_REPLY_ERROR && !b->retried &&
	    strncmp(r->str, "NOSCRIPT", 8) == 0 && n->link.state == LINK_UP) {
		/* Script cache flushed: the whole batch again, as EVAL
		 * (which caches it), its calls in the same order. */
		for (c = b->head; c != NULL; c = c->qnext)
			group_left(c);	/* the resend joins its turn's group */
		b->retried = 1;
		as_eval(b->argv, b->argvlen, SCRIPT_BATCH);
		log_info("script batch not cached in Redis %s: sent as EVAL",
		    n->link.addrstr);
		if (batch_send(b) != 0)
			batch_fail(b);
		return;
	}
	if ((r->type != REDIS_REPLY_ARRAY || r->elements != b->n) &&
	    r->type != REDIS_REPLY_ERROR) {
		log_error("unexpected reply shape from batch (type %d)",
		    r->type);
		batch_fail(b);
		return;
	}
	/* An error for the whole batch (BUSY, LOADING, a second NOSCRIPT...)
	 * is every call's error, as each would have got it alone; callers
	 * treat it as any error reply (a grant's key is freed by owner
	 * later, should the batch have run part of the way). */
	for (c = b->head; c != NULL; c = next, i++) {
		next = c->qnext;
		cmd_done(c, r->type == REDIS_REPLY_ARRAY ? r->element[i] : r);
	}
	free(b);
}

/*
 * The n calls from head (linked by qnext, the last one's NULL) as one
 * batch call: EVALSHA <batch> <all keys> <keys...>, then per call its
 * script's name, its key count, its argument count and its arguments.
 * The pieces stay in the calls' own argv.
 */
static struct batch *
batch_new(struct node *n, struct cmd *head, size_t count)
{
	size_t argc = 3, nkeys = 0, k, a;
	struct batch *b;
	struct cmd *c;
	char *num;

	for (c = head; c != NULL; c = c->qnext) {
		cmd_tenure(c);
		argc += (size_t)c->argc;  /* EVALSHA sha nk: name nk na */
		nkeys += (size_t)c->nkeys;
	}
	b = xmalloc(sizeof *b + argc * (sizeof(char *) + sizeof(size_t)) +
	    (2 * count + 1) * BATCH_NUM);
	b->node = n;
	b->head = head;
	b->n = count;
	b->retried = 0;
	b->argc = (int)argc;
	b->argv = (const char **)(void *)(b + 1);
	b->argvlen = (size_t *)(void *)(b->argv + argc);
	num = (char *)(b->argvlen + argc);
	b->argv[0] = "EVALSHA";
	b->argvlen[0] = 7;
	b->argv[1] = scripts[SCRIPT_BATCH].sha;
	b->argvlen[1] = strlen(scripts[SCRIPT_BATCH].sha);
	b->argv[2] = num;
	b->argvlen[2] = (size_t)snprintf(num, BATCH_NUM, "%zu", nkeys);
	num += BATCH_NUM;
	k = 3;
	a = 3 + nkeys;
	for (c = head; c != NULL; c = c->qnext) {
		size_t nk = (size_t)c->nkeys, na = (size_t)c->argc - 3 - nk;

		memcpy(&b->argv[k], &c->argv[3], nk * sizeof *b->argv);
		memcpy(&b->argvlen[k], &c->argvlen[3], nk * sizeof *b->argvlen);
		k += nk;
		b->argv[a] = scripts[c->script].name;
		b->argvlen[a] = strlen(b->argv[a]);
		b->argv[a + 1] = num;
		b->argvlen[a + 1] = (size_t)snprintf(num, BATCH_NUM, "%zu", nk);
		num += BATCH_NUM;
		b->argv[a + 2] = num;
		b->argvlen[a + 2] = (size_t)snprintf(num, BATCH_NUM, "%zu", na);
		num += BATCH_NUM;
		memcpy(&b->argv[a + 3], &c->argv[3 + nk], na * sizeof *b->argv);
		memcpy(&b->argvlen[a + 3], &c->argvlen[3 + nk],
		    na * sizeof *b->argvlen);
		a += 3 + na;
	}
	return b;
}

static int
batch_send(struct batch *b)
{
	struct node *n = b->node;

	if (!node_usable(n) || n->link.ac == NULL)
		return -1;
	if (link_send(&n->link, batch_reply, b, b->argc, b->argv,
	    b->argvlen) != 0)
		return -1;
	for (struct cmd *c = b->head; c != NULL; c = c->qnext)
		cmd_sent(c);
	return 0;
}

/*
 * The end of the loop turn: send n's queued calls that have a place in
 * flight, in order, as batches (one call alone: its own EVALSHA).  Then
 * write them at once: hiredis would write on the next loop turn, when
 * epoll reports the socket writable, after adding a write event for each
 * command (epoll_ctl) and deleting it once written (epoll_ctl again).
 * Writing here saves that turn and both calls (holding writes, link_send
 * adds no write event; hiredis adds one itself if the socket takes only
 * part).
 * With one connection and one request at a time, the broker's system
 * calls per request went from 3 epoll_wait and 5 epoll_ctl to 2 and 3
 * (strace -c, lbbench pairs --conns 1).
 * This runs from our own event, never inside a hiredis callback, so a
 * write error may tear the context down here (its callbacks fail their
 * calls, as when hiredis's own write event meets it); n->link.ac is not
 * touched after that.
 */
static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct node *n = arg;
	int sent = 0;

	(void)fd;
	(void)what;
	link_hold_writes(&n->link, 1);
	while (n->qhead != NULL && n->inflight < STORE_MAX_INFLIGHT &&
	    node_usable(n)) {
		struct cmd *head = n->qhead, *last = head, *c;
		size_t count = 1, bytes = head->bytes;
		size_t room = STORE_MAX_INFLIGHT - n->inflight;

		while ((c = last->qnext) != NULL && count < STORE_BATCH_MAX &&
		    count < room && bytes + c->bytes <= STORE_BATCH_BYTES) {
			last = c;
			count++;
			bytes += c->bytes;
		}
		n->qhead = last->qnext;
		if (n->qhead == NULL)
			n->qtail = NULL;
		n->queued -= count;
		last->qnext = NULL;
		if (count == 1) {
			if (cmd_send(head) != 0) {
				cmd_fail(head);
				cmd_free(head);
			}
		} else {
			struct batch *b = batch_new(n, head, count);

			if (batch_send(b) != 0)
				batch_fail(b);
		}
		sent = 1;
	}
	link_hold_writes(&n->link, 0);
	if (sent)
		link_write_now(&n->link);
}

/* --- the queue --------------------------------------------------------- */

static void
queue_push(struct node *n, struct cmd *c)
{
	c->qnext = NULL;
	if (n->qtail)
		n->qtail->qnext = c;
	else
		n->qhead = c;
	n->qtail = c;
	n->queued++;
}

/* Send queued commands while there is room in flight (batching: at the
 * end of this turn, flush_cb). */
static void
store_queue_run(struct node *n)
{
	if (batching(n)) {
		if (n->qhead != NULL && n->inflight < STORE_MAX_INFLIGHT &&
		    node_usable(n))
			event_active(n->flush_ev, EV_TIMEOUT, 0);
		return;
	}
	while (n->qhead != NULL && n->inflight < STORE_MAX_INFLIGHT &&
	    node_usable(n)) {
		struct cmd *c = n->qhead;

		n->qhead = c->qnext;
		if (n->qhead == NULL)
			n->qtail = NULL;
		n->queued--;
		if (cmd_send(c) != 0) {
			cmd_fail(c);
			cmd_free(c);
		}
	}
}

/* Answer every queued command of n "unavailable" (it is gone). */
static void
store_queue_fail(struct node *n)
{
	struct cmd *c;

	while ((c = n->qhead) != NULL) {
		n->qhead = c->qnext;
		if (n->qhead == NULL)
			n->qtail = NULL;
		n->queued--;
		cmd_fail(c);
		cmd_free(c);
	}
}

/*
 * Send c to its node, or queue it there: batching, always (flush_cb sends
 * it at the end of this turn, if it has a place in flight by then); else
 * when STORE_MAX_INFLIGHT are in flight, or (a redirection to a master
 * not connected yet) until its connection is up.  -1 when it can go
 * nowhere (the caller frees it).
 */
static int
cmd_start(struct cmd *c)
{
	struct node *n = c->node;

	if (batching(n) && node_usable(n)) {
		queue_push(n, c);
		store_queue_run(n);
		return 0;
	}
	if (node_usable(n) && n->inflight < STORE_MAX_INFLIGHT)
		return cmd_send(c);
	if (node_usable(n) || (c->st->cl != NULL && !c->st->freeing &&
	    !n->link.dying && n->link.state != LINK_UP)) {
		queue_push(n, c);
		link_retry_now(&n->link);	/* a node waiting out a backoff */
		return 0;
	}
	return -1;
}

/* Build and start one script call routed by r; -1 (nothing started)
 * when its master is not up. */
static int
script_call(struct store *st, const struct route *r, enum cmd_kind kind,
    enum script_id script, int nkeys, const struct piece *p, int np,
    union cmd_fn fn, void *arg)
{
	struct cmd *c = call_new(st, r, kind, script, nkeys, p, np);

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
	struct cmd *c = call_new(st, r, K_ACQUIRE, script, nkeys, p, np);

	if (c == NULL)
		return -1;
	c->fn.acquire = fn;
	c->arg = arg;
	c->owner_arg = owner_arg;
	c->tenure_arg = tenure_arg;
	return call_start(c);
}

/*
 * Cluster mode's last arguments of grant and reassert scripts: the
 * master's replication ids and the lock delay (lib/slot_tenure.lua), as
 * placeholders: cmd_send fills them from the master the call is sent to,
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
writers_prefix(const struct store *st, const struct route *r, char *buf,
    size_t buflen)
{
	int n = snprintf(buf, buflen, "%s%s%.*s", st->keys.writers, r->slot >= 0 ?
	    "{" : "", (int)r->taglen, r->tag);

	return n < 0 ? 0 : (size_t)n < buflen ? (size_t)n : buflen - 1;
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
    long reserve, long long seen, store_acquire_fn *fn, void *arg)
{
	char ttl[24], kd[24], rs[24], sn[24], wk[256];
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms), ta = 0, nk, np;
	int kl = snprintf(kd, sizeof kd, "%ld", kind);
	int rl = snprintf(rs, sizeof rs, "%ld", reserve_of(st, reserve));
	int sl = snprintf(sn, sizeof sn, "%lld", kind == 0 ? seen : 0);
	struct piece p[16];
	struct route r;

	if (kind < STORE_EXCLUSIVE || !lease_ok(st))
		return -1;

	route_of(st, key, keylen, &r);
	np = nk = grant_keys(st, key, keylen, &r, 3, p);
	if (kind != STORE_EXCLUSIVE) {
		/* sacquire.lua: the writers waiting (wmark.lua) */
		p[np++] = (struct piece){ wk, writers_prefix(st, &r, wk,
		    sizeof wk), key, keylen };
		nk++;
	}
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
	return grant_call(st, &r, kind == STORE_EXCLUSIVE ? SCRIPT_ACQUIRE :
	    SCRIPT_SACQUIRE, nk, p, np, 3 + nk, ta, fn, arg);
}

int
store_handoff(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token,
    const char *next_owner, size_t next_ownerlen, long ttl_ms, long reserve,
    store_acquire_fn *fn, void *arg)
{
	char ttl[24], tok[24], rs[24];
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms), ta = 0, nk, np;
	int rl = snprintf(rs, sizeof rs, "%ld", reserve_of(st, reserve));
	struct piece p[16];
	struct route r;

	if (!lease_ok(st))
		return -1;
	route_of(st, key, keylen, &r);
	np = nk = grant_keys(st, key, keylen, &r, 2, p);
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
	return script_call(st, &r, K_RELEASE, SCRIPT_WMARK, 1, p, 8,
	    (union cmd_fn){ .release = fn }, arg);
}

int
store_release(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token,
    store_release_fn *fn, void *arg)
{
	char tok[24];
	struct route r;
	struct piece p[4];

	route_of(st, key, keylen, &r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	value_piece(&p[1], owner, ownerlen, token, tok, sizeof tok);
	p[2] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[3] = (struct piece){ key, keylen, NULL, 0 };
	return script_call(st, &r, K_RELEASE, SCRIPT_RELEASE, 1, p, 4,
	    (union cmd_fn){ .release = fn }, arg);
}

int
store_pass(struct store *st, const char *key, size_t keylen,
    const char *prev_owner, size_t prev_ownerlen, long long prev_token,
    const char *owner, size_t ownerlen, long long token, long ttl_ms,
    store_pass_fn *fn, void *arg)
{
	char prev[24], val[24], ttl[24];
	struct route r;
	struct piece p[4];

	if (!lease_ok(st))
		return -1;
	route_of(st, key, keylen, &r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	value_piece(&p[1], prev_owner, prev_ownerlen, prev_token, prev,
	    sizeof prev);
	value_piece(&p[2], owner, ownerlen, token, val, sizeof val);
	p[3] = (struct piece){ ttl, (size_t)snprintf(ttl, sizeof ttl, "%ld",
	    ttl_ms), NULL, 0 };
	return script_call(st, &r, K_PASS, SCRIPT_PASS, 1, p, 4,
	    (union cmd_fn){ .pass = fn }, arg);
}

int
store_forget(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, store_release_fn *fn, void *arg)
{
	struct route r;
	struct piece p[4];

	route_of(st, key, keylen, &r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	p[1] = (struct piece){ owner, ownerlen, NULL, 0 };
	p[2] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[3] = (struct piece){ key, keylen, NULL, 0 };
	return script_call(st, &r, K_RELEASE, SCRIPT_FORGET, 1, p, 4,
	    (union cmd_fn){ .release = fn }, arg);
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
	struct cmd *c;

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
	if ((c = call_new(st, r, K_RENEW, reassert ? SCRIPT_REASSERT :
	    SCRIPT_RENEW, (int)nk, p, (int)np)) == NULL)
		return -1;
	c->fn.renew = fn;
	c->arg = arg;
	c->nrenew = n;
	c->tenure_arg = ta;
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

	if (n == 0 || n > STORE_RENEW_BATCH || !lease_ok(st))
		return -1;
	if (st->cl != NULL)
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
	return script_call(st, &r, K_OWNER, SCRIPT_OWNER, 1, p, 1,
	    (union cmd_fn){ .owner = fn }, arg);
}

int
store_linger(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, long linger_ms,
    store_release_fn *fn, void *arg)
{
	char tok[24], ms[24];
	int ml = snprintf(ms, sizeof ms, "%ld", linger_ms);
	struct route r;
	struct piece p[5];

	route_of(st, key, keylen, &r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	value_piece(&p[1], owner, ownerlen, token, tok, sizeof tok);
	p[2] = (struct piece){ ms, (size_t)ml, NULL, 0 };
	p[3] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[4] = (struct piece){ key, keylen, NULL, 0 };
	return script_call(st, &r, K_RELEASE, SCRIPT_LINGER, 1, p, 5,
	    (union cmd_fn){ .release = fn }, arg);
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
	route_slot(st, st->cl == NULL ? -1 : (int)slot_of(st->keys.sesspfx,
	    st->keys.sesspfxlen, cid, cidlen), &r);
	p = xcalloc(nargs + 1, sizeof *p);
	p[0] = (struct piece){ st->keys.sesspfx, st->keys.sesspfxlen, cid, cidlen };
	for (size_t i = 0; i < nargs; i++)
		p[i + 1] = (struct piece){ args[i].p, args[i].len, NULL, 0 };
	rc = script_call(st, &r, K_SESSION, SCRIPT_SESSION, 1, p,
	    (int)nargs + 1, (union cmd_fn){ .session = fn }, arg);
	free(p);
	return rc;
}

int
store_takeover(struct store *st, const char *key, size_t keylen,
    const char *cid, size_t cidlen, unsigned long gen, long ttl_ms,
    store_acquire_fn *fn, void *arg)
{
	char g[24], ttl[24];
	int gl = snprintf(g, sizeof g, "%lu", gen);
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms);
	struct route r;
	struct piece p[4];

	if (!lease_ok(st))
		return -1;
	route_of(st, key, keylen, &r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	p[1] = (struct piece){ cid, cidlen, NULL, 0 };
	p[2] = (struct piece){ g, (size_t)gl, NULL, 0 };
	p[3] = (struct piece){ ttl, (size_t)tl, NULL, 0 };
	return script_call(st, &r, K_TAKEOVER, SCRIPT_TAKEOVER, 1, p, 4,
	    (union cmd_fn){ .acquire = fn }, arg);
}

/* --- each master's command link ----------------------------------------- */

/*
 * The handshake of a command link: AUTH (link.c), every script loaded,
 * INFO (is it the master, and of which tenure?), and in single-address
 * mode the tenure joined (tenure.lua) before it is up.  A connect in
 * Sentinel mode first asks sentinel.c where the master is; INFO then
 * checks the role (a sentinel's answer may be stale), and the tenure is
 * joined once the lease holds.
 */

/* The endpoint, by the parser config.c checked it with (addr.h): the
 * one node of single-address mode. */
static int
parse_addr(struct store *st)
{
	struct addr a;
	char err[160];

	if (addr_parse_endpoint(st->addr, &a, err, sizeof err) != 0) {
		log_error("Redis address: %s", err);
		return -1;
	}
	st->one = store_node_new(st, a.is_unix ? a.path : a.host, a.port,
	    a.is_unix);
	return 0;
}

/* Sentinel mode: the sentinels named a master (or none, why says). */
static void
resolved(void *arg, const struct addr *master, const char *why)
{
	struct link *l = arg;

	if (l->env->closing)
		return;
	if (master == NULL) {
		link_failed(l, why != NULL ? why : "the sentinels named no master");
		return;
	}
	link_connect(l, master->host, master->port, 0);
}

/*
 * Where the one master is, for its command link and the subscriber.  In
 * Sentinel mode every connect asks the sentinels first: after any loss
 * the master may have moved (the address is checked by the handshake's
 * INFO, as a sentinel's answer may be stale).
 */
static void
single_locate(struct store *st, struct link *l)
{
	if (st->sent == NULL) {
		link_connect(l, st->one->host, st->one->port, st->one->is_unix);
		return;
	}
	link_locating(l);
	sentinel_resolve(st->sent, resolved, l);
}

static void
sub_locate(void *arg, struct link *l)
{
	single_locate(arg, l);
}

/* The sentinels say the master moved: follow it now. */
static void
switched(void *arg, const struct addr *from, const struct addr *to)
{
	struct store *st = arg;
	struct link *one = &st->one->link, *sub = sub_link(st->sub);
	char a[ADDR_HOST_LEN + 16], b[ADDR_HOST_LEN + 16];

	snprintf(b, sizeof b, strchr(to->host, ':') ? "[%s]:%d" : "%s:%d",
	    to->host, to->port);
	if (from != NULL)
		snprintf(a, sizeof a, strchr(from->host, ':') ? "[%s]:%d" :
		    "%s:%d", from->host, from->port);
	else
		snprintf(a, sizeof a, "-");
	log_warn("Redis master switched from %s to %s", a, b);
	if (one->ac != NULL && strcmp(one->addrstr, b) != 0)
		link_kill(one, "the master moved");
	if (sub->ac != NULL && strcmp(sub->addrstr, b) != 0)
		link_kill(sub, "the master moved");
	/* one waiting out a backoff (it kept failing on the dead master)
	 * must not sleep through the news */
	link_retry_now(one);
	link_retry_now(sub);
}

/*
 * The tenure is joined (tenure.lua ran): the link is up (or, in Sentinel
 * mode, the store may serve).  A new replication id means a failover or a
 * Redis back without its data: the lock table reclaims its locks
 * (reassert.lua) before new grants.
 */
static void
tenure_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct node *n = privdata;
	struct store *st = n->st;
	redisReply *r = reply;
	long long started, delay;

	if (!link_current(&n->link, ac) || r == NULL)
		return;
	n->tenure_asked = 0;
	if (r->type == REDIS_REPLY_ERROR) {
		link_refuse(&n->link, r->str);
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    !resp_is_int(r->element[0]) || !resp_is_int(r->element[1])) {
		link_refuse(&n->link, "unexpected reply from tenure.lua");
		return;
	}
	started = r->element[0]->integer;
	delay = r->element[1]->integer;
	if (strcmp(n->replid, st->replid) != 0) {
		if (st->replid[0] != '\0')
			log_warn("Redis %s is a new master tenure (replication id "
			    "%.8s, was %.8s): reclaiming held locks%s; free keys "
			    "wait %lld ms", n->link.addrstr, n->replid, st->replid,
			    started ? ", counter raised" : "", delay);
		else if (started)
			log_info("Redis %s: tenure %.8s started", n->link.addrstr,
			    n->replid);
		st->tenures++;
		if (st->replid[0] != '\0') {
			memcpy(st->left[st->nleft % STORE_LEFT_MAX], st->replid,
			    sizeof st->replid);
			st->nleft++;
		}
		memcpy(st->replid, n->replid, sizeof st->replid);
	}
	n->tenure_joined = 1;
	if (st->lease != NULL)
		store_serving(st);	/* joined after the handshake */
	else
		link_hello_done(&n->link);
}

static int
tenure_send(struct node *n)
{
	struct store *st = n->st;

	if (link_sendf(&n->link, tenure_reply, n,
	    "EVALSHA %s 3 %s %s %s %s %s %ld", scripts[SCRIPT_TENURE].sha,
	    st->keys.fence, st->keys.tenure, st->keys.delay, n->replid,
	    st->replid, st->cfg.lock_delay_ms) != 0) {
		link_kill(&n->link, "cannot send tenure.lua");
		return -1;
	}
	n->tenure_asked = 1;
	return 0;
}

/*
 * Sentinel mode joins a master's tenure only once the lease holds on it:
 * the lock delay a new tenure starts (tenure.lua) must count from when the
 * brokers can act on it and reclaim their locks, not from the handshake,
 * which comes before the sentinels agree on the new master (a second or
 * two after a failover).
 */
static void
join_tenure(struct node *n)
{
	if (n->link.ac != NULL && n->link.state == LINK_UP &&
	    !n->tenure_joined && !n->tenure_asked)
		tenure_send(n);
}

/* INFO replication: only a master is used; its replication id names the
 * tenure (tenure.lua). */
static void
info_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct node *n = privdata;
	struct store *st = n->st;
	redisReply *r = reply;
	char role[32], why[80];

	if (!link_current(&n->link, ac) || r == NULL)
		return;
	if (r->type != REDIS_REPLY_STRING) {
		link_refuse(&n->link, r->type == REDIS_REPLY_ERROR ? r->str :
		    "unexpected reply to INFO");
		return;
	}
	resp_info_field(r->str, "role", role, sizeof role);
	if (strcmp(role, "master") != 0) {
		snprintf(why, sizeof why, "not a master (role:%s)", role);
		link_refuse(&n->link, why);
		return;
	}
	if (st->cl != NULL) {
		/* cluster mode: each slot joins the tenure by itself
		 * (lib/slot_tenure.lua); a stale master answers MOVED */
		char was[64];

		memcpy(was, n->replid, sizeof was);
		resp_info_field(r->str, "master_replid", n->replid,
		    sizeof n->replid);
		resp_info_field(r->str, "master_replid2", n->replid2,
		    sizeof n->replid2);
		if (strcmp(was, n->replid) != 0) {
			st->tenures++;
			memcpy(n->prev_replid, was, sizeof was);
			n->tenure_ms = now_ms();
		}
		link_hello_done(&n->link);
		return;
	}
	resp_info_field(r->str, "master_replid", n->replid, sizeof n->replid);
	for (unsigned i = 0; i < st->nleft && i < STORE_LEFT_MAX; i++) {
		if (n->replid[0] != '\0' && strcmp(st->left[i], n->replid) == 0) {
			/* an old master that woke up still says master */
			snprintf(why, sizeof why, "stale master: replication id "
			    "%.8s belongs to an earlier tenure", n->replid);
			link_refuse(&n->link, why);
			return;
		}
	}
	if (st->lease != NULL) {
		/* the tenure is joined once the lease holds (above) */
		link_hello_done(&n->link);
		return;
	}
	if (tenure_send(n) != 0)
		return;
	/* tenure.lua's reply awaited before INFO's is counted: not up yet */
	link_expect(&n->link);
	link_hello_done(&n->link);
}

static void
node_locate(void *owner, struct link *l)
{
	struct node *n = owner;

	if (n->st->cl != NULL)
		link_connect(l, n->host, n->port, n->is_unix);
	else
		single_locate(n->st, l);
}

static void
node_hello(void *owner, struct link *l)
{
	struct node *n = owner;

	n->tenure_joined = n->tenure_asked = 0;
	for (int i = 0; i < SCRIPT__COUNT; i++)
		link_hello_sendf(l, "SCRIPT LOAD %s", scripts[i].text);
	/* then: is it the master, and of which tenure? */
	link_sendf(l, info_reply, n, "INFO replication");
	link_expect(l);
}

static void
node_up(void *owner, struct link *l)
{
	struct node *n = owner;
	struct store *st = n->st;

	n->last_progress_ms = now_ms();
	store_queue_run(n);	/* redirected here meanwhile */
	if (st->lease != NULL) {
		/* up for grants once the sentinels vouch for it */
		struct addr a;
		char err[160];

		if (addr_parse_endpoint(l->addrstr, &a, err, sizeof err) == 0)
			lease_follow(st->lease, &a);
		store_serving(st);
	} else if (st->hooks.up) {
		st->hooks.up(st->hooks.arg);
	}
}

static void
node_down(void *owner, struct link *l, int was_up)
{
	struct node *n = owner;
	struct store *st = n->st;
	struct link *sub = st->sub != NULL ? sub_link(st->sub) : NULL;

	store_queue_fail(n);
	if (st->cl != NULL && !st->freeing)
		cluster_refresh(st->cl);	/* a failover, perhaps */
	if (!was_up)
		return;
	st->reconnects++;
	shardsub_drop(n->ss);
	if (st->lease != NULL) {
		lease_follow(st->lease, NULL);
		store_serving(st);
	} else if (st->hooks.down) {
		st->hooks.down(st->hooks.arg);
	}
	/* A subscriber on a Redis we can no longer reach is as suspect;
	 * resubscribing later retries every waiter. */
	if (sub != NULL && sub->ac != NULL)
		link_kill(sub, "command connection lost");
	(void)l;
}

/* cluster mode: a master that left the map is not called again */
static const char *
node_idle(void *owner, const struct link *l)
{
	struct node *n = owner;

	(void)l;
	return n->st->cl != NULL && n->slots == 0 ? "it serves no slots" :
	    NULL;
}

static const struct link_ops node_link_ops = {
	.locate = node_locate, .hello = node_hello, .up = node_up,
	.down = node_down, .idle = node_idle,
};

/* Every ROLE_CHECK_MS: a master demoted while we stay connected (a frozen
 * old master that woke up, REPLICAOF) must not take grants. */
static void
role_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct node *n = privdata;
	redisReply *r = reply;

	if (r == NULL || !link_current(&n->link, ac) ||
	    n->link.state != LINK_UP)
		return;
	if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, "master") != 0)
		link_kill(&n->link, "Redis is no longer a master (ROLE)");
}

static void
role_cb(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;

	(void)fd;
	(void)what;
	for (struct node *n = st->nodes; n != NULL; n = n->next)
		if (n->link.state == LINK_UP && n->link.ac != NULL &&
		    link_sendf(&n->link, role_reply, n, "ROLE") != 0)
			log_debug("ROLE not sent");
}

/* The oldest command in flight waited too long: Redis is not answering. */
static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;
	int64_t now = now_ms(), late = now - st->watchdog_ms;

	(void)fd;
	(void)what;
	if (late > st->cfg.timeout_ms / 2) {
		/*
		 * This tick comes late: the broker itself did not run (it was
		 * stopped, or starved), and the replies it waited for may be
		 * sitting unread in its sockets.  That time is ours, not
		 * Redis's: start the clocks again rather than drop connections
		 * (and the news their replies carry, e.g. that a lock was
		 * lost meanwhile).
		 */
		log_warn("event loop stalled for %lld ms: Redis answers are "
		    "timed from now", (long long)late);
		for (struct node *n = st->nodes; n != NULL; n = n->next)
			n->last_progress_ms = now;
		st->watchdog_ms = now;
		return;
	}
	st->watchdog_ms = now;
	for (struct node *n = st->nodes; n != NULL; n = n->next) {
		if (n->link.state == LINK_UP && n->inflight > 0 &&
		    now_ms() - n->last_progress_ms > st->cfg.timeout_ms)
			link_kill(&n->link, "Redis stopped answering");
		/* cluster mode: calls redirected to a master that does not
		 * come up are failed by its connect timeout; this is the
		 * net under that */
		if (n->link.state != LINK_UP && n->qhead != NULL &&
		    now_ms() - n->qhead->born_ms > 2 * st->cfg.timeout_ms)
			store_queue_fail(n);
	}
}

void
store_kick(struct store *st)
{
	/* shutdown has only a short budget */
	for (struct node *n = st->nodes; n != NULL; n = n->next)
		if (st->cl == NULL || n->slots > 0)
			link_retry_now(&n->link);
	if (st->cl != NULL)
		cluster_refresh(st->cl);
}

/* --- nodes and the store --------------------------------------------- */

struct node *
store_node_new(struct store *st, const char *host, int port, int is_unix)
{
	struct node *n = xcalloc(1, sizeof *n);

	n->st = st;
	n->host = xstrndup(host, strlen(host));
	n->port = port;
	n->is_unix = is_unix;
	link_init(&n->link, &st->env, "command", &node_link_ops, n, 0);
	if (is_unix)
		snprintf(n->link.addrstr, sizeof n->link.addrstr, "unix:%s",
		    host);
	else
		snprintf(n->link.addrstr, sizeof n->link.addrstr,
		    strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
	n->ack_ev = event_new(st->base, -1, 0, ack_cb, n);
	n->flush_ev = event_new(st->base, -1, 0, flush_cb, n);
	if (n->ack_ev == NULL || n->flush_ev == NULL)
		fatalx("cannot create Redis timers");
	n->next = st->nodes;
	st->nodes = n;
	st->nnodes++;
	return n;
}

/* Fail what n has queued or in flight, drop its connection, free it. */
void
store_node_free(struct node *n)
{
	struct store *st = n->st;
	struct node **pp;

	for (pp = &st->nodes; *pp != NULL; pp = &(*pp)->next)
		if (*pp == n) {
			*pp = n->next;
			st->nnodes--;
			break;
		}
	if (n->agroup != NULL) {
		/* its WAIT will never be sent; members fail below */
		group_unref(n->agroup);
		n->agroup = NULL;
	}
	n->link.state = LINK_DOWN;	/* callbacks below may not queue more */
	store_queue_fail(n);
	shardsub_free(n->ss);
	link_close(&n->link);
	store_queue_fail(n);	/* anything a callback queued after all */
	if (n->ack_ev)
		event_free(n->ack_ev);
	if (n->flush_ev)
		event_free(n->flush_ev);
	free(n->host);
	free(n);
}

/* Sentinel mode: the command link came up or went, or the lease changed:
 * tell the hooks when the store starts or stops serving. */
static void
store_serving(struct store *st)
{
	int serving;

	if (st->lease == NULL)
		return;
	if (node_usable(st->one) && lease_held(st->lease))
		join_tenure(st->one);	/* once per context */
	serving = node_usable(st->one) && lease_ok(st);
	if (serving == st->serving)
		return;
	st->serving = serving;
	if (serving && st->hooks.up != NULL)
		st->hooks.up(st->hooks.arg);
	else if (!serving && st->hooks.down != NULL)
		st->hooks.down(st->hooks.arg);
}

static void
lease_changed(void *arg, int held)
{
	(void)held;
	store_serving(arg);
}

/* Sentinel mode: sentinel.c says where the one master is, lease.c for
 * how long it surely stays so. */
static int
sentinel_start(struct store *st, const struct store_cfg *cfg)
{
	struct sentinel_cfg sc = {
		.sentinels = cfg->sentinels,
		.master_name = cfg->master_name,
		.password = cfg->sentinel_password,
		.user = cfg->sentinel_user,
		/* "a few hundred ms" per sentinel (sentinel-clients) */
		.timeout_ms = cfg->timeout_ms < 500 ? cfg->timeout_ms : 500,
	};
	struct lease_cfg lc = {
		.sentinels = cfg->sentinels,
		.master_name = cfg->master_name,
		.password = cfg->sentinel_password,
		.user = cfg->sentinel_user,
		.timeout_ms = sc.timeout_ms,
		.max_ms = cfg->lease_ms,
	};
	struct sentinel_hooks sh = { switched, st };
	struct lease_hooks lh = { lease_changed, st };
	char err[256];

	st->sent = sentinel_new(st->base, &sc, &sh, err, sizeof err);
	if (st->sent == NULL) {
		log_error("Sentinel mode: %s", err);
		return -1;
	}
	st->lease = lease_new(st->base, &lc, &lh, err, sizeof err);
	if (st->lease == NULL) {
		log_error("Sentinel mode: %s", err);
		return -1;
	}
	st->one = store_node_new(st, "", 0, 0);
	return 0;
}

struct store *
store_new(struct event_base *base, const struct store_cfg *cfg,
    const struct store_hooks *hooks)
{
	struct store *st = xcalloc(1, sizeof *st);
	int cluster = cfg->cluster != NULL && cfg->cluster[0] != '\0';
	struct timeval tick;
	int rc;

	st->base = base;
	st->addr = xstrndup(cfg->addr, strlen(cfg->addr));
	st->password = xstrndup(cfg->password, strlen(cfg->password));
	st->user = xstrndup(cfg->user, strlen(cfg->user));
	st->cfg = *cfg;
	st->cfg.addr = st->addr;
	st->cfg.password = st->password;
	st->cfg.user = st->user;
	st->cfg.prefix = NULL;
	keys_init(&st->keys, cfg->prefix, cfg->id, cluster);
	st->env = (struct link_env){ .base = base, .password = st->password,
	    .user = st->user, .label = st->addr, .timeout_ms = cfg->timeout_ms };
	st->hooks = *hooks;
	st->watchdog_ev = event_new(base, -1, EV_PERSIST, watchdog_cb, st);
	st->role_ev = event_new(base, -1, EV_PERSIST, role_cb, st);
	if (st->watchdog_ev == NULL || st->role_ev == NULL)
		fatalx("cannot create Redis timers");
	if (cluster) {
		slot_tags_init();
		st->cl = cluster_new(st, cfg->cluster);
		rc = st->cl == NULL ? -1 : 0;
	} else {
		st->sub = sub_new(&st->env, &st->keys, &st->hooks, sub_locate,
		    st);
		rc = cfg->sentinels != NULL && cfg->sentinels[0] != '\0' ?
		    sentinel_start(st, cfg) : parse_addr(st);
	}
	st->cfg.sentinels = st->cfg.master_name = NULL;	/* not kept */
	st->cfg.sentinel_password = st->cfg.sentinel_user = NULL;
	st->cfg.cluster = NULL;
	if (rc != 0) {
		store_free(st);
		return NULL;
	}
	tick.tv_sec = cfg->timeout_ms / 4 / 1000;
	tick.tv_usec = (cfg->timeout_ms / 4 % 1000) * 1000;
	event_add(st->watchdog_ev, &tick);
	st->watchdog_ms = now_ms();
	tick.tv_sec = ROLE_CHECK_MS / 1000;
	tick.tv_usec = (ROLE_CHECK_MS % 1000) * 1000;
	event_add(st->role_ev, &tick);
	if (st->one != NULL)
		link_start(&st->one->link);
	if (st->sub != NULL)
		link_start(sub_link(st->sub));	/* cluster: shardsub.c */
	return st;
}

void
store_free(struct store *st)
{
	struct cmd *c;

	if (st == NULL)
		return;
	st->freeing = 1;
	st->env.closing = 1;
	st->hooks.down = NULL;	/* shutting down: nobody to tell */
	st->hooks.up = NULL;
	if (st->sent != NULL)
		sentinel_free(st->sent);	/* resolves answer, ignored */
	st->sent = NULL;
	lease_free(st->lease);
	st->lease = NULL;
	while ((c = st->retrying) != NULL) {
		st->retrying = c->rnext;
		cmd_fail(c);
		cmd_free(c);
	}
	if (st->cl != NULL)
		cluster_free(st->cl);	/* its map connection */
	st->cl = NULL;
	while (st->nodes != NULL)
		store_node_free(st->nodes);
	st->one = NULL;
	sub_free(st->sub);
	if (st->watchdog_ev)
		event_free(st->watchdog_ev);
	if (st->role_ev)
		event_free(st->role_ev);
	keys_free(&st->keys);
	free(st->addr);
	free(st->password);
	free(st->user);
	free(st);
}

int
store_link_up(const struct store *st)
{
	if (st->cl != NULL) {
		if (!cluster_map_known(st->cl))
			return 0;
		for (const struct node *n = st->nodes; n != NULL; n = n->next)
			if (n->slots > 0 && node_usable(n))
				return 1;
		return 0;
	}
	return node_usable(st->one);
}

int
store_is_up(const struct store *st)
{
	return store_link_up(st) && lease_ok(st);
}

int
store_key_up(const struct store *st, const char *key, size_t keylen)
{
	int slot = key_slot(st, key, keylen);

	return lease_ok(st) && node_usable(slot < 0 ? st->one :
	    cluster_node_of(st->cl, (unsigned)slot));
}

long long
store_lease_ms(const struct store *st)
{
	return st->lease == NULL ? -1 : (long long)lease_left_ms(st->lease);
}

size_t
store_inflight(const struct store *st)
{
	size_t sum = 0;

	for (const struct node *n = st->nodes; n != NULL; n = n->next)
		sum += n->inflight + n->queued;
	for (const struct cmd *c = st->retrying; c != NULL; c = c->rnext)
		sum++;
	return sum;
}

uint64_t
store_reconnects(const struct store *st)
{
	return st->reconnects;
}

/* Single mode: the master; cluster mode: every master up, comma-separated
 * (cut short with "..." past the buffer). */
const char *
store_master(const struct store *st)
{
	static char buf[512];		/* one STATS line at a time */
	size_t off = 0;

	if (st->cl == NULL)
		return node_usable(st->one) ? st->one->link.addrstr : "-";
	buf[0] = '\0';
	for (const struct node *n = st->nodes; n != NULL; n = n->next) {
		size_t need = strlen(n->link.addrstr) + 1;

		if (n->slots == 0 || !node_usable(n))
			continue;
		if (off + need + 4 >= sizeof buf) {
			memcpy(buf + off, ",...", 5);
			break;
		}
		off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s",
		    off ? "," : "", n->link.addrstr);
	}
	return off ? buf : "-";
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

unsigned
store_nodes_up(const struct store *st)
{
	unsigned up = 0;

	for (const struct node *n = st->nodes; n != NULL; n = n->next)
		if ((st->cl == NULL || n->slots > 0) && node_usable(n))
			up++;
	return up;
}

uint64_t
store_redirects(const struct store *st)
{
	return st->redirects;
}

uint64_t
store_map_changes(const struct store *st)
{
	return st->cl != NULL ? cluster_map_changes(st->cl) : 0;
}

void
store_each_node(const struct store *st, void (*fn)(void *arg,
    const char *addr, int up, size_t inflight, uint64_t redirects),
    void *arg)
{
	for (const struct node *n = st->nodes; n != NULL; n = n->next)
		if (st->cl == NULL || n->slots > 0)
			fn(arg, n->link.addrstr, node_usable(n),
			    n->inflight + n->queued, n->redirects);
}
