/*
 * topo.h - where a slot's master is: the topology behind one ops table.
 *
 * single.c: one master, at a fixed address or where the sentinels say,
 * for every key (slot -1); cluster.c: a master per slot, by a Redis
 * Cluster's slot map.  The script calls (calls.c) route through it and
 * never name either; the facade (store.c) asks it how the store stands.
 */
#ifndef LOCKBROKER_TOPO_H
#define LOCKBROKER_TOPO_H

#include <stdint.h>

#include "keys.h"
#include "node.h"

struct topo_ops {
	/* The connections: start (after the store is made), free (every
	 * node's calls fail). */
	void (*start)(void *t);
	void (*free)(void *t);
	/* The master serving slot (-1: the one master); NULL: none known. */
	struct node *(*node_of)(void *t, int slot);
	/* MOVED: slot lives at host:port now; ASK: the node at host:port
	 * for one call.  NULL: not followed (none in single mode, or past
	 * the cap of masters). */
	struct node *(*moved)(void *t, int slot, const char *host, int port);
	struct node *(*asked)(void *t, const char *host, int port);
	/* Read the map again soon (a redirection, CLUSTERDOWN). */
	void (*refresh)(void *t);
	/* Grants and renewals may go out (Sentinel mode: the lease holds). */
	int (*may_grant)(void *t);
	/* Some master that serves keys is up (cluster: the map is known). */
	int (*up)(void *t);
	/* slot's master is not up for grants but on its way: its command
	 * link is being made (cluster mode: or the slot map, which says
	 * where it is, is being read; Sentinel mode: or the link is up and
	 * waits to join the master's tenure under the lease). */
	int (*coming)(void *t, int slot);
	/* Visit the masters that serve keys (all: every node made). */
	void (*each)(void *t, int all, void (*fn)(void *arg, struct node *n),
	    void *arg);
	/* Shutting down: a link waiting out a backoff tries now. */
	void (*kick)(void *t);
	/* Sentinel mode: ms the lease has left (0: none); -1 otherwise. */
	long long (*lease_ms)(void *t);
	/* Cluster mode: slot map changes; 0 otherwise. */
	uint64_t (*map_changes)(void *t);
	/* Single and Sentinel mode (NULL in cluster mode): the subscriber
	 * is subscribed (announce.lua counts this broker among the
	 * release channel's subscribers only then). */
	int (*subscribed)(void *t);
};

struct topo {
	const struct topo_ops *ops;
	void *t;
	int sharded;			/* keys have slots (cluster mode) */
};

#endif
