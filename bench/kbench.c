/* kbench.c - kernel benchmarks, measured side by side with their peers.
 *
 * Compiles composite graphs in process (parse + the full kc_compile
 * pipeline through the link, cold: one CompileCtx and one LLVMContext per
 * compile), loads the shared objects, and times each kernel next to its
 * peers in the same run, at 1 and 2 threads (kcsd's kernels through a
 * pthread KcsRuntime like a training job's own pool):
 *   - MatMul / BatchMatMul (GFLOP/s) against OpenBLAS cblas_sgemm (batched:
 *     a loop of sgemm) and oneDNN matmul; MatMul at M = 1 (a GEMV) against
 *     cblas_sgemv, what a BLAS user calls for it, and oneDNN matmul;
 *   - MatMul + bias + GeLU as one composite against sgemm followed by a
 *     plain-C epilogue pass (epilogue.c), and oneDNN matmul with a bias and
 *     a gelu_tanh post-op;
 *   - softmax and layernorm composites (GB/s) against oneDNN's softmax and
 *     layer_normalization forward primitives;
 *   - Transpose and ReduceSum (GB/s) against a STREAM triad moving the same
 *     number of bytes, measured in the same run (the bandwidth roofline);
 *   - elementwise chains (GeLU, Sigmoid, Adam-like) at 1M and 16M elements
 *     against the triad; numpy's unfused time for them comes from bench/run
 *     (kbench prints an "@numpy" line where that row goes).
 * Every output (kcsd's and the peers') is compared with one reference per
 * workload (OpenBLAS's result, or a plain-C/double reference), and the
 * error printed; a kcsd kernel whose error passes the tolerance is shown
 * as WRONG, never with a speed, and kbench exits 3. Rows that cannot be
 * measured (a compile refused, a library not installed) say why.
 *
 * Prints one markdown table on stdout, plus "@info" lines for bench/run's
 * header. Usage: kbench [--quick] [--target NAME] [--only SECTION,...]
 * (sections: matmul, gemv, fused, norm, layout, elementwise). With KBENCH_JSON_DIR set,
 * every workload's composite JSON is also written there (WORKLOAD-SHAPE.json),
 * to inspect its schedule and IR with the compiler's dumps.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compiler.h"
#include "kcs_abi.h"
#include "peers.h"

/* ---- a small persistent thread pool implementing KcsRuntime ------------ */
/* Idle workers (and the caller waiting for them) spin for a while before
 * they sleep on a condition variable, as libgomp's default wait policy
 * does for oneDNN's threads: a region that starts within POOL_SPIN
 * pause-loops of the previous one costs no wake-up (tens of microseconds
 * on a VM, as long as a whole softmax). */
#define POOL_SPIN 20000

typedef struct Pool {
	int n;
	pthread_t th[64];
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;
	atomic_ulong agen;   /* gen, for the spinning */
	atomic_int apending; /* workers still running the current region */
	bool quit;
	KcsTaskFn fn;
	void *closure;
	int64_t ntasks;
	atomic_long next;
	atomic_int rc;
} Pool;

static void
pool_work(Pool *p)
{
	for (;;) {
		long t = atomic_fetch_add(&p->next, 1);
		if (t >= p->ntasks)
			break;
		int32_t r = p->fn(p->closure, t, p->ntasks);
		if (r) {
			int z = 0;
			atomic_compare_exchange_strong(&p->rc, &z, r);
		}
	}
}

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void *
pool_main(void *arg)
{
	Pool *p = arg;
	uint64_t seen = 0;
	for (;;) {
		for (int i = 0; i < POOL_SPIN && atomic_load(&p->agen) == seen; i++)
			cpu_relax();
		pthread_mutex_lock(&p->mu);
		while (p->gen == seen && !p->quit)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		pool_work(p);
		if (atomic_fetch_sub(&p->apending, 1) == 1) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->mu);
		}
	}
	return NULL;
}

static int32_t
pool_parallel_for(void *ctx, KcsTaskFn fn, void *closure, int64_t ntasks)
{
	Pool *p = ctx;
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->closure = closure;
	p->ntasks = ntasks;
	atomic_store(&p->next, 0);
	atomic_store(&p->rc, 0);
	atomic_store(&p->apending, p->n - 1);
	p->gen++;
	atomic_store(&p->agen, p->gen);
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	pool_work(p); /* the caller is worker 0 */
	for (int i = 0; i < POOL_SPIN && atomic_load(&p->apending) > 0; i++)
		cpu_relax();
	pthread_mutex_lock(&p->mu);
	while (atomic_load(&p->apending) > 0)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
	return atomic_load(&p->rc);
}

static void *
pool_alloc(void *ctx, uint64_t bytes, uint64_t align)
{
	(void)ctx;
	void *q = NULL;
	if (posix_memalign(&q, align < sizeof(void *) ? sizeof(void *) : align, bytes))
		return NULL;
	return q;
}

static void
pool_free(void *ctx, void *q)
{
	(void)ctx;
	free(q);
}

static void
pool_init(Pool *p, KcsRuntime *rt, int n)
{
	memset(p, 0, sizeof *p);
	p->n = n;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	for (int i = 1; i < n; i++)
		pthread_create(&p->th[i], NULL, pool_main, p);
	memset(rt, 0, sizeof *rt);
	rt->version = 1;
	rt->ctx = p;
	rt->parallel_for = pool_parallel_for;
	rt->alloc = pool_alloc;
	rt->free = pool_free;
	rt->num_threads = n;
}

static void
pool_fini(Pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->quit = true;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->th[i], NULL);
}

/* ---- settings, timing ---------------------------------------------------------- */

static double g_budget = 0.4; /* seconds of samples per measurement */
static int g_min_samples = 5;
/* Seconds of untimed calls before the samples: a short kernel's 64 samples
 * take a few milliseconds, less than this VM takes to bring an idle second
 * vCPU back (a 2-thread softmax then measured 1.5 GB/s instead of 29). */
static double g_warm = 0.03;
static int g_wrong;        /* kcsd kernels whose output failed the check */
static KcsRuntime g_rt[3]; /* g_rt[t]: a pool of t threads */
static KcTarget g_target;

#define TOL 1e-3  /* max |x - ref| / max |ref| above which an output is wrong */
#define NOISY 0.3 /* interquartile range / median above which a row says "noisy" */

static double
now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double
thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

/* One call of an implementation; 0 on success. */
typedef int (*RunFn)(void *arg);

/* Median seconds per call over >= g_min_samples calls and >= g_budget
 * seconds (at most 64 calls), after g_warm seconds of untimed calls; the
 * caller has already made the checked first call.
 * Negative when a call fails. *spread (when not NULL): the interquartile
 * range over the median, how noisy the samples were. */
static double
time_median(RunFn fn, void *arg, double *spread)
{
	double s[64];
	int n = 0;
	for (double w_end = now_s() + g_warm; now_s() < w_end;)
		if (fn(arg))
			return -1;
	double t_end = now_s() + g_budget;
	while (n < 64 && (n < g_min_samples || now_s() < t_end)) {
		double t0 = now_s();
		if (fn(arg))
			return -1;
		s[n++] = now_s() - t0;
	}
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
			double x = s[j];
			s[j] = s[j - 1];
			s[j - 1] = x;
		}
	if (spread)
		*spread = (s[(3 * n) / 4] - s[n / 4]) / s[n / 2];
	return s[n / 2];
}

/* ---- buffers and checks ----------------------------------------------------------- */

static float *
fbuf(int64_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float))) {
		fprintf(stderr, "kbench: out of memory (%lld floats)\n", (long long)n);
		exit(2);
	}
	return p;
}

/* Deterministic values in [lo, hi). */
static void
fill(float *p, int64_t n, uint32_t seed, float lo, float hi)
{
	uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
	for (int64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = lo + (hi - lo) * (float)(x >> 40) / (float)(1 << 24);
	}
}

static void
fill_nan(float *p, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = NAN;
}

/* max |x - ref| / max |ref| (NaN anywhere: infinity). */
static double
relerr(const float *x, const float *ref, int64_t n)
{
	double num = 0, den = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = fabs((double)x[i] - (double)ref[i]);
		if (!(d == d) || isinf(x[i]))
			return INFINITY;
		if (d > num)
			num = d;
		if (fabs((double)ref[i]) > den)
			den = fabs((double)ref[i]);
	}
	return num / (den > 0 ? den : 1);
}

