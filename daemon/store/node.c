/*
 * node.c - one Redis master's script calls (node.h): the in-flight cap
 * and the queue, the end-of-turn batch, sending (as FCALL of the broker's
 * function library, as EVALSHA on a Redis without functions; as EVAL
 * after NOSCRIPT or "Function not found": a SCRIPT or FUNCTION FLUSH, a
 * restart without persistence or a failover empties the cache), and
 * replica acknowledgement as a group commit; and the command link's
 * handshake and checks (library loaded: fnlib.c; a master, still a
 * master, still answering).  Exclusive acquires and releases go as the
 * lean exclusive batch (lean.h) once the link's announce has answered.
 *
 * The node never decodes a reply: it hands each call its own answer
 * (c->reply), which may start it again elsewhere (a redirection) or ask
 * to be parked until its turn's WAIT answers (a grant, with
 * redis_replica_acks).
 */
#include "node.h"
#include "order.h"
#include "fnlib.h"
#include "lean.h"
#include "log.h"
#include "resp.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct batch;

static struct batch *batch_new(struct node *n, struct cmd *head,
    size_t count);
static int batch_send(struct batch *b);
static int cmd_send(struct cmd *c);
static void queue_run(struct node *n);

/* --- calls ------------------------------------------------------------- */

struct cmd *
cmd_new(size_t size, enum script_id script, int nkeys,
    const struct piece *pieces, int npieces)
{
	size_t bytes = 0, off;
	char numkeys[FMT_LL_MAX], *data;
	struct cmd *c;
	int argc = 3 + npieces, nklen;

	nklen = fmt_ll(numkeys, nkeys);
	for (int i = 0; i < npieces; i++)
		bytes += pieces[i].l1 + pieces[i].l2;
	bytes += (size_t)nklen;
	c = xmalloc(size + (size_t)argc * (sizeof(char *) +
	    sizeof(size_t)) + bytes);
	memset(c, 0, size);
	c->script = script;
	c->born_ms = now_ms();
	c->argc = argc;
	c->nkeys = nkeys;
	c->ndeps = nkeys > 0 ? 1 : 0;
	c->bytes = bytes + (size_t)argc * 16;	/* and RESP's framing */
	c->argv = (const char **)(void *)((char *)c + size);
	c->argvlen = (size_t *)(void *)(c->argv + argc);
	data = (char *)(c->argvlen + argc);
	c->argv[0] = "EVALSHA";		/* until sent: call_words */
	c->argvlen[0] = 7;
	c->argv[1] = scripts[script].sha;
	c->argvlen[1] = strlen(scripts[script].sha);
	memcpy(data, numkeys, (size_t)nklen);
	c->argv[2] = data;
	c->argvlen[2] = (size_t)nklen;
	off = (size_t)nklen;
	for (int i = 0; i < npieces; i++) {
		c->argv[3 + i] = data + off;
		c->argvlen[3 + i] = pieces[i].l1 + pieces[i].l2;
		if (pieces[i].l1)
			memcpy(data + off, pieces[i].p1, pieces[i].l1);
		off += pieces[i].l1;
		if (pieces[i].l2)
			memcpy(data + off, pieces[i].p2, pieces[i].l2);
		off += pieces[i].l2;
	}
	return c;
}

/* c has its last answer, or none (its link went, or it could not be
 * sent): the calls about its keys behind it may go. */
static void
cmd_answered(struct cmd *c)
{
	struct node *n = deps_count(c, 0);

	if (n != NULL && n->qhead != NULL)
		queue_run(n);
}

void
node_cmd_done(struct cmd *c)
{
	cmd_answered(c);
}

/* No answer for c (its link went, or it could not be sent). */
static void
cmd_fail(struct cmd *c)
{
	cmd_answered(c);
	c->reply(c, NULL, 0);
}

int
node_usable(const struct node *n)
{
	return n != NULL && link_usable(&n->link);
}

int
node_coming(const struct node *n)
{
	return n != NULL && link_coming(&n->link);
}

void
node_kill(struct node *n, const char *why)
{
	link_kill(&n->link, why);
}

/* --- replica acknowledgement (group commit) -------------------------- */

/*
 * Every grant sent in one event-loop turn joins the open group, and one
 * WAIT sent at the end of the turn (ack_ev) covers them all.  A grant's
 * reply is parked until that WAIT answers.  refs: the WAIT (until its
 * reply, or until it turns out it cannot be sent) plus each member whose
 * reply has not come.
 */
struct ackgroup {
	struct node *node;
	struct cmd *parked;		/* granted, waiting for the WAIT */
	unsigned refs;
	int sent;			/* the WAIT is on the wire */
};

static void
group_unref(struct ackgroup *g)
{
	if (--g->refs == 0)
		free(g);
}

