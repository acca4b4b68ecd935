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
 * The file is untrusted input: SQLite runs with its defensive settings (no
 * triggers, no views, no trusted schema) and, before anything is written,
 * its schema version must lie in 0..this tool's and its schema be exactly
 * the one headscope creates for that version (store/index_schema.c: tables
 * of the user's own and plain indexes are accepted; triggers, views,
 * virtual tables, UNIQUE, partial or expression indexes on our tables and
 * tables defined otherwise are not). A refused file is left byte for byte
 * as it was, its WAL too: HS_EFORMAT naming what was found ("PATH: trigger
 * 'x' on table head_metrics: not part of a headscope index, refused") or
 * the version; HS_EIO naming the file when it cannot be opened, is
 * read-only (saying why), or is not a SQLite database.
 * Marks failed the runs left `running` by a process of this host that is
 * gone (killed, or its last write failed on a full disk). */
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

/* Inserts a run with status "running", started_at now, and this process's
 * pid and host: a later hs_index_open on this host marks it failed once that
 * process is gone without finishing it. */
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
    const char *attn; /* the attention type (SPEC §17): "enc", "dec", "cross"; NULL:
                         "self" (one-stack models); an encoder-decoder's layer counts
                         within its stack */
} hs_metric_row;

/* Records rows (replacing equal keys) in one transaction. */
int hs_index_metrics_add(hs_index *ix, int64_t run_id, const hs_metric_row *rows, int n);

/* A parameter a run records about itself (run_params: its sequence length,
 * the labels of its positions), so that a figure never re-derives what the
 * run knew from its command line. Replaces an equal key. */
int hs_index_param_set(hs_index *ix, int64_t run_id, const char *key, const char *value);

/* The value of key for run_id into out (n bytes, cut to fit); *found 0 when
 * the run has no such parameter (an index of an older version has none). */
int hs_index_param_get(hs_index *ix, int64_t run_id, const char *key, char *out, size_t n,
                       int *found);

/* A number on an edge of the circuit graph (SPEC §15: edge_metrics). */
typedef struct {
    const char *sender, *receiver, *metric;
    double value, stderr_value;
    long long n;
} hs_edge_row;

/* Records rows (replacing equal keys) in one transaction. */
int hs_index_edge_metrics_add(hs_index *ix, int64_t run_id, const hs_edge_row *rows, int n);

/* A per-(layer, position) number (SPEC §11: activation patching of the
 * residual stream at one position), or per (layer, head, position) (SPEC
 * §18: sink_alpha); head -1 for the rows that are not per head. */
typedef struct {
    int layer, position;
    const char *metric;
    double value, stderr_value;
    long long n;
    int head;
} hs_position_row;

/* Records rows into position_metrics (replacing equal keys) in one
 * transaction. */
int hs_index_position_metrics_add(hs_index *ix, int64_t run_id, const hs_position_row *rows,
                                  int n);

/* SPEC §19's numbers of an SAE's feature: feature-wide (head -1:
 * frequency, mean_act; NaN is stored as NULL) or per head (head_share),
 * layer the SAE's hook layer. */
typedef struct {
    int feature, layer, head;
    const char *metric;
    double value;
} hs_feature_row;

/* A top activating example of a feature: sequence seq, its position. */
typedef struct {
    int feature;
    long long seq;
    int position;
    double value;
} hs_feature_example_row;

/* An example's direct feature attribution to head (layer, head) through
 * source position source. */
typedef struct {
    int feature;
    long long seq;
    int position, layer, head, source;
    double value;
} hs_feature_dfa_row;

/* Each records its rows (replacing equal keys) in one transaction. */
int hs_index_feature_metrics_add(hs_index *ix, int64_t run_id, const hs_feature_row *rows, int n);
int hs_index_feature_examples_add(hs_index *ix, int64_t run_id,
                                  const hs_feature_example_row *rows, int n);
