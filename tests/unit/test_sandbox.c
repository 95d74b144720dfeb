/* test_sandbox.c - server/sandbox.c from the inside: each case forks a
 * child that enters one role's sandbox and tries what the sandbox must
 * allow (its scratch, the system's files, threads) and what it must not
 * (sockets, new processes, exec, signals to its parent, files outside
 * scratch, the parent's /proc, ptrace). The child reports each check as
 * a byte on a pipe; the parent turns them into TAP lines, so a check that
 * kills the child (SIGSYS) is seen as such.
 *
 * As root, the same cases run again as uid 65534 (nobody), where
 * RLIMIT_NPROC 0 really stops new tasks (root ignores it).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox.h"
#include "t.h"

static char scratch[256], outside[256];
static void remove_tree(const char *dir);
static int landlock;
static uid_t as_uid; /* 0: the test's own uid */

/* ---- the child's side: checks as lines on a pipe ----------------------- */

static int report_fd = -1;

static void
say(bool ok, const char *fmt, ...)
{
	char line[400];
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(line, sizeof line, "%c", ok ? '+' : '-');
	n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	ssize_t w = write(report_fd, line, (size_t)n);
	(void)w;
}

static const char *
status_field(const char *name, char *buf, size_t cap)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	buf[0] = 0;
	while (f && fgets(line, sizeof line, f)) {
		size_t n = strlen(name);
		if (strncmp(line, name, n) == 0 && line[n] == ':') {
			const char *v = line + n + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			snprintf(buf, cap, "%s", v);
			buf[strcspn(buf, "\n")] = 0;
		}
	}
	if (f)
		fclose(f);
	return buf;
}

/* Reports whether call fails (< 0) with errno want, naming the errno. */
#define SAY_FAILS(call, want, what)                                                                \
	do {                                                                                       \
		errno = 0;                                                                         \
		long r_ = (long)(call);                                                            \
		int e_ = errno;                                                                    \
		say(r_ < 0 && e_ == (want), "%s (errno %d)", what, e_);                            \
	} while (0)

static bool
limit_is(int res, rlim_t want)
{
	struct rlimit rl;
	return getrlimit(res, &rl) == 0 && rl.rlim_cur == want && rl.rlim_max == want;
}

static void *
nothing(void *arg)
{
	return arg;
}

extern char **environ;

