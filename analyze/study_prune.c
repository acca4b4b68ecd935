/* The prune study (study.h): pruning curve, mask, pruned model, latency. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "metrics.h"
#include "study.h"
#include "study_prune.h"

void hs_prune_result_free(hs_prune_result *r)
{
    hs_head_table_free(&r->table);
    free(r->curve.points);
    memset(r, 0, sizeof *r);
}

typedef struct {
    const hs_prune_study_opts *o;
    hs_prune_result *r;
    int cap;
} step_ctx;

static int on_step(void *ctx, int step, int pruned, double fraction, double loss,
                   double stderr_loss)
{
    step_ctx *s = ctx;
    hs_study_curve *c = &s->r->curve;
    if (!s->o->allow_nonfinite && (!isfinite(loss) || !isfinite(stderr_loss))) {
        char what[96];
        snprintf(what, sizeof what, "the validation loss after pruning step %d%s", step,
                 isfinite(loss) ? " (its standard error)" : "");
        return hs_fail_nonfinite(isfinite(loss) ? stderr_loss : loss, what);
    }
    if (s->o->on_step)
        s->o->on_step(s->o->ctx, step, pruned, fraction, loss, stderr_loss);
    const hs_curve_point pt = { step, fraction, loss };
    if (c->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 16;
        hs_curve_point *p = realloc(c->points, (size_t)cap * sizeof *p);
        if (!p)
            return hs_fail(HS_ENOMEM, "out of memory for the pruning curve");
        c->points = p, s->cap = cap;
    }
    c->points[c->n++] = pt;
    /* Each step is committed as it completes: an interrupted run keeps its curve. */
    return s->o->ix ? hs_index_curve_add(s->o->ix, s->o->run_id, c->name, &pt, 1) : HS_OK;
}

/* The model to write: without the pruned heads, or the dense model with the
 * pruned heads' output columns zeroed. */
static int pruned_model(hs_model *small, const hs_model *m, const unsigned char *pruned,
                        int structural)
{
    if (structural)
        return hs_prune_structural(small, m, pruned);
    const hs_model_config *c = &m->cfg;
    const int rc = hs_model_init(small, c);
    if (rc)
        return rc;
    memcpy(small->params, m->params, sizeof(hs_real) * m->n_params);
    for (int l = 0; l < c->n_layer; l++) {
        const int H = c->n_head[l], dh = c->head_dim;
        for (int h = 0; h < H; h++)
            if (pruned[(size_t)l * HS_MAX_HEADS + h])
                for (int row = 0; row < c->d_model; row++)
                    memset(small->w.layer[l].attn.w_o + (size_t)row * H * dh + h * dh, 0,
                           sizeof(hs_real) * dh);
    }
    return HS_OK;
}

/* Writes the pruned model to out and times both forwards. */
static int write_out(hs_prune_result *r, const hs_model *m, const hs_tokens *data,
                     const hs_prune_study_opts *o, const unsigned char *pruned)
{
    hs_model small = { 0 };
    int rc = pruned_model(&small, m, pruned, o->structural);
    if (!rc)
        rc = hs_checkpoint_save(&small, o->out);
    /* what the written model costs to run, beside the unpruned one */
    if (!rc)
        rc = hs_forward_ms(&r->ms[0], m, data, o->prune.B, o->prune.T);
    if (!rc)
        rc = hs_forward_ms(&r->ms[1], &small, data, o->prune.B, o->prune.T);
    if (!rc)
        rc = hs_head_table_add(&r->table, -1, -1, HS_METRIC(FORWARD_MS_UNPRUNED), r->ms[0], 0, 7);
    if (!rc)
        rc = hs_head_table_add(&r->table, -1, -1, HS_METRIC(FORWARD_MS_PRUNED), r->ms[1], 0, 7);
    if (small.params)
        hs_model_free(&small);
    return rc;
}

int hs_prune_study_check(const hs_prune_study_opts *o, const hs_model_config *c)
{
    return o->out && o->structural ? hs_prune_structural_check(c) : HS_OK;
}

int hs_prune_study(hs_prune_result *r, const hs_model *m, const hs_tokens *data,
                   const hs_prune_study_opts *o)
{
    memset(r, 0, sizeof *r);
    if (hs_prune_study_check(o, &m->cfg))
        return HS_EINVAL;
    snprintf(r->curve.name, sizeof r->curve.name, "%s", HS_METRIC(PRUNING));
    const hs_model_config *c = &m->cfg;
    for (int l = 0; l < c->n_layer; l++)
        r->heads += c->n_head[l];
    int rc = hs_model_widen(m); /* pruning masks and writes the parameters as floats */
    unsigned char *pruned = rc ? NULL : hs_calloc((size_t)c->n_layer * HS_MAX_HEADS, 1, "mask");
    if (!pruned)
        return rc ? rc : HS_ENOMEM;
    step_ctx sc = { o, r, 0 };
    hs_prune_opts po = o->prune;
    po.on_step = on_step, po.ctx = &sc;
    rc = hs_prune(m, data, &po, pruned, &r->n_pruned);
    /* the final mask: pruned = 0/1 for every head */
    for (int l = 0; !rc && l < c->n_layer; l++)
        for (int h = 0; !rc && h < c->n_head[l]; h++)
            rc = hs_head_table_add(&r->table, l, h, HS_METRIC(PRUNED), pruned[(size_t)l * HS_MAX_HEADS + h],
                                   0, 0);
    if (!rc && o->out)
        rc = write_out(r, m, data, o, pruned);
    free(pruned);
    return rc;
}
