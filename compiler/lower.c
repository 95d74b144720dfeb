/* lower.c - IrGraph -> LoopNest: one "injective" stage per group of kernel
 * outputs sharing a shape.
 *
 * Each output's value is built by inlining the graph at a multi-dimensional
 * index (one LnIdx per dim), memoised per (value, index) so shared
 * subexpressions stay shared DAG nodes. Broadcasting drops leading dims and
 * maps size-1 dims to 0; Reshape linearises the index and delinearises it
 * into the operand's shape, and the index simplifier folds
 * linearize(delinearize(f, S), S) back to f. Finally adjacent loops are
 * collapsed wherever every index agrees (dim merging), so a same-shape
 * chain is one flat loop and [16,768] + [768] is rows x 768.
 *
 * The simplifying index constructors live here too (ln_idx_*).
 */
#include <stdlib.h>
#include <string.h>

#include "loopnest.h"

/* ---- index expressions ---------------------------------------------------- */

#define MAX_TERMS 64
#define MAX_EXPRS (1 << 20)

typedef struct Term {
	LnIdx *e;
	int64_t k;
} Term;

/* A raw index node; callers go through the simplifying ln_idx_*. */
static LnIdx *
node(LoopNest *ln, LnIdxKind kind, LnIdx *a, LnIdx *b, int64_t c, int var)
{
	LnIdx *x = ARENA_NEW(ln->arena, LnIdx);
	x->kind = kind;
	x->a = a;
	x->b = b;
	x->c = c;
	x->var = var;
	return x;
}

/* A new loop variable with the given trip count. */
int
ln_var_new(LoopNest *ln, int64_t extent)
{
	if (ln->nvars == ln->capvars) {
		int cap = ln->capvars ? ln->capvars * 2 : 32;
		int64_t *n = ARENA_ARRAY(ln->arena, int64_t, cap);
		if (ln->nvars)
			memcpy(n, ln->var_extent, sizeof(int64_t) * (size_t)ln->nvars);
		ln->var_extent = n;
		ln->capvars = cap;
	}
	ln->var_extent[ln->nvars] = extent;
	return ln->nvars++;
}

/* Constant index. */
LnIdx *
ln_idx_const(LoopNest *ln, int64_t c)
{
	return node(ln, LNI_CONST, NULL, NULL, c, -1);
}

/* A loop variable; one with a single trip is the constant 0. */
LnIdx *
ln_idx_var(LoopNest *ln, int v)
{
	KC_ASSERT(v >= 0 && v < ln->nvars);
	if (ln->var_extent[v] <= 1)
		return ln_idx_const(ln, 0);
	return node(ln, LNI_VAR, NULL, NULL, 0, v);
}

/* Inclusive upper bound of x (every index is non-negative). */
int64_t
ln_idx_max(const LoopNest *ln, const LnIdx *x)
{
	int64_t m;

	switch (x->kind) {
	case LNI_CONST: return x->c;
	case LNI_VAR: return ln->var_extent[x->var] - 1;
	case LNI_ADD: return ln_idx_max(ln, x->a) + ln_idx_max(ln, x->b);
	case LNI_MUL: return ln_idx_max(ln, x->a) * x->c;
	case LNI_DIV: return ln_idx_max(ln, x->a) / x->c;
	case LNI_MOD: m = ln_idx_max(ln, x->a); return m < x->c - 1 ? m : x->c - 1;
	}
	KC_ASSERT(0);
	return 0;
}

/* Structural equality. */
bool
ln_idx_equal(const LnIdx *x, const LnIdx *y)
{
	if (x == y)
		return true;
	if (x->kind != y->kind)
		return false;
	switch (x->kind) {
	case LNI_CONST: return x->c == y->c;
	case LNI_VAR: return x->var == y->var;
	case LNI_ADD: return ln_idx_equal(x->a, y->a) && ln_idx_equal(x->b, y->b);
	case LNI_MUL:
	case LNI_DIV:
	case LNI_MOD: return x->c == y->c && ln_idx_equal(x->a, y->a);
	}
	return false;
}

/* Total order on leaf terms, so sums are built in one canonical order. */
static int
idx_cmp(const LnIdx *x, const LnIdx *y)
{
	int r;

	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	switch (x->kind) {
	case LNI_CONST: return x->c < y->c ? -1 : x->c > y->c;
	case LNI_VAR: return x->var < y->var ? -1 : x->var > y->var;
	case LNI_ADD: r = idx_cmp(x->a, y->a); return r ? r : idx_cmp(x->b, y->b);
	case LNI_MUL:
	case LNI_DIV:
	case LNI_MOD:
		if (x->c != y->c)
			return x->c < y->c ? -1 : 1;
		return idx_cmp(x->a, y->a);
	}
	return 0;
}

