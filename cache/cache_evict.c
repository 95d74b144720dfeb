/* cache_evict.c - access stamps, LRU eviction and the collector thread.
 *
 * The one idea: a hit must not cost a write. cache_get_part notes the
 * kernel_id and the time in a small in-memory table (touch); the collector
 * thread writes the table to the `atime` database in one transaction every
 * touch_flush_ms or after TOUCH_WAKE touches. Eviction scans the artifacts
 * in short read transactions (one per batch of kernels), sorts the kernels
 * by stamp (no stamp: oldest), and deletes the oldest in write
 * transactions of at most EVICT_BATCH kernels with a short pause between
 * them, until the pages in use are under the target. A kernel touched
 * since the scan is skipped. Workloads and schedules are never touched.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define EVICT_BATCH 64
#define SCAN_BATCH 4096

/* A kernel that may be evicted. */
typedef struct Cand {
	KcDigest id;
	uint64_t at_us;
	uint64_t bytes;
} Cand;

uint64_t
wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static size_t
slot_of(const KcDigest *id)
{
	size_t h;
	memcpy(&h, id->b, sizeof h);
	return h % TOUCH_SLOTS;
}

void
touch(Cache *c, const KcDigest *id)
{
	bool wake = false;
	uint64_t at = wall_us();
	pthread_mutex_lock(&c->tmu);
	for (size_t i = slot_of(id), n = 0; n < TOUCH_SLOTS; i = (i + 1) % TOUCH_SLOTS, n++) {
		TouchSlot *s = &c->touch[i];
		if (s->used && memcmp(s->id.b, id->b, 32) == 0) {
			s->at_us = at;
			break;
		}
		if (!s->used) {
			/* keep the table at most 3/4 full; past that, stamps are
			 * dropped until the next flush (LRU is best effort) */
			if (c->ntouch >= TOUCH_SLOTS / 4 * 3)
				break;
			s->used = true;
			s->id = *id;
			s->at_us = at;
			wake = ++c->ntouch == TOUCH_WAKE;
			break;
		}
	}
	pthread_mutex_unlock(&c->tmu);
	if (wake && c->have_thread) {
		pthread_mutex_lock(&c->cmu);
		c->wake = true;
		pthread_cond_signal(&c->ccv);
		pthread_mutex_unlock(&c->cmu);
	}
}

/* The pending stamp of id, 0 if none. */
static uint64_t
touched_at(Cache *c, const KcDigest *id)
{
	uint64_t at = 0;
	pthread_mutex_lock(&c->tmu);
	for (size_t i = slot_of(id), n = 0; n < TOUCH_SLOTS; i = (i + 1) % TOUCH_SLOTS, n++) {
		TouchSlot *s = &c->touch[i];
		if (!s->used)
			break;
		if (memcmp(s->id.b, id->b, 32) == 0) {
			at = s->at_us;
			break;
		}
	}
	pthread_mutex_unlock(&c->tmu);
	return at;
}

int
stamp_put(Cache *c, MDB_txn *txn, const KcDigest *id, uint64_t at_us)
{
	unsigned char le[8];
	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)(at_us >> (8 * i));
	return put_framed(txn, c->atime, id->b, 32, le, sizeof le);
}

/* The stored stamp of id: 0 when absent or refused. */
static uint64_t
stamp_get(Cache *c, MDB_txn *txn, const KcDigest *id)
{
	MDB_val k = {32, (void *)id->b}, v;
	uint64_t at = 0;
	if (mdb_get(txn, c->atime, &k, &v) != MDB_SUCCESS)
		return 0;
	if (!frame_ok(&v) || v.mv_size != FRAME_HDR + 8) {
		refuse(c, "atime", &k);
		return 0;
	}
	const unsigned char *p = (const unsigned char *)v.mv_data + FRAME_HDR;
	for (int i = 0; i < 8; i++)
		at |= (uint64_t)p[i] << (8 * i);
	return at;
}

/* A snapshot of the touch table for flush_fn. */
typedef struct Flush {
	TouchSlot *slots;
	size_t n;
} Flush;

