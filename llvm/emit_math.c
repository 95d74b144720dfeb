/* emit_math.c - transcendental functions and half/bfloat16 conversions as
 * straight-line LLVM IR, so the loop vectoriser can widen them and the
 * object needs no libm or compiler-rt helper.
 *
 * Every function is branch-free (special cases are `select`s) and generic
 * over float/double: the type of the argument picks the constants.
 *   exp   Cody-Waite reduction x = n ln2 + r, polynomial in r (Taylor for
 *         float64, near-minimax for float32), 2^n applied as two exact
 *         power-of-two products (subnormals work; overflow and underflow
 *         come out of the scaling itself)
 *   log   x = m 2^e, m in [sqrt(1/2), sqrt(2)), atanh series in s=(m-1)/(m+1)
 *   tanh  expm1(2|x|) (Taylor below 0.5, exp-1 above) / (expm1 + 2)
 *   erf   float32: Taylor series below 0.5, Abramowitz-Stegun 7.1.26 above
 *         (absolute error 1.5e-7); float64: a positive-term series below
 *         2.5, the erfc continued fraction above (~1e-15 relative)
 *   pow   exp(y log|x|) with numpy's special cases
 *   sin, cos, asin, acos, atan, atan2, asinh, acosh, expm1: see their
 *         section below (float32 runs them in double)
 * Half conversions follow F. Giesen's branch-free RNE algorithms (float16
 * only where the target has no conversion instructions: emit_llvm.c uses
 * fptrunc/fpext when LoopNest.hw_half is set; bfloat16 always).
 *
 * The builders work on scalars and on vectors alike. math_call emits each
 * function once per module as an internal noinline `kcs.<fn>.v<W><f32|f64>`
 * for the loop's vector width W, plus a scalar `kcs.<fn>.<f32|f64>` (lane 0
 * of the vector one) for the remainder, and tags the scalar call with a
 * VFABI mapping so LoopVectorize widens it into a call of the vector
 * version. A chain of N ops then costs N calls, not N inlined polynomials
 * for the backend: compile time stays linear in N. Kernels with few math
 * ops (MATH_INLINE_MAX) inline them instead (math_inline): no call cost.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "llvm.h"

typedef struct M {
	LLVMBuilderRef b;
	LLVMTypeRef ft, it; /* float type and the same-width integer type (vectors if w > 1) */
	LLVMTypeRef fe, ie; /* their element types */
	unsigned w;         /* lanes: 1 for a scalar */
	bool dbl;
} M;

/* The context for values of type t (float, double or a vector of them). */
static M
mk_type(LLVMBuilderRef b, LLVMTypeRef t)
{
	M m;
	LLVMContextRef c = LLVMGetTypeContext(t);
	bool vec = LLVMGetTypeKind(t) == LLVMVectorTypeKind;
	m.b = b;
	m.ft = t;
	m.fe = vec ? LLVMGetElementType(t) : t;
	m.w = vec ? LLVMGetVectorSize(t) : 1;
	m.dbl = LLVMGetTypeKind(m.fe) == LLVMDoubleTypeKind;
	m.ie = m.dbl ? LLVMInt64TypeInContext(c) : LLVMInt32TypeInContext(c);
	m.it = vec ? LLVMVectorType(m.ie, m.w) : m.ie;
	return m;
}

static M
mk(LLVMBuilderRef b, LLVMValueRef x)
{
	return mk_type(b, LLVMTypeOf(x));
}

/* s broadcast to m's lane count. */
static LLVMValueRef
splat(M *m, LLVMValueRef s)
{
	LLVMValueRef v[64];
	if (m->w == 1)
		return s;
	KC_ASSERT(m->w <= 64);
	for (unsigned i = 0; i < m->w; i++)
		v[i] = s;
	return LLVMConstVector(v, m->w);
}

static LLVMValueRef
fc(M *m, double v)
{
	return splat(m, LLVMConstReal(m->fe, v));
}

static LLVMValueRef
ic(M *m, int64_t v)
{
	return splat(m, LLVMConstInt(m->ie, (unsigned long long)v, 1));
}

#define ADD(a, c) LLVMBuildFAdd(m->b, (a), (c), "")
#define SUB(a, c) LLVMBuildFSub(m->b, (a), (c), "")
#define MUL(a, c) LLVMBuildFMul(m->b, (a), (c), "")
#define DIV(a, c) LLVMBuildFDiv(m->b, (a), (c), "")
#define SEL(p, a, c) LLVMBuildSelect(m->b, (p), (a), (c), "")
#define FCMP(op, a, c) LLVMBuildFCmp(m->b, (op), (a), (c), "")
#define ICMP(op, a, c) LLVMBuildICmp(m->b, (op), (a), (c), "")
#define AS_INT(a) LLVMBuildBitCast(m->b, (a), m->it, "")
#define AS_FLT(a) LLVMBuildBitCast(m->b, (a), m->ft, "")

LLVMValueRef
math_intrinsic(LLVMBuilderRef b, const char *name, LLVMValueRef *args, int n)
{
	LLVMTypeRef t = LLVMTypeOf(args[0]);
	LLVMModuleRef mod = LLVMGetGlobalParent(LLVMGetBasicBlockParent(LLVMGetInsertBlock(b)));
	unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
	KC_ASSERT(id != 0);
	LLVMValueRef fn = LLVMGetIntrinsicDeclaration(mod, id, &t, 1);
	LLVMTypeRef fty = LLVMIntrinsicGetType(LLVMGetTypeContext(t), id, &t, 1);
	return LLVMBuildCall2(b, fty, fn, args, (unsigned)n, "");
}

static LLVMValueRef
fabs_(M *m, LLVMValueRef x)
{
	return math_intrinsic(m->b, "llvm.fabs", &x, 1);
}

static LLVMValueRef
copysign_(M *m, LLVMValueRef mag, LLVMValueRef sgn)
{
	LLVMValueRef a[2] = {mag, sgn};
	return math_intrinsic(m->b, "llvm.copysign", a, 2);
}

static LLVMValueRef
floor_(M *m, LLVMValueRef x)
{
	return math_intrinsic(m->b, "llvm.floor", &x, 1);
}

