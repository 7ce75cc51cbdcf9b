/*
 * resolve.c - host names over libevent's evdns (resolve.h).
 *
 * A lookup lives in a resolve_req the resolver keeps on a list (so
 * resolver_free can drop what is left).  evdns owes it one callback from
 * evdns_getaddrinfo on: possibly before that call returns (a numeric host,
 * an /etc/hosts entry, a bad name), else from the loop.  The answer is
 * kept and handed to the owner from an event of our own, so the owner is
 * never called inside resolve_start.
 *
 * A cancel only forgets the owner: the lookup runs on and its request is
 * freed when evdns answers.  evdns_getaddrinfo_cancel would free evdns's
 * side from a deferred callback, which never runs once the loop has
 * stopped (shutdown: the links close, then the store frees the resolver),
 * and that memory would be lost.  For the same reason a resolver with
 * lookups still in flight is not freed but parked, all of it reachable
 * (its requests, and evdns's through them), until the process ends:
 * evdns_base_free frees a request's getaddrinfo state only from the loop
 * too.
 *
 * resolve_connect is the owners' common step over resolve_start: the
 * request also carries the owner's slot, its resolve_then and the name
 * (for the failure's text), and done_cb hands the answer on (then_step).
 * Such a request has no fn: "cancelled" is neither fn nor then.
 */
#include "resolve.h"
#include "util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/dns.h>
#include <event2/util.h>

#define HOST_LEN 46			/* INET6_ADDRSTRLEN */
#define NAME_LEN 254			/* a DNS name (253) + NUL */

struct resolve_req {
	struct resolver *r;
	int in_evdns;
	struct evdns_getaddrinfo_request *dreq;	/* evdns's, while in it */			/* evdns still owes its callback */
	resolve_fn *fn;			/* NULL (and then NULL): cancelled */
	void *arg;
	struct event *done_ev;		/* hands the answer over */
	char host[HOST_LEN];		/* the answer, or "" */
	char why[128];			/* else what went wrong */
	LIST_ENTRY(resolve_req) entry;
	/* resolve_connect's: where the owner keeps the request, what it
	 * does next, and the name looked up */
	struct resolve_req **slot;
	const struct resolve_then *then;
	char name[NAME_LEN];
};

struct resolver {
	struct event_base *base;
	struct evdns_base *dns;
	LIST_HEAD(, resolve_req) reqs;
};

/* Resolvers freed with lookups in flight (see above); one per store
 * made in the process's life, and a process makes one. */
#define PARKED_MAX 8
static struct resolver *parked[PARKED_MAX];

int
resolve_is_name(const char *host)
{
	unsigned char bin[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, bin) != 1 &&
	    inet_pton(AF_INET6, host, bin) != 1;
}

struct resolver *
resolver_new(struct event_base *base, const char *nameserver, char *err,
    size_t errlen)
{
	struct resolver *r = xcalloc(1, sizeof *r);
	/* an idle resolver must not keep the loop from ending */
	int flags = EVDNS_BASE_DISABLE_WHEN_INACTIVE;

	r->base = base;
	LIST_INIT(&r->reqs);
	if (nameserver[0] == '\0')
		flags |= EVDNS_BASE_INITIALIZE_NAMESERVERS;
	r->dns = evdns_base_new(base, flags);
	if (r->dns == NULL) {
		snprintf(err, errlen, "cannot start the DNS resolver");
		free(r);
		return NULL;
	}
	if (nameserver[0] != '\0') {
		/* /etc/hosts still counts; a missing one is no error */
		if (evdns_base_load_hosts(r->dns, "/etc/hosts") != 0)
			(void)evdns_base_load_hosts(r->dns, NULL);
		if (evdns_base_nameserver_ip_add(r->dns, nameserver) != 0) {
			snprintf(err, errlen, "dns_nameserver '%s': not an "
			    "ip[:port] libevent accepts", nameserver);
			resolver_free(r);
			return NULL;
		}
	}
	return r;
}

static void
req_free(struct resolve_req *q)
{
	LIST_REMOVE(q, entry);
	event_free(q->done_ev);
	free(q);
}

void
resolver_free(struct resolver *r)
{
	struct resolve_req *q;
	int in_flight = 0;

	if (r == NULL)
		return;
	LIST_FOREACH(q, &r->reqs, entry) {
		q->fn = NULL;		/* nobody waits any more */
		q->then = NULL;
		event_del(q->done_ev);
		in_flight |= q->in_evdns;
	}
	for (size_t i = 0; in_flight && i < PARKED_MAX; i++)
		if (parked[i] == NULL) {
			parked[i] = r;
			return;
		}
	while ((q = LIST_FIRST(&r->reqs)) != NULL)
		req_free(q);
	evdns_base_free(r->dns, 0);
	free(r);
}

