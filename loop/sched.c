/* sched.c - schedules: template + knobs, their JSON form, and applying them
 * to a loop nest.
 *
 * Three templates today, chosen by classifying the graph: "injective" (every
 * stage is a perfect elementwise nest), "reduce" (some stage is a
 * reduction: spatial loops outside, reduction loops inside; the parallel
 * loop is always a spatial one) and "matmul" (a MatMul: operand packing
 * stages and a reduction stage over K; issue 4 gives it blocking knobs).
 * Their knobs, global to all stages:
 *   vector_width    elements per vector (power of two, 1..64; 1 = scalar);
 *                   default from the target: AVX-512 16, AVX/AVX2 8, else 4
 *   unroll          interleave count of the innermost loop (1..16; default
 *                   0 = auto: 4 when that loop is a reduction's, so four
 *                   vector accumulators hide the add latency, else 2)
 *   parallel_grain  minimum elements per parallel task (1..2^40); at run
 *                   time ntasks = clamp(work / grain, 1, threads)
 *   fuse_rows       (bool, default true) row fusion, fuse.c: consecutive
 *                   stages sharing their outer spatial loops, each reading
 *                   what the group wrote only for the same outer index,
 *                   run in one parallel region over those loops (a softmax
 *                   or layernorm: one pass per row, the row max/sum in
 *                   registers); needs a shared loop of >= 64 iterations
 *   rfactor         (0..1024, default 0 = auto) a reduction with under 64
 *                   spatial points and >= 2^16 reduced elements (a full
 *                   reduction) is split into T partials (auto: the largest
 *                   divisor <= 64 of its first reduction loop; n >= 2: the
 *                   largest <= n) computed in parallel, then combined in a
 *                   second region in a fixed order: results do not depend
 *                   on the thread count; 1 = off
 *   tile            (0 auto = 256, 1 off, 4..256) an injective stage that
 *                   writes along its innermost loop and reads along the one
 *                   outside it (a Transpose) runs its last two loops in
 *                   tile x tile blocks (the largest power of two <= tile
 *                   that fits both extents; partial blocks at the ends),
 *                   each as vector_width x vector_width sub-blocks
 *                   transposed in registers (emit_tile.c); a permuted copy
 *                   that keeps its innermost axis (Transpose [0,2,1,3])
 *                   runs its outer loops in its input's order instead
 *                   (fuse.c read_order); 1 turns both off. Outputs of at
 *                   least 4 MiB of both are stored non-temporally where
 *                   vectors are whole cache lines (vector_width 16)
 *   stream          (bool, default true) any other injective stage writing
 *                   an output of at least 4 MiB contiguously in vectors of
 *                   32 or 64 bytes stores it non-temporally (fuse.c
 *                   sched_stream, after the annotations and the GEMM
 *                   epilogues); false: no non-temporal stores in the
 *                   stage, the transposes' included
 *   jam             (0 auto = 8, 1 off, 2..16) an outer-axis reduction (a
 *                   column sum) steps its last reduction loop this many
 *                   rows at a time, summing them in registers before one
 *                   update of the accumulator (LnStage.jam)
 * fuse_rows, jam, rfactor, stream and tile are printed in the canonical JSON only when
 * not at their defaults. Order of application: tile and the per-stage
 * annotations, then rfactor (adds a stage after each split one, with the
 * split stage's knobs), then row fusion over the resulting stages.
 * "stages": [{...}, ...] overrides any of them per stage, in the order
 * ln_lower makes them (materialised values such as reductions in graph
 * order, then one stage per distinct output shape, then in-place writes).
 * Knob records are validated strictly (unknown key, wrong type, bad value
 * -> KC_BAD_SCHEDULE): a schedule is either applied exactly or refused,
 * never silently miscompiled. Canonical knobs JSON: sorted keys, compact.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loop.h"

#define JAM_AUTO 8 /* rows per step of an outer-axis reduction */
#define JAM_MAX 16
#define TEMPLATE_INJECTIVE "injective"
#define TEMPLATE_REDUCE "reduce"
#define TEMPLATE_MATMUL "matmul"
#define MAX_GRAIN (INT64_C(1) << 40)
#define MIN_PAR_EXTENT 64 /* a parallel loop should have room for many threads */

