/* report: one static HTML page (index.html + gnuplot PNGs) of what an index
 * holds: training curves, the induction claim with its causal check, score
 * grids beside their random-init controls, attention maps of the heads the
 * scores single out, ablation, importance, pruning and pattern statistics.
 * Each figure is captioned with what it shows and what it does not. The page
 * is written under a temporary name and renamed when complete. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "report.h"

#include "common.h"
#include "gnuplot.h"
#include "json.h"
#include "jsonout.h"
#include "labels.h"
#include "maps.h"
#include "metrics.h"
#include "task_metrics.h"
#include "plot.h"
#include "run.h"
#include "study_windows.h"
#include "viewer.h"

typedef struct {
    hs_index *ix;
    const char *db_path, *dir;
    const char *maps; /* the map file to draw (NULL: the latest capture run's) */
    long long seq;    /* its sequence */
    /* the latest complete run of each kind the sections read (0: none) */
    long long induction, ablate, importance, prune, patterns;
    /* --runs: the runs the sections may show (n_runs 0: any); every run a
     * section showed, for the provenance table's "shown" column */
    long long runs[64], shown[64];
    int n_runs, n_shown;
    int heads[16][2], n_heads; /* --heads */
    FILE *html;
    int figures, missing;
} report;

static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* v with an explicit sign and a true minus sign (U+2212): "+0.512",
 * "−0.013". */
static const char *signed_num(char *buf, size_t n, double v, int prec)
{
    if (v < 0)
        snprintf(buf, n, "\u2212%.*f", prec, -v);
    else
        snprintf(buf, n, "+%.*f", prec, v);
    return buf;
}

/* "v &plusmn; se" with se to two significant digits and v to the same
 * decimal place (never "0.014 &plusmn; 0.000"); at least `prec` decimals,
 * v signed with `sign`. */
static const char *pm(char *buf, size_t n, double v, double se, int prec, int sign)
{
    int d = prec;
    if (se > 0 && isfinite(se))
        d = (int)fmax(prec, fmin(9, 1 - floor(log10(se))));
    char num[48];
    if (sign)
        signed_num(num, sizeof num, v, d);
    else
        snprintf(num, sizeof num, "%.*f", d, v);
    snprintf(buf, n, "%s &plusmn; %.*f", num, d, se);
    return buf;
}

/* A command line recorded as a JSON array of strings, as one would type it:
 * "headscope " and the words, each quoted for the shell where it needs it.
 * The text as recorded when it is no such array. */
static void command_line(FILE *f, const char *args)
{
    cJSON *a = NULL;
    if (!args || hs_json_parse(&a, args, strlen(args), "the run's command line") ||
        !cJSON_IsArray(a)) {
        esc(f, args);
        cJSON_Delete(a);
        return;
    }
    fputs("headscope", f);
    const cJSON *w;
    cJSON_ArrayForEach(w, a) {
        const char *s = cJSON_IsString(w) ? w->valuestring : "?";
        int plain = *s != 0;
        for (const char *c = s; *c; c++)
            plain &= !strchr(" \t'\"\\$`!*?[]{}()<>|&;#~", *c);
        fputc(' ', f);
        if (plain) {
            esc(f, s);
            continue;
        }
        fputc('\'', f);
        for (const char *c = s; *c; c++) {
            char one[2] = { *c, 0 };
            esc(f, *c == '\'' ? "'\\''" : one);
        }
        fputc('\'', f);
    }
    cJSON_Delete(a);
}

/* Whether run is one --runs names (any run without --runs). */
static int chosen(const report *r, long long run)
{
    for (int i = 0; i < r->n_runs; i++)
        if (r->runs[i] == run)
            return 1;
    return !r->n_runs;
}

/* run is shown (once in r->shown); run back. */
static long long shown(report *r, long long run)
{
    int seen = !run;
    for (int i = 0; i < r->n_shown && !seen; i++)
        seen = r->shown[i] == run;
    if (!seen && r->n_shown < 64)
        r->shown[r->n_shown++] = run;
    return run;
}

/* The latest complete run of a kind among the chosen; 0 when there is none. */
static long long latest_run(report *r, const char *kind)
{
    hs_run_list l = { 0 };
    long long run = 0;
    if (hs_index_runs(r->ix, kind, "complete", &l))
        return 0;
    for (int i = l.n - 1; i >= 0 && !run; i--)
        run = chosen(r, l.runs[i].run_id) ? l.runs[i].run_id : 0;
    hs_run_list_free(&l);
    return shown(r, run);
}

/* A metric row of a run; returns 1 when found. */
static int metric(report *r, long long run, int layer, int head, const char *name, double *value,
                  double *se)
{
    hs_metric_value v;
    int found = 0;
    if (hs_index_metric_get(r->ix, run, layer, head, name, &v, &found) || !found)
        return 0;
    *value = v.value;
    if (se)
        *se = v.stderr_value;
    return 1;
}

/* Up to k heads of a run by descending value of a metric; returns how many. */
static int top_heads(report *r, long long run, const char *name, int k, int *layer, int *head)
{
    hs_metric_grid g;
    if (hs_index_metric_grid(r->ix, run, name, &g))
        return 0;
    int n = hs_metric_grid_top(&g, k, layer, head);
    hs_metric_grid_free(&g);
    return n;
}

/* The per-head rows a run has of a metric (the cells of its grid). */
static int has_metric(report *r, long long run, const char *name)
{
    hs_metric_grid g;
    if (hs_index_metric_grid(r->ix, run, name, &g))
        return 0;
    int n = g.count;
    hs_metric_grid_free(&g);
    return n;
}

static int has_curve(report *r, long long run, const char *name)
{
    hs_curve c;
    if (hs_index_curve_get(r->ix, run, name, &c))
        return 0;
    int n = c.n;
    hs_curve_free(&c);
    return n;
}

static void path_in(char *out, size_t n, const report *r, const char *file)
{
    snprintf(out, n, "%s/%s", r->dir, file);
}

/* A figure of the page: its file as the page links it (in the report's
 * directory), the path the plot writes it to and its title. Every section
 * names its figures with fig_title or fig_run, draws to path and hands the
 * plot's result to figure(), so each figure is emitted the same way. */
typedef struct {
    char file[128], path[1200], title[200];
} fig;

__attribute__((format(printf, 3, 0))) static void fig_vtitle(fig *g, const report *r,
                                                             const char *title, va_list ap)
{
    vsnprintf(g->title, sizeof g->title, title, ap);
    path_in(g->path, sizeof g->path, r, g->file);
}

/* The title (printf-style) and path of a figure whose g->file is set. */
__attribute__((format(printf, 3, 4))) static void fig_title(fig *g, const report *r,
                                                            const char *title, ...)
{
    va_list ap;
    va_start(ap, title);
    fig_vtitle(g, r, title, ap);
    va_end(ap);
}

/* A figure of a run, in file STEM_runRUN.png, with its title (printf-style). */
__attribute__((format(printf, 5, 6))) static void fig_run(fig *g, const report *r,
                                                          const char *stem, long long run,
                                                          const char *title, ...)
{
    snprintf(g->file, sizeof g->file, "%s_run%lld.png", stem, run);
    va_list ap;
    va_start(ap, title);
    fig_vtitle(g, r, title, ap);
    va_end(ap);
}

/* Writes figure g (rc: the plot's result) with its caption, or says why it
 * is missing. */
static void figure(report *r, int rc, const fig *g, const char *caption)
{
    FILE *f = r->html;
    if (rc) {
        r->missing++;
        fprintf(f, "<p class=\"missing\">%s: not drawn (", g->title);
        esc(f, hs_last_error());
        fprintf(f, ")</p>\n");
        return;
    }
    r->figures++;
    fprintf(f, "<figure><img src=\"%s\" alt=\"", g->file);
    esc(f, g->title);
    fprintf(f, "\"><figcaption><b>");
    esc(f, g->title);
    fprintf(f, ".</b> %s</figcaption></figure>\n", caption);
}

/* The grid figure of metric id of a run (beside its control), captioned by
 * caption or, NULL, by the metric's descriptor. */
static void grid(report *r, long long run, hs_metric_id id, int control, const char *caption)
{
    const char *name = hs_metric(id)->name;
    if (!caption)
        caption = hs_metric(id)->caption;
    fig g;
    fig_run(&g, r, name, run, "%s%s, run %lld", name,
            control ? " beside its random-init control" : "", run);
    figure(r, hs_plot_scores(r->ix, r->db_path, name, run, g.path, control), &g, caption);
}

static void section_runs(report *r)
{
    FILE *f = r->html;
    hs_run_list l;
    fprintf(f, "<h2 id=\"runs\">Runs and their provenance</h2>\n<p>Each section shows the "
               "latest complete run of its kind%s; <b>left out</b> below marks the complete runs "
               "no section shows (<code>headscope report --runs ID,...</code> chooses).</p>\n"
               "<table><tr><th>run</th><th>kind</th><th>status</th><th>model</th><th>data</th>"
               "<th>started</th><th>finished</th><th>command line</th></tr>\n",
            r->n_runs ? " among those <code>--runs</code> names" : "");
    if (hs_index_runs(r->ix, NULL, NULL, &l))
        return;
    for (int i = 0; i < l.n; i++) {
        const hs_run_record *u = &l.runs[i];
        const char *cell[] = { u->kind,       u->status,      u->model_path, u->data_path,
                               u->started_at, u->finished_at, u->args };
        const char *sha[] = { NULL, NULL, u->model_sha256, u->data_sha256, NULL, NULL, NULL };
        int is_shown = 0;
        for (int k = 0; k < r->n_shown; k++)
            is_shown |= r->shown[k] == u->run_id;
        fprintf(f, "<tr><td>%lld%s</td>", (long long)u->run_id,
                !is_shown && u->status && !strcmp(u->status, "complete") ? "<br><b>left out</b>"
                                                                         : "");
        for (int c = 0; c < 7; c++) {
            fprintf(f, "<td%s>", c == 6 ? " class=\"args\"" : "");
            if (c == 6)
                command_line(f, cell[c]);
            else
                esc(f, cell[c]);
            if (sha[c]) {
                char prefix[13];
                snprintf(prefix, sizeof prefix, "%.12s", sha[c]);
                fprintf(f, "<br><small>sha256 ");
                esc(f, prefix);
                fprintf(f, "&hellip;</small>");
            }
            fprintf(f, "</td>");
        }
        fprintf(f, "</tr>\n");
    }
    hs_run_list_free(&l);
    fprintf(f, "</table>\n");
}

