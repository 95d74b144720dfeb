/* peers.c - OpenBLAS and oneDNN behind the small interface of peers.h.
 *
 * Each library is compiled in only when bench/CMakeLists.txt found it
 * (KB_HAVE_OPENBLAS, KB_HAVE_DNNL); otherwise its functions report "not
 * installed" and kbench prints that in the rows instead of a number.
 *
 * Threads. OpenBLAS (Debian's pthread build): openblas_set_num_threads(n).
 * oneDNN: Debian builds it with the OpenMP runtime (GNU libgomp, pulled in
 * by libdnnl.so), so the thread count is omp_set_num_threads(n), looked up
 * with dlsym in the libgomp the library loaded (the bench itself does not
 * link OpenMP); primitives are created after the count is set, because
 * oneDNN sizes its blocking from the thread count at creation. A TBB or
 * threadpool build cannot be told from C here: its rows say so.
 */
#include "peers.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- OpenBLAS ---------------------------------------------------------- */

#ifdef KB_HAVE_OPENBLAS
#include <cblas.h>

const char *
ob_missing(void)
{
	return NULL;
}

const char *
ob_describe(void)
{
	static char s[512];
	char cfg[400];
	snprintf(cfg, sizeof cfg, "%s", openblas_get_config());
	for (size_t n = strlen(cfg); n && cfg[n - 1] == ' '; n--)
		cfg[n - 1] = 0; /* the config string ends with a space */
	snprintf(s, sizeof s, "OpenBLAS kernel %s (openblas_get_config: %s)",
	         openblas_get_corename(), cfg);
	return s;
}

void
ob_threads(int n)
{
	openblas_set_num_threads(n);
}

void
ob_sgemm(int M, int N, int K, bool tb, const float *a, const float *b, float *c)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, a,
	            K, b, tb ? K : N, 0.0f, c, N);
}

void
ob_sgemv(int N, int K, bool tb, const float *x, const float *b, float *y)
{
	if (tb)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, b, K, x, 1, 0.0f, y, 1);
	else
		cblas_sgemv(CblasRowMajor, CblasTrans, K, N, 1.0f, b, N, x, 1, 0.0f, y, 1);
}
#else
const char *
ob_missing(void)
{
	return "OpenBLAS not installed";
}

const char *
ob_describe(void)
{
	return "OpenBLAS not installed (bench built without it)";
}

void
ob_threads(int n)
{
	(void)n;
}

void
ob_sgemm(int M, int N, int K, bool tb, const float *a, const float *b, float *c)
{
	(void)M, (void)N, (void)K, (void)tb, (void)a, (void)b, (void)c;
}

void
ob_sgemv(int N, int K, bool tb, const float *x, const float *b, float *y)
{
	(void)N, (void)K, (void)tb, (void)x, (void)b, (void)y;
}
#endif

/* ---- oneDNN ------------------------------------------------------------- */

#ifdef KB_HAVE_DNNL
#include <dnnl.h>

#define MAXARGS 8

struct OnePrim {
	dnnl_primitive_desc_t pd;
	dnnl_primitive_t prim;
	dnnl_memory_t mem[MAXARGS];
	dnnl_exec_arg_t args[MAXARGS];
	int nargs;
};

static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;
static const char *g_missing = "oneDNN not initialised";
static void (*g_omp_set)(int);

static void
one_init(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	if (dnnl_engine_create(&g_eng, dnnl_cpu, 0) != dnnl_success) {
		g_missing = "oneDNN: no CPU engine";
		return;
	}
	if (dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags) != dnnl_success) {
		g_missing = "oneDNN: no stream";
		return;
	}
	g_missing = NULL;
	if (dnnl_version()->cpu_runtime == DNNL_RUNTIME_OMP) {
		void *sym = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
		if (sym)
			memcpy(&g_omp_set, &sym, sizeof g_omp_set);
	}
}

const char *
one_missing(void)
{
	one_init();
	return g_missing;
}

