/* dump.c - GET /v1/kernels/{id}/dump?pass=P[,P...]: the pass dumps of a
 * stored kernel, compiled again.
 *
 * No dump is stored. The handler rebuilds what the kernel was made from,
 * compiles it on its worker thread with KcCompileOptions.dump set, and
 * answers the sections asked for, as text, in pipeline order, each under
 * its "== name ==" header (compiler/passes.def names them). The target,
 * schedule and kernel name come from the kernel's signed metadata. The
 * graph is the body this process last compiled for the workload while the
 * recent-graph ring still holds it (tensors named as the client named
 * them), else the stored canonical form (kc_parse_workload: tensors i<k>,
 * n<k>.<j>), which every stored or imported kernel has. That compile need
 * not give the stored object again (another kcsd build compiled it, or a
 * body with its ops in another order did), so the reply says whether it
 * did: header X-Kcsd-Dump-Object: same | differs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"

#define DEFAULT_MAX_DUMP ((size_t)16 << 20)

/* "graph, lower, ..." (passes.def order). */
static void
pass_list(char *out, size_t cap)
{
	size_t n = 0;
	out[0] = 0;
	for (int p = 0; p < KC_PASS_COUNT && n < cap; p++)
		n += (size_t)snprintf(out + n, cap - n, "%s%s", p ? ", " : "", kc_pass_name(p));
}

/* ?pass=P[,P...] as a KcCompileOptions.dump_passes mask (repeats allowed).
 * False with *resp filled (400, where "?pass") when it is absent or empty
 * or names a pass that does not exist. */
static bool
parse_passes(const char *q, unsigned *mask, ApiResponse *resp)
{
	char valid[160], msg[320];
	pass_list(valid, sizeof valid);
	*mask = 0;
	if (!q || !*q) {
		snprintf(msg, sizeof msg, "pass is required: one or more of %s, comma-separated",
		         valid);
		api_reply_error(resp, KC_BAD_REQUEST, "?pass", msg);
		return false;
	}
	for (const char *p = q;; p++) {
		size_t len = strcspn(p, ",");
		KcPass k = kc_pass_lookup(p, len);
		if (k == KC_PASS_COUNT) {
			snprintf(msg, sizeof msg, "unknown pass '%.*s'; valid passes: %s",
			         (int)(len < 64 ? len : 64), p, valid);
			api_reply_error(resp, KC_BAD_REQUEST, "?pass", msg);
			return false;
		}
		*mask |= 1u << k;
		p += len;
		if (!*p)
			return true;
	}
}

/* The pass whose section takes the dump past `limit` bytes, or
 * KC_PASS_COUNT when it fits. The dump holds the passes of `mask`, in
 * order, each from its header (written by kc_compile) to the next. */
static KcPass
crossing_pass(const KcBuf *d, unsigned mask, size_t limit)
{
	KcPass cross = KC_PASS_COUNT;
	size_t from = 0;
	if (d->len <= limit)
		return KC_PASS_COUNT;
	for (int p = 0; p < KC_PASS_COUNT; p++) {
		if (!(mask >> p & 1))
			continue;
		/* the first section starts the dump; the others start a line */
		char hdr[64];
		bool first = cross == KC_PASS_COUNT;
		snprintf(hdr, sizeof hdr, "%s== %s ==\n", first ? "" : "\n", kc_pass_name(p));
		const char *h = first ? d->data : strstr(d->data + from, hdr);
		KC_ASSERT(h && strncmp(h, hdr, strlen(hdr)) == 0);
		size_t start = (size_t)(h - d->data) + (first ? 0 : 1);
		if (start > limit)
			break;
		cross = (KcPass)p;
		from = start;
	}
	return cross;
}

