/*
 * test_resolve.c - host names over evdns (daemon/base/resolve.c).
 *
 * A fake DNS server on 127.0.0.1 (a UDP socket on the same event base)
 * answers every A question with 10.1.2.3, or NXDOMAIN, or nothing; the
 * resolver is pointed at it as dns_nameserver would.  What is checked:
 * the answer always comes from the loop, never inside resolve_start (a
 * numeric host, which evdns answers at once, included); a failure says
 * why; a cancelled lookup never calls back, whether evdns still owes its
 * answer or had given it; resolver_free drops what is in flight, and
 * leaks nothing (the ASan build's unit run checks that).  The "look the
 * name up, then connect" step (resolve_connect): the owner's slot cleared
 * before it hears, nothing for an owner that no longer waits or a step
 * replaced, and a failure that names the host.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "resolve.h"
#include "suites.h"

enum fake_mode { FAKE_ANSWER, FAKE_NXDOMAIN, FAKE_SILENT };

struct fake_dns {
	int fd;
	int port;
	enum fake_mode mode;
	int questions;
	struct event *ev;
};

static void
fake_read(evutil_socket_t fd, short what, void *arg)
{
	struct fake_dns *f = arg;
	unsigned char q[512], r[600];
	struct sockaddr_storage peer;
	socklen_t plen = sizeof peer;
	ssize_t n = recvfrom(fd, q, sizeof q, 0, (struct sockaddr *)&peer,
	    &plen);
	size_t i = 12, qend, len;
	int a;

	(void)what;
	if (n < 17)
		return;
	f->questions++;
	if (f->mode == FAKE_SILENT)
		return;
	while (i < (size_t)n && q[i] != 0)
		i += 1 + q[i];
	qend = i + 5;
	if (qend > (size_t)n)
		return;
	a = f->mode == FAKE_ANSWER && q[i + 1] == 0 && q[i + 2] == 1;
	memcpy(r, q, qend);
	r[2] = 0x81;
	r[3] = f->mode == FAKE_NXDOMAIN ? 0x83 : 0x80;
	r[6] = 0;
	r[7] = (unsigned char)a;		/* answers */
	memset(r + 8, 0, 4);
	len = qend;
	if (a) {
		static const unsigned char rr[] = { 0xc0, 0x0c, 0, 1, 0, 1,
		    0, 0, 0, 1, 0, 4, 10, 1, 2, 3 };

		memcpy(r + len, rr, sizeof rr);
		len += sizeof rr;
	}
	(void)sendto(fd, r, len, 0, (struct sockaddr *)&peer, plen);
}

static void
fake_start(struct fake_dns *f, struct event_base *base, enum fake_mode mode)
{
	struct sockaddr_in sin;
	socklen_t slen = sizeof sin;

	memset(f, 0, sizeof *f);
	f->mode = mode;
	f->fd = socket(AF_INET, SOCK_DGRAM, 0);
	ck_assert_int_ge(f->fd, 0);
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(f->fd, (struct sockaddr *)&sin, sizeof sin), 0);
	ck_assert_int_eq(getsockname(f->fd, (struct sockaddr *)&sin, &slen), 0);
	f->port = ntohs(sin.sin_port);
	f->ev = event_new(base, f->fd, EV_READ | EV_PERSIST, fake_read, f);
	ck_assert_ptr_nonnull(f->ev);
	event_add(f->ev, NULL);
}

static void
fake_stop(struct fake_dns *f)
{
	event_free(f->ev);
	close(f->fd);
}

/* What the callback saw. */
static struct {
	int calls;
	char host[64];
	char why[128];
	struct event_base *base;
} got;

static void
on_answer(void *arg, const char *host, const char *why)
{
	(void)arg;
	got.calls++;
	snprintf(got.host, sizeof got.host, "%s", host ? host : "(null)");
	snprintf(got.why, sizeof got.why, "%s", why ? why : "");
	event_base_loopbreak(got.base);
}

/* Run the loop until the callback or ms have passed. */
static void
run_for(struct event_base *base, long ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}

static struct resolver *
setup(struct event_base **base, struct fake_dns *f, enum fake_mode mode)
{
	char ns[32], err[256] = "";
	struct resolver *r;

	memset(&got, 0, sizeof got);
	*base = event_base_new();
	got.base = *base;
	fake_start(f, *base, mode);
	snprintf(ns, sizeof ns, "127.0.0.1:%d", f->port);
	r = resolver_new(*base, ns, err, sizeof err);
	ck_assert_msg(r != NULL, "resolver_new: %s", err);
	return r;
}

