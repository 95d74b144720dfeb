/* test_canon.c - kc_workload: the canonical form and workload_key.
 *
 * The key must not move under tensor renaming, reordering of independent
 * ops, attr/key order, noise keys and attrs, or constants spelt differently
 * but equal in their dtype; it must move for any change of op, shape,
 * dtype, constant, or of the order of kernel inputs or outputs. Checked on
 * every corpus file that parses and on small hand-written graphs.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "t.h"
#include "tjson.h"

/* kc_parse_workload of a canonical form gives a graph with that form again
 * (it checks that itself) and the name given. */
static bool
parses_back(const KcWorkload *wl, const char *name)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	bool ok =
	    kc_parse_workload(c, wl->canonical, wl->canonical_len, name, NULL, &g, &err) == KC_OK &&
	    strcmp(kc_graph_name(g), name) == 0;
	if (!ok)
		printf("# %s: %.2000s\n", err.msg, wl->canonical);
	compile_ctx_free(c);
	return ok;
}

/* Key of a document; false if it does not parse. *canon gets a malloc'd
 * copy of the canonical form when asked for. Every form is also checked to
 * parse back (parses_back). */
static bool
key_of(const cJSON *doc, KcDigest *key, char **canon)
{
	char *s = cJSON_PrintUnformatted(doc);
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcErr err = {0};
	bool ok = kc_parse(c, s, strlen(s), NULL, &g, &err) == KC_OK;
	if (ok) {
		KcWorkload wl;
		kc_workload(c, g, &wl);
		*key = wl.key;
		if (canon)
			*canon = strdup(wl.canonical);
		KcDigest k2;
		kc_sha256(wl.canonical, wl.canonical_len, &k2);
		ok = memcmp(&k2, &wl.key, sizeof k2) == 0 &&
		     strlen(wl.canonical) == wl.canonical_len;
		OK(parses_back(&wl, kc_graph_name(g)));
	} else {
		printf("# parse failed: %s at %s: %s\n", kc_status_code(err.status), err.where,
		       err.msg);
	}
	compile_ctx_free(c);
	free(s);
	return ok;
}

static bool
same_key(const cJSON *a, const cJSON *b)
{
	KcDigest ka, kb;
	char *ca = NULL, *cb = NULL;
	bool ok = key_of(a, &ka, &ca) && key_of(b, &kb, &cb);
	bool same = ok && memcmp(&ka, &kb, sizeof ka) == 0;
	if (ok && !same)
		printf("# a: %.600s\n# b: %.600s\n", ca, cb);
	free(ca);
	free(cb);
	return same;
}

static bool
diff_key(const cJSON *a, const cJSON *b)
{
	KcDigest ka, kb;
	return key_of(a, &ka, NULL) && key_of(b, &kb, NULL) && memcmp(&ka, &kb, sizeof ka) != 0;
}

/* ---- mutations ------------------------------------------------------------ */

/* Rename every tensor_name consistently (t_<old>_r). */
static void
rename_all(cJSON *j)
{
	for (cJSON *c = j->child; c; c = c->next) {
		if (c->string && strcmp(c->string, "tensor_name") == 0 && cJSON_IsString(c)) {
			char buf[512];
			snprintf(buf, sizeof buf, "t_%s_r", c->valuestring);
			cJSON_SetValuestring(c, buf);
		}
		rename_all(c);
	}
}

/* Reverse the member order of every object and the entries of every attr
 * list (both are unordered in the format). */
static void
reverse_keys(cJSON *j)
{
	for (cJSON *c = j->child; c; c = c->next)
		reverse_keys(c);
	bool is_attr = cJSON_IsArray(j) && j->string && strcmp(j->string, "attr") == 0;
	if (!cJSON_IsObject(j) && !is_attr)
		return;
	cJSON *items[4096];
	int n = 0;
	while (j->child && n < 4096)
		items[n++] = cJSON_DetachItemViaPointer(j, j->child);
	while (n > 0)
		cJSON_AddItemToArray(j, items[--n]);
}

/* Add noise keys at the top and per op, and a noise attr to every op. */
static void
add_noise(cJSON *j)
{
	jset(j, "/composite_graph", "'999.1'");
	jset(j, "/id", "12345");
	jset(j, "/op", "'Fused_renamed_kernel_1'");
	jset(j, "/platform", "'AKG_V2'");
	jset(j, "/node_name", "'Default/fused'");
	jset(j, "/op_full_name", "'Fused_whatever'");
	cJSON *ops = cJSON_GetObjectItemCaseSensitive(j, "op_desc");
	for (cJSON *o = ops ? ops->child : NULL; o; o = o->next) {
		cJSON_DeleteItemFromObjectCaseSensitive(o, "ptr_address");
		cJSON_AddStringToObject(o, "ptr_address", "Default/Op-op77");
		cJSON *attr = cJSON_GetObjectItemCaseSensitive(o, "attr");
		if (!cJSON_IsArray(attr)) {
			cJSON_DeleteItemFromObjectCaseSensitive(o, "attr");
			attr = cJSON_AddArrayToObject(o, "attr");
		}
		cJSON_AddItemToArray(attr,
		                     jq("{'data_type':'bool','name':'visited','value':true}"));
		cJSON_AddItemToArray(attr, jq("{'name':'fake_output','value':false}"));
	}
}

static const char *
out_name(const cJSON *op)
{
	const cJSON *od = cJSON_GetObjectItemCaseSensitive(op, "output_desc");
	const cJSON *t =
	    od && od->child ? cJSON_GetObjectItemCaseSensitive(od->child, "tensor_name") : NULL;
	return cJSON_IsString(t) ? t->valuestring : "";
}

