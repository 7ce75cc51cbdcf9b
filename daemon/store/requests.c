/*
 * requests.c - the script calls of store.h, one function each: which
 * script, its keys (the lock, the slot's counter and lock delay, a value
 * key, a watch mark...) and arguments, and which decoder answers
 * (calls_int.h).  Routing, sending and redirections are calls.c's.
 */
#include "calls_int.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Buffers for the names of a key's value key and watch mark (protocol
 * 1.2), which grant scripts take after their own keys.
 */
struct side_names {
	char vk[256], wk[256];
};

/*
 * Cluster mode: a renew batch is split by slot (a script's keys must
 * share one), and the caller answered once, when every part has.
 */
struct renew_gather {
	store_renew_fn *fn;
	void *arg;
	size_t n;
	unsigned left;			/* parts not answered yet */
	int anyok;
	int renewed[STORE_RENEW_BATCH];
};

struct renew_part {
	struct renew_gather *g;
	size_t n;
	unsigned short idx[STORE_RENEW_BATCH];	/* into the caller's items */
};

/* Record arguments per call: 7 + 2 per key, for max_locks_per_session
 * up to its largest value and then some. */
#define SESSION_ARGS_MAX (1 << 22)

/*
 * Cluster mode's last arguments of grant and reassert scripts: the
 * master's replication ids and the lock delay (lib/slot_tenure.lua), as
 * placeholders: node.c fills them from the master the call is sent to,
 * which a redirection may change.  Returns the count added.
 */
static int
tenure_pieces(struct piece *p)
{
	for (int i = 0; i < TENURE_ARGS; i++)
		p[i] = (struct piece){ NULL, 0, NULL, 0 };
	return TENURE_ARGS;
}

/*
 * The keys of a grant script: the lock, its counter and lock delay, and
 * in cluster mode the slot's tenure (those of the key's slot, r).
 * single_nk: how many of them the script takes in single and Sentinel
 * mode.  Returns the count set in p.
 */
static int
grant_keys(const struct store *st, const char *key, size_t keylen,
    const struct route *r, int single_nk, struct piece *p)
{
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	p[1] = (struct piece){ st->keys.fence, strlen(st->keys.fence), r->tag,
	    r->taglen };
	p[2] = (struct piece){ st->keys.delay, strlen(st->keys.delay), r->tag,
	    r->taglen };
	p[3] = (struct piece){ st->keys.tenure, strlen(st->keys.tenure), r->tag,
	    r->taglen };
	return r->slot < 0 ? single_nk : 4;
}

static size_t
writers_prefix(const struct store *st, const struct route *r, char *buf,
    size_t buflen)
{
	return calls_side_prefix(st->keys.writers, r, buf, buflen);
}

/*
 * The first two keys of value.lua and owner.lua ... VALUE: the lock key
 * and its value key ("<prefix>:value:", in cluster mode the slot's tag,
 * the key: in the lock's slot), routed to the key's node.  vk holds the
 * value key's prefix (256 bytes).
 */
static void
value_keys(struct store *st, const char *key, size_t keylen,
    struct route *r, struct piece *p, char *vk)
{
	calls_route_of(st, key, keylen, r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	p[1] = (struct piece){ vk, calls_side_prefix(st->keys.values, r, vk, 256),
	    key, keylen };
}

/* Add the key's watch mark to p (a grant reads whether watchers wait for
 * news), and its value key when the grant writes a value or deletes the
 * replaced hold's (with_value): keys nobody watches and holds without
 * values cost their scripts as little as before values.  Returns how many
 * (lib/holders.lua, grant_extras). */
static int
watch_keys(const struct store *st, const char *key, size_t keylen,
    const struct route *r, struct piece *p, struct side_names *b,
    int with_value)
{
	p[0] = (struct piece){ b->wk, calls_side_prefix(st->keys.watched, r, b->wk,
	    sizeof b->wk), key, keylen };
	if (!with_value)
		return 1;
	p[1] = (struct piece){ b->vk, calls_side_prefix(st->keys.values, r, b->vk,
	    sizeof b->vk), key, keylen };
	return 2;
}

/* pass.lua's arguments after its own: the release channel, the lock name
 * and the value text (none: left out; acquire.lua and handoff.lua take
 * the text alone, and find the channel and the name in their own
 * arguments).  Returns how many. */
static int
watch_args(const struct store *st, const char *key, size_t keylen,
    const struct route *r, struct piece *p, const char *text, size_t textlen)
{
	p[0] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r->tag, r->taglen };
	p[1] = (struct piece){ key, keylen, NULL, 0 };
	if (textlen == 0)
		return 2;
	p[2] = (struct piece){ text, textlen, NULL, 0 };
	return 3;
}

/*
 * Single and Sentinel mode: the key's listen mark ("<prefix>:listen:"
 * and the key, into mark: markbuf NULL leaves it out) and the prefix's
 * listen flag, which watch.lua and takeover.lua keep alive beside the
 * marks they set, so that lean releases read the marks and publish where
 * one exists (lib/holders.lua, listen_names).  Cluster mode sets none
 * (its releases publish every time).  Returns how many were added to p.
 */
static int
listen_keys(const struct store *st, const char *key, size_t keylen,
    const struct route *r, struct piece *p, char *markbuf, size_t marklen)
{
	int np = 0;

	if (r->slot >= 0)
		return 0;
	if (markbuf != NULL) {
		int l = snprintf(markbuf, marklen, "%s:", st->keys.listen);

		if (l < 0 || (size_t)l >= marklen)
			return 0;
		p[np++] = (struct piece){ markbuf, (size_t)l, key, keylen };
	}
	p[np++] = (struct piece){ st->keys.listen, strlen(st->keys.listen),
	    NULL, 0 };
	return np;
}

