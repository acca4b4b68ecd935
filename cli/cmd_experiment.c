/* experiment head-count: one architecture trained with several head counts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "cli.h"
#include "index.h"
#include "study.h"
#include "eval.h"
#include "train.h"

/* ---- experiment head-count -------------------------------------------------------- */

typedef struct {
    cli_run *run;
    char curve[64];
    hs_curve_point pts[64];
    int npts;
    long tokens_per_step;
    progress *bar;
    long steps_before; /* of the earlier runs of the experiment */
} hc_ctx;

static void hc_flush(hc_ctx *h)
{
    if (h->run->ix && h->npts)
        hs_index_curve_add(h->run->ix, h->run->run_id, h->curve, h->pts, h->npts);
    h->npts = 0;
}

static void hc_step(void *ctx, long step, double loss, double lr)
{
    hc_ctx *h = ctx;
    (void)lr;
    h->pts[h->npts++] = (hs_curve_point){ step, (double)step * h->tokens_per_step, loss };
    if (h->npts == 64)
        hc_flush(h);
    progress_update(h->bar, h->steps_before + step, h->curve);
}

int cmd_experiment(int argc, char **argv)
{
    /* `help experiment` (argv[1] "--help") shows head-count's options */
    const int help = argc >= 2 && !strcmp(argv[1], "--help");
    if (argc < 2 || (strcmp(argv[1], "head-count") && !help))
        return usage_error("experiment", "the experiment is 'head-count'");
    const char *preset = "attn-only", *data = NULL, *val = NULL, *db = NULL;
    const char *heads_s = "1,2,4", *seeds_s = "1,2,3";
    int B = 8, T = 64, threads = 0, json = 0;
    long steps = 200;
    double lr = 1e-3;
    opt o[] = {
        { "--preset", OPT_STR, &preset, 0, "P", "architecture; KEY=VALUE arguments override it", 0 },
        { "--data", OPT_STR, &data, 0, "FILE.bin", "training shard (its last 10% is the validation split unless --val)", 0 },
        { "--val", OPT_STR, &val, 0, "FILE.bin", "validation shard", 0 },
        { "--db", OPT_STR, &db, 0, "FILE", "SQLite index for curves and results", 0 },
        { "--heads", OPT_STR, &heads_s, 0, "H,H,...", "head counts (each divides d_model)", 0 },
        { "--seeds", OPT_STR, &seeds_s, 0, "S,S,...", "initialisation seeds", 0 },
        { "--steps", OPT_LONG, &steps, 1, "N", "equal step budget of every run", 0 },
        { "--batch", OPT_INT, &B, 1, "B", "sequences per step", 0 },
        { "--seq-len", OPT_INT, &T, 1, "T", "sequence length", 0 },
        { "--lr", OPT_DOUBLE, &lr, 0, "LR", "learning rate (Adam)", 0 },
        { "--threads", OPT_INT, &threads, 0, "N", "threads (0: OpenMP's default)", 0 },
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    const char *overrides[64];
    int nover = 0;
    int rc = opts_parse("experiment", o, (int)(sizeof o / sizeof o[0]), argc - !help,
                        argv + !help, overrides, 64, &nover);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!data || !db)
        return usage_error("experiment", "--data FILE and --db FILE are required");
    if (!(lr > 0))
        return usage_error("experiment", "--lr must be positive");
    int heads[16], nh = 0, seeds[16], ns = 0;
    for (const char *p = heads_s; *p && nh < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1)
            return usage_error("experiment", "--heads '%s': positive counts expected", heads_s);
        heads[nh++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    for (const char *p = seeds_s; *p && ns < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0)
            return usage_error("experiment", "--seeds '%s': seeds expected", seeds_s);
        seeds[ns++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    hs_model_config base;
    if (hs_config_preset(&base, preset))
        return usage_error("experiment", "%s", hs_last_error());
    for (int i = 0; i < nover; i++)
        if (hs_config_override(&base, overrides[i]))
            return usage_error("experiment", "%s", hs_last_error());
    hs_model_config cfg[16];
    for (int i = 0; i < nh; i++) {
        char kv[32];
        cfg[i] = base;
        snprintf(kv, sizeof kv, "n_head=%d", heads[i]);
        if (hs_config_override(&cfg[i], kv))
            return usage_error("experiment", "--heads %d: %s", heads[i], hs_last_error());
        if (cfg[i].pos == HS_POS_LEARNED && T > cfg[i].n_ctx)
            return usage_error("experiment", "--seq-len %d exceeds n_ctx=%d", T, cfg[i].n_ctx);
    }
    if (threads)
        hs_set_threads(threads);
    hs_tokens all, train = { 0 }, vt = { 0 };
    if (hs_tokens_read(&all, data))
        return run_error("experiment");
    if (val) {
        train = all;
        if (hs_tokens_read(&vt, val)) {
            hs_tokens_free(&all);
            return run_error("experiment");
        }
    } else { /* held-out split: the last 10% of the tokens */
        size_t cut = all.n - all.n / 10;
        train = (hs_tokens){ all.tok, cut, all.version };
        vt = (hs_tokens){ all.tok + cut, all.n - cut, all.version };
    }
    if (!hs_batch_count(&train, B, T) || !hs_batch_count(&vt, B, T)) {
        hs_fail(HS_EINVAL, "%s: too few tokens for a batch of %d x %d in both the training and "
                "validation parts", data, B, T);
        hs_tokens_free(&all);
        if (val)
            hs_tokens_free(&vt);
        return run_error("experiment");
    }
    cli_run run;
    if (cli_run_begin(&run, db, 0, "experiment", NULL, NULL, data, argc, argv)) {
        hs_tokens_free(&all);
        if (val)
            hs_tokens_free(&vt);
        return run_error("experiment");
    }
    cli_install_signal_handlers();
    double final[16][16], ms[16];
    hs_metric_row rows[64];
    int nrows = 0;
    static char names[32][48];
    progress bar;
    progress_start(&bar, "experiment", (long)ns * nh * steps);
    for (int s = 0; !rc && s < ns; s++) {
        /* Shared initial weights: with dh = d/H every tensor has the same shape
         * for every head count, so one initialisation serves them all. */
        hs_model init;
        rc = hs_model_init(&init, &cfg[0]);
        if (rc)
            break;
        hs_model_init_random(&init, (unsigned long long)seeds[s]);
        for (int i = 0; !rc && i < nh; i++) {
            hs_model m;
            rc = hs_model_init(&m, &cfg[i]);
            if (!rc && m.n_params != init.n_params)
                rc = hs_fail(HS_EINVAL, "head count %d changes the parameter shapes (set head_dim "
                             "to d_model / n_head)", heads[i]);
            if (!rc)
                memcpy(m.params, init.params, sizeof(hs_real) * m.n_params);
            hc_ctx hc = { &run, "", { { 0 } }, 0, (long)B * T, &bar, (long)(s * nh + i) * steps };
            snprintf(hc.curve, sizeof hc.curve, "train_loss_heads_%d_seed_%d", heads[i], seeds[s]);
            hs_train_opts to = { .B = B, .T = T, .steps = steps, .lr = lr, .on_step = hc_step,
                                 .ctx = &hc, .stop = &cli_stop_requested };
            if (!rc)
                rc = hs_train(&m, &train, &to);
            hc_flush(&hc);
            hs_eval_result er;
            if (!rc)
                rc = hs_evaluate(&er, &m, &vt, B, T, 0, NULL, NULL, NULL);
            if (!rc) {
                final[i][s] = er.loss;
                if (s == 0)
                    rc = hs_forward_ms(&ms[i], &m, &vt, B, T);
            }
            if (!rc) {
                if (!json)
                    fprintf(stderr, "%sheads %d seed %d: validation loss %.4f\n",
                            bar.enabled ? "\r\033[K" : "", heads[i], seeds[s], er.loss);
            }
            if (m.params)
                hs_model_free(&m);
        }
        hs_model_free(&init);
    }
    progress_finish(&bar);
    for (int i = 0; !rc && i < nh; i++) {
        double mean = 0, var = 0;
        for (int s = 0; s < ns; s++)
            mean += final[i][s] / ns;
        for (int s = 0; s < ns; s++)
            var += (final[i][s] - mean) * (final[i][s] - mean);
        double sd = ns > 1 ? sqrt(var / (ns - 1)) : 0;
        snprintf(names[2 * i], 48, "val_loss_heads_%d", heads[i]);
        snprintf(names[2 * i + 1], 48, "forward_ms_heads_%d", heads[i]);
        rows[nrows++] = (hs_metric_row){ -1, -1, names[2 * i], mean, sd / sqrt((double)ns), ns };
        rows[nrows++] = (hs_metric_row){ -1, -1, names[2 * i + 1], ms[i], 0, 7 };
        final[i][0] = mean, final[i][1] = sd;
    }
    if (!rc)
        rc = hs_index_metrics_add(run.ix, run.run_id, rows, nrows);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hs_last_error());
    long long run_id = run.run_id;
    cli_run_end(&run, rc == HS_OK, NULL);
    hs_tokens_free(&all);
    if (val)
        hs_tokens_free(&vt);
    if (rc) {
        fprintf(stderr, "headscope: experiment: %s\n", msg);
        return EXIT_FAILURE_RUN;
    }
    if (json) {
        printf("{\"run_id\":%lld,\"results\":[", run_id);
        for (int i = 0; i < nh; i++)
            printf("%s{\"heads\":%d,\"val_loss\":%.6g,\"std\":%.6g,\"forward_ms\":%.4g}",
                   i ? "," : "", heads[i], final[i][0], final[i][1], ms[i]);
        printf("]}\n");
    } else {
        printf("run %lld: %d head counts x %d seeds, %ld steps each (shared initial weights per "
               "seed)\n  heads  val loss (mean ± std over seeds)  forward ms\n", run_id, nh, ns,
               steps);
        for (int i = 0; i < nh; i++)
            printf("  %5d  %.4f ± %.4f                   %.3f\n", heads[i], final[i][0],
                   final[i][1], ms[i]);
        printf("These are losses of this architecture, data, budget and learning rate; a\n"
               "difference smaller than the spread across seeds shows nothing, and no ordering\n"
               "of head counts carries over to other settings.\n");
    }
    return 0;
}

const command cmd_experiment_record = {
    .name = "experiment",
    .summary = "head-count: train one architecture with several head counts, shared init.",
    .usage = "headscope experiment head-count (--preset P [KEY=VALUE ...]) --data FILE --db FILE [options]",
    .details = "Every head count starts from the same initial weights per seed (the projections do\n"
        "not change shape with H when head_dim = d/H), trains the same steps on the same\n"
        "data, and is scored on a held-out split (the last 10% of --data unless --val).\n"
        "Records curves train_loss_heads_H_seed_S and per head count val_loss_heads_H\n"
        "(mean, stderr over seeds) and forward_ms_heads_H.\n\n"
        "example: headscope experiment head-count --preset attn-only --data corpus.bin \\\n"
        "           --db runs.db --heads 1,2,4,8 --seeds 1,2,3 --steps 300\n",
    .run = cmd_experiment,
};
