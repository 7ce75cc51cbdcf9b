/*
 * store.c - the broker's Redis (store.h): made and freed here, asked how
 * it stands, counted.  The script calls are calls.c's; where each key's
 * master is, the topology's (topo.h: single.c or cluster.c).
 *
 * Two timers watch every master: the watchdog (its oldest answer is
 * overdue: Redis stopped answering) and the role check (a master demoted
 * while connected must not take grants), which also sends this broker's
 * announcement (announce.lua: lean releases, remote grants).
 */
#include "store_int.h"
#include "cluster.h"
#include "log.h"
#include "resolve.h"
#include "single.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define ROLE_CHECK_MS 1000		/* is the master still one? */

static void
check_role(void *arg, struct node *n)
{
	(void)arg;
	node_check_role(n);
}

static void
role_cb(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;

	(void)fd;
	(void)what;
	st->topo.ops->each(st->topo.t, 1, check_role, NULL);
	if (!st->topo.sharded)
		(void)calls_announce(st);	/* as often: see its TTL */
}

static void
stalled(void *arg, struct node *n)
{
	node_stalled(n, *(int64_t *)arg);
}

static void
watch(void *arg, struct node *n)
{
	node_watch(n, *(long *)arg);
}

/* A command link is up: announce this broker there at once, not at the
 * next role check (its lean batches wait for the answer). */
static void
announce_at_up(void *arg, struct node *n)
{
	(void)n;
	(void)calls_announce(arg);
}

/* The oldest command in flight waited too long: Redis is not answering. */
static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;
	int64_t now = now_ms(), late = now - st->watchdog_ms;

	(void)fd;
	(void)what;
	if (late > st->cfg.timeout_ms / 2) {
		/*
		 * This tick comes late: the broker itself did not run (it was
		 * stopped, or starved), and the replies it waited for may be
		 * sitting unread in its sockets.  That time is ours, not
		 * Redis's: start the clocks again rather than drop connections
		 * (and the news their replies carry, e.g. that a lock was
		 * lost meanwhile).
		 */
		log_warn("event loop stalled for %lld ms: Redis answers are "
		    "timed from now", (long long)late);
		st->topo.ops->each(st->topo.t, 1, stalled, &now);
		st->watchdog_ms = now;
		return;
	}
	st->watchdog_ms = now;
	st->topo.ops->each(st->topo.t, 1, watch, &st->cfg.timeout_ms);
}

struct store *
store_new(struct event_base *base, const struct store_cfg *cfg,
    const struct store_hooks *hooks)
{
	struct store *st = xcalloc(1, sizeof *st);
	int cluster = cfg->cluster != NULL && cfg->cluster[0] != '\0';
	struct timeval tick;
	char err[256];
	int rc;

	st->base = base;
	st->addr = xstrndup(cfg->addr, strlen(cfg->addr));
	st->password = xstrndup(cfg->password, strlen(cfg->password));
	st->user = xstrndup(cfg->user, strlen(cfg->user));
	st->cfg = *cfg;
	st->cfg.addr = st->addr;
	st->cfg.password = st->password;
	st->cfg.user = st->user;
	st->cfg.prefix = NULL;
	st->cfg.nameserver = NULL;	/* not kept */
	keys_init(&st->keys, cfg->prefix, cfg->id, cluster);
	st->resolver = resolver_new(base, cfg->nameserver != NULL ?
	    cfg->nameserver : "", err, sizeof err);
	if (st->resolver == NULL) {
		log_error("%s", err);
		store_free(st);
		return NULL;
	}
	st->env = (struct node_env){
		.link = { .base = base, .password = st->password,
		    .user = st->user, .label = st->addr,
		    .timeout_ms = cfg->timeout_ms, .resolver = st->resolver,
		    .resolve_ms = cfg->resolve_ms },
		.acks = cfg->acks, .ack_timeout_ms = cfg->ack_timeout_ms,
		.lock_delay_ms = cfg->lock_delay_ms,
		.batching = !cluster, .wait_link = cluster,
		.lean = cluster ? NULL : &st->keys.lean,
		.up = cluster ? NULL : announce_at_up, .up_arg = st,
	};
	st->hooks = *hooks;
	st->watchdog_ev = event_new(base, -1, EV_PERSIST, watchdog_cb, st);
	st->role_ev = event_new(base, -1, EV_PERSIST, role_cb, st);
	if (st->watchdog_ev == NULL || st->role_ev == NULL)
		fatalx("cannot create Redis timers");
	rc = cluster ? cluster_new(&st->env, &st->keys, &st->hooks,
	    cfg->cluster, &st->topo) : single_new(&st->env, &st->keys,
	    &st->hooks, &st->cfg, &st->topo);
	st->cfg.sentinels = st->cfg.master_name = NULL;	/* not kept */
	st->cfg.sentinel_password = st->cfg.sentinel_user = NULL;
	st->cfg.cluster = NULL;
	if (rc != 0) {
		store_free(st);
		return NULL;
	}
	tick.tv_sec = cfg->timeout_ms / 4 / 1000;
	tick.tv_usec = (cfg->timeout_ms / 4 % 1000) * 1000;
	event_add(st->watchdog_ev, &tick);
	st->watchdog_ms = now_ms();
	tick.tv_sec = ROLE_CHECK_MS / 1000;
	tick.tv_usec = (ROLE_CHECK_MS % 1000) * 1000;
	event_add(st->role_ev, &tick);
	st->topo.ops->start(st->topo.t);
	return st;
}

