/* test_aarch64.c - AArch64 kernels, run under qemu-user.
 *
 * Every graph (hand-built ones, then every slice-eligible corpus file of
 * ../shared/corpus/akg) is compiled for the host and for several aarch64
 * targets. Inputs come from kc_interp_random_inputs (the corpus test's
 * ranges). The host kernel runs in-process (rt == NULL); each aarch64
 * kernel runs under qemu-aarch64 through tests/aarch64/runner.c, serially
 * and through a 3-thread pthread runtime with element-aligned buffers.
 * Checks, per output:
 *   - aarch64 serial == aarch64 threaded, bit for bit;
 *   - aarch64 vs the x86-64 kernel: integers and bools bit-exact, floats
 *     within MAX_ULP_F32 (float32/float64) or MAX_ULP_HALF (float16,
 *     bfloat16) units in the last place; the largest difference is printed;
 *   - aarch64 vs scalar references: kc_interp (rtol = atol = 1e-4, 1e-2
 *     with float16/bfloat16 upstream, as test_interp), plus exact C loops
 *     for the chain and broadcast graphs.
 * Two small reduction graphs and a graph of tiled transposes are hand-built
 * too; the corpus slice stays elementwise (the reduction/MatMul files are
 * large under qemu).
 * template_sweep is a small subset of test_templates.c's sweep (MatMul with
 * tails in M, N, K and all four transposes, GEMV, BatchMatMul with a
 * broadcast operand, softmax, layernorm, reductions over outer and middle
 * axes): there the summation order may legitimately differ between
 * targets and between the serial and threaded runs, so every run is
 * compared with kc_interp and the x86-64 kernel within a tolerance
 * (1e-5 K for a contraction over K, else 1e-4; 1e-2 with float16
 * upstream) instead of bit for bit (see loose_atol).
 * Graphs over BIG_ELEMENTS (14 of the 22 eligible corpus files) run
 * on the first aarch64 target only, against the x86-64 kernel only.
 *
 * Usage: test_aarch64 RUNNER QEMU SYSROOT (tests/aarch64.cmake). Without
 * arguments, or when one is missing, everything is skipped (exit 0).
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compiler.h"
#include "t.h"
#include "telem.h"
#include "tkernel.h"

/* Float results may differ from the x86-64 kernel by at most this many
 * ulps (see the comment at ulp_diff). */
#define MAX_ULP_F32 4
#define MAX_ULP_HALF 1
#define MAX_ARGS 1024
/* Graphs with more elements than this (all arguments together) run on the
 * first aarch64 target only and are compared with the x86-64 kernel only
 * (test_interp compares that one with kc_interp): emulating one and
 * interpreting it cost about a minute each per 30M elements on the 2-core
 * dev host (the corpus' Fused_Gelu). */
#define BIG_ELEMENTS (1 << 20)

/* Exact C reference: fills the outputs args[nin..] from the inputs. */
typedef void (*RefFn)(void *const *args);

static const char *runner, *qemu, *sysroot;
static char workdir[256];
static KcTarget host;

/* The aarch64 targets every graph is built for. */
static const char *const a64_targets[] = {"aarch64", "aarch64-neoverse-n1", "aarch64+neon"};
enum { NTARGETS = sizeof a64_targets / sizeof a64_targets[0] };

/* Largest float difference seen, per target, in ulps of the output dtype. */
static int64_t max_ulp32[NTARGETS], max_ulp16[NTARGETS];
static int n_graphs, n_runs;
static double compile_s, qemu_s; /* wall time in kc_compile and in qemu */
/* > 0 while the template sweep runs (templates()): outputs of reductions
 * and contractions may legitimately differ in rounding between targets and
 * between the serial and threaded runs (summation order, vector widths),
 * so each run is compared with kc_interp and the x86-64 kernel within
 * atol = loose_atol (1e-2 with float16 upstream) + 1e-4 |want| instead of
 * bit for bit / in ulps. */
static double loose_atol;
static int32_t last_regions; /* parallel regions of the last qemu run */

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- composite JSON builder (as in test_codegen.c) ------------------------ */
typedef struct G {
	char ins[8192], ops[65536], outs[16384];
} G;

static char pool_s[64][256];
static int pool_i;

/* A tensor operand: name, dtype, shape ("16,768"). */
static const char *
T(const char *name, const char *dt, const char *shape)
{
	char *s = pool_s[pool_i++ % 64];
	snprintf(s, 256,
	         "{\"data_type\":\"%s\",\"format\":\"DefaultFormat\",\"name\":\"x\",\"shape\":[%s],"
	         "\"tensor_name\":\"%s\"}",
	         dt, shape, name);
	return s;
}

/* A scalar constant operand. */
static const char *
C(const char *value, const char *dt)
{
	char *s = pool_s[pool_i++ % 64];
	snprintf(s, 256,
	         "{\"data_type\":\"%s\",\"format\":\"DefaultFormat\",\"name\":\"x\",\"shape\":[1],"
	         "\"tensor_name\":\"c%d\",\"value\":%s}",
	         dt, pool_i, value);
	return s;
}

static void
g_in(G *g, const char *name, const char *dt, const char *shape)
{
	size_t n = strlen(g->ins);
	snprintf(g->ins + n, sizeof g->ins - n, "%s[%s]", n ? "," : "", T(name, dt, shape));
}

static void
g_out(G *g, const char *name, const char *dt, const char *shape)
{
	size_t n = strlen(g->outs);
	snprintf(g->outs + n, sizeof g->outs - n, "%s%s", n ? "," : "", T(name, dt, shape));
}

/* op with attrs (JSON text) */
static void
g_op_attr(G *g, const char *op, const char *attr, const char *out, const char *dt,
          const char *shape, int nin, const char *a, const char *b, const char *c)
{
	const char *in[3] = {a, b, c};
	size_t n = strlen(g->ops);
	n += (size_t)snprintf(g->ops + n, sizeof g->ops - n,
	                      "%s{\"attr\":%s,\"impl_path\":\"\",\"name\":\"%s\",\"input_desc\":[",
	                      n ? "," : "", attr, op);
	for (int i = 0; i < nin; i++)
		n += (size_t)snprintf(g->ops + n, sizeof g->ops - n, "%s[%s]", i ? "," : "", in[i]);
	snprintf(g->ops + n, sizeof g->ops - n, "],\"output_desc\":[%s]}", T(out, dt, shape));
}

/* op(name, out tensor, out dtype, out shape, operands...) */
static void
g_op(G *g, const char *op, const char *out, const char *dt, const char *shape, int nin,
     const char *a, const char *b, const char *c)
{
	g_op_attr(g, op, "null", out, dt, shape, nin, a, b, c);
}

/* The graph as JSON, malloc'd. */
static char *
g_json(const G *g, const char *name)
{
	size_t cap = sizeof g->ins + sizeof g->ops + sizeof g->outs + 256;
	char *s = malloc(cap);
	snprintf(s, cap,
	         "{\"composite\":true,\"op\":\"%s\",\"process\":\"cpu\",\"input_desc\":%s%s%s,"
	         "\"output_desc\":[%s],\"op_desc\":[%s]}",
	         name, g->ins[0] ? "[" : "null", g->ins, g->ins[0] ? "]" : "", g->outs, g->ops);
	return s;
}

