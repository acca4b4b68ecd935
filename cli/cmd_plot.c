/* plot: gnuplot renderings (PNG or SVG by the output's extension) of map
 * files and of the index. The data goes to files in a temporary directory;
 * the scripts in scripts/ (usable on their own) draw them. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "plot.h"
#include "maps.h"

#ifndef HS_SCRIPTS_DIR
#define HS_SCRIPTS_DIR "scripts"
#endif

#ifndef HS_INSTALLED_SCRIPTS_REL
#define HS_INSTALLED_SCRIPTS_REL "../share/headscope/scripts"
#endif

/* $HEADSCOPE_SCRIPTS, else the source tree's scripts/ (a build), else the
 * installed copy beside the executable (bin/../share/headscope/scripts). */
static const char *scripts_dir(void)
{
    static char installed[PATH_MAX];
    const char *env = getenv("HEADSCOPE_SCRIPTS");
    if (env && *env)
        return env;
    if (!access(HS_SCRIPTS_DIR "/plot_map.gp", R_OK))
        return HS_SCRIPTS_DIR;
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return HS_SCRIPTS_DIR;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    snprintf(installed, sizeof installed, "%s/%s", exe, HS_INSTALLED_SCRIPTS_REL);
    return installed;
}

/* A token as a gnuplot label without spaces or quotes. */
static void token_label(char *out, size_t n, int tok)
{
    if (tok > 32 && tok < 127 && tok != '"' && tok != '\'' && tok != '\\')
        snprintf(out, n, "%c", tok);
    else if (tok == ' ')
        snprintf(out, n, "_");
    else if (tok == '\n')
        snprintf(out, n, "\\\\n");
    else
        snprintf(out, n, "x%02x", tok & 0xffff);
}

/* Runs gnuplot on a script with -e assignments; checks the output exists. */
static int run_gnuplot(const char *script, const char *assignments, const char *outfile)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s", scripts_dir(), script);
    if (access(path, R_OK))
        return hs_fail(HS_EIO, "%s: gnuplot script not found (set HEADSCOPE_SCRIPTS)", path);
    /* An unwritable output is our error to report, not gnuplot's. */
    char parent[1024];
    snprintf(parent, sizeof parent, "%s", outfile);
    char *slash = strrchr(parent, '/');
    if (slash)
        *slash = 0;
    struct stat ps;
    if (slash && *parent && (stat(parent, &ps) || !S_ISDIR(ps.st_mode)))
        return hs_fail(HS_EIO, "%s: cannot write: %s is not a directory", outfile, parent);
    pid_t pid = fork();
    if (pid < 0)
        return hs_fail(HS_EIO, "cannot start gnuplot: %s", strerror(errno));
    if (pid == 0) {
        /* gnuplot's own diagnostics are noise once we report the failure. */
        if (!freopen("/dev/null", "w", stderr))
            _exit(126);
        execlp("gnuplot", "gnuplot", "-e", assignments, path, (char *)NULL);
        fprintf(stderr, "headscope: plot: cannot run gnuplot: %s\n", strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    struct stat sb;
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        return hs_fail(HS_EIO, "gnuplot failed on %s (exit %d%s)", script,
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                       WIFEXITED(status) && WEXITSTATUS(status) == 127
                           ? ": gnuplot not found, run scripts/setup"
                           : "");
    if (stat(outfile, &sb) || sb.st_size == 0)
        return hs_fail(HS_EIO, "%s: gnuplot wrote nothing", outfile);
    return HS_OK;
}

/* Temporary directory for data files; removed by cleanup_dir. */
static int make_dir(char *dir, size_t n)
{
    const char *base = getenv("TMPDIR");
    snprintf(dir, n, "%s/headscope-plot-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(dir) ? HS_OK : hs_fail(HS_EIO, "cannot create a temporary directory");
}

static void cleanup_dir(const char *dir, int nl, int nh)
{
    char p[1200];
    const char *fixed[] = { "map.txt", "scores.txt", "curve.txt", "control.txt", "draws.txt" };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, fixed[i]);
        unlink(p);
    }
    for (int l = 0; l < nl; l++)
        for (int h = 0; h < nh; h++) {
            snprintf(p, sizeof p, "%s/%d_%d.txt", dir, l, h);
            unlink(p);
        }
    rmdir(dir);
}

