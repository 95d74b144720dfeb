/* print.c - textual dump of the loop-nest IR (pass dumps "== lower ==" and
 * "== schedule =="). One line per buffer, loop and expression node:
 *
 *   stage s0 (grain 16384):
 *     for v2 in 0..12288 parallel vectorized(8) unroll(2):
 *       %3 = load b0[v2] : float32
 *       %5 = Add %3, %4 : float32
 *       b2[v2] = %5
 *
 * A workspace prints as "buffer b3 workspace float32[32]", a fused
 * group's row block as "buffer b3 local float32[1]"; the lead of a fused
 * group says "fused rows with s1..s2 at 1 loop" and its members "fused into
 * the region above" (their shared loops print again, unannotated); a
 * reduction stage marks its reduction loops and its store:
 *   stage s0 (grain 16384) reduce Maximum over 1 loop:
 *     for v0 in 0..32 parallel:
 *       for v1 in 0..1001 reduce vectorized(16):
 *         b3[v0] max= %4
 * A shared node prints once per stage (the marks are stamped with the
 * stage, so no array is cleared per stage). compile.c ends the section
 * with the passes' "; work:" counts (kc_work_print).
 */
#include <string.h>

#include "loop.h"

/* An index expression, infix. */
void
ln_idx_print(const LnIdx *x, KcBuf *out)
{
	switch (x->kind) {
	case LNI_CONST: kc_buf_printf(out, "%lld", (long long)x->c); return;
	case LNI_VAR: kc_buf_printf(out, "v%d", x->var); return;
	case LNI_ADD:
		ln_idx_print(x->a, out);
		kc_buf_puts(out, " + ");
		ln_idx_print(x->b, out);
		return;
	case LNI_MUL:
	case LNI_DIV:
	case LNI_MOD:
		if (x->a->kind == LNI_ADD)
			kc_buf_putc(out, '(');
		ln_idx_print(x->a, out);
		if (x->a->kind == LNI_ADD)
			kc_buf_putc(out, ')');
		kc_buf_printf(out, " %c %lld",
		              x->kind == LNI_MUL   ? '*'
		              : x->kind == LNI_DIV ? '/'
		                                   : '%',
		              (long long)x->c);
		return;
	case LNI_RSUB:
		kc_buf_printf(out, "%lld - (", (long long)x->c);
		ln_idx_print(x->a, out);
		kc_buf_putc(out, ')');
		return;
	}
}

/* Prints e after its operands, once per stage (done[id] == stamp). */
static void
print_expr(const LnExpr *e, int *done, int stamp, KcBuf *out)
{
	if (done[e->id] == stamp)
		return;
	done[e->id] = stamp;
	if (e->kind == LNE_OP)
		for (int i = 0; i < e->nargs; i++)
			print_expr(e->args[i], done, stamp, out);
	if (e->kind == LNE_LOAD && e->dyn)
		print_expr(e->dyn, done, stamp, out);
	kc_buf_printf(out, "      %%%d = ", e->id);
	switch (e->kind) {
	case LNE_CONST:
		if (kc_dtype_info[e->dtype].cls == DTC_FLOAT)
			kc_buf_printf(out, "const %.17g", e->fval);
		else
			kc_buf_printf(out, "const %lld", (long long)e->ival);
		break;
	case LNE_LOAD:
		kc_buf_printf(out, "load b%d[", e->buf);
		ln_idx_print(e->idx, out);
		if (e->dyn)
			kc_buf_printf(out, " + clamp(%%%d, 0, %lld) * %lld", e->dyn->id,
			              (long long)e->dyn_extent - 1, (long long)e->dyn_stride);
		kc_buf_putc(out, ']');
		break;
	case LNE_INDEX:
		kc_buf_puts(out, "index ");
		ln_idx_print(e->idx, out);
		break;
	case LNE_OP:
		kc_buf_puts(out, ir_op_info[e->op].name);
		for (int i = 0; i < e->nargs; i++)
			kc_buf_printf(out, "%s%%%d", i ? ", " : " ", e->args[i]->id);
		break;
	}
	kc_buf_printf(out, " : %s\n", kc_dtype_info[e->dtype].name);
}