/* ---- element helpers ---------------------------------------------------------- */
/* Distance in units in the last place between two floats of `dt` (raw bits
 * a and b, sign-magnitude mapped onto a monotonic integer line; +0 == -0;
 * two NaNs are 0 apart, a NaN and a number INT64_MAX).
 *
 * Why results could differ: the kernels are the same IR, but a backend may
 * contract a*b+c into one fused multiply-add (every aarch64 CPU has one),
 * pick other vector widths (4 NEON lanes against 8 or 16 AVX lanes, so
 * different elements take a scalar tail) and lower conversions to half
 * with other instructions. In practice they do not: kcsd emits no
 * contract/fast-math flags and no fmuladd, its math functions are its own
 * op sequences rather than libm calls, every op is element-wise and each
 * basic op and conversion is correctly rounded on both, so the results
 * have been bit-identical (0 ulp) everywhere. The bounds are a margin for
 * a future contraction or libm call, not an observed difference. */
static int64_t
ulp_diff(const char *dt, const void *pa, const void *pb, int64_t i)
{
	int64_t a, b;
	if (!strcmp(dt, "float64")) {
		int64_t x, y;
		memcpy(&x, (const char *)pa + 8 * i, 8);
		memcpy(&y, (const char *)pb + 8 * i, 8);
		if (isnan(t_as_f64(dt, pa, i)) || isnan(t_as_f64(dt, pb, i)))
			return isnan(t_as_f64(dt, pa, i)) && isnan(t_as_f64(dt, pb, i)) ? 0
			                                                                : INT64_MAX;
		a = x < 0 ? INT64_MIN - x : x;
		b = y < 0 ? INT64_MIN - y : y;
		return a > b ? a - b : b - a;
	}
	if (isnan(t_as_f64(dt, pa, i)) || isnan(t_as_f64(dt, pb, i)))
		return isnan(t_as_f64(dt, pa, i)) && isnan(t_as_f64(dt, pb, i)) ? 0 : INT64_MAX;
	if (!strcmp(dt, "float32")) {
		int32_t x, y;
		memcpy(&x, (const char *)pa + 4 * i, 4);
		memcpy(&y, (const char *)pb + 4 * i, 4);
		a = x < 0 ? (int64_t)INT32_MIN - x : x;
		b = y < 0 ? (int64_t)INT32_MIN - y : y;
	} else { /* float16, bfloat16 */
		int16_t x, y;
		memcpy(&x, (const char *)pa + 2 * i, 2);
		memcpy(&y, (const char *)pb + 2 * i, 2);
		a = x < 0 ? (int64_t)INT16_MIN - x : x;
		b = y < 0 ? (int64_t)INT16_MIN - y : y;
	}
	return a > b ? a - b : b - a;
}

/* ---- files and qemu ---------------------------------------------------------- */
static bool
write_all(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	bool ok = f && fwrite(p, 1, n, f) == n;
	if (f && fclose(f) != 0)
		ok = false;
	return ok;
}

static char *
read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;
	*len = 0;
	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return NULL;
	}
	buf = malloc((size_t)n + 1);
	*len = fread(buf, 1, (size_t)n, f);
	buf[*len] = 0;
	fclose(f);
	return buf;
}

/* The runner's (or qemu's) stderr, for a failure note. */
static void
print_log(const char *path)
{
	size_t n;
	char *s = read_all(path, &n);
	if (s && n)
		printf("# runner: %.300s\n", s);
	free(s);
}

/* Writes the kernel and its job, runs the runner under qemu-aarch64 and
 * returns the OUT file contents (header + serial outputs + threaded
 * outputs), malloc'd, or NULL. */
static char *
run_a64(const KcArtifact *art, int nargs, int nin, const KcArgInfo *ai, void *const *args,
        size_t *out_len)
{
	char so[300], job[300], out[300], log[300], cmd[2048];
	char head[8 + 8 + 160] = "KCA64J1";
	uint32_t n32[2] = {(uint32_t)nargs, (uint32_t)nin};
	FILE *f;
	bool ok;
	char *res = NULL;

	snprintf(so, sizeof so, "%s/k.so", workdir);
	snprintf(job, sizeof job, "%s/job", workdir);
	snprintf(out, sizeof out, "%s/out", workdir);
	snprintf(log, sizeof log, "%s/log", workdir);
	unlink(out);
	if (!write_all(so, art->object, art->object_len) || !(f = fopen(job, "wb")))
		return NULL;
	memcpy(head + 8, n32, 8);
	memcpy(head + 16, art->symbol, strnlen(art->symbol, 159));
	ok = fwrite(head, 1, sizeof head, f) == sizeof head;
	for (int i = 0; i < nargs; i++) {
		int64_t numel = 1;
		for (int d = 0; d < ai[i].rank; d++)
			numel *= ai[i].shape[d];
		uint64_t bytes = (uint64_t)numel * t_dt_bytes(ai[i].dtype);
		uint32_t es[2] = {(uint32_t)t_dt_bytes(ai[i].dtype), ai[i].is_output};
		ok = ok && fwrite(&bytes, 8, 1, f) == 1 && fwrite(es, 4, 2, f) == 2;
	}
	for (int i = 0; i < nin; i++) {
		int64_t numel = 1;
		for (int d = 0; d < ai[i].rank; d++)
			numel *= ai[i].shape[d];
		size_t bytes = (size_t)numel * t_dt_bytes(ai[i].dtype);
		ok = ok && fwrite(args[i], 1, bytes, f) == bytes;
	}
	if (fclose(f) != 0 || !ok)
		return NULL;
	snprintf(cmd, sizeof cmd, "'%s' -L '%s' '%s' '%s' '%s' '%s' 2>'%s'", qemu, sysroot, runner,
	         so, job, out, log);
	n_runs++;
	double t0 = now();
	int rc = system(cmd);
	qemu_s += now() - t0;
	if (rc != 0) {
		print_log(log);
		return NULL;
	}
	res = read_all(out, out_len);
	return res;
}

/* ---- one graph ------------------------------------------------------------------ */
typedef struct Built {
	KcArtifact art;
	void *dl;
	KcsKernelFn fn;
} Built;

static bool
build(CompileCtx *c, const KcGraph *g, const KcTarget *t, Built *b, bool load, const char *label)
{
	const char *tname = load ? "the host" : t->name;
	KcSchedule *s = kc_schedule_default(c, g, t);
	KcCompileOptions o = {0};
	KcErr err = {0};
	KcStatus st;

	memset(b, 0, sizeof *b);
	double t0 = now();
	st = kc_compile(c, g, t, s, &o, &b->art, &err);
	compile_s += now() - t0;
	if (st != KC_OK)
		printf("# %s: %s: %s\n", label, kc_status_code(st), err.msg);
	OKF(st == KC_OK, "%s: compiles for %s", label, tname);
	if (st != KC_OK || !load)
		return st == KC_OK;
	char why[300] = "";
	b->fn =
	    t_kernel_load(b->art.object, b->art.object_len, b->art.symbol, &b->dl, why, sizeof why);
	OKF(b->fn != NULL, "%s: host %s", label, why);
	return b->fn != NULL;
}