/* c's reply came (or never will, or it is sent again: the resend joins
 * the group of its own turn): it no longer holds its group open. */
static void
group_left(struct cmd *c)
{
	if (c->group != NULL) {
		group_unref(c->group);
		c->group = NULL;
	}
}

/* A grant sent this turn: the turn's WAIT on its link covers it. */
static void
group_join(struct cmd *c)
{
	struct node *n = c->node;
	struct ackgroup *g = n->agroup;

	if (g == NULL) {
		g = xcalloc(1, sizeof *g);
		g->node = n;
		g->refs = 1;		/* the WAIT */
		n->agroup = g;
		event_active(n->ack_ev, EV_TIMEOUT, 0);
	}
	g->refs++;
	c->group = g;
}

static void
wait_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct ackgroup *g = privdata;
	struct node *n = g->node;
	redisReply *r = reply;
	long long acked = -1;
	size_t undone = 0;
	struct cmd *c;

	(void)ac;
	n->inflight--;
	n->last_progress_ms = now_ms();
	if (r == NULL)
		link_dying(&n->link);
	if (r != NULL && r->type == REDIS_REPLY_INTEGER)
		acked = r->integer;
	while ((c = g->parked) != NULL) {
		g->parked = c->gnext;
		/* unknown (no reply): the caller forgets it */
		if (c->acked(c, r == NULL ? -1 : acked >= n->env->acks) == 1)
			undone++;
	}
	if (undone > 0) {
		n->env->acks_missed += undone;
		log_warn("WAIT on %s: %lld of %ld replicas acknowledged; %zu "
		    "grants undone", n->link.addrstr, acked, n->env->acks,
		    undone);
	}
	if (r != NULL && r->type == REDIS_REPLY_ERROR)
		/* e.g. "WAIT cannot be used with replica instances" */
		link_kill(&n->link, "WAIT refused: no longer the master?");
	group_unref(g);
}

/* The turn is over: one WAIT for every grant it sent on n. */
static void
ack_cb(evutil_socket_t fd, short what, void *arg)
{
	struct node *n = arg;
	struct ackgroup *g = n->agroup;

	(void)fd;
	(void)what;
	if (g == NULL)
		return;
	n->agroup = NULL;
	if (n->link.state == LINK_UP && n->link.ac != NULL &&
	    link_sendf(&n->link, wait_reply, g, "WAIT %ld %ld", n->env->acks,
	    n->env->ack_timeout_ms) == 0) {
		g->sent = 1;
		if (n->inflight++ == 0)
			n->last_progress_ms = now_ms();
		return;
	}
	/* The link went first: its members fail with it (their callbacks
	 * run with NULL replies, nothing is parked yet). */
	group_unref(g);
}

/* --- how a script is called ------------------------------------------- */

void
node_script(const struct node *n, enum script_id script, const char **call,
    const char **name)
{
	*call = n->fn ? "FCALL" : "EVALSHA";
	*name = n->fn ? scripts[script].fname : scripts[script].sha;
}

/* The first two words of a call's argv, as it goes to n now: FCALL
 * <function> or EVALSHA <sha>, or, once retried (the library or the
 * script cache was emptied under it), EVAL <text>, which runs whatever
 * Redis has loaded. */
static void
call_words(const struct node *n, enum script_id script, int retried,
    const char **argv, size_t *argvlen)
{
	if (retried) {
		argv[0] = "EVAL";
		argv[1] = scripts[script].text;
	} else {
		node_script(n, script, &argv[0], &argv[1]);
	}
	argvlen[0] = strlen(argv[0]);
	argvlen[1] = strlen(argv[1]);
}

/* --- answers ----------------------------------------------------------- */

