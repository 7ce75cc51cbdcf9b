/*
 * cluster.c - a master per slot, by a Redis Cluster's slot map
 * (cluster.h): the topology of cluster mode.
 *
 * The map comes from CLUSTER SLOTS, asked on a link of its own (the map
 * link) to any node that answers: the seeds first, then every node of the
 * last map, replicas included, in turn.  It is read again at least every
 * REFRESH_MS, and soon (at most every REFRESH_GAP_MS) after a
 * redirection, a CLUSTERDOWN or a lost link: "when a redirection is
 * encountered, it is likely multiple slots were reconfigured"
 * (cluster-spec).  MOVED patches its slot at once (calls.c follows it
 * before the whole map is read again).
 *
 * Every master in the map is a node (node.h) with its own command link
 * and its shard subscriber (shardsub.c).  A master that leaves the map
 * keeps its link until it drops and is not called again; masters are
 * freed with the store only, and at most CLUSTER_MAX_NODES are kept.
 */
#include "cluster.h"
#include "log.h"
#include "resp.h"
#include "shardsub.h"
#include "slot.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REFRESH_MS 1000			/* slot map read at least this often */
#define REFRESH_GAP_MS 100		/* and at most this often */
#define MAX_ADDRS 64			/* addresses the map link tries */

struct seed {
	char host[ADDR_HOST_LEN];
	int port;
};

struct cluster;

/* A master of the map, and its wake-ups. */
struct master {
	struct cluster *cl;
	struct node *node;
	struct master *next;		/* cl->masters, newest first */
	unsigned slots;			/* slots it serves (routing table) */
	struct shardsub *ss;		/* made once it serves slots */
};

struct cluster {
	struct node_env *env;
	const struct store_keys *keys;
	const struct store_hooks *hooks;
	struct master *slot[SLOT_COUNT];	/* routing: the map, MOVED
						 * patches */
	struct master **fresh;		/* the map being read: SLOT_COUNT */
	struct master **applied;	/* the last map read: SLOT_COUNT */
	int known;			/* a map was applied */
	struct master *masters;		/* every master seen */
	unsigned nmasters;
	struct seed addrs[MAX_ADDRS];	/* seeds, then the map's */
	size_t naddrs, next;
	char maphost[ADDR_HOST_LEN];	/* where the map link went */
	struct link map;		/* asks CLUSTER SLOTS */
	struct event *tick_ev;		/* every REFRESH_MS */
	struct event *soon_ev;		/* a refresh asked for, throttled */
	int asking;			/* CLUSTER SLOTS sent, no reply yet */
	int64_t asked_ms;
	int wanted;			/* a refresh to send when possible */
	char last_err[160];		/* the last CLUSTER SLOTS error logged */
	uint64_t changes;
};

static void refresh_send(struct cluster *cl);
static void cluster_refresh(void *t);

static int
same_addr(const struct seed *s, const char *host, int port)
{
	return s->port == port && strcmp(s->host, host) == 0;
}

/* Remember where the map link may go (bounded, no duplicates). */
static void
addr_add(struct cluster *cl, const char *host, int port)
{
	if (strlen(host) >= ADDR_HOST_LEN || cl->naddrs == MAX_ADDRS)
		return;
	for (size_t i = 0; i < cl->naddrs; i++)
		if (same_addr(&cl->addrs[i], host, port))
			return;
	memcpy(cl->addrs[cl->naddrs].host, host, strlen(host) + 1);
	cl->addrs[cl->naddrs].port = port;
	cl->naddrs++;
}

/* Some master serving slots has its command link up, the map known. */
static int
cluster_up(void *t)
{
	struct cluster *cl = t;

	if (!cl->known)
		return 0;
	for (const struct master *m = cl->masters; m != NULL; m = m->next)
		if (m->slots > 0 && node_usable(m->node))
			return 1;
	return 0;
}

/* --- each master's command link ---------------------------------------- */

static void
master_locate(void *owner, struct link *l)
{
	struct node *n = owner;

	link_connect(l, n->host, n->port, n->is_unix);
}

/* INFO said it is a master: each slot joins its tenure by itself
 * (lib/slot_tenure.lua, from the ids node.c keeps); a stale master
 * answers MOVED. */
static void
master_info(struct node *n, int changed)
{
	if (changed)
		n->env->tenures++;
	link_hello_done(&n->link);
}

static void
master_hello(void *owner, struct link *l)
{
	(void)l;
	node_hello(owner, master_info);
}

static void
master_up(void *owner, struct link *l)
{
	struct node *n = owner;
	struct master *m = n->owner;
	const struct store_hooks *h = m->cl->hooks;

	(void)l;
	node_up(n);
	if (h->up)
		h->up(h->arg);
}

