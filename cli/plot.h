/* gnuplot renderings shared by `plot` and `report`. Each writes out (PNG, SVG
 * or PDF by its suffix: .png, .svg, .pdf) through a script in scripts/ (HEADSCOPE_SCRIPTS
 * overrides where), and fails with the library's error otherwise. The index
 * figures read through store/index.h on a handle the caller opened (db is
 * its path, for titles and messages). */
#ifndef HS_CLI_PLOT_H
#define HS_CLI_PLOT_H

#include "index.h"

/* "png", "svg" or "pdf" by out's suffix (any case); NULL for any other: the
 * renderings refuse it (HS_EINVAL) and write nothing. */
const char *plot_format(const char *out);

/* One head's map of sequence seq with token labels, or (grid) every head's. */
int plot_map(const char *maps, int layer, int head, long long seq, const char *out, int grid);

/* A layer x head grid of metric (beside metric_control when with_control), or
 * curves (comma-separated names, one line each); run_id 0: for each name, the
 * latest run holding it. */
int plot_index(hs_index *ix, const char *db, const char *metric, const char *curve,
               long long run_id, const char *out, int with_control);

/* The causal check of an induction run: random draws beside the targeted heads. */
int plot_causal(hs_index *ix, const char *db, long long run_id, const char *out);

/* The head-to-head Jensen-Shannon distance matrix CSV of `patterns --js-out`
 * as a heatmap with head labels on the fixed scale 0 .. sqrt(ln 2). */
int plot_js(const char *csv, const char *out);

#endif
