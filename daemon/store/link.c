/*
 * link.c - one Redis connection that knows no role and no topology
 * (link.h): connect where the owner says, AUTH, the owner's handshake,
 * timeouts, deferred teardown, reconnect with backoff.
 */
#include "link.h"
#include "events.h"
#include "log.h"
#include "resp.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* "up" said once, with the address a name gave. */
static void
log_up(const struct link *l)
{
	if (l->hostname[0] != '\0')
		log_info("Redis %s connection up (%s at %s)", l->name,
		    l->addrstr, l->ip);
	else
		log_info("Redis %s connection up (%s)", l->name, l->addrstr);
}

static void
conn_became_up(struct link *l)
{
	event_del(l->timeout_ev);
	l->state = LINK_UP;
	if (l->confirm) {
		log_debug("Redis %s connection open (%s)", l->name, l->addrstr);
	} else {
		redial_ok(&l->redial);
		l->last_refusal[0] = '\0';
		log_up(l);
	}
	if (l->hostname[0] != '\0' && l->env->resolve_ms > 0)
		timer_add_ms(l->recheck_ev, l->env->resolve_ms);
	l->ops->up(l->owner, l);
}

void
link_confirm(struct link *l)
{
	if (redial_ok(&l->redial))
		log_up(l);
}

/*
 * The connection is gone (ac already freed or being freed by hiredis):
 * forget it, schedule the next attempt, tell the owner.
 */
static void
conn_lost(struct link *l, const char *why)
{
	/* (a confirm link counts as up only once confirmed) */
	int was_up = l->state == LINK_UP && !(l->confirm && l->redial.failing);
	const char *idle = l->ops->idle != NULL ? l->ops->idle(l->owner, l) :
	    NULL;
	int loud;
	long wait;

	l->ac = NULL;
	l->state = LINK_DOWN;
	event_del(l->timeout_ev);
	event_del(l->recheck_ev);
	resolve_cancel(l->rechecking);
	l->rechecking = NULL;
	if (idle != NULL) {
		redial_idle(&l->redial);
		log_debug("Redis %s connection to %s closed (%s): %s", l->name,
		    l->addrstr, why, idle);
	} else {
		wait = redial_failed(&l->redial, &loud);
		if (was_up || loud)
			log_warn("Redis %s connection %s (%s): %s; retrying in "
			    "%ld ms", l->name, was_up ? "lost" : "failed",
			    l->addrstr[0] ? l->addrstr : l->env->label, why,
			    wait);
		else
			log_debug("Redis %s connection failed: %s; retrying in "
			    "%ld ms", l->name, why, wait);
	}
	l->ops->down(l->owner, l, was_up);
}

void
link_failed(struct link *l, const char *why)
{
	l->locating = 0;
	conn_lost(l, why);
}

/*
 * Redis refused the handshake (wrong password, unknown user, ...).  The
 * replies queued behind the refused AUTH fail too (NOAUTH): only the first
 * counts, and the same refusal is logged once, not on every retry.
 */
static void
handshake_refused(struct link *l, const char *why)
{
	if (l->refused)
		return;
	l->refused = 1;
	if (strncmp(l->last_refusal, why, sizeof l->last_refusal - 1) != 0) {
		log_error("Redis %s handshake refused: %s (retrying with backoff)",
		    l->name, why);
		snprintf(l->last_refusal, sizeof l->last_refusal, "%s", why);
	}
	link_kill(l, "handshake refused");
}

void
link_refuse(struct link *l, const char *why)
{
	handshake_refused(l, why);
}

void
link_expect(struct link *l)
{
	l->hello_left++;
}

void
link_hello_done(struct link *l)
{
	if (--l->hello_left == 0)
		conn_became_up(l);
}

/* A handshake reply that only has to be no error (AUTH, SCRIPT LOAD). */
static void
hello_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct link *l = privdata;
	redisReply *r = reply;

	if (l->ac != ac || r == NULL)
		return;		/* an old context tearing down */
	if (r->type == REDIS_REPLY_ERROR) {
		link_refuse(l, r->str);
		return;
	}
	link_hello_done(l);
}

int
link_hello_sendf(struct link *l, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = redisvAsyncCommand(l->ac, hello_reply, l, fmt, ap);
	va_end(ap);
	link_expect(l);
	return rc == REDIS_OK ? 0 : -1;
}

