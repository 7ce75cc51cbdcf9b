/*
 * decode.c - each script's reply, decoded for the caller of store.h: the
 * one place that knows a reply's shape.  A decoder given r NULL tells its
 * caller Redis could not answer (link lost, reply timeout, error reply);
 * it returns 0 when it answered, 1 when a grant waiting for replica acks
 * was parked (can_park), -1 when r has the wrong shape (nothing told).
 */
#include "calls_int.h"
#include "resp.h"
#include "util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
decode_printable(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)p[i] < 0x21 || (unsigned char)p[i] > 0x7e)
			return 0;
	return len > 0;
}

/* OWNER: split a stored value (a lock's string, a set's holder) for the
 * caller; a value no broker wrote (foreign bytes under our prefix) shows
 * as "?", never echoed raw.  The owner is the client-id: a resumed
 * session's generation or a lingering release's mark ("/..." after it) is
 * the store's business.  h points into value. */
static void
holder_split(const char *value, size_t len, long long pttl,
    struct store_holder *h)
{
	const char *colon = decode_printable(value, len) ?
	    memrchr(value, ':', len) : NULL;
	/* the owner ends at the token's colon, or at a '/' before it */
	const char *slash = colon != NULL ?
	    memchr(value, '/', (size_t)(colon - value)) : NULL;
	const char *end = slash != NULL && slash > value ? slash : colon;

	*h = (struct store_holder){ "?", 1, 0, pttl, NULL, 0 };
	if (!decode_printable(value, len))
		return;
	if (colon == NULL) {
		h->owner = value;
		h->ownerlen = len;
		return;
	}
	h->token = strtoll(colon + 1, NULL, 10);
	if (colon != value) {
		h->owner = value;
		h->ownerlen = (size_t)(end - value);
	}
}

/*
 * owner.lua's reply: {} free; {value, pttl} held exclusive; {kind, total,
 * value, pttl, ...} held shared or a semaphore, at most STORE_OWNER_SHOWN
 * holders of total.  -1 when the shape is wrong.
 */
