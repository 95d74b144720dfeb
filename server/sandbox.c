/* sandbox.c - the sandbox of kcsd's children (contract in sandbox.h).
 *
 * Two mechanisms, because neither alone is enough on a stock kernel:
 * seccomp sees system call numbers and arguments but not paths, so it
 * decides *what* a child may do (no sockets, no new processes, no ptrace);
 * Landlock sees paths, so it decides *where* (write only in scratch, read
 * only the system's files). Landlock is optional (a kernel may lack it or
 * have it disabled); seccomp is not.
 *
 * The allow-lists are in sandbox.def; the calls whose safety depends on
 * their arguments are in allow_with_args below.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox.h"

/* Sanitizers reserve terabytes of shadow address space: no RLIMIT_AS
 * there. GCC says so with __SANITIZE_*__, clang only through
 * __has_feature. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANDBOX_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANDBOX_SANITIZED 1
#endif
#endif

bool
sandbox_sanitized(void)
{
#ifdef SANDBOX_SANITIZED
	return true;
#else
	return false;
#endif
}

/* ---- Landlock ------------------------------------------------------------
 * Debian 12's headers stop at ABI 2; the later rights and the ruleset's
 * later fields are spelled out here. A kernel refuses a right it does not
 * know (EINVAL), so each is masked by the ABI the kernel reports. */

#define LL_FS_EXECUTE (1ull << 0)
#define LL_FS_WRITE_FILE (1ull << 1)
#define LL_FS_READ_FILE (1ull << 2)
#define LL_FS_READ_DIR (1ull << 3)
#define LL_FS_REMOVE_DIR (1ull << 4)
#define LL_FS_REMOVE_FILE (1ull << 5)
#define LL_FS_MAKE_DIR (1ull << 7)
#define LL_FS_MAKE_REG (1ull << 8)
#define LL_FS_REFER (1ull << 13)           /* ABI 2 */
#define LL_FS_TRUNCATE (1ull << 14)        /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ull << 15)       /* ABI 5 */
#define LL_NET_BIND_TCP (1ull << 0)        /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ull << 1)     /* ABI 4 */
#define LL_SCOPE_ABSTRACT_UNIX (1ull << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ull << 1)        /* ABI 6 */
/* the rights a rule on a regular file (not a directory) may carry */
#define LL_FS_FILE_RIGHTS                                                                          \
	(LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)

typedef struct LlRulesetAttr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
} LlRulesetAttr;

typedef struct __attribute__((packed)) LlPathBeneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} LlPathBeneath;

int
sandbox_landlock_abi(void)
{
	long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	return v > 0 ? (int)v : 0;
}

static uint64_t
ll_fs_handled(int abi)
{
	uint64_t fs = (1ull << 13) - 1; /* ABI 1: EXECUTE .. MAKE_SYM */
	if (abi >= 2)
		fs |= LL_FS_REFER;
	if (abi >= 3)
		fs |= LL_FS_TRUNCATE;
	if (abi >= 5)
		fs |= LL_FS_IOCTL_DEV;
	return fs;
}

/* One rule: `rights` (masked by what the ruleset handles, and to file
 * rights where path is not a directory) beneath path. A path that does
 * not exist is no rule. */
static bool
ll_allow(int rfd, const char *path, uint64_t rights, uint64_t handled, KcErr *err)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return true;
		return kc_fail(err, KC_INTERNAL, NULL, "landlock: cannot open %s: %s", path,
		               strerror(errno)),
		       false;
	}
	struct stat sb;
	rights &= handled;
	if (fstat(fd, &sb) == 0 && !S_ISDIR(sb.st_mode))
		rights &= LL_FS_FILE_RIGHTS;
	LlPathBeneath pb = {.allowed_access = rights, .parent_fd = fd};
	long r =
	    rights ? syscall(SYS_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) : 0;
	int e = errno;
	close(fd);
	if (r != 0)
		return kc_fail(err, KC_INTERNAL, NULL, "landlock: rule for %s: %s", path,
		               strerror(e)),
		       false;
	return true;
}

/* The system's files, readable by every role. Of /etc only what the
 * dynamic loader and the clock read: /etc/kcsd may hold kcsd's TLS key,
 * readable by kcsd's uid and so by its children's. */
