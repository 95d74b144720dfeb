/* test_templates.c - correctness of the default schedule templates over a
 * sweep of shapes and dtypes.
 *
 * For every default template ("matmul", "reduce", "injective"; Conv2D takes
 * "reduce" today) composite graphs are built as JSON over a sweep of sizes:
 * 1, small primes (3, 5, 7, 13, 17, 31), odd tails around vector widths
 * (15, 16, 17, 33, 63, 65) and a few large shapes (1024x1024x1024 and
 * 128x3072x768 MatMul, 1x1000x2048 GEMV, [4096,768] reductions, ...), in
 * float32, float16 where the op allows and int32 for injective/reduce
 * graphs (and small integer MatMuls). Families:
 *   matmul      MatMul, the four transpose_a/transpose_b combinations with
 *               M, N and K each over the sweep (K = 1, N < vector width,
 *               tails in all three), cubes, GEMV (M = 1, N = 1), float16
 *               and float16 -> float32, int32, large shapes;
 *   batchmatmul batch 1, 3, 12, batch broadcasting ([1,M,K] x [B,K,N],
 *               [B,M,K] x [1,K,N], rank 3 x rank 2, rank 2 x rank 3, rank 4
 *               against rank 3), attention-sized products;
 *   epilogue    MatMul/BatchMatMul + bias [N] + GeLU (tanh form) + Cast to
 *               float16 as one composite (also with the float32 bias sum as
 *               a second output, and over several K blocks); computed
 *               operands (Cast of a float16 weight, a scaled activation);
 *               a softmax after the product;
 *   reduce      ReduceSum/ReduceMax (some ReduceMin/ReduceProd) over the
 *               last, first and a middle axis, several axes, all axes,
 *               keep_dims or not, float32/float16/int32;
 *   softmax     ReduceMax, Sub, Exp, ReduceSum, RealDiv over rows of 1, 7,
 *               128, 768 and the odd tails (float32, float16 computed in
 *               float32, pure float16);
 *   layernorm   mean, variance, Rsqrt, gamma, beta (outputs y, mean,
 *               variance) over the same rows;
 *   injective   elementwise chains with broadcasts, Select, Cast, over odd
 *               shapes of rank 1-4 (float32, float16, int32);
 *   transpose   2-D and 4-D Transpose (alone and fused into an Add); tiled
 *               transposes of every element size (primes, whole tiles, 4-D),
 *               followed by Casts between sizes or a Mul, and two with large
 *               outputs (non-temporal stores); permuted copies keeping the
 *               last axis (large ones non-temporal); also with
 *               parallel_grain 1;
 *   conv2d      NHWC and NCHW, stride 2, dilation 2, symmetric and
 *               asymmetric pads, groups 2, depthwise, 1x1, odd spatial
 *               sizes, a bias+ReLU epilogue, float16.
 *
 * Each graph is parsed, given kc_schedule_default for the host, compiled,
 * dlopen'ed and run on kc_interp_random_inputs data (seed = a hash of the
 * case label, so a case replays alone):
 *   - serially (rt == NULL), 64-byte aligned buffers, outputs pre-filled
 *     with 0xFF bytes (NaN / -1);
 *   - through a 3-thread KcsRuntime, every buffer only element-aligned,
 *     outputs pre-filled with 0x7F bytes;
 *   - for the matmul, batchmatmul, epilogue, reduce, softmax and layernorm
 *     families and the tiled transposes (about half of their cases in CI,
 *     chosen by the seed) also
 *     with the same template and "parallel_grain": 1, so even small shapes
 *     are split over 3 tasks (partition tails); for the "matmul" template
 *     with tiny GEMM blocks too ("kc" 1/5/16/100, "mc" 1/17, "nc" 1/50,
 *     from the seed), so small shapes get K, row and column block tails,
 *     when the template takes those knobs (else parallel_grain alone).
 * An element left unwritten is caught by one of the two fills. Every
 * buffer has 64 guard bytes on either side that must stay untouched, and
 * the inputs must be unchanged. Outputs are compared with kc_interp_ties
 * (elements that depend on a near-tie comparison are excused): float32
 * |got - want| <= atol + 1e-4 |want| with atol = 1e-4, or 1e-5 K for a
 * contraction over K (MatMul, Conv2D), 1e-2 when float16 is upstream,
 * integers and bools exactly.
 *
 * A failing case prints its JSON and a curl line for POST /v1/verify with
 * the same seed (same inputs), so it reproduces against a running kcsd.
 *
 *   test_templates [--full] [--filter SUBSTR] [--verbose]
 *
 * The default sweep is sized for CI: about 65 s of CPU, two cases at a
 * time (KC_TEMPLATES_JOBS, default the CPU count up to 4).
 * --full, or KC_TEMPLATES_SWEEP=full, runs the long sweep (every M x N x K
 * of the sweep for all four transposes, every pair of sizes for
 * reductions and transposes, more large shapes; tens of minutes).
 * KC_TEMPLATES_FILTER=SUBSTR (or --filter) runs only cases whose label
 * contains SUBSTR.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "compiler.h"
#include "t.h"
#include "telem.h"
#include "tkernel.h"

/* ---- options and bookkeeping ------------------------------------------------ */
static KcTarget host;
static bool full, verbose;
static const char *filter;

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds of the calling thread */
static double
thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds of the process (all threads) */
static double
cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* One case: built by a family on the main thread, run by a worker. */
typedef struct Case {
	char label[256];
	char *json;
	double atol; /* float32 absolute tolerance (at least 1e-4 is used) */
	bool grain1; /* also run with parallel_grain 1 */
	uint64_t seed;
	/* results, written by the worker that ran it */
	bool ok, grain1_ran, blocks_ran; /* blocks: the tiny GEMM blocking knobs */
	const char *tmpl;                /* the default template (a static string of sched.c) */
	char msg[1024];
	double secs, t_compile, t_interp, t_run;
} Case;

static Case *cases;
static int ncases, capcases;
static atomic_int next_case;
static bool fam_grain1; /* the current family's cases run with grain 1 too */
static int jobs;        /* cases run at once (KC_TEMPLATES_JOBS) */

/* Cases per template name, totals. */
static struct {
	const char *name;
	int n;
} tmpl_tally[8];
static int n_cases_total, n_fails_total;
static double slowest_s, sum_compile, sum_interp, sum_run;
static char slowest[256];

static void
tally_template(const char *name)
{
	for (int i = 0; i < 8 && name; i++) {
		if (!tmpl_tally[i].name) {
			tmpl_tally[i].name = name;
			tmpl_tally[i].n = 1;
			return;
		}
		if (!strcmp(tmpl_tally[i].name, name)) {
			tmpl_tally[i].n++;
			return;
		}
	}
}

/* ---- growable text ------------------------------------------------------------ */
typedef struct Buf {
	char *s;
	size_t n, cap;
} Buf;

static void __attribute__((format(printf, 2, 3))) bp(Buf *b, const char *fmt, ...)
{
	va_list ap;
	if (!b->s) {
		b->cap = 1024;
		b->s = malloc(b->cap);
		b->s[0] = 0;
	}
	for (;;) {
		va_start(ap, fmt);
		int m = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
		va_end(ap);
		if (b->n + (size_t)m < b->cap) {
			b->n += (size_t)m;
			return;
		}
		b->cap = b->cap * 2 + (size_t)m + 64;
		b->s = realloc(b->s, b->cap);
	}
}

/* ---- composite JSON builder ------------------------------------------------------ */
/* Short-lived strings (tensor descriptors, shapes): a rotating pool. */
static char pool_s[512][640];
static int pool_i;

static char *
pstr(void)
{
	return pool_s[pool_i++ % 512];
}

/* Shapes have their own pool (they are arguments of descriptors). */
static char shape_s[256][160];
static int shape_i;

