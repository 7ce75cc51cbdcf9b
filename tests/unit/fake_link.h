/*
 * fake_link.h - a hand-driven stand-in for daemon/store/link.c in unit
 * tests (and a script table of its own in place of the generated one).
 *
 * fake_link.c defines every function of link.h, so test_node.c and
 * test_cluster_map.c link node.c and cluster.c against it instead of
 * hiredis.  Nothing connects: a link is "connected" once its owner's
 * locate names an address, up when the test says so (fake_link_up, which
 * runs the owner's up op), and every command sent on any link is recorded
 * in one FIFO the test inspects and answers by hand (fake_reply runs the
 * command's callback, as hiredis would, later than the send).  Closing a
 * link answers what is still unanswered on it with NULL, as hiredis's
 * teardown does.
 */
#ifndef LOCKBROKER_FAKE_LINK_H
#define LOCKBROKER_FAKE_LINK_H

#include <stddef.h>

#include "link.h"

struct fake_sent {
	struct fake_sent *next;
	struct link *l;
	redisCallbackFn *fn;		/* NULL: no answer wanted */
	void *priv;
	int hello;			/* a handshake command (no callback) */
	int argc;			/* link_send: argv; link_sendf: 0 */
	char **argv;			/* NUL-terminated copies */
	size_t *argvlen;
	char text[256];			/* link_sendf: the command; link_send:
					 * its words, space-separated, cut */
};

/* Forget every command and link recorded (a test's start). */
void fake_link_reset(void);
/* Commands sent and not yet taken; the oldest, taken (NULL: none). */
size_t fake_sent_count(void);
struct fake_sent *fake_sent_pop(void);
/* The i-th oldest, left in place (NULL: none). */
struct fake_sent *fake_sent_peek(size_t i);
/* Answer s with r (NULL: no answer, as on teardown) and free s; r is the
 * caller's (valid during the call only, as hiredis's). */
void fake_reply(struct fake_sent *s, redisReply *r);
void fake_sent_free(struct fake_sent *s);
/* The link named name ("map", "command"...) made last; NULL: none. */
struct link *fake_link_named(const char *name);
/* l's connect went through and its handshake was answered: up. */
void fake_link_up(struct link *l);

/*
 * Replies built by hand, as hiredis would hand them over: an integer, a
 * string, an error, an array of the n replies that follow (owning them),
 * an array of the integers 0..n-1; reply_free frees one with all it owns.
 */
redisReply *reply_int(long long v);
redisReply *reply_str(const char *s);
redisReply *reply_err(const char *text);
redisReply *reply_arr(size_t n, ...);
redisReply *reply_ints(size_t n);
void reply_free(redisReply *r);

/* Counters: link_write_now calls; link_kill calls and the last reason;
 * link_retry_now calls. */
extern int fake_writes;
extern int fake_kills;
extern const char *fake_kill_why;
extern int fake_retries;

#endif
