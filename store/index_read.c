/* The read half of the index (index.h, "Reading"): typed copies of runs,
 * metric rows, grids, series, curves and artifacts. Each function runs one
 * prepared statement and copies its rows out, so no statement outlives a
 * call and the caller never sees SQLite. */
#include "index_db.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "file:PATH?mode=ro&immutable=1": PATH as a URI, every byte outside the
 * unreserved set and '/' percent-encoded. */
static int immutable_uri(char *uri, size_t n, const char *path)
{
    size_t k = (size_t)snprintf(uri, n, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p && k + 4 < n; p++)
        k += (size_t)(strchr("/._~-", *p) || (*p < 0x80 && isalnum(*p))
                          ? snprintf(uri + k, n - k, "%c", *p)
                          : snprintf(uri + k, n - k, "%%%02X", *p));
    return k + 24 < n ? (snprintf(uri + k, n - k, "?mode=ro&immutable=1"), 0) : -1;
}

/* The SQLite error of a WAL-mode file on a disk or in a directory this user
 * cannot write: SQLite could not create the -shm file it reads through. */
static int wal_unreadable(const hs_index *ix)
{
    const int code = ix->code & 0xff;
    return code == SQLITE_CANTOPEN || code == SQLITE_READONLY;
}

/* Opens path and checks its schema; read_only: SQLite's immutable mode
 * (no locks, no -shm), for a file nobody can be writing; hold_wal: no
 * checkpoint at close (frames in the WAL stay there). */
static int open_checked(hs_index *ix, const char *path, int read_only, int hold_wal, int *v)
{
    char uri[1600];
    if (read_only && immutable_uri(uri, sizeof uri, path))
        return hs_fail(HS_EIO, "%s: path too long", path);
    int rc = read_only ? hs_index_db_open(ix, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI)
                       : hs_index_db_open(ix, path, SQLITE_OPEN_READWRITE);
    snprintf(ix->path, sizeof ix->path, "%s", path);
    if (!rc && hold_wal)
        sqlite3_db_config(ix->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    if (!rc)
        rc = sqlite3_exec(ix->db, "PRAGMA query_only=1", NULL, NULL, NULL) == SQLITE_OK
                 ? HS_OK : hs_index_db_error(ix, "opening for reading only");
    if (!rc)
        rc = hs_index_schema_check(ix, v);
    return rc;
}

int hs_index_open_read(hs_index **out, const char *path)
{
    *out = NULL;
    hs_index *ix = hs_calloc(1, sizeof *ix, "index");
    if (!ix)
        return HS_ENOMEM;
    /* Read-write where the file allows it (SQLite falls back to read-only
     * by itself) but query_only: the last connection to close then removes
     * the -wal and -shm files a WAL-mode read creates, as a writer's does.
     * A WAL holding frames at the open is never checkpointed by a reader. */
    const int had_wal = hs_index_wal_frames(path);
    int v = 0, rc = open_checked(ix, path, 0, had_wal, &v);
    if (rc && ix->db && wal_unreadable(ix) && access(path, F_OK) == 0) {
        char why[1400];
        hs_index_readonly_reason(path, why, sizeof why);
        sqlite3_close(ix->db);
        ix->db = NULL;
        rc = had_wal ? hs_fail(HS_EIO, "%s: cannot be read here (%s): %s-wal holds changes "
                               "that SQLite reads only through a %s-shm file it cannot create",
                               path, *why ? why : "read-only", path, path)
                     : open_checked(ix, path, 1, 0, &v);
    }
    if (rc == HS_EIO && ix->db && ((ix->code & 0xff) == SQLITE_NOTADB ||
                                   (ix->code & 0xff) == SQLITE_CORRUPT))
        rc = hs_fail(HS_EFORMAT, "%s: not a headscope index: %s", path, sqlite3_errstr(ix->code));
    if (!rc && v == 0)
        rc = hs_fail(HS_EFORMAT, "%s: not a headscope index: no table 'runs' (an empty database "
                     "or another program's, schema version 0)", path);
    if (rc) {
        hs_index_close(ix);
        return rc;
    }
    *out = ix;
    return HS_OK;
}

static int prepare(hs_index *ix, const char *sql, sqlite3_stmt **st, const char *what)
{
    return sqlite3_prepare_v2(ix->db, sql, -1, st, NULL) == SQLITE_OK ? HS_OK
                                                                      : hs_index_db_error(ix, what);
}

static void bind_opt_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

/* A NULL number is a NaN the writer stored (SQLite keeps no NaN). */
static double column_number(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static hs_metric_value column_metric(sqlite3_stmt *st, int i)
{
    return (hs_metric_value){ column_number(st, i), column_number(st, i + 1),
                              (long long)sqlite3_column_int64(st, i + 2) };
}

/* A malloc'd copy of a text column, NULL for NULL; *rc = HS_ENOMEM when the
 * copy fails. */
static char *column_dup(sqlite3_stmt *st, int i, int *rc)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    if (!s)
        return NULL;
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    char *d = malloc(n + 1);
    if (!d) {
        *rc = hs_fail(HS_ENOMEM, "out of memory reading the index");
        return NULL;
    }
    memcpy(d, s, n + 1);
    return d;
}

/* Grows *arr (of elem bytes each) so index `used` fits; capacity doubles. */
static int grow(void **arr, int *cap, int used, size_t elem)
{
    if (used < *cap)
        return HS_OK;
    int ncap = *cap ? 2 * *cap : 16;
    void *p = ncap > 0 ? realloc(*arr, (size_t)ncap * elem) : NULL;
    if (!p)
        return hs_fail(HS_ENOMEM, "out of memory reading the index");
    *arr = p;
    *cap = ncap;
    return HS_OK;
}

/* Finishes a statement stepped until it stopped at `step`: SQLITE_DONE is
 * success, anything else the error of `what`. */
static int finish(hs_index *ix, sqlite3_stmt *st, int step, int rc, const char *what)
{
    if (!rc && step != SQLITE_DONE)
        rc = hs_index_db_error(ix, what);
    sqlite3_finalize(st);
    return rc;
}

/* Copies one row of a query into the reader's result; a nonzero status
 * stops the query and is returned. */
typedef int (*read_row_fn)(hs_index *ix, sqlite3_stmt *st, void *out);

/* Runs a query of the rows of run ?1 (and, where the SQL has a ?2, text ?2),
 * handing each row to row(): the prepare / bind / step / finish shape of
 * every many-row reader, as rows_add is of the writers in index.c. `what`
 * names the rows in messages. The reader frees its result on failure. */
static int rows_read(hs_index *ix, const char *sql, const char *what, int64_t run_id,
                     const char *text, read_row_fn row, void *out)
{
    sqlite3_stmt *st;
    int rc = prepare(ix, sql, &st, what);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, run_id);
    if (sqlite3_bind_parameter_count(st) >= 2)
        bind_opt_text(st, 2, text);
    int step = SQLITE_DONE;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW)
        rc = row(ix, st, out);
    return finish(ix, st, rc ? SQLITE_DONE : step, rc, what);
}

