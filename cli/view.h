/* The interactive viewer (`view`, and `report` beside its figures): the
 * page and script of scripts/viewer/ (HEADSCOPE_SCRIPTS overrides where)
 * copied into a directory, with the export of a map file
 * (store/viewer_export.h). */
#ifndef HS_CLI_VIEW_H
#define HS_CLI_VIEW_H

#include "viewer_export.h"

/* Writes rq->dir/index.html, viewer.js, viewer.css and the export of
 * rq->maps. The directory must exist. Returns the library's status; each
 * file is written under a temporary name and renamed when complete. */
int view_write(const hs_viewer_request *rq, hs_viewer_summary *sum);

#endif
