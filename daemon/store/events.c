/*
 * events.c - the libevent events of the store's hiredis contexts.
 *
 * hiredis 0.14's own libevent adapter (hiredis/adapters/libevent.h) makes
 * the read event one-shot: libevent deletes it from epoll when it fires
 * and hiredis adds it back after every read, two epoll_ctl calls each
 * time Redis answers (seen with strace: DEL, read, ADD per reply batch).
 * Here the read event is persistent: it stays in epoll from the connect
 * to the teardown, and hiredis's "add read" after each read is a no-op.
 * The write event stays one-shot, as hiredis expects: it is added only
 * when a write is left unfinished (a command link writes at the end of
 * the loop turn itself: link_write_now).  sentinel.c and lease.c keep the stock
 * adapter: their connections carry a few commands a second.
 */
#include "events.h"

#include <event2/event.h>
#include <stdlib.h>

struct hiev {
	redisAsyncContext *ac;
	struct event *rev, *wev;
};

static void
read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct hiev *e = arg;

	(void)fd;
	(void)what;
	redisAsyncHandleRead(e->ac);	/* may free e (a teardown) */
}

static void
write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct hiev *e = arg;

	(void)fd;
	(void)what;
	redisAsyncHandleWrite(e->ac);	/* may free e (a teardown) */
}

static void
add_read(void *arg)
{
	struct hiev *e = arg;

	if (!event_pending(e->rev, EV_READ, NULL))
		(void)event_add(e->rev, NULL);
}

static void
del_read(void *arg)
{
	struct hiev *e = arg;

	(void)event_del(e->rev);
}

static void
add_write(void *arg)
{
	struct hiev *e = arg;

	(void)event_add(e->wev, NULL);
}

static void
del_write(void *arg)
{
	struct hiev *e = arg;

	(void)event_del(e->wev);
}

static void
cleanup(void *arg)
{
	struct hiev *e = arg;

	event_free(e->rev);
	event_free(e->wev);
	free(e);
}

int
events_attach(redisAsyncContext *ac, struct event_base *base)
{
	struct hiev *e;

	if (ac->ev.data != NULL || (e = calloc(1, sizeof *e)) == NULL)
		return -1;
	e->ac = ac;
	e->rev = event_new(base, ac->c.fd, EV_READ | EV_PERSIST, read_cb, e);
	e->wev = event_new(base, ac->c.fd, EV_WRITE, write_cb, e);
	if (e->rev == NULL || e->wev == NULL || event_add(e->rev, NULL) != 0 ||
	    event_add(e->wev, NULL) != 0) {
		if (e->rev != NULL)
			event_free(e->rev);
		if (e->wev != NULL)
			event_free(e->wev);
		free(e);
		return -1;
	}
	/* (the write event: the connect completes when the socket becomes
	 * writable, as with the stock adapter) */
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	ac->ev.data = e;
	return 0;
}
