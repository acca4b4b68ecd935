/* The prune study (study.h): pruning curve, mask, pruned model, latency. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "metrics.h"
#include "pairs_heads.h"
#include "study.h"
#include "study_prune.h"

void hs_prune_result_free(hs_prune_result *r)
{
    hs_head_table_free(&r->table);
    free(r->curve.points);
    free(r->metric_curve.points);
    hs_l0_result_free(&r->l0);
    memset(r, 0, sizeof *r);
}

typedef struct {
    const hs_prune_study_opts *o;
    const hs_study_env *env;
    hs_prune_result *r;
    int cap, metric_cap;
    const hs_task_objective *task; /* --task: the numbers of the step's evaluation */
} step_ctx;

/* Appends pt to curve c (its room *cap) and, with an index, records it. */
static int curve_add(hs_study_curve *c, int *cap, hs_curve_point pt, const hs_study_env *e)
{
    if (c->n == *cap) {
        const int more = *cap ? 2 * *cap : 16;
        hs_curve_point *p = realloc(c->points, (size_t)more * sizeof *p);
        if (!p)
            return hs_fail(HS_ENOMEM, "out of memory for the curve %s", c->name);
        c->points = p, *cap = more;
    }
    c->points[c->n++] = pt;
    return e->ix ? hs_index_curve_add(e->ix, e->run_id, c->name, &pt, 1) : HS_OK;
}

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
    /* Each step is committed as it completes: an interrupted run keeps its curve. */
    int rc = curve_add(c, &s->cap, (hs_curve_point){ step, fraction, loss }, s->env);
    if (!rc && s->task && step == 0) /* the unpruned model's numbers: step 0's evaluation */
        rc = hs_task_numbers_to_table(&s->r->table, &s->task->last);
    if (!rc && s->task) {
        const hs_task_eval_result *e = &s->task->last;
        rc = curve_add(&s->r->metric_curve, &s->metric_cap,
                       (hs_curve_point){ step, fraction, e->value[e->headline] }, s->env);
    }
    return rc;
}

/* The model to write: without the pruned heads, or the dense model with the
 * pruned heads' output columns zeroed. */
