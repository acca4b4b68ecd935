/* The write half of the index (index.h): the open (schema check, WAL,
 * migrations, orphaned runs) and the writers, one transaction a batch. */
#include "index.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index_db.h"

static void host_name(char *h, size_t n)
{
    if (gethostname(h, n - 1))
        snprintf(h, n, "?");
    h[n - 1] = 0;
}

/* Marks failed the runs left `running` by a process of this host that is
 * gone (killed, or its final write failed on a full disk). Best effort: a
 * read-only or busy index is left as it is. */
static void fail_orphans(hs_index *ix)
{
    char host[256];
    host_name(host, sizeof host);
    sqlite3_stmt *st, *up;
    if (sqlite3_prepare_v2(ix->db, "SELECT run_id, pid FROM runs WHERE status='running' AND"
                           " pid IS NOT NULL AND host=?", -1, &st, NULL) != SQLITE_OK)
        return;
    if (sqlite3_prepare_v2(ix->db, "UPDATE runs SET status='failed', finished_at=strftime("
                           "'%Y-%m-%dT%H:%M:%fZ','now') WHERE run_id=? AND status='running'",
                           -1, &up, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return;
    }
    sqlite3_bind_text(st, 1, host, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(st) == SQLITE_ROW) {
        long long pid = sqlite3_column_int64(st, 1);
        /* a pid the system cannot have (the file says anything) is no
         * process of ours: kill() of a truncated one could probe another */
        if (pid <= 0 || pid > INT_MAX || pid == (long long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        sqlite3_bind_int64(up, 1, sqlite3_column_int64(st, 0));
        sqlite3_step(up);
        sqlite3_reset(up);
    }
    sqlite3_finalize(st);
    sqlite3_finalize(up);
}

static int exec(hs_index *ix, const char *sql, const char *what)
{
    char *err = NULL;
    if (sqlite3_exec(ix->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        int rc = hs_fail(HS_EIO, "%s: %s: %s", ix->path, what, err ? err : "error");
        sqlite3_free(err);
        return rc;
    }
    return HS_OK;
}

/* A refused index must be left as it was: with frames in its WAL at the
 * open, SQLite's checkpoint at close would copy them into the database
 * file, so the connection closes without one until the schema is known to
 * be ours (on to clear it). */
static void hold_wal(hs_index *ix, int on)
{
    sqlite3_db_config(ix->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, on, NULL);
}

int hs_index_open(hs_index **out, const char *path)
{
    *out = NULL;
    hs_index *ix = hs_calloc(1, sizeof *ix, "index");
    if (!ix)
        return HS_ENOMEM;
    const int had_wal = hs_index_wal_frames(path);
    int v = 0, rc = hs_index_db_open(ix, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    if (!rc && had_wal)
        hold_wal(ix, 1);
    if (!rc && sqlite3_db_readonly(ix->db, "main") == 1) {
        char why[1400];
        hs_index_readonly_reason(path, why, sizeof why);
        /* SQLite's words for it, and ours on why */
        rc = hs_fail(HS_EIO, "%s: cannot write the index: attempt to write a readonly database "
                     "(%s)", path, *why ? why : "read-only");
    }
    if (!rc)
        rc = exec(ix, "PRAGMA foreign_keys=ON", "enabling foreign keys");
    /* before anything is written, the switch to WAL included: a refused
     * file is left byte for byte as it was */
    if (!rc)
        rc = hs_index_schema_check(ix, &v);
    /* Switching to WAL takes a lock that SQLite reports busy without calling
     * the busy handler; several processes opening a new index at once retry
     * here for up to the busy timeout. */
    for (int tries = 0; !rc; tries++) {
        char *err = NULL;
        int s = sqlite3_exec(ix->db, "PRAGMA journal_mode=WAL", NULL, NULL, &err);
        sqlite3_free(err);
        if (s == SQLITE_OK)
            break;
        if ((s != SQLITE_BUSY && s != SQLITE_LOCKED) || tries == 3000)
            rc = hs_index_db_error(ix, "enabling WAL");
        else
            sqlite3_sleep(10);
    }
    /* Each migration and its version bump commit together; a concurrent
     * opener waits on the write lock and then sees (and checks) the new
     * version. */
    while (!rc && v < HS_INDEX_SCHEMA_VERSION) {
        rc = exec(ix, "BEGIN IMMEDIATE", "starting the schema migration");
        if (!rc)
            rc = hs_index_schema_check(ix, &v);
        if (!rc && v < HS_INDEX_SCHEMA_VERSION) {
            char bump[64];
            snprintf(bump, sizeof bump, "PRAGMA user_version=%d", v + 1);
            rc = exec(ix, hs_index_migrations[v], "creating the schema");
            if (!rc)
                rc = exec(ix, bump, "setting the schema version");
        }
        rc = rc ? (exec(ix, "ROLLBACK", "rolling back"), rc) : exec(ix, "COMMIT", "committing");
        if (!rc)
            rc = hs_index_schema_check(ix, &v);
    }
    if (rc) {
        hs_index_close(ix);
        return rc;
    }
    hold_wal(ix, 0);
    fail_orphans(ix);
    *out = ix;
    return HS_OK;
}

void hs_index_close(hs_index *ix)
{
    if (!ix)
        return;
    sqlite3_close(ix->db);
    free(ix);
}

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

int hs_index_run_begin(hs_index *ix, const hs_run_info *r, int64_t *run_id)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db,
                           "INSERT INTO runs(kind, model_path, model_sha256, data_path, data_sha256,"
                           " args, started_at, status, pid, host) VALUES(?,?,?,?,?,?,"
                           " strftime('%Y-%m-%dT%H:%M:%fZ','now'), 'running', ?, ?)",
                           -1, &st, NULL) != SQLITE_OK)
        return hs_index_db_error(ix, "preparing the run record");
    bind_text(st, 1, r->kind);
    bind_text(st, 2, r->model_path);
    bind_text(st, 3, r->model_sha256);
    bind_text(st, 4, r->data_path);
    bind_text(st, 5, r->data_sha256);
    bind_text(st, 6, r->args);
    char host[256];
    host_name(host, sizeof host);
    sqlite3_bind_int64(st, 7, (sqlite3_int64)getpid());
    bind_text(st, 8, host);
    int rc = sqlite3_step(st) == SQLITE_DONE ? HS_OK : hs_index_db_error(ix, "recording the run");
    sqlite3_finalize(st);
    if (!rc)
        *run_id = sqlite3_last_insert_rowid(ix->db);
    return rc;
}

int hs_index_run_finish(hs_index *ix, int64_t run_id, const char *status, const char *model_sha256)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db,
                           "UPDATE runs SET status=?, finished_at=strftime('%Y-%m-%dT%H:%M:%fZ',"
                           "'now'), model_sha256=coalesce(?, model_sha256) WHERE run_id=?",
                           -1, &st, NULL) != SQLITE_OK)
        return hs_index_db_error(ix, "preparing the run update");
    bind_text(st, 1, status);
    bind_text(st, 2, model_sha256);
    sqlite3_bind_int64(st, 3, run_id);
    int rc = sqlite3_step(st) == SQLITE_DONE ? HS_OK : hs_index_db_error(ix, "finishing the run");
    sqlite3_finalize(st);
    return rc;
}

