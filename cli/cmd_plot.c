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

#include <sqlite3.h>

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
    char assign[4096], title[300], qtitle[400], p[1200];
    if (!rc && !grid) {
        int li = -1, hi = -1;
        for (int i = 0; i < in->n_layers; i++)
            if (in->layers[i].layer == layer)
                li = i;
        for (int h = 0; li >= 0 && h < in->layers[li].nh; h++)
            if (in->layers[li].heads[h] == head)
                hi = h;
        if (li < 0 || hi < 0)
            rc = hs_fail(HS_EINVAL, "%s holds no map of layer %d head %d", maps, layer, head);
        if (!rc)
            rc = hs_maps_read(r, li, seq, hi, buf);
        snprintf(p, sizeof p, "%s/map.txt", dir);
        FILE *f = rc ? NULL : fopen(p, "w");
        if (!rc && !f)
            rc = hs_fail(HS_EIO, "%s: cannot write", p);
        if (f) {
            const hs_maps_layer_info *l = &in->layers[li];
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
            if (fclose(f))
                rc = hs_fail(HS_EIO, "%s: write failed", p);
        }
        snprintf(title, sizeof title, "layer %d, head %d, sequence %lld", layer, head, seq);
        gp_quote(qtitle, sizeof qtitle, title);
        snprintf(assign, sizeof assign, "datafile='%s'; outfile='%s'; plottitle='%s'", p, out,
                 qtitle);
        if (!rc)
            rc = run_gnuplot("plot_map.gp", assign, out);
    } else if (!rc) {
        nl = in->n_layers;
        for (int i = 0; i < in->n_layers; i++)
            nh = in->layers[i].nh > nh ? in->layers[i].nh : nh;
        for (int i = 0; !rc && i < in->n_layers; i++) {
            const hs_maps_layer_info *l = &in->layers[i];
            for (int h = 0; !rc && h < nh; h++) {
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
                        fprintf(f, "%s%.4g", s ? " " : "",
                                h < l->nh ? buf[(size_t)q * l->S + s] : NAN);
                    fprintf(f, "\n");
                }
                if (fclose(f) && !rc)
                    rc = hs_fail(HS_EIO, "%s: write failed", p);
            }
        }
        snprintf(title, sizeof title, "%s, sequence %lld (colour range 0..1)", maps, seq);
        gp_quote(qtitle, sizeof qtitle, title);
        snprintf(assign, sizeof assign, "dir='%s'; nl=%d; nh=%d; outfile='%s'; plottitle='%s'",
                 dir, nl, nh, out, qtitle);
        if (!rc)
            rc = run_gnuplot("plot_grid.gp", assign, out);
    }
    if (*dir)
        cleanup_dir(dir, nl, nh);
    free(tok);
    free(buf);
    hs_maps_close(r);
    return rc;
}

