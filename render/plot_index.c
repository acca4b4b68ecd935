/* Figures of the index: a layer x head grid of a metric beside its
 * control, curves, the induction causal check, the Jensen-Shannon matrix. */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "gnuplot.h"
#include "json.h"
#include "metrics.h"

/* Metric of run_id (0: the latest run holding it) as a grid; HS_EINVAL
 * naming the metric when there is no per-head row of it. */
static int read_grid(hs_index *ix, const char *db, const char *metric, long long run_id,
                     hs_metric_grid *g)
{
    int64_t run = run_id;
    int rc = run ? HS_OK : hs_index_latest_with_metric(ix, metric, &run);
    if (!rc)
        rc = hs_index_metric_grid(ix, run, metric, g);
    if (!rc && !g->count)
        rc = hs_fail(HS_EINVAL, "%s: no metric \"%s\"%s", db, metric, run_id ? " in that run" : "");
    return rc;
}

/* Where write_cells puts a grid's cells: values (then `tail`), cells of
 * heads the model lacks (heads[layer] known and head >= it) and other absent
 * cells; the counts of the last two. */
typedef struct {
    const char *values, *tail, *nohead, *absent;
    int n_nohead, n_absent;
} cell_files;

/* "layer head value" lines of a grid's present cells within nl x nh, and
 * "layer head" lines of the rest. */
static int write_cells(cell_files *c, const hs_metric_grid *g, int nl, int nh, const int *heads)
{
    FILE *f = hs_plot_file(c->values), *a = hs_plot_file(c->absent), *x = hs_plot_file(c->nohead);
    int rc = f && a && x ? HS_OK
                         : hs_fail(HS_EIO, "%s: cannot write", !f ? c->values : !a ? c->absent
                                                                              : c->nohead);
    c->n_absent = c->n_nohead = 0;
    for (int l = 0; !rc && l < nl; l++)
        for (int h = 0; h < nh; h++) {
            int in = l < g->n_layer && h < g->n_head && g->present[(size_t)l * g->n_head + h];
            if (in)
                fprintf(f, "%d %d %.9g\n", l, h, g->cell[(size_t)l * g->n_head + h].value);
            else if (heads[l] >= 0 && h >= heads[l] && ++c->n_nohead)
                fprintf(x, "%d %d\n", l, h);
            else if (++c->n_absent)
                fprintf(a, "%d %d\n", l, h);
        }
    if (f)
        fputs(c->tail, f);
    FILE *all[] = { f, a, x };
    for (int i = 0; i < 3; i++)
        if (all[i] && fclose(all[i]) && !rc)
            rc = hs_fail(HS_EIO, "%s: write failed", c->values);
    return rc;
}

/* What run `run` recorded about itself: heads[l] = the heads of layer l
 * (l < nl) of its model, -1 where unknown; *seq_len its sequence length, 0
 * where it has none. */
static void run_context(hs_index *ix, int64_t run, int nl, int *heads, int *seq_len)
{
    char text[HS_MAX_LAYERS * 8];
    int found = 0;
    for (int i = 0; i < nl; i++)
        heads[i] = -1;
    *seq_len = 0;
    if (!hs_index_param_get(ix, run, "seq_len", text, sizeof text, &found) && found)
        *seq_len = atoi(text);
    cJSON *a = NULL;
    if (hs_index_param_get(ix, run, "n_head", text, sizeof text, &found) || !found ||
        hs_json_parse(&a, text, strlen(text), "the run's n_head"))
        return;
    for (int i = 0; i < nl && i < cJSON_GetArraySize(a); i++) {
        const cJSON *h = cJSON_GetArrayItem(a, i);
        heads[i] = cJSON_IsNumber(h) && h->valuedouble >= 0 && h->valuedouble <= HS_MAX_HEADS
                       ? (int)h->valuedouble : -1;
    }
    cJSON_Delete(a);
}

