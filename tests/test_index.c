/* The index's read API (store/index.h, "Reading") against indexes built
 * with its own write functions: latest complete runs, metric rows and
 * grids, model-wide series, curves and artifacts, and what each gives on an
 * empty index, an absent metric, an unfinished run, and names that differ
 * only in the length of a numeric suffix. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <sqlite3.h>

#include "index.h"
#include "index_db.h"
#include "runner.h"

/* A fresh index in /tmp; path gets its name (the caller removes it). */
static hs_index *fresh_index(char *path, size_t n)
{
    snprintf(path, n, "/tmp/hs_index_XXXXXX");
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    hs_index *ix = NULL;
    CU_ASSERT_EQUAL_FATAL(hs_index_open(&ix, path), HS_OK);
    return ix;
}

static void remove_index(const char *path)
{
    char side[600];
    remove(path);
    snprintf(side, sizeof side, "%s-wal", path);
    remove(side);
    snprintf(side, sizeof side, "%s-shm", path);
    remove(side);
}

static int64_t add_run(hs_index *ix, const char *kind, const char *model_sha, const char *status)
{
    hs_run_info info = { .kind = kind, .model_path = "models/m", .model_sha256 = model_sha,
                         .data_path = "d.bin", .args = "[\"headscope\"]" };
    int64_t id = 0;
    CU_ASSERT_EQUAL_FATAL(hs_index_run_begin(ix, &info, &id), HS_OK);
    if (status)
        CU_ASSERT_EQUAL_FATAL(hs_index_run_finish(ix, id, status, NULL), HS_OK);
    return id;
}

static void test_empty_index_reads_as_nothing(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    hs_run_list runs;
    CU_ASSERT_EQUAL(hs_index_runs(ix, NULL, NULL, &runs), HS_OK);
    CU_ASSERT_EQUAL(runs.n, 0);
    hs_run_list_free(&runs);
    int64_t run = 99;
    CU_ASSERT_EQUAL(hs_index_latest_complete(ix, "ablate", NULL, &run), HS_OK);
    CU_ASSERT_EQUAL(run, 0);
    run = 99;
    CU_ASSERT_EQUAL(hs_index_latest_with_metric(ix, "induction", &run), HS_OK);
    CU_ASSERT_EQUAL(run, 0);
    run = 99;
    CU_ASSERT_EQUAL(hs_index_latest_with_curve(ix, "pruning", &run), HS_OK);
    CU_ASSERT_EQUAL(run, 0);
    hs_metric_grid g;
    CU_ASSERT_EQUAL(hs_index_metric_grid(ix, 1, "induction", &g), HS_OK);
    CU_ASSERT(g.count == 0 && g.n_layer == 0 && g.n_head == 0 && !g.cell && !g.present);
    int layer[2], head[2];
    CU_ASSERT_EQUAL(hs_metric_grid_top(&g, 2, layer, head), 0);
    hs_metric_grid_free(&g);
    hs_metric_series s;
    CU_ASSERT_EQUAL(hs_index_metric_series(ix, 1, "val_loss_heads_", &s), HS_OK);
    CU_ASSERT_EQUAL(s.n, 0);
    hs_metric_series_free(&s);
    hs_curve c;
    CU_ASSERT_EQUAL(hs_index_curve_get(ix, 1, "pruning", &c), HS_OK);
    CU_ASSERT_EQUAL(c.n, 0);
    hs_curve_free(&c);
    hs_artifact_list a;
    CU_ASSERT_EQUAL(hs_index_artifacts(ix, 1, &a), HS_OK);
    CU_ASSERT_EQUAL(a.n, 0);
    hs_artifact_list_free(&a);
    hs_metric_grid_free(&g); /* a second free of a freed struct is harmless */
    hs_index_close(ix);
    remove_index(path);
}

