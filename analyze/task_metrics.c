#include "task_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"

static const char *const names[HS_TASK_N_METRICS] = { "accuracy", "f1", "mcc", "pearson",
                                                        "spearman" };

const char *hs_task_metric_name(hs_task_metric m)
{
    return names[m];
}

int hs_task_metric_of(const char *name)
{
    for (int m = 0; m < HS_TASK_N_METRICS; m++)
        if (!strcmp(name, names[m]))
            return m;
    return -1;
}

int hs_task_metric_applies(hs_task_kind kind, hs_task_metric m)
{
    if (kind == HS_TASK_REGRESSION)
        return m == HS_TASK_PEARSON || m == HS_TASK_SPEARMAN;
    if (kind == HS_TASK_MULTI_LABEL)
        return m == HS_TASK_ACCURACY || m == HS_TASK_F1;
    return m == HS_TASK_ACCURACY || m == HS_TASK_F1 || m == HS_TASK_MCC;
}

hs_task_metric hs_task_headline(hs_task_kind kind)
{
    return kind == HS_TASK_REGRESSION ? HS_TASK_PEARSON : HS_TASK_ACCURACY;
}

/* The predicted class of example i: the first largest output. */
static int argmax(const hs_task_outputs *o, int i)
{
    const double *x = o->out + (size_t)i * o->k;
    int best = 0;
    for (int j = 1; j < o->k; j++)
        if (x[j] > x[best])
            best = j;
    return best;
}

double hs_task_loss(const hs_task_outputs *o, int i)
{
    const double *x = o->out + (size_t)i * o->k;
    if (o->kind == HS_TASK_REGRESSION)
        return (x[0] - o->target[i]) * (x[0] - o->target[i]);
    if (o->kind == HS_TASK_MULTI_LABEL) { /* mean of max(x,0) - x*y + log(1 + exp(-|x|)) */
        double s = 0;
        for (int j = 0; j < o->k; j++) {
            const double y = o->target[(size_t)i * o->k + j];
            s += fmax(x[j], 0) - x[j] * y + log1p(exp(-fabs(x[j])));
        }
        return s / o->k;
    }
    double mx = x[0], s = 0;
    for (int j = 1; j < o->k; j++)
        mx = fmax(mx, x[j]);
    for (int j = 0; j < o->k; j++)
        s += exp(x[j] - mx);
    return mx + log(s) - x[o->label[i]];
}

void hs_task_loss_grad(const hs_task_outputs *o, int i, double *g)
{
    const double *x = o->out + (size_t)i * o->k;
    if (o->kind == HS_TASK_REGRESSION) {
        g[0] = 2 * (x[0] - o->target[i]);
        return;
    }
    if (o->kind == HS_TASK_MULTI_LABEL) { /* (sigmoid(x) - y) / k */
        for (int j = 0; j < o->k; j++)
            g[j] = (1 / (1 + exp(-x[j])) - o->target[(size_t)i * o->k + j]) / o->k;
        return;
    }
    double mx = x[0], s = 0; /* softmax(x) - onehot(label) */
    for (int j = 1; j < o->k; j++)
        mx = fmax(mx, x[j]);
    for (int j = 0; j < o->k; j++)
        s += (g[j] = exp(x[j] - mx));
    for (int j = 0; j < o->k; j++)
        g[j] /= s;
    g[o->label[i]] -= 1;
}

/* What the classification and correlation metrics are functions of, with
 * one example taken out or put back in O(k) (the jackknife's loop). */
typedef struct {
    int k;
    long *conf;                     /* single-label: k x k, [true][predicted] */
    long m, exact, tp, fp, fn;      /* examples; multi-label: rows all right, label counts */
    double sx, sy, sxx, syy, sxy;   /* regression: output x, target y */
} tally;

static void tally_put(tally *t, const hs_task_outputs *o, int i, int sign)
{
    t->m += sign;
    if (o->kind == HS_TASK_SINGLE_LABEL) {
        t->conf[(size_t)o->label[i] * o->k + argmax(o, i)] += sign;
    } else if (o->kind == HS_TASK_MULTI_LABEL) {
        int right = 1;
        for (int j = 0; j < o->k; j++) {
            const int pred = o->out[(size_t)i * o->k + j] > 0;
            const int y = o->target[(size_t)i * o->k + j] > 0.5;
            right &= pred == y;
            t->tp += sign * (pred && y), t->fp += sign * (pred && !y), t->fn += sign * (!pred && y);
        }
        t->exact += sign * right;
    } else {
        const double x = o->out[i], y = o->target[i];
        t->sx += sign * x, t->sy += sign * y;
        t->sxx += sign * x * x, t->syy += sign * y * y, t->sxy += sign * x * y;
    }
}

