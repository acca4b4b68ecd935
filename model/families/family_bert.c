/* The encoders of SPEC §14: BERT (HF BertForMaskedLM) and RoBERTa
 * (RobertaForMaskedLM), one parser, writer and layout for both.
 *
 * word + position + token-type (type 0) embeddings, their LayerNorm;
 * post-LayerNorm layers x = LN(x + attn(x)), x = LN(x + ffn(x)) with
 * biases everywhere, exact-erf GELU; bidirectional attention over the keys
 * that are not padding (pad_token_id); the MLM head: dense + GELU +
 * LayerNorm (cls.predictions.transform / lm_head.dense + layer_norm), the
 * decoder tied to the word embeddings plus its bias (cls.predictions.bias /
 * lm_head.bias). RoBERTa's positions count from padding_idx + 1 over the
 * real tokens only (create_position_ids_from_input_ids).
 *
 * Tensors as BertForMaskedLM saves them ("bert." + BertModel's names, and
 * cls.predictions.*); read also without the "bert." prefix, with the legacy
 * LayerNorm.gamma / .beta, and with the decoder's own bias name. The file's
 * pooler, cls.seq_relationship (next-sentence head), position_ids and the
 * tied decoder weight are left unread. Keys: BertConfig's and
 * RobertaConfig's, their defaults where absent. */
#include <stdio.h>
#include <string.h>

#include "family.h"

/* BertConfig's and RobertaConfig's defaults (they differ only in the ids) */
enum { VOCAB = 30522, HIDDEN = 768, LAYERS = 12, HEADS = 12, FF = 3072, POSITIONS = 512 };

static int parse(hs_model_config *c, hs_cfg_reader *r)
{
    const int roberta = c->family == HS_FAMILY_ROBERTA;
    int rc, positions = 0, decoder = 0, cross = 0;
    double classifier;
    if ((rc = hs_cfg_int(r, "vocab_size", 0, VOCAB, &c->vocab_size)) ||
        (rc = hs_cfg_int(r, "hidden_size", 0, HIDDEN, &c->d_model)) ||
        (rc = hs_cfg_int(r, "num_hidden_layers", 0, LAYERS, &c->n_layer)) ||
        (rc = hs_cfg_layers_ok(r, "num_hidden_layers", c->n_layer)) ||
        (rc = hs_cfg_per_layer(r, "num_attention_heads", c->n_layer, 0, HEADS, 0, c->n_head)) ||
        (rc = hs_cfg_pruned_heads(r, c)) ||
        (rc = hs_cfg_int(r, "intermediate_size", 0, FF, &c->d_ff)) ||
        (rc = hs_cfg_int(r, "max_position_embeddings", 0, POSITIONS, &positions)) ||
        (rc = hs_cfg_int(r, "type_vocab_size", 0, 2, &c->type_vocab)) ||
        (rc = hs_cfg_double(r, "layer_norm_eps", 0, 1e-12, &c->norm_eps)) ||
        (rc = hs_cfg_double(r, "initializer_range", HS_CFG_NULL_DEFAULT, 0.02, &c->init_std)) ||
        (rc = hs_cfg_double(r, "hidden_dropout_prob", 0, 0.1, &c->hidden_dropout)) ||
        (rc = hs_cfg_double(r, "attention_probs_dropout_prob", 0, 0.1, &c->attn_dropout)) ||
        /* the sequence-classification head's, not the MLM's */
        (rc = hs_cfg_double(r, "classifier_dropout", HS_CFG_NULL_DEFAULT, 0, &classifier)) ||
        (rc = hs_cfg_bool(r, "tie_word_embeddings", HS_CFG_NULL_FALSE, 1, &c->tie_embeddings)) ||
        (rc = hs_cfg_bool(r, "is_decoder", HS_CFG_NULL_FALSE, 0, &decoder)) ||
        (rc = hs_cfg_bool(r, "add_cross_attention", HS_CFG_NULL_FALSE, 0, &cross)) ||
        (rc = hs_cfg_token_id(r, "pad_token_id", roberta ? 1 : 0, &c->pad_id)) ||
        (rc = hs_cfg_token_id(r, roberta ? "bos_token_id" : "cls_token_id", roberta ? 0 : -1,
                              &c->cls_id)) ||
        (rc = hs_cfg_token_id(r, roberta ? "eos_token_id" : "sep_token_id", roberta ? 2 : -1,
                              &c->sep_id)) ||
        (rc = hs_cfg_token_id(r, "mask_token_id", -1, &c->mask_id)) ||
        (rc = hs_cfg_token_id(r, "unk_token_id", -1, &c->unk_id)))
        return rc;
    const char *why = NULL, *key = NULL;
    const cJSON *act = hs_cfg_lookup(r, "hidden_act");
    const cJSON *pet = hs_cfg_lookup(r, "position_embedding_type");
    if (act && !(cJSON_IsString(act) && !strcmp(act->valuestring, "gelu")))
        key = "hidden_act", why = "must be \"gelu\" (the exact erf GELU)";
    else if (pet && !cJSON_IsNull(pet) &&
             !(cJSON_IsString(pet) && !strcmp(pet->valuestring, "absolute")))
        key = "position_embedding_type",
        why = "must be \"absolute\" (relative_key and relative_key_query are not implemented)";
    else if (decoder)
        key = "is_decoder", why = "true asks for a causal decoder: not implemented (only false)";
    else if (cross)
        key = "add_cross_attention", why = "true asks for cross-attention: not implemented";
    else if (c->type_vocab < 1)
        key = "type_vocab_size", why = "must be at least 1 (token type 0 is added everywhere)";
    else if (roberta && c->pad_id < 0)
        key = "pad_token_id", why = "RoBERTa's positions count from it: it cannot be null";
    else if (c->n_head[0] < 1 || c->d_model % c->n_head[0])
        key = "num_attention_heads", why = "must divide hidden_size";
    if (why)
        return hs_fail(HS_EFORMAT, "%s: \"%s\" %s", r->path, key, why);
    c->pos_offset = roberta ? c->pad_id + 1 : 0;
    if (positions <= c->pos_offset)
        return hs_fail(HS_EFORMAT, "%s: \"max_position_embeddings\"=%d leaves no position after "
                       "RoBERTa's offset pad_token_id + 1 = %d", r->path, positions,
                       c->pos_offset);
    c->n_ctx = positions - c->pos_offset; /* the rows after the offset are the context */
    memcpy(c->n_kv_head, c->n_head, sizeof c->n_head);
    c->head_dim = c->d_model / c->n_head[0];
    c->encoder = c->embed_norm = c->mlm_transform = 1;
    c->pos = HS_POS_LEARNED;
    c->norm = HS_NORM_LAYERNORM;
    c->post_norm = 1;
    c->final_norm = 1; /* the transform's LayerNorm */
    c->mlp = HS_MLP_GELU;
    c->gelu_exact = 1;
    c->attn_bias = c->mlp_bias = c->norm_bias = c->lm_head_bias = 1;
    return HS_OK;
}