static bool
uses(const cJSON *op, const char *name)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(op, "input_desc");
	for (const cJSON *l = id ? id->child : NULL; l; l = l->next)
		for (const cJSON *d = l->child; d; d = d->next) {
			const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "tensor_name");
			if (cJSON_IsString(t) && strcmp(t->valuestring, name) == 0 &&
			    !cJSON_GetObjectItemCaseSensitive(d, "value"))
				return true;
		}
	return false;
}

/* Swap items i and j of array arr. */
static void
swap_items(cJSON *arr, int i, int j)
{
	cJSON *a = cJSON_Duplicate(cJSON_GetArrayItem(arr, i), 1);
	cJSON *b = cJSON_Duplicate(cJSON_GetArrayItem(arr, j), 1);
	cJSON_ReplaceItemInArray(arr, i, b);
	cJSON_ReplaceItemInArray(arr, j, a);
}

/* The kernel input an Assign/InplaceAssign writes, or "". */
static const char *
dst_name(const cJSON *op)
{
	const cJSON *nm = cJSON_GetObjectItemCaseSensitive(op, "name");
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(op, "input_desc");
	if (!cJSON_IsString(nm) || (strcmp(nm->valuestring, "Assign") != 0 &&
	                            strcmp(nm->valuestring, "InplaceAssign") != 0))
		return "";
	const cJSON *t = id && id->child && id->child->child
	                     ? cJSON_GetObjectItemCaseSensitive(id->child->child, "tensor_name")
	                     : NULL;
	return cJSON_IsString(t) ? t->valuestring : "";
}

/* Swap the first adjacent pair of independent ops (neither reads what the
 * other writes, in-place writes included); false if none. */
static bool
swap_independent(cJSON *j)
{
	cJSON *ops = cJSON_GetObjectItemCaseSensitive(j, "op_desc");
	int n = cJSON_GetArraySize(ops);
	for (int i = 0; i + 1 < n; i++) {
		cJSON *a = cJSON_GetArrayItem(ops, i), *b = cJSON_GetArrayItem(ops, i + 1);
		if (!uses(b, out_name(a)) && !(*dst_name(a) && uses(b, dst_name(a))) &&
		    !(*dst_name(b) && uses(a, dst_name(b)))) {
			cJSON *da = cJSON_Duplicate(a, 1), *db = cJSON_Duplicate(b, 1);
			cJSON_ReplaceItemInArray(ops, i, db);
			cJSON_ReplaceItemInArray(ops, i + 1, da);
			return true;
		}
	}
	return false;
}

/* Bump the first float constant by 1; false if there is none. */
static bool
bump_const(cJSON *j)
{
	cJSON *ops = cJSON_GetObjectItemCaseSensitive(j, "op_desc");
	for (cJSON *o = ops ? ops->child : NULL; o; o = o->next) {
		cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "input_desc");
		for (cJSON *l = id ? id->child : NULL; l; l = l->next)
			for (cJSON *d = l->child; d; d = d->next) {
				cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "value");
				const char *dt = jat(d, "/data_type", NULL, NULL)
				                     ? jat(d, "/data_type", NULL, NULL)->valuestring
				                     : "";
				if (cJSON_IsNumber(v) && strncmp(dt, "float", 5) == 0) {
					cJSON_SetNumberValue(v, v->valuedouble + 1);
					return true;
				}
			}
	}
	return false;
}

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
	int nfiles = 0, nswap = 0, nbump = 0;
	while ((de = readdir(dp)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		size_t len;
		char *txt = t_read_file(path, &len);
		cJSON *orig = txt ? cJSON_ParseWithLength(txt, len) : NULL;
		free(txt);
		KcDigest k;
		if (!orig)
			continue;
		/* only files the parser accepts */
		char *s = cJSON_PrintUnformatted(orig);
		CompileCtx *c = compile_ctx_new();
		KcGraph *g = NULL;
		KcErr err = {0};
		bool parses = kc_parse(c, s, strlen(s), NULL, &g, &err) == KC_OK;
		compile_ctx_free(c);
		free(s);
		if (!parses) {
			cJSON_Delete(orig);
			continue;
		}
		nfiles++;
		OKF(key_of(orig, &k, NULL), "%s", de->d_name);
		cJSON *m = cJSON_Duplicate(orig, 1);
		rename_all(m);
		OKF(same_key(orig, m), "%s: renaming changed the key", de->d_name);
		reverse_keys(m);
		OKF(same_key(orig, m), "%s: key/attr order changed the key", de->d_name);
		add_noise(m);
		OKF(same_key(orig, m), "%s: noise changed the key", de->d_name);
		if (swap_independent(m)) {
			nswap++;
			OKF(same_key(orig, m), "%s: reordering independent ops changed the key",
			    de->d_name);
		}
		cJSON_Delete(m);
		m = cJSON_Duplicate(orig, 1);
		if (bump_const(m)) {
			nbump++;
			OKF(diff_key(orig, m), "%s: a changed constant kept the key", de->d_name);
		}
		cJSON_Delete(m);
		cJSON_Delete(orig);
	}
	closedir(dp);
	printf("# %d corpus files, %d with independent ops swapped, %d with a constant bumped\n",
	       nfiles, nswap, nbump);
	OK(nfiles >= 10 && nswap >= 1 && nbump >= 1);
}

/* ---- hand-written graphs ---------------------------------------------------
 * a[16,768], b[16,768]: t = Sub(a, b); u = Mul(a, 0.9); outputs t, u. */
