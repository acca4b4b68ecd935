/* Attention benchmarks on the C side; bench/attention.sh runs them beside
 * bench/attention_torch.py in the same run and tabulates the ratios.
 *
 *   bench_attention --threads N --shape B,T,d,h[,g] [--reps R] [--warmup W] [--causal 0|1]
 *       forward with per-head maps, and forward + backward, median ms; one
 *       JSON line per shape with the same keys and flop convention as
 *       attention_torch.py (the core counted as the full T x T square).
 *   bench_attention --threads N --gemm SIZE
 *       OpenBLAS sgemm GFLOP/s on SIZE^3: the practical limit of this machine.
 *   bench_attention --threads N --window W --shape B,T,d,h[,g] [--backward 0|1]
 *       sliding window W (0: global causal) at one shape, median ms of: the
 *       head kernel alone (q, k, v -> z, no maps: what attention costs), the
 *       module forward without maps (projections included), and with
 *       --backward 1 the module forward + backward with maps; bench/window.sh
 *       runs W = 0 and W > 0 side by side.
 *   bench_attention --decode --shape 1,T,d,h,g [--repeat-kv]
 *       incremental decoding of T tokens one at a time with the compact KV
 *       cache, or (--repeat-kv) with K/V expanded to h heads before each step
 *       as a repeat_interleave path does; reports peak RSS growth (VmHWM). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "attention.h"
#include "bench_util.h"

static hs_real *random_vec(size_t n, double scale, unsigned seed)
{
    hs_real *v = malloc(sizeof(hs_real) * n);
    srand(seed);
    for (size_t i = 0; i < n; i++)
        v[i] = (hs_real)(((double)rand() / RAND_MAX * 2 - 1) * scale);
    return v;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_attention: %s: %s\n", what, hs_last_error());
    exit(1);
}

typedef struct {
    int B, T, d, h, g;
} shape;

static int parse_shape(const char *s, shape *sh)
{
    int n = sscanf(s, "%d,%d,%d,%d,%d", &sh->B, &sh->T, &sh->d, &sh->h, &sh->g);
    if (n == 4)
        sh->g = sh->h;
    return n >= 4 ? 0 : -1;
}

static void bench_shape(const shape *sh, int threads, int reps, int warmup, int causal)
{
    hs_attn_config c = { .d_model = sh->d, .n_heads = sh->h, .n_kv_heads = sh->g };
    if (hs_attn_config_check(&c))
        die("config");
    const int B = sh->B, T = sh->T, d = sh->d;
    size_t np = hs_attn_param_count(&c), nx = (size_t)B * T * d;
    hs_real *params = random_vec(np, 1 / sqrt((double)d), 1), *grads = calloc(np, sizeof(hs_real));
    hs_attn_weights w, dw;
    hs_attn_weights_bind(&w, &c, params);
    hs_attn_weights_bind(&dw, &c, grads);
    hs_real *x = random_vec(nx, 1, 2), *gout = random_vec(nx, 1, 3);
    hs_real *out = malloc(sizeof(hs_real) * nx), *dx = malloc(sizeof(hs_real) * nx);
    hs_attn_mask mask = { causal, NULL, 0 };
    hs_attn_acts a;
    if (hs_attn_acts_alloc(&a, &c, B, T, T, T, 1))
        die("activations");

    double *fwd = malloc(sizeof(double) * reps), *fb = malloc(sizeof(double) * reps);
    for (int r = -warmup; r < reps; r++) {
        double t0 = now_s();
        if (hs_attn_forward(out, &a, &w, &c, x, NULL, NULL, &mask, NULL))
            die("forward");
        double t1 = now_s();
        /* forward + backward, gradients zeroed inside the timing as torch's
         * set_to_none + fresh allocation is inside its timing */
        memset(grads, 0, sizeof(hs_real) * np);
        memset(dx, 0, sizeof(hs_real) * nx);
        if (hs_attn_forward(out, &a, &w, &c, x, NULL, NULL, &mask, NULL) ||
            hs_attn_backward(dx, NULL, &dw, NULL, gout, &a, &w, &c, x, NULL, NULL, 0, &mask))
            die("forward+backward");
        double t2 = now_s();
        if (r >= 0) {
            fwd[r] = (t1 - t0) * 1e3;
            fb[r] = (t2 - t1) * 1e3;
        }
    }
    const double dh = (double)d / sh->h;
    const double flops = 2.0 * B * T * d * (2.0 * d + 2.0 * sh->g * dh) +
                         2.0 * 2.0 * B * sh->h * (double)T * T * dh;
    double fwd_ms = median(fwd, reps), fb_ms = median(fb, reps);
    printf("{\"impl\":\"headscope\",\"threads\":%d,\"B\":%d,\"T\":%d,\"d\":%d,\"h\":%d,\"g\":%d,"
           "\"causal\":%d,\"fwd_ms\":%.4f,\"fwdbwd_ms\":%.4f,\"fwd_gflops\":%.4f,\"reps\":%d}\n",
           threads, B, T, d, sh->h, sh->g, causal, fwd_ms, fb_ms, flops / (fwd_ms * 1e-3) / 1e9,
           reps);
    fflush(stdout);
    hs_attn_acts_free(&a);
    free(params), free(grads), free(x), free(gout), free(out), free(dx), free(fwd), free(fb);
}

