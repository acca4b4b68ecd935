/* Dense building blocks over hs_real: row-major GEMM (OpenBLAS), the linear
 * layer in nn.Linear's weight layout, and the row softmax the attention
 * kernels share. */
#ifndef HS_LINALG_H
#define HS_LINALG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* Element-wise and softmax loops bound by arithmetic (an exp and a division
 * per entry): where the CPU has 512-bit vectors, use them (GCC otherwise prefers
 * 256 bits under -march=native); no effect elsewhere. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define HS_WIDE __attribute__((target("prefer-vector-width=512")))
#else
#define HS_WIDE
#endif

/* C (M,N) = alpha * op(A) op(B) + beta * C, all row-major; op(A) is (M,K) and
 * op(B) is (K,N); ta/tb select the transposes. Float: hs_sgemm (gemm.h) on
 * the path HEADSCOPE_GEMM names (default auto); double: OpenBLAS. */
void hs_gemm(int ta, int tb, int M, int N, int K, hs_real alpha, const hs_real *A, int lda,
             const hs_real *B, int ldb, hs_real beta, hs_real *C, int ldc);

/* out (N,OC) = inp (N,C) . w^T + b, with w (OC,C) as nn.Linear stores it and
 * b (OC) or NULL. */
void hs_linear_forward(hs_real *out, const hs_real *inp, const hs_real *w, const hs_real *b,
                       size_t N, int C, int OC);

/* Backward twin; accumulates: dinp (N,C) += dout . w, dw (OC,C) += dout^T . inp,
 * db (OC) += column sums of dout. Any of dinp, dw, db may be NULL. */
void hs_linear_backward(hs_real *dinp, hs_real *dw, hs_real *db, const hs_real *dout,
                        const hs_real *inp, const hs_real *w, size_t N, int C, int OC);

#ifdef HEADSCOPE_DOUBLE
static inline double hs_exp_nonpos(double x) { return exp(x); }
static inline double hs_tanh(double x) { return tanh(x); }
#else
/* hs_exp_nonpos: exp for x <= 0 in straight-line float arithmetic so that the row loop
 * vectorises (libm's expf does not). Cephes' polynomial on the range-reduced
 * argument: relative error about 2 ulp. Below -87 the result is clamped to
 * about 1e-38 rather than a denormal; masked entries never come here. */
static inline float hs_exp_nonpos(float x)
{
    x = x < -87.0f ? -87.0f : x;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (x * 1.44269504088896341f + magic) - magic;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    /* NaN x (non-finite weights): y is NaN already; the exponent must not
     * come from converting NaN to an integer (undefined behaviour) */
    const float nn = n == n ? n : 0.0f;
    union { uint32_t i; float f; } scale = { .i = (uint32_t)((int32_t)nn + 127) << 23 };
    return y * scale.f;
}

/* tanh from one exp of a non-positive argument; absolute error ~1e-7. */
static inline float hs_tanh(float x)
{
    float e = hs_exp_nonpos(-2.0f * (x < 0 ? -x : x));
    float t = (1.0f - e) / (1.0f + e);
    return x < 0 ? -t : t;
}
#endif

/* In place: row[0..n) <- softmax of row[0..n) where keep[s] != 0; entries
 * with keep[s] == 0 become exactly 0. keep == NULL keeps all. At least one
 * entry must be kept (the caller checks). */
void hs_softmax_row(hs_real *row, const unsigned char *keep, int n);

#endif