/* The outputs an implementation writes and their references. */
typedef struct Check {
	int n;
	float *out[3];
	const float *ref[3];
	int64_t len[3];
} Check;

/* One implementation's measurement. */
typedef struct Meas {
	bool ok;       /* ran: t and err are valid */
	double t;      /* median seconds per call */
	double err;    /* worst relerr over the outputs */
	double spread; /* interquartile range / median of the samples */
	char why[200]; /* when !ok: why it was not measured */
} Meas;

/* The warm-up call (outputs NaN-filled first, then checked), then the
 * timed calls. */
static Meas
measure(RunFn fn, void *arg, const Check *ck)
{
	Meas m = {0};
	for (int i = 0; i < ck->n; i++)
		fill_nan(ck->out[i], ck->len[i]);
	if (fn(arg)) {
		snprintf(m.why, sizeof m.why, "the call failed");
		return m;
	}
	for (int i = 0; i < ck->n; i++) {
		double e = relerr(ck->out[i], ck->ref[i], ck->len[i]);
		if (e > m.err || isinf(e))
			m.err = e;
	}
	m.t = time_median(fn, arg, &m.spread);
	if (m.t < 0) {
		snprintf(m.why, sizeof m.why, "a timed call failed");
		return m;
	}
	m.ok = true;
	return m;
}

static Meas
not_measured(const char *fmt, ...)
{
	Meas m = {0};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m.why, sizeof m.why, fmt, ap);
	va_end(ap);
	return m;
}

/* ---- STREAM triad (the roofline) ----------------------------------------------- */

typedef struct Triad {
	float *a, *b, *c;
	int64_t n;
	const KcsRuntime *rt;
} Triad;

static int32_t
triad_task(void *closure, int64_t t, int64_t nt)
{
	Triad *x = closure;
	kref_triad(x->a, x->b, x->c, x->n * t / nt, x->n * (t + 1) / nt);
	return 0;
}

static int
triad_run(void *arg)
{
	Triad *x = arg;
	return x->rt->parallel_for(x->rt->ctx, triad_task, x, x->rt->num_threads * 4);
}

/* GB/s of a triad that moves `bytes` (n = bytes / 12 floats per array), at
 * t threads, and the spread of its samples; measured once per (bytes, t)
 * in this run. */
static double
triad_gbs(int64_t bytes, int t, double *spread)
{
	static struct TriadMemo {
		int64_t bytes;
		int t;
		double gbs, spread;
	} memo[32];
	static int nmemo;
	for (int i = 0; i < nmemo; i++)
		if (memo[i].bytes == bytes && memo[i].t == t) {
			*spread = memo[i].spread;
			return memo[i].gbs;
		}
	int64_t n = bytes / 12;
	Triad x = {fbuf(n), fbuf(n), fbuf(n), n, &g_rt[t]};
	fill(x.b, n, 1, 0, 1);
	fill(x.c, n, 2, 0, 1);
	triad_run(&x);
	double s = time_median(triad_run, &x, spread);
	free(x.a);
	free(x.b);
	free(x.c);
	double gbs = 12.0 * (double)n / s / 1e9;
	if (nmemo < 32)
		memo[nmemo++] = (struct TriadMemo){bytes, t, gbs, *spread};
	return gbs;
}

/* ---- graph documents ------------------------------------------------------------ */

/* Builds a composite document in the style MindSpore writes (v1 format,
 * DefaultFormat float32 tensors, constants as value inputs, attrs as
 * {data_type,name,value} lists); it records every tensor's shape so op
 * inputs can be named alone. */
typedef struct Gb {
	KcBuf ins, ops, outs;
	int nt, nconst, nin, nout;
	char name[64][24];
	char shape[64][48];
} Gb;

static void
gb_tensor(Gb *g, const char *name, const char *shape)
{
	if (g->nt >= 64) {
		fprintf(stderr, "kbench: graph too big\n");
		exit(2);
	}
	snprintf(g->name[g->nt], sizeof g->name[0], "%s", name);
	snprintf(g->shape[g->nt], sizeof g->shape[0], "%s", shape);
	g->nt++;
}

static const char *
gb_shape(const Gb *g, const char *name)
{
	for (int i = g->nt - 1; i >= 0; i--)
		if (!strcmp(g->name[i], name))
			return g->shape[i];
	fprintf(stderr, "kbench: no tensor %s\n", name);
	exit(2);
}

static void
gb_input(Gb *g, const char *name, const char *shape)
{
	gb_tensor(g, name, shape);
	kc_buf_printf(&g->ins,
	              "%s[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"shape\":%s,"
	              "\"tensor_name\":\"%s\"}]",
	              g->nin++ ? "," : "", shape, name);
}

/* One op: inputs are tensor names or "#value" float32 constants; attr is a
 * JSON list or "null". */
static void
gb_op(Gb *g, const char *op, const char *attr, const char *out, const char *oshape, int nargs, ...)
{
	va_list ap;
	va_start(ap, nargs);
	kc_buf_printf(&g->ops, "%s{\"attr\":%s,\"impl_path\":\"\",\"input_desc\":[",
	              g->ops.len ? "," : "", attr);
	for (int i = 0; i < nargs; i++) {
		const char *a = va_arg(ap, const char *);
		if (a[0] == '#')
			kc_buf_printf(&g->ops,
			              "%s[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\","
			              "\"name\":\"input_%d\",\"shape\":[1],\"tensor_name\":\"input_"
			              "c%d\",\"value\":%s}]",
			              i ? "," : "", i, g->nconst++, a + 1);
		else
			kc_buf_printf(&g->ops,
			              "%s[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\","
			              "\"name\":\"input_%d\",\"shape\":%s,\"tensor_name\":\"%s\"}]",
			              i ? "," : "", i, gb_shape(g, a), a);
	}
	va_end(ap);
	kc_buf_printf(
	    &g->ops,
	    "],\"name\":\"%s\",\"output_desc\":[{\"data_type\":\"float32\",\"format\":"
	    "\"DefaultFormat\",\"name\":\"output_0\",\"shape\":%s,\"tensor_name\":\"%s\"}]}",
	    op, oshape, out);
	gb_tensor(g, out, oshape);
}

static void
gb_output(Gb *g, const char *name)
{
	kc_buf_printf(&g->outs,
	              "%s{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"shape\":%s,"
	              "\"tensor_name\":\"%s\"}",
	              g->nout++ ? "," : "", gb_shape(g, name), name);
}

static char *
gb_take(Gb *g, const char *opname)
{
	KcBuf b = {0};
	kc_buf_printf(&b,
	              "{\"composite\":true,\"composite_graph\":\"kbench\",\"id\":0,\"input_desc\":["
	              "%s],\"op\":\"%s\",\"op_desc\":[%s],\"output_desc\":[%s],\"platform\":"
	              "\"AKG\",\"process\":\"cpu\",\"version\":1}",
	              g->ins.data ? g->ins.data : "", opname, g->ops.data ? g->ops.data : "",
	              g->outs.data ? g->outs.data : "");
	kc_buf_free(&g->ins);
	kc_buf_free(&g->ops);
	kc_buf_free(&g->outs);
	memset(g, 0, sizeof *g);
	return kc_buf_take(&b, NULL);
}

#define ATTR_REDUCE(axes, keep)                                                                    \
	"[{\"data_type\":\"listInt\",\"name\":\"axis\",\"value\":" axes "},"                       \
	"{\"data_type\":\"bool\",\"name\":\"keep_dims\",\"value\":" keep "}]"

/* The GeLU chain (tanh form, constants as MindSpore writes them in
 * Fused_BiasAdd_GeLU_fusion) from tensor x to tensor y, both of shape sh. */
static void
gb_gelu(Gb *g, const char *x, const char *y, const char *sh)
{
	gb_op(g, "Mul", "null", "g_x2", sh, 2, x, x);
	gb_op(g, "Mul", "null", "g_x3", sh, 2, "g_x2", x);
	gb_op(g, "Mul", "null", "g_t0", sh, 2, "g_x3", "#0.044714998453855515");
	gb_op(g, "Add", "null", "g_t1", sh, 2, x, "g_t0");
	gb_op(g, "Mul", "null", "g_t2", sh, 2, "g_t1", "#0.7978845834732056");
	gb_op(g, "Tanh", "null", "g_t3", sh, 1, "g_t2");
	gb_op(g, "Add", "null", "g_t4", sh, 2, "g_t3", "#1.0");
	gb_op(g, "Mul", "null", "g_t5", sh, 2, x, "g_t4");
	gb_op(g, "Mul", "null", y, sh, 2, "#0.5", "g_t5");
}

