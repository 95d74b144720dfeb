/* test_common.c - the base layer: error records, arena, buffers, hashing. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "t.h"

static void
errors_first_wins(void)
{
	KcErr err = {0};
	OK(kc_fail(&err, KC_UNSUPPORTED_OP, "/op_desc/3/name", "unknown op '%s'", "Foo") ==
	   KC_UNSUPPORTED_OP);
	OK(kc_fail(&err, KC_BAD_JSON, "", "later") == KC_UNSUPPORTED_OP);
	OK(strcmp(err.where, "/op_desc/3/name") == 0);
	OK(strcmp(err.msg, "unknown op 'Foo'") == 0);
	OK(kc_http_status(KC_UNSUPPORTED_OP) == 422);
	OK(strcmp(kc_status_code(KC_UNSUPPORTED_OP), "unsupported_op") == 0);
	OK(kc_http_status(KC_TOO_LARGE) == 413 && kc_http_status(KC_MEDIA_TYPE) == 415);
	KcErr e2 = {0};
	kc_fail(&e2, KC_BAD_GRAPH, "x\ny", "a\tb\x01");
	OK(strchr(e2.msg, '\t') == NULL && strchr(e2.where, '\n') == NULL);
	/* every status has a distinct wire code */
	for (int i = 0; i < KC_STATUS_COUNT; i++)
		for (int j = i + 1; j < KC_STATUS_COUNT; j++)
			if (strcmp(kc_status_code((KcStatus)i), kc_status_code((KcStatus)j)) == 0)
				OKF(0, "duplicate wire code %s", kc_status_code((KcStatus)i));
}

static void
arena_basics(void)
{
	Arena *a = arena_new(1024);
	char *p = arena_alloc(a, 10, 1);
	OK(p != NULL && p[0] == 0 && p[9] == 0);
	double *d = ARENA_ARRAY(a, double, 1000); /* bigger than a block */
	OK(((uintptr_t)d % _Alignof(double)) == 0);
	d[999] = 1.5;
	for (int i = 0; i < 10000; i++) {
		int64_t *q = ARENA_NEW(a, int64_t);
		OK(*q == 0 && ((uintptr_t)q % 8) == 0);
		*q = i;
		if (i > 5)
			break;
	}
	OK(strcmp(arena_printf(a, "%s-%d", "x", 42), "x-42") == 0);
	OK(strcmp(arena_strndup(a, "abcdef", 3), "abc") == 0);
	OK(arena_bytes(a) >= 8000);
	arena_free(a);
	arena_free(NULL);
}

static void
buffers(void)
{
	KcBuf b = {0};
	kc_buf_puts(&b, "ab");
	kc_buf_printf(&b, "%d", 123);
	kc_buf_json_str(&b, "q\"\\\n\x01");
	OK(strcmp(b.data, "ab123\"q\\\"\\\\\\n\\u0001\"") == 0);
	size_t n;
	char *s = kc_buf_take(&b, &n);
	OK(n == strlen(s) && b.data == NULL);
	free(s);
	for (int i = 0; i < 100000; i++)
		kc_buf_putc(&b, 'x');
	OK(b.len == 100000 && b.data[100000] == 0);
	kc_buf_free(&b);
}

/* kc_json_scan: tokens (strings, keys included, scalars, containers),
 * depth, brackets inside strings skipped, exact limits. */
static void
json_scan(void)
{
	KcJsonScan js;
	KcErr err = {0};
	OK(kc_json_scan(NULL, 0, 1, 1, &js, &err) == KC_OK && js.tokens == 0 && js.depth == 0);
	const char *doc = "{\"a\": [1, -2.5e3, {\"b\":\"x]}\\\"[\"}], \"c\" :true, \"d\":null}";
	OK(kc_json_scan(doc, strlen(doc), 0, 0, &js, &err) == KC_OK);
	OKF(js.tokens == 12 && js.depth == 3, "tokens %lld depth %d", (long long)js.tokens,
	    js.depth);
	OK(kc_json_scan(doc, strlen(doc), 12, 3, NULL, &err) == KC_OK && err.status == KC_OK);
	OK(kc_json_scan(doc, strlen(doc), 11, 3, &js, &err) == KC_TOO_LARGE &&
	   strcmp(err.where, KC_JSON_SCAN_WHERE) == 0 && strstr(err.msg, "max_json_tokens") &&
	   js.tokens == 12);
	err = (KcErr){0};
	OK(kc_json_scan(doc, strlen(doc), 12, 2, NULL, &err) == KC_TOO_LARGE &&
	   strstr(err.msg, "max_json_depth"));
	/* not JSON: counted, not judged */
	err = (KcErr){0};
	OK(kc_json_scan("hello world]]}", 14, 0, 0, &js, &err) == KC_OK && js.tokens == 2 &&
	   js.depth == 0);
	/* an unterminated string and a trailing backslash end the scan */
	OK(kc_json_scan("[\"abc\\", 6, 0, 0, &js, &err) == KC_OK && js.tokens == 2 &&
	   js.depth == 1);
	/* deep nesting stops at the first bracket past the bound */
	char deep[2000];
	memset(deep, '[', sizeof deep);
	OK(kc_json_scan(deep, sizeof deep, 0, 1000, &js, &err) == KC_TOO_LARGE &&
	   js.depth == 1001 && js.tokens == 1001);
}

static void
hashing(void)
{
	KcDigest d;
	char hex[65];
	kc_sha256("abc", 3, &d);
	kc_digest_hex(&d, hex);
	OK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
	KcSha256 *h = kc_sha256_begin();
	kc_sha256_update(h, "a", 1);
	kc_sha256_update(h, "bc", 2);
	KcDigest d2;
	kc_sha256_end(h, &d2);
	OK(memcmp(d.b, d2.b, 32) == 0);
	KcDigest p;
	OK(kc_digest_parse(hex, &p) && memcmp(p.b, d.b, 32) == 0);
	OK(!kc_digest_parse("abc", &p));
	hex[5] = 'g';
	OK(!kc_digest_parse(hex, &p));
	size_t n;
	char *b64 = kc_base64("hello", 5, &n);
	OK(strcmp(b64, "aGVsbG8=") == 0 && n == 8);
	free(b64);
	b64 = kc_base64("", 0, &n);
	OK(n == 0 && b64[0] == 0);
	free(b64);
}

int
main(void)
{
	t_sub("errors: first wins, table lookups", errors_first_wins);
	t_sub("arena", arena_basics);
	t_sub("buffers", buffers);
	t_sub("JSON pre-scan", json_scan);
	t_sub("hashing", hashing);
	return t_done();
}
