/* handlers.c - every route except POST /v1/compile: health, version, the
 * stored parts of a kernel, workloads and tuned schedule records.
 *
 * Reads go straight to the cache (one short LMDB read transaction each) and
 * may run on an HTTP thread. Two handlers may block and are flagged so in
 * routes.def: the assembly view (LLVM codegen from the stored IR, done
 * lazily and then stored) and the schedule PUT (an LMDB write).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"
#include "version.h"

void
h_healthz(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)a, (void)m, (void)req;
	KcBuf b = {0};
	kc_buf_puts(&b, "{\"status\":\"ok\"}\n");
	api_reply_json_buf(resp, 200, &b);
}

void
h_version(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)m, (void)req;
	KcBuf b = {0};
	ApiStats st;
	api_stats(a, &st);
	kc_buf_printf(&b, "{\"kcsd_version\":\"%s\",\"build_id\":\"%s\",\"llvm_version\":",
	              KCSD_VERSION, KCSD_BUILD_ID);
	api_json_str(&b, kc_llvm_version());
	kc_buf_puts(&b, ",\"host_target\":");
	if (a->host_ok)
		api_json_str(&b, a->host.name);
	else
		kc_buf_puts(&b, "null");
	kc_buf_printf(&b,
	              ",\"abi\":\"%s\",\"auth\":\"%s\",\"stats\":{\"compiles\":%llu,\"hits\":%llu,"
	              "\"coalesced\":%llu,\"failures\":%llu}}\n",
	              KC_CPU_ABI, api_auth_mode(a), (unsigned long long)st.compiles,
	              (unsigned long long)st.hits, (unsigned long long)st.coalesced,
	              (unsigned long long)st.failures);
	api_reply_json_buf(resp, 200, &b);
}

/* Answers one stored part of a kernel, or 404. */
static void
reply_part(ApiCtx *a, const KcDigest *id, CachePart part, const char *content_type,
           const char *what, ApiResponse *resp)
{
	KcBuf b = {0};
	KcErr err = {0};
	KcStatus st = cache_get_part(a->cache, id, part, &b, &err);
	if (st == KC_OK) {
		api_reply_buf(resp, 200, content_type, &b);
		return;
	}
	kc_buf_free(&b);
	if (st == KC_NOT_FOUND)
		api_reply_error(resp, KC_NOT_FOUND, NULL, what);
	else
		api_reply_kcerr(resp, &err);
}

/* Metadata (and the object when `want_object`) of a stored kernel, checked
 * end to end (api_check_artifact) before any of it is served: a stored
 * object that is not the one its signed metadata names is a 500, never
 * its bytes. Metadata signed by an older key is re-signed in the reply. */
static void
reply_checked(ApiCtx *a, const KcDigest *id, bool want_object, ApiResponse *resp)
{
	KcBuf meta = {0}, obj = {0};
	KcErr err = {0};
	char why[320];
	KcStatus st = cache_get_part(a->cache, id, CACHE_PART_META, &meta, &err);
	if (st == KC_OK && want_object)
		st = cache_get_part(a->cache, id, CACHE_PART_OBJECT, &obj, &err);
	if (st != KC_OK) {
		if (st == KC_NOT_FOUND)
			api_reply_error(resp, KC_NOT_FOUND, NULL, "no such kernel");
		else
			api_reply_kcerr(resp, &err);
		goto done;
	}
	if (api_check_artifact(a, id, &meta, want_object ? &obj : NULL, why, sizeof why) ==
	    API_ARTIFACT_BAD) {
		kc_log(KC_LOG_ERROR, "refusing to serve a stored artifact: %s", why);
		api_reply_error(resp, KC_CACHE, NULL, why);
		goto done;
	}
	if (want_object)
		api_reply_buf(resp, 200, "application/octet-stream", &obj);
	else
		api_reply_json_buf(resp, 200, &meta);
done:
	kc_buf_free(&meta);
	kc_buf_free(&obj);
}

void
h_kernel(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)req;
	reply_checked(a, &m->id, false, resp);
}

void
h_kernel_object(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)req;
	reply_checked(a, &m->id, true, resp);
}

void
h_kernel_ir(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)req;
	reply_part(a, &m->id, CACHE_PART_IR, "text/plain; charset=utf-8",
	           "no such kernel, or no IR stored for it", resp);
}