/* Median ms of reps calls of the step selected by `what` (after warmup). */
enum { W_KERNEL, W_FWD, W_FWDBWD };
typedef struct {
    hs_attn_config c;
    hs_attn_weights w, dw;
    hs_real *params, *grads, *x, *gout, *out, *dx, *q, *k, *v, *z;
    int *win;
    hs_attn_acts plain, kept; /* forward without maps; with maps for the backward */
    int B, T;
} window_bench;

static void window_step(window_bench *wb, int what)
{
    const hs_attn_config *c = &wb->c;
    const int B = wb->B, T = wb->T, H = c->n_heads, G = c->n_kv_heads, dh = c->d_model / H;
    const hs_attn_mask causal = { 1, NULL, 0 };
    if (what == W_KERNEL) {
        hs_kv_view kv = { wb->k, wb->v, (size_t)T * G * dh, (size_t)dh, (size_t)G * dh, T };
        if (hs_attn_heads_forward(wb->z, NULL, wb->q, &kv, &causal, c->window ? wb->win : NULL, 0,
                                  B, T, H, G, dh, NULL))
            die("head kernel");
    } else if (what == W_FWD) {
        if (hs_attn_forward(wb->out, &wb->plain, &wb->w, c, wb->x, NULL, NULL, &causal, NULL))
            die("forward");
    } else {
        memset(wb->grads, 0, sizeof(hs_real) * hs_attn_param_count(c));
        memset(wb->dx, 0, sizeof(hs_real) * B * T * c->d_model);
        if (hs_attn_forward(wb->out, &wb->kept, &wb->w, c, wb->x, NULL, NULL, &causal, NULL) ||
            hs_attn_backward(wb->dx, NULL, &wb->dw, NULL, wb->gout, &wb->kept, &wb->w, c, wb->x,
                             NULL, NULL, 0, &causal))
            die("forward+backward");
    }
}

static double window_time(window_bench *wb, int what, int reps, int warmup)
{
    double *t = malloc(sizeof(double) * reps);
    for (int r = -warmup; r < reps; r++) {
        double t0 = now_s();
        window_step(wb, what);
        if (r >= 0)
            t[r] = (now_s() - t0) * 1e3;
    }
    double ms = median(t, reps);
    free(t);
    return ms;
}

