/*
 * tls.h - the broker's TLS context (OpenSSL), and TLS I/O on one socket.
 *
 * tls.c is the only file that includes OpenSSL's headers.  It builds the
 * server context from a struct tls_cfg, which main.c fills from the tls_*
 * options (checked at start, so a missing
 * file or a key that does not match its certificate stops the broker with
 * a clear message), rebuilds it on SIGHUP, and wraps SSL_accept /
 * SSL_read / SSL_write so that callers see read()-like results and which
 * socket event to wait for.  Like a leaf module it never logs a failure
 * its caller must decide about: it fills an error buffer.
 */
#ifndef LOCKBROKER_TLS_H
#define LOCKBROKER_TLS_H

#include <stddef.h>

struct tls;
struct ssl_st;				/* OpenSSL's SSL */

#define TLS_CN_MAX 64			/* longest subject CN kept (RFC 5280
					   ub-common-name) */

/* What tls_read/tls_write return besides a byte count (> 0) or 0. */
#define TLS_WANT_READ	(-1)		/* wait until the socket is readable */
#define TLS_WANT_WRITE	(-2)		/* wait until it is writable */
#define TLS_FAILED	(-3)		/* the connection is unusable */
#define TLS_TRUNCATED	(-4)		/* the TCP stream ended without a
					   close_notify: the input may have
					   been cut by someone on the path */

/* What a context is built from: the tls_* options of config.h. */
struct tls_cfg {
	const char *cert_file;		/* tls_cert_file: PEM chain, leaf
					   first */
	const char *key_file;		/* tls_key_file */
	const char *ca_cert_file;	/* tls_ca_cert_file; "": client
					   certificates not verified */
	long auth_clients;		/* tls_auth_clients: enum tls_auth */
	const char *protocols;		/* tls_protocols, checked by
					   config_tls_protocols */
};

/* Build the context.  NULL with err filled (naming the option at fault). */
struct tls *tls_new(const struct tls_cfg *cfg, char *err, size_t errlen);

/*
 * Free t.  Sessions made from its context keep it (OpenSSL counts its
 * references): a reload builds the new context with tls_new first, so
 * that bad files fail the whole reload, then frees the old one.
 */
void tls_free(struct tls *t);

/* A server-side SSL on fd, with the current context.  NULL, err filled. */
struct ssl_st *tls_ssl_new(struct tls *t, int fd, char *err, size_t errlen);

/*
 * One step of the server handshake.  1 done; TLS_WANT_READ or
 * TLS_WANT_WRITE: call again when the socket is ready; TLS_FAILED with
 * why filled (the peer closed, a protocol error, a certificate that did
 * not verify).
 */
int tls_handshake(struct ssl_st *ssl, char *why, size_t whylen);

/*
 * The subject CN of the peer's certificate, copied into out (at most
 * TLS_CN_MAX bytes and a NUL) when the peer sent a certificate that
 * verified against tls_ca_cert_file and whose subject has exactly one CN,
 * of printable ASCII.  Returns 1 then, 0 otherwise (out is ""): a subject
 * with several CNs has none, so it can never name an app.
 */
int tls_peer_cn(struct ssl_st *ssl, char *out, size_t outlen);

/* The protocol version and cipher, for a debug line. */
const char *tls_version(struct ssl_st *ssl);
const char *tls_cipher(struct ssl_st *ssl);

/*
 * Like read()/write() on the socket: bytes moved (> 0); 0 from tls_read
 * when the peer ended its input with a close_notify; TLS_TRUNCATED from
 * tls_read when the TCP stream ended without one (the SSL is unusable
 * then: what came before may be a cut-off prefix of what was sent); or
 * TLS_WANT_READ / TLS_WANT_WRITE / TLS_FAILED.
 */
long tls_read(struct ssl_st *ssl, void *buf, size_t len);
long tls_write(struct ssl_st *ssl, const void *buf, size_t len);

/*
 * Whether decrypted bytes wait inside the SSL (SSL_pending): the socket
 * will not say readable for them.  Not SSL_has_pending, which is also
 * true for part of a record, which only more bytes from the socket can
 * complete: re-reading for it would spin until they come.
 */
int tls_pending(struct ssl_st *ssl);

/*
 * Free ssl.  With clean, first send our close_notify if the socket takes
 * it now (never waits): the peer then sees a proper TLS end.  The caller
 * closes the socket.
 */
void tls_close(struct ssl_st *ssl, int clean);

#endif
