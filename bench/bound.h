/* The sweeps' lower bounds, shared by bench_ablate.c and bench_patch.c: the
 * FLOPs of one layer pass of the benchmarks' model, priced at the core's FMA
 * peak (peak.h: no GEMM runs faster, so no sweep can beat its bound); and,
 * printed beside it, the sgemm rate measured (hs_gemm, this process, its
 * threads) at the layer's shapes. */
#ifndef HS_BENCH_BOUND_H
#define HS_BENCH_BOUND_H

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "linalg.h"
#include "peak.h"

/* GFLOP per CPU second of one of `threads` threads at the FMA peak of the
 * build's vector width: the rate a bound in CPU seconds prices every FLOP
 * at. A build without AVX-512 in its loops (the --avx2-only emulation's,
 * scripts/avx2-only.cmake) is priced at the AVX2 peak, as on an AVX2 CPU. */
static inline double bench_peak_rate(int threads)
{
#ifdef __AVX512F__
    const int width = 0; /* the widest the CPU has */
#else
    const int width = 8;
#endif
    return peak_gflops_clock(threads, width, 0.2, 5, 1) / threads;
}

/* FLOPs of one layer over B sequences of T tokens, N = B*T: the q,k,v,o
 * projections (q, o: d x HD; k, v: d x GD), the causal half of the T x T
 * scores and of the mixing (T(T+1)/2 pairs, as the kernels compute it), and
 * the MLP (d x F up, F x d down; one more d x F for a gated MLP). */
static inline double bench_layer_flops(double B, double T, double d, double HD, double GD,
                                       double F, int gated)
{
    const double N = B * T;
    return 2.0 * N * d * (2 * HD + 2 * GD) + 2.0 * B * T * (T + 1) * HD +
           2.0 * N * d * F * (gated ? 3 : 2);
}

/* GFLOP per CPU second of hs_gemm on out (N,F) = x (N,d) w^T, w (F,d): median
 * of 9 after one warm-up. 0 when out of memory. */
static inline double bench_sgemm_rate(int N, int d, int F)
{
    hs_real *x = calloc((size_t)N * d, sizeof(hs_real)), *w = calloc((size_t)F * d, sizeof(hs_real));
    hs_real *out = calloc((size_t)N * F, sizeof(hs_real));
    double t[9] = { 0 };
    if (x && w && out) {
        for (size_t i = 0; i < (size_t)N * d; i++)
            x[i] = (hs_real)((i * 37 % 101) - 50) * 0.01f;
        for (size_t i = 0; i < (size_t)F * d; i++)
            w[i] = (hs_real)((i * 53 % 97) - 48) * 0.01f;
        for (int r = -1; r < 9; r++) {
            double t0 = process_cpu_s();
            hs_gemm(0, 1, N, F, d, 1, x, d, w, d, 0, out, F);
            if (r >= 0)
                t[r] = process_cpu_s() - t0;
        }
    }
    free(x), free(w), free(out);
    const double s = median(t, 9);
    return s > 0 ? 2.0 * N * d * F / s / 1e9 : 0;
}

/* GFLOP per CPU second over a layer's GEMMs at N rows (x d): qkv (d -> 3d),
 * o (d -> d), MLP up (d -> F) and down (F -> d); their FLOPs over their
 * summed times. */
static inline double bench_layer_sgemm_rate(int N, int d, int F)
{
    const int shape[4][2] = { { d, 3 * d }, { d, d }, { d, F }, { F, d } };
    double flops = 0, secs = 0;
    for (int i = 0; i < 4; i++) {
        const double f = 2.0 * N * shape[i][0] * shape[i][1];
        const double r = bench_sgemm_rate(N, shape[i][0], shape[i][1]);
        if (r <= 0)
            return 0;
        flops += f, secs += f / (r * 1e9);
    }
    return flops / secs / 1e9;
}

#endif
