/* dla, logit-lens and composition (SPEC §11): direct logit attribution, the
 * logit lens and Q/K/V composition scores into the index. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "metrics.h"
#include "study.h"
#include "study_interp.h"

CLI_PRINT(dla)
CLI_PRINT(logit_lens)
CLI_PRINT(composition)

/* ---- dla ---------------------------------------------------------------------------- */

static int cmd_dla(int argc, char **argv)
{
    hs_dla_opts dopt = { 0 };
    cli_study s = { &hs_dla_kind, &dopt, { .batch = 8 }, .flags = CLI_NEEDS_PROMPTS,
                    .print = print_dla };
    opt o[] = {
        OPT_MODEL(&s.in.model),
        { "--prompts", OPT_STR, &s.in.prompts, 0, "FILE.jsonl", "clean/corrupt prompts (SPEC §11); dla reads the clean ones", 0 },
        OPT_DB_AS(&s.db, "SQLite index for the attributions"),
        { "--tokenizer", OPT_STR, &s.in.source.tokenizer, 0, "PATH", "tokenizer of text prompts or --text (default: the model directory's)", 0 },
        OPT_BATCH_AS(&s.in.batch, "prompts per forward"),
        CLI_STUDY_TAIL_OPTS(s),
    };
    return cli_study_run(&s, o, CLI_N(o), argc, argv);
}

/* ---- logit-lens ----------------------------------------------------------------------- */

static int cmd_logit_lens(int argc, char **argv)
{
    hs_logit_lens_opts lo = { 0 };
    cli_study s = { &hs_logit_lens_kind, &lo, { .batch = 8 }, .print = print_logit_lens };
    hs_source *src = &s.in.source;
    opt o[] = {
        OPT_MODEL(&s.in.model),
        { "--prompts", OPT_STR, &s.in.prompts, 0, "FILE.jsonl", "prompts: the answer's loss and the logit difference at the last position", 0 },
        OPT_DATA_AS(&src->data, "token shard: the next-token loss at every position"),
        OPT_TEXT_AS(&src->text, "--text", "text file, tokenized on the fly (instead of --data)"),
        OPT_LINES(&src->lines),
        OPT_DB_AS(&s.db, "SQLite index for the curves"),
        { "--tokenizer", OPT_STR, &src->tokenizer, 0, "PATH", "tokenizer of text prompts or --text (default: the model directory's)", 0 },
        OPT_BATCH_AS(&s.in.batch, "sequences per forward"),
        OPT_SEQ_LEN(&s.in.seq_len),
        OPT_MAX_BATCHES(&s.max_batches),
        CLI_STUDY_TAIL_OPTS(s),
    };
    int rc = cli_study_parse(&s, o, CLI_N(o), argc, argv);
    CLI_EXIT_IF(rc);
    if (!!s.in.prompts + !!src->data + !!src->text != 1)
        return cli_usage_error("logit-lens", "--model DIR, --db FILE and one of --prompts FILE or "
                                             "--data FILE (or --text FILE) are required");
    s.in.need_batch = hs_source_path(src) != NULL;
    return cli_study_go(&s, o, CLI_N(o), argc, argv);
}

/* ---- composition ---------------------------------------------------------------------- */

static int cmd_composition(int argc, char **argv)
{
    hs_composition_opts co = { .seed = 1 };
    cli_study s = { &hs_composition_kind, &co, { 0 }, .print = print_composition };
    opt o[] = {
        OPT_MODEL(&s.in.model),
        OPT_DB_AS(&s.db, "SQLite index for the scores"),
        { "--seed", OPT_LONG, &co.seed, 0, "S", "seed of the random-init control", 0 },
        { "--no-control", OPT_FLAG, &co.no_control, 0, NULL, "skip the random-init control", 0 },
        CLI_STUDY_TAIL_OPTS(s),
    };
    return cli_study_run(&s, o, CLI_N(o), argc, argv);
}

static const opt_rule lens_rules[] = {
    { "--prompts", OPTS_EXCLUDES, "--data", "one source of sequences" },
    { "--text", OPTS_EXCLUDES, "--data,--prompts", "one source of sequences" },
    { "--text", OPTS_NEEDS, "--lines", "its lines are the sequences" },
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
