/* infer.c - type and shape inference of one op (parse_infer): the result's
 * dtype and shape from its operands and attrs (numpy broadcasting, the
 * ops.def dtype rules, each structural op's own rules), checked against
 * what the file declares. Called by parse.c for each op in document order;
 * every refusal names the attr or input at fault.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "parse.h"

/* Make the dtypes of a and b agree: equal, or one is a scalar constant that
 * takes the other's dtype. */
static KcStatus
unify(Parser *p, IrValue *a, IrValue *b, const char *where)
{
	if (a->dtype == b->dtype)
		return KC_OK;
	IrValue *c = NULL, *t = NULL;
	if (a->kind == IRV_CONST && b->kind != IRV_CONST) {
		c = a;
		t = b;
	} else if (b->kind == IRV_CONST) {
		c = b;
		t = a;
	}
	if (!c)
		return kc_fail(p->err, KC_BAD_GRAPH, where, "operand dtypes differ: %s and %s",
		               kc_dtype_info[a->dtype].name, kc_dtype_info[b->dtype].name);
	double x = parse_const_num(c);
	if (!parse_const_store(c, t->dtype, x))
		return kc_fail(p->err, KC_BAD_GRAPH, where,
		               "constant %.17g is not representable as %s", x,
		               kc_dtype_info[t->dtype].name);
	return KC_OK;
}

/* numpy broadcasting of in[0..n) into out's rank/shape. */
static KcStatus
broadcast(Parser *p, IrValue **in, int n, IrValue *out, const char *where)
{
	int rank = 0;
	for (int k = 0; k < n; k++)
		if (in[k]->rank > rank)
			rank = in[k]->rank;
	out->rank = rank;
	for (int d = 0; d < rank; d++) {
		int64_t dim = 1;
		for (int k = 0; k < n; k++) {
			int off = d - (rank - in[k]->rank);
			if (off < 0)
				continue;
			int64_t x = in[k]->shape[off];
			if (x == 1 || x == dim)
				continue;
			if (dim != 1)
				return kc_fail(p->err, KC_BAD_SHAPE, where,
				               "operand shapes do not broadcast (dim %d: %" PRId64
				               " vs %" PRId64 ")",
				               d, dim, x);
			dim = x;
		}
		out->shape[d] = dim;
	}
	return KC_OK;
}

/* An int list attr (a bare int is a list of one). false if it is not one. */
static bool
int_list(const cJSON *v, int64_t *out, int *n)
{
	*n = 0;
	if (cJSON_IsNumber(v)) {
		if (v->valuedouble != trunc(v->valuedouble) || fabs(v->valuedouble) > 0x1p62)
			return false;
		out[(*n)++] = (int64_t)v->valuedouble;
		return true;
	}
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > KC_MAX_RANK)
		return false;
	for (const cJSON *e = v->child; e; e = e->next) {
		if (!cJSON_IsNumber(e) || e->valuedouble != trunc(e->valuedouble) ||
		    fabs(e->valuedouble) > 0x1p62)
			return false;
		out[(*n)++] = (int64_t)e->valuedouble;
	}
	return true;
}

/* An int attr (absent: dflt); false if it is not an int. */
static bool
int_attr(const cJSON *v, int64_t dflt, int64_t *out)
{
	int64_t l[KC_MAX_RANK];
	int n;
	*out = dflt;
	if (!v || cJSON_IsNull(v))
		return true;
	if (!int_list(v, l, &n) || n != 1)
		return false;
	*out = l[0];
	return true;
}

static void
set_shape(IrValue *out, const int64_t *shape, int rank)
{
	out->rank = rank > 0 ? rank : 1;
	out->shape[0] = 1;
	for (int d = 0; d < rank; d++)
		out->shape[d] = shape[d];
}

/* Reduce*: axis (int | list, negative from the end, [] or absent = all),
 * keep_dims (bool). A bool input reduces in the declared output dtype, as
 * numpy does with dtype=: ReduceSum to int32 counts, to bool is any;
 * ReduceMax any, ReduceMin and ReduceProd all. */
static KcStatus
infer_reduce(Parser *p, IrNode *nd, const IrValue *decl, const OpAttrs *oa, const char *w_in)
{
	IrValue *in = nd->in[0], *out = nd->out[0];
	IrAttrs *at = &nd->attrs;
	const char *w = w_in;
	const cJSON *ax = parse_attr_get(oa, "axis", &w);
	int64_t l[KC_MAX_RANK], shape[KC_MAX_RANK];
	bool red[KC_MAX_RANK] = {false};
	int n = 0, r = 0;

	if (ax && !cJSON_IsNull(ax) && !int_list(ax, l, &n))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "axis must be an int or a list of ints");
	for (int k = 0; k < n; k++) {
		if (l[k] < -in->rank || l[k] >= in->rank)
			return kc_fail(p->err, KC_BAD_GRAPH, w,
			               "axis %" PRId64 " is out of range for rank %d", l[k],
			               in->rank);
		red[l[k] < 0 ? l[k] + in->rank : l[k]] = true;
	}
	for (int d = 0; d < in->rank; d++)
		if (red[d] || n == 0)
			at->axis[at->naxis++] = d;
	const cJSON *kd = parse_attr_get(oa, "keep_dims", &w);
	if (kd && !cJSON_IsNull(kd)) {
		if (!cJSON_IsBool(kd) && !cJSON_IsNumber(kd))
			return kc_fail(p->err, KC_BAD_GRAPH, w, "keep_dims must be a bool");
		at->keep_dims = cJSON_IsBool(kd) ? cJSON_IsTrue(kd) : kd->valuedouble != 0;
	}
	for (int d = 0; d < in->rank; d++) {
		bool rd = red[d] || n == 0;
		if (!rd)
			shape[r++] = in->shape[d];
		else if (at->keep_dims)
			shape[r++] = 1;
	}
	out->dtype = in->dtype == KC_DT_BOOL ? decl->dtype : in->dtype;
	set_shape(out, shape, r);
	return KC_OK;
}

/* StridedSlice (TF/numpy semantics): begin, end, strides are lists of one
 * length, the spec; masks are ints over spec entries. Entry i is, in this
 * order of precedence: the ellipsis (the first ellipsis_mask bit: as many
 * whole input dims as the other entries leave), a new axis (new_axis_mask:
 * a size-1 output dim that reads no input dim), a shrunk index
 * (shrink_axis_mask: the input dim is read at begin, negative from the end,
 * and dropped; shrinking a new axis or the ellipsis does nothing, as in
 * TF), or a range begin:end:stride (begin_mask/end_mask: from the
 * first/to the last element in the stride's direction; negative bounds
 * count from the end; bounds are clamped). Input dims after the spec are
 * whole. A zero stride and an empty range are refused (shapes have no 0). */
