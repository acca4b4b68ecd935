/* Path patching (patch.h, Wang et al. 2022): the freeze-and-record run and
 * the receivers' run as capture/ interventions in full forwards. */
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "intervene.h"
#include "metrics.h"
#include "patch.h"
#include "transformer.h"

int hs_path_check(const hs_model_config *c, const hs_path_opts *o)
{
    if (hs_heads_fit(c))
        return HS_EINVAL;
    if (o->n_senders < 1)
        return hs_fail(HS_EINVAL, "--senders: no sender head");
    for (int i = 0; i < o->n_senders; i++) {
        const int l = o->sender[i] / HS_MAX_HEADS, h = o->sender[i] % HS_MAX_HEADS;
        if (l < 0 || l >= c->n_layer || h >= c->n_head[l])
            return hs_fail(HS_EINVAL, "--senders: no head %d.%d (the model has %d layers of %d "
                           "heads)", l, h, c->n_layer, c->n_head[0]);
    }
    for (int i = 0; i < o->n_recv; i++) {
        const hs_receiver *rv = &o->recv[i];
        if (rv->layer < 0 || rv->layer >= c->n_layer || rv->head < 0 ||
            rv->head >= c->n_head[rv->layer])
            return hs_fail(HS_EINVAL, "--receivers: no head %d.%d (the model has %d layers of %d "
                           "heads)", rv->layer, rv->head, c->n_layer, c->n_head[0]);
        if (rv->site != HS_SITE_Q && rv->site != HS_SITE_K && rv->site != HS_SITE_V)
            return hs_fail(HS_EINVAL, "--receivers: %d.%d: the input must be q, k or v",
                           rv->layer, rv->head);
    }
    return HS_OK;
}

typedef struct {
    const hs_model *m;
    const hs_path_opts *o;
    hs_acts clean, corrupt, run;
    hs_act_cache recorded;    /* the receivers' sites in run (1) */
    hs_intervention *freeze;  /* [n_layer + 1]: every z clean, then the sender's corrupt */
    hs_intervention *patched; /* [n_recv] */
    int top;                  /* the last receiver's layer */
    hs_welford2 *acc;         /* [n_senders] (LD_pp - LD_clean, LD_clean - LD_corrupt) */
} path_run;

/* The query head's slot at the receiver's site (k, v: its key/value head). */
static int site_head(const hs_model_config *c, const hs_receiver *rv)
{
    if (rv->site == HS_SITE_Q)
        return rv->head;
    return rv->head / (c->n_head[rv->layer] / c->n_kv_head[rv->layer]);
}

/* Sender s over one batch (clean tokens tok): LD of the path-patched run
 * per prompt into ld (B). */
static int one_sender(path_run *p, int s, const int32_t *tok, const int32_t *ans,
                      const int32_t *wrong, double *ld)
{
    const hs_model_config *c = &p->m->cfg;
    const int L = c->n_layer, ls = p->o->sender[s] / HS_MAX_HEADS;
    const int hd = p->o->sender[s] % HS_MAX_HEADS;
    for (int l = 0; l < L; l++)
        p->freeze[l] = (hs_intervention){ HS_SITE_Z, l, -1, -1, HS_IV_REPLACE,
                                          p->clean.layer[l].attn.z, 0 };
    p->freeze[L] = (hs_intervention){ HS_SITE_Z, ls, hd, -1, HS_IV_REPLACE,
                                      p->corrupt.layer[ls].attn.z, 0 };
    hs_hook_plan freeze = { p->freeze, L + 1, p->o->n_recv ? &p->recorded : NULL };
    hs_hooks hooks = { 0 };
    int rc = hs_hooks_attach(&hooks, c, &freeze);
    if (!rc && !p->o->n_recv)
        rc = hs_forward(&p->run, p->m, tok, NULL, &hooks);
    else if (!rc)
        rc = hs_forward_to(&p->run, p->m, tok, p->top, &hooks);
    if (!rc && p->o->n_recv) {
        for (int i = 0; i < p->o->n_recv; i++) {
            const hs_receiver *rv = &p->o->recv[i];
            p->patched[i] = (hs_intervention){
                (hs_site)rv->site, rv->layer, site_head(c, rv), -1, HS_IV_REPLACE,
                hs_act_cache_get(&p->recorded, (hs_site)rv->site, rv->layer, NULL), 0 };
        }
        hs_hook_plan recv = { p->patched, p->o->n_recv, NULL };
        hs_hooks rhooks = { 0 };
        rc = hs_hooks_attach(&rhooks, c, &recv);
        if (!rc)
            rc = hs_forward(&p->run, p->m, tok, NULL, &rhooks);
    }
    for (int i = 0; !rc && i < p->run.B; i++)
        ld[i] = hs_logit_diff(p->run.logits, i, p->run.T, c->vocab_size, ans[i], wrong[i]);
    return rc;
}