/*
 * Tokens a grant may set aside for local hand-offs (store_pass): none
 * with redis_replica_acks, where a grant counts only once replicas have
 * it, which a hand-off Redis hears of afterwards cannot wait for.
 */
static long
reserve_of(const struct store *st, long reserve)
{
	return st->cfg.acks > 0 || reserve < 0 ? 0 :
	    reserve > STORE_RESERVE_MAX ? STORE_RESERVE_MAX : reserve;
}

/*
 * acquire.lua (exclusive) or sacquire.lua (shared, a permit: ARGV[6] is the
 * kind); both take the owner as ARGV[1], so a grant WAIT did not confirm is
 * undone by value alike (group_undo).
 */
int
store_acquire(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long kind, long ttl_ms, int will_wait,
    long reserve, long long seen, const char *text, size_t textlen,
    store_acquire_fn *fn, void *arg)
{
	char ttl[FMT_LL_MAX], kd[FMT_LL_MAX], rs[FMT_LL_MAX], sn[FMT_LL_MAX];
	char wk[256];
	int tl = fmt_ll(ttl, ttl_ms), ta = 0, nk, np;
	int kl = fmt_ll(kd, kind);
	int rl = fmt_ll(rs, reserve_of(st, reserve));
	int sl = fmt_ll(sn, kind == 0 ? seen : 0);
	struct side_names sides;
	struct piece p[24];
	struct route r;

	if (kind < STORE_EXCLUSIVE || !calls_may_grant(st) ||
	    (kind != STORE_EXCLUSIVE && textlen > 0))
		return -1;

	calls_route_of(st, key, keylen, &r);
	np = nk = grant_keys(st, key, keylen, &r, 3, p);
	if (kind != STORE_EXCLUSIVE) {
		/* sacquire.lua: the writers waiting (wmark.lua) */
		p[np++] = (struct piece){ wk, writers_prefix(st, &r, wk,
		    sizeof wk), key, keylen };
		nk++;
	}
	nk += watch_keys(st, key, keylen, &r, &p[np], &sides, textlen > 0);
	np = nk;
	p[np++] = (struct piece){ owner, ownerlen, NULL, 0 };
	p[np++] = (struct piece){ ttl, (size_t)tl, NULL, 0 };
	p[np++] = (struct piece){ st->keys.wanted, strlen(st->keys.wanted), r.tag,
	    r.taglen };
	p[np++] = (struct piece){ kind == STORE_EXCLUSIVE ? st->keys.idsp :
	    st->keys.idplus, STORE_ID_LEN + 1, key, keylen };
	p[np++] = (struct piece){ will_wait == STORE_WAIT_RECORDED &&
	    kind == STORE_EXCLUSIVE ? "2" : will_wait ? "1" : "0", 1, NULL, 0 };
	if (kind != STORE_EXCLUSIVE) {
		p[np++] = (struct piece){ kd, (size_t)kl, NULL, 0 };
		p[np++] = (struct piece){ sn, (size_t)sl, NULL, 0 };
	} else {
		p[np++] = (struct piece){ rs, (size_t)rl, NULL, 0 };
	}
	if (r.slot >= 0) {
		ta = 3 + np;
		np += tenure_pieces(&p[np]);
	}
	if (textlen > 0)
		p[np++] = (struct piece){ text, textlen, NULL, 0 };
	return calls_grant(st, &r, kind == STORE_EXCLUSIVE ? SCRIPT_ACQUIRE :
	    SCRIPT_SACQUIRE, nk, p, np, 3 + nk, ta, fn, arg);
}

int
store_handoff(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token,
    const char *next_owner, size_t next_ownerlen, long ttl_ms, long reserve,
    const char *text, size_t textlen, int had_value, store_acquire_fn *fn,
    void *arg)
{
	char ttl[FMT_LL_MAX], tok[24], rs[FMT_LL_MAX];
	int tl = fmt_ll(ttl, ttl_ms), ta = 0, nk, np;
	int rl = fmt_ll(rs, reserve_of(st, reserve));
	struct side_names sides;
	struct piece p[24];
	struct route r;

	if (!calls_may_grant(st))
		return -1;
	calls_route_of(st, key, keylen, &r);
	np = nk = grant_keys(st, key, keylen, &r, 2, p);
	nk += watch_keys(st, key, keylen, &r, &p[np], &sides,
	    textlen > 0 || had_value);
	np = nk;
	calls_value_piece(&p[np++], owner, ownerlen, token, tok, sizeof tok);
	p[np++] = (struct piece){ next_owner, next_ownerlen, NULL, 0 };
	p[np++] = (struct piece){ ttl, (size_t)tl, NULL, 0 };
	p[np++] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[np++] = (struct piece){ key, keylen, NULL, 0 };
	p[np++] = (struct piece){ rs, (size_t)rl, NULL, 0 };
	if (r.slot >= 0) {
		ta = 3 + np;
		np += tenure_pieces(&p[np]);
	}
	if (textlen > 0)
		p[np++] = (struct piece){ text, textlen, NULL, 0 };
	return calls_grant(st, &r, SCRIPT_HANDOFF, nk, p, np, 3 + nk + 1, ta,
	    fn, arg);
}

