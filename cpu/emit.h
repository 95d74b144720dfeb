/* emit.h - state shared by the LLVM emitters (emit_expr.c: values;
 * emit_llvm.c: stages and the kcs-cpu-v1 entry; emit_gemm.c: GEMM stages;
 * emit_tile.c: tiled transposes). Backend-internal. One Em per
 * emit_module call, on its stack; nothing here outlives it.
 */
#ifndef KCS_CPU_EMIT_H
#define KCS_CPU_EMIT_H

#include "cpu.h"

typedef struct Em {
	const LoopNest *ln;
	LLVMContextRef ctx;
	LLVMModuleRef mod;
	LLVMBuilderRef b;
	LLVMTypeRef i1, i8, i16, i32, i64, f32, f64, ptr, vd;
	LLVMValueRef fn;    /* function being built */
	LLVMValueRef *bufp; /* per buffer: its pointer in the body */
	LLVMValueRef *var;  /* per loop var: its current value */
	LLVMValueRef *memo; /* per expr id, valid when memo_at[id] == memo_gen */
	int vw;             /* vector width of the innermost loop (1: scalar) */
	bool math_inline;   /* few math ops: inline them (see math_inline) */
	LLVMValueRef acc;   /* register reduction accumulator (alloca) */
	int body;           /* EB_*: what the innermost body of emit_loops does */
	/* a GEMM epilogue: loads of buffer tile_buf yield tile_val (the
	 * finished C element) instead of reading memory */
	int tile_buf;
	LLVMValueRef tile_val;
	int group; /* index of the fused row group's lead being emitted, -1 */
	/* an outer-axis reduction's jammed loop (LnStage.jam): its var, the
	 * first row of the step, rows in the step (0: not jamming) */
	int jam_var;
	LLVMValueRef jam_base;
	int jam;
	/* non-temporal stores were emitted (emit_tile.c): the body function
	 * fences before it returns */
	bool fence;
	/* stamps instead of clearing an array per stage: em_memo_reset starts
	 * a body by a new memo_gen; the short scans (math count, transposed
	 * loads) mark expr ids with mark_gen */
	int *memo_at;
	int memo_gen;
	int *mark;
	int mark_gen;
	KcErr *err;
} Em;

/* emit_expr.c */
LLVMValueRef em_expr(Em *E, const LnExpr *e);                    /* memoised */
void em_store(Em *E, int buf, const LnIdx *idx, LLVMValueRef v); /* narrows */
bool em_is_float(KcDtype dt);            /* float16, bfloat16, float32, float64 */
bool em_is_signed(KcDtype dt);           /* signed integers */
LLVMTypeRef em_ctype(Em *E, KcDtype dt); /* compute type */
LLVMTypeRef em_stype(Em *E, KcDtype dt); /* storage type */
/* v (compute type of `from`) as the compute type of `to`, rounding halves */
LLVMValueRef em_cast(Em *E, LLVMValueRef v, KcDtype from, KcDtype to);
LLVMValueRef em_elem_ptr(Em *E, int buf, const LnIdx *idx); /* &buf[idx] */
LLVMValueRef em_maxmin(Em *E, bool max, KcDtype dt, LLVMValueRef a, LLVMValueRef c);
/* math ops (MathFn) under e, each shared node counted once per E->mark_gen */
int em_count_math(Em *E, const LnExpr *e);
/* a new innermost body: nothing memoised; e's value in this body. em_expr
 * counts each step in KC_WORK_EMIT and fails once it passes the budget */
void em_memo_reset(Em *E);
void em_memo_set(Em *E, const LnExpr *e, LLVMValueRef v);
LLVMValueRef em_idx(Em *E, const LnIdx *x); /* an index as i64 */
/* a dtype element at p, widened to its compute type; v narrowed and stored */
LLVMValueRef em_load_at(Em *E, KcDtype dt, LLVMValueRef p);
void em_store_at(Em *E, KcDtype dt, LLVMValueRef p, LLVMValueRef v);

/* emit_llvm.c */
void em_loop_md(Em *E, LLVMValueRef br, const LnLoop *lp); /* !llvm.loop */
/* !llvm.loop for a loop of exactly width x unroll iterations, to become
 * unroll vector ops each: vectorised, interleaved, and never fully unrolled
 * as scalars first (O3 runs its full unroll before the loop vectorizer, and
 * SLP does not always rebuild the vectors: a transposed block cast to
 * float16 was stored a half at a time) */
void em_vector_md(Em *E, LLVMValueRef br, int width, int unroll);
/* "stackrealign" on a function that may spill vectors (the stage bodies
 * and their outlined pieces): see emit_body */
void em_realign_stack(Em *E, LLVMValueRef fn);
void em_add_attr(Em *E, LLVMValueRef fn, unsigned idx, const char *name);
LLVMValueRef em_entry_alloca(Em *E, LLVMTypeRef t); /* in E->fn's entry block */

/* emit_gemm.c: counted loops for the emitters that build their own loop
 * structure (GEMM, tiles): for (iv = start; iv < end; iv += step), open
 * leaves the builder in the body, close after the loop and returns the
 * latch branch; em_plain_md marks a loop emitted in its final shape
 * (no vectorising; unroll.count n, or unroll.disable when n <= 1). */
typedef struct EmLoop {
	LLVMBasicBlockRef header, exit;
	LLVMValueRef iv, end, step;
} EmLoop;
LLVMValueRef em_loop_open(Em *E, EmLoop *l, LLVMValueRef start, LLVMValueRef end, int64_t step,
                          const char *name);
LLVMValueRef em_loop_close(Em *E, EmLoop *l);
void em_plain_md(Em *E, LLVMValueRef br, int unroll);

/* emit_gemm.c: the body of GEMM stage st (its work units [lo, hi)) into
 * E->fn at the builder's position. */
bool emit_gemm(Em *E, const LnStage *st, LLVMValueRef lo, LLVMValueRef hi);
/* Transposes the n x n matrix held as n row vectors (any element type), in
 * place, with n log2(n) shuffles (emit_gemm.c). */
void em_transpose(Em *E, LLVMValueRef *r, int n);

/* emit_tile.c: the last two loops of a tiled stage (st->tile > 0), or the
 * innermost loop of a permuted copy (st->stream), the loops outside them
 * already open; the parallel loop runs [lo, hi). */
bool emit_tile(Em *E, const LnStage *st, LLVMValueRef lo, LLVMValueRef hi);
bool emit_rows(Em *E, const LnStage *st, LLVMValueRef lo, LLVMValueRef hi);
/* emit_tile.c: the innermost loop of a stage with a streaming store
 * (st->ntmask), the loops outside it open. */
bool emit_stream(Em *E, const LnStage *st, LLVMValueRef lo, LLVMValueRef hi);

#endif /* KCS_CPU_EMIT_H */
