/*
 * stream.h - one client's byte stream: lines in, replies out, plain or TLS.
 *
 * A stream owns a connected socket (and its SSL, for TLS): it reads into a
 * bounded input buffer, cuts it into lines of at most max_line bytes,
 * writes the owner's replies, and applies the rules every client gets
 * alike: reading stops while the owner is busy with a request or while
 * output it has not flushed is past STREAM_OUT_HIGH; at the end of input
 * every line already received is still handed over (a last one without LF
 * too) before the stream closes; a close after the owner's last reply
 * waits for that reply to be flushed, at most STREAM_CLOSE_GRACE_MS.  It
 * knows bytes and lines, never what a line means: the owner (session.c)
 * is told through stream_ops, and answers into stream_out().
 */
#ifndef LOCKBROKER_STREAM_H
#define LOCKBROKER_STREAM_H

#include <stddef.h>

struct event_base;
struct evbuffer;
struct ssl_st;
struct stream;

#define STREAM_OUT_HIGH (64 * 1024)	/* no more lines past this output */
#define STREAM_CLOSE_GRACE_MS 5000	/* flush time before a forced close */

/* What stream_line returns besides a line's length (>= 0). */
#define STREAM_NONE	(-1)		/* no complete line yet (or closing) */
#define STREAM_TOOLONG	(-2)		/* a line over max_line: the owner
					   answers, then stream_close */
#define STREAM_PAUSED	(-3)		/* output past STREAM_OUT_HIGH: no
					   more lines (nor reading) until the
					   client has read it */

/*
 * What a stream tells its owner (arg), always from the event loop, never
 * from inside a stream_* call.  lines and eof must not free the stream;
 * closed must (stream_free), and the stream says nothing after it.  The
 * owner may free it at any other time, outside these calls.
 */
struct stream_ops {
	/* Lines may be taken: take them with stream_line until it says
	 * otherwise or a request must wait for its reply.  Returns 1 then
	 * (busy: stream_more once it is answered), 0 when it took all it
	 * could. */
	int (*lines)(void *arg);
	/* The client sends no more (a FIN, a TLS close_notify): told once,
	 * before the lines that remain are handed over. */
	void (*eof)(void *arg);
	/* The stream is over (a reset or error, the flush after
	 * stream_close, a grace run out, a broken reply): free it now. */
	void (*closed)(void *arg);
};

/*
 * A stream on fd, connected and accepted; ssl: NULL for a plain one, else
 * its TLS session, handshake done.  max_line: the longest line; a line
 * buffer given to stream_line holds max_line + 2 bytes.  name: for log
 * lines (the client's id, read when a line is logged).  Starts reading.
 * NULL when out of memory: then fd and ssl are still the caller's.
 */
struct stream *stream_new(struct event_base *base, int fd,
    struct ssl_st *ssl, size_t max_line, const struct stream_ops *ops,
    void *arg, const char *name);
/* Close the socket (a TLS one with our close_notify, unless it failed or
 * a reply was lost) and free. */
void stream_free(struct stream *st);

/*
 * The next line of input, into buf (max_line + 2 bytes; CR LF stripped),
 * and its length; or STREAM_NONE, STREAM_TOOLONG, STREAM_PAUSED.  After
 * the end of input, bytes without an LF are the last line (never on a TLS
 * stream cut without a close_notify: that one is lost).
 */
long stream_line(struct stream *st, char *buf);
/* The output the owner's replies go to. */
struct evbuffer *stream_out(struct stream *st);
/* A reply was queued while not in ops->lines: send it and take lines
 * again, on a later loop turn. */
void stream_more(struct stream *st);
/* Stop reading; closed once the output is flushed (or at the grace). */
void stream_close(struct stream *st);
/* The same with a grace of ms (an admin's KILL: closed within 1 s). */
void stream_close_in(struct stream *st, long ms);
/* A reply could not be queued: nothing more is sent (it may end in half
 * a line), closed on a later loop turn. */
void stream_broken(struct stream *st);
/*
 * Whether the output is past STREAM_OUT_HIGH: the client is not reading
 * it.  Then the stream stops reading too, as for a reply past it, and
 * calls ops->lines once the output has drained: a line the owner sends
 * on its own (an EVENT) may wait for that instead of growing the output.
 */
int stream_out_full(struct stream *st);
int stream_is_tls(const struct stream *st);

#endif
