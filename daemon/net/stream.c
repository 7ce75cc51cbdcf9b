/*
 * stream.c - one client's byte stream: a socket, plain or TLS, cut into
 * lines, with bounded input and output.
 *
 * The owner runs one request at a time: while ops->lines says busy, later
 * lines stay in the input buffer (which is what keeps replies in request
 * order), and reading stops once that buffer holds in_high bytes.  Output
 * is bounded by STREAM_OUT_HIGH: past it stream_line hands out no more
 * lines and reading stops until the client reads (a client that
 * pipelines without reading costs bounded memory); below half of it again
 * the lines resume.  Nothing runs the owner's next request from inside
 * its reply: stream_more schedules it (process_ev), so nothing re-enters
 * the lock table.
 *
 * I/O is done by hand on the socket rather than with a bufferevent: one
 * read() per readable event and one writev() per batch of replies, with
 * the write event registered only while output is stuck.  A bufferevent
 * added an ioctl(FIONREAD) and two epoll_ctl calls per request.
 *
 * What an idle connection costs is kept small, since a broker may hold
 * tens of thousands: input has no buffer of its own while nothing is
 * left over (lines are taken straight from the read chunk on the stack;
 * only bytes not taken yet, a partial line or lines behind a request
 * that waits, are copied to the heap, and freed once taken), and the
 * write event and the event that takes lines later are made on their
 * first use.
 *
 * End of input (the client half-closed, e.g. `nc -N`) is not the end of
 * the stream: every line already received is handed over, in order (a
 * last line without LF counts as a line), then the stream closes after
 * flushing.  The owner is told at once (ops->eof), so it can stop a
 * client that can no longer give up from holding a place in a queue.  A
 * half-closed client that never reads what it is owed (output paused,
 * lines still to answer) is closed STREAM_CLOSE_GRACE_MS after its EOF.
 * A read or write error (reset, broken pipe) ends the stream at once.
 *
 * Plain or TLS is decided once, at birth, by the stream's I/O row (io):
 * recv, send, pending and close.  A TLS stream (tls_port; its handshake
 * was done by handshake.c) runs the same code over the same buffers, so
 * every limit, the backpressure and the EOF rules are the plain ones.
 * SSL_read stands for read() (one per readable event too; decrypted bytes
 * left inside the SSL are taken on the next loop turn, since the socket
 * will not say readable for them: pending) and SSL_write of up to one
 * record for writev().  A close_notify ends input as a FIN ends a plain
 * stream; a TCP FIN without one ends the stream as a reset does, and an
 * unterminated last line is never handed over: someone on the path may
 * have cut the stream at a record boundary.  The plain path pays one
 * indirect call per read and per write (measured: no difference in
 * `lbbench pairs --conns 1`).
 */
#include "stream.h"
#include "log.h"
#include "tls.h"
#include "util.h"

#include <event2/buffer.h>
#include <event2/event.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK 16384		/* bytes per read() */
#define TLS_WRITE_MAX 16384		/* one TLS record's worth per write */

struct stream_io;

struct stream {
	const struct stream_io *io;	/* plain_io or tls_io */
	int fd;
	struct ssl_st *ssl;		/* tls_io only */
	struct event_base *base;
	struct event *rev, *wev;	/* readable / writable (wev: made when
					 * output first waits) */
	struct event *process_ev;	/* take lines, later; close timers
					 * (made on first use: process()) */
	/* Input not taken as lines yet: in points into read_cb's chunk while
	 * it hands lines over, else into inbuf (heap, only for what is left
	 * over; freed once taken). */
	const char *in;
	size_t inlen;
	char *inbuf;
	size_t incap;
	struct evbuffer *out;
	size_t max_line;
	size_t in_high;			/* stop reading past this */
	int64_t close_at_ms;		/* closing, or EOF: closed by then */
	const struct stream_ops *ops;
	void *arg;
	const char *name;		/* for log lines */
	unsigned reading:1;		/* rev is added */
	unsigned writing:1;		/* wev is added */
	unsigned out_paused:1;		/* stopped for output past OUT_HIGH */
	unsigned busy:1;		/* the owner said so in its last lines */
	unsigned eof:1;			/* the client sends no more */
	unsigned closing:1;		/* close once output is flushed */
	unsigned broken:1;		/* reply lost: close, send no more */
	unsigned tls_failed:1;		/* no close_notify: SSL unusable */
	unsigned in_chunk:1;		/* in points into read_cb's chunk */
	unsigned tls_read_wants_write:1;	/* SSL_read waits to write: not
					   reading until write_cb */
};