static int
is_noscript(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR &&
	    strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* A Redis Cluster's refusal of a call it did not run, which calls.c
 * follows (order.c: not its last answer). */
static int
is_cluster_retry(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && (
	    strncmp(r->str, "TRYAGAIN", 8) == 0 ||
	    strncmp(r->str, "CLUSTERDOWN", 11) == 0 ||
	    strncmp(r->str, "ASK ", 4) == 0 ||
	    strncmp(r->str, "MOVED ", 6) == 0);
}

/* FCALL's answer when the function is not loaded. */
static int
is_nofunction(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR &&
	    strncmp(r->str, "ERR Function not found", 22) == 0;
}

/*
 * Redis answered c, alone or as its element of a batch's reply (c's
 * place in flight is given back already): send it again as EVAL after
 * NOSCRIPT or "Function not found" (reloading the library), or hand it
 * its answer, parking a grant in its group when it asks.
 */
static void
cmd_done(struct cmd *c, const redisReply *r)
{
	struct node *n = c->node;
	struct ackgroup *g;

	if ((is_noscript(r) || is_nofunction(r)) && !c->retried &&
	    n->link.state == LINK_UP) {
		group_left(c);	/* the resend joins the group of its turn */
		if (is_nofunction(r)) {
			fnlib_reload(n, c->loads);
			log_debug("function %s not in Redis %s: sent as EVAL",
			    scripts[c->script].fname, n->link.addrstr);
		} else {
			log_info("script %s not cached in Redis %s: sent as "
			    "EVAL", scripts[c->script].name, n->link.addrstr);
		}
		/* The text once; EVAL caches it. */
		c->retried = 1;
		if (cmd_send(c) != 0)
			cmd_fail(c);
		return;
	}
	if (!is_cluster_retry(r))
		cmd_answered(c);	/* (else: node_cmd_done, at the end) */
	g = c->group;		/* its reply came: no longer a member */
	c->group = NULL;
	if (c->reply(c, r, g != NULL) == CMD_PARK && g != NULL) {
		/* parked in its group (which the WAIT keeps alive) */
		c->gnext = g->parked;
		g->parked = c;
	}
	if (g != NULL)
		group_unref(g);
}

static void
cmd_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct cmd *c = privdata;
	struct node *n = c->node;

	(void)ac;
	n->inflight--;
	n->last_progress_ms = now_ms();
	if (reply == NULL) {
		link_dying(&n->link);	/* before the caller reacts to it */
		group_left(c);
		cmd_fail(c);
		return;
	}
	histo_observe(&n->rtt, now_us() - c->sent_us);
	queue_run(n);
	cmd_done(c, reply);
}

/*
 * Cluster mode: the tenure of the master c goes to (a redirection may
 * have changed it since the call was built), and what is left of the
 * lock delay since this broker joined that tenure: a slot first reached
 * long after a failover needs none, as every broker reasserted its locks
 * when it reached the new master.
 */
static void
cmd_tenure(struct cmd *c)
{
	struct node *n = c->node;
	const char *id[TENURE_ARGS] = { n->replid, n->replid2,
	    n->prev_replid, c->tenure_delay };
	long left;

	if (c->tenure_arg <= 0)
		return;
	left = n->env->lock_delay_ms - (long)(now_ms() - n->tenure_ms);
	snprintf(c->tenure_delay, sizeof c->tenure_delay, "%ld",
	    left > 0 ? left : 0);
	for (int i = 0; i < TENURE_ARGS; i++) {
		c->argv[c->tenure_arg + i] = id[i];
		c->argvlen[c->tenure_arg + i] = strlen(id[i]);
	}
}

/* c is on the wire (alone or in a batch): it holds a place in flight, and
 * a grant joins its turn's group commit (replica acks). */
static void
cmd_sent(struct cmd *c)
{
	struct node *n = c->node;

	if (n->inflight++ == 0)
		n->last_progress_ms = now_ms();
	deps_count(c, 1);
	c->loads = n->fn_loads;
	if (c->acked != NULL && n->env->acks > 0)
		group_join(c);
}

static int
cmd_send(struct cmd *c)
{
	struct node *n = c->node;

	if (!node_usable(n) || n->link.ac == NULL)
		return -1;
	cmd_tenure(c);
	call_words(n, c->script, c->retried, c->argv, c->argvlen);
	/* ASK: this one command, and only it, goes to the target */
	if (c->asking && link_sendf(&n->link, NULL, NULL, "ASKING") != 0)
		return -1;
	c->asking = 0;
	if (link_send(&n->link, cmd_reply, c, c->argc, c->argv, c->argvlen) !=
	    0)
		return -1;
	c->sent_us = now_us();
	cmd_sent(c);
	return 0;
}

/* --- batches ----------------------------------------------------------- */

