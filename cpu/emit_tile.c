/* emit_tile.c - the last two loops of a tiled stage (LnStage.tile, set by
 * fuse.c sched_tile) as LLVM IR: a transpose, and any elementwise ops a
 * stage applies to transposed values, at memory bandwidth. Also the
 * innermost loop of a large permuted copy (LnStage.stream, emit_rows):
 * per row, scalar up to the output's first line-aligned element, then
 * whole-line vectors stored non-temporally, then the scalar rest.
 *
 * The loops are p (outer) and q (inner). The stage writes along q and
 * reads some input along p: a "transposed load" is a load whose index
 * moves by 1 along p and by cq >= 2 along q. Run as it stands, the q loop
 * would read one element per cache line, through gathers. Instead, over
 * [pa, pe) x [qa, qe), the part of the loops' ranges that whole vw x vw
 * sub-blocks cover:
 *
 *   for q0 in [qa, qe) step T:                       tiles (T = st->tile)
 *     for p0 in [pa, pe) step T:
 *       for each vw x vw sub-block (p, q) of the tile, q outer (vw input
 *       rows at a time, read along p):
 *         per transposed load x: vw vector loads, one per q + i, each vw
 *           elements of x along p (contiguous); em_transpose: vector j
 *           then holds x at p + j over the vw values of q
 *         a pure move (every store writes a transposed load's value, both
 *           contiguous along q): vw vector stores, one per output row;
 *         otherwise: the transposed vectors go to a vw x vw block on the
 *           stack, and the stage's stores run over the sub-block, one row
 *           at a time, in a vw-wide loop the loop vectorizer turns into
 *           one vector operation per row, the transposed loads reading
 *           the block and every other load its buffer: the ops apply to
 *           the transposed vectors. A stage whose vw-element store rows
 *           are shorter than a line (a float32 transpose cast to
 *           float16) takes qn groups of vw columns per sub-block (vw x
 *           qn vw, qn 2 or 4), so each output row it writes is a whole
 *           cache line
 *   the rest (rows pe.. of the range, columns qe.. of the rows before) in
 *   scalar loops over the stage's stores
 *
 * Non-temporal stores: when a store's rows are whole cache lines (qn vw
 * elements make 64 bytes, rows a multiple of 64 bytes apart) and its
 * output is large (LN_STREAM_MIN_BYTES), its vectors are stored
 * non-temporally:
 * they bypass the caches, with no read for ownership of lines the stores
 * overwrite entirely (a third of a cached transpose's traffic). Such a
 * store needs line-aligned addresses: qa then moves to the first q whose
 * address is (the ABI only promises element alignment), the columns
 * before it a scalar strip; a stage that is not a pure move computes its
 * output into a vw x vw block on the stack, stored a row vector at a time.
 * The body fences once before it returns (E->fence), so the stores are
 * ordered before the region ends.
 *
 * vw is the stage's vector width, halved while a vector would hold more
 * bytes than vw float32s or 64 (float64 transposes 8 x 8 with AVX-512)
 * and at most T; 1 (vector_width 1) leaves scalar tiles. Elements move as
 * integers of their size, so a pure move copies bits whatever the dtype.
 * The parallel loop, when it is p or q, tiles its task's range. Every
 * loop here is emitted in its final shape and marked neither to be
 * vectorised nor unrolled, except the sub-block's row loop, which is
 * vectorised at width vw (qn vector iterations, interleaved) and kept a
 * loop until the vectorizer runs (em_vector_md).
 */
#include <llvm-c/DebugInfo.h>
#include <string.h>

#include "emit.h"

/* transposed loads per stage (more read their buffer), the bytes of a
 * cache line */
#define MAX_TLOADS 8
#define LINE 64

/* What emit_tile does with a stage. */
typedef struct Plan {
	const LnStage *st;
	int vp, vq; /* the vars of loops p and q */
	int vw;     /* sub-block rows (along p) and vector width, 1: none */
	int qn;     /* sub-block columns (along q): qn x vw (see plan) */
	int nt;     /* transposed loads */
	const LnExpr *tl[MAX_TLOADS];
	int64_t cq[MAX_TLOADS];       /* their stride along q */
	LLVMTypeRef et[MAX_TLOADS];   /* their element, as an integer */
	LLVMValueRef blk[MAX_TLOADS]; /* their vw x qn vw stack block (not a move) */
	bool move;                    /* every store writes a transposed load */
	int64_t *scp;                 /* per store: its stride along p */
	int nts;                      /* the non-temporal store, -1: none */
	LLVMTypeRef ntet;             /* its element, as an integer */
	LLVMValueRef ntblk;           /* not a move: its vw x qn vw stack block */
} Plan;

static LLVMValueRef
k64(Em *E, int64_t v)
{
	return LLVMConstInt(E->i64, (unsigned long long)v, 1);
}

