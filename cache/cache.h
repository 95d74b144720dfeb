/* cache.h - kcsd's persistent store: one LMDB environment in the state dir.
 *
 * Named databases (plain key -> value, no DUPSORT):
 *   meta       "format" -> store format version; "created" -> time;
 *              "evicted" -> end of the last eviction run (u64 us, LE)
 *   workloads  workload_key(32)                  -> canonical graph JSON
 *   schedules  workload_key(32) + sha256(target name)(32) -> kcs-schedule-v1 record JSON
 *   kindex     workload_key(32) + sha256(target name)(32) -> kernel_id(32) last compiled
 *   artifacts  kernel_id(32) + part tag(1)       -> bytes of that part
 *   kref       kernel_id(32) -> the kindex key(64) that pointed at it when stored
 *   atime      kernel_id(32) -> last access, u64 microseconds since the epoch (LE)
 * Every stored value is framed as magic(4) | version(4) | sha256(32) | payload
 * and verified on read: a value that fails its checksum is never returned;
 * it reads as KC_NOT_FOUND (a miss), is logged, and is counted.
 *
 * Threads: one Cache is shared by every thread (MDB_NOTLS). Each call opens
 * and ends its own transaction; no transaction or MDB_val escapes a call;
 * returned data are malloc'd copies. Writes are serialised by LMDB.
 *
 * Errors: KC_NOT_FOUND (a miss, or a value refused by its checksum) is
 * returned without touching err, so callers may treat it as normal flow;
 * every other failure fills err (first error wins) and err may be NULL.
 *
 * Size: LRU eviction keeps the pages in use under max_bytes. Hits are
 * noted in memory and written to `atime` in one small transaction every
 * touch_flush_ms (or every 1024 touches) by a background thread, which
 * also evicts once the pages in use pass high_water_pct of max_bytes, down
 * to low_water_pct: first workload records nothing refers to any more (no
 * schedule, no kernel), then least-recently-used kernels (all parts, kref,
 * atime and the kindex entry pointing at them, at most 64 kernels per
 * transaction), each with its workload record in the same transaction
 * once the workload has neither a schedule nor a kernel left. Schedules,
 * and the workloads they tune, are never evicted. The file never grows
 * past map_bytes: MDB_MAP_FULL on a write evicts and retries once, and a
 * write that still does not fit fails (KC_CACHE, "full"); a small part of
 * the map is kept back so that eviction's own deletes can run on a full
 * store (cache/internal.h).
 *
 * Damage: cache_open checks the file in a child process first (file size
 * against the meta page, a walk of every database). A file that fails is
 * renamed to data.mdb.damaged-<UTC time> and an empty store is created
 * (see docs/durability.md).
 */
#ifndef KCS_CACHE_H
#define KCS_CACHE_H

#include "common.h"

typedef struct Cache Cache; /* opaque */

typedef struct CacheOptions {
	size_t map_bytes;        /* LMDB map size, the most the file may grow to
	                          * (default 64 GiB; sparse) */
	size_t max_object_bytes; /* largest artifact part accepted (default 64 MiB) */
	bool no_meta_sync;       /* MDB_NOMETASYNC (see docs/durability) */
	size_t max_bytes;        /* eviction ceiling for pages in use (default
	                          * min(8 GiB, map_bytes / 2)); < map_bytes */
	unsigned high_water_pct; /* collect above this % of max_bytes (default 90) */
	unsigned low_water_pct;  /* ... down to this % (default 75) */
	unsigned touch_flush_ms; /* access stamps written every ... (default 2000) */
	bool no_collector;       /* no background thread (tests): stamps are
	                          * written by cache_flush_touches, eviction by
	                          * cache_evict or on MDB_MAP_FULL */
	bool no_start_check;     /* skip the start-up check of the file */
} CacheOptions;

/* Artifact parts stored per kernel. */
typedef enum CachePart {
	CACHE_PART_META = 'm',   /* response metadata JSON */
	CACHE_PART_OBJECT = 'o', /* ELF shared object */
	CACHE_PART_IR = 'i',     /* optimised LLVM IR text */
	CACHE_PART_ASM = 'a',    /* assembly text (filled lazily) */
} CachePart;

/* Everything one compile stores, in one write transaction. */
typedef struct CacheKernelPut {
	KcDigest workload_key;
	const char *canonical; /* workload canonical JSON */
	size_t canonical_len;
	const char *target; /* resolved target name */
	KcDigest kernel_id;
	const char *meta; /* metadata JSON (without object_base64) */
	size_t meta_len;
	const void *object;
	size_t object_len;
	const char *ir; /* may be NULL */
	size_t ir_len;
} CacheKernelPut;

