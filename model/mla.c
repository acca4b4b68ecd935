/* Multi-head latent attention: the naive path for training and analysis
 * (every head's keys and values formed, maps per head) and the absorbed
 * path over the latent cache for decoding. See mla.h for the shapes. */
#include "mla.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "layers.h"
#include "linalg.h"

enum { QBLOCK = 64 };

static int min_int(int a, int b) { return a < b ? a : b; }

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

int hs_mla_config_check(const hs_mla_config *c)
{
    if (c->d_model < 1 || c->n_heads < 1 || c->kv_lora_rank < 1 || c->qk_nope < 1 ||
        c->v_dim < 1 || c->q_lora_rank < 0)
        return hs_fail(HS_EINVAL,
                       "mla: d_model=%d, n_head=%d, kv_lora_rank=%d, qk_nope_head_dim=%d and "
                       "v_head_dim=%d must be positive (q_lora_rank=%d: 0 or positive)",
                       c->d_model, c->n_heads, c->kv_lora_rank, c->qk_nope, c->v_dim,
                       c->q_lora_rank);
    if (c->qk_rope < 2 || c->qk_rope % 2 || c->qk_rope > HS_MLA_MAX_ROPE)
        return hs_fail(HS_EINVAL, "mla: qk_rope_head_dim=%d must be even, in 2..%d", c->qk_rope,
                       HS_MLA_MAX_ROPE);
    int p;
    if (__builtin_mul_overflow(c->n_heads, c->qk_nope + c->qk_rope, &p) ||
        __builtin_mul_overflow(c->n_heads, c->qk_nope + c->v_dim, &p) ||
        __builtin_add_overflow(c->kv_lora_rank, c->qk_rope, &p))
        return hs_fail(HS_EINVAL, "mla: n_head=%d times the head widths is too large", c->n_heads);
    if (!(c->rope_theta > 0) || !(c->norm_eps > 0))
        return hs_fail(HS_EINVAL, "mla: rope_theta=%g and norm_eps=%g must be positive",
                       c->rope_theta, c->norm_eps);
    return HS_OK;
}

size_t hs_mla_param_count(const hs_mla_config *c)
{
    const size_t d = (size_t)c->d_model, H = (size_t)c->n_heads, Q = (size_t)c->q_lora_rank,
                 C = (size_t)c->kv_lora_rank, r = (size_t)c->qk_rope;
    const size_t HQ = H * ((size_t)c->qk_nope + r), HKV = H * ((size_t)c->qk_nope + c->v_dim);
    const size_t q = Q ? Q * d + Q + HQ * Q : HQ * d;
    return q + (C + r) * d + C + HKV * C + d * H * (size_t)c->v_dim;
}

/* ---- activations -------------------------------------------------------- */

enum {
    M_CQ, M_CQN, M_CQ_RSTD, M_Q, M_KVA, M_LAT, M_CKV, M_CKV_RSTD, M_KPE, M_KVB,
    M_DQ, M_DKVB, M_DKVA, M_DCKV, M_DLAT, M_DCQN, M_DCQ, M_COUNT
};

/* The size table of hs_mla_acts: elements per buffer, 0 for absent ones. */
static void mla_sizes(size_t s[M_COUNT], const hs_mla_config *c, int B, int T, int training)
{
    const size_t N = (size_t)B * T, Q = (size_t)c->q_lora_rank, C = (size_t)c->kv_lora_rank,
                 r = (size_t)c->qk_rope, H = (size_t)c->n_heads;
    const size_t HQ = H * ((size_t)c->qk_nope + r), HKV = H * ((size_t)c->qk_nope + c->v_dim);
    memset(s, 0, sizeof(size_t) * M_COUNT);
    if (Q) {
        s[M_CQ] = s[M_CQN] = N * Q;
        s[M_CQ_RSTD] = N;
    }
    s[M_Q] = N * HQ;
    s[M_KVA] = N * (C + r);
    s[M_LAT] = s[M_CKV] = N * C;
    s[M_CKV_RSTD] = N;
    s[M_KPE] = N * r;
    s[M_KVB] = N * HKV;
    if (!training)
        return;
    s[M_DQ] = N * HQ;
    s[M_DKVB] = N * HKV;
    s[M_DKVA] = N * (C + r);
    s[M_DCKV] = s[M_DLAT] = N * C;
    if (Q)
        s[M_DCQN] = s[M_DCQ] = N * Q;
}

size_t hs_mla_acts_elems(const hs_mla_config *c, int B, int T, int training)
{
    size_t s[M_COUNT], total = 0;
    mla_sizes(s, c, B, T, training);
    for (int i = 0; i < M_COUNT; i++)
        total += s[i];
    return total;
}

