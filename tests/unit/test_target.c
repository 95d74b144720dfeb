/* test_target.c - target names: resolution, canonical names, errors, the
 * target a composite body asks for through process/target_info, and the
 * columns of targets.def (isa level, vector width, native half, ...).
 *
 * The canonical name of every resolved target must resolve to itself, and
 * every row's columns must be what target.c derives from its features.
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

/* Does the effective feature list of t hold `f`? */
static bool
has_feat(const KcTarget *t, const char *f)
{
	char buf[8192] = ",", want[80];
	size_t n = kc_target_features(t, buf + 1, sizeof buf - 2);
	OK(n < sizeof buf - 2);
	strcat(buf, ",");
	snprintf(want, sizeof want, ",+%s,", f);
	return strstr(buf, want) != NULL;
}

static bool
cols(const KcTarget *t, const char *isa, int vw, int vregs, bool half)
{
	return t->backend == KC_BACKEND_CPU && strcmp(t->isa_level, isa) == 0 &&
	       t->vector_width == vw && t->vector_regs == vregs && t->native_half == half &&
	       t->warp_size == 0;
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
	printf("# isa %s, vector width %d, %d vector registers, native half %d\n", t.isa_level,
	       t.vector_width, t.vector_regs, t.native_half);
	OK(t.backend == KC_BACKEND_CPU && t.warp_size == 0 && t.vector_width >= 4);
#if defined(__x86_64__)
	OK(t.vector_width == (has_feat(&t, "avx512f") && has_feat(&t, "evex512") ? 16
	                      : has_feat(&t, "avx")                              ? 8
	                                                                         : 4));
	OK(t.native_half == has_feat(&t, "f16c"));
	OK(strncmp(t.isa_level, "x86-64-v", 8) == 0);
#endif
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

#define COLS(name, isa, vw, vregs, half)                                                           \
	do {                                                                                       \
		KcTarget t_;                                                                       \
		KcErr e_;                                                                          \
		KcStatus st_ = resolve(name, &t_, &e_);                                            \
		OKF(st_ == KC_OK && cols(&t_, isa, vw, vregs, half),                               \
		    "%s: %s isa %s width %d vregs %d half %d", name, e_.msg, t_.isa_level,         \
		    t_.vector_width, t_.vector_regs, t_.native_half);                              \
	} while (0)

/* Named CPUs take their row's columns; explicit features are applied to the
 * CPU's features with LLVM's implications before the columns are derived. */
static void
test_columns(void)
{
	COLS("x86_64", "x86-64-v1", 4, 16, false);
	COLS("x86_64-x86-64-v2", "x86-64-v2", 4, 16, false);
	COLS("x86_64-x86-64-v3", "x86-64-v3", 8, 16, true);
	COLS("x86_64-x86-64-v4", "x86-64-v4", 16, 32, true);
	COLS("x86_64-haswell", "x86-64-v3", 8, 16, true);
	COLS("x86_64-skylake-avx512", "x86-64-v4", 16, 32, true);
	COLS("x86_64-skx", "x86-64-v4", 16, 32, true);         /* an alias of skylake-avx512 */
	COLS("x86_64-sandybridge", "x86-64-v2", 8, 16, false); /* AVX, no F16C */
	COLS("x86_64-knl", "x86-64-v3", 16, 32, true);         /* AVX-512F without BW/DQ/VL */
	COLS("x86_64-znver4", "x86-64-v4", 16, 32, true);
	COLS("aarch64", "armv8-a", 4, 32, true);
	COLS("aarch64-neoverse-n1", "armv8.2-a", 4, 32, true);
	COLS("aarch64-neoverse-n1+neon", "armv8.2-a", 4, 32, true);
	COLS("aarch64-neoverse-v2", "armv9-a", 4, 32, true);
	COLS("aarch64-apple-a14", "armv8.4-a", 4, 32, true); /* the M1 core */
	COLS("aarch64-cortex-r82", "armv8-r", 4, 32, true);

	/* explicit features: avx2 and fma imply avx (8 lanes), not f16c */
	COLS("x86_64+avx2+fma", "x86-64-v1", 8, 16, false);
	COLS("x86_64+fma", "x86-64-v1", 8, 16, false);
	COLS("x86_64+avx", "x86-64-v1", 8, 16, false);
	COLS("x86_64+f16c", "x86-64-v1", 8, 16, true);
	COLS("x86_64-haswell+avx2", "x86-64-v3", 8, 16, true);
	/* avx512f implies f16c; on the generic x86-64 CPU LLVM adds evex512 */
	COLS("x86_64+avx512f", "x86-64-v1", 16, 32, true);
	/* a named CPU gets AVX-512 at 256 bits unless evex512 is named too */
	COLS("x86_64-x86-64-v3+avx512f", "x86-64-v3", 8, 16, true);
	COLS("x86_64-x86-64-v3+avx512f+evex512", "x86-64-v3", 16, 32, true);
	COLS("x86_64-x86-64-v3+avx512bw+avx512cd+avx512dq+avx512vl+evex512", "x86-64-v4", 16, 32,
	     true);
	COLS("x86_64-x86-64-v2+avx2+bmi+bmi2+f16c+fma+lzcnt+movbe+xsave", "x86-64-v3", 8, 16, true);

	KcTarget t;
	KcErr err;
	OK(resolve("x86_64", &t, &err) == KC_OK);
	char buf[256];
	OK(kc_target_features(&t, buf, sizeof buf) == strlen(buf) &&
	   strcmp(buf, "+64bit,+cmov,+cx8,+fxsr,+mmx,+nopl,+sse,+sse2,+x87") == 0);
	OK(kc_target_features(&t, buf, 8) ==
	       strlen("+64bit,+cmov,+cx8,+fxsr,+mmx,+nopl,+sse,+sse2,+x87") &&
	   strcmp(buf, "+64bit,") == 0);
	OK(resolve("x86_64+avx512f", &t, &err) == KC_OK && has_feat(&t, "evex512") &&
	   has_feat(&t, "avx2") && has_feat(&t, "f16c") && has_feat(&t, "sse4.2") &&
	   has_feat(&t, "64bit") && !has_feat(&t, "avx512bw"));
	OK(resolve("x86_64-x86-64-v3+avx512f", &t, &err) == KC_OK && has_feat(&t, "avx512f") &&
	   !has_feat(&t, "evex512"));
	OK(resolve("aarch64-neoverse-n1", &t, &err) == KC_OK && has_feat(&t, "fullfp16") &&
	   has_feat(&t, "v8.2a") && has_feat(&t, "v8.1a") && !has_feat(&t, "sve"));
	OK(resolve("x86_64-skylake-avx512", &t, &err) == KC_OK && has_feat(&t, "avx512vl") &&
	   !has_feat(&t, "amx-tile"));
}

/* "-name" items: only through kc_target_fill (the name grammar has none);
 * they also drop what implies the feature, as LLVM does. */
static void
test_minus(void)
{
	KcTarget t;
	KcErr err;
	OK(resolve("x86_64-x86-64-v3", &t, &err) == KC_OK);
	snprintf(t.features, sizeof t.features, "-f16c");
	memset(&err, 0, sizeof err);
	OKF(kc_target_fill(&t, &err) == KC_OK && cols(&t, "x86-64-v2", 8, 16, false), "%s %s",
	    err.msg, t.isa_level);
	OK(!has_feat(&t, "f16c") && has_feat(&t, "avx2"));

	OK(resolve("x86_64-x86-64-v4", &t, &err) == KC_OK);
	snprintf(t.features, sizeof t.features, "-f16c"); /* avx512f implies f16c */
	OK(kc_target_fill(&t, &err) == KC_OK && cols(&t, "x86-64-v2", 8, 16, false));
	OK(!has_feat(&t, "avx512f") && !has_feat(&t, "avx512vl") && has_feat(&t, "evex512"));

	OK(resolve("x86_64-haswell", &t, &err) == KC_OK);
	snprintf(t.features, sizeof t.features, "-avx");
	OK(kc_target_fill(&t, &err) == KC_OK && cols(&t, "x86-64-v2", 4, 16, false));
	OK(!has_feat(&t, "avx2") && !has_feat(&t, "fma") && has_feat(&t, "sse4.2"));
	/* applied in order */
	snprintf(t.features, sizeof t.features, "-avx,+f16c");
	OK(kc_target_fill(&t, &err) == KC_OK && cols(&t, "x86-64-v2", 8, 16, true));

	OK(resolve("x86_64-skylake-avx512", &t, &err) == KC_OK);
	snprintf(t.features, sizeof t.features, "-evex512");
	OK(kc_target_fill(&t, &err) == KC_OK && cols(&t, "x86-64-v3", 8, 16, true));

	OK(resolve("aarch64-neoverse-n1", &t, &err) == KC_OK);
	snprintf(t.features, sizeof t.features, "-fp-armv8"); /* neon implies it */
	OK(kc_target_fill(&t, &err) == KC_OK && !t.native_half && !has_feat(&t, "neon"));

	static const char *const bad[] = {"f16c", "+nonsense", "-", "+", "+f16c,,x"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		OK(resolve("x86_64-haswell", &t, &err) == KC_OK);
		snprintf(t.features, sizeof t.features, "%s", bad[i]);
		memset(&err, 0, sizeof err);
		OKF(kc_target_fill(&t, &err) == KC_BAD_TARGET && err.msg[0], "'%s'", bad[i]);
		OK(kc_target_features(&t, NULL, 0) == 0);
	}
	OK(resolve("x86_64-haswell", &t, &err) == KC_OK);
	snprintf(t.cpu, sizeof t.cpu, "neoverse-n1");
	OK(kc_target_fill(&t, &err) == KC_BAD_TARGET);
	snprintf(t.triple, sizeof t.triple, "riscv64-unknown-linux-gnu");
	OK(kc_target_fill(&t, &err) == KC_BAD_TARGET);
}

typedef struct Row {
	const char *arch, *cpu, *isa;
	int vw, vregs, half, warp;
	const char *features;
} Row;

static const Row rows[] = {
#define C(a, n, b, isa, vw, vr, half, warp, f) {#a, n, isa, vw, vr, half, warp, f},
#define F(a, n, imp)
#include "targets.def"
#undef C
#undef F
};

typedef struct FRow {
	const char *arch, *name, *implies;
} FRow;

static const FRow frows[] = {
#define C(a, n, b, isa, vw, vr, half, warp, f)
#define F(a, n, imp) {#a, n, imp},
#include "targets.def"
#undef C
#undef F
};

static bool
is_feature(const char *arch, const char *s, size_t len)
{
	for (size_t i = 0; i < sizeof frows / sizeof frows[0]; i++)
		if (strcmp(frows[i].arch, arch) == 0 && strlen(frows[i].name) == len &&
		    memcmp(frows[i].name, s, len) == 0)
			return true;
	return false;
}

/* Every word of a space-separated list names a feature of arch. */
static bool
all_features(const char *arch, const char *list)
{
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, " ");
		if (n && !is_feature(arch, p, n))
			return false;
		p += n + (p[n] == ' ');
	}
	return true;
}

