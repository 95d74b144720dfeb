/* internal.h - what the api/ files share: the ApiCtx layout, the handler
 * signature and the JSON reply helpers. Read it as the table of contents of
 * api/: route.c (routing, replies, dispatch, context), handlers.c (health,
 * version, kernel parts, workloads, schedules), compile.c (POST /v1/compile
 * and its singleflight table), dump.c (a stored kernel's pass dumps).
 *
 * Locking: `mu` guards the singleflight list, the recent-graph ring and the
 * counters; the hit memo (compile.c) and the verify gate (verify.c) have
 * their own locks; sched_gen is atomic; nothing else in ApiCtx changes
 * after api_new().
 */
#ifndef KCS_API_INTERNAL_H
#define KCS_API_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "api.h"

/* Recently compiled request bodies by workload, so that PUT /v1/schedules
 * can validate knobs against a real graph. Bounded in count and size. */
#define API_RECENT 32
#define API_RECENT_MAX_BYTES (1u << 20)

typedef struct RecentGraph {
	KcDigest key;
	char *body; /* malloc'd composite JSON, NULL when the slot is empty */
	size_t len;
} RecentGraph;

typedef struct Flight Flight;         /* one in-flight compile (compile.c) */
typedef struct ApiMetrics ApiMetrics; /* atomic counters (metrics.c) */
typedef struct ApiAuth ApiAuth;       /* token digests (auth.c) */
typedef struct ApiKeys ApiKeys;       /* signing and verify keys (keys.c) */
typedef struct ApiMemo ApiMemo;       /* compile hit memo (compile.c) */
typedef struct VerifyGate VerifyGate; /* verify slots (verify.c) */

/* A kernel_id whose compile crashed its worker or ran past the deadline,
 * answered with the same error until `until_us` (negative_ttl_s). */
#define API_NEGATIVE_ENTRIES 1024
typedef struct NegEntry {
	KcDigest kid;
	KcErr err;
	int64_t until_us; /* kc_now_us(); 0: empty */
} NegEntry;

struct ApiCtx {
	ApiConfig cfg;
	char *linker; /* owned copies of cfg strings */
	char *tmpdir;
	Cache *cache;
	KcTarget host;
	bool host_ok;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* broadcast when a flight lands */
	Flight *flights;
	KcStatus park_refused; /* KC_OK, or what a request that would park gets */
	ApiStats stats;
	RecentGraph recent[API_RECENT];
	int recent_next;
	ApiMetrics *metrics; /* lock-free; the pointer never changes */
	ApiAuth *auth;       /* NULL: protected mode; set before threads */
	ApiKeys *keys;       /* NULL: artifacts are not signed; set before threads */
	ApiMemo *memo;       /* own lock; the pointer never changes */
	VerifyGate *gate;    /* verify slots; own lock; the pointer never changes */
	/* Bumped after every request that may change a stored schedule
	 * (PUT /v1/schedules, POST /v1/import): memo keys include it, so a
	 * memoised (body, target) -> kernel_id made before is never used. */
	atomic_uint_fast64_t sched_gen;
	NegEntry negative[API_NEGATIVE_ENTRIES]; /* under mu */
};

typedef void (*ApiHandler)(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);

/* route.c */
void api_reply_buf(ApiResponse *resp, int status, const char *content_type, KcBuf *b);
/* The error reply of a compile that crashed or timed out: err's code and
 * message plus the "kernel_id" (kid, the name DELETE /v1/kernels/{id}
 * takes); from the negative cache (retry_s > 0) also "negative_cache": true
 * and Retry-After: retry_s. */
void api_reply_compiler_failure(ApiResponse *resp, const KcErr *err, const KcDigest *kid,
                                int retry_s);
void api_reply_json_buf(ApiResponse *resp, int status, KcBuf *b);
bool api_is_json(const char *content_type);
/* kc_json_scan with the limits' max_json_tokens and max_json_depth (0:
 * the defaults): call before cJSON parses a request body. */
KcStatus api_json_scan(const ApiCtx *a, const char *body, size_t len, KcErr *err);
/* Appends `s` as a JSON string literal like kc_buf_json_str, but replaces
 * bytes that are not valid UTF-8 with U+FFFD, so replies are always valid
 * JSON text whatever the request held. */
void api_json_str(KcBuf *b, const char *s);
const char *api_query(const ApiRequest *req, const char *key);
/* ?target=, with spaces read back as '+' (form decoding turns an unescaped
 * '+' into a space; target names never contain spaces). Copies into buf;
 * NULL when absent. */
const char *api_query_target(const ApiRequest *req, char *buf, size_t cap);
double api_ms_since(int64_t t0_us);

/* compile.c */
/* Runs a compile or assembly job on a worker of cfg.pool (in this process
 * without one). What kc_pool_run returns; counts the compile in the
 * metrics when it is one. */
