#include "importance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "eval.h"
#include "stats.h"
#include "transformer.h"

static size_t at(int l, int h) { return (size_t)l * HS_MAX_HEADS + h; }

/* The mark of a sequence without a loss among the kept |g| (which are >= 0). */
#define NO_LOSS (-1.0)

int hs_importance_alloc(hs_importance *r, const hs_model_config *c)
{
    memset(r, 0, sizeof *r);
    if (hs_heads_fit(c))
        return HS_EINVAL;
    r->n_layer = c->n_layer;
    memcpy(r->n_head, c->n_head, sizeof r->n_head);
    size_t n = (size_t)c->n_layer * HS_MAX_HEADS;
    r->raw = hs_calloc(n, sizeof(double), "importance");
    r->raw_stderr = hs_calloc(n, sizeof(double), "importance");
    r->norm = hs_calloc(n, sizeof(double), "importance");
    r->norm_stderr = hs_calloc(n, sizeof(double), "importance");
    if (!r->raw || !r->raw_stderr || !r->norm || !r->norm_stderr) {
        hs_importance_free(r);
        return HS_ENOMEM;
    }
    return HS_OK;
}

void hs_importance_free(hs_importance *r)
{
    free(r->raw);
    free(r->raw_stderr);
    free(r->norm);
    free(r->norm_stderr);
    memset(r, 0, sizeof *r);
}

int hs_importance_to_table(hs_head_table *t, const hs_importance *r)
{
    int rc = HS_OK;
    for (int l = 0; !rc && l < r->n_layer; l++)
        for (int h = 0; !rc && h < r->n_head[l]; h++) {
            const size_t i = at(l, h);
            rc = hs_head_table_add(t, l, h, "importance", r->norm[i], r->norm_stderr[i], r->n);
            if (!rc)
                rc = hs_head_table_add(t, l, h, "importance_raw", r->raw[i], r->raw_stderr[i],
                                       r->n);
        }
    return rc;
}

void hs_importance_of(hs_importance *r, const hs_head_stats *g_abs)
{
    r->n = hs_head_stat(g_abs, 0, 0)->n;
    for (int l = 0; l < r->n_layer; l++) {
        double norm2 = 0;
        for (int h = 0; h < r->n_head[l]; h++) {
            const size_t i = at(l, h);
            const hs_welford *w = hs_head_stat(g_abs, l, h);
            r->raw[i] = w->mean;
            r->raw_stderr[i] = hs_welford_stderr(w);
            norm2 += r->raw[i] * r->raw[i];
        }
        const double norm = sqrt(norm2);
        for (int h = 0; h < r->n_head[l]; h++) {
            const size_t i = at(l, h);
            r->norm[i] = norm > 0 ? r->raw[i] / norm : 0;
            r->norm_stderr[i] = norm > 0 ? r->raw_stderr[i] / norm : 0;
        }
    }
}

