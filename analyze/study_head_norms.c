/* The head-norms study (study.h): how much each head writes into the
 * residual stream, ||z_h W_O^h||, beside a random-init control. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "linalg.h"
#include "metrics.h"
#include "stats.h"
#include "inputs.h"
#include "study.h"
#include "transformer.h"
#include "study_head_norms.h"

int hs_head_norms_check(hs_head_norms_opts *o, const hs_study_env *env)
{
    (void)o;
    const hs_model_config *c = &env->m->cfg;
    const int B = env->batch, T = env->seq_len;
    if (B < 1)
        return hs_fail(HS_EINVAL, "--batch %d: at least 1 sequence", B);
    if (T < 1 || T > c->n_ctx)
        return hs_fail(HS_EINVAL, "--seq-len %d: 1 to the model's context %d", T, c->n_ctx);
    if (!env->data)
        return hs_fail(HS_EINVAL, "head-norms needs token data (--data or --text)");
    if (!hs_batch_count(env->data, B, T))
        return hs_fail_few_tokens(env->data_name ? env->data_name : "the data", env->data, B, T);
    return hs_heads_fit(c);
}

void hs_head_norms_result_free(hs_head_norms_result *r)
{
    hs_head_table_free(&r->table);
}

/* One batch's forward on m, then per layer and head the norm of z_h W_O^h
 * at every position, each sequence's mean over its positions (the real
 * tokens: lines' (B,T), NULL: an encoder's that are not padding) into that
 * head's accumulator. y: (B*T, d) scratch. */
static int batch_norms(hs_head_stats *st, hs_acts *a, const hs_model *m, const int32_t *in,
                       const unsigned char *lines, hs_real *y)
{
    const hs_model_config *c = &m->cfg;
    int rc = hs_forward(a, m, in, NULL, NULL);
    const int B = a->B, T = a->T, d = c->d_model;
    const unsigned char *valid = lines ? lines : c->encoder && a->padded ? a->valid : NULL;
    for (int l = 0; !rc && l < c->n_layer; l++) {
        hs_site_view z;
        if ((rc = hs_acts_site_view(&z, a, c, HS_SITE_Z, l)))
            break;
        const int w = z.width, HW = z.heads * w;
        const hs_real *w_o = m->w.layer[l].attn.w_o; /* (d, H w) */
        for (int h = 0; h < z.heads; h++) {
            hs_gemm(0, 1, B * T, d, w, 1, z.x + (size_t)h * w, HW, w_o + (size_t)h * w, HW, 0,
                    y, d);
            for (int b = 0; b < B; b++) {
                double sum = 0;
                int n = 0;
                for (int t = 0; t < T; t++) {
                    if (valid && !valid[(size_t)b * T + t])
                        continue;
                    const hs_real *row = y + ((size_t)b * T + t) * d;
                    double sq = 0;
                    for (int i = 0; i < d; i++)
                        sq += (double)row[i] * row[i];
                    sum += sqrt(sq), n++;
                }
                if (n)
                    hs_welford_add(hs_head_stat(st, l, h), sum / n);
            }
        }
    }
    return rc;
}

/* The statistics of model m over nb batches of env's data. */
static int model_norms(hs_head_stats *st, const hs_model *m, const hs_study_env *env, size_t nb)
{
    const hs_model_config *c = &m->cfg;
    const hs_study_io *io = &env->io;
    const hs_tokens *data = env->data;
    const int B = env->batch, T = env->seq_len;
    hs_acts a;
    int rc = hs_head_stats_init(st, c);
    if (rc)
        return rc;
    if ((rc = hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER))) {
        hs_head_stats_free(st);
        return rc;
    }
    int32_t *in = hs_calloc((size_t)B * T * 2, sizeof *in, "head-norms batch");
    hs_real *y = hs_calloc((size_t)B * T * c->d_model, sizeof *y, "head-norms outputs");
    if (!in || !y)
        rc = HS_ENOMEM;
    for (size_t i = 0; !rc && i < nb; i++) {
        if (io->stop && *io->stop) {
            rc = hs_fail(HS_EINTR, "head-norms: interrupted");
            break;
        }
        hs_batch_at(data, i * (size_t)B * T, B, T, in, in + (size_t)B * T);
        rc = batch_norms(st, &a, m, in, data->valid ? data->valid + i * (size_t)B * T : NULL, y);
        if (io->progress)
            io->progress(io->ctx, i + 1, nb);
    }
    free(in), free(y);
    hs_acts_free(&a);
    if (rc)
        hs_head_stats_free(st);
    return rc;
}

int hs_head_norms_study(hs_head_norms_result *r, const hs_head_norms_opts *o,
                        const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    const hs_model *m = env->m;
    const hs_model_config *c = &m->cfg;
    const hs_study_io *io = &env->io;
    size_t nb;
    int rc = hs_head_norms_check((hs_head_norms_opts *)o, env);
    if (!rc)
        rc = hs_batches_to_run(env->data, env->batch, env->seq_len, env->max_batches, &nb);
    if (rc)
        return rc;
    hs_head_stats st, sc;
    hs_study_phase(io, "head-norms");
    rc = model_norms(&st, m, env, nb);
    if (!rc) {
        hs_study_phase(io, "head-norms: control");
        hs_model ctrl;
        if (!(rc = hs_control_model(&ctrl, c, (unsigned long long)o->seed))) {
            rc = model_norms(&sc, &ctrl, env, nb);
            hs_model_free(&ctrl);
        }
        if (rc)
            hs_head_stats_free(&st);
    }
    hs_study_phase(io, NULL);
    if (rc)
        return rc;
    rc = hs_head_table_add_heads(&r->table, &st, HS_METRIC(HEAD_OUTPUT_NORM));
    if (!rc)
        rc = hs_head_table_add_heads(&r->table, &sc, HS_METRIC(HEAD_OUTPUT_NORM_CONTROL));
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            if (hs_head_stat(&st, l, h)->mean >
                hs_head_stat(&st, r->top_layer, r->top_head)->mean)
                r->top_layer = l, r->top_head = h;
    r->sequences = hs_head_stat(&st, 0, 0)->n;
    hs_head_stats_free(&st);
    hs_head_stats_free(&sc);
    if (!rc)
        rc = hs_study_check_finite(io, &r->table, NULL, 0);
    r->rows = (hs_study_rows){ .heads = &r->table };
    return rc;
}

HS_STUDY_KIND(head_norms, hs_head_norms_check);
