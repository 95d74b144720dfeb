/* test_knobs.c - the knob table (knobs.def) and the schedule record checker.
 *
 * Every row is driven through the JSON parser from the table itself: its
 * bounds and special values accepted, one past them refused, the wrong
 * JSON type refused, its default what sched_default_knobs sets, each with
 * the JSON pointer of the offending member. The canonical knobs of a few
 * schedules are compared with the text the if-chain parser made before the
 * table existed (kernel ids hash it, so it must not move). Records go
 * through kc_schedule_record_check as PUT, import and compile use it.
 */
#include <stdio.h>
#include <string.h>

#include "compiler.h"
#include "t.h"

static KcTarget avx2; /* fixed, so vector_width's default is known */

/* One-op composite graphs (float32), made by make_graphs. */
static char g_exp[2048], g_sum[2048], g_mm[2048];

static const char *
tensor(char *buf, size_t cap, const char *name, const char *shape)
{
	snprintf(buf, cap,
	         "{\"data_type\":\"float32\",\"format\":\"DefaultFormat\",\"name\":\"x\","
	         "\"shape\":[%s],\"tensor_name\":\"%s\"}",
	         shape, name);
	return buf;
}

/* op(attr) of inputs a [and b] with shapes sa [sb], output shape so */
static void
graph(char *out, size_t cap, const char *op, const char *attr, const char *sa, const char *sb,
      const char *so)
{
	char a[256], b[256], y[256], ins[600];
	tensor(a, sizeof a, "a", sa);
	tensor(y, sizeof y, "y", so);
	if (sb)
		snprintf(ins, sizeof ins, "[%s],[%s]", a, tensor(b, sizeof b, "b", sb));
	else
		snprintf(ins, sizeof ins, "[%s]", a);
	snprintf(out, cap,
	         "{\"composite\":true,\"op\":\"Fused_%s\",\"process\":\"cpu\",\"input_desc\":[%s],"
	         "\"output_desc\":[%s],\"op_desc\":[{\"attr\":%s,\"impl_path\":\"\",\"name\":"
	         "\"%s\",\"input_desc\":[%s],\"output_desc\":[%s]}]}",
	         op, ins, y, attr, op, ins, y);
}

static void
make_graphs(void)
{
	graph(g_exp, sizeof g_exp, "Exp", "null", "100", NULL, "100");
	graph(g_sum, sizeof g_sum, "ReduceSum",
	      "[{\"name\":\"axis\",\"value\":[1]},{\"name\":\"keep_dims\",\"value\":false}]",
	      "64,1024", NULL, "64");
	graph(g_mm, sizeof g_mm, "MatMul", "null", "4,8", "8,16", "4,16");
}

/* Schedules on x86_64-x86-64+avx2 and their canonical knobs as printed
 * before the table (sched.c's if-chain parser and printer). */