/* Adds k*e to the term list, merging an equal term. */
static void
add_term(Term *t, int *n, LnIdx *e, int64_t k)
{
	for (int i = 0; i < *n; i++) {
		if (ln_idx_equal(t[i].e, e)) {
			t[i].k += k;
			return;
		}
	}
	KC_ASSERT(*n < MAX_TERMS);
	t[*n].e = e;
	t[*n].k = k;
	(*n)++;
}

/* Flattens k*x into terms (leaves: var, div, mod) plus a constant. */
static void
flatten(const LnIdx *x, int64_t k, Term *t, int *n, int64_t *c)
{
	switch (x->kind) {
	case LNI_CONST: *c += k * x->c; return;
	case LNI_ADD:
		flatten(x->a, k, t, n, c);
		flatten(x->b, k, t, n, c);
		return;
	case LNI_MUL: flatten(x->a, k * x->c, t, n, c); return;
	case LNI_VAR:
	case LNI_DIV:
	case LNI_MOD: add_term(t, n, (LnIdx *)x, k); return;
	}
}

/* qsort order of terms: by leaf, then coefficient. */
static int
term_cmp(const void *p, const void *q)
{
	const Term *a = p, *b = q;
	int r = idx_cmp(a->e, b->e);
	if (r)
		return r;
	return a->k < b->k ? -1 : a->k > b->k;
}

/* Merge m*(x/m) + x%m -> x and m*((x/m)%b) + x%m -> x%(m*b) (with a common
 * coefficient), drop zero terms, then build the sum in canonical order. */
static LnIdx *
build_sum(LoopNest *ln, Term *t, int n, int64_t c)
{
	bool changed = true;
	LnIdx *acc = NULL;

	while (changed) {
		changed = false;
		for (int i = 0; i < n && !changed; i++) {
			if (t[i].e->kind != LNI_MOD || t[i].k == 0)
				continue;
			LnIdx *x = t[i].e->a;
			int64_t m = t[i].e->c, k = t[i].k;
			for (int j = 0; j < n && !changed; j++) {
				LnIdx *y = t[j].e;
				if (j == i || t[j].k != k * m)
					continue;
				if (y->kind == LNI_DIV && y->c == m && ln_idx_equal(y->a, x)) {
					t[i].e = x;
				} else if (y->kind == LNI_MOD && y->a->kind == LNI_DIV &&
				           y->a->c == m && ln_idx_equal(y->a->a, x)) {
					t[i].e = ln_idx_mod(ln, x, m * y->c);
				} else {
					continue;
				}
				t[j] = t[--n];
				changed = true;
			}
		}
		if (changed) {
			/* the merged term may itself be a sum or equal another term */
			Term u[MAX_TERMS];
			int nu = 0;
			for (int i = 0; i < n; i++)
				flatten(t[i].e, t[i].k, u, &nu, &c);
			memcpy(t, u, sizeof(Term) * (size_t)nu);
			n = nu;
		}
	}
	qsort(t, (size_t)n, sizeof(Term), term_cmp);
	for (int i = 0; i < n; i++) {
		if (t[i].k == 0)
			continue;
		KC_ASSERT(t[i].k > 0);
		LnIdx *e = t[i].k == 1 ? t[i].e : node(ln, LNI_MUL, t[i].e, NULL, t[i].k, -1);
		acc = acc ? node(ln, LNI_ADD, acc, e, 0, -1) : e;
	}
	if (!acc)
		return ln_idx_const(ln, c);
	if (c != 0)
		acc = node(ln, LNI_ADD, acc, ln_idx_const(ln, c), 0, -1);
	return acc;
}

/* a + b, canonical. */
LnIdx *
ln_idx_add(LoopNest *ln, LnIdx *a, LnIdx *b)
{
	Term t[MAX_TERMS];
	int n = 0;
	int64_t c = 0;

	flatten(a, 1, t, &n, &c);
	flatten(b, 1, t, &n, &c);
	return build_sum(ln, t, n, c);
}

/* a * k (k >= 0), distributed over sums. */
LnIdx *
ln_idx_mul(LoopNest *ln, LnIdx *a, int64_t k)
{
	Term t[MAX_TERMS];
	int n = 0;
	int64_t c = 0;

	KC_ASSERT(k >= 0);
	if (k == 0)
		return ln_idx_const(ln, 0);
	if (k == 1)
		return a;
	flatten(a, k, t, &n, &c);
	return build_sum(ln, t, n, c);
}

