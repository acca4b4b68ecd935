/* convert: MHA -> GQA/MQA by mean-pooling key/value heads (SPEC §10); a
 * checkpoint into safetensors (SPEC §20). */
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "cli.h"

static int cmd_convert(int argc, char **argv)
{
    const char *model = NULL, *out = NULL, *to = NULL;
    int G = 0, force = 0, json = 0;
    opt o[] = {
        OPT_MODEL_AS(&model, "checkpoint to convert"),
        { "--kv-heads", OPT_INT, &G, 1, "G", "key/value heads per layer (divides every layer's)", 0 },
        { "--to", OPT_STR, &to, 0, "safetensors", "the same tensors in another format", 0 },
        { "--out", OPT_STR, &out, 0, "DIR", "directory of the converted checkpoint", 0 },
        { "--force", OPT_FLAG, &force, 0, NULL, "overwrite a checkpoint in --out", 0 },
        OPT_JSON(&json),
    };
    int rc = cli_opts_parse("convert", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (!model || !out || !G == !to || (to && strcmp(to, "safetensors")))
        return cli_usage_error("convert", "--model DIR, --out DIR and one of --kv-heads G or "
                                          "--to safetensors are required");
    char target[1100], config[1100]; /* a checkpoint's files are never replaced unasked */
    snprintf(target, sizeof target, "%s/model.safetensors", out);
    snprintf(config, sizeof config, "%s/config.json", out);
    if (hs_output_free(target, force) || hs_output_free(config, force))
        return cli_run_error("convert");
    int n = 0, shards = 0; /* --to safetensors: past 5 GB in shards, as save_pretrained */
    hs_kv_conversion c = { 0 };
    if (to ? hs_checkpoint_convert(model, out, (size_t)5000000000u, &n, &shards)
           : hs_checkpoint_convert_kv_heads(model, out, G, &c))
        return cli_run_error("convert");
    if (json)
        printf("{\"out\":"), hs_json_string(stdout, out);
    if (to && json)
        printf(",\"format\":\"safetensors\",\"tensors\":%d,\"shards\":%d}\n", n, shards);
    else if (to)
        printf("%s: %d tensors as safetensors (%d file%s)\n", out, n, shards,
               shards > 1 ? "s" : "");
    else if (json)
        printf(",\"family\":\"%s\",\"kv_heads\":%d,\"params\":%zu}\n",
               hs_family_name(c.family), G, c.params_now);
    else
        printf("%s: %s family, %d key/value heads per layer (mean of %d), %zu parameters "
               "(was %zu)\n", out, hs_family_name(c.family), G, c.mean_of, c.params_now, c.params_was);
    return 0;
}

HS_COMMAND(cmd_convert_record) = {
    .name = "convert",
    .order = 168,
    .summary = "MHA -> GQA/MQA (mean-pooled key/value heads); a checkpoint into safetensors.",
    .usage = "headscope convert --model DIR (--kv-heads G | --to safetensors) --out DIR [--force]",
    .details =
        "--to safetensors writes every tensor of the checkpoint (pytorch_model.bin, read\n"
        "without running its pickle, or safetensors) with the same name, dtype and bytes\n"
        "into model.safetensors (past 5 GB: shards and model.safetensors.index.json, as\n"
        "transformers' save_pretrained), beside copies of config.json and the tokenizer\n"
        "files (config.json written last). Convert once; every command then maps it.\n\n"
        "--kv-heads: key/value head j of every layer becomes the mean of the old heads\n"
        "j*r .. (j+1)*r-1 (r = old heads / G) in the k and v projection weights and biases;\n"
        "query head h reads head h / (H/G). G must divide every layer's key/value heads (a\n"
        "pruned model with uneven layers is refused). llama, mistral, qwen2 and headscope\n"
        "models keep their family; gpt2 and gpt_neox files cannot hold grouped heads, so\n"
        "their models are written in the headscope family (the same computation). With G\n"
        "equal to the model's heads the model is unchanged. Uptrain with train --init DIR.\n\n"
        "examples: headscope convert --model gpt2-small --kv-heads 2 --out gqa2\n"
        "          headscope convert --model bert-mnli --to safetensors --out bert-mnli-st\n",
    .run = cmd_convert,
};
