/*
 * sentinel.c - where the Redis master is, asked of Redis Sentinel.
 *
 * Three kinds of work, each on its own hiredis connections
 * (the Sentinel client protocol: ask, connect, check the role):
 *  - a walk answers one sentinel_resolve(), or one poll: it asks the
 *    sentinels in turn, starting with the one that answered last, each on
 *    a fresh connection that one timer bounds (connect, AUTH and answer);
 *  - one subscription per sentinel, to +switch-master, reconnecting with
 *    capped backoff, so a failover is seen as soon as it is announced;
 *  - the poll starts a walk every SENTINEL_POLL_MS, as messages can be
 *    missed (a subscription down, a sentinel restarted).
 *
 * Sentinels disagree for a moment during a failover: the leader names the
 * promoted replica while the others still name the old master until its
 * hello reaches them.  A walk that asked a lagging sentinel right after a
 * +switch-master from another one would report the old master again, and
 * the store would flap between the two.  So each answer carries the
 * sentinel's config epoch (SENTINEL MASTER, sent in the same write as
 * get-master-addr-by-name, so the two describe one moment), and an answer
 * from an epoch older than one already followed is skipped like a silent
 * sentinel.  Epochs only go back when an operator re-monitors the master;
 * STALE_ACCEPT_MS of nothing but older answers then accepts them.
 *
 * hiredis 0.14 facts this file is built around (docs/HIREDIS.md):
 *  - hiredis frees a context right after onDisconnect returns, and right
 *    after onConnect reports an error: our pointer is cleared in both;
 *    every teardown we start runs from our own libevent callback, and our
 *    pointer is cleared before redisAsyncFree;
 *  - on teardown every pending callback runs once with reply NULL (a
 *    subscription once per channel), also from inside sentinel_free(): each
 *    callback first checks that its context is still the current one;
 *  - there are no async timeouts, and a SIGSTOPped sentinel still accepts
 *    TCP: libevent timers bound connect and answer;
 *  - a subscribed connection takes no PING: a silent sentinel's
 *    subscription is noticed by TCP keepalive only, and the poll covers it;
 *  - redisAsyncConnect resolves a name with a blocking getaddrinfo: a
 *    sentinel given by name is looked up first (resolve.h, on every
 *    connect: the name may point elsewhere since) and hiredis gets the
 *    number.
 *
 * Hooks and resolve callbacks never run inside a hiredis callback: walks
 * end from their own event, and switches are announced from another
 * (notify_ev), after the state they describe is recorded.  Neither touches
 * the sentinel after calling out, so a callback may call sentinel_free().
 */
#include "sentinel.h"
#include "addr.h"
#include "log.h"
#include "redial.h"
#include "resp.h"
#include "util.h"

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
/* static functions: all reached through redisLibeventAttach, used below */
#include <hiredis/adapters/libevent.h>

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STALE_ACCEPT_MS	30000	/* older epochs only, this long: follow them */
/* an attempt's failure, with an address */
#define WHY_LEN		(ADDR_TEXT_LEN + 320)
#define ANSWER_LEN	(WHY_LEN + 64)	/* a walk's failure, built from one */
#define ADDR_TEXT_LEN	(ADDR_HOST_LEN + 16)	/* "[host]:port" */
#define CHANNEL		"+switch-master"

/* A subscription's life, as a store link's (link.h). */
enum sub_state {
	SUB_DOWN,		/* waiting out the backoff (retry_ev) */
	SUB_CONNECTING,		/* TCP connect in progress */
	SUB_SUBSCRIBING,	/* AUTH / SUBSCRIBE sent, no confirmation yet */
	SUB_UP			/* subscribed: messages arrive */
};

/* One configured sentinel, and its subscription. */
struct sentinel_peer {
	struct sentinel *s;
	struct addr a;
	char text[ADDR_TEXT_LEN];	/* the address, for logs */
	enum sub_state state;
	redisAsyncContext *ac;		/* subscription; NULL when down */
	struct resolve_req *lookup;	/* its name, before it connects */
	struct redial redial;		/* reconnect after backoff */
	struct event *timeout_ev;	/* connect / subscribe deadline */
	struct event *kill_ev;		/* deferred teardown */
	redisAsyncContext *kill_ac;	/* the context kill_ev is meant for */
	const char *kill_why;
	int loss_logged;		/* its loss was logged: log its return */
};

/* One attempt of a walk: one sentinel asked on one connection. */
enum try_state {
	TRY_IDLE,		/* none under way (start, or failed at once) */
	TRY_RESOLVING,		/* its name is being looked up */
	TRY_CONNECTING,		/* TCP connect in progress */
	TRY_ASKING,		/* questions sent, answers awaited */
	TRY_DONE		/* concluded; step_ev tears down, goes on */
};

