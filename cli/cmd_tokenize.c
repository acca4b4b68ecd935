/* tokenize: text to ids and token strings through a tokenizer (SPEC §9). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tokenizer.h"

static int cmd_tokenize(int argc, char **argv)
{
    const char *path = NULL, *text = NULL, *in = NULL;
    int no_special = 0, json = 0;
    opt o[] = {
        { "--tokenizer", OPT_STR, &path, 0, "PATH", "tokenizer.json, a SentencePiece .model, or a directory with one (or vocab.json + merges.txt)", 0 },
        { "--text", OPT_STR, &text, 0, "S", "the text to encode", 0 },
        { "--in", OPT_STR, &in, 0, "FILE", "encode this regular file's text (UTF-8, at most 1 GiB) as one document", 0 },
        { "--no-special", OPT_FLAG, &no_special, 0, NULL, "leave out the post-processor's special tokens (HF add_special_tokens=False)", 0 },
        OPT_JSON(&json),
    };
    int rc = cli_opts_parse("tokenize", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (!path)
        return cli_usage_error("tokenize", "--tokenizer PATH is required");
    if (!text == !in)
        return cli_usage_error("tokenize", "give one of --text S and --in FILE");
    hs_tokenizer *tok;
    if (hs_tokenizer_open(&tok, path))
        return cli_run_error("tokenize");
    int32_t *ids = NULL;
    size_t n = 0;
    rc = in ? hs_tokenizer_encode_file(tok, in, 0, !no_special, &ids, &n)
            : hs_tokenizer_encode(tok, text, strlen(text), !no_special, &ids, &n);
    if (!rc)
        rc = hs_print_tokens(stdout, tok, ids, n, json);
    free(ids);
    hs_tokenizer_free(tok);
    return rc ? cli_run_error("tokenize") : 0;
}

HS_COMMAND(cmd_tokenize_record) = {
    .name = "tokenize",
    .order = 35,
    .summary = "Encode text with a tokenizer.json, a SentencePiece .model or GPT-2's files.",
    .usage = "headscope tokenize --tokenizer PATH (--text S | --in FILE) [--no-special] [--json]",
    .details = "Prints one line per token: its id, a tab and its text as a JSON string (a\n"
        "token's own text: its leading space kept, bytes that are not whole UTF-8\n"
        "characters shown as <0xAB>). The ids equal Hugging Face's tokenizer(text)\n"
        "(--no-special: add_special_tokens=False); a SentencePiece .model file's equal\n"
        "sentencepiece's encode (no special tokens). --json prints\n"
        "{\"ids\": [...], \"tokens\": [...]}.\n\n"
        "example: headscope tokenize --tokenizer models/llama3 --text \"Hello world\"\n",
    .run = cmd_tokenize,
};
