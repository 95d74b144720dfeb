/* internal.h - what the cache/ files share: the Cache layout, framing, the
 * transaction gate and the write-with-retry helper. Table of contents:
 * cache_lmdb.c (open, close, framing, gate, reads and writes, schedules,
 * backup, stats), cache_evict.c (access stamps, the collector thread, LRU
 * eviction, delete), cache_check.c (the start-up check of data.mdb and
 * moving a damaged file aside).
 *
 * Locking: `gate` is held shared by every transaction and exclusively by
 * map growth (mdb_env_set_mapsize needs no transaction in the process);
 * map_bytes changes only under it exclusively. `tmu` guards the touch
 * table, `cmu`/`ccv` the collector's wake-up, `evict_mu` makes eviction
 * runs one at a time. A thread never holds the gate twice.
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
	size_t map_bytes; /* under gate */
	size_t max_object_bytes;
	uint64_t max_bytes;
	unsigned high_pct, low_pct, flush_ms;
	char dir[4096];
	char path[4200]; /* data.mdb, for messages */
	pthread_rwlock_t gate;
	atomic_uint_fast64_t checksum_failures, evictions, evicted_bytes, map_growths;

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
	WRITE_NO_EVICT = 1u << 1, /* on MDB_MAP_FULL only grow (eviction's own writes) */
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
KcStatus write_txn(Cache *c, WriteFn fn, void *arg, unsigned flags, const char *what, KcErr *err);
uint64_t used_bytes(Cache *c); /* pages in use in every database * page size */

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
