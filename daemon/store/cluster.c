/*
 * cluster.c - a Redis Cluster's slot map, for the store's routing.
 *
 * The map comes from CLUSTER SLOTS, asked on a connection of its own (the
 * map connection) to any node that answers: the seeds first, then every
 * node of the last map, replicas included, in turn.  It is read again at
 * least every CLUSTER_REFRESH_MS, and soon (at most every
 * CLUSTER_REFRESH_GAP_MS) after a redirection, a CLUSTERDOWN or a lost
 * connection: "when a redirection is encountered, it is likely multiple
 * slots were reconfigured" (cluster-spec).  MOVED patches its slot at once
 * (store.c follows it before the whole map is read again).
 *
 * Every master in the map is a node (store_int.h) with its own command
 * connection.  A node that leaves the map keeps its connection until it
 * drops and is not called again; nodes are freed with the store only, and
 * at most CLUSTER_MAX_NODES are kept.
 */
#include "store_int.h"
#include "log.h"
#include "resp.h"
#include "slot.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

struct seed {
	char host[ADDR_HOST_LEN];
	int port;
};

#define CLUSTER_MAX_ADDRS 64		/* addresses the map connection tries */

struct cluster {
	struct store *st;
	struct node *slot[SLOT_COUNT];	/* routing: the map, MOVED patches */
	struct node **fresh;		/* the map being read: SLOT_COUNT */
	struct node **applied;		/* the last map read: SLOT_COUNT */
	int known;			/* a map was applied */
	struct seed addrs[CLUSTER_MAX_ADDRS];	/* seeds, then the map's */
	size_t naddrs, next;
	char maphost[ADDR_HOST_LEN];	/* where the map connection went */
	struct link map;		/* asks CLUSTER SLOTS */
	struct event *tick_ev;		/* every CLUSTER_REFRESH_MS */
	struct event *soon_ev;		/* a refresh asked for, throttled */
	int asking;			/* CLUSTER SLOTS sent, no reply yet */
	int64_t asked_ms;
	int wanted;			/* a refresh to send when possible */
	char last_err[160];		/* the last CLUSTER SLOTS error logged */
	uint64_t changes;
};

static void refresh_send(struct cluster *cl);

static int
same_addr(const struct seed *s, const char *host, int port)
{
	return s->port == port && strcmp(s->host, host) == 0;
}

/* Remember where the map connection may go (bounded, no duplicates). */
static void
addr_add(struct cluster *cl, const char *host, int port)
{
	if (strlen(host) >= ADDR_HOST_LEN || cl->naddrs == CLUSTER_MAX_ADDRS)
		return;
	for (size_t i = 0; i < cl->naddrs; i++)
		if (same_addr(&cl->addrs[i], host, port))
			return;
	memcpy(cl->addrs[cl->naddrs].host, host, strlen(host) + 1);
	cl->addrs[cl->naddrs].port = port;
	cl->naddrs++;
}

/* The map link goes to any node of the cluster, in turn. */
static void
map_locate(void *owner, struct link *l)
{
	struct cluster *cl = owner;
	const struct seed *s = &cl->addrs[cl->next++ % cl->naddrs];

	memcpy(cl->maphost, s->host, sizeof cl->maphost);
	link_connect(l, s->host, s->port, 0);
}

struct node *
cluster_node_at(struct cluster *cl, const char *host, int port)
{
	struct store *st = cl->st;
	struct node *n;

	for (n = st->nodes; n != NULL; n = n->next)
		if (n->port == port && strcmp(n->host, host) == 0)
			return n;
	if (st->nnodes >= CLUSTER_MAX_NODES) {
		log_warn("Redis Cluster: more than %d masters seen; %s:%d is "
		    "not used", CLUSTER_MAX_NODES, host, port);
		return NULL;
	}
	n = store_node_new(st, host, port, 0);
	link_start(&n->link);
	return n;
}

struct node *
cluster_node_of(struct cluster *cl, unsigned slot)
{
	return slot < SLOT_COUNT ? cl->slot[slot] : NULL;
}

struct node *
cluster_moved(struct cluster *cl, unsigned slot, const char *host, int port)
{
	struct node *n = cluster_node_at(cl, host, port);

	if (n == NULL || slot >= SLOT_COUNT || cl->slot[slot] == n)
		return n;
	if (cl->slot[slot] != NULL)
		cl->slot[slot]->slots--;
	cl->slot[slot] = n;
	n->slots++;
	return n;
}

int
cluster_map_known(const struct cluster *cl)
{
	return cl->known;
}

uint64_t
cluster_map_changes(const struct cluster *cl)
{
	return cl->changes;
}

/* --- reading the map ------------------------------------------------- */

/*
 * One CLUSTER SLOTS entry: [start, end, [ip, port, id, ...] (the master),
 * [ip, port, ...] (each replica)].  An empty ip is the node we asked.
 * Fills cl->fresh; -1 when the entry is malformed.
 */