static void section_training(report *r)
{
    FILE *f = r->html;
    hs_run_list l = { 0 };
    fprintf(f, "<h2 id=\"training\">Training</h2>\n");
    if (hs_index_runs(r->ix, HS_KIND_TRAIN, "complete", &l))
        return;
    for (int i = l.n - 1, drawn = 0; i >= 0 && drawn < 3; i--) { /* the latest three */
        const long long run = l.runs[i].run_id;
        if (!chosen(r, run))
            continue;
        drawn++, shown(r, run);
        fig g;
        fig_run(&g, r, "training", run, "Training loss, run %lld", run);
        const int val = has_curve(r, run, HS_METRIC(VAL_LOSS)) > 0;
        char curves[128];
        snprintf(curves, sizeof curves, "%s%s%s", HS_METRIC(TRAIN_LOSS), val ? "," : "",
                 val ? HS_METRIC(VAL_LOSS) : "");
        figure(r,
               hs_plot_curves(r->ix, r->db_path, curves, run, g.path),
               &g,
               val ? "Mean next-token cross-entropy (nats) of each training batch against tokens "
                     "seen, and the validation loss on the held-out shard. The two losses are on "
                     "different data, so neither bounds the other: validation loss below training "
                     "loss means the validation data are easier to predict. In the demo every "
                     "training sequence carries a planted random segment that no model can "
                     "predict on its first occurrence, the validation sequences only half of "
                     "them, so training loss stays higher. A falling curve "
                     "shows the model fits its data; it does not say which heads do the work."
                   : "Mean next-token cross-entropy (nats) of each training batch against tokens "
                     "seen. A falling curve shows the model fits its data; it does not say which "
                     "heads do the work.");
    }
    if (!l.n)
        fprintf(f, "<p>No complete training run in this index.</p>\n");
    hs_run_list_free(&l);
}

/* The heads of an induction run's causal check, as "L0H1, L1H0". */
static void causal_heads(report *r, long long run, char *heads, size_t n)
{
    hs_metric_grid g;
    if (hs_index_metric_grid(r->ix, run, HS_METRIC(CAUSAL_TOP_K), &g))
        return;
    for (int c = 0; c < g.n_layer * g.n_head; c++) {
        size_t len = strlen(heads);
        if (g.present[c])
            snprintf(heads + len, n - len, "%sL%dH%d", len ? ", " : "", c / g.n_head, c % g.n_head);
    }
    hs_metric_grid_free(&g);
}

/* The claim: established or not, with the numbers of the causal check. */
static void induction_claim(report *r, long long run)
{
    FILE *f = r->html;
    double clean = 0, top = 0, top_se = 0, rnd = 0, rnd_sd = 0;
    metric(r, run, -1, -1, HS_METRIC(SECOND_HALF_LOSS), &clean, NULL);
    metric(r, run, -1, -1, HS_METRIC(CAUSAL_LOSS_DELTA_TOP_K), &top, &top_se);
    metric(r, run, -1, -1, HS_METRIC(CAUSAL_LOSS_DELTA_RANDOM_K), &rnd, &rnd_sd);
    double established = 0;
    metric(r, run, -1, -1, HS_METRIC(INDUCTION_ESTABLISHED), &established, NULL);
    const int beats = established == 1;
    char heads[512] = "";
    causal_heads(r, run, heads, sizeof heads);
    fprintf(f, "<p class=\"claim %s\">", beats ? "yes" : "no");
    if (beats)
        fprintf(f, "<b>Induction head%s by score and causal check: %s.</b> ", strchr(heads, ',') ? "s" : "",
                heads);
    else
        fprintf(f, "<b>Not established</b> for the top heads by induction score (%s): the claim "
                   "needs their ablation to raise the loss beyond the spread of random ablations "
                   "<i>and</i> their score to reach <code>--min-score</code> (default 0.4) and "
                   "exceed the random-init control's by two standard errors. ", heads);
    char a[32], b[32];
    fprintf(f, "Gating %s off %s the loss on the second half of repeated random sequences "
               "(%.3f nats clean): a change of %s &plusmn; %.3f nats (standard error over "
               "sequences); gating as many randomly drawn other heads off changes it by %s "
               "&plusmn; %.3f (mean &plusmn; standard deviation over the draws).</p>\n",
            heads, top > 0 ? "raises" : top < 0 ? "lowers" : "does not change", clean,
            signed_num(a, sizeof a, top, 3), top_se, signed_num(b, sizeof b, rnd, 3), rnd_sd);
}

/* The top heads by induction score, with what other runs say about them. */
static void induction_table(report *r, long long run, long long ablate_run, long long imp_run)
{
    FILE *f = r->html;
    int layer[5], head[5], n = top_heads(r, run, HS_METRIC(INDUCTION), 5, layer, head);
    fprintf(f, "<table><tr><th>head</th><th>induction</th><th>control</th><th>prev_token</th>"
               "<th>duplicate_token</th><th>copying</th><th>loss_delta_zero</th><th>importance</th>"
               "</tr>\n");
    for (int k = 0; k < n; k++) {
        int l = layer[k], h = head[k];
        double v, se;
        fprintf(f, "<tr><td>L%dH%d</td>", l, h);
        static const hs_metric_id m[] = { HS_M_INDUCTION, HS_M_INDUCTION_CONTROL,
                                          HS_M_PREV_TOKEN, HS_M_DUPLICATE_TOKEN, HS_M_COPYING };
        char num[96];
        for (int i = 0; i < 5; i++) {
            if (metric(r, run, l, h, hs_metric(m[i])->name, &v, &se) && i < 4)
                fprintf(f, "<td>%s</td>", pm(num, sizeof num, v, se, 3, 0));
            else if (i == 4 && metric(r, run, l, h, hs_metric(m[i])->name, &v, &se))
                fprintf(f, "<td>%.3f</td>", v);
            else
                fprintf(f, "<td>&ndash;</td>");
        }
        if (ablate_run && metric(r, ablate_run, l, h, HS_METRIC(LOSS_DELTA_ZERO), &v, &se))
            fprintf(f, "<td>%s</td>", pm(num, sizeof num, v, se, 4, 1));
        else
            fprintf(f, "<td>&ndash;</td>");
        if (imp_run && metric(r, imp_run, l, h, HS_METRIC(IMPORTANCE), &v, &se))
            fprintf(f, "<td>%.3f</td>", v);
        else
            fprintf(f, "<td>&ndash;</td>");
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n<p class=\"note\">loss_delta_zero and importance come from the latest "
               "ablate and importance runs of this index, which may use other data than the "
               "induction probe; check the runs table.</p>\n");
}

static void section_induction(report *r)
{
    const long long run = r->induction, ablate_run = r->ablate, imp_run = r->importance;
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"induction\">Induction heads: score and causal check</h2>\n");
    if (!run) {
        fprintf(f, "<p>No complete <code>headscope induction</code> run in this index.</p>\n");
        return;
    }
    double clean;
    if (!metric(r, run, -1, -1, HS_METRIC(SECOND_HALF_LOSS), &clean, NULL)) {
        /* an encoder's run: scores on r ++ r, no next-token loss to check them by */
        fprintf(f, "<p class=\"claim no\"><b>No causal check</b> in this run: its second-half "
                   "loss is a next-token loss, which an encoder does not predict, so the scores "
                   "below are patterns only.</p>\n");
        induction_table(r, run, ablate_run, imp_run);
        grid(r, run, HS_M_INDUCTION, 1, NULL);
        grid(r, run, HS_M_PREV_TOKEN, 1, NULL);
        grid(r, run, HS_M_DUPLICATE_TOKEN, 1, NULL);
        grid(r, run, HS_M_COPYING, 1, NULL);
        return;
    }
    induction_claim(r, run);
    fig g;
    fig_run(&g, r, "causal", run, "Causal check");
    figure(r, hs_plot_causal(r->ix, r->db_path, run, g.path), &g,
           "Increase of the second-half loss on r ++ r when the heads of highest induction score "
           "are gated off (red, &plusmn; 2 standard errors) against the same number of randomly "
           "chosen other heads (blue points, one per draw; mean &plusmn; standard deviation). "
           "The claim needs red above the blue spread (and the heads' induction score above "
           "its control). It shows these heads "
           "matter for copying repeated tokens on this synthetic probe, not what they do on "
           "natural text.");
    induction_table(r, run, ablate_run, imp_run);
    grid(r, run, HS_M_INDUCTION, 1, NULL);
    grid(r, run, HS_M_PREV_TOKEN, 1,
         "Mean attention to the previous position on the same sequences, beside the control. "
         "Previous-token heads in an earlier layer are what induction heads usually compose with.");
    grid(r, run, HS_M_DUPLICATE_TOKEN, 1, NULL);
    grid(r, run, HS_M_COPYING, 1, NULL);
}

/* The complete map file of the latest complete capture run that has one. */
static void latest_map_file(report *r, char *found, size_t n)
{
    hs_run_list l;
    if (hs_index_runs(r->ix, HS_KIND_CAPTURE, "complete", &l))
        return;
    for (int i = l.n - 1; i >= 0 && !*found; i--) {
        hs_artifact_list a;
        if (!chosen(r, l.runs[i].run_id))
            continue;
        if (hs_index_artifacts(r->ix, l.runs[i].run_id, &a))
            break;
        for (int k = 0; k < a.n && !*found; k++)
            if (a.a[k].complete == 1)
                snprintf(found, n, "%s", a.a[k].path), shown(r, l.runs[i].run_id);
        hs_artifact_list_free(&a);
    }
    hs_run_list_free(&l);
}

/* The interactive viewer of the map file (sequence seq, every captured
 * layer, the index's scores) in DIR/viewer, linked from the page. */
