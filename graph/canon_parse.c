/* canon_parse.c - kc_parse_workload: a graph again from its canonical form.
 *
 * The store keeps each kernel's workload as canon.c wrote it, not the body
 * that was compiled, so compiling a stored kernel again (its pass dumps)
 * starts from that form. The form is written back as a composite document,
 * tensors named as the form names them (i<k>, n<k>.<j>), and read by
 * kc_parse, so every check of the parser applies. The one idea: the graph
 * is trusted only when its own canonical form is, byte for byte, the one
 * given. Whatever the writer below cannot express (a NaN constant, attrs
 * of an op it does not know) fails that check instead of compiling another
 * workload.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"

/* One operand of a node: kernel input k, output j of node k, or a constant
 * ("c:<dtype>:<value>", text borrowed from the parsed form). */
typedef struct Ref {
	enum { REF_INPUT, REF_NODE, REF_CONST } kind;
	int k, j;
	const char *text;
} Ref;

typedef struct Node {
	const cJSON *json; /* {"op", "in", "attrs"?, "out"} */
	const char *op;
	Ref *in;
	int nin;
	bool assign; /* Assign/InplaceAssign: writes into kernel input in[0] */
} Node;

typedef struct Form {
	const cJSON **inputs; /* [dtype, [dims]] per kernel input */
	int ninputs;
	Node *nodes;
	int nnodes;
} Form;

/* [dtype, [int, ...]] */
static bool
type_ok(const cJSON *t)
{
	if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) != 2 || !cJSON_IsString(t->child) ||
	    !cJSON_IsArray(t->child->next))
		return false;
	for (const cJSON *d = t->child->next->child; d; d = d->next)
		if (!cJSON_IsNumber(d))
			return false;
	return true;
}

/* "i<k>", "n<k>.<j>" (k below the counts given) or "c:<dtype>:<value>". */
static bool
parse_ref(const cJSON *s, int ninputs, int nnodes, Ref *out)
{
	if (!cJSON_IsString(s))
		return false;
	const char *p = s->valuestring;
	char *end;
	memset(out, 0, sizeof *out);
	if (p[0] == 'c' && p[1] == ':') {
		out->kind = REF_CONST;
		out->text = p + 2;
		return strchr(p + 2, ':') != NULL;
	}
	if (p[0] != 'i' && p[0] != 'n')
		return false;
	long k = strtol(p + 1, &end, 10);
	if (end == p + 1 || k < 0)
		return false;
	out->k = (int)k;
	if (p[0] == 'i') {
		out->kind = REF_INPUT;
		return *end == 0 && k < ninputs;
	}
	out->kind = REF_NODE;
	if (*end != '.' || k >= nnodes)
		return false;
	const char *q = end + 1;
	long j = strtol(q, &end, 10);
	out->j = (int)j;
	return end != q && *end == 0 && j >= 0 && j < 64;
}

/* The [dtype, [dims]] of a non-constant operand, or NULL. */
static const cJSON *
ref_type(const Form *f, const Ref *r)
{
	if (r->kind == REF_INPUT)
		return f->inputs[r->k];
	if (r->kind != REF_NODE)
		return NULL;
	const cJSON *t =
	    cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(f->nodes[r->k].json, "out"), r->j);
	return type_ok(t) ? t : NULL;
}

static void
put_ints(KcBuf *b, const cJSON *list)
{
	kc_buf_putc(b, '[');
	for (const cJSON *d = list->child; d; d = d->next)
		kc_buf_printf(b, "%s%" PRId64, d == list->child ? "" : ",",
		              (int64_t)d->valuedouble);
	kc_buf_putc(b, ']');
}

static void
put_desc(KcBuf *b, const cJSON *type, const char *name)
{
	kc_buf_puts(b, "{\"data_type\":");
	kc_buf_json_str(b, type->child->valuestring);
	kc_buf_puts(b, ",\"shape\":");
	put_ints(b, type->child->next);
	kc_buf_puts(b, ",\"tensor_name\":");
	kc_buf_json_str(b, name);
	kc_buf_putc(b, '}');
}

static void
put_ref_desc(KcBuf *b, const Form *f, const Ref *r)
{
	char name[32];
	if (r->kind == REF_INPUT)
		snprintf(name, sizeof name, "i%d", r->k);
	else
		snprintf(name, sizeof name, "n%d.%d", r->k, r->j);
	put_desc(b, ref_type(f, r), name);
}

