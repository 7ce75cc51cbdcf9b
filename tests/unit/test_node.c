/*
 * test_node.c - one master's script calls (daemon/store/node.c) over a
 * fake link (fake_link.c): what leaves when, packed how, and who hears
 * what comes back.
 *
 * The end-of-turn batch (at most STORE_BATCH_MAX calls a batch, a call
 * alone as its own EVALSHA, one write for the turn), the in-flight cap
 * (STORE_MAX_INFLIGHT, the rest queued and sent as answers free places),
 * replica acknowledgement as a group commit (one WAIT per turn; a WAIT
 * that falls short undoes its grants), NOSCRIPT answered by one EVAL, the
 * function library (loaded by the handshake, FCALL; EVALSHA without it;
 * reloaded once per loss, the calls that found it gone sent as EVAL), the
 * lean exclusive batch (acquires and releases of a turn in one call, no
 * key twice, releases again as batch_free on OOM), and a lost link
 * failing what was queued and in flight.  Replies are
 * hand-built redisReply trees.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "fake_link.h"
#include "log.h"
#include "node.h"
#include "suites.h"

/* --- a node and its calls ----------------------------------------------- */

static struct event_base *base;
static struct node_env env;

/* What each call heard, in the order it heard it. */
#define HEARD_MAX 1024
static struct heard {
	int id;
	int answered;			/* 0 none (NULL), 1 a reply */
	int type;
	long long integer;
	int can_park;
	int acked;			/* the WAIT's verdict: 1, 0, -1 */
} heard[HEARD_MAX];
static size_t nheard;

struct tcall {
	struct cmd cmd;
	int id;
	int park;			/* ask to be parked when it may */
	int keep;			/* an error answer: kept, as calls.c
					 * keeps a call it follows (cluster) */
};

static int
t_reply(struct cmd *c, const redisReply *r, int can_park)
{
	struct tcall *t = (struct tcall *)c;
	struct heard *h = &heard[nheard++];

	ck_assert_uint_lt(nheard, HEARD_MAX);
	*h = (struct heard){ .id = t->id, .answered = r != NULL,
	    .type = r != NULL ? r->type : 0,
	    .integer = r != NULL ? r->integer : 0, .can_park = can_park,
	    .acked = -9 };
	if (t->park && can_park && r != NULL)
		return CMD_PARK;
	if (t->keep && r != NULL && r->type == REDIS_REPLY_ERROR)
		return CMD_DONE;	/* the test sends it again, or not */
	free(t);
	return CMD_DONE;
}

/* A parked grant's WAIT answered: too few replicas "undoes" it here
 * (node.c counts it, as calls.c's undo would have gone out). */
static int
t_acked(struct cmd *c, int ok)
{
	struct tcall *t = (struct tcall *)c;
	struct heard *h = &heard[nheard++];

	*h = (struct heard){ .id = t->id, .answered = 1, .acked = ok };
	free(t);
	return ok == 0;
}

/* A call of script about key lbt:lock:<key>, with one argument. */
static struct tcall *
t_call_on(int id, enum script_id script, const char *key, const char *arg)
{
	struct piece p[2] = {
		{ "lbt:lock:", 9, key, strlen(key) },
		{ arg, strlen(arg), NULL, 0 },
	};
	struct tcall *t = (struct tcall *)cmd_new(sizeof *t, script, 1, p, 2);

	t->cmd.reply = t_reply;
	t->id = id;
	return t;
}

/* The same about a key of its own, k<id>. */
static struct tcall *
t_call(int id, enum script_id script, const char *arg)
{
	char key[24];

	snprintf(key, sizeof key, "k%d", id);
	return t_call_on(id, script, key, arg);
}

static void
t_locate(void *owner, struct link *l)
{
	struct node *n = owner;

	link_connect(l, n->host, n->port, n->is_unix);
}

static void
t_up(void *owner, struct link *l)
{
	(void)l;
	node_up(owner);
}

static void
t_down(void *owner, struct link *l, int was_up)
{
	(void)l;
	(void)was_up;
	node_down(owner);
}

static const struct link_ops t_ops = {
	.locate = t_locate, .up = t_up, .down = t_down,
};

/* A node whose link is up; batching or not. */
static struct node *
up_node(int batching, long acks)
{
	struct node *n;

	log_set_level(LL_ERROR);
	fake_link_reset();
	nheard = 0;
	base = event_base_new();
	env = (struct node_env){
		.link = { .base = base, .password = "", .user = "",
		    .label = "test", .timeout_ms = 1000 },
		.acks = acks, .ack_timeout_ms = 100, .batching = batching,
		.wait_link = !batching,
	};
	n = node_new(&env, "127.0.0.1", 6379, 0, &t_ops, NULL);
	link_start(&n->link);
	fake_link_up(&n->link);
	return n;
}

static void
done(struct node *n)
{
	node_free(n);
	fake_link_reset();
	event_base_free(base);
}

/* The end of this loop turn: what was made active runs. */
static void
turn(void)
{
	event_base_loop(base, EVLOOP_NONBLOCK);
}

/* --- batches ------------------------------------------------------------ */

/* The calls of a turn leave at its end, cut at STORE_BATCH_MAX, in
 * order, written once; each call hears its own element. */
START_TEST(test_batches_of_a_turn)
{
	struct node *n = up_node(1, 0);
	size_t want[] = { STORE_BATCH_MAX, STORE_BATCH_MAX, 22 };
	size_t total = 2 * STORE_BATCH_MAX + 22, id = 0;
	char key[32];

	for (size_t i = 0; i < total; i++)
		ck_assert_int_eq(node_call(n, &t_call((int)i, SCRIPT_RELEASE,
		    "a")->cmd), 0);
	ck_assert_uint_eq(fake_sent_count(), 0);	/* not before the end */
	ck_assert_uint_eq(n->queued, total);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 3);
	ck_assert_int_eq(fake_writes, 1);
	ck_assert_uint_eq(n->inflight, total);
	ck_assert_uint_eq(n->queued, 0);
	for (size_t b = 0; b < 3; b++) {
		struct fake_sent *s = fake_sent_pop();
		redisReply *r;

		/* EVALSHA batch <nkeys> <keys> then per call: name, 1, 1,
		 * its argument */
		ck_assert_str_eq(s->argv[0], "EVALSHA");
		ck_assert_str_eq(s->argv[1], "sha-batch");
		ck_assert_int_eq(atoi(s->argv[2]), (int)want[b]);
		ck_assert_int_eq(s->argc, 3 + (int)want[b] * 5);
		snprintf(key, sizeof key, "lbt:lock:k%zu", id);
		ck_assert_str_eq(s->argv[3], key);
		ck_assert_str_eq(s->argv[3 + want[b]], "release");
		r = reply_ints(want[b]);
		fake_reply(s, r);
		reply_free(r);
		ck_assert_uint_eq(nheard, id + want[b]);
		for (size_t i = 0; i < want[b]; i++, id++) {
			ck_assert_int_eq(heard[id].id, (int)id);
			ck_assert_int_eq(heard[id].integer, (long long)i);
		}
	}
	ck_assert_uint_eq(n->inflight, 0);
	done(n);
}
END_TEST

