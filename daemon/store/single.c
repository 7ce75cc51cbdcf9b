/*
 * single.c - one master for every key (single.h): where it is, the
 * tenure its command link joins, and in Sentinel mode the lease.
 *
 * The command link's handshake (node.c's library and INFO, then here): a
 * replication id this broker saw in an earlier tenure is a stale old
 * master that woke up, refused; otherwise the link joins the master's
 * tenure (tenure.lua) before it is up.  A connect in Sentinel mode first
 * asks sentinel.c where the master is (INFO then checks the role, as a
 * sentinel's answer may be stale), and the tenure is joined once the
 * lease holds (lease.c): grants, renewals, hand-offs and take-overs go
 * out only while it does.
 */
#include "single.h"
#include "lease.h"
#include "log.h"
#include "resp.h"
#include "sentinel.h"
#include "sub.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replication ids of earlier tenures remembered: a master showing one is
 * a stale old master that woke up (ids are never reused). */
#define LEFT_MAX 8

struct single {
	struct node_env *env;
	const struct store_keys *keys;
	const struct store_hooks *hooks;
	struct node *one;
	struct sub *sub;
	struct sentinel *sent;		/* Sentinel mode; NULL: one address */
	struct lease *lease;		/* Sentinel mode: grants and renewals
					 * only while it holds (lease.h) */
	int serving;			/* Sentinel mode: the up hook told
					 * (link up and lease held) */
	int tenure_joined;		/* tenure.lua answered on this context
					 * (Sentinel mode: sent once the lease
					 * holds, not in the handshake) */
	int tenure_asked;		/* ... sent, no answer yet */
	char replid[64];		/* the master's replication id now */
	char left[LEFT_MAX][64];	/* ids of tenures this broker left */
	unsigned nleft;
};

static void serving(struct single *s);

/* --- where the master is -------------------------------------------- */

/* Sentinel mode: the sentinels named a master (or none, why says). */
static void
resolved(void *arg, const struct addr *master, const char *why)
{
	struct link *l = arg;

	if (l->env->closing)
		return;
	if (master == NULL) {
		link_failed(l, why != NULL ? why : "the sentinels named no master");
		return;
	}
	link_connect(l, master->host, master->port, 0);
}

/*
 * Where the master is, for its command link and the subscriber.  In
 * Sentinel mode every connect asks the sentinels first: after any loss
 * the master may have moved (the address is checked by the handshake's
 * INFO, as a sentinel's answer may be stale).
 */
static void
locate(void *arg, struct link *l)
{
	struct single *s = arg;

	if (s->sent == NULL) {
		link_connect(l, s->one->host, s->one->port, s->one->is_unix);
		return;
	}
	link_locating(l);
	sentinel_resolve(s->sent, resolved, l);
}

/* The sentinels say the master moved: follow it now. */
static void
switched(void *arg, const struct addr *from, const struct addr *to)
{
	struct single *s = arg;
	struct link *one = &s->one->link, *sub = sub_link(s->sub);
	char a[ADDR_HOST_LEN + 16], b[ADDR_HOST_LEN + 16];

	snprintf(b, sizeof b, strchr(to->host, ':') ? "[%s]:%d" : "%s:%d",
	    to->host, to->port);
	if (from != NULL)
		snprintf(a, sizeof a, strchr(from->host, ':') ? "[%s]:%d" :
		    "%s:%d", from->host, from->port);
	else
		snprintf(a, sizeof a, "-");
	log_warn("Redis master switched from %s to %s", a, b);
	if (one->ac != NULL && strcmp(one->addrstr, b) != 0)
		link_kill(one, "the master moved");
	if (sub->ac != NULL && strcmp(sub->addrstr, b) != 0)
		link_kill(sub, "the master moved");
	/* one waiting out a backoff (it kept failing on the dead master)
	 * must not sleep through the news */
	link_retry_now(one);
	link_retry_now(sub);
}

/* --- the tenure ------------------------------------------------------- */

