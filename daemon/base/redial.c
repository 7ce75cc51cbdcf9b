/*
 * redial.c - the reconnect policy (redial.h): capped exponential backoff
 * on a retry timer, and whether a connection has failed since it was last
 * up.
 */
#include "redial.h"
#include "util.h"

#include <string.h>

void
redial_init(struct redial *r, struct event_base *base, event_callback_fn retry,
    void *arg, long min_ms, long max_ms)
{
	memset(r, 0, sizeof *r);
	r->min_ms = min_ms;
	r->max_ms = max_ms;
	r->backoff_ms = min_ms;
	r->retry_ev = timer_new(base, retry, arg);
}

void
redial_free(struct redial *r)
{
	if (r->retry_ev != NULL)
		event_free(r->retry_ev);
	r->retry_ev = NULL;
}

/* The wait after this one: twice as long, at most max_ms. */
static void
back_off(struct redial *r)
{
	r->backoff_ms = r->backoff_ms * 2 > r->max_ms ? r->max_ms :
	    r->backoff_ms * 2;
}

long
redial_failed(struct redial *r, int *loud)
{
	long wait = r->backoff_ms;

	if (loud != NULL)
		*loud = !r->failing;
	r->failing = 1;
	timer_add_ms(r->retry_ev, wait);
	back_off(r);
	return wait;
}

void
redial_idle(struct redial *r)
{
	r->failing = 1;
	back_off(r);
}

int
redial_ok(struct redial *r)
{
	int was = r->failing;

	r->failing = 0;
	r->backoff_ms = r->min_ms;
	return was;
}

void
redial_reset(struct redial *r)
{
	r->backoff_ms = r->min_ms;
}

int
redial_pending(const struct redial *r)
{
	return r->retry_ev != NULL && evtimer_pending(r->retry_ev, NULL);
}

void
redial_cancel(struct redial *r)
{
	if (r->retry_ev != NULL)
		event_del(r->retry_ev);
}
