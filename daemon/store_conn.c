/*
 * store_conn.c - the store's Redis connections: a command connection per
 * master (node), the subscriber on <prefix>:released and <prefix>:wanted,
 * and in cluster mode the map connection (cluster.c asks CLUSTER SLOTS on
 * it).
 *
 * Facts this file is built around (docs/HIREDIS.md, hiredis 0.14.1):
 *  - every pending callback runs once with reply == NULL on teardown;
 *  - hiredis frees the context right after onDisconnect, and right after
 *    onConnect reports an error; onDisconnect never fires for a context
 *    that never connected; so our pointer is cleared in both, and every
 *    teardown we start ourselves runs from our own libevent callback,
 *    never from inside a hiredis callback;
 *  - there are no async timeouts: libevent timers bound the connect, the
 *    handshake and the oldest command in flight;
 *  - "connected" is not "alive": a connection is up only after the
 *    replies to its handshake (AUTH, SCRIPT LOAD, INFO, tenure.lua)
 *    arrived.
 * A connect in Sentinel mode first asks sentinel.c where the master is;
 * the handshake then checks INFO's role (a sentinel's answer may be
 * stale) and joins the master's tenure (tenure.lua) before it is up.
 */
#include "store_int.h"
#include "lease.h"
#include "log.h"
#include "sentinel.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>


/* The endpoint, by the parser config.c checked it with (addr.h): the
 * one node of single-address mode. */
