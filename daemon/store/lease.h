/*
 * lease.h - the Sentinel lease: until when no failover can have replaced
 * the master this broker works on.
 *
 * In Sentinel mode the broker grants, renews, hands off and resumes only
 * while it holds the lease (single.c gates those calls on lease_held).  A
 * failover starts only once the sentinels flag the master down; a sentinel
 * that has just answered SENTINEL MASTER without flagging it cannot do so
 * before a moment its answer tells (lease.c says how), so a majority of
 * such answers, naming the master the broker works on at the newest config
 * epoch, bound how long that master is still the master.  A broker cut
 * off from the sentinels (the old master's side of a split brain) stops
 * before the other side can start a failover.  Not covered: a failover an
 * operator forces with SENTINEL FAILOVER (no sentinel flags the master
 * down first).
 *
 * hiredis 0.14 async, as sentinel.c: numeric addresses, libevent timers
 * for every timeout, contexts never freed inside their callbacks.
 */
#ifndef LOCKBROKER_LEASE_H
#define LOCKBROKER_LEASE_H

#include <stdint.h>
#include <stddef.h>

#include "addr.h"
#include "resolve.h"

struct event_base;
struct lease;

#define LEASE_POLL_MS 100		/* each sentinel asked this often */

/* Copied by lease_new(): the strings need not outlive the call. */
struct lease_cfg {
	const char *sentinels;		/* as sentinel_cfg's: names or
					 * numbers */
	struct resolver *resolver;	/* for the names */
	const char *master_name;
	const char *password;		/* "" or NULL: no AUTH */
	const char *user;		/* "" or NULL: default user */
	long timeout_ms;		/* connect, AUTH, one answer */
	long max_ms;			/* sentinel_lease_ms: an answer is
					 * good at most this long; 0: as long
					 * as the sentinel's own clocks allow */
};

struct lease_hooks {
	/* The lease was taken or lost (held 1 / 0); never from inside a
	 * hiredis callback, never from inside a lease_* call. */
	void (*changed)(void *arg, int held);
	void *arg;
};

/* NULL (with a message in err) when cfg does not parse. */
struct lease *lease_new(struct event_base *base, const struct lease_cfg *cfg,
    const struct lease_hooks *hooks, char *err, size_t errlen);
void lease_free(struct lease *ls);
/* The master the broker works on now; NULL: none (no lease then).  A new
 * master asks every sentinel at once. */
void lease_follow(struct lease *ls, const struct addr *master);
int lease_held(const struct lease *ls);
/* ms the lease has left (0: none). */
int64_t lease_left_ms(const struct lease *ls);

#endif
