/* canon.c - the canonical form of a parsed graph and its workload_key.
 *
 * The form names nothing the client chose: kernel inputs are i<k> by
 * position, constants are "c:<dtype>:<exact value>" (C99 %a hex floats
 * for float dtypes, decimal for integers), and node results are n<k>.<out>
 * where k is the node's index in a depth-first post-order walk that starts
 * from the kernel outputs in order and visits operands in order. That walk
 * depends only on the dataflow, so renaming tensors or reordering
 * independent op_desc entries changes nothing; after the outputs, the walk
 * also starts from every Assign/InplaceAssign (their write into a kernel
 * input is a result); other ops that no output reaches are dead and left
 * out. Ops with semantic attrs carry them normalised, keys sorted, e.g.
 * "attrs":{"axis":[1],"keep_dims":true} (reductions), {"perm":[...]},
 * {"multiples":[...]}, {"begin":[...],"shrink_axis_mask":n,"strides":[...]}
 * (StridedSlice normalised per input dim, ellipsis expanded, strides may be
 * negative, plus "new_axes":bits-of-output-dims when new_axis_mask made any),
 * {"axis":[a],"depth":d} (OneHot), {"axis":[a]} (Argmax/Argmin),
 * {"axis":[a],"exclusive":b,"reverse":b} (CumSum/CumProd),
 * {"kernel":[h,w],"layout":L,"pad":[t,b,l,r],"pool_type":T,"stride":[h,w]}
 * (Pool2D); noise attrs never appear.
 * Example (compact JSON, no spaces):
 *   {"kcs_workload":1,"inputs":[["float32",[16,768]]],
 *    "nodes":[{"op":"Add","in":["i0","c:float32:0x1p-1"],
 *              "out":[["float32",[16,768]]]}],"outputs":["n0.0"]}
 * workload_key = SHA-256 of exactly these bytes.
 */
#include <inttypes.h>
#include <string.h>

#include "graph.h"

static void
put_type(KcBuf *b, const IrValue *v)
{
	kc_buf_printf(b, "[\"%s\",[", kc_dtype_info[v->dtype].name);
	for (int d = 0; d < v->rank; d++)
		kc_buf_printf(b, "%s%" PRId64, d ? "," : "", v->shape[d]);
	kc_buf_puts(b, "]]");
}

static void
put_list(KcBuf *b, const char *key, const int64_t *l, int n)
{
	kc_buf_printf(b, "\"%s\":[", key);
	for (int i = 0; i < n && i < KC_MAX_RANK; i++)
		kc_buf_printf(b, "%s%" PRId64, i ? "," : "", l[i]);
	kc_buf_putc(b, ']');
}

/* Semantic attrs (normalised by the parser: sorted axes, full perm, ...),
 * keys sorted; ops without any (elementwise, Assign) carry no "attrs" key,
 * so the forms of the elementwise slice are unchanged. */