static void viewer_link(report *r, const char *maps, long long seq)
{
    char dir[1300], seqs[32];
    snprintf(dir, sizeof dir, "%s/viewer", r->dir);
    snprintf(seqs, sizeof seqs, "%lld", seq);
    hs_viewer_request rq = { .maps = maps, .dir = dir, .sequences = seqs, .ix = r->ix };
    hs_viewer_summary sum;
    if (hs_mkdirs(dir) || hs_viewer_write(&rq, &sum)) {
        fprintf(r->html, "<p class=\"missing\">Interactive viewer not written: ");
        esc(r->html, hs_last_error());
        fprintf(r->html, "</p>\n");
        r->missing++;
        return;
    }
    fprintf(r->html, "<p><a href=\"viewer/index.html#s=%lld\">Interactive viewer</a>: hover a token "
                     "to see where each head looks, every head of every captured layer, the maps "
                     "with zoom and the scores beside them (%.1f MB).</p>\n",
            seq, (sum.js_bytes + sum.data_bytes) / 1e6);
}

/* The probe the maps show: sequence seq of the map file as text (its
 * /token_text joined) and as its tokens one by one, or its token ids when
 * the capture knew no tokenizer. */
static void probe_text(FILE *f, const char *maps, long long seq)
{
    enum { MAX_SHOWN = 512 };
    hs_maps_reader *rd;
    if (hs_maps_open(&rd, maps))
        return;
    const hs_maps_info *in = hs_maps_get_info(rd);
    const int T = in->seq_len, shown = T < MAX_SHOWN ? T : MAX_SHOWN;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)T);
    char **text = in->has_token_text ? calloc((size_t)T, sizeof *text) : NULL;
    if (tok && seq < in->n_seq && !hs_maps_read_tokens(rd, seq, tok)) {
        if (text && !hs_maps_read_token_text(rd, seq, text)) {
            fprintf(f, "<p>The probe text (sequence %lld, %d tokens):</p>\n<pre style=\"white-space: pre-wrap\">",
                    seq, T);
            for (int t = 0; t < shown; t++)
                esc(f, text[t]);
            fprintf(f, "%s</pre>\n<p>Its tokens, as the maps' axes label them:</p>\n<p "
                    "style=\"line-height: 1.8\">", shown < T ? "…" : "");
            for (int t = 0; t < shown; t++) {
                char d[256];
                hs_token_display(d, sizeof d, text[t], 0, 0);
                fprintf(f, "%s<code>", t ? " " : "");
                esc(f, d);
                fprintf(f, "</code>");
            }
            fprintf(f, "%s</p>\n", shown < T ? " …" : "");
        } else {
            fprintf(f, "<p>The probe (sequence %lld) as token ids; the capture knew no tokenizer "
                    "(<code>capture --tokenizer</code> adds the token text):</p>\n<p "
                    "style=\"line-height: 1.8\">", seq);
            for (int t = 0; t < shown; t++)
                fprintf(f, "%s%d", t ? " " : "", (int)tok[t]);
            fprintf(f, "%s</p>\n", shown < T ? " …" : "");
        }
    }
    hs_maps_free_token_text(text, text ? T : 0);
    free(text);
    free(tok);
    hs_maps_close(rd);
}

static void section_maps(report *r)
{
    const char *maps = r->maps;
    const long long seq = r->seq;
    long long ind_run = r->induction, pat_run = r->patterns;
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"maps\">Attention maps</h2>\n");
    char found[1200] = "";
    if (!maps) {
        latest_map_file(r, found, sizeof found);
        maps = *found ? found : NULL;
    }
    if (!maps) {
        fprintf(f, "<p>No map file: run <code>headscope capture --db</code> on this index, or "
                   "pass <code>--maps FILE.h5</code>.</p>\n");
        return;
    }
    fprintf(f, "<p>From <code>");
    esc(f, maps);
    fprintf(f, "</code>, sequence %lld.</p>\n", seq);
    viewer_link(r, maps, seq);
    probe_text(f, maps, seq);
    /* the heads --heads names; else those the causal runs single out, then
     * those the scores do, each once, with the number (and its control)
     * that singled them out: a top head of a model at chance is no special
     * head, and its title says so by its numbers */
    int pick[24][2], n = 0, l, h;
    const char *why[24], *name[24];
    const char *const ind = HS_METRIC(INDUCTION), *prev = HS_METRIC(PREV_TOKEN),
                      *first = HS_METRIC(FIRST_TOKEN);
    long long from[24];
    for (int i = 0; i < r->n_heads; i++)
        pick[n][0] = r->heads[i][0], pick[n][1] = r->heads[i][1], from[n] = 0, name[n] = NULL,
        why[n++] = "--heads";
    static const struct {
        const char *kind;
        hs_metric_id metric;
        const char *why;
    } causal[] = { { HS_KIND_PATCH, HS_M_PATCH_Z, "largest patch_z" },
                   { HS_KIND_ATP, HS_M_ATP_Z, "largest atp_z" },
                   { HS_KIND_DLA, HS_M_DLA, "largest direct logit attribution" } };
    for (size_t i = 0; !r->n_heads && i < sizeof causal / sizeof causal[0]; i++) {
        const long long run = latest_run(r, causal[i].kind);
        if (run && top_heads(r, run, hs_metric(causal[i].metric)->name, 1, &l, &h))
            pick[n][0] = l, pick[n][1] = h, from[n] = run,
            name[n] = hs_metric(causal[i].metric)->name, why[n++] = causal[i].why;
    }
    if (r->n_heads) /* no score's heads beside the chosen */
        ind_run = pat_run = 0;
    if (ind_run && top_heads(r, ind_run, ind, 1, &l, &h))
        pick[n][0] = l, pick[n][1] = h, from[n] = ind_run, name[n] = ind,
        why[n++] = "highest induction score";
    if (ind_run && top_heads(r, ind_run, prev, 1, &l, &h))
        pick[n][0] = l, pick[n][1] = h, from[n] = ind_run, name[n] = prev,
        why[n++] = "highest previous-token score";
    if (pat_run && top_heads(r, pat_run, first, 1, &l, &h))
        pick[n][0] = l, pick[n][1] = h, from[n] = pat_run, name[n] = first,
        why[n++] = "most attention on the first token";
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= pick[j][0] == pick[i][0] && pick[j][1] == pick[i][1];
        if (dup)
            continue;
        char ctrl[48], cnum[48] = "";
        double v = NAN, cv;
        if (name[i])
            metric(r, from[i], pick[i][0], pick[i][1], name[i], &v, NULL);
        if (name[i] && hs_metric_control(name[i], ctrl, sizeof ctrl) &&
            metric(r, from[i], pick[i][0], pick[i][1], ctrl, &cv, NULL))
            snprintf(cnum, sizeof cnum, ", random-init control %.3f", cv);
        fig g;
        snprintf(g.file, sizeof g.file, "map_L%dH%d.png", pick[i][0], pick[i][1]);
        if (name[i])
            fig_title(&g, r, "Layer %d head %d (%s: %.3f%s)", pick[i][0], pick[i][1], why[i], v,
                      cnum);
        else
            fig_title(&g, r, "Layer %d head %d (chosen with --heads)", pick[i][0], pick[i][1]);
        figure(r, hs_plot_map(maps, pick[i][0], pick[i][1], seq, g.path, 0), &g,
               "Post-softmax attention of each query (row) over the keys (columns), with the "
               "tokens as labels (their ids when the capture knew no tokenizer). A map is one sequence's picture: attention mass is not "
               "causal influence, and one sequence is not a statistic.");
    }
    fig g = { .file = "maps_grid.png" };
    fig_title(&g, r, "Every head");
    figure(r, hs_plot_map(maps, 0, 0, seq, g.path, 1), &g,
           "All captured heads of the same sequence, layer by layer, on one colour scale (attention "
           "probability 0 .. 1). A grey panel is no head of the model (a layer with fewer "
           "heads) or one the capture left out, as it says.");
}

/* An encoder-decoder's ablation (SPEC §17): Michel et al.'s table, the
 * zero-ablation loss deltas by attention type. */
static void attn_table(report *r, long long run, const hs_attn_summary *t, int n)
{
    FILE *f = r->html;
    static const char *const names[][2] = { { "enc", "encoder self-attention" },
                                            { "dec", "decoder self-attention" },
                                            { "cross", "encoder–decoder (cross) attention" } };
    fprintf(f, "<h3>Zero ablation by attention type, run %lld</h3>\n<table>\n<tr><th>type</th>"
               "<th>heads</th><th>mean loss delta</th><th>largest (layer, head)</th></tr>\n",
            run);
    for (int i = 0; i < n; i++) {
        const char *name = t[i].attn;
        for (int k = 0; k < 3; k++)
            if (!strcmp(t[i].attn, names[k][0]))
                name = names[k][1];
        fprintf(f, "<tr><td>%s (<code>%s</code>)</td><td>%d</td><td>%.4f</td><td>%.4f (%d, %d)"
                   "</td></tr>\n", name, t[i].attn, t[i].n, t[i].mean, t[i].max, t[i].max_layer,
                t[i].max_head);
    }
    fprintf(f, "</table>\n<p class=\"note\">Each head's output z set to 0 on the pairs, one at a "
               "time; the loss delta is the pooled loss minus the clean one (nats), layers counted "
               "within their stack. The index holds every head's row with its standard error "
               "(<code>head_metrics</code>, column <code>attn</code>). Michel et al. found the "
               "cross-attention heads the least prunable in translation models: the type with the "
               "largest mean delta is the one this model leans on most, for these pairs "
               "alone.</p>\n");
}

static void section_ablation(report *r)
{
    const long long run = r->ablate, imp_run = r->importance;
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"ablation\">Ablation and importance</h2>\n");
    if (!run && !imp_run)
        fprintf(f, "<p>No complete ablate or importance run in this index.</p>\n");
    static const hs_metric_id kinds[] = { HS_M_LOSS_DELTA_ZERO, HS_M_LOSS_DELTA_MEAN,
                                          HS_M_LOSS_DELTA_RESAMPLE };
    hs_attn_summary by_type[3];
    int n_types = 0;
    if (run && hs_index_attn_summary(r->ix, run, hs_metric(kinds[0])->name, by_type, &n_types))
        n_types = 0;
    if (n_types)
        attn_table(r, run, by_type, n_types);
    for (int k = 0; run && !n_types && k < 3; k++)
        if (has_metric(r, run, hs_metric(kinds[k])->name))
            grid(r, run, kinds[k], 0, NULL);
    if (imp_run)
        grid(r, imp_run, HS_M_IMPORTANCE, 0, NULL);
}

