/*
 * fake_store.c - store.h answered by hand, for the lock table's unit tests.
 *
 * See fake_store.h.  Requests are copied (key and value bytes too: the lock
 * table passes renew items built on its stack) into a singly linked FIFO; the
 * test takes them out and completes them.  Never any I/O or timer, so
 * the order of every callback is the order the test chose.
 */
#include "fake_store.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct store {
	struct fake_call *head, *tail;
	int up;
	int fail;
	long coming;			/* store_key_coming while not up */
	int records;			/* store_rwait records */
	uint64_t tenures;
	size_t calls[FAKE__COUNT];
};

static void *
fs_alloc(size_t size)
{
	void *p = calloc(1, size ? size : 1);

	if (p == NULL)
		abort();
	return p;
}

static char *
fs_copy(const char *p, size_t len)
{
	char *s = fs_alloc(len + 1);

	if (len > 0)
		memcpy(s, p, len);
	return s;
}

static int
fs_refuse(const struct store *st)
{
	return st == NULL || !st->up || st->fail;
}

static struct fake_call *
fs_push(struct store *st, enum fake_kind kind, const char *key,
    size_t keylen, const char *value, size_t valuelen, long ttl_ms,
    void *arg)
{
	struct fake_call *c = fs_alloc(sizeof *c);

	c->kind = kind;
	c->key = fs_copy(key, keylen);
	c->keylen = keylen;
	c->value = value != NULL ? fs_copy(value, valuelen) : NULL;
	c->valuelen = valuelen;
	c->ttl_ms = ttl_ms;
	c->arg = arg;
	if (st->tail != NULL)
		st->tail->next = c;
	else
		st->head = c;
	st->tail = c;
	st->calls[kind]++;
	return c;
}

struct store *
fake_store_new(void)
{
	struct store *st = fs_alloc(sizeof *st);

	st->up = 1;
	st->tenures = 1;
	return st;
}

void
fake_store_set_up(struct store *st, int up)
{
	st->up = up;
}

void
fake_store_set_coming(struct store *st, long ms)
{
	st->coming = ms;
}

void
fake_store_set_fail(struct store *st, int fail)
{
	st->fail = fail;
}

void
fake_store_set_records(struct store *st, int on)
{
	st->records = on;
}

size_t
fake_store_pending(const struct store *st, int kind)
{
	size_t n = 0;

	for (const struct fake_call *c = st->head; c != NULL; c = c->next)
		if (kind == FAKE_ANY || (int)c->kind == kind)
			n++;
	return n;
}

size_t
fake_store_calls(const struct store *st, int kind)
{
	size_t n = 0;

	for (int k = 0; k < FAKE__COUNT; k++)
		if (kind == FAKE_ANY || k == kind)
			n += st->calls[k];
	return n;
}

struct fake_call *
fake_store_peek(const struct store *st, int kind, size_t i)
{
	for (struct fake_call *c = st->head; c != NULL; c = c->next)
		if ((kind == FAKE_ANY || (int)c->kind == kind) && i-- == 0)
			return c;
	return NULL;
}

struct fake_call *
fake_store_take(struct store *st, int kind)
{
	struct fake_call **pp, *prev = NULL;

	for (pp = &st->head; *pp != NULL; prev = *pp, pp = &(*pp)->next) {
		struct fake_call *c = *pp;
		if (kind == FAKE_ANY || (int)c->kind == kind) {
			*pp = c->next;
			if (st->tail == c)
				st->tail = prev;
			c->next = NULL;
			return c;
		}
	}
	return NULL;
}

void
fake_call_free(struct fake_call *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->n; i++) {
		free(c->items[i].key);
		free(c->items[i].value);
	}
	free(c->items);
	for (size_t i = 0; i < c->nargs; i++)
		free(c->args[i]);
	free(c->args);
	free(c->key);
	free(c->value);
	free(c->next_owner);
	free(c->text);
	free(c);
}