static const struct {
	const char *graph, *tpl, *knobs, *want;
} canon_cases[] = {
    {g_exp, "injective", NULL, "{\"parallel_grain\":16384,\"unroll\":0,\"vector_width\":8}"},
    {g_exp, "injective", "{\"vector_width\":4,\"unroll\":1}",
     "{\"parallel_grain\":16384,\"unroll\":1,\"vector_width\":4}"},
    {g_exp, "injective",
     "{\"fuse_rows\":false,\"jam\":3,\"rfactor\":5,\"tile\":16,\"stream\":false,"
     "\"parallel_grain\":1099511627776}",
     "{\"fuse_rows\":false,\"jam\":3,\"parallel_grain\":1099511627776,\"rfactor\":5,\"stream\":"
     "false,\"tile\":16,\"unroll\":0,\"vector_width\":8}"},
    {g_exp, "injective", "{\"unroll\":1,\"stages\":[{\"unroll\":4,\"tile\":1}]}",
     "{\"parallel_grain\":16384,\"stages\":[{\"parallel_grain\":16384,\"tile\":1,\"unroll\":4,"
     "\"vector_width\":8}],\"unroll\":1,\"vector_width\":8}"},
    {g_exp, "injective",
     "{\"fuse_rows\":true,\"jam\":0,\"rfactor\":0,\"tile\":0,\"stream\":true,\"stages\":[{}]}",
     "{\"parallel_grain\":16384,\"unroll\":0,\"vector_width\":8}"},
    {g_sum, "reduce", NULL, "{\"parallel_grain\":16384,\"unroll\":0,\"vector_width\":8}"},
    {g_sum, "reduce", "{\"unroll\":8,\"rfactor\":1,\"jam\":1,\"stages\":[{\"fuse_rows\":false}]}",
     "{\"jam\":1,\"parallel_grain\":16384,\"rfactor\":1,\"stages\":[{\"fuse_rows\":false,\"jam\":"
     "1,\"parallel_grain\":16384,\"rfactor\":1,\"unroll\":8,\"vector_width\":8}],\"unroll\":8,"
     "\"vector_width\":8}"},
    {g_mm, "matmul", NULL,
     "{\"fuse_epilogue\":true,\"kc\":0,\"mc\":0,\"mr\":0,\"nc\":0,\"nr_vecs\":0,\"parallel_"
     "grain\":16384,\"unroll\":0,\"vector_width\":8}"},
    {g_mm, "matmul",
     "{\"mr\":4,\"kc\":64,\"fuse_epilogue\":false,\"nc\":32,\"mc\":8,\"nr_vecs\":2}",
     "{\"fuse_epilogue\":false,\"kc\":64,\"mc\":8,\"mr\":4,\"nc\":32,\"nr_vecs\":2,\"parallel_"
     "grain\":16384,\"unroll\":0,\"vector_width\":8}"},
    {g_mm, "matmul", "{\"stages\":[{\"mr\":2,\"stream\":false}]}",
     "{\"fuse_epilogue\":true,\"kc\":0,\"mc\":0,\"mr\":0,\"nc\":0,\"nr_vecs\":0,\"parallel_"
     "grain\":16384,\"stages\":[{\"fuse_epilogue\":true,\"kc\":0,\"mc\":0,\"mr\":2,\"nc\":0,\"nr_"
     "vecs\":0,\"parallel_grain\":16384,\"stream\":false,\"unroll\":0,\"vector_width\":8}],"
     "\"unroll\":0,\"vector_width\":8}"},
    {NULL, "matmul", "{\"stages\":[{},{\"mr\":2,\"tile\":4}],\"unroll\":3}",
     "{\"fuse_epilogue\":true,\"kc\":0,\"mc\":0,\"mr\":0,\"nc\":0,\"nr_vecs\":0,\"parallel_"
     "grain\":16384,\"stages\":[{\"fuse_epilogue\":true,\"kc\":0,\"mc\":0,\"mr\":0,\"nc\":0,\"nr_"
     "vecs\":0,\"parallel_grain\":16384,\"unroll\":3,\"vector_width\":8},{\"fuse_epilogue\":true,"
     "\"kc\":0,\"mc\":0,\"mr\":2,\"nc\":0,\"nr_vecs\":0,\"parallel_grain\":16384,\"tile\":4,"
     "\"unroll\":3,\"vector_width\":8}],\"unroll\":3,\"vector_width\":8}"},
    {NULL, "reduce", "{\"vector_width\":16}",
     "{\"parallel_grain\":16384,\"unroll\":0,\"vector_width\":16}"},
};

/* kc_schedule_from_json without a graph: status, where, message. */
static KcStatus
try_knobs(const char *tpl, const char *knobs, KcErr *err, const char **canon)
{
	CompileCtx *c = compile_ctx_new();
	KcSchedule *s = NULL;
	static char out[4096]; /* single-threaded test */
	memset(err, 0, sizeof *err);
	KcStatus st = kc_schedule_from_json(c, NULL, &avx2, tpl, knobs, &s, err);
	snprintf(out, sizeof out, "%s", st == KC_OK ? kc_schedule_knobs_json(s) : "");
	if (canon)
		*canon = out;
	compile_ctx_free(c);
	return st;
}

