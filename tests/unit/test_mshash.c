/* test_mshash.c - MindSpore's kernel-name hash (graph/mshash.c).
 *
 * _Hash_bytes against values of libstdc++'s std::hash<std::string>, the
 * nlohmann-style re-serialisation on small documents (key order, escapes,
 * number forms, dropped keys, ptr_address cut-outs), and every corpus file
 * whose name ends in _<digits>.info/.json: the digits are MindSpore's hash,
 * except for files edited after generation (akg-format.md 5).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "t.h"

#define SEED 0xc70f6907u

static uint64_t
h(const char *s)
{
	return kc_hash_bytes(s, strlen(s), SEED);
}

/* The hash of a body, with a check that it is accepted. */
static uint64_t
ms(const char *body)
{
	uint64_t v = 0;
	KcErr err = {0};
	KcStatus st = kc_ms_hash(body, strlen(body), &v, &err);
	OKF(st == KC_OK, "kc_ms_hash(%s): %s", body, err.msg);
	return v;
}

static void
hash_bytes(void)
{
	/* std::hash<std::string>{}("") etc. with libstdc++ (x86-64) */
	OK(h("") == UINT64_C(6142509188972423790));
	OK(h("a") == UINT64_C(4993892634952068459));
	OK(h("hello world") == UINT64_C(5577293430985752569));
	/* tail and block paths differ: lengths 7, 8, 9 hash differently */
	OK(h("1234567") != h("12345678") && h("12345678") != h("123456789"));
}

static void
serialisation(void)
{
	/* key order, whitespace and the dropped post-hash keys do not matter */
	OK(ms("{\"b\":1,\"a\":[1,2]}") == h("{\"a\":[1,2],\"b\":1}"));
	OK(ms(" { \"a\" : [ 1 , 2 ] , \"b\" : 1 } ") == h("{\"a\":[1,2],\"b\":1}"));
	OK(ms("{\"a\":1,\"id\":3,\"op\":\"x\",\"platform\":\"AKG\",\"composite\":true,"
	      "\"composite_graph\":\"1.1\",\"node_name\":\"n\",\"op_full_name\":\"f\","
	      "\"version\":1}") == h("{\"a\":1,\"version\":1}"));
	/* v0: process and compute_capability dropped; process kept next to
	 * compute_capability */
	OK(ms("{\"a\":1,\"process\":\"cuda\"}") == h("{\"a\":1}"));
	OK(ms("{\"a\":1,\"process\":\"cuda\",\"compute_capability\":\"7.0\"}") ==
	   h("{\"a\":1,\"process\":\"cuda\"}"));
	OK(ms("{\"a\":1,\"process\":\"cuda\",\"version\":2}") ==
	   h("{\"a\":1,\"process\":\"cuda\",\"version\":2}"));
	/* numbers: integers stay integers, doubles get nlohmann's forms */
	OK(ms("{\"version\":1,\"x\":[1.0,0.5,1e-05,1.5e20,100,-0.0,0.001,1E2,2.50]}") ==
	   h("{\"version\":1,\"x\":[1.0,0.5,1e-05,1.5e+20,100,-0.0,0.001,100.0,2.5]}"));
	OK(ms("{\"version\":1,\"x\":[0.1,18446744073709551615,-5,1e15,123456789012345.0]}") ==
	   h("{\"version\":1,\"x\":[0.1,18446744073709551615,-5,1e+15,123456789012345.0]}"));
	/* a written tie stays as written (nlohmann picked it) */
	OK(ms("{\"version\":1,\"x\":0.0013017654418945313}") ==
	   h("{\"version\":1,\"x\":0.0013017654418945313}"));
	/* strings: escapes as nlohmann writes them, UTF-8 kept */
	OK(ms("{\"version\":1,\"s\":\"a\\/b\\u0001\\n\\\"\\u00e9\"}") ==
	   h("{\"s\":\"a/b\\u0001\\n\\\"\xc3\xa9\",\"version\":1}"));
	/* ptr_address pairs are cut out, the comma left behind */
	OK(ms("{\"version\":1,\"t\":{\"a\":1,\"ptr_address\":\"0x1\",\"z\":2}}") ==
	   h("{\"t\":{\"a\":1,,\"z\":2},\"version\":1}"));
	/* a repeated key keeps its last value; NUL bytes survive */
	OK(ms("{\"version\":1,\"a\":1,\"a\":2}") == h("{\"a\":2,\"version\":1}"));
	OK(ms("{\"version\":1,\"s\":\"x\\u0000y\"}") == h("{\"s\":\"x\\u0000y\",\"version\":1}"));
	/* 200000 keys: sorted in O(n log n) */
	{
		KcBuf big = {0};
		kc_buf_puts(&big, "{\"version\":1");
		for (int i = 200000; i > 0; i--)
			kc_buf_printf(&big, ",\"k%d\":%d", i, i);
		kc_buf_putc(&big, '}');
		uint64_t v1 = 0;
		KcErr e1 = {0};
		OK(kc_ms_hash(big.data, big.len, &v1, &e1) == KC_OK && v1 != 0);
		kc_buf_free(&big);
	}
	/* not JSON */
	uint64_t v;
	KcErr err = {0};
	OK(kc_ms_hash("{\"a\":", 5, &v, &err) == KC_BAD_JSON);
	OK(kc_ms_hash("[1]x", 4, &v, &err) == KC_BAD_JSON);
}

static char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	*len = fread(buf, 1, (size_t)n, f);
	buf[*len] = 0;
	fclose(f);
	return buf;
}

/* The digits after the last '_' of a name ending in .info/.json, or 0. */
static int
name_hash(const char *name, uint64_t *out)
{
	const char *dot = strrchr(name, '.');
	const char *us = strrchr(name, '_');
	if (!dot || !us || us > dot || (strcmp(dot, ".info") && strcmp(dot, ".json")))
		return 0;
	if (dot - us < 2)
		return 0;
	for (const char *p = us + 1; p < dot; p++)
		if (*p < '0' || *p > '9')
			return 0;
	*out = strtoull(us + 1, NULL, 10);
	return 1;
}

static int n_files, n_match;

static void
scan_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[4096];
		uint64_t want, got = 0;
		size_t len;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		if (strcmp(e->d_name, "legacy_inplace_assign") == 0) {
			scan_dir(path);
			continue;
		}
		if (!name_hash(e->d_name, &want))
			continue;
		char *body = slurp(path, &len);
		KcErr err = {0};
		if (!body)
			continue;
		n_files++;
		if (kc_ms_hash(body, len, &got, &err) == KC_OK && got == want)
			n_match++;
		else
			printf("# no match: %s (got %llu)\n", e->d_name, (unsigned long long)got);
		free(body);
	}
	closedir(d);
}

static void
corpus(void)
{
	const char *dir = t_corpus_dir();
	if (!dir) {
		t_skip("../shared/corpus/akg is absent");
		return;
	}
	scan_dir(dir);
	printf("# ms_hash: %d of %d hashed corpus file names reproduced\n", n_match, n_files);
	/* akg-format.md 5 counts 47 with a per-file choice for v0 files; one
	 * v0 file with compute_capability (Fused_MatMul_fusion_1079...) needs
	 * process dropped where four others need it kept, so one fixed rule
	 * reproduces 46. */
	OKF(n_match >= 46, "only %d of %d match", n_match, n_files);
}

int
main(void)
{
	t_sub("hash_bytes", hash_bytes);
	t_sub("serialisation", serialisation);
	t_sub("corpus", corpus);
	return t_done();
}
