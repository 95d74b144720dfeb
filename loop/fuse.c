/* fuse.c - schedule transforms that change the loop structure:
 * row fusion of stages, rfactor of full reductions, transpose tiling.
 * sched_apply calls them; each is a knob of the schedule record.
 *
 * Row fusion ("fuse_rows", compute-at of producers at the row loop):
 * consecutive stages that share their outer spatial loops (same extents)
 * and read what earlier stages of the group wrote only within the same
 * outer index run in ONE parallel region: per outer index (a row of a
 * softmax or layernorm), stage 1's inner loops, then stage 2's, ... A
 * workspace that only the group reads, one row block at a time, becomes
 * `local`: a block of the body function's stack (a register, once SROA
 * has run, for the row max / row sum) instead of a whole-tensor buffer.
 *
 * rfactor ("rfactor"): a reduction with too little spatial work to feed
 * the threads (a full reduction to a scalar; a few rows) becomes two
 * stages: partials over a FIXED partition of its first reduction loop into
 * T chunks (region 1, parallel over the chunks), then their combination in
 * chunk order (region 2). Determinism: T depends only on the schedule and
 * the shape, never on the thread count, every chunk is reduced by one task
 * with the same code, and the partials are combined serially in index
 * order, so the result is bitwise the same for any number of threads and
 * any task order (it may differ in the last bits from the unsplit order).
 *
 * Tiling ("tile"): an injective stage whose innermost loop writes
 * contiguously but reads with a large stride (a Transpose) runs in
 * tile x tile blocks over its last two loops, so both the reads and the
 * writes stay within a few cache lines and pages per block. A decision
 * only (LnStage.tile): emit_tile.c runs each block as vw x vw sub-blocks,
 * vw vector loads along the read's contiguous loop, a transpose in
 * registers and vw vector stores, with scalar code at the edges. A
 * permuted copy that keeps its innermost axis (no transpose within it)
 * runs its outer loops in its input's order instead (read_order).
 *
 * Work: the transforms run per stage (or per candidate group), so what
 * they allocate and clear is per stage too: expression marks are stamped
 * per listing, per-var and per-buffer tables are reset entry by entry
 * (LnScratch, the group's touched lists), and a buffer's readers outside a
 * group come from its first and last referencing stage, computed once.
 * Every walk counts its steps in KC_WORK_SCHEDULE.
 */
#include <string.h>

#include "loop.h"

#define MIN_PAR_EXTENT 64     /* as sched.c: a parallel loop feeds many threads */
#define RF_PARTIALS 64        /* auto rfactor: chunks of the reduction */
#define RF_MIN_WORK (1 << 16) /* auto rfactor: reduction elements, at least */
#define LOCAL_MAX_BYTES 16384 /* a local row block lives on the stack */
#define TILE_AUTO 256
#define TILE_MIN 4
#define READ_RUN_BYTES 32 /* read_order: the output's runs, at least */
#define MAX_GROUP 32      /* stages in one fused region, at most */

/* ---- index helpers -------------------------------------------------------- */

/* x with var from[i] replaced by to[i] (rebuilt through ln_idx_*). */
static LnIdx *
subst(LoopNest *ln, LnIdx *x, int n, const int *from, LnIdx *const *to)
{
	ln->work->n[KC_WORK_SCHEDULE]++;
	switch (x->kind) {
	case LNI_CONST: return x;
	case LNI_VAR:
		for (int i = 0; i < n; i++)
			if (x->var == from[i])
				return to[i];
		return x;
	case LNI_ADD:
		return ln_idx_add(ln, subst(ln, x->a, n, from, to), subst(ln, x->b, n, from, to));
	case LNI_MUL: return ln_idx_mul(ln, subst(ln, x->a, n, from, to), x->c);
	case LNI_DIV: return ln_idx_div(ln, subst(ln, x->a, n, from, to), x->c);
	case LNI_MOD: return ln_idx_mod(ln, subst(ln, x->a, n, from, to), x->c);
	case LNI_RSUB: return ln_idx_rsub(ln, x->c, subst(ln, x->a, n, from, to));
	}
	return x;
}

/* Does x mention a var with lvl[var] >= 0? */
static bool
mentions(const LoopNest *ln, const LnIdx *x, const int *lvl)
{
	ln->work->n[KC_WORK_SCHEDULE]++;
	switch (x->kind) {
	case LNI_CONST: return false;
	case LNI_VAR: return lvl[x->var] >= 0;
	case LNI_ADD: return mentions(ln, x->a, lvl) || mentions(ln, x->b, lvl);
	case LNI_MUL:
	case LNI_DIV:
	case LNI_MOD:
	case LNI_RSUB: return mentions(ln, x->a, lvl);
	}
	return false;
}

