/* test_cache.c - the LMDB kernel cache (cache/cache.h).
 *
 * Every case opens its own environment in a fresh mkdtemp directory and
 * removes it afterwards. Covered: part round-trips, misses, index, workload
 * and schedule records, the size limit, restart survival, on-disk corruption
 * (read as a miss and counted), concurrent writers and readers, and the
 * error for a path that is not a directory.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "t.h"

/* A kernel whose every part is derived from `seed`. */
typedef struct TKernel {
	CacheKernelPut put;
	char canonical[96];
	char target[800];
	char meta[96];
	unsigned char object[3000];
	char ir[200];
} TKernel;

static void
make_kernel(TKernel *t, unsigned seed, const char *target)
{
	char s[32];
	memset(t, 0, sizeof *t);
	snprintf(t->canonical, sizeof t->canonical, "{\"graph\":%u}", seed);
	snprintf(t->target, sizeof t->target, "%s", target);
	snprintf(t->meta, sizeof t->meta, "{\"meta\":%u}", seed);
	snprintf(t->ir, sizeof t->ir, "; ir for %u\ndefine void @k() { ret void }\n", seed);
	for (size_t i = 0; i < sizeof t->object; i++)
		t->object[i] = (unsigned char)(i * 31u + seed * 7u);
	snprintf(s, sizeof s, "workload %u", seed);
	kc_sha256(s, strlen(s), &t->put.workload_key);
	snprintf(s, sizeof s, "kernel %u %s", seed, target);
	kc_sha256(s, strlen(s), &t->put.kernel_id);
	t->put.canonical = t->canonical;
	t->put.canonical_len = strlen(t->canonical);
	t->put.target = t->target;
	t->put.meta = t->meta;
	t->put.meta_len = strlen(t->meta);
	t->put.object = t->object;
	t->put.object_len = sizeof t->object;
	t->put.ir = t->ir;
	t->put.ir_len = strlen(t->ir);
}

static bool
part_is(Cache *c, const KcDigest *id, CachePart part, const void *want, size_t n)
{
	KcBuf b = {0};
	KcErr err = {0};
	bool ok = cache_get_part(c, id, part, &b, &err) == KC_OK && b.len == n &&
	          memcmp(b.data, want, n) == 0;
	kc_buf_free(&b);
	return ok;
}

/* Every stored part of t reads back byte-exact. */
static bool
kernel_reads_back(Cache *c, const TKernel *t)
{
	KcDigest id;
	KcErr err = {0};
	return part_is(c, &t->put.kernel_id, CACHE_PART_META, t->meta, strlen(t->meta)) &&
	       part_is(c, &t->put.kernel_id, CACHE_PART_OBJECT, t->object, sizeof t->object) &&
	       part_is(c, &t->put.kernel_id, CACHE_PART_IR, t->ir, strlen(t->ir)) &&
	       cache_get_index(c, &t->put.workload_key, t->target, &id, &err) == KC_OK &&
	       memcmp(id.b, t->put.kernel_id.b, 32) == 0;
}

static char *
tmp_dir(void)
{
	const char *base = getenv("TMPDIR");
	char path[4096];
	snprintf(path, sizeof path, "%s/kcs-cache-XXXXXX", base && *base ? base : "/tmp");
	char *d = mkdtemp(path);
	KC_ASSERT(d != NULL);
	return kc_xstrdup(d);
}

static void
rm_dir(char *dir)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/data.mdb", dir);
	unlink(p);
	snprintf(p, sizeof p, "%s/lock.mdb", dir);
	unlink(p);
	rmdir(dir);
	free(dir);
}

static Cache *
open_small(const char *dir, size_t max_object)
{
	CacheOptions opt = {
	    .map_bytes = (size_t)1 << 30, .max_object_bytes = max_object, .no_meta_sync = true};
	KcErr err = {0};
	Cache *c = cache_open(dir, &opt, &err);
	OKF(c != NULL, "cache_open: %s", err.msg);
	return c;
}

