/* interp.c - the reference interpreter: evaluates a parsed IrGraph op by op
 * on whole tensors, with the kcs-cpu-v1 argument layout.
 *
 * The one idea: it shares nothing with lower.c, sched.c or emit_llvm.c (it
 * only reads the IrGraph), so the compiled kernel and this file check each
 * other. Every tensor is an array of 8-byte cells: floats as double,
 * integers and bools as int64 (unsigned values as their uint64 bits).
 * Float ops compute in double and round each result to its declared dtype
 * (float32 through (float), float16 and bfloat16 by round-to-nearest-even
 * on the binary16/bfloat16 grid); integer ops are exact, wrapping to their
 * width. The backend's conventions are followed: integer x / 0 == 0 and
 * INT_MIN / -1 == INT_MIN; float -> int casts truncate and saturate, NaN
 * -> 0; Round is half away from zero; comparisons give bool 0/1.
 *
 * kc_interp_ties also tracks, per element, whether it depends on a float
 * comparison whose operands were within rounding distance (a tie mask), so
 * callers can excuse a kernel that decided such a comparison differently.
 *
 * Memory: value buffers are malloc'd and freed after their last use (they
 * can be large; the arena holds only bookkeeping), and the live total is
 * bounded by the caller's max_bytes.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

typedef union Cell {
	double f;
	int64_t i;
	uint64_t u;
} Cell;

typedef struct Interp {
	const IrGraph *g;
	Cell **val;        /* per value id: its cells, or NULL */
	uint8_t **tie;     /* per value id: its tie mask, or NULL (none set) */
	char *half;        /* per value id: float16/bfloat16 upstream */
	bool ties;         /* track tie masks (kc_interp_ties) */
	int *left;         /* per value id: uses left before it can be freed */
	size_t live, max;  /* bytes */
	void *const *args; /* the caller's buffers: Assign writes its inputs */
	KcErr *err;
} Interp;

/* ---- dtypes ------------------------------------------------------------ */

static bool
isfl(KcDtype dt)
{
	return kc_dtype_info[dt].cls == DTC_FLOAT;
}

static bool
issigned(KcDtype dt)
{
	return kc_dtype_info[dt].cls == DTC_INT;
}

/* Round x to a binary float with `prec` significand bits, smallest quantum
 * 2^qmin and largest finite value maxv, to nearest even. */
static double
round_bin(double x, int prec, int qmin, double maxv)
{
	int e, qe;
	double r;

	if (x == 0 || !isfinite(x))
		return x;
	(void)frexp(x, &e);
	qe = e - prec < qmin ? qmin : e - prec;
	r = ldexp(nearbyint(ldexp(x, -qe)), qe);
	if (fabs(r) > maxv)
		r = copysign(INFINITY, x);
	return r;
}

/* A double rounded to float dtype dt. */
static double
round_fl(double x, KcDtype dt)
{
	switch (dt) {
	case KC_DT_FLOAT16: return round_bin(x, 11, -24, 65504.0);
	case KC_DT_BFLOAT16: return round_bin(x, 8, -133, 0x1.fep127);
	case KC_DT_FLOAT32: return (double)(float)x;
	case KC_DT_FLOAT64: return x;
	case KC_DT_BOOL:
	case KC_DT_INT8:
	case KC_DT_INT16:
	case KC_DT_INT32:
	case KC_DT_INT64:
	case KC_DT_UINT8:
	case KC_DT_UINT16:
	case KC_DT_UINT32:
	case KC_DT_UINT64:
	case KC_DT_COMPLEX64:
	case KC_DT_COMPLEX128:
	case KC_DT_COUNT: break;
	}
	return x;
}

/* An int64 wrapped to integer dtype dt (two's complement), bool to 0/1. */
static int64_t
wrap(uint64_t x, KcDtype dt)
{
	int bits = 8 * kc_dtype_info[dt].bytes;

	if (dt == KC_DT_BOOL)
		return x != 0;
	if (bits == 64)
		return (int64_t)x;
	x &= (UINT64_C(1) << bits) - 1;
	if (issigned(dt) && (x >> (bits - 1)))
		x |= ~((UINT64_C(1) << bits) - 1);
	return (int64_t)x;
}

/* float -> integer dtype: truncate, saturate, NaN -> 0. */
static int64_t
fl_to_int(double x, KcDtype dt)
{
	int bits = 8 * kc_dtype_info[dt].bytes;

	if (dt == KC_DT_BOOL)
		return x != 0; /* NaN != 0 is true, as in the backend */
	if (isnan(x))
		return 0;
	x = trunc(x);
	if (issigned(dt)) {
		double hi = ldexp(1, bits - 1);
		if (x >= hi)
			return bits == 64 ? INT64_MAX : (int64_t)(hi - 1);
		if (x < -hi)
			return bits == 64 ? INT64_MIN : (int64_t)-hi;
		return (int64_t)x;
	}
	if (x <= 0)
		return 0;
	if (x >= ldexp(1, bits))
		return bits == 64 ? (int64_t)UINT64_MAX : (int64_t)(ldexp(1, bits) - 1);
	return (int64_t)(uint64_t)x;
}

/* A cell of dtype `from` as a double. */
static double
as_double(Cell c, KcDtype from)
{
	if (isfl(from))
		return c.f;
	if (from == KC_DT_UINT64)
		return (double)c.u;
	return (double)c.i;
}

/* Cast semantics, one cell. */
static Cell
cast_cell(Cell c, KcDtype from, KcDtype to)
{
	Cell r;

	if (isfl(to)) {
		if (isfl(from))
			r.f = round_fl(c.f, to);
		else if (to == KC_DT_FLOAT32) /* one rounding, like sitofp */
			r.f = from == KC_DT_UINT64 ? (double)(float)c.u : (double)(float)c.i;
		else
			r.f = round_fl(as_double(c, from), to);
		return r;
	}
	if (isfl(from))
		r.i = fl_to_int(c.f, to);
	else if (to == KC_DT_BOOL)
		r.i = c.i != 0;
	else
		r.i = wrap(c.u, to);
	return r;
}

/* ---- loading and storing ----------------------------------------------- */

static Cell
load(const void *p, int64_t k, KcDtype dt)
{
	Cell c = {.i = 0};
	uint16_t h;
	float f;

	switch (dt) {
	case KC_DT_BOOL: c.i = ((const uint8_t *)p)[k] != 0; break;
	case KC_DT_INT8: c.i = ((const int8_t *)p)[k]; break;
	case KC_DT_INT16: c.i = ((const int16_t *)p)[k]; break;
	case KC_DT_INT32: c.i = ((const int32_t *)p)[k]; break;
	case KC_DT_INT64: c.i = ((const int64_t *)p)[k]; break;
	case KC_DT_UINT8: c.i = ((const uint8_t *)p)[k]; break;
	case KC_DT_UINT16: c.i = ((const uint16_t *)p)[k]; break;
	case KC_DT_UINT32: c.i = ((const uint32_t *)p)[k]; break;
	case KC_DT_UINT64: c.u = ((const uint64_t *)p)[k]; break;
	case KC_DT_FLOAT16: {
		memcpy(&h, (const char *)p + 2 * k, 2);
		int e = (h >> 10) & 31, m = h & 1023;
		double v = e == 0    ? ldexp(m, -24)
		           : e == 31 ? (m ? NAN : INFINITY)
		                     : ldexp(m + 1024, e - 25);
		c.f = (h & 0x8000) ? -v : v;
		break;
	}
	case KC_DT_BFLOAT16: {
		uint32_t w;
		memcpy(&h, (const char *)p + 2 * k, 2);
		w = (uint32_t)h << 16;
		memcpy(&f, &w, 4);
		c.f = f;
		break;
	}
	case KC_DT_FLOAT32:
		memcpy(&f, (const char *)p + 4 * k, 4);
		c.f = f;
		break;
	case KC_DT_FLOAT64: memcpy(&c.f, (const char *)p + 8 * k, 8); break;
	case KC_DT_COMPLEX64:
	case KC_DT_COMPLEX128:
	case KC_DT_COUNT:
		KC_ASSERT(!"unsupported dtype");
		c.i = 0;
		break;
	}
	return c;
}

