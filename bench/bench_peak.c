/* The FMA peak of this machine (bench/peak.h): GFLOP/s at each thread count,
 * AVX2 and (where the CPU has it) AVX-512, median of the runs, by wall time
 * and per CPU second of each thread (gflops_per_cpu_s: the cores' rate on a
 * shared machine, without the time other processes held them).
 *
 *   bench_peak [--threads "1 2"] [--seconds S] [--reps R]
 *       one JSON line per (threads, width). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peak.h"

int main(int argc, char **argv)
{
    const char *threads = "1 2";
    double seconds = 0.2;
    int reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads"))
            threads = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_peak [--threads \"1 2\"] [--seconds S] [--reps R]\n");
            return 2;
        }
    }
    const int widths[] = { 8, 16 };
    for (const char *p = threads; *p;) {
        char *end;
        const long t = strtol(p, &end, 10);
        if (end == p)
            break;
        p = end;
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
    return 0;
}