/* Sentinel mode: whether the lease allows grants and renewals (always,
 * with a fixed address). */
static int
lease_ok(const struct single *s)
{
	return s->lease == NULL || (lease_held(s->lease) && s->tenure_joined);
}

/*
 * The tenure is joined (tenure.lua ran): the link is up (or, in Sentinel
 * mode, the store may serve).  A new replication id means a failover or a
 * Redis back without its data: the lock table reclaims its locks
 * (reassert.lua) before new grants.
 */
static void
tenure_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct single *s = privdata;
	struct node *n = s->one;
	redisReply *r = reply;
	long long started, delay;

	if (!link_current(&n->link, ac) || r == NULL)
		return;
	s->tenure_asked = 0;
	if (r->type == REDIS_REPLY_ERROR) {
		link_refuse(&n->link, r->str);
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    !resp_is_int(r->element[0]) || !resp_is_int(r->element[1])) {
		link_refuse(&n->link, "unexpected reply from tenure.lua");
		return;
	}
	started = r->element[0]->integer;
	delay = r->element[1]->integer;
	if (strcmp(n->replid, s->replid) != 0) {
		if (s->replid[0] != '\0')
			log_warn("Redis %s is a new master tenure (replication id "
			    "%.8s, was %.8s): reclaiming held locks%s; free keys "
			    "wait %lld ms", n->link.addrstr, n->replid, s->replid,
			    started ? ", counter raised" : "", delay);
		else if (started)
			log_info("Redis %s: tenure %.8s started", n->link.addrstr,
			    n->replid);
		s->env->tenures++;
		if (s->replid[0] != '\0') {
			memcpy(s->left[s->nleft % LEFT_MAX], s->replid,
			    sizeof s->replid);
			s->nleft++;
		}
		memcpy(s->replid, n->replid, sizeof s->replid);
	}
	s->tenure_joined = 1;
	if (s->lease != NULL)
		serving(s);	/* joined after the handshake */
	else
		link_hello_done(&n->link);
}

static int
tenure_send(struct single *s)
{
	const struct store_keys *k = s->keys;
	struct node *n = s->one;
	const char *call, *name;

	node_script(n, SCRIPT_TENURE, &call, &name);
	if (link_sendf(&n->link, tenure_reply, s,
	    "%s %s 3 %s %s %s %s %s %ld", call, name,
	    k->fence, k->tenure, k->delay, n->replid, s->replid,
	    s->env->lock_delay_ms) != 0) {
		link_kill(&n->link, "cannot send tenure.lua");
		return -1;
	}
	s->tenure_asked = 1;
	return 0;
}

/*
 * Sentinel mode joins a master's tenure only once the lease holds on it:
 * the lock delay a new tenure starts (tenure.lua) must count from when the
 * brokers can act on it and reclaim their locks, not from the handshake,
 * which comes before the sentinels agree on the new master (a second or
 * two after a failover).
 */
static void
join_tenure(struct single *s)
{
	struct node *n = s->one;

	if (n->link.ac != NULL && n->link.state == LINK_UP &&
	    !s->tenure_joined && !s->tenure_asked)
		tenure_send(s);
}

/* INFO said it is a master: is it of a tenure this broker left? */
static void
one_info(struct node *n, int changed)
{
	struct single *s = n->owner;
	char why[80];

	(void)changed;
	for (unsigned i = 0; i < s->nleft && i < LEFT_MAX; i++) {
		if (n->replid[0] != '\0' && strcmp(s->left[i], n->replid) == 0) {
			/* an old master that woke up still says master */
			snprintf(why, sizeof why, "stale master: replication id "
			    "%.8s belongs to an earlier tenure", n->replid);
			link_refuse(&n->link, why);
			return;
		}
	}
	if (s->lease != NULL) {
		/* the tenure is joined once the lease holds (above) */
		link_hello_done(&n->link);
		return;
	}
	if (tenure_send(s) != 0)
		return;
	/* tenure.lua's reply awaited before INFO's is counted: not up yet */
	link_expect(&n->link);
	link_hello_done(&n->link);
}

