#include "scores.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "linalg.h"
#include "stats.h"
#include "tokens.h"
#include "transformer.h"

/* LAPACK's general eigenvalue routine (in OpenBLAS). */
extern void dgeev_(const char *jobvl, const char *jobvr, const int *n, double *a, const int *lda,
                   double *wr, double *wi, double *vl, const int *ldvl, double *vr,
                   const int *ldvr, double *work, const int *lwork, int *info);

const char *hs_score_name(int kind)
{
    static const char *const names[HS_SCORE_KINDS] = { "induction", "duplicate_token",
                                                       "prev_token" };
    return kind >= 0 && kind < HS_SCORE_KINDS ? names[kind] : "?";
}

int hs_scores_alloc(hs_scores *s, const hs_model_config *c)
{
    memset(s, 0, sizeof *s);
    if (hs_heads_fit(c))
        return HS_EINVAL;
    s->n_layer = c->n_layer;
    memcpy(s->n_head, c->n_head, sizeof s->n_head);
    const size_t n = (size_t)c->n_layer * HS_MAX_HEADS;
    for (int k = 0; k < HS_SCORE_KINDS; k++) {
        s->value[k] = hs_calloc(n, sizeof(double), "scores");
        s->stderr_value[k] = hs_calloc(n, sizeof(double), "scores");
        if (!s->value[k] || !s->stderr_value[k]) {
            hs_scores_free(s);
            return HS_ENOMEM;
        }
    }
    return HS_OK;
}

void hs_scores_free(hs_scores *s)
{
    for (int k = 0; k < HS_SCORE_KINDS; k++) {
        free(s->value[k]);
        free(s->stderr_value[k]);
    }
    memset(s, 0, sizeof *s);
}

int hs_scores_to_table(hs_head_table *t, const hs_scores *s, const double *copying,
                       const char *suffix)
{
    char name[64];
    int rc = HS_OK;
    for (int k = 0; !rc && k <= HS_SCORE_KINDS; k++) {
        if (k == HS_SCORE_KINDS && !copying)
            break;
        snprintf(name, sizeof name, "%s%s", k < HS_SCORE_KINDS ? hs_score_name(k) : "copying",
                 suffix);
        for (int l = 0; !rc && l < s->n_layer; l++)
            for (int h = 0; !rc && h < s->n_head[l]; h++) {
                const size_t i = (size_t)l * HS_MAX_HEADS + h;
                rc = k < HS_SCORE_KINDS ? hs_head_table_add(t, l, h, name, s->value[k][i],
                                                            s->stderr_value[k][i], s->n)
                                        : hs_head_table_add(t, l, h, name, copying[i], 0, 1);
            }
    }
    return rc;
}

void hs_repeated_sequences(int32_t *tokens, int N, int T, const int32_t *pool, int V,
                           unsigned long long seed)
{
    hs_rng r;
    hs_rng_seed(&r, seed);
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++) {
            const int i = (int)(hs_rng_uniform(&r) * V);
            int32_t tok = pool ? pool[i] : (int32_t)i;
            tokens[(size_t)n * 2 * T + t] = tokens[(size_t)n * 2 * T + T + t] = tok;
        }
}

/* The per-sample values of each kind, per head. */
typedef struct {
    int T;
    hs_head_stats st[HS_SCORE_KINDS];
} score_acc;

static int on_maps(void *ctx, int layer, const hs_real *att, int B, int H, int L2)
{
    score_acc *a = ctx;
    const int T = a->T;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const hs_real *m = att + ((size_t)b * H + h) * L2 * L2; /* (2T, 2T) */
            double v[HS_SCORE_KINDS] = { 0, 0, 0 };
            for (int i = 0; i < T - 1; i++)
                v[HS_SCORE_INDUCTION] += m[(size_t)(T + i) * L2 + i + 1];
            for (int i = 0; i < T; i++)
                v[HS_SCORE_DUPLICATE] += m[(size_t)(T + i) * L2 + i];
            for (int t = 1; t < L2; t++)
                v[HS_SCORE_PREV] += m[(size_t)t * L2 + t - 1];
            v[HS_SCORE_INDUCTION] /= T > 1 ? T - 1 : 1;
            v[HS_SCORE_DUPLICATE] /= T;
            v[HS_SCORE_PREV] /= L2 - 1;
            for (int k = 0; k < HS_SCORE_KINDS; k++)
                hs_welford_add(hs_head_stat(&a->st[k], layer, h), v[k]);
        }
    return HS_OK;
}

