/* The core's FMA peak, the denominator of every "% of peak" the benchmarks
 * print: 12 independent vector FMA chains per thread (enough to cover the
 * FMA latency on two ports), AVX-512 where the CPU has it, else AVX2+FMA,
 * chosen at run time. bench/peak prints it; bench_gemm and bench_train use it. */
#ifndef HS_BENCH_PEAK_H
#define HS_BENCH_PEAK_H

#include <immintrin.h>
#include <omp.h>

#include "bench_util.h"

enum { PEAK_ACC = 12 };

__attribute__((target("avx2,fma"))) static float peak_loop_avx2(long iters, float seed)
{
    __m256 acc[PEAK_ACC];
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(seed * 1e-7f);
    for (int j = 0; j < PEAK_ACC; j++)
        acc[j] = _mm256_set1_ps(seed + (float)j);
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < PEAK_ACC; j++)
            acc[j] = _mm256_fmadd_ps(acc[j], a, b);
    __m256 s = acc[0];
    for (int j = 1; j < PEAK_ACC; j++)
        s = _mm256_add_ps(s, acc[j]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

__attribute__((target("avx512f"))) static float peak_loop_avx512(long iters, float seed)
{
    __m512 acc[PEAK_ACC];
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(seed * 1e-7f);
    for (int j = 0; j < PEAK_ACC; j++)
        acc[j] = _mm512_set1_ps(seed + (float)j);
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < PEAK_ACC; j++)
            acc[j] = _mm512_fmadd_ps(acc[j], a, b);
    __m512 s = acc[0];
    for (int j = 1; j < PEAK_ACC; j++)
        s = _mm512_add_ps(s, acc[j]);
    return _mm512_reduce_add_ps(s);
}

/* 1 if the CPU (and OS) run AVX-512F. */
static inline int peak_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

/* GFLOP/s of `threads` threads each running the loop of `width` lanes (8:
 * AVX2, 16: AVX-512) for `iters` iterations: one timed run. cpu: per CPU
 * second of each thread (the process's CPU time over the thread count), the
 * cores' rate without the time other processes held them; else wall time. */
static inline double peak_run_clock(int threads, int width, long iters, int cpu)
{
    volatile float sink = 0;
    const double t0 = cpu ? process_cpu_s() : now_s();
#pragma omp parallel num_threads(threads)
    {
        const float seed = 1.0f + (float)omp_get_thread_num();
        const float r = width == 16 ? peak_loop_avx512(iters, seed) : peak_loop_avx2(iters, seed);
#pragma omp atomic
        sink += r;
    }
    const double t = (cpu ? (process_cpu_s() - t0) / threads : now_s() - t0);
    (void)sink;
    return 2.0 * PEAK_ACC * width * (double)iters * threads / t * 1e-9;
}

static inline double peak_run(int threads, int width, long iters)
{
    return peak_run_clock(threads, width, iters, 0);
}

/* Median GFLOP/s of `reps` runs (after one warm-up run) of about `seconds`
 * each; width 0: the widest the CPU has. */
static inline double peak_gflops_clock(int threads, int width, double seconds, int reps, int cpu)
{
    if (!width)
        width = peak_has_avx512() ? 16 : 8;
    long iters = 1 << 16;
    double g = peak_run(threads, width, iters); /* warm-up, sizes the runs */
    iters = (long)(seconds * g * 1e9 / (2.0 * PEAK_ACC * width * threads));
    if (iters < 1024)
        iters = 1024;
    double v[64];
    reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    for (int i = 0; i < reps; i++)
        v[i] = peak_run_clock(threads, width, iters, cpu);
    return median(v, reps);
}

static inline double peak_gflops(int threads, int width, double seconds, int reps)
{
    return peak_gflops_clock(threads, width, seconds, reps, 0);
}

#endif
