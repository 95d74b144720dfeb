/* cache_lmdb.c - the kernel cache on one LMDB environment (see cache.h).
 *
 * The one idea: every value is framed as magic "KCS1" | format version (u32
 * little-endian) | sha256(payload) | payload, written in place with
 * MDB_RESERVE and checked on every read before a byte leaves this file. A
 * value that fails the check is logged, counted and read as a miss.
 *
 * Each public call opens its own transaction and ends it before returning;
 * data are copied out of the map first. The environment uses MDB_NOTLS, so
 * reader slots belong to transactions, not threads, and MHD threads and
 * compile workers can share one Cache. LMDB serialises the writers. Every
 * transaction holds the gate shared (txn_begin); every write goes through
 * write_txn, which handles MDB_MAP_FULL by evicting and retrying once (a
 * delete retries in the reserve instead); the map never grows past
 * cache_map_bytes. LMDB return codes are turned into KcErr here
 * and in the other cache/ files, nowhere else.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "internal.h"

#define FORMAT_VERSION 1u
#define DEFAULT_MAP_BYTES ((size_t)64 << 30)
#define DEFAULT_MAX_OBJECT ((size_t)64 << 20)
#define DEFAULT_MAX_BYTES ((uint64_t)8 << 30)
#define MAX_DBS 12
#define MAX_READERS 512

static const unsigned char frame_magic[4] = {'K', 'C', 'S', '1'};

/* ---- framing ---------------------------------------------------------- */

void
frame_write(unsigned char *dst, const void *p, size_t n)
{
	KcDigest d;
	kc_sha256(p, n, &d);
	memcpy(dst, frame_magic, 4);
	dst[4] = FORMAT_VERSION & 0xff;
	dst[5] = (FORMAT_VERSION >> 8) & 0xff;
	dst[6] = (FORMAT_VERSION >> 16) & 0xff;
	dst[7] = (FORMAT_VERSION >> 24) & 0xff;
	memcpy(dst + 8, d.b, 32);
	if (n)
		memcpy(dst + FRAME_HDR, p, n);
}

