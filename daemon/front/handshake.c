/*
 * handshake.c - a TLS connection from accept to its session.
 *
 * Until its handshake is done a TLS connection is only a socket, an SSL
 * and two events: no session, no client-id, no lock client, nothing in
 * STATS sessions.  It does count against max_sessions (server.c adds
 * nhandshakes to nsessions), since it holds a file descriptor, and it is
 * closed at tls_handshake_timeout_ms after the accept whatever it sent:
 * a client that opens TCP and stalls (or dribbles a byte at a time) gives
 * its slot back then.  Each step runs SSL_accept once, on the loop, never
 * blocking, so any number of stalled handshakes cost the other clients
 * nothing but their memory (an SSL with its buffers, ~40 KB, until the
 * deadline).
 *
 * Failures (a closed connection, a protocol error, a client certificate
 * refused, the deadline) are counted in STATS tls_handshake_failures and
 * logged at most once per peer address per HS_LOG_MS, and at most
 * HS_LOG_PEERS addresses per HS_LOG_MS: a flood cannot flood the log.
 */
#include "broker.h"
#include "log.h"
#include "tls.h"
#include "util.h"

#include <event2/event.h>
#include <event2/util.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HS_LOG_MS 10000			/* per peer: ms between two lines */
#define HS_LOG_PEERS 64			/* peers remembered (and most lines
					   per HS_LOG_MS) */
#define PEER_LEN INET6_ADDRSTRLEN

struct handshake {
	struct broker *b;
	int fd;
	struct ssl_st *ssl;
	struct event *rev, *wev;	/* one-shot, with the deadline */
	int64_t deadline_ms;
	TAILQ_ENTRY(handshake) link;
	char peer[PEER_LEN];		/* address only: the log's key */
};

/* Failures logged lately, by peer address. */
static struct {
	char peer[PEER_LEN];
	int64_t logged_ms;		/* 0: free slot */
	uint64_t unlogged;		/* failures since, not logged */
} seen[HS_LOG_PEERS];
static uint64_t others_unlogged;	/* from peers the table had no room
					   for */

static void
failure_log(const char *peer, const char *why)
{
	int64_t now = now_ms();
	size_t slot = HS_LOG_PEERS, oldest = 0;
	uint64_t more;

	for (size_t i = 0; i < HS_LOG_PEERS; i++) {
		if (seen[i].logged_ms != 0 && strcmp(seen[i].peer, peer) == 0) {
			slot = i;
			break;
		}
		if (seen[i].logged_ms < seen[oldest].logged_ms)
			oldest = i;
	}
	if (slot == HS_LOG_PEERS) {
		if (seen[oldest].logged_ms != 0 &&
		    now - seen[oldest].logged_ms < HS_LOG_MS) {
			others_unlogged++;	/* every slot is recent */
			return;
		}
		slot = oldest;
		snprintf(seen[slot].peer, sizeof seen[slot].peer, "%s", peer);
		seen[slot].unlogged = 0;
	} else if (now - seen[slot].logged_ms < HS_LOG_MS) {
		seen[slot].unlogged++;
		return;
	}
	more = seen[slot].unlogged + others_unlogged;
	if (more > 0)
		log_info("TLS handshake from %s failed: %s (and %llu more "
		    "failures not logged since the last such line)", peer, why,
		    (unsigned long long)more);
	else
		log_info("TLS handshake from %s failed: %s", peer, why);
	seen[slot].logged_ms = now > 0 ? now : 1;
	seen[slot].unlogged = 0;
	others_unlogged = 0;
}

/* Free h; with the connection (fd and SSL) unless it became a session. */
static void
hs_free(struct handshake *h, int with_conn)
{
	struct broker *b = h->b;

	TAILQ_REMOVE(&b->handshakes, h, link);
	b->nhandshakes--;
	if (h->rev != NULL)
		event_free(h->rev);
	if (h->wev != NULL)
		event_free(h->wev);
	if (with_conn) {
		tls_close(h->ssl, 0);
		if (close(h->fd) != 0)
			log_debug("close: %s", strerror(errno));
	}
	free(h);
}

