/*
 * server.c - the listeners (TCP, TLS, unix socket): accept, refuse over
 * max_sessions, stop.  A TLS connection goes to handshake.c first and
 * becomes a session once its handshake is done.
 */
#include "broker.h"
#include "addr.h"
#include "log.h"
#include "util.h"

#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define REFUSED_LOG_MS 10000	/* quiet time between "refusing" lines */
#define REFUSED_LINE "ERR LIMIT too many sessions (max_sessions)\r\n"

/*
 * Keepalive so that a peer that vanished is found in ~3 x idle seconds.
 * Keepalive probes only an idle connection: once a reply (a grant, say)
 * sits unacknowledged in the send queue the kernel retransmits it for
 * ~15 minutes instead, and the dead peer keeps its locks all that time
 * (issue 9, defect 1).  TCP_USER_TIMEOUT bounds that case by the same
 * budget: unacknowledged data older than it drops the connection.
 */
static void
tune_socket(struct broker *b, int fd)
{
	int one = 1;
	int idle = (int)b->cfg->tcp_keepalive_s;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
		log_debug("TCP_NODELAY: %s", strerror(errno));
	if (idle <= 0)
		return;
	{
		int intvl = idle / 2 > 0 ? idle / 2 : 1, cnt = 4;
		unsigned int user_ms = (unsigned int)(idle + intvl * cnt) * 1000u;

		if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one,
		    sizeof one) != 0 ||
		    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle,
		    sizeof idle) != 0 ||
		    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl,
		    sizeof intvl) != 0 ||
		    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt,
		    sizeof cnt) != 0 ||
		    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms,
		    sizeof user_ms) != 0)
			log_debug("keepalive: %s", strerror(errno));
	}
}

/*
 * Refuse fd if the broker is stopping or at max_sessions (a TLS handshake
 * in progress counts as a session: it holds a descriptor).  Returns 1
 * when fd was closed.  A plain client is told why in a line; a TLS client
 * cannot read plain text, so it only sees the connection close.
 */
