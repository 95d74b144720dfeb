/* lower.c - IrGraph -> LoopNest: a sequence of stages.
 *
 * A plan picks the values that are materialised (a buffer and a stage of
 * their own): reduction, MatMul, Conv2D, Concat, Argmax/Argmin,
 * CumSum/CumProd and Pool2D results, computed Gather params and Arg
 * operands, the sources of in-place writes, and costly values several
 * stages would inline (plan_shared). Stages: (1) the materialised values
 * in graph order, writing their kernel output or a workspace; (2) one
 * injective stage per group of the remaining kernel outputs sharing a
 * shape; (3) one copy stage per Assign/InplaceAssign, last. Every other
 * value is inlined into the stage that needs it.
 *
 * Inlining builds an output's value at a multi-dimensional index (one LnIdx
 * per dim), memoised per (value, index) so shared subexpressions stay
 * shared DAG nodes; a materialised value is a load from its buffer.
 * Broadcasting drops leading dims and maps size-1 dims to 0; Reshape and
 * ExpandDims linearise the index and delinearise it into the operand's
 * shape (the simplifier folds linearize(delinearize(f, S), S) back to f);
 * Transpose permutes, Tile takes the index modulo, StridedSlice is
 * begin + i * stride; OneHot compares the indices with the index value;
 * Gather is a clamped data-dependent load. Finally adjacent loops are
 * collapsed wherever every index agrees (dim merging), so a same-shape
 * chain is one flat loop and [16,768] + [768] is rows x 768; a reduction
 * stage never merges a spatial loop with a reduction loop. Index
 * expressions are built by index.c, checked by verify.c.
 *
 * Work: the memo is per stage without being cleared per stage (memo_at
 * stamps each value's list with its stage), and dim merging reuses one
 * grown scratch, so a stage costs its own size; every value_at call and
 * memo probe counts in KC_WORK_LOWER (checked as it goes: the walk stops
 * at the budget), dim merging in KC_WORK_COLLAPSE, the plan where it runs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loop.h"

#define MAX_EXPRS (1 << 20)
#define MAX_SHARED 64 /* costly values given a stage of their own, at most */

/* Row-major flat index of idx[] in shape. */
static LnIdx *
linearize(LoopNest *ln, LnIdx *const *idx, const int64_t *shape, int rank)
{
	LnIdx *acc = ln_idx_const(ln, 0);
	int64_t stride = 1;

	for (int k = rank - 1; k >= 0; k--) {
		acc = ln_idx_add(ln, acc, ln_idx_mul(ln, idx[k], stride));
		stride *= shape[k];
	}
	return acc;
}

/* The multi-index of flat index f in shape (size-1 dims give 0). */
static void
delinearize(LoopNest *ln, LnIdx *f, const int64_t *shape, int rank, LnIdx **out)
{
	int64_t stride = 1;

	for (int k = rank - 1; k >= 0; k--) {
		out[k] = shape[k] == 1 ? ln_idx_const(ln, 0)
		                       : ln_idx_mod(ln, ln_idx_div(ln, f, stride), shape[k]);
		stride *= shape[k];
	}
}

/* ---- graph inlining ------------------------------------------------------- */

typedef struct Memo Memo;
struct Memo {
	Memo *next;
	LnIdx *idx[KC_MAX_RANK];
	LnExpr *e;
};

typedef struct IdxRef {
	LnIdx **slot;
} IdxRef;

typedef struct Lower {
	LoopNest *ln;
	const IrGraph *g;
	Memo **memo; /* per IrValue id; valid when memo_at[id] == stage + 1 */
	int *memo_at;
	int stage; /* the stage being lowered */
	KcErr *err;
	int *matbuf;         /* per IrValue id: the buffer holding it, or -1 */
	const bool *mat;     /* per IrValue id: materialised (the plan) */
	const IrValue *self; /* the materialised value the stage computes */
	/* collapse's scratch, grown with the nest and reused by every stage,
	 * so a stage costs its own size, not the nest's: marks per expr id
	 * (mark[id] == stamp: listed), the listed index slots, and per var its
	 * loop position (-1 between uses) */
	int *mark, markcap, stamp;
	IdxRef *refs;
	int refcap;
	int *pos, poscap;
} Lower;

/* A fresh expression node with the next dense id. */
static LnExpr *
expr_new(LoopNest *ln, LnExprKind kind, KcDtype dt)
{
	LnExpr *e = ARENA_NEW(ln->arena, LnExpr);
	e->kind = kind;
	e->dtype = dt;
	e->id = ln->nexprs++;
	e->buf = -1;
	return e;
}

/* An elementwise op node over n arguments. */
static LnExpr *
expr_op(LoopNest *ln, IrOp op, KcDtype dt, int n, LnExpr **args)
{
	LnExpr *e = expr_new(ln, LNE_OP, dt);
	e->op = op;
	e->nargs = n;
	for (int i = 0; i < n; i++)
		e->args[i] = args[i];
	return e;
}

/* e converted to dtype dt (a Cast node) unless it already is. */
static LnExpr *
coerce(LoopNest *ln, LnExpr *e, KcDtype dt)
{
	if (e->dtype == dt)
		return e;
	return expr_op(ln, IR_OP_CAST, dt, 1, &e);
}

/* The common dtype of a comparison's operands. */
static KcDtype
promote(KcDtype a, KcDtype b)
{
	const KcDtypeInfo *x = &kc_dtype_info[a], *y = &kc_dtype_info[b];

	if (a == b)
		return a;
	if ((x->cls == DTC_FLOAT) != (y->cls == DTC_FLOAT))
		return x->cls == DTC_FLOAT ? a : b;
	if (x->bytes == y->bytes && x->cls == DTC_FLOAT)
		return KC_DT_FLOAT32; /* float16 vs bfloat16 */
	return x->bytes >= y->bytes ? a : b;
}

static LnExpr *value_at(Lower *L, const IrValue *v, LnIdx **idx);

/* Operand u of a node whose result has v's shape: numpy broadcasting. */
static LnExpr *
operand_at(Lower *L, const IrValue *v, const IrValue *u, LnIdx **idx)
{
	LnIdx *j[KC_MAX_RANK];
	int off = v->rank - u->rank;

	if (off < 0) {
		kc_fail(L->err, KC_BAD_SHAPE, "lower", "operand %s has a higher rank than %s",
		        u->tensor_name ? u->tensor_name : "?",
		        v->tensor_name ? v->tensor_name : "?");
		return NULL;
	}
	for (int k = 0; k < u->rank; k++) {
		if (u->shape[k] == 1) {
			j[k] = ln_idx_const(L->ln, 0);
		} else if (u->shape[k] == v->shape[k + off]) {
			j[k] = idx[k + off];
		} else {
			kc_fail(L->err, KC_BAD_SHAPE, "lower", "cannot broadcast %s to %s",
			        u->tensor_name ? u->tensor_name : "?",
			        v->tensor_name ? v->tensor_name : "?");
			return NULL;
		}
	}
	return value_at(L, u, j);
}

