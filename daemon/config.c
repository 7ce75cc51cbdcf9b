/*
 * config.c - the options table, and the conf file / argv parsers over it.
 *
 * Values are parsed from text in one place (opt_parse) whether they come
 * from the defaults column, a conf file or --name value, so a default can
 * never be something the parser would refuse.
 */
#include "config.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum opt_type { T_INT, T_STR, T_LEVEL, T_OCTAL };

struct opt {
	const char *name;
	enum opt_type type;
	size_t off;			/* offset in struct config */
	const char *def;		/* default, as text */
	long min, max;			/* bounds for T_INT; max length for T_STR */
	int live;			/* SIGHUP applies it without a restart */
	const char *help;
};

#define OFF(f) offsetof(struct config, f)

static const struct opt opts[] = {
	{ "bind", T_STR, OFF(bind), "127.0.0.1", 0, 255, 0,
	  "address the TCP listener binds (numeric IPv4 or IPv6)" },
	{ "port", T_INT, OFF(port), "7711", 1, 65535, 0,
	  "TCP port for clients" },
	{ "unixsocket", T_STR, OFF(unixsocket), "", 0, 107, 0,
	  "path of a unix socket listener beside TCP (empty: none)" },
	{ "unixsocketperm", T_OCTAL, OFF(unixsocketperm), "0660", 0, 0777, 0,
	  "mode of the unix socket file, in octal" },
	{ "tcp_keepalive_s", T_INT, OFF(tcp_keepalive_s), "10", 0, 7200, 1,
	  "TCP keepalive idle time for clients (0: off); a dead peer is "
	  "found after about 3x this" },
	{ "auth_token", T_STR, OFF(auth_token), "", 0, 64, 1,
	  "when set, sessions must send AUTH <token> before other commands "
	  "(PING and QUIT aside)" },
	{ "redis", T_STR, OFF(redis), "127.0.0.1:6379", 1, 255, 0,
	  "Redis address: host:port (numeric host) or unix:/path" },
	{ "redis_password", T_STR, OFF(redis_password), "", 0, 255, 0,
	  "password sent with AUTH on every connect (empty: none)" },
	{ "redis_user", T_STR, OFF(redis_user), "", 0, 255, 0,
	  "ACL user for AUTH (empty: the default user)" },
	{ "redis_timeout_ms", T_INT, OFF(redis_timeout_ms), "1000", 50, 60000,
	  0, "a Redis connect or reply slower than this drops the connection" },
	{ "prefix", T_STR, OFF(prefix), "lockbroker", 1, 64, 0,
	  "prefix of every Redis key and channel the broker uses" },
	{ "default_ttl_ms", T_INT, OFF(default_ttl_ms), "30000", 1, 2147483647,
	  1, "TTL of a lock in Redis when ACQUIRE gives none" },
	{ "max_ttl_ms", T_INT, OFF(max_ttl_ms), "600000", 1, 2147483647, 1,
	  "largest TTL a client may ask for (larger ones are clamped)" },
	{ "max_wait_ms", T_INT, OFF(max_wait_ms), "2147483647", 0, 2147483647,
	  1, "longest WAIT honoured (larger ones are clamped)" },
	{ "max_line", T_INT, OFF(max_line), "4096", 64, 1048576, 0,
	  "longest request line in bytes; longer closes the connection" },
	{ "max_key_len", T_INT, OFF(max_key_len), "256", 1, 4096, 1,
	  "longest key in bytes" },
	{ "max_sessions", T_INT, OFF(max_sessions), "10000", 1, 1000000, 1,
	  "most client connections at once; more are refused with ERR LIMIT" },
	{ "max_locks_per_session", T_INT, OFF(max_locks_per_session), "1000",
	  1, 1000000, 1, "most distinct keys one session may hold" },
	{ "max_waiters", T_INT, OFF(max_waiters), "100000", 1, 10000000, 1,
	  "most ACQUIREs waiting at once across all sessions" },
	{ "log_level", T_LEVEL, OFF(log_level), "info", 0, 0, 1,
	  "error, warn, info or debug (-v raises it to debug)" },
	{ "metrics_bind", T_STR, OFF(metrics_bind), "127.0.0.1", 1, 255, 0,
	  "address of the Prometheus /metrics HTTP endpoint" },
	{ "metrics_port", T_INT, OFF(metrics_port), "0", 0, 65535, 0,
	  "port of the /metrics endpoint (0: off)" },
};

#define NOPTS (sizeof opts / sizeof opts[0])

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
		char **s = (char **)(void *)p;
		size_t len = strlen(value);

		if ((long)len < o->min || (long)len > o->max) {
			snprintf(err, errlen, "%s: length must be %ld..%ld",
			    o->name, o->min, o->max);
			return -1;
		}
		free(*s);
		*s = xstrndup(value, len);
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
		if (opts[i].type == T_STR) {
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

int
config_validate(const struct config *cfg, char *err, size_t errlen)
{
	if (cfg->default_ttl_ms > cfg->max_ttl_ms) {
		snprintf(err, errlen, "default_ttl_ms (%ld) exceeds max_ttl_ms "
		    "(%ld)", cfg->default_ttl_ms, cfg->max_ttl_ms);
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
		if (o->type == T_STR) {
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
		fprintf(out, "  --%-22s %s (default: %s%s)\n", opts[i].name,
		    opts[i].help, opts[i].def[0] ? opts[i].def : "\"\"",
		    opts[i].live ? "; SIGHUP applies it" : "");
}
