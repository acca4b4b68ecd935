/* The encoder-decoders of SPEC §17: T5 (HF T5ForConditionalGeneration, v1.0
 * and v1.1 / Flan-T5), BART (BartForConditionalGeneration) and Marian
 * (MarianMTModel). One model holds both stacks (config.h's enc_layers): the
 * encoder's layers first, then the decoder's, each of those with
 * cross-attention; seq2seq.h runs them.
 *
 * T5: shared embeddings unscaled, no positions but a relative attention bias
 * (buckets x heads, in the first layer of each stack, shared by its layers),
 * pre-RMSNorm sublayers without biases, scores without 1/sqrt(dh), the MLP
 * of feed_forward_proj (relu, gelu, gated-gelu: gelu_new gate x linear,
 * gated-silu), a final norm per stack, a tied lm_head reading the decoder's
 * output times d_model^-1/2.
 *
 * BART: embeddings times sqrt(d_model) with scale_embedding, learned
 * positions read at t + 2, layernorm_embedding per stack, post-LayerNorm
 * sublayers with biases, activation_function, the lm_head tied to the shared
 * embeddings plus final_logits_bias. Marian: BART's layers with sinusoidal
 * positions (no table, no offset) and no layernorm_embedding.
 *
 * Tensors as the ForConditionalGeneration classes save them; the tied
 * copies (encoder/decoder embed_tokens, a tied lm_head.weight) and Marian's
 * stored sinusoid tables are left unread. */
#include <stdio.h>
#include <string.h>

#include "family.h"

/* Keys both stacks must agree on, since one configuration describes them. */
static int same(const hs_cfg_reader *r, const char *a, int va, const char *b, int vb)
{
    if (va == vb)
        return HS_OK;
    return hs_fail(HS_EFORMAT, "%s: \"%s\"=%d and \"%s\"=%d differ: stacks of different widths "
                               "are not implemented", r->path, a, va, b, vb);
}

/* Marks keys that the current modeling code no longer reads as read:
 * fairseq-era switches (BART and Marian are computed by model_type alone),
 * layer drop (training only), T5's derived dense_act_fn / is_gated_act
 * (recomputed from feed_forward_proj) and old context keys. */
static void accept(hs_cfg_reader *r, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hs_cfg_lookup(r, keys[i]);
}

/* The layers of both stacks into c: E encoder layers of He heads, D decoder
 * layers of Hd heads, dh wide. */
static int stacks(hs_model_config *c, const hs_cfg_reader *r, int E, int D, int He, int Hd,
                  int dh)
{
    if (E < 1 || D < 1 || E + D > HS_MAX_LAYERS)
        return hs_fail(HS_EFORMAT, "%s: %d encoder and %d decoder layers: each stack needs at "
                                   "least one, %d in all at most", r->path, E, D, HS_MAX_LAYERS);
    if (He < 1 || Hd < 1 || He > HS_MAX_HEADS || Hd > HS_MAX_HEADS || dh < 1)
        return hs_fail(HS_EFORMAT, "%s: attention heads (%d, %d) and their width %d must be "
                                   "positive (heads at most %d)", r->path, He, Hd, dh,
                       HS_MAX_HEADS);
    c->enc_layers = E;
    c->n_layer = E + D;
    for (int l = 0; l < c->n_layer; l++)
        c->n_head[l] = c->n_kv_head[l] = l < E ? He : Hd;
    c->head_dim = dh;
    return HS_OK;
}

/* Both stacks' heads with keys and values of their own (no GQA). */
static int full_heads(const hs_model_config *c)
{
    return c->n_kv_head[0] == c->n_head[0] && c->n_kv_head[c->enc_layers] == c->n_head[c->enc_layers];
}

/* ---- T5 ------------------------------------------------------------------ */

