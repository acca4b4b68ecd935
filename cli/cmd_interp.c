/* dla, logit-lens and composition (SPEC §11): direct logit attribution, the
 * logit lens and Q/K/V composition scores into the index. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "metrics.h"
#include "study.h"

/* What the three commands share: the model, the prompts (or a shard), the
 * run. */
typedef struct {
    const char *model, *db;
    hs_inputs_spec in;
    int threads, json, allow_nonfinite;
    long max_batches, seed;
    cli_job j;
} interp;

/* Loads the inputs, lets the command's own check refuse the model (a
 * usage error), then opens the run: bad input records nothing. */
static int interp_open(interp *c, int (*check)(const hs_model_config *), const opt *o, int n,
                       int argc, char **argv)
{
    if (c->threads)
        hs_set_threads(c->threads);
    c->in.model = c->model;
    c->in.need_batch = hs_source_path(&c->in.source) != NULL;
    int rc = cli_open(&c->j, &c->in);
    if (!rc && check && check(&c->j.in.m.cfg)) {
        hs_inputs_free(&c->j.in);
        return cli_run_error(cli_current->name);
    }
    return rc ? rc : cli_start(&c->j, c->db, 0, c->model, o, n, argc, argv);
}

static hs_study_io interp_io(interp *c, phase_bars *bars)
{
    hs_study_io io = cli_study_io(bars, 0);
    io.allow_nonfinite = c->allow_nonfinite;
    return io;
}

/* ---- dla ---------------------------------------------------------------------------- */


