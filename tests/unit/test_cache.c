/* test_cache.c - the LMDB kernel cache (cache/cache.h).
 *
 * Every case opens its own environment in a fresh mkdtemp directory and
 * removes it afterwards. Covered: part round-trips, misses, index, workload
 * and schedule records, the size limit, restart survival, on-disk corruption
 * (read as a miss and counted), concurrent writers and readers, and the
 * error for a path that is not a directory. Size and eviction: a map full
 * of what may not be evicted never grows (concurrent writers fail as
 * "full", the file stays within the map, nothing stored is lost); kernels
 * alone never fill it; eviction keeps schedules and their workloads and
 * takes a workload along only once no schedule or kernel refers to it
 * (cache_audit agrees); LRU order, delete, the collector thread, a
 * truncated file moved aside at open, backup.
 */
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
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

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(path);
}

static void
rm_dir(char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
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
	/* a schedule needs its workload stored: nothing is stored without it */
	OK(cache_put_schedule(c, &w, "cpu", r1, strlen(r1), &err) == KC_NOT_FOUND);
	OK(err.status == KC_OK);
	OK(cache_get_schedule(c, &w, "cpu", &b, &err) == KC_NOT_FOUND);
	OK(cache_put_workload(c, &w, "{\"w\":1}", 7, &err) == KC_OK);
	OK(cache_put_workload(c, &w0, "{\"w\":0}", 7, &err) == KC_OK);
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

/* ---- eviction and growth ---------------------------------------------- */

static Cache *
open_opts(const char *dir, const CacheOptions *opt)
{
	KcErr err = {0};
	Cache *c = cache_open(dir, opt, &err);
	OKF(c != NULL, "cache_open: %s", err.msg);
	return c;
}

#define FULL_THREADS 8

typedef struct Filler {
	Cache *c;
	unsigned id;
	pthread_barrier_t *go;
	atomic_int *stored, *full;
} Filler;

static bool
better_never(const char *existing, size_t existing_len, const char *incoming, size_t incoming_len,
             void *arg)
{
	(void)existing, (void)existing_len, (void)incoming, (void)incoming_len, (void)arg;
	return false;
}

/* The text of pinned workload `seed`, `len` bytes, into buf. */
static void
pinned_text(unsigned seed, size_t len, char *buf)
{
	int n = snprintf(buf, len, "{\"pinned\":%u,\"pad\":\"", seed);
	memset(buf + n, 'a' + (char)(seed % 26), len - (size_t)n - 2);
	memcpy(buf + len - 2, "\"}", 2);
}

/* A workload of `len` bytes derived from `seed`, with a schedule: nothing
 * eviction may remove. One merge (one transaction) stores both. */
static KcStatus
put_pinned(Cache *c, unsigned seed, size_t len, KcErr *err)
{
	char *text = kc_xmalloc(len);
	pinned_text(seed, len, text);
	CacheScheduleIn it = {.canonical = text,
	                      .canonical_len = len,
	                      .target = "cpu",
	                      .record = "{\"s\":1}",
	                      .record_len = 7};
	kc_sha256(text, len, &it.workload_key);
	KcStatus st = cache_merge_schedules(c, &it, 1, better_never, NULL, err);
	free(text);
	return st;
}

static void *
filler(void *arg)
{
	Filler *f = arg;
	pthread_barrier_wait(f->go);
	for (unsigned r = 0; r < 2; r++) {
		KcErr err = {0};
		KcStatus st = put_pinned(f->c, 100000 + f->id * 10 + r, 30000, &err);
		if (st == KC_OK)
			atomic_fetch_add(f->stored, 1);
		else if (st == KC_CACHE && strstr(err.msg, "full"))
			atomic_fetch_add(f->full, 1);
	}
	return NULL;
}

static off_t
file_size(const char *dir)
{
	char p[4200];
	struct stat sb;
	snprintf(p, sizeof p, "%s/data.mdb", dir);
	return stat(p, &sb) == 0 ? sb.st_size : -1;
}

/* Pinned workloads (each with a schedule: nothing there may be evicted)
 * fill a 1 MiB map; then 8 writers fail on MDB_MAP_FULL together. The map
 * never grows: they fail with "full", the file stays within the map, and
 * every record stored before reads back, also after a reopen. */
static void
map_never_grows(void)
{
	char *dir = tmp_dir();
	CacheOptions opt = {.map_bytes = (size_t)1 << 20,
	                    .max_bytes = ((size_t)1 << 20) - 4096,
	                    .no_collector = true};
	Cache *c = open_opts(dir, &opt);
	CacheStats st;
	CacheAudit au;
	KcErr err = {0};
	unsigned n = 0;
	if (!c)
		goto done;
	while (n < 1000 && put_pinned(c, n, 8000, &err) == KC_OK)
		n++;
	OKF(n > 50 && n < 1000 && err.status == KC_CACHE && strstr(err.msg, "full"),
	    "%u pinned workloads stored, then: %s", n, err.msg);
	OKF(file_size(dir) <= (off_t)opt.map_bytes, "data.mdb is %lld bytes",
	    (long long)file_size(dir));
	atomic_int stored, full;
	atomic_init(&stored, 0);
	atomic_init(&full, 0);
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, FULL_THREADS);
	pthread_t th[FULL_THREADS];
	Filler f[FULL_THREADS];
	for (unsigned i = 0; i < FULL_THREADS; i++) {
		f[i] = (Filler){c, i, &go, &stored, &full};
		OK(pthread_create(&th[i], NULL, filler, &f[i]) == 0);
	}
	for (unsigned i = 0; i < FULL_THREADS; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&go);
	OKF(atomic_load(&stored) == 0 && atomic_load(&full) == 2 * FULL_THREADS,
	    "writes on a full map: %d stored, %d refused as full", atomic_load(&stored),
	    atomic_load(&full));
	cache_stats(c, &st);
	OKF(st.map_bytes == opt.map_bytes && st.file_bytes <= opt.map_bytes &&
	        st.full_refusals >= 2 * FULL_THREADS && st.schedules == n && st.workloads == n,
	    "map %llu, file %llu, refusals %llu, %llu schedules", (unsigned long long)st.map_bytes,
	    (unsigned long long)st.file_bytes, (unsigned long long)st.full_refusals,
	    (unsigned long long)st.schedules);
	OKF(file_size(dir) <= (off_t)opt.map_bytes, "data.mdb is %lld bytes",
	    (long long)file_size(dir));
	cache_close(c);
	/* everything stored reads back after a reopen; the references agree */
	c = open_opts(dir, &opt);
	if (c) {
		KcBuf b = {0};
		unsigned good = 0;
		static char text[8000];
		for (unsigned i = 0; i < n; i++) {
			KcDigest wk;
			pinned_text(i, sizeof text, text);
			kc_sha256(text, sizeof text, &wk);
			b.len = 0;
			if (cache_get_workload(c, &wk, &b, NULL) != KC_OK || b.len != sizeof text ||
			    memcmp(b.data, text, sizeof text) != 0)
				continue;
			b.len = 0;
			if (cache_get_schedule(c, &wk, "cpu", &b, NULL) == KC_OK && b.len == 7)
				good++;
		}
		kc_buf_free(&b);
		OKF(good == n, "%u of %u workloads and schedules read back", good, n);
		OK(cache_audit(c, &au, &err) == KC_OK && au.workloads == n && au.schedules == n &&
		   au.unreferenced_workloads == 0 && au.schedules_without_workload == 0);
		cache_close(c);
	}
	OKF(file_size(dir) <= (off_t)opt.map_bytes, "data.mdb is %lld bytes",
	    (long long)file_size(dir));
done:
	rm_dir(dir);
}