/* The value of a node result at idx: layout ops remap, others compute. */
static LnExpr *
node_at(Lower *L, const IrValue *v, LnIdx **idx)
{
	const IrNode *nd = v->def;
	LoopNest *ln = L->ln;
	LnExpr *a[3] = {NULL, NULL, NULL};
	LnIdx *j[KC_MAX_RANK];
	KcDtype want = v->dtype;

	KC_ASSERT(nd->nin <= 3 || nd->op == IR_OP_ADD_N);
	switch (nd->op) {
	case IR_OP_TRANSPOSE: {
		const IrValue *u = nd->in[0];
		for (int k = 0; k < v->rank; k++)
			j[nd->attrs.list[k]] = idx[k];
		LnExpr *e = value_at(L, u, j);
		return e ? coerce(ln, e, v->dtype) : NULL;
	}
	case IR_OP_TILE: {
		const IrValue *u = nd->in[0];
		int off = v->rank - u->rank;
		for (int k = 0; k < u->rank; k++)
			j[k] = u->shape[k] == 1 ? ln_idx_const(ln, 0)
			                        : ln_idx_mod(ln, idx[k + off], u->shape[k]);
		LnExpr *e = value_at(L, u, j);
		return e ? coerce(ln, e, v->dtype) : NULL;
	}
	case IR_OP_STRIDED_SLICE: {
		/* begin + i * stride, or begin - i * |stride| (a reversed walk);
		 * output dims in new_axes are size-1 dims no input dim reads */
		const IrValue *u = nd->in[0];
		int o = 0;
		for (int k = 0; k < u->rank; k++) {
			int64_t b0 = nd->attrs.begin[k], s = nd->attrs.strides[k];
			LnIdx *b = ln_idx_const(ln, b0);
			if (nd->attrs.shrink >> k & 1) {
				j[k] = b;
				continue;
			}
			while (o < v->rank && (nd->attrs.new_axes >> o & 1))
				o++;
			KC_ASSERT(o < v->rank);
			j[k] = s >= 0 ? ln_idx_add(ln, b, ln_idx_mul(ln, idx[o], s))
			              : ln_idx_rsub(ln, b0, ln_idx_mul(ln, idx[o], -s));
			o++;
		}
		LnExpr *e = value_at(L, u, j);
		return e ? coerce(ln, e, v->dtype) : NULL;
	}
	case IR_OP_ASSIGN:
	case IR_OP_INPLACE_ASSIGN: {
		/* the value is src (Assign) or depend (InplaceAssign); the write
		 * into dst is a copy stage of its own (ln_lower) */
		LnExpr *e = value_at(L, nd->in[nd->op == IR_OP_ASSIGN ? 1 : 2], idx);
		return e ? coerce(ln, e, v->dtype) : NULL;
	}
	case IR_OP_ONE_HOT: {
		/* indices[idx without the new dim] == idx[axis] ? on : off */
		const IrValue *ix = nd->in[0];
		int ax = (int)nd->attrs.axis[0];
		for (int k = 0, q = 0; k < v->rank; k++)
			if (k != ax)
				j[q++] = idx[k];
		if (ix->rank == 1 && v->rank == 1) /* indices [1], a depth-only output */
			j[0] = ln_idx_const(ln, 0);
		LnExpr *c[3];
		c[0] = value_at(L, ix, j);
		if (!c[0])
			return NULL;
		c[1] = expr_new(ln, LNE_INDEX, ix->dtype);
		c[1]->idx = idx[ax];
		c[0] = expr_op(ln, IR_OP_EQUAL, KC_DT_BOOL, 2, c);
		c[1] = operand_at(L, v, nd->in[1], idx);
		c[2] = operand_at(L, v, nd->in[2], idx);
		if (!c[1] || !c[2])
			return NULL;
		c[1] = coerce(ln, c[1], v->dtype);
		c[2] = coerce(ln, c[2], v->dtype);
		return expr_op(ln, IR_OP_SELECT, v->dtype, 3, c);
	}
	case IR_OP_GATHER: {
		/* params[idx[:ax], clamp(indices[idx[ax:ax+ri]]), idx[ax+ri:]] */
		const IrValue *pa = nd->in[0], *ix = nd->in[1];
		int ax = (int)nd->attrs.axis[0], ri = ix->rank;
		LnIdx *jj[KC_MAX_RANK];
		int64_t stride = 1;
		for (int d = 0; d < ri; d++)
			jj[d] = idx[ax + d];
		LnExpr *iv = value_at(L, ix, jj);
		if (!iv)
			return NULL;
		for (int d = 0; d < pa->rank; d++) {
			j[d] = d < ax ? idx[d] : d == ax ? ln_idx_const(ln, 0) : idx[d - 1 + ri];
			if (d > ax)
				stride *= pa->shape[d];
		}
		int buf = pa->kind == IRV_INPUT ? pa->input_index : L->matbuf[pa->id];
		if (buf < 0) {
			kc_fail(L->err, KC_CODEGEN, "lower", "Gather params are not in a buffer");
			return NULL;
		}
		LnExpr *e = expr_new(ln, LNE_LOAD, pa->dtype);
		e->buf = buf;
		e->idx = linearize(ln, j, pa->shape, pa->rank);
		e->dyn = iv;
		e->dyn_stride = stride;
		e->dyn_extent = pa->shape[ax];
		return coerce(ln, e, v->dtype);
	}
	case IR_OP_CONCAT:
	case IR_OP_MAT_MUL:
	case IR_OP_BATCH_MAT_MUL:
	case IR_OP_CONV2D:
	case IR_OP_ARGMAX:
	case IR_OP_ARGMIN:
	case IR_OP_CUM_SUM:
	case IR_OP_CUM_PROD:
	case IR_OP_POOL2D:
	case IR_OP_REDUCE_SUM:
	case IR_OP_REDUCE_MAX:
	case IR_OP_REDUCE_MIN:
	case IR_OP_REDUCE_PROD:
	case IR_OP_ELEM_ANY:
	case IR_OP_ELEM_ALL:
		kc_fail(L->err, KC_CODEGEN, "lower", "%s result %s was not materialised",
		        ir_op_info[nd->op].name, v->tensor_name ? v->tensor_name : "?");
		return NULL;
	case IR_OP_EXPAND_DIMS:
	case IR_OP_RESHAPE: {
		const IrValue *u = nd->in[0];
		if (u->numel != v->numel) {
			kc_fail(L->err, KC_BAD_SHAPE, "lower", "reshape changes the element count");
			return NULL;
		}
		delinearize(ln, linearize(ln, idx, v->shape, v->rank), u->shape, u->rank, j);
		LnExpr *e = value_at(L, u, j);
		return e ? coerce(ln, e, v->dtype) : NULL;
	}
	case IR_OP_BROADCAST_TO: {
		LnExpr *e = operand_at(L, v, nd->in[0], idx);
		return e ? coerce(ln, e, v->dtype) : NULL;
	}
	case IR_OP_ADD_N: { /* ((x0 + x1) + x2) + ..., each broadcast */
		LnExpr *acc = NULL;
		for (int i = 0; i < nd->nin; i++) {
			LnExpr *x = operand_at(L, v, nd->in[i], idx);
			if (!x)
				return NULL;
			x = coerce(ln, x, v->dtype);
			if (acc) {
				LnExpr *two[2] = {acc, x};
				x = expr_op(ln, IR_OP_ADD, v->dtype, 2, two);
			}
			acc = x;
		}
		return acc;
	}
	case IR_OP_GREATER:
	case IR_OP_GREATER_EQUAL:
	case IR_OP_LESS:
	case IR_OP_LESS_EQUAL:
	case IR_OP_EQUAL:
	case IR_OP_NOT_EQUAL: want = promote(nd->in[0]->dtype, nd->in[1]->dtype); break;
	case IR_OP_IS_NAN:
	case IR_OP_IS_INF:
	case IR_OP_IS_FINITE:
	case IR_OP_CAST: want = nd->in[0]->dtype; break;
	case IR_OP_LOGICAL_AND:
	case IR_OP_LOGICAL_OR:
	case IR_OP_LOGICAL_NOT: want = KC_DT_BOOL; break;
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
	case IR_OP_SELECT:
	case IR_OP_SIN:
	case IR_OP_COS:
	case IR_OP_ASIN:
	case IR_OP_ACOS:
	case IR_OP_ATAN:
	case IR_OP_ASINH:
	case IR_OP_ACOSH:
	case IR_OP_EXPM1:
	case IR_OP_ATAN2:
	case IR_OP_COUNT: break;
	}
	for (int i = 0; i < nd->nin; i++) {
		a[i] = operand_at(L, v, nd->in[i], idx);
		if (!a[i])
			return NULL;
		KcDtype w = (nd->op == IR_OP_SELECT && i == 0) ? KC_DT_BOOL : want;
		a[i] = coerce(ln, a[i], w);
	}
	return expr_op(ln, nd->op, v->dtype, nd->nin, a);
}

/* The expression for value v at multi-index idx, memoised per (v, idx). */
static LnExpr *
value_at(Lower *L, const IrValue *v, LnIdx **idx)
{
	LoopNest *ln = L->ln;
	LnExpr *e = NULL;
	Memo *m;

	if (!kc_work_visit(ln->work, KC_WORK_LOWER)) {
		kc_work_fail(ln->work, KC_WORK_LOWER, L->err);
		return NULL;
	}
	if (L->memo_at[v->id] != L->stage + 1) { /* nothing memoised in this stage */
		L->memo_at[v->id] = L->stage + 1;
		L->memo[v->id] = NULL;
	}
	for (m = L->memo[v->id]; m; m = m->next) {
		int k = 0;
		ln->work->n[KC_WORK_LOWER]++; /* one probe */
		while (k < v->rank && ln_idx_equal(m->idx[k], idx[k]))
			k++;
		if (k == v->rank)
			return m->e;
	}
	if (v->kind == IRV_OP && L->matbuf[v->id] >= 0 && v != L->self) {
		/* computed by an earlier stage: read its buffer */
		e = expr_new(ln, LNE_LOAD, v->dtype);
		e->buf = L->matbuf[v->id];
		e->idx = linearize(ln, idx, v->shape, v->rank);
	} else
		switch (v->kind) {
		case IRV_INPUT:
			e = expr_new(ln, LNE_LOAD, v->dtype);
			e->buf = v->input_index;
			e->idx = linearize(ln, idx, v->shape, v->rank);
			break;
		case IRV_CONST:
			e = expr_new(ln, LNE_CONST, v->dtype);
			e->fval = v->fval;
			e->ival = v->ival;
			break;
		case IRV_OP: e = node_at(L, v, idx); break;
		}
	if (!e)
		return NULL;
	if (ln->nexprs > MAX_EXPRS) { /* views can defeat sharing in odd graphs */
		kc_fail(L->err, KC_UNSUPPORTED, "lower",
		        "graph inlines to more than %d expressions", MAX_EXPRS);
		return NULL;
	}
	m = ARENA_NEW(ln->arena, Memo);
	memcpy(m->idx, idx, sizeof(LnIdx *) * (size_t)v->rank);
	m->e = e;
	m->next = L->memo[v->id];
	L->memo[v->id] = m;
	return e;
}

/* ---- dim merging ------------------------------------------------------------ */

typedef struct Affine {
	bool ok;
	int64_t c;
	int64_t *coef;  /* per stage loop position */
	int64_t *steps; /* the work counter */
} Affine;

/* Accumulates k*x into per-loop coefficients; a->ok = false on div/mod. */
static void
affine(const LnIdx *x, int64_t k, const int *pos, Affine *a)
{
	(*a->steps)++;
	switch (x->kind) {
	case LNI_CONST: a->c += k * x->c; return;
	case LNI_VAR:
		if (pos[x->var] >= 0)
			a->coef[pos[x->var]] += k;
		return;
	case LNI_ADD:
		affine(x->a, k, pos, a);
		affine(x->b, k, pos, a);
		return;
	case LNI_MUL: affine(x->a, k * x->c, pos, a); return;
	case LNI_DIV:
	case LNI_MOD:
	case LNI_RSUB:
		a->ok = false; /* not affine; the caller pins its vars */
		return;
	}
}

/* Marks every stage loop var under x as not mergeable. */
static void
pin_vars(const LnIdx *x, const int *pos, bool *pinned, int64_t *steps)
{
	(*steps)++;
	switch (x->kind) {
	case LNI_CONST: return;
	case LNI_VAR:
		if (pos[x->var] >= 0)
			pinned[pos[x->var]] = true;
		return;
	case LNI_ADD:
		pin_vars(x->a, pos, pinned, steps);
		pin_vars(x->b, pos, pinned, steps);
		return;
	case LNI_MUL:
	case LNI_DIV:
	case LNI_MOD:
	case LNI_RSUB: pin_vars(x->a, pos, pinned, steps); return;
	}
}

/* Collects the index slots of every load under e (once per node). */
static void
collect_loads(Lower *L, LnExpr *e, int *n)
{
	L->ln->work->n[KC_WORK_COLLAPSE]++;
	if (L->mark[e->id] == L->stamp)
		return;
	L->mark[e->id] = L->stamp;
	if (e->kind == LNE_LOAD || e->kind == LNE_INDEX) {
		KC_ASSERT(*n < L->refcap);
		L->refs[(*n)++].slot = &e->idx;
	}
	if (e->kind == LNE_LOAD && e->dyn)
		collect_loads(L, e->dyn, n);
	if (e->kind == LNE_OP)
		for (int i = 0; i < e->nargs; i++)
			collect_loads(L, e->args[i], n);
}

