/* worker.h - compiles in child processes: the job, the worker's serve
 * loop, and the supervised pool kcsd keeps of them.
 *
 * LLVM has no recovery from its own fatal errors (an instruction it cannot
 * select aborts the process), and a pathological graph can run or allocate
 * without bound. So kcsd never runs LLVM itself: every compile, dump and
 * assembly listing is a KcJob sent to a kcsd-worker process, which answers
 * with a KcJobResult or an error record. A worker that crashes, runs past
 * the deadline or exhausts its address space costs that one job (and the
 * requests waiting on it) an error, never the daemon.
 *
 * Wire (a private format between processes of one build, so structs of
 * compiler.h travel as bytes): the worker first writes the text line
 *   "kcsd-worker-v1 build_id=<id> pid=<pid>\n"
 * on its socket, then serves frames: a 16-byte header ("KCW1", u32 kind,
 * u64 payload bytes) and a payload of fields (u32 tag, u32 0, u64 bytes,
 * the bytes). One job at a time; the worker exits when the socket closes.
 *
 * Threads: a KcPool is thread-safe; kc_pool_run blocks its caller for one
 * job. The worker side (kc_worker_serve) is single-threaded.
 */
#ifndef KCS_WORKER_H
#define KCS_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "compiler.h"

/* Test-only faults a job can carry (POST /v1/compile?inject=, behind
 * test_fault_injection): the worker misbehaves where a compile would run. */
typedef enum KcInject {
#define X(e, name) KC_INJECT_##e,
#include "inject.def"
#undef X
	KC_INJECT_COUNT
} KcInject;
/* "crash", ...; "" for KC_INJECT_NONE. */
const char *kc_inject_name(KcInject i);
/* The fault called name, or KC_INJECT_COUNT. */
KcInject kc_inject_lookup(const char *name);

typedef enum KcJobKind {
	KC_JOB_COMPILE, /* parse, schedule, kc_compile: an artifact (and a dump) */
	KC_JOB_ASM,     /* kc_ir_to_asm of stored IR: text */
} KcJobKind;

/* What a worker needs for one job. Pointers are borrowed for the call. */
typedef struct KcJob {
	KcJobKind kind;
	/* KC_JOB_COMPILE: the graph, either a composite body (kc_parse) or, when
	 * canonical is set, a canonical workload and its name
	 * (kc_parse_workload), read with `limits`; the schedule as template
	 * and canonical knobs (kc_schedule_from_json; template NULL: the
	 * default schedule); the compile options. */
	const char *body;
	size_t body_len;
	const char *canonical;
	size_t canonical_len;
	const char *name;
	KcLimits limits;
	const char *template_name;
	const char *knobs;
	const char *linker; /* KcCompileOptions.linker */
	bool want_ir;
	bool verify;
	bool want_dump;
	unsigned dump_passes;
	KcInject inject;
	/* KC_JOB_ASM: the IR text */
	const char *ir;
	size_t ir_len;
	/* both */
	KcTarget target;
} KcJob;

/* A job's outcome: the artifact of a compile (and its dump when asked),
 * or the text of an assembly listing. Owned by the caller. */
typedef struct KcJobResult {
	KcArtifact art;
	KcBuf dump;
	KcBuf text;
} KcJobResult;
void kc_job_result_free(KcJobResult *r); /* NULL allowed */

/* The worker's end of its link helper's socket. gone: the helper died or
 * misbehaved; the worker then links nothing more with the system linker. */
typedef struct KcLinkHelper {
	int fd;
	bool gone;
} KcLinkHelper;

/* Runs a job in this process (what the worker does with a job it reads).
 * The CompileCtx is made and freed here. helper NULL: a link that needs
 * the system linker spawns it from this process; else it goes to the
 * helper (kc_link_via_helper). */
KcStatus kc_job_run(const KcJob *job, KcLinkHelper *helper, KcJobResult *out, KcErr *err);

/* ---- the worker side ---------------------------------------------------- */