/* Horner: c[0] + x*(c[1] + x*(... c[n-1])), with fused multiply-adds */
static LLVMValueRef
horner(M *m, LLVMValueRef x, const double *c, int n)
{
	LLVMValueRef acc = fc(m, c[n - 1]);
	for (int i = n - 2; i >= 0; i--) {
		/* llvm.fmuladd: one FMA where the target has it (x86 FMA3, NEON),
		 * a multiply and an add elsewhere, never a libm call */
		LLVMValueRef a[3] = {acc, x, fc(m, c[i])};
		acc = math_intrinsic(m->b, "llvm.fmuladd", a, 3);
	}
	return acc;
}

/* a * b + c, one FMA where the target has one (llvm.fmuladd) */
static LLVMValueRef
fma_(M *m, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
	LLVMValueRef x[3] = {a, b, c};
	return math_intrinsic(m->b, "llvm.fmuladd", x, 3);
}

/* 2^n for an integer n of the float's width, n within the normal range. */
static LLVMValueRef
pow2i(M *m, LLVMValueRef n)
{
	int mant = m->dbl ? 52 : 23, bias = m->dbl ? 1023 : 127;
	LLVMValueRef e = LLVMBuildAdd(m->b, n, ic(m, bias), "");
	return AS_FLT(LLVMBuildShl(m->b, e, ic(m, mant), ""));
}

/* lowp (double only): enough terms for a float32 result, not a double one */
static LLVMValueRef
exp_(LLVMBuilderRef b, LLVMValueRef x, bool lowp)
{
	M mm = mk(b, x), *m = &mm;
	double hi = m->dbl ? 709.782712893384 : 88.72283935546875;
	double lo = m->dbl ? -745.1332191019412 : -103.97208404541016;
	double ln2hi = m->dbl ? 6.93147180369123816490e-01 : 0.693145751953125;
	double ln2lo = m->dbl ? 1.90821492927058770002e-10 : 1.42860682030941723212e-06;
	double shifter = m->dbl ? 6755399441055744.0 : 12582912.0; /* 1.5 * 2^52, 1.5 * 2^23 */
	double c[18];
	int deg = m->dbl ? (lowp ? 8 : 13) : 7; /* |r| <= ln2/2: 8 leaves 2e-10 */

	c[0] = 1;
	for (int i = 1; i <= deg; i++)
		c[i] = c[i - 1] / i;
	if (!m->dbl) {
		/* float32: 1 + r + r^2 q(r) with q a degree-4 near-minimax fit
		 * (Lawson-weighted least squares of the relative error on
		 * |r| <= ln2/2): 1.03 ulp worst case with the float32 rounding,
		 * as the degree-7 Taylor polynomial, in one FMA less */
		static const double mm6[5] = {0.4999999403953552, 0.1666652113199234,
		                              0.04166838899254799, 0.0083687175065279,
		                              0.0013814613921567798};
		deg = 6;
		memcpy(c + 2, mm6, sizeof mm6);
	}
	/* Clamp to [lo - 1, hi + 1]: the reduction stays in range, and the ends
	 * need no select of their own, since 2^n1 2^n2 p overflows to +inf above
	 * hi and rounds to 0 below lo by itself. A NaN passes the clamps (ordered
	 * compares are false); its fptosi is poison, but only in the arm the
	 * final select does not choose. */
	LLVMValueRef xc = SEL(FCMP(LLVMRealOGT, x, fc(m, hi + 1)), fc(m, hi + 1), x);
	xc = SEL(FCMP(LLVMRealOLT, xc, fc(m, lo - 1)), fc(m, lo - 1), xc);
	/* FMAs: n ln2hi is exact (ln2hi's trailing zeros), so the first step is
	 * exact either way; the others round once instead of twice */
	LLVMValueRef t = fma_(m, xc, fc(m, 1.4426950408889634), fc(m, shifter));
	LLVMValueRef n = SUB(t, fc(m, shifter)); /* round(x / ln2) */
	LLVMValueRef r = fma_(m, n, fc(m, -ln2hi), xc);
	r = fma_(m, n, fc(m, -ln2lo), r);
	LLVMValueRef p = horner(m, r, c, deg + 1);
	LLVMValueRef ni = LLVMBuildFPToSI(b, n, m->it, "");
	LLVMValueRef n1 = LLVMBuildAShr(b, ni, ic(m, 1), "");
	LLVMValueRef n2 = LLVMBuildSub(b, ni, n1, "");
	LLVMValueRef res = MUL(MUL(p, pow2i(m, n1)), pow2i(m, n2));
	return SEL(FCMP(LLVMRealUNO, x, x), x, res);
}

LLVMValueRef
math_exp(LLVMBuilderRef b, LLVMValueRef x)
{
	return exp_(b, x, false);
}

