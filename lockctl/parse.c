/*
 * parse.c - lockctl's pure parsers and builders: see parse.h.
 */
#include "parse.h"

#include <stdio.h>
#include <string.h>

int
parse_num(const char *s, long long min, long long max, long long *out)
{
	long long v = 0;
	size_t i;

	if (s == NULL || s[0] == '\0' || strlen(s) > 18)
		return -1;
	for (i = 0; s[i] != '\0'; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	if (v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int
is_word(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

int
parse_hostport(const char *s, char *host, size_t hostlen, char *port,
    size_t portlen, const char **why)
{
	const char *h = s, *p = NULL, *colon;
	size_t hl;
	long long v;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (close == NULL) {
			*why = "missing ']'";
			return -1;
		}
		h = s + 1;
		hl = (size_t)(close - h);
		if (close[1] == ':')
			p = close + 2;
		else if (close[1] != '\0') {
			*why = "junk after ']'";
			return -1;
		}
	} else if ((colon = strchr(s, ':')) != NULL &&
	    strchr(colon + 1, ':') == NULL) {
		hl = (size_t)(colon - s);
		p = colon + 1;
	} else
		hl = strlen(s);
	if (hl == 0) {
		*why = "empty host";
		return -1;
	}
	if (hl >= hostlen) {
		*why = "host name too long";
		return -1;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	if (p != NULL) {
		if (parse_num(p, 1, 65535, &v) < 0) {
			*why = "port must be a number 1..65535";
			return -1;
		}
		snprintf(port, portlen, "%lld", v);
	}
	return 0;
}

size_t
token_trim(char *tok, size_t len)
{
	while (len > 0 && (tok[len - 1] == '\n' || tok[len - 1] == '\r' ||
	    tok[len - 1] == ' ' || tok[len - 1] == '\t'))
		len--;
	tok[len] = '\0';
	return len;
}

void
acquire_line(char *req, size_t len, const char *key, int shared,
    long long limit, long long wait_ms, long long ttl_ms)
{
	int n = snprintf(req, len, "ACQUIRE %s", key);

	if (shared)
		n += snprintf(req + n, len - (size_t)n, " SHARED");
	else if (limit > 0)
		n += snprintf(req + n, len - (size_t)n, " LIMIT %lld",
		    limit);
	if (wait_ms > 0)
		n += snprintf(req + n, len - (size_t)n, " WAIT %lld",
		    wait_ms);
	if (ttl_ms > 0)
		snprintf(req + n, len - (size_t)n, " TTL %lld", ttl_ms);
}

int
reply_ok(const char *reply)
{
	return strncmp(reply, "OK", 2) == 0 &&
	    (reply[2] == '\0' || reply[2] == ' ');
}

int
reply_token(const char *reply, char *token)
{
	if (strlen(reply) < 4 || strlen(reply + 3) > FENCE_MAX_LEN ||
	    strspn(reply + 3, "0123456789") != strlen(reply + 3))
		return -1;
	memcpy(token, reply + 3, strlen(reply + 3) + 1);
	return 0;
}

int
is_event(const char *line)
{
	return strncmp(line, "EVENT ", 6) == 0;
}

int
event_lost(const char *line, const char *key)
{
	char k[REQ_MAX_LEN];
	char token[FENCE_MAX_LEN + 2];

	return sscanf(line, "EVENT LOST %4095s %21s", k, token) == 2 &&
	    strcmp(k, key) == 0;
}
