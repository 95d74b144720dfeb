/* objcode.c - LLVM module -> optimised module -> ELF object or assembly.
 *
 * A TargetMachine is created per compile from the resolved KcTarget
 * (triple, cpu, explicit features; PIC; aggressive codegen), so nothing
 * LLVM-owned is shared between threads. Optimisation is one of two pass
 * pipelines of the new pass manager, chosen by the backend from the loop
 * nest alone (KcBackend.pipeline): default<O3>, or for a module of GEMM
 * kernels a short one (GEMM_PIPELINE). LLVM error strings are copied into the KcErr
 * and disposed of at once.
 */
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llvm.h"

/* Copies an LLVM message into err and disposes of it. */
static KcStatus
llvm_fail(KcErr *err, const char *pass, const char *what, char *msg)
{
	KcStatus st =
	    kc_fail(err, KC_CODEGEN, pass, "%s: %.240s", what, msg ? msg : "(no message)");
	if (msg)
		LLVMDisposeMessage(msg);
	return st;
}

static void
on_diagnostic(LLVMDiagnosticInfoRef di, void *arg)
{
	LlvmDiag *d = arg;
	if (LLVMGetDiagInfoSeverity(di) != LLVMDSError)
		return;
	if (d->errors++ == 0) {
		char *msg = LLVMGetDiagInfoDescription(di);
		/* one line for logs and error records: runs of white space
		 * (the source excerpt, the caret line) become one space */
		const char *p = msg ? msg : "(no message)";
		size_t n = 0;
		for (; *p && n + 1 < sizeof d->first; p++) {
			bool ws = *p == '\n' || *p == '\t' || *p == ' ' || *p == '\r';
			if (ws && (n == 0 || d->first[n - 1] == ' '))
				continue;
			d->first[n++] = ws ? ' ' : *p;
		}
		while (n > 0 && d->first[n - 1] == ' ')
			n--;
		d->first[n] = 0;
		LLVMDisposeMessage(msg);
	}
}

LLVMContextRef
llvm_context_create(LlvmDiag *d)
{
	memset(d, 0, sizeof *d);
	LLVMContextRef ctx = LLVMContextCreate();
	LLVMContextSetDiagnosticHandler(ctx, on_diagnostic, d);
	return ctx;
}

KcStatus
llvm_diag_check(LLVMModuleRef mod, const char *pass, KcErr *err)
{
	LLVMContextRef ctx = LLVMGetModuleContext(mod);
	/* a context not made by llvm_context_create is a programmer error */
	KC_ASSERT(LLVMContextGetDiagnosticHandler(ctx) == on_diagnostic);
	const LlvmDiag *d = LLVMContextGetDiagnosticContext(ctx);
	if (d->errors == 0)
		return KC_OK;
	return kc_fail(err, KC_CODEGEN, pass, "LLVM reported %d error%s, the first: %s", d->errors,
	               d->errors == 1 ? "" : "s", d->first);
}

void
kc_compiler_init(void)
{
	LLVMInitializeX86TargetInfo();
	LLVMInitializeX86Target();
	LLVMInitializeX86TargetMC();
	LLVMInitializeX86AsmPrinter();
	LLVMInitializeX86AsmParser();
	LLVMInitializeAArch64TargetInfo();
	LLVMInitializeAArch64Target();
	LLVMInitializeAArch64TargetMC();
	LLVMInitializeAArch64AsmPrinter();
	LLVMInitializeAArch64AsmParser();
}

/* The compile-time version string, checked against the loaded library
 * (LLVMGetVersion): a mismatch means a different libLLVM was loaded, and
 * kernel ids must not claim the wrong codegen. No mutable state. */
const char *
kc_llvm_version(void)
{
	unsigned maj = 0, min = 0, pat = 0;
	LLVMGetVersion(&maj, &min, &pat);
	if (maj != LLVM_VERSION_MAJOR || min != LLVM_VERSION_MINOR || pat != LLVM_VERSION_PATCH)
		return "unknown (libLLVM differs from the headers)";
	return LLVM_VERSION_STRING;
}