/* One resolve (fn set) or one poll (fn NULL), until it is answered. */
struct walk {
	struct sentinel *s;
	struct walk *prev, *next;	/* in s->walks */
	sentinel_resolve_fn *fn;
	void *arg;
	size_t first;			/* sentinel asked first */
	size_t tried;			/* attempts started */
	size_t cur;			/* sentinel of the current attempt */
	enum try_state state;
	redisAsyncContext *ac;		/* current attempt; NULL when none */
	struct resolve_req *lookup;	/* ... while its name is looked up */
	struct event *step_ev;		/* next step, from the event loop */
	struct event *timeout_ev;	/* the current attempt's deadline */
	int got_addr;			/* get-master-addr-by-name answered */
	int ok;				/* ... and the attempt concluded well */
	struct addr found;
	long long epoch;		/* its config epoch; -1 unknown */
	int stale;			/* some sentinel answered from the past */
	char answer_why[WHY_LEN];	/* last failure a sentinel said */
	char reach_why[WHY_LEN];	/* last sentinel that did not answer */
};

struct sentinel {
	struct event_base *base;
	struct resolver *resolver;	/* sentinels given by name */
	char *name, *password, *user;	/* our copies */
	long timeout_ms;
	struct sentinel_hooks hooks;
	struct sentinel_peer *peers;
	size_t npeers;
	size_t preferred;		/* the sentinel that answered last */
	struct walk *walks;		/* outstanding, the poll's included */
	struct walk *poll;		/* the poll's walk, or NULL */
	struct event *poll_ev;		/* every SENTINEL_POLL_MS */
	struct event *notify_ev;	/* runs hooks->switched */
	int have_master;
	struct addr master;		/* last reported */
	int switch_pending;		/* notify_ev has a switch to announce */
	int switch_has_from;
	struct addr switch_from;	/* master before the pending switch */
	long long epoch_seen;		/* config epoch followed; -1 none */
	long long epoch_min;		/* answers below it are stale */
	int64_t stale_since_ms;		/* first walk lost to stale answers */
	char logged_why[ANSWER_LEN];	/* failure logged; "" after a success */
};

static void walk_step_cb(evutil_socket_t fd, short what, void *arg);
static void walk_timeout_cb(evutil_socket_t fd, short what, void *arg);
static void sub_start(struct sentinel_peer *n);

/* --- helpers -------------------------------------------------------- */

static void
event_free_safe(struct event *ev)
{
	if (ev != NULL)
		event_free(ev);
}

/* "host:port", IPv6 hosts in brackets. */
static void
addr_text(const struct addr *a, char *buf, size_t len)
{
	snprintf(buf, len, strchr(a->host, ':') ? "[%s]:%d" : "%s:%d",
	    a->host, a->port);
}

/* A host and port as a sentinel sends them, by the endpoint parser (so
 * only numeric hosts pass).  Returns 0, or -1 with a message in err. */
static int
addr_from_parts(const char *host, size_t hostlen, const char *port,
    size_t portlen, struct addr *a, char *err, size_t errlen)
{
	char text[ADDR_HOST_LEN + 16];
	int n;

	if (hostlen >= ADDR_HOST_LEN || portlen > 5) {
		snprintf(err, errlen, "address too long");
		return -1;
	}
	n = snprintf(text, sizeof text,
	    memchr(host, ':', hostlen) ? "[%.*s]:%.*s" : "%.*s:%.*s",
	    (int)hostlen, host, (int)portlen, port);
	if (n < 0 || (size_t)n >= sizeof text) {
		snprintf(err, errlen, "address too long");
		return -1;
	}
	return addr_parse_endpoint(text, a, err, errlen);
}

/* --- what the master is ----------------------------------------------- */

static void
notify_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sentinel *s = arg;
	struct addr from, to;
	int has_from;

	(void)fd;
	(void)what;
	if (!s->switch_pending)
		return;
	s->switch_pending = 0;
	has_from = s->switch_has_from;
	from = s->switch_from;
	to = s->master;
	/* moved and moved back within one loop turn: nothing to announce */
	if (has_from && addr_same(&from, &to))
		return;
	if (s->hooks.switched != NULL)	/* last: it may free s */
		s->hooks.switched(s->hooks.arg, has_from ? &from : NULL, &to);
}

/*
 * The master is a, by a walk (quiet: the first answer is no switch) or
 * by a +switch-master message.  Records it now; a change is announced
 * from notify_ev, so never inside hiredis, and changes within one loop
 * turn are announced once, from the first "from" to the last "to".
 */
static void
master_set(struct sentinel *s, const struct addr *a, int quiet_first,
    const char *source)
{
	char was[ADDR_TEXT_LEN], now[ADDR_TEXT_LEN];

	if (s->have_master && addr_same(&s->master, a))
		return;
	addr_text(a, now, sizeof now);
	if (!s->have_master) {
		s->have_master = 1;
		s->master = *a;
		log_debug("Sentinel: master %s (%s)", now, source);
		if (quiet_first)
			return;
		if (!s->switch_pending) {
			s->switch_pending = 1;
			s->switch_has_from = 0;
		}
	} else {
		addr_text(&s->master, was, sizeof was);
		log_debug("Sentinel: master %s, was %s (%s)", now, was, source);
		if (!s->switch_pending) {
			s->switch_pending = 1;
			s->switch_has_from = 1;
			s->switch_from = s->master;
		}
		s->master = *a;
	}
	event_active(s->notify_ev, EV_TIMEOUT, 0);
}

