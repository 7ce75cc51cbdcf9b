/*
 * lease.c - the Sentinel lease (lease.h): one connection per configured
 * sentinel, each asked SENTINEL MASTER <name> every LEASE_POLL_MS; what
 * the answers vouch for is vouch.c's arithmetic.
 *
 * Epochs go back only when an operator monitors the master anew: after
 * STALE_MS with no answer at the newest epoch, the newest one answered
 * becomes it.
 *
 * hiredis 0.14 (docs/HIREDIS.md): contexts are freed only from our own
 * events (kill_ev), our pointer cleared first; pending callbacks then run
 * with NULL replies and find a context that is no longer current.
 */
#include "lease.h"
#include "log.h"
#include "redial.h"
#include "resp.h"
#include "util.h"
#include "vouch.h"

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
/* static functions: all reached through redisLibeventAttach, used below */
#include <hiredis/adapters/libevent.h>

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STALE_MS	30000	/* no answer at the newest epoch this long */
#define ADDR_TEXT_LEN	(ADDR_HOST_LEN + 16)

enum peer_state { PEER_DOWN, PEER_CONNECTING, PEER_UP };

/* One sentinel: its connection and its last answer. */
struct peer {
	struct lease *ls;
	struct addr a;
	char text[ADDR_TEXT_LEN];
	enum peer_state state;
	redisAsyncContext *ac;
	struct resolve_req *lookup;	/* its name, before it connects */
	struct redial redial;		/* reconnect after backoff */
	struct event *kill_ev;
	redisAsyncContext *kill_ac;	/* the context kill_ev is meant for */
	const char *kill_why;
	int asking;			/* a SENTINEL MASTER is unanswered */
	int64_t sent_ms;		/* ... sent then (or the connect) */
};

struct lease {
	struct event_base *base;
	struct resolver *resolver;	/* sentinels given by name */
	char *name, *password, *user;
	long timeout_ms, max_ms;
	struct lease_hooks hooks;
	struct peer *peers;
	struct vouch_answer *answers;	/* one per peer, its last */
	size_t npeers;
	int following;
	struct addr follow;
	struct event *tick_ev;		/* every LEASE_POLL_MS */
	struct event *expire_ev;	/* at the lease's end: look again */
	struct event *notify_ev;	/* runs hooks.changed */
	int held, announced;
	int64_t until;
	long long max_epoch;		/* newest config epoch answered */
	int64_t max_seen_ms;		/* last answer at it */
	char logged[160];		/* why it is not held, as last
					 * logged */
};

static void peer_start(struct peer *p);

static void
addr_text(const struct addr *a, char *buf, size_t len)
{
	snprintf(buf, len, strchr(a->host, ':') ? "[%s]:%d" : "%s:%d",
	    a->host, a->port);
}

/* --- the lease ------------------------------------------------------- */

static void
notify_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lease *ls = arg;

	(void)fd;
	(void)what;
	if (ls->held == ls->announced)
		return;
	ls->announced = ls->held;
	if (ls->hooks.changed != NULL)	/* last: it may do anything */
		ls->hooks.changed(ls->hooks.arg, ls->held);
}

/* Why there is no lease, logged when the reason changes. */
static void
not_held(struct lease *ls, const char *why)
{
	if (strcmp(ls->logged, why) == 0)
		return;
	snprintf(ls->logged, sizeof ls->logged, "%s", why);
	log_warn("Sentinel lease not held: %s", why);
}

/* Work the lease out again from the answers (after an answer, a change
 * of master, or when it runs out). */
static void
lease_eval(struct lease *ls)
{
	int64_t now = now_ms();
	char why[sizeof ls->logged];
	int was = ls->held;

	ls->until = vouch_lease(ls->answers, ls->npeers, ls->max_epoch,
	    ls->following ? &ls->follow : NULL, now, ls->max_ms, why,
	    sizeof why);
	ls->held = ls->until > now;
	if (ls->held) {
		if (ls->logged[0] != '\0')
			log_info("Sentinel lease held again");
		ls->logged[0] = '\0';
		timer_add_ms(ls->expire_ev, ls->until - now);
	} else {
		event_del(ls->expire_ev);
		if (why[0] != '\0' && (was || ls->logged[0] != '\0' ||
		    ls->following))
			not_held(ls, why);
	}
	if (ls->held != ls->announced)
		event_active(ls->notify_ev, EV_TIMEOUT, 0);
}

static void
expire_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	lease_eval(arg);
}

/* --- one sentinel's connection ------------------------------------- */

