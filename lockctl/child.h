/*
 * child.h - lockctl's child process and its signals: CMD forked and
 * exec'd, the signals lockctl gets passed on to it, CMD stopped (SIGTERM,
 * then SIGKILL after a grace) when the lock is lost, its exit status.
 * Signals arrive through a self-pipe, so one poll() watches them, the
 * broker's connection and the SIGKILL deadline together.
 */
#ifndef LOCKCTL_CHILD_H
#define LOCKCTL_CHILD_H

#include <sys/types.h>

struct conn;

#define SIGBYTE_KERNEL	0x80		/* self-pipe byte: sent by the kernel */

/* Catch the signals passed on to CMD (and SIGCHLD) into the self-pipe. */
void signals_init(void);
/* The self-pipe's read end, to poll (conn_reply's wake_fd). */
int signals_fd(void);
/*
 * The next byte from the self-pipe, or -1 when it is empty: a signal
 * number, with SIGBYTE_KERNEL set when the kernel sent it.
 */
int signals_next(void);
/*
 * The next signal from the self-pipe other than SIGCHLD (its number,
 * SIGBYTE_KERNEL dropped; the SIGCHLDs before it are consumed), or 0 when
 * none is waiting.  For the waits before CMD runs, or without one.
 */
int signals_take(void);

/* CMD's run. */
struct run {
	const char *key;
	char **argv;
	pid_t pid;
	int status;			/* waitpid() status once exited */
	int exited;
	int lost;			/* stopping CMD because of a lost lock */
	int killed;			/* SIGKILL sent */
	long long kill_at;		/* when SIGKILL is due */
	long long grace_ms;
};

/* Status as a shell shows it: exit code, or 128+N for signal N. */
int child_exit_code(int status);
/*
 * fork and exec CMD (r->argv).  The child runs none of lockctl's handlers,
 * gets its original signal mask, and (Linux) SIGKILL if lockctl dies
 * without releasing it: by then the lock is gone.
 */
void child_start(struct run *r);
/*
 * Wait for CMD to exit while watching the session c: forward signals,
 * stop CMD if the lock is lost (r->lost then).
 */
void child_wait(struct run *r, struct conn *c);

#endif