/* --- walks: one resolve or poll ------------------------------------- */

static struct walk *
walk_new(struct sentinel *s, sentinel_resolve_fn *fn, void *arg)
{
	struct walk *w = xcalloc(1, sizeof *w);

	w->s = s;
	w->fn = fn;
	w->arg = arg;
	w->first = s->preferred;
	w->epoch = -1;
	w->state = TRY_IDLE;
	w->step_ev = timer_new(s->base, walk_step_cb, w);
	w->timeout_ev = timer_new(s->base, walk_timeout_cb, w);
	w->next = s->walks;
	if (s->walks != NULL)
		s->walks->prev = w;
	s->walks = w;
	/* Started from the loop: the answer is never given from inside
	 * sentinel_resolve(), even when no sentinel can be reached. */
	event_active(w->step_ev, EV_TIMEOUT, 0);
	return w;
}

static void
walk_unlink(struct walk *w)
{
	struct sentinel *s = w->s;

	if (w->prev != NULL)
		w->prev->next = w->next;
	else
		s->walks = w->next;
	if (w->next != NULL)
		w->next->prev = w->prev;
	w->prev = w->next = NULL;
	if (s->poll == w)
		s->poll = NULL;
}

/* Drop the current attempt's connection.  Our pointer is cleared first:
 * the NULL replies and onDisconnect that redisAsyncFree runs see a
 * context that is no longer current and do nothing. */
static void
walk_drop_conn(struct walk *w)
{
	redisAsyncContext *ac = w->ac;

	resolve_cancel(w->lookup);
	w->lookup = NULL;
	w->ac = NULL;
	if (ac != NULL)
		redisAsyncFree(ac);
}

/* Note why the current attempt failed.  answered: the sentinel said
 * something (nil, an error, a stale answer), which tells the caller more
 * than a sentinel that could not be reached. */
static void
try_record(struct walk *w, int answered, const char *why)
{
	struct sentinel_peer *n = &w->s->peers[w->cur];

	log_debug("Sentinel %s: %s", n->text, why);
	if (answered)
		snprintf(w->answer_why, sizeof w->answer_why, "%s", why);
	else
		snprintf(w->reach_why, sizeof w->reach_why, "%s: %s", n->text,
		    why);
}

/* The current attempt is over (the first conclusion counts); teardown
 * and the next attempt run from step_ev, outside hiredis. */
static void
try_conclude(struct walk *w, int ok)
{
	w->state = TRY_DONE;
	w->ok = ok;
	event_del(w->timeout_ev);
	event_active(w->step_ev, EV_TIMEOUT, 0);
}

static void __attribute__((format(printf, 3, 4)))
try_fail(struct walk *w, int answered, const char *fmt, ...)
{
	char why[WHY_LEN];
	va_list ap;

	if (w->state != TRY_RESOLVING && w->state != TRY_CONNECTING &&
	    w->state != TRY_ASKING)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	try_record(w, answered, why);
	try_conclude(w, 0);
}

/*
 * Whether a walk's answer is current: its epoch is not older than one
 * already followed, or it names the master already followed (a sentinel
 * that missed some epochs but agrees tells nothing wrong), or only older
 * answers came for STALE_ACCEPT_MS.  Follows it when it is.  Runs from
 * walk_step_cb only, one walk at a time, so walks concluding in the same
 * loop turn are judged in order.
 */
static int
walk_accept(struct walk *w)
{
	struct sentinel *s = w->s;
	struct sentinel_peer *n = &s->peers[w->cur];
	char why[WHY_LEN];

	if (w->epoch >= 0 && w->epoch < s->epoch_min) {
		if (s->have_master && addr_same(&w->found, &s->master))
			return 1;	/* not asked first next time, though */
		if (s->stale_since_ms == 0 ||
		    now_ms() - s->stale_since_ms < STALE_ACCEPT_MS) {
			snprintf(why, sizeof why, "sentinel %s names the master "
			    "of config epoch %lld, older than epoch %lld "
			    "already followed", n->text, w->epoch,
			    s->epoch_min);
			try_record(w, 1, why);
			w->stale = 1;
			return 0;
		}
		log_warn("Sentinel %s: config epoch went back from %lld to "
		    "%lld (master monitored anew?): following it", n->text,
		    s->epoch_min, w->epoch);
	}
	if (w->epoch >= 0)
		s->epoch_seen = s->epoch_min = w->epoch;
	s->stale_since_ms = 0;
	s->preferred = w->cur;
	return 1;
}

/*
 * The walk is over: master (else why) goes to its caller.  Everything is
 * released before the callback, which runs last and may resolve again or
 * free the sentinel.
 */
