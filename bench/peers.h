/* peers.h - the libraries kbench measures kcsd's kernels against.
 *
 * OpenBLAS (cblas_sgemm, cblas_sgemv) and oneDNN (matmul, softmax, layer
 * normalisation)
 * are optional: bench/CMakeLists.txt defines KB_HAVE_OPENBLAS / KB_HAVE_DNNL
 * when it finds them, and without them every function here reports "not
 * installed" instead of measuring. The plain-C peers (the STREAM triad, the
 * bias+GeLU epilogue) and the references live in kref.c.
 */
#ifndef KB_PEERS_H
#define KB_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- OpenBLAS ---------------------------------------------------------- */

/* NULL when OpenBLAS can be used, else why not ("not installed"). */
const char *ob_missing(void);
/* "OpenBLAS 0.3.21, core Zen, config ..." (or why it is missing). */
const char *ob_describe(void);
/* openblas_set_num_threads(n). */
void ob_threads(int n);
/* Row-major C[M,N] = A[M,K] * B, B is [K,N] or, with tb, [N,K]
 * (cblas_sgemm, alpha 1, beta 0). */
void ob_sgemm(int M, int N, int K, bool tb, const float *a, const float *b, float *c);
/* The same product at M = 1, as a BLAS user writes a GEMV: y[N] = x[K] * B
 * with B row-major [K,N] (cblas_sgemv, CblasTrans over the K x N matrix)
 * or, with tb, [N,K] (y = B x, CblasNoTrans over N x K); alpha 1, beta 0. */
void ob_sgemv(int N, int K, bool tb, const float *x, const float *b, float *y);

/* ---- oneDNN ------------------------------------------------------------- */

typedef struct OnePrim OnePrim;

/* NULL when oneDNN can be used, else why not. */
const char *one_missing(void);
/* "oneDNN 2.6.3 (OMP runtime)". */
const char *one_describe(void);
/* How its threads are set, for the table ("omp_set_num_threads(n) ..."). */
const char *one_threads_how(void);
/* Makes oneDNN's next primitives and executions use n threads; false when
 * the runtime cannot be told (the rows then say so). */
bool one_threads(int n);
/* Row-major (batched when B > 1) C[B,M,N] = A[B,M,K] * W[B,K,N] (W stored
 * [B,N,K] with tb); with bias (length N, broadcast over rows) and, when
 * gelu, a gelu_tanh post-op: one fused primitive. NULL on failure, with
 * the reason in why. Operands are bound at creation; one_run executes. */
OnePrim *one_matmul(int B, int M, int N, int K, bool tb, const float *a, const float *w,
                    const float *bias, bool gelu, float *c, char *why, size_t whylen);
/* softmax over the last axis of a [rows, cols] tensor (forward inference). */
OnePrim *one_softmax(int rows, int cols, const float *x, float *y, char *why, size_t whylen);
/* layer normalisation over the last axis of [rows, cols] with scale gamma
 * and shift beta (forward inference: statistics computed, not returned). */
OnePrim *one_layernorm(int rows, int cols, float eps, const float *x, const float *gamma,
                       const float *beta, float *y, char *why, size_t whylen);
/* y = gelu_tanh(x) (gelu) or logistic(x) over n floats: oneDNN's eltwise
 * primitive, its hand-written JIT kernels for the same math as the GeLU
 * and Sigmoid chains. */
OnePrim *one_eltwise(bool gelu, int64_t n, const float *x, float *y, char *why, size_t whylen);
/* The implementation oneDNN chose ("brg:avx512_core", ...). */
const char *one_impl(const OnePrim *p);
/* 0 on success. */
int one_run(OnePrim *p);
void one_free(OnePrim *p);

/* ---- plain C (kref.c, built with -O3 -march=native) ---------------------- */

/* STREAM triad task over [lo, hi): a = b + 3c. */
void kref_triad(float *restrict a, const float *restrict b, const float *restrict c, int64_t lo,
                int64_t hi);
/* The epilogue after sgemm: rows [r0, r1) of c[., n] become
 * gelu_tanh(c + bias) in place (MindSpore's tanh form). */
void kref_bias_gelu(float *c, const float *bias, int64_t n, int64_t r0, int64_t r1);
/* Naive row-major matmul in double, the reference when no BLAS exists. */
void kref_matmul(int B, int M, int N, int K, bool tb, const float *a, const float *b, float *c);

#endif