/* binary16 bits of a double already on the float16 grid */
static uint16_t
f16_bits(double x)
{
	uint16_t s = signbit(x) ? 0x8000 : 0;
	int e;

	if (isnan(x))
		return 0x7e00;
	x = fabs(x);
	if (isinf(x))
		return s | 0x7c00;
	if (x < ldexp(1, -14)) /* subnormal or zero */
		return s | (uint16_t)ldexp(x, 24);
	(void)frexp(x, &e); /* x = m 2^e, m in [0.5, 1) */
	return s | (uint16_t)((e + 14) << 10) | ((uint16_t)ldexp(x, 11 - e) & 1023);
}

static void
store(void *p, int64_t k, KcDtype dt, Cell c)
{
	float f;

	switch (dt) {
	case KC_DT_BOOL: ((uint8_t *)p)[k] = c.i != 0; break;
	case KC_DT_INT8: ((int8_t *)p)[k] = (int8_t)c.i; break;
	case KC_DT_INT16: ((int16_t *)p)[k] = (int16_t)c.i; break;
	case KC_DT_INT32: ((int32_t *)p)[k] = (int32_t)c.i; break;
	case KC_DT_INT64: ((int64_t *)p)[k] = c.i; break;
	case KC_DT_UINT8: ((uint8_t *)p)[k] = (uint8_t)c.u; break;
	case KC_DT_UINT16: ((uint16_t *)p)[k] = (uint16_t)c.u; break;
	case KC_DT_UINT32: ((uint32_t *)p)[k] = (uint32_t)c.u; break;
	case KC_DT_UINT64: ((uint64_t *)p)[k] = c.u; break;
	case KC_DT_FLOAT16: {
		uint16_t h = f16_bits(c.f);
		memcpy((char *)p + 2 * k, &h, 2);
		break;
	}
	case KC_DT_BFLOAT16: {
		uint32_t w;
		uint16_t h;
		f = (float)c.f; /* exact: the value is on the bfloat16 grid */
		memcpy(&w, &f, 4);
		h = isnan(c.f) ? 0x7fc0 : (uint16_t)(w >> 16);
		memcpy((char *)p + 2 * k, &h, 2);
		break;
	}
	case KC_DT_FLOAT32:
		f = (float)c.f;
		memcpy((char *)p + 4 * k, &f, 4);
		break;
	case KC_DT_FLOAT64: memcpy((char *)p + 8 * k, &c.f, 8); break;
	case KC_DT_COMPLEX64:
	case KC_DT_COMPLEX128:
	case KC_DT_COUNT: KC_ASSERT(!"unsupported dtype"); break;
	}
}

/* ---- one op on cells ------------------------------------------------------ */

/* FloorDiv, FloorMod (sign of the divisor) and Mod (sign of the dividend)
 * on cells x, y. Integers: x // 0 == x % 0 == 0, INT_MIN // -1 wraps. */
static Cell
floor_divmod(IrOp op, bool fl, bool sg, Cell x, Cell y)
{
	Cell r = {.i = 0};

	if (fl) {
		double m = fmod(x.f, y.f);
		if (op == IR_OP_FLOOR_DIV)
			r.f = floor(x.f / y.f);
		else if (op == IR_OP_FLOOR_MOD && m != 0 && (m < 0) != (y.f < 0))
			r.f = m + y.f;
		else
			r.f = m;
		return r;
	}
	if (y.u == 0)
		return r;
	if (!sg) {
		r.u = op == IR_OP_FLOOR_DIV ? x.u / y.u : x.u % y.u;
		return r;
	}
	if (y.i == -1) {
		r.u = op == IR_OP_FLOOR_DIV ? 0 - x.u : 0;
		return r;
	}
	int64_t q = x.i / y.i, m = x.i % y.i;
	bool adj = m != 0 && (m < 0) != (y.i < 0);
	if (op == IR_OP_FLOOR_DIV)
		r.i = adj ? q - 1 : q;
	else if (op == IR_OP_FLOOR_MOD)
		r.i = adj ? m + y.i : m;
	else
		r.i = m;
	return r;
}

/* The elementwise op of node nd on operand cells a[] (operand dtype at,
 * result dtype dt), before rounding to dt. */
static Cell
op_cell(IrOp op, KcDtype at, KcDtype dt, const Cell *a)
{
	Cell r = {.i = 0};
	bool fl = isfl(dt), afl = isfl(at), sg = issigned(at);
	bool bo = dt == KC_DT_BOOL;
	double x = a[0].f, y = 0;
	uint64_t u = a[0].u, v = 0;

	if (ir_op_info[op].arity >= 2) {
		y = a[1].f;
		v = a[1].u;
	}
	switch (op) {
	case IR_OP_ADD:
		if (fl)
			r.f = x + y;
		else
			r.u = bo ? (u | v) : u + v;
		break;
	case IR_OP_SUB:
		if (fl)
			r.f = x - y;
		else
			r.u = bo ? (u ^ v) : u - v;
		break;
	case IR_OP_MUL:
		if (fl)
			r.f = x * y;
		else
			r.u = bo ? (u & v) : u * v;
		break;
	case IR_OP_FLOOR_DIV:
	case IR_OP_FLOOR_MOD:
	case IR_OP_MOD: r = floor_divmod(op, fl, sg, a[0], a[1]); break;
	case IR_OP_REAL_DIV:
	case IR_OP_DIV:
		if (fl)
			r.f = x / y;
		else if (v == 0)
			r.u = 0;
		else if (!sg)
			r.u = u / v;
		else if (a[1].i == -1)
			r.u = 0 - u;
		else
			r.i = a[0].i / a[1].i;
		break;
	case IR_OP_MAXIMUM:
	case IR_OP_MINIMUM: {
		bool mx = op == IR_OP_MAXIMUM, first;
		if (fl)
			first = isnan(x) || (mx ? x > y : x < y);
		else if (sg)
			first = mx ? a[0].i > a[1].i : a[0].i < a[1].i;
		else
			first = mx ? u > v : u < v;
		r = first ? a[0] : a[1];
		break;
	}
	case IR_OP_POW: r.f = pow(x, y); break;
	case IR_OP_NEG:
		if (fl)
			r.f = -x;
		else
			r.u = bo ? u : 0 - u;
		break;
	case IR_OP_ABS:
		if (fl)
			r.f = fabs(x);
		else
			r.u = sg && a[0].i < 0 ? 0 - u : u;
		break;
	case IR_OP_EXP: r.f = exp(x); break;
	case IR_OP_LOG: r.f = log(x); break;
	case IR_OP_SQRT: r.f = sqrt(x); break;
	case IR_OP_RSQRT: r.f = 1.0 / sqrt(x); break;
	case IR_OP_RECIPROCAL: r.f = 1.0 / x; break;
	case IR_OP_TANH: r.f = tanh(x); break;
	case IR_OP_ERF: r.f = erf(x); break;
	case IR_OP_SQUARE:
		if (fl)
			r.f = x * x;
		else
			r.u = bo ? u : u * u;
		break;
	case IR_OP_FLOOR:
		if (fl)
			r.f = floor(x);
		else
			r = a[0];
		break;
	case IR_OP_ROUND:
		if (fl)
			r.f = round(x); /* half away from zero */
		else
			r = a[0];
		break;
	case IR_OP_SIGN:
		if (fl)
			r.f = x > 0 ? 1.0 : x < 0 ? -1.0 : x; /* NaN and -0 kept */
		else if (sg)
			r.i = (a[0].i > 0) - (a[0].i < 0);
		else
			r.i = u != 0;
		break;
	case IR_OP_GREATER: r.i = afl ? x > y : sg ? a[0].i > a[1].i : u > v; break;
	case IR_OP_GREATER_EQUAL: r.i = afl ? x >= y : sg ? a[0].i >= a[1].i : u >= v; break;
	case IR_OP_LESS: r.i = afl ? x < y : sg ? a[0].i < a[1].i : u < v; break;
	case IR_OP_LESS_EQUAL: r.i = afl ? x <= y : sg ? a[0].i <= a[1].i : u <= v; break;
	case IR_OP_EQUAL: r.i = afl ? x == y : u == v; break;
	case IR_OP_NOT_EQUAL: r.i = afl ? x != y : u != v; break; /* NaN: true */
	case IR_OP_LOGICAL_AND: r.i = u && v; break;
	case IR_OP_LOGICAL_OR: r.i = u || v; break;
	case IR_OP_LOGICAL_NOT: r.i = !u; break;
	case IR_OP_IS_NAN: r.i = afl && isnan(x); break;
	case IR_OP_IS_INF: r.i = afl && isinf(x); break;
	case IR_OP_IS_FINITE: r.i = !afl || isfinite(x); break;
	case IR_OP_SELECT: r = a[0].i ? a[1] : a[2]; break;
	case IR_OP_CAST: r = cast_cell(a[0], at, dt); break;
	case IR_OP_SIN: r.f = sin(x); break;
	case IR_OP_COS: r.f = cos(x); break;
	case IR_OP_ASIN: r.f = asin(x); break;
	case IR_OP_ACOS: r.f = acos(x); break;
	case IR_OP_ATAN: r.f = atan(x); break;
	case IR_OP_ASINH: r.f = asinh(x); break;
	case IR_OP_ACOSH: r.f = acosh(x); break;
	case IR_OP_EXPM1: r.f = expm1(x); break;
	case IR_OP_ATAN2: r.f = atan2(x, y); break; /* Atan2(y, x) */
	case IR_OP_BROADCAST_TO:
	case IR_OP_RESHAPE: r = a[0]; break;
	case IR_OP_EXPAND_DIMS:
	case IR_OP_TRANSPOSE:
	case IR_OP_TILE:
	case IR_OP_STRIDED_SLICE:
	case IR_OP_REDUCE_SUM:
	case IR_OP_REDUCE_MAX:
	case IR_OP_REDUCE_MIN:
	case IR_OP_REDUCE_PROD:
	case IR_OP_ASSIGN:
	case IR_OP_INPLACE_ASSIGN:
	case IR_OP_ONE_HOT:
	case IR_OP_GATHER:
	case IR_OP_CONCAT:
	case IR_OP_MAT_MUL:
	case IR_OP_BATCH_MAT_MUL:
	case IR_OP_CONV2D:
	case IR_OP_ELEM_ANY:
	case IR_OP_ELEM_ALL:
	case IR_OP_ARGMAX:
	case IR_OP_ARGMIN:
	case IR_OP_CUM_SUM:
	case IR_OP_CUM_PROD:
	case IR_OP_POOL2D:
	case IR_OP_ADD_N: /* addn() */
	case IR_OP_COUNT: KC_ASSERT(!"not elementwise"); break;
	}
	return r;
}