static const char small[] =
    "{'op':'k','process':'cpu','input_desc':[[{'data_type':'float32','shape':[16,768],"
    "'tensor_name':'a'}],[{'data_type':'float32','shape':[16,768],'tensor_name':'b'}]],"
    "'output_desc':[{'data_type':'float32','shape':[16,768],'tensor_name':'t'},"
    "{'data_type':'float32','shape':[16,768],'tensor_name':'u'}],"
    "'op_desc':[{'name':'Sub','attr':null,'input_desc':[[{'data_type':'float32','shape':[16,768],"
    "'tensor_name':'a'}],[{'data_type':'float32','shape':[16,768],'tensor_name':'b'}]],"
    "'output_desc':[{'data_type':'float32','shape':[16,768],'tensor_name':'t'}]},"
    "{'name':'Mul','attr':null,'input_desc':[[{'data_type':'float32','shape':[16,768],"
    "'tensor_name':'a'}],[{'data_type':'float32','shape':[1],'tensor_name':'c','value':0.9}]],"
    "'output_desc':[{'data_type':'float32','shape':[16,768],'tensor_name':'u'}]}]}";

/* `small` with every occurrence of `from` replaced by `to` (' quoting). */
static cJSON *
small_with(const char *from, const char *to)
{
	KcBuf b = {0};
	const char *p = small;
	size_t fl = from ? strlen(from) : 0;
	const char *q;
	while (fl && (q = strstr(p, from)) != NULL) {
		kc_buf_append(&b, p, (size_t)(q - p));
		kc_buf_puts(&b, to);
		p = q + fl;
	}
	kc_buf_puts(&b, p);
	cJSON *j = jq(b.data);
	kc_buf_free(&b);
	return j;
}

/* One-op graph a[ishape] -> op -> b[oshape] with attr and extra inputs
 * (JSON, ' quotes; extra is "" or ",[...]"). */
static cJSON *
op1(const char *op, const char *ishape, const char *oshape, const char *attr, const char *extra)
{
	char buf[2048];
	snprintf(
	    buf, sizeof buf,
	    "{'op':'k','input_desc':[[{'data_type':'float32','shape':[%s],'tensor_name':'a'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[%s],'tensor_name':'b'}],"
	    "'op_desc':[{'name':'%s','attr':%s,'input_desc':[[{'data_type':'float32',"
	    "'shape':[%s],'tensor_name':'a'}]%s],'output_desc':[{'data_type':'float32',"
	    "'shape':[%s],'tensor_name':'b'}]}]}",
	    ishape, oshape, op, attr, ishape, extra, oshape);
	return jq(buf);
}

/* same_key, then frees both. */
static bool
same_and_free(cJSON *a, cJSON *b)
{
	bool r = same_key(a, b);
	cJSON_Delete(a);
	cJSON_Delete(b);
	return r;
}

static void
test_new_ops(void)
{
	const char *r1 = "[{'name':'axis','value':[1]},{'name':'keep_dims','value':false}]";
	/* invariant: attr order, noise, axis spelling, v2 value input */
	OK(same_and_free(op1("ReduceSum", "4,6,6", "4,6", r1, ""),
	                 op1("ReduceSum", "4,6,6", "4,6",
	                     "[{'name':'keep_dims','value':false},{'name':'enable_atomic_add',"
	                     "'value':true},{'name':'axis','value':-2}]",
	                     "")));
	OK(same_and_free(op1("ReduceSum", "4,6,6", "4,6", r1, ""),
	                 op1("ReduceSum", "4,6,6", "4,6", "{'axis':[1,-2]}", "")));
	OK(same_and_free(op1("ReduceSum", "4,6,6", "4,6", r1, ""),
	                 op1("ReduceSum", "4,6,6", "4,6", "null",
	                     ",[{'data_type':'int64','shape':[1],'tensor_name':'x','value':1}]")));
	OK(same_and_free(op1("ReduceMax", "8", "1", "{'axis':[]}", ""),
	                 op1("ReduceMax", "8", "1", "{'axis':[0],'keep_dims':false}", "")));
	OK(same_and_free(
	    op1("Transpose", "3,3,3", "3,3,3", "{'perm':[0,2,1]}", ""),
	    op1("Transpose", "3,3,3", "3,3,3", "null",
	        ",[{'data_type':'int64','shape':[3],'tensor_name':'x','value':[0,2,1]}]")));
	/* sensitive: axis, keep_dims, op, perm, multiples, begin, strides */
	OK(!same_and_free(op1("ReduceSum", "4,6,6", "4,6", r1, ""),
	                  op1("ReduceSum", "4,6,6", "4,6", "{'axis':2}", "")));
	OK(!same_and_free(op1("ReduceSum", "8", "1", "{'axis':0,'keep_dims':true}", ""),
	                  op1("ReduceSum", "8", "1", "{'axis':0,'keep_dims':false}", "")));
	OK(!same_and_free(op1("ReduceSum", "4,6,6", "4,6", r1, ""),
	                  op1("ReduceMax", "4,6,6", "4,6", r1, "")));
	OK(!same_and_free(op1("Transpose", "3,3,3", "3,3,3", "{'perm':[0,2,1]}", ""),
	                  op1("Transpose", "3,3,3", "3,3,3", "{'perm':[2,1,0]}", "")));
	OK(!same_and_free(op1("Tile", "2,2", "4,4", "{'multiples':[2,2]}", ""),
	                  op1("Tile", "4,1", "4,4", "{'multiples':[1,4]}", "")));
	OK(!same_and_free(op1("StridedSlice", "8", "3", "{'begin':[0],'end':[3]}", ""),
	                  op1("StridedSlice", "8", "3", "{'begin':[1],'end':[4]}", "")));
	OK(!same_and_free(
	    op1("StridedSlice", "8", "3", "{'begin':[0],'end':[3]}", ""),
	    op1("StridedSlice", "8", "3", "{'begin':[0],'end':[6],'strides':[2]}", "")));
	OK(!same_and_free(op1("ExpandDims", "3", "1,3,1", "{'axis':0}", ""),
	                  op1("Reshape", "3", "1,3,1", "null", "")));
	OK(!same_and_free(op1("Concat", "4,4", "4,4", "{'axis':0}", ""),
	                  op1("Reshape", "4,4", "4,4", "null", "")));
	OK(same_and_free(op1("Concat", "4,4", "4,4", "{'axis':0}", ""),
	                 op1("Concat", "4,4", "4,4", "{'axis':-2,'N':1}", "")));
	/* an in-place write no output refers to still counts */
	static const char as[] =
	    "{'op':'k','input_desc':[[{'data_type':'float32','shape':[4],'tensor_name':'p'}],"
	    "[{'data_type':'float32','shape':[4],'tensor_name':'g'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[4],'tensor_name':'s'}],"
	    "'op_desc':[{'name':'Sub','input_desc':[[{'data_type':'float32','shape':[4],'tensor_"
	    "name':'p'}],"
	    "[{'data_type':'float32','shape':[4],'tensor_name':'g'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[4],'tensor_name':'s'}]},"
	    "{'name':'Assign','input_desc':[[{'data_type':'float32','shape':[4],'tensor_name':'p'}]"
	    ","
	    "[{'data_type':'float32','shape':[4],'tensor_name':'s'}]],"
	    "'output_desc':[{'data_type':'float32','shape':[4],'tensor_name':'o'}]}]}";
	cJSON *a = jq(as), *b = jq(as);
	cJSON *ops = cJSON_GetObjectItemCaseSensitive(b, "op_desc");
	cJSON_DeleteItemFromArray(ops, 1);
	OKF(!same_and_free(a, b), "a dead-looking Assign is part of the workload");
	a = jq(as), b = jq(as);
	jset(b, "/op_desc/1/input_desc/0/0/tensor_name", "'g'");
	OKF(!same_and_free(a, b), "which input an Assign writes is part of the workload");
}

