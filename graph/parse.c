/* parse.c - composite JSON (akg-format.md) -> typed IrGraph.
 *
 * One pass over op_desc in document order: every op input names a kernel
 * input or an earlier op's result (AKG files are topologically sorted, so
 * cycles cannot occur), or carries an inline "value" (a constant). Output
 * types and shapes are inferred (numpy broadcasting, ops.def dtype rules)
 * and checked against what the file declares. Comparisons stay bool and
 * Select conditions bool: old Ascend files declaring a comparison float get
 * an explicit Cast after it and NotEqual(mask, 0) before the Select.
 * Client-controlled sizes are checked against KcLimits before anything is
 * allocated from them, the text itself (tokens, nesting) by kc_json_scan
 * before cJSON builds a tree; every failure is a request error with a JSON
 * pointer in err->where. Strings the graph keeps are copied into the
 * context arena.
 */
#include <cjson/cJSON.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "parse.h"

/* Known MindSpore/AKG ops that kcsd does not compile yet. */
/* clang-format off */
static const char *const later_ops[] = {
	"ReduceMean", "AssignAdd",
	"StridedSliceV2", "GatherNd",
	"TensorScatterAdd", "UnsortedSegmentSum", "Complex",
	"CReal", "CImag", "PadAkg", "UnPadAkg", "TransData",
	"LayoutTransform", "EquivFormat", "StandardNormal",
	"FastGeLU", "GeLU", "Gelu",
	"AddMinValue", "ZerosLike", "SelectGE",
	"SelectGT", "SelectLE", "SelectLT", "Sigmoid", "ReLU", "Relu", "Softmax",
	"LogSoftmax", "BiasAdd", "BiasAddGrad", "tuple_getitem", "TupleGetItem",
	"CSRDiv", "CSRReduceSum", "CSRMV", "CSRMul", "CSRGather", "CSR2COO",
	"COO2CSR", "CSRMM",
};
/* clang-format on */

/* Tensor formats that are not row-major and that kcsd cannot lay out. */
/* clang-format off */
static const char *const bad_formats[] = {
	"FRACTAL_NZ", "NC1HWC0", "FRACTAL_Z", "C1HWNCoC0", "NDC1HWC0", "FRACTAL_Z_3D",
	"FRACTAL_ZN_LSTM", "NC1HWC0_C04", "FRACTAL_Z_C04",
};
/* clang-format on */

/* Row-major formats (the logical layout is the physical one). */
/* clang-format off */
static const char *const ok_formats[] = {
	"DefaultFormat", "NCHW", "NHWC", "ND", "NCDHW", "NDHWC",
};
/* clang-format on */

static void subptr(char out[PTR_MAX], const char *fmt, ...) KC_PRINTF(2, 3);

static void
subptr(char out[PTR_MAX], const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, PTR_MAX, fmt, ap);
	va_end(ap);
}

/* base + "/" + key, with key escaped as RFC 6901 says (~ -> ~0, / -> ~1). */
static void
subptr_key(char out[PTR_MAX], const char *base, const char *key)
{
	size_t n = (size_t)snprintf(out, PTR_MAX, "%s/", base);
	for (const char *k = key; *k && n + 3 < PTR_MAX; k++) {
		if (*k == '~' || *k == '/') {
			out[n++] = '~';
			out[n++] = *k == '~' ? '0' : '1';
		} else {
			out[n++] = *k;
		}
	}
	out[n < PTR_MAX ? n : PTR_MAX - 1] = '\0';
}

static bool
in_list(const char *const *list, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(list[i], s) == 0)
			return true;
	return false;
}

static const char *
jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- tensor name table --------------------------------------------------- */