/* "<dtype>:<value>" -> {"data_type", "shape": [1], "value"}. Floats are
 * written with 17 digits (exact for a double); infinities as 1e999, which
 * the JSON reader takes as one. NaN has no JSON spelling: false. */
static bool
put_const(KcBuf *b, const char *text)
{
	const char *colon = strchr(text, ':');
	const char *v = colon + 1;
	char dt[32];
	if ((size_t)(colon - text) >= sizeof dt)
		return false;
	snprintf(dt, sizeof dt, "%.*s", (int)(colon - text), text);
	kc_buf_puts(b, "{\"data_type\":");
	kc_buf_json_str(b, dt);
	kc_buf_puts(b, ",\"shape\":[1],\"tensor_name\":\"c\",\"value\":");
	if (strstr(dt, "float")) {
		char *end;
		double x = strtod(v, &end);
		if (end == v || *end || isnan(x))
			return false;
		if (isinf(x))
			kc_buf_puts(b, x > 0 ? "1e999" : "-1e999");
		else
			kc_buf_printf(b, "%.17g", x);
	} else {
		size_t n = strspn(v + (*v == '-'), "0123456789");
		if (n == 0 || v[(*v == '-') + n] != 0)
			return false;
		kc_buf_puts(b, v);
	}
	kc_buf_putc(b, '}');
	return true;
}

static int64_t
dim(const cJSON *type, int d)
{
	const cJSON *e = cJSON_GetArrayItem(type->child->next, d);
	return e ? (int64_t)e->valuedouble : 1;
}

static int
rank(const cJSON *type)
{
	return cJSON_GetArraySize(type->child->next);
}

static const cJSON *
attr(const cJSON *attrs, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(attrs, key);
}

static int64_t
attr_at(const cJSON *attrs, const char *key, int i)
{
	const cJSON *e = cJSON_GetArrayItem(attr(attrs, key), i);
	return cJSON_IsNumber(e) ? (int64_t)e->valuedouble : 0;
}

/* StridedSlice: the form keeps, per input dim, the first index read and
 * the stride, a shrink bit per input dim and a new-axis bit per output dim;
 * the output shape gives each range's length. Written back as a spec with
 * one entry per input dim and per new axis, no ellipsis, explicit ends. */
static bool
put_slice(KcBuf *b, const cJSON *attrs, const cJSON *in, const cJSON *out)
{
	int64_t bg[16], en[16], st[16];
	unsigned em = 0, sm = 0, nam = 0;
	const cJSON *sj = attr(attrs, "shrink_axis_mask"), *nj = attr(attrs, "new_axes");
	unsigned shrink = cJSON_IsNumber(sj) ? (unsigned)sj->valuedouble : 0;
	unsigned newax = cJSON_IsNumber(nj) ? (unsigned)nj->valuedouble : 0;
	int n = 0, whole_tail = 0, r = 0, d = 0, ri = rank(in), ro = rank(out);

	while (d < ri || (r < ro && (newax >> r & 1))) {
		if (n >= 16)
			return false;
		if (r < ro && (newax >> r & 1)) {
			nam |= 1u << n;
			bg[n] = 0, en[n] = 1, st[n] = 1;
			n++, r++;
			whole_tail = 0;
			continue;
		}
		int64_t lo = attr_at(attrs, "begin", d), s = attr_at(attrs, "strides", d);
		if (shrink >> d & 1) {
			sm |= 1u << n;
			bg[n] = lo, en[n] = lo + 1, st[n] = 1;
			n++, d++;
			whole_tail = 0;
			continue;
		}
		if (r >= ro || s == 0)
			return false;
		int64_t len = dim(out, r), hi = lo + (len - 1) * s;
		bg[n] = lo, st[n] = s;
		if (s > 0) {
			en[n] = hi + 1;
		} else if (hi - 1 >= 0) {
			en[n] = hi - 1;
		} else {
			em |= 1u << n; /* down to index 0: no end index says that */
			en[n] = 0;
		}
		whole_tail = lo == 0 && s == 1 && len == dim(in, d) ? whole_tail + 1 : 0;
		n++, d++, r++;
	}
	/* dims after the spec are whole: trailing whole ranges may go, as the
	 * spec is at most KC_MAX_RANK entries */
	while (n > KC_MAX_RANK && whole_tail > 0)
		n--, whole_tail--;
	if (n > KC_MAX_RANK)
		return false;
	const char *names[3] = {"begin", "end", "strides"};
	const int64_t *lists[3] = {bg, en, st};
	for (int k = 0; k < 3; k++) {
		kc_buf_printf(b, "%s\"%s\":[", k ? "," : "", names[k]);
		for (int i = 0; i < n; i++)
			kc_buf_printf(b, "%s%" PRId64, i ? "," : "", lists[k][i]);
		kc_buf_putc(b, ']');
	}
	kc_buf_printf(b,
	              ",\"begin_mask\":0,\"end_mask\":%u,\"ellipsis_mask\":0,"
	              "\"new_axis_mask\":%u,\"shrink_axis_mask\":%u",
	              em, nam, sm);
	return true;
}