/*
 * Sentinel mode: the command link came up or went, or the lease changed:
 * tell the hooks when the store starts or stops serving.
 */
static void
serving(struct single *s)
{
	const struct store_hooks *h = s->hooks;
	int now;

	if (s->lease == NULL)
		return;
	if (node_usable(s->one) && lease_held(s->lease))
		join_tenure(s);		/* once per context */
	now = node_usable(s->one) && lease_ok(s);
	if (now == s->serving)
		return;
	s->serving = now;
	if (now && h->up != NULL)
		h->up(h->arg);
	else if (!now && h->down != NULL)
		h->down(h->arg);
}

static void
lease_changed(void *arg, int held)
{
	(void)held;
	serving(arg);
}

/* --- the command link ------------------------------------------------- */

static void
one_locate(void *owner, struct link *l)
{
	struct node *n = owner;

	locate(n->owner, l);
}

static void
one_hello(void *owner, struct link *l)
{
	struct node *n = owner;
	struct single *s = n->owner;

	(void)l;
	s->tenure_joined = s->tenure_asked = 0;
	node_hello(n, one_info);
}

static void
one_up(void *owner, struct link *l)
{
	struct node *n = owner;
	struct single *s = n->owner;
	const struct store_hooks *h = s->hooks;

	node_up(n);
	if (s->lease != NULL) {
		/* up for grants once the sentinels vouch for it */
		struct addr a;
		char err[160];

		if (addr_parse_endpoint(l->addrstr, &a, err, sizeof err) == 0)
			lease_follow(s->lease, &a);
		serving(s);
	} else if (h->up) {
		h->up(h->arg);
	}
}

static void
one_down(void *owner, struct link *l, int was_up)
{
	struct node *n = owner;
	struct single *s = n->owner;
	const struct store_hooks *h = s->hooks;
	struct link *sub = sub_link(s->sub);

	(void)l;
	node_down(n);
	if (!was_up) {
		/* an attempt failed: what waited for it hears so now */
		if (h->down)
			h->down(h->arg);
		return;
	}
	s->env->reconnects++;
	if (s->lease != NULL) {
		lease_follow(s->lease, NULL);
		serving(s);
	} else if (h->down) {
		h->down(h->arg);
	}
	/* A subscriber on a Redis we can no longer reach is as suspect;
	 * resubscribing later retries every waiter. */
	if (sub->ac != NULL)
		link_kill(sub, "command connection lost");
}

static const struct link_ops one_ops = {
	.locate = one_locate, .hello = one_hello, .up = one_up,
	.down = one_down,
};

/* --- the topology ------------------------------------------------------ */

static void
single_start(void *t)
{
	struct single *s = t;

	link_start(&s->one->link);
	link_start(sub_link(s->sub));
}

static void
single_free(void *t)
{
	struct single *s = t;

	if (s == NULL)
		return;
	sentinel_free(s->sent);		/* resolves answer, ignored */
	s->sent = NULL;
	lease_free(s->lease);
	s->lease = NULL;
	if (s->one != NULL)
		node_free(s->one);
	s->one = NULL;
	sub_free(s->sub);
	free(s);
}

static struct node *
single_node_of(void *t, int slot)
{
	struct single *s = t;

	(void)slot;
	return s->one;
}

/* A MOVED or ASK from a Redis not in a cluster is an error reply. */
static struct node *
single_moved(void *t, int slot, const char *host, int port)
{
	(void)t;
	(void)slot;
	(void)host;
	(void)port;
	return NULL;
}

static struct node *
single_asked(void *t, const char *host, int port)
{
	return single_moved(t, -1, host, port);
}

static void
single_refresh(void *t)
{
	(void)t;
}

static int
single_may_grant(void *t)
{
	return lease_ok(t);
}

static int
single_up(void *t)
{
	struct single *s = t;

	return node_usable(s->one);
}

