/* kv-bytes: cache-size arithmetic (SPEC §8). */
#include <limits.h>
#include <stdio.h>

#include "checkpoint.h"
#include "cli.h"
#include "decode.h"
#include "kv_plan.h"

static int cmd_kv_bytes(int argc, char **argv)
{
    long B = 1, N = 0, G = 0, T = 0, dh = 0, E = 2, latent = 0, rope = 0;
    int json = 0;
    const char *model = NULL, *plan = NULL;
    opt o[] = {
        OPT_MODEL_AS(&model, "checkpoint directory whose config.json gives the layers, kv heads, "
                             "head width and sliding window"),
        { "--batch", OPT_LONG, &B, 1, "B", "sequences", 0 },
        { "--layers", OPT_LONG, &N, 1, "N", "layers (required)", 0 },
        { "--kv-heads", OPT_LONG, &G, 1, "G", "key/value heads per layer (required)", 0 },
        { "--head-dim", OPT_LONG, &dh, 1, "DH", "head width (required)", 0 },
        { "--seq-len", OPT_LONG, &T, 1, "T", "cached positions (required)", 0 },
        { "--bytes", OPT_LONG, &E, 1, "E", "bytes per element", 0 },
        { "--mla-latent", OPT_LONG, &latent, 0, "C", "MLA latent width (0: no MLA line)", 0 },
        { "--mla-rope", OPT_LONG, &rope, 0, "R", "MLA decoupled rotary key width", 0 },
        OPT_KV_PLAN(&plan),
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = cli_opts_parse("kv-bytes", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (!T || (!model && (!N || !G || !dh)))
        return cli_usage_error("kv-bytes",
                               "--seq-len and either --model or --layers, --kv-heads and "
                               "--head-dim are required");
    if (!model && (N > HS_MAX_LAYERS || G > INT_MAX || dh > INT_MAX))
        return cli_usage_error("kv-bytes", "--layers at most %d, --kv-heads and --head-dim at "
                               "most %d", HS_MAX_LAYERS, INT_MAX);
    hs_model_config c = { .n_layer = (int)N, .head_dim = (int)dh }; /* or the model's */
    for (int l = 0; l < c.n_layer; l++)
        c.n_kv_head[l] = (int)G;
    if (model && hs_config_load(&c, model))
        return cli_run_error("kv-bytes");
    if (plan && hs_kv_plan_load(&c, plan))
        return cli_run_error("kv-bytes");
    const double per_token_mla = (double)N * (latent + rope) * E;
    hs_print_kv_bytes(stdout, hs_kv_cache_bytes(&c, B, T, E), latent != 0, per_token_mla,
                      per_token_mla * B * T, json);
    return 0;
}

static const opt_rule kv_bytes_rules[] = {
    { "--mla-latent", OPTS_NEEDS, "--mla-rope", "the rotary key width of the MLA line" },
    { "--model", OPTS_NEEDS, "--kv-plan", "a plan names the model's kv heads" },
    { "--model", OPTS_EXCLUDES, "--layers,--kv-heads,--head-dim", "the model's config.json gives them" },
};

HS_COMMAND(cmd_kv_bytes_record) = {
    .name = "kv-bytes",
    .order = 170,
    .summary = "KV-cache size: 2*B*N*G*T*DH*E bytes, and MLA's (latent + rope) per token.",
    .usage = "headscope kv-bytes (--layers N --kv-heads G --head-dim DH | --model DIR) --seq-len T "
             "[options]",
    .details = "example: headscope kv-bytes --layers 80 --kv-heads 8 --head-dim 128 --seq-len 2048\n"
               "With --model, a sliding window of W keeps only the last W positions; an MLA\n"
               "model (attention \"mla\") caches its latent and rope key: the MLA line's bytes.\n",
    .run = cmd_kv_bytes,
    OPT_RULES(kv_bytes_rules),
};