static void
unbuild(Built *b)
{
	if (b->dl)
		dlclose(b->dl);
	kc_artifact_free(&b->art);
}

/* Compares one aarch64 output with the host's and the references. */
static void
compare(const char *label, const char *tname, int ti, int out_idx, const KcArgInfo *a,
        int64_t numel, const void *got, const void *got_pool, const void *hostv, const void *interp,
        const void *exact, double tol)
{
	size_t bytes = (size_t)numel * t_dt_bytes(a->dtype);
	bool fl = t_dt_float(a->dtype);
	int64_t maxu = 0, bad_host = 0, bad_ref = 0, bad_exact = 0, first = -1, rfirst = -1;
	char why[200] = "";

	double atol = loose_atol > tol ? loose_atol : tol;
	if (loose_atol > 0) { /* the threaded run against kc_interp (or the serial one) */
		const void *want = interp ? interp : got;
		int64_t bad_pool = 0, pfirst = -1;
		for (int64_t e = 0; e < numel; e++) {
			double x = t_as_f64(a->dtype, got_pool, e), y = t_as_f64(a->dtype, want, e);
			bool same = x == y || (isnan(x) && isnan(y)) ||
			            (fl && fabs(x - y) <= atol + tol * fabs(y));
			if (!same && bad_pool++ == 0)
				pfirst = e;
		}
		if (bad_pool)
			snprintf(why, sizeof why, ": %lld differ, first [%lld] %.9g vs %.9g",
			         (long long)bad_pool, (long long)pfirst,
			         t_as_f64(a->dtype, got_pool, pfirst),
			         t_as_f64(a->dtype, want, pfirst));
		OKF(bad_pool == 0, "%s [%s] output %d (%s): threaded run matches %s%s", label,
		    tname, out_idx, a->tensor_name, interp ? "kc_interp" : "the serial run", why);
		why[0] = 0;
	} else {
		OKF(memcmp(got, got_pool, bytes) == 0, "%s [%s] output %d (%s): serial == threaded",
		    label, tname, out_idx, a->tensor_name);
	}
	for (int64_t e = 0; e < numel; e++) {
		if (fl && loose_atol > 0) {
			double x = t_as_f64(a->dtype, got, e), y = t_as_f64(a->dtype, hostv, e);
			if (!(x == y || (isnan(x) && isnan(y)) ||
			      fabs(x - y) <= atol + tol * fabs(y)) &&
			    bad_host++ == 0)
				first = e;
		} else if (fl) {
			int64_t u = ulp_diff(a->dtype, got, hostv, e);
			if (u > maxu)
				maxu = u;
			if (u > (strcmp(a->dtype, "float32") && strcmp(a->dtype, "float64")
			             ? MAX_ULP_HALF
			             : MAX_ULP_F32) &&
			    bad_host++ == 0)
				first = e;
		} else if (memcmp((const char *)got + (size_t)e * t_dt_bytes(a->dtype),
		                  (const char *)hostv + (size_t)e * t_dt_bytes(a->dtype),
		                  t_dt_bytes(a->dtype)) != 0 &&
		           bad_host++ == 0) {
			first = e;
		}
		if (interp) {
			double x = t_as_f64(a->dtype, got, e), y = t_as_f64(a->dtype, interp, e);
			bool same = x == y || (isnan(x) && isnan(y)) ||
			            (fl && fabs(x - y) <= atol + tol * fabs(y));
			if (!same && bad_ref++ == 0)
				rfirst = e;
		}
		if (exact && memcmp((const char *)got + (size_t)e * t_dt_bytes(a->dtype),
		                    (const char *)exact + (size_t)e * t_dt_bytes(a->dtype),
		                    t_dt_bytes(a->dtype)) != 0)
			bad_exact++;
	}
	if (fl) {
		bool half = strcmp(a->dtype, "float32") && strcmp(a->dtype, "float64");
		int64_t *m = half ? &max_ulp16[ti] : &max_ulp32[ti];
		if (maxu > *m)
			*m = maxu;
		if (maxu > 0)
			printf("# %s [%s] %s (%s): max %lld ulp from x86-64\n", label, tname,
			       a->tensor_name, a->dtype, (long long)maxu);
	}
	if (bad_host)
		snprintf(why, sizeof why, ": %lld differ%s, first [%lld] %.9g vs %.9g",
		         (long long)bad_host,
		         fl ? (loose_atol > 0 ? " by more than the tolerance"
		                              : " by more than the ulp bound")
		            : "",
		         (long long)first, t_as_f64(a->dtype, got, first),
		         t_as_f64(a->dtype, hostv, first));
	OKF(bad_host == 0, "%s [%s] output %d (%s %s) matches x86-64 (%lld ulp)%s", label, tname,
	    out_idx, a->tensor_name, a->dtype, (long long)maxu, why);
	why[0] = 0;
	if (bad_ref)
		snprintf(why, sizeof why, ": %lld mismatches, first [%lld] %.9g want %.9g",
		         (long long)bad_ref, (long long)rfirst, t_as_f64(a->dtype, got, rfirst),
		         t_as_f64(a->dtype, interp, rfirst));
	if (interp)
		OKF(bad_ref == 0, "%s [%s] output %d matches kc_interp%s", label, tname, out_idx,
		    why);
	if (exact)
		OKF(bad_exact == 0, "%s [%s] output %d vs the C reference: %lld mismatches", label,
		    tname, out_idx, (long long)bad_exact);
}

/* Compiles `json` for the host and every aarch64 target, runs all of them
 * on the same seeded inputs and compares. Returns false when the graph
 * does not parse (the caller decides whether that is a failure). */
