/* sandbox.h - the one sandbox of kcsd's child processes: the compile
 * workers (kcsd-worker) and the verify runner (kcsd-runner).
 *
 * A child enters it itself, early in main, before it reads any request:
 * kcsd spawns it with posix_spawn (an empty environment, stdin on
 * /dev/null), and sandbox_enter then makes the rest hold whatever the
 * parent did. Once entered it cannot be left (NO_NEW_PRIVS, a seccomp
 * filter, a Landlock domain are inherited by anything the child execs).
 *
 * What it does, in this order:
 *   - clearenv(); chdir(scratch);
 *   - closes every descriptor >= 3 but keep_fds;
 *   - prctl(PR_SET_PDEATHSIG, SIGKILL) (and exits if the parent is already gone);
 *   - writes 1000 to /proc/self/oom_score_adj (the OOM killer takes a child, never kcsd);
 *   - rlimits: CORE 0, NOFILE max_files, NPROC 0 where the role allows it
 *     (see SandboxRole), AS max_as_bytes outside sanitizer builds (0: none);
 *   - Landlock (when the kernel has it; else logged once to stderr and skipped):
 *     read/write/create only under `scratch`; read-only (and execute, for the
 *     compile role's system linker) under /usr /lib /lib64 /bin /etc; nothing else;
 *   - PR_SET_NO_NEW_PRIVS 1, then a libseccomp allow-list for the role:
 *     no socket/connect/bind/accept/..., no ptrace, no mount, ... (default
 *     action: SCMP_ACT_ERRNO(EPERM) for unlisted calls, kill for a few dangerous ones).
 * Returns false with a message in err (msg only; status KC_INTERNAL) if a
 * mandatory step fails (seccomp, NO_NEW_PRIVS, rlimits); the caller exits.
 * Not thread-safe: call it while the process has one thread, except that
 * SANDBOX_RUN may be entered after the runner's kernel threads exist
 * (seccomp with SCMP_FLTATR_CTL_TSYNC). */
#ifndef KCS_SANDBOX_H
#define KCS_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

typedef enum SandboxRole {
	/* kcsd-worker: LLVM and the in-process linker; may spawn the system
	 * linker (ld, ld.lld-19) as its child, which inherits all of it */
	SANDBOX_COMPILE,
	/* kcsd-runner: dlopen a kernel from scratch, run it on threads that
	 * exist already; no process creation at all */
	SANDBOX_RUN,
} SandboxRole;

typedef struct SandboxPolicy {
	SandboxRole role;
	const char *scratch; /* the only writable directory; the working directory */
	const int *keep_fds; /* descriptors >= 3 that stay open */
	int nkeep;
	int max_files;        /* RLIMIT_NOFILE (0: 64) */
	int64_t max_as_bytes; /* RLIMIT_AS (0: none; ignored in sanitizer builds) */
} SandboxPolicy;

bool sandbox_enter(const SandboxPolicy *p, KcErr *err);
/* True in ASan/TSan builds (no RLIMIT_AS there). */
bool sandbox_sanitized(void);

#endif