/* Room for n ints (a fresh block, each set to fill) when *cap is smaller:
 * doubling, so the blocks sum to at most twice the last. */
static int *
grow_ints(Arena *a, int *p, int *cap, int n, int fill)
{
	if (n <= *cap)
		return p;
	int c = *cap ? *cap : 64;
	while (c < n)
		c *= 2;
	p = ARENA_ARRAY(a, int, c);
	for (int i = 0; fill && i < c; i++)
		p[i] = fill;
	*cap = c;
	return p;
}

/* Merges adjacent loops p, p+1 wherever every index has coef[p] == coef[p+1] * E[p+1]. */
static void
collapse(Lower *L, LnStage *st)
{
	LoopNest *ln = L->ln;
	int nrefs = 0;
	int64_t *steps = &ln->work->n[KC_WORK_COLLAPSE];

	/* the stage's nodes are at most every node made so far; stamps never
	 * repeat, so a fresh (zeroed) mark block needs no clearing */
	L->mark = grow_ints(ln->arena, L->mark, &L->markcap, ln->nexprs + 1, 0);
	L->stamp++;
	if (st->nstores + ln->nexprs > L->refcap) {
		int c = L->refcap ? L->refcap : 64;
		while (c < st->nstores + ln->nexprs)
			c *= 2;
		L->refs = ARENA_ARRAY(ln->arena, IdxRef, c);
		L->refcap = c;
	}
	/* merges add vars: at most one per loop */
	L->pos = grow_ints(ln->arena, L->pos, &L->poscap, ln->nvars + LN_MAX_LOOPS, -1);
	int *pos = L->pos;
	IdxRef *refs = L->refs;
	for (int i = 0; i < st->nstores; i++) {
		refs[nrefs++].slot = &st->stores[i].idx;
		collect_loads(L, st->stores[i].value, &nrefs);
	}
	for (int p = st->nloops - 2; p >= 0; p--) {
		bool pinned[LN_MAX_LOOPS] = {false};
		int64_t coef[LN_MAX_LOOPS];
		bool can = true;

		for (int q = 0; q < st->nloops; q++)
			pos[st->loops[q].var] = q;
		for (int r = 0; r < nrefs; r++) {
			Affine a = {true, 0, coef, steps};
			memset(coef, 0, sizeof coef);
			affine(*refs[r].slot, 1, pos, &a);
			if (!a.ok)
				pin_vars(*refs[r].slot, pos, pinned, steps);
			else if (coef[p] != coef[p + 1] * st->loops[p + 1].extent)
				can = false;
		}
		if (pinned[p] || pinned[p + 1])
			can = false;
		if (st->nred > 0 && ln_loop_spatial(st, p) != ln_loop_spatial(st, p + 1))
			can = false; /* never merge a spatial loop with a reduction loop */
		if (st->nred > 0 && p + 1 == st->nloops - st->ninner && st->ninner > 0)
			can = false; /* nor the outer spatial loops with the inner ones */
		if (!can) {
			for (int q = 0; q < st->nloops; q++)
				pos[st->loops[q].var] = -1;
			continue;
		}
		if (!ln_loop_spatial(st, p))
			st->nred--; /* two reduction loops become one */
		else if (st->nred > 0 && p >= st->nloops - st->ninner)
			st->ninner--;
		/* merge loops p and p+1 into one var w = v_p * E_{p+1} + v_{p+1} */
		int64_t e1 = st->loops[p + 1].extent;
		int w = ln_var_new(ln, st->loops[p].extent * e1);
		for (int r = 0; r < nrefs; r++) {
			Affine a = {true, 0, coef, steps};
			memset(coef, 0, sizeof coef);
			affine(*refs[r].slot, 1, pos, &a);
			if (!a.ok)
				continue; /* mentions neither var */
			LnIdx *x = ln_idx_const(ln, a.c);
			for (int q = 0; q < st->nloops; q++) {
				if (q == p)
					x = ln_idx_add(
					    ln, x, ln_idx_mul(ln, ln_idx_var(ln, w), coef[p + 1]));
				else if (q != p + 1)
					x = ln_idx_add(ln, x,
					               ln_idx_mul(ln,
					                          ln_idx_var(ln, st->loops[q].var),
					                          coef[q]));
			}
			*refs[r].slot = x;
		}
		for (int q = 0; q < st->nloops; q++)
			pos[st->loops[q].var] = -1;
		st->loops[p].var = w;
		st->loops[p].extent *= e1;
		memmove(&st->loops[p + 1], &st->loops[p + 2],
		        sizeof(LnLoop) * (size_t)(st->nloops - p - 2));
		st->nloops--;
	}
}

/* ---- stages ------------------------------------------------------------------ */

static bool
same_shape(const IrValue *a, const IrValue *b)
{
	return a->rank == b->rank &&
	       memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) == 0;
}

/* Values that get a buffer and a stage of their own (the file's header
 * lists them). A computed source of an in-place write is one so the
 * write-back copies a finished buffer and never races with reads of the
 * old value. */
typedef struct Plan {
	bool *mat;  /* per value id */
	int *group; /* per kernel output: its injective stage group, -1 = none */
	int nmat, ngroups, nassign, nreduce, nmatmul;
	int64_t *steps; /* the work counter the plan counts into */
	int64_t max;    /* past it the plan stops (its caller reports it) */
} Plan;

/* The other outputs: one stage per shape, in order of first appearance. */
static void
plan_groups(const IrGraph *g, Plan *P)
{
	P->ngroups = 0;
	for (int o = 0; o < g->noutputs; o++) {
		const IrValue *v = g->outputs[o];
		P->group[o] = -1;
		if (v->kind == IRV_OP && P->mat[v->id])
			continue;
		for (int q = 0; q < o && P->group[o] < 0; q++)
			if (P->group[q] >= 0 && same_shape(g->outputs[q], v))
				P->group[o] = P->group[q];
		if (P->group[o] < 0)
			P->group[o] = P->ngroups++;
	}
}

/* Marks with `root` every value that stage root's expression inlines: v
 * itself unless materialised (a load), and through the operands of what it
 * inlines. uses[v] counts the distinct roots. */
static void
reach(const IrGraph *g, const Plan *P, const IrValue *v, int root, int *stamp, int *uses, bool top)
{
	(*P->steps)++;
	if (v->kind != IRV_OP || (!top && P->mat[v->id]) || stamp[v->id] == root)
		return;
	stamp[v->id] = root;
	uses[v->id]++;
	for (int i = 0; i < v->def->nin; i++)
		reach(g, P, v->def->in[i], root, stamp, uses, false);
}

/* Shared costly values. An injective value inlines into every stage that
 * reads it, and within one stage it is one shared DAG node; but when two
 * stages inline it, each computes it. For a cheap value (x - max) that is
 * right: a load would cost as much. For a value with a costly op
 * (OPF_COSTLY: softmax's exp(x - max), read by the ReduceSum and by the
 * RealDiv) it computes the polynomial twice per element, so such a value
 * gets a stage and a buffer of its own. When its readers run fused per row
 * (fuse.c), that buffer is a row on the stack, and softmax reads x once,
 * computes exp once and writes y once per element, as a hand-written one
 * does. Values are taken last first (consumers before producers), and the
 * counts are redone after each, so exp(tanh(x)) read twice stores exp only.
 * Each round walks every stage's inlined values: the rounds stop once the
 * plan's count passes the node budget, which its caller then reports. */
static void
plan_shared(Arena *a, const IrGraph *g, Plan *P)
{
	int *stamp = ARENA_ARRAY(a, int, g->nvalues + 1);
	int *uses = ARENA_ARRAY(a, int, g->nvalues + 1);

	for (int round = 0; round < MAX_SHARED && *P->steps <= P->max; round++) {
		int root = 0, pick = -1;
		*P->steps += g->nvalues; /* the round's scans of every value */
		for (int v = 0; v < g->nvalues; v++)
			stamp[v] = -1, uses[v] = 0;
		for (int v = 0; v < g->nvalues; v++) /* materialised values' stages */
			if (P->mat[v])
				reach(g, P, g->values[v], root++, stamp, uses, true);
		for (int o = 0; o < g->noutputs; o++) /* the output groups' stages */
			if (P->group[o] >= 0)
				reach(g, P, g->outputs[o], root + P->group[o], stamp, uses, true);
		root += P->ngroups;
		for (int n = 0; n < g->nnodes; n++) /* in-place write-backs */
			if (ir_op_info[g->nodes[n]->op].kind == OPK_ASSIGN)
				reach(g, P, g->nodes[n]->in[1], root++, stamp, uses, true);
		for (int v = g->nvalues - 1; v >= 0 && pick < 0; v--) {
			const IrValue *x = g->values[v];
			if (x->kind == IRV_OP && !P->mat[v] && uses[v] >= 2 &&
			    ir_op_info[x->def->op].kind == OPK_ELEMWISE &&
			    (ir_op_info[x->def->op].flags & OPF_COSTLY))
				pick = v;
		}
		if (pick < 0)
			return;
		P->mat[pick] = true;
		plan_groups(g, P);
	}
}

