/* The ablation study (study.h): every head's loss deltas, layer by layer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "metrics.h"
#include "pairs.h"
#include "study.h"
#include "study_ablate.h"
#include "task_heads.h"

/* "0,2" -> flags[i] = 1 for each entry < limit; -1 on a bad list. */
static int parse_flags(const char *s, unsigned char *flags, int limit)
{
    int list[(int)HS_MAX_HEADS > (int)HS_MAX_LAYERS ? (int)HS_MAX_HEADS : (int)HS_MAX_LAYERS];
    const int n = hs_parse_ints(s, list, (int)(sizeof list / sizeof list[0]), 0, limit - 1, 0);
    for (int i = 0; i < n; i++)
        flags[list[i]] = 1;
    return n;
}

int hs_ablate_kinds(const char *method)
{
    int kinds = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", method);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < HS_ABLATE_KINDS && strcmp(tok, hs_ablate_kind_name(k)))
            k++;
        if (k == HS_ABLATE_KINDS)
            return hs_fail(HS_EINVAL, "unknown method '%s' (zero, mean, resample)", tok), -1;
        kinds |= 1 << k;
    }
    if (!kinds)
        return hs_fail(HS_EINVAL, "--method needs at least one of zero, mean, resample"), -1;
    return kinds;
}

/* The selection as flags per layer and per head; HS_EINVAL naming the option. */
static int selection(const hs_ablate_study_opts *o, const hs_model_config *c,
                     unsigned char *lsel, unsigned char *hsel)
{
    int min_heads = 1 << 30;
    for (int l = 0; l < c->n_layer; l++)
        min_heads = c->n_head[l] < min_heads ? c->n_head[l] : min_heads;
    if (o->layers && parse_flags(o->layers, lsel, c->n_layer) <= 0)
        return hs_fail(HS_EINVAL, "--layers '%s': indices 0..%d expected (the model has %d "
                       "layers)", o->layers, c->n_layer - 1, c->n_layer);
    if (o->heads && parse_flags(o->heads, hsel, min_heads) <= 0)
        return hs_fail(HS_EINVAL, "--heads '%s': indices 0..%d expected (the smallest layer has "
                       "%d heads)", o->heads, min_heads - 1, min_heads);
    return HS_OK;
}

/* What hs_ablate takes of o and env (its callbacks are the study's). */
static hs_ablate_opts ablate_opts(const hs_ablate_study_opts *o, const hs_study_env *env)
{
    return (hs_ablate_opts){ .B = env->batch, .T = env->seq_len, .max_batches = env->max_batches,
                             .kinds = o->kinds, .stack = o->stack, .naive = o->naive,
                             .stop = env->io.stop };
}

int hs_ablate_study_check(hs_ablate_study_opts *o, const hs_study_env *env)
{
    const hs_model_config *c = &env->m->cfg;
    if ((o->kinds = hs_ablate_kinds(o->method ? o->method : "zero")) < 0)
        return HS_EINVAL;
    unsigned char lsel[HS_MAX_LAYERS] = { 0 }, hsel[HS_MAX_HEADS] = { 0 };
    const int rc = selection(o, c, lsel, hsel);
    const hs_ablate_opts ao = ablate_opts(o, env);
    if (!rc && env->data && env->data->valid && (o->kinds & ~(1 << HS_ABLATE_ZERO)))
        return hs_fail(HS_EINVAL, "--lines: mean and resample ablation would average over the "
                                  "padding and take donors' padded positions; not implemented "
                                  "yet (--method zero)");
    if (!rc && env->pairs && o->kinds != 1 << HS_ABLATE_ZERO)
        return hs_fail(HS_EINVAL, "--pairs: an encoder-decoder's heads are zero-ablated only "
                                  "(--method zero; mean and resample are not implemented "
                                  "there)");
    if (!rc && (env->task || env->pairs) && env->resume)
        return hs_fail(HS_EINVAL, "--resume: ablate --task records its rows at its end, so an "
                                  "interrupted run has nothing to finish");
    return rc ? rc : hs_ablate_check(c, &ao);
}

