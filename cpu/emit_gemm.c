/* emit_gemm.c - a GEMM stage (LnGemm, see loop/loop.h) as LLVM IR: a
 * BLIS-style blocked kernel with an explicit register-blocked micro-kernel.
 *
 * For the task's work units u in [lo, hi) (batch b, column block jn, row
 * block im; the entry shares units among tasks):
 *
 *   for pc in 0..K step kc:                       K-blocks
 *     pack B[b, pc:pc+kc, n0:n0+nc] -> Bp         nr-wide panels, k-major,
 *                                                 zero-padded past N (stack);
 *                                                 a half B converted here
 *     for ir in 0..mc step mr:                    micro-panels of A rows
 *       rows A[b, ms+r, pc], r < mr, at constant offsets (a panel
 *       that would run past M starts at ms = M - mr instead; only when
 *       M < mr do its rows past M repeat row M - 1); a half A (a_pack)
 *       is first converted into a float32 panel Ap on the stack (row-
 *       major, or k-major when A is stored along m), read from there
 *       for jr in 0..nc step nr:
 *         acc[mr][nr/vw] = sum_k bcast(A[r][k]) * Bp[jr][k][:]   (FMA)
 *         finish: when K has several blocks, their sums add up in a
 *                 float64 workspace (acc), a row at a time through a tile
 *                 on the stack, and only the last block rounds to float32
 *                 and goes on; then a full tile without epilogue -> vector
 *                 stores to C; else through the tile: copy the valid part,
 *                 or, with a fused epilogue, run the epilogue stage's
 *                 stores on each element with C's value taken from the tile
 *
 * The micro-kernel keeps its accumulators in SSA values (phis), so they live
 * in vector registers; A is read with broadcast loads (a float32 A in
 * place, no packing: the rows of a block stay in L1/L2), B from the packed
 * panel with aligned vector loads. The k loop is unrolled by UKR_UNROLL
 * and never vectorised again; every other loop here is emitted with
 * explicit vectors (or is an edge loop) and marked not to be vectorised or
 * unrolled, except the fused epilogue's column loop and the half
 * conversion loops, which the loop vectorizer turns into vectors (the
 * epilogue's math calls included). Edge code that the shape rules out gets
 * none: no partial rows when mr divides M, no partial columns (tile or
 * panel) when nr divides N, no k tail in the transposed packing when vw
 * divides K and kc. That, and objcode.c's short GEMM pipeline (which
 * relies on these loop annotations), keeps a GEMM's compile time within
 * about twice the elementwise templates'.
 */
#include <llvm-c/DebugInfo.h>
#include <string.h>

#include "emit.h"

#define UKR_UNROLL 2

static LLVMValueRef
k64(Em *E, int64_t v)
{
	return LLVMConstInt(E->i64, (unsigned long long)v, 1);
}

static LLVMValueRef
smin(Em *E, LLVMValueRef a, LLVMValueRef b)
{
	return LLVMBuildSelect(E->b, LLVMBuildICmp(E->b, LLVMIntSLT, a, b, ""), a, b, "");
}

static LLVMValueRef
gep(Em *E, LLVMValueRef p, LLVMValueRef i)
{
	return LLVMBuildInBoundsGEP2(E->b, E->f32, p, &i, 1, "");
}

/* for (iv = start; iv < end; iv += step) { ...: the builder is in the body */
LLVMValueRef
em_loop_open(Em *E, EmLoop *l, LLVMValueRef start, LLVMValueRef end, int64_t step, const char *name)
{
	LLVMBasicBlockRef pre = LLVMGetInsertBlock(E->b);
	l->header = LLVMAppendBasicBlockInContext(E->ctx, E->fn, name);
	l->exit = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "exit");
	l->end = end;
	l->step = k64(E, step);
	LLVMBuildCondBr(E->b, LLVMBuildICmp(E->b, LLVMIntSLT, start, end, ""), l->header, l->exit);
	LLVMPositionBuilderAtEnd(E->b, l->header);
	l->iv = LLVMBuildPhi(E->b, E->i64, name);
	LLVMAddIncoming(l->iv, &start, &pre, 1);
	return l->iv;
}

/* } : the builder continues after the loop; returns the latch branch. */
LLVMValueRef
em_loop_close(Em *E, EmLoop *l)
{
	LLVMValueRef next = LLVMBuildAdd(E->b, l->iv, l->step, "");
	LLVMSetNSW(next, 1);
	LLVMValueRef br = LLVMBuildCondBr(E->b, LLVMBuildICmp(E->b, LLVMIntSLT, next, l->end, ""),
	                                  l->header, l->exit);
	LLVMBasicBlockRef latch = LLVMGetInsertBlock(E->b);
	LLVMAddIncoming(l->iv, &next, &latch, 1);
	LLVMPositionBuilderAtEnd(E->b, l->exit);
	return br;
}

/* A float array of n elements in the function's entry block. */
static LLVMValueRef
entry_array(Em *E, int64_t n, unsigned align)
{
	LLVMValueRef a = em_entry_alloca(E, LLVMArrayType2(E->f32, (uint64_t)n));
	LLVMSetAlignment(a, align);
	return a;
}

/* !llvm.loop {vectorize.enable false, unroll.count n} on the latch br, or
 * {vectorize.enable false, unroll.disable} when n <= 1: loops emitted
 * already vectorised (the micro-kernel), or scalar edge loops not worth
 * the compile time. */