static LLVMValueRef
add(Em *E, LLVMValueRef a, LLVMValueRef b)
{
	LLVMValueRef r = LLVMBuildAdd(E->b, a, b, "");
	if (!LLVMIsConstant(r)) {
		LLVMSetNUW(r, 1);
		LLVMSetNSW(r, 1);
	}
	return r;
}

static LLVMValueRef
smin(Em *E, LLVMValueRef a, LLVMValueRef b)
{
	return LLVMBuildSelect(E->b, LLVMBuildICmp(E->b, LLVMIntSLT, a, b, ""), a, b, "");
}

static LLVMValueRef
gep(Em *E, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef i)
{
	return LLVMBuildInBoundsGEP2(E->b, t, p, &i, 1, "");
}

/* Does x mention var v? */
static bool
uses(const LnIdx *x, int v)
{
	switch (x->kind) {
	case LNI_CONST: return false;
	case LNI_VAR: return x->var == v;
	case LNI_ADD: return uses(x->a, v) || uses(x->b, v);
	case LNI_MUL:
	case LNI_DIV:
	case LNI_MOD:
	case LNI_RSUB: return uses(x->a, v);
	}
	return false;
}

/* Adds k times the coefficient of var v in x to *c; false when v sits
 * under a div, mod or rsub (x is not affine in v). */
static bool
coef(const LnIdx *x, int v, int64_t k, int64_t *c)
{
	switch (x->kind) {
	case LNI_CONST: return true;
	case LNI_VAR:
		if (x->var == v)
			*c += k;
		return true;
	case LNI_ADD: return coef(x->a, v, k, c) && coef(x->b, v, k, c);
	case LNI_MUL: return coef(x->a, v, k * x->c, c);
	case LNI_DIV:
	case LNI_MOD:
	case LNI_RSUB: return !uses(x->a, v);
	}
	return false;
}

/* The strides of x along p and q; false when x is not affine in them. */
static bool
strides(const Plan *P, const LnIdx *x, int64_t *cp, int64_t *cq)
{
	*cp = *cq = 0;
	return coef(x, P->vp, 1, cp) && coef(x, P->vq, 1, cq);
}

static int
bytes_of(Em *E, int buf)
{
	return kc_dtype_info[E->ln->bufs[buf].dtype].bytes;
}

static LLVMTypeRef
int_of(Em *E, int buf)
{
	return LLVMIntTypeInContext(E->ctx, (unsigned)bytes_of(E, buf) * 8);
}

/* Lists the transposed loads under e (E->mark at the plan's mark_gen). */
static void
find_tloads(Em *E, Plan *P, const LnExpr *e)
{
	int64_t cp, cq;
	E->ln->work->n[KC_WORK_EMIT]++;
	if (E->mark[e->id] == E->mark_gen)
		return;
	E->mark[e->id] = E->mark_gen;
	if (e->kind == LNE_LOAD && e->dyn)
		find_tloads(E, P, e->dyn);
	if (e->kind == LNE_OP)
		for (int i = 0; i < e->nargs; i++)
			find_tloads(E, P, e->args[i]);
	if (e->kind != LNE_LOAD || e->dyn || P->nt == MAX_TLOADS || !strides(P, e->idx, &cp, &cq) ||
	    cp != 1 || cq < 2)
		return;
	P->tl[P->nt] = e;
	P->cq[P->nt] = cq;
	P->et[P->nt] = int_of(E, e->buf);
	P->nt++;
}

static int
tload_of(const Plan *P, const LnExpr *e)
{
	for (int k = 0; k < P->nt; k++)
		if (P->tl[k] == e)
			return k;
	return -1;
}