static unsigned
name_hash(const char *s)
{
	unsigned h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

/* The table entry of `name` (its name set; v NULL when unbound). */
static NameEnt *
entry(Parser *p, const char *name)
{
	unsigned i = name_hash(name) & p->tabmask;
	while (p->tab[i].name && strcmp(p->tab[i].name, name) != 0)
		i = (i + 1) & p->tabmask;
	p->tab[i].name = name; /* the caller keeps `name` alive (arena) or fails */
	return &p->tab[i];
}

static IrValue **
slot(Parser *p, const char *name)
{
	return &entry(p, name)->v;
}

static IrValue *
new_value(Parser *p, IrValueKind kind)
{
	IrGraph *g = p->g;
	KC_ASSERT(g->nvalues < p->maxvalues);
	IrValue *v = ARENA_NEW(p->a, IrValue);
	v->kind = kind;
	v->id = g->nvalues;
	v->input_index = -1;
	g->values[g->nvalues++] = v;
	return v;
}

/* ---- numbers ------------------------------------------------------------- */

/* Round x to a binary float with `prec` significand bits, smallest quantum
 * 2^qmin and largest finite value maxv (round to nearest even). */
static double
round_float(double x, int prec, int qmin, double maxv)
{
	if (x == 0 || !isfinite(x))
		return x;
	int e;
	(void)frexp(x, &e);
	int qe = e - prec < qmin ? qmin : e - prec;
	double r = ldexp(nearbyint(ldexp(x, -qe)), qe);
	if (fabs(r) > maxv)
		r = copysign(INFINITY, x);
	return r;
}

/* Store numeric value x into constant v as dtype dt; false if x is not
 * representable (a fraction or out of range for an integer dtype). */
bool
parse_const_store(IrValue *v, KcDtype dt, double x)
{
	const KcDtypeInfo *di = &kc_dtype_info[dt];
	v->dtype = dt;
	v->fval = 0;
	v->ival = 0;
	switch (dt) {
	case KC_DT_FLOAT16: v->fval = round_float(x, 11, -24, 65504.0); return true;
	case KC_DT_BFLOAT16: v->fval = round_float(x, 8, -133, 0x1.fep127); return true;
	case KC_DT_FLOAT32: v->fval = round_float(x, 24, -149, FLT_MAX); return true;
	case KC_DT_FLOAT64: v->fval = x; return true;
	case KC_DT_BOOL: v->ival = x != 0; return true;
	case KC_DT_INT8:
	case KC_DT_INT16:
	case KC_DT_INT32:
	case KC_DT_INT64: {
		double lo = -ldexp(1, 8 * di->bytes - 1);
		if (!(x == trunc(x) && x >= lo && x < -lo))
			return false;
		v->ival = (int64_t)x;
		return true;
	}
	case KC_DT_UINT8:
	case KC_DT_UINT16:
	case KC_DT_UINT32:
	case KC_DT_UINT64:
		if (!(x == trunc(x) && x >= 0 && x < ldexp(1, 8 * di->bytes)))
			return false;
		v->ival = (int64_t)(uint64_t)x;
		return true;
	case KC_DT_COMPLEX64:
	case KC_DT_COMPLEX128: return false;
	case KC_DT_COUNT: break;
	}
	KC_ASSERT(0 && "bad dtype");
	return false;
}

double
parse_const_num(const IrValue *v)
{
	if (kc_dtype_info[v->dtype].cls == DTC_FLOAT)
		return v->fval;
	if (v->dtype == KC_DT_UINT64)
		return (double)(uint64_t)v->ival;
	return (double)v->ival;
}

/* ---- tensor descriptors ---------------------------------------------------- */

/* "shape": [int >= 1, ...]  ([] is read as [1]) */
static KcStatus
parse_shape(Parser *p, const cJSON *s, const char *where, IrValue *v)
{
	char w[PTR_MAX];
	subptr(w, "%s/shape", where);
	if (!cJSON_IsArray(s))
		return kc_fail(p->err, KC_BAD_SHAPE, w, "shape must be a list of ints");
	int n = cJSON_GetArraySize(s);
	if (n > KC_MAX_RANK || n > p->lim.max_rank)
		return kc_fail(p->err, KC_TOO_LARGE, w, "rank %d exceeds the limit of %d", n,
		               p->lim.max_rank);
	v->rank = n ? n : 1;
	v->shape[0] = 1;
	int64_t numel = 1;
	int d = 0;
	for (const cJSON *e = s->child; e; e = e->next, d++) {
		char wd[PTR_MAX];
		subptr(wd, "%s/%d", w, d);
		if (!cJSON_IsNumber(e) || e->valuedouble != trunc(e->valuedouble))
			return kc_fail(p->err, KC_BAD_SHAPE, wd, "dims must be integers");
		double x = e->valuedouble;
		if (x < 0)
			return kc_fail(p->err, KC_UNSUPPORTED, wd,
			               "dynamic shapes (negative dims) are not supported");
		if (x < 1)
			return kc_fail(p->err, KC_BAD_SHAPE, wd, "dims must be >= 1");
		if (x >= 0x1p62)
			return kc_fail(p->err, KC_BAD_SHAPE, wd, "dim is too large");
		int64_t dim = (int64_t)x;
		if (numel > INT64_MAX / dim)
			return kc_fail(p->err, KC_BAD_SHAPE, w, "element count overflows int64");
		numel *= dim;
		v->shape[d] = dim;
	}
	if (numel > p->lim.max_elements)
		return kc_fail(p->err, KC_TOO_LARGE, w,
		               "%" PRId64 " elements exceed the limit of %" PRId64, numel,
		               p->lim.max_elements);
	v->numel = numel;
	return KC_OK;
}

/* TensorDesc: {"data_type": str, "shape": [int, ...], "format"?: str,
 *              "tensor_name": str, "name"?: str, "value"?: number|bool|list}
 * Fills v's dtype, shape and tensor_name (the value is read by the caller). */
static KcStatus
parse_desc(Parser *p, const cJSON *d, const char *where, IrValue *v)
{
	char w[PTR_MAX];
	if (!cJSON_IsObject(d))
		return kc_fail(p->err, KC_BAD_GRAPH, where, "tensor description must be an object");
	const char *tn = jstr(d, "tensor_name");
	subptr(w, "%s/tensor_name", where);
	if (!tn || !*tn)
		return kc_fail(p->err, KC_BAD_GRAPH, w, "missing tensor_name");
	v->tensor_name = arena_strdup(p->a, tn);
	const char *dt = jstr(d, "data_type");
	subptr(w, "%s/data_type", where);
	if (!dt)
		return kc_fail(p->err, KC_BAD_GRAPH, w, "missing data_type");
	KcDtype t = kc_dtype_lookup(dt);
	if (t == KC_DT_COUNT)
		return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w, "unknown dtype '%.64s'", dt);
	if (!kc_dtype_info[t].supported)
		return kc_fail(p->err, KC_UNSUPPORTED_DTYPE, w, "dtype %s is not supported yet",
		               kc_dtype_info[t].name);
	v->dtype = t;
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(d, "format");
	subptr(w, "%s/format", where);
	if (f && !cJSON_IsNull(f)) {
		if (!cJSON_IsString(f))
			return kc_fail(p->err, KC_BAD_GRAPH, w, "format must be a string");
		if (in_list(bad_formats, sizeof bad_formats / sizeof bad_formats[0],
		            f->valuestring))
			return kc_fail(p->err, KC_UNSUPPORTED, w,
			               "format %s (an Ascend fractal layout) is not supported; "
			               "only row-major DefaultFormat/NCHW/NHWC",
			               f->valuestring);
		if (!in_list(ok_formats, sizeof ok_formats / sizeof ok_formats[0], f->valuestring))
			return kc_fail(p->err, KC_UNSUPPORTED, w, "format '%.64s' is not supported",
			               f->valuestring);
	}
	return parse_shape(p, cJSON_GetObjectItemCaseSensitive(d, "shape"), where, v);
}