/* Escapes a title for a gnuplot single-quoted string. */
static void gp_quote(char *out, size_t n, const char *s)
{
    size_t k = 0;
    for (; *s && k + 3 < n; s++) {
        if (*s == '\'')
            out[k++] = '\'';
        out[k++] = *s;
    }
    out[k] = 0;
}

/* One layer's map of a sequence: a header of the key labels, then one row per
 * query, its label first. */
static int write_map_txt(const char *p, const hs_maps_layer_info *l, const int32_t *tok,
                         const float *buf)
{
    FILE *f = fopen(p, "w");
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", p);
    char lab[16];
    fprintf(f, "%d", l->S);
    for (int s = 0; s < l->S; s++) {
        token_label(lab, sizeof lab, tok[s]);
        fprintf(f, " \"%s\"", lab);
    }
    fprintf(f, "\n");
    for (int q = 0; q < l->nq; q++) {
        token_label(lab, sizeof lab, tok[l->q0 + q]);
        fprintf(f, "\"%s\"", lab);
        for (int s = 0; s < l->S; s++)
            fprintf(f, " %.5g", buf[(size_t)q * l->S + s]);
        fprintf(f, "\n");
    }
    return fclose(f) ? hs_fail(HS_EIO, "%s: write failed", p) : HS_OK;
}

/* One head's map with token labels (plot_map.gp). */
static int draw_head(hs_maps_reader *r, const char *maps, int layer, int head, long long seq,
                     const int32_t *tok, float *buf, const char *dir, const char *out)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    int li = -1, hi = -1, rc = HS_OK;
    for (int i = 0; i < in->n_layers; i++)
        if (in->layers[i].layer == layer)
            li = i;
    for (int h = 0; li >= 0 && h < in->layers[li].nh; h++)
        if (in->layers[li].heads[h] == head)
            hi = h;
    if (li < 0 || hi < 0)
        return hs_fail(HS_EINVAL, "%s holds no map of layer %d head %d", maps, layer, head);
    char assign[4096], title[300], qtitle[400], p[1200];
    snprintf(p, sizeof p, "%s/map.txt", dir);
    rc = hs_maps_read(r, li, seq, hi, buf);
    if (!rc)
        rc = write_map_txt(p, &in->layers[li], tok, buf);
    snprintf(title, sizeof title, "layer %d, head %d, sequence %lld", layer, head, seq);
    gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign, "datafile='%s'; outfile='%s'; plottitle='%s'", p, out, qtitle);
    return rc ? rc : run_gnuplot("plot_map.gp", assign, out);
}

/* Every head of a sequence, one file per (layer, head) panel (plot_grid.gp);
 * nl x nh is the panel grid, which cleanup_dir needs. */
static int draw_grid(hs_maps_reader *r, const char *maps, long long seq, float *buf,
                     const char *dir, const char *out, int *nl, int *nh)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    int rc = HS_OK;
    char assign[4096], title[300], qtitle[400], p[1200];
    *nl = in->n_layers;
    for (int i = 0; i < in->n_layers; i++)
        *nh = in->layers[i].nh > *nh ? in->layers[i].nh : *nh;
    for (int i = 0; !rc && i < in->n_layers; i++) {
        const hs_maps_layer_info *l = &in->layers[i];
        for (int h = 0; !rc && h < *nh; h++) {
            snprintf(p, sizeof p, "%s/%d_%d.txt", dir, i, h);
            FILE *f = fopen(p, "w");
            if (!f) {
                rc = hs_fail(HS_EIO, "%s: cannot write", p);
                break;
            }
            /* A layer with fewer heads gets blank panels (NaN). */
            if (h < l->nh)
                rc = hs_maps_read(r, i, seq, h, buf);
            for (int q = 0; !rc && q < l->nq; q++) {
                for (int s = 0; s < l->S; s++)
                    fprintf(f, "%s%.4g", s ? " " : "", h < l->nh ? buf[(size_t)q * l->S + s] : NAN);
                fprintf(f, "\n");
            }
            if (fclose(f) && !rc)
                rc = hs_fail(HS_EIO, "%s: write failed", p);
        }
    }
    snprintf(title, sizeof title, "%s, sequence %lld (colour range 0..1)", maps, seq);
    gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign, "dir='%s'; nl=%d; nh=%d; outfile='%s'; plottitle='%s'", dir,
             *nl, *nh, out, qtitle);
    return rc ? rc : run_gnuplot("plot_grid.gp", assign, out);
}