static void
plan(Em *E, const LnStage *st, Plan *P)
{
	const LoopNest *ln = E->ln;
	int L = st->nloops;
	const LnLoop *in = &st->loops[L - 1];

	memset(P, 0, sizeof *P);
	P->st = st;
	P->vp = st->loops[L - 2].var;
	P->vq = in->var;
	E->mark_gen++;
	for (int i = 0; i < st->nstores; i++)
		find_tloads(E, P, st->stores[i].value);
	/* vw float32s' bytes per vector (64 at most: a register), at most a
	 * tile */
	int vw = (in->kind & LNL_VECTORIZED) && in->width > 1 ? in->width : 1;
	int vbytes = vw * 4 < LINE ? vw * 4 : LINE;
	for (int k = 0; k < P->nt; k++)
		while (vw > 1 && vw * bytes_of(E, P->tl[k]->buf) > vbytes)
			vw /= 2;
	while (vw > st->tile)
		vw /= 2;
	P->vw = P->nt > 0 && vw > 1 ? vw : 1;
	/* a pure move: each store's value is a transposed load of its dtype,
	 * written contiguously along q */
	P->move = P->vw > 1;
	P->nts = -1;
	P->qn = 1;
	P->scp = ARENA_ARRAY(ln->arena, int64_t, st->nstores + 1);
	bool *rows = ARENA_ARRAY(ln->arena, bool, st->nstores + 1);
	int narrow = 0; /* the narrowest contiguous store's element bytes */
	for (int i = 0; i < st->nstores; i++) {
		const LnStore *s = &st->stores[i];
		int64_t cq;
		int bytes = bytes_of(E, s->buf);
		rows[i] = strides(P, s->idx, &P->scp[i], &cq) && cq == 1;
		P->move = P->move && rows[i] && tload_of(P, s->value) >= 0 &&
		          ln->bufs[s->buf].dtype == ln->bufs[s->value->buf].dtype;
		if (rows[i] && (!narrow || bytes < narrow))
			narrow = bytes;
	}
	/* A stage that computes (not a move) and whose narrowest contiguous
	 * store writes less than a line per sub-block row (vw elements of a
	 * float32 transpose cast to float16 are 32 bytes; of int8, 16) would
	 * write each output line in pieces, from different sub-blocks: its
	 * sub-blocks take qn groups of vw columns instead, so that a row is
	 * a whole line (cached: written at once; large: streamed), when the
	 * tile holds whole groups. Float32 4096^2 to float16: 10.7-12 ms in
	 * half lines, 8 ms in whole streamed ones. */
	if (P->vw > 1 && !P->move)
		while (narrow && P->vw * P->qn * narrow < LINE && P->qn < 4 &&
		       st->tile % (2 * P->qn * P->vw) == 0)
			P->qn *= 2;
	/* the first store of whole lines into a large output is non-temporal */
	for (int i = 0; i < st->nstores && st->nontemporal && P->vw > 1; i++) {
		const LnStore *s = &st->stores[i];
		int64_t bytes = bytes_of(E, s->buf);
		if (rows[i] && P->vw * P->qn * bytes == LINE && P->scp[i] * bytes % LINE == 0 &&
		    ln->bufs[s->buf].numel * bytes >= LN_STREAM_MIN_BYTES) {
			P->nts = i;
			break;
		}
	}
	if (P->nts >= 0)
		P->ntet = int_of(E, st->stores[P->nts].buf);
}

/* The stage's stores at the current vars; with off set, the transposed
 * loads read their stack block at off instead of their buffer, and the
 * non-temporal store writes its block. */
static bool
stores(Em *E, const Plan *P, LLVMValueRef off)
{
	const LnStage *st = P->st;
	em_memo_reset(E);
	for (int k = 0; off && k < P->nt; k++) {
		const LnExpr *e = P->tl[k];
		em_memo_set(
		    E, e,
		    em_load_at(E, E->ln->bufs[e->buf].dtype, gep(E, P->et[k], P->blk[k], off)));
	}
	for (int i = 0; i < st->nstores; i++) {
		const LnStore *s = &st->stores[i];
		LLVMValueRef v = em_expr(E, s->value);
		if (!v)
			return false;
		if (off && i == P->nts)
			em_store_at(E, E->ln->bufs[s->buf].dtype, gep(E, P->ntet, P->ntblk, off),
			            v);
		else
			em_store(E, s->buf, s->idx, v);
	}
	em_memo_reset(E);
	return true;
}

/* The stores over [p0, p1) x [q0, q1), scalar. */
static bool
scalar_rect(Em *E, const Plan *P, LLVMValueRef p0, LLVMValueRef p1, LLVMValueRef q0,
            LLVMValueRef q1)
{
	EmLoop lp, lq;
	LLVMValueRef p = em_loop_open(E, &lp, p0, p1, 1, "edge_p");
	LLVMValueRef q = em_loop_open(E, &lq, q0, q1, 1, "edge_q");
	E->var[P->vp] = p;
	E->var[P->vq] = q;
	E->vw = 1;
	if (!stores(E, P, NULL))
		return false;
	em_plain_md(E, em_loop_close(E, &lq), 1);
	em_plain_md(E, em_loop_close(E, &lp), 1);
	return true;
}

/* rows[r] to p + r * stride (elements of type et), aligned to align;
 * non-temporal ones need it to be their vector's size. */
static void
store_rows(Em *E, LLVMValueRef *rows, int n, LLVMTypeRef et, LLVMValueRef p, int64_t stride,
           unsigned align, bool nt)
{
	for (int r = 0; r < n; r++) {
		LLVMValueRef st = LLVMBuildStore(E->b, rows[r], gep(E, et, p, k64(E, r * stride)));
		LLVMSetAlignment(st, align);
		if (nt) {
			LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(E->i32, 1, 0));
			LLVMSetMetadata(
			    st, LLVMGetMDKindIDInContext(E->ctx, "nontemporal", 11),
			    LLVMMetadataAsValue(E->ctx, LLVMMDNodeInContext2(E->ctx, &one, 1)));
			E->fence = true;
		}
	}
}