static double
gelu_d(double v)
{
	return 0.5 * v * (1.0 + tanh(0.7978845834732056 * (v + 0.044714998453855515 * v * v * v)));
}

/* ---- kcsd kernels ------------------------------------------------------------------ */

typedef struct Kernel {
	void *dl;
	KcsKernelFn fn;
	double compile_ms;     /* parse + kc_compile (lower .. link), cold: wall */
	double compile_cpu_ms; /* the same, CPU time of the compiling thread */
	char why[512];         /* when fn is NULL */
} Kernel;

/* Compiles and loads one workload's kernel. First prints "@start
 * WORKLOAD|SHAPE", so bench/run can say which workload was running if
 * kbench dies (a kernel that crashes takes the process with it). */
static bool
kernel_build(const char *wl, const char *shape, const char *json, Kernel *k)
{
	if (wl) {
		printf("@start %s|%s\n", wl, shape);
		fflush(stdout);
	}
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	KcArtifact art = {0};
	char path[64];

	memset(k, 0, sizeof *k);
	const char *jdir = getenv("KBENCH_JSON_DIR"); /* see the header */
	if (jdir && wl) {
		char jp[512];
		snprintf(jp, sizeof jp, "%s/%s-%s.json", jdir, wl, shape);
		FILE *jf = fopen(jp, "wb");
		if (jf) {
			fputs(json, jf);
			fclose(jf);
		}
	}
	double t0 = now_s(), c0 = thread_cpu_s();
	if (kc_parse(c, json, strlen(json), NULL, &g, &err) != KC_OK ||
	    kc_compile(c, g, &g_target, NULL, NULL, &art, &err) != KC_OK) {
		snprintf(k->why, sizeof k->why, "compile refused: %s%s%s", err.msg,
		         err.where[0] ? " at " : "", err.where);
		goto done;
	}
	k->compile_ms = (now_s() - t0) * 1e3;
	k->compile_cpu_ms = (thread_cpu_s() - c0) * 1e3;
	snprintf(path, sizeof path, "/tmp/kbench-%d-%p.so", (int)getpid(), (void *)k);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(art.object, 1, art.object_len, f) != art.object_len) {
		snprintf(k->why, sizeof k->why, "cannot write %s", path);
		if (f)
			fclose(f);
		unlink(path);
		goto done;
	}
	fclose(f);
	k->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	unlink(path);
	void *sym = k->dl ? dlsym(k->dl, art.symbol) : NULL;
	if (sym) /* POSIX: dlsym's object pointer converts to a function pointer */
		memcpy(&k->fn, &sym, sizeof k->fn);
	else
		snprintf(k->why, sizeof k->why, "dlopen: %s", dlerror());
done:
	kc_artifact_free(&art);
	compile_ctx_free(c);
	if (!k->fn)
		fprintf(stderr, "kbench: %s\n", k->why);
	return k->fn != NULL;
}

static void
kernel_free(Kernel *k)
{
	if (k->dl)
		dlclose(k->dl);
	k->dl = NULL;
	k->fn = NULL;
}

typedef struct KRun {
	Kernel *k;
	const KcsRuntime *rt;
	void **args;
} KRun;

static int
kernel_run(void *arg)
{
	KRun *r = arg;
	return r->k->fn(r->rt, (void *const *)r->args, NULL) != 0;
}

static Meas
measure_kernel(Kernel *k, int t, void **args, const Check *ck)
{
	if (!k->fn)
		return not_measured("%s", k->why);
	KRun r = {k, &g_rt[t], args};
	Meas m = measure(kernel_run, &r, ck);
	if (!m.ok)
		snprintf(m.why, sizeof m.why, "the kernel returned non-zero");
	return m;
}

/* ---- rows ------------------------------------------------------------------------------ */

/* Throughput text: work / t / 1e9 unit. */
static void
thr(char *s, size_t n, const Meas *m, double work, const char *unit)
{
	if (m->ok)
		snprintf(s, n, "%.1f %s", work / m->t / 1e9, unit);
	else
		snprintf(s, n, "—");
}

/* Appends "; " (unless s is empty) and the formatted text to s, truncating. */
static void KC_PRINTF(3, 4) note_add(char *s, size_t n, const char *fmt, ...)
{
	size_t o = strlen(s);
	if (o && o + 2 < n)
		memcpy(s + o, "; ", 3), o += 2;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s + o, n - o, fmt, ap);
	va_end(ap);
}

/* The note for a 2-thread measurement m much slower than the same
 * implementation's 1-thread m1: on a shared machine that means one of its
 * threads was descheduled, not that 2 threads are slow. */
static void
note_slower(char *s, size_t n, const char *who, const Meas *m, const Meas *m1)
{
	if (m1 && m1->ok && m->ok && m->t > 2 * m1->t)
		note_add(s, n, "%s %.0fx slower on 2 threads than on 1 (a thread descheduled?)",
		         who, m->t / m1->t);
}

/* One table row: kcsd's measurement km (work kw) against one peer's pm
 * (work pw: the same work, except for the triad). km1 and pm1: the same
 * implementations at 1 thread, on the 2-thread rows (else NULL). */
static void
row(const char *wl, const char *shape, int t, const Kernel *k, const Meas *km, double kw,
    const char *peer, const Meas *pm, double pw, const char *unit, const char *note,
    const Meas *km1, const Meas *pm1)
{
	char ks[64], ps[64], ratio[32] = "—", comp[32] = "—", err[48] = "—", nt[800];
	bool wrong = km->ok && !(km->err <= TOL);
	bool peer_wrong = pm->ok && !(pm->err <= TOL);
	thr(ks, sizeof ks, km, kw, unit);
	thr(ps, sizeof ps, pm, pw, unit);
	if (km->ok)
		snprintf(err, sizeof err, "%.1e", km->err);
	if (wrong)
		snprintf(ks, sizeof ks, "**WRONG**");
	if (km->ok && pm->ok && !wrong && !peer_wrong)
		snprintf(ratio, sizeof ratio, "%.2f", (kw / km->t) / (pw / pm->t));
	if (k && k->fn)
		snprintf(comp, sizeof comp, "%.0f ms (cpu %.0f)", k->compile_ms, k->compile_cpu_ms);
	bool missing = !pm->ok && strstr(pm->why, "not installed");
	if (!pm->ok)
		snprintf(ps, sizeof ps, missing ? "not installed" : "not measured");

	snprintf(nt, sizeof nt, "%s", note ? note : "");
	if (!km->ok)
		note_add(nt, sizeof nt, "kcsd not measured: %s", km->why);
	if (wrong)
		note_add(nt, sizeof nt, "kcsd output wrong (err %.1e > %.0e)", km->err, TOL);
	if (!pm->ok && !missing)
		note_add(nt, sizeof nt, "%s: %s", peer, pm->why);
	if (peer_wrong)
		note_add(nt, sizeof nt, "%s output differs from the reference (err %.1e)", peer,
		         pm->err);
	if ((km->ok && km->spread > NOISY) || (pm->ok && pm->spread > NOISY))
		note_add(nt, sizeof nt, "noisy: IQR/median kcsd %.0f%%, peer %.0f%%",
		         100 * km->spread, 100 * pm->spread);
	note_slower(nt, sizeof nt, "kcsd", km, km1);
	note_slower(nt, sizeof nt, "peer", pm, pm1);
	if (wrong)
		g_wrong++;
	printf("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", wl, shape, t, ks, peer, ps,
	       ratio, comp, err, nt);
	fflush(stdout);
}

/* A workload's definition, printed once ("@note"): bench/run lists them
 * under the table, so the rows' own notes stay short. */
static void KC_PRINTF(1, 2) defn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("@note ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
}

/* A row's note: "what; impl IMPL; ref REF", leaving out what is empty. */
static void
note_join(char *s, size_t n, const char *what, const char *impl, const char *ref)
{
	snprintf(s, n, "%s%s%s%s%sref %s", what ? what : "", what ? "; " : "",
	         impl[0] ? "impl " : "", impl, impl[0] ? "; " : "", ref);
}

/* ---- MatMul / BatchMatMul ---------------------------------------------------------- */

typedef struct MmSpec {
	int B, M, N, K;
	bool tb;
	const char *note;
} MmSpec;

