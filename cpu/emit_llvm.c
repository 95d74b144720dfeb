/* emit_llvm.c - LoopNest -> LLVM module with the kcs-cpu-v1 ABI.
 *
 * Per stage s:
 *   internal void body_s(ptr noalias b0, ..., i64 lo, i64 hi)
 *       the loop nest; the parallel loop runs [lo, hi); the innermost loop
 *       carries llvm.loop vectorize/interleave metadata from the schedule
 *   internal i32 task_s(ptr closure, i64 t, i64 n)
 *       unpacks the buffer pointers, computes task t's share of the
 *       parallel loop and calls body_s
 * and one exported entry
 *   i32 SYMBOL(const KcsRuntime *rt, void *const *args, const int64_t *dims)
 * that copies args into a closure on its stack and, stage after stage,
 * calls rt->parallel_for(ctx, task_s, closure, ntasks) (or task_s inline
 * when rt is NULL or ntasks is 1), returning the first non-zero result.
 * A fused group (fuse.c) is one region: its lead's body runs the shared
 * loops and, inside them, every member's remaining loops in turn; `local`
 * buffers are allocas in that body, never allocated by the entry.
 * Values and their arithmetic are emit_expr.c's.
 */
#include <llvm-c/DebugInfo.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
/* kcs-cpu-v1 KcsRuntime field offsets (LP64) */
#define RT_VERSION 0
#define RT_CTX 8
#define RT_PARALLEL_FOR 16
#define RT_ALLOC 24
#define RT_FREE 32
#define WS_ALIGN 64
#define KC_ERR_NOMEM (-2) /* a workspace could not be allocated */
#define RT_NUM_THREADS 40
#define CHUNK_ALIGN 64 /* elements; task boundaries of a flat loop */

/* Innermost bodies: a stage's stores; a register reduction's step; an
 * outer-axis reduction's accumulator init, step and final store. */
enum { EB_STORES, EB_REG_STEP, EB_ACC_INIT, EB_ACC_STEP, EB_ACC_FINAL };
/* Whether LLVM may unroll a vectorised loop further: not once it runs more
 * than LN_FULL_UNROLL_MAX vector steps (of width x interleave elements).
 * The schedule's unroll is the interleave count already; LLVM's full unroll
 * of a constant-trip loop on top of it (a 768-wide layernorm row: 12 and 24
 * steps) let GVN keep each loaded row in registers across the stage's passes,
 * which spilled: LayerNorm 4096x768 took 1.0-2.0 ms instead of 0.6-0.9 ms,
 * 128x768 5% longer. Short rows (softmax's 128: 2 steps) still unroll. */
#define LN_FULL_UNROLL_MAX 8
static bool
unroll_off(const LnLoop *lp)
{
	int step = lp->width * ((lp->kind & LNL_UNROLLED) ? lp->unroll : 1);
	return (lp->kind & LNL_VECTORIZED) && lp->width > 1 &&
	       lp->extent / step > LN_FULL_UNROLL_MAX;
}

/* !llvm.loop !{self, vectorize.enable, vectorize.width, interleave.count,
 * unroll.disable (see unroll_off)} */
static void
loop_md(Em *E, LLVMValueRef br, const LnLoop *lp, bool keep)
{
	LLVMMetadataRef ops[5], tmp, node;
	int n = 1;

	if (!(lp->kind & (LNL_VECTORIZED | LNL_UNROLLED)))
		return;
	tmp = LLVMTemporaryMDNode(E->ctx, NULL, 0);
	ops[0] = tmp;
	if (lp->kind & LNL_VECTORIZED) {
		LLVMMetadataRef en[2] = {
		    LLVMMDStringInContext2(E->ctx, "llvm.loop.vectorize.enable", 26),
		    LLVMValueAsMetadata(LLVMConstInt(E->i1, lp->width > 1, 0))};
		LLVMMetadataRef wd[2] = {
		    LLVMMDStringInContext2(E->ctx, "llvm.loop.vectorize.width", 25),
		    LLVMValueAsMetadata(LLVMConstInt(E->i32, (unsigned)lp->width, 0))};
		ops[n++] = LLVMMDNodeInContext2(E->ctx, en, 2);
		ops[n++] = LLVMMDNodeInContext2(E->ctx, wd, 2);
	}
	{
		LLVMMetadataRef il[2] = {
		    LLVMMDStringInContext2(E->ctx, "llvm.loop.interleave.count", 26),
		    LLVMValueAsMetadata(LLVMConstInt(
		        E->i32, (lp->kind & LNL_UNROLLED) ? (unsigned)lp->unroll : 1, 0))};
		ops[n++] = LLVMMDNodeInContext2(E->ctx, il, 2);
	}
	if (keep || unroll_off(lp)) {
		LLVMMetadataRef ud = LLVMMDStringInContext2(E->ctx, "llvm.loop.unroll.disable", 24);
		ops[n++] = LLVMMDNodeInContext2(E->ctx, &ud, 1);
	}
	node = LLVMMDNodeInContext2(E->ctx, ops, (size_t)n);
	LLVMMetadataReplaceAllUsesWith(tmp, node);
	LLVMSetMetadata(br, LLVMGetMDKindIDInContext(E->ctx, "llvm.loop", 9),
	                LLVMMetadataAsValue(E->ctx, node));
}

/* The accumulator type of reduction stage st: its acc dtype, chosen by
 * lowering (float32 sums of long rows in f64: see LN_F32_ACC_MAX). */
static LLVMTypeRef
acc_type(Em *E, const LnStage *st)
{
	return em_ctype(E, st->acc);
}

