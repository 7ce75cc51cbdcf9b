/*
 * fake_link.c - link.h answered by hand (fake_link.h), and a script table
 * with made-up digests and function names, so the unit tests need neither
 * Redis nor the generated scripts.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_link.h"
#include "scripts.h"

/* Names as the real table's (the batch script calls scripts by name). */
const struct script scripts[SCRIPT__COUNT] = {
	[SCRIPT_ACQUIRE] = { "acquire", "-- acquire", "sha-acquire",
	    "fn-acquire" },
	[SCRIPT_CHECK] = { "check", "-- check", "sha-check",
	    "fn-check" },
	[SCRIPT_FORGET] = { "forget", "-- forget", "sha-forget",
	    "fn-forget" },
	[SCRIPT_HANDOFF] = { "handoff", "-- handoff", "sha-handoff",
	    "fn-handoff" },
	[SCRIPT_LINGER] = { "linger", "-- linger", "sha-linger",
	    "fn-linger" },
	[SCRIPT_OWNER] = { "owner", "-- owner", "sha-owner",
	    "fn-owner" },
	[SCRIPT_PASS] = { "pass", "-- pass", "sha-pass",
	    "fn-pass" },
	[SCRIPT_REASSERT] = { "reassert", "-- reassert", "sha-reassert",
	    "fn-reassert" },
	[SCRIPT_RELEASE] = { "release", "-- release", "sha-release",
	    "fn-release" },
	[SCRIPT_RENEW] = { "renew", "-- renew", "sha-renew",
	    "fn-renew" },
	[SCRIPT_SACQUIRE] = { "sacquire", "-- sacquire", "sha-sacquire",
	    "fn-sacquire" },
	[SCRIPT_SESSION] = { "session", "-- session", "sha-session",
	    "fn-session" },
	[SCRIPT_TAKEOVER] = { "takeover", "-- takeover", "sha-takeover",
	    "fn-takeover" },
	[SCRIPT_TENURE] = { "tenure", "-- tenure", "sha-tenure",
	    "fn-tenure" },
	[SCRIPT_WMARK] = { "wmark", "-- wmark", "sha-wmark",
	    "fn-wmark" },
	[SCRIPT_BATCH] = { "batch", "-- batch", "sha-batch",
	    "fn-batch" },
};

/* As embed.sh's FREES and READS. */
const unsigned char script_kind[SCRIPT__COUNT] = {
	[SCRIPT_RELEASE] = SCRIPT_FREES,
	[SCRIPT_FORGET] = SCRIPT_FREES,
	[SCRIPT_OWNER] = SCRIPT_READS,
	[SCRIPT_CHECK] = SCRIPT_READS,
};
const char *const script_batch_fname[SCRIPT__KINDS] = {
	"fn-batch", "fn-batch-free", "fn-batch-read"
};

const char script_lean_fname[] = "fn-lean";
const char script_library[] = "#!lua name=lockbroker_fake\n-- fake";
const char script_library_name[] = "lockbroker_fake";

/* The one context every connected fake link has: compared, never used. */
static redisAsyncContext fake_ac;

static struct fake_sent *head, *tail;
#define LINKS_MAX 1024
static struct link *links[LINKS_MAX];
static size_t nlinks;

int fake_writes;
int fake_kills;
const char *fake_kill_why;
int fake_retries;

void
fake_sent_free(struct fake_sent *s)
{
	for (int i = 0; i < s->argc; i++)
		free(s->argv[i]);
	free(s->argv);
	free(s->argvlen);
	free(s);
}

void
fake_link_reset(void)
{
	struct fake_sent *s;

	while ((s = fake_sent_pop()) != NULL)
		fake_sent_free(s);
	nlinks = 0;
	fake_writes = fake_kills = fake_retries = 0;
	fake_kill_why = NULL;
}

size_t
fake_sent_count(void)
{
	size_t n = 0;

	for (struct fake_sent *s = head; s != NULL; s = s->next)
		n++;
	return n;
}

struct fake_sent *
fake_sent_pop(void)
{
	struct fake_sent *s = head;

	if (s != NULL) {
		head = s->next;
		if (head == NULL)
			tail = NULL;
		s->next = NULL;
	}
	return s;
}

