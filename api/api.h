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
#include "worker.h"
#include "compiler.h"

typedef struct ApiCtx ApiCtx; /* opaque; one per process */

/* The body caps of routes.def: API_BODY_CAP_0 is max_body_bytes (a row's
 * cap column 0), then one per B row, named after its setting. */
typedef enum ApiBodyCap {
	API_BODY_CAP_0,
#define B(setting) API_BODY_CAP_##setting,
#define R(e, method, pattern, handler, flags, cap)
#include "routes.def"
#undef R
#undef B
	API_BODY_CAP_COUNT
} ApiBodyCap;

/* Everything api/ needs from the configuration. */
typedef struct ApiConfig {
	KcLimits limits;       /* passed to kc_parse (zero fields: defaults); its
	                        * JSON pre-scan bounds also bound the bodies of
	                        * schedule PUT, import (per line) and evict */
	size_t max_body_bytes; /* largest accepted request body */
	/* the B-row caps of routes.def, by ApiBodyCap ([API_BODY_CAP_0] is
	 * unused: max_body_bytes); 0: max_body_bytes */
	size_t body_caps[API_BODY_CAP_COUNT];
	const char *linker;    /* linker driver for kc_compile, NULL: default */
	const char *tmpdir;    /* scratch directory, NULL: default */
	int compile_timeout_s; /* a compile slower than this is logged and counted
	                        * (kcsd_compile_overruns_total); 0: never. With
	                        * a pool it is also the pool's hard deadline. */
	/* The compile workers (worker.h), borrowed: every compile, dump and
	 * assembly listing runs in one. NULL: in this process (no isolation;
	 * for tools and tests that link the API without the daemon). */
	KcPool *pool;
	int negative_ttl_s;        /* how long a kernel_id whose compile crashed or
	                            * timed out answers that error at once (0: off) */
	int64_t compile_max_bytes; /* the workers' memory cap (0: none; then
	                            * ?inject=alloc is refused) */
	/* POST /v1/verify (verify.c) */
	const char *runner;        /* kcsd-runner path, NULL or "": next to the
	                            * executable; must outlive the ApiCtx */
	int verify_timeout_s;      /* wall-clock limit of one kernel run (0: 10) */
	size_t verify_max_bytes;   /* largest inputs + 2 x outputs verified, 413
	                            * above; the interpreter gets 4x (0: 256 MiB) */
	int verify_concurrency;    /* verifies running at once (0: 1) */
	int verify_queue;          /* more that may wait for a slot (0: none) */
	int verify_wait_s;         /* longest wait for a slot, then 503 (0: 30) */
	bool test_fault_injection; /* TEST ONLY: honour ?inject=crash|hang */
	size_t max_dump_bytes;     /* largest GET /v1/kernels/{id}/dump reply, 413
	                            * above (0: 16 MiB) */
	/* POST /v1/compile: the largest canonical workload, 413 above (0: 1 MiB) */
	size_t max_canonical_bytes;
} ApiConfig;

/* Route flags. */
enum {
	API_F_BLOCKING = 1u << 0, /* may block: run on a worker thread */
	API_F_BODY = 1u << 1,     /* takes a request body */
	/* The role a caller needs (auth.c); read < write < admin. A row with
	 * no role flag needs admin (fail closed). */
	API_F_PUBLIC = 1u << 2, /* no token: /healthz, /metrics, /v1/keys, /v1/version */
	API_F_READ = 1u << 3,
	API_F_WRITE = 1u << 4,
	API_F_ADMIN = 1u << 5,
};

typedef enum ApiRouteId {
#define B(setting)
#define R(e, method, pattern, handler, flags, cap) API_ROUTE_##e,
#include "routes.def"
#undef R
#undef B
	API_ROUTE_COUNT
} ApiRouteId;

/* The result of routing a method and path. `id` is the {id} path segment
 * (a kernel_id or workload_key), parsed. */
