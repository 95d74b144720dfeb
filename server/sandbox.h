/* sandbox.h - the one sandbox of kcsd's child processes: the compile
 * workers (kcsd-worker), their link helpers, and the verify runner
 * (kcsd-runner).
 *
 * A child enters it itself, early in main, before it reads any request:
 * kcsd spawns it with posix_spawn (an empty environment, stdin on
 * /dev/null), and sandbox_enter then makes the rest hold whatever the
 * parent did. Once entered it cannot be left: NO_NEW_PRIVS, the seccomp
 * filter, the Landlock domain and the rlimits are inherited by every thread
 * and child it makes, and nothing it may call undoes them.
 *
 * What sandbox_enter does, in this order:
 *   - clearenv(); closes every descriptor >= 3 but keep_fds; chdir(scratch);
 *   - prctl(PR_SET_PDEATHSIG, SIGKILL): the child dies with the thread
 *     that spawned it (kcsd's pool or verify threads live as long as kcsd);
 *   - writes 1000 to /proc/self/oom_score_adj: the OOM killer takes a
 *     child, never kcsd (the unit's OOMPolicy=continue keeps kcsd running);
 *   - drops every capability (bounding set, ambient, effective, permitted),
 *     which matters only when kcsd itself runs as root;
 *   - rlimits: CORE 0, NOFILE max_files, AS max_as_bytes outside sanitizer
 *     builds, NPROC 0 for SANDBOX_COMPILE and SANDBOX_RUN (the latter can
 *     defer it until its threads exist: sandbox_forbid_tasks);
 *   - PR_SET_NO_NEW_PRIVS 1;
 *   - Landlock, where the kernel has it (sandbox_landlock_abi() > 0): the
 *     process may read the system's files (/usr, /lib*, /bin, /sbin, the
 *     loader's files in /etc, /sys/devices/system/cpu, its own /proc/<pid>,
 *     a few /dev nodes) and read_paths, read and write only under scratch,
 *     and execute programs (SANDBOX_LINK only) only from the system's
 *     directories; it may not connect or bind TCP (ABI 4), and may signal
 *     no process outside its own domain (ABI 6). Without Landlock these are
 *     the uid's file permissions only; kcsd logs that once at start
 *     (sandbox_describe);
 *   - a libseccomp allow-list for the role (sandbox.def): no sockets, no
 *     process creation but threads (SANDBOX_LINK: the linker), no ptrace,
 *     mount, namespaces, keyrings, BPF, ...; unlisted calls fail with
 *     EPERM, a short list of escape tools kills the process (SIGSYS).
 * Returns false with a message in err (status KC_INTERNAL) if a mandatory
 * step fails (chdir, rlimits, capabilities, NO_NEW_PRIVS, Landlock on a
 * kernel that has it, seccomp); the caller then exits.
 * Threads: call it while the process has one thread of its own (a
 * sanitizer's background thread gets the seccomp filter through TSYNC).
 */
#ifndef KCS_SANDBOX_H
#define KCS_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

typedef enum SandboxRole {
	/* kcsd-worker: LLVM and the in-process linker; no new processes,
	 * no exec, threads only before NPROC 0 applies */
	SANDBOX_COMPILE,
	/* the worker's link helper: may start the system linker (ld,
	 * ld.lld-19), which inherits all of this; no NPROC limit */
	SANDBOX_LINK,
	/* kcsd-runner: dlopen a kernel, run it on threads it started
	 * before sandbox_forbid_tasks; no exec */
	SANDBOX_RUN,
} SandboxRole;

typedef struct SandboxPolicy {
	SandboxRole role;
	const char *scratch; /* the only writable directory; the working directory */
	const int *keep_fds; /* descriptors >= 3 that stay open */
	int nkeep;
	const char *const *read_paths; /* further files or directories it may read */
	int nread;
	int max_files;        /* RLIMIT_NOFILE (0: 64) */
	int64_t max_as_bytes; /* RLIMIT_AS (0: none; ignored in sanitizer builds) */
	bool defer_nproc;     /* SANDBOX_RUN: NPROC 0 only at sandbox_forbid_tasks */
} SandboxPolicy;

bool sandbox_enter(const SandboxPolicy *p, KcErr *err);

/* RLIMIT_NPROC 0 for a process that entered with defer_nproc, once it has
 * started its threads. false with err set if the limit cannot be set. */
bool sandbox_forbid_tasks(KcErr *err);

/* The kernel's Landlock ABI version (0: none, or disabled). */
int sandbox_landlock_abi(void);

/* One line for kcsd's log at start-up: what the children's sandbox will
 * hold on this kernel (warns where Landlock is missing). */
void sandbox_describe(char *buf, size_t cap, bool *degraded);

/* True in ASan/TSan builds (no RLIMIT_AS there). */
bool sandbox_sanitized(void);

#endif
