/*
 * test_slot.c - Redis Cluster hash slots and tags of daemon/slot.c.
 *
 * The expected slots are not computed here: each was answered by a real
 * Redis (CLUSTER KEYSLOT), so a CRC or tag-rule mistake that this file
 * shared with slot.c would still be caught.  The tag table is checked
 * for every slot.
 */
#include <string.h>

#include "slot.h"
#include "suites.h"

/* The slot of a whole C string given as one piece. */
static unsigned
slot_str(const char *key)
{
	return slot_of(key, strlen(key), NULL, 0);
}

/* The check value of CRC-16/XMODEM (the catalogue's "123456789"). */
START_TEST(test_crc16_check_value)
{
	ck_assert_uint_eq(slot_crc16("123456789", 9), 0x31C3);
	ck_assert_uint_eq(slot_crc16("", 0), 0);
}
END_TEST

/*
 * From CLUSTER KEYSLOT on redis-server 7.0.15 started with
 * --cluster-enabled yes, run by hand while this file was written (the
 * first three were also measured earlier against Redis 7.0).  Non-ASCII
 * keys are UTF-8 bytes, plus three bytes that are not UTF-8 at all.
 */
static const struct {
	const char *key;
	unsigned slot;
	const char *why;
} keyslot_rows[] = {
	{ "lb:orders", 9601, "no tag" },
	{ "lb:{orders}", 105, "tag" },
	{ "lb:fence:{orders}", 105, "same tag, same slot" },
	{ "{orders}", 105, "the tag is the whole key" },
	{ "lb:lock:{orders}x", 105, "bytes after the tag" },
	{ "123456789", 12739, "0x31C3 % 16384" },
	{ "", 0, "empty key" },
	{ "lb:lock:", 15169, "a prefix alone" },
	{ "foo{}{bar}", 8363, "empty first tag: whole key" },
	{ "foo{{bar}}zap", 4015, "hashes \"{bar\"" },
	{ "foo{bar", 15278, "no closing brace: whole key" },
	{ "a}b{c}d", 7365, "a '}' before the '{' is ignored" },
	{ "{{}}", 4092, "hashes \"{\"" },
	{ "a{b}{c}", 3300, "first tag wins" },
	{ "}{", 12793, "no tag" },
	{ "lb:lock:caf\xc3\xa9", 16182, "UTF-8 e-acute" },
	{ "lb:lock:{\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87}", 10303,
	  "Cyrillic tag" },
	{ "lb:lock:\xf0\x9f\x98\x80", 15736, "4-byte UTF-8" },
	{ "\xff\xfe\x80{\xe2\x82\xac}", 1997, "high bytes, euro-sign tag" },
	{ "{1bz}", 0, "table tag of slot 0" },
	{ "{78f}", 105, "table tag of slot 105" },
	{ "{hia}", 16383, "table tag of slot 16383" },
};

START_TEST(test_keyslot)
{
	const char *key = keyslot_rows[_i].key;

	ck_assert_msg(slot_str(key) == keyslot_rows[_i].slot,
	    "row %d (%s): slot %u, Redis said %u", _i, keyslot_rows[_i].why,
	    slot_str(key), keyslot_rows[_i].slot);
}
END_TEST

/* Every row again, split at every byte: where the cut falls, even
 * inside a tag or a UTF-8 sequence, must not change the slot. */
START_TEST(test_keyslot_split)
{
	const char *key = keyslot_rows[_i].key;
	size_t len = strlen(key);

	for (size_t cut = 0; cut <= len; cut++)
		ck_assert_msg(slot_of(key, cut, key + cut, len - cut) ==
		    keyslot_rows[_i].slot, "row %d split at %zu", _i, cut);
}
END_TEST

/* The tag rule, against the CRC of the bytes it should pick. */
START_TEST(test_tag_rule)
{
	ck_assert_uint_eq(slot_str("foo{}{bar}"),
	    slot_crc16("foo{}{bar}", 10) % SLOT_COUNT);
	ck_assert_uint_eq(slot_str("foo{{bar}}zap"),
	    slot_crc16("{bar", 4) % SLOT_COUNT);
	ck_assert_uint_eq(slot_str("foo{bar"),
	    slot_crc16("foo{bar", 7) % SLOT_COUNT);
	ck_assert_uint_eq(slot_str("lb:{orders}"), slot_str("orders"));
}
END_TEST

/* The tag straddles the two pieces, as "<prefix>:lock:" + name can. */
START_TEST(test_tag_straddles_pieces)
{
	const char *a = "lb:lock:{ord", *b = "ers}x";

	ck_assert_uint_eq(slot_of(a, strlen(a), b, strlen(b)),
	    slot_str("lb:lock:{orders}x"));
	ck_assert_uint_eq(slot_of(a, strlen(a), b, strlen(b)), 105);
	/* '{' ends a, '}' starts b: an empty tag, so the whole key */
	ck_assert_uint_eq(slot_of("foo{", 4, "}{bar}", 6),
	    slot_str("foo{}{bar}"));
	/* the '{' in b, after a tagless a */
	ck_assert_uint_eq(slot_of("lb:lock:", 8, "{orders}", 8), 105);
}
END_TEST

