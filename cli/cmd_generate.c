/* generate: decoding with the model-level compact KV cache (SPEC §10). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cli.h"
#include "decode.h"
#include "kv_plan.h"
#include "pairs.h"

static int cmd_generate(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *ids_s = NULL, *tok_path = NULL, *plan = NULL;
    int max_new = -1, top_k = 0, threads = 0, json = 0;
    long seed = 0;
    hs_sample_opts so = { 0 };
    opt o[] = {
        OPT_MODEL(&model),
        { "--prompt", OPT_STR, &text, 0, "TEXT", "prompt text (through the tokenizer)", 0 },
        { "--tokenizer", OPT_STR, &tok_path, 0, "PATH", "tokenizer.json or its directory (default: the model directory's)", 0 },
        { "--prompt-ids", OPT_STR, &ids_s, 0, "I,I,...", "prompt as token ids", 0 },
        { "--source", OPT_STR, &text, 0, "TEXT", "an encoder-decoder's source text (as --prompt)", 0 },
        { "--source-ids", OPT_STR, &ids_s, 0, "I,I,...", "an encoder-decoder's source as token ids (as --prompt-ids)", 0 },
        { "--max-new", OPT_INT, &max_new, 0, "N", "tokens to generate (default 32; from a source 64 or the decoder's positions, stopping after eos)", 0 },
        { "--temperature", OPT_DOUBLE, &so.temperature, 0, "T", "0: greedy; > 0: sampling", 0 },
        { "--top-k", OPT_INT, &top_k, 0, "K", "sample among the K likeliest (0: all)", 0 },
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the sampling generator", 0 },
        OPT_KV_PLAN(&plan),
        OPT_THREADS(&threads),
        OPT_JSON(&json),
    };
    int rc = cli_opts_parse("generate", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (!model || (!text == !ids_s))
        return cli_usage_error("generate", "--model DIR and one of --prompt (--source) TEXT or --prompt-ids (--source-ids) are required");
    so.top_k = top_k, so.seed = (unsigned long long)seed;
    cli_threads(threads);
    hs_model m;
    if (hs_checkpoint_load_stored(&m, model, HS_WEIGHTS_DECODING) ||
        (plan && hs_kv_plan_load(&m.cfg, plan) && (hs_model_free(&m), 1)))
        return cli_run_error("generate");
    hs_tokenizer *tok = NULL;
    if (text && hs_tokenizer_for(&tok, tok_path, model, NULL))
        rc = cli_run_error("generate");
    int32_t *ids = NULL, *out = NULL;
    const int s2s = hs_config_seq2seq(&m.cfg), n = rc ? -1 : s2s && text ? hs_source_ids(tok, text, &m.cfg, &ids)
                                                           : cli_prompt_ids("generate", ids_s, text, tok, m.cfg.vocab_size, &ids);
    max_new = max_new >= 0 ? max_new : s2s ? hs_s2s_max_new(&m.cfg) : 32;
    if (n == 0)
        rc = cli_usage_error("generate", "the prompt is empty");
    else if (n < 0)
        rc = rc ? rc : s2s && text ? cli_run_error("generate") : EXIT_USAGE;
    hs_generate_stats st;
    if (!rc && !(out = malloc(sizeof *out * ((size_t)n + (size_t)max_new))))
        rc = cli_run_error("generate");
    if (!rc && (hs_generate(out, &st, &m, ids, n, max_new, &so) || hs_model_unchanged(&m)))
        rc = cli_run_error("generate");
    if (!rc)
        hs_print_generation(stdout, out, s2s ? 1 : n, (s2s ? 1 : n) + st.n_new, &st, tok && s2s ? hs_tokenizer_target(tok) : tok, m.cfg.vocab_size, json, s2s);
    free(ids), free(out);
    hs_tokenizer_free(tok), hs_model_free(&m);
    return rc;
}

static const opt_rule generate_rules[] = {
    { "--prompt-ids|--source-ids", OPTS_EXCLUDES, "--prompt,--source,--tokenizer", "the ids need no tokenizer" },
    { "--prompt|--source", OPTS_NEEDS, "--tokenizer", "it encodes the prompt text" },
    { "--temperature", OPTS_NEEDS, "--top-k,--seed", "greedy decoding draws nothing" },
};

HS_COMMAND(cmd_generate_record) = {
    .name = "generate",
    .order = 165,
    .summary = "Decode with the compact KV cache: greedy or temperature/top-k sampling; an encoder-decoder from a source.",
    .usage = "headscope generate --model DIR (--prompt TEXT [--tokenizer PATH] | --prompt-ids "
             "I,I,...) [options]",
    .details =
        "The prompt is fed in one forward, then one token per step; each layer caches the keys\n"
        "and values of its key/value heads only (a sliding window of W: a ring of the last W\n"
        "positions). Temperature 0 (default) is greedy (argmax, ties to the lowest id); above\n"
        "0 the K likeliest tokens (all without --top-k) are drawn by softmax(logits / T) with\n"
        "a seeded xorshift generator, so a seed repeats its text. Prompt + --max-new must fit\n"
        "the model's context (n_ctx). A byte-level model (vocabulary 256) takes --prompt\n"
        "without a tokenizer. The KV cache bytes printed equal kv-bytes --model DIR --seq-len\n"
        "(prompt + new) --bytes 4.\n\n"
        "example: headscope generate --model out --prompt-ids 1,2,3 --max-new 16 --json\n",
    .run = cmd_generate,
    OPT_RULES(generate_rules),
};
