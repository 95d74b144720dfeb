/* cpu.h - the CPU backend: kcs-cpu-v1 kernels for x86-64 and AArch64
 * (docs/abi.md). emit_llvm.c writes the entry, its task functions and the
 * stage bodies; emit_tile.c the tiled transposes; emit_gemm.c the GEMM
 * micro-kernels; backend.c ties them to the KcBackend interface.
 */
#ifndef KCS_CPU_H
#define KCS_CPU_H

#include "llvm.h"
#include "loop.h"

/* The backend compile.c selects for x86_64 and aarch64 targets. */
extern const KcBackend kc_backend_cpu;

/* ---- emit_llvm.c --------------------------------------------------------------- */
/* Build the module for ln into mod (created by the caller in its own
 * LLVMContext), exporting `symbol` with the kcs-cpu-v1 ABI. */
KcStatus emit_module(const LoopNest *ln, LLVMModuleRef mod, const char *symbol, KcErr *err);

/* ---- backend.c ------------------------------------------------------------- */
/* OBJ_PIPE_GEMM when ln has a GEMM stage and every stage is a GEMM stage
 * or a GEMM's fused epilogue; otherwise OBJ_PIPE_O3. A function of ln. */
ObjPipeline cpu_pipeline(const LoopNest *ln);

#endif /* KCS_CPU_H */