/* The identity of st's combining op, in its accumulator type. */
static LLVMValueRef
red_identity(Em *E, const LnStage *st)
{
	IrOp op = st->red_op;
	KcDtype dt = st->stores[0].value->dtype;
	LLVMTypeRef t = acc_type(E, st);
	bool fl = em_is_float(dt), sg = em_is_signed(dt);
	unsigned w = fl ? 0 : LLVMGetIntTypeWidth(t);

	if (op == IR_OP_ADD)
		return LLVMConstNull(t);
	if (op == IR_OP_MUL)
		return fl ? LLVMConstReal(t, 1) : LLVMConstInt(t, 1, 0);
	bool max = op == IR_OP_MAXIMUM;
	if (fl)
		return LLVMConstReal(t, max ? -1.0 / 0.0 : 1.0 / 0.0);
	if (sg) /* INT_MIN for max, INT_MAX for min */
		return LLVMConstInt(t, max ? 1ull << (w - 1) : (1ull << (w - 1)) - 1, 0);
	return max ? LLVMConstNull(t) : LLVMConstAllOnes(t);
}

/* acc (op) v for a reduction; float add/mul carry the reassoc fast-math
 * flag so the vectoriser may keep partial sums in vector lanes; float
 * max/min are llvm.maximum/minimum (NaN-propagating, as numpy). */
static LLVMValueRef
red_combine(Em *E, IrOp op, KcDtype dt, LLVMValueRef acc, LLVMValueRef v)
{
	LLVMBuilderRef b = E->b;
	LLVMValueRef r, a[2] = {acc, v};

	if (em_is_float(dt)) {
		if (op == IR_OP_ADD || op == IR_OP_MUL) {
			r = op == IR_OP_ADD ? LLVMBuildFAdd(b, acc, v, "")
			                    : LLVMBuildFMul(b, acc, v, "");
			LLVMSetFastMathFlags(r, LLVMFastMathAllowReassoc);
			return r;
		}
		/* nsz: which zero a max of -0 and +0 returns is left open (numpy's
		 * max reduction does not order them either); NaN still wins. On
		 * x86 this halves the lowering (no sign-of-zero blends). */
		r = math_intrinsic(b, op == IR_OP_MAXIMUM ? "llvm.maximum" : "llvm.minimum", a, 2);
		LLVMSetFastMathFlags(r, LLVMFastMathNoSignedZeros);
		return r;
	}
	if (op == IR_OP_ADD)
		return LLVMBuildAdd(b, acc, v, "");
	if (op == IR_OP_MUL)
		return LLVMBuildMul(b, acc, v, "");
	return em_maxmin(E, op == IR_OP_MAXIMUM, dt, acc, v);
}

/* An alloca in the current function's entry block. */
static LLVMValueRef
entry_alloca(Em *E, LLVMTypeRef t)
{
	LLVMBuilderRef b = LLVMCreateBuilderInContext(E->ctx);
	LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(E->fn);
	LLVMValueRef first = LLVMGetFirstInstruction(entry);
	if (first)
		LLVMPositionBuilderBefore(b, first);
	else
		LLVMPositionBuilderAtEnd(b, entry);
	LLVMValueRef a = LLVMBuildAlloca(b, t, "acc");
	LLVMDisposeBuilder(b);
	return a;
}

static bool emit_loops(Em *E, const LnStage *st, int level, LLVMValueRef lo, LLVMValueRef hi);

/* An outer-axis reduction's step value at the current vars, in the
 * accumulator type: the stored value, or while a jammed loop is emitted
 * (E->jam) the sum (red_op) of its values at rows jam_base + 0..jam-1 in
 * that order, without fast-math flags: bitwise the same in the vector
 * loop and its scalar remainder, so for any split among tasks. */
static LLVMValueRef
step_value(Em *E, const LnStage *st, LLVMTypeRef at)
{
	const LnStore *sto = &st->stores[0];
	KcDtype dt = sto->value->dtype;
	LLVMValueRef sum = NULL;
	int n = E->jam ? E->jam : 1;

	for (int r = 0; r < n; r++) {
		if (E->jam)
			E->var[E->jam_var] = LLVMBuildAdd(E->b, E->jam_base,
			                                  LLVMConstInt(E->i64, (unsigned)r, 0), "");
		em_memo_reset(E);
		LLVMValueRef v = em_expr(E, sto->value);
		if (!v)
			return NULL;
		if (at != LLVMTypeOf(v))
			v = LLVMBuildFPExt(E->b, v, at, "");
		if (!sum)
			sum = v;
		else if (em_is_float(dt) && st->red_op == IR_OP_ADD)
			sum = LLVMBuildFAdd(E->b, sum, v, "");
		else if (em_is_float(dt) && st->red_op == IR_OP_MUL)
			sum = LLVMBuildFMul(E->b, sum, v, "");
		else
			sum = red_combine(E, st->red_op, dt, sum, v);
	}
	if (E->jam)
		E->var[E->jam_var] = E->jam_base;
	return sum;
}

/* The jammed reduction loop (level) of an outer-axis reduction in its
 * EB_ACC_STEP pass: rows [0, full) jam at a time, then [full, extent) one
 * at a time, the loops inside it as usual. */
static bool
emit_jam(Em *E, const LnStage *st, int level, LLVMValueRef lo, LLVMValueRef hi)
{
	const LnLoop *lp = &st->loops[level];
	int64_t full = lp->extent / st->jam * st->jam;
	EmLoop l;
	bool ok = true;

	if (full > 0) {
		E->jam_base =
		    em_loop_open(E, &l, LLVMConstInt(E->i64, 0, 0),
		                 LLVMConstInt(E->i64, (unsigned long long)full, 0), st->jam, "jam");
		E->jam_var = lp->var;
		E->jam = st->jam;
		E->var[lp->var] = E->jam_base;
		ok = emit_loops(E, st, level + 1, lo, hi);
		E->jam = 0;
		em_plain_md(E, em_loop_close(E, &l), 1);
	}
	if (ok && full < lp->extent) {
		E->var[lp->var] = em_loop_open(
		    E, &l, LLVMConstInt(E->i64, (unsigned long long)full, 0),
		    LLVMConstInt(E->i64, (unsigned long long)lp->extent, 0), 1, "jam_rest");
		ok = emit_loops(E, st, level + 1, lo, hi);
		em_plain_md(E, em_loop_close(E, &l), 1);
	}
	E->var[lp->var] = NULL;
	return ok;
}