/* True when v is a well-formed frame whose payload matches its digest. */
bool
frame_ok(const MDB_val *v)
{
	const unsigned char *b = v->mv_data;
	if (v->mv_size < FRAME_HDR || memcmp(b, frame_magic, 4) != 0)
		return false;
	uint32_t ver =
	    (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
	if (ver != FORMAT_VERSION)
		return false;
	KcDigest d;
	kc_sha256(b + FRAME_HDR, v->mv_size - FRAME_HDR, &d);
	return memcmp(d.b, b + 8, 32) == 0;
}

/* Log and count a value that failed its check. */
void
refuse(Cache *c, const char *db, const MDB_val *key)
{
	static const char hx[] = "0123456789abcdef";
	char hex[2 * KEY_MAX + 1];
	size_t n = key->mv_size < KEY_MAX ? key->mv_size : KEY_MAX;
	const unsigned char *k = key->mv_data;
	for (size_t i = 0; i < n; i++) {
		hex[2 * i] = hx[k[i] >> 4];
		hex[2 * i + 1] = hx[k[i] & 15];
	}
	hex[2 * n] = '\0';
	atomic_fetch_add(&c->checksum_failures, 1);
	kc_log(KC_LOG_WARN, "cache: checksum failure in db '%s' key %s; value ignored", db, hex);
}

/* ---- LMDB boundary ------------------------------------------------------ */

KcStatus
lmdb_fail(Cache *c, KcErr *err, int rc, const char *what)
{
	if (rc == MDB_MAP_FULL)
		return kc_fail(err, KC_CACHE, "cache",
		               "kernel cache is full (cache_map_bytes %zu, nothing left to evict) "
		               "while %s",
		               c->map_limit, what);
	return kc_fail(err, KC_CACHE, "cache", "kernel cache failed while %s: %s", what,
	               mdb_strerror(rc));
}

/* mdb_txn_begin with the gate held shared, clearing stale reader slots
 * once if the table is full. MDB_MAP_RESIZED cannot happen: only this
 * process opens the environment. On failure the gate is released and
 * *txn is NULL. */
int
txn_begin(Cache *c, unsigned flags, MDB_txn **txn)
{
	*txn = NULL;
	pthread_rwlock_rdlock(&c->gate);
	int rc = mdb_txn_begin(c->env, NULL, flags, txn);
	if (rc == MDB_READERS_FULL) {
		int dead = 0;
		mdb_reader_check(c->env, &dead);
		kc_log(KC_LOG_WARN, "cache: reader table full; cleared %d stale slot(s)", dead);
		if (dead > 0)
			rc = mdb_txn_begin(c->env, NULL, flags, txn);
	}
	if (rc != MDB_SUCCESS) {
		*txn = NULL;
		pthread_rwlock_unlock(&c->gate);
	}
	return rc;
}

void
txn_abort(Cache *c, MDB_txn *txn)
{
	if (!txn)
		return;
	mdb_txn_abort(txn);
	pthread_rwlock_unlock(&c->gate);
}

int
txn_commit(Cache *c, MDB_txn *txn)
{
	int rc = mdb_txn_commit(txn);
	pthread_rwlock_unlock(&c->gate);
	return rc;
}

/* Sets LMDB's map to `want` bytes (LMDB raises it to the pages the file
 * already holds) and notes what it became. The gate is held exclusively. */
static int
set_map_locked(Cache *c, size_t want)
{
	MDB_envinfo info;
	int rc = mdb_env_set_mapsize(c->env, want);
	if (rc == MDB_SUCCESS && mdb_env_info(c->env, &info) == MDB_SUCCESS)
		c->map_bytes = info.me_mapsize;
	return rc;
}

/* fn once more with the map at map_limit, with the gate held exclusively
 * so that no other transaction can take the reserve; the map is set back
 * to soft_bytes before the gate is released. Only deletes come here: a
 * delete copies the pages it changes, so on a map filled to the brim
 * even an eviction needs a few pages more. */
static int
reserve_txn(Cache *c, WriteFn fn, void *arg)
{
	MDB_txn *txn = NULL;
	pthread_rwlock_wrlock(&c->gate);
	size_t before = c->map_bytes;
	int rc = set_map_locked(c, c->map_limit);
	if (rc == MDB_SUCCESS && c->map_bytes > before)
		atomic_fetch_add(&c->map_growths, 1);
	if (rc == MDB_SUCCESS)
		rc = mdb_txn_begin(c->env, NULL, 0, &txn);
	if (rc == MDB_SUCCESS) {
		rc = fn(c, txn, arg);
		if (rc == MDB_SUCCESS)
			rc = mdb_txn_commit(txn);
		else
			mdb_txn_abort(txn);
	}
	int src = set_map_locked(c, c->soft_bytes);
	if (src != MDB_SUCCESS)
		kc_log(KC_LOG_WARN, "cache: cannot set the map of %s back to %zu bytes: %s",
		       c->path, c->soft_bytes, mdb_strerror(src));
	pthread_rwlock_unlock(&c->gate);
	return rc;
}

/* After MDB_MAP_FULL on a write of about `need` bytes: evicts down to the
 * low water mark, or, when the store is under it already (free pages
 * there but scattered: a large value needs contiguous ones), by twice
 * `need` and 64 pages (a write copies a leaf page per database it
 * touches). A write over a quarter of the map evicts nothing: emptying
 * the cache for one value that may not fit even then is not worth it. */
static void
make_room(Cache *c, size_t need)
{
	if (need > c->soft_bytes / 4)
		return;
	uint64_t used = used_bytes(c);
	uint64_t low = c->max_bytes / 100 * c->low_pct;
	uint64_t margin = 2 * (uint64_t)need + 64 * 4096;
	uint64_t target = used > low ? low : used > margin ? used - margin : 0;
	evict_run(c, target, NULL, NULL);
}

KcStatus
write_txn(Cache *c, WriteFn fn, void *arg, size_t need, unsigned flags, const char *what,
          KcErr *err)
{
	MDB_txn *txn = NULL;
	int rc;
	for (int attempt = 0;; attempt++) {
		rc = txn_begin(c, 0, &txn);
		if (rc != MDB_SUCCESS)
			break;
		rc = fn(c, txn, arg);
		if (rc == MDB_SUCCESS)
			rc = txn_commit(c, txn);
		else
			txn_abort(c, txn);
		txn = NULL;
		if (rc != MDB_MAP_FULL || attempt > 0)
			break;
		if (flags & WRITE_RESERVE) {
			rc = reserve_txn(c, fn, arg);
			break;
		}
		if (flags & WRITE_NO_EVICT)
			break;
		make_room(c, need);
	}
	if (rc == MDB_NOTFOUND)
		return KC_NOT_FOUND;
	if (rc == MDB_MAP_FULL && !(flags & WRITE_NO_EVICT))
		atomic_fetch_add(&c->full_refusals, 1);
	if (rc != MDB_SUCCESS)
		return lmdb_fail(c, err, rc, what);
	if (flags & WRITE_SYNC)
		return cache_sync(c, err);
	return KC_OK;
}

KcStatus
cache_sync(Cache *c, KcErr *err)
{
	pthread_rwlock_rdlock(&c->gate);
	int rc = mdb_env_sync(c->env, 1);
	pthread_rwlock_unlock(&c->gate);
	if (rc != MDB_SUCCESS)
		return kc_fail(err, KC_CACHE, "cache", "cannot sync %s to disk: %s", c->path,
		               mdb_strerror(rc));
	return KC_OK;
}

int
put_framed(MDB_txn *txn, MDB_dbi dbi, const void *key, size_t klen, const void *p, size_t n)
{
	MDB_val k = {klen, (void *)key};
	MDB_val v = {FRAME_HDR + n, NULL};
	int rc = mdb_put(txn, dbi, &k, &v, MDB_RESERVE);
	if (rc == MDB_SUCCESS)
		frame_write(v.mv_data, p, n);
	return rc;
}

/* Reads and verifies one value, appending its payload to *out; the
 * verified SHA-256 of the payload goes to *digest (may be NULL). */
static KcStatus
get_framed_digest(Cache *c, MDB_dbi dbi, const char *db, const void *key, size_t klen, KcBuf *out,
                  KcDigest *digest, KcErr *err)
{
	MDB_txn *txn = NULL;
	KcStatus st = KC_OK;
	MDB_val k = {klen, (void *)key}, v;
	int rc = txn_begin(c, MDB_RDONLY, &txn);
	if (rc != MDB_SUCCESS) {
		st = lmdb_fail(c, err, rc, "starting a read");
		goto done;
	}
	rc = mdb_get(txn, dbi, &k, &v);
	if (rc == MDB_NOTFOUND) {
		st = KC_NOT_FOUND;
		goto done;
	}
	if (rc != MDB_SUCCESS) {
		st = lmdb_fail(c, err, rc, "reading");
		goto done;
	}
	if (!frame_ok(&v)) {
		refuse(c, db, &k);
		st = KC_NOT_FOUND;
		goto done;
	}
	kc_buf_append(out, (const char *)v.mv_data + FRAME_HDR, v.mv_size - FRAME_HDR);
	if (digest)
		memcpy(digest->b, (const unsigned char *)v.mv_data + 8, 32);
done:
	txn_abort(c, txn);
	return st;
}

static KcStatus
get_framed(Cache *c, MDB_dbi dbi, const char *db, const void *key, size_t klen, KcBuf *out,
           KcErr *err)
{
	return get_framed_digest(c, dbi, db, key, klen, out, NULL, err);
}

/* One framed value for put_one. */
typedef struct PutOne {
	MDB_dbi dbi;
	const void *key;
	size_t klen;
	const void *p;
	size_t n;
} PutOne;

static int
put_one_fn(Cache *c, MDB_txn *txn, void *arg)
{
	(void)c;
	const PutOne *o = arg;
	return put_framed(txn, o->dbi, o->key, o->klen, o->p, o->n);
}

/* Stores one value in its own write transaction. */
static KcStatus
put_one(Cache *c, MDB_dbi dbi, const void *key, size_t klen, const void *p, size_t n,
        unsigned flags, KcErr *err)
{
	PutOne o = {dbi, key, klen, p, n};
	return write_txn(c, put_one_fn, &o, klen + FRAME_HDR + n, flags, "writing", err);
}

static KcStatus
check_size(const Cache *c, const char *what, size_t n, KcErr *err)
{
	if (n > c->max_object_bytes)
		return kc_fail(err, KC_TOO_LARGE, "cache",
		               "%s is %zu bytes; the cache accepts at most %zu per value", what, n,
		               c->max_object_bytes);
	return KC_OK;
}

/* workload_key(32) + sha256(target)(32): target names can outgrow the
 * 511-byte LMDB key limit. */
static void
target_key(const KcDigest *wk, const char *target, unsigned char key[64])
{
	KcDigest t;
	KC_ASSERT(target != NULL);
	kc_sha256(target, strlen(target), &t);
	memcpy(key, wk->b, 32);
	memcpy(key + 32, t.b, 32);
}

static void
part_key(const KcDigest *kernel_id, CachePart part, unsigned char key[33])
{
	memcpy(key, kernel_id->b, 32);
	key[32] = (unsigned char)part;
}

uint64_t
used_bytes(Cache *c)
{
	MDB_txn *txn = NULL;
	MDB_stat st;
	uint64_t pages = 0, psize = 4096;
	const MDB_dbi dbis[] = {c->meta,      c->workloads, c->schedules, c->kindex,
	                        c->artifacts, c->kref,      c->atime};
	if (txn_begin(c, MDB_RDONLY, &txn) != MDB_SUCCESS)
		return 0;
	if (mdb_stat(txn, 1 /* the main database */, &st) == MDB_SUCCESS) {
		psize = st.ms_psize;
		pages += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
	}
	for (size_t i = 0; i < sizeof dbis / sizeof dbis[0]; i++)
		if (mdb_stat(txn, dbis[i], &st) == MDB_SUCCESS)
			pages += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
	txn_abort(c, txn);
	return pages * psize;
}

bool
has_prefix(MDB_txn *txn, MDB_dbi dbi, const unsigned char prefix[32])
{
	MDB_cursor *cur = NULL;
	MDB_val k = {32, (void *)prefix}, v;
	bool found = true; /* when the answer is unknown, keep what depends on it */
	if (mdb_cursor_open(txn, dbi, &cur) != MDB_SUCCESS)
		return found;
	int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	if (rc == MDB_SUCCESS)
		found = k.mv_size >= 32 && memcmp(k.mv_data, prefix, 32) == 0;
	else if (rc == MDB_NOTFOUND)
		found = false;
	mdb_cursor_close(cur);
	return found;
}

/* ---- open and close ----------------------------------------------------- */

/* Opens the named databases and checks or writes the store format. */
static int
open_dbs(Cache *c, KcErr *err)
{
	MDB_txn *txn = NULL;
	MDB_val k = {6, "format"}, v;
	char fmt[16];
	int rc = mdb_txn_begin(c->env, NULL, 0, &txn);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &c->meta);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, "workloads", MDB_CREATE, &c->workloads);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, "schedules", MDB_CREATE, &c->schedules);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, "kindex", MDB_CREATE, &c->kindex);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, "artifacts", MDB_CREATE, &c->artifacts);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, "kref", MDB_CREATE, &c->kref);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, "atime", MDB_CREATE, &c->atime);
	if (rc != MDB_SUCCESS) {
		kc_fail(err, KC_CACHE, "cache", "cannot open databases in %s: %s", c->path,
		        mdb_strerror(rc));
		goto done;
	}
	snprintf(fmt, sizeof fmt, "%u", FORMAT_VERSION);
	rc = mdb_get(txn, c->meta, &k, &v);
	if (rc == MDB_SUCCESS && frame_ok(&v)) {
		size_t n = v.mv_size - FRAME_HDR;
		const char *p = (const char *)v.mv_data + FRAME_HDR;
		if (n != strlen(fmt) || memcmp(p, fmt, n) != 0) {
			kc_fail(err, KC_CACHE, "cache",
			        "%s has store format '%.*s'; this kcsd reads format %s", c->path,
			        (int)(n < 16 ? n : 16), p, fmt);
			rc = MDB_INCOMPATIBLE;
			goto done;
		}
	} else if (rc == MDB_SUCCESS || rc == MDB_NOTFOUND) {
		char when[32];
		if (rc == MDB_SUCCESS)
			refuse(c, "meta", &k);
		kc_iso8601(kc_wall_s(), when);
		rc = put_framed(txn, c->meta, "format", 6, fmt, strlen(fmt));
		if (rc == MDB_SUCCESS)
			rc = put_framed(txn, c->meta, "created", 7, when, strlen(when));
	}
	if (rc != MDB_SUCCESS) {
		kc_fail(err, KC_CACHE, "cache", "cannot initialise %s: %s", c->path,
		        mdb_strerror(rc));
		goto done;
	}
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc != MDB_SUCCESS)
		kc_fail(err, KC_CACHE, "cache", "cannot initialise %s: %s", c->path,
		        mdb_strerror(rc));