static void
teardown(struct event_base *base, struct fake_dns *f, struct resolver *r)
{
	resolver_free(r);
	fake_stop(f);
	event_base_free(base);
}

START_TEST(test_numeric_host_answers_from_the_loop)
{
	struct event_base *base;
	struct fake_dns f;
	struct resolver *r = setup(&base, &f, FAKE_ANSWER);

	resolve_start(r, "192.0.2.7", on_answer, NULL);
	ck_assert_int_eq(got.calls, 0);		/* not inside resolve_start */
	run_for(base, 2000);
	ck_assert_int_eq(got.calls, 1);
	ck_assert_str_eq(got.host, "192.0.2.7");
	ck_assert_int_eq(f.questions, 0);	/* no DNS for a number */
	teardown(base, &f, r);
}
END_TEST

START_TEST(test_name_answered_by_the_server)
{
	struct event_base *base;
	struct fake_dns f;
	struct resolver *r = setup(&base, &f, FAKE_ANSWER);

	resolve_start(r, "redis.unit.test", on_answer, NULL);
	ck_assert_int_eq(got.calls, 0);
	run_for(base, 5000);
	ck_assert_int_eq(got.calls, 1);
	ck_assert_str_eq(got.host, "10.1.2.3");
	ck_assert_int_ge(f.questions, 1);
	teardown(base, &f, r);
}
END_TEST

START_TEST(test_unknown_name_says_why)
{
	struct event_base *base;
	struct fake_dns f;
	struct resolver *r = setup(&base, &f, FAKE_NXDOMAIN);

	resolve_start(r, "nowhere.unit.test", on_answer, NULL);
	run_for(base, 5000);
	ck_assert_int_eq(got.calls, 1);
	ck_assert_str_eq(got.host, "(null)");
	ck_assert_msg(got.why[0] != '\0', "no reason given");
	teardown(base, &f, r);
}
END_TEST

START_TEST(test_cancel_while_evdns_owes_the_answer)
{
	struct event_base *base;
	struct fake_dns f;
	struct resolver *r = setup(&base, &f, FAKE_SILENT);
	struct resolve_req *q;

	q = resolve_start(r, "slow.unit.test", on_answer, NULL);
	run_for(base, 100);			/* the question is out */
	ck_assert_int_ge(f.questions, 1);
	resolve_cancel(q);
	run_for(base, 200);
	ck_assert_int_eq(got.calls, 0);
	teardown(base, &f, r);
}
END_TEST

START_TEST(test_cancel_after_the_answer_before_delivery)
{
	struct event_base *base;
	struct fake_dns f;
	struct resolver *r = setup(&base, &f, FAKE_ANSWER);
	struct resolve_req *q;

	/* evdns answered a number inside resolve_start; the answer waits
	 * for the loop */
	q = resolve_start(r, "192.0.2.8", on_answer, NULL);
	resolve_cancel(q);
	run_for(base, 100);
	ck_assert_int_eq(got.calls, 0);
	teardown(base, &f, r);
}
END_TEST

/*
 * resolver_free drops what is left: a name in flight inside evdns (never
 * answered: the server is silent), one cancelled, and a number's answer
 * never delivered.  None calls back; under ASan nothing leaks (evdns's
 * state for the lookup in flight is parked, reachable: resolve.c).
 */
START_TEST(test_free_with_lookups_in_flight)
{
	struct event_base *base;
	struct fake_dns f;
	struct resolver *r = setup(&base, &f, FAKE_SILENT);
	struct resolve_req *q;

	resolve_start(r, "a.unit.test", on_answer, NULL);
	q = resolve_start(r, "b.unit.test", on_answer, NULL);
	run_for(base, 50);
	resolve_cancel(q);
	run_for(base, 50);
	resolve_start(r, "192.0.2.9", on_answer, NULL);
	teardown(base, &f, r);			/* before the loop ran */
	ck_assert_int_eq(got.calls, 0);
}
END_TEST

/* An owner of resolve_connect: what it saw, and whether it still waits. */
static struct {
	struct resolve_req *lookup;	/* its slot */
	int waiting;
	int connects, failures;
	char host[64];
	char why[300];
	struct event_base *base;
} own;

static int
own_waiting(void *arg)
{
	(void)arg;
	return own.waiting;
}

