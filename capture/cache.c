#include "cache.h"

#include <stdlib.h>
#include <string.h>

int hs_act_cache_init(hs_act_cache *c, const hs_site_key *keys, int n, int mode)
{
    memset(c, 0, sizeof *c);
    if (n < 0 || (mode != HS_CACHE_COPY && mode != HS_CACHE_MEAN))
        return hs_fail(HS_EINVAL, "activation cache: %d sites in mode %d", n, mode);
    for (int i = 0; i < n; i++)
        if ((int)keys[i].site < 0 || keys[i].site >= HS_N_SITES || keys[i].layer < 0)
            return hs_fail(HS_EINVAL, "activation cache: no site %d of layer %d",
                           (int)keys[i].site, keys[i].layer);
    if (n && !(c->e = hs_calloc((size_t)n, sizeof *c->e, "activation cache")))
        return HS_ENOMEM;
    for (int i = 0; i < n; i++)
        c->e[i].key = keys[i];
    c->n = n;
    c->mode = mode;
    return HS_OK;
}

int hs_act_cache_init_layers(hs_act_cache *c, hs_site site, int n_layers, int mode)
{
    memset(c, 0, sizeof *c);
    if (n_layers < 0)
        return hs_fail(HS_EINVAL, "activation cache: %d layers", n_layers);
    hs_site_key *keys = hs_calloc((size_t)n_layers + 1, sizeof *keys, "activation cache sites");
    if (!keys)
        return HS_ENOMEM;
    for (int l = 0; l < n_layers; l++)
        keys[l] = (hs_site_key){ site, l };
    int rc = hs_act_cache_init(c, keys, n_layers, mode);
    free(keys);
    return rc;
}

void hs_act_cache_free(hs_act_cache *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].data);
        free(c->e[i].sum);
    }
    free(c->e);
    memset(c, 0, sizeof *c);
}

static hs_cache_entry *find(const hs_act_cache *c, hs_site site, int layer)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i].key.site == site && c->e[i].key.layer == layer)
            return &c->e[i];
    return NULL;
}

/* COPY: the whole tensor, in the site's layout (it is contiguous). */
static int record_copy(hs_cache_entry *e, const hs_site_view *v)
{
    const size_t n = (size_t)v->B * v->sb;
    if (e->cap < n) {
        free(e->data);
        if (!(e->data = hs_calloc(n, sizeof(hs_real), "activation cache copy"))) {
            e->cap = 0;
            return HS_ENOMEM;
        }
        e->cap = n;
    }
    memcpy(e->data, v->x, sizeof(hs_real) * n);
    e->shape = *v;
    e->shape.x = e->data;
    return HS_OK;
}

/* MEAN: sums per (head, i), added sequence position by sequence position. */
static int record_mean(hs_cache_entry *e, const hs_site_view *v)
{
    const size_t n = (size_t)v->heads * v->width;
    if (!e->sum) {
        if (!(e->sum = hs_calloc(n, sizeof(double), "activation cache mean")))
            return HS_ENOMEM;
        e->cap = n;
    } else if (e->cap != n) {
        return hs_fail(HS_EINVAL, "activation cache: layer %d's site changed shape (%zu to %zu "
                                  "values per position)",
                       v->layer, e->cap, n);
    }
    for (int b = 0; b < v->B; b++)
        for (int t = 0; t < v->T; t++)
            for (int h = 0; h < v->heads; h++) {
                const hs_real *x = v->x + b * v->sb + t * v->st + h * v->sh;
                double *s = e->sum + (size_t)h * v->width;
                for (int i = 0; i < v->width; i++)
                    s[i] += x[i];
            }
    e->rows += (size_t)v->B * v->T;
    e->shape = *v;
    e->shape.x = NULL;
    return HS_OK;
}

int hs_act_cache_record(hs_act_cache *c, const hs_site_view *v)
{
    hs_cache_entry *e = find(c, v->site, v->layer);
    if (!e)
        return HS_OK;
    return c->mode == HS_CACHE_COPY ? record_copy(e, v) : record_mean(e, v);
}

static int cache_site(void *ctx, const hs_site_view *v)
{
    return hs_act_cache_record(ctx, v);
}

void hs_act_cache_hooks(hs_act_cache *c, hs_hooks *h)
{
    for (int i = 0; i < c->n; i++)
        h->site[c->e[i].key.site] = (hs_site_hook){ cache_site, c };
}

const hs_real *hs_act_cache_get(const hs_act_cache *c, hs_site site, int layer,
                                hs_site_view *shape)
{
    const hs_cache_entry *e = c->mode == HS_CACHE_COPY ? find(c, site, layer) : NULL;
    if (!e || !e->data)
        return NULL;
    if (shape)
        *shape = e->shape;
    return e->data;
}

int hs_act_cache_mean(const hs_act_cache *c, hs_site site, int layer, hs_real *out)
{
    const hs_cache_entry *e = c->mode == HS_CACHE_MEAN ? find(c, site, layer) : NULL;
    if (!e || !e->rows)
        return hs_fail(HS_EINVAL, "activation cache: no mean of layer %d's site %d recorded",
                       layer, (int)site);
    for (size_t k = 0; k < e->cap; k++)
        out[k] = (hs_real)(e->sum[k] / (double)e->rows);
    return HS_OK;
}
