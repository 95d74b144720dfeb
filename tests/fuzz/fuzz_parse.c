/* fuzz_parse.c - libFuzzer target: composite JSON -> typed graph ->
 * canonical workload, the MindSpore name hash, and the JSON pre-scan.
 *
 * Checks first that kc_json_scan's counts bound what cJSON builds from the
 * same bytes (values <= tokens, nesting <= depth: the property the daemon's
 * memory bound rests on), whatever the bytes. Then feeds them to kc_parse
 * (the pre-scan with small limits, JSON parsing, schema validation and
 * every limit check) and, when the graph is accepted, to kc_workload (the
 * canonical form and its key) and kc_target_from_graph, exactly as POST
 * /v1/compile does before any code generation; and, always, to kc_ms_hash
 * (its own JSON reader, run on every compile body). Small limits keep each run fast; they are still
 * checked by the same code paths as the daemon's defaults. Any crash, sanitizer report or leak is a
 * bug. Built only with -DKC_FUZZ=ON and clang (tests/fuzz.cmake); run by tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "compiler.h"

/* Values in the tree and the deepest nesting of arrays and objects. */
static void
tree_size(const cJSON *j, int depth, int64_t *values, int *deepest)
{
	for (; j; j = j->next) {
		(*values)++;
		if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
			if (depth + 1 > *deepest)
				*deepest = depth + 1;
			tree_size(j->child, depth + 1, values, deepest);
		}
	}
}

/* kc_json_scan's counts are upper bounds of cJSON's tree of the bytes. */
static void
check_scan(const char *data, size_t size)
{
	KcJsonScan js;
	if (kc_json_scan(data, size, 0, 0, &js, NULL) != KC_OK)
		abort();
	cJSON *j = cJSON_ParseWithLength(data, size);
	int64_t values = 0;
	int deepest = 0;
	tree_size(j, 0, &values, &deepest);
	cJSON_Delete(j);
	if (values > js.tokens || deepest > js.depth)
		abort();
}

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
	check_scan((const char *)data, size);
	KcLimits lim = {
	    .max_ops = 256,
	    .max_tensors = 64,
	    .max_rank = KC_MAX_RANK,
	    .max_elements = (int64_t)1 << 31,
	    /* small enough that inputs of max_len reach both refusals */
	    .max_json_tokens = 4096,
	    .max_json_depth = 16,
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