/* A call alone goes as its own script's EVALSHA. */
START_TEST(test_alone_goes_as_itself)
{
	struct node *n = up_node(1, 0);
	struct fake_sent *s;
	redisReply *r;

	ck_assert_int_eq(node_call(n, &t_call(7, SCRIPT_OWNER, "x")->cmd), 0);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);
	s = fake_sent_pop();
	ck_assert_str_eq(s->text, "EVALSHA sha-owner 1 lbt:lock:k7 x");
	r = reply_int(42);
	fake_reply(s, r);
	reply_free(r);
	ck_assert_uint_eq(nheard, 1);
	ck_assert_int_eq(heard[0].integer, 42);
	done(n);
}
END_TEST

/* A batch is bounded by bytes too: a big call goes alone. */
START_TEST(test_batch_bytes_bound)
{
	struct node *n = up_node(1, 0);
	char *big = malloc(STORE_BATCH_BYTES);

	memset(big, 'x', STORE_BATCH_BYTES - 1);
	big[STORE_BATCH_BYTES - 1] = '\0';
	node_call(n, &t_call(1, SCRIPT_SESSION, "a")->cmd);
	node_call(n, &t_call(2, SCRIPT_SESSION, big)->cmd);
	node_call(n, &t_call(3, SCRIPT_SESSION, "b")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 3);	/* none could pair */
	free(big);
	done(n);
}
END_TEST

/* --- round trips ------------------------------------------------------- */

/* Answer the oldest command sent with the integer 1 (or, for a batch,
 * one integer per call). */
static void
answer_oldest(void)
{
	struct fake_sent *s = fake_sent_pop();
	redisReply *r = strcmp(s->argv[1], "sha-batch") == 0 ?
	    reply_ints((size_t)atoi(s->argv[2])) : reply_int(1);

	fake_reply(s, r);
	reply_free(r);
}

/*
 * The round-trip histogram (lockbroker_redis_rtt_seconds): one sample per
 * command on the wire, a batch being one, timed from its write to its
 * answer; none for a call that got no answer; from 0 again when the link
 * comes up at another address, not when it comes back at the same one.
 */
START_TEST(test_rtt_one_sample_per_round_trip)
{
	struct node *n = up_node(1, 0);

	for (int i = 0; i < 3; i++)
		node_call(n, &t_call(i, SCRIPT_RELEASE, "a")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);	/* one batch */
	usleep(3000);
	answer_oldest();
	ck_assert_uint_eq(nheard, 3);
	ck_assert_uint_eq(n->rtt.n, 1);
	ck_assert_int_ge(n->rtt.sum_us, 3000);
	node_call(n, &t_call(3, SCRIPT_OWNER, "x")->cmd);
	turn();
	answer_oldest();
	ck_assert_uint_eq(n->rtt.n, 2);
	node_call(n, &t_call(4, SCRIPT_OWNER, "x")->cmd);
	turn();
	fake_reply(fake_sent_pop(), NULL);		/* no answer */
	ck_assert_uint_eq(n->rtt.n, 2);
	node_up(n);					/* back, same address */
	ck_assert_uint_eq(n->rtt.n, 2);
	snprintf(n->link.addrstr, sizeof n->link.addrstr, "127.0.0.2:6379");
	node_up(n);					/* another Redis */
	ck_assert_uint_eq(n->rtt.n, 0);
	ck_assert_str_eq(n->rtt_addr, "127.0.0.2:6379");
	done(n);
}
END_TEST

/* Without batching (cluster mode) every call is its own round trip. */
START_TEST(test_rtt_unbatched_calls)
{
	struct node *n = up_node(0, 0);

	node_call(n, &t_call(1, SCRIPT_OWNER, "x")->cmd);
	node_call(n, &t_call(2, SCRIPT_OWNER, "y")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 2);
	answer_oldest();
	answer_oldest();
	ck_assert_uint_eq(nheard, 2);
	ck_assert_uint_eq(n->rtt.n, 2);
	done(n);
}
END_TEST

/* --- the in-flight cap -------------------------------------------------- */

/* At most STORE_MAX_INFLIGHT on the wire; each answer lets one more go,
 * in the order they were made. */
START_TEST(test_inflight_cap)
{
	struct node *n = up_node(0, 0);
	size_t extra = 44, total = STORE_MAX_INFLIGHT + extra;
	struct fake_sent *s;
	redisReply *r = reply_int(1);

	for (size_t i = 0; i < total; i++)
		ck_assert_int_eq(node_call(n, &t_call((int)i, SCRIPT_RELEASE,
		    "a")->cmd), 0);
	ck_assert_uint_eq(fake_sent_count(), STORE_MAX_INFLIGHT);
	ck_assert_uint_eq(n->inflight, STORE_MAX_INFLIGHT);
	ck_assert_uint_eq(n->queued, extra);
	fake_reply(fake_sent_pop(), r);
	turn();			/* the queue runs at the end of the turn */
	ck_assert_uint_eq(n->inflight, STORE_MAX_INFLIGHT);
	ck_assert_uint_eq(n->queued, extra - 1);
	ck_assert_uint_eq(fake_sent_count(), STORE_MAX_INFLIGHT);
	s = fake_sent_peek(STORE_MAX_INFLIGHT - 1);
	ck_assert_int_eq(((struct tcall *)s->priv)->id, STORE_MAX_INFLIGHT);
	while ((s = fake_sent_pop()) != NULL) {
		ck_assert_uint_le(n->inflight, STORE_MAX_INFLIGHT);
		fake_reply(s, r);
		turn();
	}
	reply_free(r);
	ck_assert_uint_eq(nheard, total);
	for (size_t i = 0; i < total; i++)
		ck_assert_int_eq(heard[i].id, (int)i);
	ck_assert_uint_eq(n->inflight, 0);
	done(n);
}
END_TEST

/* Batching: a turn's batch takes only the places left in flight. */
START_TEST(test_inflight_cap_batching)
{
	struct node *n = up_node(1, 0);
	struct fake_sent *s;
	size_t before;

	for (size_t i = 0; i < STORE_MAX_INFLIGHT - 6; i++)
		node_call(n, &t_call((int)i, SCRIPT_RELEASE, "a")->cmd);
	turn();
	ck_assert_uint_eq(n->inflight, STORE_MAX_INFLIGHT - 6);
	before = fake_sent_count();	/* in flight, unanswered */
	for (size_t i = 0; i < 20; i++)
		node_call(n, &t_call(1000 + (int)i, SCRIPT_RELEASE, "a")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), before + 1);
	s = fake_sent_peek(before);
	ck_assert_int_eq(atoi(s->argv[2]), 6);
	ck_assert_uint_eq(n->inflight, STORE_MAX_INFLIGHT);
	ck_assert_uint_eq(n->queued, 14);
	done(n);
}
END_TEST