int hs_index_runs(hs_index *ix, const char *kind, const char *status, hs_run_list *out)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st;
    int rc = prepare(ix,
                     "SELECT run_id, kind, status, model_path, model_sha256, data_path, data_sha256,"
                     " args, started_at, finished_at FROM runs WHERE (?1 IS NULL OR kind=?1) AND"
                     " (?2 IS NULL OR status=?2) ORDER BY run_id",
                     &st, "reading runs");
    if (rc)
        return rc;
    bind_opt_text(st, 1, kind);
    bind_opt_text(st, 2, status);
    int step = SQLITE_DONE, cap = 0;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        rc = grow((void **)&out->runs, &cap, out->n, sizeof *out->runs);
        if (rc)
            break;
        hs_run_record *r = &out->runs[out->n++];
        memset(r, 0, sizeof *r);
        r->run_id = sqlite3_column_int64(st, 0);
        char **text[] = { &r->kind,         &r->status,      &r->model_path, &r->model_sha256,
                          &r->data_path,    &r->data_sha256, &r->args,       &r->started_at,
                          &r->finished_at };
        for (int c = 0; c < 9; c++)
            *text[c] = column_dup(st, c + 1, &rc);
    }
    rc = finish(ix, st, rc ? SQLITE_DONE : step, rc, "reading runs");
    if (rc)
        hs_run_list_free(out);
    return rc;
}

void hs_run_list_free(hs_run_list *l)
{
    for (int i = 0; l->runs && i < l->n; i++) {
        hs_run_record *r = &l->runs[i];
        char *text[] = { r->kind, r->status,     r->model_path, r->model_sha256, r->data_path,
                         r->data_sha256, r->args, r->started_at, r->finished_at };
        for (int c = 0; c < 9; c++)
            free(text[c]);
    }
    free(l->runs);
    memset(l, 0, sizeof *l);
}

