/* compile.c - POST /v1/compile: parse, key, look up, compile once, store.
 *
 * The one idea: a kernel is identified before it is built. The request is
 * parsed and reduced to (workload_key, target, schedule) and so to a
 * kernel_id; a hit answers from the stored metadata JSON by string splicing
 * (no LLVM, no re-parse). A miss goes through the singleflight table: the
 * first request for a kernel_id compiles it (the leader), every concurrent
 * request for the same id waits on the condition variable and then reads
 * the cache. The leader's error, if any, is handed to its waiters.
 *
 * Stored meta part: the response without "cache", "request_ms" and
 * "object_base64"; those three are appended per request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"
#include "version.h"

/* A compile in progress. `refs` counts the leader and its waiters; the last
 * one to let go frees it. Guarded by ApiCtx.mu. */
struct Flight {
	Flight *next;
	KcDigest id;
	bool done;
	KcErr err; /* the leader's outcome (status KC_OK on success) */
	int refs;
};

/* The schedule chosen for a request and where it came from. */
typedef struct Chosen {
	KcSchedule *s;
	const char *source; /* "default" or "tuned" */
	char *measured;     /* JSON text or NULL (null), malloc'd */
	char *provenance;   /* JSON text or NULL, malloc'd */
} Chosen;

/* ---- singleflight ------------------------------------------------------- */

/* Joins the flight for `id`, creating it if there is none. Returns true if
 * the caller is the leader (and must call flight_land), false if it must
 * call flight_wait. */
static bool
flight_join(ApiCtx *a, const KcDigest *id, Flight **out)
{
	pthread_mutex_lock(&a->mu);
	for (Flight *f = a->flights; f; f = f->next) {
		if (memcmp(f->id.b, id->b, sizeof id->b) == 0) {
			f->refs++;
			*out = f;
			pthread_mutex_unlock(&a->mu);
			return false;
		}
	}
	Flight *f = kc_xcalloc(1, sizeof *f);
	f->id = *id;
	f->refs = 1;
	f->next = a->flights;
	a->flights = f;
	*out = f;
	pthread_mutex_unlock(&a->mu);
	return true;
}

static void
flight_release_locked(ApiCtx *a, Flight *f)
{
	(void)a;
	if (--f->refs == 0)
		free(f);
}

/* The leader lands: unlinks the flight, records the outcome, wakes waiters. */
static void
flight_land(ApiCtx *a, Flight *f, const KcErr *err)
{
	if (!f)
		return;
	pthread_mutex_lock(&a->mu);
	for (Flight **p = &a->flights; *p; p = &(*p)->next) {
		if (*p == f) {
			*p = f->next;
			break;
		}
	}
	f->done = true;
	if (err)
		f->err = *err;
	pthread_cond_broadcast(&a->cv);
	flight_release_locked(a, f);
	pthread_mutex_unlock(&a->mu);
}

/* Waits for the leader; copies its outcome into *err. */
static KcStatus
flight_wait(ApiCtx *a, Flight *f, KcErr *err)
{
	pthread_mutex_lock(&a->mu);
	while (!f->done)
		pthread_cond_wait(&a->cv, &a->mu);
	*err = f->err;
	flight_release_locked(a, f);
	pthread_mutex_unlock(&a->mu);
	return err->status;
}

/* ---- recent graphs (for PUT /v1/schedules validation) ------------------- */

void
api_recent_put(ApiCtx *a, const KcDigest *key, const char *body, size_t len)
{
	if (len == 0 || len > API_RECENT_MAX_BYTES)
		return;
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < API_RECENT; i++) {
		if (a->recent[i].body && memcmp(a->recent[i].key.b, key->b, sizeof key->b) == 0) {
			pthread_mutex_unlock(&a->mu);
			return;
		}
	}
	RecentGraph *r = &a->recent[a->recent_next];
	a->recent_next = (a->recent_next + 1) % API_RECENT;
	free(r->body);
	r->key = *key;
	r->body = kc_xmalloc(len + 1);
	memcpy(r->body, body, len);
	r->body[len] = 0;
	r->len = len;
	pthread_mutex_unlock(&a->mu);
}