int hs_index_curve_add(hs_index *ix, int64_t run_id, const char *curve, const hs_curve_point *p,
                       int n)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db, "INSERT INTO curves(run_id, curve, step, x, y) VALUES(?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
        return hs_index_db_error(ix, "preparing curve points");
    int rc = exec(ix, "BEGIN IMMEDIATE", "starting a transaction");
    for (int i = 0; !rc && i < n; i++) {
        sqlite3_bind_int64(st, 1, run_id);
        bind_text(st, 2, curve);
        sqlite3_bind_int64(st, 3, p[i].step);
        sqlite3_bind_double(st, 4, p[i].x);
        sqlite3_bind_double(st, 5, p[i].y);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = hs_index_db_error(ix, "writing curve points");
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    if (rc) {
        exec(ix, "ROLLBACK", "rolling back");
        return rc;
    }
    return exec(ix, "COMMIT", "committing curve points");
}

int hs_index_artifact_add(hs_index *ix, int64_t run_id, const char *path, const char *sha256,
                          int64_t bytes, int complete)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db,
                           "INSERT INTO artifacts(run_id, path, sha256, bytes, complete)"
                           " VALUES(?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
        return hs_index_db_error(ix, "preparing the artifact record");
    sqlite3_bind_int64(st, 1, run_id);
    bind_text(st, 2, path);
    bind_text(st, 3, sha256);
    sqlite3_bind_int64(st, 4, bytes);
    sqlite3_bind_int(st, 5, complete);
    int rc = sqlite3_step(st) == SQLITE_DONE ? HS_OK
                                             : hs_index_db_error(ix, "recording the artifact");
    sqlite3_finalize(st);
    return rc;
}