/* Runs a one-column query with text ?1 (and ?2) giving a run id or NULL. */
static int run_query(hs_index *ix, const char *sql, const char *a, const char *b,
                     int64_t *run_id)
{
    *run_id = 0;
    sqlite3_stmt *st;
    int rc = prepare(ix, sql, &st, "reading runs");
    if (rc)
        return rc;
    bind_opt_text(st, 1, a);
    bind_opt_text(st, 2, b);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *run_id = sqlite3_column_int64(st, 0); /* max() of no rows is NULL: 0 */
        step = SQLITE_DONE;
    }
    return finish(ix, st, step, HS_OK, "reading runs");
}

int hs_index_latest_complete(hs_index *ix, const char *kind, const char *model_sha256,
                             int64_t *run_id)
{
    return run_query(ix,
                     "SELECT max(run_id) FROM runs WHERE kind=?1 AND status='complete' AND"
                     " (?2 IS NULL OR model_sha256=?2)",
                     kind, model_sha256, run_id);
}

int hs_index_latest_with_metric(hs_index *ix, const char *metric, int64_t *run_id)
{
    return run_query(ix, "SELECT max(run_id) FROM head_metrics WHERE metric=?1", metric, NULL,
                     run_id);
}

int hs_index_latest_with_curve(hs_index *ix, const char *curve, int64_t *run_id)
{
    return run_query(ix, "SELECT max(run_id) FROM curves WHERE curve=?1", curve, NULL, run_id);
}

int hs_index_metric_get(hs_index *ix, int64_t run_id, int layer, int head, const char *metric,
                        hs_metric_value *v, int *found)
{
    *found = 0;
    sqlite3_stmt *st;
    int rc = prepare(ix,
                     "SELECT value, stderr, n FROM head_metrics WHERE run_id=?1 AND layer=?2 AND"
                     " head=?3 AND metric=?4",
                     &st, "reading head metrics");
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_int(st, 2, layer);
    sqlite3_bind_int(st, 3, head);
    bind_opt_text(st, 4, metric);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *v = column_metric(st, 0);
        *found = 1;
        step = SQLITE_DONE;
    }
    return finish(ix, st, step, HS_OK, "reading head metrics");
}

int hs_index_param_get(hs_index *ix, int64_t run_id, const char *key, char *out, size_t n,
                       int *found)
{
    *found = 0;
    if (n)
        *out = 0;
    if (ix->version < 4) /* run_params came with version 4 */
        return HS_OK;
    sqlite3_stmt *st;
    int rc = prepare(ix, "SELECT value FROM run_params WHERE run_id=?1 AND key=?2", &st,
                     "reading run parameters");
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, run_id);
    bind_opt_text(st, 2, key);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        const unsigned char *v = sqlite3_column_text(st, 0);
        snprintf(out, n, "%s", v ? (const char *)v : "");
        *found = 1;
        step = SQLITE_DONE;
    }
    return finish(ix, st, step, HS_OK, "reading run parameters");
}

typedef struct {
    int layer, head;
    hs_metric_value v;
} grid_row;

/* The rows of a layer x head (or layer x position) grid as read, before the
 * shape is known; `col` names the second index in messages. */
typedef struct {
    grid_row *rows;
    int n, cap;
    int64_t run_id;
    const char *metric, *col;
} grid_rows;

/* Row (layer, head or position, value, stderr, n). */
static int read_grid_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    grid_rows *g = out;
    const sqlite3_int64 l = sqlite3_column_int64(st, 0), h = sqlite3_column_int64(st, 1);
    if (l < 0 || h < 0 || l >= HS_INDEX_MAX_DIM || h >= HS_INDEX_MAX_DIM)
        return hs_fail(HS_EFORMAT, "%s: run %lld: %s of layer %lld %s %lld: index out of range",
                       ix->path, (long long)g->run_id, g->metric, (long long)l, g->col,
                       (long long)h);
    int rc = grow((void **)&g->rows, &g->cap, g->n, sizeof *g->rows);
    if (!rc)
        g->rows[g->n++] = (grid_row){ (int)l, (int)h, column_metric(st, 2) };
    return rc;
}