static int pruned_model(hs_model *small, const hs_model *m, const unsigned char *pruned,
                        int structural)
{
    if (structural && !hs_config_hf_pruning(&m->cfg))
        return hs_prune_structural(small, m, pruned);
    hs_model_config c2 = m->cfg; /* the HF form: pruned_heads, written smaller (pruned.h) */
    for (int l = 0; structural && l < c2.n_layer; l++)
        for (int h = 0; h < c2.n_head[l]; h++)
            if (pruned[(size_t)l * HS_MAX_HEADS + h] && hs_config_prune_head(&c2, l, h))
                return HS_EINVAL;
    const hs_model_config *c = &c2;
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

/* The pruned model written to dir, the run's artifact. */
static int save_artifact(const hs_model *small, const char *dir, const hs_study_env *env)
{
    int rc = hs_checkpoint_save(small, dir);
    char target[1100];
    snprintf(target, sizeof target, "%s/model.safetensors", dir);
    return rc ? rc : hs_study_record_artifact(env->ix, env->run_id, target);
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
    r->hf_form = o->structural && hs_config_hf_pruning(&m->cfg);
    if (!rc)
        rc = save_artifact(&small, o->out, env);
    /* what the written model costs to run, beside the unpruned one (on token
     * data: a task's examples are timed by bench/task.sh) */
    const int timed = env->data != NULL;
    if (!rc && timed)
        rc = hs_forward_ms(&r->ms[0], m, env->data, env->batch, env->seq_len);
    if (!rc && timed)
        rc = hs_forward_ms(&r->ms[1], &small, env->data, env->batch, env->seq_len);
    if (!rc && timed)
        rc = hs_head_table_add(&r->table, -1, -1, HS_METRIC(FORWARD_MS_UNPRUNED), r->ms[0], 0, 7);
    if (!rc && timed)
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
    const int l0 = o->method && !strcmp(o->method, "l0");
    if (o->method && !l0 && strcmp(o->method, "importance"))
        return hs_fail(HS_EINVAL, "--method %s: importance or l0", o->method);
    if (l0 && o->out)
        return hs_fail(HS_EINVAL, "--out: writes the model --method importance prunes; "
                                  "--method l0's gates are in the index");
    if (l0 && !(o->l0.lambda >= 0))
        return hs_fail(HS_EINVAL, "--lambda: a value >= 0 (one run each)");
    unsigned types;
    if (o->attn && !env->pairs)
        return hs_fail(HS_EINVAL, "--attn: the attention types of an encoder-decoder's --pairs");
    if (o->attn && hs_attn_types_parse(&types, o->attn))
        return HS_EINVAL;
    if (env->pairs && o->structural)
        return hs_fail(HS_EINVAL, "--structural: an encoder-decoder's pruned model is written "
                                  "dense (the pruned heads' output columns zeroed)");
    int rc = o->out ? hs_output_free(target, o->force) : HS_OK;
    if (!rc && o->out && o->structural && hs_prune_structural_check(&env->m->cfg))
        rc = HS_EUNSUPPORTED; /* a written model that cannot be made */
    return rc;
}

/* --attn's types (checked by hs_prune_study_check). */
static unsigned pairs_types(const char *attn)
{
    unsigned types = 0;
    hs_attn_types_parse(&types, attn);
    return types;
}

/* prune --method l0 (SPEC §16): one lambda's gates per head, the heads left
 * open and the task's numbers with the gates, and the l0 curve's point. */
static int l0_study(hs_prune_result *r, const hs_prune_study_opts *o, const hs_study_env *env)
{
    hs_l0_opts lo = o->l0;
    lo.batch = env->batch, lo.stop = env->io.stop;
    lo.progress = hs_study_progress, lo.ctx = (void *)&env->io;
    hs_study_phase(&env->io, "l0 gates");
    /* an encoder-decoder's: Voita et al.'s gate sets of the chosen types */
    hs_pairs_units *u = env->pairs ? hs_calloc(1, sizeof *u, "gate units") : NULL;
    int rc = env->pairs && !u ? HS_ENOMEM : HS_OK;
    if (!rc && u)
        rc = hs_pairs_units_init(u, &env->m->cfg, o->attn ? pairs_types(o->attn)
                                                          : 1u << HS_ATTN_ENC | 1u << HS_ATTN_DEC |
                                                                1u << HS_ATTN_CROSS);
    if (!rc)
        rc = u           ? hs_pairs_l0(&r->l0, env->m, env->pairs, u, &lo)
             : env->task ? hs_task_l0(&r->l0, env->m, env->task, &lo)
                         : hs_lm_l0(&r->l0, env->m, env->data, env->seq_len, env->max_batches, &lo);
    hs_study_phase(&env->io, NULL);
    const hs_model_config *c = u ? &u->cfg : &env->m->cfg;
    if (u)
        r->heads = 0;
    for (int l = 0; !rc && l < c->n_layer; l++)
        for (int h = 0; !rc && h < c->n_head[l]; h++) {
            const size_t i = (size_t)l * HS_MAX_HEADS + h;
            /* a unit's head at its layer within its stack, with its type */
            const int row = !u || u->type[l] == HS_ATTN_ENC ? (u ? u->layer[l] : l)
                                                            : u->layer[l] - env->m->cfg.enc_layers;
            const int n0 = r->table.n;
            rc = hs_head_table_add(&r->table, row, h, HS_METRIC(L0_GATE), r->l0.gate[i], 0, 0);
            if (!rc)
                rc = hs_head_table_add(&r->table, row, h, HS_METRIC(L0_LOG_ALPHA),
                                       r->l0.log_alpha[i], 0, 0);
            for (int k = n0; u && k < r->table.n; k++)
                r->table.rows[k].attn = hs_attn_type_name(u->type[l]);
            r->heads += u != NULL;
        }
    free(u);
    if (!rc)
        rc = hs_head_table_add(&r->table, -1, -1, HS_METRIC(L0_HEADS_OPEN), r->l0.open, 0,
                               r->heads);
    const hs_task_eval_result *e = &r->l0.eval;
    if (!rc && r->l0.lm) /* the language-model loss with the gates */
        rc = hs_head_table_add(&r->table, -1, -1, HS_METRIC(LOSS), e->loss, e->loss_se, e->n);
    else if (!rc)
        rc = hs_task_numbers_to_table(&r->table, &r->l0.eval);
    snprintf(r->metric_curve.name, sizeof r->metric_curve.name, "%s", HS_METRIC(L0));
    r->metric_curve.points = rc ? NULL : malloc(sizeof *r->metric_curve.points);
    if (!rc && !r->metric_curve.points)
        rc = HS_ENOMEM;
    if (!rc) {
        r->metric_curve.points[0] =
            (hs_curve_point){ 0, r->l0.open, r->l0.lm ? e->loss : e->value[e->headline] };
        r->metric_curve.n = 1;
    }
    char lambda[32];
    snprintf(lambda, sizeof lambda, "%.17g", o->l0.lambda);
    if (!rc && env->ix)
        rc = hs_index_param_set(env->ix, env->run_id, "lambda", lambda);
    if (!rc)
        rc = hs_study_check_finite(&env->io, &r->table, &r->metric_curve, 1);
    r->n_pruned = r->heads - r->l0.open;
    r->rows = (hs_study_rows){ .heads = &r->table, .curve = { r->metric_curve }, .n_curves = 1 };
    return rc;
}

/* The encoder-decoder with the pruned heads' output columns zeroed, per
 * unit: W_o of a self-attention, of a cross-attention. */
static int pairs_write_out(const hs_prune_study_opts *o, const hs_study_env *env,
                           const hs_pairs_units *u, const unsigned char *pruned)
{
    const hs_model *m = env->m;
    const hs_model_config *c = &m->cfg;
    hs_model small = { 0 };
    int rc = hs_model_unchanged(m);
    if (!rc)
        rc = hs_model_init(&small, c);
    if (!rc)
        memcpy(small.params, m->params, sizeof(hs_real) * m->n_params);
    for (int k = 0; !rc && k < u->n; k++) {
        const int l = u->layer[k], H = c->n_head[l], dh = c->head_dim;
        const hs_layer_weights *lw = &small.w.layer[l];
        hs_real *w_o = u->type[k] == HS_ATTN_CROSS ? lw->xattn.w_o : lw->attn.w_o;
        for (int h = 0; h < H; h++)
            for (int row = 0; pruned[(size_t)k * HS_MAX_HEADS + h] && row < c->d_model; row++)
                memset(w_o + (size_t)row * H * dh + h * dh, 0, sizeof(hs_real) * dh);
    }
    if (!rc)
        rc = save_artifact(&small, o->out, env);
    if (small.params)
        hs_model_free(&small);
    return rc;
}

/* prune --pairs (SPEC §17): the heads of the chosen attention types pruned
 * jointly by importance on the pairs, the pooled loss after each step. */
static int pairs_prune(hs_prune_result *r, const hs_prune_study_opts *o,
                       const hs_study_env *env)
{
    const hs_model *m = env->m;
    unsigned types = 1u << HS_ATTN_ENC | 1u << HS_ATTN_DEC | 1u << HS_ATTN_CROSS;
    hs_pairs_units *u = hs_calloc(1, sizeof *u, "pruning units");
    int rc = u ? HS_OK : HS_ENOMEM;
    if (!rc && o->attn)
        rc = hs_attn_types_parse(&types, o->attn);
    if (!rc)
        rc = hs_pairs_units_init(u, &m->cfg, types);
    if (!rc)
        rc = hs_model_widen(m); /* the written model's parameters are floats */
    unsigned char *pruned =
        rc ? NULL : hs_calloc((size_t)u->n * HS_MAX_HEADS, 1, "mask");
    if (!rc && !pruned)
        rc = HS_ENOMEM;
    for (int k = 0; !rc && k < u->n; k++)
        r->heads += u->cfg.n_head[k];
    snprintf(r->curve.name, sizeof r->curve.name, "%s", HS_METRIC(PRUNING));
    hs_pairs_objective obj = { m, env->pairs, u, env->batch, env->io.stop };
    step_ctx sc = { o, env, r, 0, 0, NULL };
    hs_prune_opts po = o->prune;
    po.B = env->batch, po.stop = env->io.stop, po.on_step = on_step, po.ctx = &sc;
    po.importance = hs_pairs_objective_importance, po.evaluate = hs_pairs_objective_evaluate;
    po.obj_ctx = &obj, po.heads = &u->cfg;
    if (!rc)
        rc = hs_prune(m, NULL, &po, pruned, &r->n_pruned);
    for (int k = 0; !rc && k < u->n; k++) /* the final mask, each head at its layer in its stack */
        for (int h = 0; !rc && h < u->cfg.n_head[k]; h++) {
            const int l = u->type[k] == HS_ATTN_ENC ? u->layer[k] : u->layer[k] - m->cfg.enc_layers;
            rc = hs_head_table_add(&r->table, l, h, HS_METRIC(PRUNED),
                                   pruned[(size_t)k * HS_MAX_HEADS + h], 0, 0);
            if (!rc)
                r->table.rows[r->table.n - 1].attn = hs_attn_type_name(u->type[k]);
        }
    if (!rc && o->out)
        rc = pairs_write_out(o, env, u, pruned);
    free(pruned);
    free(u);
    r->rows = (hs_study_rows){ .heads = &r->table };
    return rc;
}

int hs_prune_study(hs_prune_result *r, const hs_prune_study_opts *o, const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    const hs_model *m = env->m;
    int rc = hs_prune_study_check((hs_prune_study_opts *)o, env);
    if (rc)
        return rc;
    for (int l = 0; l < m->cfg.n_layer; l++)
        r->heads += m->cfg.n_head[l];
    if (o->method && !strcmp(o->method, "l0"))
        return l0_study(r, o, env);
    r->heads = 0;
    if (env->pairs)
        return pairs_prune(r, o, env);
    snprintf(r->curve.name, sizeof r->curve.name, "%s", HS_METRIC(PRUNING));
    const hs_model_config *c = &m->cfg;
    for (int l = 0; l < c->n_layer; l++)
        r->heads += c->n_head[l];
    rc = hs_model_widen(m); /* pruning masks and writes the parameters as floats */
    unsigned char *pruned = rc ? NULL : hs_calloc((size_t)c->n_layer * HS_MAX_HEADS, 1, "mask");
    if (!pruned)
        return rc ? rc : HS_ENOMEM;
    hs_task_objective obj = { m, env->task, env->batch, env->io.stop, { 0 } };
    step_ctx sc = { o, env, r, 0, 0, env->task ? &obj : NULL };
    hs_prune_opts po = o->prune;
    po.B = env->batch, po.T = env->seq_len, po.max_batches = env->max_batches;
    po.val = env->val, po.stop = env->io.stop, po.on_step = on_step, po.ctx = &sc;
    if (env->task) { /* the task's loss and metric; the unpruned model's numbers as rows */
        po.importance = hs_task_objective_importance, po.evaluate = hs_task_objective_evaluate;
        po.obj_ctx = &obj;
        hs_metric_name_of(r->metric_curve.name, sizeof r->metric_curve.name,
                          HS_M_PRUNING_METRIC, hs_task_metric_name(env->task->headline));
    }
    if (!rc)
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