char *
api_recent_get(ApiCtx *a, const KcDigest *key, size_t *len)
{
	char *copy = NULL;
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < API_RECENT; i++) {
		RecentGraph *r = &a->recent[i];
		if (r->body && memcmp(r->key.b, key->b, sizeof key->b) == 0) {
			copy = kc_xmalloc(r->len + 1);
			memcpy(copy, r->body, r->len + 1);
			*len = r->len;
			break;
		}
	}
	pthread_mutex_unlock(&a->mu);
	return copy;
}

/* ---- schedule choice ---------------------------------------------------- */

/* A stored record (kcs-schedule-v1, validated when it was PUT):
 *   {"template": str, "knobs": {...}, "measured": {...}|null,
 *    "provenance": {...}, ...}
 * Falls back to the default schedule if there is none or it no longer
 * applies to this graph. */
static void
choose_schedule(ApiCtx *a, CompileCtx *c, const KcGraph *g, const KcTarget *t, const KcWorkload *wl,
                Chosen *out)
{
	KcBuf rec = {0};
	KcErr err = {0};
	memset(out, 0, sizeof *out);
	if (cache_get_schedule(a->cache, &wl->key, t->name, &rec, &err) == KC_OK) {
		cJSON *j = cJSON_ParseWithLength(rec.data, rec.len);
		const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(j, "template");
		const cJSON *knobs = cJSON_GetObjectItemCaseSensitive(j, "knobs");
		char *knobs_txt = cJSON_IsObject(knobs) ? cJSON_PrintUnformatted(knobs) : NULL;
		KcErr serr = {0};
		if (cJSON_IsString(tpl) && knobs_txt &&
		    kc_schedule_from_json(c, g, t, tpl->valuestring, knobs_txt, &out->s, &serr) ==
		        KC_OK) {
			const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "measured");
			const cJSON *pv = cJSON_GetObjectItemCaseSensitive(j, "provenance");
			out->source = "tuned";
			if (cJSON_IsObject(ms))
				out->measured = cJSON_PrintUnformatted(ms);
			if (cJSON_IsObject(pv))
				out->provenance = cJSON_PrintUnformatted(pv);
		} else {
			out->s = NULL;
			kc_log(KC_LOG_WARN,
			       "stored schedule for target %s does not apply (%s); "
			       "using the default",
			       t->name, serr.msg);
		}
		free(knobs_txt);
		cJSON_Delete(j);
	}
	kc_buf_free(&rec);
	if (!out->s) {
		out->s = kc_schedule_default(c, g, t);
		out->source = "default";
	}
}

static void
chosen_free(Chosen *ch)
{
	cJSON_free(ch->measured);
	cJSON_free(ch->provenance);
}

/* ---- responses ---------------------------------------------------------- */

/* Appends `meta` (a JSON object) without its closing brace, then the
 * per-request fields, into *resp. */
static void
reply_spliced(ApiResponse *resp, const char *meta, size_t meta_len, const char *cache, int64_t t0,
              const void *object, size_t object_len)
{
	KcBuf b = {0};
	while (meta_len > 0 && meta[meta_len - 1] != '}')
		meta_len--;
	KC_ASSERT(meta_len > 1);
	size_t b64_len = 0;
	char *b64 = kc_base64(object, object_len, &b64_len);
	kc_buf_append(&b, meta, meta_len - 1);
	kc_buf_printf(&b, ",\"cache\":\"%s\",\"request_ms\":%.3f,\"object_base64\":\"", cache,
	              api_ms_since(t0));
	kc_buf_append(&b, b64, b64_len);
	kc_buf_puts(&b, "\"}\n");
	free(b64);
	api_reply_json_buf(resp, 200, &b);
	resp->cache = cache;
}

/* Answers from the cache if both the meta and object parts are there and
 * pass the end-to-end check (api_check_artifact): an object that is not
 * the one its metadata names is a miss (compiled again and overwritten),
 * never served. Metadata signed by an older key is re-signed and stored. */
