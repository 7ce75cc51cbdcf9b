/*
 * store_int.h - what the parts of the store above its links share, and
 * nothing else includes: store.c (the lock scripts in lock terms: script
 * calls and their batches, the in-flight cap and queue per node, replica
 * acknowledgement, following cluster redirections; and each master's
 * command link: its handshake and tenure, following the master in
 * Sentinel mode), cluster.c (the slot map of a Redis Cluster and the
 * master nodes it names) and shardsub.c (cluster mode's wake-ups).
 *
 * A node is one master and its command link.  Single-address and
 * Sentinel mode have exactly one (st->one); cluster mode one per master
 * in the slot map, and every script call is routed by its key's slot.
 */
#ifndef LOCKBROKER_STORE_INT_H
#define LOCKBROKER_STORE_INT_H

#include "store.h"
#include "addr.h"
#include "keys.h"
#include "link.h"
#include "shardsub.h"
#include "scripts.h"

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include <event2/event.h>
#include <stdint.h>

struct sentinel;
struct lease;

/* Replication ids of earlier tenures remembered: a master showing one is
 * a stale old master that woke up (ids are never reused). */
#define STORE_LEFT_MAX 8

#define ROLE_CHECK_MS 1000		/* is the master still one? */
#define ERROR_LOG_MS 10000		/* quiet time between error logs */
#define CLUSTER_MAX_NODES 256		/* masters remembered (cluster) */
#define CLUSTER_REDIRECTS 5		/* MOVED/ASK followed per call */
#define CLUSTER_REFRESH_MS 1000		/* slot map read at least this often */
#define CLUSTER_REFRESH_GAP_MS 100	/* and at most this often */
#define RETRY_MIN_MS 20			/* TRYAGAIN / CLUSTERDOWN backoff */
#define RETRY_MAX_MS 200

struct node;

/*
 * Replica acknowledgement as a group commit: every grant script sent in
 * one event-loop turn joins the open group, and one WAIT sent at the end
 * of the turn (ack_ev) covers them all.  A grant's reply is parked until
 * that WAIT answers.  refs: the WAIT (until its reply, or until it turns
 * out it cannot be sent) plus each member whose reply has not come.
 */
struct ackgroup {
	struct node *node;
	struct cmd *parked;		/* granted, waiting for the WAIT */
	unsigned refs;
	int sent;			/* the WAIT is on the wire */
};

/*
 * Most calls in one batch script call (store.c, issue 14), and most bytes
 * of them (cmd.bytes): Redis runs a batch as one script, serving no one
 * else meanwhile (64 calls: a few hundred microseconds), and a call past
 * the byte bound (a session record of many keys) goes alone.
 */
#define STORE_BATCH_MAX 64
#define STORE_BATCH_BYTES (64 * 1024)

/* One master: its command connection, in-flight cap and queue. */
struct node {
	struct store *st;
	struct node *next;		/* st->nodes */
	char *host;			/* numeric host, or a unix socket path */
	int port;
	int is_unix;
	struct link link;		/* its command link */
	int resolving;			/* Sentinel mode: asking for the master */
	int tenure_joined;		/* tenure.lua answered on this context
					 * (Sentinel mode: sent once the lease
					 * holds, not in the handshake) */
	int tenure_asked;		/* ... sent, no answer yet */
	char replid[64];		/* INFO's master_replid, handshake */
	char replid2[64];		/* INFO's master_replid2 */
	size_t inflight;		/* script calls sent, unanswered (a
					 * batch counts as its calls), and
					 * WAITs */
	struct cmd *qhead, *qtail;	/* waiting for a place in flight, or
					 * for the connection (cluster) */
	size_t queued;
	/* Single and Sentinel mode, the queue is also this turn's batch:
	 * calls are sent only by flush_ev, made active when one is queued
	 * (or a place in flight frees up), which runs at the end of the
	 * loop turn and sends what has a place as batch script calls
	 * (store.c, issue 14). */
	struct event *flush_ev;
	int64_t last_progress_ms;
	struct ackgroup *agroup;	/* grants of this turn, WAIT to come */
	struct event *ack_ev;
	unsigned slots;			/* slots it serves (cluster map) */
	struct shardsub *ss;		/* cluster mode: its wake-ups */
	char prev_replid[64];		/* its replication id before the
					 * last change ("" if none seen) */
	int64_t tenure_ms;		/* when this broker saw its replication
					 * id first */
	uint64_t redirects;		/* MOVED / ASK replies it sent */
};

