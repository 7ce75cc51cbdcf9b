/*
 * test_pool.c - daemon/base/pool.c, the blocks lock entries and holds come
 * from.
 *
 * What a caller relies on in every build: each object zeroed, live
 * objects never overlapping (thousands of them, of every class and over
 * several blocks, each filled with its own pattern and checked after all
 * were made), any size (above POOL_MAX too), and objects put back and
 * got again.  What the pool build adds (not the sanitizer's passthrough):
 * an object put back is the next one of its class handed out, zeroed,
 * and the blocks grow only when the free lists are empty.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "suites.h"

#define MANY 6000

static size_t
size_of(int i)
{
	return 1 + (size_t)(i * 37) % (POOL_MAX + 100);	/* some above */
}

/* 1 if every one of the n bytes at p is b */
static int
all_are(const unsigned char *p, size_t n, unsigned b)
{
	for (size_t j = 0; j < n; j++)
		if (p[j] != b)
			return 0;
	return 1;
}

START_TEST(test_objects_do_not_overlap)
{
	struct pool *p = pool_new();
	unsigned char *obj[MANY];

	for (int i = 0; i < MANY; i++) {
		size_t n = size_of(i);

		obj[i] = pool_get(p, n);
		ck_assert_ptr_nonnull(obj[i]);
		ck_assert_uint_eq((uintptr_t)obj[i] % POOL_ALIGN, 0);
		ck_assert(all_are(obj[i], n, 0));
		memset(obj[i], i & 0xff, n);
	}
	ck_assert_uint_eq(pool_bytes(p) > 0, !pool_passthrough());
	for (int i = 0; i < MANY; i++)
		ck_assert(all_are(obj[i], size_of(i), (unsigned)(i & 0xff)));
	for (int i = 0; i < MANY; i++)
		pool_put(p, obj[i], size_of(i));
	pool_free(p);
}
END_TEST

START_TEST(test_put_back_comes_back_zeroed)
{
	struct pool *p = pool_new();
	unsigned char *a = pool_get(p, 136), *b, *c;
	size_t bytes;

	memset(a, 0xab, 136);
	pool_put(p, a, 136);
	pool_put(p, NULL, 136);		/* nothing */
	b = pool_get(p, 131);		/* the same class (129..136) */
	ck_assert(all_are(b, 131, 0));
	if (!pool_passthrough()) {
		ck_assert_ptr_eq(a, b);
		bytes = pool_bytes(p);
		for (int i = 0; i < 100; i++) {
			c = pool_get(p, 200);
			pool_put(p, c, 200);
		}
		ck_assert_uint_eq(pool_bytes(p), bytes);
	}
	pool_put(p, b, 131);
	pool_free(p);
}
END_TEST

START_TEST(test_large_objects_are_their_own)
{
	struct pool *p = pool_new();
	unsigned char *big = pool_get(p, POOL_MAX * 4);

	ck_assert(all_are(big, POOL_MAX * 4, 0));
	memset(big, 1, POOL_MAX * 4);
	ck_assert_uint_eq(pool_bytes(p), 0);	/* no block for it */
	pool_put(p, big, POOL_MAX * 4);
	pool_free(p);
	pool_free(NULL);
}
END_TEST

Suite *
pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("objects");

	tcase_add_test(tc, test_objects_do_not_overlap);
	tcase_add_test(tc, test_put_back_comes_back_zeroed);
	tcase_add_test(tc, test_large_objects_are_their_own);
	suite_add_tcase(s, tc);
	return s;
}
