/* route.c - the route table, request dispatch, JSON reply helpers and the
 * API context's life cycle.
 *
 * Routing walks routes.def in order and matches each pattern segment by
 * segment; "{id}" takes one whole segment. A path that matches some
 * pattern under another method is 405 with an Allow header listing every
 * method that would match; a path matching nothing is 404. Ids are checked
 * here (exactly 64 hex characters), so handlers get a parsed KcDigest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

#define MAX_PATH 512

static const struct RouteInfo {
	const char *method;
	const char *pattern;
	ApiHandler fn;
	unsigned flags;
	ApiBodyCap cap;
} routes[API_ROUTE_COUNT] = {
#define B(setting)
#define R(e, method, pattern, handler, flags, cap)                                                 \
	[API_ROUTE_##e] = {method, pattern, handler, flags, API_BODY_CAP_##cap},
#include "routes.def"
#undef R
#undef B
};

/* The setting behind each body cap, for messages. */
static const char *const cap_names[API_BODY_CAP_COUNT] = {
    [API_BODY_CAP_0] = "max_body_bytes",
#define B(setting) [API_BODY_CAP_##setting] = #setting,
#define R(e, method, pattern, handler, flags, cap)
#include "routes.def"
#undef R
#undef B
};

ApiCtx *
api_new(const ApiConfig *cfg, Cache *cache)
{
	KC_ASSERT(cfg && cache);
	ApiCtx *a = kc_xcalloc(1, sizeof *a);
	a->cfg = *cfg;
	a->linker = cfg->linker && *cfg->linker ? kc_xstrdup(cfg->linker) : NULL;
	a->tmpdir = cfg->tmpdir && *cfg->tmpdir ? kc_xstrdup(cfg->tmpdir) : NULL;
	a->cfg.linker = a->linker;
	a->cfg.tmpdir = a->tmpdir;
	if (!a->cfg.max_canonical_bytes)
		a->cfg.max_canonical_bytes = (size_t)1 << 20;
	a->cache = cache;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	a->metrics = api_metrics_new();
	a->memo = api_memo_new();
	a->gate = api_verify_gate_new(&a->cfg);
	atomic_init(&a->sched_gen, 0);
	KcErr err = {0};
	a->host_ok = kc_target_host(&a->host, &err) == KC_OK;
	if (!a->host_ok)
		kc_log(KC_LOG_WARN, "host target unresolved: %s", err.msg);
	return a;
}

void
api_free(ApiCtx *a)
{
	if (!a)
		return;
	KC_ASSERT(a->flights == NULL);
	for (int i = 0; i < API_RECENT; i++)
		free(a->recent[i].body);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	api_metrics_free(a->metrics);
	api_auth_free(a->auth);
	api_keys_free(a->keys);
	api_memo_free(a->memo);
	api_verify_gate_free(a->gate);
	free(a->linker);
	free(a->tmpdir);
	free(a);
}

void
api_stats(ApiCtx *a, ApiStats *out)
{
	pthread_mutex_lock(&a->mu);
	*out = a->stats;
	pthread_mutex_unlock(&a->mu);
}

const char *
api_route_pattern(ApiRouteId r)
{
	KC_ASSERT((unsigned)r < API_ROUTE_COUNT);
	return routes[r].pattern;
}

/* Matches `path` against `pattern`; on success *id / *id_len give the
 * "{id}" segment (NULL / 0 when the pattern has none). */
static bool
match(const char *pattern, const char *path, const char **id, size_t *id_len)
{
	*id = NULL;
	*id_len = 0;
	while (*pattern) {
		if (strncmp(pattern, "{id}", 4) == 0) {
			size_t n = strcspn(path, "/");
			if (n == 0)
				return false;
			*id = path;
			*id_len = n;
			path += n;
			pattern += 4;
			continue;
		}
		if (*pattern++ != *path++)
			return false;
	}
	return *path == 0;
}

