/*
 * notify.c - tell systemd about readiness and state (Type=notify).
 *
 * An abstract socket ('@' first) is addressed with its exact length
 * (offsetof(sun_path) + len), not sizeof: the trailing bytes would
 * otherwise be part of the name.  Failures are logged, never fatal: the
 * broker works the same without a supervisor listening.
 */
#include "notify.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

void
notify(const char *fmt, ...)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	char msg[256];
	size_t plen;
	va_list ap;
	int fd;

	if (path == NULL || (path[0] != '/' && path[0] != '@'))
		return;
	plen = strlen(path);
	if (plen >= sizeof sa.sun_path) {
		log_warn("NOTIFY_SOCKET path too long");
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, plen);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
		log_warn("notify socket: %s", strerror(errno));
		return;
	}
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa,
	    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen)) < 0)
		log_warn("notify '%s': %s", msg, strerror(errno));
	close(fd);
}
