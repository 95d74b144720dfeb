/* lower_gemm.c - the GEMM stage of the "matmul" template: when a MatMul
 * gets one, its blocking, its fused epilogue, and its verification.
 *
 * A float32, float16 or bfloat16 MatMul/BatchMatMul with M >= 2 lowers to
 * one GEMM stage (LnGemm in loop/loop.h) instead of the generic reduction
 * stage over K. Operands are read in place through strides, so
 * transpose_a/b and batch broadcasting cost nothing; a half A is converted
 * a micro-panel at a time into a float32 panel on the stack (a_pack) and
 * reused by every column tile, a half B is converted as it is packed, and
 * a half result is a cast of the float32 tile, fused as the epilogue. No
 * whole-matrix float32 copy: its workspace would be page-faulted in on
 * every call. An operand that is computed (a Cast of a weight) or
 * broadcast over the batch in a way one batch stride cannot express is
 * first copied into a workspace by an injective stage.
 *
 * Accuracy sets kc for long K. The micro-kernel accumulates in float32
 * within a K-block and the blocks add up in float64, so an element's error
 * grows like eps sqrt(kc K) |terms|. Up to K = GEMM_MAX_K kc is chosen for
 * speed; beyond it kc is capped at GEMM_LONG_K_TERMS / K (an explicit kc
 * too), which keeps the worst element of uniform inputs well inside the
 * conformance tolerance up to GEMM_LONG_K_MAX. Above that the cap would
 * fall below 4 and the MatMul keeps the float64 reduction stage (a
 * float64-accumulating micro-kernel would lift this).
 * M == 1 (the GEMV of a dense layer) keeps the reduction stage: it streams
 * B once with a vectorised dot product per column, which is what a
 * memory-bound GEMV wants; packing B would double its traffic.
 * docs/performance-compiler.md has the measurements behind these choices.
 *
 * Blocking (knobs, 0 = chosen here from the shape):
 *   kc  K per block: all of K up to 512, else equal blocks of <= 384;
 *   nc  columns per unit: the packed B block kc x nc stays <= 256 KiB (L2);
 *   mc  rows per unit: <= MC_MAX; then units are split, columns first (see
 *       gemm_block), until there are at least 8, so 2..8 threads get
 *       balanced shares, and the blocks are evened out. Rows are split
 *       last because each row block packs all of its B columns again.
 * All of it is a function of (shape, knobs) only, so a schedule replays
 * exactly.
 *
 * Epilogue fusion: a GEMM stage s whose result C is a workspace read by
 * exactly one later stage, s + 1, an injective stage whose loops cover
 * C's shape row-major and whose every load of C is at the stage's own
 * store index (C[i] feeds out[i]: bias, GeLU, cast ...), runs that stage on
 * each finished micro-tile; C is then never stored when K fits one block.
 */
#include <string.h>

#include "loop.h"

#define MAX_BLOCK_FLOATS (INT64_C(1) << 16) /* packed B block: 256 KiB */
#define GEMM_MAX_K LN_F32_ACC_MAX
#define GEMM_LONG_K_TERMS (INT64_C(32) * 12288) /* kc * K, at most, past GEMM_MAX_K */
#define GEMM_LONG_K_MAX (GEMM_LONG_K_TERMS / 4)
#define MIN_UNITS 8
#define MC_MAX 1024

static int64_t
batch_of(const IrValue *v)
{
	int64_t b = 1;
	for (int d = 0; d < v->rank - 2; d++)
		b *= v->shape[d];
	return b;
}

/* The dtypes a GEMM stage takes: float32, and the halves, which it
 * converts to float32 exactly as it reads them (a product of two halves is exact in float32, so
 * a float16 MatMul sums the same products as its reduction stage did, in
 * float32 as there; 128 x 768 x 768 in float16: 5.5 ms as a reduction). */
static bool
gemm_dtype(KcDtype t)
{
	return t == KC_DT_FLOAT32 || t == KC_DT_FLOAT16 || t == KC_DT_BFLOAT16;
}

GemmOperand
gemm_operand(const IrValue *u, const IrValue *v, const bool *mat)
{
	bool direct =
	    (u->kind == IRV_INPUT || (u->kind == IRV_OP && mat[u->id])) && gemm_dtype(u->dtype);
	int64_t ub = batch_of(u), vb = batch_of(v);
	int off = v->rank - u->rank;
	bool same = ub == vb && off >= 0;

	for (int d = 0; same && d < u->rank - 2; d++)
		same = u->shape[d] == v->shape[d + off];
	if (ub == 1)
		return direct ? GEMM_DIRECT_BC : GEMM_COPY;
	if (same)
		return direct ? GEMM_DIRECT : GEMM_COPY;
	return GEMM_COPY_BC;
}

