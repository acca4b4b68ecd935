/* Activation patching (patch.h): both runs once per batch, every patch of a
 * layer stacked into one continuation from that layer. */
#include "patch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ablate.h"
#include "cache.h"
#include "dist.h"
#include "intervene.h"
#include "linalg.h"
#include "metrics.h"
#include "stack.h"
#include "transformer.h"

static const char *const site_names[HS_PATCH_SITES] = { "z", "pattern", "resid_pre", "attn_out",
                                                        "mlp_out" };
static const char *const metric_names[HS_PATCH_SITES] = { "patch_z", "patch_pattern",
                                                          "patch_resid_pre", "patch_attn_out",
                                                          "patch_mlp_out" };
/* The hook site (model/hooks.h) each patch site replaces. */
static const hs_site hook_site[HS_PATCH_SITES] = { HS_SITE_Z, HS_SITE_PATTERN, HS_SITE_RESID_PRE,
                                                   HS_SITE_ATTN_OUT, HS_SITE_MLP_OUT };

enum { POS_SITES = 1 << HS_PATCH_RESID_PRE | 1 << HS_PATCH_ATTN_OUT | 1 << HS_PATCH_MLP_OUT };

const char *hs_patch_site_name(int s)
{
    return s >= 0 && s < HS_PATCH_SITES ? site_names[s] : "?";
}

const char *hs_patch_metric(int s)
{
    return s >= 0 && s < HS_PATCH_SITES ? metric_names[s] : "?";
}

int hs_patch_site_is_head(int s)
{
    return s == HS_PATCH_Z || s == HS_PATCH_PATTERN;
}

double hs_logit_diff(const hs_real *logits, int row, int T, int V, int answer, int wrong)
{
    const hs_real *last = logits + ((size_t)row * T + T - 1) * V;
    return (double)last[answer] - (double)last[wrong];
}

int hs_patch_baseline(hs_head_table *t, double *span, const hs_ld_baseline *b)
{
    *span = b->clean.mean - b->corrupt.mean;
    if (!(*span != 0) || !isfinite(*span))
        return hs_fail(HS_EINVAL, "the mean logit difference of the clean prompts (%.9g) equals "
                       "that of the corrupt ones (%.9g): every patching value would be 0/0 (are "
                       "clean and corrupt the same prompts?)", b->clean.mean, b->corrupt.mean);
    const double se = hs_welford_stderr(&b->gap);
    int rc = hs_head_table_add_welford(t, -1, -1, HS_METRIC(LOGIT_DIFF_CLEAN), &b->clean);
    if (!rc)
        rc = hs_head_table_add_welford(t, -1, -1, HS_METRIC(LOGIT_DIFF_CORRUPT), &b->corrupt);
    if (!rc)
        rc = hs_head_table_add(t, -1, -1, HS_METRIC(LOGIT_DIFF_GAP), *span, se, b->gap.n);
    if (!rc)
        rc = hs_head_table_add(t, -1, -1, HS_METRIC(PREMISE_OK), fabs(*span) >= 2 * se, 0,
                               b->gap.n);
    return rc;
}

void hs_patch_ratio(double *value, double *stderr_value, const hs_welford2 *w, double towards,
                    double span)
{
    *value = w->mx / towards;
    /* D_i = s dG_i: sum (dP_i - v D_i)^2 around its mean (0) from the
     * moments, never below 0 where it cancels to rounding */
    const double s = towards * span < 0 ? -1 : 1, v = *value;
    double ss = w->m2x - 2 * v * s * w->cxy + v * v * w->m2y;
    ss = ss > 0 ? ss : 0;
    *stderr_value = w->n > 1 ? sqrt(ss / (double)(w->n - 1) / (double)w->n) / fabs(span) : 0;
}