void hs_mla_acts_bind(hs_mla_acts *a, const hs_mla_config *c, int B, int T, int training,
                      hs_real *mem)
{
    size_t s[M_COUNT];
    mla_sizes(s, c, B, T, training);
    hs_real **slot[M_COUNT] = {
        [M_CQ] = &a->cq,     [M_CQN] = &a->cqn,     [M_CQ_RSTD] = &a->cq_rstd,
        [M_Q] = &a->q,       [M_KVA] = &a->kva,     [M_LAT] = &a->lat,
        [M_CKV] = &a->ckv,   [M_CKV_RSTD] = &a->ckv_rstd, [M_KPE] = &a->kpe,
        [M_KVB] = &a->kvb,   [M_DQ] = &a->dq,       [M_DKVB] = &a->dkvb,
        [M_DKVA] = &a->dkva, [M_DCKV] = &a->dckv,   [M_DLAT] = &a->dlat,
        [M_DCQN] = &a->dcqn, [M_DCQ] = &a->dcq,
    };
    for (int i = 0; i < M_COUNT; i++) {
        *slot[i] = s[i] ? mem : NULL;
        mem += s[i];
    }
}

/* ---- RoPE on the decoupled dims ----------------------------------------- */

/* theta^(-2k/r) for hs_rope_rows: ctx is the hs_mla_config. */
static double mla_inv_freq(const void *ctx, int k)
{
    const hs_mla_config *c = ctx;
    return pow(c->rope_theta, -2.0 * k / c->qk_rope);
}

/* RoPE of the qk_rope dims starting each of nh vectors (hd apart) of the B T
 * rows of x at positions pos0 + t, interleaved as DeepSeek's are (layers.h);
 * inverse: the backward. */
static void mla_rope(hs_real *x, int B, int T, int nh, size_t hd, const hs_mla_config *c,
                     int pos0, int inverse)
{
    hs_rope_rows(x, B, T, nh, nh * hd, hd, c->qk_rope, pos0, mla_inv_freq, c,
                 HS_ROPE_INTERLEAVED, inverse);
}

/* ---- projections -------------------------------------------------------- */

/* m->q (N,HQ) before RoPE. */
static void project_q(hs_mla_acts *m, const hs_mla_weights *w, const hs_mla_config *c,
                      const hs_real *x, size_t N)
{
    const int d = c->d_model, Q = c->q_lora_rank;
    const int HQ = c->n_heads * (c->qk_nope + c->qk_rope);
    if (Q) {
        hs_linear_forward(m->cq, x, w->w_qa, NULL, N, d, Q);
        hs_rmsnorm_forward(m->cqn, m->cq_rstd, m->cq, w->qa_norm, N, Q, c->norm_eps);
        hs_linear_forward(m->q, m->cqn, w->w_qb, NULL, N, Q, HQ);
    } else {
        hs_linear_forward(m->q, x, w->w_q, NULL, N, d, HQ);
    }
}

/* m->kva, m->lat, m->ckv (the normalised latent) and m->kpe (before RoPE). */
static void project_latent(hs_mla_acts *m, const hs_mla_weights *w, const hs_mla_config *c,
                           const hs_real *x, size_t N)
{
    const int C = c->kv_lora_rank, r = c->qk_rope, CR = C + r;
    hs_linear_forward(m->kva, x, w->w_kva, NULL, N, c->d_model, CR);
    for (size_t i = 0; i < N; i++) {
        memcpy(m->lat + i * C, m->kva + i * CR, sizeof(hs_real) * C);
        memcpy(m->kpe + i * r, m->kva + i * CR + C, sizeof(hs_real) * r);
    }
    hs_rmsnorm_forward(m->ckv, m->ckv_rstd, m->lat, w->kva_norm, N, C, c->norm_eps);
}

/* ---- the per-head kernel ------------------------------------------------ */

/* MLA's scores for attn_heads.c's staged driver: q_nope . k_nope of the head
 * (the head part of kv_b_proj's output) plus q_pe . k_pe (one rope key
 * shared by every head), scaled by 1/sqrt(qk_nope + qk_rope); the mix reads
 * v of the head, the tail of its kv_b_proj part. No head groups, no cap. */
static hs_attn_form mla_form(const hs_mla_acts *m, const hs_mla_config *c, int T)
{
    const int H = c->n_heads, n = c->qk_nope, r = c->qk_rope, v = c->v_dim;
    const size_t HQ = (size_t)H * (n + r), HKV = (size_t)H * (n + v);
    return (hs_attn_form){
        .term = { { m->q, m->kvb, HQ, (size_t)(n + r), T * HKV, (size_t)(n + v), HKV, n },
                  { m->q + n, m->kpe, HQ, (size_t)(n + r), (size_t)T * r, 0, (size_t)r, r } },
        .nterms = 2,
        .v = m->kvb + n, .vb = T * HKV, .vh = (size_t)(n + v), .vs = HKV, .dv = v,
        .scale = (hs_real)(1 / sqrt((double)(n + r))),
    };
}

/* MLA attends causally to every earlier position. */
static const hs_attn_mask causal = { 1, NULL, 0 };