static void
put_attrs(KcBuf *b, const IrNode *nd)
{
	const IrAttrs *a = &nd->attrs;

	switch (ir_op_info[nd->op].kind) {
	case OPK_REDUCE:
		kc_buf_puts(b, ",\"attrs\":{");
		put_list(b, "axis", a->axis, a->naxis);
		kc_buf_printf(b, ",\"keep_dims\":%s}", a->keep_dims ? "true" : "false");
		return;
	case OPK_LAYOUT:
		if (nd->op == IR_OP_EXPAND_DIMS) {
			kc_buf_puts(b, ",\"attrs\":{");
			put_list(b, "axis", a->axis, a->naxis);
			kc_buf_putc(b, '}');
		} else if (nd->op == IR_OP_TRANSPOSE || nd->op == IR_OP_TILE) {
			kc_buf_puts(b, ",\"attrs\":{");
			put_list(b, nd->op == IR_OP_TRANSPOSE ? "perm" : "multiples", a->list,
			         a->nlist);
			kc_buf_putc(b, '}');
		} else if (nd->op == IR_OP_ONE_HOT) {
			kc_buf_puts(b, ",\"attrs\":{");
			put_list(b, "axis", a->axis, a->naxis);
			kc_buf_printf(b, ",\"depth\":%" PRId64 "}", a->list[0]);
		} else if (nd->op == IR_OP_GATHER || nd->op == IR_OP_CONCAT) {
			kc_buf_puts(b, ",\"attrs\":{");
			put_list(b, "axis", a->axis, a->naxis);
			kc_buf_putc(b, '}');
		} else if (nd->op == IR_OP_STRIDED_SLICE) {
			kc_buf_puts(b, ",\"attrs\":{");
			put_list(b, "begin", a->begin, a->nlist);
			if (a->new_axes) /* output dims; absent when none (older keys) */
				kc_buf_printf(b, ",\"new_axes\":%u", a->new_axes);
			kc_buf_printf(b, ",\"shrink_axis_mask\":%u,", a->shrink);
			put_list(b, "strides", a->strides, a->nlist);
			kc_buf_putc(b, '}');
		}
		return;
	case OPK_MATMUL:
		kc_buf_printf(b, ",\"attrs\":{\"transpose_a\":%s,\"transpose_b\":%s}",
		              a->trans_a ? "true" : "false", a->trans_b ? "true" : "false");
		return;
	case OPK_CONV:
		/* the resolved layout, pads, stride and dilation: spelling (pad vs
		 * pad_list, pad_mode, stale format attrs) does not change the key */
		kc_buf_puts(b, ",\"attrs\":{");
		put_list(b, "dilation", a->dilation, 2);
		kc_buf_printf(b, ",\"groups\":%" PRId64 ",\"layout\":\"%s\",", a->groups,
		              a->nhwc ? "NHWC" : "NCHW");
		put_list(b, "pad", a->pad, 4);
		kc_buf_putc(b, ',');
		put_list(b, "stride", a->stride, 2);
		kc_buf_putc(b, '}');
		return;
	case OPK_ARG:
		kc_buf_puts(b, ",\"attrs\":{");
		put_list(b, "axis", a->axis, a->naxis);
		kc_buf_putc(b, '}');
		return;
	case OPK_SCAN:
		kc_buf_puts(b, ",\"attrs\":{");
		put_list(b, "axis", a->axis, a->naxis);
		kc_buf_printf(b, ",\"exclusive\":%s,\"reverse\":%s}",
		              a->exclusive ? "true" : "false", a->reverse ? "true" : "false");
		return;
	case OPK_POOL:
		/* resolved: global is its kernel, stride 1, no pads; round_mode
		 * is in the output shape; pad spelling (one int or four) is gone */
		kc_buf_puts(b, ",\"attrs\":{");
		put_list(b, "kernel", a->kernel, 2);
		kc_buf_printf(b, ",\"layout\":\"%s\",", a->nhwc ? "NHWC" : "NCHW");
		put_list(b, "pad", a->pad, 4);
		kc_buf_printf(b, ",\"pool_type\":\"%s\",", a->pool_max ? "max" : "avg");
		put_list(b, "stride", a->stride, 2);
		kc_buf_putc(b, '}');
		return;
	case OPK_ELEMWISE:
	case OPK_ASSIGN: return;
	}
}

/* A value's canonical reference; canon[] holds node indices (or -1). */
static void
put_ref(KcBuf *b, const IrValue *v, const int *canon)
{
	switch (v->kind) {
	case IRV_INPUT: kc_buf_printf(b, "\"i%d\"", v->input_index); return;
	case IRV_CONST:
		if (kc_dtype_info[v->dtype].cls == DTC_FLOAT)
			kc_buf_printf(b, "\"c:%s:%a\"", kc_dtype_info[v->dtype].name, v->fval);
		else if (v->dtype == KC_DT_UINT64)
			kc_buf_printf(b, "\"c:%s:%" PRIu64 "\"", kc_dtype_info[v->dtype].name,
			              (uint64_t)v->ival);
		else
			kc_buf_printf(b, "\"c:%s:%" PRId64 "\"", kc_dtype_info[v->dtype].name,
			              v->ival);
		return;
	case IRV_OP:
		KC_ASSERT(canon[v->def->id] >= 0);
		kc_buf_printf(b, "\"n%d.%d\"", canon[v->def->id], v->def_out);
		return;
	}
	KC_ASSERT(0 && "bad value kind");
}