/* Pool2D: the form drops round_mode (it is in the output shape), so it is
 * read back from the output height; its pads are (top, bottom, left,
 * right), AKG's attr is (top, left, bottom, right). */
static bool
put_pool(KcBuf *b, const cJSON *attrs, const cJSON *in, const cJSON *out)
{
	const cJSON *layout = attr(attrs, "layout"), *type = attr(attrs, "pool_type");
	if (!cJSON_IsString(layout) || !cJSON_IsString(type) || rank(in) != 4 || rank(out) != 4)
		return false;
	int hd = strcmp(layout->valuestring, "NHWC") == 0 ? 1 : 2;
	int64_t k = attr_at(attrs, "kernel", 0), s = attr_at(attrs, "stride", 0);
	int64_t span = dim(in, hd) + attr_at(attrs, "pad", 0) + attr_at(attrs, "pad", 1) - k;
	bool ceil_mode = s > 0 && span >= 0 && dim(out, hd) != span / s + 1;
	kc_buf_puts(b, "\"data_layout\":");
	kc_buf_json_str(b, layout->valuestring);
	kc_buf_puts(b, ",\"pool_type\":");
	kc_buf_json_str(b, type->valuestring);
	kc_buf_printf(b,
	              ",\"kernel_size\":[%" PRId64 ",%" PRId64 "],\"strides\":[%" PRId64 ",%" PRId64
	              "],\"pad\":[%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
	              "],\"round_mode\":\"%s\"",
	              k, attr_at(attrs, "kernel", 1), s, attr_at(attrs, "stride", 1),
	              attr_at(attrs, "pad", 0), attr_at(attrs, "pad", 2), attr_at(attrs, "pad", 1),
	              attr_at(attrs, "pad", 3), ceil_mode ? "ceil" : "floor");
	return true;
}

/* Conv2D: the form's resolved layout and pads under the attr names the
 * parser reads first. */
static bool
put_conv(KcBuf *b, const cJSON *attrs)
{
	const cJSON *layout = attr(attrs, "layout"), *groups = attr(attrs, "groups");
	if (!cJSON_IsString(layout) || !cJSON_IsNumber(groups))
		return false;
	kc_buf_puts(b, "\"data_format\":");
	kc_buf_json_str(b, layout->valuestring);
	kc_buf_printf(
	    b,
	    ",\"groups\":%" PRId64 ",\"stride\":[%" PRId64 ",%" PRId64 "],\"dilation\":[%" PRId64
	    ",%" PRId64 "],\"pad_list\":[%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "]",
	    (int64_t)groups->valuedouble, attr_at(attrs, "stride", 0), attr_at(attrs, "stride", 1),
	    attr_at(attrs, "dilation", 0), attr_at(attrs, "dilation", 1), attr_at(attrs, "pad", 0),
	    attr_at(attrs, "pad", 1), attr_at(attrs, "pad", 2), attr_at(attrs, "pad", 3));
	return true;
}

/* One op_desc entry for node k. The form's attrs already carry the
 * parser's names and normalised values for every op but the three above. */
