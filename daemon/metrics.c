/*
 * metrics.c - GET /metrics in the Prometheus text format (libevent evhttp).
 *
 * Off unless metrics_port is set.  Rendering reads the same counters as
 * STATS; nothing here is on the request path of lock clients.
 */
#include "broker.h"
#include "locks.h"
#include "log.h"
#include "store.h"

#include <event2/buffer.h>
#include <event2/http.h>

#include <string.h>

static void
metric(struct evbuffer *out, const char *name, const char *type,
    const char *help, unsigned long long v)
{
	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n",
	    name, help, name, type, name, v);
}

static void
histogram(struct evbuffer *out, const char *name, const char *help,
    const struct histo *h)
{
	uint64_t cum = 0;

	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name,
	    help, name);
	for (int i = 0; i < HISTO_NBUCKETS; i++) {
		cum += h->count[i];
		evbuffer_add_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name,
		    (double)histo_bounds_us[i] / 1e6, (unsigned long long)cum);
	}
	cum += h->count[HISTO_NBUCKETS];
	evbuffer_add_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name,
	    (unsigned long long)cum);
	evbuffer_add_printf(out, "%s_sum %.6f\n%s_count %llu\n", name,
	    (double)h->sum_us / 1e6, name, (unsigned long long)h->n);
}

static void
render(struct broker *b, struct evbuffer *out)
{
	struct locks_stats ls;
	const char *a = "lockbroker_acquires_total";

	locks_get_stats(b->locks, &ls);
	metric(out, "lockbroker_sessions", "gauge",
	    "Client sessions connected now.", b->nsessions);
	metric(out, "lockbroker_locks_held", "gauge",
	    "Keys held by this broker's sessions now.", ls.locks_held);
	metric(out, "lockbroker_waiters", "gauge",
	    "ACQUIRE requests waiting now.", ls.waiters);
	evbuffer_add_printf(out, "# HELP %s ACQUIRE requests answered, by "
	    "outcome.\n# TYPE %s counter\n", a, a);
	evbuffer_add_printf(out, "%s{outcome=\"ok\"} %llu\n", a,
	    (unsigned long long)ls.acquires);
	evbuffer_add_printf(out, "%s{outcome=\"busy\"} %llu\n", a,
	    (unsigned long long)ls.busy);
	evbuffer_add_printf(out, "%s{outcome=\"error\"} %llu\n", a,
	    (unsigned long long)ls.acquire_errors);
	metric(out, "lockbroker_releases_total", "counter",
	    "Locks freed in Redis by RELEASE or a session's end.", ls.releases);
	metric(out, "lockbroker_renewals_total", "counter",
	    "Keys renewed in Redis.", ls.renewals);
	metric(out, "lockbroker_lost_locks_total", "counter",
	    "Held locks found expired or taken in Redis.", ls.lost);
	metric(out, "lockbroker_sessions_accepted_total", "counter",
	    "Client connections accepted.", b->stats.accepted);
	metric(out, "lockbroker_sessions_refused_total", "counter",
	    "Client connections refused at max_sessions.", b->stats.refused);
	metric(out, "lockbroker_auth_failures_total", "counter",
	    "AUTH requests with a wrong token.", b->stats.auth_failures);
	metric(out, "lockbroker_redis_up", "gauge",
	    "1 when the Redis command connection is ready.",
	    (unsigned long long)store_is_up(b->store));
	metric(out, "lockbroker_redis_reconnects_total", "counter",
	    "Times the Redis command connection was lost.",
	    store_reconnects(b->store));
	histogram(out, "lockbroker_acquire_wait_seconds",
	    "Time from ACQUIRE to OK for acquisitions that went to Redis.",
	    &ls.acquire_wait);
	histogram(out, "lockbroker_handoff_seconds",
	    "Time from a key seen released (locally or by pub/sub) to its "
	    "grant to the next local waiter.", &ls.handoff);
}

static void
metrics_cb(struct evhttp_request *req, void *arg)
{
	struct evbuffer *out;

	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		evhttp_send_error(req, 405, "only GET");
		return;
	}
	if ((out = evbuffer_new()) == NULL) {
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
	render(arg, out);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	evhttp_send_reply(req, 200, "OK", out);
	evbuffer_free(out);
}

int
metrics_start(struct broker *b, char *err, size_t errlen)
{
	if (b->cfg->metrics_port == 0)
		return 0;
	if ((b->http = evhttp_new(b->base)) == NULL) {
		snprintf(err, errlen, "cannot create the metrics server");
		return -1;
	}
	/* every method reaches metrics_cb, which answers 405 but for GET */
	evhttp_set_allowed_methods(b->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
	    EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
	    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
	if (evhttp_set_cb(b->http, "/metrics", metrics_cb, b) != 0 ||
	    evhttp_bind_socket(b->http, b->cfg->metrics_bind,
	    (uint16_t)b->cfg->metrics_port) != 0) {
		snprintf(err, errlen, "cannot serve metrics on %s:%ld",
		    b->cfg->metrics_bind, b->cfg->metrics_port);
		return -1;
	}
	log_info("metrics on http://%s:%ld/metrics", b->cfg->metrics_bind,
	    b->cfg->metrics_port);
	return 0;
}

void
metrics_stop(struct broker *b)
{
	if (b->http != NULL) {
		evhttp_free(b->http);
		b->http = NULL;
	}
}