int
store_wmark(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, int op, long ttl_ms,
    store_release_fn *fn, void *arg)
{
	char wk[256], num[24];
	struct route r;
	struct piece p[8];

	calls_route_of(st, key, keylen, &r);
	p[0] = (struct piece){ wk, writers_prefix(st, &r, wk, sizeof wk), key,
	    keylen };
	p[1] = op == STORE_WMARK_WAIT ? (struct piece){ "wait", 4, NULL, 0 } :
	    (struct piece){ "leave", 5, NULL, 0 };
	p[2] = (struct piece){ owner, ownerlen, NULL, 0 };
	p[3] = (struct piece){ st->keys.idsp, STORE_ID_LEN, NULL, 0 };
	p[4] = (struct piece){ num, op == STORE_WMARK_WAIT ?
	    (size_t)snprintf(num, sizeof num, "%ld", ttl_ms) : 1, NULL, 0 };
	if (op != STORE_WMARK_WAIT)
		num[0] = op == STORE_WMARK_GAVE_UP ? '1' : '0';
	p[5] = (struct piece){ st->keys.wanted, strlen(st->keys.wanted), r.tag,
	    r.taglen };
	p[6] = (struct piece){ key, keylen, NULL, 0 };
	p[7] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	return calls_script(st, &r, decode_release, SCRIPT_WMARK, 1, p, 8,
	    (union call_fn){ .release = fn }, arg);
}

static void
notice_done(void *arg, int ok, int released)
{
	(void)arg;
	(void)ok;
	(void)released;
}

/* notice.lua: head (this broker's id and what it says) then the key. */
static int
notice_send(struct store *st, const char *key, size_t keylen,
    const char *head, size_t headlen)
{
	struct route r;
	struct piece p[3];

	calls_route_of(st, key, keylen, &r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key,
	    keylen };
	p[1] = (struct piece){ st->keys.wanted, strlen(st->keys.wanted), r.tag,
	    r.taglen };
	p[2] = (struct piece){ head, headlen, key, keylen };
	return calls_script(st, &r, decode_release, SCRIPT_NOTICE, 1, p, 3,
	    (union call_fn){ .release = notice_done }, NULL);
}

int
store_queue_report(struct store *st, const char *key, size_t keylen,
    unsigned waiters, long oldest_ms)
{
	char head[STORE_ID_LEN + 48];
	int l = snprintf(head, sizeof head, "%.*s=%u %ld ", STORE_ID_LEN,
	    st->keys.idsp, waiters, oldest_ms > 0 ? oldest_ms : 0);

	return notice_send(st, key, keylen, head, (size_t)l);
}

int
store_queue_ask(struct store *st, const char *key, size_t keylen,
    const char *to)
{
	char head[2 * STORE_ID_LEN + 4];
	int l = snprintf(head, sizeof head, "%.*s?%.*s ", STORE_ID_LEN,
	    st->keys.idsp, to != NULL ? STORE_ID_LEN : 1, to != NULL ? to :
	    "0");

	return notice_send(st, key, keylen, head, (size_t)l);
}

/*
 * release.lua, or linger.lua with ms (a RELEASE ... LINGER, a lock
 * delay): the key's value key when the hold had a value, the hold's value,
 * [ms,] the release channel and the name.
 */
static int
release_call(struct store *st, enum script_id script, const char *key,
    size_t keylen, const char *owner, size_t ownerlen, long long token,
    const char *ms, size_t mslen, int had_value, store_release_fn *fn,
    void *arg)
{
	char tok[24], vk[256];
	struct route r;
	struct piece p[6];
	int nk = had_value ? 2 : 1, np = nk;

	value_keys(st, key, keylen, &r, p, vk);
	calls_value_piece(&p[np++], owner, ownerlen, token, tok, sizeof tok);
	if (ms != NULL)
		p[np++] = (struct piece){ ms, mslen, NULL, 0 };
	p[np++] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r.tag, r.taglen };
	p[np++] = (struct piece){ key, keylen, NULL, 0 };
	return calls_script(st, &r, decode_release, script, nk, p, np,
	    (union call_fn){ .release = fn }, arg);
}

int
store_release(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, int had_value,
    store_release_fn *fn, void *arg)
{
	return release_call(st, SCRIPT_RELEASE, key, keylen, owner, ownerlen,
	    token, NULL, 0, had_value, fn, arg);
}

int
store_pass(struct store *st, const char *key, size_t keylen,
    const char *prev_owner, size_t prev_ownerlen, long long prev_token,
    const char *owner, size_t ownerlen, long long token, long ttl_ms,
    const char *text, size_t textlen, int had_value, store_pass_fn *fn,
    void *arg)
{
	char prev[24], val[24], ttl[24];
	struct side_names sides;
	struct route r;
	struct piece p[9];
	int nk, np;

	if (!calls_may_grant(st))
		return -1;
	calls_route_of(st, key, keylen, &r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen };
	nk = 1 + watch_keys(st, key, keylen, &r, &p[1], &sides,
	    textlen > 0 || had_value);
	if (r.slot >= 0)
		p[1] = p[0];	/* the mark read unnamed (pass.lua) */
	calls_value_piece(&p[nk], prev_owner, prev_ownerlen, prev_token, prev,
	    sizeof prev);
	calls_value_piece(&p[nk + 1], owner, ownerlen, token, val, sizeof val);
	p[nk + 2] = (struct piece){ ttl, (size_t)snprintf(ttl, sizeof ttl,
	    "%ld", ttl_ms), NULL, 0 };
	np = nk + 3 + watch_args(st, key, keylen, &r, &p[nk + 3], text,
	    textlen);
	return calls_script(st, &r, decode_release, SCRIPT_PASS, nk, p, np,
	    (union call_fn){ .release = fn }, arg);
}

