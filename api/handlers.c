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
	if (kc_ir_to_asm(ir.data, ir.len, &t, &out, &err) != KC_OK) {
		api_reply_kcerr(resp, &err);
		goto done;
	}
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

static KcStatus
bad_schedule(KcErr *err, const char *where, const char *msg)
{
	return kc_fail(err, KC_BAD_SCHEDULE, where, "%s", msg);
}

/* Body (kcs-schedule-v1):
 *   {"format": "kcs-schedule-v1", "workload_key": hex64 (= the path),
 *    "target": str (optional if ?target= is given), "template": str,
 *    "knobs": {...}, "measured": {"seconds": num > 0, "gflops": num >= 0} | null,
 *    "provenance": {"by": str, "at": str, "kcsd_version": str} (optional)}
 * Checks the fields, then the template and knobs with kc_schedule_from_json
 * against the graph of the last compile of this workload seen by this
 * process (NULL graph when there is none), and stores the record under the
 * resolved target name. Builds the stored record into *rec. */
static KcStatus
validate_schedule(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, CompileCtx *c, KcTarget *t,
                  KcBuf *rec, KcErr *err)
{
	KcStatus st = KC_OK;
	KcBuf wl = {0};
	char *knobs_txt = NULL, *graph_body = NULL;
	cJSON *j = cJSON_ParseWithLength(req->body ? req->body : "", req->body_len);
	if (!j) {
		st = kc_fail(err, KC_BAD_JSON, "", "schedule record is not valid JSON");
		goto done;
	}
	if (!cJSON_IsObject(j)) {
		st = bad_schedule(err, "", "schedule record must be a JSON object");
		goto done;
	}
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
	if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, KC_SCHEDULE_FORMAT) != 0) {
		st = bad_schedule(err, "/format", "format must be \"" KC_SCHEDULE_FORMAT "\"");
		goto done;
	}
	const cJSON *wk = cJSON_GetObjectItemCaseSensitive(j, "workload_key");
	KcDigest key;
	if (!cJSON_IsString(wk) || !kc_digest_parse(wk->valuestring, &key) ||
	    memcmp(key.b, m->id.b, sizeof key.b) != 0) {
		st = bad_schedule(err, "/workload_key",
		                  "workload_key must be the 64-hex key given in the path");
		goto done;
	}
	KcErr werr = {0};
	st = cache_get_workload(a->cache, &m->id, &wl, &werr);
	if (st == KC_NOT_FOUND) {
		st = kc_fail(err, KC_NOT_FOUND, "/workload_key",
		             "unknown workload: compile it once before storing a schedule");
		goto done;
	}
	if (st != KC_OK) {
		*err = werr;
		goto done;
	}
	char tbuf[1024];
	const char *tq = api_query_target(req, tbuf, sizeof tbuf);
	const cJSON *tj = cJSON_GetObjectItemCaseSensitive(j, "target");
	if (tj && !cJSON_IsString(tj)) {
		st = bad_schedule(err, "/target", "target must be a string");
		goto done;
	}
	const char *tname = tq ? tq : tj ? tj->valuestring : NULL;
	if (!tname) {
		st = bad_schedule(err, "/target", "a target is required (?target= or \"target\")");
		goto done;
	}
	st = kc_target_resolve(tname, t, err);
	if (st != KC_OK) {
		st = kc_fail(err, st, tq ? "?target" : "/target", "%s", kc_status_text(st));
		if (!err->where[0])
			snprintf(err->where, sizeof err->where, tq ? "?target" : "/target");
		goto done;
	}
	if (tq && tj) {
		KcTarget t2;
		KcErr e2 = {0};
		if (kc_target_resolve(tj->valuestring, &t2, &e2) != KC_OK ||
		    strcmp(t2.name, t->name) != 0) {
			st = bad_schedule(err, "/target", "target differs from ?target=");
			goto done;
		}
	}
	const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(j, "template");
	if (!cJSON_IsString(tpl)) {
		st = bad_schedule(err, "/template", "template must be a string");
		goto done;
	}
	const cJSON *knobs = cJSON_GetObjectItemCaseSensitive(j, "knobs");
	if (!cJSON_IsObject(knobs)) {
		st = bad_schedule(err, "/knobs", "knobs must be an object");
		goto done;
	}
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "measured");
	if (ms && !cJSON_IsNull(ms)) {
		const cJSON *sec = cJSON_GetObjectItemCaseSensitive(ms, "seconds");
		const cJSON *gf = cJSON_GetObjectItemCaseSensitive(ms, "gflops");
		if (!cJSON_IsObject(ms) || !cJSON_IsNumber(sec) || !(sec->valuedouble > 0) ||
		    (gf && !cJSON_IsNull(gf) && (!cJSON_IsNumber(gf) || gf->valuedouble < 0))) {
			st = bad_schedule(err, "/measured",
			                  "measured must be null or {\"seconds\": > 0, "
			                  "\"gflops\": >= 0}");
			goto done;
		}
	}
	const cJSON *pv = cJSON_GetObjectItemCaseSensitive(j, "provenance");
	if (pv && !cJSON_IsNull(pv)) {
		static const char *const fields[] = {"by", "at", "kcsd_version"};
		bool ok = cJSON_IsObject(pv);
		for (size_t i = 0; ok && i < sizeof fields / sizeof fields[0]; i++) {
			const cJSON *f = cJSON_GetObjectItemCaseSensitive(pv, fields[i]);
			ok = !f || cJSON_IsString(f);
		}
		if (!ok) {
			st = bad_schedule(err, "/provenance",
			                  "provenance must be an object of strings "
			                  "(by, at, kcsd_version)");
			goto done;
		}
	}

	/* The knobs, checked by the compiler against the workload's graph when
	 * this process has seen it. */
	KcGraph *g = NULL;
	size_t glen = 0;
	graph_body = api_recent_get(a, &m->id, &glen);
	if (graph_body) {
		KcErr gerr = {0};
		if (kc_parse(c, graph_body, glen, &a->cfg.limits, &g, &gerr) != KC_OK)
			g = NULL;
	}
	knobs_txt = cJSON_PrintUnformatted(knobs);
	KcSchedule *s = NULL;
	st = kc_schedule_from_json(c, g, t, tpl->valuestring, knobs_txt, &s, err);
	if (st != KC_OK) {
		st = kc_fail(err, st, "/knobs", "%s", kc_status_text(st));
		if (!err->where[0])
			snprintf(err->where, sizeof err->where, "/knobs");
		goto done;
	}

	char hex[65];
	kc_digest_hex(&m->id, hex);
	kc_buf_printf(
	    rec, "{\"format\":\"%s\",\"workload_key\":\"%s\",\"target\":", KC_SCHEDULE_FORMAT, hex);
	api_json_str(rec, t->name);
	kc_buf_puts(rec, ",\"template\":");
	api_json_str(rec, kc_schedule_template(s));
	kc_buf_puts(rec, ",\"knobs\":");
	const char *canon = kc_schedule_knobs_json(s);
	kc_buf_puts(rec, canon && *canon ? canon : "{}");
	kc_buf_puts(rec, ",\"measured\":");
	if (ms && cJSON_IsObject(ms)) {
		char *txt = cJSON_PrintUnformatted(ms);
		kc_buf_puts(rec, txt);
		cJSON_free(txt);
	} else {
		kc_buf_puts(rec, "null");
	}
	kc_buf_puts(rec, ",\"provenance\":");
	if (pv && cJSON_IsObject(pv)) {
		char *txt = cJSON_PrintUnformatted(pv);
		kc_buf_puts(rec, txt);
		cJSON_free(txt);
	} else {
		char at[32];
		kc_iso8601(kc_wall_s(), at);
		kc_buf_printf(rec, "{\"by\":\"unknown\",\"at\":\"%s\",\"kcsd_version\":\"%s\"}", at,
		              KCSD_VERSION);
	}
	kc_buf_putc(rec, '}');
done:
	cJSON_free(knobs_txt);
	free(graph_body);
	kc_buf_free(&wl);
	cJSON_Delete(j);
	return st;
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
	if (validate_schedule(a, m, req, c, &t, &rec, &err) != KC_OK) {
		api_reply_kcerr(resp, &err);
		goto done;
	}
	KcErr gerr = {0};
	bool existed = cache_get_schedule(a->cache, &m->id, t.name, &old, &gerr) == KC_OK;
	if (cache_put_schedule(a->cache, &m->id, t.name, rec.data, rec.len, &err) != KC_OK) {
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
