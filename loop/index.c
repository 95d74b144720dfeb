/* index.c - the simplifying constructors of index expressions (ln_idx_*).
 *
 * Every index of a loop nest is built here, in a canonical form: a sum of
 * terms k * e (sorted, like terms merged, constants folded) over leaves that
 * are variables or opaque DIV/MOD/RSUB nodes. Structurally equal indices
 * are then the same tree, so ln_idx_equal is a plain walk and the
 * lowering's memo tables hit. DIV and MOD of a sum take out the terms that
 * are multiples of the divisor and fold what the bounds (ln_idx_max)
 * decide, which is what folds linearize(delinearize(f, S), S) back to f.
 */
#include <stdlib.h>
#include <string.h>

#include "loop.h"

#define MAX_TERMS 64

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
	switch (kind) {
	case LNI_CONST: x->max = c; break;
	case LNI_VAR: x->max = ln->var_extent[var] - 1; break;
	case LNI_ADD: x->max = a->max + b->max; break;
	case LNI_MUL: x->max = a->max * c; break;
	case LNI_DIV: x->max = a->max / c; break;
	case LNI_MOD: x->max = a->max < c - 1 ? a->max : c - 1; break;
	case LNI_RSUB: x->max = c; break; /* a >= 0 */
	}
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

/* Inclusive upper bound of x (every index is non-negative): node() set it. */
int64_t
ln_idx_max(const LoopNest *ln, const LnIdx *x)
{
	(void)ln;
	return x->max;
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
	case LNI_MOD:
	case LNI_RSUB: return x->c == y->c && ln_idx_equal(x->a, y->a);
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
	case LNI_RSUB:
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
	case LNI_MOD:
	case LNI_RSUB: add_term(t, n, (LnIdx *)x, k); return;
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

/* For the non-negative sum r[0..nr) + c0 and k > 0: the largest d > 1
 * dividing k with sum = d X + R, X the terms whose coefficients d divides
 * (divided by d) plus c0 / d, and 0 <= R < d the other terms plus c0 % d;
 * 0 when there is none. Then (d X + R) / k = X / (k/d) and
 * (d X + R) % k = d (X % (k/d)) + R: a reshape's (1024 i + j) / 65536
 * with j < 1024 is i / 64, so j stays a contiguous index. */
static int64_t
split_by(LoopNest *ln, const Term *r, int nr, int64_t c0, int64_t k, LnIdx **big, LnIdx **small)
{
	int64_t best = 0;

	if (c0 < 0)
		return 0;
	for (int i = 0; i < nr; i++) {
		int64_t d = r[i].k;
		if (d <= best || d <= 1 || k % d != 0)
			continue;
		Term bt[MAX_TERMS], st[MAX_TERMS];
		int nb = 0, ns = 0;
		for (int j = 0; j < nr; j++) {
			if (r[j].k % d == 0) {
				bt[nb] = r[j];
				bt[nb++].k /= d;
			} else {
				st[ns++] = r[j];
			}
		}
		LnIdx *sm = build_sum(ln, st, ns, c0 % d);
		if (ln_idx_max(ln, sm) >= d)
			continue;
		best = d;
		*big = build_sum(ln, bt, nb, c0 / d);
		*small = sm;
	}
	return best;
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
	LnIdx *big, *small;
	int64_t d = split_by(ln, r, nr, c % k, k, &big, &small);
	if (nq == 0 && c < k)
		return d ? ln_idx_div(ln, big, k / d) : node(ln, LNI_DIV, a, NULL, k, -1);
	LnIdx *rest = build_sum(ln, r, nr, c % k);
	LnIdx *quot = build_sum(ln, q, nq, c / k);
	if (ln_idx_max(ln, rest) < k)
		return quot;
	if (d)
		return ln_idx_add(ln, quot, ln_idx_div(ln, big, k / d));
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
	if (a->kind == LNI_VAR || a->kind == LNI_DIV || a->kind == LNI_MOD || a->kind == LNI_RSUB)
		return node(ln, LNI_MOD, a, NULL, k, -1);
	flatten(a, 1, t, &n, &c);
	for (int i = 0; i < n; i++)
		if (t[i].k % k != 0)
			r[nr++] = t[i];
	LnIdx *rest = build_sum(ln, r, nr, c % k);
	if (ln_idx_max(ln, rest) < k)
		return rest;
	LnIdx *big, *small;
	int64_t d = split_by(ln, r, nr, c % k, k, &big, &small);
	if (d)
		return ln_idx_add(ln, ln_idx_mul(ln, ln_idx_mod(ln, big, k / d), d), small);
	return node(ln, LNI_MOD, rest, NULL, k, -1);
}

/* c - a for an index a with 0 <= a <= c (every value a takes; its
 * ln_idx_max bound may be looser, so it is not asserted). */
LnIdx *
ln_idx_rsub(LoopNest *ln, int64_t c, LnIdx *a)
{
	if (a->kind == LNI_CONST)
		return ln_idx_const(ln, c - a->c);
	if (a->kind == LNI_RSUB && a->c == c)
		return a->a; /* c - (c - x) */
	return node(ln, LNI_RSUB, a, NULL, c, -1);
}
