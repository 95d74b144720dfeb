/* verify.c - POST /v1/verify: compile, run in a runner process, compare
 * with the reference interpreter.
 *
 * The one idea: the kernel never runs inside the daemon. The body goes
 * through the very compile path of POST /v1/compile (h_compile: same
 * limits, errors, cache and singleflight), seeded random inputs are made
 * from the parsed graph, and the kernel runs in `kcsd-runner`, started
 * with posix_spawn (never a bare fork of this threaded process) under
 * rlimits and a wall-clock timeout: a signal death answers
 * failure "crashed", the timeout (SIGKILL) or RLIMIT_CPU "timeout". A
 * second runner invocation (kcsd-runner --ref) evaluates graph/interp.c
 * on the same inputs under the same limits, so an interpreter crash or
 * runaway is a 500 for this request, never the daemon's death; the daemon
 * only generates the inputs and compares each
 * output: float32/float64 within rtol = atol = 1e-4, 1e-2 when float16 or
 * bfloat16 is upstream; integers and bools exactly; elements that hang on
 * a near-tie float comparison (kc_interp_ties) are counted apart.
 *
 * Memory: a verify's arguments can be hundreds of MiB, so the daemon never
 * holds them. The inputs are generated a window at a time straight into a
 * shared mapping of the runner's --in file; the two runners' outputs are
 * compared a chunk at a time with pread. What stays in the daemon is the
 * compile reply and a few small buffers, whatever the kernel's size; the
 * files live in tmpdir (on tmpfs, in memory outside the daemon). At most
 * verify_concurrency verifies run at once (the gate below); a request
 * that finds them all busy waits, bounded in number (verify_queue) and
 * time (verify_wait_s), then answers 503 overloaded.
 *
 * Test-only fault injection (--test-fault-injection 1): ?inject=crash or
 * ?inject=hang makes the runner raise SIGSEGV or spin instead of running
 * the kernel; ?inject=ref-crash does that to the reference run. Off by
 * default; ?inject is refused with 400 then.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "internal.h"

#define VERIFY_DEFAULT_TIMEOUT_S 10
#define VERIFY_DEFAULT_THREADS 2
#define VERIFY_MAX_THREADS 64
#define VERIFY_MAX_ARG_BYTES ((size_t)256 << 20) /* default: inputs + outputs, twice */
#define VERIFY_DEFAULT_CONCURRENCY 1
#define VERIFY_DEFAULT_WAIT_S 30
/* Bytes of an input mapped at once while it is generated, and elements of
 * each output compared at once: the daemon's whole share of a verify. */
#define VERIFY_WINDOW_BYTES ((size_t)4 << 20)
#define VERIFY_CHUNK_ELEMS ((int64_t)1 << 16)

/* What the runner did. */
typedef enum RunOutcome { RUN_OK, RUN_CRASHED, RUN_TIMEOUT, RUN_ERROR, RUN_REFUSED } RunOutcome;

/* One kernel argument as the response's "args" describes it. */
typedef struct Arg {
	const char *dtype;
	size_t bytes;
	int64_t numel;
	int esize;
} Arg;

/* ---- small helpers --------------------------------------------------------- */

static int
dtype_size(const char *dt)
{
	static const struct {
		const char *n;
		int b;
	} t[] = {{"bool", 1},    {"int8", 1},     {"uint8", 1},  {"int16", 2},  {"uint16", 2},
	         {"float16", 2}, {"bfloat16", 2}, {"int32", 4},  {"uint32", 4}, {"float32", 4},
	         {"int64", 8},   {"uint64", 8},   {"float64", 8}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (strcmp(t[i].n, dt) == 0)
			return t[i].b;
	return 0;
}

static bool
is_float_name(const char *dt)
{
	return strcmp(dt, "float16") == 0 || strcmp(dt, "bfloat16") == 0 ||
	       strcmp(dt, "float32") == 0 || strcmp(dt, "float64") == 0;
}

/* Element k of a buffer of dtype dt as a double (exact for <= 53-bit ints). */
static double
elem(const void *p, int64_t k, const char *dt)
{
	const unsigned char *b = (const unsigned char *)p + (size_t)k * (size_t)dtype_size(dt);
	if (strcmp(dt, "float32") == 0) {
		float f;
		memcpy(&f, b, 4);
		return f;
	}
	if (strcmp(dt, "float64") == 0) {
		double d;
		memcpy(&d, b, 8);
		return d;
	}
	if (strcmp(dt, "bfloat16") == 0) {
		uint32_t w = (uint32_t)(b[0] | b[1] << 8) << 16;
		float f;
		memcpy(&f, &w, 4);
		return f;
	}
	if (strcmp(dt, "float16") == 0) {
		unsigned h = (unsigned)(b[0] | b[1] << 8), e = (h >> 10) & 31, m = h & 1023;
		double v = e == 0    ? ldexp(m, -24)
		           : e == 31 ? (m ? NAN : INFINITY)
		                     : ldexp(m + 1024, (int)e - 25);
		return (h & 0x8000) ? -v : v;
	}
	int64_t i = 0;
	uint64_t u = 0;
	switch (dtype_size(dt)) {
	case 1:
		u = b[0];
		i = (int8_t)b[0];
		break;
	case 2: {
		uint16_t x;
		memcpy(&x, b, 2);
		u = x;
		i = (int16_t)x;
		break;
	}
	case 4: {
		uint32_t x;
		memcpy(&x, b, 4);
		u = x;
		i = (int32_t)x;
		break;
	}
	default:
		memcpy(&u, b, 8);
		i = (int64_t)u;
		break;
	}
	if (dt[0] == 'u' || strcmp(dt, "bool") == 0)
		return (double)u;
	return (double)i;
}

/* Decodes standard padded base64 (kc_base64_decode); malloc'd, NULL on bad
 * input. */
static unsigned char *
b64_decode(const char *s, size_t *len)
{
	KcBuf b = {0};
	if (!kc_base64_decode(s, strlen(s), &b)) {
		kc_buf_free(&b);
		return NULL;
	}
	return (unsigned char *)kc_buf_take(&b, len);
}

static bool
write_fd(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		c += w;
		n -= (size_t)w;
	}
	return true;
}