/* --- replica acknowledgement -------------------------------------------- */

/* Grants of one turn: one WAIT for them all, sent at the turn's end. */
static struct node *
two_grants_parked(long acks)
{
	struct node *n = up_node(0, acks);
	struct fake_sent *s;
	redisReply *r = reply_int(1);

	for (int i = 0; i < 2; i++) {
		struct tcall *t = t_call(i, SCRIPT_ACQUIRE, "owner");

		t->cmd.acked = t_acked;
		t->park = 1;
		node_call(n, &t->cmd);
	}
	ck_assert_uint_eq(fake_sent_count(), 2);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 3);
	for (int i = 0; i < 2; i++) {
		s = fake_sent_pop();
		fake_reply(s, r);
		ck_assert_int_eq(heard[i].can_park, 1);
	}
	reply_free(r);
	ck_assert_uint_eq(nheard, 2);	/* parked: no verdict yet */
	return n;
}

START_TEST(test_wait_short_undoes)
{
	struct node *n = two_grants_parked(2);
	struct fake_sent *w = fake_sent_pop();
	redisReply *r = reply_int(1);	/* one replica of the two */

	ck_assert_str_eq(w->text, "WAIT 2 100");
	fake_reply(w, r);
	reply_free(r);
	ck_assert_uint_eq(nheard, 4);
	ck_assert_int_eq(heard[2].acked, 0);
	ck_assert_int_eq(heard[3].acked, 0);
	ck_assert_uint_eq(env.acks_missed, 2);
	ck_assert_uint_eq(n->inflight, 0);
	done(n);
}
END_TEST

START_TEST(test_wait_enough_grants)
{
	struct node *n = two_grants_parked(2);
	redisReply *r = reply_int(2);

	fake_reply(fake_sent_pop(), r);
	reply_free(r);
	ck_assert_uint_eq(nheard, 4);
	ck_assert_int_eq(heard[2].acked, 1);
	ck_assert_int_eq(heard[3].acked, 1);
	ck_assert_uint_eq(env.acks_missed, 0);
	done(n);
}
END_TEST

/* No answer to the WAIT: the grants are unknown, not undone. */
START_TEST(test_wait_lost)
{
	struct node *n = two_grants_parked(1);

	fake_reply(fake_sent_pop(), NULL);
	ck_assert_uint_eq(nheard, 4);
	ck_assert_int_eq(heard[2].acked, -1);
	ck_assert_int_eq(heard[3].acked, -1);
	ck_assert_uint_eq(env.acks_missed, 0);
	ck_assert(!node_usable(n));	/* hiredis is failing it */
	done(n);
}
END_TEST

/* Without replica acks a grant is never parked, and no WAIT goes. */
START_TEST(test_no_acks_no_wait)
{
	struct node *n = up_node(0, 0);
	struct tcall *t = t_call(1, SCRIPT_ACQUIRE, "owner");
	redisReply *r = reply_int(1);

	t->cmd.acked = t_acked;
	t->park = 1;
	node_call(n, &t->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);
	fake_reply(fake_sent_pop(), r);
	reply_free(r);
	ck_assert_int_eq(heard[0].can_park, 0);
	done(n);
}
END_TEST

/* --- answers ------------------------------------------------------------ */

/* NOSCRIPT: sent once more as EVAL with the text; a second NOSCRIPT is
 * the call's answer. */
START_TEST(test_noscript_resends_as_eval)
{
	struct node *n = up_node(0, 0);
	redisReply *e = reply_err("NOSCRIPT No matching script. Please use EVAL.");
	struct fake_sent *s;

	node_call(n, &t_call(5, SCRIPT_RENEW, "a")->cmd);
	fake_reply(fake_sent_pop(), e);
	ck_assert_uint_eq(nheard, 0);
	s = fake_sent_pop();
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s->text, "EVAL -- renew 1 lbt:lock:k5 a");
	fake_reply(s, e);
	ck_assert_uint_eq(nheard, 1);
	ck_assert_int_eq(heard[0].type, REDIS_REPLY_ERROR);
	reply_free(e);
	done(n);
}
END_TEST

/* --- the function library ------------------------------------------------ */

static int infos;

static void
t_info(struct node *n, int changed)
{
	(void)changed;
	infos++;
	link_hello_done(&n->link);
}

/* A node whose handshake is under way: FUNCTION LOAD and INFO sent. */
static struct node *
hello_node(void)
{
	struct node *n = up_node(0, 0);

	n->link.state = LINK_HANDSHAKE;
	n->link.hello_left = 0;
	infos = 0;
	node_hello(n, t_info);
	ck_assert_uint_eq(fake_sent_count(), 2);
	ck_assert_str_eq(fake_sent_peek(0)->text,
	    "FUNCTION LOAD #!lua name=lockbroker_fake\n-- fake");
	ck_assert_str_eq(fake_sent_peek(1)->text, "INFO replication");
	return n;
}

static void
answer_info(void)
{
	redisReply *r = reply_str("# Replication\r\nrole:master\r\n"
	    "master_replid:abc\r\n");

	fake_reply(fake_sent_pop(), r);
	reply_free(r);
}

/* The library loaded (or there already): calls go as FCALL of their
 * function, a batch as FCALL of the batch function. */
START_TEST(test_library_loaded_calls_as_fcall)
{
	for (int there = 0; there < 2; there++) {
		struct node *n = hello_node();
		redisReply *r = there ? reply_err("ERR Library "
		    "'lockbroker_fake' already exists") :
		    reply_str("lockbroker_fake");
		const char *call, *name;
		struct fake_sent *s;

		fake_reply(fake_sent_pop(), r);
		reply_free(r);
		answer_info();
		ck_assert_int_eq(infos, 1);
		ck_assert_int_eq(n->fn, 1);
		ck_assert_int_eq(n->link.state, LINK_UP);
		ck_assert_uint_eq(fake_sent_count(), 0);   /* nothing else */
		node_script(n, SCRIPT_TENURE, &call, &name);
		ck_assert_str_eq(call, "FCALL");
		ck_assert_str_eq(name, "fn-tenure");
		node_call(n, &t_call(1, SCRIPT_OWNER, "x")->cmd);
		s = fake_sent_pop();
		ck_assert_str_eq(s->text, "FCALL fn-owner 1 lbt:lock:k1 x");
		r = reply_int(1);
		fake_reply(s, r);
		reply_free(r);
		env.batching = 1;
		node_call(n, &t_call(2, SCRIPT_RENEW, "x")->cmd);
		node_call(n, &t_call(3, SCRIPT_RENEW, "y")->cmd);
		turn();
		s = fake_sent_pop();
		ck_assert_str_eq(s->argv[0], "FCALL");
		ck_assert_str_eq(s->argv[1], "fn-batch");
		r = reply_ints(2);
		fake_reply(s, r);
		reply_free(r);
		ck_assert_uint_eq(nheard, 3);
		done(n);
	}
}
END_TEST