static int parse_t5(hs_model_config *c, hs_cfg_reader *r)
{
    int rc, E, D, H, enc_dec = 1, kind = 0;
    double factor;
    static const char *const ff[] = { "relu", "gelu", "gated-gelu", "gated-silu" };
    static const char *const unread[] = { "dense_act_fn", "is_gated_act", "n_positions" };
    accept(r, unread, sizeof unread / sizeof unread[0]);
    if ((rc = hs_cfg_int(r, "vocab_size", 0, 32128, &c->vocab_size)) ||
        (rc = hs_cfg_int(r, "d_model", 0, 512, &c->d_model)) ||
        (rc = hs_cfg_int(r, "d_kv", 0, 64, &c->head_dim)) ||
        (rc = hs_cfg_int(r, "d_ff", 0, 2048, &c->d_ff)) ||
        (rc = hs_cfg_int(r, "num_layers", 0, 6, &E)) ||
        (rc = hs_cfg_int(r, "num_decoder_layers", HS_CFG_NULL_DEFAULT, E, &D)) ||
        (rc = hs_cfg_int(r, "num_heads", 0, 8, &H)) ||
        (rc = hs_cfg_int(r, "relative_attention_num_buckets", 0, 32, &c->rel_buckets)) ||
        (rc = hs_cfg_int(r, "relative_attention_max_distance", 0, 128, &c->rel_max_distance)) ||
        (rc = hs_cfg_double(r, "layer_norm_epsilon", 0, 1e-6, &c->norm_eps)) ||
        (rc = hs_cfg_double(r, "initializer_factor", 0, 1, &factor)) ||
        (rc = hs_cfg_double(r, "dropout_rate", 0, 0.1, &c->hidden_dropout)) ||
        (rc = hs_cfg_choice(r, "feed_forward_proj", ff, 4, 0, &kind)) ||
        (rc = hs_cfg_bool(r, "tie_word_embeddings", HS_CFG_NULL_FALSE, 1, &c->tie_embeddings)) ||
        (rc = hs_cfg_bool(r, "is_encoder_decoder", HS_CFG_NULL_FALSE, 1, &enc_dec)) ||
        (rc = hs_cfg_token_id(r, "pad_token_id", 0, &c->pad_id)) ||
        (rc = hs_cfg_token_id(r, "eos_token_id", 1, &c->eos_id)) ||
        (rc = hs_cfg_token_id(r, "decoder_start_token_id", c->pad_id, &c->dec_start_id)) ||
        (rc = stacks(c, r, E, D, H, H, c->head_dim)))
        return rc;
    if (!enc_dec)
        return hs_fail(HS_EFORMAT, "%s: \"is_encoder_decoder\" false asks for T5's encoder or "
                                   "decoder alone: not implemented", r->path);
    c->init_std = 0.02; /* random weights only */
    c->pos = HS_POS_NONE;
    c->norm = HS_NORM_RMSNORM;
    c->final_norm = 1;
    c->attn_scalar = 1; /* scores q . k, unscaled */
    c->tied_scale = c->tie_embeddings;
    c->mlp = kind < 2 ? HS_MLP_GELU : kind == 2 ? HS_MLP_GEGLU : HS_MLP_SWIGLU;
    c->act = kind == 0 ? HS_ACT_RELU : HS_ACT_GELU;
    c->gelu_exact = kind == 1; /* "gelu" is ACT2FN's exact one; gated-gelu's is gelu_new */
    c->n_ctx = 1 << 20;        /* no position table: only memory bounds a sequence */
    return HS_OK;
}

