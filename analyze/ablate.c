#include "ablate.h"
#include "inputs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "cache.h"
#include "dist.h"
#include "intervene.h"
#include "layers.h"
#include "linalg.h"
#include "stats.h"
#include "transformer.h"

const char *hs_ablate_kind_name(int kind)
{
    static const char *const names[HS_ABLATE_KINDS] = { "zero", "mean", "resample" };
    return kind >= 0 && kind < HS_ABLATE_KINDS ? names[kind] : "?";
}

int hs_ablate_layer_to_table(hs_head_table *t, const hs_ablate_layer *r)
{
    char name[32];
    int rc = HS_OK;
    for (int k = 0; !rc && k < HS_ABLATE_KINDS; k++) {
        snprintf(name, sizeof name, "loss_delta_%s", hs_ablate_kind_name(k));
        for (int h = 0; !rc && h < r->n_heads; h++) {
            const hs_ablate_stat *s = &r->stat[k * r->n_heads + h];
            if (s->n)
                rc = hs_head_table_add(t, r->layer, h, name, s->delta, s->stderr_delta, s->n);
        }
    }
    return rc;
}

static hs_ablate_stat ablate_stat(const hs_welford *w)
{
    return (hs_ablate_stat){ w->mean, hs_welford_stderr(w), w->n };
}

typedef struct {
    int h, kind;
} job;

/* A unit of the sweep: n ablations all[j0 ..] of one layer. */
typedef struct {
    int layer, j0, n;
} item;

static int items_of(const item *items, int n, int layer)
{
    for (int i = 0; i < n; i++)
        if (items[i].layer == layer)
            return 1;
    return 0;
}

/* Everything one run needs, shared by the fast and the naive path. */
typedef struct {
    const hs_model *m;
    const hs_tokens *data;
    hs_ablate_opts *o;
    size_t nb;
    int32_t *in, *tg; /* (B,T) of the current batch */
    double *clean;    /* (nb * B) clean per-sequence mean losses */
    hs_real **zmean;  /* [layer] (H_l * dh): mean head outputs, when asked for */
    job *jobs;        /* the current layer's ablations */
    int njobs;
    hs_welford *acc;  /* [kind * H + h] of the current layer: per-sequence deltas */
    hs_real *kept;    /* NULL, or per batch and layer the clean z, r1 (and input) */
    size_t kept_batch, kept_off[HS_MAX_LAYERS + 1]; /* elements per batch, layer offsets */
} run;

/* The clean activations the fast path continues from -- per batch and layer
 * the head outputs z, the residual after attention r1 (with out_norm: W_o's
 * output before the norm instead) and, with a parallel residual or
 * out_norm, the layer's input -- are kept from the clean pass when all
 * batches fit the budget (hs_ablate_opts.keep_bytes, by default this); otherwise each layer recomputes its batches'
 * clean prefix (hs_forward_to). Either way the same values. */
#define KEEP_BUDGET (256.0 * (1 << 20))

/* Whether the fast path continues from the layer's input too. */
static int needs_input(const hs_model_config *c)
{
    return c->parallel_residual || c->out_norm;
}

static void keep_plan(run *r)
{
    const hs_model_config *c = &r->m->cfg;
    const size_t BT = (size_t)r->o->B * r->o->T, d = (size_t)c->d_model;
    r->kept_off[0] = 0;
    for (int l = 0; l < c->n_layer; l++)
        r->kept_off[l + 1] = r->kept_off[l] + BT * ((size_t)c->n_head[l] * c->head_dim + d +
                                                    (needs_input(c) ? d : 0));
    r->kept_batch = r->kept_off[c->n_layer];
}

/* Layer l's kept z, r1 (out_norm: W_o's output) and input (with a parallel
 * residual or out_norm) of batch b. */
static void kept_at(const run *r, size_t b, int l, hs_real **z, hs_real **r1, hs_real **in)
{
    const hs_model_config *c = &r->m->cfg;
    const size_t BT = (size_t)r->o->B * r->o->T;
    *z = r->kept + b * r->kept_batch + r->kept_off[l];
    *r1 = *z + BT * c->n_head[l] * c->head_dim;
    *in = *r1 + BT * c->d_model;
}

