/*
 * test_lean.c - the lean exclusive batch's words (daemon/store/lean.c):
 * which calls may go in one (the shapes store/requests.c makes in single
 * and Sentinel mode), the order its answer follows (acquires first), and
 * its KEYS and ARGV as scripts/batch/lean.lua reads them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lean.h"
#include "node.h"
#include "suites.h"

static const struct lean_names names = {
	"p:fence", "p:lockdelay", "p:listen", "p:listenall", "p:wanted",
	"p:released", "B "
};

/* acquire.lua's call as store_acquire makes it: nk keys (lock, counter,
 * lock delay, watch mark[, value key]) and na arguments (owner, ttl,
 * wanted, announcement, will_wait, reserve[, value text]). */
static struct cmd *
acquire(const char *name, const char *owner, int nk, int na)
{
	char lock[64], watch[64], vk[64], ann[64];
	struct piece p[16];
	int np = 0;

	snprintf(lock, sizeof lock, "p:lock:%s", name);
	snprintf(watch, sizeof watch, "p:watched:%s", name);
	snprintf(vk, sizeof vk, "p:value:%s", name);
	snprintf(ann, sizeof ann, "B %s", name);
	p[np++] = (struct piece){ lock, strlen(lock), NULL, 0 };
	p[np++] = (struct piece){ "p:fence", 7, NULL, 0 };
	p[np++] = (struct piece){ "p:lockdelay", 11, NULL, 0 };
	p[np++] = (struct piece){ watch, strlen(watch), NULL, 0 };
	if (nk > 4)
		p[np++] = (struct piece){ vk, strlen(vk), NULL, 0 };
	p[np++] = (struct piece){ owner, strlen(owner), NULL, 0 };
	p[np++] = (struct piece){ "30000", 5, NULL, 0 };
	p[np++] = (struct piece){ "p:wanted", 8, NULL, 0 };
	p[np++] = (struct piece){ ann, strlen(ann), NULL, 0 };
	p[np++] = (struct piece){ "1", 1, NULL, 0 };
	p[np++] = (struct piece){ "32", 2, NULL, 0 };
	if (na > 6)
		p[np++] = (struct piece){ "text", 4, NULL, 0 };
	return cmd_new(sizeof(struct cmd), SCRIPT_ACQUIRE, nk, p, np);
}

/* release.lua's call as store_release makes it: the lock[, value key],
 * then the value, the channel, the name. */
static struct cmd *
release(const char *name, const char *value, int nk)
{
	char lock[64], vk[64];
	struct piece p[6];
	int np = 0;

	snprintf(lock, sizeof lock, "p:lock:%s", name);
	snprintf(vk, sizeof vk, "p:value:%s", name);
	p[np++] = (struct piece){ lock, strlen(lock), NULL, 0 };
	if (nk > 1)
		p[np++] = (struct piece){ vk, strlen(vk), NULL, 0 };
	p[np++] = (struct piece){ value, strlen(value), NULL, 0 };
	p[np++] = (struct piece){ "p:released", 10, NULL, 0 };
	p[np++] = (struct piece){ name, strlen(name), NULL, 0 };
	return cmd_new(sizeof(struct cmd), SCRIPT_RELEASE, nk, p, np);
}

/* Which calls may go in a lean batch: by script and by shape only. */
START_TEST(test_roles)
{
	struct cmd *c;
	struct piece p[2] = { { "p:lock:x", 8, NULL, 0 }, { "v", 1, NULL, 0 } };

	c = acquire("a", "o", 4, 6);
	ck_assert_int_eq(lean_role(c), LEAN_ACQUIRE);
	c->tenure_arg = 9;		/* cluster mode's */
	ck_assert_int_eq(lean_role(c), LEAN_NONE);
	free(c);
	c = acquire("a", "o", 5, 7);	/* ACQUIRE ... VALUE */
	ck_assert_int_eq(lean_role(c), LEAN_NONE);
	free(c);
	c = release("a", "o:1", 1);
	ck_assert_int_eq(lean_role(c), LEAN_RELEASE);
	free(c);
	c = release("a", "o:1", 2);	/* a hold with a value */
	ck_assert_int_eq(lean_role(c), LEAN_NONE);
	free(c);
	/* other scripts, of any shape */
	c = cmd_new(sizeof *c, SCRIPT_RENEW, 1, p, 2);
	ck_assert_int_eq(lean_role(c), LEAN_NONE);
	free(c);
	c = cmd_new(sizeof *c, SCRIPT_FORGET, 1, p, 2);
	ck_assert_int_eq(lean_role(c), LEAN_NONE);
	free(c);
}
END_TEST