/* The largest |value| (or value, when !absolute) of a grid's present cells. */
static double grid_max(const hs_metric_grid *g, int absolute)
{
    double m = 0;
    for (int c = 0; g && c < g->n_layer * g->n_head; c++)
        if (g->present[c] && isfinite(g->cell[c].value))
            m = fmax(m, absolute ? fabs(g->cell[c].value) : g->cell[c].value);
    return m;
}

static int grid_has_negative(const hs_metric_grid *g)
{
    for (int c = 0; g && c < g->n_layer * g->n_head; c++)
        if (g->present[c] && g->cell[c].value < 0)
            return 1;
    return 0;
}

/* The colour scale of a metric (its descriptor's, metrics.h), shared by the
 * model and its control (cg may be NULL). */
static void metric_scale(const char *metric, const hs_metric_grid *g, const hs_metric_grid *cg,
                         int T, hs_metric_range *s)
{
    hs_metric_range_of(s, metric, T, fmax(grid_max(g, 1), grid_max(cg, 1)),
                       fmax(grid_max(g, 0), grid_max(cg, 0)),
                       grid_has_negative(g) || grid_has_negative(cg));
}

/* The assignments of plot_scores.gp: files, shape, scale. */
static void scores_assign(char *out, size_t n, const char *dir,
                          const char *title, int nl, int nh, const hs_metric_range *s,
                          const cell_files *c, const cell_files *cc)
{
    char qlab[2400];
    hs_gp_quote(qlab, sizeof qlab, s->label);
    int k = snprintf(out, n,
                     "datafile='%s/scores.txt'; plottitle=%s; nl=%d; nh=%d; "
                     "lo=%.9g; hi=%.9g; diverging=%d; cblab=%s",
                     dir, title, nl, nh, s->lo, s->hi, s->diverging, qlab);
    if (c->n_absent)
        k += snprintf(out + k, n - (size_t)k, "; absentfile='%s/absent.txt'", dir);
    if (c->n_nohead)
        k += snprintf(out + k, n - (size_t)k, "; noheadfile='%s/nohead.txt'", dir);
    if (cc)
        k += snprintf(out + k, n - (size_t)k, "; controlfile='%s/control.txt'", dir);
    if (cc && cc->n_absent)
        k += snprintf(out + k, n - (size_t)k, "; cabsentfile='%s/cabsent.txt'", dir);
    if (cc && cc->n_nohead)
        snprintf(out + k, n - (size_t)k, "; cnoheadfile='%s/cnohead.txt'", dir);
}

