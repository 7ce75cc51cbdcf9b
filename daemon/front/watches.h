/*
 * watches.h - the keys a session watches (WATCH, protocol 1.2).
 *
 * Each is a watcher of the lock table's (locks_watch): what a key's
 * holders are is read and told there; here are the session's side of it:
 * its keys by name (a second WATCH of one tells its state again, UNWATCH
 * finds it), their count against the session's bound, and the states its
 * client was not reading when they came (ops->state answered 0), told
 * once its output has drained (watches_flush): each key owes at most one,
 * its latest, so a client that reads slowly costs one line per key, never
 * a growing queue.
 */
#ifndef LOCKBROKER_WATCHES_H
#define LOCKBROKER_WATCHES_H

#include <stddef.h>

struct locks;
struct lk_key_state;
struct watches;

struct watches_ops {
	/* key's state for the client; 0 when it cannot take a line now
	 * (told again at watches_flush). */
	int (*state)(void *arg, const char *key, size_t keylen,
	    const struct lk_key_state *s);
};

struct watches *watches_new(struct locks *lt, const struct watches_ops *ops,
    void *arg);
/* Unwatch every key, telling no one (QUIT, the session's end). */
void watches_free(struct watches *ws);
size_t watches_count(const struct watches *ws);
/* WATCH key: 1 when now watched, 0 when watched already (its state is
 * told again), -1 when the session watches max keys already. */
int watches_add(struct watches *ws, const char *key, size_t keylen,
    size_t max);
/* UNWATCH key: 1 when it was watched, 0 when not. */
int watches_remove(struct watches *ws, const char *key, size_t keylen);
/* Tell the states owed while the client was not reading, until it stops
 * taking them again. */
void watches_flush(struct watches *ws);
/* Visit the watched keys. */
void watches_each(const struct watches *ws,
    void (*fn)(void *arg, const char *key, size_t keylen), void *arg);

#endif