/* A template that takes k and one that does not (or NULL). */
static const char *
tpl_of(const KcKnobInfo *k, bool takes)
{
	for (int t = 0; t < KC_TEMPLATE_COUNT; t++)
		if (((k->templates >> t) & 1) == takes)
			return kc_template_name((KcTemplate)t);
	return NULL;
}

static void
test_table(void)
{
	int n = kc_knob_count();
	unsigned all = (1u << KC_TEMPLATE_COUNT) - 1;
	OK(n >= 14 && kc_knob_info(-1) == NULL && kc_knob_info(n) == NULL);
	OK(strcmp(kc_template_name(KC_TEMPLATE_MATMUL), "matmul") == 0 &&
	   kc_template_name(KC_TEMPLATE_COUNT) == NULL);
	for (int i = 0; i < n; i++) {
		const KcKnobInfo *k = kc_knob_info(i);
		bool uniq = true;
		for (int j = 0; j < i; j++)
			uniq = uniq && strcmp(kc_knob_info(j)->name, k->name) != 0;
		OKF(uniq && kc_knob_find(k->name) == k && strcmp(k->name, "stages") != 0,
		    "%s: unique, found by name", k->name);
		OKF(k->help && k->help[0] && !strchr(k->help, '|') && !strchr(k->help, '\n'),
		    "%s: one line of help, no table bars", k->name);
		OKF(k->templates && (k->templates & ~all) == 0 && strcmp(k->backend, "cpu") == 0,
		    "%s: templates and backend", k->name);
		OKF(k->min <= k->max && (k->type != KC_KNOB_BOOL || (k->min == 0 && k->max == 1)),
		    "%s: range", k->name);
		/* a knob shown only when set needs a fixed default to compare with */
		OKF(k->always_printed || !k->target_default, "%s: print rule", k->name);
		OKF(k->target_default || kc_knob_accepts(k, k->dflt), "%s: default accepted",
		    k->name);
	}
	OK(kc_knob_find("stages") == NULL && kc_knob_find("no_such_knob") == NULL);
}

