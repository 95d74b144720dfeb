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
 * since the scan is skipped.
 *
 * Workload records: the scan also reads each kernel's kref, which names
 * its workload, and counts the kernels per workload. A workload record is
 * evicted when none of the scanned kernels is left on it and, looked up
 * in the deleting transaction itself, it has no schedule and no kindex
 * entry: before the kernel batches for the workloads no kernel refers to
 * (left by a DELETE, or by an older kcsd), and in the batch that deletes
 * its last kernel otherwise. That is enough because a kernel stored after
 * the scan always comes with a kindex entry of its workload, and kindex
 * entries are removed only with a kernel, under evict_mu (this run, or
 * cache_delete_kernel, which waits for it). A kernel whose kref is
 * missing or refused has an unknown workload: while one is left, no
 * workload record is evicted. Schedules are never evicted.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define EVICT_BATCH 64
#define SCAN_BATCH 4096

/* A kernel that may be evicted. `wl` indexes Run.refs, -1 when its
 * workload is unknown (kref missing or refused). */
typedef struct Cand {
	KcDigest id;
	KcDigest wk; /* its workload, during the scan */
	uint64_t at_us;
	uint64_t bytes;
	long wl;
	bool gone; /* deleted (or found gone) by the transaction being written */
} Cand;

/* A workload the scanned kernels refer to, and how many of them still do. */
typedef struct WlRef {
	KcDigest key;
	uint64_t kernels;
	uint64_t pending; /* of them, deleted by the transaction being written */
} WlRef;

/* One eviction run's view of the store. */
typedef struct Run {
	Cand *cands;
	size_t n;
	WlRef *refs;
	size_t nrefs;
	size_t unknown; /* kernels left whose workload is unknown */
} Run;

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
	KcStatus st = write_txn(c, flush_fn, &f, 0, WRITE_NO_EVICT, "writing access stamps", err);
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
	/* under evict_mu: a run's view of the kindex must stay valid (above) */
	pthread_mutex_lock(&c->evict_mu);
	KcStatus st = write_txn(c, delete_one_fn, &d, 0, WRITE_NO_EVICT | WRITE_RESERVE,
	                        "deleting a kernel", err);
	pthread_mutex_unlock(&c->evict_mu);
	if (st == KC_OK) {
		atomic_fetch_add(&c->evictions, 1);
		atomic_fetch_add(&c->evicted_bytes, d.bytes);
	}
	return st;
}

/* Deletes the workload record `wk` inside txn unless a schedule or a
 * kindex entry still refers to it (the caller knows no other kernel
 * does); counts it and its stored bytes. */
static int
drop_workload(Cache *c, MDB_txn *txn, const KcDigest *wk, uint64_t *count, uint64_t *bytes)
{
	MDB_val k = {32, (void *)wk->b}, v;
	if (has_prefix(txn, c->schedules, wk->b) || has_prefix(txn, c->kindex, wk->b))
		return MDB_SUCCESS;
	int rc = mdb_get(txn, c->workloads, &k, &v);
	if (rc == MDB_NOTFOUND)
		return MDB_SUCCESS;
	if (rc == MDB_SUCCESS) {
		*bytes += v.mv_size;
		rc = mdb_del(txn, c->workloads, &k, NULL);
	}
	if (rc == MDB_SUCCESS)
		++*count;
	return rc;
}

/* Arguments of delete_batch_fn: run->cands[from .. from+n-1]. */
typedef struct DelBatch {
	Run *run;
	size_t from, n;
	uint64_t kernels, workloads, bytes;
} DelBatch;

static int
delete_batch_fn(Cache *c, MDB_txn *txn, void *arg)
{
	DelBatch *d = arg;
	Run *run = d->run;
	int rc = MDB_SUCCESS;
	d->kernels = d->workloads = d->bytes = 0;
	for (size_t i = d->from; i < d->from + d->n; i++) {
		run->cands[i].gone = false;
		if (run->cands[i].wl >= 0)
			run->refs[run->cands[i].wl].pending = 0;
	}
	for (size_t i = d->from; i < d->from + d->n && rc == MDB_SUCCESS; i++) {
		Cand *k = &run->cands[i];
		/* touched since the scan: keep it */
		if (stamp_get(c, txn, &k->id) > k->at_us || touched_at(c, &k->id) > k->at_us)
			continue;
		rc = delete_in(c, txn, &k->id, &d->bytes);
		if (rc == MDB_SUCCESS)
			d->kernels++;
		else if (rc == MDB_NOTFOUND)
			rc = MDB_SUCCESS; /* deleted since the scan: gone all the same */
		else
			break;
		k->gone = true;
		if (k->wl < 0)
			continue;
		WlRef *w = &run->refs[k->wl];
		if (++w->pending == w->kernels && run->unknown == 0)
			rc = drop_workload(c, txn, &w->key, &d->workloads, &d->bytes);
	}
	return rc;
}

