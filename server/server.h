/* server.h - the kcsd executable's parts: configuration (config.c, rows in
 * config.def), the libmicrohttpd front end (server.c), the bounded
 * worker pool that runs blocking API handlers (workers.c) and systemd
 * notification (notify.c).
 *
 * Life cycle (server/main.c): config_load -> kc_compiler_init -> cache_open
 * -> api_new -> server_new (starts threads) -> notify_ready (READY=1,
 * watchdog thread) -> wait for SIGTERM/SIGINT -> notify_stopping ->
 * server_shutdown (refuse new work, finish in-flight work, stop MHD) ->
 * server_free -> api_free -> cache_close, or, when a job outlives
 * shutdown_grace_s, _exit right after server_shutdown. Only main.c calls
 * exit().
 */
#ifndef KCS_SERVER_H
#define KCS_SERVER_H

#include <stdio.h>

#include "api.h"
#include "common.h"

/* ---- config.c ----------------------------------------------------------- */

#define CONFIG_T_STR char *
#define CONFIG_T_INT int64_t
#define CONFIG_T_SIZE int64_t
#define CONFIG_T_LIST char *

/* Every setting of config.def; strings are malloc'd (config_free). */
typedef struct ServerConfig {
#define C(name, type, def, min, max, help) CONFIG_T_##type name;
#include "config.def"
#undef C
	char *config_file; /* --config FILE, or NULL */
} ServerConfig;

typedef enum ConfigResult {
	CONFIG_OK,      /* run the daemon */
	CONFIG_HELP,    /* --help given: print config_usage, exit 0 */
	CONFIG_VERSION, /* --version given: print the version, exit 0 */
	CONFIG_ERROR,   /* message already on stderr: exit 2 */
} ConfigResult;

/* Fills *cfg from defaults, then --config FILE ("key = value" lines, '#'
 * comments), then the other flags (flags win). Validates types and bounds.
 * Prints what is wrong to stderr on CONFIG_ERROR. Release with config_free
 * in every case. */
ConfigResult config_load(ServerConfig *cfg, int argc, char **argv);
void config_free(ServerConfig *cfg);
void config_usage(FILE *f);
/* Parses cfg->log_level; false if it is not a known level. */
bool config_log_level(const ServerConfig *cfg, KcLogLevel *out);
/* The largest request body any route takes: max_body_bytes or a body-cap
 * setting (routes.def B rows), whichever is larger; *name (may be NULL)
 * gets the setting's name. config_load refuses a max_inflight_body_bytes
 * below it. */
int64_t config_largest_body_cap(const ServerConfig *cfg, const char **name);

/* ---- workers.c ----------------------------------------------------------
 * N threads and a bounded FIFO of jobs. Thread-safe. */
typedef struct Workers Workers;
typedef void (*WorkFn)(void *arg);

Workers *workers_new(int nthreads, int queue_depth);
/* Queues fn(arg). Returns false, without running it, when the queue is
 * full or (unless even_draining: a woken request that the drain must wait
 * for) the pool is draining. */
bool workers_submit(Workers *w, WorkFn fn, void *arg, bool even_draining);
/* Refuses new jobs from now on, then waits until every queued and running
 * job has finished (workers_drain), or until kc_now_us() reaches
 * deadline_us (workers_drain_until: false if jobs are left then). */
void workers_drain(Workers *w);
bool workers_drain_until(Workers *w, int64_t deadline_us);
/* A consistent snapshot of the pool, for metrics and the watchdog. */
typedef struct WorkersStats {
	int queued, capacity; /* jobs waiting; queue_depth */
	int threads, running; /* pool size; threads running a job */
	int64_t progress_us;  /* kc_now_us() when a job last started or ended */
} WorkersStats;
void workers_stats(Workers *w, WorkersStats *out);
void workers_free(Workers *w); /* drains, joins the threads; NULL allowed */

/* ---- server.c ----------------------------------------------------------- */
typedef struct Server Server;

/* Starts the HTTP daemon on cfg->listen with its thread pool and the worker
 * pool. `api` is borrowed. Returns NULL with err filled (a message naming
 * the address): KC_BAD_REQUEST if cfg->listen is malformed or does not
 * resolve (a configuration error), KC_INTERNAL if it cannot listen. */
Server *server_new(const ServerConfig *cfg, ApiCtx *api, KcErr *err);
int server_port(const Server *s); /* the bound port */
/* Graceful stop: refuse new work (503), let queued and in-flight requests
 * finish and be answered, then stop MHD; returns true. Blocks for at most
 * shutdown_grace_s (plus half a second): if a job is still running then,
 * requests parked on it are answered 503 and it returns false, leaving
 * the job's thread and MHD running; the caller must then end the process
 * (_exit) without server_free, api_free or cache_close. */
bool server_shutdown(Server *s);
/* Calls server_shutdown if needed, which must have returned true. NULL
 * allowed. */
void server_free(Server *s);
/* True when every worker thread has been running a job and none has
 * started or finished one for longer than stuck_us (0: never): the pool
 * is wedged and the watchdog stops pinging. Thread-safe. */
bool server_wedged(Server *s, int64_t stuck_us);

/* ---- notify.c ------------------------------------------------------------
 * systemd notification (sd_notify): READY=1, STOPPING=1 and a watchdog
 * thread sending WATCHDOG=1 every WATCHDOG_USEC/2 while the server is not
 * wedged. Without $NOTIFY_SOCKET every call is a no-op; without
 * $WATCHDOG_USEC no thread is started. */
typedef struct Notifier Notifier;

/* Sends READY=1 with a STATUS= line, then starts the watchdog thread when
 * systemd asked for one. `srv` is borrowed and must outlive notify_stop.
 * stuck_s: compile_timeout_s (0: the pool is never considered wedged). */
Notifier *notify_ready(Server *srv, int port, int stuck_s);
/* Sends STOPPING=1 and stops and joins the watchdog thread; NULL allowed
 * (then only STOPPING=1). Call before server_free. */
void notify_stopping(Notifier *n);

#endif /* KCS_SERVER_H */
