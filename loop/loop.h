/* loop.h - the loop layer: the loop-nest IR (a small TIR), schedules, and
 * the prototypes of every pass that builds or transforms it, by file. It
 * knows nothing of LLVM: the emitters that read it are in cpu/.
 *
 * A LoopNest is a list of buffers (kernel args; later workspaces) and
 * stages run in order. A stage is a perfect loop nest whose body is a list
 * of stores `buf[index] = expr`. Exprs form a DAG (shared subexpressions are
 * one node); index expressions are quasi-affine (var, const, +, *const,
 * /const, %const) and are only ever built through the simplifying
 * constructors ln_idx_*, so structurally equal indices compare equal.
 * Everything lives in the CompileCtx arena.
 *
 * Pipeline: lower.c builds it, verify.c checks it, sched.c and fuse.c
 * annotate and transform it (vectorise, unroll, parallel, tile, fuse); a
 * backend (cpu/) turns it into an LLVM module, llvm/ into an object and
 * link/ into a shared object. compiler/compile.c strings them together.
 */
#ifndef KCS_LOOP_H
#define KCS_LOOP_H

#include "graph.h"

/* ---- index expressions ------------------------------------------------ */
/* RSUB is c - a with 0 <= a <= c (a reversed walk, StridedSlice with a
 * negative stride); the simplifier treats it as an opaque non-negative leaf,
 * like DIV and MOD, so every index stays non-negative. */
typedef enum LnIdxKind {
	LNI_CONST,
	LNI_VAR,
	LNI_ADD,
	LNI_MUL,
	LNI_DIV,
	LNI_MOD,
	LNI_RSUB
} LnIdxKind;

typedef struct LnIdx LnIdx;
struct LnIdx {
	LnIdxKind kind;
	int64_t c;    /* CONST: value; MUL/DIV/MOD: the constant right operand */
	int var;      /* VAR */
	LnIdx *a, *b; /* ADD: a + b; MUL/DIV/MOD: a op c; RSUB: c - a */
	int64_t max;  /* ln_idx_max, set when the node is made (its operands and
	               * var extents never change after), so asking for a bound
	               * never walks the tree */
};

/* ---- value expressions -------------------------------------------------- */
typedef enum LnExprKind { LNE_CONST, LNE_LOAD, LNE_OP, LNE_INDEX } LnExprKind;

typedef struct LnExpr LnExpr;
struct LnExpr {
	LnExprKind kind;
	int id;        /* dense per LoopNest, for memo tables */
	KcDtype dtype; /* storage dtype of the result */
	/* CONST */
	double fval;
	int64_t ival;
	/* LOAD: buf[idx], or, when dyn is set (a data-dependent load: Gather),
	 * buf[idx + clamp(dyn, 0, dyn_extent - 1) * dyn_stride] where dyn is an
	 * integer expression. INDEX: the value of idx as dtype (an integer;
	 * OneHot compares with it). */
	int buf;
	LnIdx *idx;
	struct LnExpr *dyn;
	int64_t dyn_stride, dyn_extent;
	/* OP: an elementwise IrOp (never a layout op), incl. CAST and SELECT */
	IrOp op;
	int nargs;
	LnExpr *args[3];
};

/* ---- buffers, loops, stages ---------------------------------------------- */
/* A buffer: a kernel argument (arg >= 0) or a workspace (arg == -1) that
 * the entry allocates with rt->alloc (malloc when rt is NULL) before the
 * first stage and frees after the last one, on every path. */
typedef struct LnBuf {
	const char *name;
	KcDtype dtype;
	int64_t numel;
	int arg;        /* index into the kernel's args array; -1 = workspace */
	bool is_output; /* a kernel output */
	bool inplace;   /* a kernel input written by Assign/InplaceAssign */
	bool local;     /* a per-row intermediate of a fused group (fuse.c):
	                 * numel elements on the body function's stack, not
	                 * allocated by the entry */
} LnBuf;

/* Loop annotations are flags: a single flat loop can be both split among
 * tasks and vectorised. SERIAL is the absence of all. */
enum {
	LNL_SERIAL = 0,
	LNL_PARALLEL = 1u << 0,   /* range partitioned among runtime tasks */
	LNL_VECTORIZED = 1u << 1, /* vectorize.width = width */
	LNL_UNROLLED = 1u << 2,   /* interleave.count = unroll */
};

typedef struct LnLoop {
	int var;
	int64_t extent;
	unsigned kind; /* LNL_* flags */
	int width;     /* VECTORIZED */
	int unroll;    /* UNROLLED */
} LnLoop;

