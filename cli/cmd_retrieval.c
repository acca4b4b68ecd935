/* retrieval: Wu et al.'s retrieval heads on a needle grid (SPEC §18). */
#include "cli.h"
#include "study_retrieval.h"

CLI_PRINT(retrieval)

static int cmd_retrieval(int argc, char **argv)
{
    hs_retrieval_opts ro = { .seed = 1 };
    /* not pre-packed: after a few prefill chunks its forwards are decoding
     * steps, which read the weights in place (the 1B at 2,048 tokens, Zen 4:
     * 61.1 s and 3.13 GiB against 63.6 s and 5.43 GiB pre-packed) */
    cli_study s = { &hs_retrieval_kind, &ro, { .keep_tokenizer = 1, .source.bytes = 1 },
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
        OPT_KV_PLAN(&s.in.kv_plan),
        CLI_STUDY_TAIL_OPTS(s),
    };
    int rc = cli_study_parse(&s, o, CLI_N(o), argc, argv);
    CLI_EXIT_IF(rc);
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

static int cmd_kv_plan(int argc, char **argv)
{
    const char *db = NULL, *out = NULL;
    long run = 0;
    double keep = -1;
    int sink = 4, window = 64;
    opt o[] = {
        OPT_DB_AS(&db, "the index holding the retrieval run"),
        { "--run", OPT_LONG, &run, 1, "ID", "the retrieval run whose scores rank the kv heads", 0 },
        { "--keep-fraction", OPT_DOUBLE, &keep, 0, "P", "share of the kv heads kept full (0 .. 1)", 0 },
        { "--sink", OPT_INT, &sink, 0, "S", "first positions every streaming head keeps", 0 },
        { "--window", OPT_INT, &window, 1, "W", "recent positions a streaming head sees, its own included", 0 },
        { "--out", OPT_STR, &out, 0, "PLAN.json", "the plan file to write", 0 },
    };
    int rc = cli_opts_parse("kv-plan", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (!db || !run || keep < 0 || !out)
        return cli_usage_error("kv-plan", "--db FILE, --run ID, --keep-fraction P and --out "
                               "PLAN.json are required");
    hs_kv_plan p;
    if ((rc = hs_kv_plan_from_run(&p, db, run, keep, sink, window)))
        return rc == HS_EINVAL ? cli_usage_error("kv-plan", "%s", hs_last_error())
                               : cli_run_error("kv-plan");
    rc = hs_kv_plan_write(out, &p) ? cli_run_error("kv-plan") : 0;
    if (!rc)
        printf("%s: %d kv heads kept full, the others streaming (sink %d, window %d)\n", out,
               p.n_full, p.sink, p.window);
    hs_kv_plan_free(&p);
    return rc;
}

HS_COMMAND(cmd_kv_plan_record) = {
    .name = "kv-plan",
    .order = 148,
    .summary = "A KV plan from a retrieval run: the top kv heads full, the others streaming.",
    .usage = "headscope kv-plan --db FILE --run ID --keep-fraction P --out PLAN.json [options]",
    .details =
        "Ranks the kv heads by retrieval score (a kv head scores the largest of its query\n"
        "heads'; ties to the lower layer, kv head) and keeps the ceil(P x kv heads) first\n"
        "full; every other becomes a streaming head that sees the first --sink positions and\n"
        "the last --window. The plan ({\"sink\": S, \"window\": W, \"full\": [[layer, kv_head],\n"
        "...]}) runs eval, generate, capture and retrieval with --kv-plan, a streaming head's\n"
        "decoding cache holding S + W positions.\n\n"
        "example: headscope kv-plan --db runs.db --run 3 --keep-fraction 0.25 --sink 4\n"
        "         --window 64 --out plan.json\n",
    .run = cmd_kv_plan,
};
