/*
 * tls.h - lockctl's TLS client side (--tls): one OpenSSL connection on an
 * already connected, non-blocking socket.  The only OpenSSL user of
 * lockctl; without --tls none of it runs.
 */
#ifndef LOCKCTL_TLS_H
#define LOCKCTL_TLS_H

#include <stddef.h>

struct ssl_st;				/* OpenSSL's SSL */

struct ctls_opts {
	const char *cacert;		/* NULL: the system's trusted CAs */
	const char *cert, *key;		/* client certificate, or NULL */
};

/* What ctls_read/ctls_write return besides a byte count or 0 (EOF). */
#define CTLS_WANT_READ	(-1)		/* poll for POLLIN, call again */
#define CTLS_WANT_WRITE	(-2)		/* poll for POLLOUT, call again */
#define CTLS_FAILED	(-3)		/* err says why */

/*
 * TLS handshake on fd within timeout_ms, verifying the broker's
 * certificate against host (a name, or a numeric IP checked against the
 * certificate's IP addresses).  Returns the SSL, or NULL with err filled.
 */
struct ssl_st *ctls_open(int fd, const char *host, const struct ctls_opts *o,
    long long timeout_ms, char *err, size_t errlen);

long ctls_read(struct ssl_st *ssl, void *buf, size_t len, char *err,
    size_t errlen);
long ctls_write(struct ssl_st *ssl, const void *buf, size_t len, char *err,
    size_t errlen);

/* Whether decrypted bytes wait inside the SSL: poll() will not report
 * them.  Part of a record is not counted: its rest comes through the
 * socket, which poll() does report. */
int ctls_pending(struct ssl_st *ssl);

/* Send close_notify if the socket takes it now, and free the SSL. */
void ctls_close(struct ssl_st *ssl);

#endif