/* Binds row i of a table's rows (after run_id, parameter 1) to st. */
typedef void (*bind_row_fn)(sqlite3_stmt *st, const void *rows, int i);

/* Inserts n rows with `sql` (run_id first) in one transaction; `what` names
 * them in messages. */
static int rows_add(hs_index *ix, const char *sql, const char *what, int64_t run_id,
                    const void *rows, int n, bind_row_fn bind)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL) != SQLITE_OK)
        return hs_index_db_error(ix, what);
    int rc = exec(ix, "BEGIN IMMEDIATE", "starting a transaction");
    for (int i = 0; !rc && i < n; i++) {
        sqlite3_bind_int64(st, 1, run_id);
        bind(st, rows, i);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = hs_index_db_error(ix, what);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    if (rc) {
        exec(ix, "ROLLBACK", "rolling back");
        return rc;
    }
    return exec(ix, "COMMIT", what);
}

static void bind_head_row(sqlite3_stmt *st, const void *rows, int i)
{
    const hs_metric_row *r = (const hs_metric_row *)rows + i;
    sqlite3_bind_int(st, 2, r->layer);
    sqlite3_bind_int(st, 3, r->head);
    bind_text(st, 4, r->metric);
    sqlite3_bind_double(st, 5, r->value);
    sqlite3_bind_double(st, 6, r->stderr_value);
    sqlite3_bind_int64(st, 7, r->n);
    bind_text(st, 8, r->attn ? r->attn : "self");
}

int hs_index_metrics_add(hs_index *ix, int64_t run_id, const hs_metric_row *rows, int n)
{
    return rows_add(ix,
                    "INSERT OR REPLACE INTO head_metrics(run_id, layer, head, metric, value,"
                    " stderr, n, attn) VALUES(?,?,?,?,?,?,?,?)",
                    "writing head metrics", run_id, rows, n, bind_head_row);
}

static void bind_position_row(sqlite3_stmt *st, const void *rows, int i)
{
    const hs_position_row *r = (const hs_position_row *)rows + i;
    sqlite3_bind_int(st, 2, r->layer);
    sqlite3_bind_int(st, 3, r->head);
    sqlite3_bind_int(st, 4, r->position);
    bind_text(st, 5, r->metric);
    sqlite3_bind_double(st, 6, r->value);
    sqlite3_bind_double(st, 7, r->stderr_value);
    sqlite3_bind_int64(st, 8, r->n);
}

int hs_index_position_metrics_add(hs_index *ix, int64_t run_id, const hs_position_row *rows,
                                  int n)
{
    return rows_add(ix,
                    "INSERT OR REPLACE INTO position_metrics(run_id, layer, head, position,"
                    " metric, value, stderr, n) VALUES(?,?,?,?,?,?,?,?)",
                    "writing position metrics", run_id, rows, n, bind_position_row);
}

