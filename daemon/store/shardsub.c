/*
 * shardsub.c - cluster mode's wake-ups: sharded pub/sub, per master.
 *
 * In a cluster a classic PUBLISH is sent to every node over the cluster
 * bus (measured here: ~4 CPU-us per message on every other node), so its
 * cost grows with the cluster.  The scripts publish instead with SPUBLISH
 * (Redis 7) on channels of the lock key's own slot,
 * <prefix>:released:{tag} and <prefix>:wanted:{tag}, which stay in that
 * slot's shard, and each broker subscribes, on every master, to the two
 * channels of every slot the master serves.
 *
 * hiredis 0.14's async API aborts the process on the first sharded
 * message (its subscribe bookkeeping knows only subscribe/psubscribe:
 * docs/HIREDIS.md), so this connection is our
 * own: a libevent bufferevent, commands formatted by hiredis
 * (redisFormatCommand) and replies parsed by its redisReader.
 *
 * A subscription is a bit per slot, set when its SSUBSCRIBE is sent.  A
 * slot that leaves the master (a migration: Redis answers "sunsubscribe"
 * for its channels; a failover: the connection drops) is subscribed again
 * where the map says it lives now, and once the new subscriptions are
 * confirmed the lock table retries every waiter (hooks.subscribed):
 * releases published meanwhile were missed.
 */
#include "shardsub.h"
#include "log.h"
#include "slot.h"
#include "util.h"

#include <hiredis/hiredis.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct shardsub {
	const struct link_env *env;
	const struct store_keys *keys;
	const struct store_hooks *hooks;
	const struct shardsub_ops *ops;
	void *arg;
	char *host;			/* its master */
	int port;
	const char *name;		/* its master, for logs */
	struct resolve_req *lookup;	/* a master by name, before connecting */
	struct bufferevent *bev;
	redisReader *reader;
	enum link_state state;
	struct redial redial;		/* reconnect after backoff */
	struct event *timeout_ev;	/* connect / AUTH deadline */
	unsigned confirms;		/* SSUBSCRIBE confirmations awaited */
	unsigned char subbed[SLOT_COUNT / 8];	/* SSUBSCRIBE sent */
	/* The slots of the SSUBSCRIBEs in flight, in order: an error reply
	 * (MOVED: the map was stale) names no channel. */
	unsigned short fifo[SLOT_COUNT];
	unsigned fhead, fcount;
};

static void ss_start(struct shardsub *ss);

static int
bit(const struct shardsub *ss, unsigned s)
{
	return ss->subbed[s / 8] >> (s % 8) & 1;
}

static void
bit_set(struct shardsub *ss, unsigned s, int on)
{
	if (on)
		ss->subbed[s / 8] |= (unsigned char)(1u << (s % 8));
	else
		ss->subbed[s / 8] &= (unsigned char)~(1u << (s % 8));
}

static int
ss_send(struct shardsub *ss, const char *fmt, const char *a, const char *b)
{
	char *cmd;
	int len = b != NULL ? redisFormatCommand(&cmd, fmt, a, b) :
	    a != NULL ? redisFormatCommand(&cmd, fmt, a) :
	    redisFormatCommand(&cmd, fmt);
	int rc;

	if (len < 0)
		return -1;
	rc = bufferevent_write(ss->bev, cmd, (size_t)len);
	redisFreeCommand(cmd);
	return rc;
}

/* The connection is gone or refused: drop it, try again after a backoff
 * (while the master still serves slots). */