/* The vw x qn vw sub-block at (p, q). */
static bool
subblock(Em *E, const Plan *P, LLVMValueRef p, LLVMValueRef q)
{
	LLVMBuilderRef b = E->b;
	const LnStage *st = P->st;
	int vw = P->vw, w = P->vw * P->qn;
	LLVMValueRef rows[64];

	E->var[P->vp] = p;
	E->var[P->vq] = q;
	for (int k = 0; k < P->nt; k++) {
		const LnExpr *e = P->tl[k];
		unsigned bytes = (unsigned)bytes_of(E, e->buf);
		LLVMTypeRef vt = LLVMVectorType(P->et[k], (unsigned)vw);
		LLVMValueRef base = gep(E, P->et[k], E->bufp[e->buf], em_idx(E, e->idx));
		for (int j = 0; j < P->qn; j++) { /* the j-th vw columns */
			for (int r = 0; r < vw; r++) {
				LLVMValueRef at = k64(E, (j * vw + r) * P->cq[k]);
				rows[r] = LLVMBuildLoad2(b, vt, gep(E, P->et[k], base, at), "");
				LLVMSetAlignment(rows[r], bytes);
			}
			em_transpose(E, rows, vw);
			if (!P->move) {
				unsigned al =
				    bytes * (unsigned)vw < LINE ? bytes * (unsigned)vw : LINE;
				store_rows(E, rows, vw, P->et[k],
				           gep(E, P->et[k], P->blk[k], k64(E, j * vw)), w, al,
				           false);
			}
		}
		if (!P->move)
			continue;
		for (int i = 0; i < st->nstores; i++) {
			const LnStore *s = &st->stores[i];
			if (s->value == e)
				store_rows(E, rows, vw, P->et[k],
				           gep(E, P->et[k], E->bufp[s->buf], em_idx(E, s->idx)),
				           P->scp[i], i == P->nts ? LINE : bytes, i == P->nts);
		}
	}
	if (P->move)
		return true;
	/* the stores, a row of the sub-block at a time, over the block */
	EmLoop lr, lc;
	LLVMValueRef r = em_loop_open(E, &lr, k64(E, 0), k64(E, vw), 1, "tile_row");
	LLVMValueRef c = em_loop_open(E, &lc, k64(E, 0), k64(E, w), 1, "tile_col");
	E->var[P->vp] = add(E, p, r);
	E->var[P->vq] = add(E, q, c);
	E->vw = vw;
	if (!stores(E, P, add(E, LLVMBuildMul(b, r, k64(E, w), ""), c)))
		return false;
	em_vector_md(E, em_loop_close(E, &lc), vw, P->qn);
	em_plain_md(E, em_loop_close(E, &lr), 1);
	if (P->nts >= 0) { /* the non-temporal output's block, a row at a time */
		const LnStore *s = &st->stores[P->nts];
		LLVMTypeRef vt = LLVMVectorType(P->ntet, (unsigned)w);
		for (int j = 0; j < vw; j++) {
			rows[j] =
			    LLVMBuildLoad2(b, vt, gep(E, P->ntet, P->ntblk, k64(E, j * w)), "");
			LLVMSetAlignment(rows[j], LINE);
		}
		E->var[P->vp] = p;
		E->var[P->vq] = q;
		store_rows(E, rows, vw, P->ntet,
		           gep(E, P->ntet, E->bufp[s->buf], em_idx(E, s->idx)), P->scp[P->nts],
		           LINE, true);
	}
	return true;
}

/* The stack blocks of the transposed loads and of the non-temporal store
 * (not a move). */
static void
blocks(Em *E, Plan *P)
{
	uint64_t n = (uint64_t)P->vw * (uint64_t)P->vw * (uint64_t)P->qn;
	for (int k = 0; k < P->nt; k++) {
		P->blk[k] = em_entry_alloca(E, LLVMArrayType2(P->et[k], n));
		LLVMSetAlignment(P->blk[k], LINE);
	}
	if (P->nts >= 0) {
		P->ntblk = em_entry_alloca(E, LLVMArrayType2(P->ntet, n));
		LLVMSetAlignment(P->ntblk, LINE);
	}
}

/* What an out-of-line function emits, from its extra arguments x. */
typedef bool (*Piece)(Em *E, Plan *P, LLVMValueRef *x);

/* The sub-block at (x[0], x[1]). */
static bool
sub_piece(Em *E, Plan *P, LLVMValueRef *x)
{
	if (!P->move)
		blocks(E, P);
	return subblock(E, P, x[0], x[1]);
}

/* The scalar rectangle [x[0], x[1]) x [x[2], x[3]). */
static bool
rect_piece(Em *E, Plan *P, LLVMValueRef *x)
{
	return scalar_rect(E, P, x[0], x[1], x[2], x[3]);
}

/* An internal function of the buffers, the stage's outer loop vars and
 * nx more i64 arguments, which emit fills in; it stays out of line
 * (noinline), so the loop passes see small loops (the tile loops around
 * calls, a sub-block's row loop, one copy of the scalar loops): a
 * transpose with a Mul compiles in about a third less time than with
 * everything inline. A call per sub-block costs nothing measurable. */
