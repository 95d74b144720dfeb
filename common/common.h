/* common.h - the base layer every kcsd library sits on.
 *
 * Status codes and the error record (KcStatus, KcErr), the per-request arena,
 * a growable byte buffer, logging, SHA-256/hex helpers and a monotonic clock.
 * Nothing here knows about HTTP, LLVM or LMDB.
 *
 * Threads: every function is thread-safe on distinct objects; an Arena or a
 * KcBuf belongs to one thread at a time. The log sink is set once at start-up
 * (before threads) and is then read-only.
 */
#ifndef KCS_COMMON_H
#define KCS_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KC_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* ---- status and error record ------------------------------------------ */

typedef enum KcStatus {
#define E(code, http, wire, text) KC_##code,
#include "errors.def"
#undef E
	KC_STATUS_COUNT
} KcStatus;

/* Details for the first error of an operation. Zero-initialise before use.
 * `where` is a JSON pointer into the request ("/op_desc/3/name") or a pass
 * name ("link"); `msg` is one line without control characters, safe to send
 * to clients. */
typedef struct KcErr {
	KcStatus status; /* KC_OK until something fails */
	char where[128];
	char msg[320];
} KcErr;

/* Record an error unless one is already recorded (the root cause wins).
 * Returns err->status so callers can write `return kc_fail(...)`.
 * `where` may be NULL. Control characters in the message are replaced. */
KcStatus kc_fail(KcErr *err, KcStatus st, const char *where, const char *fmt, ...) KC_PRINTF(4, 5);

int kc_http_status(KcStatus st);         /* from errors.def */
const char *kc_status_code(KcStatus st); /* wire code, e.g. "unsupported_op" */
const char *kc_status_text(KcStatus st); /* short English text */

/* Programmer errors: log file, line and expression, then abort. Always on. */
#define KC_ASSERT(e) ((e) ? (void)0 : kc_assert_fail(#e, __FILE__, __LINE__))
_Noreturn void kc_assert_fail(const char *expr, const char *file, int line);

/* System allocation that aborts on OOM (user-controlled sizes are checked
 * before allocating). Free with free(). */
void *kc_xmalloc(size_t n);
void *kc_xcalloc(size_t n, size_t size);
void *kc_xrealloc(void *p, size_t n);
char *kc_xstrdup(const char *s);

/* ---- arena ---------------------------------------------------------------
 * Bump allocator for objects that die together (one per compile request).
 * Memory is zeroed. Not thread-safe. arena_free() releases everything. */
typedef struct Arena Arena;
Arena *arena_new(size_t block_bytes);
void *arena_alloc(Arena *a, size_t size, size_t align);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) KC_PRINTF(2, 3);
size_t arena_bytes(const Arena *a); /* total bytes reserved from the system */
void arena_free(Arena *a);          /* NULL is allowed */
#define ARENA_NEW(a, T) ((T *)arena_alloc((a), sizeof(T), _Alignof(T)))
#define ARENA_ARRAY(a, T, n) ((T *)arena_alloc((a), sizeof(T) * (size_t)(n), _Alignof(T)))

/* ---- byte buffer ---------------------------------------------------------
 * Growable, malloc-backed, always NUL-terminated. Zero-initialise
 * (KcBuf b = {0}); release with kc_buf_free(). kc_buf_take() hands the
 * malloc'd data to the caller (who frees it) and resets the buffer. */
typedef struct KcBuf {
	char *data;
	size_t len;
	size_t cap;
} KcBuf;
void kc_buf_append(KcBuf *b, const void *p, size_t n);
void kc_buf_puts(KcBuf *b, const char *s);
void kc_buf_putc(KcBuf *b, char c);
void kc_buf_printf(KcBuf *b, const char *fmt, ...) KC_PRINTF(2, 3);
void kc_buf_vprintf(KcBuf *b, const char *fmt, va_list ap);
/* Appends `s` as a JSON string literal (quotes and escapes included). */
void kc_buf_json_str(KcBuf *b, const char *s);
char *kc_buf_take(KcBuf *b, size_t *len);
void kc_buf_free(KcBuf *b);

/* ---- JSON pre-scan (json_scan.c) ----------------------------------------
 * A JSON tree costs far more than its text (cJSON: one heap node per
 * value), so a client-sized body is bounded before it is parsed. */

/* `where` of the error kc_json_scan records: the whole body. */
#define KC_JSON_SCAN_WHERE "body"

/* What kc_json_scan counted (up to where it stopped). */
typedef struct KcJsonScan {
	int64_t tokens; /* strings (object keys too), numbers and literals, arrays, objects */
	int depth;      /* most arrays and objects open at once */
} KcJsonScan;

/* Scans `len` bytes of `json` (no NUL needed; NULL with len 0 allowed)
 * once, counting tokens and nesting depth, and stops at the first bound
 * passed. The token count is an upper bound on the values any JSON parser
 * builds from the same bytes, valid JSON or not.
 *   max_tokens  most tokens (<= 0: not checked)
 *   max_depth   deepest nesting of arrays and objects (<= 0: not checked)
 *   out         may be NULL; gets the counts so far
 * Returns KC_OK, or KC_TOO_LARGE (413) with err->where KC_JSON_SCAN_WHERE
 * and a message naming the setting (max_json_tokens, max_json_depth). It
 * does not validate: text that is not JSON but within the bounds is
 * KC_OK, and the parser that follows refuses it. No allocation; linear in
 * len; thread-safe. */
