/* The prompts file (analyze/prompts.c): hs_prompts_load on the fuzzed
 * JSONL. The first three bytes choose the call:
 *   byte 0  bit 0: with a tokenizer (a fixed small byte-level BPE, so text
 *           prompts encode) or without one (only id prompts load)
 *   byte 1  the vocabulary size: 0..255, or the tokenizer's own when 255
 *   byte 2  max_len: 0 (no limit) .. 15
 * the rest is the file. An accepted set must keep its promises: groups by
 * ascending length, every id below the vocabulary, every sequence within
 * max_len, the prompt counts adding up, the lines in file order; and no
 * prompt read from a file with a NUL (a NUL byte, or a \u0000 escape: the
 * text would be cut short at it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "prompts.h"

static const char TOKENIZER_JSON[] =
    "{\"added_tokens\":[{\"id\":12,\"content\":\"<|endoftext|>\",\"special\":true}],"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
    "{\"SpecialToken\":{\"id\":\"<|endoftext|>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<|endoftext|>\":"
    "{\"id\":\"<|endoftext|>\",\"ids\":[12],\"tokens\":[\"<|endoftext|>\"]}}},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":3,\"\\u0120a\":4,"
    "\"ab\":5,\"\\u0120ab\":6,\"1\":7,\"2\":8,\"x\":9,\"\\u00c3\":10,\"\\u00a9\":11},"
    "\"merges\":[\"\\u0120 a\",\"a b\",\"\\u0120a b\"]}}";

static hs_tokenizer *tok;

/* a NUL byte, or \u0000 after a character other than a backslash (so
 * surely an escape; an accepted file may still hold \\u0000) */
static int has_nul(const uint8_t *d, size_t n)
{
    if (memchr(d, 0, n))
        return 1;
    for (size_t i = 1; i + 6 <= n; i++)
        if (d[i - 1] != '\\' && !memcmp(d + i, "\\u0000", 6))
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    if (!tok) {
        const char *path = hs_fuzz_write("tokenizer.json", (const uint8_t *)TOKENIZER_JSON,
                                         strlen(TOKENIZER_JSON));
        if (hs_tokenizer_open(&tok, path) != HS_OK)
            abort(); /* the fixed file is valid */
    }
    const hs_tokenizer *t = data[0] & 1 ? tok : NULL;
    int vocab = data[1] == 255 ? hs_tokenizer_vocab_size(tok) : data[1];
    int max_len = data[2] % 16;
    const char *path = hs_fuzz_write("prompts.jsonl", data + 3, size - 3);
    hs_prompt_set set;
    if (hs_prompts_load(&set, path, t, vocab, max_len) != HS_OK) {
        if (set.group || set.n_group || set.n)
            abort(); /* a refused file leaves an empty set */
        return 0;
    }
    if (has_nul(data + 3, size - 3))
        abort(); /* a prompt cut short at a NUL */
    int total = 0, last_T = 0;
    for (int g = 0; g < set.n_group; g++) {
        const hs_prompt_group *gr = &set.group[g];
        if (gr->T <= last_T || gr->n <= 0 || (max_len > 0 && gr->T > max_len))
            abort();
        last_T = gr->T;
        total += gr->n;
        for (int i = 0; i < gr->n; i++) {
            if (i > 0 && gr->line[i] <= gr->line[i - 1])
                abort();
            if (gr->answer[i] < 0 || gr->answer[i] >= vocab || gr->wrong[i] < 0 ||
                gr->wrong[i] >= vocab)
                abort();
            for (int k = 0; k < gr->T; k++) {
                int32_t c = gr->clean[(size_t)i * gr->T + k], x = gr->corrupt[(size_t)i * gr->T + k];
                if (c < 0 || c >= vocab || x < 0 || x >= vocab)
                    abort();
            }
        }
    }
    if (total != set.n || set.n <= 0)
        abort();
    hs_prompt_set_free(&set);
    return 0;
}