typedef struct MmRun {
	const MmSpec *s;
	const float *a, *b, *bias;
	float *c;
	const KcsRuntime *rt; /* the epilogue's threads */
} MmRun;

static void
ob_batched(const MmSpec *s, const float *a, const float *b, float *c)
{
	for (int64_t z = 0; z < s->B; z++)
		ob_sgemm(s->M, s->N, s->K, s->tb, a + z * s->M * s->K, b + z * s->K * s->N,
		         c + z * s->M * s->N);
}

static int
ob_run(void *arg)
{
	MmRun *r = arg;
	ob_batched(r->s, r->a, r->b, r->c);
	return 0;
}

static int
ob_gemv_run(void *arg)
{
	MmRun *r = arg;
	ob_sgemv(r->s->N, r->s->K, r->s->tb, r->a, r->b, r->c);
	return 0;
}

static int32_t
epi_task(void *closure, int64_t t, int64_t nt)
{
	MmRun *r = closure;
	int64_t M = r->s->M;
	kref_bias_gelu(r->c, r->bias, r->s->N, M * t / nt, M * (t + 1) / nt);
	return 0;
}

static int
ob_epi_run(void *arg)
{
	MmRun *r = arg;
	ob_batched(r->s, r->a, r->b, r->c);
	return r->rt->parallel_for(r->rt->ctx, epi_task, r, r->rt->num_threads);
}

static int
one_prim_run(void *arg)
{
	return one_run(arg);
}

/* The MatMul (or BatchMatMul) document: a [B,M,K] times b [B,K,N] (b stored
 * [B,N,K] with transpose_b), attrs as MindSpore writes them; with `fused`,
 * + bias [N] and the GeLU chain (Fused_MatMul_BiasAdd_GeLU). */
static char *
mm_json(const MmSpec *s, bool fused)
{
	Gb g = {0};
	char sa[48], sb[48], sc[48];
	if (s->B > 1) {
		snprintf(sa, sizeof sa, "[%d,%d,%d]", s->B, s->M, s->K);
		snprintf(sb, sizeof sb, "[%d,%d,%d]", s->B, s->tb ? s->N : s->K,
		         s->tb ? s->K : s->N);
		snprintf(sc, sizeof sc, "[%d,%d,%d]", s->B, s->M, s->N);
	} else {
		snprintf(sa, sizeof sa, "[%d,%d]", s->M, s->K);
		snprintf(sb, sizeof sb, "[%d,%d]", s->tb ? s->N : s->K, s->tb ? s->K : s->N);
		snprintf(sc, sizeof sc, "[%d,%d]", s->M, s->N);
	}
	char attr[600];
	snprintf(attr, sizeof attr,
	         "[{\"data_type\":\"bool\",\"name\":\"transpose_a\",\"value\":false},"
	         "{\"data_type\":\"bool\",\"name\":\"transpose_b\",\"value\":%s},"
	         "{\"data_type\":\"bool\",\"name\":\"transpose_x1\",\"value\":false},"
	         "{\"data_type\":\"bool\",\"name\":\"transpose_x2\",\"value\":%s},"
	         "{\"data_type\":\"str\",\"name\":\"dst_type\",\"value\":\"float32\"},"
	         "{\"data_type\":\"str\",\"name\":\"left_format\",\"value\":\"DefaultFormat\"},"
	         "{\"data_type\":\"str\",\"name\":\"right_format\",\"value\":\"DefaultFormat\"}]",
	         s->tb ? "true" : "false", s->tb ? "true" : "false");
	gb_input(&g, "input_0", sa);
	gb_input(&g, "input_1", sb);
	if (fused) {
		char sn[24];
		snprintf(sn, sizeof sn, "[%d]", s->N);
		gb_input(&g, "input_2", sn);
		gb_op(&g, "MatMul", attr, "output_0_0", sc, 2, "input_0", "input_1");
		gb_op(&g, "Add", "null", "output_0_1", sc, 2, "output_0_0", "input_2");
		gb_gelu(&g, "output_0_1", "output_0_2", sc);
		gb_output(&g, "output_0_2");
		return gb_take(&g, "Fused_MatMul_BiasAdd_GeLU_kbench");
	}
	gb_op(&g, s->B > 1 ? "BatchMatMul" : "MatMul", attr, "output_0_0", sc, 2, "input_0",
	      "input_1");
	gb_output(&g, "output_0_0");
	return gb_take(&g, s->B > 1 ? "Fused_BatchMatMul_kbench" : "Fused_MatMul_kbench");
}

static void
mm_shape(char *s, size_t n, const MmSpec *m)
{
	if (m->B > 1)
		snprintf(s, n, "(%d,%d,%d,%d)%s", m->B, m->M, m->N, m->K, m->tb ? " b^T" : "");
	else
		snprintf(s, n, "(%d,%d,%d)%s", m->M, m->N, m->K, m->tb ? " b^T" : "");
}

/* The reference product: OpenBLAS at 1 thread, else oneDNN, else naive C.
 * A GEMV's is the double-accumulating C product (cheap at M = 1), so that
 * sgemv, the peer, is checked against a reference it did not compute. */
static const char *
mm_reference(const MmSpec *s, const float *a, const float *b, float *ref)
{
	if (s->B == 1 && s->M == 1) {
		kref_matmul(1, 1, s->N, s->K, s->tb, a, b, ref);
		return "double C";
	}
	if (!ob_missing()) {
		ob_threads(1);
		ob_batched(s, a, b, ref);
		return "OpenBLAS";
	}
	char why[200];
	OnePrim *p = one_threads(1) ? one_matmul(s->B, s->M, s->N, s->K, s->tb, a, b, NULL, false,
	                                         ref, why, sizeof why)
	                            : NULL;
	if (p && one_run(p) == 0) {
		one_free(p);
		return "oneDNN";
	}
	one_free(p);
	kref_matmul(s->B, s->M, s->N, s->K, s->tb, a, b, ref);
	return "naive C";
}

static Meas
measure_onednn(OnePrim *p, const char *why, const Check *ck, char *impl, size_t ilen)
{
	if (!p)
		return not_measured("%s", why);
	snprintf(impl, ilen, "%s", one_impl(p));
	Meas m = measure(one_prim_run, p, ck);
	one_free(p);
	return m;
}

static void
bench_matmul(const MmSpec *s, bool fused)
{
	int64_t na = (int64_t)s->B * s->M * s->K, nb = (int64_t)s->B * s->K * s->N,
	        nc = (int64_t)s->B * s->M * s->N;
	float *a = fbuf(na), *b = fbuf(nb), *bias = fbuf(s->N), *ref = fbuf(nc), *ck = fbuf(nc),
	      *cp = fbuf(nc);
	fill(a, na, 11, -1, 1);
	fill(b, nb, 12, -1, 1);
	fill(bias, s->N, 13, -0.5f, 0.5f);
	const char *refname = mm_reference(s, a, b, ref);
	if (fused) /* the reference epilogue in double, from the reference product */
		for (int64_t i = 0; i < nc; i++)
			ref[i] = (float)gelu_d((double)ref[i] + bias[i % s->N]);

	char shape[64], note[300];
	mm_shape(shape, sizeof shape, s);
	double flops = 2.0 * s->B * s->M * s->N * s->K;
	bool gemv = !fused && s->B == 1 && s->M == 1;
	const char *wl = fused ? "MatMul+bias+GeLU (fused)" : s->B > 1 ? "BatchMatMul" : "MatMul";
	char *json = mm_json(s, fused);
	Kernel k;
	kernel_build(wl, shape, json, &k);
	free(json);
	void *args[4] = {a, b, fused ? (void *)bias : (void *)ck, ck};
	Check cc = {1, {ck}, {ref}, {nc}}, pc = {1, {cp}, {ref}, {nc}};

	Meas kms[3], oms[3], dms[3];
	for (int t = 1; t <= 2; t++) {
		Meas km = kms[t] = measure_kernel(&k, t, args, &cc);

		/* OpenBLAS: sgemv at M = 1, else sgemm (a loop over the batch),
		 * + the epilogue pass */
		Meas om;
		if (ob_missing())
			om = not_measured("%s", ob_missing());
		else {
			ob_threads(t);
			MmRun r = {s, a, b, bias, cp, &g_rt[t]};
			om = measure(gemv ? ob_gemv_run : fused ? ob_epi_run : ob_run, &r, &pc);
			if (t > 1) /* let its spinning workers go to sleep */
				sleep_s(0.15);
		}
		oms[t] = om;
		note_join(note, sizeof note, s->note, "", refname);
		if (gemv && om.ok)
			note_add(note, sizeof note, "sgemv err %.1e", om.err);
		row(wl, shape, t, &k, &km, flops,
		    gemv    ? "OpenBLAS sgemv"
		    : fused ? "OpenBLAS sgemm + C epilogue"
		            : "OpenBLAS sgemm",
		    &om, flops, "GFLOP/s", note, t > 1 ? &kms[1] : NULL, t > 1 ? &oms[1] : NULL);

		/* oneDNN matmul (fused: bias + gelu_tanh post-op in one primitive) */
		Meas dm;
		char why[200] = "", impl[64] = "";
		if (one_missing())
			dm = not_measured("%s", one_missing());
		else if (!one_threads(t))
			dm = not_measured("cannot set oneDNN's threads to %d (%s)", t,
			                  one_threads_how());
		else
			dm = measure_onednn(one_matmul(s->B, s->M, s->N, s->K, s->tb, a, b,
			                               fused ? bias : NULL, fused, cp, why,
			                               sizeof why),
			                    why, &pc, impl, sizeof impl);
		dms[t] = dm;
		note_join(note, sizeof note, s->note, impl, refname);
		if (gemv && dm.ok)
			note_add(note, sizeof note, "oneDNN err %.1e", dm.err);
		row(wl, shape, t, &k, &km, flops,
		    fused ? "oneDNN matmul+bias+gelu" : "oneDNN matmul", &dm, flops, "GFLOP/s",
		    note, t > 1 ? &kms[1] : NULL, t > 1 ? &dms[1] : NULL);
	}
	kernel_free(&k);
	free(a), free(b), free(bias), free(ref), free(ck), free(cp);
}