int hs_patch_check(const hs_model_config *c, const hs_prompt_set *ps, const hs_patch_opts *o)
{
    if (!(o->sites & ((1 << HS_PATCH_SITES) - 1)))
        return hs_fail(HS_EINVAL, "patch: no site to patch");
    if ((o->sites & 1 << HS_PATCH_MLP_OUT) && c->mlp == HS_MLP_NONE)
        return hs_fail(HS_EINVAL, "--site mlp_out: the model has no MLP");
    if (hs_heads_fit(c))
        return HS_EINVAL;
    if ((o->sites & POS_SITES) && ps->n_group > 1) {
        const hs_prompt_group *a = &ps->group[0], *b = &ps->group[1];
        return hs_fail(HS_EINVAL, "the position sites (resid_pre, attn_out, mlp_out) are keyed "
                       "by position and need prompts of one length: line %d has %d tokens, line "
                       "%d has %d (patch the head sites only, --site z,pattern, or split the "
                       "file by length)", a->line[0], a->T, b->line[0], b->T);
    }
    return HS_OK;
}

void hs_patch_result_free(hs_patch_result *r)
{
    hs_head_table_free(&r->heads);
    free(r->pos);
    memset(r, 0, sizeof *r);
}

typedef struct {
    int site, idx; /* idx: the head (z, pattern) or the position */
} job;

/* One batch of prompts and what every patch of it needs. */
typedef struct {
    const hs_model *m;
    const hs_patch_opts *o;
    int B, T, stack, Tpos;
    const int32_t *base_tok, *ans, *wrong; /* (B,T), (B), (B) */
    int32_t *stk_tok;                      /* (stack*B, T): copies of base_tok */
    hs_acts src, base, st;                 /* src keeps maps when pattern is patched */
    hs_act_cache maps;                     /* pattern: the source run's maps per layer */
    hs_intervention *iv;                   /* [stack] each copy's hooked patch */
    job *jobs;                             /* the current layer's patches */
    hs_real *dz;                           /* (B*T, dh) */
    double *ld_base, *gap;                 /* (B), (B): LD_base, LD_clean - LD_corrupt */
    hs_welford2 *head_acc;                 /* [2][L*HS_MAX_HEADS] (LD_patched - LD_base, gap) */
    hs_welford2 *pos_acc;                  /* [3][L*Tpos] */
} run;

static hs_welford2 *acc(run *r, int site, int l, int idx)
{
    const int L = r->m->cfg.n_layer;
    if (hs_patch_site_is_head(site))
        return &r->head_acc[((size_t)site * L + l) * HS_MAX_HEADS + idx];
    return &r->pos_acc[((size_t)(site - HS_PATCH_RESID_PRE) * L + l) * r->Tpos + idx];
}

/* The source tensor of the site of layer l, in the site's layout. */
static const hs_real *source_of(run *r, int site, int l)
{
    const hs_layer_acts *s = &r->src.layer[l];
    switch (site) {
    case HS_PATCH_Z: return s->attn.z;
    case HS_PATCH_PATTERN: return hs_act_cache_get(&r->maps, HS_SITE_PATTERN, l, NULL);
    case HS_PATCH_RESID_PRE: return s->in;
    case HS_PATCH_ATTN_OUT: return s->attn_out;
    default: return s->mlp_out;
    }
}

/* The patch as an intervention at its hook site (the whole tensor of the
 * source run replaces the selected head or position). */
static hs_intervention patch_iv(run *r, const job *jb, int l)
{
    const int head = hs_patch_site_is_head(jb->site) ? jb->idx : 0;
    const int pos = hs_patch_site_is_head(jb->site) ? -1 : jb->idx;
    return (hs_intervention){ hook_site[jb->site], l, head, pos, HS_IV_REPLACE,
                              source_of(r, jb->site, l), 0 };
}

/* dz (B*T, dh) = z' - z of head h of layer l in the base run: z' the
 * source's z, or (pattern) the source's map times the base run's values. */
