/* Interventions as data (SPEC §5, §11): what ablation, activation patching
 * and steering do to the forward, written once. An intervention names a
 * hook site (model/hooks.h) of a layer, a head (or every head) and a
 * position (or every position), and a kind:
 *
 *   zero      x <- 0
 *   mean      x <- source[h, :]        source (heads, width): e.g. the mean of
 *                                      the site over the evaluation data
 *                                      (hs_act_cache in HS_CACHE_MEAN mode)
 *   resample  x[b] <- x[(b+1) mod B]   the next sequence of the batch, same
 *                                      position and head (needs B >= 2)
 *   replace   x <- source              source: the whole site tensor of another
 *                                      run with the same B and T, in the site's
 *                                      layout (hs_act_cache in HS_CACHE_COPY
 *                                      mode): activation patching
 *   add       x <- x + source[h, :]    steering: a vector per head
 *
 * applied to the selected elements of every sequence of the batch. "Head"
 * means the site's head: a query head at q, z, pattern and attn_scores, a
 * key/value head at k and v (shared by H/G query heads), the single head 0
 * at the residual sites. "Position" is a query position at the pattern,
 * whose rows stay distributions over the visible keys under zero, resample
 * and replace; mean and add (per head, blind to positions) would put weight
 * on masked keys and are refused there (at attn_scores every kind applies:
 * the keys a query may not see stay masked whatever the scores hold). */
#ifndef HS_INTERVENE_H
#define HS_INTERVENE_H

#include <stddef.h>

#include "cache.h"
#include "transformer.h"

typedef enum {
    HS_IV_ZERO = 0,
    HS_IV_MEAN = 1,
    HS_IV_RESAMPLE = 2,
    HS_IV_REPLACE = 3,
    HS_IV_ADD = 4,
    HS_IV_KINDS
} hs_iv_kind;

typedef struct {
    hs_site site;
    int layer;             /* resid_pre: 0..n_layer; other sites 0..n_layer-1 */
    int head;              /* the site's head, or -1: every head */
    int position;          /* 0..T-1, or -1: every position */
    hs_iv_kind kind;
    const hs_real *source; /* mean, add: (heads, width); replace: (B*sb) */
    size_t source_n;       /* elements of source, checked when non-zero */
} hs_intervention;

/* "resid_pre", "attn_out", "mlp_out", "q", "k", "v", "z", "pattern",
 * "attn_scores"; NULL when s is not a site. */
const char *hs_site_name(hs_site s);

/* The site named name into *s; HS_EINVAL naming it when there is none. */
int hs_site_parse(const char *name, hs_site *s);

/* "zero", "mean", "resample", "replace", "add". */
const char *hs_iv_kind_name(hs_iv_kind k);

/* HS_OK when iv names a site, layer and head of c, a kind, and a source
 * where the kind needs one; else HS_EINVAL saying which. */
int hs_intervention_check(const hs_intervention *iv, const hs_model_config *c);

/* Applies iv to v, the tensor of iv's site and layer (the caller matched
 * them). Checks what only the forward knows: the head and position against
 * v's, source_n against v's size, B >= 2 for resample. O(selected elements);
 * resample works in place, with no scratch. */
int hs_intervene(const hs_site_view *v, const hs_intervention *iv);

/* A forward's interventions, applied in list order at their sites, and a
 * cache (NULL: none) that records its sites after them. */
typedef struct {
    const hs_intervention *list;
    int n;
    hs_act_cache *cache;
} hs_hook_plan;

/* Checks every intervention against c and points h's site hooks at plan for
 * each site it names or caches (other sites are left as they are, so an
 * empty plan changes nothing). plan and what it points to must outlive the
 * forwards. */
int hs_hooks_attach(hs_hooks *h, const hs_model_config *c, hs_hook_plan *plan);

#endif