/* The hook of site s on x (B,T,heads,width), when hooked. */
static int call_site(const hs_attn_hooks *hk, hs_site s, hs_real *x, int B, int T, int heads,
                     int width)
{
    if (!hs_site_hooked(hk->site, s))
        return HS_OK;
    const hs_site_view view = hs_site_view_btw(s, hk->layer, x, B, T, heads, width);
    return hs_site_call(hk->site, &view);
}

int hs_mla_forward_heads(hs_mla_acts *m, hs_attn_acts *at, const hs_mla_weights *w,
                         const hs_mla_config *c, const hs_real *x)
{
    int rc = hs_mla_config_check(c);
    if (rc)
        return rc;
    const int B = at->B, T = at->L, H = c->n_heads, n = c->qk_nope, r = c->qk_rope;
    const size_t N = (size_t)B * T;
    const hs_attn_hooks *hk = &at->hooks;
    const int pattern = hs_site_hooked(hk->site, HS_SITE_PATTERN);
    const int scores = hs_site_hooked(hk->site, HS_SITE_ATTN_SCORES);
    if ((pattern || scores) && !at->att)
        return hs_fail(HS_EINVAL, "mla: layer %d's %s hook needs the maps kept "
                                  "(activations with maps)",
                       hk->layer, pattern ? "pattern" : "attn_scores");
    project_q(m, w, c, x, N);
    project_latent(m, w, c, x, N);
    hs_linear_forward(m->kvb, m->ckv, w->w_kvb, NULL, N, c->kv_lora_rank, H * (n + c->v_dim));
    mla_rope(m->q + n, B, T, H, (size_t)(n + r), c, 0, 0);
    mla_rope(m->kpe, B, T, 1, (size_t)r, c, 0, 0);
    if ((rc = call_site(hk, HS_SITE_Q, m->q, B, T, H, n + r)))
        return rc;
    const hs_attn_form f = mla_form(m, c, T);
    rc = hs_attn_form_forward(at->z, at->att, &f, &causal, NULL, 0, B, T, T, H, H, hk, "mla");
    if (!rc)
        rc = call_site(hk, HS_SITE_Z, at->z, B, T, H, c->v_dim);
    return rc;
}

int hs_mla_forward_split(hs_mla_acts *m, hs_attn_acts *at, const hs_mla_weights *w,
                         const hs_mla_config *c,
                         int (*input)(void *ctx, hs_recv_kind kind, int head, hs_real *x),
                         void *ctx, hs_real *x)
{
    int rc = hs_mla_config_check(c);
    if (rc)
        return rc;
    const int B = at->B, T = at->L, H = c->n_heads, n = c->qk_nope, r = c->qk_rope;
    const int v = c->v_dim, C = c->kv_lora_rank, HQ = H * (n + r), HKV = H * (n + v);
    const size_t N = (size_t)B * T;
    hs_real *q = hs_calloc(N * (size_t)HQ, sizeof(hs_real), "mla split queries");
    hs_real *kvb = hs_calloc(N * (size_t)HKV, sizeof(hs_real), "mla split values");
    rc = q && kvb ? HS_OK : HS_ENOMEM;
    /* the values' latent: the v parts of kv_b_proj's output */
    if (!rc && !(rc = input(ctx, HS_RECV_V, 0, x))) {
        project_latent(m, w, c, x, N);
        hs_linear_forward(kvb, m->ckv, w->w_kvb, NULL, N, C, HKV);
    }
    /* the keys' latent: k_nope parts and the rope key */
    if (!rc && !(rc = input(ctx, HS_RECV_K, 0, x))) {
        project_latent(m, w, c, x, N);
        hs_linear_forward(m->kvb, m->ckv, w->w_kvb, NULL, N, C, HKV);
        for (size_t i = 0; i < N; i++)
            for (int h = 0; h < H; h++)
                memcpy(m->kvb + i * HKV + (size_t)h * (n + v) + n,
                       kvb + i * HKV + (size_t)h * (n + v) + n, sizeof(hs_real) * v);
        mla_rope(m->kpe, B, T, 1, (size_t)r, c, 0, 0);
    }
    /* each head's queries from its own input */
    for (int h = 0; !rc && h < H; h++) {
        if ((rc = input(ctx, HS_RECV_Q, h, x)))
            break;
        project_q(m, w, c, x, N);
        for (size_t i = 0; i < N; i++)
            memcpy(q + i * HQ + (size_t)h * (n + r), m->q + i * HQ + (size_t)h * (n + r),
                   sizeof(hs_real) * (n + r));
    }
    if (!rc) {
        memcpy(m->q, q, sizeof(hs_real) * N * HQ);
        mla_rope(m->q + n, B, T, H, (size_t)(n + r), c, 0, 0);
        const hs_attn_form f = mla_form(m, c, T);
        rc = hs_attn_form_forward(at->z, NULL, &f, &causal, NULL, 0, B, T, T, H, H, NULL, "mla");
    }
    free(q), free(kvb);
    return rc;
}