static void test_open_read_refuses_missing_and_foreign_files(void)
{
    hs_index *ix = (hs_index *)1;
    CU_ASSERT_EQUAL(hs_index_open_read(&ix, "/tmp/hs_no_such_index.db"), HS_EIO);
    CU_ASSERT_PTR_NULL(ix);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "hs_no_such_index.db"));
    CU_ASSERT_NOT_EQUAL(access("/tmp/hs_no_such_index.db", F_OK), 0); /* never created */

    char junk[] = "/tmp/hs_index_junk_XXXXXX";
    int fd = mkstemp(junk);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(write(fd, "not a database, not at all, no\n", 31), 31);
    close(fd);
    CU_ASSERT_EQUAL(hs_index_open_read(&ix, junk), HS_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "not a headscope index"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), junk));
    remove(junk);

    /* an empty file is an empty SQLite database, but no index */
    char empty[] = "/tmp/hs_index_empty_XXXXXX";
    fd = mkstemp(empty);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_EQUAL(hs_index_open_read(&ix, empty), HS_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "no table 'runs'"));
    remove(empty);
}

static void test_runs_and_latest_complete_skip_unfinished_runs(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    int64_t a1 = add_run(ix, "ablate", "aaaa", "complete");
    int64_t b1 = add_run(ix, "ablate", "bbbb", "complete");
    int64_t a2 = add_run(ix, "ablate", "aaaa", "failed");
    int64_t a3 = add_run(ix, "ablate", "aaaa", NULL); /* still running */
    int64_t t1 = add_run(ix, "train", NULL, "complete");
    (void)a2, (void)a3;
    int64_t run;
    CU_ASSERT_EQUAL(hs_index_latest_complete(ix, "ablate", NULL, &run), HS_OK);
    CU_ASSERT_EQUAL(run, b1);
    CU_ASSERT_EQUAL(hs_index_latest_complete(ix, "ablate", "aaaa", &run), HS_OK);
    CU_ASSERT_EQUAL(run, a1);
    CU_ASSERT_EQUAL(hs_index_latest_complete(ix, "ablate", "cccc", &run), HS_OK);
    CU_ASSERT_EQUAL(run, 0);
    CU_ASSERT_EQUAL(hs_index_latest_complete(ix, "prune", NULL, &run), HS_OK);
    CU_ASSERT_EQUAL(run, 0);

    hs_run_list all, done;
    CU_ASSERT_EQUAL_FATAL(hs_index_runs(ix, NULL, NULL, &all), HS_OK);
    CU_ASSERT_EQUAL_FATAL(all.n, 5);
    for (int i = 0; i < all.n; i++)
        CU_ASSERT_EQUAL(all.runs[i].run_id, i + 1); /* oldest first */
    CU_ASSERT_STRING_EQUAL(all.runs[3].status, "running");
    CU_ASSERT_PTR_NULL(all.runs[3].finished_at);
    CU_ASSERT_PTR_NOT_NULL(all.runs[3].started_at);
    CU_ASSERT_STRING_EQUAL(all.runs[0].model_path, "models/m");
    CU_ASSERT_STRING_EQUAL(all.runs[0].model_sha256, "aaaa");
    CU_ASSERT_STRING_EQUAL(all.runs[0].args, "[\"headscope\"]");
    CU_ASSERT_PTR_NULL(all.runs[0].data_sha256); /* NULL in the index: NULL here */
    CU_ASSERT_PTR_NULL(all.runs[4].model_sha256);
    CU_ASSERT_EQUAL(hs_index_runs(ix, "ablate", "complete", &done), HS_OK);
    CU_ASSERT_EQUAL(done.n, 2);
    CU_ASSERT(done.n == 2 && done.runs[0].run_id == a1 && done.runs[1].run_id == b1);
    hs_run_list_free(&done);
    CU_ASSERT_EQUAL(hs_index_runs(ix, NULL, "complete", &done), HS_OK);
    CU_ASSERT(done.n == 3 && done.runs[2].run_id == t1);
    hs_run_list_free(&done);
    hs_run_list_free(&all);
    CU_ASSERT(all.n == 0 && !all.runs);
    hs_index_close(ix);
    remove_index(path);
}

