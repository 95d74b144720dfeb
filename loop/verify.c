/* verify.c - ln_verify: structural checks of a loop nest, run after
 * lowering and again after scheduling (compile.c): every index in bounds
 * of its buffer, every variable bound by an enclosing loop, dtypes
 * consistent, nothing read before a stage of its group wrote it. A failure
 * is a compiler bug caught before LLVM sees it (KC_CODEGEN naming the
 * pass), not a miscompiled kernel. A stage's expressions form a DAG whose
 * shared nodes the stores reach along many paths (a Fibonacci chain of n
 * adds has 2^n of them), so the walk marks what it checked, per stage:
 * the checks depend only on the node and the stage's bound vars.
 */
#include <string.h>

#include "loop.h"

/* One stage's walk: what its checks read, and the marks of the nodes it
 * checked (mark[id] == stamp). */
typedef struct Walk {
	const LoopNest *ln;
	const bool *bound;   /* per var: bound by a loop of the stage */
	const bool *written; /* per buffer: by an earlier stage */
	int *mark;
	int stamp;
	KcWorkCounter k;
	const char *pass;
	KcErr *err;
} Walk;

static bool
idx_vars_bound(Walk *w, const LnIdx *x)
{
	w->ln->work->n[w->k]++;
	switch (x->kind) {
	case LNI_CONST: return true;
	case LNI_VAR: return w->bound[x->var];
	case LNI_ADD: return idx_vars_bound(w, x->a) && idx_vars_bound(w, x->b);
	case LNI_MUL:
	case LNI_DIV:
	case LNI_MOD:
	case LNI_RSUB: return idx_vars_bound(w, x->a);
	}
	return false;
}

/* Checks loads (buffer, dtype, bounds) under e, each node once. */
static KcStatus
verify_expr(Walk *w, const LnExpr *e)
{
	const LoopNest *ln = w->ln;
	const bool *written = w->written;
	const char *pass = w->pass;
	KcErr *err = w->err;

	if (!kc_work_visit(ln->work, w->k))
		return kc_work_fail(ln->work, w->k, err);
	if (w->mark[e->id] == w->stamp)
		return KC_OK;
	w->mark[e->id] = w->stamp;
	switch (e->kind) {
	case LNE_CONST: return KC_OK;
	case LNE_INDEX:
		if (!idx_vars_bound(w, e->idx))
			return kc_fail(err, KC_CODEGEN, pass, "index value uses an unbound var");
		if (kc_dtype_info[e->dtype].cls != DTC_INT &&
		    kc_dtype_info[e->dtype].cls != DTC_UINT)
			return kc_fail(err, KC_CODEGEN, pass, "index value is not an integer");
		return KC_OK;
	case LNE_LOAD:
		if (e->buf < 0 || e->buf >= ln->nbufs)
			return kc_fail(err, KC_CODEGEN, pass, "load from bad buffer %d", e->buf);
		if ((ln->bufs[e->buf].is_output || ln->bufs[e->buf].arg < 0) && !written[e->buf])
			return kc_fail(err, KC_CODEGEN, pass,
			               "load from buffer %d before a stage wrote it", e->buf);
		if (ln->bufs[e->buf].dtype != e->dtype)
			return kc_fail(err, KC_CODEGEN, pass, "load dtype mismatch on %d", e->buf);
		if (!idx_vars_bound(w, e->idx))
			return kc_fail(err, KC_CODEGEN, pass, "load index uses an unbound var");
		if (ln_idx_max(ln, e->idx) + (e->dyn ? (e->dyn_extent - 1) * e->dyn_stride : 0) >=
		    ln->bufs[e->buf].numel)
			return kc_fail(err, KC_CODEGEN, pass, "load out of bounds of buffer %d",
			               e->buf);
		if (e->dyn) {
			KcDtypeClass c = kc_dtype_info[e->dyn->dtype].cls;
			if ((c != DTC_INT && c != DTC_UINT) || e->dyn_extent < 1 ||
			    e->dyn_stride < 1)
				return kc_fail(err, KC_CODEGEN, pass, "bad data-dependent load");
			return verify_expr(w, e->dyn);
		}
		return KC_OK;
	case LNE_OP:
		for (int i = 0; i < e->nargs; i++)
			if (verify_expr(w, e->args[i]))
				return err->status;
		if (ir_op_info[e->op].kind != OPK_ELEMWISE)
			return kc_fail(err, KC_CODEGEN, pass, "layout op left in a loop body");
		return KC_OK;
	}
	return KC_OK;
}

/* A fused group led by stage s (fuse.c): members follow it, share its
 * first fuse_outer loops (spatial, same extents), and only the lead's
 * shared loops may be parallel. True when malformed. */