int hs_mla_head_maps(hs_real *att, const hs_real *q, const hs_real *kvb, const hs_real *kpe,
                     const hs_mla_config *c, int B, int T, int h)
{
    int rc = hs_mla_config_check(c);
    if (rc)
        return rc;
    const int H = c->n_heads, n = c->qk_nope, r = c->qk_rope, HKV = H * (n + c->v_dim);
    const hs_real scale = (hs_real)(1 / sqrt((double)(n + r)));
    for (int b = 0; b < B; b++) {
        hs_real *P = att + (size_t)b * T * T;
        const hs_real *Q = q + (size_t)b * T * (n + r);
        hs_gemm(0, 1, T, T, n, scale, Q, n + r, kvb + (size_t)b * T * HKV + (size_t)h * (n + c->v_dim),
                HKV, 0, P, T);
        hs_gemm(0, 1, T, T, r, scale, Q + n, n + r, kpe + (size_t)b * T * r, r, 1, P, T);
        for (int t = 0; t < T; t++) {
            hs_softmax_row(P + (size_t)t * T, NULL, t + 1);
            memset(P + (size_t)t * T + t + 1, 0, sizeof(hs_real) * (size_t)(T - t - 1));
        }
    }
    return HS_OK;
}

/* ---- backward ----------------------------------------------------------- */

static inline hs_real gate_at(const hs_real *xi, int per_seq, size_t row, int T, int H, int h)
{
    return per_seq ? xi[row / (size_t)T * H + h] : xi[h];
}

/* dz (N, H v) = the gradient of z through the gates and o_proj; dxi and
 * dW_o accumulate. */
static void output_backward(hs_real *dz, hs_real *dxi, hs_real *dw_o, hs_attn_acts *at,
                            const hs_real *dout, const hs_mla_weights *w, const hs_mla_config *c,
                            const hs_real *xi, int per_seq)
{
    const int B = at->B, T = at->L, H = c->n_heads, v = c->v_dim, HV = H * v;
    const size_t N = (size_t)B * T;
    if (xi)
        for (size_t i = 0; i < N; i++)
            for (int h = 0; h < H; h++) {
                const hs_real g = gate_at(xi, per_seq, i, T, H, h);
                for (int k = 0; k < v; k++)
                    at->zg[i * HV + (size_t)h * v + k] = g * at->z[i * HV + (size_t)h * v + k];
            }
    memset(dz, 0, sizeof(hs_real) * N * HV);
    hs_linear_backward(dz, dw_o, NULL, dout, xi ? at->zg : at->z, w->w_o, N, HV, c->d_model);
    if (!xi)
        return;
    for (size_t i = 0; i < N; i++)
        for (int h = 0; h < H; h++) {
            hs_real *g = dz + i * HV + (size_t)h * v;
            const hs_real *zi = at->z + i * HV + (size_t)h * v;
            const hs_real gate = gate_at(xi, per_seq, i, T, H, h);
            hs_real s = 0;
            for (int k = 0; k < v; k++) {
                s += zi[k] * g[k];
                g[k] *= gate;
            }
            if (dxi)
                dxi[per_seq ? i / (size_t)T * H + h : (size_t)h] += s;
        }
}

/* dq (N,HQ), dkvb (N,HKV) and the rope keys' gradient (stride C + r from
 * dkpe) from dz and the maps. One task per batch row: the shared k_pe
 * gathers every head's gradient, so heads run in turn. */
