/* head-norms: how much each head writes into the residual stream. */
#include <stdio.h>

#include "cli.h"
#include "study.h"

static int cmd_head_norms(int argc, char **argv)
{
    const char *model = NULL, *db = NULL;
    hs_inputs_spec in = { .batch = 4, .need_batch = 1 };
    long max_batches = 0, seed = 1;
    int threads = 0, json = 0, allow_nonfinite = 0;
    opt o[] = {
        OPT_MODEL(&model),
        OPT_DATA(&in.source.data),
        OPT_TEXT(&in.source.text),
        OPT_TOKENIZER(&in.source.tokenizer),
        OPT_DB(&db),
        OPT_BATCH(&in.batch),
        OPT_SEQ_LEN(&in.seq_len),
        OPT_MAX_BATCHES(&max_batches),
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the random-init control", 0 },
        OPT_THREADS(&threads),
        OPT_JSON(&json),
        OPT_ALLOW_NONFINITE(&allow_nonfinite),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    const char *cmd = cli_current->name;
    int rc = cli_opts_parse(cmd, o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!model || !hs_source_path(&in.source) || !db)
        return cli_usage_error(cmd, "--model DIR, --data FILE (or --text FILE) and --db FILE are "
                                    "required");
    if (threads)
        hs_set_threads(threads);
    cli_job j;
    in.model = model;
    if ((rc = cli_open(&j, &in)))
        return rc;
    const hs_head_norms_opts ho = { in.batch, j.in.seq_len, (size_t)max_batches,
                                    (unsigned long long)seed };
    if (hs_head_norms_check(&j.in.m.cfg, &j.in.tok, &ho))
        return cli_inputs_refused(&j.in, cmd, 1);
    if ((rc = cli_start(&j, db, 0, model, o, n, argc, argv)))
        return rc;
    hs_head_norms_result r;
    phase_bars bars;
    hs_study_io io = cli_study_io(&bars, 1);
    io.allow_nonfinite = allow_nonfinite;
    const double t0 = hs_now();
    rc = hs_head_norms_study(&r, &j.in.m, &j.in.tok, &ho, &io);
    if (!rc)
        rc = hs_run_rows(j.run, &r.table, NULL, 0);
    const double secs = hs_now() - t0;
    const long long run_id = hs_run_id(j.run);
    const int status = cli_finish(&j, rc);
    if (!status && json)
        printf("{\"run_id\":%lld,\"sequences\":%ld,\"seconds\":%.3f,\"largest\":"
               "{\"layer\":%d,\"head\":%d}}\n", run_id, r.sequences, secs, r.top_layer,
               r.top_head);
    else if (!status)
        printf("run %lld: output norms of every head and of a random-init control over %ld "
               "sequences in %s (%.2f s); largest: layer %d head %d\n", run_id, r.sequences, db,
               secs, r.top_layer, r.top_head);
    hs_head_norms_result_free(&r);
    return status;
}

static const opt_rule head_norms_rules[] = {
    OPT_TEXT_RULES,
};

HS_COMMAND(cmd_head_norms_record) = {
    .name = "head-norms",
    .order = 145,
    .summary = "How much each head writes into the residual stream (Kobayashi et al.), with a control.",
    .usage = "headscope head-norms --model DIR (--data FILE | --text FILE) --db FILE [options]",
    .details = "head_output_norm = mean over sequences of each sequence's mean over positions of\n"
        "the L2 norm of z_h W_O^h, the head's output as it enters the residual stream\n"
        "(before any output norm; an encoder's padding left out); head_output_norm_control\n"
        "the same of a random-init model of the same configuration (--seed). A size, not a\n"
        "cause: ablate or patch says whether the model needs the head.\n\n"
        "example: headscope head-norms --model runs/tiny --data val.bin --db runs.db\n",
    .run = cmd_head_norms,
    OPT_RULES(head_norms_rules),
};