struct fake_sent *
fake_sent_peek(size_t i)
{
	struct fake_sent *s = head;

	while (s != NULL && i-- > 0)
		s = s->next;
	return s;
}

void
fake_reply(struct fake_sent *s, redisReply *r)
{
	if (s->fn != NULL)
		s->fn(&fake_ac, r, s->priv);
	fake_sent_free(s);
}

static struct fake_sent *
record(struct link *l, redisCallbackFn *fn, void *priv)
{
	struct fake_sent *s = calloc(1, sizeof *s);

	if (s == NULL)
		abort();
	s->l = l;
	s->fn = fn;
	s->priv = priv;
	if (tail != NULL)
		tail->next = s;
	else
		head = s;
	tail = s;
	return s;
}

struct link *
fake_link_named(const char *name)
{
	for (size_t i = nlinks; i > 0; i--)
		if (strcmp(links[i - 1]->name, name) == 0)
			return links[i - 1];
	return NULL;
}

void
fake_link_up(struct link *l)
{
	l->state = LINK_UP;
	l->ops->up(l->owner, l);
}

/* --- replies ------------------------------------------------------------ */

static redisReply *
reply_new(int type)
{
	redisReply *r = calloc(1, sizeof *r);

	if (r == NULL)
		abort();
	r->type = type;
	return r;
}

redisReply *
reply_int(long long v)
{
	redisReply *r = reply_new(REDIS_REPLY_INTEGER);

	r->integer = v;
	return r;
}

static redisReply *
reply_text(int type, const char *text)
{
	redisReply *r = reply_new(type);

	if ((r->str = strdup(text)) == NULL)
		abort();
	r->len = strlen(text);
	return r;
}

redisReply *
reply_str(const char *s)
{
	return reply_text(REDIS_REPLY_STRING, s);
}

redisReply *
reply_err(const char *text)
{
	return reply_text(REDIS_REPLY_ERROR, text);
}

redisReply *
reply_arr(size_t n, ...)
{
	redisReply *r = reply_new(REDIS_REPLY_ARRAY);
	va_list ap;

	r->elements = n;
	if ((r->element = calloc(n ? n : 1, sizeof *r->element)) == NULL)
		abort();
	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		r->element[i] = va_arg(ap, redisReply *);
	va_end(ap);
	return r;
}

redisReply *
reply_ints(size_t n)
{
	redisReply *r = reply_arr(0);

	free(r->element);
	r->elements = n;
	if ((r->element = calloc(n ? n : 1, sizeof *r->element)) == NULL)
		abort();
	for (size_t i = 0; i < n; i++)
		r->element[i] = reply_int((long long)i);
	return r;
}

void
reply_free(redisReply *r)
{
	for (size_t i = 0; i < r->elements; i++)
		reply_free(r->element[i]);
	free(r->element);
	free(r->str);
	free(r);
}

/* --- link.h -------------------------------------------------------------- */

void
link_init(struct link *l, const struct link_env *env, const char *name,
    const struct link_ops *ops, void *owner, int confirm)
{
	memset(l, 0, sizeof *l);
	l->env = env;
	l->ops = ops;
	l->owner = owner;
	l->name = name;
	l->confirm = confirm;
	l->state = LINK_DOWN;
	if (nlinks < LINKS_MAX)
		links[nlinks++] = l;
}

/* As hiredis's teardown: what is unanswered on l is answered NULL. */
void
link_close(struct link *l)
{
	struct fake_sent **pp = &head, *s, *mine = NULL, **mt = &mine;

	l->ac = NULL;
	l->state = LINK_DOWN;
	tail = NULL;
	while ((s = *pp) != NULL) {
		if (s->l == l) {
			*pp = s->next;
			s->next = NULL;
			*mt = s;
			mt = &s->next;
		} else {
			tail = s;
			pp = &s->next;
		}
	}
	while ((s = mine) != NULL) {
		mine = s->next;
		if (s->fn != NULL)
			s->fn(&fake_ac, NULL, s->priv);
		fake_sent_free(s);
	}
	for (size_t i = 0; i < nlinks; i++)
		if (links[i] == l)
			links[i] = links[--nlinks];
}

