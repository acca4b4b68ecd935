/* report: one static HTML page (index.html + gnuplot PNGs) of what an index
 * holds: training curves, the induction claim with its causal check, score
 * grids beside their random-init controls, attention maps of the heads the
 * scores single out, ablation, importance, pruning and pattern statistics.
 * Each figure is captioned with what it shows and what it does not. The page
 * is written under a temporary name and renamed when complete. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <sqlite3.h>

#include "cli.h"
#include "common.h"
#include "plot.h"

typedef struct {
    sqlite3 *db;
    const char *db_path, *dir;
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

/* The latest complete run of a kind; 0 when there is none. */
static long long latest_run(report *r, const char *kind)
{
    sqlite3_stmt *st;
    long long id = 0;
    if (sqlite3_prepare_v2(r->db, "SELECT max(run_id) FROM runs WHERE kind=?1 AND"
                                  " status='complete'", -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return id;
}

/* A metric row of a run; returns 1 when found. */
static int metric(report *r, long long run, int layer, int head, const char *name, double *value,
                  double *se)
{
    sqlite3_stmt *st;
    int found = 0;
    if (sqlite3_prepare_v2(r->db, "SELECT value, stderr FROM head_metrics WHERE run_id=?1 AND"
                                  " layer=?2 AND head=?3 AND metric=?4", -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, layer);
    sqlite3_bind_int(st, 3, head);
    sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        *value = sqlite3_column_double(st, 0);
        if (se)
            *se = sqlite3_column_double(st, 1);
        found = 1;
    }
    sqlite3_finalize(st);
    return found;
}

/* The head of a run with the highest value of a metric; returns 1 when found. */
static int top_head(report *r, long long run, const char *name, int *layer, int *head)
{
    sqlite3_stmt *st;
    int found = 0;
    if (sqlite3_prepare_v2(r->db, "SELECT layer, head FROM head_metrics WHERE run_id=?1 AND"
                                  " metric=?2 AND layer>=0 ORDER BY value DESC, layer, head LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        *layer = sqlite3_column_int(st, 0);
        *head = sqlite3_column_int(st, 1);
        found = 1;
    }
    sqlite3_finalize(st);
    return found;
}

static int has_rows(report *r, const char *sql, long long run, const char *name)
{
    sqlite3_stmt *st;
    int n = 0;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return n;
}

static int has_metric(report *r, long long run, const char *name)
{
    return has_rows(r, "SELECT count(*) FROM head_metrics WHERE run_id=?1 AND metric=?2", run, name);
}

static int has_curve(report *r, long long run, const char *name)
{
    return has_rows(r, "SELECT count(*) FROM curves WHERE run_id=?1 AND curve=?2", run, name);
}

/* Writes a figure (rc: the plot's result) with its caption, or says why it
 * is missing. */
static void figure(report *r, int rc, const char *file, const char *title, const char *caption)
{
    FILE *f = r->html;
    if (rc) {
        r->missing++;
        fprintf(f, "<p class=\"missing\">%s: not drawn (", title);
        esc(f, hs_last_error());
        fprintf(f, ")</p>\n");
        return;
    }
    r->figures++;
    fprintf(f, "<figure><img src=\"%s\" alt=\"", file);
    esc(f, title);
    fprintf(f, "\"><figcaption><b>");
    esc(f, title);
    fprintf(f, ".</b> %s</figcaption></figure>\n", caption);
}

static void path_in(char *out, size_t n, const report *r, const char *file)
{
    snprintf(out, n, "%s/%s", r->dir, file);
}

static void grid(report *r, long long run, const char *name, int control, const char *caption)
{
    char file[128], path[1200], title[160];
    snprintf(file, sizeof file, "%s_run%lld.png", name, run);
    path_in(path, sizeof path, r, file);
    snprintf(title, sizeof title, "%s%s, run %lld", name,
             control ? " beside its random-init control" : "", run);
    figure(r, plot_index(r->db_path, name, NULL, run, path, control), file, title, caption);
}

static void section_runs(report *r)
{
    FILE *f = r->html;
    sqlite3_stmt *st;
    fprintf(f, "<h2 id=\"runs\">Runs and their provenance</h2>\n<table><tr><th>run</th><th>kind"
               "</th><th>status</th><th>model</th><th>data</th><th>started</th><th>finished</th>"
               "<th>command line</th></tr>\n");
    if (sqlite3_prepare_v2(r->db, "SELECT run_id, kind, status, model_path, substr(model_sha256,1,12),"
                                  " data_path, substr(data_sha256,1,12), started_at, finished_at, args"
                                  " FROM runs ORDER BY run_id", -1, &st, NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        fprintf(f, "<tr><td>%lld</td>", (long long)sqlite3_column_int64(st, 0));
        for (int c = 1; c < 10; c++) {
            if (c == 4 || c == 6)
                continue;
            fprintf(f, "<td%s>", c == 9 ? " class=\"args\"" : "");
            esc(f, (const char *)sqlite3_column_text(st, c));
            if ((c == 3 || c == 5) && sqlite3_column_text(st, c + 1)) {
                fprintf(f, "<br><small>sha256 ");
                esc(f, (const char *)sqlite3_column_text(st, c + 1));
                fprintf(f, "&hellip;</small>");
            }
            fprintf(f, "</td>");
        }
        fprintf(f, "</tr>\n");
    }
    sqlite3_finalize(st);
    fprintf(f, "</table>\n");
}

static void section_training(report *r)
{
    FILE *f = r->html;
    sqlite3_stmt *st;
    fprintf(f, "<h2 id=\"training\">Training</h2>\n");
    if (sqlite3_prepare_v2(r->db, "SELECT run_id FROM runs WHERE kind='train' AND status='complete'"
                                  " ORDER BY run_id DESC LIMIT 3", -1, &st, NULL) != SQLITE_OK)
        return;
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        long long run = sqlite3_column_int64(st, 0);
        char file[64], path[1200], title[96];
        snprintf(file, sizeof file, "training_run%lld.png", run);
        path_in(path, sizeof path, r, file);
        snprintf(title, sizeof title, "Training loss, run %lld", run);
        int val = has_curve(r, run, "val_loss") > 0;
        figure(r, plot_index(r->db_path, NULL, val ? "train_loss,val_loss" : "train_loss", run, path, 0),
               file, title,
               "Mean next-token cross-entropy (nats) of each training batch against tokens seen"
               "; the validation loss on the held-out shard where one was given. A falling curve "
               "shows the model fits its data; it does not say which heads do the work.");
        n++;
    }
    sqlite3_finalize(st);
    if (!n)
        fprintf(f, "<p>No complete training run in this index.</p>\n");
}

static void section_induction(report *r, long long run, long long ablate_run, long long imp_run)
{
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"induction\">Induction heads: score and causal check</h2>\n");
    if (!run) {
        fprintf(f, "<p>No complete <code>headscope induction</code> run in this index.</p>\n");
        return;
    }
    double clean = 0, top = 0, top_se = 0, rnd = 0, rnd_sd = 0;
    metric(r, run, -1, -1, "second_half_loss", &clean, NULL);
    metric(r, run, -1, -1, "causal_loss_delta_top_k", &top, &top_se);
    metric(r, run, -1, -1, "causal_loss_delta_random_k", &rnd, &rnd_sd);
    double established = 0;
    metric(r, run, -1, -1, "induction_established", &established, NULL);
    const int beats = established == 1;
    sqlite3_stmt *st;
    char heads[512] = "";
    if (sqlite3_prepare_v2(r->db, "SELECT layer, head FROM head_metrics WHERE run_id=?1 AND"
                                  " metric='causal_top_k' ORDER BY layer, head", -1, &st,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, run);
        while (sqlite3_step(st) == SQLITE_ROW) {
            size_t len = strlen(heads);
            snprintf(heads + len, sizeof heads - len, "%sL%dH%d", len ? ", " : "",
                     sqlite3_column_int(st, 0), sqlite3_column_int(st, 1));
        }
        sqlite3_finalize(st);
    }
    fprintf(f, "<p class=\"claim %s\">", beats ? "yes" : "no");
    if (beats)
        fprintf(f, "<b>Induction head%s by score and causal check: %s.</b> ", strchr(heads, ',') ? "s" : "",
                heads);
    else
        fprintf(f, "<b>Not established</b> for the top heads by induction score (%s): the claim "
                   "needs their ablation to raise the loss beyond the spread of random ablations "
                   "<i>and</i> their score to reach <code>--min-score</code> (default 0.4) and "
                   "exceed the random-init control's by two standard errors. ", heads);
    fprintf(f, "Gating %s off raises the loss on the second half of repeated random sequences "
               "(%.3f nats clean) by %+.3f &plusmn; %.3f (standard error over sequences); gating as "
               "many randomly drawn other heads off raises it by %+.3f &plusmn; %.3f (mean &plusmn; "
               "standard deviation over the draws).</p>\n",
            heads, clean, top, top_se, rnd, rnd_sd);
    char path[1200], file[64];
    snprintf(file, sizeof file, "causal_run%lld.png", run);
    path_in(path, sizeof path, r, file);
    figure(r, plot_causal(r->db_path, run, path), file, "Causal check",
           "Increase of the second-half loss on r ++ r when the heads of highest induction score "
           "are gated off (red, &plusmn; 2 standard errors) against the same number of randomly "
           "chosen other heads (blue points, one per draw; mean &plusmn; standard deviation). "
           "The claim needs red above the blue spread (and the heads' induction score above "
           "its control). It shows these heads "
           "matter for copying repeated tokens on this synthetic probe, not what they do on "
           "natural text.");
    /* the top heads, with what other runs say about them */
    fprintf(f, "<table><tr><th>head</th><th>induction</th><th>control</th><th>prev_token</th>"
               "<th>duplicate_token</th><th>copying</th><th>loss_delta_zero</th><th>importance</th>"
               "</tr>\n");
    if (sqlite3_prepare_v2(r->db, "SELECT layer, head FROM head_metrics WHERE run_id=?1 AND"
                                  " metric='induction' AND layer>=0 ORDER BY value DESC LIMIT 5",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, run);
        while (sqlite3_step(st) == SQLITE_ROW) {
            int l = sqlite3_column_int(st, 0), h = sqlite3_column_int(st, 1);
            double v, se;
            fprintf(f, "<tr><td>L%dH%d</td>", l, h);
            const char *m[] = { "induction", "induction_control", "prev_token", "duplicate_token",
                                "copying" };
            for (int i = 0; i < 5; i++) {
                if (metric(r, run, l, h, m[i], &v, &se))
                    fprintf(f, i < 4 ? "<td>%.3f &plusmn; %.3f</td>" : "<td>%.3f</td>", v, se);
                else
                    fprintf(f, "<td>&ndash;</td>");
            }
            if (ablate_run && metric(r, ablate_run, l, h, "loss_delta_zero", &v, &se))
                fprintf(f, "<td>%+.4f &plusmn; %.4f</td>", v, se);
            else
                fprintf(f, "<td>&ndash;</td>");
            if (imp_run && metric(r, imp_run, l, h, "importance", &v, &se))
                fprintf(f, "<td>%.3f</td>", v);
            else
                fprintf(f, "<td>&ndash;</td>");
            fprintf(f, "</tr>\n");
        }
        sqlite3_finalize(st);
    }
    fprintf(f, "</table>\n<p class=\"note\">loss_delta_zero and importance come from the latest "
               "ablate and importance runs of this index, which may use other data than the "
               "induction probe; check the runs table.</p>\n");
    grid(r, run, "induction", 1,
         "Mean attention from each token of the second copy of r ++ r to the token after its "
         "first occurrence (chance &asymp; 1/position), beside the same score of a randomly "
         "initialised model of the same configuration. A high score is a pattern, not proof of "
         "function: see the causal check.");
    grid(r, run, "prev_token", 1,
         "Mean attention to the previous position on the same sequences, beside the control. "
         "Previous-token heads in an earlier layer are what induction heads usually compose with.");
    grid(r, run, "duplicate_token", 1,
         "Mean attention from the second copy to the earlier occurrence of the same token, "
         "beside the control.");
    grid(r, run, "copying", 1,
         "Sum of the real parts over the sum of the magnitudes of the eigenvalues of each head's "
         "OV circuit W_E W_V W_O W_U (positive: the head copies the tokens it attends to), beside "
         "the control. Norms are ignored, so it is a property of the weights, not of any input.");
}

static void section_maps(report *r, const char *maps, long long seq, long long ind_run,
                         long long pat_run)
{
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"maps\">Attention maps</h2>\n");
    char found[1200] = "";
    if (!maps) { /* the latest capture run's map file */
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(r->db, "SELECT a.path FROM artifacts a JOIN runs r USING (run_id)"
                                      " WHERE r.kind='capture' AND r.status='complete' AND"
                                      " a.complete=1 ORDER BY a.run_id DESC LIMIT 1", -1, &st,
                               NULL) == SQLITE_OK) {
            if (sqlite3_step(st) == SQLITE_ROW)
                snprintf(found, sizeof found, "%s", (const char *)sqlite3_column_text(st, 0));
            sqlite3_finalize(st);
        }
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
    /* the heads the scores single out, each once */
    int pick[3][2], n = 0, l, h;
    const char *why[3];
    if (ind_run && top_head(r, ind_run, "induction", &l, &h))
        pick[n][0] = l, pick[n][1] = h, why[n++] = "highest induction score";
    if (ind_run && top_head(r, ind_run, "prev_token", &l, &h))
        pick[n][0] = l, pick[n][1] = h, why[n++] = "highest previous-token score";
    if (pat_run && top_head(r, pat_run, "first_token", &l, &h))
        pick[n][0] = l, pick[n][1] = h, why[n++] = "most attention on the first token";
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= pick[j][0] == pick[i][0] && pick[j][1] == pick[i][1];
        if (dup)
            continue;
        char file[64], path[1200], title[160];
        snprintf(file, sizeof file, "map_L%dH%d.png", pick[i][0], pick[i][1]);
        path_in(path, sizeof path, r, file);
        snprintf(title, sizeof title, "Layer %d head %d (%s)", pick[i][0], pick[i][1], why[i]);
        figure(r, plot_map(maps, pick[i][0], pick[i][1], seq, path, 0), file, title,
               "Post-softmax attention of each query (row) over the keys (columns), with the "
               "byte tokens as labels. A map is one sequence's picture: attention mass is not "
               "causal influence, and one sequence is not a statistic.");
    }
    char path[1200];
    path_in(path, sizeof path, r, "maps_grid.png");
    figure(r, plot_map(maps, 0, 0, seq, path, 1), "maps_grid.png", "Every head",
           "All captured heads of the same sequence, layer by layer, on one colour scale.");
}

