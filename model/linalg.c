#include "linalg.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cblas.h>

void hs_gemm(int ta, int tb, int M, int N, int K, hs_real alpha, const hs_real *A, int lda,
             const hs_real *B, int ldb, hs_real beta, hs_real *C, int ldc)
{
    if (M == 0 || N == 0)
        return;
#ifdef HEADSCOPE_DOUBLE
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

void hs_linear_forward(hs_real *out, const hs_real *inp, const hs_real *w, const hs_real *b,
                       size_t N, int C, int OC)
{
    hs_real beta = 0;
    if (b) {
        for (size_t n = 0; n < N; n++)
            memcpy(out + n * OC, b, sizeof(hs_real) * OC);
        beta = 1;
    }
    hs_gemm(0, 1, (int)N, OC, C, 1, inp, C, w, C, beta, out, OC);
}

void hs_linear_backward(hs_real *dinp, hs_real *dw, hs_real *db, const hs_real *dout,
                        const hs_real *inp, const hs_real *w, size_t N, int C, int OC)
{
    if (dinp)
        hs_gemm(0, 0, (int)N, C, OC, 1, dout, OC, w, C, 1, dinp, C);
    if (dw)
        hs_gemm(1, 0, OC, C, (int)N, 1, dout, OC, inp, C, 1, dw, C);
    if (db) {
        /* Column sums, parallel over output columns so no two threads write
         * the same db entry. */
#pragma omp parallel for schedule(static)
        for (int o = 0; o < OC; o++) {
            hs_real s = 0;
            for (size_t n = 0; n < N; n++)
                s += dout[n * OC + o];
            db[o] += s;
        }
    }
}

#ifdef HEADSCOPE_DOUBLE
static inline double exp_nonpositive(double x) { return exp(x); }
#else
/* exp for x <= 0 in straight-line float arithmetic so that the row loop
 * vectorises (libm's expf does not). Cephes' polynomial on the range-reduced
 * argument: relative error about 2 ulp. Below -87 the result is clamped to
 * about 1e-38 rather than a denormal; masked entries never come here. */
static inline float exp_nonpositive(float x)
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
    union { int32_t i; float f; } scale = { .i = ((int32_t)n + 127) << 23 };
    return y * scale.f;
}
#endif

void hs_softmax_row(hs_real *row, const unsigned char *keep, int n)
{
    hs_real mx = -INFINITY;
    for (int s = 0; s < n; s++)
        if ((!keep || keep[s]) && row[s] > mx)
            mx = row[s];
    hs_real sum = 0;
    if (keep) {
        for (int s = 0; s < n; s++) {
            hs_real e = exp_nonpositive(row[s] - mx);
            row[s] = keep[s] ? e : 0;
            sum += row[s];
        }
    } else {
        for (int s = 0; s < n; s++) {
            row[s] = exp_nonpositive(row[s] - mx);
            sum += row[s];
        }
    }
    hs_real inv = 1 / sum;
    for (int s = 0; s < n; s++)
        row[s] *= inv;
}
