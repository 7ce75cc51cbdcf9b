/*
 * session_int.h - what the files of a session share, and nothing else:
 * the session itself, its lines out, and the entry points between them.
 *
 * A session is one client connection's protocol (session.c, which says
 * how it runs).  Its files, lowest first (tests/layers ranks them):
 *   wire.c     lines out: a reply, an error, a reply lost (broken)
 *   auth.c     who the session is and what it may see and touch: the
 *              index of sessions by client-id, AUTH, apps and their keys
 *   fenced.c   writes fenced by a hold (SETIF, DELIF): which data keys a
 *              session may write
 *   news.c     what comes back later from below, in wire words: the lock
 *              table's replies and losses, grace sessions, ASYNC waits,
 *              watched keys' states
 *   session.c  lines in, dispatch, the requests, a session's life
 */
#ifndef LOCKBROKER_SESSION_INT_H
#define LOCKBROKER_SESSION_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "broker.h"
#include "clientid.h"
#include "keytab.h"
#include "proto.h"
#include "tls.h"

struct acl_app;
struct appstat;
struct awaits;
struct evbuffer;
struct grace;
struct lclient;
struct stream;
struct watches;
struct lk_result;
struct admin_req;

/* "[" IPv6 "]:" port, NUL */
#define ADMIN_PEER_MAX 56

/*
 * The client's address, kept in binary and written out only for SESSIONS
 * and the admin words' log lines: most sessions are never listed, and an
 * idle session's size is what 10,000 of them cost.
 */
struct peer_addr {
	uint8_t family;			/* AF_UNSPEC ("-"), AF_UNIX, AF_INET,
					 * AF_INET6 */
	uint16_t port;			/* host order */
	uint8_t ip[16];			/* AF_INET: the first 4 */
};

struct session {
	struct broker *b;
	struct stream *st;		/* its bytes, plain or TLS */
	struct evbuffer *out;		/* the stream's output: replies */
	struct lclient *cl;
	struct grace *grace;		/* HELLO ... GRACE, or RESUME */
	struct awaits *aw;		/* ASYNC waits, made at the first */
	struct watches *wa;		/* WATCHed keys, made at the first */
	TAILQ_ENTRY(session) link;
	struct keytab_entry by_id;	/* in b->by_id while indexed */
	const struct acl_app *app;	/* NULL: no app (every key) */
	struct appstat *appstat;	/* app's counters, with app */
	char id[CLIENTID_LEN + 1];
	enum proto_cmd cmd;		/* the request in progress */
	unsigned busy:1;		/* a request awaits its reply */
	unsigned dispatching:1;		/* inside on_lines() */
	unsigned events:1;		/* EVENTS ON */
	unsigned wanted:1;		/* ... WANTED (1.2) */
	unsigned authed:1;		/* AUTH passed (or none needed) */
	unsigned broken:1;		/* reply lost: free, send no more */
	unsigned tls:1;			/* over TLS (counted in tls_sessions) */
	unsigned quit:1;		/* ended by QUIT */
	unsigned used:1;		/* took or asked for locks: no RESUME */
	unsigned killed:1;		/* resumed by another connection */
	unsigned stashed:1;		/* a grant's OK waits (await_record),
					 * and here it is */
	unsigned indexed:1;		/* by_id is in b->by_id */
	unsigned owner_value:1;		/* the OWNER in progress has VALUE */
	unsigned all:1;			/* ... is an ALL form (1.2) */
	unsigned local:1;		/* on the unix socket or a loopback
					 * address (admin_local) */
	unsigned ended:1;		/* KILLed by an admin: closing, its
					 * locks freed already */
	unsigned await_record;		/* a grant's OK waits for its record
					 * writes: how many (ACQUIRE ALL: one
					 * per key) */
	long long stash_token;
	long long *stash_tokens;	/* ... ACQUIRE ALL's (stash_n) */
	size_t stash_n;
	struct relall *relall;		/* a RELEASE ALL in progress */
	/* the admin view (admin.c, names.c) */
	char *name;			/* its HELLO name (NULL: none) */
	struct peer_addr peer;
	int64_t born_ms;		/* accepted then (SESSIONS' age) */
	int64_t name_ms;		/* its name written in Redis then (0:
					 * not written) */
	struct admin_req *areq;		/* an admin request in progress */
};

/* wire.c */
void send_ok_num(struct session *s, long long n);
void send_line(struct session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void send_err(struct session *s, enum proto_err code, const char *why);
void broken(struct session *s);
void answered(struct session *s);
void send_held(struct session *s);
enum lk_status;
enum proto_err status_err(enum lk_status st);

/* auth.c */
void index_add(struct session *s);
void index_del(struct session *s);
int owner_visible(const struct session *s, const char *owner, size_t len);
int session_set_app(struct session *s, const struct acl_app *app);
int key_denied(struct session *s, const struct proto_req *req);
void cmd_auth(struct session *s, const struct proto_req *req);
int allowed_before_auth(const char *line, size_t len);

/* fenced.c: SETIF, DELIF, their data keys checked first */
void cmd_fenced(struct session *s, const struct proto_req *req);

/* news.c */
extern const struct lk_client_ops session_client_ops;
/* A grace session's news (grace_ops, given by session.c). */
enum grace_status;
void news_grace_answer(void *arg, enum grace_status st, const char *cid,
    const char *secret, const char *why);
void news_grace_resumed(void *arg, struct grace *g, struct lclient *cl,
    const char *cid);
void news_grace_recorded(void *arg, const char *key, size_t keylen);
void news_grace_dropped(void *arg);
void news_grace_wait_found(void *arg, const char *key, size_t keylen,
    const char *val);
void news_grace_watch_found(void *arg, const char *key, size_t keylen);
struct awaits *session_awaits(struct session *s);
struct watches *session_watches(struct session *s);
int watch_key(struct session *s, const char *key, size_t keylen);
/* RELEASE ALL: started; its next key released, or its line sent, from
 * the session's own turn (on_lines). */
void news_relall_start(struct session *s, const struct proto_req *req);
void news_relall_step(struct session *s);
void news_relall_free(struct session *s);

/* names.c: the HELLO name in Redis, for LOCKS on every broker */
void names_hello(struct session *s, const char *name, size_t len);
void names_held(struct session *s);
void names_gone(struct session *s, int detached);

/* admin.c: the admin words and what they need of a session */
void admin_peer(struct session *s, int fd);
void admin_dispatch(struct session *s, const struct proto_req *req);
void admin_session_gone(struct session *s);

#endif
