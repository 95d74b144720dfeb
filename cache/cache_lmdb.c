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
 * compile workers can share one Cache. LMDB serialises the writers.
 * LMDB return codes are turned into KcErr here and nowhere else.
 */
#include "cache.h"

#include <errno.h>
#include <lmdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FORMAT_VERSION 1u
#define FRAME_HDR 40 /* magic(4) + version(4) + sha256(32) */
#define DEFAULT_MAP_BYTES ((size_t)64 << 30)
#define DEFAULT_MAX_OBJECT ((size_t)64 << 20)
#define MAX_DBS 8
#define MAX_READERS 512
#define KEY_MAX 65 /* the longest key we build: 32 + 32, or 32 + 1 */

static const unsigned char frame_magic[4] = {'K', 'C', 'S', '1'};

struct Cache {
	MDB_env *env;
	MDB_dbi meta, workloads, schedules, kindex, artifacts;
	size_t map_bytes;
	size_t max_object_bytes;
	char path[4096]; /* data.mdb, for messages */
	atomic_uint_fast64_t checksum_failures;
};

/* ---- framing ---------------------------------------------------------- */

static void
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
static bool
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
static void
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

static KcStatus
lmdb_fail(Cache *c, KcErr *err, int rc, const char *what)
{
	/* Growing the map or evicting on MDB_MAP_FULL comes in a later issue;
	 * until then a full map is an error the operator fixes by raising
	 * cache_map_bytes (the map is sparse, so a large value costs nothing). */
	if (rc == MDB_MAP_FULL)
		return kc_fail(
		    err, KC_CACHE, "cache",
		    "kernel cache is full (map of %zu bytes) while %s; raise cache_map_bytes",
		    c->map_bytes, what);
	return kc_fail(err, KC_CACHE, "cache", "kernel cache failed while %s: %s", what,
	               mdb_strerror(rc));
}

/* mdb_txn_begin, clearing stale reader slots once if the table is full.
 * MDB_MAP_RESIZED cannot happen: only this process opens the environment
 * and it never changes the map size after open. */
static int
txn_begin(Cache *c, unsigned flags, MDB_txn **txn)
{
	int rc = mdb_txn_begin(c->env, NULL, flags, txn);
	if (rc == MDB_READERS_FULL) {
		int dead = 0;
		mdb_reader_check(c->env, &dead);
		if (dead > 0)
			rc = mdb_txn_begin(c->env, NULL, flags, txn);
	}
	return rc;
}

static int
put_framed(MDB_txn *txn, MDB_dbi dbi, const void *key, size_t klen, const void *p, size_t n)
{
	MDB_val k = {klen, (void *)key};
	MDB_val v = {FRAME_HDR + n, NULL};
	int rc = mdb_put(txn, dbi, &k, &v, MDB_RESERVE);
	if (rc == MDB_SUCCESS)
		frame_write(v.mv_data, p, n);
	return rc;
}

/* Reads and verifies one value, appending its payload to *out. */
static KcStatus
get_framed(Cache *c, MDB_dbi dbi, const char *db, const void *key, size_t klen, KcBuf *out,
           KcErr *err)
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
done:
	if (txn)
		mdb_txn_abort(txn);
	return st;
}

/* Stores one value in its own write transaction. */
static KcStatus
put_one(Cache *c, MDB_dbi dbi, const void *key, size_t klen, const void *p, size_t n, KcErr *err)
{
	MDB_txn *txn = NULL;
	KcStatus st = KC_OK;
	int rc = txn_begin(c, 0, &txn);
	if (rc != MDB_SUCCESS) {
		st = lmdb_fail(c, err, rc, "starting a write");
		goto done;
	}
	rc = put_framed(txn, dbi, key, klen, p, n);
	if (rc != MDB_SUCCESS) {
		st = lmdb_fail(c, err, rc, "writing");
		goto done;
	}
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc != MDB_SUCCESS)
		st = lmdb_fail(c, err, rc, "committing");
done:
	if (txn)
		mdb_txn_abort(txn);
	return st;
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

/* ---- open and close ----------------------------------------------------- */