static bool
put_node(KcBuf *b, const Form *f, int k)
{
	const Node *nd = &f->nodes[k];
	const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(nd->json, "attrs");
	const cJSON *out = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(nd->json, "out"), 0);
	const cJSON *in0 = nd->nin > 0 ? ref_type(f, &nd->in[0]) : NULL;
	bool dyn = strcmp(nd->op, "AddN") == 0 || strcmp(nd->op, "Concat") == 0;
	bool ok = true;
	char name[32];

	kc_buf_puts(b, "{\"name\":");
	kc_buf_json_str(b, nd->op);
	kc_buf_puts(b, ",\"attr\":");
	if (!attrs) {
		kc_buf_puts(b, "null");
	} else if (!cJSON_IsObject(attrs)) {
		return false;
	} else if (strcmp(nd->op, "StridedSlice") == 0 || strcmp(nd->op, "Pool2D") == 0 ||
	           strcmp(nd->op, "Conv2D") == 0) {
		kc_buf_putc(b, '{');
		if (!in0)
			return false;
		ok = nd->op[0] == 'S'   ? put_slice(b, attrs, in0, out)
		     : nd->op[0] == 'P' ? put_pool(b, attrs, in0, out)
		                        : put_conv(b, attrs);
		kc_buf_putc(b, '}');
	} else {
		char *txt = cJSON_PrintUnformatted(attrs);
		kc_buf_puts(b, txt);
		cJSON_free(txt);
	}
	/* one list per input, or one list of all pieces (AddN, Concat) */
	kc_buf_puts(b, dyn ? ",\"input_desc\":[[" : ",\"input_desc\":[");
	for (int i = 0; i < nd->nin && ok; i++) {
		kc_buf_puts(b, i == 0 ? "" : dyn ? "," : "],");
		if (!dyn)
			kc_buf_putc(b, '[');
		if (nd->in[i].kind == REF_CONST)
			ok = put_const(b, nd->in[i].text);
		else
			put_ref_desc(b, f, &nd->in[i]);
	}
	if (nd->nin && !dyn)
		kc_buf_putc(b, ']');
	kc_buf_puts(b, dyn ? "]],\"output_desc\":[" : "],\"output_desc\":[");
	snprintf(name, sizeof name, "n%d.0", k);
	put_desc(b, out, name);
	kc_buf_puts(b, "]}");
	return ok;
}

/* Fills *f from the parsed form; false if it is not one. */
static bool
read_form(const cJSON *root, Form *f)
{
	const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "kcs_workload");
	const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "inputs");
	const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes");
	if (!cJSON_IsNumber(ver) || ver->valuedouble != KC_WORKLOAD_FORMAT || !cJSON_IsArray(ins) ||
	    !cJSON_IsArray(nodes))
		return false;
	f->ninputs = cJSON_GetArraySize(ins);
	f->nnodes = cJSON_GetArraySize(nodes);
	f->inputs = kc_xcalloc((size_t)f->ninputs + 1, sizeof *f->inputs);
	f->nodes = kc_xcalloc((size_t)f->nnodes + 1, sizeof *f->nodes);
	int i = 0;
	for (const cJSON *t = ins->child; t; t = t->next, i++) {
		if (!type_ok(t))
			return false;
		f->inputs[i] = t;
	}
	i = 0;
	for (const cJSON *n = nodes->child; n; n = n->next, i++) {
		Node *nd = &f->nodes[i];
		const cJSON *op = cJSON_GetObjectItemCaseSensitive(n, "op");
		const cJSON *in = cJSON_GetObjectItemCaseSensitive(n, "in");
		const cJSON *out = cJSON_GetObjectItemCaseSensitive(n, "out");
		if (!cJSON_IsString(op) || !cJSON_IsArray(in) || !cJSON_IsArray(out) ||
		    cJSON_GetArraySize(out) != 1 || !type_ok(out->child))
			return false;
		nd->json = n;
		nd->op = op->valuestring;
		nd->assign = strcmp(nd->op, "Assign") == 0 || strcmp(nd->op, "InplaceAssign") == 0;
		nd->nin = cJSON_GetArraySize(in);
		nd->in = kc_xcalloc((size_t)nd->nin + 1, sizeof *nd->in);
		int k = 0;
		for (const cJSON *r = in->child; r; r = r->next, k++)
			if (!parse_ref(r, f->ninputs, i, &nd->in[k]) || /* earlier nodes only */
			    (nd->in[k].kind != REF_CONST && !ref_type(f, &nd->in[k])))
				return false;
		if (nd->assign && (nd->nin < 2 || nd->in[0].kind != REF_INPUT))
			return false;
	}
	return true;
}

/* The op_desc list in an order the parser reads as the form means it. The
 * form's order is topological, but the parser rebinds a kernel input's
 * name to what an Assign wrote into it, so an Assign into input m waits
 * until every other reader of the original i<m> is written. */
