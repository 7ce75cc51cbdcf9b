/*
 * stats.c - the table of counters, and the STATS line drawn from it.
 *
 * Adding a counter is one row here (and one in PROTOCOL.md's STATS table):
 * STATS and /metrics both pick it up.  Names already in use stay as they
 * are, even where the Prometheus name differs (lost / lockbroker_lost_
 * locks_total): clients and dashboards rely on both.
 */
#include "stats.h"

#include "broker.h"
#include "store.h"
#include "util.h"

#include <event2/buffer.h>

#include <stdio.h>
#include <string.h>

/* --- getters ----------------------------------------------------------- */

static const char *
t_version(const struct stats_snap *s)
{
	(void)s;
	return LOCKBROKER_VERSION;
}

static uint64_t
g_uptime(const struct stats_snap *s)
{
	return (uint64_t)((s->now_ms - s->b->started_ms) / 1000);
}

static uint64_t
g_sessions(const struct stats_snap *s)
{
	return s->b->nsessions;
}

static uint64_t
g_locks_held(const struct stats_snap *s)
{
	return s->ls.locks_held;
}

static uint64_t
g_waiters(const struct stats_snap *s)
{
	return s->ls.waiters;
}

static uint64_t
g_keys(const struct stats_snap *s)
{
	return s->ls.keys;
}

static uint64_t
g_acquires(const struct stats_snap *s)
{
	return s->ls.acquires;
}

static uint64_t
g_busy(const struct stats_snap *s)
{
	return s->ls.busy;
}

static uint64_t
g_acquire_errors(const struct stats_snap *s)
{
	return s->ls.acquire_errors;
}

static uint64_t
g_releases(const struct stats_snap *s)
{
	return s->ls.releases;
}

static uint64_t
g_renewals(const struct stats_snap *s)
{
	return s->ls.renewals;
}

static uint64_t
g_lost(const struct stats_snap *s)
{
	return s->ls.lost;
}

static uint64_t
g_lost_expired(const struct stats_snap *s)
{
	return s->ls.lost_by[LK_LOST_EXPIRED];
}

static uint64_t
g_lost_taken(const struct stats_snap *s)
{
	return s->ls.lost_by[LK_LOST_TAKEN];
}

static uint64_t
g_lost_jeopardy(const struct stats_snap *s)
{
	return s->ls.lost_by[LK_LOST_JEOPARDY];
}

static uint64_t
g_lost_failover(const struct stats_snap *s)
{
	return s->ls.lost_by[LK_LOST_FAILOVER];
}

static uint64_t
g_orphans(const struct stats_snap *s)
{
	return s->ls.orphans;
}

static uint64_t
g_handoffs(const struct stats_snap *s)
{
	return s->ls.handoffs;
}

static uint64_t
g_early_handoffs(const struct stats_snap *s)
{
	return s->ls.early_handoffs;
}

static uint64_t
g_fair_yields(const struct stats_snap *s)
{
	return s->ls.fair_yields;
}

static uint64_t
g_accepted(const struct stats_snap *s)
{
	return s->b->stats.accepted;
}

static uint64_t
g_refused(const struct stats_snap *s)
{
	return s->b->stats.refused;
}

static uint64_t
g_toolong(const struct stats_snap *s)
{
	return s->b->stats.toolong;
}

static uint64_t
g_tls_sessions(const struct stats_snap *s)
{
	return s->b->stats.tls_sessions;
}

static uint64_t
g_tls_handshakes(const struct stats_snap *s)
{
	return s->b->stats.tls_handshakes;
}

static uint64_t
g_tls_handshake_failures(const struct stats_snap *s)
{
	return s->b->stats.tls_handshake_failures;
}

static uint64_t
g_tls_handshaking(const struct stats_snap *s)
{
	return s->b->nhandshakes;
}

static uint64_t
g_paused(const struct stats_snap *s)
{
	return s->b->stats.paused;
}

static uint64_t
g_auth_failures(const struct stats_snap *s)
{
	return s->b->stats.auth_failures;
}

static uint64_t
g_grace_sessions(const struct stats_snap *s)
{
	return s->b->stats.grace_sessions;
}

static uint64_t
g_detached(const struct stats_snap *s)
{
	return s->b->stats.detached;
}

static uint64_t
g_resumes(const struct stats_snap *s)
{
	return s->b->stats.resumes;
}

static uint64_t
g_resume_refused(const struct stats_snap *s)
{
	return s->b->stats.resume_refused;
}

