/*
 * metrics.c - GET /metrics in the Prometheus text format, served by
 * httpd.c (at most metrics_max_connections connections, each request
 * answered or dropped within metrics_timeout_ms).
 *
 * Off unless metrics_port is set.  The counters come from the table in
 * stats.c, the one STATS walks too; only the histograms are drawn here.
 * Nothing here is on the request path of lock clients.
 */
#include "broker.h"
#include "httpd.h"
#include "locks.h"
#include "log.h"
#include "stats.h"
#include "store.h"

#include <event2/buffer.h>

#include <stdio.h>
#include <string.h>

/* "# HELP" and "# TYPE" lines for a family. */
static int
family(struct evbuffer *out, const char *name, const char *type,
    const char *help)
{
	return evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name,
	    help, name, type) < 0 ? -1 : 0;
}

/*
 * A histogram's samples: cumulative buckets, sum and count.  labels: ""
 * or the series' own labels with a trailing comma (node="...",), put
 * before le on buckets and alone on sum and count.
 */
static int
histo_samples(struct evbuffer *out, const char *name, const char *labels,
    const struct histo *h)
{
	const int64_t *bounds = histo_bounds(h);
	size_t ll = strlen(labels);
	uint64_t cum = 0;

	for (int i = 0; i < HISTO_NBUCKETS; i++) {
		cum += h->count[i];
		if (evbuffer_add_printf(out, "%s_bucket{%sle=\"%g\"} %llu\n",
		    name, labels, (double)bounds[i] / 1e6,
		    (unsigned long long)cum) < 0)
			return -1;
	}
	cum += h->count[HISTO_NBUCKETS];
	/* sum and count: the labels without their trailing comma */
	if (evbuffer_add_printf(out, "%s_bucket{%sle=\"+Inf\"} %llu\n", name,
	    labels, (unsigned long long)cum) < 0 ||
	    evbuffer_add_printf(out, "%s_sum%s%.*s%s %.6f\n", name,
	    ll ? "{" : "", (int)(ll ? ll - 1 : 0), labels, ll ? "}" : "",
	    (double)h->sum_us / 1e6) < 0 ||
	    evbuffer_add_printf(out, "%s_count%s%.*s%s %llu\n", name,
	    ll ? "{" : "", (int)(ll ? ll - 1 : 0), labels, ll ? "}" : "",
	    (unsigned long long)h->n) < 0)
		return -1;
	return 0;
}

static int
histogram(struct evbuffer *out, const char *name, const char *help,
    const struct histo *h)
{
	if (family(out, name, "histogram", help) != 0)
		return -1;
	return histo_samples(out, name, "", h);
}

/*
 * name="value", with a trailing comma, into buf: value escaped as the
 * text format asks (backslash, double quote, newline), since a node's
 * address may be a unix socket path.  Cut short (still closed) if long.
 */
static const char *
label(char *buf, size_t size, const char *name, const char *value)
{
	size_t off = (size_t)snprintf(buf, size, "%s=\"", name);

	for (; *value != '\0' && off + 5 < size; value++) {
		if (*value == '\\' || *value == '"' || *value == '\n') {
			buf[off++] = '\\';
			buf[off++] = *value == '\n' ? 'n' : *value;
		} else {
			buf[off++] = *value;
		}
	}
	memcpy(buf + off, "\",", 3);
	return buf;
}

/* One family with a sample (or a histogram) per Redis master
 * (node="host:port", the address as the broker was given it). */
struct node_family {
	struct evbuffer *out;
	int which;			/* 0 up, 1 in flight, 2 redirections,
					 * 3 round trips */
	int rc;
};

static const struct { const char *name, *type, *help; } node_fam[] = {
	{ "lockbroker_redis_node_up", "gauge",
	  "Whether the command connection to this Redis master is "
	  "ready (1) or not (0)." },
	{ "lockbroker_redis_node_inflight", "gauge",
	  "Redis commands sent to this master and not answered yet, "
	  "queued ones included." },
	{ "lockbroker_redis_node_redirects_total", "counter",
	  "Cluster MOVED and ASK replies this master sent." },
	{ "lockbroker_redis_rtt_seconds", "histogram",
	  "Round trips of script calls to this master, from the write to "
	  "the answer (a batch of calls is one round trip)." },
};
#define NODE_FAMILIES (sizeof node_fam / sizeof node_fam[0])

static void
node_sample(void *arg, const char *addr, int up, size_t inflight,
    uint64_t redirects, const struct histo *rtt)
{
	struct node_family *f = arg;
	unsigned long long v = f->which == 0 ? (unsigned long long)up :
	    f->which == 1 ? (unsigned long long)inflight :
	    (unsigned long long)redirects;
	char node[2 * 256 + 16];	/* an address, escaped */

	label(node, sizeof node, "node", addr);
	if (f->which == 3) {
		if (histo_samples(f->out, node_fam[3].name, node, rtt) != 0)
			f->rc = -1;
	} else if (evbuffer_add_printf(f->out, "%s{%.*s} %llu\n",
	    node_fam[f->which].name, (int)strlen(node) - 1, node, v) < 0) {
		f->rc = -1;
	}
}

static int
node_families(const struct broker *b, struct evbuffer *out)
{
	struct node_family f = { out, 0, 0 };

	for (f.which = 0; f.which < (int)NODE_FAMILIES; f.which++) {
		if (family(out, node_fam[f.which].name, node_fam[f.which].type,
		    node_fam[f.which].help) != 0)
			return -1;
		store_each_node(b->store, node_sample, &f);
		if (f.rc != 0)
			return -1;
	}
	return 0;
}

#define APP_WAIT "lockbroker_app_acquire_wait_seconds"

