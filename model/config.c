/* A model's geometry and the rules every network obeys whatever file it came
 * from: layer and head counts, windows, MLA's and the encoder's constraints,
 * and the parameter count. The rules of a family's file format and config.json
 * itself are families/config_file.c's. */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Where layer l's heads start in the per-head window pool. */
static int window_offset(const hs_model_config *c, int l)
{
    int off = 0;
    for (int i = 0; i < l; i++)
        off += c->n_head[i];
    return off;
}

/* 1 when the pool holds exactly the heads of c's layers. */
static int windows_fit(const hs_model_config *c)
{
    if (!c->n_head_windows)
        return 1;
    if (c->n_layer < 1 || c->n_layer > HS_MAX_LAYERS)
        return 0;
    long total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l] > 0 ? c->n_head[l] : 0;
    return total == c->n_head_windows && total <= HS_MAX_WINDOW_HEADS;
}

/* Layer l's window without the per-head pool: `window`, unless
 * window_pattern makes the layer global. */
static int pattern_window(const hs_model_config *c, int l)
{
    return c->window_pattern > 1 && (l + 1) % c->window_pattern == 0 ? 0 : c->window;
}

int hs_config_head_window(const hs_model_config *c, int l, int h)
{
    if (!c->n_head_windows || !windows_fit(c))
        return pattern_window(c, l);
    return c->head_windows[window_offset(c, l) + h];
}

int hs_config_layer_window(const hs_model_config *c, int l)
{
    const int w = hs_config_head_window(c, l, 0);
    for (int h = 1; h < c->n_head[l]; h++)
        if (hs_config_head_window(c, l, h) != w)
            return -1;
    return w;
}

int hs_config_set_windows(hs_model_config *c, const int *w)
{
    long total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    int same = 1;
    for (long i = 0; i < total; i++) {
        if (w[i] < 0)
            return hs_fail(HS_EINVAL, "config: window=%d (head %ld over all layers) must be 0 "
                                      "(global) or positive", w[i], i);
        same &= w[i] == w[0];
    }
    c->window_pattern = 0; /* w gives every head's window */
    if (same) {
        c->window = total ? w[0] : 0;
        c->n_head_windows = 0;
        return HS_OK;
    }
    if (total > HS_MAX_WINDOW_HEADS)
        return hs_fail(HS_EINVAL, "config: window: per-head windows for %ld heads (at most %d)",
                       total, HS_MAX_WINDOW_HEADS);
    memcpy(c->head_windows, w, sizeof *w * (size_t)total);
    c->n_head_windows = (int)total;
    c->window = 0;
    return HS_OK;
}

hs_attn_config hs_config_attn(const hs_model_config *c, int l)
{
    const int rope = c->pos == HS_POS_ROPE;
    const int *head_window =
        c->n_head_windows && windows_fit(c) ? c->head_windows + window_offset(c, l) : NULL;
    /* a local layer's own RoPE base, unscaled (Gemma 3's rope_local_base_freq) */
    const int local = rope && c->rope_local_theta > 0 && hs_config_layer_window(c, l) > 0;
    return (hs_attn_config){ .d_model = c->d_model,
                             .n_heads = c->n_head[l],
                             .n_kv_heads = c->n_kv_head[l],
                             .bias = c->attn_bias,
                             .qkv_bias = c->qkv_bias,
                             .head_dim = c->head_dim,
                             .rope_theta = !rope ? 0 : local ? c->rope_local_theta : c->rope_theta,
                             .window = pattern_window(c, l),
                             .rotary_dims = rope ? c->rotary_dims : 0,
                             .rope_scaling = rope && !local ? c->rope_scaling
                                                            : (hs_rope_scaling){ 0 },
                             .head_window = head_window,
                             .sink = c->sink,
                             .scale = c->attn_scalar > 0 ? 1 / sqrt(c->attn_scalar) : 0,
                             .softcap = c->attn_softcap,
                             .qk_norm = c->qk_norm,
                             .qk_norm_eps = c->norm_eps,
                             .qk_norm_offset = c->norm_offset };
}

