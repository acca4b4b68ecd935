/* LlamaForCausalLM (SPEC §3) and its relatives, which share its tensor
 * names and layout: MistralForCausalLM (llama plus sliding_window, no
 * biases) and Qwen2ForCausalLM (llama plus q/k/v biases) of SPEC §10, and
 * Qwen3ForCausalLM (llama plus per-head q_norm / k_norm before RoPE,
 * head_dim from config, biases on q, k, v and o with attention_bias) of
 * SPEC §14. RMSNorm, separate q/k/v/o projections, GQA, RoPE
 * (rotate-half), SwiGLU, final model.norm, lm_head or tied. The layout is
 * also the one the later decoders (gemma, olmo2, phi3) build on. */
#include <stdio.h>
#include <string.h>

#include "family.h"

/* sliding_window of mistral (W, or null: global) and the qwen2 keys:
 * use_sliding_window must be false (Qwen2's sliding layers above
 * max_window_layers are not implemented), and then sliding_window and
 * max_window_layers do not act. */
static int get_window(hs_cfg_reader *r, hs_model_config *c)
{
    int w = 0, use = 0, rc;
    if (c->family == HS_FAMILY_MISTRAL) {
        if ((rc = hs_cfg_int(r, "sliding_window", HS_CFG_NULL_DEFAULT, 0, &w)))
            return rc;
        /* MistralConfig's default, when the key is absent */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, "sliding_window");
        c->window = v ? w : 4096;
        if (v && cJSON_IsNumber(v) && !w)
            return hs_fail(HS_EFORMAT, "%s: \"sliding_window\" must be positive or null",
                           r->path);
        return HS_OK;
    }
    if (c->family != HS_FAMILY_QWEN2)
        return HS_OK;
    if ((rc = hs_cfg_bool(r, "use_sliding_window", HS_CFG_NULL_FALSE, 0, &use)) ||
        (rc = hs_cfg_int(r, "sliding_window", HS_CFG_NULL_DEFAULT, 0, &w)) ||
        (rc = hs_cfg_int(r, "max_window_layers", HS_CFG_NULL_DEFAULT, 0, &w)))
        return rc;
    if (use)
        return hs_fail(HS_EFORMAT,
                       "%s: \"use_sliding_window\": true: Qwen2's sliding-window layers "
                       "(max_window_layers) are not implemented (only false is accepted)",
                       r->path);
    return HS_OK;
}