typedef struct LnStore {
	int buf;
	LnIdx *idx;
	LnExpr *value;
} LnStore;

#define LN_MAX_LOOPS (KC_MAX_RANK + 2)
/* A float32 sum over its innermost axis that folds at most this many
 * terms into each result accumulates in float32, as numpy, oneDNN and
 * MindSpore's own kernels do (the vectorised loop keeps vector_width x
 * unroll partial sums, so each chain is short); a longer one in float64:
 * at K = 12288 a float32 dot product misses the 1e-4 relative tolerance of
 * conformance. Products (relative errors add up along the whole chain) and
 * outer-axis sums stay float64: an outer-axis sum's order of additions
 * would depend on how LLVM vectorises each task's chunk of columns, and so
 * on the thread count, which float64 partials round away. The GEMM stage
 * chooses its K-blocks freely up to this K, and caps them beyond it
 * (lower_gemm.c). */
#define LN_F32_ACC_MAX 4096

/* A GEMM stage (the "matmul" template, lower_gemm.c / emit_gemm.c):
 *   C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]      (float32 throughout)
 * over three buffers addressed by element strides, so transposed operands
 * and batch broadcasting (stride 0) need no copy. C is [batch, M, N]
 * row-major. Emitted BLIS-style: the parallel loop of the stage runs over
 * work units (batch x N-blocks of nc x M-blocks of mc); per unit and per
 * K-block of kc, B's block is packed into nr-wide panels (zero-padded, on
 * the task's stack), then an mr x nr register-blocked FMA micro-kernel
 * (mr * nr/vw vector accumulators) sweeps the block. A K larger than kc
 * sums its blocks in the float64 workspace acc (float32 within a block). When `epi` names a stage,
 * that injective stage (the elementwise consumer of C: bias, GeLU, cast) is fused: it runs on each
 * finished micro-tile while it is in registers/L1, reading C's values from the tile instead of
 * memory, and is not emitted on its own (LnStage.fused_into). */
typedef struct LnGemm {
	int a, b, c;              /* buffers */
	int acc;                  /* float64 workspace summing the K-blocks:
	                           * per unit a padded mc x nc region
	                           * (numel 0 when K is one block) */
	int64_t batch, M, N, K;   /* C is batch x M x N */
	int64_t a_bs, a_ms, a_ks; /* element strides of A: batch, row, k */
	int64_t b_bs, b_ks, b_ns; /* of B: batch, k, column */
	int mr, nr, vw;           /* micro-tile rows, columns; vector width */
	int64_t mc, nc, kc;       /* rows and columns per unit; k per block */
	int64_t units_m, units_n; /* ceil(M / mc), ceil(N / nc) */
	int epi;                  /* fused epilogue stage, -1 = none */
	bool a_pack;              /* A is a half (float16/bfloat16) buffer:
	                           * each micro-panel's mr x kc block is
	                           * converted into a float32 panel on the
	                           * stack (row-major, or k-major when A is
	                           * stored along m), then read from there */
	bool blocked;             /* the blocking is set (sched_apply ran) */
} LnGemm;

/* A stage is a perfect loop nest. Injective (nred == 0): every store runs
 * at every point. Reduction (nred > 0): loops are [outer spatial][nred
 * reduction loops][ninner inner spatial]; there is one store, whose index
 * uses only the spatial vars, and its value is combined with red_op (ADD,
 * MUL, MAXIMUM, MINIMUM; float max/min propagate NaN) over the reduction
 * loops into an accumulator initialised to red_op's identity and stored
 * after the reduction loops. With ninner == 0 (the reduced dims include
 * the contiguous one) the accumulator is a register and the innermost
 * (reduction) loop vectorises with reassoc; with ninner > 0 (an outer-axis
 * reduction) it is the workspace accbuf, indexed like the store, and the
 * innermost (spatial, contiguous) loop vectorises: init acc, then
 * acc[i] op= value over the reduction loops, then store acc. Accumulator
 * types (acc): float16/bfloat16 f32; float32 inner-axis sums of at most
 * LN_F32_ACC_MAX terms f32, other float32 sums and products f64; others
 * their own.
 * Only spatial loops may be parallel. Stages run in order, each its
 * own parallel region, so a stage may read any buffer an earlier one
 * wrote. */
