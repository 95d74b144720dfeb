/* metrics.c - counters and histograms of the daemon, served as Prometheus
 * text (GET /metrics) and as JSON (GET /v1/stats).
 *
 * The one idea: every number is a C11 atomic that any thread bumps without
 * a lock, and the two renderers only read them. Requests are counted once,
 * where the server writes its access log line (api_metrics_request): by
 * route and HTTP status, with a latency histogram per route. The compile
 * path adds the LLVM compile latency, misses, overruns, kernels answered
 * but not stored and the number of compiles in flight. Gauges the API
 * layer cannot see (queue depth, busy workers, open requests) come from a
 * callback the server installs (api_set_gauges); the cache's own counters
 * come from cache_stats(), the verify gate's from api_verify_stats().
 * The JSON pre-scan's refusals are counted here too.
 *
 * Histograms keep one count per bucket (not cumulative) and the sum in
 * microseconds; rendering accumulates them. A reader may see a count and a
 * sum from slightly different instants, which Prometheus tolerates.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "version.h"

/* Upper bounds of the latency buckets, in microseconds (1 ms .. 10 s for
 * compiles; requests also use the first, 0.5 ms, bucket). */
static const int64_t bucket_us[] = {
    500,    1000,   2500,   5000,    10000,   25000,   50000,
    100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
};
#define NBUCKETS ((int)(sizeof bucket_us / sizeof bucket_us[0]))

/* HTTP statuses are counted in a dense table; anything outside 100..599
 * (0: the connection closed before an answer was queued) is counted as 0. */
#define MAX_STATUS 600
/* Row of requests that matched no route (404, 405). */
#define ROUTE_OTHER API_ROUTE_COUNT

typedef struct Histogram {
	atomic_uint_fast64_t bucket[NBUCKETS + 1]; /* last: above every bound */
	atomic_uint_fast64_t sum_us;
} Histogram;

struct ApiMetrics {
	int64_t start_wall_s;
	int64_t start_us;
	atomic_uint_fast64_t requests[API_ROUTE_COUNT + 1][MAX_STATUS];
	Histogram request_seconds[API_ROUTE_COUNT + 1];
	Histogram compile_seconds;       /* kc_compile (codegen + link) of misses */
	atomic_uint_fast64_t misses;     /* compile requests that led a compile */
	atomic_uint_fast64_t overruns;   /* compiles slower than compile_timeout_s */
	atomic_uint_fast64_t not_stored; /* kernels answered, not stored */
	atomic_int_fast64_t in_flight;   /* kc_compile calls running now */
	ApiGaugesFn gauges;              /* set before threads start */
	void *gauges_closure;
	/* bodies and import lines the JSON pre-scan refused */
	atomic_uint_fast64_t json_refusals;
};

ApiMetrics *
api_metrics_new(void)
{
	ApiMetrics *m = kc_xcalloc(1, sizeof *m);
	m->start_wall_s = kc_wall_s();
	m->start_us = kc_now_us();
	return m;
}

void
api_metrics_free(ApiMetrics *m)
{
	free(m);
}

void
api_set_gauges(ApiCtx *a, ApiGaugesFn fn, void *closure)
{
	a->metrics->gauges = fn;
	a->metrics->gauges_closure = closure;
}