static bool
reply_cached(ApiCtx *a, const KcDigest *kid, int64_t t0, ApiResponse *resp)
{
	KcBuf meta = {0}, obj = {0};
	KcErr err = {0};
	char why[320];
	bool ok = cache_get_part(a->cache, kid, CACHE_PART_META, &meta, &err) == KC_OK &&
	          cache_get_part(a->cache, kid, CACHE_PART_OBJECT, &obj, &err) == KC_OK &&
	          meta.len > 2;
	if (err.status != KC_OK && err.status != KC_NOT_FOUND)
		kc_log(KC_LOG_WARN, "cache read: %s", err.msg);
	if (ok) {
		switch (api_check_artifact(a, kid, &meta, &obj, why, sizeof why)) {
		case API_ARTIFACT_OK: break;
		case API_ARTIFACT_RESIGNED: {
			KcErr perr = {0};
			if (cache_put_part(a->cache, kid, CACHE_PART_META, meta.data, meta.len,
			                   &perr) != KC_OK)
				kc_log(KC_LOG_WARN, "re-signed metadata not stored: %s", perr.msg);
			break;
		}
		case API_ARTIFACT_BAD:
			kc_log(KC_LOG_ERROR, "stored artifact refused, compiling again: %s", why);
			ok = false;
			break;
		}
	}
	if (ok)
		reply_spliced(resp, meta.data, meta.len, "hit", t0, obj.data, obj.len);
	kc_buf_free(&meta);
	kc_buf_free(&obj);
	return ok;
}

static void
put_target(KcBuf *b, const KcTarget *t)
{
	kc_buf_puts(b, "{\"name\":");
	api_json_str(b, t->name);
	kc_buf_puts(b, ",\"triple\":");
	api_json_str(b, t->triple);
	kc_buf_puts(b, ",\"cpu\":");
	api_json_str(b, t->cpu);
	kc_buf_puts(b, ",\"features\":");
	api_json_str(b, t->features);
	kc_buf_putc(b, '}');
}

static void
put_args(KcBuf *b, const KcGraph *g)
{
	int n = kc_graph_nargs(g);
	kc_buf_putc(b, '[');
	for (int i = 0; i < n; i++) {
		KcArgInfo ai;
		kc_graph_arg(g, i, &ai);
		kc_buf_printf(b, "%s{\"index\":%d,\"role\":\"%s\",\"tensor_name\":", i ? "," : "",
		              ai.index, ai.is_output ? "output" : "input");
		api_json_str(b, ai.tensor_name ? ai.tensor_name : "");
		kc_buf_puts(b, ",\"dtype\":");
		api_json_str(b, ai.dtype ? ai.dtype : "");
		kc_buf_puts(b, ",\"shape\":[");
		for (int d = 0; d < ai.rank; d++)
			kc_buf_printf(b, "%s%lld", d ? "," : "", (long long)ai.shape[d]);
		kc_buf_putc(b, ']');
		if (ai.writes_input >= 0)
			kc_buf_printf(b, ",\"writes_input\":%d", ai.writes_input);
		kc_buf_putc(b, '}');
	}
	kc_buf_putc(b, ']');
}

/* The schedule record used, in kcs-schedule-v1 form plus "source". */
static void
put_schedule(KcBuf *b, const Chosen *ch, const char *wl_hex, const KcTarget *t)
{
	kc_buf_puts(b, "{\"format\":\"" KC_SCHEDULE_FORMAT "\",\"workload_key\":\"");
	kc_buf_puts(b, wl_hex);
	kc_buf_puts(b, "\",\"target\":");
	api_json_str(b, t->name);
	kc_buf_puts(b, ",\"template\":");
	api_json_str(b, kc_schedule_template(ch->s));
	kc_buf_puts(b, ",\"knobs\":");
	const char *knobs = kc_schedule_knobs_json(ch->s);
	kc_buf_puts(b, knobs && *knobs ? knobs : "{}");
	kc_buf_puts(b, ",\"measured\":");
	kc_buf_puts(b, ch->measured ? ch->measured : "null");
	kc_buf_puts(b, ",\"provenance\":");
	if (ch->provenance) {
		kc_buf_puts(b, ch->provenance);
	} else {
		char at[32];
		kc_iso8601(kc_wall_s(), at);
		kc_buf_printf(b, "{\"by\":\"kcsd-default\",\"at\":\"%s\",\"kcsd_version\":\"%s\"}",
		              at, KCSD_VERSION);
	}
	kc_buf_puts(b, ",\"source\":");
	api_json_str(b, ch->source);
	kc_buf_putc(b, '}');
}