static void test_metric_grid_has_the_rows_shape_and_absent_cells(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    int64_t run = add_run(ix, "induction", NULL, "complete");
    int64_t other = add_run(ix, "induction", NULL, "complete");
    /* layer 1 has heads 0..2, layer 0 only head 1; plus a model-wide row,
     * a per-layer row (head -1) and another metric and run */
    const hs_metric_row rows[] = {
        { 1, 2, "induction", 0.25, 0.01, 8, NULL }, { 0, 1, "induction", 0.75, 0.02, 8, NULL },
        { 1, 0, "induction", 0.75, 0.03, 8, NULL }, { 1, 1, "induction", NAN, 0.0, 8, NULL },
        { -1, -1, "induction", 9.0, 0.0, 1, NULL }, { 0, -1, "induction", 7.0, 0.0, 1, NULL },
        { 0, 0, "induction_control", 0.1, 0.0, 8, NULL },
    };
    CU_ASSERT_EQUAL_FATAL(hs_index_metrics_add(ix, run, rows, 7), HS_OK);
    const hs_metric_row later = { 0, 0, "induction", 0.5, 0.0, 8, NULL };
    CU_ASSERT_EQUAL_FATAL(hs_index_metrics_add(ix, other, &later, 1), HS_OK);

    hs_metric_grid g;
    CU_ASSERT_EQUAL_FATAL(hs_index_metric_grid(ix, run, "induction", &g), HS_OK);
    CU_ASSERT_EQUAL(g.n_layer, 2);
    CU_ASSERT_EQUAL(g.n_head, 3);
    CU_ASSERT_EQUAL(g.count, 4);
    const unsigned char present[6] = { 0, 1, 0, 1, 1, 1 };
    for (int c = 0; c < 6; c++)
        CU_ASSERT_EQUAL(g.present[c], present[c]);
    CU_ASSERT_DOUBLE_EQUAL(g.cell[1].value, 0.75, 0);
    CU_ASSERT_DOUBLE_EQUAL(g.cell[1].stderr_value, 0.02, 0);
    CU_ASSERT_EQUAL(g.cell[1].n, 8);
    CU_ASSERT_DOUBLE_EQUAL(g.cell[5].value, 0.25, 0);
    CU_ASSERT(isnan(g.cell[0].value)); /* absent, not 0 */
    CU_ASSERT(isnan(g.cell[4].value)); /* a NaN written reads back as NaN */

    /* top heads: by value, ties by (layer, head), NaN last */
    int layer[6], head[6];
    CU_ASSERT_EQUAL(hs_metric_grid_top(&g, 6, layer, head), 4);
    const int want[4][2] = { { 0, 1 }, { 1, 0 }, { 1, 2 }, { 1, 1 } };
    for (int i = 0; i < 4; i++)
        CU_ASSERT(layer[i] == want[i][0] && head[i] == want[i][1]);
    CU_ASSERT_EQUAL(hs_metric_grid_top(&g, 1, layer, head), 1);
    CU_ASSERT(layer[0] == 0 && head[0] == 1);
    hs_metric_grid_free(&g);

    /* an absent metric: an empty grid, not an error */
    CU_ASSERT_EQUAL(hs_index_metric_grid(ix, run, "no_such_metric", &g), HS_OK);
    CU_ASSERT_EQUAL(g.count, 0);
    hs_metric_grid_free(&g);
    /* model-wide and per-layer rows through metric_get */
    hs_metric_value v = { 0, 0, 0 };
    int found = 0;
    CU_ASSERT_EQUAL(hs_index_metric_get(ix, run, -1, -1, "induction", &v, &found), HS_OK);
    CU_ASSERT(found && v.value == 9.0 && v.n == 1);
    CU_ASSERT_EQUAL(hs_index_metric_get(ix, run, 0, -1, "induction", &v, &found), HS_OK);
    CU_ASSERT(found && v.value == 7.0);
    CU_ASSERT_EQUAL(hs_index_metric_get(ix, run, 0, 0, "induction", &v, &found), HS_OK);
    CU_ASSERT_EQUAL(found, 0);
    /* the latest run holding a metric, whatever its kind */
    int64_t latest;
    CU_ASSERT_EQUAL(hs_index_latest_with_metric(ix, "induction", &latest), HS_OK);
    CU_ASSERT_EQUAL(latest, other);
    CU_ASSERT_EQUAL(hs_index_latest_with_metric(ix, "induction_control", &latest), HS_OK);
    CU_ASSERT_EQUAL(latest, run);
    hs_index_close(ix);
    remove_index(path);
}