/* ---- softmax and layernorm ----------------------------------------------------------- */

static void
bench_softmax(int rows, int cols)
{
	int64_t n = (int64_t)rows * cols;
	float *x = fbuf(n), *ref = fbuf(n), *y = fbuf(n), *yp = fbuf(n);
	fill(x, n, 21, -4, 4);
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * cols;
		double m = -INFINITY, s = 0;
		for (int j = 0; j < cols; j++)
			m = fmax(m, xr[j]);
		for (int j = 0; j < cols; j++)
			s += exp(xr[j] - m);
		for (int j = 0; j < cols; j++)
			ref[r * cols + j] = (float)(exp(xr[j] - m) / s);
	}
	/* Fused_Softmax: ReduceMax, Sub, Exp, ReduceSum, RealDiv over the last axis */
	Gb g = {0};
	char sh[48], s1[48];
	snprintf(sh, sizeof sh, "[%d,%d]", rows, cols);
	snprintf(s1, sizeof s1, "[%d,1]", rows);
	gb_input(&g, "input_0", sh);
	gb_op(&g, "ReduceMax", ATTR_REDUCE("[-1]", "true"), "output_0_0", s1, 1, "input_0");
	gb_op(&g, "Sub", "null", "output_0_1", sh, 2, "input_0", "output_0_0");
	gb_op(&g, "Exp", "null", "output_0_2", sh, 1, "output_0_1");
	gb_op(&g, "ReduceSum", ATTR_REDUCE("[-1]", "true"), "output_0_3", s1, 1, "output_0_2");
	gb_op(&g, "RealDiv", "null", "output_0_4", sh, 2, "output_0_2", "output_0_3");
	gb_output(&g, "output_0_4");
	char *json = gb_take(&g, "Fused_Softmax_kbench");
	char shape[64], note[300];
	snprintf(shape, sizeof shape, "%dx%d", rows, cols);
	Kernel k;
	kernel_build("Softmax", shape, json, &k);
	free(json);
	void *args[2] = {x, y};
	Check cc = {1, {y}, {ref}, {n}}, pc = {1, {yp}, {ref}, {n}};
	double bytes = 2.0 * 4 * n;
	Meas kms[3], dms[3];
	for (int t = 1; t <= 2; t++) {
		Meas km = kms[t] = measure_kernel(&k, t, args, &cc), dm;
		char why[200] = "", impl[64] = "";
		if (one_missing())
			dm = not_measured("%s", one_missing());
		else if (!one_threads(t))
			dm = not_measured("cannot set oneDNN's threads to %d", t);
		else
			dm = measure_onednn(one_softmax(rows, cols, x, yp, why, sizeof why), why,
			                    &pc, impl, sizeof impl);
		note_join(note, sizeof note, NULL, impl, "double C");
		dms[t] = dm;
		row("Softmax", shape, t, &k, &km, bytes, "oneDNN softmax", &dm, bytes, "GB/s", note,
		    t > 1 ? &kms[1] : NULL, t > 1 ? &dms[1] : NULL);
	}
	kernel_free(&k);
	free(x), free(ref), free(y), free(yp);
}

static void
bench_layernorm(int rows, int cols)
{
	int64_t n = (int64_t)rows * cols;
	const float eps = 1e-7f;
	float *x = fbuf(n), *gamma = fbuf(cols), *beta = fbuf(cols), *ref = fbuf(n), *y = fbuf(n),
	      *yp = fbuf(n);
	fill(x, n, 31, -2, 3);
	fill(gamma, cols, 32, 0.5f, 1.5f);
	fill(beta, cols, 33, -0.5f, 0.5f);
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * cols;
		double m = 0, v = 0;
		for (int j = 0; j < cols; j++)
			m += xr[j];
		m /= cols;
		for (int j = 0; j < cols; j++)
			v += (xr[j] - m) * (xr[j] - m);
		v /= cols;
		for (int j = 0; j < cols; j++)
			ref[r * cols + j] =
			    (float)((xr[j] - m) / sqrt(v + eps) * gamma[j] + beta[j]);
	}
	/* as MindSpore's LayerNorm fusions (Fused_..._ReduceSum_..._Rsqrt_...):
	 * mean = ReduceSum(x) * (1/N); d = x - mean; var = ReduceSum(d*d) * (1/N);
	 * y = d * Rsqrt(var + eps) * gamma + beta */
	Gb g = {0};
	char sh[48], s1[48], sc[24], inv[32], epss[32];
	snprintf(sh, sizeof sh, "[%d,%d]", rows, cols);
	snprintf(s1, sizeof s1, "[%d,1]", rows);
	snprintf(sc, sizeof sc, "[%d]", cols);
	snprintf(inv, sizeof inv, "#%.17g", (double)(1.0f / (float)cols));
	snprintf(epss, sizeof epss, "#%.17g", (double)eps);
	gb_input(&g, "input_0", sh);
	gb_input(&g, "input_1", sc);
	gb_input(&g, "input_2", sc);
	gb_op(&g, "ReduceSum", ATTR_REDUCE("[1]", "true"), "output_0_0", s1, 1, "input_0");
	gb_op(&g, "Mul", "null", "output_0_1", s1, 2, "output_0_0", inv);
	gb_op(&g, "Sub", "null", "output_0_2", sh, 2, "input_0", "output_0_1");
	gb_op(&g, "Mul", "null", "output_0_3", sh, 2, "output_0_2", "output_0_2");
	gb_op(&g, "ReduceSum", ATTR_REDUCE("[1]", "true"), "output_0_4", s1, 1, "output_0_3");
	gb_op(&g, "Mul", "null", "output_0_5", s1, 2, "output_0_4", inv);
	gb_op(&g, "Add", "null", "output_0_6", s1, 2, "output_0_5", epss);
	gb_op(&g, "Rsqrt", "null", "output_0_7", s1, 1, "output_0_6");
	gb_op(&g, "Mul", "null", "output_0_8", sh, 2, "output_0_2", "output_0_7");
	gb_op(&g, "Mul", "null", "output_0_9", sh, 2, "output_0_8", "input_1");
	gb_op(&g, "Add", "null", "output_0_10", sh, 2, "output_0_9", "input_2");
	gb_output(&g, "output_0_10");
	char *json = gb_take(&g, "Fused_LayerNorm_kbench");
	char shape[64], note[300];
	snprintf(shape, sizeof shape, "%dx%d", rows, cols);
	Kernel k;
	kernel_build("LayerNorm", shape, json, &k);
	free(json);
	void *args[4] = {x, gamma, beta, y};
	Check cc = {1, {y}, {ref}, {n}}, pc = {1, {yp}, {ref}, {n}};
	double bytes = 4.0 * (2.0 * n + 2.0 * cols);
	Meas kms[3], dms[3];
	for (int t = 1; t <= 2; t++) {
		Meas km = kms[t] = measure_kernel(&k, t, args, &cc), dm;
		char why[200] = "", impl[64] = "";
		if (one_missing())
			dm = not_measured("%s", one_missing());
		else if (!one_threads(t))
			dm = not_measured("cannot set oneDNN's threads to %d", t);
		else
			dm = measure_onednn(
			    one_layernorm(rows, cols, eps, x, gamma, beta, yp, why, sizeof why),
			    why, &pc, impl, sizeof impl);
		note_join(note, sizeof note, NULL, impl, "double C");
		dms[t] = dm;
		row("LayerNorm", shape, t, &k, &km, bytes, "oneDNN layer_normalization", &dm, bytes,
		    "GB/s", note, t > 1 ? &kms[1] : NULL, t > 1 ? &dms[1] : NULL);
	}
	kernel_free(&k);
	free(x), free(gamma), free(beta), free(ref), free(y), free(yp);
}

