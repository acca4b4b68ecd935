#include "eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "transformer.h"

double hs_seq_loss_sum(const hs_real *losses, const int32_t *targets, int T, int *n)
{
    double s = 0;
    int k = 0;
    for (int t = 0; t < T; t++)
        if (targets[t] >= 0)
            s += losses[t], k++;
    *n = k;
    return s;
}

int hs_evaluate(hs_eval_result *r, const hs_model *m, const hs_tokens *data, int B, int T,
                size_t max_batches, const hs_hooks *hooks, hs_progress_fn progress, void *ctx)
{
    memset(r, 0, sizeof *r);
    r->nonfinite_seq = -1;
    if (B < 1 || T < 1)
        return hs_fail(HS_EINVAL, "batch %d and sequence length %d must be positive", B, T);
    size_t nb;
    if (hs_batches_to_run(data, B, T, max_batches, &nb))
        return HS_EINVAL;
    hs_acts a;
    int rc = hs_acts_alloc(&a, &m->cfg, B, T, HS_ACTS_LOSS); /* the losses alone */
    if (rc)
        return rc;
    int32_t *in = hs_calloc((size_t)B * T, sizeof(int32_t), "eval inputs");
    int32_t *tg = hs_calloc((size_t)B * T, sizeof(int32_t), "eval targets");
    if (!in || !tg)
        rc = HS_ENOMEM;
    double total = 0;
    size_t count = 0;       /* the positions with a target */
    hs_welford seq = { 0 }; /* per-sequence mean losses */
    for (size_t b = 0; !rc && b < nb; b++) {
        hs_batch_at(data, b * (size_t)B * T, B, T, in, tg);
        rc = hs_forward(&a, m, in, tg, hooks);
        for (int i = 0; !rc && i < B; i++) {
            int k;
            const double s = hs_seq_loss_sum(a.losses + (size_t)i * T, tg + (size_t)i * T, T, &k);
            total += s;
            count += (size_t)k;
            if (k) /* a masked-LM sequence with no chosen position has no mean */
                hs_welford_add(&seq, s / k);
            if (!isfinite(s) && r->nonfinite_seq < 0)
                r->nonfinite_seq = (long)(b * (size_t)B + (size_t)i), r->nonfinite_loss = s;
        }
        if (progress)
            progress(ctx, b + 1, nb);
    }
    if (!rc) {
        const size_t n = nb * B;
        /* loss: the mean over every predicted token (SPEC §5), from the
         * plain sum so recorded losses keep their last bits; stderr: over
         * the per-sequence means */
        r->loss = count ? total / (double)count : NAN;
        r->stderr_loss = hs_welford_stderr(&seq);
        r->tokens = count;
        r->sequences = n;
        r->batches = nb;
    }
    free(in);
    free(tg);
    hs_acts_free(&a);
    return rc;
}

int hs_eval_check_finite(const hs_eval_result *r)
{
    if (isfinite(r->loss) && isfinite(r->stderr_loss))
        return HS_OK;
    char what[64];
    double v = r->nonfinite_seq >= 0 ? r->nonfinite_loss : isfinite(r->loss) ? r->stderr_loss : r->loss;
    if (r->nonfinite_seq >= 0)
        snprintf(what, sizeof what, "the loss of sequence %ld", r->nonfinite_seq);
    else
        snprintf(what, sizeof what, "the mean loss%s", isfinite(r->loss) ? " (its standard error)" : "");
    return hs_fail(HS_EINVAL,
                   "%s is %s: the model's weights or inputs are not finite (--allow-nonfinite "
                   "keeps such results)",
                   what, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf");
}
