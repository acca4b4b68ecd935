/* Direct logit attribution (dla.h). */
#include "dla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stored.h"
#include "transformer.h"

int hs_dla_check(const hs_model_config *c)
{
    if (c->encoder)
        return hs_fail(HS_EINVAL, "dla needs a residual stream that reaches the logits through "
                       "the final norm alone; an encoder (%s) is post-norm and its MLM head puts "
                       "a dense layer and a GELU before that norm, so its logit difference does "
                       "not split into per-head parts", hs_family_name(c->family));
    if (c->post_norm)
        return hs_fail(HS_EINVAL, "a post-norm model has no additive residual stream "
                                  "(each layer's output is normalised), so its logit "
                                  "difference does not split into per-head parts");
    if (c->out_norm)
        return hs_fail(HS_EINVAL, "%s normalises each sublayer's output before adding it "
                                  "to the residual stream (a norm after the attention and after "
                                  "the MLP), so the residual is not a sum of head outputs and "
                                  "its logit difference does not split into per-head parts",
                       hs_family_name(c->family));
    return HS_OK;
}

/* The terms of c, in dla.h's order (r->term, r->n_terms). */
static int dla_terms(hs_dla *r, const hs_model_config *c)
{
    int n = 5;
    for (int l = 0; l < c->n_layer; l++)
        n += c->n_head[l] + (c->mlp != HS_MLP_NONE);
    r->term = hs_calloc((size_t)n, sizeof *r->term, "dla terms");
    if (!r->term)
        return HS_ENOMEM;
    int k = 0;
    for (int l = 0; l < c->n_layer; l++) {
        for (int h = 0; h < c->n_head[l]; h++)
            r->term[k++] = (hs_dla_term){ l, h, "dla" };
        if (c->mlp != HS_MLP_NONE)
            r->term[k++] = (hs_dla_term){ l, -1, "dla" };
    }
    r->term[k++] = (hs_dla_term){ -1, -1, "dla_embed" };
    if (c->pos == HS_POS_LEARNED)
        r->term[k++] = (hs_dla_term){ -1, -1, "dla_pos_embed" };
    if (c->attn_bias)
        r->term[k++] = (hs_dla_term){ -1, -1, "dla_attn_bias" };
    if (c->final_norm && c->norm == HS_NORM_LAYERNORM && c->norm_bias)
        r->term[k++] = (hs_dla_term){ -1, -1, "dla_final_norm_bias" };
    if (c->lm_head_bias)
        r->term[k++] = (hs_dla_term){ -1, -1, "dla_lm_head_bias" };
    r->n_terms = k;
    return HS_OK;
}

/* A parameter's element, widened where the weights are stored (a few rows
 * of the unembedding and the embedding a prompt: read in place). */
static double param(const hs_real *p)
{
    hs_real x;
    hs_stored_read(&x, p, 1);
    return (double)x;
}

/* e (d): a part c of the final residual x (d) adds c . e to the logit
 * difference of answer a over wrong w (the frozen final norm, with its
 * (1 + w) scale under norm_offset, folded into the unembedding
 * difference); *konst: what the norm's and the unembedding's biases add
 * (beta . du and b_U[a] - b_U[w], in that order). */