/* "value": number | bool   (on a TensorDesc of shape [1]) */
static KcStatus
parse_const(Parser *p, const cJSON *val, const char *where, IrValue *v)
{
	char w[PTR_MAX];
	subptr(w, "%s/value", where);
	double x;
	if (cJSON_IsBool(val))
		x = cJSON_IsTrue(val) ? 1 : 0;
	else if (cJSON_IsNumber(val))
		x = val->valuedouble;
	else
		return kc_fail(p->err, KC_BAD_GRAPH, w,
		               "a constant operand must be a number or a bool");
	if (v->rank != 1 || v->shape[0] != 1)
		return kc_fail(p->err, KC_BAD_SHAPE, where,
		               "a scalar constant must have shape [1]");
	if (!parse_const_store(v, v->dtype, x))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "constant %.17g is not representable as %s",
		               x, kc_dtype_info[v->dtype].name);
	return KC_OK;
}

bool
parse_same_shape(const IrValue *a, const IrValue *b)
{
	if (a->rank != b->rank)
		return false;
	for (int d = 0; d < a->rank; d++)
		if (a->shape[d] != b->shape[d])
			return false;
	return true;
}

/* ---- attrs --------------------------------------------------------------- */

static const char *const known_attrs[] = {
#define X(n) #n,
    PARSE_KNOWN_ATTRS(X)
#undef X
};

static void
note_attr(OpAttrs *oa, const char *name, const cJSON *val, const char *w)
{
	if (strcmp(name, "dst_type") == 0) {
		oa->dst_type = val;
		subptr(oa->dst_where, "%s", w);
	} else if (strcmp(name, "shape") == 0) {
		oa->shape = val;
		subptr(oa->shape_where, "%s", w);
	}
	for (size_t i = 0; i < PARSE_NKNOWN; i++)
		if (strcmp(name, known_attrs[i]) == 0) {
			oa->val[i] = val;
			subptr(oa->where[i], "%s", w);
		}
}

/* A known attr's value (or NULL) and its JSON pointer. */
const cJSON *
parse_attr_get(const OpAttrs *oa, const char *name, const char **where)
{
	for (size_t i = 0; i < PARSE_NKNOWN; i++)
		if (strcmp(name, known_attrs[i]) == 0) {
			if (oa->val[i])
				*where = oa->where[i];
			return oa->val[i];
		}
	KC_ASSERT(0 && "attr not in known_attrs");
	return NULL;
}

/* "attr": null | {} | {name: value, ...}
 *       | [ {"name": str, "value": any, "data_type"|"dtype"?: str}, ... ]
 * Only dst_type and shape are looked at; all other attrs are noise here. */
static KcStatus
parse_attrs(Parser *p, const cJSON *attr, const char *where, OpAttrs *oa)
{
	char w[PTR_MAX];
	if (!attr || cJSON_IsNull(attr))
		return KC_OK;
	if (cJSON_IsObject(attr)) {
		for (const cJSON *e = attr->child; e; e = e->next) {
			subptr_key(w, where, e->string);
			note_attr(oa, e->string, e, w);
		}
		return KC_OK;
	}
	if (!cJSON_IsArray(attr))
		return kc_fail(p->err, KC_BAD_GRAPH, where,
		               "attr must be null, an object or a list");
	int k = 0;
	for (const cJSON *e = attr->child; e; e = e->next, k++) {
		subptr(w, "%s/%d", where, k);
		const char *nm = jstr(e, "name");
		if (!cJSON_IsObject(e) || !nm)
			return kc_fail(p->err, KC_BAD_GRAPH, w,
			               "attr entries are {name, value} objects");
		const cJSON *val = cJSON_GetObjectItemCaseSensitive(e, "value");
		subptr(w, "%s/%d/value", where, k);
		if (val)
			note_attr(oa, nm, val, w);
	}
	return KC_OK;
}

/* A list of ints equal to v's shape? (entries < 1 match anything: Reshape
 * may say -1.) */
static bool
shape_list_matches(const cJSON *l, const IrValue *v, bool allow_wild)
{
	if (!cJSON_IsArray(l))
		return false;
	int n = cJSON_GetArraySize(l);
	if (n == 0)
		return v->rank == 1 && v->shape[0] == 1;
	if (n != v->rank)
		return false;
	int d = 0;
	for (const cJSON *e = l->child; e; e = e->next, d++) {
		if (!cJSON_IsNumber(e))
			return false;
		if (allow_wild && e->valuedouble < 1)
			continue;
		if (e->valuedouble != (double)v->shape[d])
			return false;
	}
	return true;
}

/* A dst_type (name string or MindSpore TypeId) equal to dt? */
bool
parse_dst_type_matches(const cJSON *x, KcDtype dt)
{
	if (cJSON_IsString(x))
		return kc_dtype_lookup(x->valuestring) == dt;
	if (cJSON_IsNumber(x))
		return x->valuedouble == kc_dtype_info[dt].type_id;
	return false;
}

