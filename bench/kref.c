/* kref.c - plain-C peers and references for kbench, built with
 * -O3 -march=native (bench/CMakeLists.txt) so the compiler vectorises them
 * for the host, as a C programmer's own loop would be.
 *   kref_triad    the STREAM triad (the bandwidth roofline of the rows
 *                 that only move data)
 *   kref_matmul   a naive double-accumulating matmul: the correctness
 *                 reference when neither OpenBLAS nor oneDNN is installed
 * The bias+GeLU epilogue is in epilogue.c (it also needs -ffast-math). */
#include "peers.h"

void
kref_triad(float *restrict a, const float *restrict b, const float *restrict c, int64_t lo,
           int64_t hi)
{
	for (int64_t i = lo; i < hi; i++)
		a[i] = b[i] + 3.0f * c[i];
}

void
kref_matmul(int B, int M, int N, int K, bool tb, const float *a, const float *b, float *c)
{
	for (int64_t z = 0; z < B; z++) {
		const float *az = a + z * M * K, *bz = b + z * K * N;
		float *cz = c + z * M * N;
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++) {
				double s = 0;
				for (int64_t k = 0; k < K; k++)
					s += (double)az[i * K + k] *
					     (tb ? bz[j * K + k] : bz[k * N + j]);
				cz[i * N + j] = (float)s;
			}
	}
}