/* Inside the shared loops of a fused group (fuse.c) led by lead: each
 * member's remaining loops in turn, its shared loop vars bound to the
 * lead's. */
static bool
emit_group_rows(Em *E, const LnStage *lead, LLVMValueRef lo, LLVMValueRef hi)
{
	int g = E->group;
	E->group = -1;
	for (int k = 0; k < lead->fuse_count; k++) {
		const LnStage *st = lead + k;
		for (int l = 0; l < lead->fuse_outer; l++)
			E->var[st->loops[l].var] = E->var[lead->loops[l].var];
		if (!emit_loops(E, st, lead->fuse_outer, lo, hi))
			return false;
	}
	E->group = g;
	return true;
}

/* Emits loops[level..] around the stores; the parallel loop runs [lo, hi).
 * In a reduction stage, the accumulator is set to the identity before the
 * first reduction loop, combined in the innermost body and stored after
 * the reduction loops. */
static bool
emit_loops(Em *E, const LnStage *st, int level, LLVMValueRef lo, LLVMValueRef hi)
{
	const LnLoop *lp;
	LLVMBasicBlockRef pre, header, exit;
	LLVMValueRef start, end, phi, next, br;

	if (E->group >= 0 && st == &E->ln->stages[E->group] && level == st->fuse_outer &&
	    E->body == EB_STORES)
		return emit_group_rows(E, st, lo, hi);
	/* a tiled stage's last two loops, a permuted copy's innermost one
	 * (fuse.c), unless they are a fused group's shared loops (E->group is
	 * set while those are emitted) */
	if (st->tile > 0 && level == st->nloops - 2 && E->group < 0 && E->body == EB_STORES)
		return emit_tile(E, st, lo, hi);
	if (st->stream && level == st->nloops - 1 && E->group < 0 && E->body == EB_STORES)
		return emit_rows(E, st, lo, hi);
	if (st->ntmask && level == st->nloops - 1 && E->group < 0 && E->body == EB_STORES)
		return emit_stream(E, st, lo, hi);
	if (level == st->nloops) { /* every innermost body: the math call width */
		const LnLoop *in = level ? &st->loops[level - 1] : NULL;
		E->vw = in && (in->kind & LNL_VECTORIZED) && in->width > 1 ? in->width : 1;
	}
	if (E->body == EB_ACC_STEP && st->jam > 1 && level == st->nloops - st->ninner - 1 &&
	    !E->jam)
		return emit_jam(E, st, level, lo, hi);
	if (st->nred > 0 && level == ln_red_begin(st) && E->body == EB_STORES && st->ninner > 0) {
		/* outer-axis: init acc, acc op= value, store acc (loops over
		 * the inner spatial dims, which vectorise) */
		int in = st->nloops - st->ninner;
		bool ok;
		E->body = EB_ACC_INIT;
		ok = emit_loops(E, st, in, lo, hi);
		E->body = EB_ACC_STEP;
		ok = ok && emit_loops(E, st, level, lo, hi);
		E->body = EB_ACC_FINAL;
		ok = ok && emit_loops(E, st, in, lo, hi);
		E->body = EB_STORES;
		return ok;
	}
	if (level == st->nloops && st->nred > 0 && E->body != EB_STORES && E->body != EB_REG_STEP) {
		const LnStore *sto = &st->stores[0];
		KcDtype dt = sto->value->dtype;
		LLVMTypeRef at = acc_type(E, st);
		LLVMValueRef p = em_elem_ptr(E, st->accbuf, sto->idx), a, r;
		LLVMTypeRef mt = em_stype(E, E->ln->bufs[st->accbuf].dtype);
		bool wide = mt != at; /* a bool accumulator is stored as i8 */
		KC_ASSERT(!wide || (dt == KC_DT_BOOL && mt == E->i8));
		if (E->body == EB_ACC_INIT) {
			a = red_identity(E, st);
			LLVMBuildStore(E->b, wide ? LLVMBuildZExt(E->b, a, mt, "") : a, p);
			return true;
		}
		a = LLVMBuildLoad2(E->b, mt, p, "");
		if (wide)
			a = LLVMBuildTrunc(E->b, a, at, "");
		if (E->body == EB_ACC_FINAL) {
			r = at != em_ctype(E, dt) ? LLVMBuildFPTrunc(E->b, a, em_ctype(E, dt), "")
			                          : a;
			em_store(E, sto->buf, sto->idx, r);
			return true;
		}
		LLVMValueRef v = step_value(E, st, at);
		if (!v)
			return false;
		r = red_combine(E, st->red_op, dt, a, v);
		LLVMBuildStore(E->b, wide ? LLVMBuildZExt(E->b, r, mt, "") : r, p);
		return true;
	}
	if (st->nred > 0 && level == ln_red_begin(st) && E->body == EB_STORES) {
		const LnStore *sto = &st->stores[0];
		KcDtype dt = sto->value->dtype;
		LLVMTypeRef at = acc_type(E, st);
		LLVMValueRef acc = entry_alloca(E, at);
		LLVMBuildStore(E->b, red_identity(E, st), acc);
		E->acc = acc;
		E->body = EB_REG_STEP;
		bool ok = emit_loops(E, st, level, lo, hi);
		E->acc = NULL;
		E->body = EB_STORES;
		if (!ok)
			return false;
		LLVMValueRef r = LLVMBuildLoad2(E->b, at, acc, "");
		if (at != em_ctype(E, dt))
			r = LLVMBuildFPTrunc(E->b, r, em_ctype(E, dt), "");
		if (E->ln->bufs[sto->buf].dtype != dt) /* rfactor's combine: acc dtype */
			r = em_cast(E, r, dt, E->ln->bufs[sto->buf].dtype);
		em_store(E, sto->buf, sto->idx, r);
		return true;
	}
	if (level == st->nloops && E->body == EB_REG_STEP) {
		const LnStore *sto = &st->stores[0];
		KcDtype dt = sto->value->dtype;
		em_memo_reset(E);
		LLVMValueRef v = em_expr(E, sto->value);
		if (!v)
			return false;
		LLVMTypeRef at = acc_type(E, st);
		LLVMValueRef a = LLVMBuildLoad2(E->b, at, E->acc, "");
		if (at != LLVMTypeOf(v))
			v = LLVMBuildFPExt(E->b, v, at, "");
		LLVMBuildStore(E->b, red_combine(E, st->red_op, dt, a, v), E->acc);
		return true;
	}
	if (level == st->nloops) {
		em_memo_reset(E);
		for (int i = 0; i < st->nstores; i++) {
			LLVMValueRef v = em_expr(E, st->stores[i].value);
			if (!v)
				return false;
			em_store(E, st->stores[i].buf, st->stores[i].idx, v);
		}
		return true;
	}
	lp = &st->loops[level];
	bool par = (lp->kind & LNL_PARALLEL) != 0;
	start = par ? lo : LLVMConstInt(E->i64, 0, 0);
	end = par ? hi : LLVMConstInt(E->i64, (unsigned long long)lp->extent, 0);
	pre = LLVMGetInsertBlock(E->b);
	header = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "loop");
	exit = LLVMAppendBasicBlockInContext(E->ctx, E->fn, "exit");
	if (par)
		LLVMBuildCondBr(E->b, LLVMBuildICmp(E->b, LLVMIntSLT, start, end, ""), header,
		                exit);
	else
		LLVMBuildBr(E->b, header);
	LLVMPositionBuilderAtEnd(E->b, header);
	phi = LLVMBuildPhi(E->b, E->i64, "");
	LLVMAddIncoming(phi, &start, &pre, 1);
	E->var[lp->var] = phi;
	if (!emit_loops(E, st, level + 1, lo, hi))
		return false;
	next = LLVMBuildAdd(E->b, phi, LLVMConstInt(E->i64, 1, 0), "");
	LLVMSetNUW(next, 1);
	LLVMSetNSW(next, 1);
	br = LLVMBuildCondBr(E->b, LLVMBuildICmp(E->b, LLVMIntSLT, next, end, ""), header, exit);
	loop_md(E, br, lp, false);
	LLVMBasicBlockRef latch = LLVMGetInsertBlock(E->b);
	LLVMAddIncoming(phi, &next, &latch, 1);
	LLVMPositionBuilderAtEnd(E->b, exit);
	E->var[lp->var] = NULL;
	return true;
}