int hs_index_feature_dfa_add(hs_index *ix, int64_t run_id, const hs_feature_dfa_row *rows,
                             int n);

/* A number about an ordered pair of heads, head a in an earlier layer than
 * head b (SPEC §11: composition scores). */
typedef struct {
    int layer_a, head_a, layer_b, head_b;
    const char *metric;
    double value;
} hs_pair_row;

/* Records rows into head_pair_metrics (replacing equal keys) in one
 * transaction. */
int hs_index_pair_metrics_add(hs_index *ix, int64_t run_id, const hs_pair_row *rows, int n);

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

/* ---- Reading ----------------------------------------------------------------
 * Every read of the index (report, plot, scripts in C) goes through these
 * functions, so the SQL has one owner. Results are typed copies: structs
 * with malloc'd arrays that the caller releases with the matching *_free,
 * which accepts a zeroed or already freed struct. A number the index holds
 * as NULL reads as NaN (SQLite stores a NaN written through the functions
 * above as NULL); a NULL text reads as a NULL pointer. "Absent" is never an
 * error: a missing run, metric or curve gives 0 rows, run_id 0 or found 0.
 * The functions work on a handle from either open. */

/* Opens an existing index for reading only. Unlike hs_index_open it never
 * creates the file, never migrates the schema and never changes the journal
 * mode, so `report` and `plot` can read an index another process is writing,
 * one of an earlier schema version, or one on a read-only disk or in a
 * directory this user cannot write (where SQLite cannot create the -shm
 * file of WAL mode, the file is read in SQLite's immutable mode; refused,
 * saying so, when its -wal holds changes that need one). The schema is
 * checked as hs_index_open checks it, before any read. HS_EIO "PATH: cannot
 * open the index: ..." when SQLite cannot open it (a missing file);
 * HS_EFORMAT "PATH: not a headscope index: ..." when it is not a SQLite
 * database or holds no index (schema version 0), or naming what the schema
 * check found. */
int hs_index_open_read(hs_index **ix, const char *path);

/* One row of runs; each text is NULL where the index holds NULL. */
typedef struct {
    int64_t run_id;
    char *kind, *status, *model_path, *model_sha256, *data_path, *data_sha256;
    char *args, *started_at, *finished_at;
} hs_run_record;

typedef struct {
    hs_run_record *runs; /* [n], oldest first (ascending run_id) */
    int n;
} hs_run_list;

/* The runs of `kind` (NULL: every kind) whose status is `status` (NULL: any),
 * oldest first: the provenance table of a report, or "the last three
 * training runs" read from its end. One query; cost linear in the runs. */
int hs_index_runs(hs_index *ix, const char *kind, const char *status, hs_run_list *out);
void hs_run_list_free(hs_run_list *l);

/* The latest (largest run_id) run of `kind` whose status is complete, and,
 * when model_sha256 is non-NULL, that ran on that model: what a report shows
 * for each study. A running or failed run is never chosen, since its rows
 * may be partial. *run_id = 0 when there is none. */
int hs_index_latest_complete(hs_index *ix, const char *kind, const char *model_sha256,
                             int64_t *run_id);

/* The latest run, of any kind or status, holding a row of `metric` (at any
 * layer and head) / a point of curve `curve`; 0 when none. This is plot's
 * default for --run, which names a metric, not a study. */
int hs_index_latest_with_metric(hs_index *ix, const char *metric, int64_t *run_id);
int hs_index_latest_with_curve(hs_index *ix, const char *curve, int64_t *run_id);

typedef struct {
    double value, stderr_value;
    long long n;
} hs_metric_value;

/* The row (run_id, layer, head, metric), e.g. a model-wide number at
 * layer = head = -1; *found = 0 (and *v untouched) when the run lacks it. */
int hs_index_metric_get(hs_index *ix, int64_t run_id, int layer, int head, const char *metric,
                        hs_metric_value *v, int *found);

