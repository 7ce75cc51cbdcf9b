/*
 * events.c - what the store tells the lock table (its hooks, store.h):
 * Redis came (clean-ups, then the reassert of every hold, then the
 * waiters again), went (waiters wait on, or are answered when their wait
 * is over), or rerouted keys; and its messages: a key released elsewhere
 * (a wake) and a waiter elsewhere (wanted).
 */
#include "locks_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>

/* After a reconnect: every queued waiter asks Redis again (behind the
 * clean-ups and the reassert on the pipe). */
static int
pump_waiting(struct keytab_entry *e, void *arg)
{
	struct lock *lk = (struct lock *)(void *)e;

	(void)arg;
	if (lk->whead != NULL)
		lock_pump(lk);	/* may free lk: keytab_each allows it */
	return 0;
}

/* The slot map changed: the same, and no early hand-off from tokens set
 * aside by a master the key's slot may have left. */
static int
pump_rerouted(struct keytab_entry *e, void *arg)
{
	chain_end((struct lock *)(void *)e);
	return pump_waiting(e, arg);
}

void
locks_store_up(void *arg)
{
	struct locks *lt = arg;
	uint64_t tenures = lt->st != NULL ? store_tenures(lt->st) : 0;

	/* Holds whose TTL ran out by the broker's own count while Redis was
	 * away are lost whatever Redis says now: the reassert below must not
	 * set them again.  Their keys are freed with the clean-ups. */
	jeopardy_sweep(lt);
	/* Clean-ups first: they go ahead of any new grant on the pipe;
	 * early hand-offs Redis may not have heard of, ahead of all. */
	cleanup_run(lt);
	/* Held locks may have expired while Redis was away, or been lost
	 * with a failed master's writes: reassert them all now, which also
	 * finds the lost ones (after a new master tenure: lost with the
	 * failover).  Then the waiters, behind them on the pipe. */
	lt->failover = lt->tenures != 0 && tenures != lt->tenures;
	lt->tenures = tenures;
	renew_tick(lt, 1);
	lt->failover = 0;
	keytab_each(lt->keys, pump_waiting, NULL);
	/* changes to watched keys may have been missed meanwhile */
	watch_all(lt);
}

void
locks_store_rerouted(void *arg)
{
	struct locks *lt = arg;

	/* Some keys' master changed: what waited for theirs may go now. */
	cleanup_run(lt);
	keytab_each(lt->keys, pump_rerouted, NULL);
	watch_all(lt);
}

static int
hold_waiters(struct keytab_entry *e, void *arg)
{
	struct lock *lk = (struct lock *)(void *)e;

	(void)arg;
	if (lk_key_up(lk))
		return 0;	/* cluster mode: its master is another one */
	/* "held elsewhere" is stale news once the connection is gone; the
	 * tokens set aside may be a master's that fails over */
	lk->remote_busy = 0;
	chain_end(lk);
	if (lk_rare(lk)->retry_ev)
		event_del(lk->rare->retry_ev);
	waiters_expire(lk);
	lock_gc(lk);		/* may free lk: keytab_each allows it */
	return 0;
}

void
locks_store_down(void *arg)
{
	struct locks *lt = arg;

	/* Waiters stay queued through a reconnect (a failover must not
	 * cost them their turn); one whose WAIT runs out meanwhile is
	 * answered ERR UNAVAILABLE, and locks_store_up retries the rest.
	 * Cluster mode: only keys of the master that went. */
	keytab_each(lt->keys, hold_waiters, NULL);
}

/*
 * The key may be free now (a release elsewhere, or messages possibly
 * missed).  An attempt in flight may have run before that release: mark
 * it, so a "held" answer to it is retried at once instead of slept on.
 */