static int
flush_fn(Cache *c, MDB_txn *txn, void *arg)
{
	Flush *f = arg;
	MDB_val k, v;
	int rc = MDB_SUCCESS;
	for (size_t i = 0; rc == MDB_SUCCESS && i < f->n; i++) {
		/* only kernels still stored: a stamp must not outlive an eviction */
		unsigned char pkey[33];
		memcpy(pkey, f->slots[i].id.b, 32);
		pkey[32] = 'm';
		k = (MDB_val){sizeof pkey, pkey};
		rc = mdb_get(txn, c->artifacts, &k, &v);
		if (rc == MDB_NOTFOUND) {
			rc = MDB_SUCCESS;
			continue;
		}
		if (rc == MDB_SUCCESS)
			rc = stamp_put(c, txn, &f->slots[i].id, f->slots[i].at_us);
	}
	return rc;
}

KcStatus
cache_flush_touches(Cache *c, KcErr *err)
{
	Flush f = {0};
	pthread_mutex_lock(&c->tmu);
	if (c->ntouch > 0) {
		f.slots = kc_xmalloc(c->ntouch * sizeof *f.slots);
		for (size_t i = 0; i < TOUCH_SLOTS; i++)
			if (c->touch[i].used)
				f.slots[f.n++] = c->touch[i];
		memset(c->touch, 0, TOUCH_SLOTS * sizeof *c->touch);
		c->ntouch = 0;
	}
	pthread_mutex_unlock(&c->tmu);
	if (f.n == 0)
		return KC_OK;
	KcStatus st = write_txn(c, flush_fn, &f, WRITE_NO_EVICT, "writing access stamps", err);
	free(f.slots);
	return st;
}

/* Deletes one kernel inside txn; adds its stored bytes to *bytes. Returns
 * MDB_NOTFOUND if it has no part. */
static int
delete_in(Cache *c, MDB_txn *txn, const KcDigest *id, uint64_t *bytes)
{
	MDB_cursor *cur = NULL;
	unsigned char pkey[33];
	MDB_val k = {sizeof pkey, pkey}, v, ik = {32, (void *)id->b};
	int parts = 0;
	memcpy(pkey, id->b, 32);
	pkey[32] = 0;
	int rc = mdb_cursor_open(txn, c->artifacts, &cur);
	if (rc != MDB_SUCCESS)
		return rc;
	/* seek again after each delete (a kernel has at most four parts) */
	for (;;) {
		k = (MDB_val){sizeof pkey, pkey};
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		if (rc != MDB_SUCCESS)
			break;
		if (k.mv_size != 33 || memcmp(k.mv_data, id->b, 32) != 0)
			break;
		*bytes += v.mv_size;
		parts++;
		rc = mdb_cursor_del(cur, 0);
		if (rc != MDB_SUCCESS)
			break;
	}
	mdb_cursor_close(cur);
	if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
		return rc;
	/* the index entry, if it still points at this kernel */
	rc = mdb_get(txn, c->kref, &ik, &v);
	if (rc == MDB_SUCCESS && frame_ok(&v) && v.mv_size == FRAME_HDR + 64) {
		unsigned char tkey[64];
		MDB_val tk = {sizeof tkey, tkey}, iv;
		memcpy(tkey, (const char *)v.mv_data + FRAME_HDR, 64);
		rc = mdb_get(txn, c->kindex, &tk, &iv);
		if (rc == MDB_SUCCESS && frame_ok(&iv) && iv.mv_size == FRAME_HDR + 32 &&
		    memcmp((const char *)iv.mv_data + FRAME_HDR, id->b, 32) == 0)
			rc = mdb_del(txn, c->kindex, &tk, NULL);
		if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
			return rc;
	}
	rc = mdb_del(txn, c->kref, &ik, NULL);
	if (rc == MDB_SUCCESS || rc == MDB_NOTFOUND)
		rc = mdb_del(txn, c->atime, &ik, NULL);
	if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
		return rc;
	return parts > 0 ? MDB_SUCCESS : MDB_NOTFOUND;
}

