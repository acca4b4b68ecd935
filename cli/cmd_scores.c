/* induction and patterns: the scores and statistics of SPEC §5 into the index. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "maps.h"
#include "study.h"
#include "study_induction.h"
#include "study_patterns.h"

/* ---- induction ------------------------------------------------------------------ */

CLI_PRINT(induction)

static int cmd_induction(int argc, char **argv)
{
    hs_induction_opts io = hs_induction_defaults();
    long seed = 1;
    /* the ICL shard's sequences are the study's (--icl-seq-len) */
    cli_study s = { &hs_induction_kind, &io, { .keep_tokenizer = 1 }, .print = print_induction };
    opt o[] = {
        OPT_MODEL(&s.in.model),
        OPT_DB_AS(&s.db, "SQLite index for the scores"),
        { "--seq-len", OPT_INT, &io.seq_len, 2, "T", "length of the random half r of r ++ r (default: min(n_ctx/2, 64))", 0 },
        { "--samples", OPT_INT, &io.samples, 2, "N", "random sequences", 0 },
        { "--vocab", OPT_STR, &io.vocab, 0, "A:B|A-B", "draw r's tokens from the ids [A, B) or [A, B] (default: every id)", 0 },
        { "--from-data", OPT_STR, &io.from_data, 0, "FILE", "draw r's tokens from the ids a shard or text holds", 0 },
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the sequences and of the control model", 0 },
        OPT_BATCH_AS(&io.batch, "sequences per forward"),
        { "--causal-k", OPT_INT, &io.causal_k, 1, "K", "heads the causal check ablates", 0 },
        OPT_DATA_AS(&s.in.source.data, "evaluation shard for the ICL score (optional)"),
        OPT_TEXT_AS(&s.in.source.text, "--text", "evaluation text for the ICL score, tokenized (instead of --data)"),
        OPT_LINES(&s.in.source.lines),
        OPT_TOKENIZER(&s.in.source.tokenizer),
        { "--icl-seq-len", OPT_INT, &io.icl_seq_len, 2, "T", "sequence length of the ICL score (default: min(n_ctx, 1024))", 0 },
        { "--early", OPT_INT, &io.early, 0, "P", "ICL: the early position", 0 },
        { "--late", OPT_INT, &io.late, 1, "P", "ICL: the late position", 0 },
        { "--random-draws", OPT_INT, &io.random_draws, 2, "D", "random sets of K heads to compare with", 0 },
        { "--min-score", OPT_DOUBLE, &io.min_score, 0, "S", "induction score a head needs for the claim", 0 },
        CLI_STUDY_TAIL_OPTS(s),
    };
    int rc = cli_study_parse(&s, o, CLI_N(o), argc, argv);
    io.seed = (unsigned long long)seed;
    return rc ? (rc < 0 ? 0 : rc) : cli_study_go(&s, o, CLI_N(o), argc, argv);
}

/* ---- patterns ------------------------------------------------------------------- */

CLI_PRINT(patterns)

static int cmd_patterns(int argc, char **argv)
{
    hs_patterns_opts po = { .seed = 1 };
    cli_study s = { &hs_patterns_kind, &po, { .batch = 4, .need_batch = 1, .keep_tokenizer = 1, .allow_pairs = 1 },
                    .flags = CLI_OWN_NEEDS, .print = print_patterns };
    opt o[] = {
        OPT_MODEL_AS(&s.in.model, "checkpoint directory (row-wise during the forward)"),
        OPT_DATA(&s.in.source.data),
        OPT_TEXT(&s.in.source.text),
        OPT_LINES(&s.in.source.lines),
        OPT_TOKENIZER(&s.in.source.tokenizer),
        OPT_PAIRS(&s.in.pairs),
        { "--maps", OPT_STR, &po.maps, 0, "FILE.h5", "compute from a capture file instead", 0 },
        OPT_DB_AS(&s.db, "SQLite index for the statistics"),
        { "--delim", OPT_STR, &po.delim, 0, "ID,ID,...", "token ids counted by 'delim'", 0 },
        { "--js-out", OPT_STR, &po.js_out, 0, "FILE.csv", "also write the head-to-head Jensen-Shannon distance matrix", 0 },
        { "--control", OPT_FLAG, &po.control, 0, NULL, "with --model: also <stat>_control of a randomly initialised model", 0 },
        { "--sink-epsilon", OPT_DOUBLE, &po.sink_epsilon, 0, "E", "sink_rate: the share of heads whose alpha_0 exceeds E (default 0.3)", 0 },
        { "--sink-positions", OPT_INT, &po.sink_positions, 0, "K", "also alpha_k of every head for k < K (position_metrics rows sink_alpha)", 0 },
        { "--seed", OPT_LONG, &po.seed, 0, "S", "seed of the control model", 0 },
        OPT_BATCH(&s.in.batch),
        OPT_SEQ_LEN(&s.in.seq_len),
        OPT_MAX_BATCHES(&s.max_batches),
        CLI_STUDY_TASK_OPTS(s),
        CLI_STUDY_TAIL_OPTS(s),
    };
    int rc = cli_study_parse(&s, o, CLI_N(o), argc, argv);
    CLI_EXIT_IF(rc);
    if (!s.db || (!po.maps && (!s.in.model || (!hs_source_path(&s.in.source) && !s.task.path && !s.in.pairs))))
        return cli_usage_error("patterns", "--model DIR, --data FILE (or --text, --task or --pairs FILE) and --db FILE are required (or --maps FILE and --db FILE)");
    s.in.maps = po.maps; /* the maps name their model and data: the run records the file */
    return cli_study_go(&s, o, CLI_N(o), argc, argv);
}

static const opt_rule induction_rules[] = {
    OPT_TEXT_RULE_DATA,
    { "--text|--from-data", OPTS_NEEDS, "--tokenizer", "it tokenizes a text" },
    { "--vocab", OPTS_EXCLUDES, "--from-data", "r's tokens come from one of them" },
    { "--data|--text", OPTS_NEEDS, "--icl-seq-len,--early,--late",
      "they set the ICL score on --data" },
};

static const opt_rule patterns_rules[] = {
    OPT_TASK_RULES,
    { "--maps", OPTS_EXCLUDES, "--model,--data,--pairs", "the map file names its model and data" },
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
    .usage = "headscope patterns (--model DIR (--data FILE | --text FILE | --pairs FILE) | --maps FILE.h5) --db FILE [options]",
    .details = "entropy (nats), self, prev_token, next_token, first_token, delim (--delim ids) and\n"
        "distance, each the mean over every query of every sequence, with the standard\n"
        "error over sequences. The forward path sees one block of query rows at a time,\n"
        "so long contexts need no T x T buffer; --maps gives the same numbers from a\n"
        "capture file. --js-out also writes the head-to-head Jensen-Shannon distance\n"
        "matrix (mean over queries of sqrt(JSD)); from the forward it keeps one\n"
        "sequence's maps of every head, so use --maps for very long contexts.\nAn encoder's (bert, roberta) also cls, sep and punct, each per document over its real tokens.\nAn encoder-decoder's (--pairs) per attention type (enc, dec, cross: target queries\nagainst source keys), each per pair over its real queries.\n\n"
        "example: headscope patterns --model runs/tiny --data val.bin --db runs.db --delim 10,46\n",
    .run = cmd_patterns,
    OPT_RULES(patterns_rules),
};
