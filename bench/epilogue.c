/* epilogue.c - the peer of kcsd's fused MatMul+bias+GeLU: after sgemm, one
 * more pass over C in plain C, y = gelu_tanh(c + bias) in place, with the
 * formula and constants MindSpore writes (0.5 x (1 + tanh(0.79788458 (x +
 * 0.044715 x^3)))). Built with -O3 -march=native -ffast-math so GCC
 * vectorises it and calls glibc's vector tanhf (libmvec), which is what a
 * C programmer's epilogue gets. */
#include <math.h>

#include "peers.h"

void
kref_bias_gelu(float *c, const float *bias, int64_t n, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r++) {
		float *restrict row = c + r * n;
		for (int64_t j = 0; j < n; j++) {
			float v = row[j] + bias[j];
			row[j] = 0.5f * v *
			         (1.0f + tanhf(0.7978845834732056f *
			                       (v + 0.044714998453855515f * v * v * v)));
		}
	}
}
