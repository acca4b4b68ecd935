/* Placeholder until the BPE tokenizer lands: every open fails clearly. */
#include "tokenizer.h"

#include <stdlib.h>

int hs_tokenizer_open(hs_tokenizer **tok, const char *path)
{
    *tok = NULL;
    return hs_fail(HS_EFORMAT, "%s: tokenizers are not supported by this build", path);
}

void hs_tokenizer_free(hs_tokenizer *tok) { (void)tok; }
int hs_tokenizer_present(const char *dir) { (void)dir; return 0; }
int hs_tokenizer_vocab_size(const hs_tokenizer *tok) { (void)tok; return 0; }

int hs_tokenizer_encode(const hs_tokenizer *tok, const char *text, size_t len, int add_special,
                        int32_t **ids, size_t *n)
{
    (void)tok, (void)text, (void)len, (void)add_special;
    *ids = NULL;
    *n = 0;
    return hs_fail(HS_EINVAL, "tokenizers are not supported by this build");
}

char *hs_tokenizer_decode(const hs_tokenizer *tok, const int32_t *ids, size_t n, int skip_special)
{
    (void)tok, (void)ids, (void)n, (void)skip_special;
    hs_fail(HS_EINVAL, "tokenizers are not supported by this build");
    return NULL;
}

int hs_tokenizer_token_text(const hs_tokenizer *tok, int32_t id, char *buf, size_t cap)
{
    (void)tok, (void)id, (void)buf, (void)cap;
    return hs_fail(HS_EINVAL, "tokenizers are not supported by this build");
}