int hs_pattern_scores(hs_scores *s, const hs_model *m, const int32_t *tokens, int N, int T, int B,
                      hs_progress_fn progress, void *progress_ctx)
{
    const hs_model_config *c = &m->cfg;
    if (N < 1 || T < 2 || B < 1)
        return hs_fail(HS_EINVAL, "scores: need samples >= 1 and seq-len >= 2");
    if (2 * T > c->n_ctx)
        return hs_fail(HS_EINVAL, "scores: repeated sequences of 2 x %d exceed n_ctx=%d", T,
                       c->n_ctx);
    B = B < N ? B : N;
    hs_acts a;
    int rc = hs_acts_alloc(&a, c, B, 2 * T, HS_ACTS_MAPS);
    if (rc)
        return rc;
    score_acc acc = { T, { { 0 } } };
    for (int k = 0; !rc && k < HS_SCORE_KINDS; k++)
        rc = hs_head_stats_init(&acc.st[k], c);
    hs_hooks hooks = { .ctx = &acc, .on_maps = on_maps };
    for (int n0 = 0; !rc && n0 < N; n0 += B) {
        const int rows = N - n0 < B ? N - n0 : B;
        rc = hs_acts_set_batch(&a, rows);
        if (!rc)
            rc = hs_forward(&a, m, tokens + (size_t)n0 * 2 * T, NULL, &hooks);
        if (!rc && progress)
            progress(progress_ctx, (size_t)(n0 / B + 1), (size_t)((N + B - 1) / B));
    }
    for (int k = 0; !rc && k < HS_SCORE_KINDS; k++)
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++) {
                const size_t at = (size_t)l * HS_MAX_HEADS + h;
                const hs_welford *w = hs_head_stat(&acc.st[k], l, h);
                s->value[k][at] = w->mean;
                s->stderr_value[k][at] = hs_welford_stderr(w);
            }
    s->n = N;
    for (int k = 0; k < HS_SCORE_KINDS; k++)
        hs_head_stats_free(&acc.st[k]);
    hs_acts_free(&a);
    return rc;
}

