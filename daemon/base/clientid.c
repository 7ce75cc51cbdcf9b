/*
 * clientid.c - make client-ids with libuuid (random, lower case).
 * ~2 us each: made once per connection, never per request.
 */
#include "clientid.h"

#include <uuid/uuid.h>

void
clientid_new(char out[CLIENTID_LEN + 1])
{
	uuid_t u;

	uuid_generate_random(u);
	uuid_unparse_lower(u, out);
}
