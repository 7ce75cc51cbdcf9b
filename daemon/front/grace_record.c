/*
 * grace_record.c - a grace session's record in Redis (session.lua): the
 * calls that write it, the fields that must reach it (written until Redis
 * takes them), and a grace object's lifetime, which its calls in flight
 * hold (grace_int.h).
 */
#include "grace_int.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- record calls ------------------------------------------------------ */

void
grace_waits_free(struct grace *g)
{
	for (size_t i = 0; i < g->nwaits; i++)
		free(g->waits[i].key);
	free(g->waits);
	g->waits = NULL;
	g->nwaits = 0;
}

void
grace_fields_free(struct grace *g)
{
	struct gfield *f;

	while ((f = g->fields) != NULL) {
		g->fields = f->next;
		free(f->val);
		free(f);
	}
}

void
grace_unref(struct grace *g)
{
	if (--g->refs > 0 || !g->dead)
		return;
	grace_waits_free(g);
	grace_fields_free(g);
	event_free(g->timer);
	free(g);
}

void
grace_timer_in(struct grace *g, long ms)
{
	timer_add_ms(g->timer, ms);
}

long
grace_touch_period(const struct grace *g)
{
	long p = g->grace_ms / 3;

	return p < TOUCH_MIN_MS ? TOUCH_MIN_MS : p > TOUCH_MAX_MS ?
	    TOUCH_MAX_MS : p;
}

/* An attached record outlives a broker that stops touching it by the
 * grace. */
long
grace_attached_px(const struct grace *g)
{
	return g->grace_ms + 2 * grace_touch_period(g);
}

void
grace_rargs_add(struct rargs *r, const char *p, size_t len)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 16;
		r->a = realloc(r->a, r->cap * sizeof *r->a);
		if (r->a == NULL)
			fatalx("out of memory");
	}
	r->a[r->n++] = (struct store_str){ p, len };
}

void
grace_rargs_str(struct rargs *r, const char *p)
{
	grace_rargs_add(r, p, strlen(p));
}

/* Numbers live in one array sized up front (no pointer moves). */
void
grace_rargs_num(struct rargs *r, long long v)
{
	int l;

	if (r->nnum == r->numcap)
		fatalx("grace: more numbers than the call has room for");
	l = snprintf(r->num[r->nnum], sizeof r->num[0], "%lld", v);

	grace_rargs_add(r, r->num[r->nnum++], (size_t)l);
}

struct holdvals {
	struct rargs *r;
	char (*val)[HOLD_VAL_MAX];
	size_t n;
};

/* A hold's value in the record: "<holds> <ttl>" for an exclusive lock
 * (as before shared locks), "<holds> <ttl> <kind>" for a shared hold (0)
 * or a permit (n), "<holds> <ttl> -1 <delay>" for an exclusive lock with
 * a lock delay (brokers before lock delays read a kind below 0 as an
 * exclusive lock, and stop there). */
int
grace_hold_val(char *buf, unsigned holds, long ttl_ms, long kind,
    long delay_ms)
{
	if (kind == LK_EXCLUSIVE && delay_ms > 0)
		return snprintf(buf, HOLD_VAL_MAX, "%u %ld -1 %ld", holds,
		    ttl_ms, delay_ms);
	return kind == LK_EXCLUSIVE ? snprintf(buf, HOLD_VAL_MAX, "%u %ld",
	    holds, ttl_ms) : snprintf(buf, HOLD_VAL_MAX, "%u %ld %ld", holds,
	    ttl_ms, kind);
}

static void
add_hold(void *arg, const char *key, size_t keylen, unsigned holds,
    long ttl_ms, long kind, long delay_ms)
{
	struct holdvals *h = arg;
	int l = grace_hold_val(h->val[h->n], holds, ttl_ms, kind, delay_ms);

	grace_rargs_add(h->r, key, keylen);
	grace_rargs_add(h->r, h->val[h->n++], (size_t)l);
}

/* A session.lua call for g; the callback gets arg (g itself, or a
 * struct naming g first). */
int
grace_record_call_arg(struct grace *g, struct rargs *r, store_session_fn *fn,
    void *arg)
{
	int rc;

	g->refs++;
	rc = store_session(g->b->store, g->cid, CLIENTID_LEN, r->a, r->n,
	    fn, arg);
	if (rc != 0)
		g->refs--;
	return rc;
}

int
grace_record_call(struct grace *g, struct rargs *r, store_session_fn *fn)
{
	return grace_record_call_arg(g, r, fn, g);
}

/*
 * The whole record: session.lua "write" (op) with the state and every
 * hold.  Used by HELLO GRACE (attached), a detach, a resumed session's
 * first write, and to make the record again when Redis lost it ("write",
 * or "reclaim": only if Redis lost it).  The callback gets arg.
 */
