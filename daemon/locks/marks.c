/*
 * marks.c - the marks of waiting writers in Redis (shared locks).
 *
 * A writer waiting on one broker is not overtaken by readers that arrive
 * after it on another.  Its broker marks it in Redis
 * (store_wmark, wmark.lua) with the time it began waiting, when readers
 * may be involved: its attempt found the key held, or readers hold, wait
 * for or were announced for the key here (lock.shared_seen).  A reader
 * carries the writers it came after (lclient.wseen: those of other
 * brokers whose marks it knew of when it arrived, never a later one, so
 * no two brokers' waiters can each wait for the other's), and
 * sacquire.lua does not grant it while one of those marks lives.  The
 * mark is refreshed every MARK_REFRESH_MS while the writer waits, and
 * removed when it is granted or gives up; that of a broker that died ends
 * within MARK_TTL_MS.
 *
 * The marks in Redis decide.  A writer's announcement (the "wanted"
 * message of its attempt that found the key held) also holds back the
 * readers of the broker that hears it, without asking Redis, for
 * WRITER_HINT_MS: the writer is marked a round trip after it announced
 * itself, and readers in between would overtake it.  Past that, or at a
 * release message for the key (a writer that gives up, however, has its
 * mark removed and the others told on the release channel), readers ask
 * Redis, which holds them back only while a mark lives.  A hint kept
 * until the key was released here made a broker refuse every new reader
 * for as long as its readers held the key, long after the writer had
 * gone.
 */
#include "locks_int.h"
#include "util.h"

#include <event2/event.h>
#include <string.h>

#define MARK_TTL_MS 3000
#define MARK_REFRESH_MS 1000
#define WRITER_HINT_MS 1000		/* an announcement holds readers back */

static void
mark_done(void *arg, int ok, int released)
{
	(void)arg;
	(void)ok;
	(void)released;
}

/* Mark w, an exclusive waiter, in Redis (see MARK_TTL_MS) if not yet. */
void
mark_wait(struct lclient *w)
{
	struct locks *lt = w->lt;
	struct lock *lk = w->wlock;

	if (w->wmarked || lk == NULL || w->wkind != LK_EXCLUSIVE ||
	    lt->st == NULL || now_ms() >= w->deadline ||
	    store_wmark(lt->st, lk->name, lk->te.keylen, w->id, strlen(w->id),
	    STORE_WMARK_WAIT, MARK_TTL_MS, mark_done, NULL) != 0)
		return;
	w->wmarked = 1;
	TAILQ_INSERT_TAIL(&lt->marked, w, mlink);
	if (!evtimer_pending(lt->mark_ev, NULL))
		timer_add_ms(lt->mark_ev, MARK_REFRESH_MS);
}

/* w waits no more: granted, or it gave up (which wakes the readers its
 * mark held back). */
void
mark_leave(struct lclient *w, int op)
{
	struct locks *lt = w->lt;

	if (!w->wmarked)
		return;
	w->wmarked = 0;
	TAILQ_REMOVE(&lt->marked, w, mlink);
	if (lt->st != NULL && w->wlock != NULL)
		(void)store_wmark(lt->st, w->wlock->name, w->wlock->te.keylen,
		    w->id, strlen(w->id), op, 0, mark_done, NULL);
}

void
mark_cb(evutil_socket_t fd, short what, void *arg)
{
	struct locks *lt = arg;
	struct lclient *w;

	(void)fd;
	(void)what;
	TAILQ_FOREACH(w, &lt->marked, mlink)
		(void)store_wmark(lt->st, w->wlock->name, w->wlock->te.keylen,
		    w->id, strlen(w->id), STORE_WMARK_WAIT, MARK_TTL_MS,
		    mark_done, NULL);
	if (!TAILQ_EMPTY(&lt->marked))
		timer_add_ms(lt->mark_ev, MARK_REFRESH_MS);
}

/* A writer of another broker announced itself for lk (see above). */
void
writer_heard(struct lock *lk)
{
	lk->writer_wanted = 1;
	lk->writer_until_ms = now_ms() + WRITER_HINT_MS;
}

/* A writer elsewhere holds back the readers here (its hint runs). */
int
writer_elsewhere(const struct lock *lk)
{
	return lk->writer_wanted && now_ms() < lk->writer_until_ms;
}

/* Readers hold, wait for or were announced for lk: its writers waiting
 * here, not being tried, are marked from now on. */
void
shared_seen(struct lock *lk)
{
	struct lclient *w;

	if (lk->shared_seen)
		return;
	lk->shared_seen = 1;
	for (w = lk->whead; w != NULL; w = w->wnext)
		if (w->wkind == LK_EXCLUSIVE && w->op == NULL)
			mark_wait(w);
}
