/* LlamaForCausalLM (SPEC §3) and its two relatives of SPEC §10, which share
 * its tensor names and layout: MistralForCausalLM (llama plus
 * sliding_window, no biases) and Qwen2ForCausalLM (llama plus q/k/v
 * biases). RMSNorm, separate q/k/v/o projections, GQA, RoPE (rotate-half),
 * SwiGLU, final model.norm, lm_head or tied. */
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
    int dh = 0;
    if ((rc = hs_cfg_int(r, "head_dim", HS_CFG_NULL_DEFAULT, 0, &dh)))
        return rc;
    if (!dh && (c->n_head[0] < 1 || c->d_model % c->n_head[0]))
        return hs_fail(HS_EFORMAT, "%s: hidden_size=%d is not divisible by num_attention_heads=%d",
                       r->path, c->d_model, c->n_head[0]);
    c->head_dim = dh ? dh : c->d_model / c->n_head[0];
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
                                        [HS_FAMILY_QWEN2] = "Qwen2ForCausalLM" };
    hs_cfg_add_hf_sizes(o, c, arch[c->family]);
    hs_cfg_add_per_layer(o, "num_attention_heads", c, c->n_head);
    hs_cfg_add_per_layer(o, "num_key_value_heads", c, c->n_kv_head);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    hs_cfg_add_rope_scaling(o, &c->rope_scaling);
    if (c->family == HS_FAMILY_LLAMA) {
        cJSON_AddBoolToObject(o, "attention_bias", c->attn_bias);
        cJSON_AddBoolToObject(o, "mlp_bias", c->mlp_bias);
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

static int fits(const hs_model_config *c)
{
    const hs_family f = c->family;
    const int full_rotary = !c->rotary_dims || c->rotary_dims == c->head_dim;
    return c->pos == HS_POS_ROPE && c->norm == HS_NORM_RMSNORM && c->mlp == HS_MLP_SWIGLU &&
           !c->parallel_residual && full_rotary && (f == HS_FAMILY_MISTRAL || !c->window) &&
           (f == HS_FAMILY_LLAMA ? !c->qkv_bias
                                 : !c->attn_bias && !c->mlp_bias &&
                                       c->qkv_bias == (f == HS_FAMILY_QWEN2));
}

static int layout(const hs_model *m, hs_file_tensor *f, int i, int layer, const char *rest)
{
    static const char *const map[][2] = {
        { "ln_1.weight", "input_layernorm.weight" },
        { "ln_2.weight", "post_attention_layernorm.weight" },
        { "attn.q_proj.weight", "self_attn.q_proj.weight" },
        { "attn.k_proj.weight", "self_attn.k_proj.weight" },
        { "attn.v_proj.weight", "self_attn.v_proj.weight" },
        { "attn.o_proj.weight", "self_attn.o_proj.weight" },
        { "attn.q_proj.bias", "self_attn.q_proj.bias" },
        { "attn.k_proj.bias", "self_attn.k_proj.bias" },
        { "attn.v_proj.bias", "self_attn.v_proj.bias" },
        { "attn.o_proj.bias", "self_attn.o_proj.bias" },
    };
    const char *name = m->tensors[i].name;
    if (!strcmp(name, "wte.weight"))
        snprintf(f->name, sizeof f->name, "model.embed_tokens.weight");
    else if (!strcmp(name, "ln_f.weight"))
        snprintf(f->name, sizeof f->name, "model.norm.weight");
    else if (layer >= 0) {
        const char *to = rest; /* mlp.* keeps its name */
        for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
            if (!strcmp(rest, map[k][0]))
                to = map[k][1];
        snprintf(f->name, sizeof f->name, "model.layers.%d.%s", layer, to);
    }
    return 0;
}

static const hs_key_rule no_biases[] = {
    { "attention_bias", HS_ALLOW_FALSE, "biases on the attention projections" },
    { "mlp_bias", HS_ALLOW_FALSE, "biases on the MLP projections" },
};

/* llama's shape, small: GQA with 2 key/value heads, RMSNorm, SwiGLU */
static void llama_like(hs_model_config *c, int *H, int *G)
{
    (void)H;
    *G = 2;
    c->pos = HS_POS_ROPE;
    c->norm = HS_NORM_RMSNORM;
    c->norm_eps = 1e-6;
    c->mlp = HS_MLP_SWIGLU;
    c->d_ff = 172;
    c->norm_bias = 0;
    c->tie_embeddings = 0;
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

static const hs_preset llama_presets[] = { { "llama", llama_like } };
static const hs_preset mistral_presets[] = { { "mistral", mistral } };
static const hs_preset qwen2_presets[] = { { "qwen2", qwen2 } };

#define LLAMA_FAMILY(ID, TYPE, TITLE, RULES, NRULES, PRESETS)                                  \
    { .id = (ID), .model_type = (TYPE), .title = (TITLE), .parse = parse, .write = write,     \
      .fits = fits, .layout = layout, .rules = (RULES), .nrules = (NRULES),                 \
      .presets = (PRESETS), .npresets = 1 }

const hs_family_ops hs_family_llama =
    LLAMA_FAMILY(HS_FAMILY_LLAMA, "llama", "Llama", NULL, 0, llama_presets);
const hs_family_ops hs_family_mistral =
    LLAMA_FAMILY(HS_FAMILY_MISTRAL, "mistral", "Mistral", no_biases, 2, mistral_presets);
const hs_family_ops hs_family_qwen2 =
    LLAMA_FAMILY(HS_FAMILY_QWEN2, "qwen2", "Qwen2", no_biases, 2, qwen2_presets);