static void
ss_lost(struct shardsub *ss, const char *why)
{
	int was_up = ss->state == LINK_UP;
	int loud;
	long wait;

	resolve_cancel(ss->lookup);
	ss->lookup = NULL;
	if (ss->bev != NULL)
		bufferevent_free(ss->bev);
	ss->bev = NULL;
	if (ss->reader != NULL)
		redisReaderFree(ss->reader);
	ss->reader = NULL;
	ss->state = LINK_DOWN;
	ss->confirms = 0;
	ss->fhead = ss->fcount = 0;
	memset(ss->subbed, 0, sizeof ss->subbed);
	event_del(ss->timeout_ev);
	if (!ss->ops->serving(ss->arg) || ss->env->closing)
		return;
	wait = redial_failed(&ss->redial, &loud);
	if (was_up || loud)
		log_warn("Redis shard subscriber %s %s: %s; retrying in %ld ms",
		    ss->name, was_up ? "lost" : "failed", why, wait);
}

/* Build "<channel-prefix><tag>}" for slot s. */
static void
channel(char *buf, size_t len, const char *pfx, unsigned s)
{
	snprintf(buf, len, "%s%s}", pfx, slot_tag(s));
}

void
shardsub_sync(struct shardsub *ss)
{
	char rel[256], want[256];
	unsigned sent = 0;

	if (ss->state != LINK_UP)
		return;
	for (unsigned s = 0; s < SLOT_COUNT; s++) {
		if (!ss->ops->owns(ss->arg, s)) {
			bit_set(ss, s, 0);	/* Redis unsubscribes it */
			continue;
		}
		if (bit(ss, s))
			continue;
		channel(rel, sizeof rel, ss->keys->channel, s);
		channel(want, sizeof want, ss->keys->wanted, s);
		if (ss_send(ss, "SSUBSCRIBE %s %s", rel, want) != 0) {
			ss_lost(ss, "cannot send SSUBSCRIBE");
			return;
		}
		bit_set(ss, s, 1);
		ss->confirms += 2;
		ss->fifo[(ss->fhead + ss->fcount++) % SLOT_COUNT] =
		    (unsigned short)s;
		sent++;
	}
	if (sent > 0)
		log_debug("Redis shard subscriber %s: subscribing %u slots",
		    ss->name, sent);
}

/* The oldest SSUBSCRIBE in flight is answered (confirmed or refused). */
static unsigned
fifo_pop(struct shardsub *ss)
{
	unsigned s = ss->fifo[ss->fhead];

	ss->fhead = (ss->fhead + 1) % SLOT_COUNT;
	ss->fcount--;
	return s;
}

/* n confirmations fewer to wait for; the last one retries the waiters
 * (releases may have been missed until now). */
static void
confirmed(struct shardsub *ss, unsigned n)
{
	const struct store_hooks *h = ss->hooks;

	if (ss->confirms == 0)
		return;
	ss->confirms = ss->confirms > n ? ss->confirms - n : 0;
	if (ss->confirms == 0 && h->subscribed)
		h->subscribed(h->arg);
}

/* Connected (and AUTH accepted): subscribe. */
static void
ss_ready(struct shardsub *ss)
{
	event_del(ss->timeout_ev);
	ss->state = LINK_UP;
	redial_ok(&ss->redial);
	shardsub_sync(ss);
}

