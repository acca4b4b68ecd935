/* Helpers shared by the benchmark programs: a monotonic clock, medians, and
 * the process's memory figures from /proc. */
#ifndef HS_BENCH_UTIL_H
#define HS_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (all its threads). */
static inline double process_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:"), or -1. */
static inline long vm_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n))
            kib = atol(line + n + 1);
    if (f)
        fclose(f);
    return kib;
}

/* Resets the peak RSS (VmHWM) to the current RSS. */
static inline void reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* The benchmarks' model, bench/train_torch.py's architecture: learned
 * positions, pre-LayerNorm, biases, GELU MLP of 4d, tied unembedding. */
static inline hs_model_config bench_gelu_config(int L, int d, int H, int G, int T, int V, hs_family family)
{
    hs_model_config c;
    memset(&c, 0, sizeof c);
    c.family = family;
    c.vocab_size = V;
    c.n_layer = L;
    c.d_model = d;
    for (int l = 0; l < L; l++)
        c.n_head[l] = H, c.n_kv_head[l] = G;
    c.head_dim = d / H;
    c.n_ctx = T;
    c.pos = HS_POS_LEARNED;
    c.norm = HS_NORM_LAYERNORM;
    c.norm_eps = 1e-5;
    c.final_norm = 1;
    c.mlp = HS_MLP_GELU;
    c.d_ff = 4 * d;
    c.attn_bias = c.mlp_bias = c.norm_bias = 1;
    c.tie_embeddings = 1;
    c.init_std = 0.02; /* initializer_range: hs_config_check requires it */
    return c;
}

#endif
