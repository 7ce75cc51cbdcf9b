/*
 * redial.h - when to try a lost connection again: the one reconnect policy
 * of every connection the broker keeps open to Redis (the store's links,
 * the shard subscribers, the Sentinel subscriptions and lease
 * connections).
 *
 * Capped exponential backoff on a retry timer: the first failure waits
 * min_ms, each next one twice as long, up to max_ms; a connection that
 * comes up starts again at min_ms.  "Failing" says whether it has failed
 * since it was last up, so its owner logs the first failure loudly and the
 * ones after it quietly (a Redis that stays away is one warning, not one
 * per retry).  What a failure is worth saying, and in what words, is the
 * owner's: redial only keeps the clock and the flag.
 */
#ifndef LOCKBROKER_REDIAL_H
#define LOCKBROKER_REDIAL_H

#include <event2/event.h>

/* Every Redis and Sentinel connection's: 50 ms, 100, 200, ... 2 s. */
#define REDIAL_MIN_MS 50
#define REDIAL_MAX_MS 2000

struct redial {
	struct event *retry_ev;		/* calls the owner's retry back */
	long backoff_ms;		/* the next wait */
	long min_ms, max_ms;
	int failing;			/* failed since last up */
};

/* retry(fd, what, arg) runs when a wait is over (a timer: fatal if it
 * cannot be made). */
void redial_init(struct redial *r, struct event_base *base,
    event_callback_fn retry, void *arg, long min_ms, long max_ms);
void redial_free(struct redial *r);
/*
 * Failed, or lost: arm the retry and return how long it waits.  *loud
 * (may be NULL) is 1 on the first failure since the connection was last
 * up (or made), 0 after it.
 */
long redial_failed(struct redial *r, int *loud);
/* Failed, and not to be retried for now (its owner let it go): quiet from
 * now on, as after redial_failed, but no retry is armed. */
void redial_idle(struct redial *r);
/* Up: the next failure waits min_ms and is loud again.  Returns 1 when it
 * had been failing (an owner may say it is back). */
int redial_ok(struct redial *r);
/* Back to min_ms without being up (someone knows it is worth trying now);
 * the log stays quiet. */
void redial_reset(struct redial *r);
/* A retry is armed. */
int redial_pending(const struct redial *r);
/* Disarm the retry (the owner connects now itself). */
void redial_cancel(struct redial *r);

#endif
