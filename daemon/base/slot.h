/*
 * slot.h - Redis Cluster hash slots: which slot a key lives in, and a
 * short hash tag that puts a key in a chosen slot.
 *
 * A Lua script may only touch keys of one slot, so every key a lock
 * script declares must share the lock key's slot; a per-slot key (such
 * as a fencing counter) is named with the tag slot_tag() gives.  Pure:
 * libc only, no I/O, no allocation.
 */
#ifndef LOCKBROKER_SLOT_H
#define LOCKBROKER_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define SLOT_COUNT 16384
#define SLOT_TAG_MAX 5		/* longest tag + NUL */

/* CRC16-CCITT (XMODEM): poly 0x1021, init 0, no reflection, as Redis
 * Cluster uses. */
uint16_t slot_crc16(const char *buf, size_t len);

/*
 * The hash slot (0..SLOT_COUNT-1) of the key made of a followed by b:
 * two pieces, so callers need not join "<prefix>:lock:" and a name.
 * Redis Cluster's rule with hash tags: if the whole key has a '{' and a
 * later '}' with at least one byte between them, only the bytes between
 * the FIRST '{' and the first '}' after it are hashed; otherwise the
 * whole key.  The tag may straddle the two pieces.  b may be NULL when
 * bl == 0.
 */
unsigned slot_of(const char *a, size_t al, const char *b, size_t bl);

/*
 * A short tag t (1..4 chars of [0-9a-z], no braces) with
 * slot_of("{t}") == slot, i.e. crc16(t) % SLOT_COUNT == slot; NULL if
 * slot >= SLOT_COUNT.  The string is static and lives for the process.
 * The table is computed once, on first use or by slot_tags_init(), by
 * walking base-36 strings in order of length then value and keeping the
 * first hit per slot; strings of at most 4 chars cover all slots.  Not
 * thread-safe before the first call (the broker has one thread).
 */
const char *slot_tag(unsigned slot);
void slot_tags_init(void);

#endif
