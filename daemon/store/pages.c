/*
 * pages.c - LOCKS (the admin view) page by page: the cursor a client
 * carries from one page to the next, the walk over every master in
 * cluster mode, and the second read a page needs (the values and the
 * HELLO names of its holders).  The calls themselves are requests.c's
 * (locks.lua, peek.lua), their replies decode.c's.
 *
 * A cursor is text the client gives back as it got it: "0" (the first
 * page, and after the last), "<scan>.<slot>" (SCAN cursor <scan> on the
 * master that serves <slot>: that master's lowest slot in cluster mode,
 * 0 otherwise) or "<scan>.<slot>.<hash>.<token>" (that SCAN batch again,
 * after the key whose hash is <hash> and its holder with <token>: a page
 * that ended inside a batch).  Nothing about a walk is kept here between
 * pages, so a client that stops paging costs nothing, and a thousand
 * walks at once cost no memory beyond the pages in flight.
 *
 * What SCAN promises, a walk keeps: a holder held from the first page to
 * the last is listed at least once; a key that comes or goes meanwhile
 * may be listed or not, and a key may be listed twice (a rehash).  In
 * cluster mode a slot that moves between masters during a walk may be
 * missed or listed twice, as may a whole master that fails over.
 */
#include "calls_int.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCAN_CALLS 50		/* SCAN calls a page makes at most: a glob
				 * that matches little still moves the walk
				 * on, by SCAN_CALLS * SCAN_COUNT keys */
#define SCAN_COUNT 100		/* SCAN's COUNT, every page alike: a page
				 * that goes on inside a batch must get the
				 * same batch from the same cursor */
#define SCAN_DIGITS 20		/* a SCAN cursor: 64 bits */
#define HASH_LEN 16		/* locks.lua's key hash: 64 bits in hex */
#define PATTERN_MAX 2200	/* the escaped prefix and a glob */
#define MASTERS_SEEN 1024	/* masters the walk tells apart at once */

/* A cursor, read. */
struct cursor {
	char scan[SCAN_DIGITS + 1];
	int slot;			/* the master's slot (-1 single mode) */
	char hash[HASH_LEN + 1];	/* "": from the batch's first key */
	long long token;
};

/* One string of the second read: a value key, or a holder's name key. */
struct pread {
	char *key;
	size_t keylen;
	int slot;			/* where it lives (-1 single mode) */
	int is_name;			/* a name key: every holder with the
					 * owner of entry, else entry's value */
	size_t entry;
	char *got;			/* what Redis had (NULL: nothing) */
	size_t gotlen;
};

/* A page being read: its holders, then their values and names. */
struct page {
	struct store *st;
	store_locks_fn *fn;
	void *arg;
	int slot;			/* as in its cursors */
	char next[STORE_CURSOR_MAX + 1];
	struct store_lock_entry e[STORE_LOCKS_MAX];
	char cursors[STORE_LOCKS_MAX][STORE_CURSOR_MAX + 1];
	size_t n;
	char *text;			/* the names and owners of e[] */
	struct pread *reads;
	size_t nreads;
	unsigned left;			/* peek calls unanswered */
	int failed;
};

/* One peek call: which reads it carries. */
struct ppart {
	struct page *pg;
	size_t n;
	size_t idx[];
};

/* Digits only, 1..max of them. */
static int
all_digits(const char *p, size_t len, size_t max)
{
	if (len == 0 || len > max)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (p[i] < '0' || p[i] > '9')
			return 0;
	return 1;
}

/* The master serving slot: up, or being connected to (a read waits for
 * it), as calls_new will take it. */
static struct node *
master_of(const struct store *st, int slot)
{
	return st->topo.ops->node_of(st->topo.t, slot);
}

/*
 * Cluster mode: the lowest slot of the next master after the one whose
 * lowest slot is `after` (-1: the first master), masters in the order of
 * the lowest slot each serves; -1 when none is left.  A slot no master
 * serves now is skipped.
 */
static int
next_master(const struct store *st, int after)
{
	const struct node *seen[MASTERS_SEEN], *prev = NULL;
	size_t nseen = 0;

	for (int s = 0; s < SLOT_COUNT; s++) {
		const struct node *n = master_of(st, s);
		size_t i;

		if (n == NULL || n == prev)
			continue;
		prev = n;
		for (i = 0; i < nseen && seen[i] != n; i++)
			;
		if (i < nseen)
			continue;	/* first seen at a lower slot */
		if (s > after)
			return s;
		if (nseen < MASTERS_SEEN)
			seen[nseen++] = n;
	}
	return -1;
}

