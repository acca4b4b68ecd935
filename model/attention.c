/* The grouped-query attention module: configuration, weights, the compact
 * KV cache, and the projections around the per-head kernel (attn_heads.c). */
#include "attention.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "linalg.h"

int hs_attn_config_check(const hs_attn_config *c)
{
    if (c->d_model <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 || c->head_dim < 0)
        return hs_fail(HS_EINVAL,
                       "attention config: sizes must be positive (d_model=%d, n_heads=%d, "
                       "n_kv_heads=%d, head_dim=%d)",
                       c->d_model, c->n_heads, c->n_kv_heads, c->head_dim);
    if (!c->head_dim && c->d_model % c->n_heads)
        return hs_fail(HS_EINVAL, "attention config: d_model=%d is not divisible by n_heads=%d",
                       c->d_model, c->n_heads);
    if (c->rope_theta < 0 || (c->rope_theta > 0 && hs_attn_rotary_dims(c) % 2))
        return hs_fail(HS_EINVAL, "attention config: rotary positions need an even number of "
                                  "rotary dims and rope_theta > 0 (rotary dims=%d, rope_theta=%g)",
                       hs_attn_rotary_dims(c), c->rope_theta);
    if (c->rotary_dims < 0 || c->rotary_dims > hs_attn_head_dim(c))
        return hs_fail(HS_EINVAL, "attention config: rotary_dims=%d outside 0..head_dim=%d",
                       c->rotary_dims, hs_attn_head_dim(c));
    const hs_rope_scaling *rs = &c->rope_scaling;
    if (rs->kind != HS_ROPE_DEFAULT &&
        !(rs->factor > 0 && isfinite(rs->factor) &&
          (rs->kind == HS_ROPE_LINEAR ||
           (rs->low_freq_factor > 0 && rs->high_freq_factor > rs->low_freq_factor &&
            isfinite(rs->high_freq_factor) && rs->original_max_position_embeddings > 0 &&
            isfinite(rs->original_max_position_embeddings)))))
        return hs_fail(HS_EINVAL,
                       "attention config: rope scaling needs factor > 0 (llama3 also "
                       "0 < low_freq_factor < high_freq_factor and "
                       "original_max_position_embeddings > 0)");
    if (c->n_heads % c->n_kv_heads)
        return hs_fail(HS_EINVAL,
                       "attention config: n_heads=%d is not divisible by n_kv_heads=%d",
                       c->n_heads, c->n_kv_heads);
    if (c->window < 0)
        return hs_fail(HS_EINVAL, "attention config: window=%d must be >= 0 (0: global)",
                       c->window);
    if (c->sink < 0)
        return hs_fail(HS_EINVAL, "attention config: sink=%d must be >= 0", c->sink);
    for (int h = 0; c->head_window && h < c->n_heads; h++)
        if (c->head_window[h] < 0)
            return hs_fail(HS_EINVAL,
                           "attention config: window=%d of head %d must be >= 0 (0: global)",
                           c->head_window[h], h);
    if (!(c->scale >= 0 && isfinite(c->scale)) || !(c->softcap >= 0 && isfinite(c->softcap)))
        return hs_fail(HS_EINVAL, "attention config: scale=%g and softcap=%g must be finite and "
                                  ">= 0 (0: 1/sqrt(dh), no cap)", c->scale, c->softcap);
    if (c->qk_norm < HS_QK_NORM_NONE || c->qk_norm > HS_QK_NORM_PROJ)
        return hs_fail(HS_EINVAL, "attention config: unknown q/k norm %d", (int)c->qk_norm);
    if (c->qk_norm && !(c->qk_norm_eps > 0 && isfinite(c->qk_norm_eps)))
        return hs_fail(HS_EINVAL, "attention config: the q/k norms' eps=%g must be positive",
                       c->qk_norm_eps);
    return HS_OK;
}

double hs_attn_scale(const hs_attn_config *c)
{
    return c->scale > 0 ? c->scale : 1 / sqrt((double)hs_attn_head_dim(c));
}

hs_attn_scores hs_attn_config_scores(const hs_attn_config *c)
{
    return (hs_attn_scores){ hs_attn_scale(c), c->softcap, c->rel };
}

int hs_attn_windows(const int **win, int **owned, const hs_attn_config *c)
{
    *owned = NULL;
    *win = c->head_window;
    if (c->head_window || !c->window)
        return HS_OK;
    int *w = hs_calloc((size_t)c->n_heads, sizeof(int), "attention windows");
    if (!w)
        return HS_ENOMEM;
    for (int h = 0; h < c->n_heads; h++)
        w[h] = c->window;
    *win = *owned = w;
    return HS_OK;
}

int hs_attn_head_dim(const hs_attn_config *c)
{
    return c->head_dim ? c->head_dim : c->d_model / c->n_heads;
}

