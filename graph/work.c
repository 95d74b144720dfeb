/* work.c - the work counters of one compile and its work budget.
 *
 * The passes count (kc_work_visit in graph.h); this file resolves the
 * budget from KcLimits, checks a counter against its kind's limit, and
 * prints a dump section's counts. The defaults scale with max_ops, so
 * raising max_ops raises the budget with it: a pass that visits each node
 * a few times stays far below max_work_nodes, and only a walk that grows
 * faster than the graph (or a graph whose inlined form does) reaches it.
 */
#include <inttypes.h>
#include <string.h>

#include "graph.h"

#define DEFAULT_MAX_OPS 4096 /* as kc_parse */
#define NODES_PER_OP 4096    /* default max_work_nodes = NODES_PER_OP x max_ops */
#define STAGES_PER_OP 2      /* default max_work_stages */
#define INSNS_PER_OP 64      /* default max_work_insns */

static const struct {
	KcPass section;
	const char *pass;
	KcWorkKind kind;
} rows[KC_WORK_COUNT] = {
#define W(e, sec, pass, kind) [KC_WORK_##e] = {KC_PASS_##sec, pass, kind},
#include "work.def"
#undef W
};

void
kc_work_init(KcWork *w, const KcLimits *lim)
{
	KcLimits l = {0};
	if (lim)
		l = *lim;
	int64_t ops = l.max_ops > 0 ? l.max_ops : DEFAULT_MAX_OPS;
	memset(w, 0, sizeof *w);
	w->max_nodes = l.max_work_nodes > 0 ? l.max_work_nodes : NODES_PER_OP * ops;
	w->max_stages = l.max_work_stages > 0 ? l.max_work_stages : STAGES_PER_OP * ops;
	w->max_insns = l.max_work_insns > 0 ? l.max_work_insns : INSNS_PER_OP * ops;
}

KcStatus
kc_work_fail(const KcWork *w, KcWorkCounter k, KcErr *err)
{
	const char *pass = rows[k].pass;
	long long n = (long long)w->n[k];
	switch (rows[k].kind) {
	case WK_NODES:
		return kc_fail(err, KC_WORK_BUDGET, pass,
		               "work budget: %lld %s nodes visited in pass %s exceeds "
		               "max_work_nodes %lld",
		               n, rows[k].section == KC_PASS_GRAPH ? "graph" : "expression", pass,
		               (long long)w->max_nodes);
	case WK_STAGES:
		return kc_fail(
		    err, KC_WORK_BUDGET, pass,
		    "work budget: %lld stages after pass %s exceeds max_work_stages %lld", n, pass,
		    (long long)w->max_stages);
	case WK_INSNS:
		return kc_fail(err, KC_WORK_BUDGET, pass,
		               "work budget: %lld LLVM instructions after pass %s exceeds "
		               "max_work_insns %lld",
		               n, pass, (long long)w->max_insns);
	}
	KC_ASSERT(0 && "bad work kind");
	return KC_INTERNAL;
}

KcStatus
kc_work_check(const KcWork *w, KcWorkCounter k, KcErr *err)
{
	int64_t max = 0;
	switch (rows[k].kind) {
	case WK_NODES: max = w->max_nodes; break;
	case WK_STAGES: max = w->max_stages; break;
	case WK_INSNS: max = w->max_insns; break;
	}
	return w->n[k] <= max ? KC_OK : kc_work_fail(w, k, err);
}

void
kc_work_reset(KcWork *w, KcPass from)
{
	for (int k = 0; k < KC_WORK_COUNT; k++)
		if (rows[k].section >= from)
			w->n[k] = 0;
}

void
kc_work_print(const KcWork *w, KcPass section, KcBuf *out)
{
	kc_buf_puts(out, "; work:");
	for (int k = 0; k < KC_WORK_COUNT; k++) {
		if (rows[k].section != section)
			continue;
		const char *label = rows[k].kind == WK_NODES    ? rows[k].pass
		                    : rows[k].kind == WK_STAGES ? "stages"
		                                                : "insns";
		kc_buf_printf(out, " %s=%" PRId64, label, w->n[k]);
	}
	kc_buf_putc(out, '\n');
}
