/* The index's schema and how a file is checked against it (index_db.h).
 *
 * An index is a file anyone may hand us, and SQLite runs what its schema
 * holds: a trigger fires on our own INSERT and UPDATE (rewriting metrics,
 * dropping rows, turning a failed run complete, deleting earlier runs), a
 * view stands where a table should be, a UNIQUE index turns our INSERT OR
 * REPLACE into deletions. So every connection is opened with SQLite's
 * defensive settings (triggers and views off, no trusted schema), and before
 * an index is written or read its schema must be exactly the one this code
 * creates for the version it claims: the objects of sqlite_master compared,
 * text for text, with an in-memory database built by the same migrations.
 *
 * Accepted beside that: tables of the user's own (and any index on them),
 * and plain indexes on our tables (columns only, not UNIQUE, no WHERE:
 * they change how SQLite finds rows, never which). Refused, naming what was
 * found: triggers anywhere, views, virtual tables, one of our tables or
 * indexes missing or defined otherwise, an object of a later schema version,
 * a UNIQUE, partial or expression index on our tables, a version below 0 or
 * past this tool's. */
#include "index_db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Version 1: SPEC §7's four tables. Version 2: runs.pid and runs.host, the
 * process that writes a running run (hs_index_open fails the runs whose
 * process is gone). Version 3: SPEC §11's position_metrics and
 * head_pair_metrics. Version 4: run_params, what a run records about itself
 * for the figures (its sequence length, position labels: never re-derived
 * from its command line), and SPEC §15's edge_metrics. Version 5: SPEC §17's
 * attention type (`attn`, 'self' for the rows before it) in the keys of
 * head_metrics and head_pair_metrics, and SPEC §18's `head` (-1: not per head)
 * in position_metrics'. Version 6: SPEC §19's feature_metrics,
 * feature_examples and feature_dfa (an SAE's features). The text is what the
 * schema check compares with: a migration once released never changes. */
const char *const hs_index_migrations[HS_INDEX_SCHEMA_VERSION] = {
    "CREATE TABLE runs(run_id INTEGER PRIMARY KEY, kind TEXT NOT NULL, model_path TEXT,"
    " model_sha256 TEXT, data_path TEXT, data_sha256 TEXT, args TEXT, started_at TEXT,"
    " finished_at TEXT, status TEXT NOT NULL CHECK(status IN ('running','complete','failed')));"
    "CREATE TABLE head_metrics(run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
    " layer INTEGER NOT NULL, head INTEGER NOT NULL, metric TEXT NOT NULL, value REAL,"
    " stderr REAL, n INTEGER, PRIMARY KEY(run_id, layer, head, metric));"
    "CREATE TABLE curves(run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
    " curve TEXT NOT NULL, step INTEGER, x REAL, y REAL);"
    "CREATE INDEX curves_run ON curves(run_id, curve, step);"
    "CREATE TABLE artifacts(run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
    " path TEXT NOT NULL, sha256 TEXT, bytes INTEGER, complete INTEGER);",
    "ALTER TABLE runs ADD COLUMN pid INTEGER; ALTER TABLE runs ADD COLUMN host TEXT;",
    "CREATE TABLE position_metrics(run_id INTEGER NOT NULL REFERENCES runs(run_id)"
    " ON DELETE CASCADE, layer INTEGER NOT NULL, position INTEGER NOT NULL,"
    " metric TEXT NOT NULL, value REAL, stderr REAL, n INTEGER,"
    " PRIMARY KEY(run_id, layer, position, metric));"
    "CREATE TABLE head_pair_metrics(run_id INTEGER NOT NULL REFERENCES runs(run_id)"
    " ON DELETE CASCADE, layer_a INTEGER NOT NULL, head_a INTEGER NOT NULL,"
    " layer_b INTEGER NOT NULL, head_b INTEGER NOT NULL, metric TEXT NOT NULL, value REAL,"
    " PRIMARY KEY(run_id, layer_a, head_a, layer_b, head_b, metric));",
    "CREATE TABLE run_params(run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
    " key TEXT NOT NULL, value TEXT, PRIMARY KEY(run_id, key));"
    "CREATE TABLE edge_metrics(run_id INTEGER NOT NULL REFERENCES runs(run_id)"
    " ON DELETE CASCADE, sender TEXT NOT NULL, receiver TEXT NOT NULL, metric TEXT NOT NULL,"
    " value REAL, stderr REAL, n INTEGER, PRIMARY KEY(run_id, sender, receiver, metric));",
    /* a key cannot be altered in place: each table rebuilt, its rows copied */
    "CREATE TABLE head_metrics_v5(run_id INTEGER NOT NULL REFERENCES runs(run_id)"
    " ON DELETE CASCADE, layer INTEGER NOT NULL, head INTEGER NOT NULL,"
    " attn TEXT NOT NULL DEFAULT 'self', metric TEXT NOT NULL, value REAL, stderr REAL,"
    " n INTEGER, PRIMARY KEY(run_id, layer, head, attn, metric));"
    "INSERT INTO head_metrics_v5(run_id, layer, head, metric, value, stderr, n)"
    " SELECT run_id, layer, head, metric, value, stderr, n FROM head_metrics;"
    "DROP TABLE head_metrics; ALTER TABLE head_metrics_v5 RENAME TO head_metrics;"
    "CREATE TABLE head_pair_metrics_v5(run_id INTEGER NOT NULL REFERENCES runs(run_id)"
    " ON DELETE CASCADE, layer_a INTEGER NOT NULL, head_a INTEGER NOT NULL,"
    " layer_b INTEGER NOT NULL, head_b INTEGER NOT NULL, attn TEXT NOT NULL DEFAULT 'self',"
    " metric TEXT NOT NULL, value REAL,"
    " PRIMARY KEY(run_id, layer_a, head_a, layer_b, head_b, attn, metric));"
    "INSERT INTO head_pair_metrics_v5(run_id, layer_a, head_a, layer_b, head_b, metric, value)"
    " SELECT run_id, layer_a, head_a, layer_b, head_b, metric, value FROM head_pair_metrics;"
    "DROP TABLE head_pair_metrics; ALTER TABLE head_pair_metrics_v5 RENAME TO head_pair_metrics;"
    "CREATE TABLE position_metrics_v5(run_id INTEGER NOT NULL REFERENCES runs(run_id)"
    " ON DELETE CASCADE, layer INTEGER NOT NULL, head INTEGER NOT NULL DEFAULT -1,"
    " position INTEGER NOT NULL, metric TEXT NOT NULL, value REAL, stderr REAL, n INTEGER,"
    " PRIMARY KEY(run_id, layer, head, position, metric));"
    "INSERT INTO position_metrics_v5(run_id, layer, position, metric, value, stderr, n)"
    " SELECT run_id, layer, position, metric, value, stderr, n FROM position_metrics;"
    "DROP TABLE position_metrics; ALTER TABLE position_metrics_v5 RENAME TO position_metrics;",
    "CREATE TABLE feature_metrics(run_id INTEGER NOT NULL REFERENCES runs(run_id)"
    " ON DELETE CASCADE, feature INTEGER NOT NULL, layer INTEGER NOT NULL,"
    " head INTEGER NOT NULL DEFAULT -1, metric TEXT NOT NULL, value REAL,"
    " attn TEXT NOT NULL DEFAULT 'self', PRIMARY KEY(run_id, feature, layer, head, attn, metric));"
    "CREATE TABLE feature_examples(run_id INTEGER NOT NULL REFERENCES runs(run_id)"
    " ON DELETE CASCADE, feature INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " position INTEGER NOT NULL, value REAL, PRIMARY KEY(run_id, feature, seq, position));"
    "CREATE TABLE feature_dfa(run_id INTEGER NOT NULL REFERENCES runs(run_id)"
    " ON DELETE CASCADE, feature INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " position INTEGER NOT NULL, layer INTEGER NOT NULL, head INTEGER NOT NULL,"
    " source INTEGER NOT NULL, value REAL,"
    " PRIMARY KEY(run_id, feature, seq, position, layer, head, source));",
};