static void head_change(run *r, int site, int l, int h)
{
    const hs_model_config *c = &r->m->cfg;
    const int T = r->T, dh = c->head_dim, H = c->n_head[l], G = c->n_kv_head[l];
    const size_t BT = (size_t)r->B * T;
    const hs_real *z = r->base.layer[l].attn.z;
    if (site == HS_PATCH_Z) {
        const hs_real *zs = r->src.layer[l].attn.z;
        for (size_t row = 0; row < BT; row++)
            for (int i = 0; i < dh; i++)
                r->dz[row * dh + i] = zs[(row * H + h) * dh + i] - z[(row * H + h) * dh + i];
        return;
    }
    const hs_real *P = source_of(r, HS_PATCH_PATTERN, l); /* (B,H,T,T) */
    const hs_real *v = r->base.layer[l].attn.v;           /* (B,T,G,dh) */
    const int g = h / (H / G);
    for (int b = 0; b < r->B; b++)
        hs_gemm(0, 0, T, dh, T, 1, P + ((size_t)b * H + h) * T * T, T,
                v + (size_t)b * T * G * dh + (size_t)g * dh, G * dh, 0, r->dz + (size_t)b * T * dh,
                dh);
    for (size_t row = 0; row < BT; row++)
        for (int i = 0; i < dh; i++)
            r->dz[row * dh + i] -= z[(row * H + h) * dh + i];
}

/* Copy j of the stacked continuation of layer l: the base residual after
 * attention with the patch applied there (z, pattern, attn_out) or by a
 * hook in the continuation (mlp_out), or (resid) the residual after
 * attention of layer l-1 with a hook on resid_pre of layer l. With a
 * parallel residual the continuation's MLP reads the layer's input too. */
static void prepare_copy(run *r, int l, const job *jb, int j, int resid)
{
    const hs_model_config *c = &r->m->cfg;
    const int d = c->d_model, T = r->T;
    const size_t BT = (size_t)r->B * T;
    const int from = resid ? l - 1 : l;
    r->iv[j] = (hs_intervention){ .layer = -1 };
    if (from >= 0 && c->parallel_residual)
        memcpy(r->st.layer[from].in + (size_t)j * BT * d, r->base.layer[from].in,
               sizeof(hs_real) * BT * d);
    if (resid) {
        if (l > 0)
            memcpy(r->st.layer[l - 1].r1 + (size_t)j * BT * d, r->base.layer[l - 1].r1,
                   sizeof(hs_real) * BT * d);
        r->iv[j] = patch_iv(r, jb, l);
        return;
    }
    const hs_layer_acts *bl = &r->base.layer[l];
    if (hs_patch_site_is_head(jb->site)) {
        /* the head's change of W_o's output, through the output norm if any */
        head_change(r, jb->site, l, jb->idx);
        hs_head_change_resid(&r->st.layer[l], (size_t)j * BT, c->out_norm ? bl->attn_raw : bl->r1,
                             bl->in, r->dz, jb->idx, r->m, l, BT);
        return;
    }
    hs_real *blk = r->st.layer[l].r1 + (size_t)j * BT * d;
    memcpy(blk, bl->r1, sizeof(hs_real) * BT * d);
    if (jb->site == HS_PATCH_ATTN_OUT) {
        const hs_real *in = r->base.layer[l].in, *ao = r->src.layer[l].attn_out;
        for (int b = 0; b < r->B; b++) {
            const size_t off = ((size_t)b * T + jb->idx) * d;
            for (int i = 0; i < d; i++)
                blk[off + i] = in[off + i] + ao[off + i];
        }
    } else {
        r->iv[j] = patch_iv(r, jb, l);
    }
}

/* The patches jobs[0..nj) of layer l, stacked (resid: continuing from layer
 * l-1, or the embeddings when l is 0). */