START_TEST(test_empty_pieces)
{
	ck_assert_uint_eq(slot_of("lb:orders", 9, NULL, 0), 9601);
	ck_assert_uint_eq(slot_of("lb:orders", 9, "", 0), 9601);
	ck_assert_uint_eq(slot_of("", 0, "lb:orders", 9), 9601);
	/* lengths, not NULs, bound the pieces */
	ck_assert_uint_eq(slot_of("lb:ordersXXX", 9, "YYY", 0), 9601);
}
END_TEST

/*
 * Pieces with no NUL after them: slot.c must read within the lengths
 * only (the SANITIZE=1 build turns a read past a piece into a failure,
 * which the slot alone would not show).
 */
START_TEST(test_pieces_unterminated)
{
	const char a[3] = { 'x', '{', 'a' };
	const char b[3] = { 'b', 'c', '}' };
	const char open[3] = { '{', 'a', 'b' };

	ck_assert_uint_eq(slot_of(a, 3, b, 3), slot_str("x{abc}"));
	ck_assert_uint_eq(slot_of(a, 3, b, 2), slot_str("x{abc"));
	ck_assert_uint_eq(slot_of(a, 1, open, 3), slot_str("x{ab"));
	ck_assert_uint_eq(slot_of(open, 3, NULL, 0), slot_str("{ab"));
}
END_TEST

/* Every slot has a tag of 1..4 chars of [0-9a-z] that lands in it. */
START_TEST(test_every_slot_has_tag)
{
	char key[SLOT_TAG_MAX + 2];

	slot_tags_init();
	for (unsigned slot = 0; slot < SLOT_COUNT; slot++) {
		const char *t = slot_tag(slot);
		size_t len;

		ck_assert_ptr_nonnull(t);
		len = strlen(t);
		ck_assert_msg(len >= 1 && len <= SLOT_TAG_MAX - 1,
		    "slot %u: tag '%s'", slot, t);
		ck_assert_msg(strspn(t, "0123456789abcdefghijklmnopqrstuvwxyz")
		    == len, "slot %u: tag '%s'", slot, t);
		ck_assert_msg(slot_crc16(t, len) % SLOT_COUNT == slot,
		    "slot %u: crc16('%s') %% 16384 = %u", slot, t,
		    slot_crc16(t, len) % SLOT_COUNT);
		key[0] = '{';
		memcpy(key + 1, t, len);
		key[len + 1] = '}';
		ck_assert_uint_eq(slot_of(key, len + 2, NULL, 0), slot);
		/* and as a lock script's extra key would be named */
		ck_assert_uint_eq(slot_of("lb:fence:", 9, key, len + 2), slot);
	}
}
END_TEST

/*
 * The walk is shortest first, then in base-36 order: the tags named in
 * the notes (computed by a separate script) and ones that follow.
 */
START_TEST(test_tag_order)
{
	const char *t;

	ck_assert_str_eq(slot_tag(0), "1bz");
	ck_assert_str_eq(slot_tag(105), "78f");
	ck_assert_str_eq(slot_tag(16383), "hia");
	/* a one-char string is the tag of its own slot */
	t = slot_tag(slot_crc16("z", 1) % SLOT_COUNT);
	ck_assert_str_eq(t, "z");
	/* the same pointer each time: a static table, built once */
	ck_assert_ptr_eq(slot_tag(0), slot_tag(0));
}
END_TEST

START_TEST(test_tag_out_of_range)
{
	ck_assert_ptr_null(slot_tag(SLOT_COUNT));
	ck_assert_ptr_null(slot_tag((unsigned)-1));
}
END_TEST

Suite *
slot_suite(void)
{
	Suite *s = suite_create("slot");
	TCase *tc;

	tc = tcase_create("crc16");
	tcase_add_test(tc, test_crc16_check_value);
	suite_add_tcase(s, tc);

	tc = tcase_create("keyslot");
	tcase_add_loop_test(tc, test_keyslot, 0,
	    (int)(sizeof keyslot_rows / sizeof keyslot_rows[0]));
	tcase_add_loop_test(tc, test_keyslot_split, 0,
	    (int)(sizeof keyslot_rows / sizeof keyslot_rows[0]));
	tcase_add_test(tc, test_tag_rule);
	tcase_add_test(tc, test_tag_straddles_pieces);
	tcase_add_test(tc, test_empty_pieces);
	tcase_add_test(tc, test_pieces_unterminated);
	suite_add_tcase(s, tc);

	tc = tcase_create("tags");
	tcase_add_test(tc, test_every_slot_has_tag);
	tcase_add_test(tc, test_tag_order);
	tcase_add_test(tc, test_tag_out_of_range);
	suite_add_tcase(s, tc);
	return s;
}