/* The latest complete prune run with a pruning curve (--method l0's runs
 * have gates instead: l0_table); 0 when none. */
static long long latest_pruning(report *r)
{
    hs_run_list l = { 0 };
    long long run = 0;
    if (hs_index_runs(r->ix, HS_KIND_PRUNE, "complete", &l))
        return 0;
    for (int i = l.n - 1; i >= 0 && !run; i--)
        if (chosen(r, l.runs[i].run_id) && has_curve(r, l.runs[i].run_id, HS_METRIC(PRUNING)))
            run = l.runs[i].run_id;
    hs_run_list_free(&l);
    return shown(r, run);
}

/* prune --method l0's runs (SPEC §16), one lambda each: the heads their
 * gates leave open and the task's headline metric with the gates. */
static void l0_table(report *r)
{
    hs_run_list l = { 0 };
    FILE *f = r->html;
    if (hs_index_runs(r->ix, HS_KIND_PRUNE, "complete", &l))
        return;
    int rows = 0;
    for (int i = 0; i < l.n; i++) {
        hs_curve c;
        if (!chosen(r, l.runs[i].run_id) ||
            hs_index_curve_get(r->ix, l.runs[i].run_id, HS_METRIC(L0), &c))
            continue;
        if (c.n)
            shown(r, l.runs[i].run_id);
        if (c.n && !rows++)
            fprintf(f, "<h3>L0 head gates</h3>\n<table>\n<tr><th>run</th><th>heads open</th>"
                       "<th>headline metric with the gates</th></tr>\n");
        if (c.n)
            fprintf(f, "<tr><td>%lld</td><td>%.0f</td><td>%.4f</td></tr>\n",
                    (long long)l.runs[i].run_id, c.p[0].x, c.p[0].y);
        hs_curve_free(&c);
    }
    if (rows)
        fprintf(f, "</table>\n<p class=\"note\">%s Each run's lambda is its parameter "
                   "<code>lambda</code>; its gates are the metric <code>l0_gate</code>.</p>\n",
                hs_metric(HS_M_L0)->caption);
    hs_run_list_free(&l);
}

static void section_pruning(report *r)
{
    const long long run = r->prune;
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"prune\">Pruning</h2>\n");
    l0_table(r);
    if (!run) {
        fprintf(f, "<p>No complete prune run with a pruning curve in this index.</p>\n");
        return;
    }
    fig g;
    fig_run(&g, r, HS_METRIC(PRUNING), run, "Pruning curve");
    figure(r, hs_plot_curves(r->ix, r->db_path, HS_METRIC(PRUNING), run, g.path), &g,
           "Validation loss after each step of joint pruning (heads of lowest importance gated "
           "off, importance recomputed on the pruned model) against the fraction of heads pruned.");
    for (int m = 0; m < HS_TASK_N_METRICS; m++) { /* --task: Michel et al.'s figure */
        char name[64];
        hs_metric_name_of(name, sizeof name, HS_M_PRUNING_METRIC, hs_task_metric_name(m));
        if (!has_curve(r, run, name))
            continue;
        fig_run(&g, r, name, run, "%s against the fraction of heads pruned",
                hs_task_metric_name(m));
        figure(r, hs_plot_curves(r->ix, r->db_path, name, run, g.path), &g,
               hs_metric(HS_M_PRUNING_METRIC)->caption);
    }
    double dense, pruned;
    if (metric(r, run, -1, -1, HS_METRIC(FORWARD_MS_UNPRUNED), &dense, NULL) &&
        metric(r, run, -1, -1, HS_METRIC(FORWARD_MS_PRUNED), &pruned, NULL))
        fprintf(f, "<p>Forward of one batch, median of 7: %.2f ms unpruned, %.2f ms for the "
                   "written model (%.2f&times;). Gated heads in a dense model cost as much as "
                   "live ones; only structural pruning (<code>--structural</code>) removes work."
                   "</p>\n", dense, pruned, dense / pruned);
    grid(r, run, HS_M_PRUNED, 0, NULL);
}

/* The Jensen-Shannon matrix a patterns run recorded (its .csv artifact,
 * written by --js-out): the path as recorded, else, when that is relative
 * and missing, beside the index. path is "" when the run recorded none. */
static void js_artifact(report *r, long long run, char *path, size_t n)
{
    hs_artifact_list a;
    *path = 0;
    if (hs_index_artifacts(r->ix, run, &a))
        return;
    for (int k = 0; k < a.n && !*path; k++) {
        size_t len = a.a[k].path ? strlen(a.a[k].path) : 0;
        if (len > 4 && !strcmp(a.a[k].path + len - 4, ".csv"))
            snprintf(path, n, "%s", a.a[k].path);
    }
    hs_artifact_list_free(&a);
    const char *slash = strrchr(r->db_path, '/');
    if (*path && *path != '/' && access(path, R_OK) && slash) {
        char beside[1300];
        snprintf(beside, sizeof beside, "%.*s/%s", (int)(slash - r->db_path), r->db_path, path);
        if (!access(beside, R_OK) && strlen(beside) < n)
            memcpy(path, beside, strlen(beside) + 1);
    }
}

static void js_figure(report *r, long long run)
{
    char csv[1200];
    js_artifact(r, run, csv, sizeof csv);
    if (!*csv)
        return;
    fig g;
    fig_run(&g, r, "js", run, "Jensen-Shannon distance between heads, run %lld", run);
    figure(r, hs_plot_js(csv, g.path), &g,
           "Head-to-head Jensen-Shannon distance of the attention distributions (written by "
           "<code>patterns --js-out</code>), on the fixed scale 0 (identical) .. &radic;ln 2 "
           "&asymp; 0.83 (disjoint). Blocks of pale cells are heads that attend alike on this "
           "data; alike attention is not alike function.");
}

static void section_patterns(report *r)
{
    const long long run = r->patterns;
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"patterns\">Pattern statistics</h2>\n");
    if (!run) {
        fprintf(f, "<p>No complete patterns run in this index.</p>\n");
        return;
    }
    /* prev_token here is on the evaluation data, not induction's probe */
    /* and an encoder's cls, sep and punct, where the run recorded them */
    static const hs_metric_id m[] = { HS_M_ENTROPY, HS_M_FIRST_TOKEN, HS_M_PREV_TOKEN,
                                      HS_M_DISTANCE, HS_M_CLS, HS_M_SEP, HS_M_PUNCT };
    const char *c[] = { NULL, NULL, "Mean attention on the previous position, on the evaluation "
                        "data (not the random probe).", NULL, NULL, NULL, NULL };
    int controls = 0;
    for (int i = 0; i < 7; i++) {
        const int with = has_metric(r, run, hs_metric(hs_metric(m[i])->control)->name) > 0;
        controls += with;
        if (has_metric(r, run, hs_metric(m[i])->name))
            grid(r, run, m[i], with, c[i]);
    }
    js_figure(r, run);
    fprintf(f, "<p class=\"note\">Pattern statistics describe where attention goes on the "
               "evaluation data%s</p>\n",
            controls ? ", beside the same statistics of a randomly initialised model of the same "
                       "configuration on the same data."
                     : "; this run computed no random-init control (<code>patterns "
                       "--control</code> does).");
}

/* The heading "TITLE (run RUN)" of an experiment's section and its table's
 * header row (`columns`, <th> cells); table_end closes the table with its
 * note (NULL: none). */
static void table_begin(report *r, const char *id, const char *title, long long run,
                        const char *columns)
{
    fprintf(r->html, "<h2 id=\"%s\">%s (run %lld)</h2>\n<table><tr>%s</tr>\n", id, title, run,
            columns);
}

static void table_end(report *r, const char *note)
{
    fprintf(r->html, "</table>\n");
    if (note)
        fprintf(r->html, "<p class=\"note\">%s</p>\n", note);
}

/* The latest complete experiment run with model-wide rows PREFIX<N>, its
 * series in *s (freed by the caller) and its section begun (table_begin);
 * 0, and nothing written, when there is none. Head-count, gqa and windows
 * experiments are all runs of kind experiment, told apart only by their
 * rows, so "the latest experiment" would show one study's table with
 * another's rows. */
static long long experiment_begin(report *r, const char *prefix, hs_metric_series *s,
                                  const char *id, const char *title, const char *columns)
{
    hs_run_list l;
    long long run = 0;
    memset(s, 0, sizeof *s);
    if (hs_index_runs(r->ix, HS_KIND_EXPERIMENT, "complete", &l))
        return 0;
    for (int i = l.n - 1; i >= 0 && !run; i--) {
        if (!chosen(r, l.runs[i].run_id))
            continue;
        if (hs_index_metric_series(r->ix, l.runs[i].run_id, prefix, s))
            break;
        if (s->n)
            run = l.runs[i].run_id;
        else
            hs_metric_series_free(s);
    }
    hs_run_list_free(&l);
    if (run)
        table_begin(r, id, title, shown(r, run), columns);
    return run;
}

static void section_experiment(report *r)
{
    FILE *f = r->html;
    hs_metric_series s;
    char prefix[64];
    hs_metric_prefix(prefix, sizeof prefix, HS_M_VAL_LOSS_HEADS);
    const long long run = experiment_begin(
        r, prefix, &s, "head-count", "Head-count experiment",
        "<th>heads</th><th>validation loss</th><th>standard error over seeds</th><th>seeds</th>"
        "<th>forward ms</th>");
    if (!run)
        return;
    for (int i = 0; i < s.n; i++) {
        char name[48];
        double ms = NAN;
        hs_metric_name_of(name, sizeof name, HS_M_FORWARD_MS_HEADS, (int)s.key[i]);
        metric(r, run, -1, -1, name, &ms, NULL);
        fprintf(f, "<tr><td>%lld</td><td>%.4f</td><td>%.4f</td><td>%lld</td><td>%.2f</td></tr>\n",
                s.key[i], s.v[i].value, s.v[i].stderr_value, s.v[i].n, ms);
    }
    hs_metric_series_free(&s);
    table_end(r, "Same architecture, shared initial weights, equal step budgets. Differences "
                 "smaller than a few standard errors are noise; the ordering holds for this data "
                 "and budget only.");
}