/* The per-head values of one metric of a run as a layer x head grid. The
 * shape comes from the rows themselves (a study may cover only some layers
 * or heads): a cell without a row is absent, not 0, so a figure can show it
 * as absent. Only per-head rows (layer >= 0, head >= 0) are cells;
 * model-wide and per-layer rows (head -1) are read with hs_index_metric_get.
 * HS_EFORMAT when a layer or head index exceeds HS_INDEX_MAX_DIM. */
enum { HS_INDEX_MAX_DIM = 65536 };
typedef struct {
    int n_layer, n_head;    /* 1 + the largest layer / head with a row; 0, 0 when none */
    int count;              /* cells present (rows read) */
    hs_metric_value *cell;  /* (n_layer, n_head) */
    unsigned char *present; /* (n_layer, n_head): 1 where the run has the row */
} hs_metric_grid;

/* (The rows of attention type "self": an encoder-decoder's typed rows are
 * hs_index_attn_summary's.) */
int hs_index_metric_grid(hs_index *ix, int64_t run_id, const char *metric, hs_metric_grid *g);
void hs_metric_grid_free(hs_metric_grid *g);

/* Up to k present cells of a grid by descending value, ties broken by
 * (layer, head), NaN values last; layer[] and head[] get them. Returns how
 * many were written (min(k, g->count)). The order of "the top heads" must
 * not depend on how SQLite happened to scan, hence done here. */
int hs_metric_grid_top(const hs_metric_grid *g, int k, int *layer, int *head);

/* The model-wide rows (layer = head = -1) of a run whose metric is `prefix`
 * followed by a decimal integer and nothing else ("val_loss_heads_" gives
 * val_loss_heads_1, _2, _12, not val_loss_heads_2_seed_1), ordered by that
 * integer (key). The suffix is parsed, not cut at a fixed offset, so the
 * prefix may have any length and "12" sorts after "2". */
typedef struct {
    long long *key;       /* [n] ascending */
    hs_metric_value *v;   /* [n] */
    int n;
} hs_metric_series;

int hs_index_metric_series(hs_index *ix, int64_t run_id, const char *prefix,
                           hs_metric_series *out);
void hs_metric_series_free(hs_metric_series *s);

/* One attention type's rows of a metric (SPEC §17): an encoder-decoder's
 * heads of type attn ("enc", "dec", "cross"): how many, their mean, and the
 * largest value with its layer (within the stack) and head. */
typedef struct {
    char attn[8];
    int n;
    double mean, max;
    int max_layer, max_head;
} hs_attn_summary;

/* The summaries of run_id's per-head rows of metric by attention type other
 * than "self", in the order enc, dec, cross (*n of them, at most 3; 0 for a
 * one-stack model's run). */
int hs_index_attn_summary(hs_index *ix, int64_t run_id, const char *metric,
                          hs_attn_summary out[3], int *n);

typedef struct {
    hs_curve_point *p; /* [n] by step, then by the order they were added */
    int n;
} hs_curve;

/* The points of curve `curve` (its exact name) of a run; n = 0 when absent. */
int hs_index_curve_get(hs_index *ix, int64_t run_id, const char *curve, hs_curve *out);
void hs_curve_free(hs_curve *c);

typedef struct {
    char *path, *sha256; /* sha256 NULL where unrecorded */
    int64_t bytes;
    int complete;
} hs_artifact;

typedef struct {
    hs_artifact *a; /* [n] in the order they were recorded */
    int n;
} hs_artifact_list;

/* The files a run recorded (a capture's map file), in recording order. */
int hs_index_artifacts(hs_index *ix, int64_t run_id, hs_artifact_list *out);
void hs_artifact_list_free(hs_artifact_list *l);

/* ---- Reading SPEC §11's tables ------------------------------------------------
 * position_metrics and head_pair_metrics, with the conventions above. An
 * index older than schema 3 lacks both tables: it reads as holding no row. */

/* The latest run holding a row of `metric` in position_metrics /
 * head_pair_metrics; 0 when none (plot's default for --run). */
