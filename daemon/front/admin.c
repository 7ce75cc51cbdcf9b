/*
 * admin.c - the admin view (protocol 1.2): LOCKS (who holds what, through
 * every broker), SESSIONS (this broker's sessions), KILL (end a session
 * wherever it lives) and FREE (end every hold of one key), for the
 * sessions allowed to use them (admin_allowed), each logged (who, what,
 * which session or key) and counted.  Every other session is answered
 * ERR DENIED and nothing changes.
 *
 * KILL of a session of this broker ends it at once (kill_session): EVENT
 * LOST per hold with EVENTS ON, its holds freed as QUIT frees them (no
 * grace), its queued waits dropped, its grace record ended, its
 * connection closed within KILL_CLOSE_MS.  Of another broker's session:
 * the request goes out through Redis pub/sub (store_kill_ask); the broker
 * that has the session ends it the same way and answers.  When none
 * answers within KILL_WAIT_MS no live broker has it: a grace record it
 * left (a detached session of a broker that died) is ended in Redis
 * itself, and its keys freed by owner (store_forget), which wakes their
 * waiters on every broker as a release does.
 *
 * FREE is one script call (free.lua) that deletes every hold of the key
 * and tells every broker ("freed <key> <token>"): each one's holders of
 * the key lose their holds at once (locks_store_freed), and the waiters of
 * every broker are woken as by a release.
 */
#include "acl.h"
#include "awaits.h"
#include "grace.h"
#include "locks.h"
#include "log.h"
#include "session_int.h"
#include "store.h"
#include "stream.h"
#include "util.h"
#include "watches.h"

#include <event2/event.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define KILL_WAIT_MS 1000	/* the owner's answer, at most */
#define KILL_CLOSE_MS 1000	/* a victim's connection closed by then */
/* An ended record's tombstone: a RESUME of a KILLed session answers that
 * it ended, as after QUIT (grace_int.h's TOMBSTONE_MS). */
#define KILL_TOMBSTONE_MS 21000
#define REPLY_MAX 65536		/* a reply stays under 64 KiB, CRLF in */
#define REPLY_HEAD 96		/* "OK <cursor> <n>" and CRLF */
#define ENTRY_KEY_MAX 4096	/* a key LOCKS shows: max_key_len's most */

/* A request of an admin word waiting for Redis, or (KILL) for the
 * session's owner: whose it is, and what it needs then. */
struct admin_req {
	struct broker *b;
	struct session *s;		/* NULL: gone, nobody to answer */
	TAILQ_ENTRY(admin_req) link;	/* KILL: in kills while it waits */
	unsigned long long seq;		/* KILL: its number on the wire */
	struct event *timer;		/* KILL: the owner's answer's deadline */
	char cid[CLIENTID_LEN + 1];	/* KILL: the victim */
	size_t keylen;			/* FREE: the key */
	char key[];
};

struct admin {
	struct broker *b;
	TAILQ_HEAD(, admin_req) kills;	/* asked, no answer yet */
	unsigned long long seq;
};

struct admin *
admin_new(struct broker *b)
{
	struct admin *a = xcalloc(1, sizeof *a);

	a->b = b;
	TAILQ_INIT(&a->kills);
	return a;
}

static void
req_free(struct admin_req *q)
{
	if (q->timer != NULL)
		event_free(q->timer);
	free(q);
}

void
admin_free(struct admin *a)
{
	struct admin_req *q;

	if (a == NULL)
		return;
	while ((q = TAILQ_FIRST(&a->kills)) != NULL) {
		TAILQ_REMOVE(&a->kills, q, link);
		req_free(q);
	}
	free(a);
}

/* A request of s (keylen bytes of key after it). */
static struct admin_req *
req_new(struct session *s, const char *key, size_t keylen)
{
	struct admin_req *q = xcalloc(1, sizeof *q + keylen + 1);

	q->b = s->b;
	q->s = s;
	q->keylen = keylen;
	if (keylen > 0)
		memcpy(q->key, key, keylen);
	return q;
}

/* Wait for q's answer: the session's later lines wait behind it. */
static void
req_wait(struct session *s, struct admin_req *q)
{
	s->areq = q;
	s->busy = 1;
}