static KcStatus
infer_slice(Parser *p, IrNode *nd, const OpAttrs *oa, const char *w_in)
{
	IrValue *in = nd->in[0], *out = nd->out[0];
	IrAttrs *at = &nd->attrs;
	const char *wb = w_in, *we = w_in, *ws = w_in, *w;
	const cJSON *jb = parse_attr_get(oa, "begin", &wb), *je = parse_attr_get(oa, "end", &we);
	const cJSON *js = parse_attr_get(oa, "strides", &ws);
	int64_t b[KC_MAX_RANK], e[KC_MAX_RANK], st[KC_MAX_RANK], shape[KC_MAX_RANK];
	int nb = 0, ne = 0, ns = 0, r = 0, d = 0, ell = -1, nreal = 0;
	int64_t mask[5];
	static const char *const mname[5] = {"begin_mask", "end_mask", "shrink_axis_mask",
	                                     "ellipsis_mask", "new_axis_mask"};

	if (!jb || !int_list(jb, b, &nb))
		return kc_fail(p->err, KC_BAD_GRAPH, wb, "begin must be a list of at most %d ints",
		               KC_MAX_RANK);
	if (!je || !int_list(je, e, &ne) || ne != nb)
		return kc_fail(p->err, KC_BAD_GRAPH, we, "end must be a list of %d ints", nb);
	if (js && !cJSON_IsNull(js) && (!int_list(js, st, &ns) || ns != nb))
		return kc_fail(p->err, KC_BAD_GRAPH, ws, "strides must be a list of %d ints", nb);
	if (!js || cJSON_IsNull(js))
		for (int i = 0; i < nb; i++)
			st[i] = 1;
	for (int k = 0; k < 5; k++) {
		w = w_in;
		if (!int_attr(parse_attr_get(oa, mname[k], &w), 0, &mask[k]) || mask[k] < 0)
			return kc_fail(p->err, KC_BAD_GRAPH, w, "%s must be an int >= 0", mname[k]);
	}
	int64_t bm = mask[0], em = mask[1], sm = mask[2], elm = mask[3], nam = mask[4];
	for (int i = 0; i < nb; i++)
		if (elm >> i & 1) {
			if (ell >= 0) {
				w = w_in;
				(void)parse_attr_get(oa, "ellipsis_mask", &w);
				return kc_fail(p->err, KC_BAD_GRAPH, w,
				               "ellipsis_mask may set one bit of the spec");
			}
			ell = i;
		}
	for (int i = 0; i < nb; i++)
		nreal += i != ell && !(nam >> i & 1);
	if (nreal > in->rank)
		return kc_fail(p->err, KC_BAD_GRAPH, wb,
		               "the slice indexes %d dims of a rank-%d input", nreal, in->rank);
	for (int i = 0; i <= nb; i++) {
		int whole = 0;
		if (i == nb) /* the dims after the spec (no ellipsis) */
			whole = ell < 0 ? in->rank - d : 0;
		else if (i == ell)
			whole = in->rank - nreal;
		else if (nam >> i & 1) {
			if (r >= KC_MAX_RANK)
				return kc_fail(p->err, KC_TOO_LARGE, w_in, "rank exceeds %d",
				               KC_MAX_RANK);
			at->new_axes |= 1u << r;
			shape[r++] = 1;
			continue;
		}
		if (i == nb || i == ell) {
			for (int k = 0; k < whole; k++, d++) {
				if (r >= KC_MAX_RANK)
					return kc_fail(p->err, KC_TOO_LARGE, w_in,
					               "rank exceeds %d", KC_MAX_RANK);
				at->begin[d] = 0;
				at->strides[d] = 1;
				shape[r++] = in->shape[d];
			}
			continue;
		}
		int64_t dim = in->shape[d], s1 = st[i], lo, hi, n;
		if (s1 == 0)
			return kc_fail(p->err, KC_BAD_GRAPH, ws, "stride %d is 0", i);
		if (sm >> i & 1) {
			lo = b[i] < 0 ? b[i] + dim : b[i];
			if (lo < 0 || lo >= dim)
				return kc_fail(p->err, KC_BAD_GRAPH, wb,
				               "shrunk index %" PRId64 " is out of range", b[i]);
			at->shrink |= 1u << d;
			at->begin[d++] = lo;
			at->strides[d - 1] = 1;
			continue;
		}
		lo = b[i] < 0 ? b[i] + dim : b[i];
		hi = e[i] < 0 ? e[i] + dim : e[i];
		if (s1 > 0) {
			lo = bm >> i & 1 ? 0 : lo < 0 ? 0 : lo > dim ? dim : lo;
			hi = em >> i & 1 ? dim : hi < 0 ? 0 : hi > dim ? dim : hi;
			n = hi > lo ? (hi - lo + s1 - 1) / s1 : 0;
		} else {
			lo = bm >> i & 1 ? dim - 1 : lo < -1 ? -1 : lo > dim - 1 ? dim - 1 : lo;
			hi = em >> i & 1 ? -1 : hi < -1 ? -1 : hi > dim - 1 ? dim - 1 : hi;
			n = lo > hi ? (lo - hi - s1 - 1) / -s1 : 0;
		}
		if (n == 0)
			return kc_fail(p->err, KC_BAD_SHAPE, wb, "dim %d of the slice is empty", d);
		if (r >= KC_MAX_RANK)
			return kc_fail(p->err, KC_TOO_LARGE, w_in, "rank exceeds %d", KC_MAX_RANK);
		at->begin[d] = lo;
		at->strides[d++] = s1;
		shape[r++] = n;
	}
	KC_ASSERT(d == in->rank);
	at->nlist = in->rank;
	out->dtype = in->dtype;
	set_shape(out, shape, r);
	return KC_OK;
}

/* Shapes and attrs of the layout, reduction and assign ops added after the
 * elementwise slice (their attrs decide the output shape). */