/* Adds the enum attribute `name` at index idx of fn. */
static void
add_attr(Em *E, LLVMValueRef fn, unsigned idx, const char *name)
{
	unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
	KC_ASSERT(kind != 0);
	LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(E->ctx, kind, 0));
}

/* The per-stage body function (buffers noalias; lo, hi of the parallel loop). */
static LLVMValueRef
emit_body(Em *E, const LnStage *st, const char *symbol)
{
	int nb = E->ln->nbufs;
	LLVMTypeRef *params = ARENA_ARRAY(E->ln->arena, LLVMTypeRef, nb + 2);
	char name[256];

	for (int i = 0; i < nb; i++)
		params[i] = E->ptr;
	params[nb] = E->i64;
	params[nb + 1] = E->i64;
	snprintf(name, sizeof name, "%s.%s.body", symbol, st->name);
	LLVMValueRef fn =
	    LLVMAddFunction(E->mod, name, LLVMFunctionType(E->vd, params, (unsigned)nb + 2, 0));
	LLVMSetLinkage(fn, LLVMInternalLinkage);
	add_attr(E, fn, LLVMAttributeFunctionIndex, "nounwind");
	/* noinline: the body is optimised once, not again inside the task
	 * after inlining (a softmax compiles in 20 ms instead of 33; a call
	 * per task costs nothing measurable) */
	add_attr(E, fn, LLVMAttributeFunctionIndex, "noinline");
	/* no-builtins: a copy or fill loop stays a loop, not a memcpy/memset
	 * call (the object imports libm names only: docs/abi.md) */
	LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
	                        LLVMCreateStringAttribute(E->ctx, "no-builtins", 11, "", 0));
	/* stackrealign: a body that spills vectors spills them to aligned
	 * slots whatever the stack's alignment at the call. Without it, LLVM
	 * kept the ABI's 16-byte alignment and stored AVX-512 spills with
	 * vmovups: in the processes (and threads) whose stack happened to sit
	 * off a 64-byte boundary, every spill and reload split a cache line,
	 * and a Sigmoid calling its outlined exp per vector ran 900 us
	 * instead of 440 us, from one run of the same binary to the next. */
	em_realign_stack(E, fn);
	for (int i = 0; i < nb; i++) {
		add_attr(E, fn, (unsigned)i + 1, "noalias");
		add_attr(E, fn, (unsigned)i + 1, "nocapture");
		E->bufp[i] = LLVMGetParam(fn, (unsigned)i);
	}
	E->fn = fn;
	LLVMPositionBuilderAtEnd(E->b, LLVMAppendBasicBlockInContext(E->ctx, fn, "entry"));
	for (int i = 0; i < nb; i++) { /* a fused group's row blocks: the stack */
		const LnBuf *lb = &E->ln->bufs[i];
		if (!lb->local)
			continue;
		E->bufp[i] = LLVMBuildArrayAlloca(
		    E->b, em_stype(E, lb->dtype),
		    LLVMConstInt(E->i64, (unsigned long long)(lb->numel ? lb->numel : 1), 0),
		    "row");
		LLVMSetAlignment(E->bufp[i], WS_ALIGN);
	}
	LLVMValueRef lo = LLVMGetParam(fn, (unsigned)nb), hi = LLVMGetParam(fn, (unsigned)nb + 1);
	E->group = st->fuse_count > 1 ? (int)(st - E->ln->stages) : -1;
	bool ok = st->gemm ? emit_gemm(E, st, lo, hi) : emit_loops(E, st, 0, lo, hi);
	E->group = -1;
	if (!ok)
		return NULL;
	if (E->fence) /* order non-temporal stores before the region's end */
		LLVMBuildFence(E->b, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
	E->fence = false;
	LLVMBuildRetVoid(E->b);
	return fn;
}