/* The target's native_half column: x86-64 with F16C, AArch64 always
 * (targets.def). */
bool
sched_target_hw_half(const KcTarget *t)
{
	return t->native_half;
}

void
sched_default_knobs(const KcTarget *t, KcKnobs *out)
{
	/* the target's columns (targets.def): t comes from a resolver or
	 * kc_target_fill */
	int w = t->vector_width;

	KC_ASSERT(w > 0 && t->vector_regs > 0);

	out->vector_width = w;
	out->unroll = 0; /* auto, per stage (sched_apply) */
	out->parallel_grain = 16384;
	/* GEMM micro-tile: 0 = chosen from the shape among the tiles that fit
	 * the vector registers (lower_gemm.c): 32 with AVX-512 and on AArch64
	 * (NEON), 16 with AVX2/SSE */
	out->mr = 0;
	out->nr_vecs = 0;
	out->vregs = t->vector_regs;
	out->mc = out->nc = out->kc = 0; /* from the shape (lower_gemm.c) */
	out->fuse_epilogue = true;
	out->fuse_rows = true;
	out->rfactor = 0;
	out->tile = 0;
	out->stream = true;
	out->jam = 0;
}

/* The keys that sort before "stages" (put_knobs_tail adds the rest); the
 * GEMM knobs only in the "matmul" template; fuse_rows and rfactor only
 * when they differ from their defaults (so records made before them keep
 * their canonical form). */
static void
put_knobs(KcBuf *b, const KcKnobs *k, bool gemm)
{
	if (gemm)
		kc_buf_printf(b, "\"fuse_epilogue\":%s,", k->fuse_epilogue ? "true" : "false");
	if (!k->fuse_rows)
		kc_buf_puts(b, "\"fuse_rows\":false,");
	if (k->jam)
		kc_buf_printf(b, "\"jam\":%d,", k->jam);
	if (gemm)
		kc_buf_printf(b, "\"kc\":%lld,\"mc\":%lld,\"mr\":%d,\"nc\":%lld,\"nr_vecs\":%d,",
		              (long long)k->kc, (long long)k->mc, k->mr, (long long)k->nc,
		              k->nr_vecs);
	kc_buf_printf(b, "\"parallel_grain\":%lld", (long long)k->parallel_grain);
	if (k->rfactor)
		kc_buf_printf(b, ",\"rfactor\":%d", k->rfactor);
}

/* The knobs sorted after "stages" (stream and tile only when not the
 * default). */
static void
put_knobs_tail(KcBuf *b, const KcKnobs *k)
{
	if (!k->stream)
		kc_buf_puts(b, ",\"stream\":false");
	if (k->tile)
		kc_buf_printf(b, ",\"tile\":%d", k->tile);
	kc_buf_printf(b, ",\"unroll\":%d,\"vector_width\":%d}", k->unroll, k->vector_width);
}

static bool
knobs_eq(const KcKnobs *a, const KcKnobs *b)
{
	return a->vector_width == b->vector_width && a->unroll == b->unroll &&
	       a->parallel_grain == b->parallel_grain && a->mr == b->mr &&
	       a->nr_vecs == b->nr_vecs && a->mc == b->mc && a->nc == b->nc && a->kc == b->kc &&
	       a->fuse_epilogue == b->fuse_epilogue && a->fuse_rows == b->fuse_rows &&
	       a->rfactor == b->rfactor && a->tile == b->tile && a->stream == b->stream &&
	       a->jam == b->jam;
}

/* Canonical knobs: sorted keys, compact; "stages" lists each stage's
 * effective knobs up to the last one that differs from the global ones,
 * and is absent when none does, so equal schedules print equal. */
