/* retrieval: Wu et al.'s retrieval heads on a needle grid (SPEC §18). */
#include "cli.h"
#include "study_retrieval.h"

CLI_PRINT(retrieval)

static int cmd_retrieval(int argc, char **argv)
{
    hs_retrieval_opts ro = { .seed = 1 };
    cli_study s = { &hs_retrieval_kind, &ro, { .keep_tokenizer = 1 },
                    .flags = CLI_OWN_NEEDS | CLI_STOPPABLE | CLI_TIMED, .print = print_retrieval };
    opt o[] = {
        OPT_MODEL(&s.in.model),
        OPT_TOKENIZER(&s.in.source.tokenizer),
        OPT_TEXT_AS(&s.in.source.text, "--haystack", "text whose first N tokens (as the tokenizer encodes a document) hold each needle"),
        { "--needles", OPT_STR, &ro.needles, 0, "FILE.jsonl", "one {\"needle\", \"question\", \"answer\"} a line", 0 },
        { "--lengths", OPT_STR, &ro.lengths, 0, "N1,N2,...", "haystack lengths in tokens", 0 },
        { "--depths", OPT_STR, &ro.depths, 0, "D1,D2,...", "needle depths in percent of the length (0: first, 100: last)", 0 },
        OPT_DB_AS(&s.db, "SQLite index for the scores"),
        { "--mask-top", OPT_INT, &ro.mask_top, 0, "K", "the causal check: the grid again with the top K heads, then K random others, masked", 0 },
        { "--seed", OPT_LONG, &ro.seed, 0, "S", "seed of the K random heads", 0 },
        CLI_STUDY_TAIL_OPTS(s),
    };
    int rc = cli_study_parse(&s, o, CLI_N(o), argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!s.in.model || !s.in.source.text || !ro.needles || !ro.lengths || !ro.depths || !s.db)
        return cli_usage_error(cli_current->name, "--model DIR, --haystack FILE, --needles FILE, "
                               "--lengths N,..., --depths D,... and --db FILE are required");
    return cli_study_go(&s, o, CLI_N(o), argc, argv);
}

static const opt_rule retrieval_rules[] = {
    { "--mask-top", OPTS_NEEDS, "--seed", "it draws the random heads of the causal check" },
};

HS_COMMAND(cmd_retrieval_record) = {
    .name = "retrieval",
    .order = 147,
    .summary = "Retrieval heads on a needle-in-a-haystack grid, with the causal check.",
    .usage = "headscope retrieval --model DIR --haystack FILE --needles FILE.jsonl --lengths "
             "N,... --depths D,... --db FILE [options]",
    .details =
        "Each needle goes into the haystack's first N tokens at floor(D N / 100), the question\n"
        "follows, and greedy decoding (the compact cache) runs |answer| + 8 steps. A head\n"
        "copies at a step when its largest attention (lowest position on ties) is on a\n"
        "needle token equal to the token emitted; a run succeeds when the ROUGE-1 recall of\n"
        "the decoded text against the answer (whitespace words) exceeds 0.5. retrieval per\n"
        "head = the share of needle tokens it copied, summed over successful runs, over all\n"
        "runs; needle_accuracy = successful runs / runs. --mask-top K repeats the grid with\n"
        "the K highest-scoring heads' z set to 0 (needle_accuracy_masked_top) and with K\n"
        "random other heads (needle_accuracy_masked_random, the control). Only the decoding\n"
        "rows the copy rule reads are looked at: no T x T buffer.\n\n"
        "example: headscope retrieval --model runs/tiny --haystack book.txt --needles n.jsonl\n"
        "         --lengths 256,512 --depths 0,50,100 --db runs.db --mask-top 2\n",
    .run = cmd_retrieval,
    OPT_RULES(retrieval_rules),
};
