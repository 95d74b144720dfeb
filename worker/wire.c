/* wire.c - frames between kcsd and a kcsd-worker, and the job and reply
 * payloads in them (the format is in worker.h).
 *
 * Both ends are processes of one build (the hello's build id), so
 * KcLimits and KcTarget travel as bytes; what is checked is that a frame
 * is whole, within WIRE_MAX_FRAME, and that every field is in bounds, so
 * a confused or dying worker is a WIRE_BAD, never a read past a buffer.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"

static void
put_u32(KcBuf *b, uint32_t v)
{
	kc_buf_append(b, &v, sizeof v);
}

static void
put_u64(KcBuf *b, uint64_t v)
{
	kc_buf_append(b, &v, sizeof v);
}

void
wire_put(KcBuf *b, WireTag tag, const void *p, size_t n)
{
	put_u32(b, (uint32_t)tag);
	put_u32(b, 0);
	put_u64(b, (uint64_t)n);
	if (n)
		kc_buf_append(b, p, n);
	kc_buf_putc(b, 0);
}

void
wire_put_str(KcBuf *b, WireTag tag, const char *s)
{
	if (s)
		wire_put(b, tag, s, strlen(s));
}

void
wire_put_u32(KcBuf *b, WireTag tag, uint32_t v)
{
	wire_put(b, tag, &v, sizeof v);
}

bool
wire_next(const char *payload, size_t len, size_t *off, WireField *f, bool *bad)
{
	if (*off == len)
		return false;
	uint32_t tag;
	uint64_t n;
	if (len - *off < 16) {
		*bad = true;
		return false;
	}
	memcpy(&tag, payload + *off, 4);
	memcpy(&n, payload + *off + 8, 8);
	size_t left = len - *off - 16;
	if (n >= left || payload[*off + 16 + n] != 0) {
		*bad = true;
		return false;
	}
	f->tag = tag;
	f->p = payload + *off + 16;
	f->n = (size_t)n;
	*off += 16 + (size_t)n + 1;
	return true;
}

bool
wire_u32(const WireField *f, uint32_t *out)
{
	if (f->n != sizeof *out)
		return false;
	memcpy(out, f->p, sizeof *out);
	return true;
}

bool
wire_send(int fd, const KcBuf *b)
{
	size_t done = 0;
	while (done < b->len) {
		ssize_t n = send(fd, b->data + done, b->len - done, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		done += (size_t)n;
	}
	return true;
}

bool
wire_send_frame(int fd, WireKind kind, const KcBuf *payload)
{
	/* the header: "KCW1", u32 kind, u64 payload bytes */
	char h[16];
	uint32_t k = (uint32_t)kind;
	uint64_t n = (uint64_t)payload->len;
	memcpy(h, WIRE_MAGIC, 4);
	memcpy(h + 4, &k, 4);
	memcpy(h + 8, &n, 8);
	/* header and payload in one sendmsg, without copying the payload */
	struct iovec iov[2] = {{h, sizeof h}, {payload->data, payload->len}};
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = payload->len ? 2 : 1};
	bool ok = true;
	while (m.msg_iovlen > 0) {
		ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			ok = false;
			break;
		}
		/* past what went, onto what is left */
		size_t done = (size_t)w;
		while (m.msg_iovlen > 0 && done >= m.msg_iov->iov_len) {
			done -= m.msg_iov->iov_len;
			m.msg_iov++;
			m.msg_iovlen--;
		}
		if (m.msg_iovlen > 0) {
			m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + done;
			m.msg_iov->iov_len -= done;
		}
	}
	return ok;
}

/* Reads exactly n bytes into p by the deadline. */
static WireRead
read_full(int fd, int64_t deadline_us, void *p, size_t n)
{
	size_t done = 0;
	while (done < n) {
		if (deadline_us >= 0) {
			int64_t left = deadline_us - kc_now_us();
			if (left <= 0)
				return WIRE_TIMEOUT;
			struct pollfd pf = {.fd = fd, .events = POLLIN};
			int r = poll(&pf, 1, (int)((left + 999) / 1000));
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				return WIRE_EOF;
			if (r == 0)
				continue; /* the loop checks the deadline */
		}
		ssize_t k = read(fd, (char *)p + done, n - done);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return WIRE_EOF;
		done += (size_t)k;
	}
	return WIRE_OK;
}