void hs_ablate_result_free(hs_ablate_result *r)
{
    hs_head_table_free(&r->table);
}

/* --resume: a layer is recorded in one transaction, so it is either
 * complete in the index or absent; complete layers are skipped. */
static int skip_recorded(hs_ablate_result *r, const hs_ablate_study_opts *o,
                         const hs_study_env *env, unsigned char *head_on)
{
    const hs_model_config *c = &env->m->cfg;
    int rc = HS_OK;
    for (int l = 0; !rc && l < c->n_layer; l++) {
        int all = 1, any = 0;
        for (int h = 0; h < c->n_head[l] && all; h++)
            for (int k = 0; k < HS_ABLATE_KINDS && all; k++) {
                if (!head_on[(size_t)l * HS_MAX_HEADS + h] || !(o->kinds & (1 << k)))
                    continue;
                char name[32];
                int exists = 0;
                snprintf(name, sizeof name, "loss_delta_%s", hs_ablate_kind_name(k));
                rc = hs_index_metric_exists(env->ix, env->run_id, l, h, name, &exists);
                all = all && exists;
                any = 1;
            }
        if (any && all) {
            memset(head_on + (size_t)l * HS_MAX_HEADS, 0, HS_MAX_HEADS);
            r->layers_skipped++;
        }
    }
    return rc;
}

typedef struct {
    hs_ablate_result *r;
    const hs_study_env *env;
    const hs_ablate_opts *ao;
} layer_ctx;

static void on_progress(void *ctx, size_t done, size_t total)
{
    const hs_study_io *io = &((layer_ctx *)ctx)->env->io;
    if (io->progress)
        io->progress(io->ctx, done, total);
}

/* One layer's rows (the clean loss first), into the result and, in one
 * transaction, into the index. */
static int on_layer(void *ctx, const hs_ablate_layer *l)
{
    layer_ctx *c = ctx;
    hs_ablate_result *r = c->r;
    hs_head_table t = { 0 };
    int rc = r->table.n ? HS_OK : hs_head_table_add(&t, -1, -1, HS_METRIC(LOSS), c->ao->clean_loss, 0, 0);
    if (!rc)
        rc = hs_ablate_layer_to_table(&t, l);
    for (int k = 0; k < HS_ABLATE_KINDS; k++)
        for (int h = 0; h < l->n_heads; h++) {
            const hs_ablate_stat *s = &l->stat[k * l->n_heads + h];
            if (s->n && (s->delta > r->worst_delta[k] || r->worst_layer[k] < 0)) {
                r->worst_delta[k] = s->delta;
                r->worst_layer[k] = l->layer;
                r->worst_head[k] = h;
            }
        }
    if (!rc) /* refused before it is recorded: a run never holds NULL metrics */
        rc = hs_study_check_finite(&c->env->io, &t, NULL, 0);
    if (!rc)
        rc = hs_study_record(c->env->ix, c->env->run_id, &t, NULL, 0);
    for (int i = 0; !rc && i < t.n; i++)
        rc = hs_head_table_add(&r->table, t.rows[i].layer, t.rows[i].head, t.rows[i].metric,
                               t.rows[i].value, t.rows[i].stderr_value, t.rows[i].n);
    hs_head_table_free(&t);
    return rc;
}

/* ablate --pairs (SPEC §17): every head of every attention type zeroed on
 * the pairs, every row at the end, the largest zero delta beside them. */
