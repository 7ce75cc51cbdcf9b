/*
 * log.h - one line per event on stderr, with a level.
 */
#ifndef LOCKBROKER_LOG_H
#define LOCKBROKER_LOG_H

enum log_level { LL_ERROR, LL_WARN, LL_INFO, LL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parse "error", "warn", "info", "debug"; -1 when unknown. */
int log_level_parse(const char *name);
const char *log_level_name(enum log_level level);

void log_msg(enum log_level level, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Log at LL_ERROR with strerror(errno) appended, then exit(1). */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Log at LL_ERROR, then exit(1). */
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define log_error(...) log_msg(LL_ERROR, __func__, __VA_ARGS__)
#define log_warn(...)  log_msg(LL_WARN, __func__, __VA_ARGS__)
#define log_info(...)  log_msg(LL_INFO, __func__, __VA_ARGS__)
#define log_debug(...) \
	do { if (log_get_level() >= LL_DEBUG) \
		log_msg(LL_DEBUG, __func__, __VA_ARGS__); } while (0)

#endif