static void section_ablation(report *r, long long run, long long imp_run)
{
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"ablation\">Ablation and importance</h2>\n");
    if (!run && !imp_run)
        fprintf(f, "<p>No complete ablate or importance run in this index.</p>\n");
    const char *kinds[] = { "loss_delta_zero", "loss_delta_mean", "loss_delta_resample" };
    const char *what[] = { "its output z set to 0", "its output replaced by its mean over the data",
                           "its output taken from another sequence of the batch" };
    for (int k = 0; run && k < 3; k++) {
        if (!has_metric(r, run, kinds[k]))
            continue;
        char caption[600];
        snprintf(caption, sizeof caption,
                 "Evaluation loss with each head's %s, minus the clean loss (nats; the index holds "
                 "the standard error of the per-sequence differences). One head at a time: heads "
                 "that back each other up each look unimportant here.", what[k]);
        grid(r, run, kinds[k], 0, caption);
    }
    if (imp_run)
        grid(r, imp_run, "importance", 0,
             "Mean |dL/d gate| per head (Michel et al. 2019), each layer's vector scaled to unit "
             "length: a first-order estimate of what removing the head costs, comparable within "
             "a layer, not across layers.");
}

static void section_pruning(report *r, long long run)
{
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"pruning\">Pruning</h2>\n");
    if (!run) {
        fprintf(f, "<p>No complete prune run in this index.</p>\n");
        return;
    }
    char file[64], path[1200];
    snprintf(file, sizeof file, "pruning_run%lld.png", run);
    path_in(path, sizeof path, r, file);
    figure(r, plot_index(r->db_path, NULL, "pruning", run, path, 0), file, "Pruning curve",
           "Validation loss after each step of joint pruning (heads of lowest importance gated "
           "off, importance recomputed on the pruned model) against the fraction of heads pruned.");
    double dense, pruned;
    if (metric(r, run, -1, -1, "forward_ms_unpruned", &dense, NULL) &&
        metric(r, run, -1, -1, "forward_ms_pruned", &pruned, NULL))
        fprintf(f, "<p>Forward of one batch, median of 7: %.2f ms unpruned, %.2f ms for the "
                   "written model (%.2f&times;). Gated heads in a dense model cost as much as "
                   "live ones; only structural pruning (<code>--structural</code>) removes work."
                   "</p>\n", dense, pruned, dense / pruned);
    grid(r, run, "pruned", 0, "The final mask: 1 for a pruned head.");
}

