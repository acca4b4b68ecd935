/* The rendering layer (render/) as a library, so that the sanitizer builds
 * run its code: every kind of figure, the report and the viewer over an
 * index and a map file made here (a capture of the gpt2_tiny fixture and
 * rows of every kind of run), each output complete and moved into place;
 * what each refuses (an unknown format, a kind the index has no rows of)
 * leaves nothing behind; the summaries commands print, as JSON a strict
 * parser reads back and as text. The wording and scales of the figures are
 * test_figures.sh's; this suite is about the code paths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "index.h"
#include "metrics.h"
#include "plot.h"
#include "report.h"
#include "run.h"
#include "runner.h"
#include "study.h"
#include "summary.h"
#include "viewer.h"
#include "study_capture.h"
#include "study_ablate.h"
#include "study_prune.h"

#include <cjson/cJSON.h>

#define GPT2 HS_FIXTURE_DIR "/models/gpt2_tiny"

static char DIR_[64], DB[128], MAPS[128];

static long file_bytes(const char *path)
{
    struct stat sb;
    return stat(path, &sb) ? -1 : (long)sb.st_size;
}

static int64_t run_of(hs_index *ix, const char *kind)
{
    hs_run_info info = { .kind = kind, .model_path = GPT2, .data_path = "d.bin",
                         .args = "[\"x\"]" };
    int64_t id = 0;
    CU_ASSERT_EQUAL_FATAL(hs_index_run_begin(ix, &info, &id), HS_OK);
    return id;
}

/* Rows of one metric on every head of the fixture (2 layers of 2 heads). */
static void grid_rows(hs_index *ix, int64_t run, const char *metric, double base)
{
    hs_metric_row rows[4];
    for (int i = 0; i < 4; i++)
        rows[i] = (hs_metric_row){ i / 2, i % 2, metric, base + 0.1 * i, 0.01, 8, NULL };
    CU_ASSERT_EQUAL(hs_index_metrics_add(ix, run, rows, 4), HS_OK);
}

static void model_row(hs_index *ix, int64_t run, int layer, const char *metric, double v)
{
    hs_metric_row r = { layer, -1, metric, v, 0.01, 8, NULL };
    CU_ASSERT_EQUAL(hs_index_metrics_add(ix, run, &r, 1), HS_OK);
}

/* The map file (a capture of 2 sequences of 8 tokens) and an index with
 * the rows every section of the report and every figure reads. */