/* The string at key in object o, or NULL. */
static const char *
str_at(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The graph named `name` of workload `wkey`: the body last compiled for it
 * in this process when it has that name, else the stored canonical form.
 * *text gets what it was read from, for the worker to read again (*is_body:
 * a composite body, else the canonical form). */
static KcStatus
rebuild_graph(ApiCtx *a, CompileCtx *c, const KcDigest *wkey, const char *name, KcGraph **g,
              KcBuf *text, bool *is_body, KcErr *err)
{
	size_t len = 0;
	char *body = api_recent_get(a, wkey, &len);
	KcErr perr = {0};
	KcStatus st;

	*g = NULL;
	if (body && (kc_parse(c, body, len, &a->cfg.limits, g, &perr) != KC_OK ||
	             strcmp(kc_graph_name(*g), name) != 0))
		*g = NULL;
	if (*g) {
		kc_buf_append(text, body, len);
		free(body);
		*is_body = true;
		return KC_OK;
	}
	free(body);
	*is_body = false;
	st = cache_get_workload(a->cache, wkey, text, err);
	if (st == KC_NOT_FOUND)
		st = kc_fail(err, KC_CACHE, "", "the kernel's workload is not stored");
	if (st == KC_OK)
		st = kc_parse_workload(c, text->data, text->len, name, &a->cfg.limits, g, err);
	return st;
}

void
h_kernel_dump(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	KcBuf meta = {0}, dump = {0}, text = {0};
	KcErr err = {0};
	KcArtifact art = {0};
	KcJobResult res = {0};
	CompileCtx *c = NULL;
	cJSON *j = NULL;
	char *knobs = NULL;
	char why[320];
	unsigned mask;
	KcTarget t;
	KcDigest wkey;

	if (!parse_passes(api_query(req, "pass"), &mask, resp))
		return;
	KcStatus st = cache_get_part(a->cache, &m->id, CACHE_PART_META, &meta, &err);
	if (st != KC_OK) {
		if (st == KC_NOT_FOUND)
			api_reply_error(resp, KC_NOT_FOUND, NULL, "no such kernel");
		else
			api_reply_kcerr(resp, &err);
		goto done;
	}
	/* what is compiled comes from the metadata: only signed metadata */
	if (api_check_artifact(a, &m->id, &meta, NULL, why, sizeof why) == API_ARTIFACT_BAD) {
		kc_log(KC_LOG_ERROR, "refusing to dump a stored artifact: %s", why);
		api_reply_error(resp, KC_CACHE, NULL, why);
		goto done;
	}
	j = cJSON_ParseWithLength(meta.data, meta.len);
	const cJSON *sched = cJSON_GetObjectItemCaseSensitive(j, "schedule");
	const cJSON *kj = cJSON_GetObjectItemCaseSensitive(sched, "knobs");
	const char *wk = str_at(j, "workload_key"), *name = str_at(j, "name");
	const char *tpl = str_at(sched, "template"), *obj_sha = str_at(j, "object_sha256");
	if (!wk || !kc_digest_parse(wk, &wkey) || !name || !tpl || !cJSON_IsObject(kj) ||
	    !obj_sha || !api_target_from_meta(meta.data, meta.len, &t)) {
		api_reply_error(resp, KC_CACHE, NULL,
		                "stored kernel metadata lacks what a compile needs");
		goto done;
	}

	c = compile_ctx_new();
	KcGraph *g = NULL;
	KcSchedule *s = NULL;
	knobs = cJSON_PrintUnformatted(kj);
	bool is_body = false;
	if (rebuild_graph(a, c, &wkey, name, &g, &text, &is_body, &err) != KC_OK ||
	    kc_schedule_from_json(c, g, &t, tpl, knobs, &s, &err) != KC_OK) {
		api_reply_kcerr(resp, &err);
		goto done;
	}
	/* checked here, compiled in a worker: the same text, schedule, target */
	KcJob job = {
	    .kind = KC_JOB_COMPILE,
	    .body = is_body ? text.data : NULL,
	    .body_len = is_body ? text.len : 0,
	    .canonical = is_body ? NULL : text.data,
	    .canonical_len = is_body ? 0 : text.len,
	    .name = name,
	    .limits = a->cfg.limits,
	    .template_name = kc_schedule_template(s),
	    .knobs = kc_schedule_knobs_json(s),
	    .linker = a->cfg.linker,
	    .want_dump = true,
	    .dump_passes = mask,
	    .target = t,
	};
	if (api_run_job(a, &job, &res, &err) != KC_OK) {
		api_reply_kcerr(resp, &err);
		goto done;
	}
	kc_buf_free(&dump);
	dump = res.dump;
	res.dump = (KcBuf){0};
	art = res.art;
	res.art = (KcArtifact){0};

	size_t limit = a->cfg.max_dump_bytes ? a->cfg.max_dump_bytes : DEFAULT_MAX_DUMP;
	KcPass cross = crossing_pass(&dump, mask, limit);
	if (cross != KC_PASS_COUNT) {
		char msg[320];
		snprintf(msg, sizeof msg,
		         "the %s section takes the dump past max_dump_bytes (%zu bytes; the "
		         "sections asked for are %zu)",
		         kc_pass_name(cross), limit, dump.len);
		api_reply_error(resp, KC_TOO_LARGE, "?pass", msg);
		goto done;
	}
	KcDigest od;
	char od_hex[65];
	kc_sha256(art.object, art.object_len, &od);
	kc_digest_hex(&od, od_hex);
	api_reply_buf(resp, 200, "text/plain; charset=utf-8", &dump);
	resp->header_name = "X-Kcsd-Dump-Object";
	snprintf(resp->header_value, sizeof resp->header_value, "%s",
	         strcmp(od_hex, obj_sha) == 0 ? "same" : "differs");
done:
	kc_artifact_free(&art);
	kc_job_result_free(&res);
	kc_buf_free(&text);
	cJSON_free(knobs);
	cJSON_Delete(j);
	compile_ctx_free(c);
	kc_buf_free(&meta);
	kc_buf_free(&dump);
}
