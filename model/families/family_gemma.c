/* Google's Gemma decoders (SPEC §14), in one file since they share most of
 * their code: GemmaForCausalLM (gemma), Gemma2ForCausalLM (gemma2) and
 * Gemma3ForCausalLM (gemma3_text). All three: RMSNorm scaled by (1 + w),
 * embeddings times sqrt(hidden_size), the GeGLU MLP (hidden_activation, by
 * default gelu_pytorch_tanh), head_dim from config, a tied unembedding by
 * default, Llama's tensor names. gemma2 adds a norm after attention and
 * after the MLP, the score scale query_pre_attn_scalar^-1/2, attention and
 * final logit soft-capping and a sliding window on the even layers;
 * gemma3_text keeps gemma2's norms and scale, drops the attention
 * soft-capping, adds per-head q/k norms (1 + w) before RoPE, sliding layers
 * per sliding_window_pattern (or layer_types) with a RoPE base of their own
 * (rope_local_base_freq, unscaled) beside rope_theta (+ rope_scaling) of the
 * global layers. A key config.json leaves out takes the config class's
 * default, never "off" (SPEC §14). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"

static const hs_hf_defaults GEMMA = {
    .vocab_size = 256000, .hidden_size = 3072, .intermediate_size = 24576,
    .num_hidden_layers = 28, .max_position_embeddings = 8192, .num_attention_heads = 16,
    .num_key_value_heads = 16, .head_dim = 256, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
    .tie_word_embeddings = 1,
};
static const hs_hf_defaults GEMMA2 = {
    .vocab_size = 256000, .hidden_size = 2304, .intermediate_size = 9216,
    .num_hidden_layers = 26, .max_position_embeddings = 8192, .num_attention_heads = 8,
    .num_key_value_heads = 4, .head_dim = 256, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
    .tie_word_embeddings = 1,
};
static const hs_hf_defaults GEMMA3 = {
    .vocab_size = 262208, .hidden_size = 2304, .intermediate_size = 9216,
    .num_hidden_layers = 26, .max_position_embeddings = 131072, .num_attention_heads = 8,
    .num_key_value_heads = 4, .head_dim = 256, .rms_norm_eps = 1e-6, .rope_theta = 1e6,
    .tie_word_embeddings = 1,
};

/* hidden_activation (SPEC §14: hidden_act is not read, as Gemma's MLP does
 * not read it): gelu_pytorch_tanh (or gelu_new, the same function) when
 * absent or null, exact-erf gelu; anything else is refused. */
static int get_activation(hs_cfg_reader *r, hs_model_config *c)
{
    (void)hs_cfg_lookup(r, "hidden_act");
    const cJSON *v = hs_cfg_lookup(r, "hidden_activation");
    c->gelu_exact = 0;
    if (!v || cJSON_IsNull(v))
        return HS_OK;
    const char *name = cJSON_IsString(v) ? v->valuestring : "";
    if (!strcmp(name, "gelu"))
        c->gelu_exact = 1;
    else if (strcmp(name, "gelu_pytorch_tanh") && strcmp(name, "gelu_new"))
        return hs_fail(HS_EFORMAT, "%s: \"hidden_activation\" must be gelu_pytorch_tanh, gelu_new "
                                   "or gelu (exact)", r->path);
    return HS_OK;
}

/* A soft-capping key: absent, dflt; null, none (Hugging Face's `if cap is
 * not None`); else a positive number. */
static int get_softcap(hs_cfg_reader *r, const char *key, double dflt, double *out)
{
    const cJSON *v = hs_cfg_lookup(r, key);
    *out = !v ? dflt : 0;
    if (!v || cJSON_IsNull(v))
        return HS_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || v->valuedouble > 1e30)
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a positive number or null (no capping)",
                       r->path, key);
    *out = v->valuedouble;
    return HS_OK;
}