static void
hs_failed(struct handshake *h, const char *why)
{
	h->b->stats.tls_handshake_failures++;
	failure_log(h->peer, why);
	hs_free(h, 1);
}

/* Wait for the socket to be ready for what the SSL wants, or for the
 * deadline.  -1 when the event cannot be added. */
static int
hs_wait(struct handshake *h, int want)
{
	int64_t left = h->deadline_ms - now_ms();
	struct timeval tv;

	if (left < 0)
		left = 0;
	tv.tv_sec = (time_t)(left / 1000);
	tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
	return event_add(want == TLS_WANT_WRITE ? h->wev : h->rev, &tv);
}

static void
hs_step(struct handshake *h)
{
	struct broker *b = h->b;
	char why[512], cn[TLS_CN_MAX + 1];
	int r = tls_handshake(h->ssl, why, sizeof why);

	if (r == TLS_WANT_READ || r == TLS_WANT_WRITE) {
		if (hs_wait(h, r) != 0)
			hs_failed(h, "cannot wait for the socket");
		return;
	}
	if (r != 1) {
		hs_failed(h, why);
		return;
	}
	b->stats.tls_handshakes++;
	tls_peer_cn(h->ssl, cn, sizeof cn);
	log_debug("TLS handshake from %s done: %s %s%s%s", h->peer,
	    tls_version(h->ssl), tls_cipher(h->ssl), cn[0] ? ", CN " : "",
	    cn);
	if (session_new(b, h->fd, h->ssl, cn) == NULL) {
		hs_free(h, 1);
		return;
	}
	hs_free(h, 0);		/* the session has the socket and the SSL */
}

static void
hs_cb(evutil_socket_t fd, short what, void *arg)
{
	struct handshake *h = arg;

	(void)fd;
	if ((what & EV_TIMEOUT) || now_ms() >= h->deadline_ms) {
		hs_failed(h, "not done within tls_handshake_timeout_ms");
		return;
	}
	hs_step(h);
}

void
handshake_start(struct broker *b, int fd, const struct sockaddr *sa)
{
	struct handshake *h = calloc(1, sizeof *h);
	char err[512];
	const void *ip = NULL;

	/* Per connection: refused and counted, not fatal (util.h). */
	if (h == NULL) {
		log_warn("cannot start a TLS handshake: out of memory");
		close(fd);
		return;
	}
	h->b = b;
	h->fd = fd;
	h->deadline_ms = now_ms() + b->cfg->tls_handshake_timeout_ms;
	if (sa->sa_family == AF_INET)
		ip = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
	else if (sa->sa_family == AF_INET6)
		ip = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
	if (ip == NULL || inet_ntop(sa->sa_family, ip, h->peer,
	    sizeof h->peer) == NULL)
		snprintf(h->peer, sizeof h->peer, "?");
	TAILQ_INSERT_TAIL(&b->handshakes, h, link);
	b->nhandshakes++;
	if (evutil_make_socket_nonblocking(fd) != 0 ||
	    (h->rev = event_new(b->base, fd, EV_READ, hs_cb, h)) == NULL ||
	    (h->wev = event_new(b->base, fd, EV_WRITE, hs_cb, h)) == NULL) {
		log_warn("cannot start a TLS handshake: out of memory");
		hs_free(h, 1);
		return;
	}
	if ((h->ssl = tls_ssl_new(b->tls, fd, err, sizeof err)) == NULL) {
		log_warn("cannot start a TLS handshake: %s", err);
		hs_free(h, 1);
		return;
	}
	/* The ClientHello is seldom there yet: wait for it. */
	if (hs_wait(h, TLS_WANT_READ) != 0) {
		log_warn("cannot start a TLS handshake: event_add failed");
		hs_free(h, 1);
	}
}

void
handshake_stop_all(struct broker *b)
{
	struct handshake *h;

	while ((h = TAILQ_FIRST(&b->handshakes)) != NULL)
		hs_free(h, 1);
}