static void
observe(Histogram *h, int64_t us)
{
	if (us < 0)
		us = 0;
	int b = 0;
	while (b < NBUCKETS && us > bucket_us[b])
		b++;
	atomic_fetch_add_explicit(&h->bucket[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_us, (uint_fast64_t)us, memory_order_relaxed);
}

void
api_metrics_request(ApiCtx *a, int route, int status, int64_t duration_us)
{
	ApiMetrics *m = a->metrics;
	if (route < 0 || route >= API_ROUTE_COUNT)
		route = ROUTE_OTHER;
	if (status < 100 || status >= MAX_STATUS)
		status = 0;
	atomic_fetch_add_explicit(&m->requests[route][status], 1, memory_order_relaxed);
	observe(&m->request_seconds[route], duration_us);
}

void
api_metrics_json_refusal(ApiCtx *a)
{
	atomic_fetch_add_explicit(&a->metrics->json_refusals, 1, memory_order_relaxed);
}

void
api_metrics_compile_begin(ApiCtx *a)
{
	atomic_fetch_add_explicit(&a->metrics->misses, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&a->metrics->in_flight, 1, memory_order_relaxed);
}

void
api_metrics_compile_end(ApiCtx *a, int64_t duration_us)
{
	ApiMetrics *m = a->metrics;
	atomic_fetch_sub_explicit(&m->in_flight, 1, memory_order_relaxed);
	observe(&m->compile_seconds, duration_us);
	if (a->cfg.compile_timeout_s > 0 &&
	    duration_us > (int64_t)a->cfg.compile_timeout_s * 1000000) {
		atomic_fetch_add_explicit(&m->overruns, 1, memory_order_relaxed);
		kc_log(KC_LOG_WARN, "a compile took %.1f s, over compile_timeout_s (%d s)",
		       (double)duration_us / 1e6, a->cfg.compile_timeout_s);
	}
}

void
api_metrics_not_stored(ApiCtx *a)
{
	atomic_fetch_add_explicit(&a->metrics->not_stored, 1, memory_order_relaxed);
}

/* Everything both renderers print, read once. */
typedef struct Snapshot {
	ApiStats api;
	CacheStats cache;
	ApiServerGauges srv;
	ApiVerifyStats verify;
	uint64_t misses, overruns, not_stored, json_refusals;
	int64_t in_flight;
} Snapshot;

static void
snapshot(ApiCtx *a, Snapshot *s)
{
	ApiMetrics *m = a->metrics;
	memset(s, 0, sizeof *s);
	api_stats(a, &s->api);
	cache_stats(a->cache, &s->cache);
	api_verify_stats(a, &s->verify);
	if (m->gauges)
		m->gauges(m->gauges_closure, &s->srv);
	s->misses = atomic_load_explicit(&m->misses, memory_order_relaxed);
	s->overruns = atomic_load_explicit(&m->overruns, memory_order_relaxed);
	s->not_stored = atomic_load_explicit(&m->not_stored, memory_order_relaxed);
	s->in_flight = atomic_load_explicit(&m->in_flight, memory_order_relaxed);
	s->json_refusals = atomic_load_explicit(&m->json_refusals, memory_order_relaxed);
}

static const char *
route_label(int r)
{
	return r == ROUTE_OTHER ? "other" : api_route_pattern((ApiRouteId)r);
}

static uint64_t
hist_count(const Histogram *h)
{
	uint64_t n = 0;
	for (int b = 0; b <= NBUCKETS; b++)
		n += atomic_load_explicit(&h->bucket[b], memory_order_relaxed);
	return n;
}

/* Prometheus text for one histogram; `labels` is "" or `route="..."`. */
static void
prom_hist(KcBuf *b, const char *name, const char *labels, const Histogram *h)
{
	uint64_t cum = 0;
	const char *sep = *labels ? "," : "";
	for (int i = 0; i <= NBUCKETS; i++) {
		cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
		if (i < NBUCKETS)
			kc_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
			              (double)bucket_us[i] / 1e6, (unsigned long long)cum);
		else
			kc_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
			              (unsigned long long)cum);
	}
	double sum = (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6;
	kc_buf_printf(b, "%s_sum%s%s%s %.6f\n", name, *labels ? "{" : "", labels,
	              *labels ? "}" : "", sum);
	kc_buf_printf(b, "%s_count%s%s%s %llu\n", name, *labels ? "{" : "", labels,
	              *labels ? "}" : "", (unsigned long long)cum);
}