/* No FUNCTION command (Redis < 7), or no right to it: every script by
 * SCRIPT LOAD in the handshake, calls as EVALSHA.  Any other error
 * refuses the handshake. */
START_TEST(test_no_functions_scripts_by_evalsha)
{
	const char *errs[] = {
		"ERR unknown command 'FUNCTION', with args beginning with: "
		    "'LOAD'",
		"NOPERM this user has no permissions to run the 'function|load' "
		    "command",
		"NOAUTH Authentication required.",
	};

	for (int i = 0; i < 3; i++) {
		struct node *n = hello_node();
		redisReply *r = reply_err(errs[i]);
		const char *call, *name;
		struct fake_sent *s;

		fake_reply(fake_sent_pop(), r);
		reply_free(r);
		ck_assert_int_eq(n->fn, 0);
		if (i == 2) {
			ck_assert(n->link.refused);
			ck_assert_uint_eq(fake_sent_count(), 1);  /* INFO */
			done(n);
			continue;
		}
		ck_assert_int_eq(n->link.refused, 0);
		/* INFO, then a SCRIPT LOAD per script */
		ck_assert_uint_eq(fake_sent_count(), 1 + SCRIPT__COUNT);
		ck_assert_str_eq(fake_sent_peek(1)->text,
		    "SCRIPT LOAD -- acquire");
		answer_info();
		node_script(n, SCRIPT_TENURE, &call, &name);
		ck_assert_str_eq(call, "EVALSHA");
		ck_assert_str_eq(name, "sha-tenure");
		while ((s = fake_sent_pop()) != NULL)
			fake_sent_free(s);	/* the SCRIPT LOADs */
		fake_link_up(&n->link);
		node_call(n, &t_call(1, SCRIPT_OWNER, "x")->cmd);
		s = fake_sent_pop();
		ck_assert_str_eq(s->text, "EVALSHA sha-owner 1 lbt:lock:k1 x");
		r = reply_int(1);
		fake_reply(s, r);
		reply_free(r);
		done(n);
	}
}
END_TEST

/* "Function not found" (FUNCTION FLUSH, a restart...): the library is
 * loaded again once per loss, not once per call that found it gone, and
 * each such call goes once more as EVAL of its text; a batch as EVAL of
 * the batch script. */
START_TEST(test_function_not_found_reloads_once)
{
	struct node *n = up_node(0, 0);
	redisReply *e = reply_err("ERR Function not found");
	struct fake_sent *s;

	n->fn = 1;
	for (int i = 0; i < 3; i++)
		node_call(n, &t_call(i, SCRIPT_RENEW, "a")->cmd);
	ck_assert_uint_eq(fake_sent_count(), 3);
	fake_reply(fake_sent_pop(), e);		/* the first: a reload */
	ck_assert_uint_eq(fake_sent_count(), 4);
	ck_assert_str_eq(fake_sent_peek(2)->text,
	    "FUNCTION LOAD #!lua name=lockbroker_fake\n-- fake");
	ck_assert_str_eq(fake_sent_peek(3)->text,
	    "EVAL -- renew 1 lbt:lock:k0 a");
	fake_reply(fake_sent_pop(), e);		/* sent before it: no reload */
	fake_reply(fake_sent_pop(), e);
	ck_assert_uint_eq(fake_sent_count(), 4);   /* LOAD, 3 EVALs */
	s = fake_sent_pop();
	{
		redisReply *ok = reply_str("lockbroker_fake");

		fake_reply(s, ok);
		reply_free(ok);
	}
	ck_assert_int_eq(n->fn, 1);
	for (int i = 0; i < 3; i++) {
		char want[64];

		snprintf(want, sizeof want, "EVAL -- renew 1 lbt:lock:k%d a", i);
		s = fake_sent_pop();
		ck_assert_str_eq(s->text, want);
		fake_reply(s, e);	/* a second miss is the answer */
	}
	ck_assert_uint_eq(nheard, 3);
	ck_assert_int_eq(heard[0].type, REDIS_REPLY_ERROR);
	/* a call sent after the reload that finds it gone: a new loss */
	node_call(n, &t_call(9, SCRIPT_RENEW, "a")->cmd);
	fake_reply(fake_sent_pop(), e);
	s = fake_sent_pop();
	ck_assert_str_eq(s->text,
	    "FUNCTION LOAD #!lua name=lockbroker_fake\n-- fake");
	fake_sent_free(s);
	/* the batch */
	env.batching = 1;
	node_call(n, &t_call(10, SCRIPT_RENEW, "a")->cmd);
	node_call(n, &t_call(11, SCRIPT_RENEW, "b")->cmd);
	turn();
	s = fake_sent_peek(1);
	ck_assert_str_eq(s->argv[0], "FCALL");
	ck_assert_str_eq(s->argv[1], "fn-batch");
	fake_reply(fake_sent_pop(), e);		/* the single call's EVAL */
	fake_reply(fake_sent_pop(), e);		/* the batch */
	s = fake_sent_pop();
	ck_assert_str_eq(s->text, "FUNCTION LOAD #!lua name=lockbroker_fake"
	    "\n-- fake");
	fake_sent_free(s);
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[0], "EVAL");
	ck_assert_str_eq(s->argv[1], "-- batch");
	{
		redisReply *r = reply_ints(2);

		fake_reply(s, r);
		reply_free(r);
	}
	ck_assert_uint_eq(nheard, 6);
	reply_free(e);
	done(n);
}
END_TEST

/* --- order ---------------------------------------------------------------- */

/* Answer s with the integer v; a batch s with the integers 0..n-1. */
static void
answer_int(struct fake_sent *s, long long v)
{
	redisReply *r = reply_int(v);

	fake_reply(s, r);
	reply_free(r);
}

static void
answer_ints(struct fake_sent *s, size_t n)
{
	redisReply *r = reply_ints(n);

	fake_reply(s, r);
	reply_free(r);
}

/* A call about a key waits for the calls about it sent before: for the
 * last answer of one Redis refused at first ("Function not found") and
 * got again, not only for its first; calls about other keys go on. */
