/*
 * vouch.c - the Sentinel lease's arithmetic (vouch.h).
 *
 * The sentinel's own clock, from Redis's sentinel.c
 * (sentinelCheckSubjectivelyDown): it flags the master s_down once
 * down-after-milliseconds have passed since act_ping_time, the send time
 * of the oldest ping still unanswered (0 when none is pending: its next
 * ping, sent after the answer, starts the clock), or, when its link is
 * down with no ping pending, since last_avail_time, the master's last
 * good reply.  SENTINEL MASTER reports both as ages at the moment it
 * answers: last-ping-sent and last-ok-ping-reply.  The answer came after
 * the question was sent, so counting from the send time is on the safe
 * side.  Since last-ping-sent <= last-ok-ping-reply, this is never
 * shorter than counting from the last good reply, and a healthy master
 * (its pings answered within a millisecond) gives nearly all of
 * down-after: the lease does not lapse between the sentinels' pings.
 */
#include "vouch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOUCH_MAX 64			/* answers weighed at most */

static int
has_flag(const char *flags, const char *flag)
{
	size_t fl = strlen(flag);

	for (const char *f = flags; *f != '\0'; f += strcspn(f, ","),
	    f += *f == ',') {
		if (strncmp(f, flag, fl) == 0 && (f[fl] == ',' ||
		    f[fl] == '\0'))
			return 1;
	}
	return 0;
}

unsigned
vouch_flags(const char *text)
{
	static const char *const down[] = { "s_down", "o_down",
	    "failover_in_progress", "force_failover", "master_reboot" };
	unsigned f = 0;

	if (has_flag(text, "master"))
		f |= VOUCH_F_MASTER;
	if (has_flag(text, "disconnected"))
		f |= VOUCH_F_DISCONNECTED;
	if (has_flag(text, "failover_in_progress"))
		f |= VOUCH_F_FAILOVER;
	for (size_t i = 0; i < sizeof down / sizeof down[0]; i++)
		if (has_flag(text, down[i]))
			f |= VOUCH_F_DOWN;
	return f;
}

int64_t
vouch_until(const struct vouch_answer *a, int64_t cap_ms)
{
	long long clock;
	int64_t until;

	if (!a->valid || !(a->flags & VOUCH_F_MASTER) ||
	    (a->flags & VOUCH_F_DOWN) || a->down_after_ms <= 0)
		return a->sent_ms;
	clock = a->ping_sent_ms > 0 ? a->ping_sent_ms :
	    (a->flags & VOUCH_F_DISCONNECTED) ? a->ok_reply_ms : 0;
	until = a->sent_ms + a->down_after_ms - clock - VOUCH_MARGIN_MS;
	if (cap_ms > 0 && until > a->sent_ms + cap_ms)
		until = a->sent_ms + cap_ms;
	return until;
}

static int
cmp_desc(const void *x, const void *y)
{
	int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

	return a < b ? 1 : a > b ? -1 : 0;
}

static void
addr_text(const struct addr *a, char *buf, size_t len)
{
	snprintf(buf, len, strchr(a->host, ':') ? "[%s]:%d" : "%s:%d",
	    a->host, a->port);
}

int64_t
vouch_lease(const struct vouch_answer *a, size_t n, long long epoch,
    const struct addr *master, int64_t now, int64_t cap_ms, char *why,
    size_t whylen)
{
	int64_t u[VOUCH_MAX];
	size_t good = 0, need;
	long qmin = 0;
	char m[ADDR_HOST_LEN + 16];

	if (why != NULL && whylen > 0)
		why[0] = '\0';
	if (n > VOUCH_MAX)
		n = VOUCH_MAX;
	for (size_t i = 0; i < n; i++) {
		if (!a[i].valid || a[i].epoch != epoch)
			continue;
		if (a[i].quorum > 0 && (qmin == 0 || a[i].quorum < qmin))
			qmin = a[i].quorum;
		for (size_t j = 0; j < i; j++) {
			if (a[j].valid && a[j].epoch == epoch &&
			    !((a[i].flags | a[j].flags) & VOUCH_F_FAILOVER) &&
			    !addr_same(&a[j].master, &a[i].master)) {
				if (why != NULL)
					snprintf(why, whylen, "sentinels name "
					    "different masters at config epoch "
					    "%lld", epoch);
				return 0;
			}
		}
		if (master != NULL && addr_same(&a[i].master, master) &&
		    vouch_until(&a[i], cap_ms) > now)
			u[good++] = vouch_until(&a[i], cap_ms);
	}
	need = n / 2 + 1;
	if (qmin > 0 && (size_t)qmin <= n && n - (size_t)qmin + 1 > need)
		need = n - (size_t)qmin + 1;
	if (master == NULL) {
		if (why != NULL)
			snprintf(why, whylen, "no master connection");
		return 0;
	}
	if (good < need) {
		if (why != NULL) {
			addr_text(master, m, sizeof m);
			snprintf(why, whylen, "%zu of the %zu sentinels needed "
			    "vouch for master %s", good, need, m);
		}
		return 0;
	}
	qsort(u, good, sizeof u[0], cmp_desc);
	return u[need - 1];
}