/* A bool attr (absent: false). */
static bool
bool_attr(const cJSON *v, bool *out)
{
	*out = false;
	if (!v || cJSON_IsNull(v))
		return true;
	if (cJSON_IsBool(v)) {
		*out = cJSON_IsTrue(v);
		return true;
	}
	if (cJSON_IsNumber(v)) {
		*out = v->valuedouble != 0;
		return true;
	}
	return false;
}

/* MatMul/BatchMatMul: a [..., M, K] (or [..., K, M] with transpose_a) times
 * b [..., K, N] (or [..., N, K] with transpose_b), batch dims broadcast as
 * numpy; the result has the declared dtype (dst_type). */
static KcStatus
infer_matmul(Parser *p, IrNode *nd, const IrValue *decl, const OpAttrs *oa, const char *w_in)
{
	IrValue *a = nd->in[0], *b = nd->in[1], *out = nd->out[0];
	IrAttrs *at = &nd->attrs;
	const char *w = w_in;
	int64_t shape[KC_MAX_RANK];
	KcStatus st;

	if (!bool_attr(parse_attr_get(oa, "transpose_a", &w), &at->trans_a) ||
	    !bool_attr(parse_attr_get(oa, "transpose_b", &w), &at->trans_b))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "transpose_a/transpose_b must be bools");
	if (a->rank < 2 || b->rank < 2)
		return kc_fail(p->err, KC_BAD_SHAPE, w_in, "%s operands have rank >= 2",
		               ir_op_info[nd->op].name);
	if ((st = unify(p, a, b, w_in)) != KC_OK)
		return st;
	KcDtypeClass ci = kc_dtype_info[a->dtype].cls, co = kc_dtype_info[decl->dtype].cls;
	if (ci == DTC_BOOL || (ci == DTC_FLOAT) != (co == DTC_FLOAT))
		return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in, "%s from %s to %s",
		               ir_op_info[nd->op].name, kc_dtype_info[a->dtype].name,
		               kc_dtype_info[decl->dtype].name);
	int ra = a->rank, rb = b->rank;
	int64_t M = at->trans_a ? a->shape[ra - 1] : a->shape[ra - 2];
	int64_t K = at->trans_a ? a->shape[ra - 2] : a->shape[ra - 1];
	int64_t Kb = at->trans_b ? b->shape[rb - 1] : b->shape[rb - 2];
	int64_t N = at->trans_b ? b->shape[rb - 2] : b->shape[rb - 1];
	if (K != Kb)
		return kc_fail(p->err, KC_BAD_SHAPE, w_in,
		               "contraction dims differ (%" PRId64 " and %" PRId64 ")", K, Kb);
	int nb = (ra > rb ? ra : rb) - 2;
	for (int d = 0; d < nb; d++) {
		int da = d - (nb - (ra - 2)), db = d - (nb - (rb - 2));
		int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
		if (x != y && x != 1 && y != 1)
			return kc_fail(p->err, KC_BAD_SHAPE, w_in, "batch dims do not broadcast");
		shape[d] = x == 1 ? y : x;
	}
	shape[nb] = M;
	shape[nb + 1] = N;
	if (oa->dst_type && !parse_dst_type_matches(oa->dst_type, decl->dtype))
		return kc_fail(p->err, KC_BAD_GRAPH, oa->dst_where,
		               "dst_type disagrees with the output dtype %s",
		               kc_dtype_info[decl->dtype].name);
	out->dtype = decl->dtype;
	set_shape(out, shape, nb + 2);
	return KC_OK;
}

/* A Conv2D stride/dilation attr as (H, W): an int, [h, w], or MindSpore's
 * four-entry form [1, 1, h, w] (also accepted: [1, h, w, 1]). */
static bool
conv_pair(const cJSON *v, int64_t out[2])
{
	int64_t l[KC_MAX_RANK];
	int n;
	out[0] = out[1] = 1;
	if (!v || cJSON_IsNull(v))
		return true;
	if (!int_list(v, l, &n))
		return false;
	if (n == 1) {
		out[0] = out[1] = l[0];
	} else if (n == 2) {
		out[0] = l[0];
		out[1] = l[1];
	} else if (n == 4 && l[0] == 1 && l[1] == 1) {
		out[0] = l[2];
		out[1] = l[3];
	} else if (n == 4 && l[0] == 1 && l[3] == 1) {
		out[0] = l[1];
		out[1] = l[2];
	} else {
		return false;
	}
	return out[0] >= 1 && out[1] >= 1 && out[0] <= 0x1p31 && out[1] <= 0x1p31;
}

/* Conv2D(x, w): x NHWC with w [O, KH, KW, I], or x NCHW with w [O, I, KH,
 * KW] (MindSpore's layouts). The layout is the input tensor's format when
 * it is NHWC or NCHW (MindSpore's layout pass rewrites the tensors and
 * leaves the primitive's "format" attr stale), else data_format/format,
 * else NCHW. Pads: pad_list, else pad ([top, bottom, left, right] or one
 * int), else pad_mode "same" (TF rule, extra pad at the bottom/right), else
 * 0. out = (in + pads - dilation * (k - 1) - 1) / stride + 1; the declared
 * output shape must equal it (the caller checks). groups must divide Cin
 * and O with w's I == Cin / groups. */