/* Buffers, then each stage: its loops and its expression DAG. */
void
ln_print(const LoopNest *ln, KcBuf *out)
{
	int *done = ARENA_ARRAY(ln->arena, int, ln->nexprs + 1);

	for (int i = 0; i < ln->nbufs; i++) {
		const LnBuf *b = &ln->bufs[i];
		if (b->local)
			kc_buf_printf(out, "buffer b%d local %s[%lld] (%s)\n", i,
			              kc_dtype_info[b->dtype].name, (long long)b->numel, b->name);
		else if (b->arg < 0)
			kc_buf_printf(out, "buffer b%d workspace %s[%lld] (%s)\n", i,
			              kc_dtype_info[b->dtype].name, (long long)b->numel, b->name);
		else
			kc_buf_printf(out, "buffer b%d %s %s[%lld] arg %d (%s)\n", i,
			              b->is_output ? "out"
			              : b->inplace ? "in/written"
			                           : "in",
			              kc_dtype_info[b->dtype].name, (long long)b->numel, b->arg,
			              b->name);
	}
	for (int s = 0; s < ln->nstages; s++) {
		const LnStage *st = &ln->stages[s];
		if (st->gemm) {
			const LnGemm *G = st->gemm;
			kc_buf_printf(
			    out,
			    "stage %s gemm b%d[%lld x %lld x %lld] = b%d(strides %lld,%lld,%lld)"
			    " * b%d(strides %lld,%lld,%lld) over K=%lld:\n",
			    st->name, G->c, (long long)G->batch, (long long)G->M, (long long)G->N,
			    G->a, (long long)G->a_bs, (long long)G->a_ms, (long long)G->a_ks, G->b,
			    (long long)G->b_bs, (long long)G->b_ks, (long long)G->b_ns,
			    (long long)G->K);
			kc_buf_printf(
			    out,
			    "  for v%d in 0..%lld parallel (units: batch x %lld col blocks x "
			    "%lld row blocks)\n    micro-tile %d x %d (vectors of %d), mc %lld, nc "
			    "%lld, kc %lld, packed B on the stack",
			    st->loops[0].var, (long long)st->loops[0].extent, (long long)G->units_n,
			    (long long)G->units_m, G->mr, G->nr, G->vw, (long long)G->mc,
			    (long long)G->nc, (long long)G->kc);
			if (G->a_pack)
				kc_buf_puts(out, ", half A converted per micro-panel on the stack");
			if (G->epi >= 0)
				kc_buf_printf(out, ", epilogue s%d fused", G->epi);
			kc_buf_puts(out, "\n");
			continue;
		}
		kc_buf_printf(out, "stage %s (grain %lld)", st->name, (long long)st->grain);
		if (st->fused_into >= 0)
			kc_buf_printf(out, " epilogue of s%d, runs on its tiles", st->fused_into);
		if (st->tile > 0)
			kc_buf_printf(out, " tiled %dx%d over its last 2 loops", st->tile,
			              st->tile);
		if (st->stream)
			kc_buf_puts(out, " a permuted copy, stored non-temporally");
		for (int i = 0; i < st->nstores && i < 32; i++)
			if (st->ntmask & (1u << i))
				kc_buf_printf(out, " b%d stored non-temporally", st->stores[i].buf);
		if (st->nred > 0)
			kc_buf_printf(out, " reduce %s over %d loop%s", ir_op_info[st->red_op].name,
			              st->nred, st->nred > 1 ? "s" : "");
		if (st->nred > 0 && st->ninner > 0)
			kc_buf_printf(out, " (accumulator b%d)", st->accbuf);
		if (st->nred > 0 && st->ninner > 0 && st->jam > 1)
			kc_buf_printf(out, " jammed %d rows", st->jam);
		if (st->fuse_count > 1)
			kc_buf_printf(out, " fused rows with %s..%s at %d loop%s", st[1].name,
			              st[st->fuse_count - 1].name, st->fuse_outer,
			              st->fuse_outer > 1 ? "s" : "");
		if (st->fused)
			kc_buf_printf(out, " fused into the region above at %d loop%s",
			              st->fuse_outer, st->fuse_outer > 1 ? "s" : "");
		kc_buf_puts(out, ":\n");
		for (int l = 0; l < st->nloops; l++) {
			const LnLoop *lp = &st->loops[l];
			kc_buf_printf(out, "%*sfor v%d in 0..%lld", 2 * l + 2, "", lp->var,
			              (long long)lp->extent);
			if (!ln_loop_spatial(st, l))
				kc_buf_puts(out, " reduce");
			if (lp->kind & LNL_PARALLEL)
				kc_buf_puts(out, " parallel");
			if (lp->kind & LNL_VECTORIZED)
				kc_buf_printf(out, " vectorized(%d)", lp->width);
			if (lp->kind & LNL_UNROLLED)
				kc_buf_printf(out, " unroll(%d)", lp->unroll);
			kc_buf_puts(out, ":\n");
		}
		for (int i = 0; i < st->nstores; i++) {
			const LnStore *sto = &st->stores[i];
			print_expr(sto->value, done, s + 1, out);
			kc_buf_printf(out, "      b%d[", sto->buf);
			ln_idx_print(sto->idx, out);
			kc_buf_printf(out, "] %s= %%%d\n",
			              st->nred == 0                 ? ""
			              : st->red_op == IR_OP_ADD     ? "+"
			              : st->red_op == IR_OP_MUL     ? "*"
			              : st->red_op == IR_OP_MAXIMUM ? "max"
			                                            : "min",
			              sto->value->id);
		}
	}
}