typedef struct LnStage {
	const char *name;
	int nloops;
	LnLoop loops[LN_MAX_LOOPS]; /* outermost first */
	int nstores;
	LnStore *stores;
	int64_t grain;  /* elements per task, at least (parallel) */
	int nred;       /* reduction loops (0: injective) */
	int ninner;     /* spatial loops inside the reduction loops */
	int accbuf;     /* ninner > 0: the accumulator workspace */
	IrOp red_op;    /* reduction: the combining op */
	KcDtype acc;    /* reduction: the accumulator dtype (see above) */
	LnGemm *gemm;   /* a GEMM stage: one parallel loop over its work units,
	                 * no stores (see LnGemm) */
	int fused_into; /* >= 0: this injective stage is the epilogue of that
	                 * GEMM stage and is emitted inside it; -1 otherwise */
	/* Row fusion (fuse.c, a schedule decision): the lead of a group has
	 * fuse_count > 1; it and the fuse_count - 1 stages after it (fused)
	 * run in ONE parallel region over their first fuse_outer loops, which
	 * all of them share (spatial, same extents): per outer index, each
	 * stage's remaining loops in turn. Only the lead's shared loops may be
	 * parallel. fuse_count 0 or 1: a region of its own. */
	int fuse_count;
	int fuse_outer;
	bool fused;       /* a non-lead member of a group */
	bool fuse_rows;   /* knob: may join a group */
	bool nontemporal; /* knob "stream": may store non-temporally */
	/* Unroll-and-jam of an outer-axis reduction (ninner > 0; knob "jam",
	 * sched_apply): its last reduction loop steps jam rows at a time, the
	 * jam values of each accumulator element summed in order in registers
	 * (the accumulator dtype) and added to the accumulator once, the
	 * remaining rows one at a time; 0 or 1: one row per step. Cuts the
	 * accumulator's loads and stores jam-fold (a column sum then streams
	 * its input). */
	int jam;
	int rfactor; /* knob: 0 auto, 1 off, n >= 2 partials (fuse.c) */
	/* Transpose tiling (fuse.c sched_tile, a schedule decision): > 0 in an
	 * injective stage that writes along its innermost loop and reads some
	 * input along the one outside it. Its last two loops then run in
	 * tile x tile blocks (partial blocks at the ends), each block in
	 * vw x vw sub-blocks transposed in registers (emit_tile.c); the loops
	 * themselves are unchanged. 0: not tiled. */
	int tile;
	/* A permuted copy (fuse.c read_order): one store of one load's value,
	 * both contiguous along the innermost loop, into an output of at
	 * least LN_STREAM_MIN_BYTES, with vectors of whole cache lines; the
	 * innermost loop stores non-temporally from its first line-aligned
	 * element (emit_tile.c emit_rows). */
	bool stream;
	/* Streaming stores (fuse.c sched_stream, a schedule decision): bit i
	 * set when store i of an injective stage is stored non-temporally by
	 * emit_tile.c emit_stream: a kernel output of at least
	 * LN_STREAM_MIN_BYTES written contiguously along the vectorised
	 * innermost loop, in vectors of 32 or 64 bytes. That loop then runs
	 * scalar up to the outputs' first line-aligned element, then
	 * vector_width elements at a time through a stack block, stored
	 * non-temporally, then the scalar rest. One bit at most (the loop
	 * aligns to that output's lines); 0: none. */
	unsigned ntmask;
} LnStage;

/* Outputs from this size on may be stored non-temporally (bypassing the
 * caches): a large transpose or permuted copy (emit_tile.c). */
#define LN_STREAM_MIN_BYTES (INT64_C(4) << 20)

/* The first reduction loop of a stage (nloops when injective). */
static inline int
ln_red_begin(const LnStage *st)
{
	return st->nloops - st->ninner - st->nred;
}

/* Is loop l of st a spatial (not a reduction) loop? */
static inline bool
ln_loop_spatial(const LnStage *st, int l)
{
	return l < ln_red_begin(st) || l >= st->nloops - st->ninner;
}

typedef struct LoopNest {
	Arena *arena;
	int nbufs;
	LnBuf *bufs;
	int nstages;
	LnStage *stages;
	int nexprs; /* LnExpr ids are 0..nexprs-1 */
	int nvars, capvars;
	int64_t *var_extent;
	/* The target converts float32 <-> float16 in hardware (x86 F16C,
	 * AArch64): the emitter uses fptrunc/fpext (vcvtps2ph, fcvt) instead
	 * of the integer algorithms of emit_math.c, which stay for targets
	 * without (their fptrunc would call a compiler-rt helper). Set by
	 * compile.c from the target. */
	bool hw_half;
	KcWork *work; /* the compile's counters and budget (the graph's) */
} LoopNest;

/* ---- schedules ------------------------------------------------------------ */
/* One member per knobs.def row (its ranges, defaults and templates are
 * there), plus what the target fixes. */
