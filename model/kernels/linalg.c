#include "linalg.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cblas.h>

#include "gemm.h"
#include "stored.h"

void hs_gemm(int ta, int tb, int M, int N, int K, hs_real alpha, const hs_real *A, int lda,
             const hs_real *B, int ldb, hs_real beta, hs_real *C, int ldc)
{
    if (M == 0 || N == 0)
        return;
#ifdef HEADSCOPE_DOUBLE
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    /* our packed GEMM or OpenBLAS, whichever docs/library.md measured faster
     * for the shape (HEADSCOPE_GEMM forces one); a weight held as stored
     * (stored.h) is widened where the GEMM reads it */
    const void *Bs;
    hs_dtype bt;
    if (!hs_stored_find(B, &Bs, &bt)) { /* activations: one lookup */
        hs_sgemm(hs_gemm_env_path(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const hs_packed *pk = tb && ldb == K    ? hs_stored_packed(B, N, K, 1)
                          : !tb && ldb == N ? hs_stored_packed(B, K, N, 0)
                                            : NULL;
    if (pk)
        hs_sgemm_packed(hs_gemm_env_path(), ta, M, N, K, alpha, A, lda, pk, beta, NULL, C, ldc);
    else
        hs_sgemm_typed(hs_gemm_env_path(), ta, tb, M, N, K, alpha, A, lda, Bs, bt, ldb, beta,
                       NULL, C, ldc);
#endif
}

void hs_linear_forward(hs_real *out, const hs_real *inp, const hs_real *w, const hs_real *b,
                       size_t N, int C, int OC)
{
#ifndef HEADSCOPE_DOUBLE
    if (b) { /* the bias rows in the GEMM's first pass over out */
        const void *ws;
        hs_dtype wt;
        const hs_packed *pk = hs_stored_packed(w, OC, C, 1);
        if (pk)
            hs_sgemm_packed(hs_gemm_env_path(), 0, (int)N, OC, C, 1, inp, C, pk, 1, b, out, OC);
        else if (hs_stored_find(w, &ws, &wt))
            hs_sgemm_typed(hs_gemm_env_path(), 0, 1, (int)N, OC, C, 1, inp, C, ws, wt, C, 1, b,
                           out, OC);
        else
            hs_sgemm_bias(hs_gemm_env_path(), 0, 1, (int)N, OC, C, 1, inp, C, w, C, b, out, OC);
        return;
    }
#endif
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
        /* Column sums: each thread owns a contiguous block of columns and
         * walks the rows, so the inner loop is contiguous and no two threads
         * write the same db entry. */
        enum { COLS = 64 };
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, OC))
        for (int o0 = 0; o0 < OC; o0 += COLS) {
            const int o1 = o0 + COLS < OC ? o0 + COLS : OC;
            hs_real acc[COLS] = { 0 };
            for (size_t n = 0; n < N; n++) {
                const hs_real *row = dout + n * OC;
                for (int o = o0; o < o1; o++)
                    acc[o - o0] += row[o];
            }
            for (int o = o0; o < o1; o++)
                db[o] += acc[o - o0];
        }
    }
}

HS_WIDE void hs_softmax_row(hs_real *row, const unsigned char *keep, int n)
{
    /* omp simd: the reductions vectorise without reassociating anything
     * else in the program. */
    hs_real mx = -INFINITY, sum = 0;
    if (keep) {
        for (int s = 0; s < n; s++)
            if (keep[s] && row[s] > mx)
                mx = row[s];
#pragma omp simd reduction(+ : sum)
        for (int s = 0; s < n; s++) {
            hs_real e = hs_exp_nonpos(row[s] - mx);
            row[s] = keep[s] ? e : 0;
            sum += row[s];
        }
    } else {
#pragma omp simd reduction(max : mx)
        for (int s = 0; s < n; s++)
            mx = row[s] > mx ? row[s] : mx;
#pragma omp simd reduction(+ : sum)
        for (int s = 0; s < n; s++) {
            row[s] = hs_exp_nonpos(row[s] - mx);
            sum += row[s];
        }
    }
    const hs_real inv = 1 / sum;
#pragma omp simd
    for (int s = 0; s < n; s++)
        row[s] *= inv;
}