done:
	if (txn)
		mdb_txn_abort(txn);
	return rc;
}

/* The part of a map kept for deletes (reserve_txn): 1/32 of it, between
 * 256 KiB (64 pages: a few kernels' deletes) and 64 MiB, at most a
 * quarter, in whole 4 KiB pages. */
static size_t
reserve_of(size_t limit)
{
	size_t r = limit / 32;
	if (r < (size_t)256 << 10)
		r = (size_t)256 << 10;
	if (r > (size_t)64 << 20)
		r = (size_t)64 << 20;
	if (r > limit / 4)
		r = limit / 4;
	return r / 4096 * 4096;
}

/* Creates and opens the environment; returns an LMDB code (err filled). */
static int
open_env(Cache *c, unsigned flags, KcErr *err)
{
	int dead = 0;
	int rc = mdb_env_create(&c->env);
	if (rc != MDB_SUCCESS) {
		c->env = NULL;
		kc_fail(err, KC_CACHE, "cache", "cannot create LMDB environment for %s: %s",
		        c->path, mdb_strerror(rc));
		return rc;
	}
	rc = mdb_env_set_mapsize(c->env, c->soft_bytes);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_set_maxdbs(c->env, MAX_DBS);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_set_maxreaders(c->env, MAX_READERS);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_open(c->env, c->dir, flags, 0600);
	if (rc != MDB_SUCCESS) {
		kc_fail(err, KC_CACHE, "cache", "cannot open LMDB environment %s: %s", c->path,
		        mdb_strerror(rc));
		goto fail;
	}
	/* A stale lock.mdb from a killed process: LMDB reinitialises it when
	 * it is the only user; reader slots of dead processes are cleared
	 * here (and again whenever the reader table fills up). */
	rc = mdb_reader_check(c->env, &dead);
	if (rc == MDB_SUCCESS && dead > 0)
		kc_log(KC_LOG_INFO, "cache: cleared %d stale reader slot(s) in %s", dead, c->path);
	rc = open_dbs(c, err);
	if (rc != MDB_SUCCESS)
		goto fail;
	/* LMDB takes our map size, raised to the pages the file holds: a file
	 * an older kcsd grew past cache_map_bytes cannot shrink in place */
	MDB_envinfo info;
	c->map_bytes = c->soft_bytes;
	if (mdb_env_info(c->env, &info) == MDB_SUCCESS)
		c->map_bytes = info.me_mapsize;
	if (c->map_bytes > c->map_limit)
		kc_log(KC_LOG_WARN,
		       "cache: %s holds %zu bytes of pages, over cache_map_bytes (%zu); it is used "
		       "as it is and does not grow (restore a compacted backup to shrink it)",
		       c->path, c->map_bytes, c->map_limit);
	return MDB_SUCCESS;
fail:
	mdb_env_close(c->env);
	c->env = NULL;
	return rc;
}

