/* headscope (SPEC §3): our own family for small studies, any mix of layers,
 * widths, heads, positions (learned, rope, none), norms (layernorm or
 * rmsnorm, pre or post), MLPs (none, gelu, swiglu, geglu), biases and a tied
 * unembedding; windows per layer or per head (SPEC §10) and multi-head
 * latent attention (attention "mla"); and every feature of SPEC §14's
 * families, under keys of its own: norm_offset ((1 + w) norms),
 * embed_scale (sqrt(d) embeddings), input_norm false / output_norm true
 * (OLMo-2's and Gemma 2's sublayer norms), qk_norm ("head" | "proj"),
 * attn_scalar, attn_softcap, final_softcap, window_pattern (every P-th
 * layer global), rope_local_theta, and the encoders' encoder,
 * type_vocab_size, embed_norm, mlm_transform, position_offset and
 * *_token_id. Tensors keep our own names. Its
 * presets: attention-only models, the seed's TinyLM, a small MLA model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"

/* attention ("gqa", the default, or "mla") and MLA's keys; q_lora_rank
 * null or 0 is a plain q_proj. hs_config_check applies MLA's rules. */
static int get_mla(hs_cfg_reader *r, hs_model_config *c)
{
    static const char *const kinds[] = { "gqa", "mla" };
    int rc;
    if ((rc = hs_cfg_choice(r, "attention", kinds, 2, 0, &c->mla)) ||
        (rc = hs_cfg_int(r, "kv_lora_rank", 0, 0, &c->kv_lora_rank)) ||
        (rc = hs_cfg_int(r, "q_lora_rank", HS_CFG_NULL_DEFAULT, 0, &c->q_lora_rank)) ||
        (rc = hs_cfg_int(r, "qk_nope_head_dim", 0, 0, &c->qk_nope_head_dim)) ||
        (rc = hs_cfg_int(r, "qk_rope_head_dim", 0, 0, &c->qk_rope_head_dim)) ||
        (rc = hs_cfg_int(r, "v_head_dim", 0, 0, &c->v_head_dim)))
        return rc;
    return HS_OK;
}

/* One window of `window` at key[l] or key[l][h]: *out, or an error naming
 * the position. */
static int window_entry(const hs_cfg_reader *r, const cJSON *e, int l, int h, int *out)
{
    if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < 0 ||
        e->valuedouble > 1e9 || e->valuedouble != floor(e->valuedouble)) {
        if (h < 0)
            return hs_fail(HS_EFORMAT, "%s: \"window\"[%d] must be a non-negative integer "
                                       "(0 = global) or a list of layer %d's heads' windows",
                           r->path, l, l);
        return hs_fail(HS_EFORMAT, "%s: \"window\"[%d][%d] must be a non-negative integer "
                                   "(0 = global)", r->path, l, h);
    }
    *out = (int)e->valuedouble;
    return HS_OK;
}

/* `window` (after n_head): one integer for every head, a list of n_layer
 * (each an integer for the layer's heads, or a list of its n_head windows),
 * 0 = global. Stored through hs_config_set_windows. */
static int get_windows(hs_cfg_reader *r, hs_model_config *c)
{
    const cJSON *v = hs_cfg_lookup(r, "window");
    if (!cJSON_IsArray(v))
        return hs_cfg_int(r, "window", 0, 0, &c->window);
    if (cJSON_GetArraySize(v) != c->n_layer)
        return hs_fail(HS_EFORMAT, "%s: \"window\" has %d entries for %d layers", r->path,
                       cJSON_GetArraySize(v), c->n_layer);
    long total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    int *w = hs_calloc((size_t)total, sizeof *w, "config windows");
    if (!w)
        return HS_ENOMEM;
    int l = 0, off = 0, rc = HS_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        if (cJSON_IsArray(e)) {
            if (cJSON_GetArraySize(e) != c->n_head[l]) {
                rc = hs_fail(HS_EFORMAT, "%s: \"window\"[%d] has %d entries for layer %d's %d "
                                         "heads", r->path, l, cJSON_GetArraySize(e), l,
                             c->n_head[l]);
                break;
            }
            int h = 0;
            const cJSON *x;
            cJSON_ArrayForEach(x, e)
            {
                if ((rc = window_entry(r, x, l, h, &w[off + h])))
                    break;
                h++;
            }
        } else {
            int one = 0;
            rc = window_entry(r, e, l, -1, &one);
            for (int h = 0; !rc && h < c->n_head[l]; h++)
                w[off + h] = one;
        }
        if (rc)
            break;
        off += c->n_head[l++];
    }
    if (!rc && hs_config_set_windows(c, w))
        rc = hs_fail(HS_EFORMAT, "%s: %s", r->path, hs_last_error());
    free(w);
    return rc;
}

