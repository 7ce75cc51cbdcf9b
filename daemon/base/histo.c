/*
 * histo.c - fixed buckets from 50 us to 10 s: handoffs live in the first
 * few, waits behind a long holder in the last.
 */
#include "histo.h"

const int64_t histo_bounds_us[HISTO_NBUCKETS] = {
	50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000,
	100000, 250000, 500000, 1000000, 2500000, 10000000
};

void
histo_observe(struct histo *h, int64_t us)
{
	int i = 0;

	if (us < 0)
		us = 0;
	while (i < HISTO_NBUCKETS && us > histo_bounds_us[i])
		i++;
	h->count[i]++;
	h->n++;
	h->sum_us += us;
}