static void write(cJSON *o, const hs_model_config *c)
{
    const int roberta = c->family == HS_FAMILY_ROBERTA;
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    const char *name = roberta ? (c->headless ? "RobertaModel" : "RobertaForMaskedLM")
                               : (c->headless ? "BertModel" : "BertForMaskedLM");
    cJSON_AddItemToArray(arch, cJSON_CreateString(name));
    cJSON_AddNumberToObject(o, "attention_probs_dropout_prob", c->attn_dropout);
    hs_cfg_add_pruned_heads(o, c);
    cJSON_AddStringToObject(o, "hidden_act", "gelu");
    cJSON_AddNumberToObject(o, "hidden_dropout_prob", c->hidden_dropout);
    cJSON_AddNumberToObject(o, "hidden_size", c->d_model);
    cJSON_AddNumberToObject(o, "initializer_range", c->init_std);
    cJSON_AddNumberToObject(o, "intermediate_size", c->d_ff);
    cJSON_AddNumberToObject(o, "layer_norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(o, "max_position_embeddings", hs_config_pos_rows(c));
    hs_cfg_add_per_layer(o, "num_attention_heads", c, c->n_head);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->n_layer);
    hs_cfg_add_token_id(o, "pad_token_id", c->pad_id);
    cJSON_AddStringToObject(o, "position_embedding_type", "absolute");
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings);
    cJSON_AddNumberToObject(o, "type_vocab_size", c->type_vocab);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    /* the ids a tokenizer would otherwise give, where known (a preset's) */
    const char *cls = roberta ? "bos_token_id" : "cls_token_id";
    const char *sep = roberta ? "eos_token_id" : "sep_token_id";
    const struct { const char *key; int id; } ids[] = {
        { cls, c->cls_id }, { sep, c->sep_id }, { "mask_token_id", c->mask_id },
        { "unk_token_id", c->unk_id } };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].id >= 0)
            cJSON_AddNumberToObject(o, ids[i].key, ids[i].id);
}

