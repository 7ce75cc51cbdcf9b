/*
 * node.h - one Redis master as the script calls see it: its command link,
 * the calls in flight on it (at most STORE_MAX_INFLIGHT), the queue of
 * the others, the end-of-turn batch, and replica acknowledgement (WAIT)
 * as a group commit.
 *
 * A call is argv (<call> <name> <numkeys> keys... args...) and its own
 * reply callback: the node sends it as FCALL of the script's function
 * once the link's handshake loaded the broker's function library, as
 * EVALSHA on a Redis without functions (Redis < 7), as EVAL after
 * NOSCRIPT or "Function not found", and hands the answer to c->reply; it
 * never decodes one.  Who owns the node (a topology: single.c,
 * cluster.c) gives the ops of its link, whose up and down end in node_up
 * and node_down.
 *
 * Calls about one key keep their order (node.c, "order"): a call is not
 * sent while an earlier call of the node about one of its keys is
 * unanswered, so a call Redis must be sent again (NOSCRIPT, "Function not
 * found") never runs after one that came behind it.
 */
#ifndef LOCKBROKER_NODE_H
#define LOCKBROKER_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "histo.h"
#include "lean.h"
#include "link.h"
#include "scripts.h"
#include "store.h"		/* STORE_MAX_INFLIGHT */

/*
 * Most calls in one batch script call, and most bytes of them
 * (cmd.bytes): Redis runs a batch as one script, serving no one else
 * meanwhile (64 calls: a few hundred microseconds), and a call past the
 * byte bound (a session record of many keys) goes alone.
 */
#define STORE_BATCH_MAX 64
/* Lean batches in flight on a node at most: the lean calls made while
 * that many are unanswered wait for one (node.c, "batches"). */
#define LEAN_FLYING_MAX 2
#define STORE_BATCH_BYTES (64 * 1024)

struct node;

/* What the nodes of one store share (the store owns it), and the
 * counters the layers of the store keep for STATS. */
struct node_env {
	struct link_env link;
	long acks;			/* replicas a grant must reach (WAIT) */
	long ack_timeout_ms;
	long lock_delay_ms;		/* a new tenure's (tenure args) */
	int batching;			/* single and Sentinel mode: the calls
					 * of a loop turn leave as batches */
	int wait_link;			/* cluster mode: a call redirected to
					 * a master not up yet waits for it */
	const struct lean_names *lean;	/* batching: the names of the lean
					 * exclusive batch (lean.h); NULL
					 * none (cluster mode) */
	/* A node's command link is up (node_up), before what waited for it
	 * is sent: the store announces this broker there (announce.lua),
	 * which lean batches wait for. */
	void (*up)(void *arg, struct node *n);
	void *up_arg;
	uint64_t acks_missed;		/* grants undone: WAIT fell short */
	uint64_t tenures;		/* replication ids seen */
	uint64_t reconnects;		/* command links lost after up */
	uint64_t redirects;		/* MOVED / ASK replies followed */
};

/* One piece of an argument: p1 followed by p2 (either may be empty). */
struct piece {
	const char *p1;
	size_t l1;
	const char *p2;
	size_t l2;
};

/* Cluster mode's grant and reassert calls end in these: the master's
 * replication ids and the lock delay left (lib/slot_tenure.lua), filled
 * from the master a call is sent to (cmd.tenure_arg). */
#define TENURE_ARGS 4	/* replid, replid2, the earlier replid, delay */

struct cmd;
struct ackgroup;

enum { CMD_DONE, CMD_PARK };

/*
 * A call's answer.  r: its reply (its element of a batch's), an error
 * reply included; NULL: no answer (its link went, or it could not be
 * sent).  From here c is the callee's: freed, or started again
 * (node_call).  can_park: a grant (c->acked set) sent while replica acks
 * are awaited; the callee may then return CMD_PARK, and the node keeps c
 * until its turn's WAIT answers (c->acked).  Else CMD_DONE.
 */
