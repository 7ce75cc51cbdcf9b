/*
 * shardsub.h - cluster mode's wake-ups: sharded pub/sub on one master
 * (shardsub.c says why and how).
 *
 * The map is its owner's: the ops say whether the master still serves
 * slots (else a lost connection is not retried), whether the map gives it
 * a slot, and that a slot turned out to have moved (read the map again).
 */
#ifndef LOCKBROKER_SHARDSUB_H
#define LOCKBROKER_SHARDSUB_H

#include "keys.h"
#include "link.h"

struct shardsub;

struct shardsub_ops {
	int (*serving)(void *arg);		/* its master serves slots */
	int (*owns)(void *arg, unsigned slot);	/* ... and this one */
	void (*lost_slot)(void *arg);		/* the map is stale */
};

/* On the master at host:port (name: for logs); connects at once. */
struct shardsub *shardsub_new(const struct link_env *env,
    const struct store_keys *k, const struct store_hooks *h,
    const char *host, int port, const char *name,
    const struct shardsub_ops *ops, void *arg);
void shardsub_free(struct shardsub *ss);
/* Subscribe the slots the map gives its master and it has not yet. */
void shardsub_sync(struct shardsub *ss);
/* Its master is in the map: connect now if down, else sync. */
void shardsub_wake(struct shardsub *ss);
/* Its master's command link was lost: this one is as suspect. */
void shardsub_drop(struct shardsub *ss);

#endif