static void
plan(Arena *a, const IrGraph *g, Plan *P, int64_t *steps)
{
	memset(P, 0, sizeof *P);
	P->steps = steps;
	P->max = g->work->max_nodes;
	*steps += g->nnodes;
	P->mat = ARENA_ARRAY(a, bool, g->nvalues + 1);
	P->group = ARENA_ARRAY(a, int, g->noutputs + 1);
	for (int n = 0; n < g->nnodes; n++) {
		const IrNode *nd = g->nodes[n];
		IrOpKind k = ir_op_info[nd->op].kind;
		if (k == OPK_REDUCE && !P->mat[nd->out[0]->id]) {
			P->mat[nd->out[0]->id] = true;
			P->nreduce++;
		}
		if (k == OPK_ASSIGN) {
			P->nassign++;
			if (nd->in[1]->kind == IRV_OP)
				P->mat[nd->in[1]->id] = true;
		}
		/* Concat: one stage per piece; Gather loads from a buffer */
		if (nd->op == IR_OP_CONCAT || k == OPK_MATMUL || k == OPK_CONV || k == OPK_ARG ||
		    k == OPK_SCAN || k == OPK_POOL)
			P->mat[nd->out[0]->id] = true;
		P->nmatmul += k == OPK_MATMUL;
		/* the "reduce" template, for now */
		P->nreduce += k == OPK_CONV || k == OPK_ARG || k == OPK_SCAN || k == OPK_POOL;
		if (nd->op == IR_OP_GATHER && nd->in[0]->kind == IRV_OP)
			P->mat[nd->in[0]->id] = true;
		/* Argmax/Argmin read a computed operand in two stages: one
		 * buffer, so both see the same (stored, rounded) values */
		if (k == OPK_ARG && nd->in[0]->kind == IRV_OP)
			P->mat[nd->in[0]->id] = true;
	}
	plan_groups(g, P);
	plan_shared(a, g, P);
	for (int v = 0; v < g->nvalues; v++) {
		const IrNode *nd = P->mat[v] ? g->values[v]->def : NULL;
		if (!nd)
			continue;
		if (nd->op == IR_OP_CONCAT)
			P->nmat += nd->nin;
		else if (ir_op_info[nd->op].kind == OPK_MATMUL) { /* + operand packs */
			int ncopies;
			if (gemm_applies(nd, P->mat, &ncopies))
				P->nmat += 1 + ncopies;
			else
				P->nmat += 1 + nd->attrs.trans_a + !nd->attrs.trans_b;
		} else if (ir_op_info[nd->op].kind == OPK_CONV && conv_gemm_applies(nd, P->mat)) {
			P->nmat += 1 + (nd->out[0]->dtype != KC_DT_FLOAT32); /* + its cast */
			P->nmatmul++; /* the "matmul" template: its knobs block the GEMM */
			P->nreduce--;
		} else if (ir_op_info[nd->op].kind == OPK_ARG) /* max/min, then index */
			P->nmat += 2;
		else if (nd->op == IR_OP_POOL2D && !nd->attrs.pool_max) /* sum, then / */
			P->nmat += 2;
		else
			P->nmat++;
	}
}

int
ln_count_stages(Arena *a, const IrGraph *g, int *nreduce, int *nmatmul)
{
	Plan P;
	int64_t steps = 0; /* one plan's walk: the schedule may be asked for twice */
	plan(a, g, &P, &steps);
	if (steps > g->work->n[KC_WORK_PLAN])
		g->work->n[KC_WORK_PLAN] = steps;
	*nreduce = P.nreduce;
	*nmatmul = P.nmatmul;
	return P.nmat + P.ngroups + P.nassign;
}

/* Loops over v's shape (size-1 dims get none; a scalar one 1-trip loop);
 * idx[] receives the index of every dim. */
static void
shape_loops(LoopNest *ln, LnStage *st, const IrValue *v, LnIdx **idx)
{
	for (int k = 0; k < v->rank; k++) {
		if (v->shape[k] == 1) {
			idx[k] = ln_idx_const(ln, 0);
			continue;
		}
		LnLoop *l = &st->loops[st->nloops++];
		l->var = ln_var_new(ln, v->shape[k]);
		l->extent = v->shape[k];
		idx[k] = ln_idx_var(ln, l->var);
	}
	if (st->nloops == 0) { /* a scalar: one trip */
		st->loops[0].var = ln_var_new(ln, 1);
		st->loops[0].extent = 1;
		st->nloops = 1;
	}
}

static LnStage *
stage_new(Lower *L, int s)
{
	LnStage *st = &L->ln->stages[s];
	L->stage = s; /* the memo of earlier stages no longer holds (memo_at) */
	L->self = NULL;
	st->name = arena_printf(L->ln->arena, "s%d", s);
	st->grain = 1;
	st->fused_into = -1;
	return st;
}

/* The combining op of a reduction. */
static IrOp
red_combine(IrOp op)
{
	switch (op) {
	case IR_OP_REDUCE_SUM: return IR_OP_ADD;
	case IR_OP_REDUCE_PROD: return IR_OP_MUL;
	case IR_OP_REDUCE_MAX:
	case IR_OP_ELEM_ANY: return IR_OP_MAXIMUM; /* of (x != 0) */
	case IR_OP_REDUCE_MIN:
	case IR_OP_ELEM_ALL: return IR_OP_MINIMUM;
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
	case IR_OP_EXPAND_DIMS:
	case IR_OP_TRANSPOSE:
	case IR_OP_TILE:
	case IR_OP_STRIDED_SLICE:
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
	case IR_OP_COUNT: break;
	}
	KC_ASSERT(0 && "not a reduction");
	return IR_OP_COUNT;
}

/* The stage of reduction node nd into buffer buf: spatial loops over the
 * kept dims (outer, input order), reduction loops over the reduced dims
 * (inner, input order, so reducing the last axis makes the innermost loop
 * the contiguous one). */
static int workspace_raw(LoopNest *ln, const char *name, KcDtype dt, int64_t numel);

/* Terms folded into each result of reduction stage st: the product of
 * its reduction loops' extents. */
static int64_t
red_terms(const LnStage *st)
{
	int64_t n = 1;
	for (int l = ln_red_begin(st); l < ln_red_begin(st) + st->nred; l++)
		n *= st->loops[l].extent;
	return n;
}

/* The accumulator dtype of stage st, a reduction to dt (see loop/loop.h,
 * LN_F32_ACC_MAX). */
static KcDtype
acc_dtype(const LnStage *st, IrOp red_op, KcDtype dt)
{
	if (dt == KC_DT_FLOAT32 && red_op == IR_OP_ADD)
		return st->ninner == 0 && red_terms(st) <= LN_F32_ACC_MAX ? KC_DT_FLOAT32
		                                                          : KC_DT_FLOAT64;
	if (dt == KC_DT_FLOAT32 && red_op == IR_OP_MUL)
		return KC_DT_FLOAT64;
	if (dt == KC_DT_FLOAT16 || dt == KC_DT_BFLOAT16)
		return KC_DT_FLOAT32;
	return dt;
}

/* The loops of a reduction of u over the dims red[] (see reduce_stage):
 * idx[] receives u's index, *sidx the store index into the kept dims. */
static void
red_loops(LoopNest *ln, LnStage *st, const IrValue *u, const bool *red, LnIdx **idx, LnIdx **sidx)
{
	LnIdx *sp[KC_MAX_RANK];
	int64_t spshape[KC_MAX_RANK];
	bool inner = false;
	int nsp = 0, lastred = -1;

	for (int k = 0; k < u->rank; k++)
		if (red[k] && u->shape[k] > 1)
			lastred = k;
	/* an outer-axis reduction: kept dims inside the last reduced one */
	for (int k = lastred + 1; k < u->rank && lastred >= 0; k++)
		inner |= u->shape[k] > 1;
	for (int pass = 0; pass < 3; pass++) {
		int before = st->nloops;
		for (int k = 0; k < u->rank; k++) {
			bool here = pass == 1   ? red[k]
			            : pass == 0 ? !red[k] && (!inner || k < lastred)
			                        : !red[k] && inner && k > lastred;
			if (!here)
				continue;
			if (u->shape[k] == 1) {
				idx[k] = ln_idx_const(ln, 0);
			} else {
				LnLoop *l = &st->loops[st->nloops++];
				l->var = ln_var_new(ln, u->shape[k]);
				l->extent = u->shape[k];
				idx[k] = ln_idx_var(ln, l->var);
			}
		}
		if (pass == 0 && st->nloops == 0 &&
		    !inner) { /* a full reduction: one 1-trip loop */
			st->loops[0].var = ln_var_new(ln, 1);
			st->loops[0].extent = 1;
			st->nloops = 1;
		}
		if (pass == 1)
			st->nred = st->nloops - before;
		if (pass == 2)
			st->ninner = st->nloops - before;
	}
	for (int k = 0; k < u->rank; k++)
		if (!red[k]) {
			sp[nsp] = idx[k];
			spshape[nsp++] = u->shape[k];
		}
	*sidx = nsp ? linearize(ln, sp, spshape, nsp) : ln_idx_const(ln, 0);
	if (st->nred == 0)
		st->ninner = 0; /* nothing to reduce: an injective stage */
}

/* Stage st's one store: value at buf[idx]. False when value is NULL (a
 * failed value_at, whose error is already recorded). */
static bool
one_store(LoopNest *ln, LnStage *st, int buf, LnIdx *idx, LnExpr *value)
{
	st->stores = ARENA_ARRAY(ln->arena, LnStore, 1);
	st->nstores = 1;
	st->stores[0].buf = buf;
	st->stores[0].idx = idx;
	st->stores[0].value = value;
	return value != NULL;
}

/* The one store of reduction stage st, combining with red_op, and its
 * accumulator workspace when the reduction is outer-axis (ninner > 0). */
static void
red_store(LoopNest *ln, LnStage *st, IrOp red_op, int buf, LnIdx *sidx, LnExpr *value,
          const char *name, int64_t numel)
{
	if (value->dtype == KC_DT_BOOL && red_op == IR_OP_ADD)
		red_op = IR_OP_MAXIMUM; /* a bool sum saturates: any */
	st->red_op = red_op;
	st->acc = acc_dtype(st, red_op, value->dtype);
	one_store(ln, st, buf, sidx, value);
	st->accbuf = -1;
	if (st->ninner > 0)
		st->accbuf =
		    workspace_raw(ln, arena_printf(ln->arena, "%s:acc", name), st->acc, numel);
}

static KcStatus
reduce_stage(Lower *L, LnStage *st, const IrNode *nd, int buf)
{
	LoopNest *ln = L->ln;
	const IrValue *u = nd->in[0], *v = nd->out[0];
	LnIdx *idx[KC_MAX_RANK], *sidx;
	bool red[KC_MAX_RANK] = {false};

	for (int a = 0; a < nd->attrs.naxis; a++)
		red[nd->attrs.axis[a]] = true;
	red_loops(ln, st, u, red, idx, &sidx);
	LnExpr *e = value_at(L, u, idx);
	if (!e)
		return L->err->status;
	if (nd->op == IR_OP_ELEM_ANY || nd->op == IR_OP_ELEM_ALL) { /* x != 0 */
		LnExpr *c[2] = {e, expr_new(ln, LNE_CONST, u->dtype)};
		e = expr_op(ln, IR_OP_NOT_EQUAL, KC_DT_BOOL, 2, c);
	}
	red_store(ln, st, red_combine(nd->op), buf, sidx, coerce(ln, e, v->dtype),
	          v->tensor_name ? v->tensor_name : "?", v->numel);
	return KC_OK;
}