int hs_index_latest_with_position_metric(hs_index *ix, const char *metric, int64_t *run_id);
int hs_index_latest_with_pair_metric(hs_index *ix, const char *metric, int64_t *run_id);

/* A per-(layer, position) metric of a run (activation patching of the
 * residual stream) as a layer x position grid, shaped by its rows as
 * hs_metric_grid is: a cell without a row is absent. HS_EFORMAT when a
 * layer or position is negative or exceeds HS_INDEX_MAX_DIM. */
typedef struct {
    int n_layer, n_pos;     /* 1 + the largest layer / position with a row; 0, 0 when none */
    int count;              /* cells present */
    hs_metric_value *cell;  /* (n_layer, n_pos) */
    unsigned char *present; /* (n_layer, n_pos) */
} hs_position_grid;

int hs_index_position_grid(hs_index *ix, int64_t run_id, const char *metric, hs_position_grid *g);
void hs_position_grid_free(hs_position_grid *g);

/* The rows of one head-pair metric of a run (composition scores), ordered
 * by (layer_a, head_a, layer_b, head_b). HS_EFORMAT when a layer or head
 * is negative or exceeds HS_INDEX_MAX_DIM. */
typedef struct {
    int layer_a, head_a, layer_b, head_b;
    double value;
} hs_pair_value;

typedef struct {
    hs_pair_value *p; /* [n] */
    int n;
} hs_pair_list;

int hs_index_pair_metrics(hs_index *ix, int64_t run_id, const char *metric, hs_pair_list *out);
void hs_pair_list_free(hs_pair_list *l);

/* The per-layer rows (layer >= 0, head = -1) of a metric of a run, keyed by
 * layer in ascending order: the logit lens curve (logit_lens_loss of layer
 * 0 .. L), the MLPs' direct logit attribution (dla at head -1). HS_EFORMAT
 * when a layer exceeds HS_INDEX_MAX_DIM. */
int hs_index_layer_series(hs_index *ix, int64_t run_id, const char *metric,
                          hs_metric_series *out);

/* ---- Reading SPEC §15's edge_metrics -----------------------------------------------
 * An index older than schema 4 lacks the table: it reads as holding no row. */

/* The latest run holding a row of `metric` in edge_metrics; 0 when none. */
int hs_index_latest_with_edge_metric(hs_index *ix, const char *metric, int64_t *run_id);

/* One edge's row; its names (nodes and receivers such as "a1.h0<q>") are at
 * most HS_EDGE_NAME - 1 bytes, HS_EFORMAT otherwise. */
enum { HS_EDGE_NAME = 32 };
typedef struct {
    char sender[HS_EDGE_NAME], receiver[HS_EDGE_NAME];
    hs_metric_value v;
} hs_edge_value;

typedef struct {
    hs_edge_value *e; /* [n] by (sender, receiver) in name order */
    int n;
} hs_edge_list;

int hs_index_edge_metrics(hs_index *ix, int64_t run_id, const char *metric, hs_edge_list *out);
void hs_edge_list_free(hs_edge_list *l);

/* ---- Reading SPEC §19's tables -------------------------------------------------
 * A features run's rows (none from an index older than schema 6), each
 * column checked in range (HS_EFORMAT naming the table otherwise); the
 * arrays malloc'd. */

/* Metric's rows (metric NULL in each) ordered by feature and head. */
int hs_index_feature_metric(hs_index *ix, int64_t run_id, const char *metric,
                            hs_feature_row **rows, int *n);
/* Every example, by feature, then value descending, then (seq, position). */
int hs_index_feature_examples(hs_index *ix, int64_t run_id, hs_feature_example_row **rows, int *n);
/* Feature's attributions, by (seq, position, head, source). */
int hs_index_feature_dfa(hs_index *ix, int64_t run_id, int feature, hs_feature_dfa_row **rows,
                         int *n);

#endif
