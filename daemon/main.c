/*
 * main.c - lockbrokerd: options, wiring, signals, teardown.
 *
 * Start-up order: config (file, then command line), log level, open-files
 * limit, event loop, lock table, signal handlers, listener, Redis store.
 * Teardown runs in reverse; on SIGTERM/SIGINT every session is ended first
 * so its locks are released in Redis, and the loop runs on (at most
 * STOP_DRAIN_MS) until those releases are answered -- reconnecting first
 * if the signal came while Redis was away (a stop must free what it can).
 */
#include "acl.h"
#include "broker.h"
#include "clientid.h"
#include "config.h"
#include "grace.h"
#include "keytab.h"
#include "locks.h"
#include "log.h"
#include "notify.h"
#include "store.h"
#include "tls.h"
#include "tokenhash.h"
#include "util.h"

#include <event2/event.h>

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define STOP_DRAIN_MS 2000		/* longest wait for final releases */
#define FD_RESERVE 64			/* fds beyond sessions: Redis, logs */

static void
usage(FILE *out)
{
	fprintf(out,
	    "usage: lockbrokerd [-c FILE] [-b ADDR] [-p PORT] [-s PATH] "
	    "[-r REDIS] [--prefix P]\n"
	    "                   [--OPTION VALUE ...] [-t] [-v] [-h] [-V]\n"
	    "  -c FILE    read options from FILE ('name value' lines)\n"
	    "  -b ADDR    same as --bind ADDR\n"
	    "  -p PORT    same as --port PORT\n"
	    "  -s PATH    same as --unixsocket PATH\n"
	    "  -r REDIS   same as --redis REDIS (host:port or unix:/path)\n"
	    "  -t         check the configuration and exit (0 good, 2 bad);\n"
	    "             Redis host names are resolved at start, not here\n"
	    "  -v         log at debug level\n"
	    "  -h         this help\n"
	    "  -V         print the version and exit\n"
	    "Command-line options override the file.\n\n");
	config_usage(out);
}

/* Raise the soft open-files limit toward what max_sessions needs, and
 * the /metrics connections (metrics_max_connections) when it is on. */
static void
raise_nofile(long sessions, long metrics)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)sessions + (rlim_t)metrics + FD_RESERVE;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
		log_warn("getrlimit: %s", strerror(errno));
		return;
	}
	if (rl.rlim_cur >= want)
		return;
	rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		log_warn("setrlimit: %s", strerror(errno));
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want)
		log_warn("open files limit is %llu: max_sessions %ld (and "
		    "metrics_max_connections %ld) need %llu; raise it "
		    "(LimitNOFILE, ulimit -n)", (unsigned long long)rl.rlim_cur,
		    sessions, metrics, (unsigned long long)want);
	else
		log_info("open files limit raised to %llu",
		    (unsigned long long)rl.rlim_cur);
}

static void
libevent_log(int severity, const char *msg)
{
	if (severity >= EVENT_LOG_ERR)
		log_error("libevent: %s", msg);
	else if (severity >= EVENT_LOG_WARN)
		log_warn("libevent: %s", msg);
	else
		log_debug("libevent: %s", msg);
}

static void
stop_cb(evutil_socket_t sig, short what, void *arg)
{
	struct broker *b = arg;

	(void)what;
	if (b->stopping)
		return;
	log_info("signal %d: releasing every lock and stopping (grace "
	    "sessions' locks are left in Redis for RESUME)", (int)sig);
	event_base_loopbreak(b->base);
	b->stopping = 1;
}

/*
 * After the sessions ended: stop once Redis answered their releases.  A
 * release that could not be sent (Redis away) waits in the lock table's
 * pending list, sent as soon as the store reconnects: wait for that too,
 * within the same budget.
 */
static int
drained(struct broker *b)
{
	if (store_inflight(b->store) != 0)
		return 0;
	return locks_pending(b->locks) == 0;
}

