/* test_graphfuzz.c - differential fuzzing of the compiler against the
 * reference interpreter.
 *
 * A generator builds random VALID composite graphs: shapes of rank 1-4 with
 * 1s and odd sizes (at most 256 elements, so hundreds of graphs run in
 * seconds), numpy broadcasts against existing values, fresh inputs and
 * scalar constants, dtypes float32/float16/bfloat16/int32/bool,
 * elementwise unary and binary ops, comparisons, Select, Cast, reductions
 * (axis lists, negative, empty = all, keep_dims), Reshape/BroadcastTo/
 * Transpose/ExpandDims/Tile/StridedSlice (masks)/Concat, occasionally
 * MatMul/BatchMatMul (transposes, batch broadcasting), Argmax/Argmin,
 * CumSum/CumProd (any axis, exclusive, reverse), Pool2D (max/avg, NHWC/
 * NCHW, pads, strides, ceil mode, global), and 2-4 outputs
 * (now and then a kernel input passed through). Each graph is
 * parsed (a refusal is a generator or parser bug: it fails), compiled for
 * the host, run with rt NULL and with a 3-thread runtime on seeded inputs,
 * and compared with kc_interp_ties on the same inputs: float32 rtol = atol
 * = 1e-4, 1e-2 with float16 upstream, ints and bools exact, near-tie
 * comparison elements excused.
 *
 * Determinism: the default seed is fixed (1), so CI runs the same 500
 * graphs every time and never flakes on a graph nobody has seen; set
 * KC_GRAPHFUZZ_SEED=random (or pass --seed N) to explore. The seed is
 * printed, and graph i of a run uses seed + i, so "--seed S+i --count 1"
 * replays one graph.
 *
 * Domain rules that keep comparisons meaningful (the interpreter rounds
 * every op to its dtype, a kernel may fuse and contract): ops with a
 * restricted or discontinuous domain (Log, Sqrt, Rsqrt, Reciprocal, Pow,
 * a divisor, Floor, Round, Sign, float -> int/bool Cast) take only kernel
 * inputs, whose values are exact and in range (kc_interp_random_inputs).
 *
 * A failure is shrunk greedily (drop outputs, then cut ops into fresh
 * kernel inputs, while it still fails) and the minimal JSON is printed.
 *
 *   test_graphfuzz [--seed N] [--count N] [--max-elements N (256)] [--verbose]
 *
 * --max-elements above 2048 also draws dims of 33, 64 and 129, so vector
 * loops with tails and the parallel regions get exercised.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compiler.h"
#include "t.h"
#include "tkernel.h"

/* ---- random numbers ------------------------------------------------------ */
static uint64_t rng;