static void
round_trip(void)
{
	char *dir = tmp_dir();
	KcErr err = {0};
	Cache *c = cache_open(dir, NULL, &err); /* defaults: 64 GiB sparse map */
	OKF(c != NULL, "cache_open: %s", err.msg);
	if (!c)
		goto done;
	TKernel *t = kc_xmalloc(sizeof *t);
	make_kernel(t, 1, "cpu-x86_64-avx2");
	OK(cache_put_kernel(c, &t->put, &err) == KC_OK);
	OK(kernel_reads_back(c, t));
	/* storing the same kernel again is fine */
	OK(cache_put_kernel(c, &t->put, &err) == KC_OK);
	OK(kernel_reads_back(c, t));

	KcBuf b = {0};
	OK(cache_get_workload(c, &t->put.workload_key, &b, &err) == KC_OK);
	OK(b.len == strlen(t->canonical) && memcmp(b.data, t->canonical, b.len) == 0);
	kc_buf_free(&b);

	/* reads append */
	kc_buf_puts(&b, "x");
	OK(cache_get_part(c, &t->put.kernel_id, CACHE_PART_META, &b, &err) == KC_OK);
	OK(b.len == 1 + strlen(t->meta) && memcmp(b.data + 1, t->meta, b.len - 1) == 0);
	kc_buf_free(&b);

	/* lazily added assembly */
	OK(cache_get_part(c, &t->put.kernel_id, CACHE_PART_ASM, &b, &err) == KC_NOT_FOUND);
	OK(cache_put_part(c, &t->put.kernel_id, CACHE_PART_ASM, "nop\n", 4, &err) == KC_OK);
	OK(part_is(c, &t->put.kernel_id, CACHE_PART_ASM, "nop\n", 4));

	/* standalone workload put */
	KcDigest w2;
	kc_sha256("w2", 2, &w2);
	OK(cache_put_workload(c, &w2, "{\"w\":2}", 7, &err) == KC_OK);
	OK(cache_get_workload(c, &w2, &b, &err) == KC_OK && b.len == 7 &&
	   memcmp(b.data, "{\"w\":2}", 7) == 0);
	kc_buf_free(&b);

	/* a target name longer than LMDB's 511-byte key limit */
	TKernel *l = kc_xmalloc(sizeof *l);
	char longt[701];
	memset(longt, 'T', 700);
	longt[700] = '\0';
	make_kernel(l, 2, longt);
	OK(cache_put_kernel(c, &l->put, &err) == KC_OK);
	OK(kernel_reads_back(c, l));
	OKF(err.status == KC_OK, "err: %s", err.msg);

	CacheStats st;
	cache_stats(c, &st);
	OK(st.entries_artifacts == 7); /* 3 + asm + 3 */
	OK(st.checksum_failures == 0);
	OK(st.map_bytes == (uint64_t)64 << 30);
	OK(st.bytes_used > 0 && st.bytes_used < st.map_bytes);
	free(l);
	free(t);
	cache_close(c);
done:
	rm_dir(dir);
}

static void
misses(void)
{
	char *dir = tmp_dir();
	Cache *c = open_small(dir, 0);
	if (!c)
		goto done;
	KcDigest id, got;
	KcBuf b = {0};
	KcErr err = {0};
	kc_sha256("nope", 4, &id);
	OK(cache_get_part(c, &id, CACHE_PART_OBJECT, &b, &err) == KC_NOT_FOUND);
	OK(cache_get_workload(c, &id, &b, &err) == KC_NOT_FOUND);
	OK(cache_get_index(c, &id, "cpu", &got, &err) == KC_NOT_FOUND);
	OK(cache_get_schedule(c, &id, "cpu", &b, &err) == KC_NOT_FOUND);
	OK(b.len == 0);
	OK(err.status == KC_OK); /* a miss leaves err alone */
	/* a stored kernel does not make other parts or targets hit */
	TKernel *t = kc_xmalloc(sizeof *t);
	make_kernel(t, 3, "cpu");
	t->put.ir = NULL;
	t->put.ir_len = 0;
	OK(cache_put_kernel(c, &t->put, &err) == KC_OK);
	OK(cache_get_part(c, &t->put.kernel_id, CACHE_PART_IR, &b, &err) == KC_NOT_FOUND);
	OK(cache_get_index(c, &t->put.workload_key, "gpu", &got, &err) == KC_NOT_FOUND);
	OK(cache_get_index(c, &t->put.workload_key, "cpu", &got, &err) == KC_OK);
	free(t);
	kc_buf_free(&b);
	cache_close(c);
done:
	rm_dir(dir);
}