int
store_forget(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, store_release_fn *fn, void *arg)
{
	char vk[256];
	struct route r;
	struct piece p[5];

	value_keys(st, key, keylen, &r, p, vk);
	p[2] = (struct piece){ owner, ownerlen, NULL, 0 };
	p[3] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[4] = (struct piece){ key, keylen, NULL, 0 };
	return calls_script(st, &r, decode_release, SCRIPT_FORGET, 2, p, 5,
	    (union call_fn){ .release = fn }, arg);
}

/*
 * One renew (or reassert) call for items that all live in one slot (or,
 * single mode, on the one master).  Cluster mode's reassert also names
 * the slot's counter and tenure, for lib/slot_tenure.lua.
 */
static int
renew_call(struct store *st, const struct route *r,
    const struct store_renew_item *items, size_t n, int reassert,
    store_renew_fn *fn, void *arg)
{
	struct piece p[3 * STORE_RENEW_BATCH + 3 + TENURE_ARGS];
	/* "<ttl>" exclusive, "<ttl>:<kind>" shared or a permit */
	char ttls[STORE_RENEW_BATCH][48], toks[STORE_RENEW_BATCH][24];
	int cl = reassert && r->slot >= 0, ta = 0;
	size_t nk = !reassert ? n : cl ? n + 3 : n + 1, np = nk + 2 * n;
	struct call *c;

	if (n == 0 || n > STORE_RENEW_BATCH)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (items[i].kind < STORE_EXCLUSIVE)
			return -1;
	for (size_t i = 0; i < n; i++) {
		int tl = items[i].kind == STORE_EXCLUSIVE ?
		    snprintf(ttls[i], sizeof ttls[i], "%ld", items[i].ttl_ms) :
		    snprintf(ttls[i], sizeof ttls[i], "%ld:%ld",
		    items[i].ttl_ms, items[i].kind);
		p[i] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen,
		    items[i].key, items[i].keylen };
		calls_value_piece(&p[nk + i], items[i].owner, items[i].ownerlen,
		    items[i].token, toks[i], sizeof toks[i]);
		p[nk + n + i] = (struct piece){ ttls[i], (size_t)tl, NULL, 0 };
	}
	if (reassert)
		p[n] = (struct piece){ st->keys.delay, strlen(st->keys.delay), r->tag,
		    r->taglen };
	if (cl) {
		p[n + 1] = (struct piece){ st->keys.fence, strlen(st->keys.fence),
		    r->tag, r->taglen };
		p[n + 2] = (struct piece){ st->keys.tenure, strlen(st->keys.tenure),
		    r->tag, r->taglen };
		ta = 3 + (int)np;
		np += (size_t)tenure_pieces(&p[np]);
	}
	if ((c = calls_new(st, r, decode_renew, reassert ? SCRIPT_REASSERT :
	    SCRIPT_RENEW, (int)nk, p, (int)np)) == NULL)
		return -1;
	c->fn.renew = fn;
	c->arg = arg;
	c->nrenew = n;
	c->cmd.ndeps = (int)n;		/* about every lock it renews */
	c->cmd.tenure_arg = ta;
	return calls_start(c);
}

static void
gather_done(struct renew_gather *g)
{
	if (--g->left > 0)
		return;
	g->fn(g->arg, g->anyok, g->renewed, g->n);
	free(g);
}

static void
part_done(void *arg, int ok, const int *renewed, size_t n)
{
	struct renew_part *part = arg;
	struct renew_gather *g = part->g;

	for (size_t i = 0; ok && i < n && i < part->n; i++)
		g->renewed[part->idx[i]] = renewed[i];
	g->anyok |= ok;
	free(part);
	gather_done(g);
}

static int
renew_by_slot(struct store *st, const struct store_renew_item *items,
    size_t n, int reassert, store_renew_fn *fn, void *arg)
{
	unsigned short slotof[STORE_RENEW_BATCH];
	unsigned char done[STORE_RENEW_BATCH] = { 0 };
	struct store_renew_item sub[STORE_RENEW_BATCH];
	struct renew_gather *g = xcalloc(1, sizeof *g);

	g->fn = fn;
	g->arg = arg;
	g->n = n;
	g->left = 1;		/* this loop, until it is over */
	for (size_t i = 0; i < n; i++) {
		slotof[i] = (unsigned short)slot_of(st->keys.lockpfx, st->keys.lockpfxlen,
		    items[i].key, items[i].keylen);
		g->renewed[i] = -1;	/* unknown unless a part answers */
	}
	for (size_t i = 0; i < n; i++) {
		struct renew_part *part;
		struct route r;

		if (done[i])
			continue;
		calls_route_slot(st, slotof[i], &r);
		part = xmalloc(sizeof *part);
		part->g = g;
		part->n = 0;
		for (size_t j = i; j < n; j++)
			if (!done[j] && slotof[j] == slotof[i]) {
				done[j] = 1;
				sub[part->n] = items[j];
				part->idx[part->n++] = (unsigned short)j;
			}
		g->left++;
		if (renew_call(st, &r, sub, part->n, reassert, part_done,
		    part) != 0) {
			g->left--;	/* its master is down: unknown */
			free(part);
		}
	}
	if (g->left == 1 && !g->anyok) {
		free(g);	/* nothing went out: as if Redis were down */
		return -1;
	}
	gather_done(g);
	return 0;
}

int
store_renew(struct store *st, const struct store_renew_item *items, size_t n,
    int reassert, store_renew_fn *fn, void *arg)
{
	struct route r;

	if (n == 0 || n > STORE_RENEW_BATCH || !calls_may_grant(st))
		return -1;
	if (st->topo.sharded)
		return renew_by_slot(st, items, n, reassert, fn, arg);
	calls_route_slot(st, -1, &r);
	return renew_call(st, &r, items, n, reassert, fn, arg);
}

