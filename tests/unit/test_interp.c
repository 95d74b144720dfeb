/* test_interp.c - the reference interpreter (graph/interp.c).
 *
 * 1. Every op of ops.def against hand-computed values, with the dtype edge
 *    cases the backend defines (integer x/0 = 0, INT_MIN/-1, saturating
 *    float->int casts with NaN -> 0, Round half away from zero, NaN in
 *    comparisons and Maximum, float16/bfloat16 rounding and overflow,
 *    integer wrap-around, broadcasting, Reshape, BroadcastTo).
 * 2. Differential: hand-built graphs and every corpus file that compiles
 *    for the host are compiled (kc_compile + dlopen, like test_codegen),
 *    run on kc_interp_random_inputs data and compared with kc_interp
 *    (rtol = atol = 1e-4, 1e-2 with float16/bfloat16 upstream; integers
 *    and bools exactly).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler.h"
#include "t.h"
#include "telem.h"
#include "tjson.h"
#include "tkernel.h"

/* ---- building one-op graphs ------------------------------------------------ */

static void
desc(char *out, size_t cap, const char *name, const char *dt, const char *shape)
{
	snprintf(out, cap,
	         "{\"data_type\":\"%s\",\"format\":\"DefaultFormat\",\"shape\":[%s],"
	         "\"tensor_name\":\"%s\"}",
	         dt, shape, name);
}

/* A graph with inputs x0.. (dtypes dts[i], shapes shp[i]) and one op whose
 * output y has dtype odt and shape oshape. */
static char *one_op_attr(const char *op, const char *attr, int nin, const char *const *dts,
                         const char *const *shp, const char *odt, const char *oshape);

static char *
one_op(const char *op, int nin, const char *const *dts, const char *const *shp, const char *odt,
       const char *oshape)
{
	return one_op_attr(op, "null", nin, dts, shp, odt, oshape);
}

/* one_op with an attr list (JSON, single quotes allowed). */
static char *
one_op_attr(const char *op, const char *attr, int nin, const char *const *dts,
            const char *const *shp, const char *odt, const char *oshape)
{
	char ins[2048] = "", opins[2048] = "", d[256], name[8];
	size_t cap = 8192;
	char *s = malloc(cap);
	for (int i = 0; i < nin; i++) {
		snprintf(name, sizeof name, "x%d", i);
		desc(d, sizeof d, name, dts[i], shp[i]);
		size_t n = strlen(ins), m = strlen(opins);
		snprintf(ins + n, sizeof ins - n, "%s[%s]", i ? "," : "", d);
		snprintf(opins + m, sizeof opins - m, "%s[%s]", i ? "," : "", d);
	}
	desc(d, sizeof d, "y", odt, oshape);
	snprintf(s, cap,
	         "{\"composite\":true,\"op\":\"t_%s\",\"process\":\"cpu\",\"version\":1,"
	         "\"input_desc\":[%s],\"output_desc\":[%s],\"op_desc\":[{\"attr\":%s,"
	         "\"name\":\"%s\",\"input_desc\":[%s],\"output_desc\":[%s]}]}",
	         op, ins, d, attr, op, opins, d);
	for (char *q = s; *q; q++)
		if (*q == '\'')
			*q = '"';
	return s;
}

/* Packs doubles into a buffer of dtype dt (float16/bfloat16 given as raw
 * bits in the doubles). */
static void *
pack(const char *dt, const double *v, int n)
{
	void *p = calloc((size_t)n + 1, 8);
	for (int i = 0; i < n; i++) {
		if (!strcmp(dt, "float32"))
			((float *)p)[i] = (float)v[i];
		else if (!strcmp(dt, "float64"))
			((double *)p)[i] = v[i];
		else if (!strcmp(dt, "float16") || !strcmp(dt, "bfloat16") || !strcmp(dt, "int16"))
			((uint16_t *)p)[i] = (uint16_t)(int64_t)v[i];
		else if (!strcmp(dt, "int32"))
			((int32_t *)p)[i] = (int32_t)v[i];
		else if (!strcmp(dt, "uint32"))
			((uint32_t *)p)[i] = (uint32_t)v[i];
		else if (!strcmp(dt, "int64"))
			((int64_t *)p)[i] = (int64_t)v[i];
		else if (!strcmp(dt, "uint64"))
			((uint64_t *)p)[i] = (uint64_t)v[i];
		else if (!strcmp(dt, "int8"))
			((int8_t *)p)[i] = (int8_t)v[i];
		else /* uint8, bool */
			((uint8_t *)p)[i] = (uint8_t)v[i];
	}
	return p;
}

static double
unpack(const char *dt, const void *p, int i)
{
	if (!strcmp(dt, "float32"))
		return ((const float *)p)[i];
	if (!strcmp(dt, "float64"))
		return ((const double *)p)[i];
	if (!strcmp(dt, "float16") || !strcmp(dt, "bfloat16"))
		return ((const uint16_t *)p)[i];
	if (!strcmp(dt, "int16"))
		return ((const int16_t *)p)[i];
	if (!strcmp(dt, "int32"))
		return ((const int32_t *)p)[i];
	if (!strcmp(dt, "uint32"))
		return ((const uint32_t *)p)[i];
	if (!strcmp(dt, "int64"))
		return (double)((const int64_t *)p)[i];
	if (!strcmp(dt, "uint64"))
		return (double)((const uint64_t *)p)[i];
	if (!strcmp(dt, "int8"))
		return ((const int8_t *)p)[i];
	return ((const uint8_t *)p)[i];
}

/* Runs op on n-element operands (all of shape [n] unless the op is a
 * layout op) and checks every output element (NaN matches NaN; floats
 * within 1e-6 relative). */
static void
check_op(const char *op, int nin, const char *const *dts, const char *odt, int n,
         const double *const *in, const double *want)
{
	char shape[16];
	const char *shp[3];
	snprintf(shape, sizeof shape, "%d", n);
	for (int i = 0; i < nin; i++)
		shp[i] = shape;
	char *json = one_op(op, nin, dts, shp, odt, shape);
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	void *args[4] = {0};
	KcStatus st = kc_parse(c, json, strlen(json), &lim, &g, &err);
	OKF(st == KC_OK, "%s parse: %s %s", op, err.where, err.msg);
	if (st == KC_OK) {
		for (int i = 0; i < nin; i++)
			args[i] = pack(dts[i], in[i], n);
		args[nin] = calloc((size_t)n + 1, 8);
		st = kc_interp(c, g, args, 0, &err);
		OKF(st == KC_OK, "%s interp: %s", op, err.msg);
		for (int e = 0; e < n && st == KC_OK; e++) {
			double got = unpack(odt, args[nin], e), w = want[e];
			bool same =
			    got == w || (isnan(got) && isnan(w)) || fabs(got - w) <= 1e-6 * fabs(w);
			OKF(same, "%s(%s) element %d: got %.17g want %.17g", op, dts[0], e, got, w);
		}
		for (int i = 0; i <= nin; i++)
			free(args[i]);
	}
	compile_ctx_free(c);
	free(json);
}

#define N(...) ((const double[]){__VA_ARGS__})
#define DT(...) ((const char *const[]){__VA_ARGS__})
#define IN(...) ((const double *const[]){__VA_ARGS__})

static void
arithmetic(void)
{
	const char *f = "float32";
	check_op("Add", 2, DT(f, f), f, 3, IN(N(1, 2.5, -1), N(2, 0.25, 1)), N(3, 2.75, 0));
	check_op("Sub", 2, DT(f, f), f, 2, IN(N(1, 2.5), N(2, 0.25)), N(-1, 2.25));
	check_op("Mul", 2, DT(f, f), f, 2, IN(N(3, -0.5), N(2, 4)), N(6, -2));
	check_op("RealDiv", 2, DT(f, f), f, 3, IN(N(1, 1, 0), N(4, 0, 0)), N(0.25, INFINITY, NAN));
	check_op("Div", 2, DT(f, f), f, 2, IN(N(1, 3), N(4, -2)), N(0.25, -1.5));
	check_op("FloorDiv", 2, DT(f, f), f, 3, IN(N(7, -7, 7.5), N(2, 2, -2)), N(3, -4, -4));
	check_op("FloorMod", 2, DT(f, f), f, 3, IN(N(7, -7, 7.5), N(2, 2, -2)), N(1, 1, -0.5));
	check_op("Mod", 2, DT(f, f), f, 3, IN(N(7, -7, 7.5), N(2, 2, -2)), N(1, -1, 1.5));
	check_op("Maximum", 2, DT(f, f), f, 3, IN(N(1, NAN, 2), N(2, 1, NAN)), N(2, NAN, NAN));
	check_op("Minimum", 2, DT(f, f), f, 3, IN(N(1, NAN, 2), N(2, 1, NAN)), N(1, NAN, NAN));
	check_op("Pow", 2, DT(f, f), f, 3, IN(N(2, 4, 0.5), N(10, 0.5, 2)), N(1024, 2, 0.25));
	check_op("Neg", 1, DT(f), f, 2, IN(N(1.5, -2)), N(-1.5, 2));
	check_op("Abs", 1, DT(f), f, 2, IN(N(-1.5, 2)), N(1.5, 2));
	check_op("Exp", 1, DT(f), f, 2, IN(N(0, 1)), N(1, (float)M_E));
	check_op("Log", 1, DT(f), f, 3, IN(N(1, 0, -1)), N(0, -INFINITY, NAN));
	check_op("Sqrt", 1, DT(f), f, 2, IN(N(4, 2)), N(2, (float)M_SQRT2));
	check_op("Rsqrt", 1, DT(f), f, 2, IN(N(4, 0)), N(0.5, INFINITY));
	check_op("Reciprocal", 1, DT(f), f, 2, IN(N(4, -0.5)), N(0.25, -2));
	check_op("Tanh", 1, DT(f), f, 2, IN(N(0, 1)), N(0, (float)tanh(1)));
	check_op("Erf", 1, DT(f), f, 2, IN(N(0, 1)), N(0, (float)erf(1)));
	check_op("Square", 1, DT(f), f, 2, IN(N(3, -0.5)), N(9, 0.25));
	check_op("Floor", 1, DT(f), f, 3, IN(N(1.5, -1.5, 2)), N(1, -2, 2));
	/* half away from zero (not numpy's rint) */
	check_op("Round", 1, DT(f), f, 4, IN(N(0.5, 1.5, 2.5, -2.5)), N(1, 2, 3, -3));
	check_op("Sign", 1, DT(f), f, 4, IN(N(3, -2, 0, NAN)), N(1, -1, 0, NAN));
}

static void
integers(void)
{
	const char *i = "int32", *i8 = "int8", *u8 = "uint8";
	/* x / 0 == 0, truncation toward zero, INT_MIN / -1 == INT_MIN */
	check_op("Div", 2, DT(i, i), i, 4, IN(N(7, -7, 5, -2147483648.0), N(2, 2, 0, -1)),
	         N(3, -3, 0, -2147483648.0));
	check_op("RealDiv", 2, DT(u8, u8), u8, 2, IN(N(200, 7), N(0, 2)), N(0, 3));
	/* floor division: x // 0 == x % 0 == 0; FloorMod has the divisor's sign,
	 * Mod the dividend's */
	check_op("FloorDiv", 2, DT(i, i), i, 4, IN(N(7, -7, 5, 7), N(2, 2, 0, -2)),
	         N(3, -4, 0, -4));
	check_op("FloorMod", 2, DT(i, i), i, 4, IN(N(7, -7, 5, 7), N(2, 2, 0, -2)), N(1, 1, 0, -1));
	check_op("Mod", 2, DT(i, i), i, 4, IN(N(7, -7, 5, 7), N(2, 2, 0, -2)), N(1, -1, 0, 1));
	check_op("FloorDiv", 2, DT(u8, u8), u8, 2, IN(N(200, 7), N(0, 2)), N(0, 3));
	/* wrap-around in the dtype's width */
	check_op("Add", 2, DT(i8, i8), i8, 2, IN(N(127, -128), N(1, -1)), N(-128, 127));
	check_op("Mul", 2, DT(u8, u8), u8, 1, IN(N(16), N(17)), N(16));
	check_op("Neg", 1, DT(i8), i8, 2, IN(N(-128, 5)), N(-128, -5));
	check_op("Abs", 1, DT(i8), i8, 2, IN(N(-128, -5)), N(-128, 5));
	check_op("Sign", 1, DT(i), i, 3, IN(N(-9, 0, 4)), N(-1, 0, 1));
	check_op("Square", 1, DT(i), i, 1, IN(N(-7)), N(49));
	check_op("Maximum", 2, DT(u8, u8), u8, 1, IN(N(200), N(100)), N(200));
	check_op("Minimum", 2, DT(i8, i8), i8, 1, IN(N(-100), N(100)), N(-100));
	check_op("Round", 1, DT(i), i, 1, IN(N(-3)), N(-3));
	check_op("Sub", 2, DT("int64", "int64"), "int64", 1, IN(N(-5), N(7)), N(-12));
}

