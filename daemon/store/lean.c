/*
 * lean.c - the words of the lean exclusive batch (lean.h): which calls
 * may go in one, the order its answer follows, and its KEYS and ARGV as
 * scripts/batch/lean.lua reads them.  Nothing is copied: the words point
 * into the calls' own argv, which live until their answers.
 */
#include "lean.h"
#include "node.h"
#include "util.h"

#include <string.h>

/* The shape of the calls store/requests.c makes in single and Sentinel
 * mode (store_acquire, store_release): argv[3] is the first key. */
enum {
	ACQ_KEYS = 4,		/* lock, counter, lock delay, watch mark */
	ACQ_ARGS = 6,		/* owner, ttl, wanted, announcement,
				 * will_wait, reserve */
	REL_KEYS = 1,		/* lock */
	REL_ARGS = 3,		/* value, channel, name */
	ACQ_LOCK = 3, ACQ_OWNER = 7, ACQ_TTL = 8, ACQ_WAIT = 11,
	ACQ_RESERVE = 12,
	REL_LOCK = 3, REL_VALUE = 4,
	/* the lean batch's words per call, and its own (a lock's name, its
	 * watch mark and an announcement are derived in the script) */
	LEAN_KEYS = 4,		/* counter, lock delay, listen, listenall */
	LEAN_ARGS = 6,		/* "@lean", a, r, wanted, released,
				 * "<broker-id> " */
	PER_ACQ_KEYS = 1, PER_ACQ_ARGS = 4,
	PER_REL_KEYS = 1, PER_REL_ARGS = 1,
	NUM = LEAN_NUM_BYTES / 3	/* room for one number, written out */
};

enum lean_role
lean_role(const struct cmd *c)
{
	if (c->tenure_arg != 0)
		return LEAN_NONE;	/* cluster mode's */
	if (c->script == SCRIPT_ACQUIRE && c->nkeys == ACQ_KEYS &&
	    c->argc == 3 + ACQ_KEYS + ACQ_ARGS)
		return LEAN_ACQUIRE;
	if (c->script == SCRIPT_RELEASE && c->nkeys == REL_KEYS &&
	    c->argc == 3 + REL_KEYS + REL_ARGS)
		return LEAN_RELEASE;
	return LEAN_NONE;
}

size_t
lean_order(struct cmd **head, size_t n, size_t *nacq)
{
	struct cmd *acq = NULL, **at = &acq, *rel = NULL, **rt = &rel, *c, *next;
	size_t a = 0;

	for (c = *head; c != NULL; c = next) {
		next = c->qnext;
		c->qnext = NULL;
		if (lean_role(c) == LEAN_ACQUIRE) {
			*at = c;
			at = &c->qnext;
			a++;
		} else {
			*rt = c;
			rt = &c->qnext;
		}
	}
	*at = rel;
	*head = acq;
	*nacq = a;
	return 3 + LEAN_KEYS + LEAN_ARGS + a * (PER_ACQ_KEYS + PER_ACQ_ARGS) +
	    (n - a) * (PER_REL_KEYS + PER_REL_ARGS);
}

/* One word: argv[i] = p (len bytes). */
static void
word(const char **argv, size_t *argvlen, size_t i, const char *p, size_t len)
{
	argv[i] = p;
	argvlen[i] = len;
}

/* The word of c at index i of its argv. */
static void
word_of(const char **argv, size_t *argvlen, size_t i, const struct cmd *c,
    size_t at)
{
	word(argv, argvlen, i, c->argv[at], c->argvlen[at]);
}

/* A number written into num (NUM bytes), as a word. */
static void
number(const char **argv, size_t *argvlen, size_t i, char *num, size_t v)
{
	word(argv, argvlen, i, num, (size_t)fmt_ll(num, (long long)v));
}

size_t
lean_fill(const struct lean_names *names, const struct cmd *head, size_t n,
    size_t nacq, const char **argv, size_t *argvlen, char *num)
{
	size_t r = n - nacq, nkeys = LEAN_KEYS + r + nacq;
	size_t k = 3, a = 3 + nkeys, ka;
	const struct cmd *c;

	number(argv, argvlen, 2, num, nkeys);
	word(argv, argvlen, k++, names->fence, strlen(names->fence));
	word(argv, argvlen, k++, names->delay, strlen(names->delay));
	word(argv, argvlen, k++, names->listen, strlen(names->listen));
	word(argv, argvlen, k++, names->listenall, strlen(names->listenall));
	word(argv, argvlen, a++, "@lean", 5);
	number(argv, argvlen, a++, num + NUM, nacq);
	number(argv, argvlen, a++, num + 2 * NUM, r);
	word(argv, argvlen, a++, names->wanted, strlen(names->wanted));
	word(argv, argvlen, a++, names->released, strlen(names->released));
	word(argv, argvlen, a++, names->idsp, strlen(names->idsp));
	/* KEYS: the released locks (read in one MGET with the four above),
	 * then the acquired locks */
	ka = k + r;
	for (c = head; c != NULL; c = c->qnext) {
		if (lean_role(c) == LEAN_ACQUIRE) {
			word_of(argv, argvlen, ka++, c, ACQ_LOCK);
			word_of(argv, argvlen, a++, c, ACQ_OWNER);
			word_of(argv, argvlen, a++, c, ACQ_TTL);
			word_of(argv, argvlen, a++, c, ACQ_WAIT);
			word_of(argv, argvlen, a++, c, ACQ_RESERVE);
		}
	}
	for (c = head; c != NULL; c = c->qnext) {
		if (lean_role(c) == LEAN_RELEASE) {
			word_of(argv, argvlen, k++, c, REL_LOCK);
			word_of(argv, argvlen, a++, c, REL_VALUE);
		}
	}
	return a;
}
