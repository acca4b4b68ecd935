/* Attribution patching and AtP* (atp.h): both runs once per batch, the
 * estimates of every site read off one backward (the gradient observers of
 * hs_backward_from), AtP*'s GradDrop as L more backwards of the same forward. */
#include "atp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "metrics.h"
#include "transformer.h"

static const char *const SITE[HS_ATP_SITES] = { "z", "pattern", "q", "k", "v",
                                                "resid_pre", "attn_out", "mlp_out" };
static const hs_site HOOK[HS_ATP_SITES] = { HS_SITE_Z, HS_SITE_PATTERN, HS_SITE_Q, HS_SITE_K,
                                            HS_SITE_V, HS_SITE_RESID_PRE, HS_SITE_ATTN_OUT,
                                            HS_SITE_MLP_OUT };
static const hs_metric_id METRIC[HS_ATP_SITES] = { HS_M_ATP_Z, HS_M_ATP_PATTERN, HS_M_ATP_Q,
                                                   HS_M_ATP_K, HS_M_ATP_V, HS_M_ATP_RESID_PRE,
                                                   HS_M_ATP_ATTN_OUT, HS_M_ATP_MLP_OUT };
/* the head sites' AtP* metrics (z .. v) */
static const hs_metric_id STAR[HS_ATP_RESID_PRE] = { HS_M_ATP_STAR_Z, HS_M_ATP_STAR_PATTERN,
                                                     HS_M_ATP_STAR_Q, HS_M_ATP_STAR_K,
                                                     HS_M_ATP_STAR_V };

enum { HEAD_SITES = (1 << HS_ATP_RESID_PRE) - 1, NO_ITEM = -1 };

const char *hs_atp_site_name(int s)
{
    return s >= 0 && s < HS_ATP_SITES ? SITE[s] : "?";
}

static int is_head(int s) { return s < HS_ATP_RESID_PRE; }

/* Rows of site s at layer l: its heads (k, v: key/value heads; MLA's one
 * latent), or positions. */
static int site_width(const hs_model_config *c, int s, int l, int T)
{
    if (!is_head(s))
        return T;
    if (s == HS_ATP_K || s == HS_ATP_V)
        return c->mla ? 1 : c->n_kv_head[l];
    return c->n_head[l];
}

int hs_atp_sites(int *sites, const char *list, const hs_model_config *c, const hs_prompt_set *ps)
{
    *sites = 0;
    if (!list) {
        *sites = 1 << HS_ATP_Z;
        if (ps->n_group == 1)
            *sites |= 1 << HS_ATP_RESID_PRE | 1 << HS_ATP_ATTN_OUT |
                      (c->mlp != HS_MLP_NONE ? 1 << HS_ATP_MLP_OUT : 0);
        return HS_OK;
    }
    const char *p = list;
    while (*p) {
        const size_t n = strcspn(p, ",");
        int s = 0;
        while (s < HS_ATP_SITES && !(strlen(SITE[s]) == n && !strncmp(p, SITE[s], n)))
            s++;
        if (s == HS_ATP_SITES)
            return hs_fail(HS_EINVAL, "--site: unknown site '%.*s' (z, pattern, q, k, v, "
                           "resid_pre, attn_out, mlp_out)", (int)n, p);
        *sites |= 1 << s;
        p += n + (p[n] == ',');
    }
    return *sites ? HS_OK : hs_fail(HS_EINVAL, "--site: no site given");
}

int hs_atp_family_check(const hs_model_config *c)
{
    return c->encoder ? hs_fail(HS_EINVAL, "the attribution's patched patterns are causal (a "
                                "query over the keys up to it), while an encoder (%s) attends "
                                "both ways; patch gives its exact effects",
                                hs_family_name(c->family))
                      : HS_OK;
}

