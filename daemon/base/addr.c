/*
 * addr.c - parse listen addresses and Redis endpoints (see addr.h).
 *
 * inet_pton() decides what a numeric host is, for both families: it is
 * what the kernel-facing code would use anyway, and it refuses names,
 * shortened IPv4 forms ("127.1") and IPv6 zone suffixes alike.
 */
#include "addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

_Static_assert(ADDR_PATH_LEN == sizeof(((struct sockaddr_un *)0)->sun_path),
    "ADDR_PATH_LEN must be the size of sun_path");
_Static_assert(ADDR_HOST_LEN >= INET6_ADDRSTRLEN,
    "ADDR_HOST_LEN must hold any numeric IPv6 host");
_Static_assert(ADDR_HOST_LEN >= 254, "ADDR_HOST_LEN must hold a DNS name");

#define UNIX_SCHEME "unix:"

static void
addr_clear(struct addr *a)
{
	memset(a, 0, sizeof *a);
}

/*
 * Copy the len bytes at s into a->host if they are a numeric host of
 * family af.  Returns 0, or -1 (the caller words the message: it knows
 * what was expected).
 */
static int
host_set(struct addr *a, int af, const char *s, size_t len)
{
	unsigned char bin[sizeof(struct in6_addr)];

	if (len == 0 || len >= sizeof a->host)
		return -1;
	memcpy(a->host, s, len);
	a->host[len] = '\0';
	if (inet_pton(af, a->host, bin) != 1) {
		a->host[0] = '\0';
		return -1;
	}
	a->family = af;
	return 0;
}

/*
 * A host name (RFC 1123): dot-separated labels of letters, digits and
 * '-', 1..63 bytes, not starting or ending with '-'; 253 bytes in all.
 * The last label may not be all digits, so "127.1" or "10.0.0.300" is a
 * mistyped address, not a name.  Copied into a->host; 0, or -1.
 */
static int
name_set(struct addr *a, const char *s, size_t len)
{
	size_t label = 0;
	int digits_only = 1;

	if (len == 0 || len > 253 || len >= sizeof a->host)
		return -1;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (c == '.') {
			if (label == 0 || s[i - 1] == '-')
				return -1;
			label = 0;
			digits_only = 1;
			continue;
		}
		if (c == '-') {
			if (label == 0)
				return -1;
		} else if (c >= '0' && c <= '9') {
			;
		} else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			digits_only = 0;
		} else {
			return -1;
		}
		if (c == '-')
			digits_only = 0;
		if (++label > 63)
			return -1;
	}
	if (label == 0 || s[len - 1] == '-' || digits_only)
		return -1;
	memcpy(a->host, s, len);
	a->host[len] = '\0';
	a->family = AF_UNSPEC;
	a->is_name = 1;
	return 0;
}

/* Digits only (no sign, no blanks), 1..65535.  Returns 0, or -1. */
static int
port_set(struct addr *a, const char *s, const char *text, char *err,
    size_t errlen)
{
	long v = 0;

	if (*s == '\0') {
		snprintf(err, errlen, "'%s' has no port after the ':'", text);
		return -1;
	}
	for (const char *p = s; *p != '\0'; p++) {
		if (*p < '0' || *p > '9') {
			snprintf(err, errlen, "'%s': '%s' is not a port number",
			    text, s);
			return -1;
		}
		if (v <= 65535)		/* stop growing: no overflow */
			v = v * 10 + (*p - '0');
	}
	if (v < 1 || v > 65535) {
		snprintf(err, errlen, "'%s': port %s is out of range 1..65535",
		    text, s);
		return -1;
	}
	a->port = (int)v;
	return 0;
}

int
addr_parse_listen(const char *text, struct addr *a, char *err,
    size_t errlen)
{
	size_t len = strlen(text);

	addr_clear(a);
	if (host_set(a, AF_INET, text, len) == 0 ||
	    host_set(a, AF_INET6, text, len) == 0)
		return 0;
	addr_clear(a);
	if (text[0] == '[')
		snprintf(err, errlen, "'%s': write an IPv6 address without "
		    "brackets (the port is a separate option)", text);
	else
		snprintf(err, errlen, "'%s' is not a numeric IPv4 or IPv6 "
		    "address (names are not resolved)", text);
	return -1;
}

/* "unix:/path": the path must be absolute and fit in sun_path. */
static int
parse_unix(const char *text, struct addr *a, char *err, size_t errlen)
{
	const char *path = text + strlen(UNIX_SCHEME);
	size_t len = strlen(path);

	if (path[0] != '/') {
		snprintf(err, errlen, "'%s': want unix: followed by an absolute "
		    "path, as in unix:/run/redis/redis.sock", text);
		return -1;
	}
	if (len >= sizeof a->path) {
		snprintf(err, errlen, "'%s': the socket path is longer than %zu "
		    "bytes", text, sizeof a->path - 1);
		return -1;
	}
	memcpy(a->path, path, len + 1);
	a->family = AF_UNIX;
	a->is_unix = 1;
	return 0;
}