/* q's answer (a line, or none when its session is gone); q is freed. */
static void
req_answer(struct admin_req *q, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
req_answer(struct admin_req *q, const char *fmt, ...)
{
	struct session *s = q->s;
	char line[256];
	va_list ap;

	if (s != NULL) {
		va_start(ap, fmt);
		vsnprintf(line, sizeof line, fmt, ap);
		va_end(ap);
		s->areq = NULL;
		send_line(s, "%s", line);
		answered(s);
	}
	req_free(q);
}

void
admin_session_gone(struct session *s)
{
	if (s->areq != NULL) {
		s->areq->s = NULL;	/* its answer goes nowhere */
		s->areq = NULL;
	}
}

/* --- who may, and who did ---------------------------------------------- */

void
admin_peer(struct session *s, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	struct peer_addr *pa = &s->peer;

	memset(pa, 0, sizeof *pa);	/* AF_UNSPEC: "-" */
	s->local = 0;
	if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) {
		log_debug("client %s: getpeername: %s", s->id, strerror(errno));
		return;
	}
	if (ss.ss_family == AF_UNIX) {
		pa->family = AF_UNIX;
		s->local = 1;
	} else if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)&ss;

		pa->family = AF_INET;
		pa->port = ntohs(in->sin_port);
		memcpy(pa->ip, &in->sin_addr, 4);
		s->local = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)&ss;
		const unsigned char *a = in6->sin6_addr.s6_addr;

		pa->family = AF_INET6;
		pa->port = ntohs(in6->sin6_port);
		memcpy(pa->ip, a, 16);
		s->local = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
		    (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && a[12] == 127);
	}
}

/* pa as SESSIONS shows it: "ip:port", "[ip]:port", "unix" or "-". */
static void
peer_text(const struct peer_addr *pa, char *out, size_t outlen)
{
	char ip[INET6_ADDRSTRLEN];
	int af = pa->family == AF_INET ? AF_INET : AF_INET6;

	if (pa->family == AF_UNIX) {
		snprintf(out, outlen, "unix");
	} else if ((pa->family == AF_INET || pa->family == AF_INET6) &&
	    inet_ntop(af, pa->ip, ip, sizeof ip) != NULL) {
		snprintf(out, outlen, af == AF_INET ? "%s:%u" : "[%s]:%u", ip,
		    (unsigned)pa->port);
	} else {
		snprintf(out, outlen, "-");
	}
}

/*
 * With an acl_file, only a session of an app whose line ends in "admin"
 * (never auth_token's app "default"); without one, a session on the unix
 * socket or a loopback address that passed AUTH where auth_token is set,
 * unless admin_local is no.
 */
static int
admin_allowed(const struct session *s)
{
	if (s->b->acl != NULL)
		return s->app != NULL && acl_app_admin(s->app);
	return s->b->cfg->admin_local && s->local && s->authed;
}

static void
denied(struct session *s)
{
	const struct broker *b = s->b;

	s->b->stats.denials++;
	if (s->appstat != NULL)
		s->appstat->denials++;
	log_debug("client %s: admin word %s denied", s->id,
	    proto_cmd_name(s->cmd));
	send_err(s, PERR_DENIED, b->acl != NULL ? "admin words are for apps "
	    "marked admin in the acl_file" : b->cfg->admin_local ? "admin words "
	    "are for sessions on the unix socket or a loopback address" :
	    "admin words are off on this broker (admin_local no)");
}

/* "client <id> (app <app>, <peer>)" for log lines. */
static const char *
who(const struct session *s)
{
	static char buf[160];		/* one log line at a time */
	char peer[ADMIN_PEER_MAX];

	peer_text(&s->peer, peer, sizeof peer);
	snprintf(buf, sizeof buf, "client %s (%s%s%s%s)", s->id,
	    s->app != NULL ? "app " : "", s->app != NULL ?
	    acl_app_name(s->app) : "", s->app != NULL ? ", " : "", peer);
	return buf;
}

/* A client-id as HELLO gives them: a lower-case UUID. */
static int
cid_ok(const char *p, size_t len)
{
	if (len != CLIENTID_LEN)
		return 0;
	for (size_t i = 0; i < len; i++) {
		int dash = i == 8 || i == 13 || i == 18 || i == 23;

		if (dash ? p[i] != '-' : !((p[i] >= '0' && p[i] <= '9') ||
		    (p[i] >= 'a' && p[i] <= 'f')))
			return 0;
	}
	return 1;
}

/* p[0..len) into out when it is a client-id: 0, else -1. */
static int
cid_read(const char *p, size_t len, char out[CLIENTID_LEN + 1])
{
	if (!cid_ok(p, len))
		return -1;
	memcpy(out, p, CLIENTID_LEN);
	out[CLIENTID_LEN] = '\0';
	return 0;
}

