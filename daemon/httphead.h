/*
 * httphead.h - the head of an HTTP/1.0 or 1.1 request, parsed: all the
 * broker's /metrics server (httpd.c) needs to answer one page.
 *
 * Pure: libc only, no I/O, no allocation, so a table of hostile heads can
 * be thrown at it in a unit test.
 */
#ifndef LOCKBROKER_HTTPHEAD_H
#define LOCKBROKER_HTTPHEAD_H

#include <stddef.h>

struct http_head {
	int get;			/* the method is GET */
	const char *path;		/* the target's path, query cut off */
	size_t pathlen;			/* (points into the parsed bytes) */
	int keep_alive;			/* another request may follow */
	int has_body;			/* a body follows (never read) */
};

/*
 * The length of the head at the front of buf[0..len): through the empty
 * line that ends it (CRLF or bare LF line ends); 0 when it is not
 * complete yet.
 */
size_t http_head_len(const char *buf, size_t len);

/*
 * Parse a complete head (as http_head_len measured it).  The request
 * line must be "<method> <target> HTTP/1.0" or "HTTP/1.1", the target an
 * origin-form path ("/..."), each header line "<name>:<value>"; no byte
 * may be NUL or another control character but tab.  keep_alive follows
 * the version's default and the Connection header ("close",
 * "keep-alive"); has_body is set by a Content-Length other than 0 or by
 * any Transfer-Encoding.  Returns 0, or -1 for a head that is not such
 * a request (the caller answers 400 and closes).
 */
int http_head_parse(const char *buf, size_t len, struct http_head *h);

#endif