/* Lays rows out as the grid; the shape is known only once all are read. */
static int grid_fill(hs_metric_grid *g, const grid_row *rows, int n)
{
    for (int i = 0; i < n; i++) {
        g->n_layer = rows[i].layer + 1 > g->n_layer ? rows[i].layer + 1 : g->n_layer;
        g->n_head = rows[i].head + 1 > g->n_head ? rows[i].head + 1 : g->n_head;
    }
    size_t cells = (size_t)g->n_layer * (size_t)g->n_head;
    if (!cells)
        return HS_OK;
    g->cell = hs_calloc(cells, sizeof *g->cell, "metric grid");
    g->present = hs_calloc(cells, 1, "metric grid");
    if (!g->cell || !g->present)
        return HS_ENOMEM;
    for (size_t c = 0; c < cells; c++)
        g->cell[c] = (hs_metric_value){ NAN, NAN, 0 };
    for (int i = 0; i < n; i++) {
        size_t c = (size_t)rows[i].layer * g->n_head + rows[i].head;
        g->cell[c] = rows[i].v;
        g->present[c] = 1;
    }
    g->count = n;
    return HS_OK;
}

/* Reads a grid query (see read_grid_row) into g. */
static int grid_read(hs_index *ix, const char *sql, const char *what, int64_t run_id,
                     const char *metric, const char *col, hs_metric_grid *g)
{
    grid_rows rows = { NULL, 0, 0, run_id, metric, col };
    int rc = rows_read(ix, sql, what, run_id, metric, read_grid_row, &rows);
    if (!rc)
        rc = grid_fill(g, rows.rows, rows.n);
    free(rows.rows);
    return rc;
}

int hs_index_metric_grid(hs_index *ix, int64_t run_id, const char *metric, hs_metric_grid *g)
{
    memset(g, 0, sizeof *g);
    int rc = grid_read(ix,
                       "SELECT layer, head, value, stderr, n FROM head_metrics WHERE run_id=?1 AND"
                       " metric=?2 AND layer>=0 AND head>=0 AND attn='self' ORDER BY layer, head",
                       "reading head metrics", run_id, metric, "head", g);
    if (rc)
        hs_metric_grid_free(g);
    return rc;
}

void hs_metric_grid_free(hs_metric_grid *g)
{
    free(g->cell);
    free(g->present);
    memset(g, 0, sizeof *g);
}

/* Is cell a before cell b in "top" order: larger value first, NaN last,
 * then lower (layer, head), i.e. lower cell index. */
static int ranks_before(const hs_metric_grid *g, size_t a, size_t b)
{
    double va = g->cell[a].value, vb = g->cell[b].value;
    if (isnan(va) != isnan(vb))
        return !isnan(va);
    if (!isnan(va) && va != vb)
        return va > vb;
    return a < b;
}

int hs_metric_grid_top(const hs_metric_grid *g, int k, int *layer, int *head)
{
    /* selection of k from the cells: k is a handful, grids are small */
    size_t cells = (size_t)g->n_layer * (size_t)g->n_head, prev = 0;
    int got = 0;
    for (; got < k; got++) {
        size_t best = cells;
        for (size_t c = 0; c < cells; c++)
            if (g->present[c] && (!got || ranks_before(g, prev, c)) &&
                (best == cells || ranks_before(g, c, best)))
                best = c;
        if (best == cells)
            break;
        layer[got] = (int)(best / (size_t)g->n_head);
        head[got] = (int)(best % (size_t)g->n_head);
        prev = best;
    }
    return got;
}

/* The integer after `prefix` in name when the rest is all digits; 0 if not. */
static int numeric_suffix(const char *name, const char *prefix, long long *key)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n))
        return 0;
    const char *s = name + n;
    if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 18)
        return 0;
    *key = strtoll(s, NULL, 10);
    return 1;
}

/* Insertion sort by key: a series is a handful of head counts or steps. */
static void series_sort(hs_metric_series *s)
{
    for (int i = 1; i < s->n; i++)
        for (int j = i; j > 0 && s->key[j - 1] > s->key[j]; j--) {
            long long k = s->key[j];
            hs_metric_value v = s->v[j];
            s->key[j] = s->key[j - 1], s->v[j] = s->v[j - 1];
            s->key[j - 1] = k, s->v[j - 1] = v;
        }
}

/* A series as read: `prefix` non-NULL keys a row by its metric's numeric
 * suffix (rows without one are skipped), NULL by its first column. */
typedef struct {
    hs_metric_series *s;
    int kcap, vcap;
    const char *prefix;
} series_rows;

/* Row (metric or layer, value, stderr, n). */
static int read_series_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    series_rows *r = out;
    long long key = sqlite3_column_int64(st, 0);
    if (!r->prefix && (key < 0 || key >= HS_INDEX_MAX_DIM)) /* a layer */
        return hs_fail(HS_EFORMAT, "%s: layer %lld: index out of range", ix->path, key);
    if (r->prefix) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        if (!name || !numeric_suffix(name, r->prefix, &key))
            return HS_OK;
    }
    hs_metric_series *s = r->s;
    int rc = grow((void **)&s->key, &r->kcap, s->n, sizeof *s->key);
    if (!rc)
        rc = grow((void **)&s->v, &r->vcap, s->n, sizeof *s->v);
    if (!rc) {
        s->key[s->n] = key;
        s->v[s->n++] = column_metric(st, 1);
    }
    return rc;
}