int hs_atp_check(const hs_model_config *c, const hs_prompt_set *ps, const hs_atp_opts *o)
{
    if (hs_atp_family_check(c))
        return HS_EINVAL;
    if (!(o->sites & ((1 << HS_ATP_SITES) - 1)))
        return hs_fail(HS_EINVAL, "atp: no site to attribute");
    if ((o->sites & 1 << HS_ATP_MLP_OUT) && c->mlp == HS_MLP_NONE)
        return hs_fail(HS_EINVAL, "--site mlp_out: the model has no MLP");
    if (hs_heads_fit(c))
        return HS_EINVAL;
    if (o->star && c->n_layer < 2)
        return hs_fail(HS_EINVAL, "--star: GradDrop averages over the other L-1 layers; the "
                                  "model has one layer");
    if (o->star && !(o->sites & HEAD_SITES))
        return hs_fail(HS_EINVAL, "--star applies to the head sites (z, pattern, q, k, v): "
                                  "none is chosen");
    if (o->verify < 0 || (o->verify && !(o->sites & (1 << HS_ATP_Z | 1 << HS_ATP_PATTERN))))
        return hs_fail(HS_EINVAL, "--verify K: exact patching verifies the z and pattern sites: "
                                  "choose one of them");
    if ((o->sites & ~HEAD_SITES) && ps->n_group > 1) {
        const hs_prompt_group *a = &ps->group[0], *b = &ps->group[1];
        return hs_fail(HS_EINVAL, "the position sites (resid_pre, attn_out, mlp_out) are keyed "
                       "by position and need prompts of one length: line %d has %d tokens, line "
                       "%d has %d (attribute the head sites only, --site z,pattern,q,k,v, or "
                       "split the file by length)", a->line[0], a->T, b->line[0], b->T);
    }
    return HS_OK;
}

void hs_atp_result_free(hs_atp_result *r)
{
    hs_head_table_free(&r->heads);
    free(r->pos);
    memset(r, 0, sizeof *r);
}

/* One study: the per-prompt table and one batch's runs. Row p of tab holds
 * prompt p's LD clean and corrupt, then each chosen (site, layer)'s terms
 * (its heads or positions), then the AtP* sums of the head sites. */
typedef struct {
    const hs_model *m;
    const hs_atp_opts *o;
    int T, maxH;
    size_t items;
    long off[HS_ATP_SITES][HS_MAX_LAYERS];       /* NO_ITEM: not chosen */
    long star_off[HS_ATP_RESID_PRE][HS_MAX_LAYERS];
    double *tab;                                 /* (n, items) */
    hs_acts src, base;
    hs_real *dl;                                 /* (B,T,V) the logit difference's gradient */
    hs_real *qk;                                 /* star: [L][2][maxH] maps (B,T,T) */
    int B, Tb, pass;                             /* pass: -1 plain, else the stopped layer */
    size_t p0;                                   /* the batch's first row */
} atp_run;

static double *row_of(atp_run *r, int b)
{
    return r->tab + (r->p0 + (size_t)b) * r->items;
}

/* sum over the head's (or position's) elements of (source - base) * g for
 * every (sequence, head|position) of site view g. */
static void delta_dot(atp_run *r, const hs_site_view *g, int s, long off, int star)
{
    const hs_model_config *c = &r->m->cfg;
    hs_site_view vb, vs;
    if (hs_acts_site_view(&vb, &r->base, c, g->site, g->layer) ||
        hs_acts_site_view(&vs, &r->src, c, g->site, g->layer))
        return;
    const int n = is_head(s) ? g->heads : g->T;
    for (int b = 0; b < g->B; b++)
        for (int k = 0; k < n; k++) {
            double acc = 0;
            const int t0 = is_head(s) ? 0 : k, t1 = is_head(s) ? g->T : k + 1;
            const int h = is_head(s) ? k : 0;
            for (int t = t0; t < t1; t++) {
                const size_t at = b * g->sb + t * g->st + h * g->sh;
                for (int i = 0; i < g->width; i++)
                    acc += ((double)vs.x[at + i] - vb.x[at + i]) * g->x[at + i];
            }
            double *row = row_of(r, b);
            if (star)
                row[off + k] += fabs(acc);
            else
                row[off + k] = acc;
        }
}

/* sum_{t,s} (A' - A)_{ts} dA_{ts} of head h of sequence b, A the base run's map. */
static double map_dot(const hs_real *Ap, const hs_real *A, const hs_site_view *g, int b, int h)
{
    double acc = 0;
    const hs_real *dA = g->x + b * g->sb + h * g->sh;
    for (int t = 0; t < g->T; t++)
        for (int s = 0; s < g->width; s++) {
            const size_t i = (size_t)t * g->width + s;
            acc += ((double)Ap[i] - A[i]) * dA[t * g->st + s];
        }
    return acc;
}

