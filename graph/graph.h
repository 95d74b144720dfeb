/* graph.h - the graph layer: the op and dtype tables, the typed dataflow
 * graph (IrGraph) every pass starts from, and the prototypes of each graph
 * file (parse, shapes, canonical form, interpreter). Read it as the table
 * of contents of graph/. It knows nothing of loops or LLVM; the loop-nest
 * IR built from it is in loop/loop.h.
 *
 * Ownership: everything reachable from an IrGraph lives in the CompileCtx
 * arena. Nothing here is freed individually; nothing is shared between
 * contexts; nothing is mutable at file scope.
 */
#ifndef KCS_GRAPH_H
#define KCS_GRAPH_H

#include "compiler.h"

/* ---- ops (ops.def) ------------------------------------------------------ */
typedef enum IrOpKind {
	OPK_ELEMWISE, /* pointwise over numpy-broadcast operands */
	OPK_LAYOUT,   /* pure index remapping (Reshape, BroadcastTo, Transpose, ...) */
	OPK_REDUCE,   /* ReduceSum/Max/Min/Prod over attrs.axis */
	OPK_ASSIGN,   /* Assign(dst, src), InplaceAssign(dst, src, depend) */
	OPK_MATMUL,   /* MatMul/BatchMatMul: [..., M, K] x [..., K, N] */
	OPK_CONV,     /* Conv2D: NHWC/NCHW data, OHWI/OIHW weight */
	OPK_ARG,      /* Argmax/Argmin over attrs.axis[0]: an integer index */
	OPK_SCAN,     /* CumSum/CumProd along attrs.axis[0] */
	OPK_POOL,     /* Pool2D: max/avg over 2-D windows, NHWC/NCHW */
} IrOpKind;

enum {
	OPF_COMMUTATIVE = 1u << 0,
	OPF_CMP = 1u << 1,        /* result is bool */
	OPF_LOGICAL = 1u << 2,    /* operands are bool */
	OPF_FLOAT_ONLY = 1u << 3, /* refused on integer/bool operands */
	OPF_COSTLY = 1u << 4,     /* tens of instructions per element (a polynomial,
	                             a range reduction): lowering stores a value with
	                             it once rather than recompute it in two stages */
};

typedef enum IrOp {
#define X(e, name, ar, kind, fl) IR_OP_##e,
#include "ops.def"
#undef X
	IR_OP_COUNT
} IrOp;

typedef struct IrOpInfo {
	const char *name; /* MindSpore primitive name */
	int arity;        /* tensor inputs; -1 variadic */
	IrOpKind kind;
	unsigned flags; /* OPF_* */
} IrOpInfo;

extern const IrOpInfo ir_op_info[IR_OP_COUNT]; /* const: not mutable state */

/* ---- dtypes (dtypes.def) ------------------------------------------------ */
typedef enum KcDtypeClass { DTC_BOOL, DTC_INT, DTC_UINT, DTC_FLOAT, DTC_COMPLEX } KcDtypeClass;

typedef enum KcDtype {
#define D(e, name, bytes, cls, tid, sup) KC_DT_##e,
#include "dtypes.def"
#undef D
	KC_DT_COUNT
} KcDtype;

typedef struct KcDtypeInfo {
	const char *name;
	int bytes;
	KcDtypeClass cls;
	int type_id; /* MindSpore TypeId */
	bool supported;
} KcDtypeInfo;

extern const KcDtypeInfo kc_dtype_info[KC_DT_COUNT];

/* ---- the typed dataflow graph -------------------------------------------
 * Values are SSA tensors: a kernel input, an inline scalar constant, or the
 * result of a node. Shapes are static, row-major, rank >= 1 (a scalar is
 * [1]); numel never overflows (checked by the parser against KcLimits). */
typedef enum IrValueKind { IRV_INPUT, IRV_CONST, IRV_OP } IrValueKind;