static bool
check(const char *label, const char *json, size_t len, uint64_t seed, RefFn ref)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	KcArgInfo ai[MAX_ARGS];
	void *args[MAX_ARGS] = {0}, *ra[MAX_ARGS] = {0}, *xa[MAX_ARGS] = {0};
	int64_t numel[MAX_ARGS];
	Built hb;
	int n, nin = 0, ntargets = NTARGETS;
	int64_t total = 0;
	bool parsed = false;

	if (kc_parse(c, json, len, &lim, &g, &err) != KC_OK) {
		printf("# %s: %s at %s: %s\n", label, kc_status_code(err.status), err.where,
		       err.msg);
		goto out;
	}
	parsed = true;
	n = kc_graph_nargs(g);
	if (n > MAX_ARGS) {
		OKF(0, "%s: %d arguments", label, n);
		goto out;
	}
	n_graphs++;
	for (int i = 0; i < n; i++) {
		kc_graph_arg(g, i, &ai[i]);
		numel[i] = 1;
		for (int d = 0; d < ai[i].rank; d++)
			numel[i] *= ai[i].shape[d];
		size_t bytes = (size_t)numel[i] * t_dt_bytes(ai[i].dtype) + 8;
		args[i] = calloc(1, bytes);
		ra[i] = calloc(1, bytes); /* kc_interp writes Assign destinations */
		xa[i] = ai[i].is_output ? calloc(1, bytes) : args[i];
		if (!ai[i].is_output)
			nin++;
		total += numel[i];
	}
	if (total > BIG_ELEMENTS) {
		ntargets = 1;
		printf("# %s: %lld elements, run for %s only\n", label, (long long)total,
		       a64_targets[0]);
	}
	kc_interp_random_inputs(c, g, seed, args);
	for (int i = 0; i < nin; i++)
		memcpy(ra[i], args[i], (size_t)numel[i] * t_dt_bytes(ai[i].dtype));
	if (ntargets == NTARGETS)
		OKF(kc_interp(c, g, ra, (size_t)1 << 32, &err) == KC_OK, "%s: kc_interp%s%s", label,
		    err.msg[0] ? ": " : "", err.msg);
	if (ref)
		ref(xa);
	if (!build(c, g, &host, &hb, true, label)) {
		unbuild(&hb);
		goto free_args;
	}
	OKF(hb.fn(NULL, args, NULL) == 0, "%s: host kernel returns 0", label);

	for (int ti = 0; ti < ntargets; ti++) {
		KcTarget t;
		Built ab;
		size_t olen = 0, want = 16, off;
		char *res;
		OK(kc_target_resolve(a64_targets[ti], &t, &err) == KC_OK);
		if (!build(c, g, &t, &ab, false, label)) {
			unbuild(&ab);
			continue;
		}
		for (int i = nin; i < n; i++)
			want += 2 * (size_t)numel[i] * t_dt_bytes(ai[i].dtype);
		res = run_a64(&ab.art, n, nin, ai, args, &olen);
		OKF(res && olen == want, "%s [%s]: runs under qemu (%zu of %zu bytes)", label,
		    t.name, olen, want);
		if (res && olen == want) {
			int32_t head[4];
			memcpy(head, res, 16);
			last_regions = head[2];
			OKF(head[0] == 0 && head[1] == 0,
			    "%s [%s]: kernel returns %d serially, %d threaded", label, t.name,
			    head[0], head[1]);
			off = 16;
			size_t off2 = 16 + (want - 16) / 2;
			for (int i = nin; i < n; i++) {
				size_t b = (size_t)numel[i] * t_dt_bytes(ai[i].dtype);
				double tol = kc_interp_half_upstream(c, g, i - nin) ? 1e-2 : 1e-4;
				compare(label, t.name, ti, i - nin, &ai[i], numel[i], res + off,
				        res + off2, args[i], ntargets == NTARGETS ? ra[i] : NULL,
				        ref ? xa[i] : NULL, tol);
				off += b;
				off2 += b;
			}
		}
		free(res);
		unbuild(&ab);
	}
	unbuild(&hb);
free_args:
	for (int i = 0; i < n; i++) {
		if (ra[i] != args[i])
			free(ra[i]);
		if (xa[i] != args[i])
			free(xa[i]);
		free(args[i]);
	}
out:
	compile_ctx_free(c);
	return parsed;
}

static void
check_g(const G *g, const char *name, uint64_t seed, RefFn ref)
{
	char *json = g_json(g, name);
	OKF(check(name, json, strlen(json), seed, ref), "%s parses", name);
	free(json);
}

/* ---- hand-built graphs -------------------------------------------------------------- */
static int chain_n;

static void
chain_ref(void *const *args)
{
	const float *a = args[0], *b = args[1];
	float *o = args[2];
	for (int i = 0; i < chain_n; i++) {
		float t = a[i] * b[i] + 0.5f;
		o[i] = (t > a[i] ? t : a[i]) - b[i];
	}
}

static void
chain_sizes(void)
{
	static const int sizes[] = {1, 7, 1023, 100003};
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		char sh[32], name[64];
		G *g = calloc(1, sizeof *g);
		chain_n = sizes[si];
		snprintf(sh, sizeof sh, "%d", chain_n);
		snprintf(name, sizeof name, "Fused_Chain_%d", chain_n);
		g_in(g, "a", "float32", sh);
		g_in(g, "b", "float32", sh);
		g_op(g, "Mul", "t1", "float32", sh, 2, T("a", "float32", sh), T("b", "float32", sh),
		     NULL);
		g_op(g, "Add", "t2", "float32", sh, 2, T("t1", "float32", sh), C("0.5", "float32"),
		     NULL);
		g_op(g, "Maximum", "t3", "float32", sh, 2, T("t2", "float32", sh),
		     T("a", "float32", sh), NULL);
		g_op(g, "Sub", "t4", "float32", sh, 2, T("t3", "float32", sh),
		     T("b", "float32", sh), NULL);
		g_out(g, "t4", "float32", sh);
		last_regions = 0;
		check_g(g, name, 1 + si, chain_ref);
		if (chain_n == 100003)
			OKF(last_regions > 0,
			    "100003 elements ran in parallel under qemu (%d regions)",
			    last_regions);
		free(g);
	}
}

static void
bias_ref(void *const *args)
{
	const float *x = args[0], *b = args[1];
	float *o = args[2];
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 768; c++)
			o[r * 768 + c] = x[r * 768 + c] + b[c];
}

static void
outer_ref(void *const *args)
{
	const float *a = args[0], *b = args[1];
	float *o = args[2];
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 5; j++)
			o[i * 5 + j] = a[i] * b[j];
}

static void
broadcasts(void)
{
	G *g = calloc(1, sizeof *g);
	g_in(g, "x", "float32", "16,768");
	g_in(g, "bias", "float32", "768");
	g_op(g, "Add", "y", "float32", "16,768", 2, T("x", "float32", "16,768"),
	     T("bias", "float32", "768"), NULL);
	g_out(g, "y", "float32", "16,768");
	check_g(g, "Fused_BiasAdd", 11, bias_ref);
	memset(g, 0, sizeof *g);
	g_in(g, "a", "float32", "4,1");
	g_in(g, "b", "float32", "1,5");
	g_op(g, "Mul", "y", "float32", "4,5", 2, T("a", "float32", "4,1"), T("b", "float32", "1,5"),
	     NULL);
	g_out(g, "y", "float32", "4,5");
	check_g(g, "Fused_Outer", 12, outer_ref);
	free(g);
}