static double f1_of(double tp, double fp, double fn)
{
    return 2 * tp + fp + fn > 0 ? 2 * tp / (2 * tp + fp + fn) : 0;
}

/* Pearson's r of n pairs from their sums (NaN for a constant). */
static double pearson_of(double n, double sx, double sy, double sxx, double syy, double sxy)
{
    const double vx = sxx - sx * sx / n, vy = syy - sy * sy / n, cxy = sxy - sx * sy / n;
    return vx > 0 && vy > 0 ? cxy / sqrt(vx * vy) : NAN;
}

static double tally_value(const tally *t, hs_task_kind kind, hs_task_metric m)
{
    if (kind == HS_TASK_REGRESSION)
        return pearson_of((double)t->m, t->sx, t->sy, t->sxx, t->syy, t->sxy);
    if (kind == HS_TASK_MULTI_LABEL)
        return m == HS_TASK_ACCURACY ? (double)t->exact / (double)t->m
                                     : f1_of((double)t->tp, (double)t->fp, (double)t->fn);
    const int k = t->k;
    double right = 0, s = (double)t->m, pt = 0, pp = 0, tt = 0, f1 = 0;
    for (int c = 0; c < k; c++) {
        double true_c = 0, pred_c = 0;
        for (int j = 0; j < k; j++)
            true_c += (double)t->conf[(size_t)c * k + j], pred_c += (double)t->conf[(size_t)j * k + c];
        const double tp = (double)t->conf[(size_t)c * k + c];
        right += tp;
        pt += pred_c * true_c, pp += pred_c * pred_c, tt += true_c * true_c;
        f1 += f1_of(tp, pred_c - tp, true_c - tp);
    }
    if (m == HS_TASK_ACCURACY)
        return right / s;
    if (m == HS_TASK_F1) /* binary: class 1 positive; else the macro mean */
        return k == 2 ? f1_of((double)t->conf[3], (double)t->conf[1], (double)t->conf[2])
                      : f1 / k;
    const double den = sqrt((s * s - pp) * (s * s - tt)); /* Gorodkin's R_K */
    return den > 0 ? (right * s - pt) / den : 0;
}

static int tally_init(tally *t, const hs_task_outputs *o, int skip)
{
    memset(t, 0, sizeof *t);
    t->k = o->k;
    if (o->kind == HS_TASK_SINGLE_LABEL &&
        !(t->conf = hs_calloc((size_t)o->k * o->k, sizeof *t->conf, "task metrics")))
        return HS_ENOMEM;
    for (int i = 0; i < o->n; i++)
        if (i != skip)
            tally_put(t, o, i, +1);
    return HS_OK;
}

/* Average ranks (1-based) of x[0..n) into r: a stable merge sort of the
 * indices by value, then each run of ties given the mean of its places. */
static int average_ranks(const double *x, int n, double *r)
{
    int *ix = hs_calloc(2 * (size_t)n + 1, sizeof *ix, "task metrics"), *tmp = ix + n;
    if (!ix)
        return HS_ENOMEM;
    for (int i = 0; i < n; i++)
        ix[i] = i;
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            const int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            for (int a = lo, b = mid, o = lo; o < hi; o++)
                tmp[o] = (a < mid && (b >= hi || x[ix[a]] <= x[ix[b]])) ? ix[a++] : ix[b++];
        }
        memcpy(ix, tmp, (size_t)n * sizeof *ix);
    }
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && x[ix[j + 1]] == x[ix[i]])
            j++;
        for (int q = i; q <= j; q++)
            r[ix[q]] = (i + j) / 2.0 + 1;
        i = j + 1;
    }
    free(ix);
    return HS_OK;
}

/* Spearman's rho without example `skip`, from the average ranks rx, ry of
 * all n: taking x_s out lowers each other rank by 1 where x_s is smaller
 * and by 1/2 where it ties. */
