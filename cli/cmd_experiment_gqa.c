/* experiment gqa: the MHA -> GQA uptraining table (Ainslie et al. 2023). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cli.h"
#include "study_gqa.h"

int cli_experiment_gqa(int argc, char **argv);

/* Loads the model and data and checks the options: 0, or the exit status. */
static int gqa_setup(hs_gqa_opts *go, hs_model *m, hs_split *sp, const char *model,
                     const hs_source *src, const hs_source *vsrc)
{
    if (hs_checkpoint_load(m, model))
        return cli_run_error("experiment");
    if (hs_split_load(sp, src, vsrc, model, m->cfg.vocab_size, 0, 0)) {
        hs_model_free(m);
        return cli_run_error("experiment");
    }
    go->mha = m, go->train = &sp->train, go->val = &sp->val;
    if (hs_gqa_check(go)) {
        cli_usage_error("experiment", "%s", hs_last_error());
        hs_model_free(m);
        hs_split_free(sp);
        return EXIT_USAGE;
    }
    return 0;
}

int cli_experiment_gqa(int argc, char **argv)
{
    const char *model = NULL, *db = NULL, *kv_s = NULL;
    hs_source src = { 0 }, vsrc = { 0 };
    int threads = 0, json = 0;
    long val_batches = 0;
    hs_gqa_opts go = { .batch = 8, .seq_len = 64, .lr = 1e-3, .fraction = 0.05 };
    opt o[] = {
        OPT_MODEL_AS(&model, "the trained MHA model"),
        OPT_DATA_AS(&src.data, "uptraining shard (its last 10% is the validation split unless --val)"),
        OPT_TEXT_AS(&src.text, "--text", "uptraining text, tokenized on the fly (instead of --data)"),
        OPT_LINES(&src.lines),
        OPT_TOKENIZER(&src.tokenizer),
        { "--val", OPT_STR, &vsrc.data, 0, "FILE.bin", "validation shard", 0 },
        OPT_TEXT_AS(&vsrc.text, "--val-text", "validation text, tokenized as --text is"),
        OPT_DB_AS(&db, "SQLite index for the results"),
        { "--kv-heads", OPT_STR, &kv_s, 0, "G,G,...", "key/value head counts (default H/2,H/4,1)", 0 },
        { "--original-steps", OPT_LONG, &go.original_steps, 1, "N", "steps the MHA model trained (required)", 0 },
        { "--fraction", OPT_DOUBLE, &go.fraction, 0, "F", "uptraining steps = ceil(F x original)", 0 },
        OPT_BATCH_AS(&go.batch, "sequences per step and per evaluation batch"),
        { "--seq-len", OPT_INT, &go.seq_len, 1, "T", "sequence length", 0 },
        { "--lr", OPT_DOUBLE, &go.lr, 0, "LR", "uptraining learning rate (Adam)", 0 },
        OPT_MAX_BATCHES_AS(&val_batches, "validation batches (0: all)"),
        OPT_THREADS(&threads),
        OPT_JSON(&json),
    };
    int rc = cli_opts_parse("experiment", o, CLI_N(o), argc - 1, argv + 1, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    const char *data = hs_source_path(&src);
    if (!model || !data || !db || !go.original_steps)
        return cli_usage_error("experiment", "gqa needs --model DIR, --data FILE (or --text FILE), "
                                             "--db FILE and --original-steps N");
    if (kv_s && (go.n_kv = hs_parse_ints(kv_s, go.kv, HS_GQA_MAX, 1, HS_MAX_HEADS, 0)) < 1)
        return cli_usage_error("experiment", "--kv-heads '%s': positive counts expected", kv_s);
    cli_threads(threads);
    go.val_batches = (size_t)val_batches;
    hs_model m;
    hs_split sp;
    if ((rc = gqa_setup(&go, &m, &sp, model, &src, &vsrc)))
        return rc;
    hs_run *run = NULL;
    hs_gqa_result r = { 0 };
    phase_bars bars = { 0 };
    if (!(rc = cli_run_open(&run, db, 0, model, data, o, CLI_N(o), argc, argv))) {
        cli_install_signal_handlers();
        go.io = cli_study_io(&bars, 1);
        if (!(rc = hs_gqa_study(&r, &go)))
            rc = hs_run_rows(run, &r.table, NULL, 0);
    }
    long long id;
    if (!(rc = cli_run_end(run, rc, &id)))
        hs_print_gqa(stdout, &(hs_summary){ .run_id = id, .json = json }, &r, &go);
    hs_gqa_result_free(&r);
    hs_split_free(&sp);
    hs_model_free(&m);
    return rc;
}