static void
math(void)
{
	static const char *const un[] = {"Exp", "Log", "Tanh", "Erf", "Sqrt", "Rsqrt"};
	static const char *const dts[] = {"float32", "float16", "bfloat16"};
	for (int d = 0; d < 3; d++) {
		const char *dt = dts[d], *sh = "4099";
		char name[64];
		G *g = calloc(1, sizeof *g);
		g_in(g, "a", dt, sh);
		g_in(g, "b", dt, sh);
		for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
			char o[16];
			snprintf(o, sizeof o, "u%zu", i);
			g_op(g, un[i], o, dt, sh, 1, T("a", dt, sh), NULL, NULL);
			g_out(g, o, dt, sh);
		}
		/* Pow with a positive base (Log feeds on b too: both in [0.5, 2)) */
		g_op(g, "Log", "lb", dt, sh, 1, T("b", dt, sh), NULL, NULL);
		g_op(g, "Pow", "p", dt, sh, 2, T("b", dt, sh), T("a", dt, sh), NULL);
		g_op(g, "Mul", "m", dt, sh, 2, T("p", dt, sh), T("lb", dt, sh), NULL);
		g_out(g, "p", dt, sh);
		g_out(g, "m", dt, sh);
		snprintf(name, sizeof name, "Fused_Math_%s", dt);
		check_g(g, name, 21 + (uint64_t)d, NULL);
		free(g);
	}
}

static void
casts(void)
{
	static const char *const dts[] = {"float32", "float16", "bfloat16", "int32", "bool"};
	const char *sh = "1031";
	G *g = calloc(1, sizeof *g);
	for (int a = 0; a < 5; a++) {
		char in[8];
		snprintf(in, sizeof in, "i%d", a);
		g_in(g, in, dts[a], sh);
	}
	/* scaled floats, so the float -> int and float -> half casts round */
	g_op(g, "Mul", "s", "float32", sh, 2, T("i0", "float32", sh), C("1234.5678", "float32"),
	     NULL);
	g_op(g, "Cast", "sh", "float16", sh, 1, T("s", "float32", sh), NULL, NULL);
	g_op(g, "Cast", "sb", "bfloat16", sh, 1, T("s", "float32", sh), NULL, NULL);
	g_op(g, "Cast", "si", "int32", sh, 1, T("s", "float32", sh), NULL, NULL);
	g_out(g, "sh", "float16", sh);
	g_out(g, "sb", "bfloat16", sh);
	g_out(g, "si", "int32", sh);
	for (int a = 0; a < 5; a++)
		for (int b = 0; b < 5; b++) {
			char in[8], out[16];
			if (a == b)
				continue;
			snprintf(in, sizeof in, "i%d", a);
			snprintf(out, sizeof out, "c%d_%d", a, b);
			g_op(g, "Cast", out, dts[b], sh, 1, T(in, dts[a], sh), NULL, NULL);
			g_out(g, out, dts[b], sh);
		}
	check_g(g, "Fused_Cast_Among", 31, NULL);
	free(g);
}

static void
compare_select(void)
{
	static const char *const cmp[] = {"Greater",   "GreaterEqual", "Less",
	                                  "LessEqual", "Equal",        "NotEqual"};
	const char *sh = "67,5";
	G *g = calloc(1, sizeof *g);
	g_in(g, "a", "float32", sh);
	g_in(g, "b", "float32", sh);
	g_in(g, "i", "int32", sh);
	g_in(g, "j", "int32", "5");
	g_in(g, "h", "float16", sh);
	for (int k = 0; k < 6; k++) {
		char o[16];
		snprintf(o, sizeof o, "f%d", k);
		g_op(g, cmp[k], o, "bool", sh, 2, T("a", "float32", sh), T("b", "float32", sh),
		     NULL);
		g_out(g, o, "bool", sh);
		snprintf(o, sizeof o, "n%d", k);
		g_op(g, cmp[k], o, "bool", sh, 2, T("i", "int32", sh), T("j", "int32", "5"), NULL);
		g_out(g, o, "bool", sh);
	}
	g_op(g, "LogicalAnd", "la", "bool", sh, 2, T("f0", "bool", sh), T("n4", "bool", sh), NULL);
	g_op(g, "LogicalOr", "lo", "bool", sh, 2, T("la", "bool", sh), T("n2", "bool", sh), NULL);
	g_op(g, "LogicalNot", "ln", "bool", sh, 1, T("lo", "bool", sh), NULL, NULL);
	g_op(g, "Select", "sel", "float32", sh, 3, T("ln", "bool", sh), T("a", "float32", sh),
	     T("b", "float32", sh));
	g_op(g, "Less", "hl", "bool", sh, 2, T("h", "float16", sh), C("0.25", "float16"), NULL);
	g_op(g, "Select", "hs", "float16", sh, 3, T("hl", "bool", sh), T("h", "float16", sh),
	     C("-1", "float16"));
	g_op(g, "Select", "is", "int32", sh, 3, T("f2", "bool", sh), T("i", "int32", sh),
	     T("j", "int32", "5"));
	g_out(g, "sel", "float32", sh);
	g_out(g, "hs", "float16", sh);
	g_out(g, "is", "int32", sh);
	check_g(g, "Fused_Cmp_Select", 41, NULL);
	free(g);
}

static void
reshape_broadcast(void)
{
	G *g = calloc(1, sizeof *g);
	g_in(g, "x", "float32", "2,3");
	g_in(g, "y", "float32", "2,3");
	g_in(g, "z", "float32", "3,2");
	g_in(g, "v", "float32", "6");
	g_op(g, "Add", "s", "float32", "2,3", 2, T("x", "float32", "2,3"), T("y", "float32", "2,3"),
	     NULL);
	g_op(g, "Reshape", "r", "float32", "3,2", 1, T("s", "float32", "2,3"), NULL, NULL);
	g_op(g, "Mul", "m", "float32", "3,2", 2, T("r", "float32", "3,2"), T("z", "float32", "3,2"),
	     NULL);
	g_op(g, "Reshape", "vr", "float32", "2,3", 1, T("v", "float32", "6"), NULL, NULL);
	g_op(g, "BroadcastTo", "vb", "float32", "4,2,3", 1, T("vr", "float32", "2,3"), NULL, NULL);
	g_out(g, "m", "float32", "3,2");
	g_out(g, "vb", "float32", "4,2,3");
	check_g(g, "Fused_Reshape_BroadcastTo", 51, NULL);
	free(g);
}

/* Sin ... Expm1 and Atan2 (more than MATH_INLINE_MAX, so the outlined VFABI
 * versions), Asin/ACos on a in [-1, 1), Acosh on b >= 1 (interp.c draws
 * them in their domains); a reversed StridedSlice with a new axis and a
 * bool ReduceSum counting into int32. */