static const char *
runtime_name(unsigned r)
{
	switch (r) {
	case DNNL_RUNTIME_SEQ: return "sequential";
	case DNNL_RUNTIME_OMP: return "OpenMP";
	case DNNL_RUNTIME_TBB: return "TBB";
	case DNNL_RUNTIME_THREADPOOL: return "threadpool";
	default: return "unknown";
	}
}

const char *
one_describe(void)
{
	static char s[256];
	const dnnl_version_t *v = dnnl_version();
	snprintf(s, sizeof s, "oneDNN %d.%d.%d (%s CPU runtime)", v->major, v->minor, v->patch,
	         runtime_name(v->cpu_runtime));
	return s;
}

const char *
one_threads_how(void)
{
	one_init();
	unsigned r = dnnl_version()->cpu_runtime;
	if (r == DNNL_RUNTIME_OMP)
		return g_omp_set ? "omp_set_num_threads(n) in the libgomp libdnnl loads, before "
		                   "each primitive is created"
		                 : "OpenMP runtime but omp_set_num_threads not found: threads not "
		                   "controlled";
	if (r == DNNL_RUNTIME_SEQ)
		return "sequential build: always 1 thread";
	return "runtime threads not controllable from C here";
}

bool
one_threads(int n)
{
	one_init();
	unsigned r = dnnl_version()->cpu_runtime;
	if (r == DNNL_RUNTIME_SEQ)
		return n == 1;
	if (r == DNNL_RUNTIME_OMP && g_omp_set) {
		g_omp_set(n);
		return true;
	}
	return false;
}

static void
why_set(char *why, size_t whylen, const char *what, dnnl_status_t st)
{
	snprintf(why, whylen, "oneDNN %s failed (status %d)", what, (int)st);
}

/* Creates pd's primitive and binds `n` user buffers to the args. */
static OnePrim *
finish(OnePrim *p, int n, const int *argkind, void *const *ptrs, const dnnl_memory_desc_t *mds,
       char *why, size_t whylen)
{
	dnnl_status_t st = dnnl_primitive_create(&p->prim, p->pd);
	if (st != dnnl_success) {
		why_set(why, whylen, "primitive_create", st);
		goto fail;
	}
	for (int i = 0; i < n; i++) {
		st = dnnl_memory_create(&p->mem[i], &mds[i], g_eng, ptrs[i]);
		if (st != dnnl_success) {
			why_set(why, whylen, "memory_create", st);
			goto fail;
		}
		p->args[i] = (dnnl_exec_arg_t){argkind[i], p->mem[i]};
	}
	p->nargs = n;
	return p;
fail:
	one_free(p);
	return NULL;
}

static void
md2(dnnl_memory_desc_t *md, int64_t d0, int64_t d1, dnnl_format_tag_t tag)
{
	dnnl_dims_t d = {d0, d1};
	dnnl_memory_desc_init_by_tag(md, 2, d, dnnl_f32, tag);
}

