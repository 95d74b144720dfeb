/* test_parse.c - kc_parse: the composite JSON parser and validator.
 *
 * Every error class answers its status and a JSON pointer naming the bad
 * part; every corpus file parses or is refused as unsupported (never a
 * crash); constants are rounded to their dtype; limits are enforced.
 * Test documents are written with ' for " and edited by JSON pointer.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "t.h"
#include "tjson.h"

/* Add(input_0[16,768], input_1[768]) -> Mul(., 0.5) -> output_0_1 */
static const char base_json[] =
    "{'composite':true,'id':7,'op':'Fused_Add_Mul_test','process':'cpu','version':1,"
    "'target_info':{'arch':'x86_64','system':'linux','feature':'avx'},"
    "'input_desc':[[{'data_type':'float32','format':'DefaultFormat','shape':[16,768],"
    "'tensor_name':'input_0'}],[{'data_type':'float32','format':'DefaultFormat',"
    "'shape':[768],'tensor_name':'input_1'}]],"
    "'output_desc':[{'data_type':'float32','format':'DefaultFormat','shape':[16,768],"
    "'tensor_name':'output_0_1'}],"
    "'op_desc':[{'attr':null,'impl_path':'','name':'Add','input_desc':["
    "[{'data_type':'float32','format':'DefaultFormat','name':'input_0','shape':[16,768],"
    "'tensor_name':'input_0'}],[{'data_type':'float32','format':'DefaultFormat',"
    "'name':'input_1','shape':[768],'tensor_name':'input_1'}]],"
    "'output_desc':[{'data_type':'float32','format':'DefaultFormat','name':'output_0',"
    "'shape':[16,768],'tensor_name':'output_0_0'}]},"
    "{'attr':[{'data_type':'bool','name':'visited','value':true}],'impl_path':'',"
    "'name':'Mul','input_desc':[[{'data_type':'float32','format':'DefaultFormat',"
    "'name':'input_0','shape':[16,768],'tensor_name':'output_0_0'}],"
    "[{'data_type':'float32','format':'DefaultFormat','name':'input_1','shape':[1],"
    "'tensor_name':'input_9','value':0.5}]],"
    "'output_desc':[{'data_type':'float32','format':'DefaultFormat','name':'output_0',"
    "'shape':[16,768],'tensor_name':'output_0_1'}]}]}";

static KcStatus
parse_doc(const cJSON *doc, const KcLimits *lim, KcErr *err)
{
	char *s = cJSON_PrintUnformatted(doc);
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcStatus st = kc_parse(c, s, strlen(s), lim, &g, err);
	if (st == KC_OK && !g)
		st = KC_INTERNAL;
	compile_ctx_free(c);
	free(s);
	return st;
}

/* Parse doc (then delete it) and expect status st at `where`. */
static void
expect_lim(cJSON *doc, const KcLimits *lim, KcStatus st, const char *where, const char *what)
{
	KcErr err = {0};
	KcStatus got = parse_doc(doc, lim, &err);
	OKF(got == st && (!where || strcmp(err.where, where) == 0),
	    "%s: want %s at %s, got %s at '%s' (%s)", what, kc_status_code(st), where ? where : "*",
	    kc_status_code(got), err.where, err.msg);
	cJSON_Delete(doc);
}

static void
expect(cJSON *doc, KcStatus st, const char *where, const char *what)
{
	expect_lim(doc, NULL, st, where, what);
}

static cJSON *
base(void)
{
	return jq(base_json);
}

static void
test_base(void)
{
	cJSON *doc = base();
	char *s = cJSON_PrintUnformatted(doc);
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	OKF(kc_parse(c, s, strlen(s), NULL, &g, &err) == KC_OK, "%s %s", err.where, err.msg);
	OK(g && strcmp(kc_graph_name(g), "Fused_Add_Mul_test") == 0);
	OK(g && kc_graph_nargs(g) == 3);
	if (g) {
		KcArgInfo a;
		kc_graph_arg(g, 0, &a);
		OK(!a.is_output && strcmp(a.tensor_name, "input_0") == 0 && a.rank == 2 &&
		   a.shape[1] == 768 && strcmp(a.dtype, "float32") == 0);
		kc_graph_arg(g, 1, &a);
		OK(strcmp(a.tensor_name, "input_1") == 0 && a.rank == 1);
		kc_graph_arg(g, 2, &a);
		OK(a.is_output && a.index == 2 && strcmp(a.tensor_name, "output_0_1") == 0);
		OK(g->nnodes == 2 && g->nodes[0]->op == IR_OP_ADD && g->nodes[1]->op == IR_OP_MUL);
		OK(g->nodes[1]->in[1]->kind == IRV_CONST && g->nodes[1]->in[1]->fval == 0.5);
		OK(g->version == 1 && strcmp(g->process, "cpu") == 0 &&
		   strcmp(g->ti_arch, "x86_64") == 0 && strcmp(g->ti_feature, "avx") == 0 &&
		   g->ti_cpu == NULL);
		OK(g->inputs[0]->nuses == 1 && g->outputs[0]->nuses == 1);
		KcBuf b = {0};
		ir_graph_print(g, &b);
		OK(b.len > 0 && strstr(b.data, "Add(%0, %1) : float32[16,768]") != NULL);
		OK(strstr(b.data, "Mul(%2, 0x1p-1:float32)") != NULL);
		printf("# %s", b.data);
		kc_buf_free(&b);
	}
	compile_ctx_free(c);
	free(s);
	cJSON_Delete(doc);
}

static void
test_json_errors(void)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g;
	KcErr err = {0};
	OK(kc_parse(c, "{", 1, NULL, &g, &err) == KC_BAD_JSON && strcmp(err.where, "") == 0 && !g);
	memset(&err, 0, sizeof err);
	OK(kc_parse(c, "", 0, NULL, &g, &err) == KC_BAD_JSON);
	memset(&err, 0, sizeof err);
	OK(kc_parse(c, "[1,2]", 5, NULL, &g, &err) == KC_BAD_GRAPH);
	memset(&err, 0, sizeof err);
	OK(kc_parse(c, "42", 2, NULL, &g, &err) == KC_BAD_GRAPH);
	/* the length is honoured: a valid document cut short is not JSON */
	cJSON *doc = base();
	char *s = cJSON_PrintUnformatted(doc);
	size_t n = strlen(s);
	int bad = 0;
	for (size_t cut = 0; cut < n; cut += 7) {
		memset(&err, 0, sizeof err);
		if (kc_parse(c, s, cut, NULL, &g, &err) != KC_BAD_JSON)
			bad++;
	}
	OKF(bad == 0, "%d truncations were not malformed_json", bad);
	free(s);
	cJSON_Delete(doc);
	compile_ctx_free(c);
}

static void
test_top_level(void)
{
	cJSON *d;
	d = base(), jset(d, "/version", "3");
	expect(d, KC_UNSUPPORTED, "/version", "version 3");
	d = base(), jset(d, "/version", "'2'");
	expect(d, KC_BAD_GRAPH, "/version", "version as string");
	d = base(), jdel(d, "/version");
	expect(d, KC_OK, NULL, "missing version = 0");
	d = base(), jset(d, "/version", "2");
	expect(d, KC_OK, NULL, "version 2");
	d = base(), jdel(d, "/op_desc");
	expect(d, KC_BAD_GRAPH, "/op_desc", "no op_desc");
	d = base(), jset(d, "/output_desc", "{}");
	expect(d, KC_BAD_GRAPH, "/output_desc", "output_desc not a list");
	d = base(), jset(d, "/output_desc", "[]");
	expect(d, KC_BAD_GRAPH, "/output_desc", "no outputs");
	d = base(), jset(d, "/input_desc/0",
	                 "{'data_type':'float32','shape':[16,768],'tensor_name':'input_0'}");
	expect(d, KC_BAD_GRAPH, "/input_desc/0", "input not wrapped in a list");
	/* noise keys are ignored */
	d = base();
	jset(d, "/composite_graph", "'1.2.3'");
	jset(d, "/platform", "'AKG'");
	jset(d, "/buffer_stitch", "{'stitch_op':[]}");
	jset(d, "/parallel_fusion", "{'fusion_type':'block_fusion'}");
	jset(d, "/op_desc/0/ptr_address", "'Default/Add-op1'");
	jset(d, "/op_desc/0/fusion", "'SelectGT_0013'");
	jset(d, "/op_desc/0/attr", "{}");
	expect(d, KC_OK, NULL, "noise keys");
	/* no inputs at all: BroadcastTo of a constant */
	d = jq("{'op':'k','input_desc':null,'output_desc':[{'data_type':'float32','shape':[4,4],"
	       "'tensor_name':'o'}],'op_desc':[{'name':'BroadcastTo','attr':[{'name':'shape',"
	       "'data_type':'listInt','value':[4,4]}],'input_desc':[[{'data_type':'float32',"
	       "'shape':[1],'tensor_name':'c','value':0}]],'output_desc':[{'data_type':'float32',"
	       "'shape':[4,4],'tensor_name':'o'}]}]}");
	expect(d, KC_OK, NULL, "input_desc null");
}