/* Meta "target": {"name": str, "triple": str, "cpu": str, "features": str} */
bool
api_target_from_meta(const char *meta, size_t len, KcTarget *t)
{
	cJSON *j = cJSON_ParseWithLength(meta, len);
	const cJSON *tj = cJSON_GetObjectItemCaseSensitive(j, "target");
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(tj, "name");
	const cJSON *triple = cJSON_GetObjectItemCaseSensitive(tj, "triple");
	const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(tj, "cpu");
	const cJSON *feat = cJSON_GetObjectItemCaseSensitive(tj, "features");
	bool ok = cJSON_IsString(name) && cJSON_IsString(triple) && cJSON_IsString(cpu) &&
	          cJSON_IsString(feat);
	if (ok) {
		memset(t, 0, sizeof *t);
		snprintf(t->name, sizeof t->name, "%s", name->valuestring);
		snprintf(t->triple, sizeof t->triple, "%s", triple->valuestring);
		snprintf(t->cpu, sizeof t->cpu, "%s", cpu->valuestring);
		snprintf(t->features, sizeof t->features, "%s", feat->valuestring);
		/* the table's columns (vector width, native half, ...) from the
		 * stored triple, cpu and features, as the resolver set them */
		KcErr err = {0};
		ok = kc_target_fill(t, &err) == KC_OK;
	}
	cJSON_Delete(j);
	return ok;
}

void
h_kernel_asm(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)req;
	KcBuf out = {0}, ir = {0}, meta = {0};
	KcErr err = {0};
	KcTarget t;
	KcStatus st = cache_get_part(a->cache, &m->id, CACHE_PART_ASM, &out, &err);
	if (st == KC_OK) {
		api_reply_buf(resp, 200, "text/plain; charset=utf-8", &out);
		return;
	}
	kc_buf_free(&out);
	memset(&err, 0, sizeof err);
	st = cache_get_part(a->cache, &m->id, CACHE_PART_META, &meta, &err);
	if (st == KC_OK)
		st = cache_get_part(a->cache, &m->id, CACHE_PART_IR, &ir, &err);
	if (st != KC_OK) {
		if (st == KC_NOT_FOUND)
			api_reply_error(resp, KC_NOT_FOUND, NULL,
			                "no such kernel, or no IR stored for it");
		else
			api_reply_kcerr(resp, &err);
		goto done;
	}
	if (!api_target_from_meta(meta.data, meta.len, &t)) {
		api_reply_error(resp, KC_CACHE, NULL, "stored kernel metadata has no target");
		goto done;
	}
	/* stored IR is LLVM's input: a worker's business, like a compile */
	KcJob job = {.kind = KC_JOB_ASM, .ir = ir.data, .ir_len = ir.len, .target = t};
	KcJobResult res;
	if (api_run_job(a, &job, &res, &err) != KC_OK) {
		api_reply_kcerr(resp, &err);
		goto done;
	}
	kc_buf_append(&out, res.text.data, res.text.len);
	kc_job_result_free(&res);
	KcErr perr = {0};
	if (cache_put_part(a->cache, &m->id, CACHE_PART_ASM, out.data, out.len, &perr) != KC_OK)
		kc_log(KC_LOG_WARN, "assembly not stored: %s", perr.msg);
	api_reply_buf(resp, 200, "text/plain; charset=utf-8", &out);
done:
	kc_buf_free(&out);
	kc_buf_free(&ir);
	kc_buf_free(&meta);
}

void
h_workload(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)req;
	KcBuf b = {0};
	KcErr err = {0};
	KcStatus st = cache_get_workload(a->cache, &m->id, &b, &err);
	if (st == KC_OK) {
		api_reply_json_buf(resp, 200, &b);
		return;
	}
	kc_buf_free(&b);
	if (st == KC_NOT_FOUND)
		api_reply_error(resp, KC_NOT_FOUND, NULL, "no such workload");
	else
		api_reply_kcerr(resp, &err);
}

void
h_schedule_list(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)req;
	KcBuf b = {0}, wl = {0};
	KcErr err = {0};
	KcStatus st = cache_get_workload(a->cache, &m->id, &wl, &err);
	kc_buf_free(&wl);
	if (st == KC_NOT_FOUND) {
		api_reply_error(resp, KC_NOT_FOUND, NULL, "no such workload");
		return;
	}
	kc_buf_puts(&b, "{\"records\":");
	if (st != KC_OK || cache_list_schedules(a->cache, &m->id, &b, &err) != KC_OK) {
		kc_buf_free(&b);
		api_reply_kcerr(resp, &err);
		return;
	}
	kc_buf_puts(&b, "}\n");
	api_reply_json_buf(resp, 200, &b);
}