void hs_index_readonly_reason(const char *path, char *why, size_t n)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0; /* "/": the root */
    else
        *slash = 0;
    struct statvfs vfs;
    *why = 0;
    if (!statvfs(dir, &vfs) && (vfs.f_flag & ST_RDONLY))
        snprintf(why, n, "read-only file system");
    else if (access(path, W_OK) && errno != ENOENT)
        snprintf(why, n, "read-only: the file cannot be written by this user");
    else if (access(dir, W_OK))
        snprintf(why, n, "read-only: its directory cannot be written by this user, and SQLite "
                 "keeps %s-wal and %s-shm beside it", path, path);
}

int hs_index_db_error(hs_index *ix, const char *what)
{
    ix->code = sqlite3_extended_errcode(ix->db);
    const int code = ix->code & 0xff;
    char why[1400] = "";
    if (code == SQLITE_READONLY || code == SQLITE_CANTOPEN || code == SQLITE_PERM)
        hs_index_readonly_reason(ix->path, why, sizeof why);
    return hs_fail(HS_EIO, "%s: %s: %s%s%s%s", ix->path, what, sqlite3_errmsg(ix->db),
                   *why ? " (" : "", why, *why ? ")" : "");
}

int hs_index_db_open(hs_index *ix, const char *path, int flags)
{
    snprintf(ix->path, sizeof ix->path, "%s", path);
    if (sqlite3_open_v2(path, &ix->db, flags, NULL) != SQLITE_OK) {
        char why[1400] = "";
        ix->code = ix->db ? sqlite3_extended_errcode(ix->db) : SQLITE_NOMEM;
        if ((ix->code & 0xff) == SQLITE_CANTOPEN && access(path, F_OK) == 0)
            hs_index_readonly_reason(path, why, sizeof why);
        return hs_fail(HS_EIO, "%s: cannot open the index: %s%s%s%s", ix->path,
                       ix->db ? sqlite3_errmsg(ix->db) : "out of memory", *why ? " (" : "", why,
                       *why ? ")" : "");
    }
    sqlite3 *db = ix->db;
    /* the file's schema runs no code of the file's: no triggers, no views,
     * no functions in it beyond SQLite's innocuous ones, no writes to the
     * schema itself */
    int ok = sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL) == SQLITE_OK &&
             sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL) == SQLITE_OK &&
             sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL) == SQLITE_OK &&
             sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL) == SQLITE_OK &&
             sqlite3_exec(db, "PRAGMA trusted_schema=OFF", NULL, NULL, NULL) == SQLITE_OK;
    if (!ok)
        return hs_index_db_error(ix, "enabling SQLite's defensive settings");
    sqlite3_busy_timeout(db, 30000);
    return HS_OK;
}

