/* The pieces every study shares (study.h). */
#include "study.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "metrics.h"
#include "sha256.h"
#include "transformer.h"
#include "study_prune.h"

int hs_control_model(hs_model *ctrl, const hs_model_config *c, unsigned long long seed)
{
    const int rc = hs_model_init(ctrl, c);
    if (!rc)
        hs_model_init_random(ctrl, seed + 1000003ULL);
    return rc;
}

int hs_fail_nonfinite(double v, const char *what)
{
    return hs_fail(HS_EINVAL,
                   "%s is %s: the model's weights or inputs are not finite (--allow-nonfinite "
                   "keeps such results)",
                   what, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf");
}

int hs_study_check_finite_positions(const hs_study_io *io, const hs_position_row *rows, int n)
{
    char what[96];
    for (int i = 0; !io->allow_nonfinite && i < n; i++)
        if (!isfinite(rows[i].value) || !isfinite(rows[i].stderr_value)) {
            const hs_position_row *p = &rows[i];
            snprintf(what, sizeof what, "%s of layer %d position %d", p->metric, p->layer,
                     p->position);
            return hs_fail_nonfinite(isfinite(p->value) ? p->stderr_value : p->value, what);
        }
    return HS_OK;
}

void hs_premise_words(char *why, size_t n, double gap, double se, long long prompts)
{
    snprintf(why, n, "the logit-difference gap mean LD_clean - mean LD_corrupt = %+.4g has a "
             "standard error of %.2g over %lld prompts: it is within two standard errors of 0",
             gap, se, prompts);
}

int hs_premise_failed(const hs_head_table *t, char *why, size_t n)
{
    const hs_metric_row *ok = hs_head_table_find(t, -1, -1, HS_METRIC(PREMISE_OK));
    const hs_metric_row *gap = hs_head_table_find(t, -1, -1, HS_METRIC(LOGIT_DIFF_GAP));
    if (!ok || !gap || ok->value != 0)
        return 0;
    hs_premise_words(why, n, gap->value, gap->stderr_value, gap->n);
    return 1;
}

int hs_study_premise(const hs_study_io *io, const hs_head_table *t)
{
    char why[256];
    if (!hs_premise_failed(t, why, sizeof why) || (io && io->allow_weak_premise))
        return HS_OK;
    return hs_fail(HS_EINVAL, "%s, so each normalised number would divide by noise: the model "
                   "does not tell these clean prompts from the corrupt ones (headscope predict "
                   "--prompts shows each line's logit difference); --allow-weak-premise records "
                   "them marked not established", why);
}

int hs_study_check_finite(const hs_study_io *io, const hs_head_table *t,
                          const hs_study_curve *curves, int n_curves)
{
    if (io && io->allow_nonfinite)
        return HS_OK;
    char what[160];
    for (int i = 0; t && i < t->n; i++) {
        const hs_metric_row *r = &t->rows[i];
        if (isfinite(r->value) && isfinite(r->stderr_value))
            continue;
        if (r->layer < 0)
            snprintf(what, sizeof what, "%s", r->metric);
        else if (r->head < 0)
            snprintf(what, sizeof what, "%s of layer %d", r->metric, r->layer);
        else
            snprintf(what, sizeof what, "%s of layer %d head %d", r->metric, r->layer, r->head);
        if (!isfinite(r->value))
            return hs_fail_nonfinite(r->value, what);
        snprintf(what + strlen(what), sizeof what - strlen(what), " (its standard error)");
        return hs_fail_nonfinite(r->stderr_value, what);
    }
    for (int c = 0; c < n_curves; c++)
        for (int i = 0; i < curves[c].n; i++)
            if (!isfinite(curves[c].points[i].y)) {
                snprintf(what, sizeof what, "point %d of curve %s", i, curves[c].name);
                return hs_fail_nonfinite(curves[c].points[i].y, what);
            }
    return HS_OK;
}

/* The heads of the run's model that pruned_heads removed (the run's
 * parameter "pruned_heads", hs_inputs_record): l * HS_MAX_HEADS + h each,
 * into keys (HS_MAX_PRUNED); the count. */
static int pruned_of(hs_index *ix, int64_t run_id, int *keys)
{
    enum { CAP = 1 << 16 };
    char *text = malloc(CAP);
    int found = 0, n = 0;
    if (!text || hs_index_param_get(ix, run_id, "pruned_heads", text, CAP, &found) || !found) {
        free(text);
        return 0;
    }
    cJSON *o = cJSON_Parse(text), *layer, *h;
    cJSON_ArrayForEach(layer, o)
    {
        cJSON_ArrayForEach(h, layer)
        {
            if (n < HS_MAX_PRUNED && cJSON_IsNumber(h))
                keys[n++] = atoi(layer->string) * HS_MAX_HEADS + h->valueint;
        }
    }
    cJSON_Delete(o);
    free(text);
    return n;
}

static int is_pruned(const int *keys, int n, int layer, int head)
{
    for (int i = 0; i < n && head >= 0; i++)
        if (keys[i] == layer * HS_MAX_HEADS + head)
            return 1;
    return 0;
}

/* rows less those of pruned heads (SPEC §16: a pruned head has no rows),
 * into the copies *heads and *pairs (NULL where nothing is dropped). */
static int drop_pruned(hs_index *ix, int64_t run_id, const hs_study_rows *rows,
                       hs_metric_row **heads, int *n_heads, hs_pair_row **pairs, int *n_pairs)
{
    const hs_head_table *t = rows->heads;
    *heads = NULL, *pairs = NULL;
    *n_heads = t ? t->n : 0, *n_pairs = rows->n_pairs;
    int *keys = hs_calloc(HS_MAX_PRUNED, sizeof *keys, "pruned heads");
    const int np = keys ? pruned_of(ix, run_id, keys) : 0;
    if (!keys || !np) {
        free(keys);
        return keys ? HS_OK : HS_ENOMEM;
    }
    *heads = hs_calloc((size_t)*n_heads + 1, sizeof **heads, "rows");
    *pairs = hs_calloc((size_t)*n_pairs + 1, sizeof **pairs, "rows");
    if (!*heads || !*pairs) {
        free(keys);
        return HS_ENOMEM;
    }
    int k = 0;
    for (int i = 0; i < *n_heads; i++)
        if (!is_pruned(keys, np, t->rows[i].layer, t->rows[i].head))
            (*heads)[k++] = t->rows[i];
    *n_heads = k, k = 0;
    for (int i = 0; i < *n_pairs; i++) {
        const hs_pair_row *r = &rows->pairs[i];
        if (!is_pruned(keys, np, r->layer_a, r->head_a) &&
            !is_pruned(keys, np, r->layer_b, r->head_b))
            (*pairs)[k++] = *r;
    }
    *n_pairs = k;
    free(keys);
    return HS_OK;
}

int hs_study_rows_record(hs_index *ix, int64_t run_id, const hs_study_rows *rows)
{
    if (!ix)
        return HS_OK;
    hs_metric_row *heads;
    hs_pair_row *pairs;
    int n_heads, n_pairs;
    int rc = drop_pruned(ix, run_id, rows, &heads, &n_heads, &pairs, &n_pairs);
    if (!rc && n_pairs)
        rc = hs_index_pair_metrics_add(ix, run_id, pairs ? pairs : rows->pairs, n_pairs);
    if (!rc && n_heads)
        rc = hs_index_metrics_add(ix, run_id, heads ? heads : rows->heads->rows, n_heads);
    free(heads);
    free(pairs);
    for (int i = 0; !rc && i < rows->n_curves; i++)
        rc = hs_index_curve_add(ix, run_id, rows->curve[i].name, rows->curve[i].points,
                                rows->curve[i].n);
    if (!rc && rows->n_pos)
        rc = hs_index_position_metrics_add(ix, run_id, rows->pos, rows->n_pos);
    if (!rc && rows->n_edges > INT_MAX)
        rc = hs_fail(HS_EINVAL, "run: %ld edges are more than the index takes at once",
                     rows->n_edges);
    if (!rc && rows->n_edges)
        rc = hs_index_edge_metrics_add(ix, run_id, rows->edges, (int)rows->n_edges);
    return rc;
}

int hs_study_record(hs_index *ix, int64_t run_id, const hs_head_table *t,
                    const hs_study_curve *curves, int n_curves)
{
    hs_study_rows rows = { .heads = t, .n_curves = n_curves };
    for (int i = 0; i < n_curves; i++)
        rows.curve[i] = curves[i];
    return hs_study_rows_record(ix, run_id, &rows);
}

int hs_forward_ms(double *ms, const hs_model *m, const hs_tokens *tok, int B, int T)
{
    *ms = -1;
    hs_acts a;
    int rc = hs_acts_alloc(&a, &m->cfg, B, T, HS_ACTS_INFER);
    if (rc)
        return rc;
    int32_t *in = hs_calloc((size_t)B * T, sizeof(int32_t), "forward tokens");
    int32_t *tg = hs_calloc((size_t)B * T, sizeof(int32_t), "forward targets");
    rc = in && tg ? HS_OK : HS_ENOMEM;
    double t[7];
    if (!rc)
        hs_batch_at(tok, 0, B, T, in, tg);
    for (int r = -1; !rc && r < 7; r++) {
        const double t0 = hs_now();
        rc = hs_forward(&a, m, in, NULL, NULL);
        if (r >= 0)
            t[r] = (hs_now() - t0) * 1e3;
    }
    if (!rc) {
        for (int i = 1; i < 7; i++) /* insertion sort, 7 values */
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                const double x = t[j];
                t[j] = t[j - 1];
                t[j - 1] = x;
            }
        *ms = t[3];
    }
    free(in), free(tg);
    hs_acts_free(&a);
    return rc;
}