static void
send_auth(struct link *l)
{
	const struct link_env *env = l->env;

	if (env->password[0] == '\0')
		return;
	if (env->user[0] != '\0')
		link_hello_sendf(l, "AUTH %s %s", env->user, env->password);
	else
		link_hello_sendf(l, "AUTH %s", env->password);
}

static void
on_connect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct link *l = ac->data;

	if (l->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees ac when we return; no onDisconnect follows. */
		conn_lost(l, ac->errstr[0] ? ac->errstr : ac->c.errstr);
		return;
	}
	l->state = LINK_HANDSHAKE;
	l->hello_left = 0;
	l->refused = 0;
	send_auth(l);
	if (l->ops->hello != NULL)
		l->ops->hello(l->owner, l);
	if (l->hello_left == 0)
		conn_became_up(l);	/* nothing to wait for */
}

static void
on_disconnect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *)cac;
	struct link *l = ac->data;

	if (l->ac != ac)
		return;		/* we started this teardown ourselves */
	/* hiredis drops a subscribed connection on any error reply, so a
	 * refused handshake can end here before our own teardown runs */
	conn_lost(l, l->refused ? "handshake refused" :
	    status == REDIS_OK ? "closed" :
	    (ac->errstr[0] ? ac->errstr : "error"));
}

