/* test_target.c - target names: resolution, canonical names, errors, and
 * the target a composite body asks for through process/target_info.
 *
 * The canonical name of every resolved target must resolve to itself.
 */
#include <stdio.h>
#include <string.h>

#include "graph.h"
#include "t.h"

static KcStatus
resolve(const char *name, KcTarget *t, KcErr *err)
{
	memset(err, 0, sizeof *err);
	return kc_target_resolve(name, t, err);
}

/* The name resolves, and its canonical name resolves to the same target. */
static bool
fixed_point(const KcTarget *t)
{
	KcTarget u;
	KcErr err;
	return resolve(t->name, &u, &err) == KC_OK && memcmp(t, &u, sizeof u) == 0;
}

static void
test_host(void)
{
	KcTarget t, h;
	KcErr err;
	OKF(resolve("cpu", &t, &err) == KC_OK, "%s", err.msg);
	printf("# cpu -> %s\n# features %s\n", t.name, t.features);
	memset(&err, 0, sizeof err);
	OK(kc_target_host(&h, &err) == KC_OK && memcmp(&t, &h, sizeof t) == 0);
#if defined(__x86_64__)
	OK(strncmp(t.name, "x86_64-", 7) == 0 && strcmp(t.triple, "x86_64-unknown-linux-gnu") == 0);
	OK(strstr(t.features, "+sse2") != NULL);
#elif defined(__aarch64__)
	OK(strncmp(t.name, "aarch64-", 8) == 0);
#endif
	OK(t.cpu[0] != '\0' && t.features[0] != '-' && strstr(t.features, ",-") == NULL);
	OK(fixed_point(&t));
}

static void
test_names(void)
{
	KcTarget t, u;
	KcErr err;
	OK(resolve("x86_64", &t, &err) == KC_OK && strcmp(t.name, "x86_64-x86-64") == 0 &&
	   strcmp(t.cpu, "x86-64") == 0 && strcmp(t.features, "") == 0 &&
	   strcmp(t.triple, "x86_64-unknown-linux-gnu") == 0);
	OK(fixed_point(&t));
	OK(resolve("x86_64-skylake-avx512", &t, &err) == KC_OK &&
	   strcmp(t.name, "x86_64-skylake-avx512") == 0 && strcmp(t.cpu, "skylake-avx512") == 0);
	OK(fixed_point(&t));
	OK(resolve("x86_64+avx2+fma", &t, &err) == KC_OK &&
	   strcmp(t.name, "x86_64-x86-64+avx2+fma") == 0 && strcmp(t.features, "+avx2,+fma") == 0);
	OK(resolve("x86_64+fma+avx2", &u, &err) == KC_OK && memcmp(&t, &u, sizeof t) == 0);
	OK(resolve("x86_64+fma+avx2+fma", &u, &err) == KC_OK && memcmp(&t, &u, sizeof t) == 0);
	OK(resolve("x86_64-x86-64+avx2+fma", &u, &err) == KC_OK && memcmp(&t, &u, sizeof t) == 0);
	OK(resolve("x86_64-haswell+avx2", &t, &err) == KC_OK &&
	   strcmp(t.name, "x86_64-haswell+avx2") == 0);
	OK(resolve("aarch64", &t, &err) == KC_OK && strcmp(t.name, "aarch64-generic") == 0 &&
	   strcmp(t.triple, "aarch64-unknown-linux-gnu") == 0 && strcmp(t.cpu, "generic") == 0);
	OK(fixed_point(&t));
	OK(resolve("aarch64-neoverse-n1+neon", &t, &err) == KC_OK &&
	   strcmp(t.name, "aarch64-neoverse-n1+neon") == 0 && strcmp(t.features, "+neon") == 0 &&
	   strcmp(t.cpu, "neoverse-n1") == 0);
	OK(fixed_point(&t));
}

static void
expect_bad(const char *name, const char *needle)
{
	KcTarget t;
	KcErr err;
	KcStatus st = resolve(name, &t, &err);
	OKF(st == KC_BAD_TARGET && (!needle || strstr(err.msg, needle)), "'%.40s': got %s (%s)",
	    name ? name : "(null)", kc_status_code(st), err.msg);
}

static void
test_errors(void)
{
	expect_bad("x86_64-nonsense", "nonsense");
	expect_bad("x86_64+notafeature", "notafeature");
	expect_bad("riscv64", "riscv64");
	expect_bad("", NULL);
	expect_bad(NULL, NULL);
	expect_bad("x86_64-", NULL);
	expect_bad("x86_64+", NULL);
	expect_bad("x86_64+avx2+", NULL);
	expect_bad("x86_64++avx2", NULL);
	expect_bad("x86_64-neoverse-n1", "neoverse-n1"); /* an aarch64 CPU */
	expect_bad("aarch64+avx2", "avx2");              /* an x86 feature */
	expect_bad("x86_64x", NULL);
	expect_bad("CPU", NULL);
	char big[1200];
	strcpy(big, "x86_64");
	while (strlen(big) < 1100)
		strcat(big, "+avx2");
	expect_bad(big, "longer");
	/* many distinct features: resolved name too long, still an error */
	char many[1001] = "x86_64";
	static const char *const fs[] = {
	    "avx512f",      "avx512bw",    "avx512cd",   "avx512dq",     "avx512vl",
	    "avx512vbmi",   "avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq",
	    "avx512fp16",   "avx512bf16",  "avx512ifma", "avxvnni",      "avxifma",
	    "avxneconvert", "amx-tile",    "amx-int8",   "amx-bf16",     "sha",
	    "sha512",       "sm3",         "sm4",        "gfni",         "vaes",
	    "vpclmulqdq",   "pclmul",      "aes",        "avx2",         "avx",
	    "fma",          "f16c",        "bmi",        "bmi2",         "lzcnt",
	    "popcnt",       "movbe",       "adx",        "rdrnd",        "rdseed",
	    "xsave",        "xsaveopt",    "xsavec",     "xsaves",       "clflushopt",
	    "clwb",         "cx16",        "sse4.2",     "sse4.1",       "ssse3",
	    "sse3",         "sse2",        "sse"};
	for (size_t i = 0;
	     i < sizeof fs / sizeof fs[0] && strlen(many) + strlen(fs[i]) + 2 < sizeof many; i++) {
		strcat(many, "+");
		strcat(many, fs[i]);
	}
	KcTarget t;
	KcErr err;
	OKF(resolve(many, &t, &err) == KC_OK && fixed_point(&t), "%s", err.msg);
}