/*
 * Batching (single and Sentinel mode) sends script calls in batches: the
 * calls started in one event-loop turn on a node go to Redis as one
 * FCALL of the library's batch function (EVALSHA of the batch script
 * without functions; scripts/embed.sh), which runs each as its own
 * script would and answers one element per call; each element is then
 * handled exactly as that call's own reply would be (cmd_done: the
 * replica ack group, the call's own reply).  Redis then
 * parses, looks up and answers one command where it did up to
 * STORE_BATCH_MAX, and the broker writes and reads once.
 *
 * Calls wait in the node's queue (in the order they were started) only
 * until the end of the turn (lean calls under load: below), when
 * flush_ev sends every one that has a place in flight, cut into batches
 * of at most
 * STORE_BATCH_MAX calls and STORE_BATCH_BYTES; a call alone goes as its
 * own script's call, as before batches.  Since every call leaves through the
 * queue, calls reach Redis in the order they were started, inside a
 * batch and from one batch to the next, except that a call about a key
 * waits for the calls about it still unanswered (order, above) while
 * others pass it (a handoff and then a renewal of its new holder depend
 * on their order).  A call of a batch counts as one in
 * flight (STORE_MAX_INFLIGHT, the watchdog, store_inflight): what is
 * bounded is the work Redis has been given, whatever its packing.
 * The lean batch (lean.h) reads every key before it writes: a call about
 * a key already in it waits for its answer (deps_free).  Not allow-oom:
 * refused whole under maxmemory, its releases go again as batch_free.
 * Lean calls are the one thing that waits for company, and only under
 * load: while LEAN_FLYING_MAX lean batches are unanswered, the lean calls
 * of later turns gather in the queue (kept back as a call about a busy
 * key is: calls about their keys stay behind them) and go as one batch
 * when one answers.  A lean call costs Redis ~4 us and its batch ~9 us
 * more (docs/BENCHMARKS.md), so at 50 connections the gathered batches
 * (~9 calls instead of ~6.5) cut Redis's script time per pair by a third;
 * with two in flight Redis always has the next one queued (with one, it
 * idled while the broker answered the last, and pairs/s fell 14%).  A
 * call alone on an idle link still goes at the end of its turn.
 *
 * Not in cluster mode: a script's keys must share one slot, so a batch
 * could only join calls of one slot, which calls on different lock names
 * rarely share (16384 slots), while a batch's MOVED, ASK or TRYAGAIN
 * would have to be taken apart and each call redirected on its own.  The
 * load is spread over the masters there anyway; each call goes alone.
 */
struct batch {
	struct node *node;
	struct cmd *head;		/* its calls, in order (qnext) */
	size_t n;
	int retried;			/* sent again as EVAL (NOSCRIPT, or
					 * "Function not found") */
	int kind;			/* its calls' (script_kind): which
					 * batch function runs them */
	int lean;			/* the lean exclusive batch (lean.h) */
	unsigned loads;			/* node.fn_loads when it was sent */
	int64_t sent_us;		/* the round trip's start */
	int argc;
	const char **argv;		/* into the calls' own argv */
	size_t *argvlen;
};

#define BATCH_NUM 24			/* room for a count, written out */

/* b is over (answered, or failed): a lean one leaves its place. */
static void
batch_over(struct batch *b)
{
	if (b->lean)
		b->node->lean_flying--;
	free(b);
}

/* Fail every call of b (the batch could not go, or the link went with
 * it) and free it. */
static void
batch_fail(struct batch *b)
{
	struct cmd *c, *next;

	for (c = b->head; c != NULL; c = next) {
		next = c->qnext;
		group_left(c);
		cmd_fail(c);
	}
	batch_over(b);
}

/* Redis refuses a function that may write whole under maxmemory with
 * noeviction (OOM). */
static int
is_oom(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "OOM", 3) == 0;
}

/*
 * Redis refused lean batch b whole for memory (OOM): its releases go
 * again at once in the release-only batch function (allow-oom), as they
 * went before lean batches, so a full Redis still lets locks go; its
 * acquires are answered the refusal, as any refused write.  The releases
 * keep their place: they are still counted about their keys (order).
 */
static void
batch_oom(struct batch *b, const redisReply *r)
{
	struct cmd *c, *next, *frees = NULL, **tail = &frees, *acq = NULL;
	size_t nf = 0;

	for (c = b->head; c != NULL; c = next) {
		next = c->qnext;
		if (lean_role(c) == LEAN_RELEASE) {
			*tail = c;
			tail = &c->qnext;
			nf++;
		} else {
			c->qnext = acq;
			acq = c;
		}
	}
	*tail = NULL;
	if (nf > 0) {
		struct batch *f = batch_new(b->node, frees, nf);

		if (batch_send(f) != 0)
			batch_fail(f);
	}
	batch_over(b);
	for (c = acq; c != NULL; c = next) {
		next = c->qnext;
		cmd_done(c, r);
	}
}