static void
master_down(void *owner, struct link *l, int was_up)
{
	struct node *n = owner;
	struct master *m = n->owner;
	struct cluster *cl = m->cl;
	const struct store_hooks *h = cl->hooks;

	(void)l;
	node_down(n);
	if (!cl->env->link.closing)
		cluster_refresh(cl);	/* a failover, perhaps */
	if (!was_up) {
		/* an attempt failed: what waited for it hears so now */
		if (h->down)
			h->down(h->arg);
		return;
	}
	cl->env->reconnects++;
	shardsub_drop(m->ss);
	if (h->down)
		h->down(h->arg);
}

/* A master that left the map is not called again. */
static const char *
master_idle(void *owner, const struct link *l)
{
	struct node *n = owner;
	struct master *m = n->owner;

	(void)l;
	return m->slots == 0 ? "it serves no slots" : NULL;
}

static const struct link_ops master_ops = {
	.locate = master_locate, .hello = master_hello, .up = master_up,
	.down = master_down, .idle = master_idle,
};

/* The master at host:port, made (and connecting) if unknown; NULL past
 * the cap. */
static struct master *
master_at(struct cluster *cl, const char *host, int port)
{
	struct master *m;

	for (m = cl->masters; m != NULL; m = m->next)
		if (m->node->port == port && strcmp(m->node->host, host) == 0)
			return m;
	if (cl->nmasters >= CLUSTER_MAX_NODES) {
		log_warn("Redis Cluster: more than %d masters seen; %s:%d is "
		    "not used", CLUSTER_MAX_NODES, host, port);
		return NULL;
	}
	m = xcalloc(1, sizeof *m);
	m->cl = cl;
	m->node = node_new(cl->env, host, port, 0, &master_ops, m);
	m->next = cl->masters;
	cl->masters = m;
	cl->nmasters++;
	link_start(&m->node->link);
	return m;
}

/* --- the map link ------------------------------------------------------- */

/* The map link goes to any node of the cluster, in turn. */
static void
map_locate(void *owner, struct link *l)
{
	struct cluster *cl = owner;
	const struct seed *s = &cl->addrs[cl->next++ % cl->naddrs];

	memcpy(cl->maphost, s->host, sizeof cl->maphost);
	link_connect(l, s->host, s->port, 0);
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
	struct master *ms;

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
		if ((ms = master_at(cl, host,
		    (int)m->element[1]->integer)) == NULL)
			return -1;
		for (long long s = lo; s <= hi; s++)
			cl->fresh[s] = ms;
	}
	return 0;
}

/* Make the map just read the one in use; log what changed. */
static void
map_apply(struct cluster *cl)
{
	const struct store_hooks *h = cl->hooks;
	unsigned moved = 0, unassigned = 0, masters = 0;
	struct master *m;

	/* against the last map read, not the routing table: a move first
	 * learnt from MOVED is still news for the log and the counter */
	for (unsigned s = 0; s < SLOT_COUNT; s++) {
		if (cl->fresh[s] != cl->applied[s])
			moved++;
		if (cl->fresh[s] == NULL)
			unassigned++;
	}
	for (m = cl->masters; m != NULL; m = m->next)
		m->slots = 0;
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
	for (m = cl->masters; m != NULL; m = m->next)
		if (m->slots > 0)
			log_debug("  %s serves %u slots", m->node->link.addrstr,
			    m->slots);
	cl->known = 1;
	for (m = cl->masters; m != NULL; m = m->next)
		if (m->slots > 0 && m->node->link.state == LINK_DOWN)
			link_retry_now(&m->node->link);	/* back in the map */
	/* Keys may route elsewhere now: clean-ups and waiters try again
	 * (held locks moved with their slot; a new master reasserts them
	 * when its link comes up). */
	if (h->rerouted != NULL && cluster_up(cl))
		h->rerouted(h->arg);
}

/* A master's shard subscriber asks the map (shardsub.h). */
static int
ss_serving(void *arg)
{
	struct master *m = arg;

	return m->slots > 0;
}

static int
ss_owns(void *arg, unsigned slot)
{
	struct master *m = arg;

	return slot < SLOT_COUNT && m->cl->slot[slot] == m;
}