static bool
put_ops(KcBuf *b, const Form *f)
{
	bool *done = kc_xcalloc((size_t)f->nnodes + 1, 1);
	int *readers = kc_xcalloc((size_t)f->ninputs + 1, sizeof *readers);
	int left = f->nnodes;
	bool ok = true;
	for (int k = 0; k < f->nnodes; k++)
		for (int i = f->nodes[k].assign ? 1 : 0; i < f->nodes[k].nin; i++)
			if (f->nodes[k].in[i].kind == REF_INPUT)
				readers[f->nodes[k].in[i].k]++;
	while (left > 0 && ok) {
		bool progress = false;
		for (int k = 0; k < f->nnodes && ok; k++) {
			const Node *nd = &f->nodes[k];
			bool ready = !done[k];
			int own = 0;
			for (int i = 0; i < nd->nin && ready; i++) {
				const Ref *r = &nd->in[i];
				ready = r->kind != REF_NODE || done[r->k];
				own += i > 0 && nd->assign && r->kind == REF_INPUT &&
				       r->k == nd->in[0].k;
			}
			if (!ready || (nd->assign && readers[nd->in[0].k] > own))
				continue;
			kc_buf_putc(b, left == f->nnodes ? '[' : ',');
			ok = put_node(b, f, k);
			for (int i = nd->assign ? 1 : 0; i < nd->nin; i++)
				if (nd->in[i].kind == REF_INPUT)
					readers[nd->in[i].k]--;
			done[k] = true;
			left--;
			progress = true;
		}
		ok = ok && progress;
	}
	if (f->nnodes == 0)
		kc_buf_putc(b, '[');
	kc_buf_putc(b, ']');
	free(done);
	free(readers);
	return ok;
}

KcStatus
kc_parse_workload(CompileCtx *c, const char *canonical, size_t len, const char *name,
                  const KcLimits *lim, KcGraph **out, KcErr *err)
{
	KcBuf doc = {0};
	Form f = {0};
	KcErr perr = {0};
	KcWorkload wl;
	KcStatus st = KC_OK;
	cJSON *root = cJSON_ParseWithLength(canonical, len);

	*out = NULL;
	if (!root || !read_form(root, &f)) {
		st = kc_fail(err, KC_UNSUPPORTED, "",
		             "the stored workload is not a kcs_workload %d form",
		             KC_WORKLOAD_FORMAT);
		goto done;
	}
	kc_buf_puts(&doc, "{\"composite\":true,\"op\":");
	kc_buf_json_str(&doc, name ? name : "");
	kc_buf_puts(&doc, ",\"input_desc\":");
	for (int i = 0; i < f.ninputs; i++) {
		char tn[32];
		snprintf(tn, sizeof tn, "i%d", i);
		kc_buf_puts(&doc, i ? ",[" : "[[");
		put_desc(&doc, f.inputs[i], tn);
		kc_buf_putc(&doc, ']');
	}
	kc_buf_puts(&doc, f.ninputs ? "]" : "null");
	kc_buf_puts(&doc, ",\"output_desc\":[");
	const cJSON *outs = cJSON_GetObjectItemCaseSensitive(root, "outputs");
	bool ok = cJSON_IsArray(outs);
	for (const cJSON *o = ok ? outs->child : NULL; o && ok; o = o->next) {
		Ref r;
		ok = parse_ref(o, f.ninputs, f.nnodes, &r) && r.kind != REF_CONST &&
		     ref_type(&f, &r);
		if (ok) {
			if (o != outs->child)
				kc_buf_putc(&doc, ',');
			put_ref_desc(&doc, &f, &r);
		}
	}
	kc_buf_puts(&doc, "],\"op_desc\":");
	if (!ok || !put_ops(&doc, &f)) {
		st = kc_fail(err, KC_UNSUPPORTED, "",
		             "the stored workload cannot be written as a composite graph");
		goto done;
	}
	kc_buf_putc(&doc, '}');

	st = kc_parse(c, doc.data, doc.len, lim, out, &perr);
	if (st != KC_OK) {
		st = kc_fail(err, st == KC_TOO_LARGE ? st : KC_UNSUPPORTED, "",
		             "the stored workload does not parse back: %s", perr.msg);
		*out = NULL;
		goto done;
	}
	kc_workload(c, *out, &wl);
	if (wl.canonical_len != len || memcmp(wl.canonical, canonical, len) != 0) {
		st = kc_fail(err, KC_UNSUPPORTED, "",
		             "the stored workload does not round-trip through a composite graph");
		*out = NULL;
	}
done:
	for (int i = 0; i < f.nnodes; i++)
		free(f.nodes[i].in);
	free(f.nodes);
	free(f.inputs);
	cJSON_Delete(root);
	kc_buf_free(&doc);
	return st;
}