int hs_attn_rotary_dims(const hs_attn_config *c)
{
    return c->rotary_dims ? c->rotary_dims : hs_attn_head_dim(c);
}

/* Hugging Face's _compute_default/linear/llama3_parameters, in double. */
double hs_rope_inv_freq(const hs_attn_config *c, int i)
{
    const int R = hs_attn_rotary_dims(c);
    const double inv = pow(c->rope_theta, -2.0 * i / R);
    const hs_rope_scaling *s = &c->rope_scaling;
    if (s->kind == HS_ROPE_LINEAR)
        return inv / s->factor;
    if (s->kind != HS_ROPE_LLAMA3)
        return inv;
    /* Llama 3.1: wavelengths longer than the pre-training context over
     * low_freq_factor are stretched by factor, those shorter than it over
     * high_freq_factor are kept, and the band between blends the two. */
    const double ctx = s->original_max_position_embeddings, wavelen = 2 * M_PI / inv;
    if (wavelen < ctx / s->high_freq_factor)
        return inv;
    if (wavelen > ctx / s->low_freq_factor)
        return inv / s->factor;
    const double smooth =
        (ctx / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    return (1 - smooth) * inv / s->factor + smooth * inv;
}

enum { N_ATTN_TENSORS = 10 };

/* Element counts of the tensors in binding order. */
static void tensor_sizes(const hs_attn_config *c, size_t n[N_ATTN_TENSORS])
{
    size_t d = (size_t)c->d_model, dh = (size_t)hs_attn_head_dim(c);
    size_t hd = (size_t)c->n_heads * dh, gd = (size_t)c->n_kv_heads * dh;
    size_t with_bias = c->bias ? 1 : 0, qkv = c->bias || c->qkv_bias ? 1 : 0;
    n[0] = hd * d;
    n[1] = gd * d;
    n[2] = gd * d;
    n[3] = d * hd;
    n[4] = qkv * hd;
    n[5] = qkv * gd;
    n[6] = qkv * gd;
    n[7] = with_bias * d;
    n[8] = c->qk_norm == HS_QK_NORM_HEAD ? dh : c->qk_norm == HS_QK_NORM_PROJ ? hd : 0;
    n[9] = c->qk_norm == HS_QK_NORM_HEAD ? dh : c->qk_norm == HS_QK_NORM_PROJ ? gd : 0;
}

size_t hs_attn_param_count(const hs_attn_config *c)
{
    size_t n[N_ATTN_TENSORS], total = 0;
    tensor_sizes(c, n);
    for (int i = 0; i < N_ATTN_TENSORS; i++)
        total += n[i];
    return total;
}

void hs_attn_weights_bind(hs_attn_weights *w, const hs_attn_config *c, hs_real *mem)
{
    size_t n[N_ATTN_TENSORS];
    tensor_sizes(c, n);
    hs_real **slot[N_ATTN_TENSORS] = { &w->w_q, &w->w_k, &w->w_v, &w->w_o,   &w->b_q,
                                       &w->b_k, &w->b_v, &w->b_o, &w->q_norm, &w->k_norm };
    for (int i = 0; i < N_ATTN_TENSORS; i++) {
        *slot[i] = n[i] ? mem : NULL;
        mem += n[i];
    }
}

int hs_kv_cache_init(hs_kv_cache *cache, int B, int G, int dh, int cap)
{
    memset(cache, 0, sizeof *cache);
    if (B <= 0 || G <= 0 || dh <= 0 || cap <= 0)
        return hs_fail(HS_EINVAL, "kv cache: sizes must be positive (B=%d, G=%d, dh=%d, cap=%d)",
                       B, G, dh, cap);
    size_t n = (size_t)B * G * cap * dh;
    cache->k = hs_calloc(n, sizeof(hs_real), "kv cache keys");
    cache->v = hs_calloc(n, sizeof(hs_real), "kv cache values");
    if (!cache->k || !cache->v) {
        hs_kv_cache_free(cache);
        return HS_ENOMEM;
    }
    cache->B = B;
    cache->G = G;
    cache->dh = dh;
    cache->cap = cap;
    return HS_OK;
}

int hs_kv_cache_sane(const hs_kv_cache *c)
{
    return c->B > 0 && c->G > 0 && c->dh > 0 && c->cap > 0 && c->len >= 0 && c->len <= c->cap &&
           c->k && c->v && c->k != c->v;
}

void hs_kv_cache_free(hs_kv_cache *cache)
{
    free(cache->k);
    free(cache->v);
    memset(cache, 0, sizeof *cache);
}

int hs_attn_acts_alloc(hs_attn_acts *a, const hs_attn_config *c, int B, int L, int S_new,
                       int S_att, int want_att)
{
    memset(a, 0, sizeof *a);
    int rc = hs_attn_config_check(c);
    if (rc)
        return rc;
    if (B <= 0 || L <= 0 || S_new <= 0 || S_att < S_new)
        return hs_fail(HS_EINVAL,
                       "attention activations: bad sizes (B=%d, L=%d, S_new=%d, S=%d)", B, L,
                       S_new, S_att);
    size_t dh = (size_t)hs_attn_head_dim(c);
    size_t d = (size_t)c->n_heads * dh, gd = (size_t)c->n_kv_heads * dh; /* d: HD here */
    a->B = B;
    a->L = L;
    a->S_new = S_new;
    a->S = S_att;
    a->q = hs_calloc((size_t)B * L * d, sizeof(hs_real), "attention q");
    a->z = hs_calloc((size_t)B * L * d, sizeof(hs_real), "attention z");
    a->k = hs_calloc((size_t)B * S_new * gd, sizeof(hs_real), "attention k");
    a->v = hs_calloc((size_t)B * S_new * gd, sizeof(hs_real), "attention v");
    a->zg = hs_calloc((size_t)B * L * d, sizeof(hs_real), "gated head outputs");
    if (want_att) {
        a->att = hs_calloc((size_t)B * c->n_heads * L * S_att, sizeof(hs_real), "attention maps");
        a->dz = hs_calloc((size_t)B * L * d, sizeof(hs_real), "attention dz");
        a->dq = hs_calloc((size_t)B * L * d, sizeof(hs_real), "attention dq");
        a->dk = hs_calloc((size_t)B * S_new * gd, sizeof(hs_real), "attention dk");
        a->dv = hs_calloc((size_t)B * S_new * gd, sizeof(hs_real), "attention dv");
    }
    const int raw = want_att && c->qk_norm;
    if (raw) { /* what the q/k norms' backward reads */
        a->q_raw = hs_calloc((size_t)B * L * d, sizeof(hs_real), "attention q before its norm");
        a->k_raw = hs_calloc((size_t)B * S_new * gd, sizeof(hs_real), "attention k before its norm");
    }
    if (!a->q || !a->z || !a->k || !a->v || !a->zg ||
        (want_att && (!a->att || !a->dz || !a->dq || !a->dk || !a->dv)) ||
        (raw && (!a->q_raw || !a->k_raw))) {
        hs_attn_acts_free(a);
        return HS_ENOMEM;
    }
    return HS_OK;
}

void hs_attn_acts_free(hs_attn_acts *a)
{
    free(a->q);
    free(a->k);
    free(a->v);
    free(a->z);
    free(a->att);
    free(a->zg);
    free(a->dz);
    free(a->dq);
    free(a->dk);
    free(a->dv);
    free(a->q_raw);
    free(a->k_raw);
    memset(a, 0, sizeof *a);
}

/* hs_rope_inv_freq for hs_rope_rows: ctx is the hs_attn_config. */
static double inv_freq_of(const void *ctx, int i) { return hs_rope_inv_freq(ctx, i); }

/* Rotates, in place, every head of rows (B, T, nh*dh) by the Hugging Face
 * rotate-half RoPE at positions pos0 + t: with R rotary dims (all dh, or
 * GPT-NeoX's first R) the pair (i, i + R/2) turns by angle (pos0 + t) *
 * hs_rope_inv_freq(c, i); dims R..dh-1 pass unchanged. inverse = 1 turns
 * back, which is the backward of the rotation (its transpose). */
static void rope_rotate(hs_real *x, int B, int T, int nh, int dh, int pos0,
                        const hs_attn_config *c, int inverse)
{
    hs_rope_rows(x, B, T, nh, (size_t)nh * dh, (size_t)dh, hs_attn_rotary_dims(c), pos0,
                 inv_freq_of, c, HS_ROPE_HALF, inverse);
}

/* The q/k norm's rows of x (BT positions of nh heads of dh values): each
 * head's dh values per head, each position's nh dh over the projection. */
static void qk_rows(const hs_attn_config *c, size_t BT, int nh, int dh, size_t *rows, int *C)
{
    const int per_head = c->qk_norm == HS_QK_NORM_HEAD;
    *rows = per_head ? BT * (size_t)nh : BT;
    *C = per_head ? dh : nh * dh;
}

/* out = the q/k norm of in (out may be in). */
static void qk_norm_forward(hs_real *out, const hs_real *in, const hs_real *w,
                            const hs_attn_config *c, size_t BT, int nh, int dh)
{
    size_t rows;
    int C;
    qk_rows(c, BT, nh, dh, &rows, &C);
    hs_rmsnorm_rows(out, NULL, in, w, (hs_real)c->qk_norm_offset, rows, C, c->qk_norm_eps);
}

/* dx = the q/k norm's backward of dy at the forward's input raw (dw, NULL:
 * skipped, accumulates). The rows' rstd are recomputed from raw by the
 * forward's own code (dx holds its output meanwhile), so the forward keeps
 * none. */
static int qk_norm_backward(hs_real *dx, hs_real *dw, const hs_real *dy, const hs_real *raw,
                            const hs_real *w, const hs_attn_config *c, size_t BT, int nh, int dh)
{
    size_t rows;
    int C;
    qk_rows(c, BT, nh, dh, &rows, &C);
    hs_real *rstd = hs_calloc(rows, sizeof *rstd, "q/k norm backward");
    if (!rstd)
        return HS_ENOMEM;
    const hs_real off = (hs_real)c->qk_norm_offset;
    hs_rmsnorm_rows(dx, rstd, raw, w, off, rows, C, c->qk_norm_eps);
    hs_rmsnorm_backward_off(dx, NULL, dw, dy, raw, w, off, rstd, rows, C);
    free(rstd);
    return HS_OK;
}

void hs_attn_project(hs_real *q, hs_real *k, hs_real *v, hs_real *q_raw, hs_real *k_raw,
                     const hs_attn_weights *w, const hs_attn_config *c, const hs_real *x,
                     const hs_real *kv_in, int B, int L, int S, int pos0)
{
    const int d = c->d_model, H = c->n_heads, G = c->n_kv_heads, dh = hs_attn_head_dim(c);
    const size_t BL = (size_t)B * L, BS = (size_t)B * S;
    hs_real *qp = c->qk_norm && q_raw ? q_raw : q, *kp = c->qk_norm && k_raw ? k_raw : k;
    hs_linear_forward(qp, x, w->w_q, w->b_q, BL, d, H * dh);
    hs_linear_forward(kp, kv_in, w->w_k, w->b_k, BS, d, G * dh);
    hs_linear_forward(v, kv_in, w->w_v, w->b_v, BS, d, G * dh);
    if (c->qk_norm) {
        qk_norm_forward(q, qp, w->q_norm, c, BL, H, dh);
        qk_norm_forward(k, kp, w->k_norm, c, BS, G, dh);
    }
    if (c->rope_theta > 0) {
        rope_rotate(q, B, L, H, dh, pos0, c, 0);
        rope_rotate(k, B, S, G, dh, pos0, c, 0);
    }
}

/* The gate of head h at row r (= b*L + t): xi[h], or xi[b*H + h] per sequence. */
static inline hs_real gate_at(const hs_real *xi, int per_seq, size_t r, int L, int H, int h)
{
    return per_seq ? xi[r / (size_t)L * H + h] : xi[h];
}

/* zg (B*L, H*dh) = z with head h scaled by its gate. */
static void apply_gates(hs_real *zg, const hs_real *z, const hs_real *xi, int per_seq, size_t rows,
                        int L, int H, int dh)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(rows, H * dh))
    for (size_t r = 0; r < rows; r++)
        for (int h = 0; h < H; h++) {
            const hs_real g = gate_at(xi, per_seq, r, L, H, h);
            for (int i = 0; i < dh; i++)
                zg[(r * H + h) * dh + i] = g * z[(r * H + h) * dh + i];
        }
}

