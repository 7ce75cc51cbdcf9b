/*
 * config.c - the options table, and the conf file / argv parsers over it.
 *
 * Values are parsed from text in one place (opt_parse) whether they come
 * from the defaults column, a conf file or --name value, so a default can
 * never be something the parser would refuse.
 */
#include "config.h"
#include "addr.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*
 * Value types.  Each has one parser in opt_parse; an address type calls the
 * parser of addr.c that the listener or the store uses on the same value,
 * so "-t" cannot pass what start-up refuses (one parser per value).
 */
enum opt_type {
	T_INT,				/* decimal, within min..max */
	T_STR,				/* length within min..max */
	T_LEVEL,			/* a log level name */
	T_OCTAL,			/* file mode bits, within min..max */
	T_LISTEN,			/* a numeric IP to listen on */
	T_ENDPOINT,			/* host:port, [IPv6]:port, unix:/path */
	T_ENDPOINTS,			/* host:port,... (no unix); "" = none */
	T_CHOICE,			/* one word of choices, stored as its
					   index */
	T_TLSPROTO,			/* config_tls_protocols */
	T_NAMESERVER			/* "" or addr_parse_nameserver */
};

struct opt {
	const char *name;
	enum opt_type type;
	size_t off;			/* offset in struct config */
	const char *def;		/* default, as text */
	long min, max;			/* bounds for T_INT and T_OCTAL; length
					   bounds for T_STR */
	int live;			/* SIGHUP applies it without a restart */
	const char *help;
	const char *const *choices;	/* T_CHOICE: the words, NULL-ended */
};

/* A yes/no option's words, stored as 0 and 1. */
static const char *const no_yes_words[] = { "no", "yes", NULL };

/* tls_auth_clients' words, in enum tls_auth order. */
static const char *const tls_auth_words[] = { "no", "yes", "optional",
    NULL };

#define OFF(f) offsetof(struct config, f)

