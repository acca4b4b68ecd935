#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void hs_welford_merge(hs_welford *a, const hs_welford *b)
{
    if (b->n == 0)
        return;
    if (a->n == 0) {
        *a = *b;
        return;
    }
    const double n = (double)(a->n + b->n);
    const double d = b->mean - a->mean;
    a->mean += d * (double)b->n / n;
    a->m2 += b->m2 + d * d * (double)a->n * (double)b->n / n;
    a->n += b->n;
}

double hs_welford_sd(const hs_welford *w)
{
    return w->n > 1 && w->m2 > 0 ? sqrt(w->m2 / (double)(w->n - 1)) : 0;
}

double hs_welford_stderr(const hs_welford *w)
{
    return w->n > 1 ? hs_welford_sd(w) / sqrt((double)w->n) : 0;
}

int hs_heads_fit(const hs_model_config *c)
{
    for (int l = 0; l < c->n_layer; l++)
        if (c->n_head[l] > HS_MAX_HEADS)
            return hs_fail(HS_EINVAL, "layer %d has %d heads; at most %d are supported", l,
                           c->n_head[l], HS_MAX_HEADS);
    return HS_OK;
}

int hs_head_stats_init(hs_head_stats *s, const hs_model_config *c)
{
    memset(s, 0, sizeof *s);
    const int rc = hs_heads_fit(c);
    if (rc)
        return rc;
    s->acc = hs_calloc((size_t)c->n_layer * HS_MAX_HEADS, sizeof *s->acc, "per-head statistics");
    if (!s->acc)
        return HS_ENOMEM;
    s->n_layer = c->n_layer;
    memcpy(s->n_head, c->n_head, sizeof s->n_head);
    return HS_OK;
}

void hs_head_stats_free(hs_head_stats *s)
{
    free(s->acc);
    memset(s, 0, sizeof *s);
}

void hs_head_table_free(hs_head_table *t)
{
    for (int i = 0; i < t->n_names; i++)
        free(t->names[i]);
    free(t->names);
    free(t->rows);
    memset(t, 0, sizeof *t);
}

/* The table's own copy of a metric name: rows share one copy per name. */
static const char *intern(hs_head_table *t, const char *name)
{
    for (int i = t->n_names - 1; i >= 0; i--)
        if (!strcmp(t->names[i], name))
            return t->names[i];
    if (t->n_names == t->cap_names) {
        const int cap = t->cap_names ? 2 * t->cap_names : 16;
        char **p = realloc(t->names, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        t->names = p;
        t->cap_names = cap;
    }
    char *copy = strdup(name);
    if (copy)
        t->names[t->n_names++] = copy;
    return copy;
}

int hs_head_table_add(hs_head_table *t, int layer, int head, const char *metric, double value,
                      double stderr_value, long long n)
{
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 64;
        hs_metric_row *p = realloc(t->rows, (size_t)cap * sizeof *p);
        if (!p)
            return hs_fail(HS_ENOMEM, "out of memory for result rows");
        t->rows = p;
        t->cap = cap;
    }
    const char *name = intern(t, metric);
    if (!name)
        return hs_fail(HS_ENOMEM, "out of memory for metric names");
    t->rows[t->n++] = (hs_metric_row){ layer, head, name, value, stderr_value, n, NULL };
    return HS_OK;
}

int hs_head_table_add_welford(hs_head_table *t, int layer, int head, const char *metric,
                              const hs_welford *w)
{
    return hs_head_table_add(t, layer, head, metric, w->mean, hs_welford_stderr(w), w->n);
}

int hs_head_table_add_heads(hs_head_table *t, const hs_head_stats *s, const char *metric)
{
    for (int l = 0; l < s->n_layer; l++)
        for (int h = 0; h < s->n_head[l]; h++) {
            const int rc = hs_head_table_add_welford(t, l, h, metric, hs_head_stat(s, l, h));
            if (rc)
                return rc;
        }
    return HS_OK;
}

const hs_metric_row *hs_head_table_find(const hs_head_table *t, int layer, int head,
                                        const char *metric)
{
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].layer == layer && t->rows[i].head == head &&
            !strcmp(t->rows[i].metric, metric))
            return &t->rows[i];
    return NULL;
}
