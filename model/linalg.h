/* Dense building blocks over hs_real: row-major GEMM (OpenBLAS), the linear
 * layer in nn.Linear's weight layout, and the row softmax the attention
 * kernels share. */
#ifndef HS_LINALG_H
#define HS_LINALG_H

#include <stddef.h>

#include "common.h"

/* C (M,N) = alpha * op(A) op(B) + beta * C, all row-major; op(A) is (M,K) and
 * op(B) is (K,N); ta/tb select the transposes. */
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

/* In place: row[0..n) <- softmax of row[0..n) where keep[s] != 0; entries
 * with keep[s] == 0 become exactly 0. keep == NULL keeps all. At least one
 * entry must be kept (the caller checks). */
void hs_softmax_row(hs_real *row, const unsigned char *keep, int n);

#endif
