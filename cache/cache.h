/* cache.h - kcsd's persistent store: one LMDB environment in the state dir.
 *
 * Named databases (plain key -> value, no DUPSORT):
 *   meta       "format" -> store format version; "created" -> time
 *   workloads  workload_key(32)                  -> canonical graph JSON
 *   schedules  workload_key(32) + sha256(target name)(32) -> kcs-schedule-v1 record JSON
 *   kindex     workload_key(32) + sha256(target name)(32) -> kernel_id(32) last compiled
 *   artifacts  kernel_id(32) + part tag(1)       -> bytes of that part
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
 */
#ifndef KCS_CACHE_H
#define KCS_CACHE_H

#include "common.h"

typedef struct Cache Cache; /* opaque */

typedef struct CacheOptions {
	size_t map_bytes;        /* LMDB map size (default 64 GiB; sparse) */
	size_t max_object_bytes; /* largest artifact part accepted (default 64 MiB) */
	bool no_meta_sync;       /* MDB_NOMETASYNC (see docs/durability) */
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
	const char *target;    /* resolved target name */
	KcDigest kernel_id;
	const char *meta;      /* metadata JSON (without object_base64) */
	size_t meta_len;
	const void *object;
	size_t object_len;
	const char *ir;        /* may be NULL */
	size_t ir_len;
} CacheKernelPut;

typedef struct CacheStats {
	uint64_t checksum_failures; /* values refused since open */
	uint64_t entries_artifacts; /* current number of artifact records */
	uint64_t bytes_used;        /* pages in use * page size */
	uint64_t map_bytes;
} CacheStats;

/* Open, creating if needed, the environment in directory `dir` (created
 * mode 0700 if missing). Runs mdb_reader_check. Returns NULL and fills err
 * (KC_CACHE, message naming the file) on failure. Call before threads start;
 * release with cache_close() after they stop. `opt` may be NULL (all
 * defaults, no_meta_sync on); zero sizes in `opt` take their defaults.
 * max_object_bytes bounds every stored value (workloads, schedules too). */
Cache *cache_open(const char *dir, const CacheOptions *opt, KcErr *err);
void cache_close(Cache *c); /* no calls may be in flight; NULL allowed */

/* Store a compiled kernel and everything that leads to it (workload,
 * index, parts) atomically. Storing an existing kernel_id is KC_OK.
 * KC_TOO_LARGE if a part exceeds max_object_bytes; KC_CACHE otherwise. */
KcStatus cache_put_kernel(Cache *c, const CacheKernelPut *k, KcErr *err);

/* Read one part of a kernel into *out (appended; caller frees with
 * kc_buf_free). KC_NOT_FOUND on a miss or a checksum failure. */
KcStatus cache_get_part(Cache *c, const KcDigest *kernel_id, CachePart part, KcBuf *out,
			KcErr *err);
/* Add a part to an existing kernel (used for lazily made assembly). */
KcStatus cache_put_part(Cache *c, const KcDigest *kernel_id, CachePart part, const void *data,
			size_t len, KcErr *err);

/* The canonical graph of a workload. KC_NOT_FOUND if unknown. */
KcStatus cache_get_workload(Cache *c, const KcDigest *workload_key, KcBuf *out, KcErr *err);
KcStatus cache_put_workload(Cache *c, const KcDigest *workload_key, const char *canonical,
			    size_t len, KcErr *err);

/* The kernel last compiled for (workload, target). KC_NOT_FOUND if none. */
KcStatus cache_get_index(Cache *c, const KcDigest *workload_key, const char *target,
			 KcDigest *kernel_id, KcErr *err);

/* Tuned schedule records, one per (workload, target); put replaces. The
 * record is JSON text, validated by the caller. */
KcStatus cache_put_schedule(Cache *c, const KcDigest *workload_key, const char *target,
			    const char *record, size_t len, KcErr *err);
KcStatus cache_get_schedule(Cache *c, const KcDigest *workload_key, const char *target,
			    KcBuf *out, KcErr *err);
/* Appends every record of the workload as a JSON array ("[...]", "[]" when
 * none) to *out. */
KcStatus cache_list_schedules(Cache *c, const KcDigest *workload_key, KcBuf *out, KcErr *err);

void cache_stats(Cache *c, CacheStats *out);

#endif /* KCS_CACHE_H */