static double spearman_without(const hs_task_outputs *o, const double *rx, const double *ry,
                               int skip)
{
    double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0, m = 0;
    for (int j = 0; j < o->n; j++) {
        if (j == skip)
            continue;
        double a = rx[j], b = ry[j];
        if (skip >= 0) {
            const double xs = o->out[skip], ys = o->target[skip];
            a -= (xs < o->out[j]) + 0.5 * (xs == o->out[j]);
            b -= (ys < o->target[j]) + 0.5 * (ys == o->target[j]);
        }
        sx += a, sy += b, sxx += a * a, syy += b * b, sxy += a * b, m++;
    }
    return pearson_of(m, sx, sy, sxx, syy, sxy);
}

/* The metric's n leave-one-out values (theta[i]) and its value on all. */
static int leave_one_out(const hs_task_outputs *o, hs_task_metric m, double *theta, double *all)
{
    if (!hs_task_metric_applies(o->kind, m))
        return hs_fail(HS_EINVAL, "%s does not apply to this task", names[m]);
    int rc = HS_OK;
    if (m == HS_TASK_SPEARMAN) {
        double *rx = hs_calloc(2 * (size_t)o->n + 1, sizeof *rx, "task metrics"), *ry = rx + o->n;
        if (!rx || average_ranks(o->out, o->n, rx) || average_ranks(o->target, o->n, ry))
            rc = HS_ENOMEM;
        for (int i = 0; !rc && i < o->n; i++)
            theta[i] = spearman_without(o, rx, ry, i);
        if (!rc)
            *all = spearman_without(o, rx, ry, -1);
        free(rx);
        return rc;
    }
    tally t;
    if ((rc = tally_init(&t, o, -1)))
        return rc;
    *all = tally_value(&t, o->kind, m);
    for (int i = 0; i < o->n; i++) {
        tally_put(&t, o, i, -1);
        theta[i] = tally_value(&t, o->kind, m);
        tally_put(&t, o, i, +1);
    }
    free(t.conf);
    return HS_OK;
}

double hs_task_metric_value(const hs_task_outputs *o, hs_task_metric m, int skip)
{
    double v = NAN;
    if (!hs_task_metric_applies(o->kind, m))
        return v;
    if (m == HS_TASK_SPEARMAN) {
        double *rx = hs_calloc(2 * (size_t)o->n + 1, sizeof *rx, "task metrics"), *ry = rx + o->n;
        if (rx && !average_ranks(o->out, o->n, rx) && !average_ranks(o->target, o->n, ry))
            v = spearman_without(o, rx, ry, skip);
        free(rx);
        return v;
    }
    tally t;
    if (!tally_init(&t, o, skip))
        v = tally_value(&t, o->kind, m);
    free(t.conf);
    return v;
}

/* The jackknife's standard error of n leave-one-out values. */
static double jackknife(const double *theta, int n)
{
    if (n < 2)
        return 0;
    double mean = 0, ss = 0;
    for (int i = 0; i < n; i++)
        mean += theta[i];
    mean /= n;
    for (int i = 0; i < n; i++)
        ss += (theta[i] - mean) * (theta[i] - mean);
    return sqrt((n - 1.0) / n * ss);
}

int hs_task_metric_se(const hs_task_outputs *o, hs_task_metric m, double *value, double *se)
{
    double *theta = hs_calloc((size_t)o->n + 1, sizeof *theta, "task metrics");
    int rc = theta ? leave_one_out(o, m, theta, value) : HS_ENOMEM;
    if (!rc)
        *se = jackknife(theta, o->n);
    free(theta);
    return rc;
}

int hs_task_metric_delta_se(const hs_task_outputs *a, const hs_task_outputs *b, hs_task_metric m,
                            double *delta, double *se)
{
    if (a->n != b->n)
        return hs_fail(HS_EINVAL, "a paired difference over %d and %d examples", a->n, b->n);
    double *theta = hs_calloc(2 * (size_t)a->n + 1, sizeof *theta, "task metrics"), va, vb;
    int rc = theta ? leave_one_out(a, m, theta, &va) : HS_ENOMEM;
    if (!rc)
        rc = leave_one_out(b, m, theta + a->n, &vb);
    if (!rc) {
        for (int i = 0; i < a->n; i++)
            theta[i] -= theta[a->n + i];
        *delta = va - vb;
        *se = jackknife(theta, a->n);
    }
    free(theta);
    return rc;
}
