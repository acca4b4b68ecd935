/* Attribution patching's cost, for bench/atp.sh:
 *
 *   bench_atp --what atp|patch|patch-naive|eap-ig --model DIR --prompts FILE [--threads N]
 *             [--repeats R] [--ig-steps M] [--dump FILE]
 *
 * One JSON line: the median CPU and wall seconds of one of
 *   atp     hs_atp of the z site (every head's atp_z: one clean forward, one
 *           corrupt forward and backward), as `headscope atp --site z` runs it;
 *   patch   hs_patch of the z site (exact denoising patching of every head,
 *           the fast path: the corrupt run's layers below a head shared), as
 *           `headscope patch --site z`; patch-naive the same one whole forward
 *           per head (`patch --naive`);
 *   eap-ig  hs_circuit with EAP-IG's m steps and no faithfulness curve (the
 *           edge scores), as `headscope circuit --method eap-ig --top-n ""`
 *           would;
 * every prompt of the file in one batch, the weights held as the commands
 * hold them (as stored, pre-packed), and the process's peak resident
 * memory (one --what per process, so it is that work's). --dump writes the
 * scores: {"atp_z": [[..H..]..L..]}, {"patch_z": ...} or {"eap_ig":
 * {"SENDER>RECEIVER": score, ...}}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "atp.h"
#include "bench_util.h"
#include "checkpoint.h"
#include "circuit.h"
#include "patch.h"
#include "stats.h"
#include "weights.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_atp: %s: %s\n", what, hs_last_error());
    exit(1);
}

static void dump_grid(FILE *f, const hs_head_table *t, const hs_model_config *c,
                      const char *metric)
{
    fprintf(f, "{\"%s\":[", metric);
    for (int l = 0; l < c->n_layer; l++) {
        fprintf(f, "%s[", l ? "," : "");
        for (int h = 0; h < c->n_head[l]; h++) {
            const hs_metric_row *row = hs_head_table_find(t, l, h, metric);
            fprintf(f, "%s%.9g", h ? "," : "", row ? row->value : 0.0);
        }
        fprintf(f, "]");
    }
    fprintf(f, "]}\n");
}

/* One run of the work named by what; its result freed unless keep. */
typedef struct {
    hs_atp_result atp;
    hs_patch_result patch;
    hs_circuit_result circuit;
} results;

static void run(results *r, const char *what, const hs_model *m, const hs_prompt_set *ps,
                int ig_steps)
{
    if (!strcmp(what, "atp")) {
        const hs_atp_opts o = { .sites = 1 << HS_ATP_Z, .batch = ps->n };
        if (hs_atp(&r->atp, m, ps, &o))
            die("atp");
    } else if (!strncmp(what, "patch", 5)) { /* "patch-naive": one forward per head */
        const hs_patch_opts o = { .sites = 1 << HS_PATCH_Z, .batch = ps->n,
                                  .naive = !strcmp(what, "patch-naive") };
        if (hs_patch(&r->patch, m, ps, &o))
            die("patch");
    } else {
        const hs_circuit_opts o = { .method = HS_CIRCUIT_EAP_IG, .ig_steps = ig_steps,
                                    .batch = ps->n };
        if (hs_circuit(&r->circuit, m, ps, &o))
            die("circuit");
    }
}

static void free_results(results *r, const char *what)
{
    if (!strcmp(what, "atp"))
        hs_atp_result_free(&r->atp);
    else if (!strncmp(what, "patch", 5))
        hs_patch_result_free(&r->patch);
    else
        hs_circuit_result_free(&r->circuit);
}

int main(int argc, char **argv)
{
    hs_runtime_init(argc, argv); /* headscope's default: passive OpenMP waits */
    const char *model = NULL, *prompts = NULL, *dump = NULL, *what = NULL;
    int threads = 1, reps = 3, ig_steps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--prompts"))
            prompts = argv[i + 1];
        else if (!strcmp(argv[i], "--dump"))
            dump = argv[i + 1];
        else if (!strcmp(argv[i], "--what"))
            what = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ig-steps"))
            ig_steps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_atp: unknown option %s (see the comment at the top)\n", argv[i]);
            return 2;
        }
    }
    if (!model || !prompts || !what || reps < 1 || reps > 64 || ig_steps < 1 ||
        (strcmp(what, "atp") && strcmp(what, "patch") && strcmp(what, "patch-naive") &&
         strcmp(what, "eap-ig")))
        die("--what atp|patch|patch-naive|eap-ig, --model and --prompts are required, "
            "--repeats 1..64");
    hs_set_threads(threads);
    hs_model m;
    hs_prompt_set ps;
    /* as the commands hold the weights: as stored, mapped, pre-packed (unless
     * HEADSCOPE_PREPACK=0) */
    size_t packed;
    int npk;
    const char *pp = getenv("HEADSCOPE_PREPACK");
    if (hs_checkpoint_load_stored(&m, model, HS_WEIGHTS_MAPPED))
        die("load");
    if (!(pp && !strcmp(pp, "0")) && hs_model_prepack(&m, m.cfg.n_layer, 1, &packed, &npk))
        die("pre-packing");
    const hs_model_config *c = &m.cfg;
    if (hs_prompts_load(&ps, prompts, NULL, c->vocab_size, c->n_ctx))
        die("prompts");
    if (ps.n_group != 1)
        die("the prompts must have one length");
    results r = { 0 };
    double t[64], w[64];
    for (int i = 0; i < reps; i++) {
        if (i)
            free_results(&r, what);
        double t0 = process_cpu_s(), w0 = now_s();
        run(&r, what, &m, &ps, ig_steps);
        t[i] = process_cpu_s() - t0, w[i] = now_s() - w0;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long edges = !strcmp(what, "eap-ig") ? r.circuit.n_edges : 0;
    printf("{\"impl\":\"headscope\",\"what\":\"%s\",\"threads\":%d,\"prompts\":%d,\"T\":%d,"
           "\"L\":%d,\"H\":%d,\"d\":%d,\"ig_steps\":%d,\"edges\":%ld,\"cpu_s\":%.6f,"
           "\"wall_s\":%.6f,\"peak_rss_mb\":%.1f}\n",
           what, threads, ps.n, ps.group[0].T, c->n_layer, c->n_head[0], c->d_model, ig_steps,
           edges, median(t, reps), median(w, reps), ru.ru_maxrss / 1024.0);
    if (dump) {
        FILE *f = fopen(dump, "w");
        if (!f)
            die(dump);
        if (!strcmp(what, "atp")) {
            dump_grid(f, &r.atp.heads, c, "atp_z");
        } else if (!strncmp(what, "patch", 5)) {
            dump_grid(f, &r.patch.heads, c, "patch_z");
        } else {
            fprintf(f, "{\"eap_ig\":{");
            for (long e = 0; e < r.circuit.n_edges; e++)
                fprintf(f, "%s\"%s>%s\":%.9g", e ? "," : "", r.circuit.edges[e].sender,
                        r.circuit.edges[e].receiver, r.circuit.edges[e].value);
            fprintf(f, "}}\n");
        }
        fclose(f);
    }
    free_results(&r, what);
    hs_prompt_set_free(&ps);
    hs_model_free(&m);
    return 0;
}
