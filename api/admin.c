/* admin.c - team sharing (export, import) and cache administration
 * (delete a kernel, evict now, backup).
 *
 * The one idea: an export line carries everything an importer needs to
 * check it by itself. Each line is {"workload_key", "workload": the stored
 * canonical graph text, verbatim, "record": the kcs-schedule-v1 record};
 * the importer hashes the raw bytes of "workload" (located with a small
 * JSON span scanner, since re-printing would change them) and refuses a
 * line whose key does not match. Export streams: each chunk is built from
 * one short read transaction of EXPORT_BATCH records, so a slow client
 * never holds a read transaction. Import validates every line, reports
 * the bad ones, and merges all the good ones in one write transaction,
 * synced to disk before the reply (better = smaller measured.seconds; a
 * measured record beats an unmeasured one; ties keep the existing record).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"
#include "version.h"

#define EXPORT_BATCH 64

/* ---- GET /v1/export ------------------------------------------------------- */

/* The state of one export stream. */
typedef struct Export {
	Cache *cache;
	CacheScanPos pos;
	KcBuf chunk;
	size_t off;
	uint64_t skipped;
} Export;

static void
export_line(void *arg, const KcDigest *wk, const char *workload, size_t wlen, const char *record,
            size_t rlen)
{
	Export *e = arg;
	char hex[65];
	if (!workload) {
		e->skipped++; /* no verifiable workload: an importer would refuse it */
		return;
	}
	kc_digest_hex(wk, hex);
	kc_buf_printf(&e->chunk, "{\"workload_key\":\"%s\",\"workload\":", hex);
	kc_buf_append(&e->chunk, workload, wlen);
	kc_buf_puts(&e->chunk, ",\"record\":");
	kc_buf_append(&e->chunk, record, rlen);
	kc_buf_puts(&e->chunk, "}\n");
}

static long
export_read(void *arg, char *buf, size_t max)
{
	Export *e = arg;
	while (e->off == e->chunk.len && !e->pos.done) {
		KcErr err = {0};
		e->chunk.len = 0;
		e->off = 0;
		if (cache_scan_schedules(e->cache, &e->pos, EXPORT_BATCH, export_line, e, &err) !=
		    KC_OK) {
			kc_log(KC_LOG_WARN, "export aborted: %s", err.msg);
			return -1;
		}
	}
	size_t n = e->chunk.len - e->off;
	if (n == 0)
		return 0;
	if (n > max)
		n = max;
	memcpy(buf, e->chunk.data + e->off, n);
	e->off += n;
	return (long)n;
}

static void
export_free(void *arg)
{
	Export *e = arg;
	if (e->skipped)
		kc_log(KC_LOG_WARN, "export: %llu record(s) without a readable workload skipped",
		       (unsigned long long)e->skipped);
	kc_buf_free(&e->chunk);
	free(e);
}

void
h_export(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)m, (void)req;
	Export *e = kc_xcalloc(1, sizeof *e);
	e->cache = a->cache;
	resp->status = 200;
	resp->content_type = "application/x-ndjson";
	resp->stream = export_read;
	resp->stream_free = export_free;
	resp->stream_arg = e;
}

/* ---- POST /v1/import ------------------------------------------------------ */

/* Skips whitespace, then one JSON value; returns the end, or NULL when the
 * text is not a value. Only the raw span matters: cJSON has validated the
 * line already. */
static const char *
skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	return p;
}

static const char *
skip_value(const char *p, const char *end)
{
	int depth = 0;
	p = skip_ws(p, end);
	do {
		if (p >= end)
			return NULL;
		if (*p == '"') {
			for (p++; p < end && *p != '"'; p++)
				if (*p == '\\')
					p++;
			if (p >= end)
				return NULL;
			p++;
		} else if (*p == '{' || *p == '[') {
			depth++;
			p++;
		} else if (*p == '}' || *p == ']') {
			depth--;
			p++;
		} else if (depth == 0) {
			while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' &&
			       *p != '\t' && *p != '\r' && *p != '\n')
				p++;
		} else {
			p++;
		}
	} while (depth > 0);
	return p;
}