START_TEST(test_one_key_waits_for_a_resend)
{
	struct node *n = up_node(0, 0);
	redisReply *e = reply_err("ERR Function not found");
	struct fake_sent *s;

	n->fn = 1;
	node_call(n, &t_call_on(1, SCRIPT_PASS, "k", "a")->cmd);
	node_call(n, &t_call_on(2, SCRIPT_RENEW, "j", "b")->cmd);
	node_call(n, &t_call_on(3, SCRIPT_RENEW, "k", "c")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 2);	/* 1 and 2 */
	ck_assert_uint_eq(n->queued, 1);
	ck_assert_str_eq(fake_sent_peek(0)->text, "FCALL fn-pass 1 lbt:lock:k a");
	ck_assert_str_eq(fake_sent_peek(1)->text,
	    "FCALL fn-renew 1 lbt:lock:j b");
	fake_reply(fake_sent_pop(), e);		/* 1: not found */
	turn();
	/* 2, then the reload and 1 again; 3 still waits */
	ck_assert_uint_eq(fake_sent_count(), 3);
	ck_assert_str_eq(fake_sent_peek(2)->text, "EVAL -- pass 1 lbt:lock:k a");
	ck_assert_uint_eq(n->queued, 1);
	answer_int(fake_sent_pop(), 1);		/* 2 */
	turn();
	ck_assert_uint_eq(n->queued, 1);
	s = fake_sent_pop();			/* the reload */
	{
		redisReply *ok = reply_str("lockbroker_fake");

		fake_reply(s, ok);
		reply_free(ok);
	}
	answer_int(fake_sent_pop(), 1);		/* 1, as EVAL */
	ck_assert_uint_eq(nheard, 2);
	ck_assert_int_eq(heard[0].id, 2);
	ck_assert_int_eq(heard[1].id, 1);
	ck_assert_uint_eq(fake_sent_count(), 0);
	turn();
	ck_assert_uint_eq(n->queued, 0);
	s = fake_sent_pop();
	ck_assert_str_eq(s->text, "FCALL fn-renew 1 lbt:lock:k c");
	answer_int(s, 1);
	ck_assert_int_eq(heard[2].id, 3);
	reply_free(e);
	done(n);
}
END_TEST

/* A Redis Cluster's refusal (TRYAGAIN: the slot migrates and some of the
 * call's keys are on the other side) is not the call's last answer: the
 * calls about its key behind it wait until it is sent again and answered,
 * and it goes ahead of them; calls about other keys go on.  One given up
 * (node_cmd_done) lets them go too. */
START_TEST(test_one_key_waits_for_a_cluster_retry)
{
	struct node *n = up_node(0, 0);
	redisReply *e = reply_err("TRYAGAIN Multiple keys request during "
	    "rehashing of slot");
	struct tcall *pass = t_call_on(1, SCRIPT_PASS, "k", "a");
	struct tcall *gone = t_call_on(5, SCRIPT_PASS, "m", "e");
	struct fake_sent *s;

	n->fn = 1;
	pass->keep = gone->keep = 1;
	node_call(n, &pass->cmd);
	node_call(n, &gone->cmd);
	turn();
	fake_reply(fake_sent_pop(), e);		/* 1 refused */
	fake_reply(fake_sent_pop(), e);		/* 5 refused */
	ck_assert_uint_eq(nheard, 2);
	node_call(n, &t_call_on(2, SCRIPT_RELEASE, "k", "b")->cmd);
	node_call(n, &t_call_on(3, SCRIPT_RENEW, "j", "c")->cmd);
	node_call(n, &t_call_on(4, SCRIPT_RELEASE, "m", "d")->cmd);
	turn();
	/* only 3: the releases of k and m wait */
	ck_assert_uint_eq(fake_sent_count(), 1);
	ck_assert_str_eq(fake_sent_peek(0)->text,
	    "FCALL fn-renew 1 lbt:lock:j c");
	answer_int(fake_sent_pop(), 1);
	node_call(n, &pass->cmd);		/* the retry, ahead of 2 */
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);
	ck_assert_str_eq(fake_sent_peek(0)->text, "FCALL fn-pass 1 lbt:lock:k a");
	pass->keep = 0;
	answer_int(fake_sent_pop(), 1);
	turn();
	s = fake_sent_pop();
	ck_assert_str_eq(s->text, "FCALL fn-release 1 lbt:lock:k b");
	answer_int(s, 1);
	ck_assert_uint_eq(fake_sent_count(), 0);	/* 4 still waits */
	node_cmd_done(&gone->cmd);		/* 5 given up */
	free(gone);
	turn();
	s = fake_sent_pop();
	ck_assert_str_eq(s->text, "FCALL fn-release 1 lbt:lock:m d");
	answer_int(s, 1);
	ck_assert_int_eq(heard[nheard - 1].id, 4);
	ck_assert_uint_eq(n->queued, 0);
	reply_free(e);
	done(n);
}
END_TEST

/* Batching: calls about one key may share a batch (it runs them in
 * order and is sent again whole), never follow each other in two: a
 * batch's successor about one of its keys waits for its last answer,
 * and the calls about other keys of that turn go meanwhile. */
START_TEST(test_batch_about_one_key)
{
	struct node *n = up_node(1, 0);
	redisReply *e = reply_err("NOSCRIPT No matching script. Please use EVAL.");
	struct fake_sent *s;

	node_call(n, &t_call_on(1, SCRIPT_HANDOFF, "k", "a")->cmd);
	node_call(n, &t_call_on(2, SCRIPT_ACQUIRE, "k", "b")->cmd);
	node_call(n, &t_call_on(3, SCRIPT_ACQUIRE, "j", "c")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);
	ck_assert_int_eq(atoi(fake_sent_peek(0)->argv[2]), 3);	/* one */
	node_call(n, &t_call_on(4, SCRIPT_RENEW, "k", "d")->cmd);
	node_call(n, &t_call_on(5, SCRIPT_RENEW, "m", "e")->cmd);
	node_call(n, &t_call_on(6, SCRIPT_RENEW, "j", "f")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 2);	/* 5 alone */
	ck_assert_str_eq(fake_sent_peek(1)->text,
	    "EVALSHA sha-renew 1 lbt:lock:m e");
	ck_assert_uint_eq(n->queued, 2);
	fake_reply(fake_sent_pop(), e);		/* the batch: NOSCRIPT */
	turn();
	ck_assert_uint_eq(n->queued, 2);	/* 4 and 6 still wait */
	answer_int(fake_sent_pop(), 1);		/* 5 */
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[0], "EVAL");
	ck_assert_str_eq(s->argv[1], "-- batch");
	answer_ints(s, 3);
	ck_assert_uint_eq(nheard, 4);
	turn();
	ck_assert_uint_eq(n->queued, 0);	/* now 4 and 6, in order */
	s = fake_sent_pop();
	ck_assert_int_eq(atoi(s->argv[2]), 2);
	ck_assert_str_eq(s->argv[3], "lbt:lock:k");
	ck_assert_str_eq(s->argv[4], "lbt:lock:j");
	answer_ints(s, 2);
	ck_assert_uint_eq(nheard, 6);
	{
		const int order[] = { 5, 1, 2, 3, 4, 6 };

		for (int i = 0; i < 6; i++)
			ck_assert_int_eq(heard[i].id, order[i]);
	}
	reply_free(e);
	done(n);
}
END_TEST

/* A turn's calls about one key past a batch's bound: the rest wait for
 * the first batch's answer; a call about another key behind them goes. */