/* One row of sqlite_master. */
typedef struct {
    char *type, *name, *tbl, *sql; /* sql NULL for an automatic index */
} schema_obj;

typedef struct {
    schema_obj *o;
    int n;
} schema;

static void schema_free(schema *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->o[i].type), free(s->o[i].name), free(s->o[i].tbl), free(s->o[i].sql);
    free(s->o);
    memset(s, 0, sizeof *s);
}

static char *dup_column(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

/* Every object of db's main schema; triggers first, then views, so that
 * what runs code is what a refusal names. */
static int schema_read(sqlite3 *db, schema *s)
{
    memset(s, 0, sizeof *s);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT type, name, tbl_name, sql FROM main.sqlite_master ORDER BY"
                           " type='trigger' DESC, type='view' DESC, name", -1, &st, NULL))
        return -1;
    int step, cap = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (s->n == cap) {
            cap = cap ? 2 * cap : 16;
            schema_obj *o = realloc(s->o, (size_t)cap * sizeof *o);
            if (!o)
                break;
            s->o = o;
        }
        schema_obj *o = &s->o[s->n++];
        *o = (schema_obj){ dup_column(st, 0), dup_column(st, 1), dup_column(st, 2),
                           dup_column(st, 3) };
        if (!o->type || !o->name || !o->tbl)
            break;
    }
    sqlite3_finalize(st);
    return step == SQLITE_DONE ? 0 : -1;
}

static const schema_obj *schema_find(const schema *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->o[i].name, name))
            return &s->o[i];
    return NULL;
}

/* The schema this code creates at version v (0 = none), built in memory
 * by the migrations themselves. */