static LLVMValueRef
log_(LLVMBuilderRef b, LLVMValueRef x, bool lowp)
{
	M mm = mk(b, x), *m = &mm;
	int mant = m->dbl ? 52 : 23, bias = m->dbl ? 1023 : 127;
	double minnorm = m->dbl ? 2.2250738585072014e-308 : 1.17549435e-38;
	int64_t expmask = m->dbl ? 0x7ff : 0xff;
	int64_t mantmask = m->dbl ? INT64_C(0xfffffffffffff) : 0x7fffff;
	int64_t one = m->dbl ? INT64_C(0x3ff0000000000000) : 0x3f800000;
	double ln2hi = m->dbl ? 6.93147180369123816490e-01 : 0.693145751953125;
	double ln2lo = m->dbl ? 1.90821492927058770002e-10 : 1.42860682030941723212e-06;
	double c[12];
	int nterms = m->dbl && !lowp ? 11 : 6; /* s^2 < 0.03: 6 leaves 2e-11 */

	for (int i = 0; i < nterms; i++)
		c[i] = 2.0 / (2 * i + 1); /* log m = 2 atanh s = 2 (s + s^3/3 + ...) */
	LLVMValueRef sub = FCMP(LLVMRealOLT, x, fc(m, minnorm));
	LLVMValueRef xs = SEL(sub, MUL(x, fc(m, m->dbl ? 4503599627370496.0 : 8388608.0)), x);
	LLVMValueRef bits = AS_INT(xs);
	LLVMValueRef e =
	    LLVMBuildAnd(b, LLVMBuildLShr(b, bits, ic(m, mant), ""), ic(m, expmask), "");
	e = LLVMBuildSub(b, e, ic(m, bias), "");
	e = SEL(sub, LLVMBuildSub(b, e, ic(m, mant), ""), e);
	LLVMValueRef mv =
	    AS_FLT(LLVMBuildOr(b, LLVMBuildAnd(b, bits, ic(m, mantmask), ""), ic(m, one), ""));
	LLVMValueRef big = FCMP(LLVMRealOGT, mv, fc(m, 1.4142135623730951));
	mv = SEL(big, MUL(mv, fc(m, 0.5)), mv);
	e = SEL(big, LLVMBuildAdd(b, e, ic(m, 1), ""), e);
	LLVMValueRef s = DIV(SUB(mv, fc(m, 1)), ADD(mv, fc(m, 1)));
	LLVMValueRef z = MUL(s, s);
	LLVMValueRef lm = MUL(s, horner(m, z, c, nterms));
	LLVMValueRef ef = LLVMBuildSIToFP(b, e, m->ft, "");
	LLVMValueRef res = ADD(MUL(ef, fc(m, ln2hi)), ADD(lm, MUL(ef, fc(m, ln2lo))));
	res = SEL(FCMP(LLVMRealOEQ, x, fc(m, INFINITY)), x, res);
	res = SEL(FCMP(LLVMRealOEQ, x, fc(m, 0)), fc(m, -INFINITY), res);
	res = SEL(FCMP(LLVMRealOLT, x, fc(m, 0)), fc(m, NAN), res);
	return SEL(FCMP(LLVMRealUNO, x, x), x, res);
}

LLVMValueRef
math_log(LLVMBuilderRef b, LLVMValueRef x)
{
	return log_(b, x, false);
}

LLVMValueRef
math_tanh(LLVMBuilderRef b, LLVMValueRef x)
{
	M mm = mk(b, x), *m = &mm;
	double c[20];
	int deg = m->dbl ? 17 : 9;

	if (!m->dbl) {
		/* float32: the odd/even rational minimax approximation Eigen uses
		 * (x P(x^2) / Q(x^2) on [-7.9988, 7.9988], x itself below 4e-4):
		 * 4e-7 max error against double tanh, ten FMAs and one division
		 * instead of an exp, a polynomial and a division */
		static const double al[7] = {4.89352455891786e-03,  6.37261928875436e-04,
		                             1.48572235717979e-05,  5.12229709037114e-08,
		                             -8.60467152213735e-11, 2.00018790482477e-13,
		                             -2.76076847742355e-16};
		static const double be[4] = {4.89352518554385e-03, 2.26843463243900e-03,
		                             1.18534705686654e-04, 1.19825839466702e-06};
		LLVMValueRef lim = fc(m, 7.99881172180175781);
		LLVMValueRef xc = SEL(FCMP(LLVMRealOGT, x, lim), lim, x);
		xc = SEL(FCMP(LLVMRealOLT, xc, LLVMBuildFNeg(b, lim, "")),
		         LLVMBuildFNeg(b, lim, ""), xc);
		LLVMValueRef x2 = MUL(xc, xc);
		LLVMValueRef p = MUL(xc, horner(m, x2, al, 7));
		LLVMValueRef q = horner(m, x2, be, 4);
		LLVMValueRef t = DIV(p, q);
		/* a NaN x passes both clamps (ordered compares are false), so
		 * p, q and t are NaN already: no select for it */
		return SEL(FCMP(LLVMRealOLT, fabs_(m, x), fc(m, 0.0004)), x, t);
	}
	/* expm1(u) = u * (1 + u/2 + u^2/6 + ...) */
	c[0] = 1;
	for (int i = 1; i < deg; i++)
		c[i] = c[i - 1] / (i + 1);
	LLVMValueRef ax = fabs_(m, x);
	LLVMValueRef u = MUL(ax, fc(m, 2));
	LLVMValueRef small = MUL(u, horner(m, u, c, deg));
	LLVMValueRef big = SUB(math_exp(b, u), fc(m, 1));
	LLVMValueRef em = SEL(FCMP(LLVMRealOLT, u, fc(m, 0.5)), small, big);
	LLVMValueRef t = DIV(em, ADD(em, fc(m, 2)));
	t = SEL(FCMP(LLVMRealOGT, ax, fc(m, m->dbl ? 20.0 : 9.5)), fc(m, 1), t);
	return copysign_(m, t, x);
}

/* float64: erf x = 2/sqrt(pi) e^-x^2 sum 2^n x^(2n+1) / (1.3...(2n+1)) (no
 * cancellation: all terms positive) below 2.5; above, erfc by its
 * continued fraction x + (1/2)/(x + 1/(x + (3/2)/(x + ...))), 40 levels. */
static LLVMValueRef
erf64(M *m, LLVMValueRef ax, LLVMValueRef ez)
{
	double a[50];
	a[0] = 1;
	for (int n = 1; n < 50; n++)
		a[n] = a[n - 1] * 2.0 / (2 * n + 1);
	LLVMValueRef z = MUL(ax, ax);
	LLVMValueRef ser = MUL(MUL(fc(m, 1.1283791670955126), ez), MUL(ax, horner(m, z, a, 50)));
	LLVMValueRef t = ax;
	for (int k = 40; k >= 1; k--)
		t = ADD(ax, DIV(fc(m, k / 2.0), t));
	LLVMValueRef erfc = DIV(ez, MUL(fc(m, 1.7724538509055160), t));
	LLVMValueRef big = SUB(fc(m, 1), erfc);
	big = SEL(FCMP(LLVMRealOGT, ax, fc(m, 6.5)), fc(m, 1), big);
	return SEL(FCMP(LLVMRealOLT, ax, fc(m, 2.5)), ser, big);
}