/* One row of the GQA table: a model's validation loss right after
 * conversion (metric name) and after uptraining (up). */
static void gqa_row(report *r, long long run, const char *label, const char *name,
                    const char *up)
{
    double uv = NAN, use = NAN;
    hs_metric_value m = { NAN, NAN, 0 };
    int found;
    hs_index_metric_get(r->ix, run, -1, -1, name, &m, &found);
    metric(r, run, -1, -1, up, &uv, &use);
    fprintf(r->html, "<tr><td>%s</td><td>%.4f &plusmn; %.4f</td><td>%.4f &plusmn; %.4f</td>"
                     "<td>%lld</td></tr>\n", label, m.value, m.stderr_value, uv, use, m.n);
}

/* The uptraining study (experiment gqa, Ainslie et al. 2023): the MHA
 * model and each conversion to G key/value heads, right after conversion
 * and after uptraining. */
static void section_gqa(report *r)
{
    hs_metric_series s;
    char prefix[64];
    hs_metric_prefix(prefix, sizeof prefix, HS_M_VAL_LOSS_KV_HEADS);
    const long long run = experiment_begin(
        r, prefix, &s, "gqa", "Grouped-query uptraining",
        "<th>key/value heads</th><th>validation loss after conversion</th><th>after uptraining"
        "</th><th>sequences</th>");
    if (!run)
        return;
    gqa_row(r, run, "all (MHA)", HS_METRIC(VAL_LOSS_MHA), HS_METRIC(VAL_LOSS_MHA_UPTRAINED));
    for (int i = s.n - 1; i >= 0; i--) {
        char label[32], name[64], up[80];
        snprintf(label, sizeof label, "%lld", s.key[i]);
        hs_metric_name_of(name, sizeof name, HS_M_VAL_LOSS_KV_HEADS, (int)s.key[i]);
        hs_metric_name_of(up, sizeof up, HS_M_VAL_LOSS_KV_HEADS_UPTRAINED, (int)s.key[i]);
        gqa_row(r, run, label, name, up);
    }
    hs_metric_series_free(&s);
    table_end(r, "Each key/value head of a conversion is the mean of its group's heads; "
                 "uptraining continues each model for the same few steps, the MHA row's being the "
                 "control. Standard errors are over validation sequences; differences smaller "
                 "than a few of them are noise.");
}

/* The local/global experiment (experiment windows): its table and a figure
 * of the validation loss of each arm with +- 2 standard errors over seeds,
 * the kv bytes per token and forward latency in the axis labels. */
static void section_windows(report *r)
{
    const char *const *arms = HS_WINDOWS_ARM;
    int64_t run = 0;
    char first[64];
    hs_metric_name_of(first, sizeof first, HS_M_VAL_LOSS_WINDOWS, arms[0]);
    if (hs_index_latest_with_metric(r->ix, first, &run) || !run || !chosen(r, run))
        return;
    shown(r, run);
    FILE *f = r->html;
    char dir[600] = "", data[1200], assign[2600], qdata[1300];
    fig g;
    fig_run(&g, r, "windows", run, "Local/global heads");
    int rc = hs_plot_tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/windows.txt", dir);
    FILE *d = rc ? NULL : hs_plot_file(data);
    table_begin(r, "windows", "Local/global heads", run,
                "<th>heads</th><th>validation loss</th><th>standard error over seeds</th>"
                "<th>seeds</th><th>kv bytes per token</th><th>forward ms</th>");
    for (int a = 0; a < HS_WINDOWS_ARMS; a++) {
        char name[64];
        double loss = NAN, se = NAN, kv = NAN, ms = NAN;
        hs_metric_value v = { 0 };
        int found = 0;
        hs_metric_name_of(name, sizeof name, HS_M_VAL_LOSS_WINDOWS, arms[a]);
        hs_index_metric_get(r->ix, run, -1, -1, name, &v, &found);
        if (found)
            loss = v.value, se = v.stderr_value;
        hs_metric_name_of(name, sizeof name, HS_M_KV_BYTES_WINDOWS, arms[a]);
        metric(r, run, -1, -1, name, &kv, NULL);
        hs_metric_name_of(name, sizeof name, HS_M_FORWARD_MS_WINDOWS, arms[a]);
        metric(r, run, -1, -1, name, &ms, NULL);
        fprintf(f, "<tr><td>%s</td><td>%.4f</td><td>%.4f</td><td>%lld</td><td>%.0f</td>"
                   "<td>%.2f</td></tr>\n", arms[a], loss, se, found ? v.n : 0, kv, ms);
        if (d)
            fprintf(d, "%d %.9g %.9g \"%s\\n%.0f B/token\\n%.2f ms\"\n", a, loss, se, arms[a], kv,
                    ms);
    }
    table_end(r, NULL);
    if (!rc && (!d || fclose(d)))
        rc = hs_fail(HS_EIO, "%s: cannot write", data);
    hs_gp_quote(qdata, sizeof qdata, data);
    snprintf(assign, sizeof assign, "datafile=%s; plottitle='local/global heads, run %lld'",
             qdata, (long long)run);
    if (!rc)
        rc = hs_gnuplot("plot_windows.gp", assign, g.path);
    hs_plot_tmpdir_remove(dir);
    figure(r, rc, &g,
           "Validation loss of the same heads all global, the first half of each layer's heads "
           "local, and all local (sliding window W), from shared initial weights per seed, with "
           "± 2 standard errors over seeds; below each arm its KV-cache bytes per token at the "
           "training context and its forward latency. Overlapping bars show no difference; the "
           "ordering holds for this data, budget and W only.");
}

/* ---- heads at long context (SPEC §18) ---------------------------------------------- */

/* A model-wide row of a run, or NaN. */
static double model_value(report *r, long long run, hs_metric_id id, double *se)
{
    double v = NAN;
    if (!metric(r, run, -1, -1, hs_metric(id)->name, &v, se) && se)
        *se = NAN;
    return v;
}

/* The retrieval runs of one model and haystack (those of `like`), shown, as
 * points of KV bytes against needle accuracy and the haystack's loss: the
 * curve a study of KV plans draws as the kept fraction shrinks. */
static void kv_budget_curve(report *r, const hs_run_record *like)
{
    hs_run_list l = { 0 };
    if (hs_index_runs(r->ix, HS_KIND_RETRIEVAL, "complete", &l))
        return;
    FILE *f = r->html;
    char dir[600] = "", data[1200], assign[2600], qdata[1300];
    int rc = hs_plot_tmpdir(dir, sizeof dir), points = 0;
    snprintf(data, sizeof data, "%s/kv.txt", dir);
    FILE *d = rc ? NULL : hs_plot_file(data);
    fprintf(f, "<table><tr><th>run</th><th>KV cache</th><th>needle accuracy</th>"
               "<th>haystack loss (nats, one sequence)</th></tr>\n");
    for (int i = 0; i < l.n; i++) {
        const hs_run_record *u = &l.runs[i];
        double acc_se;
        const double kv = model_value(r, u->run_id, HS_M_KV_CACHE_BYTES, NULL);
        const double acc = model_value(r, u->run_id, HS_M_NEEDLE_ACCURACY, &acc_se);
        const double loss = model_value(r, u->run_id, HS_M_HAYSTACK_LOSS, NULL);
        if (!chosen(r, u->run_id) || !(kv > 0) || !u->model_sha256 || !like->model_sha256 ||
            strcmp(u->model_sha256, like->model_sha256) || !u->data_sha256 || !like->data_sha256 ||
            strcmp(u->data_sha256, like->data_sha256))
            continue;
        shown(r, u->run_id), points++;
        fprintf(f, "<tr><td>%lld</td><td>%.2f MiB</td><td>%.3f ± %.3f</td><td>%.4f</td></tr>\n",
                (long long)u->run_id, kv / 1048576, acc, acc_se, loss);
        if (d)
            fprintf(d, "%.9g %.9g %.9g %.9g\n", kv / 1048576, acc, acc_se, loss);
    }
    hs_run_list_free(&l);
    fprintf(f, "</table>\n");
    if (!rc && (!d || fclose(d)))
        rc = hs_fail(HS_EIO, "%s: cannot write", data);
    if (points >= 2) {
        fig g;
        fig_title(&g, r, "Needle accuracy and loss against KV bytes");
        snprintf(g.file, sizeof g.file, "kv_budget.png");
        path_in(g.path, sizeof g.path, r, g.file);
        hs_gp_quote(qdata, sizeof qdata, data);
        snprintf(assign, sizeof assign, "datafile=%s; plottitle='needle accuracy and loss "
                 "against KV bytes'", qdata);
        if (!rc)
            rc = hs_gnuplot("plot_kv_budget.gp", assign, g.path);
        figure(r, rc, &g,
               "Each retrieval run of this model and haystack: the needle accuracy (left, ± 2 "
               "standard errors, binomial over the grid's runs) and the haystack's next-token "
               "loss (right) against the decoder's KV cache at the longest length, as KV plans "
               "keep fewer heads full (<code>kv-plan --keep-fraction</code>, then "
               "<code>retrieval --kv-plan</code>). A plan that keeps the accuracy here keeps it "
               "for these needles, lengths and depths only.");
    }
    hs_plot_tmpdir_remove(dir);
}