static int fits_common(const hs_model_config *c)
{
    hs_model_config p = *c; /* plain but for being an encoder */
    p.encoder = 0;
    return c->encoder && hs_family_plain(&p) && c->n_kv_head[0] == c->n_head[0] &&
           c->n_head[0] * c->head_dim == c->d_model && c->pos == HS_POS_LEARNED &&
           c->norm == HS_NORM_LAYERNORM && c->post_norm && c->mlp == HS_MLP_GELU &&
           c->gelu_exact && c->attn_bias && c->mlp_bias && c->norm_bias &&
           (c->headless || (c->lm_head_bias && c->final_norm && c->mlm_transform)) &&
           c->embed_norm && c->type_vocab >= 1 &&
           !c->parallel_residual && !c->qkv_bias;
}

static int fits_bert(const hs_model_config *c)
{
    return fits_common(c) && !c->pos_offset;
}

static int fits_roberta(const hs_model_config *c)
{
    return fits_common(c) && c->pad_id >= 0 && c->pos_offset == c->pad_id + 1;
}

/* Our names -> the file's, inside a layer and outside. */
static const char *const LAYER_MAP[][2] = {
    { "attn.q_proj", "attention.self.query" },   { "attn.k_proj", "attention.self.key" },
    { "attn.v_proj", "attention.self.value" },   { "attn.o_proj", "attention.output.dense" },
    { "ln_1", "attention.output.LayerNorm" },    { "mlp.fc", "intermediate.dense" },
    { "mlp.proj", "output.dense" },              { "ln_2", "output.LayerNorm" },
};

static int layout(const hs_model *m, hs_file_tensor *f, int i, int layer, const char *rest)
{
    const int roberta = m->cfg.family == HS_FAMILY_ROBERTA;
    const char *base = roberta ? "roberta." : "bert.", *head = roberta ? "lm_head." : "cls.predictions.";
    const char *name = m->tensors[i].name;
    if (layer >= 0) {
        for (size_t k = 0; k < sizeof LAYER_MAP / sizeof LAYER_MAP[0]; k++) {
            const size_t len = strlen(LAYER_MAP[k][0]);
            if (!strncmp(rest, LAYER_MAP[k][0], len) && rest[len] == '.')
                snprintf(f->name, sizeof f->name, "%sencoder.layer.%d.%s%s", base, layer,
                         LAYER_MAP[k][1], rest + len);
        }
        return 0;
    }
    static const char *const emb[][2] = {
        { "wte.weight", "embeddings.word_embeddings.weight" },
        { "wpe.weight", "embeddings.position_embeddings.weight" },
        { "tte.weight", "embeddings.token_type_embeddings.weight" },
        { "ln_emb.weight", "embeddings.LayerNorm.weight" },
        { "ln_emb.bias", "embeddings.LayerNorm.bias" } };
    for (size_t k = 0; k < sizeof emb / sizeof emb[0]; k++)
        if (!strcmp(name, emb[k][0]))
            snprintf(f->name, sizeof f->name, "%s%s", base, emb[k][1]);
    const char *const out[][3] = {
        { "mlm.dense.weight", "transform.dense.weight", "dense.weight" },
        { "mlm.dense.bias", "transform.dense.bias", "dense.bias" },
        { "ln_f.weight", "transform.LayerNorm.weight", "layer_norm.weight" },
        { "ln_f.bias", "transform.LayerNorm.bias", "layer_norm.bias" },
        { "lm_head.weight", "decoder.weight", "decoder.weight" },
        { "lm_head.bias", "bias", "bias" } };
    for (size_t k = 0; k < sizeof out / sizeof out[0]; k++)
        if (!strcmp(name, out[k][0]))
            snprintf(f->name, sizeof f->name, "%s%s", head, out[k][roberta ? 2 : 1]);
    static const char *const classifier[][3] = { /* BertForSequenceClassification's, RoBERTa's */
        { "cls.pool.weight", "bert.pooler.dense.weight", "classifier.dense.weight" },
        { "cls.pool.bias", "bert.pooler.dense.bias", "classifier.dense.bias" },
        { "cls.out.weight", "classifier.weight", "classifier.out_proj.weight" },
        { "cls.out.bias", "classifier.bias", "classifier.out_proj.bias" } };
    for (size_t k = 0; k < sizeof classifier / sizeof classifier[0]; k++)
        if (!strcmp(name, classifier[k][0]))
            snprintf(f->name, sizeof f->name, "%s", classifier[k][roberta ? 2 : 1]);
    return 0;
}

