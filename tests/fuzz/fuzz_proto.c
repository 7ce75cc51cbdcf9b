/*
 * fuzz_proto.c - libFuzzer target for proto_parse().
 *
 * The input is a stream as a client would send it: it is split at LF, a
 * CR before the LF is dropped (as the session does), and each line is
 * parsed with max_key_len 256 from a buffer of exactly its length, so
 * ASan sees any read past the end.  Besides memory errors, every result is
 * checked against the grammar in proto/PROTOCOL.md, and each accepted
 * request is written back in canonical form and parsed again, which must
 * give the same request.  Any broken invariant aborts with the line.
 *
 *   make fuzz FUZZ_SECONDS=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define MAX_KEY_LEN 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct proto_limits lim = { .max_key_len = MAX_KEY_LEN };

static void
fail(const char *what, const char *line, size_t len)
{
	fprintf(stderr, "fuzz_proto: %s; line (%zu bytes): \"", what, len);
	for (size_t i = 0; i < len && i < 300; i++) {
		unsigned char c = (unsigned char)line[i];
		if (c >= 0x20 && c <= 0x7e && c != '\\' && c != '"')
			fputc(c, stderr);
		else
			fprintf(stderr, "\\x%02x", c);
	}
	fprintf(stderr, "\"\n");
	abort();
}

#define CHECK(cond, line, len) do {					\
	if (!(cond))							\
		fail(#cond, (line), (len));				\
} while (0)

static int
takes_key(enum proto_cmd c)
{
	return c == CMD_ACQUIRE || c == CMD_RELEASE || c == CMD_RENEW ||
	    c == CMD_OWNER || c == CMD_CANCEL || c == CMD_PROCLAIM ||
	    c == CMD_WATCH || c == CMD_UNWATCH || c == CMD_CHECK ||
	    c == CMD_SETIF || c == CMD_DELIF || c == CMD_FREE;
}

/* The admin listings: [glob] (LOCKS), LIMIT n, CURSOR c. */
static int
paged(enum proto_cmd c)
{
	return c == CMD_LOCKS || c == CMD_SESSIONS;
}

static int
fenced(enum proto_cmd c)
{
	return c == CMD_SETIF || c == CMD_DELIF;
}

/* p[0..n) is a word: 1..max bytes of 0x21..0x7e, inside the line. */
static void
check_word(const char *p, size_t n, size_t max, const char *line,
    size_t len);

/* p[0..n) lies inside line[0..len). */
static int
inside(const char *p, size_t n, const char *line, size_t len)
{
	return p >= line && n <= len && (size_t)(p - line) <= len - n;
}

static void
check_word(const char *p, size_t n, size_t max, const char *line, size_t len)
{
	CHECK(p != NULL && n >= 1 && n <= max, line, len);
	CHECK(inside(p, n, line, len), line, len);
	for (size_t i = 0; i < n; i++)
		CHECK(p[i] >= 0x21 && p[i] <= 0x7e, line, len);
}