/* i32 (ptr closure, i64 task, i64 ntasks): KcsTaskFn. */
static LLVMTypeRef
task_type(Em *E)
{
	LLVMTypeRef p[3] = {E->ptr, E->i64, E->i64};
	return LLVMFunctionType(E->i32, p, 3, 0);
}

/* The loop whose range tasks share (0 when none is parallel: unused). */
static int
par_loop(const LnStage *st)
{
	for (int l = 0; l < st->nloops; l++)
		if (st->loops[l].kind & LNL_PARALLEL)
			return l;
	return 0;
}

/* The per-stage task: task t of n runs its share of the parallel loop. */
static LLVMValueRef
emit_task(Em *E, const LnStage *st, LLVMValueRef body, const char *symbol)
{
	int nb = E->ln->nbufs;
	LLVMValueRef *args = ARENA_ARRAY(E->ln->arena, LLVMValueRef, nb + 2);
	char name[256];
	LLVMBuilderRef b = E->b;
	int p = par_loop(st);
	int64_t e0 = st->loops[p].extent;

	snprintf(name, sizeof name, "%s.%s.task", symbol, st->name);
	LLVMValueRef fn = LLVMAddFunction(E->mod, name, task_type(E));
	LLVMSetLinkage(fn, LLVMInternalLinkage);
	add_attr(E, fn, LLVMAttributeFunctionIndex, "nounwind");
	LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(E->ctx, fn, "entry"));
	LLVMValueRef clo = LLVMGetParam(fn, 0), t = LLVMGetParam(fn, 1), n = LLVMGetParam(fn, 2);
	for (int i = 0; i < nb; i++) {
		LLVMValueRef idx = LLVMConstInt(E->i64, (unsigned long long)i, 0);
		LLVMValueRef slot = LLVMBuildInBoundsGEP2(b, E->ptr, clo, &idx, 1, "");
		args[i] = LLVMBuildLoad2(b, E->ptr, slot, "");
	}
	LLVMValueRef E0 = LLVMConstInt(E->i64, (unsigned long long)e0, 0);
	LLVMValueRef t1 = LLVMBuildAdd(b, t, LLVMConstInt(E->i64, 1, 0), "");
	LLVMValueRef lo = LLVMBuildSDiv(b, LLVMBuildMul(b, t, E0, ""), n, "");
	LLVMValueRef hi = LLVMBuildSDiv(b, LLVMBuildMul(b, t1, E0, ""), n, "");
	/* keep task boundaries vector-aligned */
	if (p == st->nloops - 1 && !st->gemm && st->fuse_count <= 1) {
		LLVMValueRef mask = LLVMConstInt(E->i64, ~(unsigned long long)(CHUNK_ALIGN - 1), 1);
		lo = LLVMBuildAnd(b, lo, mask, "");
		hi = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, t1, n, ""), E0,
		                     LLVMBuildAnd(b, hi, mask, ""), "");
	}
	args[nb] = lo;
	args[nb + 1] = hi;
	LLVMBuildCall2(b, LLVMGlobalGetValueType(body), body, args, (unsigned)nb + 2, "");
	LLVMBuildRet(b, LLVMConstInt(E->i32, 0, 0));
	return fn;
}

/* Loads a KcsRuntime field at byte offset off. */
static LLVMValueRef
rt_field(Em *E, LLVMValueRef rt, int off, LLVMTypeRef t)
{
	LLVMValueRef o = LLVMConstInt(E->i64, (unsigned long long)off, 0);
	LLVMValueRef p = LLVMBuildInBoundsGEP2(E->b, E->i8, rt, &o, 1, "");
	return LLVMBuildLoad2(E->b, t, p, "");
}

/* Internal helpers of the entry:
 *   ptr SYMBOL.ws_alloc(ptr rt, i64 bytes)  rt->alloc(ctx, bytes, 64), or
 *                                           malloc when rt or rt->alloc is NULL
 *   void SYMBOL.ws_free(ptr rt, ptr p)      rt->free(ctx, p), or free */