/* Compiles, stores and answers one kernel (the leader's path). */
static KcStatus
compile_and_store(ApiCtx *a, CompileCtx *c, const KcGraph *g, const KcTarget *t,
                  const KcWorkload *wl, const Chosen *ch, const KcDigest *kid, int64_t t0,
                  ApiResponse *resp, KcErr *err)
{
	KcCompileOptions opts = {
	    .linker = a->cfg.linker,
	    .tmpdir = a->cfg.tmpdir,
	    .want_ir = true,
	};
	KcArtifact art = {0};
	KcBuf meta = {0};
	int64_t tc = kc_now_us();
	api_metrics_compile_begin(a);
	KcStatus st = kc_compile(c, g, t, ch->s, &opts, &art, err);
	api_metrics_compile_end(a, kc_now_us() - tc);
	if (st != KC_OK) {
		kc_artifact_free(&art);
		return kc_fail(err, st, NULL, "%s", kc_status_text(st));
	}

	char kid_hex[65], wl_hex[65], obj_hex[65];
	KcDigest obj_sha;
	kc_digest_hex(kid, kid_hex);
	kc_digest_hex(&wl->key, wl_hex);
	kc_sha256(art.object, art.object_len, &obj_sha);
	kc_digest_hex(&obj_sha, obj_hex);

	const char *name = kc_graph_name(g);
	kc_buf_printf(&meta, "{\"kernel_id\":\"%s\",\"workload_key\":\"%s\",\"name\":", kid_hex,
	              wl_hex);
	api_json_str(&meta, name ? name : "");
	kc_buf_puts(&meta, ",\"symbol\":");
	api_json_str(&meta, art.symbol);
	kc_buf_puts(&meta, ",\"target\":");
	put_target(&meta, t);
	kc_buf_puts(&meta,
	            ",\"format\":\"elf-shared-object\",\"abi\":\"" KC_CPU_ABI "\",\"args\":");
	put_args(&meta, g);
	kc_buf_puts(&meta, ",\"schedule\":");
	put_schedule(&meta, ch, wl_hex, t);
	kc_buf_printf(&meta,
	              ",\"compile_ms\":%.3f,\"link_ms\":%.3f,\"object_sha256\":\"%s\","
	              "\"object_bytes\":%zu,\"kcsd_version\":\"%s\",\"build_id\":\"%s\"",
	              art.compile_ms, art.link_ms, obj_hex, art.object_len, KCSD_VERSION,
	              KCSD_BUILD_ID);
	api_sign_meta(a, &meta, kid_hex, obj_hex, wl_hex, art.symbol);
	kc_buf_putc(&meta, '}');

	CacheKernelPut put = {
	    .workload_key = wl->key,
	    .canonical = wl->canonical,
	    .canonical_len = wl->canonical_len,
	    .target = t->name,
	    .kernel_id = *kid,
	    .meta = meta.data,
	    .meta_len = meta.len,
	    .object = art.object,
	    .object_len = art.object_len,
	    .ir = art.ir,
	    .ir_len = art.ir_len,
	};
	KcErr perr = {0};
	if (cache_put_kernel(a->cache, &put, &perr) != KC_OK)
		kc_log(KC_LOG_WARN, "kernel %s not stored: %s", kid_hex, perr.msg);
	kc_log(KC_LOG_INFO, "compiled kernel %s (%s, %s, %s schedule) in %.1f ms", kid_hex,
	       name ? name : "", t->name, ch->source, art.compile_ms);

	reply_spliced(resp, meta.data, meta.len, "miss", t0, art.object, art.object_len);
	kc_buf_free(&meta);
	kc_artifact_free(&art);
	return KC_OK;
}

/* Adds ,"ms_hash":"N" (MindSpore's kernel-name hash of this body, a
 * decimal uint64 as a string) before the per-request "cache" field. It is
 * a property of the body, not of the kernel (bodies that differ only in
 * tensor names share a kernel_id), so it is computed per request and not
 * stored with the kernel's metadata. */