void
em_plain_md(Em *E, LLVMValueRef br, int unroll)
{
	LLVMMetadataRef tmp = LLVMTemporaryMDNode(E->ctx, NULL, 0);
	LLVMMetadataRef ve[2] = {LLVMMDStringInContext2(E->ctx, "llvm.loop.vectorize.enable", 26),
	                         LLVMValueAsMetadata(LLVMConstInt(E->i1, 0, 0))};
	LLVMMetadataRef un[2] = {LLVMMDStringInContext2(E->ctx, "llvm.loop.unroll.count", 22),
	                         LLVMValueAsMetadata(LLVMConstInt(E->i32, (unsigned)unroll, 0))};
	if (unroll <= 1)
		un[0] = LLVMMDStringInContext2(E->ctx, "llvm.loop.unroll.disable", 24);
	LLVMMetadataRef ops[3] = {tmp, LLVMMDNodeInContext2(E->ctx, ve, 2),
	                          LLVMMDNodeInContext2(E->ctx, un, unroll <= 1 ? 1 : 2)};
	LLVMMetadataRef node = LLVMMDNodeInContext2(E->ctx, ops, 3);
	LLVMMetadataReplaceAllUsesWith(tmp, node);
	LLVMSetMetadata(br, LLVMGetMDKindIDInContext(E->ctx, "llvm.loop", 9),
	                LLVMMetadataAsValue(E->ctx, node));
}

static LLVMValueRef
load_f(Em *E, LLVMTypeRef t, LLVMValueRef p, unsigned align)
{
	LLVMValueRef v = LLVMBuildLoad2(E->b, t, p, "");
	LLVMSetAlignment(v, align);
	return v;
}

static void
store_f(Em *E, LLVMValueRef v, LLVMValueRef p, unsigned align)
{
	LLVMSetAlignment(LLVMBuildStore(E->b, v, p), align);
}

/* panel[k][c] = B[b, pc + k, nbase + c], 0 past N. */
static void
pack_elem(Em *E, const LnGemm *G, LLVMValueRef Bb, LLVMValueRef panel, LLVMValueRef pc,
          LLVMValueRef kk, LLVMValueRef nbase, LLVMValueRef c, int nr)
{
	LLVMBuilderRef b = E->b;
	LLVMValueRef n = LLVMBuildAdd(b, nbase, c, "");
	LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, n, k64(E, G->N), "");
	LLVMValueRef ncl = LLVMBuildSelect(b, ok, n, k64(E, G->N - 1), "");
	LLVMValueRef off =
	    LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, pc, kk, ""), k64(E, G->b_ks), ""),
	                 LLVMBuildMul(b, ncl, k64(E, G->b_ns), ""), "");
	KcDtype bdt = E->ln->bufs[G->b].dtype;
	LLVMValueRef v =
	    bdt == KC_DT_FLOAT32
	        ? load_f(E, E->f32, gep(E, Bb, off), 4)
	        : em_load_at(E, bdt, LLVMBuildInBoundsGEP2(b, E->i16, Bb, &off, 1, ""));
	v = LLVMBuildSelect(b, ok, v, LLVMConstNull(E->f32), "");
	store_f(E, v, gep(E, panel, LLVMBuildAdd(b, LLVMBuildMul(b, kk, k64(E, nr), ""), c, "")),
	        4);
}

/* Closes a conversion loop (half elements widened into a float32 panel)
 * for the vectorizer to widen by w (kept a loop until then), or as a
 * plain loop when w is 1. */
static void
close_widened(Em *E, EmLoop *l, int w)
{
	LLVMValueRef br = em_loop_close(E, l);
	if (w > 1)
		em_vector_md(E, br, w, 1);
	else
		em_plain_md(E, br, 1);
}

/* A vector of float16/bfloat16 bits (i16) as float32 (exact): bfloat16
 * by a shift into the high half; float16 by fpext (only where the target
 * converts float16 in hardware: LoopNest.hw_half). */
static LLVMValueRef
half_vec_to_f32(Em *E, KcDtype dt, LLVMValueRef v)
{
	LLVMBuilderRef b = E->b;
	unsigned n = LLVMGetVectorSize(LLVMTypeOf(v));
	if (dt == KC_DT_BFLOAT16) {
		LLVMValueRef sh[64];
		KC_ASSERT(n <= 64);
		for (unsigned i = 0; i < n; i++)
			sh[i] = LLVMConstInt(E->i32, 16, 0);
		LLVMValueRef w = LLVMBuildZExt(b, v, LLVMVectorType(E->i32, n), "");
		w = LLVMBuildShl(b, w, LLVMConstVector(sh, n), "");
		return LLVMBuildBitCast(b, w, LLVMVectorType(E->f32, n), "");
	}
	KC_ASSERT(dt == KC_DT_FLOAT16 && E->ln->hw_half);
	LLVMTypeRef h = LLVMHalfTypeInContext(E->ctx);
	LLVMValueRef x = LLVMBuildBitCast(b, v, LLVMVectorType(h, n), "");
	return LLVMBuildFPExt(b, x, LLVMVectorType(E->f32, n), "");
}

/* Bytes of a vector's element type. */
static int
elem_bytes(LLVMTypeRef t)
{
	LLVMTypeKind k = LLVMGetTypeKind(t);
	if (k == LLVMIntegerTypeKind)
		return (int)LLVMGetIntTypeWidth(t) / 8;
	if (k == LLVMDoubleTypeKind)
		return 8;
	if (k == LLVMHalfTypeKind || k == LLVMBFloatTypeKind)
		return 2;
	return 4;
}

/* *ra, *rb = the shuffles of a and b by masks ma and mb (n elements). */
static void
shuffle2(Em *E, LLVMValueRef a, LLVMValueRef b, LLVMValueRef *ma, LLVMValueRef *mb, int n,
         LLVMValueRef *ra, LLVMValueRef *rb)
{
	*ra = LLVMBuildShuffleVector(E->b, a, b, LLVMConstVector(ma, (unsigned)n), "");
	*rb = LLVMBuildShuffleVector(E->b, a, b, LLVMConstVector(mb, (unsigned)n), "");
}