static void
comparisons(void)
{
	const char *f = "float32", *b = "bool", *u8 = "uint8";
	check_op("Greater", 2, DT(f, f), b, 3, IN(N(2, 1, NAN), N(1, 1, 0)), N(1, 0, 0));
	check_op("GreaterEqual", 2, DT(f, f), b, 3, IN(N(2, 1, NAN), N(1, 1, 0)), N(1, 1, 0));
	check_op("Less", 2, DT(f, f), b, 3, IN(N(2, 1, NAN), N(3, 1, 0)), N(1, 0, 0));
	check_op("LessEqual", 2, DT(f, f), b, 3, IN(N(2, 1, NAN), N(1, 1, 0)), N(0, 1, 0));
	check_op("Equal", 2, DT(f, f), b, 3, IN(N(2, 1, NAN), N(1, 1, NAN)), N(0, 1, 0));
	check_op("NotEqual", 2, DT(f, f), b, 3, IN(N(2, 1, NAN), N(1, 1, NAN)), N(1, 0, 1));
	/* unsigned compare */
	check_op("Greater", 2, DT(u8, u8), b, 1, IN(N(200), N(100)), N(1));
	check_op("LogicalAnd", 2, DT(b, b), b, 4, IN(N(0, 0, 1, 1), N(0, 1, 0, 1)), N(0, 0, 0, 1));
	check_op("LogicalOr", 2, DT(b, b), b, 4, IN(N(0, 0, 1, 1), N(0, 1, 0, 1)), N(0, 1, 1, 1));
	check_op("LogicalNot", 1, DT(b), b, 2, IN(N(0, 1)), N(1, 0));
	check_op("IsNan", 1, DT(f), b, 3, IN(N(NAN, INFINITY, 1)), N(1, 0, 0));
	check_op("IsInf", 1, DT(f), b, 4, IN(N(NAN, INFINITY, -INFINITY, 1)), N(0, 1, 1, 0));
	check_op("IsFinite", 1, DT(f), b, 3, IN(N(NAN, INFINITY, 1)), N(0, 0, 1));
	check_op("IsNan", 1, DT("int32"), b, 1, IN(N(3)), N(0));
	check_op("IsFinite", 1, DT("int32"), b, 1, IN(N(3)), N(1));
	check_op("Select", 3, DT(b, f, f), f, 2, IN(N(1, 0), N(1, 2), N(3, 4)), N(1, 4));
}

static void
casts(void)
{
	const char *f = "float32", *i = "int32", *u8 = "uint8", *b = "bool";
	/* float -> int: truncate, saturate, NaN -> 0 */
	check_op("Cast", 1, DT(f), i, 6, IN(N(1.9, -1.9, 3e9, -3e9, NAN, INFINITY)),
	         N(1, -1, 2147483647, -2147483648.0, 0, 2147483647));
	check_op("Cast", 1, DT(f), u8, 4, IN(N(-5, 300, 7.9, NAN)), N(0, 255, 7, 0));
	check_op("Cast", 1, DT(f), b, 4, IN(N(0, -0.0, 2, NAN)), N(0, 0, 1, 1));
	check_op("Cast", 1, DT(i), b, 2, IN(N(0, -3)), N(0, 1));
	/* int -> int wraps; sign extension */
	check_op("Cast", 1, DT(i), "int8", 2, IN(N(300, -129)), N(44, 127));
	check_op("Cast", 1, DT("int8"), "uint32", 1, IN(N(-1)), N(4294967295.0));
	check_op("Cast", 1, DT(b), f, 2, IN(N(0, 1)), N(0, 1));
	/* float16: round to nearest even, overflow to inf, subnormals */
	check_op("Cast", 1, DT(f), "float16", 6, IN(N(1, 65504, 65520, 1 + 0x1p-11, 0x1p-24, -2)),
	         N(0x3c00, 0x7bff, 0x7c00, 0x3c00, 0x0001, 0xc000));
	check_op("Cast", 1, DT("float16"), f, 4, IN(N(0x3c00, 0x7bff, 0x0001, 0xfc00)),
	         N(1, 65504, 0x1p-24, -INFINITY));
	/* bfloat16: the upper half of a float32, rounded to nearest even */
	check_op("Cast", 1, DT(f), "bfloat16", 3, IN(N(1, 1 + 0x1p-8, 1 + 0x1p-8 + 0x1p-9)),
	         N(0x3f80, 0x3f80, 0x3f81));
	check_op("Cast", 1, DT("float64"), "float16", 1, IN(N(1 + 0x1p-11 + 0x1p-40)), N(0x3c01));
	/* arithmetic in float16 rounds each result: 2048 + 1 = 2048 */
	check_op("Add", 2, DT("float16", "float16"), "float16", 1, IN(N(0x6800), N(0x3c00)),
	         N(0x6800));
}

/* Broadcasting, Reshape and BroadcastTo on shapes. */
static void
layouts(void)
{
	const char *f = "float32";
	const char *json;
	char *j;
	CompileCtx *c;
	KcGraph *g;
	KcLimits lim = {0};
	KcErr err = {0};

	/* [2,3] + [3] and [2,1] + [1,3] */
	j = one_op("Add", 2, DT(f, f), DT("2,1", "1,3"), f, "2,3");
	c = compile_ctx_new();
	OK(kc_parse(c, j, strlen(j), &lim, &g, &err) == KC_OK);
	float a[2] = {10, 20}, bb[3] = {1, 2, 3}, y[6];
	void *args[3] = {a, bb, y};
	OK(kc_interp(c, g, args, 0, &err) == KC_OK);
	OK(y[0] == 11 && y[2] == 13 && y[3] == 21 && y[5] == 23);
	compile_ctx_free(c);
	free(j);

	j = one_op("BroadcastTo", 1, DT(f), DT("3"), f, "2,3");
	c = compile_ctx_new();
	OK(kc_parse(c, j, strlen(j), &lim, &g, &err) == KC_OK);
	args[0] = bb;
	args[1] = y;
	OK(kc_interp(c, g, args, 0, &err) == KC_OK);
	OK(y[0] == 1 && y[3] == 1 && y[5] == 3);
	compile_ctx_free(c);
	free(j);

	j = one_op("Reshape", 1, DT(f), DT("2,3"), f, "3,2");
	c = compile_ctx_new();
	OK(kc_parse(c, j, strlen(j), &lim, &g, &err) == KC_OK);
	float x6[6] = {1, 2, 3, 4, 5, 6};
	args[0] = x6;
	args[1] = y;
	OK(kc_interp(c, g, args, 0, &err) == KC_OK);
	OK(memcmp(x6, y, sizeof y) == 0);
	/* the memory bound */
	OK(kc_interp(c, g, args, 16, &err) == KC_TOO_LARGE);
	compile_ctx_free(c);
	free(j);

	/* a constant operand and an output that is a kernel input */
	json =
	    "{\"composite\":true,\"op\":\"t_c\",\"process\":\"cpu\",\"version\":1,"
	    "\"input_desc\":[[{\"data_type\":\"float32\",\"shape\":[2],\"tensor_name\":\"a\"}]],"
	    "\"output_desc\":[{\"data_type\":\"float32\",\"shape\":[2],\"tensor_name\":\"o\"},"
	    "{\"data_type\":\"float32\",\"shape\":[2],\"tensor_name\":\"a\"}],"
	    "\"op_desc\":[{\"attr\":null,\"name\":\"Mul\",\"input_desc\":["
	    "[{\"data_type\":\"float32\",\"shape\":[2],\"tensor_name\":\"a\"}],"
	    "[{\"data_type\":\"float32\",\"shape\":[1],\"tensor_name\":\"k\",\"value\":0.5}]],"
	    "\"output_desc\":[{\"data_type\":\"float32\",\"shape\":[2],\"tensor_name\":\"o\"}]}]}";
	c = compile_ctx_new();
	KcStatus st = kc_parse(c, json, strlen(json), &lim, &g, &err);
	OKF(st == KC_OK, "parse: %s %s", err.where, err.msg);
	if (st == KC_OK) {
		float in2[2] = {4, -2}, o1[2], o2[2];
		void *a3[3] = {in2, o1, o2};
		OK(kc_interp(c, g, a3, 0, &err) == KC_OK);
		OK(o1[0] == 2 && o1[1] == -1 && o2[0] == 4 && o2[1] == -2);
	}
	compile_ctx_free(c);
}

/* ---- the structured ops, by hand ---------------------------------------------- */

/* Parses json (single quotes allowed) and runs kc_interp on args; checks
 * output argument `oi` (dtype odt) against want[0..n). Frees json. */
static void
check_graph(const char *label, char *json, void **args, int oi, const char *odt, int n,
            const double *want)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	for (char *q = json; *q; q++)
		if (*q == '\'')
			*q = '"';
	KcStatus st = kc_parse(c, json, strlen(json), &lim, &g, &err);
	OKF(st == KC_OK, "%s parse: %s %s", label, err.where, err.msg);
	if (st == KC_OK) {
		st = kc_interp(c, g, args, 0, &err);
		OKF(st == KC_OK, "%s interp: %s", label, err.msg);
	}
	for (int e = 0; e < n && st == KC_OK; e++) {
		double got = unpack(odt, args[oi], e), w = want[e];
		bool same = got == w || (isnan(got) && isnan(w)) || fabs(got - w) <= 1e-6 * fabs(w);
		OKF(same, "%s element %d: got %.17g want %.17g", label, e, got, w);
	}
	compile_ctx_free(c);
	free(json);
}

/* One op with attrs on packed inputs; checks its n-element output. */
static void
check_op_attr(const char *label, const char *op, const char *attr, int nin, const char *const *dts,
              const char *const *shp, const double *const *in, const char *odt, const char *oshape,
              int n, const double *want)
{
	void *args[8] = {0};
	for (int i = 0; i < nin; i++) {
		int cnt = 1; /* the element count of shp[i] */
		for (const char *q = shp[i]; *q;) {
			char *end;
			cnt *= (int)strtol(q, &end, 10);
			q = *end ? end + 1 : end;
		}
		args[i] = pack(dts[i], in[i], cnt);
	}
	args[nin] = calloc((size_t)n + 1, 8);
	check_graph(label, one_op_attr(op, attr, nin, dts, shp, odt, oshape), args, nin, odt, n,
	            want);
	for (int i = 0; i <= nin; i++)
		free(args[i]);
}

#define IOTA24                                                                                     \
	N(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23)

static void
reductions(void)
{
	const char *f = "float32", *i32 = "int32";
	/* x[i,j,k] = 12 i + 4 j + k over [2,3,4] */
	check_op_attr("ReduceSum axis 0", "ReduceSum", "[{'name':'axis','value':[0]}]", 1, DT(f),
	              DT("2,3,4"), IN(IOTA24), f, "3,4", 12,
	              N(12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34));
	check_op_attr("ReduceSum axis 1 keep_dims", "ReduceSum",
	              "[{'name':'axis','value':1},{'name':'keep_dims','value':true}]", 1, DT(f),
	              DT("2,3,4"), IN(IOTA24), f, "2,1,4", 8, N(12, 15, 18, 21, 48, 51, 54, 57));
	check_op_attr("ReduceSum axis -1", "ReduceSum", "[{'name':'axis','value':[-1]}]", 1, DT(f),
	              DT("2,3,4"), IN(IOTA24), f, "2,3", 6, N(6, 22, 38, 54, 70, 86));
	check_op_attr("ReduceSum all", "ReduceSum", "[{'name':'axis','value':[]}]", 1, DT(f),
	              DT("2,3,4"), IN(IOTA24), f, "1", 1, N(276));
	check_op_attr("ReduceSum all keep_dims", "ReduceSum", "[{'name':'keep_dims','value':true}]",
	              1, DT(f), DT("2,3,4"), IN(IOTA24), f, "1,1,1", 1, N(276));
	check_op_attr("ReduceSum axes 0,2", "ReduceSum", "[{'name':'axis','value':[2,-3]}]", 1,
	              DT(f), DT("2,3,4"), IN(IOTA24), f, "3", 3, N(60, 92, 124));
	const double *m = N(1, 5, -2, -7, -3, -9);
	check_op_attr("ReduceMax", "ReduceMax", "[{'name':'axis','value':[1]}]", 1, DT(f),
	              DT("2,3"), IN(m), f, "2", 2, N(5, -3));
	check_op_attr("ReduceMin axis 0", "ReduceMin", "[{'name':'axis','value':[0]}]", 1, DT(f),
	              DT("2,3"), IN(m), f, "3", 3, N(-7, -3, -9));
	check_op_attr("ReduceProd", "ReduceProd", "[{'name':'axis','value':[-1]}]", 1, DT(f),
	              DT("2,3"), IN(m), f, "2", 2, N(-10, -189));
	check_op_attr("ReduceMax NaN", "ReduceMax", "null", 1, DT(f), DT("3"), IN(N(1, NAN, 2)), f,
	              "1", 1, N(NAN));
	/* float32 rounding once, after a double accumulation: 2^24 + 1 + 1 */
	check_op_attr("ReduceSum f32 rounding", "ReduceSum", "null", 1, DT(f), DT("3"),
	              IN(N(16777216, 1, 1)), f, "1", 1, N(16777218));
	check_op_attr("ReduceSum int32", "ReduceSum", "[{'name':'axis','value':[0]}]", 1, DT(i32),
	              DT("2,3"), IN(N(1, 2, 3, 4, 5, 6)), i32, "3", 3, N(5, 7, 9));
	check_op_attr("ReduceMax int32", "ReduceMax", "[{'name':'axis','value':[1]}]", 1, DT(i32),
	              DT("2,3"), IN(N(-1, -2, -3, 4, 5, -6)), i32, "2", 2, N(-1, 5));
	check_op_attr("ReduceMin int32", "ReduceMin", "null", 1, DT(i32), DT("2,2"),
	              IN(N(3, -8, 4, 7)), i32, "1", 1, N(-8));
	check_op_attr("ReduceSum int32 wraps", "ReduceSum", "null", 1, DT(i32), DT("2"),
	              IN(N(2147483647, 1)), i32, "1", 1, N(-2147483648.0));
	check_op_attr("ElemAny", "ElemAny", "null", 1, DT(f), DT("4"), IN(N(0, 0, -0.0, 3)), f, "1",
	              1, N(1));
	check_op_attr("ElemAny none", "ElemAny", "null", 1, DT(f), DT("2,2"), IN(N(0, 0, 0, -0.0)),
	              f, "1", 1, N(0));
	check_op_attr("ElemAll", "ElemAll", "null", 1, DT(f), DT("4"), IN(N(1, 2, 0, 3)), f, "1", 1,
	              N(0));
	check_op_attr("ElemAll NaN is non-zero", "ElemAll", "null", 1, DT(f), DT("4"),
	              IN(N(1, NAN, -2, 3)), f, "1", 1, N(1));
	check_op_attr("ElemAny int32 to bool", "ElemAny", "null", 1, DT(i32), DT("3"),
	              IN(N(0, 0, -4)), "bool", "1", 1, N(1));
}