int hs_index_metric_series(hs_index *ix, int64_t run_id, const char *prefix,
                           hs_metric_series *out)
{
    memset(out, 0, sizeof *out);
    series_rows rows = { out, 0, 0, prefix };
    /* substr narrows the scan to the prefix; numeric_suffix decides */
    int rc = rows_read(ix,
                       "SELECT metric, value, stderr, n FROM head_metrics WHERE run_id=?1 AND"
                       " layer=-1 AND head=-1 AND substr(metric, 1, length(?2))=?2 ORDER BY metric",
                       "reading head metrics", run_id, prefix, read_series_row, &rows);
    if (rc)
        hs_metric_series_free(out);
    else
        series_sort(out);
    return rc;
}

/* Row (attn, count, mean, max, layer and head of the max). */
typedef struct {
    hs_attn_summary *out;
    int *n;
} attn_rows;

static int read_attn_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    (void)ix;
    attn_rows *r = out;
    const char *attn = (const char *)sqlite3_column_text(st, 0);
    if (*r->n >= 3 || !attn)
        return HS_OK; /* enc, dec, cross: any other type is not SPEC §17's */
    hs_attn_summary *a = &r->out[(*r->n)++];
    snprintf(a->attn, sizeof a->attn, "%s", attn);
    a->n = sqlite3_column_int(st, 1);
    a->mean = column_number(st, 2);
    a->max = column_number(st, 3);
    a->max_layer = sqlite3_column_int(st, 4);
    a->max_head = sqlite3_column_int(st, 5);
    return HS_OK;
}

int hs_index_attn_summary(hs_index *ix, int64_t run_id, const char *metric,
                          hs_attn_summary out[3], int *n)
{
    *n = 0;
    attn_rows rows = { out, n };
    /* SQLite's bare columns beside max() come from the row holding the max */
    return rows_read(ix,
                     "SELECT attn, count(*), avg(value), max(value), layer, head FROM head_metrics"
                     " WHERE run_id=?1 AND metric=?2 AND layer>=0 AND head>=0 AND attn IN"
                     " ('enc', 'dec', 'cross') GROUP BY attn ORDER BY CASE attn WHEN 'enc' THEN 0"
                     " WHEN 'dec' THEN 1 ELSE 2 END",
                     "reading head metrics by attention type", run_id, metric, read_attn_row,
                     &rows);
}

void hs_metric_series_free(hs_metric_series *s)
{
    free(s->key);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* A result array as read: its elements, count and capacity. */
typedef struct {
    void **arr;
    int *n;
    int cap;
    size_t elem;
} list_rows;

/* Room for one more element of a list_rows; returns it (NULL on failure,
 * with *rc set). */
static void *list_next(list_rows *r, int *rc)
{
    *rc = grow(r->arr, &r->cap, *r->n, r->elem);
    return *rc ? NULL : (char *)*r->arr + (size_t)(*r->n)++ * r->elem;
}

/* Row (step, x, y). */
static int read_curve_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    (void)ix;
    int rc;
    hs_curve_point *p = list_next(out, &rc);
    if (p)
        *p = (hs_curve_point){ sqlite3_column_int64(st, 0), column_number(st, 1),
                               column_number(st, 2) };
    return rc;
}

int hs_index_curve_get(hs_index *ix, int64_t run_id, const char *curve, hs_curve *out)
{
    memset(out, 0, sizeof *out);
    list_rows rows = { (void **)&out->p, &out->n, 0, sizeof *out->p };
    int rc = rows_read(ix,
                       "SELECT step, x, y FROM curves WHERE run_id=?1 AND curve=?2"
                       " ORDER BY step, rowid",
                       "reading curves", run_id, curve, read_curve_row, &rows);
    if (rc)
        hs_curve_free(out);
    return rc;
}

void hs_curve_free(hs_curve *c)
{
    free(c->p);
    memset(c, 0, sizeof *c);
}

