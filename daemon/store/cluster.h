/*
 * cluster.h - a master per slot, by a Redis Cluster's slot map
 * (cluster.c).
 */
#ifndef LOCKBROKER_CLUSTER_H
#define LOCKBROKER_CLUSTER_H

#include "topo.h"

/* Most masters remembered. */
#define CLUSTER_MAX_NODES 256

/* Seeds: "ip:port,..." as config.c checked them.  Fills tp and starts
 * reading the map; -1 (logged) when the seeds do not parse. */
int cluster_new(struct node_env *env, const struct store_keys *k,
    const struct store_hooks *h, const char *seeds, struct topo *tp);

#endif
