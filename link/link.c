/* link.c - ELF object -> shared object.
 *
 * o->linker NULL or "" (the default): x86_64 objects go to the in-process
 * linker (link_elf.c, a few us) and only what it reports KC_UNSUPPORTED goes
 * on to the system linker; "internal" is the in-process linker alone (its
 * "unsupported" is then a KC_CODEGEN error); any other value names the
 * system linker to spawn (any GNU-compatible ld: bfd, gold, lld).
 *
 * The system linker: the object goes into a private mkdtemp directory under
 * o->tmpdir; the linker runs through posix_spawn (never fork in a
 * threaded daemon) with stdout/stderr captured into a file there; the .so
 * is read back (bounded) and the directory removed. x86_64 kernels are
 * linked against libm with --as-needed (llvm.floor/round may become
 * floorf/roundf calls on targets without SSE4.1); aarch64 kernels are
 * linked by ld.lld-19 without libm (there is no aarch64 libm here), leaving
 * any libm symbol undefined.
 *
 * System linker choice, measured on the dev host (2 cores, Debian 12), 200
 * sequential links of a 3.4 KiB kernel object ([16,768] bias+tanh+mul)
 * with the flags below, mean wall time per link:
 *   GNU ld.bfd 2.40    8.2 ms
 *   GNU gold 1.16     16.8 ms
 *   ld.lld-19         38.9 ms  (start-up: it loads the 100 MB libLLVM.so)
 * so the fallback is "ld" (bfd). docs/linker.md has the in-process numbers.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "link.h"

extern char **environ;

#define DEFAULT_LINKER "ld"
#define INTERNAL_LINKER "internal"
#define AARCH64_LINKER "ld.lld-19"
#define MAX_SO_BYTES (64u << 20)
#define LINK_TIMEOUT_MS 60000

static KcStatus
write_file(const char *path, const unsigned char *p, size_t n, KcErr *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return kc_fail(err, KC_CODEGEN, "link", "cannot create %s: %s", path,
		               strerror(errno));
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(fd);
			return kc_fail(err, KC_CODEGEN, "link", "cannot write %s: %s", path,
			               strerror(errno));
		}
		p += w;
		n -= (size_t)w;
	}
	close(fd);
	return KC_OK;
}

/* Reads at most `max` bytes; more is an error. */
static KcStatus
read_file(const char *path, size_t max, unsigned char **out, size_t *out_len, KcErr *err)
{
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	unsigned char *buf = NULL;
	size_t n = 0;

	*out = NULL;
	*out_len = 0;
	if (fd < 0)
		return kc_fail(err, KC_CODEGEN, "link", "linker wrote no output: %s",
		               strerror(errno));
	if (fstat(fd, &sb) != 0 || sb.st_size < 0 || (uint64_t)sb.st_size > max) {
		close(fd);
		return kc_fail(err, KC_CODEGEN, "link", "linked object is too large");
	}
	buf = kc_xmalloc((size_t)sb.st_size + 1);
	while (n < (size_t)sb.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)sb.st_size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (n != (size_t)sb.st_size) {
		free(buf);
		return kc_fail(err, KC_CODEGEN, "link", "short read of the linked object");
	}
	*out = buf;
	*out_len = n;
	return KC_OK;
}

