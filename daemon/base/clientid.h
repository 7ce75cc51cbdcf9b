/*
 * clientid.h - the session's client-id: a lower-case canonical UUID.
 * The only user of libuuid.
 */
#ifndef LOCKBROKER_CLIENTID_H
#define LOCKBROKER_CLIENTID_H

#include <string.h>

#define CLIENTID_LEN 36			/* without the NUL */
/*
 * The owner a session's holds carry in Redis: its client-id, or
 * "<client-id>/<generation>" once the session was resumed (grace.c): the
 * generation makes a resumed session's holds differ, in Redis, from the
 * holds of the connection it replaced, so that connection's broker can
 * never renew or free them again.
 */
#define OWNER_MAX (CLIENTID_LEN + 11)

void clientid_new(char out[CLIENTID_LEN + 1]);

/* Copy an owner string (at most OWNER_MAX bytes, NUL-terminated). */
static inline void
owner_copy(char dst[OWNER_MAX + 1], const char *src)
{
	size_t n = strnlen(src, OWNER_MAX);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

#endif