void
fake_acquire_done(struct fake_call *c, int ok, int granted, long long n)
{
	fake_grant_done(c, ok, granted, n, 0);
}

void
fake_grant_done(struct fake_call *c, int ok, int granted, long long n,
    long more)
{
	if (c->kind == FAKE_TAKEOVER) {
		fake_takeover_done(c, ok, granted, n, NULL);
		return;
	}
	c->fn.acquire(c->arg, ok, granted, n, more);
	fake_call_free(c);
}

void
fake_takeover_done(struct fake_call *c, int ok, int granted, long long token,
    const char *text)
{
	c->fn.takeover(c->arg, ok, granted, token, text,
	    text != NULL ? strlen(text) : 0);
	fake_call_free(c);
}

void
fake_release_done(struct fake_call *c, int ok, int released)
{
	c->fn.release(c->arg, ok, released);
	fake_call_free(c);
}

void
fake_pass_done(struct fake_call *c, int ok, int passed)
{
	c->fn.pass(c->arg, ok, passed);
	fake_call_free(c);
}

void
fake_renew_done(struct fake_call *c, int ok, const int *renewed, size_t n)
{
	c->fn.renew(c->arg, ok, renewed, n);
	fake_call_free(c);
}

void
fake_session_done(struct fake_call *c, int ok, long long status,
    const char *const *rest, size_t n)
{
	struct store_str *v = fs_alloc((n + 1) * sizeof *v);

	for (size_t i = 0; i < n; i++)
		v[i] = (struct store_str){ rest[i], strlen(rest[i]) };
	c->fn.session(c->arg, ok, status, v, n);
	free(v);
	fake_call_free(c);
}

void
fake_owner_done(struct fake_call *c, int ok, const char *owner,
    long long token, long long pttl)
{
	struct store_holder h = { owner, owner ? strlen(owner) : 0, token,
	    pttl, NULL, 0 };

	c->fn.owner(c->arg, ok, STORE_EXCLUSIVE, &h, owner ? 1 : 0,
	    owner ? 1 : 0);
	fake_call_free(c);
}

/* The tests compare values as Redis stores them: "<owner>:<token>". */
static char *
fs_value(const char *owner, size_t ownerlen, long long token, size_t *len)
{
	char buf[128];
	int n = snprintf(buf, sizeof buf, "%.*s:%lld", (int)ownerlen, owner,
	    token);

	*len = (size_t)n;
	return fs_copy(buf, (size_t)n);
}

void
fake_store_drain(struct store *st)
{
	struct fake_call *c;

	st->up = 0;
	while ((c = fake_store_take(st, FAKE_ANY)) != NULL) {
		switch (c->kind) {
		case FAKE_ACQUIRE:
		case FAKE_HANDOFF:
		case FAKE_TAKEOVER:
			fake_acquire_done(c, 0, 0, 0);
			break;
		case FAKE_RELEASE:
			fake_release_done(c, 0, 0);
			break;
		case FAKE_PASS:
			fake_pass_done(c, 0, 0);
			break;
		case FAKE_RENEW:
			fake_renew_done(c, 0, NULL, 0);
			break;
		case FAKE_SESSION:
			fake_session_done(c, 0, 0, NULL, 0);
			break;
		case FAKE_OWNER:
		default:
			fake_owner_done(c, 0, NULL, 0, 0);
			break;
		}
	}
}

/* --- store.h ------------------------------------------------------------ */

struct store *
store_new(struct event_base *base, const struct store_cfg *cfg,
    const struct store_hooks *hooks)
{
	(void)base;
	(void)cfg;
	(void)hooks;
	return fake_store_new();
}

void
store_free(struct store *st)
{
	if (st == NULL)
		return;
	fake_store_drain(st);
	free(st);
}

int
store_is_up(const struct store *st)
{
	return st != NULL && st->up;
}

int
store_link_up(const struct store *st)
{
	return store_is_up(st);
}