static void write_t5(cJSON *o, const hs_model_config *c)
{
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("T5ForConditionalGeneration"));
    static const char *const ff[] = { "relu", "gelu", "gated-gelu", "gated-silu" };
    const int kind = c->mlp == HS_MLP_GEGLU ? 2 : c->mlp == HS_MLP_SWIGLU ? 3 : c->gelu_exact;
    cJSON_AddNumberToObject(o, "d_ff", c->d_ff);
    cJSON_AddNumberToObject(o, "d_kv", c->head_dim);
    cJSON_AddNumberToObject(o, "d_model", c->d_model);
    hs_cfg_add_token_id(o, "decoder_start_token_id", c->dec_start_id);
    cJSON_AddNumberToObject(o, "dropout_rate", c->hidden_dropout);
    hs_cfg_add_token_id(o, "eos_token_id", c->eos_id);
    cJSON_AddStringToObject(o, "feed_forward_proj", ff[kind]);
    cJSON_AddNumberToObject(o, "initializer_factor", 1);
    cJSON_AddBoolToObject(o, "is_encoder_decoder", 1);
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", c->norm_eps);
    cJSON_AddNumberToObject(o, "num_decoder_layers", c->n_layer - c->enc_layers);
    cJSON_AddNumberToObject(o, "num_heads", c->n_head[0]);
    cJSON_AddNumberToObject(o, "num_layers", c->enc_layers);
    hs_cfg_add_token_id(o, "pad_token_id", c->pad_id);
    cJSON_AddNumberToObject(o, "relative_attention_max_distance", c->rel_max_distance);
    cJSON_AddNumberToObject(o, "relative_attention_num_buckets", c->rel_buckets);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
}

static int fits_t5(const hs_model_config *c)
{
    return hs_config_seq2seq(c) && full_heads(c) && c->pos == HS_POS_NONE && c->norm == HS_NORM_RMSNORM &&
           !c->post_norm && c->final_norm && c->attn_scalar == 1 && c->rel_buckets &&
           c->tied_scale == c->tie_embeddings && !c->attn_bias && !c->mlp_bias &&
           !c->lm_head_bias && !c->embed_scale && !c->embed_norm && !c->norm_offset &&
           (c->mlp != HS_MLP_GELU || c->act != HS_ACT_SILU);
}

/* f's name, for our tensor `name` outside the layers, from table's row
 * (ours, the file's) that names it; left as ours where none does. */
static void rename_top(hs_file_tensor *f, const char *name, const char *const (*table)[2],
                       size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(name, table[k][0]))
            snprintf(f->name, sizeof f->name, "%s", table[k][1]);
}

/* Inside a layer T5 names the sublayer by its index within the block: 0
 * self-attention, 1 cross-attention in the decoder, then the MLP. */