typedef int cmd_reply_fn(struct cmd *c, const redisReply *r, int can_park);
/*
 * A parked grant's WAIT answered: ok 1 enough replicas have it, 0 too few
 * (it must be undone: returns 1 when an undo went out), -1 no answer.  c
 * is the callee's.
 */
typedef int cmd_acked_fn(struct cmd *c, int ok);

/* A script call.  From node_call on, it is the node's (queued, or owned
 * by hiredis's callback: its own or its batch's) until it is answered. */
struct cmd {
	struct cmd *qnext;		/* in its node's queue, or in a batch
					 * in flight */
	enum script_id script;
	int retried;			/* sent again as EVAL (NOSCRIPT, or
					 * "Function not found") */
	unsigned loads;			/* its node's library loads when it
					 * was sent (node.fn_loads) */
	int argc;
	int nkeys;			/* argv[3..3+nkeys): its KEYS */
	int ndeps;			/* the first ndeps of them name what it
					 * is about (a lock, a session record):
					 * its order with other calls about
					 * them is kept; 1 unless set */
	int ordered;			/* counted in its node's deps, from
					 * its first send to its last answer
					 * (a cluster retry's included) */
	struct node *dep_node;		/* ... that node (order.c) */
	size_t bytes;			/* about its size on the wire */
	const char **argv;
	size_t *argvlen;
	cmd_reply_fn *reply;
	cmd_acked_fn *acked;		/* a grant: joins its turn's WAIT */
	struct ackgroup *group;		/* the WAIT it waits for */
	struct cmd *gnext;		/* parked in group */
	int tenure_arg;			/* cluster: argv index of the master's
					 * replication ids; 0 none */
	char tenure_delay[24];		/* and of the lock delay left */
	struct node *node;		/* where it is sent (or queued) */
	int asking;			/* send ASKING first (an ASK reply) */
	int64_t born_ms;
	int64_t sent_us;		/* sent alone: when (the round trip) */
};

/* One master. */
struct node {
	struct node_env *env;
	void *owner;			/* its topology's, per node */
	char *host;			/* numeric host, or a unix socket path */
	int port;
	int is_unix;
	struct link link;		/* its command link */
	int fn;				/* the handshake loaded the function
					 * library: calls go as FCALL; 0:
					 * EVALSHA (no FUNCTION in Redis) */
	unsigned fn_loads;		/* FUNCTION LOADs sent again on this
					 * link ("Function not found") */
	int announced;			/* this link's announce.lua answered:
					 * lean batches may go (node.c) */
	int64_t clock_redis_ms;		/* its clock, by its last announce */
	int64_t clock_made_ms;		/* now_ms() when that call was made
					 * (0: no sample yet; announce.c) */
	char replid[64];		/* INFO's master_replid, handshake */
	char replid2[64];		/* INFO's master_replid2 */
	char prev_replid[64];		/* its replication id before the
					 * last change ("" if none seen) */
	int64_t tenure_ms;		/* when this broker saw its replication
					 * id first */
	void (*on_info)(struct node *n, int changed);	/* node_hello */
	size_t inflight;		/* script calls sent, unanswered (a
					 * batch counts as its calls), and
					 * WAITs */
	unsigned lean_flying;		/* lean batches sent, unanswered */
	struct cmd *qhead, *qtail;	/* waiting for a place in flight, or
					 * for the link (cluster) */
	size_t queued;
	/* Calls sent and unanswered per bucket of the keys they are about
	 * (cmd.ndeps; a bucket a hash of a key's name): a call whose bucket
	 * counts any waits, behind them, in the queue.  Buckets shared by
	 * two keys only make a call wait longer. */
	uint32_t *deps;
	unsigned char *marks;		/* a queue walk's marks on buckets
					 * (node.c, queue_take) */
	/* Batching, the queue is also this turn's batch: calls are sent
	 * only by flush_ev, made active when one is queued (or a place in
	 * flight frees up), which runs at the end of the loop turn and
	 * sends what has a place as batch script calls (node.c, "batches"). */
	struct event *flush_ev;
	int64_t last_progress_ms;
	struct ackgroup *agroup;	/* grants of this turn, WAIT to come */
	struct event *ack_ev;
	uint64_t redirects;		/* MOVED / ASK replies it sent */
	/* Script calls' round trips (a batch is one), from the write to the
	 * answer; counted for the address rtt_addr (as the broker was given
	 * it: a host name stays a name) and, for a name, the address it gave
	 * (rtt_ip), from 0 again when the link comes up elsewhere (Sentinel:
	 * a new master; a name that moved). */
	struct histo rtt;
	char rtt_addr[sizeof ((struct link *)0)->addrstr];
	char rtt_ip[sizeof ((struct link *)0)->ip];	/* and the address
					 * its name gave ("" none) */
};