static int cmd_dla(int argc, char **argv)
{
    interp c = { .in = { .batch = 8 } };
    opt o[] = {
        OPT_MODEL(&c.model),
        { "--prompts", OPT_STR, &c.in.prompts, 0, "FILE.jsonl", "clean/corrupt prompts (SPEC §11); dla reads the clean ones", 0 },
        OPT_DB_AS(&c.db, "SQLite index for the attributions"),
        { "--tokenizer", OPT_STR, &c.in.source.tokenizer, 0, "PATH", "tokenizer of text prompts or --text (default: the model directory's)", 0 },
        OPT_BATCH_AS(&c.in.batch, "prompts per forward"),
        OPT_THREADS(&c.threads),
        OPT_JSON(&c.json),
        OPT_ALLOW_NONFINITE(&c.allow_nonfinite),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    const char *cmd = cli_current->name;
    int rc = cli_opts_parse(cmd, o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!c.model || !c.in.prompts || !c.db)
        return cli_usage_error(cmd, "--model DIR, --prompts FILE and --db FILE are required");
    if ((rc = interp_open(&c, hs_dla_check, o, n, argc, argv)))
        return rc;
    hs_dla_result r;
    phase_bars bars;
    hs_study_io io = interp_io(&c, &bars);
    rc = hs_dla_study(&r, &c.j.in.m, &c.j.in.ps, c.in.batch, &io);
    if (!rc)
        rc = hs_run_rows(c.j.run, &r.table, NULL, 0);
    const long long id = hs_run_id(c.j.run);
    if (!(rc = cli_finish(&c.j, rc)))
        hs_print_dla(stdout, &(hs_summary){ id, c.db, 0, c.json }, &r);
    hs_dla_result_free(&r);
    return rc;
}

/* ---- logit-lens ----------------------------------------------------------------------- */


static int cmd_logit_lens(int argc, char **argv)
{
    interp c = { .in = { .batch = 8 } };
    hs_source *src = &c.in.source;
    opt o[] = {
        OPT_MODEL(&c.model),
        { "--prompts", OPT_STR, &c.in.prompts, 0, "FILE.jsonl", "prompts: the answer's loss and the logit difference at the last position", 0 },
        OPT_DATA_AS(&src->data, "token shard: the next-token loss at every position"),
        OPT_TEXT_AS(&src->text, "--text", "text file, tokenized on the fly (instead of --data)"),
        OPT_DB_AS(&c.db, "SQLite index for the curves"),
        { "--tokenizer", OPT_STR, &src->tokenizer, 0, "PATH", "tokenizer of text prompts or --text (default: the model directory's)", 0 },
        OPT_BATCH_AS(&c.in.batch, "sequences per forward"),
        OPT_SEQ_LEN(&c.in.seq_len),
        OPT_MAX_BATCHES(&c.max_batches),
        OPT_THREADS(&c.threads),
        OPT_JSON(&c.json),
        OPT_ALLOW_NONFINITE(&c.allow_nonfinite),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    int rc = cli_opts_parse("logit-lens", o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!c.model || !c.db || !!c.in.prompts + !!src->data + !!src->text != 1)
        return cli_usage_error("logit-lens", "--model DIR, --db FILE and one of --prompts FILE or "
                                             "--data FILE (or --text FILE) are required");
    if ((rc = interp_open(&c, hs_logit_lens_check, o, n, argc, argv)))
        return rc;
    const hs_inputs *in = &c.j.in;
    hs_lens_opts lo = { c.in.prompts ? &in->ps : NULL, hs_source_path(src) ? &in->tok : NULL,
                        c.in.batch, in->seq_len, (size_t)c.max_batches };
    hs_lens_result r;
    phase_bars bars;
    hs_study_io io = interp_io(&c, &bars);
    rc = hs_logit_lens_study(&r, &in->m, &lo, &io);
    if (!rc)
        rc = hs_run_rows(c.j.run, &r.table, NULL, 0);
    const long long id = hs_run_id(c.j.run);
    if (!(rc = cli_finish(&c.j, rc)))
        hs_print_lens(stdout, &(hs_summary){ id, c.db, 0, c.json }, &r);
    hs_lens_result_free(&r);
    return rc;
}

/* ---- composition ---------------------------------------------------------------------- */


static int cmd_composition(int argc, char **argv)
{
    interp c = { .seed = 1 };
    int no_control = 0;
    opt o[] = {
        OPT_MODEL(&c.model),
        OPT_DB_AS(&c.db, "SQLite index for the scores"),
        { "--seed", OPT_LONG, &c.seed, 0, "S", "seed of the random-init control", 0 },
        { "--no-control", OPT_FLAG, &no_control, 0, NULL, "skip the random-init control", 0 },
        OPT_THREADS(&c.threads),
        OPT_JSON(&c.json),
        OPT_ALLOW_NONFINITE(&c.allow_nonfinite),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    const char *cmd = cli_current->name;
    int rc = cli_opts_parse(cmd, o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!c.model || !c.db)
        return cli_usage_error(cmd, "--model DIR and --db FILE are required");
    if ((rc = interp_open(&c, hs_composition_check, o, n, argc, argv)))
        return rc;
    hs_composition_result r;
    phase_bars bars;
    hs_study_io io = interp_io(&c, &bars);
    rc = hs_composition_study(&r, &c.j.in.m, !no_control, (unsigned long long)c.seed, &io);
    if (!rc)
        rc = hs_composition_record(hs_run_index(c.j.run), hs_run_id(c.j.run), &r);
    const long long id = hs_run_id(c.j.run);
    if (!(rc = cli_finish(&c.j, rc)))
        hs_print_composition(stdout, &(hs_summary){ id, c.db, 0, c.json }, &r, !no_control);
    hs_composition_result_free(&r);
    return rc;
}

static const opt_rule lens_rules[] = {
    { "--prompts", OPTS_EXCLUDES, "--data", "one source of sequences" },
    { "--text", OPTS_EXCLUDES, "--data,--prompts", "one source of sequences" },
    { "--data|--text", OPTS_NEEDS, "--seq-len,--max-batches", "they cut the shard into sequences" },
    { "--prompts|--text", OPTS_NEEDS, "--tokenizer", "it encodes text prompts and --text" },
};

static const opt_rule composition_rules[] = {
    { "--no-control", OPTS_EXCLUDES, "--seed", "it seeds the control" },
};

HS_COMMAND(cmd_dla_record) = {
    .name = "dla",
    .order = 172,
    .summary = "Direct logit attribution of every head, MLP and bias to the logit difference.",
    .usage = "headscope dla --model DIR --prompts FILE.jsonl --db FILE [options]",
    .details = "On the clean prompts (SPEC §11), the logit difference LD = logit[answer] -\n"
        "logit[wrong] at the last position split into the additive parts of the final\n"
        "residual stream, each through the final norm with the forward's own scale frozen\n"
        "and dotted with u[answer] - u[wrong]: dla per head (z W_O, no bias) and per\n"
        "layer's MLP (head -1); model-wide dla_embed, dla_pos_embed, dla_attn_bias,\n"
        "dla_final_norm_bias, dla_lm_head_bias (those the model has); logit_diff_clean.\n"
        "Means over prompts with standard errors; the parts sum to logit_diff_clean.\n"
        "Refused: post-norm models, and gemma2, gemma3_text, olmo2, whose sublayer\n"
        "outputs are normed before they are added (no additive residual stream).\n"
        "With a final soft-cap the pre-cap LD is attributed (and is logit_diff_clean).\n\n"
        "example: headscope dla --model runs/tiny --prompts ioi.jsonl --db runs.db\n",
    .run = cmd_dla,
};

HS_COMMAND(cmd_logit_lens_record) = {
    .name = "logit-lens",
    .order = 174,
    .summary = "The residual stream entering each layer decoded through the final norm.",
    .usage = "headscope logit-lens --model DIR (--prompts FILE.jsonl | --data FILE.bin) --db FILE [options]",
    .details = "Rows at (layer l, head -1), l = 0 .. L; entry L is the final residual, i.e. the\n"
        "model's own output. With --data: logit_lens_loss, the next-token loss over every\n"
        "position (standard error over sequences). With --prompts (clean): logit_lens_loss =\n"
        "-log p(answer) at the last position and logit_lens_logit_diff (standard error\n"
        "over prompts).\n\n"
        "example: headscope logit-lens --model runs/tiny --data val.bin --db runs.db\n",
    .run = cmd_logit_lens,
    OPT_RULES(lens_rules),
};

HS_COMMAND(cmd_composition_record) = {
    .name = "composition",
    .order = 176,
    .summary = "Q-, K- and V-composition scores of every head pair, with random-init controls.",
    .usage = "headscope composition --model DIR --db FILE [options]",
    .details = "As TransformerLens's all_composition_scores (Elhage et al. 2021) on the raw\n"
        "weights: |OV_A QK_B|_F / (|OV_A|_F |QK_B|_F) (Q), the same with QK_B transposed\n"
        "(K) and |OV_A OV_B|_F / (|OV_A|_F |OV_B|_F) (V), for every head A of an earlier\n"
        "layer and B of a later one (GQA: each head's own key/value head), into\n"
        "head_pair_metrics, beside the same of a randomly initialised model of the same\n"
        "configuration (_control), and their means over pairs (<kind>_composition_mean).\n\n"
        "example: headscope composition --model runs/tiny --db runs.db\n",
    .run = cmd_composition,
    OPT_RULES(composition_rules),
};
