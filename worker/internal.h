/* internal.h - worker/'s own: the frame format both sides speak. */
#ifndef KCS_WORKER_INTERNAL_H
#define KCS_WORKER_INTERNAL_H

#include "worker.h"

#define WIRE_MAGIC "KCW1"
#define WIRE_HELLO "kcsd-worker-v1"
/* The largest frame either side accepts: a reply carries an object, its IR
 * and a dump (max_dump_bytes is at most 1 GiB, and the route refuses more). */
#define WIRE_MAX_FRAME ((size_t)1 << 30)

typedef enum WireKind {
	WIRE_JOB = 1,    /* kcsd -> worker: a KcJob */
	WIRE_REPLY = 2,  /* worker -> kcsd: a status and a KcJobResult */
	WIRE_LINK = 3,   /* worker -> its link helper: an object to link */
	WIRE_LINKED = 4, /* link helper -> worker: a status and a shared object */
} WireKind;

/* Field tags of a frame's payload. */
typedef enum WireTag {
	T_KIND = 1, /* u32 KcJobKind */
	T_BODY,
	T_CANONICAL,
	T_NAME,
	T_LIMITS, /* KcLimits, as bytes */
	T_TARGET, /* KcTarget, as bytes */
	T_TEMPLATE,
	T_KNOBS,
	T_LINKER,
	T_FLAGS, /* u32: WIRE_F_* */
	T_DUMP_PASSES,
	T_INJECT, /* u32 KcInject */
	T_IR,
	T_STATUS, /* u32 KcStatus */
	T_WHERE,
	T_MSG,
	T_SYMBOL,
	T_OBJECT,
	T_DUMP,
	T_TEXT,
	T_TIMES, /* two doubles: compile_ms, link_ms */
} WireTag;

enum { WIRE_F_WANT_IR = 1u << 0, WIRE_F_VERIFY = 1u << 1, WIRE_F_DUMP = 1u << 2 };

typedef struct WireField {
	uint32_t tag;
	const char *p;
	size_t n;
} WireField;

/* Appends one field (n bytes and a NUL, not counted in the field's own
 * length); wire_put_str skips a NULL string (absent, not ""). */
void wire_put(KcBuf *b, WireTag tag, const void *p, size_t n);
void wire_put_str(KcBuf *b, WireTag tag, const char *s);
void wire_put_u32(KcBuf *b, WireTag tag, uint32_t v);
/* Iterates a payload's fields: false at the end or on a malformed field
 * (*bad set). */
bool wire_next(const char *payload, size_t len, size_t *off, WireField *f, bool *bad);
bool wire_u32(const WireField *f, uint32_t *out);

/* Writes all of b. false on an error (EPIPE: the peer is gone; no SIGPIPE). */
bool wire_send(int fd, const KcBuf *b);
/* Writes one frame: its header and the payload, as wire_send does. */
bool wire_send_frame(int fd, WireKind kind, const KcBuf *payload);

typedef enum WireRead {
	WIRE_OK,
	WIRE_EOF,     /* the peer closed (or the read failed) */
	WIRE_TIMEOUT, /* deadline_us passed */
	WIRE_BAD,     /* not a frame, or over WIRE_MAX_FRAME */
} WireRead;
/* Reads one frame into *payload (reset first). deadline_us < 0: none. */
WireRead wire_read(int fd, int64_t deadline_us, uint32_t *kind, KcBuf *payload);

/* The job as a frame payload, and back. Strings and blobs travel with a
 * NUL after them, so wire_job_decode's pointers into the payload are C
 * strings; they live as long as the payload. */
void wire_job_encode(const KcJob *job, KcBuf *payload);
bool wire_job_decode(const char *payload, size_t len, KcJob *job);

/* A reply: the status, the error (when not KC_OK) and the result. */
void wire_reply_encode(KcStatus st, const KcErr *err, const KcJobResult *r, KcBuf *payload);
bool wire_reply_decode(const char *payload, size_t len, KcStatus *st, KcErr *err, KcJobResult *r);

#endif
