/*
 * clientid.h - the session's client-id: a lower-case canonical UUID.
 * The only user of libuuid.
 */
#ifndef LOCKBROKER_CLIENTID_H
#define LOCKBROKER_CLIENTID_H

#define CLIENTID_LEN 36			/* without the NUL */

void clientid_new(char out[CLIENTID_LEN + 1]);

#endif