/* After delete_batch_fn committed: what it deleted is gone for good. */
static void
batch_landed(Run *run, const DelBatch *d)
{
	for (size_t i = d->from; i < d->from + d->n; i++) {
		Cand *k = &run->cands[i];
		if (k->wl >= 0) {
			WlRef *w = &run->refs[k->wl];
			w->kernels -= w->pending;
			w->pending = 0;
		} else if (k->gone) {
			run->unknown--;
		}
	}
}

static int
cand_cmp(const void *a, const void *b)
{
	const Cand *x = a, *y = b;
	if (x->at_us != y->at_us)
		return x->at_us < y->at_us ? -1 : 1;
	return memcmp(x->id.b, y->id.b, 32);
}

static int
ref_cmp(const void *a, const void *b)
{
	return memcmp(((const WlRef *)a)->key.b, ((const WlRef *)b)->key.b, 32);
}

/* The kernels still counted on workload `wk` (0 if none was scanned). */
static uint64_t
ref_kernels(const Run *run, const unsigned char wk[32])
{
	WlRef key;
	memcpy(key.key.b, wk, 32);
	const WlRef *w =
	    run->nrefs ? bsearch(&key, run->refs, run->nrefs, sizeof key, ref_cmp) : NULL;
	return w ? w->kernels : 0;
}

/* Fills run->refs from the scanned kernels' workloads and points each
 * kernel at its entry. */
static void
count_refs(Run *run)
{
	size_t m = 0;
	run->refs = kc_xmalloc((run->n ? run->n : 1) * sizeof *run->refs);
	for (size_t i = 0; i < run->n; i++)
		if (run->cands[i].wl >= 0)
			run->refs[m++] = (WlRef){run->cands[i].wk, 1, 0};
	if (m > 1)
		qsort(run->refs, m, sizeof *run->refs, ref_cmp);
	size_t u = 0;
	for (size_t i = 0; i < m; i++) {
		if (u > 0 && memcmp(run->refs[u - 1].key.b, run->refs[i].key.b, 32) == 0)
			run->refs[u - 1].kernels++;
		else
			run->refs[u++] = run->refs[i];
	}
	run->nrefs = u;
	for (size_t i = 0; i < run->n; i++) {
		Cand *k = &run->cands[i];
		if (k->wl < 0)
			continue;
		WlRef key = {.key = k->wk};
		const WlRef *w = bsearch(&key, run->refs, u, sizeof key, ref_cmp);
		KC_ASSERT(w != NULL);
		k->wl = w - run->refs;
	}
}

/* The workload of kernel id from its kref: false if missing or refused. */
static bool
kref_workload(Cache *c, MDB_txn *txn, const KcDigest *id, KcDigest *wk)
{
	MDB_val k = {32, (void *)id->b}, v;
	if (mdb_get(txn, c->kref, &k, &v) != MDB_SUCCESS)
		return false;
	if (!frame_ok(&v) || v.mv_size != FRAME_HDR + 64) {
		refuse(c, "kref", &k);
		return false;
	}
	memcpy(wk->b, (const unsigned char *)v.mv_data + FRAME_HDR, 32);
	return true;
}

/* Appends every stored kernel to run->cands, with its stamp and workload
 * (one short read transaction per SCAN_BATCH kernels). */
static KcStatus
scan_kernels(Cache *c, Run *run, KcErr *err)
{
	size_t cap = 0;
	unsigned char from[33] = {0};
	bool more = true;
	run->cands = NULL;
	run->n = 0;
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
			Cand *last = run->n ? &run->cands[run->n - 1] : NULL;
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
			if (run->n == cap) {
				cap = cap ? cap * 2 : 256;
				run->cands = kc_xrealloc(run->cands, cap * sizeof *run->cands);
			}
			Cand *nc = &run->cands[run->n++];
			memset(nc, 0, sizeof *nc);
			memcpy(nc->id.b, k.mv_data, 32);
			nc->bytes = v.mv_size;
			nc->at_us = stamp_get(c, txn, &nc->id);
			nc->wl = kref_workload(c, txn, &nc->id, &nc->wk) ? 0 : -1;
			if (nc->wl < 0)
				run->unknown++;
			got++;
		}
		if (cur)
			mdb_cursor_close(cur);
		txn_abort(c, txn);
		if (rc == MDB_NOTFOUND)
			more = false;
		else if (rc != MDB_SUCCESS)
			return lmdb_fail(c, err, rc, "scanning kernels for eviction");
	}
	count_refs(run);
	return KC_OK;
}