/* Kernels alone never fill the store: with no collector and the eviction
 * ceiling at the map, 400 kernels (more than the map holds) go into a 1 MiB map,
 * every MDB_MAP_FULL evicting the oldest with their workloads. */
static void
full_of_kernels(void)
{
	char *dir = tmp_dir();
	CacheOptions opt = {.map_bytes = (size_t)1 << 20,
	                    .max_bytes = ((size_t)1 << 20) - 4096,
	                    .no_collector = true};
	Cache *c = open_opts(dir, &opt);
	TKernel *t = kc_xmalloc(sizeof *t);
	CacheStats st;
	CacheAudit au;
	KcErr err = {0};
	int failed = 0;
	if (!c)
		goto done;
	for (unsigned i = 0; i < 400; i++) {
		make_kernel(t, 20000 + i, "cpu");
		if (cache_put_kernel(c, &t->put, &err) != KC_OK)
			failed++;
	}
	cache_stats(c, &st);
	OKF(failed == 0 && st.evictions > 0 && st.evicted_workloads == st.evictions &&
	        st.file_bytes <= opt.map_bytes,
	    "%d puts failed (%s), %llu evicted, %llu workloads evicted, file %llu", failed, err.msg,
	    (unsigned long long)st.evictions, (unsigned long long)st.evicted_workloads,
	    (unsigned long long)st.file_bytes);
	OK(kernel_reads_back(c, t)); /* the newest */
	OK(cache_audit(c, &au, &err) == KC_OK && au.kernels == st.entries &&
	   au.workloads == au.kernels && au.unreferenced_workloads == 0 &&
	   au.kernels_without_workload == 0);
	OKF(file_size(dir) <= (off_t)opt.map_bytes, "data.mdb is %lld bytes",
	    (long long)file_size(dir));
	cache_close(c);
done:
	free(t);
	rm_dir(dir);
}

