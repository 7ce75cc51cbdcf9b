/*
 * names.c - a session's HELLO name in Redis (<prefix>:name:<client-id>,
 * name.lua), so that LOCKS on any broker shows a holder by name, whichever
 * broker its session is on.
 *
 * A name costs Redis nothing until its session holds a key: it is written
 * at the session's first grant (or at HELLO, when it holds keys already),
 * then again every NAME_REFRESH_MS while the session lives, with a TTL of
 * NAME_TTL_MS, so a broker that dies leaves it for that long at most.  It
 * is deleted when the session ends, except when a grace session detaches:
 * its holds outlive the connection, and so does its name (for the grace,
 * at least).  A write Redis does not take is tried again at the next
 * grant or refresh: a name is a label, never a reason to fail a request.
 */
#include "grace.h"
#include "locks.h"
#include "log.h"
#include "session_int.h"
#include "store.h"
#include "util.h"

#include <event2/event.h>

#include <stdlib.h>
#include <string.h>

#define NAME_TTL_MS (30 * 60 * 1000L)		/* a name's TTL in Redis */
#define NAME_REFRESH_MS (10 * 60 * 1000L)	/* written again this often */
#define NAMES_TICK_MS (60 * 1000L)		/* the refresh timer's period */
#define NAME_SLACK_MS (60 * 1000L)		/* a detached one: grace and */

struct names {
	struct broker *b;
	struct event *tick;
};

static void
name_written(void *arg, int ok, int released)
{
	(void)arg;
	(void)ok;
	(void)released;
}

/* Write s's name (px ms to live), or delete it (px 0). */
static void
name_write(struct session *s, long px)
{
	struct store *st = s->b->store;
	const char *name = s->name != NULL && px > 0 ? s->name : "";

	if (st == NULL || store_name(st, s->id, CLIENTID_LEN, name,
	    strlen(name), px, name_written, NULL) != 0) {
		s->name_ms = 0;		/* tried again later */
		return;
	}
	s->name_ms = px > 0 ? now_ms() : 0;
}

void
names_hello(struct session *s, const char *name, size_t len)
{
	char *copy;

	if (len > PROTO_NAME_MAX)
		len = PROTO_NAME_MAX;
	if (s->name != NULL ? strlen(s->name) == len &&
	    memcmp(s->name, name, len) == 0 : len == 0)
		return;
	/* on the heap, not in the session: most sessions have no name */
	copy = len > 0 ? xstrndup(name, len) : NULL;
	free(s->name);
	s->name = copy;
	if (s->name_ms != 0 || (s->cl != NULL &&
	    locks_held(s->cl, NULL, NULL) > 0))
		name_write(s, NAME_TTL_MS);
}

void
names_held(struct session *s)
{
	if (s->name != NULL && s->name_ms == 0)
		name_write(s, NAME_TTL_MS);
}

void
names_gone(struct session *s, int detached)
{
	long px = NAME_TTL_MS;

	if (s->name_ms == 0)
		return;
	if (!detached) {
		name_write(s, 0);
		return;
	}
	if (s->grace != NULL && grace_ms(s->grace) + NAME_SLACK_MS > px)
		px = grace_ms(s->grace) + NAME_SLACK_MS;
	name_write(s, px);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct names *n = arg;
	struct session *s;
	int64_t now = now_ms();

	(void)fd;
	(void)what;
	TAILQ_FOREACH(s, &n->b->sessions, link)
		if (s->name_ms != 0 && !s->ended &&
		    now - s->name_ms >= NAME_REFRESH_MS)
			name_write(s, NAME_TTL_MS);
}

struct names *
names_new(struct broker *b)
{
	struct names *n = xcalloc(1, sizeof *n);
	struct timeval tv = { NAMES_TICK_MS / 1000, 0 };

	n->b = b;
	if ((n->tick = event_new(b->base, -1, EV_PERSIST, tick_cb, n)) ==
	    NULL || event_add(n->tick, &tv) != 0)
		fatalx("cannot create the names timer");
	return n;
}

void
names_free(struct names *n)
{
	if (n == NULL)
		return;
	event_free(n->tick);
	free(n);
}