/* The result cell rounded to dtype dt (Cast already did it). */
static Cell
round_cell(Cell c, KcDtype dt)
{
	if (isfl(dt))
		c.f = round_fl(c.f, dt);
	else
		c.i = wrap(c.u, dt);
	return c;
}

/* ---- tensors ---------------------------------------------------------------- */

static Cell *
alloc_cells(Interp *I, const IrValue *v)
{
	size_t bytes = (size_t)v->numel * sizeof(Cell);

	if (I->max && I->live + bytes > I->max) {
		kc_fail(I->err, KC_TOO_LARGE, "interp",
		        "the reference interpreter needs more than %zu bytes", I->max);
		return NULL;
	}
	I->live += bytes;
	return kc_xmalloc(bytes ? bytes : 1);
}

static void
release(Interp *I, const IrValue *v)
{
	if (I->val[v->id]) {
		I->live -= (size_t)v->numel * sizeof(Cell);
		free(I->val[v->id]);
		I->val[v->id] = NULL;
	}
	if (I->tie[v->id]) {
		I->live -= (size_t)v->numel;
		free(I->tie[v->id]);
		I->tie[v->id] = NULL;
	}
}

/* A comparison whose float operands are within rounding distance of each
 * other: a kernel that rounds differently (a transcendental 1 ulp off) may
 * decide it the other way. */
static bool
near_tie(double x, double y, bool half)
{
	double tol = half ? 2e-3 : 1e-6;
	double m = fmax(1.0, fmax(fabs(x), fabs(y)));
	return fabs(x - y) <= tol * m;
}

/* Drops one use of v; frees it after the last. */
static void
unuse(Interp *I, const IrValue *v)
{
	if (--I->left[v->id] <= 0)
		release(I, v);
}

/* Per-dimension strides of `in` read at the indices of `out` (numpy
 * broadcasting: trailing dims align, size-1 dims get stride 0). */
static void
bstrides(const IrValue *in, const IrValue *out, int64_t *st)
{
	int64_t s = 1;
	for (int d = out->rank - 1; d >= 0; d--) {
		int off = d - (out->rank - in->rank);
		if (off < 0) {
			st[d] = 0;
			continue;
		}
		st[d] = in->shape[off] == 1 ? 0 : s;
		s *= in->shape[off];
	}
}

/* ---- the structured ops: layout, reductions, in-place writes, MatMul ---- */

static KcStatus
too_large(Interp *I)
{
	return kc_fail(I->err, KC_TOO_LARGE, "interp",
	               "the reference interpreter needs more than %zu bytes", I->max);
}

/* Row-major offset of multi-index j in v. */
static int64_t
lin(const int64_t *j, const IrValue *v)
{
	int64_t o = 0;
	for (int d = 0; d < v->rank; d++)
		o = o * v->shape[d] + j[d];
	return o;
}

/* The next row-major multi-index of v. */
static void
next_idx(int64_t *idx, const IrValue *v)
{
	for (int d = v->rank - 1; d >= 0; d--) {
		if (++idx[d] < v->shape[d])
			return;
		idx[d] = 0;
	}
}

/* A zeroed tie mask for nd's result when an operand has one; else NULL. */
static KcStatus
tie_out(Interp *I, const IrNode *nd, uint8_t **tout)
{
	const IrValue *out = nd->out[0];
	bool any = false;

	*tout = NULL;
	for (int k = 0; k < nd->nin && I->ties; k++)
		any |= I->tie[nd->in[k]->id] != NULL;
	if (!any)
		return KC_OK;
	if (I->max && I->live + (size_t)out->numel > I->max)
		return too_large(I);
	I->live += (size_t)out->numel;
	*tout = I->tie[out->id] = kc_xcalloc((size_t)out->numel + 1, 1);
	return KC_OK;
}

/* Reduce* over attrs.axis and ElemAny/ElemAll over everything, accumulating
 * in double (floats) or exactly modulo 2^64 (integers), rounded once. */