static bool
write_all(const char *path, const void *p, size_t n, int mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return false;
	bool ok = write_fd(fd, p, n);
	return close(fd) == 0 && ok;
}

/* Reads exactly n bytes at off. */
static bool
pread_all(int fd, void *p, size_t n, off_t off)
{
	char *c = p;
	while (n > 0) {
		ssize_t r = pread(fd, c, n, off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		c += r;
		n -= (size_t)r;
		off += r;
	}
	return true;
}

/* A runner's output file, open, if it is a regular file of exactly
 * `size` bytes; -1 otherwise. */
static int
open_exact(const char *path, size_t size)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 &&
	    (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The runner's --in file ("KCSRUN1\0", the counts, the sizes, then the
 * inputs' bytes). Each input is generated a window at a time straight
 * into a shared mapping of the file: no copy of it lives in the daemon. */
static bool
write_inputs(const char *path, CompileCtx *c, const KcGraph *g, uint64_t seed, const Arg *ai,
             int nargs, int nin)
{
	uint32_t hdr[2] = {(uint32_t)nargs, (uint32_t)nin};
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	KcBuf h = {0};
	bool ok = false;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	kc_buf_append(&h, "KCSRUN1", 8);
	kc_buf_append(&h, hdr, sizeof hdr);
	for (int i = 0; i < nargs; i++) {
		uint64_t sz = ai[i].bytes;
		kc_buf_append(&h, &sz, sizeof sz);
	}
	size_t size = h.len;
	for (int i = 0; i < nin; i++)
		size += ai[i].bytes;
	/* blocks reserved up front: a full disk is this error, not a SIGBUS
	 * when a mapped page is first written */
	if (!write_fd(fd, h.data, h.len) || posix_fallocate(fd, 0, (off_t)size) != 0)
		goto done;
	KcRandomInputs *r = kc_interp_random_begin(c, g, seed);
	size_t off = h.len;
	for (int i = 0; i < nin; off += ai[i].bytes, i++) {
		int64_t per = (int64_t)(VERIFY_WINDOW_BYTES / (size_t)ai[i].esize);
		for (int64_t e = 0; e < ai[i].numel; e += per) {
			int64_t n = ai[i].numel - e < per ? ai[i].numel - e : per;
			size_t at = off + (size_t)e * (size_t)ai[i].esize, lead = at % pg;
			size_t len = lead + (size_t)n * (size_t)ai[i].esize;
			void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			               (off_t)(at - lead));
			if (p == MAP_FAILED)
				goto done;
			kc_interp_random_next(r, i, n, (char *)p + lead);
			munmap(p, len);
		}
	}
	ok = true;
done:
	kc_buf_free(&h);
	return close(fd) == 0 && ok;
}

/* The first line of a small file (the runner's stderr), sanitised. */
static void
first_line(const char *path, char *out, size_t cap)
{
	FILE *f = fopen(path, "re");
	out[0] = 0;
	if (!f)
		return;
	if (fgets(out, (int)cap, f)) {
		for (char *p = out; *p; p++)
			if (*p == '\n' || (unsigned char)*p < 0x20)
				*p = *p == '\n' ? 0 : ' ';
	}
	fclose(f);
}

/* The runner: configured, or kcsd-runner next to this executable. */
static bool
runner_path(const ApiCtx *a, char *out, size_t cap)
{
	if (a->cfg.runner && *a->cfg.runner) {
		snprintf(out, cap, "%s", a->cfg.runner);
		return true;
	}
	ssize_t n = readlink("/proc/self/exe", out, cap - 1);
	if (n <= 0 || (size_t)n >= cap - 1)
		return false;
	out[n] = 0;
	char *slash = strrchr(out, '/');
	if (!slash || (size_t)(slash - out) + sizeof "/kcsd-runner" > cap)
		return false;
	strcpy(slash, "/kcsd-runner");
	return true;
}

/* ---- the gate: at most verify_concurrency verifies at once ----------------------- */

/* A counting semaphore with a bounded, timed wait. Waiting happens on a
 * worker thread (verify is a blocking route), so the bound on waiters is
 * also a bound on the workers verifies can take from compiles. */
struct VerifyGate {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC; broadcast when a slot frees */
	int slots, queue, wait_s;
	int running, running_max, waiting;
	uint64_t refused;
};

VerifyGate *
api_verify_gate_new(const ApiConfig *cfg)
{
	VerifyGate *g = kc_xcalloc(1, sizeof *g);
	pthread_mutex_init(&g->mu, NULL);
	kc_cond_init_monotonic(&g->cv);
	g->slots =
	    cfg->verify_concurrency > 0 ? cfg->verify_concurrency : VERIFY_DEFAULT_CONCURRENCY;
	g->queue = cfg->verify_queue > 0 ? cfg->verify_queue : 0;
	g->wait_s = cfg->verify_wait_s > 0 ? cfg->verify_wait_s : VERIFY_DEFAULT_WAIT_S;
	return g;
}

void
api_verify_gate_free(VerifyGate *g)
{
	if (!g)
		return;
	KC_ASSERT(g->running == 0 && g->waiting == 0);
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

void
api_verify_stats(ApiCtx *a, ApiVerifyStats *st)
{
	VerifyGate *g = a->gate;
	pthread_mutex_lock(&g->mu);
	st->slots = g->slots;
	st->running = g->running;
	st->running_max = g->running_max;
	st->waiting = g->waiting;
	st->refused = g->refused;
	pthread_mutex_unlock(&g->mu);
}

/* Takes a slot, or fills *resp with 503 overloaded and returns false: at
 * once when verify_queue requests already wait, else after verify_wait_s.
 * Waiters are not served in order: whichever wakes first takes a freed
 * slot; each gives up after its own verify_wait_s. */
static bool
gate_enter(ApiCtx *a, ApiResponse *resp)
{
	VerifyGate *g = a->gate;
	char msg[200];
	bool full = false, late = false;
	pthread_mutex_lock(&g->mu);
	if (g->running < g->slots) {
		/* a free slot */
	} else if (g->waiting >= g->queue) {
		full = true;
	} else {
		int64_t deadline = kc_now_us() + (int64_t)g->wait_s * 1000000;
		g->waiting++;
		while (g->running >= g->slots)
			if (kc_cond_wait_until(&g->cv, &g->mu, deadline) == ETIMEDOUT &&
			    g->running >= g->slots) {
				late = true;
				break;
			}
		g->waiting--;
	}
	if (full || late) {
		g->refused++;
		pthread_mutex_unlock(&g->mu);
		if (full)
			snprintf(msg, sizeof msg,
			         "all %d verify slots are busy and %d more verifies wait (kcsd "
			         "--verify-concurrency, --verify-queue); retry later",
			         g->slots, g->queue);
		else
			snprintf(msg, sizeof msg,
			         "no verify slot within %d s (kcsd --verify-wait-s); retry later",
			         g->wait_s);
		api_reply_error(resp, KC_OVERLOADED, "verify", msg);
		/* a verify slot turns over in about a kernel run, not in a second */
		snprintf(resp->header_value, sizeof resp->header_value, "%d",
		         a->cfg.verify_timeout_s > 0 ? a->cfg.verify_timeout_s
		                                     : VERIFY_DEFAULT_TIMEOUT_S);
		return false;
	}
	if (++g->running > g->running_max)
		g->running_max = g->running;
	pthread_mutex_unlock(&g->mu);
	return true;
}

static void
gate_leave(ApiCtx *a)
{
	VerifyGate *g = a->gate;
	pthread_mutex_lock(&g->mu);
	KC_ASSERT(g->running > 0);
	g->running--;
	/* every waiter re-checks; one takes the slot, a timed-out one leaves */
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

/* The CPUs kcsd may use: a runner with more threads only time-slices them. */
static int
cpus_online(void)
{
	return kc_cpu_count();
}

/* ---- the runner process ------------------------------------------------------- */

typedef struct RunSpec {
	const char *runner, *so, *symbol, *in, *out, *err;
	const char *scratch; /* the runner's working directory, its only writable place */
	const char *ref;     /* reference mode: the graph file (so, symbol unused) */
	const char *limits;  /* reference mode: "ops,tensors,rank,elements" */
	size_t max_bytes;    /* reference mode: the interpreter's memory cap */
	int threads;
	int timeout_s;
	size_t mem_bytes;
	const char *fault; /* NULL, "crash" or "hang" */
} RunSpec;

static void
sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Spawns the runner and waits for it, killing it at the timeout. */
static RunOutcome
run_kernel(const RunSpec *rs, char *detail, size_t cap)
{
	char threads[24], cpu[24], mem[32], maxb[32];
	const char *argv[24];
	int n = 0;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	pid_t pid;
	int status = 0, rc;

	snprintf(threads, sizeof threads, "%d", rs->threads);
	snprintf(cpu, sizeof cpu, "%d", rs->timeout_s * (rs->threads + 1) + 1);
	snprintf(mem, sizeof mem, "%zu", rs->mem_bytes);
	snprintf(maxb, sizeof maxb, "%zu", rs->max_bytes);
	argv[n++] = rs->runner;
	if (rs->ref) {
		argv[n++] = "--ref";
		argv[n++] = rs->ref;
		argv[n++] = "--limits";
		argv[n++] = rs->limits;
		argv[n++] = "--max-bytes";
		argv[n++] = maxb;
	} else {
		argv[n++] = "--so";
		argv[n++] = rs->so;
		argv[n++] = "--symbol";
		argv[n++] = rs->symbol;
	}
	argv[n++] = "--in";
	argv[n++] = rs->in;
	argv[n++] = "--out";
	argv[n++] = rs->out;
	argv[n++] = "--threads";
	argv[n++] = threads;
	argv[n++] = "--cpu-s";
	argv[n++] = cpu;
	argv[n++] = "--mem-bytes";
	argv[n++] = mem;
	argv[n++] = "--scratch";
	argv[n++] = rs->scratch;
	if (rs->fault) {
		argv[n++] = "--fault";
		argv[n++] = rs->fault;
	}
	argv[n] = NULL;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, rs->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	/* none of the daemon's sockets or database files */
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	/* no blocked signals, default dispositions, its own process group */
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
	                                    POSIX_SPAWN_SETPGROUP);
	/* nothing of the daemon's environment (a password given to kcsd
	 * there is not the kernel's business) */
	char *const envp[] = {NULL};
	rc = posix_spawn(&pid, rs->runner, &fa, &attr, (char *const *)argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc != 0) {
		snprintf(detail, cap, "cannot start %.200s: %s", rs->runner, strerror(rc));
		return RUN_ERROR;
	}

	int64_t deadline = kc_now_us() + (int64_t)rs->timeout_s * 1000000;
	bool killed = false;
	long nap = 1;
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			snprintf(detail, cap, "waitpid: %s", strerror(errno));
			kill(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			return RUN_ERROR;
		}
		if (!killed && kc_now_us() >= deadline) {
			kill(pid, SIGKILL);
			killed = true;
		}
		sleep_ms(nap);
		if (nap < 20)
			nap *= 2;
	}
	if (killed) {
		snprintf(detail, cap, "no result within %d s; the runner was killed",
		         rs->timeout_s);
		return RUN_TIMEOUT;
	}
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		if (sig == SIGXCPU) {
			snprintf(detail, cap, "the runner used up its CPU time limit");
			return RUN_TIMEOUT;
		}
		snprintf(detail, cap, "the runner died of signal %d (%s)", sig, strsignal(sig));
		return RUN_CRASHED;
	}
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	if (code == 0)
		return RUN_OK;
	char line[200];
	first_line(rs->err, line, sizeof line);
	if (code == 4) {
		snprintf(detail, cap, "runner failed: %s", line);
		return RUN_ERROR;
	}
	if (code == 5) { /* reference mode: the interpreter refused */
		snprintf(detail, cap, "%s", line);
		return RUN_REFUSED;
	}
	snprintf(detail, cap, "the runner exited with status %d%s%s", code, line[0] ? ": " : "",
	         line);
	return RUN_CRASHED;
}