static void
test_small(void)
{
	cJSON *a = small_with(NULL, NULL), *m;
	char *canon = NULL;
	KcDigest k;
	OK(key_of(a, &k, &canon));
	printf("# %s\n", canon);
	cJSON *cj = canon ? cJSON_Parse(canon) : NULL;
	OK(cj != NULL && canon && strncmp(canon, "{\"kcs_workload\":1,", 18) == 0);
	OK(canon && strstr(canon, "\"c:float32:0x1.ccccccp-1\"") != NULL);
	OK(canon && strstr(canon, "\"outputs\":[\"n0.0\",\"n1.0\"]") != NULL);
	cJSON_Delete(cj);
	free(canon);

	/* invariant */
	m = small_with("0.9}", "0.8999999761581421}");
	OK(same_key(a, m));
	cJSON_Delete(m);
	m = small_with("0.9}", "0.89999999}"); /* rounds to the same float32 */
	OK(same_key(a, m));
	cJSON_Delete(m);
	m = small_with("'tensor_name':'a'", "'tensor_name':'x9'");
	OK(same_key(a, m));
	cJSON_Delete(m);
	m = cJSON_Duplicate(a, 1);
	OK(swap_independent(m) && same_key(a, m));
	cJSON_Delete(m);
	m = cJSON_Duplicate(a, 1);
	reverse_keys(m);
	add_noise(m);
	jset(m, "/op_desc/0/attr", "[{'name':'b','value':1},{'name':'a','value':2}]");
	OK(same_key(a, m));
	jset(m, "/op_desc/0/attr", "[{'name':'a','value':2},{'name':'b','value':1}]");
	OK(same_key(a, m));
	cJSON_Delete(m);
	/* attr null vs absent */
	m = cJSON_Duplicate(a, 1);
	jdel(m, "/op_desc/0/attr");
	OK(same_key(a, m));
	cJSON_Delete(m);
	/* a dead op changes nothing */
	m = cJSON_Duplicate(a, 1);
	jset(m, "/op_desc/2",
	     "{'name':'Neg','attr':null,'input_desc':[[{'data_type':'float32',"
	     "'shape':[16,768],'tensor_name':'a'}]],'output_desc':[{'data_type':"
	     "'float32','shape':[16,768],'tensor_name':'dead'}]}");
	OK(same_key(a, m));
	cJSON_Delete(m);

	/* sensitive */
	m = small_with("0.9}", "0.91}");
	OK(diff_key(a, m));
	cJSON_Delete(m);
	m = small_with("'Sub'", "'Add'");
	OK(diff_key(a, m));
	cJSON_Delete(m);
	m = small_with("[16,768]", "[16,769]");
	OK(diff_key(a, m));
	cJSON_Delete(m);
	m = small_with("[16,768]", "[768,16]");
	OK(diff_key(a, m));
	cJSON_Delete(m);
	m = small_with("float32", "float16");
	OK(diff_key(a, m));
	cJSON_Delete(m);
	/* swap the two kernel inputs (their uses keep their names) */
	m = cJSON_Duplicate(a, 1);
	cJSON *in = cJSON_GetObjectItemCaseSensitive(m, "input_desc");
	swap_items(in, 0, 1);
	OK(diff_key(a, m));
	cJSON_Delete(m);
	/* swap the outputs */
	m = cJSON_Duplicate(a, 1);
	cJSON *out = cJSON_GetObjectItemCaseSensitive(m, "output_desc");
	swap_items(out, 0, 1);
	OK(diff_key(a, m));
	cJSON_Delete(m);
	/* swap the operands of the non-commutative Sub */
	m = cJSON_Duplicate(a, 1);
	cJSON *sin = jat(m, "/op_desc/0/input_desc", NULL, NULL);
	swap_items(sin, 0, 1);
	OK(diff_key(a, m));
	cJSON_Delete(m);
	/* an extra (unused) kernel input changes the ABI, so the key */
	m = cJSON_Duplicate(a, 1);
	jset(m, "/input_desc/2", "[{'data_type':'float32','shape':[4],'tensor_name':'z'}]");
	OK(diff_key(a, m));
	cJSON_Delete(m);
	/* pass-through output vs computed */
	m = cJSON_Duplicate(a, 1);
	jset(m, "/output_desc/1/tensor_name", "'a'");
	OK(diff_key(a, m));
	cJSON_Delete(m);
	cJSON_Delete(a);
}