/* Transposes the n x n matrix held as n row vectors (n a power of two, any
 * element type), in place, with n log2(n) two-source shuffles in the
 * shapes vector units do in one instruction (x86 unpck/shuf, NEON zip):
 * 1. within each 16-byte lane (m elements), the m x m block of each
 *    group of m rows: log2(m) rounds, each interleaving the low and the
 *    high halves (of every lane) of rows i and i + m/2 into rows 2i and
 *    2i + 1 of the group;
 * 2. then the n/m x n/m matrix of lanes, for each row offset in a group:
 *    a butterfly moving whole lanes between rows m apart, 2m apart, ...
 * (A butterfly on single elements costs x86 instruction selection two to
 * ten times the compile time: vpermt2 and pshufb sequences.) Shared
 * through emit.h. */
void
em_transpose(Em *E, LLVMValueRef *r, int n)
{
	LLVMValueRef ma[64], mb[64], t[64];
	int m = 16 / elem_bytes(LLVMGetElementType(LLVMTypeOf(r[0])));
	m = m < 1 ? 1 : m > n ? n : m;
	int nl = n / m, half = m / 2;

	KC_ASSERT(n >= 1 && n <= 64 && (n & (n - 1)) == 0);
	for (int l = 0; l < nl; l++)
		for (int j = 0; j < half; j++) {
			int lo = l * m + j, hi = l * m + half + j;
			ma[l * m + 2 * j] = LLVMConstInt(E->i32, (unsigned)lo, 0);
			ma[l * m + 2 * j + 1] = LLVMConstInt(E->i32, (unsigned)(n + lo), 0);
			mb[l * m + 2 * j] = LLVMConstInt(E->i32, (unsigned)hi, 0);
			mb[l * m + 2 * j + 1] = LLVMConstInt(E->i32, (unsigned)(n + hi), 0);
		}
	for (int round = 1; round < m; round *= 2) {
		for (int g = 0; g < n; g += m)
			for (int i = 0; i < half; i++)
				shuffle2(E, r[g + i], r[g + i + half], ma, mb, n, &t[g + 2 * i],
				         &t[g + 2 * i + 1]);
		memcpy(r, t, sizeof(LLVMValueRef) * (size_t)n);
	}
	for (int h = 1; h < nl; h *= 2) {
		for (int j = 0; j < n; j++) {
			int l = j / m, c = j % m;
			bool a = (l & h) == 0;
			ma[j] = LLVMConstInt(E->i32, (unsigned)(a ? j : (l - h) * m + c + n), 0);
			mb[j] = LLVMConstInt(E->i32, (unsigned)(a ? (l + h) * m + c : j + n), 0);
		}
		for (int g = 0; g < nl; g++)
			for (int i = 0; !(g & h) && i < m; i++)
				shuffle2(E, r[g * m + i], r[(g + h) * m + i], ma, mb, n,
				         &r[g * m + i], &r[(g + h) * m + i]);
	}
}

/* Sets the vars of loops[from, to) of an injective stage from the
 * row-major position x within them. */
static void
set_vars(Em *E, const LnStage *ep, int from, int to, LLVMValueRef x)
{
	for (int l = to - 1; l >= from; l--) {
		int64_t e = ep->loops[l].extent;
		if (l == from) {
			E->var[ep->loops[l].var] = x;
			break;
		}
		E->var[ep->loops[l].var] = LLVMBuildURem(E->b, x, k64(E, e), "");
		x = LLVMBuildUDiv(E->b, x, k64(E, e), "");
	}
}

