/* Sampling (sample.h). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    double v;
    int32_t id;
} scored;

/* Descending by value, ties to the lower id. */
static int by_value(const void *x, const void *y)
{
    const scored *a = x, *b = y;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int by_id(const void *x, const void *y)
{
    const scored *a = x, *b = y;
    return a->id < b->id ? -1 : a->id > b->id;
}

int32_t hs_sample_token(const hs_real *logits, int V, const hs_sample_opts *o, hs_rng *rng)
{
    if (!(o->temperature > 0)) {
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[best])
                best = i;
        return best;
    }
    scored *s = malloc(sizeof *s * (size_t)V);
    if (!s) /* no memory for the sort: fall back to the greedy choice */
        return hs_sample_token(logits, V, &(hs_sample_opts){ 0 }, rng);
    for (int32_t i = 0; i < V; i++)
        s[i] = (scored){ (double)logits[i] / o->temperature, i };
    int k = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    qsort(s, (size_t)V, sizeof *s, by_value);
    const double top = s[0].v;
    qsort(s, (size_t)k, sizeof *s, by_id);
    double sum = 0;
    for (int i = 0; i < k; i++)
        sum += s[i].v = exp(s[i].v - top);
    const double u = hs_rng_uniform(rng) * sum;
    double acc = 0;
    int32_t pick = s[k - 1].id;
    for (int i = 0; i < k; i++)
        if ((acc += s[i].v) > u) {
            pick = s[i].id;
            break;
        }
    free(s);
    return pick;
}
