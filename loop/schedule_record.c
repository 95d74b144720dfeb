/* schedule_record.c - the kcs-schedule-v1 record: checked and printed in
 * one place.
 *
 * PUT /v1/schedules, POST /v1/import and a compile reading a stored record
 * back all call kc_schedule_record_check, so a record one of them accepts
 * the others accept too. The checks run in the order of the record's
 * fields, and the first failure is the answer, with err->where the JSON
 * pointer of the field (under KcRecordCheck.where). The template and knobs
 * are the compiler's (sched_from_cjson, knobs.def); nothing here knows a
 * knob by name.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "loop.h"

static KcStatus
bad(KcErr *err, const char *where, const char *msg)
{
	return kc_fail(err, KC_BAD_SCHEDULE, where, "%s", msg);
}

/* A member that is printed back as it came (measured, provenance). */
static const char *
json_text(Arena *a, const cJSON *v)
{
	char *txt = cJSON_PrintUnformatted(v);
	const char *r = arena_strdup(a, txt ? txt : "null");
	cJSON_free(txt);
	return r;
}

/* "target": str; or ?target= (chk->target_query); or both, naming the same
 * target; or the caller's resolved chk->target. */
static KcStatus
check_target(const cJSON *tj, const KcRecordCheck *chk, KcTarget *out, KcErr *err)
{
	const char *tq = chk->target_query;
	if (tj && !cJSON_IsString(tj))
		return bad(err, "/target", "target must be a string");
	if (chk->target) {
		if (tj && strcmp(tj->valuestring, chk->target->name) != 0)
			return bad(err, "/target", "target differs from the one the record is for");
		*out = *chk->target;
		return KC_OK;
	}
	if (!tq && !tj)
		return bad(err, "/target",
		           chk->takes_query ? "a target is required (?target= or \"target\")"
		                            : "target must be a string");
	KcStatus st = kc_target_resolve(tq ? tq : tj->valuestring, out, err);
	if (st != KC_OK) {
		if (err)
			snprintf(err->where, sizeof err->where, "%s", tq ? "?target" : "/target");
		return st;
	}
	if (tq && tj) {
		KcTarget t2;
		KcErr e2 = {0};
		if (kc_target_resolve(tj->valuestring, &t2, &e2) != KC_OK ||
		    strcmp(t2.name, out->name) != 0)
			return bad(err, "/target", "target differs from ?target=");
	}
	return KC_OK;
}

/* The fields in order; see compiler.h for the record's schema. */
static KcStatus
check(CompileCtx *c, const cJSON *j, const KcRecordCheck *chk, KcScheduleRecord *out, KcErr *err)
{
	KcStatus st;
	if (!cJSON_IsObject(j))
		return bad(err, "", "schedule record must be a JSON object");
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
	if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, KC_SCHEDULE_FORMAT) != 0)
		return bad(err, "/format", "format must be \"" KC_SCHEDULE_FORMAT "\"");
	const cJSON *wk = cJSON_GetObjectItemCaseSensitive(j, "workload_key");
	if (!cJSON_IsString(wk) || !kc_digest_parse(wk->valuestring, &out->workload_key) ||
	    (chk->workload_key &&
	     memcmp(out->workload_key.b, chk->workload_key->b, sizeof out->workload_key.b) != 0)) {
		if (!chk->workload_key)
			return bad(err, "/workload_key", "workload_key must be 64 hex characters");
		return kc_fail(err, KC_BAD_SCHEDULE, "/workload_key",
		               "workload_key must be the 64-hex key given in %s",
		               chk->key_from ? chk->key_from : "the request");
	}
	if (chk->key_known && (st = chk->key_known(chk->key_known_arg, &out->workload_key, err)))
		return st;
	if ((st = check_target(cJSON_GetObjectItemCaseSensitive(j, "target"), chk, &out->target,
	                       err)) != KC_OK)
		return st;
	const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(j, "template");
	if (!cJSON_IsString(tpl))
		return bad(err, "/template", "template must be a string");
	const cJSON *knobs = cJSON_GetObjectItemCaseSensitive(j, "knobs");
	if (!cJSON_IsObject(knobs))
		return bad(err, "/knobs", "knobs must be an object");
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "measured");
	if (ms && !cJSON_IsNull(ms)) {
		const cJSON *sec = cJSON_GetObjectItemCaseSensitive(ms, "seconds");
		const cJSON *gf = cJSON_GetObjectItemCaseSensitive(ms, "gflops");
		if (!cJSON_IsObject(ms) || !cJSON_IsNumber(sec) || !(sec->valuedouble > 0) ||
		    (gf && !cJSON_IsNull(gf) && (!cJSON_IsNumber(gf) || gf->valuedouble < 0)))
			return bad(err, "/measured",
			           "measured must be null or {\"seconds\": > 0, \"gflops\": >= 0}");
		out->measured = json_text(c->arena, ms);
	}
	const cJSON *pv = cJSON_GetObjectItemCaseSensitive(j, "provenance");
	if (pv && !cJSON_IsNull(pv)) {
		static const char *const fields[] = {"by", "at", "kcsd_version"};
		bool ok = cJSON_IsObject(pv);
		for (size_t i = 0; ok && i < sizeof fields / sizeof fields[0]; i++) {
			const cJSON *f = cJSON_GetObjectItemCaseSensitive(pv, fields[i]);
			ok = !f || cJSON_IsString(f);
		}
		if (!ok)
			return bad(
			    err, "/provenance",
			    "provenance must be an object of strings (by, at, kcsd_version)");
		out->provenance = json_text(c->arena, pv);
	}
	return sched_from_cjson(c, chk->graph, &out->target, tpl->valuestring, knobs,
	                        &out->schedule, err);
}

KcStatus
kc_schedule_record_check(CompileCtx *c, const char *json, size_t len, const KcRecordCheck *chk,
                         KcScheduleRecord *out, KcErr *err)
{
	KcStatus st;
	memset(out, 0, sizeof *out);
	cJSON *j = cJSON_ParseWithLength(json ? json : "", json ? len : 0);
	if (!j)
		st = kc_fail(err, KC_BAD_JSON, "", "schedule record is not valid JSON");
	else
		st = check(c, j, chk, out, err);
	cJSON_Delete(j);
	if (st != KC_OK && err && chk->where && chk->where[0] && err->where[0] != '?') {
		char w[sizeof err->where];
		snprintf(w, sizeof w, "%s", err->where);
		snprintf(err->where, sizeof err->where, "%s%.*s", chk->where,
		         (int)(sizeof err->where - 1 - strlen(chk->where)), w);
	}
	return st;
}

void
kc_schedule_record_print(const KcScheduleRecord *r, KcBuf *out)
{
	char hex[65];
	kc_digest_hex(&r->workload_key, hex);
	kc_buf_printf(
	    out, "{\"format\":\"%s\",\"workload_key\":\"%s\",\"target\":", KC_SCHEDULE_FORMAT, hex);
	kc_buf_json_str(out, r->target.name);
	kc_buf_puts(out, ",\"template\":");
	kc_buf_json_str(out, kc_schedule_template(r->schedule));
	kc_buf_puts(out, ",\"knobs\":");
	const char *knobs = kc_schedule_knobs_json(r->schedule);
	kc_buf_puts(out, knobs && *knobs ? knobs : "{}");
	kc_buf_printf(out, ",\"measured\":%s,\"provenance\":%s", r->measured ? r->measured : "null",
	              r->provenance ? r->provenance : "null");
	if (r->source) {
		kc_buf_puts(out, ",\"source\":");
		kc_buf_json_str(out, r->source);
	}
	kc_buf_putc(out, '}');
}
