#include "trainer.h"
#include "memory.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t hs_trainer_bytes(const hs_model_config *c, size_t n_params, int B, int T)
{
    const size_t acts = hs_acts_bytes(c, B, T, HS_ACTS_TRAIN);
    size_t state, sum;
    if (!acts || __builtin_mul_overflow(n_params, 3 * sizeof(hs_real), &state) ||
        __builtin_add_overflow(acts, state, &sum))
        return 0;
    return sum;
}

int hs_trainer_init(hs_trainer *t, hs_model *m, int B, int T, double lr, double weight_decay,
                    double clip)
{
    memset(t, 0, sizeof *t);
    t->m = m;
    t->B = B;
    t->T = T;
    t->clip = clip;
    int rc = hs_acts_alloc(&t->acts, &m->cfg, B, T, 1);
    if (rc)
        return rc;
    t->grad_buf = hs_calloc_held(m->n_params, sizeof(hs_real), "gradients");
    if (!t->grad_buf || (rc = hs_adam_init(&t->opt, m->n_params, lr, weight_decay))) {
        hs_trainer_free(t);
        return rc ? rc : HS_ENOMEM;
    }
    hs_weights_bind(&t->grads, &m->cfg, t->grad_buf);
    t->grads_zero = 1; /* calloc */
    return HS_OK;
}

void hs_trainer_free(hs_trainer *t)
{
    hs_acts_free(&t->acts);
    hs_free_held(t->grad_buf, t->m ? t->m->n_params : 0, sizeof(hs_real));
    hs_adam_free(&t->opt);
    memset(t, 0, sizeof *t);
}

int hs_trainer_step(hs_trainer *t, const int32_t *inputs, const int32_t *targets, double lr,
                    double *loss)
{
    const size_t n = t->m->n_params;
    /* Adam zeroes the gradients as it reads them (hs_adam_step_zero); only a
     * step that stopped before its update leaves them to clear here. */
    if (!t->grads_zero)
        memset(t->grad_buf, 0, sizeof(hs_real) * n);
    t->grads_zero = 0;
    int rc = hs_forward(&t->acts, t->m, inputs, targets, NULL);
    if (rc)
        return rc;
    *loss = t->acts.loss;
    if (!isfinite(t->acts.loss))
        return hs_fail(HS_EINVAL, "training: loss is %g (diverged)", t->acts.loss);
    rc = hs_backward(&t->grads, NULL, &t->acts, t->m, inputs, targets, NULL,
                     (hs_real)(1.0 / (double)(t->acts.n_targets ? t->acts.n_targets : 1)));
    if (rc)
        return rc;
    hs_clip_grad_norm(t->grad_buf, n, t->clip);
    t->opt.lr = lr;
    hs_adam_step_zero(&t->opt, t->m->params, t->grad_buf);
    t->grads_zero = 1;
    return HS_OK;
}
