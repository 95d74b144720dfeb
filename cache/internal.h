/* internal.h - what the cache/ files share: the Cache layout, framing, the
 * transaction gate and the write-with-retry helper. Table of contents:
 * cache_lmdb.c (open, close, framing, gate, reads and writes, schedules,
 * backup, stats), cache_evict.c (access stamps, the collector thread, LRU
 * eviction, delete), cache_check.c (the start-up check of data.mdb,
 * moving a damaged file aside, the reference audit).
 *
 * Locking: `gate` is held shared by every transaction and exclusively by
 * a delete that runs in the reserve (mdb_env_set_mapsize needs no
 * transaction in the process); map_bytes changes only under it
 * exclusively. `tmu` guards the touch table, `cmu`/`ccv` the collector's
 * wake-up, `evict_mu` makes eviction runs and kernel deletes one at a
 * time. A thread never holds the gate twice.
 *
 * Map size: the file may never outgrow cache_map_bytes (map_limit). Every
 * transaction sees a map of map_limit - reserve (soft_bytes); only a
 * delete that failed with MDB_MAP_FULL runs again with the map at
 * map_limit, alone (gate held exclusively), and the map is set back to
 * soft_bytes before anyone else runs. LMDB's deletes copy pages too, so
 * a map filled to the brim could otherwise not even be evicted.
 */
#ifndef KCS_CACHE_INTERNAL_H
#define KCS_CACHE_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cache.h"

#define FRAME_HDR 40 /* magic(4) + version(4) + sha256(32) */
#define KEY_MAX 65   /* the longest key we build: 32 + 32, or 32 + 1 */
#define TOUCH_SLOTS 4096
#define TOUCH_WAKE 1024 /* pending stamps that wake the collector */

/* One pending access stamp. */
typedef struct TouchSlot {
	KcDigest id;
	uint64_t at_us;
	bool used;
} TouchSlot;

struct Cache {
	MDB_env *env;
	MDB_dbi meta, workloads, schedules, kindex, artifacts, kref, atime;
	size_t map_bytes;  /* LMDB's map size now; under gate */
	size_t map_limit;  /* cache_map_bytes: the file never grows past it */
	size_t soft_bytes; /* map_limit - the reserve: the map of every write */
	size_t max_object_bytes;
	uint64_t max_bytes;
	unsigned high_pct, low_pct, flush_ms;
	char dir[4096];
	char path[4200]; /* data.mdb, for messages */
	pthread_rwlock_t gate;
	atomic_uint_fast64_t checksum_failures, evictions, evicted_bytes, evicted_workloads;
	atomic_uint_fast64_t map_growths, full_refusals;

	pthread_mutex_t tmu;
	TouchSlot *touch; /* TOUCH_SLOTS, open addressing */
	size_t ntouch;

	pthread_mutex_t evict_mu;
	pthread_mutex_t cmu;
	pthread_cond_t ccv;
	bool wake, have_thread;
	atomic_bool stop;
	pthread_t thread;
};

/* Write helper flags. */
enum {
	WRITE_SYNC = 1u << 0,     /* mdb_env_sync(env, 1) after the commit */
	WRITE_NO_EVICT = 1u << 1, /* on MDB_MAP_FULL do not evict (stamps, eviction's writes) */
	WRITE_RESERVE = 1u << 2,  /* on MDB_MAP_FULL run again in the reserve (deletes only) */
};

/* One write transaction's body: returns an LMDB code. May run twice (a
 * retry after MDB_MAP_FULL), so it must reset its outputs first. */
typedef int (*WriteFn)(Cache *c, MDB_txn *txn, void *arg);

/* cache_lmdb.c */
bool frame_ok(const MDB_val *v);
void frame_write(unsigned char *dst, const void *p, size_t n);
void refuse(Cache *c, const char *db, const MDB_val *key);
int put_framed(MDB_txn *txn, MDB_dbi dbi, const void *key, size_t klen, const void *p, size_t n);
KcStatus lmdb_fail(Cache *c, KcErr *err, int rc, const char *what);
int txn_begin(Cache *c, unsigned flags, MDB_txn **txn); /* takes the gate shared */
void txn_abort(Cache *c, MDB_txn *txn);                 /* releases it */
int txn_commit(Cache *c, MDB_txn *txn);                 /* releases it */
/* Runs fn in a write transaction. On MDB_MAP_FULL: WRITE_RESERVE runs it
 * once more in the reserve; otherwise, unless WRITE_NO_EVICT, evicts
 * (make room for about `need` bytes) and retries once. */
KcStatus write_txn(Cache *c, WriteFn fn, void *arg, size_t need, unsigned flags, const char *what,
                   KcErr *err);
uint64_t used_bytes(Cache *c); /* pages in use in every database * page size */
/* True if some key of dbi starts with the 32 bytes of `prefix`. */
bool has_prefix(MDB_txn *txn, MDB_dbi dbi, const unsigned char prefix[32]);

/* cache_evict.c */
uint64_t wall_us(void); /* CLOCK_REALTIME in microseconds: access stamps */
void touch(Cache *c, const KcDigest *id);
int stamp_put(Cache *c, MDB_txn *txn, const KcDigest *id, uint64_t at_us);
KcStatus evict_run(Cache *c, uint64_t target, CacheEvictReport *out, KcErr *err);
void collector_start(Cache *c);
void collector_stop(Cache *c);

/* cache_check.c */
/* Checks dir/data.mdb in a child process; moves it aside when damaged.
 * KC_OK to go on (file fine, absent, or moved aside); KC_CACHE with err
 * filled when kcsd must not start (check timed out or could not run). */
KcStatus check_at_start(const char *dir, const char *path, KcErr *err);
/* True for LMDB codes that mean the file is damaged. */
bool damage_code(int rc);
/* Renames path to path.damaged-<UTC time> and removes dir/lock.mdb. */
bool move_aside(const char *dir, const char *path, const char *why);

#endif /* KCS_CACHE_INTERNAL_H */
