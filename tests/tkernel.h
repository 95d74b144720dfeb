/* tkernel.h - running compiled kernels in tests: a kcs-cpu-v1 runtime
 * (clients/include/kcs_abi.h) over 3 pthreads, and loading a kernel object
 * from memory. Plain libc, so tests/aarch64/runner.c (cross-compiled) uses
 * it too. */
#ifndef KCS_TKERNEL_H
#define KCS_TKERNEL_H

#include <stddef.h>

#include "kcs_abi.h"

/* parallel_for runs a region on the calling thread plus up to 2 threads
 * started for it (fewer when ntasks < 3 or pthread_create fails); alloc
 * and free are aligned_alloc and free. Thread-safe: calls may share it. */
extern const KcsRuntime t_pool;

/* What t_pool has done since the program started. */
typedef struct TPoolStats {
	long long regions; /* parallel_for calls with ntasks > 1 */
	long long tasks;   /* tasks run */
	long long allocs;  /* workspace blocks allocated */
	long long live;    /* ... and not freed yet */
} TPoolStats;
TPoolStats t_pool_stats(void);

/* Writes the object to a temporary .so file in /tmp (dlopen needs a file),
 * dlopens it with RTLD_NOW | RTLD_LOCAL, removes the file and looks up
 * `symbol`. Returns the kernel, with its handle in *dl for dlclose; NULL
 * when any step fails, with *dl NULL (nothing to close) and the reason in
 * why[cap]. */
KcsKernelFn t_kernel_load(const void *obj, size_t len, const char *symbol, void **dl, char *why,
                          size_t cap);

#endif
