/* plot: gnuplot renderings (PNG, SVG or PDF by the output's suffix) of map
 * files and of the index. The data goes to files in a temporary directory;
 * the scripts in scripts/ (usable on their own) draw them. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

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

const char *plot_format(const char *out)
{
    const char *dot = out ? strrchr(out, '.') : NULL;
    if (!dot || strchr(dot, '/'))
        return NULL;
    static const char *const known[] = { "png", "svg", "pdf" };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcasecmp(dot + 1, known[i]))
            return known[i];
    return NULL;
}

/* HS_OK when outfile's directory exists (an unwritable output is our error
 * to report, not gnuplot's). */
static int check_parent(const char *outfile)
{
    char parent[1024];
    snprintf(parent, sizeof parent, "%s", outfile);
    char *slash = strrchr(parent, '/');
    if (slash)
        *slash = 0;
    struct stat ps;
    if (slash && *parent && (stat(parent, &ps) || !S_ISDIR(ps.st_mode)))
        return hs_fail(HS_EIO, "%s: cannot write: %s is not a directory", outfile, parent);
    return HS_OK;
}

/* Writes s as a gnuplot string expression that means exactly s: single-quoted
 * pieces (inside them nothing is special: no backquote, macro or backslash)
 * joined by "." to "'" for each quote, since gnuplot 5.4 misreads runs of
 * doubled quotes. A control byte (a newline would end the command) is shown
 * as a space. Cut short, still well formed, when n is too small; n >= 12.
 * Nothing in s is ever read as a command. */