static KcStatus
infer_conv(Parser *p, IrNode *nd, const IrValue *decl, const OpAttrs *oa, const char *w_in)
{
	IrValue *x = nd->in[0], *wt = nd->in[1], *out = nd->out[0];
	IrAttrs *at = &nd->attrs;
	const char *w = w_in;
	const cJSON *j;
	int64_t l[KC_MAX_RANK], shape[4], g1, g2;
	int n;

	if (x->rank != 4 || wt->rank != 4)
		return kc_fail(p->err, KC_BAD_SHAPE, w_in,
		               "Conv2D takes a rank-4 input and a rank-4 weight");
	if (x->dtype != wt->dtype || kc_dtype_info[x->dtype].cls != DTC_FLOAT ||
	    kc_dtype_info[decl->dtype].cls != DTC_FLOAT)
		return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in,
		               "Conv2D takes floating-point input and weight of one dtype (%s, %s "
		               "-> %s)",
		               kc_dtype_info[x->dtype].name, kc_dtype_info[wt->dtype].name,
		               kc_dtype_info[decl->dtype].name);
	if (decl->dtype != x->dtype &&
	    kc_dtype_info[decl->dtype].bytes <= kc_dtype_info[x->dtype].bytes)
		return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, oa->dst_type ? oa->dst_where : w_in,
		               "Conv2D from %s to %s: only a widening dst_type is supported",
		               kc_dtype_info[x->dtype].name, kc_dtype_info[decl->dtype].name);
	/* layout */
	const char *fmt = oa->in0_format;
	if (!fmt || (strcmp(fmt, "NHWC") != 0 && strcmp(fmt, "NCHW") != 0)) {
		fmt = NULL;
		const char *names[2] = {"data_format", "format"};
		for (int k = 0; k < 2 && !fmt; k++) {
			w = w_in;
			j = parse_attr_get(oa, names[k], &w);
			if (!j || cJSON_IsNull(j))
				continue;
			if (!cJSON_IsString(j) || (strcmp(j->valuestring, "NHWC") != 0 &&
			                           strcmp(j->valuestring, "NCHW") != 0))
				return kc_fail(p->err, KC_UNSUPPORTED, w,
				               "Conv2D %s must be \"NHWC\" or \"NCHW\"", names[k]);
			fmt = j->valuestring;
		}
	}
	at->nhwc = fmt && strcmp(fmt, "NHWC") == 0;
	/* stride, dilation */
	w = w_in;
	if (!conv_pair(parse_attr_get(oa, "stride", &w), at->stride))
		return kc_fail(p->err, KC_BAD_GRAPH, w,
		               "stride must be an int, [h, w] or [1, 1, h, w] of ints >= 1");
	w = w_in;
	if (!conv_pair(parse_attr_get(oa, "dilation", &w), at->dilation))
		return kc_fail(p->err, KC_BAD_GRAPH, w,
		               "dilation must be an int, [h, w] or [1, 1, h, w] of ints >= 1");
	/* groups (group and groups must agree) */
	w = w_in;
	if (!int_attr(parse_attr_get(oa, "groups", &w), 1, &g1))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "groups must be an int");
	w = w_in;
	if (!int_attr(parse_attr_get(oa, "group", &w), g1, &g2))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "group must be an int");
	if (g1 != g2)
		return kc_fail(p->err, KC_BAD_GRAPH, w,
		               "group (%" PRId64 ") and groups (%" PRId64 ") disagree", g2, g1);
	at->groups = g1;
	/* shapes: C, H, W of the input; O, I, KH, KW of the weight */
	int64_t N = x->shape[0], C = x->shape[at->nhwc ? 3 : 1];
	int64_t H = x->shape[at->nhwc ? 1 : 2], W = x->shape[at->nhwc ? 2 : 3];
	int64_t O = wt->shape[0], I = wt->shape[at->nhwc ? 3 : 1];
	int64_t KH = wt->shape[at->nhwc ? 1 : 2], KW = wt->shape[at->nhwc ? 2 : 3];
	if (at->groups < 1 || C % at->groups != 0 || O % at->groups != 0)
		return kc_fail(p->err, KC_UNSUPPORTED, w,
		               "groups %" PRId64 " must divide the input channels (%" PRId64
		               ") and the output channels (%" PRId64 ")",
		               at->groups, C, O);
	if (I * at->groups != C)
		return kc_fail(p->err, KC_BAD_SHAPE, w_in,
		               "weight has %" PRId64 " input channels; the input has %" PRId64
		               " in %" PRId64 " group(s)",
		               I, C, at->groups);
	w = w_in;
	j = parse_attr_get(oa, "kernel_size", &w);
	if (j && !cJSON_IsNull(j)) {
		int64_t k2[2];
		if (!conv_pair(j, k2) || k2[0] != KH || k2[1] != KW)
			return kc_fail(
			    p->err, KC_BAD_SHAPE, w,
			    "kernel_size disagrees with the weight's %" PRId64 "x%" PRId64, KH, KW);
	}
	w = w_in;
	j = parse_attr_get(oa, "out_channel", &w);
	if (j && !cJSON_IsNull(j)) {
		int64_t oc;
		if (!int_attr(j, O, &oc) || oc != O)
			return kc_fail(p->err, KC_BAD_SHAPE, w,
			               "out_channel disagrees with the weight's %" PRId64, O);
	}
	/* pads */
	int64_t ek[2] = {at->dilation[0] * (KH - 1) + 1, at->dilation[1] * (KW - 1) + 1};
	int64_t in2[2] = {H, W};
	w = w_in;
	j = parse_attr_get(oa, "pad_list", &w);
	if (!j || cJSON_IsNull(j)) {
		w = w_in;
		j = parse_attr_get(oa, "pad", &w);
	}
	memset(at->pad, 0, sizeof at->pad);
	if (j && !cJSON_IsNull(j)) {
		if (!int_list(j, l, &n) || (n != 1 && n != 4))
			return kc_fail(p->err, KC_BAD_GRAPH, w,
			               "pads are [top, bottom, left, right] or one int");
		for (int k = 0; k < 4; k++) {
			at->pad[k] = l[n == 1 ? 0 : k];
			if (at->pad[k] < 0 || at->pad[k] > 0x1p31)
				return kc_fail(p->err, KC_BAD_GRAPH, w, "pads must be >= 0");
		}
	} else {
		w = w_in;
		j = parse_attr_get(oa, "pad_mode", &w);
		if (j && cJSON_IsString(j) &&
		    (strcmp(j->valuestring, "same") == 0 || strcmp(j->valuestring, "SAME") == 0))
			for (int d = 0; d < 2; d++) {
				int64_t o = (in2[d] + at->stride[d] - 1) / at->stride[d];
				int64_t t = (o - 1) * at->stride[d] + ek[d] - in2[d];
				t = t > 0 ? t : 0;
				at->pad[2 * d] = t / 2;
				at->pad[2 * d + 1] = t - t / 2;
			}
	}
	int64_t osp[2];
	for (int d = 0; d < 2; d++) {
		int64_t span = in2[d] + at->pad[2 * d] + at->pad[2 * d + 1] - ek[d];
		if (span < 0)
			return kc_fail(p->err, KC_BAD_SHAPE, w_in,
			               "the %s kernel extent %" PRId64
			               " exceeds the padded input %" PRId64,
			               d ? "width" : "height", ek[d],
			               in2[d] + at->pad[2 * d] + at->pad[2 * d + 1]);
		osp[d] = span / at->stride[d] + 1;
	}
	shape[0] = N;
	shape[at->nhwc ? 1 : 2] = osp[0];
	shape[at->nhwc ? 2 : 3] = osp[1];
	shape[at->nhwc ? 3 : 1] = O;
	if (oa->dst_type && !parse_dst_type_matches(oa->dst_type, decl->dtype))
		return kc_fail(p->err, KC_BAD_GRAPH, oa->dst_where,
		               "dst_type disagrees with the output dtype %s",
		               kc_dtype_info[decl->dtype].name);
	out->dtype = decl->dtype;
	set_shape(out, shape, 4);
	return KC_OK;
}