typedef struct IrNode IrNode;
typedef struct IrGraph IrGraph; /* == KcGraph (compiler.h) */

typedef struct IrValue {
	IrValueKind kind;
	int id; /* dense index into IrGraph.values */
	KcDtype dtype;
	int rank;
	int64_t shape[KC_MAX_RANK];
	int64_t numel;
	const char *tensor_name; /* as written in the request */
	int input_index;         /* IRV_INPUT: position in the kernel's input_desc; else -1 */
	/* IRV_CONST: the value, already rounded to `dtype` (fval for float
	 * dtypes, ival for integer and bool dtypes). */
	double fval;
	int64_t ival;
	IrNode *def; /* IRV_OP: producing node */
	int def_out; /* IRV_OP: which output of `def` */
	int nuses;   /* node operands + kernel outputs referring to it */
} IrValue;

/* Semantic attributes, normalised by the parser (noise attrs dropped).
 * Elementwise ops carry none: Cast's dst_type, Reshape's and BroadcastTo's
 * shape are the output's dtype/shape.
 *   Reduce*     axis: sorted, distinct, in [0, rank) ([] / absent = all);
 *               keep_dims
 *   ExpandDims  axis[0] in [0, rank] of the output
 *   Transpose   list = perm (out dim k reads input dim perm[k])
 *   Tile        list = multiples, one per output dim
 *   StridedSlice begin/strides per input dim (normalised: begin is the
 *               first index read, strides non-zero; a negative stride
 *               walks down from begin), shrink = the input dims that
 *               shrink_axis_mask drops from the output (begin is the index
 *               read), new_axes = the output dims that new_axis_mask
 *               inserts (size 1, no input dim); ellipsis_mask is expanded
 *               away
 *   OneHot      axis[0] = the new dim's position in the output, list[0] =
 *               depth
 *   Gather      axis[0] in [0, rank of params)
 *   Concat      axis[0] in [0, rank)
 *   MatMul      trans_a, trans_b (the output dtype is dst_type)
 *   Conv2D      nhwc (data NHWC + weight [O,KH,KW,I]; else NCHW + [O,I,KH,KW]),
 *               stride[2] and dilation[2] as (H, W), pad[4] as (top, bottom,
 *               left, right), groups (divides Cin and O; weight I = Cin/groups);
 *               the output dtype is dst_type
 *   Argmax/Argmin axis[0] in [0, rank) (dropped from the output); the
 *               output dtype (int32/int64) is the declared one
 *   CumSum/CumProd axis[0] in [0, rank), exclusive, reverse
 *   Pool2D      nhwc, pool_max (else avg), kernel[2] and stride[2] as (H, W),
 *               pad[4] as (top, bottom, left, right); global pooling is
 *               normalised to kernel = (H, W), stride 1, pad 0 */
typedef struct IrAttrs {
	int naxis;
	int64_t axis[KC_MAX_RANK];
	bool keep_dims;
	int nlist;
	int64_t list[KC_MAX_RANK];
	int64_t begin[KC_MAX_RANK], strides[KC_MAX_RANK];
	unsigned shrink;
	unsigned new_axes; /* StridedSlice: bit d = output dim d is a new axis */
	bool trans_a, trans_b;
	bool nhwc;
	int64_t stride[2], dilation[2], pad[4], groups;
	/* CumSum/CumProd, Pool2D */
	bool exclusive, reverse;
	bool pool_max;
	int64_t kernel[2];
} IrAttrs;

struct IrNode {
	IrOp op;
	int id;         /* position in IrGraph.nodes */
	int json_index; /* index in the request's op_desc, for error pointers */
	int nin;
	IrValue **in;
	int nout;
	IrValue **out;
	IrAttrs attrs;
};

/* ---- work counters and the work budget (work.def, work.c) ----------------
 * Every pass over a DAG counts its steps into the compile's KcWork, which
 * also holds the budget (KcLimits' work fields, defaults resolved): a walk
 * that visits each node once counts a small multiple of the nodes, and a
 * count over its limit is KC_WORK_BUDGET (422) naming the pass and the
 * limit. Lives in the CompileCtx; the graph and the loop nest point to it. */