static void
test_ops(void)
{
	cJSON *d;
	KcErr err = {0};
	d = base(), jset(d, "/op_desc/0/name", "'UnsortedSegmentSum'");
	OK(parse_doc(d, NULL, &err) == KC_UNSUPPORTED_OP &&
	   strcmp(err.where, "/op_desc/0/name") == 0 && strstr(err.msg, "not supported yet"));
	cJSON_Delete(d);
	memset(&err, 0, sizeof err);
	d = base(), jset(d, "/op_desc/1/name", "'Custom'");
	OK(parse_doc(d, NULL, &err) == KC_UNSUPPORTED_OP &&
	   strcmp(err.where, "/op_desc/1/name") == 0 && strstr(err.msg, "never compiles"));
	cJSON_Delete(d);
	memset(&err, 0, sizeof err);
	d = base(), jset(d, "/op_desc/1/name", "'Frobnicate'");
	OK(parse_doc(d, NULL, &err) == KC_UNSUPPORTED_OP &&
	   strstr(err.msg, "unknown op 'Frobnicate'"));
	cJSON_Delete(d);
	d = base(), jset(d, "/op_desc/0/name", "'TensorAdd'");
	expect(d, KC_OK, NULL, "TensorAdd alias");
	d = base(), jdel(d, "/op_desc/0/name");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/name", "missing name");
	/* arity */
	d = base(), jset(d, "/op_desc/0/input_desc/2",
	                 "[{'data_type':'float32','shape':[768],'tensor_name':'input_1'}]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc", "Add with 3 inputs");
	d = base(), jdel(d, "/op_desc/0/input_desc/1");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc", "Add with 1 input");
	d = base(), jset(d, "/op_desc/0/input_desc/1/1",
	                 "{'data_type':'float32','shape':[768],'tensor_name':'input_1'}");
	expect(d, KC_UNSUPPORTED, "/op_desc/0/input_desc/1", "tuple input");
	d = base(), jset(d, "/op_desc/0/input_desc/1", "[]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/1", "empty input list");
	d = base(), jset(d, "/op_desc/1/attr/1", "{'name':'fusion','value':'SelectGT_000'}");
	expect(d, KC_OK, NULL, "fusion attr is noise");
	/* an unsupported op later in the file is reported before other errors */
	d = base();
	jset(d, "/op_desc/0/input_desc/0/0/tensor_name", "'nope'");
	jset(d, "/op_desc/1/name", "'UnsortedSegmentSum'");
	expect(d, KC_UNSUPPORTED_OP, "/op_desc/1/name", "unsupported op first");
	d = base(), jset(d, "/op_desc/0/output_desc/1",
	                 "{'data_type':'float32','shape':[16,768],'tensor_name':'x'}");
	expect(d, KC_UNSUPPORTED, "/op_desc/0/output_desc/1", "two outputs");
}

static void
test_wiring(void)
{
	cJSON *d;
	d = base(), jset(d, "/op_desc/1/input_desc/0/0/tensor_name", "'nope'");
	expect(d, KC_BAD_GRAPH, "/op_desc/1/input_desc/0/0/tensor_name", "dangling tensor");
	/* swap the ops: Mul then uses output_0_0 before Add defines it */
	d = base();
	cJSON *ops = jat(d, "/op_desc", NULL, NULL);
	cJSON *first = cJSON_DetachItemFromArray(ops, 0);
	cJSON_AddItemToArray(ops, first);
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/0/0/tensor_name", "used before defined");
	d = base(), jset(d, "/op_desc/1/output_desc/0/tensor_name", "'output_0_0'");
	expect(d, KC_BAD_GRAPH, "/op_desc/1/output_desc/0/tensor_name", "defined twice");
	d = base(), jset(d, "/op_desc/0/output_desc/0/tensor_name", "'input_0'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/output_desc/0/tensor_name", "redefines an input");
	d = base(), jset(d, "/input_desc/1/0/tensor_name", "'input_0'");
	expect(d, KC_BAD_GRAPH, "/input_desc/1/0/tensor_name", "input listed twice");
	d = base(), jset(d, "/output_desc/1",
	                 "{'data_type':'float32','shape':[16,768],'tensor_name':'output_0_1'}");
	expect(d, KC_BAD_GRAPH, "/output_desc/1/tensor_name", "output listed twice");
	d = base(), jset(d, "/output_desc/0/tensor_name", "'zzz'");
	expect(d, KC_BAD_GRAPH, "/output_desc/0/tensor_name", "output never defined");
	d = base(), jset(d, "/output_desc/0/data_type", "'float16'");
	expect(d, KC_BAD_GRAPH, "/output_desc/0/data_type", "output dtype mismatch");
	d = base(), jset(d, "/output_desc/0/shape", "[16,769]");
	expect(d, KC_BAD_SHAPE, "/output_desc/0/shape", "output shape mismatch");
	d = base(), jset(d, "/op_desc/1/input_desc/0/0/shape", "[16,1]");
	expect(d, KC_BAD_SHAPE, "/op_desc/1/input_desc/0/0/shape", "use shape differs from def");
	/* pass-through output and an intermediate output */
	d = base();
	jset(d, "/output_desc/1", "{'data_type':'float32','shape':[768],'tensor_name':'input_1'}");
	jset(d, "/output_desc/2",
	     "{'data_type':'float32','shape':[16,768],'tensor_name':'output_0_0'}");
	KcErr err = {0};
	char *s = cJSON_PrintUnformatted(d);
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	OK(kc_parse(c, s, strlen(s), NULL, &g, &err) == KC_OK);
	OK(g && kc_graph_nargs(g) == 5 && g->outputs[1] == g->inputs[1]);
	if (g) {
		KcArgInfo a;
		kc_graph_arg(g, 3, &a);
		OK(a.is_output && strcmp(a.tensor_name, "input_1") == 0);
	}
	compile_ctx_free(c);
	free(s);
	cJSON_Delete(d);
}