/* ---- Transpose and ReduceSum against the triad ---------------------------------------- */

/* kcsd's kernel against the triad moving the same bytes. */
static void
bandwidth_rows(const char *wl, const char *shape, const char *json, void **args, const Check *ck,
               double bytes, const char *note)
{
	Kernel k;
	kernel_build(wl, shape, json, &k);
	Meas kms[3];
	for (int t = 1; t <= 2; t++) {
		Meas km = kms[t] = measure_kernel(&k, t, args, ck);
		Meas tm = {.ok = true, .t = 1.0};
		double gbs = triad_gbs((int64_t)bytes, t, &tm.spread);
		row(wl, shape, t, &k, &km, bytes, "STREAM triad, same bytes", &tm, gbs * 1e9,
		    "GB/s", note, t > 1 ? &kms[1] : NULL, NULL);
	}
	kernel_free(&k);
}

static void
bench_transpose(int rank, const int *dims, const int *perm)
{
	int64_t n = 1, od[4], istr[4];
	char sh[64] = "[", osh[64] = "[", pm[32] = "[", shape[96];
	for (int i = 0; i < rank; i++) {
		n *= dims[i];
		od[i] = dims[perm[i]];
		snprintf(sh + strlen(sh), sizeof sh - strlen(sh), "%s%d", i ? "," : "", dims[i]);
		snprintf(osh + strlen(osh), sizeof osh - strlen(osh), "%s%lld", i ? "," : "",
		         (long long)od[i]);
		snprintf(pm + strlen(pm), sizeof pm - strlen(pm), "%s%d", i ? "," : "", perm[i]);
	}
	strcat(sh, "]"), strcat(osh, "]"), strcat(pm, "]");
	snprintf(shape, sizeof shape, "%s perm %s", sh, pm);
	istr[rank - 1] = 1;
	for (int i = rank - 2; i >= 0; i--)
		istr[i] = istr[i + 1] * dims[i + 1];
	float *x = fbuf(n), *y = fbuf(n), *ref = fbuf(n);
	fill(x, n, 41, -1, 1);
	/* the reference: walk the output in order, odometer over its dims */
	int64_t idx[4] = {0};
	for (int64_t o = 0; o < n; o++) {
		int64_t src = 0;
		for (int i = 0; i < rank; i++)
			src += idx[i] * istr[perm[i]];
		ref[o] = x[src];
		for (int i = rank - 1; i >= 0; i--) {
			if (++idx[i] < od[i])
				break;
			idx[i] = 0;
		}
	}
	Gb g = {0};
	char attr[128];
	snprintf(attr, sizeof attr, "[{\"data_type\":\"listInt\",\"name\":\"perm\",\"value\":%s}]",
	         pm);
	gb_input(&g, "input_0", sh);
	gb_op(&g, "Transpose", attr, "output_0_0", osh, 1, "input_0");
	gb_output(&g, "output_0_0");
	char *json = gb_take(&g, "Fused_Transpose_kbench");
	void *args[2] = {x, y};
	Check ck = {1, {y}, {ref}, {n}};
	bandwidth_rows("Transpose", shape, json, args, &ck, 8.0 * n, "ref C");
	free(json);
	free(x), free(y), free(ref);
}

/* ReduceSum of a [R, C] tensor over axis 1, axis 0, or both. */
static void
bench_reduce(int R, int C, int which)
{
	int64_t n = (int64_t)R * C, no = which == 1 ? R : which == 0 ? C : 1;
	float *x = fbuf(n), *y = fbuf(no), *ref = fbuf(no);
	fill(x, n, 51, 0.25f, 2.25f);
	double *acc = calloc((size_t)no, sizeof *acc);
	for (int64_t r = 0; r < R; r++)
		for (int64_t c = 0; c < C; c++)
			acc[which == 1 ? r : which == 0 ? c : 0] += x[r * C + c];
	for (int64_t i = 0; i < no; i++)
		ref[i] = (float)acc[i];
	free(acc);
	Gb g = {0};
	char sh[48], osh[48], shape[96];
	snprintf(sh, sizeof sh, "[%d,%d]", R, C);
	snprintf(osh, sizeof osh, "[%lld]", (long long)no);
	gb_input(&g, "input_0", sh);
	gb_op(&g, "ReduceSum",
	      which == 1   ? ATTR_REDUCE("[1]", "false")
	      : which == 0 ? ATTR_REDUCE("[0]", "false")
	                   : ATTR_REDUCE("[0,1]", "false"),
	      "output_0_0", osh, 1, "input_0");
	gb_output(&g, "output_0_0");
	char *json = gb_take(&g, "Fused_ReduceSum_kbench");
	snprintf(shape, sizeof shape, "%s axis %s", sh,
	         which == 1   ? "[1]"
	         : which == 0 ? "[0]"
	                      : "[0,1]");
	void *args[2] = {x, y};
	Check ck = {1, {y}, {ref}, {no}};
	bandwidth_rows("ReduceSum", shape, json, args, &ck, 4.0 * (double)(n + no), "ref double C");
	free(json);
	free(x), free(y), free(ref);
}

/* ---- elementwise chains ----------------------------------------------------------------- */

/* GeLU (tanh form, as MindSpore expands it), Sigmoid, and an Adam-like
 * update (3 outputs), each over n float32 elements. probe: n is small
 * enough that the data stays in L2; GeLU and Sigmoid only, against the
 * triad and oneDNN, no numpy. If kcsd's GB/s there is no higher than at 1M
 * while the triad's is, the chain is bound by arithmetic, not memory: the
 * 1M rows' miss against the triad is the compute ceiling. */