typedef enum KcWorkKind { WK_NODES, WK_STAGES, WK_INSNS } KcWorkKind;

typedef enum KcWorkCounter {
#define W(e, sec, pass, kind) KC_WORK_##e,
#include "work.def"
#undef W
	KC_WORK_COUNT
} KcWorkCounter;

typedef struct KcWork {
	int64_t n[KC_WORK_COUNT];
	int64_t max_nodes, max_stages, max_insns; /* resolved: never 0 */
} KcWork;

struct IrGraph {
	const char *name;    /* top-level "op" */
	const char *process; /* "cpu", "cuda", "aicore" or NULL */
	int version;         /* 0, 1 or 2 */
	/* target_info (v1+); each field NULL when absent */
	const char *ti_arch, *ti_system, *ti_feature, *ti_cpu;
	const char *compute_capability;
	int ninputs;
	IrValue **inputs; /* kernel input_desc order */
	int noutputs;
	IrValue **outputs; /* kernel output_desc order; may repeat an input */
	int nnodes;
	IrNode **nodes; /* topological order */
	int nvalues;
	IrValue **values;
	KcWork *work; /* the counters of the CompileCtx that parsed it */
};

struct CompileCtx {
	Arena *arena;
	KcWork work; /* set up by kc_parse from its limits */
};

/* ---- ir.c: tables, contexts, graph dump ---------------------------------- */
/* Returns IR_OP_COUNT if `name` is not an op; resolves aliases (TensorAdd). */
IrOp ir_op_lookup(const char *name);
/* Returns KC_DT_COUNT if unknown. */
KcDtype kc_dtype_lookup(const char *name);
/* Textual dump of the graph (pass "graph"). */
void ir_graph_print(const IrGraph *g, KcBuf *out);

/* ---- work.c: the work counters -------------------------------------------- */
/* The budget of lim (NULL or zero fields: the defaults, which scale with
 * the resolved max_ops), every counter 0. */
void kc_work_init(KcWork *w, const KcLimits *lim);
/* Counts one step of WK_NODES counter k; false once the count is over
 * max_nodes (the walk may stop: kc_work_fail says why). */
static inline bool
kc_work_visit(KcWork *w, KcWorkCounter k)
{
	return ++w->n[k] <= w->max_nodes;
}
/* KC_WORK_BUDGET for counter k, where its pass, the message naming the
 * count and the limit it passed. */
KcStatus kc_work_fail(const KcWork *w, KcWorkCounter k, KcErr *err);
/* Checks counter k (KC_OK within its limit, else kc_work_fail). */
KcStatus kc_work_check(const KcWork *w, KcWorkCounter k, KcErr *err);
/* Zeroes the counters printed in the sections from `from` on (what one
 * kc_compile counts), keeping the graph's. */
void kc_work_reset(KcWork *w, KcPass from);
/* Appends the section's line: "; work: lower=12 collapse=3 stages=1 ...". */
void kc_work_print(const KcWork *w, KcPass section, KcBuf *out);

/* ---- parse.c: composite JSON -> IrGraph ---------------------------------- */
/* (kc_parse in compiler.h) */

/* ---- canon.c: canonical form, workload_key ------------------------------- */
/* (kc_workload in compiler.h) */

/* ---- target.c: target names -> KcTarget ---------------------------------- */
/* (kc_target_* in compiler.h) */

/* ---- interp.c: the reference interpreter (reads the IrGraph only) -------- */
/* (kc_interp, kc_interp_half_upstream, kc_interp_random_inputs in compiler.h) */

/* ---- mshash.c: MindSpore's kernel-name hash of a body --------------------- */
/* (kc_hash_bytes, kc_ms_hash in compiler.h) */

#endif /* KCS_GRAPH_H */
