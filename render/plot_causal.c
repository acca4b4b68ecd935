/* The causal figures of plot and report (SPEC §11): activation patching as a
 * layer x position heatmap with the prompt's tokens, direct logit
 * attribution as sorted bars, the logit lens curve, composition matrices
 * beside their control. Data goes to files in a temporary directory; the
 * scripts in scripts/ draw them (labels are data, never commands). */
#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "gnuplot.h"
#include "json.h"
#include "labels.h"
#include "metrics.h"

enum { LABEL_CAP = 48 };

static int write_fail(FILE *f, const char *path, int rc)
{
    if (f && fclose(f) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed", path);
    return rc;
}

/* ---- token labels ------------------------------------------------------------------ */

/* A token's text as a label: hs_token_display's form (a space as a
 * middle dot, as plot map shows it), safe for gnuplot's default font. */
static void label_text(char *out, size_t n, const char *s)
{
    hs_token_display(out, n, s, 12, 1);
}

/* lab[p] for positions 0 .. np-1 of a patching run: the labels the run
 * recorded for its prompts of np tokens (run.h: the tokens of the first
 * clean prompt of that length), shown as plot map shows tokens; the position
 * number where it recorded none. Returns 1 when tokens label it. */
static int position_labels(hs_index *ix, int64_t run, int np, char (*lab)[LABEL_CAP])
{
    for (int p = 0; p < np; p++)
        snprintf(lab[p], LABEL_CAP, "%d", p);
    char key[48];
    snprintf(key, sizeof key, "positions_%d", np);
    size_t cap = (size_t)np * 160 + 64;
    char *text = malloc(cap);
    int found = 0;
    cJSON *a = NULL;
    if (!text || hs_index_param_get(ix, run, key, text, cap, &found) || !found ||
        hs_json_parse(&a, text, strlen(text), "the run's position labels") ||
        cJSON_GetArraySize(a) != np) {
        free(text);
        cJSON_Delete(a);
        return 0;
    }
    for (int p = 0; p < np; p++) {
        const cJSON *e = cJSON_GetArrayItem(a, p);
        if (cJSON_IsString(e))
            label_text(lab[p], LABEL_CAP, e->valuestring);
    }
    free(text);
    cJSON_Delete(a);
    return 1;
}

/* ---- patching heatmap ----------------------------------------------------------------- */

/* cells.txt, absent.txt and labels.txt of a position grid; *absent: cells
 * without a row. */
static int write_patch(const char *dir, const hs_position_grid *g, char (*lab)[LABEL_CAP],
                       int *absent, double *hi)
{
    char pc[1200], pa[1200], pl[1200];
    snprintf(pc, sizeof pc, "%s/cells.txt", dir);
    snprintf(pa, sizeof pa, "%s/absent.txt", dir);
    snprintf(pl, sizeof pl, "%s/labels.txt", dir);
    FILE *c = hs_plot_file(pc), *a = hs_plot_file(pa), *l = hs_plot_file(pl);
    int rc = c && a && l ? HS_OK : hs_fail(HS_EIO, "%s: cannot write", dir);
    *absent = 0, *hi = 1;
    for (int i = 0; !rc && i < g->n_layer * g->n_pos; i++) {
        const int layer = i / g->n_pos, pos = i % g->n_pos;
        if (g->present[i] && isfinite(g->cell[i].value)) {
            fprintf(c, "%d\t%d\t%.9g\n", layer, pos, g->cell[i].value);
            *hi = fmax(*hi, fabs(g->cell[i].value));
        } else {
            fprintf(a, "%d\t%d\n", layer, pos), ++*absent;
        }
    }
    for (int p = 0; !rc && p < g->n_pos; p++)
        fprintf(l, "%d\t%s\n", p, lab[p]);
    rc = write_fail(c, pc, rc);
    rc = write_fail(a, pa, rc);
    return write_fail(l, pl, rc);
}

int hs_plot_patch(hs_index *ix, const char *db, const char *metric, long long run_id,
               const char *out)
{
    if (!metric)
        metric = HS_METRIC(PATCH_RESID_PRE);
    int64_t run = run_id;
    hs_position_grid g = { 0 };
    char dir[600] = "", assign[8192], title[400], qtitle[3300], qlab[1700], cblab[300];
    char qx[600];
    int rc = run ? HS_OK : hs_index_latest_with_position_metric(ix, metric, &run);
    if (!rc)
        rc = hs_index_position_grid(ix, run, metric, &g);
    if (!rc && !g.count)
        rc = hs_fail(HS_EINVAL, "%s: no position metric \"%s\"%s (run `headscope patch` "
                     "first)", db, metric, run_id ? " in that run" : "");
    char(*lab)[LABEL_CAP] = rc ? NULL : calloc((size_t)g.n_pos, LABEL_CAP);
    if (!rc && !lab)
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    int absent = 0, tokens = 0;
    double hi = 1;
    if (!rc) {
        tokens = position_labels(ix, run, g.n_pos, lab);
        rc = hs_plot_tmpdir(dir, sizeof dir);
    }
    if (!rc)
        rc = write_patch(dir, &g, lab, &absent, &hi);
    hs_metric_range scale; /* the normalised numbers' shared scale, -1 .. 1 */
    hs_metric_range_of(&scale, metric, 0, hi, hi, 1);
    hi = scale.hi;
    snprintf(title, sizeof title, "%s, run %lld: (LD patched − LD corrupt) / (LD clean − LD "
             "corrupt) (%s)", metric, (long long)run, db);
    snprintf(cblab, sizeof cblab, "%s", scale.label);
    hs_gp_quote(qtitle, sizeof qtitle, title);
    hs_gp_quote(qlab, sizeof qlab, cblab);
    hs_gp_quote(qx, sizeof qx, tokens ? "position: token of the first clean prompt of this length"
                                     : "position (the run's prompts could not be read)");
    snprintf(assign, sizeof assign, "datafile='%s/cells.txt'; labelfile='%s/labels.txt'; "
             "plottitle=%s; cblab=%s; xlab=%s; nl=%d; np=%d; hi=%.9g%s%s%s", dir, dir, qtitle,
             qlab, qx,
             g.n_layer, g.n_pos, hi, absent ? "; absentfile='" : "", absent ? dir : "",
             absent ? "/absent.txt'" : "");
    if (!rc)
        rc = hs_gnuplot("plot_patch.gp", assign, out);
    free(lab);
    hs_position_grid_free(&g);
    hs_plot_tmpdir_remove(dir);
    return rc;
}

/* ---- DLA bars ---------------------------------------------------------------------- */

typedef struct {
    char label[40];
    hs_metric_value v;
    int kind; /* 0 head, 1 MLP, 2 model-wide */
} dla_bar;

static int by_value_desc(const void *a, const void *b)
{
    const double x = ((const dla_bar *)a)->v.value, y = ((const dla_bar *)b)->v.value;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int by_magnitude_desc(const void *a, const void *b)
{
    const double x = fabs(((const dla_bar *)a)->v.value), y = fabs(((const dla_bar *)b)->v.value);
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The model-wide parts of a dla run, labelled by their descriptors. */
static const hs_metric_id DLA_WIDE[] = { HS_M_DLA_EMBED, HS_M_DLA_POS_EMBED, HS_M_DLA_ATTN_BIAS,
                                         HS_M_DLA_FINAL_NORM_BIAS, HS_M_DLA_LM_HEAD_BIAS };

/* Every part of a dla run as bars (malloc'd). */
static int dla_bars(hs_index *ix, int64_t run, dla_bar **out, int *n)
{
    hs_metric_grid g = { 0 };
    hs_metric_series s = { 0 };
    int rc = hs_index_metric_grid(ix, run, HS_METRIC(DLA), &g);
    if (!rc)
        rc = hs_index_layer_series(ix, run, HS_METRIC(DLA), &s);
    const int cap = g.count + s.n + 5;
    dla_bar *b = rc ? NULL : calloc((size_t)cap, sizeof *b);
    if (!rc && !b)
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    int k = 0;
    for (int c = 0; !rc && c < g.n_layer * g.n_head; c++)
        if (g.present[c]) {
            snprintf(b[k].label, sizeof b[k].label, "L%dH%d", c / g.n_head, c % g.n_head);
            b[k++].v = g.cell[c];
        }
    for (int i = 0; !rc && i < s.n; i++) {
        snprintf(b[k].label, sizeof b[k].label, "MLP %lld", s.key[i]);
        b[k].kind = 1, b[k++].v = s.v[i];
    }
    for (size_t i = 0; !rc && i < sizeof DLA_WIDE / sizeof DLA_WIDE[0]; i++) {
        int found = 0;
        rc = hs_index_metric_get(ix, run, -1, -1, hs_metric(DLA_WIDE[i])->name, &b[k].v, &found);
        if (!rc && found) {
            snprintf(b[k].label, sizeof b[k].label, "%s", hs_metric(DLA_WIDE[i])->label);
            b[k++].kind = 2;
        }
    }
    hs_metric_grid_free(&g);
    hs_metric_series_free(&s);
    if (rc) {
        free(b);
        return rc;
    }
    *out = b, *n = k;
    return HS_OK;
}

enum { DLA_MAX_BARS = 40 };

int hs_plot_dla(hs_index *ix, const char *db, long long run_id, const char *out)
{
    int64_t run = run_id;
    dla_bar *b = NULL;
    int n = 0;
    hs_metric_value ld = { NAN, NAN, 0 };
    int found = 0;
    char dir[600] = "", p[1200], assign[8192], title[400], qtitle[3300];
    int rc = run ? HS_OK : hs_index_latest_with_metric(ix, HS_METRIC(DLA), &run);
    if (!rc)
        rc = dla_bars(ix, run, &b, &n);
    if (!rc && !n)
        rc = hs_fail(HS_EINVAL, "%s: no metric \"dla\"%s (run `headscope dla` first)", db,
                     run_id ? " in that run" : "");
    if (!rc)
        rc = hs_index_metric_get(ix, run, -1, -1, HS_METRIC(LOGIT_DIFF_CLEAN), &ld, &found);
    const int shown = n > DLA_MAX_BARS ? DLA_MAX_BARS : n;
    if (!rc) {
        qsort(b, (size_t)n, sizeof *b, by_magnitude_desc); /* keep the largest parts */
        qsort(b, (size_t)shown, sizeof *b, by_value_desc);
        rc = hs_plot_tmpdir(dir, sizeof dir);
    }
    snprintf(p, sizeof p, "%s/dla.txt", dir);
    FILE *f = rc ? NULL : hs_plot_file(p);
    if (!rc && !f)
        rc = hs_fail(HS_EIO, "%s: cannot write", p);
    for (int i = 0; f && i < shown; i++)
        fprintf(f, "%d\t%s\t%.9g\t%.9g\t%d\n", i, b[i].label, b[i].v.value,
                isfinite(b[i].v.stderr_value) ? b[i].v.stderr_value : 0, b[i].kind);
    rc = write_fail(f, p, rc);
    snprintf(title, sizeof title, "direct logit attribution, run %lld: %s%d parts over %lld "
             "prompts (%s)", (long long)run, shown < n ? "the largest " : "", shown,
             (long long)ld.n, db);
    hs_gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign, "datafile='%s'; plottitle=%s; n=%d; ld=%.9g", p, qtitle,
             shown, ld.value);
    if (!rc)
        rc = hs_gnuplot("plot_dla.gp", assign, out);
    free(b);
    hs_plot_tmpdir_remove(dir);
    return rc;
}

/* ---- logit lens ---------------------------------------------------------------------- */

int hs_plot_lens(hs_index *ix, const char *db, long long run_id, const char *out)
{
    int64_t run = run_id;
    hs_metric_series loss = { 0 }, ld = { 0 };
    char dir[600] = "", p[1200], assign[8192], title[400], qtitle[3300];
    int rc = run ? HS_OK : hs_index_latest_with_metric(ix, HS_METRIC(LOGIT_LENS_LOSS), &run);
    if (!rc)
        rc = hs_index_layer_series(ix, run, HS_METRIC(LOGIT_LENS_LOSS), &loss);
    if (!rc)
        rc = hs_index_layer_series(ix, run, HS_METRIC(LOGIT_LENS_LOGIT_DIFF), &ld);
    if (!rc && loss.n < 2)
        rc = hs_fail(HS_EINVAL, "%s: no logit lens%s (run `headscope logit-lens` first)", db,
                     run_id ? " in that run" : "");
    if (!rc)
        rc = hs_plot_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/lens.txt", dir);
    FILE *f = rc ? NULL : hs_plot_file(p);
    if (!rc && !f)
        rc = hs_fail(HS_EIO, "%s: cannot write", p);
    const int withld = ld.n == loss.n;
    for (int i = 0; f && i < loss.n; i++)
        fprintf(f, "%lld %.9g %.9g %.9g %.9g\n", loss.key[i], loss.v[i].value,
                loss.v[i].stderr_value, withld ? ld.v[i].value : NAN,
                withld ? ld.v[i].stderr_value : NAN);
    rc = write_fail(f, p, rc);
    snprintf(title, sizeof title, "logit lens, run %lld: %lld %s (%s)", (long long)run,
             loss.n ? loss.v[0].n : 0, withld ? "prompts" : "sequences", db);
    hs_gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign, "datafile='%s'; plottitle=%s; nl=%d; withld=%d; ylab='%s'",
             p, qtitle, loss.n, withld,
             withld ? "loss of the answer, −log p (nats)" : "next-token loss (nats)");
    if (!rc)
        rc = hs_gnuplot("plot_lens.gp", assign, out);
    hs_metric_series_free(&loss);
    hs_metric_series_free(&ld);
    hs_plot_tmpdir_remove(dir);
    return rc;
}

/* ---- composition ---------------------------------------------------------------------- */

/* Heads numbered layer by layer from the pairs' own layers and heads:
 * first[l] = index of head 0 of layer l (first[L] = the count). */
static int head_numbering(const hs_pair_list *a, const hs_pair_list *b, int **first, int *nl)
{
    int L = 0;
    const hs_pair_list *ls[2] = { a, b };
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ls[k]->n; i++)
            L = ls[k]->p[i].layer_b + 1 > L ? ls[k]->p[i].layer_b + 1 : L;
    int *heads = calloc((size_t)L + 1, sizeof(int)), *f = calloc((size_t)L + 1, sizeof(int));
    if (!heads || !f) {
        free(heads), free(f);
        return hs_fail(HS_ENOMEM, "plot: out of memory");
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ls[k]->n; i++) {
            const hs_pair_value *v = &ls[k]->p[i];
            if (v->layer_a < 0 || v->head_a < 0 || v->head_b < 0 || v->head_a >= 65536 ||
                v->head_b >= 65536 || v->layer_a >= v->layer_b) {
                free(heads), free(f);
                return hs_fail(HS_EFORMAT, "composition row L%dH%d -> L%dH%d: not an earlier "
                               "head into a later one", v->layer_a, v->head_a, v->layer_b,
                               v->head_b);
            }
            heads[v->layer_a] = v->head_a + 1 > heads[v->layer_a] ? v->head_a + 1 : heads[v->layer_a];
            heads[v->layer_b] = v->head_b + 1 > heads[v->layer_b] ? v->head_b + 1 : heads[v->layer_b];
        }
    for (int l = 0; l < L; l++)
        f[l + 1] = f[l] + heads[l];
    free(heads);
    *first = f, *nl = L;
    return HS_OK;
}

