/* experiment windows: the same heads all global, half local, all local. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config_file.h"
#include "study_windows.h"

int cli_experiment_windows(int argc, char **argv);

typedef struct {
    cli_progress bar;
    int json;
} win_ctx;

static void win_step(void *ctx, long done, const char *curve)
{
    cli_progress_update(&((win_ctx *)ctx)->bar, done, curve);
}

static void win_run(void *ctx, const char *arm, int seed, double val_loss)
{
    win_ctx *w = ctx;
    if (!w->json)
        fprintf(stderr, "%s%s seed %d: validation loss %.4f\n", w->bar.enabled ? "\r\033[K" : "",
                arm, seed, val_loss);
}

/* The preset and overrides, seeds and sizes: 0 or the usage error's status. */
static int windows_setup(hs_windows_opts *wo, const char *preset, const char **over, int nover,
                         const char *seeds_s)
{
    if ((wo->n_seeds = hs_parse_ints(seeds_s, wo->seeds, HS_HEADCOUNT_MAX, 0, INT_MAX, 0)) < 1)
        return cli_usage_error("experiment", "--seeds '%s': seeds expected", seeds_s);
    if (hs_config_build(&wo->base, preset, over, nover) || hs_windows_check(wo))
        return cli_usage_error("experiment", "%s", hs_last_error());
    return 0;
}

/* Reads the data (split unless --val), opens the run, runs, records. */
static int windows_run(hs_windows_opts *wo, hs_windows_result *r, long long *run_id,
                       const hs_source *src, const hs_source *vsrc, const char *db, int json,
                       const opt *o, int nopts, int argc, char **argv)
{
    hs_split sp;
    const char *data = hs_source_path(src);
    int rc = hs_split_load(&sp, src, vsrc, NULL, wo->base.vocab_size, wo->batch, wo->seq_len);
    if (rc)
        return cli_run_error("experiment");
    hs_run *run = NULL;
    if (!(rc = cli_run_open(&run, db, 0, NULL, data, o, nopts, argc, argv))) {
        cli_install_signal_handlers();
        win_ctx wc = { .json = json };
        wo->train = &sp.train, wo->val = &sp.val, wo->ix = hs_run_index(run), wo->run_id = hs_run_id(run);
        wo->stop = &cli_stop_requested, wo->on_step = win_step, wo->on_run = win_run;
        wo->ctx = &wc;
        cli_progress_start(&wc.bar, "experiment", (long)wo->n_seeds * HS_WINDOWS_ARMS * wo->steps);
        rc = hs_windows_experiment(r, wo);
        cli_progress_finish(&wc.bar);
        if (!rc)
            rc = hs_run_rows(run, &r->table, NULL, 0);
    }
    rc = cli_run_end(run, rc, run_id);
    hs_split_free(&sp);
    return rc;
}

int cli_experiment_windows(int argc, char **argv)
{
    const char *preset = "attn-only", *db = NULL, *seeds_s = "1,2,3";
    hs_source src = { 0 }, vsrc = { 0 };
    int threads = 0, json = 0;
    hs_windows_opts wo = { .window = 32, .steps = 200, .batch = 8, .seq_len = 128, .lr = 1e-3 };
    opt o[] = {
        { "--preset", OPT_STR, &preset, 0, "P", "headscope-family architecture; KEY=VALUE "
                                                "arguments override it", 0 },
        CLI_TRAIN_DATA_OPTS(src, vsrc),
        OPT_DB_AS(&db, "SQLite index for curves and results"),
        { "--window", OPT_INT, &wo.window, 1, "W", "window of the local heads", 0 },
        { "--seeds", OPT_STR, &seeds_s, 0, "S,S,...", "initialisation seeds", 0 },
        { "--steps", OPT_LONG, &wo.steps, 1, "N", "equal step budget of every run", 0 },
        OPT_BATCH_AS(&wo.batch, "sequences per step"),
        { "--seq-len", OPT_INT, &wo.seq_len, 1, "T", "sequence length (training context)", 0 },
        { "--lr", OPT_DOUBLE, &wo.lr, 0, "LR", "learning rate (Adam)", 0 },
        OPT_THREADS(&threads),
        OPT_JSON(&json),
    };
    const char *overrides[64];
    int nover = 0;
    int rc = cli_opts_parse("experiment", o, CLI_N(o), argc - 1, argv + 1, overrides, 64, &nover);
    CLI_EXIT_IF(rc);

    if (!hs_source_path(&src) || !db)
        return cli_usage_error("experiment",
                               "windows needs --data FILE (or --text FILE) and --db FILE");
    if ((rc = windows_setup(&wo, preset, overrides, nover, seeds_s)))
        return rc;
    cli_threads(threads);
    hs_windows_result r = { 0 };
    long long run_id = 0;
    rc = windows_run(&wo, &r, &run_id, &src, &vsrc, db, json, o, CLI_N(o), argc, argv);
    if (!rc)
        hs_print_windows(stdout, &(hs_summary){ .run_id = run_id, .json = json }, &r, &wo);
    hs_windows_result_free(&r);
    return rc;
}
