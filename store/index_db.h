/* Private to store/index*.c: the handle behind the opaque hs_index, the
 * schema and its check, and the error helper every part uses. Nothing
 * outside store/ includes it; it is what keeps SQL in store/. */
#ifndef HS_INDEX_DB_H
#define HS_INDEX_DB_H

#include <stddef.h>

#include <sqlite3.h>

#include "index.h"

struct hs_index {
    sqlite3 *db;
    char path[512];
    int code; /* SQLite's (extended) result code of the last failure reported */
    int version; /* the schema version the last check found */
};

/* The schema version this code writes, and the migration from each version
 * v to v + 1 (index_schema.c). */
enum { HS_INDEX_SCHEMA_VERSION = 6 };
extern const char *const hs_index_migrations[HS_INDEX_SCHEMA_VERSION];

/* Opens path into ix->db with sqlite3_open_v2 flags, SQLite's defensive
 * settings on (no triggers, no views, no trusted schema) and a 30 s busy
 * timeout. HS_EIO "PATH: cannot open the index: ..." (saying why when the
 * file or its directory is read-only); ix->db may be set either way. */
int hs_index_db_open(hs_index *ix, const char *path, int flags);

/* Reads the schema version and checks the file's schema is exactly the one
 * this code creates for it (index_schema.c says what else is accepted).
 * *version gets it on success; HS_EFORMAT naming what was found otherwise,
 * HS_EIO when the file cannot be read (not a database). The version and
 * the schema are read in one snapshot: inside the caller's transaction, or
 * a read transaction of its own. */
int hs_index_schema_check(hs_index *ix, int *version);

/* Why path cannot be written, when that is why SQLite failed: a read-only
 * file system, a read-only file, or a directory where SQLite cannot create
 * the -wal and -shm files WAL mode keeps beside the index. "" otherwise. */
void hs_index_readonly_reason(const char *path, char *why, size_t n);

/* 1 when PATH-wal holds frames (changes not yet in the database file). */
int hs_index_wal_frames(const char *path);

/* Records HS_EIO "PATH: what: SQLite's message" (and, for a write SQLite
 * could not make, why the file is read-only) and returns it; ix->code gets
 * SQLite's result code. */
int hs_index_db_error(hs_index *ix, const char *what);

#endif