static KcStatus
from_graph(const char *process, const char *arch, const char *feature, const char *cpu, KcTarget *t,
           KcErr *err)
{
	IrGraph g = {0};
	g.process = process;
	g.ti_arch = arch;
	g.ti_feature = feature;
	g.ti_cpu = cpu;
	memset(err, 0, sizeof *err);
	return kc_target_from_graph(&g, t, err);
}

static void
test_from_graph(void)
{
	KcTarget t, h;
	KcErr err;
	OK(from_graph("cpu", "x86_64", "avx", NULL, &t, &err) == KC_OK &&
	   strcmp(t.name, "x86_64-x86-64+avx") == 0 && strcmp(t.features, "+avx") == 0);
	OK(from_graph(NULL, "x64", "avx2, fma", "core-avx2", &t, &err) == KC_OK &&
	   strcmp(t.name, "x86_64-core-avx2+avx2+fma") == 0);
	OK(from_graph("cpu", "arm64", "+neon", NULL, &t, &err) == KC_OK &&
	   strcmp(t.name, "aarch64-generic+neon") == 0);
	OK(from_graph("cpu", "x86_64", "avx512", NULL, &t, &err) == KC_OK &&
	   strcmp(t.features, "+avx512f") == 0);
	OK(kc_target_host(&h, &err) == KC_OK);
	OK(from_graph("cpu", NULL, NULL, NULL, &t, &err) == KC_OK && memcmp(&t, &h, sizeof t) == 0);
	OK(from_graph(NULL, NULL, NULL, NULL, &t, &err) == KC_OK && memcmp(&t, &h, sizeof t) == 0);
	OK(from_graph("cuda", NULL, NULL, NULL, &t, &err) == KC_BAD_TARGET &&
	   strcmp(err.where, "/process") == 0 && strstr(err.msg, "process 'cuda'") &&
	   strstr(err.msg, "?target=cpu"));
	OK(from_graph("aicore", "Ascend910B2", NULL, NULL, &t, &err) == KC_BAD_TARGET);
	OK(from_graph("rocm", NULL, NULL, NULL, &t, &err) == KC_BAD_TARGET);
	OK(from_graph("cpu", "riscv64", NULL, NULL, &t, &err) == KC_BAD_TARGET &&
	   strcmp(err.where, "/target_info/arch") == 0);
	OK(from_graph("cpu", "x86_64", "avx", "nonsense", &t, &err) == KC_BAD_TARGET &&
	   strcmp(err.where, "/target_info/cpu") == 0);
	OK(from_graph("cpu", "x86_64", "warp", NULL, &t, &err) == KC_BAD_TARGET &&
	   strcmp(err.where, "/target_info/feature") == 0);
}

/* From a parsed v1 body. */
static void
test_from_body(void)
{
	static const char body[] =
	    "{\"op\":\"k\",\"process\":\"cpu\",\"version\":1,\"target_info\":{\"arch\":\"x86_64\","
	    "\"system\":\"linux\",\"feature\":\"avx\"},\"input_desc\":[[{\"data_type\":\"float32\","
	    "\"shape\":[4],\"tensor_name\":\"a\"}]],\"output_desc\":[{\"data_type\":\"float32\","
	    "\"shape\":[4],\"tensor_name\":\"b\"}],\"op_desc\":[{\"name\":\"Neg\",\"attr\":null,"
	    "\"input_desc\":[[{\"data_type\":\"float32\",\"shape\":[4],\"tensor_name\":\"a\"}]],"
	    "\"output_desc\":[{\"data_type\":\"float32\",\"shape\":[4],\"tensor_name\":\"b\"}]}]}";
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	KcTarget t;
	OKF(kc_parse(c, body, strlen(body), NULL, &g, &err) == KC_OK, "%s", err.msg);
	OK(g && kc_target_from_graph(g, &t, &err) == KC_OK &&
	   strcmp(t.name, "x86_64-x86-64+avx") == 0);
	compile_ctx_free(c);
}

int
main(void)
{
	t_sub("host", test_host);
	t_sub("names", test_names);
	t_sub("errors", test_errors);
	t_sub("from graph", test_from_graph);
	t_sub("from body", test_from_body);
	return t_done();
}
