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
    const hs_study_env *env;
    hs_prune_result *r;
    int cap;
} step_ctx;

static int on_step(void *ctx, int step, int pruned, double fraction, double loss,
                   double stderr_loss)
{
    step_ctx *s = ctx;
    hs_study_curve *c = &s->r->curve;
    if (!s->env->io.allow_nonfinite && (!isfinite(loss) || !isfinite(stderr_loss))) {
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
    const hs_study_env *e = s->env;
    return e->ix ? hs_index_curve_add(e->ix, e->run_id, c->name, &pt, 1) : HS_OK;
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

/* Writes the pruned model to out (the run's artifact) and times both
 * forwards. */
static int write_out(hs_prune_result *r, const hs_prune_study_opts *o, const hs_study_env *env,
                     const unsigned char *pruned)
{
    const hs_model *m = env->m;
    hs_model small = { 0 };
    int rc = hs_model_unchanged(m); /* a model of neither version is not written */
    if (!rc)
        rc = pruned_model(&small, m, pruned, o->structural);
    if (!rc)
        rc = hs_checkpoint_save(&small, o->out);
    char target[1100];
    snprintf(target, sizeof target, "%s/model.safetensors", o->out);
    if (!rc)
        rc = hs_study_record_artifact(env->ix, env->run_id, target);
    /* what the written model costs to run, beside the unpruned one */
    if (!rc)
        rc = hs_forward_ms(&r->ms[0], m, env->data, env->batch, env->seq_len);
    if (!rc)
        rc = hs_forward_ms(&r->ms[1], &small, env->data, env->batch, env->seq_len);
    if (!rc)
        rc = hs_head_table_add(&r->table, -1, -1, HS_METRIC(FORWARD_MS_UNPRUNED), r->ms[0], 0, 7);
    if (!rc)
        rc = hs_head_table_add(&r->table, -1, -1, HS_METRIC(FORWARD_MS_PRUNED), r->ms[1], 0, 7);
    if (small.params)
        hs_model_free(&small);
    return rc;
}

int hs_prune_study_check(hs_prune_study_opts *o, const hs_study_env *env)
{
    const hs_prune_opts *po = &o->prune;
    if (!(po->step_percent > 0) || po->step_percent > 100 || !(po->max_percent > 0) ||
        po->max_percent > 100)
        return hs_fail(HS_EINVAL, "--step-percent and --max-percent must be in (0, 100]");
    char target[1100];
    snprintf(target, sizeof target, "%s/model.safetensors", o->out ? o->out : "");
    int rc = o->out ? hs_output_free(target, o->force) : HS_OK;
    if (!rc && o->out && o->structural && hs_prune_structural_check(&env->m->cfg))
        rc = HS_EUNSUPPORTED; /* a written model that cannot be made */
    return rc;
}

int hs_prune_study(hs_prune_result *r, const hs_prune_study_opts *o, const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    const hs_model *m = env->m;
    int rc = hs_prune_study_check((hs_prune_study_opts *)o, env);
    if (rc)
        return rc;
    snprintf(r->curve.name, sizeof r->curve.name, "%s", HS_METRIC(PRUNING));
    const hs_model_config *c = &m->cfg;
    for (int l = 0; l < c->n_layer; l++)
        r->heads += c->n_head[l];
    rc = hs_model_widen(m); /* pruning masks and writes the parameters as floats */
    unsigned char *pruned = rc ? NULL : hs_calloc((size_t)c->n_layer * HS_MAX_HEADS, 1, "mask");
    if (!pruned)
        return rc ? rc : HS_ENOMEM;
    step_ctx sc = { o, env, r, 0 };
    hs_prune_opts po = o->prune;
    po.B = env->batch, po.T = env->seq_len, po.max_batches = env->max_batches;
    po.val = env->val, po.stop = env->io.stop, po.on_step = on_step, po.ctx = &sc;
    rc = hs_prune(m, env->data, &po, pruned, &r->n_pruned);
    /* the final mask: pruned = 0/1 for every head */
    for (int l = 0; !rc && l < c->n_layer; l++)
        for (int h = 0; !rc && h < c->n_head[l]; h++)
            rc = hs_head_table_add(&r->table, l, h, HS_METRIC(PRUNED), pruned[(size_t)l * HS_MAX_HEADS + h],
                                   0, 0);
    if (!rc && o->out)
        rc = write_out(r, o, env, pruned);
    free(pruned);
    r->rows = (hs_study_rows){ .heads = &r->table };
    return rc;
}

HS_STUDY_KIND(prune, hs_prune_study_check);
