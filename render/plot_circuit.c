/* The figures of SPEC §15: a circuit run's top-N edges as a graph (Graphviz
 * dot) and an attribution run's estimates against the exact patching it
 * verified (gnuplot). What they draw is what the runs recorded: edge rows,
 * the faithfulness curve, atp_* and patch_* rows of one run. */
#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gnuplot.h"
#include "graphviz.h"
#include "metrics.h"

/* A node or receiver of the circuit graph, parsed from its name: input,
 * a{l}.h{h} (receivers: <q>, <k>, <v>), m{l}, logits. */
typedef struct {
    int kind; /* 0 input, 1 head, 2 MLP, 3 logits */
    int layer, head;
    char path; /* receivers of a head: 'q', 'k' or 'v'; else 0 */
} gname;

static int parse_name(const char *s, gname *g, int receiver)
{
    int n = -1, l = 0, h = 0;
    char p = 0;
    memset(g, 0, sizeof *g);
    if (!strcmp(s, "input") && !receiver)
        return HS_OK;
    if (!strcmp(s, "logits") && receiver)
        return g->kind = 3, HS_OK;
    if (sscanf(s, "m%d%n", &l, &n) == 1 && n == (int)strlen(s) && l >= 0)
        return *g = (gname){ 2, l, 0, 0 }, HS_OK;
    n = -1;
    if (receiver && sscanf(s, "a%d.h%d<%c>%n", &l, &h, &p, &n) == 3 && n == (int)strlen(s) &&
        l >= 0 && h >= 0 && strchr("qkv", p) && p)
        return *g = (gname){ 1, l, h, p }, HS_OK;
    n = -1;
    if (!receiver && sscanf(s, "a%d.h%d%n", &l, &h, &n) == 2 && n == (int)strlen(s) && l >= 0 &&
        h >= 0)
        return *g = (gname){ 1, l, h, 0 }, HS_OK;
    return hs_fail(HS_EFORMAT, "edge_metrics: \"%s\" is not the name of a %s", s,
                   receiver ? "receiver" : "node");
}

/* The DOT id and label of a node (a receiver's: the node it feeds). */
static void node_id(char *id, char *label, size_t n, const gname *g)
{
    static const char *const ids[] = { "input", "a%d_%d", "m%d", "logits" };
    if (g->kind == 1)
        snprintf(id, n, ids[1], g->layer, g->head), snprintf(label, n, "L%dH%d", g->layer, g->head);
    else if (g->kind == 2)
        snprintf(id, n, ids[2], g->layer), snprintf(label, n, "MLP %d", g->layer);
    else
        snprintf(id, n, "%s", ids[g->kind]), snprintf(label, n, "%s", ids[g->kind]);
}

static int by_magnitude(const void *a, const void *b)
{
    const hs_edge_value *x = a, *y = b;
    const double ax = fabs(x->v.value), ay = fabs(y->v.value);
    if (ax != ay)
        return ax > ay || isnan(ay) ? -1 : 1;
    const int s = strcmp(x->sender, y->sender);
    return s ? s : strcmp(x->receiver, y->receiver);
}

enum { SHOWN_MAX = 80 };

/* How many edges to draw: the smallest N of the run's faithfulness curve
 * reaching 0.8 (its faithfulness in *f), else 20; at most SHOWN_MAX. */
static int edges_shown(hs_index *ix, int64_t run, int n_edges, double *f)
{
    hs_curve c = { 0 };
    int N = n_edges < 20 ? n_edges : 20;
    *f = NAN;
    if (!hs_index_curve_get(ix, run, HS_METRIC(FAITHFULNESS), &c))
        for (int i = 0; i < c.n; i++)
            if (c.p[i].x > 0 && c.p[i].y >= 0.8) {
                N = (int)c.p[i].x, *f = c.p[i].y;
                break;
            }
    hs_curve_free(&c);
    return N < SHOWN_MAX ? N : SHOWN_MAX;
}