/* Serves jobs on fd (a connected stream socket) until it closes, then
 * returns 0; a malformed frame returns 1. Writes the hello line first.
 * link_fd: the link helper's socket (-1: none; the system linker is then
 * spawned from this process). The loop also ends, returning 0, when the
 * helper goes while the worker is idle, or after the reply to a job
 * during which it went: kcsd then starts a fresh worker. */
int kc_worker_serve(int fd, int link_fd);

/* ---- the link helper ---------------------------------------------------
 * The worker's sandbox lets it start no program, so the system linker
 * (AArch64 objects; what the in-process linker refuses) runs in a helper
 * process kcsd-worker forks before it enters the sandbox, in a sandbox of
 * its own that allows the linker (docs/security.md). */

/* The helper's loop: reads WIRE_LINK frames on fd, links each with
 * kc_link_system in the working directory, answers WIRE_LINKED, until the
 * socket closes (0) or a malformed frame (1). */
int kc_link_helper_serve(int fd);
/* A KcSystemLinkFn that sends the object to the helper: ctx is a
 * KcLinkHelper. A helper that is gone, or answers nonsense, is KC_INTERNAL
 * and marks it gone. */
KcStatus kc_link_via_helper(void *ctx, const unsigned char *obj, size_t obj_len, const char *triple,
                            const char *linker, const char *tmpdir, unsigned char **out,
                            size_t *out_len, KcErr *err);

/* ---- the pool (kcsd) ---------------------------------------------------- */

typedef struct KcPool KcPool;

typedef struct KcPoolConfig {
	const char *exe;          /* the kcsd-worker executable */
	const char *scratch_root; /* each worker gets a private directory here */
	int size;                 /* workers (>= 1) */
	int timeout_s;            /* hard deadline of one job (>= 1) */
	int64_t max_bytes;        /* each worker's RLIMIT_AS (0: none) */
	const char *build_id;     /* what every worker must report */
	const char *log_level;    /* passed on: "debug", "info", "warn", "error" */
} KcPoolConfig;

/* Starts cfg->size workers and waits until each has said hello with
 * cfg->build_id and done one throw-away compile. NULL with err set
 * (KC_INTERNAL) when one cannot start, a hello is malformed, a build id
 * differs (the message names both) or the warm-up fails. Strings in cfg
 * are copied. */
KcPool *kc_pool_start(const KcPoolConfig *cfg, KcErr *err);

/* Runs one job on an idle worker, waiting for one (a replacement being
 * started) for at most the deadline. Returns KC_OK with *out filled, the
 * job's own error (as kc_job_run would), or:
 *   KC_COMPILE_TIMEOUT  the job ran past timeout_s; the worker was killed
 *   KC_COMPILER_CRASHED the worker died (a signal, an exit, its memory cap,
 *                       a malformed reply); the message names the signal
 *   KC_OVERLOADED       no worker became idle in time (none could start)
 *   KC_SHUTTING_DOWN    kc_pool_stop was called
 * A dead or killed worker is replaced in the background (spawn, hello,
 * warm-up) before it takes work. */
KcStatus kc_pool_run(KcPool *p, const KcJob *job, KcJobResult *out, KcErr *err);

typedef struct KcPoolStats {
	int size;         /* configured */
	int ready;        /* idle and warm */
	int busy;         /* running a job */
	uint64_t started; /* workers that reached ready, replacements included */
	uint64_t start_failures;
	uint64_t crashes;  /* jobs lost to a dying worker */
	uint64_t timeouts; /* jobs killed at the deadline */
	uint64_t oom;      /* of the crashes, those at the memory cap */
	uint64_t jobs;     /* jobs answered by a worker (success or the job's error) */
	int64_t pids[64];  /* live worker PIDs (0: none), first min(size, 64) slots */
} KcPoolStats;
void kc_pool_stats(KcPool *p, KcPoolStats *out);

/* Kills every worker and fails running and future jobs with
 * KC_SHUTTING_DOWN (a stop that does not wait for compiles). */
void kc_pool_stop(KcPool *p);
void kc_pool_free(KcPool *p); /* stops, reaps, removes scratch; NULL allowed */

#endif