static bool
kernel_present(Cache *c, const TKernel *t)
{
	KcBuf b = {0};
	bool ok = cache_get_part(c, &t->put.kernel_id, CACHE_PART_OBJECT, &b, NULL) == KC_OK;
	kc_buf_free(&b);
	return ok;
}

/* Presence without a read of a part (which would count as an access). */
static bool
kernel_indexed(Cache *c, const TKernel *t)
{
	KcDigest id;
	return cache_get_index(c, &t->put.workload_key, t->target, &id, NULL) == KC_OK;
}

/* The stored bytes of t's parts (what eviction counts per kernel). */
static uint64_t
kernel_bytes(const TKernel *t)
{
	return 3 * 40 + t->put.meta_len + t->put.object_len + t->put.ir_len;
}

static void
evict_keeps_schedules(void)
{
	char *dir = tmp_dir();
	CacheOptions opt = {.map_bytes = (size_t)64 << 20, .no_collector = true};
	Cache *c = open_opts(dir, &opt);
	TKernel *t = kc_xmalloc(sizeof *t);
	CacheEvictReport r;
	CacheStats st;
	KcErr err = {0};
	if (!c)
		goto done;
	for (unsigned i = 0; i < 20; i++) {
		make_kernel(t, 300 + i, "cpu");
		OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
		OK(cache_put_schedule(c, &t->put.workload_key, "cpu", "{\"s\":1}", 7, NULL) ==
		   KC_OK);
	}
	cache_stats(c, &st);
	OK(st.entries == 20 && st.entries_artifacts == 60);
	OKF(cache_evict(c, 1, &r, &err) == KC_OK, "evict: %s", err.msg);
	OKF(r.kernels == 20 && r.bytes_freed > 20 * 3000 && r.bytes_after < r.bytes_before,
	    "evicted %llu kernels, %llu bytes", (unsigned long long)r.kernels,
	    (unsigned long long)r.bytes_freed);
	cache_stats(c, &st);
	OK(st.entries == 0 && st.entries_artifacts == 0 && st.evictions == 20);
	for (unsigned i = 0; i < 20; i++) {
		KcBuf b = {0};
		KcDigest id;
		make_kernel(t, 300 + i, "cpu");
		OK(!kernel_present(c, t));
		OK(cache_get_index(c, &t->put.workload_key, "cpu", &id, NULL) == KC_NOT_FOUND);
		OK(cache_get_workload(c, &t->put.workload_key, &b, NULL) == KC_OK &&
		   strcmp(b.data, t->canonical) == 0);
		kc_buf_free(&b);
		OK(cache_get_schedule(c, &t->put.workload_key, "cpu", &b, NULL) == KC_OK &&
		   strcmp(b.data, "{\"s\":1}") == 0);
		kc_buf_free(&b);
	}
	/* nothing left to evict: a second run frees nothing and succeeds */
	OK(cache_evict(c, 1, &r, NULL) == KC_OK && r.kernels == 0);
	cache_close(c);
done:
	free(t);
	rm_dir(dir);
}