static void section_patterns(report *r, long long run)
{
    FILE *f = r->html;
    fprintf(f, "<h2 id=\"patterns\">Pattern statistics</h2>\n");
    if (!run) {
        fprintf(f, "<p>No complete patterns run in this index.</p>\n");
        return;
    }
    const char *m[] = { "entropy", "first_token", "prev_token", "distance" };
    const char *c[] = {
        "Mean entropy (nats) of each head's attention distribution: low is focused, ln(position) "
        "is uniform.",
        "Mean attention on position 0; heads that park their attention there are often doing "
        "nothing with it.",
        "Mean attention on the previous position, on the evaluation data (not the random probe).",
        "Mean attention-weighted distance |t - s| between query and key.",
    };
    int controls = 0;
    for (int i = 0; i < 4; i++) {
        char ctrl[48];
        snprintf(ctrl, sizeof ctrl, "%s_control", m[i]);
        const int with = has_metric(r, run, ctrl) > 0;
        controls += with;
        if (has_metric(r, run, m[i]))
            grid(r, run, m[i], with, c[i]);
    }
    fprintf(f, "<p class=\"note\">Pattern statistics describe where attention goes on the "
               "evaluation data%s</p>\n",
            controls ? ", beside the same statistics of a randomly initialised model of the same "
                       "configuration on the same data."
                     : "; this run computed no random-init control (<code>patterns "
                       "--control</code> does).");
}

