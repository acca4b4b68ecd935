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

#include "json.h"

static const char *const FAMILY_NAMES[HS_FAMILY_COUNT] = { "headscope", "gpt2",    "llama",
                                                            "gpt_neox",  "mistral", "qwen2" };

const char *hs_family_name(hs_family f)
{
    return f >= 0 && f < HS_FAMILY_COUNT ? FAMILY_NAMES[f] : "headscope";
}

/* llama, mistral and qwen2 share LlamaForCausalLM's layout and names. */
static int llama_like(hs_family f)
{
    return f == HS_FAMILY_LLAMA || f == HS_FAMILY_MISTRAL || f == HS_FAMILY_QWEN2;
}

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

int hs_config_head_window(const hs_model_config *c, int l, int h)
{
    if (!c->n_head_windows || !windows_fit(c))
        return c->window;
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
    return (hs_attn_config){ .d_model = c->d_model,
                             .n_heads = c->n_head[l],
                             .n_kv_heads = c->n_kv_head[l],
                             .bias = c->attn_bias,
                             .qkv_bias = c->qkv_bias,
                             .head_dim = c->head_dim,
                             .rope_theta = rope ? c->rope_theta : 0,
                             .window = c->window,
                             .rotary_dims = rope ? c->rotary_dims : 0,
                             .rope_scaling = rope ? c->rope_scaling : (hs_rope_scaling){ 0 },
                             .head_window = head_window };
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
             (c->pos != HS_POS_LEARNED || mul_add(&total, (size_t)c->n_ctx, d)) &&
             mul_add(&total, d, 2 * (size_t)c->final_norm);
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
            ok = mul_add(&total, 2 * HD + 2 * GD, d + 1);
        ok = ok && mul_add(&total, d, 5) &&
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
    if ((rc = mla_check(c)))
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
    if (c->n_head_windows && c->family != HS_FAMILY_HEADSCOPE)
        return hs_fail(HS_EINVAL, "config: window: per-layer or per-head windows are a "
                                  "headscope-family feature (use a headscope preset)");
    if (c->parallel_residual && (c->post_norm || c->mlp == HS_MLP_NONE))
        return hs_fail(HS_EINVAL, "config: a parallel residual needs pre-norm layers with an MLP");
    if (c->gelu_exact && c->mlp != HS_MLP_GELU)
        return hs_fail(HS_EINVAL, "config: gelu_exact needs the gelu MLP");
    for (int l = 0; l < c->n_layer; l++) {
        hs_attn_config a = hs_config_attn(c, l);
        if (hs_attn_config_check(&a))
            return hs_fail(HS_EINVAL, "config: layer %d: %s", l, hs_last_error());
    }
    /* gpt2 and llama checkpoints are written in their Hugging Face layout,
     * which can express only that family's architecture. */
    int uniform = !c->post_norm && c->final_norm && !c->lm_head_bias;
    for (int l = 1; l < c->n_layer; l++)
        uniform &= c->n_head[l] == c->n_head[0] && c->n_kv_head[l] == c->n_kv_head[0];
    const hs_family f = c->family;
    const int mha = c->n_kv_head[0] == c->n_head[0] && c->n_head[0] * c->head_dim == c->d_model;
    const int full_rotary = !c->rotary_dims || c->rotary_dims == c->head_dim;
    int fits = 1;
    if (f == HS_FAMILY_GPT2)
        fits = mha && c->pos == HS_POS_LEARNED && c->norm == HS_NORM_LAYERNORM &&
               c->mlp == HS_MLP_GELU && !c->gelu_exact && c->attn_bias && c->mlp_bias &&
               c->norm_bias && !c->parallel_residual && !c->window && !c->qkv_bias;
    else if (f == HS_FAMILY_GPT_NEOX)
        fits = mha && c->pos == HS_POS_ROPE && c->norm == HS_NORM_LAYERNORM &&
               c->mlp == HS_MLP_GELU && c->mlp_bias && c->norm_bias && !c->window &&
               !c->qkv_bias;
    else if (llama_like(f))
        fits = c->pos == HS_POS_ROPE && c->norm == HS_NORM_RMSNORM && c->mlp == HS_MLP_SWIGLU &&
               !c->parallel_residual && full_rotary &&
               (f == HS_FAMILY_MISTRAL || !c->window) &&
               (f == HS_FAMILY_LLAMA ? !c->qkv_bias
                                     : !c->attn_bias && !c->mlp_bias &&
                                           c->qkv_bias == (f == HS_FAMILY_QWEN2));
    if (f != HS_FAMILY_HEADSCOPE && !(uniform && fits))
        return hs_fail(HS_EINVAL, "config: this architecture is not %s's (use a headscope "
                                  "preset for other variants)",
                       f == HS_FAMILY_GPT2       ? "GPT-2"
                       : f == HS_FAMILY_LLAMA    ? "Llama"
                       : f == HS_FAMILY_GPT_NEOX ? "GPT-NeoX"
                       : f == HS_FAMILY_MISTRAL  ? "Mistral"
                                                 : "Qwen2");
    return HS_OK;
}

/* ---- reading ------------------------------------------------------------ */

typedef struct {
    const cJSON *root;
    const char *path;
    const char *seen[64]; /* keys the family's parser read (implemented) */
    int nseen;
} reader;

/* The value of key (NULL when absent), remembered as read: a key the parser
 * reads is implemented, and check_other_keys leaves it alone. */
static const cJSON *lookup(reader *r, const char *key)
{
    if (r->nseen < (int)(sizeof r->seen / sizeof r->seen[0]))
        r->seen[r->nseen++] = key;
    return cJSON_GetObjectItemCaseSensitive(r->root, key);
}

