/* config.json for every family. Parsing is strict about types, ranges and
 * keys: a wrong field, or a key that would change the computation and is
 * not implemented, is an error naming the file and the key. */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "family.h"
#include "json.h"

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
             (!c->mlm_transform || mul_add(&total, d, d + 1));
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
    if (c->family != HS_FAMILY_HEADSCOPE)
        why = "attention \"mla\" is a headscope-family architecture";
    else if (c->pos != HS_POS_ROPE)
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
    for (int i = 0; c->encoder && i < 5; i++)
        if (ids[i] < -1 || ids[i] >= c->vocab_size)
            return hs_fail(HS_EINVAL, "config: %s=%d is outside the vocabulary of %d", keys[i],
                           ids[i], c->vocab_size);
    const char *why = NULL;
    if (c->type_vocab < 0 || c->pos_offset < 0)
        why = "type_vocab_size and position_offset must not be negative";
    else if (!c->encoder && (c->type_vocab || c->embed_norm || c->mlm_transform || c->pos_offset))
        why = "token types, the embedding norm, the MLM transform and position_offset are "
              "encoder features (encoder true)";
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

void hs_config_no_specials(hs_model_config *c)
{
    c->pad_id = c->cls_id = c->sep_id = c->mask_id = c->unk_id = -1;
}

int hs_config_check(const hs_model_config *c)
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
    if ((rc = mla_check(c)) || (rc = features_check(c)) || (rc = encoder_check(c)))
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
    const hs_family_ops *f = hs_family_ops_of(c->family);
    if (!f)
        return hs_fail(HS_EINVAL, "config: no model family %d", (int)c->family);
    if (c->n_head_windows && c->family != HS_FAMILY_HEADSCOPE && !f->layer_windows)
        return hs_fail(HS_EINVAL, "config: window: per-layer or per-head windows are a "
                                  "headscope-family feature (use a headscope preset)");
    if (c->parallel_residual && (c->post_norm || c->mlp == HS_MLP_NONE))
        return hs_fail(HS_EINVAL, "config: a parallel residual needs pre-norm layers with an MLP");
    if (c->gelu_exact && c->mlp != HS_MLP_GELU && c->mlp != HS_MLP_GEGLU)
        return hs_fail(HS_EINVAL, "config: gelu_exact needs the gelu or geglu MLP");
    for (int l = 0; l < c->n_layer; l++) {
        hs_attn_config a = hs_config_attn(c, l);
        if (hs_attn_config_check(&a))
            return hs_fail(HS_EINVAL, "config: layer %d: %s", l, hs_last_error());
    }
    /* The Hugging Face families' checkpoints are written in their layout,
     * which can express only that family's architecture. */
    /* (an encoder's layers are post-norm, its decoder has a bias: BERT's) */
    int uniform = (c->encoder || (!c->post_norm && !c->lm_head_bias)) && c->final_norm;
    for (int l = 1; l < c->n_layer; l++)
        uniform &= c->n_head[l] == c->n_head[0] && c->n_kv_head[l] == c->n_kv_head[0];
    if (c->family != HS_FAMILY_HEADSCOPE && !(uniform && f->fits(c)))
        return hs_fail(HS_EINVAL, "config: this architecture is not %s's (use a headscope "
                                  "preset for other variants)", f->title);
    return HS_OK;
}

/* ---- keys the parsers do not read ---------------------------------------
 *
 * A key that changes the computation and that we do not implement is an
 * error, never ignored (SPEC §10). Hugging Face configs carry many keys that
 * do not (token ids, torch_dtype, use_cache, generation defaults, label
 * maps, ...), and new ones with each transformers release, so for those
 * families a key the parser does not read is accepted unless the table below
 * or the family's own rules name it as computation-changing with a value
 * other than the one we implement. headscope is our own format: a key it
 * does not read is refused unless it is bookkeeping. */

#define SLIDING_ELSEWHERE "sliding-window attention, which this family does not have (mistral, gemma2, " \
                          "gemma3_text and phi3 do)"
/* Every Hugging Face family's; a key the family's parser reads (mistral's
 * sliding_window, the llama family's rope_scaling) never reaches this table. */