static void setup(void)
{
    snprintf(DIR_, sizeof DIR_, "/tmp/hs_render_XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(DIR_));
    snprintf(DB, sizeof DB, "%s/r.db", DIR_);
    snprintf(MAPS, sizeof MAPS, "%s/maps.h5", DIR_);
    hs_model m;
    hs_tokens tok;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, GPT2), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_tokens_read(&tok, GPT2 "/eval.bin"), HS_OK);
    hs_capture_opts co = { .out = MAPS, .batch = 2, .seq_len = 8, .max_batches = 1,
                           .model_dir = GPT2, .data_path = GPT2 "/eval.bin" };
    hs_capture_plan plan;
    hs_capture_result cr;
    CU_ASSERT_EQUAL_FATAL(hs_capture_check(&plan, &co, &m.cfg), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_capture(&cr, &m, &tok, co, NULL), HS_OK);
    hs_tokens_free(&tok);
    hs_model_free(&m);

    hs_index *ix;
    CU_ASSERT_EQUAL_FATAL(hs_index_open(&ix, DB), HS_OK);
    int64_t run = run_of(ix, HS_KIND_CAPTURE);
    CU_ASSERT_EQUAL(hs_index_artifact_add(ix, run, MAPS, cr.sha256, (int64_t)cr.bytes, 1),
                    HS_OK);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    run = run_of(ix, HS_KIND_INDUCTION);
    for (int i = 0; i < 4; i++)
        grid_rows(ix, run, hs_metric(HS_M_INDUCTION + i)->name, 0.1);
    for (int i = 0; i < 4; i++)
        grid_rows(ix, run, hs_metric(HS_M_INDUCTION_CONTROL + i)->name, 0.05);
    model_row(ix, run, -1, HS_METRIC(CAUSAL_LOSS_DELTA_TOP_K), 0.5);
    model_row(ix, run, -1, HS_METRIC(SECOND_HALF_LOSS), 1.5);
    hs_metric_row top = { 1, 1, HS_METRIC(CAUSAL_TOP_K), 1, 0, 1, NULL };
    CU_ASSERT_EQUAL(hs_index_metrics_add(ix, run, &top, 1), HS_OK);
    hs_curve_point draws[3] = { { 0, 0, 0.1 }, { 1, 1, 0.2 }, { 2, 2, -0.05 } };
    CU_ASSERT_EQUAL(hs_index_curve_add(ix, run, HS_METRIC(CAUSAL_RANDOM_K), draws, 3), HS_OK);
    CU_ASSERT_EQUAL(hs_index_param_set(ix, run, "n_head", "[2,2]"), HS_OK);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    run = run_of(ix, HS_KIND_PATTERNS);
    grid_rows(ix, run, HS_METRIC(ENTROPY), 0.5);
    grid_rows(ix, run, HS_METRIC(DISTANCE), 1.0);
    CU_ASSERT_EQUAL(hs_index_param_set(ix, run, "seq_len", "8"), HS_OK);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    run = run_of(ix, HS_KIND_PATCH);
    hs_position_row pos[6];
    for (int i = 0; i < 6; i++)
        pos[i] = (hs_position_row){ i / 3, i % 3, HS_METRIC(PATCH_RESID_PRE), 0.3 * i - 0.5,
                                    0.01, 8, -1 };
    CU_ASSERT_EQUAL(hs_index_position_metrics_add(ix, run, pos, 6), HS_OK);
    CU_ASSERT_EQUAL(hs_index_param_set(ix, run, "positions_3", "[\"a\",\"\\\"b'\",\"#3\"]"),
                    HS_OK);
    grid_rows(ix, run, HS_METRIC(PATCH_Z), -0.2);
    model_row(ix, run, -1, HS_METRIC(LOGIT_DIFF_CLEAN), 2);
    model_row(ix, run, -1, HS_METRIC(LOGIT_DIFF_CORRUPT), -1);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    run = run_of(ix, HS_KIND_DLA);
    grid_rows(ix, run, HS_METRIC(DLA), -0.3);
    model_row(ix, run, 0, HS_METRIC(DLA), 0.4);
    model_row(ix, run, -1, HS_METRIC(DLA_EMBED), 0.2);
    model_row(ix, run, -1, HS_METRIC(LOGIT_DIFF_CLEAN), 1);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    run = run_of(ix, HS_KIND_LOGIT_LENS);
    for (int l = 0; l <= 2; l++)
        model_row(ix, run, l, HS_METRIC(LOGIT_LENS_LOSS), 3 - l);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    run = run_of(ix, HS_KIND_COMPOSITION);
    hs_pair_row pairs[4];
    for (int i = 0; i < 4; i++)
        pairs[i] = (hs_pair_row){ 0, i / 2, 1, i % 2, i < 2 ? HS_METRIC(Q_COMPOSITION)
                                                         : HS_METRIC(Q_COMPOSITION_CONTROL),
                                  0.2 * i };
    CU_ASSERT_EQUAL(hs_index_pair_metrics_add(ix, run, pairs, 4), HS_OK);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    run = run_of(ix, HS_KIND_ATP);
    grid_rows(ix, run, HS_METRIC(ATP_Z), -0.1);
    grid_rows(ix, run, HS_METRIC(PATCH_Z), -0.15);
    model_row(ix, run, -1, HS_METRIC(LOGIT_DIFF_CLEAN), 2);
    model_row(ix, run, -1, HS_METRIC(LOGIT_DIFF_CORRUPT), -1);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    run = run_of(ix, HS_KIND_CIRCUIT);
    const char *ig = HS_METRIC(EAP_IG);
    const hs_edge_row edges[4] = { { "input", "a0.h0<q>", ig, 0.3, 0.1, 8 },
                                   { "a0.h1", "a1.h0<v>", ig, -0.2, 0.1, 8 },
                                   { "a1.h1", "logits", ig, 0.5, 0.1, 8 },
                                   { "m0", "logits", ig, -0.1, 0.1, 8 } };
    CU_ASSERT_EQUAL(hs_index_edge_metrics_add(ix, run, edges, 4), HS_OK);
    hs_curve_point faith[3] = { { 0, 0, 0 }, { 1, 2, 0.9 }, { 2, 4, 1 } };
    CU_ASSERT_EQUAL(hs_index_curve_add(ix, run, HS_METRIC(FAITHFULNESS), faith, 3), HS_OK);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    run = run_of(ix, HS_KIND_TRAIN);
    hs_curve_point loss[3] = { { 0, 64, 3.0 }, { 1, 128, 2.5 }, { 2, 192, 2.2 } };
    CU_ASSERT_EQUAL(hs_index_curve_add(ix, run, HS_METRIC(TRAIN_LOSS), loss, 3), HS_OK);
    CU_ASSERT_EQUAL(hs_index_curve_add(ix, run, HS_METRIC(VAL_LOSS), loss, 3), HS_OK);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    hs_index_close(ix);
}