static void dla_direction(double *e, double konst[2], const hs_model *m, const hs_real *x, int a,
                          int w)
{
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model;
    const hs_real *ua = m->w.lm_w + (size_t)a * d, *uw = m->w.lm_w + (size_t)w * d;
    konst[0] = konst[1] = 0;
    for (int i = 0; i < d; i++)
        e[i] = param(ua + i) - param(uw + i);
    if (c->lm_head_bias)
        konst[1] = (double)m->w.lm_b[a] - (double)m->w.lm_b[w];
    if (!c->final_norm)
        return;
    double mean = 0, sq = 0;
    for (int i = 0; i < d; i++)
        mean += x[i];
    mean /= d;
    const int ln = c->norm == HS_NORM_LAYERNORM;
    for (int i = 0; i < d; i++) {
        const double v = ln ? x[i] - mean : x[i];
        sq += v * v;
    }
    const double rstd = 1.0 / sqrt(sq / d + c->norm_eps);
    if (ln && m->w.lnf_b)
        for (int i = 0; i < d; i++)
            konst[0] += (double)m->w.lnf_b[i] * e[i];
    double wbar = 0;
    for (int i = 0; i < d; i++) {
        e[i] *= (double)m->w.lnf_w[i] + c->norm_offset;
        wbar += e[i];
    }
    wbar = ln ? wbar / d : 0; /* centring is linear: sum_i (c_i - mean c) w_i = c . (w - wbar) */
    for (int i = 0; i < d; i++)
        e[i] = (e[i] - wbar) * rstd;
}

static double dot(const hs_real *x, const double *e, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * e[i];
    return s;
}

/* dot over a row of the parameters, which may be stored */
static double param_dot(const hs_real *x, const double *e, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += param(x + i) * e[i];
    return s;
}

/* The parts of sequence b (last position T-1) of a forward into v
 * (n_terms); scratch f (max H*dh). */
static void dla_parts(double *v, const hs_model *m, const hs_acts *a, int b,
                      const int32_t *tok, int32_t answer, int32_t wrong, double *e, double *f)
{
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model, T = a->T, dh = c->head_dim, L = c->n_layer;
    const size_t row = (size_t)b * T + (size_t)(T - 1);
    /* the embeddings enter the residual times sqrt(d) rounded to hs_real
     * with embed_scale (the forward's normaliser) */
    const double emb = c->embed_scale ? (double)(hs_real)sqrt((double)d) : 1;
    double konst[2];
    dla_direction(e, konst, m, a->layer[L - 1].out + row * d, answer, wrong);
    int k = 0;
    for (int l = 0; l < L; l++) {
        const int HD = c->n_head[l] * dh;
        const hs_real *wo = m->w.layer[l].attn.w_o; /* (d, HD) */
        for (int j = 0; j < HD; j++)
            f[j] = 0;
        for (int i = 0; i < d; i++) /* f = W_o^T e: head h's part is z_h . f_h */
            for (int j = 0; j < HD; j++)
                f[j] += (double)wo[(size_t)i * HD + j] * e[i];
        const hs_real *z = a->layer[l].attn.z + row * HD;
        for (int h = 0; h < c->n_head[l]; h++)
            v[k++] = dot(z + (size_t)h * dh, f + (size_t)h * dh, dh);
        if (c->mlp != HS_MLP_NONE)
            v[k++] = dot(a->layer[l].mlp_out + row * d, e, d);
    }
    v[k++] = emb * param_dot(m->w.wte + (size_t)tok[row] * d, e, d);
    if (c->pos == HS_POS_LEARNED)
        v[k++] = emb * dot(m->w.wpe + (size_t)(T - 1) * d, e, d);
    if (c->attn_bias) {
        double s = 0;
        for (int l = 0; l < L; l++)
            s += dot(m->w.layer[l].attn.b_o, e, d);
        v[k++] = s;
    }
    if (c->final_norm && c->norm == HS_NORM_LAYERNORM && c->norm_bias)
        v[k++] = konst[0];
    if (c->lm_head_bias)
        v[k++] = konst[1];
}

/* The logit difference DLA splits, of sequence b's last position: the
 * model's own, or with final_softcap the one before the cap (the
 * unembedding of the final norm's output; the cap is not linear). */