/* First line of the linker's output, for the error message. */
static void
first_line(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	buf[0] = 0;
	if (!f)
		return;
	if (!fgets(buf, (int)cap, f))
		buf[0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	fclose(f);
}

/* Waits for the linker, at most LINK_TIMEOUT_MS (a pidfd makes the wait
 * bounded without polling); a linker that hangs is killed. */
static KcStatus
wait_linker(pid_t pid, int *status, KcErr *err)
{
	int fd = pidfd_open(pid, 0);
	if (fd >= 0) {
		struct pollfd p = {fd, POLLIN, 0};
		int r;
		while ((r = poll(&p, 1, LINK_TIMEOUT_MS)) < 0 && errno == EINTR)
			;
		close(fd);
		if (r == 0)
			kill(pid, SIGKILL);
		while (waitpid(pid, status, 0) < 0)
			if (errno != EINTR)
				return kc_fail(err, KC_CODEGEN, "link", "waitpid: %s",
				               strerror(errno));
		if (r == 0)
			return kc_fail(err, KC_CODEGEN, "link", "the linker ran for more than %d s",
			               LINK_TIMEOUT_MS / 1000);
		return KC_OK;
	}
	/* no pidfd (old kernel): an unbounded wait */
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return kc_fail(err, KC_CODEGEN, "link", "waitpid: %s", strerror(errno));
	return KC_OK;
}

KcStatus
link_system(const unsigned char *obj, size_t obj_len, const LinkOptions *o, unsigned char **out,
            size_t *out_len, KcErr *err)
{
	const char *tmp = o->tmpdir ? o->tmpdir : getenv("TMPDIR");
	bool a64 = strncmp(o->triple, "aarch64", 7) == 0;
	const char *linker =
	    a64 ? AARCH64_LINKER
	        : (o->linker && *o->linker && strcmp(o->linker, INTERNAL_LINKER) ? o->linker
	                                                                         : DEFAULT_LINKER);
	char dir[512], opath[600], spath[600], lpath[600], msg[200];
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	pid_t pid;
	int status = 0, rc;
	KcStatus st = KC_OK;

	*out = NULL;
	*out_len = 0;
	if (!tmp || !*tmp)
		tmp = "/tmp";
	if ((size_t)snprintf(dir, sizeof dir, "%s/kcsd-link-XXXXXX", tmp) >= sizeof dir)
		return kc_fail(err, KC_CODEGEN, "link", "tmpdir path is too long");
	if (!mkdtemp(dir))
		return kc_fail(err, KC_CODEGEN, "link", "mkdtemp in %s: %s", tmp, strerror(errno));
	snprintf(opath, sizeof opath, "%s/k.o", dir);
	snprintf(spath, sizeof spath, "%s/k.so", dir);
	snprintf(lpath, sizeof lpath, "%s/ld.log", dir);
	if ((st = write_file(opath, obj, obj_len, err)) != KC_OK)
		goto done;

	/* clang-format off */
	const char *x86[] = {linker, "-shared", "-o", spath, opath, "--hash-style=gnu",
			     "-z", "noexecstack", "-z", "relro", "-z", "now",
			     "-L/usr/lib/x86_64-linux-gnu", "-L/lib/x86_64-linux-gnu",
			     "--as-needed", "-lm", NULL};
	const char *arm[] = {linker, "-m", "aarch64linux", "-shared", "-o", spath, opath,
			     "--hash-style=gnu", "-z", "noexecstack", "-z", "relro", "-z", "now",
			     NULL};
	/* clang-format on */
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, lpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	/* the child starts with no blocked signals and default dispositions,
	 * whatever the daemon's threads have set */
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawnp(&pid, linker, &fa, &attr, (char *const *)(a64 ? arm : x86), environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc != 0) {
		st = kc_fail(err, KC_CODEGEN, "link", "cannot run linker %.64s: %s", linker,
		             strerror(rc));
		goto done;
	}
	if ((st = wait_linker(pid, &status, err)) != KC_OK)
		goto done;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		first_line(lpath, msg, sizeof msg);
		st = kc_fail(err, KC_CODEGEN, "link", "%.64s failed (status %d): %s", linker,
		             WIFEXITED(status) ? WEXITSTATUS(status) : -1, msg);
		goto done;
	}
	st = read_file(spath, MAX_SO_BYTES, out, out_len, err);
done:
	unlink(opath);
	unlink(spath);
	unlink(lpath);
	rmdir(dir);
	return st;
}

/* The system linker, here or where o->system sends it. */
static KcStatus
run_system_linker(const unsigned char *obj, size_t obj_len, const LinkOptions *o,
                  unsigned char **out, size_t *out_len, KcErr *err)
{
	if (o->system)
		return o->system(o->system_ctx, obj, obj_len, o->triple, o->linker, o->tmpdir, out,
		                 out_len, err);
	return link_system(obj, obj_len, o, out, out_len, err);
}

KcStatus
link_shared(const unsigned char *obj, size_t obj_len, const LinkOptions *o, unsigned char **out,
            size_t *out_len, KcErr *err)
{
	const char *want = o->linker;
	bool internal = want && strcmp(want, INTERNAL_LINKER) == 0;
	KcErr e = {0};
	KcStatus st;

	if (want && *want && !internal)
		return run_system_linker(obj, obj_len, o, out, out_len, err);
	if (strncmp(o->triple, "x86_64", 6) == 0)
		st = link_elf(obj, obj_len, out, out_len, &e);
	else
		st = kc_fail(&e, KC_UNSUPPORTED, "link", "no in-process linker for %.60s",
		             o->triple);
	if (st == KC_OK)
		return KC_OK;
	if (st != KC_UNSUPPORTED || internal)
		return kc_fail(err, KC_CODEGEN, "link", "%s", e.msg);
	kc_log(KC_LOG_DEBUG, "%s; using the system linker", e.msg);
	return run_system_linker(obj, obj_len, o, out, out_len, err);
}
