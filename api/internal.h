/* internal.h - what the api/ files share: the ApiCtx layout, the handler
 * signature and the JSON reply helpers. Read it as the table of contents of
 * api/: route.c (routing, replies, dispatch, context), handlers.c (health,
 * version, kernel parts, workloads, schedules), compile.c (POST /v1/compile
 * and its singleflight table).
 *
 * Locking: `mu` guards the singleflight list, the recent-graph ring and the
 * counters; nothing else in ApiCtx changes after api_new().
 */
#ifndef KCS_API_INTERNAL_H
#define KCS_API_INTERNAL_H

#include <pthread.h>

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

typedef struct Flight Flight; /* one in-flight compile (compile.c) */

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
	ApiStats stats;
	RecentGraph recent[API_RECENT];
	int recent_next;
};

typedef void (*ApiHandler)(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);

/* route.c */
void api_reply_buf(ApiResponse *resp, int status, const char *content_type, KcBuf *b);
void api_reply_json_buf(ApiResponse *resp, int status, KcBuf *b);
bool api_is_json(const char *content_type);
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
void h_compile(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void api_recent_put(ApiCtx *a, const KcDigest *key, const char *body, size_t len);
char *api_recent_get(ApiCtx *a, const KcDigest *key, size_t *len);

/* handlers.c */
void h_healthz(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_version(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_kernel(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_kernel_object(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_kernel_ir(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_kernel_asm(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_workload(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_schedule_put(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);
void h_schedule_list(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp);

#endif /* KCS_API_INTERNAL_H */
