/*
 * keys.c - the names the store shares with the scripts, and the wanted
 * channel's messages (keys.h).
 */
#include "keys.h"
#include "util.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Key names: cluster mode's per-slot ones end in "{" for the slot tag. */
static char *
keyname(const char *prefix, const char *name, int cluster)
{
	size_t lp = strlen(prefix), ln = strlen(name);
	char *s = xmalloc(lp + ln + 3);

	memcpy(s, prefix, lp);
	memcpy(s + lp, name, ln);
	if (cluster)
		memcpy(s + lp + ln, ":{", 3);
	else
		s[lp + ln] = '\0';
	return s;
}

void
keys_init(struct store_keys *k, const char *prefix, const char *id,
    int cluster)
{
	k->lockpfx = keyname(prefix, ":lock:", 0);
	k->lockpfxlen = strlen(k->lockpfx);
	k->sesspfx = keyname(prefix, ":session:", 0);
	k->writers = keyname(prefix, ":writers:", 0);
	k->values = keyname(prefix, ":value:", 0);
	k->watched = keyname(prefix, ":watched:", 0);
	k->names = keyname(prefix, ":name:", 0);
	k->nameslen = strlen(k->names);
	k->sesspfxlen = strlen(k->sesspfx);
	k->fence = keyname(prefix, ":fence", cluster);
	k->channel = keyname(prefix, ":released", cluster);
	k->wanted = keyname(prefix, ":wanted", cluster);
	k->tenure = keyname(prefix, ":tenure", cluster);
	k->delay = keyname(prefix, ":lockdelay", cluster);
	k->listen = keyname(prefix, ":listen", cluster);
	k->listenall = keyname(prefix, ":listenall", cluster);
	k->brokers = keyname(prefix, ":brokers", cluster);
	k->rwait = keyname(prefix, ":rwait:", 0);
	k->lean = (struct lean_names){ k->fence, k->delay, k->listen,
	    k->listenall, k->wanted, k->channel, k->idsp };
	memset(k->idsp, '-', STORE_ID_LEN);
	if (id != NULL)
		memcpy(k->idsp, id, strnlen(id, STORE_ID_LEN));
	k->idsp[STORE_ID_LEN] = ' ';
	k->idsp[STORE_ID_LEN + 1] = '\0';
	memcpy(k->idplus, k->idsp, sizeof k->idplus);
	k->idplus[STORE_ID_LEN] = '+';
	k->granted = NULL;
	if (!cluster) {
		char *g = keyname(prefix, ":granted:", 0);
		size_t n = strlen(g);

		k->granted = xmalloc(n + STORE_ID_LEN + 1);
		memcpy(k->granted, g, n);
		memcpy(k->granted + n, k->idsp, STORE_ID_LEN);
		k->granted[n + STORE_ID_LEN] = '\0';
		free(g);
	}
}

void
keys_free(struct store_keys *k)
{
	free(k->tenure);
	free(k->delay);
	free(k->listen);
	free(k->listenall);
	free(k->brokers);
	free(k->rwait);
	free(k->granted);
	free(k->lockpfx);
	free(k->sesspfx);
	free(k->writers);
	free(k->values);
	free(k->watched);
	free(k->names);
	free(k->fence);
	free(k->channel);
	free(k->wanted);
}

/* msg[0..len) begins with word and a blank: the length skipped, or 0. */
static size_t
msg_word(const char *msg, size_t len, const char *word)
{
	size_t n = strlen(word);

	return len > n + 1 && memcmp(msg, word, n) == 0 && msg[n] == ' ' ?
	    n + 1 : 0;
}

/* Decimal digits p[0..len), at most 19 of them: 0, or -1. */
static int
msg_num(const char *p, size_t len, unsigned long long *out)
{
	unsigned long long v = 0;

	if (len == 0 || len > 19)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (unsigned long long)(p[i] - '0');
	}
	*out = v;
	return 0;
}

/* The admin words' messages (kill.lua, free.lua): "freed <key> <token>",
 * "kill <client-id> <request>", "killed <broker-id>/<seq> 1". */
static void
admin_msg(const struct store_hooks *h, const char *msg, size_t len, int word,
    size_t skip)
{
	const char *a = msg + skip, *end = msg + len;
	const char *sp = memchr(a, ' ', (size_t)(end - a)), *slash;
	unsigned long long v;

	if (sp == NULL || sp == a || sp + 1 == end ||
	    memchr(sp + 1, ' ', (size_t)(end - sp - 1)) != NULL)
		return;		/* not two words */
	if (word == 0 && h->freed != NULL &&
	    msg_num(sp + 1, (size_t)(end - sp - 1), &v) == 0 &&
	    v <= LLONG_MAX)
		h->freed(h->arg, a, (size_t)(sp - a), (long long)v);
	else if (word == 1 && h->kill != NULL)
		h->kill(h->arg, a, (size_t)(sp - a), sp + 1,
		    (size_t)(end - sp - 1));
	else if (word == 2 && h->killed != NULL && end - sp == 2 &&
	    sp[1] == '1' && (slash = memchr(a, '/', (size_t)(sp - a))) !=
	    NULL && msg_num(slash + 1, (size_t)(sp - slash - 1), &v) == 0)
		h->killed(h->arg, a, (size_t)(slash - a), v);
}