/* Arguments of drop_batch_fn. */
typedef struct DropBatch {
	const KcDigest *keys;
	size_t n;
	uint64_t workloads, bytes;
} DropBatch;

static int
drop_batch_fn(Cache *c, MDB_txn *txn, void *arg)
{
	DropBatch *d = arg;
	int rc = MDB_SUCCESS;
	d->workloads = d->bytes = 0;
	for (size_t i = 0; i < d->n && rc == MDB_SUCCESS; i++)
		rc = drop_workload(c, txn, &d->keys[i], &d->workloads, &d->bytes);
	return rc;
}

/* Evicts every workload record that none of the run's kernels is left on
 * and no schedule or kindex entry refers to: read transactions of at most
 * SCAN_BATCH records find them, write transactions of at most EVICT_BATCH
 * delete them (drop_workload looks again). */
static KcStatus
sweep_workloads(Cache *c, const Run *run, CacheEvictReport *r, KcErr *err)
{
	unsigned char from[32] = {0};
	bool started = false, more = true;
	KcDigest *drop = kc_xmalloc(EVICT_BATCH * sizeof *drop);
	KcStatus st = KC_OK;
	while (more && st == KC_OK && !atomic_load(&c->stop)) {
		MDB_txn *txn = NULL;
		MDB_cursor *cur = NULL;
		MDB_val k = {sizeof from, from}, v;
		size_t seen = 0, n = 0;
		int rc = txn_begin(c, MDB_RDONLY, &txn);
		if (rc == MDB_SUCCESS)
			rc = mdb_cursor_open(txn, c->workloads, &cur);
		if (rc == MDB_SUCCESS)
			rc = mdb_cursor_get(cur, &k, &v, started ? MDB_SET_RANGE : MDB_FIRST);
		if (rc == MDB_SUCCESS && started && k.mv_size == 32 &&
		    memcmp(k.mv_data, from, 32) == 0)
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		for (; rc == MDB_SUCCESS && n < EVICT_BATCH && seen < SCAN_BATCH;
		     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
			if (k.mv_size != 32)
				continue;
			memcpy(from, k.mv_data, 32);
			started = true;
			seen++;
			if (ref_kernels(run, from) > 0 || has_prefix(txn, c->schedules, from) ||
			    has_prefix(txn, c->kindex, from))
				continue;
			memcpy(drop[n++].b, from, 32);
		}
		if (cur)
			mdb_cursor_close(cur);
		txn_abort(c, txn);
		if (rc == MDB_NOTFOUND)
			more = false;
		else if (rc != MDB_SUCCESS) {
			st = lmdb_fail(c, err, rc, "scanning workloads for eviction");
			break;
		}
		if (n == 0)
			continue;
		/* as for kernels (evict_run): one by one, in the reserve if need be */
		DropBatch d = {drop, n, 0, 0};
		KcErr berr = {0};
		st =
		    write_txn(c, drop_batch_fn, &d, 0, WRITE_NO_EVICT, "evicting workloads", &berr);
		for (size_t i = 0; st != KC_OK && i < n; i++) {
			DropBatch one = {&drop[i], 1, 0, 0};
			KcStatus s1 =
			    write_txn(c, drop_batch_fn, &one, 0, WRITE_NO_EVICT | WRITE_RESERVE,
			              "evicting workloads", err);
			if (s1 != KC_OK)
				break;
			d.workloads += one.workloads;
			d.bytes += one.bytes;
			if (i == n - 1)
				st = KC_OK;
		}
		r->workloads += d.workloads;
		r->bytes_freed += d.bytes;
		atomic_fetch_add(&c->evicted_workloads, d.workloads);
		atomic_fetch_add(&c->evicted_bytes, d.bytes);
		if (st != KC_OK)
			break;
	}
	free(drop);
	return st;
}