static void
prom_head(KcBuf *b, const char *name, const char *type, const char *help)
{
	kc_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
prom_one(KcBuf *b, const char *name, const char *type, const char *help, uint64_t v)
{
	prom_head(b, name, type, help);
	kc_buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

void
h_metrics(ApiCtx *a, const ApiMatch *mt, const ApiRequest *req, ApiResponse *resp)
{
	(void)mt, (void)req;
	ApiMetrics *m = a->metrics;
	Snapshot s;
	KcBuf b = {0};
	snapshot(a, &s);

	prom_head(&b, "kcsd_build_info", "gauge", "Version of the running kcsd (always 1).");
	kc_buf_printf(&b, "kcsd_build_info{version=\"%s\",build_id=\"%s\",llvm=\"%s\"} 1\n",
	              KCSD_VERSION, KCSD_BUILD_ID, KCSD_LLVM_VERSION);
	prom_head(&b, "kcsd_start_time_seconds", "gauge", "Start time, seconds since the epoch.");
	kc_buf_printf(&b, "kcsd_start_time_seconds %lld\n", (long long)m->start_wall_s);

	prom_head(&b, "kcsd_http_requests_total", "counter",
	          "HTTP requests answered, by route pattern and status.");
	for (int r = 0; r <= API_ROUTE_COUNT; r++)
		for (int st = 0; st < MAX_STATUS; st++) {
			uint64_t n =
			    atomic_load_explicit(&m->requests[r][st], memory_order_relaxed);
			if (n)
				kc_buf_printf(
				    &b,
				    "kcsd_http_requests_total{route=\"%s\",status=\"%d\"} "
				    "%llu\n",
				    route_label(r), st, (unsigned long long)n);
		}
	prom_head(&b, "kcsd_http_request_seconds", "histogram",
	          "Time from request headers to the access log line, by route.");
	for (int r = 0; r <= API_ROUTE_COUNT; r++) {
		if (!hist_count(&m->request_seconds[r]))
			continue;
		char labels[128];
		snprintf(labels, sizeof labels, "route=\"%s\"", route_label(r));
		prom_hist(&b, "kcsd_http_request_seconds", labels, &m->request_seconds[r]);
	}
	prom_one(&b, "kcsd_http_requests_in_flight", "gauge",
	         "Requests received, not yet answered.", (uint64_t)s.srv.requests_active);
	prom_one(&b, "kcsd_body_bytes_inflight", "gauge",
	         "Request body bytes reserved now (declared Content-Length, or as received).",
	         (uint64_t)s.srv.body_bytes_inflight);
	prom_one(&b, "kcsd_body_bytes_budget", "gauge",
	         "Most request body bytes held at once (max_inflight_body_bytes).",
	         (uint64_t)s.srv.body_bytes_budget);
	prom_one(&b, "kcsd_body_budget_refusals_total", "counter",
	         "Requests answered 503 because their body did not fit max_inflight_body_bytes.",
	         s.srv.body_budget_refusals);
	prom_one(&b, "kcsd_json_refusals_total", "counter",
	         "Request bodies (and import lines) refused 413 by the JSON pre-scan "
	         "(max_json_tokens, max_json_depth).",
	         s.json_refusals);
	prom_one(&b, "kcsd_connections_open", "gauge",
	         "HTTP connections open (per_ip_connections counts these per address).",
	         (uint64_t)s.srv.connections_open);
	prom_one(&b, "kcsd_connections_reaped_total", "counter",
	         "Connections closed because no complete request arrived within "
	         "request_deadline_s.",
	         s.srv.connections_reaped);

	prom_head(&b, "kcsd_compile_seconds", "histogram",
	          "LLVM code generation and linking of one kernel (cache misses).");
	prom_hist(&b, "kcsd_compile_seconds", "", &m->compile_seconds);
	prom_one(&b, "kcsd_compiles_total", "counter", "Kernels compiled and answered.",
	         s.api.compiles);
	prom_one(&b, "kcsd_compile_failures_total", "counter",
	         "Compile requests answered with an error.", s.api.failures);
	prom_one(&b, "kcsd_compile_coalesced_total", "counter",
	         "Compile requests answered by another request's compile (singleflight).",
	         s.api.coalesced);
	prom_one(&b, "kcsd_compile_parked_total", "counter",
	         "Compile requests that waited for another's compile parked, holding no worker.",
	         s.api.parked);
	prom_one(&b, "kcsd_compile_parked", "gauge",
	         "Compile requests parked on another's compile now.",
	         (uint64_t)(s.api.parked_now > 0 ? s.api.parked_now : 0));
	prom_one(&b, "kcsd_compile_overruns_total", "counter",
	         "Compiles that took longer than compile_timeout_s.", s.overruns);
	prom_one(&b, "kcsd_compiles_in_flight", "gauge", "Compiles running now.",
	         (uint64_t)(s.in_flight > 0 ? s.in_flight : 0));
	prom_one(&b, "kcsd_compile_negative_hits_total", "counter",
	         "Compile requests answered from the negative cache (a kernel whose compile "
	         "crashed or timed out within negative_ttl_s), no worker started.",
	         s.api.negative_hits);
	if (a->cfg.pool) {
		KcPoolStats ps;
		kc_pool_stats(a->cfg.pool, &ps);
		prom_one(&b, "kcsd_compile_workers", "gauge",
		         "Compile worker processes configured (--workers).", (uint64_t)ps.size);
		prom_one(&b, "kcsd_compile_workers_ready", "gauge",
		         "Compile worker processes idle and warm.", (uint64_t)ps.ready);
		prom_one(&b, "kcsd_compile_workers_busy", "gauge",
		         "Compile worker processes running a job.", (uint64_t)ps.busy);
		prom_one(&b, "kcsd_compile_worker_starts_total", "counter",
		         "Compile workers started and warmed, replacements included.", ps.started);
		prom_one(&b, "kcsd_compile_worker_start_failures_total", "counter",
		         "Compile worker starts that failed (spawn, hello or warm-up).",
		         ps.start_failures);
		prom_one(&b, "kcsd_compile_worker_crashes_total", "counter",
		         "Jobs lost to a compile worker that died (signal, exit, memory cap).",
		         ps.crashes);
		prom_one(
		    &b, "kcsd_compile_worker_oom_total", "counter",
		    "Of the crashes, workers that died at their memory cap (compile_max_bytes).",
		    ps.oom);
		prom_one(&b, "kcsd_compile_timeouts_total", "counter",
		         "Jobs killed at the hard deadline (compile_timeout_s).", ps.timeouts);
	}

	prom_one(&b, "kcsd_cache_hits_total", "counter",
	         "Compile requests answered from the cache.", s.api.hits);
	prom_one(&b, "kcsd_cache_fast_hits_total", "counter",
	         "Cache hits answered on the HTTP thread from the compile memo (also in "
	         "kcsd_cache_hits_total).",
	         s.api.fast_hits);
	prom_one(&b, "kcsd_cache_misses_total", "counter",
	         "Compile requests that found no kernel in the cache and compiled it.", s.misses);
	prom_one(&b, "kcsd_cache_evictions_total", "counter",
	         "Kernels evicted from the cache (LRU or DELETE).", s.cache.evictions);
	prom_one(&b, "kcsd_cache_evicted_bytes_total", "counter",
	         "Stored bytes of the kernels and workload records evicted.",
	         s.cache.evicted_bytes);
	prom_one(&b, "kcsd_cache_evicted_workloads_total", "counter",
	         "Workload records evicted (neither a schedule nor a kernel left).",
	         s.cache.evicted_workloads);
	prom_one(&b, "kcsd_kernels_not_stored_total", "counter",
	         "Kernels compiled and answered but not stored (store full or write failed).",
	         s.not_stored);
	prom_one(&b, "kcsd_cache_full_writes_total", "counter",
	         "Writes refused because the map was full and eviction could not make room.",
	         s.cache.full_refusals);
	prom_one(&b, "kcsd_cache_bytes", "gauge", "Bytes of the LMDB map in use.",
	         s.cache.bytes_used);
	prom_one(&b, "kcsd_cache_map_bytes", "gauge",
	         "Size of the LMDB map (cache_map_bytes): the data file never grows past it.",
	         s.cache.map_bytes);
	prom_one(&b, "kcsd_cache_file_bytes", "gauge",
	         "Pages the data file holds (its high-water mark), in bytes.", s.cache.file_bytes);
	prom_one(&b, "kcsd_cache_max_bytes", "gauge", "Cache size above which kernels are evicted.",
	         s.cache.max_bytes);
	prom_one(&b, "kcsd_cache_kernels", "gauge", "Kernels stored.", s.cache.entries);
	prom_one(&b, "kcsd_cache_workloads", "gauge", "Workload records stored.",
	         s.cache.workloads);
	prom_one(&b, "kcsd_cache_schedules", "gauge", "Schedule records stored.",
	         s.cache.schedules);
	prom_one(&b, "kcsd_cache_artifacts", "gauge", "Artifact records stored.",
	         s.cache.entries_artifacts);
	prom_one(&b, "kcsd_cache_checksum_failures_total", "counter",
	         "Stored values refused because their checksum failed.", s.cache.checksum_failures);

	prom_one(&b, "kcsd_queue_depth", "gauge", "Jobs waiting for a worker.",
	         (uint64_t)s.srv.queue_depth);
	prom_one(&b, "kcsd_queue_capacity", "gauge", "Jobs that may wait before 503.",
	         (uint64_t)s.srv.queue_capacity);
	prom_one(&b, "kcsd_workers", "gauge", "Worker threads.", (uint64_t)s.srv.workers);
	prom_one(&b, "kcsd_workers_busy", "gauge", "Worker threads running a job.",
	         (uint64_t)s.srv.workers_busy);

	prom_one(&b, "kcsd_verifies_in_flight", "gauge",
	         "POST /v1/verify requests holding a slot (inputs, runners, comparison).",
	         (uint64_t)s.verify.running);
	prom_one(&b, "kcsd_verifies_in_flight_max", "gauge",
	         "The most verifies that held a slot at once since start.",
	         (uint64_t)s.verify.running_max);
	prom_one(&b, "kcsd_verifies_waiting", "gauge", "Verifies waiting for a slot.",
	         (uint64_t)s.verify.waiting);
	prom_one(&b, "kcsd_verify_slots", "gauge",
	         "Verifies that may run at once (verify_concurrency).", (uint64_t)s.verify.slots);
	prom_one(&b, "kcsd_verify_refusals_total", "counter",
	         "Verifies answered 503: too many waiting, or no slot within verify_wait_s.",
	         s.verify.refused);
	api_reply_buf(resp, 200, "text/plain; version=0.0.4; charset=utf-8", &b);
}

/* Appends {"count":n,"sum_s":x,"buckets":{"0.001":n,...,"+Inf":n}}
 * (cumulative counts, as in the Prometheus text). */
static void
json_hist(KcBuf *b, const Histogram *h)
{
	uint64_t cum = 0;
	kc_buf_puts(b, "{\"buckets\":{");
	for (int i = 0; i <= NBUCKETS; i++) {
		cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
		if (i < NBUCKETS)
			kc_buf_printf(b, "\"%g\":%llu,", (double)bucket_us[i] / 1e6,
			              (unsigned long long)cum);
		else
			kc_buf_printf(b, "\"+Inf\":%llu}", (unsigned long long)cum);
	}
	kc_buf_printf(b, ",\"count\":%llu,\"sum_s\":%.6f}", (unsigned long long)cum,
	              (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6);
}

void
h_stats(ApiCtx *a, const ApiMatch *mt, const ApiRequest *req, ApiResponse *resp)
{
	(void)mt, (void)req;
	ApiMetrics *m = a->metrics;
	Snapshot s;
	KcBuf b = {0};
	snapshot(a, &s);
	kc_buf_printf(&b,
	              "{\"kcsd_version\":\"%s\",\"build_id\":\"%s\",\"start_time\":%lld,"
	              "\"uptime_s\":%.3f,\"requests\":{",
	              KCSD_VERSION, KCSD_BUILD_ID, (long long)m->start_wall_s,
	              (double)(kc_now_us() - m->start_us) / 1e6);
	bool first_route = true;
	for (int r = 0; r <= API_ROUTE_COUNT; r++) {
		bool first = true;
		for (int st = 0; st < MAX_STATUS; st++) {
			uint64_t n =
			    atomic_load_explicit(&m->requests[r][st], memory_order_relaxed);
			if (!n)
				continue;
			if (first) {
				kc_buf_printf(&b, "%s\"%s\":{", first_route ? "" : ",",
				              route_label(r));
				first_route = false;
			}
			kc_buf_printf(&b, "%s\"%d\":%llu", first ? "" : ",", st,
			              (unsigned long long)n);
			first = false;
		}
		if (!first)
			kc_buf_putc(&b, '}');
	}
	kc_buf_printf(&b,
	              "},\"requests_in_flight\":%lld,\"compile\":{\"compiles\":%llu,"
	              "\"failures\":%llu,\"coalesced\":%llu,\"overruns\":%llu,"
	              "\"in_flight\":%lld,\"seconds\":",
	              (long long)s.srv.requests_active, (unsigned long long)s.api.compiles,
	              (unsigned long long)s.api.failures, (unsigned long long)s.api.coalesced,
	              (unsigned long long)s.overruns, (long long)s.in_flight);
	json_hist(&b, &m->compile_seconds);
	kc_buf_printf(&b,
	              "},\"cache\":{\"hits\":%llu,\"fast_hits\":%llu,\"misses\":%llu,"
	              "\"evictions\":%llu,"
	              "\"bytes\":%llu,\"map_bytes\":%llu,\"artifacts\":%llu,"
	              "\"checksum_failures\":%llu,\"evicted_bytes\":%llu,\"kernels\":%llu,"
	              "\"max_bytes\":%llu,\"file_bytes\":%llu,\"workloads\":%llu,"
	              "\"schedules\":%llu,\"evicted_workloads\":%llu,\"not_stored\":%llu,"
	              "\"full_writes\":%llu},",
	              (unsigned long long)s.api.hits, (unsigned long long)s.api.fast_hits,
	              (unsigned long long)s.misses, (unsigned long long)s.cache.evictions,
	              (unsigned long long)s.cache.bytes_used, (unsigned long long)s.cache.map_bytes,
	              (unsigned long long)s.cache.entries_artifacts,
	              (unsigned long long)s.cache.checksum_failures,
	              (unsigned long long)s.cache.evicted_bytes,
	              (unsigned long long)s.cache.entries, (unsigned long long)s.cache.max_bytes,
	              (unsigned long long)s.cache.file_bytes, (unsigned long long)s.cache.workloads,
	              (unsigned long long)s.cache.schedules,
	              (unsigned long long)s.cache.evicted_workloads,
	              (unsigned long long)s.not_stored, (unsigned long long)s.cache.full_refusals);
	kc_buf_printf(&b,
	              "\"limits\":{\"body_bytes_inflight\":%lld,\"body_bytes_budget\":%lld,"
	              "\"body_budget_refusals\":%llu,\"json_refusals\":%llu,"
	              "\"connections_open\":%lld,\"connections_reaped\":%llu},",
	              (long long)s.srv.body_bytes_inflight, (long long)s.srv.body_bytes_budget,
	              (unsigned long long)s.srv.body_budget_refusals,
	              (unsigned long long)s.json_refusals, (long long)s.srv.connections_open,
	              (unsigned long long)s.srv.connections_reaped);
	kc_buf_printf(&b,
	              "\"queue\":{\"depth\":%lld,\"capacity\":%lld,\"workers\":%lld,"
	              "\"workers_busy\":%lld},",
	              (long long)s.srv.queue_depth, (long long)s.srv.queue_capacity,
	              (long long)s.srv.workers, (long long)s.srv.workers_busy);
	kc_buf_printf(&b,
	              "\"verify\":{\"in_flight\":%d,\"in_flight_max\":%d,\"waiting\":%d,"
	              "\"slots\":%d,\"refusals\":%llu}}\n",
	              s.verify.running, s.verify.running_max, s.verify.waiting, s.verify.slots,
	              (unsigned long long)s.verify.refused);
	api_reply_json_buf(resp, 200, &b);
}
