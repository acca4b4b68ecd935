/* The C side of bench/python.sh: the forward of a GPT-2-shaped model (the
 * `gpt2` preset with its sizes overridden, randomly initialised from a seed:
 * the same model hs.Model.new builds) on one sequence, keeping every
 * layer's post-softmax maps in memory -- what run_with_cache of every
 * hook_pattern asks of the library -- and the plain forward without maps.
 *
 *   bench_python --config L,d,H,V,T --reps N [--threads N] [--seed S]
 *
 * prints one JSON line: the median seconds of each, and every repetition's,
 * after one warm-up of each. The maps are copied out of the forward's one
 * map buffer by the maps observer (hooks.on_maps), one layer at a time, into
 * a buffer of all of them allocated once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transformer.h"
#include "config_file.h"
#include "bench_util.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_python: %s: %s\n", what, hs_last_error());
    exit(1);
}

typedef struct {
    hs_real *maps; /* (L, B, H, T, T) */
    size_t per_layer;
} keep;

static int keep_maps(void *ctx, int layer, const hs_real *att, int B, int H, int T)
{
    keep *k = ctx;
    memcpy(k->maps + (size_t)layer * k->per_layer, att, sizeof(hs_real) * B * H * T * T);
    return HS_OK;
}

static void print_times(const char *name, double *t, int n)
{
    printf(",\"%s\":[", name);
    for (int i = 0; i < n; i++)
        printf("%s%.6f", i ? "," : "", t[i]);
    printf("]");
}

int main(int argc, char **argv)
{
    hs_runtime_init(argc, argv); /* headscope's default: passive OpenMP waits */
    int L = 12, d = 768, H = 12, V = 50257, T = 256, reps = 7, threads = 0;
    unsigned long long seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--config") && sscanf(v, "%d,%d,%d,%d,%d", &L, &d, &H, &V, &T) == 5)
            ;
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10);
        else {
            fprintf(stderr, "bench_python: unknown option %s\n", a);
            return 2;
        }
    }
    if (threads > 0)
        hs_set_threads(threads);
    char o[5][64];
    snprintf(o[0], sizeof o[0], "n_layer=%d", L);
    snprintf(o[1], sizeof o[1], "d_model=%d", d);
    snprintf(o[2], sizeof o[2], "n_head=%d", H);
    snprintf(o[3], sizeof o[3], "vocab_size=%d", V);
    snprintf(o[4], sizeof o[4], "n_ctx=%d", T > 1024 ? T : 1024);
    const char *ov[5] = { o[0], o[1], o[2], o[3], o[4] };
    hs_model_config c;
    hs_model m;
    if (hs_config_build(&c, "gpt2", ov, 5) || hs_model_init(&m, &c))
        die("model");
    hs_model_init_random(&m, seed);
    int32_t *tok = malloc(sizeof(int32_t) * T);
    unsigned long long s = seed * 2654435761ull + 1;
    for (int t = 0; t < T; t++) { /* any ids: the time does not depend on them */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[t] = (int32_t)((s >> 33) % (unsigned long long)V);
    }
    hs_acts maps_acts, plain_acts;
    if (hs_acts_alloc(&maps_acts, &c, 1, T, HS_ACTS_MAPS) ||
        hs_acts_alloc(&plain_acts, &c, 1, T, HS_ACTS_INFER))
        die("activations");
    keep k = { malloc(sizeof(hs_real) * (size_t)L * H * T * T), (size_t)H * T * T };
    if (!k.maps)
        die("maps");
    const hs_hooks hooks = { .ctx = &k, .on_maps = keep_maps };
    double *tc = calloc((size_t)reps, sizeof *tc), *tp = calloc((size_t)reps, sizeof *tp);
    for (int r = -1; r < reps; r++) { /* r = -1: the warm-up */
        double t0 = now_s();
        if (hs_forward(&maps_acts, &m, tok, NULL, &hooks))
            die("forward with maps");
        const double t1 = now_s();
        if (hs_forward(&plain_acts, &m, tok, NULL, NULL))
            die("forward");
        const double t2 = now_s();
        if (r >= 0)
            tc[r] = t1 - t0, tp[r] = t2 - t1;
    }
    printf("{\"impl\":\"c\",\"L\":%d,\"d\":%d,\"H\":%d,\"V\":%d,\"T\":%d,\"threads\":%d", L, d, H,
           V, T, hs_get_threads());
    print_times("capture_s_all", tc, reps);
    print_times("forward_s_all", tp, reps);
    printf(",\"capture_s\":%.6f,\"forward_s\":%.6f}\n", median(tc, reps), median(tp, reps));
    free(tc), free(tp), free(k.maps), free(tok);
    hs_acts_free(&maps_acts);
    hs_acts_free(&plain_acts);
    hs_model_free(&m);
    return 0;
}
