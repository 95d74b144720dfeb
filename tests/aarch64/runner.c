/* runner.c - runs one kcsd kernel on AArch64, for tests/unit/test_aarch64.c.
 *
 * Cross-compiled with aarch64-linux-gnu-gcc (tests/aarch64.cmake) and run
 * under qemu-aarch64 -L /usr/aarch64-linux-gnu:
 *
 *   runner KERNEL.so JOB OUT
 *
 * JOB (written by the host test, native little-endian):
 *   char     magic[8]      "KCA64J1"
 *   uint32   nargs, nin    arguments (inputs first), inputs among them
 *   char     symbol[160]   the exported kernel function
 *   nargs x {uint64 bytes; uint32 elem_size; uint32 is_output}
 *   the input bytes, one argument after the other
 * OUT:
 *   int32    rc_serial, rc_pool, regions, tasks
 *   the output bytes of the rt == NULL run, then those of the pooled run
 *
 * The kernel is dlopen'ed with RTLD_NOW, so its undefined libm symbols
 * resolve against the libm this program links (with --no-as-needed, since
 * nothing here calls libm). It runs twice: serially
 * (rt == NULL, 64-byte aligned buffers, outputs filled with 0xA5) and
 * through a 3-thread pthread KcsRuntime (every buffer placed one element
 * past a 64-byte boundary, outputs filled with 0x5A, inputs copied), so an
 * unwritten output element or an alignment assumption shows up as a
 * difference the host reports.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcs_abi.h"

#define MAX_ARGS 1024

typedef struct ArgDesc {
	uint64_t bytes;
	uint32_t elem_size;
	uint32_t is_output;
} ArgDesc;

/* ---- a small pthread runtime: 3 threads per region ---------------------- */
typedef struct Job {
	KcsTaskFn fn;
	void *closure;
	int64_t n;
	atomic_llong next;
	atomic_int result;
} Job;

static atomic_int regions; /* parallel_for calls with ntasks > 1 */
static atomic_int tasks;   /* tasks run */

static void *
worker(void *p)
{
	Job *j = p;
	for (;;) {
		long long t = atomic_fetch_add(&j->next, 1);
		int32_t r;
		int zero = 0;
		if (t >= j->n)
			return NULL;
		r = j->fn(j->closure, t, j->n);
		atomic_fetch_add(&tasks, 1);
		if (r)
			atomic_compare_exchange_strong(&j->result, &zero, r);
	}
}

static int32_t
pool_parallel_for(void *ctx, KcsTaskFn fn, void *closure, int64_t n)
{
	pthread_t th[2];
	int nth = n < 3 ? (int)n : 3, started = 0;
	Job j;
	(void)ctx;
	j.fn = fn;
	j.closure = closure;
	j.n = n;
	atomic_init(&j.next, 0);
	atomic_init(&j.result, 0);
	if (n > 1)
		atomic_fetch_add(&regions, 1);
	for (int i = 0; i < nth - 1; i++)
		if (pthread_create(&th[i], NULL, worker, &j) == 0)
			started++;
	worker(&j);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return atomic_load(&j.result);
}

static void *
pool_alloc(void *ctx, uint64_t bytes, uint64_t align)
{
	void *p = NULL;
	(void)ctx;
	if (align < sizeof(void *))
		align = sizeof(void *);
	return posix_memalign(&p, (size_t)align, bytes ? (size_t)bytes : 1) ? NULL : p;
}

static void
pool_free(void *ctx, void *p)
{
	(void)ctx;
	free(p);
}

/* ---- files ---------------------------------------------------------------- */
static int
read_exact(FILE *f, void *p, size_t n)
{
	return fread(p, 1, n, f) == n ? 0 : -1;
}

static int
fail(const char *what, const char *detail)
{
	fprintf(stderr, "runner: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	return 2;
}

int
main(int argc, char **argv)
{
	static ArgDesc ad[MAX_ARGS];
	static void *base1[MAX_ARGS], *base2[MAX_ARGS], *a1[MAX_ARGS], *a2[MAX_ARGS];
	KcsRuntime rt = {KCS_RUNTIME_VERSION, 0, NULL, pool_parallel_for, pool_alloc, pool_free, 3};
	char magic[8], symbol[161];
	uint32_t nargs, nin;
	int32_t head[4];
	FILE *f;
	void *dl;
	KcsKernelFn fn;

	if (argc != 4)
		return fail("usage: runner KERNEL.so JOB OUT", NULL);
	if (!(f = fopen(argv[2], "rb")))
		return fail("cannot open the job", argv[2]);
	if (read_exact(f, magic, 8) || memcmp(magic, "KCA64J1", 8) || read_exact(f, &nargs, 4) ||
	    read_exact(f, &nin, 4) || read_exact(f, symbol, 160) || nargs > MAX_ARGS || nin > nargs)
		return fail("bad job header", argv[2]);
	symbol[160] = 0;
	if (read_exact(f, ad, sizeof ad[0] * nargs))
		return fail("short job", argv[2]);
	for (uint32_t i = 0; i < nargs; i++) {
		size_t sz = (size_t)ad[i].bytes + 128;
		if (ad[i].elem_size == 0 || ad[i].elem_size > 16 ||
		    posix_memalign(&base1[i], 64, sz) || posix_memalign(&base2[i], 64, sz))
			return fail("bad argument or out of memory", NULL);
		a1[i] = base1[i];
		a2[i] = (char *)base2[i] + ad[i].elem_size; /* only element-aligned */
		if (i < nin) {
			if (read_exact(f, a1[i], (size_t)ad[i].bytes))
				return fail("short input data", argv[2]);
			memcpy(a2[i], a1[i], (size_t)ad[i].bytes);
		} else {
			memset(a1[i], 0xA5, (size_t)ad[i].bytes);
			memset(a2[i], 0x5A, (size_t)ad[i].bytes);
		}
	}
	fclose(f);

	if (!(dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL)))
		return fail("dlopen", dlerror());
	if (!(fn = (KcsKernelFn)(uintptr_t)dlsym(dl, symbol)))
		return fail("dlsym", dlerror());
	head[0] = fn(NULL, a1, NULL);
	head[1] = fn(&rt, a2, NULL);
	head[2] = atomic_load(&regions);
	head[3] = atomic_load(&tasks);

	if (!(f = fopen(argv[3], "wb")))
		return fail("cannot create", argv[3]);
	fwrite(head, sizeof head, 1, f);
	for (uint32_t i = nin; i < nargs; i++)
		fwrite(a1[i], 1, (size_t)ad[i].bytes, f);
	for (uint32_t i = nin; i < nargs; i++)
		fwrite(a2[i], 1, (size_t)ad[i].bytes, f);
	if (fclose(f) != 0)
		return fail("cannot write", argv[3]);
	dlclose(dl);
	for (uint32_t i = 0; i < nargs; i++) {
		free(base1[i]);
		free(base2[i]);
	}
	return 0;
}