static void
own_connect(void *arg, const char *host)
{
	(void)arg;
	ck_assert_ptr_null(own.lookup);		/* cleared before */
	own.connects++;
	snprintf(own.host, sizeof own.host, "%s", host);
	event_base_loopbreak(own.base);
}

static void
own_failed(void *arg, const char *why)
{
	(void)arg;
	ck_assert_ptr_null(own.lookup);
	own.failures++;
	snprintf(own.why, sizeof own.why, "%s", why);
	event_base_loopbreak(own.base);
}

static const struct resolve_then own_then = { own_waiting, own_connect,
    own_failed };

START_TEST(test_connect_step)
{
	struct event_base *base;
	struct fake_dns f;
	struct resolver *r = setup(&base, &f, FAKE_ANSWER);

	memset(&own, 0, sizeof own);
	own.base = base;
	own.waiting = 1;
	resolve_connect(r, &own.lookup, "redis.unit.test", &own_then, NULL);
	ck_assert_ptr_nonnull(own.lookup);
	ck_assert_int_eq(own.connects, 0);	/* from the loop, later */
	run_for(base, 5000);
	ck_assert_int_eq(own.connects, 1);
	ck_assert_str_eq(own.host, "10.1.2.3");
	/* a second step replaces the first, which never answers */
	resolve_connect(r, &own.lookup, "192.0.2.10", &own_then, NULL);
	resolve_connect(r, &own.lookup, "192.0.2.11", &own_then, NULL);
	run_for(base, 1000);
	run_for(base, 100);
	ck_assert_int_eq(own.connects, 2);
	ck_assert_str_eq(own.host, "192.0.2.11");
	/* an owner that stopped waiting hears nothing; its slot is clear */
	own.waiting = 0;
	resolve_connect(r, &own.lookup, "192.0.2.12", &own_then, NULL);
	run_for(base, 100);
	ck_assert_int_eq(own.connects, 2);
	ck_assert_ptr_null(own.lookup);
	teardown(base, &f, r);
}
END_TEST

START_TEST(test_connect_step_failure_names_the_host)
{
	struct event_base *base;
	struct fake_dns f;
	struct resolver *r = setup(&base, &f, FAKE_NXDOMAIN);

	memset(&own, 0, sizeof own);
	own.base = base;
	own.waiting = 1;
	resolve_connect(r, &own.lookup, "nowhere.unit.test", &own_then, NULL);
	run_for(base, 5000);
	ck_assert_int_eq(own.failures, 1);
	ck_assert_int_eq(own.connects, 0);
	ck_assert_msg(strncmp(own.why, "cannot resolve nowhere.unit.test: ",
	    34) == 0 && own.why[34] != '\0', "why: %s", own.why);
	/* cancelled through the slot: nothing more */
	resolve_connect(r, &own.lookup, "slow.unit.test", &own_then, NULL);
	resolve_cancel(own.lookup);
	own.lookup = NULL;
	run_for(base, 200);
	ck_assert_int_eq(own.failures, 1);
	teardown(base, &f, r);
}
END_TEST

START_TEST(test_bad_nameserver_refused)
{
	struct event_base *base = event_base_new();
	char err[256] = "";

	ck_assert_ptr_null(resolver_new(base, "not-an-ip", err, sizeof err));
	ck_assert_msg(strstr(err, "not-an-ip") != NULL, "err: %s", err);
	event_base_free(base);
}
END_TEST

START_TEST(test_is_name)
{
	ck_assert(resolve_is_name("redis.example"));
	ck_assert(resolve_is_name("localhost"));
	ck_assert(!resolve_is_name("10.0.0.1"));
	ck_assert(!resolve_is_name("::1"));
	ck_assert(!resolve_is_name("fe80::1:2"));
}
END_TEST

Suite *
resolve_suite(void)
{
	Suite *s = suite_create("resolve");
	TCase *tc = tcase_create("evdns");

	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, test_numeric_host_answers_from_the_loop);
	tcase_add_test(tc, test_name_answered_by_the_server);
	tcase_add_test(tc, test_unknown_name_says_why);
	tcase_add_test(tc, test_cancel_while_evdns_owes_the_answer);
	tcase_add_test(tc, test_cancel_after_the_answer_before_delivery);
	tcase_add_test(tc, test_free_with_lookups_in_flight);
	tcase_add_test(tc, test_connect_step);
	tcase_add_test(tc, test_connect_step_failure_names_the_host);
	tcase_add_test(tc, test_bad_nameserver_refused);
	tcase_add_test(tc, test_is_name);
	suite_add_tcase(s, tc);
	return s;
}