WireRead
wire_read(int fd, int64_t deadline_us, uint32_t *kind, KcBuf *payload)
{
	unsigned char h[16];
	payload->len = 0;
	WireRead r = read_full(fd, deadline_us, h, sizeof h);
	if (r != WIRE_OK)
		return r;
	uint64_t n;
	memcpy(kind, h + 4, 4);
	memcpy(&n, h + 8, 8);
	if (memcmp(h, WIRE_MAGIC, 4) != 0 || n > WIRE_MAX_FRAME)
		return WIRE_BAD;
	/* grown as the bytes arrive, so a lying header costs no memory */
	size_t got = 0;
	while (got < n) {
		size_t chunk =
		    (size_t)n - got < ((size_t)1 << 20) ? (size_t)n - got : (size_t)1 << 20;
		if (payload->cap < got + chunk + 1) {
			size_t cap = payload->cap ? payload->cap : 4096;
			while (cap < got + chunk + 1)
				cap *= 2;
			payload->data = kc_xrealloc(payload->data, cap);
			payload->cap = cap;
		}
		r = read_full(fd, deadline_us, payload->data + got, chunk);
		if (r != WIRE_OK)
			return r;
		got += chunk;
	}
	payload->len = got;
	if (!payload->data) {
		payload->data = kc_xmalloc(1);
		payload->cap = 1;
	}
	payload->data[got] = 0;
	return WIRE_OK;
}

/* ---- jobs and replies --------------------------------------------------- */

void
wire_job_encode(const KcJob *job, KcBuf *b)
{
	uint32_t flags = (job->want_ir ? WIRE_F_WANT_IR : 0) | (job->verify ? WIRE_F_VERIFY : 0) |
	                 (job->want_dump ? WIRE_F_DUMP : 0);
	wire_put_u32(b, T_KIND, (uint32_t)job->kind);
	if (job->body)
		wire_put(b, T_BODY, job->body, job->body_len);
	if (job->canonical)
		wire_put(b, T_CANONICAL, job->canonical, job->canonical_len);
	wire_put_str(b, T_NAME, job->name);
	wire_put(b, T_LIMITS, &job->limits, sizeof job->limits);
	wire_put(b, T_TARGET, &job->target, sizeof job->target);
	wire_put_str(b, T_TEMPLATE, job->template_name);
	wire_put_str(b, T_KNOBS, job->knobs);
	wire_put_str(b, T_LINKER, job->linker);
	wire_put_u32(b, T_FLAGS, flags);
	wire_put_u32(b, T_DUMP_PASSES, job->dump_passes);
	wire_put_u32(b, T_INJECT, (uint32_t)job->inject);
	if (job->ir)
		wire_put(b, T_IR, job->ir, job->ir_len);
}

static bool
raw_field(const WireField *f, void *out, size_t n)
{
	if (f->n != n)
		return false;
	memcpy(out, f->p, n);
	return true;
}

bool
wire_job_decode(const char *payload, size_t len, KcJob *job)
{
	memset(job, 0, sizeof *job);
	size_t off = 0;
	bool bad = false, have_target = false, have_limits = false;
	uint32_t v;
	WireField f;
	while (!bad && wire_next(payload, len, &off, &f, &bad)) {
		switch ((WireTag)f.tag) {
		case T_KIND:
			if (!wire_u32(&f, &v) || v > KC_JOB_ASM)
				return false;
			job->kind = (KcJobKind)v;
			break;
		case T_BODY:
			job->body = f.p;
			job->body_len = f.n;
			break;
		case T_CANONICAL:
			job->canonical = f.p;
			job->canonical_len = f.n;
			break;
		case T_NAME: job->name = f.p; break;
		case T_LIMITS: have_limits = raw_field(&f, &job->limits, sizeof job->limits); break;
		case T_TARGET: have_target = raw_field(&f, &job->target, sizeof job->target); break;
		case T_TEMPLATE: job->template_name = f.p; break;
		case T_KNOBS: job->knobs = f.p; break;
		case T_LINKER: job->linker = f.p; break;
		case T_FLAGS:
			if (!wire_u32(&f, &v))
				return false;
			job->want_ir = v & WIRE_F_WANT_IR;
			job->verify = v & WIRE_F_VERIFY;
			job->want_dump = v & WIRE_F_DUMP;
			break;
		case T_DUMP_PASSES:
			if (!wire_u32(&f, &job->dump_passes))
				return false;
			break;
		case T_INJECT:
			if (!wire_u32(&f, &v) || v >= KC_INJECT_COUNT)
				return false;
			job->inject = (KcInject)v;
			break;
		case T_IR:
			job->ir = f.p;
			job->ir_len = f.n;
			break;
		case T_STATUS:
		case T_WHERE:
		case T_MSG:
		case T_SYMBOL:
		case T_OBJECT:
		case T_DUMP:
		case T_TEXT:
		case T_TIMES: return false; /* a reply's */
		}
	}
	/* the fixed-size strings of a KcTarget must be terminated */
	if (have_target) {
		KcTarget *t = &job->target;
		t->name[sizeof t->name - 1] = t->triple[sizeof t->triple - 1] = 0;
		t->cpu[sizeof t->cpu - 1] = t->features[sizeof t->features - 1] = 0;
		t->isa_level[sizeof t->isa_level - 1] = 0;
	}
	return !bad && have_target && have_limits;
}

