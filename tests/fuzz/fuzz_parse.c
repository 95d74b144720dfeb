/* fuzz_parse.c - libFuzzer target: composite JSON -> typed graph ->
 * canonical workload, and the MindSpore name hash.
 *
 * Feeds the input bytes to kc_parse (JSON parsing, schema validation and
 * every limit check) and, when the graph is accepted, to kc_workload (the
 * canonical form and its key) and kc_target_from_graph, exactly as POST
 * /v1/compile does before any code generation; and, always, to kc_ms_hash
 * (its own JSON reader, run on every compile body). Small limits keep each run fast; they are still
 * checked by the same code paths as the daemon's defaults. Any crash, sanitizer report or leak is a
 * bug. Built only with -DKC_FUZZ=ON and clang (tests/fuzz.cmake); run by tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	kc_compiler_init(); /* kc_target_from_graph resolves LLVM targets */
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	KcLimits lim = {
	    .max_ops = 256,
	    .max_tensors = 64,
	    .max_rank = KC_MAX_RANK,
	    .max_elements = (int64_t)1 << 31,
	};
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	if (kc_parse(c, (const char *)data, size, &lim, &g, &err) == KC_OK) {
		KcWorkload wl;
		kc_workload(c, g, &wl);
		KcTarget t;
		KcErr terr = {0};
		(void)kc_target_from_graph(g, &t, &terr);
	}
	compile_ctx_free(c);
	uint64_t h;
	KcErr herr = {0};
	(void)kc_ms_hash((const char *)data, size, &h, &herr);
	return 0;
}