void hs_head_change_resid(hs_layer_acts *la, size_t row0, const hs_real *base, const hs_real *in,
                          const hs_real *dz, int h, const hs_model *m, int l, size_t N)
{
    const hs_model_config *c = &m->cfg;
    const hs_layer_weights *lw = &m->w.layer[l];
    const int d = c->d_model, dh = c->head_dim, H = c->n_head[l];
    const hs_real *w_o = lw->attn.w_o + (size_t)h * dh; /* the head's columns of (d, H*dh) */
    hs_real *out = la->r1 + row0 * d;
    /* x += dz W_o^(h)T: the head's change of W_o's output */
    hs_real *x = c->out_norm ? la->attn_raw + row0 * d : out;
    memcpy(x, base, sizeof(hs_real) * N * d);
    hs_gemm(0, 1, (int)N, d, dh, 1, dz, dh, w_o, H * dh, 1, x, d);
    if (!c->out_norm)
        return;
    hs_real *y = la->attn_out + row0 * d;
    hs_block_norm(y, la->attn_on_mean + row0, la->attn_on_rstd + row0, x, lw->ln_attn_w,
                  lw->ln_attn_b, c, N);
    hs_add(out, in, y, N * d);
}

static double seq_loss(const hs_real *losses, int T)
{
    double s = 0;
    for (int t = 0; t < T; t++)
        s += losses[t];
    return s / T;
}

/* The capture/ intervention of each ablation kind (SPEC §5). */
static const hs_iv_kind iv_kind[HS_ABLATE_KINDS] = { HS_IV_ZERO, HS_IV_MEAN, HS_IV_RESAMPLE };

/* Ablation (kind, head h) of layer l as an intervention on z; zmean
 * (H*dh) the layer's mean head outputs (mean ablation). */
static hs_intervention ablation(int l, int h, int kind, const hs_real *zmean)
{
    return (hs_intervention){ HS_SITE_Z, l, h, -1, iv_kind[kind], zmean, 0 };
}

/* dz (B*T, dh) = z' - z for head h of kind (z: (B*T, H*dh) clean), z' as
 * capture/ defines the ablation: applied to a copy of the head's z (one
 * head, so the intervention's head is 0 and its mean the head's own). */
static int head_change(hs_real *dz, const hs_real *z, const hs_real *zmean, int l, int kind, int h,
                       int B, int T, int H, int dh)
{
    const size_t BT = (size_t)B * T;
    for (size_t row = 0; row < BT; row++)
        memcpy(dz + row * dh, z + (row * H + h) * dh, sizeof(hs_real) * dh);
    const hs_site_view v = hs_site_view_btw(HS_SITE_Z, l, dz, B, T, 1, dh);
    const hs_intervention iv = ablation(l, 0, kind, zmean ? zmean + (size_t)h * dh : NULL);
    int rc = hs_intervene(&v, &iv);
    for (size_t row = 0; !rc && row < BT; row++)
        for (int i = 0; i < dh; i++)
            dz[row * dh + i] -= z[(row * H + h) * dh + i];
    return rc;
}

/* Pass 0: clean per-sequence losses and, for mean ablation, mean z (an
 * activation cache of every layer's z in mean mode). */
static int clean_pass(run *r)
{
    hs_ablate_opts *o = r->o;
    const hs_model_config *c = &r->m->cfg;
    hs_acts a;
    int rc = hs_acts_alloc(&a, c, o->B, o->T, HS_ACTS_INFER);
    if (rc)
        return rc;
    const int want_mean = o->kinds & (1 << HS_ABLATE_MEAN);
    hs_hooks hooks = { 0 };
    hs_act_cache means = { 0 };
    if (want_mean && !(rc = hs_act_cache_init_layers(&means, HS_SITE_Z, c->n_layer, HS_CACHE_MEAN)))
        hs_act_cache_hooks(&means, &hooks);
    hs_welford clean = { 0 };
    for (size_t b = 0; !rc && b < r->nb; b++) {
        hs_batch_at(r->data, b * (size_t)o->B * o->T, o->B, o->T, r->in, r->tg);
        rc = hs_forward(&a, r->m, r->in, r->tg, &hooks);
        for (int i = 0; !rc && i < o->B; i++) {
            r->clean[b * o->B + i] = seq_loss(a.losses + (size_t)i * o->T, o->T);
            hs_welford_add(&clean, r->clean[b * o->B + i]);
        }
        for (int l = 0; !rc && r->kept && l < c->n_layer; l++) {
            hs_real *z, *r1, *in;
            kept_at(r, b, l, &z, &r1, &in);
            const size_t BT = (size_t)o->B * o->T, d = (size_t)c->d_model;
            memcpy(z, a.layer[l].attn.z, sizeof(hs_real) * BT * c->n_head[l] * c->head_dim);
            memcpy(r1, c->out_norm ? a.layer[l].attn_raw : a.layer[l].r1,
                   sizeof(hs_real) * BT * d);
            if (needs_input(c))
                memcpy(in, a.layer[l].in, sizeof(hs_real) * BT * d);
        }
    }
    o->clean_loss = clean.mean;
    for (int l = 0; !rc && want_mean && l < c->n_layer; l++)
        rc = hs_act_cache_mean(&means, HS_SITE_Z, l, r->zmean[l]);
    hs_act_cache_free(&means);
    hs_acts_free(&a);
    return rc;
}