/* Opens an index read-only; *s is NULL and the error set on failure. */
static int open_index(sqlite3 **s, const char *db)
{
    if (sqlite3_open_v2(db, s, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK)
        return HS_OK;
    int rc = hs_fail(HS_EIO, "%s: cannot open the index: %s", db,
                     *s ? sqlite3_errmsg(*s) : "out of memory");
    sqlite3_close(*s);
    *s = NULL;
    return rc;
}

/* Writes "layer head value" rows of metric (run_id 0: its latest run) to path;
 * *rows gets the count. */
static int write_metric(sqlite3 *s, const char *db, const char *metric, long long run_id,
                        const char *path, long *rows)
{
    sqlite3_stmt *st = NULL;
    *rows = 0;
    if (sqlite3_prepare_v2(s,
                           "SELECT layer, head, value FROM head_metrics WHERE metric=?1 AND"
                           " run_id=coalesce(nullif(?2,0), (SELECT max(run_id) FROM head_metrics"
                           " WHERE metric=?1)) AND layer>=0 ORDER BY layer, head",
                           -1, &st, NULL) != SQLITE_OK)
        return hs_fail(HS_EIO, "%s: not a headscope index: %s", db, sqlite3_errmsg(s));
    FILE *f = fopen(path, "w");
    int rc = f ? HS_OK : hs_fail(HS_EIO, "%s: cannot write", path);
    sqlite3_bind_text(st, 1, metric, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, run_id);
    while (f && sqlite3_step(st) == SQLITE_ROW) {
        fprintf(f, "%d %d %.9g\n", sqlite3_column_int(st, 0), sqlite3_column_int(st, 1),
                sqlite3_column_double(st, 2));
        (*rows)++;
    }
    if (f && fclose(f))
        rc = hs_fail(HS_EIO, "%s: write failed", path);
    sqlite3_finalize(st);
    return rc;
}

/* A per-head grid of metric (beside metric_control when with_control), or
 * curves (a comma-separated list of names, one line each), from the index.
 * run_id 0: for each name, its latest run. */
int plot_index(const char *db, const char *metric, const char *curve, long long run_id,
               const char *out, int with_control)
{
    sqlite3 *s = NULL;
    if (open_index(&s, db))
        return HS_EIO;
    const char *sql = metric ? "SELECT layer, head, value FROM head_metrics WHERE metric=?1 AND"
                               " run_id=coalesce(nullif(?2,0), (SELECT max(run_id) FROM"
                               " head_metrics WHERE metric=?1)) AND layer>=0 ORDER BY layer, head"
                             : "SELECT x, y FROM curves WHERE curve=?1 AND"
                               " run_id=coalesce(nullif(?2,0), (SELECT max(run_id) FROM curves"
                               " WHERE curve=?1)) ORDER BY step";
    sqlite3_stmt *st = NULL;
    char dir[600] = "", p[1200], assign[4096], title[300], qtitle[400], names[300] = "";
    int rc = sqlite3_prepare_v2(s, sql, -1, &st, NULL) == SQLITE_OK
                 ? HS_OK
                 : hs_fail(HS_EIO, "%s: not a headscope index: %s", db, sqlite3_errmsg(s));
    if (!rc)
        rc = make_dir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/%s", dir, metric ? "scores.txt" : "curve.txt");
    FILE *f = rc ? NULL : fopen(p, "w");
    if (!rc && !f)
        rc = hs_fail(HS_EIO, "%s: cannot write", p);
    /* one block per name: the metric, or each curve of the list */
    const char *list = metric ? metric : curve;
    for (const char *name = list; f && !rc && *name;) {
        size_t len = strcspn(name, ",");
        char one[128];
        snprintf(one, sizeof one, "%.*s", (int)len, name);
        name += len + (name[len] == ',');
        long rows = 0;
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, one, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, run_id);
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (metric)
                fprintf(f, "%d %d %.9g\n", sqlite3_column_int(st, 0), sqlite3_column_int(st, 1),
                        sqlite3_column_double(st, 2));
            else
                fprintf(f, "%.9g %.9g\n", sqlite3_column_double(st, 0),
                        sqlite3_column_double(st, 1));
            rows++;
        }
        if (!rows)
            rc = hs_fail(HS_EINVAL, "%s: no %s \"%s\"%s", db, metric ? "metric" : "curve", one,
                         run_id ? " in that run" : "");
        fprintf(f, "\n\n");
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", used ? " " : "", one);
        if (metric)
            break;
    }
    if (f && fclose(f) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed", p);
    snprintf(title, sizeof title, "%s (%s)", list, db);
    gp_quote(qtitle, sizeof qtitle, title);
    char cpath[1300] = "";
    if (!rc && metric && with_control) {
        char cmetric[128];
        long crows = 0;
        snprintf(cmetric, sizeof cmetric, "%s_control", metric);
        snprintf(cpath, sizeof cpath, "%s/control.txt", dir);
        rc = write_metric(s, db, cmetric, run_id, cpath, &crows);
        if (!rc && !crows)
            rc = hs_fail(HS_EINVAL, "%s: no metric \"%s\"%s", db, cmetric,
                         run_id ? " in that run" : "");
    }
    if (metric)
        snprintf(assign, sizeof assign, "datafile='%s'; outfile='%s'; plottitle='%s'%s%s%s", p,
                 out, qtitle, *cpath ? "; controlfile='" : "", cpath, *cpath ? "'" : "");
    else
        snprintf(assign, sizeof assign,
                 "datafile='%s'; outfile='%s'; plottitle='%s'; names='%s'; xlab='%s';"
                 " ylab='value'",
                 p, out, qtitle, names,
                 strstr(list, "pruning") ? "fraction of heads pruned"
                 : strstr(list, "loss")  ? "tokens trained on"
                                         : "x");
    if (!rc)
        rc = run_gnuplot(metric ? "plot_scores.gp" : "plot_curve.gp", assign, out);
    sqlite3_finalize(st);
    sqlite3_close(s);
    if (*dir)
        cleanup_dir(dir, 0, 0);
    return rc;
}