/* Constants: float16 spellings that round alike; ints; -0.0. */
static void
test_const_forms(void)
{
	static const char g16[] =
	    "{'op':'k','input_desc':[[{'data_type':'float16','shape':[4],'tensor_name':'a'}]],"
	    "'output_desc':[{'data_type':'float16','shape':[4],'tensor_name':'b'}],"
	    "'op_desc':[{'name':'Add','attr':null,'input_desc':[[{'data_type':'float16','shape':[4]"
	    ","
	    "'tensor_name':'a'}],[{'data_type':'float16','shape':[1],'tensor_name':'c','value':0.1}"
	    "]],"
	    "'output_desc':[{'data_type':'float16','shape':[4],'tensor_name':'b'}]}]}";
	cJSON *a = jq(g16), *m;
	m = jq(g16), jset(m, "/op_desc/0/input_desc/1/0/value", "0.0999755859375");
	OK(same_key(a, m));
	cJSON_Delete(m);
	/* a float32 constant next to float16 converts to float16 */
	m = jq(g16), jset(m, "/op_desc/0/input_desc/1/0/data_type", "'float32'");
	OK(same_key(a, m));
	cJSON_Delete(m);
	m = jq(g16), jset(m, "/op_desc/0/input_desc/1/0/value", "0.1001");
	OK(diff_key(a, m));
	cJSON_Delete(m);
	m = jq(g16), jset(m, "/op_desc/0/input_desc/1/0/value", "0");
	cJSON *n = jq(g16);
	jset(n, "/op_desc/0/input_desc/1/0/value", "-0.0");
	OK(diff_key(m, n)); /* -0.0 and 0.0 differ in bits */
	cJSON_Delete(m);
	cJSON_Delete(n);
	cJSON_Delete(a);
}

/* Conv2D: the resolved stride, dilation, pads, groups and layout are the
 * key; their spelling (pad vs pad_list, a pad_mode the pads override,
 * [1,1,h,w] vs [h,w], a stale format attr, kernel_size/out_channel) is
 * not. */

/* Inputs a0, a1 ([6] of dt) -> op -> b; dyn: one dynamic input list. */
static cJSON *
op2(const char *op, const char *dt, const char *attr, bool dyn, bool swap)
{
	char buf[2048], t0[128], t1[128];
	snprintf(t0, sizeof t0, "{'data_type':'%s','shape':[6],'tensor_name':'%s'}", dt,
	         swap ? "a1" : "a0");
	snprintf(t1, sizeof t1, "{'data_type':'%s','shape':[6],'tensor_name':'%s'}", dt,
	         swap ? "a0" : "a1");
	snprintf(buf, sizeof buf,
	         "{'op':'k','input_desc':[[{'data_type':'%s','shape':[6],'tensor_name':'a0'}],"
	         "[{'data_type':'%s','shape':[6],'tensor_name':'a1'}]],"
	         "'output_desc':[{'data_type':'%s','shape':[6],'tensor_name':'b'}],"
	         "'op_desc':[{'name':'%s','attr':%s,'input_desc':%s,"
	         "'output_desc':[{'data_type':'%s','shape':[6],'tensor_name':'b'}]}]}",
	         dt, dt, dt, op, attr, "%s", dt);
	char body[2048], ins[512];
	if (dyn)
		snprintf(ins, sizeof ins, "[[%s,%s]]", t0, t1);
	else
		snprintf(ins, sizeof ins, "[[%s],[%s]]", t0, t1);
	snprintf(body, sizeof body, buf, ins);
	return jq(body);
}

/* Does the canonical form of doc (then deleted) contain s? */
static bool
canon_has(cJSON *doc, const char *s)
{
	KcDigest k;
	char *c = NULL;
	bool r = key_of(doc, &k, &c) && strstr(c, s) != NULL;
	if (c && !r)
		printf("# %s not in %.600s\n", s, c);
	free(c);
	cJSON_Delete(doc);
	return r;
}