static LLVMValueRef
outline(Em *E, Plan *P, const char *what, int nx, Piece emit)
{
	const LnStage *st = P->st;
	int nb = E->ln->nbufs, no = st->nloops - 2, np = nb + no + nx;
	LLVMTypeRef *pt = ARENA_ARRAY(E->ln->arena, LLVMTypeRef, np + 1);
	LLVMValueRef *bufp = ARENA_ARRAY(E->ln->arena, LLVMValueRef, nb + 1);
	LLVMValueRef *var = ARENA_ARRAY(E->ln->arena, LLVMValueRef, E->ln->nvars + 1);
	LLVMValueRef x[4];
	size_t nlen = 0;
	const char *caller = LLVMGetValueName2(E->fn, &nlen);
	char *name = arena_printf(E->ln->arena, "%.*s.%s", (int)nlen, caller, what);

	KC_ASSERT(nx <= 4);
	for (int i = 0; i < np; i++)
		pt[i] = i < nb ? E->ptr : E->i64;
	LLVMValueRef fn =
	    LLVMAddFunction(E->mod, name, LLVMFunctionType(E->vd, pt, (unsigned)np, 0));
	LLVMSetLinkage(fn, LLVMInternalLinkage);
	em_add_attr(E, fn, LLVMAttributeFunctionIndex, "nounwind");
	em_add_attr(E, fn, LLVMAttributeFunctionIndex, "noinline");
	em_realign_stack(E, fn);
	for (int i = 0; i < nb; i++) {
		em_add_attr(E, fn, (unsigned)i + 1, "noalias");
		em_add_attr(E, fn, (unsigned)i + 1, "nocapture");
		bufp[i] = LLVMGetParam(fn, (unsigned)i);
	}
	for (int l = 0; l < no; l++)
		var[st->loops[l].var] = LLVMGetParam(fn, (unsigned)(nb + l));
	for (int i = 0; i < nx; i++)
		x[i] = LLVMGetParam(fn, (unsigned)(nb + no + i));
	/* emit into fn, then restore the caller's state */
	LLVMBasicBlockRef here = LLVMGetInsertBlock(E->b);
	LLVMValueRef fn0 = E->fn, *bufp0 = E->bufp, *var0 = E->var;
	int vw0 = E->vw;
	E->fn = fn;
	E->bufp = bufp;
	E->var = var;
	LLVMPositionBuilderAtEnd(E->b, LLVMAppendBasicBlockInContext(E->ctx, fn, "entry"));
	bool ok = emit(E, P, x);
	if (ok)
		LLVMBuildRetVoid(E->b);
	E->fn = fn0;
	E->bufp = bufp0;
	E->var = var0;
	E->vw = vw0;
	LLVMPositionBuilderAtEnd(E->b, here);
	return ok ? fn : NULL;
}

/* Calls an out-of-line piece with extra arguments x[0..nx). */
static void
call_piece(Em *E, const Plan *P, LLVMValueRef fn, int nx, const LLVMValueRef *x)
{
	const LnStage *st = P->st;
	int nb = E->ln->nbufs, no = st->nloops - 2;
	LLVMValueRef *a = ARENA_ARRAY(E->ln->arena, LLVMValueRef, nb + no + nx + 1);
	for (int i = 0; i < nb; i++) /* (buffers another fused stage's body owns) */
		a[i] = E->bufp[i] ? E->bufp[i] : LLVMGetPoison(E->ptr);
	for (int l = 0; l < no; l++)
		a[nb + l] = E->var[st->loops[l].var];
	for (int i = 0; i < nx; i++)
		a[nb + no + i] = x[i];
	LLVMBuildCall2(E->b, LLVMGlobalGetValueType(fn), fn, a, (unsigned)(nb + no + nx), "");
}