int plot_map(const char *maps, int layer, int head, long long seq, const char *out, int grid)
{
    hs_maps_reader *r;
    int rc = hs_maps_open(&r, maps);
    if (rc)
        return rc;
    const hs_maps_info *in = hs_maps_get_info(r);
    char dir[600] = "";
    int nl = 0, nh = 0;
    int32_t *tok = malloc(sizeof(int32_t) * in->seq_len);
    float *buf = malloc(sizeof(float) * (size_t)in->seq_len * in->seq_len);
    if (!tok || !buf)
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    if (!rc && (seq < 0 || seq >= in->n_seq))
        rc = hs_fail(HS_EINVAL, "%s: no sequence %lld (it holds %lld)", maps, seq, in->n_seq);
    if (!rc && !in->complete)
        rc = hs_fail(HS_EFORMAT, "%s is not marked complete", maps);
    if (!rc)
        rc = hs_maps_read_tokens(r, seq, tok);
    if (!rc)
        rc = make_dir(dir, sizeof dir);
    if (!rc)
        rc = grid ? draw_grid(r, maps, seq, buf, dir, out, &nl, &nh)
                  : draw_head(r, maps, layer, head, seq, tok, buf, dir, out);
    if (*dir)
        cleanup_dir(dir, nl, nh);
    free(tok);
    free(buf);
    hs_maps_close(r);
    return rc;
}

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

/* "layer head value" lines of a grid's present cells, then `tail`. */
static int write_cells(const char *path, const hs_metric_grid *g, const char *tail)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", path);
    for (int l = 0; l < g->n_layer; l++)
        for (int h = 0; h < g->n_head; h++)
            if (g->present[(size_t)l * g->n_head + h])
                fprintf(f, "%d %d %.9g\n", l, h, g->cell[(size_t)l * g->n_head + h].value);
    fputs(tail, f);
    return fclose(f) ? hs_fail(HS_EIO, "%s: write failed", path) : HS_OK;
}

/* A layer x head grid of metric, beside metric_control when with_control. */
static int plot_scores(hs_index *ix, const char *db, const char *metric, long long run_id,
                       const char *out, int with_control)
{
    char dir[600] = "", p[1200], cpath[1300] = "", assign[4096], title[300], qtitle[400];
    char one[128], cmetric[128];
    hs_metric_grid g = { 0 }, cg = { 0 };
    snprintf(one, sizeof one, "%.*s", (int)strcspn(metric, ","), metric); /* as curve lists */
    int rc = make_dir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/scores.txt", dir);
    if (!rc)
        rc = read_grid(ix, db, one, run_id, &g);
    if (!rc)
        rc = write_cells(p, &g, "\n\n");
    if (!rc && with_control) {
        snprintf(cmetric, sizeof cmetric, "%s_control", metric);
        snprintf(cpath, sizeof cpath, "%s/control.txt", dir);
        rc = read_grid(ix, db, cmetric, run_id, &cg);
        if (!rc)
            rc = write_cells(cpath, &cg, "");
    }
    snprintf(title, sizeof title, "%s (%s)", metric, db);
    gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign, "datafile='%s'; outfile='%s'; plottitle='%s'%s%s%s", p, out,
             qtitle, *cpath ? "; controlfile='" : "", cpath, *cpath ? "'" : "");
    if (!rc)
        rc = run_gnuplot("plot_scores.gp", assign, out);
    hs_metric_grid_free(&g);
    hs_metric_grid_free(&cg);
    if (*dir)
        cleanup_dir(dir, 0, 0);
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