static void section_long_context(report *r)
{
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"long-context\">Heads at long context</h2>\n");
    /* the scores of the latest complete run with the largest cache (no plan, or the widest) */
    hs_run_list l = { 0 };
    hs_run_record like = { 0 };
    long long run = 0;
    double best = -1;
    if (!hs_index_runs(r->ix, HS_KIND_RETRIEVAL, "complete", &l))
        for (int i = 0; i < l.n; i++) {
            const double kv = model_value(r, l.runs[i].run_id, HS_M_KV_CACHE_BYTES, NULL);
            if (chosen(r, l.runs[i].run_id) && kv >= best)
                best = kv, run = l.runs[i].run_id, like = l.runs[i];
        }
    if (run) {
        shown(r, run);
        grid(r, run, HS_M_RETRIEVAL, 0, NULL);
        double se, top_se, rand_se;
        const double acc = model_value(r, run, HS_M_NEEDLE_ACCURACY, &se);
        const double top = model_value(r, run, HS_M_NEEDLE_ACCURACY_MASKED_TOP, &top_se);
        const double rnd = model_value(r, run, HS_M_NEEDLE_ACCURACY_MASKED_RANDOM, &rand_se);
        fprintf(f, "<p>Run %lld: needle accuracy %.3f ± %.3f", run, acc, se);
        if (isfinite(top))
            fprintf(f, "; with the top heads masked %.3f ± %.3f, with as many random other heads "
                       "masked (the control) %.3f ± %.3f", top, top_se, rnd, rand_se);
        fprintf(f, ".%s</p>\n",
                !(acc > 0) ? " <b>No run succeeded: every retrieval score is 0 and ranks "
                             "nothing.</b>"
                : !isfinite(top) ? " No causal check was run (<code>retrieval --mask-top "
                                   "K</code>): a high score shows where the copy happens, not "
                                   "that the head is needed."
                                 : "");
        kv_budget_curve(r, &like);
    } else
        fprintf(f, "<p>No complete retrieval run in this index.</p>\n");
    hs_run_list_free(&l);
    const long long pat = r->patterns;
    if (pat && has_metric(r, pat, hs_metric(HS_M_SINK)->name)) {
        const int ctl = has_metric(r, pat, hs_metric(HS_M_SINK_CONTROL)->name) > 0;
        grid(r, pat, HS_M_SINK, ctl, NULL);
        fprintf(f, "<p>Sink rate %.3f (run %lld)", model_value(r, pat, HS_M_SINK_RATE, NULL), pat);
        if (ctl)
            fprintf(f, "; random-init control %.3f",
                    model_value(r, pat, HS_M_SINK_RATE_CONTROL, NULL));
        fprintf(f, ": the share of heads whose mean attention on position 0 exceeds the run's "
                   "threshold.</p>\n");
    }
}

/* ---- attention-output SAEs (SPEC §19) ------------------------------------------------ */

/* Metric's value per feature (head -1; H 0) or per (feature, head) of run
 * into v (d x H; left as it was where absent); v NULL: none. The largest
 * feature id + 1 into *n_features (NULL: not asked). */
static void feature_rows(report *r, long long run, hs_metric_id id, double *v, int d, int H,
                         int *n_features)
{
    hs_feature_row *rows;
    int n;
    if (hs_index_feature_metric(r->ix, run, hs_metric(id)->name, &rows, &n))
        return;
    for (int i = 0; i < n; i++) {
        const hs_feature_row *x = &rows[i];
        if (n_features && x->feature + 1 > *n_features)
            *n_features = x->feature + 1;
        if (!v || x->feature < 0 || x->feature >= d)
            continue;
        if (H && x->head >= 0 && x->head < H)
            v[(size_t)x->feature * H + x->head] = x->value;
        else if (!H && x->head < 0)
            v[x->feature] = x->value;
    }
    free(rows);
}

/* sae-eval's numbers of the latest run, one sentence. */
static void sae_eval_line(report *r)
{
    const long long run = latest_run(r, HS_KIND_SAE_EVAL);
    FILE *f = r->html;
    if (!run) {
        fprintf(f, "<p>No sae-eval run: the SAE's reconstruction is not measured here.</p>\n");
        return;
    }
    static const hs_metric_id m[] = { HS_M_SAE_L0, HS_M_EXPLAINED_VARIANCE, HS_M_MSE,
                                      HS_M_CE_LOSS_SCORE, HS_M_LOSS_CLEAN, HS_M_LOSS_SAE,
                                      HS_M_LOSS_ZERO };
    double v[7];
    for (int i = 0; i < 7; i++) {
        v[i] = NAN;
        hs_feature_row *rows;
        int n;
        if (!hs_index_feature_metric(r->ix, run, hs_metric(m[i])->name, &rows, &n)) {
            for (int k = 0; k < n; k++)
                if (rows[k].feature < 0)
                    v[i] = rows[k].value;
            free(rows);
        }
    }
    fprintf(f, "<p>sae-eval (run %lld): %.2f active features a token, explained variance "
               "%.4f, MSE %.4g, CE-loss score %.4f (loss %.4f clean, %.4f with the "
               "reconstruction, %.4f with the hook zeroed).%s</p>\n", run, v[0], v[1], v[2],
            v[3], v[4], v[5], v[6],
            fabs(v[6] - v[4]) < 0.01 ? " Zeroing the hook barely moves the loss: the score is a "
                                       "ratio of small differences." : "");
}

/* qsort's order of feature ids by frequency, descending (lower id on ties). */
static const double *by_frequency;
static int more_frequent(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    const double fx = by_frequency[x] > 0 ? by_frequency[x] : 0;
    const double fy = by_frequency[y] > 0 ? by_frequency[y] : 0;
    return fx > fy ? -1 : fx < fy ? 1 : x - y;
}

static void section_features(report *r)
{
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"features\">SAE features</h2>\n");
    const long long run = latest_run(r, HS_KIND_FEATURES);
    if (!run) {
        fprintf(f, "<p>No complete features run in this index.</p>\n");
        return;
    }
    int d = 0, H = 0;
    feature_rows(r, run, HS_M_FREQUENCY, NULL, 0, 0, &d);
    hs_feature_row *rows;
    int n;
    if (!hs_index_feature_metric(r->ix, run, hs_metric(HS_M_HEAD_SHARE)->name, &rows, &n)) {
        for (int i = 0; i < n; i++)
            H = rows[i].head + 1 > H ? rows[i].head + 1 : H;
        free(rows);
    }
    double *freq = calloc((size_t)d + 1, sizeof *freq), *mean = calloc((size_t)d + 1, sizeof *mean);
    double *share = H ? calloc((size_t)d * H + 1, sizeof *share) : NULL;
    int *order = calloc((size_t)d + 1, sizeof *order);
    if (!freq || !mean || !order || (H && !share)) {
        fprintf(f, "<p class=\"missing\">Out of memory for the features.</p>\n");
        free(freq), free(mean), free(share), free(order);
        return;
    }
    for (int i = 0; i < d; i++)
        freq[i] = mean[i] = NAN, order[i] = i;
    feature_rows(r, run, HS_M_FREQUENCY, freq, d, 0, NULL);
    feature_rows(r, run, HS_M_MEAN_ACT, mean, d, 0, NULL);
    if (share)
        feature_rows(r, run, HS_M_HEAD_SHARE, share, d, H, NULL);
    int alive = 0, led[HS_MAX_HEADS] = { 0 };
    for (int i = 0; i < d; i++) {
        alive += freq[i] > 0;
        int best = 0;
        for (int h = 1; h < H; h++)
            best = share[(size_t)i * H + h] > share[(size_t)i * H + best] ? h : best;
        if (H && freq[i] > 0)
            led[best]++;
    }
    by_frequency = freq;
    qsort(order, (size_t)d, sizeof *order, more_frequent);
    fprintf(f, "<p>Run %lld: %d features, %d active on the data at least once.</p>\n", run, d,
            alive);
    sae_eval_line(r);
    fprintf(f, "<table><tr><th>feature</th><th>frequency</th><th>mean activation</th>%s</tr>\n",
            H ? "<th>largest head share</th>" : "");
    for (int i = 0; i < d && i < 10 && freq[order[i]] > 0; i++) {
        const int k = order[i];
        fprintf(f, "<tr><td>%d</td><td>%.4f</td><td>%.4f</td>", k, freq[k], mean[k]);
        int best = 0;
        for (int h = 1; h < H; h++)
            best = share[(size_t)k * H + h] > share[(size_t)k * H + best] ? h : best;
        if (H)
            fprintf(f, "<td>head %d: %.3f</td>", best, share[(size_t)k * H + best]);
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n");
    if (H) {
        fprintf(f, "<p>Active features by the head with the largest share (uniform: %.3f):", 1.0 / H);
        for (int h = 0; h < H; h++)
            fprintf(f, " head %d: %d%s", h, led[h], h + 1 < H ? "," : ".");
        fprintf(f, "</p>\n");
    }
    fprintf(f, "<p class=\"note\">Head share is the share of a feature's decoder norm in each "
               "head's block: a property of the SAE's weights, not a causal test. The direct "
               "feature attribution of each top example (<code>feature_dfa</code>) and the "
               "feature page of <code>headscope view</code> show where it reads from.</p>\n");
    free(freq), free(mean), free(share), free(order);
}

/* ---- causal interventions (SPEC §11) ------------------------------------------------ */

/* Position metric rows of a run (a patching sweep of the residual stream). */
static int has_positions(report *r, long long run, const char *name)
{
    hs_position_grid g;
    if (hs_index_position_grid(r->ix, run, name, &g))
        return 0;
    int n = g.count;
    hs_position_grid_free(&g);
    return n;
}

/* SPEC §21: whether run's normalised numbers rest on a gap clean -
 * corrupt that is at least two of its standard errors from 0. */
static void premise_note(report *r, long long run)
{
    double ok, gap, se, unused;
    if (!metric(r, run, -1, -1, HS_METRIC(PREMISE_OK), &ok, &unused) ||
        !metric(r, run, -1, -1, HS_METRIC(LOGIT_DIFF_GAP), &gap, &se))
        return;
    char g[32];
    if (ok == 0)
        fprintf(r->html, "<p class=\"claim no\"><b>Not established (run %lld).</b> The gap "
                "between the clean and corrupt logit differences, %s &plusmn; %.3f, is within "
                "two standard errors of 0: the model does not tell these prompts apart, and "
                "every normalised number of this run divides by noise (it was recorded with "
                "<code>--allow-weak-premise</code>).</p>\n",
                run, signed_num(g, sizeof g, gap, 3), se);
    else
        fprintf(r->html, "<p>Run %lld's gap clean &minus; corrupt, %s &plusmn; %.3f, is at least "
                "two standard errors from 0, the premise of its normalised numbers; their "
                "standard errors include the gap's own uncertainty (the delta method).</p>\n",
                run, signed_num(g, sizeof g, gap, 3), se);
}

