/*
 * main.c - run every unit-test suite and say whether all passed.
 *
 * Runs in CK_NORMAL mode and prints Check's summary.  Exits 1 if any test
 * failed or errored, and also if no test ran at all: Check itself exits 0
 * then, which would let a broken build or a CK_RUN_SUITE typo pass silently.
 * CK_RUN_SUITE / CK_RUN_CASE (Check's own variables) select a subset.
 */
#include <stdio.h>
#include <stdlib.h>

#include "suites.h"

/* One line per suite. */
static Suite *(*const suites[])(void) = {
	proto_suite,
	keytab_suite,
	pool_suite,
	addr_suite,
	config_suite,
	locks_grant_suite,
	locks_kinds_suite,
	locks_handoff_suite,
	locks_renew_suite,
	locks_events_suite,
	locks_resumable_suite,
	waiter_suite,
	slot_suite,
	acl_suite,
	vouch_suite,
	httphead_suite,
	grace_suite,
	stream_suite,
	lockctl_suite,
	redial_suite,
	node_suite,
	lean_suite,
	cluster_map_suite,
	resp_suite,
	resolve_suite,
};

int
main(void)
{
	SRunner *sr;
	int run, failed;

	sr = srunner_create(NULL);
	for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
		srunner_add_suite(sr, suites[i]());
	srunner_run_all(sr, CK_NORMAL);
	run = srunner_ntests_run(sr);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (run == 0) {
		fprintf(stderr, "test_unit: no tests ran\n");
		return EXIT_FAILURE;
	}
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
