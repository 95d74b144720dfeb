/* llvm.h - the LLVM layer: what every LLVM backend shares. The backend
 * interface compile.c drives, target machines, the two optimisation
 * pipelines, object and assembly emission, and the vectorisable math and
 * half-precision conversions as IR. It knows nothing of graphs or loops
 * (a backend sees the loop nest only through its own emit function).
 *
 * Threads: every function works on objects of the caller's LLVMContext;
 * nothing LLVM-owned is shared between compiles.
 */
#ifndef KCS_LLVM_H
#define KCS_LLVM_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "compiler.h"

typedef struct LoopNest LoopNest; /* loop/loop.h; opaque at this layer */

/* ---- objcode.c -------------------------------------------------------------- */
/* Every LLVMContext kcsd makes comes from llvm_context_create, so one
 * handler sees every diagnostic. Without a handler LLVM exits the process
 * on an error diagnostic; with one it returns, and the pass that raised it
 * (inline asm the assembler rejects, an unsupported calling convention)
 * still reports success. The handler counts errors and keeps the first
 * message; obj_optimize and obj_emit then fail with KC_CODEGEN naming it.
 * Warnings and remarks are dropped (the IR dump shows what happened).
 * LlvmDiag is owned by the caller and must outlive the context; one
 * context, one compile, one thread. */
typedef struct LlvmDiag {
	int errors;      /* LLVMDSError diagnostics seen */
	char first[240]; /* the first one's description, NUL-terminated */
} LlvmDiag;
LLVMContextRef llvm_context_create(LlvmDiag *d);
/* KC_CODEGEN naming the first error if the context of mod has seen one
 * (pass names the step for the error record); KC_OK otherwise. */
KcStatus llvm_diag_check(LLVMModuleRef mod, const char *pass, KcErr *err);
/* The pass pipeline obj_optimize runs (objcode.c says what each holds). */
typedef enum ObjPipeline {
	OBJ_PIPE_O3,   /* default<O3> */
	OBJ_PIPE_GEMM, /* short: for modules of explicit GEMM kernels */
} ObjPipeline;
/* Target machine for t (PIC, aggressive). NULL and KC_CODEGEN on failure. */
LLVMTargetMachineRef obj_target_machine(const KcTarget *t, KcErr *err);
/* Optimise mod with pipeline p and emit an ELF object (malloc'd). */
KcStatus obj_optimize(LLVMModuleRef mod, LLVMTargetMachineRef tm, ObjPipeline p, bool verify,
                      KcErr *err);
KcStatus obj_emit(LLVMModuleRef mod, LLVMTargetMachineRef tm, LLVMCodeGenFileType kind,
                  unsigned char **out, size_t *out_len, KcErr *err);

/* ---- the backend interface ------------------------------------------------
 * A backend turns a scheduled loop nest into code for one family of
 * targets. kc_compile (compiler/compile.c) picks the first backend whose
 * accepts() takes the target, then runs: emit (into a module of the
 * compile's own LLVMContext), the pipeline it names, object emission of
 * object_kind, and link. Backends are stateless tables of functions. */
typedef struct KcBackend {
	const char *name; /* "cpu": the name dumps and errors use */
	bool (*accepts)(const KcTarget *t);
	/* Build ln's kernel into mod, exporting `symbol` with the backend's ABI. */
	KcStatus (*emit)(const LoopNest *ln, const KcTarget *t, LLVMModuleRef mod,
	                 const char *symbol, KcErr *err);
	ObjPipeline (*pipeline)(const LoopNest *ln); /* a function of ln alone */
	LLVMCodeGenFileType object_kind;             /* what obj_emit writes */
	/* Object bytes -> the code object kcsd stores (malloc'd *out). */
	KcStatus (*link)(const unsigned char *obj, size_t obj_len, const KcTarget *t,
	                 const KcCompileOptions *o, unsigned char **out, size_t *out_len,
	                 KcErr *err);
} KcBackend;

/* ---- emit_math.c: branch-free, vectorisable math as IR -------------------- */
typedef enum MathFn {
	MATH_EXP,
	MATH_LOG,
	MATH_TANH,
	MATH_ERF,
	MATH_POW,
	/* float32 runs these in double with float-grade polynomials */
	MATH_SIN,
	MATH_COS,
	MATH_ASIN,
	MATH_ACOS,
	MATH_ATAN,
	MATH_ATAN2, /* atan2(y, x): args[0] = y */
	MATH_ASINH,
	MATH_ACOSH,
	MATH_EXPM1,
	MATH_COUNT
} MathFn;
/* Calls f on args (float or double scalars; pow takes two) through the
 * module's outlined internal function, built on first use. width > 1 (the
 * vector width of the enclosing loop) also builds the <width x T> variant
 * and maps the call to it for LoopVectorize (VFABI). */
LLVMValueRef math_call(LLVMBuilderRef b, MathFn f, LLVMValueRef *args, int width);
/* f on args as inline IR (scalars or vectors): no call overhead, but each
 * use is a whole polynomial for the backend. emit_llvm inlines when a
 * module has at most MATH_INLINE_MAX math ops, and calls otherwise. */
LLVMValueRef math_inline(LLVMBuilderRef b, MathFn f, LLVMValueRef *args);
#define MATH_INLINE_MAX 2
/* Inline versions: x has type float or double (the compute type) or a
 * vector of them; results have the same type. */
LLVMValueRef math_exp(LLVMBuilderRef b, LLVMValueRef x);
LLVMValueRef math_log(LLVMBuilderRef b, LLVMValueRef x);
LLVMValueRef math_tanh(LLVMBuilderRef b, LLVMValueRef x);
LLVMValueRef math_erf(LLVMBuilderRef b, LLVMValueRef x);
LLVMValueRef math_pow(LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y);
/* Calls the overloaded intrinsic `name` on args of x's type. */
LLVMValueRef math_intrinsic(LLVMBuilderRef b, const char *name, LLVMValueRef *args, int n);
/* float <-> IEEE half / bfloat16 bits (i16), round to nearest even. */
LLVMValueRef math_f32_to_f16(LLVMBuilderRef b, LLVMValueRef x);
LLVMValueRef math_f16_to_f32(LLVMBuilderRef b, LLVMValueRef h);
LLVMValueRef math_f32_to_bf16(LLVMBuilderRef b, LLVMValueRef x);
LLVMValueRef math_bf16_to_f32(LLVMBuilderRef b, LLVMValueRef h);

#endif /* KCS_LLVM_H */