/* --- LOCKS --------------------------------------------------------------- */

static int
key_shown(const char *p, size_t len)
{
	if (len == 0 || len > ENTRY_KEY_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)p[i] < 0x21 || (unsigned char)p[i] > 0x7e)
			return 0;
	return 1;
}

/* One entry's 9 words after a blank, into buf (room bytes); its length,
 * or 0 when it does not fit. */
static size_t
entry_text(struct broker *b, const struct store_lock_entry *e, char *buf,
    size_t room)
{
	char kind[24];
	long long age = locks_hold_age(b->locks, e->key, e->keylen, e->token);
	size_t olen = e->ownerlen > OWNER_MAX ? OWNER_MAX : e->ownerlen;
	int n;

	if (e->kind == STORE_EXCLUSIVE)
		memcpy(kind, "lock", 5);
	else if (e->kind == 0)
		memcpy(kind, "shared", 7);
	else
		snprintf(kind, sizeof kind, "sem/%ld", e->kind);
	n = snprintf(buf, room, " %.*s %s %.*s %.*s %lld %lld %lld %zu %.*s",
	    (int)e->keylen, e->key, kind, (int)olen, e->owner,
	    e->name != NULL ? (int)e->namelen : 1, e->name != NULL ? e->name :
	    "-", e->token, age >= 0 ? age : e->age_ms, e->pttl,
	    locks_waiting(b->locks, e->key, e->keylen),
	    e->value != NULL ? (int)e->valuelen : 1, e->value != NULL ?
	    e->value : "-");
	return n > 0 && (size_t)n < room ? (size_t)n : 0;
}

/*
 * OK <next-cursor> <n> then n entries of 9 words, one per holder; entries
 * that would take the line to REPLY_MAX wait for the next page (whose
 * cursor is then the last shown entry's).
 */
static void
locks_done(void *arg, int ok, const struct store_lock_entry *e, size_t n,
    const char *next)
{
	struct admin_req *q = arg;
	struct session *s = q->s;
	size_t len = 0, shown = 0;
	const char *cursor = next;
	char *buf;

	if (s == NULL) {
		req_free(q);
		return;
	}
	if (!ok) {
		req_answer(q, "ERR UNAVAILABLE Redis did not answer");
		return;
	}
	buf = xmalloc(REPLY_MAX);
	for (size_t i = 0; i < n; i++) {
		size_t one;

		if (!key_shown(e[i].key, e[i].keylen))
			continue;	/* bytes no broker writes as a key */
		if ((one = entry_text(q->b, &e[i], buf + len, REPLY_MAX -
		    REPLY_HEAD - len)) == 0) {
			/* full: on from the last one shown (an entry is a
			 * few KB at most, so one always fits) */
			cursor = i > 0 ? e[i - 1].cursor : next;
			break;
		}
		len += one;
		shown++;
	}
	s->areq = NULL;
	send_line(s, "OK %s %zu%.*s", cursor, shown, (int)len, buf);
	free(buf);
	answered(s);
	req_free(q);
}

static void
cmd_locks(struct session *s, const struct proto_req *req)
{
	struct broker *b = s->b;
	const char *cur = req->word2 != NULL ? req->word2 : "";
	size_t curlen = req->word2 != NULL ? req->word2len : 0;
	int first = curlen == 0 || (curlen == 1 && cur[0] == '0'), rc;
	struct admin_req *q;
	char why[1200];

	if (req->word != NULL &&
	    !acl_glob_ok(req->word, req->wordlen, why, sizeof why)) {
		send_line(s, "ERR BADARG bad glob: %s", why);
		return;
	}
	q = req_new(s, NULL, 0);
	rc = store_locks(b->store, req->word, req->word != NULL ?
	    req->wordlen : 0, cur, curlen, req->limit > 0 ?
	    (size_t)req->limit : STORE_LOCKS_MAX, locks_done, q);
	if (rc != 0) {
		req_free(q);
		send_err(s, rc == STORE_BADCURSOR ? PERR_BADARG :
		    PERR_UNAVAILABLE, rc == STORE_BADCURSOR ? "CURSOR is not "
		    "one a LOCKS reply gave (none, or 0, starts)" :
		    "Redis is unreachable");
		return;
	}
	b->stats.admin_locks++;
	if (first)
		log_info("admin %s: LOCKS %.*s", who(s), req->word != NULL ?
		    (int)req->wordlen : 1, req->word != NULL ? req->word : "*");
	else
		log_debug("admin %s: LOCKS %.*s, page at %.*s", who(s),
		    req->word != NULL ? (int)req->wordlen : 1, req->word !=
		    NULL ? req->word : "*", (int)curlen, cur);
	req_wait(s, q);
}