LLVMTargetMachineRef
obj_target_machine(const KcTarget *t, KcErr *err)
{
	LLVMTargetRef target = NULL;
	char *msg = NULL;

	if (LLVMGetTargetFromTriple(t->triple, &target, &msg)) {
		llvm_fail(err, "objcode", "unknown triple", msg);
		return NULL;
	}
	if (msg)
		LLVMDisposeMessage(msg);
	LLVMTargetMachineRef tm =
	    LLVMCreateTargetMachine(target, t->triple, t->cpu, t->features,
	                            LLVMCodeGenLevelAggressive, LLVMRelocPIC, LLVMCodeModelDefault);
	if (!tm)
		kc_fail(err, KC_CODEGEN, "objcode", "cannot create a target machine for %.64s",
		        t->name);
	return tm;
}

/* The pipeline for a module whose every stage is a GEMM stage (or a GEMM's
 * fused epilogue, which runs inside it). emit_gemm.c writes the kernel as
 * explicit vector IR: the micro-kernel's FMAs on phis, its loop marked to
 * unroll by UKR_UNROLL and never to vectorise, every other loop marked
 * neither to vectorise nor to unroll, except the fused epilogue's column
 * loop, marked to vectorise at the micro-kernel's width. What that IR
 * needs from the middle end is then only:
 *   sroa, early-cse, instcombine, simplifycfg   fold the emitter's index
 *       arithmetic (a zero batch stride, `br i1 true`), merge blocks;
 *   loop-vectorize   the epilogue's column loop (its math through VFABI);
 *   loop-unroll      the micro-kernel's k loop (unroll.count metadata);
 *   instcombine, simplifycfg   clean up after the vectoriser.
 * default<O3> spends most of its time on such a module in loop passes
 * (LICM, IndVarSimplify, unswitching, runtime unrolling of the packing
 * loop) and leaves the micro-kernel's machine code as it was; strength
 * reduction and machine LICM still run in the backend. This pipeline is
 * about ten times shorter and the kernels run at the same speed
 * (docs/performance-compiler.md has the figures). Modules with any other
 * stage keep default<O3>: reductions and injective stages are emitted as
 * scalar loops that rely on it. */
#define INSTCOMBINE "instcombine<max-iterations=1;no-verify-fixpoint>" /* as in default<O3> */
#define GEMM_PIPELINE                                                                              \
	"function(sroa,early-cse," INSTCOMBINE                                                     \
	",simplifycfg,loop-vectorize,loop-unroll," INSTCOMBINE ",simplifycfg)"

/* InstCombine narrows a compare of float16 values extended to float32
 * (the emitter's float16 loads, LoopNest.hw_half) to a half compare, and
 * x86 without AVX512-FP16 scalarises a vector of those: a float16 Greater
 * over 8M elements ran 12.8 ms instead of 8.2. After the pipeline, each
 * fcmp of halves (or half vectors) becomes an fcmp of their float32
 * extensions again; no pass runs after this one to undo it. */
static void
widen_half_compares(LLVMModuleRef mod)
{
	LLVMContextRef cx = LLVMGetModuleContext(mod);
	LLVMBuilderRef b = LLVMCreateBuilderInContext(cx);
	LLVMTypeRef half = LLVMHalfTypeInContext(cx), f32 = LLVMFloatTypeInContext(cx);

	for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn))
		for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb;
		     bb = LLVMGetNextBasicBlock(bb)) {
			LLVMValueRef next;
			for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = next) {
				next = LLVMGetNextInstruction(in);
				if (LLVMGetInstructionOpcode(in) != LLVMFCmp)
					continue;
				LLVMTypeRef t = LLVMTypeOf(LLVMGetOperand(in, 0));
				bool vec = LLVMGetTypeKind(t) == LLVMVectorTypeKind;
				if ((vec ? LLVMGetElementType(t) : t) != half)
					continue;
				LLVMTypeRef w =
				    vec ? LLVMVectorType(f32, LLVMGetVectorSize(t)) : f32;
				LLVMPositionBuilderBefore(b, in);
				LLVMValueRef x = LLVMBuildFPExt(b, LLVMGetOperand(in, 0), w, "");
				LLVMValueRef y = LLVMBuildFPExt(b, LLVMGetOperand(in, 1), w, "");
				LLVMValueRef c =
				    LLVMBuildFCmp(b, LLVMGetFCmpPredicate(in), x, y, "");
				LLVMReplaceAllUsesWith(in, c);
				LLVMInstructionEraseFromParent(in);
			}
		}
	LLVMDisposeBuilder(b);
}