static int fast_jobs(run *r, int l, int nj, int resid)
{
    const hs_model *m = r->m;
    int rc = HS_OK;
    for (int j0 = 0; !rc && j0 < nj; j0 += r->stack) {
        const int n = nj - j0 < r->stack ? nj - j0 : r->stack;
        if ((rc = hs_acts_set_batch(&r->st, n * r->B)))
            break;
        for (int j = 0; j < n; j++)
            prepare_copy(r, l, &r->jobs[j0 + j], j, resid);
        /* Only the last position's logits are read, so the last layer's MLP
         * runs there alone -- unless a patch of that MLP's output is hooked
         * at another position. */
        int last = 1;
        for (int j = 0; j < n; j++)
            last &= !(r->iv[j].layer == m->cfg.n_layer - 1 && r->iv[j].site == HS_SITE_MLP_OUT);
        hs_hooks hooks = { 0 };
        hs_stack_plan plan = { r->iv, n, r->B };
        rc = hs_stack_hooks_attach(&hooks, &m->cfg, &plan);
        const int from = resid ? l - 1 : l;
        if (!rc && from < 0) /* resid_pre of layer 0: from the embeddings */
            rc = hs_forward_to(&r->st, m, r->stk_tok, 0, &hooks);
        if (!rc)
            rc = last ? hs_forward_from_last(&r->st, m, from < 0 ? 0 : from, &hooks)
                      : hs_forward_from_hooks(&r->st, m, from < 0 ? 0 : from, NULL, &hooks);
        const int T = last ? 1 : r->T;
        for (int j = 0; !rc && j < n; j++)
            for (int i = 0; i < r->B; i++)
                hs_welford2_add(acc(r, r->jobs[j0 + j].site, l, r->jobs[j0 + j].idx),
                                hs_logit_diff(r->st.logits, j * r->B + i, T, m->cfg.vocab_size,
                                              r->ans[i], r->wrong[i]) - r->ld_base[i],
                                r->gap[i]);
    }
    return rc;
}

/* The reference: each patch as one intervention in a full forward. */
static int naive_jobs(run *r, int l, int nj)
{
    const hs_model *m = r->m;
    int rc = hs_acts_set_batch(&r->st, r->B);
    for (int j = 0; !rc && j < nj; j++) {
        hs_intervention iv = patch_iv(r, &r->jobs[j], l);
        hs_hook_plan plan = { &iv, 1, NULL };
        hs_hooks hooks = { 0 };
        rc = hs_hooks_attach(&hooks, &m->cfg, &plan);
        if (!rc)
            rc = hs_forward(&r->st, m, r->base_tok, NULL, &hooks);
        for (int i = 0; !rc && i < r->B; i++)
            hs_welford2_add(acc(r, r->jobs[j].site, l, r->jobs[j].idx),
                            hs_logit_diff(r->st.logits, i, r->T, m->cfg.vocab_size, r->ans[i],
                                          r->wrong[i]) - r->ld_base[i],
                            r->gap[i]);
    }
    return rc;
}

/* Every patch of layer l: resid_pre (continuing from below the layer), then
 * the rest (continuing from the layer's residual after attention). */
static int patch_layer(run *r, int l)
{
    const hs_model_config *c = &r->m->cfg;
    const int sites = r->o->sites;
    int rc = HS_OK;
    for (int pass = 0; !rc && pass < 2; pass++) {
        int nj = 0;
        for (int s = 0; s < HS_PATCH_SITES; s++) {
            if (!(sites & 1 << s) || (s == HS_PATCH_RESID_PRE) != (pass == 0))
                continue;
            const int n = hs_patch_site_is_head(s) ? c->n_head[l] : r->T;
            for (int i = 0; i < n; i++)
                r->jobs[nj++] = (job){ s, i };
        }
        if (nj)
            rc = r->o->naive ? naive_jobs(r, l, nj) : fast_jobs(r, l, nj, pass == 0);
    }
    return rc;
}

