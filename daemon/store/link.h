/*
 * link.h - one Redis connection that knows no role and no topology.
 *
 * A link connects where its owner says (locate), sends AUTH, lets its
 * owner send the rest of its handshake (hello), and is up once every
 * reply the handshake awaits has come; it bounds the connect and the
 * handshake with a timer, tears down only from its own event (never
 * inside a hiredis callback), and reconnects by the one policy
 * (redial.h), logging the first failure loudly and the rest quietly.
 * What up and down mean is its owner's (link_ops): the command link of a
 * master sends what waited for it, the subscriber tells the lock table to
 * retry its waiters, the cluster's map link reads CLUSTER SLOTS.
 *
 * Facts this is built around (docs/HIREDIS.md, hiredis 0.14.1):
 *  - every pending callback runs once with reply == NULL on teardown;
 *  - hiredis frees the context right after onDisconnect, and right after
 *    onConnect reports an error; onDisconnect never fires for a context
 *    that never connected; so our pointer is cleared in both, and every
 *    teardown we start ourselves runs from our own libevent callback;
 *  - there are no async timeouts: libevent timers bound the connect and
 *    the handshake (the owner bounds what is in flight after that);
 *  - "connected" is not "alive": a link is up only after the replies to
 *    its handshake arrived.
 * An owner's reply callbacks check link_current(l, ac) first: a reply for
 * a context torn down since belongs to no one.
 */
#ifndef LOCKBROKER_LINK_H
#define LOCKBROKER_LINK_H

#include <stddef.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "addr.h"
#include "redial.h"
#include "resolve.h"

/* What the links of one store share (the store owns it). */
struct link_env {
	struct event_base *base;
	const char *password;		/* "": no AUTH */
	const char *user;		/* "": the default user */
	const char *label;		/* the configured address (Sentinel
					 * mode: the master's name), logged
					 * while no address is known */
	long timeout_ms;		/* connect + handshake deadline */
	struct resolver *resolver;	/* host names, on every connect */
	long resolve_ms;		/* an up link's name is looked up
					 * again this often (0: never); a new
					 * answer moves the link */
	int closing;			/* the store is being freed: no
					 * early retries */
};

enum link_state { LINK_DOWN, LINK_CONNECTING, LINK_HANDSHAKE, LINK_UP };

struct link;

/* Given by the link's owner; owner is the pointer given to link_init. */
struct link_ops {
	/* Where to connect now: link_connect() at once or later (Sentinel
	 * mode asks first), or link_failed() when there is nowhere. */
	void (*locate)(void *owner, struct link *l);
	/* Connected, AUTH sent: send the rest of the handshake (NULL: none).
	 * Each reply it waits for is counted by link_expect (or sent by
	 * link_hello_sendf) and answered by link_hello_done or link_refuse. */
	void (*hello)(void *owner, struct link *l);
	/* The handshake is answered: the link is up. */
	void (*up)(void *owner, struct link *l);
	/* Lost (was_up) or failed; the retry is armed already (unless idle
	 * let the link go).  The context is gone. */
	void (*down)(void *owner, struct link *l, int was_up);
	/* NULL, or a reason not to reconnect after a loss for now (it is
	 * logged); link_retry_now starts such a link again.  NULL op: always
	 * reconnect. */
	const char *(*idle)(void *owner, const struct link *l);
};

struct link {
	const struct link_env *env;
	const struct link_ops *ops;
	void *owner;
	const char *name;		/* "command", "subscriber", "map" */
	int confirm;			/* up for good only once its owner
					 * says so (link_confirm) */
	enum link_state state;
	redisAsyncContext *ac;
	struct redial redial;		/* reconnect after backoff */
	struct event *timeout_ev;	/* connect/handshake deadline */
	struct event *kill_ev;		/* deferred teardown */
	const char *kill_why;
	int hello_left;			/* handshake replies still awaited */
	int refused;			/* this context's handshake was refused */
	int dying;			/* hiredis is failing its callbacks: a
					 * peer close runs them before
					 * onDisconnect, so "up" is a lie */
	int holding;			/* writes wait for link_write_now */
	int locating;			/* its owner is finding out where */
	char last_refusal[160];		/* logged once until it changes */
	char addrstr[ADDR_HOST_LEN + 16];	/* where this context goes, as
						 * its owner named it */
	/* A host name: looked up before every connect, and every
	 * env->resolve_ms while up (a Redis whose name now points elsewhere
	 * is followed); the context goes to the numeric answer. */
	char hostname[ADDR_HOST_LEN];	/* "" when the host is numeric */
	int port;
	struct resolve_req *resolving;	/* the lookup before a connect */
	struct resolve_req *rechecking;	/* the lookup while up */
	struct event *recheck_ev;	/* when to look up again */
	char ip[ADDR_HOST_LEN];		/* the name's answer connected to */
	char last_dns_err[128];		/* logged once until it changes */
};

/* confirm: the link counts as up (backoff reset, "up" logged) only when
 * its owner calls link_confirm (the map link, once it read a map: a node
 * refusing CLUSTER SLOTS must keep backing off). */
void link_init(struct link *l, const struct link_env *env, const char *name,
    const struct link_ops *ops, void *owner, int confirm);
/* Drop the context (its callbacks run with NULL replies) and the timers. */
void link_close(struct link *l);
/* Connect now: asks ops->locate where (unless it is asking already). */
void link_start(struct link *l);
/* locate is under way (asking the sentinels): connecting, no address;
 * link_connect or link_failed ends it. */
void link_locating(struct link *l);
/* Open a context to host:port (or the unix socket at host); a host name
 * is looked up first (the link is connecting meanwhile). */
void link_connect(struct link *l, const char *host, int port, int is_unix);
/* locate found nowhere to go: a failed attempt, retried with backoff. */
void link_failed(struct link *l, const char *why);
/* Tear l down from our own event (never inside a hiredis callback). */
void link_kill(struct link *l, const char *why);
/* A link waiting out a backoff (or let go by idle): try now, and quickly
 * after. */
void link_retry_now(struct link *l);
/* The owner confirms a confirm link is up (see link_init). */
void link_confirm(struct link *l);

/* Up, and not tearing down: it takes commands. */
int link_usable(const struct link *l);
/* An attempt is under way (its address being found, connecting, or its
 * handshake), not given up: within env->timeout_ms of its connect it is
 * up or down. */
int link_coming(const struct link *l);
/* ac is l's context now (a reply for an older one is stale). */
int link_current(const struct link *l, const redisAsyncContext *ac);
/* A reply callback saw NULL: hiredis is failing this context's callbacks,
 * the link is not usable from now on. */
void link_dying(struct link *l);

/* The handshake: one more reply to wait for; that reply came. */
void link_expect(struct link *l);
void link_hello_done(struct link *l);
/* Send a handshake command whose reply only has to be no error. */
int link_hello_sendf(struct link *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Redis refused the handshake: logged once per reason, torn down. */
void link_refuse(struct link *l, const char *why);

/* Commands: hiredis's own calls, on l's context (-1: not sent). */
int link_send(struct link *l, redisCallbackFn *fn, void *priv, int argc,
    const char **argv, const size_t *argvlen);
int link_sendf(struct link *l, redisCallbackFn *fn, void *priv,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* While holding, commands are only buffered; link_write_now writes them
 * (from our own event: saves hiredis's write event per command). */
void link_hold_writes(struct link *l, int on);
void link_write_now(struct link *l);

#endif