static void
batch_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct batch *b = privdata;
	struct node *n = b->node;
	redisReply *r = reply;
	struct cmd *c, *next;
	size_t i = 0;

	(void)ac;
	n->inflight -= b->n;
	n->last_progress_ms = now_ms();
	if (r == NULL) {
		link_dying(&n->link);	/* before the callers react to it */
		batch_fail(b);
		return;
	}
	histo_observe(&n->rtt, now_us() - b->sent_us);
	queue_run(n);
	if ((is_noscript(r) || is_nofunction(r)) && !b->retried &&
	    n->link.state == LINK_UP) {
		/* Script cache or library flushed: the whole batch again, as
		 * EVAL (which caches it), its calls in the same order. */
		for (c = b->head; c != NULL; c = c->qnext)
			group_left(c);	/* the resend joins its turn's group */
		b->retried = 1;
		if (is_nofunction(r)) {
			fnlib_reload(n, b->loads);
			log_debug("function %s not in Redis %s: sent as EVAL",
			    b->lean ? script_lean_fname :
			    script_batch_fname[b->kind], n->link.addrstr);
		} else {
			log_info("script batch not cached in Redis %s: sent "
			    "as EVAL", n->link.addrstr);
		}
		if (batch_send(b) != 0)
			batch_fail(b);
		return;
	}
	if (b->lean && is_oom(r)) {
		batch_oom(b, r);
		return;
	}
	if ((r->type != REDIS_REPLY_ARRAY || r->elements != b->n) &&
	    r->type != REDIS_REPLY_ERROR) {
		log_error("unexpected reply shape from batch (type %d)",
		    r->type);
		batch_fail(b);
		return;
	}
	/* An error for the whole batch (BUSY, LOADING, a second NOSCRIPT,
	 * OOM: a function that may write is refused whole under maxmemory...)
	 * is every call's error, as each would have got it alone; callers
	 * treat it as any error reply (a grant's key is freed by owner
	 * later, should the batch have run part of the way). */
	for (c = b->head; c != NULL; c = next, i++) {
		next = c->qnext;
		cmd_done(c, r->type == REDIS_REPLY_ARRAY ? r->element[i] : r);
	}
	batch_over(b);
}

/* A batch of the count calls from head, of kind, with room for argc
 * words and numbytes bytes of numbers (returned in *num): its first two
 * words are batch_send's. */
static struct batch *
batch_alloc(struct node *n, struct cmd *head, size_t count, int kind,
    size_t argc, size_t numbytes, char **num)
{
	struct batch *b = xmalloc(sizeof *b + argc * (sizeof(char *) +
	    sizeof(size_t)) + numbytes);

	*b = (struct batch){ .node = n, .head = head, .n = count,
	    .kind = kind, .argc = (int)argc };
	b->argv = (const char **)(void *)(b + 1);
	b->argvlen = (size_t *)(void *)(b->argv + argc);
	*num = (char *)(b->argvlen + argc);
	b->argv[0] = b->argv[1] = "";	/* batch_send: call_words */
	b->argvlen[0] = b->argvlen[1] = 0;
	return b;
}

/*
 * The n calls from head (linked by qnext, the last one's NULL) as one
 * batch call: FCALL <batch> <all keys> <keys...> (or EVALSHA), then per
 * call its script's name, its key count, its argument count and its
 * arguments.
 * The pieces stay in the calls' own argv.
 */
static struct batch *
batch_new(struct node *n, struct cmd *head, size_t count)
{
	size_t argc = 3, nkeys = 0, k, a;
	struct batch *b;
	struct cmd *c;
	char *num;

	for (c = head; c != NULL; c = c->qnext) {
		cmd_tenure(c);
		argc += (size_t)c->argc;  /* FCALL fn nk: name nk na */
		nkeys += (size_t)c->nkeys;
	}
	b = batch_alloc(n, head, count, script_kind[head->script], argc,
	    (2 * count + 1) * BATCH_NUM, &num);
	b->argv[2] = num;
	b->argvlen[2] = (size_t)fmt_ll(num, (long long)nkeys);
	num += BATCH_NUM;
	k = 3;
	a = 3 + nkeys;
	for (c = head; c != NULL; c = c->qnext) {
		size_t nk = (size_t)c->nkeys, na = (size_t)c->argc - 3 - nk;

		memcpy(&b->argv[k], &c->argv[3], nk * sizeof *b->argv);
		memcpy(&b->argvlen[k], &c->argvlen[3], nk * sizeof *b->argvlen);
		k += nk;
		b->argv[a] = scripts[c->script].name;
		b->argvlen[a] = strlen(b->argv[a]);
		b->argv[a + 1] = num;
		b->argvlen[a + 1] = (size_t)fmt_ll(num, (long long)nk);
		num += BATCH_NUM;
		b->argv[a + 2] = num;
		b->argvlen[a + 2] = (size_t)fmt_ll(num, (long long)na);
		num += BATCH_NUM;
		memcpy(&b->argv[a + 3], &c->argv[3 + nk], na * sizeof *b->argv);
		memcpy(&b->argvlen[a + 3], &c->argvlen[3 + nk],
		    na * sizeof *b->argvlen);
		a += 3 + na;
	}
	return b;
}

/*
 * The n calls from head (each of a lean role) as one lean batch (lean.h,
 * scripts/batch/lean.lua): relinked in the order its answer follows.  It
 * may write: the plain batch's kind (no flags).
 */
static struct batch *
batch_lean(struct node *n, struct cmd *head, size_t count)
{
	size_t nacq, argc = lean_order(&head, count, &nacq);
	char *num;
	struct batch *b = batch_alloc(n, head, count, SCRIPT_WRITES, argc,
	    LEAN_NUM_BYTES, &num);

	b->lean = 1;
	n->lean_flying++;
	lean_fill(n->env->lean, head, count, nacq, b->argv, b->argvlen, num);
	return b;
}

