/*
 * fenced.c - writes fenced by a hold (SETIF, DELIF): which data keys a
 * session may write, checked before anything reaches Redis.
 *
 * A data key is the app's own Redis name, written as given (no prefix),
 * so apps read it with their own Redis client.  That makes it a way into
 * Redis beside the broker's keys, so it is closed by default: a session
 * of an acl_file app may write the keys of its app's patterns, any other
 * session those of conf fenced_write_keys (the same globs; empty, the
 * default: none); and a name in the broker's own namespace ("<prefix>:")
 * is never a data key, whatever the patterns say, so no pattern (not even
 * "*") lets a client forge a lock, a fencing counter or a grace record.
 * The lock key is checked as CHECK's is (key_denied): the token names a
 * hold of it, which any session may name.  In cluster mode both keys go
 * to one script, so they must share a slot.
 */
#include "acl.h"
#include "locks.h"
#include "log.h"
#include "session_int.h"
#include "store.h"

#include <stdio.h>
#include <string.h>

/* The app of fenced_write_keys' list (acl_parse_globs), for messages. */
#define GLOBS_NAME "fenced_write_keys"

int
fenced_globs(const struct config *cfg, struct acl **out, char *err,
    size_t errlen)
{
	*out = NULL;
	if (cfg->fenced_write_keys[0] == '\0')
		return 0;
	*out = acl_parse_globs(cfg->fenced_write_keys, GLOBS_NAME, err, errlen);
	return *out != NULL ? 0 : -1;
}

void
fenced_install(struct broker *b, struct acl *globs)
{
	acl_unref(b->fenced);
	b->fenced = globs;
	if (globs != NULL)
		log_info("fenced writes allowed to sessions of no app on keys "
		    "matching fenced_write_keys");
}

/*
 * Why s may not write datakey[0..len): the text of its ERR DENIED in
 * buf, or NULL when it may.
 */
static const char *
data_denied(const struct session *s, const char *datakey, size_t len,
    char *buf, size_t buflen)
{
	const char *prefix = s->b->cfg->prefix;
	size_t pl = strlen(prefix);

	if (len > pl && memcmp(datakey, prefix, pl) == 0 &&
	    datakey[pl] == ':') {
		snprintf(buf, buflen, "%s:... is the broker's own namespace, "
		    "never a data key", prefix);
		return buf;
	}
	if (s->app != NULL) {
		if (acl_app_allows(s->app, datakey, len))
			return NULL;
		snprintf(buf, buflen, "app %s may not write this key",
		    acl_app_name(s->app));
		return buf;
	}
	if (s->b->fenced == NULL)
		return "fenced writes are off on this broker (fenced_write_keys "
		    "is empty)";
	if (acl_app_allows(acl_app_at(s->b->fenced, 0), datakey, len))
		return NULL;
	return "the key is outside fenced_write_keys";
}

void
cmd_fenced(struct session *s, const struct proto_req *req)
{
	char buf[160];
	const char *why;

	if (key_denied(s, req))
		return;
	if ((why = data_denied(s, req->datakey, req->datakeylen, buf,
	    sizeof buf)) != NULL) {
		/* counted as any ERR DENIED; logged at debug only: never a
		 * log line per request */
		s->b->stats.denials++;
		if (s->appstat != NULL)
			s->appstat->denials++;
		log_debug("client %s: %s denied for data key %.*s", s->id,
		    proto_cmd_name(req->cmd), (int)req->datakeylen,
		    req->datakey);
		send_err(s, PERR_DENIED, why);
		return;
	}
	if (!store_same_slot(s->b->store, req->key, req->keylen, req->datakey,
	    req->datakeylen)) {
		send_err(s, PERR_BADARG, "in cluster mode the data key must be "
		    "in the lock key's slot: give both keys the same {tag}");
		return;
	}
	s->busy = 1;
	locks_fenced(s->cl, req->key, req->keylen, req->token, req->datakey,
	    req->datakeylen, req->data, req->datalen, req->keepttl ?
	    LK_KEEPTTL : req->has_px ? req->px_ms : 0);
}