static void
lock_wake(struct lock *lk)
{
	struct hold *x = hold_excl(lk), *h;

	if (x != NULL && !x->releasing && !x->gone) {
		/* Released elsewhere while a session here holds it alone:
		 * that hold is stale (its session was resumed on another
		 * broker, or the lock was lost).  Check it now, not at its
		 * next renewal, so the waiters here do not wait for that. */
		x->renew_at = now_ms();
		renew_schedule(lk->lt, x->renew_at);
		return;
	}
	/* A shared hold or a permit released elsewhere is news for the
	 * waiters here; but a detached session's hold here may be stale the
	 * same way (resumed elsewhere and released there): check those now
	 * too, so a writer here does not wait for their renewal. */
	TAILQ_FOREACH(h, &lk->holds, klink)
		if (h->cl->detached && !h->releasing && !h->gone) {
			h->renew_at = now_ms();
			renew_schedule(lk->lt, h->renew_at);
		}
	if (lk->attempts)
		lk->wakes++;		/* their "held" answers are retried */
	if (!lk->remote_busy)
		return;
	lk_rare_w(lk)->freed_us = now_us();
	lk->remote_busy = 0;
	if (lk->rare->retry_ev)
		event_del(lk->rare->retry_ev);
	lock_pump(lk);
}

void
locks_store_wanted(void *arg, const char *key, size_t keylen, int writer,
    long long stamp)
{
	struct lock *lk = lock_find(arg, key, keylen);

	/* News for any key this broker has (holds, is acquiring, or has
	 * waiters for): its next releases owe the remote waiter a turn; a
	 * writer's also holds back the readers here (may_try); a reader's
	 * makes the writers here be marked.  A writer's mark (stamp) only
	 * holds back the readers that arrive here from now on (wseen): its
	 * writer announced itself already if it waits for a holder (or its
	 * attempt will), and a second "wanted" would cost a second fair
	 * yield. */
	if (lk != NULL && stamp > 0) {
		if (stamp > lk_rare(lk)->wstamp)
			lk_rare_w(lk)->wstamp = stamp;
	} else if (lk != NULL) {
		lk->wanted = 1;
		if (writer)
			writer_heard(lk);
		else
			shared_seen(lk);
	}
}

void
locks_store_released(void *arg, const char *key, size_t keylen)
{
	struct lock *lk = lock_find(arg, key, keylen);
	int hinted;

	if (lk != NULL) {
		/* a writer elsewhere that gave up says so here too (its mark
		 * removed): the readers here ask Redis, whose marks decide */
		hinted = writer_elsewhere(lk) && !lk->remote_busy;
		lk->writer_wanted = 0;
		lock_wake(lk);		/* frees lk only if remote_busy */
		if (hinted)
			lock_pump(lk);	/* readers held back for the writer */
	}
	watch_poke(arg, key, keylen);
}

size_t
locks_store_freed(void *arg, const char *key, size_t keylen,
    long long token)
{
	struct locks *lt = arg;
	struct lock *lk = lock_find(lt, key, keylen);
	struct hold *h, *next;
	size_t n = 0;

	if (lk == NULL)
		return 0;
	/* A hold granted after the FREE has a greater token (every grant of
	 * a key has); one whose release is in flight, or whose loss its
	 * grace session checks (gone), is settled by that. */
	for (h = TAILQ_FIRST(&lk->holds); h != NULL; h = next) {
		next = TAILQ_NEXT(h, klink);
		if (h->token > token || h->releasing || h->gone)
			continue;
		if (h->pass_pending)
			pass_forsake(lt, h);
		hold_lost(h, 1, LK_LOST_EXPIRED);
		n++;
	}
	if (n > 0) {
		log_info("key '%s': %zu hold(s) here freed by an admin (FREE, "
		    "tokens up to %lld)", lk->name, n, token);
		/* the tokens set aside with the freed grant are no one's */
		chain_end(lk);
	}
	lock_pump(lk);		/* waiters here: the key is free in Redis */
	return n;
}

void
locks_store_changed(void *arg, const char *key, size_t keylen)
{
	watch_poke(arg, key, keylen);
}

static int
wake_waiting(struct keytab_entry *e, void *arg)
{
	struct lock *lk = (struct lock *)(void *)e;

	(void)arg;
	lock_wake(lk);		/* may free lk: keytab_each allows it */
	return 0;
}

void
locks_store_subscribed(void *arg)
{
	struct locks *lt = arg;

	/* Messages may have been missed while unsubscribed: retry once. */
	keytab_each(lt->keys, wake_waiting, NULL);
	watch_all(lt);
}