static void
trig(void)
{
	static const char *const un[] = {"Sin", "Cos", "Atan", "Asinh", "Expm1", "Asin", "ACos"};
	static const char *const dts[] = {"float32", "float16", "bfloat16"};
	for (int d = 0; d < 3; d++) {
		const char *dt = dts[d], *sh = "4099";
		char name[64];
		G *g = calloc(1, sizeof *g);
		g_in(g, "a", dt, sh);
		g_in(g, "b", dt, sh);
		for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
			char o[16];
			snprintf(o, sizeof o, "u%zu", i);
			g_op(g, un[i], o, dt, sh, 1, T("a", dt, sh), NULL, NULL);
			g_out(g, o, dt, sh);
		}
		g_op(g, "Acosh", "h", dt, sh, 1, T("b", dt, sh), NULL, NULL);
		g_op(g, "Atan2", "t", dt, sh, 2, T("a", dt, sh), T("h", dt, sh), NULL);
		g_out(g, "t", dt, sh);
		snprintf(name, sizeof name, "Fused_Trig_%s", dt);
		check_g(g, name, 31 + (uint64_t)d, NULL);
		free(g);
	}
	G *g = calloc(1, sizeof *g);
	g_in(g, "x", "float32", "9,40");
	g_in(g, "m", "bool", "9,40");
	g_op_attr(g, "StridedSlice",
	          "[{\"name\":\"begin\",\"value\":[8,0,-1]},{\"name\":\"end\",\"value\":[0,0,0]},"
	          "{\"name\":\"strides\",\"value\":[-2,1,-3]},{\"name\":\"end_mask\",\"value\":5},"
	          "{\"name\":\"new_axis_mask\",\"value\":2}]",
	          "s", "float32", "5,1,14", 1, T("x", "float32", "9,40"), NULL, NULL);
	g_op_attr(g, "ReduceSum", "[{\"name\":\"axis\",\"value\":[0]}]", "c", "int32", "40", 1,
	          T("m", "bool", "9,40"), NULL, NULL);
	g_out(g, "s", "float32", "5,1,14");
	g_out(g, "c", "int32", "40");
	check_g(g, "Fused_StridedSlice_ReduceSum", 34, NULL);
	free(g);
}

/* Tiled transposes (emit_tile.c) with NEON's vectors (vw 4; float64 2):
 * element sizes 1 to 8, prime sizes (partial sub-blocks and tiles), a 4-D
 * permutation of the last two axes with a Mul on the transposed values,
 * and a Cast to float16. One graph, each output a stage of its own. */
static void
transposes(void)
{
	static const char *const dts[] = {"float32", "float16", "int8", "float64", "bool"};
	static const char *const xs[] = {"37,61", "48,64", "13,29", "17,40", "19,23"};
	static const char *const ys[] = {"61,37", "64,48", "29,13", "40,17", "23,19"};
	static const char p2[] = "[{\"name\":\"perm\",\"value\":[1,0]}]";
	G *g = calloc(1, sizeof *g);
	for (int i = 0; i < 5; i++) {
		char in[8], out[8];
		snprintf(in, sizeof in, "x%d", i);
		snprintf(out, sizeof out, "y%d", i);
		g_in(g, in, dts[i], xs[i]);
		g_op_attr(g, "Transpose", p2, out, dts[i], ys[i], 1, T(in, dts[i], xs[i]), NULL,
		          NULL);
		g_out(g, out, dts[i], ys[i]);
	}
	g_in(g, "z", "float32", "2,3,29,47");
	g_op_attr(g, "Transpose", "[{\"name\":\"perm\",\"value\":[0,1,3,2]}]", "zt", "float32",
	          "2,3,47,29", 1, T("z", "float32", "2,3,29,47"), NULL, NULL);
	g_op(g, "Mul", "zm", "float32", "2,3,47,29", 2, T("zt", "float32", "2,3,47,29"),
	     C("0.5", "float32"), NULL);
	g_op(g, "Cast", "zh", "float16", "2,3,47,29", 1, T("zt", "float32", "2,3,47,29"), NULL,
	     NULL);
	g_out(g, "zm", "float32", "2,3,47,29");
	g_out(g, "zh", "float16", "2,3,47,29");
	check_g(g, "Fused_Transposes", 71, NULL);
	free(g);
}

/* Small reduction stages (inner and outer axes, float32 and int32): the
 * softmax pattern, and column sums / row maxima. Cheap under qemu. */
static void
reductions(void)
{
	static const char keep[] =
	    "[{\"name\":\"axis\",\"value\":[-1]},{\"name\":\"keep_dims\",\"value\":true}]";
	G *g = calloc(1, sizeof *g);
	g_in(g, "x", "float32", "8,33");
	g_op_attr(g, "ReduceMax", keep, "m", "float32", "8,1", 1, T("x", "float32", "8,33"), NULL,
	          NULL);
	g_op(g, "Sub", "s", "float32", "8,33", 2, T("x", "float32", "8,33"),
	     T("m", "float32", "8,1"), NULL);
	g_op(g, "Exp", "e", "float32", "8,33", 1, T("s", "float32", "8,33"), NULL, NULL);
	g_op_attr(g, "ReduceSum", keep, "z", "float32", "8,1", 1, T("e", "float32", "8,33"), NULL,
	          NULL);
	g_op(g, "RealDiv", "y", "float32", "8,33", 2, T("e", "float32", "8,33"),
	     T("z", "float32", "8,1"), NULL);
	g_out(g, "y", "float32", "8,33");
	check_g(g, "Fused_Softmax", 61, NULL);
	free(g);

	g = calloc(1, sizeof *g);
	g_in(g, "x", "float32", "16,24");
	g_in(g, "i", "int32", "6,10");
	g_op_attr(g, "ReduceSum", "[{\"name\":\"axis\",\"value\":[0]}]", "cs", "float32", "24", 1,
	          T("x", "float32", "16,24"), NULL, NULL);
	g_op_attr(g, "ReduceMax", "[{\"name\":\"axis\",\"value\":[1]}]", "rm", "int32", "6", 1,
	          T("i", "int32", "6,10"), NULL, NULL);
	g_out(g, "cs", "float32", "24");
	g_out(g, "rm", "int32", "6");
	check_g(g, "Fused_ReduceSum_ReduceMax", 62, NULL);
	free(g);
}

/* ---- a subset of the template sweep (tests/unit/test_templates.c) ---------------- */
/* (Batch)MatMul a x b (logical M, N, K; a batch of B > 0 on a only, so b
 * broadcasts as rank 2) compared with kc_interp within 1e-5 K and with the
 * x86-64 kernel within the same tolerance (summation orders differ). */
static void
sweep_matmul(int64_t B, int64_t M, int64_t N, int64_t K, bool ta, bool tb, uint64_t seed)
{
	char as[64], bs[64], os[64], attr[256], name[128];
	G *g = calloc(1, sizeof *g);
	const char *op = B ? "BatchMatMul" : "MatMul";
	int n = B ? snprintf(as, sizeof as, "%lld,", (long long)B) : 0;
	snprintf(as + n, sizeof as - (size_t)n, "%lld,%lld", (long long)(ta ? K : M),
	         (long long)(ta ? M : K));
	snprintf(bs, sizeof bs, "%lld,%lld", (long long)(tb ? N : K), (long long)(tb ? K : N));
	n = B ? snprintf(os, sizeof os, "%lld,", (long long)B) : 0;
	snprintf(os + n, sizeof os - (size_t)n, "%lld,%lld", (long long)M, (long long)N);
	snprintf(
	    attr, sizeof attr,
	    "[{\"name\":\"transpose_a\",\"value\":%s},{\"name\":\"transpose_b\",\"value\":%s}]",
	    ta ? "true" : "false", tb ? "true" : "false");
	snprintf(name, sizeof name, "Fused_%s_B%lld_M%lld_N%lld_K%lld_ta%d_tb%d", op, (long long)B,
	         (long long)M, (long long)N, (long long)K, ta, tb);
	g_in(g, "a", "float32", as);
	g_in(g, "b", "float32", bs);
	g_op_attr(g, op, attr, "y", "float32", os, 2, T("a", "float32", as), T("b", "float32", bs),
	          NULL);
	g_out(g, "y", "float32", os);
	loose_atol = 1e-5 * (double)K > 1e-4 ? 1e-5 * (double)K : 1e-4;
	check_g(g, name, seed, NULL);
	loose_atol = 0;
	free(g);
}