static int
single_coming(void *t, int slot)
{
	struct single *s = t;

	(void)slot;
	return node_coming(s->one) || (s->lease != NULL &&
	    node_usable(s->one) && !s->tenure_joined);
}

static void
single_each(void *t, int all, void (*fn)(void *arg, struct node *n),
    void *arg)
{
	struct single *s = t;

	(void)all;
	fn(arg, s->one);
}

static void
single_kick(void *t)
{
	struct single *s = t;

	link_retry_now(&s->one->link);
}

static long long
single_lease_ms(void *t)
{
	struct single *s = t;

	return s->lease == NULL ? -1 : (long long)lease_left_ms(s->lease);
}

static uint64_t
single_map_changes(void *t)
{
	(void)t;
	return 0;
}

static int
single_subscribed(void *t)
{
	struct single *s = t;

	return link_usable(sub_link(s->sub));
}

static const struct topo_ops single_ops = {
	.start = single_start, .free = single_free,
	.node_of = single_node_of, .moved = single_moved,
	.asked = single_asked, .refresh = single_refresh,
	.may_grant = single_may_grant, .up = single_up,
	.coming = single_coming, .each = single_each,
	.kick = single_kick, .lease_ms = single_lease_ms,
	.map_changes = single_map_changes, .subscribed = single_subscribed,
};

/* Sentinel mode: sentinel.c says where the one master is, lease.c for
 * how long it surely stays so. */
static int
sentinel_start(struct single *s, const struct store_cfg *cfg)
{
	struct sentinel_cfg sc = {
		.sentinels = cfg->sentinels,
		.master_name = cfg->master_name,
		.password = cfg->sentinel_password,
		.user = cfg->sentinel_user,
		/* "a few hundred ms" per sentinel (sentinel-clients) */
		.timeout_ms = cfg->timeout_ms < 500 ? cfg->timeout_ms : 500,
		.resolver = s->env->link.resolver,
	};
	struct lease_cfg lc = {
		.sentinels = cfg->sentinels,
		.master_name = cfg->master_name,
		.password = cfg->sentinel_password,
		.user = cfg->sentinel_user,
		.timeout_ms = sc.timeout_ms,
		.max_ms = cfg->lease_ms,
		.resolver = sc.resolver,
	};
	struct sentinel_hooks sh = { switched, s };
	struct lease_hooks lh = { lease_changed, s };
	char err[256];

	s->sent = sentinel_new(s->env->link.base, &sc, &sh, err, sizeof err);
	if (s->sent == NULL) {
		log_error("Sentinel mode: %s", err);
		return -1;
	}
	s->lease = lease_new(s->env->link.base, &lc, &lh, err, sizeof err);
	if (s->lease == NULL) {
		log_error("Sentinel mode: %s", err);
		return -1;
	}
	s->one = node_new(s->env, "", 0, 0, &one_ops, s);
	return 0;
}

/* The endpoint, by the parser config.c checked it with (addr.h). */
static int
parse_addr(struct single *s, const char *addr)
{
	struct addr a;
	char err[160];

	if (addr_parse_endpoint(addr, &a, err, sizeof err) != 0) {
		log_error("Redis address: %s", err);
		return -1;
	}
	s->one = node_new(s->env, a.is_unix ? a.path : a.host, a.port,
	    a.is_unix, &one_ops, s);
	return 0;
}

int
single_new(struct node_env *env, const struct store_keys *k,
    const struct store_hooks *h, const struct store_cfg *cfg,
    struct topo *tp)
{
	struct single *s = xcalloc(1, sizeof *s);
	int rc;

	s->env = env;
	s->keys = k;
	s->hooks = h;
	s->sub = sub_new(&env->link, k, h, locate, s);
	rc = cfg->sentinels != NULL && cfg->sentinels[0] != '\0' ?
	    sentinel_start(s, cfg) : parse_addr(s, cfg->addr);
	if (rc != 0) {
		single_free(s);
		return -1;
	}
	*tp = (struct topo){ &single_ops, s, 0 };
	return 0;
}