static void
index_replaces(void)
{
	char *dir = tmp_dir();
	Cache *c = open_small(dir, 0);
	if (!c)
		goto done;
	KcErr err = {0};
	KcDigest got;
	TKernel *a = kc_xmalloc(sizeof *a), *b = kc_xmalloc(sizeof *b);
	make_kernel(a, 4, "cpu");
	make_kernel(b, 5, "cpu");
	b->put.workload_key = a->put.workload_key; /* recompiled: new kernel id */
	OK(cache_put_kernel(c, &a->put, &err) == KC_OK);
	OK(cache_put_kernel(c, &b->put, &err) == KC_OK);
	OK(cache_get_index(c, &a->put.workload_key, "cpu", &got, &err) == KC_OK);
	OK(memcmp(got.b, b->put.kernel_id.b, 32) == 0);
	/* the workload text stays the first one stored */
	KcBuf w = {0};
	OK(cache_get_workload(c, &a->put.workload_key, &w, &err) == KC_OK);
	OK(w.len == strlen(a->canonical) && memcmp(w.data, a->canonical, w.len) == 0);
	/* the older kernel's parts are still there */
	OK(part_is(c, &a->put.kernel_id, CACHE_PART_OBJECT, a->object, sizeof a->object));
	kc_buf_free(&w);
	free(a);
	free(b);
	cache_close(c);
done:
	rm_dir(dir);
}

static void
schedules(void)
{
	char *dir = tmp_dir();
	Cache *c = open_small(dir, 0);
	if (!c)
		goto done;
	KcErr err = {0};
	KcDigest w, other, w0;
	KcBuf b = {0};
	kc_sha256("sched-w", 7, &w);
	kc_sha256("sched-other", 11, &other);
	memcpy(&w0, &w, sizeof w0);
	w0.b[31] ^= 1; /* a neighbouring key must not leak into the list */
	const char *r1 = "{\"target\":\"cpu\",\"v\":1}";
	const char *r1b = "{\"target\":\"cpu\",\"v\":2}";
	const char *r2 = "{\"target\":\"gpu\",\"v\":1}";
	OK(cache_put_schedule(c, &w, "cpu", r1, strlen(r1), &err) == KC_OK);
	OK(cache_get_schedule(c, &w, "cpu", &b, &err) == KC_OK && b.len == strlen(r1) &&
	   memcmp(b.data, r1, b.len) == 0);
	kc_buf_free(&b);
	OK(cache_put_schedule(c, &w, "cpu", r1b, strlen(r1b), &err) == KC_OK);
	OK(cache_get_schedule(c, &w, "cpu", &b, &err) == KC_OK && strcmp(b.data, r1b) == 0);
	kc_buf_free(&b);
	OK(cache_put_schedule(c, &w, "gpu", r2, strlen(r2), &err) == KC_OK);
	OK(cache_put_schedule(c, &w0, "cpu", r1, strlen(r1), &err) == KC_OK);

	OK(cache_list_schedules(c, &w, &b, &err) == KC_OK);
	OKF(b.len == strlen(r1b) + strlen(r2) + 3, "list: %s", b.data);
	OK(b.data[0] == '[' && b.data[b.len - 1] == ']');
	OK(strstr(b.data, r1b) != NULL && strstr(b.data, r2) != NULL);
	OK(strstr(b.data, r1) == NULL);
	kc_buf_free(&b);

	OK(cache_list_schedules(c, &other, &b, &err) == KC_OK && strcmp(b.data, "[]") == 0);
	kc_buf_free(&b);
	OKF(err.status == KC_OK, "err: %s", err.msg);
	cache_close(c);
done:
	rm_dir(dir);
}

