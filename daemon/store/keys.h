/*
 * keys.h - the names the store shares with the Lua scripts: key prefixes,
 * per-prefix keys and channels, this broker's id in the messages of the
 * wanted channel; and the reading of those messages.
 *
 * Single and Sentinel mode have one key each per prefix; in cluster mode
 * one per slot, so their names end in "{" and the slot's tag follows.
 */
#ifndef LOCKBROKER_KEYS_H
#define LOCKBROKER_KEYS_H

#include <stddef.h>

#include "lean.h"
#include "store.h"

struct store_keys {
	char *lockpfx;			/* "<prefix>:lock:" */
	size_t lockpfxlen;
	char *sesspfx;			/* "<prefix>:session:" (grace.c) */
	size_t sesspfxlen;
	char *writers;			/* "<prefix>:writers:": the marks of
					 * waiting writers (wmark.lua) */
	char *values;			/* "<prefix>:value:": exclusive
					 * holds' values (value.lua) */
	char *watched;			/* "<prefix>:watched:": watch marks
					 * (watch.lua) */
	char *names;			/* "<prefix>:name:": sessions' HELLO
					 * names (name.lua) */
	size_t nameslen;
	char *fence;			/* "<prefix>:fence" */
	char *channel;			/* "<prefix>:released" */
	char *wanted;			/* "<prefix>:wanted" */
	char *tenure;			/* "<prefix>:tenure" */
	char *delay;			/* "<prefix>:lockdelay" */
	char *listen;			/* "<prefix>:listen": someone may
					 * listen for releases (listen marks,
					 * watch marks, lib/holders.lua) */
	char *listenall;		/* "<prefix>:listenall": publish every
					 * release (announce.lua) */
	char *brokers;			/* "<prefix>:brokers": the brokers'
					 * announcements (announce.lua) */
	char *rwait;			/* "<prefix>:rwait:": waiters recorded
					 * for remote grants (rwait.lua) */
	char *granted;			/* "<prefix>:granted:<broker-id>":
					 * this broker's remote grants (single
					 * and Sentinel mode; NULL in cluster
					 * mode) */
	struct lean_names lean;		/* the lean batch's (single mode) */
	char idsp[STORE_ID_LEN + 2];	/* "<broker-id> ": wanted messages
					 * of exclusive waiters */
	char idplus[STORE_ID_LEN + 2];	/* "<broker-id>+": of readers and
					 * permit waiters (shared locks) */
};

/* id: STORE_ID_LEN bytes (NULL: dashes); cluster: per-slot names. */
void keys_init(struct store_keys *k, const char *prefix, const char *id,
    int cluster);
void keys_free(struct store_keys *k);

/*
 * A message on the wanted channel (the subscriber's, or a shard
 * subscriber's in cluster mode), for h->wanted; our own announcements
 * skipped:
 *   "<broker-id> <key>"          a writer waits (acquire.lua)
 *   "<broker-id>+<key>"          a reader or a permit waiter (sacquire.lua)
 *   "<broker-id>!<stamp> <key>"  a writer's mark was made (wmark.lua)
 *   "<broker-id>=<n> <ms> <key>" its waiters for key (h->queue, notice.lua)
 *   "<broker-id>?0 <key>"        a holder asks for those (h->ask)
 *   "<broker-id>?<id> <key>"     ... of the broker <id> only
 */
void keys_wanted_msg(const struct store_keys *k, const struct store_hooks *h,
    const char *msg, size_t len);
/*
 * A message on the release channel: "<key>" a key was released (h->released),
 * "held <key>" a watched key's holders or value changed (h->changed; lock
 * names have no blank, so brokers older than WATCH find no such key); the
 * admin words' "freed <key> <token>" (h->freed), "kill <client-id>
 * <request>" (h->kill) and "killed <broker-id>/<seq> 1" (h->killed), which
 * older brokers find no key for either.  A message of those words in
 * another shape is ignored.
 */
void keys_released_msg(const struct store_hooks *h, const char *msg,
    size_t len);
/*
 * A message on this broker's grant channel (k->granted): "<key> <wait-id>
 * <owner> <token> <ms>", a release granted key to this broker's waiter
 * recorded with that wait-id at ms (Redis's clock, Unix ms): h->granted.
 * Another shape is ignored.
 */
void keys_granted_msg(const struct store_hooks *h, const char *msg,
    size_t len);

#endif