/* A layer x head grid of metric, beside metric_control when with_control. */
int hs_plot_scores(hs_index *ix, const char *db, const char *metric, long long run_id,
                   const char *out, int with_control)
{
    char dir[600] = "", p[4][1200], cp[4][1200], assign[16384], title[300], qtitle[2400];
    char one[128], cmetric[160];
    hs_metric_grid g = { 0 }, cg = { 0 };
    hs_metric_range s;
    snprintf(one, sizeof one, "%.*s", (int)strcspn(metric, ","), metric); /* as curve lists */
    int64_t run = run_id;
    int seq_len = 0;
    int rc = hs_plot_tmpdir(dir, sizeof dir);
    if (!rc && !run)
        rc = hs_index_latest_with_metric(ix, one, &run);
    if (!rc)
        rc = read_grid(ix, db, one, run, &g);
    if (!rc && with_control) {
        if (!hs_metric_control(one, cmetric, sizeof cmetric) && !hs_metric_find(one))
            snprintf(cmetric, sizeof cmetric, "%s_control", one); /* a name we do not know */
        rc = *cmetric ? read_grid(ix, db, cmetric, run, &cg)
                      : hs_fail(HS_EINVAL, "%s: metric \"%s\" has no random-init control", db,
                                one);
    }
    int nl = g.n_layer > cg.n_layer ? g.n_layer : cg.n_layer;
    int nh = g.n_head > cg.n_head ? g.n_head : cg.n_head;
    int *heads = calloc((size_t)nl + 1, sizeof(int));
    const char *names[3] = { "scores", "nohead", "absent" };
    const char *cnames[3] = { "control", "cnohead", "cabsent" };
    for (int i = 0; i < 3; i++) {
        snprintf(p[i], sizeof p[i], "%s/%s.txt", dir, names[i]);
        snprintf(cp[i], sizeof cp[i], "%s/%s.txt", dir, cnames[i]);
    }
    cell_files c = { p[0], "\n\n", p[1], p[2], 0, 0 }, cc = { cp[0], "", cp[1], cp[2], 0, 0 };
    if (!rc && !heads)
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    if (!rc)
        run_context(ix, run, nl, heads, &seq_len);
    if (!rc)
        rc = write_cells(&c, &g, nl, nh, heads);
    if (!rc && with_control)
        rc = write_cells(&cc, &cg, nl, nh, heads);
    metric_scale(one, &g, with_control ? &cg : NULL, seq_len, &s);
    snprintf(title, sizeof title, "%s (%s)", one, db);
    hs_gp_quote(qtitle, sizeof qtitle, title);
    scores_assign(assign, sizeof assign, dir, qtitle, nl, nh, &s, &c,
                  with_control ? &cc : NULL);
    if (!rc)
        rc = hs_gnuplot("plot_scores.gp", assign, out);
    free(heads);
    hs_metric_grid_free(&g);
    hs_metric_grid_free(&cg);
    hs_plot_tmpdir_remove(dir);
    return rc;
}

/* One block of curve.txt: "x y" by step of curve `name` of run_id (0: the
 * latest run holding it), then the blank lines that end a gnuplot block. */
static int write_curve(FILE *f, hs_index *ix, const char *db, const char *name,
                       long long run_id)
{
    int64_t run = run_id;
    hs_curve c = { 0 };
    int rc = run ? HS_OK : hs_index_latest_with_curve(ix, name, &run);
    if (!rc)
        rc = hs_index_curve_get(ix, run, name, &c);
    for (int i = 0; !rc && i < c.n; i++)
        fprintf(f, "%.9g %.9g\n", c.p[i].x, c.p[i].y);
    if (!rc && !c.n)
        rc = hs_fail(HS_EINVAL, "%s: no curve \"%s\"%s", db, name, run_id ? " in that run" : "");
    fprintf(f, "\n\n");
    hs_curve_free(&c);
    return rc;
}

/* The key entry of a curve, in words: its descriptor's label (a head-count
 * run's with its head count and seed), else its name. */
static void curve_key(char *out, size_t n, const char *name)
{
    const hs_metric_desc *d = hs_metric_find(name);
    int heads, seed;
    if (d == hs_metric(HS_M_TRAIN_LOSS_HEADS) && sscanf(name, d->name, &heads, &seed) == 2)
        snprintf(out, n, "training loss, %d head%s, seed %d", heads, heads == 1 ? "" : "s", seed);
    else
        snprintf(out, n, "%s", d ? d->label : name);
}

/* Title and axis labels of a list of curves: the last described curve's. */
static void curve_axes(const char *list, const char *db, char *title, char *xlab, char *ylab,
                       size_t n)
{
    const hs_metric_desc *last = NULL;
    for (const char *p = list; *p;) {
        char one[128];
        const size_t len = strcspn(p, ",");
        snprintf(one, sizeof one, "%.*s", (int)len, p);
        const hs_metric_desc *d = hs_metric_find(one);
        if (d && d->title)
            last = d;
        p += len + (p[len] == ',');
    }
    snprintf(title, n, "%s (%s)", last ? last->title : list, db);
    snprintf(xlab, n, "%s", last ? last->x : "x");
    snprintf(ylab, n, "%s", last ? last->y : "value");
}

