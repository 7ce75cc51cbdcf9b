/*
 * single.h - one master for every key: at a fixed address
 * (redis_address), or where Redis Sentinel says (redis_sentinels), with
 * the Sentinel lease; and the subscriber of its wake-ups.
 */
#ifndef LOCKBROKER_SINGLE_H
#define LOCKBROKER_SINGLE_H

#include "topo.h"

/* Fills tp; -1 (logged) when cfg does not parse. */
int single_new(struct node_env *env, const struct store_keys *k,
    const struct store_hooks *h, const struct store_cfg *cfg,
    struct topo *tp);

#endif