static void
ss_lost_slot(void *arg)
{
	struct master *m = arg;

	cluster_refresh(m->cl);
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
	for (struct master *m = cl->masters; m != NULL; m = m->next) {
		struct node *n = m->node;

		if (m->slots == 0)
			continue;
		if (m->ss == NULL)
			m->ss = shardsub_new(&cl->env->link, cl->keys, cl->hooks,
			    n->host, n->port, n->link.addrstr, &ss_ops, m);
		else
			shardsub_wake(m->ss);
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

static void
cluster_refresh(void *t)
{
	struct cluster *cl = t;
	int64_t since = now_ms() - cl->asked_ms;

	if (cl->asking) {
		cl->wanted = 1;
		return;
	}
	if (since >= REFRESH_GAP_MS)
		refresh_send(cl);
	else if (!evtimer_pending(cl->soon_ev, NULL))
		timer_add_ms(cl->soon_ev, REFRESH_GAP_MS - since);
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
	if (!cl->env->link.closing)
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
	if (cl->asking && now_ms() - cl->asked_ms > cl->env->link.timeout_ms) {
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

/* --- the topology ------------------------------------------------------ */

static struct node *
cluster_node_of(void *t, int slot)
{
	struct cluster *cl = t;

	return slot >= 0 && slot < SLOT_COUNT && cl->slot[slot] != NULL ?
	    cl->slot[slot]->node : NULL;
}

static int
cluster_coming(void *t, int slot)
{
	struct cluster *cl = t;
	struct node *n = cluster_node_of(t, slot);

	return n != NULL ? node_coming(n) : !cl->known &&
	    link_coming(&cl->map);
}

/* MOVED: slot lives at host:port now (the map is refreshed soon). */
static struct node *
cluster_moved(void *t, int slot, const char *host, int port)
{
	struct cluster *cl = t;
	struct master *m = master_at(cl, host, port);

	if (m == NULL)
		return NULL;
	if (slot < 0 || slot >= SLOT_COUNT || cl->slot[slot] == m)
		return m->node;
	if (cl->slot[slot] != NULL)
		cl->slot[slot]->slots--;
	cl->slot[slot] = m;
	m->slots++;
	return m->node;
}

/* ASK: the node at host:port, made if unknown. */
static struct node *
cluster_asked(void *t, const char *host, int port)
{
	struct master *m = master_at(t, host, port);

	return m != NULL ? m->node : NULL;
}

static int
cluster_may_grant(void *t)
{
	(void)t;
	return 1;
}

static void
cluster_each(void *t, int all, void (*fn)(void *arg, struct node *n),
    void *arg)
{
	struct cluster *cl = t;

	for (struct master *m = cl->masters; m != NULL; m = m->next)
		if (all || m->slots > 0)
			fn(arg, m->node);
}

static void
cluster_kick(void *t)
{
	struct cluster *cl = t;

	for (struct master *m = cl->masters; m != NULL; m = m->next)
		if (m->slots > 0)
			link_retry_now(&m->node->link);
	cluster_refresh(cl);
}

static long long
cluster_lease_ms(void *t)
{
	(void)t;
	return -1;
}

static uint64_t
cluster_map_changes(void *t)
{
	const struct cluster *cl = t;

	return cl->changes;
}

static void
cluster_start(void *t)
{
	(void)t;		/* the map link is started by cluster_new */
}

/* The map link first; then every master, its calls failing: no routing
 * meanwhile (the callers they answer may try again, and find none). */
static void
cluster_free(void *t)
{
	struct cluster *cl = t;
	struct master *m;

	if (cl == NULL)
		return;
	link_close(&cl->map);
	if (cl->tick_ev)
		event_free(cl->tick_ev);
	if (cl->soon_ev)
		event_free(cl->soon_ev);
	memset(cl->slot, 0, sizeof cl->slot);
	cl->known = 0;
	while ((m = cl->masters) != NULL) {
		shardsub_free(m->ss);
		m->ss = NULL;
		node_free(m->node);
		cl->masters = m->next;
		free(m);
	}
	free(cl->fresh);
	free(cl->applied);
	free(cl);
}

static const struct topo_ops cluster_ops = {
	.start = cluster_start, .free = cluster_free,
	.node_of = cluster_node_of, .moved = cluster_moved,
	.asked = cluster_asked, .refresh = cluster_refresh,
	.may_grant = cluster_may_grant, .up = cluster_up,
	.coming = cluster_coming,
	.each = cluster_each, .kick = cluster_kick,
	.lease_ms = cluster_lease_ms, .map_changes = cluster_map_changes,
};

int
cluster_new(struct node_env *env, const struct store_keys *k,
    const struct store_hooks *h, const char *seeds, struct topo *tp)
{
	struct cluster *cl = xcalloc(1, sizeof *cl);
	struct timeval tick = { REFRESH_MS / 1000,
	    (REFRESH_MS % 1000) * 1000 };

	slot_tags_init();
	cl->env = env;
	cl->keys = k;
	cl->hooks = h;
	cl->fresh = xcalloc(SLOT_COUNT, sizeof *cl->fresh);
	cl->applied = xcalloc(SLOT_COUNT, sizeof *cl->applied);
	link_init(&cl->map, &env->link, "map", &map_ops, cl, 1);
	cl->tick_ev = event_new(env->link.base, -1, EV_PERSIST, tick_cb, cl);
	cl->soon_ev = evtimer_new(env->link.base, soon_cb, cl);
	if (cl->tick_ev == NULL || cl->soon_ev == NULL)
		fatalx("cannot create Redis timers");
	if (seeds_parse(cl, seeds) != 0) {
		cluster_free(cl);
		return -1;
	}
	event_add(cl->tick_ev, &tick);
	*tp = (struct topo){ &cluster_ops, cl, 1 };
	link_start(&cl->map);
	return 0;
}