static void
walk_finish(struct walk *w, const struct addr *master, const char *why)
{
	struct sentinel *s = w->s;
	sentinel_resolve_fn *fn = w->fn;
	void *arg = w->arg;
	char whybuf[ANSWER_LEN];
	struct addr a;

	walk_unlink(w);
	walk_drop_conn(w);
	if (master != NULL) {
		char text[ADDR_TEXT_LEN];

		a = *master;
		addr_text(&a, text, sizeof text);
		if (s->logged_why[0] != '\0')
			log_info("Sentinel %s names master %s",
			    s->peers[w->cur].text, text);
		s->logged_why[0] = '\0';
		master_set(s, &a, 1, fn != NULL ? "resolve" : "poll");
	} else {
		snprintf(whybuf, sizeof whybuf, "%s", why);
		/* once per reason, not on every retry of every caller */
		if (strcmp(s->logged_why, whybuf) != 0) {
			log_error("Sentinel: %s", whybuf);
			snprintf(s->logged_why, sizeof s->logged_why, "%s",
			    whybuf);
		}
		if (w->stale && s->stale_since_ms == 0)
			s->stale_since_ms = now_ms();
	}
	event_free(w->step_ev);
	event_free(w->timeout_ev);
	free(w);
	if (fn != NULL)
		fn(arg, master != NULL ? &a : NULL, master != NULL ? NULL :
		    whybuf);
}

static void walk_on_connect(const redisAsyncContext *cac, int status);
static void walk_on_disconnect(const redisAsyncContext *cac, int status);
static void walk_auth_reply(redisAsyncContext *ac, void *reply, void *priv);
static void walk_addr_reply(redisAsyncContext *ac, void *reply, void *priv);
static void walk_epoch_reply(redisAsyncContext *ac, void *reply, void *priv);

/* Start an attempt on the next sentinel in turn.  Returns 0 when one is
 * under way, -1 when it failed at once (reason recorded; the caller goes
 * on with the next: nothing was concluded, so step_ev stays quiet). */
static int try_connect(struct walk *w, const char *host);

/* The current attempt's sentinel name looked up (try_start). */
static int
walk_waiting(void *arg)
{
	struct walk *w = arg;

	return w->state == TRY_RESOLVING;
}

static void
walk_connect_to(void *arg, const char *host)
{
	struct walk *w = arg;

	if (try_connect(w, host) != 0)
		try_conclude(w, 0);	/* recorded; step_ev goes on */
}

static void
walk_unresolved(void *arg, const char *why)
{
	try_fail(arg, 0, "%s", why);
}

static const struct resolve_then walk_then = { walk_waiting,
    walk_connect_to, walk_unresolved };

static int
try_start(struct walk *w)
{
	struct sentinel *s = w->s;
	struct sentinel_peer *n;

	w->cur = (w->first + w->tried) % s->npeers;
	w->tried++;
	n = &s->peers[w->cur];
	w->state = TRY_IDLE;
	w->got_addr = 0;
	w->ok = 0;
	w->epoch = -1;
	if (!n->a.is_name)
		return try_connect(w, n->a.host);
	w->state = TRY_RESOLVING;
	timer_add_ms(w->timeout_ev, s->timeout_ms);
	resolve_connect(s->resolver, &w->lookup, n->a.host, &walk_then, w);
	return 0;
}

/* Connect the current attempt to host (numeric). */
static int
try_connect(struct walk *w, const char *host)
{
	struct sentinel *s = w->s;
	struct sentinel_peer *n = &s->peers[w->cur];
	redisAsyncContext *ac;
	char why[WHY_LEN];

	ac = redisAsyncConnect(host, n->a.port);
	if (ac == NULL || ac->err) {
		snprintf(why, sizeof why, "cannot connect: %s",
		    ac != NULL ? ac->errstr : "out of memory");
		try_record(w, 0, why);
		if (ac != NULL)
			redisAsyncFree(ac);
		return -1;
	}
	if (redisLibeventAttach(ac, s->base) != REDIS_OK ||
	    redisAsyncSetConnectCallback(ac, walk_on_connect) != REDIS_OK ||
	    redisAsyncSetDisconnectCallback(ac, walk_on_disconnect) !=
	    REDIS_OK) {
		try_record(w, 0, "cannot attach to the event loop");
		redisAsyncFree(ac);	/* never connected: no callback runs */
		return -1;
	}
	ac->data = w;
	w->ac = ac;
	w->state = TRY_CONNECTING;
	timer_add_ms(w->timeout_ev, s->timeout_ms);
	return 0;
}

/* A walk's steps, always from the event loop: its start, and the end of
 * each attempt. */