KcStatus
obj_optimize(LLVMModuleRef mod, LLVMTargetMachineRef tm, ObjPipeline p, bool verify, KcErr *err)
{
	const char *passes = "default<O3>";
	switch (p) {
	case OBJ_PIPE_O3: break;
	case OBJ_PIPE_GEMM: passes = GEMM_PIPELINE; break;
	}
	char *msg = NULL;
	LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
	char *dl = LLVMCopyStringRepOfTargetData(td);
	char *triple = LLVMGetTargetMachineTriple(tm);

	LLVMSetDataLayout(mod, dl);
	LLVMSetTarget(mod, triple);
	LLVMDisposeMessage(dl);
	LLVMDisposeMessage(triple);
	LLVMDisposeTargetData(td);
	if (verify && LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg))
		return llvm_fail(err, "verify-llvm", "invalid module", msg);
	if (msg)
		LLVMDisposeMessage(msg);

	LLVMPassBuilderOptionsRef o = LLVMCreatePassBuilderOptions();
	LLVMPassBuilderOptionsSetLoopVectorization(o, 1);
	LLVMPassBuilderOptionsSetSLPVectorization(o, 1);
	LLVMPassBuilderOptionsSetLoopInterleaving(o, 1);
	LLVMPassBuilderOptionsSetLoopUnrolling(o, 1);
	LLVMPassBuilderOptionsSetVerifyEach(o, 0);
	LLVMErrorRef e = LLVMRunPasses(mod, passes, tm, o);
	LLVMDisposePassBuilderOptions(o);
	if (e) {
		char *m = LLVMGetErrorMessage(e);
		KcStatus st = kc_fail(err, KC_CODEGEN, "optimize", "%.240s", m);
		LLVMDisposeErrorMessage(m);
		return st;
	}
	KcStatus st = llvm_diag_check(mod, "optimize", err);
	if (st != KC_OK)
		return st;
	widen_half_compares(mod);
	if (verify && LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg))
		return llvm_fail(err, "verify-llvm", "optimised module is invalid", msg);
	if (msg)
		LLVMDisposeMessage(msg);
	return KC_OK;
}

KcStatus
obj_emit(LLVMModuleRef mod, LLVMTargetMachineRef tm, LLVMCodeGenFileType kind, unsigned char **out,
         size_t *out_len, KcErr *err)
{
	LLVMMemoryBufferRef mb = NULL;
	char *msg = NULL;

	*out = NULL;
	*out_len = 0;
	if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, kind, &msg, &mb))
		return llvm_fail(err, "objcode", "code generation failed", msg);
	if (msg)
		LLVMDisposeMessage(msg);
	KcStatus st = llvm_diag_check(mod, "objcode", err);
	if (st != KC_OK) {
		LLVMDisposeMemoryBuffer(mb);
		return st;
	}
	size_t n = LLVMGetBufferSize(mb);
	*out = kc_xmalloc(n + 1);
	memcpy(*out, LLVMGetBufferStart(mb), n);
	(*out)[n] = 0;
	*out_len = n;
	LLVMDisposeMemoryBuffer(mb);
	return KC_OK;
}

KcStatus
kc_ir_to_asm(const char *ir, size_t ir_len, const KcTarget *t, KcBuf *out, KcErr *err)
{
	LlvmDiag diag;
	LLVMContextRef ctx = llvm_context_create(&diag);
	LLVMModuleRef mod = NULL;
	LLVMTargetMachineRef tm = NULL;
	unsigned char *text = NULL;
	size_t len = 0;
	char *msg = NULL;
	KcStatus st = KC_OK;

	/* the parser takes ownership of the buffer */
	LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy(ir, ir_len, "kernel.ll");
	if (LLVMParseIRInContext(ctx, mb, &mod, &msg)) {
		st = llvm_fail(err, "asm", "cannot parse IR", msg);
		goto done;
	}
	if (msg)
		LLVMDisposeMessage(msg);
	if (!(tm = obj_target_machine(t, err))) {
		st = err->status;
		goto done;
	}
	if ((st = obj_emit(mod, tm, LLVMAssemblyFile, &text, &len, err)) != KC_OK)
		goto done;
	kc_buf_append(out, text, len);
done:
	free(text);
	if (tm)
		LLVMDisposeTargetMachine(tm);
	if (mod)
		LLVMDisposeModule(mod);
	LLVMContextDispose(ctx);
	return st;
}