static bool
verify_group(const LoopNest *ln, int s)
{
	const LnStage *lead = &ln->stages[s];
	int P = lead->fuse_outer;

	if (s + lead->fuse_count > ln->nstages || P < 1 || lead->fused)
		return true;
	for (int k = 0; k < lead->fuse_count; k++) {
		const LnStage *st = &ln->stages[s + k];
		if ((k > 0) != st->fused || st->fuse_outer != P || st->nloops < P ||
		    st->ninner > 0 || (k > 0 && st->fuse_count > 1))
			return true;
		for (int l = 0; l < st->nloops; l++) {
			bool par = (st->loops[l].kind & LNL_PARALLEL) != 0;
			if (l < P && (!ln_loop_spatial(st, l) ||
			              st->loops[l].extent != lead->loops[l].extent))
				return true;
			if (par && (k > 0 || l >= P))
				return true;
		}
	}
	return false;
}

KcStatus
ln_verify(const LoopNest *ln, KcWorkCounter k, KcErr *err)
{
	const char *pass = k == KC_WORK_VERIFY_LOWER ? "verify-lower" : "verify-schedule";
	bool *bound = ARENA_ARRAY(ln->arena, bool, ln->nvars + 1);
	bool *written = ARENA_ARRAY(ln->arena, bool, ln->nbufs + 1); /* by earlier stages */
	Walk w = {ln, bound, written, ARENA_ARRAY(ln->arena, int, ln->nexprs + 1), 0, k, pass, err};

	for (int s = 0; s < ln->nstages; s++) {
		const LnStage *st = &ln->stages[s];
		int npar = 0, nsp = st->nloops - st->nred;
		if (st->gemm) {
			if (gemm_verify(ln, st, pass, err))
				return err->status;
			written[st->gemm->c] = true;
			continue;
		}
		if (st->nred > 0 && st->ninner > 0 &&
		    (st->ninner >= st->nloops || st->accbuf < 0 || st->accbuf >= ln->nbufs ||
		     ln->bufs[st->accbuf].arg >= 0 ||
		     ln->bufs[st->accbuf].numel < ln->bufs[st->stores[0].buf].numel))
			return kc_fail(err, KC_CODEGEN, pass, "stage %d: bad accumulator", s);
		if (st->fuse_count > 1 && verify_group(ln, s))
			return kc_fail(err, KC_CODEGEN, pass, "stage %d: malformed fused group", s);
		if (st->nloops < 1 || st->nloops > LN_MAX_LOOPS)
			return kc_fail(err, KC_CODEGEN, pass, "stage %d has %d loops", s,
			               st->nloops);
		if (st->nred < 0 || nsp < 1 || (st->nred > 0 && st->nstores != 1))
			return kc_fail(err, KC_CODEGEN, pass, "stage %d is a malformed reduction",
			               s);
		for (int l = 0; l < st->nloops; l++) {
			const LnLoop *lp = &st->loops[l];
			if (lp->var < 0 || lp->var >= ln->nvars ||
			    ln->var_extent[lp->var] != lp->extent)
				return kc_fail(err, KC_CODEGEN, pass,
				               "stage %d loop %d is malformed", s, l);
			if ((lp->kind & LNL_VECTORIZED) && (lp->width < 1 || lp->width > 64))
				return kc_fail(err, KC_CODEGEN, pass, "bad vector width");
			if ((lp->kind & LNL_PARALLEL) && ++npar > 1)
				return kc_fail(err, KC_CODEGEN, pass,
				               "two parallel loops in stage %d", s);
			if ((lp->kind & LNL_PARALLEL) && !ln_loop_spatial(st, l))
				return kc_fail(err, KC_CODEGEN, pass,
				               "stage %d: a reduction loop is parallel", s);
			if (ln_loop_spatial(st, l))
				bound[lp->var] = true;
		}
		for (int i = 0; i < st->nstores; i++) {
			const LnStore *sto = &st->stores[i];
			const LnBuf *b =
			    sto->buf >= 0 && sto->buf < ln->nbufs ? &ln->bufs[sto->buf] : NULL;
			if (!b || !(b->is_output || b->arg < 0 || b->inplace))
				return kc_fail(err, KC_CODEGEN, pass, "store to bad buffer %d",
				               sto->buf);
			if (sto->value->dtype != b->dtype &&
			    !(st->nred > 0 && sto->value->dtype == st->acc))
				return kc_fail(err, KC_CODEGEN, pass, "store dtype mismatch on %d",
				               sto->buf);
			if (!idx_vars_bound(&w, sto->idx))
				return kc_fail(err, KC_CODEGEN, pass,
				               "store index uses an unbound (or reduction) var");
			if (b->numel > 0 && ln_idx_max(ln, sto->idx) >= b->numel)
				return kc_fail(err, KC_CODEGEN, pass,
				               "store out of bounds of buffer %d", sto->buf);
		}
		for (int l = 0; l < st->nloops; l++)
			bound[st->loops[l].var] = true;
		w.stamp = s + 1;
		for (int i = 0; i < st->nstores; i++)
			if (verify_expr(&w, st->stores[i].value))
				return err->status;
		for (int i = 0; i < st->nstores; i++)
			written[st->stores[i].buf] = true;
		/* the next stage binds its own vars: clear this one's, not all */
		for (int l = 0; l < st->nloops; l++)
			bound[st->loops[l].var] = false;
	}
	return KC_OK;
}