static const char *
knobs_json(Arena *a, const KcSchedule *s)
{
	KcBuf b = {0};
	int last = -1;
	bool gemm = strcmp(s->template_name, TEMPLATE_MATMUL) == 0;

	for (int i = 0; i < s->nstages; i++)
		if (!knobs_eq(&s->stage[i], &s->knobs))
			last = i;
	kc_buf_putc(&b, '{');
	put_knobs(&b, &s->knobs, gemm);
	if (last >= 0) {
		kc_buf_puts(&b, ",\"stages\":[");
		for (int i = 0; i <= last; i++) {
			const KcKnobs *k = &s->stage[i];
			kc_buf_printf(&b, "%s{", i ? "," : "");
			put_knobs(&b, k, gemm);
			put_knobs_tail(&b, k);
		}
		kc_buf_putc(&b, ']');
	}
	put_knobs_tail(&b, &s->knobs);
	const char *r = arena_strdup(a, b.data);
	kc_buf_free(&b);
	return r;
}

KcSchedule *
kc_schedule_default(CompileCtx *c, const KcGraph *g, const KcTarget *t)
{
	KcSchedule *s = ARENA_NEW(c->arena, KcSchedule);

	int nreduce = 0, nmatmul = 0;
	s->nstages = ln_count_stages(c->arena, g, &nreduce, &nmatmul);
	s->template_name = nmatmul   ? TEMPLATE_MATMUL
	                   : nreduce ? TEMPLATE_REDUCE
	                             : TEMPLATE_INJECTIVE;
	sched_default_knobs(t, &s->knobs);
	s->stage = ARENA_ARRAY(c->arena, KcKnobs, s->nstages + 1);
	for (int i = 0; i < s->nstages; i++)
		s->stage[i] = s->knobs;
	s->knobs_json = knobs_json(c->arena, s);
	return s;
}

/* An integer knob: a JSON number with no fraction within [lo, hi]. */
static bool
int_knob(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
	if (!cJSON_IsNumber(v))
		return false;
	double d = v->valuedouble;
	if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
		return false;
	*out = (int64_t)d;
	return true;
}

/* Knobs: {"vector_width": int, "unroll": int, "parallel_grain": int,
 *         "fuse_rows": bool, "rfactor": int, "tile": int, "stream": bool,
 *         "jam": int,
 *         "stages": [Knobs without "stages", ...]}
 * every key optional; `stages` (top level only) overrides the global knobs
 * per stage, in stage order, and may be shorter than the stage list. */