static void teardown(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", DIR_);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

/* out is a complete file and no temporary of it is left beside it. */
static void expect_output(const char *out, const char *what)
{
    const long n = file_bytes(out);
    if (n <= 0)
        printf("\n    %s: %s is %s", what, out, n < 0 ? "missing" : "empty");
    CU_ASSERT(n > 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -q '\\.tmp'", DIR_);
    CU_ASSERT_NOT_EQUAL(system(cmd), 0);
}

static void test_every_kind_of_figure_is_drawn(void)
{
    setup();
    int nk;
    const hs_plot_kind *k = hs_plot_kinds(&nk);
    CU_ASSERT(nk >= 9);
    for (int i = 0; i < nk; i++) {
        char out[200];
        snprintf(out, sizeof out, "%s/%s.%s", DIR_, k[i].name, i % 2 ? "svg" : "png");
        hs_plot_request rq = { .kind = k[i].name, .maps = MAPS, .db = DB, .out = out,
                               .layer = 1, .head = 1, .seq = 1 };
        if (!strcmp(k[i].name, "scores"))
            rq.metric = HS_METRIC(INDUCTION), rq.control = 1;
        if (!strcmp(k[i].name, "curve"))
            rq.curve = HS_METRIC(TRAIN_LOSS);
        const int rc = hs_plot(&rq);
        if (rc)
            printf("\n    plot %s: %s", k[i].name, hs_last_error());
        CU_ASSERT_EQUAL(rc, HS_OK);
        expect_output(out, k[i].name);
    }
    /* a scale fixed by T (the run's recorded seq_len) and one by the values */
    char out[200];
    snprintf(out, sizeof out, "%s/entropy.svg", DIR_);
    hs_plot_request rq = { .kind = "scores", .db = DB, .metric = HS_METRIC(ENTROPY), .out = out };
    CU_ASSERT_EQUAL(hs_plot(&rq), HS_OK);
    expect_output(out, "entropy");
    teardown();
}

static void test_refused_figures_leave_nothing(void)
{
    setup();
    char out[200];
    snprintf(out, sizeof out, "%s/x.bmp", DIR_);
    hs_plot_request rq = { .kind = "dla", .db = DB, .out = out };
    CU_ASSERT_EQUAL(hs_plot(&rq), HS_EINVAL); /* an unknown format */
    snprintf(out, sizeof out, "%s/x.png", DIR_);
    rq.kind = "scores", rq.metric = "no_such_metric";
    CU_ASSERT_EQUAL(hs_plot(&rq), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "no_such_metric"));
    rq.kind = "no-such-kind";
    CU_ASSERT_EQUAL(hs_plot(&rq), HS_EINVAL);
    CU_ASSERT_EQUAL(file_bytes(out), -1);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -q 'x\\.'", DIR_);
    CU_ASSERT_NOT_EQUAL(system(cmd), 0);
    teardown();
}

static void test_report_and_viewer_of_every_section(void)
{
    setup();
    char dir[200], page[300];
    snprintf(dir, sizeof dir, "%s/report", DIR_);
    hs_report_request rq = { .db = DB, .dir = dir };
    hs_report_summary sum;
    const int rc = hs_report_write(&rq, &sum);
    if (rc)
        printf("\n    report: %s", hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    printf("\n    report: %d figures, %d not drawn", sum.figures, sum.missing);
    CU_ASSERT(sum.figures >= 12);
    expect_output(sum.page, "report");
    snprintf(page, sizeof page, "%s/viewer/index.html", dir);
    expect_output(page, "the report's viewer");
    FILE *f = fopen(sum.page, "r");
    char html[1 << 16] = "";
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    html[fread(html, 1, sizeof html - 1, f)] = 0;
    fclose(f);
    static const char *const sections[] = { "id=\"induction\"", "id=\"maps\"", "id=\"causal\"",
                                            "id=\"patterns\"", "id=\"training\"", "id=\"runs\"",
                                            "id=\"cautions\"" };
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        CU_ASSERT_PTR_NOT_NULL(strstr(html, sections[i]));
    hs_viewer_request vq = { .maps = MAPS, .dir = DIR_, .sequences = "0,1" };
    hs_viewer_summary vs;
    CU_ASSERT_EQUAL(hs_viewer_write_db(&vq, DB, &vs), HS_OK);
    CU_ASSERT_EQUAL(vs.sequences, 2);
    snprintf(page, sizeof page, "%s/data.js", DIR_);
    expect_output(page, "viewer");
    teardown();
}

/* The summary `print` writes of s and what, as one string (malloc'd). */
#define SUMMARY(out, print, ...)                                                               \
    do {                                                                                       \
        size_t len_;                                                                           \
        FILE *f_ = open_memstream(&(out), &len_);                                              \
        CU_ASSERT_PTR_NOT_NULL_FATAL(f_);                                                      \
        print(f_, __VA_ARGS__);                                                                \
        fclose(f_);                                                                            \
    } while (0)

/* The JSON summary parsed (strictly: one object, nothing after it). */
static cJSON *parsed(char *text)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, 1);
    if (!j)
        printf("\n    not JSON: %s", text);
    CU_ASSERT_PTR_NOT_NULL(j);
    free(text);
    return j;
}