static void bench_window(const shape *sh, int threads, int reps, int warmup, int window,
                         int backward)
{
    window_bench wb = { .c = { .d_model = sh->d, .n_heads = sh->h, .n_kv_heads = sh->g,
                               .window = window },
                        .B = sh->B, .T = sh->T };
    if (hs_attn_config_check(&wb.c))
        die("config");
    const int B = sh->B, T = sh->T, d = sh->d, H = sh->h, dh = d / H, GD = sh->g * dh;
    size_t np = hs_attn_param_count(&wb.c), nx = (size_t)B * T * d;
    wb.params = random_vec(np, 1 / sqrt((double)d), 1);
    wb.grads = calloc(np, sizeof(hs_real));
    hs_attn_weights_bind(&wb.w, &wb.c, wb.params);
    hs_attn_weights_bind(&wb.dw, &wb.c, wb.grads);
    wb.x = random_vec(nx, 1, 2), wb.gout = random_vec(nx, 1, 3);
    wb.out = malloc(sizeof(hs_real) * nx), wb.dx = malloc(sizeof(hs_real) * nx);
    wb.q = random_vec((size_t)B * T * H * dh, 1, 4), wb.z = malloc(sizeof(hs_real) * B * T * H * dh);
    wb.k = random_vec((size_t)B * T * GD, 1, 5), wb.v = random_vec((size_t)B * T * GD, 1, 6);
    wb.win = malloc(sizeof(int) * H);
    for (int h = 0; h < H; h++)
        wb.win[h] = window;
    if (hs_attn_acts_alloc(&wb.plain, &wb.c, B, T, T, T, 0))
        die("activations");
    double kernel_ms = window_time(&wb, W_KERNEL, reps, warmup);
    double fwd_ms = window_time(&wb, W_FWD, reps, warmup);
    hs_attn_acts_free(&wb.plain);
    double fb_ms = 0;
    if (backward) {
        if (hs_attn_acts_alloc(&wb.kept, &wb.c, B, T, T, T, 1))
            die("activations with maps");
        fb_ms = window_time(&wb, W_FWDBWD, reps, warmup);
        hs_attn_acts_free(&wb.kept);
    }
    /* Score and mix flops the kernel needs: each query's visible keys. */
    double keys = 0;
    for (int t = 0; t < T; t++)
        keys += window && window < t + 1 ? window : t + 1;
    const double core = 2.0 * 2.0 * B * H * keys * dh;
    printf("{\"impl\":\"headscope_window\",\"threads\":%d,\"B\":%d,\"T\":%d,\"d\":%d,\"h\":%d,"
           "\"g\":%d,\"window\":%d,\"kernel_fwd_ms\":%.4f,\"fwd_ms\":%.4f,\"fwdbwd_ms\":%.4f,"
           "\"kernel_gflops\":%.4f,\"reps\":%d}\n",
           threads, B, T, d, H, sh->g, window, kernel_ms, fwd_ms, fb_ms,
           core / (kernel_ms * 1e-3) / 1e9, reps);
    fflush(stdout);
    free(wb.params), free(wb.grads), free(wb.x), free(wb.gout), free(wb.out), free(wb.dx);
    free(wb.q), free(wb.k), free(wb.v), free(wb.z), free(wb.win);
}

static void bench_gemm(int n, int threads, int reps)
{
    float *A = malloc(sizeof(float) * n * n), *Bm = malloc(sizeof(float) * n * n),
          *C = malloc(sizeof(float) * n * n);
    for (int i = 0; i < n * n; i++)
        A[i] = Bm[i] = 0.001f * (i % 97);
    double *t = malloc(sizeof(double) * reps);
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, A, n, Bm, n, 0, C, n);
        if (r >= 0)
            t[r] = now_s() - t0;
    }
    double s = median(t, reps);
    printf("{\"impl\":\"openblas_sgemm\",\"threads\":%d,\"n\":%d,\"ms\":%.4f,\"gflops\":%.4f}\n",
           threads, n, s * 1e3, 2.0 * n * n * n / s / 1e9);
    free(A), free(Bm), free(C), free(t);
}

/* Decodes T tokens one at a time. With repeat_kv the grouped cache is copied
 * into an h-head temporary before each step (what K/V repetition costs);
 * otherwise the kernel reads the compact cache by index. */