typedef struct CacheStats {
	uint64_t checksum_failures; /* values refused since open */
	uint64_t entries_artifacts; /* current number of artifact records */
	uint64_t bytes_used;        /* pages in use (every database) * page size */
	uint64_t map_bytes;         /* the map size configured: the file's ceiling */
	uint64_t evictions;         /* kernels evicted since open (LRU or delete) */
	uint64_t evicted_bytes;     /* stored bytes of the parts and workloads evicted */
	uint64_t evicted_workloads; /* workload records evicted since open */
	uint64_t map_growths;       /* deletes that had to run in the reserve */
	uint64_t full_refusals;     /* writes refused since open: the map was full */
	uint64_t entries;           /* kernels stored (records in atime) */
	uint64_t workloads;         /* workload records stored */
	uint64_t schedules;         /* schedule records stored */
	uint64_t max_bytes;         /* the eviction ceiling */
	uint64_t file_bytes;        /* high-water mark of the data file */
} CacheStats;

/* What one eviction run did. */
typedef struct CacheEvictReport {
	uint64_t kernels;      /* kernels evicted */
	uint64_t workloads;    /* workload records evicted (no schedule, no kernel left) */
	uint64_t bytes_freed;  /* stored bytes of those parts and workload records */
	uint64_t bytes_before; /* pages in use before and after, * page size */
	uint64_t bytes_after;
	uint64_t target_bytes; /* what it evicted down to */
} CacheEvictReport;

/* One schedule record to merge (cache_merge_schedules). */
typedef struct CacheScheduleIn {
	KcDigest workload_key;
	const char *canonical; /* workload canonical JSON, stored if absent */
	size_t canonical_len;
	const char *target; /* resolved target name */
	const char *record; /* kcs-schedule-v1 JSON */
	size_t record_len;
	bool stored; /* out: true if it replaced or created the record */
} CacheScheduleIn;

/* Decides a merge: true if `incoming` should replace `existing`. */
typedef bool (*CacheBetterFn)(const char *existing, size_t existing_len, const char *incoming,
                              size_t incoming_len, void *arg);

/* One stored schedule as seen by cache_scan_schedules. Pointers are valid
 * only during the callback (they point into the map). `workload` is NULL
 * when the workload record is missing or fails its checksum. */
typedef void (*CacheScheduleFn)(void *arg, const KcDigest *workload_key, const char *workload,
                                size_t workload_len, const char *record, size_t record_len);

/* Where a scan of the schedules stands; zero-initialise to start. */
typedef struct CacheScanPos {
	unsigned char last[64]; /* key of the last record given */
	bool started;
	bool done; /* set when the scan has given every record */
} CacheScanPos;

/* Open, creating if needed, the environment in directory `dir` (created
 * mode 0700 if missing). First checks an existing data.mdb in a forked
 * child (unless no_start_check) and moves a damaged one aside; then opens,
 * runs mdb_reader_check and starts the collector thread (unless
 * no_collector). Returns NULL and fills err (KC_CACHE, message naming the
 * file) on failure, also when max_bytes >= map_bytes. Call before threads
 * start (it forks); release with cache_close() after they stop. `opt` may
 * be NULL (all defaults, no_meta_sync on); zero fields in `opt` take their
 * defaults. max_object_bytes bounds every stored value. */
Cache *cache_open(const char *dir, const CacheOptions *opt, KcErr *err);
/* Stops the collector, writes pending access stamps, closes. No calls may
 * be in flight; NULL allowed. */
void cache_close(Cache *c);

/* Store a compiled kernel and everything that leads to it (workload,
 * index, parts) atomically. Storing an existing kernel_id is KC_OK.
 * KC_TOO_LARGE if a part exceeds max_object_bytes; KC_CACHE otherwise. */
KcStatus cache_put_kernel(Cache *c, const CacheKernelPut *k, KcErr *err);

/* Read one part of a kernel into *out (appended; caller frees with
 * kc_buf_free). KC_NOT_FOUND on a miss or a checksum failure. */
KcStatus cache_get_part(Cache *c, const KcDigest *kernel_id, CachePart part, KcBuf *out,
                        KcErr *err);
/* cache_get_part, and on KC_OK the SHA-256 of the part's bytes in *digest
 * (may be NULL): the frame checksum, verified against those bytes by this
 * read, so a caller comparing it with a digest it knows (the object's
 * object_sha256) needs no second hash of the bytes. */
KcStatus cache_get_part_digest(Cache *c, const KcDigest *kernel_id, CachePart part, KcBuf *out,
                               KcDigest *digest, KcErr *err);
/* The frame checksums the stored parts[0..n-1] of a kernel claim, into
 * out[0..n-1], in one read transaction; the parts' bytes are neither
 * copied nor hashed, so this verifies nothing. It is for a caller holding
 * bytes it verified earlier (cache_get_part_digest) and wanting to know,
 * cheaply, that the store still holds those values: equal digests say so,
 * and what that caller serves is its own verified copy. Counts as an
 * access (LRU). KC_NOT_FOUND if a part is missing or not a frame. */
