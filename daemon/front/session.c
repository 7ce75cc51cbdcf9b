/*
 * session.c - one client connection's protocol: lines in, one reply per
 * line out.
 *
 * A session runs one request at a time: while a request waits (for a key or
 * for Redis) later lines stay in its stream's input (net/stream.c), which
 * is what keeps replies in request order and makes a waiting ACQUIRE hold
 * back the session's later requests.  The stream moves the bytes, plain
 * or TLS, and applies the limits every client gets alike (line length,
 * input and output bounds, the end of input, close after flush); the
 * session parses each line, runs it, and writes its reply into the
 * stream's output.  Replies from the lock table never run the next
 * request directly: they ask the stream to hand over lines again later
 * (stream_more), so nothing re-enters locks_*.
 *
 * Waits that do not block (ACQUIRE ... ASYNC) are the exception: each is
 * a waiter of its own (awaits.c), so the session goes on, and its outcome
 * comes later as an EVENT line between replies.
 *
 * End of input (the client half-closed, e.g. `nc -N`) is not the end of
 * the session: every line already received is answered, in order, then
 * the session closes after flushing, which releases its locks.  The lock
 * table is told at once (locks_client_eof), so a waiting ACQUIRE is
 * answered BUSY instead of holding a queue place for a client that can no
 * longer give up.  A read or write error (reset, broken pipe) still ends
 * the session at once.
 */
#include "acl.h"
#include "awaits.h"
#include "grace.h"
#include "locks.h"
#include "log.h"
#include "session_int.h"
#include "stats.h"
#include "stream.h"
#include "util.h"
#include "watches.h"

#include <event2/buffer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Another connection resumed this session: close it now, leaving its
 * holds to that connection. */
static void
on_grace_taken(void *arg)
{
	struct session *s = arg;

	s->killed = 1;
	session_free(s);
}

static const struct grace_ops session_grace_ops = { news_grace_answer,
    news_grace_resumed, news_grace_recorded, news_grace_dropped,
    on_grace_taken, news_grace_wait_found, news_grace_watch_found };

static void
cmd_hello(struct session *s, const struct proto_req *req)
{
	long max = s->b->cfg->max_grace_ms, ms = req->grace_ms;

	if (req->word) {
		log_debug("client %s is '%.*s'", s->id, (int)req->wordlen,
		    req->word);
		names_hello(s, req->word, req->wordlen);
	}
	if (req->has_grace && ms > 0 && max == 0) {
		send_err(s, PERR_BADARG, "GRACE is off on this broker "
		    "(max_grace_ms 0)");
		return;
	}
	if (req->has_grace && ms == 0 && s->grace != NULL) {
		send_err(s, PERR_BADARG, "a grace session keeps a grace until "
		    "QUIT; give a small one instead");
		return;
	}
	if (!req->has_grace || ms == 0) {
		send_line(s, "OK %s lockbroker/%s", s->id, LOCKBROKER_VERSION);
		return;
	}
	s->used = 1;
	s->busy = 1;
	grace_hello(s->b, &session_grace_ops, s, &s->grace, s->cl, s->id,
	    ms > max ? max : ms, s->app != NULL ? acl_app_name(s->app) : "");
}

static void
cmd_resume(struct session *s, const struct proto_req *req)
{
	if (s->used || s->grace != NULL) {
		send_err(s, PERR_BADARG, "RESUME must come before any lock "
		    "request or GRACE on a connection");
		return;
	}
	if (s->b->cfg->max_grace_ms == 0) {
		send_err(s, PERR_BADARG, "GRACE is off on this broker "
		    "(max_grace_ms 0)");
		return;
	}
	s->used = 1;
	s->busy = 1;
	s->grace = grace_resume(s->b, &session_grace_ops, s, req->word,
	    req->wordlen, req->word2, req->word2len, s->app != NULL ?
	    acl_app_name(s->app) : "");
}

/* --- requests -------------------------------------------------------- */

/* An ALL request's name, "ALL <n> <key>..." as on the wire: what an
 * ASYNC one is found by (CANCEL ALL) and its EVENT lines carry. */
static char *
all_name(const struct proto_req *req, size_t *len)
{
	size_t cap = 16, l;
	char *name;

	for (int i = 0; i < req->nkeys; i++)
		cap += req->keylens[i] + 1;
	name = xmalloc(cap);
	l = (size_t)snprintf(name, cap, "ALL %d", req->nkeys);
	for (int i = 0; i < req->nkeys; i++) {
		name[l++] = ' ';
		memcpy(name + l, req->keys[i], req->keylens[i]);
		l += req->keylens[i];
	}
	name[l] = '\0';
	*len = l;
	return name;
}