/* "a,b,c" */
static const char *
shp(const int64_t *d, int r)
{
	char *s = shape_s[shape_i++ % 256];
	size_t n = 0;
	s[0] = 0;
	for (int i = 0; i < r && n < 160; i++)
		n += (size_t)snprintf(s + n, 160 - n, "%s%lld", i ? "," : "", (long long)d[i]);
	return s;
}
#define SH(...)                                                                                    \
	shp((const int64_t[]){__VA_ARGS__},                                                        \
	    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

/* A tensor descriptor: name, dtype, shape ("16,768"), format. */
static const char *
TF(const char *name, const char *dt, const char *shape, const char *fmt)
{
	char *s = pstr();
	snprintf(s, 640,
	         "{\"data_type\":\"%s\",\"format\":\"%s\",\"shape\":[%s],\"tensor_name\":\"%s\"}",
	         dt, fmt, shape, name);
	return s;
}

static const char *
T(const char *name, const char *dt, const char *shape)
{
	return TF(name, dt, shape, "DefaultFormat");
}

/* A scalar constant operand. */
static int n_const;
static const char *
CST(const char *value, const char *dt)
{
	char *s = pstr();
	snprintf(s, 640,
	         "{\"data_type\":\"%s\",\"format\":\"DefaultFormat\",\"shape\":[1],"
	         "\"tensor_name\":\"c%d\",\"value\":%s}",
	         dt, n_const++, value);
	return s;
}

typedef struct G {
	Buf ins, outs, ops;
} G;

static void
g_in(G *g, const char *desc)
{
	bp(&g->ins, "%s[%s]", g->ins.n ? "," : "", desc);
}

static void
g_out(G *g, const char *desc)
{
	bp(&g->outs, "%s%s", g->outs.n ? "," : "", desc);
}

/* op(attr JSON or "null", output descriptor, nin operand descriptors) */
static void
g_op(G *g, const char *op, const char *attr, const char *out, int nin, ...)
{
	va_list ap;
	bp(&g->ops, "%s{\"attr\":%s,\"name\":\"%s\",\"input_desc\":[", g->ops.n ? "," : "", attr,
	   op);
	va_start(ap, nin);
	for (int i = 0; i < nin; i++)
		bp(&g->ops, "%s[%s]", i ? "," : "", va_arg(ap, const char *));
	va_end(ap);
	bp(&g->ops, "],\"output_desc\":[%s]}", out);
}

/* The graph as JSON (malloc'd); frees g's buffers. */
static char *
g_json(G *g, const char *name)
{
	Buf b = {0};
	bp(&b,
	   "{\"composite\":true,\"op\":\"%s\",\"process\":\"cpu\",\"version\":1,\"input_desc\":[%s]"
	   ","
	   "\"output_desc\":[%s],\"op_desc\":[%s]}",
	   name, g->ins.s ? g->ins.s : "", g->outs.s ? g->outs.s : "", g->ops.s ? g->ops.s : "");
	free(g->ins.s);
	free(g->outs.s);
	free(g->ops.s);
	memset(g, 0, sizeof *g);
	return b.s;
}

/* ---- dtypes ---------------------------------------------------------------------- */
/* ---- running one case ---------------------------------------------------------------- */
#define MAX_ARGS 16
#define GUARD 64
#define GUARD_BYTE 0xCD

typedef struct Kern {
	KcArtifact art;
	void *dl;
	KcsKernelFn fn;
} Kern;

static bool
kern_load(CompileCtx *c, const KcGraph *g, const KcSchedule *s, Kern *k, char *msg, size_t cap,
          double *tc)
{
	KcCompileOptions o = {0};
	KcErr err = {0};
	memset(k, 0, sizeof *k);
	double t0 = thread_cpu();
	KcStatus st = kc_compile(c, g, &host, s, &o, &k->art, &err);
	*tc += thread_cpu() - t0;
	if (st != KC_OK) {
		snprintf(msg, cap, "kc_compile (%s %s): %s: %s at %s", kc_schedule_template(s),
		         kc_schedule_knobs_json(s), kc_status_code(st), err.msg, err.where);
		return false;
	}
	k->fn = t_kernel_load(k->art.object, k->art.object_len, k->art.symbol, &k->dl, msg, cap);
	return k->fn != NULL;
}

static void
kern_free(Kern *k)
{
	if (k->dl)
		dlclose(k->dl);
	kc_artifact_free(&k->art);
}

/* What a case shares between its runs. */
typedef struct Ctx {
	int n, nin;
	KcArgInfo ai[MAX_ARGS];
	int64_t numel[MAX_ARGS];
	size_t bytes[MAX_ARGS];
	void *in0[MAX_ARGS]; /* the inputs */
	void *ref[MAX_ARGS]; /* kc_interp's outputs (index i - nin) */
	uint8_t *tie[MAX_ARGS];
	double tol[MAX_ARGS], atol[MAX_ARGS];
} Ctx;

/* "[3,16]" of flat element e of output arg i */
static void
coords(const Ctx *x, int i, int64_t e, char *out, size_t cap)
{
	int64_t ix[KC_MAX_RANK];
	const KcArgInfo *a = &x->ai[i];
	for (int d = a->rank - 1; d >= 0; d--) {
		ix[d] = a->shape[d] ? e % a->shape[d] : 0;
		e = a->shape[d] ? e / a->shape[d] : 0;
	}
	size_t n = (size_t)snprintf(out, cap, "[");
	for (int d = 0; d < a->rank && n < cap; d++)
		n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? "," : "", (long long)ix[d]);
	if (n < cap)
		snprintf(out + n, cap - n, "]");
}

/* Runs fn once with rt on fresh buffers (placed `shift` = one element past
 * a 64-byte boundary when misalign, outputs filled with `fill`), then checks
 * guards, inputs and outputs. Appends the first problem to msg. */
static bool
run_once(const Ctx *x, KcsKernelFn fn, const KcsRuntime *rt, bool misalign, int fill,
         const char *what, char *msg, size_t cap, double *trun)
{
	unsigned char *base[MAX_ARGS] = {0};
	void *args[MAX_ARGS] = {0};
	size_t tot[MAX_ARGS];
	bool ok = true;

	for (int i = 0; i < x->n; i++) {
		size_t shift = misalign ? t_dt_bytes(x->ai[i].dtype) : 0;
		tot[i] = (x->bytes[i] + 2 * GUARD + 64 + 63) / 64 * 64;
		base[i] = aligned_alloc(64, tot[i]);
		memset(base[i], GUARD_BYTE, tot[i]);
		args[i] = base[i] + GUARD + shift;
		if (i < x->nin)
			memcpy(args[i], x->in0[i], x->bytes[i]);
		else
			memset(args[i], fill, x->bytes[i]);
	}
	double t0 = now();
	int32_t rc = fn(rt, args, NULL);
	*trun += now() - t0;
	if (rc != 0) {
		snprintf(msg, cap, "%s: the kernel returned %d", what, rc);
		ok = false;
	}
	for (int i = 0; i < x->n && ok; i++) { /* guards */
		const unsigned char *p = args[i];
		for (unsigned char *q = base[i]; q < base[i] + tot[i] && ok; q++) {
			if (q == p)
				q += x->bytes[i]; /* skip the argument itself */
			if (q < base[i] + tot[i] && *q != GUARD_BYTE) {
				long long off =
				    q < p ? -(long long)(p - q) : (long long)(q - p - x->bytes[i]);
				snprintf(msg, cap,
				         "%s: wrote outside %s %s (arg %d, %lld bytes) at byte "
				         "%lld %s it",
				         what, x->ai[i].is_output ? "output" : "input",
				         x->ai[i].tensor_name, i, (long long)x->bytes[i],
				         off < 0 ? -off : off + 1, off < 0 ? "before" : "after");
				ok = false;
			}
		}
	}
	for (int i = 0; i < x->nin && ok; i++)
		if (memcmp(args[i], x->in0[i], x->bytes[i]) != 0) {
			snprintf(msg, cap, "%s: input %d (%s) was modified", what, i,
			         x->ai[i].tensor_name);
			ok = false;
		}
	for (int i = x->nin; i < x->n && ok; i++) {
		const char *dt = x->ai[i].dtype;
		bool fl = t_dt_float(dt);
		int64_t bad = 0, first = -1;
		double maxerr = 0;
		for (int64_t e = 0; e < x->numel[i]; e++) {
			double g = t_as_f64(dt, args[i], e), w = t_as_f64(dt, x->ref[i], e);
			bool same = g == w || (isnan(g) && isnan(w));
			if (!same && fl && !isnan(g) && !isnan(w)) {
				double d = fabs(g - w);
				same = d <= x->atol[i] + x->tol[i] * fabs(w);
				if (d > maxerr && !x->tie[i][e])
					maxerr = d;
			}
			if (!same && !x->tie[i][e] && bad++ == 0)
				first = e;
		}
		if (bad) {
			char at[96], sh[96] = "";
			size_t m = 0;
			coords(x, i, first, at, sizeof at);
			for (int d = 0; d < x->ai[i].rank && m < sizeof sh; d++)
				m += (size_t)snprintf(sh + m, sizeof sh - m, "%s%lld", d ? "," : "",
				                      (long long)x->ai[i].shape[d]);
			snprintf(
			    msg, cap,
			    "%s: output %d (%s %s[%s]): %lld of %lld elements differ; first %s "
			    "got %.9g want %.9g (tolerance %.3g + %.3g|want|, max abs err %.3g)",
			    what, i - x->nin, x->ai[i].tensor_name, dt, sh, (long long)bad,
			    (long long)x->numel[i], at, t_as_f64(dt, args[i], first),
			    t_as_f64(dt, x->ref[i], first), x->atol[i], x->tol[i], maxerr);
			ok = false;
		}
	}
	for (int i = 0; i < x->n; i++)
		free(base[i]);
	return ok;
}

static uint64_t
fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h % 1000000007ull; /* short enough to type */
}

/* Compiles json with the default schedule, runs it (and its grain-1
 * variant) and compares with the interpreter. atol32: the absolute
 * float32 tolerance (at least 1e-4). */
