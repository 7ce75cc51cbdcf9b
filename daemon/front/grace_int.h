/*
 * grace_int.h - what the files of grace sessions share, and nothing else.
 *
 * grace.h says what a grace session is; its files, lowest first
 * (tests/layers ranks them):
 *   grace_record.c  the record in Redis: session.lua calls, the fields
 *                   written until Redis takes them, a grace object's
 *                   lifetime (references, freeing)
 *   grace.c         attached, detached, the grace's end, HELLO GRACE,
 *                   checks of the record, the broker's stop
 *   grace_resume.c  RESUME: the record taken over, the keys taken over
 *                   one by one, the session told
 */
#ifndef LOCKBROKER_GRACE_INT_H
#define LOCKBROKER_GRACE_INT_H

#include <stdint.h>
#include <sys/queue.h>

#include "acl.h"
#include "broker.h"
#include "clientid.h"
#include "grace.h"
#include "locks.h"
#include "store.h"

struct event;

#define TOUCH_MIN_MS 1000		/* record touch period bounds */
#define TOUCH_MAX_MS 10000
#define DETACHED_SLACK_MS 5000		/* record outlives a detached grace */
#define RESUME_SLACK_MS (2 * TOUCH_MAX_MS)	/* until the first touch */
#define END_RETRY_MS 1000		/* "end" unanswered: ask again */
#define END_TRIES 5			/* then leave the locks to their TTL */
/* An ended record stays this long: every connection left behind touches
 * it (and learns it is over) within a touch period. */
#define TOMBSTONE_MS (2 * TOUCH_MAX_MS + TOUCH_MIN_MS)
#define HOLD_VAL_MAX 64		/* "<holds> <ttl> [<kind> [<delay>]]" */

enum gstate { G_ATTACHED, G_DETACHED, G_RESUMING, G_ENDING };

struct grace {
	struct broker *b;
	TAILQ_ENTRY(grace) link;	/* b->graces */
	enum gstate state;
	const struct grace_ops *ops;	/* how its session is told */
	void *arg;			/* ATTACHED / RESUMING: its session
					 * (NULL: none) */
	struct lclient *cl;		/* owned here unless ATTACHED */
	char cid[CLIENTID_LEN + 1];
	char owner[OWNER_MAX + 1];	/* cid, or cid/gen */
	unsigned long gen;
	char secret[GRACE_SECRET_LEN + 1];
	char app[ACL_NAME_MAX + 1];	/* its session's app ("" none): only
					 * a session of it may resume it */
	char name[GRACE_NAME_MAX + 1];	/* its session's HELLO name ("" none),
					 * for SESSIONS while detached */
	long grace_ms;
	long old_grace_ms;		/* HELLO GRACE again: until recorded */
	int64_t end_at;			/* DETACHED: the grace's end (ms) */
	struct event *timer;		/* touch, check, grace's end, retry */
	unsigned refs;			/* Redis calls in flight */
	unsigned dead:1;		/* settled: free at refs 0 */
	unsigned quiet:1;		/* adopting: no per-key writes */
	unsigned opening:1;		/* HELLO GRACE awaits its answer */
	unsigned fresh:1;		/* made by that HELLO GRACE */
	unsigned failed:1;		/* RESUMING: a takeover got no answer */
	unsigned quit:1;		/* ENDING: its session said QUIT */
	unsigned ends;			/* "end" tries */
	unsigned pending;		/* RESUMING: takeovers in flight */
	struct gwait *waits;		/* RESUMING: the queued waits the
					 * record lists, for the session */
	size_t nwaits;
	struct gfield *fields;		/* field writes Redis has not taken */
};

/*
 * A field of the record that must reach Redis: a queued wait (its entry,
 * or its removal once it was told its outcome) or a watched key.  Kept
 * until Redis confirms it, and sent again when Redis is back (or at the
 * next touch), the latest value per field: a wait told FAILED while Redis
 * was away must not be queued again by a RESUME afterwards.
 */
struct gfield {
	struct gfield *next;
	struct grace *g;
	const char *op;			/* session.lua's: "wait", "watch" */
	char *val;			/* "" deletes the field */
	unsigned sending:1;		/* a write in flight */
	unsigned again:1;		/* changed while it was */
	size_t keylen;
	char key[];
};

/* A queued wait (or a watched key: watch) read from the record by a
 * RESUME. */
struct gwait {
	char *key;
	size_t keylen;
	int watch;
	char val[GRACE_WAIT_VAL_MAX];
};

/* Argument list builder for session.lua. */
struct rargs {
	struct store_str *a;
	size_t n, cap;
	char (*num)[24];		/* numbers written out, one per slot */
	size_t nnum, numcap;
};

#define RARGS(nums) \
	{ .num = (nums), .numcap = sizeof (nums) / sizeof (nums)[0] }

/* grace_record.c */
void grace_waits_free(struct grace *g);
void grace_fields_free(struct grace *g);
void grace_unref(struct grace *g);
void grace_timer_in(struct grace *g, long ms);
long grace_touch_period(const struct grace *g);
long grace_attached_px(const struct grace *g);
int grace_hold_val(char *buf, unsigned holds, long ttl_ms, long kind,
    long delay_ms);
void grace_rargs_add(struct rargs *r, const char *p, size_t len);
void grace_rargs_str(struct rargs *r, const char *p);
void grace_rargs_num(struct rargs *r, long long v);
int grace_record_call_arg(struct grace *g, struct rargs *r,
    store_session_fn *fn, void *arg);
int grace_record_call(struct grace *g, struct rargs *r, store_session_fn *fn);
int grace_record_write_op(struct grace *g, const char *op, const char *state,
    long px, store_session_fn *fn, void *arg);
int grace_record_write(struct grace *g, const char *state, long px,
    store_session_fn *fn);
void grace_noop_done(void *arg, int ok, long long status,
    const struct store_str *rest, size_t n);
void grace_fields_flush(struct grace *g);
int grace_record_simple(struct grace *g, const char *op, long long arg,
    const char *arg2, store_session_fn *fn);

/* grace.c */
extern const struct lk_client_ops grace_ghost_ops;
struct grace *grace_new(struct broker *b, const char *cid);
void grace_answer(struct grace *g, enum grace_status st, const char *why);
void grace_settle(struct grace *g);
void grace_abandon(struct grace *g);
void grace_taken_over(struct grace *g);

#endif