static void
reduce(Interp *I, const IrNode *nd, Cell *r, uint8_t *tout)
{
	const IrValue *u = nd->in[0], *out = nd->out[0];
	const Cell *x = I->val[u->id];
	const uint8_t *tx = I->tie[u->id];
	KcDtype at = u->dtype, dt = out->dtype;
	IrOp op = nd->op;
	/* a bool input of Reduce* reduces in the output dtype (a count, any,
	 * all); a bool result of a sum saturates (any) when rounded to bool */
	bool conv =
	    at == KC_DT_BOOL && dt != KC_DT_BOOL && op != IR_OP_ELEM_ANY && op != IR_OP_ELEM_ALL;
	if (conv)
		at = dt;
	bool red[KC_MAX_RANK] = {false}, fl = isfl(at), sg = issigned(at);
	int64_t idx[KC_MAX_RANK] = {0};
	Cell id = {.i = 0};

	for (int a = 0; a < nd->attrs.naxis; a++)
		red[nd->attrs.axis[a]] = true;
	if (op == IR_OP_REDUCE_PROD) {
		if (fl)
			id.f = 1.0;
		else
			id.i = 1;
	} else if (op == IR_OP_REDUCE_MAX) {
		if (fl)
			id.f = -INFINITY;
		else
			id.i = sg ? INT64_MIN : 0;
	} else if (op == IR_OP_REDUCE_MIN) {
		if (fl)
			id.f = INFINITY;
		else
			id.u = sg ? (uint64_t)INT64_MAX : UINT64_MAX;
	} else if (op == IR_OP_ELEM_ALL) {
		id.i = 1;
	} /* ReduceSum, ElemAny: 0 */
	for (int64_t e = 0; e < out->numel; e++)
		r[e] = id;
	for (int64_t e = 0; e < u->numel; e++, next_idx(idx, u)) {
		int64_t o = 0;
		for (int d = 0; d < u->rank; d++)
			if (!red[d])
				o = o * u->shape[d] + idx[d];
		Cell a = conv ? cast_cell(x[e], KC_DT_BOOL, dt) : x[e], *acc = &r[o];
		bool nz = fl ? a.f != 0 : a.u != 0; /* NaN != 0 */
		if (op == IR_OP_REDUCE_SUM) {
			if (fl)
				acc->f += a.f;
			else
				acc->u += a.u;
		} else if (op == IR_OP_REDUCE_PROD) {
			if (fl)
				acc->f *= a.f;
			else
				acc->u *= a.u;
		} else if (op == IR_OP_REDUCE_MAX) {
			if (fl ? isnan(a.f) || a.f > acc->f : sg ? a.i > acc->i : a.u > acc->u)
				*acc = a;
		} else if (op == IR_OP_REDUCE_MIN) {
			if (fl ? isnan(a.f) || a.f < acc->f : sg ? a.i < acc->i : a.u < acc->u)
				*acc = a;
		} else if (op == IR_OP_ELEM_ANY) {
			acc->i |= nz;
		} else {
			acc->i &= nz;
		}
		/* NaN stays NaN in Max/Min: later x > NaN is false */
		if (tout && tx)
			tout[o] |= tx[e];
	}
	for (int64_t e = 0; e < out->numel; e++) {
		if (op == IR_OP_ELEM_ANY || op == IR_OP_ELEM_ALL)
			r[e] = cast_cell(r[e], KC_DT_BOOL, dt);
		else
			r[e] = round_cell(r[e], dt);
	}
}

/* AddN: ((x0 + x1) + x2) + ... with numpy broadcasting, each partial sum
 * rounded to the dtype (what a chain of Adds gives). */
static void
addn(Interp *I, const IrNode *nd, Cell *r, uint8_t *tout)
{
	const IrValue *out = nd->out[0];
	bool fl = isfl(out->dtype);

	for (int k = 0; k < nd->nin; k++) {
		const IrValue *u = nd->in[k];
		const Cell *x = I->val[u->id];
		const uint8_t *tx = I->tie[u->id];
		int64_t idx[KC_MAX_RANK] = {0}, s[KC_MAX_RANK];
		bstrides(u, out, s);
		for (int64_t e = 0; e < out->numel; e++, next_idx(idx, out)) {
			int64_t o = 0;
			for (int d = 0; d < out->rank; d++)
				o += idx[d] * s[d];
			if (k == 0)
				r[e] = x[o];
			else if (fl)
				r[e].f = round_fl(r[e].f + x[o].f, out->dtype);
			else
				r[e].i = wrap(r[e].u + x[o].u, out->dtype);
			if (tout && tx)
				tout[e] |= tx[o];
		}
	}
}

/* MatMul/BatchMatMul: out[..., m, n] = sum_k a[..., m, k] b[..., k, n]
 * (a stored [..., K, M] with trans_a, b [..., N, K] with trans_b; batch
 * dims align right and broadcast), accumulated in double, rounded once. */
static void
matmul(Interp *I, const IrNode *nd, Cell *r, uint8_t *tout)
{
	const IrValue *a = nd->in[0], *b = nd->in[1], *out = nd->out[0];
	const Cell *xa = I->val[a->id], *xb = I->val[b->id];
	const uint8_t *ta = I->tie[a->id], *tb = I->tie[b->id];
	bool tra = nd->attrs.trans_a, trb = nd->attrs.trans_b, fl = isfl(a->dtype);
	int ra = a->rank, rb = b->rank, ro = out->rank, nb = ro - 2;
	int64_t M = out->shape[ro - 2], N = out->shape[ro - 1];
	int64_t K = tra ? a->shape[ra - 2] : a->shape[ra - 1];
	int64_t bi[KC_MAX_RANK] = {0}, o = 0;

	if (out->numel == 0)
		return;
	for (int64_t bt = 0; bt < out->numel / (M * N); bt++) {
		int64_t ab = 0, bb = 0;
		for (int d = 0; d < ra - 2; d++)
			ab = ab * a->shape[d] + (a->shape[d] == 1 ? 0 : bi[d + nb - (ra - 2)]);
		for (int d = 0; d < rb - 2; d++)
			bb = bb * b->shape[d] + (b->shape[d] == 1 ? 0 : bi[d + nb - (rb - 2)]);
		ab *= a->shape[ra - 2] * a->shape[ra - 1];
		bb *= b->shape[rb - 2] * b->shape[rb - 1];
		for (int64_t m = 0; m < M; m++)
			for (int64_t n = 0; n < N; n++, o++) {
				double s = 0;
				uint64_t si = 0;
				uint8_t t = 0;
				for (int64_t k = 0; k < K; k++) {
					int64_t ea = ab + (tra ? k * M + m : m * K + k);
					int64_t eb = bb + (trb ? n * K + k : k * N + n);
					if (fl)
						s += xa[ea].f * xb[eb].f;
					else
						si += xa[ea].u * xb[eb].u;
					if (tout)
						t |= (ta ? ta[ea] : 0) | (tb ? tb[eb] : 0);
				}
				if (fl)
					r[o].f = round_fl(s, out->dtype);
				else
					r[o].i = wrap(si, out->dtype);
				if (tout)
					tout[o] = t;
			}
		for (int d = nb - 1; d >= 0; d--) { /* next batch index */
			if (++bi[d] < out->shape[d])
				break;
			bi[d] = 0;
		}
	}
}

/* Conv2D: y[n,oh,ow,o] = sum over kh, kw, ci of
 * x[n, oh*sh + kh*dh - pt, ow*sw + kw*dw - pl, ch(o, ci)] * w[o, kh, kw, ci]
 * (NHWC data, [O,KH,KW,I] weights; NCHW: [N,C,H,W] and [O,I,KH,KW]), taps in
 * the padding count as 0, group g of O/G output channels reads input
 * channels g*(C/G) .. (g+1)*(C/G)-1. Sums in double, rounded at the end. */