/* a / k (k > 0), floor division of a non-negative index. */
LnIdx *
ln_idx_div(LoopNest *ln, LnIdx *a, int64_t k)
{
	Term t[MAX_TERMS], q[MAX_TERMS], r[MAX_TERMS];
	int n = 0, nq = 0, nr = 0;
	int64_t c = 0;

	KC_ASSERT(k > 0);
	if (k == 1)
		return a;
	if (a->kind == LNI_CONST)
		return ln_idx_const(ln, a->c / k);
	if (ln_idx_max(ln, a) < k)
		return ln_idx_const(ln, 0);
	if (a->kind == LNI_DIV)
		return ln_idx_div(ln, a->a, a->c * k);
	/* (k*Q + R) / k = Q + R / k for non-negative Q, R */
	flatten(a, 1, t, &n, &c);
	for (int i = 0; i < n; i++) {
		if (t[i].k % k == 0) {
			q[nq] = t[i];
			q[nq++].k /= k;
		} else {
			r[nr++] = t[i];
		}
	}
	if (nq == 0 && c < k)
		return node(ln, LNI_DIV, a, NULL, k, -1);
	LnIdx *rest = build_sum(ln, r, nr, c % k);
	LnIdx *quot = build_sum(ln, q, nq, c / k);
	if (ln_idx_max(ln, rest) < k)
		return quot;
	return ln_idx_add(ln, quot, node(ln, LNI_DIV, rest, NULL, k, -1));
}

/* a % k (k > 0), dropping terms that are multiples of k. */
LnIdx *
ln_idx_mod(LoopNest *ln, LnIdx *a, int64_t k)
{
	Term t[MAX_TERMS], r[MAX_TERMS];
	int n = 0, nr = 0;
	int64_t c = 0;

	KC_ASSERT(k > 0);
	if (k == 1)
		return ln_idx_const(ln, 0);
	if (a->kind == LNI_CONST)
		return ln_idx_const(ln, a->c % k);
	if (ln_idx_max(ln, a) < k)
		return a;
	if (a->kind == LNI_MOD && a->c % k == 0)
		return ln_idx_mod(ln, a->a, k);
	if (a->kind == LNI_VAR || a->kind == LNI_DIV || a->kind == LNI_MOD)
		return node(ln, LNI_MOD, a, NULL, k, -1);
	flatten(a, 1, t, &n, &c);
	for (int i = 0; i < n; i++)
		if (t[i].k % k != 0)
			r[nr++] = t[i];
	LnIdx *rest = build_sum(ln, r, nr, c % k);
	if (ln_idx_max(ln, rest) < k)
		return rest;
	return node(ln, LNI_MOD, rest, NULL, k, -1);
}

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

typedef struct Lower {
	LoopNest *ln;
	const IrGraph *g;
	Memo **memo; /* per IrValue id; reset per stage */
	KcErr *err;
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

	KC_ASSERT(nd->nin <= 3);
	switch (nd->op) {
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

	for (m = L->memo[v->id]; m; m = m->next) {
		int k = 0;
		while (k < v->rank && ln_idx_equal(m->idx[k], idx[k]))
			k++;
		if (k == v->rank)
			return m->e;
	}
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
	int64_t *coef; /* per stage loop position */
} Affine;

/* Accumulates k*x into per-loop coefficients; a->ok = false on div/mod. */
static void
affine(const LnIdx *x, int64_t k, const int *pos, Affine *a)
{
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
		a->ok = false; /* not affine; the caller pins its vars */
		return;
	}
}

/* Marks every stage loop var under x as not mergeable. */
static void
pin_vars(const LnIdx *x, const int *pos, bool *pinned)
{
	switch (x->kind) {
	case LNI_CONST: return;
	case LNI_VAR:
		if (pos[x->var] >= 0)
			pinned[pos[x->var]] = true;
		return;
	case LNI_ADD:
		pin_vars(x->a, pos, pinned);
		pin_vars(x->b, pos, pinned);
		return;
	case LNI_MUL:
	case LNI_DIV:
	case LNI_MOD: pin_vars(x->a, pos, pinned); return;
	}
}

typedef struct IdxRef {
	LnIdx **slot;
} IdxRef;

/* Collects the index slots of every load under e (once per node). */
static void
collect_loads(LnExpr *e, bool *seen, IdxRef *refs, int *n, int cap)
{
	if (seen[e->id])
		return;
	seen[e->id] = true;
	if (e->kind == LNE_LOAD) {
		KC_ASSERT(*n < cap);
		refs[(*n)++].slot = &e->idx;
	}
	if (e->kind == LNE_OP)
		for (int i = 0; i < e->nargs; i++)
			collect_loads(e->args[i], seen, refs, n, cap);
}