bool
emit_tile(Em *E, const LnStage *st, LLVMValueRef lo, LLVMValueRef hi)
{
	LLVMBuilderRef b = E->b;
	int L = st->nloops;
	const LnLoop *lp = &st->loops[L - 2], *lq = &st->loops[L - 1];
	int64_t T = st->tile;
	Plan P;
	LLVMValueRef sub = NULL, rect;

	KC_ASSERT(st->nred == 0 && T > 0);
	plan(E, st, &P);
	int vw = P.vw, w = P.vw * P.qn;
	if ((vw > 1 && !(sub = outline(E, &P, "sub", 2, sub_piece))) ||
	    !(rect = outline(E, &P, "edge", 4, rect_piece)))
		return false;
	bool ppar = (lp->kind & LNL_PARALLEL) != 0, qpar = (lq->kind & LNL_PARALLEL) != 0;
	LLVMValueRef pa = ppar ? lo : k64(E, 0), pb = ppar ? hi : k64(E, lp->extent);
	LLVMValueRef qa = qpar ? lo : k64(E, 0), qb = qpar ? hi : k64(E, lq->extent);

	if (P.nts >= 0) {
		/* the tiles start at the first q whose store address is
		 * line-aligned (the same in every row); a scalar strip before */
		const LnStore *s = &st->stores[P.nts];
		int bytes = bytes_of(E, s->buf);
		E->var[P.vp] = pa;
		E->var[P.vq] = qa;
		LLVMValueRef addr =
		    LLVMBuildAdd(b, LLVMBuildPtrToInt(b, E->bufp[s->buf], E->i64, ""),
		                 LLVMBuildMul(b, em_idx(E, s->idx), k64(E, bytes), ""), "");
		LLVMValueRef mis = LLVMBuildUDiv(b, LLVMBuildAnd(b, addr, k64(E, LINE - 1), ""),
		                                 k64(E, bytes), "");
		LLVMValueRef skip = LLVMBuildAnd(b, LLVMBuildNeg(b, mis, ""), k64(E, w - 1), "");
		LLVMValueRef qs = smin(E, add(E, qa, skip), qb);
		call_piece(E, &P, rect, 4, (LLVMValueRef[]){pa, pb, qa, qs});
		qa = qs;
	}
	if (vw > 1) {
		/* [pa, pe) x [qa, qe): whole sub-blocks, in tiles */
		LLVMValueRef pe =
		    add(E, pa, LLVMBuildAnd(b, LLVMBuildSub(b, pb, pa, ""), k64(E, -vw), ""));
		LLVMValueRef qe =
		    add(E, qa, LLVMBuildAnd(b, LLVMBuildSub(b, qb, qa, ""), k64(E, -w), ""));
		EmLoop l0, l1, l2, l3;
		LLVMValueRef q0 = em_loop_open(E, &l0, qa, qe, T, "tile_q");
		LLVMValueRef q1 = smin(E, add(E, q0, k64(E, T)), qe);
		LLVMValueRef p0 = em_loop_open(E, &l1, pa, pe, T, "tile_p");
		LLVMValueRef p1 = smin(E, add(E, p0, k64(E, T)), pe);
		LLVMValueRef sq = em_loop_open(E, &l2, q0, q1, w, "sub_q");
		LLVMValueRef sp = em_loop_open(E, &l3, p0, p1, vw, "sub_p");
		call_piece(E, &P, sub, 2, (LLVMValueRef[]){sp, sq});
		em_plain_md(E, em_loop_close(E, &l3), 1);
		em_plain_md(E, em_loop_close(E, &l2), 1);
		em_plain_md(E, em_loop_close(E, &l1), 1);
		em_plain_md(E, em_loop_close(E, &l0), 1);
		/* the rest: rows pe.. of every column, columns qe.. of the rows
		 * before */
		call_piece(E, &P, rect, 4, (LLVMValueRef[]){pe, pb, qa, qb});
		call_piece(E, &P, rect, 4, (LLVMValueRef[]){pa, pe, qe, qb});
	} else {
		/* scalar tiles */
		EmLoop l0, l1;
		LLVMValueRef q0 = em_loop_open(E, &l0, qa, qb, T, "tile_q");
		LLVMValueRef q1 = smin(E, add(E, q0, k64(E, T)), qb);
		LLVMValueRef p0 = em_loop_open(E, &l1, pa, pb, T, "tile_p");
		LLVMValueRef p1 = smin(E, add(E, p0, k64(E, T)), pb);
		call_piece(E, &P, rect, 4, (LLVMValueRef[]){p0, p1, q0, q1});
		em_plain_md(E, em_loop_close(E, &l1), 1);
		em_plain_md(E, em_loop_close(E, &l0), 1);
	}
	E->var[P.vp] = E->var[P.vq] = NULL;
	return true;
}

/* A row copy x[i..] -> y[i..] over [a, b) (elements of type et), scalar. */
static void
copy_span(Em *E, LLVMTypeRef et, unsigned align, LLVMValueRef x, LLVMValueRef y, LLVMValueRef a,
          LLVMValueRef b)
{
	EmLoop l;
	LLVMValueRef i = em_loop_open(E, &l, a, b, 1, "copy");
	LLVMValueRef v = LLVMBuildLoad2(E->b, et, gep(E, et, x, i), "");
	LLVMSetAlignment(v, align);
	LLVMSetAlignment(LLVMBuildStore(E->b, v, gep(E, et, y, i)), align);
	em_plain_md(E, em_loop_close(E, &l), 1);
}

/* For elements [qa, qb) of bytes each, the first at address ya: q1, the
 * first element at or after qa on a line boundary (at most qb), and q2,
 * the end of the whole steps of step elements (a multiple of a line's
 * elements) from q1: [q1, q2) is stored a line at a time. */