static void
walk_step_cb(evutil_socket_t fd, short what, void *arg)
{
	struct walk *w = arg;
	struct sentinel *s = w->s;
	char why[ANSWER_LEN];

	(void)fd;
	(void)what;
	if (w->state == TRY_DONE) {
		walk_drop_conn(w);
		if (w->ok && walk_accept(w)) {
			walk_finish(w, &w->found, NULL);
			return;
		}
	}
	while (w->tried < s->npeers)
		if (try_start(w) == 0)
			return;
	if (w->answer_why[0] != '\0')
		snprintf(why, sizeof why, "%s", w->answer_why);
	else
		snprintf(why, sizeof why, "no sentinel answered (last: %s)",
		    w->reach_why);
	walk_finish(w, NULL, why);
}

/* The attempt's deadline: connect and answers within timeout_ms (a
 * SIGSTOPped sentinel accepts the connection and never answers). */
static void
walk_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct walk *w = arg;

	(void)fd;
	(void)what;
	try_fail(w, 0, w->state == TRY_RESOLVING ? "its name did not resolve "
	    "within %ld ms" : w->state == TRY_CONNECTING ? "connect timed out "
	    "after %ld ms" : "no answer within %ld ms", w->s->timeout_ms);
}

static void
walk_on_connect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct walk *w = ac->data;
	struct sentinel *s = w->s;
	int rc = REDIS_OK;

	if (w->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees ac when we return; no onDisconnect follows */
		w->ac = NULL;
		try_fail(w, 0, "cannot connect: %s",
		    ac->errstr[0] ? ac->errstr : ac->c.errstr);
		return;
	}
	w->state = TRY_ASKING;
	if (s->password[0] != '\0')
		rc = s->user[0] != '\0' ?
		    redisAsyncCommand(ac, walk_auth_reply, w, "AUTH %s %s",
		    s->user, s->password) :
		    redisAsyncCommand(ac, walk_auth_reply, w, "AUTH %s",
		    s->password);
	/* One write: the sentinel answers both questions in one go, so the
	 * epoch is the one the address belongs to. */
	if (rc == REDIS_OK)
		rc = redisAsyncCommand(ac, walk_addr_reply, w,
		    "SENTINEL get-master-addr-by-name %s", s->name);
	if (rc == REDIS_OK)
		rc = redisAsyncCommand(ac, walk_epoch_reply, w,
		    "SENTINEL MASTER %s", s->name);
	if (rc != REDIS_OK)
		try_fail(w, 0, "cannot send a command");
}

static void
walk_on_disconnect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct walk *w = ac->data;

	if (w->ac != ac)
		return;		/* we freed it ourselves */
	w->ac = NULL;		/* hiredis frees it when we return */
	try_fail(w, 0, "connection lost: %s", status == REDIS_OK ? "closed" :
	    ac->errstr[0] ? ac->errstr : "error");
}

/* Replies for a context that is no longer current (being freed: reply
 * NULL), or for an attempt already concluded, are dropped. */
static int
walk_reply_current(struct walk *w, redisAsyncContext *ac, void *reply)
{
	return w->ac == ac && reply != NULL && w->state == TRY_ASKING;
}

static void
walk_auth_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct walk *w = priv;
	redisReply *r = reply;

	if (!walk_reply_current(w, ac, reply))
		return;
	if (r->type == REDIS_REPLY_ERROR)
		try_fail(w, 1, "AUTH refused: %s", r->str);
}

static void
walk_addr_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct walk *w = priv;
	redisReply *r = reply;
	char err[200];

	if (!walk_reply_current(w, ac, reply))
		return;
	switch (r->type) {
	case REDIS_REPLY_NIL:
		try_fail(w, 1, "no master named '%s'", w->s->name);
		return;
	case REDIS_REPLY_ERROR:
		try_fail(w, 1, "SENTINEL get-master-addr-by-name refused: %s",
		    r->str);
		return;
	case REDIS_REPLY_ARRAY:
		if (r->elements == 2 &&
		    r->element[0]->type == REDIS_REPLY_STRING &&
		    r->element[1]->type == REDIS_REPLY_STRING)
			break;
		/* FALLTHROUGH */
	default:
		try_fail(w, 1, "unexpected reply to get-master-addr-by-name "
		    "(type %d)", r->type);
		return;
	}
	if (addr_from_parts(r->element[0]->str, r->element[0]->len,
	    r->element[1]->str, r->element[1]->len, &w->found, err,
	    sizeof err) != 0) {
		try_fail(w, 1, "unusable master address: %s", err);
		return;
	}
	w->got_addr = 1;
}

/* SENTINEL MASTER: a flat field/value list; only config-epoch is used.
 * Refused (an ACL without it) or odd: the epoch stays unknown, and the
 * address is taken without the stale check. */
static void
walk_epoch_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct walk *w = priv;
	redisReply *r = reply;
	const redisReply *v;

	if (!walk_reply_current(w, ac, reply) || !w->got_addr)
		return;
	if (r->type == REDIS_REPLY_ARRAY &&
	    (v = resp_field(r, "config-epoch")) != NULL) {
		char *end;
		long long e;

		if (v->type == REDIS_REPLY_INTEGER) {
			w->epoch = v->integer;
		} else if (v->type == REDIS_REPLY_STRING) {
			e = strtoll(v->str, &end, 10);
			if (end != v->str && *end == '\0' && e >= 0)
				w->epoch = e;
		}
	}
	if (w->epoch < 0)
		log_debug("Sentinel %s: no config epoch in SENTINEL MASTER "
		    "(reply type %d)", w->s->peers[w->cur].text, r->type);
	try_conclude(w, 1);
}