static int
entry_read(struct cluster *cl, const redisReply *e)
{
	const redisReply *m;
	long long lo, hi;
	struct node *n;

	if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
	    !resp_is_int(e->element[0]) || !resp_is_int(e->element[1]))
		return -1;
	lo = e->element[0]->integer;
	hi = e->element[1]->integer;
	if (lo < 0 || hi < lo || hi >= SLOT_COUNT)
		return -1;
	for (size_t i = 2; i < e->elements; i++) {
		const char *host;

		m = e->element[i];
		if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
		    !resp_is_str(m->element[0]) || !resp_is_int(m->element[1]) ||
		    m->element[1]->integer <= 0 ||
		    m->element[1]->integer > 65535)
			return -1;
		host = m->element[0]->str[0] != '\0' &&
		    strcmp(m->element[0]->str, "?") != 0 ?
		    m->element[0]->str : cl->maphost;
		addr_add(cl, host, (int)m->element[1]->integer);
		if (i > 2)
			continue;	/* a replica: only an address to try */
		if ((n = cluster_node_at(cl, host,
		    (int)m->element[1]->integer)) == NULL)
			return -1;
		for (long long s = lo; s <= hi; s++)
			cl->fresh[s] = n;
	}
	return 0;
}

/* Make the map just read the one in use; log what changed. */
static void
map_apply(struct cluster *cl)
{
	struct store *st = cl->st;
	unsigned moved = 0, unassigned = 0, masters = 0;
	struct node *n;

	/* against the last map read, not the routing table: a move first
	 * learnt from MOVED is still news for the log and the counter */
	for (unsigned s = 0; s < SLOT_COUNT; s++) {
		if (cl->fresh[s] != cl->applied[s])
			moved++;
		if (cl->fresh[s] == NULL)
			unassigned++;
	}
	for (n = st->nodes; n != NULL; n = n->next)
		n->slots = 0;
	memcpy(cl->slot, cl->fresh, sizeof cl->slot);
	memcpy(cl->applied, cl->fresh, sizeof cl->slot);
	for (unsigned s = 0; s < SLOT_COUNT; s++)
		if (cl->slot[s] != NULL && cl->slot[s]->slots++ == 0)
			masters++;
	if (moved == 0 && cl->known)
		return;
	cl->changes++;
	log_info("Redis Cluster slot map %s: %u masters, %u slots changed "
	    "hands, %u unassigned", cl->known ? "changed" : "loaded", masters,
	    moved, unassigned);
	for (n = st->nodes; n != NULL; n = n->next)
		if (n->slots > 0)
			log_debug("  %s serves %u slots", n->link.addrstr,
			    n->slots);
	cl->known = 1;
	for (n = st->nodes; n != NULL; n = n->next)
		if (n->slots > 0 && n->link.state == LINK_DOWN)
			link_retry_now(&n->link);	/* back in the map */
	/* Keys may route elsewhere now: clean-ups and waiters try again
	 * (held locks moved with their slot; a new master reasserts them
	 * when its connection comes up). */
	if (st->hooks.rerouted != NULL && store_is_up(st))
		st->hooks.rerouted(st->hooks.arg);
}

/* A master's shard subscriber asks the map (shardsub.h). */
static int
ss_serving(void *arg)
{
	struct node *n = arg;

	return n->slots > 0;
}

static int
ss_owns(void *arg, unsigned slot)
{
	struct node *n = arg;

	return cluster_node_of(n->st->cl, slot) == n;
}

static void
ss_lost_slot(void *arg)
{
	struct node *n = arg;

	cluster_refresh(n->st->cl);
}

static const struct shardsub_ops ss_ops = {
	.serving = ss_serving, .owns = ss_owns, .lost_slot = ss_lost_slot,
};

/* Wake-ups: every master serving slots has its shard subscriber, and it
 * subscribes the slots it serves now (after a migration or a failover,
 * or a "sunsubscribe" Redis sent). */
static void
subs_sync(struct cluster *cl)
{
	struct store *st = cl->st;

	for (struct node *n = st->nodes; n != NULL; n = n->next) {
		if (n->slots == 0)
			continue;
		if (n->ss == NULL)
			n->ss = shardsub_new(&st->env, &st->keys, &st->hooks,
			    n->host, n->port, n->link.addrstr, &ss_ops, n);
		else
			shardsub_wake(n->ss);
	}
}

