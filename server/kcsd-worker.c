/* kcsd-worker.c - one compile worker: kcsd's LLVM runs here, never in kcsd.
 *
 *   kcsd-worker --fd N --scratch DIR [--max-bytes B] [--log-level L]
 *
 * kcsd (worker/pool.c) starts it with an empty environment and a connected
 * socket as fd N. It first forks its link helper (worker.h: the one
 * process of a worker that may start the system linker), which enters the
 * sandbox's SANDBOX_LINK role and serves links over a socket pair. The
 * worker then sets up LLVM's targets, enters SANDBOX_COMPILE (sandbox.h:
 * scratch as its only writable place, no network, no new processes, its
 * memory capped at B bytes) and serves jobs on fd N (worker.h) until kcsd
 * closes it. A fatal LLVM error, a crash or a memory bomb ends this
 * process (and with it the helper: PDEATHSIG) only; kcsd answers that one
 * request with an error and starts another worker.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "compiler.h"
#include "sandbox.h"
#include "worker.h"

static int
usage(const char *why)
{
	fprintf(stderr,
	        "kcsd-worker: %s\nusage: kcsd-worker --fd N --scratch DIR [--max-bytes B] "
	        "[--log-level debug|info|warn|error]\n(started by kcsd, not by hand)\n",
	        why);
	return 2;
}

int
main(int argc, char **argv)
{
	int fd = -1;
	const char *scratch = NULL, *level = "info";
	long long max_bytes = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (strcmp(k, "--fd") == 0)
			fd = atoi(v);
		else if (strcmp(k, "--scratch") == 0)
			scratch = v;
		else if (strcmp(k, "--max-bytes") == 0)
			max_bytes = atoll(v);
		else if (strcmp(k, "--log-level") == 0)
			level = v;
		else
			return usage("unknown argument");
	}
	if (fd < 3 || !scratch || max_bytes < 0)
		return usage("--fd (3 or above) and --scratch are required");
	static const char *const levels[] = {"debug", "info", "warn", "error"};
	for (int i = 0; i < 4; i++)
		if (strcmp(level, levels[i]) == 0)
			kc_log_set_level((KcLogLevel)i);

	/* the link helper, forked while this process is one thread and has
	 * loaded nothing of LLVM's state */
	int lsv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, lsv) != 0) {
		fprintf(stderr, "kcsd-worker: socketpair: %s\n", strerror(errno));
		return 1;
	}
	pid_t helper = fork();
	if (helper < 0) {
		fprintf(stderr, "kcsd-worker: cannot fork the link helper: %s\n", strerror(errno));
		return 1;
	}
	KcErr err = {0};
	if (helper == 0) {
		SandboxPolicy lp = {
		    .role = SANDBOX_LINK,
		    .scratch = scratch,
		    .keep_fds = &lsv[1],
		    .nkeep = 1,
		    .max_as_bytes = max_bytes,
		};
		if (!sandbox_enter(&lp, &err)) {
			fprintf(stderr,
			        "kcsd-worker: the link helper cannot enter the sandbox: %s\n",
			        err.msg);
			_exit(1);
		}
		_exit(kc_link_helper_serve(lsv[1]));
	}
	close(lsv[1]);

	/* before the sandbox: target registration reads nothing from a
	 * request, and the filter then need not allow what it does */
	kc_compiler_init();
	int keep[2] = {fd, lsv[0]};
	SandboxPolicy pol = {
	    .role = SANDBOX_COMPILE,
	    .scratch = scratch,
	    .keep_fds = keep,
	    .nkeep = 2,
	    .max_as_bytes = max_bytes,
	};
	if (!sandbox_enter(&pol, &err)) {
		fprintf(stderr, "kcsd-worker: cannot enter the sandbox: %s\n", err.msg);
		return 1;
	}
	int rc = kc_worker_serve(fd, lsv[0]);
	/* no atexit work (LeakSanitizer's tracer would need ptrace) */
	_exit(rc);
}