hs_mla_config hs_config_mla(const hs_model_config *c, int l)
{
    return (hs_mla_config){ .d_model = c->d_model,
                            .n_heads = c->n_head[l],
                            .q_lora_rank = c->q_lora_rank,
                            .kv_lora_rank = c->kv_lora_rank,
                            .qk_nope = c->qk_nope_head_dim,
                            .qk_rope = c->qk_rope_head_dim,
                            .v_dim = c->v_head_dim,
                            .rope_theta = c->rope_theta,
                            .norm_eps = c->norm_eps };
}

/* a * b + acc into *acc, 0 on overflow of size_t. */
static int mul_add(size_t *acc, size_t a, size_t b)
{
    size_t p;
    return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(*acc, p, acc);
}

int hs_config_param_count(const hs_model_config *c, size_t *n)
{
    *n = 0;
    if (c->n_layer < 1 || c->n_layer > HS_MAX_LAYERS || c->vocab_size < 1 || c->d_model < 1 ||
        c->head_dim < 1 || c->n_ctx < 1 || c->d_ff < 0)
        return hs_fail(HS_EINVAL, "config: sizes must be positive");
    const size_t d = (size_t)c->d_model, V = (size_t)c->vocab_size, F = (size_t)c->d_ff,
                 dh = (size_t)c->head_dim;
    size_t total = 0;
    int ok = mul_add(&total, V, d * (c->tie_embeddings ? 1 : 2) + (c->lm_head_bias ? 1 : 0)) &&
             (c->pos != HS_POS_LEARNED || mul_add(&total, (size_t)hs_config_pos_rows(c), d)) &&
             mul_add(&total, d, 2 * (size_t)c->final_norm) &&
             mul_add(&total, (size_t)c->type_vocab + 2 * (size_t)c->embed_norm, d) &&
             (!c->mlm_transform || mul_add(&total, d, d + 1)) &&
             /* an encoder-decoder's second position table, embedding and final norms */
             (!hs_config_seq2seq(c) ||
              mul_add(&total, (size_t)hs_config_pos_rows(c) + 4, d)) &&
             mul_add(&total, (size_t)c->rel_buckets, 2 * (size_t)HS_MAX_HEADS);
    for (int l = 0; ok && l < c->n_layer; l++) {
        const size_t HD = (size_t)c->n_head[l] * dh, GD = (size_t)c->n_kv_head[l] * dh;
        if (c->mla) {
            const size_t H = (size_t)c->n_head[l], Q = (size_t)c->q_lora_rank,
                         C = (size_t)c->kv_lora_rank, r = (size_t)c->qk_rope_head_dim,
                         HQ = H * ((size_t)c->qk_nope_head_dim + r),
                         HKV = H * ((size_t)c->qk_nope_head_dim + (size_t)c->v_head_dim);
            ok = (Q ? mul_add(&total, Q, d + 1) && mul_add(&total, HQ, Q)
                    : mul_add(&total, HQ, d)) &&
                 mul_add(&total, C + r, d) && mul_add(&total, C, 1) && mul_add(&total, HKV, C) &&
                 mul_add(&total, d, H * (size_t)c->v_head_dim);
        } else
            ok = mul_add(&total, 2 * HD + 2 * GD, d + 1) &&
                 (!c->qk_norm || mul_add(&total, HD + GD, 1));
        if (hs_config_cross(c, l)) /* cross-attention and its norm */
            ok = ok && mul_add(&total, 4 * HD, d + 1) && mul_add(&total, d, 3);
        ok = ok && mul_add(&total, d, c->out_norm ? 9 : 5) &&
             (c->mlp == HS_MLP_NONE || mul_add(&total, F, 3 * d + 3));
    }
    /* the parameters, and the optimizer's two moments besides, in bytes */
    if (!ok || !mul_add(&(size_t){ 0 }, total, 3 * sizeof(double)))
        return hs_fail(HS_EINVAL, "config: the parameter count overflows (vocab_size=%d, "
                                  "d_model=%d, d_ff=%d, n_layer=%d)",
                       c->vocab_size, c->d_model, c->d_ff, c->n_layer);
    *n = total;
    return HS_OK;
}

