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

/* ---- The causal figures (SPEC §11; plot_interp.c) ---------------------------
 * Each reads one run (run_id 0: the latest holding its metric) and draws
 * through its script: plot_patch.gp, plot_dla.gp, plot_lens.gp,
 * plot_composition.gp. HS_EINVAL naming the metric when the index has none. */

/* A residual-stream patching metric (patch_resid_pre, patch_attn_out,
 * patch_mlp_out; NULL: patch_resid_pre) as a layer x position heatmap, the
 * positions labelled with the tokens of the run's first clean prompt of that
 * length: their text through the run's tokenizer when one opens, else their
 * ids. */
int plot_patch(hs_index *ix, const char *db, const char *metric, long long run_id,
               const char *out);

/* The parts of a dla run as sorted bars with +- 2 standard errors: heads,
 * MLPs and model-wide parts (the 40 largest by |value| when there are more). */
int plot_dla(hs_index *ix, const char *db, long long run_id, const char *out);

/* The logit lens curve of a logit-lens run: loss (and, on prompts, the logit
 * difference) against the layer. */
int plot_lens(hs_index *ix, const char *db, long long run_id, const char *out);

/* One composition kind (q_composition, k_composition, v_composition; NULL:
 * q) as a heads x heads matrix on 0 .. 1, beside its control's. */
int plot_composition(hs_index *ix, const char *db, const char *metric, long long run_id,
                     const char *out);

/* 1 when kind is one of the plot kinds above: patch, dla, lens, composition. */
int plot_interp_kind(const char *kind);

/* Draws plot kind `kind` (plot_interp_kind) of the index. */
int plot_interp(hs_index *ix, const char *db, const char *kind, const char *metric,
                long long run_id, const char *out);

/* cmd_plot.c's pieces, shared with plot_interp.c: gnuplot string quoting,
 * running a script, the temporary data directory. */
void plot_quote(char *out, size_t n, const char *s);
int plot_gnuplot(const char *script, const char *assignments, const char *outfile);
int plot_tmpdir(char *dir, size_t n);

#endif