/* Curves (a comma-separated list of names), one line each. */
static int plot_curves(hs_index *ix, const char *db, const char *list, long long run_id,
                       const char *out)
{
    char dir[600] = "", p[1200], assign[4096], title[300], qtitle[400], names[300] = "";
    int rc = make_dir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/curve.txt", dir);
    FILE *f = rc ? NULL : fopen(p, "w");
    if (!rc && !f)
        rc = hs_fail(HS_EIO, "%s: cannot write", p);
    for (const char *name = list; f && !rc && *name;) {
        size_t len = strcspn(name, ",");
        char one[128];
        snprintf(one, sizeof one, "%.*s", (int)len, name);
        name += len + (name[len] == ',');
        rc = write_curve(f, ix, db, one, run_id);
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", used ? " " : "", one);
    }
    if (f && fclose(f) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed", p);
    snprintf(title, sizeof title, "%s (%s)", list, db);
    gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign,
             "datafile='%s'; outfile='%s'; plottitle='%s'; names='%s'; xlab='%s';"
             " ylab='value'",
             p, out, qtitle, names,
             strstr(list, "pruning") ? "fraction of heads pruned"
             : strstr(list, "loss")  ? "tokens trained on"
                                     : "x");
    if (!rc)
        rc = run_gnuplot("plot_curve.gp", assign, out);
    if (*dir)
        cleanup_dir(dir, 0, 0);
    return rc;
}

int plot_index(hs_index *ix, const char *db, const char *metric, const char *curve,
               long long run_id, const char *out, int with_control)
{
    return metric ? plot_scores(ix, db, metric, run_id, out, with_control)
                  : plot_curves(ix, db, curve, run_id, out);
}

/* The targeted heads' loss increase (value, stderr), the clean second-half
 * loss and the heads as "L0H1 L1H0" of an induction run's causal check. */
