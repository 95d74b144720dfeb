/* kbench.c - kernel benchmarks, measured side by side with their peers.
 *
 * Compiles composite graphs in-process (the full kc_compile pipeline, cold:
 * one CompileCtx per compile), loads the shared objects, and times each
 * kernel and its peer in the same run, at 1 and 2 threads, through a
 * pthread KcsRuntime like a training job's own pool:
 *   - elementwise chains (GeLU, Sigmoid, Adam-like) at 1M and 16M elements:
 *     GB/s, against a STREAM triad measured here (the bandwidth roofline);
 *     numpy's unfused time for the same chains comes from bench/run;
 *   - cold compile time per workload.
 * Prints one markdown row per measurement on stdout (bench/run assembles
 * the table). Rows whose template does not exist yet are not printed.
 *
 * Usage: kbench [--quick] [--target NAME]
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler.h"
#include "kcs_abi.h"

/* ---- a small persistent thread pool implementing KcsRuntime ------------ */

typedef struct Pool {
	int n;
	pthread_t th[64];
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;
	int pending;
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

static void *
pool_main(void *arg)
{
	Pool *p = arg;
	uint64_t seen = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (p->gen == seen && !p->quit)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		pool_work(p);
		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
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
	p->pending = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	pool_work(p); /* the caller is worker 0 */
	pthread_mutex_lock(&p->mu);
	while (p->pending > 0)
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

/* ---- timing ---------------------------------------------------------------- */

static double
now_s(void)
{
	return (double)kc_now_us() / 1e6;
}

/* Median seconds per call of fn over enough repetitions (>= 0.3 s total,
 * >= 5 samples) after one warm-up call. */
typedef void (*RunFn)(void *arg);
static double
time_median(RunFn fn, void *arg, double budget_s)
{
	double s[64];
	int n = 0;
	fn(arg);
	double t_end = now_s() + budget_s;
	while (n < 64 && (n < 5 || now_s() < t_end)) {
		double t0 = now_s();
		fn(arg);
		s[n++] = now_s() - t0;
	}
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
			double x = s[j];
			s[j] = s[j - 1];
			s[j - 1] = x;
		}
	return s[n / 2];
}

/* ---- STREAM triad (the roofline) -------------------------------------------- */

typedef struct Triad {
	float *a, *b, *c;
	int64_t n;
	KcsRuntime *rt;
} Triad;

static int32_t
triad_task(void *closure, int64_t t, int64_t nt)
{
	Triad *x = closure;
	int64_t lo = x->n * t / nt, hi = x->n * (t + 1) / nt;
	float *restrict a = x->a;
	const float *restrict b = x->b, *restrict c = x->c;
	for (int64_t i = lo; i < hi; i++)
		a[i] = b[i] + 3.0f * c[i];
	return 0;
}

static void
triad_run(void *arg)
{
	Triad *x = arg;
	x->rt->parallel_for(x->rt->ctx, triad_task, x, x->rt->num_threads * 4);
}

/* ---- kernels ------------------------------------------------------------------ */

typedef struct Kernel {
	void *dl;
	KcsKernelFn fn;
	double compile_ms;
	char path[256];
} Kernel;

static bool
kernel_build(const char *json, const KcTarget *t, Kernel *k)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	KcArtifact art = {0};
	bool ok = false;

	memset(k, 0, sizeof *k);
	if (kc_parse(c, json, strlen(json), NULL, &g, &err) != KC_OK ||
	    kc_compile(c, g, t, NULL, NULL, &art, &err) != KC_OK) {
		fprintf(stderr, "kbench: compile failed: %s at %s\n", err.msg, err.where);
		goto done;
	}
	k->compile_ms = art.compile_ms;
	snprintf(k->path, sizeof k->path, "/tmp/kbench-%d-%p.so", (int)getpid(), (void *)k);
	FILE *f = fopen(k->path, "wb");
	if (!f || fwrite(art.object, 1, art.object_len, f) != art.object_len) {
		if (f)
			fclose(f);
		goto done;
	}
	fclose(f);
	k->dl = dlopen(k->path, RTLD_NOW | RTLD_LOCAL);
	unlink(k->path);
	void *sym = k->dl ? dlsym(k->dl, art.symbol) : NULL;
	if (sym) /* POSIX: dlsym's object pointer converts to a function pointer */
		memcpy(&k->fn, &sym, sizeof k->fn);
	if (!k->fn) {
		fprintf(stderr, "kbench: dlopen: %s\n", dlerror());
		goto done;
	}
	ok = true;
done:
	kc_artifact_free(&art);
	compile_ctx_free(c);
	return ok;
}

