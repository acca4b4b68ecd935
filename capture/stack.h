/* Stacked interventions: one batched forward over n copies of a batch of
 * B sequences (rows j*B .. j*B+B-1 are copy j), each copy with its own
 * intervention. Activation patching runs many patches of one layer this
 * way: the layers above see every patch in one pass, as hs_ablate's stacked
 * continuations do.
 *
 * Intervention j acts on copy j only, exactly as hs_intervene would act on
 * a forward of that copy alone (its replace source: the B-sequence tensor
 * of the site, in the site's layout). */
#ifndef HS_STACK_H
#define HS_STACK_H

#include "intervene.h"

typedef struct {
    const hs_intervention *iv; /* [n]; iv[j].layer < 0: copy j is left alone */
    int n;                     /* copies */
    int rows;                  /* B: sequences per copy */
} hs_stack_plan;

/* Checks every used intervention against c and points h's site hooks at
 * plan for each site it names (others are left as they are). plan must
 * outlive the forwards; a forward with more than n * rows sequences fails
 * at the first hooked site. */
int hs_stack_hooks_attach(hs_hooks *h, const hs_model_config *c, hs_stack_plan *plan);

#endif
