/* Encoders' special ids and masked-LM setup (mlm.h). */
#include "mlm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The id `text` encodes to alone (added tokens are matched before anything
 * else, so a special token's text gives its id), or -1 when it encodes to
 * anything but one id. A local lookup until the tokenizer offers one. */
static int32_t token_id(const hs_tokenizer *tk, const char *text)
{
    int32_t *ids = NULL, id = -1;
    size_t n = 0;
    if (tk && !hs_tokenizer_encode(tk, text, strlen(text), 0, &ids, &n) && n == 1)
        id = ids[0];
    free(ids);
    return id;
}

/* The first of names[0..n) the tokenizer knows, or -1. */
static int32_t first_id(const hs_tokenizer *tk, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        const int32_t id = token_id(tk, names[i]);
        if (id >= 0)
            return id;
    }
    return -1;
}

void hs_special_ids_of(hs_special_ids *ids, const hs_model_config *c, const hs_tokenizer *tk)
{
    /* BERT's names, then RoBERTa's (a RoBERTa model tries its own first) */
    static const char *const bert[5] = { "[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]" };
    static const char *const roberta[5] = { "<s>", "</s>", "<pad>", "<mask>", "<unk>" };
    const int r = c->family == HS_FAMILY_ROBERTA;
    const int32_t conf[5] = { c->cls_id, c->sep_id, c->pad_id, c->mask_id, c->unk_id };
    int32_t *dst[5] = { &ids->cls, &ids->sep, &ids->pad, &ids->mask, &ids->unk };
    for (int k = 0; k < 5; k++) {
        const char *const names[2] = { r ? roberta[k] : bert[k], r ? bert[k] : roberta[k] };
        const int32_t id = first_id(tk, names, c->family == HS_FAMILY_HEADSCOPE ? 2 : 1);
        *dst[k] = id >= 0 ? id : conf[k];
    }
    ids->punct[0] = tk ? token_id(tk, ".") : 46;
    ids->punct[1] = tk ? token_id(tk, ",") : 44;
    for (int k = 0; k < 2; k++)
        if (ids->punct[k] >= c->vocab_size)
            ids->punct[k] = -1;
}

int hs_mlm_given(const hs_mlm_opts *o)
{
    return o && (o->prob >= 0 || o->mask || o->seed >= 0);
}

/* --mlm-mask every:K[:O], 0 <= O < K. */
static int parse_every(const char *s, int *K, int *O)
{
    char *end;
    *O = 0;
    if (strncmp(s, "every:", 6))
        return -1;
    long k = strtol(s + 6, &end, 10), o = 0;
    if (end == s + 6 || k < 1 || k > 1000000)
        return -1;
    if (*end == ':') {
        const char *p = end + 1;
        o = strtol(p, &end, 10);
        if (end == p || o < 0 || o >= k)
            return -1;
    }
    if (*end)
        return -1;
    *K = (int)k, *O = (int)o;
    return 0;
}

int hs_mlm_setup(hs_mlm *out, const hs_model_config *c, const hs_tokenizer *tk,
                 const hs_mlm_opts *o)
{
    memset(out, 0, sizeof *out);
    if (!c->encoder)
        return hs_mlm_given(o) ? hs_fail(HS_EINVAL, "--mlm-prob, --mlm-mask and --seed apply "
                                         "to encoders (bert, roberta) only: this %s model's "
                                         "loss is the next-token loss", hs_family_name(c->family))
                               : HS_OK;
    if (c->headless)
        return hs_config_logits(c, "the masked-LM loss");
    out->prob = o && o->prob >= 0 ? o->prob : 0.15;
    out->seed = o && o->seed >= 0 ? (unsigned long long)o->seed : 0;
    if (!(out->prob > 0 && out->prob < 1))
        return hs_fail(HS_EINVAL, "--mlm-prob %g must lie in (0, 1)", out->prob);
    if (o && o->mask && parse_every(o->mask, &out->every, &out->offset))
        return hs_fail(HS_EINVAL, "--mlm-mask \"%s\": expected every:K or every:K:O (K >= 1, "
                       "0 <= O < K)", o->mask);
    hs_special_ids ids;
    hs_special_ids_of(&ids, c, tk);
    if (ids.mask < 0 || ids.mask >= c->vocab_size)
        return hs_fail(HS_EFORMAT, "the masked-LM loss needs the mask token's id: %s, and "
                       "config.json has no mask_token_id (pass --tokenizer PATH of the model's "
                       "tokenizer, or add mask_token_id)",
                       tk ? "the tokenizer has no [MASK] (RoBERTa: <mask>)"
                          : "no tokenizer is known (none given, none in the model directory)");
    out->on = 1;
    out->mask_id = ids.mask;
    out->vocab = c->vocab_size;
    /* the model's own padding too, should the tokenizer's [PAD] differ */
    const int32_t special[6] = { ids.cls, ids.sep, ids.pad, ids.mask, ids.unk, c->pad_id };
    for (int k = 0; k < 6; k++)
        if (special[k] >= 0)
            out->special[out->n_special++] = special[k];
    return HS_OK;
}

int hs_causal_only(const hs_model_config *c, const char *command, const char *why)
{
    if (!c->encoder)
        return HS_OK;
    return hs_fail(HS_EINVAL, "%s needs a causal language model, and this is an encoder (%s): "
                   "%s", command, hs_family_name(c->family), why);
}