/* The store's references agree: no kernel or schedule without its
 * workload, no workload with neither. */
static bool
audit_clean(Cache *c, CacheAudit *au)
{
	KcErr err = {0};
	bool ok = cache_audit(c, au, &err) == KC_OK && au->unreferenced_workloads == 0 &&
	          au->kernels_without_workload == 0 && au->schedules_without_workload == 0;
	if (!ok)
		printf(
		    "# audit: %s; %llu workloads (%llu unreferenced), %llu kernels (%llu without "
		    "workload), %llu schedules (%llu without workload)\n",
		    err.msg, (unsigned long long)au->workloads,
		    (unsigned long long)au->unreferenced_workloads, (unsigned long long)au->kernels,
		    (unsigned long long)au->kernels_without_workload,
		    (unsigned long long)au->schedules,
		    (unsigned long long)au->schedules_without_workload);
	return ok;
}

static bool
workload_there(Cache *c, const KcDigest *wk)
{
	KcBuf b = {0};
	bool ok = cache_get_workload(c, wk, &b, NULL) == KC_OK;
	kc_buf_free(&b);
	return ok;
}

/* Eviction takes a workload record along once neither a schedule nor a
 * kernel refers to it, and never before: a kernel that lost its index
 * entry to a newer one still keeps its workload. Records nothing refers
 * to (a bare workload, one whose kernel was deleted) go too, also when a
 * stray part with no kref is in the store. */