static int
batch_send(struct batch *b)
{
	struct node *n = b->node;

	if (!node_usable(n) || n->link.ac == NULL)
		return -1;
	call_words(n, SCRIPT_BATCH, b->retried, b->argv, b->argvlen);
	if (n->fn && !b->retried) {
		/* the function of its calls' kind (flags, scripts/embed.sh);
		 * as a script (EVALSHA, EVAL) the batch has no flags, and
		 * runs a lean batch by its first argument, "@lean" */
		b->argv[1] = b->lean ? script_lean_fname :
		    script_batch_fname[b->kind];
		b->argvlen[1] = strlen(b->argv[1]);
	}
	if (link_send(&n->link, batch_reply, b, b->argc, b->argv,
	    b->argvlen) != 0)
		return -1;
	b->sent_us = now_us();
	b->loads = n->fn_loads;
	for (struct cmd *c = b->head; c != NULL; c = c->qnext)
		cmd_sent(c);
	return 0;
}

/* --- the queue --------------------------------------------------------- */

static void
queue_push(struct node *n, struct cmd *c)
{
	c->qnext = NULL;
	if (n->qtail)
		n->qtail->qnext = c;
	else
		n->qhead = c;
	n->qtail = c;
	n->queued++;
}

/* c to n's queue: at its end, or at its head when c was sent before (a
 * cluster retry): the calls about its keys behind it waited for it. */
static void
queue_add(struct node *n, struct cmd *c)
{
	if (!c->ordered) {
		queue_push(n, c);
		return;
	}
	c->qnext = n->qhead;
	n->qhead = c;
	if (n->qtail == NULL)
		n->qtail = c;
	n->queued++;
}

/* Take c, after prev (NULL: the head), out of n's queue. */
static void
queue_unlink(struct node *n, struct cmd *prev, struct cmd *c)
{
	if (prev != NULL)
		prev->qnext = c->qnext;
	else
		n->qhead = c->qnext;
	if (n->qtail == c)
		n->qtail = prev;
	n->queued--;
	c->qnext = NULL;
}

/* A command's worth of calls taken from the queue: one call, or a
 * batch's (qnext-linked, in order). */
struct group {
	struct cmd *head, *tail;
	size_t n, bytes;
	int kind;			/* GROUP_LEAN, or a script kind */
};

/*
 * Take from n's queue, in order, the calls that may go now, as at most
 * room calls into commands g (returns how many commands): batching, up
 * to STORE_BATCH_MAX calls and STORE_BATCH_BYTES a batch, each batch of
 * calls of one kind (script_kind: a batch of releases runs under
 * maxmemory, one of reads too; the lean batch: exclusive acquires and
 * releases, lean.h), else one call a command.  A call about a
 * key that a call in flight is about, or one kept back or taken into
 * another command of this walk, stays queued, and the calls behind it
 * about its keys with it (order, above); so commands of this walk share
 * no key and may leave in any order.
 */
static size_t
queue_take(struct node *n, struct group *g, size_t room)
{
	size_t ng = 0, taken = 0;
	long open[GROUP__KINDS];
	struct cmd *c, *prev = NULL, *next;
	int batching = n->env->batching;

	for (int k = 0; k < GROUP__KINDS; k++)
		open[k] = -1;
	memset(n->marks, 0, MARK_ROWS * MARK_BYTES);
	for (c = n->qhead; c != NULL && taken < room; c = next) {
		int kind = !batching ? SCRIPT_WRITES : n->env->lean != NULL &&
		    n->announced && lean_role(c) != LEAN_NONE ? GROUP_LEAN :
		    script_kind[c->script];
		struct group *cur = open[kind] >= 0 ? &g[open[kind]] : NULL;

		next = c->qnext;
		if (cur != NULL && (cur->n == STORE_BATCH_MAX ||
		    cur->bytes + c->bytes > STORE_BATCH_BYTES)) {
			/* full: its calls are ahead of every later call
			 * about their keys */
			for (struct cmd *d = cur->head; d != NULL; d = d->qnext)
				deps_mark(n, d, MARK_BLOCKED);
			cur = NULL;
			open[kind] = -1;
		}
		if (!deps_free(n, c, kind) || (kind == GROUP_LEAN &&
		    cur == NULL && n->lean_flying >= LEAN_FLYING_MAX)) {
			deps_mark(n, c, MARK_BLOCKED);
			prev = c;
			continue;
		}
		queue_unlink(n, prev, c);
		if (cur == NULL) {
			open[kind] = (long)ng;
			cur = &g[ng++];
			*cur = (struct group){ c, NULL, 0, 0, kind };
		} else {
			cur->tail->qnext = c;
		}
		cur->tail = c;
		cur->n++;
		cur->bytes += c->bytes;
		taken++;
		if (batching) {
			deps_mark(n, c, MARK_OPEN + kind);
		} else {
			deps_mark(n, c, MARK_BLOCKED);	/* alone */
			open[kind] = -1;
		}
	}
	return ng;
}