/* Merges adjacent loops p, p+1 wherever every index has coef[p] == coef[p+1] * E[p+1]. */
static void
collapse(LoopNest *ln, LnStage *st)
{
	int nrefs = 0, cap = 0;
	bool *seen = ARENA_ARRAY(ln->arena, bool, ln->nexprs);
	int *pos = ARENA_ARRAY(ln->arena, int, ln->nvars + LN_MAX_LOOPS); /* merges add vars */
	IdxRef *refs;

	cap = st->nstores + ln->nexprs;
	refs = ARENA_ARRAY(ln->arena, IdxRef, cap);
	for (int i = 0; i < st->nstores; i++) {
		refs[nrefs++].slot = &st->stores[i].idx;
		collect_loads(st->stores[i].value, seen, refs, &nrefs, cap);
	}
	for (int p = st->nloops - 2; p >= 0; p--) {
		bool pinned[LN_MAX_LOOPS] = {false};
		int64_t coef[LN_MAX_LOOPS];
		bool can = true;

		for (int v = 0; v < ln->nvars; v++)
			pos[v] = -1;
		for (int q = 0; q < st->nloops; q++)
			pos[st->loops[q].var] = q;
		for (int r = 0; r < nrefs; r++) {
			Affine a = {true, 0, coef};
			memset(coef, 0, sizeof coef);
			affine(*refs[r].slot, 1, pos, &a);
			if (!a.ok)
				pin_vars(*refs[r].slot, pos, pinned);
			else if (coef[p] != coef[p + 1] * st->loops[p + 1].extent)
				can = false;
		}
		if (pinned[p] || pinned[p + 1])
			can = false;
		if (!can)
			continue;
		/* merge loops p and p+1 into one var w = v_p * E_{p+1} + v_{p+1} */
		int64_t e1 = st->loops[p + 1].extent;
		int w = ln_var_new(ln, st->loops[p].extent * e1);
		for (int r = 0; r < nrefs; r++) {
			Affine a = {true, 0, coef};
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

KcStatus
ln_lower(Arena *ar, const IrGraph *g, LoopNest **out, KcErr *err)
{
	LoopNest *ln = ARENA_NEW(ar, LoopNest);
	Lower L = {ln, g, NULL, err};
	int *group = ARENA_ARRAY(ar, int, g->noutputs + 1);

	ln->arena = ar;
	ln->nbufs = g->ninputs + g->noutputs;
	ln->bufs = ARENA_ARRAY(ar, LnBuf, ln->nbufs + 1);
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
	/* group outputs by shape, in order of first appearance */
	for (int o = 0; o < g->noutputs; o++) {
		group[o] = -1;
		for (int p = 0; p < o && group[o] < 0; p++)
			if (same_shape(g->outputs[p], g->outputs[o]))
				group[o] = group[p];
		if (group[o] < 0)
			group[o] = ln->nstages++;
	}
	ln->stages = ARENA_ARRAY(ar, LnStage, ln->nstages + 1);
	L.memo = ARENA_ARRAY(ar, Memo *, g->nvalues + 1);
	for (int s = 0; s < ln->nstages; s++) {
		LnStage *st = &ln->stages[s];
		const IrValue *rep = NULL;
		LnIdx *idx[KC_MAX_RANK];
		int n = 0;

		memset(L.memo, 0, sizeof(Memo *) * (size_t)g->nvalues);
		for (int o = 0; o < g->noutputs; o++)
			if (group[o] == s) {
				n++;
				if (!rep)
					rep = g->outputs[o];
			}
		st->name = arena_printf(ar, "s%d", s);
		st->grain = 1;
		for (int k = 0; k < rep->rank; k++) {
			if (rep->shape[k] == 1) {
				idx[k] = ln_idx_const(ln, 0);
				continue;
			}
			LnLoop *l = &st->loops[st->nloops++];
			l->var = ln_var_new(ln, rep->shape[k]);
			l->extent = rep->shape[k];
			idx[k] = ln_idx_var(ln, l->var);
		}
		if (st->nloops == 0) { /* a scalar: one trip */
			st->loops[0].var = ln_var_new(ln, 1);
			st->loops[0].extent = 1;
			st->nloops = 1;
		}
		st->stores = ARENA_ARRAY(ar, LnStore, n);
		for (int o = 0; o < g->noutputs; o++) {
			if (group[o] != s)
				continue;
			const IrValue *v = g->outputs[o];
			LnStore *sto = &st->stores[st->nstores++];
			sto->buf = g->ninputs + o;
			sto->idx = linearize(ln, idx, v->shape, v->rank);
			sto->value = value_at(&L, v, idx);
			if (!sto->value)
				return err->status;
		}
		collapse(ln, st);
	}
	*out = ln;
	return KC_OK;
}

/* ---- verification ---------------------------------------------------------- */

static bool
idx_vars_bound(const LnIdx *x, const bool *bound)
{
	switch (x->kind) {
	case LNI_CONST: return true;
	case LNI_VAR: return bound[x->var];
	case LNI_ADD: return idx_vars_bound(x->a, bound) && idx_vars_bound(x->b, bound);
	case LNI_MUL:
	case LNI_DIV:
	case LNI_MOD: return idx_vars_bound(x->a, bound);
	}
	return false;
}

/* Checks loads (buffer, dtype, bounds) under e. */
static KcStatus
verify_expr(const LoopNest *ln, const LnExpr *e, const bool *bound, const char *pass, KcErr *err)
{
	switch (e->kind) {
	case LNE_CONST: return KC_OK;
	case LNE_LOAD:
		if (e->buf < 0 || e->buf >= ln->nbufs || ln->bufs[e->buf].is_output)
			return kc_fail(err, KC_CODEGEN, pass, "load from bad buffer %d", e->buf);
		if (ln->bufs[e->buf].dtype != e->dtype)
			return kc_fail(err, KC_CODEGEN, pass, "load dtype mismatch on %d", e->buf);
		if (!idx_vars_bound(e->idx, bound))
			return kc_fail(err, KC_CODEGEN, pass, "load index uses an unbound var");
		if (ln_idx_max(ln, e->idx) >= ln->bufs[e->buf].numel)
			return kc_fail(err, KC_CODEGEN, pass, "load out of bounds of buffer %d",
			               e->buf);
		return KC_OK;
	case LNE_OP:
		for (int i = 0; i < e->nargs; i++)
			if (verify_expr(ln, e->args[i], bound, pass, err))
				return err->status;
		if (e->op == IR_OP_BROADCAST_TO || e->op == IR_OP_RESHAPE)
			return kc_fail(err, KC_CODEGEN, pass, "layout op left in a loop body");
		return KC_OK;
	}
	return KC_OK;
}

KcStatus
ln_verify(const LoopNest *ln, const char *pass, KcErr *err)
{
	bool *bound = ARENA_ARRAY(ln->arena, bool, ln->nvars + 1);

	for (int s = 0; s < ln->nstages; s++) {
		const LnStage *st = &ln->stages[s];
		int npar = 0;
		memset(bound, 0, sizeof(bool) * (size_t)ln->nvars);
		if (st->nloops < 1 || st->nloops > LN_MAX_LOOPS)
			return kc_fail(err, KC_CODEGEN, pass, "stage %d has %d loops", s,
			               st->nloops);
		for (int l = 0; l < st->nloops; l++) {
			const LnLoop *lp = &st->loops[l];
			if (lp->var < 0 || lp->var >= ln->nvars ||
			    ln->var_extent[lp->var] != lp->extent)
				return kc_fail(err, KC_CODEGEN, pass,
				               "stage %d loop %d is malformed", s, l);
			if ((lp->kind & LNL_VECTORIZED) && (lp->width < 1 || lp->width > 64))
				return kc_fail(err, KC_CODEGEN, pass, "bad vector width");
			if ((lp->kind & LNL_PARALLEL) && ++npar > 1)
				return kc_fail(err, KC_CODEGEN, pass,
				               "two parallel loops in stage %d", s);
			bound[lp->var] = true;
		}
		for (int i = 0; i < st->nstores; i++) {
			const LnStore *sto = &st->stores[i];
			if (sto->buf < 0 || sto->buf >= ln->nbufs || !ln->bufs[sto->buf].is_output)
				return kc_fail(err, KC_CODEGEN, pass, "store to bad buffer %d",
				               sto->buf);
			if (sto->value->dtype != ln->bufs[sto->buf].dtype)
				return kc_fail(err, KC_CODEGEN, pass, "store dtype mismatch on %d",
				               sto->buf);
			if (!idx_vars_bound(sto->idx, bound))
				return kc_fail(err, KC_CODEGEN, pass,
				               "store index uses an unbound var");
			if (ln->bufs[sto->buf].numel > 0 &&
			    ln_idx_max(ln, sto->idx) >= ln->bufs[sto->buf].numel)
				return kc_fail(err, KC_CODEGEN, pass,
				               "store out of bounds of buffer %d", sto->buf);
			if (verify_expr(ln, sto->value, bound, pass, err))
				return err->status;
		}
	}
	return KC_OK;
}