/* Splits k*x into sum(coef[l] * var at level l) + *inner, where the vars
 * with lvl[var] = l >= 0 are the "outer" ones and *inner mentions none of
 * them. False when an outer var sits under a div or mod. */
static bool
decomp(LoopNest *ln, const LnIdx *x, int64_t k, const int *lvl, int64_t *coef, LnIdx **inner)
{
	ln->work->n[KC_WORK_SCHEDULE]++;
	switch (x->kind) {
	case LNI_CONST: *inner = ln_idx_add(ln, *inner, ln_idx_const(ln, k * x->c)); return true;
	case LNI_VAR:
		if (lvl[x->var] >= 0) {
			coef[lvl[x->var]] += k;
			return true;
		}
		break;
	case LNI_ADD:
		return decomp(ln, x->a, k, lvl, coef, inner) &&
		       decomp(ln, x->b, k, lvl, coef, inner);
	case LNI_MUL: return decomp(ln, x->a, k * x->c, lvl, coef, inner);
	case LNI_DIV:
	case LNI_MOD:
	case LNI_RSUB:
		if (mentions(ln, x, lvl))
			return false;
		break;
	}
	*inner = ln_idx_add(ln, *inner, ln_idx_mul(ln, (LnIdx *)x, k));
	return true;
}

/* Scratch for listing a stage's LOAD and INDEX nodes: marks stamped per
 * listing, grown (refs_fit) when the pass has made nodes since, so a pass
 * allocates it about once. */
typedef struct Refs {
	LoopNest *ln;
	int *mark;
	int stamp, cap;
	LnExpr **out;
} Refs;

/* Room for every expr id of the nest; a fresh block is zeroed and stamps
 * only grow, so no mark in it matches a later stamp. */
static void
refs_fit(Refs *r)
{
	LoopNest *ln = r->ln;
	if (ln->nexprs < r->cap)
		return;
	int c = r->cap ? r->cap : 64;
	while (c <= ln->nexprs)
		c *= 2;
	r->mark = ARENA_ARRAY(ln->arena, int, c);
	r->out = ARENA_ARRAY(ln->arena, LnExpr *, c);
	r->cap = c;
}

static Refs *
refs_new(LoopNest *ln)
{
	Refs *r = ARENA_NEW(ln->arena, Refs);
	r->ln = ln;
	refs_fit(r);
	return r;
}

struct LnScratch {
	Refs *refs;
	int *lvl; /* per var, -1 between uses (each user resets what it set) */
	int lvlcap;
};

LnScratch *
ln_scratch_new(LoopNest *ln)
{
	LnScratch *x = ARENA_NEW(ln->arena, LnScratch);
	x->refs = refs_new(ln);
	return x;
}

/* The per-var level map, every entry -1, with room for every var. */
static int *
scratch_lvl(LoopNest *ln, LnScratch *x)
{
	if (ln->nvars >= x->lvlcap) {
		int c = x->lvlcap ? x->lvlcap : 64;
		while (c <= ln->nvars)
			c *= 2;
		x->lvl = ARENA_ARRAY(ln->arena, int, c);
		for (int v = 0; v < c; v++)
			x->lvl[v] = -1;
		x->lvlcap = c;
	}
	return x->lvl;
}

static void
collect(Refs *r, LnExpr *e, int *n)
{
	r->ln->work->n[KC_WORK_SCHEDULE]++;
	if (r->mark[e->id] == r->stamp)
		return;
	r->mark[e->id] = r->stamp;
	if (e->kind == LNE_LOAD || e->kind == LNE_INDEX)
		r->out[(*n)++] = e;
	if (e->kind == LNE_LOAD && e->dyn)
		collect(r, e->dyn, n);
	if (e->kind == LNE_OP)
		for (int i = 0; i < e->nargs; i++)
			collect(r, e->args[i], n);
}

/* Every LOAD and INDEX node of st, once each; valid until the next call. */
static LnExpr **
stage_refs(Refs *r, const LnStage *st, int *n)
{
	refs_fit(r);
	r->stamp++;
	*n = 0;
	for (int i = 0; i < st->nstores; i++)
		collect(r, st->stores[i].value, n);
	return r->out;
}

/* ---- transpose tiling ------------------------------------------------------- */

/* The tile of a transposed stage: it writes contiguously along its
 * innermost loop and reads an input contiguously along the one outside it
 * (strided along the innermost); 0 when it is not one. */