/* ACQUIRE ALL <n> <key>... [WAIT] [TTL] [ASYNC] (1.2). */
static void
cmd_acquire_all(struct session *s, const struct proto_req *req)
{
	long wait_ms = req->has_wait ? req->wait_ms : -1;
	long ttl_ms = req->has_ttl ? req->ttl_ms : 0;
	struct await_info info = { 0 };
	size_t namelen;
	char *name;

	if (s->b->cfg->redis_replica_acks > 0) {
		send_err(s, PERR_BADARG, "ACQUIRE ALL does not wait for "
		    "replicas: not with redis_replica_acks");
		return;
	}
	if (req->async && s->grace != NULL) {
		send_err(s, PERR_BADARG, "ACQUIRE ALL ... ASYNC is not for "
		    "grace sessions (a blocking ACQUIRE ALL is)");
		return;
	}
	s->all = 1;
	if (!req->async) {
		s->used = 1;
		s->busy = 1;
		locks_acquire_all(s->cl, req->keys, req->keylens,
		    (size_t)req->nkeys, wait_ms, ttl_ms);
		return;
	}
	name = all_name(req, &namelen);
	if (awaits_has(s->aw, name, namelen)) {
		free(name);
		send_err(s, PERR_BADARG, "this session already waits for "
		    "these keys");
		return;
	}
	s->used = 1;
	s->busy = 1;
	info.key = name;
	info.keylen = namelen;
	info.kind = LK_EXCLUSIVE;
	info.ttl_ms = ttl_ms;
	info.deadline = wall_ms() + (wait_ms > s->b->cfg->max_wait_ms ?
	    s->b->cfg->max_wait_ms : wait_ms > 0 ? wait_ms : 0);
	info.full = awaits_count(s->aw) >=
	    (size_t)s->b->cfg->max_waiters_per_session;
	info.nkeys = req->nkeys;
	info.keys = req->keys;
	info.keylens = req->keylens;
	awaits_acquire(session_awaits(s), s->cl, &info);
	free(name);
}

static void
cmd_acquire(struct session *s, const struct proto_req *req)
{
	long kind = req->shared ? LK_SHARED : req->limit > 0 ? req->limit :
	    LK_EXCLUSIVE;
	long wait_ms = req->has_wait ? req->wait_ms : -1;
	long ttl_ms = req->has_ttl ? req->ttl_ms : 0;
	struct await_info info = { 0 };

	if (req->nkeys > 0) {
		cmd_acquire_all(s, req);
		return;
	}
	if (req->has_delay && req->delay_ms > s->b->cfg->max_delay_ms) {
		send_line(s, "ERR BADARG DELAY is at most max_delay_ms (%ld)",
		    s->b->cfg->max_delay_ms);
		return;
	}
	if (awaits_has(s->aw, req->key, req->keylen)) {
		send_err(s, PERR_BADARG, req->async ? "this session already "
		    "waits for the key" : "this session waits for the key "
		    "(ASYNC): CANCEL it first");
		return;
	}
	s->used = 1;
	s->busy = 1;
	if (!req->async) {
		locks_acquire_value(s->cl, req->key, req->keylen, kind,
		    wait_ms, ttl_ms, req->value, req->valuelen,
		    req->has_delay ? req->delay_ms : -1);
		return;
	}
	info.key = req->key;
	info.keylen = req->keylen;
	info.kind = kind;
	info.ttl_ms = ttl_ms;
	info.deadline = wall_ms() + (wait_ms > s->b->cfg->max_wait_ms ?
	    s->b->cfg->max_wait_ms : wait_ms > 0 ? wait_ms : 0);
	info.resumed = 0;
	info.value = req->value;
	info.valuelen = req->valuelen;
	info.delay_ms = req->has_delay ? req->delay_ms : -1;
	info.full = awaits_count(s->aw) >=
	    (size_t)s->b->cfg->max_waiters_per_session;
	awaits_acquire(session_awaits(s), s->cl, &info);
}

static void
cmd_watch(struct session *s, const struct proto_req *req)
{
	if (watch_key(s, req->key, req->keylen) < 0) {
		send_err(s, PERR_LIMIT, "this session watches "
		    "max_watches_per_session keys");
		return;
	}
	s->used = 1;
	send_line(s, "OK");
}

