/*
 * pool.h - memory for the small objects a broker keeps by the hundred
 * thousand, each long after the request that made it (lock entries,
 * holds): blocks of their own, in size classes of POOL_ALIGN bytes, no
 * header per object, a free list per class.  Blocks go back only with
 * the pool: a broker keeps the memory of the most objects it had at once.
 *
 * Built with AddressSanitizer every object is a calloc of its own, so a
 * use after free is still caught (pool_passthrough() says which).
 */
#ifndef LOCKBROKER_POOL_H
#define LOCKBROKER_POOL_H

#include <stddef.h>

#define POOL_ALIGN 8			/* the objects' alignment and class step */
#define POOL_MAX 512			/* larger objects: calloc and free */

struct pool;

struct pool *pool_new(void);
/* Gives every block back: every object of the pool must be put first. */
void pool_free(struct pool *p);
/* A zeroed object of size bytes (> 0); never NULL (aborts, as xmalloc). */
void *pool_get(struct pool *p, size_t size);
/* obj (NULL: nothing) back, with the size it was got with. */
void pool_put(struct pool *p, void *obj, size_t size);
/* Bytes in the pool's blocks (used or free), for the broker's figures. */
size_t pool_bytes(const struct pool *p);
/* 1: every object is its own calloc (a sanitizer build). */
int pool_passthrough(void);

#endif