int
sconn_parse_addr(struct store *st)
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
	if (c->kind == CONN_MAP) {
		/* up once it has read a map (cluster.c): a node that
		 * refuses CLUSTER SLOTS must not reset the backoff */
		log_debug("Redis map connection open (%s)", c->addrstr);
		cluster_map_up(st->cl);
		return;
	}
	redial_ok(&c->redial);
	c->last_refusal[0] = '\0';
	log_info("Redis %s connection up (%s)", c->name, c->addrstr);
	switch (c->kind) {
	case CONN_CMD:
		c->node->last_progress_ms = now_ms();
		store_queue_run(c->node);	/* redirected here meanwhile */
		if (st->lease != NULL) {
			/* up for grants once the sentinels vouch for it */
			struct addr a;
			char err[160];

			if (addr_parse_endpoint(c->addrstr, &a, err,
			    sizeof err) == 0)
				lease_follow(st->lease, &a);
			store_serving(st);
		} else if (st->hooks.up) {
			st->hooks.up(st->hooks.arg);
		}
		break;
	case CONN_SUB:
		if (st->hooks.subscribed)
			st->hooks.subscribed(st->hooks.arg);
		break;
	case CONN_MAP:
		break;
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
	/* (a map connection is only up once it read a map: cluster.c) */
	int was_up = c->state == C_UP &&
	    !(c->kind == CONN_MAP && c->redial.failing);
	/* cluster mode: a master that left the map is not called again */
	int retire = c->kind == CONN_CMD && st->cl != NULL &&
	    c->node->slots == 0;
	int loud;
	long wait;

	c->ac = NULL;
	c->state = C_DOWN;
	event_del(c->timeout_ev);
	if (retire) {
		redial_idle(&c->redial);
		log_debug("Redis %s connection to %s closed (%s): it serves no "
		    "slots", c->name, c->addrstr, why);
	} else {
		wait = redial_failed(&c->redial, &loud);
		if (was_up || loud)
			log_warn("Redis %s connection %s (%s): %s; retrying in "
			    "%ld ms", c->name, was_up ? "lost" : "failed",
			    c->addrstr[0] ? c->addrstr : st->addr, why, wait);
		else
			log_debug("Redis %s connection failed: %s; retrying in "
			    "%ld ms", c->name, why, wait);
	}
	if (c->kind == CONN_CMD)
		store_queue_fail(c->node);
	if (st->cl != NULL && c->kind != CONN_SUB && !st->freeing)
		cluster_refresh(st->cl);	/* a failover, perhaps */
	if (was_up && c->kind == CONN_CMD) {
		st->reconnects++;
		shardsub_drop(c->node->ss);
		if (st->lease != NULL) {
			lease_follow(st->lease, NULL);
			store_serving(st);
		} else if (st->hooks.down) {
			st->hooks.down(st->hooks.arg);
		}
		/* A subscriber on a Redis we can no longer reach is as
		 * suspect; resubscribing later retries every waiter.  (In
		 * a cluster: if it is on that node.) */
		if (st->sub.ac != NULL && (st->cl == NULL ||
		    strcmp(st->sub.addrstr, c->addrstr) == 0))
			sconn_kill(&st->sub, "command connection lost");
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
	sconn_kill(c, "handshake refused");
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
	if (--c->handshake_left == 0 && c->kind != CONN_SUB)
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
 * The tenure is joined (tenure.lua ran): the connection is up (or, in
 * Sentinel mode, the store may serve).  A new replication id means a
 * failover or a Redis back without its data: the lock table reclaims its
 * locks (reassert.lua) before new grants.
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
	c->tenure_asked = 0;
	if (r->type == REDIS_REPLY_ERROR) {
		handshake_refused(c, r->str);
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    !store_is_int(r->element[0]) || !store_is_int(r->element[1])) {
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
		if (st->replid[0] != '\0') {
			memcpy(st->left[st->nleft % STORE_LEFT_MAX], st->replid,
			    sizeof st->replid);
			st->nleft++;
		}
		memcpy(st->replid, c->replid, sizeof st->replid);
	}
	c->tenure_joined = 1;
	if (st->lease != NULL)
		store_serving(st);	/* joined after the handshake */
	else if (--c->handshake_left == 0)
		conn_became_up(c);
}

static int
tenure_send(struct conn *c)
{
	struct store *st = c->st;

	if (redisAsyncCommand(c->ac, tenure_reply, c,
	    "EVALSHA %s 3 %s %s %s %s %s %ld", scripts[SCRIPT_TENURE].sha,
	    st->fence, st->tenure, st->delay, c->replid, st->replid,
	    st->cfg.lock_delay_ms) != REDIS_OK) {
		sconn_kill(c, "cannot send tenure.lua");
		return -1;
	}
	c->tenure_asked = 1;
	return 0;
}

/*
 * Sentinel mode joins a master's tenure only once the lease holds on it:
 * the lock delay a new tenure starts (tenure.lua) must count from when the
 * brokers can act on it and reclaim their locks, not from the handshake,
 * which comes before the sentinels agree on the new master (a second or
 * two after a failover).
 */
void
sconn_join_tenure(struct conn *c)
{
	if (c->ac != NULL && c->state == C_UP && !c->tenure_joined &&
	    !c->tenure_asked)
		tenure_send(c);
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
	if (st->cl != NULL) {
		/* cluster mode: each slot joins the tenure by itself
		 * (lib/slot_tenure.lua); a stale master answers MOVED */
		char was[64];

		memcpy(was, c->replid, sizeof was);
		info_field(r->str, "master_replid", c->replid,
		    sizeof c->replid);
		info_field(r->str, "master_replid2", c->replid2,
		    sizeof c->replid2);
		if (strcmp(was, c->replid) != 0) {
			st->tenures++;
			memcpy(c->node->prev_replid, was, sizeof was);
			c->node->tenure_ms = now_ms();
		}
		if (--c->handshake_left == 0)
			conn_became_up(c);
		return;
	}
	info_field(r->str, "master_replid", c->replid, sizeof c->replid);
	for (unsigned i = 0; i < st->nleft && i < STORE_LEFT_MAX; i++) {
		if (c->replid[0] != '\0' && strcmp(st->left[i], c->replid) == 0) {
			/* an old master that woke up still says master */
			snprintf(why, sizeof why, "stale master: replication id "
			    "%.8s belongs to an earlier tenure", c->replid);
			handshake_refused(c, why);
			return;
		}
	}
	if (st->lease != NULL) {
		/* the tenure is joined once the lease holds (above) */
		if (--c->handshake_left == 0)
			conn_became_up(c);
		return;
	}
	if (tenure_send(c) != 0)
		return;
	/* +1 for tenure.lua before -1 for INFO: not up yet */
	c->handshake_left++;
	c->handshake_left--;
}

/* Every ROLE_CHECK_MS: a master demoted while we stay connected (a frozen
 * old master that woke up, REPLICAOF) must not take grants. */
static void
role_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct conn *c = privdata;
	redisReply *r = reply;

	if (r == NULL || c->ac != ac || c->state != C_UP)
		return;
	if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, "master") != 0)
		sconn_kill(c, "Redis is no longer a master (ROLE)");
}

