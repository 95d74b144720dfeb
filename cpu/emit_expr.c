/* emit_expr.c - loop-nest values as LLVM IR: types, casts, indices,
 * loads and stores, and every elementwise op.
 *
 * Values are computed in a "compute type": bool i1, integers iN, float16,
 * bfloat16 and float32 in float, float64 in double. float16/bfloat16
 * intermediates stay in float (as AKG's fused kernels do); they are rounded
 * to their dtype (RNE) where it is observable: at every store and where a
 * Cast reads them.
 * Integer Div/RealDiv truncate toward zero; x / 0 == 0 and INT_MIN / -1 ==
 * INT_MIN (wrap), so nothing traps. Float -> int casts saturate (NaN -> 0).
 * Expressions are memoised per stage (Em.memo), so a DAG node shared by
 * several stores is computed once.
 */
#include <stdio.h>
#include <string.h>

#include "emit.h"

/* Float class (float16, bfloat16, float32, float64). */
bool
em_is_float(KcDtype dt)
{
	return kc_dtype_info[dt].cls == DTC_FLOAT;
}

/* Signed integer class (bool and unsigned are not). */
bool
em_is_signed(KcDtype dt)
{
	return kc_dtype_info[dt].cls == DTC_INT;
}

/* The compute type of a dtype (see the header). */
LLVMTypeRef
em_ctype(Em *E, KcDtype dt)
{
	switch (dt) {
	case KC_DT_BOOL: return E->i1;
	case KC_DT_INT8:
	case KC_DT_UINT8: return E->i8;
	case KC_DT_INT16:
	case KC_DT_UINT16: return E->i16;
	case KC_DT_INT32:
	case KC_DT_UINT32: return E->i32;
	case KC_DT_INT64:
	case KC_DT_UINT64: return E->i64;
	case KC_DT_FLOAT16:
	case KC_DT_BFLOAT16:
	case KC_DT_FLOAT32: return E->f32;
	case KC_DT_FLOAT64: return E->f64;
	case KC_DT_COMPLEX64:
	case KC_DT_COMPLEX128:
	case KC_DT_COUNT: break;
	}
	KC_ASSERT(!"dtype without a compute type");
	return NULL;
}

/* The in-memory type of a dtype: bool i8, float16/bfloat16 i16. */
LLVMTypeRef
em_stype(Em *E, KcDtype dt)
{
	switch (dt) {
	case KC_DT_BOOL: return E->i8;
	case KC_DT_FLOAT16:
	case KC_DT_BFLOAT16: return E->i16;
	case KC_DT_INT8:
	case KC_DT_UINT8:
	case KC_DT_INT16:
	case KC_DT_UINT16:
	case KC_DT_INT32:
	case KC_DT_UINT32:
	case KC_DT_INT64:
	case KC_DT_UINT64:
	case KC_DT_FLOAT32:
	case KC_DT_FLOAT64:
	case KC_DT_COMPLEX64:
	case KC_DT_COMPLEX128:
	case KC_DT_COUNT: break;
	}
	return em_ctype(E, dt);
}

/* float32 value(s) v as float16 bits (i16 or a vector of them), and back:
 * in hardware where the target has it (LoopNest.hw_half), else with
 * emit_math.c's integer algorithms; both round to nearest even. */
static LLVMTypeRef
like(LLVMValueRef v, LLVMTypeRef elem)
{
	LLVMTypeRef t = LLVMTypeOf(v);
	return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMVectorType(elem, LLVMGetVectorSize(t))
	                                                : elem;
}

static LLVMValueRef
to_f16(Em *E, LLVMValueRef v)
{
	if (!E->ln->hw_half)
		return math_f32_to_f16(E->b, v);
	LLVMValueRef h = LLVMBuildFPTrunc(E->b, v, like(v, LLVMHalfTypeInContext(E->ctx)), "");
	return LLVMBuildBitCast(E->b, h, like(v, E->i16), "");
}

static LLVMValueRef
from_f16(Em *E, LLVMValueRef h)
{
	if (!E->ln->hw_half)
		return math_f16_to_f32(E->b, h);
	LLVMValueRef x = LLVMBuildBitCast(E->b, h, like(h, LLVMHalfTypeInContext(E->ctx)), "");
	return LLVMBuildFPExt(E->b, x, like(h, E->f32), "");
}

