/* The SQLite results index (SPEC §7): runs with their provenance, per-head
 * metrics, curves and artifacts. WAL journal, foreign keys on, schema
 * version in PRAGMA user_version, prepared statements, one transaction per
 * batch of results; a busy timeout lets several processes share one file. */
#ifndef HS_INDEX_H
#define HS_INDEX_H

#include <stdint.h>

#include "common.h"

typedef struct hs_index hs_index; /* struct hs_index: see index.c */

/* Opens or creates the index, migrating the schema to the current version.
 * HS_EIO naming the file when it cannot be opened, is read-only, or is not a
 * SQLite database; HS_EFORMAT when its schema is newer than this tool's. */
int hs_index_open(hs_index **ix, const char *path);
void hs_index_close(hs_index *ix);

typedef struct {
    const char *kind;        /* command name: train, eval, ablate, ... */
    const char *model_path;
    const char *model_sha256;
    const char *data_path;
    const char *data_sha256;
    const char *args;        /* the command line as JSON */
} hs_run_info;

/* Inserts a run with status "running" and started_at now. */
int hs_index_run_begin(hs_index *ix, const hs_run_info *info, int64_t *run_id);

/* Sets status ("complete" or "failed") and finished_at; model_sha256 may be
 * non-NULL to record the model a run produced. */
int hs_index_run_finish(hs_index *ix, int64_t run_id, const char *status,
                        const char *model_sha256);

typedef struct {
    int64_t step;
    double x, y;
} hs_curve_point;

/* Appends points to curve `curve` of a run, in one transaction. */
int hs_index_curve_add(hs_index *ix, int64_t run_id, const char *curve, const hs_curve_point *p,
                       int n);

int hs_index_artifact_add(hs_index *ix, int64_t run_id, const char *path, const char *sha256,
                          int64_t bytes, int complete);

typedef struct {
    int layer, head; /* -1, -1 for model-wide numbers */
    const char *metric;
    double value, stderr_value;
    long long n;
} hs_metric_row;

/* Records rows (replacing equal keys) in one transaction. */
int hs_index_metrics_add(hs_index *ix, int64_t run_id, const hs_metric_row *rows, int n);

/* *exists = 1 when the run has that metric row. */
int hs_index_metric_exists(hs_index *ix, int64_t run_id, int layer, int head, const char *metric,
                           int *exists);

/* The provenance of an existing run, for --resume: kind, model and data
 * sha256 (each buffer 80 bytes), status (16) and the command line (args_size).
 * HS_EINVAL if no such run. */
int hs_index_run_get(hs_index *ix, int64_t run_id, char *kind, char *model_sha256,
                     char *data_sha256, char *status, char *args, size_t args_size);

/* Marks a resumed run running again. */
int hs_index_run_reopen(hs_index *ix, int64_t run_id);

#endif