void
sconn_role_cb(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;

	(void)fd;
	(void)what;
	for (struct node *n = st->nodes; n != NULL; n = n->next)
		if (n->conn.state == C_UP && n->conn.ac != NULL &&
		    redisAsyncCommand(n->conn.ac, role_reply, &n->conn,
		    "ROLE") != REDIS_OK)
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
		sconn_kill(c, "unexpected reply on subscriber");
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
		else if (strcmp(chan, st->wanted) == 0)
			store_wanted_msg(st, key, keylen);
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
	c->tenure_joined = c->tenure_asked = 0;
	send_auth(c);
	if (c->kind == CONN_MAP) {
		if (c->handshake_left == 0)
			conn_became_up(c);	/* no AUTH to wait for */
	} else if (c->kind == CONN_SUB) {
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
	c->dying = 0;
	if (store_events_attach(ac, st->base) != 0) {
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
void
sconn_start(struct conn *c)
{
	struct store *st = c->st;

	if (st->cl != NULL && c->kind != CONN_CMD) {
		/* the subscriber and the map: any node of the cluster */
		const char *host;
		int port;

		cluster_next_addr(st->cl, c, &host, &port);
		conn_connect(c, host, port, 0);
		return;
	}
	if (st->sent == NULL || (c->kind == CONN_CMD && st->cl != NULL)) {
		struct node *n = c->node != NULL ? c->node : st->one;

		conn_connect(c, n->host, n->port, n->is_unix);
		return;
	}
	if (c->resolving)
		return;
	c->resolving = 1;
	c->state = C_CONNECTING;
	c->addrstr[0] = '\0';
	sentinel_resolve(st->sent, resolved, c);
}

/*
 * A connection waiting out a backoff: try now, and quickly after.  One
 * that was let go (cluster mode: its master had left the map) is started
 * again too: a redirection or a new map names it once more.
 */
void
sconn_retry_now(struct conn *c)
{
	redial_reset(&c->redial);
	if (c->state != C_DOWN || c->redial.retry_ev == NULL ||
	    c->st->freeing || event_pending(c->kill_ev, EV_TIMEOUT, NULL))
		return;
	if (redial_pending(&c->redial) ||
	    (c->kind == CONN_CMD && c->st->cl != NULL)) {
		redial_cancel(&c->redial);
		sconn_start(c);
	}
}

/* The sentinels say the master moved: follow it now. */
void
sconn_switched(void *arg, const struct addr *from, const struct addr *to)
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
	if (st->one->conn.ac != NULL && strcmp(st->one->conn.addrstr, b) != 0)
		sconn_kill(&st->one->conn, "the master moved");
	if (st->sub.ac != NULL && strcmp(st->sub.addrstr, b) != 0)
		sconn_kill(&st->sub, "the master moved");
	/* one waiting out a backoff (it kept failing on the dead master)
	 * must not sleep through the news */
	sconn_retry_now(&st->one->conn);
	sconn_retry_now(&st->sub);
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	sconn_start(arg);
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

void
sconn_kill(struct conn *c, const char *why)
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
		sconn_kill(c, c->state == C_CONNECTING ? "connect timed out" :
		    "no answer to handshake");
}

/* The oldest command in flight waited too long: Redis is not answering. */
void
sconn_watchdog_cb(evutil_socket_t fd, short what, void *arg)
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
		if (n->conn.state == C_UP && n->inflight > 0 &&
		    now_ms() - n->last_progress_ms > st->cfg.timeout_ms)
			sconn_kill(&n->conn, "Redis stopped answering");
		/* cluster mode: calls redirected to a master that does not
		 * come up are failed by its connect timeout; this is the
		 * net under that */
		if (n->conn.state != C_UP && n->qhead != NULL &&
		    now_ms() - n->qhead->born_ms > 2 * st->cfg.timeout_ms)
			store_queue_fail(n);
	}
}

void
sconn_init(struct store *st, struct conn *c, const char *name,
    enum conn_kind kind)
{
	c->st = st;
	c->name = name;
	c->kind = kind;
	c->state = C_DOWN;
	redial_init(&c->redial, st->base, retry_cb, c, REDIAL_MIN_MS,
	    REDIAL_MAX_MS);
	c->timeout_ev = evtimer_new(st->base, timeout_cb, c);
	c->kill_ev = evtimer_new(st->base, kill_cb, c);
	if (!c->timeout_ev || !c->kill_ev)
		fatalx("cannot create Redis timers");
}

void
sconn_close(struct conn *c)
{
	redisAsyncContext *ac = c->ac;

	c->ac = NULL;
	c->state = C_DOWN;
	if (ac != NULL)
		redisAsyncFree(ac);
	redial_free(&c->redial);
	if (c->timeout_ev)
		event_free(c->timeout_ev);
	if (c->kill_ev)
		event_free(c->kill_ev);
	c->timeout_ev = c->kill_ev = NULL;
}

void
store_kick(struct store *st)
{
	/* shutdown has only a short budget */
	for (struct node *n = st->nodes; n != NULL; n = n->next)
		if (st->cl == NULL || n->slots > 0)
			sconn_retry_now(&n->conn);
	if (st->cl != NULL)
		cluster_refresh(st->cl);
}
