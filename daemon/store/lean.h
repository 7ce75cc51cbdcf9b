/*
 * lean.h - the lean exclusive batch: which script calls may
 * go in one, and its words.  A run of exclusive acquires and releases of
 * one event-loop turn goes to Redis as one call of scripts/batch/lean.lua
 * (FCALL lean_<hash>, or the batch script with ARGV[1] "@lean"): B + 4
 * commands for B pairs, and a release publishes only where someone
 * listens.  node.c decides when (its queue, the order of calls about one
 * key: no key twice in one lean batch) and sends it; this file only reads
 * the calls' own words, so it is pure and unit-tested.
 */
#ifndef LOCKBROKER_LEAN_H
#define LOCKBROKER_LEAN_H

#include <stddef.h>

struct cmd;

/* The names a lean batch reads besides its calls' own words (single and
 * Sentinel mode; keys.c makes them). */
struct lean_names {
	const char *fence;		/* "<prefix>:fence" */
	const char *delay;		/* "<prefix>:lockdelay" */
	const char *listen;		/* "<prefix>:listen" */
	const char *listenall;		/* "<prefix>:listenall" */
	const char *wanted;		/* "<prefix>:wanted" */
	const char *released;		/* "<prefix>:released" */
	const char *idsp;		/* "<broker-id> " */
};

enum lean_role {
	LEAN_NONE,			/* goes as before: alone or in a batch */
	LEAN_ACQUIRE,			/* acquire.lua: exclusive, no value */
	LEAN_RELEASE			/* release.lua: a hold without a value */
};

/* Room for the three numbers a lean batch writes (numkeys, a, r). */
#define LEAN_NUM_BYTES (3 * 24)

/*
 * c's part in a lean batch, from its script and the shape of its words
 * as store/requests.c makes them in single and Sentinel mode: acquire.lua
 * with its 4 keys (lock, counter, lock delay, watch mark: no value key)
 * and 6 arguments (no value text); release.lua with 1 key (no value key)
 * and 3 arguments.  Anything else: LEAN_NONE.
 */
enum lean_role lean_role(const struct cmd *c);

/*
 * The n calls from *head (qnext-linked, each of role LEAN_ACQUIRE or
 * LEAN_RELEASE) put in the order their batch answers them: the acquires
 * first, then the releases, each in their own order (no key is in two of
 * them, so the order between two calls does not matter).  *nacq: how many
 * acquires.  Returns the words of their batch call: <call> <name>
 * <numkeys> keys... args...
 */
size_t lean_order(struct cmd **head, size_t n, size_t *nacq);

/*
 * Write the words of the lean batch of the n calls from head (ordered by
 * lean_order, nacq acquires) into argv/argvlen from index 2 on (the
 * first two are the call's: FCALL lean_<hash>, or EVAL...).  The words
 * point into the calls' own argv, into names, and into num
 * (LEAN_NUM_BYTES, for the numbers).  Returns the count written, argv[0]
 * and argv[1] included.
 */
size_t lean_fill(const struct lean_names *names, const struct cmd *head,
    size_t n, size_t nacq, const char **argv, size_t *argvlen, char *num);

#endif