/* Number the nodes reachable from the outputs in DFS post-order; order[]
 * receives them, canon[node id] their index. Iterative: depth is bounded
 * only by the op count. Returns how many were numbered. */
static int
number_nodes(Arena *a, const IrGraph *g, int *canon, const IrNode **order)
{
	int n = 0, sp = 0;
	const IrNode **stk = ARENA_ARRAY(a, const IrNode *, g->nnodes + 1);
	int *next = ARENA_ARRAY(a, int, g->nnodes + 1);
	bool *seen = ARENA_ARRAY(a, bool, g->nnodes + 1);
	/* roots: the kernel outputs, then in-place writes (whose effect is a
	 * result even when no output refers to them), in graph order */
	for (int o = 0; o < g->noutputs + g->nnodes; o++) {
		const IrNode *root;
		if (o < g->noutputs) {
			const IrValue *ov = g->outputs[o];
			if (ov->kind != IRV_OP)
				continue;
			root = ov->def;
		} else {
			root = g->nodes[o - g->noutputs];
			if (ir_op_info[root->op].kind != OPK_ASSIGN)
				continue;
		}
		if (seen[root->id])
			continue;
		seen[root->id] = true;
		stk[sp] = root;
		next[sp++] = 0;
		while (sp > 0) {
			const IrNode *nd = stk[sp - 1];
			if (next[sp - 1] < nd->nin) {
				const IrValue *v = nd->in[next[sp - 1]++];
				if (v->kind == IRV_OP && !seen[v->def->id]) {
					seen[v->def->id] = true;
					stk[sp] = v->def;
					next[sp++] = 0;
				}
				continue;
			}
			canon[nd->id] = n;
			order[n++] = nd;
			sp--;
		}
	}
	return n;
}

void
kc_workload(CompileCtx *c, const KcGraph *g, KcWorkload *out)
{
	Arena *a = c->arena;
	int *canon = ARENA_ARRAY(a, int, g->nnodes + 1);
	const IrNode **order = ARENA_ARRAY(a, const IrNode *, g->nnodes + 1);
	for (int i = 0; i < g->nnodes; i++)
		canon[i] = -1;
	int n = number_nodes(a, g, canon, order);
	/* the walk pushes each node once and reads each operand once */
	g->work->n[KC_WORK_CANON] += n;
	for (int k = 0; k < n; k++)
		g->work->n[KC_WORK_CANON] += order[k]->nin;

	KcBuf b = {0};
	kc_buf_printf(&b, "{\"kcs_workload\":%d,\"inputs\":[", KC_WORKLOAD_FORMAT);
	for (int i = 0; i < g->ninputs; i++) {
		if (i)
			kc_buf_putc(&b, ',');
		put_type(&b, g->inputs[i]);
	}
	kc_buf_puts(&b, "],\"nodes\":[");
	for (int k = 0; k < n; k++) {
		const IrNode *nd = order[k];
		kc_buf_printf(&b, "%s{\"op\":\"%s\",\"in\":[", k ? "," : "",
		              ir_op_info[nd->op].name);
		for (int j = 0; j < nd->nin; j++) {
			if (j)
				kc_buf_putc(&b, ',');
			put_ref(&b, nd->in[j], canon);
		}
		kc_buf_putc(&b, ']');
		put_attrs(&b, nd);
		kc_buf_puts(&b, ",\"out\":[");
		for (int j = 0; j < nd->nout; j++) {
			if (j)
				kc_buf_putc(&b, ',');
			put_type(&b, nd->out[j]);
		}
		kc_buf_puts(&b, "]}");
	}
	kc_buf_puts(&b, "],\"outputs\":[");
	for (int o = 0; o < g->noutputs; o++) {
		if (o)
			kc_buf_putc(&b, ',');
		put_ref(&b, g->outputs[o], canon);
	}
	kc_buf_puts(&b, "]}");

	out->canonical = arena_strndup(a, b.data, b.len);
	out->canonical_len = b.len;
	kc_sha256(b.data, b.len, &out->key);
	kc_buf_free(&b);
}
