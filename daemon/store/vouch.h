/*
 * vouch.h - what the sentinels' answers vouch for: the arithmetic of the
 * Sentinel lease (lease.c), pure (libc only) so the unit tests can feed it
 * answers.
 *
 * A failover starts only once `quorum` sentinels flag the master down
 * (s_down), and a sentinel flags it only after down-after-milliseconds
 * without a reply to the oldest ping it still waits on (or, its link down
 * with no ping pending, since the master's last good reply).  So one
 * answer to SENTINEL MASTER vouches that this sentinel will not flag the
 * master down before a moment the answer itself tells (vouch_until), and
 * enough such answers at once, that the sentinels not vouching are fewer
 * than a quorum, vouch that no failover can have started (vouch_lease).
 */
#ifndef LOCKBROKER_VOUCH_H
#define LOCKBROKER_VOUCH_H

#include <stddef.h>
#include <stdint.h>

#include "addr.h"

#define VOUCH_MARGIN_MS 100		/* taken off every answer's bound */

/* From SENTINEL MASTER's flags: what matters here. */
#define VOUCH_F_MASTER		0x1u	/* "master" */
#define VOUCH_F_DOWN		0x2u	/* s_down, o_down, failover_in_progress,
					 * force_failover or master_reboot: no
					 * vouching */
#define VOUCH_F_DISCONNECTED	0x4u	/* "disconnected": its link is down */
#define VOUCH_F_FAILOVER	0x8u	/* "failover_in_progress": a leader that
					 * promoted a replica names the old
					 * master until the others are moved */

/* One sentinel's last answer. */
struct vouch_answer {
	int valid;			/* an answer was read */
	int64_t sent_ms;		/* the question's send time (monotonic) */
	long long down_after_ms;	/* down-after-milliseconds */
	long long ping_sent_ms;		/* last-ping-sent: the oldest unanswered
					 * ping's age, 0 none pending */
	long long ok_reply_ms;		/* last-ok-ping-reply */
	long long epoch;		/* config-epoch */
	long quorum;			/* quorum; 0 unknown */
	unsigned flags;			/* VOUCH_F_* */
	struct addr master;		/* ip and port */
};

/* The flags of a comma-separated flags text. */
unsigned vouch_flags(const char *text);

/*
 * Until when (monotonic ms) answer a vouches that its sentinel does not
 * flag the master down: sent + down-after - the sentinel's own s_down
 * clock - VOUCH_MARGIN_MS, at most cap_ms after sent (0: no cap).  At
 * most sent_ms (nothing) when a is not valid or flags it down.
 */
int64_t vouch_until(const struct vouch_answer *a, int64_t cap_ms);

/*
 * The lease the answers a[0..n) give for master, now, at config epoch
 * epoch (the newest any answered): the moment the last of the `need`
 * latest vouching answers ends, need = max(a majority of n, n - quorum +
 * 1) with the smallest quorum answered; 0 when none (why says why, in a
 * line for the log).  Answers at an older epoch do not count; answers at
 * epoch that name different masters give no lease at all, except one
 * whose sentinel is running the failover: the leader raises the epoch
 * when its replica is promoted, but names the old master until it has
 * moved the other replicas, while the others name the new one already.
 */
int64_t vouch_lease(const struct vouch_answer *a, size_t n, long long epoch,
    const struct addr *master, int64_t now, int64_t cap_ms, char *why,
    size_t whylen);

#endif
