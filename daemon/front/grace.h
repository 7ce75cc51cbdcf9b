/*
 * grace.h - sessions that outlive their connection (grace sessions).
 *
 * A session that said HELLO ... GRACE <ms> has a record in Redis
 * (scripts/session.lua): its resume secret (hashed), its generation, and
 * the keys it holds.  When its connection ends without QUIT, the broker
 * keeps its holds (renewed) for the grace, and RESUME on any broker of
 * the same Redis and prefix hands them to the new connection.  Who owns
 * the client-id is decided in Redis, on that one record: a RESUME raises
 * the generation, and the broker of the replaced connection can then
 * neither end the record nor (takeover.lua rewrote the keys' values with
 * the new generation) renew or free a single key.
 *
 * grace.c sits below the session: it speaks in its own terms (a
 * grace_status, a secret, a reason) through the grace_ops its session
 * gave it, and the session alone turns them into wire lines.  Only the
 * session calls these (and main.c grace_store_up, grace_stop).
 */
#ifndef LOCKBROKER_GRACE_H
#define LOCKBROKER_GRACE_H

#include <stddef.h>

struct broker;
struct grace;
struct lclient;

/* Lengths of a resume secret: 128 random bits, in hex. */
#define GRACE_SECRET_LEN 32
/* The most permits a record's hold may name (a semaphore's LIMIT: the
 * protocol's PROTO_LIMIT_MAX, which session.c checks it equals); a
 * larger kind read back is taken for an exclusive hold. */
#define GRACE_PERMITS_MAX 1000000L
#define GRACE_DELAY_MAX 86400000L	/* max_delay_ms's own bound */
/* The longest HELLO name a grace object keeps (the protocol's). */
#define GRACE_NAME_MAX 64
/* A queued wait's value in the record: "<kind> <ttl-ms> <deadline>". */
#define GRACE_WAIT_VAL_MAX 384	/* 3 numbers and a VALUE (1.2) */

/* How a HELLO GRACE or a RESUME ended, for the session to put in words. */
enum grace_status {
	GRACE_OK,		/* HELLO GRACE recorded */
	GRACE_BADARG,		/* RESUME of something not a client-id */
	GRACE_NOSESSION,	/* no such session (never, expired, QUIT), or
				 * resumed elsewhere meanwhile */
	GRACE_BADSECRET,	/* RESUME with a wrong secret */
	GRACE_DENIED,		/* the session is another app's */
	GRACE_UNAVAILABLE,	/* Redis unreachable or unsure; try again */
};

/*
 * What a grace object tells its session (arg), given to grace_hello and
 * grace_resume.  Every call may come from a Redis reply, later than the
 * request; none comes after grace_session_end.
 */
struct grace_ops {
	/* HELLO GRACE or RESUME answered: GRACE_OK only for HELLO GRACE,
	 * with the client-id cid and its resume secret; else why says it
	 * in words (cid and secret may be NULL). */
	void (*answer)(void *arg, enum grace_status st, const char *cid,
	    const char *secret, const char *why);
	/* RESUME won: the session becomes client-id cid, with lock client
	 * cl (its holds adopted, handed over to the session by it) and
	 * grace object g, and answers OK with its keys. */
	void (*resumed)(void *arg, struct grace *g, struct lclient *cl,
	    const char *cid);
	/* The record write a fresh grant of key waited for (grace_changed)
	 * is in: its OK may go now. */
	void (*recorded)(void *arg, const char *key, size_t keylen);
	/* g is settled: the session is no longer a grace session (and an OK
	 * held back for the record goes now). */
	void (*dropped)(void *arg);
	/* Another connection resumed this session: end it now (it calls
	 * grace_session_end(GRACE_TAKEN)), its holds left to that
	 * connection. */
	void (*taken)(void *arg);
	/* After resumed: one per queued wait the record lists (val as
	 * given to grace_wait), for the session to queue again. */
	void (*wait_found)(void *arg, const char *key, size_t keylen,
	    const char *val);
	/* After those: one per key the record lists as watched (given to
	 * grace_watch), for the session to watch again. */
	void (*watch_found)(void *arg, const char *key, size_t keylen);
};

/*
 * HELLO ... GRACE ms (ms > 0, already clamped) on the session arg (told
 * through ops), whose lock client is cl and client-id id, of app (see
 * grace_resume): make or update the record.  *gp is the session's grace
 * object (made here when NULL).  Answers through ops->answer.
 */
