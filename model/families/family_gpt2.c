/* GPT-2 (HF GPT2LMHeadModel, SPEC §3): learned positions, pre-LayerNorm,
 * the fused c_attn Conv1D (weights stored [in, out]), gelu_new MLP, biases,
 * final ln_f, unembedding tied to wte. */
#include <stdio.h>
#include <string.h>

#include "family.h"

static int parse(hs_model_config *c, hs_cfg_reader *r)
{
    int n_inner = 0, rc;
    if ((rc = hs_cfg_int(r, "n_embd", HS_CFG_REQUIRED, 0, &c->d_model)) ||
        (rc = hs_cfg_int(r, "n_layer", HS_CFG_REQUIRED, 0, &c->n_layer)) ||
        (rc = hs_cfg_int(r, "vocab_size", HS_CFG_REQUIRED, 0, &c->vocab_size)) ||
        (rc = hs_cfg_int(r, "n_positions", 0, 1024, &c->n_ctx)) ||
        /* GPT2Config's n_inner=None: 4 n_embd */
        (rc = hs_cfg_int(r, "n_inner", HS_CFG_NULL_DEFAULT, 0, &n_inner)) ||
        (rc = hs_cfg_double(r, "layer_norm_epsilon", 0, 1e-5, &c->norm_eps)) ||
        (rc = hs_cfg_double(r, "initializer_range", HS_CFG_NULL_DEFAULT, 0.02, &c->init_std)) ||
        (rc = hs_cfg_bool(r, "tie_word_embeddings", HS_CFG_NULL_FALSE, 1, &c->tie_embeddings)) ||
        (rc = hs_cfg_layers_ok(r, "n_layer", c->n_layer)) ||
        (rc = hs_cfg_per_layer(r, "n_head", c->n_layer, HS_CFG_REQUIRED, 0, 0, c->n_head)) ||
        (rc = hs_cfg_pruned_heads(r, c)))
        return rc;
    const cJSON *act = hs_cfg_lookup(r, "activation_function");
    if (act && !(cJSON_IsString(act) && (!strcmp(act->valuestring, "gelu_new") ||
                                         !strcmp(act->valuestring, "gelu_pytorch_tanh"))))
        return hs_fail(HS_EFORMAT, "%s: activation_function must be gelu_new (tanh GELU)",
                       r->path);
    memcpy(c->n_kv_head, c->n_head, sizeof c->n_head);
    if (c->n_head[0] < 1 || c->d_model % c->n_head[0])
        return hs_fail(HS_EFORMAT, "%s: n_embd=%d is not divisible by n_head=%d", r->path,
                       c->d_model, c->n_head[0]);
    c->head_dim = c->d_model / c->n_head[0];
    c->pos = HS_POS_LEARNED;
    c->norm = HS_NORM_LAYERNORM;
    c->final_norm = 1;
    c->mlp = HS_MLP_GELU;
    if (!n_inner && __builtin_mul_overflow(c->d_model, 4, &n_inner))
        return hs_fail(HS_EFORMAT, "%s: n_embd=%d is too large (4 n_embd, the default n_inner, "
                                   "overflows)", r->path, c->d_model);
    c->d_ff = n_inner;
    c->attn_bias = c->mlp_bias = c->norm_bias = 1;
    return HS_OK;
}

static void write(cJSON *o, const hs_model_config *c)
{
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "n_positions", c->n_ctx);
    cJSON_AddNumberToObject(o, "n_ctx", c->n_ctx);
    cJSON_AddNumberToObject(o, "n_embd", c->d_model);
    cJSON_AddNumberToObject(o, "n_layer", c->n_layer);
    hs_cfg_add_per_layer(o, "n_head", c, c->n_head);
    if (c->d_ff == 4 * c->d_model)
        cJSON_AddNullToObject(o, "n_inner");
    else
        cJSON_AddNumberToObject(o, "n_inner", c->d_ff);
    cJSON_AddStringToObject(o, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", c->norm_eps);
    cJSON_AddNumberToObject(o, "initializer_range", c->init_std);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings);
    hs_cfg_add_pruned_heads(o, c);
}