static const char *const system_read[] = {
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/sys/devices/system/cpu",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
    /* its own /proc entry only (opened now, so it is this process's):
     * /proc/<kcsd>/environ and the other processes' maps stay out */
    "/proc/self",
};

static bool
landlock_enter(const SandboxPolicy *p, int abi, KcErr *err)
{
	LlRulesetAttr ra = {.handled_access_fs = ll_fs_handled(abi)};
	if (abi >= 4)
		ra.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
	if (abi >= 6)
		ra.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
	int rfd = (int)syscall(SYS_landlock_create_ruleset, &ra, sizeof ra, 0);
	if (rfd < 0)
		return kc_fail(err, KC_INTERNAL, NULL, "landlock_create_ruleset: %s",
		               strerror(errno)),
		       false;
	uint64_t h = ra.handled_access_fs;
	uint64_t ro = LL_FS_READ_FILE | LL_FS_READ_DIR;
	/* the linker is a program of the system's; nothing in scratch runs */
	uint64_t sys = ro | (p->role == SANDBOX_LINK ? LL_FS_EXECUTE : 0);
	uint64_t rw = ro | LL_FS_WRITE_FILE | LL_FS_MAKE_REG | LL_FS_MAKE_DIR | LL_FS_REMOVE_FILE |
	              LL_FS_REMOVE_DIR | LL_FS_TRUNCATE | LL_FS_REFER;
	bool ok = true;
	for (size_t i = 0; ok && i < sizeof system_read / sizeof *system_read; i++)
		ok = ll_allow(rfd, system_read[i], sys, h, err);
	ok = ok && ll_allow(rfd, "/dev/null", ro | LL_FS_WRITE_FILE | LL_FS_TRUNCATE, h, err);
	for (int i = 0; ok && i < p->nread; i++)
		ok = ll_allow(rfd, p->read_paths[i], ro, h, err);
	ok = ok && ll_allow(rfd, p->scratch, rw, h, err);
	if (ok && syscall(SYS_landlock_restrict_self, rfd, 0) != 0) {
		kc_fail(err, KC_INTERNAL, NULL, "landlock_restrict_self: %s", strerror(errno));
		ok = false;
	}
	close(rfd);
	return ok;
}

/* ---- seccomp ------------------------------------------------------------- */

enum { C = 1 << SANDBOX_COMPILE, L = 1 << SANDBOX_LINK, R = 1 << SANDBOX_RUN };

typedef struct SysRow {
	const char *name;
	unsigned roles;
} SysRow;

static const SysRow sys_rows[] = {
#define SYS(name, roles) {#name, roles},
#define KILL(name)
#include "sandbox.def"
#undef KILL
#undef SYS
};

/* The calls that kill the process instead (sandbox.def's KILL rows). */
static const char *const fatal[] = {
#define SYS(name, roles)
#define KILL(name) #name,
#include "sandbox.def"
#undef KILL
#undef SYS
};

static int
resolve(const char *name)
{
	int nr = seccomp_syscall_resolve_name(name);
	return nr < 0 ? -1 : nr; /* absent on this CPU (pseudo numbers are negative) */
}

#define ADD(action, name, ...)                                                                     \
	do {                                                                                       \
		int nr_ = resolve(name);                                                           \
		if (nr_ >= 0 && rc == 0)                                                           \
			rc = seccomp_rule_add(ctx, action, nr_, __VA_ARGS__);                      \
	} while (0)

/* libseccomp's SCMP_A* macros leave datum_b to the compiler (clang's
 * -Wmissing-field-initializers); these spell every field. */
static struct scmp_arg_cmp
arg_eq(unsigned arg, scmp_datum_t v)
{
	return (struct scmp_arg_cmp){.arg = arg, .op = SCMP_CMP_EQ, .datum_a = v, .datum_b = 0};
}

/* (argument & mask) == v */
static struct scmp_arg_cmp
arg_masked(unsigned arg, scmp_datum_t mask, scmp_datum_t v)
{
	return (struct scmp_arg_cmp){
	    .arg = arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = mask, .datum_b = v};
}