int
store_owner(struct store *st, const char *key, size_t keylen,
    store_owner_fn *fn, void *arg)
{
	struct piece p[1] = { { st->keys.lockpfx, st->keys.lockpfxlen, key, keylen } };
	struct route r;

	calls_route_of(st, key, keylen, &r);
	return calls_script(st, &r, decode_owner, SCRIPT_OWNER, 1, p, 1,
	    (union call_fn){ .owner = fn }, arg);
}

int
store_value(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, const char *text,
    size_t textlen, store_release_fn *fn, void *arg)
{
	char vk[256], wk[256], tok[24];
	struct route r;
	struct piece p[7];

	value_keys(st, key, keylen, &r, p, vk);
	p[2] = (struct piece){ wk, calls_side_prefix(st->keys.watched, &r, wk,
	    sizeof wk), key, keylen };
	calls_value_piece(&p[3], owner, ownerlen, token, tok, sizeof tok);
	p[4] = (struct piece){ text, textlen, NULL, 0 };
	p[5] = (struct piece){ st->keys.channel, strlen(st->keys.channel), r.tag,
	    r.taglen };
	p[6] = (struct piece){ key, keylen, NULL, 0 };
	return calls_script(st, &r, decode_release, SCRIPT_VALUE, 3, p, 7,
	    (union call_fn){ .release = fn }, arg);
}

/* owner.lua with the value key as KEYS[2]. */
int
store_owner_value(struct store *st, const char *key, size_t keylen,
    store_owner_fn *fn, void *arg)
{
	char vk[256];
	struct route r;
	struct piece p[2];

	value_keys(st, key, keylen, &r, p, vk);
	return calls_script(st, &r, decode_owner, SCRIPT_OWNER, 2, p, 2,
	    (union call_fn){ .owner = fn }, arg);
}

/* watch.lua: the holders as owner.lua ... VALUE reads them, and the
 * key's watch mark set for mark_ms (0: not touched). */
int
store_watch(struct store *st, const char *key, size_t keylen, long mark_ms,
    store_owner_fn *fn, void *arg)
{
	char vk[256], wk[256], ms[24];
	struct route r;
	struct piece p[5];
	int nk;

	value_keys(st, key, keylen, &r, p, vk);
	p[2] = (struct piece){ wk, calls_side_prefix(st->keys.watched, &r, wk,
	    sizeof wk), key, keylen };
	nk = 3 + listen_keys(st, key, keylen, &r, &p[3], NULL, 0);
	p[nk] = (struct piece){ ms, (size_t)snprintf(ms, sizeof ms, "%ld",
	    mark_ms > 0 ? mark_ms : 0), NULL, 0 };
	return calls_script(st, &r, decode_owner, SCRIPT_WATCH, nk, p, nk + 1,
	    (union call_fn){ .owner = fn }, arg);
}

int
store_check(struct store *st, const char *key, size_t keylen,
    long long token, store_check_fn *fn, void *arg)
{
	char num[24];
	int l = snprintf(num, sizeof num, "%lld", token);
	struct piece p[2] = {
		{ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen },
		{ num, (size_t)l, NULL, 0 },
	};
	struct route r;

	calls_route_of(st, key, keylen, &r);
	return calls_script(st, &r, decode_check, SCRIPT_CHECK, 1, p, 2,
	    (union call_fn){ .check = fn }, arg);
}

int
store_fenced(struct store *st, const char *key, size_t keylen,
    long long token, const char *datakey, size_t datakeylen,
    const char *value, size_t valuelen, long ttl_ms, store_release_fn *fn,
    void *arg)
{
	char tok[24], ttl[24];
	int kl = snprintf(tok, sizeof tok, "%lld", token);
	int tl = ttl_ms == STORE_KEEPTTL ? snprintf(ttl, sizeof ttl, "keepttl") :
	    snprintf(ttl, sizeof ttl, "%ld", ttl_ms > 0 ? ttl_ms : 0);
	struct piece p[5] = {
		{ st->keys.lockpfx, st->keys.lockpfxlen, key, keylen },
		{ datakey, datakeylen, NULL, 0 },
		{ tok, (size_t)kl, NULL, 0 },
		{ value, valuelen, NULL, 0 },
		{ ttl, (size_t)tl, NULL, 0 },
	};
	struct route r;

	if (!calls_may_grant(st))
		return -1;
	calls_route_of(st, key, keylen, &r);
	return calls_script(st, &r, decode_release, valuelen > 0 ?
	    SCRIPT_SETIF : SCRIPT_DELIF, 2, p, valuelen > 0 ? 5 : 3,
	    (union call_fn){ .release = fn }, arg);
}

int
store_same_slot(const struct store *st, const char *key, size_t keylen,
    const char *datakey, size_t datakeylen)
{
	int slot = calls_key_slot(st, key, keylen);

	return slot < 0 ||
	    (unsigned)slot == slot_of(datakey, datakeylen, NULL, 0);
}

int
store_linger(struct store *st, const char *key, size_t keylen,
    const char *owner, size_t ownerlen, long long token, long linger_ms,
    int had_value, store_release_fn *fn, void *arg)
{
	char ms[24];
	int ml = snprintf(ms, sizeof ms, "%ld", linger_ms);

	return release_call(st, SCRIPT_LINGER, key, keylen, owner, ownerlen,
	    token, ms, (size_t)ml, had_value, fn, arg);
}