static void
conv2d(Interp *I, const IrNode *nd, Cell *r, uint8_t *tout)
{
	const IrValue *x = nd->in[0], *w = nd->in[1], *out = nd->out[0];
	const Cell *xv = I->val[x->id], *wv = I->val[w->id];
	const uint8_t *tx = I->tie[x->id], *tw = I->tie[w->id];
	const IrAttrs *at = &nd->attrs;
	bool nhwc = at->nhwc;
	int64_t N = x->shape[0];
	int64_t C = nhwc ? x->shape[3] : x->shape[1];
	int64_t H = nhwc ? x->shape[1] : x->shape[2], W = nhwc ? x->shape[2] : x->shape[3];
	int64_t O = w->shape[0];
	int64_t KH = nhwc ? w->shape[1] : w->shape[2], KW = nhwc ? w->shape[2] : w->shape[3];
	int64_t OH = nhwc ? out->shape[1] : out->shape[2],
	        OW = nhwc ? out->shape[2] : out->shape[3];
	int64_t G = at->groups > 0 ? at->groups : 1, CG = C / G, OG = O / G;

	for (int64_t n = 0; n < N; n++)
		for (int64_t o = 0; o < O; o++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					double s = 0;
					uint8_t t = 0;
					for (int64_t kh = 0; kh < KH; kh++)
						for (int64_t kw = 0; kw < KW; kw++) {
							int64_t ih = oh * at->stride[0] +
							             kh * at->dilation[0] -
							             at->pad[0];
							int64_t iw = ow * at->stride[1] +
							             kw * at->dilation[1] -
							             at->pad[2];
							if (ih < 0 || ih >= H || iw < 0 || iw >= W)
								continue;
							for (int64_t ci = 0; ci < CG; ci++) {
								int64_t c = (o / OG) * CG + ci;
								int64_t ex =
								    nhwc ? ((n * H + ih) * W + iw) *
								                   C +
								               c
								         : ((n * C + c) * H + ih) *
								                   W +
								               iw;
								int64_t ew =
								    nhwc ? ((o * KH + kh) * KW +
								            kw) * CG +
								               ci
								         : ((o * CG + ci) * KH +
								            kh) * KW +
								               kw;
								s += xv[ex].f * wv[ew].f;
								if (tout)
									t |= (tx ? tx[ex] : 0) |
									     (tw ? tw[ew] : 0);
							}
						}
					int64_t eo = nhwc ? ((n * OH + oh) * OW + ow) * O + o
					                  : ((n * O + o) * OH + oh) * OW + ow;
					r[eo].f = round_fl(s, out->dtype);
					if (tout)
						tout[eo] = t;
				}
}

/* Walks the lines of u along axis ax: *outer x *inner lines, element k of
 * line (o, i) at offset (o * n + k) * inner + i, n = u->shape[ax]. */
static void
lines(const IrValue *u, int ax, int64_t *outer, int64_t *inner)
{
	*outer = *inner = 1;
	for (int d = 0; d < ax; d++)
		*outer *= u->shape[d];
	for (int d = ax + 1; d < u->rank; d++)
		*inner *= u->shape[d];
}

/* Argmax/Argmin along axis[0], as numpy: the first index of the extreme
 * value, or of the first NaN. The result is marked a near-tie when the
 * input is computed and another element is within rounding distance of the
 * chosen one (a kernel computing it 1 ulp apart may choose that one). */
static void
argext(Interp *I, const IrNode *nd, Cell *r, uint8_t *tout)
{
	const IrValue *u = nd->in[0], *out = nd->out[0];
	const Cell *x = I->val[u->id];
	const uint8_t *tx = I->tie[u->id];
	int ax = (int)nd->attrs.axis[0];
	int64_t outer, inner, n = u->shape[ax];
	bool fl = isfl(u->dtype), sg = issigned(u->dtype), mx = nd->op == IR_OP_ARGMAX;
	bool computed = fl && u->kind == IRV_OP;

	lines(u, ax, &outer, &inner);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			int64_t base = o * n * inner + i, best = 0;
			for (int64_t k = 1; k < n; k++) {
				Cell a = x[base + k * inner], b = x[base + best * inner];
				bool better;
				if (fl) {
					if (isnan(b.f))
						break;
					better = isnan(a.f) || (mx ? a.f > b.f : a.f < b.f);
				} else if (sg) {
					better = mx ? a.i > b.i : a.i < b.i;
				} else {
					better = mx ? a.u > b.u : a.u < b.u;
				}
				if (better)
					best = k;
			}
			int64_t e = o * inner + i;
			r[e].i = best;
			if (!tout)
				continue;
			uint8_t t = 0;
			double bv = x[base + best * inner].f;
			for (int64_t k = 0; k < n; k++) {
				t |= tx ? tx[base + k * inner] : 0;
				if (computed && k != best && !isnan(bv) &&
				    near_tie(x[base + k * inner].f, bv, I->half[u->id]))
					t = 1;
			}
			tout[e] = t;
		}
	(void)out;
}

/* CumSum/CumProd along axis[0]: a running sum/product in double (floats)
 * or modulo 2^64 (integers), each element rounded once; exclusive shifts
 * by one (the first element is the identity), reverse runs from the end. */
static void
cumulate(Interp *I, const IrNode *nd, Cell *r, uint8_t *tout)
{
	const IrValue *u = nd->in[0], *out = nd->out[0];
	const Cell *x = I->val[u->id];
	const uint8_t *tx = I->tie[u->id];
	const IrAttrs *at = &nd->attrs;
	int ax = (int)at->axis[0];
	int64_t outer, inner, n = u->shape[ax];
	bool fl = isfl(u->dtype), prod = nd->op == IR_OP_CUM_PROD;

	lines(u, ax, &outer, &inner);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			double af = prod ? 1 : 0;
			uint64_t ai = prod ? 1 : 0;
			uint8_t t = 0;
			for (int64_t q = 0; q < n; q++) {
				int64_t k = at->reverse ? n - 1 - q : q;
				int64_t e = (o * n + k) * inner + i;
				Cell c = {
				    0}; /* set below on every path; gcc -O1 + ASan cannot tell */
				if (at->exclusive) { /* the value before this element */
					if (fl)
						c.f = af;
					else
						c.u = ai;
					if (tout)
						tout[e] = t;
				}
				if (fl)
					af = prod ? af * x[e].f : af + x[e].f;
				else
					ai = prod ? ai * x[e].u : ai + x[e].u;
				t |= tx ? tx[e] : 0;
				if (!at->exclusive) {
					if (fl)
						c.f = af;
					else
						c.u = ai;
					if (tout)
						tout[e] = t;
				}
				r[e] = round_cell(c, out->dtype);
			}
		}
}

/* Pool2D (see lower.c pool_stages for the choices): max over the window's
 * real taps (NaN propagates); avg: the sum of the real taps over the number
 * of window cells inside the padded input (count_include_pad, as AKG's
 * op_dsl.py reference: padding counts as 0 in the mean), in double, rounded
 * once. */
static void
pool2d(Interp *I, const IrNode *nd, Cell *r, uint8_t *tout)
{
	const IrValue *x = nd->in[0], *out = nd->out[0];
	const Cell *xv = I->val[x->id];
	const uint8_t *tx = I->tie[x->id];
	const IrAttrs *at = &nd->attrs;
	bool nhwc = at->nhwc;
	int64_t N = x->shape[0], C = nhwc ? x->shape[3] : x->shape[1];
	int64_t H = nhwc ? x->shape[1] : x->shape[2], W = nhwc ? x->shape[2] : x->shape[3];
	int64_t OH = nhwc ? out->shape[1] : out->shape[2];
	int64_t OW = nhwc ? out->shape[2] : out->shape[3];
	int64_t HP = H + at->pad[0] + at->pad[1], WP = W + at->pad[2] + at->pad[3];

	for (int64_t n = 0; n < N; n++)
		for (int64_t c = 0; c < C; c++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					int64_t h0 = oh * at->stride[0], w0 = ow * at->stride[1];
					double acc = at->pool_max ? -INFINITY : 0;
					uint8_t t = 0;
					for (int64_t kh = 0; kh < at->kernel[0]; kh++)
						for (int64_t kw = 0; kw < at->kernel[1]; kw++) {
							int64_t ih = h0 + kh - at->pad[0],
							        iw = w0 + kw - at->pad[2];
							if (ih < 0 || ih >= H || iw < 0 || iw >= W)
								continue;
							int64_t ex =
							    nhwc ? ((n * H + ih) * W + iw) * C + c
							         : ((n * C + c) * H + ih) * W + iw;
							double v = xv[ex].f;
							if (!at->pool_max)
								acc += v;
							else if (isnan(v) || v > acc)
								acc = isnan(acc) ? acc : v;
							t |= tx ? tx[ex] : 0;
						}
					if (!at->pool_max) {
						int64_t ch =
						    (h0 + at->kernel[0] < HP ? h0 + at->kernel[0]
						                             : HP) -
						    h0;
						int64_t cw =
						    (w0 + at->kernel[1] < WP ? w0 + at->kernel[1]
						                             : WP) -
						    w0;
						acc /= (double)(ch * cw);
					}
					int64_t eo = nhwc ? ((n * OH + oh) * OW + ow) * C + c
					                  : ((n * C + c) * OH + oh) * OW + ow;
					r[eo].f = round_fl(acc, out->dtype);
					if (tout)
						tout[eo] = t;
				}
}