static const char *const POS[] = { "learned", "rope", "none" };
static const char *const NORM[] = { "layernorm", "rmsnorm" };
static const char *const WHERE[] = { "pre", "post" };
static const char *const MLP[] = { "none", "gelu", "swiglu", "geglu" };
static const char *const QK_NORM[] = { "none", "head", "proj" };

/* The keys of SPEC §14's features (config.h), each absent meaning off. */
static int get_features(hs_cfg_reader *r, hs_model_config *c)
{
    int rc, input_norm = 1, qk = 0;
    if ((rc = hs_cfg_bool(r, "norm_offset", 0, 0, &c->norm_offset)) ||
        (rc = hs_cfg_bool(r, "embed_scale", 0, 0, &c->embed_scale)) ||
        (rc = hs_cfg_bool(r, "input_norm", 0, 1, &input_norm)) ||
        (rc = hs_cfg_bool(r, "output_norm", 0, 0, &c->out_norm)) ||
        (rc = hs_cfg_choice(r, "qk_norm", QK_NORM, 3, 0, &qk)) ||
        (rc = hs_cfg_double(r, "attn_scalar", 0, 0, &c->attn_scalar)) ||
        (rc = hs_cfg_double(r, "attn_softcap", 0, 0, &c->attn_softcap)) ||
        (rc = hs_cfg_double(r, "final_softcap", 0, 0, &c->final_softcap)) ||
        (rc = hs_cfg_double(r, "rope_local_theta", 0, 0, &c->rope_local_theta)))
        return rc;
    c->no_input_norm = !input_norm;
    c->qk_norm = (hs_qk_norm_kind)qk;
    return HS_OK;
}

/* The encoders' keys (SPEC §14; config.h), each absent meaning off; the
 * token ids null or absent meaning none. */
static int get_encoder(hs_cfg_reader *r, hs_model_config *c)
{
    int rc;
    if ((rc = hs_cfg_bool(r, "encoder", 0, 0, &c->encoder)) ||
        (rc = hs_cfg_int(r, "type_vocab_size", 0, 0, &c->type_vocab)) ||
        (rc = hs_cfg_bool(r, "embed_norm", 0, 0, &c->embed_norm)) ||
        (rc = hs_cfg_bool(r, "mlm_transform", 0, 0, &c->mlm_transform)) ||
        (rc = hs_cfg_int(r, "position_offset", 0, 0, &c->pos_offset)))
        return rc;
    static const char *const ids[] = { "pad_token_id", "cls_token_id", "sep_token_id",
                                       "mask_token_id", "unk_token_id" };
    int *dst[] = { &c->pad_id, &c->cls_id, &c->sep_id, &c->mask_id, &c->unk_id };
    for (int i = 0; i < 5; i++)
        if ((rc = hs_cfg_token_id(r, ids[i], -1, dst[i])))
            return rc;
    return HS_OK;
}

static void add_encoder(cJSON *o, const hs_model_config *c)
{
    if (!c->encoder)
        return;
    cJSON_AddBoolToObject(o, "encoder", 1);
    if (c->type_vocab)
        cJSON_AddNumberToObject(o, "type_vocab_size", c->type_vocab);
    if (c->embed_norm)
        cJSON_AddBoolToObject(o, "embed_norm", 1);
    if (c->mlm_transform)
        cJSON_AddBoolToObject(o, "mlm_transform", 1);
    if (c->pos_offset)
        cJSON_AddNumberToObject(o, "position_offset", c->pos_offset);
    static const char *const ids[] = { "pad_token_id", "cls_token_id", "sep_token_id",
                                       "mask_token_id", "unk_token_id" };
    const int v[] = { c->pad_id, c->cls_id, c->sep_id, c->mask_id, c->unk_id };
    for (int i = 0; i < 5; i++)
        if (v[i] >= 0)
            cJSON_AddNumberToObject(o, ids[i], v[i]);
}

