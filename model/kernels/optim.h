/* Adam and AdamW over the flat parameter buffer (SPEC §8: beta 0.9, 0.999,
 * eps 1e-8; weight decay > 0 selects AdamW's decoupled decay, applied to
 * every parameter as torch.optim.AdamW(model.parameters()) does). */
#ifndef HS_OPTIM_H
#define HS_OPTIM_H

#include <stddef.h>

#include "common.h"

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    size_t n;
    long step;     /* updates taken */
    hs_real *m, *v; /* (n) first and second moments */
} hs_adam;

int hs_adam_init(hs_adam *a, size_t n, double lr, double weight_decay);
void hs_adam_free(hs_adam *a);

/* One update of params (n) from grads (n), torch.optim.Adam's arithmetic. */
void hs_adam_step(hs_adam *a, hs_real *restrict params, const hs_real *restrict grads);

/* The same update, then grads (n) set to 0 in the same pass: the zeroed
 * accumulators of the next backward without a separate pass over n (at
 * GPT-2 small's 124M parameters that pass was 4% of a training step). */
void hs_adam_step_zero(hs_adam *a, hs_real *restrict params, hs_real *restrict grads);

/* torch.nn.utils.clip_grad_norm_ over g (n): scaled by clip / (norm +
 * 1e-6) when that is below 1 (clip > 0). */
void hs_clip_grad_norm(hs_real *g, size_t n, double clip);

#endif