/* The non-elementwise ops of node nd into r (allocated). */
static KcStatus
eval_struct(Interp *I, const IrNode *nd, Cell *r)
{
	const IrValue *out = nd->out[0], *u = nd->in[0];
	const IrAttrs *at = &nd->attrs;
	int64_t idx[KC_MAX_RANK] = {0}, j[KC_MAX_RANK] = {0};
	uint8_t *tout;
	KcStatus st;

	if ((st = tie_out(I, nd, &tout)) != KC_OK)
		return st;
	switch (nd->op) {
	case IR_OP_REDUCE_SUM:
	case IR_OP_REDUCE_MAX:
	case IR_OP_REDUCE_MIN:
	case IR_OP_REDUCE_PROD:
	case IR_OP_ELEM_ANY:
	case IR_OP_ELEM_ALL: reduce(I, nd, r, tout); return KC_OK;
	case IR_OP_MAT_MUL:
	case IR_OP_BATCH_MAT_MUL: matmul(I, nd, r, tout); return KC_OK;
	case IR_OP_CONV2D: conv2d(I, nd, r, tout); return KC_OK;
	case IR_OP_ARGMAX:
	case IR_OP_ARGMIN: argext(I, nd, r, tout); return KC_OK;
	case IR_OP_CUM_SUM:
	case IR_OP_CUM_PROD: cumulate(I, nd, r, tout); return KC_OK;
	case IR_OP_POOL2D: pool2d(I, nd, r, tout); return KC_OK;
	case IR_OP_ASSIGN:
	case IR_OP_INPLACE_ASSIGN: {
		/* yields src (Assign) or depend (InplaceAssign); src goes into
		 * dst's input buffer now: every input was loaded up front, and
		 * later ops read this node's result, not the buffer */
		const IrValue *res = nd->in[nd->op == IR_OP_ASSIGN ? 1 : 2];
		const IrValue *dst = nd->in[0], *src = nd->in[1];
		const Cell *s = I->val[src->id];
		memcpy(r, I->val[res->id], (size_t)out->numel * sizeof(Cell));
		if (tout && I->tie[res->id])
			memcpy(tout, I->tie[res->id], (size_t)out->numel);
		for (int64_t e = 0; e < dst->numel; e++)
			store(I->args[dst->input_index], e, dst->dtype,
			      src->dtype == dst->dtype ? s[e]
			                               : cast_cell(s[e], src->dtype, dst->dtype));
		return KC_OK;
	}
	case IR_OP_EXPAND_DIMS: /* same element order */
		memcpy(r, I->val[u->id], (size_t)out->numel * sizeof(Cell));
		if (tout)
			memcpy(tout, I->tie[u->id], (size_t)out->numel);
		return KC_OK;
	case IR_OP_TRANSPOSE:
	case IR_OP_TILE:
	case IR_OP_STRIDED_SLICE:
	case IR_OP_ONE_HOT:
	case IR_OP_GATHER:
	case IR_OP_CONCAT: break;
	case IR_OP_ADD:
	case IR_OP_SUB:
	case IR_OP_MUL:
	case IR_OP_REAL_DIV:
	case IR_OP_DIV:
	case IR_OP_FLOOR_DIV:
	case IR_OP_FLOOR_MOD:
	case IR_OP_MOD:
	case IR_OP_MAXIMUM:
	case IR_OP_MINIMUM:
	case IR_OP_POW:
	case IR_OP_NEG:
	case IR_OP_ABS:
	case IR_OP_EXP:
	case IR_OP_LOG:
	case IR_OP_SQRT:
	case IR_OP_RSQRT:
	case IR_OP_RECIPROCAL:
	case IR_OP_TANH:
	case IR_OP_ERF:
	case IR_OP_SQUARE:
	case IR_OP_FLOOR:
	case IR_OP_ROUND:
	case IR_OP_SIGN:
	case IR_OP_GREATER:
	case IR_OP_GREATER_EQUAL:
	case IR_OP_LESS:
	case IR_OP_LESS_EQUAL:
	case IR_OP_EQUAL:
	case IR_OP_NOT_EQUAL:
	case IR_OP_LOGICAL_AND:
	case IR_OP_LOGICAL_OR:
	case IR_OP_LOGICAL_NOT:
	case IR_OP_IS_NAN:
	case IR_OP_IS_INF:
	case IR_OP_IS_FINITE:
	case IR_OP_SELECT:
	case IR_OP_CAST:
	case IR_OP_BROADCAST_TO:
	case IR_OP_RESHAPE:
	case IR_OP_SIN:
	case IR_OP_COS:
	case IR_OP_ASIN:
	case IR_OP_ACOS:
	case IR_OP_ATAN:
	case IR_OP_ASINH:
	case IR_OP_ACOSH:
	case IR_OP_EXPM1:
	case IR_OP_ATAN2:
	case IR_OP_ADD_N:
	case IR_OP_COUNT: KC_ASSERT(!"elementwise"); return KC_OK;
	}
	/* index remapping: output element e reads element o of operand k */
	for (int64_t e = 0; e < out->numel; e++, next_idx(idx, out)) {
		int k = 0, ax = (int)at->axis[0];
		int64_t o = 0;
		IrOp op = nd->op;
		if (op == IR_OP_TRANSPOSE) { /* out dim d reads input dim perm[d] */
			for (int d = 0; d < out->rank; d++)
				j[at->list[d]] = idx[d];
			o = lin(j, u);
		} else if (op == IR_OP_TILE) {
			for (int d = 0; d < u->rank; d++)
				j[d] = idx[d + out->rank - u->rank] % u->shape[d];
			o = lin(j, u);
		} else if (op == IR_OP_STRIDED_SLICE) {
			/* output dims in new_axes read no input dim */
			for (int d = 0, q = 0; d < u->rank; d++) {
				if (at->shrink >> d & 1) {
					j[d] = at->begin[d];
					continue;
				}
				while (at->new_axes >> q & 1)
					q++;
				j[d] = at->begin[d] + idx[q++] * at->strides[d];
			}
			o = lin(j, u);
		} else if (op == IR_OP_CONCAT) {
			memcpy(j, idx, sizeof j);
			while (j[ax] >= nd->in[k]->shape[ax])
				j[ax] -= nd->in[k++]->shape[ax];
			o = lin(j, nd->in[k]);
		} else if (op == IR_OP_GATHER) {
			/* params[idx[:ax], clamp(indices[idx[ax:ax+ri]]), idx[ax+ri:]] */
			const IrValue *ix = nd->in[1];
			int ri = ix->rank;
			int64_t jj[KC_MAX_RANK];
			for (int d = 0; d < ri; d++)
				jj[d] = idx[ax + d];
			Cell c = I->val[ix->id][lin(jj, ix)];
			int64_t p = c.i < 0 ? 0 : c.i > u->shape[ax] - 1 ? u->shape[ax] - 1 : c.i;
			for (int d = 0; d < u->rank; d++)
				j[d] = d < ax ? idx[d] : d == ax ? p : idx[d - 1 + ri];
			o = lin(j, u);
		} else { /* OneHot */
			/* indices[idx without the new dim] == idx[axis] ? on : off,
			 * the position compared in the indices' dtype */
			for (int d = 0, q = 0; d < out->rank; d++)
				if (d != ax)
					j[q++] = idx[d];
			Cell c = I->val[u->id][lin(j, u)];
			k = c.i == wrap((uint64_t)idx[ax], u->dtype) ? 1 : 2;
			o = 0;
		}
		r[e] = I->val[nd->in[k]->id][o];
		if (tout)
			tout[e] = I->tie[nd->in[k]->id] ? I->tie[nd->in[k]->id][o] : 0;
	}
	return KC_OK;
}