/* ---- ops ------------------------------------------------------------------ */

/* A node of `op` with room for its operands and one result value (the
 * caller fills in[], names the result and appends the node). */
static IrNode *
new_node(Parser *p, IrOp op, int json_index)
{
	IrNode *nd = ARENA_NEW(p->a, IrNode);
	nd->op = op;
	nd->json_index = json_index;
	nd->in = ARENA_ARRAY(p->a, IrValue *, ir_op_info[op].arity > 0 ? ir_op_info[op].arity : 1);
	nd->nout = 1;
	nd->out = ARENA_ARRAY(p->a, IrValue *, 1);
	IrValue *v = new_value(p, IRV_OP);
	v->def = nd;
	nd->out[0] = v;
	return nd;
}

static void
append_node(Parser *p, IrNode *nd)
{
	KC_ASSERT(p->g->nnodes < p->maxnodes);
	nd->id = p->g->nnodes;
	p->g->nodes[p->g->nnodes++] = nd;
}

/* Old Ascend files (SelectGT fusion) select on a float mask: cond != 0. */
static IrValue *
mask_to_bool(Parser *p, IrValue *cond, int json_index)
{
	IrValue *zero = new_value(p, IRV_CONST);
	zero->rank = 1;
	zero->shape[0] = 1;
	zero->numel = 1;
	zero->tensor_name = "0";
	(void)parse_const_store(zero, cond->dtype, 0);
	zero->nuses = 1;
	IrNode *ne = new_node(p, IR_OP_NOT_EQUAL, json_index);
	ne->nin = 2;
	ne->in[0] = cond;
	ne->in[1] = zero;
	IrValue *b = ne->out[0];
	b->dtype = KC_DT_BOOL;
	b->rank = cond->rank;
	memcpy(b->shape, cond->shape, sizeof b->shape);
	b->numel = cond->numel;
	b->tensor_name = arena_printf(p->a, "%s:ne0", cond->tensor_name);
	b->nuses = 1;
	append_node(p, ne);
	return b;
}

static KcStatus
refuse_op(Parser *p, const char *name, const char *w)
{
	if (strcmp(name, "Custom") == 0)
		return kc_fail(p->err, KC_UNSUPPORTED_OP, w,
		               "Custom ops carry source code; kcsd never compiles code it is sent");
	if (in_list(later_ops, sizeof later_ops / sizeof later_ops[0], name))
		return kc_fail(p->err, KC_UNSUPPORTED_OP, w, "op %s is not supported yet", name);
	return kc_fail(p->err, KC_UNSUPPORTED_OP, w, "unknown op '%.64s'", name);
}

/* v2 inputs that are really attrs (akg-format.md 4.3): the index popped. */
static int
attr_input(IrOp op)
{
	return op == IR_OP_RESHAPE || op == IR_OP_BROADCAST_TO || op == IR_OP_CAST ? 1 : -1;
}

/* v2 trailing value inputs that become attrs, in order (akg-format 4.3):
 * the names, or NULL for ops without any. */
