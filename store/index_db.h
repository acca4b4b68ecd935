/* Private to store/index.c (writes) and store/index_read.c (reads): the
 * handle behind the opaque hs_index and the error helper both halves use.
 * Nothing outside store/ includes it; it is what keeps SQL in store/. */
#ifndef HS_INDEX_DB_H
#define HS_INDEX_DB_H

#include <sqlite3.h>

#include "index.h"

struct hs_index {
    sqlite3 *db;
    char path[512];
};

/* Records HS_EIO "PATH: what: SQLite's message" and returns it. */
int hs_index_db_error(hs_index *ix, const char *what);

#endif