static int
tile_of(LoopNest *ln, LnStage *st, Refs *R, int *lvl, int tile)
{
	int L = st->nloops, nr;
	bool wr = false, rd = false;
	int64_t ep = st->loops[L - 2].extent, eq = st->loops[L - 1].extent;

	lvl[st->loops[L - 2].var] = 0;
	lvl[st->loops[L - 1].var] = 1;
	for (int i = 0; i < st->nstores; i++) {
		int64_t c[2] = {0, 0};
		LnIdx *in = ln_idx_const(ln, 0);
		if (!decomp(ln, st->stores[i].idx, 1, lvl, c, &in))
			return 0;
		wr |= c[1] == 1;
	}
	LnExpr **refs = stage_refs(R, st, &nr);
	for (int i = 0; i < nr; i++) {
		int64_t c[2] = {0, 0};
		LnIdx *in = ln_idx_const(ln, 0);
		if (!decomp(ln, refs[i]->idx, 1, lvl, c, &in))
			return 0;
		rd |= refs[i]->kind == LNE_LOAD && c[0] == 1 && c[1] >= 2 * TILE_MIN;
	}
	if (!wr || !rd)
		return 0;
	/* the largest power of two <= tile that fits both extents; partial
	 * blocks at the ends are the emitter's (emit_tile.c) */
	int T = tile ? tile : TILE_AUTO;
	while (T > TILE_MIN && (T > ep || T > eq))
		T /= 2;
	return T <= ep && T <= eq ? T : 0;
}

/* A permuted copy: the stage reads one input of its own size (a Transpose
 * that keeps the last axis, [0,2,1,3]) in another order than it writes,
 * both contiguously along the innermost loop, in runs of at least
 * READ_RUN_BYTES. Its outer loops are put in the input's order (strides
 * descending), so the input is read sequentially and the output written
 * in runs: reads are what stall a copy (4096 rows of 64 floats: 0.60 of
 * the triad in the output's order, 0.86 in the input's, in C). */
static void
read_order(LoopNest *ln, LnStage *st, Refs *R, int *lvl, int vector_width)
{
	int L = st->nloops, nr, pick = -1;
	int64_t pts = 1, c[LN_MAX_LOOPS], cs[LN_MAX_LOOPS];

	for (int l = 0; l < L; l++) {
		lvl[st->loops[l].var] = l;
		pts *= st->loops[l].extent;
	}
	for (int i = 0; i < st->nstores; i++) {
		LnIdx *in = ln_idx_const(ln, 0);
		memset(c, 0, sizeof c);
		if (!decomp(ln, st->stores[i].idx, 1, lvl, c, &in) || c[L - 1] != 1)
			return;
	}
	LnExpr **refs = stage_refs(R, st, &nr);
	for (int i = 0; i < nr; i++) {
		const LnExpr *e = refs[i];
		if (e->kind != LNE_LOAD || e->dyn || ln->bufs[e->buf].numel != pts)
			continue;
		LnIdx *in = ln_idx_const(ln, 0);
		memset(c, 0, sizeof c);
		if (pick >= 0 || !decomp(ln, e->idx, 1, lvl, c, &in) || c[L - 1] != 1)
			return; /* two inputs of the stage's size, or not a copy */
		pick = i;
		memcpy(cs, c, sizeof c);
	}
	if (pick < 0 ||
	    st->loops[L - 1].extent * kc_dtype_info[refs[pick]->dtype].bytes < READ_RUN_BYTES)
		return;
	/* insertion sort of the outer loops by the input's stride, descending */
	bool moved = false;
	for (int l = 1; l < L - 1; l++)
		for (int k = l; k > 0 && cs[k - 1] < cs[k]; k--) {
			LnLoop t = st->loops[k];
			int64_t ct = cs[k];
			st->loops[k] = st->loops[k - 1];
			cs[k] = cs[k - 1];
			st->loops[k - 1] = t;
			cs[k - 1] = ct;
			moved = true;
		}
	/* a pure permuted copy into a large output, vectors of whole lines */
	const LnStore *s = &st->stores[0];
	int64_t bytes = kc_dtype_info[ln->bufs[s->buf].dtype].bytes;
	st->stream = st->nontemporal && moved && st->nstores == 1 && s->value == refs[pick] &&
	             ln->bufs[s->buf].dtype == refs[pick]->dtype && vector_width * bytes >= 64 &&
	             ln->bufs[s->buf].numel * bytes >= LN_STREAM_MIN_BYTES;
}

