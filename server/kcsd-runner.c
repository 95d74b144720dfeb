/* kcsd-runner.c - runs one compiled kernel in a process of its own.
 *
 * kcsd (POST /v1/verify, later the tuner) starts this with posix_spawn and
 * an empty environment, so a kernel that crashes or hangs takes down only
 * this process. The runner first enters the sandbox (sandbox.h,
 * SANDBOX_RUN: scratch as working directory and only writable place, the
 * input files and the kernel readable, no sockets, no exec, its address
 * space capped at --mem-bytes), starts its N-1 threads, forbids any more
 * (NPROC 0), limits its CPU seconds and output file size, then loads the
 * kernel, runs it once and exits.
 *
 *   kcsd-runner --so PATH --symbol NAME --in FILE --out FILE
 *               [--threads N] [--cpu-s S] [--mem-bytes B] [--scratch DIR]
 *               [--fault crash|hang]
 *
 * --scratch defaults to the directory of --out.
 *
 * FILE formats (native byte order): --in is "KCSRUN1\0", u32 nargs, u32
 * ninputs, nargs x u64 byte sizes, then the inputs' bytes back to back.
 * --out receives the outputs' bytes back to back. --threads 0 calls the
 * kernel with rt == NULL; N >= 1 lends it a pthread KcsRuntime of N
 * threads. --fault (tests only) raises SIGSEGV or loops forever instead of
 * running the kernel. Exit status: 0 done, 3 the kernel returned non-zero,
 * 4 bad arguments, unreadable files or a kernel that does not load.
 *
 * Reference mode (POST /v1/verify's second invocation): the same --in
 * file, but instead of a kernel the reference interpreter (compiler/
 * interp.c) runs on the graph, so an interpreter bug or blow-up costs this
 * process, never the daemon:
 *
 *   kcsd-runner --ref GRAPH.json --in FILE --out FILE [--max-bytes B]
 *               [--limits OPS,TENSORS,RANK,ELEMENTS] [--cpu-s S]
 *               [--mem-bytes B] [--scratch DIR] [--fault crash|hang]
 *
 * GRAPH.json is the request body; --limits are the daemon's parse limits.
 * --out receives the outputs' bytes back to back, then one tie byte per
 * output element (kc_interp_ties). Exit status 5: the graph or the
 * interpreter refused (stderr: "kcsd-runner: <wire code>: <message>").
 * The kernel mode links only libc, libdl, libpthread and the sandbox
 * (libseccomp), and the ABI header; the reference mode adds the compiler
 * library's parser and interpreter (no LLVM is loaded for either).
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "compiler.h"
#include "kcs_abi.h"
#include "sandbox.h"

#define RUN_MAGIC "KCSRUN1"
#define MAX_ARGS 65536
#define MAX_THREADS 256

/* ---- a small pthread runtime ----------------------------------------------
 * Its threads start before the sandbox forbids new tasks (NPROC 0 stops
 * thread creation too, for any uid but root), then wait for regions. */

typedef struct Region {
	KcsTaskFn fn;
	void *closure;
	int64_t n;
	atomic_llong next;
	atomic_int result;
} Region;

typedef struct Crew {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	unsigned gen; /* bumped for each region */
	Region *r;    /* the current region */
	int running;  /* helpers not yet back from it */
	int nhelpers; /* threads besides the caller's (never joined: the
	               * process ends with _exit) */
} Crew;

static void
region_work(Region *r)
{
	for (;;) {
		long long t = atomic_fetch_add(&r->next, 1);
		if (t >= r->n)
			return;
		int32_t rc = r->fn(r->closure, t, r->n);
		int zero = 0;
		if (rc)
			atomic_compare_exchange_strong(&r->result, &zero, rc);
	}
}

static void *
helper_main(void *arg)
{
	Crew *c = arg;
	unsigned seen = 0;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (c->gen == seen)
			pthread_cond_wait(&c->go, &c->mu);
		seen = c->gen;
		Region *r = c->r;
		pthread_mutex_unlock(&c->mu);
		region_work(r);
		pthread_mutex_lock(&c->mu);
		if (--c->running == 0)
			pthread_cond_signal(&c->done);
	}
	return NULL;
}

/* Starts up to n-1 helpers; the count that started is the crew's. */
static void
crew_start(Crew *c, int64_t n)
{
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->go, NULL);
	pthread_cond_init(&c->done, NULL);
	for (int64_t i = 0; i + 1 < n; i++) {
		pthread_t th;
		if (pthread_create(&th, NULL, helper_main, c) != 0)
			break;
		c->nhelpers++;
	}
}