/* Appends the new keys/values (B,S_new,GD) at cache position len, in the
 * cache's (B,G,cap,dh) layout. */
static void cache_append(hs_kv_cache *cache, const hs_real *k, const hs_real *v, int S_new)
{
    assert(hs_kv_cache_sane(cache) && cache->len + S_new <= cache->cap);
    const int G = cache->G, dh = cache->dh;
    for (int b = 0; b < cache->B; b++)
        for (int s = 0; s < S_new; s++)
            for (int j = 0; j < G; j++) {
                size_t src = ((size_t)b * S_new + s) * G * dh + (size_t)j * dh;
                size_t dst = (((size_t)b * G + j) * cache->cap + cache->len + s) * dh;
                memcpy(cache->k + dst, k + src, sizeof(hs_real) * dh);
                memcpy(cache->v + dst, v + src, sizeof(hs_real) * dh);
            }
    cache->len += S_new;
}

/* The hook of site s (if any) on x (B, T, heads, dh). */
static int head_site(const hs_site_hook *site, hs_site s, int layer, hs_real *x, int B, int T,
                     int heads, int dh)
{
    if (!hs_site_hooked(site, s))
        return HS_OK;
    const hs_site_view v = hs_site_view_btw(s, layer, x, B, T, heads, dh);
    return hs_site_call(site, &v);
}