/* Read cursor text (length len) into c; -1 when no page gave it. */
static int
cursor_read(const struct store *st, const char *s, size_t len,
    struct cursor *c)
{
	const char *f[4], *end = s + len;
	size_t fl[4], nf = 0;
	unsigned long long v;
	char num[SCAN_DIGITS + 1], *e;

	memset(c, 0, sizeof *c);
	c->slot = -1;
	if (len == 0 || (len == 1 && s[0] == '0')) {
		/* the first page: the first master (cluster mode; -1 when
		 * none is known, which the caller tells from a bad cursor) */
		memcpy(c->scan, "0", 2);
		if (st->topo.sharded)
			c->slot = next_master(st, -1);
		return 0;
	}
	for (const char *p = s; nf < 4; nf++) {
		const char *dot = memchr(p, '.', (size_t)(end - p));

		f[nf] = p;
		fl[nf] = (size_t)((dot != NULL ? dot : end) - p);
		if (dot == NULL) {
			nf++;
			break;
		}
		p = dot + 1;
	}
	if ((nf != 2 && nf != 4) || f[nf - 1] + fl[nf - 1] != end ||
	    !all_digits(f[0], fl[0], SCAN_DIGITS) ||
	    !all_digits(f[1], fl[1], 5))
		return -1;
	memcpy(num, f[0], fl[0]);
	num[fl[0]] = '\0';
	errno = 0;
	v = strtoull(num, &e, 10);
	if (errno != 0)
		return -1;		/* past 2^64-1: no SCAN cursor */
	snprintf(c->scan, sizeof c->scan, "%llu", v);
	memcpy(num, f[1], fl[1]);
	num[fl[1]] = '\0';
	c->slot = (int)strtol(num, NULL, 10);
	if (c->slot >= SLOT_COUNT || (!st->topo.sharded && c->slot != 0))
		return -1;
	if (!st->topo.sharded)
		c->slot = -1;
	if (nf == 2)
		return 0;
	if (fl[2] != HASH_LEN || !all_digits(f[3], fl[3], 19))
		return -1;
	for (size_t i = 0; i < HASH_LEN; i++)
		if (!((f[2][i] >= '0' && f[2][i] <= '9') ||
		    (f[2][i] >= 'a' && f[2][i] <= 'f')))
			return -1;
	memcpy(c->hash, f[2], HASH_LEN);
	memcpy(num, f[3], fl[3]);
	num[fl[3]] = '\0';
	errno = 0;
	c->token = strtoll(num, NULL, 10);
	return errno == 0 ? 0 : -1;
}

/* The cursor text of a master's slot and a place in it. */
static void
cursor_text(char *out, int slot, const struct store_str *scan,
    const struct store_str *hash, long long token)
{
	int s = slot < 0 ? 0 : slot;

	if (hash == NULL || hash->len == 0)
		snprintf(out, STORE_CURSOR_MAX + 1, "%.*s.%d",
		    (int)scan->len, scan->p, s);
	else
		snprintf(out, STORE_CURSOR_MAX + 1, "%.*s.%d.%.*s.%lld",
		    (int)scan->len, scan->p, s, (int)hash->len, hash->p,
		    token);
}

/* MATCH's pattern: the lock prefix with Redis's glob characters escaped,
 * then the glob (an access list's syntax is Redis's, classes aside). */
static size_t
pattern_of(const struct store *st, const char *glob, size_t globlen,
    char *out)
{
	size_t n = 0;

	for (size_t i = 0; i < st->keys.lockpfxlen; i++) {
		char c = st->keys.lockpfx[i];

		if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
			out[n++] = '\\';
		out[n++] = c;
	}
	if (globlen == 0) {
		out[n++] = '*';
		return n;
	}
	memcpy(out + n, glob, globlen);
	return n + globlen;
}

static void
page_free(struct page *pg)
{
	for (size_t i = 0; i < pg->nreads; i++) {
		free(pg->reads[i].key);
		free(pg->reads[i].got);
	}
	free(pg->reads);
	free(pg->text);
	free(pg);
}

/* Tell the caller and free the page. */
static void
page_done(struct page *pg, int ok)
{
	if (ok)
		pg->fn(pg->arg, 1, pg->e, pg->n, pg->next);
	else
		pg->fn(pg->arg, 0, NULL, 0, NULL);
	page_free(pg);
}