/* --- subscriptions ---------------------------------------------------- */

static void sub_on_connect(const redisAsyncContext *cac, int status);
static void sub_on_disconnect(const redisAsyncContext *cac, int status);

/*
 * The subscription is gone (hiredis freed or is freeing ac): forget it
 * and retry after the backoff.  Only a loss after it was up is worth
 * more than a debug line; while a sentinel stays down, walks say so.
 */
static void
sub_lost(struct sentinel_peer *n, const char *why)
{
	int was_up = n->state == SUB_UP;
	long wait;

	n->ac = NULL;
	n->state = SUB_DOWN;
	resolve_cancel(n->lookup);
	n->lookup = NULL;
	event_del(n->timeout_ev);
	wait = redial_failed(&n->redial, NULL);
	if (was_up) {
		log_warn("Sentinel %s: %s subscription lost (%s); retrying",
		    n->text, CHANNEL, why);
		n->loss_logged = 1;
	} else {
		log_debug("Sentinel %s: cannot subscribe (%s); retrying in "
		    "%ld ms", n->text, why, wait);
	}
}

/* Deferred teardown: runs from libevent, never inside hiredis. */
static void
sub_kill_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sentinel_peer *n = arg;
	redisAsyncContext *ac = n->ac;

	(void)fd;
	(void)what;
	if (ac == NULL || ac != n->kill_ac)
		return;		/* already gone (onDisconnect came first) */
	/* Down first: the NULL callbacks and onDisconnect of the free
	 * below see a context that is no longer current. */
	sub_lost(n, n->kill_why);
	redisAsyncFree(ac);
}

static void
sub_kill(struct sentinel_peer *n, const char *why)
{
	if (event_pending(n->kill_ev, EV_TIMEOUT, NULL))
		return;		/* already going: the first reason stays */
	n->kill_why = why;
	n->kill_ac = n->ac;
	event_active(n->kill_ev, EV_TIMEOUT, 0);
}

static void
sub_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	sub_start(arg);
}

static void
sub_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sentinel_peer *n = arg;

	(void)fd;
	(void)what;
	if (n->state == SUB_CONNECTING && n->ac == NULL)
		sub_lost(n, "its name did not resolve in time");
	else if (n->state == SUB_CONNECTING)
		sub_kill(n, "connect timed out");
	else if (n->state == SUB_SUBSCRIBING)
		sub_kill(n, "no answer to SUBSCRIBE");
}

static void sub_connect(struct sentinel_peer *n, const char *host);

/* A sentinel's name looked up for its subscription (sub_start): still
 * connecting with no context yet, or the answer came too late. */
static int
sub_waiting(void *arg)
{
	struct sentinel_peer *n = arg;

	return n->state == SUB_CONNECTING && n->ac == NULL;
}

static void
sub_connect_to(void *arg, const char *host)
{
	sub_connect(arg, host);
}

static void
sub_unresolved(void *arg, const char *why)
{
	sub_lost(arg, why);
}

static const struct resolve_then sub_then = { sub_waiting, sub_connect_to,
    sub_unresolved };

static void
sub_start(struct sentinel_peer *n)
{
	n->state = SUB_CONNECTING;
	if (!n->a.is_name) {
		sub_connect(n, n->a.host);
		return;
	}
	timer_add_ms(n->timeout_ev, n->s->timeout_ms);
	resolve_connect(n->s->resolver, &n->lookup, n->a.host, &sub_then, n);
}

/* Open the subscription's context to host (numeric). */
static void
sub_connect(struct sentinel_peer *n, const char *host)
{
	struct sentinel *s = n->s;
	redisAsyncContext *ac;

	ac = redisAsyncConnect(host, n->a.port);
	if (ac == NULL || ac->err) {
		n->ac = NULL;
		sub_lost(n, ac != NULL ? ac->errstr : "out of memory");
		if (ac != NULL)
			redisAsyncFree(ac);
		return;
	}
	if (redisLibeventAttach(ac, s->base) != REDIS_OK) {
		sub_lost(n, "cannot attach to the event loop");
		redisAsyncFree(ac);
		return;
	}
	ac->data = n;
	n->ac = ac;
	timer_add_ms(n->timeout_ev, s->timeout_ms);
	if (redisAsyncSetConnectCallback(ac, sub_on_connect) != REDIS_OK ||
	    redisAsyncSetDisconnectCallback(ac, sub_on_disconnect) !=
	    REDIS_OK) {
		sub_kill(n, "cannot set callbacks");
		return;
	}
	/* The only check a subscribed connection can have (no PING). */
	if (redisEnableKeepAlive(&ac->c) != REDIS_OK)
		log_debug("Sentinel %s: keepalive not enabled", n->text);
}