/* lvl back to all -1: only st's loop vars were set */
static void
lvl_clear(const LnStage *st, int *lvl)
{
	for (int l = 0; l < st->nloops; l++)
		lvl[st->loops[l].var] = -1;
}

void
sched_tile(LoopNest *ln, LnScratch *x, LnStage *st, int tile, int vector_width)
{
	if (tile == 1 || st->nred > 0 || st->nloops < 2 || st->gemm || st->fused_into >= 0)
		return;
	int *lvl = scratch_lvl(ln, x);
	st->tile = tile_of(ln, st, x->refs, lvl, tile);
	lvl_clear(st, lvl);
	if (st->tile == 0 && st->nloops >= 3) {
		/* (read_order permutes the loops: their vars stay the same set) */
		read_order(ln, st, x->refs, lvl, vector_width);
		lvl_clear(st, lvl);
	}
}

/* ---- streaming stores ------------------------------------------------------ */

/* Non-temporal stores bypass the caches: a line the kernel overwrites
 * entirely is not first read for ownership, a third of the traffic of a
 * store stream (a layernorm of 4096 x 768 in C: 9.6-20 GB/s with cached
 * stores, 17-36 GB/s with streaming ones). Worth it only for an output
 * too large to be read back from the caches, so from LN_STREAM_MIN_BYTES,
 * and for a stage bound by memory: none with an OPF_COSTLY op.
 * A store qualifies when it writes a kernel output contiguously along the
 * vectorised innermost loop (vectors of 32 or 64 bytes, so whole lines
 * once aligned), the loop covers a few lines, and every load of the same
 * buffer in the stage reads the element being stored (an in-place update:
 * emit_stream delays a vector's stores until its values are computed).
 * One store at most, the first that qualifies: the loop aligns its vectors
 * to that output's lines, and another output may sit at another offset. */
/* Does e use an OPF_COSTLY op (r's marks at its current stamp)? */
static bool
costly(Refs *r, const LnExpr *e)
{
	r->ln->work->n[KC_WORK_SCHEDULE]++;
	if (r->mark[e->id] == r->stamp)
		return false;
	r->mark[e->id] = r->stamp;
	if (e->kind == LNE_LOAD && e->dyn)
		return costly(r, e->dyn);
	if (e->kind != LNE_OP)
		return false;
	if (ir_op_info[e->op].flags & OPF_COSTLY)
		return true;
	for (int i = 0; i < e->nargs; i++)
		if (costly(r, e->args[i]))
			return true;
	return false;
}

static void stream_store(LoopNest *ln, LnScratch *x, LnStage *st, int *lvl);

void
sched_stream(LoopNest *ln, LnScratch *x, LnStage *st)
{
	const LnLoop *in = &st->loops[st->nloops - 1];

	st->ntmask = 0;
	if (!st->nontemporal || st->nred > 0 || st->gemm || st->fused_into >= 0 || st->tile > 0 ||
	    st->stream || !(in->kind & LNL_VECTORIZED) || in->width < 2)
		return;
	/* a transcendental per element makes the stage compute-bound: its
	 * stores are far below the bandwidth, and streaming them measured
	 * slower (GeLU over 16M floats: 8.7 ms streamed, 7.6 ms cached) */
	Refs *R = x->refs;
	refs_fit(R);
	R->stamp++; /* one walk over the stage's stores */
	for (int i = 0; i < st->nstores; i++)
		if (costly(R, st->stores[i].value))
			return;
	int *lvl = scratch_lvl(ln, x);
	lvl[in->var] = 0;
	stream_store(ln, x, st, lvl);
	lvl[in->var] = -1;
}

/* sched_stream's choice of the store, lvl set for the innermost loop. */
static void
stream_store(LoopNest *ln, LnScratch *x, LnStage *st, int *lvl)
{
	int L = st->nloops, nr;
	const LnLoop *in = &st->loops[L - 1];
	LnExpr **refs = stage_refs(x->refs, st, &nr);
	for (int i = 0; i < st->nstores && i < 32; i++) {
		const LnStore *s = &st->stores[i];
		const LnBuf *b = &ln->bufs[s->buf];
		int64_t bytes = kc_dtype_info[b->dtype].bytes, vbytes = in->width * bytes;
		int64_t line = bytes < 64 ? 64 / bytes : 1, c = 0;
		LnIdx *rest = ln_idx_const(ln, 0);
		if (b->arg < 0 || b->local || b->numel * bytes < LN_STREAM_MIN_BYTES ||
		    (vbytes != 32 && vbytes != 64) ||
		    in->extent < 4 * (line > in->width ? line : in->width) ||
		    !decomp(ln, s->idx, 1, lvl, &c, &rest) || c != 1)
			continue;
		bool ok = true;
		ln->work->n[KC_WORK_SCHEDULE] += nr;
		for (int k = 0; k < nr && ok; k++)
			ok = refs[k]->kind != LNE_LOAD || refs[k]->buf != s->buf ||
			     (!refs[k]->dyn && ln_idx_equal(refs[k]->idx, s->idx));
		if (ok) { /* one store: the loop aligns to its output's lines */
			st->ntmask = 1u << i;
			return;
		}
	}
}