static void
line_span(Em *E, LLVMValueRef ya, int bytes, LLVMValueRef qa, LLVMValueRef qb, int64_t step,
          LLVMValueRef *q1, LLVMValueRef *q2)
{
	LLVMBuilderRef b = E->b;
	int64_t line = LINE / bytes;
	LLVMValueRef mis =
	    LLVMBuildUDiv(b, LLVMBuildAnd(b, ya, k64(E, LINE - 1), ""), k64(E, bytes), "");
	*q1 = smin(E, add(E, qa, LLVMBuildAnd(b, LLVMBuildNeg(b, mis, ""), k64(E, line - 1), "")),
	           qb);
	*q2 = add(E, *q1, LLVMBuildAnd(b, LLVMBuildSub(b, qb, *q1, ""), k64(E, -step), ""));
}

/* void SYMBOL.sN.body.rows(ptr x, ptr y, i64 a, i64 b): y[a, b) = x[a, b)
 * for a stage's rows (elements of type et), scalar up to the first
 * line-aligned element of y, then whole lines stored non-temporally, then
 * the rest, scalar. Out of line (noinline), as emit_tile's pieces. */
static LLVMValueRef
rows_fn(Em *E, LLVMTypeRef et, int bytes)
{
	LLVMBuilderRef b = E->b;
	int vw = LINE / bytes;
	LLVMTypeRef vt = LLVMVectorType(et, (unsigned)vw);
	LLVMTypeRef pt[4] = {E->ptr, E->ptr, E->i64, E->i64};
	size_t nlen = 0;
	const char *caller = LLVMGetValueName2(E->fn, &nlen);
	LLVMValueRef fn =
	    LLVMAddFunction(E->mod, arena_printf(E->ln->arena, "%.*s.rows", (int)nlen, caller),
	                    LLVMFunctionType(E->vd, pt, 4, 0));
	LLVMSetLinkage(fn, LLVMInternalLinkage);
	em_add_attr(E, fn, LLVMAttributeFunctionIndex, "nounwind");
	em_add_attr(E, fn, LLVMAttributeFunctionIndex, "noinline");
	for (unsigned i = 1; i <= 2; i++) {
		em_add_attr(E, fn, i, "noalias");
		em_add_attr(E, fn, i, "nocapture");
	}
	LLVMBasicBlockRef here = LLVMGetInsertBlock(b);
	LLVMValueRef fn0 = E->fn;
	E->fn = fn;
	LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(E->ctx, fn, "entry"));
	LLVMValueRef xr = LLVMGetParam(fn, 0), yr = LLVMGetParam(fn, 1);
	LLVMValueRef qa = LLVMGetParam(fn, 2), qb = LLVMGetParam(fn, 3);
	LLVMValueRef ya = LLVMBuildAdd(b, LLVMBuildPtrToInt(b, yr, E->i64, ""),
	                               LLVMBuildMul(b, qa, k64(E, bytes), ""), "");
	LLVMValueRef q1, q2;
	line_span(E, ya, bytes, qa, qb, vw, &q1, &q2);
	copy_span(E, et, (unsigned)bytes, xr, yr, qa, q1);
	EmLoop l;
	LLVMValueRef q = em_loop_open(E, &l, q1, q2, vw, "stream");
	LLVMValueRef v = LLVMBuildLoad2(b, vt, gep(E, et, xr, q), "");
	LLVMSetAlignment(v, (unsigned)bytes);
	store_rows(E, &v, 1, et, gep(E, et, yr, q), 0, LINE, true);
	em_plain_md(E, em_loop_close(E, &l), 1);
	copy_span(E, et, (unsigned)bytes, xr, yr, q2, qb);
	LLVMBuildRetVoid(b);
	E->fn = fn0;
	LLVMPositionBuilderAtEnd(b, here);
	return fn;
}

bool
emit_rows(Em *E, const LnStage *st, LLVMValueRef lo, LLVMValueRef hi)
{
	const LnStore *s = &st->stores[0];
	const LnExpr *x = s->value;
	const LnLoop *lq = &st->loops[st->nloops - 1];
	int bytes = bytes_of(E, s->buf);
	LLVMTypeRef et = int_of(E, s->buf);
	bool qpar = (lq->kind & LNL_PARALLEL) != 0;

	KC_ASSERT(st->stream && st->nstores == 1 && x->kind == LNE_LOAD && LINE % bytes == 0);
	LLVMValueRef fn = rows_fn(E, et, bytes);
	/* the row's first elements: x and y at q = 0 (both affine in q) */
	E->var[lq->var] = k64(E, 0);
	LLVMValueRef a[4] = {gep(E, et, E->bufp[x->buf], em_idx(E, x->idx)),
	                     gep(E, et, E->bufp[s->buf], em_idx(E, s->idx)), qpar ? lo : k64(E, 0),
	                     qpar ? hi : k64(E, lq->extent)};
	E->var[lq->var] = NULL;
	LLVMBuildCall2(E->b, LLVMGlobalGetValueType(fn), fn, a, 4, "");
	return true;
}