static void section_experiment(report *r, long long run)
{
    FILE *f = r->html;
    if (!run)
        return;
    fprintf(f, "<h2 id=\"head-count\">Head-count experiment (run %lld)</h2>\n<table><tr><th>heads"
               "</th><th>validation loss</th><th>standard error over seeds</th><th>seeds</th>"
               "<th>forward ms</th></tr>\n", run);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT CAST(substr(metric, 16) AS INTEGER) AS h, value, stderr, n"
                                  " FROM head_metrics WHERE run_id=?1 AND metric LIKE"
                                  " 'val_loss_heads_%' ORDER BY h", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, run);
        while (sqlite3_step(st) == SQLITE_ROW) {
            int h = sqlite3_column_int(st, 0);
            char name[48];
            double ms = NAN;
            snprintf(name, sizeof name, "forward_ms_heads_%d", h);
            metric(r, run, -1, -1, name, &ms, NULL);
            fprintf(f, "<tr><td>%d</td><td>%.4f</td><td>%.4f</td><td>%d</td><td>%.2f</td></tr>\n", h,
                    sqlite3_column_double(st, 1), sqlite3_column_double(st, 2),
                    sqlite3_column_int(st, 3), ms);
        }
        sqlite3_finalize(st);
    }
    fprintf(f, "</table>\n<p class=\"note\">Same architecture, shared initial weights, equal step "
               "budgets. Differences smaller than a few standard errors are noise; the ordering "
               "holds for this data and budget only.</p>\n");
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
    "td.args{font-family:monospace;font-size:.85em;max-width:380px;word-break:break-all}"
    ".claim{padding:.8em;border-left:5px solid}.claim.yes{border-color:#2a2;background:#efe}"
    ".claim.no{border-color:#c60;background:#fff4e6}.note{font-size:.85em;color:#555}"
    ".missing{color:#a00}nav a{margin-right:1em}";