Cache *
cache_open(const char *dir, const CacheOptions *opt, KcErr *err)
{
	Cache *c = kc_xcalloc(1, sizeof *c);
	bool ok = false;
	unsigned flags = MDB_NOTLS;
	pthread_rwlockattr_t ga;

	KC_ASSERT(dir != NULL);
	atomic_init(&c->checksum_failures, 0);
	atomic_init(&c->evictions, 0);
	atomic_init(&c->evicted_bytes, 0);
	atomic_init(&c->evicted_workloads, 0);
	atomic_init(&c->map_growths, 0);
	atomic_init(&c->full_refusals, 0);
	atomic_init(&c->stop, false);
	/* Writer preference: a delete waiting for the reserve is not starved
	 * by a stream of readers (no thread ever takes the gate twice). */
	pthread_rwlockattr_init(&ga);
	pthread_rwlockattr_setkind_np(&ga, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&c->gate, &ga);
	pthread_rwlockattr_destroy(&ga);
	pthread_mutex_init(&c->tmu, NULL);
	pthread_mutex_init(&c->evict_mu, NULL);
	pthread_mutex_init(&c->cmu, NULL);
	pthread_cond_init(&c->ccv, NULL);
	c->touch = kc_xcalloc(TOUCH_SLOTS, sizeof *c->touch);
	c->map_limit = opt && opt->map_bytes ? opt->map_bytes : DEFAULT_MAP_BYTES;
	c->soft_bytes = c->map_limit - reserve_of(c->map_limit);
	c->map_bytes = c->soft_bytes;
	c->max_object_bytes =
	    opt && opt->max_object_bytes ? opt->max_object_bytes : DEFAULT_MAX_OBJECT;
	c->max_bytes = opt && opt->max_bytes ? opt->max_bytes : DEFAULT_MAX_BYTES;
	if (!(opt && opt->max_bytes) && c->max_bytes > c->map_limit / 2)
		c->max_bytes = c->map_limit / 2;
	c->high_pct = opt && opt->high_water_pct ? opt->high_water_pct : 90;
	c->low_pct = opt && opt->low_water_pct ? opt->low_water_pct : 75;
	c->flush_ms = opt && opt->touch_flush_ms ? opt->touch_flush_ms : 2000;
	/* MDB_NOMETASYNC (default on) keeps A, C and I: data pages are still
	 * synced at every commit and only the meta page write is left to the
	 * OS, so an OS crash or power loss can undo at most the last committed
	 * transaction, and kill -9 never loses one. Schedule writes and
	 * imports call mdb_env_sync before they return (docs/durability.md). */
	if (!opt || opt->no_meta_sync)
		flags |= MDB_NOMETASYNC;
	snprintf(c->dir, sizeof c->dir, "%s", dir);
	snprintf(c->path, sizeof c->path, "%s/data.mdb", dir);

	if (c->max_bytes >= c->map_limit || c->low_pct >= c->high_pct || c->high_pct > 100) {
		kc_fail(err, KC_CACHE, "cache",
		        "cache_max_bytes (%llu) must be below cache_map_bytes (%zu), and the low "
		        "water mark (%u%%) below the high one (%u%%, at most 100)",
		        (unsigned long long)c->max_bytes, c->map_limit, c->low_pct, c->high_pct);
		goto done;
	}
	/* the reserve is not for data: a ceiling above the rest of the map
	 * would only be met by MDB_MAP_FULL */
	if (c->max_bytes > c->soft_bytes)
		c->max_bytes = c->soft_bytes;
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		kc_fail(err, KC_CACHE, "cache", "cannot create cache directory %s: %s", dir,
		        strerror(errno));
		goto done;
	}
	if (!(opt && opt->no_start_check) && check_at_start(c->dir, c->path, err) != KC_OK)
		goto done;
	int rc = open_env(c, flags, err);
	if (rc != MDB_SUCCESS && damage_code(rc) && move_aside(c->dir, c->path, mdb_strerror(rc))) {
		if (err)
			memset(err, 0, sizeof *err);
		rc = open_env(c, flags, err);
	}
	if (rc != MDB_SUCCESS)
		goto done;
	if (!(opt && opt->no_collector))
		collector_start(c);
	ok = true;
