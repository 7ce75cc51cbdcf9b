/*
 * util.c - checked allocation, the monotonic clock, timers in ms.
 */
#include "util.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void *
xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (p == NULL)
		fatalx("out of memory allocating %zu bytes", size);
	return p;
}

void *
xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		fatalx("out of memory allocating %zu x %zu bytes", n, size);
	return p;
}

char *
xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int
fmt_ll(char *buf, long long v)
{
	char d[FMT_LL_MAX];
	unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v :
	    (unsigned long long)v;
	int n = 0, len = 0;

	do {
		d[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		buf[len++] = '-';
	while (n > 0)
		buf[len++] = d[--n];
	buf[len] = '\0';
	return len;
}

int64_t
now_ms(void)
{
	return now_us() / 1000;
}

int64_t
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct event *
timer_new(struct event_base *base, event_callback_fn cb, void *arg)
{
	struct event *ev = evtimer_new(base, cb, arg);

	if (ev == NULL)
		fatalx("cannot create a timer");
	return ev;
}

void
timer_add_ms(struct event *ev, int64_t ms)
{
	struct timeval tv;

	if (ms < 0)
		ms = 0;
	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	if (event_add(ev, &tv) != 0)
		fatalx("cannot arm a timer");
}

void
timer_at_ms(struct event *ev, int64_t when_ms)
{
	timer_add_ms(ev, when_ms - now_ms());
}