/* Row (path, sha256, bytes, complete). */
static int read_artifact_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    (void)ix;
    int rc;
    hs_artifact *a = list_next(out, &rc);
    if (!a)
        return rc;
    memset(a, 0, sizeof *a);
    a->path = column_dup(st, 0, &rc);
    a->sha256 = column_dup(st, 1, &rc);
    a->bytes = sqlite3_column_int64(st, 2);
    a->complete = sqlite3_column_int(st, 3);
    return rc;
}

int hs_index_artifacts(hs_index *ix, int64_t run_id, hs_artifact_list *out)
{
    memset(out, 0, sizeof *out);
    list_rows rows = { (void **)&out->a, &out->n, 0, sizeof *out->a };
    int rc = rows_read(ix,
                       "SELECT path, sha256, bytes, complete FROM artifacts WHERE run_id=?1"
                       " ORDER BY rowid",
                       "reading artifacts", run_id, NULL, read_artifact_row, &rows);
    if (rc)
        hs_artifact_list_free(out);
    return rc;
}

void hs_artifact_list_free(hs_artifact_list *l)
{
    for (int i = 0; l->a && i < l->n; i++) {
        free(l->a[i].path);
        free(l->a[i].sha256);
    }
    free(l->a);
    memset(l, 0, sizeof *l);
}

/* ---- SPEC §11's tables ------------------------------------------------------------ */

/* 1 when the index has table `name` (schema 3 and later have both of
 * SPEC §11's); an older index reads as holding no row of them. */
static int has_table(hs_index *ix, const char *name, int *rc)
{
    sqlite3_stmt *st;
    *rc = prepare(ix, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?1", &st,
                  "reading the schema");
    if (*rc)
        return 0;
    bind_opt_text(st, 1, name);
    int step = sqlite3_step(st), found = step == SQLITE_ROW;
    *rc = finish(ix, st, found ? SQLITE_DONE : step, HS_OK, "reading the schema");
    return found;
}

int hs_index_latest_with_position_metric(hs_index *ix, const char *metric, int64_t *run_id)
{
    int rc;
    *run_id = 0;
    if (!has_table(ix, "position_metrics", &rc))
        return rc;
    return run_query(ix, "SELECT max(run_id) FROM position_metrics WHERE metric=?1", metric, NULL,
                     run_id);
}

int hs_index_latest_with_pair_metric(hs_index *ix, const char *metric, int64_t *run_id)
{
    int rc;
    *run_id = 0;
    if (!has_table(ix, "head_pair_metrics", &rc))
        return rc;
    return run_query(ix, "SELECT max(run_id) FROM head_pair_metrics WHERE metric=?1", metric,
                     NULL, run_id);
}

int hs_index_position_grid(hs_index *ix, int64_t run_id, const char *metric, hs_position_grid *g)
{
    memset(g, 0, sizeof *g);
    int rc;
    if (!has_table(ix, "position_metrics", &rc))
        return rc;
    hs_metric_grid mg = { 0 }; /* the same layout: positions in place of heads */
    /* the rows that are not per head (version 5 added the column) */
    rc = grid_read(ix,
                   ix->version < 5
                       ? "SELECT layer, position, value, stderr, n FROM position_metrics WHERE"
                         " run_id=?1 AND metric=?2 ORDER BY layer, position"
                       : "SELECT layer, position, value, stderr, n FROM position_metrics WHERE"
                         " run_id=?1 AND metric=?2 AND head=-1 ORDER BY layer, position",
                   "reading position metrics", run_id, metric, "position", &mg);
    g->n_layer = mg.n_layer, g->n_pos = mg.n_head, g->count = mg.count;
    g->cell = mg.cell, g->present = mg.present;
    if (rc)
        hs_position_grid_free(g);
    return rc;
}

void hs_position_grid_free(hs_position_grid *g)
{
    free(g->cell);
    free(g->present);
    memset(g, 0, sizeof *g);
}

/* The rows of a pair query as read, and what messages name. */
typedef struct {
    list_rows l; /* first: list_next takes it */
    int64_t run_id;
    const char *metric;
} pair_rows;

/* Row (layer_a, head_a, layer_b, head_b, value): each index in
 * [0, HS_INDEX_MAX_DIM), read as 64 bits so that none wraps into range. */
