/*
 * cmd.c - what lockctl asks the broker (see cmd.h), and the lock it holds
 * meanwhile: every way out (CMD done, or die() on the way) gives it back.
 */
#include "child.h"
#include "cmd.h"
#include "parse.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>

#define TOKEN_MAX_LEN	64		/* AUTH token word (PROTO_NAME_MAX) */

void
cmd_auth(struct conn *c, const char *path)
{
	char tok[256], req[300], reply[LINE_MAX_LEN];
	ssize_t n;
	size_t len = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(1, "%s: %s", path, strerror(errno));
	while (len < sizeof tok) {
		n = read(fd, tok + len, sizeof tok - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die(1, "%s: %s", path, strerror(errno));
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (close(fd) < 0)
		die(1, "%s: close: %s", path, strerror(errno));
	if (len == sizeof tok)
		die(1, "%s: token file too long", path);
	len = token_trim(tok, len);
	if (!is_word(tok, TOKEN_MAX_LEN))
		die(1, "%s: token must be 1..%d printable characters without "
		    "blanks", path, TOKEN_MAX_LEN);
	snprintf(req, sizeof req, "AUTH %s", tok);
	explicit_bzero(tok, sizeof tok);
	if (conn_call(c, req, reply, sizeof reply) < 0) {
		explicit_bzero(req, sizeof req);
		die(1, "AUTH: %s", c->err);
	}
	explicit_bzero(req, sizeof req);
	if (!reply_ok(reply))
		die(1, "AUTH refused: %s", reply);
}

/* ------------------------------------------------------------ the lock -- */

/*
 * The lock lockctl holds from ACQUIRE's OK on, so that every way out (CMD
 * done, or die() on the way) gives it back through held_release().
 */
static struct {
	struct conn *c;			/* NULL: nothing held, or given back */
	const char *key;
	long long since;		/* now_ms() when ACQUIRE answered OK */
	long long at_least;		/* --hold-at-least, 0 when not given */
} held;

/*
 * Give the held lock back, once.  While less than --hold-at-least has
 * passed since it was acquired, RELEASE KEY LINGER <left>: the broker drops
 * the hold but leaves the key taken in Redis for <left> ms more, renewed
 * by nobody, and waiters get it when that runs out.  Otherwise a plain
 * RELEASE.  "Acquired" is when the OK arrived, a little after Redis took
 * the key, so the key stays taken a little longer than asked, never
 * shorter.  A broker older than protocol 1.1 refuses LINGER: the lock is
 * then released at once, with a warning.
 * Returns 0 released (an error reply such as ERR UNAVAILABLE is shown),
 * 1 the lock had been lost (reply says how, or c->lost), -1 the broker
 * could not be asked (c->err says why).
 */
static int
held_release(char *reply, size_t replylen)
{
	struct conn *c = held.c;
	char req[REQ_MAX_LEN];
	long long left;

	if (c == NULL) {
		snprintf(reply, replylen, "no lock held");
		return 1;
	}
	held.c = NULL;			/* once, even if a die() comes back here */
	left = held.at_least - (now_ms() - held.since);
	if (left > 0)
		snprintf(req, sizeof req, "RELEASE %s LINGER %lld", held.key,
		    left);
	else
		snprintf(req, sizeof req, "RELEASE %s", held.key);
	if (conn_call(c, req, reply, replylen) < 0)
		return -1;
	if (left > 0 && (strncmp(reply, "ERR BADARG", 10) == 0 ||
	    strncmp(reply, "ERR BADCMD", 10) == 0)) {
		msg("%s: %s; the broker predates LINGER (protocol 1.1), so "
		    "%s is released now", req, reply, held.key);
		snprintf(req, sizeof req, "RELEASE %s", held.key);
		if (conn_call(c, req, reply, replylen) < 0)
			return -1;
	}
	if (c->lost || strncmp(reply, "ERR LOST", 8) == 0 ||
	    strncmp(reply, "ERR NOTHELD", 11) == 0)
		return 1;
	if (!reply_ok(reply))
		msg("%s: %s", req, reply);
	return 0;
}

/*
 * lockctl is ending early (die): with --hold-at-least, still keep the key
 * taken for the rest of that time if the broker can be asked.  Without it
 * there is nothing to do: the session ends with lockctl, which releases.
 */
static void
held_abandon(void)
{
	char reply[LINE_MAX_LEN];

	if (held.c != NULL && held.at_least > 0 && held.c->fd >= 0 &&
	    !held.c->lost)
		(void)held_release(reply, sizeof reply);
}

/* ---------------------------------------------------------- subcommands -- */

int
cmd_query(struct conn *c, const char *req, int err_status)
{
	char reply[LINE_MAX_LEN];

	if (conn_call(c, req, reply, sizeof reply) < 0)
		die(1, "%s", c->err);
	conn_close(c);
	if (!reply_ok(reply)) {
		msg("%s", reply);
		return err_status;
	}
	if (printf("%s\n", reply) < 0 || fflush(stdout) == EOF)
		die(1, "stdout: %s", strerror(errno));
	return 0;
}

/*
 * locks [GLOB]: every page of LOCKS, from cursor 0 until the broker says
 * 0 again, one entry (9 words) per line on stdout.  An ERR reply goes to
 * stderr and exits 70, as kill and free do; a reply that is not a page
 * exits 1.
 */
int
cmd_locks(struct conn *c, const char *glob)
{
	static char reply[LINE_MAX_LEN];	/* 64 KiB: not on the stack */
	char req[REQ_MAX_LEN], cursor[REQ_MAX_LEN] = "0";
	char *entries[PAGE_MAX], *next;
	size_t n;

	for (;;) {
		if (snprintf(req, sizeof req, "LOCKS %s%sCURSOR %s",
		    glob != NULL ? glob : "", glob != NULL ? " " : "",
		    cursor) >= (int)sizeof req)
			die(EX_USAGE, "GLOB makes a request longer than %d "
			    "bytes", REQ_MAX_LEN - 1);
		if (conn_call(c, req, reply, sizeof reply) < 0)
			die(1, "%s", c->err);
		if (!reply_ok(reply)) {
			msg("%s", reply);
			conn_close(c);
			return EX_SOFTWARE;
		}
		if (locks_page(reply, &next, entries, &n) < 0)
			die(1, "LOCKS: a reply that is not a page: %.80s", reply);
		for (size_t i = 0; i < n; i++)
			if (printf("%s\n", entries[i]) < 0)
				die(1, "stdout: %s", strerror(errno));
		if (fflush(stdout) == EOF)
			die(1, "stdout: %s", strerror(errno));
		if (strcmp(next, "0") == 0)
			break;
		if (strlen(next) >= sizeof cursor || strcmp(next, cursor) == 0)
			die(1, "LOCKS: the broker gave cursor '%.80s' again",
			    next);
		memcpy(cursor, next, strlen(next) + 1);
	}
	conn_close(c);
	return 0;
}

/*
 * ACQUIRE was refused with an ERR reply: say what was asked and what the
 * broker said, and for SHARED or LIMIT refused as an unknown option, that
 * the broker is older than the words (protocol 1.1).  A key that is a
 * semaphore of another LIMIT, or a lock where a semaphore was asked (or
 * the other way round), comes back as the broker's own ERR BADARG text.
 */
static void __attribute__((noreturn))
acquire_refused(const struct opts *o, const char *req, const char *reply)
{
	if ((o->shared || o->limit > 0) &&
	    (strncmp(reply, "ERR BADCMD", 10) == 0 ||
	    strncmp(reply, "ERR BADARG unknown option", 25) == 0))
		die(1, "%s: %s (the broker predates %s, protocol 1.1)", req,
		    reply, o->shared ? "SHARED" : "LIMIT");
	/* A 1.1 broker does not know the option; an early 1.2 one says so. */
	if (o->value != NULL &&
	    (strncmp(reply, "ERR BADARG unknown option", 25) == 0 ||
	    strncmp(reply, "ERR BADARG VALUE is not supported", 33) == 0))
		die(1, "%s: %s (--value needs ACQUIRE ... VALUE, protocol 1.2)",
		    req, reply);
	if (o->delay_ms > 0 &&
	    strncmp(reply, "ERR BADARG unknown option", 25) == 0)
		die(1, "%s: %s (--delay needs ACQUIRE ... DELAY, protocol 1.2)",
		    req, reply);
	die(1, "%s: %s", req, reply);
}

int
cmd_locked(struct conn *c, const struct opts *o, const char *key,
    char **cmd)
{
	char req[REQ_MAX_LEN], reply[LINE_MAX_LEN], token[FENCE_MAX_LEN + 1];
	struct run r;
	int rv, sig;

	if (conn_call(c, "HELLO lockctl", reply, sizeof reply) < 0)
		die(1, "HELLO: %s", c->err);
	if (!reply_ok(reply))
		die(1, "HELLO refused: %s", reply);

	if (acquire_line(req, sizeof req, key, o->shared, o->limit,
	    o->wait_ms, o->ttl_ms, o->delay_ms, o->value) < 0)
		die(EX_USAGE, "KEY and --value make a request longer than %d "
		    "bytes", REQ_MAX_LEN - 1);
	if (conn_send(c, req) < 0)
		die(1, "ACQUIRE: %s", c->err);
	/* Waiting may take long: a signal now ends lockctl. */
	while ((rv = conn_reply(c, reply, sizeof reply,
	    o->wait_ms + REPLY_MS, signals_fd())) == REPLY_SIGNAL) {
		if ((sig = signals_take()) != 0) {
			msg("%s while waiting for lock %s; giving up",
			    strsignal(sig), key);
			exit(128 + sig);
		}
	}
	if (rv < 0)
		die(1, "ACQUIRE %s: %s", key, c->err);
	if (strcmp(reply, "BUSY") == 0) {
		char what[64] = "";

		if (o->limit > 0)
			snprintf(what, sizeof what, " (LIMIT %lld: every "
			    "permit taken)", o->limit);
		if (o->wait_ms > 0)
			msg("lock %s is busy%s (waited %lld ms)", key, what,
			    o->wait_ms);
		else
			msg("lock %s is busy%s", key, what);
		return (int)o->busy_code;
	}
	if (!reply_ok(reply))
		acquire_refused(o, req, reply);
	if (reply_token(reply, token) != 0)
		die(1, "ACQUIRE %s: reply without a fencing token: %s", key,
		    reply);
	held.c = c;
	held.key = key;
	held.since = now_ms();
	held.at_least = o->hold_ms;
	die_hook(held_abandon);		/* every way out gives it back */

	/* Ask to be told of a lost lock; an older broker refuses, fine. */
	c->watch_key = key;
	if (conn_call(c, "EVENTS ON", reply, sizeof reply) < 0)
		die(1, "EVENTS ON: %s", c->err);
	if (c->lost)
		die(EX_SOFTWARE, "lock %s lost before %s started", key, cmd[0]);

	if (setenv("LOCKBROKER_KEY", key, 1) < 0 ||
	    setenv("LOCKBROKER_TOKEN", token, 1) < 0)
		die(1, "setenv: %s", strerror(errno));

	memset(&r, 0, sizeof r);
	r.key = key;
	r.argv = cmd;
	r.grace_ms = o->grace_s * 1000;
	child_start(&r);
	child_wait(&r, c);

	if (r.lost) {
		msg("%s stopped (%s); lock %s was lost", cmd[0],
		    WIFSIGNALED(r.status) ? strsignal(WTERMSIG(r.status)) :
		    "exited", key);
		/* Only a failed poll() leaves the session to ask. */
		held_abandon();
		return EX_SOFTWARE;
	}
	/* CMD is done: give the lock back and say whether we still had it. */
	rv = held_release(reply, sizeof reply);
	if (rv < 0) {
		msg("lock %s may have been lost before %s ended: RELEASE: %s",
		    key, cmd[0], c->err);
		return EX_SOFTWARE;
	}
	if (rv > 0) {
		msg("lock %s was lost before %s ended: %s", key, cmd[0],
		    c->lost ? c->err : reply);
		return EX_SOFTWARE;
	}
	/* Polite goodbye; closing the session releases everything anyway. */
	if (conn_call(c, "QUIT", reply, sizeof reply) < 0)
		c->err[0] = '\0';
	conn_close(c);
	return child_exit_code(r.status);
}

/* ------------------------------------------------------------- watch -- */

#define QUIT_MS		1000		/* watch's goodbye: QUIT's OK */

/*
 * watch is ended by signal sig: QUIT (its OK awaited a moment, the events
 * before it dropped: the user asked to stop), and the exit status: 0 for
 * the signals that mean "stop" (SIGINT, SIGTERM), 128+N for the others.
 */
static int
watch_stop(struct conn *c, int sig)
{
	char line[LINE_MAX_LEN];

	if (conn_send(c, "QUIT") == 0)
		(void)conn_reply(c, line, sizeof line, QUIT_MS, -1);
	conn_close(c);
	return sig == SIGINT || sig == SIGTERM ? 0 : 128 + sig;
}

int
cmd_watch(struct conn *c, const char *key)
{
	char req[REQ_MAX_LEN], line[LINE_MAX_LEN];
	const char *text;
	int r, sig;

	snprintf(req, sizeof req, "WATCH %s", key);
	if (conn_send(c, req) < 0)
		die(1, "%s: %s", req, c->err);
	while ((r = conn_reply(c, line, sizeof line, REPLY_MS,
	    signals_fd())) == REPLY_SIGNAL)
		if ((sig = signals_take()) != 0)
			return watch_stop(c, sig);
	if (r < 0)
		die(1, "%s: %s", req, c->err);
	if (strncmp(line, "ERR BADCMD", 10) == 0)
		die(1, "%s: %s (watch needs WATCH, protocol 1.2)", req, line);
	if (!reply_ok(line))
		die(1, "%s: %s", req, line);
	/* The first event is the key's state now; then every change. */
	for (;;) {
		r = conn_next(c, line, sizeof line, -1, signals_fd());
		if (r == REPLY_SIGNAL) {
			if ((sig = signals_take()) != 0)
				return watch_stop(c, sig);
			continue;
		}
		if (r != 1)
			die(1, "watch %s: %s", key, c->err);
		if ((text = event_text(line)) == NULL) {
			msg("unexpected line from broker: %s", line);
			continue;
		}
		/* One flush per line: a pipe reader sees each event at once. */
		if (printf("%s\n", text) < 0 || fflush(stdout) == EOF)
			die(1, "stdout: %s", strerror(errno));
	}
}