START_TEST(test_batch_bound_keeps_order)
{
	struct node *n = up_node(1, 0);

	for (int i = 0; i < STORE_BATCH_MAX + 2; i++)
		node_call(n, &t_call_on(i, SCRIPT_RELEASE, "k", "a")->cmd);
	node_call(n, &t_call_on(99, SCRIPT_RELEASE, "j", "a")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 2);
	ck_assert_int_eq(atoi(fake_sent_peek(0)->argv[2]), STORE_BATCH_MAX);
	ck_assert_str_eq(fake_sent_peek(1)->text,
	    "EVALSHA sha-release 1 lbt:lock:j a");
	ck_assert_uint_eq(n->queued, 2);
	answer_ints(fake_sent_pop(), STORE_BATCH_MAX);
	turn();
	ck_assert_uint_eq(n->queued, 0);
	ck_assert_int_eq(atoi(fake_sent_peek(1)->argv[2]), 2);
	done(n);
}
END_TEST

/* A call about several keys (a renewal of many holds: cmd.ndeps) waits
 * for the calls about any of them, and the calls behind it about any of
 * them wait for it. */
START_TEST(test_call_about_many_keys)
{
	struct node *n = up_node(0, 0);
	struct piece p[3] = {
		{ "lbt:lock:", 9, "a", 1 },
		{ "lbt:lock:", 9, "b", 1 },
		{ "x", 1, NULL, 0 },
	};
	struct tcall *t;

	node_call(n, &t_call_on(1, SCRIPT_RELEASE, "b", "x")->cmd);
	t = (struct tcall *)cmd_new(sizeof *t, SCRIPT_RENEW, 2, p, 3);
	t->cmd.reply = t_reply;
	t->cmd.ndeps = 2;
	t->id = 2;
	node_call(n, &t->cmd);
	node_call(n, &t_call_on(3, SCRIPT_RELEASE, "a", "x")->cmd);
	node_call(n, &t_call_on(4, SCRIPT_RELEASE, "c", "x")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 2);	/* 1 and 4 */
	ck_assert_str_eq(fake_sent_peek(1)->text,
	    "EVALSHA sha-release 1 lbt:lock:c x");
	answer_int(fake_sent_pop(), 1);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 2);	/* 4, then 2 */
	ck_assert_str_eq(fake_sent_peek(1)->text,
	    "EVALSHA sha-renew 2 lbt:lock:a lbt:lock:b x");
	ck_assert_uint_eq(n->queued, 1);		/* 3 after 2 */
	answer_int(fake_sent_pop(), 1);
	answer_int(fake_sent_pop(), 1);
	turn();
	ck_assert_uint_eq(n->queued, 0);
	answer_int(fake_sent_pop(), 1);
	ck_assert_uint_eq(nheard, 4);
	ck_assert_int_eq(heard[3].id, 3);
	done(n);
}
END_TEST

/* --- kinds of calls ---------------------------------------------------- */

/*
 * Under maxmemory Redis refuses a function that may write before it runs:
 * releases (release, forget) go in a batch of their own, whose function
 * runs under maxmemory (allow-oom), and reads (owner, check) in one of
 * theirs (no-writes); the rest in the plain batch.  Calls of two kinds
 * about one key are never in two batches of one turn: the later waits
 * for the earlier's answer.
 */
START_TEST(test_batches_by_kind)
{
	struct node *n = up_node(1, 0);
	const char *fns[3] = { "fn-batch", "fn-batch-free", "fn-batch-read" };
	const int calls[3] = { 2, 2, 2 };
	struct fake_sent *s;

	n->fn = 1;
	node_call(n, &t_call_on(1, SCRIPT_ACQUIRE, "a", "x")->cmd);
	node_call(n, &t_call_on(2, SCRIPT_RELEASE, "b", "x")->cmd);
	node_call(n, &t_call_on(3, SCRIPT_OWNER, "c", "x")->cmd);
	node_call(n, &t_call_on(4, SCRIPT_RENEW, "d", "x")->cmd);
	node_call(n, &t_call_on(5, SCRIPT_FORGET, "e", "x")->cmd);
	node_call(n, &t_call_on(6, SCRIPT_CHECK, "f", "x")->cmd);
	node_call(n, &t_call_on(7, SCRIPT_RELEASE, "a", "x")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 3);
	ck_assert_uint_eq(n->queued, 1);	/* 7: after 1's answer */
	for (int i = 0; i < 3; i++) {
		s = fake_sent_pop();
		ck_assert_str_eq(s->argv[0], "FCALL");
		ck_assert_str_eq(s->argv[1], fns[i]);
		ck_assert_int_eq(atoi(s->argv[2]), calls[i]);
		answer_ints(s, (size_t)calls[i]);
	}
	turn();
	s = fake_sent_pop();
	ck_assert_str_eq(s->text, "FCALL fn-release 1 lbt:lock:a x");
	answer_int(s, 1);
	ck_assert_uint_eq(nheard, 7);
	/* without functions: one batch script for every kind */
	n->fn = 0;
	node_call(n, &t_call_on(8, SCRIPT_RELEASE, "a", "x")->cmd);
	node_call(n, &t_call_on(9, SCRIPT_RELEASE, "b", "x")->cmd);
	turn();
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[0], "EVALSHA");
	ck_assert_str_eq(s->argv[1], "sha-batch");
	answer_ints(s, 2);
	done(n);
}
END_TEST

/* --- the lean exclusive batch (lean.h) --------------------------------- */

static const struct lean_names t_names = {
	"lbt:fence", "lbt:lockdelay", "lbt:listen", "lbt:listenall",
	"lbt:wanted", "lbt:released", "B "
};

/* acquire.lua's call as store_acquire makes it (no value): lbt:lock:key,
 * the counter, the lock delay, the watch mark; owner, ttl, wanted channel,
 * announcement, will_wait, reserve. */
static struct tcall *
t_acquire(int id, const char *key)
{
	struct piece p[10] = {
		{ "lbt:lock:", 9, key, strlen(key) },
		{ "lbt:fence", 9, NULL, 0 },
		{ "lbt:lockdelay", 13, NULL, 0 },
		{ "lbt:watched:", 12, key, strlen(key) },
		{ "owner", 5, NULL, 0 }, { "30000", 5, NULL, 0 },
		{ "lbt:wanted", 10, NULL, 0 }, { "B ", 2, key, strlen(key) },
		{ "0", 1, NULL, 0 }, { "0", 1, NULL, 0 },
	};
	struct tcall *t = (struct tcall *)cmd_new(sizeof *t, SCRIPT_ACQUIRE,
	    4, p, 10);

	t->cmd.reply = t_reply;
	t->id = id;
	return t;
}

/* release.lua's call (a hold without a value): the lock; its value, the
 * channel, the name. */
static struct tcall *
t_release(int id, const char *key)
{
	struct piece p[4] = {
		{ "lbt:lock:", 9, key, strlen(key) },
		{ "owner:1", 7, NULL, 0 }, { "lbt:released", 12, NULL, 0 },
		{ key, strlen(key), NULL, 0 },
	};
	struct tcall *t = (struct tcall *)cmd_new(sizeof *t, SCRIPT_RELEASE,
	    1, p, 4);

	t->cmd.reply = t_reply;
	t->id = id;
	return t;
}