/* ---- rfactor ------------------------------------------------------------------ */

/* Chunks for stage st (0: leave it alone). */
static int
rf_chunks(const LnStage *st)
{
	int rb = ln_red_begin(st);
	int64_t S = 1, R = 1, E, target;

	if (st->nred == 0 || st->ninner > 0 || st->nstores != 1 || st->rfactor == 1 ||
	    st->nloops + 1 > LN_MAX_LOOPS || st->fuse_count > 1 || st->fused || st->gemm ||
	    st->fused_into >= 0)
		return 0;
	for (int l = 0; l < st->nloops; l++)
		*(l < rb ? &S : &R) *= st->loops[l].extent;
	if (st->rfactor == 0 && (S >= MIN_PAR_EXTENT || R < RF_MIN_WORK))
		return 0;
	target = st->rfactor ? st->rfactor : RF_PARTIALS;
	E = st->loops[rb].extent;
	for (int64_t d = target < E ? target : E; d >= 2; d--)
		if (E % d == 0)
			return (int)d;
	return 0;
}

/* Stage st -> partials (*a, in place) and their combination (*b). */
static void
rf_split(LoopNest *ln, Refs *R, LnStage *a, LnStage *b, int T)
{
	int rb = ln_red_begin(a), nr;
	LnLoop old = a->loops[rb];
	int64_t C = old.extent / T, S = 1;
	LnStore *sto = &a->stores[0];
	KcDtype at = a->acc; /* the partials keep the unsplit stage's precision */

	for (int l = 0; l < rb; l++)
		S *= a->loops[l].extent;
	*b = *a;
	b->name = arena_printf(ln->arena, "%s.rf", a->name);

	/* region 1: for sp, t (parallel), j in chunk t, other reduction loops */
	int t = ln_var_new(ln, T), j = ln_var_new(ln, C);
	LnIdx *to = ln_idx_add(ln, ln_idx_mul(ln, ln_idx_var(ln, t), C), ln_idx_var(ln, j));
	int from = old.var;
	LnExpr **refs = stage_refs(R, a, &nr);
	for (int i = 0; i < nr; i++)
		refs[i]->idx = subst(ln, refs[i]->idx, 1, &from, &to);
	memmove(&a->loops[rb + 1], &a->loops[rb], sizeof(LnLoop) * (size_t)(a->nloops - rb));
	a->nloops++;
	for (int l = 0; l < a->nloops; l++)
		a->loops[l].kind &= ~(unsigned)LNL_PARALLEL;
	a->loops[rb] = (LnLoop){t, T, LNL_PARALLEL, 0, 0};
	a->loops[rb + 1] = old;
	a->loops[rb + 1].var = j;
	a->loops[rb + 1].extent = C;
	int part = ln_workspace_new(ln, arena_printf(ln->arena, "%s:partials", a->name), at, S * T);
	LnIdx *orig_idx = sto->idx;
	LnStore *ns = ARENA_ARRAY(ln->arena, LnStore, 1);
	ns->buf = part;
	ns->idx = ln_idx_add(ln, ln_idx_mul(ln, orig_idx, T), ln_idx_var(ln, t));
	ns->value = ln_expr_coerce(ln, sto->value, at);
	a->stores = ns;

	/* region 2: for sp (fresh vars), t2 in 0..T reduce: out op= partial */
	int from2[LN_MAX_LOOPS];
	LnIdx *to2[LN_MAX_LOOPS];
	b->nloops = rb + 1;
	for (int l = 0; l < rb; l++) {
		int w = ln_var_new(ln, b->loops[l].extent);
		from2[l] = b->loops[l].var;
		to2[l] = ln_idx_var(ln, w);
		b->loops[l].var = w;
		b->loops[l].kind = l == 0 ? LNL_PARALLEL : LNL_SERIAL;
	}
	int t2 = ln_var_new(ln, T);
	b->loops[rb] = (LnLoop){t2, T, LNL_SERIAL, 0, 0};
	b->nred = 1;
	b->ninner = 0;
	b->accbuf = -1;
	LnIdx *oi = subst(ln, orig_idx, rb, from2, to2);
	LnStore *bs = ARENA_ARRAY(ln->arena, LnStore, 1);
	bs->buf = sto->buf;
	bs->idx = oi;
	bs->value =
	    ln_expr_load(ln, part, ln_idx_add(ln, ln_idx_mul(ln, oi, T), ln_idx_var(ln, t2)));
	b->stores = bs;
}

