/* sgemm efficiency at the shapes a training step of bench/train.sh's models
 * runs (model/kernels/linalg.c's calls: forward out = inp . w^T, backward
 * dinp += dout . w and dw += dout^T . inp, for q, k, v, o, fc, proj and the
 * logits), GFLOP/s and % of the FMA peak (bench/peak.h) at that thread count,
 * OpenBLAS's cblas_sgemm and hs_gemm's path (HEADSCOPE_GEMM, default auto;
 * model/kernels/gemm.h) side by side, run alternately; with the process CPU time per
 * thread beside the elapsed time (the machine may be shared).
 *
 *   bench_gemm --threads N --config L,d,H,G,T [--batch B] [--vocab V] [--reps R]
 *              [--weights f32|bf16|f16] [--prepacked]
 *       one JSON line per distinct GEMM, then one per config: the step's GEMM
 *       FLOPs over their summed median time. --weights: hs_gemm reads the
 *       weights (B of the forward and dinp rows) held in that type
 *       (hs_sgemm_typed, widened as packed); OpenBLAS always their float copy.
 *       --prepacked: hs_gemm's forward and dinp rows read the weights packed
 *       once beforehand (hs_pack_weight, hs_sgemm_packed), as the commands of
 *       many forwards (and backwards) hold them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gemm.h"
#include "dtype.h"
#include "peak.h"

typedef struct {
    const char *name;
    int ta, tb, M, N, K, count; /* count: how often a step runs it */
} gemm_shape;

typedef struct {
    double wall, cpu; /* medians, seconds per call; cpu: per thread */
} gemm_time;

/* B16: B held as bt, read by the own path (NULL: B, floats); pk: B packed
 * beforehand, read by the own path (NULL: none) */
static void run_gemm(const gemm_shape *g, hs_gemm_path path, const float *A, const float *B,
                     const void *B16, hs_dtype bt, const hs_packed *pk, float *C)
{
    const int lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
    if (pk && path != HS_GEMM_OPENBLAS)
        hs_sgemm_packed(path, g->ta, g->M, g->N, g->K, 1.0f, A, lda, pk, 1.0f, NULL, C, g->N);
    else if (B16 && path != HS_GEMM_OPENBLAS)
        hs_sgemm_typed(path, g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, lda, B16, bt, ldb, 1.0f,
                       NULL, C, g->N);
    else
        hs_sgemm(path, g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, lda, B, ldb, 1.0f, C, g->N);
}

/* OpenBLAS (t[0]) and `own` (t[1]), alternating sample by sample. */
static void time_gemm(const gemm_shape *g, hs_gemm_path own, const float *A, const float *B,
                      const void *B16, hs_dtype bt, const hs_packed *pk, float *C, int reps,
                      int threads, gemm_time t[2])
{
    const hs_gemm_path paths[2] = { HS_GEMM_OPENBLAS, own };
    double w[2][32], c[2][32];
    const double flops = 2.0 * g->M * g->N * g->K;
    /* inner repeats so one sample lasts ~20 ms at ~100 GFLOP/s */
    int inner = (int)(2e9 / flops);
    inner = inner < 1 ? 1 : inner > 1000 ? 1000 : inner;
    for (int r = -1; r < reps; r++)
        for (int p = 0; p < 2; p++) {
            const double t0 = now_s(), c0 = process_cpu_s();
            for (int i = 0; i < inner; i++)
                run_gemm(g, paths[p], A, B, B16, bt, pk, C);
            if (r >= 0) {
                w[p][r] = (now_s() - t0) / inner;
                c[p][r] = (process_cpu_s() - c0) / inner / threads;
            }
        }
    for (int p = 0; p < 2; p++)
        t[p] = (gemm_time){ median(w[p], reps), median(c[p], reps) };
}

