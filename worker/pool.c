/* pool.c - kcsd's supervised pool of kcsd-worker processes.
 *
 * The one idea: a job owns a worker for its duration, and anything that
 * goes wrong with the worker ends in the same place: the worker is killed
 * and reaped (which tells what happened), its slot is marked dead, and the
 * supervisor thread starts a replacement (spawn, hello with the build id,
 * a throw-away compile) before the slot takes work again. A caller never
 * blocks past its deadline: a job past timeout_s is killed (504), a worker
 * that dies answers 500 with the signal, and a caller that finds no worker
 * idle within the deadline gets a 503.
 *
 * Slots: DEAD (no process) -> STARTING (the supervisor or kc_pool_start
 * owns it) -> READY (idle, warm) -> BUSY (a caller owns it) -> READY, or
 * DEAD through reap_slot. Only a slot's owner changes its pid and fd, under
 * mu (kc_pool_stats reads the pids), and reads them without it; state
 * changes are under mu. The supervisor also polls idle workers' sockets, so a worker that
 * dies while idle (kill -9, the OOM killer) is replaced at once rather
 * than failing the next job sent to it.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

typedef enum SlotState { SLOT_DEAD, SLOT_STARTING, SLOT_READY, SLOT_BUSY } SlotState;

typedef struct Slot {
	SlotState state;
	pid_t pid;
	int fd;
	char scratch[PATH_MAX];
	int failures;        /* starts failed in a row */
	int64_t retry_at_us; /* DEAD: not started again before this */
} Slot;

struct KcPool {
	KcPoolConfig cfg; /* strings owned */
	KcTarget warm_target;
	pthread_mutex_t mu;
	pthread_cond_t changed; /* a slot became READY, or stopping */
	Slot *slots;
	int n;
	bool stopping;
	int wake[2]; /* the supervisor's self-pipe */
	/* detached, so kcsd's _exit after an abandoned shutdown leaves no
	 * thread behind to join; kc_pool_free waits for sup_running to go
	 * false (under mu, with `changed`) instead */
	bool sup_running;
	KcPoolStats st;
	char last_error[320]; /* the last failed start, for the 503 */
};

/* What the throw-away compile builds: one Add, as every backend has. */
static const char warm_body[] =
    "{\"composite\":true,\"composite_graph\":\"warm.1\",\"id\":0,\"op\":\"Fused_Add_warmup\","
    "\"platform\":\"AKG\",\"process\":\"cpu\",\"version\":1,"
    "\"input_desc\":[[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"shape\":[256],"
    "\"tensor_name\":\"input_0\"}],[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\","
    "\"shape\":[256],\"tensor_name\":\"input_1\"}]],"
    "\"output_desc\":[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"shape\":[256],"
    "\"tensor_name\":\"output_0_0\"}],"
    "\"op_desc\":[{\"name\":\"Add\",\"attr\":null,\"impl_path\":\"\",\"input_desc\":"
    "[[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"shape\":[256],\"tensor_name\":"
    "\"input_0\",\"name\":\"x\"}],[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\","
    "\"shape\":[256],\"tensor_name\":\"input_1\",\"name\":\"y\"}]],\"output_desc\":"
    "[{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"shape\":[256],\"tensor_name\":"
    "\"output_0_0\",\"name\":\"output\"}]}]}";

#define HELLO_TIMEOUT_US ((int64_t)10 * 1000 * 1000)
#define RETRY_MAX_US ((int64_t)10 * 1000 * 1000)

static void
wake_supervisor(KcPool *p)
{
	char c = 1;
	ssize_t r = write(p->wake[1], &c, 1);
	(void)r; /* a full pipe already wakes it */
}

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	if (ftw->level > 0)
		remove(path);
	return 0;
}