void hs_headscope_add_default(cJSON *o, const char *key)
{
    static const char *const zero[] = { "window",      "window_pattern", "rotary_dims",
                                        "attn_scalar", "attn_softcap",   "final_softcap",
                                        "rope_local_theta", "type_vocab_size",
                                        "position_offset" };
    static const char *const no[] = { "qkv_bias",  "parallel_residual", "gelu_exact",
                                      "norm_offset", "embed_scale",     "output_norm",
                                      "encoder", "embed_norm", "mlm_transform" };
    static const char *const none[] = { "pad_token_id", "cls_token_id", "sep_token_id",
                                        "mask_token_id", "unk_token_id" };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (!strcmp(key, none[i]))
            cJSON_AddNullToObject(o, key);
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
        if (!strcmp(key, zero[i]))
            cJSON_AddNumberToObject(o, key, 0);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (!strcmp(key, no[i]))
            cJSON_AddBoolToObject(o, key, 0);
    if (!strcmp(key, "input_norm"))
        cJSON_AddBoolToObject(o, key, 1);
    if (!strcmp(key, "qk_norm"))
        cJSON_AddStringToObject(o, key, "none");
}

static int parse(hs_model_config *c, hs_cfg_reader *r)
{
    int p = 0, n = 0, w = 0, m = 0, rc;
    const unsigned req = HS_CFG_REQUIRED;
    if ((rc = hs_cfg_int(r, "vocab_size", req, 0, &c->vocab_size)) ||
        (rc = hs_cfg_int(r, "n_layer", req, 0, &c->n_layer)) ||
        (rc = hs_cfg_int(r, "d_model", req, 0, &c->d_model)) ||
        (rc = hs_cfg_int(r, "n_ctx", req, 0, &c->n_ctx)) ||
        (rc = hs_cfg_int(r, "head_dim", 0, 0, &c->head_dim)) ||
        (rc = hs_cfg_int(r, "d_ff", 0, 0, &c->d_ff)) ||
        (rc = hs_cfg_choice(r, "positional", POS, 3, 0, &p)) ||
        (rc = hs_cfg_double(r, "rope_theta", 0, 10000.0, &c->rope_theta)) ||
        (rc = hs_cfg_choice(r, "norm", NORM, 2, 0, &n)) ||
        (rc = hs_cfg_choice(r, "norm_position", WHERE, 2, 0, &w)) ||
        (rc = hs_cfg_double(r, "norm_eps", 0, 1e-5, &c->norm_eps)) ||
        (rc = hs_cfg_double(r, "initializer_range", 0, 0.02, &c->init_std)) ||
        (rc = hs_cfg_bool(r, "final_norm", 0, 1, &c->final_norm)) ||
        (rc = hs_cfg_choice(r, "mlp", MLP, 4, 0, &m)) ||
        (rc = hs_cfg_bool(r, "attn_bias", 0, 0, &c->attn_bias)) ||
        (rc = hs_cfg_bool(r, "mlp_bias", 0, 0, &c->mlp_bias)) ||
        (rc = hs_cfg_bool(r, "norm_bias", 0, 1, &c->norm_bias)) ||
        (rc = hs_cfg_bool(r, "lm_head_bias", 0, 0, &c->lm_head_bias)) ||
        (rc = hs_cfg_bool(r, "tie_word_embeddings", 0, 1, &c->tie_embeddings)) ||
        (rc = hs_cfg_bool(r, "qkv_bias", 0, 0, &c->qkv_bias)) ||
        (rc = hs_cfg_bool(r, "parallel_residual", 0, 0, &c->parallel_residual)) ||
        (rc = hs_cfg_bool(r, "gelu_exact", 0, 0, &c->gelu_exact)) ||
        (rc = hs_cfg_int(r, "rotary_dims", 0, 0, &c->rotary_dims)) ||
        (rc = get_mla(r, c)) || (rc = get_features(r, c)) || (rc = get_encoder(r, c)))
        return rc;
    double theta_in_object;
    if ((rc = hs_cfg_rope_object(r, "rope_scaling", 1.0, &theta_in_object, &c->rope_scaling)))
        return rc;
    if (theta_in_object)
        return hs_fail(HS_EFORMAT, "%s: \"rope_scaling\": give rope_theta at the top level",
                       r->path);
    if ((rc = hs_cfg_layers_ok(r, "n_layer", c->n_layer)) ||
        (rc = hs_cfg_per_layer(r, "n_head", c->n_layer, req, 0, 0, c->n_head)) ||
        (rc = hs_cfg_per_layer(r, "n_kv_head", c->n_layer, 0, 0, 1, c->n_kv_head)))
        return rc;
    for (int l = 0; l < c->n_layer; l++)
        if (!c->n_kv_head[l])
            c->n_kv_head[l] = c->n_head[l];
    if ((rc = hs_cfg_check_groups(r, c, "n_head", "n_kv_head")) || (rc = get_windows(r, c)) ||
        (rc = hs_cfg_int(r, "window_pattern", 0, 0, &c->window_pattern)))
        return rc;
    if (!c->head_dim && c->mla) {
        c->head_dim = c->v_head_dim; /* z, gates and o_proj see v_head_dim-wide heads */
    } else if (!c->head_dim) {
        if (c->d_model % c->n_head[0])
            return hs_fail(HS_EFORMAT, "%s: d_model=%d is not divisible by n_head=%d", r->path,
                           c->d_model, c->n_head[0]);
        c->head_dim = c->d_model / c->n_head[0];
    }
    c->pos = (hs_pos_kind)p;
    c->norm = (hs_norm_kind)n;
    c->post_norm = w;
    c->mlp = (hs_mlp_kind)m;
    return HS_OK;
}