/* Opens the named databases and checks or writes the store format. */
static KcStatus
open_dbs(Cache *c, KcErr *err)
{
	MDB_txn *txn = NULL;
	KcStatus st = KC_OK;
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
	if (rc != MDB_SUCCESS) {
		st = kc_fail(err, KC_CACHE, "cache", "cannot open databases in %s: %s", c->path,
		             mdb_strerror(rc));
		goto done;
	}
	snprintf(fmt, sizeof fmt, "%u", FORMAT_VERSION);
	rc = mdb_get(txn, c->meta, &k, &v);
	if (rc == MDB_SUCCESS && frame_ok(&v)) {
		size_t n = v.mv_size - FRAME_HDR;
		const char *p = (const char *)v.mv_data + FRAME_HDR;
		if (n != strlen(fmt) || memcmp(p, fmt, n) != 0) {
			st = kc_fail(err, KC_CACHE, "cache",
			             "%s has store format '%.*s'; this kcsd reads format %s",
			             c->path, (int)(n < 16 ? n : 16), p, fmt);
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
		st = kc_fail(err, KC_CACHE, "cache", "cannot initialise %s: %s", c->path,
		             mdb_strerror(rc));
		goto done;
	}
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc != MDB_SUCCESS)
		st = kc_fail(err, KC_CACHE, "cache", "cannot initialise %s: %s", c->path,
		             mdb_strerror(rc));
done:
	if (txn)
		mdb_txn_abort(txn);
	return st;
}

Cache *
cache_open(const char *dir, const CacheOptions *opt, KcErr *err)
{
	Cache *c = kc_xcalloc(1, sizeof *c);
	bool ok = false;
	unsigned flags = MDB_NOTLS;
	int rc, dead = 0;

	KC_ASSERT(dir != NULL);
	atomic_init(&c->checksum_failures, 0);
	c->map_bytes = opt && opt->map_bytes ? opt->map_bytes : DEFAULT_MAP_BYTES;
	c->max_object_bytes =
	    opt && opt->max_object_bytes ? opt->max_object_bytes : DEFAULT_MAX_OBJECT;
	/* MDB_NOMETASYNC (default on) keeps A, C and I: data pages are still
	 * synced at every commit and only the meta page write is left to the
	 * OS, so an OS crash or power loss can undo at most the last committed
	 * transaction, and kill -9 never loses one. For a cache of
	 * recomputable kernels that trade halves the fsyncs per write. */
	if (!opt || opt->no_meta_sync)
		flags |= MDB_NOMETASYNC;
	snprintf(c->path, sizeof c->path, "%s/data.mdb", dir);

	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		kc_fail(err, KC_CACHE, "cache", "cannot create cache directory %s: %s", dir,
		        strerror(errno));
		goto done;
	}
	rc = mdb_env_create(&c->env);
	if (rc != MDB_SUCCESS) {
		c->env = NULL;
		kc_fail(err, KC_CACHE, "cache", "cannot create LMDB environment for %s: %s",
		        c->path, mdb_strerror(rc));
		goto done;
	}
	rc = mdb_env_set_mapsize(c->env, c->map_bytes);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_set_maxdbs(c->env, MAX_DBS);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_set_maxreaders(c->env, MAX_READERS);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_open(c->env, dir, flags, 0600);
	if (rc != MDB_SUCCESS) {
		kc_fail(err, KC_CACHE, "cache", "cannot open LMDB environment %s: %s", c->path,
		        mdb_strerror(rc));
		goto done;
	}
	rc = mdb_reader_check(c->env, &dead);
	if (rc == MDB_SUCCESS && dead > 0)
		kc_log(KC_LOG_INFO, "cache: cleared %d stale reader slot(s) in %s", dead, c->path);
	if (open_dbs(c, err) != KC_OK)
		goto done;
	ok = true;
done:
	if (!ok) {
		if (c->env)
			mdb_env_close(c->env);
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
	mdb_env_close(c->env);
	free(c);
}

/* ---- kernels and parts -------------------------------------------------- */

