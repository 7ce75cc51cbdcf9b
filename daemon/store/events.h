/*
 * events.h - a hiredis context's events on our libevent base, with a
 * persistent read event (events.c says why).
 */
#ifndef LOCKBROKER_EVENTS_H
#define LOCKBROKER_EVENTS_H

#include <hiredis/async.h>

struct event_base;

/* ac's events on base; -1 when they cannot be made (the caller frees
 * ac). */
int events_attach(redisAsyncContext *ac, struct event_base *base);

#endif
