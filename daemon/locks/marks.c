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
 *
 * WANTED notices (protocol 1.2, EVENTS ON WANTED) ride on the same
 * channel: a holder that asked for them hears "EVENT WANTED <key>
 * <waiters> <oldest-wait-ms>" when a waiter of any broker queues for a
 * key it holds, at most once per NOTICE_EVERY_MS per key and hold, and
 * none once the queue is empty.  The counts come from the waiters'
 * brokers: a broker whose waiters a holder elsewhere asked about
 * ("<id>?...", store_queue_ask) reports its queue for the key on every
 * change ("<id>=<n> <ms> ...", store_queue_report, once per loop turn)
 * and every REPORT_REFRESH_MS, for REPORT_ASKED_MS after the last ask.
 * The holder's broker asks when a noticing hold starts, when it hears a
 * waiter's announcement from a broker it has no report of (that waiter
 * counts as one at once: its notice goes out within that one hop, and
 * the report that the ask brings refines it), and again every
 * ASK_REFRESH_MS while reports come.  A report not refreshed within
 * HEARD_TTL_MS (its broker died) stops counting.  Nothing of this runs
 * unless a session asked for notices: the paths of plain locks send no
 * message more.
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>
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

/* w's mark is no longer refreshed; whether it had one (mark_left then
 * removes it from Redis). */
int
mark_take(struct lclient *w)
{
	if (!w->wmarked)
		return 0;
	w->wmarked = 0;
	TAILQ_REMOVE(&w->lt->marked, w, mlink);
	return 1;
}

/* Remove the mark of w, which waited for lk, from Redis. */
void
mark_left(struct lclient *w, const struct lock *lk, int op)
{
	struct locks *lt = w->lt;

	if (lt->st != NULL && lk != NULL)
		(void)store_wmark(lt->st, lk->name, lk->te.keylen, w->id,
		    strlen(w->id), op, 0, mark_done, NULL);
}

/* w waits no more: granted, or it gave up (which wakes the readers its
 * mark held back). */
void
mark_leave(struct lclient *w, int op)
{
	if (mark_take(w))
		mark_left(w, w->wlock, op);
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
	lk_rare_w(lk)->writer_until_ms = now_ms() + WRITER_HINT_MS;
}