/* hs_attn_forward_heads of a checked configuration, with its windows win. */
static int forward_heads(hs_attn_acts *a, const hs_attn_weights *w, const hs_attn_config *c,
                         const hs_real *x, const hs_real *y, const hs_attn_mask *mask,
                         hs_kv_cache *cache, const int *win)
{
    int rc;
    const int B = a->B, L = a->L, Sn = a->S_new;
    const int H = c->n_heads, G = c->n_kv_heads, dh = hs_attn_head_dim(c), GD = G * dh;
    if (!y && Sn != L)
        return hs_fail(HS_EINVAL, "attention: self-attention needs S_new == L (%d != %d)", Sn, L);

    hs_kv_view view = { a->k, a->v, (size_t)Sn * GD, (size_t)dh, (size_t)GD, Sn };
    int prefix = 0;
    if (cache) {
        assert(hs_kv_cache_sane(cache));
        if (y)
            return hs_fail(HS_EINVAL, "attention: the KV cache is for self-attention only");
        if (!mask || !mask->causal)
            return hs_fail(HS_EINVAL, "attention: the KV cache supports causal decoding only");
        if (cache->B != B || cache->G != G || cache->dh != dh)
            return hs_fail(HS_EINVAL,
                           "attention: cache shape (B=%d, G=%d, dh=%d) does not match "
                           "(B=%d, G=%d, dh=%d)",
                           cache->B, cache->G, cache->dh, B, G, dh);
        if (cache->len + Sn > cache->cap)
            return hs_fail(HS_EINVAL, "attention: cache full (%d + %d > capacity %d)",
                           cache->len, Sn, cache->cap);
        prefix = cache->len;
        view = (hs_kv_view){ cache->k, cache->v, (size_t)G * cache->cap * dh,
                             (size_t)cache->cap * dh, (size_t)dh, prefix + Sn };
    }
    if (a->att && a->S != view.S)
        return hs_fail(HS_EINVAL, "attention: maps were allocated for S=%d keys, forward has %d",
                       a->S, view.S);
    /* Validate before touching the cache, so a rejected call leaves it as it was. */
    rc = hs_attn_mask_check(mask, win, prefix, B, L, view.S, H);
    if (rc)
        return rc;

    hs_attn_project(a->q, a->k, a->v, a->q_raw, a->k_raw, w, c, x, y ? y : x, B, L, Sn, prefix);
    const hs_site_hook *site = a->hooks.site;
    const int layer = a->hooks.layer;
    if ((rc = head_site(site, HS_SITE_Q, layer, a->q, B, L, H, dh)) ||
        (rc = head_site(site, HS_SITE_K, layer, a->k, B, Sn, G, dh)) ||
        (rc = head_site(site, HS_SITE_V, layer, a->v, B, Sn, G, dh)))
        return rc;
    if (cache)
        cache_append(cache, a->k, a->v, Sn);

    const hs_attn_scores sc = hs_attn_config_scores(c);
    hs_attn_mask sunk = mask ? *mask : (hs_attn_mask){ 0 }; /* the config's sinks */
    sunk.sink = c->sink;
    rc = hs_attn_heads_forward_scored(a->z, a->att, a->q, &view, c->sink ? &sunk : mask, win,
                                      prefix, B, L, H, G, dh, &sc, &a->hooks);
    if (!rc)
        rc = head_site(site, HS_SITE_Z, layer, a->z, B, L, H, dh);
    return rc;
}