/* --- SESSIONS ------------------------------------------------------------ */

/* One line of SESSIONS. */
struct srow {
	char id[CLIENTID_LEN + 1];
	char name[PROTO_NAME_MAX + 1];
	char app[ACL_NAME_MAX + 1];
	char peer[ADMIN_PEER_MAX];
	long long age_ms;
	size_t held;
	long grace_ms;
};

/* The page: the limit smallest client-ids after `after`, in order. */
struct spage {
	const char *after;		/* NULL: from the first */
	struct srow *rows;
	size_t n, limit, total;
	int64_t now;
};

static void
srow_offer(struct spage *p, const struct srow *r)
{
	size_t at;

	if (p->after != NULL && strcmp(r->id, p->after) <= 0)
		return;
	p->total++;
	if (p->n == p->limit && strcmp(r->id, p->rows[p->n - 1].id) >= 0)
		return;
	for (at = p->n; at > 0 && strcmp(r->id, p->rows[at - 1].id) < 0; at--)
		;
	if (p->n < p->limit)
		p->n++;
	memmove(&p->rows[at + 1], &p->rows[at], (p->n - 1 - at) *
	    sizeof p->rows[0]);
	p->rows[at] = *r;
}

static void
offer_detached(void *arg, const struct grace_detached *d)
{
	struct srow r;

	snprintf(r.id, sizeof r.id, "%s", d->cid);
	snprintf(r.name, sizeof r.name, "%s", d->name[0] ? d->name : "-");
	snprintf(r.app, sizeof r.app, "%s", d->app[0] ? d->app : "-");
	memcpy(r.peer, "-", 2);
	r.age_ms = d->since_ms;
	r.held = d->held;
	r.grace_ms = d->left_ms;
	srow_offer(arg, &r);
}

static void
cmd_sessions(struct session *s, const struct proto_req *req)
{
	struct broker *b = s->b;
	struct spage p = { .limit = req->limit > 0 ? (size_t)req->limit :
	    PROTO_PAGE_MAX, .now = now_ms() };
	char after[CLIENTID_LEN + 1];
	const struct session *o;
	size_t len;
	char *buf;

	if (req->word2 != NULL && !(req->word2len == 1 &&
	    req->word2[0] == '0')) {
		if (cid_read(req->word2, req->word2len, after) != 0) {
			send_err(s, PERR_BADARG, "CURSOR is not one a SESSIONS "
			    "reply gave (none, or 0, starts)");
			return;
		}
		p.after = after;
	}
	b->stats.admin_sessions++;
	if (p.after == NULL)
		log_info("admin %s: SESSIONS", who(s));
	else
		log_debug("admin %s: SESSIONS after %s", who(s), after);
	p.rows = xcalloc(p.limit + 1, sizeof *p.rows);
	TAILQ_FOREACH(o, &b->sessions, link) {
		struct srow r;

		if (o->ended)
			continue;
		snprintf(r.id, sizeof r.id, "%s", o->id);
		snprintf(r.name, sizeof r.name, "%s", o->name != NULL ?
		    o->name : "-");
		snprintf(r.app, sizeof r.app, "%s", o->app != NULL ?
		    acl_app_name(o->app) : "-");
		peer_text(&o->peer, r.peer, sizeof r.peer);
		r.age_ms = (long long)(p.now - o->born_ms);
		r.held = o->cl != NULL ? locks_held(o->cl, NULL, NULL) : 0;
		r.grace_ms = o->grace != NULL ? grace_ms(o->grace) : 0;
		srow_offer(&p, &r);
	}
	grace_each_detached(b, offer_detached, &p);
	buf = xmalloc(REPLY_MAX);
	len = 0;
	for (size_t i = 0; i < p.n; i++) {
		const struct srow *r = &p.rows[i];
		int k = snprintf(buf + len, REPLY_MAX - REPLY_HEAD - len,
		    " %s %s %s %s %lld %zu %ld", r->id, r->name, r->app,
		    r->peer, r->age_ms, r->held, r->grace_ms);

		if (k > 0)	/* 100 rows of at most ~280 bytes: fits */
			len += (size_t)k;
	}
	send_line(s, "OK %s %zu%.*s", p.total > p.n ? p.rows[p.n - 1].id :
	    "0", p.n, (int)len, buf);
	free(buf);
	free(p.rows);
}

