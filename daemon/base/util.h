/*
 * util.h - allocation that never returns NULL, the monotonic clock, and
 * timers armed in milliseconds.
 *
 * Allocation policy (stated once): control structures use x*alloc, which
 * abort with the size on failure -- a broker that cannot allocate a few
 * hundred bytes cannot keep its promises.  Per-connection input is bounded
 * by max_line and the output backpressure bound instead.
 */
#ifndef LOCKBROKER_UTIL_H
#define LOCKBROKER_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
char *xstrndup(const char *s, size_t n);

/*
 * The decimal form of v at buf (room for FMT_LL_MAX bytes), NUL-terminated;
 * returns its length.  For the numbers of every request's Redis call:
 * snprintf's format parsing cost more than the digits (perf: the printf
 * family was 1.3 % of the broker's CPU at 50 connections).
 */
#define FMT_LL_MAX 21
int fmt_ll(char *buf, long long v);

/* Milliseconds / microseconds on CLOCK_MONOTONIC. */
int64_t now_ms(void);
int64_t now_us(void);
/* Unix time in milliseconds (CLOCK_REALTIME): for moments another host
 * reads (a queued wait's deadline in a grace record). */
int64_t wall_ms(void);

/*
 * Timers.  A timer that cannot be made or armed would leave a request
 * unanswered or a connection never retried, so, like an allocation that
 * fails, it is fatal.  timer_add_ms arms ev to fire ms from now (at once
 * for 0 or less); timer_at_ms at a moment of now_ms().
 */
struct event *timer_new(struct event_base *base, event_callback_fn cb,
    void *arg);
void timer_add_ms(struct event *ev, int64_t ms);
void timer_at_ms(struct event *ev, int64_t when_ms);

#endif