/* Invariants of an accepted, non-empty request. */
static void
check_req(const struct proto_req *r, const char *line, size_t len)
{
	CHECK((unsigned)r->cmd < CMD__COUNT, line, len);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)line[i];
		CHECK(c == '\t' || (c >= 0x20 && c <= 0x7e), line, len);
	}
	if (takes_key(r->cmd)) {
		CHECK(r->key != NULL, line, len);
		CHECK(r->keylen >= 1 && r->keylen <= MAX_KEY_LEN, line, len);
		CHECK(inside(r->key, r->keylen, line, len), line, len);
		for (size_t i = 0; i < r->keylen; i++)
			CHECK(r->key[i] >= 0x21 && r->key[i] <= 0x7e, line, len);
	} else {
		CHECK(r->key == NULL && r->keylen == 0, line, len);
	}
	if (r->word != NULL) {
		CHECK(r->cmd == CMD_HELLO || r->cmd == CMD_AUTH ||
		    r->cmd == CMD_RESUME || r->cmd == CMD_KILL ||
		    r->cmd == CMD_LOCKS, line, len);
		CHECK(r->wordlen >= 1 && r->wordlen <= (r->cmd == CMD_LOCKS ?
		    PROTO_GLOB_MAX : PROTO_NAME_MAX), line, len);
		CHECK(inside(r->word, r->wordlen, line, len), line, len);
		for (size_t i = 0; i < r->wordlen; i++)
			CHECK(r->word[i] >= 0x21 && r->word[i] <= 0x7e, line, len);
	}
	CHECK((r->cmd != CMD_AUTH && r->cmd != CMD_KILL) || r->word != NULL,
	    line, len);
	CHECK(r->cmd != CMD_RESUME || r->word2 != NULL, line, len);
	CHECK(r->word2 == NULL || r->cmd == CMD_RESUME || paged(r->cmd), line,
	    len);
	if (r->word2 != NULL) {
		CHECK(r->cmd != CMD_RESUME || r->word != NULL, line, len);
		CHECK(r->word2len >= 1 && r->word2len <= (paged(r->cmd) ?
		    PROTO_CURSOR_MAX : PROTO_NAME_MAX), line, len);
		CHECK(inside(r->word2, r->word2len, line, len), line, len);
	}
	CHECK(!r->has_grace || r->cmd == CMD_HELLO, line, len);
	CHECK(!r->has_linger || r->cmd == CMD_RELEASE, line, len);
	CHECK(r->shared == 0 || (r->shared == 1 && r->cmd == CMD_ACQUIRE),
	    line, len);
	CHECK(r->limit == 0 || (r->cmd == CMD_ACQUIRE && r->limit >= 1 &&
	    r->limit <= PROTO_LIMIT_MAX && !r->shared) || (paged(r->cmd) &&
	    r->limit >= 1 && r->limit <= PROTO_PAGE_MAX), line, len);
	if (r->has_grace)
		CHECK(r->grace_ms >= 0 && r->grace_ms <= PROTO_MS_MAX, line,
		    len);
	if (r->has_linger)
		CHECK(r->linger_ms >= 0 && r->linger_ms <= PROTO_MS_MAX, line,
		    len);
	CHECK(r->has_wait == 0 || r->has_wait == 1, line, len);
	CHECK(r->has_ttl == 0 || r->has_ttl == 1, line, len);
	CHECK(!r->has_wait || r->cmd == CMD_ACQUIRE, line, len);
	CHECK(!r->has_ttl || r->cmd == CMD_ACQUIRE || r->cmd == CMD_RENEW,
	    line, len);
	if (r->has_wait)
		CHECK(r->wait_ms >= 0 && r->wait_ms <= PROTO_MS_MAX, line, len);
	if (r->has_ttl)
		CHECK(r->ttl_ms >= 1 && r->ttl_ms <= PROTO_MS_MAX, line, len);
	CHECK(r->on == 0 || (r->on == 1 && r->cmd == CMD_EVENTS), line, len);
	/* 1.2: VALUE (ACQUIRE's option, PROCLAIM's word), ASYNC, OWNER's
	 * VALUE flag, CHECK's token */
	CHECK((r->cmd == CMD_PROCLAIM) <= (r->value != NULL), line, len);
	if (r->value != NULL) {
		CHECK(r->cmd == CMD_ACQUIRE || r->cmd == CMD_PROCLAIM, line,
		    len);
		CHECK(r->valuelen >= 1 && r->valuelen <= PROTO_VALUE_MAX, line,
		    len);
		CHECK(inside(r->value, r->valuelen, line, len), line, len);
		for (size_t i = 0; i < r->valuelen; i++)
			CHECK(r->value[i] >= 0x21 && r->value[i] <= 0x7e, line,
			    len);
		CHECK(!r->shared && r->limit == 0, line, len);
	} else {
		CHECK(r->valuelen == 0, line, len);
	}
	CHECK(r->async == 0 || (r->async == 1 && r->cmd == CMD_ACQUIRE),
	    line, len);
	CHECK(r->with_value == 0 || (r->with_value == 1 &&
	    r->cmd == CMD_OWNER), line, len);
	if (r->cmd == CMD_CHECK || fenced(r->cmd))
		CHECK(r->token >= 1 && r->token <= PROTO_TOKEN_MAX, line, len);
	else
		CHECK(r->token == 0, line, len);
	/* 1.2: SETIF's data key, value and TTL; DELIF's data key */
	if (fenced(r->cmd))
		check_word(r->datakey, r->datakeylen, MAX_KEY_LEN, line, len);
	else
		CHECK(r->datakey == NULL && r->datakeylen == 0, line, len);
	if (r->cmd == CMD_SETIF)
		check_word(r->data, r->datalen, PROTO_DATA_MAX, line, len);
	else
		CHECK(r->data == NULL && r->datalen == 0, line, len);
	CHECK(r->has_px == 0 || (r->has_px == 1 && r->cmd == CMD_SETIF &&
	    r->px_ms >= 1 && r->px_ms <= PROTO_MS_MAX), line, len);
	CHECK(r->keepttl == 0 || (r->keepttl == 1 && r->cmd == CMD_SETIF &&
	    !r->has_px), line, len);
	/* the words of the lock come after HOLDING, in the line's order */
	if (fenced(r->cmd))
		CHECK(r->datakey < r->key && (r->data == NULL ||
		    (r->datakey < r->data && r->data < r->key)), line, len);
	/* 1.2: ALL <n> <key>... (2..64 distinct keys, the first is key;
	 * only WAIT, TTL, ASYNC beside), DELAY, EVENTS ON WANTED */
	if (r->nkeys != 0) {
		CHECK(r->nkeys >= PROTO_ALL_MIN && r->nkeys <= PROTO_ALL_MAX &&
		    (r->cmd == CMD_ACQUIRE || r->cmd == CMD_RELEASE ||
		    r->cmd == CMD_CANCEL), line, len);
		CHECK(r->key == r->keys[0] && r->keylen == r->keylens[0],
		    line, len);
		CHECK(!r->shared && r->limit == 0 && r->value == NULL &&
		    !r->has_delay && !r->has_linger, line, len);
		for (int i = 0; i < r->nkeys; i++) {
			check_word(r->keys[i], r->keylens[i], MAX_KEY_LEN, line,
			    len);
			for (int j = 0; j < i; j++)
				CHECK(r->keylens[i] != r->keylens[j] ||
				    memcmp(r->keys[i], r->keys[j],
				    r->keylens[i]) != 0, line, len);
		}
	}
	CHECK(r->has_delay == 0 || (r->has_delay == 1 &&
	    r->cmd == CMD_ACQUIRE && !r->shared && r->limit == 0 &&
	    r->delay_ms >= 0 && r->delay_ms <= PROTO_MS_MAX), line, len);
	CHECK(r->wanted == 0 || (r->wanted == 1 && r->cmd == CMD_EVENTS &&
	    r->on == 1), line, len);
}

