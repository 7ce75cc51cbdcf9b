/*
 * announce.c - this broker in <prefix>:brokers (announce.lua, every
 * second), and what its answer brings back: whether a broker without
 * listen marks listens, and a sample of the master's clock.
 *
 * The clock sample is what a remote grant's age is measured with
 * (store_redis_now): the grant message carries its time by the master's
 * clock, and the broker's own clock may be set apart from it by any
 * amount.  Counted from the moment the announce call was made (before
 * the master read its clock), the age is never under the true one, give
 * or take the clocks' drift over a few seconds.  A sample is the current
 * master's only (a node's own), and none is older than
 * CLOCK_SAMPLE_MAX_MS: without one, a remote grant is not trusted.
 */
#include "calls_int.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

#define CLOCK_SAMPLE_MAX_MS 5000	/* five announce periods */

/* The announce's answer: lean batches may go on the link it came on (1:
 * they publish every release meanwhile, <prefix>:listenall); the master's
 * clock then (redis_ms) and this broker's when the call was made. */
static void
announced(void *arg, int ok, int listenall, long long redis_ms,
    int64_t made_ms)
{
	struct node *n = arg;

	(void)listenall;
	if (!ok)
		return;
	n->announced = 1;	/* its link answered: n lives */
	if (redis_ms > 0 && made_ms > n->clock_made_ms) {
		n->clock_redis_ms = redis_ms;
		n->clock_made_ms = made_ms;
	}
}

/*
 * announce.lua, every second (store.c), single and Sentinel mode:
 * this broker's member of <prefix>:brokers ("<broker-id> <version>
 * marks,grants": its waiters and watchers set listen marks, and it takes
 * remote grants), which sets <prefix>:listenall while a broker without
 * marks listens (counted by the release channel's subscribers, this
 * broker's own subscriber when it is subscribed).  A link's lean batches
 * wait for its first answer, so a broker never sends releases that
 * publish only to marks before it has looked for such a broker.
 */
int
calls_announce(struct store *st)
{
	char member[STORE_ID_LEN + 64], ttl[24];
	int ml = snprintf(member, sizeof member, "%.*s %s marks,grants",
	    STORE_ID_LEN, st->keys.idsp, LOCKBROKER_VERSION);
	int tl = snprintf(ttl, sizeof ttl, "%d", ANNOUNCE_TTL_MS);
	struct route r;
	struct piece p[6];
	int subbed;

	calls_route_slot(st, -1, &r);
	if (st->topo.sharded || st->topo.ops->subscribed == NULL ||
	    r.node == NULL || ml < 0 || (size_t)ml >= sizeof member)
		return -1;
	subbed = st->topo.ops->subscribed(st->topo.t);
	p[0] = (struct piece){ st->keys.brokers, strlen(st->keys.brokers),
	    NULL, 0 };
	p[1] = (struct piece){ st->keys.listenall, strlen(st->keys.listenall),
	    NULL, 0 };
	p[2] = (struct piece){ member, (size_t)ml, NULL, 0 };
	p[3] = (struct piece){ ttl, (size_t)tl, NULL, 0 };
	p[4] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    NULL, 0 };
	p[5] = (struct piece){ subbed ? "1" : "0", 1, NULL, 0 };
	return calls_script(st, &r, decode_announce, SCRIPT_ANNOUNCE, 2, p, 6,
	    (union call_fn){ .announce = announced }, r.node);
}

int
store_redis_now(struct store *st, int64_t *ms)
{
	struct route r;
	int64_t now = now_ms();

	calls_route_slot(st, -1, &r);
	if (st->topo.sharded || r.node == NULL || r.node->clock_made_ms == 0 ||
	    now - r.node->clock_made_ms > CLOCK_SAMPLE_MAX_MS)
		return -1;
	*ms = r.node->clock_redis_ms + (now - r.node->clock_made_ms);
	return 0;
}