static int fits(const hs_model_config *c)
{
    return c->n_kv_head[0] == c->n_head[0] && c->n_head[0] * c->head_dim == c->d_model &&
           c->pos == HS_POS_LEARNED && c->norm == HS_NORM_LAYERNORM && c->mlp == HS_MLP_GELU &&
           !c->gelu_exact && c->attn_bias && c->mlp_bias && c->norm_bias &&
           !c->parallel_residual && !c->window && !c->qkv_bias && hs_family_plain(c);
}

/* q, k and v as one c_attn Conv1D ([d, 3d], the file's columns q | k | v),
 * the other projections as Conv1D ([in, out]). */
static int layout(const hs_model *m, hs_file_tensor *f, int i, int layer, const char *rest)
{
    if (layer < 0)
        return 0;
    const hs_tensor_info *t = &m->tensors[i];
    const int d = m->cfg.d_model;
    if (!strcmp(rest, "attn.q_proj.weight") || !strcmp(rest, "attn.q_proj.bias")) {
        const int is_w = t->ndim == 2;
        snprintf(f->name, sizeof f->name, "h.%d.attn.c_attn.%s", layer, is_w ? "weight" : "bias");
        f->ndim = is_w ? 2 : 1;
        f->shape[0] = is_w ? d : 3 * d;
        f->shape[1] = is_w ? 3 * d : 0;
        f->nparts = 3;
        const char *kv[2] = { is_w ? "h.%d.attn.k_proj.weight" : "h.%d.attn.k_proj.bias",
                              is_w ? "h.%d.attn.v_proj.weight" : "h.%d.attn.v_proj.bias" };
        for (int p = 0; p < 3; p++) {
            f->part[p].tensor = p ? hs_family_find(m, kv[p - 1], layer) : i;
            f->part[p].transpose = is_w;
            f->part[p].col0 = p * d;
        }
        return 0;
    }
    if (strstr(rest, "attn.k_proj") || strstr(rest, "attn.v_proj"))
        return 1; /* inside c_attn */
    static const char *const map[][2] = { { "attn.o_proj", "attn.c_proj" },
                                          { "mlp.fc", "mlp.c_fc" },
                                          { "mlp.proj", "mlp.c_proj" } };
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
        const size_t len = strlen(map[k][0]);
        if (strncmp(rest, map[k][0], len) || rest[len] != '.')
            continue;
        snprintf(f->name, sizeof f->name, "h.%d.%s%s", layer, map[k][1], rest + len);
        if (t->ndim == 2) {
            f->part[0].transpose = 1;
            f->shape[0] = t->shape[1];
            f->shape[1] = t->shape[0];
        }
    }
    return 0;
}

static const hs_key_rule rules[] = {
    { "rope_scaling", HS_ALLOW_NULL, "RoPE scaling" },
    { "rope_parameters", HS_ALLOW_NULL, "RoPE parameters" },
    { "scale_attn_weights", HS_ALLOW_TRUE, "unscaled attention scores" },
    { "scale_attn_by_inverse_layer_idx", HS_ALLOW_FALSE, "scores scaled by 1/(layer + 1)" },
    { "attention_bias", HS_ALLOW_FALSE, "biases on the attention projections" },
    { "mlp_bias", HS_ALLOW_FALSE, "biases on the MLP projections" },
};

static void preset(hs_model_config *c, int *H, int *G)
{
    (void)H, (void)G;
    c->mlp = HS_MLP_GELU;
    c->d_ff = 4 * c->d_model;
    c->attn_bias = c->mlp_bias = 1;
}

static const hs_preset presets[] = { { "gpt2", preset } };

const hs_family_ops hs_family_gpt2 = {
    .id = HS_FAMILY_GPT2,
    .model_type = "gpt2",
    .title = "GPT-2",
    .parse = parse,
    .write = write,
    .fits = fits,
    .layout = layout,
    .alt_prefix = "transformer.",
    .rules = rules,
    .nrules = sizeof rules / sizeof rules[0],
    .presets = presets,
    .npresets = 1,
};