int hs_copying_scores(double *copying, const hs_model *m)
{
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model, V = c->vocab_size, dh = c->head_dim;
    /* A = W_U W_E (d x d): W_U = lm_w^T (d x V), W_E = wte (V x d). */
    double *A = hs_calloc((size_t)d * d, sizeof(double), "copying");
    double *WA = hs_calloc((size_t)dh * d, sizeof(double), "copying");
    double *P = hs_calloc((size_t)dh * dh, sizeof(double), "copying");
    double *wr = hs_calloc((size_t)dh, sizeof(double), "copying");
    double *wi = hs_calloc((size_t)dh, sizeof(double), "copying");
    const int lwork = 8 * dh + 64;
    double *work = hs_calloc((size_t)lwork, sizeof(double), "copying");
    int rc = A && WA && P && wr && wi && work ? HS_OK : HS_ENOMEM;
    if (!rc) /* products of whole weight matrices, element by element: as floats */
        rc = hs_model_widen(m);
    for (int i = 0; !rc && i < d; i++)
        for (int j = 0; j < d; j++) {
            double s = 0;
            for (int v = 0; v < V; v++)
                s += (double)m->w.lm_w[(size_t)v * d + i] * m->w.wte[(size_t)v * d + j];
            A[(size_t)i * d + j] = s;
        }
    for (int l = 0; !rc && l < c->n_layer; l++) {
        const int H = c->n_head[l], G = c->n_kv_head[l];
        hs_attn_weights wl = m->w.layer[l].attn;
        const hs_attn_weights *w = &wl;
        hs_real *mla_v = NULL; /* an MLA layer's value path as a v_proj (H dh, d) */
        if (c->mla) {
            const hs_mla_config mc = hs_config_mla(c, l);
            if (!(mla_v = hs_calloc((size_t)H * dh * d, sizeof(hs_real), "copying"))) {
                rc = HS_ENOMEM;
                break;
            }
            hs_mla_value_weights(mla_v, &m->w.layer[l].mla, &mc);
            wl.w_v = mla_v;
        }
        for (int h = 0; !rc && h < H; h++) {
            const int kv = h / (H / G);
            /* W_O^h (dh x d): row a is column h*dh + a of w_o (d x H*dh). */
            for (int r = 0; r < dh; r++)
                for (int j = 0; j < d; j++) {
                    double s = 0;
                    for (int i = 0; i < d; i++)
                        s += (double)w->w_o[(size_t)i * H * dh + h * dh + r] * A[(size_t)i * d + j];
                    WA[(size_t)r * d + j] = s;
                }
            /* P = (W_O^h A) W_V^h, W_V^h (d x dh): column b is row kv*dh + b of w_v. */
            for (int r = 0; r < dh; r++)
                for (int b2 = 0; b2 < dh; b2++) {
                    double s = 0;
                    for (int j = 0; j < d; j++)
                        s += WA[(size_t)r * d + j] * w->w_v[(size_t)(kv * dh + b2) * d + j];
                    P[(size_t)b2 * dh + r] = s; /* column-major for LAPACK */
                }
            /* non-finite weights: no eigenvalues (LAPACK would refuse them
             * with a message of its own on stderr); the score is NaN, which
             * the studies report (hs_study_check_finite) */
            int finite = 1;
            for (size_t k = 0; k < (size_t)dh * dh && finite; k++)
                finite = isfinite(P[k]);
            if (!finite) {
                copying[(size_t)l * HS_MAX_HEADS + h] = NAN;
                continue;
            }
            int n = dh, info = 0, one = 1;
            char no = 'N';
            dgeev_(&no, &no, &n, P, &n, wr, wi, NULL, &one, NULL, &one, work, &lwork, &info);
            if (info) {
                rc = hs_fail(HS_EINVAL, "copying: eigenvalues of layer %d head %d failed (%d)", l,
                             h, info);
                break;
            }
            double re = 0, abs_sum = 0;
            for (int k = 0; k < dh; k++) {
                re += wr[k];
                abs_sum += hypot(wr[k], wi[k]);
            }
            copying[(size_t)l * HS_MAX_HEADS + h] = abs_sum > 0 ? re / abs_sum : 0;
        }
        free(mla_v);
    }
    free(A), free(WA), free(P), free(wr), free(wi), free(work);
    return rc;
}

/* Mean second-half loss per sequence with the given gates. */
static int second_half_loss(double *per_seq, const hs_model *m, hs_acts *a, const int32_t *tokens,
                            int N, int T, int B, const hs_real *const *gates, int32_t *in,
                            int32_t *tg, hs_welford *first)
{
    const int L2 = 2 * T - 1; /* inputs 0..2T-2 predict tokens 1..2T-1 */
    hs_hooks hooks = { .gates = gates };
    for (int n0 = 0; n0 < N; n0 += B) {
        const int rows = N - n0 < B ? N - n0 : B;
        int rc = hs_acts_set_batch(a, rows);
        for (int b = 0; !rc && b < rows; b++)
            for (int t = 0; t < L2; t++) {
                in[b * L2 + t] = tokens[(size_t)(n0 + b) * 2 * T + t];
                tg[b * L2 + t] = tokens[(size_t)(n0 + b) * 2 * T + t + 1];
            }
        if (!rc)
            rc = hs_forward(a, m, in, tg, &hooks);
        if (rc)
            return rc;
        for (int b = 0; b < rows; b++) {
            double sum = 0, early = 0;
            for (int t = T; t < L2; t++)
                sum += a->losses[(size_t)b * L2 + t];
            per_seq[n0 + b] = sum / (L2 - T);
            for (int t = 0; first && t < T - 1; t++) /* random tokens predicting random ones */
                early += a->losses[(size_t)b * L2 + t];
            if (first)
                hs_welford_add(first, early / (T - 1));
        }
    }
    return HS_OK;
}