/* Patches per continuation: every patch of a layer, within a memory budget
 * for the stacked activations (one copy: one batch's inference activations). */
static int choose_stack(const hs_model_config *c, int B, int T, int most, int asked)
{
    if (asked > 0)
        return asked < most ? asked : most;
    const double per_copy = (double)hs_acts_bytes(c, B, T, HS_ACTS_INFER);
    int s = per_copy > 0 ? (int)(512.0 * (1 << 20) / per_copy) : 1;
    s = s < 1 ? 1 : s;
    return s < most ? s : most;
}

static void free_batch(run *r)
{
    hs_acts_free(&r->src);
    hs_acts_free(&r->base);
    hs_acts_free(&r->st);
    hs_act_cache_free(&r->maps);
    free(r->iv), free(r->jobs), free(r->dz), free(r->ld_base), free(r->gap), free(r->stk_tok);
    r->iv = NULL, r->jobs = NULL, r->dz = NULL, r->ld_base = NULL, r->gap = NULL;
    r->stk_tok = NULL;
}

/* Buffers for batches of up to B prompts of T tokens. */
static int alloc_batch(run *r, int B, int T)
{
    const hs_model_config *c = &r->m->cfg;
    const int pattern = (r->o->sites & 1 << HS_PATCH_PATTERN) != 0;
    int maxH = 0;
    for (int l = 0; l < c->n_layer; l++)
        maxH = c->n_head[l] > maxH ? c->n_head[l] : maxH;
    const int most = 2 * maxH + 3 * T;
    r->stack = r->o->naive ? 1 : choose_stack(c, B, T, most, r->o->stack);
    int rc = hs_acts_alloc(&r->src, c, B, T, pattern ? HS_ACTS_MAPS : HS_ACTS_INFER);
    if (!rc)
        rc = hs_acts_alloc(&r->base, c, B, T, HS_ACTS_INFER);
    if (!rc)
        rc = hs_acts_alloc(&r->st, c, r->stack * B, T,
                           r->o->naive && pattern ? HS_ACTS_MAPS : HS_ACTS_INFER);
    if (!rc && pattern)
        rc = hs_act_cache_init_layers(&r->maps, HS_SITE_PATTERN, c->n_layer, HS_CACHE_COPY);
    r->iv = hs_calloc((size_t)r->stack, sizeof *r->iv, "patch list");
    r->jobs = hs_calloc((size_t)most, sizeof *r->jobs, "patch list");
    r->dz = hs_calloc((size_t)B * T * c->head_dim, sizeof(hs_real), "head change");
    r->ld_base = hs_calloc((size_t)B, sizeof(double), "logit differences");
    r->gap = hs_calloc((size_t)B, sizeof(double), "logit differences");
    r->stk_tok = hs_calloc((size_t)r->stack * B * T, sizeof(int32_t), "tokens");
    if (!rc && (!r->iv || !r->jobs || !r->dz || !r->ld_base || !r->gap || !r->stk_tok))
        rc = HS_ENOMEM;
    return rc;
}