int
decode_owner(struct call *c, const redisReply *r, int can_park)
{
	struct store_holder h[STORE_OWNER_SHOWN];
	size_t n;

	(void)can_park;
	if (r == NULL) {
		c->fn.owner(c->arg, 0, STORE_EXCLUSIVE, NULL, 0, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY)
		return -1;
	if (r->elements == 0) {
		c->fn.owner(c->arg, 1, STORE_EXCLUSIVE, NULL, 0, 0);
		return 0;
	}
	if ((r->elements == 2 || r->elements == 3) &&
	    r->element[0]->type == REDIS_REPLY_STRING) {
		const redisReply *text = r->elements == 3 ? r->element[2] : NULL;

		if (!resp_is_int(r->element[1]) || (text != NULL &&
		    text->type != REDIS_REPLY_STRING))
			return -1;
		holder_split(r->element[0]->str, (size_t)r->element[0]->len,
		    r->element[1]->integer, &h[0]);
		/* a value is shown only as the broker checks it: printable,
		 * at most STORE_VALUE_MAX bytes */
		if (text != NULL && text->len <= STORE_VALUE_MAX &&
		    decode_printable(text->str, (size_t)text->len)) {
			h[0].value = text->str;
			h[0].valuelen = (size_t)text->len;
		}
		c->fn.owner(c->arg, 1, STORE_EXCLUSIVE, h, 1, 1);
		return 0;
	}
	n = (r->elements - 2) / 2;
	if (r->elements < 4 || r->elements % 2 != 0 ||
	    n > STORE_OWNER_SHOWN || !resp_is_int(r->element[0]) ||
	    !resp_is_int(r->element[1]) || r->element[0]->integer < 0 ||
	    r->element[0]->integer > LONG_MAX ||
	    r->element[1]->integer < (long long)n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const redisReply *v = r->element[2 + 2 * i];
		const redisReply *pttl = r->element[3 + 2 * i];

		if (v->type != REDIS_REPLY_STRING || !resp_is_int(pttl))
			return -1;
		holder_split(v->str, (size_t)v->len, pttl->integer, &h[i]);
	}
	c->fn.owner(c->arg, 1, (long)r->element[0]->integer, h, n,
	    (size_t)r->element[1]->integer);
	return 0;
}

/* A session record's reply: {status, ...} or a bare status. */
int
decode_session(struct call *c, const redisReply *r, int can_park)
{
	struct store_str *rest;
	char (*num)[24];
	size_t n;

	(void)can_park;
	if (r == NULL) {
		c->fn.session_rec(c->arg, 0, 0, NULL, 0);
		return 0;
	}
	if (resp_is_int(r)) {
		c->fn.session_rec(c->arg, 1, r->integer, NULL, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
	    !resp_is_int(r->element[0]))
		return -1;
	n = r->elements - 1;
	rest = xcalloc(n + 1, sizeof *rest);
	num = xcalloc(n + 1, sizeof *num);
	for (size_t i = 0; i < n; i++) {
		const redisReply *e = r->element[i + 1];

		if (resp_is_int(e)) {
			int l = snprintf(num[i], sizeof num[i], "%lld",
			    e->integer);
			rest[i] = (struct store_str){ num[i], (size_t)l };
		} else if (e->type == REDIS_REPLY_STRING) {
			rest[i] = (struct store_str){ e->str, (size_t)e->len };
		} else {
			free(rest);
			free(num);
			return -1;
		}
	}
	c->fn.session_rec(c->arg, 1, r->element[0]->integer, rest, n);
	free(rest);
	free(num);
	return 0;
}

/* A script's answer about a hold (1, 0 or 3: store.h's STORE_DONE,
 * STORE_GONE, STORE_TAKEN); anything else reads as gone. */
static int
found_of(long long v)
{
	return v == STORE_DONE || v == STORE_TAKEN ? (int)v : STORE_GONE;
}

/*
 * A grant's reply (acquire, handoff, takeover): {granted, n} or {granted,
 * n, more}; or, from the lean batch (scripts/batch/lean.lua), a bare
 * token (> 0) for a grant that set none aside.  max: the highest granted
 * its script answers (3, another kind; 4, a record's grant: acquire.lua's
 * only).  A grant (1) waiting for replica acks is parked, its token kept.
 */
static int
grant_decode(struct call *c, const redisReply *r, int can_park, int max)
{
	long more;

	if (r == NULL) {
		c->fn.acquire(c->arg, 0, 0, 0, 0);
		return 0;
	}
	if (r->type == REDIS_REPLY_INTEGER) {
		if (r->integer <= 0)
			return -1;
		if (can_park) {
			c->token = r->integer;
			return 1;
		}
		c->fn.acquire(c->arg, 1, 1, r->integer, 0);
		return 0;
	}
	/* a grant's third element: tokens set aside after it */
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
	    r->elements > 3 || !resp_is_int(r->element[0]) ||
	    !resp_is_int(r->element[1]) || (r->elements == 3 &&
	    !resp_is_int(r->element[2])))
		return -1;
	/* (of a shared attempt not granted: the writers it came after,
	 * sacquire.lua) */
	more = r->elements == 3 && (r->element[0]->integer == 1 ||
	    r->element[0]->integer == 0) &&
	    r->element[2]->integer > 0 ? (long)r->element[2]->integer : 0;
	if (r->element[0]->integer < -1 || r->element[0]->integer > max)
		return -1;
	if (can_park && r->element[0]->integer == 1) {
		c->token = r->element[1]->integer;
		return 1;
	}
	c->fn.acquire(c->arg, 1, (int)r->element[0]->integer,
	    r->element[1]->integer, more);
	return 0;
}

int
decode_acquire(struct call *c, const redisReply *r, int can_park)
{
	return grant_decode(c, r, can_park, STORE_RECORD_GRANTED);
}

/* takeover.lua: {granted, token} or {1, token, text}, text the hold's
 * value (shown only as the broker checks values: printable, at most
 * STORE_VALUE_MAX bytes). */
int
decode_takeover(struct call *c, const redisReply *r, int can_park)
{
	const redisReply *text;

	(void)can_park;
	if (r == NULL) {
		c->fn.takeover(c->arg, 0, 0, 0, NULL, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
	    r->elements > 3 || !resp_is_int(r->element[0]) ||
	    !resp_is_int(r->element[1]) || r->element[0]->integer < 0 ||
	    r->element[0]->integer > 1)
		return -1;
	text = r->elements == 3 ? r->element[2] : NULL;
	if (text != NULL && (text->type != REDIS_REPLY_STRING ||
	    text->len > STORE_VALUE_MAX || !decode_printable(text->str,
	    (size_t)text->len)))
		text = NULL;
	c->fn.takeover(c->arg, 1, (int)r->element[0]->integer,
	    r->element[1]->integer, text != NULL ? text->str : NULL,
	    text != NULL ? (size_t)text->len : 0);
	return 0;
}

/* release, forget, linger, wmark, pass (store_pass_fn is of the same
 * type), value, a grant's undo, and the fenced writes (setif, delif: 1
 * written, 0 the hold is not alive): what Redis showed of the hold */
int
decode_release(struct call *c, const redisReply *r, int can_park)
{
	(void)can_park;
	if (r == NULL) {
		c->fn.release(c->arg, 0, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_INTEGER)
		return -1;
	c->fn.release(c->arg, 1, found_of(r->integer));
	return 0;
}

int
decode_renew(struct call *c, const redisReply *r, int can_park)
{
	int done[STORE_RENEW_BATCH];

	(void)can_park;
	if (r == NULL) {
		c->fn.renew(c->arg, 0, NULL, c->nrenew);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != c->nrenew)
		return -1;
	for (size_t i = 0; i < r->elements; i++) {
		if (!resp_is_int(r->element[i]))
			return -1;
		done[i] = (int)r->element[i]->integer;
	}
	c->fn.renew(c->arg, 1, done, c->nrenew);
	return 0;
}

/* check.lua: {1} current, {0, token} stale (-1: free). */
int
decode_check(struct call *c, const redisReply *r, int can_park)
{
	(void)can_park;
	if (r == NULL) {
		c->fn.check(c->arg, 0, 0, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
	    !resp_is_int(r->element[0]))
		return -1;
	if (r->element[0]->integer == 1) {
		c->fn.check(c->arg, 1, 1, 0);
		return 0;
	}
	if (r->elements != 2 || !resp_is_int(r->element[1]))
		return -1;
	c->fn.check(c->arg, 1, 0, r->element[1]->integer > 0 ?
	    r->element[1]->integer : 0);
	return 0;
}

/* acquire_all.lua: {1, token...}, {0, i, pttl, ...}, {2, ms}, {3, i,
 * kind} or {-1, 0}; indexes 1-based there, 0-based for the caller. */
int
decode_all(struct call *c, const redisReply *r, int can_park)
{
	long long tokens[STORE_ALL_MAX], pttl[STORE_ALL_MAX];
	size_t busy[STORE_ALL_MAX];
	struct store_all_result res = { .tokens = tokens, .busy = busy,
	    .pttl = pttl };

	(void)can_park;
	if (r == NULL) {
		c->fn.all(c->arg, 0, &res);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
	    r->elements > 1 + 2 * STORE_ALL_MAX)
		return -1;
	for (size_t i = 0; i < r->elements; i++)
		if (!resp_is_int(r->element[i]))
			return -1;
	res.granted = (int)r->element[0]->integer;
	switch (res.granted) {
	case 1:
		res.n = r->elements - 1;
		if (res.n > STORE_ALL_MAX)
			return -1;
		for (size_t i = 0; i < res.n; i++)
			tokens[i] = r->element[i + 1]->integer;
		break;
	case 0:
		if ((r->elements - 1) % 2 != 0)
			return -1;
		res.nbusy = (r->elements - 1) / 2;
		for (size_t i = 0; i < res.nbusy; i++) {
			long long at = r->element[1 + 2 * i]->integer;

			if (at < 1 || at > STORE_ALL_MAX)
				return -1;
			busy[i] = (size_t)(at - 1);
			pttl[i] = r->element[2 + 2 * i]->integer;
		}
		break;
	case 2:
		res.ms = r->element[1]->integer;
		break;
	case 3:
		if (r->elements != 3 || r->element[1]->integer < 1 ||
		    r->element[1]->integer > STORE_ALL_MAX ||
		    r->element[2]->integer < 0 ||
		    r->element[2]->integer > LONG_MAX)
			return -1;
		res.index = (size_t)(r->element[1]->integer - 1);
		res.kind = (long)r->element[2]->integer;
		break;
	case -1:
		break;
	default:
		return -1;
	}
	c->fn.all(c->arg, 1, &res);
	return 0;
}

/* --- the admin view ---------------------------------------------------- */

static int
str_of(const redisReply *r, struct store_str *out)
{
	if (r->type != REDIS_REPLY_STRING)
		return -1;
	*out = (struct store_str){ r->str, (size_t)r->len };
	return 0;
}

/*
 * locks.lua: {cursor, hash, token, now_us, then 7 per holder: batch
 * cursor, key hash, name, kind, value, token, ms left}, at most
 * STORE_LOCKS_MAX holders.  Each value is split as OWNER splits it (a
 * value no broker wrote shows as "?").
 */
int
decode_locks(struct call *c, const redisReply *r, int can_park)
{
	struct locks_raw *p;
	size_t n;

	(void)can_park;
	if (r == NULL) {
		c->fn.locks_page(c->arg, 0, NULL);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 4 ||
	    (r->elements - 4) % 7 != 0 ||
	    (n = (r->elements - 4) / 7) > STORE_LOCKS_MAX ||
	    !resp_is_int(r->element[2]) || !resp_is_int(r->element[3]))
		return -1;
	p = xcalloc(1, sizeof *p);
	if (str_of(r->element[0], &p->scan) != 0 ||
	    str_of(r->element[1], &p->hash) != 0)
		goto bad;
	p->token = r->element[2]->integer;
	p->now_us = r->element[3]->integer;
	for (size_t i = 0; i < n; i++) {
		redisReply *const *x = r->element + 4 + 7 * i;
		struct locks_raw_entry *e = &p->e[i];
		struct store_str v;
		struct store_holder h;

		if (str_of(x[0], &e->scan) != 0 || str_of(x[1], &e->hash) != 0 ||
		    str_of(x[2], &e->name) != 0 || !resp_is_int(x[3]) ||
		    str_of(x[4], &v) != 0 || !resp_is_int(x[5]) ||
		    !resp_is_int(x[6]) || x[3]->integer < STORE_EXCLUSIVE ||
		    x[3]->integer > LONG_MAX)
			goto bad;
		holder_split(v.p, v.len, x[6]->integer, &h);
		e->owner = (struct store_str){ h.owner, h.ownerlen };
		e->kind = (long)x[3]->integer;
		e->token = x[5]->integer;	/* the order pages go by */
		e->pttl = x[6]->integer;
	}
	p->n = n;
	c->fn.locks_page(c->arg, 1, p);
	free(p);
	return 0;
bad:
	free(p);
	return -1;
}

/* peek.lua: one string or nil per key asked. */
int
decode_peek(struct call *c, const redisReply *r, int can_park)
{
	struct store_str *v;

	(void)can_park;
	if (r == NULL) {
		c->fn.peek(c->arg, 0, NULL, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)c->cmd.nkeys)
		return -1;
	v = xcalloc(r->elements + 1, sizeof *v);
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i];

		if (e->type == REDIS_REPLY_STRING)
			v[i] = (struct store_str){ e->str, (size_t)e->len };
		else if (e->type != REDIS_REPLY_NIL) {
			free(v);
			return -1;
		}
	}
	c->fn.peek(c->arg, 1, v, r->elements);
	free(v);
	return 0;
}

/* free.lua: {holds freed, greatest token}. */
int
decode_free(struct call *c, const redisReply *r, int can_park)
{
	(void)can_park;
	if (r == NULL) {
		c->fn.free(c->arg, 0, 0, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    !resp_is_int(r->element[0]) || !resp_is_int(r->element[1]) ||
	    r->element[0]->integer < 0)
		return -1;
	c->fn.free(c->arg, 1, r->element[0]->integer, r->element[1]->integer);
	return 0;
}

/* kill.lua's "end": {} no live record, or {gen, key...}. */
int
decode_kill(struct call *c, const redisReply *r, int can_park)
{
	struct store_str *keys;
	size_t n;

	(void)can_park;
	if (r == NULL) {
		c->fn.kill(c->arg, 0, 0, 0, NULL, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY)
		return -1;
	if (r->elements == 0) {
		c->fn.kill(c->arg, 1, 0, 0, NULL, 0);
		return 0;
	}
	if (!resp_is_int(r->element[0]) || r->element[0]->integer < 1)
		return -1;
	n = r->elements - 1;
	keys = xcalloc(n + 1, sizeof *keys);
	for (size_t i = 0; i < n; i++)
		if (str_of(r->element[i + 1], &keys[i]) != 0) {
			free(keys);
			return -1;
		}
	c->fn.kill(c->arg, 1, 1, (unsigned long)r->element[0]->integer, keys,
	    n);
	free(keys);
	return 0;
}

/* announce.lua: {listenall (0 or 1), the master's clock in Unix ms} */
int
decode_announce(struct call *c, const redisReply *r, int can_park)
{
	(void)can_park;
	if (r == NULL) {
		c->fn.announce(c->arg, 0, 0, 0, 0);
		return 0;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    !resp_is_int(r->element[0]) || !resp_is_int(r->element[1]))
		return -1;
	c->fn.announce(c->arg, 1, r->element[0]->integer == 1,
	    r->element[1]->integer, c->cmd.born_ms);
	return 0;
}