static void
emit_ws_helpers(Em *E, const char *symbol, LLVMValueRef *alloc_fn, LLVMValueRef *free_fn)
{
	LLVMBuilderRef b = E->b;
	char name[256];
	LLVMTypeRef malloc_ty = LLVMFunctionType(E->ptr, &E->i64, 1, 0);
	LLVMTypeRef free_ty = LLVMFunctionType(E->vd, &E->ptr, 1, 0);
	LLVMValueRef mal = LLVMGetNamedFunction(E->mod, "malloc");
	LLVMValueRef fre = LLVMGetNamedFunction(E->mod, "free");
	if (!mal)
		mal = LLVMAddFunction(E->mod, "malloc", malloc_ty);
	if (!fre)
		fre = LLVMAddFunction(E->mod, "free", free_ty);

	for (int which = 0; which < 2; which++) {
		LLVMTypeRef pt[2] = {E->ptr, which ? E->ptr : E->i64};
		LLVMTypeRef fty = LLVMFunctionType(which ? E->vd : E->ptr, pt, 2, 0);
		snprintf(name, sizeof name, "%s.%s", symbol, which ? "ws_free" : "ws_alloc");
		LLVMValueRef fn = LLVMAddFunction(E->mod, name, fty);
		LLVMSetLinkage(fn, LLVMInternalLinkage);
		add_attr(E, fn, LLVMAttributeFunctionIndex, "nounwind");
		LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(E->ctx, fn, "entry");
		LLVMBasicBlockRef hasrt = LLVMAppendBasicBlockInContext(E->ctx, fn, "rt");
		LLVMBasicBlockRef viart = LLVMAppendBasicBlockInContext(E->ctx, fn, "via_rt");
		LLVMBasicBlockRef libc = LLVMAppendBasicBlockInContext(E->ctx, fn, "libc");
		LLVMValueRef rt = LLVMGetParam(fn, 0), x = LLVMGetParam(fn, 1);
		LLVMPositionBuilderAtEnd(b, entry);
		LLVMBuildCondBr(b, LLVMBuildIsNull(b, rt, ""), libc, hasrt);
		LLVMPositionBuilderAtEnd(b, hasrt);
		LLVMValueRef f = rt_field(E, rt, which ? RT_FREE : RT_ALLOC, E->ptr);
		LLVMBuildCondBr(b, LLVMBuildIsNull(b, f, ""), libc, viart);
		LLVMPositionBuilderAtEnd(b, viart);
		LLVMValueRef cx = rt_field(E, rt, RT_CTX, E->ptr);
		if (which) {
			LLVMTypeRef ft[2] = {E->ptr, E->ptr};
			LLVMValueRef a[2] = {cx, x};
			LLVMBuildCall2(b, LLVMFunctionType(E->vd, ft, 2, 0), f, a, 2, "");
			LLVMBuildRetVoid(b);
		} else {
			LLVMTypeRef ft[3] = {E->ptr, E->i64, E->i64};
			LLVMValueRef a[3] = {cx, x, LLVMConstInt(E->i64, WS_ALIGN, 0)};
			LLVMBuildRet(
			    b, LLVMBuildCall2(b, LLVMFunctionType(E->ptr, ft, 3, 0), f, a, 3, ""));
		}
		LLVMPositionBuilderAtEnd(b, libc);
		if (which) {
			LLVMBuildCall2(b, free_ty, fre, &x, 1, "");
			LLVMBuildRetVoid(b);
		} else {
			LLVMBuildRet(b, LLVMBuildCall2(b, malloc_ty, mal, &x, 1, ""));
		}
		*(which ? free_fn : alloc_fn) = fn;
	}
}

