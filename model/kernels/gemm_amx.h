/* Single-precision GEMM on the AMX tile unit (Intel Sapphire Rapids and
 * later): each float is split into three bfloat16 parts, x = x0 + x1 + x2
 * (8 significant bits each, 24 in all: the float's own precision), and
 * a b is the sum of the six part products of order up to 2^-16 relative
 * (a0 b0, a0 b1, a1 b0, a0 b2, a1 b1, a2 b0), accumulated in float by the
 * tile unit's bf16 dot products. The three dropped products are below
 * 2^-24 of |a b|: the result carries float's accuracy (docs/library.md, "AMX").
 * Internal to model/kernels/gemm.c. */
#ifndef HS_GEMM_AMX_H
#define HS_GEMM_AMX_H

#include <stddef.h>

/* 1 if the CPU has AMX-BF16 and AVX512-BF16 and the kernel grants this
 * process the tile state (asked once). */
int hs_amx_runs(void);

/* Floats of packing space hs_sgemm_amx needs on nt threads. */
size_t hs_amx_work_floats(int nt);

/* C (M,N) = alpha op(A) op(B) + C, row-major, as cblas_sgemm with beta 1,
 * on nt threads (1: the calling thread), packing into work
 * (hs_amx_work_floats(nt), 64-byte aligned); zero: C starts from zero (is
 * only written); with bias (N) non-NULL, C = alpha op(A) op(B) + bias in
 * every row instead (C only written). Differences from a float GEMM, none
 * visible at the scales a model meets: alpha is applied to A before the
 * split; the tile unit treats bf16 parts and sums below 2^-126 as zero
 * (parts of entries below about 2^-110 are lost, and a result that float
 * would make subnormal is flushed); an infinite or NaN entry of A or B (or
 * one beyond bf16's largest, 3.39e38) makes every entry of C it reaches NaN
 * where float gives an infinity or NaN. */
void hs_sgemm_amx(int nt, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, int zero, const float *bias, float *C, int ldc,
                  float *work);

#endif