bool
gemm_applies(const IrNode *nd, const bool *mat, int *ncopies)
{
	const IrValue *a = nd->in[0], *b = nd->in[1], *v = nd->out[0];

	*ncopies = 0;
	if (!gemm_dtype(a->dtype) || !gemm_dtype(b->dtype) || !gemm_dtype(v->dtype))
		return false;
	if (v->rank < 2 || a->rank < 2 || b->rank < 2)
		return false;
	int64_t K = nd->attrs.trans_a ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
	if (v->shape[v->rank - 2] < 2 || v->shape[v->rank - 1] < 1 || K < 1 || v->numel < 1)
		return false;
	if (K > GEMM_LONG_K_MAX) /* float32 blocks would lose too much: see above */
		return false;
	*ncopies = v->dtype != KC_DT_FLOAT32; /* the cast of C */
	for (int i = 0; i < 2; i++) {
		GemmOperand k = gemm_operand(nd->in[i], v, mat);
		*ncopies += k == GEMM_COPY || k == GEMM_COPY_BC;
	}
	return true;
}

bool
conv_gemm_applies(const IrNode *nd, const bool *mat)
{
	const IrValue *x = nd->in[0], *w = nd->in[1], *v = nd->out[0];
	const IrAttrs *a = &nd->attrs;

	if (nd->op != IR_OP_CONV2D || x->rank != 4 || w->rank != 4 || v->rank != 4)
		return false;
	if (!gemm_dtype(x->dtype) || !gemm_dtype(w->dtype) || !gemm_dtype(v->dtype))
		return false;
	for (int i = 0; i < 2; i++) {
		const IrValue *u = nd->in[i];
		if (!(u->kind == IRV_INPUT || (u->kind == IRV_OP && mat[u->id])))
			return false;
	}
	int64_t KH = w->shape[a->nhwc ? 1 : 2], KW = w->shape[a->nhwc ? 2 : 3];
	if (KH != 1 || KW != 1 || a->stride[0] != 1 || a->stride[1] != 1 || a->groups != 1)
		return false;
	for (int i = 0; i < 4; i++)
		if (a->pad[i] != 0)
			return false;
	int64_t C = x->shape[a->nhwc ? 3 : 1];
	int64_t M = a->nhwc ? x->shape[0] * x->shape[1] * x->shape[2] : w->shape[0];
	return M >= 2 && C >= 1 && C <= GEMM_LONG_K_MAX && v->numel >= 1;
}

static int64_t
cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static int64_t
round_up(int64_t a, int64_t m)
{
	return cdiv(a, m) * m;
}

int64_t
gemm_stack_bytes(const LnGemm *G)
{
	return (G->kc * G->nc + (int64_t)G->mr * G->nr + (G->a_pack ? G->mr * G->kc : 0)) * 4 +
	       128 + (G->a_pack ? 64 : 0);
}

/* The micro-tile (mr rows x nv vectors): the knobs', or, where they are 0,
 * the candidate that fits the register file (mr * nv accumulators + nv B
 * vectors + a broadcast) with the least padded work, ceil(M/mr) mr x
 * ceil(N/nr) nr; the first candidate wins ties (measured: 8 x 3 is as fast
 * as 6 x 4 on Zen 4 and compiles in half the time). */