static KcStatus
parse_knobs(const cJSON *o, KcKnobs *k, KcSchedule *s, bool gemm, const char *w, KcErr *err)
{
	const cJSON *it;
	bool seen[15] = {false};
	const cJSON *stages = NULL;

	if (!cJSON_IsObject(o))
		return kc_fail(err, KC_BAD_SCHEDULE, w, "knobs must be a JSON object");
	cJSON_ArrayForEach(it, o)
	{
		int64_t v = 0;
		int key = -1;
		const char *name = it->string ? it->string : "";
		if (strcmp(name, "vector_width") == 0) {
			key = 0;
			if (!int_knob(it, 1, 64, &v) || (v & (v - 1)) != 0)
				return kc_fail(err, KC_BAD_SCHEDULE, w,
				               "vector_width must be a power of two from 1 to 64");
			k->vector_width = (int)v;
		} else if (strcmp(name, "unroll") == 0) {
			key = 1;
			if (!int_knob(it, 0, 16, &v))
				return kc_fail(err, KC_BAD_SCHEDULE, w,
				               "unroll must be an integer from 0 (auto) to 16");
			k->unroll = (int)v;
		} else if (strcmp(name, "parallel_grain") == 0) {
			key = 2;
			if (!int_knob(it, 1, MAX_GRAIN, &v))
				return kc_fail(err, KC_BAD_SCHEDULE, w,
				               "parallel_grain must be an integer from 1 to 2^40");
			k->parallel_grain = v;
		} else if (strcmp(name, "fuse_rows") == 0) {
			key = 10;
			if (!cJSON_IsBool(it))
				return kc_fail(err, KC_BAD_SCHEDULE, w,
				               "fuse_rows must be true or false");
			k->fuse_rows = cJSON_IsTrue(it);
		} else if (strcmp(name, "rfactor") == 0) {
			key = 11;
			if (!int_knob(it, 0, 1024, &v))
				return kc_fail(err, KC_BAD_SCHEDULE, w,
				               "rfactor must be an integer from 0 to 1024");
			k->rfactor = (int)v;
		} else if (strcmp(name, "tile") == 0) {
			key = 12;
			if (!int_knob(it, 0, 256, &v) || (v > 1 && (v < 4 || (v & (v - 1)) != 0)))
				return kc_fail(err, KC_BAD_SCHEDULE, w,
				               "tile must be 0, 1 or a power of two from 4 to 256");
			k->tile = (int)v;
		} else if (strcmp(name, "jam") == 0) {
			key = 14;
			if (!int_knob(it, 0, JAM_MAX, &v))
				return kc_fail(err, KC_BAD_SCHEDULE, w,
				               "jam must be an integer from 0 (auto) to %d", JAM_MAX);
			k->jam = (int)v;
		} else if (strcmp(name, "stream") == 0) {
			key = 13;
			if (!cJSON_IsBool(it))
				return kc_fail(err, KC_BAD_SCHEDULE, w, "stream must be true or false");
			k->stream = cJSON_IsTrue(it);
		} else if (strcmp(name, "stages") == 0 && s) {
			key = 3;
			stages = it;
		} else if (gemm && strcmp(name, "mr") == 0) {
			key = 4;
			if (!int_knob(it, 0, 16, &v))
				return kc_fail(
				    err, KC_BAD_SCHEDULE, w,
				    "mr must be an integer from 0 (from the shape) to 16");
			k->mr = (int)v;
		} else if (gemm && strcmp(name, "nr_vecs") == 0) {
			key = 5;
			if (!int_knob(it, 0, 8, &v))
				return kc_fail(
				    err, KC_BAD_SCHEDULE, w,
				    "nr_vecs must be an integer from 0 (from the shape) to 8");
			k->nr_vecs = (int)v;
		} else if (gemm && (strcmp(name, "mc") == 0 || strcmp(name, "nc") == 0 ||
		                    strcmp(name, "kc") == 0)) {
			key = name[0] == 'm' ? 6 : name[0] == 'n' ? 7 : 8;
			if (!int_knob(it, 0, 8192, &v))
				return kc_fail(
				    err, KC_BAD_SCHEDULE, w,
				    "%s must be an integer from 0 (from the shape) to 8192", name);
			*(key == 6 ? &k->mc : key == 7 ? &k->nc : &k->kc) = v;
		} else if (gemm && strcmp(name, "fuse_epilogue") == 0) {
			key = 9;
			if (!cJSON_IsBool(it))
				return kc_fail(err, KC_BAD_SCHEDULE, w,
				               "fuse_epilogue must be true or false");
			k->fuse_epilogue = cJSON_IsTrue(it);
		}
		if (key < 0)
			return kc_fail(err, KC_BAD_SCHEDULE, w, "unknown knob '%.64s'", name);
		if (seen[key])
			return kc_fail(err, KC_BAD_SCHEDULE, w, "duplicate knob '%s'", name);
		seen[key] = true;
	}
	if (gemm && k->mr * k->nr_vecs > 32)
		return kc_fail(err, KC_BAD_SCHEDULE, w,
		               "mr * nr_vecs must be at most 32 (the accumulators)");
	if (gemm && k->vector_width * k->nr_vecs > 64)
		return kc_fail(err, KC_BAD_SCHEDULE, w,
		               "vector_width * nr_vecs must be at most 64 (the tile width)");
	if (!s)
		return KC_OK;
	/* the global knobs are final now: stages start from them */
	for (int i = 0; i < s->nstages; i++)
		s->stage[i] = *k;
	if (!stages)
		return KC_OK;
	if (!cJSON_IsArray(stages) || cJSON_GetArraySize(stages) > s->nstages)
		return kc_fail(err, KC_BAD_SCHEDULE, w,
		               "stages must be a list of at most %d knob objects (one per stage)",
		               s->nstages);
	int i = 0;
	cJSON_ArrayForEach(it, stages)
	{
		char ws[64];
		snprintf(ws, sizeof ws, "/knobs/stages/%d", i);
		KcStatus st = parse_knobs(it, &s->stage[i], NULL, gemm, ws, err);
		if (st)
			return st;
		i++;
	}
	return KC_OK;
}