void
link_start(struct link *l)
{
	if (!l->locating)
		l->ops->locate(l->owner, l);
}

void
link_locating(struct link *l)
{
	l->locating = 1;
	l->state = LINK_CONNECTING;
	l->addrstr[0] = '\0';
}

void
link_connect(struct link *l, const char *host, int port, int is_unix)
{
	l->locating = 0;
	snprintf(l->addrstr, sizeof l->addrstr, is_unix ? "unix:%s" :
	    strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
	l->ac = &fake_ac;
	l->state = LINK_CONNECTING;
	l->dying = 0;
}

void
link_failed(struct link *l, const char *why)
{
	(void)why;
	l->locating = 0;
	l->state = LINK_DOWN;
	l->ops->down(l->owner, l, 0);
}

void
link_kill(struct link *l, const char *why)
{
	(void)l;
	fake_kills++;
	fake_kill_why = why;
}

void
link_retry_now(struct link *l)
{
	(void)l;
	fake_retries++;
}

void
link_confirm(struct link *l)
{
	(void)l;
}

int
link_usable(const struct link *l)
{
	return l->state == LINK_UP && !l->dying;
}

int
link_coming(const struct link *l)
{
	return l->state == LINK_CONNECTING || l->state == LINK_HANDSHAKE;
}

int
link_current(const struct link *l, const redisAsyncContext *ac)
{
	return l->ac == ac;
}

void
link_dying(struct link *l)
{
	l->dying = 1;
}

void
link_expect(struct link *l)
{
	l->hello_left++;
}

void
link_hello_done(struct link *l)
{
	if (--l->hello_left == 0) {
		l->state = LINK_UP;
		l->ops->up(l->owner, l);
	}
}

int
link_hello_sendf(struct link *l, const char *fmt, ...)
{
	struct fake_sent *s = record(l, NULL, NULL);
	va_list ap;

	s->hello = 1;
	va_start(ap, fmt);
	vsnprintf(s->text, sizeof s->text, fmt, ap);
	va_end(ap);
	link_expect(l);
	return 0;
}

void
link_refuse(struct link *l, const char *why)
{
	l->refused = 1;
	snprintf(l->last_refusal, sizeof l->last_refusal, "%s", why);
	link_kill(l, "handshake refused");
}

int
link_send(struct link *l, redisCallbackFn *fn, void *priv, int argc,
    const char **argv, const size_t *argvlen)
{
	struct fake_sent *s = record(l, fn, priv);
	size_t off = 0;

	s->argc = argc;
	s->argv = calloc((size_t)argc, sizeof *s->argv);
	s->argvlen = calloc((size_t)argc, sizeof *s->argvlen);
	if (s->argv == NULL || s->argvlen == NULL)
		abort();
	for (int i = 0; i < argc; i++) {
		if ((s->argv[i] = malloc(argvlen[i] + 1)) == NULL)
			abort();
		memcpy(s->argv[i], argv[i], argvlen[i]);
		s->argv[i][argvlen[i]] = '\0';
		s->argvlen[i] = argvlen[i];
		if (off + 1 < sizeof s->text)
			off += (size_t)snprintf(s->text + off, sizeof s->text - off,
			    "%s%.*s", i ? " " : "", (int)argvlen[i], argv[i]);
		if (off >= sizeof s->text)
			off = sizeof s->text - 1;
	}
	return 0;
}

int
link_sendf(struct link *l, redisCallbackFn *fn, void *priv, const char *fmt,
    ...)
{
	struct fake_sent *s;
	va_list ap;

	if (l->ac == NULL)
		return -1;
	s = record(l, fn, priv);
	va_start(ap, fmt);
	vsnprintf(s->text, sizeof s->text, fmt, ap);
	va_end(ap);
	return 0;
}

void
link_hold_writes(struct link *l, int on)
{
	l->holding = on;
}

void
link_write_now(struct link *l)
{
	(void)l;
	fake_writes++;
}