/* Round a compute value to its dtype (only float16/bfloat16 need it). */
static LLVMValueRef
round_dt(Em *E, LLVMValueRef v, KcDtype dt)
{
	if (dt == KC_DT_FLOAT16)
		return from_f16(E, to_f16(E, v));
	if (dt == KC_DT_BFLOAT16)
		return math_bf16_to_f32(E->b, math_f32_to_bf16(E->b, v));
	return v;
}

/* Zero of dtype dt in its compute type. */
static LLVMValueRef
zero_of(Em *E, KcDtype dt)
{
	return LLVMConstNull(em_ctype(E, dt));
}

/* Calls an intrinsic overloaded on (return type, argument type). */
static LLVMValueRef
intrin2(Em *E, const char *name, LLVMTypeRef ret, LLVMValueRef arg)
{
	LLVMTypeRef tys[2] = {ret, LLVMTypeOf(arg)};
	unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
	KC_ASSERT(id != 0);
	LLVMValueRef fn = LLVMGetIntrinsicDeclaration(E->mod, id, tys, 2);
	LLVMTypeRef fty = LLVMIntrinsicGetType(E->ctx, id, tys, 2);
	return LLVMBuildCall2(E->b, fty, fn, &arg, 1, "");
}

/* double -> float rounded to odd: truncate, then set the last bit if
 * inexact. Rounding that to float16/bfloat16 (13+ bits shorter) gives the
 * correctly rounded result, which plain double rounding does not. */
static LLVMValueRef
to_f32_odd(Em *E, LLVMValueRef x)
{
	LLVMBuilderRef b = E->b;
	LLVMValueRef r = LLVMBuildFPTrunc(b, x, E->f32, "");
	LLVMValueRef back = LLVMBuildFPExt(b, r, E->f64, "");
	LLVMValueRef exact = LLVMBuildFCmp(b, LLVMRealOEQ, back, x, "");
	LLVMValueRef away = LLVMBuildFCmp(b, LLVMRealOGT, math_intrinsic(b, "llvm.fabs", &back, 1),
	                                  math_intrinsic(b, "llvm.fabs", &x, 1), "");
	LLVMValueRef bits = LLVMBuildBitCast(b, r, E->i32, "");
	bits = LLVMBuildSelect(b, away, LLVMBuildSub(b, bits, LLVMConstInt(E->i32, 1, 0), ""), bits,
	                       "");
	bits = LLVMBuildSelect(b, exact, bits, LLVMBuildOr(b, bits, LLVMConstInt(E->i32, 1, 0), ""),
	                       "");
	return LLVMBuildBitCast(b, bits, E->f32, "");
}

static bool
is_half(KcDtype dt)
{
	return dt == KC_DT_FLOAT16 || dt == KC_DT_BFLOAT16;
}

/* Converts a compute value between dtypes (Cast semantics). */
LLVMValueRef
em_cast(Em *E, LLVMValueRef v, KcDtype from, KcDtype to)
{
	LLVMBuilderRef b = E->b;
	LLVMTypeRef tt = em_ctype(E, to);

	if (from == to)
		return v;
	if (is_half(from)) /* a Cast reads its operand at its declared dtype */
		v = round_dt(E, v, from);
	if (to == KC_DT_BOOL) {
		if (em_is_float(from))
			return LLVMBuildFCmp(b, LLVMRealUNE, v, zero_of(E, from), "");
		return LLVMBuildICmp(b, LLVMIntNE, v, zero_of(E, from), "");
	}
	if (em_is_float(from) && em_is_float(to)) {
		LLVMTypeRef ft = em_ctype(E, from);
		if (ft == E->f64 && is_half(to))
			return round_dt(E, to_f32_odd(E, v), to);
		if (ft != tt)
			v = ft == E->f64 ? LLVMBuildFPTrunc(b, v, tt, "")
			                 : LLVMBuildFPExt(b, v, tt, "");
		return round_dt(E, v, to);
	}
	if (em_is_float(from))
		return intrin2(E, em_is_signed(to) ? "llvm.fptosi.sat" : "llvm.fptoui.sat", tt, v);
	if (em_is_float(to)) {
		LLVMTypeRef via = is_half(to) ? E->f64 : tt; /* exact for <= 53-bit ints */
		v = em_is_signed(from) ? LLVMBuildSIToFP(b, v, via, "")
		                       : LLVMBuildUIToFP(b, v, via, "");
		return is_half(to) ? round_dt(E, to_f32_odd(E, v), to) : v;
	}
	/* integer (or bool) -> integer */
	unsigned fw = LLVMGetIntTypeWidth(em_ctype(E, from)), tw = LLVMGetIntTypeWidth(tt);
	if (fw > tw)
		return LLVMBuildTrunc(b, v, tt, "");
	if (fw < tw)
		return em_is_signed(from) ? LLVMBuildSExt(b, v, tt, "")
		                          : LLVMBuildZExt(b, v, tt, "");
	return v;
}