static uint64_t
rnd64(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int
rnd(int n) /* [0, n) */
{
	return (int)(rnd64() % (uint64_t)n);
}

static bool
chance(int pct)
{
	return rnd(100) < pct;
}

/* ---- the graph model ----------------------------------------------------- */
enum { DT_F32, DT_F16, DT_I32, DT_BOOL, DT_BF16, NDT };
static const char *const dtn[NDT] = {"float32", "float16", "int32", "bool", "bfloat16"};
static const size_t dtb[NDT] = {4, 2, 4, 1, 2};

static bool
is_fl(int dt)
{
	return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16;
}

#define MAXV 64
#define MAXOPS 16
static int64_t CAP = 256; /* elements per tensor (--max-elements) */

typedef struct Val {
	int dt, rank;
	int64_t shape[4];
	bool input; /* a kernel input (else produced by ops[op]) */
	int op;
} Val;

typedef struct Opnd {
	int v;         /* value id, or -1: a scalar constant */
	char cval[24]; /* the constant's JSON number */
	int cdt;       /* the constant's dtype */
} Opnd;

typedef struct Op {
	const char *name;
	char attr[512]; /* JSON attr list, or "null" */
	int nin;
	bool dyn; /* Concat: the operands are one inner input_desc list */
	Opnd in[3];
	int out;
} Op;

typedef struct Graph {
	Val v[MAXV];
	int nv;
	Op ops[MAXOPS];
	int nops;
	int outs[8];
	int nouts;
} Graph;

static int64_t
numel(const Val *v)
{
	int64_t n = 1;
	for (int d = 0; d < v->rank; d++)
		n *= v->shape[d];
	return n;
}

static int
new_val(Graph *g, int dt, int rank, const int64_t *shape, bool input)
{
	if (g->nv >= MAXV)
		return -1;
	Val *v = &g->v[g->nv];
	memset(v, 0, sizeof *v);
	v->dt = dt;
	v->rank = rank > 0 ? rank : 1;
	v->shape[0] = 1;
	for (int d = 0; d < rank; d++)
		v->shape[d] = shape[d];
	v->input = input;
	v->op = -1;
	return g->nv++;
}

static void
rand_shape(int *rank, int64_t *shape)
{
	static const int64_t sizes[] = {1, 1, 2, 3, 4, 5, 7, 8, 13, 16, 33, 64, 129};
	int nsz = CAP > 2048 ? 13 : 10; /* big dims only with --max-elements */
	for (;;) {
		int64_t n = 1;
		*rank = 1 + rnd(4);
		for (int d = 0; d < *rank; d++) {
			shape[d] = sizes[rnd(nsz)];
			n *= shape[d];
		}
		if (n <= CAP)
			return;
	}
}

static int
new_input(Graph *g, int dt, int rank, const int64_t *shape)
{
	return new_val(g, dt, rank, shape, true);
}

static int
rand_input(Graph *g, int dt)
{
	int rank;
	int64_t shape[4];
	rand_shape(&rank, shape);
	return new_input(g, dt, rank, shape);
}

/* numpy broadcast of a and b; false if incompatible or too large. */
static bool
bcast(const Val *a, const Val *b, int *rank, int64_t *shape)
{
	int r = a->rank > b->rank ? a->rank : b->rank;
	int64_t n = 1;
	for (int d = 0; d < r; d++) {
		int da = d - (r - a->rank), db = d - (r - b->rank);
		int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
		if (x != y && x != 1 && y != 1)
			return false;
		shape[d] = x > y ? x : y;
		n *= shape[d];
	}
	*rank = r;
	return n <= CAP;
}

/* A random value of dtype dt (any if dt < 0), preferring recent ones; -1 if none. */
static int
pick(const Graph *g, int dt, bool inputs_only)
{
	int c[MAXV], n = 0;
	for (int i = 0; i < g->nv; i++)
		if ((dt < 0 || g->v[i].dt == dt) && (!inputs_only || g->v[i].input))
			c[n++] = i;
	if (!n)
		return -1;
	if (chance(50))
		return c[n - 1];
	return c[rnd(n)];
}

/* A second operand for a, broadcast-compatible: an existing value, a fresh
 * input with a derived shape, or a scalar constant (when allow_const). */
static Opnd
partner(Graph *g, int a, int dt, bool allow_const, bool fresh_only)
{
	Opnd o = {.v = -1, .cdt = dt};
	int r, k = rnd(10);
	int64_t s[4];
	if (allow_const && k < 3) {
		static const char *const fc[] = {"0.5", "-1.25", "2", "3", "-0.75", "1"};
		static const char *const ic[] = {"1", "2", "3", "-2", "4", "-1"};
		snprintf(o.cval, sizeof o.cval, "%s",
		         dt == DT_BOOL  ? (chance(50) ? "true" : "false")
		         : dt == DT_I32 ? ic[rnd(6)]
		                        : fc[rnd(6)]);
		return o;
	}
	if (!fresh_only && k < 6) {
		for (int tries = 0; tries < 8; tries++) {
			int b = pick(g, dt, false);
			if (b >= 0 && bcast(&g->v[a], &g->v[b], &r, s)) {
				o.v = b;
				return o;
			}
		}
	}
	/* fresh input: a's shape with some dims set to 1, 1s grown, leading dropped */
	const Val *va = &g->v[a];
	int drop = va->rank > 1 && chance(25) ? rnd(va->rank) : 0;
	r = va->rank - drop;
	for (int d = 0; d < r; d++) {
		int64_t x = va->shape[d + drop];
		s[d] = x == 1 && chance(20) ? 3 : chance(30) ? 1 : x;
	}
	Val t = {.rank = r};
	memcpy(t.shape, s, sizeof s);
	int rr;
	int64_t ss[4];
	if (!bcast(va, &t, &rr, ss))
		for (int d = 0; d < r; d++)
			s[d] = va->shape[d + drop];
	o.v = new_input(g, dt, r, s);
	return o;
}

static const Val *
opnd_val(const Graph *g, const Opnd *o, Val *tmp)
{
	if (o->v >= 0)
		return &g->v[o->v];
	memset(tmp, 0, sizeof *tmp);
	tmp->rank = 1;
	tmp->shape[0] = 1;
	tmp->dt = o->cdt;
	return tmp;
}

/* Appends op name(in...) with a result of dtype dt; the shape is the
 * broadcast of the operands unless given. Returns the op index or -1. */
static int
add_op(Graph *g, const char *name, const char *attr, int nin, const Opnd *in, int dt, int rank,
       const int64_t *shape)
{
	int64_t s[4];
	int r = 0;
	if (g->nops >= MAXOPS || g->nv >= MAXV || (!shape && in[0].v < 0))
		return -1;
	if (!shape) {
		Val t0, t1;
		const Val *acc = opnd_val(g, &in[0], &t0);
		Val cur = *acc;
		for (int i = 1; i < nin; i++) {
			const Val *b = opnd_val(g, &in[i], &t1);
			if (!bcast(&cur, b, &r, s))
				return -1;
			cur.rank = r;
			memcpy(cur.shape, s, sizeof s);
		}
		r = cur.rank;
		memcpy(s, cur.shape, sizeof s);
		shape = s;
		rank = r;
	}
	Op *op = &g->ops[g->nops];
	memset(op, 0, sizeof *op);
	op->name = name;
	snprintf(op->attr, sizeof op->attr, "%s", attr ? attr : "null");
	op->nin = nin;
	memcpy(op->in, in, sizeof(Opnd) * (size_t)nin);
	op->out = new_val(g, dt, rank, shape, false);
	g->v[op->out].op = g->nops;
	return g->nops++;
}

static Opnd
V(int v)
{
	Opnd o = {.v = v};
	return o;
}

static void
int_list(char *out, size_t cap, const int64_t *l, int n)
{
	size_t m = (size_t)snprintf(out, cap, "[");
	for (int i = 0; i < n; i++)
		m += (size_t)snprintf(out + m, cap - m, "%s%lld", i ? "," : "", (long long)l[i]);
	snprintf(out + m, cap - m, "]");
}

static int
float_dt(void)
{
	int k = rnd(100);
	return k < 60 ? DT_F32 : k < 85 ? DT_F16 : DT_BF16;
}

/* Argmax/Argmin, CumSum/CumProd or Pool2D appended to g. */
static void
gen_op_b(Graph *g)
{
	char attr[512];
	int64_t s[4];
	int k = rnd(3), a, dt = chance(30) ? DT_I32 : float_dt(), r = 0;
	Opnd in[1];

	if (k == 0) { /* Argmax/Argmin on anything (ties: the first index) */
		a = pick(g, dt, false);
		if (a < 0)
			a = rand_input(g, dt);
		Val *v = &g->v[a];
		int ax = rnd(v->rank);
		for (int d = 0; d < v->rank; d++)
			if (d != ax)
				s[r++] = v->shape[d];
		snprintf(attr, sizeof attr, "[{\"name\":\"axis\",\"value\":%d}]",
		         chance(30) ? ax - v->rank : ax);
		in[0] = V(a);
		add_op(g, chance(50) ? "Argmax" : "Argmin", attr, 1, in, DT_I32, r, s);
	} else if (k == 1) { /* CumSum/CumProd, any axis, exclusive, reverse */
		a = pick(g, dt, false);
		if (a < 0)
			a = rand_input(g, dt);
		Val *v = &g->v[a];
		int ax = rnd(v->rank);
		bool prod = chance(40) && v->shape[ax] <= 8;
		snprintf(attr, sizeof attr,
		         "[{\"name\":\"axis\",\"value\":%d},{\"name\":\"exclusive\",\"value\":%s},"
		         "{\"name\":\"reverse\",\"value\":%s}]",
		         chance(30) ? ax - v->rank : ax, chance(50) ? "true" : "false",
		         chance(50) ? "true" : "false");
		in[0] = V(a);
		add_op(g, prod ? "CumProd" : "CumSum", attr, 1, in, v->dt, v->rank, v->shape);
	} else { /* Pool2D on a fresh rank-4 float input */
		dt = float_dt();
		bool nhwc = chance(50), mx = chance(50), glob = chance(15), ceil = chance(30);
		int64_t N = 1 + rnd(2), C = 1 + rnd(3), H = 1 + rnd(7), W = 1 + rnd(7);
		int64_t kh = 1 + rnd(H < 3 ? (int)H : 3), kw = 1 + rnd(W < 3 ? (int)W : 3);
		int64_t sh = 1 + rnd(2), sw = 1 + rnd(2), p[4], o[2];
		if (N * C * H * W > CAP)
			return;
		p[0] = rnd((int)kh); /* AKG order: top, left, bottom, right */
		p[1] = rnd((int)kw);
		p[2] = rnd((int)kh);
		p[3] = rnd((int)kw);
		if (glob) {
			kh = H;
			kw = W;
			sh = sw = 1;
			p[0] = p[1] = p[2] = p[3] = 0;
			ceil = false;
		}
		int64_t in2[2] = {H, W}, k2[2] = {kh, kw}, s2[2] = {sh, sw};
		int64_t lo[2] = {p[0], p[1]}, hi[2] = {p[2], p[3]};
		for (int d = 0; d < 2; d++) {
			int64_t span = in2[d] + lo[d] + hi[d] - k2[d];
			o[d] = (ceil ? span + s2[d] - 1 : span) / s2[d] + 1;
			if ((o[d] - 1) * s2[d] >= in2[d] + lo[d])
				return; /* the last window in the padding: refused */
		}
		int64_t xs[4] = {N, nhwc ? H : C, nhwc ? W : H, nhwc ? C : W};
		int64_t os[4] = {N, nhwc ? o[0] : C, nhwc ? o[1] : o[0], nhwc ? C : o[1]};
		a = new_input(g, dt, 4, xs);
		if (a < 0)
			return;
		snprintf(attr, sizeof attr,
		         "[{\"name\":\"data_layout\",\"value\":\"%s\"},{\"name\":\"pool_type\","
		         "\"value\":\"%s\"},{\"name\":\"global\",\"value\":%s},"
		         "{\"name\":\"kernel_size\",\"value\":[%lld,%lld]},"
		         "{\"name\":\"strides\",\"value\":[%lld,%lld]},"
		         "{\"name\":\"pad\",\"value\":[%lld,%lld,%lld,%lld]},"
		         "{\"name\":\"round_mode\",\"value\":%d}]",
		         nhwc ? "NHWC" : "NCHW", mx ? "max" : "avg", glob ? "true" : "false",
		         (long long)kh, (long long)kw, (long long)sh, (long long)sw,
		         (long long)p[0], (long long)p[1], (long long)p[2], (long long)p[3],
		         ceil ? 1 : 0);
		in[0] = V(a);
		add_op(g, "Pool2D", attr, 1, in, dt, 4, os);
	}
}

/* StridedSlice of value a in full TF/numpy generality, built so that the
 * output shape is known by construction: per input dim a whole, shrunk or
 * ranged entry (stride +-1..3; a negative stride walks down from `top`,
 * its end is exact or end_mask when it runs past 0), a run of whole dims
 * possibly written as the ellipsis, new axes inserted anywhere (output
 * rank <= 4). */
static void
gen_slice(Graph *g, int a)
{
	const Val *v = &g->v[a];
	int64_t b[12], e[12], st[12], s[4];
	int64_t bm = 0, em = 0, sm = 0, elm = 0, nam = 0;
	int kind[4], n = 0, r = 0, rank = v->rank;
	char attr[512];

	for (int d = 0; d < rank; d++)
		kind[d] = chance(25)               ? 0
		          : chance(20) && rank > 1 ? 1
		                                   : 2; /* whole, shrink, range */
	/* the ellipsis: a run [p, q) of whole dims, maybe empty */
	int p = -1, q = -1;
	if (chance(40)) {
		p = rnd(rank + 1);
		for (q = p; q < rank && kind[q] == 0 && chance(80); q++)
			;
	}
	/* without an ellipsis, trailing whole dims may be left out */
	int last = rank;
	while (p < 0 && last > 0 && kind[last - 1] == 0 && chance(50))
		last--;
	int newax = rnd(3);
	for (int d = 0; d <= rank; d++) {
		/* a new axis here (not among the implicit trailing dims) */
		while (d <= last && newax > 0 && chance(40) && r < 4 && n < 12) {
			nam |= 1 << n;
			b[n] = 0, e[n] = 1, st[n++] = 1;
			s[r++] = 1;
			newax--;
		}
		if (d == p) {
			elm |= 1 << n;
			b[n] = 0, e[n] = 0, st[n++] = 1;
			for (; d < q; d++)
				if (r < 4)
					s[r++] = v->shape[d];
				else
					return;
			if (d == rank)
				break;
		}
		if (d == rank)
			break;
		int64_t dim = v->shape[d];
		if (d >= last) { /* implicit whole */
			if (r >= 4)
				return;
			s[r++] = dim;
			continue;
		}
		if (kind[d] == 0) {
			b[n] = 0, e[n] = dim, st[n] = 1;
			if (chance(50))
				bm |= 1 << n, em |= 1 << n, st[n] = chance(50) ? 1 : -1, e[n] = 0;
			n++;
			if (r >= 4)
				return;
			s[r++] = dim;
		} else if (kind[d] == 1) {
			int64_t i = rnd((int)dim);
			sm |= 1 << n;
			b[n] = chance(40) ? i - dim : i, e[n] = i + 1, st[n++] = 1;
		} else {
			int64_t step = 1 + rnd(3), cnt, top;
			if (chance(50)) { /* up */
				int64_t lo = rnd((int)dim), hi = lo + 1 + rnd((int)(dim - lo));
				cnt = (hi - lo + step - 1) / step;
				b[n] = chance(30) ? lo - dim : lo;
				e[n] = hi < dim && chance(30) ? hi - dim : hi;
				if (lo == 0 && chance(30))
					bm |= 1 << n, b[n] = 7;
				if (hi == dim && chance(30))
					em |= 1 << n, e[n] = -7;
				st[n++] = step;
			} else { /* down from top */
				top = rnd((int)dim);
				cnt = 1 + rnd((int)(top / step + 1));
				int64_t end = top - cnt * step;
				b[n] = chance(30) ? top - dim : top;
				if (top == dim - 1 && chance(30))
					bm |= 1 << n, b[n] = 0;
				if (end < 0)
					em |= 1 << n, e[n] = 0;
				else
					e[n] = chance(30) ? end - dim : end;
				st[n++] = -step;
			}
			if (r >= 4)
				return;
			s[r++] = cnt;
		}
	}
	if (r == 0 || n == 0)
		return;
	char lb[64], le[64], ls[64];
	int_list(lb, sizeof lb, b, n);
	int_list(le, sizeof le, e, n);
	int_list(ls, sizeof ls, st, n);
	snprintf(attr, sizeof attr,
	         "[{\"name\":\"begin\",\"value\":%s},{\"name\":\"end\",\"value\":%s},"
	         "{\"name\":\"strides\",\"value\":%s},{\"name\":\"begin_mask\",\"value\":%lld},"
	         "{\"name\":\"end_mask\",\"value\":%lld},{\"name\":\"shrink_axis_mask\","
	         "\"value\":%lld},{\"name\":\"ellipsis_mask\",\"value\":%lld},"
	         "{\"name\":\"new_axis_mask\",\"value\":%lld}]",
	         lb, le, ls, (long long)bm, (long long)em, (long long)sm, (long long)elm,
	         (long long)nam);
	Opnd in[1] = {V(a)};
	add_op(g, "StridedSlice", attr, 1, in, v->dt, r, s);
}

/* One random op appended to g (may add fresh inputs). */
static void
gen_op(Graph *g)
{
	static const char *const un_any[] = {"Neg",    "Abs", "Exp", "Tanh", "Erf",
	                                     "Square", "Sin", "Cos", "Atan", "Asinh"};
	/* Asin/ACos/Acosh inputs are drawn in their domain (interp.c); Expm1
	 * takes exact inputs too: on a float16 sum kept in float32 by the
	 * kernel but rounded by the interpreter, e^x amplifies the difference
	 * past the 1e-2 tolerance (seed 1920) */
	static const char *const un_in[] = {"Log",  "Sqrt", "Rsqrt", "Reciprocal", "Floor", "Round",
	                                    "Sign", "Asin", "ACos",  "Acosh",      "Expm1"};
	enum {
		NUN_ANY = sizeof un_any / sizeof un_any[0],
		NUN_IN = sizeof un_in / sizeof un_in[0]
	};
	static const char *const bin_f[] = {"Add", "Sub", "Mul", "Maximum", "Minimum"};
	static const char *const bin_i[] = {"Add", "Sub", "Mul", "Maximum", "Minimum"};
	static const char *const cmp[] = {"Greater",   "GreaterEqual", "Less",
	                                  "LessEqual", "Equal",        "NotEqual"};
	static const char *const red[] = {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"};
	char attr[512];
	int k = rnd(100), a, dt;
	Opnd in[3];

	if (chance(9)) { /* Argmax/Argmin, CumSum/CumProd, Pool2D */
		gen_op_b(g);
		return;
	}
	if (k < 12) { /* unary on anything float */
		dt = float_dt();
		a = pick(g, dt, false);
		if (a < 0)
			a = rand_input(g, dt);
		in[0] = V(a);
		add_op(g, un_any[rnd(NUN_ANY)], NULL, 1, in, dt, 0, NULL);
	} else if (k < 20) { /* unary with a restricted domain: on an input */
		dt = float_dt();
		a = chance(50) ? pick(g, dt, true) : -1;
		if (a < 0)
			a = rand_input(g, dt);
		in[0] = V(a);
		const char *n = un_in[rnd(NUN_IN)];
		add_op(g, n, NULL, 1, in, dt, 0, NULL);
	} else if (k < 23) { /* Sign/Abs/Neg/Square on int32 */
		static const char *const un_i[] = {"Neg", "Abs", "Sign", "Square"};
		a = pick(g, DT_I32, false);
		if (a < 0)
			a = rand_input(g, DT_I32);
		in[0] = V(a);
		add_op(g, un_i[rnd(4)], NULL, 1, in, DT_I32, 0, NULL);
	} else if (k < 40) { /* binary float or int */
		dt = chance(25) ? DT_I32 : float_dt();
		a = pick(g, dt, false);
		if (a < 0)
			a = rand_input(g, dt);
		in[0] = V(a);
		if (chance(15)) { /* AddN: one dynamic input of 2-3 broadcast tensors */
			int np = 2 + rnd(2);
			for (int i = 1; i < np; i++)
				in[i] = partner(g, a, dt, false, false);
			int o = add_op(g, "AddN", NULL, np, in, dt, 0, NULL);
			if (o >= 0)
				g->ops[o].dyn = true;
			return;
		}
		in[1] = partner(g, a, dt, true, false);
		if (in[1].v < 0 && chance(40)) { /* constant first: Sub(2, x) */
			Opnd t = in[0];
			in[0] = in[1];
			in[1] = t;
		}
		if (in[0].v < 0 && in[1].v < 0)
			return;
		if (in[0].v < 0) { /* add_op takes the shape from in[0] */
			Val *b = &g->v[in[1].v];
			add_op(g, dt == DT_I32 ? bin_i[rnd(5)] : bin_f[rnd(5)], NULL, 2, in, dt,
			       b->rank, b->shape);
		} else
			add_op(g, dt == DT_I32 ? bin_i[rnd(5)] : bin_f[rnd(5)], NULL, 2, in, dt, 0,
			       NULL);
	} else if (k < 45) { /* division and Pow: divisor/operands fresh inputs */
		dt = chance(30) ? DT_I32 : float_dt();
		a = pick(g, dt, dt != DT_I32);
		if (a < 0)
			a = rand_input(g, dt);
		in[0] = V(a);
		in[1] = partner(g, a, dt, false, true);
		const char *n = dt == DT_I32 ? "Div"
		                : chance(50) ? "RealDiv"
		                : chance(50) ? "Pow"
		                             : "Atan2";
		add_op(g, n, NULL, 2, in, dt, 0, NULL);
	} else if (k < 53) { /* comparison */
		dt = chance(30) ? DT_I32 : float_dt();
		a = pick(g, dt, false);
		if (a < 0)
			a = rand_input(g, dt);
		in[0] = V(a);
		in[1] = partner(g, a, dt, true, false);
		add_op(g, cmp[rnd(6)], NULL, 2, in, DT_BOOL, 0, NULL);
	} else if (k < 58) { /* logical */
		a = pick(g, DT_BOOL, false);
		if (a < 0)
			a = rand_input(g, DT_BOOL);
		in[0] = V(a);
		if (chance(25))
			add_op(g, "LogicalNot", NULL, 1, in, DT_BOOL, 0, NULL);
		else {
			in[1] = partner(g, a, DT_BOOL, false, false);
			add_op(g, chance(50) ? "LogicalAnd" : "LogicalOr", NULL, 2, in, DT_BOOL, 0,
			       NULL);
		}
	} else if (k < 64) { /* Select(cond, x, y) */
		int c = pick(g, DT_BOOL, false);
		if (c < 0)
			c = rand_input(g, DT_BOOL);
		dt = chance(25) ? DT_I32 : float_dt();
		in[0] = V(c);
		in[1] = partner(g, c, dt, false, false);
		in[2] = partner(g, c, dt, true, false);
		add_op(g, "Select", NULL, 3, in, dt, 0, NULL);
	} else if (k < 72) { /* Cast */
		int to = rnd(NDT);
		int from = rnd(NDT);
		if (from == to)
			to = (to + 1) % NDT;
		bool need_input = is_fl(from) && (to == DT_I32 || to == DT_BOOL);
		a = pick(g, from, need_input);
		if (a < 0)
			a = rand_input(g, from);
		in[0] = V(a);
		add_op(g, "Cast", chance(50) ? NULL : "null", 1, in, to, g->v[a].rank,
		       g->v[a].shape);
		if (chance(50)) {
			Op *op = &g->ops[g->nops - 1];
			snprintf(op->attr, sizeof op->attr,
			         "[{\"name\":\"dst_type\",\"value\":\"%s\"}]", dtn[to]);
		}
	} else if (k < 82) { /* reduction */
		int idt = dt = chance(25) ? DT_I32 : float_dt();
		if (chance(15)) { /* of bool, in the declared dtype: count, any, all */
			idt = DT_BOOL;
			dt = chance(40) ? DT_I32 : chance(50) ? DT_BOOL : float_dt();
		}
		a = pick(g, idt, false);
		if (a < 0)
			a = rand_input(g, idt);
		Val *v = &g->v[a];
		int64_t ax[4], s[4];
		int n = 0, r = 0;
		bool keep = chance(50), rd[4] = {false};
		if (chance(10))
			n = 0; /* empty: all */
		else
			for (int d = 0; d < v->rank; d++)
				if (chance(50) || (d == v->rank - 1 && n == 0)) {
					ax[n++] = chance(30) ? d - v->rank : d;
					rd[d] = true;
				}
		for (int d = 0; d < v->rank; d++)
			if (!(rd[d] || n == 0))
				s[r++] = v->shape[d];
			else if (keep)
				s[r++] = 1;
		char l[64];
		int_list(l, sizeof l, ax, n);
		if (n == 1 && chance(30))
			snprintf(l, sizeof l, "%lld", (long long)ax[0]);
		snprintf(attr, sizeof attr,
		         "[{\"name\":\"axis\",\"value\":%s},{\"name\":\"keep_dims\",\"value\":%s}]",
		         l, keep ? "true" : "false");
		const char *nm = red[rnd(4)];
		if (!strcmp(nm, "ReduceProd") && numel(v) > 64)
			nm = "ReduceSum";
		in[0] = V(a);
		add_op(g, nm, attr, 1, in, dt, r, s);
	} else if (k < 97) { /* layout */
		a = pick(g, -1, false);
		if (a < 0)
			a = rand_input(g, float_dt());
		Val *v = &g->v[a];
		int64_t s[4], l[4];
		int r = 0, which = rnd(8);
		in[0] = V(a);
		if (which == 0) { /* Reshape to a factorisation of numel */
			int64_t n = numel(v), rest = n;
			int want = 1 + rnd(4);
			for (r = 0; r < want - 1; r++) {
				int64_t f = 1;
				for (int t = 0; t < 6; t++) {
					int64_t c = 1 + rnd(8);
					if (rest % c == 0) {
						f = c;
						break;
					}
				}
				s[r] = f;
				rest /= f;
			}
			s[r++] = rest;
			char sl[64];
			int_list(sl, sizeof sl, s, r);
			snprintf(attr, sizeof attr, "[{\"name\":\"shape\",\"value\":%s}]", sl);
			add_op(g, "Reshape", chance(50) ? attr : NULL, 1, in, v->dt, r, s);
		} else if (which == 1) { /* BroadcastTo */
			int lead = v->rank < 4 && chance(40) ? 1 : 0;
			int64_t n = 1;
			if (lead)
				s[r++] = 1 + rnd(3);
			for (int d = 0; d < v->rank; d++)
				s[r++] = v->shape[d] == 1 && chance(60) ? 2 + rnd(4) : v->shape[d];
			for (int d = 0; d < r; d++)
				n *= s[d];
			if (n > CAP)
				return;
			char sl[64];
			int_list(sl, sizeof sl, s, r);
			snprintf(attr, sizeof attr, "[{\"name\":\"shape\",\"value\":%s}]", sl);
			add_op(g, "BroadcastTo", chance(50) ? attr : NULL, 1, in, v->dt, r, s);
		} else if (which == 2) { /* Transpose */
			if (v->rank < 2)
				return;
			for (int d = 0; d < v->rank; d++)
				l[d] = d;
			for (int d = v->rank - 1; d > 0; d--) {
				int j = rnd(d + 1);
				int64_t t = l[d];
				l[d] = l[j];
				l[j] = t;
			}
			for (int d = 0; d < v->rank; d++)
				s[d] = v->shape[l[d]];
			char sl[64];
			int_list(sl, sizeof sl, l, v->rank);
			snprintf(attr, sizeof attr, "[{\"name\":\"perm\",\"value\":%s}]", sl);
			add_op(g, "Transpose", attr, 1, in, v->dt, v->rank, s);
		} else if (which == 3) { /* ExpandDims */
			if (v->rank >= 4)
				return;
			int axn = rnd(v->rank + 1); /* insert position */
			for (int d = 0, j = 0; d <= v->rank; d++)
				s[d] = d == axn ? 1 : v->shape[j++];
			snprintf(attr, sizeof attr, "[{\"name\":\"axis\",\"value\":%d}]",
			         chance(30) ? axn - (v->rank + 1) : axn);
			add_op(g, "ExpandDims", attr, 1, in, v->dt, v->rank + 1, s);
		} else if (which == 5) { /* StridedSlice, positive strides, masks */
			int64_t b[4], e[4], st[4], bm = 0, em = 0, sm = 0;
			int nb = 1 + rnd(v->rank);
			for (int d = 0; d < nb; d++) {
				int64_t dim = v->shape[d], lo = rnd((int)dim), hi;
				hi = lo + 1 + rnd((int)(dim - lo));
				st[d] = 1 + rnd(3);
				if (v->rank > 1 && r + (v->rank - d) > 1 && chance(15)) {
					sm |= 1 << d; /* shrink: take index lo, drop the dim */
					b[d] = chance(40) ? lo - dim : lo;
					e[d] = lo + 1;
					st[d] = 1;
					continue;
				}
				b[d] = chance(30) ? lo - dim : lo;
				if (chance(20)) {
					bm |= 1 << d;
					b[d] = chance(50) ? 0 : dim - 1; /* ignored */
					lo = 0;
				}
				e[d] = hi < dim && chance(30) ? hi - dim : hi;
				if (chance(20)) {
					em |= 1 << d;
					e[d] = 0; /* ignored */
					hi = dim;
				}
				s[r++] = (hi - lo + st[d] - 1) / st[d];
			}
			for (int d = nb; d < v->rank; d++)
				s[r++] = v->shape[d];
			char lb[64], le[64], ls[64];
			int_list(lb, sizeof lb, b, nb);
			int_list(le, sizeof le, e, nb);
			int_list(ls, sizeof ls, st, nb);
			snprintf(
			    attr, sizeof attr,
			    "[{\"name\":\"begin\",\"value\":%s},{\"name\":\"end\",\"value\":%s},"
			    "{\"name\":\"strides\",\"value\":%s},{\"name\":\"begin_mask\","
			    "\"value\":%lld},{\"name\":\"end_mask\",\"value\":%lld},"
			    "{\"name\":\"shrink_axis_mask\",\"value\":%lld},"
			    "{\"name\":\"ellipsis_mask\",\"value\":0},"
			    "{\"name\":\"new_axis_mask\",\"value\":0}]",
			    lb, le, ls, (long long)bm, (long long)em, (long long)sm);
			add_op(g, "StridedSlice", attr, 1, in, v->dt, r, s);
		} else if (which == 7) { /* StridedSlice: any stride, ellipsis, new axes */
			gen_slice(g, a);
		} else if (which == 6) { /* Concat of 2-3 pieces along one axis */
			int ax = rnd(v->rank), np = 2 + rnd(2);
			int64_t tot = v->shape[ax], other = numel(v) / v->shape[ax];
			for (int i = 1; i < np; i++) {
				int64_t sh[4], len = 1 + rnd(4);
				memcpy(sh, v->shape, sizeof sh);
				sh[ax] = len;
				int b = -1;
				for (int t = 0; t < g->nv && b < 0; t++) /* an existing fit? */
					if (t != a && g->v[t].dt == v->dt &&
					    g->v[t].rank == v->rank && chance(50)) {
						bool fit = true;
						for (int d = 0; d < v->rank; d++)
							fit &= d == ax ||
							       g->v[t].shape[d] == v->shape[d];
						if (fit)
							b = t;
					}
				if (b < 0)
					b = new_input(g, v->dt, v->rank, sh);
				if (b < 0)
					return;
				v = &g->v[a]; /* g->v did not move, but keep it obvious */
				in[i] = V(b);
				tot += g->v[b].shape[ax];
			}
			if (tot * other > CAP)
				return;
			memcpy(s, v->shape, sizeof s);
			s[ax] = tot;
			snprintf(attr, sizeof attr, "[{\"name\":\"axis\",\"value\":%d}]",
			         chance(30) ? ax - v->rank : ax);
			int o = add_op(g, "Concat", attr, np, in, v->dt, v->rank, s);
			if (o >= 0)
				g->ops[o].dyn = true;
		} else { /* Tile */
			int64_t n = 1;
			for (int d = 0; d < v->rank; d++) {
				l[d] = 1 + rnd(3);
				s[d] = v->shape[d] * l[d];
				n *= s[d];
			}
			if (n > CAP)
				return;
			char sl[64];
			int_list(sl, sizeof sl, l, v->rank);
			snprintf(attr, sizeof attr, "[{\"name\":\"multiples\",\"value\":%s}]", sl);
			add_op(g, "Tile", attr, 1, in, v->dt, v->rank, s);
		}
	} else if (chance(30)) { /* BatchMatMul, batch broadcasting */
		int64_t B = 1 + rnd(3), M = 1 + rnd(6), K = 1 + rnd(6), N = 1 + rnd(6);
		int64_t sa[3], sb[3], so[3] = {B, M, N};
		bool ta = chance(40), tb = chance(40), bb = chance(30);
		sa[0] = B;
		sa[1] = ta ? K : M;
		sa[2] = ta ? M : K;
		sb[0] = bb ? 1 : B;
		sb[1] = tb ? N : K;
		sb[2] = tb ? K : N;
		in[0] = V(new_input(g, DT_F32, 3, sa));
		in[1] = V(new_input(g, DT_F32, 3, sb));
		snprintf(attr, sizeof attr,
		         "[{\"name\":\"transpose_a\",\"value\":%s},{\"name\":\"transpose_b\","
		         "\"value\":%s},{\"name\":\"dst_type\",\"value\":\"float32\"}]",
		         ta ? "true" : "false", tb ? "true" : "false");
		add_op(g, "BatchMatMul", attr, 2, in, DT_F32, 3, so);
	} else { /* MatMul on float32 */
		int64_t M = 1 + rnd(9), K = 1 + rnd(9), N = 1 + rnd(9), sa[2], sb[2],
		        so[2] = {M, N};
		bool ta = chance(40), tb = chance(40);
		sa[0] = ta ? K : M;
		sa[1] = ta ? M : K;
		sb[0] = tb ? N : K;
		sb[1] = tb ? K : N;
		in[0] = V(new_input(g, DT_F32, 2, sa));
		in[1] = V(new_input(g, DT_F32, 2, sb));
		snprintf(attr, sizeof attr,
		         "[{\"name\":\"transpose_a\",\"value\":%s},{\"name\":\"transpose_b\","
		         "\"value\":%s},{\"name\":\"dst_type\",\"value\":\"float32\"}]",
		         ta ? "true" : "false", tb ? "true" : "false");
		add_op(g, "MatMul", attr, 2, in, DT_F32, 2, so);
	}
}

static void
gen_graph(Graph *g, uint64_t seed)
{
	memset(g, 0, sizeof *g);
	rng = seed * 0x2545f4914f6cdd1dull + 12345;
	rand_input(g, chance(30) ? DT_I32 : float_dt());
	int want = 2 + rnd(9);
	for (int t = 0; t < 40 && g->nops < want; t++)
		gen_op(g);
	if (!g->nops) {
		Opnd in[1] = {V(0)};
		add_op(g, "Abs", NULL, 1, in, g->v[0].dt, 0, NULL);
	}
	g->outs[g->nouts++] = g->ops[g->nops - 1].out;
	/* more outputs, sinks first (values no op reads), so fewer ops are dead */
	bool used[MAXV] = {false};
	for (int o = 0; o < g->nops; o++)
		for (int i = 0; i < g->ops[o].nin; i++)
			if (g->ops[o].in[i].v >= 0)
				used[g->ops[o].in[i].v] = true;
	int extra = 1 + rnd(3);
	for (int t = 0; t < 12 && extra > 0; t++) {
		int v = chance(5) ? 0 : g->ops[rnd(g->nops)].out;
		if (used[v] && t < 8)
			continue;
		bool dup = false;
		for (int i = 0; i < g->nouts; i++)
			dup |= g->outs[i] == v;
		if (!dup) {
			g->outs[g->nouts++] = v;
			extra--;
		}
	}
}

/* ---- JSON ------------------------------------------------------------------ */
typedef struct Buf {
	char *s;
	size_t n, cap;
} Buf;

static void __attribute__((format(printf, 2, 3))) bp(Buf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int m = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
		va_end(ap);
		if (b->n + (size_t)m < b->cap) {
			b->n += (size_t)m;
			return;
		}
		b->cap = b->cap * 2 + (size_t)m + 64;
		b->s = realloc(b->s, b->cap);
	}
}

static void
desc(Buf *b, const Graph *g, int v)
{
	const Val *x = &g->v[v];
	char sl[64];
	int_list(sl, sizeof sl, x->shape, x->rank);
	bp(b,
	   "{\"data_type\":\"%s\",\"format\":\"DefaultFormat\",\"shape\":%s,"
	   "\"tensor_name\":\"%s%d\"}",
	   dtn[x->dt], sl, x->input ? "in" : "t", v);
}

/* Live values: reachable from the outputs. */
static void
liveness(const Graph *g, bool *live)
{
	memset(live, 0, MAXV);
	for (int i = 0; i < g->nouts; i++)
		live[g->outs[i]] = true;
	for (int o = g->nops - 1; o >= 0; o--) {
		const Op *op = &g->ops[o];
		if (!live[op->out] || g->v[op->out].input)
			continue;
		for (int i = 0; i < op->nin; i++)
			if (op->in[i].v >= 0)
				live[op->in[i].v] = true;
	}
}

static char *
to_json(const Graph *g, size_t *len)
{
	Buf b = {malloc(4096), 0, 4096};
	bool live[MAXV];
	int nin = 0, cidx = 0;
	liveness(g, live);
	bp(&b, "{\"composite\":true,\"op\":\"Fused_graphfuzz\",\"process\":\"cpu\","
	       "\"input_desc\":[");
	for (int v = 0; v < g->nv; v++)
		if (live[v] && g->v[v].input) {
			bp(&b, "%s[", nin++ ? "," : "");
			desc(&b, g, v);
			bp(&b, "]");
		}
	bp(&b, "],\"output_desc\":[");
	for (int i = 0; i < g->nouts; i++) {
		bp(&b, "%s", i ? "," : "");
		desc(&b, g, g->outs[i]);
	}
	bp(&b, "],\"op_desc\":[");
	int nops = 0;
	for (int o = 0; o < g->nops; o++) {
		const Op *op = &g->ops[o];
		if (!live[op->out] || g->v[op->out].input)
			continue;
		bp(&b, "%s{\"attr\":%s,\"name\":\"%s\",\"input_desc\":[", nops++ ? "," : "",
		   op->attr, op->name);
		for (int i = 0; i < op->nin; i++) {
			bp(&b, "%s%s", i ? "," : "", op->dyn && i ? "" : "[");
			if (op->in[i].v >= 0)
				desc(&b, g, op->in[i].v);
			else
				bp(&b,
				   "{\"data_type\":\"%s\",\"format\":\"DefaultFormat\",\"shape\":["
				   "1],"
				   "\"tensor_name\":\"c%d\",\"value\":%s}",
				   dtn[op->in[i].cdt], cidx++, op->in[i].cval);
			if (!op->dyn || i == op->nin - 1)
				bp(&b, "]");
		}
		bp(&b, "],\"output_desc\":[");
		desc(&b, g, op->out);
		bp(&b, "]}");
	}
	bp(&b, "]}");
	*len = b.n;
	return b.s;
}

/* ---- compile, run, compare ------------------------------------------------ */
static KcTarget host;
static bool verbose;

enum { R_PASS, R_FAIL, R_PARSE };

static int
dt_of(const char *s)
{
	for (int i = 0; i < NDT; i++)
		if (!strcmp(dtn[i], s))
			return i;
	return -1;
}

static double
as_f64(int dt, const void *p, int64_t i)
{
	switch (dt) {
	case DT_F32: return ((const float *)p)[i];
	case DT_F16: {
		unsigned h = ((const uint16_t *)p)[i], e = (h >> 10) & 31, m = h & 1023;
		double v = e == 0    ? ldexp(m, -24)
		           : e == 31 ? (m ? NAN : INFINITY)
		                     : ldexp(m + 1024, (int)e - 25);
		return (h & 0x8000) ? -v : v;
	}
	case DT_BF16: {
		uint32_t w = (uint32_t)((const uint16_t *)p)[i] << 16;
		float f;
		memcpy(&f, &w, 4);
		return f;
	}
	case DT_I32: return ((const int32_t *)p)[i];
	default: return ((const uint8_t *)p)[i];
	}
}

/* Runs one graph; msg gets the reason of a failure. */
static int
check(const char *json, size_t len, uint64_t seed, char *msg, size_t cap)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	KcArtifact art = {0};
	void *dl = NULL;
	int res = R_FAIL, n = 0, nin = 0;
	void *in0[32] = {0}, *ka[32] = {0}, *kb[32] = {0}, *ra[32] = {0};
	uint8_t *tie[32] = {0};
	KcArgInfo ai[32];
	int64_t ne[32];

	msg[0] = 0;
	if (kc_parse(c, json, len, &lim, &g, &err) != KC_OK) {
		snprintf(msg, cap, "kc_parse refused it: %s at %s", err.msg, err.where);
		res = R_PARSE;
		goto done;
	}
	KcSchedule *s = kc_schedule_default(c, g, &host);
	KcCompileOptions o = {0};
	if (kc_compile(c, g, &host, s, &o, &art, &err) != KC_OK) {
		snprintf(msg, cap, "kc_compile failed: %s at %s", err.msg, err.where);
		goto done;
	}
	KcsKernelFn fn = t_kernel_load(art.object, art.object_len, art.symbol, &dl, msg, cap);
	if (!fn)
		goto done;
	n = kc_graph_nargs(g);
	if (n > 32) {
		snprintf(msg, cap, "too many args");
		goto done;
	}
	for (int i = 0; i < n; i++) {
		kc_graph_arg(g, i, &ai[i]);
		ne[i] = 1;
		for (int d = 0; d < ai[i].rank; d++)
			ne[i] *= ai[i].shape[d];
		int dt = dt_of(ai[i].dtype);
		size_t bytes = (size_t)ne[i] * (dt < 0 ? 8 : dtb[dt]) + 8;
		in0[i] = calloc(1, bytes);
		ka[i] = malloc(bytes);
		kb[i] = malloc(bytes);
		ra[i] = calloc(1, bytes);
		if (ai[i].is_output) {
			memset(ka[i], 0xa5, bytes); /* outputs hold garbage on entry */
			memset(kb[i], 0x5a, bytes);
			tie[i - nin] = calloc((size_t)ne[i] + 1, 1);
		} else
			nin++;
	}
	kc_interp_random_inputs(c, g, seed, in0);
	for (int i = 0; i < nin; i++) {
		size_t bytes = (size_t)ne[i] * dtb[dt_of(ai[i].dtype)];
		memcpy(ka[i], in0[i], bytes);
		memcpy(kb[i], in0[i], bytes);
		memcpy(ra[i], in0[i], bytes);
	}
	int32_t k1 = fn(NULL, ka, NULL), k2 = fn(&t_pool, kb, NULL);
	KcStatus ist = kc_interp_ties(c, g, ra, (size_t)1 << 28, tie, &err);
	if (k1 || k2 || ist != KC_OK) {
		snprintf(msg, cap, "kernel rc %d (serial) %d (3 threads), interp %d %s", k1, k2,
		         (int)ist, ist ? err.msg : "");
		goto done;
	}
	res = R_PASS;
	for (int i = nin; i < n && res == R_PASS; i++) {
		int dt = dt_of(ai[i].dtype);
		bool fl = is_fl(dt);
		double tol = kc_interp_half_upstream(c, g, i - nin) ? 1e-2 : 1e-4;
		for (int run = 0; run < 2 && res == R_PASS; run++) {
			void *k = run ? kb[i] : ka[i];
			for (int64_t e = 0; e < ne[i]; e++) {
				double x = as_f64(dt, k, e), y = as_f64(dt, ra[i], e);
				bool same = x == y || (isnan(x) && isnan(y)) ||
				            (fl && fabs(x - y) <= tol + tol * fabs(y));
				if (!same && !tie[i - nin][e]) {
					snprintf(
					    msg, cap,
					    "output %d (%s, %s rt): element %lld got %.9g want "
					    "%.9g",
					    i - nin, ai[i].dtype, run ? "3-thread" : "NULL",
					    (long long)e, x, y);
					res = R_FAIL;
					break;
				}
			}
		}
	}
done:
	for (int i = 0; i < n; i++) {
		free(in0[i]);
		free(ka[i]);
		free(kb[i]);
		free(ra[i]);
	}
	for (int i = 0; i < 32; i++)
		free(tie[i]);
	if (dl)
		dlclose(dl);
	kc_artifact_free(&art);
	compile_ctx_free(c);
	return res;
}