static const struct opt opts[] = {
	{ .name = "bind", .type = T_LISTEN, .off = OFF(bind),
	  .def = "127.0.0.1",
	  .help = "address the TCP listener binds (numeric IPv4 or IPv6)" },
	{ .name = "port", .type = T_INT, .off = OFF(port), .def = "7711",
	  .min = 0, .max = 65535,
	  .help = "TCP port for clients (0: no plain TCP listener; needs "
	  "tls_port or unixsocket)" },
	{ .name = "unixsocket", .type = T_STR, .off = OFF(unixsocket),
	  .def = "", .min = 0, .max = 107,
	  .help = "path of a unix socket listener beside TCP (empty: none)" },
	{ .name = "unixsocketperm", .type = T_OCTAL, .off = OFF(unixsocketperm),
	  .def = "0660", .min = 0, .max = 0777,
	  .help = "mode of the unix socket file, in octal" },
	{ .name = "tcp_keepalive_s", .type = T_INT, .off = OFF(tcp_keepalive_s),
	  .def = "10", .min = 0, .max = 7200, .live = 1,
	  .help = "TCP keepalive idle time for clients (0: off); a dead peer "
	  "is found after about 3x this, pending replies or not" },
	{ .name = "auth_token", .type = T_STR, .off = OFF(auth_token),
	  .def = "", .min = 0, .max = 64, .live = 1,
	  .help = "when set, sessions must send AUTH <token> before other "
	  "commands (PING and QUIT aside)" },
	{ .name = "acl_file", .type = T_STR, .off = OFF(acl_file),
	  .def = "", .min = 0, .max = 4095, .live = 1,
	  .help = "per-app access list: 'app NAME token-sha256 HEX keys "
	  "GLOB,...' lines; sessions then AUTH as an app and may use only "
	  "its keys (empty: none)" },
	{ .name = "admin_local", .type = T_CHOICE, .off = OFF(admin_local),
	  .def = "yes", .live = 1, .choices = no_yes_words,
	  .help = "without an acl_file, sessions on the unix socket or a "
	  "loopback address may use the admin words LOCKS, SESSIONS, KILL "
	  "and FREE (no: nobody may; with an acl_file, apps marked admin)" },
	{ .name = "tls_port", .type = T_INT, .off = OFF(tls_port),
	  .def = "0", .min = 0, .max = 65535,
	  .help = "TCP port of a TLS listener on bind, beside port (0: "
	  "none); needs tls_cert_file and tls_key_file" },
	{ .name = "tls_cert_file", .type = T_STR, .off = OFF(tls_cert_file),
	  .def = "", .min = 0, .max = 4095, .live = 1,
	  .help = "the server's certificate chain, PEM, leaf first" },
	{ .name = "tls_key_file", .type = T_STR, .off = OFF(tls_key_file),
	  .def = "", .min = 0, .max = 4095, .live = 1,
	  .help = "the private key of tls_cert_file, PEM, unencrypted" },
	{ .name = "tls_ca_cert_file", .type = T_STR,
	  .off = OFF(tls_ca_cert_file), .def = "", .min = 0, .max = 4095,
	  .live = 1,
	  .help = "CA certificates (PEM) that client certificates must chain "
	  "to; needed by tls_auth_clients yes or optional" },
	{ .name = "tls_auth_clients", .type = T_CHOICE,
	  .off = OFF(tls_auth_clients), .def = "no", .live = 1,
	  .choices = tls_auth_words,
	  .help = "client certificates: no (not asked for), yes (required, "
	  "signed by tls_ca_cert_file) or optional (verified when sent)" },
	{ .name = "tls_protocols", .type = T_TLSPROTO, .off = OFF(tls_protocols),
	  .def = "TLSv1.2 TLSv1.3", .live = 1,
	  .help = "TLS versions accepted, from TLSv1.2 and TLSv1.3, "
	  "blank-separated" },
	{ .name = "tls_handshake_timeout_ms", .type = T_INT,
	  .off = OFF(tls_handshake_timeout_ms), .def = "5000", .min = 100,
	  .max = 600000, .live = 1,
	  .help = "a TLS client that has not finished its handshake this long "
	  "after connecting is disconnected" },
	{ .name = "redis", .type = T_ENDPOINT, .off = OFF(redis),
	  .def = "127.0.0.1:6379",
	  .help = "Redis address: host:port (a host name or numeric IPv4 "
	  "host), [IPv6]:port or unix:/path; names are resolved on every "
	  "connect, never at start-up only" },
	{ .name = "redis_password", .type = T_STR, .off = OFF(redis_password),
	  .def = "", .min = 0, .max = 255,
	  .help = "password sent with AUTH on every connect (empty: none)" },
	{ .name = "redis_user", .type = T_STR, .off = OFF(redis_user),
	  .def = "", .min = 0, .max = 255,
	  .help = "ACL user for AUTH (empty: the default user)" },
	{ .name = "redis_sentinels", .type = T_ENDPOINTS,
	  .off = OFF(redis_sentinels), .def = "",
	  .help = "Sentinel mode: sentinel addresses, host:port,host:port,... "
	  "(host names or numeric hosts); the broker follows the master they "
	  "name, by number or by name (exclusive with redis)" },
	{ .name = "redis_cluster", .type = T_ENDPOINTS,
	  .off = OFF(redis_cluster), .def = "",
	  .help = "Cluster mode: seed nodes of a Redis Cluster, host:port,... "
	  "(host names or numeric hosts); keys are routed by slot to their "
	  "masters "
	  "(exclusive with redis and the Sentinel options)" },
	{ .name = "redis_master_name", .type = T_STR,
	  .off = OFF(redis_master_name), .def = "", .min = 0, .max = 255,
	  .help = "Sentinel mode: the monitored master's name" },
	{ .name = "redis_sentinel_password", .type = T_STR,
	  .off = OFF(redis_sentinel_password), .def = "", .min = 0, .max = 255,
	  .help = "password sent with AUTH to the sentinels (empty: none)" },
	{ .name = "redis_sentinel_user", .type = T_STR,
	  .off = OFF(redis_sentinel_user), .def = "", .min = 0, .max = 255,
	  .help = "ACL user for AUTH to the sentinels (empty: default)" },
	{ .name = "sentinel_lease_ms", .type = T_INT,
	  .off = OFF(sentinel_lease_ms), .def = "0", .min = 0, .max = 600000,
	  .help = "Sentinel mode: the longest one sentinel's answer vouches for "
	  "the master (0: as long as its down-after-milliseconds allows); "
	  "without a majority vouching the broker grants and renews nothing" },
	{ .name = "failover_lock_delay_ms", .type = T_INT,
	  .off = OFF(failover_lock_delay_ms), .def = "5000", .min = 0,
	  .max = 600000,
	  .help = "after Redis changes master (a failover, or any restart) no "
	  "broker grants a key that is absent for this long, so brokers first "
	  "reclaim the locks they held" },
	{ .name = "redis_replica_acks", .type = T_INT,
	  .off = OFF(redis_replica_acks), .def = "0", .min = 0, .max = 16,
	  .help = "a grant is answered OK only once WAIT says this many "
	  "replicas have it (0: no WAIT)" },
	{ .name = "redis_replica_ack_timeout_ms", .type = T_INT,
	  .off = OFF(redis_replica_ack_timeout_ms), .def = "500", .min = 1,
	  .max = 60000,
	  .help = "how long WAIT may take; a grant not acknowledged by then "
	  "is undone and answered ERR UNAVAILABLE" },
	{ .name = "redis_timeout_ms", .type = T_INT,
	  .off = OFF(redis_timeout_ms), .def = "1000", .min = 50, .max = 60000,
	  .help = "a Redis connect or reply slower than this drops the "
	  "connection" },
	{ .name = "redis_resolve_interval_ms", .type = T_INT,
	  .off = OFF(redis_resolve_interval_ms), .def = "30000", .min = 0,
	  .max = 86400000,
	  .help = "a Redis host name is looked up on every connect and again "
	  "this often while connected; a new answer moves the connection "
	  "(0: on connect only)" },
	{ .name = "dns_nameserver", .type = T_NAMESERVER,
	  .off = OFF(dns_nameserver), .def = "",
	  .help = "ip or ip:port ([IPv6]:port) of the one DNS server to ask "
	  "for Redis host names, instead of /etc/resolv.conf's (empty: "
	  "resolv.conf); /etc/hosts is read either way" },
	{ .name = "prefix", .type = T_STR, .off = OFF(prefix),
	  .def = "lockbroker", .min = 1, .max = 64,
	  .help = "prefix of every Redis key and channel the broker uses" },
	{ .name = "fenced_write_keys", .type = T_STR,
	  .off = OFF(fenced_write_keys), .def = "", .min = 0, .max = 4095,
	  .live = 1,
	  .help = "data keys SETIF and DELIF may write for sessions of no "
	  "acl_file app: GLOB,... as in acl_file's keys, never '<prefix>:' "
	  "names (empty: fenced writes off)" },
	{ .name = "default_ttl_ms", .type = T_INT, .off = OFF(default_ttl_ms),
	  .def = "30000", .min = 1, .max = 2147483647, .live = 1,
	  .help = "TTL of a lock in Redis when ACQUIRE gives none" },
	{ .name = "min_ttl_ms", .type = T_INT, .off = OFF(min_ttl_ms),
	  .def = "250", .min = 1, .max = 2147483647, .live = 1,
	  .help = "smallest TTL a lock gets (smaller ones are raised to it)" },
	{ .name = "max_ttl_ms", .type = T_INT, .off = OFF(max_ttl_ms),
	  .def = "600000", .min = 1, .max = 2147483647, .live = 1,
	  .help = "largest TTL a client may ask for (larger ones are "
	  "clamped)" },
	{ .name = "max_delay_ms", .type = T_INT, .off = OFF(max_delay_ms),
	  .def = "60000", .min = 0, .max = 86400000, .live = 1,
	  .help = "largest ACQUIRE ... DELAY (lock delay after a holder's "
	  "session ended without QUIT); larger ones answer ERR BADARG" },
	{ .name = "max_wait_ms", .type = T_INT, .off = OFF(max_wait_ms),
	  .def = "2147483647", .min = 0, .max = 2147483647, .live = 1,
	  .help = "longest WAIT honoured (larger ones are clamped)" },
	{ .name = "max_grace_ms", .type = T_INT, .off = OFF(max_grace_ms),
	  .def = "60000", .min = 0, .max = 86400000, .live = 1,
	  .help = "longest HELLO ... GRACE honoured (larger ones are "
	  "clamped); 0 refuses GRACE" },
	{ .name = "max_line", .type = T_INT, .off = OFF(max_line),
	  .def = "4096", .min = 64, .max = 1048576,
	  .help = "longest request line in bytes; longer closes the "
	  "connection" },
	{ .name = "max_key_len", .type = T_INT, .off = OFF(max_key_len),
	  .def = "256", .min = 1, .max = 4096, .live = 1,
	  .help = "longest key in bytes" },
	{ .name = "max_sessions", .type = T_INT, .off = OFF(max_sessions),
	  .def = "10000", .min = 1, .max = 1000000, .live = 1,
	  .help = "most client connections at once; more are refused with "
	  "ERR LIMIT" },
	{ .name = "max_locks_per_session", .type = T_INT,
	  .off = OFF(max_locks_per_session), .def = "1000", .min = 1,
	  .max = 1000000, .live = 1,
	  .help = "most distinct keys one session may hold" },
	{ .name = "max_waiters_per_session", .type = T_INT,
	  .off = OFF(max_waiters_per_session), .def = "1000", .min = 1,
	  .max = 1000000, .live = 1,
	  .help = "most ACQUIRE ... ASYNC waits one session may have queued" },
	{ .name = "max_watches_per_session", .type = T_INT,
	  .off = OFF(max_watches_per_session), .def = "1000", .min = 1,
	  .max = 1000000, .live = 1,
	  .help = "most keys one session may WATCH at once" },
	{ .name = "max_waiters", .type = T_INT, .off = OFF(max_waiters),
	  .def = "100000", .min = 1, .max = 10000000, .live = 1,
	  .help = "most ACQUIREs waiting at once across all sessions" },
	{ .name = "log_level", .type = T_LEVEL, .off = OFF(log_level),
	  .def = "info", .live = 1,
	  .help = "error, warn, info or debug (-v raises it to debug)" },
	{ .name = "metrics_bind", .type = T_LISTEN, .off = OFF(metrics_bind),
	  .def = "127.0.0.1",
	  .help = "address of the Prometheus /metrics HTTP endpoint "
	  "(numeric IPv4 or IPv6)" },
	{ .name = "metrics_port", .type = T_INT, .off = OFF(metrics_port),
	  .def = "0", .min = 0, .max = 65535,
	  .help = "port of the /metrics endpoint (0: off)" },
	{ .name = "metrics_max_connections", .type = T_INT,
	  .off = OFF(metrics_max_connections), .def = "64", .min = 1,
	  .max = 100000,
	  .help = "most /metrics connections open at once; a new one past "
	  "it is closed at once" },
	{ .name = "metrics_timeout_ms", .type = T_INT,
	  .off = OFF(metrics_timeout_ms), .def = "5000", .min = 100,
	  .max = 600000,
	  .help = "time a /metrics connection has for each request (from "
	  "its start or the previous answer), idle keep-alive included" },
};