static const hs_key_rule HF_RULES[] = {
    { "sliding_window", HS_ALLOW_NULL, SLIDING_ELSEWHERE },
    { "use_sliding_window", HS_ALLOW_FALSE, SLIDING_ELSEWHERE },
    { "layer_types", HS_ALLOW_FULL, "per-layer attention types" },
    { "partial_rotary_factor", HS_ALLOW_ONE, "rotary embeddings on part of a head" },
    { "quantization_config", HS_ALLOW_NULL, "quantized weights" },
    { "pruned_heads", HS_ALLOW_EMPTY, "heads pruned at load time" },
    { "add_cross_attention", HS_ALLOW_FALSE, "cross-attention" },
    { "is_encoder_decoder", HS_ALLOW_FALSE, "an encoder-decoder model" },
    { "attn_logit_softcapping", HS_ALLOW_NULL, "attention logit soft-capping" },
    { "final_logit_softcapping", HS_ALLOW_NULL, "final logit soft-capping" },
    { "use_mrope", HS_ALLOW_FALSE, "multimodal rotary positions" },
    { "qk_layernorm", HS_ALLOW_FALSE, "norms on queries and keys" },
    { "use_qk_norm", HS_ALLOW_FALSE, "norms on queries and keys" },
};
#undef SLIDING_ELSEWHERE

/* Keys of any family that never change the computation. */
static const char *const bookkeeping[] = {
    "model_type", "architectures", "_name_or_path", "torch_dtype", "dtype",
    "transformers_version", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
};

/* Keys of Hugging Face configs that do not change what the causal LM
 * computes: PretrainedConfig's generation defaults, label maps and output
 * switches, other heads' settings (GPT-2's summary_*), precision or
 * parallelism switches with the same result (pretraining_tp,
 * reorder_and_upcast_attn), context lengths that rotary families do not
 * use, generation's cache type (cache_implementation) and the remote-code
 * class map (auto_map: the classes implemented here are transformers'
 * own). Anything else a family's parser does not read is refused: it may
 * change the computation. */
static const char *const hf_bookkeeping[] = {
    "sep_token_id", "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id",
    "n_ctx", "max_position_embeddings", "pretraining_tp", "reorder_and_upcast_attn",
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    "task_specific_params", "return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "use_bfloat16", "tf_legacy_loss", "is_decoder", "chunk_size_feed_forward",
    "tie_encoder_decoder", "cross_attention_hidden_size", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "finetuning_task", "id2label", "label2id", "num_labels",
    "tokenizer_class", "prefix", "problem_type", "_commit_hash", "_attn_implementation",
    "_attn_implementation_autoset", "initializer_range", "tie_word_embeddings", "_num_labels",
    "output_past", "gradient_checkpointing", "cache_implementation", "auto_map",
};

static int value_allowed(const cJSON *v, hs_allowed ok)
{
    const cJSON *e;
    switch (ok) {
    case HS_ALLOW_NULL:
        return cJSON_IsNull(v);
    case HS_ALLOW_FALSE:
        return cJSON_IsFalse(v);
    case HS_ALLOW_TRUE:
        return cJSON_IsTrue(v);
    case HS_ALLOW_ONE:
        return cJSON_IsNumber(v) && v->valuedouble == 1;
    case HS_ALLOW_EMPTY:
        return cJSON_IsNull(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child);
    case HS_ALLOW_FULL:
        if (!cJSON_IsArray(v))
            return cJSON_IsNull(v);
        cJSON_ArrayForEach(e, v)
        {
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention"))
                return 0;
        }
        return 1;
    }
    return 0;
}

static const char *allowed_name(hs_allowed ok)
{
    static const char *const names[] = { "null", "false", "true", "1", "null, {} or []",
                                         "\"full_attention\" layers" };
    return names[ok];
}

/* Dropout probabilities (attn_pdrop, attention_dropout, ...): Hugging Face
 * applies them only in training, so loading and analysis are unchanged;
 * headscope trains without dropout. */
static int is_dropout(const char *key)
{
    size_t n = strlen(key);
    return (n >= 7 && !strcmp(key + n - 7, "dropout")) || (n >= 6 && !strcmp(key + n - 6, "_pdrop"));
}

/* The rule of rules[0..n) for key v: 1 when one names it (*rc: its
 * refusal, or HS_OK when the value is the one implemented). */