static void bench_config(int threads, double peak, hs_gemm_path own, hs_dtype wt, int prepacked,
                         int L, int d, int H, int G, int T, int Bsz, int V, int reps)
{
    const int N = Bsz * T, gd = G * (d / H);
    /* (name, in C, out OC, per step) of each linear */
    struct { const char *name; int C, OC, count; } lin[] = {
        { "q", d, d, L }, { "k", d, gd, L }, { "v", d, gd, L }, { "o", d, d, L },
        { "fc", d, 4 * d, L }, { "proj", 4 * d, d, L }, { "logits", d, V, 1 },
    };
    gemm_shape s[3 * 7];
    int ns = 0;
    for (int i = 0; i < 7; i++) {
        if (i == 2 && gd == lin[1].OC) { /* v has k's shapes: count it there */
            for (int j = ns - 3; j < ns; j++)
                s[j].count += L, s[j].name = "k,v";
            continue;
        }
        s[ns++] = (gemm_shape){ lin[i].name, 0, 1, N, lin[i].OC, lin[i].C, lin[i].count };
        s[ns++] = (gemm_shape){ lin[i].name, 0, 0, N, lin[i].C, lin[i].OC, lin[i].count };
        s[ns++] = (gemm_shape){ lin[i].name, 1, 0, lin[i].OC, lin[i].C, N, lin[i].count };
    }
    const char *kind[] = { "forward", "dinp", "dw" };
    double total_flops = 0, total_s[2] = { 0, 0 };
    for (int i = 0; i < ns; i++) {
        const gemm_shape *g = &s[i];
        float *A = malloc(sizeof(float) * g->M * g->K), *B = malloc(sizeof(float) * g->K * g->N),
              *C = calloc((size_t)g->M * g->N, sizeof(float));
        for (long j = 0; j < (long)g->M * g->K; j++)
            A[j] = (float)((j * 7919 % 1000) - 500) * 1e-3f;
        for (long j = 0; j < (long)g->K * g->N; j++)
            B[j] = (float)((j * 104729 % 1000) - 500) * 1e-3f;
        /* the weights (forward and dinp rows) as held: their top 16 bits (bf16) or halves */
        uint16_t *B16 = NULL;
        if (wt != HS_DT_F32 && i % 3 != 2) {
            B16 = malloc(sizeof(uint16_t) * (size_t)g->K * g->N);
            for (long j = 0; j < (long)g->K * g->N; j++) {
                uint32_t u;
                memcpy(&u, &B[j], sizeof u);
                B16[j] = wt == HS_DT_BF16 ? (uint16_t)(u >> 16) : hs_float_to_half(B[j]);
            }
        }
        hs_packed *pk = NULL;
        if (prepacked && i % 3 != 2 &&
            !(pk = hs_pack_weight(B16 ? (const void *)B16 : B, wt, g->tb, g->N, g->K))) {
            fprintf(stderr, "bench_gemm: packing (%d, %d): %s\n", g->N, g->K, hs_last_error());
            exit(1);
        }
        gemm_time t[2];
        time_gemm(g, own, A, B, B16, wt, pk, C, reps, threads, t);
        hs_packed_free(pk);
        free(B16);
        const double f = 2.0 * g->M * g->N * g->K;
        total_flops += f * g->count;
        total_s[0] += t[0].wall * g->count, total_s[1] += t[1].wall * g->count;
        printf("{\"impl\":\"sgemm\",\"threads\":%d,\"L\":%d,\"d\":%d,\"H\":%d,\"G\":%d,\"T\":%d,"
               "\"B\":%d,\"V\":%d,\"gemm\":\"%s %s\",\"trans\":\"%c%c\",\"weights\":\"%s\","
               "\"prepacked\":%d,\"M\":%d,\"N\":%d,"
               "\"K\":%d,\"per_step\":%d,\"ms\":%.4f,\"cpu_ms\":%.4f,\"gflops\":%.2f,"
               "\"own_ms\":%.4f,\"own_cpu_ms\":%.4f,\"own_gflops\":%.2f,\"peak_gflops\":%.2f,"
               "\"pct_peak\":%.1f,\"own_pct_peak\":%.1f}\n",
               threads, L, d, H, G, T, Bsz, V, g->name, kind[i % 3], g->ta ? 'T' : 'N',
               g->tb ? 'T' : 'N', wt == HS_DT_BF16 ? "bf16" : wt == HS_DT_F16 ? "f16" : "f32",
               pk != NULL, g->M, g->N, g->K, g->count, t[0].wall * 1e3, t[0].cpu * 1e3,
               f / t[0].wall * 1e-9, t[1].wall * 1e3, t[1].cpu * 1e3, f / t[1].wall * 1e-9, peak,
               100 * f / t[0].wall * 1e-9 / peak, 100 * f / t[1].wall * 1e-9 / peak);
        fflush(stdout);
        free(A), free(B), free(C);
    }
    printf("{\"impl\":\"sgemm_step\",\"threads\":%d,\"L\":%d,\"d\":%d,\"H\":%d,\"G\":%d,\"T\":%d,"
           "\"B\":%d,\"V\":%d,\"gemm_gflop\":%.3f,\"gemm_ms\":%.3f,\"gflops\":%.2f,"
           "\"own_gemm_ms\":%.3f,\"own_gflops\":%.2f,\"peak_gflops\":%.2f,\"pct_peak\":%.1f,"
           "\"own_pct_peak\":%.1f}\n",
           threads, L, d, H, G, T, Bsz, V, total_flops * 1e-9, total_s[0] * 1e3,
           total_flops / total_s[0] * 1e-9, total_s[1] * 1e3, total_flops / total_s[1] * 1e-9, peak,
           100 * total_flops / total_s[0] * 1e-9 / peak,
           100 * total_flops / total_s[1] * 1e-9 / peak);
}

int main(int argc, char **argv)
{
    int threads = 1, B = 4, V = 256, reps = 5, configs[16][5], nconf = 0, prepacked = 0;
    hs_dtype wt = HS_DT_F32;
    double peak = 0;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--prepacked")) {
            prepacked = 1, i--;
            continue;
        }
        int *c = configs[nconf < 16 ? nconf : 15];
        if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--batch"))
            B = atoi(v);
        else if (!strcmp(a, "--vocab"))
            V = atoi(v);
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--peak"))
            peak = atof(v);
        else if (!strcmp(a, "--weights") && (!strcmp(v, "f32") || !strcmp(v, "bf16") ||
                                             !strcmp(v, "f16")))
            wt = !strcmp(v, "bf16") ? HS_DT_BF16 : !strcmp(v, "f16") ? HS_DT_F16 : HS_DT_F32;
        else if (!strcmp(a, "--config") && nconf < 16 &&
                 sscanf(v, "%d,%d,%d,%d,%d", &c[0], &c[1], &c[2], &c[3], &c[4]) == 5)
            nconf++;
        else
            goto usage;
    }
    if (threads < 1 || B < 1 || V < 2 || reps < 1 || reps > 32 || !nconf)
        goto usage;
    hs_set_threads(threads);
    if (peak <= 0)
        peak = peak_gflops(threads, 0, 0.1, 5);
    for (int i = 0; i < nconf; i++)
        bench_config(threads, peak, hs_gemm_env_path(), wt, prepacked, configs[i][0],
                     configs[i][1], configs[i][2], configs[i][3], configs[i][4], B, V, reps);
    return 0;
usage:
    fprintf(stderr, "usage: bench_gemm [--threads N] [--batch B] [--vocab V] [--reps R] "
                    "[--peak GFLOPS] [--weights f32|bf16|f16] [--prepacked] "
                    "--config L,d,H,G,T ...\n");
    return 2;
}