/* MLA's keys: only with attention "mla", and then MLA's own rules (no
 * kv-head grouping, RoPE on the decoupled dims only, no window, no
 * biases, no RoPE scaling), each refusal naming the key. */
static int mla_check(const hs_model_config *c)
{
    if (!c->mla) {
        const int given[] = { c->kv_lora_rank, c->q_lora_rank, c->qk_nope_head_dim,
                              c->qk_rope_head_dim, c->v_head_dim };
        static const char *const keys[] = { "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
                                            "qk_rope_head_dim", "v_head_dim" };
        for (int i = 0; i < 5; i++)
            if (given[i])
                return hs_fail(HS_EINVAL, "config: %s=%d needs attention \"mla\"", keys[i],
                               given[i]);
        return HS_OK;
    }
    const char *why = NULL;
    if (c->pos != HS_POS_ROPE)
        why = "positional: MLA needs \"rope\" (RoPE on the qk_rope_head_dim dims)";
    else if (c->window || c->n_head_windows)
        why = "window: MLA attends globally (no sliding window)";
    else if (c->rotary_dims)
        why = "rotary_dims: MLA rotates exactly its qk_rope_head_dim dims";
    else if (c->rope_scaling.kind != HS_ROPE_DEFAULT)
        why = "rope_scaling: not implemented with MLA";
    else if (c->attn_bias || c->qkv_bias)
        why = "attn_bias/qkv_bias: MLA's projections have no biases";
    else if (c->head_dim != c->v_head_dim)
        why = "head_dim: an MLA head's output is v_head_dim wide (leave head_dim out)";
    if (why)
        return hs_fail(HS_EINVAL, "config: %s", why);
    for (int l = 0; l < c->n_layer; l++) {
        if (c->n_kv_head[l] != c->n_head[l])
            return hs_fail(HS_EINVAL,
                           "config: n_kv_head=%d: MLA has no key/value head groups (every head "
                           "reads the shared latent; leave n_kv_head out or equal to n_head=%d)",
                           c->n_kv_head[l], c->n_head[l]);
        hs_mla_config m = hs_config_mla(c, l);
        if (hs_mla_config_check(&m))
            return hs_fail(HS_EINVAL, "config: layer %d: %s", l, hs_last_error());
    }
    return HS_OK;
}

/* The features of SPEC §14's families (config.h), each refused where it
 * has no meaning, naming the field. */
static int features_check(const hs_model_config *c)
{
    const char *why = NULL;
    if (c->norm_offset && c->norm != HS_NORM_RMSNORM)
        why = "norm_offset: the (1 + w) scale is an RMSNorm's (norm \"rmsnorm\")";
    else if ((c->no_input_norm || c->out_norm) && c->post_norm)
        why = "input_norm false and output_norm are pre-norm layouts (norm_position \"pre\")";
    else if (c->no_input_norm && c->parallel_residual)
        why = "input_norm false: a parallel residual reads the layer input through its norms";
    else if (c->qk_norm < HS_QK_NORM_NONE || c->qk_norm > HS_QK_NORM_PROJ)
        why = "qk_norm: unknown kind";
    else if (c->mla && (c->qk_norm || c->attn_scalar > 0 || c->attn_softcap > 0 || c->norm_offset))
        why = "qk_norm, attn_scalar, attn_softcap and norm_offset are not implemented with MLA";
    else if (!(c->attn_scalar >= 0 && isfinite(c->attn_scalar)))
        why = "attn_scalar must be 0 (head_dim) or positive";
    else if (!(c->attn_softcap >= 0 && isfinite(c->attn_softcap)) ||
             !(c->final_softcap >= 0 && isfinite(c->final_softcap)))
        why = "attn_softcap and final_softcap must be 0 (none) or positive";
    else if (c->window_pattern < 0 || c->window_pattern == 1)
        why = "window_pattern must be 0 (every layer) or at least 2";
    else if (c->window_pattern > 1 && (!c->window || c->n_head_windows))
        why = "window_pattern needs one integer window";
    else if (!(c->rope_local_theta >= 0 && isfinite(c->rope_local_theta)) ||
             (c->rope_local_theta > 0 && c->pos != HS_POS_ROPE))
        why = "rope_local_theta must be 0 or positive, with rotary positions";
    return why ? hs_fail(HS_EINVAL, "config: %s", why) : HS_OK;
}