static void
cmd_unwatch(struct session *s, const struct proto_req *req)
{
	int n = watches_remove(s->wa, req->key, req->keylen);

	if (n > 0 && s->grace != NULL)
		(void)grace_watch(s->grace, req->key, req->keylen, 0);
	send_line(s, "OK %d", n);
}

static void
cmd_cancel(struct session *s, const struct proto_req *req)
{
	size_t len = req->keylen;
	char *name = req->nkeys > 0 ? all_name(req, &len) : NULL;
	const char *key = name != NULL ? name : req->key;
	int n = awaits_cancel(s->aw, key, len);

	if (n < 0) {
		s->busy = 1;	/* after the grant's EVENT: on_await_cancelled */
	} else {
		if (n > 0 && s->grace != NULL)
			(void)grace_wait(s->grace, key, len, NULL);
		send_line(s, "OK %d", n);
	}
	free(name);
}

/* Run one parsed request.  Sets busy when the reply comes later. */
static void
dispatch(struct session *s, const struct proto_req *req)
{
	s->cmd = req->cmd;
	s->all = 0;
	switch (req->cmd) {
	case CMD_HELLO:
		cmd_hello(s, req);
		return;
	case CMD_RESUME:
		cmd_resume(s, req);
		return;
	case CMD_PING:
		send_line(s, "OK PONG");
		return;
	case CMD_QUIT:
		s->quit = 1;
		send_line(s, "OK");
		stream_close(s->st);
		return;
	case CMD_HELD:
		send_held(s);
		return;
	case CMD_STATS:
		if (stats_line(s->b, s->out) != 0)
			broken(s);
		return;
	case CMD_EVENTS:
		s->events = (unsigned)req->on;
		s->wanted = (unsigned)req->wanted;
		locks_client_notices(s->cl, req->wanted);
		send_line(s, "OK");
		return;
	case CMD_AUTH:
		cmd_auth(s, req);
		return;
	case CMD_ACQUIRE:
		if (key_denied(s, req))
			return;
		cmd_acquire(s, req);
		return;
	case CMD_RELEASE:
		if (key_denied(s, req))
			return;
		if (req->nkeys > 0) {
			news_relall_start(s, req);
			return;
		}
		s->busy = 1;
		locks_release(s->cl, req->key, req->keylen,
		    req->has_linger ? req->linger_ms : 0);
		return;
	case CMD_RENEW:
		if (key_denied(s, req))
			return;
		s->busy = 1;
		locks_renew(s->cl, req->key, req->keylen,
		    req->has_ttl ? req->ttl_ms : 0);
		return;
	case CMD_OWNER:
		if (key_denied(s, req))
			return;
		s->busy = 1;
		s->owner_value = req->with_value != 0;
		if (req->with_value)
			locks_owner_value(s->cl, req->key, req->keylen);
		else
			locks_owner(s->cl, req->key, req->keylen);
		return;
	case CMD_CANCEL:
		if (key_denied(s, req))
			return;
		cmd_cancel(s, req);
		return;
	case CMD_CHECK:
		if (key_denied(s, req))
			return;
		s->busy = 1;
		locks_check(s->cl, req->key, req->keylen, req->token);
		return;
	case CMD_PROCLAIM:
		if (key_denied(s, req))
			return;
		s->busy = 1;
		locks_proclaim(s->cl, req->key, req->keylen, req->value,
		    req->valuelen);
		return;
	case CMD_WATCH:
		if (key_denied(s, req))
			return;
		cmd_watch(s, req);
		return;
	case CMD_UNWATCH:
		cmd_unwatch(s, req);
		return;
	case CMD_SETIF:
	case CMD_DELIF:
		cmd_fenced(s, req);
		return;
	case CMD_LOCKS:
	case CMD_SESSIONS:
	case CMD_KILL:
	case CMD_FREE:
		admin_dispatch(s, req);
		return;
	case CMD__COUNT:
		break;
	}
	send_err(s, PERR_BADCMD, "unknown command");
}

/* --- the stream's lines ------------------------------------------- */

