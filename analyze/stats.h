/* The one implementation of SPEC §5's numbers: a Welford accumulator for the
 * mean and standard error (sample standard deviation with divisor n-1, over
 * sqrt(n)), and a table of per-head results whose rows are exactly the
 * index's head_metrics rows.
 *
 * Welford, not a sum and a sum of squares: the one-pass variance from those
 * cancels catastrophically when the spread is small next to the mean (loss
 * deltas of 1e-4 on losses of 3), and the merge below lets shards of one
 * sweep be combined in a fixed order with the same result. */
#ifndef HS_STATS_H
#define HS_STATS_H

#include <stddef.h>

#include "config.h" /* HS_MAX_LAYERS, HS_MAX_HEADS */
#include "index.h"

typedef struct {
    long n;
    double mean, m2; /* m2: sum of squared deviations from the mean */
} hs_welford;

static inline void hs_welford_add(hs_welford *w, double x)
{
    w->n++;
    const double d = x - w->mean;
    w->mean += d / (double)w->n;
    w->m2 += d * (x - w->mean);
}

/* Pairs (x, y) as above: both means and squared deviations and their
 * co-moment cxy = sum (x - mean x)(y - mean y), for the spread of x - k y
 * with k known only at the end (the delta method's stderr of a ratio). */
typedef struct {
    long n;
    double mx, my, m2x, m2y, cxy;
} hs_welford2;

static inline void hs_welford2_add(hs_welford2 *w, double x, double y)
{
    w->n++;
    const double dx = x - w->mx, dy = y - w->my;
    w->mx += dx / (double)w->n;
    w->my += dy / (double)w->n;
    w->m2x += dx * (x - w->mx);
    w->m2y += dy * (y - w->my);
    w->cxy += dx * (y - w->my);
}

/* Folds b into a (Chan et al.): the result equals adding b's values to a. */
void hs_welford_merge(hs_welford *a, const hs_welford *b);

/* Sample standard deviation (divisor n-1); 0 when n < 2. */
double hs_welford_sd(const hs_welford *w);

/* Standard error of the mean: sd / sqrt(n); 0 when n < 2. */
double hs_welford_stderr(const hs_welford *w);

/* HS_OK when every layer of c fits per-head buffers indexed
 * [l * HS_MAX_HEADS + h]; else HS_EINVAL naming the layer. */
int hs_heads_fit(const hs_model_config *c);

/* One accumulator per head of a model: acc[l * HS_MAX_HEADS + h]. */
typedef struct {
    int n_layer;
    int n_head[HS_MAX_LAYERS];
    hs_welford *acc;
} hs_head_stats;

/* Zeroed accumulators for every head of c (HS_EINVAL when a layer has more
 * than HS_MAX_HEADS heads). */
int hs_head_stats_init(hs_head_stats *s, const hs_model_config *c);
void hs_head_stats_free(hs_head_stats *s);

static inline hs_welford *hs_head_stat(const hs_head_stats *s, int layer, int head)
{
    return &s->acc[(size_t)layer * HS_MAX_HEADS + head];
}

/* A study's results: rows (layer, head, metric, value, stderr, n) exactly as
 * they go into head_metrics (layer = head = -1 for model-wide numbers). The
 * table owns copies of the metric names, so callers may compose them in
 * temporary buffers. */
typedef struct {
    hs_metric_row *rows;
    int n, cap;
    char **names; /* the owned names, one per distinct metric */
    int n_names, cap_names;
} hs_head_table;

void hs_head_table_free(hs_head_table *t);

/* Appends a row (HS_ENOMEM on failure). */
int hs_head_table_add(hs_head_table *t, int layer, int head, const char *metric, double value,
                      double stderr_value, long long n);

/* Appends the row of an accumulator: its mean, stderr and n. */
int hs_head_table_add_welford(hs_head_table *t, int layer, int head, const char *metric,
                              const hs_welford *w);

/* Appends one row per head of s named `metric`. */
int hs_head_table_add_heads(hs_head_table *t, const hs_head_stats *s, const char *metric);

/* The row with that key, or NULL. */
const hs_metric_row *hs_head_table_find(const hs_head_table *t, int layer, int head,
                                        const char *metric);

#endif