static void
test_ops_part_a(void)
{
	/* AddN: noise attrs do not matter; piece order and op do */
	OK(same_and_free(op2("AddN", "float32", "null", true, false),
	                 op2("AddN", "float32",
	                     "[{'name':'n','value':2},{'name':'dyn_input_sizes','value':[2]}]",
	                     true, false)));
	OK(!same_and_free(op2("AddN", "float32", "null", true, false),
	                  op2("Add", "float32", "null", false, false)));
	OK(!same_and_free(op2("AddN", "float32", "null", true, false),
	                  op2("AddN", "float32", "null", true, true)));
	/* Atan2 is not symmetric; ASin is Asin */
	OK(!same_and_free(op2("Atan2", "float32", "null", false, false),
	                  op2("Atan2", "float32", "null", false, true)));
	OK(same_and_free(op1("ASin", "6", "6", "null", ""), op1("Asin", "6", "6", "null", "")));
	OK(!same_and_free(op1("Sin", "6", "6", "null", ""), op1("Cos", "6", "6", "null", "")));
	OK(!same_and_free(op1("Expm1", "6", "6", "null", ""), op1("Exp", "6", "6", "null", "")));
	/* StridedSlice: masks and spellings that select the same elements */
	OK(same_and_free(
	    op1("StridedSlice", "8", "8",
	        "{'begin':[0],'end':[0],'strides':[-1],"
	        "'begin_mask':1,'end_mask':1}",
	        ""),
	    op1("StridedSlice", "8", "8", "{'begin':[7],'end':[-9],'strides':[-1]}", "")));
	OK(same_and_free(
	    op1("StridedSlice", "8", "4", "{'begin':[20],'end':[-20],'strides':[-2]}", ""),
	    op1("StridedSlice", "8", "4", "{'begin':[-1],'end':[0],'strides':[-2]}", "")));
	OK(same_and_free(
	    op1("StridedSlice", "2,3,4", "1,3,4", "{'begin':[1,0],'end':[2,0],'ellipsis_mask':2}",
	        ""),
	    op1("StridedSlice", "2,3,4", "1,3,4", "{'begin':[1],'end':[2],'strides':[1]}", "")));
	OK(same_and_free(
	    op1("StridedSlice", "2,3", "2,1,3",
	        "{'begin':[0,0,0],'end':[0,0,0],'begin_mask':5,'end_mask':5,'new_axis_mask':2}",
	        ""),
	    op1("StridedSlice", "2,3", "2,1,3",
	        "{'begin':[0,0],'end':[2,0],'new_axis_mask':2,'strides':[1,1]}", "")));
	/* ... and ones that do not */
	OK(!same_and_free(
	    op1("StridedSlice", "8", "4", "{'begin':[7],'end':[0],'strides':[-2]}", ""),
	    op1("StridedSlice", "8", "4", "{'begin':[1],'end':[8],'strides':[2]}", "")));
	OK(!same_and_free(
	    op1("StridedSlice", "8", "8", "{'begin':[7],'end':[-9],'strides':[-1]}", ""),
	    op1("StridedSlice", "8", "8", "{'begin':[0],'end':[8]}", "")));
	/* new axes appear in the form only when there are some, so the keys of
	 * older slices did not move */
	OK(canon_has(
	    op1("StridedSlice", "8", "1,8", "{'begin':[0,0],'end':[0,8],'new_axis_mask':1}", ""),
	    "\"begin\":[0],\"new_axes\":1,\"shrink_axis_mask\":0,\"strides\":[1]"));
	OK(canon_has(op1("StridedSlice", "8", "8", "{'begin':[7],'end':[-9],'strides':[-1]}", ""),
	             "{\"begin\":[7],\"shrink_axis_mask\":0,\"strides\":[-1]}"));
}

static void
test_conv(void)
{
	static const char cv[] =
	    "{'op':'k','input_desc':[[{'data_type':'float16','format':'NHWC','shape':[2,9,9,4],"
	    "'tensor_name':'x'}],"
	    "[{'data_type':'float16','format':'NHWC','shape':[6,3,3,4],'tensor_name':'w'}]],"
	    "'output_desc':[{'data_type':'float16','format':'NHWC','shape':[2,5,5,6],"
	    "'tensor_name':'o'}],"
	    "'op_desc':[{'name':'Conv2D','attr':[{'name':'stride','value':[1,1,2,2]},"
	    "{'name':'dilation','value':[1,1,1,1]},{'name':'pad_list','value':[1,1,1,1]},"
	    "{'name':'pad_mode','value':'same'},{'name':'group','value':1},"
	    "{'name':'groups','value':1},{'name':'format','value':'NCHW'},"
	    "{'name':'dst_type','value':'float16'},{'name':'kernel_size','value':[3,3]},"
	    "{'name':'out_channel','value':6},{'name':'mode','value':1}],"
	    "'input_desc':[[{'data_type':'float16','format':'NHWC','shape':[2,9,9,4],"
	    "'tensor_name':'x'}],"
	    "[{'data_type':'float16','format':'NHWC','shape':[6,3,3,4],'tensor_name':'w'}]],"
	    "'output_desc':[{'data_type':'float16','format':'NHWC','shape':[2,5,5,6],"
	    "'tensor_name':'o'}]}]}";
	cJSON *a = jq(cv), *m;
	char *canon = NULL;
	KcDigest k;
	OK(key_of(a, &k, &canon));
	printf("# %s\n", canon ? canon : "(none)");
	OKF(canon && strstr(canon, "\"attrs\":{\"dilation\":[1,1],\"groups\":1,\"layout\":\"NHWC\","
	                           "\"pad\":[1,1,1,1],\"stride\":[2,2]}"),
	    "Conv2D canonical attrs");
	free(canon);
	/* invariant */
	m = jq(cv), jset(m, "/op_desc/0/attr/2/name", "'pad'");
	OKF(same_and_free(m, jq(cv)), "pad spelled pad");
	m = jq(cv), jset(m, "/op_desc/0/attr/0/value", "[2,2]");
	OKF(same_and_free(m, jq(cv)), "stride [2,2]");
	m = jq(cv), jset(m, "/op_desc/0/attr/1/value", "1");
	OKF(same_and_free(m, jq(cv)), "dilation 1");
	m = jq(cv), jset(m, "/op_desc/0/attr/3/value", "'pad'");
	OKF(same_and_free(m, jq(cv)), "pad_mode pad");
	m = jq(cv), jdel(m, "/op_desc/0/attr/2");
	OKF(same_and_free(m, jq(cv)), "pads from pad_mode same");
	m = jq(cv), jset(m, "/op_desc/0/attr/6/value", "'NHWC'");
	OKF(same_and_free(m, jq(cv)), "format attr (stale) is noise");
	m = jq(cv); /* mode, out_channel, kernel_size, dst_type */
	jdel(m, "/op_desc/0/attr/10"), jdel(m, "/op_desc/0/attr/9");
	jdel(m, "/op_desc/0/attr/8"), jdel(m, "/op_desc/0/attr/7");
	OKF(same_and_free(m, jq(cv)), "dst_type, kernel_size, out_channel, mode are restatements");
	/* sensitive */
	m = jq(cv), jset(m, "/op_desc/0/attr/2/value", "[2,0,1,1]");
	OKF(!same_and_free(m, jq(cv)), "pads top/bottom");
	m = jq(cv), jset(m, "/op_desc/0/attr/2/value", "[1,1,2,0]");
	OKF(!same_and_free(m, jq(cv)), "pads left/right");
	m = jq(cv), jset(m, "/op_desc/0/attr/1/value", "[1,1,2,2]"),
	jset(m, "/op_desc/0/attr/2/value", "[2,2,2,2]");
	OKF(!same_and_free(m, jq(cv)), "dilation 2");
	/* layout: x [1,4,4,4], w [4,4,4,4], pads [1,2,1,2] give [1,4,4,4] read
	 * as NHWC or as NCHW; the two are different kernels */
	cJSON *l[2];
	for (int q = 0; q < 2; q++) {
		static const char *const sh[] = {"/input_desc/0/0/shape",
		                                 "/input_desc/1/0/shape",
		                                 "/output_desc/0/shape",
		                                 "/op_desc/0/input_desc/0/0/shape",
		                                 "/op_desc/0/input_desc/1/0/shape",
		                                 "/op_desc/0/output_desc/0/shape"};
		static const char *const fm[] = {"/input_desc/0/0/format",
		                                 "/input_desc/1/0/format",
		                                 "/output_desc/0/format",
		                                 "/op_desc/0/input_desc/0/0/format",
		                                 "/op_desc/0/input_desc/1/0/format",
		                                 "/op_desc/0/output_desc/0/format"};
		l[q] = jq(cv);
		for (int f = 0; f < 6; f++) {
			jset(l[q], sh[f], f == 1 || f == 4 ? "[4,4,4,4]" : "[1,4,4,4]");
			jset(l[q], fm[f], q ? "'NCHW'" : "'NHWC'");
		}
		jset(l[q], "/op_desc/0/attr/0/value", "[1,1,1,1]");
		jset(l[q], "/op_desc/0/attr/2/value", "[1,2,1,2]");
		jset(l[q], "/op_desc/0/attr/8/value", "[4,4]");
		jset(l[q], "/op_desc/0/attr/9/value", "4");
	}
	OKF(diff_key(l[0], l[1]), "NHWC and NCHW differ");
	cJSON_Delete(l[0]);
	cJSON_Delete(l[1]);
	cJSON_Delete(a);
}