void
store_free(struct store *st)
{
	if (st == NULL)
		return;
	st->env.link.closing = 1;
	st->hooks.down = NULL;	/* shutting down: nobody to tell */
	st->hooks.up = NULL;
	calls_drop(st);
	if (st->topo.ops != NULL)
		st->topo.ops->free(st->topo.t);
	st->topo.ops = NULL;
	if (st->watchdog_ev)
		event_free(st->watchdog_ev);
	if (st->role_ev)
		event_free(st->role_ev);
	keys_free(&st->keys);
	resolver_free(st->resolver);	/* after every link let go of it */
	free(st->addr);
	free(st->password);
	free(st->user);
	free(st);
}

void
store_kick(struct store *st)
{
	/* shutdown has only a short budget */
	st->topo.ops->kick(st->topo.t);
}

int
store_link_up(const struct store *st)
{
	return st->topo.ops->up(st->topo.t);
}

int
store_is_up(const struct store *st)
{
	return store_link_up(st) && st->topo.ops->may_grant(st->topo.t);
}

int
store_key_up(const struct store *st, const char *key, size_t keylen)
{
	const struct topo *tp = &st->topo;

	return tp->ops->may_grant(tp->t) && node_usable(tp->ops->node_of(tp->t,
	    calls_key_slot(st, key, keylen)));
}

long
store_key_coming(const struct store *st, const char *key, size_t keylen)
{
	const struct topo *tp = &st->topo;

	return !store_key_up(st, key, keylen) && tp->ops->coming(tp->t,
	    calls_key_slot(st, key, keylen)) ? st->cfg.timeout_ms : 0;
}

long long
store_lease_ms(const struct store *st)
{
	return st->topo.ops->lease_ms(st->topo.t);
}

static void
add_load(void *arg, struct node *n)
{
	*(size_t *)arg += n->inflight + n->queued;
}

size_t
store_inflight(const struct store *st)
{
	size_t sum = calls_retrying(st);

	st->topo.ops->each(st->topo.t, 1, add_load, &sum);
	return sum;
}

uint64_t
store_reconnects(const struct store *st)
{
	return st->env.reconnects;
}

/* The masters up: "-" none, else comma-separated, cut short with "..."
 * past the buffer. */
struct master_list {
	char buf[512];			/* one STATS line at a time */
	size_t off;
	int full;
};

static void
add_master(void *arg, struct node *n)
{
	struct master_list *ml = arg;
	size_t need = strlen(n->link.addrstr) + 1;

	if (ml->full || !node_usable(n))
		return;
	if (ml->off + need + 4 >= sizeof ml->buf) {
		memcpy(ml->buf + ml->off, ",...", 5);
		ml->full = 1;
		return;
	}
	ml->off += (size_t)snprintf(ml->buf + ml->off, sizeof ml->buf -
	    ml->off, "%s%s", ml->off ? "," : "", n->link.addrstr);
}

const char *
store_master(const struct store *st)
{
	static struct master_list ml;

	ml.buf[0] = '\0';
	ml.off = 0;
	ml.full = 0;
	st->topo.ops->each(st->topo.t, 0, add_master, &ml);
	return ml.off ? ml.buf : "-";
}

uint64_t
store_tenures(const struct store *st)
{
	return st->env.tenures;
}

uint64_t
store_acks_missed(const struct store *st)
{
	return st->env.acks_missed;
}

static void
count_up(void *arg, struct node *n)
{
	if (node_usable(n))
		(*(unsigned *)arg)++;
}

unsigned
store_nodes_up(const struct store *st)
{
	unsigned up = 0;

	st->topo.ops->each(st->topo.t, 0, count_up, &up);
	return up;
}

uint64_t
store_redirects(const struct store *st)
{
	return st->env.redirects;
}

uint64_t
store_map_changes(const struct store *st)
{
	return st->topo.ops->map_changes(st->topo.t);
}

struct each_node {
	void (*fn)(void *arg, const char *addr, int up, size_t inflight,
	    uint64_t redirects, const struct histo *rtt);
	void *arg;
};

static void
visit(void *arg, struct node *n)
{
	struct each_node *e = arg;

	e->fn(e->arg, n->link.addrstr, node_usable(n), n->inflight + n->queued,
	    n->redirects, &n->rtt);
}

void
store_each_node(const struct store *st, void (*fn)(void *arg,
    const char *addr, int up, size_t inflight, uint64_t redirects,
    const struct histo *rtt), void *arg)
{
	struct each_node e = { fn, arg };

	st->topo.ops->each(st->topo.t, 0, visit, &e);
}