static int write_pairs(const char *path, const hs_pair_list *l, const int *first, double *mean)
{
    FILE *f = hs_plot_file(path);
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", path);
    double s = 0;
    int n = 0;
    for (int i = 0; i < l->n; i++) {
        const hs_pair_value *v = &l->p[i];
        fprintf(f, "%d %d %.9g\n", first[v->layer_a] + v->head_a, first[v->layer_b] + v->head_b,
                v->value);
        if (isfinite(v->value))
            s += v->value, n++;
    }
    *mean = n ? s / n : NAN;
    return write_fail(f, path, HS_OK);
}

static int write_head_labels(const char *path, const int *first, int nl)
{
    FILE *f = hs_plot_file(path);
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", path);
    for (int l = 0; l < nl; l++)
        for (int h = 0; h < first[l + 1] - first[l]; h++)
            fprintf(f, "%d L%dH%d\n", first[l] + h, l, h);
    return write_fail(f, path, HS_OK);
}

int hs_plot_composition(hs_index *ix, const char *db, const char *metric, long long run_id,
                     const char *out)
{
    if (!metric)
        metric = HS_METRIC(Q_COMPOSITION);
    int64_t run = run_id;
    hs_pair_list m = { 0 }, c = { 0 };
    int *first = NULL, nl = 0;
    double mean = NAN, cmean = NAN;
    char dir[600] = "", p[3][1200], cm[160], assign[8192], title[400], qtitle[3300];
    char ct[160], qct[1000];
    hs_metric_control(metric, cm, sizeof cm);
    int rc = run ? HS_OK : hs_index_latest_with_pair_metric(ix, metric, &run);
    if (!rc)
        rc = hs_index_pair_metrics(ix, run, metric, &m);
    if (!rc)
        rc = hs_index_pair_metrics(ix, run, cm, &c);
    if (!rc && !m.n)
        rc = hs_fail(HS_EINVAL, "%s: no head-pair metric \"%s\"%s (run `headscope composition` "
                     "first)", db, metric, run_id ? " in that run" : "");
    if (!rc)
        rc = head_numbering(&m, &c, &first, &nl);
    if (!rc)
        rc = hs_plot_tmpdir(dir, sizeof dir);
    const char *names[3] = { "comp.txt", "control.txt", "labels.txt" };
    for (int i = 0; i < 3; i++)
        snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
    if (!rc)
        rc = write_pairs(p[0], &m, first, &mean);
    if (!rc && c.n)
        rc = write_pairs(p[1], &c, first, &cmean);
    if (!rc)
        rc = write_head_labels(p[2], first, nl);
    snprintf(title, sizeof title, "%s, run %lld: mean %.3f over %d pairs%s (%s)", metric,
             (long long)run, mean, m.n, c.n ? ", beside the random-init control" : "", db);
    snprintf(ct, sizeof ct, "random-init control: mean %.3f", cmean);
    hs_gp_quote(qtitle, sizeof qtitle, title);
    hs_gp_quote(qct, sizeof qct, ct);
    snprintf(assign, sizeof assign, "datafile='%s'; labelfile='%s'; plottitle=%s; n=%d%s%s%s; "
             "ctitle=%s", p[0], p[2], qtitle, nl ? first[nl] : 0, c.n ? "; controlfile='" : "",
             c.n ? p[1] : "", c.n ? "'" : "", qct);
    if (!rc)
        rc = hs_gnuplot("plot_composition.gp", assign, out);
    free(first);
    hs_pair_list_free(&m);
    hs_pair_list_free(&c);
    hs_plot_tmpdir_remove(dir);
    return rc;
}