#define NOPTS (sizeof opts / sizeof opts[0])

/* Whether the option's field is a char * (else a long). */
static int
opt_is_text(const struct opt *o)
{
	return o->type == T_STR || o->type == T_LISTEN ||
	    o->type == T_ENDPOINT || o->type == T_ENDPOINTS ||
	    o->type == T_TLSPROTO || o->type == T_NAMESERVER;
}

/* Replace the string at p with a copy of value. */
static void
text_set(char *p, const char *value)
{
	char **s = (char **)(void *)p;

	free(*s);
	*s = xstrndup(value, strlen(value));
}

static const struct opt *
opt_find(const char *name)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (strcmp(opts[i].name, name) == 0)
			return &opts[i];
	return NULL;
}

int
config_has(const char *name)
{
	return opt_find(name) != NULL;
}

static int
opt_parse(struct config *cfg, const struct opt *o, const char *value,
    char *err, size_t errlen)
{
	char *p = (char *)cfg + o->off;

	switch (o->type) {
	case T_INT: {
		char *end;
		long v;

		errno = 0;
		v = strtol(value, &end, 10);
		if (errno != 0 || end == value || *end != '\0') {
			snprintf(err, errlen, "%s: '%s' is not an integer",
			    o->name, value);
			return -1;
		}
		if (v < o->min || v > o->max) {
			snprintf(err, errlen, "%s: %ld is out of range %ld..%ld",
			    o->name, v, o->min, o->max);
			return -1;
		}
		*(long *)(void *)p = v;
		return 0;
	}
	case T_STR: {
		size_t len = strlen(value);

		if ((long)len < o->min || (long)len > o->max) {
			snprintf(err, errlen, "%s: length must be %ld..%ld",
			    o->name, o->min, o->max);
			return -1;
		}
		text_set(p, value);
		return 0;
	}
	case T_LISTEN:
	case T_ENDPOINT: {
		/* Parsed here only to be checked: the listener and the store
		 * parse the kept text again with the same function. */
		struct addr a;
		char msg[256];
		int rc = o->type == T_LISTEN ?
		    addr_parse_listen(value, &a, msg, sizeof msg) :
		    addr_parse_endpoint(value, &a, msg, sizeof msg);

		if (rc != 0) {
			snprintf(err, errlen, "%s: %s", o->name, msg);
			return -1;
		}
		text_set(p, value);
		return 0;
	}
	case T_NAMESERVER: {
		struct addr a;
		char msg[256];

		if (value[0] != '\0' &&
		    addr_parse_nameserver(value, &a, msg, sizeof msg) != 0) {
			snprintf(err, errlen, "%s: %s", o->name, msg);
			return -1;
		}
		text_set(p, value);
		return 0;
	}
	case T_ENDPOINTS: {
		/* each item by the parser the sentinel code uses on it */
		char item[300], msg[256];
		const char *v = value;
		struct addr a;

		while (*v != '\0') {
			size_t n = strcspn(v, ",");

			if (n == 0 || n >= sizeof item) {
				snprintf(err, errlen, "%s: empty or overlong item "
				    "in '%s'", o->name, value);
				return -1;
			}
			memcpy(item, v, n);
			item[n] = '\0';
			if (addr_parse_endpoint(item, &a, msg, sizeof msg) != 0 ||
			    a.is_unix) {
				snprintf(err, errlen, "%s: %s", o->name, a.is_unix ?
				    "unix sockets are not supported here" : msg);
				return -1;
			}
			v += n;
			if (*v == ',' && *++v == '\0') {
				snprintf(err, errlen, "%s: trailing comma in '%s'",
				    o->name, value);
				return -1;
			}
		}
		text_set(p, value);
		return 0;
	}
	case T_OCTAL: {
		char *end;
		long v;

		errno = 0;
		v = strtol(value, &end, 8);
		if (errno != 0 || end == value || *end != '\0' || v < o->min ||
		    v > o->max) {
			snprintf(err, errlen, "%s: '%s' is not an octal mode "
			    "0..0777", o->name, value);
			return -1;
		}
		*(long *)(void *)p = v;
		return 0;
	}
	case T_CHOICE: {
		size_t n = 0;

		for (; o->choices[n] != NULL; n++) {
			if (strcasecmp(value, o->choices[n]) == 0) {
				*(long *)(void *)p = (long)n;
				return 0;
			}
		}
		snprintf(err, errlen, "%s: '%s' is not one of", o->name, value);
		for (size_t i = 0; i < n; i++) {
			size_t used = strlen(err);

			snprintf(err + used, errlen > used ? errlen - used : 0,
			    "%s %s", i == 0 ? "" : i + 1 == n ? " or" : ",",
			    o->choices[i]);
		}
		return -1;
	}
	case T_TLSPROTO: {
		unsigned mask;
		char msg[256];

		if (config_tls_protocols(value, &mask, msg, sizeof msg) != 0) {
			snprintf(err, errlen, "%s: %s", o->name, msg);
			return -1;
		}
		text_set(p, value);
		return 0;
	}
	case T_LEVEL: {
		int lv = log_level_parse(value);

		if (lv < 0) {
			snprintf(err, errlen, "%s: '%s' is not one of error, "
			    "warn, info, debug", o->name, value);
			return -1;
		}
		*(long *)(void *)p = lv;
		return 0;
	}
	}
	return -1;
}

