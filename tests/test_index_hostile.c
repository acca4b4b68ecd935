/* Index files nobody should trust (SPEC §7): a schema version below 0 or
 * past this tool's, triggers on any table (they would run on headscope's
 * own writes: metrics rewritten, rows dropped, a failed run turned
 * complete, earlier runs deleted), views, tables and indexes that are not
 * as headscope creates them. Each is refused by the write open and the read
 * open with a message naming what was found, and the file is left exactly
 * as it was (its bytes and its WAL's). What is accepted is pinned too:
 * extra tables, extra plain indexes, indexes of every earlier schema version
 * (migrated), and an index on a directory the reader cannot write. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <sqlite3.h>

#include "index.h"
#include "runner.h"
#include "sha256.h"

/* A directory of its own for each index, so its side files are easy to see. */
typedef struct {
    char dir[64], db[96], wal[100], shm[100];
} ix_files;

static void files_init(ix_files *f)
{
    snprintf(f->dir, sizeof f->dir, "/tmp/hs_ixh_XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(f->dir));
    snprintf(f->db, sizeof f->db, "%s/index.db", f->dir);
    snprintf(f->wal, sizeof f->wal, "%s-wal", f->db);
    snprintf(f->shm, sizeof f->shm, "%s-shm", f->db);
}

static void files_remove(const ix_files *f)
{
    remove(f->db), remove(f->wal), remove(f->shm);
    CU_ASSERT_EQUAL(rmdir(f->dir), 0);
}

static void exec_sql(const char *path, const char *sql)
{
    sqlite3 *db;
    CU_ASSERT_EQUAL_FATAL(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        printf("\n    planting failed: %s\n    in: %s", err ? err : "?", sql);
    CU_ASSERT_PTR_NULL_FATAL(err);
    sqlite3_close(db);
}

static long long count(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    long long n = -1;
    CU_ASSERT_EQUAL_FATAL(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* A complete index of this tool's schema with one finished run holding a
 * metric, as a command leaves it (WAL mode, no side files after close). */
static void make_index(const char *path)
{
    hs_index *ix;
    CU_ASSERT_EQUAL_FATAL(hs_index_open(&ix, path), HS_OK);
    hs_run_info info = { .kind = "ablate", .model_sha256 = "aaaa" };
    int64_t run;
    CU_ASSERT_EQUAL_FATAL(hs_index_run_begin(ix, &info, &run), HS_OK);
    const hs_metric_row row = { 0, 1, "loss_delta_zero", 0.25, 0.01, 4, NULL };
    CU_ASSERT_EQUAL_FATAL(hs_index_metrics_add(ix, run, &row, 1), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    hs_index_close(ix);
}

/* What a refusal must leave as it was: the database's bytes, and whether
 * each side file exists (and the WAL's bytes when it does). */
typedef struct {
    char db[65], wal[65];
    int has_wal, has_shm;
} ix_state;

static void state_of(const ix_files *f, ix_state *s)
{
    memset(s, 0, sizeof *s);
    CU_ASSERT_EQUAL(hs_sha256_file(f->db, s->db, NULL), HS_OK);
    s->has_wal = access(f->wal, F_OK) == 0;
    s->has_shm = access(f->shm, F_OK) == 0;
    if (s->has_wal)
        CU_ASSERT_EQUAL(hs_sha256_file(f->wal, s->wal, NULL), HS_OK);
}

typedef int (*open_fn)(hs_index **, const char *);

#if defined(__SANITIZE_ADDRESS__)
#define IX_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IX_UNDER_ASAN 1
#endif
#endif

/* Runs open(path) in a child process, so that a crash (the out-of-bounds
 * read of an unchecked schema version) fails this test instead of the
 * whole suite. Returns the status, or -1 with msg "killed by signal N";
 * msg gets hs_last_error(). Under ASan it runs here: ASan reports such a
 * read itself, at its line, and a fork of a sanitized process costs
 * ~100 ms (the 113 opens took 15 s). */
static int open_in_child(open_fn open, const char *path, char *msg, size_t n)
{
#ifdef IX_UNDER_ASAN
    hs_index *ix = NULL;
    const int rc = open(&ix, path);
    hs_index_close(ix);
    snprintf(msg, n, "%s", rc ? hs_last_error() : "");
    return rc;
#else
    int fds[2];
    CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
    fflush(NULL);
    const pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        hs_index *ix = NULL;
        const int rc = open(&ix, path);
        hs_index_close(ix);
        char out[1100];
        const int k = snprintf(out, sizeof out, "%d %s", rc, rc ? hs_last_error() : "");
        ssize_t w = write(fds[1], out, (size_t)(k < (int)sizeof out ? k : (int)sizeof out - 1));
        _exit(w < 0);
    }
    close(fds[1]);
    char buf[1100] = "";
    size_t got = 0;
    ssize_t r;
    while (got + 1 < sizeof buf && (r = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)r;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) {
        snprintf(msg, n, "killed by signal %d", WTERMSIG(st));
        return -1;
    }
    int rc = -2;
    char *sp = strchr(buf, ' ');
    if (sscanf(buf, "%d", &rc) != 1 || !sp)
        snprintf(msg, n, "no answer from the child (status %d)", WEXITSTATUS(st));
    else
        snprintf(msg, n, "%s", sp + 1);
    return rc;
#endif
}

/* Both opens refuse f->db with HS_EFORMAT, the message naming the file and
 * holding each of want[] (NULL-terminated); the file stays as it was. */
static void expect_refused(const ix_files *f, const char *what, const char *const *want)
{
    ix_state before, after;
    state_of(f, &before);
    static const struct { open_fn fn; const char *name; } opens[2] = {
        { hs_index_open, "hs_index_open" }, { hs_index_open_read, "hs_index_open_read" },
    };
    for (int k = 0; k < 2; k++) {
        char msg[1100];
        const int rc = open_in_child(opens[k].fn, f->db, msg, sizeof msg);
        int named = strstr(msg, f->db) != NULL;
        for (int i = 0; want[i]; i++)
            named = named && strstr(msg, want[i]);
        if (rc != HS_EFORMAT || !named)
            printf("\n    %s: %s gave %d \"%s\"", what, opens[k].name, rc, msg);
        CU_ASSERT_EQUAL(rc, HS_EFORMAT);
        CU_ASSERT(named);
        state_of(f, &after);
        if (memcmp(&before, &after, sizeof before))
            printf("\n    %s: %s changed the file (or its side files)", what, opens[k].name);
        CU_ASSERT(!memcmp(&before, &after, sizeof before));
    }
}

/* Both opens accept f->db (the write open first: it migrates an older
 * schema), and a run can be recorded in it. */
static void expect_accepted(const ix_files *f, const char *what)
{
    hs_index *ix = NULL;
    int rc = hs_index_open(&ix, f->db);
    if (rc)
        printf("\n    %s: hs_index_open gave %d \"%s\"", what, rc, hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    hs_run_info info = { .kind = "eval" };
    int64_t run = 0;
    CU_ASSERT_EQUAL(hs_index_run_begin(ix, &info, &run), HS_OK);
    CU_ASSERT_EQUAL(hs_index_run_finish(ix, run, "complete", NULL), HS_OK);
    hs_index_close(ix);
    char msg[1100];
    rc = open_in_child(hs_index_open_read, f->db, msg, sizeof msg);
    if (rc)
        printf("\n    %s: hs_index_open_read gave %d \"%s\"", what, rc, msg);
    CU_ASSERT_EQUAL(rc, HS_OK);
}

static void test_schema_versions_below_zero_or_past_ours_are_refused(void)
{
    static const struct { int v; const char *shown; } cases[] = {
        { -1, "-1" }, { -2, "-2" }, { -100, "-100" }, { INT_MIN, "-2147483648" },
        { 7, "version 7" }, { 99, "99" }, { INT_MAX, "2147483647" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char sql[64], what[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version=%d;", cases[i].v);
        snprintf(what, sizeof what, "user_version %d", cases[i].v);
        ix_files f;
        files_init(&f);
        make_index(f.db);
        exec_sql(f.db, sql);
        const char *want[] = { "schema version", cases[i].shown, NULL };
        expect_refused(&f, what, want);
        files_remove(&f);
        /* and with no table at all: a number no headscope index holds */
        files_init(&f);
        exec_sql(f.db, sql);
        expect_refused(&f, what, want);
        files_remove(&f);
    }
}

static const char *const TABLES[] = { "runs", "head_metrics", "curves", "artifacts",
                                      "position_metrics", "head_pair_metrics" };

/* A trigger of each kind (INSERT, UPDATE, DELETE; BEFORE and AFTER) on each
 * of our tables, each doing what would corrupt results unseen. */
static void test_triggers_on_any_table_are_refused_and_nothing_changes(void)
{
    static const char *const ops[] = { "AFTER INSERT", "BEFORE UPDATE", "AFTER DELETE" };
    for (size_t t = 0; t < sizeof TABLES / sizeof TABLES[0]; t++)
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            ix_files f;
            files_init(&f);
            make_index(f.db);
            char sql[300], on[80], what[120];
            snprintf(sql, sizeof sql, "CREATE TRIGGER hs_planted %s ON %s BEGIN UPDATE"
                     " head_metrics SET value=999; END;", ops[o], TABLES[t]);
            exec_sql(f.db, sql);
            snprintf(on, sizeof on, "on table %s", TABLES[t]);
            snprintf(what, sizeof what, "%s trigger on %s", ops[o], TABLES[t]);
            const char *want[] = { "trigger 'hs_planted'", on, "not part of a headscope index",
                                   NULL };
            expect_refused(&f, what, want);
            files_remove(&f);
        }
    /* the attacks as found: every metric rewritten, every metric dropped with
     * the run complete, a failed run turned complete, earlier runs deleted;
     * and a trigger on a table of the user's that writes ours */
    static const struct { const char *sql, *name, *on; } attacks[] = {
        { "CREATE TRIGGER t999 AFTER INSERT ON head_metrics BEGIN UPDATE head_metrics SET"
          " value=999 WHERE rowid=NEW.rowid; END;", "'t999'", "head_metrics" },
        { "CREATE TRIGGER tdrop AFTER INSERT ON head_metrics BEGIN DELETE FROM head_metrics"
          " WHERE rowid=NEW.rowid; END;", "'tdrop'", "head_metrics" },
        { "CREATE TRIGGER tflip AFTER UPDATE OF status ON runs WHEN NEW.status='failed' BEGIN"
          " UPDATE runs SET status='complete' WHERE run_id=NEW.run_id; END;", "'tflip'", "runs" },
        { "CREATE TRIGGER tgone AFTER INSERT ON runs BEGIN DELETE FROM runs WHERE"
          " run_id<NEW.run_id; END;", "'tgone'", "runs" },
        { "CREATE TABLE notes(x); CREATE TRIGGER tnote AFTER INSERT ON notes BEGIN DELETE FROM"
          " runs; END;", "'tnote'", "notes" },
    };
    for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++) {
        ix_files f;
        files_init(&f);
        make_index(f.db);
        exec_sql(f.db, attacks[i].sql);
        const char *want[] = { attacks[i].name, attacks[i].on, NULL };
        expect_refused(&f, attacks[i].name, want);
        files_remove(&f);
    }
}

/* A trigger only in the WAL (not yet checkpointed into the database file):
 * read through the WAL, refused, and the WAL keeps its frames. */
static void test_a_trigger_only_in_the_wal_is_refused_and_the_wal_kept(void)
{
    ix_files f;
    files_init(&f);
    make_index(f.db);
    sqlite3 *db;
    CU_ASSERT_EQUAL_FATAL(sqlite3_open(f.db, &db), SQLITE_OK);
    CU_ASSERT_EQUAL(sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL), SQLITE_OK);
    CU_ASSERT_EQUAL(sqlite3_exec(db, "PRAGMA wal_autocheckpoint=0; CREATE TRIGGER twal AFTER"
                                     " INSERT ON runs BEGIN DELETE FROM head_metrics; END;",
                                 NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    struct stat sb;
    CU_ASSERT_FATAL(stat(f.wal, &sb) == 0 && sb.st_size > 0);
    const char *want[] = { "trigger 'twal'", "on table runs", NULL };
    expect_refused(&f, "a trigger in the WAL", want);
    files_remove(&f);
}

static void test_views_are_refused(void)
{
    static const struct { const char *sql, *found; } cases[] = {
        /* a view in place of one of our tables, made writable by a trigger */
        { "DROP TABLE curves; CREATE VIEW curves AS SELECT 1 AS run_id, 'c' AS curve, 0 AS step,"
          " 0 AS x, 0 AS y;", "view 'curves'" },
        { "DROP TABLE artifacts; CREATE VIEW artifacts AS SELECT run_id, 'x' AS path, NULL AS"
          " sha256, 0 AS bytes, 1 AS complete FROM runs;", "view 'artifacts'" },
        { "CREATE VIEW summary AS SELECT * FROM head_metrics;", "view 'summary'" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ix_files f;
        files_init(&f);
        make_index(f.db);
        exec_sql(f.db, cases[i].sql);
        const char *want[] = { cases[i].found, "not part of a headscope index", NULL };
        expect_refused(&f, cases[i].found, want);
        files_remove(&f);
    }
}

/* Objects that change what our own statements do are refused: a UNIQUE
 * index (INSERT OR REPLACE would delete other rows), an index on an
 * expression or a WHERE clause (code of the file's run on our writes), a
 * virtual table (a module's code), one of our tables defined otherwise, one
 * missing, and a table of a later schema in an earlier one. */
static void test_objects_that_change_our_statements_are_refused(void)
{
    static const struct { const char *sql, *found; } cases[] = {
        { "CREATE UNIQUE INDEX hm_one ON head_metrics(run_id);", "index 'hm_one'" },
        { "CREATE INDEX hm_expr ON head_metrics(abs(value));", "index 'hm_expr'" },
        { "CREATE INDEX hm_part ON head_metrics(metric) WHERE value > 0;", "index 'hm_part'" },
        { "ALTER TABLE artifacts RENAME TO artifacts_old; CREATE TABLE artifacts(run_id INTEGER"
          " NOT NULL, path TEXT NOT NULL COLLATE NOCASE, sha256 TEXT, bytes INTEGER,"
          " complete INTEGER); DROP TABLE artifacts_old;", "table 'artifacts'" },
        { "ALTER TABLE runs ADD COLUMN note TEXT DEFAULT 'x';", "table 'runs'" },
        { "DROP TABLE head_pair_metrics;", "no table 'head_pair_metrics'" },
        { "DROP INDEX curves_run;", "no index 'curves_run'" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ix_files f;
        files_init(&f);
        make_index(f.db);
        exec_sql(f.db, cases[i].sql);
        const char *want[] = { cases[i].found, NULL };
        expect_refused(&f, cases[i].found, want);
        files_remove(&f);
    }
    /* a virtual table, where this SQLite has the module */
    ix_files f;
    files_init(&f);
    make_index(f.db);
    sqlite3 *db;
    CU_ASSERT_EQUAL_FATAL(sqlite3_open(f.db, &db), SQLITE_OK);
    const int have = sqlite3_exec(db, "CREATE VIRTUAL TABLE notes USING fts5(body);", NULL, NULL,
                                  NULL) == SQLITE_OK ||
                     sqlite3_exec(db, "CREATE VIRTUAL TABLE notes USING rtree(id, a, b);", NULL,
                                  NULL, NULL) == SQLITE_OK;
    sqlite3_close(db);
    if (have) {
        const char *want[] = { "virtual table 'notes'", NULL };
        expect_refused(&f, "a virtual table", want);
    } else {
        printf("\n    (this SQLite has neither fts5 nor rtree: virtual table case skipped)");
    }
    files_remove(&f);
}

/* What a user may add without changing what headscope's statements do: a
 * table of their own (with its own index) and a plain index on ours; and
 * the statistics ANALYZE leaves. */
static void test_extra_tables_and_plain_indexes_are_accepted(void)
{
    static const char *const cases[] = {
        ("CREATE TABLE notes(run_id INTEGER REFERENCES runs(run_id), body TEXT);"
         " CREATE INDEX notes_run ON notes(run_id);"),
        "CREATE INDEX hm_metric ON head_metrics(metric, value);",
        "CREATE INDEX runs_kind ON runs(kind, status);",
        "ANALYZE;",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ix_files f;
        files_init(&f);
        make_index(f.db);
        exec_sql(f.db, cases[i]);
        expect_accepted(&f, cases[i]);
        CU_ASSERT_EQUAL(count(f.db, "SELECT count(*) FROM runs WHERE status='complete'"), 2);
        files_remove(&f);
    }
}

/* Schema version 1 exactly as headscope wrote it, and version 2 (runs.pid,
 * runs.host): what indexes of earlier releases hold. */
static const char V1[] =
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
    " path TEXT NOT NULL, sha256 TEXT, bytes INTEGER, complete INTEGER);"
    "INSERT INTO runs(kind, status) VALUES('ablate', 'complete');"
    "INSERT INTO head_metrics VALUES(1, 0, 0, 'loss_delta_zero', 0.5, 0.1, 4);"
    "PRAGMA user_version=1;";
static const char V2[] = "ALTER TABLE runs ADD COLUMN pid INTEGER; ALTER TABLE runs ADD COLUMN"
                         " host TEXT; PRAGMA user_version=2;";

static void test_indexes_of_every_earlier_version_migrate(void)
{
    static const char *const extras[] = { "", "CREATE TABLE mine(x);",
                                          ("CREATE TABLE mine(x); CREATE INDEX hm_m ON"
                                           " head_metrics(metric);") };
    for (int v = 0; v <= 2; v++)
        for (int e = 0; e < (v ? 3 : 2); e++) {
            ix_files f;
            files_init(&f);
            if (v == 0) {
                const int fd = open(f.db, O_CREAT | O_WRONLY, 0644); /* an empty file */
                CU_ASSERT_FATAL(fd >= 0);
                close(fd);
            }
            if (v >= 1)
                exec_sql(f.db, V1);
            if (v >= 2)
                exec_sql(f.db, V2);
            if (*extras[e])
                exec_sql(f.db, extras[e]);
            char what[64];
            snprintf(what, sizeof what, "a version %d index%s", v, e ? " with extras" : "");
            expect_accepted(&f, what);
            CU_ASSERT_EQUAL(count(f.db, "PRAGMA user_version"), 6);
            CU_ASSERT_EQUAL(count(f.db, "SELECT count(*) FROM runs"), v ? 2 : 1);
            /* version 5's keys: the row kept, of attention type 'self' */
            CU_ASSERT_EQUAL(count(f.db, "SELECT count(*) FROM head_metrics WHERE attn = 'self'"
                                        " AND metric = 'loss_delta_zero' AND value = 0.5"),
                            v ? 1 : 0);
            CU_ASSERT_EQUAL(count(f.db, "SELECT count(*) FROM sqlite_master WHERE name IN"
                                        " ('position_metrics', 'head_pair_metrics', 'run_params',"
                                        " 'edge_metrics')"), 4);
            files_remove(&f);
        }
    /* a table of a later version in an index of version 2 */
    {
        ix_files f;
        files_init(&f);
        exec_sql(f.db, V1);
        exec_sql(f.db, V2);
        exec_sql(f.db, "CREATE TABLE position_metrics(x);");
        const char *want[] = { "table 'position_metrics'", NULL };
        expect_refused(&f, "a later table in version 2", want);
        files_remove(&f);
    }
    /* and an index of version 2 is read as it is, unmigrated */
    ix_files f;
    files_init(&f);
    exec_sql(f.db, V1);
    exec_sql(f.db, V2);
    hs_index *ix = NULL;
    CU_ASSERT_EQUAL(hs_index_open_read(&ix, f.db), HS_OK);
    hs_run_list runs = { 0 };
    CU_ASSERT_EQUAL(hs_index_runs(ix, NULL, NULL, &runs), HS_OK);
    CU_ASSERT_EQUAL(runs.n, 1);
    hs_run_list_free(&runs);
    hs_index_close(ix);
    CU_ASSERT_EQUAL(count(f.db, "PRAGMA user_version"), 2);
    files_remove(&f);
}

/* Numbers the readers hand on as indices (composition rows, per-layer
 * series) are range-checked: a layer of 2^40 does not wrap to an int, a
 * negative head is not a head. */
static void test_readers_refuse_indices_out_of_range(void)
{
    /* (each a literal in two parts, in parentheses: one element) */
    static const char *const rows[] = {
        ("INSERT INTO head_pair_metrics(run_id, layer_a, head_a, layer_b, head_b, metric, value)"
         " VALUES(1, 0, 0, 1099511627776, 0, 'k_composition', 0.5);"),
        ("INSERT INTO head_pair_metrics(run_id, layer_a, head_a, layer_b, head_b, metric, value)"
         " VALUES(1, 0, -1, 1, 0, 'k_composition', 0.5);"),
        ("INSERT INTO head_pair_metrics(run_id, layer_a, head_a, layer_b, head_b, metric, value)"
         " VALUES(1, 0, 0, 1, 70000, 'k_composition', 0.5);"),
        ("INSERT INTO head_metrics(run_id, layer, head, metric, value, stderr, n)"
         " VALUES(1, 1099511627776, -1, 'k_composition', 0.5, 0, 1);"),
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ix_files f;
        files_init(&f);
        make_index(f.db);
        exec_sql(f.db, rows[i]);
        hs_index *ix = NULL;
        CU_ASSERT_EQUAL_FATAL(hs_index_open_read(&ix, f.db), HS_OK);
        hs_pair_list l = { 0 };
        hs_metric_series s = { 0 };
        const int rc = i < 3 ? hs_index_pair_metrics(ix, 1, "k_composition", &l)
                             : hs_index_layer_series(ix, 1, "k_composition", &s);
        if (rc != HS_EFORMAT)
            printf("\n    %s: %d (%d rows, first layer_b %d)", rows[i], rc, l.n + s.n,
                   l.n ? l.p[0].layer_b : -1);
        CU_ASSERT_EQUAL(rc, HS_EFORMAT);
        CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "out of range"));
        CU_ASSERT(l.n == 0 && s.n == 0);
        hs_pair_list_free(&l);
        hs_metric_series_free(&s);
        hs_index_close(ix);
        files_remove(&f);
    }
}

/* An index on a directory the reader cannot write (a read-only file
 * system, a colleague's results): SQLite's WAL mode wants a -shm file
 * beside it. The reads work; the write open says it is read-only. Run as an
 * unprivileged user (root ignores permission bits). */
static void test_an_index_in_a_directory_we_cannot_write_is_read(void)
{
    ix_files f;
    files_init(&f);
    make_index(f.db);
    ix_state before;
    state_of(&f, &before);
    CU_ASSERT_EQUAL_FATAL(chmod(f.db, 0644), 0);
    CU_ASSERT_EQUAL_FATAL(chmod(f.dir, 0555), 0);
    int fds[2];
    CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
    fflush(NULL);
    const pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        char msg[1200] = "";
        int code = 0;
        if (geteuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534))) {
            snprintf(msg, sizeof msg, "cannot become an unprivileged user: %s", strerror(errno));
            code = 77;
        }
        char probe[128];
        snprintf(probe, sizeof probe, "%s/probe", f.dir);
        int fd;
        if (!code && (fd = open(probe, O_CREAT | O_WRONLY, 0644)) >= 0) {
            close(fd);
            unlink(probe);
            snprintf(msg, sizeof msg, "permission bits do not stop this user");
            code = 77;
        }
        hs_index *ix = NULL;
        int rc = code ? 0 : hs_index_open_read(&ix, f.db);
        hs_run_list runs = { 0 };
        if (!code && rc)
            snprintf(msg, sizeof msg, "hs_index_open_read: %s", hs_last_error()), code = 1;
        else if (!code && (hs_index_runs(ix, NULL, NULL, &runs) || runs.n != 1))
            snprintf(msg, sizeof msg, "reading runs: %d runs: %s", runs.n, hs_last_error()),
                code = 2;
        hs_run_list_free(&runs);
        hs_index_close(ix);
        ix = NULL;
        if (!code && !(rc = hs_index_open(&ix, f.db)))
            snprintf(msg, sizeof msg, "hs_index_open succeeded"), code = 3;
        else if (!code && !strstr(hs_last_error(), "read-only"))
            snprintf(msg, sizeof msg, "hs_index_open: %s", hs_last_error()), code = 4;
        hs_index_close(ix);
        ssize_t w = write(fds[1], msg, strlen(msg));
        (void)w;
        _exit(code);
    }
    close(fds[1]);
    char msg[1200] = "";
    ssize_t r = read(fds[0], msg, sizeof msg - 1);
    msg[r > 0 ? r : 0] = 0;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CU_ASSERT_EQUAL(chmod(f.dir, 0755), 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
        printf("\n    skipped: %s", msg);
    } else {
        if (!WIFEXITED(st) || WEXITSTATUS(st))
            printf("\n    as an unprivileged reader: %s (status %d)", msg, st);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        ix_state after;
        state_of(&f, &after);
        CU_ASSERT(!memcmp(&before, &after, sizeof before));
    }
    files_remove(&f);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_schema_versions_below_zero_or_past_ours_are_refused",
          test_schema_versions_below_zero_or_past_ours_are_refused },
        { "test_triggers_on_any_table_are_refused_and_nothing_changes",
          test_triggers_on_any_table_are_refused_and_nothing_changes },
        { "test_a_trigger_only_in_the_wal_is_refused_and_the_wal_kept",
          test_a_trigger_only_in_the_wal_is_refused_and_the_wal_kept },
        { "test_views_are_refused", test_views_are_refused },
        { "test_objects_that_change_our_statements_are_refused",
          test_objects_that_change_our_statements_are_refused },
        { "test_extra_tables_and_plain_indexes_are_accepted",
          test_extra_tables_and_plain_indexes_are_accepted },
        { "test_indexes_of_every_earlier_version_migrate",
          test_indexes_of_every_earlier_version_migrate },
        { "test_readers_refuse_indices_out_of_range", test_readers_refuse_indices_out_of_range },
        { "test_an_index_in_a_directory_we_cannot_write_is_read",
          test_an_index_in_a_directory_we_cannot_write_is_read },
    };
    return hs_run_tests("index_hostile", tests, HS_NTESTS(tests));
}