/* Argmax/Argmin, CumSum/CumProd, Pool2D against numpy (values computed
 * with numpy 1.24; Pool2D as op_dsl.py's pool2d_str: avg counts padding
 * (count_include_pad), max never picks padding). */
static void
ops_b(void)
{
	const char *f = "float32", *i32 = "int32", *i64 = "int64";
	const double *m = N(1, 5, -2, -7, -3, -9);
	check_op_attr("Argmax axis 1", "Argmax", "[{'name':'axis','value':1}]", 1, DT(f), DT("2,3"),
	              IN(m), i32, "2", 2, N(1, 1));
	check_op_attr("Argmax axis 0", "Argmax", "[{'name':'axis','value':[0]}]", 1, DT(f),
	              DT("2,3"), IN(m), i32, "3", 3, N(0, 0, 0));
	check_op_attr("Argmin axis 0", "Argmin", "[{'name':'axis','value':-2}]", 1, DT(f),
	              DT("2,3"), IN(m), i32, "3", 3, N(1, 1, 1));
	check_op_attr("Argmin default axis -1, int64", "Argmin", "null", 1, DT(f), DT("2,3"), IN(m),
	              i64, "2", 2, N(2, 2));
	check_op_attr("Argmax first of ties", "Argmax", "null", 1, DT(f), DT("3"), IN(N(3, 1, 3)),
	              i32, "1", 1, N(0));
	check_op_attr("Argmin first of ties int32", "Argmin", "null", 1, DT(i32), DT("3"),
	              IN(N(2, 1, 1)), i32, "1", 1, N(1));
	check_op_attr("Argmax first NaN", "Argmax", "null", 1, DT(f), DT("4"),
	              IN(N(1, NAN, 5, NAN)), i32, "1", 1, N(1));
	check_op_attr("Argmin first NaN", "Argmin", "null", 1, DT(f), DT("4"),
	              IN(N(1, NAN, -5, NAN)), i32, "1", 1, N(1));

	const double *a = N(1, 2, 3, 4, 5, 6);
	check_op_attr("CumSum axis 1", "CumSum", "[{'name':'axis','value':1}]", 1, DT(f), DT("2,3"),
	              IN(a), f, "2,3", 6, N(1, 3, 6, 4, 9, 15));
	check_op_attr("CumSum exclusive", "CumSum",
	              "[{'name':'axis','value':-1},{'name':'exclusive','value':true}]", 1, DT(f),
	              DT("2,3"), IN(a), f, "2,3", 6, N(0, 1, 3, 0, 4, 9));
	check_op_attr("CumSum reverse", "CumSum",
	              "[{'name':'axis','value':1},{'name':'reverse','value':true}]", 1, DT(f),
	              DT("2,3"), IN(a), f, "2,3", 6, N(6, 5, 3, 15, 11, 6));
	check_op_attr("CumSum exclusive reverse", "CumSum",
	              "[{'name':'axis','value':1},{'name':'reverse','value':true},"
	              "{'name':'exclusive','value':true}]",
	              1, DT(f), DT("2,3"), IN(a), f, "2,3", 6, N(5, 3, 0, 11, 6, 0));
	check_op_attr("CumProd axis 0 int32", "CumProd", "[{'name':'axis','value':0}]", 1, DT(i32),
	              DT("2,3"), IN(a), i32, "2,3", 6, N(1, 2, 3, 4, 10, 18));
	check_op_attr("CumSum int32 wraps", "CumSum", "[{'name':'axis','value':0}]", 1, DT(i32),
	              DT("2"), IN(N(2147483647, 1)), i32, "2", 2, N(2147483647, -2147483648.0));
	/* float32: the running sum in double, each element rounded once */
	check_op_attr("CumSum f32 rounding", "CumSum", "[{'name':'axis','value':0}]", 1, DT(f),
	              DT("3"), IN(N(16777216, 1, 1)), f, "3", 3, N(16777216, 16777216, 16777218));

	/* x = arange(16) - 5 as [1,1,4,4] NCHW */
	const double *x = N(-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10);
#define POOL(t, k, s, p, r)                                                                        \
	"[{'name':'pool_type','value':'" t "'},{'name':'kernel_size','value':" k "},"              \
	"{'name':'strides','value':" s "},{'name':'pad','value':" p "},"                           \
	"{'name':'round_mode','value':" r "},{'name':'data_layout','value':'NCHW'}]"
	check_op_attr("Pool2D max 2x2/2", "Pool2D", POOL("max", "[2,2]", "[2,2]", "0", "0"), 1,
	              DT(f), DT("1,1,4,4"), IN(x), f, "1,1,2,2", 4, N(0, 2, 8, 10));
	check_op_attr("Pool2D avg 2x2/2", "Pool2D", POOL("avg", "[2,2]", "2", "[0,0,0,0]", "0"), 1,
	              DT(f), DT("1,1,4,4"), IN(x), f, "1,1,2,2", 4, N(-2.5, -0.5, 5.5, 7.5));
	check_op_attr("Pool2D avg 3x3/2 pad 1 counts the padding", "Pool2D",
	              POOL("avg", "3", "2", "[1,1,1,1]", "false"), 1, DT(f), DT("1,1,4,4"), IN(x),
	              f, "1,1,2,2", 4, N(-10.0 / 9, -6.0 / 9, 21.0 / 9, 5));
	check_op_attr("Pool2D max 3x3/2 pad 1 ignores the padding", "Pool2D",
	              POOL("max", "3", "2", "1", "0"), 1, DT(f), DT("1,1,4,4"), IN(x), f, "1,1,2,2",
	              4, N(0, 2, 8, 10));
	check_op_attr("Pool2D max all-negative window next to padding", "Pool2D",
	              POOL("max", "2", "1", "[1,1,0,0]", "0"), 1, DT(f), DT("1,1,2,2"),
	              IN(N(-4, -3, -2, -1)), f, "1,1,2,2", 4, N(-4, -3, -2, -1));
	const double *y = N(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14);
	check_op_attr("Pool2D avg ceil mode: the overhang does not count", "Pool2D",
	              POOL("avg", "2", "2", "0", "'ceil'"), 1, DT(f), DT("1,1,3,5"), IN(y), f,
	              "1,1,2,3", 6, N(3, 5, 6.5, 10.5, 12.5, 14));
	check_op_attr("Pool2D max ceil mode", "Pool2D", POOL("max", "2", "2", "0", "true"), 1,
	              DT(f), DT("1,1,3,5"), IN(y), f, "1,1,2,3", 6, N(6, 8, 9, 11, 13, 14));
	check_op_attr("Pool2D avg pads (t, l, b, r) = (1, 0, 0, 1)", "Pool2D",
	              POOL("avg", "2", "1", "[1,0,0,1]", "0"), 1, DT(f), DT("1,1,3,5"), IN(y), f,
	              "1,1,3,5", 15,
	              N(0.25, 0.75, 1.25, 1.75, 1, 3, 4, 5, 6, 3.25, 8, 9, 10, 11, 5.75));
#undef POOL
	const double *z = N(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
	check_op_attr("Pool2D global avg NHWC", "Pool2D",
	              "[{'name':'pool_type','value':'avg'},{'name':'global','value':true},"
	              "{'name':'data_layout','value':'NHWC'}]",
	              1, DT(f), DT("1,2,2,3"), IN(z), f, "1,1,1,3", 3, N(4.5, 5.5, 6.5));
	check_op_attr("Pool2D global max NHWC", "Pool2D",
	              "[{'name':'pool_type','value':'max'},{'name':'global','value':true},"
	              "{'name':'data_layout','value':'NHWC'}]",
	              1, DT(f), DT("1,2,2,3"), IN(z), f, "1,1,1,3", 3, N(9, 10, 11));
}

static void
layout_ops(void)
{
	const char *f = "float32", *i32 = "int32";
	/* Transpose [2,3,4] perm [2,0,1]: out[k,i,j] = x[i,j,k] = 12 i + 4 j + k */
	double want[24];
	for (int k = 0, e = 0; k < 4; k++)
		for (int i = 0; i < 2; i++)
			for (int j = 0; j < 3; j++)
				want[e++] = 12 * i + 4 * j + k;
	check_op_attr("Transpose 2,0,1", "Transpose", "[{'name':'perm','value':[2,0,1]}]", 1, DT(f),
	              DT("2,3,4"), IN(IOTA24), f, "4,2,3", 24, want);
	check_op_attr("Transpose 1,0", "Transpose", "[{'name':'perm','value':[1,-2]}]", 1, DT(f),
	              DT("2,3"), IN(N(1, 2, 3, 4, 5, 6)), f, "3,2", 6, N(1, 4, 2, 5, 3, 6));
	check_op_attr("ExpandDims -1", "ExpandDims", "[{'name':'axis','value':-1}]", 1, DT(f),
	              DT("2,3"), IN(N(1, 2, 3, 4, 5, 6)), f, "2,3,1", 6, N(1, 2, 3, 4, 5, 6));
	check_op_attr("ExpandDims 0", "ExpandDims", "[{'name':'axis','value':[0]}]", 1, DT(i32),
	              DT("3"), IN(N(7, 8, 9)), i32, "1,3", 3, N(7, 8, 9));
	check_op_attr("Tile 2,1", "Tile", "[{'name':'multiples','value':[2,1]}]", 1, DT(f),
	              DT("2,3"), IN(N(1, 2, 3, 4, 5, 6)), f, "4,3", 12,
	              N(1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6));
	check_op_attr("Tile rank grows", "Tile", "[{'name':'multiples','value':[2,2]}]", 1, DT(f),
	              DT("3"), IN(N(1, 2, 3)), f, "2,6", 12, N(1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3));
	/* StridedSlice on x[4,5] = 0..19 */
	const double *x20 = N(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	check_op_attr("StridedSlice strides", "StridedSlice",
	              "[{'name':'begin','value':[1,0]},{'name':'end','value':[4,5]},"
	              "{'name':'strides','value':[2,2]}]",
	              1, DT(f), DT("4,5"), IN(x20), f, "2,3", 6, N(5, 7, 9, 15, 17, 19));
	check_op_attr("StridedSlice shrink + begin_mask", "StridedSlice",
	              "[{'name':'begin','value':[2,3]},{'name':'end','value':[3,5]},"
	              "{'name':'strides','value':[1,1]},{'name':'begin_mask','value':2},"
	              "{'name':'shrink_axis_mask','value':1}]",
	              1, DT(f), DT("4,5"), IN(x20), f, "5", 5, N(10, 11, 12, 13, 14));
	check_op_attr("StridedSlice negative begin + end_mask", "StridedSlice",
	              "[{'name':'begin','value':[0,-2]},{'name':'end','value':[2,0]},"
	              "{'name':'strides','value':[1,1]},{'name':'end_mask','value':2}]",
	              1, DT(f), DT("4,5"), IN(x20), f, "2,2", 4, N(3, 4, 8, 9));
	check_op_attr("StridedSlice short begin", "StridedSlice",
	              "[{'name':'begin','value':[3]},{'name':'end','value':[4]}]", 1, DT(i32),
	              DT("4,5"), IN(x20), i32, "1,5", 5, N(15, 16, 17, 18, 19));
	/* OneHot(indices, on, off) */
	check_op_attr("OneHot axis -1", "OneHot", "[{'name':'depth','value':3}]", 3, DT(i32, f, f),
	              DT("3", "1", "1"), IN(N(0, 2, 5), N(1), N(-1)), f, "3,3", 9,
	              N(1, -1, -1, -1, -1, 1, -1, -1, -1));
	check_op_attr("OneHot axis 0, negative index", "OneHot",
	              "[{'name':'depth','value':3},{'name':'axis','value':0}]", 3, DT(i32, f, f),
	              DT("3", "1", "1"), IN(N(0, -1, 1), N(5), N(0)), f, "3,3", 9,
	              N(5, 0, 0, 0, 0, 5, 0, 0, 0));
	check_op_attr("OneHot rank 2 middle", "OneHot",
	              "[{'name':'depth','value':2},{'name':'axis','value':1}]", 3,
	              DT("int64", i32, i32), DT("2,2", "1", "1"), IN(N(1, 0, 0, 3), N(7), N(0)),
	              i32, "2,2,2", 8, N(0, 7, 7, 0, 7, 0, 0, 0));
	/* Gather(params, indices): out-of-range indices clamp */
	check_op_attr("Gather axis 0 clamped", "Gather", "[{'name':'axis','value':0}]", 2,
	              DT(f, i32), DT("3,2", "4"), IN(N(1, 2, 3, 4, 5, 6), N(2, 0, -1, 7)), f, "4,2",
	              8, N(5, 6, 1, 2, 1, 2, 5, 6));
	check_op_attr("Gather axis -1", "Gather", "[{'name':'axis','value':-1}]", 2, DT(f, "int64"),
	              DT("3,2", "2"), IN(N(1, 2, 3, 4, 5, 6), N(1, 0)), f, "3,2", 6,
	              N(2, 1, 4, 3, 6, 5));
	check_op_attr("Gather 2-d indices", "Gather", "[{'name':'axis','value':1}]", 2,
	              DT(i32, i32), DT("2,3", "2,2"), IN(N(1, 2, 3, 4, 5, 6), N(2, 1, 0, 0)), i32,
	              "2,2,2", 8, N(3, 2, 1, 1, 6, 5, 4, 4));
}

#define TD(n, dt, shp) "{'data_type':'" dt "','shape':[" shp "],'tensor_name':'" n "'}"
#define TDF(n, dt, shp, fmt)                                                                       \
	"{'data_type':'" dt "','format':'" fmt "','shape':[" shp "],'tensor_name':'" n "'}"
#define GRAPH(ins, outs, ops)                                                                      \
	"{'composite':true,'op':'t','process':'cpu','version':1,'input_desc':[" ins                \
	"],'output_desc':[" outs "],'op_desc':[" ops "]}"

static void
concat_assign_matmul(void)
{
	float a[6], b[6], y[16], y2[16];
	void *args[5];
	/* Concat [2,1] ++ [2,2] on axis 1 (-1), and [1,2] ++ [2,2] on axis 0 */
	static const char cat1[] =
	    GRAPH("[" TD("a", "float32", "2,1") "],[" TD("b", "float32", "2,2") "]",
	          TD("y", "float32", "2,3"),
	          "{'name':'Concat','attr':[{'name':'axis','value':-1}],'input_desc':[[" TD(
	              "a", "float32", "2,1") "," TD("b", "float32",
	                                            "2,2") "]],'output_desc':[" TD("y", "float32",
	                                                                           "2,3") "]}");
	memcpy(a, (float[]){1, 2}, 8);
	memcpy(b, (float[]){3, 4, 5, 6}, 16);
	args[0] = a, args[1] = b, args[2] = y;
	check_graph("Concat axis -1", strdup(cat1), args, 2, "float32", 6, N(1, 3, 4, 2, 5, 6));
	static const char cat0[] =
	    GRAPH("[" TD("a", "float32", "1,2") "],[" TD("b", "float32", "2,2") "]",
	          TD("y", "float32", "5,2"),
	          "{'name':'Concat','attr':[{'name':'axis','value':0}],'input_desc':[[" TD(
	              "a", "float32",
	              "1,2") "," TD("b", "float32",
	                            "2,2") "," TD("a", "float32",
	                                          "1,2") "," TD("a", "float32",
	                                                        "1,2") "]],'output_desc':"
	                                                               "[" TD("y", "float32",
	                                                                      "5,2") "]}");
	check_graph("Concat axis 0, a piece thrice", strdup(cat0), args, 2, "float32", 10,
	            N(1, 2, 3, 4, 5, 6, 1, 2, 1, 2));

	/* Assign(a, b) yields b and writes it into a; the Add after it reads
	 * the new a: y = 2 b; y2 = old a * 10 (Mul before the Assign) */
	static const char asg[] = GRAPH(
	    "[" TD("a", "float32", "3") "],[" TD("b", "float32", "3") "]",
	    TD("m", "float32", "3") "," TD("o", "float32", "3") "," TD("y", "float32", "3"),
	    "{'name':'Mul','input_desc':[[" TD(
	        "a", "float32",
	        "3") "],[{'data_type':'float32','shape':[1],'tensor_name':'k','value':10}]],'"
	             "output_desc':[" TD(
	                 "m", "float32",
	                 "3") "]},"
	                      "{'name':'Assign','input_desc':[[" TD("a", "float32", "3") "],[" TD(
	                          "b", "float32",
	                          "3") "]],'output_desc':[" TD("o", "float32",
	                                                       "3") "]},"
	                                                            "{'name':'"
	                                                            "Add','"
	                                                            "input_"
	                                                            "desc':[[" TD(
	                                                                "a", "float32",
	                                                                "3") "],[" TD("a",
	                                                                              "float32",
	                                                                              "3") "]],'"
	                                                                                   "outpu"
	                                                                                   "t_"
	                                                                                   "desc'"
	                                                                                   ":"
	                                                                                   "[" TD(
	                                                                                       "y",
	                                                                                       "flo"
	                                                                                       "at3"
	                                                                                       "2",
	                                                                                       "3") "]}");
	memcpy(a, (float[]){1, 2, 3}, 12);
	memcpy(b, (float[]){-4, 5, 0.5f}, 12);
	float o[3], m[3];
	args[0] = a, args[1] = b, args[2] = m, args[3] = o, args[4] = y;
	check_graph("Assign: yields src", strdup(asg), args, 3, "float32", 3, N(-4, 5, 0.5));
	OK(m[0] == 10 && m[1] == 20 && m[2] == 30);  /* before the write */
	OK(y[0] == -8 && y[1] == 10 && y[2] == 1);   /* after it */
	OK(a[0] == -4 && a[1] == 5 && a[2] == 0.5f); /* the input, written */

	/* InplaceAssign(a, b, c) yields c; a second write to a wins */
	static const char ipa[] = GRAPH(
	    "[" TD("a", "float32", "2") "],[" TD("b", "float32", "2") "],[" TD("c", "float32",
	                                                                       "2") "]",
	    TD("o", "float32", "2") "," TD("y", "float32", "2"),
	    "{'name':'InplaceAssign','input_desc':[[" TD("a", "float32", "2") "],[" TD("b", "float32", "2") "],[" TD(
	        "c", "float32",
	        "2") "]],'output_desc':[" TD("o", "float32",
	                                     "2") "]},"
	                                          "{'name':'"
	                                          "Sub','"
	                                          "input_"
	                                          "desc':[[" TD("a", "float32", "2") "],[" TD("c", "float32", "2") "]],'output_desc':[" TD(
	                                              "y", "float32",
	                                              "2") "]},"
	                                                   "{'name':'Assign','input_"
	                                                   "desc':[[" TD(
	                                                       "a", "float32",
	                                                       "2") "],[" TD("y", "float32",
	                                                                     "2") "]],'output_desc'"
	                                                                          ":"
	                                                                          "[" TD("z",
	                                                                                 "float32",
	                                                                                 "2") "]}");
	float c3[2] = {100, 200}, o2[2];
	memcpy(a, (float[]){1, 2}, 8);
	memcpy(b, (float[]){3, 4}, 8);
	args[0] = a, args[1] = b, args[2] = c3, args[3] = o2, args[4] = y;
	check_graph("InplaceAssign: yields depend", strdup(ipa), args, 3, "float32", 2,
	            N(100, 200));
	OK(y[0] == -97 && y[1] == -196); /* new a (= b) - c */
	OK(a[0] == -97 && a[1] == -196); /* the last write */

	/* MatMul [2,3] x [3,2]: [[58,64],[139,154]], with each transpose */
	static const char *const mms[] = {
	    GRAPH("[" TD("a", "float32", "2,3") "],[" TD("b", "float32", "3,2") "]",
	          TD("y", "float32", "2,2"),
	          "{'name':'MatMul','attr':[{'name':'transpose_a','value':false},{'name':'"
	          "transpose_b','value':false}],'input_desc':[[" TD("a", "float32", "2,3") "],[" TD(
	              "b", "float32", "3,2") "]],'output_desc':[" TD("y", "float32", "2,2") "]}"),
	    GRAPH(
	        "[" TD("a", "float32", "3,2") "],[" TD("b", "float32", "3,2") "]",
	        TD("y", "float32", "2,2"),
	        "{'name':'MatMul','attr':[{'name':'transpose_a','value':true}],'input_desc':[[" TD(
	            "a", "float32", "3,2") "],[" TD("b", "float32",
	                                            "3,2") "]],'output_desc':[" TD("y", "float32",
	                                                                           "2,2") "]}"),
	    GRAPH(
	        "[" TD("a", "float32", "2,3") "],[" TD("b", "float32", "2,3") "]",
	        TD("y", "float32", "2,2"),
	        "{'name':'MatMul','attr':[{'name':'transpose_b','value':true}],'input_desc':[[" TD(
	            "a", "float32", "2,3") "],[" TD("b", "float32",
	                                            "2,3") "]],'output_desc':[" TD("y", "float32",
	                                                                           "2,2") "]}"),
	    GRAPH("[" TD("a", "float32", "3,2") "],[" TD("b", "float32", "2,3") "]",
	          TD("y", "float32", "2,2"),
	          "{'name':'MatMul','attr':[{'name':'transpose_a','value':true},{'name':'transpose_"
	          "b','value':true}],'input_desc':[[" TD("a", "float32", "3,2") "],[" TD(
	              "b", "float32", "2,3") "]],'output_desc':[" TD("y", "float32", "2,2") "]}"),
	};
	static const float A[6] = {1, 2, 3, 4, 5, 6}, At[6] = {1, 4, 2, 5, 3, 6};
	static const float B[6] = {7, 8, 9, 10, 11, 12}, Bt[6] = {7, 9, 11, 8, 10, 12};
	for (int t = 0; t < 4; t++) {
		char label[32];
		memcpy(a, t & 1 ? At : A, sizeof A);
		memcpy(b, t & 2 ? Bt : B, sizeof B);
		args[0] = a, args[1] = b, args[2] = y;
		snprintf(label, sizeof label, "MatMul trans_a %d trans_b %d", t & 1, t >> 1);
		check_graph(label, strdup(mms[t]), args, 2, "float32", 4, N(58, 64, 139, 154));
	}
	/* BatchMatMul: a [2,1,2] x b [2,1] (broadcast over the batch), and
	 * b [3,1,2,1] against a [2,1,2]: out [3,2,1,1] */
	static const char bmm[] = GRAPH(
	    "[" TD("a", "float32", "2,1,2") "],[" TD("b", "float32", "3,1,2,1") "]",
	    TD("y", "float32", "3,2,1,1"),
	    "{'name':'BatchMatMul','input_desc':[[" TD("a", "float32", "2,1,2") "],[" TD(
	        "b", "float32", "3,1,2,1") "]],'output_desc':[" TD("y", "float32", "3,2,1,1") "]}");
	memcpy(a, (float[]){1, 2, 3, 4}, 16);
	memcpy(b, (float[]){5, 6, 1, 0, 0, 1}, 24);
	args[0] = a, args[1] = b, args[2] = y;
	check_graph("BatchMatMul broadcast", strdup(bmm), args, 2, "float32", 6,
	            N(17, 39, 1, 3, 2, 4));
	/* int32: exact, wrapping */
	static const char imm[] = GRAPH(
	    "[" TD("a", "int32", "1,2") "],[" TD("b", "int32", "2,1") "]", TD("y", "int32", "1,1"),
	    "{'name':'MatMul','input_desc':[[" TD("a", "int32", "1,2") "],[" TD(
	        "b", "int32", "2,1") "]],'output_desc':[" TD("y", "int32", "1,1") "]}");
	int32_t ia[2] = {65536, -3}, ib[2] = {32768, 5};
	args[0] = ia, args[1] = ib, args[2] = y2;
	check_graph("MatMul int32 wraps", strdup(imm), args, 2, "int32", 1, N(2147483633.0));
}

/* Tie masks: a near-equal float comparison marks its result and what
 * depends on it. */
static void
ties(void)
{
	const char *f = "float32";
	char *j = one_op("Greater", 2, DT(f, f), DT("4", "4"), "bool", "4");
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	float a[4] = {1, 1, 5, -3}, b[4] = {1.0000001f, 2, 5, -3.5f};
	uint8_t y[4], t[4] = {9, 9, 9, 9};
	void *args[3] = {a, b, y};
	uint8_t *tp[1] = {t};
	OK(kc_parse(c, j, strlen(j), &lim, &g, &err) == KC_OK);
	OK(kc_interp_ties(c, g, args, 0, tp, &err) == KC_OK);
	OK(t[0] == 1 && t[1] == 0 && t[2] == 1 && t[3] == 0);
	OK(y[0] == 0 && y[1] == 0 && y[2] == 0 && y[3] == 1);
	compile_ctx_free(c);
	free(j);
	/* integer comparisons are exact: no ties */
	j = one_op("Greater", 2, DT("int32", "int32"), DT("2", "2"), "bool", "2");
	c = compile_ctx_new();
	int32_t ia[2] = {1, 2}, ib[2] = {1, 1};
	args[0] = ia;
	args[1] = ib;
	memset(t, 9, sizeof t);
	OK(kc_parse(c, j, strlen(j), &lim, &g, &err) == KC_OK);
	OK(kc_interp_ties(c, g, args, 0, tp, &err) == KC_OK);
	OK(t[0] == 0 && t[1] == 0 && y[0] == 0 && y[1] == 1);
	compile_ctx_free(c);
	free(j);
}

/* ---- kernels against the interpreter ------------------------------------------ */

static KcTarget host;
static int n_diff, n_diff_ok;

/* Argument i of a kernel run (got) against the interpreter's (want):
 * floats within tol + tol |want|, the rest exactly; elements with tie[e]
 * set (tie may be NULL) are excused. False, with a failed check, if not. */
static bool
same_arg(const char *label, int i, const char *dtype, int64_t numel, const void *got,
         const void *want, const uint8_t *tie, double tol)
{
	bool fl = strstr(dtype, "float") != NULL;
	int64_t bad = 0, first = -1;
	for (int64_t e = 0; e < numel; e++) {
		double x = t_as_f64(dtype, got, e), y = t_as_f64(dtype, want, e);
		bool same =
		    x == y || (isnan(x) && isnan(y)) || (fl && fabs(x - y) <= tol + tol * fabs(y));
		if (!same && !(tie && tie[e]) && bad++ == 0)
			first = e;
	}
	if (bad)
		OKF(0, "%s: argument %d: %lld mismatches, first [%lld] got %.9g want %.9g", label,
		    i, (long long)bad, (long long)first, t_as_f64(dtype, got, first),
		    t_as_f64(dtype, want, first));
	return bad == 0;
}

/* Compiles json for the host, runs it serially on random inputs and
 * compares with kc_interp. Returns false if it does not compile (skipped). */
static bool
differential(const char *label, const char *json, size_t len, uint64_t seed)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	KcArtifact art = {0};
	void *dl = NULL;
	bool ran = false;

	if (kc_parse(c, json, len, &lim, &g, &err) != KC_OK)
		goto done;
	KcSchedule *s = kc_schedule_default(c, g, &host);
	KcCompileOptions o = {0};
	if (kc_compile(c, g, &host, s, &o, &art, &err) != KC_OK)
		goto done;
	char why[300] = "";
	KcsKernelFn fn =
	    t_kernel_load(art.object, art.object_len, art.symbol, &dl, why, sizeof why);
	OKF(fn != NULL, "%s: %s", label, why);
	if (!fn)
		goto done;
	int n = kc_graph_nargs(g), nin = 0;
	void *ka[64] = {0}, *ra[64] = {0};
	KcArgInfo ai[64];
	if (n > 64)
		goto done;
	for (int i = 0; i < n; i++) {
		kc_graph_arg(g, i, &ai[i]);
		int64_t numel = 1;
		for (int d = 0; d < ai[i].rank; d++)
			numel *= ai[i].shape[d];
		size_t bytes = (size_t)numel * t_dt_bytes(ai[i].dtype);
		ka[i] = calloc(1, bytes + 8);
		ra[i] = calloc(1, bytes + 8);
		if (!ai[i].is_output)
			nin++;
	}
	kc_interp_random_inputs(c, g, seed, ka);
	/* separate inputs: Assign writes them in place, in both */
	for (int i = 0; i < nin; i++) {
		int64_t numel = 1;
		for (int d = 0; d < ai[i].rank; d++)
			numel *= ai[i].shape[d];
		memcpy(ra[i], ka[i], (size_t)numel * t_dt_bytes(ai[i].dtype));
	}
	ran = true;
	n_diff++;
	uint8_t *tie[64] = {0};
	for (int i = nin; i < n; i++) {
		int64_t numel = 1;
		for (int d = 0; d < ai[i].rank; d++)
			numel *= ai[i].shape[d];
		tie[i - nin] = calloc((size_t)numel + 1, 1);
	}
	int32_t krc = fn(NULL, ka, NULL);
	KcStatus ist = kc_interp_ties(c, g, ra, (size_t)1 << 32, tie, &err);
	bool all = krc == 0 && ist == KC_OK;
	OKF(krc == 0 && ist == KC_OK, "%s: kernel %d, interp %s", label, krc, err.msg);
	/* the outputs, then the inputs (written in place by Assign) */
	for (int i = 0; i < n && all; i++) {
		int64_t numel = 1;
		for (int d = 0; d < ai[i].rank; d++)
			numel *= ai[i].shape[d];
		bool half =
		    i >= nin ? kc_interp_half_upstream(c, g, i - nin)
		             : !strcmp(ai[i].dtype, "float16") || !strcmp(ai[i].dtype, "bfloat16");
		if (!same_arg(label, i, ai[i].dtype, numel, ka[i], ra[i],
		              i >= nin ? tie[i - nin] : NULL, half ? 1e-2 : 1e-4))
			all = false;
	}
	if (all)
		n_diff_ok++;
	for (int i = 0; i < n; i++) {
		free(ra[i]);
		free(ka[i]);
	}
	for (int i = 0; i < n - nin; i++)
		free(tie[i]);
done:
	if (dl)
		dlclose(dl);
	kc_artifact_free(&art);
	compile_ctx_free(c);
	return ran;
}

/* Graphs with the structured ops (single quotes), compiled and compared. */
#define F32(n, shp) TD(n, "float32", shp)
#define OP1(name, attr, in1, out)                                                                  \
	"{'name':'" name "','attr':" attr ",'input_desc':[[" in1 "]],'output_desc':[" out "]}"
#define OP2(name, attr, in1, in2, out)                                                             \
	"{'name':'" name "','attr':" attr ",'input_desc':[[" in1 "],[" in2                         \
	"]],'output_desc':[" out "]}"
#define KEEP1 "[{'name':'axis','value':[-1]},{'name':'keep_dims','value':true}]"
#define CONST(n, v) "{'data_type':'float32','shape':[1],'tensor_name':'" n "','value':" v "}"

static const char *const struct_graphs[] = {
    /* softmax over the last axis */
    GRAPH("[" F32("x", "4,33") "]", F32("y", "4,33"),
          OP1("ReduceMax", KEEP1, F32("x", "4,33"), F32("m", "4,1")) "," OP2(
              "Sub", "null", F32("x", "4,33"), F32("m", "4,1"),
              F32("s", "4,33")) "," OP1("Exp", "null", F32("s", "4,33"),
                                        F32("e",
                                            "4,33")) "," OP1("ReduceSum", KEEP1, F32("e", "4,33"),
                                                             F32("z",
                                                                 "4,1")) "," OP2("RealDiv", "null",
                                                                                 F32("e", "4,33"),
                                                                                 F32("z", "4,1"),
                                                                                 F32("y", "4,33"))),
    /* layernorm over the last axis, with gamma and beta */
    GRAPH(
        "[" F32("x", "6,20") "],[" F32("g", "20") "],[" F32("b", "20") "]",
        F32("y", "6,20") "," F32("mean", "6,1"),
        OP1("ReduceSum", KEEP1, F32("x", "6,20"), F32("s", "6,1")) "," OP2(
            "Mul", "null", F32("s", "6,1"), CONST("k", "0.05"),
            F32("mean",
                "6,1")) "," OP2("Sub", "null", F32("x", "6,20"), F32("mean", "6,1"),
                                F32("d", "6,20")) "," OP2("Mul", "null", F32("d", "6,20"),
                                                          F32("d", "6,20"),
                                                          F32("d2",
                                                              "6,20")) "," OP1("ReduceSum", KEEP1,
                                                                               F32("d2", "6,20"),
                                                                               F32("v", "6,1")) "," OP2("Mul",
                                                                                                        "null",
                                                                                                        F32("v", "6,1"), CONST("k2", "0.05"), F32("var", "6,1")) "," OP2("Add", "null", F32("var", "6,1"), CONST("eps", "1e-5"), F32("ve", "6,1")) "," OP1("Rsqrt",
                                                                                                                                                                                                                                                           "null",
                                                                                                                                                                                                                                                           F32("ve",
                                                                                                                                                                                                                                                               "6,1"),
                                                                                                                                                                                                                                                           F32("r",
                                                                                                                                                                                                                                                               "6,1")) "," OP2("Mul", "null", F32("d", "6,20"), F32("r", "6,1"), F32("n", "6,20")) "," OP2("Mul", "null", F32("n", "6,20"), F32("g", "20"), F32("ng", "6,20")) "," OP2("Add",
                                                                                                                                                                                                                                                                                                                                                                                                                                       "null",
                                                                                                                                                                                                                                                                                                                                                                                                                                       F32("ng",
                                                                                                                                                                                                                                                                                                                                                                                                                                           "6,20"),
                                                                                                                                                                                                                                                                                                                                                                                                                                       F32("b",
                                                                                                                                                                                                                                                                                                                                                                                                                                           "20"),
                                                                                                                                                                                                                                                                                                                                                                                                                                       F32("y",
                                                                                                                                                                                                                                                                                                                                                                                                                                           "6,20"))),
    /* matmul (b transposed) + bias */
    GRAPH("[" F32("a", "5,7") "],[" F32("w", "9,7") "],[" F32("bias", "9") "]", F32("y", "5,9"),
          OP2("MatMul", "[{'name':'transpose_b','value':true}]", F32("a", "5,7"), F32("w", "9,7"),
              F32("mm", "5,9")) "," OP2("Add", "null", F32("mm", "5,9"), F32("bias", "9"),
                                        F32("y", "5,9"))),
    /* batched matmul, a transposed, b broadcast over the batch */
    GRAPH("[" F32("a", "3,4,2") "],[" F32("b", "4,5") "]", F32("y", "3,2,5"),
          OP2("BatchMatMul", "[{'name':'transpose_a','value':true}]", F32("a", "3,4,2"),
              F32("b", "4,5"), F32("y", "3,2,5"))),
    /* Transpose, Tile, StridedSlice, Concat, ExpandDims, ReduceMin on axis 0 */
    GRAPH(
        "[" F32("x", "3,4") "]", F32("c", "8,3") "," F32("mn", "1,3") "," TD("any", "bool", "1"),
        OP1("Transpose", "[{'name':'perm','value':[1,0]}]", F32("x", "3,4"), F32("t", "4,3")) "," OP1(
            "Tile", "[{'name':'multiples','value':[2,1]}]", F32("t", "4,3"),
            F32("tt",
                "8,3")) "," OP1("StridedSlice",
                                "[{'name':'begin','value':[1,0]},{'name':'end','value':[8,3]},{'"
                                "name':'strides','value':[2,1]}]",
                                F32("tt", "8,3"),
                                F32("ss",
                                    "4,3")) ","
                                            "{'name':'Concat','attr':[{'name':'axis','value':0}],'"
                                            "input_desc':[[" F32("ss", "4,3") "," F32("t", "4,3") "]],'output_desc':[" F32(
                                                "c",
                                                "8,3") "]}," OP1("ReduceMin",
                                                                 "[{'name':'axis','value':[0]}]",
                                                                 F32("c", "8,3"),
                                                                 F32("r",
                                                                     "3")) "," OP1("ExpandDims",
                                                                                   "[{'name':'axis'"
                                                                                   ",'value':0}]",
                                                                                   F32("r", "3"),
                                                                                   F32("mn",
                                                                                       "1,3")) "," OP1("ElemAny",
                                                                                                       "null",
                                                                                                       F32("x",
                                                                                                           "3,4"),
                                                                                                       TD("any",
                                                                                                          "bool",
                                                                                                          "1"))),
    /* Gather with random valid indices, OneHot, and an Assign chain */
    GRAPH(
        "[" F32("p", "6,3") "],[" TD("ix", "int32", "5") "],[" F32("g", "6,3") "]",
        F32("ga", "5,3") "," F32("oh", "5,6") "," F32("o", "6,3") "," F32("q", "6,3"),
        OP2("Gather", "[{'name':'axis','value':0}]", F32("p", "6,3"), TD("ix", "int32", "5"),
            F32("ga",
                "5,3")) ","
                        "{'name':'OneHot','attr':[{'name':'depth','value':6}],'input_desc':["
                        "[" TD("ix", "int32", "5") "],[" CONST("on", "1.5") "],[" CONST(
                            "off",
                            "-0."
                            "5") "]],'output_desc':[" F32("oh",
                                                          "5,6") "]}," OP2("Sub", "null",
                                                                           F32("p", "6,3"),
                                                                           F32("g", "6,3"),
                                                                           F32("s",
                                                                               "6,3")) "," OP2("Ass"
                                                                                               "ig"
                                                                                               "n",
                                                                                               "nul"
                                                                                               "l",
                                                                                               F32("p",
                                                                                                   "6,3"),
                                                                                               F32("s",
                                                                                                   "6,3"),
                                                                                               F32("o",
                                                                                                   "6,3")) "," OP2("Mul",
                                                                                                                   "null",
                                                                                                                   F32("p",
                                                                                                                       "6,"
                                                                                                                       "3"),
                                                                                                                   CONST(
                                                                                                                       "tw"
                                                                                                                       "o",
                                                                                                                       "2"),
                                                                                                                   F32("q",
                                                                                                                       "6,"
                                                                                                                       "3"))),
    /* Conv2D NHWC, stride 2, asymmetric pads */
    GRAPH("[" F32("x", "2,7,6,3") "],[" F32("w", "4,3,3,3") "]", F32("y", "2,4,3,4"),
          OP2("Conv2D",
              "[{'name':'stride','value':[1,1,2,2]},{'name':'pad_list','value':[1,1,0,1]},"
              "{'name':'dilation','value':[1,1,1,1]},{'name':'group','value':1},"
              "{'name':'format','value':'NHWC'}]",
              TDF("x", "float32", "2,7,6,3", "NHWC"), TDF("w", "float32", "4,3,3,3", "NHWC"),
              TDF("y", "float32", "2,4,3,4", "NHWC"))),
    /* Conv2D NCHW, 2 groups, dilation 2 */
    GRAPH("[" F32("x", "1,4,7,7") "],[" F32("w", "6,2,2,2") "]", F32("y", "1,6,5,5"),
          OP2("Conv2D",
              "[{'name':'stride','value':[1,1,1,1]},{'name':'pad_list','value':[0,0,0,0]},"
              "{'name':'dilation','value':[1,1,2,2]},{'name':'group','value':2},"
              "{'name':'groups','value':2},{'name':'format','value':'NCHW'}]",
              TDF("x", "float32", "1,4,7,7", "NCHW"), TDF("w", "float32", "6,2,2,2", "NCHW"),
              TDF("y", "float32", "1,6,5,5", "NCHW"))),
    /* Argmax over axis 0 of a computed value (materialised once), and
     * Argmin of the last axis: both outputs */
    GRAPH("[" F32("x", "37,70") "]", TD("a", "int32", "70") "," TD("b", "int64", "37"),
          OP1("Exp", "null", F32("x", "37,70"), F32("e", "37,70")) "," OP1(
              "Argmax", "[{'name':'axis','value':0}]", F32("e", "37,70"),
              TD("a", "int32", "70")) "," OP1("Argmin", "[{'name':'axis','value':-1}]",
                                              F32("x", "37,70"), TD("b", "int64", "37"))),
    /* CumSum over an outer axis, reversed; CumProd exclusive on the last */
    GRAPH("[" F32("x", "9,33,5") "]", F32("c", "9,33,5") "," F32("p", "9,33,5"),
          OP1("CumSum", "[{'name':'axis','value':1},{'name':'reverse','value':true}]",
              F32("x", "9,33,5"), F32("c", "9,33,5")) "," OP1("CumProd",
                                                              "[{'name':'axis','value':2},"
                                                              "{'name':'exclusive','value':true}]",
                                                              F32("x", "9,33,5"),
                                                              F32("p", "9,33,5"))),
    /* Pool2D avg NHWC 3x3/2 with pads, ceil mode; max NCHW 2x2/1 */
    GRAPH("[" F32("x", "2,9,10,16") "]", F32("a", "2,5,5,16") "," F32("m", "2,9,9,15"),
          OP1("Pool2D",
              "[{'name':'pool_type','value':'avg'},{'name':'data_layout','value':'NHWC'},"
              "{'name':'kernel_size','value':[3,3]},{'name':'strides','value':[2,2]},"
              "{'name':'pad','value':[1,1,1,0]},{'name':'round_mode','value':1}]",
              F32("x", "2,9,10,16"),
              F32("a", "2,5,5,16")) "," OP1("Pool2D",
                                            "[{'name':'pool_type','value':'max'},"
                                            "{'name':'data_layout','value':'NCHW'},"
                                            "{'name':'kernel_size','value':2},"
                                            "{'name':'strides','value':1}]",
                                            F32("x", "2,9,10,16"), F32("m", "2,9,9,15"))),
};

static void
kernels(void)
{
	/* chains over several dtypes, broadcasting, constants and casts */
	static const char *const graphs[] = {
	    "{\"composite\":true,\"op\":\"d1\",\"process\":\"cpu\",\"version\":1,"
	    "\"input_desc\":[[{\"data_type\":\"float32\",\"shape\":[7,33],\"tensor_name\":\"a\"}],"
	    "[{\"data_type\":\"float32\",\"shape\":[33],\"tensor_name\":\"b\"}]],"
	    "\"output_desc\":[{\"data_type\":\"float16\",\"shape\":[7,33],\"tensor_name\":\"o\"},"
	    "{\"data_type\":\"bool\",\"shape\":[7,33],\"tensor_name\":\"g\"}],"
	    "\"op_desc\":["
	    "{\"name\":\"Mul\",\"input_desc\":[[{\"data_type\":\"float32\",\"shape\":[7,33],"
	    "\"tensor_name\":\"a\"}],"
	    "[{\"data_type\":\"float32\",\"shape\":[33],\"tensor_name\":\"b\"}]],"
	    "\"output_desc\":[{\"data_type\":\"float32\",\"shape\":[7,33],\"tensor_name\":\"m\"}]},"
	    "{\"name\":\"Tanh\",\"input_desc\":[[{\"data_type\":\"float32\",\"shape\":[7,33],"
	    "\"tensor_name\":\"m\"}]],"
	    "\"output_desc\":[{\"data_type\":\"float32\",\"shape\":[7,33],\"tensor_name\":\"t\"}]},"
	    "{\"name\":\"Cast\",\"input_desc\":[[{\"data_type\":\"float32\",\"shape\":[7,33],"
	    "\"tensor_name\":\"t\"}]],"
	    "\"output_desc\":[{\"data_type\":\"float16\",\"shape\":[7,33],\"tensor_name\":\"o\"}]},"
	    "{\"name\":\"Greater\",\"input_desc\":[[{\"data_type\":\"float32\",\"shape\":[7,33],"
	    "\"tensor_name\":\"a\"}],"
	    "[{\"data_type\":\"float32\",\"shape\":[1],\"tensor_name\":\"z\",\"value\":0.0}]],"
	    "\"output_desc\":[{\"data_type\":\"bool\",\"shape\":[7,33],\"tensor_name\":\"g\"}]}]}",
	    "{\"composite\":true,\"op\":\"d2\",\"process\":\"cpu\",\"version\":1,"
	    "\"input_desc\":[[{\"data_type\":\"int32\",\"shape\":[5,1],\"tensor_name\":\"a\"}],"
	    "[{\"data_type\":\"int32\",\"shape\":[1,9],\"tensor_name\":\"b\"}]],"
	    "\"output_desc\":[{\"data_type\":\"int32\",\"shape\":[5,9],\"tensor_name\":\"q\"},"
	    "{\"data_type\":\"float32\",\"shape\":[5,9],\"tensor_name\":\"f\"}],"
	    "\"op_desc\":["
	    "{\"name\":\"Div\",\"input_desc\":[[{\"data_type\":\"int32\",\"shape\":[5,1],\"tensor_"
	    "name\":\"a\"}],"
	    "[{\"data_type\":\"int32\",\"shape\":[1,9],\"tensor_name\":\"b\"}]],"
	    "\"output_desc\":[{\"data_type\":\"int32\",\"shape\":[5,9],\"tensor_name\":\"q\"}]},"
	    "{\"name\":\"Cast\",\"input_desc\":[[{\"data_type\":\"int32\",\"shape\":[5,9],\"tensor_"
	    "name\":\"q\"}]],"
	    "\"output_desc\":[{\"data_type\":\"float32\",\"shape\":[5,9],\"tensor_name\":\"c\"}]},"
	    "{\"name\":\"Sqrt\",\"input_desc\":[[{\"data_type\":\"float32\",\"shape\":[5,9],"
	    "\"tensor_name\":\"c\"}]],"
	    "\"output_desc\":[{\"data_type\":\"float32\",\"shape\":[5,9],\"tensor_name\":\"f\"}]}]"
	    "}",
	};
	KcErr err = {0};
	OK(kc_target_host(&host, &err) == KC_OK);
	for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++) {
		char label[32];
		snprintf(label, sizeof label, "graph %zu", i);
		OKF(differential(label, graphs[i], strlen(graphs[i]), 42 + i), "%s compiles",
		    label);
	}
	static const char *const names[] = {
	    "softmax",        "layernorm",          "matmul+bias",
	    "batchmatmul",    "layout mix",         "gather/onehot/assign",
	    "conv2d nhwc",    "conv2d nchw groups", "argmax/argmin",
	    "cumsum/cumprod", "pool2d avg/max"};
	for (size_t i = 0; i < sizeof struct_graphs / sizeof struct_graphs[0]; i++) {
		char *j = strdup(struct_graphs[i]);
		for (char *q = j; *q; q++)
			if (*q == '\'')
				*q = '"';
		OKF(differential(names[i], j, strlen(j), 99 + i), "%s compiles", names[i]);
		free(j);
	}
}

