/* kcs_abi.h - the calling convention of kernels compiled by kcsd (ABI
 * "kcs-cpu-v1"), for programs that dlopen the returned shared object.
 *
 * A kernel is one exported function, named by the "symbol" field of the
 * compile response, with the signature KcsKernelFn. It reads its inputs and
 * writes its outputs through `args`; for parallel work it calls back into the
 * caller's thread pool through a KcsRuntime, the same shape as TVM's parallel
 * launch callback and AKG's AkgCallBack. Loading the object needs nothing
 * beyond libc and libm. Full description: docs/abi.md.
 *
 * This header is self-contained C99/C++ and includes only <stdint.h>.
 */
#ifndef KCS_ABI_H
#define KCS_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI name reported in the "abi" field of the compile response. */
#define KCS_ABI_NAME "kcs-cpu-v1"

/* The value a caller stores in KcsRuntime.version. */
#define KCS_RUNTIME_VERSION 1u

/* One task of a parallel region. Called by KcsRuntime.parallel_for with the
 * closure the kernel passed, a task index `task` in [0, ntasks) and the
 * region's `ntasks`. Returns 0 on success, non-zero to report a failure
 * (the region still waits for every other task). Tasks of one region touch
 * disjoint parts of the outputs, so they may run concurrently on any
 * threads; a task never calls parallel_for itself (no nested regions). */
typedef int32_t (*KcsTaskFn)(void *closure, int64_t task, int64_t ntasks);

/* The services a caller lends to a kernel for one call. The caller owns the
 * struct; it must stay valid, unchanged, until the kernel returns. Several
 * kernel calls may share one KcsRuntime concurrently if its functions are
 * thread-safe. */
typedef struct KcsRuntime {
	/* KCS_RUNTIME_VERSION. Kernels of this ABI are only called with
	 * version 1; a kernel may return non-zero for any other value. */
	uint32_t version;
	/* Zero. */
	uint32_t reserved;
	/* Opaque; passed back as the first argument of the three functions. */
	void *ctx;
	/* Runs fn(closure, t, ntasks) once for every t in [0, ntasks), in any
	 * order, possibly concurrently on other threads (or all on the calling
	 * thread), and returns only when every call has returned: a barrier.
	 * Memory written by the tasks is visible to the caller after it returns.
	 * Returns 0 when every task returned 0, otherwise the first non-zero
	 * result (or a non-zero code of the runtime's own, e.g. when it could not
	 * start the tasks). ntasks >= 1. A kernel may open several regions one
	 * after another during one call, never two at a time from one kernel
	 * call. Required (not NULL). */
	int32_t (*parallel_for)(void *ctx, KcsTaskFn fn, void *closure, int64_t ntasks);
	/* Returns `bytes` of uninitialised workspace aligned to `align` (a power
	 * of two, at most 4096), or NULL when out of memory (the kernel then
	 * returns non-zero). The kernel frees everything it allocated before it
	 * returns, with `free` of the same runtime. Called from the kernel's
	 * calling thread or from tasks, so it must be thread-safe. */
	void *(*alloc)(void *ctx, uint64_t bytes, uint64_t align);
	/* Releases a block from `alloc`. NULL is allowed. Thread-safe. */
	void (*free)(void *ctx, void *p);
	/* How many threads parallel_for can run at once (>= 1). A hint the
	 * kernel uses to size its regions; it must not affect results. */
	int64_t num_threads;
} KcsRuntime;

/* The exported kernel function.
 *   rt    the caller's runtime, or NULL: the kernel then runs serially on the
 *         calling thread and takes workspace from libc malloc/free.
 *   args  one pointer per tensor: the kernel's inputs in top-level input_desc
 *         order, then its outputs in output_desc order (the "args" list of
 *         the compile response, by index). Each points to a contiguous
 *         row-major array of the declared dtype and shape, aligned at least to
 *         its element size. No two args overlap. Inputs are only read,
 *         except those an output's "writes_input" names (Assign), which are
 *         overwritten in place; outputs may hold anything on entry and are
 *         fully written.
 *   dims  NULL for kernels with static shapes (all kernels today); reserved
 *         for symbolic dimensions.
 * Returns 0 on success, non-zero on failure (the outputs are then
 * unspecified). The kernel keeps no state between calls: concurrent calls
 * with distinct outputs are safe. Element layouts: bool is one byte holding
 * 0 or 1; float16 is IEEE-754 binary16; bfloat16 is the upper 16 bits of a
 * float32; integers are two's complement, little-endian on x86-64. */
typedef int32_t (*KcsKernelFn)(const KcsRuntime *rt, void *const *args, const int64_t *dims);

#ifdef __cplusplus
}
#endif

#endif /* KCS_ABI_H */