static int read_pair_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    pair_rows *r = out;
    sqlite3_int64 k[4];
    for (int c = 0; c < 4; c++)
        if ((k[c] = sqlite3_column_int64(st, c)) < 0 || k[c] >= HS_INDEX_MAX_DIM)
            return hs_fail(HS_EFORMAT, "%s: run %lld: %s of L%lldH%lld -> L%lldH%lld: index out "
                           "of range", ix->path, (long long)r->run_id, r->metric,
                           (long long)sqlite3_column_int64(st, 0),
                           (long long)sqlite3_column_int64(st, 1),
                           (long long)sqlite3_column_int64(st, 2),
                           (long long)sqlite3_column_int64(st, 3));
    int rc;
    hs_pair_value *p = list_next(&r->l, &rc);
    if (p)
        *p = (hs_pair_value){ (int)k[0], (int)k[1], (int)k[2], (int)k[3], column_number(st, 4) };
    return rc;
}

int hs_index_pair_metrics(hs_index *ix, int64_t run_id, const char *metric, hs_pair_list *out)
{
    memset(out, 0, sizeof *out);
    int rc;
    if (!has_table(ix, "head_pair_metrics", &rc))
        return rc;
    pair_rows rows = { { (void **)&out->p, &out->n, 0, sizeof *out->p }, run_id, metric };
    rc = rows_read(ix,
                   "SELECT layer_a, head_a, layer_b, head_b, value FROM head_pair_metrics WHERE"
                   " run_id=?1 AND metric=?2 ORDER BY layer_a, head_a, layer_b, head_b",
                   "reading head-pair metrics", run_id, metric, read_pair_row, &rows);
    if (rc)
        hs_pair_list_free(out);
    return rc;
}

void hs_pair_list_free(hs_pair_list *l)
{
    free(l->p);
    memset(l, 0, sizeof *l);
}

int hs_index_layer_series(hs_index *ix, int64_t run_id, const char *metric,
                          hs_metric_series *out)
{
    memset(out, 0, sizeof *out);
    series_rows rows = { out, 0, 0, NULL };
    int rc = rows_read(ix,
                       "SELECT layer, value, stderr, n FROM head_metrics WHERE run_id=?1 AND"
                       " metric=?2 AND layer>=0 AND head=-1 ORDER BY layer",
                       "reading head metrics", run_id, metric, read_series_row, &rows);
    if (rc)
        hs_metric_series_free(out);
    return rc;
}

int hs_index_latest_with_edge_metric(hs_index *ix, const char *metric, int64_t *run_id)
{
    int rc;
    *run_id = 0;
    if (!has_table(ix, "edge_metrics", &rc))
        return rc;
    return run_query(ix, "SELECT max(run_id) FROM edge_metrics WHERE metric=?1", metric, NULL,
                     run_id);
}

/* The rows of an edge query as read, and what messages name. */
typedef struct {
    list_rows l; /* first: list_next takes it */
    int64_t run_id;
    const char *metric;
} edge_rows;

/* Row (sender, receiver, value, stderr, n): names that fit the fixed fields. */
static int read_edge_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    edge_rows *r = out;
    const unsigned char *s = sqlite3_column_text(st, 0), *v = sqlite3_column_text(st, 1);
    const int ns = sqlite3_column_bytes(st, 0), nv = sqlite3_column_bytes(st, 1);
    if (!s || !v || ns >= HS_EDGE_NAME || nv >= HS_EDGE_NAME ||
        strlen((const char *)s) != (size_t)ns || strlen((const char *)v) != (size_t)nv)
        return hs_fail(HS_EFORMAT, "%s: run %lld: %s: an edge's sender or receiver is not a "
                       "node name", ix->path, (long long)r->run_id, r->metric);
    int rc;
    hs_edge_value *e = list_next(&r->l, &rc);
    if (e) {
        memset(e, 0, sizeof *e);
        memcpy(e->sender, s, (size_t)ns);
        memcpy(e->receiver, v, (size_t)nv);
        e->v = column_metric(st, 2);
    }
    return rc;
}

int hs_index_edge_metrics(hs_index *ix, int64_t run_id, const char *metric, hs_edge_list *out)
{
    memset(out, 0, sizeof *out);
    int rc;
    if (!has_table(ix, "edge_metrics", &rc))
        return rc;
    edge_rows rows = { { (void **)&out->e, &out->n, 0, sizeof *out->e }, run_id, metric };
    rc = rows_read(ix,
                   "SELECT sender, receiver, value, stderr, n FROM edge_metrics WHERE run_id=?1"
                   " AND metric=?2 ORDER BY sender, receiver",
                   "reading edge metrics", run_id, metric, read_edge_row, &rows);
    if (rc)
        hs_edge_list_free(out);
    return rc;
}

void hs_edge_list_free(hs_edge_list *l)
{
    free(l->e);
    memset(l, 0, sizeof *l);
}

/* ---- SPEC §19's tables ------------------------------------------------------------ */