static void
bench_elementwise(int64_t n, bool probe)
{
	float *in[4], *out[3], *ref[3];
	for (int i = 0; i < 4; i++) {
		in[i] = fbuf(n);
		fill(in[i], n, 61 + (uint32_t)i, 0.25f, 2.25f);
	}
	for (int i = 0; i < 3; i++)
		out[i] = fbuf(n), ref[i] = fbuf(n);
	char sh[32];
	snprintf(sh, sizeof sh, "[%lld]", (long long)n);
	for (int c = 0; c < (probe ? 2 : 3); c++) {
		Gb g = {0};
		const char *name = c == 0 ? "GeLU" : c == 1 ? "Sigmoid" : "Adam";
		int nin = c == 2 ? 4 : 1, nout = c == 2 ? 3 : 1;
		for (int i = 0; i < nin; i++) {
			char nm[16];
			snprintf(nm, sizeof nm, "input_%d", i);
			gb_input(&g, nm, sh);
		}
		if (c == 0) {
			gb_gelu(&g, "input_0", "y", sh);
			gb_output(&g, "y");
			for (int64_t i = 0; i < n; i++)
				ref[0][i] = (float)gelu_d(in[0][i]);
		} else if (c == 1) {
			gb_op(&g, "Neg", "null", "t0", sh, 1, "input_0");
			gb_op(&g, "Exp", "null", "t1", sh, 1, "t0");
			gb_op(&g, "Add", "null", "t2", sh, 2, "t1", "#1.0");
			gb_op(&g, "RealDiv", "null", "y", sh, 2, "#1.0", "t2");
			gb_output(&g, "y");
			for (int64_t i = 0; i < n; i++)
				ref[0][i] = (float)(1.0 / (1.0 + exp(-(double)in[0][i])));
		} else {
			/* input_0 = param, input_1 = m, input_2 = v, input_3 = grad */
			gb_op(&g, "Mul", "null", "m0", sh, 2, "input_1", "#0.9");
			gb_op(&g, "Mul", "null", "m1", sh, 2, "input_3", "#0.1");
			gb_op(&g, "Add", "null", "m", sh, 2, "m0", "m1");
			gb_op(&g, "Mul", "null", "v0", sh, 2, "input_2", "#0.999");
			gb_op(&g, "Mul", "null", "g2", sh, 2, "input_3", "input_3");
			gb_op(&g, "Mul", "null", "v1", sh, 2, "g2", "#0.001");
			gb_op(&g, "Add", "null", "v", sh, 2, "v0", "v1");
			gb_op(&g, "Sqrt", "null", "s", sh, 1, "v");
			gb_op(&g, "Add", "null", "s1", sh, 2, "s", "#1e-8");
			gb_op(&g, "RealDiv", "null", "u", sh, 2, "m", "s1");
			gb_op(&g, "Mul", "null", "u1", sh, 2, "u", "#0.001");
			gb_op(&g, "Sub", "null", "p", sh, 2, "input_0", "u1");
			gb_output(&g, "p");
			gb_output(&g, "m");
			gb_output(&g, "v");
			for (int64_t i = 0; i < n; i++) {
				double m = 0.9 * in[1][i] + 0.1 * in[3][i];
				double v = 0.999 * in[2][i] + 0.001 * (double)in[3][i] * in[3][i];
				ref[0][i] = (float)(in[0][i] - 0.001 * (m / (sqrt(v) + 1e-8)));
				ref[1][i] = (float)m;
				ref[2][i] = (float)v;
			}
		}
		char opname[64];
		snprintf(opname, sizeof opname, "Fused_%s_kbench", name);
		char *json = gb_take(&g, opname);
		char shape[32];
		snprintf(shape, sizeof shape, "%lld", (long long)n);
		Kernel k;
		kernel_build(name, shape, json, &k);
		free(json);
		void *args[7];
		for (int i = 0; i < nin; i++)
			args[i] = in[i];
		for (int i = 0; i < nout; i++)
			args[nin + i] = out[i];
		Check ck = {nout, {out[0], out[1], out[2]}, {ref[0], ref[1], ref[2]}, {n, n, n}};
		double bytes = 4.0 * (double)n * (nin + nout);
		Meas kms[3];
		/* the probe runs at 1 thread: 16K elements are one parallel grain */
		for (int t = 1; t <= (probe ? 1 : 2); t++) {
			Meas km = kms[t] = measure_kernel(&k, t, args, &ck);
			Meas tm = {.ok = true, .t = 1.0};
			double gbs = triad_gbs((int64_t)bytes, t, &tm.spread);
			row(name, shape, t, &k, &km, bytes, "STREAM triad, same bytes", &tm,
			    gbs * 1e9, "GB/s",
			    probe ? "in L2: the compute ceiling probe; ref double C"
			          : "ref double C",
			    t > 1 ? &kms[1] : NULL, NULL);
			/* bench/run turns this into the row against numpy (unfused) */
			if (probe)
				continue;
			if (km.ok && km.err <= TOL)
				printf("@numpy %s %lld %d %.9g %.0f %.0f|%.0f %.1e\n", name,
				       (long long)n, t, km.t, bytes, k.compile_ms, k.compile_cpu_ms,
				       km.err);
			else
				printf("@numpy %s %lld %d - %.0f - -\n", name, (long long)n, t,
				       bytes);
		}
		/* GeLU and Sigmoid against oneDNN's JIT eltwise kernels: where the
		 * triad is out of reach (compute-bound, 1M in L3), the best
		 * hand-written kernel says what is */
		for (int t = 1; t <= (probe ? 1 : 2) && c < 2; t++) {
			Check pc = {1, {out[1]}, {ref[0]}, {n}};
			char why[200] = "", impl[64] = "", note[300];
			Meas dm;
			if (one_missing())
				dm = not_measured("%s", one_missing());
			else if (!one_threads(t))
				dm = not_measured("cannot set oneDNN's threads to %d", t);
			else
				dm = measure_onednn(
				    one_eltwise(c == 0, n, in[0], out[1], why, sizeof why), why,
				    &pc, impl, sizeof impl);
			note_join(note, sizeof note, NULL, impl, "double C");
			row(name, shape, t, &k, &kms[t], bytes,
			    c == 0 ? "oneDNN eltwise gelu_tanh" : "oneDNN eltwise logistic", &dm,
			    bytes, "GB/s", note, NULL, NULL);
		}
		kernel_free(&k);
	}
	for (int i = 0; i < 4; i++)
		free(in[i]);
	for (int i = 0; i < 3; i++)
		free(out[i]), free(ref[i]);
}

/* ---- main ------------------------------------------------------------------------------- */

static const MmSpec g_mm[] = {
    {1, 128, 768, 768, false, NULL},
    {1, 128, 3072, 768, false, NULL},
    {1, 128, 768, 3072, false, NULL},
    {1, 512, 768, 768, false, NULL},
    {1, 1024, 1024, 1024, false, NULL},
    {12, 128, 128, 64, true, "attention q k^T"},
    {12, 128, 64, 128, false, "attention p v"},
};

/* M = 1: the dense layer as MindSpore sends it (weight [N,K], transpose_b)
 * and the same products with the weight stored [K,N]. */
static const MmSpec g_gemv[] = {
    {1, 1, 1000, 2048, true, "dense layer as MindSpore sends it"},
    {1, 1, 1000, 2048, false, NULL},
    {1, 1, 768, 768, true, NULL},
    {1, 1, 768, 768, false, NULL},
    {1, 1, 4096, 1024, true, NULL},
    {1, 1, 4096, 1024, false, NULL},
};

static bool
want(const char *only, const char *section)
{
	if (!only)
		return true;
	size_t n = strlen(section);
	for (const char *p = only; (p = strstr(p, section)); p += n)
		if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
			return true;
	return false;
}

