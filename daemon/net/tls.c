/*
 * tls.c - the server's TLS context and TLS I/O on a socket (OpenSSL 3).
 *
 * The context is built from a struct tls_cfg (main.c fills it from the
 * tls_* options; of config.h this file uses only config_tls_protocols
 * and enum tls_auth), once at start and again on every SIGHUP; an SSL
 * made from it holds a reference of its own, so replacing the context
 * never disturbs a session running on the old one.  Every
 * OpenSSL call that can fail is preceded by ERR_clear_error() and its
 * error queue read (and emptied) when it fails: a stale entry left in the
 * queue would make a later SSL_get_error() answer for the wrong call.
 */
#include "tls.h"
#include "config.h"
#include "log.h"
#include "util.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SESSION_ID_CTX "lockbrokerd"

struct tls {
	SSL_CTX *ctx;			/* for connections accepted from now */
};

/*
 * Append the error queue's entries to buf (after what it holds) and empty
 * the queue.  "unknown error" when the queue was empty.
 */
static void
errors_text(char *buf, size_t len)
{
	size_t used = strlen(buf);
	unsigned long e;
	int n = 0;

	while ((e = ERR_get_error()) != 0) {
		char one[256];

		ERR_error_string_n(e, one, sizeof one);
		if (used < len)
			snprintf(buf + used, len - used, "%s%s", n++ ? "; " :
			    "", one);
		used = strlen(buf);
	}
	if (n == 0 && used < len)
		snprintf(buf + used, len - used, "unknown error");
}

/* A readable file, told apart from OpenSSL's less direct messages. */
static int
check_file(const char *opt, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");

	if (f == NULL) {
		snprintf(err, errlen, "%s %s: %s", opt, path, strerror(errno));
		return -1;
	}
	if (fclose(f) != 0) {
		snprintf(err, errlen, "%s %s: %s", opt, path, strerror(errno));
		return -1;
	}
	return 0;
}

/* An encrypted key would otherwise make OpenSSL prompt on the tty. */
static int
no_passphrase(char *buf, int size, int rwflag, void *arg)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)arg;
	return 0;
}

/* Warn (only) about a certificate outside its validity: clients will
 * refuse it, but the operator may be replacing it right now. */
static void
warn_validity(SSL_CTX *ctx, const char *path)
{
	X509 *cert = SSL_CTX_get0_certificate(ctx);

	if (cert == NULL)
		return;
	if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0)
		log_warn("tls_cert_file %s has expired: verifying clients will "
		    "refuse it", path);
	else if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0)
		log_warn("tls_cert_file %s is not valid yet", path);
}