static int parse(hs_model_config *c, hs_cfg_reader *r)
{
    int rc;
    const int llama = c->family == HS_FAMILY_LLAMA;
    const cJSON *act;
    if ((rc = hs_cfg_hf_sizes(r, c)) ||
        (rc = hs_cfg_double(r, "rms_norm_eps", 0, 1e-6, &c->norm_eps)) ||
        (rc = hs_cfg_bool(r, "tie_word_embeddings", HS_CFG_NULL_FALSE, 0, &c->tie_embeddings)) ||
        (llama && (rc = hs_cfg_bool(r, "attention_bias", HS_CFG_NULL_FALSE, 0, &c->attn_bias))) ||
        (llama && (rc = hs_cfg_bool(r, "mlp_bias", HS_CFG_NULL_FALSE, 0, &c->mlp_bias))) ||
        (rc = get_window(r, c)))
        return rc;
    if ((act = hs_cfg_lookup(r, "hidden_act")) &&
        !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return hs_fail(HS_EFORMAT, "%s: hidden_act must be silu", r->path);
    c->qkv_bias = c->family == HS_FAMILY_QWEN2;
    /* LlamaConfig's num_key_value_heads=None and head_dim=None: derived */
    if ((rc = hs_cfg_per_layer(r, "num_attention_heads", c->n_layer, HS_CFG_REQUIRED, 0, 0,
                               c->n_head)) ||
        (rc = hs_cfg_per_layer(r, "num_key_value_heads", c->n_layer, HS_CFG_NULL_DEFAULT,
                               c->n_head[0], 0, c->n_kv_head)) ||
        (rc = hs_cfg_check_groups(r, c, "num_attention_heads", "num_key_value_heads")))
        return rc;
    if ((rc = hs_cfg_rope(r, "rope_theta", 10000.0, 1.0, c)))
        return rc;
    if ((rc = hs_cfg_head_dim(r, c, 0)))
        return rc;
    c->pos = HS_POS_ROPE;
    c->norm = HS_NORM_RMSNORM;
    c->final_norm = 1;
    c->mlp = HS_MLP_SWIGLU;
    return HS_OK;
}

static void write(cJSON *o, const hs_model_config *c)
{
    static const char *const arch[] = { [HS_FAMILY_LLAMA] = "LlamaForCausalLM",
                                        [HS_FAMILY_MISTRAL] = "MistralForCausalLM",
                                        [HS_FAMILY_QWEN2] = "Qwen2ForCausalLM",
                                        [HS_FAMILY_QWEN3] = "Qwen3ForCausalLM" };
    hs_cfg_add_hf_decoder(o, c, arch[c->family]);
    if (c->family == HS_FAMILY_LLAMA) {
        cJSON_AddBoolToObject(o, "attention_bias", c->attn_bias);
        cJSON_AddBoolToObject(o, "mlp_bias", c->mlp_bias);
    } else if (c->family == HS_FAMILY_QWEN3) {
        cJSON_AddBoolToObject(o, "attention_bias", c->attn_bias);
        cJSON_AddBoolToObject(o, "use_sliding_window", 0);
    } else if (c->family == HS_FAMILY_MISTRAL) {
        if (c->window)
            cJSON_AddNumberToObject(o, "sliding_window", c->window);
        else
            cJSON_AddNullToObject(o, "sliding_window");
    } else {
        cJSON_AddBoolToObject(o, "use_sliding_window", 0);
    }
    cJSON_AddStringToObject(o, "hidden_act", "silu");
}

/* Qwen3ForCausalLM: Qwen3Config's defaults where a key is absent. Only
 * use_sliding_window false is implemented (then sliding_window and
 * max_window_layers do not act); a layer_types list of sliding layers is
 * refused by config.c's rule for every family. */
static int qwen3_parse(hs_model_config *c, hs_cfg_reader *r)
{
    static const hs_hf_defaults dflt = { .vocab_size = 151936, .hidden_size = 4096,
                                         .intermediate_size = 22016, .num_hidden_layers = 32,
                                         .max_position_embeddings = 32768,
                                         .num_attention_heads = 32, .num_key_value_heads = 32,
                                         .head_dim = 128, .rms_norm_eps = 1e-6,
                                         .rope_theta = 10000.0, .tie_word_embeddings = 0 };
    int rc, use = 0, unused;
    const cJSON *act;
    if ((rc = hs_cfg_hf_decoder(r, c, &dflt)) ||
        (rc = hs_cfg_rope(r, "rope_theta", dflt.rope_theta, 1.0, c)) ||
        (rc = hs_cfg_bool(r, "attention_bias", HS_CFG_NULL_FALSE, 0, &c->attn_bias)) ||
        (rc = hs_cfg_bool(r, "use_sliding_window", HS_CFG_NULL_FALSE, 0, &use)) ||
        (rc = hs_cfg_int(r, "sliding_window", HS_CFG_NULL_DEFAULT, 0, &unused)) ||
        (rc = hs_cfg_int(r, "max_window_layers", HS_CFG_NULL_DEFAULT, 0, &unused)))
        return rc;
    if (use)
        return hs_fail(HS_EFORMAT,
                       "%s: \"use_sliding_window\": true: Qwen3's sliding-window layers "
                       "(max_window_layers) are not implemented (only false is accepted)",
                       r->path);
    if ((act = hs_cfg_lookup(r, "hidden_act")) &&
        !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return hs_fail(HS_EFORMAT, "%s: hidden_act must be silu", r->path);
    c->mlp = HS_MLP_SWIGLU;
    c->qk_norm = HS_QK_NORM_HEAD;
    return HS_OK;
}

static int fits(const hs_model_config *c)
{
    const hs_family f = c->family;
    const int full_rotary = !c->rotary_dims || c->rotary_dims == c->head_dim;
    if (f == HS_FAMILY_QWEN3) { /* plain but for the per-head q/k norms */
        hs_model_config p = *c;
        p.qk_norm = HS_QK_NORM_NONE;
        return c->qk_norm == HS_QK_NORM_HEAD && hs_family_plain(&p) && c->pos == HS_POS_ROPE &&
               c->norm == HS_NORM_RMSNORM && c->mlp == HS_MLP_SWIGLU && !c->parallel_residual &&
               full_rotary && !c->window && !c->qkv_bias && !c->mlp_bias;
    }
    return c->pos == HS_POS_ROPE && c->norm == HS_NORM_RMSNORM && c->mlp == HS_MLP_SWIGLU &&
           !c->parallel_residual && full_rotary && (f == HS_FAMILY_MISTRAL || !c->window) &&
           hs_family_plain(c) &&
           (f == HS_FAMILY_LLAMA ? !c->qkv_bias
                                 : !c->attn_bias && !c->mlp_bias &&
                                       c->qkv_bias == (f == HS_FAMILY_QWEN2));
}

int hs_family_llama_layout(const hs_model *m, hs_file_tensor *f, int i, int layer,
                           const char *rest)
{
    static const char *const map[][2] = {
        { "ln_1.", "input_layernorm." },
        { "ln_attn_out.", "post_attention_layernorm." },
        { "ln_mlp_out.", "post_feedforward_layernorm." },
        { "q_norm.", "self_attn.q_norm." },
        { "k_norm.", "self_attn.k_norm." },
        { "attn.q_proj.", "self_attn.q_proj." },
        { "attn.k_proj.", "self_attn.k_proj." },
        { "attn.v_proj.", "self_attn.v_proj." },
        { "attn.o_proj.", "self_attn.o_proj." },
    };
    const char *name = m->tensors[i].name;
    if (!strcmp(name, "wte.weight"))
        snprintf(f->name, sizeof f->name, "model.embed_tokens.weight");
    else if (!strcmp(name, "ln_f.weight"))
        snprintf(f->name, sizeof f->name, "model.norm.weight");
    else if (layer >= 0) {
        /* the MLP's input norm: post_attention_layernorm, unless that name
         * is the attention output's norm (out_norm) */
        const char *ln2 = m->cfg.out_norm ? "pre_feedforward_layernorm." : "post_attention_layernorm.";
        const char *to = !strncmp(rest, "ln_2.", 5) ? ln2 : NULL, *tail = rest + 5;
        for (size_t k = 0; !to && k < sizeof map / sizeof map[0]; k++) {
            const size_t n = strlen(map[k][0]);
            if (!strncmp(rest, map[k][0], n))
                to = map[k][1], tail = rest + n;
        }
        if (!to) /* mlp.* keeps its name */
            to = "", tail = rest;
        snprintf(f->name, sizeof f->name, "model.layers.%d.%s%s", layer, to, tail);
    }
    return 0;
}

static const hs_key_rule no_biases[] = {
    { "attention_bias", HS_ALLOW_FALSE, "biases on the attention projections" },
    { "mlp_bias", HS_ALLOW_FALSE, "biases on the MLP projections" },
};
static const hs_key_rule no_mlp_bias[] = {
    { "mlp_bias", HS_ALLOW_FALSE, "biases on the MLP projections" },
};

/* llama's shape, small: GQA with 2 key/value heads, RMSNorm, SwiGLU */
static void llama_like(hs_model_config *c, int *H, int *G)
{
    (void)H;
    *G = 2;
    hs_preset_rmsnorm_swiglu(c);
    c->norm_eps = 1e-6;
}

static void mistral(hs_model_config *c, int *H, int *G)
{
    llama_like(c, H, G);
    c->window = 64;
}

static void qwen2(hs_model_config *c, int *H, int *G)
{
    llama_like(c, H, G);
    c->tie_embeddings = c->qkv_bias = 1;
}

/* Qwen3-0.6B's shape, small: GQA, per-head q/k norms, tied */
static void qwen3(hs_model_config *c, int *H, int *G)
{
    llama_like(c, H, G);
    c->tie_embeddings = 1;
    c->qk_norm = HS_QK_NORM_HEAD;
}

static const hs_preset llama_presets[] = { { "llama", llama_like } };
static const hs_preset mistral_presets[] = { { "mistral", mistral } };
static const hs_preset qwen2_presets[] = { { "qwen2", qwen2 } };
static const hs_preset qwen3_presets[] = { { "qwen3", qwen3 } };

#define LLAMA_FAMILY(ID, TYPE, TITLE, PARSE, RULES, NRULES, PRESETS)                           \
    { .id = (ID), .model_type = (TYPE), .title = (TITLE), .parse = (PARSE), .write = write,   \
      .fits = fits, .layout = hs_family_llama_layout, .rules = (RULES), .nrules = (NRULES),  \
      .presets = (PRESETS), .npresets = 1 }

const hs_family_ops hs_family_llama =
    LLAMA_FAMILY(HS_FAMILY_LLAMA, "llama", "Llama", parse, NULL, 0, llama_presets);
const hs_family_ops hs_family_mistral =
    LLAMA_FAMILY(HS_FAMILY_MISTRAL, "mistral", "Mistral", parse, no_biases, 2, mistral_presets);
const hs_family_ops hs_family_qwen2 =
    LLAMA_FAMILY(HS_FAMILY_QWEN2, "qwen2", "Qwen2", parse, no_biases, 2, qwen2_presets);
const hs_family_ops hs_family_qwen3 =
    LLAMA_FAMILY(HS_FAMILY_QWEN3, "qwen3", "Qwen3", qwen3_parse, no_mlp_bias, 1, qwen3_presets);
