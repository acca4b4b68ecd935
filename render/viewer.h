/* The interactive viewer (`view`, and `report` beside its figures): the
 * page and script of scripts/viewer/ (hs_scripts_dir) copied into a
 * directory, with the export of a map file (store/viewer_export.h). */
#ifndef HS_RENDER_VIEWER_H
#define HS_RENDER_VIEWER_H

#include "viewer_export.h"

/* Writes rq->dir/index.html, viewer.js, viewer.css and the export of
 * rq->maps. The directory must exist. The page's sources are checked before
 * anything is written and the data written before the page, so a failure
 * never leaves a page over data that is not there; each file is written
 * under a temporary name and moved into place when complete. */
int hs_viewer_write(const hs_viewer_request *rq, hs_viewer_summary *sum);

/* hs_viewer_write with the scores of the index at db (NULL: none), opened
 * read-only here; rq->ix is ignored. */
int hs_viewer_write_db(const hs_viewer_request *rq, const char *db, hs_viewer_summary *sum);

#endif
