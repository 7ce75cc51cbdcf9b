/*
 * test_grace.c - grace sessions (daemon/front/grace.c) below a recording
 * session.
 *
 * grace.c runs over the real lock table (locks.c) and fake_store.c: every
 * session.lua call and takeover is queued, and the test answers it by hand
 * (a status, the rest of the reply, ok = 0).  In place of session.c a
 * struct tsess gives grace.c its grace_ops and records what it was told
 * (answer with a status, resumed, recorded, dropped, taken), doing what
 * session.c does with it: a taken session ends at once
 * (grace_session_end(GRACE_TAKEN)), a resumed one takes the lock client
 * over.  So each test asserts, in grace's own terms, what a client would
 * have heard, without a socket or a wire line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "broker.h"
#include "fake_store.h"
#include "grace.h"
#include "locks.h"
#include "log.h"
#include "util.h"
#include "suites.h"

#define NEV 16

enum gev_kind { EV_ANSWER, EV_RESUMED, EV_RECORDED, EV_DROPPED, EV_TAKEN };

/* One call of grace_ops. */
struct gev {
	enum gev_kind kind;
	enum grace_status st;		/* EV_ANSWER */
	char cid[CLIENTID_LEN + 1];	/* EV_ANSWER (OK), EV_RESUMED */
	char secret[GRACE_SECRET_LEN + 1];
	char why[200];
};

/* A session as grace.c sees it. */
struct tsess {
	struct env *e;
	struct grace *g;
	struct lclient *cl;		/* NULL once handed to grace.c */
	char id[CLIENTID_LEN + 1];
	struct gev ev[NEV];
	int nev;
	int await_record;		/* a fresh grant's OK waits */
	int nreplies;
	enum lk_status last;
};

struct env {
	struct event_base *base;
	struct store *st;
	struct locks *lt;
	struct broker b;
};

static const char *const ids[] = {
	"aaaaaaaa-0000-4000-8000-000000000001",
	"bbbbbbbb-0000-4000-8000-000000000002",
};
static const char broker_id[] = "99999999-0000-4000-8000-000000000009";

static const struct locks_cfg cfg = {
	.default_ttl_ms = 30000,
	.max_ttl_ms = 600000,
	.max_wait_ms = 60000,
	.max_locks_per_session = 1000,
	.max_waiters = 1000,
};

/* --- the recording session --------------------------------------------- */

static struct gev *
record(struct tsess *t, enum gev_kind kind)
{
	struct gev *v;

	ck_assert_int_lt(t->nev, NEV);
	v = &t->ev[t->nev++];
	memset(v, 0, sizeof *v);
	v->kind = kind;
	return v;
}

static void
on_answer(void *arg, enum grace_status st, const char *cid,
    const char *secret, const char *why)
{
	struct gev *v = record(arg, EV_ANSWER);

	v->st = st;
	if (st == GRACE_OK) {
		ck_assert_ptr_nonnull(cid);
		ck_assert_ptr_nonnull(secret);
		snprintf(v->cid, sizeof v->cid, "%s", cid);
		snprintf(v->secret, sizeof v->secret, "%s", secret);
	} else {
		ck_assert_ptr_nonnull(why);
		snprintf(v->why, sizeof v->why, "%s", why);
	}
}

static const struct lk_client_ops client_ops;

static void
on_resumed(void *arg, struct grace *g, struct lclient *cl, const char *cid)
{
	struct tsess *t = arg;
	struct gev *v = record(t, EV_RESUMED);

	snprintf(v->cid, sizeof v->cid, "%s", cid);
	locks_client_free(t->cl);
	t->cl = cl;
	t->g = g;
	locks_client_handover(cl, &client_ops, t, 0);
	memcpy(t->id, cid, CLIENTID_LEN);
}

static void
on_recorded(void *arg, const char *key, size_t keylen)
{
	struct tsess *t = arg;

	(void)key;
	(void)keylen;
	record(t, EV_RECORDED);
	t->await_record = 0;
}

static void
on_dropped(void *arg)
{
	struct tsess *t = arg;

	record(t, EV_DROPPED);
	t->g = NULL;
}

