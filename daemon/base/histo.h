/*
 * histo.h - a fixed-bucket latency histogram (Prometheus style: cumulative
 * buckets rendered from per-bucket counts).  Pure: no I/O.
 */
#ifndef LOCKBROKER_HISTO_H
#define LOCKBROKER_HISTO_H

#include <stdint.h>

#define HISTO_NBUCKETS 16

/* Upper bounds in microseconds; the last bucket is +Inf.  The default
 * set spans 50 us to 10 s (waits, hand-offs, Redis round trips); holds
 * last longer, so theirs spans 100 us to an hour. */
extern const int64_t histo_bounds_us[HISTO_NBUCKETS];
extern const int64_t histo_hold_bounds_us[HISTO_NBUCKETS];

struct histo {
	const int64_t *bounds;		/* HISTO_NBUCKETS bounds; NULL: the
					 * default set (histo_bounds_us) */
	uint64_t count[HISTO_NBUCKETS + 1];	/* last: above every bound */
	uint64_t n;
	int64_t sum_us;
};

void histo_observe(struct histo *h, int64_t us);
/* h's upper bounds (never NULL). */
const int64_t *histo_bounds(const struct histo *h);
/* Every count back to 0; the bounds stay. */
void histo_reset(struct histo *h);

#endif