/* The raw text of the top-level member `key` of the object in [p, end). */
static bool
member_span(const char *p, const char *end, const char *key, const char **vs, size_t *vn)
{
	size_t klen = strlen(key);
	p = skip_ws(p, end);
	if (p >= end || *p++ != '{')
		return false;
	for (;;) {
		p = skip_ws(p, end);
		if (p >= end || *p != '"')
			return false;
		const char *ks = p + 1;
		const char *ke = skip_value(p, end);
		if (!ke)
			return false;
		p = skip_ws(ke, end);
		if (p >= end || *p++ != ':')
			return false;
		p = skip_ws(p, end);
		const char *ve = skip_value(p, end);
		if (!ve)
			return false;
		if ((size_t)(ke - 1 - ks) == klen && memcmp(ks, key, klen) == 0) {
			*vs = p;
			*vn = (size_t)(ve - p);
			return true;
		}
		p = skip_ws(ve, end);
		if (p >= end || *p != ',')
			return false;
		p++;
	}
}

/* One import line that passed validation. */
typedef struct ImportLine {
	int line;
	char *canonical;
	size_t canonical_len;
	KcTarget target;
	KcBuf record;
} ImportLine;

static KcStatus
bad_line(KcErr *err, const char *where, const char *msg)
{
	return kc_fail(err, KC_BAD_SCHEDULE, where, "%s", msg);
}

/* One line:
 *   {"workload_key": hex64 = sha256(raw text of "workload"),
 *    "workload": {canonical graph JSON},
 *    "record": a kcs-schedule-v1 record (compiler.h) of that workload_key}
 * The record is checked against its template and target only (this process
 * may never have seen the graph). Fills *out with the record to store
 * (target name and knobs canonical). */
static KcStatus
import_parse(const char *p, size_t n, size_t max_canonical, ImportLine *out, KcErr *err)
{
	KcStatus st = KC_OK;
	CompileCtx *cc = NULL;
	char *rec_txt = NULL;
	const char *ws;
	size_t wn;
	KcDigest key, got;
	KcScheduleRecord r;
	char prov[192];
	cJSON *j = cJSON_ParseWithLength(p, n);
	if (!j) {
		st = kc_fail(err, KC_BAD_JSON, "", "line is not valid JSON");
		goto done;
	}
	const cJSON *wk = cJSON_GetObjectItemCaseSensitive(j, "workload_key");
	const cJSON *wl = cJSON_GetObjectItemCaseSensitive(j, "workload");
	const cJSON *rec = cJSON_GetObjectItemCaseSensitive(j, "record");
	if (!cJSON_IsObject(j) || !cJSON_IsString(wk) || !kc_digest_parse(wk->valuestring, &key)) {
		st = bad_line(err, "/workload_key", "workload_key must be 64 hex characters");
		goto done;
	}
	if (!cJSON_IsObject(wl) || !member_span(p, p + n, "workload", &ws, &wn)) {
		st = bad_line(err, "/workload", "workload must be the canonical graph object");
		goto done;
	}
	if (wn > max_canonical) {
		/* as for a compile: a schedule pins its workload in the store */
		st = kc_fail(err, KC_TOO_LARGE, "/workload",
		             "the canonical workload is %zu bytes, over max_canonical_bytes (%zu)",
		             wn, max_canonical);
		goto done;
	}
	kc_sha256(ws, wn, &got);
	if (memcmp(got.b, key.b, 32) != 0) {
		st = bad_line(err, "/workload_key",
		              "workload_key is not the SHA-256 of the workload text");
		goto done;
	}
	if (!cJSON_IsObject(rec)) {
		st = bad_line(err, "/record", "record must be a kcs-schedule-v1 object");
		goto done;
	}
	cc = compile_ctx_new();
	rec_txt = cJSON_PrintUnformatted(rec);
	KcRecordCheck chk = {.where = "/record", .workload_key = &key, .key_from = "the line"};
	if ((st = kc_schedule_record_check(cc, rec_txt, strlen(rec_txt), &chk, &r, err)) != KC_OK)
		goto done;
	if (!r.provenance) {
		api_default_provenance("import", prov, sizeof prov);
		r.provenance = prov;
	}
	out->target = r.target;
	kc_schedule_record_print(&r, &out->record);
	out->canonical = kc_xmalloc(wn + 1);
	memcpy(out->canonical, ws, wn);
	out->canonical[wn] = 0;
	out->canonical_len = wn;
done:
	cJSON_free(rec_txt);
	compile_ctx_free(cc);
	cJSON_Delete(j);
	return st;
}