int cmd_report(int argc, char **argv)
{
    const char *db = NULL, *out = NULL, *maps = NULL;
    long seq = 0;
    int json = 0;
    opt o[] = {
        { "--db", OPT_STR, &db, 0, "FILE", "the index to report on", 0 },
        { "--out", OPT_STR, &out, 0, "DIR", "directory for index.html and its figures (created)", 0 },
        { "--maps", OPT_STR, &maps, 0, "FILE.h5", "map file (default: the latest capture run's)", 0 },
        { "--seq", OPT_LONG, &seq, 0, "N", "sequence of the map file to draw", 0 },
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = opts_parse("report", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!db || !out)
        return usage_error("report", "--db FILE and --out DIR are required");
    struct stat sb;
    if (stat(db, &sb)) {
        fprintf(stderr, "headscope: report: %s: %s\n", db, strerror(errno));
        return EXIT_FAILURE_RUN;
    }
    report r = { .db_path = db, .dir = out };
    if (sqlite3_open_v2(db, &r.db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_exec(r.db, "SELECT run_id, kind, status FROM runs LIMIT 0", NULL, NULL, NULL) !=
            SQLITE_OK) {
        fprintf(stderr, "headscope: report: %s: not a headscope index (%s)\n", db,
                sqlite3_errmsg(r.db));
        sqlite3_close(r.db);
        return EXIT_FAILURE_RUN;
    }
    if (hs_mkdirs(out)) {
        sqlite3_close(r.db);
        return run_error("report");
    }
    char page[1200], tmp[1300];
    snprintf(page, sizeof page, "%s/index.html", out);
    snprintf(tmp, sizeof tmp, "%s/.index.html.tmp", out);
    if (!(r.html = fopen(tmp, "w"))) {
        fprintf(stderr, "headscope: report: %s: cannot write: %s\n", tmp, strerror(errno));
        sqlite3_close(r.db);
        return EXIT_FAILURE_RUN;
    }
    const long long ind = latest_run(&r, "induction"), abl = latest_run(&r, "ablate"),
                    imp = latest_run(&r, "importance"), pru = latest_run(&r, "prune"),
                    pat = latest_run(&r, "patterns"), exp = latest_run(&r, "experiment");
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    FILE *f = r.html;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>headscope "
               "report</title><style>%s</style></head><body>\n<h1>headscope report</h1>\n<p>Index "
               "<code>", STYLE);
    esc(f, db);
    fprintf(f, "</code>, generated %s by headscope %s (%s).</p>\n<nav><a href=\"#induction\">"
               "induction</a><a href=\"#maps\">maps</a><a href=\"#ablation\">ablation</a><a "
               "href=\"#pruning\">pruning</a><a href=\"#patterns\">patterns</a><a href=\"#training\">"
               "training</a><a href=\"#runs\">runs</a><a href=\"#cautions\">cautions</a></nav>\n",
            when, HS_VERSION, HS_REAL_NAME);
    section_induction(&r, ind, abl, imp);
    section_maps(&r, maps, seq, ind, pat);
    section_ablation(&r, abl, imp);
    section_pruning(&r, pru);
    section_patterns(&r, pat);
    section_experiment(&r, exp);
    section_training(&r);
    section_runs(&r);
    fputs(CAUTIONS, f);
    fprintf(f, "</body></html>\n");
    sqlite3_close(r.db);
    if (fclose(f) || rename(tmp, page)) {
        fprintf(stderr, "headscope: report: %s: write failed: %s\n", page, strerror(errno));
        remove(tmp);
        return EXIT_FAILURE_RUN;
    }
    if (json) {
        printf("{\"out\":");
        json_string(stdout, page);
        printf(",\"figures\":%d,\"missing\":%d}\n", r.figures, r.missing);
    } else {
        printf("wrote %s (%d figures%s", page, r.figures, r.missing ? ", " : ")\n");
        if (r.missing)
            printf("%d not drawn: see the page)\n", r.missing);
    }
    return 0;
}