/* Every row's bounds, specials, types and default through the parser. */
static void
test_rows(void)
{
	for (int i = 0; i < kc_knob_count(); i++) {
		const KcKnobInfo *k = kc_knob_info(i);
		const char *tpl = tpl_of(k, true), *other = tpl_of(k, false), *canon = NULL;
		char js[256], where[96], desc[128];
		KcErr e;
		kc_knob_describe(k, desc, sizeof desc);
		snprintf(where, sizeof where, "/knobs/%s", k->name);
#define REFUSED(json, w)                                                                           \
	(try_knobs(tpl, json, &e, NULL) == KC_BAD_SCHEDULE && strcmp(e.where, w) == 0 &&           \
	 strstr(e.msg, k->name) != NULL)
		if (k->type == KC_KNOB_BOOL) {
			snprintf(js, sizeof js, "{\"%s\":1}", k->name);
			OKF(REFUSED(js, where), "%s: a number is refused (%s at %s)", k->name,
			    e.msg, e.where);
			snprintf(js, sizeof js, "{\"%s\":\"true\"}", k->name);
			OKF(REFUSED(js, where), "%s: a string is refused", k->name);
			for (int v = 0; v < 2; v++) {
				snprintf(js, sizeof js, "{\"%s\":%s}", k->name,
				         v ? "true" : "false");
				OKF(try_knobs(tpl, js, &e, NULL) == KC_OK, "%s: %d accepted (%s)",
				    k->name, v, e.msg);
			}
		} else {
			int64_t lowest = (k->special & KC_KNOB_AUTO)  ? 0
			                 : (k->special & KC_KNOB_OFF) ? 1
			                                              : k->min;
			int64_t above = k->type == KC_KNOB_POW2 ? k->max * 2 : k->max + 1;
			const int64_t ok_vals[] = {k->min, k->max, lowest};
			for (size_t j = 0; j < sizeof ok_vals / sizeof ok_vals[0]; j++) {
				snprintf(js, sizeof js, "{\"%s\":%lld}", k->name,
				         (long long)ok_vals[j]);
				OKF(try_knobs(tpl, js, &e, NULL) == KC_OK, "%s: %lld accepted (%s)",
				    k->name, (long long)ok_vals[j], e.msg);
			}
			snprintf(js, sizeof js, "{\"%s\":%lld}", k->name, (long long)(lowest - 1));
			OKF(REFUSED(js, where), "%s: %lld (below) refused", k->name,
			    (long long)(lowest - 1));
			OKF(strstr(e.msg, desc) != NULL, "%s: the message says '%s' (%s)", k->name,
			    desc, e.msg);
			snprintf(js, sizeof js, "{\"%s\":%lld}", k->name, (long long)above);
			OKF(REFUSED(js, where), "%s: %lld (above) refused", k->name,
			    (long long)above);
			if (k->special & KC_KNOB_AUTO && !(k->special & KC_KNOB_OFF) &&
			    k->min > 1) {
				snprintf(js, sizeof js, "{\"%s\":1}", k->name);
				OKF(REFUSED(js, where), "%s: 1 refused (not a special value)",
				    k->name);
			}
			if (k->type == KC_KNOB_POW2 && k->max >= 8) {
				snprintf(js, sizeof js, "{\"%s\":%lld}", k->name,
				         (long long)(k->max / 2 + k->max / 4));
				OKF(REFUSED(js, where), "%s: not a power of two refused", k->name);
			}
			snprintf(js, sizeof js, "{\"%s\":%lld.5}", k->name, (long long)k->min);
			OKF(REFUSED(js, where), "%s: a fraction refused", k->name);
			snprintf(js, sizeof js, "{\"%s\":\"%lld\"}", k->name, (long long)k->min);
			OKF(REFUSED(js, where), "%s: a string refused", k->name);
			snprintf(js, sizeof js, "{\"%s\":true}", k->name);
			OKF(REFUSED(js, where), "%s: a bool refused", k->name);
			snprintf(js, sizeof js, "{\"%s\":null}", k->name);
			OKF(REFUSED(js, where), "%s: null refused", k->name);
		}
		/* the default: what sched_default_knobs sets, and "{}" prints it
		 * (or leaves it out, for a knob shown only when set) */
		OK(try_knobs(tpl, "{}", &e, &canon) == KC_OK);
		char member[96];
		snprintf(member, sizeof member, "\"%s\":", k->name);
		const char *at = strstr(canon, member);
		if (!k->always_printed) {
			OKF(!at, "%s: absent at its default (%s)", k->name, canon);
		} else if (!k->target_default) {
			char want[128];
			if (k->type == KC_KNOB_BOOL)
				snprintf(want, sizeof want, "%s%s", member,
				         k->dflt ? "true" : "false");
			else
				snprintf(want, sizeof want, "%s%lld", member, (long long)k->dflt);
			OKF(at && strncmp(at, want, strlen(want)) == 0 &&
			        (at[strlen(want)] == ',' || at[strlen(want)] == '}'),
			    "%s: default %s in %s", k->name, want, canon);
		} else {
			OKF(at != NULL, "%s: printed (%s)", k->name, canon);
		}
		/* a default written out is accepted and prints as "{}" does */
		const char *canon2 = NULL;
		char c1[4096];
		snprintf(c1, sizeof c1, "%s", canon);
		if (!k->target_default) {
			if (k->type == KC_KNOB_BOOL)
				snprintf(js, sizeof js, "{\"%s\":%s}", k->name,
				         k->dflt ? "true" : "false");
			else
				snprintf(js, sizeof js, "{\"%s\":%lld}", k->name,
				         (long long)k->dflt);
			OKF(try_knobs(tpl, js, &e, &canon2) == KC_OK && strcmp(canon2, c1) == 0,
			    "%s: its default written out changes nothing", k->name);
		}
		/* per stage: the same checks, the pointer into "stages" */
		snprintf(js, sizeof js, "{\"stages\":[{},{\"%s\":\"x\"}]}", k->name);
		snprintf(where, sizeof where, "/knobs/stages/1/%s", k->name);
		OKF(REFUSED(js, where), "%s: refused in a stage at %s (%s)", k->name, where,
		    e.where);
		/* a template that does not take it */
		if (other) {
			snprintf(js, sizeof js, "{\"%s\":%s}", k->name,
			         k->type == KC_KNOB_BOOL ? "true" : "1");
			snprintf(where, sizeof where, "/knobs/%s", k->name);
			OKF(try_knobs(other, js, &e, NULL) == KC_BAD_SCHEDULE &&
			        strcmp(e.where, where) == 0,
			    "%s: refused by the %s template (%s)", k->name, other, e.msg);
		}
#undef REFUSED
	}
}