static int pairs_study(hs_ablate_result *r, const hs_study_env *env,
                       const unsigned char *head_on)
{
    const hs_pairs_ablate_opts po = { env->batch, head_on,
                                      1u << HS_ATTN_ENC | 1u << HS_ATTN_DEC | 1u << HS_ATTN_CROSS,
                                      env->io.stop, hs_study_progress, (void *)&env->io };
    hs_study_phase(&env->io, "ablate");
    int rc = hs_pairs_ablate(&r->table, env->m, env->pairs, &po);
    hs_study_phase(&env->io, NULL);
    for (int i = 0; !rc && i < r->table.n; i++) {
        const hs_metric_row *w = &r->table.rows[i];
        if (w->layer < 0)
            r->clean_loss = w->value;
        else if (r->worst_layer[HS_ABLATE_ZERO] < 0 || w->value > r->worst_delta[HS_ABLATE_ZERO])
            r->worst_delta[HS_ABLATE_ZERO] = w->value, r->worst_layer[HS_ABLATE_ZERO] = w->layer,
            r->worst_head[HS_ABLATE_ZERO] = w->head, r->worst_attn = w->attn;
    }
    if (!rc)
        rc = hs_study_check_finite(&env->io, &r->table, NULL, 0);
    r->rows = (hs_study_rows){ .heads = &r->table };
    return rc;
}

/* ablate --task (SPEC §16): every row at the end, with the largest loss
 * delta of each kind. */
static int task_study(hs_ablate_result *r, const hs_ablate_study_opts *o, const hs_study_env *env,
                      const unsigned char *head_on)
{
    const hs_task_ablate_opts to = { env->batch, o->kinds, head_on, env->io.stop,
                                     hs_study_progress, (void *)&env->io };
    hs_study_phase(&env->io, "ablate");
    int rc = hs_task_ablate(&r->table, env->m, env->task, &to);
    hs_study_phase(&env->io, NULL);
    for (int i = 0; !rc && i < r->table.n; i++) {
        const hs_metric_row *w = &r->table.rows[i];
        if (w->layer < 0 && !strcmp(w->metric, HS_METRIC(TASK_LOSS)))
            r->clean_loss = w->value;
        for (int k = 0; k < HS_ABLATE_KINDS; k++)
            if (!strncmp(w->metric, "loss_delta_", 11) &&
                !strcmp(w->metric + 11, hs_ablate_kind_name(k)) &&
                (r->worst_layer[k] < 0 || w->value > r->worst_delta[k]))
                r->worst_delta[k] = w->value, r->worst_layer[k] = w->layer,
                r->worst_head[k] = w->head;
    }
    if (!rc)
        rc = hs_study_check_finite(&env->io, &r->table, NULL, 0);
    r->rows = (hs_study_rows){ .heads = &r->table };
    return rc;
}

int hs_ablate_study(hs_ablate_result *r, const hs_ablate_study_opts *o,
                    const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    for (int k = 0; k < HS_ABLATE_KINDS; k++)
        r->worst_layer[k] = -1;
    const hs_model *m = env->m;
    const hs_model_config *c = &m->cfg;
    const hs_study_io *io = &env->io;
    unsigned char lsel[HS_MAX_LAYERS] = { 0 }, hsel[HS_MAX_HEADS] = { 0 };
    int rc = selection(o, c, lsel, hsel);
    if (rc)
        return rc;
    unsigned char *head_on = hs_calloc((size_t)c->n_layer * HS_MAX_HEADS, 1, "head selection");
    if (!head_on)
        return HS_ENOMEM;
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            head_on[(size_t)l * HS_MAX_HEADS + h] = (!o->layers || lsel[l]) && (!o->heads || hsel[h]);
    if (env->task || env->pairs) {
        rc = env->task ? task_study(r, o, env, head_on) : pairs_study(r, env, head_on);
        free(head_on);
        return rc;
    }
    if (env->resume && env->ix)
        rc = skip_recorded(r, o, env, head_on);
    /* under mpirun: rank 0's index decides what is left to run */
    rc = hs_dist_bcast(rc, head_on, (size_t)c->n_layer * HS_MAX_HEADS);
    hs_ablate_opts ao = ablate_opts(o, env);
    layer_ctx lc = { r, env, &ao };
    ao.head_on = head_on, ao.on_layer = on_layer, ao.progress = on_progress, ao.ctx = &lc;
    hs_study_phase(io, "ablate");
    if (!rc)
        rc = hs_ablate(m, env->data, &ao);
    hs_study_phase(io, NULL);
    r->clean_loss = ao.clean_loss;
    free(head_on);
    return rc;
}

HS_STUDY_KIND(ablate, hs_ablate_study_check);