/* The encoders' fields (config.h), each refused where it has no meaning. */
static int encoder_check(const hs_model_config *c)
{
    const int ids[] = { c->pad_id, c->cls_id, c->sep_id, c->mask_id, c->unk_id };
    static const char *const keys[] = { "pad_token_id", "cls_token_id", "sep_token_id",
                                        "mask_token_id", "unk_token_id" };
    for (int i = 0; (c->encoder || (c->n_labels && !i)) && i < 5; i++) /* a decoder's: its pad */
        if (ids[i] < -1 || ids[i] >= c->vocab_size)
            return hs_fail(HS_EINVAL, "config: %s=%d is outside the vocabulary of %d", keys[i],
                           ids[i], c->vocab_size);
    const char *why = NULL;
    if (c->type_vocab < 0 || c->pos_offset < 0)
        why = "type_vocab_size and position_offset must not be negative";
    else if (!c->encoder && (c->type_vocab || (c->embed_norm && !hs_config_seq2seq(c)) ||
                             c->mlm_transform || c->pos_offset))
        why = "token types, the embedding norm, the MLM transform and position_offset are "
              "encoder features (encoder true)";
    else if (c->headless && c->encoder && (c->mlm_transform || c->final_norm || c->lm_head_bias))
        why = "headless: an encoder without the masked-LM head's transform, norm and bias";
    else if (c->headless && !c->encoder && (!c->n_labels || c->lm_head_bias))
        why = "headless: a decoder without its language-model head has a task head";
    else if (c->n_labels && (!c->headless || c->n_labels > HS_MAX_LABELS))
        why = "n_labels: a task head replaces the language-model head (at most 64 labels)";
    else if (c->encoder && (c->mla || c->window || c->n_head_windows || c->window_pattern))
        why = "encoder: MLA and sliding windows are causal-LM features";
    else if (c->embed_norm && c->norm != HS_NORM_LAYERNORM)
        why = "embed_norm: the embeddings' norm is a LayerNorm (norm \"layernorm\")";
    else if (c->mlm_transform && (!c->final_norm || c->mlp != HS_MLP_GELU))
        why = "mlm_transform: the transform is dense + the MLP's GELU + the final norm "
              "(final_norm true, mlp \"gelu\")";
    else if (c->pos_offset && (c->pos != HS_POS_LEARNED || c->pad_id != c->pos_offset - 1))
        why = "position_offset: RoBERTa's positions are learned and start after pad_token_id "
              "(position_offset = pad_token_id + 1)";
    else if (!(c->hidden_dropout >= 0 && c->hidden_dropout <= 1) ||
             !(c->attn_dropout >= 0 && c->attn_dropout <= 1))
        why = "dropout probabilities must lie in 0 .. 1";
    return why ? hs_fail(HS_EINVAL, "config: %s", why) : HS_OK;
}

/* The encoder-decoders' fields (config.h), each refused where it has no
 * meaning: two stacks of plain layers, each id inside the vocabulary, T5's
 * buckets with a logarithmic half that has a range to spread over. */
