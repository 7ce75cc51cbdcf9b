/*
 * appstats.c - per-app counters, by app name (access lists).
 *
 * Kept apart from the access lists they count for: a reload replaces the
 * list, but an app's sessions live on and its counters must not go back,
 * so the rows are keyed by name and live as long as the broker.  Rows are
 * few (one per app name an acl_file has had) and looked up on AUTH and
 * on a denial only, so a list is enough.
 *
 * Wait histograms are bigger (a Prometheus series per bucket): the first
 * APP_WAIT_MAX names seen get one of their own, for good; later names
 * share app="other" (as does an app named "other", whose label would
 * otherwise be the same).
 */
#include "acl.h"
#include "broker.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

struct appstat *
appstat_get(struct broker *b, const char *name)
{
	struct appstat *a;

	TAILQ_FOREACH(a, &b->appstats, link)
		if (strcmp(a->name, name) == 0)
			return a;
	a = xcalloc(1, sizeof *a);
	/* names are checked (acl_name_ok): they fit */
	strncpy(a->name, name, sizeof a->name - 1);
	if (b->napp_waits < APP_WAIT_MAX && strcmp(name, APP_OTHER) != 0) {
		a->wait = &a->own_wait;
		b->napp_waits++;
	} else {
		a->wait = &b->app_wait_other;
		b->app_wait_other_used = 1;
	}
	TAILQ_INSERT_TAIL(&b->appstats, a, link);
	return a;
}

void
appstats_add_acl(struct broker *b, const struct acl *acl)
{
	for (size_t i = 0; i < acl_count(acl); i++)
		(void)appstat_get(b, acl_app_name(acl_app_at(acl, i)));
}

void
appstats_free(struct broker *b)
{
	struct appstat *a;

	while ((a = TAILQ_FIRST(&b->appstats)) != NULL) {
		TAILQ_REMOVE(&b->appstats, a, link);
		free(a);
	}
}