int
config_tls_protocols(const char *value, unsigned *mask, char *err,
    size_t errlen)
{
	static const struct { const char *word; unsigned bit; } known[] = {
		{ "TLSv1.2", CONFIG_TLS12 }, { "TLSv1.3", CONFIG_TLS13 },
	};
	const char *v = value;

	*mask = 0;
	while (*(v += strspn(v, " \t")) != '\0') {
		size_t n = strcspn(v, " \t"), k;

		for (k = 0; k < sizeof known / sizeof known[0]; k++)
			if (strlen(known[k].word) == n &&
			    strncasecmp(v, known[k].word, n) == 0)
				break;
		if (k == sizeof known / sizeof known[0]) {
			snprintf(err, errlen, "'%.*s' is not TLSv1.2 or TLSv1.3 "
			    "(older versions are not offered)", (int)(n > 32 ?
			    32 : n), v);
			return -1;
		}
		*mask |= known[k].bit;
		v += n;
	}
	if (*mask == 0) {
		snprintf(err, errlen, "no TLS version given (TLSv1.2, "
		    "TLSv1.3)");
		return -1;
	}
	return 0;
}

void
config_init(struct config *cfg)
{
	char err[256];

	memset(cfg, 0, sizeof *cfg);
	for (size_t i = 0; i < NOPTS; i++)
		if (opt_parse(cfg, &opts[i], opts[i].def, err, sizeof err) != 0)
			fatalx("bad built-in default: %s", err);
}