static void
drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct broker *b = arg;
	static int64_t until;

	(void)fd;
	(void)what;
	if (until == 0)
		until = now_ms() + STOP_DRAIN_MS;
	if (drained(b)) {
		event_base_loopbreak(b->base);
	} else if (now_ms() > until) {
		log_warn("stopping with %zu lock releases not confirmed by "
		    "Redis: they expire within their TTL",
		    store_inflight(b->store) + locks_pending(b->locks));
		event_base_loopbreak(b->base);
	}
}

/*
 * Fill cfg from the conf file (-c) and then the command line, which wins.
 * Every config option is accepted as --name VALUE.  Returns 0, or -1 with
 * a message in err.  -h and -V print and exit here.
 */
static int
parse_args(int argc, char **argv, struct config *cfg, int *test_only,
    char *err, size_t errlen)
{
	const char *conf = NULL;
	int verbose = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
			conf = argv[++i];
	}
	if (conf != NULL && config_load_file(cfg, conf, err, errlen) != 0)
		return -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *name = NULL;

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		} else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
			printf("lockbrokerd %s (protocol 1)\n",
			    LOCKBROKER_VERSION);
			exit(0);
		} else if (strcmp(a, "-v") == 0) {
			verbose = 1;
			continue;
		} else if (strcmp(a, "-t") == 0) {
			*test_only = 1;
			continue;
		} else if (strcmp(a, "-c") == 0) {
			i++;
			continue;
		} else if (strcmp(a, "-b") == 0) {
			name = "bind";
		} else if (strcmp(a, "-p") == 0) {
			name = "port";
		} else if (strcmp(a, "-r") == 0) {
			name = "redis";
		} else if (strcmp(a, "-s") == 0) {
			name = "unixsocket";
		} else if (strncmp(a, "--", 2) == 0 && config_has(a + 2)) {
			name = a + 2;
		} else {
			snprintf(err, errlen, "unknown argument '%s' (-h lists "
			    "them)", a);
			return -1;
		}
		if (i + 1 >= argc) {
			snprintf(err, errlen, "%s needs a value", a);
			return -1;
		}
		if (config_set(cfg, name, argv[++i], err, errlen) != 0)
			return -1;
	}
	if (config_validate(cfg, err, errlen) != 0)
		return -1;
	if (verbose)
		cfg->log_level = LL_DEBUG;
	return 0;
}

/*
 * The access list cfg asks for: acl_file, plus auth_token's app "default"
 * (every key) when both are set.  *out is NULL when acl_file is "" (then
 * auth_token alone works exactly as in version 1).  Returns 0, or -1 with
 * the reason in err ("FILE:LINE: message" for a bad line).
 */
static int
acl_from_config(const struct config *cfg, struct acl **out, char *err,
    size_t errlen)
{
	unsigned char hash[ACL_HASH_LEN];
	struct acl *acl;

	*out = NULL;
	if (cfg->acl_file[0] == '\0')
		return 0;
	if ((acl = acl_load(cfg->acl_file, err, errlen)) == NULL)
		return -1;
	if (cfg->auth_token[0] != '\0') {
		if (tokenhash_sha256(cfg->auth_token, strlen(cfg->auth_token),
		    hash) != 0) {
			snprintf(err, errlen, "cannot hash auth_token "
			    "(libcrypto failed)");
			acl_unref(acl);
			return -1;
		}
		if (acl_add_token_app(acl, "default", hash, err, errlen) != 0) {
			acl_unref(acl);
			return -1;
		}
	}
	if (acl_count(acl) == 0)
		log_warn("acl_file %s names no app and auth_token is not set: "
		    "no session can authenticate", cfg->acl_file);
	*out = acl;
	return 0;
}

/* Put acl in force: sessions that authenticated before keep the list
 * they authenticated with (they hold a reference), new AUTHs use this. */