static void
test_dtypes(void)
{
	cJSON *d;
	d = base(), jset(d, "/input_desc/0/0/data_type", "'float8'");
	expect(d, KC_UNSUPPORTED_DTYPE, "/input_desc/0/0/data_type", "unknown dtype");
	d = base(), jset(d, "/input_desc/0/0/data_type", "'complex64'");
	expect(d, KC_UNSUPPORTED_DTYPE, "/input_desc/0/0/data_type", "complex64");
	d = base(), jdel(d, "/op_desc/0/input_desc/0/0/data_type");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/0/0/data_type", "missing data_type");
	d = base(), jset(d, "/input_desc/0/0/format", "'FRACTAL_NZ'");
	expect(d, KC_UNSUPPORTED, "/input_desc/0/0/format", "FRACTAL_NZ");
	d = base(), jset(d, "/op_desc/0/output_desc/0/format", "'NC1HWC0'");
	expect(d, KC_UNSUPPORTED, "/op_desc/0/output_desc/0/format", "NC1HWC0");
	d = base(), jset(d, "/input_desc/0/0/format", "'NHWC'");
	jdel(d, "/input_desc/1/0/format");
	expect(d, KC_OK, NULL, "NHWC and missing format");
	/* operand dtypes must agree (tensor vs tensor) */
	d = base();
	jset(d, "/input_desc/1/0/data_type", "'float16'");
	jset(d, "/op_desc/0/input_desc/1/0/data_type", "'float16'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc", "float32 + float16");
	/* the op's declared output dtype must be the inferred one */
	d = base(), jset(d, "/op_desc/0/output_desc/0/data_type", "'float16'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/output_desc/0/data_type", "Add declared float16");
	/* float-only op on int32 */
	d = jq(
	    "{'op':'k','input_desc':[[{'data_type':'int32','shape':[8],'tensor_name':'a'}]],"
	    "'output_desc':[{'data_type':'int32','shape':[8],'tensor_name':'b'}],"
	    "'op_desc':[{'name':'Exp','attr':null,'input_desc':[[{'data_type':'int32','shape':[8],"
	    "'tensor_name':'a'}]],'output_desc':[{'data_type':'int32','shape':[8],'tensor_name':'b'"
	    "}]}]}");
	expect(d, KC_UNSUPPORTED_DTYPE, "/op_desc/0/input_desc", "Exp on int32");
	/* logical op on float */
	d = jq("{'op':'k','input_desc':[[{'data_type':'float32','shape':[8],'tensor_name':'a'}]],"
	       "'output_desc':[{'data_type':'bool','shape':[8],'tensor_name':'b'}],"
	       "'op_desc':[{'name':'LogicalNot','attr':null,'input_desc':[[{'data_type':'float32','"
	       "shape':[8],"
	       "'tensor_name':'a'}]],'output_desc':[{'data_type':'bool','shape':[8],'tensor_name':'"
	       "b'}]}]}");
	expect(d, KC_UNSUPPORTED_DTYPE, "/op_desc/0/input_desc", "LogicalNot on float32");
	/* comparison -> bool, Select(bool, x, const) -> x's dtype */
	d = jq("{'op':'k','input_desc':[[{'data_type':'float16','shape':[8],'tensor_name':'a'}]],"
	       "'output_desc':[{'data_type':'float16','shape':[8],'tensor_name':'s'}],"
	       "'op_desc':[{'name':'Greater','attr':null,'input_desc':[[{'data_type':'float16','"
	       "shape':[8],"
	       "'tensor_name':'a'}],[{'data_type':'float16','shape':[1],'tensor_name':'z','value':"
	       "0}]],"
	       "'output_desc':[{'data_type':'bool','shape':[8],'tensor_name':'m'}]},"
	       "{'name':'Select','attr':null,'input_desc':[[{'data_type':'bool','shape':[8],'"
	       "tensor_name':'m'}],"
	       "[{'data_type':'float16','shape':[8],'tensor_name':'a'}],[{'data_type':'float32','"
	       "shape':[1],"
	       "'tensor_name':'z','value':0.1}]],'output_desc':[{'data_type':'float16','shape':[8],"
	       "'tensor_name':'s'}]}]}");
	char *s = cJSON_PrintUnformatted(d);
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	OKF(kc_parse(c, s, strlen(s), NULL, &g, &err) == KC_OK, "%s %s", err.where, err.msg);
	if (g) {
		/* the float32 constant takes float16, rounded through IEEE half */
		IrValue *k = g->nodes[1]->in[2];
		OK(k->kind == IRV_CONST && k->dtype == KC_DT_FLOAT16 && k->fval == 0.0999755859375);
		OK(g->nodes[0]->out[0]->dtype == KC_DT_BOOL);
	}
	compile_ctx_free(c);
	free(s);
	/* old Ascend SelectGT files: Greater declared float16, Select on that
	 * float mask. The parser keeps comparisons bool and Select conditions
	 * bool by adding Cast(bool -> float16) and NotEqual(mask, 0). */
	jset(d, "/op_desc/0/output_desc/0/data_type", "'float16'");
	jset(d, "/op_desc/1/input_desc/0/0/data_type", "'float16'");
	s = cJSON_PrintUnformatted(d);
	c = compile_ctx_new();
	g = NULL;
	memset(&err, 0, sizeof err);
	OKF(kc_parse(c, s, strlen(s), NULL, &g, &err) == KC_OK, "%s %s", err.where, err.msg);
	if (g) {
		KcBuf b = {0};
		ir_graph_print(g, &b);
		printf("# %s", b.data);
		OK(g->nnodes == 4 && g->nodes[0]->op == IR_OP_GREATER &&
		   g->nodes[1]->op == IR_OP_CAST && g->nodes[2]->op == IR_OP_NOT_EQUAL &&
		   g->nodes[3]->op == IR_OP_SELECT);
		OK(g->nodes[0]->out[0]->dtype == KC_DT_BOOL &&
		   g->nodes[1]->out[0]->dtype == KC_DT_FLOAT16 &&
		   g->nodes[2]->in[0] == g->nodes[1]->out[0] &&
		   g->nodes[2]->out[0]->dtype == KC_DT_BOOL &&
		   g->nodes[3]->in[0] == g->nodes[2]->out[0]);
		for (int n = 0; n < g->nnodes; n++)
			OK(g->nodes[n]->id == n && g->nodes[n]->json_index == (n < 2 ? 0 : 1));
		kc_buf_free(&b);
	}
	compile_ctx_free(c);
	free(s);
	/* a comparison declared with the wrong shape is still refused */
	jset(d, "/op_desc/0/output_desc/0/shape", "[9]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "Greater declared [9]");
}

/* Parse `doc` (deleted) expecting success; returns the first const of node n
 * input k as a double via *fv / *iv. */
static bool
const_of(cJSON *doc, int n, int k, double *fv, int64_t *iv, KcDtype *dt)
{
	char *s = cJSON_PrintUnformatted(doc);
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	bool ok = kc_parse(c, s, strlen(s), NULL, &g, &err) == KC_OK;
	if (ok) {
		IrValue *v = g->nodes[n]->in[k];
		ok = v->kind == IRV_CONST;
		*fv = v->fval;
		*iv = v->ival;
		*dt = v->dtype;
	} else {
		printf("# const_of: %s %s\n", err.where, err.msg);
	}
	compile_ctx_free(c);
	free(s);
	cJSON_Delete(doc);
	return ok;
}

static cJSON *
unary_const(const char *dtype, const char *value)
{
	char buf[1024];
	snprintf(
	    buf, sizeof buf,
	    "{'op':'k','input_desc':[[{'data_type':'%s','shape':[4],'tensor_name':'a'}]],"
	    "'output_desc':[{'data_type':'%s','shape':[4],'tensor_name':'b'}],"
	    "'op_desc':[{'name':'Maximum','attr':null,'input_desc':[[{'data_type':'%s','shape':[4],"
	    "'tensor_name':'a'}],[{'data_type':'%s','shape':[1],'tensor_name':'c','value':%s}]],"
	    "'output_desc':[{'data_type':'%s','shape':[4],'tensor_name':'b'}]}]}",
	    dtype, dtype, dtype, dtype, value, dtype);
	return jq(buf);
}

static void
test_constants(void)
{
	double f;
	int64_t i;
	KcDtype dt;
	OK(const_of(unary_const("float32", "0.9"), 0, 1, &f, &i, &dt) && f == (double)0.9f &&
	   dt == KC_DT_FLOAT32);
	OK(const_of(unary_const("float32", "0.8999999761581421"), 0, 1, &f, &i, &dt) &&
	   f == (double)0.9f);
	OK(const_of(unary_const("float64", "0.9"), 0, 1, &f, &i, &dt) && f == 0.9);
	OK(const_of(unary_const("float16", "0.1"), 0, 1, &f, &i, &dt) && f == 0.0999755859375);
	OK(const_of(unary_const("float16", "65520"), 0, 1, &f, &i, &dt) && isinf(f));
	OK(const_of(unary_const("float16", "65519"), 0, 1, &f, &i, &dt) && f == 65504);
	OK(const_of(unary_const("float16", "1e-8"), 0, 1, &f, &i, &dt) && f == 0);
	OK(const_of(unary_const("float16", "6e-8"), 0, 1, &f, &i, &dt) && f == ldexp(1, -24));
	/* bfloat16: 8 significand bits, ties to even */
	OK(const_of(unary_const("bfloat16", "1.00390625"), 0, 1, &f, &i, &dt) && f == 1.0);
	OK(const_of(unary_const("bfloat16", "1.01171875"), 0, 1, &f, &i, &dt) && f == 1.015625);
	OK(const_of(unary_const("int32", "2001"), 0, 1, &f, &i, &dt) && i == 2001);
	OK(const_of(unary_const("int32", "true"), 0, 1, &f, &i, &dt) && i == 1);
	OK(const_of(unary_const("uint8", "255"), 0, 1, &f, &i, &dt) && i == 255);
	expect(unary_const("int8", "200"), KC_BAD_GRAPH, "/op_desc/0/input_desc/1/0/value",
	       "int8 200");
	expect(unary_const("int32", "1.5"), KC_BAD_GRAPH, "/op_desc/0/input_desc/1/0/value",
	       "int32 1.5");
	expect(unary_const("float32", "'x'"), KC_BAD_GRAPH, "/op_desc/0/input_desc/1/0/value",
	       "string value");
	expect(unary_const("float32", "[1,2]"), KC_BAD_GRAPH, "/op_desc/0/input_desc/1/0/value",
	       "list value");
	cJSON *d = unary_const("float32", "1");
	jset(d, "/op_desc/0/input_desc/1/0/shape", "[2]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc/1/0", "constant of shape [2]");
	/* a float constant next to an int tensor must be integral */
	d = unary_const("int32", "1");
	jset(d, "/op_desc/0/input_desc/1/0/data_type", "'float32'");
	jset(d, "/op_desc/0/input_desc/1/0/value", "2.0");
	OK(const_of(d, 0, 1, &f, &i, &dt) && dt == KC_DT_INT32 && i == 2);
	d = unary_const("int32", "1");
	jset(d, "/op_desc/0/input_desc/1/0/data_type", "'float32'");
	jset(d, "/op_desc/0/input_desc/1/0/value", "2.5");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc", "2.5 as int32");
}

static void
test_shapes(void)
{
	cJSON *d;
	d = base(), jset(d, "/input_desc/0/0/shape", "[-1,768]");
	expect(d, KC_UNSUPPORTED, "/input_desc/0/0/shape/0", "dynamic dim");
	d = base(), jset(d, "/input_desc/0/0/shape", "[0,768]");
	expect(d, KC_BAD_SHAPE, "/input_desc/0/0/shape/0", "zero dim");
	d = base(), jset(d, "/input_desc/0/0/shape", "[1.5,768]");
	expect(d, KC_BAD_SHAPE, "/input_desc/0/0/shape/0", "fractional dim");
	d = base(), jset(d, "/input_desc/0/0/shape", "'16x768'");
	expect(d, KC_BAD_SHAPE, "/input_desc/0/0/shape", "shape not a list");
	d = base(), jset(d, "/input_desc/0/0/shape", "[1,1,1,1,1,1,1,1,1]");
	expect(d, KC_TOO_LARGE, "/input_desc/0/0/shape", "rank 9");
	d = base(), jset(d, "/input_desc/0/0/shape", "[4294967296,4294967296]");
	expect(d, KC_BAD_SHAPE, "/input_desc/0/0/shape", "numel overflows int64");
	d = base(), jset(d, "/input_desc/0/0/shape", "[65536,65536]");
	expect(d, KC_TOO_LARGE, "/input_desc/0/0/shape", "over default max_elements");
	d = base(), jset(d, "/op_desc/0/output_desc/0/shape", "[16,769]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "declared shape wrong");
	d = base();
	jset(d, "/input_desc/1/0/shape", "[767]");
	jset(d, "/op_desc/0/input_desc/1/0/shape", "[767]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc", "no broadcast 768 vs 767");
	d = base();
	jset(d, "/input_desc/1/0/shape", "[16,1]");
	jset(d, "/op_desc/0/input_desc/1/0/shape", "[16,1]");
	expect(d, KC_OK, NULL, "broadcast [16,768]+[16,1]");
	/* limits */
	KcLimits lim = {.max_ops = 1};
	expect_lim(base(), &lim, KC_TOO_LARGE, "/op_desc", "max_ops");
	lim = (KcLimits){.max_tensors = 2};
	expect_lim(base(), &lim, KC_TOO_LARGE, NULL, "max_tensors");
	lim = (KcLimits){.max_rank = 1};
	expect_lim(base(), &lim, KC_TOO_LARGE, "/input_desc/0/0/shape", "max_rank");
	lim = (KcLimits){.max_elements = 1000};
	expect_lim(base(), &lim, KC_TOO_LARGE, "/input_desc/0/0/shape", "max_elements");
	lim = (KcLimits){.max_ops = 2, .max_tensors = 3, .max_rank = 2, .max_elements = 16 * 768};
	expect_lim(base(), &lim, KC_OK, NULL, "exactly at the limits");
	/* the JSON pre-scan, before cJSON: the document's own token count and
	 * depth pass, one less is refused naming the body */
	cJSON *d0 = base();
	char *txt = cJSON_PrintUnformatted(d0);
	cJSON_Delete(d0);
	KcJsonScan js;
	OK(kc_json_scan(txt, strlen(txt), 0, 0, &js, NULL) == KC_OK && js.tokens > 50 &&
	   js.depth == 7);
	free(txt);
	lim = (KcLimits){.max_json_tokens = js.tokens, .max_json_depth = js.depth};
	expect_lim(base(), &lim, KC_OK, NULL, "exactly at the JSON token and depth limits");
	lim = (KcLimits){.max_json_tokens = js.tokens - 1};
	expect_lim(base(), &lim, KC_TOO_LARGE, "body", "max_json_tokens");
	lim = (KcLimits){.max_json_depth = js.depth - 1};
	expect_lim(base(), &lim, KC_TOO_LARGE, "body", "max_json_depth");
	/* the defaults refuse 1 MiB of [0,0,...] and 100 levels of [ */
	size_t n = 1u << 20;
	char *flat = malloc(n);
	flat[0] = '[';
	for (size_t i = 1; i + 1 < n; i += 2)
		flat[i] = '0', flat[i + 1] = ',';
	flat[n - 2] = '0', flat[n - 1] = ']';
	CompileCtx *cc = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	OK(kc_parse(cc, flat, n, NULL, &g, &err) == KC_TOO_LARGE &&
	   strcmp(err.where, "body") == 0 && strstr(err.msg, "max_json_tokens"));
	memset(flat, '[', 100);
	memset(flat + 100, ']', 100);
	err = (KcErr){0};
	OK(kc_parse(cc, flat, 200, NULL, &g, &err) == KC_TOO_LARGE &&
	   strstr(err.msg, "max_json_depth"));
	compile_ctx_free(cc);
	free(flat);
}

/* Cast, Reshape, BroadcastTo: attrs and v2 attr-inputs must agree. */
static const char red_json[] =
    "{'op':'k','input_desc':[[{'data_type':'float32','shape':[4,6,8],'tensor_name':'a'}]],"
    "'output_desc':[{'data_type':'float32','shape':[4,8],'tensor_name':'b'}],"
    "'op_desc':[{'name':'ReduceSum','attr':[{'name':'axis','value':[1]},"
    "{'name':'keep_dims','value':false},{'name':'enable_atomic_add','value':true}],"
    "'input_desc':[[{'data_type':'float32','shape':[4,6,8],'tensor_name':'a'}]],"
    "'output_desc':[{'data_type':'float32','shape':[4,8],'tensor_name':'b'}]}]}";

/* One-op graph a[ishape] -> op -> b[oshape] with attr (JSON, ' quotes). */
static cJSON *
one_op(const char *op, const char *ishape, const char *oshape, const char *attr)
{
	char buf[2048];
	snprintf(
	    buf, sizeof buf,
	    "{'op':'k','input_desc':[[{'data_type':'float32','shape':[%s],'tensor_name':'a'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[%s],'tensor_name':'b'}],"
	    "'op_desc':[{'name':'%s','attr':%s,'input_desc':[[{'data_type':'float32',"
	    "'shape':[%s],'tensor_name':'a'}]],'output_desc':[{'data_type':'float32',"
	    "'shape':[%s],'tensor_name':'b'}]}]}",
	    ishape, oshape, op, attr, ishape, oshape);
	return jq(buf);
}

/* StridedSlice masks (TF semantics) and their errors. */
static void
new_slice_attrs(void)
{
	/* x[::-2, None, 1] on [8,6]: rows 7,5,3,1, a new axis, column 1 */
	expect(one_op("StridedSlice", "8,6", "4,1",
	              "[{'name':'begin','value':[0,0,1]},{'name':'end','value':[0,0,2]},"
	              "{'name':'strides','value':[-2,1,1]},{'name':'begin_mask','value':1},"
	              "{'name':'end_mask','value':1},{'name':'new_axis_mask','value':2},"
	              "{'name':'shrink_axis_mask','value':4}]"),
	       KC_OK, NULL, "negative stride, new axis, shrink");
	/* x[None, ..., None] on [2,3,4]: [1,2,3,4,1] */
	expect(one_op("StridedSlice", "2,3,4", "1,2,3,4,1",
	              "{'begin':[0,0,0],'end':[0,0,0],'strides':[1,1,1],'new_axis_mask':5,"
	              "'ellipsis_mask':2}"),
	       KC_OK, NULL, "new axes around an ellipsis");
	/* x[1:, ...] (ellipsis last): dims 1, 2 whole */
	expect(one_op("StridedSlice", "2,3,4", "1,3,4",
	              "{'begin':[1,0],'end':[2,0],'ellipsis_mask':2}"),
	       KC_OK, NULL, "trailing ellipsis");
	/* end beyond the dim clamps; begin_mask with a negative stride starts
	 * at the last element */
	expect(one_op("StridedSlice", "5", "3",
	              "{'begin':[0],'end':[-6],'strides':[-2],'begin_mask':1}"),
	       KC_OK, NULL, "x[::-2] of 5 is 3 elements");
	expect(one_op("StridedSlice", "8,6", "8,6", "{'begin':[0],'end':[8],'strides':[0]}"),
	       KC_BAD_GRAPH, "/op_desc/0/attr/strides", "stride 0");
	expect(one_op("StridedSlice", "8,6", "8,6", "{'begin':[0],'end':[8],'new_axis_mask':-1}"),
	       KC_BAD_GRAPH, "/op_desc/0/attr/new_axis_mask", "negative mask");
	expect(one_op("StridedSlice", "8,6", "8,6", "{'begin':[0,0,0],'end':[1,1,1]}"),
	       KC_BAD_GRAPH, "/op_desc/0/attr/begin", "3 indexed dims of a rank-2 input");
	expect(one_op("StridedSlice", "8,6", "8,6",
	              "{'begin':[0,0,0],'end':[1,1,1],'new_axis_mask':4}"),
	       KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "new axis shape disagrees");
	expect(one_op("StridedSlice", "8,6", "8,6",
	              "{'begin':[0,0],'end':[0,0],'strides':[-1,1],'end_mask':2}"),
	       KC_BAD_SHAPE, "/op_desc/0/attr/begin", "x[0:0:-1] is empty");
	expect(one_op("StridedSlice", "2,2,2,2,2,2,2,2", "2,2,2,2,2,2,2,2",
	              "{'begin':[0],'end':[0],'new_axis_mask':1}"),
	       KC_TOO_LARGE, "/op_desc/0/input_desc", "a new axis beyond rank 8");
}

/* Inputs a0..a{nin-1} (dtype dt, shape [8]) -> op -> b (odt [8]); with
 * dyn, the op's inputs are one dynamic list (AddN). */
static cJSON *
ew_doc(const char *op, const char *dt, int nin, const char *odt, bool dyn)
{
	char buf[4096], t[160];
	size_t n = (size_t)snprintf(buf, sizeof buf, "{'op':'k','input_desc':[");
	for (int i = 0; i < nin; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n,
		                      "%s[{'data_type':'%s','shape':[8],'tensor_name':'a%d'}]",
		                      i ? "," : "", dt, i);
	n += (size_t)snprintf(buf + n, sizeof buf - n,
	                      "],'output_desc':[{'data_type':'%s','shape':[8],'tensor_name':'b'}],"
	                      "'op_desc':[{'name':'%s','attr':null,'input_desc':[%s",
	                      odt, op, dyn ? "[" : "");
	for (int i = 0; i < nin; i++) {
		snprintf(t, sizeof t, "{'data_type':'%s','shape':[8],'tensor_name':'a%d'}", dt, i);
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s%s%s", i ? "," : "",
		                      dyn ? "" : "[", t, dyn ? "" : "]");
	}
	snprintf(buf + n, sizeof buf - n,
	         "%s],'output_desc':[{'data_type':'%s','shape':[8],'tensor_name':'b'}]}]}",
	         dyn ? "]" : "", odt);
	return jq(buf);
}

static void
test_new_ops(void)
{
	static const char *const un[] = {"Sin",   "Cos",   "Asin",  "ACos", "Atan",
	                                 "Asinh", "Acosh", "Expm1", "ASin", "Acos"};
	char what[64];
	cJSON *d;
	for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
		snprintf(what, sizeof what, "%s float16", un[i]);
		expect(ew_doc(un[i], "float16", 1, "float16", false), KC_OK, NULL, what);
		snprintf(what, sizeof what, "%s on int32", un[i]);
		expect(ew_doc(un[i], "int32", 1, "int32", false), KC_UNSUPPORTED_DTYPE,
		       "/op_desc/0/input_desc", what);
		snprintf(what, sizeof what, "%s with 2 inputs", un[i]);
		expect(ew_doc(un[i], "float32", 2, "float32", false), KC_BAD_GRAPH,
		       "/op_desc/0/input_desc", what);
	}
	expect(ew_doc("Atan2", "bfloat16", 2, "bfloat16", false), KC_OK, NULL, "Atan2");
	expect(ew_doc("Atan2", "float32", 1, "float32", false), KC_BAD_GRAPH,
	       "/op_desc/0/input_desc", "Atan2 with 1 input");
	expect(ew_doc("Atan2", "bool", 2, "bool", false), KC_UNSUPPORTED_DTYPE,
	       "/op_desc/0/input_desc", "Atan2 on bool");
	d = ew_doc("Sin", "float32", 1, "float32", false);
	jset(d, "/op_desc/0/output_desc/0/data_type", "'float16'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/output_desc/0/data_type", "Sin declared float16");
	/* AddN: one dynamic input */
	expect(ew_doc("AddN", "float32", 3, "float32", true), KC_OK, NULL, "AddN of 3");
	expect(ew_doc("AddN", "int32", 1, "int32", true), KC_OK, NULL, "AddN of 1");
	expect(ew_doc("AddN", "float32", 2, "float32", false), KC_BAD_GRAPH,
	       "/op_desc/0/input_desc", "AddN with two input lists");
	expect(ew_doc("AddN", "bool", 2, "bool", true), KC_UNSUPPORTED_DTYPE,
	       "/op_desc/0/input_desc", "AddN on bool");
	d = ew_doc("AddN", "float32", 3, "float32", true);
	jset(d, "/input_desc/1/0/data_type", "'float16'");
	jset(d, "/op_desc/0/input_desc/0/1/data_type", "'float16'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc", "AddN dtypes differ");
	d = ew_doc("AddN", "float32", 2, "float32", true);
	jset(d, "/op_desc/0/input_desc/0/1/value", "2.0");
	expect(d, KC_UNSUPPORTED, "/op_desc/0/input_desc/0/1", "AddN constant piece");
	d = ew_doc("AddN", "float32", 2, "float32", true);
	jset(d, "/input_desc/1/0/shape", "[3]");
	jset(d, "/op_desc/0/input_desc/0/1/shape", "[3]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc", "AddN shapes do not broadcast");
	d = ew_doc("AddN", "float32", 2, "float32", true);
	jset(d, "/input_desc/1/0/shape", "[1]");
	jset(d, "/op_desc/0/input_desc/0/1/shape", "[1]");
	expect(d, KC_OK, NULL, "AddN broadcasts");
	d = ew_doc("AddN", "float32", 2, "float32", true);
	jset(d, "/op_desc/0/input_desc/0", "[]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/0", "AddN of nothing");
	/* reductions of bool answer the declared dtype */
	static const char *const rd[] = {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"};
	static const char *const odt[] = {"int32", "bool", "float32", "int64"};
	for (int i = 0; i < 4; i++) {
		char q[32];
		d = jq(red_json);
		snprintf(q, sizeof q, "'%s'", rd[i]);
		jset(d, "/op_desc/0/name", q);
		jset(d, "/input_desc/0/0/data_type", "'bool'");
		jset(d, "/op_desc/0/input_desc/0/0/data_type", "'bool'");
		snprintf(q, sizeof q, "'%s'", odt[i]);
		jset(d, "/op_desc/0/output_desc/0/data_type", q);
		jset(d, "/output_desc/0/data_type", q);
		snprintf(what, sizeof what, "%s bool -> %s", rd[i], odt[i]);
		expect(d, KC_OK, NULL, what);
	}
	d = jq(red_json);
	jset(d, "/input_desc/0/0/data_type", "'bool'");
	jset(d, "/op_desc/0/input_desc/0/0/data_type", "'bool'");
	jset(d, "/op_desc/0/output_desc/0/data_type", "'complex64'");
	jset(d, "/output_desc/0/data_type", "'complex64'");
	expect(d, KC_UNSUPPORTED_DTYPE, "/op_desc/0/output_desc/0/data_type",
	       "ReduceSum bool -> complex64");
}

static void
test_reduce_layout(void)
{
	cJSON *d;
	expect(jq(red_json), KC_OK, NULL, "ReduceSum axis [1]");
	d = jq(red_json), jset(d, "/op_desc/0/attr/0/value", "-2");
	expect(d, KC_OK, NULL, "negative int axis");
	d = jq(red_json), jset(d, "/op_desc/0/attr/0/value", "[1,-2]");
	expect(d, KC_OK, NULL, "repeated axis");
	d = jq(red_json), jset(d, "/op_desc/0/attr/0/value", "[3]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/0/value", "axis out of range");
	d = jq(red_json), jset(d, "/op_desc/0/attr/0/value", "'x'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/0/value", "axis a string");
	d = jq(red_json), jset(d, "/op_desc/0/attr/1/value", "true");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "keep_dims changes the shape");
	d = jq(red_json), jset(d, "/op_desc/0/attr/0/value", "[]");
	jset(d, "/op_desc/0/output_desc/0/shape", "[1]"), jset(d, "/output_desc/0/shape", "[1]");
	expect(d, KC_OK, NULL, "axis [] = all");
	d = jq(red_json), jdel(d, "/op_desc/0/attr/0");
	jset(d, "/op_desc/0/input_desc/1",
	     "[{'data_type':'int64','shape':[1],'tensor_name':'t','value':[1]}]");
	expect(d, KC_OK, NULL, "v2 axis input");
	d = jq(red_json),
	jset(d, "/op_desc/0/input_desc/1", "[{'data_type':'int64','shape':[1],'tensor_name':'a'}]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/1/0", "v2 axis input without a value");
	d = jq(red_json), jset(d, "/op_desc/0/name", "'ReduceMean'");
	expect(d, KC_UNSUPPORTED_OP, "/op_desc/0/name", "ReduceMean is not an op");

	expect(one_op("Transpose", "2,3,4", "4,2,3", "[{'name':'perm','value':[2,0,1]}]"), KC_OK,
	       NULL, "Transpose");
	expect(one_op("Transpose", "2,3,4", "4,2,3", "[{'name':'perm','value':[2,0,0]}]"),
	       KC_BAD_GRAPH, "/op_desc/0/attr/0/value", "perm not a permutation");
	expect(one_op("Transpose", "2,3,4", "4,2,3", "null"), KC_BAD_GRAPH, "/op_desc/0/input_desc",
	       "perm missing");
	expect(one_op("Transpose", "2,3,4", "4,3,2", "[{'name':'perm','value':[2,0,1]}]"),
	       KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "Transpose shape disagrees");
	expect(one_op("ExpandDims", "2,3", "2,3,1", "{'axis':-1}"), KC_OK, NULL, "ExpandDims -1");
	expect(one_op("ExpandDims", "2,3", "2,3,1", "{'axis':4}"), KC_BAD_GRAPH,
	       "/op_desc/0/attr/axis", "ExpandDims axis out of range");
	expect(one_op("Tile", "2,3", "4,2,9", "[{'name':'multiples','value':[4,1,3]}]"), KC_OK,
	       NULL, "Tile adds a dim");
	expect(one_op("Tile", "2,3", "2,3", "[{'name':'multiples','value':[0,1]}]"), KC_BAD_GRAPH,
	       "/op_desc/0/attr/0/value", "Tile multiple 0");
	expect(one_op("StridedSlice", "8,6", "3,6",
	              "[{'name':'begin','value':[1,0]},{'name':'end','value':[-1,0]},"
	              "{'name':'strides','value':[2,1]},{'name':'end_mask','value':2}]"),
	       KC_OK, NULL, "StridedSlice with end_mask");
	expect(one_op("StridedSlice", "8,6", "6",
	              "[{'name':'begin','value':[-1]},{'name':'end','value':[0]},"
	              "{'name':'shrink_axis_mask','value':1}]"),
	       KC_OK, NULL, "StridedSlice shrink");
	expect(one_op("StridedSlice", "8,6", "8,6",
	              "[{'name':'begin','value':[0]},{'name':'end','value':[8]},"
	              "{'name':'ellipsis_mask','value':1}]"),
	       KC_OK, NULL, "ellipsis_mask: every dim whole");
	expect(one_op("StridedSlice", "8,6", "7,6",
	              "[{'name':'begin','value':[7]},{'name':'end','value':[0]},"
	              "{'name':'strides','value':[-1]}]"),
	       KC_OK, NULL, "negative stride: rows 7..1");
	expect(one_op("StridedSlice", "8,6", "8,6",
	              "[{'name':'begin','value':[7]},{'name':'end','value':[0]},"
	              "{'name':'strides','value':[-1]}]"),
	       KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "negative stride stops before end");
	expect(one_op("StridedSlice", "8,6", "8,6",
	              "[{'name':'begin','value':[3]},{'name':'end','value':[3]}]"),
	       KC_BAD_SHAPE, "/op_desc/0/attr/0/value", "empty slice");
	expect(one_op("ReduceMax", "4,6", "4", "{'axis':1}"), KC_OK, NULL, "ReduceMax");
	new_slice_attrs();

	static const char onehot[] =
	    "{'op':'k','version':2,'input_desc':[[{'data_type':'int32','shape':[3],'tensor_name':'"
	    "i'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[3,4],'tensor_name':'o'}],"
	    "'op_desc':[{'name':'OneHot','attr':[{'name':'axis','value':-1}],'input_desc':["
	    "[{'data_type':'int32','shape':[3],'tensor_name':'i'}],"
	    "[{'data_type':'int64','shape':[1],'tensor_name':'d','value':4}],"
	    "[{'data_type':'float32','shape':[1],'tensor_name':'on','value':1.0}],"
	    "[{'data_type':'float32','shape':[1],'tensor_name':'off','value':0.0}]],"
	    "'output_desc':[{'data_type':'float32','shape':[3,4],'tensor_name':'o'}]}]}";
	expect(jq(onehot), KC_OK, NULL, "OneHot v2");
	d = jq(onehot), jset(d, "/op_desc/0/attr/0/value", "0");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "OneHot axis 0 is [4,3]");
	d = jq(onehot), jset(d, "/op_desc/0/input_desc/1/0/value", "0");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/1/0/value", "OneHot depth 0");
	d = jq(onehot), jset(d, "/op_desc/0/input_desc/0/0/data_type", "'float32'");
	jset(d, "/input_desc/0/0/data_type", "'float32'");
	expect(d, KC_UNSUPPORTED_DTYPE, "/op_desc/0/input_desc", "OneHot float indices");

	static const char gather[] =
	    "{'op':'k','input_desc':[[{'data_type':'float32','shape':[5,3],'tensor_name':'p'}],"
	    "[{'data_type':'int64','shape':[2,2],'tensor_name':'i'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[2,2,3],'tensor_name':'o'}],"
	    "'op_desc':[{'name':'Gather','attr':null,'input_desc':["
	    "[{'data_type':'float32','shape':[5,3],'tensor_name':'p'}],"
	    "[{'data_type':'int64','shape':[2,2],'tensor_name':'i'}],"
	    "[{'data_type':'int64','shape':[1],'tensor_name':'a','value':0}]],"
	    "'output_desc':[{'data_type':'float32','shape':[2,2,3],'tensor_name':'o'}]}]}";
	expect(jq(gather), KC_OK, NULL, "Gather v2 axis");
	d = jq(gather), jset(d, "/op_desc/0/input_desc/2/0/value", "1");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "Gather axis 1 is [5,2,2]");
	d = jq(gather), jset(d, "/op_desc/0/input_desc/2/0/value", "2");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/2/0/value", "Gather axis out of range");

	static const char concat[] =
	    "{'op':'k','input_desc':[[{'data_type':'float32','shape':[4,2],'tensor_name':'a'}],"
	    "[{'data_type':'float32','shape':[8,2],'tensor_name':'b'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[12,2],'tensor_name':'o'}],"
	    "'op_desc':[{'name':'Concat','attr':[{'name':'axis','value':0},"
	    "{'name':'dyn_input_sizes','value':[2]}],'input_desc':["
	    "[{'data_type':'float32','shape':[4,2],'tensor_name':'a'},"
	    "{'data_type':'float32','shape':[8,2],'tensor_name':'b'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[12,2],'tensor_name':'o'}]}]}";
	expect(jq(concat), KC_OK, NULL, "Concat");
	d = jq(concat), jset(d, "/op_desc/0/attr/0/value", "1");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc", "Concat pieces differ off the axis");
	d = jq(concat), jset(d, "/op_desc/0/input_desc/0/1/tensor_name", "'nope'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/0/1/tensor_name", "Concat dangling piece");
	d = jq(concat), jset(d, "/op_desc/0/input_desc/1",
	                     "[{'data_type':'float32','shape':[4,2],'tensor_name':'a'}]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc", "Concat with two lists");

	static const char mm[] =
	    "{'op':'k','input_desc':[[{'data_type':'float16','shape':[2,4,5],'tensor_name':'a'}],"
	    "[{'data_type':'float16','shape':[6,5],'tensor_name':'b'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[2,4,6],'tensor_name':'o'}],"
	    "'op_desc':[{'name':'BatchMatMul','attr':[{'name':'transpose_a','value':false},"
	    "{'name':'transpose_b','value':true},{'name':'dst_type','value':'float32'}],"
	    "'input_desc':[[{'data_type':'float16','shape':[2,4,5],'tensor_name':'a'}],"
	    "[{'data_type':'float16','shape':[6,5],'tensor_name':'b'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[2,4,6],'tensor_name':'o'}]}]}";
	expect(jq(mm), KC_OK, NULL, "BatchMatMul, b broadcast, transpose_b");
	d = jq(mm), jset(d, "/op_desc/0/attr/1/value", "false");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc", "contraction dims differ");
	d = jq(mm), jset(d, "/op_desc/0/attr/2/value", "'float16'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/2/value", "dst_type disagrees");
	d = jq(mm), jset(d, "/op_desc/0/attr/0/value", "'yes'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/0/value", "transpose_a not a bool");

	/* Conv2D as MindSpore sends it: NHWC tensors, a stale "format":"NCHW"
	 * attr, stride [1,1,h,w]; the output shape comes from pad_list (not
	 * pad_mode) and must equal the declared one */
	static const char conv[] =
	    "{'op':'k','input_desc':[[{'data_type':'float32','format':'NHWC','shape':[2,9,9,4],"
	    "'tensor_name':'x'}],"
	    "[{'data_type':'float32','format':'NHWC','shape':[6,3,3,4],'tensor_name':'w'}]],"
	    "'output_desc':[{'data_type':'float32','format':'NHWC','shape':[2,5,5,6],"
	    "'tensor_name':'o'}],"
	    "'op_desc':[{'name':'Conv2D','attr':[{'name':'stride','value':[1,1,2,2]},"
	    "{'name':'dilation','value':[1,1,1,1]},{'name':'pad_list','value':[1,1,1,1]},"
	    "{'name':'pad_mode','value':'same'},{'name':'group','value':1},"
	    "{'name':'groups','value':1},{'name':'format','value':'NCHW'},"
	    "{'name':'dst_type','value':'float32'},{'name':'kernel_size','value':[3,3]},"
	    "{'name':'out_channel','value':6}],"
	    "'input_desc':[[{'data_type':'float32','format':'NHWC','shape':[2,9,9,4],"
	    "'tensor_name':'x'}],"
	    "[{'data_type':'float32','format':'NHWC','shape':[6,3,3,4],'tensor_name':'w'}]],"
	    "'output_desc':[{'data_type':'float32','format':'NHWC','shape':[2,5,5,6],"
	    "'tensor_name':'o'}]}]}";
	expect(jq(conv), KC_OK, NULL, "Conv2D NHWC stride 2 pads 1");
	d = jq(conv), jset(d, "/op_desc/0/attr/2/value", "[0,0,0,0]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape",
	       "Conv2D: pad_list 0 gives 4x4, not the declared 5x5");
	d = jq(conv), jdel(d, "/op_desc/0/attr/2");
	expect(d, KC_OK, NULL, "Conv2D: no pad_list, pad_mode same");
	d = jq(conv), jdel(d, "/op_desc/0/attr/2"), jset(d, "/op_desc/0/attr/2/value", "'valid'");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "Conv2D: pad_mode valid");
	d = jq(conv), jset(d, "/op_desc/0/attr/2/name", "'pad'");
	expect(d, KC_OK, NULL, "Conv2D: pad instead of pad_list");
	d = jq(conv), jset(d, "/op_desc/0/attr/1/value", "[2,2]"),
	jset(d, "/op_desc/0/attr/2/value", "2");
	expect(d, KC_OK, NULL, "Conv2D: dilation [2,2], pad 2");
	d = jq(conv), jset(d, "/op_desc/0/attr/0/value", "[1,2,3]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/0/value", "Conv2D: stride of 3");
	d = jq(conv), jset(d, "/op_desc/0/attr/1/value", "[2,2,1,1]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/1/value", "Conv2D: dilation [2,2,1,1]");
	d = jq(conv), jset(d, "/op_desc/0/attr/4/value", "2");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/4/value", "Conv2D: group and groups disagree");
	d = jq(conv), jset(d, "/op_desc/0/attr/4/value", "3"),
	jset(d, "/op_desc/0/attr/5/value", "3");
	expect(d, KC_UNSUPPORTED, "/op_desc/0/attr/4/value", "Conv2D: groups 3 of 4 channels");
	d = jq(conv), jset(d, "/op_desc/0/attr/4/value", "2"),
	jset(d, "/op_desc/0/attr/5/value", "2");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc", "Conv2D: weight I != Cin / groups");
	d = jq(conv), jset(d, "/op_desc/0/attr/8/value", "[3,2]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/attr/8/value", "Conv2D: kernel_size disagrees");
	d = jq(conv), jset(d, "/op_desc/0/attr/9/value", "5");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/attr/9/value", "Conv2D: out_channel disagrees");
	d = jq(conv), jset(d, "/op_desc/0/attr/7/value", "'float16'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/7/value", "Conv2D: dst_type disagrees");
	/* without a tensor layout the (here wrong) format attr decides: NCHW */
	d = jq(conv), jset(d, "/op_desc/0/input_desc/0/0/format", "'DefaultFormat'");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc", "Conv2D: DefaultFormat + format NCHW");
	d = jq(conv), jset(d, "/op_desc/0/input_desc/0/0/format", "'DefaultFormat'"),
	jset(d, "/op_desc/0/attr/6/value", "'NC1HWC0'");
	expect(d, KC_UNSUPPORTED, "/op_desc/0/attr/6/value", "Conv2D: format NC1HWC0");
	d = jq(conv), jset(d, "/op_desc/0/input_desc/0/0/format", "'DefaultFormat'"),
	jset(d, "/op_desc/0/attr/6/name", "'data_format'"),
	jset(d, "/op_desc/0/attr/6/value", "'NHWC'");
	expect(d, KC_OK, NULL, "Conv2D: DefaultFormat + data_format NHWC");
	/* NCHW: x [2,4,9,9], w [6,4,3,3] (O, I, KH, KW) */
	d = jq(conv);
	for (int q = 0; q < 2; q++) {
		const char *pre = q ? "/op_desc/0" : "";
		char ptr[128];
		snprintf(ptr, sizeof ptr, "%s/input_desc/0/0/shape", pre);
		jset(d, ptr, "[2,4,9,9]");
		snprintf(ptr, sizeof ptr, "%s/input_desc/1/0/shape", pre);
		jset(d, ptr, "[6,4,3,3]");
		snprintf(ptr, sizeof ptr, "%s/output_desc/0/shape", pre);
		jset(d, ptr, "[2,6,5,5]");
		snprintf(ptr, sizeof ptr, "%s/input_desc/0/0/format", pre);
		jset(d, ptr, "'NCHW'");
	}
	expect(d, KC_OK, NULL, "Conv2D NCHW");
	d = jq(conv), jset(d, "/op_desc/0/input_desc/1/0/data_type", "'float16'"),
	jset(d, "/input_desc/1/0/data_type", "'float16'");
	expect(d, KC_UNSUPPORTED_DTYPE, "/op_desc/0/input_desc", "Conv2D: mixed dtypes");
}