KcStatus kc_json_scan(const char *json, size_t len, int64_t max_tokens, int max_depth,
                      KcJsonScan *out, KcErr *err);

/* ---- hashing ---------------------------------------------------------- */
typedef struct KcDigest {
	unsigned char b[32];
} KcDigest;
void kc_sha256(const void *data, size_t len, KcDigest *out);
/* Streaming SHA-256 over several parts. */
typedef struct KcSha256 KcSha256;
KcSha256 *kc_sha256_begin(void);
void kc_sha256_update(KcSha256 *h, const void *data, size_t len);
void kc_sha256_end(KcSha256 *h, KcDigest *out); /* frees h */
/* Writes 64 lowercase hex chars plus NUL into out[65]. */
void kc_digest_hex(const KcDigest *d, char out[65]);
/* Parses exactly 64 hex chars; false on anything else. */
bool kc_digest_parse(const char *hex, KcDigest *out);

/* Base64 (standard alphabet, padded). Returns a malloc'd NUL-terminated
 * string; the caller frees it. */
char *kc_base64(const void *data, size_t len, size_t *out_len);

/* Standard padded base64 -> bytes, appended to *out. False on malformed
 * input (bad characters, bad padding, length not a multiple of 4). */
bool kc_base64_decode(const char *s, size_t len, KcBuf *out);

/* ---- Ed25519 signatures (sign.c) -----------------------------------------
 * Artifact signatures: Ed25519 over kc_artifact_message(). A KcSignKey is
 * immutable after loading and may be used from any thread. */
#define KC_ED25519_PUBLIC_BYTES 32
#define KC_ED25519_SIG_BYTES 64
#define KC_KEY_ID_LEN 16 /* hex characters of SHA-256(raw public key) */
typedef struct KcSignKey KcSignKey;
/* Loads a PEM private key from `path`. If the file does not exist and
 * `create` is set, generates a key and writes it there atomically (PKCS#8,
 * mode 0600; *created set). Fills err (message naming the file) on failure. */
KcSignKey *kc_sign_key_load(const char *path, bool create, bool *created, KcErr *err);
/* Loads a PEM public key (or the public half of a private key) to verify. */
KcSignKey *kc_sign_key_load_public(const char *path, KcErr *err);
void kc_sign_key_free(KcSignKey *k); /* NULL allowed */
const char *kc_sign_key_id(const KcSignKey *k);
const unsigned char *kc_sign_key_public(const KcSignKey *k); /* 32 raw bytes */
/* False if the key has no private half (or OpenSSL fails). */
bool kc_sign(const KcSignKey *k, const void *msg, size_t len,
             unsigned char sig[KC_ED25519_SIG_BYTES]);
bool kc_ed25519_verify(const unsigned char pub[KC_ED25519_PUBLIC_BYTES], const void *msg,
                       size_t len, const unsigned char sig[KC_ED25519_SIG_BYTES]);
void kc_key_id(const unsigned char pub[KC_ED25519_PUBLIC_BYTES], char out[KC_KEY_ID_LEN + 1]);
/* Appends "kcs-artifact-v1:<kernel_id>:<object_sha256>:<workload_key>:<symbol>". */
void kc_artifact_message(KcBuf *out, const char *kernel_id, const char *object_sha256,
                         const char *workload_key, const char *symbol);

/* ---- time and logging ------------------------------------------------- */
int64_t kc_now_us(void);                       /* CLOCK_MONOTONIC, microseconds */
int64_t kc_wall_s(void);                       /* CLOCK_REALTIME, seconds since the epoch */
void kc_iso8601(int64_t wall_s, char out[32]); /* "2026-11-30T09:41:00Z" */
/* The CPUs this process may run on: its affinity mask (a container or
 * taskset pinning it to fewer counts), else the online CPUs; at least 1.
 * Thread-safe. */
int kc_cpu_count(void);
/* Initialises *cv to time its waits on CLOCK_MONOTONIC, kc_now_us's clock,
 * so that a deadline survives a change of the wall clock. */
void kc_cond_init_monotonic(pthread_cond_t *cv);
/* pthread_cond_timedwait on a kc_cond_init_monotonic condition until
 * kc_now_us() reaches deadline_us; returns its result (ETIMEDOUT then). */
int kc_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_us);

typedef enum KcLogLevel { KC_LOG_DEBUG, KC_LOG_INFO, KC_LOG_WARN, KC_LOG_ERROR } KcLogLevel;
/* Set the minimum level printed (default INFO). Call before threads start. */
void kc_log_set_level(KcLogLevel lvl);
/* One line to stderr, prefixed with a timestamp and level; thread-safe
 * (a single write(2) per line). */
void kc_log(KcLogLevel lvl, const char *fmt, ...) KC_PRINTF(2, 3);

#endif /* KCS_COMMON_H */