done:
	if (!ok) {
		if (c->env)
			mdb_env_close(c->env);
		pthread_rwlock_destroy(&c->gate);
		pthread_mutex_destroy(&c->tmu);
		pthread_mutex_destroy(&c->evict_mu);
		pthread_mutex_destroy(&c->cmu);
		pthread_cond_destroy(&c->ccv);
		free(c->touch);
		free(c);
		c = NULL;
	}
	return c;
}

void
cache_close(Cache *c)
{
	if (!c)
		return;
	collector_stop(c);
	KcErr err = {0};
	if (cache_flush_touches(c, &err) != KC_OK)
		kc_log(KC_LOG_WARN, "cache: access stamps not written at close: %s", err.msg);
	mdb_env_close(c->env);
	pthread_rwlock_destroy(&c->gate);
	pthread_mutex_destroy(&c->tmu);
	pthread_mutex_destroy(&c->evict_mu);
	pthread_mutex_destroy(&c->cmu);
	pthread_cond_destroy(&c->ccv);
	free(c->touch);
	free(c);
}

/* ---- kernels and parts -------------------------------------------------- */

static int
put_kernel_fn(Cache *c, MDB_txn *txn, void *arg)
{
	const CacheKernelPut *k = arg;
	unsigned char tkey[64], pkey[33];
	MDB_val wk = {32, (void *)k->workload_key.b}, v;
	const struct {
		CachePart tag;
		const void *p;
		size_t n;
	} parts[] = {
	    {CACHE_PART_META, k->meta, k->meta_len},
	    {CACHE_PART_OBJECT, k->object, k->object_len},
	    {CACHE_PART_IR, k->ir, k->ir_len},
	};
	target_key(&k->workload_key, k->target, tkey);
	/* The workload only if absent (or refused by its checksum). */
	int rc = mdb_get(txn, c->workloads, &wk, &v);
	if (rc == MDB_SUCCESS && !frame_ok(&v)) {
		refuse(c, "workloads", &wk);
		rc = MDB_NOTFOUND;
	}
	if (rc == MDB_NOTFOUND)
		rc = put_framed(txn, c->workloads, k->workload_key.b, 32, k->canonical,
		                k->canonical_len);
	if (rc == MDB_SUCCESS)
		rc = put_framed(txn, c->kindex, tkey, sizeof tkey, k->kernel_id.b, 32);
	if (rc == MDB_SUCCESS)
		rc = put_framed(txn, c->kref, k->kernel_id.b, 32, tkey, sizeof tkey);
	if (rc == MDB_SUCCESS)
		rc = stamp_put(c, txn, &k->kernel_id, wall_us());
	for (size_t i = 0; rc == MDB_SUCCESS && i < sizeof parts / sizeof parts[0]; i++) {
		if (!parts[i].p)
			continue; /* ir may be NULL */
		part_key(&k->kernel_id, parts[i].tag, pkey);
		rc = put_framed(txn, c->artifacts, pkey, sizeof pkey, parts[i].p, parts[i].n);
	}
	return rc;
}

