/*
 * order.h - the order of a node's calls about one key (order.c): a call
 * about a key waits until every earlier call of the node about that key
 * has its last answer, a resend's or a cluster retry's included.
 */
#ifndef LOCKBROKER_ORDER_H
#define LOCKBROKER_ORDER_H

#include "node.h"

#define DEP_BUCKETS 8192		/* a power of two */

/* The batches a queue walk fills: one per script kind (script_kind), and
 * the lean exclusive batch (lean.h), whose calls read before they write:
 * no key twice in it. */
enum { GROUP_LEAN = SCRIPT__KINDS, GROUP__KINDS };

/* A queue walk's marks on buckets (node.marks, a row of bits each):
 * MARK_BLOCKED, the calls about them wait (a call about them was kept
 * back, or left in an earlier command of this walk); MARK_OPEN + kind, a
 * call about them is in the walk's batch of that kind, still open. */
enum { MARK_BLOCKED, MARK_OPEN, MARK_ROWS = MARK_OPEN + GROUP__KINDS };
#define MARK_BYTES (DEP_BUCKETS / 8)

void deps_mark(struct node *n, const struct cmd *c, int row);
/* c (going in a batch of kind) may go in this walk of n's queue. */
int deps_free(const struct node *n, const struct cmd *c, int kind);
/* No call in flight but c itself is about one of c's keys. */
int deps_idle(const struct node *n, const struct cmd *c);
/* c went out for the first time (sent 1: counted on c->node until its
 * last answer), or has its last answer (sent 0): returns the node whose
 * queue may go on now, or NULL. */
struct node *deps_count(struct cmd *c, int sent);

#endif