static void causal_patch(report *r, long long run)
{
    FILE *f = r->html;
    double clean, corrupt, se_c, se_k;
    if (metric(r, run, -1, -1, HS_METRIC(LOGIT_DIFF_CLEAN), &clean, &se_c) &&
        metric(r, run, -1, -1, HS_METRIC(LOGIT_DIFF_CORRUPT), &corrupt, &se_k)) {
        char a[32], b[32];
        fprintf(f, "<p>Run %lld: logit difference %s &plusmn; %.3f on the clean prompts, %s "
                   "&plusmn; %.3f on the corrupted ones (standard errors over prompts). Each "
                   "value below is (LD patched &minus; LD corrupt) / (LD clean &minus; LD "
                   "corrupt): 1 restores the clean answer, 0 changes nothing.</p>\n",
                run, signed_num(a, sizeof a, clean, 3), se_c, signed_num(b, sizeof b, corrupt, 3),
                se_k);
    }
    premise_note(r, run);
    static const hs_metric_id pos[] = { HS_M_PATCH_RESID_PRE, HS_M_PATCH_ATTN_OUT,
                                        HS_M_PATCH_MLP_OUT };
    for (int i = 0; i < 3; i++) {
        const char *name = hs_metric(pos[i])->name;
        if (!has_positions(r, run, name))
            continue;
        char caption[600];
        fig g;
        fig_run(&g, r, name, run, "%s, run %lld", name, run);
        snprintf(caption, sizeof caption,
                 "Activation patching of %s at one position (columns: the tokens of the first "
                 "clean prompt of that length), on a scale symmetric about 0. A bright cell says "
                 "the information that separates clean from corrupt passes there; it says "
                 "nothing about positions where clean and corrupt agree.", hs_metric(pos[i])->label);
        figure(r, hs_plot_patch(r->ix, r->db_path, name, run, g.path), &g, caption);
    }
    if (has_metric(r, run, HS_METRIC(PATCH_Z)))
        grid(r, run, HS_M_PATCH_Z, 0, NULL);
    if (has_metric(r, run, HS_METRIC(PATCH_PATTERN)))
        grid(r, run, HS_M_PATCH_PATTERN, 0, NULL);
}

static void causal_dla(report *r, long long run)
{
    FILE *f = r->html;
    int layer[1], head[1];
    double v, se, ld, ld_se;
    if (top_heads(r, run, HS_METRIC(DLA), 1, layer, head) &&
        metric(r, run, layer[0], head[0], HS_METRIC(DLA), &v, &se) &&
        metric(r, run, -1, -1, HS_METRIC(LOGIT_DIFF_CLEAN), &ld, &ld_se)) {
        char a[32], b[32];
        fprintf(f, "<p>Run %lld: the head writing most toward the answer is <b>L%dH%d</b>, "
                   "%s &plusmn; %.3f of a clean logit difference of %s &plusmn; %.3f "
                   "(standard errors over prompts).</p>\n",
                run, layer[0], head[0], signed_num(a, sizeof a, v, 3), se,
                signed_num(b, sizeof b, ld, 3), ld_se);
    }
    fig g;
    fig_run(&g, r, HS_METRIC(DLA), run, "Direct logit attribution");
    figure(r, hs_plot_dla(r->ix, r->db_path, run, g.path), &g,
           "Each head's output, each MLP's and the model-wide parts (embeddings, biases) at the "
           "last position, through the final norm with its scale frozen, dotted with "
           "u[answer] &minus; u[wrong]; sorted, &plusmn; 2 standard errors. The parts sum to the "
           "logit difference. Direct effects only: a head that acts through later heads shows "
           "here as small.");
    grid(r, run, HS_M_DLA, 0, NULL);
}

/* "L0H3 → L1H0 0.373, ..." : the three highest pairs of a composition kind,
 * and the control's mean when the run has one. */
static void composition_top(report *r, long long run, const char *kind, const char *name)
{
    hs_pair_list l, c;
    char cm[64];
    hs_metric_control(kind, cm, sizeof cm);
    if (hs_index_pair_metrics(r->ix, run, kind, &l))
        return;
    if (hs_index_pair_metrics(r->ix, run, cm, &c))
        c.n = 0, c.p = NULL;
    int best[3] = { -1, -1, -1 };
    for (int i = 0; i < l.n; i++)
        for (int k = 0; k < 3; k++)
            if (best[k] < 0 || l.p[i].value > l.p[best[k]].value) {
                for (int j = 2; j > k; j--)
                    best[j] = best[j - 1];
                best[k] = i;
                break;
            }
    fprintf(r->html, "<li>%s: ", name);
    for (int k = 0; k < 3 && best[k] >= 0; k++) {
        const hs_pair_value *v = &l.p[best[k]];
        fprintf(r->html, "%sL%dH%d &rarr; L%dH%d %.3f", k ? ", " : "", v->layer_a, v->head_a,
                v->layer_b, v->head_b, v->value);
    }
    double mean = 0;
    for (int i = 0; i < c.n; i++)
        mean += c.p[i].value / c.n;
    if (c.n)
        fprintf(r->html, " (random-init control: mean %.3f over %d pairs)", mean, c.n);
    fprintf(r->html, "</li>\n");
    hs_pair_list_free(&l);
    hs_pair_list_free(&c);
}

static void causal_composition(report *r, long long run)
{
    fprintf(r->html, "<p>Run %lld, the highest composition scores:</p>\n<ul>\n", run);
    composition_top(r, run, HS_METRIC(Q_COMPOSITION), "Q-composition");
    composition_top(r, run, HS_METRIC(K_COMPOSITION), "K-composition");
    composition_top(r, run, HS_METRIC(V_COMPOSITION), "V-composition");
    fprintf(r->html, "</ul>\n");
    static const hs_metric_id kinds[] = { HS_M_Q_COMPOSITION, HS_M_K_COMPOSITION,
                                          HS_M_V_COMPOSITION };
    for (int k = 0; k < 3; k++) {
        char caption[600];
        fig g;
        const char *name = hs_metric(kinds[k])->name;
        fig_run(&g, r, name, run, "%s, run %lld", name, run);
        snprintf(caption, sizeof caption,
                 "How much of what each earlier head writes lands in the subspace a later head "
                 "reads its %s from (Elhage et al. 2021; TransformerLens's definition, norms "
                 "ignored), on the fixed scale 0 .. 1, beside a randomly initialised model of the "
                 "same configuration: only scores well above the control's mean mean anything. "
                 "A property of the weights, not of any input.", hs_metric(kinds[k])->label);
        figure(r, hs_plot_composition(r->ix, r->db_path, name, run, g.path), &g, caption);
    }
}

static void section_causal(report *r)
{
    FILE *f = r->html;
    const long long patch = latest_run(r, HS_KIND_PATCH), path = latest_run(r, HS_KIND_PATH_PATCH),
                    dla = latest_run(r, HS_KIND_DLA), lens = latest_run(r, HS_KIND_LOGIT_LENS),
                    comp = latest_run(r, HS_KIND_COMPOSITION);
    fprintf(f, "<h2 id=\"causal\">Causal interventions: patching, attribution, composition</h2>\n");
    if (!patch && !path && !dla && !lens && !comp) {
        fprintf(f, "<p>No complete patch, path-patch, dla, logit-lens or composition run in this "
                   "index.</p>\n");
        return;
    }
    if (patch)
        causal_patch(r, patch);
    if (path) {
        premise_note(r, path);
        grid(r, path, HS_M_PATH_PATCH, 0, NULL);
    }
    if (dla)
        causal_dla(r, dla);
    if (lens) {
        fig g;
        fig_run(&g, r, "lens", lens, "Logit lens");
        figure(r, hs_plot_lens(r->ix, r->db_path, lens, g.path), &g,
               "The residual stream entering each layer decoded through the final norm and the "
               "unembedding (&plusmn; 2 standard errors); the last point is the model's own "
               "output. Early layers are read in a basis trained for the last one, so a flat "
               "start says little.");
    }
    if (comp)
        causal_composition(r, comp);
}

/* ---- attribution patching and circuits (SPEC §15) ------------------------------------ */

static int by_magnitude(const void *a, const void *b)
{
    const hs_edge_value *x = a, *y = b;
    const double ax = fabs(x->v.value), ay = fabs(y->v.value);
    if (ax != ay)
        return ax > ay ? -1 : 1;
    const int s = strcmp(x->sender, y->sender);
    return s ? s : strcmp(x->receiver, y->receiver);
}

static void atp_figures(report *r, long long run)
{
    FILE *f = r->html;
    double clean, corrupt, se_c, se_k;
    if (metric(r, run, -1, -1, HS_METRIC(LOGIT_DIFF_CLEAN), &clean, &se_c) &&
        metric(r, run, -1, -1, HS_METRIC(LOGIT_DIFF_CORRUPT), &corrupt, &se_k)) {
        char a[32], b[32];
        fprintf(f, "<p>Attribution run %lld: logit difference %s &plusmn; %.3f clean, %s &plusmn; "
                   "%.3f corrupt. Each estimate is the first-order (gradient) approximation of "
                   "the activation patch of the same name, on the scale of patching: the fraction "
                   "of LD clean &minus; LD corrupt.</p>\n",
                run, signed_num(a, sizeof a, clean, 3), se_c, signed_num(b, sizeof b, corrupt, 3),
                se_k);
    }
    premise_note(r, run);
    static const hs_metric_id grids[] = { HS_M_ATP_Z, HS_M_ATP_STAR_Z, HS_M_ATP_PATTERN };
    for (size_t i = 0; i < sizeof grids / sizeof grids[0]; i++)
        if (has_metric(r, run, hs_metric(grids[i])->name))
            grid(r, run, grids[i], 0, NULL);
    if (has_metric(r, run, HS_METRIC(PATCH_Z)) >= 2) {
        fig g;
        fig_run(&g, r, "atp_verify", run, "AtP against exact patching, run %lld", run);
        figure(r, hs_plot_atp(r->ix, r->db_path, NULL, run, g.path), &g,
               "Each head that <code>--verify</code> patched exactly: its patch_z against its "
               "atp_z, with the diagonal where the estimate is exact and the rank correlation. "
               "Points off the diagonal are where attention saturates or a norm bends the path "
               "between the head and the logits.");
    }
}

