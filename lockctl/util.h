/*
 * util.h - what every part of lockctl uses: a message on stderr, the way
 * out (die), the monotonic clock.
 */
#ifndef LOCKCTL_UTIL_H
#define LOCKCTL_UTIL_H

#include <stdarg.h>

/* One line on stderr, prefixed "lockctl: ". */
void vmsg(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A message, the hook (see die_hook), exit. */
void die(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
/*
 * What die does before it exits (cmd.c: give the held lock back).  The
 * hook may die itself: it then runs again, and must be a no-op by then.
 */
void die_hook(void (*fn)(void));

/* now, in ms (CLOCK_MONOTONIC); dies if the clock fails. */
long long now_ms(void);
/* poll() timeout for an absolute deadline; -1 (forever) when none. */
int ms_left(long long deadline);

#endif
