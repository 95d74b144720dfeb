/* test_work.c - work bounded by the input, and the work budget.
 *
 * A Fibonacci chain t_i = Op(t_{i-2}, t_{i-1}) over [64,64] float32 is a
 * DAG whose inlined expression has 2^n paths from the output to an input:
 * a pass that walks it as a tree never ends. Each chain (Add, Mul,
 * Maximum, Pow; 60 ops, and 1000 Adds) must compile, and every pass's
 * count of visited nodes, read from the "; work:" line that ends each
 * dump section, must stay within VISITS_PER_VALUE times the graph's values.
 * Then the budget: KcLimits' work fields small enough to trip each kind of
 * counter (a graph-side count, a lowering count, the stage count, the
 * LLVM instructions) give KC_WORK_BUDGET naming the pass and the limit,
 * the node and stage counts before any LLVM section is written; a chain of
 * reductions whose every stage inlines the whole chain before it (IR
 * quadratic in the ops) trips the default budget.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "t.h"

#define VISITS_PER_VALUE 16 /* c in: visits of each pass <= c * values */
#define TARGET "x86_64-x86-64-v3"

/* The chain of n ops `op` over two [64,64] inputs, its last value the
 * output (composite JSON, akg-format.md). */
static char *
chain(const char *op, int n)
{
	KcBuf b = {0};
	const char *d = "\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"shape\":[64,64]";

	kc_buf_printf(&b,
	              "{\"composite\":true,\"op\":\"Fused_%s_chain_%d\",\"process\":\"cpu\","
	              "\"platform\":\"AKG\",\"input_desc\":[[{%s,\"tensor_name\":\"t0\"}],"
	              "[{%s,\"tensor_name\":\"t1\"}]],\"op_desc\":[",
	              op, n, d, d);
	for (int i = 2; i < n + 2; i++)
		kc_buf_printf(
		    &b,
		    "%s{\"name\":\"%s\",\"attr\":null,\"input_desc\":["
		    "[{%s,\"name\":\"input_0\",\"tensor_name\":\"t%d\"}],"
		    "[{%s,\"name\":\"input_1\",\"tensor_name\":\"t%d\"}]],"
		    "\"output_desc\":[{%s,\"name\":\"output_0\",\"tensor_name\":\"t%d\"}]}",
		    i > 2 ? "," : "", op, d, i - 2, d, i - 1, d, i);
	kc_buf_printf(&b, "],\"output_desc\":[{%s,\"tensor_name\":\"t%d\"}]}", d, n + 1);
	return b.data; /* malloc'd, NUL-terminated */
}

/* n reductions: r_i = ReduceSum(t_i, axis 1, keep), t_{i+1} = t_i + r_i.
 * Every r_i is a stage that inlines t_i, which is the input plus every
 * r_j before it: the lowered nest is quadratic in n. */
static char *
reduce_chain(int n)
{
	KcBuf b = {0};
	const char *d = "\"data_type\":\"float32\",\"format\":\"DefaultFormat\"";

	kc_buf_printf(&b,
	              "{\"composite\":true,\"op\":\"Fused_reduce_chain_%d\",\"process\":\"cpu\","
	              "\"platform\":\"AKG\",\"input_desc\":[[{%s,\"shape\":[64,64],"
	              "\"tensor_name\":\"t0\"}]],\"op_desc\":[",
	              n, d);
	for (int i = 0; i < n; i++)
		kc_buf_printf(
		    &b,
		    "%s{\"name\":\"ReduceSum\",\"attr\":[{\"name\":\"axis\",\"value\":[1]},"
		    "{\"name\":\"keep_dims\",\"value\":true}],\"input_desc\":[[{%s,\"shape\":[64,"
		    "64],"
		    "\"name\":\"input_0\",\"tensor_name\":\"t%d\"}]],\"output_desc\":[{%s,"
		    "\"shape\":[64,1],\"name\":\"output_0\",\"tensor_name\":\"r%d\"}]},"
		    "{\"name\":\"Add\",\"attr\":null,\"input_desc\":[[{%s,\"shape\":[64,64],"
		    "\"name\":\"input_0\",\"tensor_name\":\"t%d\"}],[{%s,\"shape\":[64,1],"
		    "\"name\":\"input_1\",\"tensor_name\":\"r%d\"}]],\"output_desc\":[{%s,"
		    "\"shape\":[64,64],\"name\":\"output_0\",\"tensor_name\":\"t%d\"}]}",
		    i ? "," : "", d, i, d, i, d, i, d, i, d, i + 1);
	kc_buf_printf(&b, "],\"output_desc\":[{%s,\"shape\":[64,64],\"tensor_name\":\"t%d\"}]}", d,
	              n);
	return b.data;
}

