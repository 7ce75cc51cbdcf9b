/*
 * tokenhash.c - SHA-256 through OpenSSL's EVP interface (the low-level
 * SHA256_* functions are deprecated in OpenSSL 3).
 */
#include "tokenhash.h"

#include <openssl/evp.h>

int
tokenhash_sha256(const char *p, size_t len, unsigned char out[ACL_HASH_LEN])
{
	unsigned int n = 0;

	if (EVP_Digest(p, len, out, &n, EVP_sha256(), NULL) != 1 ||
	    n != ACL_HASH_LEN)
		return -1;
	return 0;
}
