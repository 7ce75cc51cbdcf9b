/*
 * test_cluster_map.c - a Redis Cluster's slot map as cluster.c reads it,
 * from hand-built CLUSTER SLOTS replies handed to its map link (a fake
 * link: fake_link.c), asked through the topology's ops (topo.h).
 *
 * Which master serves which slot (an empty or "?" host is the node asked,
 * replicas are only addresses to try), a malformed or empty map changing
 * nothing, a map read again unchanged not counted, a master that left the
 * map no longer served (its link let go), MOVED patching one slot and ASK
 * patching none, and the lock table told to reroute only when a master is
 * up.  (The masters' shard subscribers are made too; with the event loop
 * never run, their connects to 127.0.0.1 go nowhere.)
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cluster.h"
#include "fake_link.h"
#include "log.h"
#include "slot.h"
#include "suites.h"

/* [host, port, id]: a node as CLUSTER SLOTS names it. */
static redisReply *
r_node(const char *host, long long port)
{
	return reply_arr(3, reply_str(host), reply_int(port),
	    reply_str("0123456789abcdef"));
}

/* [lo, hi, master]: an entry without replicas. */
static redisReply *
r_entry(long long lo, long long hi, const char *host, long long port)
{
	return reply_arr(3, reply_int(lo), reply_int(hi), r_node(host, port));
}

/* --- a cluster and its map link ------------------------------------------ */

static struct event_base *base;
static struct node_env env;
static struct store_keys keys;
static int ups, reroutes;

static void
on_up(void *arg)
{
	(void)arg;
	ups++;
}

static void
on_rerouted(void *arg)
{
	(void)arg;
	reroutes++;
}

static struct store_hooks hooks = { .up = on_up, .rerouted = on_rerouted };
static struct topo tp;

/* A cluster seeded with 127.0.0.2:30001, its map link up. */
static struct link *
cluster_up(void)
{
	struct link *map;

	log_set_level(LL_ERROR);
	fake_link_reset();
	ups = reroutes = 0;
	base = event_base_new();
	env = (struct node_env){
		.link = { .base = base, .password = "", .user = "",
		    .label = "test", .timeout_ms = 1000 },
		.wait_link = 1,
	};
	keys_init(&keys, "lbt", NULL, 1);
	ck_assert_int_eq(cluster_new(&env, &keys, &hooks, "127.0.0.2:30001",
	    &tp), 0);
	map = fake_link_named("map");
	ck_assert_ptr_nonnull(map);
	ck_assert_str_eq(map->addrstr, "127.0.0.2:30001");
	fake_link_up(map);
	return map;
}

static void
cluster_done(void)
{
	tp.ops->free(tp.t);
	keys_free(&keys);
	fake_link_reset();
	event_base_free(base);
}

/* The CLUSTER SLOTS the map link sent, answered with r (then freed). */
static void
answer_map(redisReply *r)
{
	struct fake_sent *s;

	/* other links' commands (the masters' handshakes) are not ours */
	for (size_t i = 0; (s = fake_sent_peek(i)) != NULL; i++)
		if (strcmp(s->text, "CLUSTER SLOTS") == 0)
			break;
	ck_assert_ptr_nonnull(s);
	while (fake_sent_peek(0) != s)
		fake_sent_free(fake_sent_pop());
	fake_reply(fake_sent_pop(), r);
	reply_free(r);
}

/* The map is asked for again (as when the map link comes up anew). */
static void
map_again(struct link *map)
{
	map->ops->up(map->owner, map);
}

/* Three masters: 0-5460 at 127.0.0.1:1 (a replica at 127.0.0.9:4),
 * 5461-10922 at 127.0.0.1:2, 10923-16383 at the node asked, port 3. */
static redisReply *
three_masters(void)
{
	return reply_arr(3,
	    reply_arr(4, reply_int(0), reply_int(5460),
		r_node("127.0.0.1", 1), r_node("127.0.0.9", 4)),
	    r_entry(5461, 10922, "127.0.0.1", 2),
	    r_entry(10923, 16383, "", 3));
}

static void
count_node(void *arg, struct node *n)
{
	(void)n;
	(*(int *)arg)++;
}

static int
serving(int all)
{
	int count = 0;

	tp.ops->each(tp.t, all, count_node, &count);
	return count;
}

static void
assert_at(int slot, const char *host, int port)
{
	struct node *n = tp.ops->node_of(tp.t, slot);

	ck_assert_ptr_nonnull(n);
	ck_assert_str_eq(n->host, host);
	ck_assert_int_eq(n->port, port);
}

/* --- the tests ----------------------------------------------------------- */

START_TEST(test_map_read)
{
	cluster_up();
	ck_assert_ptr_null(tp.ops->node_of(tp.t, 0));	/* no map yet */
	ck_assert_int_eq(tp.ops->up(tp.t), 0);
	answer_map(three_masters());
	assert_at(0, "127.0.0.1", 1);
	assert_at(5460, "127.0.0.1", 1);
	assert_at(5461, "127.0.0.1", 2);
	assert_at(10922, "127.0.0.1", 2);
	assert_at(10923, "127.0.0.2", 3);	/* "": the node asked */
	assert_at(16383, "127.0.0.2", 3);
	ck_assert_ptr_null(tp.ops->node_of(tp.t, -1));
	ck_assert_ptr_null(tp.ops->node_of(tp.t, SLOT_COUNT));
	ck_assert_int_eq(serving(0), 3);
	ck_assert_int_eq(serving(1), 3);	/* the replica is no node */
	ck_assert_uint_eq(tp.ops->map_changes(tp.t), 1);
	/* every master's command link is connecting */
	ck_assert_str_eq(tp.ops->node_of(tp.t, 0)->link.addrstr,
	    "127.0.0.1:1");
	ck_assert_int_eq(tp.ops->node_of(tp.t, 0)->link.state,
	    LINK_CONNECTING);
	ck_assert_int_eq(reroutes, 0);		/* no master up yet */
	cluster_done();
}
END_TEST