/* An index expression as i64 arithmetic (all values non-negative). */
LLVMValueRef
em_idx(Em *E, const LnIdx *x)
{
	LLVMValueRef r = NULL;

	switch (x->kind) {
	case LNI_CONST: return LLVMConstInt(E->i64, (unsigned long long)x->c, 0);
	case LNI_VAR: KC_ASSERT(E->var[x->var]); return E->var[x->var];
	case LNI_ADD: r = LLVMBuildAdd(E->b, em_idx(E, x->a), em_idx(E, x->b), ""); break;
	case LNI_MUL:
		r = LLVMBuildMul(E->b, em_idx(E, x->a),
		                 LLVMConstInt(E->i64, (unsigned long long)x->c, 0), "");
		break;
	case LNI_DIV:
		return LLVMBuildUDiv(E->b, em_idx(E, x->a),
		                     LLVMConstInt(E->i64, (unsigned long long)x->c, 0), "");
	case LNI_MOD:
		return LLVMBuildURem(E->b, em_idx(E, x->a),
		                     LLVMConstInt(E->i64, (unsigned long long)x->c, 0), "");
	case LNI_RSUB:
		r = LLVMBuildSub(E->b, LLVMConstInt(E->i64, (unsigned long long)x->c, 0),
		                 em_idx(E, x->a), "");
		break;
	}
	if (!LLVMIsConstant(r)) {
		LLVMSetNUW(r, 1);
		LLVMSetNSW(r, 1);
	}
	return r;
}

/* Address of buf[idx]. */
LLVMValueRef
em_elem_ptr(Em *E, int buf, const LnIdx *idx)
{
	LLVMValueRef i = em_idx(E, idx);
	return LLVMBuildInBoundsGEP2(E->b, em_stype(E, E->ln->bufs[buf].dtype), E->bufp[buf], &i, 1,
	                             "");
}

/* Loads a dtype element at p and widens it to its compute type. */
LLVMValueRef
em_load_at(Em *E, KcDtype dt, LLVMValueRef p)
{
	LLVMValueRef v = LLVMBuildLoad2(E->b, em_stype(E, dt), p, "");

	LLVMSetAlignment(v, (unsigned)kc_dtype_info[dt].bytes);
	if (dt == KC_DT_BOOL)
		return LLVMBuildICmp(E->b, LLVMIntNE, v, LLVMConstInt(E->i8, 0, 0), "");
	if (dt == KC_DT_FLOAT16)
		return from_f16(E, v);
	if (dt == KC_DT_BFLOAT16)
		return math_bf16_to_f32(E->b, v);
	return v;
}

/* Loads buf[idx] (plus the clamped data-dependent offset of a Gather) and
 * widens it to its compute type. An index outside [0, extent) reads the
 * nearest row: out-of-range Gather indices are clamped. */
