/* compile.c - POST /v1/compile: parse, key, look up, compile once, store.
 *
 * The one idea: a kernel is identified before it is built. The request is
 * parsed and reduced to (workload_key, target, schedule) and so to a
 * kernel_id; a hit answers from the stored metadata JSON by string splicing
 * (no LLVM, no re-parse). A miss goes through the singleflight table: the
 * first request for a kernel_id compiles it (the leader), every concurrent
 * request for the same id waits on the condition variable and then reads
 * the cache. The leader's error, if any, is handed to its waiters.
 *
 * Stored meta part: the response without "ms_hash", "cache", "request_ms"
 * and "object_base64"; those are appended per request.
 *
 * The hit memo: a body answered once (hit or compile) is remembered as
 * SHA-256(body, ?target, schedule generation) -> (kernel_id, ms_hash). A
 * repeat of it is answered on the HTTP thread (api_compile_fast) from the
 * cache alone: no parse, no name hash, no worker hop. The generation is
 * bumped after every schedule write (route.c), so a memo entry never
 * outlives the schedule choice it was made under; a kernel that has left
 * the cache, or fails the artifact check, sends the request the slow way.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "internal.h"
#include "version.h"

/* A request parked on a flight (ApiRequest.wake): it holds no worker. */
typedef struct Parked {
	struct Parked *next;
	void (*wake)(void *closure, const KcErr *err);
	void *closure;
} Parked;

/* A compile in progress. `refs` counts the leader and the waiters that
 * wait in place; the last one to let go frees it. Parked waiters hold no
 * reference: the leader wakes them as it lands. Guarded by ApiCtx.mu. */
struct Flight {
	Flight *next;
	KcDigest id;
	bool done;
	KcErr err; /* the leader's outcome (status KC_OK on success) */
	int refs;
	Parked *parked;
};

/* MindSpore's kernel-name hash of a request body, when it has one. */
typedef struct MsHash {
	bool ok;
	uint64_t v;
} MsHash;

/* ---- the hit memo ------------------------------------------------------- */

/* Set-associative: a key's set is fixed by its first bytes, and a full set
 * replaces its least recently used way. */
#define MEMO_WAYS 4
#define MEMO_SETS (API_MEMO_ENTRIES / MEMO_WAYS)

typedef struct MemoEntry {
	KcDigest key;
	KcDigest kid;
	KcDigest workload; /* for api_recent_put, as the slow path does */
	MsHash ms;
	uint64_t used; /* ApiMemo.clock at the last use; 0: empty */
} MemoEntry;

/* A hit's reply parts kept in memory by kernel_id: the metadata without
 * its closing brace and the object in base64, made from the values that
 * read_artifact read and verified, with their frame checksums. A later
 * fast hit asks the store only whether it still holds those values
 * (cache_peek_digests: no copy, no hash) and copies these; a tampered or
 * replaced value has another checksum and sends it to read_artifact. */
#define REPLY_WAYS 4
#define REPLY_SETS 64
#define REPLY_MAX_BYTES ((size_t)64 << 20) /* all entries */
#define REPLY_MAX_ONE ((size_t)4 << 20)    /* one entry (metadata + base64) */

typedef struct Reply {
	KcDigest kid;
	KcDigest sums[2]; /* frame checksums of the meta and object parts */
	char *text;       /* head_len bytes of metadata, then b64_len of base64 */
	size_t head_len, b64_len;
	int refs;      /* the table's, plus one per reader; under ApiMemo.mu */
	uint64_t used; /* ApiMemo.clock at the last use */
} Reply;

struct ApiMemo {
	pthread_mutex_t mu;
	uint64_t clock;
	MemoEntry e[API_MEMO_ENTRIES];
	Reply *reply[REPLY_SETS * REPLY_WAYS];
	size_t reply_bytes;
};

ApiMemo *
api_memo_new(void)
{
	ApiMemo *m = kc_xcalloc(1, sizeof *m);
	pthread_mutex_init(&m->mu, NULL);
	return m;
}

static void
reply_unref_locked(Reply *r)
{
	if (--r->refs == 0) {
		free(r->text);
		free(r);
	}
}