/* As session.c: the session ends now, its holds left to grace.c. */
static void
on_taken(void *arg)
{
	struct tsess *t = arg;

	record(t, EV_TAKEN);
	grace_session_end(t->g, t->cl, GRACE_TAKEN);
	t->g = NULL;
	t->cl = NULL;
}

static const struct grace_ops rec_ops = { on_answer, on_resumed, on_recorded,
    on_dropped, on_taken, NULL, NULL };

/* The lock table's news for the session, as session.c passes it on. */
static void
on_reply(void *arg, const struct lk_result *r)
{
	struct tsess *t = arg;

	t->nreplies++;
	t->last = r->status;
}

static void
on_lost(void *arg, const char *key, size_t keylen, long long token)
{
	(void)arg;
	(void)key;
	(void)keylen;
	(void)token;
}

static void
on_changed(void *arg, const char *key, size_t keylen, unsigned holds,
    long ttl_ms, long kind, long delay_ms, int fresh)
{
	struct tsess *t = arg;

	if (t->g != NULL && grace_changed(t->g, key, keylen, holds, ttl_ms,
	    kind, delay_ms, fresh))
		t->await_record = 1;
}

static int
on_doubt(void *arg)
{
	struct tsess *t = arg;

	return t->g != NULL && grace_doubt(t->g);
}

static const struct lk_client_ops client_ops = { on_reply, on_lost,
    on_changed, on_doubt, NULL, NULL };

/* --- the environment --------------------------------------------------- */

static void
env_start(struct env *e)
{
	memset(e, 0, sizeof *e);
	log_set_level(LL_ERROR);
	e->base = event_base_new();
	ck_assert_ptr_nonnull(e->base);
	e->st = fake_store_new();
	e->lt = locks_new(e->base, &cfg);
	locks_set_store(e->lt, e->st);
	e->b.base = e->base;
	e->b.store = e->st;
	e->b.locks = e->lt;
	TAILQ_INIT(&e->b.graces);
	memcpy(e->b.id, broker_id, CLIENTID_LEN);
}

static void
sess_start(struct env *e, struct tsess *t, int i)
{
	memset(t, 0, sizeof *t);
	t->e = e;
	memcpy(t->id, ids[i], CLIENTID_LEN);
	t->cl = locks_client_new(e->lt, t->id, &client_ops, t);
}

/* The session's connection ends (how: GRACE_QUIT, GRACE_LOST). */
static void
sess_end(struct tsess *t, enum grace_end how)
{
	if (t->g != NULL)
		grace_session_end(t->g, t->cl, how);
	else if (t->cl != NULL)
		locks_client_free(t->cl);
	t->g = NULL;
	t->cl = NULL;
}

/* Stop as main.c does; nothing may be left behind. */
static void
env_end(struct env *e, struct tsess *ts, int n)
{
	struct locks_stats s;

	e->b.stopping = 1;
	for (int i = 0; i < n; i++)
		sess_end(&ts[i], GRACE_LOST);
	grace_stop(&e->b, 1);
	fake_store_drain(e->st);
	ck_assert_ptr_null(TAILQ_FIRST(&e->b.graces));
	ck_assert_uint_eq(e->b.stats.grace_sessions, 0);
	ck_assert_uint_eq(e->b.stats.detached, 0);
	locks_get_stats(e->lt, &s);
	ck_assert_uint_eq(s.keys, 0);
	locks_free(e->lt);
	store_free(e->st);
	event_base_free(e->base);
}