LLVMValueRef
math_erf(LLVMBuilderRef b, LLVMValueRef x)
{
	M mm = mk(b, x), *m = &mm;
	static const double as[5] = {0.254829592, -0.284496736, 1.421413741, -1.453152027,
	                             1.061405429};
	double c[13];
	double fact = 1;

	LLVMValueRef ax = fabs_(m, x);
	LLVMValueRef z = MUL(ax, ax);
	LLVMValueRef ez = math_exp(b, LLVMBuildFNeg(b, z, ""));
	if (m->dbl)
		return copysign_(m, erf64(m, ax, ez), x);
	/* float32: erf x = 2/sqrt(pi) x sum (-1)^n x^2n / (n! (2n+1)) below 0.5 */
	for (int n = 0; n < 13; n++) {
		if (n)
			fact *= n;
		c[n] = (n % 2 ? -1.0 : 1.0) * 1.1283791670955126 / (fact * (2 * n + 1));
	}
	LLVMValueRef small = MUL(ax, horner(m, z, c, 13));
	LLVMValueRef t = DIV(fc(m, 1), ADD(fc(m, 1), MUL(ax, fc(m, 0.3275911))));
	LLVMValueRef poly = MUL(t, horner(m, t, as, 5));
	LLVMValueRef big = SUB(fc(m, 1), MUL(poly, ez));
	LLVMValueRef res = SEL(FCMP(LLVMRealOLT, ax, fc(m, 0.5)), small, big);
	return copysign_(m, res, x);
}

static LLVMValueRef
pow_(LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y, bool lowp)
{
	M mm = mk(b, x), *m = &mm;
	LLVMValueRef ax = fabs_(m, x);
	LLVMValueRef r = exp_(b, MUL(y, log_(b, ax, lowp)), lowp);
	LLVMValueRef fy = floor_(m, y);
	LLVMValueRef yint = FCMP(LLVMRealOEQ, fy, y);
	LLVMValueRef hy = MUL(y, fc(m, 0.5));
	LLVMValueRef yodd = LLVMBuildAnd(b, yint, FCMP(LLVMRealUNE, floor_(m, hy), hy), "");
	LLVMValueRef neg = ICMP(LLVMIntSLT, AS_INT(x), ic(m, 0)); /* sign bit, incl. -0 */
	r = SEL(LLVMBuildAnd(b, neg, yodd, ""), LLVMBuildFNeg(b, r, ""), r);
	LLVMValueRef xneg = FCMP(LLVMRealOLT, x, fc(m, 0));
	r = SEL(LLVMBuildAnd(b, xneg, LLVMBuildNot(b, yint, ""), ""), fc(m, NAN), r);
	LLVMValueRef yinf = FCMP(LLVMRealOEQ, fabs_(m, y), fc(m, INFINITY));
	r = SEL(LLVMBuildAnd(b, FCMP(LLVMRealOEQ, ax, fc(m, 1)), yinf, ""), fc(m, 1), r);
	r = SEL(FCMP(LLVMRealOEQ, x, fc(m, 1)), fc(m, 1), r);
	return SEL(FCMP(LLVMRealOEQ, y, fc(m, 0)), fc(m, 1), r);
}

LLVMValueRef
math_pow(LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y)
{
	return pow_(b, x, y, false);
}

/* ---- trigonometric, inverse trigonometric and hyperbolic, expm1 ----------
 * Generic over float/double like the functions above; math_inline runs a
 * float32 argument through them in double with float-grade polynomials
 * (lowp), so the range reductions and the final subtractions have double
 * headroom and the result rounds once to float.
 *   sin, cos  x = n pi/2 + r, |r| <= pi/4, with fdlibm's 33+33+33+53-bit
 *             split of pi/2 (n * part exact for |n| < 2^20, so accurate
 *             for |x| < 2^20 pi/2; beyond that the reduction loses bits),
 *             Taylor polynomials for sin r and cos r, quadrant n mod 4
 *   atan      1/|x| above 1, pi/4 + atan((u-1)/(u+1)) above tan(pi/8),
 *             then the series in v^2 <= 0.1716
 *   atan2     atan(min/max) of the magnitudes, pi/2 - . when |y| > |x|,
 *             pi - . when x has its sign bit set; numpy's zero, infinity
 *             and NaN cases
 *   asin      atan2(x, sqrt((1-x)(1+x))), acos atan2(sqrt((1-x)(1+x)), x)
 *   asinh     log1p(|x| + x^2/(1 + sqrt(1 + x^2))), log|x| + ln2 above 2^28
 *   acosh     log1p(t + sqrt(t(t+2))), t = x - 1, log x + ln2 above 2^28
 *   expm1     Taylor below |x| = 0.5 (no cancellation near 0), exp - 1 above
 *   log1p     2 atanh(u/(2+u)) series for -0.5 < u < 1, log(1+u) else */

static LLVMValueRef
is_finite_(M *m, LLVMValueRef x)
{
	return FCMP(LLVMRealOLT, fabs_(m, x), fc(m, INFINITY));
}