void
api_memo_free(ApiMemo *m)
{
	if (!m)
		return;
	for (int i = 0; i < REPLY_SETS * REPLY_WAYS; i++)
		if (m->reply[i])
			reply_unref_locked(m->reply[i]);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

/* Removes table slot i (ApiMemo.mu held). */
static void
reply_remove_locked(ApiMemo *m, int i)
{
	Reply *r = m->reply[i];
	m->reply[i] = NULL;
	m->reply_bytes -= r->head_len + r->b64_len;
	reply_unref_locked(r);
}

/* The reply parts of kernel `kid`, with a reference (reply_unref), or NULL. */
static Reply *
reply_get(ApiMemo *m, const KcDigest *kid)
{
	Reply *found = NULL;
	int set = kid->b[0] % REPLY_SETS * REPLY_WAYS;
	pthread_mutex_lock(&m->mu);
	for (int i = set; i < set + REPLY_WAYS; i++) {
		Reply *r = m->reply[i];
		if (r && memcmp(r->kid.b, kid->b, sizeof kid->b) == 0) {
			r->used = ++m->clock;
			r->refs++;
			found = r;
			break;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return found;
}

/* Lets go of a reply_get reference; with `drop`, also takes it out of
 * the table (the store no longer holds what it was made from). */
static void
reply_unref(ApiMemo *m, Reply *r, bool drop)
{
	pthread_mutex_lock(&m->mu);
	for (int i = 0; drop && i < REPLY_SETS * REPLY_WAYS; i++)
		if (m->reply[i] == r)
			reply_remove_locked(m, i);
	reply_unref_locked(r);
	pthread_mutex_unlock(&m->mu);
}

/* Keeps a verified hit's parts: `head` is the metadata without its closing
 * brace, `sums` the frame checksums of the meta and object values. */
static void
reply_add(ApiMemo *m, const KcDigest *kid, const KcDigest sums[2], const char *head,
          size_t head_len, const char *b64, size_t b64_len)
{
	if (head_len + b64_len > REPLY_MAX_ONE)
		return;
	Reply *n = kc_xcalloc(1, sizeof *n);
	n->kid = *kid;
	n->sums[0] = sums[0];
	n->sums[1] = sums[1];
	n->text = kc_xmalloc(head_len + b64_len + 1);
	memcpy(n->text, head, head_len);
	memcpy(n->text + head_len, b64, b64_len);
	n->text[head_len + b64_len] = 0;
	n->head_len = head_len;
	n->b64_len = b64_len;
	n->refs = 1;

	int set = kid->b[0] % REPLY_SETS * REPLY_WAYS, victim = set;
	pthread_mutex_lock(&m->mu);
	n->used = ++m->clock;
	for (int i = set; i < set + REPLY_WAYS; i++) {
		if (m->reply[i] && memcmp(m->reply[i]->kid.b, kid->b, sizeof kid->b) == 0) {
			victim = i;
			break;
		}
		if (!m->reply[i] ||
		    (m->reply[victim] && m->reply[i]->used < m->reply[victim]->used))
			victim = i;
	}
	if (m->reply[victim])
		reply_remove_locked(m, victim);
	/* over the byte bound: the least recently used anywhere go first */
	while (m->reply_bytes + head_len + b64_len > REPLY_MAX_BYTES) {
		int lru = -1;
		for (int i = 0; i < REPLY_SETS * REPLY_WAYS; i++)
			if (m->reply[i] && (lru < 0 || m->reply[i]->used < m->reply[lru]->used))
				lru = i;
		if (lru < 0)
			break;
		reply_remove_locked(m, lru);
	}
	m->reply[victim] = n;
	m->reply_bytes += head_len + b64_len;
	pthread_mutex_unlock(&m->mu);
}

static MemoEntry *
memo_set(ApiMemo *m, const KcDigest *key)
{
	unsigned h = (unsigned)key->b[0] | (unsigned)key->b[1] << 8;
	return &m->e[(h % MEMO_SETS) * MEMO_WAYS];
}

/* SHA-256 of ("kcsd-memo-v1", generation, ?target or its absence, body). */
static void
memo_key(const ApiRequest *req, uint64_t gen, KcDigest *out)
{
	char tbuf[1024];
	unsigned char hdr[16 + 8 + 1];
	const char *tq = api_query_target(req, tbuf, sizeof tbuf);
	memcpy(hdr, "kcsd-memo-v1\0\0\0\0", 16);
	for (int i = 0; i < 8; i++)
		hdr[16 + i] = (unsigned char)(gen >> (8 * i));
	hdr[24] = tq ? 1 : 0;
	KcSha256 *h = kc_sha256_begin();
	kc_sha256_update(h, hdr, sizeof hdr);
	if (tq)
		kc_sha256_update(h, tq, strlen(tq) + 1);
	kc_sha256_update(h, req->body ? req->body : "", req->body_len);
	kc_sha256_end(h, out);
}

static bool
memo_get(ApiMemo *m, const KcDigest *key, MemoEntry *out)
{
	bool found = false;
	pthread_mutex_lock(&m->mu);
	MemoEntry *set = memo_set(m, key);
	for (int i = 0; i < MEMO_WAYS; i++) {
		if (set[i].used && memcmp(set[i].key.b, key->b, sizeof key->b) == 0) {
			set[i].used = ++m->clock;
			*out = set[i];
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return found;
}

static void
memo_put(ApiMemo *m, const KcDigest *key, const KcDigest *kid, const KcDigest *workload,
         const MsHash *ms)
{
	pthread_mutex_lock(&m->mu);
	MemoEntry *set = memo_set(m, key), *victim = &set[0];
	for (int i = 0; i < MEMO_WAYS; i++) {
		if (set[i].used && memcmp(set[i].key.b, key->b, sizeof key->b) == 0) {
			victim = &set[i];
			break;
		}
		if (set[i].used < victim->used)
			victim = &set[i];
	}
	*victim = (MemoEntry){
	    .key = *key, .kid = *kid, .workload = *workload, .ms = *ms, .used = ++m->clock};
	pthread_mutex_unlock(&m->mu);
}

/* ---- singleflight ------------------------------------------------------- */

typedef enum Join {
	JOIN_LEAD,    /* the caller compiles, then calls flight_land */
	JOIN_WAIT,    /* the caller must call flight_wait */
	JOIN_PARKED,  /* the caller parked: it returns without touching resp */
	JOIN_REFUSED, /* parking is refused (shutting down): *err says why */
} Join;

/* Joins the flight for `id`, creating it if there is none. A waiter
 * parks when the request offers it (ApiRequest.wake), so it holds no
 * worker while the leader compiles; *req->parked is set under the lock,
 * before the leader can wake it. */
static Join
flight_join(ApiCtx *a, const KcDigest *id, const ApiRequest *req, Flight **out, KcErr *err)
{
	pthread_mutex_lock(&a->mu);
	for (Flight *f = a->flights; f; f = f->next) {
		if (memcmp(f->id.b, id->b, sizeof id->b) != 0)
			continue;
		Join j = JOIN_WAIT;
		if (!req->wake) {
			f->refs++;
			*out = f;
		} else if (a->park_refused != KC_OK) {
			kc_fail(err, a->park_refused, NULL, "%s", kc_status_text(a->park_refused));
			j = JOIN_REFUSED;
		} else {
			Parked *p = kc_xmalloc(sizeof *p);
			*p = (Parked){f->parked, req->wake, req->wake_closure};
			f->parked = p;
			*req->parked = true;
			a->stats.parked++;
			a->stats.parked_now++;
			j = JOIN_PARKED;
		}
		pthread_mutex_unlock(&a->mu);
		return j;
	}
	Flight *f = kc_xcalloc(1, sizeof *f);
	f->id = *id;
	f->refs = 1;
	f->next = a->flights;
	a->flights = f;
	*out = f;
	pthread_mutex_unlock(&a->mu);
	return JOIN_LEAD;
}

static void
flight_release_locked(ApiCtx *a, Flight *f)
{
	(void)a;
	if (--f->refs == 0)
		free(f);
}

/* Wakes a detached list of parked requests, outside ApiCtx.mu (a wake
 * may queue a job or resume a connection). */
static void
wake_all(Parked *p, const KcErr *err)
{
	while (p) {
		Parked *next = p->next;
		p->wake(p->closure, err);
		free(p);
		p = next;
	}
}

/* The leader lands: unlinks the flight, records the outcome, wakes waiters
 * (parked ones run again, or get the leader's error). */
static void
flight_land(ApiCtx *a, Flight *f, const KcErr *err)
{
	if (!f)
		return;
	KcErr e = {0};
	pthread_mutex_lock(&a->mu);
	for (Flight **p = &a->flights; *p; p = &(*p)->next) {
		if (*p == f) {
			*p = f->next;
			break;
		}
	}
	f->done = true;
	if (err)
		f->err = *err;
	e = f->err;
	Parked *parked = f->parked;
	f->parked = NULL;
	for (Parked *p = parked; p; p = p->next)
		a->stats.parked_now--;
	pthread_cond_broadcast(&a->cv);
	flight_release_locked(a, f);
	pthread_mutex_unlock(&a->mu);
	wake_all(parked, e.status == KC_OK ? NULL : &e);
}

/* Waits for the leader; copies its outcome into *err. */
static KcStatus
flight_wait(ApiCtx *a, Flight *f, KcErr *err)
{
	pthread_mutex_lock(&a->mu);
	while (!f->done)
		pthread_cond_wait(&a->cv, &a->mu);
	*err = f->err;
	flight_release_locked(a, f);
	pthread_mutex_unlock(&a->mu);
	return err->status;
}

int
api_cancel_parked(ApiCtx *a, KcStatus st)
{
	KC_ASSERT(st != KC_OK);
	Parked *all = NULL;
	int n = 0;
	pthread_mutex_lock(&a->mu);
	a->park_refused = st;
	for (Flight *f = a->flights; f; f = f->next) {
		while (f->parked) {
			Parked *p = f->parked;
			f->parked = p->next;
			p->next = all;
			all = p;
			n++;
		}
	}
	a->stats.parked_now -= n;
	pthread_mutex_unlock(&a->mu);
	KcErr err = {0};
	kc_fail(&err, st, NULL, "%s", kc_status_text(st));
	wake_all(all, &err);
	return n;
}

/* ---- test-only fault injection ------------------------------------------ */

/* POST /v1/compile?inject=crash|hang|alloc (test_fault_injection): the
 * worker that compiles the request misbehaves so. The flight id is derived
 * from the fault and the kernel_id, so identical injected requests share
 * one flight and an ordinary request for the same kernel never joins it. */
static void
inject_flight_id(KcInject inject, const KcDigest *kid, KcDigest *out)
{
	const char *name = kc_inject_name(inject);
	KcSha256 *h = kc_sha256_begin();
	kc_sha256_update(h, "kcsd-inject-", 12);
	kc_sha256_update(h, name, strlen(name) + 1);
	kc_sha256_update(h, kid->b, sizeof kid->b);
	kc_sha256_end(h, out);
}

/* ---- the negative cache ------------------------------------------------- */

/* A compile that crashed its worker or timed out is likely to do so again:
 * for negative_ttl_s its kernel_id answers the same error without starting
 * a worker. Entries live in a small table under ApiCtx.mu; a full table
 * replaces the entry that expires first. */
static NegEntry *
negative_find_locked(ApiCtx *a, const KcDigest *kid)
{
	for (int i = 0; i < API_NEGATIVE_ENTRIES; i++) {
		NegEntry *e = &a->negative[i];
		if (e->until_us && memcmp(e->kid.b, kid->b, sizeof kid->b) == 0)
			return e;
	}
	return NULL;
}

/* True with *err and *retry_s (seconds left) if kid is negative now. */
static bool
negative_get(ApiCtx *a, const KcDigest *kid, KcErr *err, int *retry_s)
{
	bool found = false;
	int64_t now = kc_now_us();
	pthread_mutex_lock(&a->mu);
	NegEntry *e = negative_find_locked(a, kid);
	if (e && e->until_us > now) {
		*err = e->err;
		*retry_s = (int)((e->until_us - now + 999999) / 1000000);
		a->stats.negative_hits++;
		found = true;
	} else if (e) {
		e->until_us = 0;
	}
	pthread_mutex_unlock(&a->mu);
	return found;
}

static void
negative_put(ApiCtx *a, const KcDigest *kid, const KcErr *err)
{
	if (a->cfg.negative_ttl_s <= 0)
		return;
	int64_t now = kc_now_us();
	pthread_mutex_lock(&a->mu);
	NegEntry *e = negative_find_locked(a, kid);
	for (int i = 0; !e && i < API_NEGATIVE_ENTRIES; i++)
		if (a->negative[i].until_us <= now)
			e = &a->negative[i];
	for (int i = 0; !e && i < API_NEGATIVE_ENTRIES; i++)
		if (!e || a->negative[i].until_us < e->until_us)
			e = &a->negative[i];
	if (!e)
		e = &a->negative[0];
	*e = (NegEntry){
	    .kid = *kid, .err = *err, .until_us = now + (int64_t)a->cfg.negative_ttl_s * 1000000};
	pthread_mutex_unlock(&a->mu);
}

bool
api_negative_clear(ApiCtx *a, const KcDigest *kid)
{
	pthread_mutex_lock(&a->mu);
	NegEntry *e = negative_find_locked(a, kid);
	bool had = e && e->until_us > kc_now_us();
	if (e)
		e->until_us = 0;
	pthread_mutex_unlock(&a->mu);
	return had;
}

/* ---- running jobs ------------------------------------------------------- */

KcStatus
api_run_job(ApiCtx *a, const KcJob *job, KcJobResult *out, KcErr *err)
{
	int64_t tc = kc_now_us();
	bool counted = job->kind == KC_JOB_COMPILE;
	if (counted)
		api_metrics_compile_begin(a);
	KcStatus st =
	    a->cfg.pool ? kc_pool_run(a->cfg.pool, job, out, err) : kc_job_run(job, NULL, out, err);
	if (counted)
		api_metrics_compile_end(a, kc_now_us() - tc);
	return st;
}

/* Whether an error says the compiler died or wedged on this kernel (the
 * negative cache's business), rather than what the graph asks for. */
static bool
compiler_failure(KcStatus st)
{
	return st == KC_COMPILER_CRASHED || st == KC_COMPILE_TIMEOUT;
}

/* ---- recent graphs (for PUT /v1/schedules validation) ------------------- */

void
api_recent_put(ApiCtx *a, const KcDigest *key, const char *body, size_t len)
{
	if (len == 0 || len > API_RECENT_MAX_BYTES)
		return;
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < API_RECENT; i++) {
		if (a->recent[i].body && memcmp(a->recent[i].key.b, key->b, sizeof key->b) == 0) {
			pthread_mutex_unlock(&a->mu);
			return;
		}
	}
	RecentGraph *r = &a->recent[a->recent_next];
	a->recent_next = (a->recent_next + 1) % API_RECENT;
	free(r->body);
	r->key = *key;
	r->body = kc_xmalloc(len + 1);
	memcpy(r->body, body, len);
	r->body[len] = 0;
	r->len = len;
	pthread_mutex_unlock(&a->mu);
}

char *
api_recent_get(ApiCtx *a, const KcDigest *key, size_t *len)
{
	char *copy = NULL;
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < API_RECENT; i++) {
		RecentGraph *r = &a->recent[i];
		if (r->body && memcmp(r->key.b, key->b, sizeof key->b) == 0) {
			copy = kc_xmalloc(r->len + 1);
			memcpy(copy, r->body, r->len + 1);
			*len = r->len;
			break;
		}
	}
	pthread_mutex_unlock(&a->mu);
	return copy;
}

/* ---- schedule choice ---------------------------------------------------- */

/* The stored record for (workload, target), checked again by
 * kc_schedule_record_check, this time against the graph: its source is
 * "tuned". Falls back to the default schedule ("default") if there is none
 * or it no longer applies. */
static void
choose_schedule(ApiCtx *a, CompileCtx *c, const KcGraph *g, const KcTarget *t, const KcWorkload *wl,
                KcScheduleRecord *out)
{
	KcBuf rec = {0};
	KcErr err = {0};
	memset(out, 0, sizeof *out);
	if (cache_get_schedule(a->cache, &wl->key, t->name, &rec, &err) == KC_OK) {
		KcRecordCheck chk = {.where = "",
		                     .workload_key = &wl->key,
		                     .key_from = "its key",
		                     .target = t,
		                     .graph = g};
		KcErr serr = {0};
		if (kc_schedule_record_check(c, rec.data, rec.len, &chk, out, &serr) == KC_OK) {
			out->source = "tuned";
		} else {
			kc_log(KC_LOG_WARN,
			       "stored schedule for target %s does not apply (%s); "
			       "using the default",
			       t->name, serr.msg);
		}
	}
	kc_buf_free(&rec);
	if (!out->source) {
		memset(out, 0, sizeof *out);
		out->workload_key = wl->key;
		out->target = *t;
		out->schedule = kc_schedule_default(c, g, t);
		out->source = "default";
	}
}

/* ---- responses ---------------------------------------------------------- */

/* Appends v in decimal. */
static void
put_u64(KcBuf *b, uint64_t v)
{
	char d[20];
	int n = (int)sizeof d;
	do {
		d[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	kc_buf_append(b, d + n, sizeof d - (size_t)n);
}

/* The metadata JSON object up to (not including) its closing brace. */
static size_t
head_len_of(const char *meta, size_t meta_len)
{
	while (meta_len > 0 && meta[meta_len - 1] != '}')
		meta_len--;
	KC_ASSERT(meta_len > 1);
	return meta_len - 1;
}

/* Fills *resp with `head` (metadata without its closing brace), the
 * per-request fields ("ms_hash" when the body has one, "cache",
 * "request_ms") and "object_base64". No printf, one allocation: with the
 * cache reads this is the whole cost of a hit. */
static void
reply_build(ApiResponse *resp, const char *head, size_t head_len, const MsHash *ms,
            const char *cache, int64_t t0, const char *b64, size_t b64_len)
{
	KcBuf b = {.cap = head_len + b64_len + 160};
	b.data = kc_xmalloc(b.cap);
	b.data[0] = 0;
	kc_buf_append(&b, head, head_len);
	if (ms && ms->ok) {
		kc_buf_puts(&b, ",\"ms_hash\":\"");
		put_u64(&b, ms->v);
		kc_buf_putc(&b, '"');
	}
	kc_buf_puts(&b, ",\"cache\":\"");
	kc_buf_puts(&b, cache);
	kc_buf_puts(&b, "\",\"request_ms\":");
	/* %.3f of the milliseconds, from whole microseconds */
	int64_t us = kc_now_us() - t0;
	if (us < 0)
		us = 0;
	char frac[4] = {'.', (char)('0' + us / 100 % 10), (char)('0' + us / 10 % 10),
	                (char)('0' + us % 10)};
	put_u64(&b, (uint64_t)(us / 1000));
	kc_buf_append(&b, frac, sizeof frac);
	kc_buf_puts(&b, ",\"object_base64\":\"");
	kc_buf_append(&b, b64, b64_len);
	kc_buf_puts(&b, "\"}\n");
	api_reply_json_buf(resp, 200, &b);
	resp->cache = cache;
}

/* reply_build from the metadata JSON and the object's bytes. */
static void
reply_spliced(ApiResponse *resp, const char *meta, size_t meta_len, const MsHash *ms,
              const char *cache, int64_t t0, const void *object, size_t object_len)
{
	size_t b64_len = 0;
	char *b64 = kc_base64(object, object_len, &b64_len);
	reply_build(resp, meta, head_len_of(meta, meta_len), ms, cache, t0, b64, b64_len);
	free(b64);
}

/* The string value of "key" in stored metadata JSON (written by this
 * file: the first match is the top-level field, since a quote inside a
 * string value is always escaped). False if absent or over cap-1 bytes. */
static bool
meta_field(const char *meta, const char *key, char *out, size_t cap)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":\"", key);
	const char *p = strstr(meta, pat);
	if (!p)
		return false;
	p += strlen(pat);
	size_t n = strcspn(p, "\"\\");
	if (p[n] != '"' || n >= cap)
		return false;
	memcpy(out, p, n);
	out[n] = 0;
	return true;
}

/* What read_artifact found. */
typedef enum Stored {
	STORED_NONE,     /* a part is missing (or refused by its checksum) */
	STORED_OK,       /* serve it */
	STORED_RESIGNED, /* serve it; *meta was re-signed and should be stored */
	STORED_BAD,      /* never serve it; `why` says what failed */
} Stored;

/* Reads a kernel's meta and object parts and checks them end to end with
 * one hash of the object: the cache verifies the object's bytes against
 * their frame checksum and hands that digest back, which must be the
 * metadata's object_sha256; api_check_artifact checks the rest (the
 * metadata names the kernel, the signature). */
static Stored
read_artifact(ApiCtx *a, const KcDigest *kid, KcBuf *meta, KcBuf *obj, KcDigest sums[2], char *why,
              size_t cap)
{
	KcErr err = {0};
	char want[80], got[65], kid_hex[65];
	bool ok =
	    cache_get_part_digest(a->cache, kid, CACHE_PART_META, meta, &sums[0], &err) == KC_OK &&
	    cache_get_part_digest(a->cache, kid, CACHE_PART_OBJECT, obj, &sums[1], &err) == KC_OK &&
	    meta->len > 2;
	if (err.status != KC_OK && err.status != KC_NOT_FOUND)
		kc_log(KC_LOG_WARN, "cache read: %s", err.msg);
	if (!ok)
		return STORED_NONE;
	size_t end = meta->len;
	while (end > 0 && (meta->data[end - 1] == '\n' || meta->data[end - 1] == ' '))
		end--;
	if (meta->data[0] != '{' || end < 2 || meta->data[end - 1] != '}') {
		kc_digest_hex(kid, kid_hex);
		snprintf(why, cap, "stored metadata of kernel %s is not a JSON object", kid_hex);
		return STORED_BAD;
	}
	kc_digest_hex(&sums[1], got);
	if (!meta_field(meta->data, "object_sha256", want, sizeof want) || strcmp(want, got) != 0) {
		kc_digest_hex(kid, kid_hex);
		snprintf(why, cap,
		         "stored object of kernel %s has SHA-256 %.16s..., its metadata says "
		         "%.16s...",
		         kid_hex, got, want);
		return STORED_BAD;
	}
	switch (api_check_artifact(a, kid, meta, NULL, why, cap)) {
	case API_ARTIFACT_OK: return STORED_OK;
	case API_ARTIFACT_RESIGNED: return STORED_RESIGNED;
	case API_ARTIFACT_BAD: return STORED_BAD;
	}
	return STORED_BAD;
}

/* Answers from the cache if both the meta and object parts are there and
 * pass the end-to-end check (read_artifact): an object that is not the
 * one its metadata names is a miss (compiled again and overwritten),
 * never served. Metadata signed by an older key is re-signed and stored. */
static bool
reply_cached(ApiCtx *a, const KcDigest *kid, const MsHash *ms, int64_t t0, ApiResponse *resp)
{
	KcBuf meta = {0}, obj = {0};
	KcDigest sums[2];
	char why[320] = "";
	bool ok = false;
	switch (read_artifact(a, kid, &meta, &obj, sums, why, sizeof why)) {
	case STORED_NONE: break;
	case STORED_OK: ok = true; break;
	case STORED_RESIGNED: {
		KcErr perr = {0};
		if (cache_put_part(a->cache, kid, CACHE_PART_META, meta.data, meta.len, &perr) !=
		    KC_OK)
			kc_log(KC_LOG_WARN, "re-signed metadata not stored: %s", perr.msg);
		ok = true;
		break;
	}
	case STORED_BAD:
		kc_log(KC_LOG_ERROR, "stored artifact refused, compiling again: %s", why);
		break;
	}
	if (ok)
		reply_spliced(resp, meta.data, meta.len, ms, "hit", t0, obj.data, obj.len);
	kc_buf_free(&meta);
	kc_buf_free(&obj);
	return ok;
}

static void
put_target(KcBuf *b, const KcTarget *t)
{
	kc_buf_puts(b, "{\"name\":");
	api_json_str(b, t->name);
	kc_buf_puts(b, ",\"triple\":");
	api_json_str(b, t->triple);
	kc_buf_puts(b, ",\"cpu\":");
	api_json_str(b, t->cpu);
	kc_buf_puts(b, ",\"features\":");
	api_json_str(b, t->features);
	kc_buf_putc(b, '}');
}

static void
put_args(KcBuf *b, const KcGraph *g)
{
	int n = kc_graph_nargs(g);
	kc_buf_putc(b, '[');
	for (int i = 0; i < n; i++) {
		KcArgInfo ai;
		kc_graph_arg(g, i, &ai);
		kc_buf_printf(b, "%s{\"index\":%d,\"role\":\"%s\",\"tensor_name\":", i ? "," : "",
		              ai.index, ai.is_output ? "output" : "input");
		api_json_str(b, ai.tensor_name ? ai.tensor_name : "");
		kc_buf_puts(b, ",\"dtype\":");
		api_json_str(b, ai.dtype ? ai.dtype : "");
		kc_buf_puts(b, ",\"shape\":[");
		for (int d = 0; d < ai.rank; d++)
			kc_buf_printf(b, "%s%lld", d ? "," : "", (long long)ai.shape[d]);
		kc_buf_putc(b, ']');
		if (ai.writes_input >= 0)
			kc_buf_printf(b, ",\"writes_input\":%d", ai.writes_input);
		kc_buf_putc(b, '}');
	}
	kc_buf_putc(b, ']');
}

/* The schedule record used, in kcs-schedule-v1 form plus "source". */
static void
put_schedule(KcBuf *b, const KcScheduleRecord *ch)
{
	KcScheduleRecord r = *ch;
	char prov[192];
	if (!r.provenance) {
		api_default_provenance("kcsd-default", prov, sizeof prov);
		r.provenance = prov;
	}
	kc_schedule_record_print(&r, b);
}

/* The compile job of a request: its body, read again by the worker with
 * the same limits, and the schedule chosen here (a default one as
 * "default": the worker derives the same schedule from the graph). */
static void
compile_job(const ApiCtx *a, const ApiRequest *req, const KcTarget *t, const KcScheduleRecord *ch,
            KcInject inject, KcJob *job)
{
	bool tuned = ch->source && strcmp(ch->source, "tuned") == 0;
	*job = (KcJob){
	    .kind = KC_JOB_COMPILE,
	    .body = req->body ? req->body : "",
	    .body_len = req->body_len,
	    .limits = a->cfg.limits,
	    .template_name = tuned ? kc_schedule_template(ch->schedule) : NULL,
	    .knobs = tuned ? kc_schedule_knobs_json(ch->schedule) : NULL,
	    .linker = a->cfg.linker,
	    .want_ir = true,
	    .inject = inject,
	    .target = *t,
	};
}

/* Compiles, stores and answers one kernel (the leader's path). */
static KcStatus
compile_and_store(ApiCtx *a, const ApiRequest *req, const KcGraph *g, const KcTarget *t,
                  const KcWorkload *wl, const KcScheduleRecord *ch, const KcDigest *kid,
                  const MsHash *ms, int64_t t0, ApiResponse *resp, KcErr *err)
{
	KcJob job;
	KcJobResult res;
	KcBuf meta = {0};
	compile_job(a, req, t, ch, KC_INJECT_NONE, &job);
	KcStatus st = api_run_job(a, &job, &res, err);
	if (st != KC_OK) {
		if (compiler_failure(st)) {
			char kid_hex[65], wl_hex[65];
			kc_digest_hex(kid, kid_hex);
			kc_digest_hex(&wl->key, wl_hex);
			kc_log(KC_LOG_ERROR,
			       "compile of kernel %s (workload %s, target %s) failed: %s", kid_hex,
			       wl_hex, t->name, err->msg);
		}
		return kc_fail(err, st, NULL, "%s", kc_status_text(st));
	}
	KcArtifact art = res.art;
	res.art = (KcArtifact){0};
	kc_job_result_free(&res);

	char kid_hex[65], wl_hex[65], obj_hex[65];
	KcDigest obj_sha;
	kc_digest_hex(kid, kid_hex);
	kc_digest_hex(&wl->key, wl_hex);
	kc_sha256(art.object, art.object_len, &obj_sha);
	kc_digest_hex(&obj_sha, obj_hex);

	const char *name = kc_graph_name(g);
	kc_buf_printf(&meta, "{\"kernel_id\":\"%s\",\"workload_key\":\"%s\",\"name\":", kid_hex,
	              wl_hex);
	api_json_str(&meta, name ? name : "");
	kc_buf_puts(&meta, ",\"symbol\":");
	api_json_str(&meta, art.symbol);
	kc_buf_puts(&meta, ",\"target\":");
	put_target(&meta, t);
	kc_buf_puts(&meta,
	            ",\"format\":\"elf-shared-object\",\"abi\":\"" KC_CPU_ABI "\",\"args\":");
	put_args(&meta, g);
	kc_buf_puts(&meta, ",\"schedule\":");
	put_schedule(&meta, ch);
	kc_buf_printf(&meta,
	              ",\"compile_ms\":%.3f,\"link_ms\":%.3f,\"object_sha256\":\"%s\","
	              "\"object_bytes\":%zu,\"kcsd_version\":\"%s\",\"build_id\":\"%s\"",
	              art.compile_ms, art.link_ms, obj_hex, art.object_len, KCSD_VERSION,
	              KCSD_BUILD_ID);
	api_sign_meta(a, &meta, kid_hex, obj_hex, wl_hex, art.symbol);
	kc_buf_putc(&meta, '}');

	CacheKernelPut put = {
	    .workload_key = wl->key,
	    .canonical = wl->canonical,
	    .canonical_len = wl->canonical_len,
	    .target = t->name,
	    .kernel_id = *kid,
	    .meta = meta.data,
	    .meta_len = meta.len,
	    .object = art.object,
	    .object_len = art.object_len,
	    .ir = art.ir,
	    .ir_len = art.ir_len,
	};
	/* Served all the same when it cannot be stored (the store is full and
	 * nothing is left to evict): the client has its kernel, the store
	 * keeps what it had, and the next identical request compiles again. */
	KcErr perr = {0};
	const char *cache = "miss";
	if (cache_put_kernel(a->cache, &put, &perr) != KC_OK) {
		kc_log(KC_LOG_WARN, "kernel %s not stored: %s", kid_hex, perr.msg);
		api_metrics_not_stored(a);
		cache = "miss-not-stored";
	}
	kc_log(KC_LOG_INFO, "compiled kernel %s (%s, %s, %s schedule) in %.1f ms", kid_hex,
	       name ? name : "", t->name, ch->source, art.compile_ms);

	reply_spliced(resp, meta.data, meta.len, ms, cache, t0, art.object, art.object_len);
	kc_buf_free(&meta);
	kc_artifact_free(&art);
	return KC_OK;
}

/* "ms_hash" (MindSpore's kernel-name hash of the body, a decimal uint64
 * as a string) is a property of the body, not of the kernel (bodies that
 * differ only in tensor names share a kernel_id), so it is computed per
 * request (or memoised with the body) and not stored with the metadata. */
static void
ms_hash_of(const ApiRequest *req, MsHash *out)
{
	KcErr err = {0};
	out->ok = kc_ms_hash(req->body ? req->body : "", req->body_len, &out->v, &err) == KC_OK;
}

/* ---- the handler -------------------------------------------------------- */

/* Body: a composite JSON document (akg-format.md); query: target=NAME,
 * inject=crash|hang|alloc (test-only). */
void
h_compile(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)m;
	int64_t t0 = kc_now_us();
	KcErr err = {0};
	KcGraph *g = NULL;
	KcTarget tgt;
	KcWorkload wl;
	KcScheduleRecord ch = {0};
	/* a request woken from parking was answered by another's compile */
	bool coalesced = req->attempt > 0;
	CompileCtx *c = NULL;
	char tbuf[1024];
	MsHash ms = {0};
	KcDigest kid;
	bool have_kid = false;
	/* read before the schedule is: see ApiCtx.sched_gen */
	uint64_t gen = atomic_load(&a->sched_gen);
	const char *inject_q = api_query(req, "inject");
	KcInject inject = inject_q ? kc_inject_lookup(inject_q) : KC_INJECT_NONE;
	int retry_s = 0;

	if (inject_q && !a->cfg.test_fault_injection) {
		api_reply_error(resp, KC_BAD_REQUEST, "?inject",
		                "?inject is test-only; start kcsd with --test-fault-injection 1");
		goto count_failure;
	}
	if (inject == KC_INJECT_COUNT || inject == KC_INJECT_NONE) {
		if (inject_q) {
			api_reply_error(resp, KC_BAD_REQUEST, "?inject",
			                "inject must be crash, hang or alloc");
			goto count_failure;
		}
	}
	if (inject == KC_INJECT_ALLOC && a->cfg.compile_max_bytes <= 0) {
		/* unbounded, it would take the machine's memory, not the worker's */
		api_reply_error(
		    resp, KC_BAD_REQUEST, "?inject",
		    "inject=alloc needs the workers' memory cap (compile_max_bytes), which "
		    "is off (0, or a sanitizer build, where RLIMIT_AS cannot apply)");
		goto count_failure;
	}
	if (!api_is_json(req->content_type)) {
		api_reply_error(resp, KC_MEDIA_TYPE, NULL, "Content-Type must be application/json");
		goto count_failure;
	}
	c = compile_ctx_new();
	if (kc_parse(c, req->body ? req->body : "", req->body_len, &a->cfg.limits, &g, &err) !=
	    KC_OK)
		goto fail;
	ms_hash_of(req, &ms);
	const char *tq = api_query_target(req, tbuf, sizeof tbuf);
	if (tq && a->host_ok && strcmp(tq, "cpu") == 0) {
		tgt = a->host; /* resolved once in api_new: host detection costs ~0.25 ms */
	} else if (tq) {
		if (kc_target_resolve(tq, &tgt, &err) != KC_OK) {
			if (!err.where[0])
				snprintf(err.where, sizeof err.where, "?target");
			goto fail;
		}
	} else if (kc_target_from_graph(g, &tgt, &err) != KC_OK) {
		goto fail;
	}
	kc_workload(c, g, &wl);
	/* the canonical text is what a miss stores for good (the workload
	 * record outlives the kernel while a schedule refers to it) */
	if (wl.canonical_len > a->cfg.max_canonical_bytes) {
		kc_fail(&err, KC_TOO_LARGE, "",
		        "the canonical workload is %zu bytes, over max_canonical_bytes (%zu)",
		        wl.canonical_len, a->cfg.max_canonical_bytes);
		goto fail;
	}
	api_recent_put(a, &wl.key, req->body, req->body_len);
	choose_schedule(a, c, g, &tgt, &wl, &ch);
	kc_kernel_id(&wl.key, &tgt, ch.schedule, KCSD_BUILD_ID, &kid);
	have_kid = inject == KC_INJECT_NONE;

	if (inject != KC_INJECT_NONE) {
		/* never the cache, the negative cache or an ordinary request's
		 * flight; the worker fails it, so it always ends in fail */
		KcDigest fid;
		Flight *f = NULL;
		inject_flight_id(inject, &kid, &fid);
		switch (flight_join(a, &fid, req, &f, &err)) {
		case JOIN_LEAD: {
			KcJob job;
			KcJobResult res;
			kc_log(KC_LOG_WARN, "inject=%s: the worker compiling this request %s",
			       inject_q,
			       inject == KC_INJECT_CRASH  ? "crashes"
			       : inject == KC_INJECT_HANG ? "hangs"
			                                  : "allocates without bound");
			compile_job(a, req, &tgt, &ch, inject, &job);
			if (api_run_job(a, &job, &res, &err) == KC_OK)
				kc_fail(&err, KC_INTERNAL, NULL, "inject=%s: the compile succeeded",
				        inject_q);
			kc_job_result_free(&res);
			flight_land(a, f, &err);
			goto fail;
		}
		case JOIN_WAIT: flight_wait(a, f, &err); goto fail;
		case JOIN_PARKED: goto parked;
		case JOIN_REFUSED: goto fail;
		}
	}

	for (int attempt = req->attempt;; attempt++) {
		if (reply_cached(a, &kid, &ms, t0, resp)) {
			pthread_mutex_lock(&a->mu);
			if (coalesced)
				a->stats.coalesced++;
			else
				a->stats.hits++;
			pthread_mutex_unlock(&a->mu);
			goto done;
		}
		/* a stored kernel is served even if an earlier compile of it died */
		if (attempt == req->attempt && negative_get(a, &kid, &err, &retry_s)) {
			api_reply_compiler_failure(resp, &err, &kid, retry_s > 0 ? retry_s : 1);
			goto count_failure;
		}
		Flight *f = NULL;
		/* After a few rounds (the leader compiled but could not store),
		 * compile without the table rather than loop. */
		if (attempt < 3) {
			switch (flight_join(a, &kid, req, &f, &err)) {
			case JOIN_LEAD: break;
			case JOIN_WAIT:
				if (flight_wait(a, f, &err) != KC_OK)
					goto fail;
				coalesced = true;
				continue;
			case JOIN_PARKED: goto parked;
			case JOIN_REFUSED: goto fail;
			}
		}
		if (f && reply_cached(a, &kid, &ms, t0, resp)) {
			/* another leader landed between our lookup and join */
			flight_land(a, f, NULL);
			pthread_mutex_lock(&a->mu);
			a->stats.hits++;
			pthread_mutex_unlock(&a->mu);
			goto done;
		}
		KcStatus st =
		    compile_and_store(a, req, g, &tgt, &wl, &ch, &kid, &ms, t0, resp, &err);
		if (st != KC_OK && compiler_failure(st))
			negative_put(a, &kid, &err);
		flight_land(a, f, st == KC_OK ? NULL : &err);
		if (st != KC_OK)
			goto fail;
		pthread_mutex_lock(&a->mu);
		a->stats.compiles++;
		pthread_mutex_unlock(&a->mu);
		goto done;
	}

fail:
	if (have_kid && compiler_failure(err.status))
		api_reply_compiler_failure(resp, &err, &kid, 0);
	else
		api_reply_kcerr(resp, &err);
count_failure:
	pthread_mutex_lock(&a->mu);
	a->stats.failures++;
	pthread_mutex_unlock(&a->mu);
done:
	if (resp->status == 200 && have_kid) {
		KcDigest key;
		memo_key(req, gen, &key);
		memo_put(a->memo, &key, &kid, &wl.key, &ms);
	}
parked:
	/* parked: req and resp now belong to the request's next run */
	compile_ctx_free(c);
}

/* The fast path (api_handle_fast): a memoised body whose kernel is in the
 * cache is answered here, on the HTTP thread, with the bytes the slow path
 * would send for the hit: from the kernel's reply parts in memory while
 * the store still holds the values they were made from, else from a
 * verified read (read_artifact), which makes them. Anything else (no
 * entry, a missing or refused kernel, metadata to re-sign: a write) goes
 * the slow way, which logs, repairs and records the entry again. */
bool
api_compile_fast(ApiCtx *a, const ApiRequest *req, ApiResponse *resp)
{
	static const CachePart parts[2] = {CACHE_PART_META, CACHE_PART_OBJECT};
	int64_t t0 = kc_now_us();
	KcDigest key, sums[2];
	MemoEntry e;
	KcBuf meta = {0}, obj = {0};
	KcErr err = {0};
	char why[320];
	bool ok = false;

	if (!api_is_json(req->content_type) || api_query(req, "inject"))
		return false;
	memo_key(req, atomic_load(&a->sched_gen), &key);
	if (!memo_get(a->memo, &key, &e))
		return false;
	Reply *r = reply_get(a->memo, &e.kid);
	if (r) {
		KcStatus st = cache_peek_digests(a->cache, &e.kid, parts, 2, sums, &err);
		ok = st == KC_OK && memcmp(sums, r->sums, sizeof sums) == 0;
		if (ok)
			reply_build(resp, r->text, r->head_len, &e.ms, "hit", t0,
			            r->text + r->head_len, r->b64_len);
		reply_unref(a->memo, r, !ok);
		if (!ok && st != KC_OK) {
			if (st != KC_NOT_FOUND)
				kc_log(KC_LOG_WARN, "cache read: %s", err.msg);
			return false; /* gone: the slow path compiles it again */
		}
	}
	if (!ok && read_artifact(a, &e.kid, &meta, &obj, sums, why, sizeof why) == STORED_OK) {
		size_t head_len = head_len_of(meta.data, meta.len);
		size_t b64_len = 0;
		char *b64 = kc_base64(obj.data, obj.len, &b64_len);
		reply_build(resp, meta.data, head_len, &e.ms, "hit", t0, b64, b64_len);
		reply_add(a->memo, &e.kid, sums, meta.data, head_len, b64, b64_len);
		free(b64);
		ok = true;
	}
	if (ok) {
		api_recent_put(a, &e.workload, req->body, req->body_len);
		pthread_mutex_lock(&a->mu);
		a->stats.hits++;
		a->stats.fast_hits++;
		pthread_mutex_unlock(&a->mu);
	}
	kc_buf_free(&meta);
	kc_buf_free(&obj);
	return ok;
}