/* Argmax/Argmin: axis (an int or a list of one; default -1, as MindSpore),
 * output_type/dst_type (if present) restating the declared int32/int64
 * output; the axis is dropped from the output shape (numpy argmax). */
static KcStatus
infer_arg(Parser *p, IrNode *nd, const IrValue *decl, const OpAttrs *oa, const char *w_in)
{
	IrValue *in = nd->in[0], *out = nd->out[0];
	IrAttrs *at = &nd->attrs;
	const char *w = w_in;
	int64_t ax, shape[KC_MAX_RANK];
	int r = 0;

	if (in->dtype == KC_DT_BOOL)
		return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in, "%s is not defined on bool",
		               ir_op_info[nd->op].name);
	if (!int_attr(parse_attr_get(oa, "axis", &w), -1, &ax))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "axis must be an int");
	if (ax < -in->rank || ax >= in->rank)
		return kc_fail(p->err, KC_BAD_GRAPH, w,
		               "axis %" PRId64 " is out of range for rank %d", ax, in->rank);
	ax = ax < 0 ? ax + in->rank : ax;
	at->naxis = 1;
	at->axis[0] = ax;
	if (decl->dtype != KC_DT_INT32 && decl->dtype != KC_DT_INT64)
		return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in,
		               "%s produces int32 or int64 indices, not %s",
		               ir_op_info[nd->op].name, kc_dtype_info[decl->dtype].name);
	if (decl->dtype == KC_DT_INT32 && in->shape[ax] - 1 > INT32_MAX)
		return kc_fail(p->err, KC_BAD_SHAPE, w_in,
		               "indices along axis %" PRId64 " do not fit int32", ax);
	w = w_in;
	const cJSON *ot = parse_attr_get(oa, "output_type", &w);
	if (ot && !cJSON_IsNull(ot) && !parse_dst_type_matches(ot, decl->dtype))
		return kc_fail(p->err, KC_BAD_GRAPH, w,
		               "output_type disagrees with the output dtype %s",
		               kc_dtype_info[decl->dtype].name);
	if (oa->dst_type && !parse_dst_type_matches(oa->dst_type, decl->dtype))
		return kc_fail(p->err, KC_BAD_GRAPH, oa->dst_where,
		               "dst_type disagrees with the output dtype %s",
		               kc_dtype_info[decl->dtype].name);
	for (int d = 0; d < in->rank; d++)
		if (d != ax)
			shape[r++] = in->shape[d];
	out->dtype = decl->dtype;
	set_shape(out, shape, r);
	return KC_OK;
}

/* CumSum/CumProd: axis (an int or a list of one; required), exclusive,
 * reverse (bools); the output has the input's shape and dtype. */
static KcStatus
infer_scan(Parser *p, IrNode *nd, const OpAttrs *oa, const char *w_in)
{
	IrValue *in = nd->in[0], *out = nd->out[0];
	IrAttrs *at = &nd->attrs;
	const char *w = w_in;
	const cJSON *j = parse_attr_get(oa, "axis", &w);
	int64_t ax;

	if (in->dtype == KC_DT_BOOL)
		return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in, "%s is not defined on bool",
		               ir_op_info[nd->op].name);
	if (!j || cJSON_IsNull(j) || !int_attr(j, 0, &ax))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "%s needs an int axis",
		               ir_op_info[nd->op].name);
	if (ax < -in->rank || ax >= in->rank)
		return kc_fail(p->err, KC_BAD_GRAPH, w,
		               "axis %" PRId64 " is out of range for rank %d", ax, in->rank);
	at->naxis = 1;
	at->axis[0] = ax < 0 ? ax + in->rank : ax;
	w = w_in;
	if (!bool_attr(parse_attr_get(oa, "exclusive", &w), &at->exclusive))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "exclusive must be a bool");
	w = w_in;
	if (!bool_attr(parse_attr_get(oa, "reverse", &w), &at->reverse))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "reverse must be a bool");
	out->dtype = in->dtype;
	set_shape(out, in->shape, in->rank);
	return KC_OK;
}

/* A string attr equal (ignoring case) to one of two spellings: 0 or 1;
 * -1 if it is neither. */
static int
str_choice(const cJSON *j, const char *a, const char *b)
{
	if (!cJSON_IsString(j))
		return -1;
	if (strcasecmp(j->valuestring, a) == 0)
		return 0;
	if (strcasecmp(j->valuestring, b) == 0)
		return 1;
	return -1;
}

/* Pool2D (AKG's python registry; semantics of op_dsl.py pool2d_str):
 * data_layout "NCHW" | "NHWC" (absent: the input's format, else NCHW),
 * pool_type "max" | "avg", global (bool: the whole H x W, keeping 1 x 1),
 * kernel_size and strides (an int, [h, w] or [1, 1, h, w]; strides default
 * 1), pad [top, left, bottom, right] (AKG's and TVM's order) or one int,
 * round_mode (ceil if true/non-zero/"ceil", floor if false/0/"floor").
 * out = (in + pads - k) / s + 1, rounded down or up. Pads must be smaller
 * than the kernel and every window must hold a real element (so a max
 * window is never empty); the caller checks the declared shape. */