/* What every role holds. */
static void
common_checks(const SandboxPolicy *p, int kept_fd)
{
	char buf[128], cwd[256];
	say(environ == NULL || environ[0] == NULL, "the environment is empty");
	say(getcwd(cwd, sizeof cwd) && strcmp(cwd, p->scratch) == 0,
	    "the working directory is scratch (%s)", cwd);
	say(strcmp(status_field("NoNewPrivs", buf, sizeof buf), "1") == 0, "NoNewPrivs: %s", buf);
	say(strcmp(status_field("Seccomp", buf, sizeof buf), "2") == 0, "Seccomp: %s", buf);
	say(strcmp(status_field("CapEff", buf, sizeof buf), "0000000000000000") == 0 &&
	        strcmp(status_field("CapPrm", buf, sizeof buf), "0000000000000000") == 0,
	    "no capabilities (CapPrm %s)", buf);
	/* dropping the bounding set takes CAP_SETPCAP, which only a root
	 * parent had; with NO_NEW_PRIVS nothing regains what it lists */
	status_field("CapBnd", buf, sizeof buf);
	say(as_uid != 0 || strcmp(buf, "0000000000000000") == 0, "an empty bounding set (%s)", buf);
	say(limit_is(RLIMIT_CORE, 0), "RLIMIT_CORE 0");
	say(limit_is(RLIMIT_NOFILE, 64), "RLIMIT_NOFILE 64");
	say(sandbox_sanitized() || limit_is(RLIMIT_AS, (rlim_t)1 << 33), "RLIMIT_AS 8 GiB");
	int fd = open("/proc/self/oom_score_adj", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	say(atoi(buf) == 1000, "oom_score_adj 1000 (%s)", buf);
	say(fcntl(kept_fd, F_GETFD) >= 0, "the kept descriptor is open");
	say(fcntl(kept_fd + 1, F_GETFD) < 0 && errno == EBADF,
	    "an inherited descriptor not kept is closed");

	SAY_FAILS(socket(AF_INET, SOCK_STREAM, 0), EPERM, "no TCP socket");
	SAY_FAILS(socket(AF_UNIX, SOCK_STREAM, 0), EPERM, "no unix socket");
	SAY_FAILS(kill(getppid(), 0), EPERM, "cannot signal its parent");

	/* files: its scratch, yes; the system's, read; anything else, no */
	int w = open("made.txt", O_WRONLY | O_CREAT | O_TRUNC, 0600);
	say(w >= 0, "creates a file in scratch (errno %d)", w < 0 ? errno : 0);
	if (w >= 0)
		close(w);
	say(open("/usr/lib/os-release", O_RDONLY) >= 0, "reads a system file");
	say(open("/etc/ld.so.cache", O_RDONLY) >= 0, "reads the loader's cache");
	if (landlock) {
		char path[400];
		snprintf(path, sizeof path, "%s/escaped.txt", outside);
		SAY_FAILS(open(path, O_WRONLY | O_CREAT, 0600), EACCES,
		          "cannot create a file outside scratch");
		snprintf(path, sizeof path, "%s/secret.txt", outside);
		SAY_FAILS(open(path, O_RDONLY), EACCES,
		          "cannot read a file outside scratch and the system's");
		snprintf(path, sizeof path, "/proc/%d/environ", (int)getppid());
		SAY_FAILS(open(path, O_RDONLY), EACCES, "cannot read its parent's environ");
		SAY_FAILS(open("/tmp/kcs-sandbox-escape", O_WRONLY | O_CREAT, 0600), EACCES,
		          "cannot write in /tmp");
		/* /etc/kcsd may hold kcsd's TLS key */
		SAY_FAILS(open("/etc/passwd", O_RDONLY), EACCES, "cannot read the rest of /etc");
	}
}

static void
compile_checks(const SandboxPolicy *p, int kept_fd)
{
	common_checks(p, kept_fd);
	say(limit_is(RLIMIT_NPROC, 0), "RLIMIT_NPROC 0");
	errno = 0;
	pid_t pid = fork();
	int e = errno;
	if (pid == 0)
		_exit(0);
	say(pid < 0 && e == EPERM, "cannot fork (errno %d)", e);
	char *argv[] = {"/bin/true", NULL}, *envp[] = {NULL};
	SAY_FAILS(execve("/bin/true", argv, envp), EPERM, "cannot exec");
	pthread_t th;
	int rc = pthread_create(&th, NULL, nothing, NULL);
	if (rc == 0)
		pthread_join(th, NULL);
	/* NPROC 0 binds every uid but root */
	say(geteuid() == 0 ? rc == 0 : rc == EAGAIN, "threads: pthread_create %d as uid %d", rc,
	    (int)geteuid());
}

static void
link_checks(const SandboxPolicy *p, int kept_fd)
{
	common_checks(p, kept_fd);
	pid_t pid = fork();
	if (pid == 0) {
		char *argv[] = {"/bin/true", NULL}, *envp[] = {NULL};
		execve("/bin/true", argv, envp);
		_exit(127);
	}
	int st = -1;
	if (pid > 0)
		waitpid(pid, &st, 0);
	say(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "runs a system program (status %d)",
	    st);
	if (landlock) {
		/* a program written in scratch does not run */
		int in = open("/bin/true", O_RDONLY), out = open("prog", O_WRONLY | O_CREAT, 0700);
		char buf[65536];
		ssize_t n;
		while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
			if (write(out, buf, (size_t)n) != n)
				break;
		close(in);
		close(out);
		pid = fork();
		if (pid == 0) {
			char *argv[] = {"./prog", NULL}, *envp[] = {NULL};
			execve("./prog", argv, envp);
			_exit(errno == EACCES ? 126 : 127);
		}
		if (pid > 0)
			waitpid(pid, &st, 0);
		say(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 126,
		    "a program copied into scratch does not run (status %d)", st);
	}
}

static void *
spin_wait(void *arg)
{
	return arg;
}

static void
run_checks(const SandboxPolicy *p, int kept_fd)
{
	/* threads before sandbox_forbid_tasks, none after (but for root) */
	pthread_t th;
	int before = pthread_create(&th, NULL, spin_wait, NULL);
	if (before == 0)
		pthread_join(th, NULL);
	KcErr err = {0};
	bool forbade = sandbox_forbid_tasks(&err);
	int after = pthread_create(&th, NULL, spin_wait, NULL);
	if (after == 0)
		pthread_join(th, NULL);
	say(before == 0 && forbade, "threads start before sandbox_forbid_tasks (%d)", before);
	say(geteuid() == 0 ? after == 0 : after == EAGAIN,
	    "and none after it, as uid %d (pthread_create %d)", (int)geteuid(), after);
	common_checks(p, kept_fd);
	say(limit_is(RLIMIT_NPROC, 0), "RLIMIT_NPROC 0");
	char *argv[] = {"/bin/true", NULL}, *envp[] = {NULL};
	SAY_FAILS(execve("/bin/true", argv, envp), EPERM, "cannot exec");
	/* the kernel file it was given stays readable */
	say(open(p->read_paths[0], O_RDONLY) >= 0, "reads its read_paths");
}

static void
ptrace_check(const SandboxPolicy *p, int kept_fd)
{
	(void)p;
	(void)kept_fd;
	say(true, "about to call ptrace");
	ptrace(PTRACE_TRACEME, 0, NULL, NULL);
	say(false, "ptrace returned");
}

/* ---- the parent's side ------------------------------------------------- */

typedef void (*Checks)(const SandboxPolicy *p, int kept_fd);

/* Forks a child that enters role's sandbox and runs checks; returns its
 * wait status, each reported line an OK. */
static int
in_sandbox(SandboxRole role, Checks checks, const char *label)
{
	int pfd[2];
	if (pipe(pfd) != 0)
		return -1;
	char readable[400];
	snprintf(readable, sizeof readable, "%s/kernel.so", outside);
	/* a fresh scratch directory, its user's */
	snprintf(scratch, sizeof scratch, "/tmp/kcs-sandbox-scratch-XXXXXX");
	if (!mkdtemp(scratch) || (as_uid && chown(scratch, as_uid, as_uid) != 0)) {
		OKF(0, "cannot make a scratch directory for uid %d", (int)as_uid);
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		/* the report pipe is kept; the descriptor above it is not */
		int keep = dup2(pfd[1], 10);
		int stray = dup2(pfd[1], 11);
		(void)stray;
		report_fd = keep;
		setenv("KCSD_DB_PASSWORD", "hunter2", 1);
		/* as a process of that uid that kcsd spawned would be: exec
		 * leaves it dumpable, so its /proc files are its own */
		if (as_uid && (setgroups(0, NULL) != 0 || setresgid(as_uid, as_uid, as_uid) != 0 ||
		               setresuid(as_uid, as_uid, as_uid) != 0 ||
		               prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0))
			_exit(3);
		const char *rp[] = {readable};
		SandboxPolicy pol = {
		    .role = role,
		    .scratch = scratch,
		    .keep_fds = &keep,
		    .nkeep = 1,
		    .read_paths = rp,
		    .nread = 1,
		    .max_as_bytes = (int64_t)1 << 33,
		    .defer_nproc = role == SANDBOX_RUN,
		};
		KcErr err = {0};
		int64_t t0 = kc_now_us();
		if (!sandbox_enter(&pol, &err)) {
			say(false, "sandbox_enter: %s", err.msg);
			_exit(2);
		}
		/* informational (docs/security.md quotes it), never asserted */
		say(true, "sandbox_enter took %lld us", (long long)(kc_now_us() - t0));
		checks(&pol, keep);
		_exit(0);
	}
	close(pfd[1]);
	FILE *f = fdopen(pfd[0], "r");
	char line[400];
	while (f && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		OKF(line[0] == '+', "%s (uid %d): %s", label, (int)as_uid, line + 1);
		printf("# %s: %s\n", label, line + 1);
	}
	if (f)
		fclose(f);
	int st = -1;
	waitpid(pid, &st, 0);
	remove_tree(scratch);
	return st;
}

static void
roles(void)
{
	int st = in_sandbox(SANDBOX_COMPILE, compile_checks, "compile");
	OKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "compile role: the child exits 0 (%d)", st);
	st = in_sandbox(SANDBOX_LINK, link_checks, "link");
	OKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "link role: the child exits 0 (%d)", st);
	st = in_sandbox(SANDBOX_RUN, run_checks, "run");
	OKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "run role: the child exits 0 (%d)", st);
	st = in_sandbox(SANDBOX_RUN, ptrace_check, "ptrace");
	OKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS, "ptrace kills the process with SIGSYS (%d)",
	    st);
}

static void
as_nobody(void)
{
	if (geteuid() != 0) {
		t_skip("not root: the cases above ran as this uid already");
		return;
	}
	as_uid = 65534;
	roles();
	as_uid = 0;
}

static void
make_dirs(void)
{
	snprintf(outside, sizeof outside, "/tmp/kcs-sandbox-outside-XXXXXX");
	if (!mkdtemp(outside)) {
		perror("mkdtemp");
		exit(1);
	}
	chmod(outside, 0755);
	char p[400];
	snprintf(p, sizeof p, "%s/secret.txt", outside);
	FILE *f = fopen(p, "w");
	if (f) {
		fputs("secret\n", f);
		fclose(f);
	}
	chmod(p, 0644);
	snprintf(p, sizeof p, "%s/kernel.so", outside);
	if ((f = fopen(p, "w")))
		fclose(f);
	chmod(p, 0644);
}

static void
remove_tree(const char *dir)
{
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

int
main(void)
{
	landlock = sandbox_landlock_abi();
	printf("# Landlock ABI %d%s\n", landlock,
	       landlock ? "" : ": the file-system checks are skipped");
	make_dirs();
	t_sub("roles", roles);
	t_sub("as_nobody", as_nobody);
	remove_tree(outside);
	return t_done();
}
