/* induction and patterns: the scores and statistics of SPEC §5 into the index. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "maps.h"
#include "study.h"

/* ---- induction ------------------------------------------------------------------ */


static int cmd_induction(int argc, char **argv)
{
    const char *model = NULL, *db = NULL;
    hs_inputs_spec in = { 0 };
    int threads = 0, json = 0, allow_nonfinite = 0;
    long seed = 1;
    hs_induction_opts io = hs_induction_defaults();
    opt o[] = {
        OPT_MODEL(&model),
        OPT_DB_AS(&db, "SQLite index for the scores"),
        { "--seq-len", OPT_INT, &io.seq_len, 2, "T", "length of the random half r of r ++ r (default: min(n_ctx/2, 64))", 0 },
        { "--samples", OPT_INT, &io.samples, 2, "N", "random sequences", 0 },
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the sequences and of the control model", 0 },
        OPT_BATCH_AS(&io.batch, "sequences per forward"),
        { "--causal-k", OPT_INT, &io.causal_k, 1, "K", "heads the causal check ablates", 0 },
        OPT_DATA_AS(&in.source.data, "evaluation shard for the ICL score (optional)"),
        OPT_TEXT_AS(&in.source.text, "--text", "evaluation text for the ICL score, tokenized (instead of --data)"),
        OPT_TOKENIZER(&in.source.tokenizer),
        { "--icl-seq-len", OPT_INT, &io.icl_seq_len, 2, "T", "sequence length of the ICL score (default: min(n_ctx, 1024))", 0 },
        { "--early", OPT_INT, &io.early, 0, "P", "ICL: the early position", 0 },
        { "--late", OPT_INT, &io.late, 1, "P", "ICL: the late position", 0 },
        { "--random-draws", OPT_INT, &io.random_draws, 2, "D", "random sets of K heads to compare with", 0 },
        { "--min-score", OPT_DOUBLE, &io.min_score, 0, "S", "induction score a head needs for the claim", 0 },
        OPT_THREADS(&threads),
        OPT_JSON(&json),
        OPT_ALLOW_NONFINITE(&allow_nonfinite),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    const char *cmd = cli_current->name;
    int rc = cli_opts_parse(cmd, o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!model || !db)
        return cli_usage_error(cmd, "--model DIR and --db FILE are required");
    if (threads)
        hs_set_threads(threads);
    io.seed = (unsigned long long)seed;
    cli_job j;
    in.model = model; /* the ICL shard's sequences are the study's (--icl-seq-len) */
    if ((rc = cli_open(&j, &in)))
        return rc;
    const char *data = hs_source_path(&in.source);
    io.icl_data = data ? &j.in.tok : NULL, io.icl_data_name = data;
    if (hs_induction_check(&io, &j.in.m.cfg))
        return cli_inputs_refused(&j.in, cmd, 1);
    if (hs_induction_check_icl(&io, &j.in.m.cfg))
        return cli_inputs_refused(&j.in, cmd, 0);
    if ((rc = cli_start(&j, db, 0, model, o, n, argc, argv)))
        return rc;
    hs_induction_result r;
    phase_bars bars;
    hs_study_io sio = cli_study_io(&bars, 0);
    sio.allow_nonfinite = allow_nonfinite;
    rc = hs_induction_study(&r, &j.in.m, io, &sio);
    if (!rc)
        rc = hs_run_rows(j.run, &r.table, &r.draws, 1);
    const long long run_id = hs_run_id(j.run);
    if (!(rc = cli_finish(&j, rc)))
        hs_print_induction(stdout, &(hs_summary){ run_id, db, 0, json }, &r, &io);
    hs_induction_result_free(&r);
    return rc;
}

/* ---- patterns ------------------------------------------------------------------- */

static int cmd_patterns(int argc, char **argv)
{
    const char *model = NULL, *db = NULL, *maps = NULL, *delim_s = NULL, *js_out = NULL;
    hs_inputs_spec in = { .batch = 4, .need_batch = 1, .keep_tokenizer = 1 };
    long max_batches = 0, seed = 1;
    int threads = 0, json = 0, allow_nonfinite = 0, control = 0;
    opt o[] = {
        OPT_MODEL_AS(&model, "checkpoint directory (row-wise during the forward)"),
        OPT_DATA(&in.source.data),
        OPT_TEXT(&in.source.text),
        OPT_TOKENIZER(&in.source.tokenizer),
        { "--maps", OPT_STR, &maps, 0, "FILE.h5", "compute from a capture file instead", 0 },
        OPT_DB_AS(&db, "SQLite index for the statistics"),
        { "--delim", OPT_STR, &delim_s, 0, "ID,ID,...", "token ids counted by 'delim'", 0 },
        { "--js-out", OPT_STR, &js_out, 0, "FILE.csv", "also write the head-to-head Jensen-Shannon distance matrix", 0 },
        { "--control", OPT_FLAG, &control, 0, NULL, "with --model: also <stat>_control of a randomly initialised model", 0 },
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the control model", 0 },
        OPT_BATCH(&in.batch),
        OPT_SEQ_LEN(&in.seq_len),
        OPT_MAX_BATCHES(&max_batches),
        OPT_THREADS(&threads),
        OPT_JSON(&json),
        OPT_ALLOW_NONFINITE(&allow_nonfinite),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    int rc = cli_opts_parse("patterns", o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!db || (!maps && (!model || !hs_source_path(&in.source))))
        return cli_usage_error("patterns", "--model DIR, --data FILE (or --text FILE) and "
                                           "--db FILE are required (or --maps FILE and --db FILE)");
    int32_t delim[64];
    const int n_delim = hs_parse_ints(delim_s, delim, 64, 0, INT32_MAX, 0);
    if (n_delim < 0)
        return cli_usage_error("patterns", "--delim '%s': token ids separated by commas", delim_s);
    if (threads)
        hs_set_threads(threads);
    hs_patterns_opts po = { .delim = delim, .n_delim = n_delim, .control = control,
                            .seed = (unsigned long long)seed, .js = js_out != NULL,
                            .max_batches = (size_t)max_batches };
    hs_patterns_result r = { 0 };
    cli_job j = { 0 };
    hs_maps_reader *rd = NULL;
    if (maps) { /* the maps name their model and data: the run records the file */
        if (hs_maps_open(&rd, maps))
            return cli_run_error("patterns");
        j.in.data_path = maps;
    } else {
        in.model = model;
        if ((rc = cli_open(&j, &in)))
            return rc;
    }
    if ((rc = cli_start(&j, db, 0, maps ? NULL : model, o, n, argc, argv)))
        return hs_maps_close(rd), rc;
    po.batch = in.batch, po.seq_len = j.in.seq_len, po.tk = j.in.tk; /* tk: [CLS], [SEP], ... */
    phase_bars bars;
    hs_study_io io = cli_study_io(&bars, 0);
    io.allow_nonfinite = allow_nonfinite;
    rc = maps ? hs_patterns_study_maps(&r, rd, po) : hs_patterns_study(&r, &j.in.m, &j.in.tok, po, &io);
    hs_maps_close(rd);
    if (!rc) /* also for maps: a capture of a model with non-finite weights */
        rc = hs_study_check_finite(&io, &r.table, NULL, 0);
    if (!rc && js_out && !(rc = hs_patterns_write_js(js_out, &r)))
        rc = hs_run_artifact(j.run, js_out, NULL, 0);
    if (!rc)
        rc = hs_run_rows(j.run, &r.table, NULL, 0);
    const int rows = r.table.n, heads = r.heads;
    const long seqs = r.sequences;
    if (!rc && *r.note) fprintf(stderr, "headscope: patterns: note: %s\n", r.note);
    hs_patterns_result_free(&r);
    const long long run_id = hs_run_id(j.run);
    const int status = cli_finish(&j, rc);
    if (status)
        return status;
    if (json)
        printf("{\"run_id\":%lld,\"sequences\":%ld,\"rows\":%d}\n", run_id, seqs, rows);
    else
        printf("run %lld: pattern statistics of %d head-rows over %ld sequences in %s%s\n", run_id,
               heads, seqs, db, control ? " (and of a random-init control)" : "");
    return 0;
}

static const opt_rule induction_rules[] = {
    OPT_TEXT_RULES,
    { "--data|--text", OPTS_NEEDS, "--icl-seq-len,--early,--late",
      "they set the ICL score on --data" },
};

static const opt_rule patterns_rules[] = {
    OPT_TEXT_RULES,
    { "--maps", OPTS_EXCLUDES, "--model,--data", "the map file names its model and data" },
    { "--maps", OPTS_EXCLUDES, "--text,--tokenizer", "the map file holds its tokens" },
    { "--maps", OPTS_EXCLUDES, "--batch,--seq-len,--max-batches,--threads",
      "no forward runs: the maps are read from the file" },
    { "--maps", OPTS_EXCLUDES, "--control,--seed", "a map file holds no weights to re-initialise" },
    { "--control", OPTS_NEEDS, "--seed", "it seeds the control model" },
};

HS_COMMAND(cmd_induction_record) = {
    .name = "induction",
    .flags = CMD_SHARDS,
    .order = 130,
    .summary = "Induction, duplicate-token, previous-token and OV copying scores, with controls.",
    .usage = "headscope induction --model DIR --db FILE [options]",
    .details = "On sequences r ++ r of uniformly random tokens (positions 0..2T-1): induction =\n"
        "mean over i of att[T+i, i+1]; duplicate_token = mean att[T+i, i]; prev_token =\n"
        "mean att[t, t-1]; copying = sum Re(lambda) / sum |lambda| of the head's OV circuit\n"
        "W_E W_V W_O W_U. Each also on a randomly initialised model of the same\n"
        "configuration (metric suffix _control), with standard errors over the samples.\n\n"
        "example: headscope induction --model runs/tiny --db runs.db --seq-len 32 --samples 64\n",
    .run = cmd_induction,
    OPT_RULES(induction_rules),
};

HS_COMMAND(cmd_patterns_record) = {
    .name = "patterns",
    .flags = CMD_SHARDS,
    .order = 140,
    .summary = "Clark et al. attention statistics per head, row by row during the forward.",
    .usage = "headscope patterns (--model DIR (--data FILE | --text FILE) | --maps FILE.h5) --db FILE [options]",
    .details = "entropy (nats), self, prev_token, next_token, first_token, delim (--delim ids) and\n"
        "distance, each the mean over every query of every sequence, with the standard\n"
        "error over sequences. The forward path sees one block of query rows at a time,\n"
        "so long contexts need no T x T buffer; --maps gives the same numbers from a\n"
        "capture file. --js-out also writes the head-to-head Jensen-Shannon distance\n"
        "matrix (mean over queries of sqrt(JSD)); from the forward it keeps one\n"
        "sequence's maps of every head, so use --maps for very long contexts.\nAn encoder's (bert, roberta) also cls, sep and punct, each per document over its real tokens.\n\n"
        "example: headscope patterns --model runs/tiny --data val.bin --db runs.db --delim 10,46\n",
    .run = cmd_patterns,
    OPT_RULES(patterns_rules),
};