/* Which layers slide: Hugging Face's rule, layer i iff (i + 1) % pattern !=
 * 0 (gemma2: pattern 2, the even layers; gemma3: sliding_window_pattern),
 * unless a layer_types list gives each layer ("sliding_attention" |
 * "full_attention"). Stored as `window` + window_pattern where the rule
 * holds, else as per-layer windows (the per-head pool). */
static int get_layers(hs_cfg_reader *r, hs_model_config *c, int pattern, int W)
{
    unsigned char slides[HS_MAX_LAYERS];
    for (int l = 0; l < c->n_layer; l++)
        slides[l] = (l + 1) % pattern != 0;
    const cJSON *v = hs_cfg_lookup(r, "layer_types"), *e;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != c->n_layer)
            return hs_fail(HS_EFORMAT, "%s: \"layer_types\" must be a list of %d layer types",
                           r->path, c->n_layer);
        int l = 0;
        cJSON_ArrayForEach(e, v)
        {
            const char *t = cJSON_IsString(e) ? e->valuestring : "";
            if (strcmp(t, "sliding_attention") && strcmp(t, "full_attention"))
                return hs_fail(HS_EFORMAT, "%s: \"layer_types\"[%d]: only \"sliding_attention\" "
                                           "and \"full_attention\" are implemented", r->path, l);
            slides[l++] = !strcmp(t, "sliding_attention");
        }
    }
    int rule = 1, any = 0, all = 1;
    for (int l = 0; l < c->n_layer; l++) {
        rule &= slides[l] == ((l + 1) % pattern != 0);
        any |= slides[l];
        all &= slides[l];
    }
    c->window = any ? W : 0;
    c->window_pattern = any && !all && rule && pattern > 1 ? pattern : 0;
    if (!any || all || c->window_pattern)
        return HS_OK;
    long total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    int *w = hs_calloc((size_t)total, sizeof *w, "config windows");
    if (!w)
        return HS_ENOMEM;
    for (int l = 0, off = 0; l < c->n_layer; off += c->n_head[l++])
        for (int h = 0; h < c->n_head[l]; h++)
            w[off + h] = slides[l] ? W : 0;
    int rc = hs_config_set_windows(c, w);
    free(w);
    return rc ? hs_fail(HS_EFORMAT, "%s: layer_types: %s", r->path, hs_last_error()) : HS_OK;
}

/* gemma3_text's RoPE: rope_theta (+ rope_scaling) for the global layers and
 * rope_local_base_freq for the sliding ones, or, as transformers 5 writes
 * them, rope_parameters per layer type ({"full_attention": {...},
 * "sliding_attention": {...}}; the sliding layers' must be unscaled). */