static KcStatus
infer_pool(Parser *p, IrNode *nd, const OpAttrs *oa, const char *w_in)
{
	IrValue *x = nd->in[0], *out = nd->out[0];
	IrAttrs *at = &nd->attrs;
	const char *w = w_in;
	const cJSON *j;
	int64_t l[KC_MAX_RANK], shape[4];
	bool global = false, ceil_mode = false;
	int n, c;

	if (x->rank != 4)
		return kc_fail(p->err, KC_BAD_SHAPE, w_in, "Pool2D takes a rank-4 input");
	if (kc_dtype_info[x->dtype].cls != DTC_FLOAT)
		return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in,
		               "Pool2D takes floating-point input, not %s",
		               kc_dtype_info[x->dtype].name);
	j = parse_attr_get(oa, "data_layout", &w);
	if (j && !cJSON_IsNull(j)) {
		if ((c = str_choice(j, "NCHW", "NHWC")) < 0)
			return kc_fail(p->err, KC_UNSUPPORTED, w,
			               "Pool2D data_layout must be \"NCHW\" or \"NHWC\"");
		at->nhwc = c == 1;
	} else {
		at->nhwc = oa->in0_format && strcmp(oa->in0_format, "NHWC") == 0;
	}
	w = w_in;
	j = parse_attr_get(oa, "pool_type", &w);
	if ((c = str_choice(j, "avg", "max")) < 0)
		return kc_fail(p->err, KC_BAD_GRAPH, w,
		               "Pool2D pool_type must be \"max\" or \"avg\"");
	at->pool_max = c == 1;
	w = w_in;
	if (!bool_attr(parse_attr_get(oa, "global", &w), &global))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "global must be a bool");
	int64_t H = x->shape[at->nhwc ? 1 : 2], W = x->shape[at->nhwc ? 2 : 3];
	memset(at->pad, 0, sizeof at->pad);
	at->stride[0] = at->stride[1] = 1;
	if (global) {
		at->kernel[0] = H;
		at->kernel[1] = W;
	} else {
		w = w_in;
		j = parse_attr_get(oa, "kernel_size", &w);
		if (!j || cJSON_IsNull(j) || !conv_pair(j, at->kernel))
			return kc_fail(p->err, KC_BAD_GRAPH, w,
			               "kernel_size must be an int, [h, w] or [1, 1, h, w] of ints "
			               ">= 1");
		w = w_in;
		if (!conv_pair(parse_attr_get(oa, "strides", &w), at->stride))
			return kc_fail(
			    p->err, KC_BAD_GRAPH, w,
			    "strides must be an int, [h, w] or [1, 1, h, w] of ints >= 1");
		w = w_in;
		j = parse_attr_get(oa, "pad", &w);
		if (j && !cJSON_IsNull(j)) {
			if (!int_list(j, l, &n) || (n != 1 && n != 4))
				return kc_fail(p->err, KC_BAD_GRAPH, w,
				               "pad is [top, left, bottom, right] or one int");
			/* AKG order (t, l, b, r) -> ours (t, b, l, r) */
			static const int perm[4] = {0, 2, 1, 3};
			for (int k = 0; k < 4; k++) {
				at->pad[perm[k]] = l[n == 1 ? 0 : k];
				if (at->pad[perm[k]] < 0)
					return kc_fail(p->err, KC_BAD_GRAPH, w,
					               "pads must be >= 0");
			}
		}
		w = w_in;
		j = parse_attr_get(oa, "round_mode", &w);
		if (j && !cJSON_IsNull(j)) {
			if (cJSON_IsString(j)) {
				if ((c = str_choice(j, "floor", "ceil")) < 0)
					return kc_fail(p->err, KC_BAD_GRAPH, w,
					               "round_mode must be \"floor\" or \"ceil\"");
				ceil_mode = c == 1;
			} else if (!bool_attr(j, &ceil_mode)) {
				return kc_fail(p->err, KC_BAD_GRAPH, w,
				               "round_mode must be a bool, an int or a string");
			}
		}
	}
	int64_t in2[2] = {H, W}, osp[2];
	for (int d = 0; d < 2; d++) {
		int64_t k = at->kernel[d], s = at->stride[d], lo = at->pad[2 * d];
		int64_t hi = at->pad[2 * d + 1], span = in2[d] + lo + hi - k;
		if (lo >= k || hi >= k)
			return kc_fail(p->err, KC_UNSUPPORTED, w_in,
			               "Pool2D pads must be smaller than the kernel");
		if (span < 0)
			return kc_fail(p->err, KC_BAD_SHAPE, w_in,
			               "the %s kernel %" PRId64
			               " exceeds the padded input %" PRId64,
			               d ? "width" : "height", k, in2[d] + lo + hi);
		osp[d] = (ceil_mode ? span + s - 1 : span) / s + 1;
		if ((osp[d] - 1) * s >= in2[d] + lo)
			return kc_fail(p->err, KC_UNSUPPORTED, w_in,
			               "the last %s window lies in the padding",
			               d ? "width" : "height");
	}
	shape[0] = x->shape[0];
	shape[at->nhwc ? 3 : 1] = x->shape[at->nhwc ? 3 : 1];
	shape[at->nhwc ? 1 : 2] = osp[0];
	shape[at->nhwc ? 2 : 3] = osp[1];
	out->dtype = x->dtype;
	set_shape(out, shape, 4);
	return KC_OK;
}