/* Open the context: host is numeric (or a unix socket path). */
static void
connect_numeric(struct link *l, const char *host, int port, int is_unix)
{
	redisAsyncContext *ac;

	l->locating = 0;
	if (is_unix)
		ac = redisAsyncConnectUnix(host);
	else
		ac = redisAsyncConnect(host, port);
	if (ac == NULL || ac->err) {
		const char *why = ac ? ac->errstr : "out of memory";
		l->ac = NULL;
		l->state = LINK_CONNECTING;
		conn_lost(l, why);
		if (ac)
			redisAsyncFree(ac);
		return;
	}
	ac->data = l;
	l->ac = ac;
	l->state = LINK_CONNECTING;
	l->dying = 0;
	if (events_attach(ac, l->env->base) != 0) {
		l->ac = NULL;
		conn_lost(l, "cannot attach to event loop");
		redisAsyncFree(ac);
		return;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	if (!is_unix && redisEnableKeepAlive(&ac->c) != REDIS_OK)
		log_debug("keepalive not enabled on Redis %s connection",
		    l->name);
	timer_add_ms(l->timeout_ev, l->env->timeout_ms);
}

/*
 * The name gave no address.  The failure is logged by the reconnect
 * policy (loud once per streak); a different reason within a streak is
 * worth one line more.
 */
static void
name_failed(struct link *l, const char *why)
{
	char msg[ADDR_HOST_LEN + 160];

	if (l->redial.failing && strcmp(l->last_dns_err, why) != 0)
		log_warn("Redis %s connection: cannot resolve '%s': %s",
		    l->name, l->hostname, why);
	snprintf(l->last_dns_err, sizeof l->last_dns_err, "%s", why);
	snprintf(msg, sizeof msg, "cannot resolve '%s': %s", l->hostname, why);
	link_failed(l, msg);
}

/* The lookup before a connect answered. */
static void
resolved(void *arg, const char *host, const char *why)
{
	struct link *l = arg;

	l->resolving = NULL;
	if (host == NULL) {
		name_failed(l, why);
		return;
	}
	if (l->ip[0] != '\0' && strcmp(l->ip, host) != 0)
		log_info("Redis %s connection: %s now resolves to %s (was %s)",
		    l->name, l->hostname, host, l->ip);
	else if (l->last_dns_err[0] != '\0')
		log_info("Redis %s connection: %s resolves to %s again",
		    l->name, l->hostname, host);
	l->last_dns_err[0] = '\0';
	snprintf(l->ip, sizeof l->ip, "%s", host);
	connect_numeric(l, host, l->port, 0);
}

void
link_connect(struct link *l, const char *host, int port, int is_unix)
{
	l->locating = 0;
	if (is_unix)
		snprintf(l->addrstr, sizeof l->addrstr, "unix:%s", host);
	else
		snprintf(l->addrstr, sizeof l->addrstr, strchr(host, ':') ?
		    "[%s]:%d" : "%s:%d", host, port);
	if (is_unix || !resolve_is_name(host) || l->env->resolver == NULL) {
		l->hostname[0] = '\0';
		connect_numeric(l, host, port, is_unix);
		return;
	}
	/* a name: look it up (again: it may have moved) and connect to
	 * the answer; the link is connecting meanwhile, as while its owner
	 * locates */
	if (strcmp(l->hostname, host) != 0) {
		snprintf(l->hostname, sizeof l->hostname, "%s", host);
		l->ip[0] = '\0';
	}
	l->port = port;
	l->state = LINK_CONNECTING;
	l->locating = 1;
	resolve_cancel(l->resolving);
	l->resolving = resolve_start(l->env->resolver, host, resolved, l);
}

/* An up link's name, looked up again: a new answer means the Redis it
 * names is elsewhere now, so the link reconnects there. */
static void
rechecked(void *arg, const char *host, const char *why)
{
	struct link *l = arg;

	l->rechecking = NULL;
	if (!link_usable(l) || l->hostname[0] == '\0')
		return;
	if (host == NULL) {
		/* a DNS hiccup does not drop a working connection */
		if (strcmp(l->last_dns_err, why) != 0)
			log_warn("Redis %s connection: cannot resolve '%s' (%s); "
			    "staying on %s", l->name, l->hostname, why, l->ip);
		snprintf(l->last_dns_err, sizeof l->last_dns_err, "%s", why);
	} else if (strcmp(host, l->ip) != 0) {
		log_warn("Redis %s connection: %s now resolves to %s (was %s); "
		    "reconnecting", l->name, l->hostname, host, l->ip);
		snprintf(l->ip, sizeof l->ip, "%s", host);
		l->last_dns_err[0] = '\0';
		link_kill(l, "its host name moved");
		return;
	} else {
		l->last_dns_err[0] = '\0';
	}
	timer_add_ms(l->recheck_ev, l->env->resolve_ms);
}

static void
recheck_cb(evutil_socket_t fd, short what, void *arg)
{
	struct link *l = arg;

	(void)fd;
	(void)what;
	if (!link_usable(l) || l->hostname[0] == '\0' || l->rechecking != NULL)
		return;
	l->rechecking = resolve_start(l->env->resolver, l->hostname, rechecked,
	    l);
}

void
link_locating(struct link *l)
{
	l->locating = 1;
	l->state = LINK_CONNECTING;
	l->addrstr[0] = '\0';
}

void
link_start(struct link *l)
{
	if (!l->locating)
		l->ops->locate(l->owner, l);
}

/*
 * A link waiting out a backoff: try now, and quickly after.  One that was
 * let go (idle) is started again too: a redirection or a new map names
 * its master once more.
 */
void
link_retry_now(struct link *l)
{
	redial_reset(&l->redial);
	if (l->state != LINK_DOWN || l->redial.retry_ev == NULL ||
	    l->env->closing || event_pending(l->kill_ev, EV_TIMEOUT, NULL))
		return;
	if (redial_pending(&l->redial) || l->ops->idle != NULL) {
		redial_cancel(&l->redial);
		link_start(l);
	}
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	link_start(arg);
}

/* Deferred teardown: runs from libevent, never inside hiredis. */
static void
kill_cb(evutil_socket_t fd, short what, void *arg)
{
	struct link *l = arg;
	redisAsyncContext *ac = l->ac;

	(void)fd;
	(void)what;
	if (ac == NULL)
		return;
	/* Mark it gone first: the NULL callbacks redisAsyncFree runs, and
	 * its onDisconnect, must see a link that is already down. */
	conn_lost(l, l->kill_why);
	redisAsyncFree(ac);
}

void
link_kill(struct link *l, const char *why)
{
	/* Already going (the event is active): keep the first reason. */
	if (event_pending(l->kill_ev, EV_TIMEOUT, NULL))
		return;
	l->kill_why = why;
	event_active(l->kill_ev, EV_TIMEOUT, 0);
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct link *l = arg;

	(void)fd;
	(void)what;
	if (l->state == LINK_CONNECTING || l->state == LINK_HANDSHAKE)
		link_kill(l, l->state == LINK_CONNECTING ? "connect timed out" :
		    "no answer to handshake");
}

int
link_usable(const struct link *l)
{
	return l->state == LINK_UP && !l->dying;
}

int
link_coming(const struct link *l)
{
	return (l->state == LINK_CONNECTING || l->state == LINK_HANDSHAKE) &&
	    !l->dying && !l->refused && !l->env->closing &&
	    !event_pending(l->kill_ev, EV_TIMEOUT, NULL);
}

int
link_current(const struct link *l, const redisAsyncContext *ac)
{
	return l->ac == ac;
}

void
link_dying(struct link *l)
{
	l->dying = 1;
}

/*
 * A command's RESP form is written here, on the stack, when it fits
 * (resp_command); a larger command (a batch of more than ~80 pairs)
 * goes through redisAsyncCommandArgv as before.
 */
#define RESP_STACK 16384

/*
 * Give hiredis one command.  While holding, the command is only buffered:
 * hiredis need not add the write event it adds for every command, as
 * link_write_now writes the buffer at the end (node.c's flush says why).
 */
int
link_send(struct link *l, redisCallbackFn *fn, void *priv, int argc,
    const char **argv, const size_t *argvlen)
{
	redisAsyncContext *ac = l->ac;
	void (*add)(void *) = ac->ev.addWrite;
	char buf[RESP_STACK];
	size_t len = resp_command(buf, sizeof buf, argc, argv, argvlen);
	int rc;

	if (l->holding)
		ac->ev.addWrite = NULL;
	if (len > 0)
		rc = redisAsyncFormattedCommand(ac, fn, priv, buf, len);
	else
		rc = redisAsyncCommandArgv(ac, fn, priv, argc, argv, argvlen);
	ac->ev.addWrite = add;
	return rc == REDIS_OK ? 0 : -1;
}

int
link_sendf(struct link *l, redisCallbackFn *fn, void *priv, const char *fmt,
    ...)
{
	redisAsyncContext *ac = l->ac;
	void (*add)(void *);
	va_list ap;
	int rc;

	if (ac == NULL)
		return -1;
	add = ac->ev.addWrite;
	if (l->holding)
		ac->ev.addWrite = NULL;
	va_start(ap, fmt);
	rc = redisvAsyncCommand(ac, fn, priv, fmt, ap);
	va_end(ap);
	ac->ev.addWrite = add;
	return rc == REDIS_OK ? 0 : -1;
}

void
link_hold_writes(struct link *l, int on)
{
	l->holding = on;
}

/*
 * Write what was buffered while holding.  From our own event, never
 * inside a hiredis callback, so a write error may tear the context down
 * here (its callbacks fail their commands, as when hiredis's own write
 * event meets it); l->ac is not touched after that.  (A link no longer
 * usable is tearing down: what was buffered fails with it, unwritten.)
 */
void
link_write_now(struct link *l)
{
	if (link_usable(l) && l->ac != NULL)
		redisAsyncHandleWrite(l->ac);
}

void
link_init(struct link *l, const struct link_env *env, const char *name,
    const struct link_ops *ops, void *owner, int confirm)
{
	memset(l, 0, sizeof *l);
	l->env = env;
	l->ops = ops;
	l->owner = owner;
	l->name = name;
	l->confirm = confirm;
	l->state = LINK_DOWN;
	redial_init(&l->redial, env->base, retry_cb, l, REDIAL_MIN_MS,
	    REDIAL_MAX_MS);
	l->timeout_ev = timer_new(env->base, timeout_cb, l);
	l->kill_ev = timer_new(env->base, kill_cb, l);
	l->recheck_ev = timer_new(env->base, recheck_cb, l);
}

void
link_close(struct link *l)
{
	redisAsyncContext *ac = l->ac;

	l->ac = NULL;
	l->state = LINK_DOWN;
	resolve_cancel(l->resolving);
	resolve_cancel(l->rechecking);
	l->resolving = l->rechecking = NULL;
	if (ac != NULL)
		redisAsyncFree(ac);
	redial_free(&l->redial);
	if (l->timeout_ev)
		event_free(l->timeout_ev);
	if (l->kill_ev)
		event_free(l->kill_ev);
	if (l->recheck_ev)
		event_free(l->recheck_ev);
	l->timeout_ev = l->kill_ev = l->recheck_ev = NULL;
}