/* ---- Sin ... Atan2, AddN, bool reductions, slices ------------ */

/* The interpreter's new elementwise ops against libm (numpy's values). */
static void
trig_values(void)
{
	const char *f = "float32", *d = "float64";
	check_op("Sin", 1, DT(d), d, 4, IN(N(0, 1, -2.5, 1e-20)), N(0, sin(1), sin(-2.5), 1e-20));
	check_op("Cos", 1, DT(d), d, 3, IN(N(0, 1, INFINITY)), N(1, cos(1), NAN));
	check_op("Asin", 1, DT(d), d, 4, IN(N(0.5, -1, 1.5, -0.0)),
	         N(asin(0.5), -M_PI_2, NAN, -0.0));
	check_op("ASin", 1, DT(d), d, 1, IN(N(0.25)), N(asin(0.25)));
	check_op("ACos", 1, DT(d), d, 3, IN(N(0.5, -1, 2)), N(acos(0.5), M_PI, NAN));
	check_op("Atan", 1, DT(d), d, 3, IN(N(1, -INFINITY, 1e300)), N(M_PI_4, -M_PI_2, M_PI_2));
	check_op("Asinh", 1, DT(d), d, 3, IN(N(1, -2, 1e-300)), N(asinh(1), asinh(-2), 1e-300));
	check_op("Acosh", 1, DT(d), d, 3, IN(N(1, 2, 0.5)), N(0, acosh(2), NAN));
	/* accurate near 0, where exp(x) - 1 would cancel */
	check_op("Expm1", 1, DT(d), d, 3, IN(N(1e-10, -1e-300, 1)),
	         N(1.00000000005e-10, -1e-300, M_E - 1));
	check_op("Atan2", 2, DT(d, d), d, 6,
	         IN(N(1, 1, -0.0, 0, INFINITY, NAN), N(1, -1, -1, -0.0, 1, 1)),
	         N(M_PI_4, 3 * M_PI_4, -M_PI, M_PI, M_PI_2, NAN));
	/* float32 rounds the double result once */
	check_op("Sin", 1, DT(f), f, 1, IN(N(3)), N((float)sin(3)));
	check_op("Expm1", 1, DT(f), f, 1, IN(N(1e-6)), N((float)expm1((float)1e-6)));
}