/* One reply or push from Redis. */
static void
ss_reply(struct shardsub *ss, redisReply *r)
{
	const struct store_keys *k = ss->keys;
	const struct store_hooks *h = ss->hooks;
	const char *kind;

	if (r->type == REDIS_REPLY_STATUS && ss->state == LINK_HANDSHAKE) {
		ss_ready(ss);		/* AUTH accepted */
		return;
	}
	if (r->type == REDIS_REPLY_ERROR && ss->state == LINK_UP &&
	    ss->fcount > 0) {
		/* an SSUBSCRIBE refused (MOVED: our map was stale): that
		 * slot is subscribed again where the next map says */
		log_debug("Redis shard subscriber %s: %s", ss->name, r->str);
		bit_set(ss, fifo_pop(ss), 0);
		confirmed(ss, 2);
		ss->ops->lost_slot(ss->arg);
		return;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		log_error("Redis shard subscriber %s: %s", ss->name, r->str);
		ss_lost(ss, "error reply");
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING)
		return;		/* nothing else is expected; ignored */
	kind = r->element[0]->str;
	if (strcmp(kind, "smessage") == 0 &&
	    r->element[2]->type == REDIS_REPLY_STRING) {
		const char *chan = r->element[1]->str;
		const char *msg = r->element[2]->str;
		size_t len = (size_t)r->element[2]->len;

		if (strncmp(chan, k->channel, strlen(k->channel)) == 0) {
			keys_released_msg(h, msg, len);
		} else if (strncmp(chan, k->wanted, strlen(k->wanted)) == 0) {
			keys_wanted_msg(k, h, msg, len);
		}
	} else if (strcmp(kind, "ssubscribe") == 0) {
		/* two per SSUBSCRIBE: "released", then "wanted" */
		if (strncmp(r->element[1]->str, k->wanted,
		    strlen(k->wanted)) == 0 && ss->fcount > 0)
			(void)fifo_pop(ss);
		confirmed(ss, 1);
	} else if (strcmp(kind, "sunsubscribe") == 0) {
		/* the slot moved away: subscribed where it lives now, once
		 * the map says where */
		unsigned s = slot_of(r->element[1]->str,
		    (size_t)r->element[1]->len, NULL, 0);

		bit_set(ss, s, 0);
		ss->ops->lost_slot(ss->arg);
	}
}

static void
read_cb(struct bufferevent *bev, void *arg)
{
	struct shardsub *ss = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	void *reply;

	while (evbuffer_get_length(in) > 0) {
		struct evbuffer_iovec v[8];
		int nv = evbuffer_peek(in, -1, NULL, v, 8);
		size_t fed = 0;

		for (int i = 0; i < nv && i < 8; i++) {
			if (redisReaderFeed(ss->reader, v[i].iov_base,
			    v[i].iov_len) != REDIS_OK) {
				ss_lost(ss, "cannot read reply");
				return;
			}
			fed += v[i].iov_len;
		}
		evbuffer_drain(in, fed);
	}
	for (;;) {
		if (redisReaderGetReply(ss->reader, &reply) != REDIS_OK) {
			ss_lost(ss, "protocol error");
			return;
		}
		if (reply == NULL)
			break;
		ss_reply(ss, reply);
		freeReplyObject(reply);
		if (ss->reader == NULL)
			return;		/* ss_lost ran */
	}
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct shardsub *ss = arg;
	const struct link_env *env = ss->env;

	(void)bev;
	if (what & BEV_EVENT_CONNECTED) {
		evutil_socket_t fd = bufferevent_getfd(bev);
		int on = 1;

		/* it never writes once subscribed: let TCP find a dead peer */
		if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on,
		    sizeof on) != 0)
			log_debug("keepalive not enabled on a shard subscriber");
		ss->state = LINK_HANDSHAKE;
		if (env->password[0] == '\0') {
			ss_ready(ss);
			return;
		}
		if ((env->user[0] != '\0' ? ss_send(ss, "AUTH %s %s", env->user,
		    env->password) : ss_send(ss, "AUTH %s", env->password,
		    NULL)) != 0)
			ss_lost(ss, "cannot send AUTH");
		return;
	}
	ss_lost(ss, what & BEV_EVENT_EOF ? "closed" : "socket error");
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct shardsub *ss = arg;

	(void)fd;
	(void)what;
	if (ss->state == LINK_CONNECTING || ss->state == LINK_HANDSHAKE)
		ss_lost(ss, "connect timed out");
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	ss_start(arg);
}

static void ss_connect(struct shardsub *ss, const char *host);

/* A master's name looked up (ss_start): still connecting with no
 * connection yet, or the answer came too late. */
static int
ss_waiting(void *arg)
{
	struct shardsub *ss = arg;

	return ss->state == LINK_CONNECTING && ss->bev == NULL;
}

static void
ss_connect_to(void *arg, const char *host)
{
	ss_connect(arg, host);
}

static void
ss_unresolved(void *arg, const char *why)
{
	ss_lost(arg, why);
}