static int reference(int v, schema *s)
{
    sqlite3 *db;
    memset(s, 0, sizeof *s);
    int rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK ? 0 : -1;
    for (int k = 0; !rc && k < v; k++)
        rc = sqlite3_exec(db, hs_index_migrations[k], NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (!rc)
        rc = schema_read(db, s);
    sqlite3_close(db);
    if (rc)
        schema_free(s);
    return rc ? hs_fail(HS_ENOMEM, "building the index schema of version %d failed", v) : HS_OK;
}

/* 1 when index `name` (on one of our tables) only orders rows: not UNIQUE,
 * not partial, on columns rather than expressions. */
static int plain_index(sqlite3 *db, const char *table, const char *name)
{
    sqlite3_stmt *st;
    int plain = 0;
    if (sqlite3_prepare_v2(db, "SELECT l.\"unique\" = 0 AND l.partial = 0 AND NOT EXISTS (SELECT 1"
                           " FROM pragma_index_xinfo(?2) x WHERE x.key AND x.cid = -2) FROM"
                           " pragma_index_list(?1) l WHERE l.name = ?2", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
        plain = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
    }
    sqlite3_finalize(st);
    return plain;
}

static int refuse(hs_index *ix, const char *what)
{
    return hs_fail(HS_EFORMAT, "%s: %s: not part of a headscope index, refused", ix->path, what);
}

/* The file's objects against ref (version v) and the names any version
 * uses (all); HS_OK or HS_EFORMAT naming the first object out of place. */
static int compare(hs_index *ix, const schema *file, const schema *ref, const schema *all, int v)
{
    char what[1200];
    for (int i = 0; i < file->n; i++) {
        const schema_obj *o = &file->o[i], *r = schema_find(ref, o->name);
        const int ours = schema_find(ref, o->tbl) && !strcmp(schema_find(ref, o->tbl)->type,
                                                            "table");
        if (!strcmp(o->type, "trigger"))
            snprintf(what, sizeof what, "trigger '%s' on table %s", o->name, o->tbl);
        else if (!strcmp(o->type, "view"))
            snprintf(what, sizeof what, "view '%s'", o->name);
        else if (r && (strcmp(r->type, o->type) || strcmp(r->tbl, o->tbl) ||
                       (r->sql == NULL) != (o->sql == NULL) || (r->sql && strcmp(r->sql, o->sql))))
            snprintf(what, sizeof what, "%s '%s' is not defined as headscope's schema version %d "
                     "defines it", o->type, o->name, v);
        else if (r)
            continue;
        else if (!strcmp(o->type, "table") && o->sql && !strncasecmp(o->sql, "CREATE VIRTUAL", 14))
            snprintf(what, sizeof what, "virtual table '%s'", o->name);
        else if (schema_find(all, o->name) || (ours && !o->sql))
            snprintf(what, sizeof what, "%s '%s' in an index of schema version %d", o->type,
                     o->name, v);
        else if (!strcmp(o->type, "index") && ours && !plain_index(ix->db, o->tbl, o->name))
            snprintf(what, sizeof what, "index '%s' on table %s: UNIQUE, partial or on an "
                     "expression", o->name, o->tbl);
        else
            continue; /* a table of the user's, or an index that only orders ours */
        return refuse(ix, what);
    }
    for (int i = 0; i < ref->n; i++)
        if (!schema_find(file, ref->o[i].name))
            return hs_fail(HS_EFORMAT, "%s: not a headscope index: no %s '%s' (schema version "
                           "%d)", ix->path, ref->o[i].type, ref->o[i].name, v);
    return HS_OK;
}

/* hs_index_schema_check inside the caller's transaction. */
static int check_snapshot(hs_index *ix, int *version)
{
    sqlite3_stmt *st;
    int step = SQLITE_ERROR, v = 0;
    if (sqlite3_prepare_v2(ix->db, "PRAGMA main.user_version", -1, &st, NULL) == SQLITE_OK &&
        (step = sqlite3_step(st)) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (step != SQLITE_ROW)
        return hs_index_db_error(ix, "reading the schema version");
    /* the version indexes the migrations: checked before anything uses it */
    if (v < 0)
        return hs_fail(HS_EFORMAT, "%s: index schema version %d: not a version headscope writes "
                       "(0..%d), refused", ix->path, v, HS_INDEX_SCHEMA_VERSION);
    if (v > HS_INDEX_SCHEMA_VERSION)
        return hs_fail(HS_EFORMAT, "%s: index schema version %d is newer than this tool's %d",
                       ix->path, v, HS_INDEX_SCHEMA_VERSION);
    schema file, ref, all;
    if (schema_read(ix->db, &file)) {
        schema_free(&file);
        return hs_index_db_error(ix, "reading the schema");
    }
    int rc = reference(v, &ref);
    if (!rc && (rc = reference(HS_INDEX_SCHEMA_VERSION, &all)))
        schema_free(&ref);
    if (!rc) {
        rc = compare(ix, &file, &ref, &all, v);
        schema_free(&ref);
        schema_free(&all);
    }
    schema_free(&file);
    if (!rc)
        *version = ix->version = v;
    return rc;
}

int hs_index_schema_check(hs_index *ix, int *version)
{
    if (!sqlite3_get_autocommit(ix->db))
        return check_snapshot(ix, version);
    if (sqlite3_exec(ix->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return hs_index_db_error(ix, "reading the schema");
    const int rc = check_snapshot(ix, version);
    sqlite3_exec(ix->db, rc ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL);
    return rc;
}

int hs_index_wal_frames(const char *path)
{
    char wal[600];
    struct stat sb;
    snprintf(wal, sizeof wal, "%s-wal", path);
    return stat(wal, &sb) == 0 && sb.st_size > 32; /* more than the WAL header */
}