/* Argmax/Argmin, CumSum/CumProd, Pool2D; multi-output op_desc entries. */
static void
test_ops_b(void)
{
	cJSON *d;
	d = one_op("Argmax", "4,6", "4", "[{'name':'axis','value':1}]");
	jset(d, "/op_desc/0/output_desc/0/data_type", "'int32'");
	jset(d, "/output_desc/0/data_type", "'int32'");
	expect(d, KC_OK, NULL, "Argmax int32");
	d = one_op("Argmin", "4,6", "6",
	           "[{'name':'axis','value':[-2]},"
	           "{'name':'output_type','value':'int64'}]");
	jset(d, "/op_desc/0/output_desc/0/data_type", "'int64'");
	jset(d, "/output_desc/0/data_type", "'int64'");
	expect(d, KC_OK, NULL, "Argmin int64, list axis, output_type");
	d = one_op("ArgMax", "4,6", "4", "null");
	jset(d, "/op_desc/0/output_desc/0/data_type", "'int32'");
	jset(d, "/output_desc/0/data_type", "'int32'");
	expect(d, KC_OK, NULL, "ArgMax spelling, default axis -1");
	d = one_op("Argmax", "4,6", "4", "[{'name':'axis','value':2}]");
	jset(d, "/op_desc/0/output_desc/0/data_type", "'int32'");
	jset(d, "/output_desc/0/data_type", "'int32'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/0/value", "Argmax axis out of range");
	expect(one_op("Argmax", "4,6", "4", "null"), KC_UNSUPPORTED_DTYPE, "/op_desc/0/input_desc",
	       "Argmax to float32");
	d = one_op("Argmax", "4,6", "4", "[{'name':'output_type','value':'int64'}]");
	jset(d, "/op_desc/0/output_desc/0/data_type", "'int32'");
	jset(d, "/output_desc/0/data_type", "'int32'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/0/value", "output_type disagrees");
	d = one_op("Argmax", "4,6", "6", "[{'name':'axis','value':1}]");
	jset(d, "/op_desc/0/output_desc/0/data_type", "'int32'");
	jset(d, "/output_desc/0/data_type", "'int32'");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/output_desc/0/shape", "Argmax drops the axis");
	d = one_op("Argmax", "4,6", "4", "[{'name':'axis','value':1}]");
	jset(d, "/op_desc/0/input_desc/1",
	     "[{'data_type':'float32','shape':[4,6],'tensor_name':'a'}]");
	jset(d, "/op_desc/0/output_desc/0/data_type", "'int32'");
	jset(d, "/output_desc/0/data_type", "'int32'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/1/0", "Argmax with a second tensor input");

	expect(one_op("CumSum", "4,6", "4,6",
	              "[{'name':'axis','value':-1},"
	              "{'name':'exclusive','value':true},"
	              "{'name':'reverse','value':false}]"),
	       KC_OK, NULL, "CumSum");
	d = one_op("CumProd", "4,6", "4,6", "null");
	jset(d, "/op_desc/0/input_desc/1",
	     "[{'data_type':'int64','shape':[1],'tensor_name':'t','value':0}]");
	expect(d, KC_OK, NULL, "CumProd v2 axis input");
	expect(one_op("CumSum", "4,6", "4,6", "null"), KC_BAD_GRAPH, "/op_desc/0/input_desc",
	       "CumSum without an axis");
	expect(one_op("CumSum", "4,6", "4,6", "[{'name':'axis','value':-3}]"), KC_BAD_GRAPH,
	       "/op_desc/0/attr/0/value", "CumSum axis out of range");
	expect(one_op("CumSum", "4,6", "4,6",
	              "[{'name':'axis','value':0},"
	              "{'name':'reverse','value':'yes'}]"),
	       KC_BAD_GRAPH, "/op_desc/0/attr/1/value", "reverse not a bool");
	d = one_op("CumSum", "4,6", "4,6", "[{'name':'axis','value':0}]");
	jset(d, "/op_desc/0/input_desc/1",
	     "[{'data_type':'float32','shape':[4,6],'tensor_name':'a'}]");
	jset(d, "/op_desc/0/input_desc/2",
	     "[{'data_type':'float32','shape':[4,6],'tensor_name':'a'}]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc", "CumSum with three inputs");

#define PL(x)                                                                                      \
	"[{'name':'pool_type','value':'max'},{'name':'kernel_size','value':[3,3]},"                \
	"{'name':'strides','value':[2,2]},{'name':'data_layout','value':'NCHW'}" x "]"
	expect(one_op("Pool2D", "1,2,9,9", "1,2,4,4", PL("")), KC_OK, NULL, "Pool2D max");
	expect(one_op("Pool2D", "1,2,9,9", "1,2,5,5", PL(",{'name':'pad','value':[1,1,1,1]}")),
	       KC_OK, NULL, "Pool2D pads");
	expect(one_op("Pool2D", "1,2,8,8", "1,2,4,4", PL(",{'name':'round_mode','value':'ceil'}")),
	       KC_OK, NULL, "Pool2D ceil");
	expect(one_op("Pool2D", "1,2,8,8", "1,2,3,3", PL(",{'name':'round_mode','value':0}")),
	       KC_OK, NULL, "Pool2D floor");
	expect(one_op("Pool2D", "1,2,8,8", "1,2,4,4", PL("")), KC_BAD_SHAPE,
	       "/op_desc/0/output_desc/0/shape", "Pool2D shape disagrees");
	expect(one_op("Pool2D", "1,2,9,9", "1,2,5,5", PL(",{'name':'pad','value':[3,0,0,0]}")),
	       KC_UNSUPPORTED, "/op_desc/0/input_desc", "Pool2D pad >= kernel");
	expect(one_op("Pool2D", "1,2,9,9", "1,2,4,4", PL(",{'name':'pad','value':[1,1]}")),
	       KC_BAD_GRAPH, "/op_desc/0/attr/4/value", "Pool2D two pads");
	expect(
	    one_op("Pool2D", "1,2,9,9", "1,2,4,4", PL(",{'name':'data_layout','value':'NC1HWC0'}")),
	    KC_UNSUPPORTED, "/op_desc/0/attr/4/value", "Pool2D layout");
	expect(one_op("Pool2D", "2,9,9", "2,4,4", PL("")), KC_BAD_SHAPE, "/op_desc/0/input_desc",
	       "Pool2D rank 3");
	expect(one_op("Pool2D", "1,2,9,9", "1,2,1,1",
	              "[{'name':'pool_type','value':'avg'},{'name':'global','value':true}]"),
	       KC_OK, NULL, "Pool2D global avg");
	expect(one_op("Pool2D", "1,2,9,9", "1,2,1,1", "[{'name':'pool_type','value':'sum'}]"),
	       KC_BAD_GRAPH, "/op_desc/0/attr/0/value", "Pool2D pool_type");
	expect(one_op("Pool2D", "1,2,9,9", "1,2,4,4", "[{'name':'pool_type','value':'max'}]"),
	       KC_BAD_GRAPH, "/op_desc/0/input_desc", "Pool2D without kernel_size");
#undef PL

	/* multi-output (tuple) ops: refused clearly, at the second output */
	d = one_op("CumSum", "4,6", "4,6", "[{'name':'axis','value':0}]");
	jset(d, "/op_desc/0/output_desc/1",
	     "{'data_type':'float32','shape':[4,6],'tensor_name':'b2'}");
	expect(d, KC_UNSUPPORTED, "/op_desc/0/output_desc/1", "two outputs");
	d = one_op("Abs", "4,6", "4,6", "null");
	jset(d, "/op_desc/0/name", "'TupleGetItem'");
	expect(d, KC_UNSUPPORTED_OP, "/op_desc/0/name", "TupleGetItem");
	d = one_op("Abs", "4,6", "4,6", "null");
	jset(d, "/op_desc/0/name", "'tuple_getitem'");
	expect(d, KC_UNSUPPORTED_OP, "/op_desc/0/name", "tuple_getitem");
}