int
store_session(struct store *st, const char *cid, size_t cidlen,
    const struct store_str *args, size_t nargs, store_session_fn *fn,
    void *arg)
{
	struct piece *p;
	struct route r;
	int rc;

	if (nargs + 1 > SESSION_ARGS_MAX)
		return -1;
	calls_route_slot(st, !st->topo.sharded ? -1 :
	    (int)slot_of(st->keys.sesspfx, st->keys.sesspfxlen, cid, cidlen),
	    &r);
	p = xcalloc(nargs + 1, sizeof *p);
	p[0] = (struct piece){ st->keys.sesspfx, st->keys.sesspfxlen, cid, cidlen };
	for (size_t i = 0; i < nargs; i++)
		p[i + 1] = (struct piece){ args[i].p, args[i].len, NULL, 0 };
	rc = calls_script(st, &r, decode_session, SCRIPT_SESSION, 1, p,
	    (int)nargs + 1, (union call_fn){ .session_rec = fn }, arg);
	free(p);
	return rc;
}

int
store_takeover(struct store *st, const char *key, size_t keylen,
    const char *cid, size_t cidlen, unsigned long gen, long ttl_ms,
    store_takeover_fn *fn, void *arg)
{
	char g[24], ttl[24], vk[256], lk[256];
	int gl = snprintf(g, sizeof g, "%lu", gen);
	int tl = snprintf(ttl, sizeof ttl, "%ld", ttl_ms);
	struct route r;
	struct piece p[7];
	int nk;

	if (!calls_may_grant(st))
		return -1;
	value_keys(st, key, keylen, &r, p, vk);
	nk = 2 + listen_keys(st, key, keylen, &r, &p[2], lk, sizeof lk);
	p[nk] = (struct piece){ cid, cidlen, NULL, 0 };
	p[nk + 1] = (struct piece){ g, (size_t)gl, NULL, 0 };
	p[nk + 2] = (struct piece){ ttl, (size_t)tl, NULL, 0 };
	return calls_script(st, &r, decode_takeover, SCRIPT_TAKEOVER, nk, p,
	    nk + 3, (union call_fn){ .takeover = fn }, arg);
}

/* --- ACQUIRE ALL ------------------------------------------------------- */

/*
 * One ACQUIRE ALL across the slots its keys live in (one call in single
 * and Sentinel mode): a call per slot, one after the other in slot order,
 * and none while the one before has not granted.  So no two brokers ever
 * hold parts of each other's sets while waiting for the rest: a busy slot
 * gives back what the earlier ones granted, and the request waits (in the
 * lock table) holding nothing.
 */
struct allreq {
	struct store *st;
	store_all_fn *fn;
	void *arg;
	size_t n;
	long ttl_ms;
	int will_wait;
	size_t next;			/* order[next..n): not asked yet */
	size_t cur, curn;		/* the call in flight: order[cur..+curn) */
	int slot[STORE_ALL_MAX];	/* each key's slot (-1 single mode) */
	size_t order[STORE_ALL_MAX];	/* key indexes by slot */
	long long tokens[STORE_ALL_MAX];
	char *keys[STORE_ALL_MAX];
	size_t keylens[STORE_ALL_MAX];
	size_t ownerlen;
	char owner[];
};

static void
allreq_free(struct allreq *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->keys[i]);
	free(a);
}

static void
gave_back(void *arg, int ok, int released)
{
	(void)arg;
	(void)released;
	if (!ok)
		log_warn("ACQUIRE ALL: a key taken in an earlier slot could "
		    "not be given back; it is freed at its TTL");
}

/* Give back what the slots before the one in flight granted. */
static void
allreq_give_back(struct allreq *a)
{
	for (size_t i = 0; i < a->cur; i++) {
		size_t k = a->order[i];

		(void)store_release(a->st, a->keys[k], a->keylens[k], a->owner,
		    a->ownerlen, a->tokens[k], 0, gave_back, NULL);
	}
}

static int allreq_send(struct allreq *a);

static void
allreq_done(void *arg, int ok, const struct store_all_result *r)
{
	struct allreq *a = arg;
	size_t busy[STORE_ALL_MAX];
	struct store_all_result out = *r;

	if (ok && r->granted == 1 && r->n == a->curn) {
		for (size_t i = 0; i < a->curn; i++)
			a->tokens[a->order[a->cur + i]] = r->tokens[i];
		if (a->next < a->n && allreq_send(a) == 0)
			return;
		if (a->next < a->n) {
			/* the next slot's master is not up */
			a->cur = a->next;
			allreq_give_back(a);
			a->fn(a->arg, 0, &out);
		} else {
			out.tokens = a->tokens;
			out.n = a->n;
			a->fn(a->arg, 1, &out);
		}
		allreq_free(a);
		return;
	}
	if (ok && r->granted == 1)
		ok = 0;		/* not the shape asked for */
	allreq_give_back(a);
	/* indexes of this call's keys, as the caller numbers them */
	for (size_t i = 0; ok && i < r->nbusy; i++)
		busy[i] = a->order[a->cur + r->busy[i]];
	out.busy = busy;
	if (ok && r->granted == 3)
		out.index = a->order[a->cur + r->index];
	a->fn(a->arg, ok, &out);
	allreq_free(a);
}

