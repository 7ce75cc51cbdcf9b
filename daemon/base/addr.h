/*
 * addr.h - the two kinds of address lockbrokerd is configured with, parsed
 * in one place.
 *
 * The options table (config.c), the listeners (server.c) and the Redis
 * store all call these parsers, so "lockbrokerd -t" can never accept a
 * value that start-up then refuses.  Pure: libc only, no I/O, no
 * allocation and no name resolution: a Redis endpoint's host may be a host
 * name, which the store resolves without blocking (resolve.h) each time it
 * connects; a listen address stays numeric.
 */
#ifndef LOCKBROKER_ADDR_H
#define LOCKBROKER_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

#define ADDR_HOST_LEN 254	/* a DNS name (253) or a numeric host + NUL */
#define ADDR_PATH_LEN 108	/* sizeof sun_path (checked in addr.c) */

/* One parsed address.  Every field is set by a successful parse. */
struct addr {
	int family;			/* AF_INET, AF_INET6 or AF_UNIX */
	int is_unix;			/* family == AF_UNIX */
	int is_name;			/* host is a host name, not numeric */
	char host[ADDR_HOST_LEN];	/* host, no brackets; "" if unix */
	int port;			/* 1..65535; 0 if unix or a listen address */
	char path[ADDR_PATH_LEN];	/* absolute socket path; "" unless unix */
};

/*
 * A listen address (bind, metrics_bind): a numeric IPv4 or IPv6 literal
 * without brackets and without a port ("127.0.0.1", "::1", "0.0.0.0").
 * Returns 0, or -1 with a message in err that quotes text but does not
 * name the option (the caller knows which one it was).
 */
int addr_parse_listen(const char *text, struct addr *a, char *err,
    size_t errlen);

/*
 * A Redis endpoint: "host:port" with a numeric IPv4 host or a host name
 * (letters, digits and '-' in dot-separated labels of 1..63, 253 in all,
 * the last label not all digits), "[IPv6]:port", port 1..65535; or
 * "unix:/absolute/path" where the path fits in sun_path.  Returns 0, or
 * -1 with a message in err as above.
 */
int addr_parse_endpoint(const char *text, struct addr *a, char *err,
    size_t errlen);

/*
 * A DNS server (dns_nameserver): a numeric host with an optional port,
 * "ip", "ip:port", "IPv6" or "[IPv6]:port" (port 53 when none is given).
 * Names are refused: there is nothing to resolve them with.  Returns 0,
 * or -1 with a message in err as above.
 */
int addr_parse_nameserver(const char *text, struct addr *a, char *err,
    size_t errlen);

/*
 * The sockaddr for a parsed address; port (host order) replaces a->port
 * when non-zero, as a listen address takes its port from another option.
 * Returns 0, or -1 if a was not filled by a parser above or holds a name.
 */
int addr_sockaddr(const struct addr *a, int port, struct sockaddr_storage *ss,
    socklen_t *sslen);

/* Same address: host and port (hosts compared as binary addresses, so two
 * spellings of one IPv6 address are one; names without regard to case),
 * or the same socket path.  A name and a number are not the same. */
int addr_same(const struct addr *x, const struct addr *y);

#endif
