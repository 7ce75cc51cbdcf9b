/*
 * histo.h - a fixed-bucket latency histogram (Prometheus style: cumulative
 * buckets rendered from per-bucket counts).  Pure: no I/O.
 */
#ifndef LOCKBROKER_HISTO_H
#define LOCKBROKER_HISTO_H

#include <stdint.h>

#define HISTO_NBUCKETS 16

/* Upper bounds in microseconds; the last bucket is +Inf. */
extern const int64_t histo_bounds_us[HISTO_NBUCKETS];

struct histo {
	uint64_t count[HISTO_NBUCKETS + 1];	/* last: above every bound */
	uint64_t n;
	int64_t sum_us;
};

void histo_observe(struct histo *h, int64_t us);

#endif