int
main(int argc, char **argv)
{
	bool quick = false;
	const char *tname = "cpu", *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--target") && i + 1 < argc)
			tname = argv[++i];
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else {
			fprintf(stderr, "usage: kbench [--quick] [--target NAME] [--only "
			                "matmul,gemv,fused,norm,layout,elementwise]\n");
			return 2;
		}
	}
	kc_compiler_init();
	KcErr err = {0};
	if (kc_target_resolve(tname, &g_target, &err) != KC_OK) {
		fprintf(stderr, "kbench: %s\n", err.msg);
		return 2;
	}
	if (quick)
		g_budget = 0.1, g_min_samples = 3, g_warm = 0.01;
	{ /* one throw-away compile absorbs the process's one-time LLVM set-up,
	   * so it is not counted against the first workload */
		Gb g = {0};
		Kernel k;
		gb_input(&g, "input_0", "[16]");
		gb_op(&g, "Add", "null", "output_0_0", "[16]", 2, "input_0", "#1.0");
		gb_output(&g, "output_0_0");
		char *json = gb_take(&g, "Fused_Add_kbench_warmup");
		kernel_build(NULL, NULL, json, &k);
		kernel_free(&k);
		free(json);
	}
	Pool pools[3];
	for (int t = 1; t <= 2; t++)
		pool_init(&pools[t], &g_rt[t], t);

	printf("@info target %s\n", g_target.name);
	printf("@info kcsd threads: a KcsRuntime pthread pool of n threads (the calling thread is "
	       "one of them)\n");
	printf("@info openblas %s; threads: openblas_set_num_threads(n)\n", ob_describe());
	printf("@info onednn %s; threads: %s\n", one_describe(), one_threads_how());
	defn("kcsd: every kernel is compiled once per workload, cold, in this process (parse + "
	     "kc_compile: "
	     "lower, schedule, LLVM O3 (a module of GEMM stages: objcode.c's short GEMM pipeline), "
	     "object, "
	     "in-process link; the \"kcsd cold compile\" column: wall time, "
	     "and in parentheses the compiling thread's CPU time, which a loaded machine inflates "
	     "less; a "
	     "throw-away compile first absorbs the process's one-time LLVM set-up), with the "
	     "default "
	     "schedule (no tuning); its rows at 1 and 2 threads share that compile.");
	defn("kcsd err: max |kcsd - ref| / max |ref| over the outputs of kcsd's first call at that "
	     "thread "
	     "count (outputs NaN-filled before it), against the reference the note names (ref); "
	     "above "
	     "%.0e the entry reads **WRONG** and has no speed. Peers' outputs are checked against "
	     "the same "
	     "reference and the note says when one differs.",
	     TOL);
	defn("noisy: the note says so when the interquartile range of a row's samples passes "
	     "%.0f%% of "
	     "their median (another process took the CPU during them); \"Nx slower on 2 threads "
	     "than on "
	     "1\": an implementation's 2-thread time is more than twice its 1-thread time, which "
	     "on a "
	     "shared machine means one of its threads waited to be scheduled (OpenMP threads that "
	     "spin "
	     "while idle suffer most: see bench/run --omp-wait-policy).",
	     100 * NOISY);
	if (want(only, "matmul") || want(only, "gemv") || want(only, "fused"))
		defn("MatMul (M,N,K): a[M,K] times b[K,N], float32 row-major, one composite with "
		     "one MatMul op (attrs as MindSpore writes them); b^T: b stored [N,K] with "
		     "transpose_b = true. BatchMatMul (B,M,N,K): the same per batch (attention: q "
		     "k^T with transpose_b, then p v). GFLOP/s = 2 B M N K / time. Peers: OpenBLAS"
		     " cblas_sgemm (BatchMatMul: a loop of B sgemm calls; M = 1: cblas_sgemv) and "
		     "oneDNN's matmul primitive (3-D for BatchMatMul); impl is the implementation "
		     "oneDNN chose.");
	if (want(only, "gemv"))
		defn("MatMul at M = 1 (a GEMV), (1,N,K): y[1,N] = x[1,K] times b; b^T: the weight "
		     "stored [N,K] with transpose_b, the dense layer as MindSpore sends it "
		     "(x[1,2048] times weight[1000,2048]); without b^T the same product with the "
		     "weight stored [K,N]. The OpenBLAS peer is cblas_sgemv, what a BLAS user "
		     "calls for it (not sgemm with M = 1), computing the same y: row-major [N,K] "
		     "with CblasNoTrans (y = b x), [K,N] with CblasTrans (y = b^T x), alpha 1, "
		     "beta 0, its threads set as for sgemm; the oneDNN peer is its matmul "
		     "primitive with M = 1. The reference is a double-accumulating C product: "
		     "kcsd's, sgemv's and oneDNN's first outputs are checked against it before any"
		     " timed call (the note gives the peers' errors; a peer above %.0e gets no "
		     "ratio). kcsd compiles M = 1 as a reduction stage over K, not as its GEMM "
		     "template (loop/lower_gemm.c): with b^T one vectorised dot product per "
		     "output over a contiguous weight row; a [K,N] weight is not K-contiguous, and"
		     " the default schedule packs it a column at a time (K floats N apart, fused "
		     "with that column's dot product), where sgemv with CblasTrans streams it row "
		     "by row. Every timed call reads the same weight (2.25 to 16 MiB), so it stays"
		     " in the last-level cache where that is large enough: these are warm-cache "
		     "GEMVs, not streams from DRAM.",
		     TOL);
	if (want(only, "fused"))
		defn("MatMul+bias+GeLU (fused): one composite, MatMul x[128,768] times "
		     "w[768,3072], Add "
		     "bias[3072] broadcast over rows, then the GeLU tanh chain as MindSpore writes "
		     "it "
		     "(Fused_BiasAdd_GeLU: Mul, Mul, Mul 0.044715, Add, Mul 0.79788458, Tanh, Add "
		     "1, Mul, Mul 0.5). "
		     "Peers: OpenBLAS sgemm followed by a separate epilogue pass, a plain C loop y "
		     "= "
		     "gelu_tanh(c + bias) in place over C (bench/epilogue.c, gcc -O3 -march=native "
		     "-ffast-math, "
		     "vectorised with glibc's libmvec tanhf; its rows split over the same thread "
		     "pool as kcsd's); "
		     "and one oneDNN matmul primitive with the bias and an eltwise_gelu_tanh "
		     "post-op. Reference: "
		     "the reference product, then bias + GeLU in double. GFLOP/s counts the "
		     "matmul's 2 M N K only.");
	if (want(only, "norm"))
		defn("Softmax: ReduceMax, Sub, Exp, ReduceSum, RealDiv over the last axis of "
		     "[1536,128] (12 heads "
		     "x 128 rows of attention scores), the op structure of Fused_Softmax. "
		     "LayerNorm: over the "
		     "last axis of [R,768] with gamma and beta, MindSpore's fused structure: "
		     "ReduceSum, Mul 1/N "
		     "(mean), Sub, Mul, ReduceSum, Mul 1/N (variance), Add eps (1e-7), Rsqrt, Mul, "
		     "Mul gamma, Add "
		     "beta; only y is output. GB/s = bytes read + written (x, y, and gamma, beta) "
		     "/ time. Peers: "
		     "oneDNN softmax and layer_normalization (scale and shift) forward_inference "
		     "primitives.");
	if (want(only, "layout") || want(only, "elementwise"))
		defn("Transpose, ReduceSum and the elementwise chains move data and compute "
		     "little: GB/s = "
		     "bytes of the inputs read + outputs written, once each, / time; the peer is a "
		     "STREAM triad "
		     "a = b + 3c (bench/kref.c, gcc -O3 -march=native, on the same thread pool) "
		     "over arrays "
		     "sized to move the same number of bytes, measured in this run (the bandwidth "
		     "roofline at "
		     "that footprint). ReduceSum over axis [0,1] gives [1].");
	if (want(only, "elementwise"))
		defn("GeLU: the tanh chain above on one [n] input; Sigmoid: Neg, Exp, Add 1, "
		     "RealDiv 1 / .; "
		     "Adam: an Adam-like update, 4 inputs (param, m, v, grad) and 3 outputs "
		     "(param, m, v), 12 "
		     "ops including Sqrt and RealDiv; n = 1M and 16M float32. GeLU and Sigmoid "
		     "also run "
		     "against oneDNN's eltwise primitive (gelu_tanh, logistic: its JIT kernels), "
		     "the "
		     "hand-written peer for the same math. The compute ceiling probe: GeLU and "
		     "Sigmoid at n = 64K (512 KiB moved, in L2), 1 thread (64K is a few parallel "
		     "grains): where kcsd's GB/s there is no higher than at 1M while the triad's "
		     "is, "
		     "the chain is bound by its arithmetic, not by memory, and the 1M rows' ratio "
		     "to "
		     "the triad is not a memory miss.");
	printf("| workload | shape | threads | kcsd | peer | peer result | kcsd / peer | kcsd cold "
	       "compile | kcsd err | note |\n"
	       "|---|---|---:|---:|---|---:|---:|---:|---:|---|\n");
	fflush(stdout);

	if (want(only, "matmul"))
		for (size_t i = 0; i < sizeof g_mm / sizeof g_mm[0]; i++)
			bench_matmul(&g_mm[i], false);
	if (want(only, "gemv"))
		for (size_t i = 0; i < sizeof g_gemv / sizeof g_gemv[0]; i++)
			bench_matmul(&g_gemv[i], false);
	if (want(only, "fused")) {
		MmSpec f = {1, 128, 3072, 768, false, NULL};
		bench_matmul(&f, true);
	}
	if (want(only, "norm")) {
		bench_softmax(1536, 128);
		bench_layernorm(128, 768);
		bench_layernorm(4096, 768);
	}
	if (want(only, "layout")) {
		static const int d2[] = {4096, 4096}, p2[] = {1, 0};
		static const int d4[] = {64, 128, 12, 64}, p4[] = {0, 2, 1, 3};
		bench_transpose(2, d2, p2);
		bench_transpose(4, d4, p4);
		bench_reduce(4096, 4096, 1);
		bench_reduce(4096, 4096, 0);
		bench_reduce(4096, 4096, 2);
	}
	if (want(only, "elementwise")) {
		bench_elementwise(64 << 10, true);
		bench_elementwise(1 << 20, false);
		bench_elementwise(16 << 20, false);
	}
	for (int t = 1; t <= 2; t++)
		pool_fini(&pools[t]);
	if (g_wrong) {
		fprintf(stderr, "kbench: %d kcsd measurement(s) with a WRONG output\n", g_wrong);
		return 3;
	}
	return 0;
}
