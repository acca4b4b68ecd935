#include "config_json.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

const cJSON *hs_cfg_lookup(hs_cfg_reader *r, const char *key)
{
    if (r->nseen < (int)(sizeof r->seen / sizeof r->seen[0]))
        r->seen[r->nseen++] = key;
    return cJSON_GetObjectItemCaseSensitive(r->root, key);
}

int hs_cfg_was_read(const hs_cfg_reader *r, const char *key)
{
    for (int i = 0; i < r->nseen; i++)
        if (!strcmp(r->seen[i], key))
            return 1;
    return 0;
}

/* The value at key, or NULL to take the default (absent, or null where
 * flags allow); *rc is set when the key is missing or null is refused. */
static const cJSON *value(hs_cfg_reader *r, const char *key, unsigned flags, const char *what,
                          int *rc)
{
    const cJSON *v = hs_cfg_lookup(r, key);
    *rc = HS_OK;
    if (!v && flags & HS_CFG_REQUIRED)
        *rc = hs_fail(HS_EFORMAT, "%s: missing \"%s\"", r->path, key);
    else if (v && cJSON_IsNull(v) && flags & HS_CFG_REQUIRED)
        *rc = hs_fail(HS_EFORMAT, "%s: \"%s\" is null (%s is needed)", r->path, key, what);
    else if (v && cJSON_IsNull(v) && !(flags & (HS_CFG_NULL_DEFAULT | HS_CFG_NULL_FALSE)))
        *rc = hs_fail(HS_EFORMAT, "%s: \"%s\" is null, which gives it no meaning here (%s is "
                      "needed, or leave the key out)", r->path, key, what);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int hs_cfg_int(hs_cfg_reader *r, const char *key, unsigned flags, int dflt, int *out)
{
    int rc;
    const cJSON *v = value(r, key, flags, "a non-negative integer", &rc);
    if (rc || !v) {
        *out = dflt;
        return rc;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e9)
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a non-negative integer", r->path, key);
    *out = (int)v->valuedouble;
    return HS_OK;
}

int hs_cfg_token_id(hs_cfg_reader *r, const char *key, int dflt, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    int rc = hs_cfg_int(r, key, HS_CFG_NULL_DEFAULT, dflt, out);
    if (!rc && v && cJSON_IsNull(v))
        *out = -1;
    return rc;
}

int hs_cfg_double(hs_cfg_reader *r, const char *key, unsigned flags, double dflt, double *out)
{
    int rc;
    const cJSON *v = value(r, key, flags, "a number", &rc);
    if (rc || !v) {
        *out = dflt;
        return rc;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a finite number", r->path, key);
    *out = v->valuedouble;
    return HS_OK;
}

int hs_cfg_bool(hs_cfg_reader *r, const char *key, unsigned flags, int dflt, int *out)
{
    int rc;
    const cJSON *raw = cJSON_GetObjectItemCaseSensitive(r->root, key);
    const cJSON *v = value(r, key, flags, "true or false", &rc);
    *out = raw && cJSON_IsNull(raw) && flags & HS_CFG_NULL_FALSE ? 0 : dflt;
    if (rc || !v)
        return rc;
    if (!cJSON_IsBool(v))
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be true or false", r->path, key);
    *out = cJSON_IsTrue(v);
    return HS_OK;
}

int hs_cfg_choice(hs_cfg_reader *r, const char *key, const char *const *names, int n, int dflt,
                  int *out)
{
    int rc;
    const cJSON *v = value(r, key, 0, "a name", &rc);
    *out = dflt;
    if (rc || !v)
        return rc;
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

int hs_cfg_per_layer(hs_cfg_reader *r, const char *key, int n_layer, unsigned flags, int dflt,
                     int zero_ok, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
    if (cJSON_IsArray(v)) {
        hs_cfg_lookup(r, key);
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
    int rc = hs_cfg_int(r, key, flags, dflt, &one);
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

int hs_cfg_layers_ok(const hs_cfg_reader *r, const char *key, int n_layer)
{
    if (n_layer < 1 || n_layer > HS_MAX_LAYERS)
        return hs_fail(HS_EFORMAT, "%s: %s=%d outside 1..%d", r->path, key, n_layer,
                       HS_MAX_LAYERS);
    return HS_OK;
}

static int by_value(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int hs_cfg_pruned_heads(hs_cfg_reader *r, hs_model_config *c)
{
    const cJSON *o = hs_cfg_lookup(r, "pruned_heads"), *layer, *h;
    c->n_pruned = 0;
    if (!o || cJSON_IsNull(o))
        return HS_OK;
    if (!cJSON_IsObject(o))
        return hs_fail(HS_EFORMAT, "%s: pruned_heads must be an object {\"layer\": [heads]}",
                       r->path);
    cJSON_ArrayForEach(layer, o)
    {
        char *end;
        const long l = strtol(layer->string, &end, 10);
        if (end == layer->string || *end || l < 0 || l >= c->n_layer || !cJSON_IsArray(layer))
            return hs_fail(HS_EFORMAT, "%s: pruned_heads: \"%.40s\" is not a layer 0..%d with a "
                                       "list of heads", r->path, layer->string, c->n_layer - 1);
        cJSON_ArrayForEach(h, layer)
        {
            if (!cJSON_IsNumber(h) || h->valuedouble != (int)h->valuedouble || h->valuedouble < 0 ||
                h->valuedouble >= c->n_head[l] || c->n_pruned == HS_MAX_PRUNED)
                return hs_fail(HS_EFORMAT, "%s: pruned_heads: layer %ld lists a head outside "
                                           "0..%d (or more than %d heads in all)",
                               r->path, l, c->n_head[l] - 1, HS_MAX_PRUNED);
            c->pruned[c->n_pruned++] = (int)l * HS_MAX_HEADS + (int)h->valuedouble;
        }
    }
    qsort(c->pruned, (size_t)c->n_pruned, sizeof *c->pruned, by_value);
    for (int i = 1; i < c->n_pruned; i++)
        if (c->pruned[i] == c->pruned[i - 1])
            return hs_fail(HS_EFORMAT, "%s: pruned_heads: layer %d lists head %d twice", r->path,
                           c->pruned[i] / HS_MAX_HEADS, c->pruned[i] % HS_MAX_HEADS);
    return HS_OK;
}

int hs_cfg_check_groups(const hs_cfg_reader *r, const hs_model_config *c, const char *hkey,
                        const char *gkey)
{
    for (int l = 0; l < c->n_layer; l++)
        if (c->n_head[l] % c->n_kv_head[l])
            return hs_fail(HS_EFORMAT, "%s: %s=%d is not divisible by %s=%d (layer %d)", r->path,
                           hkey, c->n_head[l], gkey, c->n_kv_head[l], l);
    return HS_OK;
}

/* A number inside a rope_scaling object: *out, or an error naming both. */
static int rope_number(const hs_cfg_reader *r, const char *obj, const cJSON *o, const char *key,
                       double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
        return hs_fail(HS_EFORMAT, "%s: \"%s\": \"%s\" must be a positive number", r->path, obj,
                       key);
    *out = v->valuedouble;
    return HS_OK;
}

/* ({"rope_type": "default", "rope_theta": 10000.0} is how newer transformers
 * write plain RoPE; the type may be under "rope_type" or the older "type".) */
int hs_cfg_rope_object(hs_cfg_reader *r, const char *key, double partial, double *theta,
                       hs_rope_scaling *s)
{
    return hs_cfg_rope_value(r, key, hs_cfg_lookup(r, key), partial, theta, s);
}

int hs_cfg_rope_value(hs_cfg_reader *r, const char *key, const cJSON *v, double partial,
                      double *theta, hs_rope_scaling *s)
{
    *theta = 0;
    memset(s, 0, sizeof *s);
    const cJSON *e;
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

int hs_cfg_rope(hs_cfg_reader *r, const char *theta_key, double dflt, double partial,
                hs_model_config *c)
{
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(r->root, theta_key);
    const int given = top && !cJSON_IsNull(top);
    int rc = hs_cfg_double(r, theta_key, 0, dflt, &c->rope_theta);
    static const char *const objs[] = { "rope_parameters", "rope_scaling" };
    int from_obj = 0, scaled = 0;
    for (int i = 0; !rc && i < 2; i++) {
        double t;
        hs_rope_scaling s;
        if ((rc = hs_cfg_rope_object(r, objs[i], partial, &t, &s)))
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

/* The sizes, required (d NULL) or from d's defaults where absent. */
static int hf_sizes(hs_cfg_reader *r, hs_model_config *c, const hs_hf_defaults *d)
{
    int rc;
    const unsigned f = d ? 0 : HS_CFG_REQUIRED;
    if ((rc = hs_cfg_int(r, "hidden_size", f, d ? d->hidden_size : 0, &c->d_model)) ||
        (rc = hs_cfg_int(r, "num_hidden_layers", f, d ? d->num_hidden_layers : 0, &c->n_layer)) ||
        (rc = hs_cfg_int(r, "vocab_size", f, d ? d->vocab_size : 0, &c->vocab_size)) ||
        (rc = hs_cfg_int(r, "intermediate_size", f, d ? d->intermediate_size : 0, &c->d_ff)) ||
        (rc = hs_cfg_int(r, "max_position_embeddings", HS_CFG_NULL_DEFAULT,
                         d ? d->max_position_embeddings : 2048, &c->n_ctx)) ||
        (rc = hs_cfg_double(r, "initializer_range", HS_CFG_NULL_DEFAULT, 0.02, &c->init_std)))
        return rc;
    return hs_cfg_layers_ok(r, "num_hidden_layers", c->n_layer);
}

int hs_cfg_hf_sizes(hs_cfg_reader *r, hs_model_config *c)
{
    return hf_sizes(r, c, NULL);
}

int hs_cfg_head_dim(hs_cfg_reader *r, hs_model_config *c, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, "head_dim");
    int dh = 0, rc = hs_cfg_int(r, "head_dim", HS_CFG_NULL_DEFAULT, v ? 0 : dflt, &dh);
    if (rc)
        return rc;
    if (!dh && (c->n_head[0] < 1 || c->d_model % c->n_head[0]))
        return hs_fail(HS_EFORMAT, "%s: hidden_size=%d is not divisible by num_attention_heads=%d",
                       r->path, c->d_model, c->n_head[0]);
    c->head_dim = dh ? dh : c->d_model / c->n_head[0];
    return HS_OK;
}

int hs_cfg_hf_decoder(hs_cfg_reader *r, hs_model_config *c, const hs_hf_defaults *d)
{
    int rc;
    if ((rc = hf_sizes(r, c, d)) ||
        (rc = hs_cfg_double(r, "rms_norm_eps", 0, d->rms_norm_eps, &c->norm_eps)) ||
        (rc = hs_cfg_bool(r, "tie_word_embeddings", HS_CFG_NULL_FALSE, d->tie_word_embeddings,
                          &c->tie_embeddings)) ||
        (rc = hs_cfg_per_layer(r, "num_attention_heads", c->n_layer, 0, d->num_attention_heads,
                               0, c->n_head)) ||
        (rc = hs_cfg_per_layer(r, "num_key_value_heads", c->n_layer, HS_CFG_NULL_DEFAULT,
                               d->num_key_value_heads && !hs_cfg_lookup(r, "num_key_value_heads")
                                   ? d->num_key_value_heads
                                   : c->n_head[0],
                               0, c->n_kv_head)) ||
        (rc = hs_cfg_check_groups(r, c, "num_attention_heads", "num_key_value_heads")))
        return rc;
    if ((rc = hs_cfg_head_dim(r, c, d->head_dim)))
        return rc;
    c->pos = HS_POS_ROPE;
    c->norm = HS_NORM_RMSNORM;
    c->final_norm = 1;
    return HS_OK;
}

void hs_cfg_add_pruned_heads(cJSON *o, const hs_model_config *c)
{
    if (!c->n_pruned)
        return;
    cJSON *p = cJSON_AddObjectToObject(o, "pruned_heads"), *list = NULL;
    for (int i = 0, last = -1; i < c->n_pruned; i++) {
        const int l = c->pruned[i] / HS_MAX_HEADS;
        if (l != last) {
            char key[16];
            snprintf(key, sizeof key, "%d", l);
            list = cJSON_AddArrayToObject(p, key), last = l;
        }
        cJSON_AddItemToArray(list, cJSON_CreateNumber(c->pruned[i] % HS_MAX_HEADS));
    }
}

void hs_cfg_add_per_layer(cJSON *o, const char *key, const hs_model_config *c, const int *v)
{
    int uniform = 1;
    for (int l = 1; l < c->n_layer; l++)
        uniform &= v[l] == v[0];
    if (uniform) {
        cJSON_AddNumberToObject(o, key, v[0]);
        return;
    }
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int l = 0; l < c->n_layer; l++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[l]));
}

void hs_cfg_add_rope_scaling(cJSON *o, const hs_rope_scaling *s)
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

void hs_cfg_add_hf_sizes(cJSON *o, const hs_model_config *c, const char *arch)
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

void hs_cfg_add_hf_decoder(cJSON *o, const hs_model_config *c, const char *arch)
{
    hs_cfg_add_hf_sizes(o, c, arch);
    hs_cfg_add_per_layer(o, "num_attention_heads", c, c->n_head);
    hs_cfg_add_per_layer(o, "num_key_value_heads", c, c->n_kv_head);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    hs_cfg_add_rope_scaling(o, &c->rope_scaling);
}

void hs_cfg_add_token_id(cJSON *o, const char *key, int id)
{
    if (id >= 0)
        cJSON_AddNumberToObject(o, key, id);
    else
        cJSON_AddNullToObject(o, key);
}