static void
check_word(const char **argv, const size_t *argvlen, size_t i,
    const char *want)
{
	ck_assert_uint_eq(argvlen[i], strlen(want));
	ck_assert_int_eq(memcmp(argv[i], want, argvlen[i]), 0);
}

/* Acquires first (in order), then releases (in order); the words as
 * lean.lua reads them; the calls' own argv untouched. */
START_TEST(test_order_and_words)
{
	struct cmd *c[5], *head, *x;
	const char *argv[64];
	size_t argvlen[64], nacq, argc, n;
	char num[LEAN_NUM_BYTES];
	static const char *const want[] = {
		"", "", "9",
		"p:fence", "p:lockdelay", "p:listen", "p:listenall",
		"p:lock:r1", "p:lock:r2",
		"p:lock:a1", "p:lock:a2", "p:lock:a3",
		"@lean", "3", "2", "p:wanted", "p:released", "B ",
		"o1", "30000", "1", "32",
		"o2", "30000", "1", "32",
		"o3", "30000", "1", "32",
		"o:7", "o:8",
	};

	c[0] = release("r1", "o:7", 1);
	c[1] = acquire("a1", "o1", 4, 6);
	c[2] = acquire("a2", "o2", 4, 6);
	c[3] = release("r2", "o:8", 1);
	c[4] = acquire("a3", "o3", 4, 6);
	for (int i = 0; i < 4; i++)
		c[i]->qnext = c[i + 1];
	c[4]->qnext = NULL;
	head = c[0];
	argc = lean_order(&head, 5, &nacq);
	ck_assert_uint_eq(nacq, 3);
	ck_assert_uint_eq(argc, sizeof want / sizeof want[0]);
	ck_assert_ptr_eq(head, c[1]);
	ck_assert_ptr_eq(c[1]->qnext, c[2]);
	ck_assert_ptr_eq(c[2]->qnext, c[4]);
	ck_assert_ptr_eq(c[4]->qnext, c[0]);
	ck_assert_ptr_eq(c[0]->qnext, c[3]);
	ck_assert_ptr_null(c[3]->qnext);
	argv[0] = argv[1] = "";
	argvlen[0] = argvlen[1] = 0;
	n = lean_fill(&names, head, 5, nacq, argv, argvlen, num);
	ck_assert_uint_eq(n, argc);
	for (size_t i = 0; i < argc; i++)
		check_word(argv, argvlen, i, want[i]);
	ck_assert_int_eq(c[1]->argc, 13);	/* their own words stay */
	check_word(c[1]->argv, c[1]->argvlen, 3, "p:lock:a1");
	for (x = head; x != NULL; x = head) {
		head = x->qnext;
		free(x);
	}
}
END_TEST

/* The words of a lean batch of c alone, an acquire (nacq 1) or a release
 * (0); returns their count. */
static size_t
words_alone(struct cmd *c, size_t want_nacq, const char **argv,
    size_t *argvlen, char *num)
{
	struct cmd *head = c;
	size_t nacq, argc = lean_order(&head, 1, &nacq);

	ck_assert_ptr_eq(head, c);
	ck_assert_uint_eq(nacq, want_nacq);
	ck_assert_uint_eq(lean_fill(&names, head, 1, nacq, argv, argvlen, num),
	    argc);
	return argc;
}

/* A batch of releases only, and one of acquires only. */
START_TEST(test_one_sided)
{
	struct cmd *r = release("x", "o:1", 1), *a = acquire("y", "o", 4, 6);
	const char *argv[32];
	size_t argvlen[32];
	char num[LEAN_NUM_BYTES];

	ck_assert_uint_eq(words_alone(r, 0, argv, argvlen, num),
	    3 + 4 + 1 + 6 + 1);
	check_word(argv, argvlen, 2, "5");
	check_word(argv, argvlen, 7, "p:lock:x");
	check_word(argv, argvlen, 9, "0");	/* a */
	check_word(argv, argvlen, 10, "1");	/* r */
	check_word(argv, argvlen, 13, "B ");
	check_word(argv, argvlen, 14, "o:1");
	ck_assert_uint_eq(words_alone(a, 1, argv, argvlen, num),
	    3 + 4 + 1 + 6 + 4);
	check_word(argv, argvlen, 2, "5");
	check_word(argv, argvlen, 7, "p:lock:y");
	check_word(argv, argvlen, 8, "@lean");
	check_word(argv, argvlen, 14, "o");
	check_word(argv, argvlen, 17, "32");
	free(r);
	free(a);
}
END_TEST

Suite *
lean_suite(void)
{
	Suite *s = suite_create("lean");
	TCase *tc = tcase_create("words");

	tcase_add_test(tc, test_roles);
	tcase_add_test(tc, test_order_and_words);
	tcase_add_test(tc, test_one_sided);
	suite_add_tcase(s, tc);
	return s;
}