KcStatus
cache_put_kernel(Cache *c, const CacheKernelPut *k, KcErr *err)
{
	KC_ASSERT(c != NULL && k->canonical != NULL && k->target != NULL);
	if (check_size(c, "workload", k->canonical_len, err) != KC_OK ||
	    check_size(c, "kernel metadata", k->meta_len, err) != KC_OK ||
	    check_size(c, "kernel object", k->object_len, err) != KC_OK ||
	    check_size(c, "kernel IR", k->ir_len, err) != KC_OK)
		return KC_TOO_LARGE;
	size_t need =
	    k->canonical_len + k->meta_len + k->object_len + k->ir_len + 8 * FRAME_HDR + 512;
	KcStatus st = write_txn(c, put_kernel_fn, (void *)k, need, 0, "storing a kernel", err);
	if (st == KC_OK && c->have_thread && used_bytes(c) > c->max_bytes / 100 * c->high_pct) {
		pthread_mutex_lock(&c->cmu);
		c->wake = true;
		pthread_cond_signal(&c->ccv);
		pthread_mutex_unlock(&c->cmu);
	}
	return st;
}

KcStatus
cache_get_part(Cache *c, const KcDigest *kernel_id, CachePart part, KcBuf *out, KcErr *err)
{
	return cache_get_part_digest(c, kernel_id, part, out, NULL, err);
}

KcStatus
cache_get_part_digest(Cache *c, const KcDigest *kernel_id, CachePart part, KcBuf *out,
                      KcDigest *digest, KcErr *err)
{
	unsigned char key[33];
	part_key(kernel_id, part, key);
	KcStatus st =
	    get_framed_digest(c, c->artifacts, "artifacts", key, sizeof key, out, digest, err);
	if (st == KC_OK)
		touch(c, kernel_id);
	return st;
}

/* True when v has a frame header of this format (its payload unchecked). */
static bool
frame_header_ok(const MDB_val *v)
{
	const unsigned char *b = v->mv_data;
	if (v->mv_size < FRAME_HDR || memcmp(b, frame_magic, 4) != 0)
		return false;
	uint32_t ver =
	    (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
	return ver == FORMAT_VERSION;
}

KcStatus
cache_peek_digests(Cache *c, const KcDigest *kernel_id, const CachePart *parts, int n,
                   KcDigest *out, KcErr *err)
{
	MDB_txn *txn = NULL;
	KcStatus st = KC_OK;
	int rc = txn_begin(c, MDB_RDONLY, &txn);
	if (rc != MDB_SUCCESS)
		return lmdb_fail(c, err, rc, "starting a read");
	for (int i = 0; i < n && st == KC_OK; i++) {
		unsigned char key[33];
		part_key(kernel_id, parts[i], key);
		MDB_val k = {sizeof key, key}, v;
		rc = mdb_get(txn, c->artifacts, &k, &v);
		if (rc == MDB_NOTFOUND || (rc == MDB_SUCCESS && !frame_header_ok(&v)))
			st = KC_NOT_FOUND;
		else if (rc != MDB_SUCCESS)
			st = lmdb_fail(c, err, rc, "reading");
		else
			memcpy(out[i].b, (const unsigned char *)v.mv_data + 8, 32);
	}
	txn_abort(c, txn);
	if (st == KC_OK)
		touch(c, kernel_id);
	return st;
}

KcStatus
cache_put_part(Cache *c, const KcDigest *kernel_id, CachePart part, const void *data, size_t len,
               KcErr *err)
{
	unsigned char key[33];
	KC_ASSERT(data != NULL || len == 0);
	if (check_size(c, "kernel part", len, err) != KC_OK)
		return KC_TOO_LARGE;
	part_key(kernel_id, part, key);
	return put_one(c, c->artifacts, key, sizeof key, data ? data : "", len, 0, err);
}

/* ---- workloads, index, schedules ---------------------------------------- */

KcStatus
cache_get_workload(Cache *c, const KcDigest *workload_key, KcBuf *out, KcErr *err)
{
	return get_framed(c, c->workloads, "workloads", workload_key->b, 32, out, err);
}

KcStatus
cache_put_workload(Cache *c, const KcDigest *workload_key, const char *canonical, size_t len,
                   KcErr *err)
{
	KC_ASSERT(canonical != NULL);
	if (check_size(c, "workload", len, err) != KC_OK)
		return KC_TOO_LARGE;
	return put_one(c, c->workloads, workload_key->b, 32, canonical, len, 0, err);
}

KcStatus
cache_get_index(Cache *c, const KcDigest *workload_key, const char *target, KcDigest *kernel_id,
                KcErr *err)
{
	unsigned char key[64];
	KcBuf b = {0};
	KcStatus st;
	target_key(workload_key, target, key);
	st = get_framed(c, c->kindex, "kindex", key, sizeof key, &b, err);
	if (st == KC_OK && b.len != 32) {
		MDB_val k = {sizeof key, key};
		refuse(c, "kindex", &k); /* framed fine but not a digest */
		st = KC_NOT_FOUND;
	}
	if (st == KC_OK)
		memcpy(kernel_id->b, b.data, 32);
	kc_buf_free(&b);
	return st;
}

/* Arguments of put_schedule_fn. */
typedef struct PutSched {
	const KcDigest *wk;
	const unsigned char *key; /* 64 */
	const char *record;
	size_t len;
} PutSched;

/* The record only next to its workload, looked up in the same
 * transaction: eviction may have removed the workload since the caller
 * saw it, and a schedule must never point at a missing workload. */
static int
put_schedule_fn(Cache *c, MDB_txn *txn, void *arg)
{
	const PutSched *p = arg;
	MDB_val wk = {32, (void *)p->wk->b}, v;
	int rc = mdb_get(txn, c->workloads, &wk, &v);
	if (rc == MDB_SUCCESS && !frame_ok(&v)) {
		refuse(c, "workloads", &wk);
		rc = MDB_NOTFOUND;
	}
	if (rc != MDB_SUCCESS)
		return rc;
	return put_framed(txn, c->schedules, p->key, 64, p->record, p->len);
}

KcStatus
cache_put_schedule(Cache *c, const KcDigest *workload_key, const char *target, const char *record,
                   size_t len, KcErr *err)
{
	unsigned char key[64];
	KC_ASSERT(record != NULL);
	if (check_size(c, "schedule record", len, err) != KC_OK)
		return KC_TOO_LARGE;
	target_key(workload_key, target, key);
	PutSched p = {workload_key, key, record, len};
	return write_txn(c, put_schedule_fn, &p, sizeof key + FRAME_HDR + len, WRITE_SYNC,
	                 "storing a schedule", err);
}

KcStatus
cache_get_schedule(Cache *c, const KcDigest *workload_key, const char *target, KcBuf *out,
                   KcErr *err)
{
	unsigned char key[64];
	target_key(workload_key, target, key);
	return get_framed(c, c->schedules, "schedules", key, sizeof key, out, err);
}

KcStatus
cache_list_schedules(Cache *c, const KcDigest *workload_key, KcBuf *out, KcErr *err)
{
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	KcBuf arr = {0};
	KcStatus st = KC_OK;
	MDB_val k = {32, (void *)workload_key->b}, v;
	int n = 0;
	int rc = txn_begin(c, MDB_RDONLY, &txn);
	if (rc == MDB_SUCCESS)
		rc = mdb_cursor_open(txn, c->schedules, &cur);
	if (rc != MDB_SUCCESS) {
		st = lmdb_fail(c, err, rc, "listing schedules");
		goto done;
	}
	kc_buf_putc(&arr, '[');
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == MDB_SUCCESS;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != 64 || memcmp(k.mv_data, workload_key->b, 32) != 0)
			break;
		if (!frame_ok(&v)) {
			refuse(c, "schedules", &k);
			continue;
		}
		if (n++)
			kc_buf_putc(&arr, ',');
		kc_buf_append(&arr, (const char *)v.mv_data + FRAME_HDR, v.mv_size - FRAME_HDR);
	}
	if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) {
		st = lmdb_fail(c, err, rc, "listing schedules");
		goto done;
	}
	kc_buf_putc(&arr, ']');
	kc_buf_append(out, arr.data, arr.len);