static int gemma3_rope(hs_cfg_reader *r, hs_model_config *c)
{
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(r->root, "rope_parameters");
    const int per_type = cJSON_IsObject(rp) &&
                         (cJSON_GetObjectItemCaseSensitive(rp, "full_attention") ||
                          cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention"));
    int rc;
    if (!per_type)
        return (rc = hs_cfg_rope(r, "rope_theta", GEMMA3.rope_theta, 1.0, c))
                   ? rc
                   : hs_cfg_double(r, "rope_local_base_freq", 0, 1e4, &c->rope_local_theta);
    (void)hs_cfg_lookup(r, "rope_parameters");
    double theta = 0, local = 0, top = 0, top_local = 0;
    hs_rope_scaling s, local_s;
    const cJSON *e;
    cJSON_ArrayForEach(e, rp)
    {
        if (strcmp(e->string, "full_attention") && strcmp(e->string, "sliding_attention"))
            return hs_fail(HS_EFORMAT, "%s: \"rope_parameters\": \"%s\" is not a layer type",
                           r->path, e->string);
    }
    if ((rc = hs_cfg_rope_value(r, "rope_parameters.full_attention",
                                cJSON_GetObjectItemCaseSensitive(rp, "full_attention"), 1.0,
                                &theta, &s)) ||
        (rc = hs_cfg_rope_value(r, "rope_parameters.sliding_attention",
                                cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention"), 1.0,
                                &local, &local_s)) ||
        (rc = hs_cfg_double(r, "rope_theta", 0, 0, &top)) ||
        (rc = hs_cfg_double(r, "rope_local_base_freq", 0, 0, &top_local)))
        return rc;
    if (local_s.kind != HS_ROPE_DEFAULT)
        return hs_fail(HS_EFORMAT, "%s: \"rope_parameters.sliding_attention\": RoPE scaling on "
                                   "the sliding layers is not implemented", r->path);
    const cJSON *rs = hs_cfg_lookup(r, "rope_scaling");
    if (rs && !cJSON_IsNull(rs))
        return hs_fail(HS_EFORMAT, "%s: \"rope_scaling\" beside per-layer-type "
                                   "\"rope_parameters\" is not implemented (give one)", r->path);
    if ((top && theta && top != theta) || (top_local && local && top_local != local))
        return hs_fail(HS_EFORMAT, "%s: rope_parameters disagree with rope_theta / "
                                   "rope_local_base_freq", r->path);
    c->rope_theta = theta ? theta : top ? top : GEMMA3.rope_theta;
    c->rope_local_theta = local ? local : top_local ? top_local : 1e4;
    c->rope_scaling = s;
    return HS_OK;
}

static int parse(hs_model_config *c, hs_cfg_reader *r)
{
    const hs_family f = c->family;
    const hs_hf_defaults *d = f == HS_FAMILY_GEMMA ? &GEMMA : f == HS_FAMILY_GEMMA2 ? &GEMMA2
                                                                                   : &GEMMA3;
    int rc, W = 0, ignored = 0;
    double unused;
    if ((rc = hs_cfg_hf_decoder(r, c, d)) || (rc = get_activation(r, c)) ||
        (rc = hs_cfg_bool(r, "attention_bias", HS_CFG_NULL_FALSE, 0, &c->attn_bias)))
        return rc;
    c->norm_offset = c->embed_scale = 1;
    c->mlp = HS_MLP_GEGLU;
    if (f == HS_FAMILY_GEMMA)
        return hs_cfg_rope(r, "rope_theta", d->rope_theta, 1.0, c);
    c->out_norm = 1;
    if ((rc = hs_cfg_double(r, "query_pre_attn_scalar", 0, 256, &c->attn_scalar)) ||
        (rc = hs_cfg_int(r, "sliding_window", 0, 4096, &W)))
        return rc;
    if (!(c->attn_scalar > 0))
        return hs_fail(HS_EFORMAT, "%s: \"query_pre_attn_scalar\" must be positive", r->path);
    if (W < 1)
        return hs_fail(HS_EFORMAT, "%s: \"sliding_window\" must be positive", r->path);
    if (f == HS_FAMILY_GEMMA2) {
        /* gemma-2-9b's sliding_window_size: Gemma2Config keeps it, nothing reads it */
        if ((rc = hs_cfg_int(r, "sliding_window_size", HS_CFG_NULL_DEFAULT, 0, &ignored)) ||
            (rc = get_softcap(r, "attn_logit_softcapping", 50.0, &c->attn_softcap)) ||
            (rc = get_softcap(r, "final_logit_softcapping", 30.0, &c->final_softcap)) ||
            (rc = hs_cfg_rope(r, "rope_theta", d->rope_theta, 1.0, c)))
            return rc;
        return get_layers(r, c, 2, W);
    }
    /* gemma3_text: attn_logit_softcapping is not read by Hugging Face's
     * Gemma3Attention; bidirectional attention is not implemented */
    int pattern = 6, bidirectional = 0;
    if ((rc = get_softcap(r, "attn_logit_softcapping", 0, &unused)) ||
        (rc = get_softcap(r, "final_logit_softcapping", 0, &c->final_softcap)) ||
        (rc = hs_cfg_int(r, "sliding_window_pattern", 0, 6, &pattern)) ||
        (rc = hs_cfg_bool(r, "use_bidirectional_attention", HS_CFG_NULL_FALSE, 0,
                          &bidirectional)) ||
        (rc = gemma3_rope(r, c)))
        return rc;
    if (bidirectional)
        return hs_fail(HS_EFORMAT, "%s: \"use_bidirectional_attention\": true: bidirectional "
                                   "attention is not implemented (only false is accepted)",
                       r->path);
    if (pattern < 1)
        return hs_fail(HS_EFORMAT, "%s: \"sliding_window_pattern\" must be positive", r->path);
    c->qk_norm = HS_QK_NORM_HEAD;
    return get_layers(r, c, pattern, W);
}

/* The window of the sliding layers (0: none slides). */
static int sliding_window(const hs_model_config *c)
{
    for (int l = 0; l < c->n_layer; l++)
        if (hs_config_layer_window(c, l) > 0)
            return hs_config_layer_window(c, l);
    return 0;
}

static void add_softcap(cJSON *o, const char *key, double cap)
{
    if (cap > 0)
        cJSON_AddNumberToObject(o, key, cap);
    else
        cJSON_AddNullToObject(o, key);
}

static void write(cJSON *o, const hs_model_config *c)
{
    static const char *const arch[] = { [HS_FAMILY_GEMMA] = "GemmaForCausalLM",
                                        [HS_FAMILY_GEMMA2] = "Gemma2ForCausalLM",
                                        [HS_FAMILY_GEMMA3] = "Gemma3ForCausalLM" };
    hs_cfg_add_hf_decoder(o, c, arch[c->family]);
    cJSON_AddStringToObject(o, "hidden_activation", c->gelu_exact ? "gelu" : "gelu_pytorch_tanh");
    cJSON_AddBoolToObject(o, "attention_bias", c->attn_bias);
    if (c->family == HS_FAMILY_GEMMA)
        return;
    cJSON_AddNumberToObject(o, "query_pre_attn_scalar",
                            c->attn_scalar > 0 ? c->attn_scalar : c->head_dim);
    const int W = sliding_window(c);
    cJSON_AddNumberToObject(o, "sliding_window", W ? W : 4096);
    cJSON *types = cJSON_AddArrayToObject(o, "layer_types");
    for (int l = 0; l < c->n_layer; l++)
        cJSON_AddItemToArray(types, cJSON_CreateString(hs_config_layer_window(c, l) > 0
                                                           ? "sliding_attention"
                                                           : "full_attention"));
    add_softcap(o, "final_logit_softcapping", c->final_softcap);
    if (c->family == HS_FAMILY_GEMMA2) {
        add_softcap(o, "attn_logit_softcapping", c->attn_softcap);
        return;
    }
    add_softcap(o, "attn_logit_softcapping", 0);
    /* the pattern for transformers that predate layer_types */
    if (c->window_pattern > 1)
        cJSON_AddNumberToObject(o, "sliding_window_pattern", c->window_pattern);
    cJSON_AddNumberToObject(o, "rope_local_base_freq",
                            c->rope_local_theta > 0 ? c->rope_local_theta : c->rope_theta);
}

/* Every layer's heads share one window and the sliding layers one W. */
static int windows_by_layer(const hs_model_config *c)
{
    const int W = sliding_window(c);
    for (int l = 0; l < c->n_layer; l++) {
        const int w = hs_config_layer_window(c, l);
        if (w != 0 && w != W)
            return 0;
    }
    return 1;
}

static int fits(const hs_model_config *c)
{
    const hs_family f = c->family;
    const int full_rotary = !c->rotary_dims || c->rotary_dims == c->head_dim;
    const int common = c->pos == HS_POS_ROPE && c->norm == HS_NORM_RMSNORM && c->norm_offset &&
                       c->embed_scale && c->mlp == HS_MLP_GEGLU && !c->parallel_residual &&
                       full_rotary && !c->qkv_bias && !c->mlp_bias && !c->no_input_norm;
    if (f == HS_FAMILY_GEMMA)
        return common && !c->out_norm && c->qk_norm == HS_QK_NORM_NONE && !(c->attn_scalar > 0) &&
               !(c->attn_softcap > 0) && !(c->final_softcap > 0) && !c->window &&
               !c->n_head_windows && !(c->rope_local_theta > 0);
    const int later = common && c->out_norm && windows_by_layer(c);
    if (f == HS_FAMILY_GEMMA2)
        return later && c->qk_norm == HS_QK_NORM_NONE && !(c->rope_local_theta > 0);
    return later && c->qk_norm == HS_QK_NORM_HEAD && !(c->attn_softcap > 0);
}

static const hs_key_rule gemma3_rules[] = {
    { "vision_config", HS_ALLOW_NULL, "Gemma 3's vision tower (multimodal model_type \"gemma3\")" },
    { "text_config", HS_ALLOW_NULL, "a multimodal Gemma 3 config (give its text_config as a "
                                    "gemma3_text config.json)" },
    { "mm_tokens_per_image", HS_ALLOW_NULL, "Gemma 3's image tokens" },
    { "boi_token_index", HS_ALLOW_NULL, "Gemma 3's image tokens" },
    { "eoi_token_index", HS_ALLOW_NULL, "Gemma 3's image tokens" },
    { "image_token_index", HS_ALLOW_NULL, "Gemma 3's image tokens" },
    { "mm_input_projection", HS_ALLOW_NULL, "Gemma 3's image projection" },
};

/* gemma-2b's shape, small: MQA, (1 + w) RMSNorm, sqrt(d) embeddings, GeGLU, tied */
static void gemma(hs_model_config *c, int *H, int *G)
{
    (void)H;
    *G = 1;
    hs_preset_rmsnorm_swiglu(c);
    c->norm_eps = 1e-6;
    c->norm_offset = c->embed_scale = 1;
    c->mlp = HS_MLP_GEGLU;
    c->tie_embeddings = 1;
}

/* gemma-2-2b's: GQA, sublayer output norms, query_pre_attn_scalar, both
 * soft-caps, a window on the even layers */
static void gemma2(hs_model_config *c, int *H, int *G)
{
    gemma(c, H, G);
    *G = 2;
    c->out_norm = 1;
    c->attn_scalar = 16;
    c->attn_softcap = 50;
    c->final_softcap = 30;
    c->window = 64;
    c->window_pattern = 2;
}

/* gemma-3-1b's: q/k norms, five sliding layers in six, a local RoPE base */
static void gemma3(hs_model_config *c, int *H, int *G)
{
    gemma2(c, H, G);
    c->attn_softcap = c->final_softcap = 0;
    c->qk_norm = HS_QK_NORM_HEAD;
    c->window_pattern = 6;
    c->rope_theta = 1e6;
    c->rope_local_theta = 1e4;
}

static const hs_preset gemma_presets[] = { { "gemma", gemma } };
static const hs_preset gemma2_presets[] = { { "gemma2", gemma2 } };
static const hs_preset gemma3_presets[] = { { "gemma3", gemma3 } };

#define GEMMA_FAMILY(ID, TYPE, TITLE, RULES, NRULES, PRESETS)                                  \
    { .id = (ID), .model_type = (TYPE), .title = (TITLE), .parse = parse, .write = write,     \
      .fits = fits, .layout = hs_family_llama_layout, .rules = (RULES), .nrules = (NRULES),  \
      .presets = (PRESETS), .npresets = 1, .layer_windows = 1 }

const hs_family_ops hs_family_gemma =
    GEMMA_FAMILY(HS_FAMILY_GEMMA, "gemma", "Gemma", NULL, 0, gemma_presets);
const hs_family_ops hs_family_gemma2 =
    GEMMA_FAMILY(HS_FAMILY_GEMMA2, "gemma2", "Gemma 2", NULL, 0, gemma2_presets);
const hs_family_ops hs_family_gemma3 =
    GEMMA_FAMILY(HS_FAMILY_GEMMA3, "gemma3_text", "Gemma 3", gemma3_rules,
                 sizeof gemma3_rules / sizeof gemma3_rules[0], gemma3_presets);