int hs_induction_causal_check(hs_causal_check *r, const hs_model *m, const int32_t *tokens, int N,
                              int T, int B, const hs_scores *s, int k, int draws,
                              unsigned long long seed, double *random_delta,
                              hs_progress_fn progress, void *progress_ctx)
{
    const hs_model_config *c = &m->cfg;
    int total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    if (k < 1 || k > 64 || 2 * k > total || draws < 2)
        return hs_fail(HS_EINVAL, "causal check: k=%d must be in 1..%d and draws >= 2", k,
                       (total / 2 < 64 ? total / 2 : 64));
    memset(r, 0, sizeof *r);
    r->k = k;
    r->draws = draws;
    B = B < N ? B : N;
    hs_acts a;
    int rc = hs_acts_alloc(&a, c, B, 2 * T - 1, HS_ACTS_INFER);
    if (rc)
        return rc;
    hs_real *gates[HS_MAX_LAYERS] = { 0 };
    int *lh = hs_calloc((size_t)total * 2, sizeof(int), "heads");
    double *clean = hs_calloc((size_t)N, sizeof(double), "losses");
    double *off = hs_calloc((size_t)N, sizeof(double), "losses");
    double *rand_delta = hs_calloc((size_t)draws, sizeof(double), "draws");
    int32_t *in = hs_calloc((size_t)B * (2 * T - 1), sizeof(int32_t), "inputs");
    int32_t *tg = hs_calloc((size_t)B * (2 * T - 1), sizeof(int32_t), "targets");
    if (!lh || !clean || !off || !rand_delta || !in || !tg)
        rc = HS_ENOMEM;
    for (int l = 0; !rc && l < c->n_layer; l++)
        if (!(gates[l] = hs_calloc((size_t)c->n_head[l], sizeof(hs_real), "gates")))
            rc = HS_ENOMEM;
    /* heads by decreasing induction score (ties: lower layer, head first) */
    int n = 0;
    for (int l = 0; !rc && l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            lh[2 * n] = l, lh[2 * n + 1] = h, n++;
    for (int i = 0; !rc && i < k; i++) {
        int best = i;
        for (int j = i + 1; j < n; j++)
            if (s->value[HS_SCORE_INDUCTION][(size_t)lh[2 * j] * HS_MAX_HEADS + lh[2 * j + 1]] >
                s->value[HS_SCORE_INDUCTION][(size_t)lh[2 * best] * HS_MAX_HEADS + lh[2 * best + 1]])
                best = j;
        int tl = lh[2 * i], th = lh[2 * i + 1];
        lh[2 * i] = lh[2 * best], lh[2 * i + 1] = lh[2 * best + 1];
        lh[2 * best] = tl, lh[2 * best + 1] = th;
        r->layer[i] = lh[2 * i];
        r->head[i] = lh[2 * i + 1];
    }
    /* gates: 1, then 0 for one set of heads at a time */
#define ALL_ON()                                                                                   \
    for (int l = 0; l < c->n_layer; l++)                                                           \
        for (int h = 0; h < c->n_head[l]; h++)                                                     \
            gates[l][h] = 1;
    if (!rc) {
        ALL_ON();
        rc = second_half_loss(clean, m, &a, tokens, N, T, B, (const hs_real *const *)gates, in, tg,
                              &r->first_half);
    }
    if (!rc && progress)
        progress(progress_ctx, 1, (size_t)draws + 2);
    if (!rc) {
        for (int i = 0; i < k; i++)
            gates[r->layer[i]][r->head[i]] = 0;
        rc = second_half_loss(off, m, &a, tokens, N, T, B, (const hs_real *const *)gates, in, tg,
                              NULL);
    }
    if (!rc && progress)
        progress(progress_ctx, 2, (size_t)draws + 2);
    hs_welford base = { 0 }, targeted = { 0 }; /* over sequences */
    for (int i = 0; !rc && i < N; i++) {
        hs_welford_add(&targeted, off[i] - clean[i]);
        hs_welford_add(&base, clean[i]);
    }
    if (!rc) {
        r->clean = base.mean;
        r->targeted = targeted.mean;
        r->targeted_stderr = hs_welford_stderr(&targeted);
    }
    hs_rng g;
    hs_rng_seed(&g, seed);
    /* under mpirun (dist.h) each rank evaluates its share of the draws (every
     * rank draws them all, to keep the generator's sequence); rank 0 collects
     * the deltas in draw order */
    size_t lo, hi;
    hs_dist_range((size_t)draws, hs_dist_rank(), &lo, &hi);
    for (int d = 0; !rc && d < draws; d++) {
        /* k distinct heads among the others (lh[k..n)), a partial
         * Fisher-Yates shuffle of that tail */
        for (int i = 0; i < k; i++) {
            int a = k + i, j = a + (int)(hs_rng_uniform(&g) * (n - a));
            int tl = lh[2 * a], th = lh[2 * a + 1];
            lh[2 * a] = lh[2 * j], lh[2 * a + 1] = lh[2 * j + 1];
            lh[2 * j] = tl, lh[2 * j + 1] = th;
        }
        if ((size_t)d < lo || (size_t)d >= hi)
            continue;
        ALL_ON();
        for (int i = 0; i < k; i++)
            gates[lh[2 * (k + i)]][lh[2 * (k + i) + 1]] = 0;
        rc = second_half_loss(off, m, &a, tokens, N, T, B, (const hs_real *const *)gates, in, tg,
                              NULL);
        hs_welford delta = { 0 };
        for (int i = 0; !rc && i < N; i++)
            hs_welford_add(&delta, off[i] - clean[i]);
        rand_delta[d] = delta.mean;
        if (!rc && progress)
            progress(progress_ctx, (size_t)d + 3, (size_t)draws + 2);
    }
#undef ALL_ON
    rc = hs_dist_collect(rc, rand_delta, sizeof(double), (size_t)draws);
    if (!rc) {
        hs_welford spread = { 0 }; /* over the draws */
        for (int d = 0; d < draws; d++)
            hs_welford_add(&spread, rand_delta[d]);
        r->random_mean = spread.mean;
        r->random_std = hs_welford_sd(&spread);
        /* beyond the random draws' spread, and itself nonzero beyond two
         * standard errors over sequences */
        r->beats = r->targeted > r->random_mean + r->random_std &&
                   r->targeted > 2 * r->targeted_stderr;
        if (random_delta)
            memcpy(random_delta, rand_delta, sizeof(double) * draws);
    }
    for (int l = 0; l < c->n_layer; l++)
        free(gates[l]);
    free(lh), free(clean), free(off), free(rand_delta), free(in), free(tg);
    hs_acts_free(&a);
    return rc;
}

int hs_icl_score(double *icl, double *stderr_icl, long *n, const hs_model *m,
                 const hs_tokens *data, int B, int T, size_t max_batches, int early, int late)
{
    size_t nb;
    if (hs_batches_to_run(data, B, T, max_batches, &nb))
        return HS_EINVAL;
    late = late < T - 1 ? late : T - 1;
    early = early < late ? early : late;
    hs_acts a;
    int rc = hs_acts_alloc(&a, &m->cfg, B, T, HS_ACTS_INFER);
    if (rc)
        return rc;
    int32_t *in = hs_calloc((size_t)B * T, sizeof(int32_t), "inputs");
    int32_t *tg = hs_calloc((size_t)B * T, sizeof(int32_t), "targets");
    if (!in || !tg)
        rc = HS_ENOMEM;
    hs_welford w = { 0 }; /* late - early, over sequences */
    for (size_t b = 0; !rc && b < nb; b++) {
        hs_batch_at(data, b * (size_t)B * T, B, T, in, tg);
        rc = hs_forward(&a, m, in, tg, NULL);
        for (int i = 0; !rc && i < B; i++)
            hs_welford_add(&w, a.losses[(size_t)i * T + late] - a.losses[(size_t)i * T + early]);
    }
    if (!rc) {
        *icl = w.mean;
        *stderr_icl = hs_welford_stderr(&w);
        *n = w.n;
    }
    free(in), free(tg);
    hs_acts_free(&a);
    return rc;
}

int hs_induction_established(const hs_causal_check *cc, const hs_scores *s,
                             const hs_scores *control, double min_score)
{
    if (!cc->beats)
        return 0;
    for (int i = 0; i < cc->k; i++) {
        const size_t j = (size_t)cc->layer[i] * HS_MAX_HEADS + cc->head[i];
        const double d = s->value[HS_SCORE_INDUCTION][j] - control->value[HS_SCORE_INDUCTION][j];
        const double se = sqrt(s->stderr_value[HS_SCORE_INDUCTION][j] * s->stderr_value[HS_SCORE_INDUCTION][j] +
                               control->stderr_value[HS_SCORE_INDUCTION][j] *
                                   control->stderr_value[HS_SCORE_INDUCTION][j]);
        if (!(d > 2 * se) || !(s->value[HS_SCORE_INDUCTION][j] >= min_score))
            return 0;
    }
    return 1;
}