/* Prompts [i0, i0+B) of group g: both runs, then every layer's patches. */
static int patch_batch(run *r, const hs_prompt_group *g, int i0, int B, hs_ld_baseline *ld,
                       size_t *done, size_t total)
{
    const hs_model *m = r->m;
    const int T = g->T, L = m->cfg.n_layer, V = m->cfg.vocab_size;
    const int32_t *clean = g->clean + (size_t)i0 * T, *corrupt = g->corrupt + (size_t)i0 * T;
    r->B = B, r->T = T;
    r->base_tok = r->o->noising ? clean : corrupt;
    r->ans = g->answer + i0, r->wrong = g->wrong + i0;
    for (int j = 0; j < r->stack; j++)
        memcpy(r->stk_tok + (size_t)j * B * T, r->base_tok, sizeof(int32_t) * B * T);
    hs_hooks hooks = { 0 };
    if (r->maps.n)
        hs_act_cache_hooks(&r->maps, &hooks);
    int rc = hs_acts_set_batch(&r->src, B);
    if (!rc)
        rc = hs_acts_set_batch(&r->base, B);
    if (!rc)
        rc = hs_forward(&r->src, m, r->o->noising ? corrupt : clean, NULL, &hooks);
    if (!rc)
        rc = hs_forward(&r->base, m, r->base_tok, NULL, NULL);
    for (int i = 0; !rc && i < B; i++) {
        const double s = hs_logit_diff(r->src.logits, i, T, V, r->ans[i], r->wrong[i]);
        r->ld_base[i] = hs_logit_diff(r->base.logits, i, T, V, r->ans[i], r->wrong[i]);
        const double clean = r->o->noising ? r->ld_base[i] : s;
        const double corrupt = r->o->noising ? s : r->ld_base[i];
        r->gap[i] = clean - corrupt;
        hs_ld_baseline_add(ld, clean, corrupt);
    }
    for (int l = 0; !rc && l < L; l++) {
        if (r->o->stop && *r->o->stop)
            return hs_fail(HS_EINTR, "patch: interrupted in layer %d", l);
        if (l % hs_dist_size() == hs_dist_rank()) /* under mpirun: this rank's layers */
            rc = patch_layer(r, l);
        if (r->o->progress)
            r->o->progress(r->o->ctx, ++*done, total);
    }
    return rc;
}

/* The rows of every patch from the accumulators. */
static int result_rows(hs_patch_result *res, run *r, double span)
{
    const hs_model_config *c = &r->m->cfg;
    const double towards = r->o->noising ? -span : span; /* mean LD_source - mean LD_base */
    int rc = HS_OK;
    for (int s = 0; !rc && s < HS_PATCH_SITES; s++) {
        if (!(r->o->sites & 1 << s))
            continue;
        for (int l = 0; !rc && l < c->n_layer; l++) {
            const int n = hs_patch_site_is_head(s) ? c->n_head[l] : r->Tpos;
            for (int i = 0; !rc && i < n; i++) {
                const hs_welford2 *w = acc(r, s, l, i);
                double v, e;
                hs_patch_ratio(&v, &e, w, towards, span);
                if (hs_patch_site_is_head(s))
                    rc = hs_head_table_add(&res->heads, l, i, metric_names[s], v, e, w->n);
                else
                    res->pos[res->n_pos++] = (hs_position_row){ l, i, metric_names[s], v, e, w->n, -1 };
            }
        }
    }
    return rc;
}

/* Prompts per forward in group g: o->batch (0: 64), and with pattern by
 * default no more than keep 256 MiB of the source's maps of every layer. */
static int group_batch(const hs_model_config *c, const hs_patch_opts *o, const hs_prompt_group *g)
{
    int B = o->batch > 0 ? o->batch : 64;
    B = g->n < B ? g->n : B;
    if ((o->sites & 1 << HS_PATCH_PATTERN) && o->batch <= 0) {
        int maxH = 0;
        for (int l = 0; l < c->n_layer; l++)
            maxH = c->n_head[l] > maxH ? c->n_head[l] : maxH;
        const double per = (double)c->n_layer * maxH * g->T * g->T * sizeof(hs_real);
        const int fit = (int)(256.0 * (1 << 20) / per);
        B = fit < 1 ? 1 : fit < B ? fit : B;
    }
    return B;
}

/* Under mpirun (dist.h) layer l's patches run on rank l mod N, over every
 * batch in order, so each accumulator is one rank's and equals one
 * process's; rank 0 takes each layer's from its rank and sends all back,
 * so that every rank returns the same result. */