/*
 * Every read is in: a value key "<token> <text>" belongs to the entry
 * only with its token (value.lua), a name to every entry whose owner it
 * is; each is shown only as the broker would accept it.
 */
static void
reads_apply(struct page *pg)
{
	for (size_t i = 0; i < pg->nreads; i++) {
		const struct pread *rd = &pg->reads[i];
		struct store_lock_entry *e = &pg->e[rd->entry];
		const char *sp;
		char tok[24];
		int tl;

		if (rd->got == NULL)
			continue;
		if (rd->is_name) {
			if (rd->gotlen > 64 || !decode_printable(rd->got, rd->gotlen))
				continue;
			for (size_t j = rd->entry; j < pg->n; j++)
				if (pg->e[j].ownerlen == e->ownerlen &&
				    memcmp(pg->e[j].owner, e->owner,
				    e->ownerlen) == 0) {
					pg->e[j].name = rd->got;
					pg->e[j].namelen = rd->gotlen;
				}
			continue;
		}
		tl = snprintf(tok, sizeof tok, "%lld", e->token);
		sp = memchr(rd->got, ' ', rd->gotlen);
		if (sp == NULL || sp - rd->got != tl ||
		    memcmp(rd->got, tok, (size_t)tl) != 0)
			continue;	/* a hold's before this one */
		sp++;
		if ((size_t)(rd->got + rd->gotlen - sp) > STORE_VALUE_MAX ||
		    !decode_printable(sp, (size_t)(rd->got + rd->gotlen - sp)))
			continue;
		e->value = sp;
		e->valuelen = (size_t)(rd->got + rd->gotlen - sp);
	}
}

static void
peek_done(void *arg, int ok, const struct store_str *v, size_t n)
{
	struct ppart *part = arg;
	struct page *pg = part->pg;

	for (size_t i = 0; ok && i < part->n && i < n; i++) {
		struct pread *rd = &pg->reads[part->idx[i]];

		if (v[i].p != NULL) {
			rd->got = xmalloc(v[i].len + 1);
			memcpy(rd->got, v[i].p, v[i].len);
			rd->got[v[i].len] = '\0';
			rd->gotlen = v[i].len;
		}
	}
	if (!ok)
		pg->failed = 1;
	free(part);
	if (--pg->left > 0)
		return;
	if (!pg->failed)
		reads_apply(pg);
	page_done(pg, !pg->failed);
}

/* Add a read of "<base><name>" for entry i. */
static void
read_add(struct page *pg, const char *base, size_t baselen,
    const char *name, size_t namelen, int slot, int is_name, size_t i)
{
	struct pread *rd = &pg->reads[pg->nreads++];

	rd->keylen = baselen + namelen;
	rd->key = xmalloc(rd->keylen + 1);
	memcpy(rd->key, base, baselen);
	memcpy(rd->key + baselen, name, namelen);
	rd->key[rd->keylen] = '\0';
	rd->slot = slot;
	rd->is_name = is_name;
	rd->entry = i;
}

/* The reads beside the page: exclusive holds' values, holders' names
 * (one read per client-id). */
static void
reads_plan(struct page *pg)
{
	struct store *st = pg->st;

	pg->reads = xcalloc(2 * pg->n + 1, sizeof *pg->reads);
	for (size_t i = 0; i < pg->n; i++) {
		const struct store_lock_entry *e = &pg->e[i];
		size_t j;

		if (e->kind == STORE_EXCLUSIVE && e->token > 0) {
			char vk[256];
			struct route r;
			size_t vl;

			calls_route_of(st, e->key, e->keylen, &r);
			vl = calls_side_prefix(st->keys.values, &r, vk,
			    sizeof vk);
			read_add(pg, vk, vl, e->key, e->keylen, r.slot, 0, i);
		}
		if (e->ownerlen != STORE_ID_LEN)
			continue;	/* "?": no session of a broker */
		for (j = 0; j < i; j++)
			if (pg->e[j].ownerlen == e->ownerlen &&
			    memcmp(pg->e[j].owner, e->owner, e->ownerlen) == 0)
				break;
		if (j < i)
			continue;	/* read already */
		read_add(pg, st->keys.names, st->keys.nameslen, e->owner,
		    e->ownerlen, !st->topo.sharded ? -1 :
		    (int)slot_of(st->keys.names, st->keys.nameslen, e->owner,
		    e->ownerlen), 1, i);
	}
}

