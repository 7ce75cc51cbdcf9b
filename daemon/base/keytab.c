/*
 * keytab.c - chained hash table, FNV-1a, doubling at load factor 1.
 *
 * Shrinking is not done: a broker that once held a million keys keeps a
 * bucket array of 8 MB, which is cheaper than the latency of rehashing
 * back and forth.
 */
#include "keytab.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

struct keytab {
	struct keytab_entry **buckets;
	size_t nbuckets;		/* a power of two */
	size_t count;
};

#define KEYTAB_MIN 64

static uint32_t
hash_bytes(const char *p, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)p[i];
		h *= 16777619u;
	}
	return h;
}

struct keytab *
keytab_new(void)
{
	struct keytab *t = xcalloc(1, sizeof *t);

	t->nbuckets = KEYTAB_MIN;
	t->buckets = xcalloc(t->nbuckets, sizeof *t->buckets);
	return t;
}

void
keytab_free(struct keytab *t)
{
	if (t == NULL)
		return;
	free(t->buckets);
	free(t);
}

struct keytab_entry *
keytab_find(const struct keytab *t, const char *key, size_t keylen)
{
	uint32_t h = hash_bytes(key, keylen);
	struct keytab_entry *e = t->buckets[h & (t->nbuckets - 1)];

	for (; e != NULL; e = e->next)
		if (e->hash == h && e->keylen == keylen &&
		    memcmp(e->key, key, keylen) == 0)
			return e;
	return NULL;
}

static void
grow(struct keytab *t)
{
	size_t n = t->nbuckets * 2;
	struct keytab_entry **b = xcalloc(n, sizeof *b);

	for (size_t i = 0; i < t->nbuckets; i++) {
		struct keytab_entry *e = t->buckets[i], *next;
		for (; e != NULL; e = next) {
			next = e->next;
			e->next = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = n;
}

void
keytab_insert(struct keytab *t, struct keytab_entry *e)
{
	size_t i;

	if (t->count >= t->nbuckets)
		grow(t);
	e->hash = hash_bytes(e->key, e->keylen);
	i = e->hash & (t->nbuckets - 1);
	e->next = t->buckets[i];
	t->buckets[i] = e;
	t->count++;
}

void
keytab_remove(struct keytab *t, struct keytab_entry *e)
{
	struct keytab_entry **pp = &t->buckets[e->hash & (t->nbuckets - 1)];

	for (; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			e->next = NULL;
			t->count--;
			return;
		}
	}
}

size_t
keytab_count(const struct keytab *t)
{
	return t->count;
}

void
keytab_each(struct keytab *t, int (*fn)(struct keytab_entry *, void *),
    void *arg)
{
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct keytab_entry *e = t->buckets[i], *next;
		for (; e != NULL; e = next) {
			next = e->next;
			if (fn(e, arg) != 0)
				return;
		}
	}
}
