/* backend.c - the CPU backend behind the KcBackend interface (llvm.h):
 * x86_64 and aarch64 targets, kcs-cpu-v1 entry points (emit_llvm.c), ELF
 * objects linked into shared objects by link/.
 */
#include "cpu.h"
#include "link.h"

/* The target table's backend column decides (targets.def). */
static bool
accepts(const KcTarget *t)
{
	return t->backend == KC_BACKEND_CPU;
}

static KcStatus
emit(const LoopNest *ln, const KcTarget *t, LLVMModuleRef mod, const char *symbol, KcErr *err)
{
	(void)t; /* the loop nest already carries what the target decides */
	return emit_module(ln, mod, symbol, err);
}

ObjPipeline
cpu_pipeline(const LoopNest *ln)
{
	bool gemm = false;
	for (int s = 0; s < ln->nstages; s++) {
		const LnStage *st = &ln->stages[s];
		if (!st->gemm && st->fused_into < 0)
			return OBJ_PIPE_O3; /* other stages want default<O3> */
		gemm |= st->gemm != NULL;
	}
	return gemm ? OBJ_PIPE_GEMM : OBJ_PIPE_O3;
}

static KcStatus
link(const unsigned char *obj, size_t obj_len, const KcTarget *t, const KcCompileOptions *o,
     unsigned char **out, size_t *out_len, KcErr *err)
{
	LinkOptions lo = {
	    .triple = t->triple,
	    .linker = o ? o->linker : NULL,
	    .tmpdir = o ? o->tmpdir : NULL,
	    .system = o ? o->system_link : NULL,
	    .system_ctx = o ? o->system_link_ctx : NULL,
	};
	return link_shared(obj, obj_len, &lo, out, out_len, err);
}

const KcBackend kc_backend_cpu = {
    .name = "cpu",
    .accepts = accepts,
    .emit = emit,
    .pipeline = cpu_pipeline,
    .object_kind = LLVMObjectFile,
    .link = link,
};