static SSL_CTX *
ctx_build(const struct tls_cfg *cfg, char *err, size_t errlen)
{
	SSL_CTX *ctx;
	unsigned mask;
	int verify = SSL_VERIFY_NONE;
	char msg[256];

	err[0] = '\0';
	if (config_tls_protocols(cfg->protocols, &mask, msg,
	    sizeof msg) != 0) {
		snprintf(err, errlen, "tls_protocols: %s", msg);
		return NULL;
	}
	if (check_file("tls_cert_file", cfg->cert_file, err, errlen) != 0 ||
	    check_file("tls_key_file", cfg->key_file, err, errlen) != 0 ||
	    (cfg->ca_cert_file[0] != '\0' && check_file("tls_ca_cert_file",
	    cfg->ca_cert_file, err, errlen) != 0))
		return NULL;
	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
		snprintf(err, errlen, "cannot make a TLS context: ");
		errors_text(err, errlen);
		return NULL;
	}
	/*
	 * No renegotiation (so SSL_write never needs to read), no session
	 * tickets or cache (sessions are long-lived; a resumed TLS session
	 * would also skip the client certificate check of a reload).  No
	 * SSL_OP_IGNORE_UNEXPECTED_EOF: with it OpenSSL reports a TCP FIN
	 * without close_notify as a close_notify (SSL_RECEIVED_SHUTDOWN
	 * set), and a stream cut at a record boundary by someone on the path
	 * would end in a last line that looks complete: tls_read
	 * tells the two apart instead (TLS_TRUNCATED).
	 */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET |
	    SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	/* Partial writes and a moving buffer: the output is an evbuffer,
	 * drained by what each SSL_write took.  Idle sessions give their
	 * read and write buffers back (~34 KB each). */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
	if (SSL_CTX_set_num_tickets(ctx, 0) != 1 ||
	    SSL_CTX_set_min_proto_version(ctx, (mask & CONFIG_TLS12) ?
	    TLS1_2_VERSION : TLS1_3_VERSION) != 1 ||
	    SSL_CTX_set_max_proto_version(ctx, (mask & CONFIG_TLS13) ?
	    TLS1_3_VERSION : TLS1_2_VERSION) != 1 ||
	    SSL_CTX_set_session_id_context(ctx,
	    (const unsigned char *)SESSION_ID_CTX,
	    sizeof SESSION_ID_CTX - 1) != 1) {
		snprintf(err, errlen, "cannot set up the TLS context: ");
		goto fail;
	}
	if (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert_file) != 1) {
		snprintf(err, errlen, "tls_cert_file %s: not a PEM certificate "
		    "chain: ", cfg->cert_file);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, cfg->key_file,
	    SSL_FILETYPE_PEM) != 1) {
		/* OpenSSL checks the pair here already */
		if (ERR_GET_REASON(ERR_peek_last_error()) ==
		    X509_R_KEY_VALUES_MISMATCH)
			snprintf(err, errlen, "tls_key_file %s does not match "
			    "tls_cert_file %s: ", cfg->key_file,
			    cfg->cert_file);
		else
			snprintf(err, errlen, "tls_key_file %s: not an "
			    "unencrypted PEM private key: ", cfg->key_file);
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(err, errlen, "tls_key_file %s does not match "
		    "tls_cert_file %s: ", cfg->key_file, cfg->cert_file);
		goto fail;
	}
	if (cfg->ca_cert_file[0] != '\0') {
		STACK_OF(X509_NAME) *names;

		if (SSL_CTX_load_verify_locations(ctx, cfg->ca_cert_file,
		    NULL) != 1) {
			snprintf(err, errlen, "tls_ca_cert_file %s: ",
			    cfg->ca_cert_file);
			goto fail;
		}
		/* The CA names the server sends with its request: they help
		 * a client pick its certificate. */
		if ((names = SSL_load_client_CA_file(cfg->ca_cert_file)) ==
		    NULL) {
			snprintf(err, errlen, "tls_ca_cert_file %s: no "
			    "certificate in it: ", cfg->ca_cert_file);
			goto fail;
		}
		SSL_CTX_set_client_CA_list(ctx, names);
	}
	if (cfg->auth_clients == TLS_AUTH_YES)
		verify = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
	else if (cfg->auth_clients == TLS_AUTH_OPTIONAL)
		verify = SSL_VERIFY_PEER;	/* a bad one is still refused */
	SSL_CTX_set_verify(ctx, verify, NULL);
	warn_validity(ctx, cfg->cert_file);
	return ctx;
fail:
	errors_text(err, errlen);
	SSL_CTX_free(ctx);
	return NULL;
}

struct tls *
tls_new(const struct tls_cfg *cfg, char *err, size_t errlen)
{
	struct tls *t;
	SSL_CTX *ctx = ctx_build(cfg, err, errlen);

	if (ctx == NULL)
		return NULL;
	t = xcalloc(1, sizeof *t);
	t->ctx = ctx;
	return t;
}

void
tls_free(struct tls *t)
{
	if (t == NULL)
		return;
	/* SSLs made from it hold references of their own: the context is
	 * freed when the last of them ends. */
	SSL_CTX_free(t->ctx);
	free(t);
}