static void
acl_install(struct broker *b, struct acl *acl)
{
	acl_unref(b->acl);
	b->acl = acl;
	appstats_add_acl(b, acl);
	if (acl != NULL)
		log_info("access list in force: %zu apps", acl_count(acl));
}

static void
note_restart(const char *name)
{
	log_warn("option %s changed: it takes effect after a restart", name);
}

static void
locks_cfg_from(const struct config *cfg, struct locks_cfg *lc)
{
	lc->default_ttl_ms = cfg->default_ttl_ms;
	lc->max_ttl_ms = cfg->max_ttl_ms;
	lc->min_ttl_ms = cfg->min_ttl_ms;
	lc->max_wait_ms = cfg->max_wait_ms;
	lc->max_locks_per_session = cfg->max_locks_per_session;
	lc->max_waiters = cfg->max_waiters;
	lc->reclaim_ms = cfg->failover_lock_delay_ms;
}

static void
apply_limits(struct broker *b)
{
	struct locks_cfg lc;

	locks_cfg_from(b->cfg, &lc);
	locks_set_cfg(b->locks, &lc);
	log_set_level((enum log_level)b->cfg->log_level);
}

/* The TLS context of cfg's tls_* options.  NULL with err filled. */
static struct tls *
tls_from_config(const struct config *cfg, char *err, size_t errlen)
{
	const struct tls_cfg tc = {
		.cert_file = cfg->tls_cert_file,
		.key_file = cfg->tls_key_file,
		.ca_cert_file = cfg->tls_ca_cert_file,
		.auth_clients = cfg->tls_auth_clients,
		.protocols = cfg->tls_protocols,
	};

	return tls_new(&tc, err, errlen);
}

/* SIGHUP: read the conf again; apply what can change live. */
static void
reload_cb(evutil_socket_t sig, short what, void *arg)
{
	struct broker *b = arg;
	struct config next;
	struct acl *acl = NULL, *fenced = NULL;
	struct tls *tls = NULL;
	int test_only = 0;
	char err[512];

	(void)sig;
	(void)what;
	notify("RELOADING=1");
	config_init(&next);
	/*
	 * A bad acl_file or bad TLS files fail the whole reload, like a bad
	 * conf line: the old access list, configuration and TLS context stay
	 * in force together (a new tls_auth_clients must never run with the
	 * old CA, nor the old one beside a new configuration: TLS and access
	 * lists change as one).
	 * Every tls_* option the context is built from is live, so next
	 * holds what keep_static would leave of them.
	 */
	if (parse_args(b->argc, b->argv, &next, &test_only, err,
	    sizeof err) != 0 ||
	    acl_from_config(&next, &acl, err, sizeof err) != 0 ||
	    fenced_globs(&next, &fenced, err, sizeof err) != 0 ||
	    (b->tls != NULL &&
	    (tls = tls_from_config(&next, err, sizeof err)) == NULL)) {
		log_error("reload failed, configuration unchanged: %s", err);
		acl_unref(acl);
		acl_unref(fenced);
		config_free(&next);
	} else {
		acl_install(b, acl);
		fenced_install(b, fenced);
		config_keep_static(b->cfg, &next, note_restart);
		config_free(b->cfg);
		*b->cfg = next;
		/* A lowered max_key_len binds new keys only: keys taken under
		 * the old one can still be released (a session can always give
		 * back what it took). */
		if (b->cfg->max_key_len > b->held_key_len)
			b->held_key_len = b->cfg->max_key_len;
		apply_limits(b);
		log_info("configuration reloaded");
		/* New certificates for new connections; live sessions keep
		 * the context they were made with (tls_free). */
		if (tls != NULL) {
			tls_free(b->tls);
			b->tls = tls;
			log_info("TLS certificates reloaded");
		}
	}
	notify("READY=1");
}