static double number_at(const cJSON *j, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, a);
    if (b)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsNumber(x) ? x->valuedouble : -1e300;
}

static void test_summaries_are_json_and_text(void)
{
    hs_summary js = { 7, "runs.db", 1.5, 1 }, tx = { 7, "runs.db", 1.5, 0 };
    char *out;
    hs_ablate_result ab = { .clean_loss = 2.25, .worst_delta = { 0.5 },
                            .worst_layer = { 1, -1, -1 }, .worst_head = { 0 } };
    SUMMARY(out, hs_print_ablate, &js, &ab, NULL);
    cJSON *j = parsed(out);
    CU_ASSERT_EQUAL(number_at(j, "run_id", NULL), 7);
    CU_ASSERT_EQUAL(number_at(j, "clean_loss", NULL), 2.25);
    CU_ASSERT_EQUAL(number_at(j, "max_loss_delta_zero", "layer"), 1);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(j, "max_loss_delta_mean"));
    cJSON_Delete(j);
    SUMMARY(out, hs_print_ablate, &tx, &ab, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "run 7: clean loss 2.2500"));
    free(out);

    hs_curve_point pts[2] = { { 0, 0, 3.0 }, { 1, 0.5, 3.5 } };
    hs_prune_result pr = { .curve = { .points = pts, .n = 2 }, .n_pruned = 2, .heads = 4,
                           .ms = { 2, 1 } };
    SUMMARY(out, hs_print_prune, &js, &pr, &(hs_prune_study_opts){ .out = "out/dir \"q\"", .structural = 1 });
    j = parsed(out);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(j, "curve")), 2);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "out")->valuestring, "out/dir \"q\"");
    CU_ASSERT_EQUAL(number_at(j, "forward_ms_pruned", NULL), 1);
    cJSON_Delete(j);

    hs_patch_result pa = { .ld_clean = 3, .ld_corrupt = -1, .n = 5 };
    CU_ASSERT_EQUAL(hs_head_table_add(&pa.heads, 0, 1, HS_METRIC(PATCH_Z), 0.75, 0.1, 5), HS_OK);
    hs_position_row pos = { 1, 2, HS_METRIC(PATCH_RESID_PRE), 0.5, 0.05, 5, -1 };
    pa.pos = &pos, pa.n_pos = 1;
    SUMMARY(out, hs_print_patch, &js, &pa);
    j = parsed(out);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(j, "heads")), 1);
    CU_ASSERT_EQUAL(number_at(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "positions"), 0),
                              "position", NULL), 2);
    cJSON_Delete(j);
    SUMMARY(out, hs_print_patch, &tx, &pa);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "at layer 0 head 1"));
    free(out);
    hs_path_patch_result pp = { .heads = pa.heads, .n_senders = 1 };
    SUMMARY(out, hs_print_path_patch, &js, &pp, NULL);
    cJSON_Delete(parsed(out));
    hs_head_table_free(&pa.heads);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_every_kind_of_figure_is_drawn", test_every_kind_of_figure_is_drawn },
        { "test_refused_figures_leave_nothing", test_refused_figures_leave_nothing },
        { "test_report_and_viewer_of_every_section", test_report_and_viewer_of_every_section },
        { "test_summaries_are_json_and_text", test_summaries_are_json_and_text },
    };
    return hs_run_tests("render", tests, HS_NTESTS(tests));
}
