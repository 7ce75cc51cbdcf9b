/*
 * grace.h - sessions that outlive their connection (issue 12).
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
 * Only session.c calls these (and main.c grace_store_up); a grace object
 * tells its session what it needs through the session_grace_* functions
 * of broker.h.
 */
#ifndef LOCKBROKER_GRACE_H
#define LOCKBROKER_GRACE_H

#include <stddef.h>

struct broker;
struct grace;
struct lclient;
struct lk_client_ops;
struct session;

/* Lengths of a resume secret: 128 random bits, in hex. */
#define GRACE_SECRET_LEN 32

/*
 * HELLO ... GRACE ms (ms > 0, already clamped) on session s, whose lock
 * client is cl and client-id id, of app (see grace_resume): make or
 * update the record.  *gp is the
 * session's grace object (made here when NULL).  Answers through
 * session_grace_answer.
 */
void grace_hello(struct broker *b, struct session *s, struct grace **gp,
    struct lclient *cl, const char *id, long grace_ms, const char *app);
/*
 * RESUME id secret on a fresh session s, of app ("" none: no access
 * list; a session of another app than the one that made the record is
 * refused, ERR DENIED).  Returns the grace object the
 * session keeps while it waits (NULL: answered already).  Answers through
 * session_grace_answer, or on success through session_grace_resumed,
 * which gives the session its new lock client and client-id.
 */
struct grace *grace_resume(struct broker *b, struct session *s,
    const char *id, size_t idlen, const char *secret, size_t secretlen,
    const char *app);

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
 * its OK back until session_grace_recorded: a client told OK has the lock
 * in the record, so a RESUME after its broker died gives it back.
 */
int grace_changed(struct grace *g, const char *key, size_t keylen,
    unsigned holds, long ttl_ms, long kind, int fresh);
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

#endif