/* Curves (a comma-separated list of names), one line each. */
int hs_plot_curves(hs_index *ix, const char *db, const char *list, long long run_id,
                   const char *out)
{
    char dir[600] = "", p[1200], assign[16384], title[300], qtitle[2400], names[600] = "";
    char qnames[4800], xlab[300], ylab[300];
    int rc = hs_plot_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/curve.txt", dir);
    FILE *f = rc ? NULL : hs_plot_file(p);
    if (!rc && !f)
        rc = hs_fail(HS_EIO, "%s: cannot write", p);
    for (const char *name = list; f && !rc && *name;) {
        size_t len = strcspn(name, ",");
        char one[128], key[160];
        snprintf(one, sizeof one, "%.*s", (int)len, name);
        name += len + (name[len] == ',');
        rc = write_curve(f, ix, db, one, run_id);
        curve_key(key, sizeof key, one);
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s\"%s\"", used ? " " : "", key);
    }
    if (f && fclose(f) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed", p);
    curve_axes(list, db, title, xlab, ylab, sizeof title);
    hs_gp_quote(qtitle, sizeof qtitle, title);
    hs_gp_quote(qnames, sizeof qnames, names);
    snprintf(assign, sizeof assign,
             "datafile='%s'; plottitle=%s; names=%s; xlab='%s'; ylab='%s'%s", p,
             qtitle, qnames, xlab, ylab, strstr(ylab, "loss (nats") ? "; minspan=0.5" : "");
    if (!rc)
        rc = hs_gnuplot("plot_curve.gp", assign, out);
    hs_plot_tmpdir_remove(dir);
    return rc;
}

/* The targeted heads' loss increase (value, stderr), the clean second-half
 * loss and the heads as "L0H1 L1H0" of an induction run's causal check. */
static int causal_numbers(hs_index *ix, long long run_id, hs_metric_value *top, double *clean,
                          char *label, size_t n)
{
    hs_metric_value v;
    hs_metric_grid g = { 0 };
    int found, rc = hs_index_metric_get(ix, run_id, -1, -1, HS_METRIC(CAUSAL_LOSS_DELTA_TOP_K), &v, &found);
    if (!rc && found)
        *top = v;
    if (!rc)
        rc = hs_index_metric_get(ix, run_id, -1, -1, HS_METRIC(SECOND_HALF_LOSS), &v, &found);
    if (!rc && found)
        *clean = v.value;
    if (!rc)
        rc = hs_index_metric_grid(ix, run_id, HS_METRIC(CAUSAL_TOP_K), &g);
    for (int c = 0; !rc && c < g.n_layer * g.n_head; c++) {
        size_t len = strlen(label);
        if (g.present[c])
            snprintf(label + len, n - len, "%sL%dH%d", len ? " " : "", c / g.n_head, c % g.n_head);
    }
    hs_metric_grid_free(&g);
    return rc;
}

/* The causal check of an induction run (run_id 0: the latest): each random
 * draw's loss increase beside the targeted heads'. */