KcStatus
sched_rfactor(LoopNest *ln, KcErr *err)
{
	int n = 0;
	(void)err;
	for (int s = 0; s < ln->nstages; s++)
		n += rf_chunks(&ln->stages[s]) > 0;
	if (n == 0)
		return KC_OK;
	LnStage *ns = ARENA_ARRAY(ln->arena, LnStage, ln->nstages + n + 1);
	int *at = ARENA_ARRAY(ln->arena, int, ln->nstages + 1); /* old -> new index */
	Refs *R = refs_new(ln);
	int k = 0;
	for (int s = 0; s < ln->nstages; s++) {
		int T = rf_chunks(&ln->stages[s]);
		at[s] = k;
		ns[k] = ln->stages[s];
		if (T > 0) {
			rf_split(ln, R, &ns[k], &ns[k + 1], T);
			k++;
		}
		k++;
	}
	for (int s = 0; s < k; s++) { /* GEMM epilogue links are stage indices */
		if (ns[s].fused_into >= 0)
			ns[s].fused_into = at[ns[s].fused_into];
		if (ns[s].gemm && ns[s].gemm->epi >= 0)
			ns[s].gemm->epi = at[ns[s].gemm->epi];
	}
	ln->stages = ns;
	ln->nstages = k;
	return KC_OK;
}

/* ---- row fusion ------------------------------------------------------------------- */

/* Can st join a group at all? */
static bool
fusible(const LoopNest *ln, const LnStage *st)
{
	if (!st->fuse_rows || st->ninner > 0 || st->nstores < 1 || st->gemm || st->fused_into >= 0)
		return false;
	for (int l = 0; l < st->nloops; l++)
		if (st->loops[l].extent == 0)
			return false;
	for (int i = 0; i < st->nstores; i++)
		if (ln->bufs[st->stores[i].buf].inplace)
			return false;
	return true;
}

/* Leading spatial loops of st (all loops of an injective stage). */
static int
lead_spatial(const LnStage *st)
{
	return st->nred > 0 ? ln_red_begin(st) : st->nloops;
}

/* The row layout of a store: each outer index o writes within
 * [sum c[l] o_l, + R) with R = c[P-1] and c row-major over the shared
 * extents. False when it is not one. */
static bool
row_layout(LoopNest *ln, const LnStage *st, const LnIdx *idx, const int *lvl, int P, int64_t *c,
           LnIdx **inner, int64_t *R)
{
	memset(c, 0, sizeof(int64_t) * (size_t)P);
	*inner = ln_idx_const(ln, 0);
	if (!decomp(ln, idx, 1, lvl, c, inner) || c[P - 1] < 1)
		return false;
	for (int l = 0; l + 1 < P; l++)
		if (c[l] != c[l + 1] * st->loops[l + 1].extent)
			return false;
	*R = c[P - 1];
	return ln_idx_max(ln, *inner) < *R;
}

typedef struct Group {
	int a, n, P;
	int *lvl;      /* var -> shared level, for the group's shared loop vars */
	int *writer;   /* buffer -> group stage writing it, -1 */
	int *nwrites;  /* buffer -> stages writing it (whole nest) */
	bool *read;    /* buffer -> read by a group stage so far */
	int64_t *rowR; /* buffer -> its row block (writer's R), 0 = no row layout */
	LnIdx **winner;
	Refs *refs;
	/* what group_ok set, to reset before the next candidate: the buffers
	 * whose entries it changed (once each), the vars it gave a level */
	bool *touched;
	int *tbufs, ntbufs;
	int *tvars, ntvars;
	/* per buffer, the first and last stage that loads or stores it */
	int *first, *last;
	bool *mklocal; /* buffer -> made local by commit (reset by it) */
} Group;

static void
touch(Group *G, int b)
{
	if (!G->touched[b]) {
		G->touched[b] = true;
		G->tbufs[G->ntbufs++] = b;
	}
}