static void
test_describe(void)
{
	char b[128];
	kc_knob_describe(kc_knob_find("unroll"), b, sizeof b);
	OKF(strcmp(b, "0 (auto) or an integer from 1 to 16") == 0, "%s", b);
	kc_knob_describe(kc_knob_find("parallel_grain"), b, sizeof b);
	OKF(strcmp(b, "an integer from 1 to 2^40") == 0, "%s", b);
	kc_knob_describe(kc_knob_find("tile"), b, sizeof b);
	OKF(strcmp(b, "0 (auto), 1 (off) or a power of two from 4 to 256") == 0, "%s", b);
	kc_knob_describe(kc_knob_find("vector_width"), b, sizeof b);
	OKF(strcmp(b, "a power of two from 1 to 64") == 0, "%s", b);
	kc_knob_describe(kc_knob_find("stream"), b, sizeof b);
	OKF(strcmp(b, "true or false") == 0, "%s", b);
	KcErr e;
	OK(try_knobs("injective", "{\"unroll\":17}", &e, NULL) == KC_BAD_SCHEDULE &&
	   strcmp(e.msg, "unroll must be 0 (auto) or an integer from 1 to 16") == 0);
}

/* Members that are not knobs, and the template's rules between knobs. */
static void
test_members(void)
{
	static const struct {
		const char *tpl, *knobs, *where;
	} bad[] = {
	    {"injective", "{\"no_such_knob\":1}", "/knobs/no_such_knob"},
	    {"injective", "{\"a/b~c\":1}", "/knobs/a~1b~0c"},
	    {"injective", "{\"unroll\":2,\"unroll\":2}", "/knobs/unroll"},
	    {"injective", "{\"stages\":[],\"stages\":[]}", "/knobs/stages"},
	    {"injective", "{\"stages\":{}}", "/knobs/stages"},
	    {"injective", "{\"stages\":[{\"stages\":[]}]}", "/knobs/stages/0/stages"},
	    {"injective", "{\"stages\":[7]}", "/knobs/stages/0"},
	    {"injective", "[1]", "/knobs"},
	    {"injective", "not json", "/knobs"},
	    {"matmul", "{\"mr\":16,\"nr_vecs\":3}", "/knobs"},
	    {"matmul", "{\"vector_width\":32,\"nr_vecs\":3}", "/knobs"},
	    {"matmul", "{\"stages\":[{},{\"mr\":16,\"nr_vecs\":3}]}", "/knobs/stages/1"},
	    {"no_such_template", "{}", "/template"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		KcErr e;
		KcStatus st = try_knobs(bad[i].tpl, bad[i].knobs, &e, NULL);
		OKF(st == KC_BAD_SCHEDULE && strcmp(e.where, bad[i].where) == 0,
		    "%s %s refused at %s (%s at %s)", bad[i].tpl, bad[i].knobs, bad[i].where, e.msg,
		    e.where);
	}
	KcErr e;
	OK(try_knobs("matmul", "{\"mr\":8,\"nr_vecs\":4}", &e, NULL) == KC_OK);
	OK(try_knobs("matmul", "", &e, NULL) == KC_OK &&
	   try_knobs("matmul", NULL, &e, NULL) == KC_OK);
	/* with a graph: the template must be its, the stages at most its own */
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcSchedule *s = NULL;
	OK(kc_parse(c, g_exp, strlen(g_exp), NULL, &g, &e) == KC_OK);
	e = (KcErr){0};
	OK(kc_schedule_from_json(c, g, &avx2, "reduce", "{}", &s, &e) == KC_BAD_SCHEDULE &&
	   strcmp(e.where, "/template") == 0);
	e = (KcErr){0};
	OK(kc_schedule_from_json(c, g, &avx2, "injective", "{\"stages\":[{},{}]}", &s, &e) ==
	       KC_BAD_SCHEDULE &&
	   strcmp(e.where, "/knobs/stages") == 0);
	compile_ctx_free(c);
}

static void
test_canonical(void)
{
	for (size_t i = 0; i < sizeof canon_cases / sizeof canon_cases[0]; i++) {
		CompileCtx *c = compile_ctx_new();
		KcGraph *g = NULL;
		KcSchedule *s = NULL;
		KcErr e = {0};
		const char *gj = canon_cases[i].graph;
		KcStatus st = gj ? kc_parse(c, gj, strlen(gj), NULL, &g, &e) : KC_OK;
		if (st == KC_OK && !canon_cases[i].knobs)
			s = kc_schedule_default(c, g, &avx2);
		else if (st == KC_OK)
			st = kc_schedule_from_json(c, g, &avx2, canon_cases[i].tpl,
			                           canon_cases[i].knobs, &s, &e);
		OKF(st == KC_OK && s && strcmp(kc_schedule_template(s), canon_cases[i].tpl) == 0 &&
		        strcmp(kc_schedule_knobs_json(s), canon_cases[i].want) == 0,
		    "case %zu: %s (%s)", i, s ? kc_schedule_knobs_json(s) : "-", e.msg);
		compile_ctx_free(c);
	}
}

/* ---- records --------------------------------------------------------------- */

static int known_calls;

static KcStatus
key_unknown(void *arg, const KcDigest *key, KcErr *err)
{
	(void)arg, (void)key;
	known_calls++;
	return kc_fail(err, KC_NOT_FOUND, "/workload_key", "unknown workload");
}

static KcStatus
record(const char *json, const KcRecordCheck *chk, KcErr *err, char *out, size_t cap)
{
	CompileCtx *c = compile_ctx_new();
	KcScheduleRecord r;
	KcBuf b = {0};
	memset(err, 0, sizeof *err);
	KcStatus st = kc_schedule_record_check(c, json, strlen(json), chk, &r, err);
	if (st == KC_OK)
		kc_schedule_record_print(&r, &b);
	snprintf(out, cap, "%s", b.data ? b.data : "");
	kc_buf_free(&b);
	compile_ctx_free(c);
	return st;
}

#define KEY "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define REC(target, rest)                                                                          \
	"{\"format\":\"kcs-schedule-v1\",\"workload_key\":\"" KEY "\",\"target\":" target          \
	",\"template\":\"injective\"" rest "}"

static void
test_records(void)
{
	KcDigest key;
	char out[4096];
	KcErr e;
	OK(kc_digest_parse(KEY, &key));
	KcRecordCheck put = {
	    .where = "", .workload_key = &key, .key_from = "the path", .takes_query = true};
	KcRecordCheck imp = {.where = "/record", .workload_key = &key, .key_from = "the line"};

	/* a good record prints canonically, and its print checks to itself */
	const char *good = REC("\"x86_64+avx2\"", ",\"knobs\":{\"unroll\":4,\"stream\":false},"
	                                          "\"measured\":{\"seconds\":1.5e-06,\"gflops\":2},"
	                                          "\"provenance\":{\"by\":\"t\"},\"extra\":1");
	OKF(record(good, &put, &e, out, sizeof out) == KC_OK, "%s at %s", e.msg, e.where);
	const char *want =
	    "{\"format\":\"kcs-schedule-v1\",\"workload_key\":\"" KEY "\",\"target\":"
	    "\"x86_64-x86-64+avx2\",\"template\":\"injective\",\"knobs\":{\"parallel_grain\":16384,"
	    "\"stream\":false,\"unroll\":4,\"vector_width\":8},\"measured\":{\"seconds\":1.5e-06,"
	    "\"gflops\":2},\"provenance\":{\"by\":\"t\"}}";
	OKF(strcmp(out, want) == 0, "%s", out);
	char again[4096];
	OK(record(out, &imp, &e, again, sizeof again) == KC_OK && strcmp(again, out) == 0);

	static const struct {
		const char *json, *where;
		KcStatus st;
	} bad[] = {
	    {"{", "", KC_BAD_JSON},
	    {"[]", "", KC_BAD_SCHEDULE},
	    {"{\"format\":\"kcs-schedule-v0\"}", "/format", KC_BAD_SCHEDULE},
	    {"{\"format\":\"kcs-schedule-v1\",\"workload_key\":\"" KEY "0\"}", "/workload_key",
	     KC_BAD_SCHEDULE},
	    {"{\"format\":\"kcs-schedule-v1\",\"workload_key\":\"" KEY "\",\"target\":7}",
	     "/target", KC_BAD_SCHEDULE},
	    {REC("\"sparc-v9\"", ",\"knobs\":{}"), "/target", KC_BAD_TARGET},
	    {"{\"format\":\"kcs-schedule-v1\",\"workload_key\":\"" KEY "\",\"target\":\"x86_64\","
	     "\"template\":1}",
	     "/template", KC_BAD_SCHEDULE},
	    {REC("\"x86_64\"", ",\"knobs\":[]"), "/knobs", KC_BAD_SCHEDULE},
	    {REC("\"x86_64\"", ",\"knobs\":{},\"measured\":{\"seconds\":0}"), "/measured",
	     KC_BAD_SCHEDULE},
	    {REC("\"x86_64\"", ",\"knobs\":{},\"measured\":{\"seconds\":1,\"gflops\":-1}"),
	     "/measured", KC_BAD_SCHEDULE},
	    {REC("\"x86_64\"", ",\"knobs\":{},\"provenance\":{\"by\":1}"), "/provenance",
	     KC_BAD_SCHEDULE},
	    {REC("\"x86_64\"", ",\"knobs\":{\"unroll\":99}"), "/knobs/unroll", KC_BAD_SCHEDULE},
	    {REC("\"x86_64\"", ",\"knobs\":{\"stages\":[{\"mr\":1}]}"), "/knobs/stages/0/mr",
	     KC_BAD_SCHEDULE},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char w[160];
		KcStatus st = record(bad[i].json, &put, &e, out, sizeof out);
		OKF(st == bad[i].st && strcmp(e.where, bad[i].where) == 0, "PUT %zu: %s at %s", i,
		    e.msg, e.where);
		snprintf(w, sizeof w, "/record%s", bad[i].where);
		st = record(bad[i].json, &imp, &e, out, sizeof out);
		OKF(st == bad[i].st && strcmp(e.where, w) == 0, "import %zu: %s at %s", i, e.msg,
		    e.where);
	}
	/* the target: required; ?target= stands in for it and must agree */
	const char *no_target = "{\"format\":\"kcs-schedule-v1\",\"workload_key\":\"" KEY "\","
	                        "\"template\":\"injective\",\"knobs\":{}}";
	OK(record(no_target, &put, &e, out, sizeof out) == KC_BAD_SCHEDULE &&
	   strcmp(e.where, "/target") == 0 && strstr(e.msg, "?target="));
	OK(record(no_target, &imp, &e, out, sizeof out) == KC_BAD_SCHEDULE &&
	   strcmp(e.where, "/record/target") == 0);
	KcRecordCheck q = put;
	q.target_query = "x86_64+avx2";
	OK(record(no_target, &q, &e, out, sizeof out) == KC_OK &&
	   strstr(out, "\"target\":\"x86_64-x86-64+avx2\""));
	OK(record(REC("\"x86_64-x86-64+avx2+fma\"", ",\"knobs\":{}"), &q, &e, out, sizeof out) ==
	       KC_BAD_SCHEDULE &&
	   strcmp(e.where, "/target") == 0);
	OK(record(REC("\"x86_64+avx2\"", ",\"knobs\":{}"), &q, &e, out, sizeof out) == KC_OK);
	q.target_query = "sparc";
	OK(record(no_target, &q, &e, out, sizeof out) == KC_BAD_TARGET &&
	   strcmp(e.where, "?target") == 0);
	/* a record read back for a resolved target must name it */
	KcRecordCheck comp = {.workload_key = &key, .target = &avx2};
	OK(record(REC("\"x86_64-x86-64+avx2\"", ",\"knobs\":{}"), &comp, &e, out, sizeof out) ==
	   KC_OK);
	OK(record(REC("\"x86_64\"", ",\"knobs\":{}"), &comp, &e, out, sizeof out) ==
	       KC_BAD_SCHEDULE &&
	   strcmp(e.where, "/target") == 0);
	/* key_known runs after format and workload_key, before the rest */
	KcRecordCheck k = put;
	k.key_known = key_unknown;
	known_calls = 0;
	OK(record("{\"format\":1}", &k, &e, out, sizeof out) == KC_BAD_SCHEDULE &&
	   known_calls == 0);
	OK(record(REC("7", ",\"knobs\":{}"), &k, &e, out, sizeof out) == KC_NOT_FOUND &&
	   known_calls == 1 && strcmp(e.where, "/workload_key") == 0);
	/* any key when the caller has none to compare with */
	KcRecordCheck any = {.where = ""};
	OK(record(REC("\"x86_64\"", ",\"knobs\":{}"), &any, &e, out, sizeof out) == KC_OK);
	/* with the graph: the template is checked against it */
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	OK(kc_parse(c, g_sum, strlen(g_sum), NULL, &g, &e) == KC_OK);
	KcRecordCheck wg = {.workload_key = &key, .target = &avx2, .graph = g};
	KcScheduleRecord r;
	const char *inj = REC("\"x86_64-x86-64+avx2\"", ",\"knobs\":{}");
	e = (KcErr){0};
	OK(kc_schedule_record_check(c, inj, strlen(inj), &wg, &r, &e) == KC_BAD_SCHEDULE &&
	   strcmp(e.where, "/template") == 0);
	compile_ctx_free(c);
}

int
main(void)
{
	KcErr e = {0};
	kc_compiler_init();
	make_graphs();
	if (kc_target_resolve("x86_64-x86-64+avx2", &avx2, &e) != KC_OK) {
		printf("Bail out! %s\n", e.msg);
		return 1;
	}
	t_sub("table", test_table);
	t_sub("rows", test_rows);
	t_sub("describe", test_describe);
	t_sub("members", test_members);
	t_sub("canonical", test_canonical);
	t_sub("records", test_records);
	return t_done();
}