/* softmax over the last axis of [R, C], float32 */
static void
sweep_softmax(int64_t R, int64_t C, uint64_t seed)
{
	static const char keep[] =
	    "[{\"name\":\"axis\",\"value\":[-1]},{\"name\":\"keep_dims\",\"value\":true}]";
	char xs[48], rs[48], name[64];
	const char *f = "float32";
	G *g = calloc(1, sizeof *g);
	snprintf(xs, sizeof xs, "%lld,%lld", (long long)R, (long long)C);
	snprintf(rs, sizeof rs, "%lld,1", (long long)R);
	snprintf(name, sizeof name, "Fused_Softmax_%lldx%lld", (long long)R, (long long)C);
	g_in(g, "x", f, xs);
	g_op_attr(g, "ReduceMax", keep, "m", f, rs, 1, T("x", f, xs), NULL, NULL);
	g_op(g, "Sub", "s", f, xs, 2, T("x", f, xs), T("m", f, rs), NULL);
	g_op(g, "Exp", "e", f, xs, 1, T("s", f, xs), NULL, NULL);
	g_op_attr(g, "ReduceSum", keep, "z", f, rs, 1, T("e", f, xs), NULL, NULL);
	g_op(g, "RealDiv", "y", f, xs, 2, T("e", f, xs), T("z", f, rs), NULL);
	g_out(g, "y", f, xs);
	loose_atol = 1e-4;
	check_g(g, name, seed, NULL);
	loose_atol = 0;
	free(g);
}

/* layernorm over the last axis of [rows, cols]: outputs y, mean, variance */
static void
sweep_layernorm(int64_t rows, int64_t cols, uint64_t seed)
{
	static const char keep[] =
	    "[{\"name\":\"axis\",\"value\":[-1]},{\"name\":\"keep_dims\",\"value\":true}]";
	char xs[48], rs[48], cs[24], inv[32], name[64];
	const char *f = "float32";
	G *g = calloc(1, sizeof *g);
	snprintf(xs, sizeof xs, "%lld,%lld", (long long)rows, (long long)cols);
	snprintf(rs, sizeof rs, "%lld,1", (long long)rows);
	snprintf(cs, sizeof cs, "%lld", (long long)cols);
	snprintf(inv, sizeof inv, "%.9g", 1.0 / (double)cols);
	snprintf(name, sizeof name, "Fused_LayerNorm_%lldx%lld", (long long)rows, (long long)cols);
	g_in(g, "x", f, xs);
	g_in(g, "gamma", f, cs);
	g_in(g, "beta", f, cs);
	g_op_attr(g, "ReduceSum", keep, "s1", f, rs, 1, T("x", f, xs), NULL, NULL);
	g_op(g, "Mul", "mean", f, rs, 2, T("s1", f, rs), C(inv, f), NULL);
	g_op(g, "Sub", "d", f, xs, 2, T("x", f, xs), T("mean", f, rs), NULL);
	g_op(g, "Mul", "d2", f, xs, 2, T("d", f, xs), T("d", f, xs), NULL);
	g_op_attr(g, "ReduceSum", keep, "s2", f, rs, 1, T("d2", f, xs), NULL, NULL);
	g_op(g, "Mul", "var", f, rs, 2, T("s2", f, rs), C(inv, f), NULL);
	g_op(g, "Add", "ve", f, rs, 2, T("var", f, rs), C("1e-05", f), NULL);
	g_op(g, "Rsqrt", "rs", f, rs, 1, T("ve", f, rs), NULL, NULL);
	g_op(g, "Mul", "nrm", f, xs, 2, T("d", f, xs), T("rs", f, rs), NULL);
	g_op(g, "Mul", "sc", f, xs, 2, T("nrm", f, xs), T("gamma", f, cs), NULL);
	g_op(g, "Add", "y", f, xs, 2, T("sc", f, xs), T("beta", f, cs), NULL);
	g_out(g, "y", f, xs);
	g_out(g, "mean", f, rs);
	g_out(g, "var", f, rs);
	loose_atol = 1e-4;
	check_g(g, name, seed, NULL);
	loose_atol = 0;
	free(g);
}

/* one reduction op over `axes` (JSON list text) of x[shape] */
static void
sweep_reduce(const char *op, const char *dt, const char *shape, const char *axes, bool keep,
             const char *oshape, uint64_t seed)
{
	char attr[160], name[128];
	G *g = calloc(1, sizeof *g);
	snprintf(attr, sizeof attr,
	         "[{\"name\":\"axis\",\"value\":%s},{\"name\":\"keep_dims\",\"value\":%s}]", axes,
	         keep ? "true" : "false");
	snprintf(name, sizeof name, "Fused_%s_%s_%s_axis%s", op, dt, shape, axes);
	for (char *q = name; *q; q++)
		if (*q == ',' || *q == '[' || *q == ']' || *q == '-')
			*q = '_';
	g_in(g, "x", dt, shape);
	g_op_attr(g, op, attr, "y", dt, oshape, 1, T("x", dt, shape), NULL, NULL);
	g_out(g, "y", dt, oshape);
	loose_atol = 1e-4;
	check_g(g, name, seed, NULL);
	loose_atol = 0;
	free(g);
}

/* MatMul with tails in M, N and K (K = 1, N and M below the 4 NEON lanes),
 * all four transposes, GEMV, BatchMatMul with a broadcast rank-2 b;
 * softmax and layernorm rows of 1, 7, 17, 65 and 128; reductions over the
 * first axis, a middle axis and all axes. */
static void
template_sweep(void)
{
	static const int64_t mnk[][3] = {{1, 1, 1},  {3, 17, 5},  {17, 3, 33},
	                                 {5, 16, 1}, {15, 7, 65}, {13, 1, 31}};
	uint64_t seed = 70;
	for (size_t i = 0; i < sizeof mnk / sizeof mnk[0]; i++)
		sweep_matmul(0, mnk[i][0], mnk[i][1], mnk[i][2], i & 1, (i >> 1) & 1, seed++);
	for (int t = 0; t < 4; t++)
		sweep_matmul(0, 7, 13, 17, t & 1, t >> 1, seed++);
	sweep_matmul(0, 1, 33, 64, false, true, seed++);    /* GEMV */
	sweep_matmul(0, 1, 100, 257, false, false, seed++); /* GEMV, packed b */
	sweep_matmul(3, 5, 17, 7, true, false, seed++);     /* [3,7,5] x [7,17] */
	sweep_softmax(5, 33, seed++);
	sweep_softmax(3, 1, seed++);
	sweep_softmax(2, 65, seed++);
	sweep_softmax(7, 128, seed++);
	sweep_layernorm(3, 17, seed++);
	sweep_layernorm(1, 7, seed++);
	sweep_reduce("ReduceSum", "float32", "17,33", "[0]", false, "33", seed++);
	sweep_reduce("ReduceMax", "float32", "3,17,5", "[1]", true, "3,1,5", seed++);
	sweep_reduce("ReduceSum", "int32", "5,13", "[]", false, "1", seed++);
	sweep_reduce("ReduceMax", "float16", "7,65", "[-1]", false, "7", seed++);
}