static int seq2seq_check(const hs_model_config *c)
{
    const char *why = NULL;
    const int s2s = hs_config_seq2seq(c);
    if (c->enc_layers < 0 || (s2s && c->enc_layers >= c->n_layer))
        why = "encoder_layers: an encoder-decoder has at least one layer in each stack";
    else if (!s2s && (c->rel_buckets || c->tied_scale || c->pos_shift))
        why = "relative_attention_num_buckets, the tied-head scale and a position shift are "
              "encoder-decoder features";
    else if (s2s && (c->encoder || c->mla || c->window || c->n_head_windows ||
                     c->window_pattern || c->parallel_residual || c->headless || c->n_labels ||
                     c->out_norm || c->no_input_norm || c->qk_norm || c->pos == HS_POS_ROPE))
        why = "an encoder-decoder's stacks have plain layers (no MLA, windows, parallel "
              "residual, output or q/k norms, rotary positions or task head)";
    else if (s2s && (c->dec_start_id < 0 || c->dec_start_id >= c->vocab_size))
        why = "decoder_start_token_id must be a token of the vocabulary";
    else if (s2s && (c->eos_id < 0 || c->eos_id >= c->vocab_size))
        why = "eos_token_id must be a token of the vocabulary";
    else if (s2s && c->pad_id >= c->vocab_size)
        why = "pad_token_id must be a token of the vocabulary";
    else if (c->pos_shift < 0 || (c->pos_shift && c->pos != HS_POS_LEARNED))
        why = "a position shift is for learned positions";
    else if (c->rel_buckets < 0 || (c->rel_buckets && c->rel_buckets < 4) ||
             (c->rel_buckets && c->rel_max_distance <= c->rel_buckets / 2))
        why = "relative_attention_num_buckets must be at least 4 and "
              "relative_attention_max_distance above half of it (the logarithmic buckets "
              "span the distances from num_buckets / 2 to max_distance)";
    else if (c->act != HS_ACT_GELU && (c->mlp != HS_MLP_GELU || c->gelu_exact))
        why = "the ReLU and SiLU activations are the ungated MLP's (the fc, activation, proj MLP)";
    else if (c->pos == HS_POS_SINUSOID && c->d_model % 2)
        why = "sinusoidal positions need an even d_model";
    return why ? hs_fail(HS_EINVAL, "config: %s", why) : HS_OK;
}

void hs_config_no_specials(hs_model_config *c)
{
    c->pad_id = c->cls_id = c->sep_id = c->mask_id = c->unk_id = -1;
    c->dec_start_id = c->eos_id = -1;
}

int hs_config_check_network(const hs_model_config *c)
{
    int rc;
    if (c->n_layer < 1 || c->n_layer > HS_MAX_LAYERS)
        return hs_fail(HS_EINVAL, "config: n_layer=%d outside 1..%d", c->n_layer, HS_MAX_LAYERS);
    if (c->vocab_size < 1 || c->d_model < 1 || c->head_dim < 1 || c->n_ctx < 1)
        return hs_fail(HS_EINVAL,
                       "config: vocab_size=%d, d_model=%d, head_dim=%d, n_ctx=%d must be positive",
                       c->vocab_size, c->d_model, c->head_dim, c->n_ctx);
    if (c->mlp != HS_MLP_NONE && c->d_ff < 1)
        return hs_fail(HS_EINVAL, "config: d_ff=%d must be positive with an MLP", c->d_ff);
    /* Every width the model forms from these must fit an int (3 d_model is
     * GPT-2's fused c_attn; H dh the concatenated heads). */
    int prod;
    if (__builtin_mul_overflow(c->d_model, 4, &prod))
        return hs_fail(HS_EINVAL, "config: d_model=%d is too large", c->d_model);
    for (int l = 0; l < c->n_layer; l++) {
        if (c->n_head[l] < 1 || c->n_head[l] > HS_MAX_HEADS)
            return hs_fail(HS_EINVAL, "config: layer %d: n_head=%d outside 1..%d", l,
                           c->n_head[l], HS_MAX_HEADS);
        if (__builtin_mul_overflow(c->n_head[l], c->head_dim, &prod))
            return hs_fail(HS_EINVAL, "config: layer %d: n_head=%d x head_dim=%d is too large", l,
                           c->n_head[l], c->head_dim);
    }
    if ((rc = mla_check(c)) || (rc = features_check(c)) || (rc = encoder_check(c)) ||
        (rc = seq2seq_check(c)))
        return rc;
    size_t n_params;
    if (hs_config_param_count(c, &n_params))
        return HS_EINVAL;
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps))
        return hs_fail(HS_EINVAL, "config: norm_eps=%g must be positive", c->norm_eps);
    if (!(c->init_std > 0 && c->init_std <= 10))
        return hs_fail(HS_EINVAL, "config: initializer_range=%g must be in (0, 10]", c->init_std);
    if (c->pos == HS_POS_ROPE && !(c->rope_theta > 0 && isfinite(c->rope_theta)))
        return hs_fail(HS_EINVAL, "config: rope_theta=%g must be positive", c->rope_theta);
    if (c->pos != HS_POS_ROPE && (c->rotary_dims || c->rope_scaling.kind != HS_ROPE_DEFAULT))
        return hs_fail(HS_EINVAL, "config: rotary_dims and rope_scaling need rotary positions");
    if (c->window < 0)
        return hs_fail(HS_EINVAL, "config: window=%d must be 0 (global) or positive", c->window);
    if (c->n_head_windows < 0 || !windows_fit(c))
        return hs_fail(HS_EINVAL, "config: window: %d per-head windows for layers of %d heads in "
                                  "all (a list per head of every layer)",
                       c->n_head_windows, window_offset(c, c->n_layer));
    if ((int)c->family < 0 || c->family >= HS_FAMILY_COUNT)
        return hs_fail(HS_EINVAL, "config: no model family %d", (int)c->family);
    if (c->parallel_residual && (c->post_norm || c->mlp == HS_MLP_NONE))
        return hs_fail(HS_EINVAL, "config: a parallel residual needs pre-norm layers with an MLP");
    if (c->gelu_exact && c->mlp != HS_MLP_GELU && c->mlp != HS_MLP_GEGLU)
        return hs_fail(HS_EINVAL, "config: gelu_exact needs the gelu or geglu MLP");
    for (int l = 0; l < c->n_layer; l++) {
        hs_attn_config a = hs_config_attn(c, l);
        if (hs_attn_config_check(&a))
            return hs_fail(HS_EINVAL, "config: layer %d: %s", l, hs_last_error());
    }
    return HS_OK;
}