void
config_free(struct config *cfg)
{
	for (size_t i = 0; i < NOPTS; i++) {
		if (opt_is_text(&opts[i])) {
			char **s = (char **)(void *)((char *)cfg + opts[i].off);
			free(*s);
			*s = NULL;
		}
	}
}

int
config_set(struct config *cfg, const char *name, const char *value,
    char *err, size_t errlen)
{
	const struct opt *o = opt_find(name);

	if (o == NULL) {
		snprintf(err, errlen, "unknown option '%s'", name);
		return -1;
	}
	if (o->off == OFF(redis))
		cfg->redis_given = 1;	/* exclusive with the HA modes */
	return opt_parse(cfg, o, value, err, errlen);
}

int
config_load_file(struct config *cfg, const char *path, char *err,
    size_t errlen)
{
	FILE *f = fopen(path, "r");
	char line[1024], msg[512];
	int lineno = 0, rc = 0;

	if (f == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof line, f) != NULL) {
		char *name, *value, *end;
		size_t len = strlen(line);

		lineno++;
		if (len == sizeof line - 1 && line[len - 1] != '\n') {
			snprintf(err, errlen, "%s:%d: line too long", path,
			    lineno);
			rc = -1;
			break;
		}
		name = line + strspn(line, " \t");
		if (*name == '#' || *name == '\n' || *name == '\r' ||
		    *name == '\0')
			continue;
		value = name + strcspn(name, " \t\r\n");
		if (*value != '\0')
			*value++ = '\0';
		value += strspn(value, " \t");
		end = value + strlen(value);
		while (end > value && (end[-1] == '\n' || end[-1] == '\r' ||
		    end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		/* "value" in double quotes: the quotes go ("" is empty). */
		if (end - value >= 2 && value[0] == '"' && end[-1] == '"') {
			*--end = '\0';
			value++;
		}
		if (config_set(cfg, name, value, msg, sizeof msg) != 0) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, msg);
			rc = -1;
			break;
		}
	}
	if (rc == 0 && ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		rc = -1;
	}
	fclose(f);
	return rc;
}

