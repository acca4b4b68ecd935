/* predict: what the model predicts next (SPEC §21). */
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"
#include "cli.h"

static int cmd_predict(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *ids_s = NULL;
    hs_inputs_spec in = { .keep_tokenizer = 1 };
    int k = 10, json = 0, threads = 0;
    opt o[] = {
        OPT_MODEL(&in.model),
        { "--prompt", OPT_STR, &text, 0, "TEXT", "the prompt, through the tokenizer", 0 },
        { "--prompt-ids", OPT_STR, &ids_s, 0, "ID,ID,...", "the prompt as token ids", 0 },
        { "--prompts", OPT_STR, &in.prompts, 0, "FILE", "a prompts file (SPEC §11): each line's answer and wrong", 0 },
        OPT_TOKENIZER(&in.source.tokenizer),
        { "--top", OPT_INT, &k, 0, "K", "the K most likely next tokens (default 10)", 0 },
        OPT_THREADS(&threads),
        OPT_JSON(&json),
    };
    int rc = cli_opts_parse("predict", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    model = in.model;
    if (!model || !!text + !!ids_s + !!in.prompts != 1)
        return cli_usage_error("predict", "--model DIR and one of --prompt, --prompt-ids, "
                                          "--prompts are required");
    cli_threads(threads);
    cli_job j;
    if ((rc = cli_open(&j, &in)))
        return rc;
    int32_t *ids = NULL;
    hs_prediction *top = NULL;
    hs_prediction_line *lines = NULL;
    const int n = in.prompts ? 0
                             : cli_prompt_ids("predict", ids_s, text, j.in.tk,
                                              j.in.m.cfg.vocab_size, &ids);
    if (n >= 0 && in.prompts && !(rc = hs_predict_prompts(&lines, &j.in.m, &j.in.ps)))
        hs_print_predict_lines(stdout, lines, j.in.ps.n, json);
    else if (n >= 0 && !in.prompts && (top = calloc((size_t)(k > 0 ? k : 1), sizeof *top)) &&
             !(rc = hs_predict_top(top, k, &j.in.m, ids, n)))
        hs_print_predict_top(stdout, top, k, j.in.tk, json);
    else /* the prompt's ids were refused (printed), or the prediction failed */
        rc = n < 0 ? EXIT_USAGE : cli_run_error("predict");
    free(ids), free(top), free(lines);
    hs_inputs_free(&j.in);
    return rc;
}

static const opt_rule predict_rules[] = {
    { "--top", OPTS_EXCLUDES, "--prompts", "a prompts file's lines report their answer and wrong" },
};

HS_COMMAND(cmd_predict_record) = {
    .name = "predict",
    .order = 305,
    .summary = "The model's next-token prediction for a prompt, or each prompt pair's answer and wrong.",
    .usage = "headscope predict --model DIR (--prompt TEXT | --prompt-ids ID,... | --prompts FILE) [options]",
    .details = "The next-token distribution at the prompt's last position: the --top K ids with\n"
        "their tokens, logits and probabilities (ties: the lower id first). With --prompts\n"
        "(SPEC §11), per line the ranks and probabilities of the answer and wrong tokens\n"
        "on the clean and the corrupt prompt, and their logit difference LD: whether the\n"
        "model does the task before a causal study measures how (SPEC §21).\n\n"
        "example: headscope predict --model runs/pythia --prompt 'The capital of France is' --top 5\n"
        "example: headscope predict --model runs/tiny --prompts ioi.jsonl --json\n",
    .run = cmd_predict,
    OPT_RULES(predict_rules),
};