/* ---- the fast path --------------------------------------------------------- */

/* Ablations per continuation: as many as the layer has, within a memory
 * budget for the stacked activations. */
static int choose_stack(const hs_model_config *c, int B, int T, int most_jobs, int asked)
{
    if (asked > 0)
        return asked < most_jobs ? asked : most_jobs;
    /* One stacked continuation is one batch's inference activations. */
    const double per_copy = (double)hs_acts_bytes(c, B, T, HS_ACTS_INFER);
    const double budget = 512.0 * (1 << 20);
    int s = per_copy > 0 ? (int)(budget / per_copy) : 1;
    s = s < 1 ? 1 : s;
    return s < most_jobs ? s : most_jobs;
}

static int fast_layer(run *r, int l, hs_acts *clean, hs_acts *st, int stack, hs_real *dz,
                      int32_t *stacked_tg)
{
    const hs_ablate_opts *o = r->o;
    const hs_model_config *c = &r->m->cfg;
    const int B = o->B, T = o->T, d = c->d_model, dh = c->head_dim, H = c->n_head[l];
    const size_t BT = (size_t)B * T;
    int rc = HS_OK;
    for (size_t b = 0; !rc && b < r->nb; b++) {
        if (o->stop && *o->stop)
            return hs_fail(HS_EINTR, "interrupted in layer %d", l);
        hs_batch_at(r->data, b * BT, B, T, r->in, r->tg);
        /* z, the base of hs_head_change_resid (r1, or W_o's output with
         * out_norm) and the layer's input */
        hs_real *z, *base, *lin;
        if (r->kept) {
            kept_at(r, b, l, &z, &base, &lin);
        } else {
            rc = hs_forward_to(clean, r->m, r->in, l, NULL);
            z = clean->layer[l].attn.z, lin = clean->layer[l].in;
            base = c->out_norm ? clean->layer[l].attn_raw : clean->layer[l].r1;
        }
        for (int j0 = 0; !rc && j0 < r->njobs; j0 += stack) {
            const int n = r->njobs - j0 < stack ? r->njobs - j0 : stack;
            rc = hs_acts_set_batch(st, n * B);
            for (int j = 0; !rc && j < n; j++) {
                const job *jb = &r->jobs[j0 + j];
                if (c->parallel_residual) /* the continuation's MLP reads ln2 of the input */
                    memcpy(st->layer[l].in + (size_t)j * BT * d, lin, sizeof(hs_real) * BT * d);
                rc = head_change(dz, z, r->zmean ? r->zmean[l] : NULL, l, jb->kind, jb->h, B, T, H,
                                 dh);
                if (rc)
                    break;
                hs_head_change_resid(&st->layer[l], (size_t)j * BT, base, lin, dz, jb->h, r->m, l,
                                     BT);
                memcpy(stacked_tg + (size_t)j * BT, r->tg, sizeof(int32_t) * BT);
            }
            if (!rc)
                rc = hs_forward_from(st, r->m, l, stacked_tg);
            for (int j = 0; !rc && j < n; j++) {
                const job *jb = &r->jobs[j0 + j];
                for (int i = 0; i < B; i++)
                    hs_welford_add(&r->acc[jb->kind * H + jb->h],
                                   seq_loss(st->losses + ((size_t)j * B + i) * T, T) -
                                       r->clean[b * B + i]);
            }
        }
        if (o->progress)
            o->progress(o->ctx, (size_t)l * r->nb + b + 1, (size_t)c->n_layer * r->nb);
    }
    return rc;
}

/* ---- the naive path: one full forward per ablation ------------------------ */