static bool
check(Case *cs)
{
	const char *json = cs->json;
	char *msg = cs->msg;
	size_t cap = sizeof cs->msg;
	double atol32 = cs->atol;
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	Kern k = {0}, k1 = {0};
	Ctx x;
	bool ok = false;

	memset(&x, 0, sizeof x);
	msg[0] = 0;
	KcStatus st = kc_parse(c, json, strlen(json), &lim, &g, &err);
	if (st != KC_OK) {
		snprintf(msg, cap, "kc_parse: %s: %s at %s", kc_status_code(st), err.msg,
		         err.where);
		goto done;
	}
	x.n = kc_graph_nargs(g);
	if (x.n > MAX_ARGS) {
		snprintf(msg, cap, "too many arguments (%d)", x.n);
		goto done;
	}
	KcSchedule *s = kc_schedule_default(c, g, &host);
	cs->tmpl = kc_schedule_template(s);
	if (!kern_load(c, g, s, &k, msg, cap, &cs->t_compile))
		goto done;
	char what1[200] = "3-thread runtime, knobs {\"parallel_grain\":1}";
	if (cs->grain1) {
		KcSchedule *s1 = NULL;
		/* a MatMul's GEMM stage also gets tiny blocks (K, row and column
		 * blocks with tails everywhere) when its template takes them */
		static const int kcs[] = {1, 5, 16, 100};
		char knobs[128];
		snprintf(
		    knobs, sizeof knobs, "{\"parallel_grain\":1,\"kc\":%d,\"mc\":%d,\"nc\":%d}",
		    kcs[cs->seed / 2 % 4], cs->seed / 8 % 2 ? 17 : 1, cs->seed / 16 % 2 ? 50 : 1);
		st = KC_BAD_SCHEDULE;
		if (!strcmp(kc_schedule_template(s), "matmul"))
			st = kc_schedule_from_json(c, g, &host, kc_schedule_template(s), knobs, &s1,
			                           &err);
		/* an injective one a tile size too (tiled transposes: tiles that
		 * hold 1, 2 or 4 vw-column groups of a narrowing cast's sub-block) */
		static const int tiles[] = {16, 32, 64, 256};
		if (!strcmp(kc_schedule_template(s), "injective")) {
			snprintf(knobs, sizeof knobs, "{\"parallel_grain\":1,\"tile\":%d}",
			         tiles[cs->seed / 2 % 4]);
			st = kc_schedule_from_json(c, g, &host, "injective", knobs, &s1, &err);
		}
		if (st == KC_OK) {
			snprintf(what1, sizeof what1, "3-thread runtime, knobs %s", knobs);
			cs->blocks_ran = true;
		} else
			st = kc_schedule_from_json(c, g, &host, kc_schedule_template(s),
			                           "{\"parallel_grain\":1}", &s1, &err);
		if (st != KC_OK) {
			snprintf(msg, cap, "the %s template refuses {\"parallel_grain\":1}: %s",
			         kc_schedule_template(s), err.msg);
			goto done;
		}
		if (!kern_load(c, g, s1, &k1, msg, cap, &cs->t_compile))
			goto done;
	}
	for (int i = 0; i < x.n; i++) {
		KcArgInfo *a = &x.ai[i];
		kc_graph_arg(g, i, a);
		x.numel[i] = 1;
		for (int d = 0; d < a->rank; d++)
			x.numel[i] *= a->shape[d];
		x.bytes[i] = (size_t)x.numel[i] * t_dt_bytes(a->dtype);
		x.in0[i] = calloc(1, x.bytes[i] + 8);
		if (a->is_output) {
			x.tie[i] = calloc((size_t)x.numel[i] + 1, 1);
			x.tol[i] = kc_interp_half_upstream(c, g, i - x.nin) ? 1e-2 : 1e-4;
			x.atol[i] = x.tol[i] > 1e-4 ? x.tol[i] : atol32 > 1e-4 ? atol32 : 1e-4;
		} else {
			x.nin++;
		}
	}
	kc_interp_random_inputs(c, g, cs->seed, x.in0);
	for (int i = 0; i < x.n; i++) {
		x.ref[i] = calloc(1, x.bytes[i] + 8);
		if (i < x.nin)
			memcpy(x.ref[i], x.in0[i], x.bytes[i]);
	}
	double t0 = thread_cpu();
	st = kc_interp_ties(c, g, x.ref, (size_t)1 << 33, x.tie + x.nin, &err);
	cs->t_interp += thread_cpu() - t0;
	if (st != KC_OK) {
		snprintf(msg, cap, "kc_interp: %s: %s", kc_status_code(st), err.msg);
		goto done;
	}
	ok = run_once(&x, k.fn, NULL, false, 0xFF, "serial (rt NULL)", msg, cap, &cs->t_run) &&
	     run_once(&x, k.fn, &t_pool, true, 0x7F, "3-thread runtime", msg, cap, &cs->t_run);
	if (ok && k1.fn) {
		cs->grain1_ran = true;
		ok = run_once(&x, k1.fn, &t_pool, true, 0x7F, what1, msg, cap, &cs->t_run);
	}
done:
	for (int i = 0; i < x.n; i++) {
		free(x.in0[i]);
		free(x.ref[i]);
		free(x.tie[i]);
	}
	kern_free(&k);
	kern_free(&k1);
	compile_ctx_free(c);
	return ok;
}

/* Queues one case of the current family (unless filtered out); takes json. */
static void
run_case(const char *label, char *json, double atol32)
{
	if (filter && !strstr(label, filter)) {
		free(json);
		return;
	}
	if (ncases == capcases) {
		capcases = capcases ? 2 * capcases : 256;
		cases = realloc(cases, sizeof *cases * (size_t)capcases);
	}
	Case *cs = &cases[ncases++];
	memset(cs, 0, sizeof *cs);
	snprintf(cs->label, sizeof cs->label, "%s", label);
	cs->json = json;
	cs->atol = atol32;
	cs->seed = fnv(label);
	cs->grain1 = fam_grain1 && (full || cs->seed % 2 == 0); /* CI: about half */
}

/* The case each worker runs, for the crash report. */
#define MAX_JOBS 16
static Case *volatile running[MAX_JOBS];