/* A writer elsewhere holds back the readers here (its hint runs). */
int
writer_elsewhere(const struct lock *lk)
{
	return lk->writer_wanted && now_ms() < lk_rare(lk)->writer_until_ms;
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

/* --- WANTED notices ------------------------------------------------------ */

#define NOTICE_EVERY_MS 1000		/* per key and hold */
#define NOTICE_TICK_MS 100		/* owed notices, at most this late */
#define NOTICE_IDLE_MS 1000		/* the timer while none is owed */
#define REPORT_ASKED_MS 30000		/* a holder's ask lasts */
#define REPORT_REFRESH_MS 5000		/* a queue reported again */
#define ASK_REFRESH_MS 10000		/* ... and the holder asks again */
#define HEARD_TTL_MS 15000		/* a report not refreshed: gone */
#define PROVISIONAL_MS 2000		/* an announcement without report */
#define NOTICE_BROKERS 16		/* brokers counted per key */

/* Another broker's waiters for the key, as it reported them. */
struct heard {
	char from[STORE_ID_LEN];
	unsigned n;
	int64_t since_us;		/* its oldest waiter's start, here */
	int64_t heard_ms;
	unsigned provisional:1;		/* an announcement, no report yet */
};

struct notice {
	struct lock *lk;
	TAILQ_ENTRY(notice) link;	/* lt->notices */
	/* holder side */
	struct heard heard[NOTICE_BROKERS];
	unsigned nheard;
	int64_t asked_ms;		/* its last ask */
	unsigned owed:1;		/* a hold's notice waits for its turn */
	/* waiter side */
	int64_t report_until_ms;	/* a holder elsewhere asked: report */
	int64_t reported_ms;
	unsigned reported_n;
	unsigned report_due:1;		/* report_cb sends it */
	unsigned report_forced:1;	/* ... even "0" again (asked by id) */
};

/* The notice timer fires within ms (sooner if it already would). */
static void
notice_tick_at(struct locks *lt, long ms)
{
	int64_t when = now_ms() + ms;

	if (evtimer_pending(lt->notice_ev, NULL) && lt->notice_at_ms <= when)
		return;
	lt->notice_at_ms = when;
	timer_at_ms(lt->notice_ev, when);
}

static struct notice *
notice_get(struct lock *lk)
{
	struct notice *nt = lk->nt;

	if (nt != NULL)
		return nt;
	nt = xcalloc(1, sizeof *nt);
	nt->lk = lk;
	lk->nt = nt;
	TAILQ_INSERT_TAIL(&lk->lt->notices, nt, link);
	notice_tick_at(lk->lt, NOTICE_IDLE_MS);
	return nt;
}

/* nt concerns lk no more: lk may go now (lock_gc). */
static void
notice_drop(struct notice *nt)
{
	struct lock *lk = nt->lk;

	TAILQ_REMOVE(&lk->lt->notices, nt, link);
	lk->nt = NULL;
	free(nt);
	lock_gc(lk);
}

/* This broker's waiters for lk (queued ones: not those being tried
 * first) and the oldest one's start (0 none). */
static unsigned
queue_here(const struct lock *lk, int64_t *oldest_us)
{
	unsigned n = 0;

	*oldest_us = 0;
	for (const struct lclient *w = lk->whead; w != NULL; w = w->wnext)
		if (w->wcounted) {
			n++;
			if (*oldest_us == 0 || w->wstart_us < *oldest_us)
				*oldest_us = w->wstart_us;
		}
	if (lk_rare(lk)->mqueued > 0) {	/* ACQUIRE ALL waits (multi.c) */
		n += lk->rare->mqueued;
		if (*oldest_us == 0 || lk->rare->moldest_us < *oldest_us)
			*oldest_us = lk->rare->moldest_us;
	}
	return n;
}

/* Every broker's waiters for lk, as far as this one knows. */
static unsigned
queue_all(const struct lock *lk, int64_t *oldest_us)
{
	unsigned n = queue_here(lk, oldest_us);

	if (lk->nt == NULL)
		return n;
	for (unsigned i = 0; i < lk->nt->nheard; i++) {
		const struct heard *e = &lk->nt->heard[i];

		n += e->n;
		if (*oldest_us == 0 || e->since_us < *oldest_us)
			*oldest_us = e->since_us;
	}
	return n;
}

/* A hold here whose client wants notices. */
static int
noticing(const struct lock *lk)
{
	const struct hold *h;

	TAILQ_FOREACH(h, &lk->holds, klink)
		if (h->cl->notices && h->cl->ops->wanted != NULL)
			return 1;
	return 0;
}

/* Tell lk's noticing holders (grew: a waiter queued; else only those
 * owed a notice), each at most once per NOTICE_EVERY_MS. */
static void
notice_holders(struct lock *lk, int grew)
{
	int64_t now = now_ms(), oldest_us;
	unsigned n = queue_all(lk, &oldest_us);
	long age = n > 0 ? (long)((now_us() - oldest_us) / 1000) : 0;
	struct hold *h;
	int owed = 0;

	TAILQ_FOREACH(h, &lk->holds, klink) {
		if (!h->cl->notices || h->cl->ops->wanted == NULL ||
		    (!grew && !h->notice_owed))
			continue;
		if (n == 0) {
			h->notice_owed = 0;	/* the queue emptied meanwhile */
		} else if (h->noticed_ms != 0 &&
		    now - h->noticed_ms < NOTICE_EVERY_MS) {
			h->notice_owed = 1;
			owed = 1;
		} else {
			h->notice_owed = 0;
			h->noticed_ms = now;
			h->cl->ops->wanted(h->cl->arg, lk->name, lk->te.keylen,
			    n, age > 0 ? age : 0);
		}
	}
	if (owed) {
		notice_get(lk)->owed = 1;
		notice_tick_at(lk->lt, NOTICE_TICK_MS);
	}
}

/* Ask the brokers with waiters for lk to report them (to: one broker's
 * id, which answers even with none; NULL every broker). */
static void
notice_ask(struct lock *lk, const char *to)
{
	struct locks *lt = lk->lt;

	notice_get(lk)->asked_ms = now_ms();
	if (lt->st != NULL)
		(void)store_queue_ask(lt->st, lk->name, lk->te.keylen, to);
}

static void
report_send(struct notice *nt)
{
	struct lock *lk = nt->lk;
	struct locks *lt = lk->lt;
	int64_t oldest_us;
	unsigned n = queue_here(lk, &oldest_us);

	if (n == 0 && nt->reported_n == 0 && !nt->report_forced)
		return;
	nt->report_forced = 0;
	nt->reported_n = n;
	nt->reported_ms = now_ms();
	if (lt->st != NULL)
		(void)store_queue_report(lt->st, lk->name, lk->te.keylen, n,
		    n > 0 ? (long)((now_us() - oldest_us) / 1000) : 0);
}

/* w waits on (not granted at once): it counts in its key's queue. */
void
notice_waiting(struct lclient *w)
{
	if (w->wcounted || w->wlock == NULL)
		return;
	w->wcounted = 1;
	notice_queue_changed(w->wlock, 1);
}

/* lk's queue here changed (grew: a waiter queued, else one left). */
void
notice_queue_changed(struct lock *lk, int grew)
{
	if (grew && !TAILQ_EMPTY(&lk->holds) && noticing(lk))
		notice_holders(lk, 1);
	if (lk->nt != NULL && lk->nt->report_until_ms > now_ms()) {
		lk->nt->report_due = 1;
		event_active(lk->lt->report_ev, 0, 0);
	}
}

/* A hold began: if its client wants notices, the brokers with waiters
 * are asked, and waiters already queued are told next turn (after the
 * grant's own reply). */
void
notice_hold_start(struct hold *h)
{
	if (!h->cl->notices || h->cl->ops->wanted == NULL)
		return;
	notice_ask(h->lk, NULL);
	h->notice_owed = 1;
	h->lk->nt->owed = 1;
	event_active(h->lk->lt->report_ev, 0, 0);
}

/* The lock table goes (the broker stops): lk's notice state with it. */
void
notice_free(struct lock *lk)
{
	if (lk->nt == NULL)
		return;
	TAILQ_REMOVE(&lk->lt->notices, lk->nt, link);
	free(lk->nt);
	lk->nt = NULL;
}

/* Nothing of nt is needed any more: no noticing holder here, no other
 * broker's report counted, no notice owed, and no holder elsewhere asked
 * for reports, or this broker's queue is empty and was reported so. */
static int
notice_idle(const struct notice *nt, int holder, int64_t now)
{
	int64_t oldest_us;

	return !holder && nt->nheard == 0 && !nt->owed && !nt->report_due &&
	    (nt->report_until_ms <= now || (nt->reported_n == 0 &&
	    queue_here(nt->lk, &oldest_us) == 0));
}

void
report_cb(evutil_socket_t fd, short what, void *arg)
{
	struct locks *lt = arg;
	struct notice *nt, *next;

	(void)fd;
	(void)what;
	for (nt = TAILQ_FIRST(&lt->notices); nt != NULL; nt = next) {
		next = TAILQ_NEXT(nt, link);
		if (nt->report_due) {
			nt->report_due = 0;
			report_send(nt);
		}
		if (nt->owed) {
			nt->owed = 0;
			notice_holders(nt->lk, 0);	/* (may owe again) */
		}
		if (notice_idle(nt, noticing(nt->lk), now_ms()))
			notice_drop(nt);	/* (the key may go now) */
	}
}

static void
heard_remove(struct notice *nt, unsigned i)
{
	nt->heard[i] = nt->heard[--nt->nheard];
}

static struct heard *
heard_of(struct notice *nt, const char *from)
{
	for (unsigned i = 0; i < nt->nheard; i++)
		if (memcmp(nt->heard[i].from, from, STORE_ID_LEN) == 0)
			return &nt->heard[i];
	return NULL;
}

void
notice_cb(evutil_socket_t fd, short what, void *arg)
{
	struct locks *lt = arg;
	struct notice *nt, *next;
	int64_t now = now_ms();
	int owed = 0;

	(void)fd;
	(void)what;
	for (nt = TAILQ_FIRST(&lt->notices); nt != NULL; nt = next) {
		struct lock *lk = nt->lk;
		int holder = noticing(lk);

		next = TAILQ_NEXT(nt, link);
		for (unsigned i = 0; i < nt->nheard; ) {
			const struct heard *e = &nt->heard[i];

			if (!holder || now - e->heard_ms > (e->provisional ?
			    PROVISIONAL_MS : HEARD_TTL_MS))
				heard_remove(nt, i);
			else
				i++;
		}
		if (nt->owed) {
			nt->owed = 0;
			notice_holders(lk, 0);
		}
		if (nt->report_until_ms > now && nt->reported_n > 0 &&
		    now - nt->reported_ms >= REPORT_REFRESH_MS)
			report_send(nt);
		if (notice_idle(nt, holder, now))
			notice_drop(nt);
		else
			owed |= nt->owed;
	}
	if (!TAILQ_EMPTY(&lt->notices))
		notice_tick_at(lt, owed ? NOTICE_TICK_MS : NOTICE_IDLE_MS);
}

/* --- WANTED notices: what other brokers say -------------------------- */

void
locks_store_queue(void *arg, const char *from, const char *key,
    size_t keylen, unsigned waiters, long oldest_ms)
{
	struct lock *lk = lock_find(arg, key, keylen);
	struct notice *nt;
	struct heard *e;
	int grew;

	if (lk == NULL || !noticing(lk))
		return;
	nt = notice_get(lk);
	e = heard_of(nt, from);
	if (waiters == 0) {
		if (e != NULL)
			heard_remove(nt, (unsigned)(e - nt->heard));
		return;
	}
	grew = e == NULL || waiters > e->n;
	if (e == NULL) {
		if (nt->nheard == NOTICE_BROKERS)
			return;		/* counted: the first brokers */
		e = &nt->heard[nt->nheard++];
		memcpy(e->from, from, STORE_ID_LEN);
	}
	e->n = waiters;
	e->since_us = now_us() - (int64_t)oldest_ms * 1000;
	e->heard_ms = now_ms();
	e->provisional = 0;
	if (now_ms() - nt->asked_ms >= ASK_REFRESH_MS)
		notice_ask(lk, NULL);	/* its reports go on */
	if (grew)
		notice_holders(lk, 1);
}

void
locks_store_ask(void *arg, const char *key, size_t keylen, int to_me)
{
	struct locks *lt = arg;
	struct lock *lk = lock_find(lt, key, keylen);
	struct notice *nt;

	if (lk == NULL) {
		/* nothing waits here: said when asked by name, so that the
		 * waiter the asker heard of stops counting at once */
		if (to_me && lt->st != NULL)
			(void)store_queue_report(lt->st, key, keylen, 0, 0);
		return;
	}
	nt = notice_get(lk);
	nt->report_until_ms = now_ms() + REPORT_ASKED_MS;
	nt->report_due = 1;
	nt->report_forced = to_me ? 1 : 0;
	event_active(lt->report_ev, 0, 0);
}

void
locks_store_waiter_heard(void *arg, const char *from, const char *key,
    size_t keylen)
{
	struct lock *lk = lock_find(arg, key, keylen);
	struct notice *nt;
	struct heard *e;

	if (lk == NULL || !noticing(lk))
		return;
	nt = notice_get(lk);
	if (heard_of(nt, from) != NULL || nt->nheard == NOTICE_BROKERS)
		return;		/* its reports count it */
	e = &nt->heard[nt->nheard++];
	memcpy(e->from, from, STORE_ID_LEN);
	e->n = 1;
	e->since_us = now_us();
	e->heard_ms = now_ms();
	e->provisional = 1;
	notice_ask(lk, from);
	notice_holders(lk, 1);
}

void
locks_client_notices(struct lclient *cl, int on)
{
	struct hold *h;

	if (cl->notices == (on != 0))
		return;
	cl->notices = on != 0;
	if (!on)
		return;
	TAILQ_FOREACH(h, &cl->held, hlink)
		notice_hold_start(h);
}
