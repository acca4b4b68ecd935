/* Olmo2ForCausalLM (OLMo 2, SPEC §14): no norm before the sublayers but one
 * after each, x + post_attention_layernorm(attn(x)) and
 * x + post_feedforward_layernorm(mlp(x)); RMSNorm over the whole q and k
 * projections (q_norm of width H dh, k_norm of G dh) before RoPE; SwiGLU,
 * the final model.norm, an untied lm_head by default; Llama's tensor
 * names. Olmo2Config's defaults where a key is absent. */
#include <string.h>

#include "family.h"

static const hs_hf_defaults OLMO2 = {
    .vocab_size = 50304, .hidden_size = 4096, .intermediate_size = 11008,
    .num_hidden_layers = 32, .max_position_embeddings = 2048, .num_attention_heads = 32,
    .num_key_value_heads = 0, .head_dim = 0, .rms_norm_eps = 1e-5, .rope_theta = 10000.0,
    .tie_word_embeddings = 0,
};

static int parse(hs_model_config *c, hs_cfg_reader *r)
{
    int rc;
    const cJSON *act;
    if ((rc = hs_cfg_hf_decoder(r, c, &OLMO2)) ||
        (rc = hs_cfg_rope(r, "rope_theta", OLMO2.rope_theta, 1.0, c)) ||
        (rc = hs_cfg_bool(r, "attention_bias", HS_CFG_NULL_FALSE, 0, &c->attn_bias)))
        return rc;
    if ((act = hs_cfg_lookup(r, "hidden_act")) &&
        !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return hs_fail(HS_EFORMAT, "%s: hidden_act must be silu", r->path);
    c->no_input_norm = c->out_norm = 1;
    c->qk_norm = HS_QK_NORM_PROJ;
    c->mlp = HS_MLP_SWIGLU;
    return HS_OK;
}

static void write(cJSON *o, const hs_model_config *c)
{
    hs_cfg_add_hf_decoder(o, c, "Olmo2ForCausalLM");
    cJSON_AddBoolToObject(o, "attention_bias", c->attn_bias);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
}

static int fits(const hs_model_config *c)
{
    hs_model_config p = *c; /* plain but for its norms */
    p.no_input_norm = p.out_norm = 0;
    p.qk_norm = HS_QK_NORM_NONE;
    const int full_rotary = !c->rotary_dims || c->rotary_dims == c->head_dim;
    return c->no_input_norm && c->out_norm && c->qk_norm == HS_QK_NORM_PROJ &&
           hs_family_plain(&p) && c->pos == HS_POS_ROPE && c->norm == HS_NORM_RMSNORM &&
           c->mlp == HS_MLP_SWIGLU && !c->parallel_residual && full_rotary && !c->window &&
           !c->qkv_bias && !c->mlp_bias;
}

/* OLMo-2-1B's shape, small: MHA, norms after the sublayers, q/k norms over
 * the projections, untied */
static void olmo2(hs_model_config *c, int *H, int *G)
{
    (void)H, (void)G;
    hs_preset_rmsnorm_swiglu(c);
    c->norm_eps = 1e-6;
    c->no_input_norm = c->out_norm = 1;
    c->qk_norm = HS_QK_NORM_PROJ;
}

static const hs_preset presets[] = { { "olmo2", olmo2 } };

const hs_family_ops hs_family_olmo2 = {
    .id = HS_FAMILY_OLMO2,
    .model_type = "olmo2",
    .title = "OLMo 2",
    .parse = parse,
    .write = write,
    .fits = fits,
    .layout = hs_family_llama_layout,
    .presets = presets,
    .npresets = 1,
};
