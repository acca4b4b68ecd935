/* kv-bytes: cache-size arithmetic (SPEC §8). */
#include <stdio.h>

#include "cli.h"

static int cmd_kv_bytes(int argc, char **argv)
{
    long B = 1, N = 0, G = 0, T = 0, dh = 0, E = 2, latent = 0, rope = 0;
    int json = 0;
    opt o[] = {
        { "--batch", OPT_LONG, &B, 1, "B", "sequences", 0 },
        { "--layers", OPT_LONG, &N, 1, "N", "layers (required)", 0 },
        { "--kv-heads", OPT_LONG, &G, 1, "G", "key/value heads per layer (required)", 0 },
        { "--head-dim", OPT_LONG, &dh, 1, "DH", "head width (required)", 0 },
        { "--seq-len", OPT_LONG, &T, 1, "T", "cached positions (required)", 0 },
        { "--bytes", OPT_LONG, &E, 1, "E", "bytes per element", 0 },
        { "--mla-latent", OPT_LONG, &latent, 0, "C", "MLA latent width (0: no MLA line)", 0 },
        { "--mla-rope", OPT_LONG, &rope, 0, "R", "MLA decoupled rotary key width", 0 },
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = opts_parse("kv-bytes", o, 9, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!N || !G || !T || !dh)
        return usage_error("kv-bytes", "--layers, --kv-heads, --head-dim and --seq-len are required");
    double bytes = 2.0 * B * N * G * T * dh * E;
    double per_token_mla = (double)N * (latent + rope) * E, mla = per_token_mla * B * T;
    if (json) {
        printf("{\"kv_bytes\":"), json_fixed(stdout, bytes, 0);
        printf(",\"kv_gib\":"), json_fixed(stdout, bytes / (1 << 30), 6);
        if (latent)
            printf(",\"mla_bytes\":"), json_fixed(stdout, mla, 0),
                printf(",\"mla_bytes_per_token\":"), json_fixed(stdout, per_token_mla, 0);
        printf("}\n");
    } else {
        printf("kv cache: %.0f bytes (%.4f GiB)\n", bytes, bytes / (1 << 30));
        if (latent)
            printf("mla cache: %.0f bytes (%.0f per token)\n", mla, per_token_mla);
    }
    return 0;
}

static const opt_rule kv_bytes_rules[] = {
    { "--mla-latent", OPTS_NEEDS, "--mla-rope", "the rotary key width of the MLA line" },
};

HS_COMMAND(cmd_kv_bytes_record) = {
    .name = "kv-bytes",
    .order = 170,
    .summary = "KV-cache size: 2*B*N*G*T*DH*E bytes, and MLA's (latent + rope) per token.",
    .usage = "headscope kv-bytes --layers N --kv-heads G --head-dim DH --seq-len T [options]",
    .details = "example: headscope kv-bytes --layers 80 --kv-heads 8 --head-dim 128 --seq-len 2048\n",
    .run = cmd_kv_bytes,
    OPT_RULES(kv_bytes_rules),
};