static void
pick_tile(const LnGemm *G, const KcKnobs *k, int *mr, int *nr)
{
	static const int c32[][2] = {{8, 3}, {6, 4}, {12, 2}, {4, 6}, {16, 1}};
	static const int c16[][2] = {{6, 2}, {4, 3}, {3, 4}, {12, 1}};
	const int(*c)[2] = k->vregs >= 32 ? c32 : c16;
	int n =
	    k->vregs >= 32 ? (int)(sizeof c32 / sizeof c32[0]) : (int)(sizeof c16 / sizeof c16[0]);
	int vw = k->vector_width, best = -1;
	double bcost = 0;

	/* A is read in place, mr rows at a time: rows a multiple of 4 KiB apart
	 * fall into one L1 set (8 ways on the x86 cores we know), so more than
	 * 6 of them evict each other and the B panel (1024 x 1024: 2x slower) */
	bool alias = !G->a_pack && G->a_ks == 1 && (G->a_ms * 4) % 4096 == 0;
	for (int i = 0; i < n; i++) {
		int m = c[i][0], v = c[i][1];
		if ((k->mr && m != k->mr) || (k->nr_vecs && v != k->nr_vecs) || v * vw > 64)
			continue;
		if (alias && !k->mr && m > 6)
			continue;
		double work = (double)round_up(G->M, m) * (double)round_up(G->N, (int64_t)v * vw);
		double cost = work;
		if (best < 0 || cost < bcost) {
			best = i;
			bcost = cost;
		}
	}
	if (best >= 0) {
		*mr = c[best][0];
		*nr = c[best][1] * vw;
		return;
	}
	/* an explicit tile outside the table (validated by the parser) */
	*mr = k->mr ? k->mr : 4;
	int v = k->nr_vecs ? k->nr_vecs : 1;
	while (v > 1 && (v * vw > 64 || *mr * v > 32))
		v--;
	*nr = v * vw;
}

void
gemm_block(LoopNest *ln, LnStage *st, const KcKnobs *k)
{
	LnGemm *G = st->gemm;
	int64_t M = G->M, N = G->N, K = G->K;
	/* the K-block's float32 sums: a long K gets short blocks (see above) */
	int64_t kc_max = K > GEMM_MAX_K ? GEMM_LONG_K_TERMS / K : K;

	G->vw = k->vector_width;
	pick_tile(G, k, &G->mr, &G->nr);
	G->kc = k->kc > 0 ? (k->kc < K ? k->kc : K) : K <= 512 ? K : cdiv(K, cdiv(K, 384));
	if (G->kc > kc_max)
		G->kc = kc_max;
	if (k->nc > 0) {
		G->nc = round_up(k->nc, G->nr);
	} else {
		int64_t cap = MAX_BLOCK_FLOATS / G->kc / G->nr * G->nr;
		G->nc = cap < G->nr ? G->nr : cap;
	}
	if (G->nc > round_up(N, G->nr))
		G->nc = round_up(N, G->nr);
	if (G->nc * G->kc > 2 * MAX_BLOCK_FLOATS) /* an explicit nc: bound the stack */
		G->nc = (2 * MAX_BLOCK_FLOATS / G->kc / G->nr) * G->nr > G->nr
		            ? (2 * MAX_BLOCK_FLOATS / G->kc / G->nr) * G->nr
		            : G->nr;
	G->mc = k->mc > 0 ? round_up(k->mc, G->mr) : round_up(M < MC_MAX ? M : MC_MAX, G->mr);
	if (G->mc > round_up(M, G->mr))
		G->mc = round_up(M, G->mr);
	if (k->mc == 0 && k->nc == 0) {
		/* enough units to share among threads, then even blocks. Columns
		 * split first: every row block packs all of B again, while
		 * splitting the columns re-reads nothing (the micro-kernel reads
		 * A's block once per nr columns either way). 128 x 768 x 3072
		 * split its rows (mc 66) and ran 8-9 ms; its columns (nc 64),
		 * 7.0-7.5 ms. */
		while (G->batch * cdiv(M, G->mc) * cdiv(N, G->nc) < MIN_UNITS) {
			bool can_n = G->nc > G->nr, can_m = G->mc > 2 * G->mr;
			if (!can_n && !can_m)
				break;
			if (can_n)
				G->nc = round_up(G->nc / 2, G->nr);
			else
				G->mc = round_up(G->mc / 2, G->mr);
		}
		G->mc = round_up(cdiv(M, cdiv(M, G->mc)), G->mr);
		G->nc = round_up(cdiv(N, cdiv(N, G->nc)), G->nr);
	}
	G->units_m = cdiv(M, G->mc);
	G->units_n = cdiv(N, G->nc);
	int64_t units = G->batch * G->units_m * G->units_n;
	st->loops[0].extent = units;
	ln->var_extent[st->loops[0].var] = units;
	st->loops[0].kind = LNL_PARALLEL;
	st->grain = 1;
	G->blocked = true;
	ln->bufs[G->acc].numel = G->kc >= K ? 0 : units * G->mc * G->nc;
}

/* A walk's marks: mark[id] == stamp for the nodes it has seen, a fresh
 * stamp per walk (never a cleared array per stage), and the work counter. */
typedef struct Seen {
	int *mark;
	int stamp;
	int64_t *steps;
} Seen;