static void bind_feature_row(sqlite3_stmt *st, const void *rows, int i)
{
    const hs_feature_row *r = (const hs_feature_row *)rows + i;
    sqlite3_bind_int(st, 2, r->feature);
    sqlite3_bind_int(st, 3, r->layer);
    sqlite3_bind_int(st, 4, r->head);
    bind_text(st, 5, r->metric);
    sqlite3_bind_double(st, 6, r->value);
}

int hs_index_feature_metrics_add(hs_index *ix, int64_t run_id, const hs_feature_row *rows, int n)
{
    return rows_add(ix,
                    "INSERT OR REPLACE INTO feature_metrics(run_id, feature, layer, head, metric,"
                    " value) VALUES(?,?,?,?,?,?)",
                    "writing feature metrics", run_id, rows, n, bind_feature_row);
}

static void bind_example_row(sqlite3_stmt *st, const void *rows, int i)
{
    const hs_feature_example_row *r = (const hs_feature_example_row *)rows + i;
    sqlite3_bind_int(st, 2, r->feature);
    sqlite3_bind_int64(st, 3, r->seq);
    sqlite3_bind_int(st, 4, r->position);
    sqlite3_bind_double(st, 5, r->value);
}

int hs_index_feature_examples_add(hs_index *ix, int64_t run_id,
                                  const hs_feature_example_row *rows, int n)
{
    return rows_add(ix,
                    "INSERT OR REPLACE INTO feature_examples(run_id, feature, seq, position,"
                    " value) VALUES(?,?,?,?,?)",
                    "writing feature examples", run_id, rows, n, bind_example_row);
}

static void bind_dfa_row(sqlite3_stmt *st, const void *rows, int i)
{
    const hs_feature_dfa_row *r = (const hs_feature_dfa_row *)rows + i;
    sqlite3_bind_int(st, 2, r->feature);
    sqlite3_bind_int64(st, 3, r->seq);
    sqlite3_bind_int(st, 4, r->position);
    sqlite3_bind_int(st, 5, r->layer);
    sqlite3_bind_int(st, 6, r->head);
    sqlite3_bind_int(st, 7, r->source);
    sqlite3_bind_double(st, 8, r->value);
}

int hs_index_feature_dfa_add(hs_index *ix, int64_t run_id, const hs_feature_dfa_row *rows, int n)
{
    return rows_add(ix,
                    "INSERT OR REPLACE INTO feature_dfa(run_id, feature, seq, position, layer,"
                    " head, source, value) VALUES(?,?,?,?,?,?,?,?)",
                    "writing feature attributions", run_id, rows, n, bind_dfa_row);
}

static void bind_pair_row(sqlite3_stmt *st, const void *rows, int i)
{
    const hs_pair_row *r = (const hs_pair_row *)rows + i;
    sqlite3_bind_int(st, 2, r->layer_a);
    sqlite3_bind_int(st, 3, r->head_a);
    sqlite3_bind_int(st, 4, r->layer_b);
    sqlite3_bind_int(st, 5, r->head_b);
    bind_text(st, 6, r->metric);
    sqlite3_bind_double(st, 7, r->value);
}

int hs_index_pair_metrics_add(hs_index *ix, int64_t run_id, const hs_pair_row *rows, int n)
{
    return rows_add(ix,
                    "INSERT OR REPLACE INTO head_pair_metrics(run_id, layer_a, head_a, layer_b,"
                    " head_b, metric, value) VALUES(?,?,?,?,?,?,?)",
                    "writing head-pair metrics", run_id, rows, n, bind_pair_row);
}

typedef struct {
    const char *key, *value;
} param_row;