static int layout_t5(const hs_model *m, hs_file_tensor *f, int i, int layer, const char *rest)
{
    const hs_model_config *c = &m->cfg;
    const char *name = m->tensors[i].name;
    static const char *const top[][2] = {
        { "wte.weight", "shared.weight" },
        { "enc.rel_bias.weight", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight" },
        { "rel_bias.weight", "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight" },
        { "enc.ln_f.weight", "encoder.final_layer_norm.weight" },
        { "ln_f.weight", "decoder.final_layer_norm.weight" },
    };
    if (layer < 0) {
        rename_top(f, name, top, sizeof top / sizeof top[0]);
        return 0;
    }
    const int dec = hs_config_cross(c, layer), b = dec ? layer - c->enc_layers : layer;
    const int ff = dec ? 2 : 1; /* the MLP's sublayer */
    static const char *const map[][3] = { /* ours, sublayer (-1: the MLP's), HF's */
        { "ln_1.weight", "0", "layer_norm.weight" },
        { "attn.q_proj.weight", "0", "SelfAttention.q.weight" },
        { "attn.k_proj.weight", "0", "SelfAttention.k.weight" },
        { "attn.v_proj.weight", "0", "SelfAttention.v.weight" },
        { "attn.o_proj.weight", "0", "SelfAttention.o.weight" },
        { "ln_x.weight", "1", "layer_norm.weight" },
        { "xattn.q_proj.weight", "1", "EncDecAttention.q.weight" },
        { "xattn.k_proj.weight", "1", "EncDecAttention.k.weight" },
        { "xattn.v_proj.weight", "1", "EncDecAttention.v.weight" },
        { "xattn.o_proj.weight", "1", "EncDecAttention.o.weight" },
        { "ln_2.weight", "-", "layer_norm.weight" },
        { "mlp.fc.weight", "-", "DenseReluDense.wi.weight" },
        { "mlp.proj.weight", "-", "DenseReluDense.wo.weight" },
        { "mlp.gate_proj.weight", "-", "DenseReluDense.wi_0.weight" },
        { "mlp.up_proj.weight", "-", "DenseReluDense.wi_1.weight" },
        { "mlp.down_proj.weight", "-", "DenseReluDense.wo.weight" },
    };
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (!strcmp(rest, map[k][0]))
            snprintf(f->name, sizeof f->name, "%s.block.%d.layer.%d.%s",
                     dec ? "decoder" : "encoder", b, map[k][1][0] == '-' ? ff : map[k][1][0] - '0',
                     map[k][2]);
    return 0;
}

/* ---- BART and Marian ------------------------------------------------------ */

static int parse_bart(hs_model_config *c, hs_cfg_reader *r)
{
    const int marian = c->family == HS_FAMILY_MARIAN;
    int rc, E, D, He, Hd, Fe, Fd, positions, enc_dec = 1, act = 0, share = 1, dec_vocab = 0;
    static const char *const acts[] = { "gelu", "relu", "swish", "silu", "gelu_new" };
    static const char *const unread[] = {
        "add_final_layer_norm", "normalize_before", "add_bias_logits", "normalize_embedding",
        "static_position_embeddings", "extra_pos_embeddings", "encoder_layerdrop",
        "decoder_layerdrop", "num_hidden_layers" };
    accept(r, unread, sizeof unread / sizeof unread[0]);
    if ((rc = hs_cfg_int(r, "vocab_size", 0, marian ? 58101 : 50265, &c->vocab_size)) ||
        (rc = hs_cfg_int(r, "decoder_vocab_size", HS_CFG_NULL_DEFAULT, c->vocab_size,
                         &dec_vocab)) ||
        (rc = hs_cfg_int(r, "d_model", 0, 1024, &c->d_model)) ||
        (rc = hs_cfg_int(r, "encoder_layers", 0, 12, &E)) ||
        (rc = hs_cfg_int(r, "decoder_layers", 0, 12, &D)) ||
        (rc = hs_cfg_int(r, "encoder_attention_heads", 0, 16, &He)) ||
        (rc = hs_cfg_int(r, "decoder_attention_heads", 0, 16, &Hd)) ||
        (rc = hs_cfg_int(r, "encoder_ffn_dim", 0, 4096, &Fe)) ||
        (rc = hs_cfg_int(r, "decoder_ffn_dim", 0, 4096, &Fd)) ||
        (rc = hs_cfg_int(r, "max_position_embeddings", 0, 1024, &positions)) ||
        (rc = hs_cfg_double(r, "init_std", 0, 0.02, &c->init_std)) ||
        (rc = hs_cfg_double(r, "dropout", 0, 0.1, &c->hidden_dropout)) ||
        (rc = hs_cfg_double(r, "attention_dropout", 0, 0, &c->attn_dropout)) ||
        (rc = hs_cfg_choice(r, "activation_function", acts, 5, 0, &act)) ||
        (rc = hs_cfg_bool(r, "scale_embedding", HS_CFG_NULL_FALSE, 0, &c->embed_scale)) ||
        (rc = hs_cfg_bool(r, "tie_word_embeddings", HS_CFG_NULL_FALSE, 1, &c->tie_embeddings)) ||
        (rc = hs_cfg_bool(r, "is_encoder_decoder", HS_CFG_NULL_FALSE, 1, &enc_dec)) ||
        (rc = hs_cfg_bool(r, "share_encoder_decoder_embeddings", HS_CFG_NULL_FALSE, 1,
                          &share)) ||
        (rc = hs_cfg_token_id(r, "pad_token_id", marian ? 58100 : 1, &c->pad_id)) ||
        (rc = hs_cfg_token_id(r, "eos_token_id", marian ? 0 : 2, &c->eos_id)) ||
        (rc = hs_cfg_token_id(r, "decoder_start_token_id", marian ? c->pad_id : 2,
                              &c->dec_start_id)) ||
        (rc = same(r, "encoder_ffn_dim", Fe, "decoder_ffn_dim", Fd)) ||
        (rc = same(r, "vocab_size", c->vocab_size, "decoder_vocab_size", dec_vocab)))
        return rc;
    if (He < 1 || Hd < 1 || c->d_model % He || c->d_model % Hd)
        return hs_fail(HS_EFORMAT, "%s: \"encoder_attention_heads\"=%d and "
                                   "\"decoder_attention_heads\"=%d must divide d_model=%d",
                       r->path, He, Hd, c->d_model);
    if ((rc = same(r, "encoder_attention_heads", He, "decoder_attention_heads", Hd)) ||
        (rc = stacks(c, r, E, D, He, Hd, c->d_model / He)))
        return rc;
    const char *key = NULL, *why = NULL;
    if (!enc_dec)
        key = "is_encoder_decoder", why = "false asks for one stack alone: not implemented";
    else if (!share)
        key = "share_encoder_decoder_embeddings", why = "false (separate embeddings) is not "
                                                        "implemented";
    else if (!c->tie_embeddings)
        key = "tie_word_embeddings", why = "false (an lm_head of its own) is not implemented";
    if (why)
        return hs_fail(HS_EFORMAT, "%s: \"%s\" %s", r->path, key, why);
    c->d_ff = Fe;
    c->pos = marian ? HS_POS_SINUSOID : HS_POS_LEARNED;
    c->pos_shift = marian ? 0 : 2;
    c->n_ctx = positions;
    c->norm = HS_NORM_LAYERNORM;
    c->norm_eps = 1e-5; /* nn.LayerNorm's */
    c->post_norm = 1;
    c->embed_norm = !marian;
    c->mlp = HS_MLP_GELU;
    c->act = act == 1 ? HS_ACT_RELU : act == 2 || act == 3 ? HS_ACT_SILU : HS_ACT_GELU;
    c->gelu_exact = act == 0;
    c->attn_bias = c->mlp_bias = c->norm_bias = c->lm_head_bias = 1;
    return HS_OK;
}

static void write_bart(cJSON *o, const hs_model_config *c)
{
    const int marian = c->family == HS_FAMILY_MARIAN;
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(marian ? "MarianMTModel"
                                                         : "BartForConditionalGeneration"));
    const char *act = c->act == HS_ACT_RELU ? "relu" : c->act == HS_ACT_SILU ? "swish"
                      : c->gelu_exact      ? "gelu" : "gelu_new";
    const int D = c->n_layer - c->enc_layers;
    cJSON_AddStringToObject(o, "activation_function", act);
    cJSON_AddNumberToObject(o, "attention_dropout", c->attn_dropout);
    cJSON_AddNumberToObject(o, "d_model", c->d_model);
    cJSON_AddNumberToObject(o, "decoder_attention_heads", c->n_head[c->enc_layers]);
    cJSON_AddNumberToObject(o, "decoder_ffn_dim", c->d_ff);
    cJSON_AddNumberToObject(o, "decoder_layers", D);
    hs_cfg_add_token_id(o, "decoder_start_token_id", c->dec_start_id);
    cJSON_AddNumberToObject(o, "dropout", c->hidden_dropout);
    cJSON_AddNumberToObject(o, "encoder_attention_heads", c->n_head[0]);
    cJSON_AddNumberToObject(o, "encoder_ffn_dim", c->d_ff);
    cJSON_AddNumberToObject(o, "encoder_layers", c->enc_layers);
    hs_cfg_add_token_id(o, "eos_token_id", c->eos_id);
    cJSON_AddNumberToObject(o, "init_std", c->init_std);
    cJSON_AddBoolToObject(o, "is_encoder_decoder", 1);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->n_ctx);
    hs_cfg_add_token_id(o, "pad_token_id", c->pad_id);
    cJSON_AddBoolToObject(o, "scale_embedding", c->embed_scale);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
}