static int was_read(const reader *r, const char *key)
{
    for (int i = 0; i < r->nseen; i++)
        if (!strcmp(r->seen[i], key))
            return 1;
    return 0;
}

/* Integer field: required when dflt < 0 is passed as `required`. */
static int get_int(reader *r, const char *key, int required, int dflt, int *out)
{
    const cJSON *v = lookup(r, key);
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return hs_fail(HS_EFORMAT, "%s: missing \"%s\"", r->path, key);
        *out = dflt;
        return HS_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e9)
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a non-negative integer", r->path, key);
    *out = (int)v->valuedouble;
    return HS_OK;
}

static int get_double(reader *r, const char *key, double dflt, double *out)
{
    const cJSON *v = lookup(r, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return HS_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a finite number", r->path, key);
    *out = v->valuedouble;
    return HS_OK;
}

static int get_bool(reader *r, const char *key, int dflt, int *out)
{
    const cJSON *v = lookup(r, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return HS_OK;
    }
    if (!cJSON_IsBool(v))
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be true or false", r->path, key);
    *out = cJSON_IsTrue(v);
    return HS_OK;
}

/* String field matched against `names`; *out is the index. */
static int get_choice(reader *r, const char *key, const char *const *names, int n, int dflt,
                      int *out)
{
    const cJSON *v = lookup(r, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return HS_OK;
    }
    if (cJSON_IsString(v))
        for (int i = 0; i < n; i++)
            if (!strcmp(v->valuestring, names[i])) {
                *out = i;
                return HS_OK;
            }
    char allowed[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(allowed + strlen(allowed), sizeof allowed - strlen(allowed), "%s%s",
                 i ? ", " : "", names[i]);
    return hs_fail(HS_EFORMAT, "%s: \"%s\" must be one of %s", r->path, key, allowed);
}

/* n_head / n_kv_head: one integer for every layer or a list of n_layer, each
 * positive; a single 0 only where zero_ok (headscope's n_kv_head: "as many
 * as n_head"). */
static int get_per_layer(reader *r, const char *key, int n_layer, int required, int dflt,
                         int zero_ok, int *out)
{
    const cJSON *v = lookup(r, key);
    if (cJSON_IsArray(v)) {
        if (cJSON_GetArraySize(v) != n_layer)
            return hs_fail(HS_EFORMAT, "%s: \"%s\" has %d entries for %d layers", r->path, key,
                           cJSON_GetArraySize(v), n_layer);
        int l = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v)
        {
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < 1 ||
                e->valuedouble > HS_MAX_HEADS || e->valuedouble != floor(e->valuedouble))
                return hs_fail(HS_EFORMAT, "%s: \"%s\"[%d] must be an integer in 1..%d", r->path,
                               key, l, HS_MAX_HEADS);
            out[l++] = (int)e->valuedouble;
        }
        return HS_OK;
    }
    int one;
    int rc = get_int(r, key, required, dflt, &one);
    if (!rc && one < 1 && !(zero_ok && one == 0))
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a positive integer (got %d)", r->path, key,
                       one);
    if (!rc && one > HS_MAX_HEADS)
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be at most %d (got %d)", r->path, key,
                       HS_MAX_HEADS, one);
    for (int l = 0; !rc && l < n_layer; l++)
        out[l] = one;
    return rc;
}

/* Query heads share key/value heads in equal groups: H_l % G_l == 0, named
 * with the family's keys. */
static int check_groups(const reader *r, const hs_model_config *c, const char *hkey,
                        const char *gkey)
{
    for (int l = 0; l < c->n_layer; l++)
        if (c->n_head[l] % c->n_kv_head[l])
            return hs_fail(HS_EFORMAT, "%s: %s=%d is not divisible by %s=%d (layer %d)", r->path,
                           hkey, c->n_head[l], gkey, c->n_kv_head[l], l);
    return HS_OK;
}