OnePrim *
one_matmul(int B, int M, int N, int K, bool tb, const float *a, const float *w, const float *bias,
           bool gelu, float *c, char *why, size_t whylen)
{
	if (one_missing()) {
		snprintf(why, whylen, "%s", g_missing);
		return NULL;
	}
	OnePrim *p = calloc(1, sizeof *p);
	dnnl_memory_desc_t md[4];
	int nd = B > 1 ? 3 : 2;
	dnnl_dims_t da = {B, M, K}, dw = {B, K, N}, dc = {B, M, N}, db = {1, 1, N};
	dnnl_dims_t da2 = {M, K}, dw2 = {K, N}, dc2 = {M, N}, db2 = {1, N};
	if (nd == 3) {
		dnnl_memory_desc_init_by_tag(&md[0], 3, da, dnnl_f32, dnnl_abc);
		dnnl_memory_desc_init_by_tag(&md[1], 3, dw, dnnl_f32, tb ? dnnl_acb : dnnl_abc);
		dnnl_memory_desc_init_by_tag(&md[2], 3, dc, dnnl_f32, dnnl_abc);
		dnnl_memory_desc_init_by_tag(&md[3], 3, db, dnnl_f32, dnnl_abc);
	} else {
		dnnl_memory_desc_init_by_tag(&md[0], 2, da2, dnnl_f32, dnnl_ab);
		dnnl_memory_desc_init_by_tag(&md[1], 2, dw2, dnnl_f32, tb ? dnnl_ba : dnnl_ab);
		dnnl_memory_desc_init_by_tag(&md[2], 2, dc2, dnnl_f32, dnnl_ab);
		dnnl_memory_desc_init_by_tag(&md[3], 2, db2, dnnl_f32, dnnl_ab);
	}
	dnnl_matmul_desc_t d;
	dnnl_status_t st = dnnl_matmul_desc_init(&d, &md[0], &md[1], bias ? &md[3] : NULL, &md[2]);
	if (st != dnnl_success) {
		why_set(why, whylen, "matmul_desc_init", st);
		free(p);
		return NULL;
	}
	dnnl_primitive_attr_t attr = NULL;
	if (gelu) {
		dnnl_post_ops_t po;
		dnnl_post_ops_create(&po);
		dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f);
		dnnl_primitive_attr_create(&attr);
		dnnl_primitive_attr_set_post_ops(attr, po);
		dnnl_post_ops_destroy(po);
	}
	st = dnnl_primitive_desc_create(&p->pd, &d, attr, g_eng, NULL);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (st != dnnl_success) {
		why_set(why, whylen, "matmul primitive_desc_create", st);
		free(p);
		return NULL;
	}
	int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
	void *ptrs[4] = {(void *)a, (void *)w, c, (void *)bias};
	return finish(p, bias ? 4 : 3, kinds, ptrs, md, why, whylen);
}

OnePrim *
one_softmax(int rows, int cols, const float *x, float *y, char *why, size_t whylen)
{
	if (one_missing()) {
		snprintf(why, whylen, "%s", g_missing);
		return NULL;
	}
	OnePrim *p = calloc(1, sizeof *p);
	dnnl_memory_desc_t md[2];
	md2(&md[0], rows, cols, dnnl_ab);
	md[1] = md[0];
	dnnl_softmax_desc_t d;
	dnnl_status_t st = dnnl_softmax_forward_desc_init(&d, dnnl_forward_inference, &md[0], 1);
	if (st == dnnl_success)
		st = dnnl_primitive_desc_create(&p->pd, &d, NULL, g_eng, NULL);
	if (st != dnnl_success) {
		why_set(why, whylen, "softmax init", st);
		free(p);
		return NULL;
	}
	int kinds[2] = {DNNL_ARG_SRC, DNNL_ARG_DST};
	void *ptrs[2] = {(void *)x, y};
	return finish(p, 2, kinds, ptrs, md, why, whylen);
}

OnePrim *
one_layernorm(int rows, int cols, float eps, const float *x, const float *gamma, const float *beta,
              float *y, char *why, size_t whylen)
{
	if (one_missing()) {
		snprintf(why, whylen, "%s", g_missing);
		return NULL;
	}
	OnePrim *p = calloc(1, sizeof *p);
	dnnl_memory_desc_t md[4];
	md2(&md[0], rows, cols, dnnl_ab);
	md[1] = md[0];
	dnnl_dims_t dg = {cols};
	dnnl_memory_desc_init_by_tag(&md[2], 1, dg, dnnl_f32, dnnl_a);
	md[3] = md[2];
	dnnl_layer_normalization_desc_t d;
	dnnl_status_t st = dnnl_layer_normalization_forward_desc_init(
	    &d, dnnl_forward_inference, &md[0], NULL, eps, dnnl_use_scale | dnnl_use_shift);
	if (st == dnnl_success)
		st = dnnl_primitive_desc_create(&p->pd, &d, NULL, g_eng, NULL);
	if (st != dnnl_success) {
		why_set(why, whylen, "layer_normalization init", st);
		free(p);
		return NULL;
	}
	int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_SCALE, DNNL_ARG_SHIFT};
	void *ptrs[4] = {(void *)x, y, (void *)gamma, (void *)beta};
	return finish(p, 4, kinds, ptrs, md, why, whylen);
}