static LLVMValueRef
emit_load(Em *E, const LnExpr *e)
{
	KcDtype dt = E->ln->bufs[e->buf].dtype;
	if (e->buf == E->tile_buf && !e->dyn) /* a GEMM epilogue reading C */
		return E->tile_val;
	LLVMValueRef p = em_elem_ptr(E, e->buf, e->idx);
	if (e->dyn) {
		LLVMBuilderRef b = E->b;
		LLVMValueRef d = em_expr(E, e->dyn);
		if (!d)
			return NULL;
		unsigned w = LLVMGetIntTypeWidth(LLVMTypeOf(d));
		if (w < 64)
			d = em_is_signed(e->dyn->dtype) ? LLVMBuildSExt(b, d, E->i64, "")
			                                : LLVMBuildZExt(b, d, E->i64, "");
		LLVMValueRef zero = LLVMConstInt(E->i64, 0, 0);
		LLVMValueRef hi = LLVMConstInt(E->i64, (unsigned long long)(e->dyn_extent - 1), 0);
		if (em_is_signed(e->dyn->dtype))
			d = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, d, zero, ""), zero, d,
			                    "");
		d = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntUGT, d, hi, ""), hi, d, "");
		d = LLVMBuildMul(b, d, LLVMConstInt(E->i64, (unsigned long long)e->dyn_stride, 0),
		                 "");
		p = LLVMBuildInBoundsGEP2(b, em_stype(E, dt), p, &d, 1, "");
	}
	return em_load_at(E, dt, p);
}

/* Narrows a compute value v to dtype dt and stores it at p. */
void
em_store_at(Em *E, KcDtype dt, LLVMValueRef p, LLVMValueRef v)
{
	LLVMValueRef st;

	if (dt == KC_DT_BOOL)
		v = LLVMBuildZExt(E->b, v, E->i8, "");
	else if (dt == KC_DT_FLOAT16)
		v = to_f16(E, v);
	else if (dt == KC_DT_BFLOAT16)
		v = math_f32_to_bf16(E->b, v);
	st = LLVMBuildStore(E->b, v, p);
	LLVMSetAlignment(st, (unsigned)kc_dtype_info[dt].bytes);
}

/* Narrows v to the buffer dtype and stores it at buf[idx]. */
void
em_store(Em *E, int buf, const LnIdx *idx, LLVMValueRef v)
{
	em_store_at(E, E->ln->bufs[buf].dtype, em_elem_ptr(E, buf, idx), v);
}

/* NaN-propagating max/min (numpy maximum/minimum) and integer max/min. */
LLVMValueRef
em_maxmin(Em *E, bool max, KcDtype dt, LLVMValueRef a, LLVMValueRef c)
{
	LLVMBuilderRef b = E->b;

	if (em_is_float(dt)) {
		LLVMValueRef gt = LLVMBuildFCmp(b, max ? LLVMRealOGT : LLVMRealOLT, a, c, "");
		LLVMValueRef r = LLVMBuildSelect(b, gt, a, c, "");
		return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, a, a, ""), a, r, "");
	}
	LLVMIntPredicate p =
	    em_is_signed(dt) ? (max ? LLVMIntSGT : LLVMIntSLT) : (max ? LLVMIntUGT : LLVMIntULT);
	return LLVMBuildSelect(b, LLVMBuildICmp(b, p, a, c, ""), a, c, "");
}

/* Integer division truncating toward zero; x/0 = 0, INT_MIN/-1 wraps. */
static LLVMValueRef
emit_idiv(Em *E, KcDtype dt, LLVMValueRef a, LLVMValueRef c)
{
	LLVMBuilderRef b = E->b;
	LLVMTypeRef t = em_ctype(E, dt);
	LLVMValueRef zero = LLVMConstNull(t), one = LLVMConstInt(t, 1, 0);
	LLVMValueRef isz = LLVMBuildICmp(b, LLVMIntEQ, c, zero, "");

	if (!em_is_signed(dt)) {
		LLVMValueRef q = LLVMBuildUDiv(b, a, LLVMBuildSelect(b, isz, one, c, ""), "");
		return LLVMBuildSelect(b, isz, zero, q, "");
	}
	LLVMValueRef ism1 = LLVMBuildICmp(b, LLVMIntEQ, c, LLVMConstAllOnes(t), "");
	LLVMValueRef bad = LLVMBuildOr(b, isz, ism1, "");
	LLVMValueRef q = LLVMBuildSDiv(b, a, LLVMBuildSelect(b, bad, one, c, ""), "");
	q = LLVMBuildSelect(b, ism1, LLVMBuildSub(b, zero, a, ""), q, "");
	return LLVMBuildSelect(b, isz, zero, q, "");
}

/* FloorDiv, FloorMod (sign of the divisor) and Mod (sign of the dividend,
 * C fmod). Integers: x // 0 == x % 0 == 0 and INT_MIN // -1 wraps, as Div. */
