/* Single-precision GEMM of our own beside OpenBLAS's: a packed, cache-blocked
 * GEMM (GotoBLAS/BLIS structure) with an AVX-512 (12x32) and an AVX2 (6x16)
 * microkernel chosen at run time, and on CPUs with AMX a path on the tile
 * unit (gemm_amx.h). hs_gemm (linalg.h) runs each where docs/library.md ("Own
 * GEMM", "AMX") measured it faster than OpenBLAS. */
#ifndef HS_GEMM_H
#define HS_GEMM_H

#include "dtype.h"

/* Which GEMM runs. AUTO: the measured winner for the shape and CPU. */
typedef enum {
    HS_GEMM_AUTO,
    HS_GEMM_OPENBLAS,
    HS_GEMM_AVX2,
    HS_GEMM_AVX512,
    HS_GEMM_AMX /* model/kernels/gemm_amx.h */
} hs_gemm_path;

/* The environment's choice, HEADSCOPE_GEMM=auto|openblas|avx2|avx512|amx,
 * read once. Unset, an unknown value, or a path this CPU cannot run read as
 * AUTO (there is no place below cli/ to report a typo). */
hs_gemm_path hs_gemm_env_path(void);

/* 1 if this CPU (and build) can run the path. */
int hs_gemm_path_runs(hs_gemm_path path);

/* C (M,N) = alpha * op(A) op(B) + beta * C, row-major, as cblas_sgemm; with
 * beta 0, C is only written (NaN there does not propagate). A path the CPU
 * cannot run falls back to AUTO. Inside an OpenMP parallel region it runs
 * on the calling thread only; outside, on omp_get_max_threads() threads. */
void hs_sgemm(hs_gemm_path path, int ta, int tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* C (M,N) = alpha * op(A) op(B) + bias, the row bias (N) added to every row
 * (a linear layer's forward): as hs_sgemm after copying bias into every row
 * of C with beta 1, without that pass over C where the path can start from
 * the bias itself (AMX). C is only written. */
void hs_sgemm_bias(hs_gemm_path path, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, const float *bias, float *C,
                   int ldc);

/* B is held in an hs_dtype (dtype.h: F32, BF16 or F16): a model's weights as
 * stored. */

/* hs_sgemm (bias NULL) or hs_sgemm_bias (bias non-NULL, beta unused) with B
 * held as bt: BF16 and F16 are widened to float exactly where B is read.
 * The result equals the same call's on a float copy of B bit for bit (the
 * same path, the same products summed in the same order). Our kernels
 * widen B as they pack it (a few rows: one column block of B at a time);
 * OpenBLAS and AMX are handed a float copy of B for the call -- except
 * that AUTO runs ours instead of OpenBLAS where that copy would pass 64 MiB
 * (the result is then our kernel's on the float copy). */
void hs_sgemm_typed(hs_gemm_path path, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const void *B, hs_dtype bt, int ldb, float beta,
                    const float *bias, float *C, int ldc);

/* A linear layer's weight (N, K) -- op(B) = B^T, rows of K elements --
 * pre-packed once into the panels the kernels read, in its own dtype (F32
 * or BF16: bfloat16 is widened exactly as the kernel loads it), in 2 MiB
 * pages: for commands that run many forwards over the same weights, which
 * then skip the per-call packing (and the float copy OpenBLAS would need).
 * The layout follows the kernel this CPU runs (AVX-512: 32 columns a
 * panel; AVX2: 16) and the products the process computes when it packs
 * (hs_compute below: under BF16, a BF16 weight of even K is packed as the
 * bfloat16 products' pairs, which then serve only those products). */
typedef struct hs_packed hs_packed;

/* Bytes hs_pack_weight would hold for (N, K) of type t (0: not packable:
 * another dtype, or no AVX2 kernel on this CPU). */
size_t hs_packed_bytes(hs_dtype t, int N, int K);

/* The panels of op(B), K x N, in memory counted as held (base/memory.h):
 * tb 1, op(B) = B^T of B's N rows of K elements of type t (a linear
 * layer's weight in the forward); tb 0, op(B) = B of K rows of N elements
 * (the same weight in the backward's input gradient, K its outputs), never
 * in bfloat16 products' pairs. B is kept: the packed weight points back at
 * it. NULL when not packable or the memory is not there (the message set).
 * Packed on omp_get_max_threads() threads. */
hs_packed *hs_pack_weight(const void *B, hs_dtype t, int tb, int N, int K);

void hs_packed_free(hs_packed *pk);

/* The weight a packed one was made from, and op(B)'s shape (K x N). */
const void *hs_packed_source(const hs_packed *pk, int *N, int *K);

/* hs_sgemm_typed(path, ta, tb, M, N, K, ..., B, t, tb ? K : N, ...) over
 * pk's weight B: with path AUTO (or the panels' own kernel's), our kernel on the
 * panels -- the result equals that kernel's on the float copy of B bit for
 * bit, where AUTO without panels might have run OpenBLAS or AMX; bfloat16
 * products on panels packed in pairs equal the same products packing B per
 * call; a call that reads B otherwise (a few rows, products the panels were
 * not packed for, another path) goes the unpacked way. */
void hs_sgemm_packed(hs_gemm_path path, int ta, int M, int N, int K, float alpha, const float *A,
                     int lda, const hs_packed *pk, float beta, const float *bias, float *C,
                     int ldc);

/* How the products of 16-bit weights are computed. F32: widened exactly
 * (above). BF16: on CPUs with AVX512-BF16, products of bfloat16 pairs summed
 * into floats (vdpbf16ps) wherever B is bfloat16, op(B) = B^T (a linear
 * layer's weights), op(A) = A and M > 4: each element of A rounded to
 * bfloat16 (to nearest, ties to even) as it is packed, so each entry of C
 * moves from the F32 result by at most 2^-8 sum_k |A_ik B_kj| (the rounding
 * of A; bfloat16 products are exact in float) plus float's own summation
 * error; NaN and infinities propagate, bfloat16 subnormals count as zero.
 * Every other product runs as under F32. */
typedef enum { HS_COMPUTE_F32, HS_COMPUTE_BF16 } hs_compute;

/* The process's mode: HEADSCOPE_COMPUTE=f32|bf16 until hs_gemm_set_compute
 * is called. Setting BF16 on a CPU without AVX512-BF16 fails (returns -1,
 * the mode unchanged). */
int hs_gemm_set_compute(hs_compute c);
/* The same by name, "f32" or "bf16": HS_OK, or HS_EINVAL with the reason
 * (hs_last_error: an unknown name, or no AVX512-BF16). */
int hs_gemm_set_compute_name(const char *name);
hs_compute hs_gemm_compute(void);

/* 1 if this CPU (and build) computes BF16 products as above. */
int hs_gemm_bf16_runs(void);

#endif