/* Store hooks: the lock table's, plus readiness for systemd. */
static void
on_store_up(void *arg)
{
	struct broker *b = arg;

	locks_store_up(b->locks);
	grace_store_up(b);
	if (b->stopping) {
		/* reconnected during shutdown, only to free locks */
	} else if (!b->ready) {
		b->ready = 1;
		notify("READY=1\nSTATUS=serving; Redis %s",
		    store_master(b->store));
	} else {
		notify("STATUS=serving; Redis %s", store_master(b->store));
	}
}

static void
on_store_down(void *arg)
{
	struct broker *b = arg;

	locks_store_down(b->locks);
	if (store_is_up(b->store))	/* cluster mode: one master of several */
		notify("STATUS=serving; Redis %s (a master unreachable; "
		    "reconnecting)", store_master(b->store));
	else
		notify("STATUS=Redis unreachable; reconnecting");
}

static void
on_store_released(void *arg, const char *key, size_t keylen)
{
	locks_store_released(((struct broker *)arg)->locks, key, keylen);
}

static void
on_store_granted(void *arg, const char *key, size_t keylen,
    unsigned long long wid, const char *owner, size_t ownerlen,
    long long token, long long grant_ms)
{
	locks_store_granted(((struct broker *)arg)->locks, key, keylen, wid,
	    owner, ownerlen, token, grant_ms);
}

static void
on_store_changed(void *arg, const char *key, size_t keylen)
{
	locks_store_changed(((struct broker *)arg)->locks, key, keylen);
}

static void
on_store_wanted(void *arg, const char *key, size_t keylen, int writer,
    long long stamp, const char *from)
{
	locks_store_wanted(((struct broker *)arg)->locks, key, keylen, writer,
	    stamp);
	locks_store_waiter_heard(((struct broker *)arg)->locks, from, key,
	    keylen);
}

static void
on_store_queue(void *arg, const char *from, const char *key, size_t keylen,
    unsigned waiters, long oldest_ms)
{
	locks_store_queue(((struct broker *)arg)->locks, from, key, keylen,
	    waiters, oldest_ms);
}

static void
on_store_ask(void *arg, const char *key, size_t keylen, int to_me)
{
	locks_store_ask(((struct broker *)arg)->locks, key, keylen, to_me);
}

static void
on_store_subscribed(void *arg)
{
	locks_store_subscribed(((struct broker *)arg)->locks);
}

static void
on_store_rerouted(void *arg)
{
	locks_store_rerouted(((struct broker *)arg)->locks);
}

/* The admin words' messages (FREE, KILL). */
static void
on_store_freed(void *arg, const char *key, size_t keylen, long long token)
{
	(void)locks_store_freed(((struct broker *)arg)->locks, key, keylen,
	    token);
}

static void
on_store_kill(void *arg, const char *cid, size_t cidlen, const char *request,
    size_t requestlen)
{
	admin_kill_heard(arg, cid, cidlen, request, requestlen);
}

static void
on_store_killed(void *arg, const char *broker, size_t len,
    unsigned long long seq)
{
	admin_killed_heard(arg, broker, len, seq);
}