/* A one-value write (meta "evicted": the time) after an eviction run.
 * LMDB hands out the pages a transaction freed only once a later one has
 * committed (the previous snapshot stays valid until then), so without it
 * the write that made room could not use what the last batch freed. */
static int
bump_fn(Cache *c, MDB_txn *txn, void *arg)
{
	(void)arg;
	unsigned char le[8];
	uint64_t now = wall_us();
	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)(now >> (8 * i));
	return put_framed(txn, c->meta, "evicted", 7, le, sizeof le);
}

KcStatus
evict_run(Cache *c, uint64_t target, CacheEvictReport *out, KcErr *err)
{
	CacheEvictReport r = {0};
	Run run = {0};
	KcStatus st = KC_OK;
	bool swept = false;
	pthread_mutex_lock(&c->evict_mu);
	cache_flush_touches(c, NULL);
	r.target_bytes = target;
	r.bytes_before = r.bytes_after = used_bytes(c);
	if (r.bytes_before <= target)
		goto done;
	st = scan_kernels(c, &run, err);
	if (st != KC_OK)
		goto done;
	/* what nothing refers to goes first */
	if (run.unknown == 0) {
		st = sweep_workloads(c, &run, &r, err);
		if (st != KC_OK)
			goto done;
		swept = true;
		r.bytes_after = used_bytes(c);
	}
	if (run.n > 1)
		qsort(run.cands, run.n, sizeof *run.cands, cand_cmp);
	/* On a full map even deletes fail: LMDB copies the pages it changes
	 * (a leaf in each of five databases per kernel) and reuses freed
	 * pages only a commit later. A batch that fails is then done one
	 * kernel per transaction, in the reserve if need be (the fewer pages
	 * taken from it the better: the file keeps them), doubling again as
	 * the pages freed become usable. */
	size_t batch = EVICT_BATCH;
	for (size_t i = 0; i < run.n && r.bytes_after > target && !atomic_load(&c->stop);) {
		/* no more kernels than the stored bytes over the target call for:
		 * a few large kernels must not take the newest along */
		size_t n = 0;
		for (uint64_t sum = 0; n < batch && i + n < run.n && sum < r.bytes_after - target;
		     n++)
			sum += run.cands[i + n].bytes;
		DelBatch d = {&run, i, n, 0, 0, 0};
		KcErr berr = {0};
		unsigned flags = WRITE_NO_EVICT | (batch == 1 ? WRITE_RESERVE : 0);
		st = write_txn(c, delete_batch_fn, &d, 0, flags, "evicting kernels", &berr);
		if (st != KC_OK && batch > 1) {
			batch = 1;
			continue;
		}
		if (st != KC_OK) {
			if (err && err->status == KC_OK)
				*err = berr;
			break;
		}
		if (batch < EVICT_BATCH)
			batch *= 2;
		batch_landed(&run, &d);
		i += d.n;
		r.kernels += d.kernels;
		r.workloads += d.workloads;
		r.bytes_freed += d.bytes;
		atomic_fetch_add(&c->evictions, d.kernels);
		atomic_fetch_add(&c->evicted_workloads, d.workloads);
		atomic_fetch_add(&c->evicted_bytes, d.bytes);
		r.bytes_after = used_bytes(c);
		if (r.bytes_after <= target)
			break;
		/* let request writers in between batches */
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	/* the kernels of unknown workloads are gone now: sweep after all */
	if (st == KC_OK && !swept && run.unknown == 0 && r.bytes_after > target)
		st = sweep_workloads(c, &run, &r, err);
	if (r.kernels > 0 || r.workloads > 0)
		write_txn(c, bump_fn, NULL, 0, WRITE_NO_EVICT | WRITE_RESERVE, "ending an eviction",
		          NULL);
	r.bytes_after = used_bytes(c);
	if (r.kernels > 0 || r.workloads > 0)
		kc_log(KC_LOG_INFO,
		       "cache: evicted %llu kernel(s) and %llu workload(s), %llu bytes; %llu -> "
		       "%llu bytes in use (target %llu)",
		       (unsigned long long)r.kernels, (unsigned long long)r.workloads,
		       (unsigned long long)r.bytes_freed, (unsigned long long)r.bytes_before,
		       (unsigned long long)r.bytes_after, (unsigned long long)target);
done:
	pthread_mutex_unlock(&c->evict_mu);
	free(run.cands);
	free(run.refs);
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