static void
peer_lost(struct peer *p, const char *why)
{
	int was_up = p->state == PEER_UP;
	long wait;

	p->ac = NULL;
	p->state = PEER_DOWN;
	p->asking = 0;
	resolve_cancel(p->lookup);
	p->lookup = NULL;
	wait = redial_failed(&p->redial, NULL);
	if (was_up)
		log_info("Sentinel %s: lease connection lost (%s); retrying",
		    p->text, why);
	else
		log_debug("Sentinel %s: lease connection failed (%s); retrying "
		    "in %ld ms", p->text, why, wait);
}

/* Deferred teardown: from libevent, never inside hiredis. */
static void
kill_cb(evutil_socket_t fd, short what, void *arg)
{
	struct peer *p = arg;
	redisAsyncContext *ac = p->ac;

	(void)fd;
	(void)what;
	if (ac == NULL || ac != p->kill_ac)
		return;		/* gone already (onDisconnect came first) */
	peer_lost(p, p->kill_why);
	redisAsyncFree(ac);
}

static void
peer_kill(struct peer *p, const char *why)
{
	if (event_pending(p->kill_ev, EV_TIMEOUT, NULL))
		return;
	p->kill_why = why;
	p->kill_ac = p->ac;
	event_active(p->kill_ev, EV_TIMEOUT, 0);
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	peer_start(arg);
}

static long long
field_num(const redisReply *r, const char *name, long long def)
{
	const redisReply *v = resp_field(r, name);
	char *end;
	long long x;

	if (v == NULL)
		return def;
	if (v->type == REDIS_REPLY_INTEGER)
		return v->integer;
	if (v->type != REDIS_REPLY_STRING)
		return def;
	x = strtoll(v->str, &end, 10);
	return end != v->str && *end == '\0' ? x : def;
}

/* Decode p's answer into its vouch_answer; 0, or -1 when it is not one
 * (the answer is then dropped). */
static int
answer_read(struct peer *p, const redisReply *r)
{
	struct lease *ls = p->ls;
	struct vouch_answer *a = &ls->answers[p - ls->peers];
	const redisReply *ip = resp_field(r, "ip");
	const redisReply *port = resp_field(r, "port");
	const redisReply *fl = resp_field(r, "flags");
	long long epoch = field_num(r, "config-epoch", -1);
	char text[ADDR_HOST_LEN + 16], err[160];

	a->valid = 0;
	if (ip == NULL || ip->type != REDIS_REPLY_STRING || port == NULL ||
	    port->type != REDIS_REPLY_STRING || fl == NULL ||
	    fl->type != REDIS_REPLY_STRING || epoch < 0)
		return -1;
	snprintf(text, sizeof text, strchr(ip->str, ':') ? "[%s]:%s" : "%s:%s",
	    ip->str, port->str);
	if (addr_parse_endpoint(text, &a->master, err, sizeof err) != 0)
		return -1;
	a->sent_ms = p->sent_ms;
	a->down_after_ms = field_num(r, "down-after-milliseconds", -1);
	a->ping_sent_ms = field_num(r, "last-ping-sent", -1);
	a->ok_reply_ms = field_num(r, "last-ok-ping-reply", -1);
	if (a->down_after_ms < 0 || a->ping_sent_ms < 0 || a->ok_reply_ms < 0)
		return -1;
	a->epoch = epoch;
	a->quorum = (long)field_num(r, "quorum", 0);
	a->flags = vouch_flags(fl->str);
	a->valid = 1;
	if (epoch > ls->max_epoch) {
		ls->max_epoch = epoch;
		ls->max_seen_ms = now_ms();
	} else if (epoch == ls->max_epoch) {
		ls->max_seen_ms = now_ms();
	} else if (now_ms() - ls->max_seen_ms > STALE_MS) {
		log_warn("Sentinel %s: config epoch went back from %lld to %lld "
		    "(master monitored anew?): following it", p->text,
		    ls->max_epoch, epoch);
		ls->max_epoch = epoch;
		ls->max_seen_ms = now_ms();
	}
	return 0;
}

static void
master_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct peer *p = priv;
	redisReply *r = reply;

	if (p->ac != ac || r == NULL)
		return;		/* a context being torn down */
	p->asking = 0;
	if (r->type == REDIS_REPLY_ERROR) {
		log_debug("Sentinel %s: SENTINEL MASTER refused: %s", p->text,
		    r->str);
		p->ls->answers[p - p->ls->peers].valid = 0;
	} else if (r->type != REDIS_REPLY_ARRAY || answer_read(p, r) != 0) {
		log_debug("Sentinel %s: unexpected SENTINEL MASTER reply",
		    p->text);
	}
	lease_eval(p->ls);
}