/* The causal check of an induction run (run_id 0: the latest): each random
 * draw's loss increase beside the targeted heads'. */
int plot_causal(const char *db, long long run_id, const char *out)
{
    sqlite3 *s = NULL;
    if (open_index(&s, db))
        return HS_EIO;
    sqlite3_stmt *st = NULL;
    int rc = HS_OK;
    if (!run_id) {
        if (sqlite3_prepare_v2(s, "SELECT max(run_id) FROM curves WHERE curve='causal_random_k'",
                               -1, &st, NULL) != SQLITE_OK)
            rc = hs_fail(HS_EIO, "%s: not a headscope index: %s", db, sqlite3_errmsg(s));
        else if (sqlite3_step(st) == SQLITE_ROW)
            run_id = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        st = NULL;
    }
    double targeted = NAN, targeted_se = 0, clean = NAN;
    char label[256] = "";
    if (!rc && sqlite3_prepare_v2(s, "SELECT metric, layer, head, value, stderr FROM head_metrics"
                                     " WHERE run_id=?1 AND metric IN ('causal_loss_delta_top_k',"
                                     " 'second_half_loss', 'causal_top_k') ORDER BY layer, head",
                                  -1, &st, NULL) != SQLITE_OK)
        rc = hs_fail(HS_EIO, "%s: not a headscope index: %s", db, sqlite3_errmsg(s));
    if (!rc) {
        sqlite3_bind_int64(st, 1, run_id);
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *metric = (const char *)sqlite3_column_text(st, 0);
            if (!strcmp(metric, "causal_loss_delta_top_k")) {
                targeted = sqlite3_column_double(st, 3);
                targeted_se = sqlite3_column_double(st, 4);
            } else if (!strcmp(metric, "second_half_loss")) {
                clean = sqlite3_column_double(st, 3);
            } else {
                size_t len = strlen(label);
                snprintf(label + len, sizeof label - len, "%sL%dH%d", len ? " " : "",
                         sqlite3_column_int(st, 1), sqlite3_column_int(st, 2));
            }
        }
        sqlite3_finalize(st);
        st = NULL;
        if (isnan(targeted))
            rc = hs_fail(HS_EINVAL, "%s: no causal check%s (run `headscope induction` first)", db,
                         run_id ? " in that run" : "");
    }
    char dir[600] = "", p[1200], assign[4096], title[300], qtitle[400];
    if (!rc)
        rc = make_dir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/draws.txt", dir);
    FILE *f = rc ? NULL : fopen(p, "w");
    if (!rc && !f)
        rc = hs_fail(HS_EIO, "%s: cannot write", p);
    if (f) {
        long rows = 0;
        if (sqlite3_prepare_v2(s, "SELECT step, y FROM curves WHERE run_id=?1 AND"
                                  " curve='causal_random_k' ORDER BY step",
                               -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, run_id);
            for (; sqlite3_step(st) == SQLITE_ROW; rows++)
                fprintf(f, "%lld %.9g\n", (long long)sqlite3_column_int64(st, 0),
                        sqlite3_column_double(st, 1));
        }
        if (fclose(f))
            rc = hs_fail(HS_EIO, "%s: write failed", p);
        if (!rc && rows < 2)
            rc = hs_fail(HS_EINVAL, "%s: run %lld has no random draws (curve causal_random_k)",
                         db, run_id);
    }
    snprintf(title, sizeof title, "causal check, run %lld: second-half loss %.3f on r ++ r (%s)",
             run_id, clean, db);
    gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign,
             "datafile='%s'; outfile='%s'; plottitle='%s'; targeted=%.9g; targeted_se=%.9g;"
             " toplabel='%s'",
             p, out, qtitle, targeted, targeted_se, label);
    if (!rc)
        rc = run_gnuplot("plot_causal.gp", assign, out);
    sqlite3_finalize(st);
    sqlite3_close(s);
    if (*dir)
        cleanup_dir(dir, 0, 0);
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
        rc = plot_index(db, scores ? metric : NULL, scores ? NULL : curve, run, out, control);
    } else if (!strcmp(kind, "causal")) {
        if (!db)
            return usage_error("plot", "plot causal needs --db FILE");
        rc = plot_causal(db, run, out);
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
