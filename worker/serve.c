/* serve.c - the worker's side: run a job (kc_job_run), and the loop that
 * reads jobs from kcsd and writes the replies (kc_worker_serve).
 *
 * A job re-parses the graph from the text kcsd parsed (the body, or the
 * canonical workload for a dump), with kcsd's limits: parsing costs
 * microseconds against milliseconds of LLVM, and the worker then holds a
 * graph of its own rather than a serialised copy of kcsd's.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "version.h"

static const char *const inject_names[] = {
#define X(e, name) name,
#include "inject.def"
#undef X
};

const char *
kc_inject_name(KcInject i)
{
	return (unsigned)i < KC_INJECT_COUNT ? inject_names[i] : "";
}

KcInject
kc_inject_lookup(const char *name)
{
	for (int i = 1; i < KC_INJECT_COUNT; i++)
		if (strcmp(name, inject_names[i]) == 0)
			return (KcInject)i;
	return KC_INJECT_COUNT;
}

void
kc_job_result_free(KcJobResult *r)
{
	if (!r)
		return;
	kc_artifact_free(&r->art);
	kc_buf_free(&r->dump);
	kc_buf_free(&r->text);
	memset(r, 0, sizeof *r);
}

/* The test-only faults, where the compile would run. */
static void
misbehave(KcInject inject)
{
	switch (inject) {
	case KC_INJECT_NONE:
	case KC_INJECT_COUNT: return;
	case KC_INJECT_CRASH:
		/* the default action, not a sanitizer's report-and-exit */
		signal(SIGSEGV, SIG_DFL);
		raise(SIGSEGV);
		abort();
	case KC_INJECT_HANG:
		for (;;) {
			struct timespec ts = {1, 0};
			nanosleep(&ts, NULL);
		}
	case KC_INJECT_ALLOC:
		/* touched, so it is resident as a runaway pass's memory is; the
		 * worker's RLIMIT_AS ends it */
		for (;;) {
			size_t n = (size_t)64 << 20;
			char *p = malloc(n);
			if (!p) {
				fprintf(stderr, "kcsd-worker: out of memory (inject=alloc)\n");
				abort();
			}
			memset(p, 1, n);
		}
	}
}

KcStatus
kc_job_run(const KcJob *job, KcLinkHelper *helper, KcJobResult *out, KcErr *err)
{
	memset(out, 0, sizeof *out);
	if (job->kind == KC_JOB_ASM) {
		misbehave(job->inject);
		return kc_ir_to_asm(job->ir ? job->ir : "", job->ir_len, &job->target, &out->text,
		                    err);
	}
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcSchedule *s = NULL;
	KcStatus st;
	if (job->canonical)
		st = kc_parse_workload(c, job->canonical, job->canonical_len,
		                       job->name ? job->name : "", &job->limits, &g, err);
	else
		st = kc_parse(c, job->body ? job->body : "", job->body_len, &job->limits, &g, err);
	if (st == KC_OK && job->template_name)
		st = kc_schedule_from_json(c, g, &job->target, job->template_name, job->knobs, &s,
		                           err);
	else if (st == KC_OK)
		s = kc_schedule_default(c, g, &job->target);
	if (st == KC_OK) {
		misbehave(job->inject);
		KcCompileOptions o = {
		    .linker = job->linker,
		    .tmpdir = ".", /* the worker's working directory is its scratch */
		    .system_link = helper ? kc_link_via_helper : NULL,
		    .system_link_ctx = helper,
		    .want_ir = job->want_ir,
		    .verify = job->verify,
		    .dump = job->want_dump ? &out->dump : NULL,
		    .dump_passes = job->dump_passes,
		};
		st = kc_compile(c, g, &job->target, s, &o, &out->art, err);
		if (st == KC_OK && job->want_dump && !out->dump.data)
			kc_buf_puts(&out->dump, ""); /* present, if empty */
	}
	compile_ctx_free(c);
	if (st != KC_OK) {
		kc_job_result_free(out);
		if (err->status == KC_OK)
			err->status = st;
	}
	return st;
}

int
kc_worker_serve(int fd, int link_fd)
{
	KcLinkHelper helper = {.fd = link_fd, .gone = false};
	char hello[160];
	int n = snprintf(hello, sizeof hello, WIRE_HELLO " build_id=%s pid=%d\n", KCSD_BUILD_ID,
	                 (int)getpid());
	KcBuf h = {0};
	kc_buf_append(&h, hello, (size_t)n);
	bool ok = wire_send(fd, &h);
	kc_buf_free(&h);
	if (!ok)
		return 0;
	KcBuf in = {0};
	int rc = 0;
	for (;;) {
		/* idle: a link helper that dies now ends this worker at once, so
		 * kcsd replaces it before it takes a job it could not link */
		if (link_fd >= 0) {
			struct pollfd pf[2] = {{.fd = fd, .events = POLLIN},
			                       {.fd = link_fd, .events = POLLIN}};
			int pr;
			while ((pr = poll(pf, 2, -1)) < 0 && errno == EINTR)
				;
			if (pr < 0 || pf[1].revents)
				break;
		}
		uint32_t kind;
		WireRead r = wire_read(fd, -1, &kind, &in);
		if (r == WIRE_EOF)
			break;
		KcJob job;
		if (r != WIRE_OK || kind != WIRE_JOB || !wire_job_decode(in.data, in.len, &job)) {
			fprintf(stderr, "kcsd-worker: malformed job frame\n");
			rc = 1;
			break;
		}
		KcJobResult res;
		KcErr err = {0};
		KcStatus st = kc_job_run(&job, link_fd >= 0 ? &helper : NULL, &res, &err);
		KcBuf payload = {0};
		wire_reply_encode(st, &err, &res, &payload);
		kc_job_result_free(&res);
		bool sent = wire_send_frame(fd, WIRE_REPLY, &payload);
		kc_buf_free(&payload);
		if (!sent || helper.gone)
			break;
		if (in.cap > ((size_t)64 << 20)) /* not kept for the next small job */
			kc_buf_free(&in);
	}
	kc_buf_free(&in);
	return rc;
}
