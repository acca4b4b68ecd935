/* The MHA -> GQA uptraining study (study_gqa.h). */
#include "study_gqa.h"
#include "metrics.h"
#include "inputs.h"
#include "mlm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "convert.h"
#include "study_patch.h"
#include "study_train.h"

int hs_gqa_check(hs_gqa_opts *o)
{
    const hs_model_config *c = &o->mha->cfg;
    if (hs_causal_only(c, "experiment gqa", "it uptrains and compares next-token losses"))
        return HS_EINVAL;
    if (!o->n_kv) {
        const int H = c->n_kv_head[0];
        const int cand[3] = { H / 2, H / 4, 1 };
        for (int i = 0; i < 3; i++)
            if (cand[i] >= 1 && (!o->n_kv || cand[i] < o->kv[o->n_kv - 1]) && H % cand[i] == 0)
                o->kv[o->n_kv++] = cand[i];
        if (!o->n_kv)
            return hs_fail(HS_EINVAL, "--kv-heads: the model has a single key/value head");
    }
    for (int i = 0; i < o->n_kv; i++)
        for (int l = 0; l < c->n_layer; l++)
            if (o->kv[i] < 1 || c->n_kv_head[l] % o->kv[i])
                return hs_fail(HS_EINVAL, "--kv-heads %d does not divide layer %d's %d key/value "
                               "heads", o->kv[i], l, c->n_kv_head[l]);
    if (!(o->fraction > 0))
        o->fraction = 0.05;
    if (o->original_steps < 1)
        return hs_fail(HS_EINVAL, "--original-steps: the MHA model's training steps are needed");
    if (hs_seq_len_check(c, o->seq_len, "--seq-len"))
        return HS_EINVAL;
    if (!hs_batch_count(o->val, o->batch, o->seq_len) || !hs_batch_count(o->train, o->batch, o->seq_len))
        return hs_fail(HS_EINVAL, "too few tokens for a batch of %d x %d in the training or "
                       "validation data", o->batch, o->seq_len);
    return HS_OK;
}

void hs_gqa_result_free(hs_gqa_result *r)
{
    hs_head_table_free(&r->table);
}

/* One evaluation on the validation data as a row named `name`. */
static int eval_row(hs_gqa_result *r, const hs_gqa_opts *o, const hs_model *m, const char *name)
{
    hs_eval_result er;
    if (o->io.phase)
        o->io.phase(o->io.ctx, name);
    int rc = hs_evaluate(&er, m, o->val, o->batch, o->seq_len, o->val_batches, NULL,
                         o->io.progress, o->io.ctx);
    if (!rc && !o->io.allow_nonfinite && hs_eval_check_finite(&er))
        rc = HS_EINVAL;
    if (rc)
        return rc;
    const int i = r->table.n;
    r->loss[i] = er.loss, r->se[i] = er.stderr_loss;
    return hs_head_table_add(&r->table, -1, -1, name, er.loss, er.stderr_loss,
                             (long long)er.sequences);
}

/* Uptrains `m` for the study's steps and evaluates it as `name`. */
static int uptrain_row(hs_gqa_result *r, const hs_gqa_opts *o, hs_model *m, const char *phase,
                       const char *name)
{
    hs_train_opts to = { .B = o->batch, .T = o->seq_len, .steps = r->uptrain_steps, .lr = o->lr,
                         .stop = o->io.stop };
    if (o->io.phase)
        o->io.phase(o->io.ctx, phase);
    int rc = hs_train(m, o->train, &to);
    return rc ? rc : eval_row(r, o, m, name);
}

/* The control: the MHA model itself trained the same extra steps, so that a
 * conversion's uptrained loss is compared at equal training. */
static int mha_uptrained(hs_gqa_result *r, const hs_gqa_opts *o)
{
    hs_model m;
    int rc = hs_model_init(&m, &o->mha->cfg);
    if (rc)
        return rc;
    memcpy(m.params, o->mha->params, sizeof(hs_real) * m.n_params);
    rc = uptrain_row(r, o, &m, "uptrain mha", HS_METRIC(VAL_LOSS_MHA_UPTRAINED));
    hs_model_free(&m);
    return rc;
}

int hs_gqa_study(hs_gqa_result *r, const hs_gqa_opts *o)
{
    memset(r, 0, sizeof *r);
    hs_gqa_opts opts = *o;
    int rc = hs_gqa_check(&opts);
    if (rc)
        return rc;
    r->uptrain_steps = (long)ceil(opts.fraction * (double)opts.original_steps);
    rc = eval_row(r, &opts, opts.mha, HS_METRIC(VAL_LOSS_MHA));
    if (!rc)
        rc = mha_uptrained(r, &opts);
    for (int i = 0; !rc && i < opts.n_kv; i++) {
        hs_model g;
        char name[64], phase[64];
        if ((rc = hs_convert_kv_heads(&g, opts.mha, opts.kv[i])))
            break;
        snprintf(name, sizeof name, "val_loss_kv_heads_%d", opts.kv[i]);
        rc = eval_row(r, &opts, &g, name);
        snprintf(phase, sizeof phase, "uptrain kv heads %d", opts.kv[i]);
        snprintf(name, sizeof name, "val_loss_kv_heads_%d_uptrained", opts.kv[i]);
        if (!rc)
            rc = uptrain_row(r, &opts, &g, phase, name);
        hs_model_free(&g);
    }
    if (opts.io.phase)
        opts.io.phase(opts.io.ctx, NULL);
    if (rc)
        hs_gqa_result_free(r);
    return rc;
}