static int compute(hs_importance *r, const hs_model *m, const hs_tokens *data, int B, int T,
                   size_t max_batches, const hs_real *const *gates, volatile sig_atomic_t *stop,
                   hs_progress_fn progress, void *progress_ctx, int shard)
{
    const hs_model_config *c = &m->cfg;
    size_t nb;
    if (hs_batches_to_run(data, B, T, max_batches, &nb))
        return HS_EINVAL;
    hs_acts a;
    int rc = hs_acts_alloc(&a, c, B, T, HS_ACTS_TRAIN);
    if (rc)
        return rc;
    hs_real *xi[HS_MAX_LAYERS] = { 0 }, *dxi[HS_MAX_LAYERS] = { 0 };
    hs_head_stats g_abs; /* |g| over sequences, per head */
    rc = hs_head_stats_init(&g_abs, c);
    int32_t *in = hs_calloc((size_t)B * T, sizeof(int32_t), "inputs");
    int32_t *tg = hs_calloc((size_t)B * T, sizeof(int32_t), "targets");
    if (!rc && (!in || !tg))
        rc = HS_ENOMEM;
    for (int l = 0; !rc && l < c->n_layer; l++) {
        xi[l] = hs_calloc((size_t)B * c->n_head[l], sizeof(hs_real), "gates");
        dxi[l] = hs_calloc((size_t)B * c->n_head[l], sizeof(hs_real), "gate gradients");
        if (!xi[l] || !dxi[l])
            rc = HS_ENOMEM;
        for (int b = 0; !rc && b < B; b++)
            for (int h = 0; h < c->n_head[l]; h++)
                xi[l][b * c->n_head[l] + h] = gates && gates[l] ? gates[l][h] : 1;
    }
    hs_hooks hooks = { .gates = (const hs_real *const *)xi, .gates_per_seq = 1 };
    /* shard (dist.h): this rank's batches [lo, hi); every sequence's |g| is
     * kept (item = batch: B x heads values) and rank 0 adds them in batch
     * order, the order of one process */
    size_t lo = 0, hi = nb, heads = 0;
    for (int l = 0; l < c->n_layer; l++)
        heads += (size_t)c->n_head[l];
    double *g = NULL;
    if (shard) {
        hs_dist_range(nb, hs_dist_rank(), &lo, &hi);
        if (!rc && !(g = hs_calloc(nb * B * heads, sizeof(double), "gate gradients")))
            rc = HS_ENOMEM;
    }
    for (size_t b = lo; !rc && b < hi; b++) {
        if (stop && *stop) {
            rc = hs_fail(HS_EINTR, "interrupted after %zu of %zu batches", b, nb);
            break;
        }
        hs_batch_at(data, b * (size_t)B * T, B, T, in, tg);
        for (int l = 0; l < c->n_layer; l++)
            memset(dxi[l], 0, sizeof(hs_real) * B * c->n_head[l]);
        rc = hs_forward(&a, m, in, tg, &hooks);
        /* loss_scale 1: the gradient of each sequence's summed token loss;
         * no weight gradients are formed. */
        if (!rc)
            rc = hs_backward(NULL, dxi, &a, m, in, tg, &hooks, 1);
        double *gb = g ? g + b * B * heads : NULL;
        for (int l = 0; !rc && l < c->n_layer; l++)
            for (int s = 0; s < B; s++) {
                /* a masked-LM sequence without a chosen position has no loss
                 * to differentiate: left out (NO_LOSS) */
                int k;
                hs_seq_loss_sum(a.losses + (size_t)s * T, tg + (size_t)s * T, T, &k);
                for (int h = 0; h < c->n_head[l]; h++) {
                    const double v = k ? fabs((double)dxi[l][s * c->n_head[l] + h]) : NO_LOSS;
                    if (gb)
                        *gb++ = v;
                    else if (v != NO_LOSS)
                        hs_welford_add(hs_head_stat(&g_abs, l, h), v);
                }
            }
        if (!rc && progress)
            progress(progress_ctx, b + 1 - lo, hi - lo);
    }
    if (shard) {
        rc = hs_dist_collect(rc, g, B * heads * sizeof(double), nb);
        const double *gb = g;
        for (size_t b = 0; !rc && b < nb; b++)
            for (int l = 0; l < c->n_layer; l++)
                for (int s = 0; s < B; s++)
                    for (int h = 0; h < c->n_head[l]; h++, gb++)
                        if (*gb != NO_LOSS)
                            hs_welford_add(hs_head_stat(&g_abs, l, h), *gb);
        free(g);
    }
    if (!rc)
        hs_importance_of(r, &g_abs);
    for (int l = 0; l < c->n_layer; l++) {
        free(xi[l]);
        free(dxi[l]);
    }
    hs_head_stats_free(&g_abs);
    free(in), free(tg);
    hs_acts_free(&a);
    return rc;
}

int hs_importance_compute(hs_importance *r, const hs_model *m, const hs_tokens *data, int B,
                          int T, size_t max_batches, const hs_real *const *gates,
                          volatile sig_atomic_t *stop, hs_progress_fn progress,
                          void *progress_ctx)
{
    return compute(r, m, data, B, T, max_batches, gates, stop, progress, progress_ctx, 0);
}