/* ---- targets ------------------------------------------------------------------ */

/* True if every "+feature" of `need` is in `have` (comma lists). */
static bool
features_subset(const char *need, const char *have)
{
	const char *p = need;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n > 0 && p[0] == '+') {
			bool found = false;
			for (const char *q = have; *q;) {
				const char *qe = strchr(q, ',');
				size_t qn = qe ? (size_t)(qe - q) : strlen(q);
				if (qn == n && memcmp(p, q, n) == 0) {
					found = true;
					break;
				}
				q += qn + (qe != NULL);
			}
			if (!found)
				return false;
		}
		p += n + (e != NULL);
	}
	return true;
}

/* The host can run code for t: same triple; the host's CPU model or the
 * generic one; explicit features a subset of the host's. */
static bool
runnable(const ApiCtx *a, const KcTarget *t)
{
	if (!a->host_ok || strcmp(t->triple, a->host.triple) != 0)
		return false;
	if (strcmp(t->cpu, a->host.cpu) != 0 && strcmp(t->cpu, "x86-64") != 0 &&
	    strcmp(t->cpu, "generic") != 0)
		return false;
	return features_subset(t->features, a->host.features);
}

/* ?target= for the inner compile request: our resolved name for "target",
 * the caller's values for everything else. */
typedef struct InnerQuery {
	const ApiRequest *outer;
	const char *target;
} InnerQuery;

