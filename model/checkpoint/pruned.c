#include "pruned.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_pruned(const hs_model_config *c, int l, int h)
{
    const int key = l * HS_MAX_HEADS + h;
    for (int i = 0; i < c->n_pruned; i++)
        if (c->pruned[i] == key)
            return 1;
    return 0;
}

static int kept(const hs_model_config *c, int l)
{
    int k = c->n_head[l];
    for (int i = 0; i < c->n_pruned; i++)
        k -= c->pruned[i] / HS_MAX_HEADS == l;
    return k;
}

/* "<anything>MARK<layer>REST": the layer, or -1. */
static int layer_of(const char *name, const char *mark, const char *rest)
{
    const char *p = strstr(name, mark);
    if (!p || (p != name && p[-1] != '.'))
        return -1;
    char *end;
    const long l = strtol(p + strlen(mark), &end, 10);
    return end != p + strlen(mark) && !strcmp(end, rest) && l >= 0 && l < HS_MAX_LAYERS ? (int)l
                                                                                         : -1;
}

int hs_pruned_span_of(const hs_model_config *c, const char *name, int ndim, hs_pruned_span *s)
{
    static const struct {
        hs_family family;
        const char *mark, *rest;
        int ndim, axis, blocks;
    } spans[] = {
        { HS_FAMILY_BERT, "encoder.layer.", ".attention.self.query.weight", 2, 0, 1 },
        { HS_FAMILY_BERT, "encoder.layer.", ".attention.self.query.bias", 1, 0, 1 },
        { HS_FAMILY_BERT, "encoder.layer.", ".attention.self.key.weight", 2, 0, 1 },
        { HS_FAMILY_BERT, "encoder.layer.", ".attention.self.key.bias", 1, 0, 1 },
        { HS_FAMILY_BERT, "encoder.layer.", ".attention.self.value.weight", 2, 0, 1 },
        { HS_FAMILY_BERT, "encoder.layer.", ".attention.self.value.bias", 1, 0, 1 },
        { HS_FAMILY_BERT, "encoder.layer.", ".attention.output.dense.weight", 2, 1, 1 },
        { HS_FAMILY_GPT2, "h.", ".attn.c_attn.weight", 2, 1, 3 },
        { HS_FAMILY_GPT2, "h.", ".attn.c_attn.bias", 1, 0, 3 },
        { HS_FAMILY_GPT2, "h.", ".attn.c_proj.weight", 2, 0, 1 },
    };
    if (!c->n_pruned)
        return 0;
    const hs_family fam = c->family == HS_FAMILY_ROBERTA ? HS_FAMILY_BERT : c->family;
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++) {
        if (spans[i].family != fam || spans[i].ndim != ndim)
            continue;
        const int l = layer_of(name, spans[i].mark, spans[i].rest);
        if (l < 0 || l >= c->n_layer || kept(c, l) == c->n_head[l])
            continue;
        *s = (hs_pruned_span){ l, spans[i].axis, spans[i].blocks };
        return 1;
    }
    return 0;
}

void hs_pruned_shape(const hs_model_config *c, const hs_pruned_span *s, int64_t *shape)
{
    shape[s->axis] = (int64_t)s->blocks * kept(c, s->layer) * c->head_dim;
}

/* map[j] for each position j of the full axis: its position in the file's
 * (pruned) axis, or -1 for a pruned head's. */
static long *axis_map(const hs_model_config *c, const hs_pruned_span *s)
{
    const int H = c->n_head[s->layer], dh = c->head_dim, K = kept(c, s->layer);
    long *map = malloc(sizeof *map * (size_t)s->blocks * H * dh);
    if (!map)
        return NULL;
    for (int b = 0, j = 0; b < s->blocks; b++)
        for (int h = 0, rank = 0; h < H; h++) {
            const int gone = is_pruned(c, s->layer, h);
            for (int e = 0; e < dh; e++, j++)
                map[j] = gone ? -1 : ((long)b * K + rank) * dh + e;
            rank += !gone;
        }
    return map;
}

/* Between the full form (full: rows x cols) and the file's: with fin,
 * fout = fin expanded; with din, dout = din reduced. */
static int move(const hs_model_config *c, const hs_pruned_span *s, const int64_t *full, int ndim,
                const float *fin, float *fout, const double *din, double *dout)
{
    const size_t rows = (size_t)full[0], cols = ndim == 2 ? (size_t)full[1] : 1;
    const size_t fcols = s->axis == 1 ? (size_t)s->blocks * kept(c, s->layer) * c->head_dim : cols;
    long *map = axis_map(c, s);
    if (!map)
        return hs_fail(HS_ENOMEM, "out of memory for a pruned tensor's head map");
    for (size_t r = 0; r < rows; r++)
        for (size_t k = 0; k < cols; k++) {
            const long j = s->axis == 0 ? map[r] : map[k];
            const size_t f = j < 0         ? 0
                             : s->axis == 0 ? (size_t)j * cols + k
                                            : r * fcols + (size_t)j;
            if (fin)
                fout[r * cols + k] = j < 0 ? 0 : fin[f];
            else if (j >= 0)
                dout[f] = din[r * cols + k];
        }
    free(map);
    return HS_OK;
}

int hs_pruned_expand(const hs_model_config *c, const hs_pruned_span *s, const int64_t *full,
                     int ndim, const float *in, float *out)
{
    return move(c, s, full, ndim, in, out, NULL, NULL);
}

int hs_pruned_reduce(const hs_model_config *c, const hs_pruned_span *s, const int64_t *full,
                     int ndim, const double *in, double *out)
{
    return move(c, s, full, ndim, NULL, NULL, in, out);
}