/* The tables back to their resting state (what group_ok set, undone). */
static void
group_clear(Group *G)
{
	for (int i = 0; i < G->ntbufs; i++) {
		int b = G->tbufs[i];
		G->writer[b] = -1;
		G->read[b] = false;
		G->rowR[b] = 0;
		G->touched[b] = false;
	}
	for (int i = 0; i < G->ntvars; i++)
		G->lvl[G->tvars[i]] = -1;
	G->ntbufs = G->ntvars = 0;
}

/* Is the candidate group stages[a .. a+n) with P shared loops legal? */
static bool
group_ok(LoopNest *ln, Group *G)
{
	int64_t c[LN_MAX_LOOPS];
	group_clear(G);
	for (int k = G->a; k < G->a + G->n; k++)
		for (int l = 0; l < G->P; l++) {
			G->lvl[ln->stages[k].loops[l].var] = l;
			G->tvars[G->ntvars++] = ln->stages[k].loops[l].var;
		}
	for (int k = G->a; k < G->a + G->n; k++) {
		LnStage *st = &ln->stages[k];
		int nr;
		LnExpr **refs = stage_refs(G->refs, st, &nr);
		for (int i = 0; i < nr; i++) {
			LnExpr *e = refs[i];
			if (e->kind != LNE_LOAD)
				continue;
			touch(G, e->buf);
			G->read[e->buf] = true;
			if (G->writer[e->buf] < 0)
				continue; /* written before the group (or never) */
			LnIdx *in = NULL;
			memset(c, 0, sizeof c);
			in = ln_idx_const(ln, 0);
			if (G->nwrites[e->buf] != 1 || e->dyn || G->rowR[e->buf] == 0 ||
			    !decomp(ln, e->idx, 1, G->lvl, c, &in))
				return false;
			const LnStage *w = &ln->stages[G->writer[e->buf]];
			int64_t cw[LN_MAX_LOOPS], R;
			LnIdx *win;
			ln->work->n[KC_WORK_SCHEDULE] += w->nstores;
			for (int s = 0; s < w->nstores; s++)
				if (w->stores[s].buf == e->buf)
					row_layout(ln, w, w->stores[s].idx, G->lvl, G->P, cw, &win,
					           &R);
			for (int l = 0; l < G->P; l++)
				if (c[l] != cw[l])
					return false;
			if (ln_idx_max(ln, in) >= G->rowR[e->buf])
				return false;
		}
		for (int i = 0; i < st->nstores; i++) {
			int b = st->stores[i].buf;
			int64_t R;
			LnIdx *win;
			if (G->writer[b] >= 0 || G->read[b])
				return false; /* written twice, or read before written */
			touch(G, b);
			G->writer[b] = k;
			if (row_layout(ln, st, st->stores[i].idx, G->lvl, G->P, c, &win, &R)) {
				G->rowR[b] = R;
				G->winner[b] = win;
			}
		}
	}
	return true;
}

/* The shared loop to run in parallel: the first long enough one, or -1. */
static int
shared_par(const LnStage *lead, int P)
{
	for (int l = 0; l < P; l++)
		if (lead->loops[l].extent >= MIN_PAR_EXTENT)
			return l;
	return -1;
}

/* Commits group G: annotations, then local row buffers. */
static void
commit(LoopNest *ln, Group *G)
{
	LnStage *lead = &ln->stages[G->a];
	int par = shared_par(lead, G->P);

	lead->fuse_count = G->n;
	for (int k = G->a; k < G->a + G->n; k++) {
		LnStage *st = &ln->stages[k];
		st->fuse_outer = G->P;
		st->fused = k > G->a;
		for (int l = 0; l < st->nloops; l++) {
			if (l < G->P)
				st->loops[l].kind = LNL_SERIAL;
			else
				st->loops[l].kind &= ~(unsigned)LNL_PARALLEL;
		}
	}
	lead->loops[par].kind = LNL_PARALLEL;
	/* workspaces written and read only inside the group, a row at a time:
	 * among the buffers the group touches, those no stage outside it
	 * loads or stores */
	group_ok(ln, G); /* refresh the tables for the final group */
	int nlocal = 0;
	for (int i = 0; i < G->ntbufs; i++) {
		int b = G->tbufs[i];
		LnBuf *buf = &ln->bufs[b];
		bool outside = G->first[b] < G->a || G->last[b] >= G->a + G->n;
		if (buf->arg >= 0 || buf->local || G->writer[b] < 0 || !G->read[b] || outside ||
		    G->rowR[b] == 0 ||
		    G->rowR[b] * kc_dtype_info[buf->dtype].bytes > LOCAL_MAX_BYTES)
			continue;
		buf->local = true;
		buf->numel = G->rowR[b];
		G->mklocal[b] = true;
		nlocal++;
	}
	if (nlocal == 0)
		return;
	/* their loads read the row block, their stores write it */
	for (int k = G->a; k < G->a + G->n; k++) {
		LnStage *st = &ln->stages[k];
		int nr;
		LnExpr **refs = stage_refs(G->refs, st, &nr);
		for (int i = 0; i < nr; i++) {
			int64_t c[LN_MAX_LOOPS] = {0};
			LnIdx *in = ln_idx_const(ln, 0);
			if (refs[i]->kind != LNE_LOAD || !G->mklocal[refs[i]->buf])
				continue;
			decomp(ln, refs[i]->idx, 1, G->lvl, c, &in);
			refs[i]->idx = in;
		}
		for (int i = 0; i < st->nstores; i++)
			if (G->mklocal[st->stores[i].buf])
				st->stores[i].idx = G->winner[st->stores[i].buf];
	}
	for (int i = 0; i < G->ntbufs; i++)
		G->mklocal[G->tbufs[i]] = false;
}