static const char assign_json[] =
    "{'op':'k','input_desc':[[{'data_type':'float32','shape':[4],'tensor_name':'p'}],"
    "[{'data_type':'float32','shape':[4],'tensor_name':'g'}]],"
    "'output_desc':[{'data_type':'float32','shape':[4],'tensor_name':'q'},"
    "{'data_type':'float32','shape':[4],'tensor_name':'o'}],"
    "'op_desc':[{'name':'Sub','input_desc':[[{'data_type':'float32','shape':[4],'tensor_name':'p'}]"
    ","
    "[{'data_type':'float32','shape':[4],'tensor_name':'g'}]],"
    "'output_desc':[{'data_type':'float32','shape':[4],'tensor_name':'s'}]},"
    "{'name':'Assign','input_desc':[[{'data_type':'float32','shape':[4],'tensor_name':'p'}],"
    "[{'data_type':'float32','shape':[4],'tensor_name':'s'}]],"
    "'output_desc':[{'data_type':'float32','shape':[4],'tensor_name':'o'}]},"
    "{'name':'Mul','input_desc':[[{'data_type':'float32','shape':[4],'tensor_name':'p'}],"
    "[{'data_type':'float32','shape':[1],'tensor_name':'c','value':2}]],"
    "'output_desc':[{'data_type':'float32','shape':[4],'tensor_name':'q'}]}]}";