static void test_grid_refuses_an_absurd_layer_index(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    int64_t run = add_run(ix, "ablate", NULL, "complete");
    const hs_metric_row row = { 2000000000, 0, "loss_delta_zero", 1, 0, 1, NULL };
    CU_ASSERT_EQUAL_FATAL(hs_index_metrics_add(ix, run, &row, 1), HS_OK);
    hs_metric_grid g;
    CU_ASSERT_EQUAL(hs_index_metric_grid(ix, run, "loss_delta_zero", &g), HS_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "loss_delta_zero"));
    CU_ASSERT(g.count == 0 && !g.cell);
    hs_index_close(ix);
    remove_index(path);
}

/* The head-count experiment's rows: val_loss_heads_H for H = 1, 2, 12, 4,
 * beside names a fixed-offset substr or a LIKE pattern would also take. */
static void test_metric_series_parses_suffixes_of_any_length(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    int64_t run = add_run(ix, "experiment", NULL, "complete");
    const hs_metric_row rows[] = {
        { -1, -1, "val_loss_heads_12", 3.12, 0.12, 2, NULL },
        { -1, -1, "val_loss_heads_2", 3.02, 0.02, 2, NULL },
        { -1, -1, "val_loss_heads_1", 3.01, 0.01, 2, NULL },
        { -1, -1, "val_loss_heads_4", 3.04, 0.04, 3, NULL },
        { -1, -1, "val_loss_heads_2_seed_1", 9, 0, 1, NULL }, /* not prefix + integer */
        { -1, -1, "val_loss_heads_", 9, 0, 1, NULL },
        { -1, -1, "val_loss_headsX7", 9, 0, 1, NULL },        /* LIKE's _ would match */
        { -1, -1, "forward_ms_heads_2", 5, 0, 1, NULL },
        { 0, 0, "val_loss_heads_3", 9, 0, 1, NULL },          /* not model-wide */
    };
    CU_ASSERT_EQUAL_FATAL(hs_index_metrics_add(ix, run, rows, 9), HS_OK);
    hs_metric_series s;
    CU_ASSERT_EQUAL_FATAL(hs_index_metric_series(ix, run, "val_loss_heads_", &s), HS_OK);
    CU_ASSERT_EQUAL_FATAL(s.n, 4);
    const long long keys[4] = { 1, 2, 4, 12 };
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(s.key[i], keys[i]);
        CU_ASSERT_DOUBLE_EQUAL(s.v[i].value, 3.0 + keys[i] / 100.0, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(s.v[i].stderr_value, keys[i] / 100.0, 1e-12);
    }
    CU_ASSERT_EQUAL(s.v[2].n, 3);
    hs_metric_series_free(&s);
    CU_ASSERT(s.n == 0 && !s.key && !s.v);
    /* a prefix of another length works the same */
    CU_ASSERT_EQUAL(hs_index_metric_series(ix, run, "forward_ms_heads_", &s), HS_OK);
    CU_ASSERT(s.n == 1 && s.key[0] == 2);
    hs_metric_series_free(&s);
    CU_ASSERT_EQUAL(hs_index_metric_series(ix, run, "val_loss", &s), HS_OK);
    CU_ASSERT_EQUAL(s.n, 0); /* the rest is not an integer */
    hs_metric_series_free(&s);
    hs_index_close(ix);
    remove_index(path);
}

