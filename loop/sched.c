/* sched.c - schedules: a template plus knobs, a record's knobs turned into
 * a KcSchedule, and a schedule applied to a loop nest.
 *
 * A schedule is data, so a tuner can search it and a record can be stored,
 * shared and replayed: the same graph, target and schedule give the same
 * kernel, which is why kernel_id hashes the canonical knobs. The template
 * comes from classifying the graph (templates.def): "matmul" for a MatMul
 * (GEMM stages: packing, then a reduction over K blocked by the GEMM
 * knobs), "reduce" for a reduction (spatial loops outside, reduction loops
 * inside; the parallel loop a spatial one), else "injective". What each
 * knob means, accepts and defaults to is its knobs.def row (knobs.c parses
 * and prints from it); the rules between knobs are the templates', in
 * template_check. "stages" overrides the global knobs per stage, in the
 * order ln_lower makes stages (materialised values in graph order, then one
 * per distinct output shape, then in-place writes). A record that does not
 * fit is refused, never clamped: it is applied exactly or not at all. sched_apply runs tile and
 * the per-stage annotations, the GEMM epilogues and non-temporal stores,
 * then rfactor (which adds stages), then row fusion over the result.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "loop.h"

#define JAM_AUTO 8        /* rows per step of an outer-axis reduction */
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
	KC_ASSERT(t->vector_width > 0 && t->vector_regs > 0);
	knobs_default(out);
	out->vector_width = t->vector_width;
	/* not a knob: the GEMM micro-tile (mr, nr_vecs 0 = from the shape) is
	 * chosen among the tiles that fit these registers (lower_gemm.c) */
	out->vregs = t->vector_regs;
}

KcSchedule *
kc_schedule_default(CompileCtx *c, const KcGraph *g, const KcTarget *t)
{
	KcSchedule *s = ARENA_NEW(c->arena, KcSchedule);

	int nreduce = 0, nmatmul = 0;
	s->nstages = ln_count_stages(c->arena, g, &nreduce, &nmatmul);
	s->tpl = nmatmul   ? KC_TEMPLATE_MATMUL
	         : nreduce ? KC_TEMPLATE_REDUCE
	                   : KC_TEMPLATE_INJECTIVE;
	s->template_name = kc_template_name(s->tpl);
	sched_default_knobs(t, &s->knobs);
	s->stage = ARENA_ARRAY(c->arena, KcKnobs, s->nstages + 1);
	for (int i = 0; i < s->nstages; i++)
		s->stage[i] = s->knobs;
	s->knobs_json = knobs_canonical(c->arena, s);
	return s;
}

/* The rules between the knobs of each template, once knobs_parse has
 * checked each knob alone. */
static KcStatus
template_check(KcTemplate tpl, const KcKnobs *k, const char *w, KcErr *err)
{
	switch (tpl) {
	case KC_TEMPLATE_INJECTIVE:
	case KC_TEMPLATE_REDUCE: return KC_OK;
	case KC_TEMPLATE_MATMUL:
		/* the micro-tile's accumulators live in registers */
		if (k->mr * k->nr_vecs > 32)
			return kc_fail(err, KC_BAD_SCHEDULE, w,
			               "mr * nr_vecs must be at most 32 (the accumulators)");
		if (k->vector_width * k->nr_vecs > 64)
			return kc_fail(
			    err, KC_BAD_SCHEDULE, w,
			    "vector_width * nr_vecs must be at most 64 (the tile width)");
		return KC_OK;
	case KC_TEMPLATE_COUNT: break;
	}
	return kc_fail(err, KC_BAD_SCHEDULE, "/template", "unknown template");
}

/* Knobs: {<knobs.def members>, "stages": [{<knobs.def members>}, ...]}
 * "stages" may be shorter than the stage list; each entry starts from the
 * final global knobs. */
