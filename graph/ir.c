/* ir.c - the op and dtype tables, compile contexts, the public graph
 * accessors and the textual graph dump.
 *
 * The tables are generated from ops.def and dtypes.def (X-macros), so a row
 * added there appears here without edits. Aliases of MindSpore op names
 * (TensorAdd -> Add) live in a small table below, not in ops.def.
 * ir_graph_print() writes one line per value, e.g.
 *   %3 = Add(%0, 0x1p-1:float32) : float32[16,768]
 * and is stable: the same graph always prints the same text.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

const IrOpInfo ir_op_info[IR_OP_COUNT] = {
#define X(e, nm, ar, kd, fl) [IR_OP_##e] = {nm, ar, kd, fl},
#include "ops.def"
#undef X
};

const KcDtypeInfo kc_dtype_info[KC_DT_COUNT] = {
#define D(e, nm, by, cl, tid, sup) [KC_DT_##e] = {nm, by, cl, tid, sup},
#include "dtypes.def"
#undef D
};

/* Old or alternative MindSpore spellings of ops in ops.def. */
static const struct {
	const char *alias;
	IrOp op;
} op_aliases[] = {
    {"TensorAdd", IR_OP_ADD}, {"ArgMax", IR_OP_ARGMAX}, /* akg-mlir and MindSpore's cluster list */
    {"ArgMin", IR_OP_ARGMIN}, {"ASin", IR_OP_ASIN},     /* akg-mlir */
    {"Acos", IR_OP_ACOS},
};

IrOp
ir_op_lookup(const char *name)
{
	if (!name)
		return IR_OP_COUNT;
	for (int i = 0; i < IR_OP_COUNT; i++)
		if (strcmp(ir_op_info[i].name, name) == 0)
			return (IrOp)i;
	for (size_t i = 0; i < sizeof op_aliases / sizeof op_aliases[0]; i++)
		if (strcmp(op_aliases[i].alias, name) == 0)
			return op_aliases[i].op;
	return IR_OP_COUNT;
}

KcDtype
kc_dtype_lookup(const char *name)
{
	if (!name)
		return KC_DT_COUNT;
	for (int i = 0; i < KC_DT_COUNT; i++)
		if (strcmp(kc_dtype_info[i].name, name) == 0)
			return (KcDtype)i;
	return KC_DT_COUNT;
}

/* ---- contexts ----------------------------------------------------------- */

CompileCtx *
compile_ctx_new(void)
{
	CompileCtx *c = kc_xcalloc(1, sizeof *c);
	c->arena = arena_new(64 * 1024);
	return c;
}

void
compile_ctx_free(CompileCtx *c)
{
	if (!c)
		return;
	arena_free(c->arena);
	free(c);
}

Arena *
compile_ctx_arena(CompileCtx *c)
{
	KC_ASSERT(c);
	return c->arena;
}

/* ---- public graph accessors ---------------------------------------------- */

const char *
kc_graph_name(const KcGraph *g)
{
	return g->name ? g->name : "";
}

int
kc_graph_nargs(const KcGraph *g)
{
	return g->ninputs + g->noutputs;
}

void
kc_graph_arg(const KcGraph *g, int i, KcArgInfo *out)
{
	KC_ASSERT(i >= 0 && i < g->ninputs + g->noutputs);
	const IrValue *v = i < g->ninputs ? g->inputs[i] : g->outputs[i - g->ninputs];
	memset(out, 0, sizeof *out);
	out->index = i;
	out->is_output = i >= g->ninputs;
	out->tensor_name = v->tensor_name;
	out->dtype = kc_dtype_info[v->dtype].name;
	out->rank = v->rank;
	out->shape = v->shape;
	out->writes_input = -1;
	if (out->is_output && v->kind == IRV_OP && ir_op_info[v->def->op].kind == OPK_ASSIGN)
		out->writes_input = v->def->in[0]->input_index;
}

/* ---- dump ----------------------------------------------------------------- */

static void
put_type(KcBuf *b, const IrValue *v)
{
	kc_buf_printf(b, "%s[", kc_dtype_info[v->dtype].name);
	for (int d = 0; d < v->rank; d++)
		kc_buf_printf(b, "%s%" PRId64, d ? "," : "", v->shape[d]);
	kc_buf_putc(b, ']');
}

static void
put_operand(KcBuf *b, const IrValue *v)
{
	if (v->kind != IRV_CONST) {
		kc_buf_printf(b, "%%%d", v->id);
		return;
	}
	if (kc_dtype_info[v->dtype].cls == DTC_FLOAT)
		kc_buf_printf(b, "%a:%s", v->fval, kc_dtype_info[v->dtype].name);
	else
		kc_buf_printf(b, "%" PRId64 ":%s", v->ival, kc_dtype_info[v->dtype].name);
}

void
ir_graph_print(const IrGraph *g, KcBuf *out)
{
	kc_buf_printf(out, "graph %s version %d process %s\n", kc_graph_name(g), g->version,
	              g->process ? g->process : "-");
	for (int i = 0; i < g->ninputs; i++) {
		const IrValue *v = g->inputs[i];
		kc_buf_printf(out, "input %d %%%d ", i, v->id);
		put_type(out, v);
		kc_buf_puts(out, " ; ");
		kc_buf_puts(out, v->tensor_name ? v->tensor_name : "?");
		kc_buf_putc(out, '\n');
	}
	for (int n = 0; n < g->nnodes; n++) {
		const IrNode *nd = g->nodes[n];
		for (int o = 0; o < nd->nout; o++)
			kc_buf_printf(out, "%s%%%d", o ? ", " : "", nd->out[o]->id);
		kc_buf_printf(out, " = %s(", ir_op_info[nd->op].name);
		for (int k = 0; k < nd->nin; k++) {
			if (k)
				kc_buf_puts(out, ", ");
			put_operand(out, nd->in[k]);
		}
		kc_buf_putc(out, ')');
		if (nd->op == IR_OP_CONV2D) {
			const IrAttrs *a = &nd->attrs;
			kc_buf_printf(out,
			              " {%s stride %" PRId64 ",%" PRId64 " dilation %" PRId64
			              ",%" PRId64 " pad %" PRId64 ",%" PRId64 ",%" PRId64
			              ",%" PRId64 " groups %" PRId64 "}",
			              a->nhwc ? "NHWC" : "NCHW", a->stride[0], a->stride[1],
			              a->dilation[0], a->dilation[1], a->pad[0], a->pad[1],
			              a->pad[2], a->pad[3], a->groups);
		}
		kc_buf_puts(out, " : ");
		for (int o = 0; o < nd->nout; o++) {
			if (o)
				kc_buf_puts(out, ", ");
			put_type(out, nd->out[o]);
		}
		kc_buf_putc(out, '\n');
	}
	for (int i = 0; i < g->noutputs; i++)
		kc_buf_printf(out, "output %d = %%%d\n", i, g->outputs[i]->id);
}
