/* The activation cache: records chosen sites (hooks.h) of the forwards it is
 * attached to, either as a copy of the last forward's tensor (the clean run
 * of activation patching: its copy is the `source` of a replace
 * intervention) or as a running mean over every sequence and position of
 * every forward (the `source` of a mean intervention, SPEC §5's mean
 * ablation). Buffers are allocated at the first forward and reused. */
#ifndef HS_CACHE_H
#define HS_CACHE_H

#include <stddef.h>

#include "transformer.h"

/* One activation of the model: a site of a layer (resid_pre also has layer
 * n_layer, after the last layer). */
typedef struct {
    hs_site site;
    int layer;
} hs_site_key;

enum {
    HS_CACHE_COPY = 0, /* the tensor of the last forward, in the site's layout */
    HS_CACHE_MEAN = 1, /* per (head, i): the mean over sequences and positions */
};

typedef struct {
    hs_site_key key;
    hs_site_view shape; /* of the last forward recorded (x: the cache's copy) */
    hs_real *data;      /* COPY: B*sb elements; NULL until recorded */
    double *sum;        /* MEAN: (heads * width) sums */
    size_t rows;        /* MEAN: sequence positions summed */
    size_t cap;         /* elements allocated */
} hs_cache_entry;

typedef struct {
    int mode;
    int n;
    hs_cache_entry *e;
} hs_act_cache;

/* A cache of the n sites keys in mode HS_CACHE_COPY or HS_CACHE_MEAN. */
int hs_act_cache_init(hs_act_cache *c, const hs_site_key *keys, int n, int mode);
/* A cache of one site at layers 0..n_layers-1. */
int hs_act_cache_init_layers(hs_act_cache *c, hs_site site, int n_layers, int mode);
void hs_act_cache_free(hs_act_cache *c);

/* Records v when its (site, layer) is one of the cache's (else nothing).
 * The hook function the cache installs; hs_hooks_attach calls it after the
 * interventions, so the cache holds what the forward used. */
int hs_act_cache_record(hs_act_cache *c, const hs_site_view *v);

/* Points h's site hooks at the cache for each site it records (other
 * sites are left as they are). c must outlive the forwards. */
void hs_act_cache_hooks(hs_act_cache *c, hs_hooks *h);

/* COPY: the recorded tensor of (site, layer) in the site's layout, its
 * shape in *shape (may be NULL); NULL when nothing was recorded. */
const hs_real *hs_act_cache_get(const hs_act_cache *c, hs_site site, int layer,
                                hs_site_view *shape);

/* MEAN: out (heads * width) = the mean of (site, layer) over every sequence
 * and position recorded. HS_EINVAL when nothing was recorded. */
int hs_act_cache_mean(const hs_act_cache *c, hs_site site, int layer, hs_real *out);

#endif
