#include "intervene.h"

#include <string.h>

static const char *const site_names[HS_N_SITES] = {
    [HS_SITE_RESID_PRE] = "resid_pre", [HS_SITE_ATTN_OUT] = "attn_out",
    [HS_SITE_MLP_OUT] = "mlp_out",     [HS_SITE_Q] = "q",
    [HS_SITE_K] = "k",                 [HS_SITE_V] = "v",
    [HS_SITE_Z] = "z",                 [HS_SITE_PATTERN] = "pattern",
    [HS_SITE_ATTN_SCORES] = "attn_scores",
};

const char *hs_site_name(hs_site s)
{
    return (int)s >= 0 && s < HS_N_SITES ? site_names[s] : NULL;
}

int hs_site_parse(const char *name, hs_site *s)
{
    for (int i = 0; i < HS_N_SITES; i++)
        if (!strcmp(name, site_names[i])) {
            *s = (hs_site)i;
            return HS_OK;
        }
    return hs_fail(HS_EINVAL, "unknown hook site '%s' (resid_pre, attn_out, mlp_out, q, k, v, "
                              "z, pattern, attn_scores)",
                   name);
}

const char *hs_iv_kind_name(hs_iv_kind k)
{
    static const char *const names[HS_IV_KINDS] = { "zero", "mean", "resample", "replace",
                                                    "add" };
    return (int)k >= 0 && k < HS_IV_KINDS ? names[k] : "?";
}

/* Mean and add act per head, blind to positions: at the pattern they would
 * put weight on keys a query may not see. */
static int pattern_kind(hs_iv_kind kind, int layer)
{
    if (kind != HS_IV_MEAN && kind != HS_IV_ADD)
        return HS_OK;
    return hs_fail(HS_EINVAL, "intervention at pattern of layer %d: %s would put weight on "
                              "masked keys (use replace, e.g. with a cached pattern)",
                   layer, hs_iv_kind_name(kind));
}

int hs_intervention_check(const hs_intervention *iv, const hs_model_config *c)
{
    int rc;
    const char *site = hs_site_name(iv->site);
    if (!site)
        return hs_fail(HS_EINVAL, "intervention: no hook site %d", (int)iv->site);
    const int top = iv->site == HS_SITE_RESID_PRE ? c->n_layer : c->n_layer - 1;
    if (iv->layer < 0 || iv->layer > top)
        return hs_fail(HS_EINVAL, "intervention at %s: layer %d outside 0..%d", site, iv->layer,
                       top);
    if (iv->site == HS_SITE_MLP_OUT && c->mlp == HS_MLP_NONE)
        return hs_fail(HS_EINVAL, "intervention at mlp_out: the model has no MLP");
    int heads = 1;
    if (iv->site == HS_SITE_Q || iv->site == HS_SITE_Z || iv->site == HS_SITE_PATTERN ||
        iv->site == HS_SITE_ATTN_SCORES)
        heads = c->n_head[iv->layer];
    else if (iv->site == HS_SITE_K || iv->site == HS_SITE_V)
        heads = c->n_kv_head[iv->layer];
    if (iv->head < -1 || iv->head >= heads)
        return hs_fail(HS_EINVAL, "intervention at %s of layer %d: head %d outside 0..%d", site,
                       iv->layer, iv->head, heads - 1);
    if (iv->position < -1)
        return hs_fail(HS_EINVAL, "intervention at %s of layer %d: position %d (-1: every one)",
                       site, iv->layer, iv->position);
    if ((int)iv->kind < 0 || iv->kind >= HS_IV_KINDS)
        return hs_fail(HS_EINVAL, "intervention at %s of layer %d: no kind %d", site, iv->layer,
                       (int)iv->kind);
    if (iv->site == HS_SITE_PATTERN && (rc = pattern_kind(iv->kind, iv->layer)))
        return rc;
    if (!iv->source && (iv->kind == HS_IV_MEAN || iv->kind == HS_IV_REPLACE ||
                        iv->kind == HS_IV_ADD))
        return hs_fail(HS_EINVAL, "intervention at %s of layer %d: %s needs a source", site,
                       iv->layer, hs_iv_kind_name(iv->kind));
    return HS_OK;
}