/*
 * A call of script: one allocation of size bytes (a struct beginning
 * with struct cmd) followed by argv = <call> <name> numkeys pieces...
 * (the first two words are set when it is sent, by its node's way of
 * calling), kept for a retry.  Free it with free().
 */
struct cmd *cmd_new(size_t size, enum script_id script, int nkeys,
    const struct piece *pieces, int npieces);

/* The node at host:port (or the unix socket at host); its link's ops
 * get the node as their owner.  Not connected yet (link_start). */
struct node *node_new(struct node_env *env, const char *host, int port,
    int is_unix, const struct link_ops *ops, void *owner);
/* Fail what n has queued or in flight, drop its link, free it. */
void node_free(struct node *n);
/* n's link takes commands. */
int node_usable(const struct node *n);
/* n's link is being made (link_coming): calls may wait for it. */
int node_coming(const struct node *n);

/*
 * Send c to n (c->node = n), or queue it there: batching, always (sent
 * at the end of the turn, if it has a place in flight by then); else when
 * STORE_MAX_INFLIGHT are in flight, when an earlier call about one of its
 * keys is queued or unanswered, or until its link is up while it is being
 * made (node_coming; and wait_link: a redirection to a master not
 * connected yet); failed if that attempt fails, or (node_watch) once it
 * waited redis_timeout_ms.  -1 when it can go nowhere (c is the caller's
 * again).
 */
int node_call(struct node *n, struct cmd *c);
/* c is done for good (answered, or given up after cluster refusals):
 * the calls about its keys that waited for it may go.  Idempotent. */
void node_cmd_done(struct cmd *c);
/* Tear n's link down (a reply says it is no master now). */
void node_kill(struct node *n, const char *why);

/* How script is called on n now: *call "FCALL" and *name its function
 * once the library is loaded there, else "EVALSHA" and its SHA1. */
void node_script(const struct node *n, enum script_id script,
    const char **call, const char **name);

/* The link's handshake, from its hello op: the function library loaded
 * (FUNCTION LOAD, never REPLACE: its name carries the hash of its text;
 * a Redis without functions gets every script by SCRIPT LOAD), then
 * INFO; a master only.  on_info(n, changed) ends it (link_hello_done,
 * link_refuse...); changed: its replication id is not the last one's. */
void node_hello(struct node *n, void (*on_info)(struct node *n, int changed));
/* The link is up: send what waited for it.  The link went: fail what is
 * queued (what was in flight fails with the context). */
void node_up(struct node *n);
void node_down(struct node *n);
/* Every ROLE_CHECK_MS: a master demoted while connected (a frozen old
 * master that woke up, REPLICAOF) must not take grants. */
void node_check_role(struct node *n);
/* The watchdog's look at n: its oldest answer is overdue (timeout_ms),
 * or (cluster) a call queued for a link that does not come up. */
void node_watch(struct node *n, long timeout_ms);
/* The broker itself stalled: n's answers are timed from now. */
void node_stalled(struct node *n, int64_t now);

#endif
