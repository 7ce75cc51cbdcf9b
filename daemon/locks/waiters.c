/*
 * waiters.c - the FIFO of local waiters of a key: a request joins it,
 * leaves it (granted, answered, gone), and those whose wait ran out while
 * Redis was away are answered.  A waiting writer's mark (marks.c) goes
 * with it; lock_pump (grant.c) decides who of them is tried.
 */
#include "locks_int.h"
#include "util.h"

#include <event2/event.h>
#include <stdlib.h>

void
waiter_push(struct lock *lk, struct lclient *cl, long kind, long wait_ms,
    long ttl_ms)
{
	cl->wlock = lk;
	cl->wnext = NULL;
	cl->rwid = 0;
	cl->rrecorded = 0;
	cl->told_queued = 0;
	cl->conn_wait = 0;
	cl->wkind = kind;
	lk->limit = kind > 0 ? kind : 0;
	cl->wttl = ttl_ms;
	cl->wseen = kind == LK_SHARED ? -1 : 0;	/* -1: its first attempt */
	cl->wstart_us = now_us();
	cl->deadline = cl->wstart_us / 1000 + wait_ms;
	if (lk->wtail)
		lk->wtail->wnext = cl;
	else
		lk->whead = cl;
	lk->wtail = cl;
	if (wait_ms > 0)
		timer_at_ms(cl->deadline_ev, cl->deadline);
	cl->lt->stats.waiters++;
	if (kind == LK_SHARED)
		shared_seen(lk);
}

void
waiter_remove(struct lclient *cl)
{
	struct lock *lk = cl->wlock;
	struct lclient **pp, *prev = NULL;

	if (lk == NULL)
		return;
	mark_leave(cl, STORE_WMARK_GAVE_UP);	/* (a grant left it first) */
	waiter_unrecord(cl);	/* (a remote grant took it first) */
	for (pp = &lk->whead; *pp != NULL; prev = *pp, pp = &(*pp)->wnext) {
		if (*pp == cl) {
			*pp = cl->wnext;
			if (lk->wtail == cl)
				lk->wtail = prev;
			break;
		}
	}
	cl->wlock = NULL;
	cl->wnext = NULL;
	if (cl->wcounted) {
		cl->wcounted = 0;
		notice_queue_changed(lk, 0);
	}
	free(cl->wvalue);		/* (a grant took it first) */
	cl->wvalue = NULL;
	event_del(cl->deadline_ev);
	cl->lt->stats.waiters--;
	if (lk->whead == NULL) {
		/* "held elsewhere" was news for these waiters only: the next
		 * one to come asks Redis afresh */
		lk->remote_busy = 0;
		if (lk_rare(lk)->retry_ev != NULL)
			event_del(lk->rare->retry_ev);
	}
}

/* Redis is away: answer the waiters whose wait is over, and the one-try
 * requests that waited for a connection no longer being made. */
void
waiters_expire(struct lock *lk)
{
	struct lclient *w, *next;
	int64_t now = now_ms();
	int coming = lk_key_coming(lk) > 0;

	for (w = lk->whead; w != NULL; w = next) {
		next = w->wnext;
		if (w->op != NULL ||
		    (now < w->deadline && (!w->conn_wait || coming)))
			continue;
		waiter_remove(w);
		w->lt->stats.acquire_errors++;
		lk_reply(w, LK_UNAVAILABLE, 0, w->conn_wait ? WHY_UNREACHABLE :
		    WHY_WAIT_DOWN);
	}
}
