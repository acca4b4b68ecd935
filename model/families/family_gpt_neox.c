/* GPTNeoXForCausalLM (Pythia, SPEC §10): LayerNorm with biases, the fused
 * query_key_value whose output is viewed as (T, H, 3 dh), rotary on the
 * first int(dh * rotary_pct) dims, a parallel or sequential residual, the
 * exact-erf GELU MLP, an untied embed_out by default. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "family.h"

/* Newer transformers also write the base and fraction as rope_theta and
 * partial_rotary_factor; they must agree. rotary_pct null fails in HF
 * (int(head_size * None)), so it is refused; use_parallel_residual null is
 * false there (`if self.use_parallel_residual`): sequential. */
static int parse(hs_model_config *c, hs_cfg_reader *r)
{
    double pct = 0.25, prf = 0;
    int rc;
    const cJSON *act;
    if ((rc = hs_cfg_hf_sizes(r, c)) ||
        (rc = hs_cfg_double(r, "layer_norm_eps", 0, 1e-5, &c->norm_eps)) ||
        (rc = hs_cfg_bool(r, "tie_word_embeddings", HS_CFG_NULL_FALSE, 0, &c->tie_embeddings)) ||
        (rc = hs_cfg_bool(r, "attention_bias", HS_CFG_NULL_FALSE, 1, &c->attn_bias)) ||
        (rc = hs_cfg_bool(r, "use_parallel_residual", HS_CFG_NULL_FALSE, 1,
                          &c->parallel_residual)) ||
        (rc = hs_cfg_double(r, "rotary_pct", 0, 0.25, &pct)) ||
        (rc = hs_cfg_double(r, "partial_rotary_factor", HS_CFG_NULL_DEFAULT, 0, &prf)) ||
        (rc = hs_cfg_per_layer(r, "num_attention_heads", c->n_layer, HS_CFG_REQUIRED, 0, 0,
                               c->n_head)))
        return rc;
    act = hs_cfg_lookup(r, "hidden_act");
    const char *name = cJSON_IsString(act) ? act->valuestring : NULL;
    c->gelu_exact = !act || (name && !strcmp(name, "gelu"));
    if (!c->gelu_exact &&
        !(name && (!strcmp(name, "gelu_new") || !strcmp(name, "gelu_pytorch_tanh"))))
        return hs_fail(HS_EFORMAT, "%s: hidden_act must be gelu (exact), gelu_new or "
                                   "gelu_pytorch_tanh", r->path);
    if (prf && prf != pct)
        return hs_fail(HS_EFORMAT, "%s: partial_rotary_factor=%g disagrees with rotary_pct=%g",
                       r->path, prf, pct);
    if (!(pct > 0 && pct <= 1))
        return hs_fail(HS_EFORMAT, "%s: rotary_pct=%g must be in (0, 1]", r->path, pct);
    double base;
    if ((rc = hs_cfg_double(r, "rotary_emb_base", 0, 10000.0, &base)) ||
        (rc = hs_cfg_rope(r, "rope_theta", base, pct, c)))
        return rc;
    if (c->rope_theta != base)
        return hs_fail(HS_EFORMAT, "%s: rope_theta=%g disagrees with rotary_emb_base=%g",
                       r->path, c->rope_theta, base);
    memcpy(c->n_kv_head, c->n_head, sizeof c->n_head);
    if (c->n_head[0] < 1 || c->d_model % c->n_head[0])
        return hs_fail(HS_EFORMAT, "%s: hidden_size=%d is not divisible by num_attention_heads=%d",
                       r->path, c->d_model, c->n_head[0]);
    c->head_dim = c->d_model / c->n_head[0];
    c->rotary_dims = (int)(c->head_dim * pct); /* Python's int(head_size * rotary_pct) */
    if (c->rotary_dims < 2 || c->rotary_dims % 2)
        return hs_fail(HS_EFORMAT,
                       "%s: rotary_pct=%g gives %d rotary dims of head_dim=%d (an even number "
                       ">= 2 is needed)",
                       r->path, pct, c->rotary_dims, c->head_dim);
    c->pos = HS_POS_ROPE;
    c->norm = HS_NORM_LAYERNORM;
    c->norm_bias = c->final_norm = c->mlp_bias = 1;
    c->mlp = HS_MLP_GELU;
    return HS_OK;
}

/* GPT-NeoX's rotary_pct for c's rotary dims: one whose int(dh * pct), as
 * the parser (and Hugging Face) computes it, gives them back. */
static double rotary_pct(const hs_model_config *c)
{
    const int R = c->rotary_dims ? c->rotary_dims : c->head_dim;
    double pct = (double)R / c->head_dim;
    while ((int)(c->head_dim * pct) < R)
        pct = nextafter(pct, 2.0);
    return pct;
}