/* resolve_connect's answer, handed on to its owner (see resolve.h). */
static void
then_step(struct resolve_req **slot, const struct resolve_then *then,
    void *arg, const char *name, const char *host, const char *why)
{
	char msg[NAME_LEN + 160];

	*slot = NULL;
	if (!then->waiting(arg))
		return;
	if (host != NULL) {
		then->connect(arg, host);
		return;
	}
	snprintf(msg, sizeof msg, "cannot resolve %s: %s", name, why);
	then->failed(arg, msg);
}

static void
done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct resolve_req *q = arg;
	resolve_fn *fn = q->fn;
	const struct resolve_then *then = q->then;
	struct resolve_req **slot = q->slot;
	void *fnarg = q->arg;
	char host[HOST_LEN], why[sizeof q->why], name[NAME_LEN];

	(void)fd;
	(void)what;
	memcpy(host, q->host, sizeof host);
	memcpy(why, q->why, sizeof why);
	if (then != NULL)
		memcpy(name, q->name, sizeof name);
	req_free(q);
	if (then != NULL)
		then_step(slot, then, fnarg, name, host[0] != '\0' ? host :
		    NULL, why);
	else if (fn != NULL)
		fn(fnarg, host[0] != '\0' ? host : NULL, why);
}

/* The first answer as text (the list is in evdns's order: the A records
 * first when there are both). */
static int
first_answer(const struct evutil_addrinfo *ai, char *host, size_t len)
{
	for (; ai != NULL; ai = ai->ai_next) {
		const void *bin;

		if (ai->ai_family == AF_INET)
			bin = &((const struct sockaddr_in *)(const void *)
			    ai->ai_addr)->sin_addr;
		else if (ai->ai_family == AF_INET6)
			bin = &((const struct sockaddr_in6 *)(const void *)
			    ai->ai_addr)->sin6_addr;
		else
			continue;
		if (inet_ntop(ai->ai_family, bin, host, (socklen_t)len) != NULL)
			return 0;
	}
	return -1;
}

static void
got_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct resolve_req *q = arg;

	q->in_evdns = 0;
	q->dreq = NULL;
	if (q->fn == NULL && q->then == NULL) {	/* cancelled: nobody
						 * waits */
		if (res != NULL)
			evutil_freeaddrinfo(res);
		req_free(q);
		return;
	}
	if (result != 0)
		snprintf(q->why, sizeof q->why, "%s",
		    evutil_gai_strerror(result));
	else if (first_answer(res, q->host, sizeof q->host) != 0)
		snprintf(q->why, sizeof q->why, "no IPv4 or IPv6 address");
	if (res != NULL)
		evutil_freeaddrinfo(res);
	event_active(q->done_ev, EV_TIMEOUT, 0);
}

/* A lookup of name for fn, or for then (resolve_connect): both are set
 * before evdns may answer, which it can do inside evdns_getaddrinfo. */
static struct resolve_req *
req_start(struct resolver *r, const char *name, resolve_fn *fn,
    const struct resolve_then *then, struct resolve_req **slot, void *arg)
{
	struct resolve_req *q = xcalloc(1, sizeof *q);
	struct evutil_addrinfo hints;
	struct evdns_getaddrinfo_request *dreq;

	q->r = r;
	q->fn = fn;
	q->then = then;
	q->slot = slot;
	q->arg = arg;
	if (then != NULL)
		snprintf(q->name, sizeof q->name, "%s", name);
	q->done_ev = timer_new(r->base, done_cb, q);
	LIST_INSERT_HEAD(&r->reqs, q, entry);
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	q->in_evdns = 1;		/* got_cb may clear it at once */
	dreq = evdns_getaddrinfo(r->dns, name, NULL, &hints, got_cb, q);
	if (q->in_evdns)
		q->dreq = dreq;		/* kept: reachable while parked */
	return q;
}

struct resolve_req *
resolve_start(struct resolver *r, const char *name, resolve_fn *fn,
    void *arg)
{
	return req_start(r, name, fn, NULL, NULL, arg);
}

void
resolve_connect(struct resolver *r, struct resolve_req **slot,
    const char *name, const struct resolve_then *then, void *arg)
{
	resolve_cancel(*slot);
	*slot = req_start(r, name, NULL, then, slot, arg);
}

void
resolve_cancel(struct resolve_req *q)
{
	if (q == NULL)
		return;
	q->fn = NULL;
	q->then = NULL;
	if (!q->in_evdns)		/* the answer waits in done_ev */
		req_free(q);
	/* else got_cb frees q when evdns answers (see above) */
}