/* Empties a scratch directory: a killed worker leaves linker files. */
static void
scratch_clear(const char *dir)
{
	if (*dir)
		nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* ---- one worker's life --------------------------------------------------- */

static bool
spawn_worker(KcPool *p, Slot *s, KcErr *err)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return kc_fail(err, KC_INTERNAL, NULL, "socketpair: %s", strerror(errno)), false;
	/* fd 3 in the child; dup2 onto itself would keep CLOEXEC */
	if (sv[1] == 3) {
		int d = fcntl(sv[1], F_DUPFD_CLOEXEC, 4);
		close(sv[1]);
		sv[1] = d;
	}
	char max_bytes[32];
	snprintf(max_bytes, sizeof max_bytes, "%lld", (long long)p->cfg.max_bytes);
	char *argv[] = {(char *)p->cfg.exe,
	                "--fd",
	                "3",
	                "--scratch",
	                s->scratch,
	                "--max-bytes",
	                max_bytes,
	                "--log-level",
	                (char *)p->cfg.log_level,
	                NULL};
	char *envp[] = {NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
	posix_spawn_file_actions_addclosefrom_np(&fa, 4);
	posix_spawnattr_init(&attr);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	/* a process group of its own: the worker, its link helper and a
	 * linker the helper runs die together (reap_slot) */
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
	                                    POSIX_SPAWN_SETPGROUP);
	pid_t pid;
	int rc = posix_spawn(&pid, p->cfg.exe, &fa, &attr, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	close(sv[1]);
	if (rc != 0) {
		close(sv[0]);
		return kc_fail(err, KC_INTERNAL, NULL, "cannot start compile worker %s: %s",
		               p->cfg.exe, strerror(rc)),
		       false;
	}
	/* under mu: kc_pool_stats reads pids for /metrics */
	pthread_mutex_lock(&p->mu);
	s->pid = pid;
	s->fd = sv[0];
	pthread_mutex_unlock(&p->mu);
	return true;
}

/* Kills and reaps the slot's process, closes its socket; *why (may be
 * NULL) describes how it ended. Returns the wait status. */
static int
reap_slot(KcPool *p, Slot *s, char *why, size_t cap, bool *oom)
{
	int status = 0;
	struct rusage ru = {0};
	if (oom)
		*oom = false;
	if (s->pid > 0) {
		/* a process already dying keeps the signal it dies of; the
		 * group takes the link helper and its linker along */
		kill(-s->pid, SIGKILL);
		while (wait4(s->pid, &status, 0, &ru) < 0 && errno == EINTR)
			;
	}
	if (s->fd >= 0)
		close(s->fd);
	int64_t rss = (int64_t)ru.ru_maxrss * 1024;
	bool at_cap = p->cfg.max_bytes > 0 && rss >= p->cfg.max_bytes / 4 * 3;
	if (why && WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		const char *abbrev = sigabbrev_np(sig);
		if (at_cap)
			snprintf(
			    why, cap,
			    "the compile worker (pid %d) reached its memory cap "
			    "(compile_max_bytes %lld MiB; %lld MiB resident) and died of signal %d "
			    "(SIG%s)",
			    (int)s->pid, (long long)(p->cfg.max_bytes >> 20),
			    (long long)(rss >> 20), sig, abbrev ? abbrev : "?");
		else
			snprintf(why, cap,
			         "the compile worker (pid %d) was killed by signal %d (SIG%s)",
			         (int)s->pid, sig, abbrev ? abbrev : "?");
	} else if (why && WIFEXITED(status)) {
		snprintf(why, cap,
		         "the compile worker (pid %d) exited with status %d (LLVM's fatal errors "
		         "exit so)",
		         (int)s->pid, WEXITSTATUS(status));
	} else if (why) {
		snprintf(why, cap, "the compile worker (pid %d) ended", (int)s->pid);
	}
	if (oom)
		*oom = at_cap && (WIFSIGNALED(status) || WIFEXITED(status));
	pthread_mutex_lock(&p->mu);
	s->pid = 0;
	s->fd = -1;
	pthread_mutex_unlock(&p->mu);
	scratch_clear(s->scratch);
	return status;
}

/* Reads the hello line: "kcsd-worker-v1 build_id=<id> pid=<pid>". */
static bool
read_hello(KcPool *p, Slot *s, KcErr *err)
{
	char line[256];
	size_t n = 0;
	int64_t deadline = kc_now_us() + HELLO_TIMEOUT_US;
	while (n < sizeof line - 1) {
		int64_t left = deadline - kc_now_us();
		struct pollfd pf = {.fd = s->fd, .events = POLLIN};
		if (left <= 0 || poll(&pf, 1, (int)(left / 1000) + 1) == 0)
			return kc_fail(err, KC_INTERNAL, NULL,
			               "compile worker %s (pid %d) did not say hello within %lld s",
			               p->cfg.exe, (int)s->pid,
			               (long long)(HELLO_TIMEOUT_US / 1000000)),
			       false;
		ssize_t k = read(s->fd, line + n, 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return kc_fail(
			           err, KC_INTERNAL, NULL,
			           "compile worker %s (pid %d) closed its socket before its hello",
			           p->cfg.exe, (int)s->pid),
			       false;
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = 0;
	char id[128];
	int pid;
	if (sscanf(line, WIRE_HELLO " build_id=%127s pid=%d", id, &pid) != 2)
		return kc_fail(err, KC_INTERNAL, NULL,
		               "compile worker %s (pid %d) sent a malformed hello: \"%.80s\"",
		               p->cfg.exe, (int)s->pid, line),
		       false;
	if (strcmp(id, p->cfg.build_id) != 0)
		return kc_fail(err, KC_INTERNAL, NULL,
		               "compile worker %s reports build id %s, this kcsd is build %s: "
		               "install the kcsd-worker built with this kcsd",
		               p->cfg.exe, id, p->cfg.build_id),
		       false;
	return true;
}

static bool
send_job(Slot *s, const KcJob *job)
{
	KcBuf payload = {0};
	wire_job_encode(job, &payload);
	bool sent = wire_send_frame(s->fd, WIRE_JOB, &payload);
	kc_buf_free(&payload);
	return sent;
}

/* Reads the reply to a job sent (sent false: the send failed) by
 * deadline_us. On anything but a reply, the worker is reaped, counted,
 * and the slot left without a process for the caller to mark dead. */
static KcStatus
recv_reply(KcPool *p, Slot *s, bool sent, int64_t deadline_us, KcJobResult *out, KcErr *err)
{
	KcBuf in = {0};
	uint32_t kind = 0;
	WireRead r = sent ? wire_read(s->fd, deadline_us, &kind, &in) : WIRE_EOF;
	KcStatus st = KC_INTERNAL;
	memset(out, 0, sizeof *out);
	if (r == WIRE_OK && kind == WIRE_REPLY &&
	    wire_reply_decode(in.data, in.len, &st, err, out)) {
		kc_buf_free(&in);
		if (st != KC_OK && !err->msg[0])
			kc_fail(err, st, NULL, "%s", kc_status_text(st));
		return st;
	}
	kc_buf_free(&in);
	char why[320];
	bool oom = false;
	pid_t pid = s->pid;
	reap_slot(p, s, why, sizeof why, &oom);
	memset(err, 0, sizeof *err);
	pthread_mutex_lock(&p->mu);
	bool stopping = p->stopping;
	if (!stopping && r == WIRE_TIMEOUT)
		p->st.timeouts++;
	else if (!stopping) {
		p->st.crashes++;
		p->st.oom += oom;
	}
	pthread_mutex_unlock(&p->mu);
	if (stopping)
		return kc_fail(err, KC_SHUTTING_DOWN, NULL,
		               "kcsd is stopping: the compile was ended");
	if (r == WIRE_TIMEOUT)
		return kc_fail(err, KC_COMPILE_TIMEOUT, NULL,
		               "the compile ran past compile_timeout_s (%d s); its worker (pid %d) "
		               "was killed",
		               p->cfg.timeout_s, (int)pid);
	if (r == WIRE_BAD || r == WIRE_OK)
		return kc_fail(err, KC_COMPILER_CRASHED, NULL, "%s after a malformed reply", why);
	return kc_fail(err, KC_COMPILER_CRASHED, NULL, "%s", why);
}

static void
warm_job(const KcPool *p, KcJob *job)
{
	*job = (KcJob){
	    .kind = KC_JOB_COMPILE,
	    .body = warm_body,
	    .body_len = sizeof warm_body - 1,
	    .target = p->warm_target,
	};
}

/* The warm-up's reply (its job already sent): false with err set, the
 * worker reaped, if it is not a kernel. */
static bool
warm_reply(KcPool *p, Slot *s, bool sent, KcErr *err)
{
	KcJobResult res;
	KcErr werr = {0};
	KcStatus st =
	    recv_reply(p, s, sent, kc_now_us() + (int64_t)p->cfg.timeout_s * 1000000, &res, &werr);
	kc_job_result_free(&res);
	if (st == KC_OK)
		return true;
	if (s->pid > 0)
		reap_slot(p, s, NULL, 0, NULL);
	kc_fail(err, KC_INTERNAL, NULL, "compile worker %s failed its warm-up compile: %s",
	        p->cfg.exe, werr.msg);
	return false;
}

/* Spawn, hello, warm-up: a slot owned by the caller (STARTING) becomes a
 * live, warm worker, or is left without a process. */
static bool
start_slot(KcPool *p, Slot *s, KcErr *err)
{
	if (!spawn_worker(p, s, err))
		return false;
	if (!read_hello(p, s, err)) {
		reap_slot(p, s, NULL, 0, NULL);
		return false;
	}
	KcJob warm;
	warm_job(p, &warm);
	return warm_reply(p, s, send_job(s, &warm), err);
}

/* ---- the supervisor ----------------------------------------------------- */

static void
mark_started(KcPool *p, Slot *s, bool ok, const KcErr *err)
{
	pthread_mutex_lock(&p->mu);
	if (ok) {
		s->state = SLOT_READY;
		s->failures = 0;
		p->st.started++;
		pthread_cond_broadcast(&p->changed);
	} else {
		s->state = SLOT_DEAD;
		s->failures++;
		int64_t backoff = (int64_t)250000 << (s->failures < 6 ? s->failures : 6);
		s->retry_at_us = kc_now_us() + (backoff < RETRY_MAX_US ? backoff : RETRY_MAX_US);
		p->st.start_failures++;
		snprintf(p->last_error, sizeof p->last_error, "%s", err->msg);
	}
	pthread_mutex_unlock(&p->mu);
}

static void *
supervise(void *arg)
{
	KcPool *p = arg;
	struct pollfd *pf = kc_xcalloc((size_t)p->n + 1, sizeof *pf);
	int *which = kc_xcalloc((size_t)p->n + 1, sizeof *which);
	for (;;) {
		pthread_mutex_lock(&p->mu);
		if (p->stopping) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		int64_t now = kc_now_us(), next = now + 1000000;
		Slot *start = NULL;
		for (int i = 0; i < p->n && !start; i++) {
			Slot *s = &p->slots[i];
			if (s->state == SLOT_DEAD && s->retry_at_us <= now)
				start = s;
			else if (s->state == SLOT_DEAD && s->retry_at_us < next)
				next = s->retry_at_us;
		}
		if (start) {
			start->state = SLOT_STARTING;
			pthread_mutex_unlock(&p->mu);
			KcErr err = {0};
			bool ok = start_slot(p, start, &err);
			if (!ok)
				kc_log(KC_LOG_ERROR, "%s", err.msg);
			mark_started(p, start, ok, &err);
			continue;
		}
		int np = 0;
		pf[np++] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
		for (int i = 0; i < p->n; i++) {
			if (p->slots[i].state == SLOT_READY) {
				which[np] = i;
				pf[np++] = (struct pollfd){.fd = p->slots[i].fd, .events = POLLIN};
			}
		}
		pthread_mutex_unlock(&p->mu);
		int wait_ms = (int)((next - now) / 1000) + 1;
		if (poll(pf, (nfds_t)np, wait_ms) <= 0)
			continue;
		if (pf[0].revents) {
			char buf[64];
			while (read(p->wake[0], buf, sizeof buf) > 0)
				;
		}
		for (int k = 1; k < np; k++) {
			if (!pf[k].revents)
				continue;
			/* an idle worker has nothing to say: it died, or is confused */
			Slot *s = &p->slots[which[k]];
			pthread_mutex_lock(&p->mu);
			bool mine = s->state == SLOT_READY && s->fd == pf[k].fd;
			if (mine)
				s->state = SLOT_STARTING;
			pthread_mutex_unlock(&p->mu);
			if (!mine)
				continue;
			char why[320];
			reap_slot(p, s, why, sizeof why, NULL);
			kc_log(KC_LOG_WARN, "%s while idle; starting another", why);
			pthread_mutex_lock(&p->mu);
			s->state = SLOT_DEAD;
			s->retry_at_us = 0;
			pthread_mutex_unlock(&p->mu);
		}
	}
	free(pf);
	free(which);
	/* the last touch of p: kc_pool_free may free it once mu is released */
	pthread_mutex_lock(&p->mu);
	p->sup_running = false;
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* ---- the public face ----------------------------------------------------- */

KcPool *
kc_pool_start(const KcPoolConfig *cfg, KcErr *err)
{
	KC_ASSERT(cfg->size >= 1 && cfg->timeout_s >= 1 && cfg->exe && cfg->build_id);
	KcPool *p = kc_xcalloc(1, sizeof *p);
	p->cfg = *cfg;
	p->cfg.exe = kc_xstrdup(cfg->exe);
	p->cfg.scratch_root =
	    kc_xstrdup(cfg->scratch_root && *cfg->scratch_root ? cfg->scratch_root : "/tmp");
	p->cfg.build_id = kc_xstrdup(cfg->build_id);
	p->cfg.log_level = kc_xstrdup(cfg->log_level ? cfg->log_level : "info");
	pthread_mutex_init(&p->mu, NULL);
	kc_cond_init_monotonic(&p->changed);
	p->n = cfg->size;
	p->slots = kc_xcalloc((size_t)p->n, sizeof *p->slots);
	for (int i = 0; i < p->n; i++)
		p->slots[i].fd = -1;
	p->wake[0] = p->wake[1] = -1;
	p->st.size = p->n;
	if (kc_target_host(&p->warm_target, err) != KC_OK)
		goto fail;
	if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		kc_fail(err, KC_INTERNAL, NULL, "pipe: %s", strerror(errno));
		goto fail;
	}
	for (int i = 0; i < p->n; i++) {
		Slot *s = &p->slots[i];
		s->state = SLOT_STARTING;
		snprintf(s->scratch, sizeof s->scratch, "%s/kcsd-worker-XXXXXX",
		         p->cfg.scratch_root);
		if (!mkdtemp(s->scratch)) {
			kc_fail(err, KC_INTERNAL, NULL, "cannot make a scratch directory in %s: %s",
			        p->cfg.scratch_root, strerror(errno));
			s->scratch[0] = 0;
			goto fail;
		}
	}
	/* all spawned first: their start-ups (LLVM's one-time set-up in the
	 * warm-up) overlap */
	for (int i = 0; i < p->n; i++)
		if (!spawn_worker(p, &p->slots[i], err))
			goto fail;
	for (int i = 0; i < p->n; i++)
		if (!read_hello(p, &p->slots[i], err))
			goto fail;
	KcJob warm;
	warm_job(p, &warm);
	bool *sent = kc_xcalloc((size_t)p->n, sizeof *sent);
	for (int i = 0; i < p->n; i++)
		sent[i] = send_job(&p->slots[i], &warm);
	for (int i = 0; i < p->n; i++) {
		if (!warm_reply(p, &p->slots[i], sent[i], err)) {
			free(sent);
			goto fail;
		}
	}
	free(sent);
	for (int i = 0; i < p->n; i++)
		p->slots[i].state = SLOT_READY;
	p->st.started = (uint64_t)p->n;
	pthread_t sup;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	p->sup_running = true;
	int rc = pthread_create(&sup, &attr, supervise, p);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		p->sup_running = false;
		kc_fail(err, KC_INTERNAL, NULL, "cannot start the pool's supervisor thread");
		goto fail;
	}
	return p;
fail:
	kc_pool_free(p);
	return NULL;
}

/* Takes an idle worker (BUSY, owned by the caller) by deadline_us, or
 * NULL with err set. */
static Slot *
take_slot(KcPool *p, int64_t deadline_us, KcErr *err)
{
	pthread_mutex_lock(&p->mu);
	for (;;) {
		if (p->stopping) {
			pthread_mutex_unlock(&p->mu);
			kc_fail(err, KC_SHUTTING_DOWN, NULL, "kcsd is stopping");
			return NULL;
		}
		for (int i = 0; i < p->n; i++) {
			if (p->slots[i].state == SLOT_READY) {
				p->slots[i].state = SLOT_BUSY;
				p->st.busy++;
				pthread_mutex_unlock(&p->mu);
				return &p->slots[i];
			}
		}
		if (kc_cond_wait_until(&p->changed, &p->mu, deadline_us) == ETIMEDOUT) {
			kc_fail(err, KC_OVERLOADED, NULL,
			        "no compile worker became idle within compile_timeout_s (%d s)%s%s",
			        p->cfg.timeout_s,
			        p->last_error[0] ? "; the last start failed: " : "", p->last_error);
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
	}
}

static void
give_slot(KcPool *p, Slot *s, bool alive)
{
	pthread_mutex_lock(&p->mu);
	p->st.busy--;
	if (alive) {
		s->state = SLOT_READY;
		pthread_cond_broadcast(&p->changed);
	} else {
		s->state = SLOT_DEAD;
		s->retry_at_us = 0;
	}
	pthread_mutex_unlock(&p->mu);
	if (!alive)
		wake_supervisor(p);
}

KcStatus
kc_pool_run(KcPool *p, const KcJob *job, KcJobResult *out, KcErr *err)
{
	memset(out, 0, sizeof *out);
	int64_t deadline = kc_now_us() + (int64_t)p->cfg.timeout_s * 1000000;
	for (;;) {
		Slot *s = take_slot(p, deadline, err);
		if (!s)
			return err->status;
		/* a worker that died idle since the supervisor last looked is
		 * not this job's fault: replace it and take another */
		struct pollfd pf = {.fd = s->fd, .events = POLLIN};
		if (poll(&pf, 1, 0) > 0) {
			char why[320];
			reap_slot(p, s, why, sizeof why, NULL);
			kc_log(KC_LOG_WARN, "%s while idle; starting another", why);
			give_slot(p, s, false);
			continue;
		}
		/* the deadline of the compile itself starts when it is sent */
		KcStatus st =
		    recv_reply(p, s, send_job(s, job),
		               kc_now_us() + (int64_t)p->cfg.timeout_s * 1000000, out, err);
		bool alive = s->pid > 0;
		if (alive) {
			pthread_mutex_lock(&p->mu);
			p->st.jobs++;
			pthread_mutex_unlock(&p->mu);
		}
		give_slot(p, s, alive);
		return st;
	}
}

void
kc_pool_stats(KcPool *p, KcPoolStats *out)
{
	pthread_mutex_lock(&p->mu);
	*out = p->st;
	out->ready = 0;
	memset(out->pids, 0, sizeof out->pids);
	for (int i = 0; i < p->n; i++) {
		out->ready += p->slots[i].state == SLOT_READY;
		if (i < 64)
			out->pids[i] = p->slots[i].pid;
	}
	pthread_mutex_unlock(&p->mu);
}

void
kc_pool_stop(KcPool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stopping = true;
	/* busy workers die now: their callers read EOF and answer
	 * shutting_down; idle ones are reaped by kc_pool_free */
	for (int i = 0; i < p->n; i++)
		if (p->slots[i].pid > 0 && p->slots[i].state == SLOT_BUSY)
			kill(-p->slots[i].pid, SIGKILL);
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->mu);
	if (p->wake[1] >= 0)
		wake_supervisor(p);
}

void
kc_pool_free(KcPool *p)
{
	if (!p)
		return;
	kc_pool_stop(p);
	pthread_mutex_lock(&p->mu);
	while (p->sup_running)
		pthread_cond_wait(&p->changed, &p->mu);
	pthread_mutex_unlock(&p->mu);
	/* callers are gone (the server drained them): every slot is ours */
	for (int i = 0; i < p->n; i++) {
		Slot *s = &p->slots[i];
		if (s->pid > 0 || s->fd >= 0)
			reap_slot(p, s, NULL, 0, NULL);
		if (s->scratch[0])
			rmdir(s->scratch);
	}
	if (p->wake[0] >= 0)
		close(p->wake[0]);
	if (p->wake[1] >= 0)
		close(p->wake[1]);
	pthread_cond_destroy(&p->changed);
	pthread_mutex_destroy(&p->mu);
	free(p->slots);
	free((char *)p->cfg.exe);
	free((char *)p->cfg.scratch_root);
	free((char *)p->cfg.build_id);
	free((char *)p->cfg.log_level);
	free(p);
}