/* Compiles json for the host and runs it serially on args. */
static bool
run_kernel(const char *label, const char *json, void **args)
{
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	KcArtifact art = {0};
	void *dl = NULL;
	bool ok = false;
	KcStatus st = kc_parse(c, json, strlen(json), &lim, &g, &err);
	OKF(st == KC_OK, "%s parse: %s %s", label, err.where, err.msg);
	if (st != KC_OK)
		goto done;
	KcSchedule *s = kc_schedule_default(c, g, &host);
	KcCompileOptions o = {0};
	st = kc_compile(c, g, &host, s, &o, &art, &err);
	OKF(st == KC_OK, "%s compile: %s %s", label, err.where, err.msg);
	if (st != KC_OK)
		goto done;
	char why[300] = "";
	KcsKernelFn fn =
	    t_kernel_load(art.object, art.object_len, art.symbol, &dl, why, sizeof why);
	OKF(fn != NULL, "%s: %s", label, why);
	ok = fn && fn(NULL, args, NULL) == 0;
done:
	if (dl)
		dlclose(dl);
	kc_artifact_free(&art);
	compile_ctx_free(c);
	return ok;
}

/* The kernel of op on n inputs spread over [lo, hi] plus special values, in
 * dtype dt, against the interpreter (libm in double, rounded once): every
 * element within rtol relative (NaN matches NaN). */