done:
	if (cur)
		mdb_cursor_close(cur);
	txn_abort(c, txn);
	kc_buf_free(&arr);
	return st;
}

/* Arguments of merge_fn. */
typedef struct Merge {
	CacheScheduleIn *items;
	size_t n;
	CacheBetterFn better;
	void *arg;
} Merge;

static int
merge_fn(Cache *c, MDB_txn *txn, void *arg)
{
	Merge *m = arg;
	int rc = MDB_SUCCESS;
	for (size_t i = 0; i < m->n; i++)
		m->items[i].stored = false;
	for (size_t i = 0; rc == MDB_SUCCESS && i < m->n; i++) {
		CacheScheduleIn *it = &m->items[i];
		unsigned char key[64];
		MDB_val k = {sizeof key, key}, v, wk = {32, it->workload_key.b};
		target_key(&it->workload_key, it->target, key);
		rc = mdb_get(txn, c->schedules, &k, &v);
		if (rc == MDB_SUCCESS && !frame_ok(&v)) {
			refuse(c, "schedules", &k);
			rc = MDB_NOTFOUND;
		}
		if (rc == MDB_SUCCESS) {
			if (!m->better((const char *)v.mv_data + FRAME_HDR, v.mv_size - FRAME_HDR,
			               it->record, it->record_len, m->arg))
				continue;
		} else if (rc != MDB_NOTFOUND) {
			break;
		}
		rc = put_framed(txn, c->schedules, key, sizeof key, it->record, it->record_len);
		if (rc != MDB_SUCCESS)
			break;
		it->stored = true;
		rc = mdb_get(txn, c->workloads, &wk, &v);
		if (rc == MDB_SUCCESS && !frame_ok(&v))
			rc = MDB_NOTFOUND;
		if (rc == MDB_NOTFOUND && it->canonical)
			rc = put_framed(txn, c->workloads, it->workload_key.b, 32, it->canonical,
			                it->canonical_len);
		else if (rc == MDB_NOTFOUND)
			rc = MDB_SUCCESS;
	}
	return rc;
}

KcStatus
cache_merge_schedules(Cache *c, CacheScheduleIn *items, size_t n, CacheBetterFn better, void *arg,
                      KcErr *err)
{
	Merge m = {items, n, better, arg};
	size_t need = 0;
	for (size_t i = 0; i < n; i++) {
		if (check_size(c, "schedule record", items[i].record_len, err) != KC_OK ||
		    check_size(c, "workload", items[i].canonical_len, err) != KC_OK)
			return KC_TOO_LARGE;
		need += items[i].record_len + items[i].canonical_len + 2 * FRAME_HDR + 128;
	}
	if (n == 0)
		return KC_OK;
	KcStatus st = write_txn(c, merge_fn, &m, need, WRITE_SYNC, "merging schedules", err);
	if (st != KC_OK) {
		for (size_t i = 0; i < n; i++)
			items[i].stored = false;
		if (st == KC_NOT_FOUND) /* not expected from merge_fn */
			st = kc_fail(err, KC_CACHE, "cache", "merging schedules failed");
	}
	return st;
}

