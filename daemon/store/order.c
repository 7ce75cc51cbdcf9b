/*
 * order.c - the order of a node's calls about one key.
 *
 * Redis runs one connection's commands in the order they come, but a
 * call it refuses before running it (NOSCRIPT: the script cache was
 * emptied; "Function not found": the library was) is sent again only
 * once its answer is read: behind every call sent meanwhile, and those
 * may have run already, since this broker (for an earlier loss) or
 * another one loaded the library again between them.  An early
 * hand-off's pass sent again behind its new holder's renewal made that
 * holder lose the key (Redis still showed the old one), and the pass then
 * gave the key to a session that had forgotten it.  So a call about a
 * key (cmd.ndeps) waits in the queue until every earlier call of this
 * node about that key has its last answer, its resend's included; calls
 * about other keys go on meanwhile.  Calls of one batch run in order
 * within it and are sent again with it, so calls about one key may share
 * a batch, never follow each other in two.  What it costs: a call about a
 * key with a call in flight waits for that one's round trip (the next
 * pass of a hand-off chain, a release during its key's renewal).
 *
 * A Redis Cluster refuses a call too while its slot migrates (TRYAGAIN:
 * some of its keys are on the other side; ASK: all of them are), or has
 * no master (CLUSTERDOWN), or moved (MOVED), and calls.c sends it again
 * later or elsewhere.  Those answers are not its last either: a pass
 * refused with TRYAGAIN (its key here, the key's watch mark not) while
 * the release behind it, about the lock key alone, ran at once, made the
 * new holder lose the key.  So such a call stays counted on the node it
 * went to first (cmd.dep_node) until its last answer wherever it comes
 * from, or until calls.c gives it up (node_cmd_done); sent again to that
 * node, it does not wait for itself, and goes ahead of the calls that
 * waited for it.
 */
#include "order.h"

#include <stdint.h>

static unsigned
dep_bucket(const char *p, size_t len)
{
	uint32_t h = 2166136261u;	/* FNV-1a */

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)p[i];
		h *= 16777619u;
	}
	return h & (DEP_BUCKETS - 1);
}


static int
marked(const struct node *n, int row, unsigned b)
{
	return (n->marks[row * MARK_BYTES + b / 8] & (1u << (b % 8))) != 0;
}

void
deps_mark(struct node *n, const struct cmd *c, int row)
{
	for (int i = 0; i < c->ndeps; i++) {
		unsigned b = dep_bucket(c->argv[3 + i], c->argvlen[3 + i]);

		n->marks[row * MARK_BYTES + b / 8] |=
		    (unsigned char)(1u << (b % 8));
	}
}

/* What c itself counts in bucket b of n (a call sent again after a
 * cluster retry is still counted where it went first). */
static uint32_t
own(const struct node *n, const struct cmd *c, unsigned b)
{
	uint32_t k = 0;

	if (!c->ordered || c->dep_node != n)
		return 0;
	for (int i = 0; i < c->ndeps; i++)
		if (dep_bucket(c->argv[3 + i], c->argvlen[3 + i]) == b)
			k++;
	return k;
}

/* c (going in a batch of kind) may go in this walk: no call in flight is
 * about one of its keys, none kept back or sent before it in this walk,
 * none in the open batch of another kind (which may leave first), nor in
 * the open lean batch when c goes there (its reads come first: a key
 * there twice would be read before the first call's write). */
int
deps_free(const struct node *n, const struct cmd *c, int kind)
{
	for (int i = 0; i < c->ndeps; i++) {
		unsigned b = dep_bucket(c->argv[3 + i], c->argvlen[3 + i]);

		if (n->deps[b] != own(n, c, b) || marked(n, MARK_BLOCKED, b))
			return 0;
		for (int k = 0; k < GROUP__KINDS; k++)
			if ((k != kind || k == GROUP_LEAN) &&
			    marked(n, MARK_OPEN + k, b))
				return 0;
	}
	return 1;
}

int
deps_idle(const struct node *n, const struct cmd *c)
{
	for (int i = 0; i < c->ndeps; i++) {
		unsigned b = dep_bucket(c->argv[3 + i], c->argvlen[3 + i]);

		if (n->deps[b] != own(n, c, b))
			return 0;
	}
	return 1;
}

struct node *
deps_count(struct cmd *c, int sent)
{
	struct node *n = sent ? c->node : c->dep_node;

	if (c->ordered == sent)
		return NULL;
	c->ordered = sent;
	c->dep_node = n;
	for (int i = 0; i < c->ndeps; i++) {
		unsigned b = dep_bucket(c->argv[3 + i], c->argvlen[3 + i]);

		if (sent)
			n->deps[b]++;
		else
			n->deps[b]--;
	}
	return n;
}