static void
auth_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct peer *p = priv;
	redisReply *r = reply;

	if (p->ac != ac || r == NULL)
		return;
	if (r->type == REDIS_REPLY_ERROR)
		peer_kill(p, "AUTH refused");
}

static void
ask(struct peer *p)
{
	struct lease *ls = p->ls;

	if (p->state != PEER_UP || p->asking)
		return;
	if (redisAsyncCommand(p->ac, master_reply, p, "SENTINEL MASTER %s",
	    ls->name) != REDIS_OK) {
		peer_kill(p, "cannot send SENTINEL MASTER");
		return;
	}
	p->asking = 1;
	p->sent_ms = now_ms();
}

static void
on_connect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct peer *p = ac->data;
	struct lease *ls = p->ls;
	int rc = REDIS_OK;

	if (p->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees ac when we return; no onDisconnect follows */
		peer_lost(p, ac->errstr[0] ? ac->errstr : ac->c.errstr);
		return;
	}
	if (ls->password[0] != '\0')
		rc = ls->user[0] != '\0' ?
		    redisAsyncCommand(ac, auth_reply, p, "AUTH %s %s", ls->user,
		    ls->password) :
		    redisAsyncCommand(ac, auth_reply, p, "AUTH %s",
		    ls->password);
	if (rc != REDIS_OK) {
		peer_kill(p, "cannot send AUTH");
		return;
	}
	p->state = PEER_UP;
	redial_ok(&p->redial);
	ask(p);
}

static void
on_disconnect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct peer *p = ac->data;

	if (p->ac != ac)
		return;		/* we freed it ourselves */
	peer_lost(p, status == REDIS_OK ? "closed by the sentinel" :
	    ac->errstr[0] ? ac->errstr : "error");
}

static void peer_connect(struct peer *p, const char *host);

/* A sentinel's name looked up (peer_start): still connecting with no
 * context yet, or the answer came too late. */
static int
peer_waiting(void *arg)
{
	struct peer *p = arg;

	return p->state == PEER_CONNECTING && p->ac == NULL;
}

static void
peer_connect_to(void *arg, const char *host)
{
	peer_connect(arg, host);
}

static void
peer_unresolved(void *arg, const char *why)
{
	peer_lost(arg, why);
}

static const struct resolve_then peer_then = { peer_waiting,
    peer_connect_to, peer_unresolved };

/* Connect (a sentinel given by name is looked up first, every time: the
 * name may point elsewhere since); the lookup counts against the
 * connect's deadline (tick_cb). */
static void
peer_start(struct peer *p)
{
	p->state = PEER_CONNECTING;
	p->sent_ms = now_ms();		/* the connect's deadline counts */
	if (!p->a.is_name) {
		peer_connect(p, p->a.host);
		return;
	}
	resolve_connect(p->ls->resolver, &p->lookup, p->a.host, &peer_then, p);
}

static void
peer_connect(struct peer *p, const char *host)
{
	struct lease *ls = p->ls;
	redisAsyncContext *ac;

	ac = redisAsyncConnect(host, p->a.port);
	if (ac == NULL || ac->err) {
		p->ac = NULL;
		peer_lost(p, ac != NULL ? ac->errstr : "out of memory");
		if (ac != NULL)
			redisAsyncFree(ac);
		return;
	}
	if (redisLibeventAttach(ac, ls->base) != REDIS_OK) {
		p->ac = NULL;
		peer_lost(p, "cannot attach to the event loop");
		redisAsyncFree(ac);	/* never connected: no callback runs */
		return;
	}
	ac->data = p;
	p->ac = ac;
	if (redisAsyncSetConnectCallback(ac, on_connect) != REDIS_OK ||
	    redisAsyncSetDisconnectCallback(ac, on_disconnect) != REDIS_OK)
		peer_kill(p, "cannot set callbacks");
}

/* Every LEASE_POLL_MS: ask each sentinel again, and give up on one that
 * did not answer (or connect) within timeout_ms. */
static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lease *ls = arg;
	int64_t now = now_ms();

	(void)fd;
	(void)what;
	for (size_t i = 0; i < ls->npeers; i++) {
		struct peer *p = &ls->peers[i];

		if (p->state == PEER_CONNECTING && p->ac == NULL &&
		    p->lookup != NULL && now - p->sent_ms > ls->timeout_ms)
			peer_lost(p, "its name did not resolve in time");
		else if ((p->asking || p->state == PEER_CONNECTING) &&
		    now - p->sent_ms > ls->timeout_ms)
			peer_kill(p, p->asking ? "no answer in time" :
			    "connect timed out");
		else
			ask(p);
	}
}