static const char *
inner_query(void *closure, const char *key)
{
	const InnerQuery *q = closure;
	if (strcmp(key, "target") == 0)
		return q->target;
	if (strcmp(key, "inject") == 0)
		return NULL; /* verify's own: it hangs the runner, not the compile */
	return api_query(q->outer, key);
}

/* ---- the handler ---------------------------------------------------------------- */

static void
put_num(KcBuf *b, double x)
{
	if (isfinite(x))
		kc_buf_printf(b, "%.9g", x);
	else
		kc_buf_puts(b, "null");
}

static bool
parse_u64(const char *s, uint64_t *out)
{
	char *end;
	if (!s || !*s || *s == '-')
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/* What comparing one output found; got and want are at first_bad. */
typedef struct Cmp {
	double maxa, maxr, got, want;
	int64_t bad, first_bad, nties;
} Cmp;

/* Compares one output of x->numel elements a chunk at a time: the
 * kernel's bytes at at[0] of fd[0], the reference's at at[1] of fd[1] and
 * its tie bytes at at[2] of fd[1], read into buf[0..2]
 * (VERIFY_CHUNK_ELEMS elements each). False if a read fails. */
static bool
compare_output(const int fd[2], const off_t at[3], const Arg *x, double tol,
               unsigned char *const buf[3], Cmp *cm)
{
	bool fl = is_float_name(x->dtype);
	memset(cm, 0, sizeof *cm);
	cm->first_bad = -1;
	for (int64_t e0 = 0; e0 < x->numel; e0 += VERIFY_CHUNK_ELEMS) {
		int64_t n = x->numel - e0 < VERIFY_CHUNK_ELEMS ? x->numel - e0 : VERIFY_CHUNK_ELEMS;
		size_t nb = (size_t)n * (size_t)x->esize;
		off_t eo = (off_t)e0 * x->esize;
		if (!pread_all(fd[0], buf[0], nb, at[0] + eo) ||
		    !pread_all(fd[1], buf[1], nb, at[1] + eo) ||
		    !pread_all(fd[1], buf[2], (size_t)n, at[2] + (off_t)e0))
			return false;
		for (int64_t k = 0; k < n; k++) {
			double gv = elem(buf[0], k, x->dtype);
			double rv = elem(buf[1], k, x->dtype);
			bool same;
			if (fl)
				same = (isnan(gv) && isnan(rv)) || gv == rv ||
				       fabs(gv - rv) <= tol + tol * fabs(rv);
			else
				same = memcmp(buf[0] + k * x->esize, buf[1] + k * x->esize,
				              (size_t)x->esize) == 0;
			if (!same && buf[2][k]) { /* a near-tie comparison upstream */
				cm->nties++;
				continue;
			}
			if (!(isnan(gv) && isnan(rv)) && gv != rv) {
				double ad = fabs(gv - rv);
				if (!(ad <= cm->maxa))
					cm->maxa = ad;
				if (rv != 0 && !(ad / fabs(rv) <= cm->maxr))
					cm->maxr = ad / fabs(rv);
			}
			if (!same && cm->bad++ == 0) {
				cm->first_bad = e0 + k;
				cm->got = gv;
				cm->want = rv;
			}
		}
	}
	return true;
}

/* Body: a composite JSON document; query: target=NAME (default cpu),
 * seed=N, threads=N (0: rt == NULL; at most the CPUs online),
 * inject=crash|hang (test-only). */
void
h_verify(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	int64_t t0 = kc_now_us();
	KcErr err = {0};
	KcTarget tgt;
	ApiResponse cresp = {0};
	CompileCtx *c = NULL;
	KcGraph *g = NULL;
	cJSON *meta = NULL;
	unsigned char *obj = NULL;
	size_t obj_len = 0;
	Arg *ai = NULL;
	unsigned char *cbuf[3] = {NULL, NULL, NULL};
	int ofd[2] = {-1, -1};
	bool slot = false;
	char dir[512] = "", so[600], in[600], out[600], errp[600], runner[4096];
	char gpath[600], rpath[600];
	char tbuf[1024], detail[400] = "";
	uint64_t seed = 0, threads = VERIFY_DEFAULT_THREADS;
	const char *inject = api_query(req, "inject");
	const char *sq = api_query(req, "seed"), *thq = api_query(req, "threads");
	int nargs = 0, nin = 0;
	KcBuf rb = {0}, outs = {0};

	if (inject && !a->cfg.test_fault_injection) {
		api_reply_error(resp, KC_BAD_REQUEST, "?inject",
		                "?inject is test-only; start kcsd with --test-fault-injection 1");
		return;
	}
	if (inject && strcmp(inject, "crash") != 0 && strcmp(inject, "hang") != 0 &&
	    strcmp(inject, "ref-crash") != 0) {
		api_reply_error(resp, KC_BAD_REQUEST, "?inject",
		                "inject must be crash, hang or ref-crash");
		return;
	}
	if (sq && !parse_u64(sq, &seed)) {
		api_reply_error(resp, KC_BAD_REQUEST, "?seed", "seed must be a decimal uint64");
		return;
	}
	if (thq && (!parse_u64(thq, &threads) || threads > VERIFY_MAX_THREADS)) {
		api_reply_error(resp, KC_BAD_REQUEST, "?threads", "threads must be 0..64");
		return;
	}
	/* more threads than CPUs only buy RLIMIT_CPU seconds; the reply's
	 * "threads" says what ran */
	if (threads > (uint64_t)cpus_online())
		threads = (uint64_t)cpus_online();
	const char *tq = api_query_target(req, tbuf, sizeof tbuf);
	if (kc_target_resolve(tq ? tq : "cpu", &tgt, &err) != KC_OK) {
		if (!err.where[0])
			snprintf(err.where, sizeof err.where, "?target");
		api_reply_kcerr(resp, &err);
		return;
	}
	if (!runnable(a, &tgt)) {
		char msg[300];
		snprintf(msg, sizeof msg, "target %.100s cannot run on this host (%.100s)",
		         tgt.name, a->host_ok ? a->host.name : "unknown");
		api_reply_error(resp, KC_BAD_TARGET, "?target", msg);
		return;
	}

	/* compile through POST /v1/compile's own path */
	InnerQuery iq = {.outer = req, .target = tgt.name};
	ApiRequest creq = *req;
	creq.query = inner_query;
	creq.query_closure = &iq;
	creq.parked = NULL; /* wait in place: verify goes on after the compile */
	creq.wake = NULL;
	creq.wake_closure = NULL;
	h_compile(a, m, &creq, &cresp);
	if (cresp.status != 200) {
		*resp = cresp;
		return;
	}
	meta = cJSON_ParseWithLength(cresp.body, cresp.body_len);
	const cJSON *jkid = cJSON_GetObjectItemCaseSensitive(meta, "kernel_id");
	const cJSON *jsym = cJSON_GetObjectItemCaseSensitive(meta, "symbol");
	const cJSON *jobj = cJSON_GetObjectItemCaseSensitive(meta, "object_base64");
	if (!cJSON_IsString(jkid) || !cJSON_IsString(jsym) || !cJSON_IsString(jobj) ||
	    !(obj = b64_decode(jobj->valuestring, &obj_len))) {
		api_reply_error(resp, KC_INTERNAL, "verify", "unreadable compile response");
		goto done;
	}

	/* the graph again, for the inputs and the interpreter */
	c = compile_ctx_new();
	if (kc_parse(c, req->body ? req->body : "", req->body_len, &a->cfg.limits, &g, &err) !=
	    KC_OK) {
		api_reply_kcerr(resp, &err);
		goto done;
	}
	nargs = kc_graph_nargs(g);
	ai = kc_xcalloc((size_t)nargs + 1, sizeof *ai);
	size_t total = 0;
	size_t max_arg = a->cfg.verify_max_bytes ? a->cfg.verify_max_bytes : VERIFY_MAX_ARG_BYTES;
	for (int i = 0; i < nargs; i++) {
		KcArgInfo x;
		kc_graph_arg(g, i, &x);
		ai[i].dtype = x.dtype;
		ai[i].esize = dtype_size(x.dtype);
		ai[i].numel = 1;
		for (int d = 0; d < x.rank; d++)
			ai[i].numel *= x.shape[d];
		KC_ASSERT(ai[i].esize > 0);
		ai[i].bytes = (size_t)ai[i].numel * (size_t)ai[i].esize;
		total += ai[i].bytes * (x.is_output ? 2 : 1);
		if (!x.is_output)
			nin++;
		if (total > max_arg) {
			char why[160];
			snprintf(why, sizeof why,
			         "the kernel's arguments are too large to verify (over %zu MiB; "
			         "kcsd --verify-max-bytes)",
			         max_arg >> 20);
			api_reply_error(resp, KC_TOO_LARGE, "verify", why);
			goto done;
		}
	}
	if (!runner_path(a, runner, sizeof runner)) {
		api_reply_error(resp, KC_INTERNAL, "verify", "cannot locate kcsd-runner");
		goto done;
	}

	/* everything above is the compile's; the scratch files and runners are the
	 * gate's */
	if (!(slot = gate_enter(a, resp)))
		goto done;

	/* files for the runner */
	const char *tmp = a->cfg.tmpdir && *a->cfg.tmpdir ? a->cfg.tmpdir : getenv("TMPDIR");
	if (!tmp || !*tmp)
		tmp = "/tmp";
	snprintf(dir, sizeof dir, "%s/kcsd-verify-XXXXXX", tmp);
	if (!mkdtemp(dir)) {
		dir[0] = 0;
		api_reply_error(resp, KC_INTERNAL, "verify", "cannot create a scratch directory");
		goto done;
	}
	snprintf(so, sizeof so, "%s/k.so", dir);
	snprintf(in, sizeof in, "%s/in.bin", dir);
	snprintf(out, sizeof out, "%s/out.bin", dir);
	snprintf(errp, sizeof errp, "%s/err.txt", dir);
	snprintf(gpath, sizeof gpath, "%s/graph.json", dir);
	snprintf(rpath, sizeof rpath, "%s/ref.bin", dir);
	if (!write_all(so, obj, obj_len, 0700) || !write_inputs(in, c, g, seed, ai, nargs, nin) ||
	    !write_all(gpath, req->body ? req->body : "", req->body_len, 0600)) {
		api_reply_error(resp, KC_INTERNAL, "verify", "cannot write scratch files");
		goto done;
	}
	free(obj);
	obj = NULL;

	RunSpec rs = {
	    .runner = runner,
	    .so = so,
	    .symbol = jsym->valuestring,
	    .in = in,
	    .scratch = dir,
	    .out = out,
	    .err = errp,
	    .threads = (int)threads,
	    .timeout_s =
	        a->cfg.verify_timeout_s > 0 ? a->cfg.verify_timeout_s : VERIFY_DEFAULT_TIMEOUT_S,
	    .mem_bytes = ((size_t)4 << 30) + 2 * total, /* address space: threads, arenas */
	    .fault = inject && strcmp(inject, "ref-crash") != 0 ? inject : NULL,
	};
	int64_t r0 = kc_now_us();
	RunOutcome ro = run_kernel(&rs, detail, sizeof detail);
	double run_ms = api_ms_since(r0);
	if (ro == RUN_ERROR || ro == RUN_REFUSED) {
		kc_log(KC_LOG_WARN, "verify: %s", detail);
		api_reply_error(resp, KC_INTERNAL, "verify", detail);
		goto done;
	}
	bool ok = ro == RUN_OK;
	const char *failure = ro == RUN_CRASHED ? "crashed" : ro == RUN_TIMEOUT ? "timeout" : NULL;
	if (ok) {
		size_t obytes = 0, rbytes = 0;
		for (int i = nin; i < nargs; i++) {
			obytes += ai[i].bytes;
			rbytes += ai[i].bytes + (size_t)ai[i].numel;
		}
		if ((ofd[0] = open_exact(out, obytes)) < 0) {
			api_reply_error(resp, KC_INTERNAL, "verify",
			                "the runner's output is incomplete");
			goto done;
		}
		/* the reference: a second runner, same inputs, same limits */
		char lims[128];
		const KcLimits *lm = &a->cfg.limits;
		snprintf(lims, sizeof lims, "%d,%d,%d,%lld", lm->max_ops, lm->max_tensors,
		         lm->max_rank, (long long)lm->max_elements);
		RunSpec rr = rs;
		rr.ref = gpath;
		rr.limits = lims;
		rr.out = rpath;
		rr.max_bytes = 4 * max_arg;
		rr.mem_bytes = ((size_t)4 << 30) + 4 * max_arg + 2 * total;
		rr.fault = inject && strcmp(inject, "ref-crash") == 0 ? "crash" : NULL;
		/* the interpreter is single-threaded and works in double cells:
		 * far slower than the kernel, so it gets ten times the kernel's
		 * limit, and at least a minute */
		rr.threads = 0;
		rr.timeout_s = rs.timeout_s > 6 ? 10 * rs.timeout_s : 60;
		RunOutcome rro = run_kernel(&rr, detail, sizeof detail);
		if (rro == RUN_REFUSED) {
			/* "<wire code>: <message>" from the interpreter */
			KcStatus rst =
			    strncmp(detail, "too_large:", 10) == 0 ? KC_TOO_LARGE : KC_INTERNAL;
			api_reply_error(resp, rst, "verify", detail);
			goto done;
		}
		if (rro != RUN_OK) {
			char why[500];
			snprintf(why, sizeof why, "reference interpreter: %s", detail);
			kc_log(KC_LOG_WARN, "verify %s: %s", jkid->valuestring, why);
			api_reply_error(resp, KC_INTERNAL, "verify", why);
			goto done;
		}
		detail[0] = 0;
		if ((ofd[1] = open_exact(rpath, rbytes)) < 0) {
			api_reply_error(resp, KC_INTERNAL, "verify",
			                "the reference runner's output is incomplete");
			goto done;
		}
		cbuf[0] = kc_xmalloc((size_t)VERIFY_CHUNK_ELEMS * 8);
		cbuf[1] = kc_xmalloc((size_t)VERIFY_CHUNK_ELEMS * 8);
		cbuf[2] = kc_xmalloc((size_t)VERIFY_CHUNK_ELEMS);
		/* both files hold the outputs back to back; ref.bin then the tie
		 * bytes, one per output element */
		off_t at[3] = {0, 0, (off_t)obytes};
		kc_buf_putc(&outs, '[');
		for (int i = nin; i < nargs; i++) {
			KcArgInfo x;
			Cmp cm;
			kc_graph_arg(g, i, &x);
			bool fl = is_float_name(ai[i].dtype);
			double tol = kc_interp_half_upstream(c, g, i - nin) ? 1e-2 : 1e-4;
			if (!compare_output(ofd, at, &ai[i], tol, cbuf, &cm)) {
				api_reply_error(resp, KC_INTERNAL, "verify",
				                "cannot read the runners' outputs");
				goto done;
			}
			at[0] += (off_t)ai[i].bytes;
			at[1] += (off_t)ai[i].bytes;
			at[2] += (off_t)ai[i].numel;
			if (cm.bad)
				ok = false;
			kc_buf_printf(&outs, "%s{\"index\":%d,\"tensor_name\":", i > nin ? "," : "",
			              i);
			api_json_str(&outs, x.tensor_name ? x.tensor_name : "");
			kc_buf_puts(&outs, ",\"dtype\":");
			api_json_str(&outs, ai[i].dtype);
			kc_buf_puts(&outs, ",\"max_abs_err\":");
			put_num(&outs, cm.maxa);
			kc_buf_puts(&outs, ",\"max_rel_err\":");
			put_num(&outs, cm.maxr);
			kc_buf_printf(&outs, ",\"tolerance\":%g,\"mismatches\":%lld,\"ties\":%lld",
			              fl ? tol : 0.0, (long long)cm.bad, (long long)cm.nties);
			if (cm.bad) {
				kc_buf_printf(&outs,
				              ",\"first_mismatch\":{\"element\":%lld,\"got\":",
				              (long long)cm.first_bad);
				put_num(&outs, cm.got);
				kc_buf_puts(&outs, ",\"want\":");
				put_num(&outs, cm.want);
				kc_buf_putc(&outs, '}');
			}
			kc_buf_putc(&outs, '}');
		}
		kc_buf_putc(&outs, ']');
		if (!ok)
			failure = "mismatch";
	} else {
		kc_buf_puts(&outs, "[]");
		kc_log(KC_LOG_WARN, "verify %s: %s", jkid->valuestring, detail);
	}

	kc_buf_printf(&rb, "{\"ok\":%s,\"failure\":", ok ? "true" : "false");
	if (failure)
		kc_buf_printf(&rb, "\"%s\"", failure);
	else
		kc_buf_puts(&rb, "null");
	if (detail[0]) {
		kc_buf_puts(&rb, ",\"detail\":");
		api_json_str(&rb, detail);
	}
	kc_buf_puts(&rb, ",\"outputs\":");
	kc_buf_append(&rb, outs.data, outs.len);
	kc_buf_printf(&rb, ",\"kernel_id\":\"%s\",\"target\":", jkid->valuestring);
	api_json_str(&rb, tgt.name);
	kc_buf_printf(&rb,
	              ",\"seed\":%llu,\"threads\":%d,\"cache\":\"%s\",\"run_ms\":%.3f,"
	              "\"request_ms\":%.3f}\n",
	              (unsigned long long)seed, (int)threads, cresp.cache ? cresp.cache : "miss",
	              run_ms, api_ms_since(t0));
	api_reply_json_buf(resp, 200, &rb);

done:
	for (int i = 0; i < 2; i++)
		if (ofd[i] >= 0)
			close(ofd[i]);
	if (dir[0]) {
		unlink(so);
		unlink(in);
		unlink(out);
		unlink(errp);
		unlink(gpath);
		unlink(rpath);
		rmdir(dir);
	}
	if (slot)
		gate_leave(a);
	for (int i = 0; i < 3; i++)
		free(cbuf[i]);
	free(ai);
	kc_buf_free(&rb);
	kc_buf_free(&outs);
	free(obj);
	cJSON_Delete(meta);
	api_response_free(&cresp);
	compile_ctx_free(c);
}