static bool
seen_once(Seen *w, const LnExpr *e)
{
	(*w->steps)++;
	if (w->mark[e->id] == w->stamp)
		return true;
	w->mark[e->id] = w->stamp;
	return false;
}

/* Does e read buffer c anywhere other than at index at? */
static bool
bad_c_load(const LnExpr *e, int c, const LnIdx *at, Seen *w)
{
	if (seen_once(w, e))
		return false;
	switch (e->kind) {
	case LNE_CONST:
	case LNE_INDEX: return false;
	case LNE_LOAD:
		if (e->buf == c && (e->dyn || !ln_idx_equal(e->idx, at)))
			return true;
		return e->dyn && bad_c_load(e->dyn, c, at, w);
	case LNE_OP:
		for (int i = 0; i < e->nargs; i++)
			if (bad_c_load(e->args[i], c, at, w))
				return true;
		return false;
	}
	return true;
}

/* last[b] = s for every buffer b that stage s loads under e. */
static void
note_loads(const LnExpr *e, int s, int *last, Seen *w)
{
	if (seen_once(w, e))
		return;
	if (e->kind == LNE_LOAD)
		last[e->buf] = s;
	if (e->kind == LNE_LOAD && e->dyn)
		note_loads(e->dyn, s, last, w);
	if (e->kind == LNE_OP)
		for (int i = 0; i < e->nargs; i++)
			note_loads(e->args[i], s, last, w);
}

/* Per buffer, the last stage whose stores load or write it (-1: none):
 * one walk over the nest, where asking each GEMM about every later stage
 * would be quadratic. */
static int *
last_readers(const LoopNest *ln, Seen *w)
{
	int *last = ARENA_ARRAY(ln->arena, int, ln->nbufs + 1);
	for (int b = 0; b < ln->nbufs; b++)
		last[b] = -1;
	for (int s = 0; s < ln->nstages; s++) {
		const LnStage *st = &ln->stages[s];
		w->stamp++;
		for (int i = 0; i < st->nstores; i++) {
			note_loads(st->stores[i].value, s, last, w);
			last[st->stores[i].buf] = s;
		}
	}
	return last;
}

/* The terms of a sum. */
static int
terms(const LnIdx *x, const LnIdx **out, int n, int cap)
{
	if (x->kind == LNI_ADD) {
		n = terms(x->a, out, n, cap);
		return n < 0 ? n : terms(x->b, out, n, cap);
	}
	if (n >= cap)
		return -1;
	out[n] = x;
	return n + 1;
}

/* Is x == sum over loops l of var_l * (product of the extents inside l)? */
static bool
row_major(const LnStage *ep, const LnIdx *x)
{
	const LnIdx *t[LN_MAX_LOOPS + 1];
	int n = terms(x, t, 0, LN_MAX_LOOPS + 1), want = 0;
	int64_t stride = 1;

	for (int l = ep->nloops - 1; l >= 0; l--) {
		int v = ep->loops[l].var;
		bool found = ep->loops[l].extent == 1; /* a 1-trip var folds to 0 */
		for (int i = 0; i < n && !found; i++)
			found = (stride == 1 && t[i]->kind == LNI_VAR && t[i]->var == v) ||
			        (t[i]->kind == LNI_MUL && t[i]->c == stride &&
			         t[i]->a->kind == LNI_VAR && t[i]->a->var == v);
		if (!found)
			return false;
		want += ep->loops[l].extent > 1;
		stride *= ep->loops[l].extent;
	}
	return n == want || (want == 0 && n == 1 && t[0]->kind == LNI_CONST && t[0]->c == 0);
}