int hs_study_record_artifact(hs_index *ix, int64_t run_id, const char *path)
{
    if (!ix)
        return HS_OK;
    char sha[80];
    uint64_t bytes = 0;
    const int rc = hs_sha256_file(path, sha, &bytes);
    return rc ? rc : hs_index_artifact_add(ix, run_id, path, sha, (int64_t)bytes, 1);
}

void hs_curve_writer_add(hs_curve_writer *w, hs_curve_point p)
{
    if (!w->ix)
        return;
    w->pending[w->n++] = p;
    if (w->n == (int)(sizeof w->pending / sizeof w->pending[0]))
        hs_curve_writer_flush(w);
}

int hs_curve_writer_flush(hs_curve_writer *w)
{
    int rc = HS_OK;
    if (w->ix && w->n && !w->failed &&
        (rc = hs_index_curve_add(w->ix, w->run_id, w->name, w->pending, w->n)))
        w->failed = 1;
    w->n = 0;
    return rc;
}

void hs_study_phase(const hs_study_io *io, const char *label)
{
    if (io && io->phase)
        io->phase(io->ctx, label);
}

void hs_study_progress(void *ctx, size_t done, size_t total)
{
    const hs_study_io *io = ctx;
    if (io->progress)
        io->progress(io->ctx, done, total);
}