static void
accuracy(const char *op, const char *dt, double lo, double hi, double rtol)
{
	enum { NGRID = 1025 };
	static const double special[] = {0,
	                                 -0.0,
	                                 1e-30,
	                                 -1e-30,
	                                 1e-8,
	                                 -1e-8,
	                                 0.5,
	                                 -0.5,
	                                 1,
	                                 -1,
	                                 2,
	                                 -2,
	                                 3.14159265358979,
	                                 100,
	                                 -1000,
	                                 1e4,
	                                 NAN,
	                                 INFINITY,
	                                 -INFINITY,
	                                 1.5707963267948966,
	                                 0.99999994,
	                                 -0.99999994,
	                                 1.0000001};
	int ns = (int)(sizeof special / sizeof special[0]), n = NGRID + ns;
	double *x = malloc(sizeof(double) * (size_t)n);
	for (int i = 0; i < NGRID; i++)
		x[i] = lo + (hi - lo) * i / (NGRID - 1);
	memcpy(x + NGRID, special, sizeof special);
	char shape[16], label[64];
	snprintf(shape, sizeof shape, "%d", n);
	snprintf(label, sizeof label, "%s %s accuracy", op, dt);
	bool half = !strcmp(dt, "float16");
	if (half) { /* float16 bits of the values, through the interpreter's Cast */
		char *cj = one_op("Cast", 1, DT("float64"), DT(shape), "float16", shape);
		void *cv[2] = {pack("float64", x, n), calloc((size_t)n + 1, 8)};
		CompileCtx *c = compile_ctx_new();
		KcGraph *g;
		KcLimits lim = {0};
		KcErr err = {0};
		if (kc_parse(c, cj, strlen(cj), &lim, &g, &err) == KC_OK &&
		    kc_interp(c, g, cv, 0, &err) == KC_OK)
			for (int i = 0; i < n; i++)
				x[i] = ((uint16_t *)cv[1])[i];
		compile_ctx_free(c);
		free(cj);
		free(cv[0]);
		free(cv[1]);
	}
	char *json = one_op(op, 1, DT(dt), DT(shape), dt, shape);
	void *ka[2] = {pack(dt, x, n), calloc((size_t)n + 1, 8)};
	void *ra[2] = {pack(dt, x, n), calloc((size_t)n + 1, 8)};
	CompileCtx *c = compile_ctx_new();
	KcGraph *g = NULL;
	KcLimits lim = {0};
	KcErr err = {0};
	bool ok = kc_parse(c, json, strlen(json), &lim, &g, &err) == KC_OK &&
	          kc_interp(c, g, ra, 0, &err) == KC_OK;
	OKF(ok, "%s: interp %s", label, err.msg);
	ok = ok && run_kernel(label, json, ka);
	OKF(ok, "%s: kernel runs", label);
	int bad = 0;
	for (int i = 0; i < n && ok; i++) {
		double k = t_as_f64(dt, ka[1], i), r = t_as_f64(dt, ra[1], i);
		bool same = k == r || (isnan(k) && isnan(r)) || fabs(k - r) <= rtol * fabs(r);
		if (!same && bad++ < 3)
			OKF(0, "%s: x = %.17g: kernel %.17g, reference %.17g (rel %.3g)", label,
			    half ? t_as_f64(dt, ra[0], i) : x[i], k, r, fabs(k - r) / fabs(r));
	}
	OKF(ok && bad == 0, "%s: %d elements within %g (%d off)", label, n, rtol, bad);
	compile_ctx_free(c);
	free(json);
	free(x);
	for (int i = 0; i < 2; i++) {
		free(ka[i]);
		free(ra[i]);
	}
}