static void
too_large(void)
{
	char *dir = tmp_dir();
	Cache *c = open_small(dir, 1024);
	if (!c)
		goto done;
	KcErr err = {0};
	KcDigest got;
	TKernel *t = kc_xmalloc(sizeof *t);
	make_kernel(t, 6, "cpu"); /* object is 3000 bytes */
	OK(cache_put_kernel(c, &t->put, &err) == KC_TOO_LARGE);
	OK(err.status == KC_TOO_LARGE && strstr(err.msg, "3000") != NULL);
	/* nothing of it was stored */
	OK(cache_get_index(c, &t->put.workload_key, "cpu", &got, NULL) == KC_NOT_FOUND);
	OK(cache_put_part(c, &t->put.kernel_id, CACHE_PART_ASM, t->object, 1025, NULL) ==
	   KC_TOO_LARGE);
	OK(cache_put_part(c, &t->put.kernel_id, CACHE_PART_ASM, t->object, 1024, NULL) == KC_OK);
	free(t);
	cache_close(c);
done:
	rm_dir(dir);
}

static void
restart_survives(void)
{
	char *dir = tmp_dir();
	TKernel *t = kc_xmalloc(sizeof *t);
	make_kernel(t, 7, "cpu");
	Cache *c = open_small(dir, 0);
	if (c) {
		OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
		OK(cache_put_schedule(c, &t->put.workload_key, "cpu", "{}", 2, NULL) == KC_OK);
		cache_close(c);
	}
	c = open_small(dir, 0);
	if (c) {
		KcBuf b = {0};
		OK(kernel_reads_back(c, t));
		OK(cache_get_schedule(c, &t->put.workload_key, "cpu", &b, NULL) == KC_OK &&
		   strcmp(b.data, "{}") == 0);
		kc_buf_free(&b);
		cache_close(c);
	}
	free(t);
	rm_dir(dir);
}

/* Flips one byte in every copy of `needle` in dir/data.mdb. */
static int
corrupt_file(const char *dir, const void *needle, size_t n)
{
	char p[4200];
	struct stat st;
	int hits = 0;
	snprintf(p, sizeof p, "%s/data.mdb", dir);
	int fd = open(p, O_RDWR);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return -1;
	}
	char *buf = kc_xmalloc((size_t)st.st_size);
	if (pread(fd, buf, (size_t)st.st_size, 0) == st.st_size) {
		char *at = buf;
		size_t left = (size_t)st.st_size;
		char *hit;
		while ((hit = memmem(at, left, needle, n)) != NULL) {
			hit[n / 2] ^= 0x55;
			hits++;
			left -= (size_t)(hit + n - at);
			at = hit + n;
		}
		if (pwrite(fd, buf, (size_t)st.st_size, 0) != st.st_size)
			hits = -1;
	}
	free(buf);
	close(fd);
	return hits;
}

static void
corruption_is_a_miss(void)
{
	char *dir = tmp_dir();
	static const char marker[] = "{\"meta\":\"corrupt-me-7f3a9c1e-unique-marker\"}";
	TKernel *t = kc_xmalloc(sizeof *t);
	make_kernel(t, 8, "cpu");
	t->put.meta = marker;
	t->put.meta_len = strlen(marker);
	Cache *c = open_small(dir, 0);
	if (c) {
		OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
		cache_close(c);
	}
	int hits = corrupt_file(dir, marker, strlen(marker));
	OKF(hits >= 1, "marker copies flipped: %d", hits);
	c = open_small(dir, 0);
	if (c) {
		KcBuf b = {0};
		KcErr err = {0};
		CacheStats st;
		OK(cache_get_part(c, &t->put.kernel_id, CACHE_PART_META, &b, &err) == KC_NOT_FOUND);
		OK(b.len == 0 && err.status == KC_OK);
		cache_stats(c, &st);
		OK(st.checksum_failures == 1);
		/* the other parts still verify */
		OK(part_is(c, &t->put.kernel_id, CACHE_PART_OBJECT, t->object, sizeof t->object));
		/* storing the kernel again repairs it */
		OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
		OK(part_is(c, &t->put.kernel_id, CACHE_PART_META, marker, strlen(marker)));
		cache_stats(c, &st);
		OK(st.checksum_failures == 1);
		cache_close(c);
	}
	free(t);
	rm_dir(dir);
}