/* SETIF and DELIF, written back in their canonical form. */
static char *
put_fenced(char *p, const struct proto_req *r)
{
	p += sprintf(p, " %.*s", (int)r->datakeylen, r->datakey);
	if (r->data != NULL)
		p += sprintf(p, " %.*s", (int)r->datalen, r->data);
	p += sprintf(p, " HOLDING %.*s %lld", (int)r->keylen, r->key, r->token);
	if (r->has_px)
		p += sprintf(p, " PX %ld", r->px_ms);
	if (r->keepttl)
		p += sprintf(p, " KEEPTTL");
	return p;
}

/*
 * Write r back as a canonical line, parse that and compare: the parser
 * must accept its own output and read the same request from it.
 */
static void
check_roundtrip(const struct proto_req *r, const char *line, size_t len)
{
	/* the longest: ALL with 64 keys of MAX_KEY_LEN bytes */
	char out[PROTO_ALL_MAX * (MAX_KEY_LEN + 1) + 4096], *p = out;
	struct proto_req r2;
	const char *why;
	int empty;

	p += sprintf(p, "%s", proto_cmd_name(r->cmd));
	if (fenced(r->cmd))
		p = put_fenced(p, r);
	else if (r->nkeys > 0) {
		p += sprintf(p, " ALL %d", r->nkeys);
		for (int i = 0; i < r->nkeys; i++)
			p += sprintf(p, " %.*s", (int)r->keylens[i], r->keys[i]);
	} else if (r->key != NULL)
		p += sprintf(p, " %.*s", (int)r->keylen, r->key);
	if (r->word != NULL)
		p += sprintf(p, " %.*s", (int)r->wordlen, r->word);
	if (r->word2 != NULL)
		p += sprintf(p, paged(r->cmd) ? " CURSOR %.*s" : " %.*s",
		    (int)r->word2len, r->word2);
	if (r->has_grace)
		p += sprintf(p, " GRACE %ld", r->grace_ms);
	if (r->has_linger)
		p += sprintf(p, " LINGER %ld", r->linger_ms);
	if (r->shared)
		p += sprintf(p, " SHARED");
	if (r->limit > 0)
		p += sprintf(p, " LIMIT %ld", r->limit);
	if (r->cmd == CMD_EVENTS)
		p += sprintf(p, " %s", r->wanted ? "ON WANTED" : r->on ? "ON" :
		    "OFF");
	if (r->has_delay)
		p += sprintf(p, " DELAY %ld", r->delay_ms);
	if (r->has_wait)
		p += sprintf(p, " WAIT %ld", r->wait_ms);
	if (r->has_ttl)
		p += sprintf(p, " TTL %ld", r->ttl_ms);
	if (r->value != NULL)
		p += sprintf(p, r->cmd == CMD_PROCLAIM ? " %.*s" : " VALUE %.*s",
		    (int)r->valuelen, r->value);
	if (r->async)
		p += sprintf(p, " ASYNC");
	if (r->with_value)
		p += sprintf(p, " VALUE");
	if (r->cmd == CMD_CHECK)
		p += sprintf(p, " %lld", r->token);
	CHECK(proto_parse(out, (size_t)(p - out), &lim, &r2, &empty, &why) ==
	    PERR_NONE && !empty, line, len);
	CHECK(r2.cmd == r->cmd && r2.keylen == r->keylen &&
	    r2.wordlen == r->wordlen && r2.has_wait == r->has_wait &&
	    r2.has_ttl == r->has_ttl && r2.on == r->on &&
	    r2.word2len == r->word2len && r2.has_grace == r->has_grace &&
	    r2.grace_ms == r->grace_ms && r2.has_linger == r->has_linger &&
	    r2.linger_ms == r->linger_ms && r2.shared == r->shared &&
	    r2.limit == r->limit, line, len);
	CHECK(r->word2 == NULL || memcmp(r2.word2, r->word2, r->word2len) == 0,
	    line, len);
	CHECK(r->key == NULL || memcmp(r2.key, r->key, r->keylen) == 0,
	    line, len);
	CHECK(r->word == NULL || memcmp(r2.word, r->word, r->wordlen) == 0,
	    line, len);
	CHECK(!r->has_wait || r2.wait_ms == r->wait_ms, line, len);
	CHECK(!r->has_ttl || r2.ttl_ms == r->ttl_ms, line, len);
	CHECK(r2.valuelen == r->valuelen && r2.async == r->async &&
	    r2.with_value == r->with_value && r2.token == r->token, line, len);
	CHECK(r->value == NULL || memcmp(r2.value, r->value, r->valuelen) == 0,
	    line, len);
	CHECK(r2.datakeylen == r->datakeylen && r2.datalen == r->datalen &&
	    r2.has_px == r->has_px && r2.px_ms == r->px_ms &&
	    r2.keepttl == r->keepttl, line, len);
	CHECK(r->datakey == NULL || memcmp(r2.datakey, r->datakey,
	    r->datakeylen) == 0, line, len);
	CHECK(r->data == NULL || memcmp(r2.data, r->data, r->datalen) == 0,
	    line, len);
	CHECK(r2.nkeys == r->nkeys && r2.has_delay == r->has_delay &&
	    (!r->has_delay || r2.delay_ms == r->delay_ms) &&
	    r2.wanted == r->wanted, line, len);
	for (int i = 0; i < r->nkeys; i++)
		CHECK(r2.keylens[i] == r->keylens[i] && memcmp(r2.keys[i],
		    r->keys[i], r->keylens[i]) == 0, line, len);
}