KcStatus cache_peek_digests(Cache *c, const KcDigest *kernel_id, const CachePart *parts, int n,
                            KcDigest *out, KcErr *err);
/* Add a part to an existing kernel (used for lazily made assembly). */
KcStatus cache_put_part(Cache *c, const KcDigest *kernel_id, CachePart part, const void *data,
                        size_t len, KcErr *err);

/* The canonical graph of a workload. KC_NOT_FOUND if unknown. A workload
 * stored alone is evicted by the next eviction run unless a schedule or a
 * kernel refers to it by then. */
KcStatus cache_get_workload(Cache *c, const KcDigest *workload_key, KcBuf *out, KcErr *err);
KcStatus cache_put_workload(Cache *c, const KcDigest *workload_key, const char *canonical,
                            size_t len, KcErr *err);

/* The kernel last compiled for (workload, target). KC_NOT_FOUND if none. */
KcStatus cache_get_index(Cache *c, const KcDigest *workload_key, const char *target,
                         KcDigest *kernel_id, KcErr *err);

/* Tuned schedule records, one per (workload, target); put replaces. The
 * record is JSON text, validated by the caller. cache_put_schedule returns
 * only after the commit is on disk (mdb_env_sync), so an acknowledged
 * record survives an OS crash too; it stores nothing and returns
 * KC_NOT_FOUND when the workload record is not stored (never stored, or
 * evicted since the caller looked), so a schedule always has its
 * workload. */
KcStatus cache_put_schedule(Cache *c, const KcDigest *workload_key, const char *target,
                            const char *record, size_t len, KcErr *err);
KcStatus cache_get_schedule(Cache *c, const KcDigest *workload_key, const char *target, KcBuf *out,
                            KcErr *err);
/* Appends every record of the workload as a JSON array ("[...]", "[]" when
 * none) to *out. */
KcStatus cache_list_schedules(Cache *c, const KcDigest *workload_key, KcBuf *out, KcErr *err);

/* Merges n records in one write transaction: a record is stored when
 * there is none for its (workload, target) or better(existing, incoming)
 * says so; items[i].stored tells which. Missing workloads are stored with
 * their canonical text. All or nothing: on failure nothing is stored.
 * Synced to disk before returning KC_OK. */
KcStatus cache_merge_schedules(Cache *c, CacheScheduleIn *items, size_t n, CacheBetterFn better,
                               void *arg, KcErr *err);

/* Calls fn for up to max_records schedule records after *pos, in key
 * order, in one short read transaction, and advances *pos (pos->done once
 * every record was given). A record failing its checksum is skipped. */
KcStatus cache_scan_schedules(Cache *c, CacheScanPos *pos, size_t max_records, CacheScheduleFn fn,
                              void *arg, KcErr *err);

/* Deletes a kernel: every part, its access stamp, and the kindex entry if
 * it still points at it. KC_NOT_FOUND if it has no part. Its workload
 * record stays (the next eviction removes it if nothing refers to it). */
KcStatus cache_delete_kernel(Cache *c, const KcDigest *kernel_id, KcErr *err);

/* Evicts, when the pages in use are over target_bytes (0: low_water_pct
 * of max_bytes): the workload records with neither a schedule nor a
 * kernel, then least-recently-used kernels (and the workloads they leave
 * with neither) until the pages in use are at most target_bytes or no
 * kernel is left. Flushes pending access stamps first. Fills *out (may be
 * NULL). */
KcStatus cache_evict(Cache *c, uint64_t target_bytes, CacheEvictReport *out, KcErr *err);

/* What cache_audit found: the store's references, checked in one read
 * transaction. A consistent store has every field after `kernels` 0. */
typedef struct CacheAudit {
	uint64_t workloads, schedules, kernels;
	uint64_t unreferenced_workloads; /* neither a schedule nor a kernel */
	uint64_t kernels_without_workload;
	uint64_t schedules_without_workload;
} CacheAudit;

/* Walks every workload, schedule and kernel (tests and tools; it reads
 * the whole store). */
KcStatus cache_audit(Cache *c, CacheAudit *out, KcErr *err);

/* Writes the access stamps noted since the last flush (one transaction). */
KcStatus cache_flush_touches(Cache *c, KcErr *err);

/* Forces committed transactions to disk (mdb_env_sync(env, 1)). */
KcStatus cache_sync(Cache *c, KcErr *err);

/* Writes a compacted copy (mdb_env_copy2, MDB_CP_COMPACT) into a new
 * directory <dir>/backups/<UTC time>[-N]; its path goes to path[cap] and the
 * copy's size to *bytes. Blocks map growth while it runs. */
KcStatus cache_backup(Cache *c, char *path, size_t cap, uint64_t *bytes, KcErr *err);

void cache_stats(Cache *c, CacheStats *out);

#endif /* KCS_CACHE_H */