KcStatus
kc_schedule_from_json(CompileCtx *c, const KcGraph *g, const KcTarget *t, const char *template_name,
                      const char *knobs, KcSchedule **out, KcErr *err)
{
	static const char *const known[] = {TEMPLATE_INJECTIVE, TEMPLATE_REDUCE, TEMPLATE_MATMUL};
	KcSchedule *s;
	cJSON *root = NULL;
	KcStatus st = KC_OK;

	*out = NULL;
	if (knobs && *knobs)
		root = cJSON_Parse(knobs);
	if (g) {
		s = kc_schedule_default(c, g, t);
		if (!template_name || strcmp(template_name, s->template_name) != 0) {
			st = kc_fail(
			    err, KC_BAD_SCHEDULE, "/template",
			    "schedule template '%.64s' does not fit this graph (it takes '%s')",
			    template_name ? template_name : "", s->template_name);
			goto done;
		}
	} else {
		/* no graph (a record for a workload this process has not seen):
		 * check the template name and the knob values only */
		size_t i = 0;
		while (i < 3 && (!template_name || strcmp(template_name, known[i]) != 0))
			i++;
		if (i == 3) {
			st = kc_fail(err, KC_BAD_SCHEDULE, "/template",
			             "unknown schedule template '%.64s'",
			             template_name ? template_name : "");
			goto done;
		}
		const cJSON *sg = cJSON_GetObjectItemCaseSensitive(root, "stages");
		s = ARENA_NEW(c->arena, KcSchedule);
		s->template_name = known[i];
		sched_default_knobs(t, &s->knobs);
		s->nstages = cJSON_IsArray(sg) ? cJSON_GetArraySize(sg) : 0;
		s->stage = ARENA_ARRAY(c->arena, KcKnobs, s->nstages + 1);
		for (int k = 0; k < s->nstages; k++)
			s->stage[k] = s->knobs;
	}
	if (knobs && *knobs) {
		bool gemm = strcmp(s->template_name, TEMPLATE_MATMUL) == 0;
		if ((st = parse_knobs(root, &s->knobs, s, gemm, "/knobs", err)) != KC_OK)
			goto done;
	}
	s->knobs_json = knobs_json(c->arena, s);
	*out = s;
done:
	cJSON_Delete(root);
	return st;
}

const char *
kc_schedule_template(const KcSchedule *s)
{
	return s->template_name;
}

const char *
kc_schedule_knobs_json(const KcSchedule *s)
{
	return s->knobs_json;
}

/* Each field is written as "name=value\n"; values cannot hold newlines
 * that would make two different tuples hash alike (hex, names, JSON). */