/* op1 with an int32 result (Argmax/Argmin). */
static cJSON *
op1_i32(const char *op, const char *ishape, const char *oshape, const char *attr, const char *extra)
{
	cJSON *d = op1(op, ishape, oshape, attr, extra);
	jset(d, "/op_desc/0/output_desc/0/data_type", "'int32'");
	jset(d, "/output_desc/0/data_type", "'int32'");
	return d;
}

static void
test_ops_b(void)
{
	/* Argmax/Argmin: axis spellings (negative, list, v2 input, default -1),
	 * the ArgMax alias, noise; sensitive to the axis and the op */
	OK(same_and_free(op1_i32("Argmax", "4,6", "4", "{'axis':1}", ""),
	                 op1_i32("Argmax", "4,6", "4", "{'axis':[-1],'output_type':'int32'}", "")));
	OK(same_and_free(op1_i32("Argmax", "4,6", "4", "{'axis':1}", ""),
	                 op1_i32("ArgMax", "4,6", "4", "null", "")));
	OK(same_and_free(
	    op1_i32("Argmin", "4,6", "6", "{'axis':0}", ""),
	    op1_i32("Argmin", "4,6", "6", "null",
	            ",[{'data_type':'int64','shape':[1],'tensor_name':'x','value':0}]")));
	OK(!same_and_free(op1_i32("Argmax", "6,6", "6", "{'axis':0}", ""),
	                  op1_i32("Argmax", "6,6", "6", "{'axis':1}", "")));
	OK(!same_and_free(op1_i32("Argmax", "6,6", "6", "{'axis':0}", ""),
	                  op1_i32("Argmin", "6,6", "6", "{'axis':0}", "")));
	/* CumSum/CumProd: bools spelled as ints, absent = false, v2 axis */
	OK(same_and_free(
	    op1("CumSum", "4,6", "4,6", "{'axis':-1,'exclusive':true}", ""),
	    op1("CumSum", "4,6", "4,6", "{'reverse':false,'exclusive':1,'axis':[1]}", "")));
	OK(same_and_free(op1("CumProd", "4,6", "4,6", "{'axis':0}", ""),
	                 op1("CumProd", "4,6", "4,6", "null",
	                     ",[{'data_type':'int64','shape':[1],'tensor_name':'x','value':0}]")));
	OK(!same_and_free(op1("CumSum", "4,6", "4,6", "{'axis':0}", ""),
	                  op1("CumSum", "4,6", "4,6", "{'axis':1}", "")));
	OK(!same_and_free(op1("CumSum", "4,6", "4,6", "{'axis':0}", ""),
	                  op1("CumSum", "4,6", "4,6", "{'axis':0,'exclusive':true}", "")));
	OK(!same_and_free(op1("CumSum", "4,6", "4,6", "{'axis':0}", ""),
	                  op1("CumSum", "4,6", "4,6", "{'axis':0,'reverse':true}", "")));
	OK(!same_and_free(op1("CumSum", "4,6", "4,6", "{'axis':0}", ""),
	                  op1("CumProd", "4,6", "4,6", "{'axis':0}", "")));
	/* Pool2D: global = its explicit kernel; one pad int = four; strides
	 * [h, w] = [1, 1, h, w]; round_mode spellings that give the same shape;
	 * the layout from the input's format; sensitive to type, pads, layout */
	OK(same_and_free(
	    op1("Pool2D", "1,2,5,7", "1,2,1,1", "{'pool_type':'avg','global':true}", ""),
	    op1("Pool2D", "1,2,5,7", "1,2,1,1",
	        "{'pool_type':'AVG','kernel_size':[5,7],'strides':1,'pad':0,"
	        "'data_layout':'NCHW','round_mode':'floor'}",
	        "")));
	OK(same_and_free(
	    op1("Pool2D", "1,2,9,9", "1,2,5,5",
	        "{'pool_type':'max','kernel_size':3,'strides':[2,2],'pad':1}", ""),
	    op1("Pool2D", "1,2,9,9", "1,2,5,5",
	        "{'pad':[1,1,1,1],'strides':[1,1,2,2],'kernel_size':[3,3],'pool_type':'max',"
	        "'round_mode':false,'pri_format':'NC1HWC0'}",
	        "")));
	OK(same_and_free(op1("Pool2D", "1,2,9,9", "1,2,4,4",
	                     "{'pool_type':'max','kernel_size':3,'strides':2}", ""),
	                 op1("Pool2D", "1,2,9,9", "1,2,4,4",
	                     "{'pool_type':'max','kernel_size':3,'strides':2,'round_mode':'ceil'}",
	                     "")));
	cJSON *a = op1("Pool2D", "1,6,6,2", "1,3,3,2",
	               "{'pool_type':'max','kernel_size':2,'strides':2,'data_layout':'NHWC'}", "");
	cJSON *b = op1("Pool2D", "1,6,6,2", "1,3,3,2",
	               "{'pool_type':'max','kernel_size':2,'strides':2}", "");
	jset(b, "/op_desc/0/input_desc/0/0/format", "'NHWC'");
	OK(same_and_free(a, b));
	OK(!same_and_free(op1("Pool2D", "1,2,8,8", "1,2,4,4",
	                      "{'pool_type':'max','kernel_size':2,'strides':2}", ""),
	                  op1("Pool2D", "1,2,8,8", "1,2,4,4",
	                      "{'pool_type':'avg','kernel_size':2,'strides':2}", "")));
	OK(!same_and_free(op1("Pool2D", "1,2,8,8", "1,2,4,4",
	                      "{'pool_type':'avg','kernel_size':2,'strides':2,'pad':[1,0,0,0],"
	                      "'round_mode':'floor'}",
	                      ""),
	                  op1("Pool2D", "1,2,8,8", "1,2,4,4",
	                      "{'pool_type':'avg','kernel_size':2,'strides':2,'pad':[0,0,1,0],"
	                      "'round_mode':'floor'}",
	                      "")));
	OK(!same_and_free(op1("Pool2D", "1,4,4,4", "1,2,2,4",
	                      "{'pool_type':'max','kernel_size':2,'strides':2,"
	                      "'data_layout':'NHWC'}",
	                      ""),
	                  op1("Pool2D", "1,4,4,4", "1,4,2,2",
	                      "{'pool_type':'max','kernel_size':2,'strides':2,"
	                      "'data_layout':'NCHW'}",
	                      "")));
}