typedef struct KRun {
	Kernel *k;
	KcsRuntime *rt;
	void **args;
} KRun;

static void
kernel_run(void *arg)
{
	KRun *r = arg;
	int32_t rc = r->k->fn(r->rt, (void *const *)r->args, NULL);
	if (rc)
		fprintf(stderr, "kbench: kernel returned %d\n", rc);
}

/* ---- elementwise chains ------------------------------------------------------ */

/* A composite document with `nin` float32 inputs of n elements and the
 * given op_desc and output_desc fragments. */
static char *
chain_json(const char *name, int64_t n, int nin, const char *ops, const char *outs)
{
	KcBuf b = {0};
	kc_buf_printf(&b, "{\"composite\":true,\"op\":\"%s\",\"process\":\"cpu\",\"version\":1,\"input_desc\":[",
		      name);
	for (int i = 0; i < nin; i++)
		kc_buf_printf(&b,
			      "%s[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"shape\":[%lld],\"tensor_name\":\"in%d\"}]",
			      i ? "," : "", (long long)n, i);
	kc_buf_printf(&b, "],\"op_desc\":[%s],\"output_desc\":[%s]}", ops, outs);
	return kc_buf_take(&b, NULL);
}

/* op with two operands (tensor names or constants) and one float32 output */
static void
op2(KcBuf *b, const char *op, const char *x, const char *y, const char *out, int64_t n)
{
	char xs[256], ys[256];
	if (x[0] == '#')
		snprintf(xs, sizeof xs, "{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"name\":\"x\",\"shape\":[1],\"tensor_name\":\"c_%s\",\"value\":%s}", out, x + 1);
	else
		snprintf(xs, sizeof xs, "{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"name\":\"x\",\"shape\":[%lld],\"tensor_name\":\"%s\"}", (long long)n, x);
	if (!y)
		ys[0] = 0;
	else if (y[0] == '#')
		snprintf(ys, sizeof ys, ",[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"name\":\"y\",\"shape\":[1],\"tensor_name\":\"d_%s\",\"value\":%s}]", out, y + 1);
	else
		snprintf(ys, sizeof ys, ",[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"name\":\"y\",\"shape\":[%lld],\"tensor_name\":\"%s\"}]", (long long)n, y);
	kc_buf_printf(b,
		      "%s{\"name\":\"%s\",\"attr\":null,\"input_desc\":[[%s]%s],\"output_desc\":[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"name\":\"output_0\",\"shape\":[%lld],\"tensor_name\":\"%s\"}]}",
		      b->len ? "," : "", op, xs, ys, (long long)n, out);
}

static char *
outs_json(const char *const *names, int k, int64_t n)
{
	KcBuf b = {0};
	for (int i = 0; i < k; i++)
		kc_buf_printf(&b, "%s{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"shape\":[%lld],\"tensor_name\":\"%s\"}",
			      i ? "," : "", (long long)n, names[i]);
	return kc_buf_take(&b, NULL);
}

typedef struct Chain {
	const char *name;
	int nin, nout;
	char *json;
} Chain;

/* GeLU (tanh form, as MindSpore expands it), Sigmoid, and an Adam-like
 * update (3 outputs), each over n float32 elements. */