static void
evict_workloads(void)
{
	char *dir = tmp_dir();
	CacheOptions opt = {.map_bytes = (size_t)64 << 20, .no_collector = true};
	Cache *c = open_opts(dir, &opt);
	TKernel *t = kc_xmalloc(sizeof *t), *a = kc_xmalloc(sizeof *a), *b = kc_xmalloc(sizeof *b);
	CacheEvictReport r;
	CacheAudit au;
	CacheStats st;
	KcErr err = {0};
	if (!c)
		goto done;
	struct timespec ms2 = {0, 2 * 1000 * 1000};
	/* 63 kernels, 10 of them with a schedule; then A and B, one workload
	 * and target: B replaces A in the index */
	for (unsigned i = 0; i < 63; i++) {
		make_kernel(t, 600 + i, "cpu");
		OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
		if (i < 10)
			OK(cache_put_schedule(c, &t->put.workload_key, "cpu", "{}", 2, NULL) ==
			   KC_OK);
	}
	nanosleep(&ms2, NULL);
	make_kernel(a, 700, "cpu");
	make_kernel(b, 700, "cpu");
	kc_sha256("kernel 700 cpu, rescheduled", 27, &b->put.kernel_id);
	OK(cache_put_kernel(c, &a->put, NULL) == KC_OK);
	OK(cache_put_kernel(c, &b->put, NULL) == KC_OK);
	nanosleep(&ms2, NULL);
	OK(kernel_present(c, a)); /* A is now the most recently used */
	OK(cache_flush_touches(c, NULL) == KC_OK);
	OK(audit_clean(c, &au) && au.workloads == 64 && au.kernels == 65);
	/* the stored bytes of 64 kernels over the target: the 63 oldest and B */
	cache_stats(c, &st);
	OKF(cache_evict(c, st.bytes_used - 64 * kernel_bytes(b), &r, &err) == KC_OK &&
	        r.kernels == 64,
	    "evicted %llu: %s", (unsigned long long)r.kernels, err.msg);
	OKF(r.workloads == 53, "%llu workloads evicted (53 expected: 63 less 10 with schedules)",
	    (unsigned long long)r.workloads);
	OK(kernel_present(c, a) && !kernel_indexed(c, a));
	OK(workload_there(c, &a->put.workload_key)); /* A still refers to it */
	OK(audit_clean(c, &au) && au.workloads == 11 && au.kernels == 1 && au.schedules == 10);

	/* things nothing refers to: a bare workload, a deleted kernel's, and a
	 * stray part with no kref (its workload is unknown) */
	KcDigest bare, stray;
	kc_sha256("bare", 4, &bare);
	kc_sha256("stray", 5, &stray);
	OK(cache_put_workload(c, &bare, "{\"bare\":1}", 10, NULL) == KC_OK);
	make_kernel(t, 800, "cpu");
	OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
	OK(cache_delete_kernel(c, &t->put.kernel_id, NULL) == KC_OK);
	OK(workload_there(c, &t->put.workload_key)); /* a delete leaves it */
	OK(cache_put_part(c, &stray, CACHE_PART_ASM, "asm", 3, NULL) == KC_OK);
	OK(cache_audit(c, &au, NULL) == KC_OK && au.unreferenced_workloads == 2);
	OK(cache_evict(c, 1, &r, &err) == KC_OK);
	OKF(r.kernels == 2 && r.workloads == 3, "evicted %llu kernels, %llu workloads",
	    (unsigned long long)r.kernels, (unsigned long long)r.workloads);
	OK(!workload_there(c, &bare) && !workload_there(c, &t->put.workload_key) &&
	   !workload_there(c, &a->put.workload_key));
	OK(audit_clean(c, &au) && au.workloads == 10 && au.kernels == 0 && au.schedules == 10);
	cache_stats(c, &st);
	OK(st.workloads == 10 && st.schedules == 10 && st.evicted_workloads == 56);
	/* the kept workloads are whole and still take schedules */
	for (unsigned i = 0; i < 10; i++) {
		make_kernel(t, 600 + i, "cpu");
		KcBuf w = {0};
		OK(cache_get_workload(c, &t->put.workload_key, &w, NULL) == KC_OK &&
		   strcmp(w.data, t->canonical) == 0);
		kc_buf_free(&w);
	}
	make_kernel(t, 610, "cpu");
	OK(cache_put_schedule(c, &t->put.workload_key, "cpu", "{}", 2, NULL) == KC_NOT_FOUND);
	cache_close(c);
done:
	free(t);
	free(a);
	free(b);
	rm_dir(dir);
}

#define LRU_N 200
#define LRU_TOUCHED 100

/* 200 kernels; the first 100 are read after all are stored. Evicting 64
 * kernels' worth removes 64 kernels, only ones that were never read. */