/* One compile of json under lim, with every pass dumped into *dump. */
typedef struct Run {
	KcStatus st;
	KcErr err;
	KcBuf dump;
	int nvalues; /* the graph's values: inputs + op results */
} Run;

static void
compile(const char *json, const KcLimits *lim, int nvalues, Run *r)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcTarget t;
	KcArtifact art = {0};
	KcCompileOptions o = {0};

	memset(r, 0, sizeof *r);
	r->nvalues = nvalues;
	o.dump = &r->dump;
	r->st = kc_parse(c, json, strlen(json), lim, &g, &r->err);
	if (r->st == KC_OK)
		r->st = kc_target_resolve(TARGET, &t, &r->err);
	if (r->st == KC_OK)
		r->st = kc_compile(c, g, &t, kc_schedule_default(c, g, &t), &o, &art, &r->err);
	kc_artifact_free(&art);
	compile_ctx_free(c);
	kc_buf_putc(&r->dump, '\0'); /* a C string from here */
}

/* The count labelled `name` on the work line of section `sec`, or -1. */
static long long
count_of(const Run *r, const char *sec, const char *name)
{
	char hdr[64], key[64];
	snprintf(hdr, sizeof hdr, "== %s ==\n", sec);
	snprintf(key, sizeof key, " %s=", name);
	const char *s = strstr(r->dump.data, hdr);
	if (!s)
		return -1;
	const char *line = strstr(s, "\n; work:");
	const char *next = strstr(s + strlen(hdr), "\n== ");
	if (!line || (next && line > next))
		return -1;
	const char *end = strchr(line + 1, '\n');
	const char *k = strstr(line, key);
	if (!k || (end && k > end))
		return -1;
	return atoll(k + strlen(key));
}

/* Every node counter of every section, and each within the bound. */
static void
check_visits(const Run *r, const char *what)
{
	static const struct {
		const char *sec, *name;
	} counters[] = {
	    {"graph", "parse"},
	    {"graph", "plan"},
	    {"lower", "lower"},
	    {"lower", "collapse"},
	    {"lower", "verify-lower"},
	    {"schedule", "schedule"},
	    {"schedule", "verify-schedule"},
	    {"emit-llvm", "emit-llvm"},
	};
	long long bound = (long long)VISITS_PER_VALUE * r->nvalues;
	for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
		long long n = count_of(r, counters[i].sec, counters[i].name);
		OKF(n > 0 && n <= bound, "%s: %s %s visited %lld nodes; bound %lld (%d values)",
		    what, counters[i].sec, counters[i].name, n, bound, r->nvalues);
	}
	OKF(count_of(r, "lower", "stages") == 1, "%s: one stage", what);
	OKF(count_of(r, "emit-llvm", "insns") > 0 && count_of(r, "optimize", "insns") > 0,
	    "%s: the modules' instructions are counted", what);
}