static void
make_chains(int64_t n, Chain out[3])
{
	KcBuf b = {0};
	op2(&b, "Mul", "in0", "in0", "x2", n);
	op2(&b, "Mul", "x2", "in0", "x3", n);
	op2(&b, "Mul", "x3", "#0.044715", "t0", n);
	op2(&b, "Add", "in0", "t0", "t1", n);
	op2(&b, "Mul", "t1", "#0.7978845608", "t2", n);
	op2(&b, "Tanh", "t2", NULL, "t3", n);
	op2(&b, "Add", "t3", "#1.0", "t4", n);
	op2(&b, "Mul", "in0", "t4", "t5", n);
	op2(&b, "Mul", "t5", "#0.5", "y", n);
	const char *gy[] = {"y"};
	char *o = outs_json(gy, 1, n);
	out[0] = (Chain){"GeLU", 1, 1, chain_json("Fused_GeLU_bench", n, 1, b.data, o)};
	free(o);
	kc_buf_free(&b);

	op2(&b, "Neg", "in0", NULL, "t0", n);
	op2(&b, "Exp", "t0", NULL, "t1", n);
	op2(&b, "Add", "t1", "#1.0", "t2", n);
	op2(&b, "RealDiv", "#1.0", "t2", "y", n);
	o = outs_json(gy, 1, n);
	out[1] = (Chain){"Sigmoid", 1, 1, chain_json("Fused_Sigmoid_bench", n, 1, b.data, o)};
	free(o);
	kc_buf_free(&b);

	/* in0 = param, in1 = m, in2 = v, in3 = grad */
	op2(&b, "Mul", "in1", "#0.9", "m0", n);
	op2(&b, "Mul", "in3", "#0.1", "m1", n);
	op2(&b, "Add", "m0", "m1", "m", n);
	op2(&b, "Mul", "in2", "#0.999", "v0", n);
	op2(&b, "Mul", "in3", "in3", "g2", n);
	op2(&b, "Mul", "g2", "#0.001", "v1", n);
	op2(&b, "Add", "v0", "v1", "v", n);
	op2(&b, "Sqrt", "v", NULL, "s", n);
	op2(&b, "Add", "s", "#1e-8", "s1", n);
	op2(&b, "RealDiv", "m", "s1", "u", n);
	op2(&b, "Mul", "u", "#0.001", "u1", n);
	op2(&b, "Sub", "in0", "u1", "p", n);
	const char *ay[] = {"p", "m", "v"};
	o = outs_json(ay, 3, n);
	out[2] = (Chain){"Adam", 4, 3, chain_json("Fused_Adam_bench", n, 4, b.data, o)};
	free(o);
	kc_buf_free(&b);
}

int
main(int argc, char **argv)
{
	bool quick = false;
	const char *tname = "cpu";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--target") && i + 1 < argc)
			tname = argv[++i];
		else {
			fprintf(stderr, "usage: kbench [--quick] [--target NAME]\n");
			return 2;
		}
	}
	kc_compiler_init();
	KcTarget t;
	KcErr err = {0};
	if (kc_target_resolve(tname, &t, &err) != KC_OK) {
		fprintf(stderr, "kbench: %s\n", err.msg);
		return 2;
	}
	double budget = quick ? 0.1 : 0.4;
	int64_t sizes[2] = {1 << 20, 16 << 20};

	printf("| row | size | threads | kcsd | peer | ratio | note |\n|---|---:|---:|---:|---:|---:|---|\n");
	for (int si = 0; si < 2; si++) {
		int64_t n = sizes[si];
		float *buf[8];
		for (int i = 0; i < 8; i++) {
			buf[i] = aligned_alloc(64, (size_t)n * 4);
			for (int64_t j = 0; j < n; j++)
				buf[i][j] = (float)((j * 7 + i * 13) % 1000) / 500.0f + 0.25f;
		}
		Chain ch[3];
		make_chains(n, ch);
		for (int threads = 1; threads <= 2; threads++) {
			Pool pool;
			KcsRuntime rt;
			pool_init(&pool, &rt, threads);
			Triad tr = {buf[0], buf[1], buf[2], n, &rt};
			double ttri = time_median(triad_run, &tr, budget);
			double triad_gbs = 12.0 * (double)n / ttri / 1e9;
			printf("| STREAM triad | %lld | %d | | %.1f GB/s | | a = b + s*c |\n", (long long)n,
			       threads, triad_gbs);
			for (int c = 0; c < 3; c++) {
				Kernel k;
				if (!kernel_build(ch[c].json, &t, &k))
					continue;
				void *args[8];
				for (int i = 0; i < ch[c].nin + ch[c].nout; i++)
					args[i] = buf[i + 1];
				KRun r = {&k, &rt, args};
				double tk = time_median(kernel_run, &r, budget);
				double gbs = 4.0 * (double)n * (ch[c].nin + ch[c].nout) / tk / 1e9;
				printf("| %s (vs triad) | %lld | %d | %.1f GB/s | %.1f GB/s | %.2f | cold compile %.1f ms |\n",
				       ch[c].name, (long long)n, threads, gbs, triad_gbs, gbs / triad_gbs,
				       k.compile_ms);
				printf("@time %s %lld %d %.9f\n", ch[c].name, (long long)n, threads, tk);
				dlclose(k.dl);
			}
			pool_fini(&pool);
		}
		for (int c = 0; c < 3; c++)
			free(ch[c].json);
		for (int i = 0; i < 8; i++)
			free(buf[i]);
	}
	return 0;
}