bool
api_route(const char *method, const char *path, ApiMatch *m, ApiResponse *resp)
{
	memset(m, 0, sizeof *m);
	if (!method || !path || strnlen(path, MAX_PATH + 1) > MAX_PATH) {
		api_reply_error(resp, KC_NOT_FOUND, NULL, "no such path");
		return false;
	}
	char allow[64] = "";
	for (int r = 0; r < API_ROUTE_COUNT; r++) {
		const char *id;
		size_t id_len;
		if (!match(routes[r].pattern, path, &id, &id_len))
			continue;
		if (strcmp(routes[r].method, method) != 0) {
			if (!strstr(allow, routes[r].method)) {
				size_t used = strlen(allow);
				snprintf(allow + used, sizeof allow - used, "%s%s",
				         used ? ", " : "", routes[r].method);
			}
			continue;
		}
		if (id) {
			char hex[65];
			if (id_len != 64) {
				api_reply_error(resp, KC_NOT_FOUND, NULL,
				                "ids are 64 hexadecimal characters");
				return false;
			}
			memcpy(hex, id, 64);
			hex[64] = 0;
			if (!kc_digest_parse(hex, &m->id)) {
				api_reply_error(resp, KC_NOT_FOUND, NULL,
				                "ids are 64 hexadecimal characters");
				return false;
			}
		}
		m->route = (ApiRouteId)r;
		m->flags = routes[r].flags;
		m->cap = routes[r].cap;
		return true;
	}
	if (allow[0]) {
		api_reply_error(resp, KC_METHOD, NULL, NULL);
		resp->header_name = "Allow";
		snprintf(resp->header_value, sizeof resp->header_value, "%s", allow);
		return false;
	}
	api_reply_error(resp, KC_NOT_FOUND, NULL, "no such path");
	return false;
}

size_t
api_body_cap(const ApiCtx *a, const ApiMatch *m, const char **setting)
{
	KC_ASSERT((unsigned)m->cap < API_BODY_CAP_COUNT);
	size_t cap = m->cap == API_BODY_CAP_0 ? 0 : a->cfg.body_caps[m->cap];
	if (setting)
		*setting = cap ? cap_names[m->cap] : cap_names[API_BODY_CAP_0];
	return cap ? cap : a->cfg.max_body_bytes;
}

void
api_handle(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	KC_ASSERT((unsigned)m->route < API_ROUTE_COUNT);
	memset(resp, 0, sizeof *resp);
	const char *setting;
	if ((m->flags & API_F_BODY) && req->body_len > api_body_cap(a, m, &setting)) {
		char msg[96];
		snprintf(msg, sizeof msg, "request body exceeds %s", setting);
		api_reply_error(resp, KC_TOO_LARGE, NULL, msg);
		return;
	}
	routes[m->route].fn(a, m, req, resp);
	if (req->parked && *req->parked)
		return; /* resp belongs to the request's next run */
	KC_ASSERT(resp->status != 0);
	if (resp->json_refused)
		api_metrics_json_refusal(a);
	/* after the write committed: a compile that read the generation
	 * before it may have read the old schedule, so its memo entry must
	 * not match from now on (see ApiCtx.sched_gen) */
	if (m->route == API_ROUTE_SCHEDULE_PUT || m->route == API_ROUTE_IMPORT)
		atomic_fetch_add(&a->sched_gen, 1);
}

bool
api_handle_fast(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	KC_ASSERT((unsigned)m->route < API_ROUTE_COUNT);
	if (m->route != API_ROUTE_COMPILE || req->body_len > api_body_cap(a, m, NULL))
		return false;
	return api_compile_fast(a, req, resp);
}

/* ---- replies ------------------------------------------------------------ */

void
api_response_free(ApiResponse *resp)
{
	if (!resp)
		return;
	free(resp->body);
	resp->body = NULL;
	resp->body_len = 0;
	if (resp->stream && resp->stream_free)
		resp->stream_free(resp->stream_arg);
	resp->stream = NULL;
	resp->stream_free = NULL;
	resp->stream_arg = NULL;
}

void
api_reply_buf(ApiResponse *resp, int status, const char *content_type, KcBuf *b)
{
	free(resp->body);
	resp->status = status;
	resp->content_type = content_type;
	resp->body = kc_buf_take(b, &resp->body_len);
}

void
api_reply_json_buf(ApiResponse *resp, int status, KcBuf *b)
{
	api_reply_buf(resp, status, "application/json", b);
}

/* Length of the valid UTF-8 sequence at p (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF), or 0 if it is not one. */
static size_t
utf8_len(const unsigned char *p)
{
	unsigned char c = p[0];
	if (c >= 0xc2 && c <= 0xdf)
		return (p[1] & 0xc0) == 0x80 ? 2 : 0;
	if (c >= 0xe0 && c <= 0xef) {
		unsigned char lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
		return p[1] >= lo && p[1] <= hi && (p[2] & 0xc0) == 0x80 ? 3 : 0;
	}
	if (c >= 0xf0 && c <= 0xf4) {
		unsigned char lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
		return p[1] >= lo && p[1] <= hi && (p[2] & 0xc0) == 0x80 && (p[3] & 0xc0) == 0x80
		           ? 4
		           : 0;
	}
	return 0;
}