/* Send the call of the next slot's keys. */
static int
allreq_send(struct allreq *a)
{
	struct store *st = a->st;
	size_t g = a->next, gn = 0, np = 0, nk;
	int slot = a->slot[a->order[g]], ta = 0, rc;
	char ttl[24], num[24];
	char (*wk)[256];
	struct piece *p;
	struct route r;
	struct call *c;

	while (g + gn < a->n && a->slot[a->order[g + gn]] == slot)
		gn++;
	calls_route_slot(st, slot, &r);
	p = xcalloc(3 * gn + 16 + TENURE_ARGS, sizeof *p);
	wk = xcalloc(gn, sizeof *wk);
	for (size_t i = 0; i < gn; i++) {
		size_t k = a->order[g + i];

		p[np++] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen,
		    a->keys[k], a->keylens[k] };
	}
	p[np++] = (struct piece){ st->keys.fence, strlen(st->keys.fence), r.tag,
	    r.taglen };
	p[np++] = (struct piece){ st->keys.delay, strlen(st->keys.delay), r.tag,
	    r.taglen };
	if (r.slot >= 0)
		p[np++] = (struct piece){ st->keys.tenure,
		    strlen(st->keys.tenure), r.tag, r.taglen };
	for (size_t i = 0; i < gn; i++) {
		size_t k = a->order[g + i];

		p[np++] = (struct piece){ wk[i], calls_side_prefix(
		    st->keys.watched, &r, wk[i], sizeof wk[i]), a->keys[k],
		    a->keylens[k] };
	}
	nk = np;
	p[np++] = (struct piece){ a->owner, a->ownerlen, NULL, 0 };
	p[np++] = (struct piece){ ttl, (size_t)snprintf(ttl, sizeof ttl, "%ld",
	    a->ttl_ms), NULL, 0 };
	p[np++] = (struct piece){ num, (size_t)snprintf(num, sizeof num, "%zu",
	    gn), NULL, 0 };
	p[np++] = (struct piece){ st->keys.wanted, strlen(st->keys.wanted),
	    r.tag, r.taglen };
	p[np++] = (struct piece){ st->keys.idsp, STORE_ID_LEN + 1, NULL, 0 };
	p[np++] = (struct piece){ a->will_wait ? "1" : "0", 1, NULL, 0 };
	p[np++] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r.tag, r.taglen };
	for (size_t i = 0; i < gn; i++) {
		size_t k = a->order[g + i];

		p[np++] = (struct piece){ a->keys[k], a->keylens[k], NULL, 0 };
	}
	if (r.slot >= 0) {
		ta = 3 + (int)np;
		np += (size_t)tenure_pieces(&p[np]);
	}
	c = calls_new(st, &r, decode_all, SCRIPT_ACQUIRE_ALL, (int)nk, p,
	    (int)np);
	free(p);
	free(wk);
	if (c == NULL)
		return -1;
	c->fn.all = allreq_done;
	c->arg = a;
	c->cmd.tenure_arg = ta;
	if ((rc = calls_start(c)) == 0) {
		a->cur = g;
		a->curn = gn;
		a->next = g + gn;
	}
	return rc;
}

int
store_acquire_all(struct store *st, const char *const *keys,
    const size_t *keylens, size_t n, const char *owner, size_t ownerlen,
    long ttl_ms, int will_wait, store_all_fn *fn, void *arg)
{
	struct allreq *a;

	if (n < 2 || n > STORE_ALL_MAX || !calls_may_grant(st))
		return -1;
	a = xcalloc(1, sizeof *a + ownerlen + 1);
	a->st = st;
	a->fn = fn;
	a->arg = arg;
	a->n = n;
	a->ttl_ms = ttl_ms;
	a->will_wait = will_wait;
	memcpy(a->owner, owner, ownerlen);
	a->ownerlen = ownerlen;
	for (size_t i = 0; i < n; i++) {
		a->keys[i] = xmalloc(keylens[i] + 1);
		memcpy(a->keys[i], keys[i], keylens[i]);
		a->keylens[i] = keylens[i];
		a->slot[i] = calls_key_slot(st, keys[i], keylens[i]);
		a->order[i] = i;
	}
	/* by slot (a stable insertion sort: n <= 64) */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && a->slot[a->order[j - 1]] >
		    a->slot[a->order[j]]; j--) {
			size_t t = a->order[j];

			a->order[j] = a->order[j - 1];
			a->order[j - 1] = t;
		}
	if (allreq_send(a) != 0) {
		allreq_free(a);
		return -1;
	}
	return 0;
}

/* --- the admin view: LOCKS, FREE, KILL, and HELLO names ----------------- */

/* The slot of a key "<base><name>" (cluster mode; -1 otherwise). */
static int
side_slot(const struct store *st, const char *base, size_t baselen,
    const char *name, size_t namelen)
{
	return !st->topo.sharded ? -1 :
	    (int)slot_of(base, baselen, name, namelen);
}

int
store_free_key(struct store *st, const char *key, size_t keylen,
    store_freed_fn *fn, void *arg)
{
	char vk[256];
	struct route r;
	struct piece p[4];

	value_keys(st, key, keylen, &r, p, vk);
	p[2] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r.tag, r.taglen };
	p[3] = (struct piece){ key, keylen, NULL, 0 };
	return calls_script(st, &r, decode_free, SCRIPT_FREE, 2, p, 4,
	    (union call_fn){ .free = fn }, arg);
}

/* kill.lua "say" on the record of cid: msg1 msg2 on its slot's release
 * channel. */
static int
kill_say(struct store *st, const char *cid, size_t cidlen, const char *msg,
    size_t msglen, store_release_fn *fn, void *arg)
{
	struct route r;
	struct piece p[4];

	calls_route_slot(st, side_slot(st, st->keys.sesspfx,
	    st->keys.sesspfxlen, cid, cidlen), &r);
	p[0] = (struct piece){ st->keys.sesspfx, st->keys.sesspfxlen, cid,
	    cidlen };
	p[1] = (struct piece){ "say", 3, NULL, 0 };
	p[2] = (struct piece){ st->keys.channel, strlen(st->keys.channel),
	    r.tag, r.taglen };
	p[3] = (struct piece){ msg, msglen, NULL, 0 };
	return calls_script(st, &r, decode_release, SCRIPT_KILL, 1, p, 4,
	    (union call_fn){ .release = fn }, arg);
}

