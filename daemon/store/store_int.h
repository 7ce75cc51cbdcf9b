/*
 * store_int.h - what the top files of the store share, and nothing else
 * includes: store.c (the facade of store.h: make, free, how the store
 * stands, counters) and the script calls of store.h (calls.c, decode.c,
 * requests.c: calls_int.h).
 *
 * Below them, lowest first (each file calls only those above it here):
 *   resp.c, events.c, keys.c   reply predicates, hiredis's events, names
 *   link.c                     one Redis connection, no role, no topology
 *   sub.c, shardsub.c          wake-ups: classic and sharded pub/sub
 *   sentinel.c, lease.c        where the master is; the Sentinel lease
 *   node.c                     one master's calls: queue, batches, WAIT
 *   single.c, cluster.c        the topology behind topo.h
 */
#ifndef LOCKBROKER_STORE_INT_H
#define LOCKBROKER_STORE_INT_H

#include "store.h"
#include "keys.h"
#include "node.h"
#include "topo.h"

#include <event2/event.h>
#include <stdint.h>

struct call;

struct store {
	struct event_base *base;
	struct store_cfg cfg;		/* strings owned below */
	char *addr, *password, *user;
	struct store_keys keys;		/* names shared with the scripts */
	struct node_env env;		/* what its nodes and links share */
	struct resolver *resolver;	/* host names of every address */
	struct store_hooks hooks;
	struct topo topo;		/* single/Sentinel or cluster */
	struct call *retrying;		/* waiting out TRYAGAIN / CLUSTERDOWN */
	int64_t errlog_ms;		/* last error reply logged */
	uint64_t errlog_quiet;		/* error replies not logged since */
	struct event *watchdog_ev;	/* checks the oldest command's age */
	int64_t watchdog_ms;		/* when it last ran */
	struct event *role_ev;		/* is it still the master? */
};

/* requests.c: this broker's announcement (announce.lua), sent at every
 * role check (store.c, each second), kept for ANNOUNCE_TTL_MS (three of
 * them: one lost costs nothing); -1 not sent (cluster mode, no link). */
#define ANNOUNCE_TTL_MS 3000
int calls_announce(struct store *st);

/* calls.c */
/* The slot of a lock key (-1: not sharded). */
int calls_key_slot(const struct store *st, const char *key, size_t keylen);
/* Calls waiting out TRYAGAIN / CLUSTERDOWN; fail them all (freeing). */
size_t calls_retrying(const struct store *st);
void calls_drop(struct store *st);

#endif