/* --- KILL ----------------------------------------------------------------- */

/* The connected session of this broker with client-id cid, or NULL. */
static struct session *
session_of(const struct broker *b, const char *cid)
{
	struct keytab_entry *e;

	if (b->by_id == NULL ||
	    (e = keytab_find(b->by_id, cid, CLIENTID_LEN)) == NULL)
		return NULL;
	return (struct session *)(void *)((char *)e -
	    offsetof(struct session, by_id));
}

static void
tell_lost(void *arg, const char *key, size_t keylen)
{
	struct session *v = arg;

	send_line(v, "EVENT LOST %.*s %lld", (int)keylen, key,
	    locks_token_of(v->cl, key, keylen));
}

/*
 * End connected session v now, for good: EVENT LOST per hold (EVENTS
 * ON), then its holds freed as after QUIT (no grace), its waits dropped,
 * its grace record ended; the connection closes once that is flushed,
 * within KILL_CLOSE_MS.  The session stays (unlisted, unfound) until its
 * stream is closed, holding nothing.
 */
static void
kill_session(struct session *v)
{
	log_info("client %s: ended by an admin (KILL): %zu lock(s) freed, its "
	    "connection closed", v->id, v->cl != NULL ? locks_held(v->cl,
	    NULL, NULL) : 0);
	v->ended = 1;
	index_del(v);
	admin_session_gone(v);		/* its own admin request: nobody's */
	if (v->events && v->cl != NULL)
		locks_held(v->cl, tell_lost, v);
	awaits_free(v->aw);		/* queued waits go, before v->cl */
	v->aw = NULL;
	watches_free(v->wa);
	v->wa = NULL;
	names_gone(v, 0);
	v->quit = 1;
	locks_client_clean(v->cl);	/* no lock delay after a KILL */
	if (v->grace != NULL)
		grace_session_end(v->grace, v->cl, GRACE_QUIT);
	else
		locks_client_free(v->cl);
	v->grace = NULL;
	v->cl = NULL;
	stream_close_in(v->st, KILL_CLOSE_MS);
	stream_more(v->st);		/* flush the EVENT lines, then close */
}

/* End session cid if this broker has it (connected or detached): 1. */
static int
kill_here(struct broker *b, const char *cid)
{
	struct session *v = session_of(b, cid);

	if (v != NULL && !v->ended) {
		kill_session(v);
		return 1;
	}
	return grace_kill(b, cid);
}

static void
no_answer(void *arg, int ok, int released)
{
	(void)arg;
	(void)ok;
	(void)released;
}

/* kill.lua's "end": no broker had the session; Redis may have its
 * record.  Its keys are freed by owner (the record's generation: a
 * resumed session's holds carry it). */
static void
kill_ended(void *arg, int ok, int found, unsigned long gen,
    const struct store_str *keys, size_t n)
{
	struct admin_req *q = arg;
	char owner[OWNER_MAX + 24];	/* "<cid>/<gen>", gen of 32 bits */

	if (!ok) {
		req_answer(q, "ERR UNAVAILABLE Redis did not answer; no broker "
		    "answered for the session");
		return;
	}
	if (!found) {
		log_info("KILL %s: no such session", q->cid);
		req_answer(q, "OK 0");
		return;
	}
	if (gen > 1)
		snprintf(owner, sizeof owner, "%s/%lu", q->cid, gen);
	else
		snprintf(owner, sizeof owner, "%s", q->cid);
	for (size_t i = 0; i < n; i++)
		if (store_forget(q->b->store, keys[i].p, keys[i].len, owner,
		    strlen(owner), no_answer, NULL) != 0)
			log_warn("KILL %s: key '%.*s' not freed (Redis "
			    "unreachable); it expires at its TTL", q->cid,
			    (int)keys[i].len, keys[i].p);
	log_info("KILL %s: no broker answered for it; its grace record was "
	    "ended in Redis and its %zu key(s) freed", q->cid, n);
	req_answer(q, "OK 1");
}

/* No owner answered in time: end what Redis may keep of the session. */
static void
kill_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct admin_req *q = arg;

	(void)fd;
	(void)what;
	TAILQ_REMOVE(&q->b->admin->kills, q, link);
	if (store_kill_end(q->b->store, q->cid, CLIENTID_LEN, KILL_TOMBSTONE_MS,
	    kill_ended, q) != 0)
		req_answer(q, "ERR UNAVAILABLE Redis is unreachable; no broker "
		    "answered for the session");
}

