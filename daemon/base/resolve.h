/*
 * resolve.h - host names to numeric addresses without blocking the loop.
 *
 * A leaf over libevent's evdns: evdns_getaddrinfo reads /etc/hosts and asks
 * the nameservers of /etc/resolv.conf (or the one given instead, the
 * dns_nameserver option), over the event loop.  Every Redis address the
 * broker is given or learns may be a name; its owner asks here on every
 * connect (and now and then while connected, to notice a name that moved)
 * and connects to the numeric answer, so hiredis's own blocking
 * getaddrinfo never sees a name.
 *
 * The answer always arrives from the loop, never inside resolve_start:
 * evdns itself answers a numeric host or an /etc/hosts entry before
 * evdns_getaddrinfo returns, and a caller that is still setting up must
 * not be called back half-way.
 */
#ifndef LOCKBROKER_RESOLVE_H
#define LOCKBROKER_RESOLVE_H

#include <stddef.h>

#include <event2/event.h>

struct resolver;
struct resolve_req;

/* host: the first numeric answer (IPv4 or IPv6, no brackets), or NULL and
 * why says what went wrong. */
typedef void resolve_fn(void *arg, const char *host, const char *why);

/*
 * A resolver on base.  nameserver "" reads /etc/resolv.conf (its
 * nameservers, search domains and options); "ip", "ip:port" or
 * "[ipv6]:port" asks that server only (no search domains).  /etc/hosts
 * is read either way.  Returns NULL with a message in err.
 */
struct resolver *resolver_new(struct event_base *base, const char *nameserver,
    char *err, size_t errlen);
/* Lookups still under way are dropped without their callback (the loop
 * has stopped: nothing waits for them); with some still in flight inside
 * evdns, evdns's own state is kept until the process ends (resolve.c). */
void resolver_free(struct resolver *r);

/* Look name up; fn(arg, ...) runs once, later, from the loop, unless
 * resolve_cancel comes first. */
struct resolve_req *resolve_start(struct resolver *r, const char *name,
    resolve_fn *fn, void *arg);
/* fn will not run (q is the resolver's after this: a lookup in flight
 * runs on unwatched, and its answer is dropped). */
void resolve_cancel(struct resolve_req *q);

/*
 * The step every Redis address's owner takes before it connects to a
 * host given by name: look the name up, then connect to the answer.  The
 * owner says what "still waiting", "connect" and "failed" mean for it.
 */
struct resolve_then {
	/* Still waiting for this answer (it may have given up, or be
	 * connected by another way since). */
	int (*waiting)(void *arg);
	/* Connect to host, the name's first numeric answer. */
	void (*connect)(void *arg, const char *host);
	/* The name did not resolve: why reads "cannot resolve <name>:
	 * <reason>". */
	void (*failed)(void *arg, const char *why);
};

/*
 * Look name up, then go on with then (see struct resolve_then): later,
 * from the loop, *slot is cleared, and unless then->waiting(arg) says no,
 * then->connect or then->failed runs.  A lookup *slot held before is
 * cancelled; *slot holds this one while it runs (resolve_cancel(*slot)
 * stops it).
 */
void resolve_connect(struct resolver *r, struct resolve_req **slot,
    const char *name, const struct resolve_then *then, void *arg);

/* "Is this a name to look up": not a numeric IPv4 or IPv6 host. */
int resolve_is_name(const char *host);

#endif
