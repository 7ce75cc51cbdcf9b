/*
 * watch.c - WATCH (protocol 1.2): the holders of watched keys, read from
 * Redis as they change and told to each watcher (locks.h says what a
 * watcher is promised).
 *
 * One entry per watched key (struct wkey), however many sessions of this
 * broker watch it, with at most one read in flight (watch.lua); a reason
 * to read that comes meanwhile makes one more read once it is answered, so
 * a burst of changes costs two reads and the last state told is always a
 * read made after the last change.  Reasons to read: a watcher came; a
 * message on the release channel (a release anywhere, or "held <key>",
 * which every script that grants or gives a value publishes while the
 * key's watch mark exists); a holder's TTL running out in Redis (nothing
 * is published when a dead broker's lock expires: the read is timed by
 * the PTTL the last read saw); Redis or pub/sub back after a gap (changes
 * were missed); and the mark's refresh.  Every read sets the mark for
 * WATCH_MARK_MS, and an entry reads again at least every
 * WATCH_REFRESH_MS, so the mark never lapses while someone here watches;
 * a broker that dies leaves a mark that runs out.
 *
 * Reads come only from Redis, so a state told is one Redis held: every
 * holder told was granted.  Reads of one key are made one after the other
 * on one connection, so states are told in the order Redis went through
 * them.  After a failover that lost writes, Redis may show an older
 * holder again: a watcher is never told an exclusive holder with a lower
 * token than one it was told (struct lk_watch, max_token).
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_MARK_MS 30000		/* a watch mark's TTL in Redis */
#define WATCH_REFRESH_MS 10000		/* read (and mark) at least this often */
#define WATCH_RETRY_MIN_MS 100		/* a read Redis did not answer while */
#define WATCH_RETRY_MAX_MS 5000		/* connected: again, with backoff */

TAILQ_HEAD(watchers, lk_watch);

struct wkey {
	struct keytab_entry te;		/* te.key points at name */
	struct locks *lt;
	struct watchers watchers;
	struct event *timer;		/* the next read: a holder's expiry,
					 * the mark's refresh, a retry */
	long retry_ms;			/* the last retry's wait (0: none) */
	unsigned reading:1;		/* a read in flight */
	unsigned again:1;		/* a reason to read came meanwhile */
	unsigned known:1;		/* the state below is a read's */
	unsigned orphan:1;		/* no watcher left, out of the table:
					 * freed once its read is answered */
	/* the state the last read found; owner and value are owned here */
	struct lk_key_state state;
	char *owner, *value;
	uint64_t hash;			/* of that state (state_hash) */
	char name[];
};

struct lk_watch {
	struct wkey *wk;
	TAILQ_ENTRY(lk_watch) link;
	const struct lk_watch_ops *ops;
	void *arg;
	long long max_token;		/* the highest exclusive holder's token
					 * told: never one below it */
	uint64_t told;			/* the hash of the state last told */
	unsigned fresh:1;		/* tell the next state read, changed
					 * or not (WATCH, WATCH again) */
	unsigned owed:1;		/* a state it could not take: the one
					 * of then goes at locks_watch_flush */
};

static void wkey_read(struct wkey *wk);

/* FNV-1a over the bytes of a state: what tells "changed" from "the same
 * again" without keeping, per watcher, a copy of what it was told. */
static uint64_t
fnv(uint64_t h, const void *p, size_t len)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 1099511628211ULL;
	}
	return h;
}

static uint64_t
state_hash(const struct lk_key_state *s)
{
	uint64_t h = 14695981039346656037ULL;
	long long n[3] = { s->token, (long long)s->holders, s->limit };
	int kind = (int)s->kind;

	h = fnv(h, &kind, sizeof kind);
	h = fnv(h, n, sizeof n);
	h = fnv(h, s->owner != NULL ? s->owner : "", s->ownerlen);
	h = fnv(h, "\n", 1);
	h = fnv(h, s->value != NULL ? s->value : "", s->valuelen);
	return h != 0 ? h : 1;		/* 0: nothing told yet */
}

static void
wkey_free(struct wkey *wk)
{
	if (!wk->orphan)
		keytab_remove(wk->lt->watched, &wk->te);
	event_free(wk->timer);
	free(wk->owner);
	free(wk->value);
	free(wk);
}

