/* main.c - kcsd start-up and shutdown; the only file that may exit().
 *
 * Order matters: configuration, then process-wide set-up before any thread
 * exists (log level, SIGPIPE ignored, SIGTERM/SIGINT blocked so that every
 * thread inherits the mask and only sigwait() here sees them, LLVM target
 * initialisation, the LMDB environment), then the server threads. The main
 * thread then waits for a signal and tears down in reverse order.
 * Exit codes: 0 stop (also when a job outlived shutdown_grace_s and was
 * abandoned: the log says so), 1 start-up failure, 2 bad configuration.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox.h"
#include "server.h"
#include "version.h"

/* Writes the port to `path` atomically (temp file + rename). */
static bool
write_port_file(const char *path, int port)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f)
		return false;
	bool ok = fprintf(f, "%d\n", port) > 0;
	ok = fclose(f) == 0 && ok;
	if (ok && rename(tmp, path) != 0)
		ok = false;
	if (!ok)
		unlink(tmp);
	return ok;
}

/* The executable `name` beside this one, unless `set` (a setting) names
 * one. */
static bool
exe_beside(const char *set, const char *name, char *out, size_t cap)
{
	if (set && *set)
		return (size_t)snprintf(out, cap, "%s", set) < cap;
	ssize_t n = readlink("/proc/self/exe", out, cap - 1);
	if (n <= 0)
		return false;
	out[n] = 0;
	char *slash = strrchr(out, '/');
	if (!slash)
		return false;
	slash[1] = 0;
	return strlen(out) + strlen(name) < cap && strcat(out, name);
}

/* kcsd --hash-token TOKEN [ROLE [NAME]]: prints the line to put in the
 * configuration (token = ... or a tokens_file line). TOKEN "-" reads it
 * from stdin, so it stays out of shell history and ps. Returns the exit
 * code. */
static int
hash_token(int argc, char **argv)
{
	char line[4096];
	const char *tok = argc > 2 ? argv[2] : NULL;
	const char *role = argc > 3 ? argv[3] : "read";
	const char *name = argc > 4 ? argv[4] : NULL;
	if (!tok || argc > 5 || !api_role_valid(role)) {
		fprintf(stderr, "usage: kcsd --hash-token TOKEN|- [read|write|admin [NAME]]\n");
		return 2;
	}
	if (strcmp(tok, "-") == 0) {
		if (!fgets(line, sizeof line, stdin)) {
			fprintf(stderr, "kcsd: no token on stdin\n");
			return 2;
		}
		line[strcspn(line, "\r\n")] = 0;
		tok = line;
	}
	if (!*tok) {
		fprintf(stderr, "kcsd: the token is empty\n");
		return 2;
	}
	KcBuf b = {0};
	api_hash_token_line(tok, role, name, &b);
	fputs(b.data, stdout);
	kc_buf_free(&b);
	return 0;
}

