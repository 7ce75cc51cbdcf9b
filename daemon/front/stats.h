/*
 * stats.h - the broker's counters and gauges, defined once.
 *
 * One table (name, type, help, getter) is walked by STATS (session.c:
 * "OK name=value ...") and by GET /metrics (metrics.c: Prometheus text),
 * so the two cannot disagree.  proto/PROTOCOL.md shows
 * the same table.  The latency histograms are /metrics only (metrics.c).
 */
#ifndef LOCKBROKER_STATS_H
#define LOCKBROKER_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "locks.h"

struct broker;
struct evbuffer;

enum stat_type {
	STAT_COUNTER,		/* only goes up, from 0 at start */
	STAT_GAUGE,		/* a value now */
	STAT_TEXT		/* a word, STATS only */
};

/* What the getters read: taken once per STATS line or /metrics page. */
struct stats_snap {
	const struct broker *b;
	struct locks_stats ls;
	int64_t now_ms;
};

struct stat_def {
	const char *name;		/* the STATS name */
	enum stat_type type;
	const char *help;		/* one sentence; also # HELP */
	/*
	 * The Prometheus family, or NULL for STATS only.  Rows sharing a
	 * family are adjacent and differ by label (e.g. outcome="ok"); the
	 * family's # HELP is family_help from its first row.
	 */
	const char *metric;
	const char *label;
	const char *family_help;
	uint64_t (*get)(const struct stats_snap *);	/* NULL: STAT_TEXT */
	/* Non-NULL: STATS shows this word instead of get()'s number. */
	const char *(*text)(const struct stats_snap *);
};

extern const struct stat_def stats_table[];
extern const size_t stats_count;

void stats_take(const struct broker *b, struct stats_snap *out);

/* Append "OK name=value ...\r\n" to out; -1 when out of memory. */
int stats_line(const struct broker *b, struct evbuffer *out);

#endif