/* "kill <client-id> <broker-id>/<seq>" (keys.c reads it back). */
int
store_kill_ask(struct store *st, const char *cid, size_t cidlen,
    unsigned long long seq, store_release_fn *fn, void *arg)
{
	char msg[128];
	int n = snprintf(msg, sizeof msg, "kill %.*s %.*s/%llu",
	    (int)(cidlen > 64 ? 64 : cidlen), cid, STORE_ID_LEN, st->keys.idsp,
	    seq);

	if (n < 0 || (size_t)n >= sizeof msg)
		return -1;
	return kill_say(st, cid, cidlen, msg, (size_t)n, fn, arg);
}

/* "killed <request> 1": request as the kill message gave it. */
int
store_kill_told(struct store *st, const char *cid, size_t cidlen,
    const char *request, size_t requestlen, store_release_fn *fn, void *arg)
{
	char msg[128];
	int n = snprintf(msg, sizeof msg, "killed %.*s 1",
	    (int)(requestlen > 100 ? 100 : requestlen), request);

	if (n < 0 || (size_t)n >= sizeof msg)
		return -1;
	return kill_say(st, cid, cidlen, msg, (size_t)n, fn, arg);
}

int
store_kill_end(struct store *st, const char *cid, size_t cidlen,
    long tombstone_ms, store_kill_fn *fn, void *arg)
{
	char ms[24];
	struct route r;
	struct piece p[3];

	calls_route_slot(st, side_slot(st, st->keys.sesspfx,
	    st->keys.sesspfxlen, cid, cidlen), &r);
	p[0] = (struct piece){ st->keys.sesspfx, st->keys.sesspfxlen, cid,
	    cidlen };
	p[1] = (struct piece){ "end", 3, NULL, 0 };
	p[2] = (struct piece){ ms, (size_t)snprintf(ms, sizeof ms, "%ld",
	    tombstone_ms), NULL, 0 };
	return calls_script(st, &r, decode_kill, SCRIPT_KILL, 1, p, 3,
	    (union call_fn){ .kill = fn }, arg);
}

int
store_name(struct store *st, const char *cid, size_t cidlen,
    const char *name, size_t namelen, long px, store_release_fn *fn,
    void *arg)
{
	char ms[24];
	struct route r;
	struct piece p[3];

	calls_route_slot(st, side_slot(st, st->keys.names, st->keys.nameslen,
	    cid, cidlen), &r);
	p[0] = (struct piece){ st->keys.names, st->keys.nameslen, cid, cidlen };
	p[1] = (struct piece){ name, namelen, NULL, 0 };
	p[2] = (struct piece){ ms, (size_t)snprintf(ms, sizeof ms, "%ld", px),
	    NULL, 0 };
	return calls_script(st, &r, decode_release, SCRIPT_NAME, 1, p, 3,
	    (union call_fn){ .release = fn }, arg);
}

/*
 * One page of locks.lua on the master serving slot (-1: the one master):
 * holders of the keys matching pattern (MATCH's syntax, the lock prefix
 * in it), from SCAN cursor scan, after key hash and token (hash "": from
 * the batch's first key), at most limit holders and calls SCAN calls of
 * COUNT count.
 */
int
calls_locks(struct store *st, int slot, const char *pattern, size_t patlen,
    const char *scan, const char *hash, long long token, size_t limit,
    size_t calls, size_t count, calls_locks_fn *fn, void *arg)
{
	char cut[24], tok[24], lim[24], nc[24], cnt[24];
	struct route r;
	struct piece p[8];

	calls_route_slot(st, slot, &r);
	p[0] = (struct piece){ pattern, patlen, NULL, 0 };
	p[1] = (struct piece){ cut, (size_t)snprintf(cut, sizeof cut, "%zu",
	    st->keys.lockpfxlen), NULL, 0 };
	p[2] = (struct piece){ scan, strlen(scan), NULL, 0 };
	p[3] = (struct piece){ hash, strlen(hash), NULL, 0 };
	p[4] = (struct piece){ tok, (size_t)snprintf(tok, sizeof tok, "%lld",
	    token), NULL, 0 };
	p[5] = (struct piece){ lim, (size_t)snprintf(lim, sizeof lim, "%zu",
	    limit), NULL, 0 };
	p[6] = (struct piece){ nc, (size_t)snprintf(nc, sizeof nc, "%zu",
	    calls), NULL, 0 };
	p[7] = (struct piece){ cnt, (size_t)snprintf(cnt, sizeof cnt, "%zu",
	    count), NULL, 0 };
	return calls_script(st, &r, decode_locks, SCRIPT_LOCKS, 0, p, 8,
	    (union call_fn){ .locks_page = fn }, arg);
}

/* peek.lua: the strings at keys[0..n), all of one slot (-1: single). */
int
calls_peek(struct store *st, int slot, const struct store_str *keys,
    size_t n, calls_peek_fn *fn, void *arg)
{
	struct piece *p = xcalloc(n + 1, sizeof *p);
	struct route r;
	struct call *c;

	calls_route_slot(st, slot, &r);
	for (size_t i = 0; i < n; i++)
		p[i] = (struct piece){ keys[i].p, keys[i].len, NULL, 0 };
	c = calls_new(st, &r, decode_peek, SCRIPT_PEEK, (int)n, p, (int)n);
	free(p);
	if (c == NULL)
		return -1;
	c->fn.peek = fn;
	c->arg = arg;
	c->cmd.ndeps = 0;	/* side keys: no order to keep with anything */
	return calls_start(c);
}