/*
 * Tell w the state read last, unless it was told that state already or
 * the state has an older exclusive holder than one it was told.  Returns
 * 1 when nothing is owed any more, 0 when w could not take it now.
 */
static int
tell(struct lk_watch *w)
{
	struct wkey *wk = w->wk;
	const struct lk_key_state *s = &wk->state;

	if (!wk->known)
		return 1;
	if (s->kind == LK_KEY_EXCLUSIVE && s->token < w->max_token) {
		w->owed = 0;		/* never back: wait for a newer one */
		return 1;
	}
	if (!w->fresh && wk->hash == w->told) {
		w->owed = 0;
		return 1;
	}
	if (!w->ops->state(w->arg, wk->name, wk->te.keylen, s)) {
		w->owed = 1;
		return 0;
	}
	w->owed = 0;
	w->fresh = 0;
	w->told = wk->hash;
	if (s->kind == LK_KEY_EXCLUSIVE && s->token > w->max_token)
		w->max_token = s->token;
	return 1;
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	wkey_read(arg);
}

/* Keep what a read found (n holders of total, soonest to expire first). */
static void
state_keep(struct wkey *wk, long kind, const struct store_holder *h,
    size_t n, size_t total)
{
	struct lk_key_state *s = &wk->state;

	free(wk->owner);
	free(wk->value);
	wk->owner = wk->value = NULL;
	memset(s, 0, sizeof *s);
	if (n == 0) {
		s->kind = LK_KEY_FREE;
	} else if (kind == STORE_EXCLUSIVE) {
		s->kind = LK_KEY_EXCLUSIVE;
		wk->owner = value_copy(h[0].owner, h[0].ownerlen);
		wk->value = value_copy(h[0].value, h[0].valuelen);
		s->owner = wk->owner;
		s->ownerlen = h[0].ownerlen;
		s->token = h[0].token;
		s->value = wk->value;
		s->valuelen = wk->value != NULL ? h[0].valuelen : 0;
	} else {
		s->kind = kind == 0 ? LK_KEY_SHARED : LK_KEY_SEMAPHORE;
		s->holders = total;
		s->limit = kind;
	}
	wk->hash = state_hash(s);
	wk->known = 1;
}

/* When to read next: when the soonest holder's TTL runs out (if nobody
 * renews it, Redis drops it and tells no one), else for the mark. */
static void
next_read(struct wkey *wk, const struct store_holder *h, size_t n)
{
	long long ms = WATCH_REFRESH_MS;

	if (n > 0 && h[0].pttl >= 0 && h[0].pttl + 1 < ms)
		ms = h[0].pttl + 1;
	timer_add_ms(wk->timer, ms);
}

static void
read_done(void *arg, int ok, long kind, const struct store_holder *h,
    size_t n, size_t total)
{
	struct wkey *wk = arg;
	struct lk_watch *w, *next;

	wk->reading = 0;
	if (wk->orphan) {
		wkey_free(wk);
		return;
	}
	if (!ok) {
		/* a link up but no answer (an error, a master of the slot
		 * down): again after a while; a link down reads again when
		 * it is back (watch_all) */
		wk->retry_ms = wk->retry_ms == 0 ? WATCH_RETRY_MIN_MS :
		    wk->retry_ms * 2 > WATCH_RETRY_MAX_MS ? WATCH_RETRY_MAX_MS :
		    wk->retry_ms * 2;
		timer_add_ms(wk->timer, wk->retry_ms);
		return;
	}
	wk->retry_ms = 0;
	if (n > 0 && kind == STORE_EXCLUSIVE && h[0].token <= 0) {
		/* bytes no broker wrote: not a holder to tell of */
	} else {
		state_keep(wk, kind, h, n, total);
		for (w = TAILQ_FIRST(&wk->watchers); w != NULL; w = next) {
			next = TAILQ_NEXT(w, link);
			(void)tell(w);
		}
	}
	if (wk->again) {
		wk->again = 0;
		wkey_read(wk);
		return;
	}
	next_read(wk, h, n);
}