/* A new workspace buffer. */
static int
workspace_raw(LoopNest *ln, const char *name, KcDtype dt, int64_t numel)
{
	LnBuf *b = &ln->bufs[ln->nbufs];
	b->name = name;
	b->dtype = dt;
	b->numel = numel;
	b->arg = -1;
	return ln->nbufs++;
}

/* A new workspace buffer named after value u: "<tensor>:<what>". */
static int
workspace_of(LoopNest *ln, const IrValue *u, const char *what, KcDtype dt, int64_t numel)
{
	return workspace_raw(
	    ln, arena_printf(ln->arena, "%s:%s", u->tensor_name ? u->tensor_name : "?", what), dt,
	    numel);
}

/* A copy stage: for every index i of shape sh, buf[i] = value(j), with j
 * filled by the caller from i (idx) after this returns. The caller then
 * calls copy_store. */
static LnStage *
copy_stage(Lower *L, int *s, const IrValue *sh, LnIdx **idx)
{
	LnStage *st = stage_new(L, (*s)++);
	shape_loops(L->ln, st, sh, idx);
	return st;
}

/* copy_stage's store: buf[idx over sh] = value coerced to dt; false when
 * value is NULL. */
static bool
copy_store(Lower *L, LnStage *st, int buf, LnIdx **idx, const IrValue *sh, LnExpr *value,
           KcDtype dt)
{
	LoopNest *ln = L->ln;
	if (!one_store(ln, st, buf, linearize(ln, idx, sh->shape, sh->rank), value))
		return false;
	st->stores[0].value = coerce(ln, value, dt);
	collapse(L, st);
	return true;
}

/* The index of operand u's element [batch..., r, c] of a MatMul whose
 * output has rank vr: u's batch dims align right with the output's and
 * broadcast; (r, c) are u's last two dims as stored. */
static void
mm_operand_idx(LoopNest *ln, const IrValue *u, int vr, LnIdx **bidx, LnIdx *r, LnIdx *c, LnIdx **j)
{
	int nb = u->rank - 2, off = (vr - 2) - nb;
	for (int d = 0; d < nb; d++)
		j[d] = u->shape[d] == 1 ? ln_idx_const(ln, 0) : bidx[d + off];
	j[nb] = r;
	j[nb + 1] = c;
}

/* Packs operand u (stored [..., X, K] when !k_last, i.e. [..., K, X]) into
 * a workspace laid out [batch..., X, K] (k contiguous) with its own
 * injective stage. Returns the buffer. */
static int
mm_pack(Lower *L, const IrValue *u, int *s)
{
	LoopNest *ln = L->ln;
	IrValue pk = *u; /* the packed shape: last two dims swapped */
	LnIdx *idx[KC_MAX_RANK], *j[KC_MAX_RANK];
	pk.shape[u->rank - 2] = u->shape[u->rank - 1];
	pk.shape[u->rank - 1] = u->shape[u->rank - 2];
	int buf = workspace_of(ln, u, "packed", u->dtype, u->numel);
	LnStage *st = copy_stage(L, s, &pk, idx);
	for (int d = 0; d < u->rank - 2; d++)
		j[d] = idx[d];
	j[u->rank - 2] = idx[u->rank - 1];
	j[u->rank - 1] = idx[u->rank - 2];
	return copy_store(L, st, buf, idx, &pk, value_at(L, u, j), u->dtype) ? buf : -1;
}

/* The buffer of an operand the GEMM reads in place (an input, or a
 * materialised value). */
static int
direct_buf(const Lower *L, const IrValue *u)
{
	return u->kind == IRV_INPUT ? u->input_index : L->matbuf[u->id];
}

/* MatMul as a GEMM stage (lower_gemm.c): operand u's buffer and strides,
 * after a copy stage when gemm_operand says so. */
static int
gemm_operand_buf(Lower *L, const IrValue *u, const IrValue *v, int *s, int64_t *bs)
{
	LoopNest *ln = L->ln;
	GemmOperand k = gemm_operand(u, v, L->mat);
	int64_t mat = u->shape[u->rank - 2] * u->shape[u->rank - 1];

	*bs = k == GEMM_DIRECT_BC || (k == GEMM_COPY && u->numel == mat) ? 0 : mat;
	if (k == GEMM_DIRECT || k == GEMM_DIRECT_BC)
		return direct_buf(L, u);
	/* the copy: u itself, or u broadcast to v's batch dims */
	IrValue cp = *u;
	if (k == GEMM_COPY_BC) {
		cp.rank = v->rank;
		memcpy(cp.shape, v->shape, sizeof(int64_t) * (size_t)v->rank);
		cp.shape[v->rank - 2] = u->shape[u->rank - 2];
		cp.shape[v->rank - 1] = u->shape[u->rank - 1];
		cp.numel = 1;
		for (int d = 0; d < cp.rank; d++)
			cp.numel *= cp.shape[d];
	}
	int buf = workspace_of(ln, u, "copy", KC_DT_FLOAT32, cp.numel);
	LnIdx *idx[KC_MAX_RANK], *j[KC_MAX_RANK];
	LnStage *st = copy_stage(L, s, &cp, idx);
	if (k == GEMM_COPY_BC)
		mm_operand_idx(ln, u, cp.rank, idx, idx[cp.rank - 2], idx[cp.rank - 1], j);
	else
		memcpy(j, idx, sizeof(LnIdx *) * (size_t)u->rank);
	return copy_store(L, st, buf, idx, &cp, value_at(L, u, j), KC_DT_FLOAT32) ? buf : -1;
}

/* A new GEMM stage C[batch x M x N] = A * B over K into buf, reading
 * buffers a and b (a half A is converted on the stack: a_pack); the caller
 * sets their strides. Until the schedule sets a blocking, one unit per
 * batch (mc = M, nc = N, kc = K). */
static LnGemm *
gemm_stage_new(Lower *L, const IrValue *v, int buf, int a, int b, int *s, int64_t batch, int64_t M,
               int64_t N, int64_t K)
{
	LoopNest *ln = L->ln;
	LnGemm *G = ARENA_NEW(ln->arena, LnGemm);
	G->a = a;
	G->b = b;
	G->a_pack = ln->bufs[a].dtype != KC_DT_FLOAT32;
	G->batch = batch;
	G->M = M;
	G->N = N;
	G->K = K;
	G->epi = -1;
	G->c = buf;
	G->acc = workspace_of(ln, v, "acc", KC_DT_FLOAT64, batch * M * N);
	LnStage *st = stage_new(L, (*s)++);
	st->gemm = G;
	st->nloops = 1;
	st->loops[0].var = ln_var_new(ln, batch);
	st->loops[0].extent = batch;
	G->mr = 1;
	G->vw = 1;
	G->nr = 1;
	G->mc = M;
	G->nc = N;
	G->kc = K;
	G->units_m = G->units_n = 1;
	return G;
}

static KcStatus
gemm_stage(Lower *L, const IrNode *nd, int buf, int *s)
{
	const IrValue *a = nd->in[0], *b = nd->in[1], *v = nd->out[0];
	int64_t ar = a->shape[a->rank - 2], ac = a->shape[a->rank - 1];
	int64_t bc = b->shape[b->rank - 1];
	int64_t batch = 1;
	for (int d = 0; d < v->rank - 2; d++)
		batch *= v->shape[d];
	int64_t ab, bb;
	int ia = gemm_operand_buf(L, a, v, s, &ab), ib = gemm_operand_buf(L, b, v, s, &bb);
	if (ia < 0 || ib < 0)
		return L->err->status;
	LnGemm *G = gemm_stage_new(L, v, buf, ia, ib, s, batch, v->shape[v->rank - 2],
	                           v->shape[v->rank - 1], nd->attrs.trans_a ? ar : ac);
	G->a_bs = ab;
	G->b_bs = bb;
	G->a_ms = nd->attrs.trans_a ? 1 : ac; /* a is [M, K], or [K, M] */
	G->a_ks = nd->attrs.trans_a ? ac : 1;
	G->b_ks = nd->attrs.trans_b ? 1 : bc; /* b is [K, N], or [N, K] */
	G->b_ns = nd->attrs.trans_b ? bc : 1;
	return KC_OK;
}

/* A pointwise Conv2D (conv_gemm_applies) as a GEMM stage, operands read in
 * place. NHWC: x [N*H*W, C] times the weight [O, C] (stored like a
 * transposed B), C = y [N*H*W, O]. NCHW: per image, the weight [O, C]
 * (shared by every batch) times x_n [C, H*W], C = y_n [O, H*W]. */
static KcStatus
conv_gemm_stage(Lower *L, const IrNode *nd, int buf, int *s)
{
	const IrValue *x = nd->in[0], *w = nd->in[1], *v = nd->out[0];
	int64_t O = w->shape[0];
	LnGemm *G;
	if (nd->attrs.nhwc) {
		int64_t C = x->shape[3];
		G = gemm_stage_new(L, v, buf, direct_buf(L, x), direct_buf(L, w), s, 1,
		                   x->shape[0] * x->shape[1] * x->shape[2], O, C);
		G->a_bs = G->b_bs = 0;
		G->a_ms = C, G->a_ks = 1;
		G->b_ks = 1, G->b_ns = C;
	} else {
		int64_t C = x->shape[1], HW = x->shape[2] * x->shape[3];
		G = gemm_stage_new(L, v, buf, direct_buf(L, w), direct_buf(L, x), s, x->shape[0], O,
		                   HW, C);
		G->a_bs = 0, G->a_ms = C, G->a_ks = 1;
		G->b_bs = C * HW, G->b_ks = HW, G->b_ns = 1;
	}
	return KC_OK;
}