static void
slots_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct cluster *cl = privdata;
	redisReply *r = reply;

	if (!link_current(&cl->map, ac))
		return;
	cl->asking = 0;
	if (r == NULL)
		return;		/* the connection went: it says so itself */
	if (r->type == REDIS_REPLY_ERROR) {
		/* e.g. a seed that is no cluster node: said once, not on
		 * every retry */
		if (strncmp(cl->last_err, r->str, sizeof cl->last_err - 1) != 0)
			log_error("Redis Cluster: CLUSTER SLOTS on %s: %s",
			    cl->map.addrstr, r->str);
		snprintf(cl->last_err, sizeof cl->last_err, "%s", r->str);
		link_kill(&cl->map, "CLUSTER SLOTS refused");
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY) {
		link_kill(&cl->map, "unexpected reply to CLUSTER SLOTS");
		return;
	}
	memset(cl->fresh, 0, SLOT_COUNT * sizeof *cl->fresh);
	for (size_t i = 0; i < r->elements; i++)
		if (entry_read(cl, r->element[i]) != 0) {
			log_error("Redis Cluster: malformed CLUSTER SLOTS entry "
			    "from %s; map not changed", cl->map.addrstr);
			return;
		}
	if (r->elements == 0) {
		/* a node not in a cluster yet, or one that forgot it */
		log_warn("Redis Cluster: %s knows no slots; asking another",
		    cl->map.addrstr);
		link_kill(&cl->map, "no slots known");
		return;
	}
	cl->last_err[0] = '\0';
	link_confirm(&cl->map);
	map_apply(cl);
	subs_sync(cl);
	if (cl->wanted)
		cluster_refresh(cl);
}

static void
refresh_send(struct cluster *cl)
{
	if (cl->asking || cl->map.state != LINK_UP || cl->map.ac == NULL) {
		cl->wanted = 1;		/* sent once the map connection is up */
		return;
	}
	if (link_sendf(&cl->map, slots_reply, cl, "CLUSTER SLOTS") != 0) {
		link_kill(&cl->map, "cannot send CLUSTER SLOTS");
		return;
	}
	cl->wanted = 0;
	cl->asking = 1;
	cl->asked_ms = now_ms();
}

void
cluster_refresh(struct cluster *cl)
{
	int64_t since = now_ms() - cl->asked_ms;

	if (cl->asking) {
		cl->wanted = 1;
		return;
	}
	if (since >= CLUSTER_REFRESH_GAP_MS)
		refresh_send(cl);
	else if (!evtimer_pending(cl->soon_ev, NULL))
		timer_add_ms(cl->soon_ev, CLUSTER_REFRESH_GAP_MS - since);
}

/* The map link is open (up for good once it has read a map). */
static void
map_up(void *owner, struct link *l)
{
	struct cluster *cl = owner;

	(void)l;
	cl->asking = 0;
	refresh_send(cl);
}

static void
map_down(void *owner, struct link *l, int was_up)
{
	struct cluster *cl = owner;

	(void)l;
	(void)was_up;
	if (!cl->st->freeing)
		cluster_refresh(cl);	/* a failover, perhaps */
}

static const struct link_ops map_ops = {
	.locate = map_locate, .up = map_up, .down = map_down,
};

static void
soon_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	refresh_send(arg);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct cluster *cl = arg;

	(void)fd;
	(void)what;
	if (cl->asking && now_ms() - cl->asked_ms > cl->st->cfg.timeout_ms) {
		link_kill(&cl->map, "no answer to CLUSTER SLOTS");
		return;
	}
	refresh_send(cl);
}

/* Seeds: "ip:port,..." as config.c checked them (addr_parse_endpoint). */
static int
seeds_parse(struct cluster *cl, const char *seeds)
{
	const char *p = seeds;

	while (*p != '\0') {
		size_t len = strcspn(p, ",");
		char one[ADDR_HOST_LEN + 16], err[160];
		struct addr a;

		if (len >= sizeof one) {
			log_error("redis_cluster: address too long");
			return -1;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		if (addr_parse_endpoint(one, &a, err, sizeof err) != 0 ||
		    a.is_unix) {
			log_error("redis_cluster: %s", a.is_unix ?
			    "a unix socket cannot be a cluster node" : err);
			return -1;
		}
		addr_add(cl, a.host, a.port);
		p += len;
		if (*p == ',')
			p++;
	}
	return cl->naddrs > 0 ? 0 : -1;
}

struct cluster *
cluster_new(struct store *st, const char *seeds)
{
	struct cluster *cl = xcalloc(1, sizeof *cl);
	struct timeval tick = { CLUSTER_REFRESH_MS / 1000,
	    (CLUSTER_REFRESH_MS % 1000) * 1000 };

	cl->st = st;
	cl->fresh = xcalloc(SLOT_COUNT, sizeof *cl->fresh);
	cl->applied = xcalloc(SLOT_COUNT, sizeof *cl->applied);
	link_init(&cl->map, &st->env, "map", &map_ops, cl, 1);
	cl->tick_ev = event_new(st->base, -1, EV_PERSIST, tick_cb, cl);
	cl->soon_ev = evtimer_new(st->base, soon_cb, cl);
	if (cl->tick_ev == NULL || cl->soon_ev == NULL)
		fatalx("cannot create Redis timers");
	if (seeds_parse(cl, seeds) != 0) {
		cluster_free(cl);
		return NULL;
	}
	event_add(cl->tick_ev, &tick);
	link_start(&cl->map);
	return cl;
}

void
cluster_free(struct cluster *cl)
{
	if (cl == NULL)
		return;
	link_close(&cl->map);
	if (cl->tick_ev)
		event_free(cl->tick_ev);
	if (cl->soon_ev)
		event_free(cl->soon_ev);
	free(cl->fresh);
	free(cl->applied);
	free(cl);
}
