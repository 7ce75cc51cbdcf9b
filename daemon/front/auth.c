/*
 * auth.c - who a session is and what it may see and touch: the broker's
 * index of sessions by client-id (OWNER and WATCH show a holder's id only
 * to sessions of its app), AUTH with a token or an app's, and the keys an
 * app may use (session_int.h).
 */
#include "acl.h"
#include "locks.h"
#include "log.h"
#include "session_int.h"
#include "tokenhash.h"
#include "util.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

#define AUTH_LOG_MS 10000		/* ms between "wrong AUTH" log lines */

/* --- sessions by client-id, and what OWNER shows of them ------------- */

void
index_del(struct session *s)
{
	if (s->indexed) {
		keytab_remove(s->b->by_id, &s->by_id);
		s->indexed = 0;
	}
}

/* Index s under its (current) client-id.  Two local sessions may carry
 * one id for a moment (a RESUME before the replaced one is freed): the
 * newer one is the session's owner, so it takes the entry. */
void
index_add(struct session *s)
{
	struct keytab_entry *e;

	if (s->b->by_id == NULL)
		return;
	index_del(s);
	if ((e = keytab_find(s->b->by_id, s->id, CLIENTID_LEN)) != NULL) {
		struct session *o = (struct session *)(void *)((char *)e -
		    offsetof(struct session, by_id));

		index_del(o);
	}
	s->by_id.key = s->id;
	s->by_id.keylen = CLIENTID_LEN;
	keytab_insert(s->b->by_id, &s->by_id);
	s->indexed = 1;
}

/*
 * May s see the client-id of a holder whose owner is owner[0..len)?
 * Always without an app (no acl_file, as in version 1).  With one, only
 * when the broker can tell the holder is of the same app: s itself, or
 * another session of this broker that authenticated as an app of the
 * same name.  A holder on another broker, a detached grace session, or a
 * session of another app or of none is not shown (access lists).
 */
int
owner_visible(const struct session *s, const char *owner, size_t len)
{
	const struct keytab_entry *e;
	const struct session *o;

	if (s->app == NULL)
		return 1;
	if (len == CLIENTID_LEN && memcmp(owner, s->id, len) == 0)
		return 1;
	if (s->b->by_id == NULL ||
	    (e = keytab_find(s->b->by_id, owner, len)) == NULL)
		return 0;
	o = (const struct session *)(const void *)((const char *)e -
	    offsetof(struct session, by_id));
	return o->app != NULL && strcmp(acl_app_name(o->app),
	    acl_app_name(s->app)) == 0;
}

/* Compare in time independent of where the first difference is. */
static int
token_equal(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b);
	unsigned char diff = alen != blen;

	for (size_t i = 0; i < alen; i++)
		diff |= (unsigned char)(a[i] ^ b[blen ? i % blen : 0]);
	return diff == 0;
}

/*
 * Count every wrong token, but log at most one line per AUTH_LOG_MS: an
 * unauthenticated client must not be able to flood the log.
 * The line says how many went unlogged since the previous one.
 */
static void
auth_failed(struct session *s)
{
	struct broker *b = s->b;
	int64_t now = now_ms();

	b->stats.auth_failures++;
	if (b->authfail_logged_ms != 0 &&
	    now - b->authfail_logged_ms < AUTH_LOG_MS) {
		b->authfail_unlogged++;
		return;
	}
	if (b->authfail_unlogged > 0)
		log_info("client %s: wrong AUTH token (and %llu more not "
		    "logged since the last such line)", s->id,
		    (unsigned long long)b->authfail_unlogged);
	else
		log_info("client %s: wrong AUTH token", s->id);
	b->authfail_logged_ms = now;
	b->authfail_unlogged = 0;
}

/*
 * Make s a session of app (from acl_app_named or acl_app_by_hash on
 * b->acl): it counts as authenticated, may use only the app's keys, and
 * keeps this app's patterns until it ends, whatever a reload does.  AUTH
 * calls it, and session_new for a verified client certificate whose CN
 * names an app.  Returns 0, or -1 (nothing changed) when s is already a
 * session of another app: a session never changes app.
 */
int
session_set_app(struct session *s, const struct acl_app *app)
{
	struct appstat *st;

	if (s->app != NULL &&
	    strcmp(acl_app_name(s->app), acl_app_name(app)) != 0)
		return -1;
	st = appstat_get(s->b, acl_app_name(app));
	acl_app_hold(app);
	if (s->app != NULL) {
		/* the same app again (a later AUTH): the current list's
		 * patterns from now on; same name, same counters */
		acl_app_release(s->app);
		s->appstat->sessions--;
	}
	s->app = app;
	s->appstat = st;
	st->sessions++;
	s->authed = 1;
	return 0;
}