struct store {
	struct event_base *base;
	struct store_cfg cfg;		/* strings owned below */
	char *addr, *password, *user;
	struct store_keys keys;		/* names shared with the scripts */
	struct link_env env;		/* what its links share */
	struct sentinel *sent;		/* Sentinel mode; NULL: one address */
	struct lease *lease;		/* Sentinel mode: grants and renewals
					 * only while it holds (lease.h) */
	int serving;			/* Sentinel mode: the up hook told
					 * (connection up and lease held) */
	char replid[64];		/* the master's replication id now */
	char left[STORE_LEFT_MAX][64];	/* ids of tenures this broker left */
	unsigned nleft;
	uint64_t tenures;		/* replication ids seen */
	struct event *role_ev;		/* is it still the master? */
	uint64_t acks_missed;		/* grants undone: WAIT fell short */
	int64_t errlog_ms;		/* last error reply logged */
	uint64_t errlog_quiet;		/* error replies not logged since */
	int freeing;
	struct store_hooks hooks;
	struct sub *sub;		/* single and Sentinel mode */
	struct event *watchdog_ev;	/* checks the oldest command's age */
	int64_t watchdog_ms;		/* when it last ran */
	uint64_t reconnects;
	struct node *one;		/* single / Sentinel mode */
	struct node *nodes;		/* every node, one's included */
	unsigned nnodes;
	struct cmd *retrying;		/* waiting out TRYAGAIN / CLUSTERDOWN */
	uint64_t redirects;		/* MOVED / ASK replies followed */
	struct cluster *cl;		/* cluster mode; NULL otherwise */
};

/* One piece of an argument: p1 followed by p2 (either may be empty). */
struct piece {
	const char *p1;
	size_t l1;
	const char *p2;
	size_t l2;
};

enum cmd_kind { K_ACQUIRE, K_RELEASE, K_RENEW, K_OWNER, K_UNDO,
    K_TAKEOVER, K_SESSION, K_PASS };

/* A script call in flight.  Owned by hiredis's callback (its own, or its
 * batch's) from send on. */
struct cmd {
	struct store *st;
	struct cmd *qnext;		/* in its node's queue, or in a batch
					 * in flight */
	enum cmd_kind kind;
	enum script_id script;
	int retried;
	int argc;
	int nkeys;			/* argv[3..3+nkeys): its KEYS */
	size_t bytes;			/* about its size on the wire */
	const char **argv;
	size_t *argvlen;
	union cmd_fn {
		store_acquire_fn *acquire;
		store_release_fn *release;
		store_renew_fn *renew;
		store_owner_fn *owner;
		store_session_fn *session;
		store_pass_fn *pass;
	} fn;
	void *arg;
	size_t nrenew;
	struct ackgroup *group;		/* a grant waiting for replica acks */
	struct cmd *gnext;		/* parked in group */
	int owner_arg;			/* argv index of the owner (grants) */
	int tenure_arg;			/* cluster: argv index of the master's
					 * replication ids; 0 none */
	char tenure_delay[24];		/* and of the lock delay left */
	long long token;		/* parked: the token granted */
	struct node *node;		/* where it is sent (or queued) */
	int slot;			/* its key's slot; -1 single mode */
	int asking;			/* send ASKING first (an ASK reply) */
	int redirects;			/* MOVED / ASK followed so far */
	int64_t born_ms;		/* retries end timeout_ms after this */
	long retry_ms;			/* next TRYAGAIN / CLUSTERDOWN wait */
	struct event *retry_ev;		/* that wait */
	struct cmd *rnext;		/* st->retrying */
};

/* A node's command link takes commands (not up, or tearing down: no). */
static inline int
node_usable(const struct node *n)
{
	return n != NULL && link_usable(&n->link);
}

/* store.c */
struct node *store_node_new(struct store *st, const char *host, int port,
    int is_unix);
void store_node_free(struct node *n);

/* cluster.c */
struct cluster *cluster_new(struct store *st, const char *seeds);
void cluster_free(struct cluster *cl);
/* The node serving slot (NULL: none known). */
struct node *cluster_node_of(struct cluster *cl, unsigned slot);
/* MOVED: slot lives at host:port now (the map is refreshed soon). */
struct node *cluster_moved(struct cluster *cl, unsigned slot,
    const char *host, int port);
/* The node at host:port, made if unknown (ASK); NULL past the cap. */
struct node *cluster_node_at(struct cluster *cl, const char *host, int port);
/* Read the slot map again soon (a redirection, a lost connection). */
void cluster_refresh(struct cluster *cl);
int cluster_map_known(const struct cluster *cl);
uint64_t cluster_map_changes(const struct cluster *cl);

#endif
