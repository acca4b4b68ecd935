/* The direct logit attribution, logit lens and composition studies
 * (SPEC §11): the computations of dla.h, logit_lens.h and composition.h as
 * index rows with their standard errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "study.h"
#include "study_interp.h"
#include "study_patch.h"

/* ---- dla ------------------------------------------------------------------------ */

/* Row k of the parts over prompts (or the LD when k < 0) into the table. */
static int dla_row(hs_dla_result *r, int k)
{
    const hs_dla *p = &r->parts;
    hs_welford w = { 0 };
    for (int i = 0; i < p->n; i++)
        hs_welford_add(&w, k < 0 ? p->logit_diff[i] : p->value[(size_t)i * p->n_terms + k]);
    if (k < 0) {
        r->logit_diff = w.mean;
        return hs_head_table_add_welford(&r->table, -1, -1, HS_METRIC(LOGIT_DIFF_CLEAN), &w);
    }
    const hs_dla_term *t = &p->term[k];
    if (t->head >= 0 && (r->top_layer < 0 || w.mean > r->top))
        r->top_layer = t->layer, r->top_head = t->head, r->top = w.mean;
    return hs_head_table_add_welford(&r->table, t->layer, t->head, t->metric, &w);
}

int hs_dla_study_check(hs_dla_opts *o, const hs_study_env *env)
{
    (void)o;
    return hs_dla_check(&env->m->cfg) ? HS_EUNSUPPORTED : HS_OK;
}

int hs_dla_study(hs_dla_result *r, const hs_dla_opts *o, const hs_study_env *env)
{
    (void)o;
    memset(r, 0, sizeof *r);
    r->top_layer = r->top_head = -1;
    const hs_study_io *io = &env->io;
    hs_study_phase(io, "dla");
    int rc = hs_dla_compute(&r->parts, env->m, env->ps, env->batch);
    hs_study_phase(io, NULL);
    for (int k = -1; !rc && k < r->parts.n_terms; k++)
        rc = dla_row(r, k);
    const hs_dla *p = &r->parts;
    for (int i = 0; !rc && i < p->n; i++) {
        double sum = 0;
        for (int k = 0; k < p->n_terms; k++)
            sum += p->value[(size_t)i * p->n_terms + k];
        const double gap = fabs(sum - p->logit_diff[i]) / fmax(fabs(p->logit_diff[i]), 1.0);
        if (!(gap <= r->max_gap)) /* a NaN gap is kept */
            r->max_gap = gap, r->max_gap_line = p->line[i];
    }
    if (!rc)
        rc = hs_study_check_finite(io, &r->table, NULL, 0);
    r->rows = (hs_study_rows){ .heads = &r->table };
    return rc;
}

HS_STUDY_KIND(dla, hs_dla_study_check);

void hs_dla_result_free(hs_dla_result *r)
{
    hs_head_table_free(&r->table);
    hs_dla_free(&r->parts);
    memset(r, 0, sizeof *r);
}

/* ---- logit lens ------------------------------------------------------------------- */

int hs_logit_lens_study_check(hs_logit_lens_opts *o, const hs_study_env *env)
{
    (void)o;
    if (!env->ps == !env->data)
        return hs_fail(HS_EINVAL, "logit-lens: give prompts or a token shard (one of them)");
    return hs_logit_lens_check(&env->m->cfg) ? HS_EUNSUPPORTED : HS_OK;
}

int hs_logit_lens_study(hs_logit_lens_result *r, const hs_logit_lens_opts *o,
                        const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    int rc = hs_logit_lens_study_check((hs_logit_lens_opts *)o, env);
    if (rc)
        return rc;
    const hs_study_io *io = &env->io;
    hs_study_phase(io, "logit-lens");
    rc = env->ps ? hs_lens_prompts(&r->lens, env->m, env->ps, env->batch)
                 : hs_lens_data(&r->lens, env->m, env->data, env->batch, env->seq_len,
                                env->max_batches);
    hs_study_phase(io, NULL);
    const hs_lens *l = &r->lens;
    const int E = l->n_layer + 1;
    for (int e = 0; !rc && e < E; e++) {
        hs_welford wl = { 0 }, wd = { 0 };
        for (long i = 0; i < l->n; i++) {
            if (l->loss[(size_t)i * E + e] != HS_LENS_NO_TARGET) /* a line of one token */
                hs_welford_add(&wl, l->loss[(size_t)i * E + e]);
            if (l->logit_diff)
                hs_welford_add(&wd, l->logit_diff[(size_t)i * E + e]);
        }
        rc = hs_head_table_add_welford(&r->table, e, -1, HS_METRIC(LOGIT_LENS_LOSS), &wl);
        if (!rc && l->logit_diff)
            rc = hs_head_table_add_welford(&r->table, e, -1, HS_METRIC(LOGIT_LENS_LOGIT_DIFF), &wd);
        if (e == E - 1)
            r->final_loss = wl.mean, r->final_logit_diff = l->logit_diff ? wd.mean : NAN;
    }
    if (!rc)
        rc = hs_study_check_finite(io, &r->table, NULL, 0);
    r->rows = (hs_study_rows){ .heads = &r->table };
    return rc;
}

