#include "train.h"

#include <stdlib.h>

#include "eval.h"
#include "trainer.h"

int hs_train(hs_model *m, const hs_tokens *data, const hs_train_opts *o)
{
    if (o->steps < 1 || !(o->lr > 0))
        return hs_fail(HS_EINVAL, "steps %ld and learning rate %g must be positive", o->steps,
                       o->lr);
    if (!hs_batch_count(data, o->B, o->T))
        return hs_fail(HS_EINVAL, "%zu training tokens hold no batch of %d x %d (+1) tokens",
                       data->n, o->B, o->T);
    hs_trainer t;
    int rc = hs_trainer_init(&t, m, o->B, o->T, o->lr, o->weight_decay, o->clip);
    if (rc)
        return rc;
    int32_t *in = hs_calloc((size_t)o->B * o->T, sizeof(int32_t), "train inputs");
    int32_t *tg = hs_calloc((size_t)o->B * o->T, sizeof(int32_t), "train targets");
    if (!in || !tg)
        rc = HS_ENOMEM;
    for (long step = 0; !rc && step < o->steps; step++) {
        if (o->stop && *o->stop) {
            rc = hs_fail(HS_EINTR, "interrupted after %ld steps", step);
            break;
        }
        double lr = o->lr;
        if (o->warmup > 0 && step < o->warmup)
            lr = o->lr * (double)(step + 1) / (double)o->warmup;
        /* an encoder's masked-LM batches: a fresh choice each step, as HF's
         * collator draws one per batch (the validation keeps one) */
        hs_tokens at = *data;
        at.mlm.seed ^= (unsigned long long)(step + 1) * 0x9E3779B97F4A7C15ULL;
        hs_batch_at(&at, hs_batch_start_wrapped(data, o->B, o->T, (size_t)step), o->B, o->T, in,
                    tg);
        double loss;
        rc = hs_trainer_step(&t, in, tg, lr, &loss);
        if (!rc && o->on_step)
            o->on_step(o->ctx, step + 1, loss, lr);
        int last = step + 1 == o->steps;
        if (!rc && o->val && o->val_every > 0 && ((step + 1) % o->val_every == 0 || last)) {
            hs_eval_result r;
            rc = hs_evaluate(&r, m, o->val, o->B, o->T, o->val_batches, NULL, NULL, NULL);
            if (!rc && o->on_val)
                o->on_val(o->ctx, step + 1, r.loss, r.stderr_loss);
        }
    }
    free(in);
    free(tg);
    hs_trainer_free(&t);
    return rc;
}