/* measured.seconds of a record, or -1 when it is unmeasured. */
static double
record_seconds(const char *rec, size_t len)
{
	double s = -1;
	cJSON *j = cJSON_ParseWithLength(rec, len);
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "measured");
	const cJSON *sec = cJSON_GetObjectItemCaseSensitive(ms, "seconds");
	if (cJSON_IsNumber(sec) && sec->valuedouble > 0)
		s = sec->valuedouble;
	cJSON_Delete(j);
	return s;
}

/* The merge rule: a measured record beats an unmeasured one, a smaller
 * measured.seconds beats a larger one, and ties keep the existing record. */
static bool
import_better(const char *old, size_t old_len, const char *incoming, size_t incoming_len, void *arg)
{
	(void)arg;
	double o = record_seconds(old, old_len), n = record_seconds(incoming, incoming_len);
	if (n < 0)
		return false;
	return o < 0 || n < o;
}

static bool
is_ndjson(const char *ct)
{
	static const char want[] = "application/x-ndjson";
	if (!ct)
		return false;
	while (*ct == ' ')
		ct++;
	if (strncmp(ct, want, sizeof want - 1) != 0)
		return false;
	ct += sizeof want - 1;
	return *ct == 0 || *ct == ';' || *ct == ' ';
}

void
h_import(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)m;
	ImportLine *lines = NULL;
	CacheScheduleIn *items = NULL;
	size_t nlines = 0, cap = 0, imported = 0;
	KcBuf rejected = {0}, b = {0};
	int nrejected = 0;
	KcErr err = {0};
	if (!is_ndjson(req->content_type) && !api_is_json(req->content_type)) {
		api_reply_error(resp, KC_MEDIA_TYPE, NULL,
		                "Content-Type must be application/x-ndjson (JSON lines)");
		return;
	}
	const char *p = req->body ? req->body : "", *end = p + req->body_len;
	for (int lineno = 1; p < end; lineno++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		const char *q = skip_ws(p, le);
		if (q < le) {
			if (nlines == cap) {
				cap = cap ? cap * 2 : 16;
				lines = kc_xrealloc(lines, cap * sizeof *lines);
			}
			ImportLine *il = &lines[nlines];
			KcErr lerr = {0};
			memset(il, 0, sizeof *il);
			il->line = lineno;
			/* each line is bounded as a body of its own, and parsed
			 * and freed before the next */
			bool scanned = api_json_scan(a, q, (size_t)(le - q), &lerr) == KC_OK;
			if (!scanned)
				api_metrics_json_refusal(a);
			if (scanned && import_parse(q, (size_t)(le - q), a->cfg.max_canonical_bytes,
			                            il, &lerr) == KC_OK) {
				nlines++;
			} else {
				kc_buf_free(&il->record);
				free(il->canonical);
				kc_buf_printf(
				    &rejected, "%s{\"line\":%d,\"error\":{\"status\":%d,\"code\":",
				    nrejected++ ? "," : "", lineno, kc_http_status(lerr.status));
				kc_buf_json_str(&rejected, kc_status_code(lerr.status));
				kc_buf_puts(&rejected, ",\"where\":");
				api_json_str(&rejected, lerr.where);
				kc_buf_puts(&rejected, ",\"message\":");
				api_json_str(&rejected,
				             lerr.msg[0] ? lerr.msg : kc_status_text(lerr.status));
				kc_buf_puts(&rejected, "}}");
			}
		}
		p = nl ? nl + 1 : end;
	}
	items = kc_xcalloc(nlines ? nlines : 1, sizeof *items);
	for (size_t i = 0; i < nlines; i++) {
		KcDigest key;
		kc_sha256(lines[i].canonical, lines[i].canonical_len, &key);
		items[i] = (CacheScheduleIn){
		    .workload_key = key,
		    .canonical = lines[i].canonical,
		    .canonical_len = lines[i].canonical_len,
		    .target = lines[i].target.name,
		    .record = lines[i].record.data,
		    .record_len = lines[i].record.len,
		};
	}
	if (cache_merge_schedules(a->cache, items, nlines, import_better, NULL, &err) != KC_OK) {
		api_reply_kcerr(resp, &err);
		goto done;
	}
	for (size_t i = 0; i < nlines; i++)
		imported += items[i].stored;
	kc_buf_printf(&b, "{\"imported\":%zu,\"kept_existing\":%zu,\"rejected\":[", imported,
	              nlines - imported);
	if (rejected.len)
		kc_buf_append(&b, rejected.data, rejected.len);
	kc_buf_puts(&b, "]}\n");
	api_reply_json_buf(resp, 200, &b);
	kc_log(KC_LOG_INFO, "import: %zu record(s) stored, %zu kept existing, %d rejected",
	       imported, nlines - imported, nrejected);