void
kc_kernel_id(const KcDigest *workload_key, const KcTarget *t, const KcSchedule *s,
             const char *build_id, KcDigest *out)
{
	KcSha256 *h = kc_sha256_begin();
	char hex[65];
	KcBuf b = {0};

	kc_digest_hex(workload_key, hex);
	kc_buf_printf(&b, "kcs-kernel-id-v1\nabi=%s\nworkload=%s\n", KC_CPU_ABI, hex);
	kc_buf_printf(&b, "target=%s\ntriple=%s\ncpu=%s\nfeatures=%s\n", t->name, t->triple, t->cpu,
	              t->features);
	kc_buf_printf(&b, "schedule=%s\ntemplate=%s\nknobs=%s\n", KC_SCHEDULE_FORMAT,
	              s->template_name, s->knobs_json);
	kc_buf_printf(&b, "build=%s\nllvm=%s\n", build_id ? build_id : "", kc_llvm_version());
	kc_sha256_update(h, b.data, b.len);
	kc_sha256_end(h, out);
	kc_buf_free(&b);
}

/* The loop split among tasks: the outermost, unless it is too short to
 * feed the threads (e.g. [2, 1000000]); then the first one that is long
 * enough, or the longest. Tasks of an inner parallel loop each run all of
 * the loops outside it. */
static int
par_loop(const LnStage *st)
{
	int best = 0;
	for (int l = 0; l < st->nloops; l++) {
		if (!ln_loop_spatial(st, l))
			continue;
		if (st->loops[l].extent >= MIN_PAR_EXTENT)
			return l;
		if (!ln_loop_spatial(st, best) || st->loops[l].extent > st->loops[best].extent)
			best = l;
	}
	return best;
}

/* requires: a verified loop nest from ln_lower. */
KcStatus
sched_apply(LoopNest *ln, const KcSchedule *s, KcErr *err)
{
	if (strcmp(s->template_name, TEMPLATE_INJECTIVE) != 0 &&
	    strcmp(s->template_name, TEMPLATE_REDUCE) != 0 &&
	    strcmp(s->template_name, TEMPLATE_MATMUL) != 0)
		return kc_fail(err, KC_BAD_SCHEDULE, "schedule", "unknown template '%.64s'",
		               s->template_name);
	if (s->nstages != ln->nstages)
		return kc_fail(err, KC_BAD_SCHEDULE, "schedule",
		               "schedule has %d stages, the graph lowers to %d", s->nstages,
		               ln->nstages);
	for (int i = 0; i < ln->nstages; i++) {
		LnStage *st = &ln->stages[i];
		const KcKnobs *k = i < s->nstages ? &s->stage[i] : &s->knobs;
		st->fuse_rows = k->fuse_rows;
		st->nontemporal = k->stream;
		if (st->nred > 0 && st->ninner > 0) { /* an outer-axis reduction */
			int64_t rows = st->loops[st->nloops - st->ninner - 1].extent;
			int jam = k->jam ? k->jam : JAM_AUTO;
			st->jam = jam < rows ? jam : (int)rows;
		}
		st->rfactor = k->rfactor;
		if (st->gemm) {
			gemm_block(ln, st, k);
			continue;
		}
		/* (not a stage right after a GEMM: its epilogue wants its loops) */
		if (i == 0 || !ln->stages[i - 1].gemm)
			sched_tile(ln, st, k->tile, k->vector_width);
		LnLoop *in = &st->loops[st->nloops - 1];
		int unroll = k->unroll ? k->unroll : st->nred > 0 && st->ninner == 0 ? 4 : 2;
		in->kind |= LNL_VECTORIZED;
		in->width = k->vector_width;
		if (unroll > 1) {
			in->kind |= LNL_UNROLLED;
			in->unroll = unroll;
		}
		st->loops[par_loop(st)].kind |= LNL_PARALLEL;
		st->grain = k->parallel_grain;
	}
	gemm_fuse_epilogues(ln, s);
	for (int i = 0; i < ln->nstages; i++)
		sched_stream(ln, &ln->stages[i]);
	/* after the epilogues: rfactor inserts stages (schedule indices no
	 * longer match ln's after it) */
	KcStatus r = sched_rfactor(ln, err);
	return r ? r : sched_fuse_rows(ln, err);
}