/* Send the reads, one peek call per slot they live in. */
static void
reads_send(struct page *pg)
{
	unsigned char *sent = xcalloc(pg->nreads + 1, 1);
	struct store_str *keys = xcalloc(pg->nreads + 1, sizeof *keys);

	pg->left = 1;		/* this loop, until it is over */
	for (size_t i = 0; i < pg->nreads; i++) {
		struct ppart *part;
		size_t n = 0;

		if (sent[i])
			continue;
		part = xmalloc(sizeof *part + pg->nreads * sizeof part->idx[0]);
		part->pg = pg;
		for (size_t j = i; j < pg->nreads; j++)
			if (!sent[j] && pg->reads[j].slot == pg->reads[i].slot) {
				sent[j] = 1;
				part->idx[n] = j;
				keys[n++] = (struct store_str){ pg->reads[j].key,
				    pg->reads[j].keylen };
			}
		part->n = n;
		pg->left++;
		if (calls_peek(pg->st, pg->reads[i].slot, keys, n, peek_done,
		    part) != 0) {
			pg->left--;
			pg->failed = 1;
			free(part);
		}
	}
	free(keys);
	free(sent);
	if (--pg->left == 0) {
		if (!pg->failed)
			reads_apply(pg);
		page_done(pg, !pg->failed);
	}
}

/* locks.lua answered: keep the holders, work out the cursors, read
 * their values and names. */
static void
page_read(void *arg, int ok, const struct locks_raw *raw)
{
	struct page *pg = arg;
	struct store *st = pg->st;
	size_t textlen = 0, off = 0;

	if (!ok) {
		page_done(pg, 0);
		return;
	}
	if (raw->hash.len > 0 || !(raw->scan.len == 1 && raw->scan.p[0] == '0'))
		cursor_text(pg->next, pg->slot, &raw->scan, &raw->hash,
		    raw->token);
	else if (st->topo.sharded && (pg->slot = next_master(st,
	    pg->slot)) >= 0)
		snprintf(pg->next, sizeof pg->next, "0.%d", pg->slot);
	else
		memcpy(pg->next, "0", 2);
	for (size_t i = 0; i < raw->n; i++)
		textlen += raw->e[i].name.len + raw->e[i].owner.len;
	pg->text = xmalloc(textlen + 1);
	for (size_t i = 0; i < raw->n; i++) {
		const struct locks_raw_entry *r = &raw->e[i];
		struct store_lock_entry *e = &pg->e[i];

		memcpy(pg->text + off, r->name.p, r->name.len);
		e->key = pg->text + off;
		e->keylen = r->name.len;
		off += r->name.len;
		memcpy(pg->text + off, r->owner.p, r->owner.len);
		e->owner = pg->text + off;
		e->ownerlen = r->owner.len;
		off += r->owner.len;
		e->kind = r->kind;
		e->token = r->token;
		e->pttl = r->pttl;
		e->age_ms = r->token > 0 && r->token <= raw->now_us ?
		    (raw->now_us - r->token) / 1000 : 0;
		cursor_text(pg->cursors[i], pg->slot, &r->scan, &r->hash,
		    r->token);
		e->cursor = pg->cursors[i];
	}
	pg->n = raw->n;
	reads_plan(pg);
	reads_send(pg);
}

int
store_locks(struct store *st, const char *glob, size_t globlen,
    const char *cursor, size_t cursorlen, size_t limit, store_locks_fn *fn,
    void *arg)
{
	char pattern[PATTERN_MAX];
	struct cursor c;
	struct page *pg;
	size_t patlen;

	if (globlen > PATTERN_MAX - 2 * st->keys.lockpfxlen - 2 ||
	    cursor_read(st, cursor, cursorlen, &c) != 0)
		return STORE_BADCURSOR;
	if (limit == 0 || limit > STORE_LOCKS_MAX)
		limit = STORE_LOCKS_MAX;
	if (st->topo.sharded && (c.slot < 0 || master_of(st, c.slot) == NULL))
		return -1;	/* no master serves it now */
	patlen = pattern_of(st, glob, globlen, pattern);
	pg = xcalloc(1, sizeof *pg);
	pg->st = st;
	pg->fn = fn;
	pg->arg = arg;
	pg->slot = c.slot;
	if (calls_locks(st, c.slot, pattern, patlen, c.scan, c.hash, c.token,
	    limit, SCAN_CALLS, SCAN_COUNT, page_read, pg) != 0) {
		free(pg);
		return -1;
	}
	return 0;
}