int hs_intervene(const hs_site_view *v, const hs_intervention *iv)
{
    const char *site = hs_site_name(v->site);
    if (iv->head < -1 || iv->head >= v->heads)
        return hs_fail(HS_EINVAL, "intervention at %s of layer %d: head %d outside 0..%d", site,
                       v->layer, iv->head, v->heads - 1);
    if (iv->position < -1 || iv->position >= v->T)
        return hs_fail(HS_EINVAL, "intervention at %s of layer %d: position %d outside 0..%d",
                       site, v->layer, iv->position, v->T - 1);
    const size_t need = iv->kind == HS_IV_REPLACE ? (size_t)v->B * v->sb
                                                  : (size_t)v->heads * v->width;
    if (iv->source && iv->source_n && iv->source_n < need)
        return hs_fail(HS_EINVAL,
                       "intervention at %s of layer %d: %s source has %zu values, needs %zu",
                       site, v->layer, hs_iv_kind_name(iv->kind), iv->source_n, need);
    int rc = v->site == HS_SITE_PATTERN ? pattern_kind(iv->kind, v->layer) : HS_OK;
    if (rc)
        return rc;
    if (iv->kind == HS_IV_RESAMPLE && v->B < 2)
        return hs_fail(HS_EINVAL,
                       "intervention at %s of layer %d: resample takes the next sequence of "
                       "the batch and needs at least 2 (batch %d)",
                       site, v->layer, v->B);
    if ((iv->kind == HS_IV_MEAN || iv->kind == HS_IV_REPLACE || iv->kind == HS_IV_ADD) &&
        !iv->source)
        return hs_fail(HS_EINVAL, "intervention at %s of layer %d: %s needs a source", site,
                       v->layer, hs_iv_kind_name(iv->kind));
    const int h0 = iv->head < 0 ? 0 : iv->head, h1 = iv->head < 0 ? v->heads : iv->head + 1;
    const int t0 = iv->position < 0 ? 0 : iv->position;
    const int t1 = iv->position < 0 ? v->T : iv->position + 1;
    const size_t w = (size_t)v->width, bytes = sizeof(hs_real) * w;
    const int B = iv->kind == HS_IV_RESAMPLE ? 1 : v->B; /* resample walks b itself */
    for (int b = 0; b < B; b++)
        for (int t = t0; t < t1; t++)
            for (int h = h0; h < h1; h++) {
                const size_t off = b * v->sb + t * v->st + h * v->sh;
                hs_real *x = v->x + off;
                const hs_real *per_head = iv->source ? iv->source + (size_t)h * w : NULL;
                switch (iv->kind) {
                case HS_IV_ZERO:
                    memset(x, 0, bytes);
                    break;
                case HS_IV_MEAN:
                    memcpy(x, per_head, bytes);
                    break;
                case HS_IV_REPLACE:
                    memcpy(x, iv->source + off, bytes);
                    break;
                case HS_IV_ADD:
                    for (size_t i = 0; i < w; i++)
                        x[i] += per_head[i];
                    break;
                case HS_IV_RESAMPLE:
                    /* x[b] <- x[b+1], the last from the first: a rotation in place */
                    for (size_t i = 0; i < w; i++) {
                        const hs_real first = x[i];
                        for (int s = 0; s + 1 < v->B; s++)
                            x[s * v->sb + i] = x[(s + 1) * v->sb + i];
                        x[(v->B - 1) * v->sb + i] = first;
                    }
                    break;
                default:
                    return hs_fail(HS_EINVAL, "intervention at %s: no kind %d", site,
                                   (int)iv->kind);
                }
            }
    return HS_OK;
}

/* The site function of a plan: its interventions at this site and layer in
 * list order, then the cache. */
static int plan_site(void *ctx, const hs_site_view *v)
{
    const hs_hook_plan *p = ctx;
    int rc = HS_OK;
    for (int i = 0; !rc && i < p->n; i++)
        if (p->list[i].site == v->site && p->list[i].layer == v->layer)
            rc = hs_intervene(v, &p->list[i]);
    if (!rc && p->cache)
        rc = hs_act_cache_record(p->cache, v);
    return rc;
}

int hs_hooks_attach(hs_hooks *h, const hs_model_config *c, hs_hook_plan *plan)
{
    if (!plan)
        return HS_OK;
    for (int i = 0; i < plan->n; i++) {
        int rc = hs_intervention_check(&plan->list[i], c);
        if (rc)
            return rc;
    }
    for (int i = 0; i < plan->n; i++)
        h->site[plan->list[i].site] = (hs_site_hook){ plan_site, plan };
    for (int i = 0; plan->cache && i < plan->cache->n; i++)
        h->site[plan->cache->e[i].key.site] = (hs_site_hook){ plan_site, plan };
    return HS_OK;
}