typedef struct KcKnobs {
#define X(e, field, ctype, ...) ctype field;
#include "knobs.def"
#undef X
	int vregs; /* not a knob: the target's vector registers (GEMM micro-tile) */
} KcKnobs;

struct KcSchedule {
	KcTemplate tpl;
	const char *template_name; /* kc_template_name(tpl) */
	KcKnobs knobs;             /* global knobs */
	int nstages;               /* stages of the graph it was made for */
	KcKnobs *stage;            /* effective knobs per stage (global + override) */
	const char *knobs_json;    /* canonical, in the arena */
};

/* ---- knobs.c: knob objects, checked and printed from knobs.def --------- */
struct cJSON;
/* Knobs: {"<knobs.def name>": value, ...}, each at most once, each taken by
 * template tpl; values as kc_knob_accepts says. Sets the members of *k that
 * it names. "stages" is handed back in *stages unverified; NULL stages:
 * refused (a stage's own knobs). where: the object's JSON pointer
 * ("/knobs"); errors name the member ("/knobs/unroll"). */
KcStatus knobs_parse(const struct cJSON *o, KcTemplate tpl, const char *where, KcKnobs *k,
                     const struct cJSON **stages, KcErr *err);
/* Canonical knobs of s: sorted keys, compact; a knob printed when tpl takes
 * it and it is always_printed or not at its default; "stages" lists each
 * stage's effective knobs up to the last that differs from the global
 * ones, absent when none does, so equal schedules print equal. */
const char *knobs_canonical(Arena *a, const KcSchedule *s);
bool knobs_eq(const KcKnobs *a, const KcKnobs *b);
/* Every knob at its knobs.def dflt (0 where the target decides); what
 * depends on the target is sched_default_knobs'. */
void knobs_default(KcKnobs *k);

/* ---- lower.c: IrGraph -> LoopNest (a sequence of stages) ----------------- */
/* requires: a parsed, typed IrGraph. */
KcStatus ln_lower(Arena *a, const IrGraph *g, LoopNest **out, KcErr *err);
/* How many stages ln_lower makes for g (what a schedule is sized by), and
 * how many reductions and matmuls g has (the template classification). */
int ln_count_stages(Arena *a, const IrGraph *g, int *nreduce, int *nmatmul);
/* Structural checks: indices in bounds, vars bound, dtypes consistent;
 * each stage's expression DAG is walked once, counted in counter k
 * (KC_WORK_VERIFY_LOWER or KC_WORK_VERIFY_SCHEDULE, which also names the
 * pass in an error). */
KcStatus ln_verify(const LoopNest *ln, KcWorkCounter k, KcErr *err);
/* Index constructors (simplifying). */
int ln_var_new(LoopNest *ln, int64_t extent);
LnIdx *ln_idx_const(LoopNest *ln, int64_t c);
LnIdx *ln_idx_var(LoopNest *ln, int v);
LnIdx *ln_idx_add(LoopNest *ln, LnIdx *a, LnIdx *b);
LnIdx *ln_idx_mul(LoopNest *ln, LnIdx *a, int64_t c);
LnIdx *ln_idx_div(LoopNest *ln, LnIdx *a, int64_t c);
LnIdx *ln_idx_mod(LoopNest *ln, LnIdx *a, int64_t c);
LnIdx *ln_idx_rsub(LoopNest *ln, int64_t c, LnIdx *a);  /* c - a, 0 <= a <= c */
int64_t ln_idx_max(const LoopNest *ln, const LnIdx *x); /* inclusive bound */
bool ln_idx_equal(const LnIdx *x, const LnIdx *y);

/* ---- lower_gemm.c: the GEMM stage of a MatMul ----------------------------- */
/* How operand u of a MatMul with result v is read by a GEMM stage. */
typedef enum GemmOperand {
	GEMM_DIRECT,    /* from its buffer, batch stride = its matrix size */
	GEMM_DIRECT_BC, /* from its buffer, one matrix for every batch */
	GEMM_COPY,      /* computed: copied into a float32 workspace first */
	GEMM_COPY_BC,   /* batch-broadcast unlike v: copied to v's batch dims */
} GemmOperand;
/* A float32 or half operand in a buffer is read directly: the GEMM
 * converts a half A into a float32 panel on the stack (LnGemm.a_pack) and
 * a half B as it packs it. */
GemmOperand gemm_operand(const IrValue *u, const IrValue *v, const bool *mat);
/* Does MatMul node nd lower to a GEMM stage (rather than the generic
 * reduction)? float32, float16 or bfloat16 operands and result (the GEMM
 * itself is float32: a half A is converted a micro-panel at a time on the
 * stack, a half B as it is packed, a half result by a cast stage after
 * it, which runs as the GEMM's fused epilogue), M >= 2, nothing empty.
 * Decided from the graph alone (mat: per value id, materialised), so
 * ln_count_stages agrees with ln_lower; *ncopies gets the extra stages it
 * needs (operand copies, the cast). */
