/*
 * httpd.h - a small, bounded HTTP/1.x server for one page (the broker's
 * GET /metrics): at most max_conns connections, each request answered or
 * dropped within timeout_ms.  See httpd.c for why not evhttp.
 */
#ifndef LOCKBROKER_HTTPD_H
#define LOCKBROKER_HTTPD_H

#include <stddef.h>

struct event_base;
struct evbuffer;
struct httpd;

/* Write the page into out; -1 when out of memory (the answer is 500). */
typedef int httpd_page_fn(void *arg, struct evbuffer *out);

struct httpd_cfg {
	const char *bind;		/* a numeric IP (addr_parse_listen) */
	long port;
	long max_conns;			/* past it: accepted and closed */
	long timeout_ms;		/* per request, and idle keep-alive */
	const char *path;		/* the one page, "/metrics" */
	const char *content_type;
	httpd_page_fn *page;
	void *arg;
};

/* Listen; NULL with a message in err (the port in use, ...). */
struct httpd *httpd_new(struct event_base *base, const struct httpd_cfg *cfg,
    char *err, size_t errlen);
/* Close every connection and the listener. */
void httpd_free(struct httpd *h);
/* Connections open now; connections closed at once for max_conns. */
size_t httpd_conns(const struct httpd *h);
unsigned long long httpd_refused(const struct httpd *h);

#endif