static KcStatus
infer_struct(Parser *p, IrNode *nd, const IrValue *decl, const OpAttrs *oa, const char *w_in)
{
	IrValue **in = nd->in, *out = nd->out[0];
	IrAttrs *at = &nd->attrs;
	const char *w = w_in;
	int64_t l[KC_MAX_RANK], shape[KC_MAX_RANK];
	int n = 0, r = in[0]->rank;
	KcStatus st;

	switch (nd->op) {
	case IR_OP_REDUCE_SUM:
	case IR_OP_REDUCE_MAX:
	case IR_OP_REDUCE_MIN:
	case IR_OP_REDUCE_PROD: return infer_reduce(p, nd, decl, oa, w_in);
	case IR_OP_ELEM_ANY:
	case IR_OP_ELEM_ALL:
		/* any/all elements non-zero, as a [1] of the declared dtype */
		for (int d = 0; d < r; d++)
			at->axis[at->naxis++] = d;
		out->dtype = decl->dtype;
		set_shape(out, shape, 0);
		return KC_OK;
	case IR_OP_STRIDED_SLICE: return infer_slice(p, nd, oa, w_in);
	case IR_OP_MAT_MUL:
	case IR_OP_BATCH_MAT_MUL: return infer_matmul(p, nd, decl, oa, w_in);
	case IR_OP_CONV2D: return infer_conv(p, nd, decl, oa, w_in);
	case IR_OP_ARGMAX:
	case IR_OP_ARGMIN: return infer_arg(p, nd, decl, oa, w_in);
	case IR_OP_CUM_SUM:
	case IR_OP_CUM_PROD: return infer_scan(p, nd, oa, w_in);
	case IR_OP_POOL2D: return infer_pool(p, nd, oa, w_in);
	case IR_OP_ONE_HOT: {
		const cJSON *dj = parse_attr_get(oa, "depth", &w);
		int64_t depth, ax;
		if (!dj || !int_attr(dj, 0, &depth) || depth < 1 || depth > 0x1p31)
			return kc_fail(p->err, KC_BAD_GRAPH, w, "OneHot needs an int depth >= 1");
		w = w_in;
		if (!int_attr(parse_attr_get(oa, "axis", &w), -1, &ax) || ax < -1 || ax > r)
			return kc_fail(p->err, KC_BAD_GRAPH, w, "OneHot axis must be -1..%d", r);
		if (kc_dtype_info[in[0]->dtype].cls != DTC_INT &&
		    kc_dtype_info[in[0]->dtype].cls != DTC_UINT)
			return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in,
			               "OneHot indices must be integers, not %s",
			               kc_dtype_info[in[0]->dtype].name);
		if (in[1]->numel != 1 || in[2]->numel != 1)
			return kc_fail(p->err, KC_BAD_SHAPE, w_in,
			               "OneHot on_value and off_value are scalars");
		if ((st = unify(p, in[1], in[2], w_in)) != KC_OK)
			return st;
		if (r + 1 > KC_MAX_RANK)
			return kc_fail(p->err, KC_TOO_LARGE, w_in, "rank exceeds %d", KC_MAX_RANK);
		ax = ax < 0 ? r : ax;
		at->naxis = 1;
		at->axis[0] = ax;
		at->nlist = 1;
		at->list[0] = depth;
		for (int d = 0, q = 0; d <= r; d++)
			shape[d] = d == ax ? depth : in[0]->shape[q++];
		out->dtype = in[1]->dtype;
		set_shape(out, shape, r + 1);
		return KC_OK;
	}
	case IR_OP_GATHER: {
		int64_t ax;
		const IrValue *ix = in[1];
		if (!int_attr(parse_attr_get(oa, "axis", &w), 0, &ax) || ax < -r || ax >= r)
			return kc_fail(p->err, KC_BAD_GRAPH, w, "Gather axis must be in -%d..%d", r,
			               r - 1);
		if (ix->dtype != KC_DT_INT32 && ix->dtype != KC_DT_INT64)
			return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in,
			               "Gather indices must be int32 or int64, not %s",
			               kc_dtype_info[ix->dtype].name);
		if (in[0]->kind == IRV_CONST)
			return kc_fail(p->err, KC_UNSUPPORTED, w_in, "Gather from a constant");
		ax = ax < 0 ? ax + r : ax;
		if (r - 1 + ix->rank > KC_MAX_RANK)
			return kc_fail(p->err, KC_TOO_LARGE, w_in, "rank exceeds %d", KC_MAX_RANK);
		at->naxis = 1;
		at->axis[0] = ax;
		int q = 0;
		for (int d = 0; d < ax; d++)
			shape[q++] = in[0]->shape[d];
		for (int d = 0; d < ix->rank; d++)
			shape[q++] = ix->shape[d];
		for (int d = (int)ax + 1; d < r; d++)
			shape[q++] = in[0]->shape[d];
		out->dtype = in[0]->dtype;
		set_shape(out, shape, q);
		return KC_OK;
	}
	case IR_OP_CONCAT: {
		int64_t ax;
		if (!int_attr(parse_attr_get(oa, "axis", &w), 0, &ax) || ax < -r || ax >= r)
			return kc_fail(p->err, KC_BAD_GRAPH, w, "Concat axis must be in -%d..%d", r,
			               r - 1);
		ax = ax < 0 ? ax + r : ax;
		memcpy(shape, in[0]->shape, sizeof shape);
		shape[ax] = 0;
		for (int k = 0; k < nd->nin; k++) {
			const IrValue *u = in[k];
			if (u->dtype != in[0]->dtype || u->rank != r)
				return kc_fail(p->err, KC_BAD_GRAPH, w_in,
				               "Concat pieces differ in dtype or rank");
			for (int d = 0; d < r; d++)
				if (d != ax && u->shape[d] != in[0]->shape[d])
					return kc_fail(p->err, KC_BAD_SHAPE, w_in,
					               "Concat pieces differ off the axis (dim %d)",
					               d);
			if (shape[ax] > INT64_MAX / 2 - u->shape[ax])
				return kc_fail(p->err, KC_BAD_SHAPE, w_in, "Concat is too large");
			shape[ax] += u->shape[ax];
		}
		at->naxis = 1;
		at->axis[0] = ax;
		out->dtype = in[0]->dtype;
		set_shape(out, shape, r);
		return KC_OK;
	}
	case IR_OP_EXPAND_DIMS: {
		const cJSON *ax = parse_attr_get(oa, "axis", &w);
		if (!ax || !int_list(ax, l, &n) || n < 1)
			return kc_fail(p->err, KC_BAD_GRAPH, w, "ExpandDims needs an int axis");
		if (l[0] < -(r + 1) || l[0] > r)
			return kc_fail(p->err, KC_BAD_GRAPH, w,
			               "axis %" PRId64 " is out of range for rank %d", l[0], r);
		if (r + 1 > KC_MAX_RANK)
			return kc_fail(p->err, KC_TOO_LARGE, w, "rank exceeds %d", KC_MAX_RANK);
		int64_t a = l[0] < 0 ? l[0] + r + 1 : l[0];
		at->naxis = 1;
		at->axis[0] = a;
		for (int d = 0, k = 0; d <= r; d++)
			shape[d] = d == a ? 1 : in[0]->shape[k++];
		out->dtype = in[0]->dtype;
		set_shape(out, shape, r + 1);
		return KC_OK;
	}
	case IR_OP_TRANSPOSE: {
		const cJSON *pm = parse_attr_get(oa, "perm", &w);
		bool seen[KC_MAX_RANK] = {false};
		if (!pm || !int_list(pm, l, &n) || n != r)
			return kc_fail(p->err, KC_BAD_GRAPH, w, "perm must be a list of %d ints",
			               r);
		for (int d = 0; d < r; d++) {
			int64_t x = l[d] < 0 ? l[d] + r : l[d];
			if (x < 0 || x >= r || seen[x])
				return kc_fail(p->err, KC_BAD_GRAPH, w,
				               "perm is not a permutation");
			seen[x] = true;
			at->list[d] = x;
			shape[d] = in[0]->shape[x];
		}
		at->nlist = r;
		out->dtype = in[0]->dtype;
		set_shape(out, shape, r);
		return KC_OK;
	}
	case IR_OP_TILE: {
		const cJSON *mu = parse_attr_get(oa, "multiples", &w);
		if (!mu || !int_list(mu, l, &n) || n < 1)
			return kc_fail(p->err, KC_BAD_GRAPH, w, "multiples must be a list of ints");
		int orank = n > r ? n : r;
		for (int d = 0; d < orank; d++) {
			int km = d - (orank - n), ki = d - (orank - r);
			int64_t m = km >= 0 ? l[km] : 1, x = ki >= 0 ? in[0]->shape[ki] : 1;
			if (m < 1 || m > 0x1p31)
				return kc_fail(p->err, KC_BAD_GRAPH, w, "multiples must be >= 1");
			if (x > INT64_MAX / m)
				return kc_fail(p->err, KC_BAD_SHAPE, w, "tiled shape overflows");
			at->list[d] = m;
			shape[d] = x * m;
		}
		at->nlist = orank;
		out->dtype = in[0]->dtype;
		set_shape(out, shape, orank);
		return KC_OK;
	}
	case IR_OP_ASSIGN:
	case IR_OP_INPLACE_ASSIGN:
		if (in[0]->kind != IRV_INPUT)
			return kc_fail(p->err, KC_UNSUPPORTED, w_in,
			               "%s writes into a kernel input; '%.64s' is not one",
			               ir_op_info[nd->op].name, in[0]->tensor_name);
		if ((st = unify(p, in[0], in[1], w_in)) != KC_OK)
			return st;
		if (!parse_same_shape(in[0], in[1]))
			return kc_fail(p->err, KC_BAD_SHAPE, w_in,
			               "%s source and destination shapes differ",
			               ir_op_info[nd->op].name);
		{
			const IrValue *res = nd->op == IR_OP_ASSIGN ? in[1] : in[2];
			out->dtype = res->dtype;
			set_shape(out, res->shape, res->rank);
		}
		return KC_OK;
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
	case IR_OP_COUNT: break;
	}
	KC_ASSERT(0 && "not a structural op");
	return KC_BAD_GRAPH;
}