static int path_group(path_run *p, const hs_prompt_group *g, int Bmax, double *ld, double *ldc,
                      double *ldk, hs_ld_baseline *base, size_t *done, size_t total)
{
    const hs_model *m = p->m;
    const int T = g->T, V = m->cfg.vocab_size, B0 = g->n < Bmax ? g->n : Bmax;
    int rc = hs_acts_alloc(&p->clean, &m->cfg, B0, T, HS_ACTS_INFER);
    if (!rc)
        rc = hs_acts_alloc(&p->corrupt, &m->cfg, B0, T, HS_ACTS_INFER);
    if (!rc)
        rc = hs_acts_alloc(&p->run, &m->cfg, B0, T, HS_ACTS_INFER);
    for (int i0 = 0; !rc && i0 < g->n; i0 += B0) {
        const int B = g->n - i0 < B0 ? g->n - i0 : B0;
        const int32_t *clean = g->clean + (size_t)i0 * T, *ans = g->answer + i0;
        const int32_t *wrong = g->wrong + i0;
        rc = hs_acts_set_batch(&p->clean, B);
        if (!rc)
            rc = hs_acts_set_batch(&p->corrupt, B);
        if (!rc)
            rc = hs_acts_set_batch(&p->run, B);
        if (!rc)
            rc = hs_forward(&p->clean, m, clean, NULL, NULL);
        if (!rc)
            rc = hs_forward(&p->corrupt, m, g->corrupt + (size_t)i0 * T, NULL, NULL);
        for (int i = 0; !rc && i < B; i++) {
            ldc[i] = hs_logit_diff(p->clean.logits, i, T, V, ans[i], wrong[i]);
            ldk[i] = hs_logit_diff(p->corrupt.logits, i, T, V, ans[i], wrong[i]);
            hs_ld_baseline_add(base, ldc[i], ldk[i]);
        }
        for (int s = 0; !rc && s < p->o->n_senders; s++) {
            if (p->o->stop && *p->o->stop)
                return hs_fail(HS_EINTR, "path-patch: interrupted");
            rc = one_sender(p, s, clean, ans, wrong, ld);
            for (int i = 0; !rc && i < B; i++)
                hs_welford2_add(&p->acc[s], ld[i] - ldc[i], ldc[i] - ldk[i]);
            if (p->o->progress)
                p->o->progress(p->o->ctx, ++*done, total);
        }
    }
    hs_acts_free(&p->clean), hs_acts_free(&p->corrupt), hs_acts_free(&p->run);
    return rc;
}

int hs_path_patch(hs_head_table *t, const hs_model *m, const hs_prompt_set *ps,
                  const hs_path_opts *o)
{
    memset(t, 0, sizeof *t);
    const hs_model_config *c = &m->cfg;
    int rc = hs_path_check(c, o);
    if (rc)
        return rc;
    const int Bmax = o->batch > 0 ? o->batch : 64;
    path_run p = { .m = m, .o = o };
    hs_site_key keys[64];
    int nk = 0;
    for (int i = 0; i < o->n_recv; i++) {
        const hs_site_key k = { (hs_site)o->recv[i].site, o->recv[i].layer };
        int seen = 0;
        for (int j = 0; j < nk; j++)
            seen |= keys[j].site == k.site && keys[j].layer == k.layer;
        if (!seen && nk < 64)
            keys[nk++] = k;
        p.top = o->recv[i].layer > p.top ? o->recv[i].layer : p.top;
    }
    if (nk && (rc = hs_act_cache_init(&p.recorded, keys, nk, HS_CACHE_COPY)))
        return rc;
    p.freeze = hs_calloc((size_t)c->n_layer + 1, sizeof *p.freeze, "interventions");
    p.patched = hs_calloc((size_t)o->n_recv + 1, sizeof *p.patched, "interventions");
    p.acc = hs_calloc((size_t)o->n_senders, sizeof *p.acc, "accumulators");
    double *ld = hs_calloc((size_t)Bmax, sizeof(double), "logit differences");
    double *ldc = hs_calloc((size_t)Bmax, sizeof(double), "logit differences");
    double *ldk = hs_calloc((size_t)Bmax, sizeof(double), "logit differences");
    if (!p.freeze || !p.patched || !p.acc || !ld || !ldc || !ldk)
        rc = HS_ENOMEM;
    size_t total = 0, done = 0;
    for (int g = 0; g < ps->n_group; g++)
        total += (size_t)o->n_senders * ((ps->group[g].n + Bmax - 1) / Bmax);
    hs_ld_baseline base = { 0 };
    for (int g = 0; !rc && g < ps->n_group; g++)
        rc = path_group(&p, &ps->group[g], Bmax, ld, ldc, ldk, &base, &done, total);
    double span = 0;
    if (!rc)
        rc = hs_patch_baseline(t, &span, &base);
    for (int s = 0; !rc && s < o->n_senders; s++) {
        double v, e;
        hs_patch_ratio(&v, &e, &p.acc[s], -span, span);
        rc = hs_head_table_add(t, o->sender[s] / HS_MAX_HEADS, o->sender[s] % HS_MAX_HEADS,
                               HS_METRIC(PATH_PATCH), v, e, p.acc[s].n);
    }
    if (rc)
        hs_head_table_free(t);
    hs_act_cache_free(&p.recorded);
    free(p.freeze), free(p.patched), free(p.acc), free(ld), free(ldc), free(ldk);
    return rc;
}