static void
test_assign(void)
{
	cJSON *d = jq(assign_json);
	char *s = cJSON_PrintUnformatted(d);
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	OK(kc_parse(c, s, strlen(s), NULL, &g, &err) == KC_OK);
	if (g) {
		KcArgInfo ai;
		OK(kc_graph_nargs(g) == 4);
		kc_graph_arg(g, 0, &ai), OK(ai.writes_input == -1);
		kc_graph_arg(g, 2, &ai), OK(ai.writes_input == -1); /* q = 2 * new p */
		kc_graph_arg(g, 3, &ai), OKF(ai.writes_input == 0, "o writes input 0");
		KcBuf b = {0};
		ir_graph_print(g, &b);
		/* the Mul after the Assign reads the Assign's result, not input p */
		OKF(b.data && strstr(b.data, "Mul(%3,"), "%s", b.data ? b.data : "");
		kc_buf_free(&b);
	}
	compile_ctx_free(c);
	free(s);
	cJSON_Delete(d);
	d = jq(assign_json), jset(d, "/op_desc/1/input_desc/0/0/tensor_name", "'s'");
	jset(d, "/op_desc/1/input_desc/1/0/tensor_name", "'g'");
	expect(d, KC_UNSUPPORTED, "/op_desc/1/input_desc", "Assign into an op result");
	d = jq(assign_json), jset(d, "/op_desc/1/input_desc/1/0/shape", "[1]");
	expect(d, KC_BAD_SHAPE, "/op_desc/1/input_desc/1/0/shape", "Assign source shape");
	d = jq(assign_json), jset(d, "/op_desc/1/name", "'InplaceAssign'");
	jset(d, "/op_desc/1/input_desc/2",
	     "[{'data_type':'float32','shape':[4],'tensor_name':'g'}]");
	jset(d, "/op_desc/1/attr", "[{'name':'fake_output','value':true}]");
	expect(d, KC_OK, NULL, "InplaceAssign(dst, src, depend)");
	d = jq(assign_json), jset(d, "/op_desc/1/input_desc/2",
	                          "[{'data_type':'float32','shape':[4],'tensor_name':'g'}]");
	expect(d, KC_BAD_GRAPH, "/op_desc/1/input_desc", "Assign with 3 inputs");
}