static void
lru_order(void)
{
	char *dir = tmp_dir();
	CacheOptions opt = {.map_bytes = (size_t)64 << 20, .no_collector = true};
	Cache *c = open_opts(dir, &opt);
	TKernel *t = kc_xmalloc(sizeof *t);
	CacheEvictReport r;
	CacheStats st;
	if (!c)
		goto done;
	for (unsigned i = 0; i < LRU_N; i++) {
		make_kernel(t, 1000 + i, "cpu");
		OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
	}
	struct timespec ts = {0, 2 * 1000 * 1000};
	nanosleep(&ts, NULL);
	for (unsigned i = 0; i < LRU_TOUCHED; i++) {
		make_kernel(t, 1000 + i, "cpu");
		OK(kernel_present(c, t));
	}
	OK(cache_flush_touches(c, NULL) == KC_OK);
	/* the stored bytes of 64 kernels over the target: 64 go, and no more */
	cache_stats(c, &st);
	OK(cache_evict(c, st.bytes_used - 64 * kernel_bytes(t), &r, NULL) == KC_OK);
	OKF(r.kernels == 64, "evicted %llu (64 expected)", (unsigned long long)r.kernels);
	int touched_gone = 0, untouched_gone = 0;
	for (unsigned i = 0; i < LRU_N; i++) {
		make_kernel(t, 1000 + i, "cpu");
		if (!kernel_indexed(c, t)) {
			if (i < LRU_TOUCHED)
				touched_gone++;
			else
				untouched_gone++;
		}
	}
	OKF(touched_gone == 0 && untouched_gone == 64, "touched gone %d, untouched gone %d",
	    touched_gone, untouched_gone);
	/* the stamps survive a restart */
	cache_close(c);
	c = open_opts(dir, &opt);
	if (c) {
		cache_stats(c, &st);
		/* the next 64 are the 36 never-read kernels left, then read ones */
		OK(cache_evict(c, st.bytes_used - 64 * kernel_bytes(t), &r, NULL) == KC_OK &&
		   r.kernels == 64);
		/* one byte over the target takes one kernel */
		cache_stats(c, &st);
		OK(cache_evict(c, st.bytes_used - 1, &r, NULL) == KC_OK && r.kernels == 1);
		touched_gone = untouched_gone = 0;
		for (unsigned i = 0; i < LRU_N; i++) {
			make_kernel(t, 1000 + i, "cpu");
			if (kernel_indexed(c, t))
				continue;
			if (i < LRU_TOUCHED)
				touched_gone++;
			else
				untouched_gone++;
		}
		OKF(untouched_gone == LRU_N - LRU_TOUCHED && touched_gone == 64 - 36 + 1,
		    "after restart: touched gone %d, untouched gone %d", touched_gone,
		    untouched_gone);
		cache_close(c);
	}
done:
	free(t);
	rm_dir(dir);
}

static void
delete_kernel(void)
{
	char *dir = tmp_dir();
	Cache *c = open_small(dir, 0);
	TKernel *t = kc_xmalloc(sizeof *t), *u = kc_xmalloc(sizeof *u);
	KcErr err = {0};
	KcDigest id;
	CacheStats st;
	if (!c)
		goto done;
	make_kernel(t, 40, "cpu");
	make_kernel(u, 41, "cpu");
	OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
	OK(cache_put_kernel(c, &u->put, NULL) == KC_OK);
	OK(cache_put_part(c, &t->put.kernel_id, CACHE_PART_ASM, "asm", 3, NULL) == KC_OK);
	OK(cache_delete_kernel(c, &t->put.kernel_id, &err) == KC_OK);
	OK(!kernel_present(c, t));
	KcBuf b = {0};
	OK(cache_get_part(c, &t->put.kernel_id, CACHE_PART_ASM, &b, NULL) == KC_NOT_FOUND);
	OK(cache_get_index(c, &t->put.workload_key, "cpu", &id, NULL) == KC_NOT_FOUND);
	OK(cache_get_workload(c, &t->put.workload_key, &b, NULL) == KC_OK);
	kc_buf_free(&b);
	OK(kernel_reads_back(c, u));
	OK(cache_delete_kernel(c, &t->put.kernel_id, &err) == KC_NOT_FOUND);
	OK(err.status == KC_OK);
	cache_stats(c, &st);
	OK(st.evictions == 1 && st.entries == 1 && st.entries_artifacts == 3);
	cache_close(c);
done:
	free(t);
	free(u);
	rm_dir(dir);
}

/* The background thread writes stamps and evicts past the high water mark
 * without being asked. */
