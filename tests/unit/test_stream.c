/*
 * test_stream.c - a client's byte stream (daemon/net/stream.c) over a
 * socketpair.
 *
 * The test is the stream's owner (as session.c is in the daemon): it
 * records the lines it is handed, answers each with a reply of a size it
 * chooses (at once, or later: busy), and frees the stream when told it is
 * over.  The other end of the socketpair is the client, written and read
 * directly.  Each test runs the event loop in short slices until what it
 * waits for happened or a bound passed.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "log.h"
#include "stream.h"
#include "suites.h"

#define MAX_LINE 64
#define NLINES 64

struct owner {
	struct event_base *base;
	struct stream *st;
	int fd;				/* the stream's end */
	int client;			/* the other end */
	char buf[MAX_LINE + 2];
	char lines[NLINES][MAX_LINE + 1];
	int nlines;
	int eof_at;			/* nlines when eof came; -1 none */
	int nclosed, npaused, ntoolong;
	size_t reply_len;		/* 0: "OK <line>" */
	int hold;			/* each line waits for answer() */
	int busy;
};

static void
reply(struct owner *o, const char *line)
{
	struct evbuffer *out = stream_out(o->st);

	if (o->reply_len == 0) {
		ck_assert_int_ge(evbuffer_add_printf(out, "OK %s\r\n", line), 0);
		return;
	}
	for (size_t i = 0; i < o->reply_len; i++)
		ck_assert_int_eq(evbuffer_add(out, "y", 1), 0);
	ck_assert_int_eq(evbuffer_add(out, "\r\n", 2), 0);
}

static int
on_lines(void *arg)
{
	struct owner *o = arg;

	while (!o->busy) {
		long len = stream_line(o->st, o->buf);

		if (len == STREAM_PAUSED) {
			o->npaused++;
			break;
		}
		if (len == STREAM_NONE)
			break;
		if (len == STREAM_TOOLONG) {
			o->ntoolong++;
			ck_assert_int_ge(evbuffer_add_printf(stream_out(o->st),
			    "ERR TOOLONG line longer than max_line bytes; "
			    "closing\r\n"), 0);
			stream_close(o->st);
			break;
		}
		ck_assert_int_le(len, MAX_LINE);
		ck_assert_int_lt(o->nlines, NLINES);
		memcpy(o->lines[o->nlines], o->buf, (size_t)len);
		o->lines[o->nlines][len] = '\0';
		if (o->hold)
			o->busy = 1;	/* answered by answer() */
		else
			reply(o, o->lines[o->nlines]);
		o->nlines++;
	}
	return o->busy;
}

static void
on_eof(void *arg)
{
	struct owner *o = arg;

	ck_assert_int_eq(o->eof_at, -1);
	o->eof_at = o->nlines;
}

static void
on_closed(void *arg)
{
	struct owner *o = arg;

	o->nclosed++;
	stream_free(o->st);
	o->st = NULL;
}

static const struct stream_ops ops = { on_lines, on_eof, on_closed };