/*
 * The two ways bytes move.  recv is read(): bytes, 0 at the end of input,
 * or -1 with errno (EAGAIN: nothing yet).  send writes some of st->out
 * and drains what it wrote: bytes, or -1 with errno (EAGAIN: wait for
 * writability).  pending: bytes already received that the socket will
 * not report.  close: before the socket is closed; clean: the peer may
 * get a proper end.
 */
struct stream_io {
	ssize_t (*recv)(struct stream *st, void *buf, size_t len);
	int (*send)(struct stream *st);
	int (*pending)(const struct stream *st);
	void (*close)(struct stream *st, int clean);
};

static void reading(struct stream *st, int on);
static void want_write(struct stream *st);
static void write_cb(evutil_socket_t fd, short what, void *arg);
static void process_cb(evutil_socket_t fd, short what, void *arg);

/* --- plain ---------------------------------------------------------- */

static ssize_t
plain_recv(struct stream *st, void *buf, size_t len)
{
	return read(st->fd, buf, len);
}

static int
plain_send(struct stream *st)
{
	return evbuffer_write(st->out, st->fd);
}

static int
plain_pending(const struct stream *st)
{
	(void)st;
	return 0;
}

static void
plain_close(struct stream *st, int clean)
{
	(void)st;
	(void)clean;
}

static const struct stream_io plain_io = { plain_recv, plain_send,
    plain_pending, plain_close };

/* --- TLS ------------------------------------------------------------- */

/*
 * One SSL_read.  Returns bytes, 0 at the end of input (a close_notify),
 * or -1 with errno EAGAIN (nothing yet), EPROTO (the connection failed)
 * or ECONNRESET (the TCP stream ended without a close_notify: the stream
 * is lost, as after a reset, and a last line without LF is dropped with
 * it, never handed over).  SSL_read may have to write first (an answer to
 * the peer's TLS 1.3 key update, with the socket full): then input stops,
 * the write event is added and write_cb reads again.
 */
static ssize_t
tls_recv(struct stream *st, void *buf, size_t len)
{
	long n = tls_read(st->ssl, buf, len);

	if (n >= 0)
		return (ssize_t)n;
	switch (n) {
	case TLS_WANT_WRITE:
		st->tls_read_wants_write = 1;
		reading(st, 0);
		want_write(st);
		errno = EAGAIN;
		break;
	case TLS_TRUNCATED:
		st->tls_failed = 1;
		log_debug("client %s: TCP stream ended without a TLS "
		    "close_notify: lost (%zu bytes of input not run)",
		    st->name, st->inlen);
		errno = ECONNRESET;
		break;
	case TLS_FAILED:
		st->tls_failed = 1;
		errno = EPROTO;
		break;
	default:			/* TLS_WANT_READ */
		errno = EAGAIN;
		break;
	}
	return -1;
}

/*
 * Write up to one record from the front of the output (SSL_write copies
 * it into its record; the pullup only joins the chunks of small replies).
 * Returns bytes written, or -1 with errno EAGAIN (wait for writability)
 * or EPIPE (the connection failed).
 */
static int
tls_send(struct stream *st)
{
	size_t len = evbuffer_get_length(st->out);
	unsigned char *p;
	long n;

	if (len > TLS_WRITE_MAX)
		len = TLS_WRITE_MAX;
	if ((p = evbuffer_pullup(st->out, (ev_ssize_t)len)) == NULL) {
		errno = ENOMEM;
		return -1;
	}
	n = tls_write(st->ssl, p, len);
	if (n > 0) {
		if (evbuffer_drain(st->out, (size_t)n) != 0) {
			errno = ENOMEM;
			return -1;
		}
		return (int)n;
	}
	/* TLS_WANT_READ cannot happen: with renegotiation off (tls.c) only
	 * a handshake makes SSL_write read, and ours is over. */
	if (n != TLS_WANT_WRITE)
		st->tls_failed = 1;
	errno = n == TLS_WANT_WRITE ? EAGAIN : EPIPE;
	return -1;
}

static int
tls_has_pending(const struct stream *st)
{
	return tls_pending(st->ssl);
}

/* Our close_notify, unless the connection already failed. */
static void
tls_shut(struct stream *st, int clean)
{
	tls_close(st->ssl, clean && !st->tls_failed);
	st->ssl = NULL;
}