/* The DOT text of the top `shown` edges of l (sorted) with its title. */
static int write_dot(const char *path, const hs_edge_list *l, int shown, const char *title)
{
    FILE *f = hs_plot_file(path);
    if (!f)
        return HS_EIO;
    double top = 0;
    for (int i = 0; i < shown; i++)
        top = fmax(top, fabs(l->e[i].v.value));
    fprintf(f, "digraph circuit {\n  graph [rankdir=BT, labelloc=t, fontname=\"sans\", "
               "fontsize=12, label=");
    hs_dot_string(f, title);
    fprintf(f, "];\n  node [shape=box, style=\"rounded,filled\", fillcolor=\"#eeeeee\", "
               "fontname=\"sans\", fontsize=10];\n  edge [fontname=\"sans\", fontsize=8];\n");
    int rc = HS_OK;
    for (int i = 0; !rc && i < shown; i++) {
        gname u, v;
        char ui[32], ul[32], vi[32], vl[32];
        if ((rc = parse_name(l->e[i].sender, &u, 0)) || (rc = parse_name(l->e[i].receiver, &v, 1)))
            break;
        node_id(ui, ul, sizeof ui, &u);
        node_id(vi, vl, sizeof vi, &v);
        fprintf(f, "  %s [label=\"%s\"%s];\n  %s [label=\"%s\"%s];\n", ui, ul,
                u.kind == 0 ? ", shape=ellipse" : "", vi, vl, v.kind == 3 ? ", shape=ellipse" : "");
        const double s = l->e[i].v.value;
        const char path_label[3] = { v.path, v.path ? ' ' : 0, 0 };
        fprintf(f, "  %s -> %s [color=\"%s\", penwidth=%.2f, label=\"%s%+.3g\"];\n", ui, vi,
                s >= 0 ? "#c0392b" : "#2c6fbb", 0.6 + 4.4 * fabs(s) / (top > 0 ? top : 1),
                path_label, s);
    }
    fprintf(f, "}\n");
    if (fclose(f) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed", path);
    return rc;
}

int hs_plot_circuit(hs_index *ix, const char *db, const char *metric, long long run_id,
                    const char *out)
{
    int64_t run = run_id;
    int rc = HS_OK;
    if (!metric && !run) { /* the latest circuit run of either method */
        int64_t a = 0, b = 0;
        rc = hs_index_latest_with_edge_metric(ix, HS_METRIC(EAP_IG), &a);
        if (!rc)
            rc = hs_index_latest_with_edge_metric(ix, HS_METRIC(EAP), &b);
        metric = a >= b ? HS_METRIC(EAP_IG) : HS_METRIC(EAP);
        run = a >= b ? a : b;
    }
    hs_edge_list l = { 0 };
    if (!metric)
        metric = HS_METRIC(EAP_IG);
    if (!rc && !run)
        rc = hs_index_latest_with_edge_metric(ix, metric, &run);
    if (!rc)
        rc = hs_index_edge_metrics(ix, run, metric, &l);
    if (!rc && !l.n && !strcmp(metric, HS_METRIC(EAP_IG)) && run_id) /* that run's other method */
        rc = hs_index_edge_metrics(ix, run, metric = HS_METRIC(EAP), &l);
    if (!rc && !l.n)
        rc = hs_fail(HS_EINVAL, "%s: no edge metric \"%s\"%s (run `headscope circuit` first)", db,
                     metric, run_id ? " in that run" : "");
    char dir[600] = "", path[1200], title[600];
    double f = NAN;
    const int shown = rc ? 0 : edges_shown(ix, run, l.n, &f);
    if (!rc) {
        qsort(l.e, (size_t)l.n, sizeof *l.e, by_magnitude);
        if (isnan(f))
            snprintf(title, sizeof title, "%s, run %lld: the top %d of %d edges by |score| (%s)",
                     metric, (long long)run, shown, l.n, db);
        else
            snprintf(title, sizeof title, "%s, run %lld: the top %d of %d edges by |score|, "
                     "faithfulness %.2f (%s)", metric, (long long)run, shown, l.n, f, db);
        rc = hs_plot_tmpdir(dir, sizeof dir);
    }
    snprintf(path, sizeof path, "%s/circuit.dot", dir);
    if (!rc)
        rc = write_dot(path, &l, shown, title);
    if (!rc)
        rc = hs_dot(path, out);
    hs_edge_list_free(&l);
    hs_plot_tmpdir_remove(dir);
    return rc;
}

/* ---- AtP against exact patching ------------------------------------------------------------ */

/* The ranks (1-based, ties averaged) of x[0..n). */
static void ranks(double *r, const double *x, int n)
{
    for (int i = 0; i < n; i++) {
        int below = 0, same = 0;
        for (int j = 0; j < n; j++)
            below += x[j] < x[i], same += x[j] == x[i];
        r[i] = below + (same + 1) / 2.0;
    }
}

double hs_spearman(const double *x, const double *y, int n)
{
    if (n < 2)
        return NAN;
    double *rx = calloc((size_t)n, sizeof *rx), *ry = calloc((size_t)n, sizeof *ry);
    if (!rx || !ry) {
        free(rx), free(ry);
        return NAN;
    }
    ranks(rx, x, n), ranks(ry, y, n);
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++)
        mx += rx[i] / n, my += ry[i] / n;
    for (int i = 0; i < n; i++) {
        sxy += (rx[i] - mx) * (ry[i] - my);
        sxx += (rx[i] - mx) * (rx[i] - mx), syy += (ry[i] - my) * (ry[i] - my);
    }
    free(rx), free(ry);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

int hs_plot_atp(hs_index *ix, const char *db, const char *metric, long long run_id,
                const char *out)
{
    if (!metric)
        metric = HS_METRIC(ATP_Z);
    const char *exact = !strcmp(metric, HS_METRIC(ATP_PATTERN)) ? HS_METRIC(PATCH_PATTERN)
                        : !strcmp(metric, HS_METRIC(ATP_Z))     ? HS_METRIC(PATCH_Z)
                                                                : NULL;
    if (!exact)
        return hs_fail(HS_EINVAL, "plot atp: --metric %s has no exact patching to compare with "
                       "(atp_z or atp_pattern)", metric);
    int64_t run = run_id;
    hs_metric_grid a = { 0 }, p = { 0 };
    int rc = run ? HS_OK : hs_index_latest_with_metric(ix, exact, &run);
    if (!rc)
        rc = hs_index_metric_grid(ix, run, metric, &a);
    if (!rc)
        rc = hs_index_metric_grid(ix, run, exact, &p);
    char dir[600] = "", path[1200], assign[8192], title[600], qtitle[5000];
    double *x = NULL, *y = NULL;
    int n = 0;
    if (!rc && (x = calloc((size_t)p.count + 1, sizeof *x)) && (y = calloc((size_t)p.count + 1, sizeof *y)))
        rc = hs_plot_tmpdir(dir, sizeof dir);
    else if (!rc)
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    snprintf(path, sizeof path, "%s/atp.txt", dir);
    FILE *f = rc ? NULL : hs_plot_file(path);
    if (!rc && !f)
        rc = HS_EIO;
    for (int l = 0; f && l < p.n_layer && l < a.n_layer; l++)
        for (int h = 0; h < p.n_head && h < a.n_head; h++) {
            const size_t cp = (size_t)l * p.n_head + h, ca = (size_t)l * a.n_head + h;
            if (!p.present[cp] || !a.present[ca] || !isfinite(p.cell[cp].value) ||
                !isfinite(a.cell[ca].value))
                continue;
            x[n] = p.cell[cp].value, y[n] = a.cell[ca].value;
            fprintf(f, "%.9g %.9g \"L%dH%d\"\n", x[n], y[n], l, h);
            n++;
        }
    if (f && fclose(f) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed", path);
    if (!rc && n < 2)
        rc = hs_fail(HS_EINVAL, "%s: run %lld holds %d head%s with both %s and %s (run `headscope "
                     "atp --verify K` first)", db, (long long)run, n, n == 1 ? "" : "s", metric,
                     exact);
    snprintf(title, sizeof title, "%s against %s, run %lld: %d heads, Spearman %.3f (%s)", metric,
             exact, (long long)run, n, hs_spearman(x, y, n), db);
    hs_gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign, "datafile='%s'; plottitle=%s; xlab='%s (exact)'; "
             "ylab='%s (first-order estimate)'", path, qtitle, exact, metric);
    if (!rc)
        rc = hs_gnuplot("plot_atp.gp", assign, out);
    free(x), free(y);
    hs_metric_grid_free(&a);
    hs_metric_grid_free(&p);
    hs_plot_tmpdir_remove(dir);
    return rc;
}