static LLVMValueRef
emit_floor_divmod(Em *E, IrOp op, KcDtype dt, LLVMValueRef a, LLVMValueRef c)
{
	LLVMBuilderRef b = E->b;
	LLVMTypeRef t = em_ctype(E, dt);
	LLVMValueRef zero = LLVMConstNull(t), one, isz, m, adj;

	if (em_is_float(dt)) {
		if (op == IR_OP_FLOOR_DIV) {
			LLVMValueRef q = LLVMBuildFDiv(b, a, c, "");
			return math_intrinsic(b, "llvm.floor", &q, 1);
		}
		m = LLVMBuildFRem(b, a, c, "");
		if (op == IR_OP_MOD)
			return m;
		adj = LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealONE, m, zero, ""),
		                   LLVMBuildXor(b, LLVMBuildFCmp(b, LLVMRealOLT, m, zero, ""),
		                                LLVMBuildFCmp(b, LLVMRealOLT, c, zero, ""), ""),
		                   "");
		return LLVMBuildSelect(b, adj, LLVMBuildFAdd(b, m, c, ""), m, "");
	}
	one = LLVMConstInt(t, 1, 0);
	isz = LLVMBuildICmp(b, LLVMIntEQ, c, zero, "");
	if (!em_is_signed(dt)) {
		LLVMValueRef d = LLVMBuildSelect(b, isz, one, c, "");
		LLVMValueRef r =
		    op == IR_OP_FLOOR_DIV ? LLVMBuildUDiv(b, a, d, "") : LLVMBuildURem(b, a, d, "");
		return LLVMBuildSelect(b, isz, zero, r, "");
	}
	LLVMValueRef ism1 = LLVMBuildICmp(b, LLVMIntEQ, c, LLVMConstAllOnes(t), "");
	LLVMValueRef bad = LLVMBuildOr(b, isz, ism1, "");
	LLVMValueRef d = LLVMBuildSelect(b, bad, one, c, "");
	LLVMValueRef q = LLVMBuildSDiv(b, a, d, "");
	m = LLVMBuildSRem(b, a, d, ""); /* 0 when d is 1 */
	adj = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntNE, m, zero, ""),
	                   LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildXor(b, m, c, ""), zero, ""), "");
	if (op == IR_OP_FLOOR_DIV) {
		q = LLVMBuildSelect(b, adj, LLVMBuildSub(b, q, one, ""), q, "");
		q = LLVMBuildSelect(b, ism1, LLVMBuildSub(b, zero, a, ""), q, "");
		return LLVMBuildSelect(b, isz, zero, q, "");
	}
	if (op == IR_OP_FLOOR_MOD)
		m = LLVMBuildSelect(b, adj, LLVMBuildAdd(b, m, c, ""), m, "");
	return m;
}

/* A comparison on dtype dt: ordered float, signed or unsigned int. */
static LLVMValueRef
cmp(Em *E, KcDtype dt, LLVMRealPredicate fp, LLVMIntPredicate sp, LLVMIntPredicate up,
    LLVMValueRef a, LLVMValueRef c)
{
	if (em_is_float(dt))
		return LLVMBuildFCmp(E->b, fp, a, c, "");
	return LLVMBuildICmp(E->b, em_is_signed(dt) ? sp : up, a, c, "");
}

/* Refuses a float-only op on another dtype. */
static LLVMValueRef
float_only(Em *E, const LnExpr *e)
{
	kc_fail(E->err, KC_UNSUPPORTED_OP, "emit", "%s on %s is not supported",
	        ir_op_info[e->op].name, kc_dtype_info[e->dtype].name);
	return NULL;
}

/* A math function: inline, or a call of the module's outlined version. */
static LLVMValueRef
emit_math(Em *E, MathFn f, LLVMValueRef *a)
{
	return E->math_inline ? math_inline(E->b, f, a) : math_call(E->b, f, a, E->vw);
}