/* The pattern's gradient: atp_pattern (plain pass), and in AtP*'s passes the
 * pattern, q and k terms with the QK fix's maps. */
static void pattern_terms(atp_run *r, const hs_site_view *g)
{
    const hs_model_config *c = &r->m->cfg;
    const int l = g->layer, H = g->heads, T = g->T, star = r->pass >= 0;
    const size_t TT = (size_t)T * T, BTT = (size_t)g->B * TT;
    const int group = c->mla ? H : H / c->n_kv_head[l];
    const hs_real *A = r->base.layer[l].attn.att, *As = r->src.layer[l].attn.att;
    for (int b = 0; b < g->B; b++) {
        double *row = row_of(r, b);
        for (int h = 0; h < H; h++) {
            const size_t mo = ((size_t)b * H + h) * TT;
            if (r->off[HS_ATP_PATTERN][l] != NO_ITEM || (star && r->star_off[HS_ATP_PATTERN][l] != NO_ITEM)) {
                const double v = map_dot(As + mo, A + mo, g, b, h);
                if (!star)
                    row[r->off[HS_ATP_PATTERN][l] + h] = v;
                else
                    row[r->star_off[HS_ATP_PATTERN][l] + h] += fabs(v);
            }
            if (!star)
                continue;
            if (r->star_off[HS_ATP_Q][l] != NO_ITEM) {
                const hs_real *Q = r->qk + (((size_t)l * 2 + 0) * r->maxH + h) * BTT + b * TT;
                row[r->star_off[HS_ATP_Q][l] + h] += fabs(map_dot(Q, A + mo, g, b, h));
            }
        }
        if (!star || r->star_off[HS_ATP_K][l] == NO_ITEM)
            continue;
        for (int j = 0; j < H / group; j++) { /* a key's patch moves its group's maps */
            double v = 0;
            for (int h = j * group; h < (j + 1) * group; h++) {
                const hs_real *K = r->qk + (((size_t)l * 2 + 1) * r->maxH + h) * BTT + b * TT;
                v += map_dot(K, A + ((size_t)b * H + h) * TT, g, b, h);
            }
            row[r->star_off[HS_ATP_K][l] + j] += fabs(v);
        }
    }
}

static int on_grad(void *ctx, const hs_site_view *g)
{
    atp_run *r = ctx;
    if (g->site == HS_SITE_PATTERN) {
        pattern_terms(r, g);
        return HS_OK;
    }
    if (g->layer >= r->m->cfg.n_layer) /* resid_pre of the final residual */
        return HS_OK;
    int s = 0;
    while (HOOK[s] != g->site)
        s++;
    if (r->pass < 0 && r->off[s][g->layer] != NO_ITEM)
        delta_dot(r, g, s, r->off[s][g->layer], 0);
    else if (r->pass >= 0 && is_head(s) && r->star_off[s][g->layer] != NO_ITEM)
        delta_dot(r, g, s, r->star_off[s][g->layer], 1);
    return HS_OK;
}

/* The offsets of every chosen (site, layer) in a row. */
static void plan_items(atp_run *r)
{
    const hs_model_config *c = &r->m->cfg;
    size_t at = 2;
    for (int s = 0; s < HS_ATP_SITES; s++)
        for (int l = 0; l < c->n_layer; l++) {
            r->off[s][l] = NO_ITEM;
            if (r->o->sites & 1 << s) {
                r->off[s][l] = (long)at;
                at += (size_t)site_width(c, s, l, r->T);
            }
        }
    for (int s = 0; s < HS_ATP_RESID_PRE; s++)
        for (int l = 0; l < c->n_layer; l++) {
            r->star_off[s][l] = NO_ITEM;
            if (r->o->star && (r->o->sites & 1 << s)) {
                r->star_off[s][l] = (long)at;
                at += (size_t)site_width(c, s, l, 0);
            }
        }
    r->items = at;
}