/* ---- streaming stores (LnStage.ntmask, fuse.c sched_stream) --------------- */

/* The innermost loop q of a stage with a streaming store (the loops
 * outside it open; a parallel q runs [lo, hi)), over [qa, qb):
 *
 *   q1 = the first q >= qa where the output's element is line-aligned
 *   q2 = q1 + the whole lines (and whole vectors) of [q1, qb)
 *   for q in [q1, q2) step u vw:   vw, u = the loop's width and unroll
 *     for c in [0, u vw): the stores at q + c, the streamed one into a
 *       u vw-element stack block (vectorised at vw, interleaved u times:
 *       u vector ops per op, as the loop vectorizer does the plain loop)
 *     the block as u vectors, stored non-temporally at the output's q
 *   for part in {[qa, q1), [q2, qb)}: the stores, scalar
 *
 * The edges are one scalar loop over two ranges, so the stage's ops are
 * emitted twice, not three times (compile time). The body function
 * fences before it returns (E->fence). */
bool
emit_stream(Em *E, const LnStage *st, LLVMValueRef lo, LLVMValueRef hi)
{
	LLVMBuilderRef b = E->b;
	const LnLoop *lq = &st->loops[st->nloops - 1];
	int nts = __builtin_ctz(st->ntmask), vw = lq->width;
	int u = (lq->kind & LNL_UNROLLED) && lq->unroll > 1 ? lq->unroll : 1;
	const LnStore *s = &st->stores[nts];
	int bytes = bytes_of(E, s->buf);
	int64_t line = LINE / bytes, step = u * vw > line ? u * vw : line;
	unsigned vbytes = (unsigned)(vw * bytes);
	LLVMTypeRef et = int_of(E, s->buf), vt = LLVMVectorType(et, (unsigned)vw);
	bool par = (lq->kind & LNL_PARALLEL) != 0;
	LLVMValueRef qa = par ? lo : k64(E, 0), qb = par ? hi : k64(E, lq->extent);

	KC_ASSERT(st->nred == 0 && (vbytes == 32 || vbytes == LINE) && (step & (step - 1)) == 0);
	/* the output at q = 0 (affine in q with stride 1: sched_stream) */
	E->var[lq->var] = k64(E, 0);
	LLVMValueRef y0 = gep(E, et, E->bufp[s->buf], em_idx(E, s->idx));
	LLVMValueRef ya = LLVMBuildPtrToInt(b, gep(E, et, y0, qa), E->i64, "");
	LLVMValueRef q1, q2;
	line_span(E, ya, bytes, qa, qb, step, &q1, &q2);
	/* stores() with no transposed loads: store nts goes to the block */
	Plan P = {.st = st, .nts = nts, .ntet = et};
	P.ntblk = em_entry_alloca(E, LLVMArrayType2(et, (uint64_t)(u * vw)));
	LLVMSetAlignment(P.ntblk, LINE);

	EmLoop lm, lc, le, ls;
	LnLoop vec = {0};
	LLVMValueRef q = em_loop_open(E, &lm, q1, q2, u * vw, "stream");
	LLVMValueRef c = em_loop_open(E, &lc, k64(E, 0), k64(E, u * vw), 1, "stream_vec");
	E->var[lq->var] = add(E, q, c);
	E->vw = vw;
	if (!stores(E, &P, c))
		return false;
	vec.kind = LNL_VECTORIZED | (u > 1 ? LNL_UNROLLED : 0);
	vec.width = vw;
	vec.unroll = u;
	em_loop_md(E, em_loop_close(E, &lc), &vec);
	LLVMValueRef rows[16];
	KC_ASSERT(u <= 16);
	for (int j = 0; j < u; j++) {
		rows[j] = LLVMBuildLoad2(b, vt, gep(E, et, P.ntblk, k64(E, j * vw)), "");
		LLVMSetAlignment(rows[j], vbytes);
	}
	store_rows(E, rows, u, et, gep(E, et, y0, q), vw, vbytes, true);
	em_plain_md(E, em_loop_close(E, &lm), 1);

	/* the edges: part 0 is [qa, q1), part 1 [q2, qb) */
	LLVMValueRef part = em_loop_open(E, &le, k64(E, 0), k64(E, 2), 1, "stream_edges");
	LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, part, k64(E, 0), "");
	LLVMValueRef ea = LLVMBuildSelect(b, first, qa, q2, "");
	LLVMValueRef ee = LLVMBuildSelect(b, first, q1, qb, "");
	E->var[lq->var] = em_loop_open(E, &ls, ea, ee, 1, "stream_edge");
	E->vw = 1;
	if (!stores(E, &P, NULL))
		return false;
	em_plain_md(E, em_loop_close(E, &ls), 1);
	em_plain_md(E, em_loop_close(E, &le), 1);
	E->var[lq->var] = NULL;
	return true;
}