/* Is e a transcendental (an emit_math op)? */
static bool
is_math(const LnExpr *e)
{
	if (e->kind != LNE_OP || !em_is_float(e->dtype))
		return false;
	return e->op == IR_OP_EXP || e->op == IR_OP_LOG || e->op == IR_OP_TANH ||
	       e->op == IR_OP_ERF || e->op == IR_OP_POW || e->op == IR_OP_SIN ||
	       e->op == IR_OP_COS || e->op == IR_OP_ASIN || e->op == IR_OP_ACOS ||
	       e->op == IR_OP_ATAN || e->op == IR_OP_ATAN2 || e->op == IR_OP_ASINH ||
	       e->op == IR_OP_ACOSH || e->op == IR_OP_EXPM1;
}

/* Math ops under e not yet seen (each expr is emitted once per stage). */
int
em_count_math(Em *E, const LnExpr *e)
{
	int n;
	E->ln->work->n[KC_WORK_EMIT]++;
	if (E->mark[e->id] == E->mark_gen)
		return 0;
	E->mark[e->id] = E->mark_gen;
	n = is_math(e);
	for (int i = 0; e->kind == LNE_OP && i < e->nargs; i++)
		n += em_count_math(E, e->args[i]);
	return n;
}

/* One elementwise op on compute values a[] (result: e->dtype). */
static LLVMValueRef
emit_op(Em *E, const LnExpr *e, LLVMValueRef *a)
{
	LLVMBuilderRef b = E->b;
	KcDtype dt = e->dtype;
	KcDtype at = e->nargs ? e->args[0]->dtype : dt;
	bool fl = em_is_float(dt), bo = dt == KC_DT_BOOL;
	LLVMTypeRef ft = fl ? em_ctype(E, dt) : NULL;

	switch (e->op) {
	case IR_OP_ADD:
		return fl   ? LLVMBuildFAdd(b, a[0], a[1], "")
		       : bo ? LLVMBuildOr(b, a[0], a[1], "")
		            : LLVMBuildAdd(b, a[0], a[1], "");
	case IR_OP_SUB:
		return fl   ? LLVMBuildFSub(b, a[0], a[1], "")
		       : bo ? LLVMBuildXor(b, a[0], a[1], "")
		            : LLVMBuildSub(b, a[0], a[1], "");
	case IR_OP_MUL:
		return fl   ? LLVMBuildFMul(b, a[0], a[1], "")
		       : bo ? LLVMBuildAnd(b, a[0], a[1], "")
		            : LLVMBuildMul(b, a[0], a[1], "");
	case IR_OP_REAL_DIV:
	case IR_OP_DIV: return fl ? LLVMBuildFDiv(b, a[0], a[1], "") : emit_idiv(E, dt, a[0], a[1]);
	case IR_OP_FLOOR_DIV:
	case IR_OP_FLOOR_MOD:
	case IR_OP_MOD: return emit_floor_divmod(E, e->op, dt, a[0], a[1]);
	case IR_OP_MAXIMUM: return em_maxmin(E, true, dt, a[0], a[1]);
	case IR_OP_MINIMUM: return em_maxmin(E, false, dt, a[0], a[1]);
	case IR_OP_POW: return fl ? emit_math(E, MATH_POW, a) : float_only(E, e);
	case IR_OP_NEG:
		return fl ? LLVMBuildFNeg(b, a[0], "") : bo ? a[0] : LLVMBuildNeg(b, a[0], "");
	case IR_OP_ABS:
		if (fl)
			return math_intrinsic(b, "llvm.fabs", a, 1);
		if (!em_is_signed(dt))
			return a[0];
		return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, a[0], zero_of(E, dt), ""),
		                       LLVMBuildNeg(b, a[0], ""), a[0], "");
	case IR_OP_EXP: return fl ? emit_math(E, MATH_EXP, a) : float_only(E, e);
	case IR_OP_LOG: return fl ? emit_math(E, MATH_LOG, a) : float_only(E, e);
	case IR_OP_TANH: return fl ? emit_math(E, MATH_TANH, a) : float_only(E, e);
	case IR_OP_ERF: return fl ? emit_math(E, MATH_ERF, a) : float_only(E, e);
	case IR_OP_SQRT: return fl ? math_intrinsic(b, "llvm.sqrt", a, 1) : float_only(E, e);
	case IR_OP_RSQRT:
		if (!fl)
			return float_only(E, e);
		return LLVMBuildFDiv(b, LLVMConstReal(ft, 1), math_intrinsic(b, "llvm.sqrt", a, 1),
		                     "");
	case IR_OP_RECIPROCAL:
		return fl ? LLVMBuildFDiv(b, LLVMConstReal(ft, 1), a[0], "") : float_only(E, e);
	case IR_OP_SQUARE:
		return fl   ? LLVMBuildFMul(b, a[0], a[0], "")
		       : bo ? a[0]
		            : LLVMBuildMul(b, a[0], a[0], "");
	case IR_OP_FLOOR: return fl ? math_intrinsic(b, "llvm.floor", a, 1) : a[0];
	case IR_OP_ROUND: /* half away from zero */
		return fl ? math_intrinsic(b, "llvm.round", a, 1) : a[0];
	case IR_OP_SIGN:
		if (fl) {
			LLVMValueRef one = LLVMConstReal(ft, 1), m1 = LLVMConstReal(ft, -1);
			LLVMValueRef r = LLVMBuildSelect(
			    b, LLVMBuildFCmp(b, LLVMRealOLT, a[0], LLVMConstReal(ft, 0), ""), m1,
			    a[0], "");
			return LLVMBuildSelect(
			    b, LLVMBuildFCmp(b, LLVMRealOGT, a[0], LLVMConstReal(ft, 0), ""), one,
			    r, "");
		}
		if (!em_is_signed(dt))
			return LLVMBuildZExt(b,
			                     LLVMBuildICmp(b, LLVMIntNE, a[0], zero_of(E, dt), ""),
			                     em_ctype(E, dt), "");
		{
			LLVMTypeRef t = em_ctype(E, dt);
			LLVMValueRef pos = LLVMBuildZExt(
			    b, LLVMBuildICmp(b, LLVMIntSGT, a[0], zero_of(E, dt), ""), t, "");
			LLVMValueRef neg = LLVMBuildZExt(
			    b, LLVMBuildICmp(b, LLVMIntSLT, a[0], zero_of(E, dt), ""), t, "");
			return LLVMBuildSub(b, pos, neg, "");
		}
	case IR_OP_GREATER: return cmp(E, at, LLVMRealOGT, LLVMIntSGT, LLVMIntUGT, a[0], a[1]);
	case IR_OP_GREATER_EQUAL:
		return cmp(E, at, LLVMRealOGE, LLVMIntSGE, LLVMIntUGE, a[0], a[1]);
	case IR_OP_LESS: return cmp(E, at, LLVMRealOLT, LLVMIntSLT, LLVMIntULT, a[0], a[1]);
	case IR_OP_LESS_EQUAL: return cmp(E, at, LLVMRealOLE, LLVMIntSLE, LLVMIntULE, a[0], a[1]);
	case IR_OP_EQUAL: return cmp(E, at, LLVMRealOEQ, LLVMIntEQ, LLVMIntEQ, a[0], a[1]);
	case IR_OP_NOT_EQUAL: return cmp(E, at, LLVMRealUNE, LLVMIntNE, LLVMIntNE, a[0], a[1]);
	case IR_OP_LOGICAL_AND: return LLVMBuildAnd(b, a[0], a[1], "");
	case IR_OP_LOGICAL_OR: return LLVMBuildOr(b, a[0], a[1], "");
	case IR_OP_LOGICAL_NOT: return LLVMBuildNot(b, a[0], "");
	case IR_OP_IS_NAN:
		if (!em_is_float(at))
			return LLVMConstInt(E->i1, 0, 0);
		return LLVMBuildFCmp(b, LLVMRealUNO, a[0], a[0], "");
	case IR_OP_IS_INF:
	case IR_OP_IS_FINITE:
		if (!em_is_float(at))
			return LLVMConstInt(E->i1, e->op == IR_OP_IS_FINITE, 0);
		{
			LLVMValueRef ab = math_intrinsic(b, "llvm.fabs", a, 1);
			LLVMValueRef inf = LLVMConstReal(LLVMTypeOf(ab), 1.0 / 0.0);
			return LLVMBuildFCmp(b, e->op == IR_OP_IS_INF ? LLVMRealOEQ : LLVMRealOLT,
			                     ab, inf, "");
		}
	case IR_OP_SELECT: return LLVMBuildSelect(b, a[0], a[1], a[2], "");
	case IR_OP_CAST: return em_cast(E, a[0], at, dt);
	case IR_OP_SIN: return fl ? emit_math(E, MATH_SIN, a) : float_only(E, e);
	case IR_OP_COS: return fl ? emit_math(E, MATH_COS, a) : float_only(E, e);
	case IR_OP_ASIN: return fl ? emit_math(E, MATH_ASIN, a) : float_only(E, e);
	case IR_OP_ACOS: return fl ? emit_math(E, MATH_ACOS, a) : float_only(E, e);
	case IR_OP_ATAN: return fl ? emit_math(E, MATH_ATAN, a) : float_only(E, e);
	case IR_OP_ATAN2: return fl ? emit_math(E, MATH_ATAN2, a) : float_only(E, e);
	case IR_OP_ASINH: return fl ? emit_math(E, MATH_ASINH, a) : float_only(E, e);
	case IR_OP_ACOSH: return fl ? emit_math(E, MATH_ACOSH, a) : float_only(E, e);
	case IR_OP_EXPM1: return fl ? emit_math(E, MATH_EXPM1, a) : float_only(E, e);
	case IR_OP_ADD_N: /* lowered to a chain of Add */
	case IR_OP_BROADCAST_TO:
	case IR_OP_RESHAPE:
	case IR_OP_EXPAND_DIMS:
	case IR_OP_TRANSPOSE:
	case IR_OP_TILE:
	case IR_OP_STRIDED_SLICE:
	case IR_OP_REDUCE_SUM:
	case IR_OP_REDUCE_MAX:
	case IR_OP_REDUCE_MIN:
	case IR_OP_REDUCE_PROD:
	case IR_OP_ELEM_ANY:
	case IR_OP_ELEM_ALL:
	case IR_OP_ASSIGN:
	case IR_OP_INPLACE_ASSIGN:
	case IR_OP_ONE_HOT:
	case IR_OP_GATHER:
	case IR_OP_CONCAT:
	case IR_OP_MAT_MUL:
	case IR_OP_BATCH_MAT_MUL:
	case IR_OP_CONV2D:
	case IR_OP_ARGMAX:
	case IR_OP_ARGMIN:
	case IR_OP_CUM_SUM:
	case IR_OP_CUM_PROD:
	case IR_OP_POOL2D:
	case IR_OP_COUNT: break;
	}
	KC_ASSERT(!"layout op in a loop body");
	return NULL;
}