static int heads_backward(hs_mla_acts *m, const hs_attn_acts *at, const hs_real *dz,
                          hs_real *dkpe, const hs_mla_config *c)
{
    const int B = at->B, T = at->L, H = c->n_heads, n = c->qk_nope, r = c->qk_rope,
              v = c->v_dim, CR = c->kv_lora_rank + r;
    const int HQ = H * (n + r), HKV = H * (n + v), HV = H * v;
    const hs_real scale = (hs_real)(1 / sqrt((double)(n + r)));
    hs_real *scratch = hs_calloc((size_t)hs_get_threads() * QBLOCK * T, sizeof(hs_real),
                                 "mla backward block");
    if (!scratch)
        return HS_ENOMEM;
    const int par = (double)B * H * T * T * (n + r + v) >= HS_PAR_MIN_MACS;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int b = 0; b < B; b++) {
        hs_real *dP = scratch + (size_t)thread_id() * QBLOCK * T;
        const hs_real *Kpe = m->kpe + (size_t)b * T * r;
        hs_real *dKpe = dkpe + (size_t)b * T * CR;
        for (int h = 0; h < H; h++) {
            const hs_real *K = m->kvb + (size_t)b * T * HKV + (size_t)h * (n + v);
            hs_real *dK = m->dkvb + (size_t)b * T * HKV + (size_t)h * (n + v);
            for (int t0 = 0; t0 < T; t0 += QBLOCK) {
                const int nr = min_int(QBLOCK, T - t0), smax = t0 + nr;
                const hs_real *P = at->att + (((size_t)b * H + h) * T + t0) * T;
                const size_t row = (size_t)b * T + t0;
                const hs_real *Q = m->q + row * HQ + (size_t)h * (n + r);
                hs_real *dQ = m->dq + row * HQ + (size_t)h * (n + r);
                const hs_real *dZ = dz + row * HV + (size_t)h * v;
                /* dP = dZ V^T, then dS = P * (dP - rowsum(P * dP)) in place */
                hs_gemm(0, 1, nr, smax, v, 1, dZ, HV, K + n, HKV, 0, dP, smax);
                for (int i = 0; i < nr; i++) {
                    const hs_real *pr = P + (size_t)i * T;
                    hs_real *dr = dP + (size_t)i * smax, dot = 0;
                    for (int s = 0; s < smax; s++)
                        dot += pr[s] * dr[s];
                    for (int s = 0; s < smax; s++)
                        dr[s] = pr[s] * (dr[s] - dot);
                }
                hs_gemm(0, 0, nr, n, smax, scale, dP, smax, K, HKV, 1, dQ, HQ);
                hs_gemm(0, 0, nr, r, smax, scale, dP, smax, Kpe, r, 1, dQ + n, HQ);
                hs_gemm(1, 0, smax, n, nr, scale, dP, smax, Q, HQ, 1, dK, HKV);
                hs_gemm(1, 0, smax, r, nr, scale, dP, smax, Q + n, HQ, 1, dKpe + c->kv_lora_rank,
                        CR);
                hs_gemm(1, 0, smax, v, nr, 1, P, T, dZ, HV, 1, dK + n, HKV);
            }
        }
    }
    free(scratch);
    return HS_OK;
}

/* The pattern's gradient dA_h = dz_h v_h^T (B,H,T,T), 0 after each query,
 * and the scores', to their observers (A: the pattern). */
static int grad_pattern(const hs_attn_grad_hooks *g, const hs_real *dz, const hs_mla_acts *m,
                        const hs_real *A, const hs_mla_config *c, int B, int T)
{
    if (!hs_attn_map_grads_wanted(g))
        return HS_OK;
    const int H = c->n_heads, n = c->qk_nope, v = c->v_dim, HKV = H * (n + v), HV = H * v;
    hs_real *dA = hs_calloc((size_t)B * H * T * T, sizeof(hs_real), "pattern gradient");
    if (!dA)
        return HS_ENOMEM;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            hs_real *P = dA + ((size_t)b * H + h) * T * T;
            hs_gemm(0, 1, T, T, v, 1, dz + (size_t)b * T * HV + (size_t)h * v, HV,
                    m->kvb + (size_t)b * T * HKV + (size_t)h * (n + v) + n, HKV, 0, P, T);
            for (int t = 0; t < T; t++)
                memset(P + (size_t)t * T + t + 1, 0, sizeof(hs_real) * (size_t)(T - t - 1));
        }
    int rc = hs_attn_map_grads(g, dA, A, B, T, H, T);
    free(dA);
    return rc;
}

/* dck (N,C) = the latent's gradient through the keys' k_nope rows of
 * kv_b_proj (part 0) or the values' rows (part 1) alone, from dkvb. */
static void latent_part(hs_real *dck, const hs_mla_acts *m, const hs_mla_weights *w,
                        const hs_mla_config *c, size_t N, int part)
{
    const int H = c->n_heads, n = c->qk_nope, v = c->v_dim, C = c->kv_lora_rank;
    const int HKV = H * (n + v), off = part ? n : 0, width = part ? v : n;
    for (int h = 0; h < H; h++)
        hs_gemm(0, 0, (int)N, C, width, 1, m->dkvb + (size_t)h * (n + v) + off, HKV,
                w->w_kvb + ((size_t)h * (n + v) + off) * C, C, h ? 1 : 0, dck, C);
}

/* Each path's share of dx (hs_attn_grad_hooks), reported and added: the
 * queries of each head, the keys (the latent through k_nope, and the rope
 * key) and the values (the latent through v) of the one latent "head" 0.
 * After the backward kept dq (RoPE undone) and dkvb, dkva's rope part. */