static int share_layers(run *r, int rc)
{
    const int L = r->m->cfg.n_layer, N = hs_dist_size(), rank = hs_dist_rank();
    const size_t nh = (size_t)HS_MAX_HEADS, np = (size_t)(r->Tpos ? r->Tpos : 1);
    const size_t per = (2 * nh + 3 * np) * (size_t)L; /* accumulators of this run */
    hs_welford2 *mine = hs_calloc(per, sizeof *mine, "accumulators");
    hs_welford2 *all = hs_calloc(per * (rank ? 1 : (size_t)N), sizeof *all, "accumulators");
    if (!rc && (!mine || !all))
        rc = HS_ENOMEM;
    if (!rc) {
        memcpy(mine, r->head_acc, sizeof *mine * 2 * nh * L);
        memcpy(mine + 2 * nh * L, r->pos_acc, sizeof *mine * 3 * np * L);
    }
    rc = hs_dist_gather(rc, mine, all, sizeof *mine * per);
    for (int s = 0; !rc && rank == 0 && s < 5; s++)
        for (int l = 0; l < L; l++) {
            const size_t n = s < 2 ? nh : np;
            const size_t at = s < 2 ? ((size_t)s * L + l) * nh
                                    : 2 * nh * L + ((size_t)(s - 2) * L + l) * np;
            memcpy(mine + at, all + (size_t)(l % N) * per + at, sizeof *mine * n);
        }
    rc = hs_dist_bcast(rc, mine, sizeof *mine * per);
    if (!rc) {
        memcpy(r->head_acc, mine, sizeof *mine * 2 * nh * L);
        memcpy(r->pos_acc, mine + 2 * nh * L, sizeof *mine * 3 * np * L);
    }
    free(mine), free(all);
    return rc;
}

int hs_patch(hs_patch_result *res, const hs_model *m, const hs_prompt_set *ps,
             const hs_patch_opts *o)
{
    memset(res, 0, sizeof *res);
    const hs_model_config *c = &m->cfg;
    int rc = hs_patch_check(c, ps, o);
    if (rc)
        return rc;
    const int L = c->n_layer;
    run r = { .m = m, .o = o, .Tpos = (o->sites & POS_SITES) ? ps->group[0].T : 0 };
    r.head_acc = hs_calloc((size_t)2 * L * HS_MAX_HEADS, sizeof *r.head_acc, "accumulators");
    r.pos_acc = hs_calloc((size_t)3 * L * (r.Tpos ? r.Tpos : 1), sizeof *r.pos_acc,
                          "accumulators");
    res->pos = hs_calloc((size_t)3 * L * (r.Tpos ? r.Tpos : 1), sizeof *res->pos, "position rows");
    if (!r.head_acc || !r.pos_acc || !res->pos)
        rc = HS_ENOMEM;
    size_t total = 0, done = 0;
    for (int g = 0; g < ps->n_group; g++)
        total += (size_t)L * ((ps->group[g].n + group_batch(c, o, &ps->group[g]) - 1) /
                              group_batch(c, o, &ps->group[g]));
    hs_ld_baseline ld = { 0 };
    for (int g = 0; !rc && g < ps->n_group; g++) {
        const hs_prompt_group *pg = &ps->group[g];
        const int B = group_batch(c, o, pg);
        rc = alloc_batch(&r, B, pg->T);
        for (int i0 = 0; !rc && i0 < pg->n; i0 += B)
            rc = patch_batch(&r, pg, i0, pg->n - i0 < B ? pg->n - i0 : B, &ld, &done, total);
        free_batch(&r);
    }
    if (hs_dist_size() > 1)
        rc = share_layers(&r, rc);
    double span = 0;
    if (!rc)
        rc = hs_patch_baseline(&res->heads, &span, &ld);
    if (!rc)
        rc = result_rows(res, &r, span);
    res->ld_clean = ld.clean.mean, res->ld_corrupt = ld.corrupt.mean, res->n = ld.clean.n;
    res->T = r.Tpos;
    free(r.head_acc), free(r.pos_acc);
    if (rc)
        hs_patch_result_free(res);
    return rc;
}