static void
trig_kernels(void)
{
	KcErr err = {0};
	OK(kc_target_host(&host, &err) == KC_OK);
	static const struct {
		const char *op;
		double lo, hi;
	} ops[] = {
	    {"Sin", -40, 40},       {"Cos", -40, 40},   {"Asin", -1, 1},  {"ACos", -1, 1},
	    {"Atan", -30, 30},      {"Asinh", -50, 50}, {"Acosh", 1, 60}, {"Expm1", -3, 3},
	    {"Expm1", -1e-3, 1e-3}, {"Sin", -1e5, 1e5},
	};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		/* float32 runs in double: about correctly rounded */
		accuracy(ops[i].op, "float32", ops[i].lo, ops[i].hi, 2.5e-7);
		accuracy(ops[i].op, "float64", ops[i].lo, ops[i].hi, 4e-15);
		accuracy(ops[i].op, "float16", ops[i].lo, ops[i].hi, 1e-3);
	}
	/* Atan2 over a grid of signs, zeros and infinities */
	static const double v[] = {0, -0.0, 1, -1, 0.5, -3, 1e-300, 7e3, INFINITY, -INFINITY, NAN};
	enum { NV = sizeof v / sizeof v[0] };
	double y[NV * NV], x[NV * NV];
	for (int i = 0; i < NV; i++)
		for (int j = 0; j < NV; j++) {
			y[i * NV + j] = v[i];
			x[i * NV + j] = v[j];
		}
	const char *dts[] = {"float32", "float64"};
	for (int t = 0; t < 2; t++) {
		char shape[8];
		snprintf(shape, sizeof shape, "%d", NV * NV);
		const char *dt = dts[t];
		char *json = one_op("Atan2", 2, DT(dt, dt), DT(shape, shape), dt, shape);
		void *ka[3] = {pack(dt, y, NV * NV), pack(dt, x, NV * NV), calloc(NV * NV + 1, 8)};
		bool ok = run_kernel("Atan2", json, ka);
		int bad = 0;
		for (int e = 0; e < NV * NV && ok; e++) {
			double want = atan2(y[e], x[e]), got = t_as_f64(dt, ka[2], e);
			if (t == 0)
				want = (float)atan2((float)y[e], (float)x[e]);
			bool same =
			    (got == want && signbit(got) == signbit(want)) ||
			    (isnan(got) && isnan(want)) ||
			    fabs(got - want) <= 4e-15 * fabs(want) + (t ? 0 : 3e-7 * fabs(want));
			if (!same && bad++ < 3)
				OKF(0, "Atan2 %s(%g, %g): got %.17g want %.17g", dt, y[e], x[e],
				    got, want);
		}
		OKF(ok && bad == 0, "Atan2 %s: zeros, signs, infinities, NaN (%d off)", dt, bad);
		for (int i = 0; i < 3; i++)
			free(ka[i]);
		free(json);
	}
}

static void
addn_bool_slices(void)
{
	const char *f = "float32", *i32 = "int32", *b = "bool";
	/* AddN: one dynamic input of three tensors, [2,3] + [3] + [2,1] */
	check_graph("AddN broadcast",
	            strdup(GRAPH(
	                "[" TD("a", "float32", "2,3") "],[" TD("b", "float32", "3") "],[" TD(
	                    "c", "float32", "2,1") "]",
	                TD("y", "float32", "2,3"),
	                "{'name':'AddN','attr':[{'name':'n','value':3}],'input_desc':[[" TD(
	                    "a", "float32",
	                    "2,3") "," TD("b", "float32",
	                                  "3") "," TD("c", "float32",
	                                              "2,1") "]],'output_desc':[" TD("y", "float32",
	                                                                             "2,3") "]}")),
	            (void *[]){pack(f, N(1, 2, 3, 4, 5, 6), 6), pack(f, N(10, 20, 30), 3),
	                       pack(f, N(100, 200), 2), calloc(8, 8)},
	            3, f, 6, N(111, 122, 133, 214, 225, 236));
	check_op_attr("AddN of one", "AddN", "null", 1, DT(i32), DT("3"), IN(N(1, -2, 3)), i32, "3",
	              3, N(1, -2, 3));
	/* bool reductions in the declared dtype: a count, any, all */
	const double *bx = N(1, 0, 1, 1, 0, 0);
	check_op_attr("ReduceSum bool -> int32", "ReduceSum", "[{'name':'axis','value':[1]}]", 1,
	              DT(b), DT("2,3"), IN(bx), i32, "2", 2, N(2, 1));
	check_op_attr("ReduceSum bool -> float32", "ReduceSum", "null", 1, DT(b), DT("2,3"), IN(bx),
	              f, "1", 1, N(3));
	check_op_attr("ReduceSum bool -> bool", "ReduceSum", "[{'name':'axis','value':[0]}]", 1,
	              DT(b), DT("2,3"), IN(bx), b, "3", 3, N(1, 0, 1));
	check_op_attr("ReduceProd bool -> bool", "ReduceProd", "[{'name':'axis','value':[1]}]", 1,
	              DT(b), DT("2,3"), IN(N(1, 1, 1, 1, 0, 1)), b, "2", 2, N(1, 0));
	check_op_attr("ReduceMax bool -> int32", "ReduceMax", "[{'name':'axis','value':[1]}]", 1,
	              DT(b), DT("2,3"), IN(bx), i32, "2", 2, N(1, 1));
	check_op_attr("ReduceMin bool", "ReduceMin", "[{'name':'axis','value':[1]}]", 1, DT(b),
	              DT("2,3"), IN(N(1, 1, 1, 1, 0, 1)), b, "2", 2, N(1, 0));
	/* StridedSlice on x[4,5] = 0..19, numpy results worked by hand */
	const double *x20 = N(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	/* x[::-1, 3:0:-2] = rows 3,2,1,0, cols 3,1 */
	check_op_attr("StridedSlice negative strides", "StridedSlice",
	              "[{'name':'begin','value':[0,3]},{'name':'end','value':[0,0]},"
	              "{'name':'strides','value':[-1,-2]},{'name':'begin_mask','value':1},"
	              "{'name':'end_mask','value':1}]",
	              1, DT(f), DT("4,5"), IN(x20), f, "4,2", 8, N(18, 16, 13, 11, 8, 6, 3, 1));
	/* x[-1:-5:-3, 10::-4]: rows 3,0; cols clamp to 4, then 4,0 */
	check_op_attr("StridedSlice negative bounds clamp", "StridedSlice",
	              "[{'name':'begin','value':[-1,10]},{'name':'end','value':[-5,-6]},"
	              "{'name':'strides','value':[-3,-4]}]",
	              1, DT(f), DT("4,5"), IN(x20), f, "2,2", 4, N(19, 15, 4, 0));
	/* x[..., 1] (ellipsis, shrink): column 1 */
	check_op_attr("StridedSlice ellipsis + shrink", "StridedSlice",
	              "[{'name':'begin','value':[0,1]},{'name':'end','value':[0,2]},"
	              "{'name':'strides','value':[1,1]},{'name':'ellipsis_mask','value':1},"
	              "{'name':'shrink_axis_mask','value':2}]",
	              1, DT(f), DT("4,5"), IN(x20), f, "4", 4, N(1, 6, 11, 16));
	/* x[None, 1:3, None, ::2] -> [1,2,1,3] */
	check_op_attr("StridedSlice new axes", "StridedSlice",
	              "[{'name':'begin','value':[0,1,0,0]},{'name':'end','value':[1,3,1,5]},"
	              "{'name':'strides','value':[1,1,1,2]},{'name':'new_axis_mask','value':5}]",
	              1, DT(f), DT("4,5"), IN(x20), f, "1,2,1,3", 6, N(5, 7, 9, 10, 12, 14));
	/* x[2, ..., None]: shrink, ellipsis (dim 1 whole), new axis -> [5,1] */
	check_op_attr("StridedSlice shrink, ellipsis, new axis", "StridedSlice",
	              "[{'name':'begin','value':[2,0,0]},{'name':'end','value':[3,0,0]},"
	              "{'name':'strides','value':[1,1,1]},{'name':'shrink_axis_mask','value':1},"
	              "{'name':'ellipsis_mask','value':2},{'name':'new_axis_mask','value':4}]",
	              1, DT(i32), DT("4,5"), IN(x20), i32, "5,1", 5, N(10, 11, 12, 13, 14));
}

/* The new ops compiled and compared with the interpreter on random data:
 * the chains have more than MATH_INLINE_MAX math ops, so the outlined
 * (VFABI) versions run too. */
/* clang-format off */
static const char *const new_graphs[] = {
    GRAPH("[" F32("x", "5,37") "],[" F32("y", "37") "]", F32("o", "5,37") "," F32("p", "5,37"),
          OP1("Sin", "null", F32("x", "5,37"), F32("s", "5,37")) ","
          OP1("Cos", "null", F32("x", "5,37"), F32("c", "5,37")) ","
          OP2("Atan2", "null", F32("s", "5,37"), F32("y", "37"), F32("a", "5,37")) ","
          OP1("Expm1", "null", F32("a", "5,37"), F32("e", "5,37")) ","
          "{'name':'AddN','attr':null,'input_desc':[[" F32("s", "5,37") "," F32("c", "5,37")
          "," F32("e", "5,37") "," F32("y", "37") "]],'output_desc':[" F32("o", "5,37") "]},"
          OP1("Asinh", "null", F32("o", "5,37"), F32("h", "5,37")) ","
          OP1("Atan", "null", F32("h", "5,37"), F32("p", "5,37"))),
    GRAPH("[" TD("x", "float16", "3,40") "]", TD("o", "float16", "3,40"),
          OP1("Asin", "null", TD("x", "float16", "3,40"), TD("s", "float16", "3,40")) ","
          OP1("ACos", "null", TD("x", "float16", "3,40"), TD("c", "float16", "3,40")) ","
          "{'name':'AddN','attr':null,'input_desc':[[" TD("s", "float16", "3,40") ","
          TD("c", "float16", "3,40") "]],'output_desc':[" TD("o", "float16", "3,40") "]}"),
    GRAPH("[" TD("x", "float64", "70") "]", TD("o", "float64", "70"),
          OP1("Acosh", "null", TD("x", "float64", "70"), TD("o", "float64", "70"))),
    /* bool reductions, inner and outer axis, and a reversed slice */
    GRAPH("[" TD("m", "bool", "6,9") "],[" F32("x", "6,9") "]",
          TD("cnt", "int32", "6") "," TD("any", "bool", "9") "," F32("r", "3,1,9"),
          OP1("ReduceSum", "[{'name':'axis','value':[1]}]", TD("m", "bool", "6,9"),
              TD("cnt", "int32", "6")) ","
          OP1("ReduceSum", "[{'name':'axis','value':[0]}]", TD("m", "bool", "6,9"),
              TD("any", "bool", "9")) ","
          OP1("StridedSlice",
              "[{'name':'begin','value':[5,0]},{'name':'end','value':[0,0]},"
              "{'name':'strides','value':[-2,-1]},{'name':'end_mask','value':2},"
              "{'name':'begin_mask','value':2},{'name':'new_axis_mask','value':2}]",
              F32("x", "6,9"), F32("r", "3,1,9"))),
};
/* clang-format on */

static void
new_kernels(void)
{
	static const char *const names[] = {"trig chain + AddN", "float16 Asin/ACos/AddN",
	                                    "float64 Acosh", "bool reductions, reversed slice"};
	KcErr err = {0};
	OK(kc_target_host(&host, &err) == KC_OK);
	for (size_t i = 0; i < sizeof new_graphs / sizeof new_graphs[0]; i++) {
		char *j = strdup(new_graphs[i]);
		for (char *q = j; *q; q++)
			if (*q == '\'')
				*q = '"';
		OKF(differential(names[i], j, strlen(j), 7 + i), "%s compiles", names[i]);
		free(j);
	}
}

static void
corpus_dir(const char *dir, int *files)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[4096];
		const char *dot = strrchr(e->d_name, '.');
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		if (!strcmp(e->d_name, "legacy_inplace_assign")) {
			corpus_dir(path, files);
			continue;
		}
		if (!dot || (strcmp(dot, ".info") && strcmp(dot, ".json")))
			continue;
		const char *only = getenv("KC_TEST_CORPUS_FILTER"); /* a name substring */
		if (only && *only && !strstr(e->d_name, only))
			continue;
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		fseek(f, 0, SEEK_END);
		long n = ftell(f);
		fseek(f, 0, SEEK_SET);
		char *buf = malloc((size_t)n + 1);
		size_t got = fread(buf, 1, (size_t)n, f);
		fclose(f);
		if (differential(e->d_name, buf, got, 7))
			(*files)++;
		free(buf);
	}
	closedir(d);
}