int hs_importance_compute_dist(hs_importance *r, const hs_model *m, const hs_tokens *data, int B,
                               int T, size_t max_batches, volatile sig_atomic_t *stop,
                               hs_progress_fn progress, void *progress_ctx)
{
    return compute(r, m, data, B, T, max_batches, NULL, stop, progress, progress_ctx, 1);
}

/* ---- pruning -------------------------------------------------------------- */

typedef struct {
    double importance;
    int layer, head;
} candidate;

static int by_importance(const void *x, const void *y)
{
    const candidate *a = x, *b = y;
    if (a->importance != b->importance)
        return a->importance < b->importance ? -1 : 1;
    return a->layer != b->layer ? a->layer - b->layer : a->head - b->head;
}

/* Prunes heads still in, by increasing imp->norm, until *n_pruned reaches
 * goal, skipping layers down to keep_min heads; returns how many it pruned.
 * cand: room for every head. */
static int prune_lowest(unsigned char *pruned, hs_real **gates, int *n_pruned, int goal,
                        candidate *cand, const hs_importance *imp, const hs_model_config *c,
                        int keep_min)
{
    int nc = 0;
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            if (!pruned[(size_t)l * HS_MAX_HEADS + h])
                cand[nc++] = (candidate){ imp->norm[(size_t)l * HS_MAX_HEADS + h], l, h };
    qsort(cand, (size_t)nc, sizeof *cand, by_importance);
    int left[HS_MAX_LAYERS];
    for (int l = 0; l < c->n_layer; l++) {
        left[l] = c->n_head[l];
        for (int h = 0; h < c->n_head[l]; h++)
            left[l] -= pruned[(size_t)l * HS_MAX_HEADS + h];
    }
    const int before = *n_pruned;
    for (int i = 0; i < nc && *n_pruned < goal; i++) {
        if (left[cand[i].layer] <= keep_min)
            continue; /* protected */
        pruned[(size_t)cand[i].layer * HS_MAX_HEADS + cand[i].head] = 1;
        gates[cand[i].layer][cand[i].head] = 0;
        left[cand[i].layer]--;
        (*n_pruned)++;
    }
    return *n_pruned - before;
}

int hs_prune(const hs_model *m, const hs_tokens *data, const hs_prune_opts *o,
             unsigned char *pruned, int *n_pruned)
{
    const hs_model_config *c = o->heads ? o->heads : &m->cfg;
    if (!(o->step_percent > 0) || o->step_percent > 100)
        return hs_fail(HS_EINVAL, "--step-percent must be in (0, 100]");
    int total = 0, keep_min = o->min_heads_per_layer;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    const double max_percent = o->max_percent > 0 ? o->max_percent : 100;
    const int cap = (int)floor(max_percent * total / 100 + 1e-9);
    memset(pruned, 0, (size_t)c->n_layer * HS_MAX_HEADS);
    *n_pruned = 0;
    hs_real *gates[HS_MAX_LAYERS] = { 0 };
    candidate *cand = hs_calloc((size_t)total, sizeof *cand, "pruning candidates");
    hs_importance imp = { 0 };
    int rc = cand ? hs_importance_alloc(&imp, c) : HS_ENOMEM;
    int have_imp = 0;
    for (int l = 0; !rc && l < c->n_layer; l++) {
        if (!(gates[l] = hs_calloc((size_t)c->n_head[l], sizeof(hs_real), "gates")))
            rc = HS_ENOMEM;
        for (int h = 0; !rc && h < c->n_head[l]; h++)
            gates[l][h] = 1;
    }
    const hs_tokens *val = o->val ? o->val : data;
    hs_hooks hooks = { .gates = (const hs_real *const *)gates };
    for (int step = 0; !rc; step++) {
        if (step > 0) {
            const int target = (int)floor(step * o->step_percent * total / 100 + 1e-9);
            const int goal = target < cap ? target : cap;
            if (goal <= *n_pruned && target >= cap)
                break;
            if (goal > *n_pruned) { /* else p N / 100 < 1: this step's count is the last one's */
                if (!have_imp || !o->one_shot) {
                    const hs_real *const *g = (const hs_real *const *)gates;
                    rc = o->importance ? o->importance(o->obj_ctx, &imp, g)
                                       : hs_importance_compute(&imp, m, data, o->B, o->T,
                                                               o->max_batches, g, o->stop, NULL,
                                                               NULL);
                    have_imp = 1;
                    if (rc)
                        break;
                }
                if (!prune_lowest(pruned, gates, n_pruned, goal, cand, &imp, c, keep_min))
                    break; /* nothing more may be pruned */
            }
        }
        hs_eval_result er;
        rc = o->evaluate ? o->evaluate(o->obj_ctx, &hooks, &er.loss, &er.stderr_loss)
                         : hs_evaluate(&er, m, val, o->B, o->T, o->max_batches, &hooks, NULL,
                                       NULL);
        if (!rc && o->on_step)
            rc = o->on_step(o->ctx, step, *n_pruned, (double)*n_pruned / total, er.loss,
                            er.stderr_loss);
        if (!rc && o->on_mask)
            rc = o->on_mask(o->ctx, step, pruned);
        if (!rc && o->stop && *o->stop)
            rc = hs_fail(HS_EINTR, "interrupted after pruning step %d", step);
    }
    for (int l = 0; l < c->n_layer; l++)
        free(gates[l]);
    free(cand);
    if (imp.raw)
        hs_importance_free(&imp);
    return rc;
}