static void test_curves_are_read_by_exact_name_in_step_order(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    int64_t run = add_run(ix, "induction", NULL, "complete");
    int64_t exp = add_run(ix, "experiment", NULL, NULL); /* running */
    const hs_curve_point draws[3] = { { 2, 2, 0.3 }, { 0, 0, 0.1 }, { 1, 1, 0.2 } };
    const hs_curve_point ten[2] = { { 0, 0, 10 }, { 1, 1, 11 } };
    CU_ASSERT_EQUAL_FATAL(hs_index_curve_add(ix, run, "causal_random_k", draws, 3), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_index_curve_add(ix, run, "causal_random_k10", ten, 2), HS_OK);
    const hs_curve_point h2[1] = { { 5, 100, 2.0 } }, h12[2] = { { 5, 100, 12.0 }, { 6, 120, 12.5 } };
    CU_ASSERT_EQUAL_FATAL(hs_index_curve_add(ix, exp, "train_loss_heads_2_seed_1", h2, 1), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_index_curve_add(ix, exp, "train_loss_heads_12_seed_1", h12, 2), HS_OK);

    hs_curve c;
    CU_ASSERT_EQUAL_FATAL(hs_index_curve_get(ix, run, "causal_random_k", &c), HS_OK);
    CU_ASSERT_EQUAL_FATAL(c.n, 3);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(c.p[i].step, i);
        CU_ASSERT_DOUBLE_EQUAL(c.p[i].y, 0.1 * (i + 1), 1e-12);
    }
    hs_curve_free(&c);
    CU_ASSERT_EQUAL(hs_index_curve_get(ix, run, "causal_random_k10", &c), HS_OK);
    CU_ASSERT(c.n == 2 && c.p[0].y == 10 && c.p[1].y == 11);
    hs_curve_free(&c);
    CU_ASSERT_EQUAL(hs_index_curve_get(ix, exp, "train_loss_heads_2_seed_1", &c), HS_OK);
    CU_ASSERT(c.n == 1 && c.p[0].y == 2.0 && c.p[0].x == 100);
    hs_curve_free(&c);
    CU_ASSERT_EQUAL(hs_index_curve_get(ix, exp, "train_loss_heads_12_seed_1", &c), HS_OK);
    CU_ASSERT(c.n == 2 && c.p[0].y == 12.0);
    hs_curve_free(&c);
    CU_ASSERT_EQUAL(hs_index_curve_get(ix, exp, "train_loss_heads_1", &c), HS_OK);
    CU_ASSERT_EQUAL(c.n, 0);
    hs_curve_free(&c);
    /* a running run's curve is found by name: plot's default --run */
    int64_t latest;
    CU_ASSERT_EQUAL(hs_index_latest_with_curve(ix, "train_loss_heads_12_seed_1", &latest), HS_OK);
    CU_ASSERT_EQUAL(latest, exp);
    CU_ASSERT_EQUAL(hs_index_latest_with_curve(ix, "causal_random_k", &latest), HS_OK);
    CU_ASSERT_EQUAL(latest, run);
    CU_ASSERT_EQUAL(hs_index_latest_with_curve(ix, "causal_random", &latest), HS_OK);
    CU_ASSERT_EQUAL(latest, 0);
    hs_index_close(ix);
    remove_index(path);
}

