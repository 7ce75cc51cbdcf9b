/*
 * broker.h - the state main wires together for the clients' side, shared
 * by the files of front/ only (server, handshake, session, grace,
 * appstats, and the counters' readers stats.c and metrics.c).  Lower
 * layers (proto, net, locks, store, base) never include this file.
 * Every counter here is listed in stats.c's table, which STATS and
 * /metrics both walk.
 */
#ifndef LOCKBROKER_BROKER_H
#define LOCKBROKER_BROKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "clientid.h"
#include "config.h"
#include "histo.h"

struct event_base;
struct evconnlistener;
struct httpd;
struct locks;
struct store;
struct session;
struct grace;
struct lclient;
struct acl;
struct acl_app;
struct keytab;
struct handshake;
struct tls;
struct ssl_st;
struct sockaddr;
struct admin;
struct names;

struct broker_stats {
	uint64_t accepted;		/* sessions accepted */
	uint64_t refused;		/* refused at max_sessions */
	uint64_t toolong;		/* closed for an oversized line */
	uint64_t auth_failures;		/* wrong AUTH tokens */
	uint64_t paused;		/* times a session stopped being read */
	uint64_t grace_sessions;	/* grace sessions now (gauge) */
	uint64_t detached;		/* of which without a connection */
	uint64_t resumes;		/* RESUMEs answered OK */
	uint64_t resume_refused;	/* RESUMEs with a wrong secret */
	uint64_t grace_expired;		/* detached sessions whose grace ran
					 * out */
	uint64_t denials;		/* requests answered ERR DENIED */
	uint64_t tls_sessions;		/* sessions over TLS now (gauge) */
	uint64_t tls_handshakes;	/* TLS handshakes completed */
	uint64_t tls_handshake_failures;	/* failed or timed out */
	/* the admin words answered (the admin view), by word */
	uint64_t admin_locks, admin_sessions, admin_kills, admin_frees;
};

/*
 * Per-app counters (appstats.c), by app name: one row per name any access
 * list has had since the broker started, kept across reloads (a counter
 * never goes back, and sessions of an app outlive a reload).
 */
struct appstat {
	TAILQ_ENTRY(appstat) link;
	char name[64 + 1];		/* ACL_NAME_MAX */
	uint64_t sessions;		/* sessions of the app now (gauge) */
	uint64_t denials;		/* its requests answered ERR DENIED */
	/* Its sessions' ACQUIRE waits (those of acquire_wait): own_wait for
	 * the first APP_WAIT_MAX names, else (and for an app named "other")
	 * the broker's app_wait_other, so /metrics stays bounded. */
	struct histo *wait;
	struct histo own_wait;
};

/* Apps with a wait histogram of their own (the rest: app="other"). */
#define APP_WAIT_MAX 64
#define APP_OTHER "other"

struct broker {
	struct event_base *base;
	struct config *cfg;
	struct locks *locks;
	struct store *store;
	struct evconnlistener *listener;	/* TCP */
	struct evconnlistener *ulistener;	/* unix socket, if any */
	struct evconnlistener *tlistener;	/* TLS, if any */
	struct tls *tls;			/* its context (tls.c) */
	TAILQ_HEAD(, handshake) handshakes;	/* TLS, not done yet */
	size_t nhandshakes;			/* each counts as a session
						 * against max_sessions */
	struct httpd *http;			/* /metrics, if any */
	TAILQ_HEAD(, session) sessions;
	size_t nsessions;
	TAILQ_HEAD(, grace) graces;	/* grace.c */
	struct acl *acl;		/* acl_file (+ auth_token's app), or
					 * NULL when acl_file is "" */
	struct acl *fenced;		/* fenced_write_keys' globs, one app
					 * (fenced.c), NULL when "" */
	TAILQ_HEAD(, appstat) appstats;	/* appstats.c */
	size_t napp_waits;		/* rows with a wait histogram of their
					 * own (at most APP_WAIT_MAX) */
	struct histo app_wait_other;	/* the other rows' waits */
	int app_wait_other_used;	/* a row counts into it */
	struct keytab *by_id;		/* sessions by client-id (OWNER, KILL) */
	struct admin *admin;		/* admin.c: KILLs under way */
	struct names *names;		/* names.c: HELLO names kept fresh */
	char id[CLIENTID_LEN + 1];	/* this broker's id */
	char *linebuf;			/* max_line + 2 bytes, one request */
	struct broker_stats stats;
	int64_t started_ms;
	int64_t refused_logged_ms;	/* last "max_sessions reached" line */
	int64_t accept_err_logged_ms;	/* last "accept: <error>" line */
	uint64_t accept_err_unlogged;	/* accept errors since, not logged */
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
int server_listen_tls(struct broker *b, char *err, size_t errlen);
/* Stop accepting and end every session (their locks are released). */
void server_stop(struct broker *b);

/* metrics.c: serve /metrics when metrics_port is set. */
int metrics_start(struct broker *b, char *err, size_t errlen);
void metrics_stop(struct broker *b);

/* handshake.c: a TLS connection until its handshake is done (then a
 * session), failed, or past tls_handshake_timeout_ms.  Takes fd. */
void handshake_start(struct broker *b, int fd, const struct sockaddr *sa);
/* End every handshake in progress (at stop). */
void handshake_stop_all(struct broker *b);

/* session.c.  ssl NULL: a plain session; else a TLS one, its handshake
 * done (the session takes ssl), peer_cn the verified client
 * certificate's CN or "". */
struct session *session_new(struct broker *b, int fd, struct ssl_st *ssl,
    const char *peer_cn);
void session_free(struct session *s);

/* fenced.c: the globs of cfg's fenced_write_keys (*out NULL when it is
 * empty: fenced writes off for sessions of no app); -1 with err for a bad
 * list.  fenced_install puts them in force (start-up, SIGHUP). */
int fenced_globs(const struct config *cfg, struct acl **out, char *err,
    size_t errlen);
void fenced_install(struct broker *b, struct acl *globs);
/* admin.c: the admin view (LOCKS, SESSIONS, KILL, FREE).  The store's
 * kill and killed hooks: a KILL of another broker for session cid
 * (request: for store_kill_told), and the answer to one of ours. */
struct admin *admin_new(struct broker *b);
void admin_free(struct admin *a);
void admin_kill_heard(struct broker *b, const char *cid, size_t cidlen,
    const char *request, size_t requestlen);
void admin_killed_heard(struct broker *b, const char *broker, size_t len,
    unsigned long long seq);

/* names.c: keeps the HELLO names of sessions fresh in Redis. */
struct names *names_new(struct broker *b);
void names_free(struct names *n);

/* appstats.c: the row of app name (made if new; never NULL). */
struct appstat *appstat_get(struct broker *b, const char *name);
/* A row for every app of acl, so /metrics shows them before use. */
void appstats_add_acl(struct broker *b, const struct acl *acl);
void appstats_free(struct broker *b);

#endif