static uint64_t
g_grace_expired(const struct stats_snap *s)
{
	return s->b->stats.grace_expired;
}

static uint64_t
g_redis_up(const struct stats_snap *s)
{
	return (uint64_t)store_is_up(s->b->store);
}

static uint64_t
g_redis_inflight(const struct stats_snap *s)
{
	return store_inflight(s->b->store);
}

static uint64_t
g_redis_reconnects(const struct stats_snap *s)
{
	return store_reconnects(s->b->store);
}

static uint64_t
g_redis_tenures(const struct stats_snap *s)
{
	return store_tenures(s->b->store);
}

static uint64_t
g_acks_missed(const struct stats_snap *s)
{
	return store_acks_missed(s->b->store);
}

static uint64_t
g_reclaimed(const struct stats_snap *s)
{
	return s->ls.reclaimed;
}

static const char *
t_redis_master(const struct stats_snap *s)
{
	return store_master(s->b->store);
}

static uint64_t
g_redis_nodes(const struct stats_snap *s)
{
	return store_nodes_up(s->b->store);
}

static uint64_t
g_redis_redirects(const struct stats_snap *s)
{
	return store_redirects(s->b->store);
}

static uint64_t
g_redis_map_changes(const struct stats_snap *s)
{
	return store_map_changes(s->b->store);
}

/* "addr/up/inflight/redirects" per master, for STATS. */
struct node_text {
	char buf[1024];
	size_t off;
};

static void
node_text_one(void *arg, const char *addr, int up, size_t inflight,
    uint64_t redirects, const struct histo *rtt)
{
	struct node_text *t = arg;
	char one[128];
	int n = snprintf(one, sizeof one, "%s%s/%s/%zu/%llu", t->off ? "," : "",
	    addr, up ? "up" : "down", inflight,
	    (unsigned long long)redirects);

	(void)rtt;			/* /metrics only */
	if (n < 0 || (size_t)n >= sizeof one)
		return;
	if (t->off + (size_t)n + 5 >= sizeof t->buf) {
		if (t->off + 5 < sizeof t->buf)
			t->off += (size_t)snprintf(t->buf + t->off,
			    sizeof t->buf - t->off, ",...");
		return;
	}
	memcpy(t->buf + t->off, one, (size_t)n + 1);
	t->off += (size_t)n;
}

static const char *
t_redis_node_stats(const struct stats_snap *s)
{
	static struct node_text t;	/* one STATS line at a time */

	t.off = 0;
	t.buf[0] = '\0';
	store_each_node(s->b->store, node_text_one, &t);
	return t.off ? t.buf : "-";
}

static uint64_t
g_denials(const struct stats_snap *s)
{
	return s->b->stats.denials;
}

/*
 * "name:n,name:n" for the per-app rows (sessions or denials), bounded:
 * past APP_TEXT_MAX bytes the list ends in ",..." (/metrics has them all).
 * "-" when the broker has known no app.
 */
#define APP_TEXT_MAX 4096
static const char *
app_text(const struct stats_snap *s, int denials)
{
	static char buf[APP_TEXT_MAX];	/* one STATS line at a time */
	const struct appstat *a;
	size_t off = 0;

	buf[0] = '\0';
	TAILQ_FOREACH(a, &s->b->appstats, link) {
		unsigned long long v = denials ? a->denials : a->sessions;
		char one[128];
		int n = snprintf(one, sizeof one, "%s%s:%llu", off ? "," : "",
		    a->name, v);

		if (n < 0 || (size_t)n >= sizeof one)
			continue;	/* cannot happen: names are short */
		if (off + (size_t)n + 5 >= sizeof buf) {
			memcpy(buf + off, ",...", 5);
			off += 4;
			break;
		}
		memcpy(buf + off, one, (size_t)n + 1);
		off += (size_t)n;
	}
	return off ? buf : "-";
}

static const char *
t_app_sessions(const struct stats_snap *s)
{
	return app_text(s, 0);
}

static const char *
t_app_denials(const struct stats_snap *s)
{
	return app_text(s, 1);
}

static uint64_t
g_admin_actions(const struct stats_snap *s)
{
	const struct broker_stats *t = &s->b->stats;

	return t->admin_locks + t->admin_sessions + t->admin_kills +
	    t->admin_frees;
}

static uint64_t
g_admin_locks(const struct stats_snap *s)
{
	return s->b->stats.admin_locks;
}