static int parse_gpt2(hs_model_config *c, reader *r)
{
    int n_inner = 0, rc;
    if ((rc = get_int(r, "n_embd", 1, 0, &c->d_model)) ||
        (rc = get_int(r, "n_layer", 1, 0, &c->n_layer)) ||
        (rc = get_int(r, "vocab_size", 1, 0, &c->vocab_size)) ||
        (rc = get_int(r, "n_positions", 0, 1024, &c->n_ctx)) ||
        (rc = get_int(r, "n_inner", 0, 0, &n_inner)) ||
        (rc = get_double(r, "layer_norm_epsilon", 1e-5, &c->norm_eps)) ||
        (rc = get_double(r, "initializer_range", 0.02, &c->init_std)) ||
        (rc = get_bool(r, "tie_word_embeddings", 1, &c->tie_embeddings)))
        return rc;
    if (c->n_layer < 1 || c->n_layer > HS_MAX_LAYERS)
        return hs_fail(HS_EFORMAT, "%s: n_layer=%d outside 1..%d", r->path, c->n_layer,
                       HS_MAX_LAYERS);
    if ((rc = get_per_layer(r, "n_head", c->n_layer, 1, 0, 0, c->n_head)))
        return rc;
    const cJSON *act = lookup(r, "activation_function");
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

/* A number inside a rope_scaling object: *out, or an error naming both. */
static int rope_number(const reader *r, const char *obj, const cJSON *o, const char *key,
                       double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
        return hs_fail(HS_EFORMAT, "%s: \"%s\": \"%s\" must be a positive number", r->path, obj,
                       key);
    *out = v->valuedouble;
    return HS_OK;
}

/* rope_scaling / rope_parameters: null, plain RoPE spelled as an object
 * ({"rope_type": "default", "rope_theta": 10000.0}, as newer transformers
 * write it), or the scalings we implement: "linear" (factor) and "llama3"
 * (factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings), under "rope_type" or the older "type".
 * Any other type or key changes every angle and is refused, naming it.
 * *theta is the object's rope_theta, 0 when it has none; *s the scaling
 * (kind HS_ROPE_DEFAULT for none); partial is the rotary fraction the
 * family implies (a "partial_rotary_factor" inside must equal it). */
static int get_rope_object(reader *r, const char *key, double partial, double *theta,
                           hs_rope_scaling *s)
{
    *theta = 0;
    memset(s, 0, sizeof *s);
    const cJSON *v = lookup(r, key), *e;
    if (!v || cJSON_IsNull(v))
        return HS_OK;
    if (!cJSON_IsObject(v))
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be null or an object", r->path, key);
    const char *type = "default";
    cJSON_ArrayForEach(e, v)
    {
        if ((!strcmp(e->string, "rope_type") || !strcmp(e->string, "type")) && cJSON_IsString(e))
            type = e->valuestring;
    }
    if (!strcmp(type, "linear"))
        s->kind = HS_ROPE_LINEAR;
    else if (!strcmp(type, "llama3"))
        s->kind = HS_ROPE_LLAMA3;
    else if (strcmp(type, "default"))
        return hs_fail(HS_EFORMAT,
                       "%s: \"%s\": rope_type \"%s\" is not implemented (RoPE scaling changes the "
                       "computation; default, linear and llama3 are)",
                       r->path, key, type);
    static const char *const llama3[] = { "factor", "low_freq_factor", "high_freq_factor",
                                          "original_max_position_embeddings" };
    const int n_needed = s->kind == HS_ROPE_LLAMA3 ? 4 : s->kind == HS_ROPE_LINEAR ? 1 : 0;
    double *dst[4] = { &s->factor, &s->low_freq_factor, &s->high_freq_factor,
                       &s->original_max_position_embeddings };
    for (int i = 0; i < n_needed; i++) {
        int rc = rope_number(r, key, v, llama3[i], dst[i]);
        if (rc)
            return rc;
    }
    if (s->kind == HS_ROPE_LLAMA3 && !(s->high_freq_factor > s->low_freq_factor))
        return hs_fail(HS_EFORMAT, "%s: \"%s\": high_freq_factor must exceed low_freq_factor",
                       r->path, key);
    cJSON_ArrayForEach(e, v)
    {
        const char *k = e->string;
        int known = !strcmp(k, "rope_type") || !strcmp(k, "type");
        for (int i = 0; i < n_needed; i++)
            known |= !strcmp(k, llama3[i]);
        if (known)
            continue;
        if (!strcmp(k, "rope_theta") && cJSON_IsNumber(e) && e->valuedouble > 0 &&
            isfinite(e->valuedouble)) {
            *theta = e->valuedouble;
            continue;
        }
        if (!strcmp(k, "partial_rotary_factor") && cJSON_IsNumber(e) &&
            e->valuedouble == partial)
            continue;
        return hs_fail(HS_EFORMAT,
                       "%s: \"%s\": \"%s\" is not implemented with rope_type \"%s\" (RoPE "
                       "scaling changes the computation)",
                       r->path, key, k, type);
    }
    return HS_OK;
}

/* RoPE of the HF families: the base (the top-level key theta_key, or the
 * rope_theta inside rope_parameters or rope_scaling; where two are given
 * they must agree) and the scaling of either object (not both). */
static int get_rope(reader *r, const char *theta_key, double dflt, double partial,
                    hs_model_config *c)
{
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(r->root, theta_key);
    const int given = top && !cJSON_IsNull(top);
    int rc = get_double(r, theta_key, dflt, &c->rope_theta);
    static const char *const objs[] = { "rope_parameters", "rope_scaling" };
    int from_obj = 0, scaled = 0;
    for (int i = 0; !rc && i < 2; i++) {
        double t;
        hs_rope_scaling s;
        if ((rc = get_rope_object(r, objs[i], partial, &t, &s)))
            break;
        if (s.kind != HS_ROPE_DEFAULT) {
            if (scaled && memcmp(&s, &c->rope_scaling, sizeof s))
                return hs_fail(HS_EFORMAT, "%s: rope_parameters and rope_scaling disagree",
                               r->path);
            c->rope_scaling = s;
            scaled = 1;
        }
        if (!t)
            continue;
        if ((given || from_obj) && t != c->rope_theta)
            return hs_fail(HS_EFORMAT, "%s: %s.rope_theta=%g disagrees with %s=%g", r->path,
                           objs[i], t, theta_key, c->rope_theta);
        c->rope_theta = t;
        from_obj = 1;
    }
    if (!rc && c->rope_theta <= 0)
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be positive", r->path, theta_key);
    return rc;
}

/* hidden_act: "silu" for the llama family; GPT-NeoX's "gelu" (exact erf)
 * or the tanh approximations. */
static int get_act(reader *r, hs_model_config *c)
{
    const cJSON *act = lookup(r, "hidden_act");
    const char *name = cJSON_IsString(act) ? act->valuestring : NULL;
    if (c->family != HS_FAMILY_GPT_NEOX) {
        if (act && !(name && !strcmp(name, "silu")))
            return hs_fail(HS_EFORMAT, "%s: hidden_act must be silu", r->path);
        return HS_OK;
    }
    c->gelu_exact = !act || (name && !strcmp(name, "gelu"));
    if (!c->gelu_exact &&
        !(name && (!strcmp(name, "gelu_new") || !strcmp(name, "gelu_pytorch_tanh"))))
        return hs_fail(HS_EFORMAT, "%s: hidden_act must be gelu (exact), gelu_new or "
                                   "gelu_pytorch_tanh",
                       r->path);
    return HS_OK;
}

/* Sizes every Hugging Face family after GPT-2 spells the same way. */
static int get_hf_sizes(reader *r, hs_model_config *c)
{
    int rc;
    if ((rc = get_int(r, "hidden_size", 1, 0, &c->d_model)) ||
        (rc = get_int(r, "num_hidden_layers", 1, 0, &c->n_layer)) ||
        (rc = get_int(r, "vocab_size", 1, 0, &c->vocab_size)) ||
        (rc = get_int(r, "intermediate_size", 1, 0, &c->d_ff)) ||
        (rc = get_int(r, "max_position_embeddings", 0, 2048, &c->n_ctx)) ||
        (rc = get_double(r, "initializer_range", 0.02, &c->init_std)) ||
        (rc = get_act(r, c)))
        return rc;
    if (c->n_layer < 1 || c->n_layer > HS_MAX_LAYERS)
        return hs_fail(HS_EFORMAT, "%s: num_hidden_layers=%d outside 1..%d", r->path, c->n_layer,
                       HS_MAX_LAYERS);
    return HS_OK;
}

/* GPTNeoXForCausalLM: LayerNorm with biases, fused query_key_value, rotary
 * on the first int(dh * rotary_pct) dims, parallel or sequential residual,
 * GELU MLP, untied embed_out by default. Newer transformers also write the
 * base and fraction as rope_theta and partial_rotary_factor; they must
 * agree. */
static int parse_gpt_neox(hs_model_config *c, reader *r)
{
    double pct = 0.25, prf = 0;
    int rc;
    if ((rc = get_hf_sizes(r, c)) ||
        (rc = get_double(r, "layer_norm_eps", 1e-5, &c->norm_eps)) ||
        (rc = get_bool(r, "tie_word_embeddings", 0, &c->tie_embeddings)) ||
        (rc = get_bool(r, "attention_bias", 1, &c->attn_bias)) ||
        (rc = get_bool(r, "use_parallel_residual", 1, &c->parallel_residual)) ||
        (rc = get_double(r, "rotary_pct", 0.25, &pct)) ||
        (rc = get_double(r, "partial_rotary_factor", 0, &prf)) ||
        (rc = get_per_layer(r, "num_attention_heads", c->n_layer, 1, 0, 0, c->n_head)))
        return rc;
    if (prf && prf != pct)
        return hs_fail(HS_EFORMAT, "%s: partial_rotary_factor=%g disagrees with rotary_pct=%g",
                       r->path, prf, pct);
    if (!(pct > 0 && pct <= 1))
        return hs_fail(HS_EFORMAT, "%s: rotary_pct=%g must be in (0, 1]", r->path, pct);
    double base;
    if ((rc = get_double(r, "rotary_emb_base", 10000.0, &base)) ||
        (rc = get_rope(r, "rope_theta", base, pct, c)))
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

/* sliding_window of mistral (W, or null: global) and the qwen2 keys:
 * use_sliding_window must be false (Qwen2's sliding layers above
 * max_window_layers are not implemented), and then sliding_window and
 * max_window_layers do not act. */
static int get_window(reader *r, hs_model_config *c)
{
    int w = 0, use = 0, rc;
    if (c->family == HS_FAMILY_MISTRAL) {
        if ((rc = get_int(r, "sliding_window", 0, 0, &w)))
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
    if ((rc = get_bool(r, "use_sliding_window", 0, &use)) ||
        (rc = get_int(r, "sliding_window", 0, 0, &w)) ||
        (rc = get_int(r, "max_window_layers", 0, 0, &w)))
        return rc;
    if (use)
        return hs_fail(HS_EFORMAT,
                       "%s: \"use_sliding_window\": true: Qwen2's sliding-window layers "
                       "(max_window_layers) are not implemented (only false is accepted)",
                       r->path);
    return HS_OK;
}

/* LlamaForCausalLM and its two relatives: MistralForCausalLM (llama plus
 * sliding_window, no biases) and Qwen2ForCausalLM (llama plus q/k/v
 * biases). */
static int parse_llama(hs_model_config *c, reader *r)
{
    int rc;
    const int llama = c->family == HS_FAMILY_LLAMA;
    if ((rc = get_hf_sizes(r, c)) ||
        (rc = get_double(r, "rms_norm_eps", 1e-6, &c->norm_eps)) ||
        (rc = get_bool(r, "tie_word_embeddings", 0, &c->tie_embeddings)) ||
        (llama && (rc = get_bool(r, "attention_bias", 0, &c->attn_bias))) ||
        (llama && (rc = get_bool(r, "mlp_bias", 0, &c->mlp_bias))) ||
        (rc = get_window(r, c)))
        return rc;
    c->qkv_bias = c->family == HS_FAMILY_QWEN2;
    if ((rc = get_per_layer(r, "num_attention_heads", c->n_layer, 1, 0, 0, c->n_head)) ||
        (rc = get_per_layer(r, "num_key_value_heads", c->n_layer, 0, c->n_head[0], 0,
                            c->n_kv_head)) ||
        (rc = check_groups(r, c, "num_attention_heads", "num_key_value_heads")))
        return rc;
    if ((rc = get_rope(r, "rope_theta", 10000.0, 1.0, c)))
        return rc;
    int dh = 0;
    if ((rc = get_int(r, "head_dim", 0, 0, &dh)))
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

/* attention ("gqa", the default, or "mla") and MLA's keys; q_lora_rank
 * null or 0 is a plain q_proj. hs_config_check applies MLA's rules. */
static int get_mla(reader *r, hs_model_config *c)
{
    static const char *const kinds[] = { "gqa", "mla" };
    int rc;
    if ((rc = get_choice(r, "attention", kinds, 2, 0, &c->mla)) ||
        (rc = get_int(r, "kv_lora_rank", 0, 0, &c->kv_lora_rank)) ||
        (rc = get_int(r, "q_lora_rank", 0, 0, &c->q_lora_rank)) ||
        (rc = get_int(r, "qk_nope_head_dim", 0, 0, &c->qk_nope_head_dim)) ||
        (rc = get_int(r, "qk_rope_head_dim", 0, 0, &c->qk_rope_head_dim)) ||
        (rc = get_int(r, "v_head_dim", 0, 0, &c->v_head_dim)))
        return rc;
    return HS_OK;
}

/* One window of headscope's `window` at key[l] or key[l][h]: *out, or an
 * error naming the position. */
static int window_entry(const reader *r, const cJSON *e, int l, int h, int *out)
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

/* headscope's `window` (after n_head): one integer for every head, a list
 * of n_layer (each an integer for the layer's heads, or a list of its
 * n_head windows), 0 = global. Stored through hs_config_set_windows. */
static int get_windows(reader *r, hs_model_config *c)
{
    const cJSON *v = lookup(r, "window");
    if (!cJSON_IsArray(v))
        return get_int(r, "window", 0, 0, &c->window);
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

static int parse_headscope(hs_model_config *c, reader *r)
{
    static const char *const pos[] = { "learned", "rope", "none" };
    static const char *const norm[] = { "layernorm", "rmsnorm" };
    static const char *const where[] = { "pre", "post" };
    static const char *const mlp[] = { "none", "gelu", "swiglu" };
    int p = 0, n = 0, w = 0, m = 0, rc;
    if ((rc = get_int(r, "vocab_size", 1, 0, &c->vocab_size)) ||
        (rc = get_int(r, "n_layer", 1, 0, &c->n_layer)) ||
        (rc = get_int(r, "d_model", 1, 0, &c->d_model)) ||
        (rc = get_int(r, "n_ctx", 1, 0, &c->n_ctx)) ||
        (rc = get_int(r, "head_dim", 0, 0, &c->head_dim)) ||
        (rc = get_int(r, "d_ff", 0, 0, &c->d_ff)) ||
        (rc = get_choice(r, "positional", pos, 3, 0, &p)) ||
        (rc = get_double(r, "rope_theta", 10000.0, &c->rope_theta)) ||
        (rc = get_choice(r, "norm", norm, 2, 0, &n)) ||
        (rc = get_choice(r, "norm_position", where, 2, 0, &w)) ||
        (rc = get_double(r, "norm_eps", 1e-5, &c->norm_eps)) ||
        (rc = get_double(r, "initializer_range", 0.02, &c->init_std)) ||
        (rc = get_bool(r, "final_norm", 1, &c->final_norm)) ||
        (rc = get_choice(r, "mlp", mlp, 3, 0, &m)) ||
        (rc = get_bool(r, "attn_bias", 0, &c->attn_bias)) ||
        (rc = get_bool(r, "mlp_bias", 0, &c->mlp_bias)) ||
        (rc = get_bool(r, "norm_bias", 1, &c->norm_bias)) ||
        (rc = get_bool(r, "lm_head_bias", 0, &c->lm_head_bias)) ||
        (rc = get_bool(r, "tie_word_embeddings", 1, &c->tie_embeddings)) ||
        (rc = get_bool(r, "qkv_bias", 0, &c->qkv_bias)) ||
        (rc = get_bool(r, "parallel_residual", 0, &c->parallel_residual)) ||
        (rc = get_bool(r, "gelu_exact", 0, &c->gelu_exact)) ||
        (rc = get_int(r, "rotary_dims", 0, 0, &c->rotary_dims)))
        return rc;
    if ((rc = get_mla(r, c)))
        return rc;
    double theta_in_object;
    if ((rc = get_rope_object(r, "rope_scaling", 1.0, &theta_in_object, &c->rope_scaling)))
        return rc;
    if (theta_in_object)
        return hs_fail(HS_EFORMAT, "%s: \"rope_scaling\": give rope_theta at the top level",
                       r->path);
    if (c->n_layer < 1 || c->n_layer > HS_MAX_LAYERS)
        return hs_fail(HS_EFORMAT, "%s: n_layer=%d outside 1..%d", r->path, c->n_layer,
                       HS_MAX_LAYERS);
    if ((rc = get_per_layer(r, "n_head", c->n_layer, 1, 0, 0, c->n_head)) ||
        (rc = get_per_layer(r, "n_kv_head", c->n_layer, 0, 0, 1, c->n_kv_head)))
        return rc;
    for (int l = 0; l < c->n_layer; l++)
        if (!c->n_kv_head[l])
            c->n_kv_head[l] = c->n_head[l];
    if ((rc = check_groups(r, c, "n_head", "n_kv_head")) || (rc = get_windows(r, c)))
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

/* ---- keys the parsers do not read ---------------------------------------
 *
 * A key that changes the computation and that we do not implement is an
 * error, never ignored (SPEC §10). Hugging Face configs carry many keys that
 * do not (token ids, torch_dtype, use_cache, generation defaults, label
 * maps, ...), and new ones with each transformers release, so for gpt2 and
 * llama a key the parser does not read is accepted unless the table below
 * names it as computation-changing with a value other than the one we
 * implement. headscope is our own format: a key it does not read is refused
 * unless it is bookkeeping. */

typedef enum {
    ALLOW_NULL,  /* null (or absent) only */
    ALLOW_FALSE, /* false only */
    ALLOW_TRUE,  /* true only */
    ALLOW_ONE,   /* the number 1 only */
    ALLOW_EMPTY, /* null, {} or [] */
    ALLOW_FULL,  /* a list of "full_attention" */
} allowed;

typedef struct {
    const char *key;
    unsigned families; /* 1 << hs_family */
    allowed ok;
    const char *what;  /* what a different value asks for */
} key_rule;

/* Every Hugging Face family; a key the family's parser reads (mistral's
 * sliding_window, the llama family's rope_scaling) never reaches this table. */
#define HF ((1u << HS_FAMILY_COUNT) - 1 - (1u << HS_FAMILY_HEADSCOPE))
#define GPT2 (1u << HS_FAMILY_GPT2)
#define NOT_LLAMA (HF - (1u << HS_FAMILY_LLAMA))
#define SLIDING_ELSEWHERE "sliding-window attention outside the mistral family (model_type \"mistral\")"
static const key_rule rules[] = {
    { "sliding_window", HF, ALLOW_NULL, SLIDING_ELSEWHERE },
    { "use_sliding_window", HF, ALLOW_FALSE, SLIDING_ELSEWHERE },
    { "layer_types", HF, ALLOW_FULL, "per-layer attention types" },
    { "rope_scaling", GPT2, ALLOW_NULL, "RoPE scaling" },
    { "rope_parameters", GPT2, ALLOW_NULL, "RoPE parameters" },
    { "partial_rotary_factor", HF, ALLOW_ONE, "rotary embeddings on part of a head" },
    { "quantization_config", HF, ALLOW_NULL, "quantized weights" },
    { "pruned_heads", HF, ALLOW_EMPTY, "heads pruned at load time" },
    { "add_cross_attention", HF, ALLOW_FALSE, "cross-attention" },
    { "is_encoder_decoder", HF, ALLOW_FALSE, "an encoder-decoder model" },
    { "attn_logit_softcapping", HF, ALLOW_NULL, "attention logit soft-capping" },
    { "final_logit_softcapping", HF, ALLOW_NULL, "final logit soft-capping" },
    { "attention_bias", NOT_LLAMA, ALLOW_FALSE, "biases on the attention projections" },
    { "mlp_bias", NOT_LLAMA, ALLOW_FALSE, "biases on the MLP projections" },
    { "use_mrope", HF, ALLOW_FALSE, "multimodal rotary positions" },
    { "qk_layernorm", HF, ALLOW_FALSE, "norms on queries and keys" },
    { "use_qk_norm", HF, ALLOW_FALSE, "norms on queries and keys" },
    { "scale_attn_weights", GPT2, ALLOW_TRUE, "unscaled attention scores" },
    { "scale_attn_by_inverse_layer_idx", GPT2, ALLOW_FALSE, "scores scaled by 1/(layer + 1)" },
};
#undef HF
#undef GPT2
#undef NOT_LLAMA

/* Keys of any family that never change the computation. */
static const char *const bookkeeping[] = {
    "model_type", "architectures", "_name_or_path", "torch_dtype", "dtype",
    "transformers_version", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
};

/* Keys of Hugging Face configs that do not change what the causal LM
 * computes: PretrainedConfig's generation defaults, label maps and output
 * switches, other heads' settings (GPT-2's summary_*), precision or
 * parallelism switches with the same result (pretraining_tp,
 * reorder_and_upcast_attn) and context lengths that rotary families do not
 * use. Anything else a family's parser does not read is refused: it may
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
    "output_past", "gradient_checkpointing",
};

static int value_allowed(const cJSON *v, allowed ok)
{
    const cJSON *e;
    switch (ok) {
    case ALLOW_NULL:
        return cJSON_IsNull(v);
    case ALLOW_FALSE:
        return cJSON_IsFalse(v);
    case ALLOW_TRUE:
        return cJSON_IsTrue(v);
    case ALLOW_ONE:
        return cJSON_IsNumber(v) && v->valuedouble == 1;
    case ALLOW_EMPTY:
        return cJSON_IsNull(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child);
    case ALLOW_FULL:
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

static const char *allowed_name(allowed ok)
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

static int check_other_keys(const reader *r, hs_family family)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, r->root)
    {
        const char *k = v->string;
        int known = was_read(r, k);
        for (size_t i = 0; !known && i < sizeof bookkeeping / sizeof bookkeeping[0]; i++)
            known = !strcmp(k, bookkeeping[i]);
        const size_t n_hf = family == HS_FAMILY_HEADSCOPE ? 0 : sizeof hf_bookkeeping /
                                                                 sizeof hf_bookkeeping[0];
        for (size_t i = 0; !known && i < n_hf; i++)
            known = !strcmp(k, hf_bookkeeping[i]);
        if (known)
            continue;
        for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
            if (rules[i].families >> family & 1 && !strcmp(k, rules[i].key)) {
                if (!value_allowed(v, rules[i].ok))
                    return hs_fail(HS_EFORMAT,
                                   "%s: \"%s\": %s: not implemented (only %s is accepted)",
                                   r->path, k, rules[i].what, allowed_name(rules[i].ok));
                known = 1;
            }
        if (!known && is_dropout(k)) {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1)
                return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a probability", r->path, k);
            if (family == HS_FAMILY_HEADSCOPE && v->valuedouble != 0)
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
                           r->path, k, hs_family_name(family));
    }
    return HS_OK;
}

int hs_config_parse(hs_model_config *c, const char *json, const char *path)
{
    memset(c, 0, sizeof *c);
    cJSON *root;
    int prc = hs_json_parse(&root, json, strlen(json), path);
    if (prc)
        return prc;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hs_fail(HS_EFORMAT, "%s: not a JSON object", path);
    }
    reader r = { .root = root, .path = path };
    const cJSON *type = lookup(&r, "model_type");
    int rc;
    if (!cJSON_IsString(type))
        rc = hs_fail(HS_EFORMAT,
                     "%s: missing \"model_type\" (gpt2, llama, gpt_neox, mistral, qwen2 or "
                     "headscope)",
                     path);
    else if (!strcmp(type->valuestring, "gpt2"))
        c->family = HS_FAMILY_GPT2, rc = parse_gpt2(c, &r);
    else if (!strcmp(type->valuestring, "llama"))
        c->family = HS_FAMILY_LLAMA, rc = parse_llama(c, &r);
    else if (!strcmp(type->valuestring, "headscope"))
        c->family = HS_FAMILY_HEADSCOPE, rc = parse_headscope(c, &r);
    else if (!strcmp(type->valuestring, "gpt_neox"))
        c->family = HS_FAMILY_GPT_NEOX, rc = parse_gpt_neox(c, &r);
    else if (!strcmp(type->valuestring, "mistral"))
        c->family = HS_FAMILY_MISTRAL, rc = parse_llama(c, &r);
    else if (!strcmp(type->valuestring, "qwen2"))
        c->family = HS_FAMILY_QWEN2, rc = parse_llama(c, &r);
    else
        rc = hs_fail(HS_EFORMAT,
                     "%s: model_type \"%s\" is not gpt2, llama, gpt_neox, mistral, qwen2 or "
                     "headscope",
                     path, type->valuestring);
    if (!rc)
        rc = check_other_keys(&r, c->family);
    cJSON_Delete(root);
    if (!rc && hs_config_check(c))
        rc = hs_fail(HS_EFORMAT, "%s: %s", path, hs_last_error());
    return rc;
}

/* ---- writing ------------------------------------------------------------ */

static int uniform_heads(const hs_model_config *c, const int *v)
{
    for (int l = 1; l < c->n_layer; l++)
        if (v[l] != v[0])
            return 0;
    return 1;
}

static void add_per_layer(cJSON *o, const char *key, const hs_model_config *c, const int *v)
{
    if (uniform_heads(c, v)) {
        cJSON_AddNumberToObject(o, key, v[0]);
    } else {
        cJSON *a = cJSON_AddArrayToObject(o, key);
        for (int l = 0; l < c->n_layer; l++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber(v[l]));
    }
}

/* headscope's `window` in its shortest form: nothing when every head is
 * global, one integer when all share a window, a list per layer when each
 * layer's heads agree, else a list of lists per head. */
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

/* rope_scaling as Hugging Face writes it (nothing for plain RoPE). */
static void add_rope_scaling(cJSON *o, const hs_rope_scaling *s)
{
    if (s->kind == HS_ROPE_DEFAULT)
        return;
    cJSON *r = cJSON_AddObjectToObject(o, "rope_scaling");
    cJSON_AddStringToObject(r, "rope_type", s->kind == HS_ROPE_LINEAR ? "linear" : "llama3");
    cJSON_AddNumberToObject(r, "factor", s->factor);
    if (s->kind == HS_ROPE_LLAMA3) {
        cJSON_AddNumberToObject(r, "low_freq_factor", s->low_freq_factor);
        cJSON_AddNumberToObject(r, "high_freq_factor", s->high_freq_factor);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings",
                                s->original_max_position_embeddings);
    }
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

/* The keys GPTNeoXForCausalLM's and LlamaForCausalLM's configs share. */
static void add_hf_sizes(cJSON *o, const hs_model_config *c, const char *arch)
{
    cJSON *a = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(arch));
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", c->d_model);
    cJSON_AddNumberToObject(o, "intermediate_size", c->d_ff);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->n_layer);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->n_ctx);
    cJSON_AddNumberToObject(o, "initializer_range", c->init_std);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings);
}

char *hs_config_to_json(const hs_model_config *c)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        hs_fail(HS_ENOMEM, "config: cannot build JSON");
        return NULL;
    }
    cJSON_AddStringToObject(o, "model_type", hs_family_name(c->family));
    if (c->family == HS_FAMILY_GPT2) {
        cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
        cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
        cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
        cJSON_AddNumberToObject(o, "n_positions", c->n_ctx);
        cJSON_AddNumberToObject(o, "n_ctx", c->n_ctx);
        cJSON_AddNumberToObject(o, "n_embd", c->d_model);
        cJSON_AddNumberToObject(o, "n_layer", c->n_layer);
        add_per_layer(o, "n_head", c, c->n_head);
        if (c->d_ff == 4 * c->d_model)
            cJSON_AddNullToObject(o, "n_inner");
        else
            cJSON_AddNumberToObject(o, "n_inner", c->d_ff);
        cJSON_AddStringToObject(o, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(o, "layer_norm_epsilon", c->norm_eps);
        cJSON_AddNumberToObject(o, "initializer_range", c->init_std);
        cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings);
    } else if (c->family == HS_FAMILY_GPT_NEOX) {
        add_hf_sizes(o, c, "GPTNeoXForCausalLM");
        add_per_layer(o, "num_attention_heads", c, c->n_head);
        cJSON_AddNumberToObject(o, "layer_norm_eps", c->norm_eps);
        cJSON_AddNumberToObject(o, "rotary_pct", rotary_pct(c));
        cJSON_AddNumberToObject(o, "rotary_emb_base", c->rope_theta);
        add_rope_scaling(o, &c->rope_scaling);
        cJSON_AddBoolToObject(o, "use_parallel_residual", c->parallel_residual);
        cJSON_AddBoolToObject(o, "attention_bias", c->attn_bias);
        cJSON_AddStringToObject(o, "hidden_act", c->gelu_exact ? "gelu" : "gelu_new");
    } else if (llama_like(c->family)) {
        static const char *const arch[] = { [HS_FAMILY_LLAMA] = "LlamaForCausalLM",
                                            [HS_FAMILY_MISTRAL] = "MistralForCausalLM",
                                            [HS_FAMILY_QWEN2] = "Qwen2ForCausalLM" };
        add_hf_sizes(o, c, arch[c->family]);
        add_per_layer(o, "num_attention_heads", c, c->n_head);
        add_per_layer(o, "num_key_value_heads", c, c->n_kv_head);
        cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
        cJSON_AddNumberToObject(o, "rms_norm_eps", c->norm_eps);
        cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
        add_rope_scaling(o, &c->rope_scaling);
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
    } else {
        static const char *const pos[] = { "learned", "rope", "none" };
        static const char *const norm[] = { "layernorm", "rmsnorm" };
        static const char *const mlp[] = { "none", "gelu", "swiglu" };
        cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
        cJSON_AddNumberToObject(o, "n_layer", c->n_layer);
        cJSON_AddNumberToObject(o, "d_model", c->d_model);
        add_per_layer(o, "n_head", c, c->n_head);
        add_per_layer(o, "n_kv_head", c, c->n_kv_head);
        cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
        cJSON_AddNumberToObject(o, "n_ctx", c->n_ctx);
        cJSON_AddStringToObject(o, "positional", pos[c->pos]);
        cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
        cJSON_AddStringToObject(o, "norm", norm[c->norm]);
        cJSON_AddStringToObject(o, "norm_position", c->post_norm ? "post" : "pre");
        cJSON_AddNumberToObject(o, "norm_eps", c->norm_eps);
        cJSON_AddNumberToObject(o, "initializer_range", c->init_std);
        cJSON_AddBoolToObject(o, "final_norm", c->final_norm);
        cJSON_AddStringToObject(o, "mlp", mlp[c->mlp]);
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
        add_rope_scaling(o, &c->rope_scaling);
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
    if (!strcmp(name, "gpt2")) {
        c->family = HS_FAMILY_GPT2;
        c->mlp = HS_MLP_GELU;
        c->d_ff = 4 * c->d_model;
        c->attn_bias = c->mlp_bias = 1;
    } else if (!strcmp(name, "llama")) {
        c->family = HS_FAMILY_LLAMA;
        G = 2;
        c->pos = HS_POS_ROPE;
        c->norm = HS_NORM_RMSNORM;
        c->norm_eps = 1e-6;
        c->mlp = HS_MLP_SWIGLU;
        c->d_ff = 172;
        c->norm_bias = 0;
        c->tie_embeddings = 0;
    } else if (!strcmp(name, "gpt_neox")) {
        /* Pythia's shape: parallel residual, rotary on a quarter of each head */
        c->family = HS_FAMILY_GPT_NEOX;
        c->pos = HS_POS_ROPE;
        c->mlp = HS_MLP_GELU;
        c->gelu_exact = c->parallel_residual = 1;
        c->d_ff = 4 * c->d_model;
        c->attn_bias = c->mlp_bias = 1;
        c->tie_embeddings = 0;
        c->rotary_dims = c->d_model / H / 4;
    } else if (!strcmp(name, "mistral") || !strcmp(name, "qwen2")) {
        const int mistral = name[0] == 'm';
        c->family = mistral ? HS_FAMILY_MISTRAL : HS_FAMILY_QWEN2;
        G = 2;
        c->pos = HS_POS_ROPE;
        c->norm = HS_NORM_RMSNORM;
        c->norm_eps = 1e-6;
        c->mlp = HS_MLP_SWIGLU;
        c->d_ff = 172;
        c->norm_bias = 0;
        c->tie_embeddings = !mistral;
        c->qkv_bias = !mistral;
        c->window = mistral ? 64 : 0;
    } else if (!strcmp(name, "mla")) {
        /* DeepSeek-V2-Lite's shape, small: multi-head latent attention with a
         * plain q_proj, RMSNorm, SwiGLU */
        c->family = HS_FAMILY_HEADSCOPE;
        c->pos = HS_POS_ROPE;
        c->norm = HS_NORM_RMSNORM;
        c->norm_eps = 1e-6;
        c->mlp = HS_MLP_SWIGLU;
        c->d_ff = 172;
        c->norm_bias = 0;
        c->tie_embeddings = 0;
        c->mla = 1;
        c->kv_lora_rank = 32;
        c->qk_nope_head_dim = 16;
        c->qk_rope_head_dim = 8;
        c->v_head_dim = 16;
    } else if (!strcmp(name, "attn-only")) {
        c->family = HS_FAMILY_HEADSCOPE; /* Olsson et al.: attention layers only */
        c->mlp = HS_MLP_NONE;
    } else if (!strcmp(name, "tinylm")) {
        /* The seed's TinyLM: head(norm(x + attn(x))), one post-norm layer. */
        c->family = HS_FAMILY_HEADSCOPE;
        c->vocab_size = 5;
        c->n_layer = 1;
        c->d_model = 16;
        c->n_ctx = 8;
        H = G = 1;
        c->post_norm = 1;
        c->final_norm = 0;
        c->mlp = HS_MLP_NONE;
        c->lm_head_bias = 1;
        c->tie_embeddings = 0;
    } else {
        return hs_fail(HS_EINVAL,
                       "unknown preset \"%s\" (gpt2, llama, gpt_neox, mistral, qwen2, mla, "
                       "attn-only, tinylm)",
                       name);
    }
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
    if (!strcmp(key, "window") && !cJSON_GetObjectItemCaseSensitive(o, key))
        cJSON_AddNumberToObject(o, key, 0);
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