static void test_artifacts_and_a_read_only_handle(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    int64_t run = add_run(ix, "capture", NULL, "complete");
    CU_ASSERT_EQUAL(hs_index_artifact_add(ix, run, "/data/partial.h5", NULL, 10, 0), HS_OK);
    CU_ASSERT_EQUAL(hs_index_artifact_add(ix, run, "/data/m.h5", "abcd", 4096, 1), HS_OK);
    const hs_metric_row row = { 0, 0, "entropy", 1.5, 0.1, 4, NULL };
    CU_ASSERT_EQUAL(hs_index_metrics_add(ix, run, &row, 1), HS_OK);
    hs_index_close(ix);

    /* the reads also work on a handle opened for reading only */
    CU_ASSERT_EQUAL_FATAL(hs_index_open_read(&ix, path), HS_OK);
    hs_artifact_list a;
    CU_ASSERT_EQUAL_FATAL(hs_index_artifacts(ix, run, &a), HS_OK);
    CU_ASSERT_EQUAL_FATAL(a.n, 2);
    CU_ASSERT_STRING_EQUAL(a.a[0].path, "/data/partial.h5");
    CU_ASSERT_PTR_NULL(a.a[0].sha256);
    CU_ASSERT_EQUAL(a.a[0].complete, 0);
    CU_ASSERT_STRING_EQUAL(a.a[1].path, "/data/m.h5");
    CU_ASSERT_STRING_EQUAL(a.a[1].sha256, "abcd");
    CU_ASSERT_EQUAL(a.a[1].bytes, 4096);
    CU_ASSERT_EQUAL(a.a[1].complete, 1);
    hs_artifact_list_free(&a);
    hs_metric_grid g;
    CU_ASSERT_EQUAL(hs_index_metric_grid(ix, run, "entropy", &g), HS_OK);
    CU_ASSERT(g.count == 1 && g.cell[0].value == 1.5);
    hs_metric_grid_free(&g);
    /* and it cannot write */
    const hs_curve_point p = { 0, 0, 0 };
    CU_ASSERT_NOT_EQUAL(hs_index_curve_add(ix, run, "x", &p, 1), HS_OK);
    hs_index_close(ix);
    remove_index(path);
}

/* A patching sweep's residual rows (SPEC §11) as a layer x position grid:
 * shaped by the rows, cells without a row absent, NaN kept, another
 * metric or run left out, the latest run found by metric. */
static void test_position_grid_has_the_rows_shape_and_absent_cells(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    int64_t r1 = add_run(ix, "patch", NULL, "complete"), r2 = add_run(ix, "patch", NULL, "complete");
    hs_position_row rows[] = {
        { 0, 0, "patch_resid_pre", 0.1, 0.01, 8, -1 }, { 0, 4, "patch_resid_pre", 0.9, 0.02, 8, -1 },
        { 2, 1, "patch_resid_pre", NAN, 0, 8, -1 },    { 1, 3, "patch_attn_out", 0.5, 0.01, 8, -1 },
    };
    CU_ASSERT_EQUAL_FATAL(hs_index_position_metrics_add(ix, r1, rows, 4), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_index_position_metrics_add(ix, r2, rows + 3, 1), HS_OK);
    hs_position_grid g;
    CU_ASSERT_EQUAL_FATAL(hs_index_position_grid(ix, r1, "patch_resid_pre", &g), HS_OK);
    CU_ASSERT_EQUAL(g.n_layer, 3);
    CU_ASSERT_EQUAL(g.n_pos, 5);
    CU_ASSERT_EQUAL(g.count, 3);
    CU_ASSERT(g.present[0] && g.present[4] && g.present[2 * 5 + 1] && !g.present[1 * 5 + 3]);
    CU_ASSERT_DOUBLE_EQUAL(g.cell[4].value, 0.9, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(g.cell[4].stderr_value, 0.02, 1e-12);
    CU_ASSERT_EQUAL(g.cell[4].n, 8);
    CU_ASSERT(isnan(g.cell[2 * 5 + 1].value));
    CU_ASSERT(isnan(g.cell[1].value)); /* absent */
    hs_position_grid_free(&g);
    hs_position_grid_free(&g); /* twice is harmless */
    CU_ASSERT_EQUAL(hs_index_position_grid(ix, r2, "patch_resid_pre", &g), HS_OK);
    CU_ASSERT(g.count == 0 && g.n_layer == 0 && !g.cell);
    int64_t run = 0;
    CU_ASSERT_EQUAL(hs_index_latest_with_position_metric(ix, "patch_attn_out", &run), HS_OK);
    CU_ASSERT_EQUAL(run, r2);
    CU_ASSERT_EQUAL(hs_index_latest_with_position_metric(ix, "patch_mlp_out", &run), HS_OK);
    CU_ASSERT_EQUAL(run, 0);
    const hs_position_row bad = { 0, -3, "patch_mlp_out", 1, 0, 1, -1 };
    CU_ASSERT_EQUAL_FATAL(hs_index_position_metrics_add(ix, r2, &bad, 1), HS_OK);
    CU_ASSERT_EQUAL(hs_index_position_grid(ix, r2, "patch_mlp_out", &g), HS_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "position -3"));
    CU_ASSERT(g.count == 0 && !g.cell);
    hs_index_close(ix);
    remove_index(path);
}