/* The first n columns of a feature row read as 64 bits, each checked in
 * [lo, 2^24) (a feature id, layer, head or position; a sequence index in
 * [0, 2^40)). */
static int feature_ints(hs_index *ix, sqlite3_stmt *st, int n, sqlite3_int64 *k,
                        const long long *lo, const char *what)
{
    for (int c = 0; c < n; c++)
        if ((k[c] = sqlite3_column_int64(st, c)) < lo[c] ||
            k[c] >= (c == 1 && lo[c] == 0 ? 1LL << 40 : 1LL << 24))
            return hs_fail(HS_EFORMAT, "%s: %s: column %d holds %lld, out of range", ix->path,
                           what, c + 1, (long long)k[c]);
    return HS_OK;
}

/* Row (feature, layer, head, value). */
static int read_feature_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    static const long long lo[3] = { -1, -1, -1 };
    sqlite3_int64 k[3];
    int rc = feature_ints(ix, st, 3, k, lo, "feature_metrics");
    hs_feature_row *p = rc ? NULL : list_next(out, &rc);
    if (p)
        *p = (hs_feature_row){ (int)k[0], (int)k[1], (int)k[2], NULL, column_number(st, 3) };
    return rc;
}

int hs_index_feature_metric(hs_index *ix, int64_t run_id, const char *metric,
                            hs_feature_row **rows, int *n)
{
    *rows = NULL, *n = 0;
    int rc;
    if (!has_table(ix, "feature_metrics", &rc))
        return rc;
    list_rows l = { (void **)rows, n, 0, sizeof **rows };
    rc = rows_read(ix,
                   "SELECT feature, layer, head, value FROM feature_metrics WHERE run_id=?1 AND"
                   " metric=?2 ORDER BY feature, head",
                   "reading feature metrics", run_id, metric, read_feature_row, &l);
    if (rc)
        free(*rows), *rows = NULL, *n = 0;
    return rc;
}

/* Row (feature, seq, position, value). */
static int read_example_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    static const long long lo[3] = { 0, 0, 0 };
    sqlite3_int64 k[3];
    int rc = feature_ints(ix, st, 3, k, lo, "feature_examples");
    hs_feature_example_row *p = rc ? NULL : list_next(out, &rc);
    if (p)
        *p = (hs_feature_example_row){ (int)k[0], k[1], (int)k[2], column_number(st, 3) };
    return rc;
}

int hs_index_feature_examples(hs_index *ix, int64_t run_id, hs_feature_example_row **rows, int *n)
{
    *rows = NULL, *n = 0;
    int rc;
    if (!has_table(ix, "feature_examples", &rc))
        return rc;
    list_rows l = { (void **)rows, n, 0, sizeof **rows };
    rc = rows_read(ix,
                   "SELECT feature, seq, position, value FROM feature_examples WHERE run_id=?1"
                   " ORDER BY feature, value DESC, seq, position",
                   "reading feature examples", run_id, NULL, read_example_row, &l);
    if (rc)
        free(*rows), *rows = NULL, *n = 0;
    return rc;
}

/* Row (feature, seq, position, layer, head, source, value). */
static int read_dfa_row(hs_index *ix, sqlite3_stmt *st, void *out)
{
    static const long long lo[6] = { 0, 0, 0, 0, 0, 0 };
    sqlite3_int64 k[6];
    int rc = feature_ints(ix, st, 6, k, lo, "feature_dfa");
    hs_feature_dfa_row *p = rc ? NULL : list_next(out, &rc);
    if (p)
        *p = (hs_feature_dfa_row){ (int)k[0], k[1], (int)k[2], (int)k[3], (int)k[4], (int)k[5],
                                   column_number(st, 6) };
    return rc;
}

int hs_index_feature_dfa(hs_index *ix, int64_t run_id, int feature, hs_feature_dfa_row **rows,
                         int *n)
{
    *rows = NULL, *n = 0;
    int rc;
    if (!has_table(ix, "feature_dfa", &rc))
        return rc;
    char f[24];
    snprintf(f, sizeof f, "%d", feature);
    list_rows l = { (void **)rows, n, 0, sizeof **rows };
    rc = rows_read(ix,
                   "SELECT feature, seq, position, layer, head, source, value FROM feature_dfa"
                   " WHERE run_id=?1 AND feature=CAST(?2 AS INTEGER)"
                   " ORDER BY seq, position, head, source",
                   "reading feature attributions", run_id, f, read_dfa_row, &l);
    if (rc)
        free(*rows), *rows = NULL, *n = 0;
    return rc;
}