static LLVMValueRef
sincos_(LLVMBuilderRef b, LLVMValueRef x, bool lowp, bool cosine)
{
	M mm = mk(b, x), *m = &mm;
	static const double p1 = 0x1.921fb544p+0, p2 = 0x1.0b4611a6p-34;
	static const double p3 = 0x1.3198a2ep-69, p4 = 8.47842766036889956997e-32;
	double sc[9], cc[10], f = 1;
	int ns = lowp || !m->dbl ? 6 : 8, nc = lowp || !m->dbl ? 7 : 9;
	double shifter = m->dbl ? 6755399441055744.0 : 12582912.0;
	double tmax = m->dbl ? 0x1p50 : 0x1p21;

	for (int k = 1; k <= 2 * nc; k++) {
		f *= k;
		if (k % 2 && (k - 1) / 2 < ns) /* (-1)^j / (2j+1)! */
			sc[(k - 1) / 2] = ((k - 1) / 2 % 2 ? -1.0 : 1.0) / f;
		if (k % 2 == 0 && k / 2 < nc)
			cc[k / 2] = (k / 2 % 2 ? -1.0 : 1.0) / f;
	}
	sc[0] = 1;
	cc[0] = 1;
	LLVMValueRef fin = is_finite_(m, x);
	LLVMValueRef xs = SEL(fin, x, fc(m, 0)); /* no NaN into fptosi */
	LLVMValueRef t = MUL(xs, fc(m, 0.63661977236758134308));
	t = SEL(FCMP(LLVMRealOGT, t, fc(m, tmax)), fc(m, tmax), t);
	t = SEL(FCMP(LLVMRealOLT, t, fc(m, -tmax)), fc(m, -tmax), t);
	LLVMValueRef n = SUB(ADD(t, fc(m, shifter)), fc(m, shifter)); /* round(x 2/pi) */
	LLVMValueRef r = SUB(xs, MUL(n, fc(m, p1)));
	r = SUB(r, MUL(n, fc(m, p2)));
	r = SUB(r, MUL(n, fc(m, p3)));
	r = SUB(r, MUL(n, fc(m, p4)));
	LLVMValueRef z = MUL(r, r);
	LLVMValueRef sv = MUL(r, horner(m, z, sc, ns));
	LLVMValueRef cv = horner(m, z, cc, nc);
	LLVMValueRef q = LLVMBuildFPToSI(b, n, m->it, "");
	if (cosine) /* cos x = sin(x + pi/2): one quadrant on */
		q = LLVMBuildAdd(b, q, ic(m, 1), "");
	LLVMValueRef odd = ICMP(LLVMIntNE, LLVMBuildAnd(b, q, ic(m, 1), ""), ic(m, 0));
	LLVMValueRef neg = ICMP(LLVMIntNE, LLVMBuildAnd(b, q, ic(m, 2), ""), ic(m, 0));
	LLVMValueRef v = SEL(odd, cv, sv);
	v = SEL(neg, LLVMBuildFNeg(b, v, ""), v);
	if (!cosine) /* sin(-0) = -0 */
		v = SEL(FCMP(LLVMRealOEQ, x, fc(m, 0)), x, v);
	return SEL(fin, v, fc(m, NAN));
}

/* atan of x (any sign); see the section comment. */
static LLVMValueRef
atan_(LLVMBuilderRef b, LLVMValueRef x, bool lowp)
{
	M mm = mk(b, x), *m = &mm;
	double c[24];
	int nt = m->dbl && !lowp ? 22 : 12;

	for (int k = 0; k < nt; k++)
		c[k] = (k % 2 ? -1.0 : 1.0) / (2 * k + 1);
	LLVMValueRef ax = fabs_(m, x);
	LLVMValueRef big = FCMP(LLVMRealOGT, ax, fc(m, 1));
	LLVMValueRef u = SEL(big, DIV(fc(m, 1), ax), ax);
	LLVMValueRef mid = FCMP(LLVMRealOGT, u, fc(m, 0.41421356237309504880));
	LLVMValueRef v = SEL(mid, DIV(SUB(u, fc(m, 1)), ADD(u, fc(m, 1))), u);
	LLVMValueRef p = MUL(v, horner(m, MUL(v, v), c, nt));
	LLVMValueRef r = SEL(mid, ADD(fc(m, 0.78539816339744830962), p), p);
	r = SEL(big, SUB(fc(m, 1.57079632679489661923), r), r);
	return copysign_(m, r, x);
}

static LLVMValueRef
atan2_(LLVMBuilderRef b, LLVMValueRef y, LLVMValueRef x, bool lowp)
{
	M mm = mk(b, x), *m = &mm;
	LLVMValueRef ax = fabs_(m, x), ay = fabs_(m, y);
	LLVMValueRef swap = FCMP(LLVMRealOGT, ay, ax);
	LLVMValueRef mx = SEL(swap, ay, ax), mn = SEL(swap, ax, ay);
	LLVMValueRef t = DIV(mn, mx);
	t = SEL(FCMP(LLVMRealOEQ, mx, fc(m, 0)), fc(m, 0), t); /* atan2(+-0, +-0) */
	LLVMValueRef both_inf = LLVMBuildAnd(b, FCMP(LLVMRealOEQ, ax, fc(m, INFINITY)),
	                                     FCMP(LLVMRealOEQ, ay, fc(m, INFINITY)), "");
	t = SEL(both_inf, fc(m, 1), t);
	LLVMValueRef r = atan_(b, t, lowp);
	r = SEL(swap, SUB(fc(m, 1.57079632679489661923), r), r);
	LLVMValueRef xneg = ICMP(LLVMIntSLT, AS_INT(x), ic(m, 0)); /* sign bit, incl. -0 */
	r = SEL(xneg, SUB(fc(m, 3.14159265358979323846), r), r);
	r = copysign_(m, r, y);
	LLVMValueRef nan = LLVMBuildOr(b, FCMP(LLVMRealUNO, x, x), FCMP(LLVMRealUNO, y, y), "");
	return SEL(nan, ADD(x, y), r);
}

/* log(1 + u) without cancellation for small u; where big (if given) is
 * set, log(bigx) + ln 2 instead (asinh/acosh of large x), from the same
 * log call. */
static LLVMValueRef
log1p_(LLVMBuilderRef b, LLVMValueRef u, bool lowp, LLVMValueRef big, LLVMValueRef bigx)
{
	M mm = mk(b, u), *m = &mm;
	double c[18];
	int nt = m->dbl && !lowp ? 17 : 10; /* s^2 <= 1/9 */

	for (int k = 0; k < nt; k++)
		c[k] = 2.0 / (2 * k + 1);
	LLVMValueRef s = DIV(u, ADD(fc(m, 2), u));
	LLVMValueRef p = MUL(s, horner(m, MUL(s, s), c, nt));
	LLVMValueRef near =
	    LLVMBuildAnd(b, FCMP(LLVMRealOGT, u, fc(m, -0.5)), FCMP(LLVMRealOLT, u, fc(m, 1)), "");
	LLVMValueRef w = ADD(fc(m, 1), u), add = fc(m, 0);
	if (big) {
		w = SEL(big, bigx, w);
		add = SEL(big, fc(m, 0.69314718055994530942), add);
	}
	return SEL(near, p, ADD(log_(b, w, lowp), add));
}