/* Composition rows read back in (layer_a, head_a, layer_b, head_b) order,
 * one metric of one run. */
static void test_pair_metrics_read_in_head_order(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    int64_t r1 = add_run(ix, "composition", NULL, "complete");
    int64_t r2 = add_run(ix, "composition", NULL, "complete");
    hs_pair_row rows[] = {
        { 1, 0, 2, 1, "k_composition", 0.4 }, { 0, 1, 1, 0, "k_composition", 0.3 },
        { 0, 0, 2, 0, "k_composition", 0.2 }, { 0, 0, 1, 1, "k_composition", 0.1 },
        { 0, 0, 1, 1, "k_composition_control", 0.05 },
    };
    CU_ASSERT_EQUAL_FATAL(hs_index_pair_metrics_add(ix, r1, rows, 5), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_index_pair_metrics_add(ix, r2, rows, 1), HS_OK);
    hs_pair_list l;
    CU_ASSERT_EQUAL_FATAL(hs_index_pair_metrics(ix, r1, "k_composition", &l), HS_OK);
    CU_ASSERT_EQUAL_FATAL(l.n, 4);
    const double want[] = { 0.1, 0.2, 0.3, 0.4 };
    for (int i = 0; i < 4; i++)
        CU_ASSERT_DOUBLE_EQUAL(l.p[i].value, want[i], 1e-12);
    CU_ASSERT(l.p[1].layer_a == 0 && l.p[1].head_a == 0 && l.p[1].layer_b == 2 && l.p[1].head_b == 0);
    hs_pair_list_free(&l);
    CU_ASSERT_EQUAL(hs_index_pair_metrics(ix, r1, "q_composition", &l), HS_OK);
    CU_ASSERT_EQUAL(l.n, 0);
    int64_t run = 0;
    CU_ASSERT_EQUAL(hs_index_latest_with_pair_metric(ix, "k_composition", &run), HS_OK);
    CU_ASSERT_EQUAL(run, r2);
    CU_ASSERT_EQUAL(hs_index_latest_with_pair_metric(ix, "k_composition_control", &run), HS_OK);
    CU_ASSERT_EQUAL(run, r1);
    hs_index_close(ix);
    remove_index(path);
}

/* Per-layer rows (head -1) by layer: the logit lens curve; model-wide and
 * per-head rows of the same metric are not part of it. */
static void test_layer_series_reads_per_layer_rows(void)
{
    char path[64];
    hs_index *ix = fresh_index(path, sizeof path);
    int64_t run = add_run(ix, "dla", NULL, "complete");
    const hs_metric_row rows[] = {
        { 2, -1, "dla", 0.3, 0.1, 4, NULL }, { 0, -1, "dla", 0.1, 0.1, 4, NULL }, { -1, -1, "dla", 9, 0, 4, NULL },
        { 1, 0, "dla", 7, 0, 4, NULL },      { 1, -1, "dla", 0.2, 0.1, 4, NULL }, { 1, -1, "dla_x", 5, 0, 4, NULL },
    };
    CU_ASSERT_EQUAL_FATAL(hs_index_metrics_add(ix, run, rows, 6), HS_OK);
    hs_metric_series s;
    CU_ASSERT_EQUAL_FATAL(hs_index_layer_series(ix, run, "dla", &s), HS_OK);
    CU_ASSERT_EQUAL_FATAL(s.n, 3);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(s.key[i], i);
        CU_ASSERT_DOUBLE_EQUAL(s.v[i].value, 0.1 * (i + 1), 1e-12);
    }
    hs_metric_series_free(&s);
    hs_index_close(ix);
    remove_index(path);
}