static int mla_paths(hs_real *dx, hs_mla_acts *m, const hs_attn_grad_hooks *g,
                     const hs_mla_weights *w, const hs_mla_config *c, size_t N)
{
    const int H = c->n_heads, n = c->qk_nope, r = c->qk_rope, C = c->kv_lora_rank, CR = C + r;
    const int Q = c->q_lora_rank, d = c->d_model, HQ = H * (n + r);
    hs_real *dxp = hs_calloc(N * (size_t)d, sizeof(hs_real), "mla path gradient");
    hs_real *dck = hs_calloc(N * (size_t)(C + CR), sizeof(hs_real), "mla path gradient");
    int rc = dxp && dck ? HS_OK : HS_ENOMEM;
    hs_real *dkva = dck + N * (size_t)C;
    for (int h = 0; !rc && h < H; h++) {
        const hs_real *dqh = m->dq + (size_t)h * (n + r);
        if (Q) {
            hs_gemm(0, 0, (int)N, Q, n + r, 1, dqh, HQ, w->w_qb + (size_t)h * (n + r) * Q, Q, 0,
                    m->dcqn, Q);
            hs_rmsnorm_backward_off(m->dcq, NULL, NULL, m->dcqn, m->cq, w->qa_norm, 0, m->cq_rstd,
                                    N, Q);
            hs_gemm(0, 0, (int)N, d, Q, 1, m->dcq, Q, w->w_qa, d, 0, dxp, d);
        } else {
            hs_gemm(0, 0, (int)N, d, n + r, 1, dqh, HQ, w->w_q + (size_t)h * (n + r) * d, d, 0,
                    dxp, d);
        }
        if (!(rc = g->path(g->path_ctx, HS_RECV_Q, h, dxp)))
            hs_add(dx, dx, dxp, N * (size_t)d);
    }
    for (int part = 0; !rc && part < 2; part++) {
        latent_part(dck, m, w, c, N, part);
        hs_rmsnorm_backward_off(m->dlat, NULL, NULL, dck, m->lat, w->kva_norm, 0, m->ckv_rstd, N,
                                C);
        for (size_t i = 0; i < N; i++) {
            memcpy(dkva + i * CR, m->dlat + i * C, sizeof(hs_real) * C);
            if (part) /* the values do not read the rope key */
                memset(dkva + i * CR + C, 0, sizeof(hs_real) * r);
            else
                memcpy(dkva + i * CR + C, m->dkva + i * CR + C, sizeof(hs_real) * r);
        }
        hs_gemm(0, 0, (int)N, d, CR, 1, dkva, CR, w->w_kva, d, 0, dxp, d);
        if (!(rc = g->path(g->path_ctx, part ? HS_RECV_V : HS_RECV_K, 0, dxp)))
            hs_add(dx, dx, dxp, N * (size_t)d);
    }
    free(dxp), free(dck);
    return rc;
}

int hs_mla_backward(hs_real *dx, hs_mla_weights *dw, hs_real *dxi, const hs_real *dout,
                    hs_mla_acts *m, hs_attn_acts *at, const hs_mla_weights *w,
                    const hs_mla_config *c, const hs_real *x, const hs_real *xi, int xi_per_seq)
{
    static const hs_mla_weights none;
    if (!dw)
        dw = (hs_mla_weights *)&none; /* only read: every member NULL */
    if (!at->att || !m->dq)
        return hs_fail(HS_EINVAL, "mla backward: the forward kept no maps or no backward "
                                  "scratch (training activations are needed)");
    const int B = at->B, T = at->L, H = c->n_heads, n = c->qk_nope, r = c->qk_rope,
              C = c->kv_lora_rank, CR = C + r, Q = c->q_lora_rank, d = c->d_model;
    const int HQ = H * (n + r), HKV = H * (n + c->v_dim);
    const size_t N = (size_t)B * T;
    const hs_attn_grad_hooks *gh = &at->grad;
    output_backward(at->dz, dxi, dw->w_o, at, dout, w, c, xi, xi_per_seq);
    int rc = hs_attn_grad_site(gh, HS_SITE_Z, at->dz, B, T, H, c->v_dim);
    if (!rc)
        rc = grad_pattern(gh, at->dz, m, at->att, c, B, T);
    if (rc)
        return rc;
    memset(m->dq, 0, sizeof(hs_real) * N * HQ);
    memset(m->dkvb, 0, sizeof(hs_real) * N * HKV);
    memset(m->dkva, 0, sizeof(hs_real) * N * CR);
    if ((rc = heads_backward(m, at, at->dz, m->dkva, c)))
        return rc;
    rc = hs_attn_grad_site(gh, HS_SITE_Q, m->dq, B, T, H, n + r);
    for (int part = 0; !rc && part < 2; part++) {
        const hs_site s = part ? HS_SITE_V : HS_SITE_K;
        if (!gh->site || !gh->site[s])
            continue;
        hs_real *dck = hs_calloc(N * (size_t)C, sizeof(hs_real), "mla latent gradient");
        if (!dck)
            return HS_ENOMEM;
        latent_part(dck, m, w, c, N, part);
        rc = hs_attn_grad_site(gh, s, dck, B, T, 1, C);
        free(dck);
    }
    if (rc)
        return rc;
    mla_rope(m->dq + n, B, T, H, (size_t)(n + r), c, 0, 1);
    mla_rope(m->dkva + C, B, T, 1, (size_t)CR, c, 0, 1);
    /* With paths dx gets each path's share; the weights' gradients (if any)
     * come from the whole below. */
    if (gh->path && (rc = mla_paths(dx, m, gh, w, c, N)))
        return rc;
    hs_real *dxw = gh->path ? NULL : dx;
    /* the latent: kv_b_proj, then kv_a_layernorm */
    memset(m->dckv, 0, sizeof(hs_real) * N * C);
    memset(m->dlat, 0, sizeof(hs_real) * N * C);
    hs_linear_backward(m->dckv, dw->w_kvb, NULL, m->dkvb, m->ckv, w->w_kvb, N, C, HKV);
    hs_rmsnorm_backward(m->dlat, dw->kva_norm, m->dckv, m->lat, w->kva_norm, m->ckv_rstd, N, C);
    for (size_t i = 0; i < N; i++)
        memcpy(m->dkva + i * CR, m->dlat + i * C, sizeof(hs_real) * C);
    hs_linear_backward(dxw, dw->w_kva, NULL, m->dkva, x, w->w_kva, N, d, CR);
    if (Q) {
        memset(m->dcqn, 0, sizeof(hs_real) * N * Q);
        memset(m->dcq, 0, sizeof(hs_real) * N * Q);
        hs_linear_backward(m->dcqn, dw->w_qb, NULL, m->dq, m->cqn, w->w_qb, N, Q, HQ);
        hs_rmsnorm_backward(m->dcq, dw->qa_norm, m->dcqn, m->cq, w->qa_norm, m->cq_rstd, N, Q);
        hs_linear_backward(dxw, dw->w_qa, NULL, m->dcq, x, w->w_qa, N, d, Q);
    } else {
        hs_linear_backward(dxw, dw->w_q, NULL, m->dq, x, w->w_q, N, d, HQ);
    }
    return HS_OK;
}