static void
test_layout_attrs(void)
{
	static const char cast[] =
	    "{'op':'k','version':2,'input_desc':[[{'data_type':'float32','shape':[8],'tensor_name':"
	    "'a'}]],"
	    "'output_desc':[{'data_type':'float16','shape':[8],'tensor_name':'b'}],"
	    "'op_desc':[{'name':'Cast','attr':[{'data_type':'bool','name':'is_backed_cast','value':"
	    "false},"
	    "{'data_type':'str','name':'dst_type','value':'float16'}],'input_desc':[[{'data_type':'"
	    "float32',"
	    "'shape':[8],'tensor_name':'a'}]],'output_desc':[{'data_type':'float16','shape':[8],'"
	    "tensor_name':'b'}]}]}";
	cJSON *d;
	expect(jq(cast), KC_OK, NULL, "Cast");
	d = jq(cast), jset(d, "/op_desc/0/attr/1/value", "'float32'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/1/value", "Cast dst_type disagrees");
	d = jq(cast), jset(d, "/op_desc/0/input_desc/1",
	                   "[{'data_type':'int64','shape':[1],'tensor_name':'t','value':42}]");
	expect(d, KC_OK, NULL, "v2 Cast TypeId input");
	d = jq(cast), jset(d, "/op_desc/0/input_desc/1",
	                   "[{'data_type':'int64','shape':[1],'tensor_name':'t','value':43}]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/input_desc/1/0/value", "v2 Cast TypeId disagrees");
	d = jq(cast),
	jset(d, "/op_desc/0/attr", "[{'name':'dst_type','dtype':'str','value':'float16'}]");
	expect(d, KC_OK, NULL, "attr with dtype key");
	d = jq(cast), jset(d, "/op_desc/0/attr", "{'a/b~':1,'dst_type':'float16'}");
	expect(d, KC_OK, NULL, "attr as an object");
	d = jq(cast), jset(d, "/op_desc/0/attr", "{'a/b~':1,'dst_type':'int8'}");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/dst_type", "object attr dst_type disagrees");
	d = jq(cast), jset(d, "/op_desc/0/attr", "[1]");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr/0", "attr entry not an object");
	d = jq(cast), jset(d, "/op_desc/0/attr", "'x'");
	expect(d, KC_BAD_GRAPH, "/op_desc/0/attr", "attr a string");

	static const char bcast[] =
	    "{'op':'k','version':2,'input_desc':[[{'data_type':'float32','shape':[1,1],'tensor_"
	    "name':'a'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[3,5],'tensor_name':'b'}],"
	    "'op_desc':[{'name':'BroadcastTo','attr':null,'input_desc':[[{'data_type':'float32',"
	    "'shape':[1,1],'tensor_name':'a'}],[{'data_type':'int64','shape':[2],'tensor_name':'s',"
	    "'value':[3,5]}]],"
	    "'output_desc':[{'data_type':'float32','shape':[3,5],'tensor_name':'b'}]}]}";
	expect(jq(bcast), KC_OK, NULL, "v2 BroadcastTo");
	d = jq(bcast), jset(d, "/op_desc/0/input_desc/1/0/value", "[3,6]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc/1/0/value",
	       "v2 BroadcastTo shape disagrees");
	d = jq(bcast), jdel(d, "/op_desc/0/input_desc/1");
	jset(d, "/op_desc/0/attr", "[{'name':'shape','data_type':'listInt','value':[3,5]}]");
	expect(d, KC_OK, NULL, "BroadcastTo shape attr");
	d = jq(bcast), jdel(d, "/op_desc/0/input_desc/1");
	jset(d, "/op_desc/0/attr", "[{'name':'shape','data_type':'listInt','value':[5,3]}]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/attr/0/value", "BroadcastTo shape attr disagrees");
	d = jq(bcast), jdel(d, "/op_desc/0/input_desc/1");
	jset(d, "/input_desc/0/0/shape", "[2,1]");
	jset(d, "/op_desc/0/input_desc/0/0/shape", "[2,1]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc", "BroadcastTo [2,1] -> [3,5]");

	static const char reshape[] =
	    "{'op':'k','input_desc':[[{'data_type':'float32','shape':[4,6],'tensor_name':'a'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[2,12],'tensor_name':'b'}],"
	    "'op_desc':[{'name':'Reshape','attr':[{'name':'shape','data_type':'listInt','value':[-"
	    "1,12]}],"
	    "'input_desc':[[{'data_type':'float32','shape':[4,6],'tensor_name':'a'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[2,12],'tensor_name':'b'}]}]}";
	expect(jq(reshape), KC_OK, NULL, "Reshape with -1 attr");
	d = jq(reshape), jset(d, "/op_desc/0/output_desc/0/shape", "[2,13]");
	jset(d, "/output_desc/0/shape", "[2,13]");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/attr/0/value", "Reshape attr disagrees");
	d = jq(reshape), jset(d, "/op_desc/0/output_desc/0/shape", "[2,13]");
	jset(d, "/output_desc/0/shape", "[2,13]");
	jset(d, "/op_desc/0/attr", "null");
	expect(d, KC_BAD_SHAPE, "/op_desc/0/input_desc", "Reshape numel changes");
}