/* ---- structural pruning ---------------------------------------------------- */

/* Each kept head (dead ones too) keeps its source head's window in nc. */
static int keep_windows(hs_model_config *nc, const hs_model_config *c,
                        int (*keep)[HS_MAX_HEADS])
{
    if (!c->n_head_windows)
        return HS_OK;
    int *w = hs_calloc((size_t)c->n_head_windows, sizeof *w, "pruned windows");
    if (!w)
        return HS_ENOMEM;
    int n = 0;
    for (int l = 0; l < c->n_layer; l++)
        for (int k = 0; k < nc->n_head[l]; k++)
            w[n++] = hs_config_head_window(c, l, keep[l][k] >= 0 ? keep[l][k] : -1 - keep[l][k]);
    nc->n_head_windows = 0;
    int rc = hs_config_set_windows(nc, w);
    free(w);
    return rc;
}

int hs_prune_structural_check(const hs_model_config *c)
{
    if (c->mla)
        return hs_fail(HS_EINVAL, "prune --structural: not implemented for attention \"mla\" "
                                  "(its heads share kv_b_proj's latent); dense pruning zeroes "
                                  "their o_proj columns");
    if (c->qk_norm == HS_QK_NORM_PROJ)
        return hs_fail(HS_EINVAL, "prune --structural: %s's q_norm and k_norm normalise the "
                                  "whole q and k projections (one RMS statistic over every "
                                  "head), so cutting a head would change the others' queries "
                                  "and keys; dense pruning (without --structural) zeroes the "
                                  "pruned heads' o_proj columns",
                       hs_family_name(c->family));
    return HS_OK;
}

