/* The numbers of a labelled task (SPEC §16): per-example losses and the
 * metrics accuracy, f1, mcc, pearson and spearman of a model's outputs on
 * n examples, each with its jackknife standard error
 * sqrt((n-1)/n * sum_i (theta_(i) - theta_bar)^2) over the n leave-one-out
 * values, and the paired jackknife of a difference between two runs on the
 * same examples (an ablation: theta_(i) = metric_ablated(-i) -
 * metric_clean(-i)).
 *
 * Per problem type: single-label classification (cross-entropy; the
 * argmax is the prediction) has accuracy, f1 (binary: class 1 positive;
 * more classes: the macro mean, a class with no true and no predicted
 * example counting 0) and mcc (Matthews; more classes: Gorodkin's R_K);
 * multi-label (binary cross-entropy with logits, the mean over labels; a
 * label predicted when its logit > 0) has accuracy (every label right) and
 * micro f1; regression (one output; squared error) has pearson and
 * spearman (ties take their average rank). A metric undefined on the data
 * (a correlation of a constant) is NaN. */
#ifndef HS_TASK_METRICS_H
#define HS_TASK_METRICS_H

#include "common.h"

typedef enum { HS_TASK_SINGLE_LABEL, HS_TASK_MULTI_LABEL, HS_TASK_REGRESSION } hs_task_kind;

typedef enum {
    HS_TASK_ACCURACY,
    HS_TASK_F1,
    HS_TASK_MCC,
    HS_TASK_PEARSON,
    HS_TASK_SPEARMAN,
    HS_TASK_N_METRICS
} hs_task_metric;

/* A model's outputs on n examples and their labels: out (n x k; regression
 * k = 1), and per kind label[i] (single-label: a class 0..k-1), target
 * (multi-label: n x k of 0/1; regression: n values). */
typedef struct {
    hs_task_kind kind;
    int n, k;
    const double *out;
    const int *label;
    const double *target;
} hs_task_outputs;

/* The metric's name as the index records it ("accuracy", "f1", ...). */
const char *hs_task_metric_name(hs_task_metric m);

/* The metric named `name`, or -1. */
int hs_task_metric_of(const char *name);

/* 1 when the metric is defined for the kind (above). */
int hs_task_metric_applies(hs_task_kind kind, hs_task_metric m);

/* The headline metric of the kind: accuracy, or pearson for regression. */
hs_task_metric hs_task_headline(hs_task_kind kind);

/* Example i's loss (cross-entropy, the mean binary cross-entropy over
 * labels, or the squared error). */
double hs_task_loss(const hs_task_outputs *o, int i);

/* g (k values) = the gradient of example i's loss with respect to its
 * outputs out[i]. */
void hs_task_loss_grad(const hs_task_outputs *o, int i, double *g);

/* The metric over every example but `skip` (-1: over all). */
double hs_task_metric_value(const hs_task_outputs *o, hs_task_metric m, int skip);

/* The metric over all examples and its jackknife standard error (0 when
 * n < 2). HS_ENOMEM, or HS_EINVAL when the metric does not apply. */
int hs_task_metric_se(const hs_task_outputs *o, hs_task_metric m, double *value, double *se);

/* metric(a) - metric(b) over the same examples and its paired jackknife
 * standard error. */
int hs_task_metric_delta_se(const hs_task_outputs *a, const hs_task_outputs *b, hs_task_metric m,
                            double *delta, double *se);

#endif