struct ssl_st *
tls_ssl_new(struct tls *t, int fd, char *err, size_t errlen)
{
	SSL *ssl;

	err[0] = '\0';
	ERR_clear_error();
	if ((ssl = SSL_new(t->ctx)) == NULL) {
		snprintf(err, errlen, "SSL_new: ");
		errors_text(err, errlen);
		return NULL;
	}
	if (SSL_set_fd(ssl, fd) != 1) {
		snprintf(err, errlen, "SSL_set_fd: ");
		errors_text(err, errlen);
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_accept_state(ssl);
	return ssl;
}

/*
 * Did the SSL call that failed with e see the TCP stream end without a
 * close_notify?  OpenSSL 3 says so with SSL_ERROR_SSL and this reason;
 * 1.1.1 said SSL_ERROR_SYSCALL with an empty error queue.
 */
static int
unexpected_eof(int e)
{
	unsigned long q = ERR_peek_error();

	return (e == SSL_ERROR_SSL && ERR_GET_LIB(q) == ERR_LIB_SSL &&
	    ERR_GET_REASON(q) == SSL_R_UNEXPECTED_EOF_WHILE_READING) ||
	    (e == SSL_ERROR_SYSCALL && q == 0 && errno == 0);
}

/* ERR_clear_error() and errno = 0 came first; ret is what the SSL call
 * returned. */
static int
io_result(SSL *ssl, int ret)
{
	int e = SSL_get_error(ssl, ret), r;

	switch (e) {
	case SSL_ERROR_WANT_READ:
		return TLS_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return TLS_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return 0;		/* a close_notify */
	default:
		r = unexpected_eof(e) ? TLS_TRUNCATED : TLS_FAILED;
		ERR_clear_error();	/* the caller only needs which */
		return r;
	}
}

int
tls_handshake(struct ssl_st *ssl, char *why, size_t whylen)
{
	int ret, e;
	long vr;

	why[0] = '\0';
	ERR_clear_error();
	errno = 0;
	if ((ret = SSL_accept(ssl)) == 1)
		return 1;
	e = SSL_get_error(ssl, ret);
	if (e == SSL_ERROR_WANT_READ)
		return TLS_WANT_READ;
	if (e == SSL_ERROR_WANT_WRITE)
		return TLS_WANT_WRITE;
	if ((e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) ||
	    e == SSL_ERROR_ZERO_RETURN || unexpected_eof(e)) {
		snprintf(why, whylen, "%s", errno != 0 && e ==
		    SSL_ERROR_SYSCALL ? strerror(errno) :
		    "closed during the handshake");
		ERR_clear_error();
		return TLS_FAILED;
	}
	vr = SSL_get_verify_result(ssl);
	if (vr != X509_V_OK)
		snprintf(why, whylen, "client certificate: %s: ",
		    X509_verify_cert_error_string(vr));
	errors_text(why, whylen);
	return TLS_FAILED;
}

int
tls_peer_cn(struct ssl_st *ssl, char *out, size_t outlen)
{
	X509 *cert;
	X509_NAME *name;
	unsigned char *utf8 = NULL;
	int idx, n, ok = 0;

	out[0] = '\0';
	if (outlen == 0 || SSL_get_verify_result(ssl) != X509_V_OK ||
	    (cert = SSL_get1_peer_certificate(ssl)) == NULL)
		return 0;
	ERR_clear_error();
	name = X509_get_subject_name(cert);
	/*
	 * Exactly one CN, or none at all: which of several would be "the"
	 * CN is a matter of convention (first, last, most specific), and a
	 * subject "CN=reports, CN=billing" must not be an app's certificate
	 * to one reader and another app's to the next.
	 */
	idx = name == NULL ? -1 :
	    X509_NAME_get_index_by_NID(name, NID_commonName, -1);
	if (idx >= 0 &&
	    X509_NAME_get_index_by_NID(name, NID_commonName, idx) >= 0)
		idx = -1;
	if (idx >= 0 && (n = ASN1_STRING_to_UTF8(&utf8,
	    X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx)))) > 0 &&
	    (size_t)n <= TLS_CN_MAX && (size_t)n < outlen) {
		ok = 1;
		for (int i = 0; i < n; i++)
			if (utf8[i] < 0x21 || utf8[i] > 0x7e)
				ok = 0;	/* no blanks, NUL or UTF-8: a word */
		if (ok) {
			memcpy(out, utf8, (size_t)n);
			out[n] = '\0';
		}
	}
	OPENSSL_free(utf8);
	X509_free(cert);
	ERR_clear_error();
	return ok;
}

const char *
tls_version(struct ssl_st *ssl)
{
	return SSL_get_version(ssl);
}

const char *
tls_cipher(struct ssl_st *ssl)
{
	const char *c = SSL_get_cipher_name(ssl);

	return c != NULL ? c : "?";
}

long
tls_read(struct ssl_st *ssl, void *buf, size_t len)
{
	size_t got = 0;
	int ret;

	ERR_clear_error();
	errno = 0;
	ret = SSL_read_ex(ssl, buf, len, &got);
	if (ret == 1)
		return (long)got;
	return io_result(ssl, ret);
}

long
tls_write(struct ssl_st *ssl, const void *buf, size_t len)
{
	size_t put = 0;
	int ret;

	ERR_clear_error();
	errno = 0;
	ret = SSL_write_ex(ssl, buf, len, &put);
	if (ret == 1)
		return (long)put;
	ret = io_result(ssl, ret);
	return ret == TLS_WANT_READ || ret == TLS_WANT_WRITE ? ret :
	    TLS_FAILED;
}

int
tls_pending(struct ssl_st *ssl)
{
	return SSL_pending(ssl) > 0;
}

void
tls_close(struct ssl_st *ssl, int clean)
{
	if (ssl == NULL)
		return;
	if (clean) {
		ERR_clear_error();
		/* One try: 0 (sent, theirs not seen) and -1 (the socket
		 * would block, or is gone) both end here. */
		if (SSL_shutdown(ssl) < 0)
			ERR_clear_error();
	}
	SSL_free(ssl);
}