/* The reference: the ablation applied by capture/ to z in a full forward. */
static int naive_layer(run *r, int l, hs_acts *a)
{
    const hs_ablate_opts *o = r->o;
    const int B = o->B, T = o->T, H = r->m->cfg.n_head[l];
    int rc = HS_OK;
    for (int j = 0; !rc && j < r->njobs; j++) {
        const job nc = r->jobs[j];
        hs_intervention iv = ablation(l, nc.h, nc.kind, r->zmean ? r->zmean[l] : NULL);
        hs_hook_plan plan = { &iv, 1, NULL };
        hs_hooks hooks = { 0 };
        rc = hs_hooks_attach(&hooks, &r->m->cfg, &plan);
        for (size_t b = 0; !rc && b < r->nb; b++) {
            hs_batch_at(r->data, b * (size_t)B * T, B, T, r->in, r->tg);
            rc = hs_forward(a, r->m, r->in, r->tg, &hooks);
            for (int i = 0; !rc && i < B; i++)
                hs_welford_add(&r->acc[nc.kind * H + nc.h],
                               seq_loss(a->losses + (size_t)i * T, T) - r->clean[b * B + i]);
        }
    }
    return rc;
}

int hs_ablate_check(const hs_model_config *c, const hs_ablate_opts *o)
{
    if (o->B < 1 || o->T < 1 || !(o->kinds & 7))
        return hs_fail(HS_EINVAL, "ablate: batch, sequence length and a method are required");
    if (hs_seq_len_check(c, o->T, "--seq-len"))
        return HS_EINVAL;
    if (hs_heads_fit(c))
        return HS_EINVAL;
    if ((o->kinds & (1 << HS_ABLATE_RESAMPLE)) && o->B < 2)
        return hs_fail(HS_EINVAL, "--method resample needs --batch >= 2 (got %d): it replaces a "
                       "head's output by that of the next sequence of the same batch, which "
                       "with one sequence per batch is the sequence itself", o->B);
    return HS_OK;
}