/* Infer out's dtype and shape; `decl` is the declared output (Cast,
 * Reshape and BroadcastTo take their dtype/shape from it). */
KcStatus
parse_infer(Parser *p, IrNode *nd, const IrValue *decl, const OpAttrs *oa, const char *w_in)
{
	IrValue **in = nd->in, *out = nd->out[0];
	const IrOpInfo *oi = &ir_op_info[nd->op];
	const char *name = oi->name;
	KcStatus st;

	/* dtypes */
	switch (nd->op) {
	case IR_OP_SELECT:
		if (in[0]->dtype != KC_DT_BOOL)
			return kc_fail(p->err, KC_BAD_GRAPH, w_in,
			               "Select condition must be bool, not %s",
			               kc_dtype_info[in[0]->dtype].name);
		if ((st = unify(p, in[1], in[2], w_in)) != KC_OK)
			return st;
		out->dtype = in[1]->dtype;
		break;
	case IR_OP_CAST: out->dtype = decl->dtype; break;
	case IR_OP_BROADCAST_TO:
	case IR_OP_RESHAPE:
		if (in[0]->kind == IRV_CONST && in[0]->dtype != decl->dtype) {
			double x = parse_const_num(in[0]);
			if (!parse_const_store(in[0], decl->dtype, x))
				return kc_fail(p->err, KC_BAD_GRAPH, w_in,
				               "constant %.17g is not representable as %s", x,
				               kc_dtype_info[decl->dtype].name);
		}
		out->dtype = in[0]->dtype;
		break;
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
		if (nd->nin == 2 && (st = unify(p, in[0], in[1], w_in)) != KC_OK)
			return st;
		for (int k = 1; k < nd->nin && nd->op == IR_OP_ADD_N; k++)
			if (in[k]->dtype != in[0]->dtype)
				return kc_fail(p->err, KC_BAD_GRAPH, w_in,
				               "AddN operands differ in dtype: %s and %s",
				               kc_dtype_info[in[0]->dtype].name,
				               kc_dtype_info[in[k]->dtype].name);
		if (oi->flags & OPF_LOGICAL) {
			for (int k = 0; k < nd->nin; k++)
				if (in[k]->dtype != KC_DT_BOOL)
					return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in,
					               "%s takes bool operands, not %s", name,
					               kc_dtype_info[in[k]->dtype].name);
		} else if (in[0]->dtype == KC_DT_BOOL && !(oi->flags & OPF_CMP)) {
			return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in,
			               "%s is not defined on bool operands", name);
		}
		if ((oi->flags & OPF_FLOAT_ONLY) && kc_dtype_info[in[0]->dtype].cls != DTC_FLOAT)
			return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w_in,
			               "%s takes floating-point operands, not %s", name,
			               kc_dtype_info[in[0]->dtype].name);
		out->dtype = (oi->flags & OPF_CMP) ? KC_DT_BOOL : in[0]->dtype;
		break;
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
	case IR_OP_POOL2D: return infer_struct(p, nd, decl, oa, w_in);
	case IR_OP_COUNT: KC_ASSERT(0 && "bad op"); break;
	}

	/* shapes */
	switch (oi->kind) {
	case OPK_ELEMWISE: return broadcast(p, in, nd->nin, out, w_in);
	case OPK_REDUCE:
	case OPK_ASSIGN:
	case OPK_MATMUL:
	case OPK_CONV:
	case OPK_ARG:
	case OPK_SCAN:
	case OPK_POOL: break; /* infer_struct */
	case OPK_LAYOUT:
		out->rank = decl->rank;
		memcpy(out->shape, decl->shape, sizeof out->shape);
		if (nd->op == IR_OP_RESHAPE) {
			if (in[0]->numel != decl->numel)
				return kc_fail(p->err, KC_BAD_SHAPE, w_in,
				               "Reshape changes the element count (%" PRId64
				               " to %" PRId64 ")",
				               in[0]->numel, decl->numel);
		} else {
			IrValue *two[2] = {in[0], out};
			IrValue tmp = {0};
			if (in[0]->rank > out->rank || broadcast(p, two, 2, &tmp, w_in) != KC_OK ||
			    !parse_same_shape(&tmp, out))
				return kc_fail(p->err, KC_BAD_SHAPE, w_in,
				               "operand does not broadcast to the output shape");
		}
		return KC_OK;
	}
	KC_ASSERT(0 && "bad op kind");
	return KC_BAD_GRAPH;
}