static int fits_bart_common(const hs_model_config *c)
{
    return hs_config_seq2seq(c) && full_heads(c) && c->norm == HS_NORM_LAYERNORM && c->norm_eps == 1e-5 &&
           c->post_norm && !c->final_norm && c->mlp == HS_MLP_GELU && c->attn_bias &&
           c->mlp_bias && c->norm_bias && c->lm_head_bias && c->tie_embeddings &&
           !c->rel_buckets && !c->tied_scale && !(c->attn_scalar > 0) && !c->norm_offset &&
           c->n_head[0] * c->head_dim == c->d_model &&
           c->n_head[c->enc_layers] == c->n_head[0];
}

static int fits_bart(const hs_model_config *c)
{
    return fits_bart_common(c) && c->pos == HS_POS_LEARNED && c->pos_shift == 2 &&
           c->embed_norm;
}

static int fits_marian(const hs_model_config *c)
{
    return fits_bart_common(c) && c->pos == HS_POS_SINUSOID && !c->embed_norm;
}

static int layout_bart(const hs_model *m, hs_file_tensor *f, int i, int layer, const char *rest)
{
    const hs_model_config *c = &m->cfg;
    const char *name = m->tensors[i].name;
    static const char *const top[][2] = {
        { "wte.weight", "model.shared.weight" },
        { "enc.wpe.weight", "model.encoder.embed_positions.weight" },
        { "wpe.weight", "model.decoder.embed_positions.weight" },
        { "enc.ln_emb.weight", "model.encoder.layernorm_embedding.weight" },
        { "enc.ln_emb.bias", "model.encoder.layernorm_embedding.bias" },
        { "ln_emb.weight", "model.decoder.layernorm_embedding.weight" },
        { "ln_emb.bias", "model.decoder.layernorm_embedding.bias" },
        { "lm_head.bias", "final_logits_bias" },
    };
    if (layer < 0) {
        rename_top(f, name, top, sizeof top / sizeof top[0]);
        if (!strcmp(name, "lm_head.bias")) { /* a buffer of shape [1, V] */
            f->ndim = 2;
            f->shape[0] = 1;
            f->shape[1] = c->vocab_size;
        }
        return 0;
    }
    const int dec = hs_config_cross(c, layer), b = dec ? layer - c->enc_layers : layer;
    static const char *const map[][2] = {
        { "attn.q_proj", "self_attn.q_proj" },      { "attn.k_proj", "self_attn.k_proj" },
        { "attn.v_proj", "self_attn.v_proj" },      { "attn.o_proj", "self_attn.out_proj" },
        { "ln_1", "self_attn_layer_norm" },         { "xattn.q_proj", "encoder_attn.q_proj" },
        { "xattn.k_proj", "encoder_attn.k_proj" },  { "xattn.v_proj", "encoder_attn.v_proj" },
        { "xattn.o_proj", "encoder_attn.out_proj" }, { "ln_x", "encoder_attn_layer_norm" },
        { "mlp.fc", "fc1" },                        { "mlp.proj", "fc2" },
        { "ln_2", "final_layer_norm" },
    };
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
        const size_t len = strlen(map[k][0]);
        if (!strncmp(rest, map[k][0], len) && rest[len] == '.')
            snprintf(f->name, sizeof f->name, "model.%s.layers.%d.%s%s",
                     dec ? "decoder" : "encoder", b, map[k][1], rest + len);
    }
    return 0;
}

const hs_family_ops hs_family_t5 = {
    .id = HS_FAMILY_T5,
    .model_type = "t5",
    .title = "T5",
    .parse = parse_t5,
    .write = write_t5,
    .fits = fits_t5,
    .layout = layout_t5,
};

const hs_family_ops hs_family_bart = {
    .id = HS_FAMILY_BART,
    .model_type = "bart",
    .title = "BART",
    .parse = parse_bart,
    .write = write_bart,
    .fits = fits_bart,
    .layout = layout_bart,
};

const hs_family_ops hs_family_marian = {
    .id = HS_FAMILY_MARIAN,
    .model_type = "marian",
    .title = "Marian",
    .parse = parse_bart,
    .write = write_bart,
    .fits = fits_marian,
    .layout = layout_bart,
};