static const char *const *
attr_inputs(IrOp op, int *n, int *first)
{
	static const char *const axis[] = {"axis"}, *const perm[] = {"perm"};
	static const char *const mult[] = {"multiples"}, *const depth[] = {"depth"};
	static const char *const slice[] = {"begin", "end", "strides"};

	*n = 1;
	*first = ir_op_info[op].arity; /* trailing, except OneHot's depth */
	switch (op) {
	case IR_OP_ONE_HOT: *first = 1; return depth;
	case IR_OP_ELEM_ANY:
	case IR_OP_ELEM_ALL: break;
	case IR_OP_GATHER: return axis;
	case IR_OP_CONCAT:
	case IR_OP_MAT_MUL:
	case IR_OP_BATCH_MAT_MUL:
	case IR_OP_CONV2D:
	case IR_OP_POOL2D: break;
	case IR_OP_ARGMAX:
	case IR_OP_ARGMIN:
	case IR_OP_CUM_SUM:
	case IR_OP_CUM_PROD: return axis;
	case IR_OP_REDUCE_SUM:
	case IR_OP_REDUCE_MAX:
	case IR_OP_REDUCE_MIN:
	case IR_OP_REDUCE_PROD:
	case IR_OP_EXPAND_DIMS: return axis;
	case IR_OP_TRANSPOSE: return perm;
	case IR_OP_TILE: return mult;
	case IR_OP_STRIDED_SLICE: *n = 3; return slice;
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
	case IR_OP_ASSIGN:
	case IR_OP_INPLACE_ASSIGN:
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
	*n = 0;
	return NULL;
}

/* OpDesc: {"name": str, "attr": Attrs, "input_desc": [[TensorDesc], ...],
 *          "output_desc": [TensorDesc], ...noise keys ignored} */
static KcStatus
parse_op(Parser *p, const cJSON *o, int i)
{
	char w[PTR_MAX], wi[PTR_MAX], wo[PTR_MAX];
	KcStatus st;
	subptr(w, "/op_desc/%d", i);
	if (!cJSON_IsObject(o))
		return kc_fail(p->err, KC_BAD_GRAPH, w, "op_desc entries must be objects");
	const char *name = jstr(o, "name");
	subptr(wi, "%s/name", w);
	if (!name)
		return kc_fail(p->err, KC_BAD_GRAPH, wi, "missing op name");
	IrOp op = ir_op_lookup(name);
	if (op == IR_OP_COUNT)
		return refuse_op(p, name, wi);
	const IrOpInfo *oi = &ir_op_info[op];

	OpAttrs oa = {0};
	subptr(wi, "%s/attr", w);
	if ((st = parse_attrs(p, cJSON_GetObjectItemCaseSensitive(o, "attr"), wi, &oa)) != KC_OK)
		return st;

	/* outputs first: Cast/Reshape/BroadcastTo read the declared one */
	const cJSON *od = cJSON_GetObjectItemCaseSensitive(o, "output_desc");
	subptr(wo, "%s/output_desc", w);
	if (cJSON_IsArray(od) && cJSON_GetArraySize(od) > 1) {
		/* a multi-output op (akg-format 3.3: an Array result read through
		 * tuple_getitem): none of AKG's ops that kcsd compiles is one */
		subptr(wo, "%s/output_desc/1", w);
		return kc_fail(p->err, KC_UNSUPPORTED, wo,
		               "%s declares %d outputs; multi-output (tuple) ops are not "
		               "supported, and %s has exactly one",
		               oi->name, cJSON_GetArraySize(od), oi->name);
	}
	if (!cJSON_IsArray(od) || cJSON_GetArraySize(od) != 1)
		return kc_fail(p->err, KC_BAD_GRAPH, wo, "%s has exactly one output", oi->name);
	IrValue decl = {0};
	subptr(wo, "%s/output_desc/0", w);
	if ((st = parse_desc(p, od->child, wo, &decl)) != KC_OK)
		return st;

	const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "input_desc");
	subptr(wi, "%s/input_desc", w);
	if (!cJSON_IsArray(id))
		return kc_fail(p->err, KC_BAD_GRAPH, wi, "input_desc must be a list");
	int n = cJSON_GetArraySize(id);
	int k = 0;
	bool dyn = op == IR_OP_CONCAT || op == IR_OP_ADD_N; /* one dynamic input */
	for (const cJSON *e = id->child; e; e = e->next, k++) {
		char wk[PTR_MAX];
		subptr(wk, "%s/input_desc/%d", w, k);
		if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) < 1)
			return kc_fail(p->err, KC_BAD_GRAPH, wk,
			               "each input is a list of one tensor");
		if (cJSON_GetArraySize(e) > 1 && !dyn)
			return kc_fail(p->err, KC_UNSUPPORTED, wk,
			               "tuple (dynamic) inputs are not supported yet (%s)",
			               oi->name);
	}
	int pop = attr_input(op), nvin = 0, vfirst = 0;
	const char *const *vin = attr_inputs(op, &nvin, &vfirst);
	if (pop < 0 || n != oi->arity + 1)
		pop = -1;
	if (vin && n != oi->arity + nvin)
		vin = NULL;
	if (dyn) {
		/* one dynamic input: a list of the pieces */
		if (n != 1)
			return kc_fail(p->err, KC_BAD_GRAPH, wi,
			               "%s takes one input list of tensors, got %d lists", oi->name,
			               n);
		n = cJSON_GetArraySize(id->child);
	} else if (n != oi->arity && pop < 0 && !vin) {
		return kc_fail(p->err, KC_BAD_GRAPH, wi, "%s takes %d inputs, got %d", oi->name,
		               oi->arity, n);
	}

	IrNode *nd = new_node(p, op, i);
	if (dyn)
		nd->in = ARENA_ARRAY(p->a, IrValue *, n);
	k = 0;
	const cJSON *e = dyn ? id->child->child : id->child;
	for (; e; e = e->next, k++) {
		char wk[PTR_MAX];
		const cJSON *d = e->child;
		if (dyn) {
			subptr(wk, "%s/input_desc/0/%d", w, k);
			d = e;
			if (cJSON_GetObjectItemCaseSensitive(d, "value"))
				return kc_fail(p->err, KC_UNSUPPORTED, wk,
				               "%s pieces must be tensors, not constants",
				               oi->name);
		} else {
			subptr(wk, "%s/input_desc/%d/0", w, k);
		}
		const cJSON *val = cJSON_GetObjectItemCaseSensitive(d, "value");
		if (k == pop) {
			/* the v2 attr input: check it agrees with the output */
			char wv[PTR_MAX];
			subptr(wv, "%s/value", wk);
			if (!val)
				return kc_fail(p->err, KC_BAD_GRAPH, wk,
				               "%s takes %d inputs, got %d", oi->name, oi->arity,
				               n);
			bool okv = op == IR_OP_CAST
			               ? parse_dst_type_matches(val, decl.dtype)
			               : shape_list_matches(val, &decl, op == IR_OP_RESHAPE);
			if (!okv)
				return kc_fail(p->err,
				               op == IR_OP_CAST ? KC_BAD_GRAPH : KC_BAD_SHAPE, wv,
				               "%s %s disagrees with the output", oi->name,
				               op == IR_OP_CAST ? "dst_type" : "shape");
			continue;
		}
		if (vin && k >= vfirst && k < vfirst + nvin) {
			/* a v2 value input that is an attr (axis, perm, begin, ...) */
			char wv[PTR_MAX];
			subptr(wv, "%s/value", wk);
			if (!val)
				return kc_fail(p->err, KC_BAD_GRAPH, wk,
				               "%s input %d must carry a constant \"value\"",
				               oi->name, k);
			note_attr(&oa, vin[k - vfirst], val, wv);
			continue;
		}
		IrValue tmp = {0};
		if ((st = parse_desc(p, d, wk, &tmp)) != KC_OK)
			return st;
		if (nd->nin == 0) {
			oa.in0_format = jstr(d, "format");
			subptr(oa.in0_where, "%s/format", wk);
		}
		IrValue *v;
		if (val) {
			if ((st = parse_const(p, val, wk, &tmp)) != KC_OK)
				return st;
			v = new_value(p, IRV_CONST);
			int vid = v->id;
			*v = tmp;
			v->kind = IRV_CONST;
			v->id = vid;
			v->input_index = -1;
		} else {
			v = *slot(p, tmp.tensor_name);
			if (k == 0 && oi->kind == OPK_ASSIGN && v) {
				/* the destination is the kernel input itself, even
				 * after an earlier in-place write rebound its name */
				NameEnt *ne = entry(p, tmp.tensor_name);
				if (ne->input)
					v = ne->input;
			}
			char wt[PTR_MAX];
			subptr(wt, "%s/tensor_name", wk);
			if (!v)
				return kc_fail(p->err, KC_BAD_GRAPH, wt,
				               "tensor '%.64s' is used before it is defined",
				               tmp.tensor_name);
			if (v->dtype != tmp.dtype) {
				subptr(wt, "%s/data_type", wk);
				return kc_fail(p->err, KC_BAD_GRAPH, wt,
				               "tensor '%.64s' is %s, not %s", tmp.tensor_name,
				               kc_dtype_info[v->dtype].name,
				               kc_dtype_info[tmp.dtype].name);
			}
			if (!parse_same_shape(v, &tmp)) {
				subptr(wt, "%s/shape", wk);
				return kc_fail(p->err, KC_BAD_SHAPE, wt,
				               "shape differs from the definition of '%.64s'",
				               tmp.tensor_name);
			}
		}
		v->nuses++;
		nd->in[nd->nin++] = v;
	}
	KC_ASSERT(nd->nin == (dyn ? n : oi->arity));

	/* attrs that restate the output */
	if (oa.dst_type && op == IR_OP_CAST && !parse_dst_type_matches(oa.dst_type, decl.dtype))
		return kc_fail(p->err, KC_BAD_GRAPH, oa.dst_where,
		               "Cast dst_type disagrees with the output dtype %s",
		               kc_dtype_info[decl.dtype].name);
	if (oa.shape && (op == IR_OP_RESHAPE || op == IR_OP_BROADCAST_TO) &&
	    !shape_list_matches(oa.shape, &decl, op == IR_OP_RESHAPE))
		return kc_fail(p->err, KC_BAD_SHAPE, oa.shape_where,
		               "%s shape attr disagrees with the output shape", oi->name);

	/* the result */
	subptr(wo, "%s/output_desc/0/tensor_name", w);
	IrValue **s = slot(p, decl.tensor_name);
	if (*s)
		return kc_fail(p->err, KC_BAD_GRAPH, wo,
		               (*s)->kind == IRV_INPUT
		                   ? "op output '%.64s' redefines a kernel input"
		                   : "tensor '%.64s' is defined twice",
		               decl.tensor_name);
	IrValue *out = nd->out[0];
	out->tensor_name = decl.tensor_name;
	if (op == IR_OP_SELECT && nd->in[0]->dtype != KC_DT_BOOL)
		nd->in[0] = mask_to_bool(p, nd->in[0], i);
	subptr(wi, "%s/input_desc", w);
	if ((st = parse_infer(p, nd, &decl, &oa, wi)) != KC_OK)
		return st;
	out->numel = 1;
	for (int d = 0; d < out->rank; d++)
		out->numel *= out->shape[d];
	if ((oi->flags & OPF_CMP) && decl.dtype != KC_DT_BOOL) {
		/* a comparison declared as a number (SelectGT files): the bool
		 * result, then Cast to the declared dtype */
		out->tensor_name = arena_printf(p->a, "%s:bool", decl.tensor_name);
		out->nuses = 1;
		append_node(p, nd);
		IrNode *cast = new_node(p, IR_OP_CAST, i);
		cast->nin = 1;
		cast->in[0] = out;
		IrValue *cv = cast->out[0];
		cv->dtype = decl.dtype;
		cv->rank = out->rank;
		memcpy(cv->shape, out->shape, sizeof cv->shape);
		cv->numel = out->numel;
		cv->tensor_name = decl.tensor_name;
		nd = cast;
		out = cv;
	}
	if (out->dtype != decl.dtype) {
		subptr(wo, "%s/output_desc/0/data_type", w);
		return kc_fail(p->err, KC_BAD_GRAPH, wo, "%s produces %s here, not %s", oi->name,
		               kc_dtype_info[out->dtype].name, kc_dtype_info[decl.dtype].name);
	}
	if (!parse_same_shape(out, &decl)) {
		subptr(wo, "%s/output_desc/0/shape", w);
		return kc_fail(p->err, KC_BAD_SHAPE, wo,
		               "declared shape differs from the inferred one");
	}
	*s = out;
	append_node(p, nd);
	/* ops after an in-place write read the new value of its destination */
	if (op == IR_OP_ASSIGN || op == IR_OP_INPLACE_ASSIGN)
		*slot(p, nd->in[0]->tensor_name) = op == IR_OP_ASSIGN ? out : nd->in[1];
	return KC_OK;
}