void
em_memo_reset(Em *E)
{
	E->memo_gen++;
}

void
em_memo_set(Em *E, const LnExpr *e, LLVMValueRef v)
{
	E->memo[e->id] = v;
	E->memo_at[e->id] = E->memo_gen;
}

/* Emits e once per innermost body (memoised by id). */
LLVMValueRef
em_expr(Em *E, const LnExpr *e)
{
	LLVMValueRef v = NULL, a[3];
	KcWork *w = E->ln->work;

	if (!kc_work_visit(w, KC_WORK_EMIT)) {
		kc_work_fail(w, KC_WORK_EMIT, E->err);
		return NULL;
	}
	if (E->memo_at[e->id] == E->memo_gen)
		return E->memo[e->id];
	switch (e->kind) {
	case LNE_CONST:
		if (em_is_float(e->dtype))
			v = LLVMConstReal(em_ctype(E, e->dtype), e->fval);
		else
			v = LLVMConstInt(em_ctype(E, e->dtype), (unsigned long long)e->ival, 1);
		break;
	case LNE_LOAD:
		if (!(v = emit_load(E, e)))
			return NULL;
		break;
	case LNE_INDEX:
		v = em_idx(E, e->idx);
		if (LLVMGetIntTypeWidth(em_ctype(E, e->dtype)) < 64)
			v = LLVMBuildTrunc(E->b, v, em_ctype(E, e->dtype), "");
		break;
	case LNE_OP:
		for (int i = 0; i < e->nargs; i++)
			if (!(a[i] = em_expr(E, e->args[i])))
				return NULL;
		/* float16/bfloat16 intermediates stay in f32 registers, as in
		 * AKG's fused kernels: rounding happens at explicit Casts and at
		 * every store (the conformance tolerance for fp16 covers it).
		 * Rounding after every op doubled the IR and the compile time. */
		v = emit_op(E, e, a);
		break;
	}
	em_memo_set(E, e, v);
	return v;
}