/* Evaluates one node. */
static KcStatus
eval_node(Interp *I, const IrNode *nd)
{
	const IrValue *out = nd->out[0];
	KcDtype dt = out->dtype, at = nd->nin ? nd->in[0]->dtype : dt;
	int64_t st[3][KC_MAX_RANK], idx[KC_MAX_RANK], off[3] = {0, 0, 0};
	const Cell *src[3];
	Cell a[3], *r;

	/* requires: operands evaluated, one result */
	KC_ASSERT(nd->nout == 1);
	if (!(r = alloc_cells(I, out)))
		return I->err->status;
	I->val[out->id] = r;
	if (nd->op == IR_OP_ADD_N) {
		uint8_t *tout;
		KcStatus ts = tie_out(I, nd, &tout);
		if (ts == KC_OK)
			addn(I, nd, r, tout);
		return ts;
	}
	if (ir_op_info[nd->op].kind != OPK_ELEMWISE && nd->op != IR_OP_BROADCAST_TO &&
	    nd->op != IR_OP_RESHAPE)
		return eval_struct(I, nd, r);
	KC_ASSERT(nd->nin <= 3);
	for (int k = 0; k < nd->nin; k++) {
		src[k] = I->val[nd->in[k]->id];
		KC_ASSERT(src[k]);
		if (nd->op == IR_OP_RESHAPE) /* same element order */
			continue;
		bstrides(nd->in[k], out, st[k]);
	}
	/* tie masks: inherited from the operands, set by near-tie comparisons */
	const uint8_t *tin[3] = {NULL, NULL, NULL};
	uint8_t *tout = NULL;
	bool cmp = (ir_op_info[nd->op].flags & OPF_CMP) && nd->nin == 2 && isfl(at);
	bool half = cmp && (I->half[nd->in[0]->id] || I->half[nd->in[1]->id]);
	bool any = cmp;
	for (int k = 0; k < nd->nin && I->ties; k++)
		any |= (tin[k] = I->tie[nd->in[k]->id]) != NULL;
	if (I->ties && any) {
		if (I->max && I->live + (size_t)out->numel > I->max)
			return kc_fail(I->err, KC_TOO_LARGE, "interp",
			               "the reference interpreter needs more than %zu bytes",
			               I->max);
		I->live += (size_t)out->numel;
		tout = I->tie[out->id] = kc_xcalloc((size_t)out->numel + 1, 1);
	}
	if (nd->op == IR_OP_RESHAPE) {
		memcpy(r, src[0], (size_t)out->numel * sizeof(Cell));
		if (tout)
			memcpy(tout, tin[0], (size_t)out->numel);
		return KC_OK;
	}
	memset(idx, 0, sizeof idx);
	for (int64_t e = 0; e < out->numel; e++) {
		for (int k = 0; k < nd->nin; k++)
			a[k] = src[k][off[k]];
		r[e] = op_cell(nd->op, at, dt, a);
		if (nd->op != IR_OP_CAST)
			r[e] = round_cell(r[e], dt);
		if (tout) {
			uint8_t t = cmp && near_tie(a[0].f, a[1].f, half);
			for (int k = 0; k < nd->nin; k++)
				t |= tin[k] ? tin[k][off[k]] : 0;
			tout[e] = t;
		}
		/* next multi-index, row-major, with per-operand offsets */
		for (int d = out->rank - 1; d >= 0; d--) {
			if (++idx[d] < out->shape[d]) {
				for (int k = 0; k < nd->nin; k++)
					off[k] += st[k][d];
				break;
			}
			for (int k = 0; k < nd->nin; k++)
				off[k] -= st[k][d] * (out->shape[d] - 1);
			idx[d] = 0;
		}
	}
	return KC_OK;
}

/* ---- the entry points ------------------------------------------------------ */

KcStatus
kc_interp_ties(CompileCtx *c, const KcGraph *g, void *const *args, size_t max_bytes,
               uint8_t *const *ties, KcErr *err)
{
	Arena *A = compile_ctx_arena(c);
	Interp I = {.g = g, .max = max_bytes, .args = args, .err = err, .ties = ties != NULL};
	KcStatus st = KC_OK;

	I.val = ARENA_ARRAY(A, Cell *, g->nvalues);
	I.tie = ARENA_ARRAY(A, uint8_t *, g->nvalues);
	I.half = ARENA_ARRAY(A, char, g->nvalues);
	for (int v = 0; v < g->nvalues; v++) {
		const IrValue *x = g->values[v];
		I.half[x->id] = x->dtype == KC_DT_FLOAT16 || x->dtype == KC_DT_BFLOAT16;
	}
	for (int n = 0; n < g->nnodes; n++) /* topological order */
		for (int k = 0; k < g->nodes[n]->nin; k++)
			I.half[g->nodes[n]->out[0]->id] |= I.half[g->nodes[n]->in[k]->id];
	I.left = ARENA_ARRAY(A, int, g->nvalues);
	for (int n = 0; n < g->nnodes; n++)
		for (int k = 0; k < g->nodes[n]->nin; k++)
			I.left[g->nodes[n]->in[k]->id]++;
	for (int j = 0; j < g->noutputs; j++)
		I.left[g->outputs[j]->id]++;

	/* kernel inputs and constants */
	for (int v = 0; v < g->nvalues && st == KC_OK; v++) {
		const IrValue *x = g->values[v];
		Cell *p;
		if (x->kind == IRV_OP || I.left[x->id] == 0)
			continue;
		if (!(p = alloc_cells(&I, x))) {
			st = err->status;
			break;
		}
		I.val[x->id] = p;
		for (int64_t e = 0; e < x->numel; e++) {
			if (x->kind == IRV_INPUT)
				p[e] = load(args[x->input_index], e, x->dtype);
			else if (isfl(x->dtype))
				p[e].f = x->fval;
			else
				p[e].i = x->ival;
		}
	}
	for (int n = 0; n < g->nnodes && st == KC_OK; n++) {
		const IrNode *nd = g->nodes[n];
		if ((st = eval_node(&I, nd)) != KC_OK)
			break;
		for (int k = 0; k < nd->nin; k++)
			unuse(&I, nd->in[k]);
		if (I.left[nd->out[0]->id] == 0)
			release(&I, nd->out[0]);
	}
	for (int j = 0; j < g->noutputs && st == KC_OK; j++) {
		const IrValue *x = g->outputs[j];
		void *dst = args[g->ninputs + j];
		KC_ASSERT(I.val[x->id]);
		for (int64_t e = 0; e < x->numel; e++)
			store(dst, e, x->dtype, I.val[x->id][e]);
		if (ties && I.tie[x->id])
			memcpy(ties[j], I.tie[x->id], (size_t)x->numel);
		else if (ties)
			memset(ties[j], 0, (size_t)x->numel);
		unuse(&I, x);
	}
	for (int v = 0; v < g->nvalues; v++)
		release(&I, g->values[v]);
	return st;
}

KcStatus
kc_interp(CompileCtx *c, const KcGraph *g, void *const *args, size_t max_bytes, KcErr *err)
{
	return kc_interp_ties(c, g, args, max_bytes, NULL, err);
}

/* True if a float16/bfloat16 value feeds v (or is v). */
static bool
half_upstream(const IrValue *v, char *seen)
{
	if (seen[v->id])
		return false;
	seen[v->id] = 1;
	if (v->dtype == KC_DT_FLOAT16 || v->dtype == KC_DT_BFLOAT16)
		return true;
	if (v->kind != IRV_OP)
		return false;
	for (int k = 0; k < v->def->nin; k++)
		if (half_upstream(v->def->in[k], seen))
			return true;
	return false;
}

bool
kc_interp_half_upstream(CompileCtx *c, const KcGraph *g, int output)
{
	char *seen = ARENA_ARRAY(compile_ctx_arena(c), char, g->nvalues);
	KC_ASSERT(output >= 0 && output < g->noutputs);
	return half_upstream(g->outputs[output], seen);
}