/* The calls that are safe only with some arguments. */
static int
allow_with_args(scmp_filter_ctx ctx, SandboxRole role)
{
	int rc = 0;
	const scmp_datum_t self = (scmp_datum_t)getpid();
	const scmp_datum_t ns = CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
	                        CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
	/* clone3 passes its flags in memory the filter cannot read: ENOSYS
	 * makes glibc fall back to clone */
	ADD(SCMP_ACT_ERRNO(ENOSYS), "clone3", 0);
	if (role == SANDBOX_LINK) {
		/* threads (ld.lld), and the linker's own process, in no new
		 * namespace; signals to it (Landlock's scope, where the kernel
		 * has ABI 6, keeps them inside this sandbox) */
		ADD(SCMP_ACT_ALLOW, "clone", 1, arg_masked(0, ns, 0));
		ADD(SCMP_ACT_ALLOW, "kill", 0);
		ADD(SCMP_ACT_ALLOW, "tgkill", 0);
	} else {
		/* threads only, no processes (and NPROC 0 stops even those once
		 * it applies, for any uid but root) */
		ADD(SCMP_ACT_ALLOW, "clone", 1, arg_masked(0, CLONE_THREAD, CLONE_THREAD));
		/* raise() and abort(): this process only */
		ADD(SCMP_ACT_ALLOW, "tgkill", 1, arg_eq(0, self));
		ADD(SCMP_ACT_ALLOW, "kill", 1, arg_eq(0, self));
	}
	/* rlimits: this process's (lowering them; raising the hard limit
	 * needs a capability it no longer has) */
	ADD(SCMP_ACT_ALLOW, "prlimit64", 1, arg_eq(0, 0));
	ADD(SCMP_ACT_ALLOW, "setrlimit", 0);
	/* isatty() and the terminal width (LLVM's and ld's output streams) */
	ADD(SCMP_ACT_ALLOW, "ioctl", 1, arg_eq(1, (scmp_datum_t)TCGETS));
	ADD(SCMP_ACT_ALLOW, "ioctl", 1, arg_eq(1, (scmp_datum_t)TIOCGWINSZ));
	ADD(SCMP_ACT_ALLOW, "ioctl", 1, arg_eq(1, (scmp_datum_t)FIONREAD));
	/* naming threads and mappings, reading its own state */
	static const int prctl_ok[] = {PR_SET_NAME,         PR_GET_NAME,    PR_GET_DUMPABLE,
	                               PR_GET_NO_NEW_PRIVS, PR_GET_SECCOMP, PR_GET_PDEATHSIG,
	                               PR_CAPBSET_READ,     PR_SET_VMA};
	for (size_t i = 0; i < sizeof prctl_ok / sizeof *prctl_ok; i++)
		ADD(SCMP_ACT_ALLOW, "prctl", 1, arg_eq(0, (scmp_datum_t)prctl_ok[i]));
	return rc;
}

static bool
seccomp_enter(SandboxRole role, KcErr *err)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!ctx)
		return kc_fail(err, KC_INTERNAL, NULL, "seccomp_init failed"), false;
	/* a sanitizer's background thread, if any, gets the filter too */
	int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
	const char *what = "tsync";
	for (size_t i = 0; rc == 0 && i < sizeof sys_rows / sizeof *sys_rows; i++) {
		if (!(sys_rows[i].roles & (1u << role)))
			continue;
		what = sys_rows[i].name;
		ADD(SCMP_ACT_ALLOW, sys_rows[i].name, 0);
	}
	for (size_t i = 0; rc == 0 && i < sizeof fatal / sizeof *fatal; i++) {
		what = fatal[i];
		ADD(SCMP_ACT_KILL_PROCESS, fatal[i], 0);
	}
	if (rc == 0) {
		what = "argument rules";
		rc = allow_with_args(ctx, role);
	}
	if (rc == 0) {
		what = "seccomp_load";
		rc = seccomp_load(ctx);
	}
	seccomp_release(ctx);
	if (rc != 0)
		return kc_fail(err, KC_INTERNAL, NULL, "seccomp (%s): %s", what, strerror(-rc)),
		       false;
	return true;
}

/* ---- the rest ---------------------------------------------------------- */