OnePrim *
one_eltwise(bool gelu, int64_t n, const float *x, float *y, char *why, size_t whylen)
{
	if (one_missing()) {
		snprintf(why, whylen, "%s", g_missing);
		return NULL;
	}
	OnePrim *p = calloc(1, sizeof *p);
	dnnl_memory_desc_t md[2];
	dnnl_dims_t dd = {n};
	dnnl_memory_desc_init_by_tag(&md[0], 1, dd, dnnl_f32, dnnl_a);
	md[1] = md[0];
	dnnl_eltwise_desc_t d;
	dnnl_status_t st = dnnl_eltwise_forward_desc_init(
	    &d, dnnl_forward_inference, gelu ? dnnl_eltwise_gelu_tanh : dnnl_eltwise_logistic,
	    &md[0], 0.f, 0.f);
	if (st == dnnl_success)
		st = dnnl_primitive_desc_create(&p->pd, &d, NULL, g_eng, NULL);
	if (st != dnnl_success) {
		why_set(why, whylen, "eltwise init", st);
		free(p);
		return NULL;
	}
	int kinds[2] = {DNNL_ARG_SRC, DNNL_ARG_DST};
	void *ptrs[2] = {(void *)x, y};
	return finish(p, 2, kinds, ptrs, md, why, whylen);
}

const char *
one_impl(const OnePrim *p)
{
	const char *s = NULL;
	if (dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
		return "?";
	return s;
}

int
one_run(OnePrim *p)
{
	if (dnnl_primitive_execute(p->prim, g_stream, p->nargs, p->args) != dnnl_success)
		return -1;
	return dnnl_stream_wait(g_stream) == dnnl_success ? 0 : -1;
}

void
one_free(OnePrim *p)
{
	if (!p)
		return;
	for (int i = 0; i < MAXARGS; i++)
		if (p->mem[i])
			dnnl_memory_destroy(p->mem[i]);
	if (p->prim)
		dnnl_primitive_destroy(p->prim);
	if (p->pd)
		dnnl_primitive_desc_destroy(p->pd);
	free(p);
}
#else
struct OnePrim {
	int unused;
};

const char *
one_missing(void)
{
	return "oneDNN not installed";
}

const char *
one_describe(void)
{
	return "oneDNN not installed (bench built without it)";
}

const char *
one_threads_how(void)
{
	return "not installed";
}

bool
one_threads(int n)
{
	(void)n;
	return false;
}

static OnePrim *
missing(char *why, size_t whylen)
{
	snprintf(why, whylen, "%s", one_missing());
	return NULL;
}

OnePrim *
one_matmul(int B, int M, int N, int K, bool tb, const float *a, const float *w, const float *bias,
           bool gelu, float *c, char *why, size_t whylen)
{
	(void)B, (void)M, (void)N, (void)K, (void)tb, (void)a, (void)w, (void)bias, (void)gelu,
	    (void)c;
	return missing(why, whylen);
}

OnePrim *
one_softmax(int rows, int cols, const float *x, float *y, char *why, size_t whylen)
{
	(void)rows, (void)cols, (void)x, (void)y;
	return missing(why, whylen);
}

OnePrim *
one_layernorm(int rows, int cols, float eps, const float *x, const float *gamma, const float *beta,
              float *y, char *why, size_t whylen)
{
	(void)rows, (void)cols, (void)eps, (void)x, (void)gamma, (void)beta, (void)y;
	return missing(why, whylen);
}

OnePrim *
one_eltwise(bool gelu, int64_t n, const float *x, float *y, char *why, size_t whylen)
{
	(void)gelu, (void)n, (void)x, (void)y;
	return missing(why, whylen);
}

const char *
one_impl(const OnePrim *p)
{
	(void)p;
	return "";
}

int
one_run(OnePrim *p)
{
	(void)p;
	return -1;
}

void
one_free(OnePrim *p)
{
	(void)p;
}
#endif