void hs_mla_value_weights(hs_real *w_v, const hs_mla_weights *w, const hs_mla_config *c)
{
    const int n = c->qk_nope, v = c->v_dim, C = c->kv_lora_rank, d = c->d_model;
    for (int h = 0; h < c->n_heads; h++)
        hs_gemm(0, 0, v, d, C, 1, w->w_kvb + ((size_t)h * (n + v) + n) * C, C, w->w_kva, d, 0,
                w_v + (size_t)h * v * d, d);
}

/* ---- the latent cache and the absorbed step ----------------------------- */

int hs_mla_cache_init(hs_mla_cache *cache, int B, int kv_lora_rank, int qk_rope_head_dim,
                      int cap)
{
    memset(cache, 0, sizeof *cache);
    if (B < 1 || kv_lora_rank < 1 || qk_rope_head_dim < 1 || cap < 1)
        return hs_fail(HS_EINVAL, "mla cache: B=%d, kv_lora_rank=%d, qk_rope_head_dim=%d, "
                                  "cap=%d must be positive",
                       B, kv_lora_rank, qk_rope_head_dim, cap);
    cache->B = B;
    cache->C = kv_lora_rank;
    cache->r = qk_rope_head_dim;
    cache->cap = cap;
    const size_t rows = (size_t)B * cap;
    cache->latent = hs_calloc(rows, sizeof(hs_real) * kv_lora_rank, "mla cache latents");
    cache->k_pe = hs_calloc(rows, sizeof(hs_real) * qk_rope_head_dim, "mla cache rope keys");
    if (!cache->latent || !cache->k_pe) {
        hs_mla_cache_free(cache);
        return HS_ENOMEM;
    }
    return HS_OK;
}

void hs_mla_cache_free(hs_mla_cache *cache)
{
    free(cache->latent);
    free(cache->k_pe);
    memset(cache, 0, sizeof *cache);
}

size_t hs_mla_cache_bytes(int B, int kv_lora_rank, int qk_rope_head_dim, int tokens)
{
    return ((size_t)kv_lora_rank + (size_t)qk_rope_head_dim) * sizeof(hs_real) * (size_t)tokens *
           (size_t)B;
}

/* Per-step buffers of the absorbed path. */
typedef struct {
    hs_real *mem, *qlat, *olat, *z, *zg, *P;
    hs_mla_acts m;
} step_scratch;

static int step_alloc(step_scratch *s, const hs_mla_config *c, int B, int L, int S)
{
    const size_t N = (size_t)B * L, HC = (size_t)c->n_heads * c->kv_lora_rank;
    const size_t HV = (size_t)c->n_heads * c->v_dim;
    const size_t acts = hs_mla_acts_elems(c, B, L, 0);
    s->mem = hs_calloc(acts + 2 * N * HC + 2 * N * HV + (size_t)L * c->n_heads * S, sizeof(hs_real),
                       "mla step scratch");
    if (!s->mem)
        return HS_ENOMEM;
    hs_mla_acts_bind(&s->m, c, B, L, 0, s->mem);
    s->qlat = s->mem + acts;
    s->olat = s->qlat + N * HC;
    s->z = s->olat + N * HC;
    s->zg = s->z + N * HV;
    s->P = s->zg + N * HV;
    return HS_OK;
}