static const struct resolve_then ss_then = { ss_waiting, ss_connect_to,
    ss_unresolved };

/* Connect; a master the map names by host name (cluster-preferred-
 * endpoint-type hostname) is looked up first, within the connect's
 * deadline. */
static void
ss_start(struct shardsub *ss)
{
	if (ss->state != LINK_DOWN || !ss->ops->serving(ss->arg) ||
	    ss->env->closing)
		return;
	if (ss->env->resolver == NULL || !resolve_is_name(ss->host)) {
		ss_connect(ss, ss->host);
		return;
	}
	ss->state = LINK_CONNECTING;
	timer_add_ms(ss->timeout_ev, ss->env->timeout_ms);
	resolve_connect(ss->env->resolver, &ss->lookup, ss->host, &ss_then,
	    ss);
}

/* Connect to host, a numeric address. */
static void
ss_connect(struct shardsub *ss, const char *host)
{
	struct addr a;
	struct sockaddr_storage sa;
	socklen_t salen;
	char err[160], ep[ADDR_HOST_LEN + 16];

	snprintf(ep, sizeof ep, strchr(host, ':') ? "[%s]:%d" : "%s:%d",
	    host, ss->port);
	if (addr_parse_endpoint(ep, &a, err, sizeof err) != 0 ||
	    addr_sockaddr(&a, 0, &sa, &salen) != 0) {
		log_error("Redis shard subscriber %s: %s", ep, err);
		return;
	}
	ss->bev = bufferevent_socket_new(ss->env->base, -1,
	    BEV_OPT_CLOSE_ON_FREE);
	ss->reader = redisReaderCreate();
	if (ss->bev == NULL || ss->reader == NULL)
		fatalx("out of memory");
	bufferevent_setcb(ss->bev, read_cb, NULL, event_cb, ss);
	ss->state = LINK_CONNECTING;
	timer_add_ms(ss->timeout_ev, ss->env->timeout_ms);
	if (bufferevent_enable(ss->bev, EV_READ) != 0 ||
	    bufferevent_socket_connect(ss->bev, (struct sockaddr *)&sa,
	    (int)salen) != 0)
		ss_lost(ss, "cannot connect");
}

struct shardsub *
shardsub_new(const struct link_env *env, const struct store_keys *k,
    const struct store_hooks *h, const char *host, int port,
    const char *name, const struct shardsub_ops *ops, void *arg)
{
	struct shardsub *ss = xcalloc(1, sizeof *ss);

	ss->env = env;
	ss->keys = k;
	ss->hooks = h;
	ss->ops = ops;
	ss->arg = arg;
	ss->host = xstrndup(host, strlen(host));
	ss->port = port;
	ss->name = name;
	ss->state = LINK_DOWN;
	redial_init(&ss->redial, env->base, retry_cb, ss, REDIAL_MIN_MS,
	    REDIAL_MAX_MS);
	ss->timeout_ev = timer_new(env->base, timeout_cb, ss);
	ss_start(ss);
	return ss;
}

/* The master is in the map (again): connect if not connected and not
 * waiting out a backoff (a dead master stays in the map a while). */
void
shardsub_wake(struct shardsub *ss)
{
	if (ss->state == LINK_DOWN) {
		if (!redial_pending(&ss->redial))
			ss_start(ss);
	} else {
		shardsub_sync(ss);
	}
}

void
shardsub_drop(struct shardsub *ss)
{
	if (ss != NULL && ss->state != LINK_DOWN)
		ss_lost(ss, "command connection lost");
}

void
shardsub_free(struct shardsub *ss)
{
	if (ss == NULL)
		return;
	resolve_cancel(ss->lookup);
	if (ss->bev != NULL)
		bufferevent_free(ss->bev);
	if (ss->reader != NULL)
		redisReaderFree(ss->reader);
	redial_free(&ss->redial);
	event_free(ss->timeout_ev);
	free(ss->host);
	free(ss);
}