const char *hs_family_name(hs_family f)
{
    static const char *const names[HS_FAMILY_COUNT] = {
        [HS_FAMILY_HEADSCOPE] = "headscope", [HS_FAMILY_GPT2] = "gpt2",
        [HS_FAMILY_LLAMA] = "llama",         [HS_FAMILY_GPT_NEOX] = "gpt_neox",
        [HS_FAMILY_MISTRAL] = "mistral",     [HS_FAMILY_QWEN2] = "qwen2",
        [HS_FAMILY_GEMMA] = "gemma",         [HS_FAMILY_GEMMA2] = "gemma2",
        [HS_FAMILY_GEMMA3] = "gemma3_text",  [HS_FAMILY_QWEN3] = "qwen3",
        [HS_FAMILY_OLMO2] = "olmo2",         [HS_FAMILY_PHI3] = "phi3",
        [HS_FAMILY_BERT] = "bert",           [HS_FAMILY_ROBERTA] = "roberta",
        [HS_FAMILY_T5] = "t5",               [HS_FAMILY_BART] = "bart",
        [HS_FAMILY_MARIAN] = "marian",
    };
    return f >= 0 && f < HS_FAMILY_COUNT ? names[f] : "headscope";
}

int hs_config_hf_pruning(const hs_model_config *c)
{
    return c->family == HS_FAMILY_BERT || c->family == HS_FAMILY_ROBERTA ||
           c->family == HS_FAMILY_GPT2;
}

int hs_config_prune_head(hs_model_config *c, int l, int h)
{
    const int key = l * HS_MAX_HEADS + h;
    int at = 0;
    while (at < c->n_pruned && c->pruned[at] < key)
        at++;
    if (at < c->n_pruned && c->pruned[at] == key)
        return HS_OK;
    if (c->n_pruned == HS_MAX_PRUNED)
        return hs_fail(HS_EINVAL, "more than %d pruned heads", HS_MAX_PRUNED);
    memmove(c->pruned + at + 1, c->pruned + at, sizeof *c->pruned * (size_t)(c->n_pruned - at));
    c->pruned[at] = key;
    c->n_pruned++;
    return HS_OK;
}

void hs_config_make_headless(hs_model_config *c)
{
    c->headless = 1;
    c->mlm_transform = c->final_norm = c->lm_head_bias = 0;
}

int hs_config_logits(const hs_model_config *c, const char *what)
{
    if (!c->headless)
        return HS_OK;
    return hs_fail(HS_EUNSUPPORTED, "%s: %s needs the model's logits",
                   c->n_labels ? "a classifier (a task head, no language-model head)"
                               : "a headless encoder (the encoder alone, no masked-LM head)",
                   what);
}
