/*
 * keytab.h - an intrusive hash table from byte-string keys to entries.
 *
 * The caller embeds a struct keytab_entry in its own struct, sets key and
 * keylen (the bytes must live as long as the entry is in the table) and
 * owns the memory; the table only links entries.  No allocation per entry,
 * so a held lock costs its own struct and nothing more here.
 */
#ifndef LOCKBROKER_KEYTAB_H
#define LOCKBROKER_KEYTAB_H

#include <stddef.h>
#include <stdint.h>

struct keytab_entry {
	struct keytab_entry *next;
	const char *key;
	size_t keylen;
	uint32_t hash;
};

struct keytab;

struct keytab *keytab_new(void);
/* Frees the table, not the entries still in it. */
void keytab_free(struct keytab *t);
struct keytab_entry *keytab_find(const struct keytab *t, const char *key,
    size_t keylen);
/* Insert e (its key must not be in the table yet). */
void keytab_insert(struct keytab *t, struct keytab_entry *e);
void keytab_remove(struct keytab *t, struct keytab_entry *e);
size_t keytab_count(const struct keytab *t);

/*
 * Visit every entry; fn may remove the entry it is given (and only that
 * one).  Stops early when fn returns non-zero.
 */
void keytab_each(struct keytab *t,
    int (*fn)(struct keytab_entry *e, void *arg), void *arg);

#endif