static int
cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* Closes every descriptor >= 3 that is not in keep. */
static void
close_others(const int *keep, int nkeep)
{
	int k[64];
	int n = 0;
	for (int i = 0; i < nkeep && n < 64; i++)
		if (keep[i] >= 3)
			k[n++] = keep[i];
	qsort(k, (size_t)n, sizeof *k, cmp_int);
	unsigned lo = 3;
	for (int i = 0; i < n; i++) {
		if ((unsigned)k[i] > lo)
			syscall(SYS_close_range, lo, (unsigned)k[i] - 1, 0);
		lo = (unsigned)k[i] + 1;
	}
	syscall(SYS_close_range, lo, ~0u, 0);
}

static bool
set_limit(int res, rlim_t v, const char *name, KcErr *err)
{
	struct rlimit rl = {v, v};
	if (setrlimit(res, &rl) != 0)
		return kc_fail(err, KC_INTERNAL, NULL, "setrlimit(%s): %s", name, strerror(errno)),
		       false;
	return true;
}

/* Every capability out of every set: a root kcsd's children keep its uid
 * (and its files) but none of root's powers. */
static bool
drop_capabilities(KcErr *err)
{
	for (int c = 0; c < 64; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno == EINVAL)
			break; /* past the last capability; EPERM: not ours to drop */
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	if (syscall(SYS_capset, &h, d) != 0)
		return kc_fail(err, KC_INTERNAL, NULL, "capset: %s", strerror(errno)), false;
	return true;
}

bool
sandbox_enter(const SandboxPolicy *p, KcErr *err)
{
	KC_ASSERT(p && p->scratch && *p->scratch);
	clearenv();
	close_others(p->keep_fds, p->nkeep);
	if (chdir(p->scratch) != 0)
		return kc_fail(err, KC_INTERNAL, NULL, "chdir %s: %s", p->scratch, strerror(errno)),
		       false;
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* best effort: without /proc the OOM killer still picks by size */
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t w = write(fd, "1000", 4);
		(void)w;
		close(fd);
	}
	if (!drop_capabilities(err))
		return false;
	bool nproc = p->role != SANDBOX_LINK && !p->defer_nproc;
	if (!set_limit(RLIMIT_CORE, 0, "CORE", err) ||
	    !set_limit(RLIMIT_NOFILE, (rlim_t)(p->max_files > 0 ? p->max_files : 64), "NOFILE",
	               err) ||
	    (!sandbox_sanitized() && p->max_as_bytes > 0 &&
	     !set_limit(RLIMIT_AS, (rlim_t)p->max_as_bytes, "AS", err)))
		return false;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return kc_fail(err, KC_INTERNAL, NULL, "PR_SET_NO_NEW_PRIVS: %s", strerror(errno)),
		       false;
	int abi = sandbox_landlock_abi();
	if (abi > 0 && !landlock_enter(p, abi, err))
		return false;
	if (!seccomp_enter(p->role, err))
		return false;
	/* last: a root process ignores it, and for any other uid it must not
	 * stop the set-up above (libseccomp's own threads, if any) */
	return !nproc || set_limit(RLIMIT_NPROC, 0, "NPROC", err);
}

bool
sandbox_forbid_tasks(KcErr *err)
{
	return set_limit(RLIMIT_NPROC, 0, "NPROC", err);
}

void
sandbox_describe(char *buf, size_t cap, bool *degraded)
{
	int abi = sandbox_landlock_abi();
	*degraded = abi == 0;
	if (abi == 0)
		snprintf(
		    buf, cap,
		    "sandbox of compile workers and runners: seccomp allow-lists, NO_NEW_PRIVS, "
		    "rlimits; this kernel has no Landlock, so they may read and write whatever "
		    "kcsd's user may (run kcsd as its own user, as the systemd unit does)");
	else
		snprintf(
		    buf, cap,
		    "sandbox of compile workers and runners: seccomp allow-lists, NO_NEW_PRIVS, "
		    "rlimits, Landlock ABI %d (writes only in their scratch directories%s%s)",
		    abi, abi >= 4 ? ", no TCP" : "", abi >= 6 ? ", signals kept inside" : "");
}