KcStatus
cache_put_kernel(Cache *c, const CacheKernelPut *k, KcErr *err)
{
	MDB_txn *txn = NULL;
	KcStatus st = KC_OK;
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
	int rc;

	KC_ASSERT(c != NULL && k->canonical != NULL && k->target != NULL);
	if (check_size(c, "workload", k->canonical_len, err) != KC_OK ||
	    check_size(c, "kernel metadata", k->meta_len, err) != KC_OK ||
	    check_size(c, "kernel object", k->object_len, err) != KC_OK ||
	    check_size(c, "kernel IR", k->ir_len, err) != KC_OK)
		return KC_TOO_LARGE;
	target_key(&k->workload_key, k->target, tkey);

	rc = txn_begin(c, 0, &txn);
	if (rc != MDB_SUCCESS) {
		st = lmdb_fail(c, err, rc, "starting a write");
		goto done;
	}
	/* The workload only if absent (or refused by its checksum). */
	rc = mdb_get(txn, c->workloads, &wk, &v);
	if (rc == MDB_SUCCESS && !frame_ok(&v)) {
		refuse(c, "workloads", &wk);
		rc = MDB_NOTFOUND;
	}
	if (rc == MDB_NOTFOUND)
		rc = put_framed(txn, c->workloads, k->workload_key.b, 32, k->canonical,
		                k->canonical_len);
	if (rc == MDB_SUCCESS)
		rc = put_framed(txn, c->kindex, tkey, sizeof tkey, k->kernel_id.b, 32);
	for (size_t i = 0; rc == MDB_SUCCESS && i < sizeof parts / sizeof parts[0]; i++) {
		if (!parts[i].p)
			continue; /* ir may be NULL */
		part_key(&k->kernel_id, parts[i].tag, pkey);
		rc = put_framed(txn, c->artifacts, pkey, sizeof pkey, parts[i].p, parts[i].n);
	}
	if (rc != MDB_SUCCESS) {
		st = lmdb_fail(c, err, rc, "storing a kernel");
		goto done;
	}
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc != MDB_SUCCESS)
		st = lmdb_fail(c, err, rc, "committing a kernel");
done:
	if (txn)
		mdb_txn_abort(txn);
	return st;
}

KcStatus
cache_get_part(Cache *c, const KcDigest *kernel_id, CachePart part, KcBuf *out, KcErr *err)
{
	unsigned char key[33];
	part_key(kernel_id, part, key);
	return get_framed(c, c->artifacts, "artifacts", key, sizeof key, out, err);
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
	return put_one(c, c->artifacts, key, sizeof key, data ? data : "", len, err);
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
	return put_one(c, c->workloads, workload_key->b, 32, canonical, len, err);
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

KcStatus
cache_put_schedule(Cache *c, const KcDigest *workload_key, const char *target, const char *record,
                   size_t len, KcErr *err)
{
	unsigned char key[64];
	KC_ASSERT(record != NULL);
	if (check_size(c, "schedule record", len, err) != KC_OK)
		return KC_TOO_LARGE;
	target_key(workload_key, target, key);
	return put_one(c, c->schedules, key, sizeof key, record, len, err);
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
	if (txn)
		mdb_txn_abort(txn);
	kc_buf_free(&arr);
	return st;
}

/* ---- statistics ---------------------------------------------------------- */

void
cache_stats(Cache *c, CacheStats *out)
{
	MDB_envinfo info;
	MDB_stat est, ast;
	MDB_txn *txn = NULL;
	memset(out, 0, sizeof *out);
	out->checksum_failures = atomic_load(&c->checksum_failures);
	if (mdb_env_info(c->env, &info) != MDB_SUCCESS || mdb_env_stat(c->env, &est) != MDB_SUCCESS)
		return;
	out->map_bytes = info.me_mapsize;
	out->bytes_used = ((uint64_t)info.me_last_pgno + 1) * est.ms_psize;
	if (txn_begin(c, MDB_RDONLY, &txn) != MDB_SUCCESS)
		return;
	if (mdb_stat(txn, c->artifacts, &ast) == MDB_SUCCESS)
		out->entries_artifacts = ast.ms_entries;
	mdb_txn_abort(txn);
}