/* Run the lines the stream has, one request at a time (ops->lines). */
static int
on_lines(void *arg)
{
	struct session *s = arg;
	struct broker *b = s->b;
	struct proto_limits lim = { (size_t)b->cfg->max_key_len,
	    (size_t)b->held_key_len };

	s->dispatching = 1;
	/* states of watched keys the client was not reading when they came
	 * (its output has drained, or it sent more) */
	watches_flush(s->wa);
	news_relall_step(s);	/* a RELEASE ALL's next key, or its line */
	while (!s->busy) {
		struct proto_req req;
		enum proto_err err;
		const char *why;
		int empty;
		long len = stream_line(s->st, b->linebuf);

		if (len == STREAM_PAUSED) {
			/* The client is not reading: neither do we, until
			 * the stream sees the output drained. */
			b->stats.paused++;
			break;
		}
		if (len == STREAM_NONE)
			break;
		if (len == STREAM_TOOLONG) {
			b->stats.toolong++;
			send_err(s, PERR_TOOLONG, "line longer than max_line "
			    "bytes; closing");
			stream_close(s->st);
			break;
		}
		if (!s->authed &&
		    !allowed_before_auth(b->linebuf, (size_t)len)) {
			send_err(s, PERR_NOAUTH, "send AUTH <token> first");
			continue;
		}
		err = proto_parse(b->linebuf, (size_t)len, &lim, &req, &empty,
		    &why);
		if (err != PERR_NONE)
			send_err(s, err, why);
		else if (!empty)
			dispatch(s, &req);
	}
	s->dispatching = 0;
	return s->busy;
}

/* The client sends no more: a waiting ACQUIRE may answer BUSY now. */
static void
on_eof(void *arg)
{
	struct session *s = arg;

	if (s->cl != NULL)		/* NULL: KILLed, its locks freed */
		locks_client_eof(s->cl);
}

static void
on_closed(void *arg)
{
	session_free(arg);
}

static const struct stream_ops stream_ops = { on_lines, on_eof, on_closed };

struct session *
session_new(struct broker *b, int fd, struct ssl_st *ssl, const char *peer_cn)
{
	struct session *s = xcalloc(1, sizeof *s);

	s->b = b;
	clientid_new(s->id);
	s->authed = b->cfg->auth_token[0] == '\0' && b->acl == NULL;
	if ((s->st = stream_new(b->base, fd, ssl, (size_t)b->cfg->max_line,
	    &stream_ops, s, s->id)) == NULL) {
		/* The caller closes fd. */
		log_warn("cannot set up a session: out of memory");
		free(s);
		return NULL;
	}
	s->out = stream_out(s->st);
	s->tls = ssl != NULL;
	s->born_ms = now_ms();
	admin_peer(s, fd);
	s->cl = locks_client_new(b->locks, s->id, &session_client_ops, s);
	index_add(s);
	if (peer_cn[0] != '\0' && b->acl != NULL) {
		/* peer_cn, the subject CN of a client certificate that
		 * verified against tls_ca_cert_file (else ""): when it names
		 * an app, the session is that app's, as AUTH with the app's
		 * token would make it; another CN leaves it to AUTH. */
		const struct acl_app *app = acl_app_named(b->acl, peer_cn);

		if (app != NULL)
			(void)session_set_app(s, app);
	}
	TAILQ_INSERT_TAIL(&b->sessions, s, link);
	b->nsessions++;
	if (s->tls)
		b->stats.tls_sessions++;
	b->stats.accepted++;
	log_debug("client %s connected (fd %d%s%s%s)", s->id, fd,
	    s->tls ? ", TLS" : "", peer_cn[0] ? ", CN " : "", peer_cn);
	return s;
}

void
session_free(struct session *s)
{
	struct broker *b = s->b;

	log_debug("client %s gone", s->id);
	admin_session_gone(s);
	/* a grace session that detaches keeps its name with its holds; one
	 * resumed elsewhere (killed) leaves it to the new connection */
	if (!s->killed)
		names_gone(s, s->grace != NULL && !s->quit);
	TAILQ_REMOVE(&b->sessions, s, link);
	b->nsessions--;
	index_del(s);
	if (s->app != NULL) {
		s->appstat->sessions--;
		acl_app_release(s->app);
		s->app = NULL;
	}
	if (s->tls)
		b->stats.tls_sessions--;
	awaits_free(s->aw);	/* queued waits go silently, before s->cl */
	news_relall_free(s);
	free(s->stash_tokens);
	watches_free(s->wa);	/* (a grace record keeps them for a RESUME) */
	if (s->quit || s->ended || b->stopping)
		locks_client_clean(s->cl);	/* no lock delay */
	if (s->grace != NULL) {
		/* SESSIONS, detached */
		grace_set_name(s->grace, s->name != NULL ? s->name : "");
		grace_session_end(s->grace, s->cl, s->killed ? GRACE_TAKEN :
		    s->quit ? GRACE_QUIT : GRACE_LOST);
	} else {
		locks_client_free(s->cl);
	}
	stream_free(s->st);
	free(s->name);
	free(s);
}