static int
check_graph(const Graph *g, uint64_t seed, char *msg, size_t cap)
{
	size_t len;
	char *j = to_json(g, &len);
	int r = check(j, len, seed, msg, cap);
	free(j);
	return r;
}

/* Greedy shrink of a failing graph: drop outputs, then cut ops into fresh
 * kernel inputs (their upstream ops die), while it still fails the same way
 * (a parse refusal stays a parse refusal). */
static void
shrink(Graph *g, uint64_t seed, int kind)
{
	char msg[512];
	bool progress = true;
	while (progress) {
		progress = false;
		for (int i = 0; i < g->nouts && g->nouts > 1; i++) {
			Graph t = *g;
			memmove(&t.outs[i], &t.outs[i + 1],
			        sizeof(int) * (size_t)(t.nouts - i - 1));
			t.nouts--;
			if (check_graph(&t, seed, msg, sizeof msg) == kind) {
				*g = t;
				progress = true;
				i--;
			}
		}
		bool live[MAXV];
		liveness(g, live);
		for (int o = 0; o < g->nops; o++) {
			int v = g->ops[o].out;
			if (!live[v] || g->v[v].input)
				continue;
			Graph t = *g;
			bool isout = false;
			for (int i = 0; i < t.nouts; i++)
				isout |= t.outs[i] == v;
			if (isout)
				continue; /* an output must stay computed */
			t.v[v].input = true;
			if (check_graph(&t, seed, msg, sizeof msg) == kind) {
				*g = t;
				progress = true;
				liveness(g, live);
			}
		}
	}
}