bool gemm_applies(const IrNode *nd, const bool *mat, int *ncopies);
/* Does Conv2D node nd lower to a GEMM stage? A pointwise one (1 x 1
 * kernel, stride 1, no padding, one group) of float32/half values that are
 * inputs or materialised (read in place): NHWC is [N*H*W, C] x [C, O],
 * NCHW per image [O, C] x [C, H*W]. A half result adds its cast stage. */
bool conv_gemm_applies(const IrNode *nd, const bool *mat);
/* Resolves the blocking of st's GEMM from knobs k (0 = chosen from the
 * shape, deterministically; kc capped at K, and for a long K at its
 * accuracy cap, lower_gemm.c) and sizes its unit loop. */
void gemm_block(LoopNest *ln, LnStage *st, const KcKnobs *k);
/* Marks each GEMM stage's elementwise consumer as its fused epilogue where
 * that is exact (see lower_gemm.c) and the stage's knobs allow it. */
void gemm_fuse_epilogues(LoopNest *ln, const KcSchedule *s);
/* Verification of a GEMM stage: buffers, dtypes, strides in bounds. */
KcStatus gemm_verify(const LoopNest *ln, const LnStage *st, const char *pass, KcErr *err);
/* Bytes of stack a GEMM task uses (its packed B block, its tile, and
 * with a_pack its A panel). */
int64_t gemm_stack_bytes(const LnGemm *G);
/* Exported for the schedule passes (fuse.c): a fresh expression node, a
 * load of buf[idx], e converted to dt, a new workspace. */
LnExpr *ln_expr_new(LoopNest *ln, LnExprKind kind, KcDtype dt);
LnExpr *ln_expr_load(LoopNest *ln, int buf, LnIdx *idx);
LnExpr *ln_expr_coerce(LoopNest *ln, LnExpr *e, KcDtype dt);
int ln_workspace_new(LoopNest *ln, const char *name, KcDtype dt, int64_t numel);

/* ---- fuse.c: schedule transforms across loops and stages ------------------ */
/* What the per-stage transforms reuse from stage to stage (expression
 * marks, a per-var map), so each stage costs its own size, not the nest's:
 * one per pass over the stages. */
typedef struct LnScratch LnScratch;
LnScratch *ln_scratch_new(LoopNest *ln);
/* Tile a transpose-like injective stage (its innermost store loop reads
 * with a large stride) into tile x tile blocks (sets st->tile), or put a
 * permuted copy's loops in its input's order (st->stream when its vectors
 * of vector_width elements hold whole cache lines); tile 0 = auto, 1 =
 * off. */
void sched_tile(LoopNest *ln, LnScratch *x, LnStage *st, int tile, int vector_width);
/* Marks the stores of an injective stage that go non-temporally
 * (st->ntmask); after the vector widths are set. */
void sched_stream(LoopNest *ln, LnScratch *x, LnStage *st);
/* Split full reductions (too little spatial work) into partials + combine
 * (rfactor); annotates the stages it makes. */
KcStatus sched_rfactor(LoopNest *ln, KcErr *err);
/* Group consecutive stages that share their outer loops into one region. */
KcStatus sched_fuse_rows(LoopNest *ln, KcErr *err);

/* ---- print.c: textual dumps ------------------------------------------------ */
void ln_print(const LoopNest *ln, KcBuf *out);
void ln_idx_print(const LnIdx *x, KcBuf *out);

/* ---- sched.c ----------------------------------------------------------------- */
/* Apply s to every stage (loop kinds, widths, grains). */
KcStatus sched_apply(LoopNest *ln, const KcSchedule *s, KcErr *err);
/* kc_schedule_from_json on parsed knobs (NULL: the defaults; a non-object:
 * refused); for schedule_record.c. */
KcStatus sched_from_cjson(CompileCtx *c, const KcGraph *g, const KcTarget *t,
                          const char *template_name, const struct cJSON *knobs, KcSchedule **out,
                          KcErr *err);
/* Default knobs for a target: every knobs.def default (knobs_default),
 * then the vector width and registers from its targets.def columns. */
void sched_default_knobs(const KcTarget *t, KcKnobs *out);
/* Does target t convert float32 <-> float16 in hardware (LoopNest.hw_half)? */
bool sched_target_hw_half(const KcTarget *t);

#endif /* KCS_LOOP_H */