/* AtP*'s maps of batch prompts: per layer and head, the map with the
 * source's queries, and with the source's keys (MLA: latent) of its group. */
static int qk_maps(atp_run *r)
{
    const hs_model_config *c = &r->m->cfg;
    const size_t BTT = (size_t)r->B * r->Tb * r->Tb;
    int rc = HS_OK;
    for (int l = 0; !rc && l < c->n_layer; l++)
        for (int h = 0; !rc && h < c->n_head[l]; h++) {
            hs_real *q = r->qk + (((size_t)l * 2) * r->maxH + h) * BTT;
            hs_real *k = r->qk + (((size_t)l * 2 + 1) * r->maxH + h) * BTT;
            if (r->o->sites & 1 << HS_ATP_Q)
                rc = hs_acts_head_maps(q, r->m, l, h, &r->src, &r->base, &r->base);
            if (!rc && (r->o->sites & 1 << HS_ATP_K))
                rc = hs_acts_head_maps(k, r->m, l, h, &r->base, &r->src, &r->base);
        }
    return rc;
}

/* The backward passes of the batch: the plain estimate, then AtP*'s one per
 * stopped layer. */
static int backwards(atp_run *r)
{
    const hs_model_config *c = &r->m->cfg;
    const int sites = r->o->sites;
    hs_grad_hooks gh = { .ctx = r };
    for (int s = 0; s < HS_ATP_SITES; s++)
        if (sites & 1 << s)
            gh.site[HOOK[s]] = on_grad;
    r->pass = -1;
    int rc = hs_backward_from(&r->base, r->m, r->dl, NULL, &gh);
    if (rc || !r->o->star)
        return rc;
    unsigned char stop[HS_MAX_LAYERS];
    memset(&gh, 0, sizeof gh);
    gh.ctx = r, gh.stop = stop;
    gh.site[HS_SITE_Z] = sites & 1 << HS_ATP_Z ? on_grad : NULL;
    gh.site[HS_SITE_V] = sites & 1 << HS_ATP_V ? on_grad : NULL;
    if (sites & (1 << HS_ATP_PATTERN | 1 << HS_ATP_Q | 1 << HS_ATP_K))
        gh.site[HS_SITE_PATTERN] = on_grad;
    for (int l = 0; !rc && l < c->n_layer; l++) {
        memset(stop, 0, sizeof stop);
        stop[l] = 1;
        r->pass = l;
        rc = hs_backward_from(&r->base, r->m, r->dl, NULL, &gh);
    }
    return rc;
}

/* Prompts [i0, i0+B) of group g, rows from p0. */
static int run_batch(atp_run *r, const hs_prompt_group *g, int i0, int B)
{
    const hs_model *m = r->m;
    const int T = g->T, V = m->cfg.vocab_size;
    const int32_t *clean = g->clean + (size_t)i0 * T, *corrupt = g->corrupt + (size_t)i0 * T;
    const int32_t *ans = g->answer + i0, *wrong = g->wrong + i0;
    r->B = B, r->Tb = T;
    int rc = hs_acts_set_batch(&r->src, B);
    if (!rc)
        rc = hs_acts_set_batch(&r->base, B);
    if (!rc)
        rc = hs_forward(&r->src, m, r->o->noising ? corrupt : clean, NULL, NULL);
    if (!rc)
        rc = hs_forward(&r->base, m, r->o->noising ? clean : corrupt, NULL, NULL);
    if (rc)
        return rc;
    memset(r->dl, 0, sizeof(hs_real) * (size_t)B * T * V);
    for (int b = 0; b < B; b++) {
        const double s = hs_logit_diff(r->src.logits, b, T, V, ans[b], wrong[b]);
        const double k = hs_logit_diff(r->base.logits, b, T, V, ans[b], wrong[b]);
        double *row = row_of(r, b);
        row[0] = r->o->noising ? k : s, row[1] = r->o->noising ? s : k;
        hs_real *last = r->dl + ((size_t)b * T + T - 1) * V;
        last[ans[b]] += 1;
        last[wrong[b]] -= 1;
    }
    if (r->o->star && (rc = qk_maps(r)))
        return rc;
    return backwards(r);
}

