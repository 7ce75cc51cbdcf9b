/*
 * slot.c - Redis Cluster hash slots and per-slot tags (see slot.h).
 *
 * The CRC runs bit by bit rather than from a 256-entry table: keys are a
 * few dozen bytes, hashed once per command, so a table would save little
 * and would need either a pasted constant block or an init step that
 * slot_of() callers could forget.  Cluster's rules are in the cluster
 * spec (redis/redis-doc: docs/reference/cluster-spec.md, "Hash tags").
 */
#include "slot.h"

#include <string.h>

_Static_assert((SLOT_COUNT & (SLOT_COUNT - 1)) == 0,
    "SLOT_COUNT must be a power of two: slots are taken with a mask");

#define CRC16_POLY 0x1021

/* Base-36 digits in the order the tag walk counts in. */
static const char tag_digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
#define TAG_BASE ((unsigned)(sizeof tag_digits - 1))

static char tags[SLOT_COUNT][SLOT_TAG_MAX];	/* "" until filled */
static int tags_ready;

/* Carry crc on over len more bytes: the two pieces of a key, or the
 * part of each that a tag spans, hash as if they were one buffer. */
static uint16_t
crc16_update(uint16_t crc, const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((unsigned char)buf[i] << 8);
		for (int bit = 0; bit < 8; bit++) {
			if (crc & 0x8000)
				crc = (uint16_t)((crc << 1) ^ CRC16_POLY);
			else
				crc = (uint16_t)(crc << 1);
		}
	}
	return crc;
}

uint16_t
slot_crc16(const char *buf, size_t len)
{
	return crc16_update(0, buf, len);
}

/*
 * The position of the first c at or after from in the key a followed by
 * b, counted over both pieces; al + bl if there is none.
 */
static size_t
key_find(const char *a, size_t al, const char *b, size_t bl, size_t from,
    char c)
{
	const char *p;

	if (from < al && (p = memchr(a + from, c, al - from)) != NULL)
		return (size_t)(p - a);
	if (from < al)
		from = al;
	if (from - al < bl && (p = memchr(b + (from - al), c,
	    bl - (from - al))) != NULL)
		return al + (size_t)(p - b);
	return al + bl;
}

/* The CRC of bytes [from, to) of the key a followed by b. */
static uint16_t
key_crc(const char *a, size_t al, const char *b, size_t from, size_t to)
{
	uint16_t crc = 0;

	if (from < al)
		crc = crc16_update(crc, a + from, (to < al ? to : al) - from);
	if (to > al) {
		size_t start = from > al ? from - al : 0;

		crc = crc16_update(crc, b + start, to - al - start);
	}
	return crc;
}

unsigned
slot_of(const char *a, size_t al, const char *b, size_t bl)
{
	size_t len = al + bl, open, close;

	open = key_find(a, al, b, bl, 0, '{');
	if (open < len) {
		close = key_find(a, al, b, bl, open + 1, '}');
		/* "{}" is no tag: Redis then hashes the whole key, even if
		 * a later pair would make one ("foo{}{bar}"). */
		if (close < len && close > open + 1)
			return key_crc(a, al, b, open + 1, close) &
			    (SLOT_COUNT - 1);
	}
	return key_crc(a, al, b, 0, len) & (SLOT_COUNT - 1);
}

/* The base-36 string of value v in exactly len digits (leading zeros
 * kept: "0a" and "a" are different tags). */
static void
tag_spell(char *out, unsigned v, size_t len)
{
	for (size_t i = len; i > 0; i--) {
		out[i - 1] = tag_digits[v % TAG_BASE];
		v /= TAG_BASE;
	}
	out[len] = '\0';
}

/*
 * Fill tags[] by walking "0".."z", "00".."zz", ... and keeping the first
 * string that lands in each slot.  Shortest-first keeps the keys built
 * from tags short; the fixed order makes the table the same in every
 * broker, so two brokers name a slot's keys alike.  All slots are
 * covered within 4 characters (60,822 candidates; test_slot.c checks
 * every slot), so the walk stops there.
 */
void
slot_tags_init(void)
{
	unsigned filled = 0, count = 1;
	char cand[SLOT_TAG_MAX];

	if (tags_ready)
		return;
	for (size_t len = 1; len < SLOT_TAG_MAX && filled < SLOT_COUNT;
	    len++) {
		count *= TAG_BASE;
		for (unsigned v = 0; v < count && filled < SLOT_COUNT; v++) {
			unsigned slot;

			tag_spell(cand, v, len);
			slot = slot_crc16(cand, len) & (SLOT_COUNT - 1);
			if (tags[slot][0] == '\0') {
				memcpy(tags[slot], cand, len + 1);
				filled++;
			}
		}
	}
	tags_ready = 1;
}

const char *
slot_tag(unsigned slot)
{
	if (slot >= SLOT_COUNT)
		return NULL;
	slot_tags_init();
	return tags[slot];
}
