/*
 * log.c - levelled log lines on stderr.
 *
 * Each line: "<time> <level> <function>: <message>".  When stderr is the
 * systemd journal (JOURNAL_STREAM set) the line starts with a "<N>" syslog
 * priority instead of the time, so journald files it at the right level.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static enum log_level cur_level = LL_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static const int syslog_prio[] = { 3, 4, 6, 7 };

void
log_set_level(enum log_level level)
{
	cur_level = level;
}

enum log_level
log_get_level(void)
{
	return cur_level;
}

int
log_level_parse(const char *name)
{
	for (int i = 0; i <= LL_DEBUG; i++)
		if (strcasecmp(name, level_names[i]) == 0)
			return i;
	return -1;
}

const char *
log_level_name(enum log_level level)
{
	return level <= LL_DEBUG ? level_names[level] : "?";
}

/*
 * Whether stderr is the journal: systemd sets JOURNAL_STREAM to the
 * "device:inode" of the stream it connected; a child that inherited the
 * variable but writes elsewhere must not get journal prefixes.
 */
static int
stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2 ||
	    fstat(STDERR_FILENO, &st) != 0)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	    (unsigned long long)st.st_ino == ino;
}

static void
log_vline(enum log_level level, const char *func, const char *fmt,
    va_list ap, const char *suffix) __attribute__((format(printf, 3, 0)));

static void
log_vline(enum log_level level, const char *func, const char *fmt,
    va_list ap, const char *suffix)
{
	char msg[1024];
	static int journal = -1;

	if (level > cur_level)
		return;
	if (journal == -1)
		journal = stderr_is_journal();
	vsnprintf(msg, sizeof msg, fmt, ap);
	if (journal) {
		fprintf(stderr, "<%d>%s: %s%s%s\n", syslog_prio[level], func,
		    msg, suffix ? ": " : "", suffix ? suffix : "");
	} else {
		struct timespec ts;
		struct tm tm;
		char when[32];

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
		fprintf(stderr, "%s.%03ld %s %s: %s%s%s\n", when,
		    ts.tv_nsec / 1000000, level_names[level], func, msg,
		    suffix ? ": " : "", suffix ? suffix : "");
	}
}

void
log_msg(enum log_level level, const char *func, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vline(level, func, fmt, ap, NULL);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list ap;
	const char *err = strerror(errno);

	va_start(ap, fmt);
	log_vline(LL_ERROR, "fatal", fmt, ap, err);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vline(LL_ERROR, "fatal", fmt, ap, NULL);
	va_end(ap);
	exit(1);
}