KcStatus
cache_scan_schedules(Cache *c, CacheScanPos *pos, size_t max_records, CacheScheduleFn fn, void *arg,
                     KcErr *err)
{
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	KcStatus st = KC_OK;
	MDB_val k = {sizeof pos->last, pos->last}, v;
	size_t given = 0;
	int rc;
	if (pos->done)
		return KC_OK;
	rc = txn_begin(c, MDB_RDONLY, &txn);
	if (rc == MDB_SUCCESS)
		rc = mdb_cursor_open(txn, c->schedules, &cur);
	if (rc != MDB_SUCCESS) {
		st = lmdb_fail(c, err, rc, "exporting schedules");
		goto done;
	}
	rc = pos->started ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE)
	                  : mdb_cursor_get(cur, &k, &v, MDB_FIRST);
	if (rc == MDB_SUCCESS && pos->started && k.mv_size == sizeof pos->last &&
	    memcmp(k.mv_data, pos->last, sizeof pos->last) == 0)
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	for (; rc == MDB_SUCCESS && given < max_records;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != sizeof pos->last)
			continue;
		memcpy(pos->last, k.mv_data, sizeof pos->last);
		pos->started = true;
		if (!frame_ok(&v)) {
			refuse(c, "schedules", &k);
			continue;
		}
		KcDigest wk;
		MDB_val wkey = {32, pos->last}, w;
		memcpy(wk.b, pos->last, 32);
		int wrc = mdb_get(txn, c->workloads, &wkey, &w);
		bool have = wrc == MDB_SUCCESS && frame_ok(&w);
		if (wrc == MDB_SUCCESS && !have)
			refuse(c, "workloads", &wkey);
		fn(arg, &wk, have ? (const char *)w.mv_data + FRAME_HDR : NULL,
		   have ? w.mv_size - FRAME_HDR : 0, (const char *)v.mv_data + FRAME_HDR,
		   v.mv_size - FRAME_HDR);
		given++;
	}
	if (rc == MDB_NOTFOUND)
		pos->done = true;
	else if (rc != MDB_SUCCESS)
		st = lmdb_fail(c, err, rc, "exporting schedules");
done:
	if (cur)
		mdb_cursor_close(cur);
	txn_abort(c, txn);
	return st;
}

/* ---- backup and statistics ----------------------------------------------- */

KcStatus
cache_backup(Cache *c, char *path, size_t cap, uint64_t *bytes, KcErr *err)
{
	char base[4200], dst[4300], when[32], file[4400];
	struct stat sb;
	int rc;
	int64_t now = kc_wall_s();
	struct tm tm;
	time_t t = (time_t)now;
	gmtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &tm);
	snprintf(base, sizeof base, "%s/backups", c->dir);
	if (mkdir(base, 0700) != 0 && errno != EEXIST)
		return kc_fail(err, KC_CACHE, "backup", "cannot create %s: %s", base,
		               strerror(errno));
	snprintf(dst, sizeof dst, "%s/%s", base, when);
	for (int i = 1; mkdir(dst, 0700) != 0; i++) {
		if (errno != EEXIST || i > 999)
			return kc_fail(err, KC_CACHE, "backup", "cannot create %s: %s", dst,
			               strerror(errno));
		snprintf(dst, sizeof dst, "%s/%s-%d", base, when, i);
	}
	/* mdb_env_copy2 runs its own read transaction: hold the gate. */
	pthread_rwlock_rdlock(&c->gate);
	rc = mdb_env_copy2(c->env, dst, MDB_CP_COMPACT);
	pthread_rwlock_unlock(&c->gate);
	if (rc != MDB_SUCCESS)
		return kc_fail(err, KC_CACHE, "backup", "cannot copy %s to %s: %s", c->path, dst,
		               mdb_strerror(rc));
	snprintf(file, sizeof file, "%s/data.mdb", dst);
	chmod(file, 0600); /* schedules are the team's work: as private as the store */
	*bytes = stat(file, &sb) == 0 ? (uint64_t)sb.st_size : 0;
	snprintf(path, cap, "%s", dst);
	kc_log(KC_LOG_INFO, "cache: backup of %s written to %s (%llu bytes)", c->path, dst,
	       (unsigned long long)*bytes);
	return KC_OK;
}

void
cache_stats(Cache *c, CacheStats *out)
{
	MDB_envinfo info;
	MDB_stat est, ast;
	MDB_txn *txn = NULL;
	memset(out, 0, sizeof *out);
	out->checksum_failures = atomic_load(&c->checksum_failures);
	out->evictions = atomic_load(&c->evictions);
	out->evicted_bytes = atomic_load(&c->evicted_bytes);
	out->evicted_workloads = atomic_load(&c->evicted_workloads);
	out->map_growths = atomic_load(&c->map_growths);
	out->full_refusals = atomic_load(&c->full_refusals);
	out->map_bytes = c->map_limit;
	out->max_bytes = c->max_bytes;
	out->bytes_used = used_bytes(c);
	if (txn_begin(c, MDB_RDONLY, &txn) != MDB_SUCCESS)
		return;
	if (mdb_env_info(c->env, &info) == MDB_SUCCESS && mdb_env_stat(c->env, &est) == MDB_SUCCESS)
		out->file_bytes = ((uint64_t)info.me_last_pgno + 1) * est.ms_psize;
	if (mdb_stat(txn, c->artifacts, &ast) == MDB_SUCCESS)
		out->entries_artifacts = ast.ms_entries;
	if (mdb_stat(txn, c->atime, &ast) == MDB_SUCCESS)
		out->entries = ast.ms_entries;
	if (mdb_stat(txn, c->workloads, &ast) == MDB_SUCCESS)
		out->workloads = ast.ms_entries;
	if (mdb_stat(txn, c->schedules, &ast) == MDB_SUCCESS)
		out->schedules = ast.ms_entries;
	txn_abort(c, txn);
}