/* A kernel input read before an Assign into it, with the Assign reached
 * first from the outputs: the form numbers the Assign first, and
 * kc_parse_workload must still write the reader before it (the parser
 * rebinds the input's name to the written value). */
static void
test_parse_back_order(void)
{
	cJSON *doc =
	    jq("{'op':'k','input_desc':[[{'data_type':'float32','shape':[4],'tensor_name':'a'}],"
	       "[{'data_type':'float32','shape':[4],'tensor_name':'b'}]],"
	       "'output_desc':[{'data_type':'float32','shape':[4],'tensor_name':'s'},"
	       "{'data_type':'float32','shape':[4],'tensor_name':'r'}],"
	       "'op_desc':[{'name':'Neg','attr':null,'input_desc':[[{'data_type':'float32',"
	       "'shape':[4],'tensor_name':'a'}]],'output_desc':[{'data_type':'float32',"
	       "'shape':[4],'tensor_name':'r'}]},"
	       "{'name':'Assign','attr':null,'input_desc':[[{'data_type':'float32','shape':[4],"
	       "'tensor_name':'a'}],[{'data_type':'float32','shape':[4],'tensor_name':'b'}]],"
	       "'output_desc':[{'data_type':'float32','shape':[4],'tensor_name':'s'}]}]}");
	KcDigest k;
	char *canon = NULL;
	OK(key_of(doc, &k, &canon)); /* key_of checks that it parses back */
	OK(canon && strstr(canon, "\"nodes\":[{\"op\":\"Assign\""));
	free(canon);
	cJSON_Delete(doc);
}

int
main(void)
{
	t_sub("corpus invariance", test_corpus);
	t_sub("hand-written graph", test_small);
	t_sub("constant spellings", test_const_forms);
	t_sub("reductions, layout ops, in-place writes", test_new_ops);
	t_sub("Conv2D attrs", test_conv);
	t_sub("Argmax, CumSum, Pool2D attrs", test_ops_b);
	t_sub("AddN, Atan2, StridedSlice masks", test_ops_part_a);
	t_sub("parse back: a reader before an in-place write", test_parse_back_order);
	return t_done();
}