void grace_hello(struct broker *b, const struct grace_ops *ops, void *arg,
    struct grace **gp, struct lclient *cl, const char *id, long grace_ms,
    const char *app);
/*
 * RESUME id secret on a fresh session arg, of app ("" none: no access
 * list; a session of another app than the one that made the record is
 * refused, GRACE_DENIED).  Returns the grace object the session keeps
 * while it waits (NULL: answered already).  Answers through ops->answer,
 * or on success through ops->resumed, which gives the session its new
 * lock client and client-id.
 */
struct grace *grace_resume(struct broker *b, const struct grace_ops *ops,
    void *arg, const char *id, size_t idlen, const char *secret,
    size_t secretlen, const char *app);

/*
 * The session of g ended; g takes its lock client cl over.
 *  GRACE_QUIT   it said QUIT: the record goes, then the locks are freed;
 *  GRACE_LOST   the connection ended otherwise: the holds stay for the
 *               grace (detached), or, when the broker stops, are left in
 *               Redis for a RESUME elsewhere;
 *  GRACE_TAKEN  another connection resumed it: forget the holds here.
 */
enum grace_end { GRACE_QUIT, GRACE_LOST, GRACE_TAKEN };
void grace_session_end(struct grace *g, struct lclient *cl,
    enum grace_end how);
/*
 * The broker stops: leave every detached session's locks in Redis (with
 * their TTL) for a RESUME elsewhere; returns how many.  final: the last
 * call, after the drain: settle whatever is left, answered or not.
 */
size_t grace_stop(struct broker *b, int final);

/*
 * A hold of g's session changed (the lock client's changed hook): the
 * record follows.  For a fresh grant, returns 1 when the session must hold
 * its OK back until ops->recorded: a client told OK has the lock
 * in the record, so a RESUME after its broker died gives it back.
 */
int grace_changed(struct grace *g, const char *key, size_t keylen,
    unsigned holds, long ttl_ms, long kind, long delay_ms, int fresh);
/*
 * A queued wait of g's session (ACQUIRE ... ASYNC) in the record: val
 * "<kind> <ttl-ms> <deadline Unix ms> [<value>]" (at most GRACE_WAIT_VAL_MAX - 1
 * bytes) when it is queued, NULL when it ended; a RESUME hands them to
 * the session (ops->wait_found).  Not waited for.  -1 when not written.
 */
int grace_wait(struct grace *g, const char *key, size_t keylen,
    const char *val);
/* A key g's session watches (WATCH, protocol 1.2) in the record, on 1
 * while watched, 0 once not: a RESUME hands them to the session
 * (ops->watch_found).  Not waited for.  -1 when not written. */
int grace_watch(struct grace *g, const char *key, size_t keylen, int on);
/*
 * A lock of g's session was found gone in Redis (the lock client's doubt
 * hook): check the record.  Resumed elsewhere: the session goes, as a
 * taken-over one (no loss told or counted); else locks_doubt_settled.
 * Returns 0 when no check can be sent (the loss is reported at once).
 */
int grace_doubt(struct grace *g);
/*
 * A connection to Redis is up again (after a restart or a failover, which
 * may have lost the records along with the locks): write the record of
 * every attached or detached session again where Redis lost it, with its
 * generation, secret and holds, as the lock table reclaims their locks.
 */
void grace_store_up(struct broker *b);

/*
 * The admin view (SESSIONS, KILL).  grace_ms: g's grace.  grace_set_name:
 * the HELLO name of g's session, kept while it is detached.
 * grace_each_detached: visit this broker's detached sessions (the
 * attached ones are sessions).  grace_kill: end the detached session cid
 * now as QUIT ends one (its record ended, so a RESUME answers that it
 * ended; its locks freed once Redis confirms that, no grace left):
 * returns 1, or 0 when this broker has no such detached session.
 */
struct grace_detached {
	const char *cid;
	const char *name;		/* "" none */
	const char *app;		/* "" none */
	long grace_ms;
	long left_ms;			/* of the grace */
	long long since_ms;		/* ms since its connection ended */
	size_t held;			/* keys it holds */
};
long grace_ms(const struct grace *g);
void grace_set_name(struct grace *g, const char *name);
void grace_each_detached(struct broker *b, void (*fn)(void *arg,
    const struct grace_detached *d), void *arg);
int grace_kill(struct broker *b, const char *cid);

#endif