static void
cmd_kill(struct session *s, const struct proto_req *req)
{
	struct broker *b = s->b;
	struct admin *a = b->admin;
	struct admin_req *q;
	char cid[CLIENTID_LEN + 1];

	if (cid_read(req->word, req->wordlen, cid) != 0) {
		send_err(s, PERR_BADARG, "not a client-id (a lower-case UUID, "
		    "as HELLO gives)");
		return;
	}
	b->stats.admin_kills++;
	log_info("admin %s: KILL %s", who(s), cid);
	if (session_of(b, cid) == s) {
		send_line(s, "OK 1");	/* its own: the answer first */
		kill_session(s);
		return;
	}
	if (kill_here(b, cid)) {
		send_line(s, "OK 1");
		return;
	}
	q = req_new(s, NULL, 0);
	memcpy(q->cid, cid, sizeof q->cid);
	q->seq = ++a->seq;
	if (store_kill_ask(b->store, cid, CLIENTID_LEN, q->seq, no_answer,
	    NULL) != 0) {
		req_free(q);
		send_err(s, PERR_UNAVAILABLE, "Redis is unreachable: the "
		    "session's broker cannot be asked");
		return;
	}
	if ((q->timer = evtimer_new(b->base, kill_timeout, q)) == NULL)
		fatalx("cannot create a KILL timer");
	timer_add_ms(q->timer, KILL_WAIT_MS);
	TAILQ_INSERT_TAIL(&a->kills, q, link);
	req_wait(s, q);
}

void
admin_kill_heard(struct broker *b, const char *cid, size_t cidlen,
    const char *request, size_t requestlen)
{
	char id[CLIENTID_LEN + 1];

	if (b->stopping || cid_read(cid, cidlen, id) != 0)
		return;
	if (!kill_here(b, id))
		return;		/* another broker's, or nobody's */
	log_info("session %s: KILLed at the request of broker %.*s", id,
	    (int)(requestlen > 64 ? 64 : requestlen), request);
	if (store_kill_told(b->store, cid, cidlen, request, requestlen,
	    no_answer, NULL) != 0)
		log_warn("session %s: KILLed, but the asking broker cannot be "
		    "told (Redis unreachable)", id);
}

void
admin_killed_heard(struct broker *b, const char *broker, size_t len,
    unsigned long long seq)
{
	struct admin_req *q;

	if (len != CLIENTID_LEN || memcmp(broker, b->id, len) != 0)
		return;		/* another broker's request */
	TAILQ_FOREACH(q, &b->admin->kills, link)
		if (q->seq == seq)
			break;
	if (q == NULL)
		return;		/* answered already */
	TAILQ_REMOVE(&b->admin->kills, q, link);
	req_answer(q, "OK 1");
}

/* --- FREE ------------------------------------------------------------------ */

static void
free_done(void *arg, int ok, long long n, long long token)
{
	struct admin_req *q = arg;

	if (!ok) {
		req_answer(q, "ERR UNAVAILABLE Redis did not answer");
		return;
	}
	/* this broker's holders lose the key now; the others as "freed"
	 * reaches them (this one too: no hold is left to end then) */
	if (n > 0)
		locks_store_freed(q->b->locks, q->key, q->keylen, token);
	log_info("FREE %.*s: %lld hold(s) freed", (int)q->keylen, q->key, n);
	req_answer(q, "OK %lld", n);
}

static void
cmd_free(struct session *s, const struct proto_req *req)
{
	struct broker *b = s->b;
	struct admin_req *q = req_new(s, req->key, req->keylen);

	if (store_free_key(b->store, req->key, req->keylen, free_done, q) !=
	    0) {
		req_free(q);
		send_err(s, PERR_UNAVAILABLE, "Redis is unreachable");
		return;
	}
	b->stats.admin_frees++;
	log_info("admin %s: FREE %.*s", who(s), (int)req->keylen, req->key);
	req_wait(s, q);
}

void
admin_dispatch(struct session *s, const struct proto_req *req)
{
	if (!admin_allowed(s)) {
		denied(s);
		return;
	}
	switch (req->cmd) {
	case CMD_LOCKS:
		cmd_locks(s, req);
		return;
	case CMD_SESSIONS:
		cmd_sessions(s, req);
		return;
	case CMD_KILL:
		cmd_kill(s, req);
		return;
	case CMD_FREE:
		cmd_free(s, req);
		return;
	default:
		send_err(s, PERR_BADCMD, "unknown command");
		return;
	}
}