/* --- the lease's life ---------------------------------------------- */

static int
parse_peers(struct lease *ls, const char *list, char *err, size_t errlen)
{
	const char *p = list;
	size_t count = 1;

	if (list == NULL || list[0] == '\0') {
		snprintf(err, errlen, "no sentinel addresses");
		return -1;
	}
	for (const char *q = list; *q != '\0'; q++)
		count += *q == ',';
	if (count > 64) {
		snprintf(err, errlen, "more than 64 sentinels");
		return -1;
	}
	ls->peers = xcalloc(count, sizeof *ls->peers);
	ls->answers = xcalloc(count, sizeof *ls->answers);
	for (size_t i = 0; i < count; i++) {
		size_t len = strcspn(p, ",");
		char *item = xstrndup(p, len), msg[160];
		struct peer *pe = &ls->peers[i];
		int rc = len == 0 ? -1 :
		    addr_parse_endpoint(item, &pe->a, msg, sizeof msg);

		free(item);
		if (rc != 0 || pe->a.is_unix) {
			snprintf(err, errlen, "sentinel address %zu: %s", i + 1,
			    rc != 0 ? (len == 0 ? "empty" : msg) :
			    "unix sockets are not supported here");
			return -1;
		}
		pe->ls = ls;
		addr_text(&pe->a, pe->text, sizeof pe->text);
		ls->npeers++;
		p += len + (p[len] == ',');
	}
	return 0;
}

static char *
dup_or_empty(const char *s)
{
	return xstrndup(s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

struct lease *
lease_new(struct event_base *base, const struct lease_cfg *cfg,
    const struct lease_hooks *hooks, char *err, size_t errlen)
{
	struct lease *ls = xcalloc(1, sizeof *ls);
	struct timeval tick = { 0, LEASE_POLL_MS * 1000 };

	ls->base = base;
	ls->resolver = cfg->resolver;
	ls->name = dup_or_empty(cfg->master_name);
	ls->password = dup_or_empty(cfg->password);
	ls->user = dup_or_empty(cfg->user);
	ls->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 500;
	ls->max_ms = cfg->max_ms > 0 ? cfg->max_ms : 0;
	ls->hooks = *hooks;
	ls->max_epoch = -1;
	if (parse_peers(ls, cfg->sentinels, err, errlen) != 0) {
		lease_free(ls);
		return NULL;
	}
	ls->expire_ev = timer_new(base, expire_cb, ls);
	ls->notify_ev = timer_new(base, notify_cb, ls);
	ls->tick_ev = event_new(base, -1, EV_PERSIST, tick_cb, ls);
	if (ls->tick_ev == NULL || event_add(ls->tick_ev, &tick) != 0)
		fatalx("Sentinel lease: cannot arm the poll timer");
	for (size_t i = 0; i < ls->npeers; i++) {
		struct peer *p = &ls->peers[i];

		redial_init(&p->redial, base, retry_cb, p, REDIAL_MIN_MS,
		    REDIAL_MAX_MS);
		p->kill_ev = timer_new(base, kill_cb, p);
		peer_start(p);
	}
	return ls;
}

static void
event_drop(struct event *ev)
{
	if (ev != NULL)
		event_free(ev);
}

void
lease_free(struct lease *ls)
{
	if (ls == NULL)
		return;
	for (size_t i = 0; i < ls->npeers; i++) {
		struct peer *p = &ls->peers[i];
		redisAsyncContext *ac = p->ac;

		p->ac = NULL;		/* its callbacks find it not current */
		resolve_cancel(p->lookup);
		p->lookup = NULL;
		if (ac != NULL)
			redisAsyncFree(ac);
		redial_free(&p->redial);
		event_drop(p->kill_ev);
	}
	event_drop(ls->tick_ev);
	event_drop(ls->expire_ev);
	event_drop(ls->notify_ev);
	free(ls->peers);
	free(ls->answers);
	free(ls->name);
	free(ls->password);
	free(ls->user);
	free(ls);
}

void
lease_follow(struct lease *ls, const struct addr *master)
{
	if (master == NULL) {
		ls->following = 0;
	} else if (!ls->following || !addr_same(&ls->follow, master)) {
		ls->following = 1;
		ls->follow = *master;
		for (size_t i = 0; i < ls->npeers; i++)
			ask(&ls->peers[i]);	/* answers come soon */
	}
	lease_eval(ls);
}

int
lease_held(const struct lease *ls)
{
	return ls->held && ls->until > now_ms();
}

int64_t
lease_left_ms(const struct lease *ls)
{
	int64_t left = ls->until - now_ms();

	return ls->held && left > 0 ? left : 0;
}