int hs_attn_forward_heads(hs_attn_acts *a, const hs_attn_weights *w, const hs_attn_config *c,
                          const hs_real *x, const hs_real *y, const hs_attn_mask *mask,
                          hs_kv_cache *cache)
{
    const int *win;
    int *owned;
    int rc = hs_attn_config_check(c);
    if (!rc)
        rc = hs_attn_windows(&win, &owned, c);
    if (rc)
        return rc;
    rc = forward_heads(a, w, c, x, y, mask, cache, win);
    free(owned);
    return rc;
}

void hs_attn_forward_output(hs_real *out, hs_attn_acts *a, const hs_attn_weights *w,
                            const hs_attn_config *c, const hs_real *xi, int xi_per_seq)
{
    const int dh = hs_attn_head_dim(c), H = c->n_heads;
    const size_t rows = (size_t)a->B * a->L;
    if (xi)
        apply_gates(a->zg, a->z, xi, xi_per_seq, rows, a->L, H, dh);
    hs_linear_forward(out, xi ? a->zg : a->z, w->w_o, w->b_o, rows, H * dh, c->d_model);
}

int hs_attn_forward(hs_real *out, hs_attn_acts *a, const hs_attn_weights *w,
                    const hs_attn_config *c, const hs_real *x, const hs_real *y,
                    const hs_real *xi, const hs_attn_mask *mask, hs_kv_cache *cache)
{
    int rc = hs_attn_forward_heads(a, w, c, x, y, mask, cache);
    if (!rc)
        hs_attn_forward_output(out, a, w, c, xi, 0);
    return rc;
}