static const struct stream_io tls_io = { tls_recv, tls_send,
    tls_has_pending, tls_shut };

/* --- reading, closing -------------------------------------------------- */

/* The event that takes lines later and runs the close timers, made on
 * its first use (an event is a control struct: out of memory aborts). */
static struct event *
process(struct stream *st)
{
	if (st->process_ev == NULL &&
	    (st->process_ev = event_new(st->base, -1, 0, process_cb, st)) ==
	    NULL)
		fatalx("cannot create a client's event: out of memory");
	return st->process_ev;
}

/* Watch the socket for writability (made on first use, as process). */
static void
want_write(struct stream *st)
{
	if (st->writing)
		return;
	if (st->wev == NULL && (st->wev = event_new(st->base, st->fd,
	    EV_WRITE | EV_PERSIST, write_cb, st)) == NULL)
		fatalx("cannot create a client's event: out of memory");
	if (event_add(st->wev, NULL) == 0)
		st->writing = 1;
}

/*
 * Watch the socket for input, or stop.  While SSL_read waits to write
 * (tls_read_wants_write) input stays off whatever the caller asks: a
 * readable socket would only run SSL_read into the same wait again and
 * again; write_cb reads once the socket takes the write.
 */
static void
reading(struct stream *st, int on)
{
	if (on && !st->reading && !st->tls_read_wants_write &&
	    event_add(st->rev, NULL) == 0) {
		st->reading = 1;
		/* decrypted bytes waiting inside the SSL: the socket will
		 * not wake us for them (part of a record will: its rest
		 * comes through the socket) */
		if (st->io->pending(st))
			event_active(st->rev, EV_READ, 0);
	} else if (!on && st->reading) {
		event_del(st->rev);
		st->reading = 0;
	}
}

void
stream_close_in(struct stream *st, long ms)
{
	int64_t at = now_ms() + ms;

	/* a close asked for already keeps its earlier deadline */
	if (st->closing && st->close_at_ms <= at)
		return;
	st->closing = 1;
	st->close_at_ms = at;
	reading(st, 0);
	/* process_cb runs at the grace's end, or when output drained */
	timer_add_ms(process(st), ms);
}

void
stream_close(struct stream *st)
{
	stream_close_in(st, STREAM_CLOSE_GRACE_MS);
}

void
stream_broken(struct stream *st)
{
	if (st->broken)
		return;
	st->broken = 1;
	st->closing = 1;
	reading(st, 0);
	event_active(process(st), EV_TIMEOUT, 0);
}

void
stream_more(struct stream *st)
{
	event_active(process(st), EV_TIMEOUT, 0);
}

/*
 * A half-closed stream stuck on output it never reads (paused past
 * OUT_HIGH, with lines still to answer) would keep its owner for ever:
 * it gets the same grace as a closing one, counted from the EOF.  Not
 * from its last progress: a kernel takes more into a socket that is never
 * read every few seconds, which would stretch the grace without end.
 */
static void
eof_watch(struct stream *st)
{
	if (!st->eof || st->closing || !st->out_paused)
		return;
	timer_at_ms(process(st), st->close_at_ms);
}

int
stream_out_full(struct stream *st)
{
	if (evbuffer_get_length(st->out) <= STREAM_OUT_HIGH)
		return 0;
	st->out_paused = 1;
	reading(st, 0);
	return 1;
}

/* --- lines ------------------------------------------------------------- */

/* n bytes of input taken; a heap buffer emptied is freed. */
static void
in_taken(struct stream *st, size_t n)
{
	st->in += n;
	st->inlen -= n;
	if (st->inlen == 0) {
		st->in = NULL;
		free(st->inbuf);
		st->inbuf = NULL;
		st->incap = 0;
	}
}

