/* experiment head-count: one architecture trained with several head counts. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config_file.h"
#include "study.h"
#include "study_headcount.h"

int cli_experiment_gqa(int argc, char **argv);     /* cmd_experiment_gqa.c */
int cli_experiment_windows(int argc, char **argv); /* cmd_experiment_windows.c */

/* ---- experiment head-count -------------------------------------------------------- */

typedef struct {
    cli_progress bar;
    int json;
} hc_ctx;

static void hc_step(void *ctx, long done, const char *curve)
{
    cli_progress_update(&((hc_ctx *)ctx)->bar, done, curve);
}

static void hc_run(void *ctx, int heads, int seed, double val_loss)
{
    hc_ctx *h = ctx;
    if (!h->json)
        fprintf(stderr, "%sheads %d seed %d: validation loss %.4f\n",
                h->bar.enabled ? "\r\033[K" : "", heads, seed, val_loss);
}

/* --preset P with its KEY=VALUE overrides, the head counts and seeds: 0 or
 * the usage error's exit status. */
static int experiment_setup(hs_headcount_opts *ho, const char *preset, const char **overrides,
                            int nover, const char *heads_s, const char *seeds_s)
{
    if ((ho->n_heads = hs_parse_ints(heads_s, ho->heads, HS_HEADCOUNT_MAX, 1, HS_MAX_HEADS, 0)) < 0)
        return cli_usage_error("experiment", "--heads '%s': positive counts expected", heads_s);
    if ((ho->n_seeds = hs_parse_ints(seeds_s, ho->seeds, HS_HEADCOUNT_MAX, 0, INT_MAX, 0)) < 0)
        return cli_usage_error("experiment", "--seeds '%s': seeds expected", seeds_s);
    if (hs_config_preset(&ho->base, preset))
        return cli_usage_error("experiment", "%s", hs_last_error());
    for (int i = 0; i < nover; i++)
        if (!strncmp(overrides[i], "n_head=", 7))
            return cli_usage_error("experiment",
                                   "%s does not apply with --heads (it sets n_head of "
                                   "each run)",
                                   overrides[i]);
        else if (hs_config_override(&ho->base, overrides[i]))
            return cli_usage_error("experiment", "%s", hs_last_error());
    hs_model_config cfg[HS_HEADCOUNT_MAX];
    if (hs_headcount_check(cfg, ho))
        return cli_usage_error("experiment", "%s", hs_last_error());
    return 0;
}

/* Reads the data (split unless --val), opens the run, trains every head
 * count, records and prints: the exit status. */
static int experiment_run(hs_headcount_opts *ho, const hs_source *src, const hs_source *vsrc,
                          const char *db, int json, const opt *o, int n, int argc, char **argv)
{
    hs_split sp;
    hs_run *run = NULL;
    const char *data = hs_source_path(src);
    if (hs_split_load(&sp, src, vsrc, NULL, ho->base.vocab_size, ho->batch, ho->seq_len) ||
        cli_run_open(&run, db, 0, NULL, data, o, n, argc, argv)) {
        hs_split_free(&sp);
        return cli_run_error("experiment");
    }
    cli_install_signal_handlers();
    hc_ctx hc = { .json = json };
    ho->train = &sp.train, ho->val = &sp.val, ho->ix = hs_run_index(run), ho->run_id = hs_run_id(run);
    ho->stop = &cli_stop_requested, ho->on_step = hc_step, ho->on_run = hc_run, ho->ctx = &hc;
    hs_headcount_result r;
    cli_progress_start(&hc.bar, "experiment", (long)ho->n_seeds * ho->n_heads * ho->steps);
    int rc = hs_headcount_experiment(&r, ho);
    cli_progress_finish(&hc.bar);
    if (!rc)
        rc = hs_run_rows(run, &r.table, NULL, 0);
    long long id;
    rc = cli_run_end(run, rc, &id);
    hs_split_free(&sp);
    if (!rc)
        hs_print_headcount(stdout, &(hs_summary){ .run_id = id, .json = json }, &r, ho);
    hs_headcount_result_free(&r);
    return rc;
}