/* "?" names the node asked too. */
START_TEST(test_map_question_mark_host)
{
	cluster_up();
	answer_map(reply_arr(1, r_entry(0, 16383, "?", 7)));
	assert_at(8000, "127.0.0.2", 7);
	cluster_done();
}
END_TEST

/* One malformed entry: the map in use is kept whole. */
START_TEST(test_map_malformed_changes_nothing)
{
	static const struct { long long lo, hi, port; } bad[] = {
		{ 0, 16383, 70000 },	/* port out of range */
		{ 0, 16384, 1 },	/* past the last slot */
		{ 5, 4, 1 },		/* upside down */
		{ -1, 10, 1 },
	};
	struct link *map = cluster_up();

	answer_map(three_masters());
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		map_again(map);
		answer_map(reply_arr(2,
		    r_entry(0, 100, "127.0.0.1", 5),
		    r_entry(bad[i].lo, bad[i].hi, "127.0.0.1", bad[i].port)));
		assert_at(0, "127.0.0.1", 1);
		assert_at(16383, "127.0.0.2", 3);
		ck_assert_uint_eq(tp.ops->map_changes(tp.t), 1);
	}
	/* not an array at all */
	map_again(map);
	answer_map(reply_arr(1, reply_int(3)));
	assert_at(0, "127.0.0.1", 1);
	cluster_done();
}
END_TEST

/* No slots known (a node not in a cluster yet): ask another; no map. */
START_TEST(test_map_empty_asks_another)
{
	cluster_up();
	answer_map(reply_arr(0));
	ck_assert_int_eq(fake_kills, 1);
	ck_assert_str_eq(fake_kill_why, "no slots known");
	ck_assert_uint_eq(tp.ops->map_changes(tp.t), 0);
	ck_assert_ptr_null(tp.ops->node_of(tp.t, 0));
	cluster_done();
}
END_TEST

/* The same map again is no change; a slot range moving is one, and the
 * master left with none is not served, its link let go. */
START_TEST(test_map_changes_counted)
{
	struct link *map = cluster_up();
	struct node *gone;

	answer_map(three_masters());
	gone = tp.ops->node_of(tp.t, 0);
	map_again(map);
	answer_map(three_masters());
	ck_assert_uint_eq(tp.ops->map_changes(tp.t), 1);
	ck_assert_ptr_null(gone->link.ops->idle(gone, &gone->link));
	map_again(map);
	answer_map(reply_arr(2,
	    r_entry(0, 10922, "127.0.0.1", 2),
	    r_entry(10923, 16383, "", 3)));
	ck_assert_uint_eq(tp.ops->map_changes(tp.t), 2);
	assert_at(0, "127.0.0.1", 2);
	ck_assert_int_eq(serving(0), 2);
	ck_assert_int_eq(serving(1), 3);
	ck_assert_str_eq(gone->link.ops->idle(gone, &gone->link),
	    "it serves no slots");
	cluster_done();
}
END_TEST

/* MOVED patches its slot at once (to a master new or known); ASK names a
 * node for one call and patches nothing. */
START_TEST(test_moved_and_asked)
{
	struct node *n;

	cluster_up();
	answer_map(three_masters());
	n = tp.ops->moved(tp.t, 100, "127.0.0.1", 2);
	ck_assert_ptr_eq(n, tp.ops->node_of(tp.t, 5461));
	assert_at(100, "127.0.0.1", 2);
	assert_at(99, "127.0.0.1", 1);
	n = tp.ops->moved(tp.t, 101, "127.0.0.1", 9);
	assert_at(101, "127.0.0.1", 9);
	ck_assert_int_eq(serving(0), 4);
	n = tp.ops->asked(tp.t, "127.0.0.1", 8);
	ck_assert_ptr_nonnull(n);
	ck_assert_int_eq(n->port, 8);
	assert_at(102, "127.0.0.1", 1);
	ck_assert_int_eq(serving(0), 4);	/* it serves no slot */
	ck_assert_int_eq(serving(1), 5);
	cluster_done();
}
END_TEST

/* A changed map reroutes the lock table, once a master is up. */
START_TEST(test_rerouted_once_up)
{
	struct link *map = cluster_up();
	struct node *n;

	answer_map(three_masters());
	ck_assert_int_eq(reroutes, 0);
	n = tp.ops->node_of(tp.t, 0);
	fake_link_up(&n->link);
	ck_assert_int_eq(ups, 1);
	ck_assert_int_eq(tp.ops->up(tp.t), 1);
	map_again(map);
	answer_map(reply_arr(1, r_entry(0, 16383, "127.0.0.1", 1)));
	ck_assert_int_eq(reroutes, 1);
	cluster_done();
}
END_TEST

Suite *
cluster_map_suite(void)
{
	Suite *s = suite_create("cluster_map");
	TCase *tc = tcase_create("map");

	tcase_add_test(tc, test_map_read);
	tcase_add_test(tc, test_map_question_mark_host);
	tcase_add_test(tc, test_map_malformed_changes_nothing);
	tcase_add_test(tc, test_map_empty_asks_another);
	tcase_add_test(tc, test_map_changes_counted);
	tcase_add_test(tc, test_moved_and_asked);
	tcase_add_test(tc, test_rerouted_once_up);
	suite_add_tcase(s, tc);
	return s;
}
