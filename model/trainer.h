/* One optimisation step at a time: zero the gradients, forward, backward of
 * the mean loss, optional clipping, Adam/AdamW. Deterministic for a given
 * thread count. */
#ifndef HS_TRAINER_H
#define HS_TRAINER_H

#include <stdint.h>

#include "optim.h"
#include "transformer.h"

typedef struct {
    hs_model *m;
    int B, T;
    hs_acts acts;
    hs_real *grad_buf; /* (n_params) */
    hs_weights grads;  /* bound to grad_buf */
    hs_adam opt;
    double clip;       /* > 0: clip the global gradient norm to this */
    int grads_zero;    /* grad_buf is all 0 (after init and after each update) */
} hs_trainer;

/* Bytes hs_trainer_init allocates beside the model's parameters: the
 * training activations of B x T, the gradients and AdamW's two moments;
 * 0 when that overflows size_t (as hs_acts_bytes). */
size_t hs_trainer_bytes(const hs_model_config *c, size_t n_params, int B, int T);

int hs_trainer_init(hs_trainer *t, hs_model *m, int B, int T, double lr, double weight_decay,
                    double clip);
void hs_trainer_free(hs_trainer *t);

/* One step on inputs/targets (B,T) at learning rate lr; *loss is the mean
 * loss before the update. */
int hs_trainer_step(hs_trainer *t, const int32_t *inputs, const int32_t *targets, double lr,
                    double *loss);

#endif
