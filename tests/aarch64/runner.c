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
 * through tests/tkernel.c's 3-thread KcsRuntime (every buffer placed one element
 * past a 64-byte boundary, outputs filled with 0x5A, inputs copied), so an
 * unwritten output element or an alignment assumption shows up as a
 * difference the host reports.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcs_abi.h"
#include "tkernel.h"

#define MAX_ARGS 1024

typedef struct ArgDesc {
	uint64_t bytes;
	uint32_t elem_size;
	uint32_t is_output;
} ArgDesc;

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
	head[1] = fn(&t_pool, a2, NULL);
	TPoolStats ps = t_pool_stats();
	head[2] = (int32_t)ps.regions;
	head[3] = (int32_t)ps.tasks;

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