typedef struct ApiMatch {
	ApiRouteId route;
	unsigned flags; /* API_F_* of the route */
	ApiBodyCap cap; /* the route's body cap (routes.def cap column) */
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
	/* Parking, offered by a caller that can resume the request later (all
	 * three NULL: not offered, the handler waits in place). A handler
	 * that would only wait for another request's work (a singleflight
	 * waiter) parks instead of holding its worker thread: it stores true
	 * in *parked and returns at once, leaving *resp unfilled and never
	 * touching req or resp again. Then wake(wake_closure, err) is called
	 * exactly once, from any thread: err NULL means "call api_handle
	 * again" with attempt one higher, else answer with *err. */
	bool *parked;
	void (*wake)(void *closure, const KcErr *err);
	void *wake_closure;
	int attempt; /* times this request was parked and woken, from 0 */
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
	bool json_refused; /* a 413 of the JSON pre-scan (kc_json_scan): counted */
	/* A streamed body instead of `body` (admin.c: GET /v1/export). When
	 * `stream` is set the server calls stream(stream_arg, buf, max) for
	 * successive chunks, on an HTTP thread: it returns the bytes written
	 * (> 0), 0 at the end, -1 to abort the connection; then, once,
	 * stream_free(stream_arg). Whoever sends the response takes them (sets
	 * stream to NULL); api_response_free calls stream_free otherwise. */
	long (*stream)(void *arg, char *buf, size_t max);
	void (*stream_free)(void *arg);
	void *stream_arg;
} ApiResponse;

/* Counters since start-up (also served in GET /v1/version under "stats"). */
typedef struct ApiStats {
	uint64_t compiles;      /* kc_compile calls that produced a kernel */
	uint64_t hits;          /* compile requests answered from the cache */
	uint64_t fast_hits;     /* ... of which on the HTTP thread (api_handle_fast) */
	uint64_t coalesced;     /* compile requests that waited for another's compile */
	uint64_t parked;        /* ... of which parked, holding no worker, while waiting */
	int parked_now;         /* requests parked now (a gauge) */
	uint64_t failures;      /* compile requests answered with an error */
	uint64_t negative_hits; /* ... of which from the negative cache, no worker started */
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
 * JSON error bodies), unless the handler parked (ApiRequest.parked).
 * Blocking routes (API_F_BLOCKING) must be called from a worker thread. */
void api_handle(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);

/* Wakes every parked request with `st` (KC_SHUTTING_DOWN at shutdown)
 * and refuses to park any more from now on: a request that would park is
 * answered `st` instead. Thread-safe; returns the number woken. */
int api_cancel_parked(ApiCtx *a, KcStatus st);

/* Tries to answer a blocking route without blocking, on the calling (HTTP)
 * thread, once its whole body is in. Today: a POST /v1/compile of a body
 * (and ?target=) answered before, since the last schedule change, whose
 * kernel is still in the cache and passes the artifact check. Returns true
 * with *resp filled (the same reply the worker would give for the hit);
 * false, with *resp untouched, when the request must go to a worker
 * (api_handle). Does no LMDB write and no compile; thread-safe. */
bool api_handle_fast(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);

/* Fills *resp with the JSON error body for `st` (its HTTP status and wire
 * code), `where` (may be NULL or "") and `msg` (NULL: the status text).
 * Frees any body resp already had. Adds Retry-After: 1 for 503. */
void api_reply_error(ApiResponse *resp, KcStatus st, const char *where, const char *msg);
void api_reply_kcerr(ApiResponse *resp, const KcErr *err);

void api_response_free(ApiResponse *resp); /* frees body; NULL allowed */

void api_stats(ApiCtx *a, ApiStats *out);

/* The route's pattern ("/v1/kernels/{id}") for logs. */
const char *api_route_pattern(ApiRouteId r);

/* The largest request body the matched route takes, in bytes (its
 * routes.def cap), and in *setting (may be NULL) the name of the setting
 * that sets it ("max_body_bytes", "max_import_bytes"), for messages.
 * Thread-safe. */
size_t api_body_cap(const ApiCtx *a, const ApiMatch *m, const char **setting);

