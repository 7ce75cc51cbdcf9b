/*
 * broker.h - the state main wires together, shared by server.c,
 * session.c and the counters' readers (stats.c, metrics.c) only.  Leaf
 * modules (proto, keytab, store, locks, config) never include this file.
 * Every counter here is listed in stats.c's table, which STATS and
 * /metrics both walk.
 */
#ifndef LOCKBROKER_BROKER_H
#define LOCKBROKER_BROKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "config.h"

struct event_base;
struct evconnlistener;
struct evhttp;
struct locks;
struct store;
struct session;

struct broker_stats {
	uint64_t accepted;		/* sessions accepted */
	uint64_t refused;		/* refused at max_sessions */
	uint64_t toolong;		/* closed for an oversized line */
	uint64_t auth_failures;		/* wrong AUTH tokens */
	uint64_t paused;		/* times a session stopped being read */
};

struct broker {
	struct event_base *base;
	struct config *cfg;
	struct locks *locks;
	struct store *store;
	struct evconnlistener *listener;	/* TCP */
	struct evconnlistener *ulistener;	/* unix socket, if any */
	struct evhttp *http;			/* /metrics, if any */
	TAILQ_HEAD(, session) sessions;
	size_t nsessions;
	char *linebuf;			/* max_line + 2 bytes, one request */
	struct broker_stats stats;
	int64_t started_ms;
	int64_t refused_logged_ms;	/* last "max_sessions reached" line */
	int64_t authfail_logged_ms;	/* last "wrong AUTH token" line */
	uint64_t authfail_unlogged;	/* wrong tokens since, not logged */
	long held_key_len;		/* largest max_key_len since start: the
					 * keys RELEASE/RENEW/OWNER still take */
	int stopping;
	int ready;			/* READY=1 sent */
	int argc;			/* kept for SIGHUP: re-parse them */
	char **argv;
};

/* server.c */
int server_listen(struct broker *b, char *err, size_t errlen);
int server_listen_unix(struct broker *b, char *err, size_t errlen);
/* Stop accepting and end every session (their locks are released). */
void server_stop(struct broker *b);

/* metrics.c: serve /metrics when metrics_port is set. */
int metrics_start(struct broker *b, char *err, size_t errlen);
void metrics_stop(struct broker *b);

/* session.c */
struct session *session_new(struct broker *b, int fd);
void session_free(struct session *s);

#endif
