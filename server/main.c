/* main.c - kcsd start-up and shutdown; the only file that may exit().
 *
 * Order matters: configuration, then process-wide set-up before any thread
 * exists (log level, SIGPIPE ignored, SIGTERM/SIGINT blocked so that every
 * thread inherits the mask and only sigwait() here sees them, LLVM target
 * initialisation, the LMDB environment), then the server threads. The main
 * thread then waits for a signal and tears down in reverse order.
 * Exit codes: 0 clean stop, 1 start-up failure, 2 bad configuration.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int
main(int argc, char **argv)
{
	ServerConfig cfg;
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

	KcErr err = {0};
	CacheOptions copt = {.map_bytes = (size_t)cfg.cache_map_bytes};
	Cache *cache = cache_open(cfg.state_dir, &copt, &err);
	if (!cache) {
		fprintf(stderr, "kcsd: %s\n", err.msg);
		config_free(&cfg);
		exit(1);
	}
	ApiConfig acfg = {
	    .limits =
	        {
	            .max_ops = (int)cfg.max_ops,
	            .max_tensors = (int)cfg.max_tensors,
	            .max_elements = cfg.max_elements,
	        },
	    .max_body_bytes = (size_t)cfg.max_body_bytes,
	    .linker = cfg.linker,
	};
	ApiCtx *api = api_new(&acfg, cache);
	Server *srv = server_new(&cfg, api, &err);
	if (!srv) {
		fprintf(stderr, "kcsd: %s\n", err.msg);
		api_free(api);
		cache_close(cache);
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
		config_free(&cfg);
		exit(1);
	}
	kc_log(KC_LOG_INFO, "kcsd %s (build %s, LLVM %s) listening on %s port %d, state %s",
	       KCSD_VERSION, KCSD_BUILD_ID, kc_llvm_version(), cfg.listen, port, cfg.state_dir);

	int sig = 0;
	while (sigwait(&stop, &sig) != 0)
		;
	kc_log(KC_LOG_INFO, "signal %d: stopping", sig);

	server_free(srv);
	api_free(api);
	cache_close(cache);
	config_free(&cfg);
	kc_log(KC_LOG_INFO, "stopped");
	return 0;
}