void
wire_reply_encode(KcStatus st, const KcErr *err, const KcJobResult *r, KcBuf *b)
{
	wire_put_u32(b, T_STATUS, (uint32_t)st);
	if (st != KC_OK) {
		wire_put_str(b, T_WHERE, err->where);
		wire_put_str(b, T_MSG, err->msg);
		return;
	}
	double times[2] = {r->art.compile_ms, r->art.link_ms};
	wire_put_str(b, T_SYMBOL, r->art.symbol);
	if (r->art.object)
		wire_put(b, T_OBJECT, r->art.object, r->art.object_len);
	if (r->art.ir)
		wire_put(b, T_IR, r->art.ir, r->art.ir_len);
	if (r->dump.data)
		wire_put(b, T_DUMP, r->dump.data, r->dump.len);
	if (r->text.data)
		wire_put(b, T_TEXT, r->text.data, r->text.len);
	wire_put(b, T_TIMES, times, sizeof times);
}

static char *
dup_bytes(const WireField *f)
{
	char *p = kc_xmalloc(f->n + 1);
	memcpy(p, f->p, f->n + 1);
	return p;
}

static void
copy_str(const WireField *f, char *out, size_t cap)
{
	size_t n = f->n < cap - 1 ? f->n : cap - 1;
	memcpy(out, f->p, n);
	out[n] = 0;
}

bool
wire_reply_decode(const char *payload, size_t len, KcStatus *st, KcErr *err, KcJobResult *r)
{
	memset(r, 0, sizeof *r);
	size_t off = 0;
	bool bad = false, have_status = false;
	uint32_t v;
	WireField f;
	while (!bad && wire_next(payload, len, &off, &f, &bad)) {
		switch ((WireTag)f.tag) {
		case T_STATUS:
			if (!wire_u32(&f, &v) || v >= KC_STATUS_COUNT) {
				bad = true;
				break;
			}
			*st = (KcStatus)v;
			have_status = true;
			break;
		case T_WHERE: copy_str(&f, err->where, sizeof err->where); break;
		case T_MSG: copy_str(&f, err->msg, sizeof err->msg); break;
		case T_SYMBOL: copy_str(&f, r->art.symbol, sizeof r->art.symbol); break;
		case T_OBJECT:
			free(r->art.object);
			r->art.object = (unsigned char *)dup_bytes(&f);
			r->art.object_len = f.n;
			break;
		case T_IR:
			free(r->art.ir);
			r->art.ir = dup_bytes(&f);
			r->art.ir_len = f.n;
			break;
		case T_DUMP:
			kc_buf_free(&r->dump);
			kc_buf_append(&r->dump, f.p, f.n);
			break;
		case T_TEXT:
			kc_buf_free(&r->text);
			kc_buf_append(&r->text, f.p, f.n);
			break;
		case T_TIMES: {
			double t[2];
			if (!raw_field(&f, t, sizeof t)) {
				bad = true;
				break;
			}
			r->art.compile_ms = t[0];
			r->art.link_ms = t[1];
			break;
		}
		case T_KIND:
		case T_BODY:
		case T_CANONICAL:
		case T_NAME:
		case T_LIMITS:
		case T_TARGET:
		case T_TEMPLATE:
		case T_KNOBS:
		case T_LINKER:
		case T_FLAGS:
		case T_DUMP_PASSES:
		case T_INJECT: bad = true; break; /* a job's */
		}
	}
	if (bad || !have_status || (*st == KC_OK && !r->art.object && !r->text.data)) {
		kc_job_result_free(r);
		return false;
	}
	if (*st != KC_OK)
		err->status = *st;
	return true;
}