HS_STUDY_KIND(logit_lens, hs_logit_lens_study_check);

void hs_logit_lens_result_free(hs_logit_lens_result *r)
{
    hs_head_table_free(&r->table);
    hs_lens_free(&r->lens);
    memset(r, 0, sizeof *r);
}

/* ---- composition ------------------------------------------------------------------ */

static const hs_metric_id COMP_MEAN[2][3] = {
    { HS_M_Q_COMPOSITION_MEAN, HS_M_K_COMPOSITION_MEAN, HS_M_V_COMPOSITION_MEAN },
    { HS_M_Q_COMPOSITION_CONTROL_MEAN, HS_M_K_COMPOSITION_CONTROL_MEAN,
      HS_M_V_COMPOSITION_CONTROL_MEAN },
};

/* The mean rows of pairs[0..n) (one model) and, for the model, the best
 * pair of each kind. */
static int comp_summary(hs_composition_result *r, const hs_pair_row *p, int n, int control,
                        const hs_study_io *io)
{
    hs_welford w[3] = { { 0 } };
    for (int i = 0; i < n; i++) {
        const int kind = p[i].metric[0] == 'q' ? 0 : p[i].metric[0] == 'k' ? 1 : 2;
        if (!isfinite(p[i].value) && !io->allow_nonfinite) {
            char what[160];
            snprintf(what, sizeof what, "%s of layer %d head %d into layer %d head %d",
                     p[i].metric, p[i].layer_a, p[i].head_a, p[i].layer_b, p[i].head_b);
            return hs_fail_nonfinite(p[i].value, what);
        }
        hs_welford_add(&w[kind], p[i].value);
        if (!control && (r->best[kind][0] < 0 || p[i].value > r->best_value[kind])) {
            r->best_value[kind] = p[i].value;
            int *b = r->best[kind];
            b[0] = p[i].layer_a, b[1] = p[i].head_a, b[2] = p[i].layer_b, b[3] = p[i].head_b;
        }
    }
    int rc = HS_OK;
    for (int k = 0; !rc && k < 3; k++) {
        (control ? r->control_mean : r->mean)[k] = w[k].n ? w[k].mean : NAN;
        if (w[k].n)
            rc = hs_head_table_add_welford(&r->table, -1, -1, hs_metric(COMP_MEAN[control][k])->name,
                                           &w[k]);
    }
    return rc;
}

int hs_composition_check(hs_composition_opts *o, const hs_study_env *env)
{
    (void)o;
    if (env->m->cfg.n_layer < 2)
        return hs_fail(HS_EUNSUPPORTED, "composition: the model has one layer, so no head reads "
                                        "another's output");
    return HS_OK;
}

int hs_composition_study(hs_composition_result *r, const hs_composition_opts *o,
                         const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    for (int k = 0; k < 3; k++)
        r->best[k][0] = -1, r->control_mean[k] = NAN;
    int rc = hs_composition_check((hs_composition_opts *)o, env);
    if (rc)
        return rc;
    const hs_model *m = env->m;
    const hs_study_io *io = &env->io;
    const int control = !o->no_control;
    hs_study_phase(io, "composition");
    rc = hs_composition_scores(&r->pairs, &r->n_pairs, m, 0);
    if (!rc)
        rc = comp_summary(r, r->pairs, r->n_pairs, 0, io);
    if (!rc && control) {
        hs_study_phase(io, "composition: control");
        hs_model ctrl;
        hs_pair_row *cp = NULL;
        int cn = 0;
        if (!(rc = hs_control_model(&ctrl, &m->cfg, (unsigned long long)o->seed))) {
            rc = hs_composition_scores(&cp, &cn, &ctrl, 1);
            hs_model_free(&ctrl);
        }
        hs_pair_row *all = rc ? NULL : realloc(r->pairs, sizeof *all * (size_t)(r->n_pairs + cn));
        if (!rc && !all)
            rc = hs_fail(HS_ENOMEM, "composition: out of memory");
        if (!rc) {
            memcpy(all + r->n_pairs, cp, sizeof *cp * (size_t)cn);
            r->pairs = all;
            rc = comp_summary(r, all + r->n_pairs, cn, 1, io);
            r->n_pairs += cn;
        }
        free(cp);
    }
    hs_study_phase(io, NULL);
    r->rows = (hs_study_rows){ .pairs = r->pairs, .n_pairs = r->n_pairs, .heads = &r->table };
    return rc;
}

HS_STUDY_KIND(composition, hs_composition_check);

void hs_composition_result_free(hs_composition_result *r)
{
    free(r->pairs);
    hs_head_table_free(&r->table);
    memset(r, 0, sizeof *r);
}
