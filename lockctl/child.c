/*
 * child.c - lockctl's child process and signals (see child.h).
 */
#include "child.h"
#include "conn.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* Forwarded to CMD (and ending lockctl before CMD starts). */
static const int fwd_signals[] = {
	SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2
};
#define NFWD (int)(sizeof fwd_signals / sizeof fwd_signals[0])

static int sig_rfd = -1, sig_wfd = -1;	/* the self-pipe */

/*
 * The handler writes one byte per signal to the self-pipe: the signal
 * number, with SIGBYTE_KERNEL set when the kernel sent it (a terminal's ^C
 * or hangup goes to the whole foreground process group, so CMD already has
 * it and must not get it twice).
 */
static void
on_signal(int sig, siginfo_t *si, void *uctx)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t r;

	(void)uctx;
#ifdef SI_KERNEL
	if (si != NULL && sig != SIGCHLD && si->si_code == SI_KERNEL)
		b |= SIGBYTE_KERNEL;
#else
	(void)si;
#endif
	/* A full pipe already holds bytes that will wake the loop. */
	r = write(sig_wfd, &b, 1);
	(void)r;
	errno = saved;
}

void
signals_init(void)
{
	struct sigaction sa;
	int fds[2];

	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
		die(1, "pipe2: %s", strerror(errno));
	sig_rfd = fds[0];
	sig_wfd = fds[1];
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	if (sigfillset(&sa.sa_mask) < 0)
		die(1, "sigfillset: %s", strerror(errno));
	for (int i = 0; i < NFWD; i++)
		if (sigaction(fwd_signals[i], &sa, NULL) < 0)
			die(1, "sigaction: %s", strerror(errno));
	sa.sa_flags |= SA_NOCLDSTOP;
	if (sigaction(SIGCHLD, &sa, NULL) < 0)
		die(1, "sigaction: %s", strerror(errno));
}

int
signals_fd(void)
{
	return sig_rfd;
}

int
signals_next(void)
{
	unsigned char b;
	ssize_t n;

	for (;;) {
		n = read(sig_rfd, &b, 1);
		if (n == 1)
			return b;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			die(1, "read self-pipe: %s", strerror(errno));
		return -1;
	}
}

int
signals_take(void)
{
	int b;

	while ((b = signals_next()) >= 0)
		if ((b & ~SIGBYTE_KERNEL) != SIGCHLD)
			return b & ~SIGBYTE_KERNEL;
	return 0;
}

int
child_exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

/*
 * fork and exec CMD.  Signals are blocked across fork so the child runs no
 * handler of ours (it would write to our self-pipe); it gets default
 * dispositions, our original mask, and (Linux) SIGKILL if lockctl dies
 * without releasing it: by then the lock is gone.
 */
void
child_start(struct run *r)
{
	sigset_t all, old;
	pid_t parent = getpid();

	if (sigfillset(&all) < 0 || sigprocmask(SIG_BLOCK, &all, &old) < 0)
		die(1, "sigprocmask: %s", strerror(errno));
	r->pid = fork();
	if (r->pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (r->pid == 0) {
		int e;

		for (int i = 0; i < NFWD; i++)
			if (signal(fwd_signals[i], SIG_DFL) == SIG_ERR)
				_exit(126);
		if (signal(SIGCHLD, SIG_DFL) == SIG_ERR ||
		    sigprocmask(SIG_SETMASK, &old, NULL) < 0)
			_exit(126);
#ifdef __linux__
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ||
		    getppid() != parent)
			_exit(126);
#else
		(void)parent;
#endif
		execvp(r->argv[0], r->argv);
		e = errno;
		fprintf(stderr, "lockctl: %s: %s\n", r->argv[0], strerror(e));
		_exit(e == ENOENT ? 127 : 126);
	}
	if (sigprocmask(SIG_SETMASK, &old, NULL) < 0)
		msg("sigprocmask: %s", strerror(errno));
}

static void
child_reap(struct run *r)
{
	pid_t p;

	if (r->exited)
		return;
	do
		p = waitpid(r->pid, &r->status, WNOHANG);
	while (p < 0 && errno == EINTR);
	if (p == r->pid)
		r->exited = 1;
	else if (p < 0)
		die(1, "waitpid: %s", strerror(errno));
}

static void
child_signal(struct run *r, int sig)
{
	if (!r->exited && kill(r->pid, sig) < 0 && errno != ESRCH)
		msg("kill %ld: %s", (long)r->pid, strerror(errno));
}

/* The lock is gone: start stopping CMD (once). */
static void
run_lose(struct run *r, const char *why)
{
	if (r->lost)
		return;
	r->lost = 1;
	msg("lock %s lost (%s); stopping %s", r->key, why, r->argv[0]);
	child_signal(r, SIGTERM);
	r->kill_at = now_ms() + r->grace_ms;
}

/*
 * Wait for CMD to exit while watching the session: forward signals, stop
 * CMD if the lock is lost.  Every turn blocks in poll() until the socket,
 * the self-pipe or the SIGKILL deadline has something.
 */
void
child_wait(struct run *r, struct conn *c)
{
	char line[LINE_MAX_LEN];
	struct pollfd p[2];
	int n, b;

	while (!r->exited) {
		p[0].fd = sig_rfd;
		p[0].events = POLLIN;
		p[0].revents = 0;
		p[1].fd = c->fd;	/* -1 once the session is gone */
		p[1].events = POLLIN;
		p[1].revents = 0;
		n = poll(p, 2, conn_pending(c) ? 0 :
		    r->lost && !r->killed ? ms_left(r->kill_at) : -1);
		if (n < 0 && errno != EINTR) {
			msg("poll: %s; killing %s", strerror(errno),
			    r->argv[0]);
			child_signal(r, SIGKILL);
			while (waitpid(r->pid, &r->status, 0) < 0 &&
			    errno == EINTR)
				;
			r->lost = r->exited = 1;
			return;
		}
		while ((b = signals_next()) >= 0) {
			int sig = b & ~SIGBYTE_KERNEL;

			if (sig != SIGCHLD && !(b & SIGBYTE_KERNEL))
				child_signal(r, sig);
		}
		child_reap(r);
		if (c->fd >= 0 && (p[1].revents != 0 || conn_pending(c))) {
			if (conn_fill(c) < 0) {
				conn_close(c);
				run_lose(r, c->err);
			}
			while (c->fd >= 0 &&
			    (n = conn_line(c, line, sizeof line)) != 0) {
				if (n < 0) {
					conn_close(c);
					run_lose(r, c->err);
				} else if (!conn_event(c, line))
					msg("unexpected line from broker: %s",
					    line);
				else if (c->lost)
					run_lose(r, c->err);
			}
		}
		if (r->lost && !r->killed && !r->exited &&
		    ms_left(r->kill_at) == 0) {
			msg("%s still running after %lld s; sending SIGKILL",
			    r->argv[0], r->grace_ms / 1000);
			child_signal(r, SIGKILL);
			r->killed = 1;
		}
	}
}