int
grace_record_write_op(struct grace *g, const char *op, const char *state, long px,
    store_session_fn *fn, void *arg)
{
	size_t nheld = g->cl != NULL ? locks_held(g->cl, NULL, NULL) : 0;
	char num[8][24];
	struct rargs r = RARGS(num);
	struct holdvals h = { &r, NULL, 0 };
	int rc;

	h.val = xcalloc(nheld + 1, sizeof *h.val);
	grace_rargs_str(&r, op);
	grace_rargs_num(&r, (long long)g->gen);
	grace_rargs_str(&r, g->secret);
	grace_rargs_num(&r, g->grace_ms);
	grace_rargs_num(&r, px);
	grace_rargs_str(&r, g->b->id);
	grace_rargs_str(&r, state);
	grace_rargs_str(&r, g->app);
	if (g->cl != NULL)
		locks_holds(g->cl, add_hold, &h);
	rc = grace_record_call_arg(g, &r, fn, arg);
	free(h.val);
	free(r.a);
	return rc;
}

int
grace_record_write(struct grace *g, const char *state, long px,
    store_session_fn *fn)
{
	return grace_record_write_op(g, "write", state, px, fn, g);
}

void
grace_noop_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	(void)ok;
	(void)status;
	(void)rest;
	(void)n;
	grace_unref(arg);
}

static void field_send(struct gfield *f);

static void
field_unlink(struct gfield *f)
{
	struct gfield **pp;

	for (pp = &f->g->fields; *pp != NULL; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	free(f->val);
	free(f);
}

static void
field_done(void *arg, int ok, long long status, const struct store_str *rest,
    size_t n)
{
	struct gfield *f = arg;
	struct grace *g = f->g;

	(void)rest;
	(void)n;
	f->sending = 0;
	if (!g->dead && (!ok || f->again)) {
		/* not taken (sent again when Redis answers, or at the next
		 * touch), or changed since: the latest value goes */
		f->again = 0;
		if (ok)
			field_send(f);
	} else {
		/* written, or the record is gone or another generation's:
		 * nothing more to write */
		(void)status;
		field_unlink(f);
	}
	grace_unref(g);
}

static void
field_send(struct gfield *f)
{
	struct grace *g = f->g;
	char num[4][24];
	struct rargs r = RARGS(num);

	grace_rargs_str(&r, f->op);
	grace_rargs_num(&r, (long long)g->gen);
	grace_rargs_add(&r, f->key, f->keylen);
	grace_rargs_str(&r, f->val);
	if (grace_record_call_arg(g, &r, field_done, f) == 0)
		f->sending = 1;
	free(r.a);
}

/* Send again the fields Redis has not taken (it is back, or a touch). */
void
grace_fields_flush(struct grace *g)
{
	for (struct gfield *f = g->fields; f != NULL; f = f->next)
		if (!f->sending)
			field_send(f);
}

/* One field of the record: op "wait" or "watch", val "" to delete it.
 * Not waited for, but written for sure while the record is this
 * connection's (struct gfield). */
static int
record_field(struct grace *g, const char *op, const char *key, size_t keylen,
    const char *val)
{
	struct gfield *f;

	if (g == NULL || g->dead || g->opening || g->state == G_RESUMING)
		return -1;
	for (f = g->fields; f != NULL; f = f->next)
		if (f->op == op && f->keylen == keylen &&
		    memcmp(f->key, key, keylen) == 0)
			break;
	if (f == NULL) {
		f = xcalloc(1, sizeof *f + keylen);
		f->g = g;
		f->op = op;
		f->keylen = keylen;
		memcpy(f->key, key, keylen);
		f->next = g->fields;
		g->fields = f;
	}
	free(f->val);
	f->val = xstrndup(val, strlen(val));
	if (f->sending)
		f->again = 1;
	else
		field_send(f);
	return f->sending ? 0 : -1;
}

static const char op_wait[] = "wait", op_watch[] = "watch";

int
grace_wait(struct grace *g, const char *key, size_t keylen, const char *val)
{
	return record_field(g, op_wait, key, keylen, val != NULL ? val : "");
}

int
grace_watch(struct grace *g, const char *key, size_t keylen, int on)
{
	return record_field(g, op_watch, key, keylen, on ? "1" : "");
}

int
grace_record_simple(struct grace *g, const char *op, long long arg,
    const char *arg2, store_session_fn *fn)
{
	char num[4][24];
	struct rargs r = RARGS(num);
	int rc;

	grace_rargs_str(&r, op);
	grace_rargs_num(&r, (long long)g->gen);
	grace_rargs_num(&r, arg);
	if (arg2 != NULL)
		grace_rargs_str(&r, arg2);
	rc = grace_record_call(g, &r, fn);
	free(r.a);
	return rc;
}