int hs_attn_grad_site(const hs_attn_grad_hooks *g, hs_site s, const hs_real *x, int B, int T,
                      int heads, int dh)
{
    if (!g->site || !g->site[s])
        return HS_OK;
    const hs_site_view v = hs_site_view_btw(s, g->layer, (hs_real *)x, B, T, heads, dh);
    return g->site[s](g->ctx, &v);
}

int hs_attn_map_grads_wanted(const hs_attn_grad_hooks *g)
{
    return g->site && (g->site[HS_SITE_PATTERN] || g->site[HS_SITE_ATTN_SCORES]);
}

int hs_attn_map_grads(const hs_attn_grad_hooks *g, hs_real *dA, const hs_real *A, int B, int L,
                      int H, int S)
{
    hs_site_view view = { HS_SITE_PATTERN, g->layer, dA, B, L, H, S,
                          (size_t)H * L * S, (size_t)S, (size_t)L * S };
    int rc = g->site[HS_SITE_PATTERN] ? g->site[HS_SITE_PATTERN](g->ctx, &view) : HS_OK;
    if (rc || !g->site[HS_SITE_ATTN_SCORES])
        return rc;
    const size_t rows = (size_t)B * H * L;
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(rows, S))
    for (size_t r = 0; r < rows; r++) {
        const hs_real *a = A + r * S;
        hs_real *d = dA + r * S;
        double dot = 0;
        for (int s = 0; s < S; s++)
            dot += (double)a[s] * d[s];
        for (int s = 0; s < S; s++)
            d[s] = (hs_real)(a[s] * (d[s] - dot));
    }
    view.site = HS_SITE_ATTN_SCORES;
    return g->site[HS_SITE_ATTN_SCORES](g->ctx, &view);
}

/* The pattern's gradient dA = dz_h v_g^T of every head (B,H,L,S), 0 where a
 * key is masked (the forward resets those entries), and the scores', to
 * their observers (A: the pattern). */
static int grad_pattern(const hs_attn_grad_hooks *g, const hs_real *dz, const hs_real *v,
                        const hs_real *A, const hs_attn_mask *mask, const int *win, int B, int L,
                        int S, int H, int G, int dh)
{
    if (!hs_attn_map_grads_wanted(g))
        return HS_OK;
    const int HD = H * dh, GD = G * dh;
    hs_real *dA = hs_calloc((size_t)B * H * L * S, sizeof(hs_real), "pattern gradient");
    if (!dA)
        return HS_ENOMEM;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            hs_real *P = dA + ((size_t)b * H + h) * L * S;
            hs_gemm(0, 1, L, S, dh, 1, dz + (size_t)b * L * HD + (size_t)h * dh, HD,
                    v + (size_t)b * S * GD + (size_t)(h / (H / G)) * dh, GD, 0, P, S);
            const int W = win ? win[h] : 0;
            const unsigned char *valid = mask && mask->valid ? mask->valid + (size_t)b * S : NULL;
            for (int t = 0; t < L; t++)
                for (int s = 0; s < S; s++) {
                    const int seen = (!mask || !mask->causal || s <= t) &&
                                     !(mask && mask->causal && W > 0 && s <= t - W) &&
                                     (!valid || valid[s]);
                    if (!seen)
                        P[(size_t)t * S + s] = 0;
                }
        }
    int rc = hs_attn_map_grads(g, dA, A, B, L, H, S);
    free(dA);
    return rc;
}

/* dinp += the gradient through each of n heads' rows of a projection w
 * (n dh, d), each reported first: dx_h = dout[:, h] w_h (rows x dh times dh x
 * d), path(kind, h, dx_h). scratch: rows x d. */
static int path_grads(hs_real *dinp, hs_real *scratch, const hs_real *dout, const hs_real *w,
                      int n, int dh, size_t rows, int d, hs_recv_kind kind,
                      const hs_attn_grad_hooks *g)
{
    for (int h = 0; h < n; h++) {
        hs_gemm(0, 0, (int)rows, d, dh, 1, dout + (size_t)h * dh, n * dh, w + (size_t)h * dh * d,
                d, 0, scratch, d);
        int rc = g->path(g->path_ctx, kind, h, scratch);
        if (rc)
            return rc;
        hs_add(dinp, dinp, scratch, rows * (size_t)d);
    }
    return HS_OK;
}