int hs_prune_structural(hs_model *out, const hs_model *m, const unsigned char *pruned)
{
    /* before anything is allocated: out and pruned are not read */
    if (hs_prune_structural_check(&m->cfg))
        return HS_EINVAL;
    const hs_model_config *c = &m->cfg;
    hs_model_config nc = *c;
    nc.family = HS_FAMILY_HEADSCOPE;
    /* keep[l][h']: the source head of new head h', -1 - src for a dead head;
     * keep_kv[l][g']: the source KV head of new KV head g'. */
    int(*keep)[HS_MAX_HEADS] = hs_calloc((size_t)c->n_layer, sizeof *keep, "pruning plan");
    int(*keep_kv)[HS_MAX_HEADS] = hs_calloc((size_t)c->n_layer, sizeof *keep_kv, "pruning plan");
    if (!keep || !keep_kv) {
        free(keep);
        free(keep_kv);
        return HS_ENOMEM;
    }
    for (int l = 0; l < c->n_layer; l++) {
        const int H = c->n_head[l], G = c->n_kv_head[l], gs = H / G;
        int most = 0, groups = 0;
        for (int j = 0; j < G; j++) {
            int r = 0;
            for (int h = j * gs; h < (j + 1) * gs; h++)
                r += !pruned[(size_t)l * HS_MAX_HEADS + h];
            most = r > most ? r : most;
        }
        int nh = 0;
        for (int j = 0; j < G; j++) {
            int r = 0;
            for (int h = j * gs; h < (j + 1) * gs; h++)
                r += !pruned[(size_t)l * HS_MAX_HEADS + h];
            if (!r && (most || j))
                continue; /* the whole group goes (unless the layer has no head left) */
            keep_kv[l][groups++] = j;
            int want = most ? most : 1, taken = 0;
            for (int h = j * gs; h < (j + 1) * gs && taken < want; h++)
                if (!pruned[(size_t)l * HS_MAX_HEADS + h])
                    keep[l][nh++] = h, taken++;
            for (int h = j * gs; h < (j + 1) * gs && taken < want; h++)
                if (pruned[(size_t)l * HS_MAX_HEADS + h])
                    keep[l][nh++] = -1 - h, taken++; /* dead head: W_o zeroed */
        }
        nc.n_head[l] = nh;
        nc.n_kv_head[l] = groups;
    }
    int rc = keep_windows(&nc, c, keep);
    if (!rc)
        rc = hs_model_widen(m); /* the heads kept are copied as floats */
    if (!rc)
        rc = hs_model_init(out, &nc);
    if (rc) {
        free(keep);
        free(keep_kv);
        return rc;
    }
    const int d = c->d_model, dh = c->head_dim;
    /* Everything but attention projections copies by name. */
    for (int i = 0; i < out->n_tensors; i++) {
        const hs_tensor_info *t = &out->tensors[i];
        if (strstr(t->name, ".attn."))
            continue;
        int src = hs_model_find(m, t->name);
        memcpy(out->params + t->offset, m->params + m->tensors[src].offset,
               sizeof(hs_real) * t->size);
    }
    for (int l = 0; l < c->n_layer; l++) {
        const hs_attn_weights *sw = &m->w.layer[l].attn;
        hs_attn_weights *dw = &out->w.layer[l].attn;
        const int H = c->n_head[l], nh = nc.n_head[l];
        for (int k = 0; k < nh; k++) {
            const int src = keep[l][k] >= 0 ? keep[l][k] : -1 - keep[l][k];
            const int dead = keep[l][k] < 0;
            memcpy(dw->w_q + (size_t)k * dh * d, sw->w_q + (size_t)src * dh * d,
                   sizeof(hs_real) * dh * d);
            if (sw->b_q)
                memcpy(dw->b_q + (size_t)k * dh, sw->b_q + (size_t)src * dh, sizeof(hs_real) * dh);
            for (int row = 0; row < d; row++)
                for (int i = 0; i < dh; i++)
                    dw->w_o[(size_t)row * nh * dh + k * dh + i] =
                        dead ? 0 : sw->w_o[(size_t)row * H * dh + src * dh + i];
        }
        for (int k = 0; k < nc.n_kv_head[l]; k++) {
            const int j = keep_kv[l][k];
            memcpy(dw->w_k + (size_t)k * dh * d, sw->w_k + (size_t)j * dh * d, sizeof(hs_real) * dh * d);
            memcpy(dw->w_v + (size_t)k * dh * d, sw->w_v + (size_t)j * dh * d, sizeof(hs_real) * dh * d);
            if (sw->b_k) {
                memcpy(dw->b_k + (size_t)k * dh, sw->b_k + (size_t)j * dh, sizeof(hs_real) * dh);
                memcpy(dw->b_v + (size_t)k * dh, sw->b_v + (size_t)j * dh, sizeof(hs_real) * dh);
            }
        }
        if (sw->b_o)
            memcpy(dw->b_o, sw->b_o, sizeof(hs_real) * d);
    }
    free(keep);
    free(keep_kv);
    return HS_OK;
}