static int cmd_experiment(int argc, char **argv)
{
    /* `help experiment` (argv[1] "--help") shows head-count's options */
    const int help = argc >= 2 && !strcmp(argv[1], "--help");
    if (argc >= 2 && (!strcmp(argv[1], "gqa") || !strcmp(argv[1], "windows")))
        return argv[1][0] == 'g' ? cli_experiment_gqa(argc, argv)
                                 : cli_experiment_windows(argc, argv);
    if (argc < 2 || (strcmp(argv[1], "head-count") && !help))
        return cli_usage_error("experiment", "the experiment is 'head-count', 'gqa' or 'windows'");
    const char *preset = "attn-only", *db = NULL;
    hs_source src = { 0 }, vsrc = { 0 };
    const char *heads_s = "1,2,4", *seeds_s = "1,2,3";
    int threads = 0, json = 0;
    hs_headcount_opts ho = { .steps = 200, .batch = 8, .seq_len = 64, .lr = 1e-3 };
    opt o[] = {
        { "--preset", OPT_STR, &preset, 0, "P", "architecture; KEY=VALUE arguments override it", 0 },
        CLI_TRAIN_DATA_OPTS(src, vsrc),
        OPT_DB_AS(&db, "SQLite index for curves and results"),
        { "--heads", OPT_STR, &heads_s, 0, "H,H,...", "head counts (each divides d_model)", 0 },
        { "--seeds", OPT_STR, &seeds_s, 0, "S,S,...", "initialisation seeds", 0 },
        { "--steps", OPT_LONG, &ho.steps, 1, "N", "equal step budget of every run", 0 },
        OPT_BATCH_AS(&ho.batch, "sequences per step"),
        { "--seq-len", OPT_INT, &ho.seq_len, 1, "T", "sequence length", 0 },
        { "--lr", OPT_DOUBLE, &ho.lr, 0, "LR", "learning rate (Adam)", 0 },
        OPT_THREADS(&threads),
        OPT_JSON(&json),
    };
    const char *overrides[64];
    int nover = 0;
    int rc = cli_opts_parse("experiment", o, CLI_N(o), argc - !help,
                            argv + !help, overrides, 64, &nover);
    CLI_EXIT_IF(rc);
    if (!hs_source_path(&src) || !db)
        return cli_usage_error("experiment",
                               "--data FILE (or --text FILE) and --db FILE are required");
    if (!(ho.lr > 0))
        return cli_usage_error("experiment", "--lr must be positive");
    if ((rc = experiment_setup(&ho, preset, overrides, nover, heads_s, seeds_s)))
        return rc;
    cli_threads(threads);
    return experiment_run(&ho, &src, &vsrc, db, json, o, CLI_N(o), argc, argv);
}

static const opt_rule experiment_rules[] = {
    OPT_VAL_TEXT_RULES,
};

HS_COMMAND(cmd_experiment_record) = {
    .name = "experiment",
    .order = 150,
    .summary = "head-count: one architecture with several head counts; gqa: MHA->GQA uptraining; "
               "windows: local/global heads.",
    .usage = "headscope experiment head-count (--preset P [KEY=VALUE ...])\n"
             "       (--data FILE | --text FILE) --db FILE [options]\n"
             "       headscope experiment gqa --model DIR --data FILE --db FILE --original-steps N "
             "[options]\n"
             "       headscope experiment windows (--preset P [KEY=VALUE ...]) --data FILE --db "
             "FILE [--window W --seeds S,S,...] [options]",
    .details = "Every head count starts from the same initial weights per seed (the projections do\n"
        "not change shape with H when head_dim = d/H), trains the same steps on the same\n"
        "data, and is scored on a held-out split (the last 10% of --data unless --val).\n"
        "Records curves train_loss_heads_H_seed_S and per head count val_loss_heads_H\n"
        "(mean, stderr over seeds) and forward_ms_heads_H.\n\n"
        "example: headscope experiment head-count --preset attn-only --data corpus.bin \\\n"
        "           --db runs.db --heads 1,2,4,8 --seeds 1,2,3 --steps 300\n\n"
        "experiment gqa --model DIR --data FILE --db FILE --original-steps N: the uptraining\n"
        "table of Ainslie et al. (2023): the validation loss of the MHA model, of its\n"
        "conversions to G key/value heads (convert --kv-heads; default H/2, H/4, 1) and of each\n"
        "after uptraining F x N steps (--fraction, 0.05), as val_loss_mha,\n"
        "val_loss_mha_uptrained (the MHA model trained the same extra steps: the control),\n"
        "val_loss_kv_heads_G and val_loss_kv_heads_G_uptrained (mean, stderr over validation\n"
        "sequences). `headscope experiment gqa --help` lists its options.\n\n"
        "experiment windows: the same heads trained all global, half local (the first half of\n"
        "each layer's heads in a sliding window of --window W, 32) and all local, from shared\n"
        "initial weights per seed: val_loss_windows_global|half|local (mean, stderr over\n"
        "seeds), kv_bytes_per_token_windows_* (at --seq-len) and forward_ms_windows_*.\n"
        "`headscope experiment windows --help` lists its options.\n",
    .run = cmd_experiment,
    OPT_RULES(experiment_rules),
};