static int causal_numbers(hs_index *ix, long long run_id, hs_metric_value *top, double *clean,
                          char *label, size_t n)
{
    hs_metric_value v;
    hs_metric_grid g = { 0 };
    int found, rc = hs_index_metric_get(ix, run_id, -1, -1, "causal_loss_delta_top_k", &v, &found);
    if (!rc && found)
        *top = v;
    if (!rc)
        rc = hs_index_metric_get(ix, run_id, -1, -1, "second_half_loss", &v, &found);
    if (!rc && found)
        *clean = v.value;
    if (!rc)
        rc = hs_index_metric_grid(ix, run_id, "causal_top_k", &g);
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
int plot_causal(hs_index *ix, const char *db, long long run_id, const char *out)
{
    hs_metric_value top = { NAN, 0, 0 };
    double clean = NAN;
    char label[256] = "", dir[600] = "", p[1200], assign[4096], title[300], qtitle[400];
    int64_t run = run_id;
    hs_curve draws = { 0 };
    int rc = run ? HS_OK : hs_index_latest_with_curve(ix, "causal_random_k", &run);
    if (!rc)
        rc = causal_numbers(ix, run, &top, &clean, label, sizeof label);
    if (!rc && isnan(top.value))
        rc = hs_fail(HS_EINVAL, "%s: no causal check%s (run `headscope induction` first)", db,
                     run ? " in that run" : "");
    if (!rc)
        rc = make_dir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/draws.txt", dir);
    FILE *f = rc ? NULL : fopen(p, "w");
    if (!rc && !f)
        rc = hs_fail(HS_EIO, "%s: cannot write", p);
    if (f) {
        rc = hs_index_curve_get(ix, run, "causal_random_k", &draws);
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
    gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign,
             "datafile='%s'; outfile='%s'; plottitle='%s'; targeted=%.9g; targeted_se=%.9g;"
             " toplabel='%s'",
             p, out, qtitle, top.value, top.stderr_value, label);
    if (!rc)
        rc = run_gnuplot("plot_causal.gp", assign, out);
    hs_curve_free(&draws);
    if (*dir)
        cleanup_dir(dir, 0, 0);
    return rc;
}

/* plot scores / curve / causal: the index is opened once, read-only. */
static int plot_from_index(const char *kind, const char *db, const char *metric,
                           const char *curve, long long run, const char *out, int control)
{
    hs_index *ix;
    int rc = hs_index_open_read(&ix, db);
    if (rc)
        return rc;
    if (!strcmp(kind, "causal"))
        rc = plot_causal(ix, db, run, out);
    else if (!strcmp(kind, "scores"))
        rc = plot_index(ix, db, metric, NULL, run, out, control);
    else
        rc = plot_index(ix, db, NULL, curve, run, out, control);
    hs_index_close(ix);
    return rc;
}

int cmd_plot(int argc, char **argv)
{
    const char *maps = NULL, *db = NULL, *out = NULL, *metric = NULL, *curve = NULL;
    int layer = 0, head = 0, control = 0, json = 0;
    long seq = 0, run = 0;
    opt o[] = {
        { "--maps", OPT_STR, &maps, 0, "FILE.h5", "map file (plot map, plot grid)", 0 },
        { "--layer", OPT_INT, &layer, 0, "L", "layer (plot map)", 0 },
        { "--head", OPT_INT, &head, 0, "H", "head (plot map)", 0 },
        { "--seq", OPT_LONG, &seq, 0, "N", "sequence number in the file", 0 },
        { "--db", OPT_STR, &db, 0, "FILE", "index (plot scores, plot curve)", 0 },
        { "--metric", OPT_STR, &metric, 0, "NAME", "head metric (plot scores)", 0 },
        { "--curve", OPT_STR, &curve, 0, "NAME", "curve (plot curve)", 0 },
        { "--run", OPT_LONG, &run, 0, "ID", "run id (default: the latest with that name)", 0 },
        { "--control", OPT_FLAG, &control, 0, NULL, "plot scores: draw METRIC_control beside it", 0 },
        { "--out", OPT_STR, &out, 0, "FILE", "output; .svg gives SVG, anything else PNG", 0 },
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    if (argc < 2 || argv[1][0] == '-') {
        int rc = opts_parse("plot", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
        return rc < 0 ? 0 : usage_error("plot", "a kind is required: map, grid, scores, curve or causal");
    }
    const char *kind = argv[1];
    int rc = opts_parse("plot", o, (int)(sizeof o / sizeof o[0]), argc - 1, argv + 1, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!out)
        return usage_error("plot", "--out FILE is required");
    if (!strcmp(kind, "map") || !strcmp(kind, "grid")) {
        if (!maps)
            return usage_error("plot", "plot %s needs --maps FILE.h5", kind);
        rc = plot_map(maps, layer, head, seq, out, !strcmp(kind, "grid"));
    } else if (!strcmp(kind, "scores") || !strcmp(kind, "curve")) {
        int scores = !strcmp(kind, "scores");
        if (!db || (scores ? !metric : !curve))
            return usage_error("plot", "plot %s needs --db FILE and %s", kind,
                               scores ? "--metric NAME" : "--curve NAME");
        rc = plot_from_index(kind, db, metric, curve, run, out, control);
    } else if (!strcmp(kind, "causal")) {
        if (!db)
            return usage_error("plot", "plot causal needs --db FILE");
        rc = plot_from_index(kind, db, NULL, NULL, run, out, 0);
    } else {
        return usage_error("plot", "unknown kind '%s' (map, grid, scores, curve, causal)", kind);
    }
    if (rc)
        return run_error("plot");
    if (json) {
        printf("{\"out\":");
        json_string(stdout, out);
        printf(",\"kind\":");
        json_string(stdout, kind);
        printf("}\n");
    } else {
        printf("wrote %s\n", out);
    }
    return 0;
}