int
addr_parse_endpoint(const char *text, struct addr *a, char *err,
    size_t errlen)
{
	const char *colon;

	addr_clear(a);
	if (text[0] == '\0') {
		snprintf(err, errlen, "empty address (want host:port or "
		    "unix:/path)");
		return -1;
	}
	if (strncmp(text, UNIX_SCHEME, strlen(UNIX_SCHEME)) == 0) {
		if (parse_unix(text, a, err, errlen) == 0)
			return 0;
		addr_clear(a);
		return -1;
	}
	if (text[0] == '[') {
		const char *close = strchr(text, ']');

		if (close == NULL || host_set(a, AF_INET6, text + 1,
		    (size_t)(close - text - 1)) != 0) {
			snprintf(err, errlen, "'%s': want [IPv6]:port with a "
			    "numeric IPv6 address in the brackets", text);
			goto fail;
		}
		if (close[1] != ':') {
			snprintf(err, errlen, "'%s' has no :port after the ']'",
			    text);
			goto fail;
		}
		colon = close + 1;
	} else {
		colon = strchr(text, ':');
		if (colon == NULL) {
			snprintf(err, errlen, "'%s' has no port (want host:port "
			    "or unix:/path)", text);
			goto fail;
		}
		if (strchr(colon + 1, ':') != NULL) {
			/* "::1:6379" is itself a valid IPv6 address. */
			snprintf(err, errlen, "'%s': put an IPv6 address in "
			    "brackets, as in [::1]:6379", text);
			goto fail;
		}
		if (host_set(a, AF_INET, text, (size_t)(colon - text)) != 0 &&
		    name_set(a, text, (size_t)(colon - text)) != 0) {
			snprintf(err, errlen, "'%s': the host is neither a "
			    "numeric IPv4 address nor a host name", text);
			goto fail;
		}
	}
	if (port_set(a, colon + 1, text, err, errlen) != 0)
		goto fail;
	return 0;
fail:
	addr_clear(a);
	return -1;
}

int
addr_parse_nameserver(const char *text, struct addr *a, char *err,
    size_t errlen)
{
	const char *colon = strchr(text, ':');

	addr_clear(a);
	if (host_set(a, AF_INET, text, strlen(text)) == 0 ||
	    (text[0] != '[' && host_set(a, AF_INET6, text, strlen(text)) == 0)) {
		a->port = 53;
		return 0;
	}
	addr_clear(a);
	if (text[0] == '[' || (colon != NULL && strchr(colon + 1, ':') == NULL &&
	    host_set(a, AF_INET, text, (size_t)(colon - text)) == 0)) {
		if (addr_parse_endpoint(text, a, err, errlen) == 0)
			return 0;
		return -1;
	}
	addr_clear(a);
	snprintf(err, errlen, "'%s': want a numeric ip, ip:port or "
	    "[IPv6]:port (a name server is not found by name)", text);
	return -1;
}

int
addr_sockaddr(const struct addr *a, int port, struct sockaddr_storage *ss,
    socklen_t *sslen)
{
	if (port == 0)
		port = a->port;
	if (port < 0 || port > 65535 || a->is_name)
		return -1;
	memset(ss, 0, sizeof *ss);
	switch (a->family) {
	case AF_INET: {
		struct sockaddr_in *sin = (struct sockaddr_in *)(void *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, a->host, &sin->sin_addr) != 1)
			return -1;
		*sslen = sizeof *sin;
		return 0;
	}
	case AF_INET6: {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)(void *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, a->host, &sin6->sin6_addr) != 1)
			return -1;
		*sslen = sizeof *sin6;
		return 0;
	}
	case AF_UNIX: {
		struct sockaddr_un *sun = (struct sockaddr_un *)(void *)ss;
		size_t len = strnlen(a->path, sizeof a->path);

		if (len == 0 || len >= sizeof sun->sun_path)
			return -1;
		sun->sun_family = AF_UNIX;
		memcpy(sun->sun_path, a->path, len + 1);
		*sslen = sizeof *sun;
		return 0;
	}
	}
	return -1;
}

int
addr_same(const struct addr *x, const struct addr *y)
{
	unsigned char bx[sizeof(struct in6_addr)], by[sizeof(struct in6_addr)];

	if (x->family != y->family || x->port != y->port ||
	    x->is_name != y->is_name)
		return 0;
	if (x->is_unix)
		return strcmp(x->path, y->path) == 0;
	if (x->is_name)
		return strcasecmp(x->host, y->host) == 0;
	if (inet_pton(x->family, x->host, bx) != 1 ||
	    inet_pton(y->family, y->host, by) != 1)
		return strcmp(x->host, y->host) == 0;
	return memcmp(bx, by, x->family == AF_INET ?
	    sizeof(struct in_addr) : sizeof(struct in6_addr)) == 0;
}