void
api_json_str(KcBuf *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	const unsigned char *run = p; /* start of bytes not yet written */
	kc_buf_putc(b, '"');
	while (*p) {
		size_t n = *p < 0x80 ? 1 : utf8_len(p);
		if (n > 1 || (n == 1 && *p >= 0x20 && *p != '"' && *p != '\\' && *p != 0x7f)) {
			p += n;
			continue;
		}
		kc_buf_append(b, run, (size_t)(p - run));
		switch (*p) {
		case '"': kc_buf_puts(b, "\\\""); break;
		case '\\': kc_buf_puts(b, "\\\\"); break;
		case '\n': kc_buf_puts(b, "\\n"); break;
		case '\r': kc_buf_puts(b, "\\r"); break;
		case '\t': kc_buf_puts(b, "\\t"); break;
		default:
			if (n == 0)
				kc_buf_puts(b, "\\ufffd");
			else
				kc_buf_printf(b, "\\u%04x", *p);
		}
		run = ++p;
	}
	kc_buf_append(b, run, (size_t)(p - run));
	kc_buf_putc(b, '"');
}

void
api_reply_error(ApiResponse *resp, KcStatus st, const char *where, const char *msg)
{
	KcBuf b = {0};
	int status = kc_http_status(st);
	kc_buf_printf(&b, "{\"error\":{\"status\":%d,\"code\":", status);
	kc_buf_json_str(&b, kc_status_code(st));
	kc_buf_puts(&b, ",\"where\":");
	api_json_str(&b, where ? where : "");
	kc_buf_puts(&b, ",\"message\":");
	api_json_str(&b, msg && *msg ? msg : kc_status_text(st));
	kc_buf_puts(&b, "}}\n");
	api_reply_json_buf(resp, status, &b);
	resp->json_refused = st == KC_TOO_LARGE && where && strcmp(where, KC_JSON_SCAN_WHERE) == 0;
	if (status == 503) {
		resp->header_name = "Retry-After";
		snprintf(resp->header_value, sizeof resp->header_value, "1");
	}
}

void
api_reply_compiler_failure(ApiResponse *resp, const KcErr *err, const KcDigest *kid, int retry_s)
{
	char hex[65];
	kc_digest_hex(kid, hex);
	api_reply_kcerr(resp, err);
	/* the record gains members: replace its closing "}}\n" */
	KcBuf b = {0};
	kc_buf_append(&b, resp->body, resp->body_len - 3);
	kc_buf_printf(&b, ",\"kernel_id\":\"%s\"%s}}\n", hex,
	              retry_s > 0 ? ",\"negative_cache\":true" : "");
	free(resp->body);
	resp->body = NULL;
	api_reply_json_buf(resp, resp->status, &b);
	if (retry_s > 0) {
		resp->header_name = "Retry-After";
		snprintf(resp->header_value, sizeof resp->header_value, "%d", retry_s);
	}
}

void
api_reply_kcerr(ApiResponse *resp, const KcErr *err)
{
	KcStatus st = err->status == KC_OK ? KC_INTERNAL : err->status;
	api_reply_error(resp, st, err->where, err->msg);
}

/* ---- small request helpers ---------------------------------------------- */

KcStatus
api_json_scan(const ApiCtx *a, const char *body, size_t len, KcErr *err)
{
	const KcLimits *l = &a->cfg.limits;
	return kc_json_scan(body, len, l->max_json_tokens > 0 ? l->max_json_tokens : KC_JSON_TOKENS,
	                    l->max_json_depth > 0 ? l->max_json_depth : KC_JSON_DEPTH, NULL, err);
}

/* "application/json", optionally followed by parameters ("; charset=utf-8"). */
bool
api_is_json(const char *ct)
{
	static const char want[] = "application/json";
	if (!ct)
		return false;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	if (strncasecmp(ct, want, sizeof want - 1) != 0)
		return false;
	ct += sizeof want - 1;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	return *ct == 0 || *ct == ';';
}

const char *
api_query(const ApiRequest *req, const char *key)
{
	return req->query ? req->query(req->query_closure, key) : NULL;
}

const char *
api_query_target(const ApiRequest *req, char *buf, size_t cap)
{
	const char *v = api_query(req, "target");
	if (!v)
		return NULL;
	snprintf(buf, cap, "%s", v);
	for (char *p = buf; *p; p++)
		if (*p == ' ')
			*p = '+';
	return buf;
}

double
api_ms_since(int64_t t0_us)
{
	return (double)(kc_now_us() - t0_us) / 1000.0;
}