static void
sub_up(struct sentinel_peer *n)
{
	event_del(n->timeout_ev);
	n->state = SUB_UP;
	redial_ok(&n->redial);
	if (n->loss_logged)
		log_info("Sentinel %s: subscribed to %s again", n->text,
		    CHANNEL);
	else
		log_debug("Sentinel %s: subscribed to %s", n->text, CHANNEL);
	n->loss_logged = 0;
}

/* "<name> <old-ip> <old-port> <new-ip> <new-port>": the last four words
 * are split off from the end, so the name is everything before them. */
static void
sub_message(struct sentinel_peer *n, const char *msg, size_t len)
{
	struct sentinel *s = n->s;
	const char *word[4];
	size_t wlen[4], end = len;
	struct addr a;
	char err[200];

	for (int i = 3; i >= 0; i--) {
		size_t b = end;

		while (b > 0 && msg[b - 1] != ' ')
			b--;
		if (b == 0 || b == end)
			goto bad;
		word[i] = msg + b;
		wlen[i] = end - b;
		end = b - 1;		/* the space before the word */
	}
	if (end != strlen(s->name) || memcmp(msg, s->name, end) != 0)
		return;			/* another master's failover */
	if (addr_from_parts(word[2], wlen[2], word[3], wlen[3], &a, err,
	    sizeof err) != 0) {
		log_warn("Sentinel %s: %s with an unusable address: %s",
		    n->text, CHANNEL, err);
		return;
	}
	if (s->have_master && addr_same(&s->master, &a))
		return;			/* known (another sentinel, or a walk) */
	/* The new configuration has a higher epoch than any answer seen
	 * so far: from now on, answers of those epochs are stale. */
	if (s->epoch_seen >= 0 && s->epoch_min <= s->epoch_seen)
		s->epoch_min = s->epoch_seen + 1;
	master_set(s, &a, 0, n->text);
	return;
bad:
	log_warn("Sentinel %s: cannot parse %s message '%.*s'", n->text,
	    CHANNEL, (int)(len > 200 ? 200 : len), msg);
}

static void
sub_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct sentinel_peer *n = priv;
	redisReply *r = reply;

	if (n->ac != ac || r == NULL)
		return;		/* a context being torn down */
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING)
		return;
	if (resp_str_is(r->element[0], "subscribe") && n->state == SUB_SUBSCRIBING)
		sub_up(n);
	else if (resp_str_is(r->element[0], "message") &&
	    r->element[2]->type == REDIS_REPLY_STRING)
		sub_message(n, r->element[2]->str, (size_t)r->element[2]->len);
}

static void
sub_auth_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct sentinel_peer *n = priv;
	redisReply *r = reply;

	if (n->ac != ac || r == NULL)
		return;
	/* The SUBSCRIBE behind it fails too, and hiredis then drops the
	 * connection itself; whichever comes first ends it. */
	if (r->type == REDIS_REPLY_ERROR)
		sub_kill(n, "AUTH refused");
}

static void
sub_on_connect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct sentinel_peer *n = ac->data;
	struct sentinel *s = n->s;
	int rc = REDIS_OK;

	if (n->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees ac when we return; no onDisconnect follows */
		sub_lost(n, ac->errstr[0] ? ac->errstr : ac->c.errstr);
		return;
	}
	n->state = SUB_SUBSCRIBING;
	if (s->password[0] != '\0')
		rc = s->user[0] != '\0' ?
		    redisAsyncCommand(ac, sub_auth_reply, n, "AUTH %s %s",
		    s->user, s->password) :
		    redisAsyncCommand(ac, sub_auth_reply, n, "AUTH %s",
		    s->password);
	if (rc == REDIS_OK)
		rc = redisAsyncCommand(ac, sub_reply, n, "SUBSCRIBE %s",
		    CHANNEL);
	if (rc != REDIS_OK)
		sub_kill(n, "cannot send SUBSCRIBE");
}

static void
sub_on_disconnect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct sentinel_peer *n = ac->data;

	if (n->ac != ac)
		return;		/* we freed it ourselves */
	/* hiredis frees ac when we return */
	sub_lost(n, status == REDIS_OK ? "closed by the sentinel" :
	    ac->errstr[0] ? ac->errstr : "error");
}

/* --- the sentinel ------------------------------------------------------- */

static void
poll_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sentinel *s = arg;

	(void)fd;
	(void)what;
	if (s->poll == NULL)	/* the last one may still be walking */
		s->poll = walk_new(s, NULL, NULL);
}

/*
 * "ip:port,ip:port,...": each item by addr_parse_endpoint, unix paths
 * refused, no empty item -- the rule config.c checks redis_sentinels by.
 */