KcStatus api_run_job(ApiCtx *a, const KcJob *job, KcJobResult *out, KcErr *err);
/* Forgets kernel_id's negative-cache entry (DELETE /v1/kernels/{id});
 * true if there was one. */
bool api_negative_clear(ApiCtx *a, const KcDigest *kid);
void h_compile(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void api_recent_put(ApiCtx *a, const KcDigest *key, const char *body, size_t len);
char *api_recent_get(ApiCtx *a, const KcDigest *key, size_t *len);
/* The compile hit memo: SHA-256(body, ?target, sched_gen) -> (kernel_id,
 * ms_hash), API_MEMO_ENTRIES entries, least recently used replaced. */
#define API_MEMO_ENTRIES 4096
ApiMemo *api_memo_new(void);
void api_memo_free(ApiMemo *m); /* NULL allowed */
/* A memoised compile hit answered on the calling thread (api_handle_fast):
 * true with *resp filled, false (resp untouched) to take the normal way. */
bool api_compile_fast(ApiCtx *a, const ApiRequest *req, ApiResponse *resp);

/* verify.c */
void h_verify(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
/* At most cfg->verify_concurrency verifies run at once; verify_queue more
 * wait up to verify_wait_s for a slot (h_verify answers 503 otherwise). */
VerifyGate *api_verify_gate_new(const ApiConfig *cfg);
void api_verify_gate_free(VerifyGate *g); /* NULL allowed; none running */
typedef struct ApiVerifyStats {
	int slots;        /* verify_concurrency */
	int running;      /* verifies holding a slot now */
	int running_max;  /* the most that held one at once, since start */
	int waiting;      /* verifies waiting for a slot now */
	uint64_t refused; /* answered 503: queue full or no slot in time */
} ApiVerifyStats;
void api_verify_stats(ApiCtx *a, ApiVerifyStats *st);

/* handlers.c */
void h_healthz(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_version(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_kernel(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_kernel_object(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_kernel_ir(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_kernel_asm(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
/* The "target" of stored kernel metadata JSON, its table columns filled
 * (kc_target_fill); false if it has none or this build cannot take it. */
bool api_target_from_meta(const char *meta, size_t len, KcTarget *t);
void h_workload(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_schedule_put(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_schedule_list(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
/* The provenance of a record that came without one, {"by": by, "at": now,
 * "kcsd_version": ...}, into buf (by: a plain word). */
void api_default_provenance(const char *by, char *buf, size_t cap);

/* dump.c: the pass dumps of a stored kernel, compiled again */
void h_kernel_dump(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);

/* admin.c: team sharing and cache administration */
void h_export(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_import(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_kernel_delete(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_admin_evict(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_admin_backup(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);

/* metrics.c */
ApiMetrics *api_metrics_new(void);
void api_metrics_free(ApiMetrics *m); /* NULL allowed */
/* Around kc_compile of a miss: counts the miss and the compile in flight;
 * _end records the latency and counts an overrun of compile_timeout_s. */
void api_metrics_compile_begin(ApiCtx *a);
void api_metrics_compile_end(ApiCtx *a, int64_t duration_us);
/* Counts one body (or import line) refused by the JSON pre-scan; api_handle
 * counts replies flagged json_refused itself. */
void api_metrics_json_refusal(ApiCtx *a);
/* A compiled kernel answered but not stored (the store was full, or the
 * write failed). */
void api_metrics_not_stored(ApiCtx *a);
void h_metrics(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_stats(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);

/* auth.c */
void api_auth_free(ApiAuth *au); /* NULL allowed */

/* keys.c */
void api_keys_free(ApiKeys *k); /* NULL allowed */
void h_keys(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
/* Appends ,"signature":{"key_id","sig"} (nothing without keys) to a meta
 * object being built, before its closing brace. */
void api_sign_meta(ApiCtx *a, KcBuf *meta, const char *kid_hex, const char *obj_hex,
                   const char *wl_hex, const char *symbol);
typedef enum ApiArtifactCheck {
	API_ARTIFACT_OK,       /* serve as stored */
	API_ARTIFACT_RESIGNED, /* *meta was re-signed with the current key */
	API_ARTIFACT_BAD,      /* never serve it; `why` says what failed */
} ApiArtifactCheck;
/* Checks a stored artifact before it is served: meta names kernel_id,
 * SHA-256(object) = meta.object_sha256 (object may be NULL: not checked),
 * and the signature (re-signed when by an older key). */
ApiArtifactCheck api_check_artifact(ApiCtx *a, const KcDigest *kernel_id, KcBuf *meta,
                                    const KcBuf *object, char *why, size_t why_cap);

#endif /* KCS_API_INTERNAL_H */
