/* The local/global experiment (study_windows.h). */
#include "study_windows.h"
#include "config_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "mlm.h"
#include "train.h"
#include "study_patch.h"

const char *const HS_WINDOWS_ARM[HS_WINDOWS_ARMS] = { "global", "half", "local" };

static int window_of(const hs_windows_opts *o) { return o->window ? o->window : 32; }

int hs_windows_config(hs_model_config *c, const hs_windows_opts *o, int arm)
{
    const int W = window_of(o);
    if (W < 1)
        return hs_fail(HS_EINVAL, "--window %d must be positive", W);
    *c = o->base;
    if (c->mla)
        return hs_fail(HS_EINVAL, "attention \"mla\" attends globally (no windows)");
    if (c->family != HS_FAMILY_HEADSCOPE)
        return hs_fail(HS_EINVAL, "per-head windows need a headscope-family preset "
                                  "(attn-only, mla is global; not %s)", hs_family_name(c->family));
    int total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    int *w = hs_calloc((size_t)total, sizeof *w, "windows");
    if (!w)
        return HS_ENOMEM;
    for (int l = 0, off = 0; l < c->n_layer; off += c->n_head[l++])
        for (int h = 0; h < c->n_head[l]; h++)
            w[off + h] = arm == 0 ? 0 : arm == 2 || h < (c->n_head[l] + 1) / 2 ? W : 0;
    c->n_head_windows = 0;
    int rc = hs_config_set_windows(c, w);
    free(w);
    if (!rc && hs_config_check(c))
        rc = hs_fail(HS_EINVAL, "%s arm: %s", HS_WINDOWS_ARM[arm], hs_last_error());
    return rc;
}

int hs_windows_check(const hs_windows_opts *o)
{
    if (o->n_seeds < 1 || o->steps < 1 || o->batch < 1 || o->seq_len < 1 || !(o->lr > 0))
        return hs_fail(HS_EINVAL, "--seeds, --steps, --batch, --seq-len and --lr must be "
                                  "positive");
    for (int a = 0; a < HS_WINDOWS_ARMS; a++) {
        hs_model_config c;
        int rc = hs_windows_config(&c, o, a);
        if (rc)
            return rc;
        if (hs_causal_only(&c, "experiment windows", "its windows are causal (t - W < s <= t)"))
            return HS_EINVAL;
        if (o->seq_len > c.n_ctx)
            return hs_fail(HS_EINVAL, "--seq-len %d exceeds n_ctx=%d", o->seq_len, c.n_ctx);
    }
    if (window_of(o) >= o->seq_len)
        return hs_fail(HS_EINVAL, "--window %d is not shorter than --seq-len %d: every arm "
                                  "would attend globally", window_of(o), o->seq_len);
    return HS_OK;
}

double hs_windows_kv_bytes_per_token(const hs_model_config *c, int T, int e)
{
    double bytes = 0;
    for (int l = 0; l < c->n_layer; l++) {
        const int H = c->n_head[l], G = c->n_kv_head[l], group = H / G;
        for (int j = 0; j < G; j++) {
            int widest = 0; /* the largest window of the group, 0 once one head is global */
            for (int h = j * group; h < (j + 1) * group; h++) {
                const int w = hs_config_head_window(c, l, h);
                if (!w) {
                    widest = 0;
                    break;
                }
                widest = w > widest ? w : widest;
            }
            const int kept = widest && widest < T ? widest : T;
            bytes += 2.0 * kept * c->head_dim * e;
        }
    }
    return bytes / T;
}

void hs_windows_result_free(hs_windows_result *r) { hs_head_table_free(&r->table); }

typedef struct {
    const hs_windows_opts *o;
    hs_curve_writer curve;
    long tokens_per_step, steps_before;
} run_ctx;

static void on_step(void *ctx, long step, double loss, double lr)
{
    run_ctx *h = ctx;
    (void)lr;
    hs_curve_writer_add(&h->curve, (hs_curve_point){ step, (double)step * h->tokens_per_step, loss });
    if (h->o->on_step)
        h->o->on_step(h->o->ctx, h->steps_before + step, h->curve.name);
}