void
gemm_fuse_epilogues(LoopNest *ln, const KcSchedule *s)
{
	Seen w = {ARENA_ARRAY(ln->arena, int, ln->nexprs + 1), 0, &ln->work->n[KC_WORK_SCHEDULE]};
	int *last = NULL; /* last_readers, at the first GEMM that needs it */

	for (int i = 0; i + 1 < ln->nstages; i++) {
		LnStage *st = &ln->stages[i], *ep = &ln->stages[i + 1];
		LnGemm *G = st->gemm;
		if (!G || !s->stage[i].fuse_epilogue || ln->bufs[G->c].arg >= 0)
			continue;
		if (ep->gemm || ep->nred > 0 || ep->nstores < 1 || ep->fused_into >= 0)
			continue;
		int64_t total = 1;
		for (int l = 0; l < ep->nloops; l++)
			total *= ep->loops[l].extent;
		if (total != G->batch * G->M * G->N)
			continue;
		bool ok = true;
		for (int j = 0; ok && j < ep->nstores; j++) {
			w.stamp++;
			ok = ln_idx_equal(ep->stores[j].idx, ep->stores[0].idx) &&
			     ln->bufs[ep->stores[j].buf].numel == total &&
			     !bad_c_load(ep->stores[j].value, G->c, ep->stores[0].idx, &w);
		}
		/* the store index must be the row-major position of the loops */
		ok = ok && row_major(ep, ep->stores[0].idx);
		/* and no later stage reads or writes C */
		if (ok && !last)
			last = last_readers(ln, &w);
		ok = ok && last[G->c] <= i + 1;
		if (!ok)
			continue;
		G->epi = i + 1;
		ep->fused_into = i;
		/* the epilogue's loops run inside the GEMM: plain, serial */
		for (int l = 0; l < ep->nloops; l++)
			ep->loops[l].kind = LNL_SERIAL;
	}
}

KcStatus
gemm_verify(const LoopNest *ln, const LnStage *st, const char *pass, KcErr *err)
{
	const LnGemm *G = st->gemm;
	int bufs[3] = {G->a, G->b, G->c};
	int64_t need[3] = {
	    (G->batch - 1) * G->a_bs + (G->M - 1) * G->a_ms + (G->K - 1) * G->a_ks + 1,
	    (G->batch - 1) * G->b_bs + (G->K - 1) * G->b_ks + (G->N - 1) * G->b_ns + 1,
	    G->batch * G->M * G->N};

	for (int i = 0; i < 3; i++) {
		if (bufs[i] < 0 || bufs[i] >= ln->nbufs || ln->bufs[bufs[i]].numel < need[i])
			return kc_fail(err, KC_CODEGEN, pass, "%s: GEMM operand %d out of bounds",
			               st->name, i);
		/* float32; A and B may be halves (A with a_pack, converted on the
		 * stack; B converted as it is packed); C is float32 */
		KcDtype dt = ln->bufs[bufs[i]].dtype;
		bool half = dt == KC_DT_FLOAT16 || dt == KC_DT_BFLOAT16;
		if (i == 0 ? (G->a_pack ? !half : dt != KC_DT_FLOAT32)
		           : !(dt == KC_DT_FLOAT32 || (i == 1 && half)))
			return kc_fail(err, KC_CODEGEN, pass, "%s: GEMM operand %d has dtype %s",
			               st->name, i, kc_dtype_info[dt].name);
	}
	if (G->a_bs < 0 || G->a_ms < 0 || G->a_ks < 0 || G->b_bs < 0 || G->b_ks < 0 || G->b_ns < 0)
		return kc_fail(err, KC_CODEGEN, pass, "%s: negative GEMM stride", st->name);
	if (G->blocked && G->kc < G->K &&
	    (G->acc < 0 || G->acc >= ln->nbufs || ln->bufs[G->acc].arg >= 0 ||
	     ln->bufs[G->acc].dtype != KC_DT_FLOAT64 ||
	     ln->bufs[G->acc].numel < st->loops[0].extent * G->mc * G->nc))
		return kc_fail(err, KC_CODEGEN, pass, "%s: bad GEMM accumulator", st->name);
	if (!(ln->bufs[G->c].is_output || ln->bufs[G->c].arg < 0))
		return kc_fail(err, KC_CODEGEN, pass, "%s: GEMM writes an input", st->name);
	if (G->blocked && (G->mr < 1 || G->mr > 16 || G->vw < 1 || G->nr < G->vw ||
	                   G->nr % G->vw != 0 || (int64_t)G->mr * (G->nr / G->vw) > 32 ||
	                   G->kc < 1 || G->mc < G->mr || G->mc % G->mr != 0 || G->nc < G->nr ||
	                   G->nc % G->nr != 0 || gemm_stack_bytes(G) > (INT64_C(1) << 20)))
		return kc_fail(err, KC_CODEGEN, pass, "%s: bad GEMM blocking", st->name);
	if (st->nloops != 1 || st->nstores != 0 || st->nred != 0 ||
	    st->loops[0].extent != G->batch * G->units_m * G->units_n)
		return kc_fail(err, KC_CODEGEN, pass, "%s: malformed GEMM stage", st->name);
	return KC_OK;
}