done:
	for (size_t i = 0; i < nlines; i++) {
		free(lines[i].canonical);
		kc_buf_free(&lines[i].record);
	}
	free(lines);
	free(items);
	kc_buf_free(&rejected);
	kc_buf_free(&b);
}

/* ---- DELETE /v1/kernels/{id}, POST /v1/admin/evict, /v1/admin/backup ------- */

void
h_kernel_delete(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)req;
	KcErr err = {0};
	KcBuf b = {0};
	char hex[65];
	/* a crashed or timed-out compile is remembered without a kernel:
	 * DELETE forgets that too, so the next request compiles again */
	bool negative = api_negative_clear(a, &m->id);
	KcStatus st = cache_delete_kernel(a->cache, &m->id, &err);
	if (st == KC_NOT_FOUND && !negative) {
		api_reply_error(resp, KC_NOT_FOUND, NULL, "no such kernel");
		return;
	}
	if (st != KC_OK && st != KC_NOT_FOUND) {
		api_reply_kcerr(resp, &err);
		return;
	}
	kc_digest_hex(&m->id, hex);
	kc_buf_printf(&b, "{\"deleted\":\"%s\",\"stored\":%s,\"negative_cache\":%s}\n", hex,
	              st == KC_OK ? "true" : "false", negative ? "true" : "false");
	api_reply_json_buf(resp, 200, &b);
}

/* Body, optional: {"target_bytes": integer >= 0} (0 or absent: the low
 * water mark of cache_max_bytes). */
void
h_admin_evict(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)m;
	uint64_t target = 0;
	KcErr err = {0};
	KcBuf b = {0};
	CacheEvictReport r;
	const char *body = req->body ? req->body : "";
	const char *q = skip_ws(body, body + req->body_len);
	if (q < body + req->body_len) {
		if (api_json_scan(a, body, req->body_len, &err) != KC_OK) {
			api_reply_kcerr(resp, &err);
			return;
		}
		cJSON *j = cJSON_ParseWithLength(body, req->body_len);
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "target_bytes");
		bool parsed = j != NULL;
		bool ok =
		    cJSON_IsObject(j) &&
		    (!t || (cJSON_IsNumber(t) && t->valuedouble >= 0 && t->valuedouble < 1.8e19));
		if (ok && t)
			target = (uint64_t)t->valuedouble;
		cJSON_Delete(j);
		if (!ok) {
			api_reply_error(resp, parsed ? KC_BAD_REQUEST : KC_BAD_JSON,
			                "/target_bytes",
			                "body must be {\"target_bytes\": integer >= 0} or empty");
			return;
		}
	}
	if (cache_evict(a->cache, target, &r, &err) != KC_OK) {
		api_reply_kcerr(resp, &err);
		return;
	}
	kc_buf_printf(&b,
	              "{\"evicted_kernels\":%llu,\"evicted_workloads\":%llu,\"freed_bytes\":%llu,"
	              "\"bytes_before\":%llu,\"bytes_after\":%llu,\"target_bytes\":%llu}\n",
	              (unsigned long long)r.kernels, (unsigned long long)r.workloads,
	              (unsigned long long)r.bytes_freed, (unsigned long long)r.bytes_before,
	              (unsigned long long)r.bytes_after, (unsigned long long)r.target_bytes);
	api_reply_json_buf(resp, 200, &b);
}

void
h_admin_backup(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)m, (void)req;
	char path[4400];
	uint64_t bytes = 0;
	KcErr err = {0};
	KcBuf b = {0};
	if (cache_backup(a->cache, path, sizeof path, &bytes, &err) != KC_OK) {
		api_reply_kcerr(resp, &err);
		return;
	}
	kc_buf_puts(&b, "{\"path\":");
	api_json_str(&b, path);
	kc_buf_printf(&b, ",\"bytes\":%llu}\n", (unsigned long long)bytes);
	api_reply_json_buf(resp, 200, &b);
}