static int
refused(struct broker *b, int fd, int is_tls)
{
	if (b->stopping) {
		close(fd);
		return 1;
	}
	if ((long)(b->nsessions + b->nhandshakes) >= b->cfg->max_sessions) {
		/* Best effort: the socket is fresh, so the line fits. */
		if (!is_tls && send(fd, REFUSED_LINE, sizeof REFUSED_LINE - 1,
		    MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			log_debug("refusal not sent: %s", strerror(errno));
		close(fd);
		b->stats.refused++;
		if (b->refused_logged_ms == 0 ||
		    now_ms() - b->refused_logged_ms >= REFUSED_LOG_MS) {
			b->refused_logged_ms = now_ms();
			log_warn("max_sessions (%ld) reached: refusing "
			    "connections (%llu refused so far)",
			    b->cfg->max_sessions,
			    (unsigned long long)b->stats.refused);
		}
		return 1;
	}
	return 0;
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct broker *b = arg;

	(void)l;
	(void)salen;
	if (refused(b, fd, 0))
		return;
	if (sa->sa_family != AF_UNIX)
		tune_socket(b, fd);
	if (session_new(b, fd, NULL, "") == NULL)
		close(fd);
}

static void
accept_tls_cb(struct evconnlistener *l, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct broker *b = arg;

	(void)l;
	(void)salen;
	if (refused(b, fd, 1))
		return;
	tune_socket(b, fd);
	handshake_start(b, fd, sa);	/* takes fd */
}

/* The pause after an accept error is over: accept again, on whichever
 * listener paused (enabling one that did not is harmless); not once the
 * broker stops, which has freed them. */
static void
resume_accept(evutil_socket_t fd, short what, void *arg)
{
	struct broker *b = arg;
	struct evconnlistener *ls[] = { b->listener, b->tlistener,
	    b->ulistener };

	(void)fd;
	(void)what;
	if (b->stopping)
		return;
	for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++)
		if (ls[i] != NULL)
			evconnlistener_enable(ls[i]);
}

/*
 * EMFILE and friends: pause the listener a moment rather than spin, and
 * log it at most once per REFUSED_LOG_MS with the count since: each
 * pause logged a line (10 a second while descriptors were short).
 */
static void
accept_error_cb(struct evconnlistener *l, void *arg)
{
	struct broker *b = arg;
	int err = EVUTIL_SOCKET_ERROR();
	struct timeval tv = { 0, 100 * 1000 };
	int64_t now = now_ms();

	evconnlistener_disable(l);
	if (event_base_once(b->base, -1, EV_TIMEOUT, resume_accept, b,
	    &tv) != 0)
		evconnlistener_enable(l);
	if (b->accept_err_logged_ms != 0 &&
	    now - b->accept_err_logged_ms < REFUSED_LOG_MS) {
		b->accept_err_unlogged++;
		return;
	}
	log_warn("accept: %s (accepting again in 100 ms; %llu such errors "
	    "not logged since the last line)",
	    evutil_socket_error_to_string(err),
	    (unsigned long long)b->accept_err_unlogged);
	b->accept_err_logged_ms = now;
	b->accept_err_unlogged = 0;
}

/*
 * A TCP listener on bind:port.  The bind address was checked by config_set
 * with the same parser, so a failure here is a run-time one (port in use,
 * address not on this host): the caller exits 1, not 2.
 */
static struct evconnlistener *
listen_tcp(struct broker *b, long port, evconnlistener_cb cb,
    const char *what, char *err, size_t errlen)
{
	struct evconnlistener *l;
	struct sockaddr_storage ss;
	socklen_t sslen;
	struct addr a;
	char msg[256], where[ADDR_HOST_LEN + 16];

	if (addr_parse_listen(b->cfg->bind, &a, msg, sizeof msg) != 0) {
		snprintf(err, errlen, "bind: %s", msg);
		return NULL;
	}
	if (addr_sockaddr(&a, (int)port, &ss, &sslen) != 0) {
		snprintf(err, errlen, "bind: no socket address for '%s'",
		    b->cfg->bind);
		return NULL;
	}
	snprintf(where, sizeof where, a.family == AF_INET6 ? "[%s]:%ld" :
	    "%s:%ld", a.host, port);
	l = evconnlistener_new_bind(b->base, cb, b,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
	    511, (struct sockaddr *)&ss, (int)sslen);
	if (l == NULL) {
		snprintf(err, errlen, "cannot listen on %s: %s", where,
		    strerror(errno));
		return NULL;
	}
	evconnlistener_set_error_cb(l, accept_error_cb);
	log_info("listening on %s%s", where, what);
	return l;
}

/* The plain TCP listener; none with port 0. */
int
server_listen(struct broker *b, char *err, size_t errlen)
{
	if (b->cfg->port == 0)
		return 0;
	b->listener = listen_tcp(b, b->cfg->port, accept_cb, "", err, errlen);
	return b->listener != NULL ? 0 : -1;
}

/* The TLS listener, when tls_port is set (b->tls is ready then). */
int
server_listen_tls(struct broker *b, char *err, size_t errlen)
{
	if (b->cfg->tls_port == 0)
		return 0;
	b->tlistener = listen_tcp(b, b->cfg->tls_port, accept_tls_cb,
	    " (TLS)", err, errlen);
	return b->tlistener != NULL ? 0 : -1;
}

/*
 * Whether something accepts connections on the unix socket at sun: 1 yes,
 * 0 no (nothing listens: a stale file, or no file at all), -1 cannot tell
 * (err filled).  Non-blocking, so a live listener with a full backlog
 * answers EAGAIN at once, which counts as live, instead of blocking us.
 */
static int
unix_socket_live(const struct sockaddr_un *sun, char *err, size_t errlen)
{
	int fd, rc, e;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	rc = connect(fd, (const struct sockaddr *)sun, sizeof *sun);
	e = errno;
	if (close(fd) != 0)
		log_debug("close: %s", strerror(errno));
	if (rc == 0 || e == EAGAIN || e == EINPROGRESS)
		return 1;
	if (e == ECONNREFUSED || e == ENOENT)
		return 0;
	snprintf(err, errlen, "cannot tell whether %s is in use: connect: %s",
	    sun->sun_path, strerror(e));
	return -1;
}

/*
 * The unix socket listener.  A socket file left by a broker that died is
 * replaced; one that a live process answers on is not (issue 9, defect
 * 13: a second broker given the same path used to take it over), and any
 * other kind of file at the path is an error.
 *
 * The file is created with its final mode: the umask is set from
 * unixsocketperm around bind, so there is no moment where the mode is the
 * process umask's, e.g. 0777 under umask 0 (issue 9, defect 14).  The
 * chmod after it still sets the exact bits, should a default ACL on the
 * directory have overridden the umask.  The broker is single-threaded, so
 * no other file is created while the umask is changed.
 */
int
server_listen_unix(struct broker *b, char *err, size_t errlen)
{
	const char *path = b->cfg->unixsocket;
	mode_t perm = (mode_t)b->cfg->unixsocketperm, old_mask;
	struct sockaddr_un sun;
	struct stat st;
	size_t len = strlen(path);

	if (path[0] == '\0')
		return 0;
	if (len >= sizeof sun.sun_path) {
		snprintf(err, errlen, "unixsocket path too long: %s", path);
		return -1;
	}
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	memcpy(sun.sun_path, path, len);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "unixsocket %s exists and is not "
			    "a socket", path);
			return -1;
		}
		switch (unix_socket_live(&sun, err, errlen)) {
		case 1:
			snprintf(err, errlen, "unixsocket %s is in use: "
			    "another process (another lockbrokerd?) accepts "
			    "connections on it", path);
			return -1;
		case 0:
			break;
		default:
			return -1;
		}
		if (unlink(path) != 0 && errno != ENOENT) {
			snprintf(err, errlen, "cannot remove stale %s: %s", path,
			    strerror(errno));
			return -1;
		}
		log_info("removed stale unix socket %s", path);
	} else if (errno != ENOENT) {
		snprintf(err, errlen, "unixsocket %s: %s", path,
		    strerror(errno));
		return -1;
	}
	old_mask = umask((mode_t)(~perm & 0777));
	b->ulistener = evconnlistener_new_bind(b->base, accept_cb, b,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 511,
	    (struct sockaddr *)&sun, sizeof sun);
	if (b->ulistener == NULL) {
		int e = errno;

		umask(old_mask);
		snprintf(err, errlen, "cannot listen on %s: %s", path,
		    strerror(e));
		return -1;
	}
	umask(old_mask);	/* umask() cannot fail */
	if (chmod(path, perm) != 0) {
		snprintf(err, errlen, "chmod %s: %s", path, strerror(errno));
		return -1;
	}
	evconnlistener_set_error_cb(b->ulistener, accept_error_cb);
	log_info("listening on unix:%s (mode %04lo)", path,
	    b->cfg->unixsocketperm);
	return 0;
}

void
server_stop(struct broker *b)
{
	struct session *s;

	b->stopping = 1;
	if (b->listener != NULL) {
		evconnlistener_free(b->listener);
		b->listener = NULL;
	}
	if (b->tlistener != NULL) {
		evconnlistener_free(b->tlistener);
		b->tlistener = NULL;
	}
	handshake_stop_all(b);
	if (b->ulistener != NULL) {
		evconnlistener_free(b->ulistener);
		b->ulistener = NULL;
		if (unlink(b->cfg->unixsocket) != 0)
			log_warn("unlink %s: %s", b->cfg->unixsocket,
			    strerror(errno));
	}
	while ((s = TAILQ_FIRST(&b->sessions)) != NULL)
		session_free(s);
}
