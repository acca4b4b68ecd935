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

void hs_softmax_row(hs_real *row, const unsigned char *keep, int n)
{
    hs_real mx = -INFINITY;
    for (int s = 0; s < n; s++)
        if ((!keep || keep[s]) && row[s] > mx)
            mx = row[s];
    hs_real sum = 0;
    if (keep) {
        for (int s = 0; s < n; s++) {
            hs_real e = hs_exp_nonpos(row[s] - mx);
            row[s] = keep[s] ? e : 0;
            sum += row[s];
        }
    } else {
        for (int s = 0; s < n; s++) {
            row[s] = hs_exp_nonpos(row[s] - mx);
            sum += row[s];
        }
    }
    hs_real inv = 1 / sum;
    for (int s = 0; s < n; s++)
        row[s] *= inv;
}
