/* convert: MHA -> GQA/MQA by mean-pooling key/value heads (SPEC §10). */
#include <stdio.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "cli.h"
#include "convert.h"

static int cmd_convert(int argc, char **argv)
{
    const char *model = NULL, *out = NULL;
    int G = 0, force = 0, json = 0;
    opt o[] = {
        OPT_MODEL_AS(&model, "checkpoint to convert"),
        { "--kv-heads", OPT_INT, &G, 1, "G", "key/value heads per layer (divides every layer's)", 0 },
        { "--out", OPT_STR, &out, 0, "DIR", "directory of the converted checkpoint", 0 },
        { "--force", OPT_FLAG, &force, 0, NULL, "overwrite a checkpoint in --out", 0 },
        OPT_JSON(&json),
    };
    int rc = cli_opts_parse("convert", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!model || !out || !G)
        return cli_usage_error("convert", "--model DIR, --kv-heads G and --out DIR are required");
    char target[1100];
    struct stat sb;
    snprintf(target, sizeof target, "%s/model.safetensors", out);
    if (!force && stat(target, &sb) == 0) {
        fprintf(stderr, "headscope: convert: %s exists (use --force to overwrite)\n", target);
        return EXIT_FAILURE_RUN;
    }
    hs_model in, conv;
    if (hs_checkpoint_load(&in, model))
        return cli_run_error("convert");
    if ((rc = hs_convert_kv_heads(&conv, &in, G))) {
        hs_model_free(&in);
        return cli_run_error("convert");
    }
    rc = hs_checkpoint_save(&conv, out);
    if (rc)
        cli_run_error("convert");
    else if (json)
        printf("{\"out\":"), hs_json_string(stdout, out),
            printf(",\"family\":\"%s\",\"kv_heads\":%d,\"params\":%zu}\n",
                   hs_family_name(conv.cfg.family), G, conv.n_params);
    else
        printf("%s: %s family, %d key/value heads per layer (mean of %d), %zu parameters "
               "(was %zu)\n",
               out, hs_family_name(conv.cfg.family), G, in.cfg.n_kv_head[0] / G, conv.n_params,
               in.n_params);
    hs_model_free(&conv);
    hs_model_free(&in);
    return rc ? EXIT_FAILURE_RUN : 0;
}

HS_COMMAND(cmd_convert_record) = {
    .name = "convert",
    .order = 168,
    .summary = "MHA -> GQA/MQA: mean-pool each group's key/value heads (Ainslie et al. 2023).",
    .usage = "headscope convert --model DIR --kv-heads G --out DIR [--force]",
    .details =
        "Key/value head j of every layer becomes the mean of the old heads j*r .. (j+1)*r-1\n"
        "(r = old heads / G) in the k and v projection weights and biases; query head h reads\n"
        "head h / (H/G). G must divide every layer's key/value heads (a pruned model with\n"
        "uneven layers is refused). llama, mistral, qwen2 and headscope models keep their\n"
        "family; gpt2 and gpt_neox files cannot hold grouped heads, so their models are\n"
        "written in the headscope family (the same computation). With G equal to the\n"
        "model's heads the model is unchanged. Uptrain with train --init DIR.\n\n"
        "example: headscope convert --model gpt2-small --kv-heads 2 --out gqa2\n",
    .run = cmd_convert,
};