static void bench_decode(const shape *sh, int repeat_kv)
{
    hs_attn_config c = { .d_model = sh->d, .n_heads = sh->h, .n_kv_heads = sh->g };
    if (hs_attn_config_check(&c))
        die("config");
    const int T = sh->T, d = sh->d, H = sh->h, G = sh->g, dh = d / H;
    hs_real *params = random_vec(hs_attn_param_count(&c), 1 / sqrt((double)d), 1);
    hs_attn_weights w;
    hs_attn_weights_bind(&w, &c, params);
    hs_real *x = random_vec((size_t)T * d, 1, 2), *out = malloc(sizeof(hs_real) * d);
    hs_kv_cache cache;
    if (hs_kv_cache_init(&cache, 1, G, dh, T))
        die("cache");
    hs_real *rk = NULL, *rv = NULL;
    if (repeat_kv) {
        rk = malloc(sizeof(hs_real) * (size_t)H * T * dh);
        rv = malloc(sizeof(hs_real) * (size_t)H * T * dh);
    }
    hs_attn_mask mask = { 1, NULL, 0 };
    reset_peak_rss();
    long rss0 = vm_kib("VmRSS:");
    double t0 = now_s();
    hs_attn_acts a;
    if (hs_attn_acts_alloc(&a, &c, 1, 1, 1, 1, 0))
        die("activations");
    for (int t = 0; t < T; t++) {
        if (hs_attn_forward(out, &a, &w, &c, x + (size_t)t * d, NULL, NULL, &mask, &cache))
            die("decode step");
        if (repeat_kv) {
            /* Touch the repeated copy as a repeat_interleave path would build
             * it for the next step's attention. */
            for (int h = 0; h < H; h++)
                for (int s = 0; s < cache.len; s++) {
                    size_t src = ((size_t)(h / (H / G)) * cache.cap + s) * dh;
                    memcpy(rk + ((size_t)h * T + s) * dh, cache.k + src, sizeof(hs_real) * dh);
                    memcpy(rv + ((size_t)h * T + s) * dh, cache.v + src, sizeof(hs_real) * dh);
                }
        }
    }
    double secs = now_s() - t0;
    long peak = vm_kib("VmHWM:");
    double cache_bytes = 2.0 * G * T * dh * sizeof(hs_real);
    printf("{\"impl\":\"headscope_decode\",\"path\":\"%s\",\"T\":%d,\"d\":%d,\"h\":%d,\"g\":%d,"
           "\"cache_bytes\":%.0f,\"peak_growth_kib\":%ld,\"ms_per_token\":%.4f}\n",
           repeat_kv ? "repeat_kv" : "compact", T, d, H, G, cache_bytes, peak - rss0,
           secs * 1e3 / T);
    hs_attn_acts_free(&a);
    hs_kv_cache_free(&cache);
    free(params), free(x), free(out), free(rk), free(rv);
}

int main(int argc, char **argv)
{
    hs_runtime_init(argc, argv); /* headscope's default: passive OpenMP waits */
    int threads = 1, reps = 10, warmup = 2, causal = 1, gemm = 0, decode = 0, repeat_kv = 0;
    int window = -1, backward = 1;
    shape shapes[16];
    int nshape = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--decode"))
            decode = 1;
        else if (!strcmp(a, "--repeat-kv"))
            repeat_kv = 1;
        else if (!v)
            goto usage;
        else if (!strcmp(a, "--threads"))
            threads = atoi(v), i++;
        else if (!strcmp(a, "--reps"))
            reps = atoi(v), i++;
        else if (!strcmp(a, "--warmup"))
            warmup = atoi(v), i++;
        else if (!strcmp(a, "--causal"))
            causal = atoi(v), i++;
        else if (!strcmp(a, "--window"))
            window = atoi(v), i++;
        else if (!strcmp(a, "--backward"))
            backward = atoi(v), i++;
        else if (!strcmp(a, "--gemm"))
            gemm = atoi(v), i++;
        else if (!strcmp(a, "--shape") && nshape < 16 && !parse_shape(v, &shapes[nshape]))
            nshape++, i++;
        else
            goto usage;
    }
    if (threads < 1 || reps < 1 || warmup < 0)
        goto usage;
    hs_set_threads(threads);
    if (gemm)
        bench_gemm(gemm, threads, reps);
    for (int i = 0; i < nshape; i++) {
        if (decode)
            bench_decode(&shapes[i], repeat_kv);
        else if (window >= 0)
            bench_window(&shapes[i], threads, reps, warmup, window, backward);
        else
            bench_shape(&shapes[i], threads, reps, warmup, causal);
    }
    return 0;
usage:
    fprintf(stderr, "usage: bench_attention [--threads N] [--reps R] [--warmup W] [--causal 0|1]\n"
                    "                       [--gemm SIZE] [--decode [--repeat-kv]] "
                    "[--window W [--backward 0|1]] "
                    "--shape B,T,d,h[,g] ...\n");
    return 2;
}