/* Runs the region on the calling thread and every helper. */
static int32_t
rt_parallel_for(void *ctx, KcsTaskFn fn, void *closure, int64_t ntasks)
{
	Crew *c = ctx;
	Region r = {.fn = fn, .closure = closure, .n = ntasks};
	if (c->nhelpers == 0 || ntasks < 2) {
		region_work(&r);
		return atomic_load(&r.result);
	}
	pthread_mutex_lock(&c->mu);
	c->r = &r;
	c->running = c->nhelpers;
	c->gen++;
	pthread_cond_broadcast(&c->go);
	pthread_mutex_unlock(&c->mu);
	region_work(&r);
	pthread_mutex_lock(&c->mu);
	while (c->running > 0)
		pthread_cond_wait(&c->done, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return atomic_load(&r.result);
}

static void *
rt_alloc(void *ctx, uint64_t bytes, uint64_t align)
{
	void *p = NULL;
	(void)ctx;
	if (align < sizeof(void *))
		align = sizeof(void *);
	return posix_memalign(&p, (size_t)align, bytes ? (size_t)bytes : 1) == 0 ? p : NULL;
}

static void
rt_free(void *ctx, void *p)
{
	(void)ctx;
	free(p);
}

/* ---- files -------------------------------------------------------------- */

static int
fail(const char *what, const char *detail)
{
	fprintf(stderr, "kcsd-runner: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	return 4;
}

static int
read_exact(FILE *f, void *p, size_t n)
{
	return fread(p, 1, n, f) == n;
}

/* Reference mode: the interpreter on args (inputs filled, outputs
 * allocated) for the graph in `graph`; writes outputs then tie masks. */
static int
run_reference(const char *graph, const char *limits, long long max_bytes, uint32_t nargs,
              uint32_t nin, void **args, const uint64_t *sizes, const char *out)
{
	KcLimits lim = {0};
	KcErr err = {0};
	KcGraph *g = NULL;
	size_t len = 0;
	int rc = 4;
	char *body = NULL;
	uint8_t **ties = NULL;
	FILE *f = NULL;
	CompileCtx *c = compile_ctx_new();

	if (limits && sscanf(limits, "%d,%d,%d,%lld", &lim.max_ops, &lim.max_tensors, &lim.max_rank,
	                     (long long *)&lim.max_elements) != 4) {
		fail("bad --limits", limits);
		goto done;
	}
	if (!(f = fopen(graph, "rb"))) {
		fail("cannot open graph file", strerror(errno));
		goto done;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (long)(len = (size_t)ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 || !(body = malloc(len + 1)) || !read_exact(f, body, len)) {
		fail("cannot read graph file", NULL);
		goto done;
	}
	fclose(f);
	f = NULL;
	body[len] = 0;
	if (kc_parse(c, body, len, &lim, &g, &err) != KC_OK) {
		fprintf(stderr, "kcsd-runner: %s: %s\n", kc_status_code(err.status), err.msg);
		rc = 5;
		goto done;
	}
	uint32_t gin = 0;
	for (int i = 0; i < kc_graph_nargs(g); i++) {
		KcArgInfo x;
		kc_graph_arg(g, i, &x);
		gin += !x.is_output;
	}
	if ((uint32_t)kc_graph_nargs(g) != nargs || gin != nin) {
		fail("the graph's arguments disagree with the input file", NULL);
		goto done;
	}
	ties = calloc(nargs - nin + 1, sizeof *ties);
	for (uint32_t i = nin; ties && i < nargs; i++) {
		KcArgInfo x;
		int64_t n = 1;
		kc_graph_arg(g, (int)i, &x);
		for (int d = 0; d < x.rank; d++)
			n *= x.shape[d];
		if (!(ties[i - nin] = calloc((size_t)n + 1, 1))) {
			fail("out of memory for tie masks", NULL);
			goto done;
		}
	}
	if (!ties) {
		fail("out of memory for tie masks", NULL);
		goto done;
	}
	if (kc_interp_ties(c, g, args, max_bytes > 0 ? (size_t)max_bytes : 0, ties, &err) !=
	    KC_OK) {
		fprintf(stderr, "kcsd-runner: %s: %s\n", kc_status_code(err.status), err.msg);
		rc = 5;
		goto done;
	}
	if (!(f = fopen(out, "wb"))) {
		fail("cannot create output file", strerror(errno));
		goto done;
	}
	for (uint32_t i = nin; i < nargs; i++)
		if (fwrite(args[i], 1, (size_t)sizes[i], f) != sizes[i]) {
			fail("cannot write output file", strerror(errno));
			goto done;
		}
	for (uint32_t i = nin; i < nargs; i++) {
		KcArgInfo x;
		int64_t n = 1;
		kc_graph_arg(g, (int)i, &x);
		for (int d = 0; d < x.rank; d++)
			n *= x.shape[d];
		if (fwrite(ties[i - nin], 1, (size_t)n, f) != (size_t)n) {
			fail("cannot write output file", strerror(errno));
			goto done;
		}
	}
	rc = fclose(f) == 0 ? 0 : fail("cannot write output file", strerror(errno));
	f = NULL;
done:
	if (f)
		fclose(f);
	for (uint32_t i = nin; ties && i < nargs; i++)
		free(ties[i - nin]);
	free(ties);
	free(body);
	compile_ctx_free(c);
	return rc;
}

/* path made absolute against the working directory (the sandbox changes it) */
static bool
absolute(const char *path, char out[PATH_MAX])
{
	char cwd[PATH_MAX];
	if (path[0] == '/')
		return (size_t)snprintf(out, PATH_MAX, "%s", path) < PATH_MAX;
	if (!getcwd(cwd, sizeof cwd))
		return false;
	return (size_t)snprintf(out, PATH_MAX, "%s/%s", cwd, path) < PATH_MAX;
}

static void
limit(int res, rlim_t v)
{
	struct rlimit rl = {v, v};
	if (setrlimit(res, &rl) != 0)
		fprintf(stderr, "kcsd-runner: setrlimit(%d): %s\n", res, strerror(errno));
}

static int
run(int argc, char **argv)
{
	const char *so = NULL, *sym = NULL, *in = NULL, *out = NULL, *fault = NULL;
	const char *ref = NULL, *limits = NULL, *scratch = NULL;
	long long threads = 0, cpu_s = 60, mem = 0, max_bytes = 0;
	uint32_t nargs = 0, nin = 0;
	uint64_t *sizes = NULL, total_out = 0;
	void **args = NULL;
	int rc = 4;
	FILE *f = NULL;

	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (strcmp(k, "--so") == 0)
			so = v;
		else if (strcmp(k, "--symbol") == 0)
			sym = v;
		else if (strcmp(k, "--in") == 0)
			in = v;
		else if (strcmp(k, "--out") == 0)
			out = v;
		else if (strcmp(k, "--threads") == 0)
			threads = atoll(v);
		else if (strcmp(k, "--cpu-s") == 0)
			cpu_s = atoll(v);
		else if (strcmp(k, "--mem-bytes") == 0)
			mem = atoll(v);
		else if (strcmp(k, "--fault") == 0)
			fault = v;
		else if (strcmp(k, "--ref") == 0)
			ref = v;
		else if (strcmp(k, "--limits") == 0)
			limits = v;
		else if (strcmp(k, "--max-bytes") == 0)
			max_bytes = atoll(v);
		else if (strcmp(k, "--scratch") == 0)
			scratch = v;
		else
			return fail("unknown argument", k);
	}
	if ((!ref && (!so || !sym)) || !in || !out || threads < 0 || threads > MAX_THREADS ||
	    cpu_s < 1)
		return fail("usage: kcsd-runner --so PATH --symbol NAME --in FILE --out FILE "
		            "[--threads N] [--cpu-s S] [--mem-bytes B] [--scratch DIR] "
		            "[--fault crash|hang]\n"
		            "       kcsd-runner --ref GRAPH --in FILE --out FILE [--max-bytes B] "
		            "[--limits O,T,R,E] [--cpu-s S] [--mem-bytes B] [--scratch DIR] "
		            "[--fault crash|hang]",
		            NULL);

	/* the sandbox first, before anything is read or any kernel code
	 * runs: it may read its input files and the kernel, and write only
	 * in scratch (the directory of --out unless given) */
	char so_abs[PATH_MAX], in_abs[PATH_MAX], out_abs[PATH_MAX], ref_abs[PATH_MAX],
	    dir[PATH_MAX];
	if (!absolute(in, in_abs) || !absolute(out, out_abs) || (so && !absolute(so, so_abs)) ||
	    (ref && !absolute(ref, ref_abs)))
		return fail("a path is too long", NULL);
	in = in_abs;
	out = out_abs;
	so = so ? so_abs : NULL;
	ref = ref ? ref_abs : NULL;
	if (!scratch) {
		snprintf(dir, sizeof dir, "%s", out);
		*strrchr(dir, '/') = 0;
		scratch = *dir ? dir : "/";
	}
	const char *readable[3];
	int nread = 0;
	readable[nread++] = in;
	if (so)
		readable[nread++] = so;
	if (ref)
		readable[nread++] = ref;
	SandboxPolicy pol = {
	    .role = SANDBOX_RUN,
	    .scratch = scratch,
	    .read_paths = readable,
	    .nread = nread,
	    .max_as_bytes = mem,
	    .defer_nproc = true,
	};
	KcErr serr = {0};
	if (!sandbox_enter(&pol, &serr))
		return fail("cannot enter the sandbox", serr.msg);
	limit(RLIMIT_CPU, (rlim_t)cpu_s);
	/* the kernel's threads, then no more */
	static Crew crew;
	crew_start(&crew, threads);
	if (!sandbox_forbid_tasks(&serr))
		return fail("cannot enter the sandbox", serr.msg);

	if (!(f = fopen(in, "rb")))
		return fail("cannot open input file", strerror(errno));
	char magic[8];
	if (!read_exact(f, magic, 8) || memcmp(magic, RUN_MAGIC, 8) != 0 ||
	    !read_exact(f, &nargs, 4) || !read_exact(f, &nin, 4) || nargs > MAX_ARGS ||
	    nin > nargs) {
		fclose(f);
		return fail("bad input file header", NULL);
	}
	sizes = calloc(nargs ? nargs : 1, sizeof *sizes);
	args = calloc(nargs ? nargs : 1, sizeof *args);
	if (!sizes || !args || !read_exact(f, sizes, sizeof *sizes * nargs)) {
		fail("bad input file sizes", NULL);
		goto done;
	}
	for (uint32_t i = 0; i < nargs; i++) {
		/* 64-byte aligned; outputs start as a garbage pattern */
		if (!(args[i] = rt_alloc(NULL, sizes[i], 64))) {
			fail("out of memory for arguments", NULL);
			goto done;
		}
		if (i < nin) {
			if (!read_exact(f, args[i], (size_t)sizes[i])) {
				fail("short input file", NULL);
				goto done;
			}
		} else {
			memset(args[i], 0xa5, (size_t)sizes[i]);
			total_out += sizes[i];
		}
	}
	fclose(f);
	f = NULL;
	/* reference mode: outputs plus a tie byte per output element */
	limit(RLIMIT_FSIZE, (rlim_t)(2 * total_out + 4096));

	if (fault && strcmp(fault, "crash") == 0) {
		signal(SIGSEGV, SIG_DFL);
		raise(SIGSEGV);
	}
	if (fault && strcmp(fault, "hang") == 0)
		for (volatile unsigned long spin = 0;; spin++)
			;

	if (ref) {
		rc = run_reference(ref, limits, max_bytes, nargs, nin, args, sizes, out);
		goto done;
	}

	void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		fail("dlopen", dlerror());
		goto done;
	}
	KcsKernelFn fn = (KcsKernelFn)(uintptr_t)dlsym(dl, sym);
	if (!fn) {
		fail("dlsym", sym);
		dlclose(dl);
		goto done;
	}
	KcsRuntime rt = {
	    .version = KCS_RUNTIME_VERSION,
	    .ctx = &crew,
	    .parallel_for = rt_parallel_for,
	    .alloc = rt_alloc,
	    .free = rt_free,
	    .num_threads = threads,
	};
	int32_t krc = fn(threads > 0 ? &rt : NULL, args, NULL);
	dlclose(dl);
	if (krc != 0) {
		fprintf(stderr, "kcsd-runner: kernel returned %d\n", (int)krc);
		rc = 3;
		goto done;
	}
	if (!(f = fopen(out, "wb"))) {
		fail("cannot create output file", strerror(errno));
		goto done;
	}
	for (uint32_t i = nin; i < nargs; i++) {
		if (fwrite(args[i], 1, (size_t)sizes[i], f) != sizes[i]) {
			fail("cannot write output file", strerror(errno));
			goto done;
		}
	}
	if (fclose(f) != 0) {
		f = NULL;
		fail("cannot write output file", strerror(errno));
		goto done;
	}
	f = NULL;
	rc = 0;
done:
	if (f)
		fclose(f);
	for (uint32_t i = 0; args && i < nargs; i++)
		free(args[i]);
	free(args);
	free(sizes);
	return rc;
}

int
main(int argc, char **argv)
{
	int rc = run(argc, argv);
	/* no exit-time work: LeakSanitizer's check would need ptrace and a
	 * process of its own, which the sandbox forbids */
	fflush(NULL);
	_exit(rc);
}
