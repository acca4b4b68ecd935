/* Activation patching's cost, for bench/patch.sh:
 *
 *   bench_patch --model DIR --prompts FILE [--threads N] [--repeats R] [--dump FILE]
 *
 * One JSON line: the median CPU and wall seconds of hs_patch over every
 * head's z (the fast path, all prompts of the file in one batch), the
 * sweep's lower bound in CPU seconds
 * and what it is made of: the FLOPs an exact patch of every head must spend
 * -- the clean and corrupt forwards, then per head (l,h) its change of the
 * attention output (z' - z) W_o^(h), the MLP of layer l and every layer above
 * on all positions, and the unembedding of the last position -- at the FMA
 * peak of the same threads (bound.h; the sgemm rate measured here on the
 * MLP's shape, tokens x d times d x 4d, printed beside it). tight_bound_s:
 * the same knowing that only the last position's logits are read (the last
 * layer: keys and values at every position, the rest at the last one).
 * --dump writes {"patch_z": [[..H..]..L..]}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "bound.h"
#include "checkpoint.h"
#include "linalg.h"
#include "patch.h"
#include "stats.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_patch: %s: %s\n", what, hs_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    hs_runtime_init(argc, argv); /* headscope's default: passive OpenMP waits */
    const char *model = NULL, *prompts = NULL, *dump = NULL;
    int threads = 1, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--prompts"))
            prompts = argv[i + 1];
        else if (!strcmp(argv[i], "--dump"))
            dump = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats"))
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_patch: unknown option %s (see the comment at the top)\n", argv[i]);
            return 2;
        }
    }
    if (!model || !prompts || reps < 1 || reps > 64)
        die("--model and --prompts are required, --repeats 1..64");
    hs_set_threads(threads);
    hs_model m;
    hs_prompt_set ps;
    if (hs_checkpoint_load(&m, model))
        die("load");
    const hs_model_config *c = &m.cfg;
    if (hs_prompts_load(&ps, prompts, NULL, c->vocab_size, c->n_ctx))
        die("prompts");
    if (ps.n_group != 1)
        die("the prompts must have one length");
    hs_patch_opts o = { .sites = 1 << HS_PATCH_Z, .batch = ps.n };
    hs_patch_result r = { 0 };
    double t[64], w[64];
    for (int i = 0; i < reps; i++) {
        hs_patch_result_free(&r);
        double t0 = process_cpu_s(), w0 = now_s();
        if (hs_patch(&r, &m, &ps, &o))
            die("patch");
        t[i] = process_cpu_s() - t0, w[i] = now_s() - w0;
    }
    const double ours = median(t, reps), ours_wall = median(w, reps);

    /* The lower bound's FLOPs: B prompts of T tokens, N = B*T. */
    const double B = ps.n, T = ps.group[0].T, N = B * T, d = c->d_model, F = c->d_ff;
    const double V = c->vocab_size, dh = c->head_dim;
    const double layer = bench_layer_flops(B, T, d, d, d, F, 0);
    const double mlp = 4.0 * N * d * F, unembed_last = 2.0 * B * d * V;
    const int L = c->n_layer;
    double flops = 2 * (L * layer + unembed_last), tight = flops;
    /* The tight bound also knows that only the last position's logits are
     * read: the last layer needs its keys and values at every position and
     * the rest at the last one. */
    const double HD = (double)c->n_head[L - 1] * dh, GD = (double)c->n_kv_head[L - 1] * dh;
    const double top = 4.0 * N * d * GD + 2.0 * B * d * HD + 4.0 * B * T * HD + 2.0 * B * HD * d +
                       4.0 * B * d * F;
    for (int l = 0; l < L; l++) {
        flops += c->n_head[l] * (2.0 * N * dh * d + mlp + (L - 1 - l) * layer + unembed_last);
        tight += c->n_head[l] * (2.0 * N * dh * d + unembed_last +
                                 (l < L - 1 ? mlp + (L - 2 - l) * layer + top : 4.0 * B * d * F));
    }
    const double rate = bench_sgemm_rate((int)N, c->d_model, c->d_ff);
    if (rate <= 0)
        die("memory");
    const double peak = bench_peak_rate(threads);
    const double bound = flops / (peak * 1e9), tight_bound = tight / (peak * 1e9);
    printf("{\"impl\":\"headscope\",\"threads\":%d,\"prompts\":%d,\"T\":%d,\"L\":%d,\"H\":%d,"
           "\"d\":%d,\"cpu_s\":%.6f,\"wall_s\":%.6f,\"lower_bound_s\":%.6f,\"sweep_gflop\":%.3f,"
           "\"tight_bound_s\":%.6f,\"tight_gflop\":%.3f,"
           "\"sgemm_gflops\":%.2f,\"peak_gflops\":%.2f,\"ld_clean\":%.6f,\"ld_corrupt\":%.6f}\n",
           threads, ps.n, (int)T, c->n_layer, c->n_head[0], c->d_model, ours, ours_wall, bound, flops / 1e9,
           tight_bound, tight / 1e9,
           rate, peak, r.ld_clean, r.ld_corrupt);
    if (dump) {
        FILE *f = fopen(dump, "w");
        if (!f)
            die(dump);
        fprintf(f, "{\"patch_z\":[");
        for (int l = 0; l < c->n_layer; l++) {
            fprintf(f, "%s[", l ? "," : "");
            for (int h = 0; h < c->n_head[l]; h++) {
                const hs_metric_row *row = hs_head_table_find(&r.heads, l, h, "patch_z");
                fprintf(f, "%s%.9g", h ? "," : "", row ? row->value : 0.0);
            }
            fprintf(f, "]");
        }
        fprintf(f, "]}\n");
        fclose(f);
    }
    hs_patch_result_free(&r);
    hs_prompt_set_free(&ps);
    hs_model_free(&m);
    return 0;
}