int hs_attn_backward(hs_real *dx, hs_real *dy, hs_attn_weights *dw, hs_real *dxi,
                     const hs_real *dout, const hs_attn_acts *a, const hs_attn_weights *w,
                     const hs_attn_config *c, const hs_real *x, const hs_real *y,
                     const hs_real *xi, int xi_per_seq, const hs_attn_mask *mask)
{
    int rc = hs_attn_config_check(c);
    if (rc)
        return rc;
    if (!a->att)
        return hs_fail(HS_EINVAL, "attention backward: the forward kept no maps "
                                  "(allocate the activations with want_att)");
    if (a->S != a->S_new)
        return hs_fail(HS_EINVAL, "attention backward: a forward over a KV cache has no backward");
    if (c->sink)
        return hs_fail(HS_EINVAL, "attention backward: a KV plan's streaming heads (attention "
                                  "sinks) have no backward");
    if (y && !dy)
        return hs_fail(HS_EINVAL, "attention backward: cross-attention needs dy");
    const hs_attn_grad_hooks *gh = &a->grad;
    if (gh->path && (y || c->qk_norm == HS_QK_NORM_PROJ))
        return hs_fail(HS_EINVAL, "attention backward: per-head input gradients need "
                                  "self-attention and q/k norms per head (a norm over the whole "
                                  "projection mixes the heads)");
    const int B = a->B, L = a->L, S = a->S;
    const int d = c->d_model, H = c->n_heads, G = c->n_kv_heads, dh = hs_attn_head_dim(c);
    const int HD = H * dh, GD = G * dh;
    const size_t BL = (size_t)B * L, BS = (size_t)B * S;
    hs_real *dz = a->dz, *dq = a->dq, *dk = a->dk, *dv = a->dv, *zg = a->zg;
    memset(dq, 0, sizeof(hs_real) * BL * HD);
    memset(dk, 0, sizeof(hs_real) * BS * GD);
    memset(dv, 0, sizeof(hs_real) * BS * GD);

    /* Output projection: dz = dout w_o (written, not added: no memset), the
     * gradient of the gated head outputs. */
    if (xi)
        apply_gates(zg, a->z, xi, xi_per_seq, BL, L, H, dh);
    hs_gemm(0, 0, (int)BL, HD, d, 1, dout, d, w->w_o, HD, 0, dz, HD);
    hs_linear_backward(NULL, dw ? dw->w_o : NULL, dw ? dw->b_o : NULL, dout, xi ? zg : a->z,
                       w->w_o, BL, HD, d);
    if (xi) {
        /* dxi: sum of z * dL/d(gated z) over the rows the gate covers; then
         * dz = gate * dL/d(gated z). One task per (gate row, head). */
        const int gate_rows = xi_per_seq ? B : 1;
        const size_t span = xi_per_seq ? (size_t)L : BL;
#pragma omp parallel for collapse(2) schedule(static) if (HS_PAR_ROWS(BL, HD))
        for (int gb = 0; gb < gate_rows; gb++)
            for (int h = 0; h < H; h++) {
                hs_real g = 0;
                for (size_t r = gb * span; r < (gb + 1) * span; r++)
                    for (int i = 0; i < dh; i++)
                        g += a->z[(r * H + h) * dh + i] * dz[(r * H + h) * dh + i];
                if (dxi)
                    dxi[gb * H + h] += g;
                const hs_real gate = xi[gb * H + h];
                for (size_t r = gb * span; r < (gb + 1) * span; r++)
                    for (int i = 0; i < dh; i++)
                        dz[(r * H + h) * dh + i] *= gate;
            }
    }

    const int *win;
    int *owned;
    if ((rc = hs_attn_windows(&win, &owned, c)))
        return rc;
    rc = hs_attn_grad_site(gh, HS_SITE_Z, dz, B, L, H, dh);
    if (!rc)
        rc = grad_pattern(gh, dz, a->v, a->att, mask, win, B, L, S, H, G, dh);
    const hs_attn_scores sc = hs_attn_config_scores(c);
    if (!rc)
        rc = hs_attn_heads_backward_scored(dq, dk, dv, dz, a->att, a->q, a->k, a->v, mask, win, B,
                                           L, S, H, G, dh, &sc);
    free(owned);
    if (!rc && !(rc = hs_attn_grad_site(gh, HS_SITE_Q, dq, B, L, H, dh)) &&
        !(rc = hs_attn_grad_site(gh, HS_SITE_K, dk, B, S, G, dh)))
        rc = hs_attn_grad_site(gh, HS_SITE_V, dv, B, S, G, dh);
    if (rc)
        return rc;
    if (c->rope_theta > 0) {
        rope_rotate(dq, B, L, H, dh, 0, c, 1);
        rope_rotate(dk, B, S, G, dh, 0, c, 1);
    }

    const hs_real *kv_in = y ? y : x;
    hs_real *dkv_in = y ? dy : dx;
    hs_real *scratch = NULL;
    if (gh->path && !(scratch = hs_calloc(BL * (size_t)d, sizeof(hs_real), "path gradient")))
        return HS_ENOMEM;
    hs_linear_backward(gh->path ? NULL : dkv_in, dw ? dw->w_v : NULL, dw ? dw->b_v : NULL, dv,
                       kv_in, w->w_v, BS, d, GD);
    if (gh->path)
        rc = path_grads(dkv_in, scratch, dv, w->w_v, G, dh, BS, d, HS_RECV_V, gh);
    if (!rc && c->qk_norm) {
        /* through the norms to the projections, into buffers done with: dz
         * (read by the head kernel only) and dv (its projection is back) */
        if (!a->q_raw || !a->k_raw)
            rc = hs_fail(HS_EINVAL, "attention backward: the forward kept no q/k before "
                                    "their norms (allocate the activations with want_att)");
        if (!rc)
            rc = qk_norm_backward(dz, dw ? dw->q_norm : NULL, dq, a->q_raw, w->q_norm, c, BL, H,
                                  dh);
        if (!rc)
            rc = qk_norm_backward(dv, dw ? dw->k_norm : NULL, dk, a->k_raw, w->k_norm, c, BS, G,
                                  dh);
        dq = dz, dk = dv;
    }
    /* With plain scores the key bias gradient is identically zero: adding
     * the same vector to every key shifts each score row by a constant,
     * which the softmax ignores. Leaving it untouched keeps it exactly zero
     * instead of rounding noise that Adam would turn into a drift of about lr
     * per step. RoPE, a key norm or a soft-cap each break that invariance. */
    const int key_bias_acts = c->rope_theta > 0 || c->qk_norm || c->softcap > 0;
    hs_real *db_k = dw && key_bias_acts ? dw->b_k : NULL;
    if (!rc) {
        hs_linear_backward(gh->path ? NULL : dx, dw ? dw->w_q : NULL, dw ? dw->b_q : NULL, dq, x,
                           w->w_q, BL, d, HD);
        hs_linear_backward(gh->path ? NULL : dkv_in, dw ? dw->w_k : NULL, db_k, dk, kv_in, w->w_k,
                           BS, d, GD);
    }
    if (!rc && gh->path)
        rc = path_grads(dx, scratch, dq, w->w_q, H, dh, BL, d, HS_RECV_Q, gh);
    if (!rc && gh->path)
        rc = path_grads(dkv_in, scratch, dk, w->w_k, G, dh, BS, d, HS_RECV_K, gh);
    free(scratch);
    return rc;
}