static void free_batch(atp_run *r)
{
    hs_acts_free(&r->src);
    hs_acts_free(&r->base);
    free(r->dl), free(r->qk);
    r->dl = r->qk = NULL;
}

static int alloc_batch(atp_run *r, int B, int T)
{
    const hs_model_config *c = &r->m->cfg;
    const int maps = r->o->star || (r->o->sites & 1 << HS_ATP_PATTERN);
    int rc = hs_acts_alloc(&r->src, c, B, T, maps ? HS_ACTS_TRAIN : HS_ACTS_INFER);
    if (!rc)
        rc = hs_acts_alloc(&r->base, c, B, T, HS_ACTS_TRAIN);
    r->dl = hs_calloc((size_t)B * T * c->vocab_size, sizeof(hs_real), "logit gradient");
    if (!rc && r->o->star)
        r->qk = hs_calloc((size_t)c->n_layer * 2 * r->maxH * B * T * T, sizeof(hs_real),
                          "AtP* maps");
    if (!rc && (!r->dl || (r->o->star && !r->qk)))
        rc = HS_ENOMEM;
    return rc;
}

/* Item `it` of the table over prompts (prompt order), each beside the
 * prompt's gap LD_clean - LD_corrupt (items 0 and 1). */
static hs_welford2 column(const atp_run *r, size_t n, size_t it, double scale)
{
    hs_welford2 w = { 0 };
    for (const double *row = r->tab; row < r->tab + n * r->items; row += r->items)
        hs_welford2_add(&w, row[it] * scale, row[0] - row[1]);
    return w;
}

static int result_rows(hs_atp_result *res, const atp_run *r, size_t n)
{
    const hs_model_config *c = &r->m->cfg;
    hs_ld_baseline ld = { 0 };
    for (const double *row = r->tab; row < r->tab + n * r->items; row += r->items)
        hs_ld_baseline_add(&ld, row[0], row[1]);
    double span = 0;
    int rc = hs_patch_baseline(&res->heads, &span, &ld);
    const double towards = r->o->noising ? -span : span;
    res->ld_clean = ld.clean.mean, res->ld_corrupt = ld.corrupt.mean, res->n = ld.clean.n;
    for (int s = 0; !rc && s < HS_ATP_SITES; s++)
        for (int l = 0; !rc && l < c->n_layer && r->off[s][l] != NO_ITEM; l++)
            for (int k = 0; !rc && k < site_width(c, s, l, r->T); k++) {
                const hs_welford2 w = column(r, n, (size_t)r->off[s][l] + k, 1);
                double v, e;
                hs_patch_ratio(&v, &e, &w, towards, span);
                if (is_head(s))
                    rc = hs_head_table_add(&res->heads, l, k, hs_metric(METRIC[s])->name, v, e,
                                           w.n);
                else
                    res->pos[res->n_pos++] =
                        (hs_position_row){ l, k, hs_metric(METRIC[s])->name, v, e, w.n, -1 };
            }
    for (int s = 0; !rc && s < HS_ATP_RESID_PRE; s++)
        for (int l = 0; !rc && l < c->n_layer && r->star_off[s][l] != NO_ITEM; l++)
            for (int k = 0; !rc && k < site_width(c, s, l, 0); k++) {
                const hs_welford2 w =
                    column(r, n, (size_t)r->star_off[s][l] + k, 1.0 / (c->n_layer - 1));
                double v, e;
                hs_patch_ratio(&v, &e, &w, fabs(span), span);
                rc = hs_head_table_add(&res->heads, l, k, hs_metric(STAR[s])->name, v, e, w.n);
            }
    return rc;
}

/* --verify K: hs_patch's exact values of the K heads of largest |atp| of z
 * (and of pattern), as rows beside the estimates. */