void
keys_granted_msg(const struct store_hooks *h, const char *msg, size_t len)
{
	const char *w[5], *p = msg, *end = msg + len;
	size_t wl[5];
	unsigned long long wid, token, ms;
	int n = 0;

	while (n < 5 && p < end) {
		const char *sp = memchr(p, ' ', (size_t)(end - p));

		w[n] = p;
		wl[n] = (size_t)((sp != NULL ? sp : end) - p);
		if (wl[n] == 0)
			return;
		n++;
		p = sp != NULL ? sp + 1 : end;
	}
	if (n != 5 || p != end || h->granted == NULL ||
	    msg_num(w[1], wl[1], &wid) != 0 ||
	    msg_num(w[3], wl[3], &token) != 0 || token > LLONG_MAX ||
	    msg_num(w[4], wl[4], &ms) != 0 || ms > LLONG_MAX)
		return;		/* another shape: ignored */
	h->granted(h->arg, w[0], wl[0], wid, w[2], wl[2], (long long)token,
	    (long long)ms);
}

void
keys_released_msg(const struct store_hooks *h, const char *msg, size_t len)
{
	static const char *const admin_words[] = { "freed", "kill", "killed" };
	size_t skip;

	if ((skip = msg_word(msg, len, "held")) > 0) {
		if (h->changed)
			h->changed(h->arg, msg + skip, len - skip);
		return;
	}
	for (int i = 0; i < 3; i++)
		if ((skip = msg_word(msg, len, admin_words[i])) > 0) {
			admin_msg(h, msg, len, i, skip);
			return;
		}
	if (h->released)
		h->released(h->arg, msg, len);
}

/* A decimal number at *p, then a blank: p moves past both; -1 if not. */
static long long
number_sp(const char **p, const char *end)
{
	long long v = 0;
	const char *q = *p;

	while (q < end && *q >= '0' && *q <= '9' && v < LLONG_MAX / 10)
		v = v * 10 + (*q++ - '0');
	if (q == *p || q == end || *q != ' ')
		return -1;
	*p = q + 1;
	return v;
}

/* "<n> <ms> <key>" (a queue report) or "0 <key>" / "<broker-id> <key>"
 * (a holder's ask, of every broker or of one). */
static void
queue_msg(const struct store_keys *k, const struct store_hooks *h,
    const char *from, int ask, const char *p, const char *end)
{
	long long n = 0, ms = 0;
	int to_me = 0;

	if (ask && end - p > STORE_ID_LEN && p[STORE_ID_LEN] == ' ') {
		if (memcmp(p, k->idsp, STORE_ID_LEN) != 0)
			return;		/* another broker's */
		to_me = 1;
		p += STORE_ID_LEN + 1;
	} else {
		n = number_sp(&p, end);
		ms = ask ? 0 : number_sp(&p, end);
	}
	if (n < 0 || ms < 0 || p == end)
		return;			/* not that shape: ignored */
	if (ask && h->ask != NULL)
		h->ask(h->arg, p, (size_t)(end - p), to_me);
	else if (!ask && h->queue != NULL)
		h->queue(h->arg, from, p, (size_t)(end - p),
		    n > UINT_MAX ? UINT_MAX : (unsigned)n,
		    ms > LONG_MAX ? LONG_MAX : (long)ms);
}

void
keys_wanted_msg(const struct store_keys *k, const struct store_hooks *h,
    const char *msg, size_t len)
{
	const char *p = msg + STORE_ID_LEN + 1, *end = msg + len;
	long long stamp = 0;

	if (len <= STORE_ID_LEN + 1 || memcmp(msg, k->idsp, STORE_ID_LEN) == 0)
		return;
	if (msg[STORE_ID_LEN] == '=' || msg[STORE_ID_LEN] == '?') {
		queue_msg(k, h, msg, msg[STORE_ID_LEN] == '?', p, end);
		return;
	}
	if (h->wanted == NULL)
		return;
	if (msg[STORE_ID_LEN] == '!') {
		while (p < end && *p >= '0' && *p <= '9' &&
		    stamp < LLONG_MAX / 10)
			stamp = stamp * 10 + (*p++ - '0');
		if (p == end || *p != ' ' || stamp == 0)
			return;		/* not that shape: ignored */
		p++;
		if (p == end)
			return;
	}
	h->wanted(h->arg, p, (size_t)(end - p), msg[STORE_ID_LEN] != '+',
	    stamp, msg);
}