uint64_t
store_tenures(const struct store *st)
{
	return st != NULL ? st->tenures : 0;
}

long long
store_lease_ms(const struct store *st)
{
	(void)st;
	return -1;
}

void
fake_store_new_tenure(struct store *st)
{
	st->tenures++;
}

int
store_key_up(const struct store *st, const char *key, size_t keylen)
{
	(void)key;
	(void)keylen;
	return store_is_up(st);
}

/* The master's clock: this host's (grants in unit tests are made now). */
int
store_redis_now(struct store *st, int64_t *ms)
{
	if (!store_is_up(st))
		return -1;
	*ms = wall_ms();
	return 0;
}

long
store_key_coming(const struct store *st, const char *key, size_t keylen)
{
	(void)key;
	(void)keylen;
	return store_is_up(st) ? 0 : st->coming;
}

size_t
store_inflight(const struct store *st)
{
	return fake_store_pending(st, FAKE_ANY);
}

uint64_t
store_reconnects(const struct store *st)
{
	(void)st;
	return 0;
}

int
store_acquire(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long kind, long ttl_ms, int will_wait,
    long reserve, long long seen, const char *text, size_t textlen,
    store_acquire_fn *fn, void *arg)
{
	struct fake_call *c;

	if (fs_refuse(st))
		return -1;
	c = fs_push(st, FAKE_ACQUIRE, key, keylen, owner, ownerlen, ttl_ms,
	    arg);
	c->text = textlen > 0 ? fs_copy(text, textlen) : NULL;
	c->fn.acquire = fn;
	c->akind = kind;
	c->will_wait = will_wait;
	c->reserve = reserve;
	c->seen = seen;
	return 0;
}

/* WANTED notices' messages: nothing sent (the notices are covered by
 * tests/integration/locks/test_notices.py). */
int
store_queue_report(struct store *st, const char *key, size_t keylen,
    unsigned waiters, long oldest_ms)
{
	(void)st;
	(void)key;
	(void)keylen;
	(void)waiters;
	(void)oldest_ms;
	return 0;
}

int
store_queue_ask(struct store *st, const char *key, size_t keylen,
    const char *to)
{
	(void)st;
	(void)key;
	(void)keylen;
	(void)to;
	return 0;
}

/* Writer marks are not faked: refused, as when Redis is down, so the
 * lock table's other requests are all the tests see (the marks are
 * covered by tests/integration/locks/test_shared.py). */
int
store_wmark(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, int op, long ttl_ms,
    store_release_fn *fn, void *arg)
{
	(void)st;
	(void)key;
	(void)keylen;
	(void)owner;
	(void)ownerlen;
	(void)op;
	(void)ttl_ms;
	(void)fn;
	(void)arg;
	return -1;
}

int
store_pass(struct store *st, const char *key, size_t keylen,
    const char *prev_owner, size_t prev_ownerlen, long long prev_token,
    const char *owner, size_t ownerlen, long long token, long ttl_ms,
    const char *text, size_t textlen, int had_value, store_pass_fn *fn,
    void *arg)
{
	struct fake_call *c;
	size_t valuelen, prevlen;
	char *value, *prev;

	if (fs_refuse(st))
		return -1;
	value = fs_value(owner, ownerlen, token, &valuelen);
	prev = fs_value(prev_owner, prev_ownerlen, prev_token, &prevlen);
	c = fs_push(st, FAKE_PASS, key, keylen, value, valuelen, ttl_ms, arg);
	c->text = textlen > 0 ? fs_copy(text, textlen) : NULL;
	c->had_value = had_value;
	free(value);
	c->fn.pass = fn;
	c->next_owner = prev;		/* the releasing hold's value */
	c->next_ownerlen = prevlen;
	return 0;
}

int
store_forget(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, store_release_fn *fn, void *arg)
{
	if (fs_refuse(st))
		return -1;
	fs_push(st, FAKE_RELEASE, key, keylen, owner, ownerlen, 0,
	    arg)->fn.release = fn;
	return 0;
}