/* ---- metrics (metrics.c) ------------------------------------------------
 * Lock-free counters served by GET /metrics (Prometheus text) and
 * GET /v1/stats (JSON). Every function here is thread-safe. */

/* What the server knows that api/ cannot see, read at each scrape. */
typedef struct ApiServerGauges {
	int64_t queue_depth;     /* jobs waiting for a worker */
	int64_t queue_capacity;  /* queue_depth setting */
	int64_t workers;         /* worker threads */
	int64_t workers_busy;    /* worker threads running a job */
	int64_t requests_active; /* requests received and not yet answered */
	/* request bodies (server.c): bytes reserved now, the budget
	 * (max_inflight_body_bytes), bodies refused 503 for it */
	int64_t body_bytes_inflight;
	int64_t body_bytes_budget;
	uint64_t body_budget_refusals;
	/* connections closed with no complete request by request_deadline_s */
	uint64_t connections_reaped;
	int64_t connections_open; /* accepted and not yet cleaned up by MHD */
} ApiServerGauges;
typedef void (*ApiGaugesFn)(void *closure, ApiServerGauges *out);

/* Installs the server's gauge callback. Call before any thread may serve
 * a request; fn must be thread-safe and must not block. */
void api_set_gauges(ApiCtx *a, ApiGaugesFn fn, void *closure);
/* Counts one answered request: `route` is an ApiRouteId, or -1 when the
 * path matched no route; `status` the HTTP status sent (0: none, the
 * connection closed first); `duration_us` from headers to completion.
 * Call once per request, where it is logged. */
void api_metrics_request(ApiCtx *a, int route, int status, int64_t duration_us);

/* ---- auth (auth.c) -------------------------------------------------------
 * Bearer tokens with roles; see auth.c. Token lines are
 * "<sha256-hex of the token> <read|write|admin> [name]". */
typedef struct ApiAuthConfig {
	const char *tokens;      /* token lines, '\n'-separated; NULL or "": none */
	const char *tokens_file; /* a file of token lines; NULL or "": none */
	bool anonymous_read;     /* the read role needs no token */
} ApiAuthConfig;

/* Loads the token digests (replacing any loaded before) and logs the mode.
 * KC_BAD_REQUEST with a message naming the file and line on a bad line or
 * an unreadable file. Call before threads start. Without it (or with no
 * tokens) the API is in protected mode. */
KcStatus api_auth_init(ApiCtx *a, const ApiAuthConfig *cfg, KcErr *err);
/* Decides, from the headers only, whether the caller may use the matched
 * route. `authorization` is the Authorization header or NULL; `loopback`
 * says whether the client address is 127.0.0.0/8 or ::1. Returns true to
 * go on; otherwise fills *resp with 401 (with WWW-Authenticate: Bearer)
 * or 403. Thread-safe, constant time in the token. */
bool api_authorize(ApiCtx *a, const ApiMatch *m, const char *authorization, bool loopback,
                   ApiResponse *resp);
/* "tokens" or "protected-mode" (also in GET /v1/version). */
const char *api_auth_mode(const ApiCtx *a);
/* The role a route's flags require: "none", "read", "write" or "admin". */
const char *api_route_role_name(unsigned flags);
/* For kcsd --hash-token: appends "<sha256-hex> <role>[ <name>]\n". */
void api_hash_token_line(const char *token, const char *role, const char *name, KcBuf *out);
bool api_role_valid(const char *role); /* read, write or admin */

/* ---- artifact signing keys (keys.c) --------------------------------------- */
typedef struct ApiKeysConfig {
	const char *signing_key_file; /* PEM Ed25519 private key; NULL or "":
	                               * STATE_DIR/signing.key, created if missing */
	const char *state_dir;
	const char *verify_key_files; /* PEM public keys, ',' or '\n' separated */
} ApiKeysConfig;

/* Loads (or creates) the signing key and the verify keys; every artifact
 * is signed from then on (GET /v1/keys lists them). Fills err naming the
 * file on failure. Call before threads start. */
KcStatus api_keys_init(ApiCtx *a, const ApiKeysConfig *cfg, KcErr *err);

#endif /* KCS_API_H */
