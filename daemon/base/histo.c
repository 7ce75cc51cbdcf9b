/*
 * histo.c - fixed buckets: by default from 50 us to 10 s (hand-offs live
 * in the first few, waits behind a long holder in the last); for hold
 * times from 100 us to an hour (a lock held for minutes is common).
 */
#include "histo.h"

#include <string.h>

const int64_t histo_bounds_us[HISTO_NBUCKETS] = {
	50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000,
	100000, 250000, 500000, 1000000, 2500000, 10000000
};

const int64_t histo_hold_bounds_us[HISTO_NBUCKETS] = {
	100, 1000, 10000, 50000, 100000, 250000, 500000, 1000000,
	2500000, 5000000, 10000000, 30000000, 60000000, 300000000,
	900000000, 3600000000
};

const int64_t *
histo_bounds(const struct histo *h)
{
	return h->bounds != NULL ? h->bounds : histo_bounds_us;
}

void
histo_observe(struct histo *h, int64_t us)
{
	const int64_t *bounds = histo_bounds(h);
	int i = 0;

	if (us < 0)
		us = 0;
	while (i < HISTO_NBUCKETS && us > bounds[i])
		i++;
	h->count[i]++;
	h->n++;
	h->sum_us += us;
}

void
histo_reset(struct histo *h)
{
	const int64_t *bounds = h->bounds;

	memset(h, 0, sizeof *h);
	h->bounds = bounds;
}
