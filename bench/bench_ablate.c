/* Analyses' cost, for bench/ablate.sh:
 *
 *   bench_ablate --model DIR --data FILE --batch B --seq-len T --sequences N [--threads N]
 *                [--dump FILE]
 *       one JSON line: seconds of the all-heads zero+mean ablation sweep (fast
 *       path), of the importance of every head, and of one plain forward pass
 *       over the same sequences; --dump writes the deltas as JSON.
 *   bench_ablate --write DIR --config L,d,H,T [--vocab V]
 *       a random headscope checkpoint (bench/train_torch.py's architecture).
 *   bench_ablate --latency DIR --batch B --seq-len T [--threads N]
 *       forward latency of the dense model, the dense model with 25/50/75% of
 *       each layer's heads gated to zero, and the structurally pruned models. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ablate.h"
#include "bench_util.h"
#include "bound.h"
#include "checkpoint.h"
#include "eval.h"
#include "importance.h"
#include "transformer.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_ablate: %s: %s\n", what, hs_last_error());
    exit(1);
}

typedef struct {
    FILE *dump;
    int first;
} dump_ctx;

static int dump_layer(void *ctx, const hs_ablate_layer *r)
{
    dump_ctx *d = ctx;
    if (!d->dump)
        return HS_OK;
    for (int k = 0; k < 2; k++) {
        fprintf(d->dump, "%s\"%s/%d\":[", d->first ? "" : ",", hs_ablate_kind_name(k), r->layer);
        d->first = 0;
        for (int h = 0; h < r->n_heads; h++)
            fprintf(d->dump, "%s%.9g", h ? "," : "", r->stat[k * r->n_heads + h].delta);
        fprintf(d->dump, "]");
    }
    return HS_OK;
}

/* Median seconds of reps forwards of m over one batch of inputs, with hooks. */
static double forward_latency(const hs_model *m, const int32_t *in, int B, int T,
                              const hs_hooks *hooks, int reps)
{
    hs_acts a;
    if (hs_acts_alloc(&a, &m->cfg, B, T, HS_ACTS_INFER))
        die("activations");
    double t[64];
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        if (hs_forward(&a, m, in, NULL, hooks))
            die("forward");
        if (r >= 0)
            t[r] = now_s() - t0;
    }
    hs_acts_free(&a);
    return median(t, reps);
}

static void latency(const char *dir, int B, int T, int threads)
{
    hs_model m;
    if (hs_checkpoint_load(&m, dir))
        die("load");
    const hs_model_config *c = &m.cfg;
    int32_t *in = malloc(sizeof(int32_t) * B * T);
    for (int i = 0; i < B * T; i++)
        in[i] = (i * 7 + 1) % c->vocab_size;
    const int reps = 9;
    double dense = forward_latency(&m, in, B, T, NULL, reps);
    printf("{\"impl\":\"headscope_latency\",\"threads\":%d,\"pruned\":0,\"dense_ms\":%.3f}\n",
           threads, dense * 1e3);
    for (int q = 1; q <= 3; q++) {
        unsigned char *mask = calloc((size_t)c->n_layer * HS_MAX_HEADS, 1);
        hs_real *gates[HS_MAX_LAYERS];
        for (int l = 0; l < c->n_layer; l++) {
            gates[l] = malloc(sizeof(hs_real) * c->n_head[l]);
            for (int h = 0; h < c->n_head[l]; h++) {
                int off = h < q * c->n_head[l] / 4; /* q quarters of every layer */
                mask[(size_t)l * HS_MAX_HEADS + h] = (unsigned char)off;
                gates[l][h] = off ? 0 : 1;
            }
        }
        hs_hooks hooks = { .gates = (const hs_real *const *)gates };
        double gated = forward_latency(&m, in, B, T, &hooks, reps);
        hs_model s;
        if (hs_prune_structural(&s, &m, mask))
            die("structural");
        double small = forward_latency(&s, in, B, T, NULL, reps);
        printf("{\"impl\":\"headscope_latency\",\"threads\":%d,\"pruned\":%d,\"dense_ms\":%.3f,"
               "\"gated_ms\":%.3f,\"structural_ms\":%.3f,\"params\":%zu,\"structural_params\":%zu}\n",
               threads, 25 * q, dense * 1e3, gated * 1e3, small * 1e3, m.n_params, s.n_params);
        hs_model_free(&s);
        for (int l = 0; l < c->n_layer; l++)
            free(gates[l]);
        free(mask);
    }
    free(in);
    hs_model_free(&m);
}