/* ERR DENIED, counted for the app and in total (logged at debug only:
 * never a log line per request). */
static void
send_denied(struct session *s, const char *key, size_t keylen)
{
	s->b->stats.denials++;
	s->appstat->denials++;
	log_debug("client %s (app %s): denied key %.*s", s->id,
	    acl_app_name(s->app), (int)keylen, key);
	send_line(s, "ERR DENIED app %s may not use this key",
	    acl_app_name(s->app));
}

/*
 * A request naming a key outside the session's app's patterns is answered
 * ERR DENIED before it reaches the lock table (an ACQUIRE never waits,
 * never queues, never reaches Redis).  A key the session holds may still
 * be released and renewed: after a RESUME by a session of another app it
 * may hold keys outside its patterns, and it can always give back what it
 * holds.  Returns 1 when denied (answered).
 */
int
key_denied(struct session *s, const struct proto_req *req)
{
	/* every key of an ALL form, else its one key */
	for (int i = 0; i < (req->nkeys > 0 ? req->nkeys : 1); i++) {
		const char *key = req->nkeys > 0 ? req->keys[i] : req->key;
		size_t keylen = req->nkeys > 0 ? req->keylens[i] : req->keylen;

		if (s->app == NULL || acl_app_allows(s->app, key, keylen))
			continue;
		if ((req->cmd == CMD_RELEASE || req->cmd == CMD_RENEW) &&
		    locks_holds_key(s->cl, key, keylen))
			continue;
		send_denied(s, key, keylen);
		return 1;
	}
	return 0;
}

/* AUTH with an access list: the token's SHA-256 names the app. */
static void
auth_app(struct session *s, const struct proto_req *req)
{
	unsigned char hash[ACL_HASH_LEN];
	const struct acl_app *app;

	if (tokenhash_sha256(req->word, req->wordlen, hash) != 0) {
		log_warn("client %s: cannot hash an AUTH token (libcrypto "
		    "failed)", s->id);
		send_err(s, PERR_NOAUTH, "the broker cannot check tokens now; "
		    "try again");
		return;
	}
	if ((app = acl_app_by_hash(s->b->acl, hash)) == NULL) {
		auth_failed(s);
		send_err(s, PERR_NOAUTH, "wrong token");
	} else if (session_set_app(s, app) != 0) {
		send_line(s, "ERR BADARG this session is app %s: AUTH cannot "
		    "change its app (open another connection)",
		    acl_app_name(s->app));
	} else {
		send_line(s, "OK");
	}
}

void
cmd_auth(struct session *s, const struct proto_req *req)
{
	const char *want = s->b->cfg->auth_token;

	if (s->b->acl != NULL) {
		auth_app(s, req);
	} else if (want[0] == '\0') {
		send_err(s, PERR_BADARG, "no auth_token is configured");
	} else if (token_equal(req->word, req->wordlen, want)) {
		s->authed = 1;
		send_line(s, "OK");
	} else {
		auth_failed(s);
		send_err(s, PERR_NOAUTH, "wrong token");
	}
}

/*
 * May this line be parsed before AUTH?  Only AUTH, PING and QUIT may (and
 * blank lines, which get no reply): anything else gets ERR NOAUTH before
 * the parser looks at its arguments, so an unauthenticated client learns
 * nothing about limits such as max_key_len.  The verb is
 * the first word, delimited as proto_parse delimits words.
 */
int
allowed_before_auth(const char *line, size_t len)
{
	static const enum proto_cmd open_cmds[] = { CMD_AUTH, CMD_PING,
	    CMD_QUIT };
	size_t i = 0, v;

	while (i < len && (line[i] == ' ' || line[i] == '\t'))
		i++;
	for (v = i; v < len && line[v] != ' ' && line[v] != '\t'; v++)
		;
	if (v == i)
		return 1;		/* blank: no reply either way */
	for (size_t c = 0; c < sizeof open_cmds / sizeof open_cmds[0]; c++) {
		const char *name = proto_cmd_name(open_cmds[c]);

		if (strlen(name) == v - i &&
		    strncasecmp(line + i, name, v - i) == 0)
			return 1;
	}
	return 0;
}