int hs_plot_causal(hs_index *ix, const char *db, long long run_id, const char *out)
{
    hs_metric_value top = { NAN, 0, 0 };
    double clean = NAN;
    char label[256] = "", qlabel[2100], dir[600] = "", p[1200], assign[16384], title[300];
    char qtitle[2400];
    int64_t run = run_id;
    hs_curve draws = { 0 };
    int rc = run ? HS_OK : hs_index_latest_with_curve(ix, HS_METRIC(CAUSAL_RANDOM_K), &run);
    if (!rc)
        rc = causal_numbers(ix, run, &top, &clean, label, sizeof label);
    if (!rc && isnan(top.value))
        rc = hs_fail(HS_EINVAL, "%s: no causal check%s (run `headscope induction` first)", db,
                     run ? " in that run" : "");
    if (!rc)
        rc = hs_plot_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/draws.txt", dir);
    FILE *f = rc ? NULL : hs_plot_file(p);
    if (!rc && !f)
        rc = hs_fail(HS_EIO, "%s: cannot write", p);
    if (f) {
        rc = hs_index_curve_get(ix, run, HS_METRIC(CAUSAL_RANDOM_K), &draws);
        for (int i = 0; i < draws.n; i++)
            fprintf(f, "%lld %.9g\n", (long long)draws.p[i].step, draws.p[i].y);
        if (fclose(f) && !rc)
            rc = hs_fail(HS_EIO, "%s: write failed", p);
        if (!rc && draws.n < 2)
            rc = hs_fail(HS_EINVAL, "%s: run %lld has no random draws (curve causal_random_k)",
                         db, (long long)run);
    }
    snprintf(title, sizeof title, "causal check, run %lld: second-half loss %.3f on r ++ r (%s)",
             (long long)run, clean, db);
    hs_gp_quote(qtitle, sizeof qtitle, title);
    hs_gp_quote(qlabel, sizeof qlabel, label);
    snprintf(assign, sizeof assign,
             "datafile='%s'; plottitle=%s; targeted=%.9g; targeted_se=%.9g;"
             " toplabel=%s",
             p, qtitle, top.value, top.stderr_value, qlabel);
    if (!rc)
        rc = hs_gnuplot("plot_causal.gp", assign, out);
    hs_curve_free(&draws);
    hs_plot_tmpdir_remove(dir);
    return rc;
}

/* One line of a JS matrix CSV as a row of js.txt: quoted first field (the
 * label), then the numbers; the header row ("head,L0H0,...") becomes the
 * quoted column labels. Returns the fields of the line. */
static int js_row(FILE *f, char *line, int header)
{
    int fields = 0;
    line[strcspn(line, "\r\n")] = 0;
    for (char *save = NULL, *tok = strtok_r(line, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save), fields++) {
        if (header)
            fprintf(f, fields ? " \"%s\"" : "\"%s\"", tok);
        else
            fprintf(f, fields ? " %s" : "\"%s\"", tok);
    }
    fprintf(f, "\n");
    return fields;
}

/* The head-to-head Jensen-Shannon distance matrix written by `patterns
 * --js-out` (a CSV with head labels) as a heatmap on the fixed scale
 * 0 .. sqrt(ln 2), the largest distance of two distributions (natural log). */
int hs_plot_js(const char *csv, const char *out)
{
    char dir[600] = "", p[1200], assign[16384], qcsv[9700], *line = NULL;
    size_t cap = 0;
    int rc = HS_OK, n = 0, rows = 0;
    FILE *in = fopen(csv, "r"), *f = NULL;
    if (!in)
        return hs_fail(HS_EIO, "%s: cannot read the Jensen-Shannon matrix: %s", csv,
                       strerror(errno));
    rc = hs_plot_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/js.txt", dir);
    if (!rc && !(f = hs_plot_file(p)))
        rc = hs_fail(HS_EIO, "%s: cannot write", p);
    while (f && !rc && getline(&line, &cap, in) > 0) {
        int fields = js_row(f, line, rows == 0);
        if (rows == 0)
            n = fields - 1;
        else if (fields != n + 1)
            rc = hs_fail(HS_EFORMAT, "%s: row %d has %d fields, expected %d", csv, rows,
                         fields, n + 1);
        rows++;
    }
    if (!rc && (n < 1 || rows != n + 1))
        rc = hs_fail(HS_EFORMAT, "%s: not a square matrix with head labels", csv);
    if (f && fclose(f) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed", p);
    fclose(in);
    free(line);
    hs_gp_quote(qcsv, sizeof qcsv, csv);
    snprintf(assign, sizeof assign, "datafile='%s'; n=%d; plottitle=%s", p,
             n, qcsv);
    if (!rc)
        rc = hs_gnuplot("plot_js.gp", assign, out);
    hs_plot_tmpdir_remove(dir);
    return rc;
}