/* ---- top level ------------------------------------------------------------ */

/* "input_desc": null | [ [TensorDesc], ... ] */
static KcStatus
parse_inputs(Parser *p, const cJSON *id)
{
	IrGraph *g = p->g;
	int i = 0;
	for (const cJSON *e = id ? id->child : NULL; e; e = e->next, i++) {
		char w[PTR_MAX];
		subptr(w, "/input_desc/%d", i);
		if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 1)
			return kc_fail(p->err, KC_BAD_GRAPH, w,
			               "kernel inputs are lists of one tensor description");
		subptr(w, "/input_desc/%d/0", i);
		IrValue tmp = {0};
		KcStatus st = parse_desc(p, e->child, w, &tmp);
		if (st != KC_OK)
			return st;
		IrValue **s = slot(p, tmp.tensor_name);
		if (*s) {
			subptr(w, "/input_desc/%d/0/tensor_name", i);
			return kc_fail(p->err, KC_BAD_GRAPH, w,
			               "kernel input '%.64s' is listed twice", tmp.tensor_name);
		}
		IrValue *v = new_value(p, IRV_INPUT);
		int vid = v->id;
		*v = tmp;
		v->kind = IRV_INPUT;
		v->id = vid;
		v->input_index = i;
		*s = v;
		entry(p, tmp.tensor_name)->input = v;
		g->inputs[g->ninputs++] = v;
	}
	return KC_OK;
}

