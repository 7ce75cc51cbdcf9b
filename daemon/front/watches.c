/*
 * watches.c - a session's watched keys (watches.h).
 */
#include "watches.h"
#include "keytab.h"
#include "locks.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

struct wentry {
	struct keytab_entry by_key;	/* in ws->keys */
	struct watches *ws;
	struct lk_watch *w;
	TAILQ_ENTRY(wentry) link;	/* in ws->all */
	unsigned owed:1;		/* a state not taken yet */
	size_t keylen;
	char key[];
};

struct watches {
	struct locks *lt;
	const struct watches_ops *ops;
	void *arg;
	struct keytab *keys;
	TAILQ_HEAD(, wentry) all;	/* in the order they were watched */
	size_t n;
	size_t owed;			/* entries with a state not taken */
};

static int
entry_state(void *arg, const char *key, size_t keylen,
    const struct lk_key_state *s)
{
	struct wentry *e = arg;
	struct watches *ws = e->ws;
	int told = ws->ops->state(ws->arg, key, keylen, s);

	if (!told && !e->owed) {
		e->owed = 1;
		ws->owed++;
	} else if (told && e->owed) {
		e->owed = 0;
		ws->owed--;
	}
	return told;
}

static const struct lk_watch_ops entry_ops = { entry_state };

struct watches *
watches_new(struct locks *lt, const struct watches_ops *ops, void *arg)
{
	struct watches *ws = xcalloc(1, sizeof *ws);

	ws->lt = lt;
	ws->ops = ops;
	ws->arg = arg;
	ws->keys = keytab_new();
	TAILQ_INIT(&ws->all);
	return ws;
}

static void
entry_free(struct watches *ws, struct wentry *e)
{
	keytab_remove(ws->keys, &e->by_key);
	TAILQ_REMOVE(&ws->all, e, link);
	if (e->owed)
		ws->owed--;
	ws->n--;
	locks_unwatch(e->w);
	free(e);
}

void
watches_free(struct watches *ws)
{
	struct wentry *e;

	if (ws == NULL)
		return;
	while ((e = TAILQ_FIRST(&ws->all)) != NULL)
		entry_free(ws, e);
	keytab_free(ws->keys);
	free(ws);
}

size_t
watches_count(const struct watches *ws)
{
	return ws != NULL ? ws->n : 0;
}

int
watches_add(struct watches *ws, const char *key, size_t keylen, size_t max)
{
	struct keytab_entry *k = keytab_find(ws->keys, key, keylen);
	struct wentry *e;

	if (k != NULL) {
		e = (struct wentry *)(void *)k;
		locks_watch_again(e->w);
		return 0;
	}
	if (ws->n >= max)
		return -1;
	e = xcalloc(1, sizeof *e + keylen);
	e->ws = ws;
	e->keylen = keylen;
	memcpy(e->key, key, keylen);
	e->by_key.key = e->key;
	e->by_key.keylen = keylen;
	keytab_insert(ws->keys, &e->by_key);
	TAILQ_INSERT_TAIL(&ws->all, e, link);
	ws->n++;
	/* (may tell a state before returning: e is ready for it) */
	e->w = locks_watch(ws->lt, key, keylen, &entry_ops, e);
	return 1;
}

int
watches_remove(struct watches *ws, const char *key, size_t keylen)
{
	struct keytab_entry *k = ws != NULL ? keytab_find(ws->keys, key,
	    keylen) : NULL;

	if (k == NULL)
		return 0;
	entry_free(ws, (struct wentry *)(void *)k);
	return 1;
}

void
watches_flush(struct watches *ws)
{
	struct wentry *e;

	if (ws == NULL || ws->owed == 0)
		return;
	TAILQ_FOREACH(e, &ws->all, link) {
		if (!e->owed)
			continue;
		/* entry_state keeps the count; stop while the client is
		 * still not reading */
		if (!locks_watch_flush(e->w))
			return;
		if (e->owed) {
			/* nothing was told (the state is one it was told
			 * already, or an older holder): nothing owed */
			e->owed = 0;
			ws->owed--;
		}
		if (ws->owed == 0)
			return;
	}
}

void
watches_each(const struct watches *ws,
    void (*fn)(void *arg, const char *key, size_t keylen), void *arg)
{
	const struct wentry *e;

	if (ws == NULL)
		return;
	TAILQ_FOREACH(e, &ws->all, link)
		fn(arg, e->key, e->keylen);
}