/* Records for remote grants only with fake_store_set_records: else
 * waiters wait as without them. */
int
store_rwait(struct store *st, const char *key, size_t keylen, int record,
    unsigned long long wid, long ttl_ms, const char *owner,
    size_t ownerlen, const char *value, size_t valuelen, long keep_ms,
    store_release_fn *fn, void *arg)
{
	struct fake_call *c;

	(void)keep_ms;
	if (fs_refuse(st) || !st->records)
		return -1;
	c = fs_push(st, FAKE_RWAIT, key, keylen, owner, ownerlen, ttl_ms, arg);
	c->fn.release = fn;
	c->will_wait = record;
	c->seen = (long long)wid;
	if (valuelen > 0)
		c->text = fs_copy(value, valuelen);
	return 0;
}

int
store_handoff(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token,
    const char *next_owner, size_t next_ownerlen, long ttl_ms, long reserve,
    const char *text, size_t textlen, int had_value, store_acquire_fn *fn,
    void *arg)
{
	struct fake_call *c;
	size_t valuelen;
	char *value;

	if (fs_refuse(st))
		return -1;
	value = fs_value(owner, ownerlen, token, &valuelen);
	c = fs_push(st, FAKE_HANDOFF, key, keylen, value, valuelen, ttl_ms,
	    arg);
	c->text = textlen > 0 ? fs_copy(text, textlen) : NULL;
	c->had_value = had_value;
	free(value);
	c->fn.acquire = fn;
	c->reserve = reserve;
	c->next_owner = fs_copy(next_owner, next_ownerlen);
	c->next_ownerlen = next_ownerlen;
	return 0;
}

int
store_release(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, int had_value,
    store_release_fn *fn, void *arg)
{
	(void)had_value;
	size_t valuelen;
	char *value;

	if (fs_refuse(st))
		return -1;
	value = fs_value(owner, ownerlen, token, &valuelen);
	fs_push(st, FAKE_RELEASE, key, keylen, value, valuelen, 0,
	    arg)->fn.release = fn;
	free(value);
	return 0;
}

/* Recorded as a RELEASE whose ttl_ms is the linger. */
int
store_linger(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, long linger_ms,
    int had_value, store_release_fn *fn, void *arg)
{
	(void)had_value;
	size_t valuelen;
	char *value;
	struct fake_call *c;

	if (fs_refuse(st))
		return -1;
	value = fs_value(owner, ownerlen, token, &valuelen);
	c = fs_push(st, FAKE_RELEASE, key, keylen, value, valuelen, linger_ms,
	    arg);
	c->fn.release = fn;
	free(value);
	return 0;
}

int
store_renew(struct store *st, const struct store_renew_item *items,
    size_t n, int reassert, store_renew_fn *fn, void *arg)
{
	struct fake_call *c;

	(void)reassert;
	if (fs_refuse(st) || n == 0)
		return -1;
	{
		size_t vl;
		char *v = fs_value(items[0].owner, items[0].ownerlen,
		    items[0].token, &vl);

		c = fs_push(st, FAKE_RENEW, items[0].key, items[0].keylen, v,
		    vl, items[0].ttl_ms, arg);
		free(v);
	}
	c->fn.renew = fn;
	c->n = n;
	c->items = fs_alloc(n * sizeof *c->items);
	for (size_t i = 0; i < n; i++) {
		c->items[i].key = fs_copy(items[i].key, items[i].keylen);
		c->items[i].keylen = items[i].keylen;
		c->items[i].value = fs_value(items[i].owner,
		    items[i].ownerlen, items[i].token, &c->items[i].valuelen);
		c->items[i].ttl_ms = items[i].ttl_ms;
		c->items[i].kind = items[i].kind;
	}
	return 0;
}

int
store_owner(struct store *st, const char *key, size_t keylen,
    store_owner_fn *fn, void *arg)
{
	if (fs_refuse(st))
		return -1;
	fs_push(st, FAKE_OWNER, key, keylen, NULL, 0, 0, arg)->fn.owner = fn;
	return 0;
}