/* The absorbed attention of batch row b over the cache (S positions, the
 * last L new): qlat_h = q_nope_h W^UK_h (L x C), scores against the
 * latents plus q_pe k_pe^T, causal softmax, olat_h = P latents, z_h =
 * olat_h W^UV_h^T. The (L, H) query rows of qlat and q_pe are one matrix
 * each (row i h, widths C and r), so the scores and the mix of every head
 * are one product each over the cache: the latents are read twice per
 * step, not twice per head. */
static void absorbed_row(step_scratch *s, const hs_mla_weights *w, const hs_mla_config *c,
                         const hs_mla_cache *cache, int b, int L, int S)
{
    const int H = c->n_heads, n = c->qk_nope, r = c->qk_rope, v = c->v_dim, C = c->kv_lora_rank;
    const int HQ = H * (n + r), HC = H * C, HV = H * v, LH = L * H;
    const hs_real scale = (hs_real)(1 / sqrt((double)(n + r)));
    const hs_real *lat = cache->latent + (size_t)b * cache->cap * C;
    const hs_real *kpe = cache->k_pe + (size_t)b * cache->cap * r;
    const hs_real *Q = s->m.q + (size_t)b * L * HQ;   /* (L H, n + r) */
    hs_real *qlat = s->qlat + (size_t)b * L * HC;     /* (L H, C) */
    hs_real *olat = s->olat + (size_t)b * L * HC;     /* (L H, C) */
    for (int h = 0; h < H; h++)
        hs_gemm(0, 0, L, C, n, 1, Q + (size_t)h * (n + r), HQ, w->w_kvb + (size_t)h * (n + v) * C,
                C, 0, qlat + (size_t)h * C, HC);
    hs_gemm(0, 1, LH, S, C, scale, qlat, C, lat, C, 0, s->P, S);
    hs_gemm(0, 1, LH, S, r, scale, Q + n, n + r, kpe, r, 1, s->P, S);
    for (int k = 0; k < LH; k++) {
        hs_real *row = s->P + (size_t)k * S;
        const int lim = S - L + k / H + 1;
        hs_softmax_row(row, NULL, lim);
        if (S > lim)
            memset(row + lim, 0, sizeof(hs_real) * (size_t)(S - lim));
    }
    hs_gemm(0, 0, LH, C, S, 1, s->P, S, lat, C, 0, olat, C);
    for (int h = 0; h < H; h++)
        hs_gemm(0, 1, L, v, C, 1, olat + (size_t)h * C, HC, w->w_kvb + ((size_t)h * (n + v) + n) * C,
                C, 0, s->z + (size_t)b * L * HV + (size_t)h * v, HV);
}

int hs_mla_forward_cached(hs_real *out, hs_real *z, const hs_mla_weights *w,
                          const hs_mla_config *c, const hs_real *x, int L, const hs_real *xi,
                          hs_mla_cache *cache)
{
    int rc = hs_mla_config_check(c);
    if (rc)
        return rc;
    if (cache->C != c->kv_lora_rank || cache->r != c->qk_rope)
        return hs_fail(HS_EINVAL, "mla cache: widths %d + %d are not the layer's %d + %d",
                       cache->C, cache->r, c->kv_lora_rank, c->qk_rope);
    if (L < 1 || L > cache->cap - cache->len)
        return hs_fail(HS_EINVAL, "mla cache: %d new positions after %d exceed its %d", L,
                       cache->len, cache->cap);
    const int B = cache->B, H = c->n_heads, n = c->qk_nope, r = c->qk_rope, v = c->v_dim,
              C = c->kv_lora_rank, p0 = cache->len, S = p0 + L;
    const size_t N = (size_t)B * L, HV = (size_t)H * v;
    step_scratch s;
    if ((rc = step_alloc(&s, c, B, L, S)))
        return rc;
    project_q(&s.m, w, c, x, N);
    project_latent(&s.m, w, c, x, N);
    mla_rope(s.m.q + n, B, L, H, (size_t)(n + r), c, p0, 0);
    mla_rope(s.m.kpe, B, L, 1, (size_t)r, c, p0, 0);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            const size_t row = (size_t)b * L + i, at = (size_t)b * cache->cap + p0 + i;
            memcpy(cache->latent + at * C, s.m.ckv + row * C, sizeof(hs_real) * C);
            memcpy(cache->k_pe + at * r, s.m.kpe + row * r, sizeof(hs_real) * r);
        }
    cache->len = S;
    for (int b = 0; b < B; b++)
        absorbed_row(&s, w, c, cache, b, L, S);
    const hs_real *zo = s.z;
    if (xi) {
        for (size_t i = 0; i < N; i++)
            for (int h = 0; h < H; h++)
                for (int k = 0; k < v; k++)
                    s.zg[i * HV + (size_t)h * v + k] = xi[h] * s.z[i * HV + (size_t)h * v + k];
        zo = s.zg;
    }
    hs_linear_forward(out, zo, w->w_o, NULL, N, (int)HV, c->d_model);
    if (z)
        memcpy(z, s.z, sizeof(hs_real) * N * HV);
    free(s.mem);
    return HS_OK;
}