/* Other spellings of a file name, as checkpoints ship them: without the
 * model prefix (a BertModel's own names), LayerNorm.gamma / .beta (the
 * original TensorFlow conversions), the decoder's copy of the MLM bias. */
static int alt_name(const char *name, int k, char *out, size_t n)
{
    const char *base = !strncmp(name, "bert.", 5) ? "bert." : !strncmp(name, "roberta.", 8) ? "roberta." : NULL;
    const char *bare = base ? name + strlen(base) : name;
    const size_t len = strlen(name);
    const int ln_w = len > 16 && !strcmp(name + len - 16, "LayerNorm.weight");
    const int ln_b = len > 14 && !strcmp(name + len - 14, "LayerNorm.bias");
    switch (k) {
    case 0: /* without the prefix */
        return base ? snprintf(out, n, "%s", bare) > 0 : 0;
    case 1: /* gamma / beta, with the prefix */
    case 2: /* and without it */
        if (!ln_w && !ln_b)
            return 0;
        if (k == 2 && !base)
            return 0;
        {
            const char *s = k == 1 ? name : bare;
            const size_t keep = strlen(s) - (ln_w ? 6 : 4);
            return snprintf(out, n, "%.*s%s", (int)keep, s, ln_w ? "gamma" : "beta") > 0;
        }
    case 3: /* the decoder's bias, tied to the MLM bias */
        if (!strcmp(name, "cls.predictions.bias"))
            return snprintf(out, n, "cls.predictions.decoder.bias") > 0;
        if (!strcmp(name, "lm_head.bias"))
            return snprintf(out, n, "lm_head.decoder.bias") > 0;
        return 0;
    }
    return 0;
}

/* The alternative spellings above number 4. */
enum { N_ALT = 4 };

static const hs_key_rule rules[] = {
    { "rope_scaling", HS_ALLOW_NULL, "RoPE scaling" },
    { "embedding_size", HS_ALLOW_NULL, "a factorised embedding (ALBERT, ELECTRA)" },
};

/* A small BERT for byte-level data: 256 bytes and the special tokens
 * [PAD] 256, [CLS] 257, [SEP] 258, [MASK] 259 (the data never holds them but
 * the masked-LM loss needs [MASK]); post-LN, exact GELU, the MLM head. */
static void encoder(hs_model_config *c, int roberta)
{
    c->vocab_size = 260;
    c->encoder = c->embed_norm = c->mlm_transform = 1;
    c->post_norm = 1;
    c->norm = HS_NORM_LAYERNORM;
    c->mlp = HS_MLP_GELU;
    c->gelu_exact = 1;
    c->d_ff = 4 * c->d_model;
    c->attn_bias = c->mlp_bias = c->lm_head_bias = 1;
    c->type_vocab = roberta ? 1 : 2;
    c->norm_eps = roberta ? 1e-5 : 1e-12;
    c->cls_id = roberta ? 256 : 257;
    c->pad_id = roberta ? 257 : 256;
    c->sep_id = 258;
    c->mask_id = 259;
    c->pos_offset = roberta ? c->pad_id + 1 : 0;
}

static void bert(hs_model_config *c, int *H, int *G)
{
    (void)H, (void)G;
    encoder(c, 0);
}

/* RoBERTa's layout: <s> 256, <pad> 257 (positions from 258), </s> 258, <mask> 259. */
static void roberta(hs_model_config *c, int *H, int *G)
{
    (void)H, (void)G;
    encoder(c, 1);
}

static const hs_preset bert_presets[] = { { "bert", bert } };
static const hs_preset roberta_presets[] = { { "roberta", roberta } };

const hs_family_ops hs_family_bert = {
    .id = HS_FAMILY_BERT,
    .model_type = "bert",
    .title = "BERT",
    .parse = parse,
    .write = write,
    .fits = fits_bert,
    .layout = layout,
    .alt_name = alt_name,
    .n_alt = N_ALT,
    .rules = rules,
    .nrules = sizeof rules / sizeof rules[0],
    .presets = bert_presets,
    .npresets = 1,
};

const hs_family_ops hs_family_roberta = {
    .id = HS_FAMILY_ROBERTA,
    .model_type = "roberta",
    .title = "RoBERTa",
    .parse = parse,
    .write = write,
    .fits = fits_roberta,
    .layout = layout,
    .alt_name = alt_name,
    .n_alt = N_ALT,
    .rules = rules,
    .nrules = sizeof rules / sizeof rules[0],
    .presets = roberta_presets,
    .npresets = 1,
};
