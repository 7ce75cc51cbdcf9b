/*
 * util.c - lockctl's messages on stderr, its way out (die), its clock.
 */
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void (*at_die)(void);

void
vmsg(const char *fmt, va_list ap)
{
	char buf[1024];

	vsnprintf(buf, sizeof buf, fmt, ap);
	fprintf(stderr, "lockctl: %s\n", buf);
}

void
msg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

void
die(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	if (at_die != NULL)
		at_die();
	exit(code);
}

void
die_hook(void (*fn)(void))
{
	at_die = fn;
}

long long
now_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) < 0)
		die(1, "clock_gettime: %s", strerror(errno));
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
ms_left(long long deadline)
{
	long long left;

	if (deadline < 0)
		return -1;
	left = deadline - now_ms();
	if (left < 0)
		return 0;
	return left > INT_MAX ? INT_MAX : (int)left;
}
