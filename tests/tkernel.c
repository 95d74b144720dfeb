/* tkernel.c - the 3-thread runtime and the kernel loader behind tkernel.h. */
#include "tkernel.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define POOL_THREADS 3

static atomic_llong n_regions, n_tasks, n_allocs, n_live;

typedef struct Job {
	KcsTaskFn fn;
	void *closure;
	int64_t n;
	atomic_llong next;
	atomic_int result; /* the first non-zero task result */
} Job;

static void *
worker(void *p)
{
	Job *j = p;
	for (;;) {
		long long t = atomic_fetch_add(&j->next, 1);
		if (t >= j->n)
			return NULL;
		int32_t r = j->fn(j->closure, t, j->n);
		int zero = 0;
		atomic_fetch_add(&n_tasks, 1);
		if (r)
			atomic_compare_exchange_strong(&j->result, &zero, r);
	}
}

static int32_t
pool_parallel_for(void *ctx, KcsTaskFn fn, void *closure, int64_t n)
{
	pthread_t th[POOL_THREADS - 1];
	int nth = n < POOL_THREADS ? (int)n : POOL_THREADS, started = 0;
	Job j = {.fn = fn, .closure = closure, .n = n};
	(void)ctx;
	atomic_init(&j.next, 0);
	atomic_init(&j.result, 0);
	if (n > 1)
		atomic_fetch_add(&n_regions, 1);
	for (int i = 0; i < nth - 1; i++)
		if (pthread_create(&th[started], NULL, worker, &j) == 0)
			started++;
	worker(&j);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return atomic_load(&j.result);
}

static void *
pool_alloc(void *ctx, uint64_t bytes, uint64_t align)
{
	(void)ctx;
	if (align < sizeof(void *))
		align = sizeof(void *); /* aligned_alloc's minimum */
	void *p = aligned_alloc(align, bytes ? (bytes + align - 1) / align * align : align);
	if (p) {
		atomic_fetch_add(&n_allocs, 1);
		atomic_fetch_add(&n_live, 1);
	}
	return p;
}

static void
pool_free(void *ctx, void *p)
{
	(void)ctx;
	if (p)
		atomic_fetch_sub(&n_live, 1);
	free(p);
}

const KcsRuntime t_pool = {.version = KCS_RUNTIME_VERSION,
                           .parallel_for = pool_parallel_for,
                           .alloc = pool_alloc,
                           .free = pool_free,
                           .num_threads = POOL_THREADS};

TPoolStats
t_pool_stats(void)
{
	TPoolStats s = {atomic_load(&n_regions), atomic_load(&n_tasks), atomic_load(&n_allocs),
	                atomic_load(&n_live)};
	return s;
}

KcsKernelFn
t_kernel_load(const void *obj, size_t len, const char *symbol, void **dl, char *why, size_t cap)
{
	char path[] = "/tmp/kc_test_kernel_XXXXXX.so";
	void *h = NULL;
	KcsKernelFn fn = NULL;
	*dl = NULL;
	int fd = mkstemps(path, 3);
	if (fd < 0) {
		snprintf(why, cap, "mkstemps %s failed", path);
		return NULL;
	}
	bool wrote = write(fd, obj, len) == (ssize_t)len;
	close(fd);
	if (wrote && !(h = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
		snprintf(why, cap, "dlopen: %s", dlerror());
	else if (!wrote)
		snprintf(why, cap, "cannot write the object to %s", path);
	unlink(path);
	if (!h)
		return NULL;
	fn = (KcsKernelFn)(uintptr_t)dlsym(h, symbol);
	if (!fn) {
		snprintf(why, cap, "dlsym %s: %s", symbol, dlerror());
		dlclose(h);
		return NULL;
	}
	*dl = h;
	return fn;
}