/* "output_desc": [ TensorDesc, ... ]  (names of op results or inputs) */
static KcStatus
parse_outputs(Parser *p, const cJSON *od)
{
	IrGraph *g = p->g;
	int i = 0;
	for (const cJSON *e = od->child; e; e = e->next, i++) {
		char w[PTR_MAX], wf[PTR_MAX];
		subptr(w, "/output_desc/%d", i);
		IrValue tmp = {0};
		KcStatus st = parse_desc(p, e, w, &tmp);
		if (st != KC_OK)
			return st;
		subptr(wf, "%s/tensor_name", w);
		IrValue *v = *slot(p, tmp.tensor_name);
		if (!v)
			return kc_fail(
			    p->err, KC_BAD_GRAPH, wf,
			    "kernel output '%.64s' is neither an op result nor a kernel input",
			    tmp.tensor_name);
		for (int j = 0; j < g->noutputs; j++)
			if (g->outputs[j] == v)
				return kc_fail(p->err, KC_BAD_GRAPH, wf,
				               "kernel output '%.64s' is listed twice",
				               tmp.tensor_name);
		if (v->dtype != tmp.dtype) {
			subptr(wf, "%s/data_type", w);
			return kc_fail(p->err, KC_BAD_GRAPH, wf, "'%.64s' is %s, not %s",
			               tmp.tensor_name, kc_dtype_info[v->dtype].name,
			               kc_dtype_info[tmp.dtype].name);
		}
		if (!parse_same_shape(v, &tmp)) {
			subptr(wf, "%s/shape", w);
			return kc_fail(p->err, KC_BAD_SHAPE, wf,
			               "shape differs from the definition of '%.64s'",
			               tmp.tensor_name);
		}
		v->nuses++;
		g->outputs[g->noutputs++] = v;
	}
	if (g->noutputs == 0)
		return kc_fail(p->err, KC_BAD_GRAPH, "/output_desc", "the kernel has no outputs");
	return KC_OK;
}

static const char *
dup_str(Parser *p, const cJSON *o, const char *key)
{
	const char *s = jstr(o, key);
	return s ? arena_strdup(p->a, s) : NULL;
}

/* Composite: {"op": str, "process"?: str, "version"?: 0|1|2,
 *   "target_info"?: {"arch", "system", "feature", "cpu", ...},
 *   "compute_capability"?: str (v0), "input_desc": [[TensorDesc]...] | null,
 *   "output_desc": [TensorDesc...], "op_desc": [OpDesc...], ...noise} */
