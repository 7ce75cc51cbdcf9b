/*
 * resp.c - small questions about a redisReply (resp.h).
 */
#include "resp.h"
#include "util.h"

#include <string.h>

int
resp_is_int(const redisReply *r)
{
	return r != NULL && r->type == REDIS_REPLY_INTEGER;
}

int
resp_is_str(const redisReply *r)
{
	return r != NULL && r->type == REDIS_REPLY_STRING;
}

int
resp_str_is(const redisReply *r, const char *s)
{
	return resp_is_str(r) && strcmp(r->str, s) == 0;
}

const redisReply *
resp_field(const redisReply *r, const char *name)
{
	for (size_t i = 0; i + 1 < r->elements; i += 2)
		if (resp_str_is(r->element[i], name))
			return r->element[i + 1];
	return NULL;
}

void
resp_info_field(const char *info, const char *name, char *out, size_t outlen)
{
	size_t nl = strlen(name);
	const char *p = info;

	out[0] = '\0';
	while (p != NULL && *p != '\0') {
		if (strncmp(p, name, nl) == 0 && p[nl] == ':') {
			size_t vl = strcspn(p + nl + 1, "\r\n");

			if (vl >= outlen)
				vl = outlen - 1;
			memcpy(out, p + nl + 1, vl);
			out[vl] = '\0';
			return;
		}
		if ((p = strchr(p, '\n')) != NULL)
			p++;
	}
}

/* c, the nl digits of num, CR LF: a RESP header at buf; its length. */
static size_t
resp_head(char *buf, char c, const char *num, size_t nl)
{
	buf[0] = c;
	memcpy(buf + 1, num, nl);
	buf[nl + 1] = '\r';
	buf[nl + 2] = '\n';
	return nl + 3;
}

size_t
resp_command(char *buf, size_t cap, int argc, const char **argv,
    const size_t *argvlen)
{
	char num[FMT_LL_MAX];
	size_t len, nl = (size_t)fmt_ll(num, argc);

	if (cap < nl + 4)
		return 0;
	len = resp_head(buf, '*', num, nl);
	for (int i = 0; i < argc; i++) {
		/* '$', the length, CR LF, the bytes, CR LF */
		nl = (size_t)fmt_ll(num, (long long)argvlen[i]);
		if (argvlen[i] > cap - len || cap - len - argvlen[i] < nl + 6)
			return 0;
		len += resp_head(buf + len, '$', num, nl);
		memcpy(buf + len, argv[i], argvlen[i]);
		len += argvlen[i];
		buf[len++] = '\r';
		buf[len++] = '\n';
	}
	buf[len] = '\0';
	return len;
}