static void
run_ms(struct env *e, long ms)
{
	struct timeval tv = { .tv_sec = ms / 1000,
	    .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

	event_base_loopexit(e->base, &tv);
	event_base_dispatch(e->base);
}

/* The oldest pending session.lua call, which must be op. */
static struct fake_call *
take_op(struct env *e, const char *op)
{
	struct fake_call *c = fake_store_take(e->st, FAKE_SESSION);

	ck_assert_msg(c != NULL, "no session.lua call (wanted %s)", op);
	ck_assert_uint_ge(c->nargs, 1);
	ck_assert_str_eq(c->args[0], op);
	return c;
}

static void
done(struct fake_call *c, int ok, long long status)
{
	fake_session_done(c, ok, status, NULL, 0);
}

static void
hello(struct env *e, struct tsess *t, long grace_ms)
{
	grace_hello(&e->b, &rec_ops, t, &t->g, t->cl, t->id, grace_ms, "");
}

/* HELLO ... GRACE, recorded: the session is a grace session. */
static void
hello_ok(struct env *e, struct tsess *t, long grace_ms)
{
	int n = t->nev;

	hello(e, t, grace_ms);
	done(take_op(e, "write"), 1, 1);
	ck_assert_int_eq(t->nev, n + 1);
	ck_assert_int_eq(t->ev[n].kind, EV_ANSWER);
	ck_assert_int_eq(t->ev[n].st, GRACE_OK);
}

/* A broker with one session, a grace session of 3000 ms. */
static void
graced(struct env *e, struct tsess *t)
{
	env_start(e);
	sess_start(e, t, 0);
	hello_ok(e, t, 3000);
}

/* The session holds key (exclusive, token), its record write done. */
static void
hold(struct env *e, struct tsess *t, const char *key, long long token)
{
	struct fake_call *c;

	locks_acquire(t->cl, key, strlen(key), LK_EXCLUSIVE, -1, 0);
	c = fake_store_take(e->st, FAKE_ACQUIRE);
	ck_assert_ptr_nonnull(c);
	fake_acquire_done(c, 1, 1, token);
	ck_assert_int_eq(t->last, LK_OK);
	if (t->g != NULL) {
		ck_assert_int_eq(t->await_record, 1);
		done(take_op(e, "key"), 1, 1);
		ck_assert_int_eq(t->await_record, 0);
	}
}

static const struct gev *
last_ev(const struct tsess *t)
{
	ck_assert_int_gt(t->nev, 0);
	return &t->ev[t->nev - 1];
}

/* --- HELLO GRACE ----------------------------------------------------- */

/* The record is written (state, generation, grace, this broker) before
 * the OK, which carries the client-id and the secret it recorded. */
START_TEST(test_hello_records_then_answers)
{
	struct env e;
	struct tsess t;
	struct fake_call *c;

	env_start(&e);
	sess_start(&e, &t, 0);
	hello(&e, &t, 3000);
	ck_assert_int_eq(t.nev, 0);		/* nothing before Redis */
	ck_assert_ptr_nonnull(t.g);
	c = take_op(&e, "write");
	ck_assert_str_eq(c->key, ids[0]);
	ck_assert_uint_eq(c->nargs, 8);		/* no holds yet */
	ck_assert_str_eq(c->args[1], "1");	/* generation */
	ck_assert_uint_eq(strlen(c->args[2]), GRACE_SECRET_LEN);
	ck_assert_str_eq(c->args[3], "3000");
	ck_assert_str_eq(c->args[5], broker_id);
	ck_assert_str_eq(c->args[6], "attached");
	ck_assert_str_eq(c->args[7], "");	/* no app */
	{
		char secret[GRACE_SECRET_LEN + 1];

		snprintf(secret, sizeof secret, "%s", c->args[2]);
		done(c, 1, 1);
		ck_assert_int_eq(t.nev, 1);
		ck_assert_int_eq(t.ev[0].kind, EV_ANSWER);
		ck_assert_int_eq(t.ev[0].st, GRACE_OK);
		ck_assert_str_eq(t.ev[0].cid, ids[0]);
		ck_assert_str_eq(t.ev[0].secret, secret);
	}
	ck_assert_uint_eq(e.b.stats.grace_sessions, 1);
	env_end(&e, &t, 1);
}
END_TEST

/* Redis did not record a fresh HELLO GRACE: no grace, and it is said. */
START_TEST(test_hello_unrecorded_has_no_grace)
{
	struct env e;
	struct tsess t;

	env_start(&e);
	sess_start(&e, &t, 0);
	hello(&e, &t, 3000);
	done(take_op(&e, "write"), 0, 0);
	ck_assert_int_eq(t.nev, 2);
	ck_assert_int_eq(t.ev[0].kind, EV_DROPPED);
	ck_assert_ptr_null(t.g);
	ck_assert_int_eq(t.ev[1].kind, EV_ANSWER);
	ck_assert_int_eq(t.ev[1].st, GRACE_UNAVAILABLE);
	ck_assert_ptr_nonnull(strstr(t.ev[1].why, "it has no grace"));
	ck_assert_uint_eq(e.b.stats.grace_sessions, 0);
	env_end(&e, &t, 1);
}
END_TEST

/* Redis unreachable at once: the same, without a call. */
START_TEST(test_hello_redis_down)
{
	struct env e;
	struct tsess t;

	env_start(&e);
	sess_start(&e, &t, 0);
	fake_store_set_up(e.st, 0);
	hello(&e, &t, 3000);
	ck_assert_int_eq(t.nev, 2);
	ck_assert_int_eq(last_ev(&t)->st, GRACE_UNAVAILABLE);
	ck_assert_str_eq(last_ev(&t)->why, "Redis is unreachable; it has no "
	    "grace");
	fake_store_set_up(e.st, 1);
	env_end(&e, &t, 1);
}
END_TEST

/* HELLO GRACE again, not recorded: the session keeps the grace it had. */
START_TEST(test_hello_again_keeps_its_grace)
{
	struct env e;
	struct tsess t;
	struct fake_call *c;

	graced(&e, &t);
	hello(&e, &t, 9000);
	c = take_op(&e, "write");
	ck_assert_str_eq(c->args[3], "9000");
	done(c, 0, 0);
	ck_assert_int_eq(t.nev, 2);
	ck_assert_int_eq(t.ev[1].st, GRACE_UNAVAILABLE);
	ck_assert_str_eq(t.ev[1].why, "Redis did not record the session; the "
	    "session keeps its grace of 3000 ms");
	ck_assert_ptr_nonnull(t.g);
	ck_assert_uint_eq(e.b.stats.grace_sessions, 1);
	env_end(&e, &t, 1);
}
END_TEST

/* The record says a later generation (resumed elsewhere meanwhile): no
 * answer, the connection is ended as taken over. */
START_TEST(test_hello_resumed_elsewhere_is_taken)
{
	struct env e;
	struct tsess t;

	env_start(&e);
	sess_start(&e, &t, 0);
	hello(&e, &t, 3000);
	done(take_op(&e, "write"), 1, 0);
	ck_assert_int_eq(t.nev, 1);
	ck_assert_int_eq(t.ev[0].kind, EV_TAKEN);
	ck_assert_uint_eq(e.b.stats.grace_sessions, 0);
	env_end(&e, &t, 1);
}
END_TEST

/* --- the connection ends ---------------------------------------------- */

/* QUIT: the record ends ("ended"), then the locks are freed; not counted
 * as a grace that ran out. */
START_TEST(test_quit_ends_the_record)
{
	struct env e;
	struct tsess t;
	struct fake_call *c;

	graced(&e, &t);
	hold(&e, &t, "k1", 7);
	sess_end(&t, GRACE_QUIT);
	c = take_op(&e, "end");
	ck_assert_str_eq(c->args[3], "ended");
	ck_assert_uint_eq(fake_store_pending(e.st, FAKE_RELEASE), 0);
	done(c, 1, 1);
	ck_assert_uint_eq(fake_store_pending(e.st, FAKE_RELEASE), 1);
	ck_assert_uint_eq(e.b.stats.grace_sessions, 0);
	ck_assert_uint_eq(e.b.stats.grace_expired, 0);
	env_end(&e, &t, 1);
}
END_TEST

/* A lost connection detaches: the record says so, with its holds, and
 * the locks stay; when the grace runs out the record ends ("expired")
 * and only then are the locks freed. */
START_TEST(test_lost_detaches_until_the_grace_runs_out)
{
	struct env e;
	struct tsess t;
	struct fake_call *c;

	env_start(&e);
	sess_start(&e, &t, 0);
	hello_ok(&e, &t, 50);
	hold(&e, &t, "k1", 7);
	sess_end(&t, GRACE_LOST);
	c = take_op(&e, "write");
	ck_assert_str_eq(c->args[6], "detached");
	ck_assert_uint_eq(c->nargs, 10);	/* and k1 */
	ck_assert_str_eq(c->args[8], "k1");
	done(c, 1, 1);
	ck_assert_uint_eq(e.b.stats.detached, 1);
	run_ms(&e, 200);
	/* a timer a little early checks the record first */
	while ((c = fake_store_peek(e.st, FAKE_SESSION, 0)) != NULL &&
	    strcmp(c->args[0], "check") == 0)
		done(take_op(&e, "check"), 1, 1);
	c = take_op(&e, "end");
	ck_assert_str_eq(c->args[3], "expired");
	ck_assert_uint_eq(fake_store_pending(e.st, FAKE_RELEASE), 0);
	done(c, 1, 1);
	ck_assert_uint_eq(fake_store_pending(e.st, FAKE_RELEASE), 1);
	ck_assert_uint_eq(e.b.stats.grace_expired, 1);
	ck_assert_uint_eq(e.b.stats.detached, 0);
	ck_assert_uint_eq(e.b.stats.grace_sessions, 0);
	env_end(&e, &t, 1);
}
END_TEST

/* --- RESUME ------------------------------------------------------------- */

/* Of a client-id's length and characters (hex, '-'), or refused. */
static const char *const not_ids[] = {
	"abc-123",					/* short */
	"aaaaaaaa-0000-4000-8000-00000000000g",		/* a 'g' */
	"AAAAAAAA-0000-4000-8000-000000000001",		/* upper case */
	"aaaaaaaa-0000-4000-8000-0000000000011",	/* long */
};

START_TEST(test_resume_not_a_client_id)
{
	struct env e;
	struct tsess t;
	char id[64] = "";		/* room for what a bad check reads */

	env_start(&e);
	sess_start(&e, &t, 1);
	memcpy(id, not_ids[_i], strlen(not_ids[_i]));
	ck_assert_ptr_null(grace_resume(&e.b, &rec_ops, &t, id,
	    strlen(not_ids[_i]), "secret", 6, ""));
	ck_assert_int_eq(t.nev, 1);
	ck_assert_int_eq(t.ev[0].st, GRACE_BADARG);
	ck_assert_str_eq(t.ev[0].why, "not a client-id");
	ck_assert_uint_eq(fake_store_calls(e.st, FAKE_ANY), 0);
	env_end(&e, &t, 1);
}
END_TEST

START_TEST(test_resume_redis_down)
{
	struct env e;
	struct tsess t;

	env_start(&e);
	sess_start(&e, &t, 1);
	fake_store_set_up(e.st, 0);
	ck_assert_ptr_null(grace_resume(&e.b, &rec_ops, &t, ids[0],
	    CLIENTID_LEN, "secret", 6, ""));
	ck_assert_int_eq(t.nev, 1);
	ck_assert_int_eq(t.ev[0].st, GRACE_UNAVAILABLE);
	fake_store_set_up(e.st, 1);
	env_end(&e, &t, 1);
}
END_TEST

/* What session.lua's refusals become. */
static const struct {
	int ok;
	long long status;
	enum grace_status st;
	const char *why;
} refusals[] = {
	{ 1, -3, GRACE_BADSECRET, "wrong secret" },
	{ 1, -2, GRACE_NOSESSION, "the session expired: its grace ran out "
	    "and its locks were freed" },
	{ 1, -4, GRACE_NOSESSION, "the session ended with QUIT" },
	{ 1, -5, GRACE_DENIED, "the session is another app's" },
	{ 1, -1, GRACE_NOSESSION, "no such session: it never had a grace, or "
	    "it ended" },
	{ 0, 0, GRACE_UNAVAILABLE, "Redis is unreachable" },
};

START_TEST(test_resume_refused)
{
	struct env e;
	struct tsess t;
	struct fake_call *c;
	struct grace *g;

	env_start(&e);
	sess_start(&e, &t, 1);
	g = grace_resume(&e.b, &rec_ops, &t, ids[0], CLIENTID_LEN,
	    "0123456789abcdef0123456789abcdef", GRACE_SECRET_LEN, "billing");
	ck_assert_ptr_nonnull(g);
	t.g = g;
	c = take_op(&e, "resume");
	ck_assert_str_eq(c->key, ids[0]);
	ck_assert_str_eq(c->args[1], "0123456789abcdef0123456789abcdef");
	ck_assert_str_eq(c->args[2], broker_id);
	ck_assert_str_eq(c->args[4], "billing");
	ck_assert_int_eq(t.nev, 0);
	done(c, refusals[_i].ok, refusals[_i].status);
	ck_assert_int_eq(t.nev, 2);
	ck_assert_int_eq(t.ev[0].kind, EV_ANSWER);
	ck_assert_int_eq(t.ev[0].st, refusals[_i].st);
	ck_assert_str_eq(t.ev[0].why, refusals[_i].why);
	ck_assert_int_eq(t.ev[1].kind, EV_DROPPED);
	ck_assert_uint_eq(e.b.stats.resume_refused,
	    refusals[_i].status == -3 ? 1 : 0);
	ck_assert_uint_eq(e.b.stats.grace_sessions, 0);
	env_end(&e, &t, 1);
}
END_TEST

/* RESUME o (session 1, id 1) of session id 0, whose record lists
 * k1 and k2 (a shared hold): answered resume with generation 2. */
static void
resume_to_takeovers(struct env *e, struct tsess *t)
{
	static const char *const rest[] = { "2", "3000", "k1", "1 30000",
	    "k2", "1 30000 0" };

	t->g = grace_resume(&e->b, &rec_ops, t, ids[0], CLIENTID_LEN,
	    "0123456789abcdef0123456789abcdef", GRACE_SECRET_LEN, "");
	ck_assert_ptr_nonnull(t->g);
	fake_session_done(take_op(e, "resume"), 1, 1, rest, 6);
}

/* The keys are taken over one by one, then the record is written with
 * the new generation, and only then is the session told: it becomes the
 * resumed client-id with both holds. */
START_TEST(test_resume_takes_the_keys_over)
{
	struct env e;
	struct tsess t;
	struct fake_call *c;

	env_start(&e);
	sess_start(&e, &t, 1);
	resume_to_takeovers(&e, &t);
	ck_assert_uint_eq(fake_store_pending(e.st, FAKE_TAKEOVER), 2);
	c = fake_store_take(e.st, FAKE_TAKEOVER);
	ck_assert_str_eq(c->key, "k1");
	ck_assert_str_eq(c->value, ids[0]);
	ck_assert_uint_eq(c->gen, 2);
	ck_assert_int_eq(c->ttl_ms, 30000);
	fake_acquire_done(c, 1, 1, 11);
	ck_assert_uint_eq(fake_store_pending(e.st, FAKE_SESSION), 0);
	fake_acquire_done(fake_store_take(e.st, FAKE_TAKEOVER), 1, 1, 12);
	c = take_op(&e, "write");
	ck_assert_str_eq(c->args[1], "2");
	ck_assert_str_eq(c->args[6], "attached");
	ck_assert_uint_eq(c->nargs, 12);
	ck_assert_int_eq(t.nev, 0);
	done(c, 1, 1);
	ck_assert_int_eq(t.nev, 1);
	ck_assert_int_eq(t.ev[0].kind, EV_RESUMED);
	ck_assert_str_eq(t.ev[0].cid, ids[0]);
	ck_assert_str_eq(t.id, ids[0]);
	ck_assert_uint_eq(locks_held(t.cl, NULL, NULL), 2);
	ck_assert(locks_holds_key(t.cl, "k2", 2));
	ck_assert_uint_eq(e.b.stats.resumes, 1);
	env_end(&e, &t, 1);
}
END_TEST

/* A key Redis did not answer for: RESUME again (nothing is resumed). */
START_TEST(test_resume_takeover_unanswered)
{
	struct env e;
	struct tsess t;

	env_start(&e);
	sess_start(&e, &t, 1);
	resume_to_takeovers(&e, &t);
	fake_acquire_done(fake_store_take(e.st, FAKE_TAKEOVER), 1, 1, 11);
	fake_acquire_done(fake_store_take(e.st, FAKE_TAKEOVER), 0, 0, 0);
	ck_assert_int_eq(t.nev, 2);
	ck_assert_int_eq(t.ev[0].st, GRACE_UNAVAILABLE);
	ck_assert_str_eq(t.ev[0].why, "Redis did not answer for every key; "
	    "send RESUME again");
	ck_assert_int_eq(t.ev[1].kind, EV_DROPPED);
	ck_assert_uint_eq(fake_store_pending(e.st, FAKE_SESSION), 0);
	env_end(&e, &t, 1);
}
END_TEST

/* A later RESUME won the record while the keys were taken over. */
START_TEST(test_resume_raced_by_a_later_one)
{
	struct env e;
	struct tsess t;

	env_start(&e);
	sess_start(&e, &t, 1);
	resume_to_takeovers(&e, &t);
	fake_acquire_done(fake_store_take(e.st, FAKE_TAKEOVER), 1, 1, 11);
	fake_acquire_done(fake_store_take(e.st, FAKE_TAKEOVER), 1, 1, 12);
	done(take_op(&e, "write"), 1, 0);
	ck_assert_int_eq(t.nev, 2);
	ck_assert_int_eq(t.ev[0].st, GRACE_NOSESSION);
	ck_assert_str_eq(t.ev[0].why, "another connection resumed the "
	    "session meanwhile");
	ck_assert_uint_eq(e.b.stats.resumes, 0);
	env_end(&e, &t, 1);
}
END_TEST

/* RESUME here of a session still attached here: the old connection is
 * ended as taken over as soon as Redis gives the new generation. */
START_TEST(test_resume_here_ends_the_old_connection)
{
	struct env e;
	struct tsess t[2];

	env_start(&e);
	sess_start(&e, &t[0], 0);
	sess_start(&e, &t[1], 1);
	hello_ok(&e, &t[0], 3000);
	resume_to_takeovers(&e, &t[1]);
	ck_assert_int_eq(t[0].nev, 2);
	ck_assert_int_eq(t[0].ev[1].kind, EV_TAKEN);
	ck_assert_ptr_null(t[0].cl);
	ck_assert_int_eq(t[1].nev, 0);
	env_end(&e, t, 2);
}
END_TEST

/* The broker stops while a RESUME is in progress: it is told. */
START_TEST(test_stop_answers_a_resume)
{
	struct env e;
	struct tsess t;

	env_start(&e);
	sess_start(&e, &t, 1);
	resume_to_takeovers(&e, &t);
	grace_stop(&e.b, 1);
	ck_assert_int_eq(t.nev, 2);
	ck_assert_int_eq(t.ev[0].st, GRACE_UNAVAILABLE);
	ck_assert_str_eq(t.ev[0].why, "the broker is stopping");
	ck_assert_int_eq(t.ev[1].kind, EV_DROPPED);
	env_end(&e, &t, 1);
}
END_TEST

/* --- record writes, checks, reclaims --------------------------------- */

/* A fresh grant's OK waits for the record to list the key. */
START_TEST(test_fresh_grant_waits_for_its_record)
{
	struct env e;
	struct tsess t;
	struct fake_call *c;

	graced(&e, &t);
	locks_acquire(t.cl, "k1", 2, LK_EXCLUSIVE, -1, 0);
	fake_acquire_done(fake_store_take(e.st, FAKE_ACQUIRE), 1, 1, 7);
	ck_assert_int_eq(t.await_record, 1);
	c = take_op(&e, "key");
	ck_assert_str_eq(c->args[1], "1");
	ck_assert_str_eq(c->args[2], "k1");
	ck_assert_str_eq(c->args[3], "1 30000");
	ck_assert_int_eq(last_ev(&t)->kind, EV_ANSWER);
	done(c, 1, 1);
	ck_assert_int_eq(last_ev(&t)->kind, EV_RECORDED);
	ck_assert_int_eq(t.await_record, 0);
	env_end(&e, &t, 1);
}
END_TEST

/* The record was resumed elsewhere before it listed a fresh grant: this
 * connection grants nothing (its OK unsaid, the session ended as taken)
 * and the new lock, in no record the RESUME read, is released. */
START_TEST(test_replaced_connection_grants_nothing)
{
	struct env e;
	struct tsess t;

	graced(&e, &t);
	locks_acquire(t.cl, "k1", 2, LK_EXCLUSIVE, -1, 0);
	fake_acquire_done(fake_store_take(e.st, FAKE_ACQUIRE), 1, 1, 7);
	done(take_op(&e, "key"), 1, 0);
	ck_assert_int_eq(last_ev(&t)->kind, EV_TAKEN);
	ck_assert_int_eq(t.await_record, 1);	/* never told OK */
	ck_assert_uint_eq(fake_store_pending(e.st, FAKE_RELEASE), 1);
	ck_assert_uint_eq(e.b.stats.grace_sessions, 0);
	env_end(&e, &t, 1);
}
END_TEST

/* A lock found gone: the record decides.  Resumed elsewhere: taken (no
 * loss told); still ours but the record lost: written again. */
START_TEST(test_doubt_resumed_elsewhere)
{
	struct env e;
	struct tsess t;

	graced(&e, &t);
	ck_assert_int_eq(grace_doubt(t.g), 1);
	done(take_op(&e, "check"), 1, 0);
	ck_assert_int_eq(last_ev(&t)->kind, EV_TAKEN);
	env_end(&e, &t, 1);
}
END_TEST

START_TEST(test_doubt_record_lost_is_reclaimed)
{
	struct env e;
	struct tsess t;
	struct fake_call *c;
	int n;

	graced(&e, &t);
	hold(&e, &t, "k1", 7);
	n = t.nev;
	ck_assert_int_eq(grace_doubt(t.g), 1);
	done(take_op(&e, "check"), 1, -1);
	c = take_op(&e, "reclaim");
	ck_assert_str_eq(c->args[1], "1");
	ck_assert_str_eq(c->args[6], "attached");
	ck_assert_str_eq(c->args[8], "k1");
	done(c, 1, 2);
	ck_assert_int_eq(t.nev, n);		/* nothing to tell */
	ck_assert_ptr_nonnull(t.g);
	env_end(&e, &t, 1);
}
END_TEST

/* Redis is back (a restart may have lost the records): every grace
 * session's record is written again where it is gone, attached or
 * detached, with its holds. */
START_TEST(test_store_up_reclaims_every_record)
{
	struct env e;
	struct tsess t[2];
	struct fake_call *c;

	env_start(&e);
	sess_start(&e, &t[0], 0);
	sess_start(&e, &t[1], 1);
	hello_ok(&e, &t[0], 3000);
	hello_ok(&e, &t[1], 3000);
	hold(&e, &t[0], "k1", 7);
	sess_end(&t[1], GRACE_LOST);
	done(take_op(&e, "write"), 1, 1);
	grace_store_up(&e.b);
	c = take_op(&e, "reclaim");
	ck_assert_str_eq(c->key, ids[0]);
	ck_assert_str_eq(c->args[6], "attached");
	ck_assert_uint_eq(c->nargs, 10);
	done(c, 1, 2);
	c = take_op(&e, "reclaim");
	ck_assert_str_eq(c->key, ids[1]);
	ck_assert_str_eq(c->args[6], "detached");
	done(c, 1, 1);
	ck_assert_uint_eq(fake_store_pending(e.st, FAKE_SESSION), 0);
	env_end(&e, t, 2);
}
END_TEST

Suite *
grace_suite(void)
{
	Suite *s = suite_create("grace");
	TCase *tc;

	tc = tcase_create("hello");
	tcase_add_test(tc, test_hello_records_then_answers);
	tcase_add_test(tc, test_hello_unrecorded_has_no_grace);
	tcase_add_test(tc, test_hello_redis_down);
	tcase_add_test(tc, test_hello_again_keeps_its_grace);
	tcase_add_test(tc, test_hello_resumed_elsewhere_is_taken);
	tcase_add_test(tc, test_quit_ends_the_record);
	tcase_add_test(tc, test_lost_detaches_until_the_grace_runs_out);
	suite_add_tcase(s, tc);

	tc = tcase_create("resume");
	tcase_add_loop_test(tc, test_resume_not_a_client_id, 0,
	    (int)(sizeof not_ids / sizeof not_ids[0]));
	tcase_add_test(tc, test_resume_redis_down);
	tcase_add_loop_test(tc, test_resume_refused, 0,
	    (int)(sizeof refusals / sizeof refusals[0]));
	tcase_add_test(tc, test_resume_takes_the_keys_over);
	tcase_add_test(tc, test_resume_takeover_unanswered);
	tcase_add_test(tc, test_resume_raced_by_a_later_one);
	tcase_add_test(tc, test_resume_here_ends_the_old_connection);
	tcase_add_test(tc, test_stop_answers_a_resume);
	suite_add_tcase(s, tc);

	tc = tcase_create("record");
	tcase_add_test(tc, test_fresh_grant_waits_for_its_record);
	tcase_add_test(tc, test_replaced_connection_grants_nothing);
	tcase_add_test(tc, test_doubt_resumed_elsewhere);
	tcase_add_test(tc, test_doubt_record_lost_is_reclaimed);
	tcase_add_test(tc, test_store_up_reclaims_every_record);
	suite_add_tcase(s, tc);
	return s;
}