static void circuit_figures(report *r, long long run)
{
    FILE *f = r->html;
    const char *name = HS_METRIC(EAP_IG);
    hs_edge_list l = { 0 };
    if (hs_index_edge_metrics(r->ix, run, name, &l) || !l.n) {
        hs_edge_list_free(&l);
        name = HS_METRIC(EAP);
        if (hs_index_edge_metrics(r->ix, run, name, &l))
            return;
    }
    qsort(l.e, (size_t)l.n, sizeof *l.e, by_magnitude);
    premise_note(r, run);
    fprintf(f, "<p>Circuit run %lld: %s of %d edges. The largest by |score| (the change of the "
               "logit difference their sender's corrupt value would cause through that receiver "
               "alone, first order; negative: the edge carries the clean answer):</p>\n"
               "<table><tr><th>sender</th><th>receiver</th><th>%s</th><th>&plusmn; se</th></tr>\n",
            run, name, l.n, name);
    for (int i = 0; i < l.n && i < 10; i++) {
        char a[32];
        fprintf(f, "<tr><td>");
        esc(f, l.e[i].sender);
        fprintf(f, "</td><td>");
        esc(f, l.e[i].receiver);
        fprintf(f, "</td><td>%s</td><td>%.4f</td></tr>\n",
                signed_num(a, sizeof a, l.e[i].v.value, 4), l.e[i].v.stderr_value);
    }
    fprintf(f, "</table>\n");
    hs_edge_list_free(&l);
    fig g;
    fig_run(&g, r, "circuit", run, "The circuit of run %lld", run);
    figure(r, hs_plot_circuit(r->ix, r->db_path, name, run, g.path), &g,
           "The edges of largest |score| as a graph (Graphviz), as many as the smallest circuit "
           "on the faithfulness curve that reaches 0.8: red raises the logit difference's change, "
           "blue lowers it, width by |score|; a label's q, k or v names the path into the head "
           "(k and v end at the key/value head, shared by its group under grouped-query "
           "attention). Scores are first-order: rank candidates, then check the circuit's "
           "faithfulness.");
    if (has_curve(r, run, HS_METRIC(FAITHFULNESS))) {
        fig c;
        fig_run(&c, r, HS_METRIC(FAITHFULNESS), run, "Faithfulness, run %lld", run);
        figure(r, hs_plot_curves(r->ix, r->db_path, HS_METRIC(FAITHFULNESS), run, c.path), &c,
               hs_metric(HS_M_FAITHFULNESS)->caption);
    }
}

static void section_circuits(report *r)
{
    const long long atp = latest_run(r, HS_KIND_ATP), circ = latest_run(r, HS_KIND_CIRCUIT);
    fprintf(r->html, "<h2 id=\"circuits\">Attribution patching and circuits</h2>\n");
    if (!atp && !circ) {
        fprintf(r->html, "<p>No complete atp or circuit run in this index.</p>\n");
        return;
    }
    if (atp)
        atp_figures(r, atp);
    if (circ)
        circuit_figures(r, circ);
}

static const char CAUTIONS[] =
    "<h2 id=\"cautions\">What these numbers do not establish</h2>\n<ul>\n"
    "<li>Attention mass is not causation: a head can attend strongly and matter little (compare "
    "a map with its ablation delta).</li>\n"
    "<li>Every score needs its random-init control: untrained models already show positional "
    "patterns.</li>\n"
    "<li>A single-head ablation misses redundancy: heads that back each other up each look "
    "unimportant.</li>\n"
    "<li>Grouped-query attention is an architecture change, not a compression of a trained MHA "
    "model: its heads share keys and values by construction.</li>\n"
    "<li>Pruning masks do not speed up dense kernels; only removing heads does.</li>\n"
    "<li>Numbers hold for the data and model of their run; the runs table gives the sha256 of "
    "both.</li>\n</ul>\n";

static const char STYLE[] =
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "h1{margin-bottom:0}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}"
    "figure{margin:1.5em 0}img{max-width:100%;border:1px solid #eee}"
    "figcaption{font-size:.9em;color:#444;max-width:800px}"
    "table{border-collapse:collapse;font-size:.85em;margin:1em 0}"
    "td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}"
    "td.args{font-family:monospace;font-size:.85em;max-width:380px;overflow-wrap:anywhere}"
    ".claim{padding:.8em;border-left:5px solid}.claim.yes{border-color:#2a2;background:#efe}"
    ".claim.no{border-color:#c60;background:#fff4e6}.note{font-size:.85em;color:#555}"
    ".missing{color:#a00}nav a{margin-right:1em}";

/* The sections in page order; those with a nav label are linked from the
 * page's head. Adding a section: its function and its row. */
static const struct {
    const char *id, *nav;
    void (*write)(report *r);
} SECTIONS[] = {
    { HS_KIND_INDUCTION, HS_KIND_INDUCTION, section_induction },
    { "maps", "maps", section_maps },
    { "ablation", "ablation", section_ablation },
    { "causal", "causal", section_causal },
    { "circuits", "circuits", section_circuits },
    { HS_KIND_PRUNE, HS_KIND_PRUNE, section_pruning },
    { "patterns", "patterns", section_patterns },
    { "head-count", NULL, section_experiment },
    { "gqa", NULL, section_gqa },
    { "windows", NULL, section_windows },
    { "long-context", "long context", section_long_context },
    { "features", "features", section_features },
    { "training", "training", section_training },
    { "runs", "runs", section_runs },
};

/* The page of an open index: the header, every section and the cautions,
 * written under a temporary name and moved into place when complete. */
static int write_page(report *r, const char *page)
{
    char tmp[1300];
    if (!(r->html = hs_tmp_fopen(page, tmp, sizeof tmp)))
        return HS_EIO;
    r->induction = latest_run(r, HS_KIND_INDUCTION);
    r->ablate = latest_run(r, HS_KIND_ABLATE);
    r->importance = latest_run(r, HS_KIND_IMPORTANCE);
    r->prune = latest_pruning(r);
    r->patterns = latest_run(r, HS_KIND_PATTERNS);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    FILE *f = r->html;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>headscope "
               "report</title><style>%s</style></head><body>\n<h1>headscope report</h1>\n<p>Index "
               "<code>", STYLE);
    esc(f, r->db_path);
    fprintf(f, "</code>, generated %s by headscope %s (%s).</p>\n<nav>", when, HS_VERSION,
            HS_REAL_NAME);
    const size_t n = sizeof SECTIONS / sizeof SECTIONS[0];
    for (size_t i = 0; i < n; i++)
        if (SECTIONS[i].nav)
            fprintf(f, "<a href=\"#%s\">%s</a>", SECTIONS[i].id, SECTIONS[i].nav);
    fprintf(f, "<a href=\"#cautions\">cautions</a></nav>\n");
    for (size_t i = 0; i < n; i++)
        SECTIONS[i].write(r);
    fputs(CAUTIONS, f);
    fprintf(f, "</body></html>\n");
    const int failed = ferror(f);
    if (fclose(f) || failed) {
        unlink(tmp);
        return hs_fail(HS_EIO, "%s: write failed: %s", page, strerror(errno));
    }
    return hs_tmp_commit(tmp, page, 1);
}

/* --runs "ID,..." (each a run of the index) and --heads "L.H,..." into r. */
static int selection(report *r, const hs_report_request *rq)
{
    hs_run_list l = { 0 };
    int rc = rq->runs ? hs_index_runs(r->ix, NULL, NULL, &l) : HS_OK;
    for (const char *p = rq->runs; !rc && p && *p;) {
        char *end;
        const long long id = strtoll(p, &end, 10);
        int known = 0;
        for (int i = 0; i < l.n; i++)
            known |= l.runs[i].run_id == id;
        if (end == p || (*end && *end != ',') || r->n_runs == 64)
            rc = hs_fail(HS_EINVAL, "--runs '%s': run ids ID,ID,... expected (64 at most)",
                         rq->runs);
        else if (!known)
            rc = hs_fail(HS_EINVAL, "--runs: %s holds no run %lld", rq->db, id);
        else
            r->runs[r->n_runs++] = id, p = *end ? end + 1 : end;
    }
    hs_run_list_free(&l);
    for (const char *p = rq->heads; !rc && p && *p;) {
        int layer, head, used = 0;
        if (sscanf(p, "%d.%d%n", &layer, &head, &used) != 2 || layer < 0 || head < 0 ||
            (p[used] && p[used] != ',') || r->n_heads == 16)
            rc = hs_fail(HS_EINVAL, "--heads '%s': L.H,L.H,... expected (16 at most)", rq->heads);
        else
            r->heads[r->n_heads][0] = layer, r->heads[r->n_heads++][1] = head,
            p += used + (p[used] == ',');
    }
    return rc;
}

void hs_report_print(FILE *f, const hs_report_summary *sum, int json)
{
    if (json) {
        fprintf(f, "{\"out\":");
        hs_json_string(f, sum->page);
        fprintf(f, ",\"figures\":%d,\"missing\":%d}\n", sum->figures, sum->missing);
        return;
    }
    fprintf(f, "wrote %s (%d figure%s%s", sum->page, sum->figures, sum->figures == 1 ? "" : "s",
            sum->missing ? ", " : ")\n");
    if (sum->missing)
        fprintf(f, "%d not drawn: see the page)\n", sum->missing);
}

int hs_report_write(const hs_report_request *rq, hs_report_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    struct stat sb;
    if (stat(rq->db, &sb))
        return hs_fail(HS_EIO, "%s: %s", rq->db, strerror(errno));
    report r = { .db_path = rq->db, .dir = rq->dir, .maps = rq->maps, .seq = rq->seq };
    int rc = hs_index_open_read(&r.ix, rq->db);
    if (rc)
        return rc;
    snprintf(sum->page, sizeof sum->page, "%s/index.html", rq->dir);
    rc = selection(&r, rq);
    if (!rc)
        rc = hs_mkdirs(rq->dir);
    if (!rc)
        rc = write_page(&r, sum->page);
    hs_index_close(r.ix);
    sum->figures = r.figures;
    sum->missing = r.missing;
    return rc;
}
