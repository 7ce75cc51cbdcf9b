/*
 * sentinel.h - where the Redis master is, asked of Redis Sentinel.
 *
 * The store calls sentinel_resolve() before every (re)connect in Sentinel
 * mode: the sentinels are asked in turn, each with a short connect/reply
 * timeout, with SENTINEL get-master-addr-by-name; the first that answers
 * with an address is asked first next time.  The store then checks ROLE /
 * INFO replication on the address itself: a sentinel's answer may be stale.
 *
 * Separately, the module stays subscribed to +switch-master on every
 * sentinel it can reach (reconnecting with backoff), and asks a sentinel
 * for the master every SENTINEL_POLL_MS as well (messages can be missed;
 * a frozen old master that wakes up believes it is master for ~10 s).
 * Whenever either shows a master address other than the last one
 * reported, hooks->switched runs, once per change.
 *
 * Sentinels disagree for a moment during a failover.  Each answer comes
 * with the sentinel's config epoch (SENTINEL MASTER, asked in the same
 * write), and a sentinel naming the master of an older epoch than one
 * already followed is skipped like a silent one, so the reported master
 * never steps back to the old one.  (Only nothing but older answers for
 * 30 s -- the master monitored anew -- makes them current again.)
 *
 * Callbacks: resolve callbacks and hooks->switched run from the event
 * loop, never inside sentinel_resolve() or a hiredis callback; they may
 * call sentinel_resolve(), sentinel_master() and sentinel_free().
 *
 * hiredis 0.14 async only (docs/HIREDIS.md): numeric addresses, libevent
 * timers for every timeout, contexts never freed inside their callbacks.
 */
#ifndef LOCKBROKER_SENTINEL_H
#define LOCKBROKER_SENTINEL_H

#include <stddef.h>

#include "addr.h"
#include "resolve.h"

struct event_base;
struct sentinel;

#define SENTINEL_POLL_MS 1000		/* ask for the master this often */

/* Copied by sentinel_new(): the strings need not outlive the call. */
struct sentinel_cfg {
	/* "host:port,host:port,..." or [IPv6]:port items, host names or
	 * numbers; each by addr_parse_endpoint, no unix:, no empty item
	 * (config.c's rule).  A name is looked up before every connect. */
	const char *sentinels;
	struct resolver *resolver;	/* for the names */
	const char *master_name;
	const char *password;		/* "" or NULL = no AUTH (to sentinels) */
	const char *user;		/* "" or NULL = default user */
	long timeout_ms;		/* per sentinel asked: connect + AUTH +
					   answers; also the subscription's
					   connect + SUBSCRIBE (<= 0: 500) */
};

struct sentinel_hooks {
	/* The master moved (to is the new address; from the last one
	 * reported, or NULL when a +switch-master came before any answer).
	 * Not called for the first answer of a resolve or poll.  A resolve
	 * that brings the new address answers first and the hook follows in
	 * the same loop turn: compare to with the address in use before
	 * dropping a connection.  Changes within one loop turn are announced
	 * once (first from, last to); sentinel_master() is already to. */
	void (*switched)(void *arg, const struct addr *from,
	    const struct addr *to);
	void *arg;
};

/*
 * Answer of one resolve: master is NULL when no sentinel gave a current
 * address.  why then says what the last sentinel that answered said
 * ("no master named 'x'", "AUTH refused: ...", an older epoch), else
 * "no sentinel answered (last: ip:port: <reason>)"; the caller retries
 * with its own backoff.  The failure is logged (error) once per reason
 * until a resolve succeeds.  Runs exactly once per resolve, never from
 * inside sentinel_resolve() itself; master and why are valid during the
 * call only.
 */
typedef void sentinel_resolve_fn(void *arg, const struct addr *master,
    const char *why);

/* NULL (with a message in err) when cfg does not parse. */
struct sentinel *sentinel_new(struct event_base *base,
    const struct sentinel_cfg *cfg, const struct sentinel_hooks *hooks,
    char *err, size_t errlen);
/* Pending resolve callbacks run with master = NULL, why "shutting down"
 * (from inside this call; one that resolves again is answered the same
 * way, so it must not do so every time).  NULL is a no-op. */
void sentinel_free(struct sentinel *s);
/* Start a resolve; several may be outstanding (each answered once).
 * fn must not be NULL. */
void sentinel_resolve(struct sentinel *s, sentinel_resolve_fn *fn, void *arg);
/* The last master address reported (resolve, poll or switch), or NULL
 * before any; it points into s and changes with the master. */
const struct addr *sentinel_master(const struct sentinel *s);

#endif
