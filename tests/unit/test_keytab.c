/*
 * test_keytab.c - the intrusive hash table of daemon/keytab.c.
 *
 * Entries are embedded in a test struct, as struct lock embeds them.
 * Keys are compared as bytes with their length, so the tests use keys
 * that share a hash-relevant shape: one byte apart, equal length, one a
 * prefix of another, holding NUL or high bytes.  Ten thousand keys force
 * the bucket array to double several times (it starts at 64).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keytab.h"
#include "suites.h"

struct item {
	struct keytab_entry te;		/* first: find's result casts back */
	int seen;
	char buf[24];
};

#define MANY 10000

static void
item_set(struct item *it, const char *key, size_t keylen)
{
	memset(it, 0, sizeof *it);
	ck_assert_uint_le(keylen, sizeof it->buf);
	memcpy(it->buf, key, keylen);
	it->te.key = it->buf;
	it->te.keylen = keylen;
}

/* MANY items keyed "key-<i>", not yet inserted. */
static struct item *
many_items(void)
{
	struct item *v = calloc(MANY, sizeof *v);
	char key[24];

	ck_assert_ptr_nonnull(v);
	for (int i = 0; i < MANY; i++) {
		int n = snprintf(key, sizeof key, "key-%d", i);
		item_set(&v[i], key, (size_t)n);
	}
	return v;
}

static struct keytab_entry *
find_str(const struct keytab *t, const char *key)
{
	return keytab_find(t, key, strlen(key));
}

START_TEST(test_insert_find_remove)
{
	struct keytab *t = keytab_new();
	struct item a, b;

	item_set(&a, "alpha", 5);
	item_set(&b, "beta", 4);
	ck_assert_uint_eq(keytab_count(t), 0);
	ck_assert_ptr_null(find_str(t, "alpha"));

	keytab_insert(t, &a.te);
	ck_assert_ptr_eq(find_str(t, "alpha"), &a.te);
	ck_assert_ptr_null(find_str(t, "beta"));
	keytab_insert(t, &b.te);
	ck_assert_ptr_eq(find_str(t, "alpha"), &a.te);
	ck_assert_ptr_eq(find_str(t, "beta"), &b.te);
	ck_assert_uint_eq(keytab_count(t), 2);

	keytab_remove(t, &a.te);
	ck_assert_ptr_null(find_str(t, "alpha"));
	ck_assert_ptr_eq(find_str(t, "beta"), &b.te);
	ck_assert_uint_eq(keytab_count(t), 1);

	/* An entry can go back in once removed. */
	keytab_insert(t, &a.te);
	ck_assert_ptr_eq(find_str(t, "alpha"), &a.te);
	ck_assert_uint_eq(keytab_count(t), 2);
	keytab_remove(t, &a.te);
	keytab_remove(t, &b.te);
	ck_assert_uint_eq(keytab_count(t), 0);
	keytab_free(t);
}
END_TEST

/* The lookup compares the bytes, not the pointer it was inserted with. */
START_TEST(test_find_by_other_buffer)
{
	struct keytab *t = keytab_new();
	struct item a;
	char probe[8];

	item_set(&a, "k1", 2);
	keytab_insert(t, &a.te);
	memcpy(probe, "k1xx", 4);
	ck_assert_ptr_eq(keytab_find(t, probe, 2), &a.te);
	ck_assert_ptr_null(keytab_find(t, probe, 3));
	keytab_free(t);
}
END_TEST

/* Growth keeps every entry findable, removal of half keeps the rest. */
START_TEST(test_many_keys)
{
	struct keytab *t = keytab_new();
	struct item *v = many_items();
	char key[24];

	for (int i = 0; i < MANY; i++) {
		keytab_insert(t, &v[i].te);
		ck_assert_uint_eq(keytab_count(t), (size_t)i + 1);
	}
	for (int i = 0; i < MANY; i++)
		ck_assert_ptr_eq(keytab_find(t, v[i].te.key, v[i].te.keylen),
		    &v[i].te);
	snprintf(key, sizeof key, "key-%d", MANY);
	ck_assert_ptr_null(find_str(t, key));
	ck_assert_ptr_null(find_str(t, "key-"));

	for (int i = 0; i < MANY; i += 2)
		keytab_remove(t, &v[i].te);
	ck_assert_uint_eq(keytab_count(t), MANY / 2);
	for (int i = 0; i < MANY; i++) {
		struct keytab_entry *e = keytab_find(t, v[i].te.key,
		    v[i].te.keylen);
		if (i % 2 == 0)
			ck_assert_msg(e == NULL, "removed key-%d still found", i);
		else
			ck_assert_msg(e == &v[i].te, "key-%d not found", i);
	}
	keytab_free(t);
	free(v);
}
END_TEST