/* CHECK: no unit test drives it (tests/integration/locks/test_check.py
 * does, on a real Redis); refused, so locks_check answers UNAVAILABLE. */
int
store_check(struct store *st, const char *key, size_t keylen,
    long long token, store_check_fn *fn, void *arg)
{
	(void)st;
	(void)key;
	(void)keylen;
	(void)token;
	(void)fn;
	(void)arg;
	return -1;
}

/* SETIF, DELIF: no unit test drives them (front/test_fenced.py does, on
 * a real Redis); refused, so locks_fenced answers UNAVAILABLE. */
int
store_fenced(struct store *st, const char *key, size_t keylen,
    long long token, const char *datakey, size_t datakeylen,
    const char *value, size_t valuelen, long ttl_ms, store_release_fn *fn,
    void *arg)
{
	(void)st; (void)key; (void)keylen; (void)token; (void)datakey;
	(void)datakeylen; (void)value; (void)valuelen; (void)ttl_ms;
	(void)fn; (void)arg;
	return -1;
}

/* PROCLAIM and value refreshes: no unit test drives them
 * (front/test_v12_owner_value.py does, on a real Redis); refused. */
int
store_value(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, const char *text,
    size_t textlen, store_release_fn *fn, void *arg)
{
	(void)st; (void)key; (void)keylen; (void)owner; (void)ownerlen;
	(void)token; (void)text; (void)textlen; (void)fn; (void)arg;
	return -1;
}

/* WATCH's reads: no unit test drives them (front/test_watch.py does, on
 * a real Redis); refused, as while Redis is down. */
int
store_watch(struct store *st, const char *key, size_t keylen, long mark_ms,
    store_owner_fn *fn, void *arg)
{
	(void)st; (void)key; (void)keylen; (void)mark_ms; (void)fn;
	(void)arg;
	return -1;
}

/* OWNER ... VALUE: recorded as an OWNER (its answer has no value). */
int
store_owner_value(struct store *st, const char *key, size_t keylen,
    store_owner_fn *fn, void *arg)
{
	return store_owner(st, key, keylen, fn, arg);
}

/* Grace sessions (grace.c): refused like every request while down. */
int
store_session(struct store *st, const char *cid, size_t cidlen,
    const struct store_str *args, size_t nargs, store_session_fn *fn,
    void *arg)
{
	struct fake_call *c;

	if (fs_refuse(st))
		return -1;
	c = fs_push(st, FAKE_SESSION, cid, cidlen, NULL, 0, 0, arg);
	c->fn.session = fn;
	c->nargs = nargs;
	c->args = fs_alloc((nargs + 1) * sizeof *c->args);
	for (size_t i = 0; i < nargs; i++)
		c->args[i] = fs_copy(args[i].p, args[i].len);
	return 0;
}

int
store_takeover(struct store *st, const char *key, size_t keylen,
    const char *cid, size_t cidlen, unsigned long gen, long ttl_ms,
    store_takeover_fn *fn, void *arg)
{
	struct fake_call *c;

	if (fs_refuse(st))
		return -1;
	c = fs_push(st, FAKE_TAKEOVER, key, keylen, cid, cidlen, ttl_ms, arg);
	c->fn.takeover = fn;
	c->gen = gen;
	return 0;
}

/* ACQUIRE ALL: no unit test drives it (locks/test_multi.py does, on a
 * real Redis); refused, as while Redis is down. */
int
store_acquire_all(struct store *st, const char *const *keys,
    const size_t *keylens, size_t n, const char *owner, size_t ownerlen,
    long ttl_ms, int will_wait, store_all_fn *fn, void *arg)
{
	(void)st; (void)keys; (void)keylens; (void)n; (void)owner;
	(void)ownerlen; (void)ttl_ms; (void)will_wait; (void)fn; (void)arg;
	return -1;
}
