/* Phi3ForCausalLM (Phi-3, Phi-4-mini; SPEC §14): Llama's computation with
 * the attention projections fused into qkv_proj ([(H + 2G) dh, d]: q, then
 * k, then v) and the MLP's into gate_up_proj ([2 F, d]: gate, then up), both
 * re-laid out once at load into our separate tensors; rotary on the first
 * int(dh * partial_rotary_factor) dims of each head; sliding_window (when
 * set) on every layer; rope_scaling only where implemented (linear,
 * llama3; longrope and su are refused, naming the type). Phi3Config's
 * defaults where a key is absent. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "family.h"

static const hs_hf_defaults PHI3 = {
    .vocab_size = 32064, .hidden_size = 3072, .intermediate_size = 8192,
    .num_hidden_layers = 32, .max_position_embeddings = 4096, .num_attention_heads = 32,
    .num_key_value_heads = 0, .head_dim = 0, .rms_norm_eps = 1e-5, .rope_theta = 10000.0,
    .tie_word_embeddings = 0,
};

/* original_max_position_embeddings only sizes longrope's scaling (refused
 * with rope_scaling); attention_bias is not read by Phi3Attention, whose
 * projections have no biases. */
static int parse(hs_model_config *c, hs_cfg_reader *r)
{
    int rc, ignored;
    double prf = 1.0;
    const cJSON *act;
    if ((rc = hs_cfg_hf_decoder(r, c, &PHI3)) ||
        (rc = hs_cfg_double(r, "partial_rotary_factor", HS_CFG_NULL_DEFAULT, 1.0, &prf)))
        return rc;
    if (!(prf > 0 && prf <= 1))
        return hs_fail(HS_EFORMAT, "%s: partial_rotary_factor=%g must be in (0, 1]", r->path, prf);
    if ((rc = hs_cfg_rope(r, "rope_theta", PHI3.rope_theta, prf, c)) ||
        (rc = hs_cfg_int(r, "original_max_position_embeddings", HS_CFG_NULL_DEFAULT, 0,
                         &ignored)) ||
        (rc = hs_cfg_bool(r, "attention_bias", HS_CFG_NULL_FALSE, 0, &ignored)) ||
        (rc = hs_cfg_int(r, "sliding_window", HS_CFG_NULL_DEFAULT, 0, &c->window)))
        return rc;
    if ((act = hs_cfg_lookup(r, "hidden_act")) &&
        !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return hs_fail(HS_EFORMAT, "%s: hidden_act must be silu", r->path);
    const int R = (int)(c->head_dim * prf); /* Python's int(head_dim * partial_rotary_factor) */
    if (R < 2 || R % 2)
        return hs_fail(HS_EFORMAT,
                       "%s: partial_rotary_factor=%g gives %d rotary dims of head_dim=%d (an even "
                       "number >= 2 is needed)",
                       r->path, prf, R, c->head_dim);
    c->rotary_dims = R == c->head_dim ? 0 : R;
    c->mlp = HS_MLP_SWIGLU;
    return HS_OK;
}

/* A partial_rotary_factor whose int(dh * factor), as the parser (and
 * Hugging Face) computes it, gives c's rotary dims back. */
static double rotary_factor(const hs_model_config *c)
{
    const int R = c->rotary_dims ? c->rotary_dims : c->head_dim;
    double f = (double)R / c->head_dim;
    while ((int)(c->head_dim * f) < R)
        f = nextafter(f, 2.0);
    return f;
}

static void write(cJSON *o, const hs_model_config *c)
{
    hs_cfg_add_hf_decoder(o, c, "Phi3ForCausalLM");
    cJSON_AddNumberToObject(o, "partial_rotary_factor", rotary_factor(c));
    if (c->window)
        cJSON_AddNumberToObject(o, "sliding_window", c->window);
    else
        cJSON_AddNullToObject(o, "sliding_window");
    cJSON_AddStringToObject(o, "hidden_act", "silu");
}

static int fits(const hs_model_config *c)
{
    return hs_family_plain(c) && c->pos == HS_POS_ROPE && c->norm == HS_NORM_RMSNORM &&
           c->mlp == HS_MLP_SWIGLU && !c->parallel_residual && !c->attn_bias && !c->qkv_bias &&
           !c->mlp_bias;
}

/* Llama's names, with q, k, v held in qkv_proj and gate, up in
 * gate_up_proj (rows in that order). */
static int layout(const hs_model *m, hs_file_tensor *f, int i, int layer, const char *rest)
{
    hs_family_llama_layout(m, f, i, layer, rest);
    if (layer < 0)
        return 0;
    if (!strcmp(rest, "attn.k_proj.weight") || !strcmp(rest, "attn.v_proj.weight") ||
        !strcmp(rest, "mlp.up_proj.weight"))
        return 1;
    const hs_model_config *c = &m->cfg;
    if (!strcmp(rest, "attn.q_proj.weight")) {
        const int HD = c->n_head[layer] * c->head_dim, GD = c->n_kv_head[layer] * c->head_dim;
        snprintf(f->name, sizeof f->name, "model.layers.%d.self_attn.qkv_proj.weight", layer);
        f->shape[0] = HD + 2 * (int64_t)GD;
        f->nparts = 3;
        const int col0[3] = { 0, HD, HD + GD };
        const char *part[3] = { NULL, "h.%d.attn.k_proj.weight", "h.%d.attn.v_proj.weight" };
        for (int p = 0; p < 3; p++) {
            f->part[p].tensor = p ? hs_family_find(m, part[p], layer) : i;
            f->part[p].col0 = col0[p];
        }
    } else if (!strcmp(rest, "mlp.gate_proj.weight")) {
        snprintf(f->name, sizeof f->name, "model.layers.%d.mlp.gate_up_proj.weight", layer);
        f->shape[0] = 2 * (int64_t)c->d_ff;
        f->nparts = 2;
        f->part[1].tensor = hs_family_find(m, "h.%d.mlp.up_proj.weight", layer);
        f->part[1].col0 = c->d_ff;
    }
    return 0;
}

/* Phi-3-mini's shape, small: MHA, RMSNorm, SwiGLU, untied */
static void phi3(hs_model_config *c, int *H, int *G)
{
    (void)H, (void)G;
    hs_preset_rmsnorm_swiglu(c);
}

static const hs_preset presets[] = { { "phi3", phi3 } };

const hs_family_ops hs_family_phi3 = {
    .id = HS_FAMILY_PHI3,
    .model_type = "phi3",
    .title = "Phi-3",
    .parse = parse,
    .write = write,
    .fits = fits,
    .layout = layout,
    .presets = presets,
    .npresets = 1,
};