/* A batching node with the library, announced: lean batches go. */
static struct node *
lean_node(void)
{
	struct node *n = up_node(1, 0);

	env.lean = &t_names;
	n->fn = 1;
	n->announced = 1;
	return n;
}

/* Exclusive acquires and releases of a turn: one FCALL of the lean
 * function, acquires first; other calls as before; each call hears its
 * own element. */
START_TEST(test_lean_batch_of_a_turn)
{
	struct node *n = lean_node();
	struct fake_sent *s;
	redisReply *r;

	node_call(n, &t_acquire(1, "a")->cmd);
	node_call(n, &t_release(2, "b")->cmd);
	node_call(n, &t_acquire(3, "c")->cmd);
	node_call(n, &t_call_on(4, SCRIPT_RENEW, "d", "x")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 2);
	ck_assert_uint_eq(n->inflight, 4);
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[0], "FCALL");
	ck_assert_str_eq(s->argv[1], "fn-lean");
	ck_assert_str_eq(s->argv[2], "7");	/* 4 + 1 release + 2 */
	ck_assert_str_eq(s->argv[7], "lbt:lock:b");
	ck_assert_str_eq(s->argv[8], "lbt:lock:a");
	ck_assert_str_eq(s->argv[9], "lbt:lock:c");
	ck_assert_str_eq(s->argv[10], "@lean");
	ck_assert_str_eq(s->argv[11], "2");
	ck_assert_str_eq(s->argv[12], "1");
	ck_assert_int_eq(s->argc, 3 + 7 + 6 + 2 * 4 + 1);
	r = reply_arr(3, reply_int(111), reply_int(333), reply_int(1));
	fake_reply(s, r);
	reply_free(r);
	ck_assert_uint_eq(nheard, 3);
	ck_assert_int_eq(heard[0].id, 1);
	ck_assert_int_eq(heard[0].integer, 111);
	ck_assert_int_eq(heard[1].id, 3);
	ck_assert_int_eq(heard[1].integer, 333);
	ck_assert_int_eq(heard[2].id, 2);
	ck_assert_int_eq(heard[2].integer, 1);
	s = fake_sent_pop();
	ck_assert_str_eq(s->text, "FCALL fn-renew 1 lbt:lock:d x");
	answer_int(s, 1);
	ck_assert_uint_eq(n->inflight, 0);
	/* alone too: a lean batch of one */
	node_call(n, &t_release(5, "e")->cmd);
	turn();
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[1], "fn-lean");
	answer_ints(s, 1);
	ck_assert_uint_eq(nheard, 5);
	done(n);
}
END_TEST

/* Before the link's announce answered (announce.lua: a broker without
 * listen marks may listen), and without the names (cluster mode), the
 * calls go as before. */
START_TEST(test_lean_waits_for_announce)
{
	struct node *n = lean_node();
	struct fake_sent *s;

	for (int i = 0; i < 2; i++) {
		if (i == 0)
			n->announced = 0;
		else
			env.lean = NULL;
		node_call(n, &t_acquire(1, "a")->cmd);
		node_call(n, &t_acquire(2, "b")->cmd);
		turn();
		s = fake_sent_pop();
		ck_assert_str_eq(s->argv[1], "fn-batch");
		ck_assert_str_eq(s->argv[3 + 8], "acquire");
		answer_ints(s, 2);
	}
	ck_assert_uint_eq(nheard, 4);
	done(n);
}
END_TEST

/* A key twice: the second call waits for the batch's answer (its reads
 * come before its writes), the others go on. */
START_TEST(test_lean_key_twice_waits)
{
	struct node *n = lean_node();
	struct fake_sent *s;

	node_call(n, &t_release(1, "a")->cmd);
	node_call(n, &t_acquire(2, "a")->cmd);
	node_call(n, &t_acquire(3, "b")->cmd);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);
	ck_assert_uint_eq(n->queued, 1);
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[9], "@lean");
	ck_assert_str_eq(s->argv[10], "1");	/* b's acquire */
	ck_assert_str_eq(s->argv[11], "1");	/* a's release */
	answer_ints(s, 2);
	turn();
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[1], "fn-lean");
	ck_assert_str_eq(s->argv[7], "lbt:lock:a");
	answer_ints(s, 1);
	ck_assert_uint_eq(nheard, 3);
	ck_assert_int_eq(heard[2].id, 2);
	done(n);
}
END_TEST

/* Refused whole for memory (the lean function may write): its releases
 * go again at once in the release-only batch (allow-oom), keeping their
 * place (a later call about one of them still waits); its acquires hear
 * the refusal. */
START_TEST(test_lean_oom_frees_go_again)
{
	struct node *n = lean_node();
	redisReply *e = reply_err("OOM command not allowed when used memory "
	    "> 'maxmemory'.");
	struct fake_sent *s;

	node_call(n, &t_acquire(1, "a")->cmd);
	node_call(n, &t_release(2, "b")->cmd);
	node_call(n, &t_release(3, "c")->cmd);
	turn();
	node_call(n, &t_acquire(4, "b")->cmd);	/* waits for 2 */
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);
	fake_reply(fake_sent_pop(), e);
	reply_free(e);
	ck_assert_uint_eq(nheard, 1);
	ck_assert_int_eq(heard[0].id, 1);
	ck_assert_int_eq(heard[0].type, REDIS_REPLY_ERROR);
	ck_assert_uint_eq(fake_sent_count(), 1);
	ck_assert_uint_eq(n->inflight, 2);
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[1], "fn-batch-free");
	ck_assert_str_eq(s->argv[2], "2");
	ck_assert_str_eq(s->argv[5], "release");
	turn();
	ck_assert_uint_eq(fake_sent_count(), 0);	/* 4 still waits */
	answer_ints(s, 2);
	ck_assert_uint_eq(nheard, 3);
	turn();
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[1], "fn-lean");
	answer_ints(s, 1);
	ck_assert_uint_eq(nheard, 4);
	ck_assert_uint_eq(n->inflight, 0);
	done(n);
}
END_TEST

/* Under load lean calls gather: while LEAN_FLYING_MAX lean batches are
 * unanswered, the lean calls of later turns wait (a call about one of
 * their keys behind them; other calls go), then leave as one batch when
 * one answers; an answered link sends a lone call at once again. */
