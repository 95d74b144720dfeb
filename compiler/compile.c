/* compile.c - kc_compile: the whole pipeline as straight-line code.
 *
 *   IrGraph (parsed, typed; kc_parse ran before; dumped as "graph")
 *     lower        loop/lower.c      graph -> loop nest: injective stages,
 *                                    inlined DAG per output group, dims merged
 *     verify       loop/verify.c     indices in bounds, vars bound, dtypes agree
 *     schedule     loop/sched.c      vectorize / unroll / parallel annotations;
 *                  loop/fuse.c       transpose tiles, rfactor, row fusion
 *     verify       loop/verify.c
 *     -- the backend (KcBackend, llvm/llvm.h) the target names: cpu/ --
 *     emit-llvm    cpu/emit_llvm.c   loop nest -> LLVM module (kcs-cpu-v1 entry)
 *     optimize     llvm/objcode.c    verify, default<O3> (or the short GEMM
 *                                    pipeline the backend picks), verify
 *     object       llvm/objcode.c    TargetMachine -> ELF object in memory
 *     link         link/link.c       in-process ELF linker (link_elf.c), or
 *                                    the system linker -> shared object
 *   KcArtifact (symbol, .so bytes, optimised IR)
 *
 * Each pass appends "== name ==" and its dump to opts->dump when set (the
 * names and their order are passes.def), then its "; work:" line. The work
 * budget (graph/work.def, KcLimits) is checked as each pass ends, the
 * graph's and the loop nest's counts before the LLVMContext exists, the
 * module's instruction count before the pass pipeline and before code
 * generation; the counting walks check their own counts as they go.
 * One LLVMContext per call, disposed here: compiles on different threads
 * share nothing.
 */
#include <llvm-c/Core.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "link.h"

#define MAX_SYMBOL 100 /* characters of the graph name kept in the symbol */

/* The backends, in the order kc_compile asks them (the first that accepts
 * the target emits). */
static const KcBackend *const backends[] = {&kc_backend_cpu};

static const KcBackend *
backend_for(const KcTarget *t)
{
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
		if (backends[i]->accepts(t))
			return backends[i];
	return NULL;
}

/* Graph name -> [A-Za-z0-9_]+ "_kernel", never starting with a digit. */
static void
make_symbol(const char *name, char *out, size_t cap)
{
	size_t n = 0;

	KC_ASSERT(cap > MAX_SYMBOL + 16);
	if (!name || !*name)
		name = "kcs";
	if (*name >= '0' && *name <= '9')
		out[n++] = 'k';
	for (const char *p = name; *p && n < MAX_SYMBOL; p++) {
		char c = *p;
		bool ok =
		    (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		out[n++] = ok ? c : '_';
	}
	snprintf(out + n, cap - n, "_kernel");
}

static const char *const pass_names[KC_PASS_COUNT] = {
#define P(e, name) [KC_PASS_##e] = name,
#include "passes.def"
#undef P
};
_Static_assert(KC_PASS_COUNT <= 32, "KcCompileOptions.dump_passes is a 32-bit mask");

const char *
kc_pass_name(KcPass p)
{
	KC_ASSERT(p < KC_PASS_COUNT);
	return pass_names[p];
}

KcPass
kc_pass_lookup(const char *name, size_t len)
{
	for (int p = 0; p < KC_PASS_COUNT; p++)
		if (strlen(pass_names[p]) == len && memcmp(pass_names[p], name, len) == 0)
			return (KcPass)p;
	return KC_PASS_COUNT;
}

/* Whether pass p's dump is wanted; if so, writes its section header. */
static bool
dump_begin(const KcCompileOptions *o, KcPass p)
{
	if (!o->dump || (o->dump_passes && !(o->dump_passes >> p & 1)))
		return false;
	kc_buf_printf(o->dump, "== %s ==\n", pass_names[p]);
	return true;
}

static void
dump_module(const KcCompileOptions *o, KcPass pass, LLVMModuleRef mod, const KcWork *w)
{
	if (!dump_begin(o, pass))
		return;
	char *s = LLVMPrintModuleToString(mod);
	kc_buf_puts(o->dump, s);
	LLVMDisposeMessage(s);
	kc_work_print(w, pass, o->dump);
}

/* The instructions of every function of mod: a walk of the module, so
 * linear in what it counts. */
static int64_t
count_insns(LLVMModuleRef mod)
{
	int64_t n = 0;
	for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
		for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb;
		     bb = LLVMGetNextBasicBlock(bb))
			for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i;
			     i = LLVMGetNextInstruction(i))
				n++;
	return n;
}