/* A GEMM stage built by gemm (gemm_stage or conv_gemm_stage) into buf:
 * directly when the result v is float32; a half result goes through a
 * float32 workspace, then its cast, an injective stage that reads C at its
 * own index (so it runs as the GEMM's fused epilogue, on each finished
 * tile). */
static KcStatus
gemm_into(Lower *L, const IrNode *nd, int buf, int *s,
          KcStatus (*gemm)(Lower *, const IrNode *, int, int *))
{
	LoopNest *ln = L->ln;
	const IrValue *v = nd->out[0];
	if (v->dtype == KC_DT_FLOAT32)
		return gemm(L, nd, buf, s);
	int c32 = workspace_of(ln, v, "f32", KC_DT_FLOAT32, v->numel);
	KcStatus r = gemm(L, nd, c32, s);
	if (r != KC_OK)
		return r;
	LnIdx *ix[KC_MAX_RANK];
	LnStage *st = copy_stage(L, s, v, ix);
	LnExpr *c = expr_new(ln, LNE_LOAD, KC_DT_FLOAT32);
	c->buf = c32;
	c->idx = linearize(ln, ix, v->shape, v->rank);
	copy_store(L, st, buf, ix, v, c, v->dtype);
	return KC_OK;
}

/* MatMul/BatchMatMul into buf. Where gemm_applies (lower_gemm.c), a GEMM
 * stage (gemm_into: half operands read in place, a half result through a
 * float32 workspace and a cast stage that runs as the GEMM's fused
 * epilogue). Otherwise the reduction baseline: operands that are not
 * k-contiguous are packed first (transpose_a: a; !transpose_b: b), then one
 * reduction stage, spatial loops over the output [batch..., M, N] and the
 * reduction loop over K innermost, so both operands stream contiguously and
 * the loop vectorises as a dot product. */
static KcStatus
matmul_stages(Lower *L, const IrNode *nd, int buf, int *s)
{
	LoopNest *ln = L->ln;
	int ncopies;
	const IrValue *a = nd->in[0], *b = nd->in[1], *v = nd->out[0];
	if (gemm_applies(nd, L->mat, &ncopies))
		return gemm_into(L, nd, buf, s, gemm_stage);
	int vr = v->rank, pa = -1, pb = -1;
	int64_t K = nd->attrs.trans_a ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
	LnIdx *idx[KC_MAX_RANK], *ja[KC_MAX_RANK], *jb[KC_MAX_RANK], *kx;

	if (nd->attrs.trans_a && (pa = mm_pack(L, a, s)) < 0)
		return L->err->status;
	if (!nd->attrs.trans_b && (pb = mm_pack(L, b, s)) < 0)
		return L->err->status;
	LnStage *st = stage_new(L, (*s)++);
	L->self = v;
	shape_loops(ln, st, v, idx);
	int nsp = st->nloops;
	if (K > 1) {
		LnLoop *l = &st->loops[st->nloops++];
		l->var = ln_var_new(ln, K);
		l->extent = K;
	}
	st->nred = st->nloops - nsp;
	kx = K > 1 ? ln_idx_var(ln, st->loops[st->nloops - 1].var) : ln_idx_const(ln, 0);
	mm_operand_idx(ln, a, vr, idx, idx[vr - 2], kx, ja);
	mm_operand_idx(ln, b, vr, idx, idx[vr - 1], kx, jb);
	LnExpr *x[2];
	for (int i = 0; i < 2; i++) {
		const IrValue *u = i ? b : a;
		int pbuf = i ? pb : pa;
		LnIdx **j = i ? jb : ja;
		if (pbuf >= 0) {
			IrValue pk = *u;
			pk.shape[u->rank - 2] = u->shape[u->rank - 1];
			pk.shape[u->rank - 1] = u->shape[u->rank - 2];
			x[i] = expr_new(ln, LNE_LOAD, u->dtype);
			x[i]->buf = pbuf;
			x[i]->idx = linearize(ln, j, pk.shape, pk.rank);
		} else { /* a[..., m, k], or b[..., n, k] with transpose_b, as stored */
			if (!(x[i] = value_at(L, u, j)))
				return L->err->status;
		}
		x[i] = coerce(ln, x[i], v->dtype);
	}
	st->red_op = IR_OP_ADD;
	st->acc = acc_dtype(st, IR_OP_ADD, v->dtype);
	one_store(ln, st, buf, linearize(ln, idx, v->shape, v->rank),
	          expr_op(ln, IR_OP_MUL, v->dtype, 2, x));
	collapse(L, st);
	return KC_OK;
}

/* A reduction loop of extent e (none when e == 1): its index. */
static LnIdx *
red_loop(LoopNest *ln, LnStage *st, int64_t e)
{
	if (e == 1)
		return ln_idx_const(ln, 0);
	LnLoop *l = &st->loops[st->nloops++];
	l->var = ln_var_new(ln, e);
	l->extent = e;
	return ln_idx_var(ln, l->var);
}

/* The input coordinate of a Conv2D tap along one spatial dim: p = o*s + k*d
 * is the position in the padded input; the unpadded one is p - lo. When
 * some tap can fall into the padding, the load index is (p - lo) mod n
 * (always in bounds) and *cond gets lo <= p < lo + n (the caller selects 0
 * outside). */
static LnIdx *
conv_coord(Lower *L, LnIdx *o, LnIdx *k, int64_t s, int64_t d, int64_t lo, int64_t n, LnExpr **cond)
{
	LoopNest *ln = L->ln;
	LnIdx *p = ln_idx_add(ln, ln_idx_mul(ln, o, s), ln_idx_mul(ln, k, d));
	if (lo == 0 && ln_idx_max(ln, p) < n)
		return p;
	LnExpr *c[2], *pe = expr_new(ln, LNE_INDEX, KC_DT_INT64);
	pe->idx = p;
	c[0] = pe;
	c[1] = expr_new(ln, LNE_CONST, KC_DT_INT64);
	c[1]->ival = lo;
	LnExpr *ge = expr_op(ln, IR_OP_GREATER_EQUAL, KC_DT_BOOL, 2, c);
	c[1] = expr_new(ln, LNE_CONST, KC_DT_INT64);
	c[1]->ival = lo + n;
	LnExpr *lt = expr_op(ln, IR_OP_LESS, KC_DT_BOOL, 2, c);
	LnExpr *both[2] = {ge, lt};
	LnExpr *in = expr_op(ln, IR_OP_LOGICAL_AND, KC_DT_BOOL, 2, both);
	if (*cond) {
		both[0] = *cond;
		both[1] = in;
		in = expr_op(ln, IR_OP_LOGICAL_AND, KC_DT_BOOL, 2, both);
	}
	*cond = in;
	int64_t up = (lo + n - 1) / n * n; /* a multiple of n >= lo */
	return ln_idx_mod(ln, ln_idx_add(ln, p, ln_idx_const(ln, up - lo)), n);
}

/* Conv2D into buf: one reduction stage. Spatial loops over the output in
 * storage order (NHWC: n, oh, ow, oc; NCHW: n, oc, oh, ow), reduction loops
 * inside (NHWC: kh, kw, ci, so the innermost loop is contiguous in both
 * the input and the [O, KH, KW, I] weight and vectorises as a dot product;
 * NCHW: ci, kh, kw). Taps in the padding read 0 through a select on
 * in-bounds (no padded copy). Operands are widened to the output dtype
 * (the parser refuses a narrowing dst_type); the accumulator is
 * acc_dtype (fp16 -> f32, fp32 -> f64). A pointwise Conv2D (1 x 1, stride
 * 1, no padding, one group) is a GEMM stage instead (conv_gemm_stage);
 * others run here: an implicit GEMM for them is future work. */
static KcStatus
conv_stage(Lower *L, LnStage *st, const IrNode *nd, int buf)
{
	LoopNest *ln = L->ln;
	const IrValue *x = nd->in[0], *wt = nd->in[1], *v = nd->out[0];
	const IrAttrs *a = &nd->attrs;
	bool nhwc = a->nhwc;
	int ih = nhwc ? 1 : 2, iw = nhwc ? 2 : 3, ic = nhwc ? 3 : 1;
	int64_t O = wt->shape[0], Cg = wt->shape[ic], KH = wt->shape[ih], KW = wt->shape[iw];
	LnIdx *o[KC_MAX_RANK], *kh, *kw, *ci, *jx[4], *jw[4];
	LnExpr *cond = NULL;

	shape_loops(ln, st, v, o);
	int nsp = st->nloops;
	if (nhwc) {
		kh = red_loop(ln, st, KH);
		kw = red_loop(ln, st, KW);
		ci = red_loop(ln, st, Cg);
	} else {
		ci = red_loop(ln, st, Cg);
		kh = red_loop(ln, st, KH);
		kw = red_loop(ln, st, KW);
	}
	st->nred = st->nloops - nsp;
	st->ninner = 0;
	st->accbuf = -1;
	st->red_op = IR_OP_ADD;
	st->acc = acc_dtype(st, IR_OP_ADD, v->dtype);
	LnIdx *c = ci;
	if (a->groups > 1) /* input channel: group(oc) * Cg + ci */
		c = ln_idx_add(ln, ln_idx_mul(ln, ln_idx_div(ln, o[ic], O / a->groups), Cg), ci);
	jx[0] = o[0];
	jx[ic] = c;
	jx[ih] =
	    conv_coord(L, o[ih], kh, a->stride[0], a->dilation[0], a->pad[0], x->shape[ih], &cond);
	jx[iw] =
	    conv_coord(L, o[iw], kw, a->stride[1], a->dilation[1], a->pad[2], x->shape[iw], &cond);
	jw[0] = o[ic];
	jw[ic] = ci;
	jw[ih] = kh;
	jw[iw] = kw;
	LnExpr *xv = value_at(L, x, jx), *wv = value_at(L, wt, jw);
	if (!xv || !wv)
		return L->err->status;
	if (cond) {
		LnExpr *s3[3] = {cond, xv, expr_new(ln, LNE_CONST, xv->dtype)};
		xv = expr_op(ln, IR_OP_SELECT, xv->dtype, 3, s3);
	}
	LnExpr *m[2] = {coerce(ln, xv, v->dtype), coerce(ln, wv, v->dtype)};
	one_store(ln, st, buf, linearize(ln, o, v->shape, v->rank),
	          expr_op(ln, IR_OP_MUL, v->dtype, 2, m));
	return KC_OK;
}

