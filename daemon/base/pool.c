/*
 * pool.c - memory for the small objects a broker keeps by the hundred
 * thousand (see pool.h).
 *
 * Why not malloc: a lock entry and its hold are made while the request's
 * transient buffers live (a store command of ~620 bytes, a 1 KB reply
 * chain of libevent's).  From one heap, the long-lived objects ended up
 * between those buffers; once freed, the buffers' space was split for
 * later entries, leaving remainders of 32-112 bytes that nothing else
 * asked for: 100,000 held locks cost 362 B each in RSS for ~290 B in use
 * (malloc_info: 69,000 free chunks, 5.9 MB).  From blocks of their own,
 * with no malloc header, the same locks cost ~300 B each (make bench).
 *
 * A block is carved front to back; a freed object goes to the free list
 * of its class (its first bytes are the link) and is the next one of
 * that class handed out.  A block's tail too small for the next object
 * is left unused (less than POOL_MAX of POOL_BLOCK).
 */
#include "pool.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define POOL_BLOCK (256 * 1024)		/* above glibc's mmap threshold */
#define NCLASS (POOL_MAX / POOL_ALIGN)

#if defined(__SANITIZE_ADDRESS__)
#define PASSTHROUGH 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PASSTHROUGH 1
#endif
#endif
#ifndef PASSTHROUGH
#define PASSTHROUGH 0
#endif

struct pool_block {
	struct pool_block *next;
};

struct pool_free {
	struct pool_free *next;
};

struct pool {
	struct pool_free *free[NCLASS];	/* by class: (size - 1) / POOL_ALIGN */
	struct pool_block *blocks;
	char *cur;			/* the current block's unused part */
	size_t left;
	size_t nblocks;
};

_Static_assert(POOL_MAX % POOL_ALIGN == 0, "classes end at POOL_MAX");
_Static_assert(POOL_ALIGN >= sizeof(struct pool_free),
    "a free object holds its link");
_Static_assert(sizeof(struct pool_block) % POOL_ALIGN == 0,
    "objects after a block's header are aligned");

int
pool_passthrough(void)
{
	return PASSTHROUGH;
}

struct pool *
pool_new(void)
{
	return xcalloc(1, sizeof(struct pool));
}

void
pool_free(struct pool *p)
{
	struct pool_block *b, *next;

	if (p == NULL)
		return;
	for (b = p->blocks; b != NULL; b = next) {
		next = b->next;
		free(b);
	}
	free(p);
}

void *
pool_get(struct pool *p, size_t size)
{
	size_t c, bytes;
	void *obj;

	if (PASSTHROUGH || size == 0 || size > POOL_MAX)
		return xcalloc(1, size > 0 ? size : 1);
	c = (size - 1) / POOL_ALIGN;
	bytes = (c + 1) * POOL_ALIGN;
	if (p->free[c] != NULL) {
		struct pool_free *f = p->free[c];

		p->free[c] = f->next;
		obj = f;
	} else {
		if (p->left < bytes) {
			struct pool_block *b = xmalloc(POOL_BLOCK);

			b->next = p->blocks;
			p->blocks = b;
			p->nblocks++;
			p->cur = (char *)(b + 1);
			p->left = POOL_BLOCK - sizeof *b;
		}
		obj = p->cur;
		p->cur += bytes;
		p->left -= bytes;
	}
	memset(obj, 0, bytes);
	return obj;
}

void
pool_put(struct pool *p, void *obj, size_t size)
{
	struct pool_free *f = obj;
	size_t c;

	if (obj == NULL)
		return;
	if (PASSTHROUGH || size == 0 || size > POOL_MAX) {
		free(obj);
		return;
	}
	c = (size - 1) / POOL_ALIGN;
	f->next = p->free[c];
	p->free[c] = f;
}

size_t
pool_bytes(const struct pool *p)
{
	return p->nblocks * POOL_BLOCK;
}