/*
 * min_ttl_ms <= default_ttl_ms <= max_ttl_ms: the lock table raises a TTL
 * to the floor and clamps it to the ceiling, so bounds the wrong way round
 * would make the default itself out of bounds.
 */
int
config_validate(const struct config *cfg, char *err, size_t errlen)
{
	if (cfg->min_ttl_ms > cfg->default_ttl_ms) {
		snprintf(err, errlen, "min_ttl_ms (%ld) exceeds default_ttl_ms "
		    "(%ld): raise default_ttl_ms, or lower min_ttl_ms knowing "
		    "that so short a TTL can expire before its first renewal",
		    cfg->min_ttl_ms, cfg->default_ttl_ms);
		return -1;
	}
	if (cfg->default_ttl_ms > cfg->max_ttl_ms) {
		snprintf(err, errlen, "default_ttl_ms (%ld) exceeds max_ttl_ms "
		    "(%ld)", cfg->default_ttl_ms, cfg->max_ttl_ms);
		return -1;
	}
	if (cfg->redis_sentinels[0] != '\0' && cfg->redis_given) {
		snprintf(err, errlen, "redis and redis_sentinels are exclusive: "
		    "in Sentinel mode the sentinels name the master (remove the "
		    "redis line or option)");
		return -1;
	}
	if (cfg->redis_cluster[0] != '\0' && (cfg->redis_given ||
	    cfg->redis_sentinels[0] != '\0' ||
	    cfg->redis_master_name[0] != '\0')) {
		snprintf(err, errlen, "redis_cluster is exclusive with redis, "
		    "redis_sentinels and redis_master_name: in cluster mode the "
		    "cluster's slot map names the masters");
		return -1;
	}
	if (cfg->redis_cluster[0] != '\0' && strpbrk(cfg->prefix, "{}")) {
		snprintf(err, errlen, "prefix '%s' has a brace: in cluster mode "
		    "the broker's per-slot keys end in a {tag} of their own, "
		    "which a brace in the prefix would override", cfg->prefix);
		return -1;
	}
	if (cfg->redis_sentinels[0] != '\0' &&
	    cfg->redis_master_name[0] == '\0') {
		snprintf(err, errlen, "redis_sentinels needs redis_master_name");
		return -1;
	}
	if (cfg->redis_sentinels[0] == '\0' &&
	    cfg->redis_master_name[0] != '\0') {
		snprintf(err, errlen, "redis_master_name needs redis_sentinels");
		return -1;
	}
	/* Redis ends a WAIT on its 100 ms timer (hz 10): it overshoots */
	if (cfg->redis_replica_acks > 0 &&
	    cfg->redis_replica_ack_timeout_ms + 250 > cfg->redis_timeout_ms) {
		snprintf(err, errlen, "redis_replica_ack_timeout_ms (%ld) must be "
		    "at least 250 below redis_timeout_ms (%ld): a WAIT holds its "
		    "connection that long, and Redis ends it up to ~100 ms late",
		    cfg->redis_replica_ack_timeout_ms, cfg->redis_timeout_ms);
		return -1;
	}
	if (cfg->port == 0 && cfg->tls_port == 0 &&
	    cfg->unixsocket[0] == '\0') {
		snprintf(err, errlen, "port 0 (no plain TCP listener) needs "
		    "tls_port or unixsocket: clients would have nowhere to "
		    "connect");
		return -1;
	}
	if (cfg->tls_port != 0 && cfg->tls_port == cfg->port) {
		snprintf(err, errlen, "tls_port and port are both %ld: give "
		    "the TLS listener a port of its own", cfg->port);
		return -1;
	}
	if (cfg->tls_port != 0 && (cfg->tls_cert_file[0] == '\0' ||
	    cfg->tls_key_file[0] == '\0')) {
		snprintf(err, errlen, "tls_port needs tls_cert_file and "
		    "tls_key_file");
		return -1;
	}
	if (cfg->tls_port != 0 && cfg->tls_auth_clients != TLS_AUTH_NO &&
	    cfg->tls_ca_cert_file[0] == '\0') {
		snprintf(err, errlen, "tls_auth_clients %s needs "
		    "tls_ca_cert_file (the CA client certificates must chain "
		    "to)", tls_auth_words[cfg->tls_auth_clients]);
		return -1;
	}
	if (strchr(cfg->prefix, ' ') != NULL) {
		snprintf(err, errlen, "prefix must not contain spaces");
		return -1;
	}
	return 0;
}

void
config_keep_static(const struct config *cur, struct config *next,
    void (*note)(const char *name))
{
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];
		const char *a = (const char *)cur + o->off;
		char *b = (char *)next + o->off;

		if (o->live)
			continue;
		if (opt_is_text(o)) {
			const char *sa = *(char *const *)(const void *)a;
			char **sb = (char **)(void *)b;
			if (strcmp(sa, *sb) == 0)
				continue;
			free(*sb);
			*sb = xstrndup(sa, strlen(sa));
		} else {
			if (*(const long *)(const void *)a ==
			    *(long *)(void *)b)
				continue;
			*(long *)(void *)b = *(const long *)(const void *)a;
		}
		note(o->name);
	}
}

void
config_usage(FILE *out)
{
	fprintf(out, "options (conf file: 'name value'; command line: "
	    "--name value):\n");
	for (size_t i = 0; i < NOPTS; i++)
		fprintf(out, "  --%-29s %s (default: %s%s)\n", opts[i].name,
		    opts[i].help, opts[i].def[0] ? opts[i].def : "\"\"",
		    opts[i].live ? "; SIGHUP applies it" : "");
}
