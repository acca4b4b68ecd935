/* The figures of `plot` and `report` (gnuplot.h runs gnuplot). Each writes
 * `out` (PNG, SVG or PDF by its suffix) through its script in scripts/, or
 * fails with the library's error and writes nothing. The index figures read
 * through store/index.h on a handle the caller opened read-only (db is its
 * path, for titles and messages); run 0 means, for each name, the latest run
 * holding it. Colour scales and labels come from each metric's descriptor
 * (analyze/metrics.h): probabilities on 0 .. 1, signed values diverging
 * about 0, a model beside its control on one scale. */
#ifndef HS_RENDER_PLOT_H
#define HS_RENDER_PLOT_H

#include "index.h"

/* One head's map of sequence seq with token labels, or (grid) every captured
 * head's as small multiples on one scale. */
int hs_plot_map(const char *maps, int layer, int head, long long seq, const char *out, int grid);

/* A layer x head grid of metric, beside metric_control when with_control. */
int hs_plot_scores(hs_index *ix, const char *db, const char *metric, long long run,
                   const char *out, int with_control);

/* Curves (comma-separated names), one line each. */
int hs_plot_curves(hs_index *ix, const char *db, const char *list, long long run,
                   const char *out);

/* The causal check of an induction run: random draws beside the targeted heads. */
int hs_plot_causal(hs_index *ix, const char *db, long long run, const char *out);

/* The head-to-head Jensen-Shannon distance matrix CSV of `patterns --js-out`
 * as a heatmap with head labels on the fixed scale 0 .. sqrt(ln 2). */
int hs_plot_js(const char *csv, const char *out);

/* A residual-stream patching metric (NULL: patch_resid_pre) as a layer x
 * position heatmap, the positions labelled as the run recorded them. */
int hs_plot_patch(hs_index *ix, const char *db, const char *metric, long long run,
                  const char *out);

/* The parts of a dla run as sorted bars with +- 2 standard errors: heads,
 * MLPs and model-wide parts (the 40 largest by |value| when there are more). */
int hs_plot_dla(hs_index *ix, const char *db, long long run, const char *out);

/* The logit lens curve: loss (and, on prompts, the logit difference)
 * against the layer. */
int hs_plot_lens(hs_index *ix, const char *db, long long run, const char *out);

/* One composition kind (NULL: q_composition) as a heads x heads matrix on
 * 0 .. 1, beside its control's. */
int hs_plot_composition(hs_index *ix, const char *db, const char *metric, long long run,
                        const char *out);

/* A circuit run's top edges by |score| (metric eap or eap_ig; NULL: the
 * latest run of either) as a graph drawn by Graphviz's dot: as many edges as
 * the smallest circuit of its faithfulness curve reaching 0.8, else 20, at
 * most 80; red edges raise the logit difference's change, blue lower it,
 * width by |score|, labels the receiver's path (q, k, v) and the score. */
int hs_plot_circuit(hs_index *ix, const char *db, const char *metric, long long run,
                    const char *out);

/* An attribution run's estimates (NULL: atp_z; or atp_pattern) against the
 * exact patching it recorded with --verify (patch_z, patch_pattern) for the
 * same heads, with the diagonal and the Spearman correlation. */
int hs_plot_atp(hs_index *ix, const char *db, const char *metric, long long run,
                const char *out);

/* Spearman's rank correlation of x and y (n pairs; ties take their mean
 * rank); NaN when n < 2 or a side is constant. */
double hs_spearman(const double *x, const double *y, int n);

/* ---- `plot KIND`: the kinds as a table ---------------------------------------------- */

typedef struct {
    const char *kind;      /* map, grid, scores, curve, causal, patch, dla, lens, composition */
    const char *maps;      /* map file (map, grid) */
    int layer, head;       /* map */
    long long seq;         /* map, grid */
    const char *db;        /* the index (every other kind) */
    const char *metric;    /* scores (required), patch, composition */
    const char *curve;     /* curve (required) */
    long long run;         /* 0: the latest run holding the metric */
    int control;           /* scores: beside its random-init control */
    const char *out;
} hs_plot_request;

/* One kind of figure: the options (as the command spells them) it takes
 * besides --out and --json, the one it requires, and a line for the help. */
typedef struct {
    const char *name;
    const char *options;  /* " --db --metric --run " */
    const char *required; /* "--metric NAME", or NULL */
    const char *help;
} hs_plot_kind;

/* Every kind, in the order the help lists them; *n their count. */
const hs_plot_kind *hs_plot_kinds(int *n);

/* The kind called name, or NULL. */
const hs_plot_kind *hs_plot_kind_find(const char *name);

/* Draws rq (its kind must be one of hs_plot_kinds): the map file or the
 * index (opened read-only, once) and the figure; the library's status. */
int hs_plot(const hs_plot_request *rq);

#endif