long
stream_line(struct stream *st, char *buf)
{
	size_t max = st->max_line, have = st->inlen, len;
	const char *eol;

	if (st->closing)
		return STREAM_NONE;
	if (evbuffer_get_length(st->out) > STREAM_OUT_HIGH) {
		/* The client is not reading: neither do we, until flush()
		 * sees the output drained. */
		st->out_paused = 1;
		reading(st, 0);
		return STREAM_PAUSED;
	}
	eol = have > 0 ? memchr(st->in, '\n', have) : NULL;
	if (eol == NULL) {
		if (have == 0 || (have <= max && !st->eof))
			return STREAM_NONE;
		if (st->eof && have <= max + 1) {
			memcpy(buf, st->in, have);
			in_taken(st, have);
			len = have;
			if (buf[len - 1] == '\r')
				len--;
			return len > max ? STREAM_TOOLONG : (long)len;
		}
		/* max bytes and a CR may still be a valid line */
		if (have == max + 1 && st->in[max] == '\r')
			return STREAM_NONE;
		return STREAM_TOOLONG;
	}
	len = (size_t)(eol - st->in);
	if (len > max + 1)
		return STREAM_TOOLONG;
	memcpy(buf, st->in, len + 1);
	in_taken(st, len + 1);
	if (len > 0 && buf[len - 1] == '\r')
		len--;
	if (len > max)
		return STREAM_TOOLONG;
	return (long)len;
}

/*
 * Keep what read_cb's chunk still holds (st->in points into it) in the
 * heap: the chunk is gone when read_cb returns.  Returns -1 when out of
 * memory (the caller ends the stream).
 */
static int
in_keep(struct stream *st)
{
	int was = st->in_chunk;

	st->in_chunk = 0;
	if (st->inlen == 0 || !was)
		return 0;	/* nothing left, or already in the heap */
	if ((st->inbuf = malloc(st->inlen)) == NULL)
		return -1;
	memcpy(st->inbuf, st->in, st->inlen);
	st->incap = st->inlen;
	st->in = st->inbuf;
	return 0;
}

/* Add a read chunk to input already waiting in the heap (compacted to
 * the front first).  Returns -1 when out of memory. */
static int
in_append(struct stream *st, const char *chunk, size_t n)
{
	size_t off = (size_t)(st->in - st->inbuf);

	if (off > 0)
		memmove(st->inbuf, st->in, st->inlen);
	if (st->inlen + n > st->incap) {
		size_t cap = st->inlen + n;
		char *b = realloc(st->inbuf, cap);

		if (b == NULL)
			return -1;
		st->inbuf = b;
		st->incap = cap;
	}
	memcpy(st->inbuf + st->inlen, chunk, n);
	st->in = st->inbuf;
	st->inlen += n;
	return 0;
}

/* The owner takes lines; then close when every line is answered, and
 * read again while there is room. */
static void
take_lines(struct stream *st)
{
	st->busy = (unsigned)st->ops->lines(st->arg);
	if (st->eof && !st->busy && !st->closing && !st->out_paused &&
	    st->inlen == 0)
		stream_close(st);	/* every line answered */
	if (!st->closing && !st->eof && st->inlen < st->in_high &&
	    evbuffer_get_length(st->out) <= STREAM_OUT_HIGH)
		reading(st, 1);
}

/* --- libevent callbacks ---------------------------------------------- */

/*
 * Write what is queued.  Returns 1 when the stream is over (closing and
 * flushed, or the peer is gone): ops->closed ran, the caller must not
 * touch it again.
 */
static int
flush(struct stream *st)
{
	size_t left;

	if (st->broken) {
		st->ops->closed(st->arg);
		return 1;
	}
	while ((left = evbuffer_get_length(st->out)) > 0) {
		int n = st->io->send(st);

		if (n > 0)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
		    errno == EINTR))
			break;
		st->ops->closed(st->arg);	/* reset, broken pipe */
		return 1;
	}
	if (left > 0)
		want_write(st);
	else if (left == 0 && st->writing && !st->tls_read_wants_write) {
		event_del(st->wev);
		st->writing = 0;
	}
	if (left == 0 && st->closing) {
		st->ops->closed(st->arg);
		return 1;
	}
	if (st->out_paused && left <= STREAM_OUT_HIGH / 2) {
		/* Output drained (maybe all in this very writev, so the
		 * write event never fires): take lines and read again. */
		st->out_paused = 0;
		event_active(process(st), EV_TIMEOUT, 0);
	}
	return 0;
}

/* No memory to keep a client's input: the stream ends. */
static void
in_lost(struct stream *st)
{
	log_warn("client %s: out of memory for input; closing", st->name);
	st->in = NULL;		/* (it may point into read_cb's chunk) */
	st->inlen = 0;
	st->in_chunk = 0;
	st->ops->closed(st->arg);
}

