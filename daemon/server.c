/*
 * server.c - the TCP listener: accept, refuse over max_sessions, stop.
 */
#include "broker.h"
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

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct broker *b = arg;

	(void)l;
	(void)salen;
	if (b->stopping) {
		close(fd);
		return;
	}
	if ((long)b->nsessions >= b->cfg->max_sessions) {
		/* Best effort: the socket is fresh, so the line fits. */
		if (send(fd, REFUSED_LINE, sizeof REFUSED_LINE - 1,
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
		return;
	}
	if (sa->sa_family != AF_UNIX)
		tune_socket(b, fd);
	if (session_new(b, fd) == NULL)
		close(fd);
}

static void
resume_accept(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	evconnlistener_enable(arg);
}

static void
accept_error_cb(struct evconnlistener *l, void *arg)
{
	int err = EVUTIL_SOCKET_ERROR();

	(void)arg;
	/* EMFILE and friends: pause a moment rather than spin. */
	log_warn("accept: %s", evutil_socket_error_to_string(err));
	evconnlistener_disable(l);
	{
		struct timeval tv = { 0, 100 * 1000 };
		if (event_base_once(evconnlistener_get_base(l), -1,
		    EV_TIMEOUT, resume_accept, l, &tv) != 0)
			evconnlistener_enable(l);
	}
}

int
server_listen(struct broker *b, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	int sslen = sizeof ss;
	char addr[300];

	snprintf(addr, sizeof addr, strchr(b->cfg->bind, ':') ? "[%s]:%ld" :
	    "%s:%ld", b->cfg->bind, b->cfg->port);
	if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss,
	    &sslen) != 0) {
		snprintf(err, errlen, "bad bind address '%s' (numeric IPv4 or "
		    "IPv6 wanted)", b->cfg->bind);
		return -1;
	}
	b->listener = evconnlistener_new_bind(b->base, accept_cb, b,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
	    511, (struct sockaddr *)&ss, sslen);
	if (b->listener == NULL) {
		snprintf(err, errlen, "cannot listen on %s: %s", addr,
		    strerror(errno));
		return -1;
	}
	evconnlistener_set_error_cb(b->listener, accept_error_cb);
	log_info("listening on %s", addr);
	return 0;
}

/*
 * The unix socket listener.  A socket file left by a broker that died is
 * removed first; any other kind of file at the path is an error.
 */
int
server_listen_unix(struct broker *b, char *err, size_t errlen)
{
	const char *path = b->cfg->unixsocket;
	struct sockaddr_un sun;
	struct stat st;

	if (path[0] == '\0')
		return 0;
	if (strlen(path) >= sizeof sun.sun_path) {
		snprintf(err, errlen, "unixsocket path too long: %s", path);
		return -1;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "unixsocket %s exists and is not "
			    "a socket", path);
			return -1;
		}
		if (unlink(path) != 0) {
			snprintf(err, errlen, "cannot remove stale %s: %s", path,
			    strerror(errno));
			return -1;
		}
	}
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	memcpy(sun.sun_path, path, strlen(path));
	b->ulistener = evconnlistener_new_bind(b->base, accept_cb, b,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 511,
	    (struct sockaddr *)&sun, sizeof sun);
	if (b->ulistener == NULL) {
		snprintf(err, errlen, "cannot listen on %s: %s", path,
		    strerror(errno));
		return -1;
	}
	if (chmod(path, (mode_t)b->cfg->unixsocketperm) != 0) {
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