bool
emit_gemm(Em *E, const LnStage *st, LLVMValueRef lo, LLVMValueRef hi)
{
	const LnGemm *G = st->gemm;
	LLVMBuilderRef b = E->b;
	int mr = G->mr, nr = G->nr, vw = G->vw, nv = G->nr / G->vw;
	unsigned valign = (unsigned)(vw * 4 < 64 ? vw * 4 : 64);
	LLVMTypeRef vt = vw > 1 ? LLVMVectorType(E->f32, (unsigned)vw) : E->f32;
	LLVMValueRef zero_v = LLVMConstNull(vt);
	bool single_k = G->kc >= G->K; /* one K-block: nothing accumulates */
	/* Edges that never occur get no code: with M a multiple of mr every
	 * micro-panel has mr rows, with N a multiple of nr every tile and
	 * panel nr columns (mc and nc are multiples of mr and nr), with K
	 * and kc multiples of vw every transposed packing block vw k's. */
	bool full_m = G->M % mr == 0, full_n = G->N % nr == 0;
	bool full_k = G->K % vw == 0 && G->kc % vw == 0;
	const LnStage *ep = G->epi >= 0 ? &E->ln->stages[G->epi] : NULL;
	LLVMValueRef A = E->bufp[G->a], B = E->bufp[G->b], C = E->bufp[G->c];

	KC_ASSERT(mr >= 1 && mr <= 16 && nv >= 1 && mr * nv <= 32);
	LLVMValueRef bp = entry_array(E, G->kc * G->nc, 64);
	LLVMValueRef ap = G->a_pack ? entry_array(E, (int64_t)mr * G->kc, 64) : NULL;
	/* a finished tile goes through the stack when K has several blocks,
	 * it has an epilogue or it may be partial */
	bool need_tile = !single_k || ep || !full_m || !full_n;
	LLVMValueRef tile = need_tile ? entry_array(E, (int64_t)mr * nr, 64) : NULL;

	/* the work unit */
	EmLoop lu;
	LLVMValueRef u = em_loop_open(E, &lu, lo, hi, 1, "unit");
	int64_t per_b = G->units_m * G->units_n;
	LLVMValueRef bi = LLVMBuildUDiv(b, u, k64(E, per_b), "batch");
	LLVMValueRef rem = LLVMBuildURem(b, u, k64(E, per_b), "");
	LLVMValueRef jn = LLVMBuildUDiv(b, rem, k64(E, G->units_m), "jn");
	LLVMValueRef im = LLVMBuildURem(b, rem, k64(E, G->units_m), "im");
	LLVMValueRef m0 = LLVMBuildMul(b, im, k64(E, G->mc), "m0");
	LLVMValueRef n0 = LLVMBuildMul(b, jn, k64(E, G->nc), "n0");
	LLVMValueRef mcur = smin(E, k64(E, G->mc), LLVMBuildSub(b, k64(E, G->M), m0, ""));
	LLVMValueRef ncur = smin(E, k64(E, G->nc), LLVMBuildSub(b, k64(E, G->N), n0, ""));
	/* A's elements as stored: float32, or with a_pack a half (i16 bits) */
	KcDtype adt = E->ln->bufs[G->a].dtype;
	LLVMTypeRef aet = G->a_pack ? E->i16 : E->f32;
	LLVMValueRef ab_off = LLVMBuildMul(b, bi, k64(E, G->a_bs), "");
	LLVMValueRef Ab = LLVMBuildInBoundsGEP2(b, aet, A, &ab_off, 1, "");
	/* B's elements as stored: float32, or a half (i16 bits), which the
	 * packing converts element-wise */
	bool b_half = E->ln->bufs[G->b].dtype != KC_DT_FLOAT32;
	/* ... in vectors of vw (the transposed packing): bfloat16 always,
	 * float16 where the target converts it in hardware */
	bool b_vec = vw > 1 && (E->ln->bufs[G->b].dtype == KC_DT_BFLOAT16 || E->ln->hw_half);
	LLVMTypeRef ht = LLVMVectorType(E->i16, (unsigned)(vw > 1 ? vw : 1));
	LLVMValueRef bb_off = LLVMBuildMul(b, bi, k64(E, G->b_bs), "");
	LLVMValueRef Bb = LLVMBuildInBoundsGEP2(b, b_half ? E->i16 : E->f32, B, &bb_off, 1, "");
	LLVMValueRef Cb = gep(E, C, LLVMBuildMul(b, bi, k64(E, G->M * G->N), ""));

	/* K-blocks */
	EmLoop lk;
	LLVMValueRef pc = em_loop_open(E, &lk, k64(E, 0), k64(E, G->K), G->kc, "kblock");
	LLVMValueRef kcur = smin(E, k64(E, G->kc), LLVMBuildSub(b, k64(E, G->K), pc, ""));
	LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, pc, k64(E, 0), "first");
	LLVMValueRef last = LLVMBuildICmp(b, LLVMIntSGE, LLVMBuildAdd(b, pc, k64(E, G->kc), ""),
	                                  k64(E, G->K), "last");

	/* pack B's block into nr-wide panels: Bp[j][k][c] */
	LLVMValueRef npan =
	    LLVMBuildUDiv(b, LLVMBuildAdd(b, ncur, k64(E, nr - 1), ""), k64(E, nr), "npanels");
	EmLoop lj, lkk, lc;
	LLVMValueRef j = em_loop_open(E, &lj, k64(E, 0), npan, 1, "pack");
	LLVMValueRef panel =
	    gep(E, bp, LLVMBuildMul(b, LLVMBuildMul(b, j, kcur, ""), k64(E, nr), ""));
	LLVMValueRef nbase = LLVMBuildAdd(b, n0, LLVMBuildMul(b, j, k64(E, nr), ""), "");
	if (b_half && G->b_ns != 1 && !b_vec) {
		/* a half B stored along k (transpose_b) that vectors cannot
		 * convert here (float16 without F16C): element-wise, reading
		 * along k */
		LLVMValueRef c = em_loop_open(E, &lc, k64(E, 0), k64(E, nr), 1, "packh_c");
		LLVMValueRef kk = em_loop_open(E, &lkk, k64(E, 0), kcur, 1, "packh_k");
		pack_elem(E, G, Bb, panel, pc, kk, nbase, c, nr);
		em_plain_md(E, em_loop_close(E, &lkk), 1);
		em_plain_md(E, em_loop_close(E, &lc), 1);
	} else if (G->b_ns == 1) {
		/* rows of B are contiguous: a full panel is nv vector copies per k
		 * (a half B: a loop over the nr columns that the vectorizer widens
		 * into loads, conversions and stores), one past N element-wise */
		LLVMBasicBlockRef bt = NULL, bd = NULL;
		if (!full_n) {
			LLVMValueRef fullp =
			    LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, nbase, k64(E, nr), ""),
			                  k64(E, G->N), "");
			LLVMBasicBlockRef bf =
			    LLVMAppendBasicBlockInContext(E->ctx, E->fn, "pack_full");
			bt = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "pack_tail");
			bd = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "pack_done");
			LLVMBuildCondBr(b, fullp, bf, bt);
			LLVMPositionBuilderAtEnd(b, bf);
		}
		LLVMValueRef kk = em_loop_open(E, &lkk, k64(E, 0), kcur, 1, "pack_k");
		LLVMValueRef src0 = LLVMBuildAdd(
		    b, LLVMBuildMul(b, LLVMBuildAdd(b, pc, kk, ""), k64(E, G->b_ks), ""), nbase,
		    "");
		LLVMValueRef dst = gep(E, panel, LLVMBuildMul(b, kk, k64(E, nr), ""));
		if (b_half) {
			LLVMValueRef c = em_loop_open(E, &lc, k64(E, 0), k64(E, nr), 1, "packh_c");
			LLVMValueRef so = LLVMBuildAdd(b, src0, c, "");
			store_f(E,
			        em_load_at(E, E->ln->bufs[G->b].dtype,
			                   LLVMBuildInBoundsGEP2(b, E->i16, Bb, &so, 1, "")),
			        gep(E, dst, c), 4);
			close_widened(E, &lc, vw);
		} else {
			LLVMValueRef src = gep(E, Bb, src0);
			for (int v = 0; v < nv; v++)
				store_f(E, load_f(E, vt, gep(E, src, k64(E, v * vw)), 4),
				        gep(E, dst, k64(E, v * vw)), valign);
		}
		em_plain_md(E, em_loop_close(E, &lkk), 1);
		if (!full_n) {
			LLVMBuildBr(b, bd);
			LLVMPositionBuilderAtEnd(b, bt);
			kk = em_loop_open(E, &lkk, k64(E, 0), kcur, 1, "pack_tk");
			LLVMValueRef c = em_loop_open(E, &lc, k64(E, 0), k64(E, nr), 1, "pack_tc");
			pack_elem(E, G, Bb, panel, pc, kk, nbase, c, nr);
			em_plain_md(E, em_loop_close(E, &lc), 1);
			em_plain_md(E, em_loop_close(E, &lkk), 1);
			LLVMBuildBr(b, bd);
			LLVMPositionBuilderAtEnd(b, bd);
		}
	} else if (vw > 1) {
		/* B's rows run along k (transpose_b): per group of vw columns, vw x vw
		 * blocks are loaded as vw row vectors, transposed in registers and
		 * stored as panel rows (a half B: transposed as 16-bit vectors,
		 * then converted); a k tail and columns past N element-wise */
		LLVMValueRef kfull =
		    LLVMBuildMul(b, LLVMBuildUDiv(b, kcur, k64(E, vw), ""), k64(E, vw), "kfull");
		EmLoop lg;
		LLVMValueRef g = em_loop_open(E, &lg, k64(E, 0), k64(E, nv), 1, "packt_g");
		{
			LLVMValueRef c0 = LLVMBuildMul(b, g, k64(E, vw), "");
			LLVMValueRef c1 = LLVMBuildAdd(b, c0, k64(E, vw), "");
			LLVMValueRef ng = LLVMBuildAdd(b, nbase, c0, "");
			LLVMBasicBlockRef bs = NULL, bd = NULL;
			if (!full_n) {
				LLVMValueRef fullg = LLVMBuildICmp(
				    b, LLVMIntSLE, LLVMBuildAdd(b, ng, k64(E, vw), ""),
				    k64(E, G->N), "");
				LLVMBasicBlockRef bv =
				    LLVMAppendBasicBlockInContext(E->ctx, E->fn, "packt");
				bs = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "packt_tail");
				bd = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "packt_done");
				LLVMBuildCondBr(b, fullg, bv, bs);
				LLVMPositionBuilderAtEnd(b, bv);
			}
			LLVMValueRef k0 = em_loop_open(E, &lkk, k64(E, 0), kfull, vw, "packt_k");
			LLVMValueRef rows[64];
			for (int i = 0; i < vw; i++) {
				LLVMValueRef off =
				    LLVMBuildAdd(b,
				                 LLVMBuildMul(b, LLVMBuildAdd(b, ng, k64(E, i), ""),
				                              k64(E, G->b_ns), ""),
				                 LLVMBuildAdd(b, pc, k0, ""), "");
				rows[i] =
				    b_half
				        ? load_f(E, ht,
				                 LLVMBuildInBoundsGEP2(b, E->i16, Bb, &off, 1, ""),
				                 2)
				        : load_f(E, vt, gep(E, Bb, off), 4);
			}
			em_transpose(E, rows, vw);
			for (int i = 0; b_half && i < vw; i++)
				rows[i] = half_vec_to_f32(E, E->ln->bufs[G->b].dtype, rows[i]);
			LLVMValueRef dst = gep(
			    E, panel, LLVMBuildAdd(b, LLVMBuildMul(b, k0, k64(E, nr), ""), c0, ""));
			for (int i = 0; i < vw; i++)
				store_f(E, rows[i], gep(E, dst, k64(E, (int64_t)i * nr)), valign);
			em_plain_md(E, em_loop_close(E, &lkk), 1);
			if (!full_k) {
				LLVMValueRef kk = em_loop_open(E, &lkk, kfull, kcur, 1, "packt_kt");
				LLVMValueRef c = em_loop_open(E, &lc, c0, c1, 1, "packt_c");
				pack_elem(E, G, Bb, panel, pc, kk, nbase, c, nr);
				em_plain_md(E, em_loop_close(E, &lc), 1);
				em_plain_md(E, em_loop_close(E, &lkk), 1);
			}
			if (!full_n) {
				LLVMBuildBr(b, bd);
				LLVMPositionBuilderAtEnd(b, bs);
				LLVMValueRef c = em_loop_open(E, &lc, c0, c1, 1, "packs_c");
				LLVMValueRef kk =
				    em_loop_open(E, &lkk, k64(E, 0), kcur, 1, "packs_k");
				pack_elem(E, G, Bb, panel, pc, kk, nbase, c, nr);
				em_plain_md(E, em_loop_close(E, &lkk), 1);
				em_plain_md(E, em_loop_close(E, &lc), 1);
				LLVMBuildBr(b, bd);
				LLVMPositionBuilderAtEnd(b, bd);
			}
		}
		em_plain_md(E, em_loop_close(E, &lg), 1);
	} else {
		/* scalar vectors, B's rows along k: copy along k */
		LLVMValueRef c = em_loop_open(E, &lc, k64(E, 0), k64(E, nr), 1, "pack_c");
		LLVMValueRef kk = em_loop_open(E, &lkk, k64(E, 0), kcur, 1, "pack_k");
		pack_elem(E, G, Bb, panel, pc, kk, nbase, c, nr);
		em_plain_md(E, em_loop_close(E, &lkk), 1);
		em_plain_md(E, em_loop_close(E, &lc), 1);
	}
	em_plain_md(E, em_loop_close(E, &lj), 1);

	/* micro-panels of rows */
	EmLoop li, ljr;
	LLVMValueRef ir = em_loop_open(E, &li, k64(E, 0), mcur, mr, "rows");
	LLVMValueRef mrows =
	    full_m ? k64(E, mr) : smin(E, k64(E, mr), LLVMBuildSub(b, mcur, ir, ""));
	/* The micro-kernel reads mr rows of A at constant offsets from the
	 * first, ms. A partial panel (rows past M) moves up to end at row
	 * M - 1 when M >= mr: its mr rows are real rows, and the panel's row
	 * m0 + ir is the tile's row dsh (the same in every K-block, so the
	 * float64 sums stay consistent); with M < mr its rows past M read
	 * row M - 1 instead. */
	LLVMValueRef ms = LLVMBuildAdd(b, m0, ir, ""), dsh = k64(E, 0);
	bool clamp = !full_m && G->M < mr;
	if (!full_m && !clamp) {
		LLVMValueRef mp = ms;
		ms = smin(E, mp, k64(E, G->M - mr));
		dsh = LLVMBuildSub(b, mp, ms, "dsh");
	}
	LLVMValueRef rowp[16];
	int64_t a_ks = G->a_ks; /* of the rows the micro-kernel reads */
	if (G->a_pack && G->a_ks != 1) {
		/* a half A stored along m (transpose_a): the panel is k-major,
		 * ap[k][r], filled a k at a time from mr neighbouring elements */
		EmLoop lpk, lpr;
		LLVMValueRef k = em_loop_open(E, &lpk, k64(E, 0), kcur, 1, "apack_k");
		LLVMValueRef kp = LLVMBuildMul(b, LLVMBuildAdd(b, pc, k, ""), k64(E, G->a_ks), "");
		LLVMValueRef dst = gep(E, ap, LLVMBuildMul(b, k, k64(E, mr), ""));
		/* a loop over the mr rows, for the vectorizer (left to itself,
		 * SLP converted these one element at a time in some kernels) */
		LLVMValueRef q = em_loop_open(E, &lpr, k64(E, 0), k64(E, mr), 1, "apack_r");
		LLVMValueRef rr = clamp ? smin(E, q, LLVMBuildSub(b, mrows, k64(E, 1), "")) : q;
		LLVMValueRef off = LLVMBuildAdd(
		    b, LLVMBuildMul(b, LLVMBuildAdd(b, ms, rr, ""), k64(E, G->a_ms), ""), kp, "");
		store_f(E, em_load_at(E, adt, LLVMBuildInBoundsGEP2(b, aet, Ab, &off, 1, "")),
		        gep(E, dst, q), 4);
		int w = 1;
		while (!clamp && w * 2 <= mr && w * 2 <= vw)
			w *= 2;
		close_widened(E, &lpr, w);
		em_plain_md(E, em_loop_close(E, &lpk), 1);
		for (int i = 0; i < mr; i++)
			rowp[i] = gep(E, ap, k64(E, i));
		a_ks = mr;
	} else if (G->a_pack) {
		/* a half A along k: its mr x kcur block, converted to float32
		 * into the stack panel ap (row r at r * kc) once, then read by
		 * every column tile of the micro-panel; the conversion loop
		 * vectorises */
		EmLoop lpr, lpk;
		LLVMValueRef r = em_loop_open(E, &lpr, k64(E, 0), k64(E, mr), 1, "apack_r");
		LLVMValueRef rr = clamp ? smin(E, r, LLVMBuildSub(b, mrows, k64(E, 1), "")) : r;
		LLVMValueRef off = LLVMBuildAdd(
		    b, LLVMBuildMul(b, LLVMBuildAdd(b, ms, rr, ""), k64(E, G->a_ms), ""),
		    LLVMBuildMul(b, pc, k64(E, G->a_ks), ""), "");
		LLVMValueRef src = LLVMBuildInBoundsGEP2(b, aet, Ab, &off, 1, "");
		LLVMValueRef dst = gep(E, ap, LLVMBuildMul(b, r, k64(E, G->kc), ""));
		LLVMValueRef k = em_loop_open(E, &lpk, k64(E, 0), kcur, 1, "apack_k");
		LLVMValueRef ko = LLVMBuildMul(b, k, k64(E, G->a_ks), "");
		store_f(E, em_load_at(E, adt, LLVMBuildInBoundsGEP2(b, aet, src, &ko, 1, "")),
		        gep(E, dst, k), 4);
		close_widened(E, &lpk, vw);
		em_plain_md(E, em_loop_close(E, &lpr), 1);
		for (int q = 0; q < mr; q++)
			rowp[q] = gep(E, ap, k64(E, (int64_t)q * G->kc));
		a_ks = 1;
	} else {
		for (int q = 0; q < mr; q++) {
			LLVMValueRef rr =
			    clamp ? smin(E, k64(E, q), LLVMBuildSub(b, mrows, k64(E, 1), ""))
			          : k64(E, q);
			LLVMValueRef m = LLVMBuildAdd(b, ms, rr, "");
			LLVMValueRef off =
			    LLVMBuildAdd(b, LLVMBuildMul(b, m, k64(E, G->a_ms), ""),
			                 LLVMBuildMul(b, pc, k64(E, G->a_ks), ""), "");
			rowp[q] = gep(E, Ab, off);
		}
	}
	LLVMValueRef jr = em_loop_open(E, &ljr, k64(E, 0), ncur, nr, "cols");
	LLVMValueRef ncols =
	    full_n ? k64(E, nr) : smin(E, k64(E, nr), LLVMBuildSub(b, ncur, jr, ""));
	LLVMValueRef pan = gep(E, bp,
	                       LLVMBuildMul(b, LLVMBuildUDiv(b, jr, k64(E, nr), ""),
	                                    LLVMBuildMul(b, kcur, k64(E, nr), ""), ""));

	/* the micro-kernel: k = 0..kcur-1 (kcur >= 1), accumulators in phis */
	LLVMValueRef acc[32], nacc[32];
	{
		LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
		LLVMBasicBlockRef hd = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "ukr");
		LLVMBasicBlockRef ex = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "ukr_done");
		LLVMBuildBr(b, hd);
		LLVMPositionBuilderAtEnd(b, hd);
		LLVMValueRef k = LLVMBuildPhi(b, E->i64, "k");
		LLVMValueRef z = k64(E, 0);
		LLVMAddIncoming(k, &z, &pre, 1);
		for (int i = 0; i < mr * nv; i++) {
			acc[i] = LLVMBuildPhi(b, vt, "acc");
			LLVMAddIncoming(acc[i], &zero_v, &pre, 1);
		}
		LLVMValueRef bv[8];
		LLVMValueRef kb = LLVMBuildMul(b, k, k64(E, nr), "");
		for (int v = 0; v < nv; v++)
			bv[v] = load_f(E, vt, gep(E, pan, LLVMBuildAdd(b, kb, k64(E, v * vw), "")),
			               valign);
		LLVMValueRef ka = LLVMBuildMul(b, k, k64(E, a_ks), "");
		for (int r = 0; r < mr; r++) {
			LLVMValueRef a = load_f(E, E->f32, gep(E, rowp[r], ka), 4);
			if (vw > 1) {
				LLVMValueRef ins = LLVMBuildInsertElement(
				    b, LLVMGetPoison(vt), a, LLVMConstInt(E->i32, 0, 0), "");
				LLVMValueRef mask =
				    LLVMConstNull(LLVMVectorType(E->i32, (unsigned)vw));
				a = LLVMBuildShuffleVector(b, ins, LLVMGetPoison(vt), mask,
				                           "bcast");
			}
			for (int v = 0; v < nv; v++) {
				LLVMValueRef args[3] = {a, bv[v], acc[r * nv + v]};
				nacc[r * nv + v] = math_intrinsic(b, "llvm.fma", args, 3);
			}
		}
		LLVMValueRef kn = LLVMBuildAdd(b, k, k64(E, 1), "");
		LLVMSetNSW(kn, 1);
		LLVMValueRef br =
		    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, kn, kcur, ""), hd, ex);
		em_plain_md(E, br, UKR_UNROLL);
		LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
		LLVMAddIncoming(k, &kn, &latch, 1);
		for (int i = 0; i < mr * nv; i++)
			LLVMAddIncoming(acc[i], &nacc[i], &latch, 1);
		LLVMPositionBuilderAtEnd(b, ex);
	}

	/* finish the tile */
	LLVMBasicBlockRef bjoin = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "tile_done");
	bool in_tile = false; /* the final values are in tile, not in nacc */
	if (!single_k) {
		/* K in several blocks: their sums add up in float64, in the unit's
		 * own padded mc x nc region of acc (so whole tiles stay in bounds),
		 * a row of the tile at a time through the stack (mr x nr float64
		 * sums at once would not fit the registers); the last block leaves
		 * the rounded sums in the tile */
		for (int r = 0; r < mr; r++)
			for (int v = 0; v < nv; v++)
				store_f(E, nacc[r * nv + v],
				        gep(E, tile, k64(E, (int64_t)r * nr + v * vw)), valign);
		LLVMTypeRef dt = vw > 1 ? LLVMVectorType(E->f64, (unsigned)vw) : E->f64;
		LLVMValueRef ai = LLVMBuildAdd(
		    b, LLVMBuildMul(b, u, k64(E, G->mc * G->nc), ""),
		    LLVMBuildAdd(b, LLVMBuildMul(b, ir, k64(E, G->nc), ""), jr, ""), "");
		LLVMValueRef abase = LLVMBuildInBoundsGEP2(b, E->f64, E->bufp[G->acc], &ai, 1, "");
		LLVMBasicBlockRef bnl = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "tile_acc");
		LLVMBasicBlockRef bl = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "tile_last");
		LLVMBuildCondBr(b, last, bl, bnl);
		for (int pass = 0; pass < 2; pass++) { /* 0: not the last block */
			EmLoop la;
			LLVMPositionBuilderAtEnd(b, pass ? bl : bnl);
			LLVMValueRef r = em_loop_open(E, &la, k64(E, 0), k64(E, mr), 1, "acc_row");
			LLVMValueRef trow = gep(E, tile, LLVMBuildMul(b, r, k64(E, nr), ""));
			LLVMValueRef ao = LLVMBuildMul(b, r, k64(E, G->nc), "");
			LLVMValueRef arow = LLVMBuildInBoundsGEP2(b, E->f64, abase, &ao, 1, "");
			for (int v = 0; v < nv; v++) {
				LLVMValueRef tp = gep(E, trow, k64(E, v * vw)), o = k64(E, v * vw);
				LLVMValueRef pa = LLVMBuildInBoundsGEP2(b, E->f64, arow, &o, 1, "");
				LLVMValueRef x =
				    LLVMBuildFPExt(b, load_f(E, vt, tp, valign), dt, "");
				LLVMValueRef sum = LLVMBuildFAdd(b, load_f(E, dt, pa, 8), x, "");
				if (pass) /* the last block is never the first */
					store_f(E, LLVMBuildFPTrunc(b, sum, vt, ""), tp, valign);
				else
					store_f(E, LLVMBuildSelect(b, first, x, sum, ""), pa, 8);
			}
			em_plain_md(E, em_loop_close(E, &la), 1);
			if (!pass)
				LLVMBuildBr(b, bjoin);
		}
		in_tile = true;
	}
	/* the final values of the tile: into C, or through the epilogue */
	if (!ep) {
		/* a whole tile: vector stores to C; a partial one element-wise */
		LLVMBasicBlockRef bpart = NULL;
		if (!full_m || !full_n) {
			LLVMValueRef full =
			    LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntEQ, mrows, k64(E, mr), ""),
			                 LLVMBuildICmp(b, LLVMIntEQ, ncols, k64(E, nr), ""), "");
			LLVMBasicBlockRef bfull =
			    LLVMAppendBasicBlockInContext(E->ctx, E->fn, "tile_full");
			bpart = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "tile_part");
			LLVMBuildCondBr(b, full, bfull, bpart);
			LLVMPositionBuilderAtEnd(b, bfull);
		}
		LLVMValueRef mr0 = LLVMBuildAdd(b, m0, ir, "");
		LLVMValueRef nc0 = LLVMBuildAdd(b, n0, jr, "");
		if (in_tile) { /* a row at a time */
			EmLoop lr;
			LLVMValueRef r = em_loop_open(E, &lr, k64(E, 0), k64(E, mr), 1, "full_row");
			LLVMValueRef trow = gep(E, tile, LLVMBuildMul(b, r, k64(E, nr), ""));
			LLVMValueRef crow = gep(
			    E, Cb,
			    LLVMBuildAdd(
			        b, LLVMBuildMul(b, LLVMBuildAdd(b, mr0, r, ""), k64(E, G->N), ""),
			        nc0, ""));
			for (int v = 0; v < nv; v++)
				store_f(E, load_f(E, vt, gep(E, trow, k64(E, v * vw)), valign),
				        gep(E, crow, k64(E, v * vw)), 4);
			em_plain_md(E, em_loop_close(E, &lr), 1);
		} else {
			for (int r = 0; r < mr; r++) {
				LLVMValueRef row = LLVMBuildAdd(
				    b,
				    LLVMBuildMul(b, LLVMBuildAdd(b, mr0, k64(E, r), ""),
				                 k64(E, G->N), ""),
				    nc0, "");
				for (int v = 0; v < nv; v++)
					store_f(
					    E, nacc[r * nv + v],
					    gep(E, Cb, LLVMBuildAdd(b, row, k64(E, v * vw), "")),
					    4);
			}
		}
		LLVMBuildBr(b, bjoin);
		if (bpart)
			LLVMPositionBuilderAtEnd(b, bpart);
	}
	if (ep || !full_m || !full_n) {
		EmLoop lr, lcc;
		if (!in_tile)
			for (int r = 0; r < mr; r++)
				for (int v = 0; v < nv; v++)
					store_f(E, nacc[r * nv + v],
					        gep(E, tile, k64(E, (int64_t)r * nr + v * vw)),
					        valign);
		LLVMValueRef r = em_loop_open(E, &lr, k64(E, 0), mrows, 1, "trow");
		LLVMValueRef m = LLVMBuildAdd(b, LLVMBuildAdd(b, m0, ir, ""), r, "");
		LLVMValueRef crow = gep(E, Cb,
		                        LLVMBuildAdd(b, LLVMBuildMul(b, m, k64(E, G->N), ""),
		                                     LLVMBuildAdd(b, n0, jr, ""), ""));
		LLVMValueRef trow =
		    gep(E, tile, LLVMBuildMul(b, LLVMBuildAdd(b, r, dsh, ""), k64(E, nr), ""));
		int split = -1; /* epilogue loops [split, n) cover exactly one row of N */
		LLVMValueRef R = NULL;
		if (ep) {
			int64_t inner = 1;
			for (int l = ep->nloops; l > 0 && split < 0; l--) {
				inner *= ep->loops[l - 1].extent;
				if (inner == G->N)
					split = l - 1;
			}
			/* the row of the whole [batch * M] x N result */
			R = LLVMBuildAdd(b, LLVMBuildMul(b, bi, k64(E, G->M), ""), m, "");
			if (split >= 0)
				set_vars(E, ep, 0, split, R);
		}
		LLVMValueRef cc = em_loop_open(E, &lcc, k64(E, 0), ncols, 1, "tcol");
		LLVMValueRef t = load_f(E, E->f32, gep(E, trow, cc), 4);
		if (!ep) {
			store_f(E, t, gep(E, crow, cc), 4);
		} else {
			LLVMValueRef n = LLVMBuildAdd(b, LLVMBuildAdd(b, n0, jr, ""), cc, "");
			if (split >= 0)
				set_vars(E, ep, split, ep->nloops, n);
			else
				set_vars(
				    E, ep, 0, ep->nloops,
				    LLVMBuildAdd(b, LLVMBuildMul(b, R, k64(E, G->N), ""), n, ""));
			em_memo_reset(E);
			E->tile_buf = G->c;
			E->tile_val = t;
			E->vw = vw;
			for (int i = 0; i < ep->nstores; i++) {
				LLVMValueRef v = em_expr(E, ep->stores[i].value);
				if (!v) {
					E->tile_buf = -1;
					return false;
				}
				em_store(E, ep->stores[i].buf, ep->stores[i].idx, v);
			}
			E->tile_buf = -1;
			E->tile_val = NULL;
			em_memo_reset(E);
			for (int l = 0; l < ep->nloops; l++)
				E->var[ep->loops[l].var] = NULL;
		}
		LLVMValueRef br = em_loop_close(E, &lcc);
		if (ep)
			/* the epilogue's math wants vectors: a loop until the
			 * vectorizer widens it (a full tile's constant ncols
			 * would otherwise be unrolled first, and SLP leaves
			 * e.g. a cast to float16 one element at a time) */
			em_vector_md(E, br, vw, 1);
		else
			em_plain_md(E, br, 1); /* only edge tiles come here */
		em_plain_md(E, em_loop_close(E, &lr), 1);
		LLVMBuildBr(b, bjoin);
	}
	LLVMPositionBuilderAtEnd(b, bjoin);
	em_plain_md(E, em_loop_close(E, &ljr), 1);
	em_plain_md(E, em_loop_close(E, &li), 1);
	em_plain_md(E, em_loop_close(E, &lk), 1);
	em_plain_md(E, em_loop_close(E, &lu), 1);
	return true;
}