/*
 * Per-app samples (label app="name"): sessions now, denials and waits
 * (appstats.c: at most APP_WAIT_MAX apps, the rest as app="other").  App
 * names are [A-Za-z0-9._-] (acl_name_ok), so they need no escaping.
 */
static int
app_families(const struct broker *b, struct evbuffer *out)
{
	const struct appstat *a;

	if (TAILQ_EMPTY(&b->appstats))
		return 0;		/* no access list has been in force */
	if (family(out, "lockbroker_app_sessions", "gauge",
	    "Sessions authenticated as this app now.") != 0)
		return -1;
	TAILQ_FOREACH(a, &b->appstats, link)
		if (evbuffer_add_printf(out, "lockbroker_app_sessions{app=\"%s\"}"
		    " %llu\n", a->name, (unsigned long long)a->sessions) < 0)
			return -1;
	if (family(out, "lockbroker_app_denials_total", "counter",
	    "Requests of this app answered ERR DENIED.") != 0)
		return -1;
	TAILQ_FOREACH(a, &b->appstats, link)
		if (evbuffer_add_printf(out, "lockbroker_app_denials_total{app="
		    "\"%s\"} %llu\n", a->name,
		    (unsigned long long)a->denials) < 0)
			return -1;
	if (family(out, APP_WAIT, "histogram", "Time from ACQUIRE to OK of "
	    "this app's sessions, as lockbroker_acquire_wait_seconds counts "
	    "it (apps past the first 64: app=\"other\").") != 0)
		return -1;
	TAILQ_FOREACH(a, &b->appstats, link) {
		char app[sizeof a->name + 16];

		if (a->wait != &a->own_wait)
			continue;	/* counted in "other" */
		snprintf(app, sizeof app, "app=\"%s\",", a->name);
		if (histo_samples(out, APP_WAIT, app, a->wait) != 0)
			return -1;
	}
	if (b->app_wait_other_used && histo_samples(out, APP_WAIT,
	    "app=\"" APP_OTHER "\",", &b->app_wait_other) != 0)
		return -1;
	return 0;
}

/*
 * The page: every row of the stats table that has a metric name (so the
 * numbers are STATS's, read through the same getters), then one sample
 * per Redis master, then the histograms.  Returns -1 when out of memory.
 */
static int
render(const struct broker *b, struct evbuffer *out)
{
	struct stats_snap snap;
	const char *fam = NULL;

	stats_take(b, &snap);
	for (size_t i = 0; i < stats_count; i++) {
		const struct stat_def *d = &stats_table[i];
		int rc;

		if (d->metric == NULL)
			continue;
		if ((fam == NULL || strcmp(fam, d->metric) != 0) &&
		    family(out, d->metric, d->type == STAT_COUNTER ?
		    "counter" : "gauge", d->family_help != NULL ?
		    d->family_help : d->help) != 0)
			return -1;
		fam = d->metric;
		if (d->label != NULL)
			rc = evbuffer_add_printf(out, "%s{%s} %llu\n",
			    d->metric, d->label,
			    (unsigned long long)d->get(&snap));
		else
			rc = evbuffer_add_printf(out, "%s %llu\n", d->metric,
			    (unsigned long long)d->get(&snap));
		if (rc < 0)
			return -1;
	}
	if (b->store != NULL && node_families(b, out) != 0)
		return -1;
	if (b->store != NULL && store_lease_ms(b->store) >= 0 &&
	    (family(out, "lockbroker_sentinel_lease_seconds", "gauge",
	    "Sentinel mode: seconds the Sentinel lease has left (0: none, so "
	    "nothing is granted or renewed).") != 0 ||
	    evbuffer_add_printf(out, "lockbroker_sentinel_lease_seconds %.3f\n",
	    (double)store_lease_ms(b->store) / 1000.0) < 0))
		return -1;
	if (app_families(b, out) != 0)
		return -1;
	if (histogram(out, "lockbroker_acquire_wait_seconds",
	    "Time from ACQUIRE to OK for acquisitions that went to Redis.",
	    &snap.ls.acquire_wait) != 0 ||
	    histogram(out, "lockbroker_handoff_seconds",
	    "Time from a key seen released (locally or by pub/sub) to its "
	    "grant to the next local waiter (about 0 for early handoffs).",
	    &snap.ls.handoff) != 0 ||
	    histogram(out, "lockbroker_hold_seconds",
	    "Time a session of this broker held a key, from its grant (or its "
	    "RESUME here) to its end: the last RELEASE, the session's end, or "
	    "its loss.  A hold another session takes over is not counted.",
	    &snap.ls.hold) != 0)
		return -1;
	return 0;
}

static int
page(void *arg, struct evbuffer *out)
{
	return render(arg, out);
}

int
metrics_start(struct broker *b, char *err, size_t errlen)
{
	struct httpd_cfg hc = {
		.bind = b->cfg->metrics_bind,
		.port = b->cfg->metrics_port,
		.max_conns = b->cfg->metrics_max_connections,
		.timeout_ms = b->cfg->metrics_timeout_ms,
		.path = "/metrics",
		.content_type = "text/plain; version=0.0.4; charset=utf-8",
		.page = page,
		.arg = b,
	};

	if (b->cfg->metrics_port == 0)
		return 0;
	if ((b->http = httpd_new(b->base, &hc, err, errlen)) == NULL)
		return -1;
	log_info("metrics on http://%s:%ld/metrics (at most %ld connections, "
	    "%ld ms per request)", b->cfg->metrics_bind, b->cfg->metrics_port,
	    b->cfg->metrics_max_connections, b->cfg->metrics_timeout_ms);
	return 0;
}

void
metrics_stop(struct broker *b)
{
	httpd_free(b->http);
	b->http = NULL;
}