/* Every row of targets.def: each CPU resolves with its row's columns, and
 * deriving them from its features (an explicit feature it already has)
 * gives the same columns, so the generator's rules and target.c's agree.
 * Features are sorted per arch (binary search) and imply only features. */
static void
test_table(void)
{
	int bad = 0, n = 0;
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		const Row *r = &rows[i];
		char name[128];
		KcTarget t;
		KcErr err;
		const char *arch = strcmp(r->arch, "X86_64") == 0 ? "x86_64" : "aarch64";
		bool b32 = strcmp(r->isa, "x86-32") == 0; /* refused: no 64-bit mode */
		snprintf(name, sizeof name, "%s-%s", arch, r->cpu);
		KcStatus st = resolve(name, &t, &err);
		bool ok = b32 ? st == KC_BAD_TARGET && strstr(err.msg, "64-bit")
		              : st == KC_OK && cols(&t, r->isa, r->vw, r->vregs, r->half != 0) &&
		                    fixed_point(&t);
		ok = ok && r->warp == 0 && all_features(r->arch, r->features) &&
		     resolve(arch, &t, &err) == KC_OK;
		if (ok) {
			snprintf(t.cpu, sizeof t.cpu, "%s", r->cpu);
			snprintf(t.features, sizeof t.features, "+%.*s",
			         (int)strcspn(r->features, " "), r->features);
			ok = kc_target_fill(&t, &err) == KC_OK &&
			     cols(&t, r->isa, r->vw, r->vregs, r->half != 0);
		}
		if (!ok && bad++ < 10)
			OKF(0, "%s: %s: got isa %s width %d vregs %d half %d, row %s %d %d %d",
			    name, err.msg, t.isa_level, t.vector_width, t.vector_regs,
			    t.native_half, r->isa, r->vw, r->vregs, r->half);
		n++;
	}
	OKF(bad == 0 && n > 150, "%d of %d CPU rows disagree", bad, n);
	bad = 0;
	for (size_t i = 0; i < sizeof frows / sizeof frows[0]; i++) {
		const FRow *f = &frows[i], *p = i ? &frows[i - 1] : NULL;
		bool sorted = !p || strcmp(p->arch, f->arch) != 0 || strcmp(p->name, f->name) < 0;
		if ((!sorted || !all_features(f->arch, f->implies)) && bad++ < 10)
			OKF(0, "feature %s %s: unsorted or implies an unknown feature", f->arch,
			    f->name);
	}
	OK(bad == 0 && strcmp(frows[0].arch, "X86_64") == 0 &&
	   strcmp(frows[sizeof frows / sizeof frows[0] - 1].arch, "AARCH64") == 0);
	/* every AArch64 version feature LLVM has is an isa level */
	for (size_t i = 0; i < sizeof frows / sizeof frows[0]; i++) {
		const char *v = frows[i].name;
		size_t l = strlen(v);
		if (strcmp(frows[i].arch, "AARCH64") != 0 || v[0] != 'v' || l < 3 ||
		    (v[1] != '8' && v[1] != '9') || (v[l - 1] != 'a' && v[l - 1] != 'r') ||
		    (l > 3 && v[2] != '.'))
			continue;
		KcTarget t;
		KcErr err;
		char want[16];
		OK(resolve("aarch64", &t, &err) == KC_OK);
		snprintf(t.features, sizeof t.features, "+%s", v);
		snprintf(want, sizeof want, "armv%.*s-%c", (int)(l - 2), v + 1, v[l - 1]);
		OKF(kc_target_fill(&t, &err) == KC_OK && strcmp(t.isa_level, want) == 0,
		    "%s: isa %s, want %s", v, t.isa_level, want);
	}
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
	expect_bad("x86_64-i386", "64-bit");             /* 32-bit CPUs: LLVM would abort */
	expect_bad("x86_64-pentium4+sse3", "64-bit");
	expect_bad("aarch64+avx2", "avx2"); /* an x86 feature */
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
	OKF(resolve("x86_64-i386+64bit", &t, &err) == KC_OK && fixed_point(&t) &&
	        strcmp(t.isa_level, "x86-64-v1") == 0 && t.vector_width == 4,
	    "%s", err.msg);
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
	OK(from_graph("cpu", "x86_64", NULL, "pentium4", &t, &err) == KC_BAD_TARGET &&
	   strcmp(err.where, "/target_info") == 0 && strstr(err.msg, "64-bit"));
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
	t_sub("columns", test_columns);
	t_sub("minus", test_minus);
	t_sub("table", test_table);
	t_sub("from graph", test_from_graph);
	t_sub("from body", test_from_body);
	return t_done();
}
