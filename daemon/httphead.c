/*
 * httphead.c - parse the head of an HTTP/1.x request (see httphead.h).
 *
 * Only what one page needs: the method (GET or not), the path, whether
 * the connection may carry another request, and whether a body follows
 * (the server never reads one: it answers and closes).  Anything it does
 * not understand is refused rather than guessed at.
 */
#include "httphead.h"

#include <string.h>
#include <strings.h>

size_t
http_head_len(const char *buf, size_t len)
{
	/* the first line that is empty, or holds only a CR */
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < len && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

/* The next line of buf[*pos..len), its end (LF or CRLF) cut off. */
static int
next_line(const char *buf, size_t len, size_t *pos, const char **line,
    size_t *linelen)
{
	const char *p = buf + *pos, *lf;

	if (*pos >= len || (lf = memchr(p, '\n', len - *pos)) == NULL)
		return -1;
	*line = p;
	*linelen = (size_t)(lf - p);
	if (*linelen > 0 && p[*linelen - 1] == '\r')
		(*linelen)--;
	*pos += (size_t)(lf - p) + 1;
	return 0;
}

/* Does the comma-separated list v[0..len) hold token tok (any case)? */
static int
has_token(const char *v, size_t len, const char *tok)
{
	size_t tl = strlen(tok), i = 0;

	while (i < len) {
		size_t s, e;

		while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		s = i;
		while (i < len && v[i] != ',')
			i++;
		e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e - s == tl && strncasecmp(v + s, tok, tl) == 0)
			return 1;
	}
	return 0;
}

static int
name_is(const char *line, size_t namelen, const char *name)
{
	return namelen == strlen(name) && strncasecmp(line, name, namelen) == 0;
}

/* One header line: the ones that matter set h; others are skipped. */
static int
header(const char *line, size_t len, struct http_head *h)
{
	const char *colon = memchr(line, ':', len), *v;
	size_t namelen, vlen;

	if (colon == NULL || colon == line)
		return -1;
	namelen = (size_t)(colon - line);
	for (size_t i = 0; i < namelen; i++)
		if (line[i] == ' ' || line[i] == '\t')
			return -1;	/* no blank before the colon */
	v = colon + 1;
	vlen = len - namelen - 1;
	while (vlen > 0 && (*v == ' ' || *v == '\t')) {
		v++;
		vlen--;
	}
	while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;
	if (name_is(line, namelen, "connection")) {
		if (has_token(v, vlen, "close"))
			h->keep_alive = 0;
		else if (has_token(v, vlen, "keep-alive"))
			h->keep_alive = 1;
	} else if (name_is(line, namelen, "transfer-encoding")) {
		h->has_body = 1;
	} else if (name_is(line, namelen, "content-length")) {
		if (vlen == 0)
			return -1;
		for (size_t i = 0; i < vlen; i++)
			if (v[i] < '0' || v[i] > '9')
				return -1;
			else if (v[i] != '0')
				h->has_body = 1;
	}
	return 0;
}

int
http_head_parse(const char *buf, size_t len, struct http_head *h)
{
	const char *line, *sp1, *sp2, *q;
	size_t linelen, pos = 0, tlen;

	memset(h, 0, sizeof *h);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)buf[i];

		if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') ||
		    c == 0x7f)
			return -1;
	}
	if (next_line(buf, len, &pos, &line, &linelen) != 0 || linelen == 0)
		return -1;
	/* <method> SP <target> SP HTTP/1.x */
	if ((sp1 = memchr(line, ' ', linelen)) == NULL || sp1 == line)
		return -1;
	tlen = linelen - (size_t)(sp1 + 1 - line);
	if ((sp2 = memchr(sp1 + 1, ' ', tlen)) == NULL || sp2 == sp1 + 1)
		return -1;
	if ((size_t)(line + linelen - (sp2 + 1)) != 8 ||
	    memcmp(sp2 + 1, "HTTP/1.", 7) != 0)
		return -1;
	if (sp2[8] == '1')
		h->keep_alive = 1;
	else if (sp2[8] != '0')
		return -1;
	h->get = sp1 - line == 3 && memcmp(line, "GET", 3) == 0;
	h->path = sp1 + 1;
	h->pathlen = (size_t)(sp2 - h->path);
	if (h->path[0] != '/')
		return -1;
	if ((q = memchr(h->path, '?', h->pathlen)) != NULL)
		h->pathlen = (size_t)(q - h->path);
	for (;;) {
		if (next_line(buf, len, &pos, &line, &linelen) != 0)
			return -1;	/* no empty line: not a whole head */
		if (linelen == 0)
			return 0;
		if (line[0] == ' ' || line[0] == '\t')
			return -1;	/* obsolete line folding */
		if (header(line, linelen, h) != 0)
			return -1;
	}
}