/* Arguments of delete_one_fn. */
typedef struct DelOne {
	const KcDigest *id;
	uint64_t bytes;
} DelOne;

static int
delete_one_fn(Cache *c, MDB_txn *txn, void *arg)
{
	DelOne *d = arg;
	d->bytes = 0;
	return delete_in(c, txn, d->id, &d->bytes);
}

KcStatus
cache_delete_kernel(Cache *c, const KcDigest *kernel_id, KcErr *err)
{
	DelOne d = {kernel_id, 0};
	KcStatus st = write_txn(c, delete_one_fn, &d, WRITE_NO_EVICT, "deleting a kernel", err);
	if (st == KC_OK) {
		atomic_fetch_add(&c->evictions, 1);
		atomic_fetch_add(&c->evicted_bytes, d.bytes);
	}
	return st;
}

/* Arguments of delete_batch_fn. */
typedef struct DelBatch {
	const Cand *cands;
	size_t n;
	uint64_t kernels, bytes;
} DelBatch;

static int
delete_batch_fn(Cache *c, MDB_txn *txn, void *arg)
{
	DelBatch *d = arg;
	int rc = MDB_SUCCESS;
	d->kernels = d->bytes = 0;
	for (size_t i = 0; i < d->n; i++) {
		const Cand *k = &d->cands[i];
		/* touched since the scan: keep it */
		if (stamp_get(c, txn, &k->id) > k->at_us || touched_at(c, &k->id) > k->at_us)
			continue;
		rc = delete_in(c, txn, &k->id, &d->bytes);
		if (rc == MDB_NOTFOUND) {
			rc = MDB_SUCCESS;
			continue;
		}
		if (rc != MDB_SUCCESS)
			break;
		d->kernels++;
	}
	return rc;
}

static int
cand_cmp(const void *a, const void *b)
{
	const Cand *x = a, *y = b;
	if (x->at_us != y->at_us)
		return x->at_us < y->at_us ? -1 : 1;
	return memcmp(x->id.b, y->id.b, 32);
}

/* Appends every stored kernel to *cands (one short read transaction per
 * SCAN_BATCH kernels). */
static KcStatus
scan_kernels(Cache *c, Cand **cands, size_t *n, KcErr *err)
{
	size_t cap = 0;
	unsigned char from[33] = {0};
	bool more = true;
	*cands = NULL;
	*n = 0;
	while (more) {
		MDB_txn *txn = NULL;
		MDB_cursor *cur = NULL;
		MDB_val k = {sizeof from, from}, v;
		size_t got = 0;
		int rc = txn_begin(c, MDB_RDONLY, &txn);
		if (rc == MDB_SUCCESS)
			rc = mdb_cursor_open(txn, c->artifacts, &cur);
		for (rc = rc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) : rc;
		     rc == MDB_SUCCESS; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
			if (k.mv_size != 33)
				continue;
			Cand *last = *n ? &(*cands)[*n - 1] : NULL;
			if (last && memcmp(last->id.b, k.mv_data, 32) == 0) {
				last->bytes += v.mv_size;
				continue;
			}
			if (got == SCAN_BATCH) {
				/* resume at this kernel in the next transaction */
				memcpy(from, k.mv_data, 33);
				from[32] = 0;
				break;
			}
			if (*n == cap) {
				cap = cap ? cap * 2 : 256;
				*cands = kc_xrealloc(*cands, cap * sizeof **cands);
			}
			Cand *nc = &(*cands)[(*n)++];
			memcpy(nc->id.b, k.mv_data, 32);
			nc->bytes = v.mv_size;
			nc->at_us = stamp_get(c, txn, &nc->id);
			got++;
		}
		if (cur)
			mdb_cursor_close(cur);
		txn_abort(c, txn);
		if (rc == MDB_NOTFOUND)
			more = false;
		else if (rc != MDB_SUCCESS) {
			free(*cands);
			*cands = NULL;
			*n = 0;
			return lmdb_fail(c, err, rc, "scanning kernels for eviction");
		}
	}
	return KC_OK;
}