static void
start(struct owner *o)
{
	int sv[2];

	memset(o, 0, sizeof *o);
	log_set_level(LL_ERROR);
	/* as the daemon: a write to a closed peer is EPIPE, not a signal */
	ck_assert(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
	o->eof_at = -1;
	o->base = event_base_new();
	ck_assert_ptr_nonnull(o->base);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	o->fd = sv[0];
	o->client = sv[1];
	o->st = stream_new(o->base, o->fd, NULL, MAX_LINE, &ops, o,
	    "test-client");
	ck_assert_ptr_nonnull(o->st);
	ck_assert_int_eq(stream_is_tls(o->st), 0);
}

static void
end(struct owner *o)
{
	if (o->st != NULL)
		stream_free(o->st);
	close(o->client);
	event_base_free(o->base);
}

static void
run_ms(struct owner *o, long ms)
{
	struct timeval tv = { .tv_sec = ms / 1000,
	    .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

	event_base_loopexit(o->base, &tv);
	event_base_dispatch(o->base);
}

static void
send_str(struct owner *o, const char *s)
{
	ck_assert_int_eq(write(o->client, s, strlen(s)), (ssize_t)strlen(s));
}

/* What the client can read now (without waiting), NUL-terminated; *eof
 * set when the stream's end is closed. */
static size_t
recv_now(struct owner *o, char *buf, size_t len, int *eof)
{
	size_t got = 0;

	*eof = 0;
	while (got + 1 < len) {
		ssize_t n = recv(o->client, buf + got, len - 1 - got,
		    MSG_DONTWAIT);

		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (n == 0)
			*eof = 1;
		else
			ck_assert_int_eq(errno, EAGAIN);
		break;
	}
	buf[got] = '\0';
	return got;
}

/* A held line is answered: the next may come. */
static void
answer(struct owner *o)
{
	ck_assert_int_eq(o->busy, 1);
	reply(o, o->lines[o->nlines - 1]);
	o->busy = 0;
	stream_more(o->st);
}

/* Lines are cut at LF (CR LF too), in order; a part without LF waits. */
START_TEST(test_lines_in_order)
{
	struct owner o;
	char buf[256];
	int eof;

	start(&o);
	send_str(&o, "PING\r\nSTATS\npart");
	run_ms(&o, 50);
	ck_assert_int_eq(o.nlines, 2);
	ck_assert_str_eq(o.lines[0], "PING");
	ck_assert_str_eq(o.lines[1], "STATS");
	recv_now(&o, buf, sizeof buf, &eof);
	ck_assert_str_eq(buf, "OK PING\r\nOK STATS\r\n");
	ck_assert_int_eq(eof, 0);
	send_str(&o, "ial\n");
	run_ms(&o, 50);
	ck_assert_int_eq(o.nlines, 3);
	ck_assert_str_eq(o.lines[2], "partial");
	ck_assert_int_eq(o.nclosed, 0);
	end(&o);
}
END_TEST

/* A line of max_line bytes (and its CR LF) is a line; one byte more is
 * not: the owner answers TOOLONG and the stream closes once that answer
 * is flushed; nothing sent after it becomes a line. */
START_TEST(test_line_limit_answers_toolong_and_closes)
{
	struct owner o;
	char line[MAX_LINE + 4], buf[256];
	int eof;

	start(&o);
	memset(line, 'x', MAX_LINE);
	memcpy(line + MAX_LINE, "\r\n", 3);
	send_str(&o, line);
	run_ms(&o, 50);
	ck_assert_int_eq(o.nlines, 1);
	ck_assert_int_eq(o.ntoolong, 0);
	memcpy(line + MAX_LINE, "x\n", 3);	/* max_line + 1 */
	send_str(&o, line);
	send_str(&o, "PING\n");
	run_ms(&o, 50);
	ck_assert_int_eq(o.ntoolong, 1);
	ck_assert_int_eq(o.nlines, 1);
	ck_assert_int_eq(o.nclosed, 1);
	recv_now(&o, buf, sizeof buf, &eof);
	ck_assert_ptr_nonnull(strstr(buf, "\r\nERR TOOLONG line longer than "
	    "max_line bytes; closing\r\n"));
	ck_assert_int_eq(eof, 1);
	end(&o);
}
END_TEST

/* No LF within max_line bytes is enough: no need to wait for one. */
START_TEST(test_line_limit_without_lf)
{
	struct owner o;
	char line[MAX_LINE + 8];

	start(&o);
	memset(line, 'x', MAX_LINE + 6);
	line[MAX_LINE + 6] = '\0';
	send_str(&o, line);
	run_ms(&o, 50);
	ck_assert_int_eq(o.ntoolong, 1);
	ck_assert_int_eq(o.nclosed, 1);
	end(&o);
}
END_TEST

/* Output past STREAM_OUT_HIGH that the client does not read: no more
 * lines are taken and the socket is not read; once the client reads, the
 * lines resume, every one answered. */
START_TEST(test_output_past_out_high_stops_reading)
{
	struct owner o;
	const size_t rlen = 8192;
	size_t want = 40 * (rlen + 2), got = 0;
	char buf[65536];
	int small = 4096, eof, queued, taken;

	start(&o);
	o.reply_len = rlen;
	ck_assert_int_eq(setsockopt(o.fd, SOL_SOCKET, SO_SNDBUF, &small,
	    sizeof small), 0);
	ck_assert_int_eq(setsockopt(o.client, SOL_SOCKET, SO_RCVBUF, &small,
	    sizeof small), 0);
	for (int i = 0; i < 40; i++)
		send_str(&o, "L\n");
	run_ms(&o, 100);
	ck_assert_int_ge(o.npaused, 1);
	taken = o.nlines;
	ck_assert_int_lt(taken, 40);
	ck_assert_int_gt(taken, 0);
	/* more input stays in the socket while paused */
	send_str(&o, "M\n");
	run_ms(&o, 100);
	ck_assert_int_eq(o.nlines, taken);
	ck_assert_int_eq(ioctl(o.fd, FIONREAD, &queued), 0);
	ck_assert_int_eq(queued, 2);
	want += rlen + 2;
	for (int i = 0; i < 200 && got < want; i++) {
		run_ms(&o, 10);
		got += recv_now(&o, buf, sizeof buf, &eof);
		ck_assert_int_eq(eof, 0);
	}
	ck_assert_uint_eq(got, want);
	ck_assert_int_eq(o.nlines, 41);
	ck_assert_str_eq(o.lines[40], "M");
	ck_assert_int_eq(o.nclosed, 0);
	end(&o);
}
END_TEST

/* A half-close (FIN) is not the end: the owner is told, every line
 * already sent is handed over and answered (the last one without LF
 * too), one at a time when it is busy, then the stream closes after the
 * last answer is flushed. */
START_TEST(test_half_close_answers_every_line_then_closes)
{
	struct owner o;
	char buf[256];
	int eof;

	start(&o);
	o.hold = 1;
	send_str(&o, "A\nB\nC");
	ck_assert_int_eq(shutdown(o.client, SHUT_WR), 0);
	run_ms(&o, 50);
	ck_assert_int_eq(o.eof_at, 1);
	ck_assert_int_eq(o.nlines, 1);
	for (int i = 1; i <= 3; i++) {
		ck_assert_int_eq(o.nclosed, 0);
		answer(&o);
		run_ms(&o, 50);
		ck_assert_int_eq(o.nlines, i < 3 ? i + 1 : 3);
	}
	ck_assert_str_eq(o.lines[2], "C");
	ck_assert_int_eq(o.nclosed, 1);
	recv_now(&o, buf, sizeof buf, &eof);
	ck_assert_str_eq(buf, "OK A\r\nOK B\r\nOK C\r\n");
	ck_assert_int_eq(eof, 1);
	end(&o);
}
END_TEST

/* The client gone for good (its end closed): the stream is over. */
START_TEST(test_reset_closes)
{
	struct owner o;

	start(&o);
	o.hold = 1;
	send_str(&o, "A\nB\n");
	run_ms(&o, 50);
	ck_assert_int_eq(o.nlines, 1);
	close(o.client);
	o.client = -1;
	answer(&o);		/* its reply cannot be sent */
	run_ms(&o, 50);
	ck_assert_int_eq(o.nclosed, 1);
	end(&o);
}
END_TEST

Suite *
stream_suite(void)
{
	Suite *s = suite_create("stream");
	TCase *tc = tcase_create("socketpair");

	tcase_add_test(tc, test_lines_in_order);
	tcase_add_test(tc, test_line_limit_answers_toolong_and_closes);
	tcase_add_test(tc, test_line_limit_without_lf);
	tcase_add_test(tc, test_output_past_out_high_stops_reading);
	tcase_add_test(tc, test_half_close_answers_every_line_then_closes);
	tcase_add_test(tc, test_reset_closes);
	suite_add_tcase(s, tc);
	return s;
}