/* splitmix64 */
static uint64_t
rng_next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Marks the values that reach a Log/Sqrt/Rsqrt/Pow/Reciprocal operand or a
 * divisor (as tests/http/test_corpus.py does): they get positive inputs
 * (need 1); Asin/ACos operands get [-1, 1) (2), Acosh operands >= 1 (3). */
static void
mark_positive(const IrGraph *g, char *need)
{
	for (int n = g->nnodes - 1; n >= 0; n--) {
		const IrNode *nd = g->nodes[n];
		switch (nd->op) {
		case IR_OP_LOG:
		case IR_OP_SQRT:
		case IR_OP_RSQRT:
		case IR_OP_POW:
		case IR_OP_RECIPROCAL: need[nd->in[0]->id] = 1; break;
		case IR_OP_REAL_DIV:
		case IR_OP_DIV:
		case IR_OP_FLOOR_DIV:
		case IR_OP_FLOOR_MOD:
		case IR_OP_MOD: need[nd->in[1]->id] = 1; break;
		case IR_OP_ASIN:
		case IR_OP_ACOS: /* in [-1, 1) */
			if (!need[nd->in[0]->id])
				need[nd->in[0]->id] = 2;
			break;
		case IR_OP_ACOSH: /* >= 1 */
			if (!need[nd->in[0]->id])
				need[nd->in[0]->id] = 3;
			break;
		case IR_OP_SIN:
		case IR_OP_COS:
		case IR_OP_ATAN:
		case IR_OP_ASINH:
		case IR_OP_EXPM1:
		case IR_OP_ATAN2:
		case IR_OP_ADD_N:
		case IR_OP_ADD:
		case IR_OP_SUB:
		case IR_OP_MUL:
		case IR_OP_MAXIMUM:
		case IR_OP_MINIMUM:
		case IR_OP_NEG:
		case IR_OP_ABS:
		case IR_OP_EXP:
		case IR_OP_TANH:
		case IR_OP_ERF:
		case IR_OP_SQUARE:
		case IR_OP_FLOOR:
		case IR_OP_ROUND:
		case IR_OP_SIGN:
		case IR_OP_GREATER:
		case IR_OP_GREATER_EQUAL:
		case IR_OP_LESS:
		case IR_OP_LESS_EQUAL:
		case IR_OP_EQUAL:
		case IR_OP_NOT_EQUAL:
		case IR_OP_LOGICAL_AND:
		case IR_OP_LOGICAL_OR:
		case IR_OP_LOGICAL_NOT:
		case IR_OP_IS_NAN:
		case IR_OP_IS_INF:
		case IR_OP_IS_FINITE:
		case IR_OP_SELECT:
		case IR_OP_CAST:
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
		case IR_OP_ASSIGN:
		case IR_OP_INPLACE_ASSIGN:
		case IR_OP_ONE_HOT:
		case IR_OP_GATHER:
		case IR_OP_CONCAT:
		case IR_OP_MAT_MUL:
		case IR_OP_BATCH_MAT_MUL:
		case IR_OP_CONV2D:
		case IR_OP_ELEM_ANY:
		case IR_OP_ELEM_ALL:
		case IR_OP_ARGMAX:
		case IR_OP_ARGMIN:
		case IR_OP_CUM_SUM:
		case IR_OP_CUM_PROD:
		case IR_OP_POOL2D:
		case IR_OP_COUNT: break;
		}
		if (need[nd->out[0]->id])
			for (int k = 0; k < nd->nin; k++)
				if (!need[nd->in[k]->id] || need[nd->out[0]->id] == 1)
					need[nd->in[k]->id] = need[nd->out[0]->id];
	}
}

/* Index operands (Gather indices, OneHot indices) get valid indices:
 * bound[v] = n > 0 means v should hold values in [0, n). The bound is
 * carried back through pure data movement and Cast to the kernel inputs. */
static void
mark_indices(const IrGraph *g, int64_t *bound)
{
	for (int n = g->nnodes - 1; n >= 0; n--) {
		const IrNode *nd = g->nodes[n];
		const IrValue *ix = NULL;
		int64_t lim = 0;
		if (nd->op == IR_OP_GATHER) {
			ix = nd->in[1];
			lim = nd->in[0]->shape[nd->attrs.axis[0]];
		} else if (nd->op == IR_OP_ONE_HOT) {
			ix = nd->in[0];
			lim = nd->attrs.list[0];
		} else if (nd->nin >= 1 && bound[nd->out[0]->id] &&
		           (nd->op == IR_OP_CAST || nd->op == IR_OP_RESHAPE ||
		            nd->op == IR_OP_BROADCAST_TO || nd->op == IR_OP_EXPAND_DIMS ||
		            nd->op == IR_OP_TRANSPOSE || nd->op == IR_OP_TILE ||
		            nd->op == IR_OP_STRIDED_SLICE)) {
			ix = nd->in[0];
			lim = bound[nd->out[0]->id];
		}
		if (ix && lim > 0 && (!bound[ix->id] || lim < bound[ix->id]))
			bound[ix->id] = lim;
	}
}

struct KcRandomInputs {
	const IrGraph *g;
	char *need;     /* mark_positive */
	int64_t *bound; /* mark_indices */
	uint64_t s;     /* one splitmix64 stream over every input in order */
	int input;      /* where the stream is: the next element of this input */
	int64_t next;
};

KcRandomInputs *
kc_interp_random_begin(CompileCtx *c, const KcGraph *g, uint64_t seed)
{
	KcRandomInputs *r = ARENA_ARRAY(compile_ctx_arena(c), KcRandomInputs, 1);
	r->g = g;
	r->need = ARENA_ARRAY(compile_ctx_arena(c), char, g->nvalues);
	r->bound = ARENA_ARRAY(compile_ctx_arena(c), int64_t, g->nvalues);
	r->s = seed;
	r->input = 0;
	r->next = 0;
	mark_positive(g, r->need);
	mark_indices(g, r->bound);
	return r;
}

void
kc_interp_random_next(KcRandomInputs *r, int input, int64_t n, void *dst)
{
	/* the values depend on the position in the one stream: callers go in order */
	KC_ASSERT(input >= 0 && input < r->g->ninputs);
	while (input > r->input) {
		KC_ASSERT(r->next == r->g->inputs[r->input]->numel);
		r->input++;
		r->next = 0;
	}
	KC_ASSERT(input == r->input);
	const IrValue *x = r->g->inputs[input];
	KC_ASSERT(n >= 0 && n <= x->numel - r->next);
	int pos = r->need[x->id]; /* 1: positive, 2: in [-1, 1), 3: >= 1 */
	int64_t bound = r->bound[x->id];
	for (int64_t e = 0; e < n; e++) {
		uint64_t v = rng_next(&r->s);
		Cell cell;
		if (x->dtype == KC_DT_BOOL) {
			cell.i = (int64_t)(v >> 63);
		} else if (bound > 0) { /* a valid index */
			cell.i = (int64_t)(v % (uint64_t)bound);
			if (isfl(x->dtype))
				cell.f = (double)cell.i;
		} else if (isfl(x->dtype)) {
			double u = (double)(v >> 11) * 0x1p-53; /* [0, 1) */
			cell.f = round_fl(pos == 1   ? 0.5 + 1.5 * u
			                  : pos == 2 ? -1.0 + 2.0 * u
			                  : pos == 3 ? 1.0 + 1.5 * u
			                             : -2.0 + 4.0 * u,
			                  x->dtype);
		} else {
			int64_t lo = pos || !issigned(x->dtype) ? 1 : -5;
			cell.i = lo + (int64_t)(v % (uint64_t)(6 - lo));
		}
		store(dst, e, x->dtype, cell);
	}
	r->next += n;
}

void
kc_interp_random_inputs(CompileCtx *c, const KcGraph *g, uint64_t seed, void *const *args)
{
	KcRandomInputs *r = kc_interp_random_begin(c, g, seed);
	for (int i = 0; i < g->ninputs; i++)
		kc_interp_random_next(r, i, g->inputs[i]->numel, args[i]);
}
