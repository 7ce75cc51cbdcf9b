/*
 * conn.h - lockctl's connection to the broker: TCP or a unix socket, plain
 * or TLS (tls.c), one request line out and its reply line in, the EVENT
 * lines between replies noted.  Every wait is a poll() with a deadline,
 * which may also watch a wake-up descriptor (the self-pipe of child.c's
 * signal handler) so that a signal ends a long wait.
 */
#ifndef LOCKCTL_CONN_H
#define LOCKCTL_CONN_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/un.h>

#include "parse.h"
#include "tls.h"

#define REPLY_MS	10000		/* a reply, beyond any WAIT we asked for */

/* Where the broker listens: TCP host and numeric port, or a unix socket. */
struct target {
	int is_unix;
	char host[256];
	char port[8];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char name[300];			/* for messages: host:port or path */
	int tls;			/* --tls */
	struct ctls_opts tls_opts;	/* --cacert, --cert, --key */
};

/*
 * One broker connection.  Reply lines are read into in[]; EVENT lines that
 * arrive between replies are consumed here, and an EVENT LOST for watch_key
 * sets lost.
 */
struct conn {
	int fd;
	struct ssl_st *ssl;		/* --tls: on fd; NULL otherwise */
	char in[LINE_MAX_LEN];
	size_t inlen;
	const char *watch_key;
	int lost;
	char err[256];			/* why the last call failed */
};

/* What conn_reply() can return besides 0 (a reply) and -1 (failed). */
#define REPLY_SIGNAL	2		/* wake_fd is readable (a signal is
					   waiting in the self-pipe) */

/*
 * Connect to the broker.  The socket is non-blocking and close-on-exec, so
 * CMD never inherits the session that holds its lock.  Returns 0, or -1
 * with c->err set.
 */
int conn_open(struct conn *c, const struct target *t);
/* Broker gone from under us (or never reached): keep the fd closed. */
void conn_close(struct conn *c);
/* Send one request line (LF added).  0, or -1 with c->err set. */
int conn_send(struct conn *c, const char *line);
/*
 * Read what the socket has now into c->in.  1 read something, 0 nothing
 * yet, -1 EOF or error (c->err set).
 */
int conn_fill(struct conn *c);
/*
 * Take one complete line out of c->in into out (LF and CR dropped).
 * 1 got a line, 0 no complete line yet, -1 line does not fit in out.
 */
int conn_line(struct conn *c, char *out, size_t outlen);
/*
 * An unsolicited line: "EVENT LOST <key> <token>" for our key marks the
 * lock lost; other events are ignored.  Returns 1 if line was an event.
 */
int conn_event(struct conn *c, const char *line);
/*
 * The next line from the broker, whatever it is (a reply or an EVENT
 * line), into out.  Returns 1 with a line, 0 when deadline (now_ms()
 * time; -1: none) passed first, -1 (c->err set) on EOF or error, or
 * REPLY_SIGNAL when wake_fd (-1: none) is readable.
 */
int conn_next(struct conn *c, char *out, size_t outlen, long long deadline,
    int wake_fd);
/*
 * Read the reply to the last request into out, skipping EVENT lines.
 * Returns 0 with a reply, -1 (c->err set) on EOF, error or no reply
 * within timeout_ms, or REPLY_SIGNAL when wake_fd (-1: none) is readable
 * (the caller drains it and may call again).
 */
int conn_reply(struct conn *c, char *out, size_t outlen, long long timeout_ms,
    int wake_fd);
/*
 * One request and its reply, with signals left in the self-pipe for
 * later: used where lockctl will be done in moments anyway.
 */
int conn_call(struct conn *c, const char *req, char *out, size_t outlen);
/* Decrypted bytes wait inside the SSL: poll() would not see them. */
int conn_pending(const struct conn *c);

#endif
