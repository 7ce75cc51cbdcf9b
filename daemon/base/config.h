/*
 * config.h - every option of lockbrokerd, defined once in a table.
 *
 * The table in config.c (name, type, default, bounds, help) drives the conf
 * file parser, the --name value command-line form, -h and validation.
 */
#ifndef LOCKBROKER_CONFIG_H
#define LOCKBROKER_CONFIG_H

#include <stddef.h>
#include <stdio.h>

struct config {
	char *bind;			/* numeric IP, checked by addr.c */
	long port;			/* 0 = no plain TCP listener */
	char *unixsocket;		/* "" = no unix socket listener */
	long unixsocketperm;		/* mode bits of the socket file */
	char *metrics_bind;
	long metrics_port;		/* 0 = no metrics endpoint */
	long metrics_max_connections;	/* past it: closed at once */
	long metrics_timeout_ms;	/* per request, and idle keep-alive */
	char *redis;			/* host:port, [IPv6]:port or
					   unix:/path, checked by addr.c */
	char *redis_password;		/* "" = no AUTH */
	char *redis_user;		/* "" = default user */
	int redis_given;		/* redis was set (conf or argv) */
	char *redis_sentinels;		/* "" = single-address mode */
	char *redis_master_name;
	char *redis_cluster;		/* "" = not cluster mode */
	char *redis_sentinel_password;
	char *redis_sentinel_user;
	long sentinel_lease_ms;		/* cap on a sentinel answer's lease;
					   0 = derived (lease.c) */
	long failover_lock_delay_ms;	/* absent keys not granted after a new
					   master tenure for this long */
	long redis_replica_acks;	/* 0 = grants need no WAIT */
	long redis_replica_ack_timeout_ms;
	long redis_timeout_ms;
	long redis_resolve_interval_ms;	/* host names looked up again while
					   connected; 0 = only on connect */
	char *dns_nameserver;		/* "" = /etc/resolv.conf's */
	char *prefix;
	long default_ttl_ms;
	long min_ttl_ms;		/* smaller TTLs are raised to it */
	long max_ttl_ms;		/* larger TTLs are clamped to it */
	long max_wait_ms;
	long max_delay_ms;		/* ACQUIRE ... DELAY's bound */
	long max_grace_ms;		/* HELLO GRACE clamped to it; 0 = off */
	long max_line;
	long max_key_len;
	long max_sessions;
	long max_locks_per_session;
	long max_waiters_per_session;	/* queued ASYNC waits per session */
	long max_watches_per_session;	/* keys WATCHed per session */
	long max_waiters;
	long tcp_keepalive_s;
	char *auth_token;		/* "" = no AUTH needed */
	char *acl_file;			/* "" = no per-app access list */
	char *fenced_write_keys;	/* globs of the data keys SETIF and
					   DELIF may write for sessions of no
					   app; "" = none (front/fenced.c) */
	long admin_local;		/* 1: without acl_file, local sessions
					   may use the admin words */
	long tls_port;			/* 0 = no TLS listener */
	char *tls_cert_file;		/* PEM chain, leaf first */
	char *tls_key_file;
	char *tls_ca_cert_file;		/* "" = client certs not verified */
	long tls_auth_clients;		/* enum tls_auth */
	char *tls_protocols;		/* "TLSv1.2 TLSv1.3", checked by
					   config_tls_protocols */
	long tls_handshake_timeout_ms;
	long log_level;			/* enum log_level */
};

/* tls_auth_clients: whether a client certificate is asked for. */
enum tls_auth {
	TLS_AUTH_NO,			/* not asked for */
	TLS_AUTH_YES,			/* required, and verified */
	TLS_AUTH_OPTIONAL		/* verified when the client sends one */
};

/* tls_protocols, as a set of bits. */
#define CONFIG_TLS12 0x1
#define CONFIG_TLS13 0x2

/*
 * Parse a tls_protocols value: words "TLSv1.2" and "TLSv1.3" (any case)
 * separated by blanks, at least one.  Returns 0 with the CONFIG_TLS* bits
 * in *mask, or -1 with a message in err.  The one parser of the value:
 * the option table checks with it, tls.c builds its context from it.
 */
int config_tls_protocols(const char *value, unsigned *mask, char *err,
    size_t errlen);

/* Fill cfg with every default.  Free with config_free(). */
void config_init(struct config *cfg);
void config_free(struct config *cfg);

/*
 * Set one option from its text value.  Returns 0, or -1 with a message in
 * err (no file/line prefix: the caller adds where it came from).
 */
int config_set(struct config *cfg, const char *name, const char *value,
    char *err, size_t errlen);

/*
 * Read "name value" lines (# comments, blank lines) from path.  Returns 0,
 * or -1 with "FILE:LINE: message" in err.
 */
int config_load_file(struct config *cfg, const char *path, char *err,
    size_t errlen);

/*
 * Cross-option checks: min_ttl_ms <= default_ttl_ms <= max_ttl_ms, no
 * space in prefix.  Returns 0, or -1 with a message naming the options.
 */
int config_validate(const struct config *cfg, char *err, size_t errlen);

/* Print every option with its default and help, for -h. */
void config_usage(FILE *out);

/* Whether name is an option (for the --name value form). */
int config_has(const char *name);

/*
 * For a reload: every option that cannot change while running and differs
 * between cur and next gets cur's value back in next, and its name passed
 * to note (to log that it needs a restart).
 */
void config_keep_static(const struct config *cur, struct config *next,
    void (*note)(const char *name));

#endif