/* ---- driver -------------------------------------------------------------- */
static uint64_t opt_seed = 1;
static int opt_count = 500;

static void
fuzz(void)
{
	int pass = 0, fail = 0, parse = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	printf("# graphfuzz: --seed %llu --count %d\n", (unsigned long long)opt_seed, opt_count);
	for (int i = 0; i < opt_count; i++) {
		uint64_t seed = opt_seed + (uint64_t)i;
		Graph g;
		char msg[512];
		gen_graph(&g, seed);
		int r = check_graph(&g, seed, msg, sizeof msg);
		if (verbose) {
			size_t len;
			char *j = to_json(&g, &len);
			printf("# seed %llu: %s %s\n", (unsigned long long)seed,
			       r == R_PASS ? "pass" : "FAIL", j);
			free(j);
		}
		if (r == R_PASS) {
			pass++;
			continue;
		}
		r == R_PARSE ? parse++ : fail++;
		shrink(&g, seed, r);
		size_t len;
		char *j = to_json(&g, &len);
		check_graph(&g, seed, msg, sizeof msg);
		OKF(0, "graph seed %llu (replay: --seed %llu --count 1): %s%s\n# reproducer: %s",
		    (unsigned long long)seed, (unsigned long long)seed,
		    r == R_PARSE ? "generated graph refused by the parser: " : "", msg, j);
		free(j);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("# graphfuzz: %d graphs, %d pass, %d mismatch/compile failures, %d parse refusals, "
	       "%.1f s\n",
	       opt_count, pass, fail, parse,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	OKF(pass == opt_count, "all %d random graphs match the interpreter (%d do)", opt_count,
	    pass);
}

int
main(int argc, char **argv)
{
	const char *env = getenv("KC_GRAPHFUZZ_SEED");
	if (env && !strcmp(env, "random"))
		opt_seed = (uint64_t)time(NULL);
	else if (env && *env)
		opt_seed = strtoull(env, NULL, 10);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			opt_seed = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--count") && i + 1 < argc)
			opt_count = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--max-elements") && i + 1 < argc)
			CAP = strtoll(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--verbose"))
			verbose = true;
		else {
			fprintf(stderr,
			        "usage: %s [--seed N] [--count N] [--max-elements N] [--verbose]\n",
			        argv[0]);
			return 2;
		}
	}
	kc_compiler_init();
	KcErr err = {0};
	if (kc_target_host(&host, &err) != KC_OK) {
		fprintf(stderr, "no host target: %s\n", err.msg);
		return 1;
	}
	t_sub("fuzz", fuzz);
	return t_done();
}