static KcStatus
parse_top(Parser *p, const cJSON *root)
{
	IrGraph *g = p->g;
	if (!cJSON_IsObject(root))
		return kc_fail(p->err, KC_BAD_GRAPH, "", "the body must be a JSON object");
	const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
	if (ver && !cJSON_IsNull(ver)) {
		if (!cJSON_IsNumber(ver) || ver->valuedouble != trunc(ver->valuedouble) ||
		    ver->valuedouble < 0)
			return kc_fail(p->err, KC_BAD_GRAPH, "/version",
			               "version must be 0, 1 or 2");
		if (ver->valuedouble > 2)
			return kc_fail(p->err, KC_UNSUPPORTED, "/version",
			               "composite version %.0f is not supported (0, 1 or 2)",
			               ver->valuedouble);
		g->version = (int)ver->valuedouble;
	}
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(root, "op");
	if (op && !cJSON_IsString(op))
		return kc_fail(p->err, KC_BAD_GRAPH, "/op",
		               "op (the kernel name) must be a string");
	g->name = dup_str(p, root, "op");
	g->process = dup_str(p, root, "process");
	g->compute_capability = dup_str(p, root, "compute_capability");
	const cJSON *ti = cJSON_GetObjectItemCaseSensitive(root, "target_info");
	if (cJSON_IsObject(ti)) {
		g->ti_arch = dup_str(p, ti, "arch");
		g->ti_system = dup_str(p, ti, "system");
		g->ti_feature = dup_str(p, ti, "feature");
		g->ti_cpu = dup_str(p, ti, "cpu");
		if (!g->compute_capability)
			g->compute_capability = dup_str(p, ti, "compute_capability");
	}

	const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "input_desc");
	const cJSON *od = cJSON_GetObjectItemCaseSensitive(root, "output_desc");
	const cJSON *ops = cJSON_GetObjectItemCaseSensitive(root, "op_desc");
	if (id && !cJSON_IsNull(id) && !cJSON_IsArray(id))
		return kc_fail(p->err, KC_BAD_GRAPH, "/input_desc",
		               "input_desc must be a list or null");
	if (!cJSON_IsArray(od))
		return kc_fail(p->err, KC_BAD_GRAPH, "/output_desc", "output_desc must be a list");
	if (!cJSON_IsArray(ops))
		return kc_fail(p->err, KC_BAD_GRAPH, "/op_desc", "op_desc must be a list");
	int nin = cJSON_IsArray(id) ? cJSON_GetArraySize(id) : 0;
	int nout = cJSON_GetArraySize(od);
	int nops = cJSON_GetArraySize(ops);
	if (nops > p->lim.max_ops)
		return kc_fail(p->err, KC_TOO_LARGE, "/op_desc", "%d ops exceed the limit of %d",
		               nops, p->lim.max_ops);
	if (nin > p->lim.max_tensors || nout > p->lim.max_tensors - nin)
		return kc_fail(p->err, KC_TOO_LARGE, "/input_desc",
		               "%d kernel inputs and outputs exceed the limit of %d", nin + nout,
		               p->lim.max_tensors);

	/* everything below is sized by the bounds just checked */
	int maxconst = 0;
	for (const cJSON *o = ops->child; o; o = o->next) {
		const cJSON *oid = cJSON_GetObjectItemCaseSensitive(o, "input_desc");
		int k = cJSON_IsArray(oid) ? cJSON_GetArraySize(oid) : 0;
		maxconst += k < 3 ? k : 3; /* more than 3 is refused before use */
	}
	/* per op: its result, plus at most one synthesised node (a Cast after
	 * a comparison declared non-bool, or cond != 0 before a Select) with
	 * its result and a zero constant */
	p->maxvalues = nin + 3 * nops + maxconst;
	p->maxnodes = 2 * nops;
	unsigned cap = 16;
	while (cap < 2u * (unsigned)(nin + nops) + 16)
		cap *= 2;
	p->tab = ARENA_ARRAY(p->a, NameEnt, cap);
	p->tabmask = cap - 1;
	g->values = ARENA_ARRAY(p->a, IrValue *, p->maxvalues > 0 ? p->maxvalues : 1);
	g->inputs = ARENA_ARRAY(p->a, IrValue *, nin > 0 ? nin : 1);
	g->outputs = ARENA_ARRAY(p->a, IrValue *, nout > 0 ? nout : 1);
	g->nodes = ARENA_ARRAY(p->a, IrNode *, nops > 0 ? 2 * nops : 1);

	/* an op kcsd cannot compile is the answer, whatever else is wrong */
	int i = 0;
	for (const cJSON *o = ops->child; o; o = o->next, i++) {
		const char *name = jstr(o, "name");
		if (name && ir_op_lookup(name) == IR_OP_COUNT) {
			char w[PTR_MAX];
			subptr(w, "/op_desc/%d/name", i);
			return refuse_op(p, name, w);
		}
	}
	KcStatus st = parse_inputs(p, cJSON_IsArray(id) ? id : NULL);
	if (st != KC_OK)
		return st;
	i = 0;
	for (const cJSON *o = ops->child; o; o = o->next, i++)
		if ((st = parse_op(p, o, i)) != KC_OK)
			return st;
	return parse_outputs(p, od);
}

KcStatus
kc_parse(CompileCtx *c, const char *json, size_t len, const KcLimits *lim, KcGraph **out,
         KcErr *err)
{
	*out = NULL;
	Parser p = {.a = c->arena, .err = err};
	if (lim)
		p.lim = *lim;
	if (p.lim.max_ops <= 0)
		p.lim.max_ops = 4096;
	if (p.lim.max_tensors <= 0)
		p.lim.max_tensors = 1024;
	if (p.lim.max_rank <= 0 || p.lim.max_rank > KC_MAX_RANK)
		p.lim.max_rank = KC_MAX_RANK;
	if (p.lim.max_elements <= 0)
		p.lim.max_elements = (int64_t)1 << 31;
	if (p.lim.max_json_tokens <= 0)
		p.lim.max_json_tokens = KC_JSON_TOKENS;
	if (p.lim.max_json_depth <= 0)
		p.lim.max_json_depth = KC_JSON_DEPTH;

	/* bounded before cJSON builds a tree of it (a node per value) */
	KcStatus st =
	    kc_json_scan(json, len, p.lim.max_json_tokens, p.lim.max_json_depth, NULL, err);
	if (st != KC_OK)
		return st;
	cJSON *root = cJSON_ParseWithLength(json, len);
	if (!root)
		return kc_fail(err, KC_BAD_JSON, "", "the body is not valid JSON");
	p.g = ARENA_NEW(p.a, IrGraph);
	st = parse_top(&p, root);
	cJSON_Delete(root);
	if (st != KC_OK) {
		/* a status without a record would be a bug above */
		KC_ASSERT(!err || err->status != KC_OK);
		return st;
	}
	/* the budget kc_compile holds this graph to; parsing itself reads
	 * each op, operand and output once (a hash table resolves names) */
	kc_work_init(&c->work, &p.lim);
	p.g->work = &c->work;
	c->work.n[KC_WORK_PARSE] = p.g->nnodes + p.g->noutputs;
	for (int n = 0; n < p.g->nnodes; n++)
		c->work.n[KC_WORK_PARSE] += p.g->nodes[n]->nin;
	*out = p.g;
	return KC_OK;
}