static LLVMValueRef
asinh_(LLVMBuilderRef b, LLVMValueRef x, bool lowp)
{
	M mm = mk(b, x), *m = &mm;
	double big = m->dbl ? 0x1p28 : 0x1p12;
	LLVMValueRef ax = fabs_(m, x), z = MUL(ax, ax);
	LLVMValueRef one = fc(m, 1);
	LLVMValueRef sq = math_intrinsic(b, "llvm.sqrt", (LLVMValueRef[]){ADD(one, z)}, 1);
	LLVMValueRef r =
	    log1p_(b, ADD(ax, DIV(z, ADD(one, sq))), lowp, FCMP(LLVMRealOGT, ax, fc(m, big)), ax);
	return copysign_(m, r, x);
}

static LLVMValueRef
acosh_(LLVMBuilderRef b, LLVMValueRef x, bool lowp)
{
	M mm = mk(b, x), *m = &mm;
	double big = m->dbl ? 0x1p28 : 0x1p12;
	LLVMValueRef t = SUB(x, fc(m, 1));
	LLVMValueRef sq =
	    math_intrinsic(b, "llvm.sqrt", (LLVMValueRef[]){MUL(t, ADD(t, fc(m, 2)))}, 1);
	LLVMValueRef r = log1p_(b, ADD(t, sq), lowp, FCMP(LLVMRealOGT, x, fc(m, big)), x);
	return SEL(FCMP(LLVMRealOLT, x, fc(m, 1)), fc(m, NAN), r);
}

static LLVMValueRef
expm1_(LLVMBuilderRef b, LLVMValueRef x, bool lowp)
{
	M mm = mk(b, x), *m = &mm;
	double c[16];
	int deg = m->dbl && !lowp ? 15 : 10; /* 0.5^deg / (deg+1)! */

	c[0] = 1;
	for (int i = 1; i < deg; i++)
		c[i] = c[i - 1] / (i + 1);
	LLVMValueRef small = MUL(x, horner(m, x, c, deg));
	LLVMValueRef big = SUB(exp_(b, x, lowp), fc(m, 1));
	return SEL(FCMP(LLVMRealOLT, fabs_(m, x), fc(m, 0.5)), small, big);
}

/* f (one of the functions of this section) on a[] of the compute type;
 * float32 runs in double with lowp polynomials. */
static LLVMValueRef
trig_(LLVMBuilderRef b, MathFn f, LLVMValueRef *a)
{
	M mm = mk(b, a[0]), *m = &mm;
	LLVMValueRef x = a[0], y = a[1], r = NULL;
	bool lowp = !m->dbl;

	if (lowp) {
		LLVMTypeRef d = LLVMDoubleTypeInContext(LLVMGetTypeContext(m->ft));
		if (m->w > 1)
			d = LLVMVectorType(d, m->w);
		x = LLVMBuildFPExt(b, x, d, "");
		if (y)
			y = LLVMBuildFPExt(b, y, d, "");
	}
	switch (f) {
	case MATH_SIN: r = sincos_(b, x, lowp, false); break;
	case MATH_COS: r = sincos_(b, x, lowp, true); break;
	case MATH_ATAN: r = atan_(b, x, lowp); break;
	case MATH_ATAN2: r = atan2_(b, x, y, lowp); break;
	case MATH_ASIN:
	case MATH_ACOS: {
		M dm = mk(b, x);
		LLVMValueRef one = fc(&dm, 1);
		LLVMValueRef w = LLVMBuildFMul(b, LLVMBuildFSub(b, one, x, ""),
		                               LLVMBuildFAdd(b, one, x, ""), "");
		LLVMValueRef s = math_intrinsic(b, "llvm.sqrt", &w, 1);
		r = f == MATH_ASIN ? atan2_(b, x, s, lowp) : atan2_(b, s, x, lowp);
		break;
	}
	case MATH_ASINH: r = asinh_(b, x, lowp); break;
	case MATH_ACOSH: r = acosh_(b, x, lowp); break;
	case MATH_EXPM1: r = expm1_(b, x, lowp); break;
	case MATH_EXP:
	case MATH_LOG:
	case MATH_TANH:
	case MATH_ERF:
	case MATH_POW:
	case MATH_COUNT: KC_ASSERT(!"not a trig function"); break;
	}
	return lowp ? LLVMBuildFPTrunc(b, r, m->ft, "") : r;
}

/* ---- outlined functions ---------------------------------------------------- */

static const struct {
	const char *name;
	int arity;
} math_fns[MATH_COUNT] = {
    [MATH_EXP] = {"exp", 1},     [MATH_LOG] = {"log", 1},     [MATH_TANH] = {"tanh", 1},
    [MATH_ERF] = {"erf", 1},     [MATH_POW] = {"pow", 2},     [MATH_SIN] = {"sin", 1},
    [MATH_COS] = {"cos", 1},     [MATH_ASIN] = {"asin", 1},   [MATH_ACOS] = {"acos", 1},
    [MATH_ATAN] = {"atan", 1},   [MATH_ATAN2] = {"atan2", 2}, [MATH_ASINH] = {"asinh", 1},
    [MATH_ACOSH] = {"acosh", 1}, [MATH_EXPM1] = {"expm1", 1},
};

/* float32 pow runs in double (y log x amplifies the error of log x by up
 * to 88) but with float32-grade polynomials (lowp): what it needs is the
 * double range reduction and product, not 53-bit series. */