static uint64_t
g_admin_sessions(const struct stats_snap *s)
{
	return s->b->stats.admin_sessions;
}

static uint64_t
g_admin_kills(const struct stats_snap *s)
{
	return s->b->stats.admin_kills;
}

static uint64_t
g_admin_frees(const struct stats_snap *s)
{
	return s->b->stats.admin_frees;
}

static uint64_t
g_lease_ms(const struct stats_snap *s)
{
	long long ms = store_lease_ms(s->b->store);

	return ms > 0 ? (uint64_t)ms : 0;
}

static const char *
t_lease_ms(const struct stats_snap *s)
{
	static char buf[24];		/* one STATS line at a time */
	long long ms = store_lease_ms(s->b->store);

	if (ms < 0)
		return "-";
	snprintf(buf, sizeof buf, "%lld", ms);
	return buf;
}

static const char *
t_redis(const struct stats_snap *s)
{
	return store_is_up(s->b->store) ? "up" : "down";
}

/* --- the table --------------------------------------------------------- */

#define C STAT_COUNTER
#define G STAT_GAUGE

/* In STATS order: version stays first (clients match "OK version="). */
const struct stat_def stats_table[] = {
	{ "version", STAT_TEXT, "The broker's version.",
	    NULL, NULL, NULL, NULL, t_version },
	{ "uptime_s", G, "Seconds since the broker started.",
	    "lockbroker_uptime_seconds", NULL, NULL, g_uptime, NULL },
	{ "sessions", G, "Client sessions connected now.",
	    "lockbroker_sessions", NULL, NULL, g_sessions, NULL },
	{ "locks_held", G, "Keys held by this broker's sessions now.",
	    "lockbroker_locks_held", NULL, NULL, g_locks_held, NULL },
	{ "waiters", G, "ACQUIRE requests waiting now.",
	    "lockbroker_waiters", NULL, NULL, g_waiters, NULL },
	{ "keys", G, "Lock table entries now (held, waited for, or with a "
	    "Redis call in flight).",
	    "lockbroker_keys", NULL, NULL, g_keys, NULL },
	{ "acquires", C, "ACQUIREs answered OK (new or reentrant).",
	    "lockbroker_acquires_total", "outcome=\"ok\"",
	    "ACQUIRE requests answered, by outcome.", g_acquires, NULL },
	{ "busy", C, "ACQUIREs answered BUSY.",
	    "lockbroker_acquires_total", "outcome=\"busy\"", NULL, g_busy,
	    NULL },
	{ "acquire_errors", C, "ACQUIREs answered ERR.",
	    "lockbroker_acquires_total", "outcome=\"error\"", NULL,
	    g_acquire_errors, NULL },
	{ "releases", C, "Locks freed in Redis by RELEASE or a session's end "
	    "(an early handoff counts when made).",
	    "lockbroker_releases_total", NULL, NULL, g_releases, NULL },
	{ "renewals", C, "Keys renewed in Redis.",
	    "lockbroker_renewals_total", NULL, NULL, g_renewals, NULL },
	{ "lost", C, "Held locks lost, whatever the cause (the lost_* fields "
	    "by cause; /metrics has them only, as lockbroker_lost_locks_total"
	    "{cause=...}).",
	    NULL, NULL, NULL, g_lost, NULL },
	{ "reclaimed", C, "Held locks set again in Redis after a master "
	    "change lost them.",
	    "lockbroker_reclaimed_locks_total", NULL, NULL, g_reclaimed, NULL },
	{ "orphans", C, "Grants made for sessions already gone, released "
	    "again.",
	    "lockbroker_orphans_total", NULL, NULL, g_orphans, NULL },
	{ "handoffs", C, "Releases that granted the key to a local waiter in "
	    "the same Redis call, or at once.",
	    "lockbroker_handoffs_total", NULL, NULL, g_handoffs, NULL },
	{ "early_handoffs", C, "Handoffs granted at once, before Redis heard "
	    "of them (it is brought up to date behind them).",
	    "lockbroker_early_handoffs_total", NULL, NULL, g_early_handoffs,
	    NULL },
	{ "fair_yields", C, "Releases that let a waiter on another broker "
	    "try first.",
	    "lockbroker_fair_yields_total", NULL, NULL, g_fair_yields, NULL },
	{ "accepted", C, "Client connections accepted.",
	    "lockbroker_sessions_accepted_total", NULL, NULL, g_accepted,
	    NULL },
	{ "refused", C, "Client connections refused at max_sessions.",
	    "lockbroker_sessions_refused_total", NULL, NULL, g_refused, NULL },
	{ "toolong", C, "Sessions closed for a line longer than max_line.",
	    "lockbroker_toolong_total", NULL, NULL, g_toolong, NULL },
	{ "paused", C, "Times a session stopped taking requests because "
	    "its client did not read its replies.",
	    "lockbroker_paused_total", NULL, NULL, g_paused, NULL },
	{ "auth_failures", C, "AUTH requests with a wrong token.",
	    "lockbroker_auth_failures_total", NULL, NULL, g_auth_failures,
	    NULL },
	{ "grace_sessions", G, "Grace sessions (HELLO ... GRACE or RESUME) "
	    "now, with a connection or without.",
	    "lockbroker_grace_sessions", NULL, NULL, g_grace_sessions, NULL },
	{ "detached", G, "Grace sessions whose connection ended without QUIT "
	    "and whose grace runs now.",
	    "lockbroker_detached_sessions", NULL, NULL, g_detached, NULL },
	{ "resumes", C, "RESUMEs answered OK.",
	    "lockbroker_resumes_total", NULL, NULL, g_resumes, NULL },
	{ "resume_refused", C, "RESUMEs with a wrong secret.",
	    "lockbroker_resume_refused_total", NULL, NULL, g_resume_refused,
	    NULL },
	{ "grace_expired", C, "Detached grace sessions whose grace ran out "
	    "(their locks were freed).",
	    "lockbroker_grace_expired_total", NULL, NULL, g_grace_expired,
	    NULL },
	{ "redis", G, "Whether the Redis command connection is ready: "
	    "STATS says up or down, /metrics 1 or 0.",
	    "lockbroker_redis_up", NULL, NULL, g_redis_up, t_redis },
	{ "redis_inflight", G, "Redis commands sent and not answered yet.",
	    "lockbroker_redis_inflight", NULL, NULL, g_redis_inflight, NULL },
	{ "redis_reconnects", C, "Times the Redis command connection was "
	    "lost.",
	    "lockbroker_redis_reconnects_total", NULL, NULL,
	    g_redis_reconnects, NULL },
	{ "redis_master", STAT_TEXT, "The Redis master in use (ip:port, or "
	    "host:port when it was given by name), or - when none.", NULL,
	    NULL, NULL, NULL, t_redis_master },
	{ "redis_tenures", C, "Redis master tenures (replication ids) seen: "
	    "1 + failovers and Redis restarts.",
	    "lockbroker_redis_tenures_total", NULL, NULL, g_redis_tenures,
	    NULL },
	{ "replica_acks_missed", C, "Grants undone because WAIT did not "
	    "confirm redis_replica_acks replicas in time.",
	    "lockbroker_replica_acks_missed_total", NULL, NULL, g_acks_missed,
	    NULL },
	{ "redis_nodes", G, "Redis masters with a command connection up "
	    "(cluster mode: of those serving slots; otherwise 0 or 1).",
	    "lockbroker_redis_nodes_up", NULL, NULL, g_redis_nodes, NULL },
	{ "redis_redirects", C, "Cluster MOVED and ASK replies followed.",
	    "lockbroker_redis_redirects_total", NULL, NULL,
	    g_redis_redirects, NULL },
	{ "redis_map_changes", C, "Cluster slot maps applied that changed "
	    "which master serves a slot (the first map included).",
	    "lockbroker_redis_map_changes_total", NULL, NULL,
	    g_redis_map_changes, NULL },
	{ "redis_node_stats", STAT_TEXT, "Each master as "
	    "host:port/up|down/in-flight/redirections, comma-separated.",
	    NULL, NULL, NULL, NULL, t_redis_node_stats },
	/* access lists (per-app samples: metrics.c) */
	{ "denials", C, "Requests answered ERR DENIED (a key outside the "
	    "session's app's patterns, or an admin word from a session that "
	    "may not use it).",
	    "lockbroker_denials_total", NULL, NULL, g_denials, NULL },
	{ "app_sessions", STAT_TEXT, "Sessions per app now, as "
	    "name:n,name:n (- without an access list).",
	    NULL, NULL, NULL, NULL, t_app_sessions },
	{ "app_denials", STAT_TEXT, "ERR DENIED answers per app since start, "
	    "as name:n,name:n.",
	    NULL, NULL, NULL, NULL, t_app_denials },
	{ "tls_sessions", G, "Client sessions over TLS now (of sessions).",
	    "lockbroker_tls_sessions", NULL, NULL, g_tls_sessions, NULL },
	{ "tls_handshakes", C, "TLS handshakes completed (counted when "
	    "the handshake completes, before its session is made).",
	    "lockbroker_tls_handshakes_total", NULL, NULL, g_tls_handshakes,
	    NULL },
	{ "tls_handshake_failures", C, "TLS handshakes that failed or were "
	    "not done within tls_handshake_timeout_ms.",
	    "lockbroker_tls_handshake_failures_total", NULL, NULL,
	    g_tls_handshake_failures, NULL },
	{ "tls_handshaking", G, "TLS connections in their handshake now (not "
	    "sessions yet; they count against max_sessions).",
	    "lockbroker_tls_handshaking", NULL, NULL, g_tls_handshaking,
	    NULL },
	/* lost locks by cause: their sum is lost */
	{ "lost_expired", C, "Held locks lost because Redis no longer had "
	    "them (their TTL ran out there, or they were deleted).",
	    "lockbroker_lost_locks_total", "cause=\"expired\"",
	    "Held locks lost, by cause.", g_lost_expired, NULL },
	{ "lost_taken", C, "Held locks lost because Redis showed another "
	    "holder.",
	    "lockbroker_lost_locks_total", "cause=\"taken\"", NULL,
	    g_lost_taken, NULL },
	{ "lost_jeopardy", C, "Held locks lost because no renewal was "
	    "confirmed within their TTL (counted from its send): the broker "
	    "could no longer vouch for them.",
	    "lockbroker_lost_locks_total", "cause=\"jeopardy\"", NULL,
	    g_lost_jeopardy, NULL },
	{ "lost_failover", C, "Held locks lost because a new master tenure "
	    "(a failover, a Redis restart) did not keep them.",
	    "lockbroker_lost_locks_total", "cause=\"failover\"", NULL,
	    g_lost_failover, NULL },
	{ "lease_ms", G, "Sentinel mode: ms the Sentinel lease has left (0: "
	    "none, so nothing is granted or renewed); - in other modes "
	    "(/metrics: lockbroker_sentinel_lease_seconds, Sentinel mode "
	    "only).",
	    NULL, NULL, NULL, g_lease_ms, t_lease_ms },
	/* the admin words: their sum is admin_actions */
	{ "admin_actions", C, "Admin requests made by admin sessions (LOCKS "
	    "pages, SESSIONS pages, KILL, FREE; the admin_* fields by word; "
	    "/metrics has them only, as lockbroker_admin_actions_total"
	    "{action=...}).",
	    NULL, NULL, NULL, g_admin_actions, NULL },
	{ "admin_locks", C, "LOCKS pages asked for by admin sessions.",
	    "lockbroker_admin_actions_total", "action=\"locks\"",
	    "Admin requests made, by word.", g_admin_locks, NULL },
	{ "admin_sessions", C, "SESSIONS pages asked for by admin sessions.",
	    "lockbroker_admin_actions_total", "action=\"sessions\"", NULL,
	    g_admin_sessions, NULL },
	{ "admin_kills", C, "KILLs made by admin sessions (of a session that "
	    "existed or not).",
	    "lockbroker_admin_actions_total", "action=\"kill\"", NULL,
	    g_admin_kills, NULL },
	{ "admin_frees", C, "FREEs sent to Redis by admin sessions.",
	    "lockbroker_admin_actions_total", "action=\"free\"", NULL,
	    g_admin_frees, NULL },
};

#undef C
#undef G

const size_t stats_count = sizeof stats_table / sizeof stats_table[0];

void
stats_take(const struct broker *b, struct stats_snap *out)
{
	out->b = b;
	locks_get_stats(b->locks, &out->ls);
	out->now_ms = now_ms();
}

int
stats_line(const struct broker *b, struct evbuffer *out)
{
	struct stats_snap snap;

	stats_take(b, &snap);
	if (evbuffer_add(out, "OK", 2) != 0)
		return -1;
	for (size_t i = 0; i < stats_count; i++) {
		const struct stat_def *d = &stats_table[i];
		int rc;

		if (d->text != NULL)
			rc = evbuffer_add_printf(out, " %s=%s", d->name,
			    d->text(&snap));
		else
			rc = evbuffer_add_printf(out, " %s=%llu", d->name,
			    (unsigned long long)d->get(&snap));
		if (rc < 0)
			return -1;
	}
	return evbuffer_add(out, "\r\n", 2);
}