static void write(cJSON *o, const hs_model_config *c)
{
    hs_cfg_add_hf_sizes(o, c, "GPTNeoXForCausalLM");
    hs_cfg_add_per_layer(o, "num_attention_heads", c, c->n_head);
    cJSON_AddNumberToObject(o, "layer_norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(o, "rotary_pct", rotary_pct(c));
    cJSON_AddNumberToObject(o, "rotary_emb_base", c->rope_theta);
    hs_cfg_add_rope_scaling(o, &c->rope_scaling);
    cJSON_AddBoolToObject(o, "use_parallel_residual", c->parallel_residual);
    cJSON_AddBoolToObject(o, "attention_bias", c->attn_bias);
    cJSON_AddStringToObject(o, "hidden_act", c->gelu_exact ? "gelu" : "gelu_new");
}

static int fits(const hs_model_config *c)
{
    return c->n_kv_head[0] == c->n_head[0] && c->n_head[0] * c->head_dim == c->d_model &&
           c->pos == HS_POS_ROPE && c->norm == HS_NORM_LAYERNORM && c->mlp == HS_MLP_GELU &&
           c->mlp_bias && c->norm_bias && !c->window && !c->qkv_bias && hs_family_plain(c);
}

/* q, k and v go into the fused query_key_value, interleaved per head; k and
 * v are held inside it. */
static int layout(const hs_model *m, hs_file_tensor *f, int i, int layer, const char *rest)
{
    static const char *const top[][2] = { { "wte.weight", "gpt_neox.embed_in.weight" },
                                          { "ln_f.weight", "gpt_neox.final_layer_norm.weight" },
                                          { "ln_f.bias", "gpt_neox.final_layer_norm.bias" },
                                          { "lm_head.weight", "embed_out.weight" } };
    static const char *const map[][2] = { { "ln_1.", "input_layernorm." },
                                          { "ln_2.", "post_attention_layernorm." },
                                          { "attn.o_proj.", "attention.dense." },
                                          { "mlp.fc.", "mlp.dense_h_to_4h." },
                                          { "mlp.proj.", "mlp.dense_4h_to_h." } };
    const hs_tensor_info *t = &m->tensors[i];
    if (layer < 0) {
        for (size_t k = 0; k < sizeof top / sizeof top[0]; k++)
            if (!strcmp(t->name, top[k][0]))
                snprintf(f->name, sizeof f->name, "%s", top[k][1]);
        return 0;
    }
    if (strstr(rest, "attn.k_proj") || strstr(rest, "attn.v_proj"))
        return 1;
    if (!strncmp(rest, "attn.q_proj.", 12)) {
        const int is_w = t->ndim == 2, dh = m->cfg.head_dim;
        snprintf(f->name, sizeof f->name, "gpt_neox.layers.%d.attention.query_key_value.%s",
                 layer, is_w ? "weight" : "bias");
        f->shape[0] = 3 * (int64_t)t->shape[0];
        f->nparts = 3;
        const char *kv[2] = { is_w ? "h.%d.attn.k_proj.weight" : "h.%d.attn.k_proj.bias",
                              is_w ? "h.%d.attn.v_proj.weight" : "h.%d.attn.v_proj.bias" };
        for (int p = 0; p < 3; p++) {
            f->part[p].tensor = p ? hs_family_find(m, kv[p - 1], layer) : i;
            f->part[p].col0 = p * dh;
            f->part[p].group = dh;
        }
        return 0;
    }
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
        const size_t len = strlen(map[k][0]);
        if (!strncmp(rest, map[k][0], len))
            snprintf(f->name, sizeof f->name, "gpt_neox.layers.%d.%s%s", layer, map[k][1],
                     rest + len);
    }
    return 0;
}

static const hs_key_rule rules[] = {
    { "mlp_bias", HS_ALLOW_FALSE, "biases on the MLP projections" },
};

/* Pythia's shape: parallel residual, rotary on a quarter of each head */
static void preset(hs_model_config *c, int *H, int *G)
{
    (void)G;
    c->pos = HS_POS_ROPE;
    c->mlp = HS_MLP_GELU;
    c->gelu_exact = c->parallel_residual = 1;
    c->d_ff = 4 * c->d_model;
    c->attn_bias = c->mlp_bias = 1;
    c->tie_embeddings = 0;
    c->rotary_dims = c->d_model / *H / 4;
}

static const hs_preset presets[] = { { "gpt_neox", preset } };

const hs_family_ops hs_family_gpt_neox = {
    .id = HS_FAMILY_GPT_NEOX,
    .model_type = "gpt_neox",
    .title = "GPT-NeoX",
    .parse = parse,
    .write = write,
    .fits = fits,
    .layout = layout,
    .rules = rules,
    .nrules = 1,
    .presets = presets,
    .npresets = 1,
};