int
main(int argc, char **argv)
{
	ServerConfig cfg;
	if (argc > 1 && strcmp(argv[1], "--hash-token") == 0)
		exit(hash_token(argc, argv));
	switch (config_load(&cfg, argc, argv)) {
	case CONFIG_OK: break;
	case CONFIG_HELP:
		config_usage(stdout);
		config_free(&cfg);
		exit(0);
	case CONFIG_VERSION:
		printf("kcsd %s (build %s, LLVM %s)\n", KCSD_VERSION, KCSD_BUILD_ID,
		       KCSD_LLVM_VERSION);
		config_free(&cfg);
		exit(0);
	case CONFIG_ERROR: config_free(&cfg); exit(2);
	}
	KcLogLevel lvl = KC_LOG_INFO;
	config_log_level(&cfg, &lvl);
	kc_log_set_level(lvl);

	signal(SIGPIPE, SIG_IGN);
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	kc_compiler_init();

	/* The compile workers before the cache: a pool that cannot start (a
	 * kcsd-worker of another build) leaves the store untouched. */
	KcErr err = {0};
	char worker_exe[4096];
	if (!exe_beside(cfg.worker, "kcsd-worker", worker_exe, sizeof worker_exe)) {
		fprintf(stderr,
		        "kcsd: cannot find the kcsd-worker executable (set worker = PATH)\n");
		config_free(&cfg);
		exit(1);
	}
	int64_t compile_max_bytes = cfg.compile_max_bytes;
	if (compile_max_bytes > 0 && sandbox_sanitized()) {
		kc_log(KC_LOG_INFO,
		       "sanitizer build: compile_max_bytes (RLIMIT_AS) is not applied");
		compile_max_bytes = 0;
	}
	const char *tmp = getenv("TMPDIR");
	KcPoolConfig pcfg = {
	    .exe = worker_exe,
	    .scratch_root = tmp && *tmp ? tmp : "/tmp",
	    .size = cfg.workers > 0 ? (int)cfg.workers : kc_cpu_count(),
	    .timeout_s = (int)cfg.compile_timeout_s,
	    .max_bytes = compile_max_bytes,
	    .build_id = KCSD_BUILD_ID,
	    .log_level = cfg.log_level,
	};
	int64_t pool_t0 = kc_now_us();
	KcPool *pool = kc_pool_start(&pcfg, &err);
	if (!pool) {
		fprintf(stderr, "kcsd: %s\n", err.msg);
		config_free(&cfg);
		exit(1);
	}
	kc_log(KC_LOG_INFO, "%d compile workers ready in %.0f ms (%s)", pcfg.size,
	       (double)(kc_now_us() - pool_t0) / 1000.0, worker_exe);
	char sandbox_line[400];
	bool degraded = false;
	sandbox_describe(sandbox_line, sizeof sandbox_line, &degraded);
	kc_log(degraded ? KC_LOG_WARN : KC_LOG_INFO, "%s", sandbox_line);

	CacheOptions copt = {
	    .map_bytes = (size_t)cfg.cache_map_bytes,
	    .max_bytes = (size_t)cfg.cache_max_bytes,
	    .touch_flush_ms = (unsigned)cfg.cache_touch_flush_ms,
	    .no_meta_sync = true,
	};
	/* the default ceiling follows a smaller map (e.g. in tests) */
	if (copt.max_bytes >= copt.map_bytes && cfg.cache_max_bytes == 8589934592)
		copt.max_bytes = 0;
	Cache *cache = cache_open(cfg.state_dir, &copt, &err);
	if (!cache) {
		fprintf(stderr, "kcsd: %s\n", err.msg);
		kc_pool_free(pool);
		config_free(&cfg);
		exit(1);
	}
	ApiConfig acfg = {
	    .limits =
	        {
	            .max_ops = (int)cfg.max_ops,
	            .max_tensors = (int)cfg.max_tensors,
	            .max_elements = cfg.max_elements,
	            .max_json_tokens = cfg.max_json_tokens,
	            .max_json_depth = (int)cfg.max_json_depth,
	            /* the work budget (0: defaults that scale with max_ops) */
	            .max_work_nodes = cfg.max_work_nodes,
	            .max_work_stages = cfg.max_work_stages,
	            .max_work_insns = cfg.max_work_insns,
	        },
	    .max_body_bytes = (size_t)cfg.max_body_bytes,
	    .body_caps =
	        {
#define R(e, method, pattern, handler, flags, cap)
#define B(setting) [API_BODY_CAP_##setting] = (size_t)cfg.setting,
#include "routes.def"
#undef B
#undef R
	        },
	    .linker = cfg.linker,
	    .compile_timeout_s = (int)cfg.compile_timeout_s,
	    .pool = pool,
	    .negative_ttl_s = (int)cfg.negative_ttl_s,
	    .compile_max_bytes = compile_max_bytes,
	    .runner = cfg.runner,
	    .verify_timeout_s = (int)cfg.verify_timeout_s,
	    .verify_max_bytes = (size_t)cfg.verify_max_bytes,
	    .verify_concurrency = (int)cfg.verify_concurrency,
	    .verify_queue = (int)cfg.verify_queue,
	    .verify_wait_s = (int)cfg.verify_wait_s,
	    .test_fault_injection = cfg.test_fault_injection != 0,
	    .max_dump_bytes = (size_t)cfg.max_dump_bytes,
	    .max_canonical_bytes = (size_t)cfg.max_canonical_bytes,
	};
	ApiCtx *api = api_new(&acfg, cache);
	ApiAuthConfig auth = {
	    .tokens = cfg.token,
	    .tokens_file = cfg.tokens_file,
	    .anonymous_read = cfg.anonymous_read != 0,
	};
	ApiKeysConfig keys = {
	    .signing_key_file = cfg.signing_key_file,
	    .state_dir = cfg.state_dir,
	    .verify_key_files = cfg.verify_key_files,
	};
	if (api_auth_init(api, &auth, &err) != KC_OK || api_keys_init(api, &keys, &err) != KC_OK) {
		fprintf(stderr, "kcsd: %s\n", err.msg);
		api_free(api);
		cache_close(cache);
		kc_pool_free(pool);
		config_free(&cfg);
		exit(err.status == KC_BAD_REQUEST ? 2 : 1);
	}
	Server *srv = server_new(&cfg, api, &err);
	if (!srv) {
		fprintf(stderr, "kcsd: %s\n", err.msg);
		api_free(api);
		cache_close(cache);
		kc_pool_free(pool);
		config_free(&cfg);
		exit(err.status == KC_BAD_REQUEST ? 2 : 1);
	}
	int port = server_port(srv);
	if (*cfg.port_file && !write_port_file(cfg.port_file, port)) {
		fprintf(stderr, "kcsd: cannot write port file %s: %s\n", cfg.port_file,
		        strerror(errno));
		server_free(srv);
		api_free(api);
		cache_close(cache);
		kc_pool_free(pool);
		config_free(&cfg);
		exit(1);
	}
	kc_log(KC_LOG_INFO,
	       "kcsd %s (build %s, LLVM %s) listening on %s port %d (%s, auth %s), state %s",
	       KCSD_VERSION, KCSD_BUILD_ID, kc_llvm_version(), cfg.listen, port,
	       *cfg.tls_cert_file ? "https" : "http", api_auth_mode(api), cfg.state_dir);
	/* READY=1 only now: the cache is open and MHD is listening. */
	/* A compile waits at most compile_timeout_s for a worker and as long
	 * again for its reply: a thread stuck well past that is kcsd's own
	 * wedge (a lock, the store), which the watchdog is for. */
	Notifier *notifier = notify_ready(srv, port, 2 * (int)cfg.compile_timeout_s + 10);

	int sig = 0;
	while (sigwait(&stop, &sig) != 0)
		;
	kc_log(KC_LOG_INFO, "signal %d: stopping", sig);
	notify_stopping(notifier);

	if (!server_shutdown(srv)) {
		/* a job outlived shutdown_grace_s: its compile is killed with its
		 * worker, but the thread may be elsewhere, so nothing that it may
		 * be using is torn down; committed cache data is durable and LMDB
		 * recovers an interrupted write */
		kc_pool_stop(pool);
		kc_log(KC_LOG_WARN, "stopped, abandoning the running job(s)");
		_exit(0);
	}
	server_free(srv);
	api_free(api);
	cache_close(cache);
	kc_pool_free(pool);
	config_free(&cfg);
	kc_log(KC_LOG_INFO, "stopped");
	return 0;
}