int main(int argc, char **argv)
{
    hs_runtime_init(argc, argv); /* headscope's default: passive OpenMP waits */
    const char *model = NULL, *data = NULL, *dump = NULL, *write_dir = NULL, *lat = NULL;
    int B = 8, T = 256, N = 64, threads = 1, L = 6, d = 256, H = 8, V = 256;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--dump"))
            dump = v;
        else if (!strcmp(a, "--write"))
            write_dir = v;
        else if (!strcmp(a, "--latency"))
            lat = v;
        else if (!strcmp(a, "--batch"))
            B = atoi(v);
        else if (!strcmp(a, "--seq-len"))
            T = atoi(v);
        else if (!strcmp(a, "--sequences"))
            N = atoi(v);
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--vocab"))
            V = atoi(v);
        else if (!strcmp(a, "--config") && sscanf(v, "%d,%d,%d,%d", &L, &d, &H, &T) == 4)
            ;
        else {
            fprintf(stderr, "bench_ablate: unknown option %s (see the comment at the top)\n", a);
            return 2;
        }
    }
    hs_set_threads(threads);
    if (write_dir) {
        hs_model_config c = bench_gelu_config(L, d, H, H, T, V, HS_FAMILY_HEADSCOPE);
        hs_model m;
        if (hs_model_init(&m, &c))
            die("model");
        hs_model_init_random(&m, 11);
        if (hs_checkpoint_save(&m, write_dir))
            die("save");
        hs_model_free(&m);
        return 0;
    }
    if (lat) {
        latency(lat, B, T, threads);
        return 0;
    }
    if (!model || !data)
        die("--model and --data are required");
    hs_model m;
    hs_tokens tok;
    if (hs_checkpoint_load(&m, model) || hs_tokens_read(&tok, data))
        die("load");
    const size_t nb = (size_t)N / B;
    dump_ctx dc = { dump ? fopen(dump, "w") : NULL, 1 };
    if (dc.dump)
        fputc('{', dc.dump);
    hs_ablate_opts o = { .B = B, .T = T, .max_batches = nb,
                         .kinds = 1 << HS_ABLATE_ZERO | 1 << HS_ABLATE_MEAN,
                         .on_layer = dump_layer, .ctx = &dc };
    double t0 = now_s(), c0 = process_cpu_s();
    if (hs_ablate(&m, &tok, &o))
        die("ablate");
    double ablate_s = now_s() - t0, ablate_cpu_s = process_cpu_s() - c0;
    if (dc.dump) {
        fputs("}\n", dc.dump);
        fclose(dc.dump);
    }
    hs_importance imp;
    if (hs_importance_alloc(&imp, &m.cfg))
        die("importance");
    t0 = now_s();
    if (hs_importance_compute(&imp, &m, &tok, B, T, nb, NULL, NULL, NULL, NULL))
        die("importance");
    double importance_s = now_s() - t0;
    hs_importance_free(&imp);
    hs_eval_result er;
    t0 = now_s();
    if (hs_evaluate(&er, &m, &tok, B, T, nb, NULL, NULL, NULL))
        die("forward");
    double forward_s = now_s() - t0;
    /* The sweep's lower bound: the layer passes an exact all-heads zero+mean
     * sweep must compute -- per layer l and head, two ablations that rerun
     * layers l..L-1 (sum_l 2 H_l (L - l)), plus the clean pass and the means
     * pass (L each) -- times one layer pass over the sequences (bound.h:
     * projections, causal half of the T x T attention, MLP; the unembedding
     * is not counted), at the FMA peak (the sgemm rate of the layer's GEMMs
     * at B*T rows printed beside it). */
    const hs_model_config *c = &m.cfg;
    int heads = 0;
    double passes = 2.0 * c->n_layer;
    for (int l = 0; l < c->n_layer; l++) {
        heads += c->n_head[l];
        passes += 2.0 * c->n_head[l] * (c->n_layer - l);
    }
    const double HD = (double)c->n_head[0] * c->head_dim, GD = (double)c->n_kv_head[0] * c->head_dim;
    const double layer = bench_layer_flops((double)nb * B, T, c->d_model, HD, GD, c->d_ff,
                                           c->mlp == HS_MLP_SWIGLU);
    const double rate = bench_layer_sgemm_rate(B * T, c->d_model, c->d_ff);
    if (rate <= 0)
        die("memory");
    const double peak = bench_peak_rate(threads), bound = passes * layer / (peak * 1e9);
    printf("{\"impl\":\"headscope\",\"threads\":%d,\"L\":%d,\"d\":%d,\"H\":%d,\"T\":%d,"
           "\"sequences\":%zu,\"ablate_s\":%.4f,\"importance_s\":%.4f,\"forward_s\":%.4f,"
           "\"ablations\":%d,\"clean_loss\":%.6f,\"ablate_cpu_s\":%.4f,\"layer_passes\":%.0f,"
           "\"layer_gflop\":%.4f,\"sgemm_gflops\":%.2f,\"peak_gflops\":%.2f,"
           "\"lower_bound_s\":%.4f}\n",
           threads, c->n_layer, c->d_model, c->n_head[0], T, nb * B, ablate_s, importance_s,
           forward_s, 2 * heads, o.clean_loss, ablate_cpu_s, passes, layer / 1e9, rate, peak,
           bound);
    hs_tokens_free(&tok);
    hs_model_free(&m);
    return 0;
}