KcStatus
kc_compile(CompileCtx *c, const KcGraph *g, const KcTarget *t, const KcSchedule *s,
           const KcCompileOptions *opts, KcArtifact *out, KcErr *err)
{
	KcCompileOptions dflt = {0};
	const KcCompileOptions *o = opts ? opts : &dflt;
	int64_t t0 = kc_now_us(), t1;
	LoopNest *ln = NULL;
	LLVMContextRef ctx = NULL;
	LlvmDiag diag; /* outlives ctx */
	LLVMModuleRef mod = NULL;
	LLVMTargetMachineRef tm = NULL;
	unsigned char *obj = NULL;
	size_t obj_len = 0;
	const KcBackend *be = backend_for(t);
	KcStatus st;

	KcWork *w = g->work;

	memset(out, 0, sizeof *out);
	if (!be)
		return kc_fail(err, KC_UNSUPPORTED, "compile", "no backend for target %.200s",
		               t->name);
	make_symbol(kc_graph_name(g), out->symbol, sizeof out->symbol);
	if (!s)
		s = kc_schedule_default(c, g, t);
	kc_work_reset(w, KC_PASS_LOWER); /* what this call counts */
	if (dump_begin(o, KC_PASS_GRAPH)) {
		ir_graph_print(g, o->dump);
		kc_work_print(w, KC_PASS_GRAPH, o->dump);
	}
	if ((st = kc_work_check(w, KC_WORK_PLAN, err)) != KC_OK)
		goto done;

	/* a pass's verifier runs before its dump, which is written either
	 * way, so the dump shows the nest that failed, with its counts */
	if ((st = ln_lower(c->arena, g, &ln, err)) != KC_OK)
		goto done;
	ln->hw_half = sched_target_hw_half(t);
	st = ln_verify(ln, KC_WORK_VERIFY_LOWER, err);
	if (dump_begin(o, KC_PASS_LOWER)) {
		ln_print(ln, o->dump);
		kc_work_print(w, KC_PASS_LOWER, o->dump);
	}
	if (st != KC_OK)
		goto done;

	if ((st = sched_apply(ln, s, err)) != KC_OK)
		goto done;
	st = ln_verify(ln, KC_WORK_VERIFY_SCHEDULE, err);
	if (dump_begin(o, KC_PASS_SCHEDULE)) {
		kc_buf_printf(o->dump, "template %s knobs %s\n", s->template_name, s->knobs_json);
		ln_print(ln, o->dump);
		kc_work_print(w, KC_PASS_SCHEDULE, o->dump);
	}
	if (st != KC_OK)
		goto done;

	ctx = llvm_context_create(&diag);
	mod = LLVMModuleCreateWithNameInContext(out->symbol, ctx);
	if ((st = be->emit(ln, t, mod, out->symbol, err)) != KC_OK)
		goto done;
	w->n[KC_WORK_EMIT_INSNS] = count_insns(mod);
	dump_module(o, KC_PASS_EMIT_LLVM, mod, w);
	if ((st = kc_work_check(w, KC_WORK_EMIT_INSNS, err)) != KC_OK)
		goto done;

	if (!(tm = obj_target_machine(t, err))) {
		st = err->status;
		goto done;
	}
	if ((st = obj_optimize(mod, tm, be->pipeline(ln), o->verify, err)) != KC_OK)
		goto done;
	w->n[KC_WORK_OPT_INSNS] = count_insns(mod);
	dump_module(o, KC_PASS_OPTIMIZE, mod, w);
	if ((st = kc_work_check(w, KC_WORK_OPT_INSNS, err)) != KC_OK)
		goto done;
	if (o->want_ir) {
		char *s_ir = LLVMPrintModuleToString(mod);
		out->ir_len = strlen(s_ir);
		out->ir = kc_xmalloc(out->ir_len + 1);
		memcpy(out->ir, s_ir, out->ir_len + 1);
		LLVMDisposeMessage(s_ir);
	}

	if ((st = obj_emit(mod, tm, be->object_kind, &obj, &obj_len, err)) != KC_OK)
		goto done;
	if (dump_begin(o, KC_PASS_OBJECT))
		kc_buf_printf(o->dump, "%zu bytes, target %s\n", obj_len, t->name);

	t1 = kc_now_us();
	st = be->link(obj, obj_len, t, o, &out->object, &out->object_len, err);
	out->link_ms = (double)(kc_now_us() - t1) / 1000.0;
	if (st != KC_OK)
		goto done;
	if (dump_begin(o, KC_PASS_LINK))
		kc_buf_printf(o->dump, "%zu bytes, symbol %s\n", out->object_len, out->symbol);
done:
	free(obj);
	if (tm)
		LLVMDisposeTargetMachine(tm);
	if (mod)
		LLVMDisposeModule(mod);
	if (ctx)
		LLVMContextDispose(ctx);
	out->compile_ms = (double)(kc_now_us() - t0) / 1000.0;
	if (st != KC_OK)
		kc_artifact_free(out); /* on failure *out is left empty */
	return st;
}

void
kc_artifact_free(KcArtifact *a)
{
	if (!a)
		return;
	free(a->object);
	free(a->ir);
	memset(a, 0, sizeof *a);
}

KcStatus
kc_link_system(const unsigned char *obj, size_t obj_len, const char *triple, const char *linker,
               const char *tmpdir, unsigned char **out, size_t *out_len, KcErr *err)
{
	LinkOptions lo = {.triple = triple, .linker = linker, .tmpdir = tmpdir};
	return link_system(obj, obj_len, &lo, out, out_len, err);
}