LLVMValueRef
math_inline(LLVMBuilderRef b, MathFn f, LLVMValueRef *a)
{
	switch (f) {
	case MATH_EXP: return math_exp(b, a[0]);
	case MATH_LOG: return math_log(b, a[0]);
	case MATH_TANH: return math_tanh(b, a[0]);
	case MATH_ERF: return math_erf(b, a[0]);
	case MATH_POW: {
		M mm = mk(b, a[0]), *m = &mm;
		if (m->dbl)
			return math_pow(b, a[0], a[1]);
		LLVMTypeRef d = LLVMDoubleTypeInContext(LLVMGetTypeContext(m->ft));
		if (m->w > 1)
			d = LLVMVectorType(d, m->w);
		LLVMValueRef x = LLVMBuildFPExt(b, a[0], d, "");
		LLVMValueRef y = LLVMBuildFPExt(b, a[1], d, "");
		return LLVMBuildFPTrunc(b, pow_(b, x, y, true), m->ft, "");
	}
	case MATH_SIN:
	case MATH_COS:
	case MATH_ASIN:
	case MATH_ACOS:
	case MATH_ATAN:
	case MATH_ATAN2:
	case MATH_ASINH:
	case MATH_ACOSH:
	case MATH_EXPM1: {
		LLVMValueRef two[2] = {a[0], math_fns[f].arity > 1 ? a[1] : NULL};
		return trig_(b, f, two);
	}
	case MATH_COUNT: break;
	}
	KC_ASSERT(!"unknown math function");
	return NULL;
}

/* Adds the attribute `name` (value v) to fn. */
static void
fn_attr(LLVMContextRef cx, LLVMValueRef fn, const char *name, uint64_t v)
{
	unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
	KC_ASSERT(kind != 0);
	LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
	                        LLVMCreateEnumAttribute(cx, kind, v));
}

/* Appends fn to llvm.compiler.used, so that the optimiser keeps a vector
 * variant that only a VFABI mapping refers to. */
static void
keep_used(LLVMModuleRef mod, LLVMValueRef fn)
{
	LLVMContextRef cx = LLVMGetModuleContext(mod);
	LLVMTypeRef pt = LLVMPointerTypeInContext(cx, 0);
	LLVMValueRef old = LLVMGetNamedGlobal(mod, "llvm.compiler.used"), el[128];
	unsigned n = 0;

	if (old) {
		LLVMValueRef init = LLVMGetInitializer(old);
		n = (unsigned)LLVMGetNumOperands(init);
		KC_ASSERT(n < 128);
		for (unsigned i = 0; i < n; i++)
			el[i] = LLVMGetOperand(init, i);
		LLVMDeleteGlobal(old);
	}
	el[n++] = fn;
	LLVMValueRef g = LLVMAddGlobal(mod, LLVMArrayType2(pt, n), "llvm.compiler.used");
	LLVMSetInitializer(g, LLVMConstArray2(pt, el, n));
	LLVMSetLinkage(g, LLVMAppendingLinkage);
	LLVMSetSection(g, "llvm.metadata");
}

/* The internal function `name` computing f on type t, built on first use;
 * a scalar one with vfn set runs lane 0 of vfn, so that the module holds
 * one copy of the polynomial (the scalar one only serves loop remainders). */
static LLVMValueRef
math_fn(LLVMModuleRef mod, MathFn f, LLVMTypeRef t, const char *name, LLVMValueRef vfn, bool *made)
{
	LLVMValueRef fn = LLVMGetNamedFunction(mod, name);
	LLVMContextRef cx = LLVMGetModuleContext(mod);
	LLVMTypeRef params[2] = {t, t};
	unsigned n = (unsigned)math_fns[f].arity;

	*made = false;
	if (fn)
		return fn;
	*made = true;
	fn = LLVMAddFunction(mod, name, LLVMFunctionType(t, params, n, 0));
	LLVMSetLinkage(fn, LLVMInternalLinkage);
	/* noinline: each polynomial is compiled once per width, not per use */
	fn_attr(cx, fn, "noinline", 0);
	fn_attr(cx, fn, "nounwind", 0);
	fn_attr(cx, fn, "willreturn", 0);
	fn_attr(cx, fn, "nosync", 0);
	fn_attr(cx, fn, "memory", 0); /* memory(none) */
	/* its vector spills aligned whatever the caller's stack (emit_llvm.c
	 * emit_body) */
	LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
	                        LLVMCreateStringAttribute(cx, "stackrealign", 12, "", 0));
	LLVMBuilderRef b = LLVMCreateBuilderInContext(cx);
	LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(cx, fn, "entry"));
	LLVMValueRef a[2] = {LLVMGetParam(fn, 0), n > 1 ? LLVMGetParam(fn, 1) : NULL};
	if (vfn) {
		LLVMTypeRef vty = LLVMGlobalGetValueType(vfn);
		LLVMValueRef zero = LLVMConstInt(LLVMInt32TypeInContext(cx), 0, 0);
		for (unsigned i = 0; i < n; i++)
			a[i] = LLVMBuildInsertElement(b, LLVMGetPoison(LLVMGetReturnType(vty)),
			                              a[i], zero, "");
		LLVMValueRef r = LLVMBuildCall2(b, vty, vfn, a, n, "");
		LLVMBuildRet(b, LLVMBuildExtractElement(b, r, zero, ""));
	} else {
		LLVMBuildRet(b, math_inline(b, f, a));
	}
	LLVMDisposeBuilder(b);
	return fn;
}

LLVMValueRef
math_call(LLVMBuilderRef b, MathFn f, LLVMValueRef *args, int width)
{
	LLVMModuleRef mod = LLVMGetGlobalParent(LLVMGetBasicBlockParent(LLVMGetInsertBlock(b)));
	LLVMContextRef cx = LLVMGetModuleContext(mod);
	LLVMTypeRef t = LLVMTypeOf(args[0]);
	const char *ty = LLVMGetTypeKind(t) == LLVMDoubleTypeKind ? "f64" : "f32";
	const char *nm = math_fns[f].name;
	char sname[32], vname[32], abi[128];
	bool made;

	LLVMValueRef vfn = NULL;
	KC_ASSERT(width <= 64);
	if (width > 1) {
		snprintf(vname, sizeof vname, "kcs.%s.v%d%s", nm, width, ty);
		vfn = math_fn(mod, f, LLVMVectorType(t, (unsigned)width), vname, NULL, &made);
		if (made)
			keep_used(mod, vfn);
	}
	snprintf(sname, sizeof sname, "kcs.%s.%s", nm, ty);
	LLVMValueRef fn = math_fn(mod, f, t, sname, vfn, &made);
	LLVMValueRef call = LLVMBuildCall2(b, LLVMGlobalGetValueType(fn), fn, args,
	                                   (unsigned)math_fns[f].arity, "");
	if (width <= 1)
		return call;
	/* _ZGV <isa _LLVM_> <N: unmasked> <VF> <v per vector arg> _ scalar (vector) */
	snprintf(abi, sizeof abi, "_ZGV_LLVM_N%d%s_%s(%s)", width,
	         math_fns[f].arity == 2 ? "vv" : "v", sname, vname);
	static const char key[] = "vector-function-abi-variant";
	LLVMAddCallSiteAttribute(
	    call, LLVMAttributeFunctionIndex,
	    LLVMCreateStringAttribute(cx, key, sizeof key - 1, abi, (unsigned)strlen(abi)));
	return call;
}