/* ---- the corpus --------------------------------------------------------------------- */
/* test_corpus.py's first slice */
static bool
slice_op(const char *op)
{
	static const char *const ops[] = {
	    "Add",         "TensorAdd", "Sub",   "Mul",        "RealDiv",    "Div",
	    "Maximum",     "Minimum",   "Pow",   "Neg",        "Abs",        "Exp",
	    "Log",         "Sqrt",      "Rsqrt", "Reciprocal", "Tanh",       "Erf",
	    "Square",      "Floor",     "Round", "Sign",       "Greater",    "GreaterEqual",
	    "Less",        "LessEqual", "Equal", "NotEqual",   "LogicalAnd", "LogicalOr",
	    "LogicalNot",  "IsNan",     "IsInf", "IsFinite",   "Select",     "Cast",
	    "BroadcastTo", "Reshape"};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (!strcmp(op, ops[i]))
			return true;
	return false;
}

static bool
slice_dtype(const cJSON *t)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "data_type");
	static const char *const ok[] = {"float32", "float16", "int32", "bool"};
	if (!cJSON_IsString(d))
		return false;
	for (int i = 0; i < 4; i++)
		if (!strcmp(d->valuestring, ok[i]))
			return true;
	return false;
}

/* The reason a corpus file is outside the slice, or NULL. */
static const char *
ineligible(const char *json, size_t len)
{
	cJSON *root = cJSON_ParseWithLength(json, len), *x, *op;
	const char *why = NULL;
	if (!root)
		return "not JSON";
	cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(
	                          root, "input_desc")) if (!slice_dtype(cJSON_GetArrayItem(x, 0)))
	    why = "dtype";
	cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(
	                          root, "output_desc")) if (!slice_dtype(x)) why = "dtype";
	cJSON_ArrayForEach(op, cJSON_GetObjectItemCaseSensitive(root, "op_desc"))
	{
		const cJSON *nm = cJSON_GetObjectItemCaseSensitive(op, "name");
		bool attr_tail;
		int k = 0;
		if (!cJSON_IsString(nm) || !slice_op(nm->valuestring)) {
			why = "op";
			break;
		}
		attr_tail = !strcmp(nm->valuestring, "Cast") ||
		            !strcmp(nm->valuestring, "Reshape") ||
		            !strcmp(nm->valuestring, "BroadcastTo");
		cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(op, "input_desc"))
		{
			const cJSON *t = cJSON_GetArrayItem(x, 0);
			if (k++ > 0 && attr_tail)
				break;
			if (t && !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(t, "value")) &&
			    !slice_dtype(t))
				why = "dtype";
		}
		cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(
		                          op, "output_desc")) if (!slice_dtype(x)) why = "dtype";
	}
	cJSON_Delete(root);
	return why;
}

static void
corpus_dir(const char *dir, int *eligible, int *skipped)
{
	struct dirent **ents = NULL;
	int n = scandir(dir, &ents, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		const char *nm = ents[i]->d_name, *dot = strrchr(nm, '.');
		char path[4096];
		struct stat st;
		size_t len;
		char *buf;
		snprintf(path, sizeof path, "%s/%s", dir, nm);
		if (nm[0] == '.' || stat(path, &st) != 0)
			goto next;
		if (S_ISDIR(st.st_mode)) {
			corpus_dir(path, eligible, skipped);
			goto next;
		}
		if (!dot || (strcmp(dot, ".info") && strcmp(dot, ".json")))
			goto next;
		if (!(buf = read_all(path, &len)))
			goto next;
		if (ineligible(buf, len)) {
			(*skipped)++;
		} else {
			(*eligible)++;
			OKF(check(nm, buf, len, 7, NULL), "%s parses", nm);
		}
		free(buf);
	next:
		free(ents[i]);
	}
	free(ents);
}

static void
corpus(void)
{
	const char *dir = t_corpus_dir();
	int eligible = 0, skipped = 0;
	if (!dir) {
		t_skip("../shared/corpus/akg is absent");
		return;
	}
	corpus_dir(dir, &eligible, &skipped);
	printf("# corpus: %d slice-eligible files run on aarch64, %d outside the slice\n", eligible,
	       skipped);
	OK(eligible > 0);
}

static void
skip_all(void)
{
	t_skip("qemu-aarch64, aarch64-linux-gnu-gcc or the arm64 libc is missing");
}

static bool
executable(const char *p)
{
	return p && *p && access(p, X_OK) == 0;
}

int
main(int argc, char **argv)
{
	double t0;
	KcErr err = {0};
	const char *tmp = getenv("TMPDIR");

	runner = argc > 1 ? argv[1] : NULL;
	qemu = argc > 2 ? argv[2] : NULL;
	sysroot = argc > 3 ? argv[3] : "/usr/aarch64-linux-gnu";
	if (!executable(runner) || !executable(qemu) || access(sysroot, R_OK) != 0) {
		t_sub("setup", skip_all);
		return t_done();
	}
	kc_compiler_init();
	t0 = now();
	snprintf(workdir, sizeof workdir, "%s/kcs-a64-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(workdir)) {
		printf("Bail out! mkdtemp %s\n", workdir);
		return 1;
	}
	OK(kc_target_host(&host, &err) == KC_OK);
	printf("# host target %s; aarch64 targets under %s -L %s\n", host.name, qemu, sysroot);
	t_sub("chain_sizes", chain_sizes);
	t_sub("broadcasts", broadcasts);
	t_sub("math", math);
	t_sub("casts", casts);
	t_sub("compare_select", compare_select);
	t_sub("reshape_broadcast", reshape_broadcast);
	t_sub("reductions", reductions);
	t_sub("transposes", transposes);
	t_sub("template_sweep", template_sweep);
	t_sub("trig", trig);
	t_sub("corpus", corpus);
	for (int ti = 0; ti < NTARGETS; ti++)
		printf("# %s: max float32 difference from x86-64 %lld ulp, float16/bfloat16 %lld "
		       "ulp\n",
		       a64_targets[ti], (long long)max_ulp32[ti], (long long)max_ulp16[ti]);
	printf("# %d graphs, %d qemu runs, %.1f s (compiling %.1f s, in qemu %.1f s)\n", n_graphs,
	       n_runs, now() - t0, compile_s, qemu_s);
	for (int i = 0; i < 4; i++) {
		static const char *const left[] = {"k.so", "job", "out", "log"};
		char p[300];
		snprintf(p, sizeof p, "%s/%s", workdir, left[i]);
		unlink(p);
	}
	rmdir(workdir);
	return t_done();
}
