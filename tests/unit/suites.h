/*
 * suites.h - the Check suites linked into build/test_unit.
 *
 * Each test_*.c file defines one suite constructor.  To add a suite,
 * declare it here and add one line to the table in main.c.
 */
#ifndef LOCKBROKER_TEST_SUITES_H
#define LOCKBROKER_TEST_SUITES_H

#include <check.h>

Suite *proto_suite(void);	/* test_proto.c: proto_parse() and its tables */
Suite *keytab_suite(void);	/* test_keytab.c: the intrusive hash table */
Suite *pool_suite(void);	/* test_pool.c: the blocks of lock entries and holds */
Suite *addr_suite(void);	/* test_addr.c: listen and Redis addresses */
Suite *config_suite(void);	/* test_config.c: options, conf file, checks */
/* The lock table (daemon/locks/) on fake_store.c, helpers in locks_env.c: */
Suite *locks_grant_suite(void);	/* test_grant.c: ACQUIRE, FIFO, waits */
Suite *locks_kinds_suite(void);	/* test_kinds.c: shared locks, semaphores */
Suite *locks_handoff_suite(void);	/* test_handoff.c: RELEASE, hand-offs */
Suite *locks_renew_suite(void);	/* test_renew.c: renewal, jeopardy */
Suite *locks_events_suite(void);	/* test_events.c: wakes, Redis down */
Suite *locks_resumable_suite(void);	/* test_resumable.c: grace sessions */
Suite *waiter_suite(void);	/* test_waiter.c: a session's waiters (ASYNC) */
Suite *slot_suite(void);	/* test_slot.c: cluster hash slots and tags */
Suite *acl_suite(void);		/* test_acl.c: acl_file parser, globs */
Suite *vouch_suite(void);	/* test_vouch.c: the Sentinel lease's sums */
Suite *httphead_suite(void);	/* test_httphead.c: /metrics request heads */
Suite *grace_suite(void);	/* test_grace.c: grace.c, recording grace_ops */
Suite *stream_suite(void);	/* test_stream.c: net/stream.c, socketpair */
Suite *lockctl_suite(void);	/* test_lockctl.c: lockctl's parsers */
Suite *redial_suite(void);	/* test_redial.c: the reconnect policy */
Suite *node_suite(void);	/* test_node.c: a master's calls, fake link */
Suite *lean_suite(void);	/* test_lean.c: the lean batch's words */
Suite *cluster_map_suite(void);	/* test_cluster_map.c: CLUSTER SLOTS read */
Suite *resolve_suite(void);	/* test_resolve.c: evdns, fake DNS server */
Suite *resp_suite(void);	/* test_resp.c: replies, names, wanted msgs */

#endif
