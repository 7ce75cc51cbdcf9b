/*
 * tls.c - lockctl --tls: the client end of a TLS connection to the broker.
 *
 * The broker's certificate is always verified: against --cacert, or the
 * system's trusted CAs, and against the host given to -H (DNS name or IP
 * address in its subjectAltName).  TLS 1.2 or later.  Every failing
 * OpenSSL call's error queue is read into the message and emptied.
 */
#include "tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Append the error queue to err (after what it holds) and empty it. */
static void
errors_text(char *err, size_t errlen)
{
	size_t used = strlen(err);
	unsigned long e;
	int n = 0;

	while ((e = ERR_get_error()) != 0) {
		char one[256];

		ERR_error_string_n(e, one, sizeof one);
		if (used < errlen)
			snprintf(err + used, errlen - used, "%s%s",
			    n++ ? "; " : "", one);
		used = strlen(err);
	}
	if (n == 0 && used < errlen)
		snprintf(err + used, errlen - used, "%s", errno != 0 ?
		    strerror(errno) : "connection closed");
}

static long long
mono_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;	/* cannot fail with CLOCK_MONOTONIC */
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A no-prompt passphrase callback: an encrypted --key fails cleanly. */
static int
no_passphrase(char *buf, int size, int rwflag, void *arg)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)arg;
	return 0;
}

static SSL_CTX *
ctx_new(const struct ctls_opts *o, char *err, size_t errlen)
{
	SSL_CTX *ctx;

	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		snprintf(err, errlen, "TLS: ");
		errors_text(err, errlen);
		return NULL;
	}
	SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		snprintf(err, errlen, "TLS: ");
		goto fail;
	}
	if (o->cacert != NULL ? SSL_CTX_load_verify_locations(ctx, o->cacert,
	    NULL) != 1 : SSL_CTX_set_default_verify_paths(ctx) != 1) {
		snprintf(err, errlen, "--cacert %s: ", o->cacert ? o->cacert :
		    "(system CAs)");
		goto fail;
	}
	if (o->cert != NULL &&
	    SSL_CTX_use_certificate_chain_file(ctx, o->cert) != 1) {
		snprintf(err, errlen, "--cert %s: ", o->cert);
		goto fail;
	}
	if (o->key != NULL &&
	    SSL_CTX_use_PrivateKey_file(ctx, o->key, SSL_FILETYPE_PEM) != 1) {
		snprintf(err, errlen, "--key %s: ", o->key);
		goto fail;
	}
	if (o->cert != NULL && SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(err, errlen, "--key %s does not match --cert %s: ",
		    o->key, o->cert);
		goto fail;
	}
	return ctx;
fail:
	errors_text(err, errlen);
	SSL_CTX_free(ctx);
	return NULL;
}

/* Which name the broker's certificate must carry: host itself. */
static int
set_peer_name(SSL *ssl, const char *host)
{
	unsigned char addr[16];

	if (inet_pton(AF_INET, host, addr) == 1 ||
	    inet_pton(AF_INET6, host, addr) == 1)
		return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl),
		    host) == 1 ? 0 : -1;
	if (SSL_set_tlsext_host_name(ssl, host) != 1 ||
	    SSL_set1_host(ssl, host) != 1)
		return -1;
	return 0;
}

struct ssl_st *
ctls_open(int fd, const char *host, const struct ctls_opts *o,
    long long timeout_ms, char *err, size_t errlen)
{
	long long deadline = mono_ms() + timeout_ms;
	SSL_CTX *ctx;
	SSL *ssl;

	err[0] = '\0';
	if ((ctx = ctx_new(o, err, errlen)) == NULL)
		return NULL;
	ssl = SSL_new(ctx);
	SSL_CTX_free(ctx);		/* the SSL holds a reference */
	if (ssl == NULL || SSL_set_fd(ssl, fd) != 1 ||
	    set_peer_name(ssl, host) != 0) {
		snprintf(err, errlen, "TLS: ");
		errors_text(err, errlen);
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_connect_state(ssl);
	for (;;) {
		struct pollfd p = { fd, 0, 0 };
		long long left;
		int ret, e;

		ERR_clear_error();
		errno = 0;
		if ((ret = SSL_connect(ssl)) == 1)
			return ssl;
		e = SSL_get_error(ssl, ret);
		if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
			long vr = SSL_get_verify_result(ssl);

			if (vr != X509_V_OK)
				snprintf(err, errlen, "TLS handshake: broker "
				    "certificate: %s", X509_verify_cert_error_string(vr));
			else {
				snprintf(err, errlen, "TLS handshake: ");
				errors_text(err, errlen);
			}
			ERR_clear_error();
			SSL_free(ssl);
			return NULL;
		}
		p.events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
		if ((left = deadline - mono_ms()) <= 0) {
			snprintf(err, errlen, "TLS handshake: no answer within "
			    "%lld ms", timeout_ms);
			SSL_free(ssl);
			return NULL;
		}
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR) {
			snprintf(err, errlen, "poll: %s", strerror(errno));
			SSL_free(ssl);
			return NULL;
		}
	}
}

static long
io_result(SSL *ssl, int ret, const char *what, char *err, size_t errlen)
{
	switch (SSL_get_error(ssl, ret)) {
	case SSL_ERROR_WANT_READ:
		return CTLS_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return CTLS_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		snprintf(err, errlen, "%s: ", what);
		errors_text(err, errlen);
		return CTLS_FAILED;
	}
}

long
ctls_read(struct ssl_st *ssl, void *buf, size_t len, char *err,
    size_t errlen)
{
	size_t got = 0;
	int ret;

	ERR_clear_error();
	errno = 0;
	if ((ret = SSL_read_ex(ssl, buf, len, &got)) == 1)
		return (long)got;
	return io_result(ssl, ret, "TLS read", err, errlen);
}

long
ctls_write(struct ssl_st *ssl, const void *buf, size_t len, char *err,
    size_t errlen)
{
	size_t put = 0;
	long r;
	int ret;

	ERR_clear_error();
	errno = 0;
	if ((ret = SSL_write_ex(ssl, buf, len, &put)) == 1)
		return (long)put;
	r = io_result(ssl, ret, "TLS write", err, errlen);
	if (r == 0) {
		snprintf(err, errlen, "TLS write: the broker closed the "
		    "connection");
		r = CTLS_FAILED;
	}
	return r;
}

int
ctls_pending(struct ssl_st *ssl)
{
	/* Not SSL_has_pending: it is also true for part of a record, and
	 * polling with timeout 0 for it spun until the rest came. */
	return SSL_pending(ssl) > 0;
}

void
ctls_close(struct ssl_st *ssl)
{
	if (ssl == NULL)
		return;
	ERR_clear_error();
	if (SSL_shutdown(ssl) < 0)	/* one try, never waits */
		ERR_clear_error();
	SSL_free(ssl);
}
