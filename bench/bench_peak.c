/* The FMA peak of this machine (bench/peak.h): GFLOP/s at each thread count,
 * AVX2 and (where the CPU has it) AVX-512, median of the runs, by wall time
 * and per CPU second of each thread (gflops_per_cpu_s: the cores' rate on a
 * shared machine, without the time other processes held them); and its
 * read bandwidth, STREAM-style: a sum over a block far larger than the
 * caches (--read-mb, in 2 MiB pages), the bound of decoding, which reads
 * every weight once per token.
 *
 *   bench_peak [--threads "1 2"] [--seconds S] [--reps R] [--read-mb MB]
 *       one JSON line per (threads, width), then one per thread count. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "peak.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* GB/s reading n floats at x on t threads (each its contiguous share, 16
 * sums a thread so the adds never wait on each other), median of reps. */
static double read_gbps(const float *x, size_t n, int t, int reps)
{
    double best[64], sink = 0;
    if (reps > 64)
        reps = 64;
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        double total = 0;
#pragma omp parallel num_threads(t) reduction(+ : total)
        {
            const size_t per = n / (size_t)omp_get_num_threads() / 16 * 16;
            const float *p = x + per * (size_t)omp_get_thread_num();
            float acc[16] = { 0 };
            for (size_t i = 0; i < per; i += 16)
                for (int k = 0; k < 16; k++)
                    acc[k] += p[i + k];
            for (int k = 0; k < 16; k++)
                total += acc[k];
        }
        best[r] = (double)n * sizeof(float) / (now() - t0) / 1e9;
        sink += total;
    }
    qsort(best, (size_t)reps, sizeof best[0], by_value);
    if (sink == 1234.5) /* keeps the sums */
        printf("%g\n", sink);
    return best[reps / 2];
}

int main(int argc, char **argv)
{
    const char *threads = "1 2";
    double seconds = 0.2;
    int reps = 7;
    long read_mb = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads"))
            threads = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--read-mb"))
            read_mb = atol(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_peak [--threads \"1 2\"] [--seconds S] [--reps R] "
                            "[--read-mb MB]\n");
            return 2;
        }
    }
    long nt[16]; /* the thread counts */
    int n_nt = 0;
    for (const char *p = threads; *p && n_nt < 16;) {
        char *end;
        nt[n_nt] = strtol(p, &end, 10);
        if (end == p)
            break;
        p = end, n_nt++;
    }
    const int widths[] = { 8, 16 };
    for (int i = 0; i < n_nt; i++) {
        const long t = nt[i];
        for (int w = 0; w < 2; w++) {
            if (widths[w] == 16 && !peak_has_avx512())
                continue;
            const double g = peak_gflops((int)t, widths[w], seconds, reps);
            const double c = peak_gflops_clock((int)t, widths[w], seconds, reps, 1);
            printf("{\"impl\":\"fma_peak\",\"threads\":%ld,\"isa\":\"%s\",\"accumulators\":%d,"
                   "\"gflops\":%.2f,\"gflops_per_cpu_s\":%.2f}\n",
                   t, widths[w] == 16 ? "avx512" : "avx2", PEAK_ACC, g, c);
            fflush(stdout);
        }
    }
    const size_t n = (size_t)read_mb * (1 << 20) / sizeof(float);
    float *x = n ? aligned_alloc(2 << 20, n * sizeof(float)) : NULL;
    if (!x)
        return 0;
    (void)madvise(x, n * sizeof(float), MADV_HUGEPAGE);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(i & 1023);
    for (int i = 0; i < n_nt; i++) {
        printf("{\"impl\":\"read_bandwidth\",\"threads\":%ld,\"bytes\":%zu,\"gbps\":%.2f}\n",
               nt[i], n * sizeof(float), read_gbps(x, n, (int)nt[i], reps));
        fflush(stdout);
    }
    free(x);
    return 0;
}