int
main(int argc, char **argv)
{
	struct config cfg;
	struct broker b;
	struct event *sigterm, *sigint, *sighup, *drain = NULL;
	struct acl *acl = NULL, *fenced = NULL;
	struct timeval tick = { 0, 20 * 1000 };
	char broker_id[CLIENTID_LEN + 1];
	sigset_t stopsigs;
	int test_only = 0, rc = 0;
	char err[512];

	config_init(&cfg);
	if (parse_args(argc, argv, &cfg, &test_only, err, sizeof err) != 0) {
		fprintf(stderr, "lockbrokerd: %s\n", err);
		config_free(&cfg);
		return 2;
	}
	/* The access list, the fenced write keys' globs and the TLS files
	 * are part of the configuration: -t loads them too, and a bad one is
	 * a bad configuration (2). */
	memset(&b, 0, sizeof b);
	if (acl_from_config(&cfg, &acl, err, sizeof err) != 0 ||
	    fenced_globs(&cfg, &fenced, err, sizeof err) != 0 ||
	    (cfg.tls_port != 0 &&
	    (b.tls = tls_from_config(&cfg, err, sizeof err)) == NULL)) {
		fprintf(stderr, "lockbrokerd: %s\n", err);
		acl_unref(acl);
		acl_unref(fenced);
		config_free(&cfg);
		return 2;
	}
	if (test_only) {
		/* -t reads files, not the network: a host name is only
		 * checked for its spelling */
		printf("configuration OK (Redis host names are resolved when "
		    "the broker connects, not by -t)\n");
		acl_unref(acl);
		acl_unref(fenced);
		tls_free(b.tls);
		config_free(&cfg);
		return 0;
	}
	log_set_level((enum log_level)cfg.log_level);
	event_set_log_callback(libevent_log);
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		fatal("signal");
	raise_nofile(cfg.max_sessions, cfg.metrics_port != 0 ?
	    cfg.metrics_max_connections : 0);

	TAILQ_INIT(&b.sessions);
	TAILQ_INIT(&b.handshakes);
	TAILQ_INIT(&b.graces);
	TAILQ_INIT(&b.appstats);
	b.by_id = keytab_new();
	acl_install(&b, acl);
	fenced_install(&b, fenced);
	b.cfg = &cfg;
	b.started_ms = now_ms();
	b.held_key_len = cfg.max_key_len;
	b.linebuf = xmalloc((size_t)cfg.max_line + 2);
	if ((b.base = event_base_new()) == NULL)
		fatalx("cannot create the event loop");

	b.argc = argc;
	b.argv = argv;
	clientid_new(broker_id);	/* tells our own pub/sub messages apart */
	memcpy(b.id, broker_id, sizeof b.id);
	{
		struct locks_cfg lc;
		struct store_cfg sc = {
			.addr = cfg.redis_sentinels[0] ? cfg.redis_master_name :
			    cfg.redis_cluster[0] ? cfg.redis_cluster : cfg.redis,
			.password = cfg.redis_password,
			.user = cfg.redis_user,
			.prefix = cfg.prefix,
			.timeout_ms = cfg.redis_timeout_ms,
			.nameserver = cfg.dns_nameserver,
			.resolve_ms = cfg.redis_resolve_interval_ms,
			.id = broker_id,
			.sentinels = cfg.redis_sentinels,
			.master_name = cfg.redis_master_name,
			.sentinel_password = cfg.redis_sentinel_password,
			.sentinel_user = cfg.redis_sentinel_user,
			.cluster = cfg.redis_cluster,
			.lock_delay_ms = cfg.failover_lock_delay_ms,
			.lease_ms = cfg.sentinel_lease_ms,
			.acks = cfg.redis_replica_acks,
			.ack_timeout_ms = cfg.redis_replica_ack_timeout_ms,
		};
		struct store_hooks hooks = {
			.up = on_store_up, .down = on_store_down,
			.released = on_store_released,
			.changed = on_store_changed, .wanted = on_store_wanted,
			.queue = on_store_queue, .ask = on_store_ask,
			.subscribed = on_store_subscribed,
			.rerouted = on_store_rerouted,
			.freed = on_store_freed, .kill = on_store_kill,
			.killed = on_store_killed,
			.granted = on_store_granted, .arg = &b
		};

		locks_cfg_from(&cfg, &lc);
		b.locks = locks_new(b.base, &lc);
		b.admin = admin_new(&b);
		b.names = names_new(&b);
		/* Handlers before listening: a SIGHUP sent as soon as the port
		 * answers must reload, not kill (SIGHUP's default action). */
		sigterm = evsignal_new(b.base, SIGTERM, stop_cb, &b);
		sigint = evsignal_new(b.base, SIGINT, stop_cb, &b);
		sighup = evsignal_new(b.base, SIGHUP, reload_cb, &b);
		if (!sigterm || !sigint || !sighup ||
		    event_add(sigterm, NULL) != 0 ||
		    event_add(sigint, NULL) != 0 ||
		    event_add(sighup, NULL) != 0)
			fatalx("cannot install signal handlers");
		if (server_listen(&b, err, sizeof err) != 0 ||
		    server_listen_tls(&b, err, sizeof err) != 0 ||
		    server_listen_unix(&b, err, sizeof err) != 0 ||
		    metrics_start(&b, err, sizeof err) != 0) {
			log_error("%s", err);
			rc = 1;
			goto out;
		}
		notify("STATUS=waiting for Redis at %s", sc.addr);
		if ((b.store = store_new(b.base, &sc, &hooks)) == NULL) {
			rc = 2;
			goto out;
		}
		locks_set_store(b.locks, b.store);
	}
	if (cfg.redis_sentinels[0] != '\0')
		log_info("lockbrokerd %s started: master '%s' of sentinels %s, "
		    "prefix '%s', default TTL %ld ms, max_sessions %ld",
		    LOCKBROKER_VERSION, cfg.redis_master_name,
		    cfg.redis_sentinels, cfg.prefix, cfg.default_ttl_ms,
		    cfg.max_sessions);
	else if (cfg.redis_cluster[0] != '\0')
		log_info("lockbrokerd %s started: Redis Cluster seeds %s, "
		    "prefix '%s', default TTL %ld ms, max_sessions %ld",
		    LOCKBROKER_VERSION, cfg.redis_cluster, cfg.prefix,
		    cfg.default_ttl_ms, cfg.max_sessions);
	else
		log_info("lockbrokerd %s started: redis %s, prefix '%s', "
		    "default TTL %ld ms, max_sessions %ld", LOCKBROKER_VERSION,
		    cfg.redis, cfg.prefix, cfg.default_ttl_ms, cfg.max_sessions);

	if (event_base_dispatch(b.base) < 0)
		log_error("event loop failed");

	/* Stop: end every session (their locks are released; a grace
	 * session's are left in Redis for a RESUME elsewhere), then let the
	 * releases reach Redis. */
	notify("STOPPING=1");
	metrics_stop(&b);
	server_stop(&b);
	grace_stop(&b, 0);
	drain = event_new(b.base, -1, EV_PERSIST, drain_cb, &b);
	if (!drained(&b)) {
		store_kick(b.store);
		if (drain != NULL && event_add(drain, &tick) == 0)
			event_base_dispatch(b.base);
	}
out:
	/* Freeing the signal events puts back the default action: a second
	 * SIGTERM from a supervisor must not kill the exit half-way.  The
	 * process ends with them blocked; pending ones are discarded. */
	sigemptyset(&stopsigs);
	sigaddset(&stopsigs, SIGTERM);
	sigaddset(&stopsigs, SIGINT);
	if (sigprocmask(SIG_BLOCK, &stopsigs, NULL) != 0)
		log_warn("sigprocmask: %s", strerror(errno));
	if (rc != 0) {
		metrics_stop(&b);
		server_stop(&b);
	}
	grace_stop(&b, 1);
	if (drain)
		event_free(drain);
	event_free(sigterm);
	event_free(sigint);
	event_free(sighup);
	store_free(b.store);
	/* after the store: its calls' callbacks (answered as failed) may
	 * still name admin requests */
	admin_free(b.admin);
	names_free(b.names);
	locks_free(b.locks);
	tls_free(b.tls);
	event_base_free(b.base);
	acl_unref(b.acl);
	acl_unref(b.fenced);
	appstats_free(&b);
	keytab_free(b.by_id);
	free(b.linebuf);
	if (rc == 0)
		log_info("stopped");
	config_free(&cfg);
	return rc;
}