/* An integer or float constant of dtype dt. */
static LnExpr *
expr_const(LoopNest *ln, KcDtype dt, double f, int64_t i)
{
	LnExpr *e = expr_new(ln, LNE_CONST, dt);
	e->fval = f;
	e->ival = i;
	return e;
}

/* The value of index x as an int64 expression. */
static LnExpr *
expr_index(LoopNest *ln, LnIdx *x, KcDtype dt)
{
	LnExpr *e = expr_new(ln, LNE_INDEX, dt);
	e->idx = x;
	return e;
}

/* a op b, elementwise. */
static LnExpr *
expr2(LoopNest *ln, IrOp op, KcDtype dt, LnExpr *a, LnExpr *b)
{
	LnExpr *x[2] = {a, b};
	return expr_op(ln, op, dt, 2, x);
}

/* Argmax/Argmin into buf: two reduction stages over the axis, laid out as
 * reduce_stage lays out a one-axis reduction. (1) m = max (min) into a
 * workspace, NaN-propagating as numpy; (2) the smallest index k with
 * x[k] == m, or x[k] NaN (m is NaN exactly when some x is): a MINIMUM
 * reduction of select(hit, k, INT_MAX), so ties give the first index and
 * argmax/argmin of a row holding NaN give its first NaN, as numpy. */
static KcStatus
arg_stages(Lower *L, const IrNode *nd, int buf, int *s)
{
	LoopNest *ln = L->ln;
	const IrValue *u = nd->in[0], *v = nd->out[0];
	const char *name = v->tensor_name ? v->tensor_name : "?";
	int ax = (int)nd->attrs.axis[0];
	LnIdx *idx[KC_MAX_RANK], *sidx;
	bool red[KC_MAX_RANK] = {false};
	bool fl = kc_dtype_info[u->dtype].cls == DTC_FLOAT;

	red[ax] = true;
	LnStage *st = stage_new(L, (*s)++);
	red_loops(ln, st, u, red, idx, &sidx);
	LnExpr *x = value_at(L, u, idx);
	if (!x)
		return L->err->status;
	int mbuf = workspace_raw(
	    ln, arena_printf(ln->arena, "%s:%s", name, nd->op == IR_OP_ARGMAX ? "max" : "min"),
	    u->dtype, v->numel);
	red_store(ln, st, nd->op == IR_OP_ARGMAX ? IR_OP_MAXIMUM : IR_OP_MINIMUM, mbuf, sidx, x,
	          name, v->numel);
	collapse(L, st);

	st = stage_new(L, (*s)++);
	L->self = v;
	red_loops(ln, st, u, red, idx, &sidx);
	if (!(x = value_at(L, u, idx)))
		return L->err->status;
	LnExpr *m = expr_new(ln, LNE_LOAD, u->dtype);
	m->buf = mbuf;
	m->idx = sidx;
	LnExpr *hit = expr2(ln, IR_OP_EQUAL, KC_DT_BOOL, x, m);
	if (fl)
		hit = expr2(ln, IR_OP_LOGICAL_OR, KC_DT_BOOL, hit,
		            expr_op(ln, IR_OP_IS_NAN, KC_DT_BOOL, 1, &x));
	LnExpr *c3[3] = {
	    hit, expr_index(ln, idx[ax], v->dtype),
	    expr_const(ln, v->dtype, 0, v->dtype == KC_DT_INT32 ? INT32_MAX : INT64_MAX)};
	red_store(ln, st, IR_OP_MINIMUM, buf, sidx, expr_op(ln, IR_OP_SELECT, v->dtype, 3, c3),
	          name, v->numel);
	collapse(L, st);
	return KC_OK;
}

/* CumSum/CumProd into buf: one reduction stage, spatial loops over the
 * output and a reduction loop k over the axis, innermost; out[.., i, ..]
 * combines x[.., k, ..] for k <= i (exclusive: k < i; reverse: k >= i,
 * exclusive and reverse: k > i), the others contributing the identity.
 * Each element costs the axis length (quadratic in it): a correct
 * baseline, not a scan schedule; float sums and products accumulate as
 * the reductions do (f32 in f64, f16 in f32) and round once per element. */
static KcStatus
scan_stage(Lower *L, LnStage *st, const IrNode *nd, int buf)
{
	LoopNest *ln = L->ln;
	const IrValue *u = nd->in[0], *v = nd->out[0];
	const IrAttrs *a = &nd->attrs;
	int ax = (int)a->axis[0];
	LnIdx *o[KC_MAX_RANK], *j[KC_MAX_RANK];
	bool prod = nd->op == IR_OP_CUM_PROD;

	shape_loops(ln, st, v, o);
	int nsp = st->nloops;
	LnIdx *k = red_loop(ln, st, u->shape[ax]);
	st->nred = st->nloops - nsp;
	st->ninner = 0;
	memcpy(j, o, sizeof j);
	j[ax] = k;
	LnExpr *x = value_at(L, u, j);
	if (!x)
		return L->err->status;
	IrOp cmp = a->reverse ? (a->exclusive ? IR_OP_GREATER : IR_OP_GREATER_EQUAL)
	                      : (a->exclusive ? IR_OP_LESS : IR_OP_LESS_EQUAL);
	LnExpr *c3[3] = {expr2(ln, cmp, KC_DT_BOOL, expr_index(ln, k, KC_DT_INT64),
	                       expr_index(ln, o[ax], KC_DT_INT64)),
	                 coerce(ln, x, v->dtype), expr_const(ln, v->dtype, prod, prod)};
	red_store(ln, st, prod ? IR_OP_MUL : IR_OP_ADD, buf, linearize(ln, o, v->shape, v->rank),
	          expr_op(ln, IR_OP_SELECT, v->dtype, 3, c3), v->tensor_name ? v->tensor_name : "?",
	          v->numel);
	return KC_OK;
}

/* Pool2D into buf. Max: one reduction stage like conv_stage's (spatial
 * loops over the output in storage order, reduction loops kh, kw), taps in
 * the padding or past the padded input (ceil mode) read -inf, so padding
 * never wins. (op_dsl.py's numpy pads with 0 even for max; AKG's TVM
 * kernel, topi.nn.pool, pads max with the lowest value; we follow the
 * kernel: the two differ only when every real tap of a window is < 0.)
 * Avg: AKG's reference uses count_include_pad=True: the mean over the
 * window's cells inside the padded input (padding counts as 0 and in the
 * divisor; only the overhang of a ceil-mode window does not count). Stage
 * 1 sums in float64 into a workspace; stage 2 divides by that count and
 * rounds once. */
static KcStatus
pool_stages(Lower *L, const IrNode *nd, int buf, int *s)
{
	LoopNest *ln = L->ln;
	const IrValue *x = nd->in[0], *v = nd->out[0];
	const IrAttrs *a = &nd->attrs;
	bool nhwc = a->nhwc, mx = a->pool_max;
	int ih = nhwc ? 1 : 2, iw = nhwc ? 2 : 3, ic = nhwc ? 3 : 1;
	const char *name = v->tensor_name ? v->tensor_name : "?";
	LnIdx *o[KC_MAX_RANK], *jx[4];
	LnExpr *cond = NULL;
	int sbuf = mx ? buf
	              : workspace_raw(ln, arena_printf(ln->arena, "%s:sum", name), KC_DT_FLOAT64,
	                              v->numel);

	LnStage *st = stage_new(L, (*s)++);
	if (mx)
		L->self = v;
	shape_loops(ln, st, v, o);
	int nsp = st->nloops;
	LnIdx *kh = red_loop(ln, st, a->kernel[0]);
	LnIdx *kw = red_loop(ln, st, a->kernel[1]);
	st->nred = st->nloops - nsp;
	st->ninner = 0;
	jx[0] = o[0];
	jx[ic] = o[ic];
	jx[ih] = conv_coord(L, o[ih], kh, a->stride[0], 1, a->pad[0], x->shape[ih], &cond);
	jx[iw] = conv_coord(L, o[iw], kw, a->stride[1], 1, a->pad[2], x->shape[iw], &cond);
	LnExpr *xv = value_at(L, x, jx);
	if (!xv)
		return L->err->status;
	if (!mx)
		xv = coerce(ln, xv, KC_DT_FLOAT64);
	if (cond) {
		LnExpr *s3[3] = {cond, xv, expr_const(ln, xv->dtype, mx ? -INFINITY : 0, 0)};
		xv = expr_op(ln, IR_OP_SELECT, xv->dtype, 3, s3);
	}
	LnIdx *so = linearize(ln, o, v->shape, v->rank);
	red_store(ln, st, mx ? IR_OP_MAXIMUM : IR_OP_ADD, sbuf, so, xv, name, v->numel);
	collapse(L, st);
	if (mx)
		return KC_OK;

	/* the mean: sum / (cells of the window inside the padded input) */
	st = stage_new(L, (*s)++);
	L->self = v;
	shape_loops(ln, st, v, o);
	LnExpr *sum = expr_new(ln, LNE_LOAD, KC_DT_FLOAT64);
	sum->buf = sbuf;
	sum->idx = linearize(ln, o, v->shape, v->rank);
	LnExpr *cnt = NULL;
	for (int d = 0; d < 2; d++) {
		int dim = d ? iw : ih;
		int64_t k = a->kernel[d], sd = a->stride[d];
		int64_t hp = x->shape[dim] + a->pad[2 * d] + a->pad[2 * d + 1];
		LnExpr *c;
		if ((v->shape[dim] - 1) * sd + k <= hp) { /* no window overhangs */
			c = expr_const(ln, KC_DT_INT64, 0, k);
		} else { /* min(o*s + k, hp) - o*s */
			LnIdx *start = ln_idx_mul(ln, o[dim], sd);
			LnExpr *end =
			    expr_index(ln, ln_idx_add(ln, start, ln_idx_const(ln, k)), KC_DT_INT64);
			end = expr2(ln, IR_OP_MINIMUM, KC_DT_INT64, end,
			            expr_const(ln, KC_DT_INT64, 0, hp));
			c = expr2(ln, IR_OP_SUB, KC_DT_INT64, end,
			          expr_index(ln, start, KC_DT_INT64));
		}
		c = coerce(ln, c, KC_DT_FLOAT64);
		cnt = cnt ? expr2(ln, IR_OP_MUL, KC_DT_FLOAT64, cnt, c) : c;
	}
	one_store(ln, st, buf, linearize(ln, o, v->shape, v->rank),
	          coerce(ln, expr2(ln, IR_OP_REAL_DIV, KC_DT_FLOAT64, sum, cnt), v->dtype));
	collapse(L, st);
	return KC_OK;
}