static KcStatus
parse_schedule_knobs(const cJSON *o, KcSchedule *s, KcErr *err)
{
	const cJSON *stages = NULL, *it;
	KcStatus st = knobs_parse(o, s->tpl, "/knobs", &s->knobs, &stages, err);
	if (st == KC_OK)
		st = template_check(s->tpl, &s->knobs, "/knobs", err);
	if (st != KC_OK)
		return st;
	for (int i = 0; i < s->nstages; i++)
		s->stage[i] = s->knobs;
	if (!stages)
		return KC_OK;
	if (!cJSON_IsArray(stages) || cJSON_GetArraySize(stages) > s->nstages)
		return kc_fail(err, KC_BAD_SCHEDULE, "/knobs/stages",
		               "stages must be a list of at most %d knob objects (one per stage)",
		               s->nstages);
	int i = 0;
	cJSON_ArrayForEach(it, stages)
	{
		char w[32];
		snprintf(w, sizeof w, "/knobs/stages/%d", i);
		if ((st = knobs_parse(it, s->tpl, w, &s->stage[i], NULL, err)) != KC_OK ||
		    (st = template_check(s->tpl, &s->stage[i], w, err)) != KC_OK)
			return st;
		i++;
	}
	return KC_OK;
}

KcStatus
sched_from_cjson(CompileCtx *c, const KcGraph *g, const KcTarget *t, const char *template_name,
                 const cJSON *knobs, KcSchedule **out, KcErr *err)
{
	KcSchedule *s;
	KcStatus st;

	*out = NULL;
	if (g) {
		s = kc_schedule_default(c, g, t);
		if (!template_name || strcmp(template_name, s->template_name) != 0)
			return kc_fail(
			    err, KC_BAD_SCHEDULE, "/template",
			    "schedule template '%.64s' does not fit this graph (it takes '%s')",
			    template_name ? template_name : "", s->template_name);
	} else {
		/* no graph (a record for a workload this process has not seen):
		 * check the template name and the knob values only */
		int tpl = 0;
		while (tpl < KC_TEMPLATE_COUNT &&
		       (!template_name || strcmp(template_name, kc_template_name(tpl)) != 0))
			tpl++;
		if (tpl == KC_TEMPLATE_COUNT)
			return kc_fail(err, KC_BAD_SCHEDULE, "/template",
			               "unknown schedule template '%.64s'",
			               template_name ? template_name : "");
		const cJSON *sg = cJSON_GetObjectItemCaseSensitive(knobs, "stages");
		s = ARENA_NEW(c->arena, KcSchedule);
		s->tpl = (KcTemplate)tpl;
		s->template_name = kc_template_name(s->tpl);
		sched_default_knobs(t, &s->knobs);
		s->nstages = cJSON_IsArray(sg) ? cJSON_GetArraySize(sg) : 0;
		s->stage = ARENA_ARRAY(c->arena, KcKnobs, s->nstages + 1);
		for (int k = 0; k < s->nstages; k++)
			s->stage[k] = s->knobs;
	}
	if (knobs && (st = parse_schedule_knobs(knobs, s, err)) != KC_OK)
		return st;
	s->knobs_json = knobs_canonical(c->arena, s);
	*out = s;
	return KC_OK;
}

KcStatus
kc_schedule_from_json(CompileCtx *c, const KcGraph *g, const KcTarget *t, const char *template_name,
                      const char *knobs, KcSchedule **out, KcErr *err)
{
	cJSON *root = NULL;
	if (knobs && *knobs) {
		root = cJSON_Parse(knobs);
		if (!root) /* not JSON: refused as "not an object", after the template */
			root = cJSON_CreateNull();
	}
	KcStatus st = sched_from_cjson(c, g, t, template_name, root, out, err);
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
	if ((unsigned)s->tpl >= KC_TEMPLATE_COUNT)
		return kc_fail(err, KC_BAD_SCHEDULE, "schedule", "unknown template %d",
		               (int)s->tpl);
	if (s->nstages != ln->nstages)
		return kc_fail(err, KC_BAD_SCHEDULE, "schedule",
		               "schedule has %d stages, the graph lowers to %d", s->nstages,
		               ln->nstages);
	LnScratch *x = ln_scratch_new(ln);
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
			sched_tile(ln, x, st, k->tile, k->vector_width);
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
		sched_stream(ln, x, &ln->stages[i]);
	/* after the epilogues: rfactor inserts stages (schedule indices no
	 * longer match ln's after it) */
	KcStatus r = sched_rfactor(ln, err);
	ln->work->n[KC_WORK_SCHEDULE_STAGES] = ln->nstages;
	if (r == KC_OK)
		r = kc_work_check(ln->work, KC_WORK_SCHEDULE_STAGES, err);
	if (r == KC_OK)
		r = sched_fuse_rows(ln, err);
	return r ? r : kc_work_check(ln->work, KC_WORK_SCHEDULE, err);
}