/* `window` in its shortest form: nothing when every head is global, one
 * integer when all share a window, a list per layer when each layer's heads
 * agree, else a list of lists per head. */
static void add_windows(cJSON *o, const hs_model_config *c)
{
    if (!c->n_head_windows) {
        if (c->window)
            cJSON_AddNumberToObject(o, "window", c->window);
        return;
    }
    int per_layer = 1;
    for (int l = 0; l < c->n_layer; l++)
        per_layer &= hs_config_layer_window(c, l) >= 0;
    cJSON *a = cJSON_AddArrayToObject(o, "window");
    for (int l = 0; a && l < c->n_layer; l++) {
        if (per_layer) {
            cJSON_AddItemToArray(a, cJSON_CreateNumber(hs_config_layer_window(c, l)));
            continue;
        }
        cJSON *heads = cJSON_CreateArray();
        for (int h = 0; h < c->n_head[l]; h++)
            cJSON_AddItemToArray(heads, cJSON_CreateNumber(hs_config_head_window(c, l, h)));
        cJSON_AddItemToArray(a, heads);
    }
}

static void write(cJSON *o, const hs_model_config *c)
{
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(o, "d_model", c->d_model);
    hs_cfg_add_per_layer(o, "n_head", c, c->n_head);
    hs_cfg_add_per_layer(o, "n_kv_head", c, c->n_kv_head);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(o, "n_ctx", c->n_ctx);
    cJSON_AddStringToObject(o, "positional", POS[c->pos]);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    cJSON_AddStringToObject(o, "norm", NORM[c->norm]);
    cJSON_AddStringToObject(o, "norm_position", WHERE[c->post_norm]);
    cJSON_AddNumberToObject(o, "norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(o, "initializer_range", c->init_std);
    cJSON_AddBoolToObject(o, "final_norm", c->final_norm);
    cJSON_AddStringToObject(o, "mlp", MLP[c->mlp]);
    cJSON_AddNumberToObject(o, "d_ff", c->d_ff);
    cJSON_AddBoolToObject(o, "attn_bias", c->attn_bias);
    cJSON_AddBoolToObject(o, "mlp_bias", c->mlp_bias);
    cJSON_AddBoolToObject(o, "norm_bias", c->norm_bias);
    cJSON_AddBoolToObject(o, "lm_head_bias", c->lm_head_bias);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings);
    /* the keys of other families' features, only where used, so that
     * configurations without them read as before */
    if (c->qkv_bias)
        cJSON_AddBoolToObject(o, "qkv_bias", 1);
    if (c->parallel_residual)
        cJSON_AddBoolToObject(o, "parallel_residual", 1);
    if (c->gelu_exact)
        cJSON_AddBoolToObject(o, "gelu_exact", 1);
    if (c->rotary_dims)
        cJSON_AddNumberToObject(o, "rotary_dims", c->rotary_dims);
    add_windows(o, c);
    hs_cfg_add_rope_scaling(o, &c->rope_scaling);
    if (c->window_pattern)
        cJSON_AddNumberToObject(o, "window_pattern", c->window_pattern);
    if (c->norm_offset)
        cJSON_AddBoolToObject(o, "norm_offset", 1);
    if (c->embed_scale)
        cJSON_AddBoolToObject(o, "embed_scale", 1);
    if (c->no_input_norm)
        cJSON_AddBoolToObject(o, "input_norm", 0);
    if (c->out_norm)
        cJSON_AddBoolToObject(o, "output_norm", 1);
    if (c->qk_norm)
        cJSON_AddStringToObject(o, "qk_norm", QK_NORM[c->qk_norm]);
    if (c->attn_scalar > 0)
        cJSON_AddNumberToObject(o, "attn_scalar", c->attn_scalar);
    if (c->attn_softcap > 0)
        cJSON_AddNumberToObject(o, "attn_softcap", c->attn_softcap);
    if (c->final_softcap > 0)
        cJSON_AddNumberToObject(o, "final_softcap", c->final_softcap);
    if (c->rope_local_theta > 0)
        cJSON_AddNumberToObject(o, "rope_local_theta", c->rope_local_theta);
    add_encoder(o, c);
    if (c->mla) {
        /* head_dim is v_head_dim and n_kv_head n_head: not keys of their own */
        cJSON_DeleteItemFromObjectCaseSensitive(o, "head_dim");
        cJSON_DeleteItemFromObjectCaseSensitive(o, "n_kv_head");
        cJSON_AddStringToObject(o, "attention", "mla");
        cJSON_AddNumberToObject(o, "kv_lora_rank", c->kv_lora_rank);
        cJSON_AddNumberToObject(o, "q_lora_rank", c->q_lora_rank);
        cJSON_AddNumberToObject(o, "qk_nope_head_dim", c->qk_nope_head_dim);
        cJSON_AddNumberToObject(o, "qk_rope_head_dim", c->qk_rope_head_dim);
        cJSON_AddNumberToObject(o, "v_head_dim", c->v_head_dim);
    }
}