static int apply_rule(const hs_cfg_reader *r, const hs_key_rule *rules, int n, const cJSON *v,
                      int *rc)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v->string, rules[i].key)) {
            *rc = value_allowed(v, rules[i].ok)
                      ? HS_OK
                      : hs_fail(HS_EFORMAT, "%s: \"%s\": %s: not implemented (only %s is "
                                "accepted)", r->path, v->string, rules[i].what,
                                allowed_name(rules[i].ok));
            return 1;
        }
    return 0;
}

static int check_other_keys(const hs_cfg_reader *r, const hs_family_ops *f)
{
    const int hf = f->id != HS_FAMILY_HEADSCOPE;
    const cJSON *v;
    cJSON_ArrayForEach(v, r->root)
    {
        const char *k = v->string;
        int known = hs_cfg_was_read(r, k), rc = HS_OK;
        for (size_t i = 0; !known && i < sizeof bookkeeping / sizeof bookkeeping[0]; i++)
            known = !strcmp(k, bookkeeping[i]);
        const size_t n_hf = hf ? sizeof hf_bookkeeping / sizeof hf_bookkeeping[0] : 0;
        for (size_t i = 0; !known && i < n_hf; i++)
            known = !strcmp(k, hf_bookkeeping[i]);
        if (!known)
            known = apply_rule(r, f->rules, f->nrules, v, &rc) ||
                    (hf && apply_rule(r, HF_RULES, sizeof HF_RULES / sizeof HF_RULES[0], v, &rc));
        if (rc)
            return rc;
        if (!known && is_dropout(k)) {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1)
                return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a probability", r->path, k);
            if (!hf && v->valuedouble != 0)
                return hs_fail(HS_EFORMAT,
                               "%s: \"%s\": dropout is not implemented (only 0 is accepted)",
                               r->path, k);
            known = 1;
        }
        if (!known)
            return hs_fail(HS_EFORMAT,
                           "%s: unknown key \"%s\" (not a %s config.json key headscope knows; "
                           "keys that would change the computation are refused until "
                           "implemented)",
                           r->path, k, f->model_type);
    }
    return HS_OK;
}

int hs_config_parse(hs_model_config *c, const char *json, const char *path)
{
    memset(c, 0, sizeof *c);
    hs_config_no_specials(c);
    cJSON *root;
    int rc = hs_json_parse(&root, json, strlen(json), path);
    if (rc)
        return rc;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hs_fail(HS_EFORMAT, "%s: not a JSON object", path);
    }
    hs_cfg_reader r = { .root = root, .path = path };
    const cJSON *type = hs_cfg_lookup(&r, "model_type");
    const hs_family_ops *f = cJSON_IsString(type) ? hs_family_by_type(type->valuestring) : NULL;
    if (!cJSON_IsString(type))
        rc = hs_fail(HS_EFORMAT, "%s: missing \"model_type\" (%s)", path, hs_family_types());
    else if (!f)
        rc = hs_fail(HS_EFORMAT, "%s: model_type \"%s\" is not %s", path, type->valuestring,
                     hs_family_types());
    else
        c->family = f->id, rc = f->parse(c, &r);
    if (!rc)
        rc = check_other_keys(&r, f);
    cJSON_Delete(root);
    if (!rc && hs_config_check(c))
        rc = hs_fail(HS_EFORMAT, "%s: %s", path, hs_last_error());
    return rc;
}

char *hs_config_to_json(const hs_model_config *c)
{
    const hs_family_ops *f = hs_family_ops_of(c->family);
    cJSON *o = f ? cJSON_CreateObject() : NULL;
    if (!o) {
        hs_fail(f ? HS_ENOMEM : HS_EINVAL, "config: cannot build JSON");
        return NULL;
    }
    cJSON_AddStringToObject(o, "model_type", f->model_type);
    f->write(o, c);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        hs_fail(HS_ENOMEM, "config: cannot print JSON");
    return text;
}

/* ---- presets and overrides ---------------------------------------------- */

