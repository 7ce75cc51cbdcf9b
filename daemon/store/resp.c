/*
 * resp.c - small questions about a redisReply (resp.h).
 */
#include "resp.h"

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