/* ---- the corpus through the fixture (tests/corpus.cmake) ----------------------
 * KC_CORPUS_FIXTURE=DIR: the kernels kcsd compiled (DIR/index.json, DIR/cpu)
 * run serially on the inputs of DIR/ref and are compared with the
 * interpreter's outputs there, and with the inputs it wrote (Assign), by
 * the rule of differential(); the interpreter ran once, in corpus_ref. */

static cJSON *
read_json(const char *dir, const char *name)
{
	char path[4096];
	size_t len;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	char *text = t_read_file(path, &len);
	cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
	free(text);
	return j;
}

static const char *
jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : "";
}

/* One corpus file: false when kcsd did not compile it (as differential()). */
static bool
fixture_file(const char *fx, const char *corpus, const cJSON *e)
{
	const char *rel = jstr(e, "file"), *key = jstr(e, "key");
	const cJSON *ans =
	    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "compile"), "cpu");
	char path[4096], hex[65], why[300] = "";
	size_t len = 0, ref_len = 0;
	KcDigest dg;
	snprintf(path, sizeof path, "%s/%s", corpus, rel);
	char *text = t_read_file(path, &len);
	bool same = false;
	if (text) {
		kc_sha256(text, len, &dg);
		kc_digest_hex(&dg, hex);
		same = !strcmp(hex, jstr(e, "sha256"));
	}
	free(text);
	OKF(same, "%s: the fixture is of this file as it is now", rel);
	if (!same)
		return false;
	if (cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(ans, "status")) != 200)
		return false;
	snprintf(path, sizeof path, "ref/%s.json", key);
	cJSON *rr = read_json(fx, path);
	cJSON *meta = read_json(fx, jstr(ans, "meta"));
	const cJSON *rerr = cJSON_GetObjectItemCaseSensitive(rr, "error");
	OKF(rr && !rerr, "%s: interp %s %s", rel, jstr(rerr, "code"), jstr(rerr, "message"));
	const cJSON *ra = cJSON_GetObjectItemCaseSensitive(rr, "args");
	const cJSON *ma = cJSON_GetObjectItemCaseSensitive(meta, "args");
	int n = cJSON_GetArraySize(ra), nin = 0;
	bool args_ok = meta && n > 0 && n == cJSON_GetArraySize(ma);
	for (int i = 0; args_ok && i < n; i++) {
		const cJSON *a = cJSON_GetArrayItem(ra, i), *m = cJSON_GetArrayItem(ma, i);
		char *s1 = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(a, "shape"));
		char *s2 = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(m, "shape"));
		args_ok = !strcmp(jstr(a, "dtype"), jstr(m, "dtype")) && s1 && s2 &&
		          !strcmp(s1, s2) &&
		          cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "is_output")) ==
		              !strcmp(jstr(m, "role"), "output");
		free(s1);
		free(s2);
		nin += !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "is_output"));
	}
	OKF(args_ok, "%s: the kernel's args are the graph's (%d)", rel, n);
	void *dl = NULL, **args = NULL;
	char *obj = NULL, *in = NULL, *want = NULL;
	if (!args_ok)
		goto done;
	snprintf(path, sizeof path, "%s/%s", fx, jstr(ans, "object"));
	obj = t_read_file(path, &len);
	KcsKernelFn fn =
	    obj ? t_kernel_load(obj, len, jstr(meta, "symbol"), &dl, why, sizeof why) : NULL;
	OKF(fn != NULL, "%s: %s", rel, obj ? why : "no object");
	if (!fn)
		goto done;
	snprintf(path, sizeof path, "%s/ref/%s.in", fx, key);
	in = t_read_file(path, &len);
	snprintf(path, sizeof path, "%s/ref/%s.ref", fx, key);
	want = t_read_file(path, &ref_len);
	bool have = in && want && n <= 1024 && len >= 16 + 8 * (size_t)n;
	OKF(have, "%s: the fixture's inputs and outputs", rel);
	if (!have)
		goto done;
	/* the runner's --in layout: magic, nargs, ninputs, sizes, input bytes */
	uint64_t sizes[1024];
	const char *p = in + 16;
	memcpy(sizes, in + 16, 8 * (size_t)n);
	p += 8 * (size_t)n;
	size_t need_in = 16 + 8 * (size_t)n, need_ref = 0;
	for (int i = 0; i < n; i++) {
		const cJSON *a = cJSON_GetArrayItem(ra, i);
		bool wr = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "written"));
		size_t esz = t_dt_bytes(jstr(a, "dtype"));
		need_in += i < nin ? sizes[i] : 0;
		need_ref += i >= nin ? sizes[i] + sizes[i] / (esz ? esz : 1) : wr ? sizes[i] : 0;
	}
	have = need_in == len && need_ref == ref_len;
	OKF(have, "%s: the fixture's files have the sizes its args say", rel);
	if (!have)
		goto done;
	args = calloc((size_t)n, sizeof *args);
	const char *orig[1024];
	for (int i = 0; i < n; i++) {
		args[i] = calloc(1, sizes[i] + 8);
		if (i < nin) {
			orig[i] = p;
			memcpy(args[i], p, sizes[i]);
			p += sizes[i];
		}
	}
	n_diff++;
	bool all = fn(NULL, args, NULL) == 0;
	OKF(all, "%s: the kernel returns 0", rel);
	/* .ref: outputs, their tie bytes, the inputs after the interpreter */
	const char *wo = want, *wt = want, *wi;
	for (int i = nin; i < n; i++)
		wt += sizes[i];
	wi = wt;
	for (int i = nin; i < n; i++)
		wi += sizes[i] / t_dt_bytes(jstr(cJSON_GetArrayItem(ra, i), "dtype"));
	for (int i = 0; i < n && all; i++) {
		const cJSON *a = cJSON_GetArrayItem(ra, i);
		const char *dt = jstr(a, "dtype");
		bool wr = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "written"));
		int64_t numel = (int64_t)(sizes[i] / t_dt_bytes(dt));
		double tol = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a, "tolerance"));
		/* an input no Assign writes must be left as it was */
		const void *w = i >= nin ? (const void *)wo : wr ? (const void *)wi : orig[i];
		if (!same_arg(rel, i, dt, numel, args[i], w, i < nin ? NULL : (const uint8_t *)wt,
		              tol))
			all = false;
		if (i < nin) {
			wi += wr ? sizes[i] : 0;
		} else {
			wo += sizes[i];
			wt += numel;
		}
	}
	if (all)
		n_diff_ok++;
done:
	for (int i = 0; args && i < n; i++)
		free(args[i]);
	free(args);
	if (dl)
		dlclose(dl);
	free(obj);
	free(in);
	free(want);
	cJSON_Delete(meta);
	cJSON_Delete(rr);
	return true;
}

static void
corpus_fixture(const char *fx, const char *corpus, int *files)
{
	cJSON *index = read_json(fx, "index.json");
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(index, "files");
	OKF(cJSON_IsArray(list), "the corpus fixture %s/index.json", fx);
	const char *only = getenv("KC_TEST_CORPUS_FILTER");
	const cJSON *e;
	cJSON_ArrayForEach(e, list)
	{
		if (only && *only && !strstr(jstr(e, "file"), only))
			continue;
		*files += fixture_file(fx, corpus, e);
	}
	cJSON_Delete(index);
}

static void
corpus(void)
{
	const char *dir = t_corpus_dir();
	const char *fx = getenv("KC_CORPUS_FIXTURE");
	int files = 0;
	if (!dir) {
		t_skip("../shared/corpus/akg is absent");
		return;
	}
	int before = n_diff_ok;
	if (fx && *fx)
		corpus_fixture(fx, dir, &files);
	else
		corpus_dir(dir, &files);
	printf("# %d corpus files compile for the host; %d match the interpreter\n", files,
	       n_diff_ok - before);
	OK(files > 0);
}

int
main(void)
{
	kc_compiler_init();
	t_sub("arithmetic", arithmetic);
	t_sub("integers", integers);
	t_sub("comparisons", comparisons);
	t_sub("casts", casts);
	t_sub("layouts", layouts);
	t_sub("reductions", reductions);
	t_sub("layout ops", layout_ops);
	t_sub("concat, assign, matmul", concat_assign_matmul);
	t_sub("ties", ties);
	t_sub("argmax, cumsum, pool2d", ops_b);
	t_sub("kernels", kernels);
	t_sub("Sin..Atan2 values", trig_values);
	t_sub("Sin..Atan2 kernel accuracy", trig_kernels);
	t_sub("AddN, bool reductions, StridedSlice", addn_bool_slices);
	t_sub("new ops compiled", new_kernels);
	t_sub("corpus", corpus);
	return t_done();
}