static int
parse_sentinels(struct sentinel *s, const char *list, char *err,
    size_t errlen)
{
	const char *p = list;
	size_t count = 1;

	if (list[0] == '\0') {
		snprintf(err, errlen, "no sentinel addresses");
		return -1;
	}
	for (const char *q = list; *q != '\0'; q++)
		if (*q == ',')
			count++;
	s->peers = xcalloc(count, sizeof *s->peers);
	for (size_t i = 0; i < count; i++) {
		size_t len = strcspn(p, ",");
		char *item = xstrndup(p, len), msg[200];
		struct sentinel_peer *n = &s->peers[i];
		int rc;

		rc = len == 0 ? -1 : addr_parse_endpoint(item, &n->a, msg,
		    sizeof msg);
		if (rc != 0 || n->a.is_unix) {
			snprintf(err, errlen, "sentinel address %zu in '%s': %s",
			    i + 1, list, len == 0 ? "empty" : rc != 0 ? msg :
			    "unix sockets are not supported here");
			free(item);
			return -1;
		}
		free(item);
		n->s = s;
		addr_text(&n->a, n->text, sizeof n->text);
		n->state = SUB_DOWN;
		s->npeers++;
		p += len + (p[len] == ',');
	}
	return 0;
}

struct sentinel *
sentinel_new(struct event_base *base, const struct sentinel_cfg *cfg,
    const struct sentinel_hooks *hooks, char *err, size_t errlen)
{
	struct sentinel *s = xcalloc(1, sizeof *s);
	struct timeval tick = { SENTINEL_POLL_MS / 1000,
	    (SENTINEL_POLL_MS % 1000) * 1000 };

	s->base = base;
	s->resolver = cfg->resolver;
	s->name = xstrndup(cfg->master_name ? cfg->master_name : "",
	    cfg->master_name ? strlen(cfg->master_name) : 0);
	s->password = xstrndup(cfg->password ? cfg->password : "",
	    cfg->password ? strlen(cfg->password) : 0);
	s->user = xstrndup(cfg->user ? cfg->user : "",
	    cfg->user ? strlen(cfg->user) : 0);
	s->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 500;
	s->hooks = *hooks;
	s->epoch_seen = s->epoch_min = -1;
	if (s->name[0] == '\0') {
		snprintf(err, errlen, "no master name");
		goto fail;
	}
	if (parse_sentinels(s, cfg->sentinels ? cfg->sentinels : "", err,
	    errlen) != 0)
		goto fail;
	s->notify_ev = timer_new(base, notify_cb, s);
	s->poll_ev = event_new(base, -1, EV_PERSIST, poll_cb, s);
	if (s->poll_ev == NULL)
		fatalx("Sentinel: cannot create the poll timer");
	if (event_add(s->poll_ev, &tick) != 0)
		fatalx("Sentinel: cannot arm the poll timer");
	for (size_t i = 0; i < s->npeers; i++) {
		struct sentinel_peer *n = &s->peers[i];

		redial_init(&n->redial, base, sub_retry_cb, n, REDIAL_MIN_MS,
		    REDIAL_MAX_MS);
		n->timeout_ev = timer_new(base, sub_timeout_cb, n);
		n->kill_ev = timer_new(base, sub_kill_cb, n);
		sub_start(n);
	}
	return s;
fail:
	sentinel_free(s);
	return NULL;
}

/*
 * Connections first, while every struct their callbacks reach is alive
 * (hiredis runs the pending callbacks with NULL replies, and they find
 * their context no longer current); then the answers, last, because a
 * callback may do anything.  A resolve started by one of those callbacks
 * is answered "shutting down" by the same loop.
 */
void
sentinel_free(struct sentinel *s)
{
	struct walk *w;

	if (s == NULL)
		return;
	event_free_safe(s->poll_ev);
	event_free_safe(s->notify_ev);
	s->poll_ev = s->notify_ev = NULL;
	for (size_t i = 0; i < s->npeers; i++) {
		struct sentinel_peer *n = &s->peers[i];
		redisAsyncContext *ac = n->ac;

		n->ac = NULL;
		n->state = SUB_DOWN;
		resolve_cancel(n->lookup);
		n->lookup = NULL;
		if (ac != NULL)
			redisAsyncFree(ac);
		redial_free(&n->redial);
		event_free_safe(n->timeout_ev);
		event_free_safe(n->kill_ev);
	}
	for (w = s->walks; w != NULL; w = w->next)
		walk_drop_conn(w);
	while ((w = s->walks) != NULL) {
		sentinel_resolve_fn *fn = w->fn;
		void *arg = w->arg;

		walk_unlink(w);
		walk_drop_conn(w);	/* a walk a callback just started */
		event_free(w->step_ev);
		event_free(w->timeout_ev);
		free(w);
		if (fn != NULL)
			fn(arg, NULL, "shutting down");
	}
	free(s->peers);
	free(s->name);
	free(s->password);
	free(s->user);
	free(s);
}

void
sentinel_resolve(struct sentinel *s, sentinel_resolve_fn *fn, void *arg)
{
	walk_new(s, fn, arg);
}

const struct addr *
sentinel_master(const struct sentinel *s)
{
	return s->have_master ? &s->master : NULL;
}