static void
collector(void)
{
	char *dir = tmp_dir();
	CacheOptions opt = {
	    .map_bytes = (size_t)64 << 20, .max_bytes = (size_t)512 << 10, .touch_flush_ms = 20};
	Cache *c = open_opts(dir, &opt);
	TKernel *t = kc_xmalloc(sizeof *t);
	CacheStats st;
	if (!c)
		goto done;
	for (unsigned i = 0; i < 300; i++) {
		make_kernel(t, 5000 + i, "cpu");
		OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
	}
	for (int i = 0; i < 300; i++) {
		cache_stats(c, &st);
		if (st.evictions > 0 && st.bytes_used <= opt.max_bytes / 100 * 90)
			break;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	OKF(st.evictions > 0 && st.bytes_used <= opt.max_bytes / 100 * 90,
	    "evictions %llu, %llu bytes in use", (unsigned long long)st.evictions,
	    (unsigned long long)st.bytes_used);
	/* the newest kernel is still there */
	OK(kernel_present(c, t));
	cache_close(c);
done:
	free(t);
	rm_dir(dir);
}

static int
count_damaged(const char *dir)
{
	char pat[4200];
	glob_t g;
	int n = 0;
	snprintf(pat, sizeof pat, "%s/data.mdb.damaged-*", dir);
	if (glob(pat, 0, NULL, &g) == 0)
		n = (int)g.gl_pathc;
	globfree(&g);
	return n;
}

/* A data file cut short is moved aside and kcsd starts empty; so is one
 * whose meta pages are garbage. */
static void
damaged_moved_aside(void)
{
	char *dir = tmp_dir();
	char p[4200];
	TKernel *t = kc_xmalloc(sizeof *t);
	struct stat sb;
	make_kernel(t, 60, "cpu");
	Cache *c = open_small(dir, 0);
	if (c) {
		OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
		cache_close(c);
	}
	snprintf(p, sizeof p, "%s/data.mdb", dir);
	OK(stat(p, &sb) == 0 && sb.st_size > 16384);
	OK(truncate(p, sb.st_size / 2) == 0);
	c = open_small(dir, 0);
	if (c) {
		OK(!kernel_present(c, t));
		OK(count_damaged(dir) == 1);
		OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
		cache_close(c);
	}
	/* garbage over both meta pages */
	int fd = open(p, O_WRONLY);
	static char junk[8192];
	memset(junk, 0x5a, sizeof junk);
	OK(fd >= 0 && pwrite(fd, junk, sizeof junk, 0) == (ssize_t)sizeof junk);
	if (fd >= 0)
		close(fd);
	c = open_small(dir, 0);
	if (c) {
		OK(!kernel_present(c, t));
		OK(count_damaged(dir) == 2);
		cache_close(c);
	}
	free(t);
	rm_dir(dir);
}

static void
backup(void)
{
	char *dir = tmp_dir();
	char path[4400], file[4500];
	uint64_t bytes = 0;
	KcErr err = {0};
	TKernel *t = kc_xmalloc(sizeof *t);
	make_kernel(t, 70, "cpu");
	Cache *c = open_small(dir, 0);
	if (!c)
		goto done;
	OK(cache_put_kernel(c, &t->put, NULL) == KC_OK);
	OKF(cache_backup(c, path, sizeof path, &bytes, &err) == KC_OK, "backup: %s", err.msg);
	OK(strstr(path, "/backups/") != NULL && bytes > 0);
	cache_close(c);
	/* the copy opens as a store of its own and holds the kernel */
	snprintf(file, sizeof file, "%s", path);
	c = open_small(file, 0);
	if (c) {
		OK(kernel_reads_back(c, t));
		cache_close(c);
	}
done:
	free(t);
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
	t_sub("map_never_grows", map_never_grows);
	t_sub("full_of_kernels", full_of_kernels);
	t_sub("evict_keeps_schedules", evict_keeps_schedules);
	t_sub("evict_workloads", evict_workloads);
	t_sub("lru_order", lru_order);
	t_sub("delete_kernel", delete_kernel);
	t_sub("collector", collector);
	t_sub("damaged_moved_aside", damaged_moved_aside);
	t_sub("backup", backup);
	return t_done();
}