void
api_default_provenance(const char *by, char *buf, size_t cap)
{
	char at[32];
	kc_iso8601(kc_wall_s(), at);
	snprintf(buf, cap, "{\"by\":\"%s\",\"at\":\"%s\",\"kcsd_version\":\"%s\"}", by, at,
	         KCSD_VERSION);
}

/* A record is stored next to the workload it tunes, so that workload must
 * be known (stored by an earlier compile). */
static KcStatus
workload_known(void *arg, const KcDigest *key, KcErr *err)
{
	ApiCtx *a = arg;
	KcBuf wl = {0};
	KcErr werr = {0};
	KcStatus st = cache_get_workload(a->cache, key, &wl, &werr);
	kc_buf_free(&wl);
	if (st == KC_NOT_FOUND)
		return kc_fail(err, KC_NOT_FOUND, "/workload_key",
		               "unknown workload: compile it once before storing a schedule");
	if (st != KC_OK)
		*err = werr;
	return st;
}

/* Body: a kcs-schedule-v1 record (compiler.h) whose workload_key is the
 * path's, for ?target= or its "target". kc_schedule_record_check checks it,
 * its template and knobs against the graph of the last compile of this
 * workload seen by this process (none: against the template and target
 * only). Builds the record to store into *rec. */
static KcStatus
validate_schedule(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, CompileCtx *c, KcTarget *t,
                  KcBuf *rec, KcErr *err)
{
	char tbuf[1024], prov[192];
	size_t glen = 0;
	KcGraph *g = NULL;
	KcScheduleRecord r;
	char *graph_body = api_recent_get(a, &m->id, &glen);
	if (graph_body) {
		KcErr gerr = {0};
		if (kc_parse(c, graph_body, glen, &a->cfg.limits, &g, &gerr) != KC_OK)
			g = NULL;
	}
	KcRecordCheck chk = {
	    .where = "",
	    .workload_key = &m->id,
	    .key_from = "the path",
	    .key_known = workload_known,
	    .key_known_arg = a,
	    .target_query = api_query_target(req, tbuf, sizeof tbuf),
	    .takes_query = true,
	    .graph = g,
	};
	KcStatus st = kc_schedule_record_check(c, req->body, req->body_len, &chk, &r, err);
	free(graph_body);
	if (st != KC_OK)
		return st;
	if (!r.provenance) {
		api_default_provenance("unknown", prov, sizeof prov);
		r.provenance = prov;
	}
	*t = r.target;
	kc_schedule_record_print(&r, rec);
	return KC_OK;
}

void
h_schedule_put(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	KcErr err = {0};
	KcBuf rec = {0}, old = {0};
	KcTarget t;
	CompileCtx *c = NULL;
	if (!api_is_json(req->content_type)) {
		api_reply_error(resp, KC_MEDIA_TYPE, NULL, "Content-Type must be application/json");
		return;
	}
	c = compile_ctx_new();
	if (api_json_scan(a, req->body, req->body_len, &err) != KC_OK ||
	    validate_schedule(a, m, req, c, &t, &rec, &err) != KC_OK) {
		api_reply_kcerr(resp, &err);
		goto done;
	}
	KcErr gerr = {0};
	bool existed = cache_get_schedule(a->cache, &m->id, t.name, &old, &gerr) == KC_OK;
	KcStatus st = cache_put_schedule(a->cache, &m->id, t.name, rec.data, rec.len, &err);
	if (st == KC_NOT_FOUND) /* evicted since workload_known looked */
		kc_fail(&err, KC_NOT_FOUND, "/workload_key",
		        "unknown workload: compile it once before storing a schedule");
	if (st != KC_OK) {
		api_reply_kcerr(resp, &err);
		goto done;
	}
	kc_buf_putc(&rec, '\n');
	api_reply_json_buf(resp, existed ? 200 : 201, &rec);
done:
	kc_buf_free(&rec);
	kc_buf_free(&old);
	compile_ctx_free(c);
}
