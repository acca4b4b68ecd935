/* The importance study (study.h). */
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "pairs_heads.h"
#include "study.h"
#include "study_importance.h"
#include "task_heads.h"

void hs_importance_result_free(hs_importance_result *r)
{
    hs_head_table_free(&r->table);
}

int hs_importance_check(hs_importance_opts *o, const hs_study_env *env)
{
    (void)o, (void)env;
    return HS_OK;
}

/* importance --task: every head's importance and, from the same forwards
 * (gates at 1), the model's task numbers as model-wide rows. */
static int task_importance(hs_importance_result *r, hs_importance *imp, const hs_study_env *env)
{
    const hs_task *t = env->task;
    double *out = hs_calloc((size_t)t->n * t->k, sizeof *out, "task outputs");
    int rc = out ? hs_task_importance(imp, out, env->m, t, env->batch, NULL, env->io.stop,
                                      env->io.progress, env->io.ctx)
                 : HS_ENOMEM;
    hs_task_eval_result er;
    if (!rc && !(rc = hs_task_numbers(&er, t, out)))
        rc = hs_task_numbers_to_table(&r->table, &er);
    free(out);
    return rc;
}

/* importance --pairs (SPEC §17): every head of every attention type of an
 * encoder-decoder on its pairs. */
static int pairs_importance(hs_importance_result *r, const hs_study_env *env)
{
    const hs_model_config *c = &env->m->cfg;
    hs_pairs_units u;
    hs_importance imp;
    int rc = hs_pairs_units_init(&u, c, 1u << HS_ATTN_ENC | 1u << HS_ATTN_DEC |
                                            1u << HS_ATTN_CROSS);
    if (rc || (rc = hs_importance_alloc(&imp, &u.cfg)))
        return rc;
    hs_study_phase(&env->io, "importance");
    rc = hs_pairs_importance(&imp, env->m, env->pairs, &u, env->batch, NULL, env->io.stop,
                             env->io.progress, env->io.ctx);
    hs_study_phase(&env->io, NULL);
    if (!rc)
        rc = hs_pairs_importance_to_table(&r->table, &imp, &u, c);
    if (!rc)
        rc = hs_study_check_finite(&env->io, &r->table, NULL, 0);
    const hs_metric_row *least = NULL;
    for (int i = 0; !rc && i < r->table.n; i++)
        if (!strcmp(r->table.rows[i].metric, HS_METRIC(IMPORTANCE)) &&
            (!least || r->table.rows[i].value < least->value))
            least = &r->table.rows[i];
    if (least)
        r->least_layer = least->layer, r->least_head = least->head, r->least_attn = least->attn;
    r->sequences = imp.n;
    r->rows = (hs_study_rows){ .heads = &r->table };
    hs_importance_free(&imp);
    return rc;
}

int hs_importance_study(hs_importance_result *r, const hs_importance_opts *o,
                        const hs_study_env *env)
{
    (void)o;
    memset(r, 0, sizeof *r);
    if (env->pairs)
        return pairs_importance(r, env);
    const hs_model *m = env->m;
    const hs_study_io *io = &env->io;
    const hs_model_config *c = &m->cfg;
    hs_importance imp;
    int rc = hs_importance_alloc(&imp, c);
    if (rc)
        return rc;
    hs_study_phase(io, "importance");
    if (env->task) /* the task's numbers from the same forwards */
        rc = task_importance(r, &imp, env);
    else
        rc = hs_importance_compute_dist(&imp, m, env->data, env->batch, env->seq_len,
                                        env->max_batches, io->stop, io->progress, io->ctx);
    hs_study_phase(io, NULL);
    if (!rc)
        rc = hs_importance_to_table(&r->table, &imp);
    if (!rc)
        rc = hs_study_check_finite(io, &r->table, NULL, 0);
    for (int l = 0; !rc && l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            if (imp.norm[(size_t)l * HS_MAX_HEADS + h] <
                imp.norm[(size_t)r->least_layer * HS_MAX_HEADS + r->least_head])
                r->least_layer = l, r->least_head = h;
    r->sequences = imp.n;
    r->rows = (hs_study_rows){ .heads = &r->table };
    hs_importance_free(&imp);
    return rc;
}

HS_STUDY_KIND(importance, hs_importance_check);