static void
say(const char *s)
{
	size_t n = strlen(s);
	while (n > 0) {
		ssize_t w = write(1, s, n);
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* A kernel that crashes takes the process with it: name the cases that
 * were running (with their JSON and seed), then die of the signal. */
static void
on_crash(int sig)
{
	say("\n# CRASH (signal) while running:\n");
	for (int i = 0; i < MAX_JOBS; i++) {
		Case *cs = running[i];
		char seed[32];
		int n = 0;
		uint64_t v;
		if (!cs)
			continue;
		v = cs->seed;
		do
			seed[sizeof seed - 2 - n++] = (char)('0' + v % 10);
		while ((v /= 10) && n < 30);
		seed[sizeof seed - 1] = 0;
		say("# ");
		say(cs->label);
		say(" (seed ");
		say(seed + sizeof seed - 1 - n);
		say(")\n# ");
		say(cs->json);
		say("\n");
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void *
case_worker(void *arg)
{
	int slot = (int)(intptr_t)arg;
	for (;;) {
		int i = atomic_fetch_add(&next_case, 1);
		if (i >= ncases)
			break;
		running[slot] = &cases[i];
		double t0 = now();
		cases[i].ok = check(&cases[i]);
		cases[i].secs = now() - t0;
	}
	running[slot] = NULL;
	return NULL;
}

/* Runs the queued cases on `jobs` threads, then reports them in order. */
static void
run_cases(int *fails, int *grain1_runs, int *blocks_runs)
{
	pthread_t th[MAX_JOBS];
	int started = 0;
	atomic_store(&next_case, 0);
	for (int i = 1; i < jobs && i < MAX_JOBS; i++)
		if (pthread_create(&th[started], NULL, case_worker, (void *)(intptr_t)i) == 0)
			started++;
	case_worker((void *)(intptr_t)0);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < ncases; i++) {
		Case *cs = &cases[i];
		tally_template(cs->tmpl);
		n_cases_total++;
		sum_compile += cs->t_compile;
		sum_interp += cs->t_interp;
		sum_run += cs->t_run;
		*grain1_runs += cs->grain1_ran;
		*blocks_runs += cs->grain1_ran && cs->blocks_ran;
		if (cs->secs > slowest_s) {
			slowest_s = cs->secs;
			snprintf(slowest, sizeof slowest, "%s", cs->label);
		}
		if (!cs->ok) {
			(*fails)++;
			n_fails_total++;
			OKF(0, "%s (seed %llu): %s", cs->label, (unsigned long long)cs->seed,
			    cs->msg);
			printf("# reproduce: save the JSON below as case.json, then\n"
			       "#   curl -s -H 'Content-Type: application/json' --data-binary "
			       "@case.json \"http://127.0.0.1:8787/v1/verify?seed=%llu&threads=0\" "
			       "(threads=3: the runtime)\n# %s\n",
			       (unsigned long long)cs->seed, cs->json);
		} else if (verbose || cs->secs > 2.0) {
			printf("# ok %s (%.2f s: compile %.2f, interpreter %.2f, kernels %.2f)\n",
			       cs->label, cs->secs, cs->t_compile, cs->t_interp, cs->t_run);
		}
		free(cs->json);
	}
	ncases = 0;
	fflush(stdout);
}

/* ---- the sweep ------------------------------------------------------------------------ */
static const int64_t SW[] = {1, 3, 5, 7, 13, 15, 16, 17, 31, 33, 63, 65};
enum { NSW = sizeof SW / sizeof SW[0] };

static const char *
tf(bool b)
{
	return b ? "true" : "false";
}

/* (Batch)MatMul: logical sizes M, N, K, batch dims of a and b (aligned
 * right, numpy broadcast; none for MatMul), transposes, input and output
 * dtypes. epi 0: the product alone; 1: + bias [N], GeLU (tanh form) and a
 * Cast to float16, one composite, the float16 result the only output; 2:
 * as 1, and the float32 bias sum as a second output. */
static void
mm(int nab, const int64_t *abat, int nbb, const int64_t *bbat, int64_t M, int64_t N, int64_t K,
   bool ta, bool tb, const char *idt, const char *odt, int epi)
{
	int64_t as[KC_MAX_RANK], bs[KC_MAX_RANK], os[KC_MAX_RANK];
	int nob = nab > nbb ? nab : nbb;
	bool batched = nab || nbb;
	const char *op = batched ? "BatchMatMul" : "MatMul";
	char label[256], attr[256];
	G g = {0};

	for (int d = 0; d < nab; d++)
		as[d] = abat[d];
	as[nab] = ta ? K : M;
	as[nab + 1] = ta ? M : K;
	for (int d = 0; d < nbb; d++)
		bs[d] = bbat[d];
	bs[nbb] = tb ? N : K;
	bs[nbb + 1] = tb ? K : N;
	for (int d = 0; d < nob; d++) {
		int da = d - (nob - nab), db = d - (nob - nbb);
		int64_t x = da >= 0 ? abat[da] : 1, y = db >= 0 ? bbat[db] : 1;
		os[d] = x == 1 ? y : x;
	}
	os[nob] = M;
	os[nob + 1] = N;
	const char *ash = shp(as, nab + 2), *bsh = shp(bs, nbb + 2), *osh = shp(os, nob + 2);
	snprintf(label, sizeof label, "%s a[%s] b[%s] M=%lld N=%lld K=%lld ta=%d tb=%d %s->%s%s",
	         op, ash, bsh, (long long)M, (long long)N, (long long)K, ta, tb, idt, odt,
	         epi == 1   ? " +bias+gelu+cast"
	         : epi == 2 ? " +bias+gelu+cast (2 outputs)"
	                    : "");
	if (filter && !strstr(label, filter))
		return;
	snprintf(attr, sizeof attr,
	         "[{\"name\":\"transpose_a\",\"value\":%s},{\"name\":\"transpose_b\",\"value\":%s},"
	         "{\"name\":\"dst_type\",\"value\":\"%s\"}]",
	         tf(ta), tf(tb), odt);
	g_in(&g, T("a", idt, ash));
	g_in(&g, T("b", idt, bsh));
	g_op(&g, op, attr, T(epi ? "mm" : "y", odt, osh), 2, T("a", idt, ash), T("b", idt, bsh));
	if (epi) {
		const char *n = SH(N), *f = odt;
		g_in(&g, T("bias", f, n));
		g_op(&g, "Add", "null", T("z", f, osh), 2, T("mm", f, osh), T("bias", f, n));
		g_op(&g, "Mul", "null", T("z2", f, osh), 2, T("z", f, osh), T("z", f, osh));
		g_op(&g, "Mul", "null", T("z3", f, osh), 2, T("z2", f, osh), T("z", f, osh));
		g_op(&g, "Mul", "null", T("c3", f, osh), 2, T("z3", f, osh), CST("0.044715", f));
		g_op(&g, "Add", "null", T("in", f, osh), 2, T("z", f, osh), T("c3", f, osh));
		g_op(&g, "Mul", "null", T("sc", f, osh), 2, T("in", f, osh),
		     CST("0.7978845608028654", f));
		g_op(&g, "Tanh", "null", T("th", f, osh), 1, T("sc", f, osh));
		g_op(&g, "Add", "null", T("p1", f, osh), 2, T("th", f, osh), CST("1", f));
		g_op(&g, "Mul", "null", T("zp", f, osh), 2, T("z", f, osh), T("p1", f, osh));
		g_op(&g, "Mul", "null", T("ge", f, osh), 2, T("zp", f, osh), CST("0.5", f));
		g_op(&g, "Cast", "[{\"name\":\"dst_type\",\"value\":\"float16\"}]",
		     T("y", "float16", osh), 1, T("ge", f, osh));
		g_out(&g, T("y", "float16", osh));
		if (epi == 2)
			g_out(&g, T("z", f, osh));
	} else {
		g_out(&g, T("y", odt, osh));
	}
	run_case(label, g_json(&g, batched ? "Fused_BatchMatMul_sweep" : "Fused_MatMul_sweep"),
	         1e-5 * (double)K);
}

static void
mm2(int64_t M, int64_t N, int64_t K, bool ta, bool tb, const char *idt, const char *odt, int epi)
{
	mm(0, NULL, 0, NULL, M, N, K, ta, tb, idt, odt, epi);
}

static void
matmul(void)
{
	fam_grain1 = true;
	/* each of M, N, K over the sweep, the other two varying with it */
	for (int t = 0; t < 4; t++)
		for (int d = 0; d < 3; d++)
			for (int i = 0; i < NSW; i++) {
				int64_t v[3];
				v[d] = SW[i];
				v[(d + 1) % 3] = SW[(i * 5 + 2 + t) % NSW];
				v[(d + 2) % 3] = SW[(i * 7 + 5 + 3 * t) % NSW];
				mm2(v[0], v[1], v[2], t & 1, t >> 1, "float32", "float32", 0);
			}
	/* cubes and the full cross product (--full) */
	for (int t = 0; t < 4; t++)
		for (int i = 0; i < NSW; i++)
			for (int j = 0; j < NSW; j++)
				for (int l = 0; l < NSW; l++)
					if ((i == j && j == l) || full)
						mm2(SW[i], SW[j], SW[l], t & 1, t >> 1, "float32",
						    "float32", 0);
	/* edges: K = 1 with large M, N; N and M below a vector width against
	 * long K; one row or column */
	static const int64_t edges[][3] = {
	    {64, 65, 1},  {129, 257, 1}, {1, 1, 1},    {1, 1, 4097}, {65, 3, 129}, {64, 7, 256},
	    {128, 1, 64}, {3, 128, 257}, {1, 64, 1},   {64, 1, 1},   {2, 2, 2},    {4, 4, 4},
	    {8, 8, 8},    {32, 32, 32},  {48, 48, 48}, {96, 17, 80}, {17, 96, 80}, {255, 33, 9}};
	for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
		for (int t = 0; t < 4; t++)
			mm2(edges[e][0], edges[e][1], edges[e][2], t & 1, t >> 1, "float32",
			    "float32", 0);
	/* blocking edges of a blocked GEMM: K just over one block (512) and K
	 * split into uneven blocks, M just over one row block (144), N around
	 * the register tile (48 columns with AVX-512), K past 4096 (short
	 * K-blocks) */
	static const int64_t blk[][3] = {{17, 33, 513},  {17, 33, 1025}, {145, 47, 33},
	                                 {9, 49, 700},   {2, 95, 97},    {150, 97, 600},
	                                 {17, 33, 4097}, {5, 70, 12289}};
	for (size_t e = 0; e < sizeof blk / sizeof blk[0]; e++)
		for (int t = 0; t < 4; t++)
			mm2(blk[e][0], blk[e][1], blk[e][2], t & 1, t >> 1, "float32", "float32",
			    0);
	/* GEMV: M = 1 (and N = 1), including the classifier head 1x1000x2048 */
	static const int64_t gn[] = {1, 16, 17, 1000}, gk[] = {1, 17, 768, 2048};
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			for (int t = 0; t < (full ? 4 : 2); t++) { /* tb = 0, 1 (and ta) */
				mm2(1, gn[i], gk[j], t >> 1, t & 1, "float32", "float32", 0);
				mm2(gn[i], 1, gk[j], t >> 1, t & 1, "float32", "float32", 0);
			}
	/* float16 -> float16 and float16 -> float32 */
	for (int i = 0; i < NSW; i++) {
		int64_t M = SW[i], N = SW[(i + 4) % NSW], K = SW[(i + 8) % NSW];
		mm2(M, N, K, i & 1, (i >> 1) & 1, "float16", "float16", 0);
		mm2(N, K, M, (i >> 1) & 1, i & 1, "float16", "float32", 0);
	}
	mm2(64, 768, 768, false, true, "float16", "float16", 0);
	/* bfloat16 -> bfloat16 and -> float32 (a float32 GEMM on converted
	 * copies, like float16) */
	for (int i = 0; i < NSW; i += 3) {
		int64_t M = SW[(i + 2) % NSW], N = SW[(i + 5) % NSW], K = SW[(i + 9) % NSW];
		mm2(M, N, K, i & 1, (i >> 1) & 1, "bfloat16", "bfloat16", 0);
		mm2(N, K, M, (i >> 1) & 1, i & 1, "bfloat16", "float32", 0);
	}
	/* a half A read in place (lower_gemm.c's a_pack: converted a
	 * micro-panel at a time on the stack), with several K-blocks, a long K
	 * (short blocks), M below the micro-tile's rows, row blocks */
	static const int64_t hb[][3] = {
	    {17, 33, 1025}, {3, 40, 700}, {5, 70, 12289}, {150, 97, 600}};
	for (size_t e = 0; e < sizeof hb / sizeof hb[0]; e++)
		for (int t = 0; t < 4; t++)
			mm2(hb[e][0], hb[e][1], hb[e][2], t & 1, t >> 1,
			    e & 1 ? "bfloat16" : "float16",
			    t == 3 ? (e & 1 ? "bfloat16" : "float16") : "float32", 0);
	/* int32: exact */
	for (int i = 0; i < NSW; i += full ? 1 : 2)
		mm2(SW[i], SW[(i + 3) % NSW], SW[(i + 7) % NSW], i & 2, i & 4, "int32", "int32", 0);
	/* large */
	mm2(1024, 1024, 1024, false, true, "float32", "float32", 0);
	mm2(128, 3072, 768, false, false, "float32", "float32", 0);
	mm2(128, 768, 3072, false, true, "float32", "float32", 0);
	mm2(1000, 1000, 17, true, false, "float32", "float32", 0);
	if (full) {
		for (int t = 0; t < 4; t++) {
			mm2(1024, 1024, 1024, t & 1, t >> 1, "float32", "float32", 0);
			mm2(128, 3072, 768, t & 1, t >> 1, "float32", "float32", 0);
			mm2(1023, 1025, 257, t & 1, t >> 1, "float32", "float32", 0);
		}
		mm2(512, 512, 512, false, false, "float16", "float16", 0);
	}
}

static void
batchmatmul(void)
{
	fam_grain1 = true;
	static const int64_t shapes[][3] = {{1, 1, 1},   {5, 17, 3},  {16, 15, 33},
	                                    {7, 65, 13}, {31, 1, 63}, {64, 64, 64}};
	static const int64_t batches[] = {1, 3, 12};
	int n = 0;
	for (size_t b = 0; b < 3; b++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++, n++) {
			int64_t B = batches[b];
			for (int t = 0; t < 4; t++)
				if (full || t == n % 4)
					mm(1, &B, 1, &B, shapes[s][0], shapes[s][1], shapes[s][2],
					   t & 1, t >> 1, "float32", "float32", 0);
		}
	/* every transpose for one odd shape */
	for (int t = 0; t < 4; t++)
		mm(1, (const int64_t[]){3}, 1, (const int64_t[]){3}, 5, 17, 3, t & 1, t >> 1,
		   "float32", "float32", 0);
	/* batch broadcasting */
	static const int64_t bshapes[][3] = {{5, 17, 3}, {16, 15, 33}, {1, 65, 7}};
	for (size_t s = 0; s < 3; s++) {
		int64_t M = bshapes[s][0], N = bshapes[s][1], K = bshapes[s][2];
		bool ta = s == 1, tb = s == 2;
		int64_t one = 1, B = 3, B12 = 12;
		mm(1, &one, 1, &B, M, N, K, ta, tb, "float32", "float32", 0); /* [1,M,K]x[B,K,N] */
		mm(1, &B12, 1, &one, M, N, K, tb, ta, "float32", "float32",
		   0);                                                        /* [B,M,K]x[1,K,N] */
		mm(1, &B, 0, NULL, M, N, K, ta, tb, "float32", "float32", 0); /* rank 3 x rank 2 */
		mm(0, NULL, 1, &B, M, N, K, tb, ta, "float32", "float32", 0); /* rank 2 x rank 3 */
		mm(2, (const int64_t[]){2, 1}, 2, (const int64_t[]){1, 3}, M, N, K, ta, tb,
		   "float32", "float32", 0);
		mm(2, (const int64_t[]){2, 3}, 1, (const int64_t[]){3}, M, N, K, tb, ta, "float32",
		   "float32", 0);
	}
	/* float16 */
	mm(1, (const int64_t[]){3}, 1, (const int64_t[]){3}, 17, 16, 15, false, true, "float16",
	   "float16", 0);
	mm(1, (const int64_t[]){1}, 1, (const int64_t[]){5}, 7, 33, 13, true, false, "float16",
	   "float32", 0);
	/* attention: Q K^T and P V */
	mm(1, (const int64_t[]){12}, 1, (const int64_t[]){12}, 128, 128, 64, false, true, "float32",
	   "float32", 0);
	mm(1, (const int64_t[]){12}, 1, (const int64_t[]){12}, 128, 64, 128, false, false,
	   "float32", "float32", 0);
	if (full)
		mm(2, (const int64_t[]){2, 12}, 2, (const int64_t[]){2, 12}, 128, 128, 64, false,
		   true, "float32", "float32", 0);
}

/* Computed operands ahead of a float32 MatMul: kind 0, a float16 weight
 * cast to float32 (b = Cast(w)); kind 1, a scaled activation (a = x * 0.5)
 * and a transposed weight; kind 2, the product followed by a softmax over
 * its rows (the attention pattern: a reduction after the MatMul). */
static void
mm_around(int64_t M, int64_t N, int64_t K, bool tb, int kind)
{
	static const char *const kinds[] = {"Cast(float16 b)", "a*0.5", "softmax after"};
	char label[256], attr[256];
	const char *f = "float32", *ash = SH(M, K), *bsh = tb ? SH(N, K) : SH(K, N),
	           *osh = SH(M, N), *rsh = SH(M, 1);
	G g = {0};
	snprintf(label, sizeof label, "MatMul M=%lld N=%lld K=%lld tb=%d with %s", (long long)M,
	         (long long)N, (long long)K, tb, kinds[kind]);
	if (filter && !strstr(label, filter))
		return;
	snprintf(attr, sizeof attr,
	         "[{\"name\":\"transpose_a\",\"value\":false},{\"name\":\"transpose_b\","
	         "\"value\":%s}]",
	         tf(tb));
	g_in(&g, T("x", f, ash));
	g_in(&g, T("w", kind == 0 ? "float16" : f, bsh));
	const char *a = T("x", f, ash), *b = T("w", f, bsh);
	if (kind == 0) {
		g_op(&g, "Cast", "[{\"name\":\"dst_type\",\"value\":\"float32\"}]", T("wf", f, bsh),
		     1, T("w", "float16", bsh));
		b = T("wf", f, bsh);
	} else if (kind == 1) {
		g_op(&g, "Mul", "null", T("xs", f, ash), 2, a, CST("0.5", f));
		a = T("xs", f, ash);
	}
	g_op(&g, "MatMul", attr, T(kind == 2 ? "mm" : "y", f, osh), 2, a, b);
	if (kind == 2) {
		static const char keep[] =
		    "[{\"name\":\"axis\",\"value\":[-1]},{\"name\":\"keep_dims\",\"value\":true}]";
		g_op(&g, "ReduceMax", keep, T("m", f, rsh), 1, T("mm", f, osh));
		g_op(&g, "Sub", "null", T("s", f, osh), 2, T("mm", f, osh), T("m", f, rsh));
		g_op(&g, "Exp", "null", T("e", f, osh), 1, T("s", f, osh));
		g_op(&g, "ReduceSum", keep, T("z", f, rsh), 1, T("e", f, osh));
		g_op(&g, "RealDiv", "null", T("y", f, osh), 2, T("e", f, osh), T("z", f, rsh));
	}
	g_out(&g, T("y", f, osh));
	run_case(label, g_json(&g, "Fused_MatMul_around_sweep"), 1e-5 * (double)K);
}

static void
epilogue(void)
{
	fam_grain1 = true;
	static const int64_t shapes[][3] = {{1, 1, 1},    {3, 17, 5},    {16, 16, 16},
	                                    {17, 33, 65}, {65, 15, 31},  {1, 1000, 64},
	                                    {63, 7, 1},   {128, 768, 64}};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (int t = 0; t < 4; t++) {
			if (!full && t != (int)(s % 2) && t != 2 + (int)(s % 2))
				continue; /* CI: both tb, ta alternating */
			mm2(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, "float32",
			    "float32", 1 + (int)(s % 2));
		}
	/* batched, broadcast bias */
	mm(1, (const int64_t[]){3}, 1, (const int64_t[]){3}, 17, 33, 15, false, true, "float32",
	   "float32", 1);
	mm(1, (const int64_t[]){12}, 0, NULL, 5, 65, 16, false, false, "float32", "float32", 2);
	/* over several K blocks */
	mm2(33, 65, 1025, false, false, "float32", "float32", 2);
	mm2(17, 47, 700, false, true, "float32", "float32", 1);
	/* computed operands, a reduction after the product */
	static const int64_t around[][3] = {{1, 17, 33}, {2, 5, 7}, {17, 33, 65}, {65, 49, 600}};
	for (size_t s = 0; s < sizeof around / sizeof around[0]; s++)
		for (int k = 0; k < 3; k++)
			mm_around(around[s][0], around[s][1], around[s][2], (s + (size_t)k) & 1, k);
	/* BERT's FFN: 128 x 3072 x 768 */
	mm2(128, 3072, 768, false, true, "float32", "float32", 1);
	if (full)
		mm2(128, 768, 3072, false, false, "float32", "float32", 2);
}

/* ---- reductions ---------------------------------------------------------------------- */
static void
red(const char *op, const char *dt, int rank, const int64_t *shape, int nax, const int64_t *axes,
    bool keep)
{
	int64_t os[KC_MAX_RANK];
	bool rd[KC_MAX_RANK] = {false};
	int orank = 0;
	char label[256], attr[256], al[64] = "";
	size_t n = 0;
	G g = {0};

	for (int a = 0; a < nax; a++) {
		rd[(axes[a] + rank) % rank] = true;
		n += (size_t)snprintf(al + n, sizeof al - n, "%s%lld", a ? "," : "",
		                      (long long)axes[a]);
	}
	for (int d = 0; d < rank; d++) {
		bool r = nax == 0 || rd[d];
		if (!r)
			os[orank++] = shape[d];
		else if (keep)
			os[orank++] = 1;
	}
	if (orank == 0)
		os[orank++] = 1;
	const char *ish = shp(shape, rank), *osh = shp(os, orank);
	snprintf(label, sizeof label, "%s %s[%s] axis=[%s]%s", op, dt, ish, al,
	         keep ? " keep_dims" : "");
	if (filter && !strstr(label, filter))
		return;
	snprintf(attr, sizeof attr,
	         "[{\"name\":\"axis\",\"value\":[%s]},{\"name\":\"keep_dims\",\"value\":%s}]", al,
	         tf(keep));
	g_in(&g, T("x", dt, ish));
	g_op(&g, op, attr, T("y", dt, osh), 1, T("x", dt, ish));
	g_out(&g, T("y", dt, osh));
	/* float32 sums of many elements: 1e-4 relative to the sum of |x| ~ n */
	int64_t cnt = 1;
	for (int d = 0; d < rank; d++)
		if (nax == 0 || rd[d])
			cnt *= shape[d];
	run_case(label, g_json(&g, "Fused_Reduce_sweep"),
	         strcmp(op, "ReduceSum") ? 1e-4 : 1e-6 * (double)cnt);
}

#define AX(...)                                                                                    \
	(int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[])         \
	{                                                                                          \
		__VA_ARGS__                                                                        \
	}

static void
reduce(void)
{
	static const char *const dts[] = {"float32", "float16", "int32"};
	static const char *const ops[] = {"ReduceSum", "ReduceMax"};
	fam_grain1 = true;
	/* 2-D: last axis, first axis, all axes */
	for (int i = 0; i < NSW; i++)
		for (int j = 0; j < NSW; j++) {
			if (!full && j != (i * 5 + 3) % NSW && j != (i * 7 + 1) % NSW)
				continue;
			int64_t s[2] = {SW[i], SW[j]};
			/* CI: the dtype rotates with the pair, op and axis */
			for (int o = 0; o < 2; o++)
				for (int d = 0; d < 3; d++) {
					bool keep = (i + j + d + o) & 1;
					if (full || d == (i + j + o) % 3)
						red(ops[o], dts[d], 2, s, AX(-1), keep);
					if (full || d == (i + j + o + 1) % 3)
						red(ops[o], dts[d], 2, s, AX(0), !keep);
					if (full || (d == (i + j + o + 2) % 3 && (i + o) % 2 == 0))
						red(ops[o], dts[d], 2, s, 0, NULL, keep);
				}
		}
	/* 3-D and 4-D: middle axes, several axes, negative axes */
	static const int64_t s3[][3] = {{3, 5, 7},   {7, 16, 17}, {1, 33, 1}, {13, 1, 65},
	                                {2, 63, 15}, {5, 17, 31}, {17, 3, 16}};
	for (size_t k = 0; k < sizeof s3 / sizeof s3[0]; k++)
		for (int o = 0; o < 2; o++) {
			const char *dt = dts[(k + (size_t)o) % 3];
			bool keep = (k + (size_t)o) & 1;
			red(ops[o], dt, 3, s3[k], AX(1), keep);
			red(ops[o], dt, 3, s3[k], AX(0, 2), !keep);
			red(ops[o], dt, 3, s3[k], AX(-2, -1), keep);
			red(ops[o], dt, 3, s3[k], AX(0, 1), !keep);
			red(ops[o], dt, 3, s3[k], AX(0, 1, 2), keep);
			if (full)
				for (int d = 0; d < 3; d++) {
					red(ops[o], dts[d], 3, s3[k], AX(0), keep);
					red(ops[o], dts[d], 3, s3[k], AX(2), keep);
					red(ops[o], dts[d], 3, s3[k], AX(1), !keep);
				}
		}
	static const int64_t s4[] = {2, 3, 5, 7}, s4b[] = {3, 16, 1, 33};
	red("ReduceSum", "float32", 4, s4, AX(1, 2), false);
	red("ReduceMax", "float32", 4, s4, AX(0, 3), true);
	red("ReduceSum", "int32", 4, s4b, AX(-3, -1), false);
	red("ReduceMax", "float16", 4, s4b, AX(0, 1, 3), true);
	red("ReduceSum", "float16", 4, s4b, AX(1), true);
	/* ReduceMin and ReduceProd, fewer */
	for (int i = 0; i < NSW; i += 3) {
		int64_t s[2] = {SW[i], SW[(i + 5) % NSW]};
		red("ReduceMin", dts[i % 3], 2, s, AX(-1), true);
		red("ReduceMin", dts[(i + 1) % 3], 2, s, AX(0), false);
		red("ReduceProd", "float32", 2, (const int64_t[]){SW[i], 7}, AX(1), false);
		red("ReduceProd", "int32", 2, (const int64_t[]){5, SW[i]}, AX(0), true);
	}
	/* large: BERT rows, the outer-axis reduction of a [4096,768] gradient */
	red("ReduceSum", "float32", 2, (const int64_t[]){4096, 768}, AX(0), false);
	red("ReduceSum", "float32", 2, (const int64_t[]){4096, 768}, AX(1), true);
	red("ReduceMax", "float16", 2, (const int64_t[]){128, 3072}, AX(-1), true);
	red("ReduceSum", "float32", 2, (const int64_t[]){1024, 1027}, 0, NULL, false);
	red("ReduceSum", "int32", 2, (const int64_t[]){1027, 1024}, AX(0), false);
	red("ReduceMax", "float32", 3, (const int64_t[]){33, 1025, 65}, AX(1), false);
	if (full) {
		red("ReduceSum", "float16", 2, (const int64_t[]){4096, 768}, AX(0), false);
		red("ReduceMax", "float32", 2, (const int64_t[]){4096, 768}, AX(0), true);
		red("ReduceSum", "float32", 3, (const int64_t[]){64, 128, 768}, AX(0, 1), false);
		red("ReduceSum", "float32", 1, (const int64_t[]){1 << 22}, 0, NULL, false);
	}
}

/* softmax over the last axis of [R, C] (kind 0: float32; 1: float16 in
 * and out, computed in float32; 2: float16 throughout) */
static void
softmax(int64_t R, int64_t C, int kind)
{
	static const char keep[] =
	    "[{\"name\":\"axis\",\"value\":[-1]},{\"name\":\"keep_dims\",\"value\":true}]";
	static const char *const kinds[] = {"float32", "float16 via float32", "float16"};
	const char *io = kind ? "float16" : "float32", *f = kind == 2 ? "float16" : "float32";
	const char *xs = SH(R, C), *rs = SH(R, 1);
	char label[128];
	G g = {0};
	snprintf(label, sizeof label, "softmax %s [%lld,%lld]", kinds[kind], (long long)R,
	         (long long)C);
	if (filter && !strstr(label, filter))
		return;
	g_in(&g, T("x", io, xs));
	const char *x = T("x", io, xs);
	if (kind == 1) {
		g_op(&g, "Cast", "[{\"name\":\"dst_type\",\"value\":\"float32\"}]", T("xf", f, xs),
		     1, x);
		x = T("xf", f, xs);
	}
	g_op(&g, "ReduceMax", keep, T("m", f, rs), 1, x);
	g_op(&g, "Sub", "null", T("s", f, xs), 2, x, T("m", f, rs));
	g_op(&g, "Exp", "null", T("e", f, xs), 1, T("s", f, xs));
	g_op(&g, "ReduceSum", keep, T("z", f, rs), 1, T("e", f, xs));
	g_op(&g, "RealDiv", "null", T(kind == 1 ? "yf" : "y", f, xs), 2, T("e", f, xs),
	     T("z", f, rs));
	if (kind == 1)
		g_op(&g, "Cast", "[{\"name\":\"dst_type\",\"value\":\"float16\"}]", T("y", io, xs),
		     1, T("yf", f, xs));
	g_out(&g, T("y", io, xs));
	run_case(label, g_json(&g, "Fused_Softmax_sweep"), 1e-4);
}

/* layernorm over the last axis of [R, C]: y = (x - mean) rsqrt(var + 1e-5)
 * gamma + beta; outputs y, mean, var (f16: float16 in/out, float32 inside) */
static void
layernorm(int64_t R, int64_t C, bool f16)
{
	static const char keep[] =
	    "[{\"name\":\"axis\",\"value\":[-1]},{\"name\":\"keep_dims\",\"value\":true}]";
	const char *io = f16 ? "float16" : "float32", *f = "float32";
	const char *xs = SH(R, C), *rs = SH(R, 1), *cs = SH(C);
	char label[128], inv[32];
	G g = {0};
	snprintf(label, sizeof label, "layernorm %s [%lld,%lld]", f16 ? "float16" : "float32",
	         (long long)R, (long long)C);
	if (filter && !strstr(label, filter))
		return;
	snprintf(inv, sizeof inv, "%.9g", 1.0 / (double)C);
	g_in(&g, T("x", io, xs));
	g_in(&g, T("gamma", io, cs));
	g_in(&g, T("beta", io, cs));
	const char *x = T("x", io, xs), *ga = T("gamma", io, cs), *be = T("beta", io, cs);
	if (f16) {
		const char *cast = "[{\"name\":\"dst_type\",\"value\":\"float32\"}]";
		g_op(&g, "Cast", cast, T("xf", f, xs), 1, x);
		g_op(&g, "Cast", cast, T("gf", f, cs), 1, ga);
		g_op(&g, "Cast", cast, T("bf", f, cs), 1, be);
		x = T("xf", f, xs);
		ga = T("gf", f, cs);
		be = T("bf", f, cs);
	}
	g_op(&g, "ReduceSum", keep, T("s1", f, rs), 1, x);
	g_op(&g, "Mul", "null", T("mean", f, rs), 2, T("s1", f, rs), CST(inv, f));
	g_op(&g, "Sub", "null", T("d", f, xs), 2, x, T("mean", f, rs));
	g_op(&g, "Mul", "null", T("d2", f, xs), 2, T("d", f, xs), T("d", f, xs));
	g_op(&g, "ReduceSum", keep, T("s2", f, rs), 1, T("d2", f, xs));
	g_op(&g, "Mul", "null", T("var", f, rs), 2, T("s2", f, rs), CST(inv, f));
	g_op(&g, "Add", "null", T("ve", f, rs), 2, T("var", f, rs), CST("1e-05", f));
	g_op(&g, "Rsqrt", "null", T("rs", f, rs), 1, T("ve", f, rs));
	g_op(&g, "Mul", "null", T("nrm", f, xs), 2, T("d", f, xs), T("rs", f, rs));
	g_op(&g, "Mul", "null", T("sc", f, xs), 2, T("nrm", f, xs), ga);
	g_op(&g, "Add", "null", T(f16 ? "yf" : "y", f, xs), 2, T("sc", f, xs), be);
	if (f16)
		g_op(&g, "Cast", "[{\"name\":\"dst_type\",\"value\":\"float16\"}]", T("y", io, xs),
		     1, T("yf", f, xs));
	g_out(&g, T("y", io, xs));
	g_out(&g, T("mean", f, rs));
	g_out(&g, T("var", f, rs));
	run_case(label, g_json(&g, "Fused_LayerNorm_sweep"), 1e-4);
}

static const int64_t rowlens[] = {1, 7, 128, 768, 3, 15, 16, 17, 33, 63, 65};
static const int64_t nrows[] = {1, 5, 64, 7, 128, 33, 3, 16, 17, 65, 2};
enum { NROWS = sizeof rowlens / sizeof rowlens[0] };

static void
softmaxes(void)
{
	fam_grain1 = true;
	for (int i = 0; i < NROWS; i++)
		for (int j = 0; j < NROWS; j++) {
			if (!full && j != i && j != (i + 3) % NROWS)
				continue;
			for (int k = 0; k < 3; k++)
				if (full || k == 0 || (k == 1 && j == i) ||
				    (k == 2 && i % 3 == 0 && j == i))
					softmax(nrows[j], rowlens[i], k);
		}
	softmax(12 * 128, 128, 0); /* attention scores */
	softmax(128, 3072, 1);
	if (full)
		softmax(4096, 768, 0);
}

static void
layernorms(void)
{
	fam_grain1 = true;
	for (int i = 0; i < NROWS; i++)
		for (int j = 0; j < NROWS; j++) {
			if (!full && j != i && j != (i + 5) % NROWS)
				continue;
			layernorm(nrows[j], rowlens[i], false);
			if (full || j == i)
				layernorm(nrows[j], rowlens[i], true);
		}
	layernorm(128, 768, false);
	layernorm(4096, 768, true);
}

/* ---- injective ------------------------------------------------------------------------ */
/* An elementwise chain with broadcasts over `shape`: x [shape], y [last
 * dim], z [shape with the last dim 1]; two outputs (the chain, a Cast). */
static void
chain(const char *dt, int rank, const int64_t *shape)
{
	int64_t zs[KC_MAX_RANK];
	char label[200];
	G g = {0};
	for (int d = 0; d < rank; d++)
		zs[d] = shape[d];
	zs[rank - 1] = 1;
	const char *xs = shp(shape, rank), *ys = SH(shape[rank - 1]), *zsh = shp(zs, rank);
	bool fl = t_dt_float(dt);
	const char *cdt = !strcmp(dt, "float32") ? "float16" : "float32";
	snprintf(label, sizeof label, "chain %s [%s]", dt, xs);
	if (filter && !strstr(label, filter))
		return;
	const char *x = T("x", dt, xs);
	g_in(&g, x);
	g_in(&g, T("y", dt, ys));
	g_in(&g, T("z", dt, zsh));
	g_op(&g, "Mul", "null", T("t1", dt, xs), 2, x, T("y", dt, ys));
	g_op(&g, "Add", "null", T("t2", dt, xs), 2, T("t1", dt, xs), T("z", dt, zsh));
	g_op(&g, "Maximum", "null", T("t3", dt, xs), 2, T("t2", dt, xs),
	     CST(fl ? "-0.5" : "-3", dt));
	if (fl) {
		g_op(&g, "Abs", "null", T("t4", dt, xs), 1, T("t2", dt, xs));
		g_op(&g, "Neg", "null", T("t5", dt, xs), 1, T("t4", dt, xs));
		g_op(&g, "Exp", "null", T("t6", dt, xs), 1, T("t5", dt, xs));
	} else {
		g_op(&g, "Sub", "null", T("t6", dt, xs), 2, T("t3", dt, xs), x);
	}
	g_op(&g, "Greater", "null", T("gt", "bool", xs), 2, x, T("z", dt, zsh));
	g_op(&g, "Select", "null", T("o", dt, xs), 3, T("gt", "bool", xs), T("t6", dt, xs),
	     T("t3", dt, xs));
	g_op(&g, "Cast", "null", T("oc", cdt, xs), 1, T("t2", dt, xs));
	g_out(&g, T("o", dt, xs));
	g_out(&g, T("oc", cdt, xs));
	g_out(&g, T("gt", "bool", xs));
	run_case(label, g_json(&g, "Fused_Chain_sweep"), 1e-4);
}

/* x[shape] transposed by perm, then (post) a Cast to cast_dt ("cast"),
 * a Mul by a constant ("mul") or nothing (NULL), in one composite. */
static void
tr_post(const char *dt, int rank, const int64_t *shape, const int64_t *perm, const char *post,
        const char *cast_dt)
{
	int64_t os[KC_MAX_RANK];
	char label[200], attr[128];
	G g = {0};
	for (int d = 0; d < rank; d++)
		os[d] = shape[perm[d]];
	const char *xs = shp(shape, rank), *osh = shp(os, rank), *pl = shp(perm, rank);
	const char *odt = post && !strcmp(post, "cast") ? cast_dt : dt;
	snprintf(label, sizeof label, "Transpose %s [%s] perm=[%s]%s%s%s", dt, xs, pl,
	         post ? " + " : "", post ? post : "", post && !strcmp(post, "cast") ? odt : "");
	if (filter && !strstr(label, filter))
		return;
	snprintf(attr, sizeof attr, "[{\"name\":\"perm\",\"value\":[%s]}]", pl);
	g_in(&g, T("x", dt, xs));
	g_op(&g, "Transpose", attr, T(post ? "t" : "y", dt, osh), 1, T("x", dt, xs));
	if (post && !strcmp(post, "cast"))
		g_op(&g, "Cast", "null", T("y", odt, osh), 1, T("t", dt, osh));
	else if (post)
		g_op(&g, "Mul", "null", T("y", dt, osh), 2, T("t", dt, osh),
		     CST(t_dt_float(dt) ? "0.5" : "3", dt));
	g_out(&g, T("y", odt, osh));
	run_case(label, g_json(&g, "Fused_Transpose_sweep"), 1e-4);
}

static void
tr(const char *dt, int rank, const int64_t *shape, const int64_t *perm, bool fused)
{
	int64_t os[KC_MAX_RANK];
	char label[200], attr[128];
	G g = {0};
	for (int d = 0; d < rank; d++)
		os[d] = shape[perm[d]];
	const char *xs = shp(shape, rank), *osh = shp(os, rank), *pl = shp(perm, rank);
	snprintf(label, sizeof label, "Transpose %s [%s] perm=[%s]%s", dt, xs, pl,
	         fused ? " + Add" : "");
	if (filter && !strstr(label, filter))
		return;
	snprintf(attr, sizeof attr, "[{\"name\":\"perm\",\"value\":[%s]}]", pl);
	g_in(&g, T("x", dt, xs));
	g_op(&g, "Transpose", attr, T(fused ? "t" : "y", dt, osh), 1, T("x", dt, xs));
	if (fused) {
		const char *bs = SH(os[rank - 1]);
		g_in(&g, T("b", dt, bs));
		g_op(&g, "Add", "null", T("y", dt, osh), 2, T("t", dt, osh), T("b", dt, bs));
	}
	g_out(&g, T("y", dt, osh));
	run_case(label, g_json(&g, "Fused_Transpose_sweep"), 1e-4);
}

static void
injective(void)
{
	static const char *const dts[] = {"float32", "float16", "int32"};
	static const int64_t shapes[][4] = {
	    {1},        {3},           {15},           {16},           {17},
	    {33},       {63},          {65},           {1031},         {5, 7},
	    {13, 17},   {16, 33},      {65, 63},       {1, 31},        {31, 1},
	    {7, 1, 65}, {3, 5, 7, 13}, {1, 17, 1, 15}, {2, 3, 31, 33}, {4, 1, 16, 16}};
	static const int ranks[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 4, 4, 4, 4};
	fam_grain1 = false;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (int d = 0; d < 3; d++)
			if (full || d == (int)(s % 3) || d == 0)
				chain(dts[d], ranks[s], shapes[s]);
	chain("float32", 2, (const int64_t[]){1024, 1027});
	chain("float16", 2, (const int64_t[]){128, 3072});
	chain("int32", 3, (const int64_t[]){7, 129, 257});
}

static void
transpose(void)
{
	static const char *const dts[] = {"float32", "float16", "int32"};
	static const int64_t p2[] = {1, 0};
	fam_grain1 = false;
	for (int i = 0; i < NSW; i++)
		for (int j = 0; j < NSW; j++) {
			if (!full && j != (i * 5 + 3) % NSW && j != (i * 7 + 1) % NSW)
				continue;
			tr(dts[(i + j) % 3], 2, (const int64_t[]){SW[i], SW[j]}, p2,
			   (i + j) % 4 == 0);
		}
	static const int64_t s4[][4] = {
	    {2, 3, 5, 7}, {1, 17, 15, 33}, {3, 16, 1, 65}, {5, 7, 13, 3}, {2, 16, 17, 16}};
	static const int64_t perms[][4] = {{0, 2, 3, 1}, {0, 3, 1, 2}, {3, 2, 1, 0},
	                                   {1, 0, 3, 2}, {0, 2, 1, 3}, {2, 0, 3, 1}};
	for (size_t s = 0; s < sizeof s4 / sizeof s4[0]; s++)
		for (size_t p = 0; p < sizeof perms / sizeof perms[0]; p++)
			if (full || (s + p) % 2 == 0)
				tr(dts[(s + p) % 3], 4, s4[s], perms[p], (s + p) % 4 == 2);
	tr("float32", 2, (const int64_t[]){1024, 1027}, p2, false);
	tr("float16", 4, (const int64_t[]){8, 64, 56, 33}, perms[0], false);
	tr("float32", 4, (const int64_t[]){1, 12, 128, 64}, perms[4], true);

	/* tiled transposes (emit_tile.c) of every element size: vw x vw
	 * sub-blocks in registers with partial ones at the ends (primes),
	 * whole tiles, a 4-D permutation of the last two axes; split over the
	 * 3 threads at any row too (grain 1) */
	static const char *const all[] = {"float32", "float16", "bfloat16", "float64", "int8",
	                                  "uint8",   "int16",   "int32",    "int64",   "bool"};
	static const int64_t t2a[] = {37, 61}, t2b[] = {48, 64}, t4[] = {2, 3, 29, 47};
	static const int64_t p4[] = {0, 1, 3, 2};
	fam_grain1 = true;
	for (size_t d = 0; d < sizeof all / sizeof all[0]; d++) {
		tr_post(all[d], 2, t2a, p2, NULL, NULL);
		tr_post(all[d], 2, t2b, p2, NULL, NULL);
		tr_post(all[d], 4, t4, p4, NULL, NULL);
	}
	/* elementwise ops on the transposed values: casts between element
	 * sizes, a scale */
	static const char *const casts[][2] = {
	    {"float32", "float16"}, {"float16", "float32"},  {"int8", "float32"},
	    {"float32", "int32"},   {"float64", "float32"},  {"bool", "float32"},
	    {"uint8", "int64"},     {"bfloat16", "float64"}, {"float32", "int8"},
	    {"int32", "bool"},      {"float64", "float16"},  {"int64", "int16"}};
	for (size_t c = 0; c < sizeof casts / sizeof casts[0]; c++)
		tr_post(casts[c][0], 2, c % 2 ? t2a : t2b, p2, "cast", casts[c][1]);
	static const char *const muls[] = {"float32", "float16", "float64", "int32", "int8"};
	for (size_t m = 0; m < sizeof muls / sizeof muls[0]; m++)
		tr_post(muls[m], m % 2 ? 4 : 2, m % 2 ? t4 : t2a, m % 2 ? p4 : p2, "mul", NULL);
	/* large outputs with rows of whole cache lines: non-temporal stores
	 * (with AVX-512), the tiles starting at the first aligned column of
	 * the element-aligned buffers of the threaded run */
	tr_post("float32", 2, (const int64_t[]){1040, 1024}, p2, "mul", NULL);
	/* a narrowing cast: sub-blocks of two vw-column groups, so each
	 * float16 row is a whole line, streamed */
	tr_post("float32", 2, (const int64_t[]){1056, 2048}, p2, "cast", "float16");
	tr_post("float64", 2, (const int64_t[]){1031, 528}, p2, NULL, NULL);
	/* permuted copies keeping the last axis: the input's loop order; large
	 * ones stored non-temporally from each row's first aligned element */
	static const int64_t p0213[] = {0, 2, 1, 3};
	tr_post("float32", 4, (const int64_t[]){16, 128, 12, 49}, p0213, NULL, NULL);
	tr_post("float64", 4, (const int64_t[]){8, 128, 12, 48}, p0213, NULL, NULL);
	tr_post("int8", 4, (const int64_t[]){3, 17, 5, 40}, p0213, NULL, NULL);
	tr_post("float16", 4, (const int64_t[]){3, 17, 5, 40}, p0213, "mul", NULL);
	fam_grain1 = false;
}

/* ---- Conv2D ---------------------------------------------------------------------------- */
typedef struct Conv {
	int64_t N, C, H, W, O, KH, KW, sh, sw, dh, dw, pad[4], G;
} Conv;

/* epi: + bias [O] and ReLU */
static void
conv(const Conv *k, bool nhwc, const char *dt, const char *odt, bool epi)
{
	int64_t OH = (k->H + k->pad[0] + k->pad[1] - (k->dh * (k->KH - 1) + 1)) / k->sh + 1;
	int64_t OW = (k->W + k->pad[2] + k->pad[3] - (k->dw * (k->KW - 1) + 1)) / k->sw + 1;
	int64_t I = k->C / k->G;
	const char *fmt = nhwc ? "NHWC" : "NCHW";
	const char *xs = nhwc ? SH(k->N, k->H, k->W, k->C) : SH(k->N, k->C, k->H, k->W);
	const char *ws = nhwc ? SH(k->O, k->KH, k->KW, I) : SH(k->O, I, k->KH, k->KW);
	const char *os = nhwc ? SH(k->N, OH, OW, k->O) : SH(k->N, k->O, OH, OW);
	char label[256], attr[512];
	G g = {0};
	snprintf(label, sizeof label,
	         "Conv2D %s %s->%s x[%s] w[%s] stride %lld,%lld dilation %lld,%lld pads "
	         "%lld,%lld,%lld,%lld groups %lld%s",
	         fmt, dt, odt, xs, ws, (long long)k->sh, (long long)k->sw, (long long)k->dh,
	         (long long)k->dw, (long long)k->pad[0], (long long)k->pad[1], (long long)k->pad[2],
	         (long long)k->pad[3], (long long)k->G, epi ? " +bias+relu" : "");
	if (filter && !strstr(label, filter))
		return;
	snprintf(attr, sizeof attr,
	         "[{\"name\":\"stride\",\"value\":[1,1,%lld,%lld]},"
	         "{\"name\":\"dilation\",\"value\":[1,1,%lld,%lld]},"
	         "{\"name\":\"pad_list\",\"value\":[%lld,%lld,%lld,%lld]},"
	         "{\"name\":\"group\",\"value\":%lld},{\"name\":\"groups\",\"value\":%lld},"
	         "{\"name\":\"format\",\"value\":\"%s\"},{\"name\":\"dst_type\",\"value\":\"%s\"}]",
	         (long long)k->sh, (long long)k->sw, (long long)k->dh, (long long)k->dw,
	         (long long)k->pad[0], (long long)k->pad[1], (long long)k->pad[2],
	         (long long)k->pad[3], (long long)k->G, (long long)k->G, fmt, odt);
	g_in(&g, TF("x", dt, xs, fmt));
	g_in(&g, TF("w", dt, ws, fmt));
	g_op(&g, "Conv2D", attr, TF(epi ? "cv" : "y", odt, os, fmt), 2, TF("x", dt, xs, fmt),
	     TF("w", dt, ws, fmt));
	if (epi) {
		/* bias over the channel dim: [O] for NHWC, [O,1,1] for NCHW */
		const char *bsh = nhwc ? SH(k->O) : SH(k->O, 1, 1);
		g_in(&g, T("bias", odt, bsh));
		g_op(&g, "Add", "null", TF("cb", odt, os, fmt), 2, TF("cv", odt, os, fmt),
		     T("bias", odt, bsh));
		g_op(&g, "Maximum", "null", TF("y", odt, os, fmt), 2, TF("cb", odt, os, fmt),
		     CST("0", odt));
	}
	g_out(&g, TF("y", odt, os, fmt));
	run_case(label, g_json(&g, "Fused_Conv2D_sweep"), 1e-5 * (double)(I * k->KH * k->KW));
}

static void
conv2d(void)
{
	static const Conv cs[] = {
	    /* N  C   H   W   O  KH KW sh sw dh dw pads         G */
	    {1, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1, {0, 0, 0, 0}, 1},
	    {2, 3, 13, 5, 5, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, 1},
	    {1, 4, 17, 17, 6, 3, 3, 1, 1, 2, 2, {2, 2, 2, 2}, 2},
	    {1, 4, 15, 9, 4, 5, 3, 2, 2, 2, 2, {0, 1, 2, 1}, 2},
	    {1, 8, 16, 16, 8, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, 8}, /* depthwise */
	    {1, 33, 5, 5, 17, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, 1}, /* pointwise */
	    {2, 5, 9, 11, 3, 1, 1, 2, 2, 1, 1, {0, 0, 0, 0}, 1},  /* 1x1, stride 2 */
	    {1, 2, 1, 1, 3, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, 1},   /* 1x1 image */
	    {1, 3, 1, 1, 5, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, 1},   /* all but one tap padding */
	    {1, 6, 31, 13, 4, 7, 7, 2, 3, 1, 1, {3, 3, 3, 3}, 2}, /* 7x7 stem-like, odd stride */
	    {3, 16, 15, 17, 17, 3, 3, 2, 2, 1, 1, {0, 1, 0, 1}, 1},
	    {1, 32, 28, 28, 32, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, 1},
	    /* pointwise, large enough for several GEMM units (lower_gemm.c's
	     * conv_gemm_applies: a 1x1 stride-1 unpadded Conv2D is a GEMM) */
	    {2, 70, 13, 11, 40, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, 1},
	    {1, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, 1}, /* --full only */
	};
	enum { NCS = sizeof cs / sizeof cs[0] };
	fam_grain1 = false;
	for (int i = 0; i < NCS - 1 || (full && i < NCS); i++)
		for (int l = 0; l < 2; l++) {
			conv(&cs[i], l == 0, "float32", "float32", false);
			if (full || i % 4 == l)
				conv(&cs[i], l == 0, "float16", "float16", false);
			if (full || i % 3 == 0)
				conv(&cs[i], l == 0, "float32", "float32", true);
		}
	conv(&cs[1], true, "float16", "float32", false);
	conv(&cs[3], false, "float16", "float32", true);
	for (int l = 0; l < 2; l++) { /* the GEMM path: half in, every epilogue */
		conv(&cs[5], l == 0, "float16", "float32", true);
		conv(&cs[NCS - 2], l == 0, "float16", "float16", true);
		conv(&cs[NCS - 2], l == 0, "bfloat16", "float32", false);
	}
}

/* ---- driver ---------------------------------------------------------------------------- */
static void
family(const char *name, void (*fn)(void))
{
	double t0 = now(), c0 = cpu_now();
	int fails = 0, grain1_runs = 0, blocks_runs = 0, n;
	fam_grain1 = false;
	fn();
	n = ncases;
	run_cases(&fails, &grain1_runs, &blocks_runs);
	printf("# %s: %d cases (%d also with parallel_grain 1, %d of them with tiny GEMM blocks), "
	       "%d failed, %.1f s (%.1f s CPU)\n",
	       name, n, grain1_runs, blocks_runs, fails, now() - t0, cpu_now() - c0);
	OKF(fails == 0, "%s: %d of %d cases match the interpreter", name, n - fails, n);
}

static void
f_matmul(void)
{
	family("matmul", matmul);
}
static void
f_batchmatmul(void)
{
	family("batchmatmul", batchmatmul);
}
static void
f_epilogue(void)
{
	family("epilogue", epilogue);
}
static void
f_reduce(void)
{
	family("reduce", reduce);
}
static void
f_softmax(void)
{
	family("softmax", softmaxes);
}
static void
f_layernorm(void)
{
	family("layernorm", layernorms);
}
static void
f_injective(void)
{
	family("injective", injective);
}
static void
f_transpose(void)
{
	family("transpose", transpose);
}
static void
f_conv2d(void)
{
	family("conv2d", conv2d);
}

int
main(int argc, char **argv)
{
	const char *env = getenv("KC_TEMPLATES_SWEEP");
	full = env && !strcmp(env, "full");
	env = getenv("KC_TEMPLATES_JOBS");
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	jobs = env && *env ? atoi(env) : ncpu < 1 ? 1 : ncpu > 4 ? 4 : (int)ncpu;
	if (jobs < 1)
		jobs = 1;
	env = getenv("KC_TEMPLATES_FILTER");
	if (env && *env)
		filter = env;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--full"))
			full = true;
		else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
			filter = argv[++i];
		else if (!strcmp(argv[i], "--verbose"))
			verbose = true;
		else {
			fprintf(stderr, "usage: %s [--full] [--filter SUBSTR] [--verbose]\n",
			        argv[0]);
			return 2;
		}
	}
	kc_compiler_init();
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGSEGV, on_crash);
	signal(SIGBUS, on_crash);
	signal(SIGILL, on_crash);
	signal(SIGFPE, on_crash);
	KcErr err = {0};
	if (kc_target_host(&host, &err) != KC_OK) {
		printf("Bail out! no host target: %s\n", err.msg);
		return 1;
	}
	double t0 = now();
	printf("# host %s; %s sweep, %d cases at a time%s%s\n", host.name, full ? "full" : "CI",
	       jobs, filter ? ", filter " : "", filter ? filter : "");
	t_sub("matmul", f_matmul);
	t_sub("batchmatmul", f_batchmatmul);
	t_sub("epilogue", f_epilogue);
	t_sub("reduce", f_reduce);
	t_sub("softmax", f_softmax);
	t_sub("layernorm", f_layernorm);
	t_sub("injective", f_injective);
	t_sub("transpose", f_transpose);
	t_sub("conv2d", f_conv2d);
	for (int i = 0; i < 8 && tmpl_tally[i].name; i++)
		printf("# template %s: %d cases\n", tmpl_tally[i].name, tmpl_tally[i].n);
	printf("# %d cases, %d failed, %lld multi-task parallel regions, %.1f s; CPU %.1f s: "
	       "compiling %.1f s, interpreter %.1f s, kernels %.1f s (slowest: %s, %.1f s)\n",
	       n_cases_total, n_fails_total, t_pool_stats().regions, now() - t0, cpu_now(),
	       sum_compile, sum_interp, sum_run, slowest, slowest_s);
	return t_done();
}