int hs_ablate(const hs_model *m, const hs_tokens *data, hs_ablate_opts *o)
{
    const hs_model_config *c = &m->cfg;
    int rc = hs_ablate_check(c, o);
    if (rc)
        return rc;
    run r = { .m = m, .data = data, .o = o };
    if (hs_batches_to_run(data, o->B, o->T, o->max_batches, &r.nb))
        return HS_EINVAL;
    int maxH = 0;
    for (int l = 0; l < c->n_layer; l++)
        maxH = c->n_head[l] > maxH ? c->n_head[l] : maxH;
    const size_t BT = (size_t)o->B * o->T;
    r.in = hs_calloc(BT, sizeof(int32_t), "inputs");
    r.tg = hs_calloc(BT, sizeof(int32_t), "targets");
    r.clean = hs_calloc(r.nb * o->B, sizeof(double), "clean losses");
    r.jobs = hs_calloc((size_t)maxH * HS_ABLATE_KINDS, sizeof(job), "ablation list");
    r.acc = hs_calloc((size_t)maxH * HS_ABLATE_KINDS, sizeof(hs_welford), "accumulators");
    hs_real *dz = hs_calloc(BT * c->head_dim, sizeof(hs_real), "head change");
    if (!r.in || !r.tg || !r.clean || !r.jobs || !r.acc || !dz)
        rc = HS_ENOMEM;
    if (!rc && (o->kinds & (1 << HS_ABLATE_MEAN))) {
        r.zmean = hs_calloc((size_t)c->n_layer, sizeof(hs_real *), "mean z");
        for (int l = 0; r.zmean && l < c->n_layer; l++)
            if (!(r.zmean[l] = hs_calloc((size_t)c->n_head[l] * c->head_dim, sizeof(hs_real),
                                         "mean z")))
                rc = HS_ENOMEM;
        if (!r.zmean)
            rc = HS_ENOMEM;
    }
    if (!rc && !o->naive) {
        keep_plan(&r);
        const double budget = o->keep_bytes ? (double)o->keep_bytes : KEEP_BUDGET;
        if ((double)r.kept_batch * r.nb * sizeof(hs_real) <= budget)
            r.kept = malloc(sizeof(hs_real) * r.kept_batch * r.nb); /* NULL: recompute */
    }
    if (!rc)
        rc = clean_pass(&r);

    /* The largest layer's ablation count sizes the stacked activations. */
    int most = 0, nkinds = 0;
    for (int k = 0; k < HS_ABLATE_KINDS; k++)
        nkinds += (o->kinds >> k) & 1;
    most = maxH * nkinds;
    const int stack = o->naive ? 1 : choose_stack(c, o->B, o->T, most, o->stack);
    hs_acts clean = { 0 }, st = { 0 };
    int32_t *stacked_tg = NULL;
    if (!rc)
        rc = hs_acts_alloc(&clean, c, o->B, o->T, HS_ACTS_INFER);
    if (!rc && !o->naive)
        rc = hs_acts_alloc(&st, c, stack * o->B, o->T, HS_ACTS_INFER);
    if (!rc && !o->naive && !(stacked_tg = hs_calloc((size_t)stack * BT, sizeof(int32_t), "targets")))
        rc = HS_ENOMEM;

    /* The sweep's items: in one process each layer with its ablations;
     * under mpirun (dist.h) each stack of a layer's ablations, the very
     * stacks one process runs (a stack's continuation is one batched
     * forward, whose rounding depends on its size). Round k runs items kN ..
     * kN+N-1, item i on rank i mod N, over all the data, so each (head,
     * kind) statistic is the same sum in the same order as in one process;
     * rank 0 gathers them and reports each layer, in order, once its last
     * item is in. */
    const int size = hs_dist_size(), rank = hs_dist_rank();
    const size_t per = (size_t)maxH * HS_ABLATE_KINDS;
    item *items = hs_calloc((size_t)c->n_layer * per + 1, sizeof *items, "ablation items");
    job *all = hs_calloc((size_t)c->n_layer * per + 1, sizeof(job), "ablation list");
    hs_ablate_stat *mine = hs_calloc(per, sizeof *mine, "results");
    hs_ablate_stat *got = hs_calloc(per * (size_t)size, sizeof *got, "results");
    hs_ablate_stat *lstat = hs_calloc(per * (size_t)c->n_layer, sizeof *lstat, "results");
    if (!rc && (!items || !all || !mine || !got || !lstat))
        rc = HS_ENOMEM;
    int n_items = 0, n_all = 0;
    for (int l = 0; !rc && l < c->n_layer; l++) {
        const int first = n_all;
        for (int h = 0; h < c->n_head[l]; h++)
            if (!o->head_on || o->head_on[(size_t)l * HS_MAX_HEADS + h])
                for (int k = 0; k < HS_ABLATE_KINDS; k++)
                    if (o->kinds & (1 << k))
                        all[n_all++] = (job){ h, k };
        const int step = size > 1 ? stack : n_all - first;
        for (int j0 = first; j0 < n_all; j0 += step)
            items[n_items++] = (item){ l, j0, n_all - j0 < step ? n_all - j0 : step };
    }
    rc = hs_dist_agree(rc);
    for (int i0 = 0, next = 0; !rc && i0 < n_items; i0 += size) {
        const item *it = i0 + rank < n_items ? &items[i0 + rank] : NULL;
        memset(mine, 0, sizeof *mine * per);
        if (it) {
            const int H = c->n_head[it->layer];
            r.njobs = it->n;
            memcpy(r.jobs, all + it->j0, sizeof(job) * it->n);
            memset(r.acc, 0, sizeof(hs_welford) * per);
            rc = o->naive ? naive_layer(&r, it->layer, &clean)
                          : fast_layer(&r, it->layer, &clean, &st, stack, dz, stacked_tg);
            for (int j = 0; !rc && j < r.njobs; j++)
                mine[r.jobs[j].kind * H + r.jobs[j].h] =
                    ablate_stat(&r.acc[r.jobs[j].kind * H + r.jobs[j].h]);
        }
        if ((rc = hs_dist_gather(rc, mine, got, sizeof *mine * per)))
            break;
        for (int q = 0; rank == 0 && q < size && i0 + q < n_items; q++)
            for (size_t e = 0; e < per; e++) /* each entry is one item's */
                if (got[(size_t)q * per + e].n)
                    lstat[(size_t)items[i0 + q].layer * per + e] = got[(size_t)q * per + e];
        /* the layers whose last item is in */
        const int done = i0 + size < n_items ? items[i0 + size].layer : c->n_layer;
        for (; !rc && next < done; next++) {
            hs_ablate_layer res = { next, c->n_head[next], lstat + (size_t)next * per };
            if (o->on_layer && rank == 0 && items_of(items, n_items, next))
                rc = o->on_layer(o->ctx, &res);
        }
        rc = hs_dist_agree(rc);
    }
    free(items), free(all), free(mine), free(got), free(lstat);

    hs_acts_free(&clean);
    if (st.layer)
        hs_acts_free(&st);
    for (int l = 0; r.zmean && l < c->n_layer; l++)
        free(r.zmean[l]);
    free(r.zmean);
    free(r.kept);
    free(stacked_tg), free(dz), free(r.acc), free(r.jobs), free(r.clean), free(r.in),
        free(r.tg);
    return rc;
}