/* Corpus files whose ops are all in ops.def; they must parse. */
static const char *const eligible[] = {
    "Fused_Add_GeLU_fusion_",
    "Fused_BiasAdd_GeLU_fusion_",
    "Fused_Sigmoid_",
    "Fused_ReLU_",
    "Fused_Cast_fusion_",
    "Fused_ClipByNormNoDivSum_RealDiv_",
    "Fused_Gelu_",
    "Fused_Maximum_fusion_",
    "Fused_Mul_Add_fusion_",
    "Fused_Cast_BiasAdd_Tanh_fusion_",
    "Fused_BiasAdd_ReLU_fusion_",
    "Fused_Add_Log_Mul_Exp_",
    "Fused_Tile_Div_fusion_",
    "Fused_BroadcastTo_atomic_clean_",
    "Fused_Cast_RealDiv_Mul_TensorAdd_",
    "Fused_Greater_Select_Sqrt_Select_Maximum_Reshape_RealDiv_",
    "Fused_Reshape_BroadcastTo_Mul_Neg_",
    "Fused_MaximumGrad_TupleGetItem_Add_",
    "Fused_Cast_DropoutGrad_Cast_ReluGrad_",
    "Fused_Mul_Cast_Add_split_",
    "Fused_Conv2D_split_",
};

static void
test_corpus(void)
{
	const char *dir = t_corpus_dir();
	if (!dir) {
		t_skip("corpus not found");
		return;
	}
	DIR *dp = opendir(dir);
	if (!dp) {
		t_skip("corpus unreadable");
		return;
	}
	struct dirent *de;
	int nfiles = 0, nok = 0;
	while ((de = readdir(dp)) != NULL) {
		if (de->d_name[0] == '.' ||
		    (!strstr(de->d_name, ".json") && !strstr(de->d_name, ".info")))
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		size_t len = 0;
		char *txt = t_read_file(path, &len);
		if (!txt)
			continue;
		nfiles++;
		CompileCtx *c = compile_ctx_new();
		KcGraph *g = NULL;
		KcErr err = {0};
		KcStatus st = kc_parse(c, txt, len, NULL, &g, &err);
		bool want_ok = false;
		for (size_t i = 0; i < sizeof eligible / sizeof eligible[0]; i++)
			if (strncmp(de->d_name, eligible[i], strlen(eligible[i])) == 0)
				want_ok = true;
		if (st == KC_OK) {
			nok++;
			KcWorkload wl;
			kc_workload(c, g, &wl);
			OK(wl.canonical_len > 0);
			printf("# ok   %s (%d ops)\n", de->d_name, g->nnodes);
		} else {
			printf("# fail %s: %s at %s: %s\n", de->d_name, kc_status_code(st),
			       err.where, err.msg);
		}
		if (want_ok)
			OKF(st == KC_OK, "%s must parse", de->d_name);
		else
			OKF(st == KC_OK || st == KC_UNSUPPORTED_OP || st == KC_UNSUPPORTED,
			    "%s: unexpected %s", de->d_name, kc_status_code(st));
		compile_ctx_free(c);
		free(txt);
	}
	closedir(dp);
	printf("# corpus: %d of %d files parse\n", nok, nfiles);
	OK(nfiles > 0);
}

int
main(void)
{
	t_sub("base graph", test_base);
	t_sub("malformed JSON", test_json_errors);
	t_sub("top level", test_top_level);
	t_sub("ops", test_ops);
	t_sub("wiring", test_wiring);
	t_sub("dtypes", test_dtypes);
	t_sub("constants", test_constants);
	t_sub("shapes and limits", test_shapes);
	t_sub("layout attrs", test_layout_attrs);
	t_sub("reductions and layout ops", test_reduce_layout);
	t_sub("in-place writes", test_assign);
	t_sub("argmax, cumsum, pool2d, multi-output", test_ops_b);
	t_sub("Sin..Atan2, AddN, bool reductions", test_new_ops);
	t_sub("corpus", test_corpus);
	return t_done();
}