static void
read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct stream *st = arg;
	char buf[READ_CHUNK];
	ssize_t n;

	(void)fd;
	(void)what;
	n = st->io->recv(st, buf, sizeof buf);
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
	    errno != EINTR) {
		st->ops->closed(st->arg);	/* reset */
		return;
	}
	if (n == 0) {
		/* Half-closed (or closed): answer what came, then end. */
		st->eof = 1;
		st->close_at_ms = now_ms() + STREAM_CLOSE_GRACE_MS;
		reading(st, 0);	/* EOF stays readable: stop polling */
		st->ops->eof(st->arg);
		take_lines(st);
		if (!flush(st))
			eof_watch(st);
		return;
	}
	if (n > 0 && st->inlen == 0) {
		st->in = buf;		/* taken from here, kept if left */
		st->inlen = (size_t)n;
		st->in_chunk = 1;
	} else if (n > 0 && in_append(st, buf, (size_t)n) != 0) {
		in_lost(st);
		return;
	}
	if (st->inlen >= st->in_high)
		reading(st, 0);		/* take_lines resumes it */
	take_lines(st);
	if (in_keep(st) != 0) {
		in_lost(st);
		return;
	}
	if (flush(st))
		return;
	/* More decrypted input inside the SSL: next turn, as if the socket
	 * said readable again (others get their turn first).  Never after
	 * a read that found nothing (n < 0): what the SSL holds then is at
	 * most part of a record, and re-reading it every loop turn until
	 * its rest comes (maybe never) spun a core. */
	if (n > 0 && st->reading && st->io->pending(st))
		event_active(st->rev, EV_READ, 0);
}

static void
write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct stream *st = arg;

	(void)what;
	if (st->tls_read_wants_write) {
		/* the socket takes the write now: read again, and input
		 * resumes (take_lines turns it on) */
		st->tls_read_wants_write = 0;
		read_cb(fd, EV_READ, st);	/* it flushes too */
		return;
	}
	flush(st);		/* resumes a paused stream once drained */
}

static void
process_cb(evutil_socket_t fd, short what, void *arg)
{
	struct stream *st = arg;

	(void)fd;
	(void)what;
	if (st->broken) {
		st->ops->closed(st->arg);
		return;
	}
	if (st->closing) {
		int64_t left = st->close_at_ms - now_ms();

		if (left <= 0) {
			st->ops->closed(st->arg);	/* never read it */
		} else if (!flush(st)) {
			/* woken early (an EVENT line): keep the grace timer */
			timer_add_ms(process(st), left);
		}
		return;
	}
	if (st->eof && st->out_paused && now_ms() >= st->close_at_ms) {
		/* half-closed, and no reply read for the whole grace */
		st->ops->closed(st->arg);
		return;
	}
	take_lines(st);
	if (!flush(st))
		eof_watch(st);
}

/* --- life ------------------------------------------------------------ */

/* Free what stream_new made; safe on a half-built stream. */
static void
stream_release(struct stream *st)
{
	if (st->process_ev)
		event_free(st->process_ev);
	if (st->rev)
		event_free(st->rev);
	if (st->wev)
		event_free(st->wev);
	free(st->inbuf);
	if (st->out)
		evbuffer_free(st->out);
	free(st);
}

struct stream *
stream_new(struct event_base *base, int fd, struct ssl_st *ssl,
    size_t max_line, const struct stream_ops *ops, void *arg,
    const char *name)
{
	struct stream *st = xcalloc(1, sizeof *st);

	st->fd = fd;
	st->max_line = max_line;
	st->in_high = max_line * 2 + 2 > READ_CHUNK ? max_line * 2 + 2 :
	    READ_CHUNK;
	st->ops = ops;
	st->arg = arg;
	st->name = name;
	st->base = base;
	if (evutil_make_socket_nonblocking(fd) != 0 ||
	    (st->rev = event_new(base, fd, EV_READ | EV_PERSIST, read_cb,
	    st)) == NULL ||
	    (st->out = evbuffer_new()) == NULL) {
		stream_release(st);
		return NULL;
	}
	st->ssl = ssl;		/* from here on, stream_free frees it */
	st->io = ssl != NULL ? &tls_io : &plain_io;
	reading(st, 1);
	return st;
}

void
stream_free(struct stream *st)
{
	st->io->close(st, !st->broken);
	if (close(st->fd) != 0)
		log_debug("close: %s", strerror(errno));
	stream_release(st);
}

struct evbuffer *
stream_out(struct stream *st)
{
	return st->out;
}

int
stream_is_tls(const struct stream *st)
{
	return st->io == &tls_io;
}
