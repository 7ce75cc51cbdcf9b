/*
 * sub.h - the wake-ups of single-address and Sentinel mode: one link
 * subscribed to <prefix>:released and <prefix>:wanted, telling the hooks
 * what it hears (a lock released, a client elsewhere waiting) and when it
 * is subscribed again (messages may have been missed meanwhile).  Where
 * it connects is its owner's (locate, as link_ops' own).
 */
#ifndef LOCKBROKER_SUB_H
#define LOCKBROKER_SUB_H

#include "keys.h"
#include "link.h"

struct sub;

struct sub *sub_new(const struct link_env *env, const struct store_keys *k,
    const struct store_hooks *h, void (*locate)(void *arg, struct link *l),
    void *arg);
void sub_free(struct sub *s);
/* Its link (to start, kill, compare addresses). */
struct link *sub_link(struct sub *s);

#endif
