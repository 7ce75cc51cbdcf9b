/*
 * lock.c - take a lockbroker lock, use its fencing token, release it.
 *
 * usage: lock [--shared | --limit N] [KEY [WAIT_MS]]   (defaults: example 5000)
 * --shared takes a read hold that other --shared runs share; --limit N takes
 * one of N permits of a semaphore (protocol 1.1).
 * The broker is $LOCKBROKER_HOST:$LOCKBROKER_PORT (127.0.0.1:7711).
 * Exits 0 when done, 75 if the lock stayed busy, 1 on an error.
 * Build: cc -std=c11 -D_POSIX_C_SOURCE=200809L -o lock lock.c
 */
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int sock = -1;		/* the session: the lock lives as long as it */
static FILE *replies;		/* one CRLF-terminated line per request */

static int
connect_broker(const char *host, const char *port)
{
	struct addrinfo hints, *res, *ai;
	int fd = -1, rc;

	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if ((rc = getaddrinfo(host, port, &hints, &res)) != 0) {
		fprintf(stderr, "lock: %s: %s\n", host, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		if ((fd = socket(ai->ai_family, ai->ai_socktype,
		    ai->ai_protocol)) < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		fprintf(stderr, "lock: cannot connect to %s:%s\n", host, port);
	return fd;
}

/* Send one request line; put its reply, CRLF dropped, in reply. */
static int
call(const char *req, char *reply, size_t len)
{
	if (dprintf(sock, "%s\n", req) < 0 ||
	    fgets(reply, (int)len, replies) == NULL) {
		fprintf(stderr, "lock: %s: the broker went away\n", req);
		return -1;
	}
	reply[strcspn(reply, "\r\n")] = '\0';
	return 0;
}

int
main(int argc, char **argv)
{
	const char *host = getenv("LOCKBROKER_HOST");
	const char *port = getenv("LOCKBROKER_PORT");
	const char *key;
	long wait_ms;
	char kind[32] = "";	/* "", " SHARED" or " LIMIT <n>" */
	char req[512], reply[512];

	if (argc > 1 && strcmp(argv[1], "--shared") == 0) {
		strcpy(kind, " SHARED");
		argv++, argc--;
	} else if (argc > 2 && strcmp(argv[1], "--limit") == 0) {
		snprintf(kind, sizeof kind, " LIMIT %ld",
		    strtol(argv[2], NULL, 10));
		argv += 2, argc -= 2;
	}
	key = argc > 1 ? argv[1] : "example";
	wait_ms = argc > 2 ? strtol(argv[2], NULL, 10) : 5000;

	signal(SIGPIPE, SIG_IGN);	/* a closed socket is an error, not death */
	sock = connect_broker(host != NULL ? host : "127.0.0.1",
	    port != NULL ? port : "7711");
	if (sock < 0 || (replies = fdopen(sock, "r")) == NULL)
		return 1;

	snprintf(req, sizeof req, "ACQUIRE %s%s WAIT %ld", key, kind, wait_ms);
	if (call(req, reply, sizeof reply) < 0)
		return 1;
	if (strcmp(reply, "BUSY") == 0) {
		fprintf(stderr, "lock: %s is busy\n", key);
		return 75;
	}
	if (strncmp(reply, "OK ", 3) != 0) {
		fprintf(stderr, "lock: ACQUIRE: %s\n", reply);
		return 1;
	}
	unsigned long long token = strtoull(reply + 3, NULL, 10);
	printf("acquired %s with fencing token %llu\n", key, token);
	/* Do the work here.  Send the token with every write, so that the
	 * resource can refuse a holder whose token is older than one seen. */

	snprintf(req, sizeof req, "RELEASE %s", key);
	if (call(req, reply, sizeof reply) < 0)
		return 1;
	if (strncmp(reply, "OK", 2) != 0) {
		fprintf(stderr, "lock: RELEASE: %s\n", reply);
		return 1;
	}
	printf("released %s\n", key);
	if (call("QUIT", reply, sizeof reply) < 0)
		return 1;
	fclose(replies);		/* closes sock too */
	return 0;
}