KcStatus
evict_run(Cache *c, uint64_t target, CacheEvictReport *out, KcErr *err)
{
	CacheEvictReport r = {0};
	Cand *cands = NULL;
	size_t n = 0;
	KcStatus st = KC_OK;
	pthread_mutex_lock(&c->evict_mu);
	cache_flush_touches(c, NULL);
	r.target_bytes = target;
	r.bytes_before = r.bytes_after = used_bytes(c);
	if (r.bytes_before <= target)
		goto done;
	st = scan_kernels(c, &cands, &n, err);
	if (st != KC_OK)
		goto done;
	if (n > 1)
		qsort(cands, n, sizeof *cands, cand_cmp);
	for (size_t i = 0; i < n && !atomic_load(&c->stop); i += EVICT_BATCH) {
		DelBatch d = {&cands[i], n - i < EVICT_BATCH ? n - i : EVICT_BATCH, 0, 0};
		st = write_txn(c, delete_batch_fn, &d, WRITE_NO_EVICT, "evicting kernels", err);
		if (st != KC_OK)
			break;
		r.kernels += d.kernels;
		r.bytes_freed += d.bytes;
		atomic_fetch_add(&c->evictions, d.kernels);
		atomic_fetch_add(&c->evicted_bytes, d.bytes);
		r.bytes_after = used_bytes(c);
		if (r.bytes_after <= target)
			break;
		/* let request writers in between batches */
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	r.bytes_after = used_bytes(c);
	if (r.kernels > 0)
		kc_log(KC_LOG_INFO,
		       "cache: evicted %llu kernel(s), %llu bytes; %llu -> %llu bytes in use "
		       "(target %llu)",
		       (unsigned long long)r.kernels, (unsigned long long)r.bytes_freed,
		       (unsigned long long)r.bytes_before, (unsigned long long)r.bytes_after,
		       (unsigned long long)target);
done:
	pthread_mutex_unlock(&c->evict_mu);
	free(cands);
	if (out)
		*out = r;
	return st;
}

KcStatus
cache_evict(Cache *c, uint64_t target_bytes, CacheEvictReport *out, KcErr *err)
{
	if (target_bytes == 0)
		target_bytes = c->max_bytes / 100 * c->low_pct;
	return evict_run(c, target_bytes, out, err);
}

/* ---- the collector thread ------------------------------------------------ */

static void *
collector_main(void *arg)
{
	Cache *c = arg;
	pthread_mutex_lock(&c->cmu);
	while (!atomic_load(&c->stop)) {
		if (!c->wake) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += c->flush_ms / 1000;
			ts.tv_nsec += (long)(c->flush_ms % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&c->ccv, &c->cmu, &ts);
		}
		c->wake = false;
		if (atomic_load(&c->stop))
			break;
		pthread_mutex_unlock(&c->cmu);
		KcErr err = {0};
		if (cache_flush_touches(c, &err) != KC_OK)
			kc_log(KC_LOG_WARN, "cache: %s", err.msg);
		if (used_bytes(c) > c->max_bytes / 100 * c->high_pct) {
			memset(&err, 0, sizeof err);
			if (evict_run(c, c->max_bytes / 100 * c->low_pct, NULL, &err) != KC_OK)
				kc_log(KC_LOG_WARN, "cache: eviction failed: %s", err.msg);
		}
		pthread_mutex_lock(&c->cmu);
	}
	pthread_mutex_unlock(&c->cmu);
	return NULL;
}

void
collector_start(Cache *c)
{
	KC_ASSERT(pthread_create(&c->thread, NULL, collector_main, c) == 0);
	c->have_thread = true;
}

void
collector_stop(Cache *c)
{
	if (!c->have_thread)
		return;
	pthread_mutex_lock(&c->cmu);
	atomic_store(&c->stop, true);
	pthread_cond_signal(&c->ccv);
	pthread_mutex_unlock(&c->cmu);
	pthread_join(c->thread, NULL);
	c->have_thread = false;
}