static void
splice_ms_hash(ApiResponse *resp, const ApiRequest *req)
{
	static const char mark[] = ",\"cache\":\"";
	uint64_t h;
	KcErr err = {0};
	char field[48];
	char *at = NULL;

	if (!resp->body || kc_ms_hash(req->body ? req->body : "", req->body_len, &h, &err) != KC_OK)
		return;
	for (char *p = strstr(resp->body, mark); p; p = strstr(p + 1, mark))
		at = p;
	if (!at)
		return;
	int n = snprintf(field, sizeof field, ",\"ms_hash\":\"%llu\"", (unsigned long long)h);
	size_t off = (size_t)(at - resp->body);
	resp->body = kc_xrealloc(resp->body, resp->body_len + (size_t)n + 1);
	memmove(resp->body + off + n, resp->body + off, resp->body_len - off + 1);
	memcpy(resp->body + off, field, (size_t)n);
	resp->body_len += (size_t)n;
}

/* ---- the handler -------------------------------------------------------- */

/* Body: a composite JSON document (akg-format.md); query: target=NAME. */
void
h_compile(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)m;
	int64_t t0 = kc_now_us();
	KcErr err = {0};
	KcGraph *g = NULL;
	KcTarget tgt;
	KcWorkload wl;
	Chosen ch = {0};
	bool coalesced = false;
	CompileCtx *c = NULL;
	char tbuf[1024];

	if (!api_is_json(req->content_type)) {
		api_reply_error(resp, KC_MEDIA_TYPE, NULL, "Content-Type must be application/json");
		goto count_failure;
	}
	c = compile_ctx_new();
	if (kc_parse(c, req->body ? req->body : "", req->body_len, &a->cfg.limits, &g, &err) !=
	    KC_OK)
		goto fail;
	const char *tq = api_query_target(req, tbuf, sizeof tbuf);
	if (tq && a->host_ok && strcmp(tq, "cpu") == 0) {
		tgt = a->host; /* resolved once in api_new: host detection costs ~0.25 ms */
	} else if (tq) {
		if (kc_target_resolve(tq, &tgt, &err) != KC_OK) {
			if (!err.where[0])
				snprintf(err.where, sizeof err.where, "?target");
			goto fail;
		}
	} else if (kc_target_from_graph(g, &tgt, &err) != KC_OK) {
		goto fail;
	}
	kc_workload(c, g, &wl);
	api_recent_put(a, &wl.key, req->body, req->body_len);
	choose_schedule(a, c, g, &tgt, &wl, &ch);
	KcDigest kid;
	kc_kernel_id(&wl.key, &tgt, ch.s, KCSD_BUILD_ID, &kid);

	for (int attempt = 0;; attempt++) {
		if (reply_cached(a, &kid, t0, resp)) {
			pthread_mutex_lock(&a->mu);
			if (coalesced)
				a->stats.coalesced++;
			else
				a->stats.hits++;
			pthread_mutex_unlock(&a->mu);
			goto done;
		}
		Flight *f = NULL;
		/* After a few rounds (the leader compiled but could not store),
		 * compile without the table rather than loop. */
		if (attempt < 3 && !flight_join(a, &kid, &f)) {
			if (flight_wait(a, f, &err) != KC_OK)
				goto fail;
			coalesced = true;
			continue;
		}
		if (f && reply_cached(a, &kid, t0, resp)) {
			/* another leader landed between our lookup and join */
			flight_land(a, f, NULL);
			pthread_mutex_lock(&a->mu);
			a->stats.hits++;
			pthread_mutex_unlock(&a->mu);
			goto done;
		}
		KcStatus st = compile_and_store(a, c, g, &tgt, &wl, &ch, &kid, t0, resp, &err);
		flight_land(a, f, st == KC_OK ? NULL : &err);
		if (st != KC_OK)
			goto fail;
		pthread_mutex_lock(&a->mu);
		a->stats.compiles++;
		pthread_mutex_unlock(&a->mu);
		goto done;
	}

fail:
	api_reply_kcerr(resp, &err);
count_failure:
	pthread_mutex_lock(&a->mu);
	a->stats.failures++;
	pthread_mutex_unlock(&a->mu);
done:
	if (resp->status == 200)
		splice_ms_hash(resp, req);
	chosen_free(&ch);
	compile_ctx_free(c);
}