static void bind_param_row(sqlite3_stmt *st, const void *rows, int i)
{
    const param_row *r = (const param_row *)rows + i;
    bind_text(st, 2, r->key);
    bind_text(st, 3, r->value);
}

int hs_index_param_set(hs_index *ix, int64_t run_id, const char *key, const char *value)
{
    const param_row row = { key, value };
    return rows_add(ix, "INSERT OR REPLACE INTO run_params(run_id, key, value) VALUES(?,?,?)",
                    "writing run parameters", run_id, &row, 1, bind_param_row);
}

static void bind_edge_row(sqlite3_stmt *st, const void *rows, int i)
{
    const hs_edge_row *r = (const hs_edge_row *)rows + i;
    bind_text(st, 2, r->sender);
    bind_text(st, 3, r->receiver);
    bind_text(st, 4, r->metric);
    sqlite3_bind_double(st, 5, r->value);
    sqlite3_bind_double(st, 6, r->stderr_value);
    sqlite3_bind_int64(st, 7, r->n);
}

int hs_index_edge_metrics_add(hs_index *ix, int64_t run_id, const hs_edge_row *rows, int n)
{
    return rows_add(ix,
                    "INSERT OR REPLACE INTO edge_metrics(run_id, sender, receiver, metric, value,"
                    " stderr, n) VALUES(?,?,?,?,?,?,?)",
                    "writing edge metrics", run_id, rows, n, bind_edge_row);
}

int hs_index_metric_exists(hs_index *ix, int64_t run_id, int layer, int head, const char *metric,
                           int *exists)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db,
                           "SELECT 1 FROM head_metrics WHERE run_id=? AND layer=? AND head=? AND"
                           " metric=?",
                           -1, &st, NULL) != SQLITE_OK)
        return hs_index_db_error(ix, "reading head metrics");
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_int(st, 2, layer);
    sqlite3_bind_int(st, 3, head);
    bind_text(st, 4, metric);
    int step = sqlite3_step(st);
    *exists = step == SQLITE_ROW;
    sqlite3_finalize(st);
    return step == SQLITE_ROW || step == SQLITE_DONE ? HS_OK
                                                     : hs_index_db_error(ix, "reading head metrics");
}

static void column_text(sqlite3_stmt *st, int i, char *out, size_t n)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    snprintf(out, n, "%s", s ? (const char *)s : "");
}

int hs_index_run_get(hs_index *ix, int64_t run_id, char *kind, char *model_sha256,
                     char *data_sha256, char *status, char *args, size_t args_size)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db,
                           "SELECT kind, model_sha256, data_sha256, status, args FROM runs WHERE"
                           " run_id=?",
                           -1, &st, NULL) != SQLITE_OK)
        return hs_index_db_error(ix, "reading runs");
    sqlite3_bind_int64(st, 1, run_id);
    int rc = HS_OK;
    if (sqlite3_step(st) == SQLITE_ROW) {
        column_text(st, 0, kind, 80);
        column_text(st, 1, model_sha256, 80);
        column_text(st, 2, data_sha256, 80);
        column_text(st, 3, status, 16);
        column_text(st, 4, args, args_size);
    } else {
        rc = hs_fail(HS_EINVAL, "%s: no run %lld", ix->path, (long long)run_id);
    }
    sqlite3_finalize(st);
    return rc;
}

int hs_index_run_reopen(hs_index *ix, int64_t run_id)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db,
                           "UPDATE runs SET status='running', finished_at=NULL, pid=?, host=?"
                           " WHERE run_id=?", -1, &st, NULL) != SQLITE_OK)
        return hs_index_db_error(ix, "preparing the run update");
    char host[256];
    host_name(host, sizeof host);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)getpid());
    bind_text(st, 2, host);
    sqlite3_bind_int64(st, 3, run_id);
    int rc = sqlite3_step(st) == SQLITE_DONE ? HS_OK : hs_index_db_error(ix, "reopening the run");
    sqlite3_finalize(st);
    return rc;
}