/*
 * The end of the loop turn: send n's queued calls that may go (each with
 * a place in flight, and no earlier call about its keys unanswered), in
 * order, as batches when batching (one call alone: its own call).  Then
 * write them at once: hiredis would write on the next loop turn, when
 * epoll reports the socket writable, after adding a write event for each
 * command (epoll_ctl) and deleting it once written (epoll_ctl again).
 * Writing here saves that turn and both calls (holding writes, link_send
 * adds no write event; hiredis adds one itself if the socket takes only
 * part).  With one connection and one request at a time, the broker's
 * system calls per request went from 3 epoll_wait and 5 epoll_ctl to 2
 * and 3 (strace -c, lbbench pairs --conns 1).
 */
static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct node *n = arg;
	struct group g[STORE_MAX_INFLIGHT];
	size_t ng;

	(void)fd;
	(void)what;
	if (n->qhead == NULL || n->inflight >= STORE_MAX_INFLIGHT ||
	    !node_usable(n))
		return;
	/* all taken first, then sent: a failed send's callback may queue */
	ng = queue_take(n, g, STORE_MAX_INFLIGHT - n->inflight);
	if (ng == 0)
		return;
	link_hold_writes(&n->link, 1);
	for (size_t i = 0; i < ng; i++) {
		if (g[i].kind == GROUP_LEAN) {
			struct batch *b = batch_lean(n, g[i].head, g[i].n);

			if (batch_send(b) != 0)
				batch_fail(b);
		} else if (g[i].n == 1) {
			if (cmd_send(g[i].head) != 0)
				cmd_fail(g[i].head);
		} else {
			struct batch *b = batch_new(n, g[i].head, g[i].n);

			if (batch_send(b) != 0)
				batch_fail(b);
		}
	}
	link_hold_writes(&n->link, 0);
	link_write_now(&n->link);
}

/* Send the queued calls that may go, at the end of this turn (flush_cb):
 * a place in flight freed up, a call about their keys was answered, or
 * (batching) a call was made. */
static void
queue_run(struct node *n)
{
	if (n->qhead != NULL && n->inflight < STORE_MAX_INFLIGHT &&
	    node_usable(n))
		event_active(n->flush_ev, EV_TIMEOUT, 0);
}

/* Answer every queued call of n "unavailable" (its link is gone). */
static void
queue_fail(struct node *n)
{
	struct cmd *c;

	while ((c = n->qhead) != NULL) {
		n->qhead = c->qnext;
		if (n->qhead == NULL)
			n->qtail = NULL;
		n->queued--;
		cmd_fail(c);
	}
}

int
node_call(struct node *n, struct cmd *c)
{
	group_left(c);		/* sent again: it joins its new turn's */
	c->node = n;
	if (n->env->batching && node_usable(n)) {
		queue_add(n, c);
		queue_run(n);
		return 0;
	}
	if (node_usable(n) && n->inflight < STORE_MAX_INFLIGHT &&
	    n->qhead == NULL && deps_idle(n, c))
		return cmd_send(c);
	if (node_usable(n)) {
		queue_add(n, c);
		queue_run(n);
		return 0;
	}
	if (n->env->wait_link && !n->env->link.closing && !n->link.dying &&
	    n->link.state != LINK_UP) {
		queue_add(n, c);
		link_retry_now(&n->link);	/* one waiting out a backoff */
		return 0;
	}
	if (node_coming(n)) {
		queue_add(n, c);	/* sent by node_up, failed by node_down */
		return 0;
	}
	return -1;
}

void
node_up(struct node *n)
{
	if (strcmp(n->rtt_addr, n->link.addrstr) != 0 ||
	    strcmp(n->rtt_ip, n->link.ip) != 0) {
		/* another Redis now (at another address, or its name now
		 * names another): its round trips are not the last one's */
		histo_reset(&n->rtt);
		memcpy(n->rtt_addr, n->link.addrstr, sizeof n->rtt_addr);
		memcpy(n->rtt_ip, n->link.ip, sizeof n->rtt_ip);
	}
	n->last_progress_ms = now_ms();
	if (n->env->up != NULL)
		n->env->up(n->env->up_arg, n);
	queue_run(n);		/* redirected here meanwhile */
}

void
node_down(struct node *n)
{
	queue_fail(n);
}

/* --- the command link's handshake and checks ---------------------------- */