/* ---- float16 / bfloat16 ---------------------------------------------------- */

LLVMValueRef
math_f32_to_f16(LLVMBuilderRef b, LLVMValueRef x)
{
	M mm = mk(b, x), *m = &mm;
	LLVMContextRef cx = LLVMGetTypeContext(m->ft);
	LLVMValueRef u = AS_INT(x);
	LLVMValueRef sign = LLVMBuildAnd(b, u, ic(m, (int32_t)0x80000000u), "");
	LLVMValueRef a = LLVMBuildXor(b, u, sign, "");
	/* overflow / inf / nan */
	LLVMValueRef big = ICMP(LLVMIntUGE, a, ic(m, (127 + 16) << 23));
	LLVMValueRef o_big =
	    SEL(ICMP(LLVMIntUGT, a, ic(m, 255 << 23)), ic(m, 0x7e00), ic(m, 0x7c00));
	/* subnormal half: let the FPU round by adding a magic number */
	LLVMValueRef magic = ic(m, ((127 - 15) + (23 - 10) + 1) << 23);
	LLVMValueRef f = ADD(AS_FLT(a), AS_FLT(magic));
	LLVMValueRef o_sub = LLVMBuildSub(b, AS_INT(f), magic, "");
	LLVMValueRef small = ICMP(LLVMIntULT, a, ic(m, 113 << 23));
	/* normal: rebias and round to nearest even */
	LLVMValueRef odd = LLVMBuildAnd(b, LLVMBuildLShr(b, a, ic(m, 13), ""), ic(m, 1), "");
	LLVMValueRef n =
	    LLVMBuildAdd(b, a, ic(m, (int32_t)((uint32_t)(15 - 127) << 23) + 0xfff), "");
	n = LLVMBuildAdd(b, n, odd, "");
	LLVMValueRef o_norm = LLVMBuildLShr(b, n, ic(m, 13), "");
	LLVMValueRef o = SEL(big, o_big, SEL(small, o_sub, o_norm));
	o = LLVMBuildOr(b, o, LLVMBuildLShr(b, sign, ic(m, 16), ""), "");
	return LLVMBuildTrunc(b, o, LLVMInt16TypeInContext(cx), "");
}

LLVMValueRef
math_f16_to_f32(LLVMBuilderRef b, LLVMValueRef h)
{
	LLVMContextRef cx = LLVMGetTypeContext(LLVMTypeOf(h));
	M mm = mk_type(b, LLVMFloatTypeInContext(cx)), *m = &mm;
	LLVMValueRef w = LLVMBuildZExt(b, h, m->it, "");
	LLVMValueRef o = LLVMBuildShl(b, LLVMBuildAnd(b, w, ic(m, 0x7fff), ""), ic(m, 13), "");
	LLVMValueRef shexp = ic(m, 0x7c00 << 13);
	LLVMValueRef e = LLVMBuildAnd(b, o, shexp, "");
	o = LLVMBuildAdd(b, o, ic(m, (127 - 15) << 23), "");
	LLVMValueRef o_inf = LLVMBuildAdd(b, o, ic(m, (128 - 16) << 23), "");
	LLVMValueRef o_den = LLVMBuildAdd(b, o, ic(m, 1 << 23), "");
	o_den = AS_INT(SUB(AS_FLT(o_den), AS_FLT(ic(m, 113 << 23))));
	o = SEL(ICMP(LLVMIntEQ, e, shexp), o_inf, SEL(ICMP(LLVMIntEQ, e, ic(m, 0)), o_den, o));
	o = LLVMBuildOr(b, o, LLVMBuildShl(b, LLVMBuildAnd(b, w, ic(m, 0x8000), ""), ic(m, 16), ""),
	                "");
	return AS_FLT(o);
}

LLVMValueRef
math_f32_to_bf16(LLVMBuilderRef b, LLVMValueRef x)
{
	M mm = mk(b, x), *m = &mm;
	LLVMContextRef cx = LLVMGetTypeContext(m->ft);
	LLVMValueRef u = AS_INT(x);
	LLVMValueRef hi = LLVMBuildLShr(b, u, ic(m, 16), "");
	LLVMValueRef nan = LLVMBuildOr(b, hi, ic(m, 0x40), "");
	LLVMValueRef r = LLVMBuildAdd(
	    b, u, LLVMBuildAdd(b, ic(m, 0x7fff), LLVMBuildAnd(b, hi, ic(m, 1), ""), ""), "");
	r = LLVMBuildLShr(b, r, ic(m, 16), "");
	r = SEL(FCMP(LLVMRealUNO, x, x), nan, r);
	return LLVMBuildTrunc(b, r, LLVMInt16TypeInContext(cx), "");
}

LLVMValueRef
math_bf16_to_f32(LLVMBuilderRef b, LLVMValueRef h)
{
	LLVMContextRef cx = LLVMGetTypeContext(LLVMTypeOf(h));
	LLVMTypeRef i32 = LLVMInt32TypeInContext(cx);
	LLVMValueRef w =
	    LLVMBuildShl(b, LLVMBuildZExt(b, h, i32, ""), LLVMConstInt(i32, 16, 0), "");
	return LLVMBuildBitCast(b, w, LLVMFloatTypeInContext(cx), "");
}
