/*
 * sub.c - the subscriber of single-address and Sentinel mode (sub.h).
 *
 * A subscribed connection takes no PING and any error reply drops it
 * (docs/HIREDIS.md): it only ever sends SUBSCRIBE.  It is up once every
 * channel is confirmed: the release and wanted channels, and this
 * broker's grant channel (remote grants, keys.h).
 */
#include "sub.h"
#include "util.h"

#include <stdlib.h>

#include <string.h>

struct sub {
	struct link link;
	const struct store_keys *keys;
	const struct store_hooks *hooks;
	void (*locate)(void *arg, struct link *l);
	void *arg;
};

static void
sub_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct sub *s = privdata;
	struct link *l = &s->link;
	redisReply *r = reply, *kind;

	if (!link_current(l, ac) || r == NULL)
		return;
	if (r->type == REDIS_REPLY_ERROR) {
		link_refuse(l, r->str);
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING) {
		link_kill(l, "unexpected reply on subscriber");
		return;
	}
	kind = r->element[0];
	if (strcmp(kind->str, "subscribe") == 0) {
		/* the count of channels subscribed: up once all are */
		if (r->element[2]->type == REDIS_REPLY_INTEGER &&
		    r->element[2]->integer == (s->keys->granted ? 3 : 2))
			link_hello_done(l);
	} else if (strcmp(kind->str, "message") == 0 &&
	    r->element[1]->type == REDIS_REPLY_STRING &&
	    r->element[2]->type == REDIS_REPLY_STRING) {
		const char *chan = r->element[1]->str;
		const char *key = r->element[2]->str;
		size_t keylen = (size_t)r->element[2]->len;

		if (strcmp(chan, s->keys->channel) == 0)
			keys_released_msg(s->hooks, key, keylen);
		else if (s->keys->granted != NULL &&
		    strcmp(chan, s->keys->granted) == 0)
			keys_granted_msg(s->hooks, key, keylen);
		else if (strcmp(chan, s->keys->wanted) == 0)
			keys_wanted_msg(s->keys, s->hooks, key, keylen);
	}
}

static void
sub_locate(void *owner, struct link *l)
{
	struct sub *s = owner;

	s->locate(s->arg, l);
}

/* Subscribe; up once every channel is confirmed (sub_reply). */
static void
sub_hello(void *owner, struct link *l)
{
	struct sub *s = owner;

	if (s->keys->granted != NULL)
		link_sendf(l, sub_reply, s, "SUBSCRIBE %s %s %s",
		    s->keys->channel, s->keys->wanted, s->keys->granted);
	else
		link_sendf(l, sub_reply, s, "SUBSCRIBE %s %s",
		    s->keys->channel, s->keys->wanted);
	link_expect(l);
}

static void
sub_up(void *owner, struct link *l)
{
	struct sub *s = owner;

	(void)l;
	if (s->hooks->subscribed)
		s->hooks->subscribed(s->hooks->arg);
}

static void
sub_down(void *owner, struct link *l, int was_up)
{
	(void)owner;
	(void)l;
	(void)was_up;
}

static const struct link_ops sub_ops = {
	.locate = sub_locate, .hello = sub_hello, .up = sub_up,
	.down = sub_down,
};

struct sub *
sub_new(const struct link_env *env, const struct store_keys *k,
    const struct store_hooks *h, void (*locate)(void *arg, struct link *l),
    void *arg)
{
	struct sub *s = xcalloc(1, sizeof *s);

	s->keys = k;
	s->hooks = h;
	s->locate = locate;
	s->arg = arg;
	link_init(&s->link, env, "subscriber", &sub_ops, s, 0);
	return s;
}

void
sub_free(struct sub *s)
{
	if (s == NULL)
		return;
	link_close(&s->link);
	free(s);
}

struct link *
sub_link(struct sub *s)
{
	return &s->link;
}