KcStatus
emit_module(const LoopNest *ln, LLVMModuleRef mod, const char *symbol, KcErr *err)
{
	Em E0 = {0}, *E = &E0;
	LLVMValueRef *tasks;
	KcStatus st = KC_OK;

	E->ln = ln;
	E->mod = mod;
	E->ctx = LLVMGetModuleContext(mod);
	E->err = err;
	E->tile_buf = -1;
	E->group = -1;
	E->b = LLVMCreateBuilderInContext(E->ctx);
	E->i1 = LLVMInt1TypeInContext(E->ctx);
	E->i8 = LLVMInt8TypeInContext(E->ctx);
	E->i16 = LLVMInt16TypeInContext(E->ctx);
	E->i32 = LLVMInt32TypeInContext(E->ctx);
	E->i64 = LLVMInt64TypeInContext(E->ctx);
	E->f32 = LLVMFloatTypeInContext(E->ctx);
	E->f64 = LLVMDoubleTypeInContext(E->ctx);
	E->ptr = LLVMPointerTypeInContext(E->ctx, 0);
	E->vd = LLVMVoidTypeInContext(E->ctx);
	E->bufp = ARENA_ARRAY(ln->arena, LLVMValueRef, ln->nbufs + 1);
	E->var = ARENA_ARRAY(ln->arena, LLVMValueRef, ln->nvars + 1);
	E->memo = ARENA_ARRAY(ln->arena, LLVMValueRef, ln->nexprs + 1);
	E->memo_at = ARENA_ARRAY(ln->arena, int, ln->nexprs + 1);
	E->memo_gen = 1; /* memo_at starts at 0: nothing memoised */
	E->mark = ARENA_ARRAY(ln->arena, int, ln->nexprs + 1);
	tasks = ARENA_ARRAY(ln->arena, LLVMValueRef, ln->nstages + 1);

	/* Each region's body takes every buffer (a parameter with its
	 * attributes) and its task loads every one from the closure: the
	 * module holds at least that many values, so that floor is checked
	 * against the budget before any function is built (compile.c counts
	 * the module once emitted). */
	int64_t regions = 0;
	for (int s = 0; s < ln->nstages; s++) {
		const LnStage *sg = &ln->stages[s];
		bool empty = false;
		for (int l = 0; l < sg->nloops; l++)
			empty |= sg->loops[l].extent == 0;
		regions += !empty && sg->fused_into < 0 && !sg->fused;
	}
	ln->work->n[KC_WORK_EMIT_INSNS] = regions * 3 * (int64_t)ln->nbufs;
	if ((st = kc_work_check(ln->work, KC_WORK_EMIT_INSNS, err)) != KC_OK)
		goto done;

	int nmath = 0;
	for (int s = 0; s < ln->nstages; s++) {
		E->mark_gen++; /* a node shared by two stages is emitted in each */
		for (int i = 0; i < ln->stages[s].nstores; i++)
			nmath += em_count_math(E, ln->stages[s].stores[i].value);
	}
	E->math_inline = nmath <= MATH_INLINE_MAX;

	for (int s = 0; s < ln->nstages; s++) {
		const LnStage *sg = &ln->stages[s];
		bool empty = false;
		for (int l = 0; l < sg->nloops; l++)
			empty |= sg->loops[l].extent == 0;
		/* zero elements: no code (inner loops assume trips); a fused GEMM
		 * epilogue runs in its GEMM; a fused row-group member in its
		 * lead's body */
		if (empty || sg->fused_into >= 0 || sg->fused) {
			tasks[s] = NULL;
			continue;
		}
		LLVMValueRef body = emit_body(E, sg, symbol);
		if (!body) {
			st = err->status ? err->status
			                 : kc_fail(err, KC_CODEGEN, "emit", "stage failed");
			goto done;
		}
		tasks[s] = emit_task(E, sg, body, symbol);
	}

	/* the exported entry */
	LLVMTypeRef ep[3] = {E->ptr, E->ptr, E->ptr};
	LLVMValueRef fn = LLVMAddFunction(mod, symbol, LLVMFunctionType(E->i32, ep, 3, 0));
	LLVMBuilderRef b = E->b;
	add_attr(E, fn, LLVMAttributeFunctionIndex, "nounwind");
	E->fn = fn;
	LLVMValueRef rt = LLVMGetParam(fn, 0), args = LLVMGetParam(fn, 1);
	LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(E->ctx, fn, "entry");
	LLVMBasicBlockRef hasrt = LLVMAppendBasicBlockInContext(E->ctx, fn, "rt");
	LLVMBasicBlockRef badv = LLVMAppendBasicBlockInContext(E->ctx, fn, "bad_version");
	LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(E->ctx, fn, "run");
	LLVMPositionBuilderAtEnd(b, entry);
	LLVMValueRef clo = LLVMBuildArrayAlloca(
	    b, E->ptr, LLVMConstInt(E->i32, (unsigned)ln->nbufs + 1, 0), "closure");
	LLVMValueRef retv = LLVMBuildAlloca(b, E->i32, "ret");
	int nws = 0;
	for (int i = 0; i < ln->nbufs; i++) {
		LLVMValueRef p, idx;
		if (ln->bufs[i].arg < 0) { /* a workspace: allocated below */
			p = LLVMConstNull(E->ptr);
			nws += !ln->bufs[i].local;
		} else {
			idx = LLVMConstInt(E->i64, (unsigned long long)ln->bufs[i].arg, 0);
			p = LLVMBuildLoad2(b, E->ptr,
			                   LLVMBuildInBoundsGEP2(b, E->ptr, args, &idx, 1, ""), "");
		}
		idx = LLVMConstInt(E->i64, (unsigned long long)i, 0);
		LLVMBuildStore(b, p, LLVMBuildInBoundsGEP2(b, E->ptr, clo, &idx, 1, ""));
	}
	LLVMBuildCondBr(b, LLVMBuildIsNull(b, rt, ""), run, hasrt);
	LLVMPositionBuilderAtEnd(b, hasrt);
	LLVMValueRef ver = rt_field(E, rt, RT_VERSION, E->i32);
	LLVMValueRef nth_rt = rt_field(E, rt, RT_NUM_THREADS, E->i64);
	LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, ver, LLVMConstInt(E->i32, 1, 0), ""), run,
	                badv);
	LLVMPositionBuilderAtEnd(b, badv);
	LLVMBuildRet(b,
	             LLVMConstInt(E->i32, (unsigned long long)-1, 1)); /* unknown runtime version */
	LLVMPositionBuilderAtEnd(b, run);
	LLVMValueRef nth = LLVMBuildPhi(b, E->i64, "nthreads");
	LLVMValueRef one = LLVMConstInt(E->i64, 1, 0);
	LLVMAddIncoming(nth, &one, &entry, 1);
	LLVMAddIncoming(nth, &nth_rt, &hasrt, 1);
	nth = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, nth, one, ""), one, nth, "");

	/* every exit after this point goes through `cleanup`, which frees the
	 * workspaces (NULL slots are fine) and returns *retv */
	LLVMBasicBlockRef cleanup = LLVMAppendBasicBlockInContext(E->ctx, fn, "cleanup");
	LLVMValueRef ws_alloc = NULL, ws_free = NULL;
	LLVMTypeRef wsa_ty = NULL, wsf_ty = NULL;
	if (nws > 0) {
		LLVMBasicBlockRef here = LLVMGetInsertBlock(b);
		emit_ws_helpers(E, symbol, &ws_alloc, &ws_free);
		E->fn = fn;
		LLVMPositionBuilderAtEnd(b, here);
		wsa_ty = LLVMGlobalGetValueType(ws_alloc);
		wsf_ty = LLVMGlobalGetValueType(ws_free);
		for (int i = 0; i < ln->nbufs; i++) {
			if (ln->bufs[i].arg >= 0 || ln->bufs[i].local)
				continue;
			uint64_t bytes = (uint64_t)ln->bufs[i].numel *
			                 (uint64_t)kc_dtype_info[ln->bufs[i].dtype].bytes;
			LLVMValueRef a[2] = {rt, LLVMConstInt(E->i64, bytes ? bytes : 1, 0)};
			LLVMValueRef p = LLVMBuildCall2(b, wsa_ty, ws_alloc, a, 2, "ws");
			LLVMValueRef idx = LLVMConstInt(E->i64, (unsigned long long)i, 0);
			LLVMBuildStore(b, p, LLVMBuildInBoundsGEP2(b, E->ptr, clo, &idx, 1, ""));
			LLVMBasicBlockRef ok = LLVMAppendBasicBlockInContext(E->ctx, fn, "ws_ok");
			LLVMBasicBlockRef bad =
			    LLVMAppendBasicBlockInContext(E->ctx, fn, "ws_fail");
			LLVMBuildCondBr(b, LLVMBuildIsNull(b, p, ""), bad, ok);
			LLVMPositionBuilderAtEnd(b, bad);
			LLVMBuildStore(b, LLVMConstInt(E->i32, (unsigned long long)KC_ERR_NOMEM, 1),
			               retv);
			LLVMBuildBr(b, cleanup);
			LLVMPositionBuilderAtEnd(b, ok);
		}
	}

	LLVMTypeRef pf_args[4] = {E->ptr, E->ptr, E->ptr, E->i64};
	LLVMTypeRef pf_ty = LLVMFunctionType(E->i32, pf_args, 4, 0);
	for (int s = 0; s < ln->nstages; s++) {
		const LnStage *sg = &ln->stages[s];
		int64_t total = 0, maxt;
		for (int k = 0; k < (sg->fuse_count > 1 ? sg->fuse_count : 1); k++) {
			int64_t n = 1;
			for (int l = 0; l < sg[k].nloops; l++)
				n *= sg[k].loops[l].extent;
			total += n;
		}
		if (total == 0 || !tasks[s])
			continue;
		maxt = total / (sg->grain > 0 ? sg->grain : 1);
		int p = par_loop(sg);
		if (!(sg->loops[p].kind & LNL_PARALLEL))
			maxt = 1;
		if (maxt > sg->loops[p].extent)
			maxt = sg->loops[p].extent;
		if (maxt < 1)
			maxt = 1;
		LLVMValueRef mt = LLVMConstInt(E->i64, (unsigned long long)maxt, 0);
		LLVMValueRef nt =
		    LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, nth, mt, ""), nth, mt, "");
		LLVMBasicBlockRef par = LLVMAppendBasicBlockInContext(E->ctx, fn, "par");
		LLVMBasicBlockRef ser = LLVMAppendBasicBlockInContext(E->ctx, fn, "ser");
		LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(E->ctx, fn, "join");
		LLVMBasicBlockRef fail = LLVMAppendBasicBlockInContext(E->ctx, fn, "fail");
		LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(E->ctx, fn, "next");
		LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSGT, nt, one, ""), par, ser);
		LLVMPositionBuilderAtEnd(b, par);
		LLVMValueRef pf = rt_field(E, rt, RT_PARALLEL_FOR, E->ptr);
		LLVMValueRef cx = rt_field(E, rt, RT_CTX, E->ptr);
		LLVMValueRef pa[4] = {cx, tasks[s], clo, nt};
		LLVMValueRef r1 = LLVMBuildCall2(b, pf_ty, pf, pa, 4, "");
		LLVMBuildBr(b, join);
		LLVMPositionBuilderAtEnd(b, ser);
		LLVMValueRef sa[3] = {clo, LLVMConstInt(E->i64, 0, 0), one};
		LLVMValueRef r2 = LLVMBuildCall2(b, task_type(E), tasks[s], sa, 3, "");
		LLVMBuildBr(b, join);
		LLVMPositionBuilderAtEnd(b, join);
		LLVMValueRef r = LLVMBuildPhi(b, E->i32, "");
		LLVMAddIncoming(r, &r1, &par, 1);
		LLVMAddIncoming(r, &r2, &ser, 1);
		LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntNE, r, LLVMConstInt(E->i32, 0, 0), ""),
		                fail, next);
		LLVMPositionBuilderAtEnd(b, fail);
		LLVMBuildStore(b, r, retv);
		LLVMBuildBr(b, cleanup);
		LLVMPositionBuilderAtEnd(b, next);
	}
	LLVMBuildStore(b, LLVMConstInt(E->i32, 0, 0), retv);
	LLVMBuildBr(b, cleanup);
	LLVMPositionBuilderAtEnd(b, cleanup);
	for (int i = 0; i < ln->nbufs && nws > 0; i++) {
		if (ln->bufs[i].arg >= 0 || ln->bufs[i].local)
			continue;
		LLVMValueRef idx = LLVMConstInt(E->i64, (unsigned long long)i, 0);
		LLVMValueRef a[2] = {
		    rt, LLVMBuildLoad2(b, E->ptr,
		                       LLVMBuildInBoundsGEP2(b, E->ptr, clo, &idx, 1, ""), "")};
		LLVMBuildCall2(b, wsf_ty, ws_free, a, 2, "");
	}
	LLVMBuildRet(b, LLVMBuildLoad2(b, E->i32, retv, ""));
done:
	LLVMDisposeBuilder(E->b);
	return st;
}

/* ---- for emit_gemm.c and emit_tile.c --------------------------------------- */

void
em_loop_md(Em *E, LLVMValueRef br, const LnLoop *lp)
{
	loop_md(E, br, lp, false);
}

void
em_vector_md(Em *E, LLVMValueRef br, int width, int unroll)
{
	LnLoop lp = {.extent = width * unroll,
	             .kind = LNL_VECTORIZED | (unroll > 1 ? LNL_UNROLLED : 0),
	             .width = width,
	             .unroll = unroll};
	loop_md(E, br, &lp, true);
}

void
em_realign_stack(Em *E, LLVMValueRef fn)
{
	LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
	                        LLVMCreateStringAttribute(E->ctx, "stackrealign", 12, "", 0));
}

void
em_add_attr(Em *E, LLVMValueRef fn, unsigned idx, const char *name)
{
	add_attr(E, fn, idx, name);
}

LLVMValueRef
em_entry_alloca(Em *E, LLVMTypeRef t)
{
	return entry_alloca(E, t);
}