static void
chains_compile_in_linear_work(void)
{
	static const char *const ops[] = {"Add", "Mul", "Maximum", "Pow"};
	Run r;
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		char *json = chain(ops[i], 60);
		compile(json, NULL, 62, &r);
		OKF(r.st == KC_OK, "%s x 60: %s at %s: %s", ops[i], kc_status_code(r.st),
		    r.err.where, r.err.msg);
		if (r.st == KC_OK)
			check_visits(&r, ops[i]);
		kc_buf_free(&r.dump);
		free(json);
	}
	/* a long chain: the same bound per value, so no pass grows faster */
	char *json = chain("Add", 1000);
	compile(json, NULL, 1002, &r);
	OKF(r.st == KC_OK, "Add x 1000: %s at %s: %s", kc_status_code(r.st), r.err.where,
	    r.err.msg);
	if (r.st == KC_OK)
		check_visits(&r, "Add x 1000");
	kc_buf_free(&r.dump);
	free(json);
}

/* r failed with KC_WORK_BUDGET in pass `where`, its message naming
 * `limit`; before_llvm: no LLVM section was written. */
static void
check_budget(const Run *r, const char *where, const char *limit, bool before_llvm)
{
	OKF(r->st == KC_WORK_BUDGET, "status %s (%s at %s)", kc_status_code(r->st), r->err.msg,
	    r->err.where);
	OKF(strcmp(kc_status_code(r->st), "work_budget_exceeded") == 0, "wire code %s",
	    kc_status_code(r->st));
	OKF(strcmp(r->err.where, where) == 0, "where %s, not %s", r->err.where, where);
	OKF(strstr(r->err.msg, limit) && strncmp(r->err.msg, "work budget: ", 13) == 0,
	    "message '%s' names %s", r->err.msg, limit);
	if (before_llvm)
		OKF(!strstr(r->dump.data, "== emit-llvm =="), "tripped before LLVM: %s", where);
}

static void
budget_trips(void)
{
	char *json = chain("Add", 60);
	Run r;

	/* the schedule's stage plan already visits more: before lowering */
	KcLimits lim = {.max_work_nodes = 100};
	compile(json, &lim, 62, &r);
	check_budget(&r, "plan", "max_work_nodes 100", true);
	OK(strstr(r.err.msg, "graph nodes visited in pass plan") != NULL);
	OK(!strstr(r.dump.data, "== lower =="));
	kc_buf_free(&r.dump);

	/* the plan fits, inlining the chain does not: inside ln_lower */
	lim.max_work_nodes = 300;
	compile(json, &lim, 62, &r);
	check_budget(&r, "lower", "max_work_nodes 300", true);
	OK(strstr(r.err.msg, "expression nodes visited in pass lower") != NULL);
	kc_buf_free(&r.dump);

	/* a stage count from the plan, before any stage is built */
	char *red = reduce_chain(2); /* 2 reductions + the output: 3 stages */
	KcLimits one = {.max_work_stages = 2};
	compile(red, &one, 5, &r);
	check_budget(&r, "lower", "max_work_stages 2", true);
	OK(strstr(r.err.msg, "3 stages after pass lower") != NULL);
	kc_buf_free(&r.dump);
	free(red);

	/* instructions: as emitted, before the pass pipeline runs */
	KcLimits ins = {.max_work_insns = 50};
	compile(json, &ins, 62, &r);
	check_budget(&r, "emit-llvm", "max_work_insns 50", false);
	OK(strstr(r.dump.data, "== emit-llvm ==") && !strstr(r.dump.data, "== optimize =="));
	kc_buf_free(&r.dump);

	/* the limits are per compile: the same graph under the defaults */
	compile(json, NULL, 62, &r);
	OK(r.st == KC_OK);
	kc_buf_free(&r.dump);
	free(json);

	/* within max_ops, but its IR is quadratic in the ops: the default
	 * budget refuses it in emission, before LLVM optimises it */
	red = reduce_chain(600);
	compile(red, NULL, 1201, &r);
	check_budget(&r, "emit-llvm", "max_work_insns 262144", false);
	kc_buf_free(&r.dump);
	free(red);
}

int
main(void)
{
	kc_compiler_init();
	t_sub("Fibonacci chains compile in linear work", chains_compile_in_linear_work);
	t_sub("the work budget trips naming pass and limit", budget_trips);
	return t_done();
}