/* INFO replication: only a master is used; its replication id names the
 * tenure (tenure.lua, lib/slot_tenure.lua). */
static void
info_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct node *n = privdata;
	redisReply *r = reply;
	char role[32], why[80], was[64];

	if (!link_current(&n->link, ac) || r == NULL)
		return;
	if (r->type != REDIS_REPLY_STRING) {
		link_refuse(&n->link, r->type == REDIS_REPLY_ERROR ? r->str :
		    "unexpected reply to INFO");
		return;
	}
	resp_info_field(r->str, "role", role, sizeof role);
	if (strcmp(role, "master") != 0) {
		snprintf(why, sizeof why, "not a master (role:%s)", role);
		link_refuse(&n->link, why);
		return;
	}
	memcpy(was, n->replid, sizeof was);
	resp_info_field(r->str, "master_replid", n->replid, sizeof n->replid);
	resp_info_field(r->str, "master_replid2", n->replid2,
	    sizeof n->replid2);
	if (strcmp(was, n->replid) != 0) {
		memcpy(n->prev_replid, was, sizeof was);
		n->tenure_ms = now_ms();
	}
	n->on_info(n, strcmp(was, n->replid) != 0);
}

void
node_hello(struct node *n, void (*on_info)(struct node *n, int changed))
{
	n->on_info = on_info;
	n->announced = 0;	/* lean batches wait for the announce here */
	n->clock_made_ms = 0;	/* and remote grants for its clock sample:
				 * a new connection may be to a new master */
	fnlib_hello(n);
	/* then: is it the master, and of which tenure? */
	link_sendf(&n->link, info_reply, n, "INFO replication");
	link_expect(&n->link);
}

static void
role_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct node *n = privdata;
	redisReply *r = reply;

	if (r == NULL || !link_current(&n->link, ac) ||
	    n->link.state != LINK_UP)
		return;
	if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, "master") != 0)
		link_kill(&n->link, "Redis is no longer a master (ROLE)");
}

void
node_check_role(struct node *n)
{
	if (n->link.state == LINK_UP && n->link.ac != NULL &&
	    link_sendf(&n->link, role_reply, n, "ROLE") != 0)
		log_debug("ROLE not sent");
}

void
node_watch(struct node *n, long timeout_ms)
{
	if (n->link.state == LINK_UP && n->inflight > 0 &&
	    now_ms() - n->last_progress_ms > timeout_ms)
		link_kill(&n->link, "Redis stopped answering");
	/* calls waiting for a link being made are failed by its connect
	 * timeout (cluster mode: also calls redirected to a master that
	 * does not come up); this is the net under that, at the request's
	 * redis_timeout_ms (a redirection's: twice) */
	if (n->link.state != LINK_UP && n->qhead != NULL &&
	    now_ms() - n->qhead->born_ms > (n->env->wait_link ? 2 : 1) *
	    timeout_ms)
		queue_fail(n);
}

void
node_stalled(struct node *n, int64_t now)
{
	n->last_progress_ms = now;
}

/* --- the node ---------------------------------------------------------- */

struct node *
node_new(struct node_env *env, const char *host, int port, int is_unix,
    const struct link_ops *ops, void *owner)
{
	struct node *n = xcalloc(1, sizeof *n);

	n->env = env;
	n->owner = owner;
	n->host = xstrndup(host, strlen(host));
	n->port = port;
	n->is_unix = is_unix;
	link_init(&n->link, &env->link, "command", ops, n, 0);
	if (is_unix)
		snprintf(n->link.addrstr, sizeof n->link.addrstr, "unix:%s",
		    host);
	else
		snprintf(n->link.addrstr, sizeof n->link.addrstr,
		    strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
	n->deps = xcalloc(DEP_BUCKETS, sizeof *n->deps);
	n->marks = xcalloc(MARK_ROWS, MARK_BYTES);
	n->ack_ev = event_new(env->link.base, -1, 0, ack_cb, n);
	n->flush_ev = event_new(env->link.base, -1, 0, flush_cb, n);
	if (n->ack_ev == NULL || n->flush_ev == NULL)
		fatalx("cannot create Redis timers");
	return n;
}

void
node_free(struct node *n)
{
	if (n->agroup != NULL) {
		/* its WAIT will never be sent; members fail below */
		group_unref(n->agroup);
		n->agroup = NULL;
	}
	n->link.state = LINK_DOWN;	/* callbacks below may not queue more */
	queue_fail(n);
	link_close(&n->link);
	queue_fail(n);		/* anything a callback queued after all */
	if (n->ack_ev)
		event_free(n->ack_ev);
	if (n->flush_ev)
		event_free(n->flush_ev);
	free(n->deps);
	free(n->marks);
	free(n->host);
	free(n);
}