int hs_attn_project_head(hs_real *out, const hs_attn_weights *w, const hs_attn_config *c,
                         hs_recv_kind which, int head, const hs_real *x, int B, int L, int pos0)
{
    int rc = hs_attn_config_check(c);
    if (rc)
        return rc;
    const int d = c->d_model, dh = hs_attn_head_dim(c);
    const int n = which == HS_RECV_Q ? c->n_heads : c->n_kv_heads;
    if ((which != HS_RECV_Q && which != HS_RECV_K && which != HS_RECV_V) || head < 0 ||
        head >= n)
        return hs_fail(HS_EINVAL, "attention: no %s head %d", which == HS_RECV_Q ? "query" :
                       "key/value", head);
    if (c->qk_norm == HS_QK_NORM_PROJ && which != HS_RECV_V)
        return hs_fail(HS_EINVAL, "attention: q/k norms over the whole projection mix the "
                                  "heads: no head's queries or keys come from its rows alone");
    const hs_real *wm = which == HS_RECV_Q ? w->w_q : which == HS_RECV_K ? w->w_k : w->w_v;
    const hs_real *bm = which == HS_RECV_Q ? w->b_q : which == HS_RECV_K ? w->b_k : w->b_v;
    const size_t BL = (size_t)B * L;
    hs_linear_forward(out, x, wm + (size_t)head * dh * d, bm ? bm + (size_t)head * dh : NULL, BL,
                      d, dh);
    if (which == HS_RECV_V)
        return HS_OK;
    if (c->qk_norm)
        qk_norm_forward(out, out, which == HS_RECV_Q ? w->q_norm : w->k_norm, c, BL, 1, dh);
    if (c->rope_theta > 0)
        rope_rotate(out, B, L, 1, dh, pos0, c, 0);
    return HS_OK;
}

int hs_attn_head_maps(hs_real *att, const hs_real *q, const hs_kv_view *kv,
                      const hs_attn_config *c, int h, int B, int L)
{
    int rc = hs_attn_config_check(c);
    if (rc)
        return rc;
    const int dh = hs_attn_head_dim(c);
    const int *win;
    int *owned;
    if ((rc = hs_attn_windows(&win, &owned, c)))
        return rc;
    const int one[1] = { win ? win[h] : 0 };
    hs_real *z = hs_calloc((size_t)B * L * dh, sizeof(hs_real), "head maps");
    const hs_attn_mask causal = { 1, NULL, c->sink };
    const hs_attn_scores sc = hs_attn_config_scores(c);
    rc = z ? hs_attn_heads_forward_scored(z, att, q, kv, &causal, one, 0, B, L, 1, 1, dh, &sc,
                                          NULL)
           : HS_ENOMEM;
    free(z);
    free(owned);
    return rc;
}