static void gp_quote(char *out, size_t n, const char *s)
{
    size_t k = 0;
    int open = 0;
    for (; *s && k + 10 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\'') {
            if (open)
                out[k++] = '\'';
            open = 0;
            k += (size_t)snprintf(out + k, n - k, "%s\"'\"", k ? "." : "");
            continue;
        }
        if (!open && k)
            out[k++] = '.';
        if (!open)
            out[k++] = '\'';
        open = 1;
        out[k++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    if (open)
        out[k++] = '\'';
    if (!k) {
        out[k++] = '"';
        out[k++] = '"';
    }
    out[k] = 0;
}

/* Runs gnuplot on a script with -e assignments, fmt (png, svg or pdf: the
 * output's suffix) first; checks the output exists. */
static int run_gnuplot(const char *script, const char *assignments, const char *outfile)
{
    char path[PATH_MAX + 128];
    const char *fmt = plot_format(outfile);
    if (!fmt)
        return hs_fail(HS_EINVAL, "%s: unknown output format (name it .png, .svg or .pdf)",
                       outfile);
    snprintf(path, sizeof path, "%s/%s", scripts_dir(), script);
    if (access(path, R_OK))
        return hs_fail(HS_EIO, "%s: gnuplot script not found (set HEADSCOPE_SCRIPTS)", path);
    for (const unsigned char *c = (const unsigned char *)outfile; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return hs_fail(HS_EINVAL, "--out: a file name with a control character is refused");
    int rc = check_parent(outfile);
    size_t qn = 8 * strlen(outfile) + 12, n = strlen(assignments) + qn + 48;
    char *all = rc ? NULL : malloc(n), *q = rc ? NULL : malloc(qn);
    if (!rc && (!all || !q))
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    if (rc) {
        free(all);
        free(q);
        return rc;
    }
    gp_quote(q, qn, outfile);
    snprintf(all, n, "fmt='%s'; outfile=%s; %s", fmt, q, assignments);
    free(q);
    pid_t pid = fork();
    if (pid < 0) {
        free(all);
        return hs_fail(HS_EIO, "cannot start gnuplot: %s", strerror(errno));
    }
    if (pid == 0) {
        /* gnuplot's own diagnostics are noise once we report the failure. */
        if (!freopen("/dev/null", "w", stderr))
            _exit(126);
        execlp("gnuplot", "gnuplot", "-e", all, path, (char *)NULL);
        fprintf(stderr, "headscope: plot: cannot run gnuplot: %s\n", strerror(errno));
        _exit(127);
    }
    free(all);
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
    /* The data files' paths reach gnuplot inside quoted strings, some of them
     * passed to eval (plot_scores.gp): a folder that could end such a string is
     * not used. */
    if (!base || !*base || base[strcspn(base, "'\"\\`$@%")])
        base = "/tmp";
    for (const unsigned char *c = (const unsigned char *)base; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            base = "/tmp";
    snprintf(dir, n, "%s/headscope-plot-XXXXXX", base);
    return mkdtemp(dir) ? HS_OK : hs_fail(HS_EIO, "cannot create a temporary directory");
}

static void cleanup_dir(const char *dir, int nl, int nh)
{
    char p[1200];
    const char *fixed[] = { "map.txt",    "scores.txt",  "curve.txt", "control.txt",
                            "xlabels.txt", "ylabels.txt",
                            "draws.txt",  "absent.txt", "cabsent.txt", "js.txt",
                            "nohead.txt", "cnohead.txt" };
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


/* At most this many labels on an axis: every step-th position is labelled. */
enum { MAP_MAX_LABELS = 40, MAP_LABEL_CHARS = 12 };

/* A label as a gnuplot data field that reads back exactly as label: gnuplot
 * unescapes string fields (\\, \NNN octal) and ends one at a '"', so a
 * backslash is doubled and a quote written as \042 (a digit right after an
 * octal escape is escaped too, or it would extend it). label holds no tab
 * or control byte (cli_token_display). */
static void gp_data_label(FILE *f, const char *label)
{
    int after_octal = 0;
    for (const unsigned char *c = (const unsigned char *)label; *c; c++) {
        if (*c == '"' || (after_octal && *c >= '0' && *c <= '7')) {
            fprintf(f, "\\%03o", *c);
            after_octal = 1;
            continue;
        }
        if (*c == '\\')
            fputc('\\', f);
        fputc(*c, f);
        after_octal = 0;
    }
}

/* The label of position t: its token's display string (text, from the map
 * file's /token_text), else its id. */
static void write_label(FILE *f, int t, const int32_t *tok, char *const *text)
{
    char d[160];
    if (text)
        cli_token_display(d, sizeof d, text[t], MAP_LABEL_CHARS, 1);
    else
        snprintf(d, sizeof d, "%d", (int)tok[t]);
    fprintf(f, "%d\t", t);
    gp_data_label(f, d);
    fprintf(f, "\n");
}

/* Labels of positions first..first+n-1 ("position<TAB>label" lines), at
 * most MAP_MAX_LABELS of them evenly spaced, always the first. */
static int write_labels(const char *p, int first, int n, const int32_t *tok, char *const *text)
{
    FILE *f = fopen(p, "w");
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", p);
    const int step = (n + MAP_MAX_LABELS - 1) / MAP_MAX_LABELS;
    for (int i = 0; i < n; i += step)
        write_label(f, first + i, tok, text);
    return fclose(f) ? hs_fail(HS_EIO, "%s: write failed", p) : HS_OK;
}

/* One head's map: one tab-separated row per query, the key labels and the
 * query labels in files of their own (labels are data, never code). */
static int write_map_txt(const char *dir, const hs_maps_layer_info *l, const int32_t *tok,
                         char *const *text, const float *buf)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/map.txt", dir);
    FILE *f = fopen(p, "w");
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", p);
    for (int q = 0; q < l->nq; q++)
        for (int s = 0; s < l->S; s++)
            fprintf(f, "%.5g%c", buf[(size_t)q * l->S + s], s + 1 < l->S ? '\t' : '\n');
    if (fclose(f))
        return hs_fail(HS_EIO, "%s: write failed", p);
    snprintf(p, sizeof p, "%s/xlabels.txt", dir);
    int rc = write_labels(p, 0, l->S, tok, text);
    snprintf(p, sizeof p, "%s/ylabels.txt", dir);
    return rc ? rc : write_labels(p, l->q0, l->nq, tok, text);
}

/* One head's map with token labels (plot_map.gp). */
static int draw_head(hs_maps_reader *r, const char *maps, int layer, int head, long long seq,
                     const int32_t *tok, char *const *text, float *buf, const char *dir,
                     const char *out)
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
    const hs_maps_layer_info *l = &in->layers[li];
    char assign[16384], title[300], qtitle[2400];
    rc = hs_maps_read(r, li, seq, hi, buf);
    if (!rc)
        rc = write_map_txt(dir, l, tok, text, buf);
    snprintf(title, sizeof title, "layer %d, head %d, sequence %lld%s", layer, head, seq,
             text ? "" : " (token ids: the file holds no token text)");
    gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign, "datafile='%s/map.txt'; xlabels='%s/xlabels.txt'; "
             "ylabels='%s/ylabels.txt'; keys=%d; queries=%d; qstart=%d; plottitle=%s", dir, dir,
             dir, l->S, l->nq, l->q0, qtitle);
    return rc ? rc : run_gnuplot("plot_map.gp", assign, out);
}

/* The model's number of heads in layer `layer` from its config.json text
 * (n_head or num_attention_heads, a number or one per layer); -1 when the
 * text does not say. */
static int config_heads(const char *config, int layer)
{
    cJSON *c = config ? cJSON_Parse(config) : NULL;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(c, "n_head");
    if (!h)
        h = cJSON_GetObjectItemCaseSensitive(c, "num_attention_heads");
    if (cJSON_IsArray(h))
        h = cJSON_GetArrayItem(h, layer);
    int n = cJSON_IsNumber(h) ? h->valueint : -1;
    cJSON_Delete(c);
    return n;
}

/* One panel's matrix: head hi of captured layer li, sequence seq. */
static int write_panel(hs_maps_reader *r, int li, int hi, long long seq, float *buf,
                       const char *p)
{
    const hs_maps_layer_info *l = &hs_maps_get_info(r)->layers[li];
    FILE *f = fopen(p, "w");
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", p);
    int rc = hs_maps_read(r, li, seq, hi, buf);
    for (int q = 0; !rc && q < l->nq; q++) {
        for (int s = 0; s < l->S; s++)
            fprintf(f, "%s%.4g", s ? " " : "", buf[(size_t)q * l->S + s]);
        fprintf(f, "\n");
    }
    if (fclose(f) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed", p);
    return rc;
}

/* Every captured head of a sequence (plot_grid.gp): one row per captured
 * layer, one column per head index, one file per drawn panel. A cell that
 * is no head of the model, or a head the capture left out, is a grey panel
 * saying so, never an empty map. nl x nh is the panel grid (cleanup_dir). */
static int draw_grid(hs_maps_reader *r, const char *maps, long long seq, float *buf,
                     const char *dir, const char *out, int *nl, int *nh)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    int rc = HS_OK;
    char title[300], qtitle[2400], p[1200];
    *nl = in->n_layers;
    for (int i = 0; i < in->n_layers; i++)
        for (int k = 0; k < in->layers[i].nh; k++)
            *nh = in->layers[i].heads[k] + 1 > *nh ? in->layers[i].heads[k] + 1 : *nh;
    size_t cap = (size_t)*nl * *nh * 24 + 1024, len = 0;
    char *labels = malloc(cap), *assign = malloc(cap + 4000);
    if (!labels || !assign)
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    for (int i = 0; !rc && i < in->n_layers; i++) {
        const hs_maps_layer_info *l = &in->layers[i];
        int model_heads = config_heads(in->model_config, l->layer);
        for (int h = 0; !rc && h < *nh; h++) {
            int hi = -1;
            for (int k = 0; k < l->nh; k++)
                hi = l->heads[k] == h ? k : hi;
            snprintf(p, sizeof p, "%s/%d_%d.txt", dir, i, h);
            if (hi >= 0)
                rc = write_panel(r, i, hi, seq, buf, p);
            char word[32];
            if (hi >= 0)
                snprintf(word, sizeof word, "L%dH%d", l->layer, h);
            else
                snprintf(word, sizeof word, "%s",
                         model_heads >= 0 && h >= model_heads ? "nohead" : "notcaptured");
            len += (size_t)snprintf(labels + len, cap - len, "%s%s", len ? " " : "", word);
        }
    }
    snprintf(title, sizeof title, "%s, sequence %lld: attention probability, one scale 0 .. 1",
             maps, seq);
    gp_quote(qtitle, sizeof qtitle, title);
    if (!rc) {
        snprintf(assign, cap + 4000, "dir='%s'; nl=%d; nh=%d; plottitle=%s; "
                 "labels='%s'", dir, *nl, *nh, qtitle, labels);
        rc = run_gnuplot("plot_grid.gp", assign, out);
    }
    free(labels);
    free(assign);
    return rc;
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
    char **text = in->has_token_text ? calloc((size_t)in->seq_len, sizeof *text) : NULL;
    float *buf = malloc(sizeof(float) * (size_t)in->seq_len * in->seq_len);
    if (!tok || !buf || (in->has_token_text && !text))
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    if (!rc && (seq < 0 || seq >= in->n_seq))
        rc = hs_fail(HS_EINVAL, "%s: no sequence %lld (it holds %lld)", maps, seq, in->n_seq);
    if (!rc && !in->complete)
        rc = hs_fail(HS_EFORMAT, "%s is not marked complete", maps);
    if (!rc)
        rc = hs_maps_read_tokens(r, seq, tok);
    if (!rc && text)
        rc = hs_maps_read_token_text(r, seq, text);
    if (!rc)
        rc = make_dir(dir, sizeof dir);
    if (!rc)
        rc = grid ? draw_grid(r, maps, seq, buf, dir, out, &nl, &nh)
                  : draw_head(r, maps, layer, head, seq, tok, text, buf, dir, out);
    if (*dir)
        cleanup_dir(dir, nl, nh);
    hs_maps_free_token_text(text, text ? in->seq_len : 0);
    free(text);
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
    FILE *f = fopen(c->values, "w"), *a = fopen(c->absent, "w"), *x = fopen(c->nohead, "w");
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

/* The --seq-len of a command line recorded as a JSON array; 0 if none. */
static int args_seq_len(const char *args)
{
    cJSON *a = args ? cJSON_Parse(args) : NULL;
    int T = 0, next = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, a) {
        const char *v = cJSON_IsString(w) ? w->valuestring : "";
        if (next)
            T = atoi(v);
        next = !strcmp(v, "--seq-len");
        if (!strncmp(v, "--seq-len=", 10))
            T = atoi(v + 10);
    }
    cJSON_Delete(a);
    return T > 0 ? T : 0;
}

/* What run `run` says about its model and data: heads[l] = the heads of
 * layer l (l < nl) from its model's config.json, -1 where unknown; *seq_len
 * = its --seq-len, 0 where not given. */
static void run_context(hs_index *ix, int64_t run, int nl, int *heads, int *seq_len)
{
    hs_run_list l = { 0 };
    char path[1200] = "", *text = NULL;
    for (int i = 0; i < nl; i++)
        heads[i] = -1;
    *seq_len = 0;
    if (hs_index_runs(ix, NULL, NULL, &l))
        return;
    for (int i = 0; i < l.n; i++)
        if (l.runs[i].run_id == run) {
            if (l.runs[i].model_path)
                snprintf(path, sizeof path, "%s/config.json", l.runs[i].model_path);
            *seq_len = args_seq_len(l.runs[i].args);
        }
    hs_run_list_free(&l);
    FILE *f = *path ? fopen(path, "r") : NULL;
    if (!f)
        return;
    size_t cap = 0;
    if (getdelim(&text, &cap, 0, f) > 0)
        for (int i = 0; i < nl; i++)
            heads[i] = config_heads(text, i);
    free(text);
    fclose(f);
}

/* The smallest number of two significant digits >= x > 0 (1 for x <= 0). */
static double nice_up(double x)
{
    if (!(x > 0) || !isfinite(x))
        return 1;
    double unit = pow(10, floor(log10(x)) - 1);
    return ceil(x / unit - 1e-9) * unit;
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

typedef struct {
    double lo, hi;
    int diverging;
    char label[200];
} plot_scale;

/* The colour scale of a metric, fixed by its meaning and shared by the model
 * and its control (cg may be NULL): probabilities on 0..1, copying on -1..1,
 * entropy on 0..ln T and distance on 0..T-1 (their largest possible values,
 * where the run's sequence length T is known), signed quantities (loss
 * deltas, patching, logit attribution, anything with a negative value) on a
 * range symmetric about 0 (loss deltas at least +-0.1 nats, so noise stays
 * pale), other nonnegative ones on 0..their largest value; the label says
 * which. */
static void metric_scale(const char *metric, const hs_metric_grid *g, const hs_metric_grid *cg,
                         int T, plot_scale *s)
{
    static const char *const prob[] = { "induction",   "duplicate_token", "prev_token", "self",
                                        "next_token",  "first_token",     "delim",      "pruned",
                                        "importance" };
    char base[128];
    snprintf(base, sizeof base, "%s", metric);
    size_t n = strlen(base);
    if (n > 8 && !strcmp(base + n - 8, "_control"))
        base[n - 8] = 0;
    s->lo = 0, s->hi = 1, s->diverging = 0;
    for (size_t i = 0; i < sizeof prob / sizeof prob[0]; i++)
        if (!strcmp(base, prob[i])) {
            snprintf(s->label, sizeof s->label, "%s, fixed scale 0 .. 1",
                     !strcmp(base, "pruned")       ? "1 = pruned"
                     : !strcmp(base, "importance") ? "importance (unit length per layer)"
                                                   : "attention probability");
            return;
        }
    if (!strcmp(base, "copying")) {
        s->lo = -1, s->diverging = 1;
        snprintf(s->label, sizeof s->label, "copying score, fixed scale −1 .. 1, white at 0");
        return;
    }
    if (T > 1 && (!strcmp(base, "entropy") || !strcmp(base, "distance"))) {
        int entropy = !strcmp(base, "entropy");
        s->hi = entropy ? log(T) : T - 1;
        snprintf(s->label, sizeof s->label, "%s, fixed scale 0 .. %s = %.3g (T = %d)",
                 entropy ? "entropy (nats)" : "mean distance (positions)",
                 entropy ? "ln T" : "T − 1", s->hi, T);
        return;
    }
    int signed_metric = !strncmp(base, "loss_delta", 10) || !strncmp(base, "causal", 6) ||
                        strstr(base, "patch") || strstr(base, "dla") ||
                        grid_has_negative(g) || grid_has_negative(cg);
    if (signed_metric) {
        s->hi = nice_up(fmax(grid_max(g, 1), grid_max(cg, 1)));
        if (!strncmp(base, "loss_delta", 10) && s->hi < 0.1)
            s->hi = 0.1;
        s->lo = -s->hi, s->diverging = 1;
        snprintf(s->label, sizeof s->label, "%s%s, scale −%.2g .. +%.2g, white at 0", base,
                 strncmp(base, "loss_delta", 10) ? "" : " (nats)", s->hi, s->hi);
        return;
    }
    s->hi = nice_up(fmax(grid_max(g, 0), grid_max(cg, 0)));
    snprintf(s->label, sizeof s->label, "%s, scale 0 .. %.2g (its largest value)",
             !strcmp(base, "entropy")    ? "entropy (nats)"
             : !strcmp(base, "distance") ? "mean distance (positions)"
                                         : base,
             s->hi);
}

/* The assignments of plot_scores.gp: files, shape, scale. */
static void scores_assign(char *out, size_t n, const char *dir,
                          const char *title, int nl, int nh, const plot_scale *s,
                          const cell_files *c, const cell_files *cc)
{
    char qlab[2400];
    gp_quote(qlab, sizeof qlab, s->label);
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
static int plot_scores(hs_index *ix, const char *db, const char *metric, long long run_id,
                       const char *out, int with_control)
{
    char dir[600] = "", p[4][1200], cp[4][1200], assign[16384], title[300], qtitle[2400];
    char one[128], cmetric[160];
    hs_metric_grid g = { 0 }, cg = { 0 };
    plot_scale s;
    snprintf(one, sizeof one, "%.*s", (int)strcspn(metric, ","), metric); /* as curve lists */
    int64_t run = run_id;
    int seq_len = 0;
    int rc = make_dir(dir, sizeof dir);
    if (!rc && !run)
        rc = hs_index_latest_with_metric(ix, one, &run);
    if (!rc)
        rc = read_grid(ix, db, one, run, &g);
    if (!rc && with_control) {
        snprintf(cmetric, sizeof cmetric, "%s_control", one);
        rc = read_grid(ix, db, cmetric, run, &cg);
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
    gp_quote(qtitle, sizeof qtitle, title);
    scores_assign(assign, sizeof assign, dir, qtitle, nl, nh, &s, &c,
                  with_control ? &cc : NULL);
    if (!rc)
        rc = run_gnuplot("plot_scores.gp", assign, out);
    free(heads);
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

/* The key entry of a curve, in words. */
static void curve_key(char *out, size_t n, const char *name)
{
    int heads, seed;
    if (!strcmp(name, "train_loss"))
        snprintf(out, n, "training loss (each batch)");
    else if (!strcmp(name, "val_loss"))
        snprintf(out, n, "validation loss (held-out data)");
    else if (!strcmp(name, "pruning"))
        snprintf(out, n, "validation loss after each pruning step");
    else if (!strcmp(name, "causal_random_k"))
        snprintf(out, n, "loss increase, k random heads off");
    else if (sscanf(name, "train_loss_heads_%d_seed_%d", &heads, &seed) == 2)
        snprintf(out, n, "training loss, %d head%s, seed %d", heads, heads == 1 ? "" : "s", seed);
    else
        snprintf(out, n, "%s", name);
}

/* Title and axis labels of a list of curves. */
static void curve_axes(const char *list, const char *db, char *title, char *xlab, char *ylab,
                       size_t n)
{
    const int pruning = strstr(list, "pruning") != NULL, loss = strstr(list, "loss") != NULL;
    const int causal = strstr(list, "causal") != NULL;
    snprintf(title, n, "%s (%s)",
             pruning  ? "Validation loss against the fraction of heads pruned"
             : causal ? "Causal check: random draws"
             : strstr(list, "val_loss") ? "Training and validation loss"
             : loss   ? "Training loss"
                      : list,
             db);
    snprintf(xlab, n, "%s",
             pruning  ? "fraction of heads pruned"
             : causal ? "draw"
             : loss   ? "tokens trained on"
                      : "x");
    snprintf(ylab, n, "%s",
             pruning || loss ? "loss (nats, next-token cross-entropy)"
             : causal        ? "increase of the loss (nats)"
                             : "value");
}

/* Curves (a comma-separated list of names), one line each. */
static int plot_curves(hs_index *ix, const char *db, const char *list, long long run_id,
                       const char *out)
{
    char dir[600] = "", p[1200], assign[16384], title[300], qtitle[2400], names[600] = "";
    char qnames[4800], xlab[300], ylab[300];
    int rc = make_dir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/curve.txt", dir);
    FILE *f = rc ? NULL : fopen(p, "w");
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
    gp_quote(qtitle, sizeof qtitle, title);
    gp_quote(qnames, sizeof qnames, names);
    snprintf(assign, sizeof assign,
             "datafile='%s'; plottitle=%s; names=%s; xlab='%s'; ylab='%s'%s", p,
             qtitle, qnames, xlab, ylab, strstr(ylab, "loss (nats") ? "; minspan=0.5" : "");
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
    char label[256] = "", qlabel[2100], dir[600] = "", p[1200], assign[16384], title[300];
    char qtitle[2400];
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
    gp_quote(qlabel, sizeof qlabel, label);
    snprintf(assign, sizeof assign,
             "datafile='%s'; plottitle=%s; targeted=%.9g; targeted_se=%.9g;"
             " toplabel=%s",
             p, qtitle, top.value, top.stderr_value, qlabel);
    if (!rc)
        rc = run_gnuplot("plot_causal.gp", assign, out);
    hs_curve_free(&draws);
    if (*dir)
        cleanup_dir(dir, 0, 0);
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
int plot_js(const char *csv, const char *out)
{
    char dir[600] = "", p[1200], assign[16384], qcsv[9700], *line = NULL;
    size_t cap = 0;
    int rc = HS_OK, n = 0, rows = 0;
    FILE *in = fopen(csv, "r"), *f = NULL;
    if (!in)
        return hs_fail(HS_EIO, "%s: cannot read the Jensen-Shannon matrix: %s", csv,
                       strerror(errno));
    rc = make_dir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/js.txt", dir);
    if (!rc && !(f = fopen(p, "w")))
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
    gp_quote(qcsv, sizeof qcsv, csv);
    snprintf(assign, sizeof assign, "datafile='%s'; n=%d; plottitle=%s", p,
             n, qcsv);
    if (!rc)
        rc = run_gnuplot("plot_js.gp", assign, out);
    if (*dir)
        cleanup_dir(dir, 0, 0);
    return rc;
}

/* 0 when this gnuplot has no pdfcairo terminal (gnuplot-nox builds may
 * lack it); 1 otherwise, or when gnuplot cannot be run at all (then the
 * plot itself says so). */
static int pdf_available(void)
{
    int st = system("gnuplot -e 'set terminal pdfcairo' >/dev/null 2>&1");
    return st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 127;
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
    else if (plot_interp_kind(kind))
        rc = plot_interp(ix, db, kind, metric, run, out);
    else if (!strcmp(kind, "scores"))
        rc = plot_index(ix, db, metric, NULL, run, out, control);
    else
        rc = plot_index(ix, db, NULL, curve, run, out, control);
    hs_index_close(ix);
    return rc;
}

/* An option given that plot `kind` would ignore: a usage error naming it
 * (exit 2), else 0. Unknown kinds are left to the caller's message. */
static int refuse_foreign(const char *kind, const opt *o, int n)
{
    static const char *const applies[][2] = {
        { "map", " --maps --layer --head --seq " },
        { "grid", " --maps --seq " },
        { "scores", " --db --metric --run --control " },
        { "curve", " --db --curve --run " },
        { "causal", " --db --run " },
        { "patch", " --db --metric --run " },
        { "dla", " --db --run " },
        { "lens", " --db --run " },
        { "composition", " --db --metric --run " },
    };
    for (size_t k = 0; k < sizeof applies / sizeof applies[0]; k++) {
        if (strcmp(kind, applies[k][0]))
            continue;
        for (int i = 0; i < n; i++) {
            char word[40];
            snprintf(word, sizeof word, " %s ", o[i].name);
            if (o[i].seen && strcmp(o[i].name, "--out") && strcmp(o[i].name, "--json") &&
                !strstr(applies[k][1], word))
                return usage_error("plot", "%s does not apply to plot %s (it takes%s--out "
                                   "and --json)", o[i].name, kind, applies[k][1]);
        }
    }
    return 0;
}

static int cmd_plot(int argc, char **argv)
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
        { "--out", OPT_STR, &out, 0, "FILE", "output: FILE.png, FILE.svg or FILE.pdf", 0 },
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    if (argc < 2 || argv[1][0] == '-') {
        int rc = opts_parse("plot", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
        return rc < 0 ? 0 : usage_error("plot", "a kind is required: map, grid, scores, curve, causal, patch, dla, lens or composition");
    }
    const char *kind = argv[1];
    int rc = opts_parse("plot", o, (int)(sizeof o / sizeof o[0]), argc - 1, argv + 1, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = refuse_foreign(kind, o, (int)(sizeof o / sizeof o[0]))))
        return rc;
    if (!out)
        return usage_error("plot", "--out FILE is required");
    if (!plot_format(out))
        return usage_error("plot", "--out %s: unknown format; name the file .png, .svg or .pdf",
                           out);
    if (!strcmp(plot_format(out), "pdf") && !pdf_available())
        return usage_error("plot", "--out %s: this gnuplot has no PDF terminal (pdfcairo); "
                                   "name the file .png or .svg", out);
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
    } else if (!strcmp(kind, "causal") || plot_interp_kind(kind)) {
        if (!db)
            return usage_error("plot", "plot %s needs --db FILE", kind);
        rc = plot_from_index(kind, db, metric, NULL, run, out, 0);
    } else {
        return usage_error("plot", "unknown kind '%s' (map, grid, scores, curve, causal, patch, "
                                   "dla, lens, composition)", kind);
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

HS_COMMAND(cmd_plot_record) = {
    .name = "plot",
    .order = 90,
    .summary = "Render maps and index results with gnuplot (PNG, SVG or PDF by the --out suffix).",
    .usage = "headscope plot (map|grid|scores|curve|causal|patch|dla|lens|composition) [options] --out FILE",
    .details = "  plot map    --maps F.h5 --layer L --head H [--seq N]   one head's map, token labels\n"
        "  plot grid   --maps F.h5 [--seq N]                      layer x head small multiples\n"
        "  plot scores --db F --metric NAME [--run ID]           per-head score grid\n"
        "  plot scores --db F --metric NAME --control            score beside its random-init control\n"
        "  plot curve  --db F --curve NAME [--run ID]            a curve (e.g. train_loss)\n"
        "  plot causal --db F [--run ID]                         induction causal check: targeted\n"
        "                                                        heads' loss increase vs random draws\n"
        "  plot patch  --db F [--metric patch_resid_pre|patch_attn_out|patch_mlp_out] [--run ID]\n"
        "                      activation patching, layer x position, the prompt's tokens as labels\n"
        "  plot dla    --db F [--run ID]        direct logit attribution: heads, MLPs, biases, sorted\n"
        "  plot lens   --db F [--run ID]        logit lens: loss (and logit difference) per layer\n"
        "  plot composition --db F [--metric q_composition|k_composition|v_composition] [--run ID]\n"
        "                      heads x heads composition scores beside the random-init control\n"
        "Per-head patching and attribution grids: plot scores --metric patch_z|patch_pattern|\n"
        "path_patch|dla.\n"
        "The gnuplot scripts are scripts/plot_*.gp (HEADSCOPE_SCRIPTS overrides where).\n\n"
        "example: headscope plot map --maps maps.h5 --layer 1 --head 0 --out head.png\n",
    .run = cmd_plot,
};

/* ---- for the other renderings of plot.h (plot_interp.c) --------------------------- */

void plot_quote(char *out, size_t n, const char *s)
{
    gp_quote(out, n, s);
}

int plot_gnuplot(const char *script, const char *assignments, const char *outfile)
{
    return run_gnuplot(script, assignments, outfile);
}

int plot_tmpdir(char *dir, size_t n)
{
    return make_dir(dir, n);
}