/* Nobody here watches wk any more: out of the table now (a WATCH again
 * makes a new entry), freed now or once its read is answered.  Its mark
 * runs out unless another broker keeps it. */
static void
wkey_drop(struct wkey *wk)
{
	if (!wk->reading) {
		wkey_free(wk);
		return;
	}
	keytab_remove(wk->lt->watched, &wk->te);
	wk->orphan = 1;
	event_del(wk->timer);
}

/* Read wk now, or once the read in flight is answered. */
static void
wkey_read(struct wkey *wk)
{
	struct locks *lt = wk->lt;

	if (wk->orphan)
		return;
	if (wk->reading) {
		wk->again = 1;
		return;
	}
	event_del(wk->timer);
	if (lt->st == NULL || store_watch(lt->st, wk->name, wk->te.keylen,
	    WATCH_MARK_MS, read_done, wk) != 0)
		return;		/* Redis is away: watch_all when it is back */
	wk->reading = 1;
	wk->again = 0;
}

void
watch_init(struct locks *lt)
{
	lt->watched = keytab_new();
}

static int
drop_entry(struct keytab_entry *e, void *arg)
{
	struct wkey *wk = (struct wkey *)(void *)e;
	struct lk_watch *w;

	(void)arg;
	while ((w = TAILQ_FIRST(&wk->watchers)) != NULL) {
		TAILQ_REMOVE(&wk->watchers, w, link);
		w->wk = NULL;
	}
	wkey_drop(wk);
	return 0;
}

/* The table goes: every entry, after every watcher was unwatched. */
void
watch_free(struct locks *lt)
{
	if (lt->watched == NULL)
		return;
	keytab_each(lt->watched, drop_entry, NULL);
	keytab_free(lt->watched);
	lt->watched = NULL;
}

void
watch_poke(struct locks *lt, const char *key, size_t keylen)
{
	struct keytab_entry *e = keytab_find(lt->watched, key, keylen);

	if (e != NULL)
		wkey_read((struct wkey *)(void *)e);
}

static int
read_entry(struct keytab_entry *e, void *arg)
{
	(void)arg;
	wkey_read((struct wkey *)(void *)e);
	return 0;
}

/* Changes may have been missed (Redis or pub/sub back, keys moved):
 * read every watched key again. */
void
watch_all(struct locks *lt)
{
	keytab_each(lt->watched, read_entry, NULL);
}

struct lk_watch *
locks_watch(struct locks *lt, const char *key, size_t keylen,
    const struct lk_watch_ops *ops, void *arg)
{
	struct keytab_entry *e = keytab_find(lt->watched, key, keylen);
	struct wkey *wk;
	struct lk_watch *w = xcalloc(1, sizeof *w);

	if (e != NULL) {
		wk = (struct wkey *)(void *)e;
	} else {
		wk = xcalloc(1, sizeof *wk + keylen + 1);
		memcpy(wk->name, key, keylen);
		wk->te.key = wk->name;
		wk->te.keylen = keylen;
		wk->lt = lt;
		TAILQ_INIT(&wk->watchers);
		if ((wk->timer = evtimer_new(lt->base, timer_cb, wk)) == NULL)
			fatalx("cannot create a watch timer");
		keytab_insert(lt->watched, &wk->te);
	}
	w->wk = wk;
	w->ops = ops;
	w->arg = arg;
	w->fresh = 1;
	TAILQ_INSERT_TAIL(&wk->watchers, w, link);
	wkey_read(wk);
	return w;
}

void
locks_watch_again(struct lk_watch *w)
{
	if (w->wk == NULL)
		return;
	w->fresh = 1;
	wkey_read(w->wk);
}

int
locks_watch_flush(struct lk_watch *w)
{
	if (w->wk == NULL || !w->owed)
		return 1;
	return tell(w);
}

void
locks_unwatch(struct lk_watch *w)
{
	struct wkey *wk = w->wk;

	if (wk != NULL) {
		TAILQ_REMOVE(&wk->watchers, w, link);
		if (TAILQ_EMPTY(&wk->watchers))
			wkey_drop(wk);
	}
	free(w);
}

size_t
locks_watched_keys(const struct locks *lt)
{
	return lt->watched != NULL ? keytab_count(lt->watched) : 0;
}
