/*
 * util.h - allocation that never returns NULL, and the monotonic clock.
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

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
char *xstrndup(const char *s, size_t n);

/* Milliseconds / microseconds on CLOCK_MONOTONIC. */
int64_t now_ms(void);
int64_t now_us(void);

#endif