/* An index written before schema 3 has neither of SPEC §11's tables: its
 * readers give no rows, not an error, so report and plot still work on it. */
static void test_causal_readers_on_an_index_without_the_tables(void)
{
    char path[64] = "/tmp/hs_index_XXXXXX";
    const int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    sqlite3 *db; /* version 2 as its migrations made it, with one run */
    CU_ASSERT_EQUAL_FATAL(sqlite3_open(path, &db), SQLITE_OK);
    for (int v = 0; v < 2; v++)
        CU_ASSERT_EQUAL(sqlite3_exec(db, hs_index_migrations[v], NULL, NULL, NULL), SQLITE_OK);
    CU_ASSERT_EQUAL(sqlite3_exec(db, "INSERT INTO runs(kind, status) VALUES('ablate', 'complete');"
                                     " PRAGMA user_version=2;", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    hs_index *ix = NULL;
    CU_ASSERT_EQUAL_FATAL(hs_index_open_read(&ix, path), HS_OK);
    hs_position_grid g;
    hs_pair_list l;
    int64_t run = 7;
    CU_ASSERT_EQUAL(hs_index_position_grid(ix, 1, "patch_resid_pre", &g), HS_OK);
    CU_ASSERT_EQUAL(g.count, 0);
    CU_ASSERT_EQUAL(hs_index_pair_metrics(ix, 1, "q_composition", &l), HS_OK);
    CU_ASSERT_EQUAL(l.n, 0);
    CU_ASSERT_EQUAL(hs_index_latest_with_pair_metric(ix, "q_composition", &run), HS_OK);
    CU_ASSERT_EQUAL(run, 0);
    run = 7;
    CU_ASSERT_EQUAL(hs_index_latest_with_position_metric(ix, "patch_resid_pre", &run), HS_OK);
    CU_ASSERT_EQUAL(run, 0);
    /* nor run parameters (schema 4): none found, no error */
    char value[16] = "x";
    int found = 1;
    CU_ASSERT_EQUAL(hs_index_param_get(ix, 1, "seq_len", value, sizeof value, &found), HS_OK);
    CU_ASSERT_EQUAL(found, 0);
    CU_ASSERT_STRING_EQUAL(value, "");
    hs_index_close(ix);
    remove_index(path);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_empty_index_reads_as_nothing", test_empty_index_reads_as_nothing },
        { "test_open_read_refuses_missing_and_foreign_files",
          test_open_read_refuses_missing_and_foreign_files },
        { "test_runs_and_latest_complete_skip_unfinished_runs",
          test_runs_and_latest_complete_skip_unfinished_runs },
        { "test_metric_grid_has_the_rows_shape_and_absent_cells",
          test_metric_grid_has_the_rows_shape_and_absent_cells },
        { "test_grid_refuses_an_absurd_layer_index", test_grid_refuses_an_absurd_layer_index },
        { "test_metric_series_parses_suffixes_of_any_length",
          test_metric_series_parses_suffixes_of_any_length },
        { "test_curves_are_read_by_exact_name_in_step_order",
          test_curves_are_read_by_exact_name_in_step_order },
        { "test_artifacts_and_a_read_only_handle", test_artifacts_and_a_read_only_handle },
        { "test_position_grid_has_the_rows_shape_and_absent_cells",
          test_position_grid_has_the_rows_shape_and_absent_cells },
        { "test_pair_metrics_read_in_head_order", test_pair_metrics_read_in_head_order },
        { "test_layer_series_reads_per_layer_rows", test_layer_series_reads_per_layer_rows },
        { "test_causal_readers_on_an_index_without_the_tables",
          test_causal_readers_on_an_index_without_the_tables },
    };
    return hs_run_tests("index", tests, HS_NTESTS(tests));
}