/* Trains arm a of seed index s from the shared initial weights: its
 * validation loss (and, for the first seed, its forward latency). */
static int one_run(hs_windows_result *r, const hs_windows_opts *o, const hs_model *init, int a,
                   int s, double *loss)
{
    hs_model_config c;
    hs_model m;
    int rc = hs_windows_config(&c, o, a);
    if (rc || (rc = hs_model_init(&m, &c)))
        return rc;
    memcpy(m.params, init->params, sizeof(hs_real) * m.n_params); /* windows change no shape */
    run_ctx rx = { o, { .ix = o->ix, .run_id = o->run_id }, (long)o->batch * o->seq_len,
                   (long)(s * HS_WINDOWS_ARMS + a) * o->steps };
    snprintf(rx.curve.name, sizeof rx.curve.name, "train_loss_windows_%s_seed_%d",
             HS_WINDOWS_ARM[a], o->seeds[s]);
    hs_train_opts to = { .B = o->batch, .T = o->seq_len, .steps = o->steps, .lr = o->lr,
                         .on_step = on_step, .ctx = &rx, .stop = o->stop };
    rc = hs_train(&m, o->train, &to);
    hs_curve_writer_flush(&rx.curve);
    hs_eval_result er;
    if (!rc)
        rc = hs_evaluate(&er, &m, o->val, o->batch, o->seq_len, 0, NULL, NULL, NULL);
    if (!rc && hs_eval_check_finite(&er))
        rc = hs_fail(HS_EINVAL, "%s arm, seed %d: validation: %s", HS_WINDOWS_ARM[a],
                     o->seeds[s], hs_last_error());
    if (!rc)
        *loss = er.loss;
    if (!rc && s == 0) {
        rc = hs_forward_ms(&r->ms[a], &m, o->val, o->batch, o->seq_len);
        r->kv_bytes[a] = hs_windows_kv_bytes_per_token(&c, o->seq_len, (int)sizeof(hs_real));
    }
    if (!rc && o->on_run)
        o->on_run(o->ctx, HS_WINDOWS_ARM[a], o->seeds[s], er.loss);
    hs_model_free(&m);
    return rc;
}

int hs_windows_experiment(hs_windows_result *r, const hs_windows_opts *o)
{
    memset(r, 0, sizeof *r);
    r->window = window_of(o);
    int rc = hs_windows_check(o);
    hs_welford loss[HS_WINDOWS_ARMS] = { { 0 } };
    for (int s = 0; !rc && s < o->n_seeds; s++) {
        /* one initialisation per seed, shared by the arms: a difference
         * between them is then not one of initial weights */
        hs_model init;
        hs_model_config c;
        if ((rc = hs_windows_config(&c, o, 0)) || (rc = hs_model_init(&init, &c)))
            break;
        hs_model_init_random(&init, (unsigned long long)o->seeds[s]);
        for (int a = 0; !rc && a < HS_WINDOWS_ARMS; a++) {
            double l = 0;
            if (!(rc = one_run(r, o, &init, a, s, &l)))
                hs_welford_add(&loss[a], l);
        }
        hs_model_free(&init);
    }
    for (int a = 0; !rc && a < HS_WINDOWS_ARMS; a++) {
        char name[64];
        r->mean[a] = loss[a].mean, r->se[a] = hs_welford_stderr(&loss[a]);
        snprintf(name, sizeof name, "val_loss_windows_%s", HS_WINDOWS_ARM[a]);
        rc = hs_head_table_add_welford(&r->table, -1, -1, name, &loss[a]);
        snprintf(name, sizeof name, "kv_bytes_per_token_windows_%s", HS_WINDOWS_ARM[a]);
        if (!rc)
            rc = hs_head_table_add(&r->table, -1, -1, name, r->kv_bytes[a], 0, 1);
        snprintf(name, sizeof name, "forward_ms_windows_%s", HS_WINDOWS_ARM[a]);
        if (!rc)
            rc = hs_head_table_add(&r->table, -1, -1, name, r->ms[a], 0, 7);
    }
    return rc;
}