int hs_config_preset(hs_model_config *c, const char *name)
{
    memset(c, 0, sizeof *c);
    hs_config_no_specials(c);
    c->vocab_size = 256; /* byte-level data from `headscope tokens` */
    c->n_layer = 2;
    c->d_model = 64;
    c->n_ctx = 256;
    c->norm_eps = 1e-5;
    c->init_std = 0.02;
    c->rope_theta = 10000.0;
    c->final_norm = 1;
    c->norm_bias = 1;
    c->tie_embeddings = 1;
    int H = 4, G = 4;
    const hs_preset *p = NULL;
    char names[512] = "";
    for (int f = 0; f < HS_FAMILY_COUNT; f++) {
        const hs_family_ops *o = hs_family_ops_of((hs_family)((f + 1) % HS_FAMILY_COUNT));
        for (int i = 0; i < o->npresets; i++) {
            if (!strcmp(o->presets[i].name, name))
                p = &o->presets[i], c->family = o->id;
            const size_t k = strlen(names);
            snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", o->presets[i].name);
        }
    }
    if (!p)
        return hs_fail(HS_EINVAL, "unknown preset \"%s\" (%s)", name, names);
    p->apply(c, &H, &G);
    for (int l = 0; l < HS_MAX_LAYERS; l++)
        c->n_head[l] = H, c->n_kv_head[l] = G;
    c->head_dim = c->mla ? c->v_head_dim : c->d_model / H;
    return HS_OK;
}

int hs_config_override(hs_model_config *c, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return hs_fail(HS_EINVAL, "override \"%s\" is not KEY=VALUE", kv);
    /* Re-parse the configuration as headscope JSON with the one key replaced:
     * the override obeys exactly the config.json rules. */
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
    hs_family family = c->family;
    hs_model_config tmp = *c;
    tmp.family = HS_FAMILY_HEADSCOPE;
    char *json = hs_config_to_json(&tmp);
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    free(json);
    if (!o)
        return hs_fail(HS_ENOMEM, "override: cannot build JSON");
    /* optional keys written only when set */
    if (!cJSON_GetObjectItemCaseSensitive(o, key))
        hs_headscope_add_default(o, key);
    if (!cJSON_GetObjectItemCaseSensitive(o, key)) {
        cJSON_Delete(o);
        return hs_fail(HS_EINVAL, "override: unknown key \"%s\"", key);
    }
    /* A JSON value (4, true, [4,2]) or else a bare word such as gelu; "4x"
     * is neither, and the config parser then rejects the string. */
    cJSON *val = cJSON_ParseWithOpts(eq + 1, NULL, 1);
    if (!val)
        val = cJSON_CreateString(eq + 1);
    cJSON_ReplaceItemInObjectCaseSensitive(o, key, val);
    /* Derived keys follow their source unless an override gave them: then the
     * order of the overrides does not matter. */
    static const struct { const char *key; unsigned bit; } given[] = {
        { "n_kv_head", HS_GIVEN_N_KV_HEAD }, { "head_dim", HS_GIVEN_HEAD_DIM },
        { "d_ff", HS_GIVEN_D_FF } };
    unsigned now_given = c->given;
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++)
        if (!strcmp(key, given[i].key))
            now_given |= given[i].bit;
    const int n_head = !strcmp(key, "n_head"), d_model = !strcmp(key, "d_model");
    if ((n_head || d_model) && !(now_given & HS_GIVEN_HEAD_DIM))
        cJSON_DeleteItemFromObjectCaseSensitive(o, "head_dim");
    if (n_head && !(now_given & HS_GIVEN_N_KV_HEAD))
        cJSON_DeleteItemFromObjectCaseSensitive(o, "n_kv_head");
    const int derive_d_ff = d_model && family == HS_FAMILY_GPT2 && !(now_given & HS_GIVEN_D_FF);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    hs_model_config out;
    int rc = text ? hs_config_parse(&out, text, "override") : HS_ENOMEM;
    free(text);
    if (rc)
        return hs_fail(HS_EINVAL, "override %s: %s", kv,
                       strncmp(hs_last_error(), "override: ", 10) ? hs_last_error()
                                                                  : hs_last_error() + 10);
    out.family = family;
    out.given = now_given;
    if (derive_d_ff && out.d_model <= INT_MAX / 4) /* GPT-2's n_inner null: 4 n_embd */
        out.d_ff = 4 * out.d_model;
    *c = out;
    return HS_OK;
}

int hs_config_build(hs_model_config *c, const char *preset, const char *const *overrides,
                    int n)
{
    int rc = hs_config_preset(c, preset);
    for (int i = 0; !rc && i < n; i++)
        rc = hs_config_override(c, overrides[i]);
    return rc;
}