/* A new workspace buffer for v. */
static int
workspace(LoopNest *ln, const IrValue *v)
{
	LnBuf *b = &ln->bufs[ln->nbufs];
	b->name = v->tensor_name ? v->tensor_name : "?";
	b->dtype = v->dtype;
	b->numel = v->numel;
	b->arg = -1;
	return ln->nbufs++;
}

KcStatus
ln_lower(Arena *ar, const IrGraph *g, LoopNest **out, KcErr *err)
{
	LoopNest *ln = ARENA_NEW(ar, LoopNest);
	Lower L = {.ln = ln, .g = g, .err = err};
	Plan P;
	int s = 0;
	KcStatus stt;

	KC_ASSERT(g->work); /* kc_parse sets it */
	ln->work = g->work;
	plan(ar, g, &P, &ln->work->n[KC_WORK_LOWER]);
	L.mat = P.mat;
	ln->arena = ar;
	/* the stage count is known from the plan: refuse before building any */
	ln->work->n[KC_WORK_LOWER_STAGES] = P.nmat + P.ngroups + P.nassign;
	if ((stt = kc_work_check(ln->work, KC_WORK_LOWER_STAGES, err)) != KC_OK ||
	    (stt = kc_work_check(ln->work, KC_WORK_LOWER, err)) != KC_OK)
		return stt;
	ln->nbufs = g->ninputs + g->noutputs;
	ln->bufs = ARENA_ARRAY(ar, LnBuf, ln->nbufs + 2 * P.nmat + 1); /* + accumulators */
	for (int i = 0; i < ln->nbufs; i++) {
		const IrValue *v = i < g->ninputs ? g->inputs[i] : g->outputs[i - g->ninputs];
		LnBuf *b = &ln->bufs[i];
		b->name = v->tensor_name ? v->tensor_name : "?";
		b->dtype = v->dtype;
		b->numel = v->numel;
		b->arg = i;
		b->is_output = i >= g->ninputs;
	}
	for (int i = 0; i < g->ninputs; i++)
		if (g->inputs[i]->input_index != i)
			return kc_fail(err, KC_CODEGEN, "lower", "input %d has input_index %d", i,
			               g->inputs[i]->input_index);
	/* materialised values live in their kernel output, else a workspace */
	L.matbuf = ARENA_ARRAY(ar, int, g->nvalues + 1);
	for (int v = 0; v < g->nvalues; v++)
		L.matbuf[v] = -1;
	for (int v = 0; v < g->nvalues; v++) {
		if (!P.mat[v])
			continue;
		for (int o = 0; o < g->noutputs && L.matbuf[v] < 0; o++)
			if (g->outputs[o] == g->values[v])
				L.matbuf[v] = g->ninputs + o;
		if (L.matbuf[v] < 0)
			L.matbuf[v] = workspace(ln, g->values[v]);
	}
	ln->nstages = P.nmat + P.ngroups + P.nassign;
	ln->stages = ARENA_ARRAY(ar, LnStage, ln->nstages + 1);
	L.memo = ARENA_ARRAY(ar, Memo *, g->nvalues + 1);
	L.memo_at = ARENA_ARRAY(ar, int, g->nvalues + 1);

	/* 1. materialised values, in topological order */
	for (int n = 0; n < g->nnodes; n++) {
		const IrNode *nd = g->nodes[n];
		const IrValue *v = nd->out[0];
		LnIdx *idx[KC_MAX_RANK];
		if (!P.mat[v->id])
			continue;
		if (nd->op == IR_OP_CONCAT) {
			/* piece k writes its slab of the result at its offset */
			int ax = (int)nd->attrs.axis[0];
			int64_t off = 0;
			for (int k = 0; k < nd->nin; k++) {
				const IrValue *u = nd->in[k];
				LnStage *st = stage_new(&L, s++);
				shape_loops(ln, st, u, idx);
				LnIdx *saved = idx[ax];
				idx[ax] = ln_idx_add(ln, idx[ax], ln_idx_const(ln, off));
				st->stores = ARENA_ARRAY(ar, LnStore, 1);
				st->nstores = 1;
				st->stores[0].buf = L.matbuf[v->id];
				st->stores[0].idx = linearize(ln, idx, v->shape, v->rank);
				idx[ax] = saved;
				LnExpr *e = value_at(&L, u, idx);
				if (!e)
					return err->status;
				st->stores[0].value = coerce(ln, e, v->dtype);
				collapse(&L, st);
				off += u->shape[ax];
			}
			continue;
		}
		if (ir_op_info[nd->op].kind == OPK_MATMUL) {
			if ((stt = matmul_stages(&L, nd, L.matbuf[v->id], &s)) != KC_OK)
				return stt;
			continue;
		}
		if (ir_op_info[nd->op].kind == OPK_CONV && conv_gemm_applies(nd, L.mat)) {
			if ((stt = gemm_into(&L, nd, L.matbuf[v->id], &s, conv_gemm_stage)) !=
			    KC_OK)
				return stt;
			continue;
		}
		if (ir_op_info[nd->op].kind == OPK_ARG || ir_op_info[nd->op].kind == OPK_POOL) {
			stt = ir_op_info[nd->op].kind == OPK_ARG
			          ? arg_stages(&L, nd, L.matbuf[v->id], &s)
			          : pool_stages(&L, nd, L.matbuf[v->id], &s);
			if (stt != KC_OK)
				return stt;
			continue;
		}
		LnStage *st = stage_new(&L, s++);
		L.self = v;
		if (ir_op_info[nd->op].kind == OPK_REDUCE) {
			if ((stt = reduce_stage(&L, st, nd, L.matbuf[v->id])) != KC_OK)
				return stt;
		} else if (ir_op_info[nd->op].kind == OPK_CONV) {
			if ((stt = conv_stage(&L, st, nd, L.matbuf[v->id])) != KC_OK)
				return stt;
		} else if (ir_op_info[nd->op].kind == OPK_SCAN) {
			if ((stt = scan_stage(&L, st, nd, L.matbuf[v->id])) != KC_OK)
				return stt;
		} else {
			shape_loops(ln, st, v, idx);
			st->stores = ARENA_ARRAY(ar, LnStore, 1);
			st->nstores = 1;
			st->stores[0].buf = L.matbuf[v->id];
			st->stores[0].idx = linearize(ln, idx, v->shape, v->rank);
			if (!(st->stores[0].value = value_at(&L, v, idx)))
				return err->status;
		}
		collapse(&L, st);
	}
	/* 2. the other kernel outputs, one injective stage per shape */
	for (int grp = 0; grp < P.ngroups; grp++) {
		LnStage *st = stage_new(&L, s++);
		const IrValue *rep = NULL;
		LnIdx *idx[KC_MAX_RANK];
		int n = 0;

		for (int o = 0; o < g->noutputs; o++)
			if (P.group[o] == grp) {
				n++;
				if (!rep)
					rep = g->outputs[o];
			}
		shape_loops(ln, st, rep, idx);
		st->stores = ARENA_ARRAY(ar, LnStore, n);
		for (int o = 0; o < g->noutputs; o++) {
			if (P.group[o] != grp)
				continue;
			const IrValue *v = g->outputs[o];
			LnStore *sto = &st->stores[st->nstores++];
			sto->buf = g->ninputs + o;
			sto->idx = linearize(ln, idx, v->shape, v->rank);
			sto->value = value_at(&L, v, idx);
			if (!sto->value)
				return err->status;
		}
		collapse(&L, st);
	}
	/* 3. in-place writes, last: nothing after them reads the old values */
	for (int n = 0; n < g->nnodes; n++) {
		const IrNode *nd = g->nodes[n];
		if (ir_op_info[nd->op].kind != OPK_ASSIGN)
			continue;
		const IrValue *dst = nd->in[0];
		LnStage *st = stage_new(&L, s++);
		LnIdx *idx[KC_MAX_RANK];
		shape_loops(ln, st, dst, idx);
		st->stores = ARENA_ARRAY(ar, LnStore, 1);
		st->nstores = 1;
		st->stores[0].buf = dst->input_index;
		st->stores[0].idx = linearize(ln, idx, dst->shape, dst->rank);
		LnExpr *e = value_at(&L, nd->in[1], idx);
		if (!e)
			return err->status;
		st->stores[0].value = coerce(ln, e, dst->dtype);
		ln->bufs[dst->input_index].inplace = true;
		collapse(&L, st);
	}
	KC_ASSERT(s == ln->nstages);
	if ((stt = kc_work_check(ln->work, KC_WORK_COLLAPSE, err)) != KC_OK)
		return stt;
	*out = ln;
	return KC_OK;
}

/* ---- for the schedule passes (fuse.c) ------------------------------------- */

LnExpr *
ln_expr_new(LoopNest *ln, LnExprKind kind, KcDtype dt)
{
	return expr_new(ln, kind, dt);
}

LnExpr *
ln_expr_load(LoopNest *ln, int buf, LnIdx *idx)
{
	LnExpr *e = expr_new(ln, LNE_LOAD, ln->bufs[buf].dtype);
	e->buf = buf;
	e->idx = idx;
	return e;
}

LnExpr *
ln_expr_coerce(LoopNest *ln, LnExpr *e, KcDtype dt)
{
	return coerce(ln, e, dt);
}

/* A new workspace; bufs was sized by ln_lower, so it grows here. */
int
ln_workspace_new(LoopNest *ln, const char *name, KcDtype dt, int64_t numel)
{
	LnBuf *nb = ARENA_ARRAY(ln->arena, LnBuf, ln->nbufs + 1);
	memcpy(nb, ln->bufs, sizeof(LnBuf) * (size_t)ln->nbufs);
	ln->bufs = nb;
	return workspace_raw(ln, name, dt, numel);
}
