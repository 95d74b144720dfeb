/* api.h - the kcsd HTTP API, independent of any HTTP library.
 *
 * The server hands each request to api/ as an ApiRequest (method, path,
 * query getter, content type, body) and sends back the ApiResponse it gets.
 * Routing is a table (routes.def): api_route() matches method and path and
 * says whether the handler may block (compile, assembly, cache writes); a
 * blocking handler must run on a worker thread, never on an HTTP thread.
 *
 * Threads: one ApiCtx is shared by every thread. api_route() is pure;
 * api_handle() may be called from any number of threads at once. The only
 * shared mutable state is the compile singleflight table and the counters,
 * both guarded inside ApiCtx.
 */
#ifndef KCS_API_H
#define KCS_API_H

#include "cache.h"
#include "common.h"
#include "compiler.h"

typedef struct ApiCtx ApiCtx; /* opaque; one per process */

/* Everything api/ needs from the configuration. */
typedef struct ApiConfig {
	KcLimits limits;       /* passed to kc_parse (zero fields: defaults) */
	size_t max_body_bytes; /* largest accepted request body */
	const char *linker;    /* linker driver for kc_compile, NULL: default */
	const char *tmpdir;    /* scratch directory, NULL: default */
} ApiConfig;

/* Route flags. */
enum {
	API_F_BLOCKING = 1u << 0, /* may block: run on a worker thread */
	API_F_BODY = 1u << 1,     /* takes a request body */
};

typedef enum ApiRouteId {
#define R(e, method, pattern, handler, flags) API_ROUTE_##e,
#include "routes.def"
#undef R
	API_ROUTE_COUNT
} ApiRouteId;

/* The result of routing a method and path. `id` is the {id} path segment
 * (a kernel_id or workload_key), parsed. */
typedef struct ApiMatch {
	ApiRouteId route;
	unsigned flags; /* API_F_* of the route */
	KcDigest id;
} ApiMatch;

/* Looks up a query parameter; returns NULL when absent. The returned string
 * must stay valid for the duration of api_handle(). */
typedef const char *(*ApiQueryFn)(void *closure, const char *key);

/* One request. Every pointer is borrowed for the duration of api_handle(). */
typedef struct ApiRequest {
	const char *method; /* "GET", "POST", ... */
	const char *path;   /* without the query string */
	ApiQueryFn query;   /* may be NULL: no query parameters */
	void *query_closure;
	const char *content_type; /* header value or NULL */
	const char *body;         /* may be NULL when body_len is 0 */
	size_t body_len;
	const char *client; /* client address for logs ("127.0.0.1"), or NULL */
} ApiRequest;

/* One response. `body` is malloc'd and owned by the response (free with
 * api_response_free, or take it and set it to NULL). `content_type`,
 * `cache` and `header_name` point to static strings; `header_value` is
 * stored inline. */
typedef struct ApiResponse {
	int status;
	const char *content_type;
	char *body;
	size_t body_len;
	const char *cache;       /* "hit", "miss" or NULL, for the access log */
	const char *header_name; /* one extra header ("Allow", "Retry-After") or NULL */
	char header_value[64];
} ApiResponse;

/* Counters since start-up (also served in GET /v1/version under "stats"). */
typedef struct ApiStats {
	uint64_t compiles;  /* kc_compile calls that produced a kernel */
	uint64_t hits;      /* compile requests answered from the cache */
	uint64_t coalesced; /* compile requests that waited for another's compile */
	uint64_t failures;  /* compile requests answered with an error */
} ApiStats;

/* Creates the API context. `cache` is borrowed and must outlive the
 * context. Resolves the host target once. Call before threads start. */
ApiCtx *api_new(const ApiConfig *cfg, Cache *cache);
void api_free(ApiCtx *a); /* NULL allowed; no api_handle() may be running */

/* Routes `method` + `path`. Returns true and fills *m when a route matches.
 * Otherwise returns false and fills *resp with the error to send: 404
 * not_found (unknown path, or an {id} that is not 64 hex characters) or
 * 405 method_not_allowed with an Allow header. Bounded: paths over 512
 * bytes are 404. */
bool api_route(const char *method, const char *path, ApiMatch *m, ApiResponse *resp);

/* Runs the handler of a matched route and fills *resp (always: errors are
 * JSON error bodies). Blocking routes (API_F_BLOCKING) must be called from a
 * worker thread. */
void api_handle(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);

/* Fills *resp with the JSON error body for `st` (its HTTP status and wire
 * code), `where` (may be NULL or "") and `msg` (NULL: the status text).
 * Frees any body resp already had. Adds Retry-After: 1 for 503. */
void api_reply_error(ApiResponse *resp, KcStatus st, const char *where, const char *msg);
void api_reply_kcerr(ApiResponse *resp, const KcErr *err);

void api_response_free(ApiResponse *resp); /* frees body; NULL allowed */

void api_stats(ApiCtx *a, ApiStats *out);

/* The route's pattern ("/v1/kernels/{id}") for logs. */
const char *api_route_pattern(ApiRouteId r);

#endif /* KCS_API_H */