static double dla_logit_diff(const hs_model *m, const hs_acts *a, int b, int32_t answer,
                             int32_t wrong)
{
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model, V = c->vocab_size, T = a->T;
    const size_t row = (size_t)b * T + (size_t)(T - 1);
    if (!(c->final_softcap > 0))
        return (double)a->logits[row * V + answer] - (double)a->logits[row * V + wrong];
    const hs_real *u = (c->final_norm ? a->lnf : a->layer[c->n_layer - 1].out) + row * d;
    const hs_real *ua = m->w.lm_w + (size_t)answer * d, *uw = m->w.lm_w + (size_t)wrong * d;
    double ld = c->lm_head_bias ? (double)m->w.lm_b[answer] - (double)m->w.lm_b[wrong] : 0;
    for (int i = 0; i < d; i++)
        ld += (double)u[i] * (param(ua + i) - param(uw + i));
    return ld;
}

/* One group of equal-length prompts, batch at a time, from prompt index p0. */
static int dla_group(hs_dla *r, const hs_model *m, const hs_prompt_group *g, int batch, int p0,
                     double *e, double *f)
{
    const int B = g->n < batch ? g->n : batch;
    hs_acts a;
    int rc = hs_acts_alloc(&a, &m->cfg, B, g->T, HS_ACTS_INFER);
    for (int i0 = 0; !rc && i0 < g->n; i0 += B) {
        const int nb = g->n - i0 < B ? g->n - i0 : B;
        const int32_t *tok = g->clean + (size_t)i0 * g->T;
        if ((rc = hs_acts_set_batch(&a, nb)) || (rc = hs_forward(&a, m, tok, NULL, NULL)))
            break;
        for (int b = 0; b < nb; b++) {
            const int p = p0 + i0 + b;
            r->logit_diff[p] = dla_logit_diff(m, &a, b, g->answer[i0 + b], g->wrong[i0 + b]);
            r->line[p] = g->line[i0 + b];
            dla_parts(r->value + (size_t)p * r->n_terms, m, &a, b, tok, g->answer[i0 + b],
                      g->wrong[i0 + b], e, f);
        }
    }
    hs_acts_free(&a);
    return rc;
}

int hs_dla_compute(hs_dla *r, const hs_model *m, const hs_prompt_set *ps, int batch)
{
    memset(r, 0, sizeof *r);
    int rc = hs_dla_check(&m->cfg);
    if (!rc && batch < 1)
        rc = hs_fail(HS_EINVAL, "dla: --batch %d must be positive", batch);
    if (!rc)
        rc = dla_terms(r, &m->cfg);
    if (rc)
        return rc;
    int maxHD = 0;
    for (int l = 0; l < m->cfg.n_layer; l++)
        maxHD = m->cfg.n_head[l] * m->cfg.head_dim > maxHD ? m->cfg.n_head[l] * m->cfg.head_dim
                                                           : maxHD;
    r->n = ps->n;
    r->value = hs_calloc((size_t)ps->n * r->n_terms, sizeof(double), "dla parts");
    r->logit_diff = hs_calloc((size_t)ps->n, sizeof(double), "dla logit differences");
    r->line = hs_calloc((size_t)ps->n, sizeof(int), "dla lines");
    double *e = hs_calloc((size_t)m->cfg.d_model, sizeof(double), "dla direction");
    double *f = hs_calloc((size_t)maxHD, sizeof(double), "dla direction");
    rc = r->value && r->logit_diff && r->line && e && f ? HS_OK : HS_ENOMEM;
    for (int l = 0; !rc && l < m->cfg.n_layer; l++) /* read whole for each prompt: as floats */
        rc = hs_stored_widen(m->w.layer[l].attn.w_o);
    for (int gi = 0, p0 = 0; !rc && gi < ps->n_group; p0 += ps->group[gi++].n)
        rc = dla_group(r, m, &ps->group[gi], batch, p0, e, f);
    free(e);
    free(f);
    if (rc)
        hs_dla_free(r);
    return rc;
}

void hs_dla_free(hs_dla *r)
{
    free(r->term);
    free(r->value);
    free(r->logit_diff);
    free(r->line);
    memset(r, 0, sizeof *r);
}
