/* The head-count experiment (study.h). */
#include <stdio.h>
#include <string.h>

#include "eval.h"
#include "config_file.h"
#include "mlm.h"
#include "inputs.h"
#include "study.h"
#include "train.h"
#include "study_headcount.h"
#include "study_patch.h"

int hs_headcount_check(hs_model_config cfg[HS_HEADCOUNT_MAX], const hs_headcount_opts *o)
{
    if (hs_causal_only(&o->base, "experiment head-count", "it trains and compares next-token "
                       "losses"))
        return HS_EINVAL;
    for (int i = 0; i < o->n_heads; i++) {
        char kv[32];
        cfg[i] = o->base;
        snprintf(kv, sizeof kv, "n_head=%d", o->heads[i]);
        if (hs_config_override(&cfg[i], kv)) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", hs_last_error());
            return hs_fail(HS_EINVAL, "--heads %d: %s", o->heads[i], msg);
        }
        if (hs_seq_len_check(&cfg[i], o->seq_len, "--seq-len"))
            return HS_EINVAL;
    }
    return HS_OK;
}

void hs_headcount_split(const hs_tokens *all, hs_tokens *train, hs_tokens *val)
{
    const size_t cut = all->n - all->n / 10;
    *train = (hs_tokens){ .tok = all->tok, .n = cut, .version = all->version, .mlm = all->mlm };
    *val = (hs_tokens){ .tok = all->tok + cut, .n = all->n - cut, .version = all->version,
                        .mlm = all->mlm };
}

void hs_headcount_result_free(hs_headcount_result *r)
{
    hs_head_table_free(&r->table);
}

typedef struct {
    const hs_headcount_opts *o;
    hs_curve_writer curve;
    long tokens_per_step, steps_before; /* of the earlier runs of the experiment */
} run_ctx;

static void on_step(void *ctx, long step, double loss, double lr)
{
    run_ctx *h = ctx;
    (void)lr;
    hs_curve_writer_add(&h->curve, (hs_curve_point){ step, (double)step * h->tokens_per_step, loss });
    if (h->o->on_step)
        h->o->on_step(h->o->ctx, h->steps_before + step, h->curve.name);
}

/* Trains head count i from the shared initial weights; its validation loss
 * (and, for the first seed, its forward latency). */
static int one_run(hs_headcount_result *r, const hs_headcount_opts *o, const hs_model *init,
                   const hs_model_config *cfg, int i, int s, double *loss)
{
    hs_model m;
    int rc = hs_model_init(&m, cfg);
    if (rc)
        return rc;
    if (m.n_params != init->n_params)
        rc = hs_fail(HS_EINVAL, "head count %d changes the parameter shapes (set head_dim to "
                     "d_model / n_head)", o->heads[i]);
    if (!rc)
        memcpy(m.params, init->params, sizeof(hs_real) * m.n_params);
    run_ctx hc = { o, { .ix = o->ix, .run_id = o->run_id }, (long)o->batch * o->seq_len,
                   (long)(s * o->n_heads + i) * o->steps };
    snprintf(hc.curve.name, sizeof hc.curve.name, "train_loss_heads_%d_seed_%d", o->heads[i],
             o->seeds[s]);
    hs_train_opts to = { .B = o->batch, .T = o->seq_len, .steps = o->steps, .lr = o->lr,
                         .on_step = on_step, .ctx = &hc, .stop = o->stop };
    if (!rc)
        rc = hs_train(&m, o->train, &to);
    hs_curve_writer_flush(&hc.curve);
    hs_eval_result er;
    if (!rc)
        rc = hs_evaluate(&er, &m, o->val, o->batch, o->seq_len, 0, NULL, NULL, NULL);
    /* a run that trained to non-finite weights diverged: an error, as in
     * hs_train (no --allow-nonfinite for trainings) */
    if (!rc && hs_eval_check_finite(&er))
        rc = hs_fail(HS_EINVAL, "%d heads, seed %d: validation: %s", o->heads[i], o->seeds[s],
                     hs_last_error());
    if (!rc)
        *loss = er.loss;
    if (!rc && s == 0)
        rc = hs_forward_ms(&r->ms[i], &m, o->val, o->batch, o->seq_len);
    if (!rc && o->on_run)
        o->on_run(o->ctx, o->heads[i], o->seeds[s], er.loss);
    hs_model_free(&m);
    return rc;
}

int hs_headcount_experiment(hs_headcount_result *r, const hs_headcount_opts *o)
{
    memset(r, 0, sizeof *r);
    hs_model_config cfg[HS_HEADCOUNT_MAX];
    int rc = hs_headcount_check(cfg, o);
    hs_welford loss[HS_HEADCOUNT_MAX] = { { 0 } };
    for (int s = 0; !rc && s < o->n_seeds; s++) {
        /* Shared initial weights: with dh = d/H every tensor has the same shape
         * for every head count, so one initialisation serves them all. */
        hs_model init;
        rc = hs_model_init(&init, &cfg[0]);
        if (rc)
            break;
        hs_model_init_random(&init, (unsigned long long)o->seeds[s]);
        for (int i = 0; !rc && i < o->n_heads; i++) {
            double l = 0;
            rc = one_run(r, o, &init, &cfg[i], i, s, &l);
            if (!rc)
                hs_welford_add(&loss[i], l);
        }
        hs_model_free(&init);
    }
    for (int i = 0; !rc && i < o->n_heads; i++) {
        char name[64];
        r->mean[i] = loss[i].mean, r->sd[i] = hs_welford_sd(&loss[i]);
        snprintf(name, sizeof name, "val_loss_heads_%d", o->heads[i]);
        rc = hs_head_table_add_welford(&r->table, -1, -1, name, &loss[i]);
        snprintf(name, sizeof name, "forward_ms_heads_%d", o->heads[i]);
        if (!rc)
            rc = hs_head_table_add(&r->table, -1, -1, name, r->ms[i], 0, 7);
    }
    return rc;
}
