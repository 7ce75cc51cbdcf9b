/*
 * tokenhash.h - SHA-256 of an AUTH token, as acl_file stores it.
 *
 * The one place the access list's hashing touches libcrypto (OpenSSL), so
 * acl.c stays pure and the fuzzer links no crypto library.
 */
#ifndef LOCKBROKER_TOKENHASH_H
#define LOCKBROKER_TOKENHASH_H

#include <stddef.h>

#include "acl.h"

/* SHA-256 of p[0..len) into out.  Returns 0, or -1 if libcrypto failed
 * (out of memory). */
int tokenhash_sha256(const char *p, size_t len,
    unsigned char out[ACL_HASH_LEN]);

#endif