static void
parse_line(const uint8_t *data, size_t len)
{
	char *line = malloc(len ? len : 1);	/* exactly len: ASan bounds */
	struct proto_req req;
	const char *why = NULL;
	int empty = -1, badbyte = 0, blank = 1;
	enum proto_err err;

	if (line == NULL)
		abort();
	memcpy(line, data, len);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = data[i];
		if ((c < 0x20 && c != '\t') || c > 0x7e)
			badbyte = 1;
		if (c != ' ' && c != '\t')
			blank = 0;
	}
	memset(&req, 0xa5, sizeof req);
	err = proto_parse(line, len, &lim, &req, &empty, &why);
	CHECK(why != NULL, line, len);
	CHECK(empty == 0 || empty == 1, line, len);
	if (err != PERR_NONE) {
		CHECK((unsigned)err < PERR__COUNT, line, len);
		CHECK(proto_err_name(err) != NULL, line, len);
		/* The parser alone can only say BADCMD or BADARG. */
		CHECK(err == PERR_BADCMD || err == PERR_BADARG, line, len);
		CHECK(why[0] != '\0', line, len);
		CHECK(!empty, line, len);
		CHECK(!badbyte || err == PERR_BADARG, line, len);
	} else if (empty) {
		CHECK(blank, line, len);
	} else {
		CHECK(!badbyte && !blank, line, len);
		check_req(&req, line, len);
		check_roundtrip(&req, line, len);
	}
	free(line);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t start = 0;

	while (start < size) {
		const uint8_t *lf = memchr(data + start, '\n', size - start);
		size_t end = lf ? (size_t)(lf - data) : size;
		size_t len = end - start;

		/* A CR before the LF is dropped, as the session does. */
		if (lf != NULL && len > 0 && data[end - 1] == '\r')
			len--;
		parse_line(data + start, len);
		start = end + 1;
	}
	return 0;
}