KcStatus
sched_fuse_rows(LoopNest *ln, KcErr *err)
{
	Group G;
	(void)err;
	G.lvl = ARENA_ARRAY(ln->arena, int, ln->nvars + 1);
	G.writer = ARENA_ARRAY(ln->arena, int, ln->nbufs + 1);
	G.nwrites = ARENA_ARRAY(ln->arena, int, ln->nbufs + 1);
	G.read = ARENA_ARRAY(ln->arena, bool, ln->nbufs + 1);
	G.rowR = ARENA_ARRAY(ln->arena, int64_t, ln->nbufs + 1);
	G.winner = ARENA_ARRAY(ln->arena, LnIdx *, ln->nbufs + 1);
	G.refs = refs_new(ln);
	G.touched = ARENA_ARRAY(ln->arena, bool, ln->nbufs + 1);
	G.tbufs = ARENA_ARRAY(ln->arena, int, ln->nbufs + 1);
	G.tvars = ARENA_ARRAY(ln->arena, int, MAX_GROUP *LN_MAX_LOOPS + 1);
	G.ntbufs = G.ntvars = 0;
	G.first = ARENA_ARRAY(ln->arena, int, ln->nbufs + 1);
	G.last = ARENA_ARRAY(ln->arena, int, ln->nbufs + 1);
	G.mklocal = ARENA_ARRAY(ln->arena, bool, ln->nbufs + 1);
	for (int v = 0; v < ln->nvars; v++)
		G.lvl[v] = -1;
	for (int b = 0; b < ln->nbufs; b++) {
		G.writer[b] = -1;
		G.first[b] = ln->nstages;
		G.last[b] = -1;
	}
	/* which stages load or store each buffer: fusion changes indices,
	 * never buffers or the stage list */
	for (int s = 0; s < ln->nstages; s++) {
		const LnStage *st = &ln->stages[s];
		int nr;
		LnExpr **refs = stage_refs(G.refs, st, &nr);
		for (int i = 0; i < nr + st->nstores; i++) {
			int b = i >= nr                     ? st->stores[i - nr].buf
			        : refs[i]->kind == LNE_LOAD ? refs[i]->buf
			                                    : -1;
			if (b < 0)
				continue;
			G.first[b] = G.first[b] < s ? G.first[b] : s;
			G.last[b] = s;
		}
		for (int i = 0; i < st->nstores; i++)
			G.nwrites[st->stores[i].buf]++;
	}
	for (int a = 0; a < ln->nstages;) {
		const LnStage *lead = &ln->stages[a];
		int P = lead_spatial(lead), n = 1;
		if (!fusible(ln, lead)) {
			a++;
			continue;
		}
		while (a + n < ln->nstages && n < MAX_GROUP) {
			const LnStage *st = &ln->stages[a + n];
			int q = 0, lim = lead_spatial(st) < P ? lead_spatial(st) : P;
			if (!fusible(ln, st))
				break;
			while (q < lim && st->loops[q].extent == lead->loops[q].extent)
				q++;
			if (q < 1 || shared_par(lead, q) < 0)
				break;
			G.a = a;
			G.n = n + 1;
			G.P = q;
			if (!group_ok(ln, &G))
				break;
			n++;
			P = q;
		}
		if (n > 1) {
			G.a = a;
			G.n = n;
			G.P = P;
			commit(ln, &G);
		}
		a += n;
	}
	return KC_OK;
}