/* ---- threads --------------------------------------------------------- */

#define N_THREADS 8
#define N_ROUNDS 40

typedef struct Worker {
	Cache *c;
	unsigned id;
	atomic_int *failures;
} Worker;

static void *
worker(void *arg)
{
	Worker *w = arg;
	TKernel *mine = kc_xmalloc(sizeof *mine), *shared = kc_xmalloc(sizeof *shared);
	make_kernel(shared, 1000, "cpu-shared"); /* identical in every thread */
	for (unsigned r = 0; r < N_ROUNDS; r++) {
		make_kernel(mine, 100 + w->id * N_ROUNDS + r, "cpu");
		KcErr err = {0};
		if (cache_put_kernel(w->c, &mine->put, &err) != KC_OK ||
		    cache_put_kernel(w->c, &shared->put, &err) != KC_OK)
			atomic_fetch_add(w->failures, 1);
		if (!kernel_reads_back(w->c, mine) || !kernel_reads_back(w->c, shared))
			atomic_fetch_add(w->failures, 1);
		KcBuf b = {0};
		if (cache_list_schedules(w->c, &mine->put.workload_key, &b, &err) != KC_OK ||
		    strcmp(b.data, "[]") != 0)
			atomic_fetch_add(w->failures, 1);
		kc_buf_free(&b);
	}
	free(mine);
	free(shared);
	return NULL;
}

static void
concurrent(void)
{
	char *dir = tmp_dir();
	Cache *c = open_small(dir, 0);
	if (!c)
		goto done;
	atomic_int failures;
	atomic_init(&failures, 0);
	pthread_t th[N_THREADS];
	Worker w[N_THREADS];
	for (unsigned i = 0; i < N_THREADS; i++) {
		w[i] = (Worker){c, i, &failures};
		OK(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
	}
	for (unsigned i = 0; i < N_THREADS; i++)
		pthread_join(th[i], NULL);
	OKF(atomic_load(&failures) == 0, "failures: %d", atomic_load(&failures));
	CacheStats st;
	cache_stats(c, &st);
	OK(st.checksum_failures == 0);
	OK(st.entries_artifacts == 3u * (N_THREADS * N_ROUNDS + 1));
	cache_close(c);
done:
	rm_dir(dir);
}

static void
not_a_directory(void)
{
	char *dir = tmp_dir();
	char file[4200];
	snprintf(file, sizeof file, "%s/plain", dir);
	int fd = open(file, O_CREAT | O_WRONLY, 0600);
	OK(fd >= 0);
	if (fd >= 0)
		close(fd);
	KcErr err = {0};
	Cache *c = cache_open(file, NULL, &err);
	OK(c == NULL);
	OK(err.status == KC_CACHE);
	OKF(strstr(err.msg, file) != NULL, "msg: %s", err.msg);
	OKF(strstr(err.msg, "LMDB") != NULL, "msg: %s", err.msg);
	cache_close(c);
	unlink(file);
	rm_dir(dir);
}

int
main(void)
{
	t_sub("round_trip", round_trip);
	t_sub("misses", misses);
	t_sub("index_replaces", index_replaces);
	t_sub("schedules", schedules);
	t_sub("too_large", too_large);
	t_sub("restart_survives", restart_survives);
	t_sub("corruption_is_a_miss", corruption_is_a_miss);
	t_sub("concurrent", concurrent);
	t_sub("not_a_directory", not_a_directory);
	return t_done();
}