START_TEST(test_lean_calls_gather_while_batches_fly)
{
	struct node *n = lean_node();
	struct fake_sent *fly[LEAN_FLYING_MAX], *s;
	char key[8];
	int id = 0;

	for (int i = 0; i < LEAN_FLYING_MAX; i++) {
		snprintf(key, sizeof key, "k%d", i);
		node_call(n, &t_acquire(++id, key)->cmd);
		turn();
		ck_assert_uint_eq(fake_sent_count(), 1);
		fly[i] = fake_sent_pop();
		ck_assert_str_eq(fly[i]->argv[1], "fn-lean");
	}
	ck_assert_uint_eq(n->lean_flying, LEAN_FLYING_MAX);
	node_call(n, &t_acquire(++id, "a")->cmd);		/* waits */
	node_call(n, &t_call_on(++id, SCRIPT_RENEW, "a", "x")->cmd); /* behind */
	node_call(n, &t_release(++id, "b")->cmd);		/* waits */
	node_call(n, &t_call_on(++id, SCRIPT_RENEW, "c", "x")->cmd); /* goes */
	turn();
	node_call(n, &t_acquire(++id, "d")->cmd);		/* waits */
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);
	s = fake_sent_pop();
	ck_assert_str_eq(s->text, "FCALL fn-renew 1 lbt:lock:c x");
	answer_int(s, 1);
	ck_assert_uint_eq(n->queued, 4);
	answer_ints(fly[0], 1);
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);	/* a, b, d in one */
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[1], "fn-lean");
	ck_assert_str_eq(s->argv[2], "7");	/* 4 + 1 release + 2 */
	ck_assert_str_eq(s->argv[11], "2");	/* acquires a, d */
	ck_assert_str_eq(s->argv[12], "1");	/* release b */
	ck_assert_uint_eq(n->queued, 1);	/* a's renewal: after a */
	answer_ints(s, 3);
	turn();
	s = fake_sent_pop();
	ck_assert_str_eq(s->text, "FCALL fn-renew 1 lbt:lock:a x");
	answer_int(s, 1);
	for (int i = 1; i < LEAN_FLYING_MAX; i++)
		answer_ints(fly[i], 1);
	ck_assert_uint_eq(n->lean_flying, 0);
	node_call(n, &t_release(++id, "e")->cmd);	/* idle: at once */
	turn();
	s = fake_sent_pop();
	ck_assert_str_eq(s->argv[1], "fn-lean");
	answer_ints(s, 1);
	ck_assert_uint_eq(nheard, (size_t)id);
	ck_assert_uint_eq(n->inflight, 0);
	done(n);
}
END_TEST

/* "Function not found": the library loaded again, the lean batch sent
 * again whole as EVAL of the batch script, its words unchanged ("@lean"
 * first), before any later call about its keys. */
START_TEST(test_lean_resent_as_eval)
{
	struct node *n = lean_node();
	redisReply *e = reply_err("ERR Function not found");
	struct fake_sent *s, *again;

	node_call(n, &t_acquire(1, "a")->cmd);
	node_call(n, &t_release(2, "b")->cmd);
	turn();
	s = fake_sent_pop();
	node_call(n, &t_release(3, "a")->cmd);	/* waits for 1 */
	turn();
	ck_assert_uint_eq(fake_sent_count(), 0);
	fake_reply(s, e);
	reply_free(e);
	ck_assert_uint_eq(fake_sent_count(), 2);
	ck_assert_str_eq(fake_sent_peek(0)->text,
	    "FUNCTION LOAD #!lua name=lockbroker_fake\n-- fake");
	again = fake_sent_peek(1);
	ck_assert_str_eq(again->argv[0], "EVAL");
	ck_assert_str_eq(again->argv[1], "-- batch");
	ck_assert_str_eq(again->argv[2], "6");
	ck_assert_str_eq(again->argv[3 + 6], "@lean");
	fake_sent_free(fake_sent_pop());
	turn();
	ck_assert_uint_eq(fake_sent_count(), 1);	/* 3 still waits */
	answer_ints(fake_sent_pop(), 2);
	ck_assert_uint_eq(nheard, 2);
	turn();
	answer_ints(fake_sent_pop(), 1);
	ck_assert_uint_eq(nheard, 3);
	done(n);
}
END_TEST

/* The link goes: in flight and queued calls hear "no answer". */
START_TEST(test_link_lost_fails_calls)
{
	struct node *n = up_node(0, 0);

	for (int i = 0; i < STORE_MAX_INFLIGHT + 3; i++)
		node_call(n, &t_call(i, SCRIPT_RELEASE, "a")->cmd);
	fake_reply(fake_sent_pop(), NULL);	/* hiredis: the first NULL */
	ck_assert(!node_usable(n));
	ck_assert_uint_eq(nheard, 1);
	ck_assert_int_eq(heard[0].answered, 0);
	n->link.state = LINK_DOWN;
	n->link.ops->down(n, &n->link, 1);
	ck_assert_uint_eq(nheard, 4);		/* the queued three */
	ck_assert_uint_eq(n->queued, 0);
	/* a down link takes nothing (single mode: not waited for) */
	{
		struct tcall *t = t_call(9, SCRIPT_RELEASE, "a");

		env.wait_link = 0;
		ck_assert_int_eq(node_call(n, &t->cmd), -1);
		free(t);
	}
	done(n);		/* the rest: NULL from the teardown */
	ck_assert_uint_eq(nheard, STORE_MAX_INFLIGHT + 3);
}
END_TEST

Suite *
node_suite(void)
{
	Suite *s = suite_create("node");
	TCase *tc = tcase_create("calls");

	tcase_add_test(tc, test_batches_of_a_turn);
	tcase_add_test(tc, test_alone_goes_as_itself);
	tcase_add_test(tc, test_batch_bytes_bound);
	tcase_add_test(tc, test_inflight_cap);
	tcase_add_test(tc, test_inflight_cap_batching);
	tcase_add_test(tc, test_wait_short_undoes);
	tcase_add_test(tc, test_wait_enough_grants);
	tcase_add_test(tc, test_wait_lost);
	tcase_add_test(tc, test_no_acks_no_wait);
	tcase_add_test(tc, test_noscript_resends_as_eval);
	tcase_add_test(tc, test_library_loaded_calls_as_fcall);
	tcase_add_test(tc, test_no_functions_scripts_by_evalsha);
	tcase_add_test(tc, test_function_not_found_reloads_once);
	tcase_add_test(tc, test_link_lost_fails_calls);
	tcase_add_test(tc, test_one_key_waits_for_a_resend);
	tcase_add_test(tc, test_one_key_waits_for_a_cluster_retry);
	tcase_add_test(tc, test_batch_about_one_key);
	tcase_add_test(tc, test_batch_bound_keeps_order);
	tcase_add_test(tc, test_call_about_many_keys);
	tcase_add_test(tc, test_batches_by_kind);
	tcase_add_test(tc, test_rtt_one_sample_per_round_trip);
	tcase_add_test(tc, test_rtt_unbatched_calls);
	tcase_add_test(tc, test_lean_batch_of_a_turn);
	tcase_add_test(tc, test_lean_waits_for_announce);
	tcase_add_test(tc, test_lean_key_twice_waits);
	tcase_add_test(tc, test_lean_oom_frees_go_again);
	tcase_add_test(tc, test_lean_resent_as_eval);
	tcase_add_test(tc, test_lean_calls_gather_while_batches_fly);
	suite_add_tcase(s, tc);
	return s;
}
