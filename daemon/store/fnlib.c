/*
 * fnlib.c - the broker's function library on one master (fnlib.h): loaded
 * by the command link's handshake, loaded again when a call finds it gone;
 * or, where Redis will not take it, the scripts by SCRIPT LOAD and the
 * calls by EVALSHA (node.fn).  Split from node.c, which sends the calls.
 *
 * The broker's scripts are one Redis function library (scripts/embed.sh):
 * loaded by each command link's handshake, then called by FCALL.  Its
 * name, lockbroker_<hash>, and each function's, <script>_<hash>, carry
 * the hash of its text, so brokers of two versions on one Redis each call
 * their own code, and a library of that name already there is this one:
 * "already exists" is a success, and REPLACE is never needed.
 *
 * A Redis without functions (Redis < 7: "unknown command") gets the
 * scripts by SCRIPT LOAD, as before functions, and the calls go as
 * EVALSHA on that link; so does a Redis that refuses FUNCTION LOAD to
 * this user (NOPERM) or for memory (OOM), which the log says.  Any other
 * error fails the handshake, as it would fail SCRIPT LOAD.
 */
#include "fnlib.h"
#include "log.h"

#include <string.h>

static int
library_there(const redisReply *r)
{
	return r->type == REDIS_REPLY_STRING ||
	    (r->type == REDIS_REPLY_ERROR && strstr(r->str, "already exists"));
}

/* Redis will not take a function library: it has no FUNCTION command
 * (before 7.0, or renamed away), this user may not (an ACL), or no
 * memory for it.  The scripts go by EVALSHA then. */
static int
library_refusal(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR &&
	    (strstr(r->str, "unknown command") != NULL ||
	    strncmp(r->str, "NOPERM", 6) == 0 ||
	    strncmp(r->str, "OOM", 3) == 0);
}

static void
library_hello_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct node *n = privdata;
	redisReply *r = reply;

	if (!link_current(&n->link, ac) || r == NULL)
		return;
	/* a replica (READONLY) has its master's library, and INFO refuses
	 * it next anyway */
	n->fn = library_there(r) || (r->type == REDIS_REPLY_ERROR &&
	    strncmp(r->str, "READONLY", 8) == 0);
	if (!n->fn && !library_refusal(r)) {
		/* NOAUTH, LOADING...: the handshake fails as on any error */
		link_refuse(&n->link, r->type == REDIS_REPLY_ERROR ? r->str :
		    "unexpected reply to FUNCTION LOAD");
		return;
	}
	if (!n->fn) {
		const char *why = r->str;

		if (strstr(why, "unknown command") != NULL)
			log_info("Redis %s has no functions (Redis < 7): "
			    "scripts by EVALSHA", n->link.addrstr);
		else
			log_warn("Redis %s refused the function library "
			    "(%.120s): scripts by EVALSHA", n->link.addrstr,
			    why);
		for (int i = 0; i < SCRIPT__COUNT; i++)
			link_hello_sendf(&n->link, "SCRIPT LOAD %s",
			    scripts[i].text);
	} else {
		log_debug("Redis %s: function library %s loaded",
		    n->link.addrstr, script_library_name);
	}
	link_hello_done(&n->link);
}

static void
library_reload_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct node *n = privdata;
	redisReply *r = reply;

	if (!link_current(&n->link, ac) || r == NULL || library_there(r))
		return;
	/* calls on this link go as EVALSHA from now on (NOSCRIPT: EVAL) */
	n->fn = 0;
	log_warn("Redis %s refused the function library again (%.120s): "
	    "scripts by EVALSHA on this connection", n->link.addrstr,
	    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
}

/*
 * A call sent when n's library had been loaded `loads` times (the
 * handshake's, then each reload) found no function: the library went
 * (FUNCTION FLUSH or DELETE, a restart without persistence, a failover
 * to a replica that never had it).  Load it again, once per loss: the
 * other calls in flight that find it gone were sent before this reload,
 * like this one.  The call itself is resent as EVAL, which needs nothing
 * loaded, behind the FUNCTION LOAD.
 */
void
fnlib_reload(struct node *n, unsigned loads)
{
	if (loads != n->fn_loads)
		return;		/* reloaded since that call went out */
	n->fn_loads++;
	log_warn("function library %s gone from Redis %s: loading it again",
	    script_library_name, n->link.addrstr);
	if (link_sendf(&n->link, library_reload_reply, n, "FUNCTION LOAD %s",
	    script_library) != 0)
		log_debug("FUNCTION LOAD not sent");
}

void
fnlib_hello(struct node *n)
{
	n->fn = 0;
	n->fn_loads = 0;
	/* FUNCTION LOAD, never REPLACE: a library of this name is this one
	 * (its name carries the hash of its text). */
	link_sendf(&n->link, library_hello_reply, n, "FUNCTION LOAD %s",
	    script_library);
	link_expect(&n->link);
}