static int fits(const hs_model_config *c)
{
    (void)c;
    return 1; /* our own layout expresses every architecture */
}

/* DeepSeek-V2-Lite's shape, small: multi-head latent attention with a plain
 * q_proj, RMSNorm, SwiGLU */
static void mla(hs_model_config *c, int *H, int *G)
{
    (void)H, (void)G;
    hs_preset_rmsnorm_swiglu(c);
    c->norm_eps = 1e-6;
    c->mla = 1;
    c->kv_lora_rank = 32;
    c->qk_nope_head_dim = 16;
    c->qk_rope_head_dim = 8;
    c->v_head_dim = 16;
}

/* Olsson et al.: attention layers only */
static void attn_only(hs_model_config *c, int *H, int *G)
{
    (void)H, (void)G;
    c->mlp = HS_MLP_NONE;
}

/* The seed's TinyLM: head(norm(x + attn(x))), one post-norm layer. */
static void tinylm(hs_model_config *c, int *H, int *G)
{
    c->vocab_size = 5;
    c->n_layer = 1;
    c->d_model = 16;
    c->n_ctx = 8;
    *H = *G = 1;
    c->post_norm = 1;
    c->final_norm = 0;
    c->mlp = HS_MLP_NONE;
    c->lm_head_bias = 1;
    c->tie_embeddings = 0;
}

static const hs_preset presets[] = { { "mla", mla }, { "attn-only", attn_only },
                                     { "tinylm", tinylm } };

const hs_family_ops hs_family_headscope = {
    .id = HS_FAMILY_HEADSCOPE,
    .model_type = "headscope",
    .title = "headscope",
    .parse = parse,
    .write = write,
    .fits = fits,
    .presets = presets,
    .npresets = 3,
};
