/*
 * notify.h - systemd readiness notification (sd_notify protocol), without
 * libsystemd: a datagram to $NOTIFY_SOCKET.  A no-op when it is unset.
 */
#ifndef LOCKBROKER_NOTIFY_H
#define LOCKBROKER_NOTIFY_H

/* Send "READY=1", "STATUS=...", "RELOADING=1", "STOPPING=1", ... */
void notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