static int verify(hs_atp_result *res, const hs_model *m, const hs_prompt_set *ps,
                  const hs_atp_opts *o)
{
    hs_patch_opts po = { .batch = o->batch, .stop = o->stop };
    if (o->sites & 1 << HS_ATP_Z)
        po.sites |= 1 << HS_PATCH_Z;
    if (o->sites & 1 << HS_ATP_PATTERN)
        po.sites |= 1 << HS_PATCH_PATTERN;
    hs_patch_result pr;
    const int patched = hs_patch(&pr, m, ps, &po);
    int rc = patched;
    const int site[2][2] = { { HS_ATP_Z, HS_PATCH_Z }, { HS_ATP_PATTERN, HS_PATCH_PATTERN } };
    for (int k = 0; !rc && k < 2; k++) {
        if (!(o->sites & 1 << site[k][0]))
            continue;
        const char *atp = hs_metric(METRIC[site[k][0]])->name;
        const char *patch = hs_patch_metric(site[k][1]);
        const int n0 = res->heads.n;
        for (int chosen = 0; !rc && chosen < o->verify; chosen++) {
            const hs_metric_row *best = NULL;
            for (int i = 0; i < n0; i++) {
                const hs_metric_row *x = &res->heads.rows[i];
                if (strcmp(x->metric, atp) || hs_head_table_find(&res->heads, x->layer, x->head,
                                                                 patch))
                    continue;
                if (!best || fabs(x->value) > fabs(best->value))
                    best = x;
            }
            if (!best)
                break;
            const int l = best->layer, h = best->head;
            const hs_metric_row *p = hs_head_table_find(&pr.heads, l, h, patch);
            rc = p ? hs_head_table_add(&res->heads, l, h, patch, p->value, p->stderr_value, p->n)
                   : hs_fail(HS_EINVAL, "atp: patch gave no %s of layer %d head %d", patch, l, h);
        }
    }
    if (!patched)
        hs_patch_result_free(&pr);
    return rc;
}

int hs_atp(hs_atp_result *res, const hs_model *m, const hs_prompt_set *ps, const hs_atp_opts *o)
{
    memset(res, 0, sizeof *res);
    const hs_model_config *c = &m->cfg;
    int rc = hs_atp_check(c, ps, o);
    if (rc)
        return rc;
    atp_run r = { .m = m, .o = o, .T = (o->sites & ~HEAD_SITES) ? ps->group[0].T : 0 };
    for (int l = 0; l < c->n_layer; l++)
        r.maxH = c->n_head[l] > r.maxH ? c->n_head[l] : r.maxH;
    plan_items(&r);
    const size_t n = (size_t)ps->n;
    const int Bmax = o->batch > 0 ? o->batch : 32;
    r.tab = hs_calloc(n * r.items, sizeof *r.tab, "atp rows");
    int *owner = hs_calloc(n, sizeof *owner, "atp rows");
    res->pos = hs_calloc((size_t)3 * c->n_layer * (r.T ? r.T : 1), sizeof *res->pos,
                         "position rows");
    if (!r.tab || !owner || !res->pos)
        rc = HS_ENOMEM;
    size_t total = 0, done = 0, p0 = 0;
    long batch = 0;
    for (int g = 0; g < ps->n_group; g++)
        total += (size_t)(ps->group[g].n + Bmax - 1) / Bmax;
    for (int g = 0; !rc && g < ps->n_group; g++) {
        const hs_prompt_group *pg = &ps->group[g];
        const int B = pg->n < Bmax ? pg->n : Bmax;
        rc = alloc_batch(&r, B, pg->T);
        for (int i0 = 0; !rc && i0 < pg->n; i0 += B, batch++) {
            const int nb = pg->n - i0 < B ? pg->n - i0 : B;
            r.p0 = p0 + (size_t)i0;
            for (int i = 0; i < nb; i++)
                owner[r.p0 + i] = (int)(batch % hs_dist_size());
            if (o->stop && *o->stop)
                rc = hs_fail(HS_EINTR, "atp: interrupted");
            else if (batch % hs_dist_size() == hs_dist_rank())
                rc = run_batch(&r, pg, i0, nb);
            if (o->progress)
                o->progress(o->ctx, ++done, total);
        }
        p0 += (size_t)pg->n;
        free_batch(&r);
    }
    if (hs_dist_size() > 1)
        rc = hs_dist_share_rows(rc, r.tab, n, r.items, owner);
    if (!rc)
        rc = result_rows(res, &r, n);
    if (!rc && o->verify)
        rc = verify(res, m, ps, o);
    res->T = r.T;
    free(r.tab), free(owner);
    if (rc)
        hs_atp_result_free(res);
    return rc;
}