/* Keys of one length that differ in a single byte, at every position. */
START_TEST(test_one_byte_apart)
{
	static const char base[] = "abcdefghijklmnop";
	enum { LEN = sizeof base - 1 };
	struct keytab *t = keytab_new();
	struct item v[1 + 2 * LEN];
	size_t n = 0;

	item_set(&v[n++], base, LEN);
	for (size_t pos = 0; pos < LEN; pos++) {
		char k[LEN];

		memcpy(k, base, LEN);
		k[pos] ^= 0x01;			/* one bit */
		item_set(&v[n++], k, LEN);
		memcpy(k, base, LEN);
		k[pos] = (char)0xff;		/* a high byte */
		item_set(&v[n++], k, LEN);
	}
	for (size_t i = 0; i < n; i++)
		keytab_insert(t, &v[i].te);
	ck_assert_uint_eq(keytab_count(t), n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(keytab_find(t, v[i].buf, LEN) == &v[i].te,
		    "variant %zu found the wrong entry", i);
	/* Removing one variant leaves its neighbours. */
	keytab_remove(t, &v[0].te);
	ck_assert_ptr_null(keytab_find(t, base, LEN));
	for (size_t i = 1; i < n; i++)
		ck_assert_ptr_eq(keytab_find(t, v[i].buf, LEN), &v[i].te);
	keytab_free(t);
}
END_TEST

/* Binary keys: NUL bytes inside, equal lengths, prefixes, the empty key. */
START_TEST(test_binary_keys)
{
	static const struct {
		const char *k;
		size_t len;
	} keys[] = {
		{ "", 0 },
		{ "\0", 1 },
		{ "\0\0", 2 },
		{ "a", 1 },
		{ "a\0", 2 },
		{ "a\0b", 3 },
		{ "a\0c", 3 },
		{ "ab", 2 },
		{ "abc", 3 },
		{ "ab\0", 3 },
		{ "\xff\xfe", 2 },
		{ "\xfe\xff", 2 },
	};
	enum { N = sizeof keys / sizeof keys[0] };
	struct keytab *t = keytab_new();
	struct item v[N];

	for (size_t i = 0; i < N; i++) {
		item_set(&v[i], keys[i].k, keys[i].len);
		ck_assert_ptr_null(keytab_find(t, keys[i].k, keys[i].len));
		keytab_insert(t, &v[i].te);
	}
	ck_assert_uint_eq(keytab_count(t), N);
	for (size_t i = 0; i < N; i++)
		ck_assert_msg(keytab_find(t, keys[i].k, keys[i].len) ==
		    &v[i].te, "binary key %zu found the wrong entry", i);
	ck_assert_ptr_null(keytab_find(t, "a\0d", 3));
	ck_assert_ptr_null(keytab_find(t, "\0\0\0", 3));
	keytab_free(t);
}
END_TEST

static int
visit_count(struct keytab_entry *e, void *arg)
{
	struct item *it = (struct item *)(void *)e;

	it->seen++;
	(*(size_t *)arg)++;
	return 0;
}

START_TEST(test_each_visits_all)
{
	struct keytab *t = keytab_new();
	struct item *v = many_items();
	size_t visits = 0;

	keytab_each(t, visit_count, &visits);
	ck_assert_uint_eq(visits, 0);
	for (int i = 0; i < MANY; i++)
		keytab_insert(t, &v[i].te);
	keytab_each(t, visit_count, &visits);
	ck_assert_uint_eq(visits, MANY);
	for (int i = 0; i < MANY; i++)
		ck_assert_msg(v[i].seen == 1, "key-%d visited %d times", i,
		    v[i].seen);
	keytab_free(t);
	free(v);
}
END_TEST

struct remove_arg {
	struct keytab *t;
	size_t visits;
	int odd_only;			/* remove only odd-numbered items */
	struct item *base;
};

static int
visit_remove(struct keytab_entry *e, void *arg)
{
	struct remove_arg *ra = arg;
	struct item *it = (struct item *)(void *)e;

	it->seen++;
	ra->visits++;
	if (!ra->odd_only || (it - ra->base) % 2 == 1) {
		keytab_remove(ra->t, e);
		memset(&it->te, 0xa5, sizeof it->te);	/* gone: poison it */
	}
	return 0;
}

/* fn may remove the entry it is given: every entry is still visited once. */
START_TEST(test_each_remove_visited)
{
	struct keytab *t = keytab_new();
	struct item *v = many_items();
	struct remove_arg ra = { .t = t, .base = v };

	for (int i = 0; i < MANY; i++)
		keytab_insert(t, &v[i].te);
	keytab_each(t, visit_remove, &ra);
	ck_assert_uint_eq(ra.visits, MANY);
	ck_assert_uint_eq(keytab_count(t), 0);
	for (int i = 0; i < MANY; i++)
		ck_assert_msg(v[i].seen == 1, "key-%d visited %d times", i,
		    v[i].seen);
	keytab_free(t);
	free(v);
}
END_TEST

/* Removing some entries during the walk leaves the others in place. */
START_TEST(test_each_remove_some)
{
	struct keytab *t = keytab_new();
	struct item *v = many_items();
	struct remove_arg ra = { .t = t, .odd_only = 1, .base = v };
	size_t visits = 0;

	for (int i = 0; i < MANY; i++)
		keytab_insert(t, &v[i].te);
	keytab_each(t, visit_remove, &ra);
	ck_assert_uint_eq(ra.visits, MANY);
	ck_assert_uint_eq(keytab_count(t), MANY / 2);
	for (int i = 0; i < MANY; i += 2) {
		ck_assert_ptr_eq(keytab_find(t, v[i].buf, strlen(v[i].buf)),
		    &v[i].te);
		v[i].seen = 0;
	}
	for (int i = 1; i < MANY; i += 2)
		ck_assert_ptr_null(keytab_find(t, v[i].buf, strlen(v[i].buf)));
	keytab_each(t, visit_count, &visits);
	ck_assert_uint_eq(visits, MANY / 2);
	for (int i = 0; i < MANY; i += 2)
		ck_assert_int_eq(v[i].seen, 1);
	keytab_free(t);
	free(v);
}
END_TEST

static int
visit_stop(struct keytab_entry *e, void *arg)
{
	(void)e;
	return ++*(size_t *)arg == 10;
}

/* A non-zero return ends the walk at once. */
START_TEST(test_each_stops)
{
	struct keytab *t = keytab_new();
	struct item *v = many_items();
	size_t visits = 0;

	for (int i = 0; i < 100; i++)
		keytab_insert(t, &v[i].te);
	keytab_each(t, visit_stop, &visits);
	ck_assert_uint_eq(visits, 10);
	keytab_free(t);
	free(v);
}
END_TEST

/* The count follows inserts and removes, through growth and back down. */
START_TEST(test_count)
{
	struct keytab *t = keytab_new();
	struct item *v = many_items();

	for (int i = 0; i < 1000; i++)
		keytab_insert(t, &v[i].te);
	ck_assert_uint_eq(keytab_count(t), 1000);
	for (int i = 999; i >= 0; i--) {
		keytab_remove(t, &v[i].te);
		ck_assert_uint_eq(keytab_count(t), (size_t)i);
	}
	for (int i = 0; i < 1000; i++)
		ck_assert_ptr_null(keytab_find(t, v[i].te.key, v[i].te.keylen));
	keytab_free(t);
	free(v);
}
END_TEST

Suite *
keytab_suite(void)
{
	Suite *s = suite_create("keytab");
	TCase *tc;

	tc = tcase_create("basics");
	tcase_add_test(tc, test_insert_find_remove);
	tcase_add_test(tc, test_find_by_other_buffer);
	tcase_add_test(tc, test_count);
	suite_add_tcase(s, tc);

	tc = tcase_create("keys");
	tcase_add_test(tc, test_many_keys);
	tcase_add_test(tc, test_one_byte_apart);
	tcase_add_test(tc, test_binary_keys);
	suite_add_tcase(s, tc);

	tc = tcase_create("each");
	tcase_add_test(tc, test_each_visits_all);
	tcase_add_test(tc, test_each_remove_visited);
	tcase_add_test(tc, test_each_remove_some);
	tcase_add_test(tc, test_each_stops);
	suite_add_tcase(s, tc);
	return s;
}
