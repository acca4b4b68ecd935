/* The per-head attention kernel: scores, masks, softmax and the value mix,
 * one block of QBLOCK query rows of one head at a time -- the one staged
 * driver of standard attention and MLA, which differ only in how a block's
 * scores are formed (hs_attn_form).
 *
 * Blocking keeps the scores of a block (QBLOCK x S) in cache and bounds the
 * scratch memory to one block per thread, so maps are never materialised
 * unless the caller asks for them. A block needs only the keys its rows may
 * see: with a causal mask those up to its last query (prefix + t1), with a
 * sliding window W also none before its first query's window (prefix + t0 -
 * W + 1). The GEMMs run over that band alone, so the masked upper triangle is
 * mostly skipped and a window costs O(L W) instead of O(L S). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "attention.h"
#include "linalg.h"

enum { QBLOCK = 64 };

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Soft-capping of n scores in place: s <- cap tanh(s / cap) (tanh in
 * double: the cap multiplies its error). A plain loop: it runs inside the
 * kernel's parallel tasks. */
static void softcap_row(hs_real *s, int n, double cap)
{
    for (int i = 0; i < n; i++)
        s[i] = (hs_real)(cap * tanh((double)s[i] / cap));
}

/* Window of query head h: 0 = global. */
static int head_window(const int *window, int h) { return window ? window[h] : 0; }

/* Keys query t may see before padding, [*lo, *hi): with the causal rule up
 * to its own position prefix + t, and with a window W from prefix + t - W + 1.
 * Both ends only grow with t, so a block's band is [lo of its first row, hi
 * of its last). Attention sinks (mask->sink) add the keys [0, sink) to a
 * windowed row: sinks_of() below. */
static void key_range(const hs_attn_mask *mask, int W, int prefix, int t, int S, int *lo, int *hi)
{
    const int causal = mask && mask->causal, pos = prefix + t;
    *hi = causal ? min_int(S, pos + 1) : S;
    *lo = causal && W > 0 ? max_int(0, pos - W + 1) : 0;
}

/* The sink keys [0, sinks) a row of window W sees besides its window: the
 * mask's sinks for a windowed head, else none. */
static int sinks_of(const hs_attn_mask *mask, int W)
{
    return mask && mask->causal && W > 0 ? mask->sink : 0;
}

/* The softmax of a row over the keys [0, sinks) and [lo, hi) (valid: NULL,
 * or 1 per real key from key 0), the keys between set to 0: a streaming
 * head's row, whose two ranges the plain softmax cannot take in one call.
 * row holds keys 0 .. hi-1. */
static void softmax_sinks(hs_real *row, const unsigned char *valid, int sinks, int lo, int hi)
{
    hs_real mx = -INFINITY, sum = 0;
    for (int s = 0; s < hi; s++)
        if ((s < sinks || s >= lo) && (!valid || valid[s]) && row[s] > mx)
            mx = row[s];
    for (int s = 0; s < hi; s++) {
        const int seen = (s < sinks || s >= lo) && (!valid || valid[s]);
        row[s] = seen ? hs_exp_nonpos(row[s] - mx) : 0;
        sum += row[s];
    }
    const hs_real inv = 1 / sum;
    for (int s = 0; s < hi; s++)
        row[s] *= inv;
}

int hs_attn_mask_check(const hs_attn_mask *mask, const int *window, int prefix, int B, int L,
                       int S, int H)
{
    if (S <= 0 || L <= 0)
        return hs_fail(HS_EINVAL, "attention: empty sequence (L=%d, S=%d)", L, S);
    /* The narrowest window hides the most: a row it leaves a key in (same
     * end, latest start) keeps that key under every wider window. */
    int W = 0;
    for (int h = 0; window && h < H; h++) {
        const int w = window[h];
        if (w < 0)
            return hs_fail(HS_EINVAL, "attention: window=%d (head %d) must be >= 0", w, h);
        if (w > 0 && !(mask && mask->causal))
            return hs_fail(HS_EINVAL,
                           "attention: window=%d (head %d) needs the causal mask: a sliding "
                           "window looks back from each query",
                           w, h);
        if (w > 0 && (!W || w < W))
            W = w;
    }
    const int sinks = sinks_of(mask, W);
    for (int b = 0; b < B; b++) {
        const unsigned char *vb = mask && mask->valid ? mask->valid + (size_t)b * S : NULL;
        int last = -1, s = 0, first = 0; /* last: the latest real key below s */
        while (vb && first < S && !vb[first])
            first++; /* the first real key, which the sinks may hold */
        for (int t = 0; t < L; t++) {
            int lo, hi;
            key_range(mask, W, prefix, t, S, &lo, &hi);
            for (; s < hi; s++)
                if (!vb || vb[s])
                    last = s;
            if (last < lo && !(first < sinks && first < hi))
                return hs_fail(HS_EINVAL,
                               "attention: query %d of batch row %d has every key masked "
                               "(keys %d..%d, all padding; causal prefix %d, window %d)",
                               t, b, lo, hi - 1, prefix, W);
        }
    }
    return HS_OK;
}

/* What every block of one forward shares. */
typedef struct {
    hs_real *z, *att, *scratch;
    const hs_attn_form *f;
    const hs_attn_mask *mask;
    const int *window;           /* NULL, or H windows */
    const hs_row_observer *rows; /* NULL: none */
    int prefix, B, L, S, H, G, layer;
} heads_job;

/* The scores of sc (NULL: 1/sqrt(dh), no cap). */
static hs_attn_scores scores_of(const hs_attn_scores *sc, int dh)
{
    hs_attn_scores s = sc ? *sc : (hs_attn_scores){ 0 };
    if (!(s.scale > 0))
        s.scale = 1 / sqrt((double)dh);
    return s;
}

enum { SCORES = 1, SOFTMAX = 2, MIX = 4 };

/* Every block of query rows of every (batch row, head): with SCORES, its
 * scores (the form's terms summed, soft-capped) into P (att, or a per-thread
 * block); with SOFTMAX, their softmax; with MIX, the row observer and z = P V.
 * All in one pass keep a block's scores in cache and need no maps; a pattern
 * hook needs the mix apart, an attn_scores hook the softmax too. A SCORES
 * pass without SOFTMAX leaves the scores as the attn_scores hook sees them:
 * -inf at every key the row may not see (masked, padding, outside its
 * window). */
static void run_blocks(const heads_job *j, int steps)
{
    const hs_attn_form *f = j->f;
    const int S = j->S, L = j->L, H = j->H, dv = f->dv, HV = H * dv, group = H / j->G;
    const int nqb = (L + QBLOCK - 1) / QBLOCK;
    const long ntask = (long)j->B * H * nqb;
    int macs = dv; /* per score: the terms' products and the mix */
    for (int i = 0; i < f->nterms; i++)
        macs += f->term[i].d;

#pragma omp parallel for schedule(dynamic, 1) if ((double)j->B * H * L * S * macs >= HS_PAR_MIN_MACS)
    for (long task = 0; task < ntask; task++) {
        const int b = (int)(task / ((long)H * nqb));
        const int h = (int)(task / nqb % H);
        const int t0 = (int)(task % nqb) * QBLOCK;
        const int n = min_int(QBLOCK, L - t0);
        const int kvh = h / group, W = head_window(j->window, h), sinks = sinks_of(j->mask, W);
        int smin, smax, unused;
        key_range(j->mask, W, j->prefix, t0, S, &smin, &unused);
        key_range(j->mask, W, j->prefix, t0 + n - 1, S, &unused, &smax);
        if (sinks) /* the band takes the sink keys too (and those between, masked below) */
            smin = 0;
        const int width = smax - smin; /* the block's band of keys [smin, smax) */
        const unsigned char *valid =
            j->mask && j->mask->valid ? j->mask->valid + (size_t)b * S : NULL;

        /* Column 0 of P is key k0: key 0 when the rows are kept or observed
         * (both span keys 0..), else the band's first key; rows hold keys
         * k0..end-1. */
        hs_real *P;
        int ldp, k0, end;
        if (j->att) {
            P = j->att + (((size_t)b * H + h) * L + t0) * S;
            ldp = S, k0 = 0, end = S;
        } else {
            P = j->scratch + (size_t)thread_id() * QBLOCK * S;
            k0 = j->rows ? 0 : smin;
            ldp = smax - k0, end = smax;
        }
        hs_real *band = P + (smin - k0);
        for (int i = 0; (steps & SCORES) && i < f->nterms; i++) {
            const hs_attn_term *e = &f->term[i];
            const hs_real *Q = e->q + ((size_t)b * L + t0) * e->ldq + (size_t)h * e->qh;
            const hs_real *K = e->k + b * e->kb + kvh * e->kh + smin * e->ks;
            hs_gemm(0, 1, n, width, e->d, f->scale, Q, (int)e->ldq, K, (int)e->ks, i ? 1 : 0,
                    band, ldp);
        }
        if ((steps & SCORES) && f->rel.bias) /* key s of query t0 + r: offset s - (prefix + t) */
            for (int r = 0; r < n; r++) {
                const hs_real *rel = f->rel.bias + (size_t)h * f->rel.n + f->rel.zero + smin -
                                     (j->prefix + t0 + r);
                hs_real *row = band + (size_t)r * ldp;
                for (int s = 0; s < width; s++)
                    row[s] += rel[s];
            }
        for (int r = 0; r < n; r++) {
            hs_real *row = P + (size_t)r * ldp; /* key k0 */
            int lo, hi;
            key_range(j->mask, W, j->prefix, t0 + r, S, &lo, &hi);
            /* with sinks the row sees [0, sinks) and [lo, hi): one range from 0
             * when they meet, else the keys [sinks, lo) between are hidden
             * (k0 is 0 then) */
            int gap = 0;
            if (sinks && lo <= sinks)
                lo = 0;
            else if (sinks)
                gap = sinks;
            const int first = gap ? 0 : lo; /* the first key the row sees */
            if ((steps & SCORES) && f->softcap > 0)
                softcap_row(row + (first - k0), hi - first, f->softcap);
            if ((steps & SCORES) && !(steps & SOFTMAX)) {
                for (int s = k0; s < end; s++)
                    if ((s < lo && !(s < gap)) || s >= hi || (valid && !valid[s]))
                        row[s - k0] = -INFINITY;
                continue;
            }
            if ((steps & SOFTMAX) && gap)
                softmax_sinks(row, valid, gap, lo, hi);
            else if (steps & SOFTMAX)
                hs_softmax_row(row + (lo - k0), valid ? valid + lo : NULL, hi - lo);
            /* Keys outside the row's range: exactly 0 in the map and in the
             * mix, whatever a pattern hook wrote there. */
            const int hidden = gap ? gap : k0; /* the keys [hidden, lo) are hidden */
            if (lo > hidden)
                memset(row + (hidden - k0), 0, sizeof(hs_real) * (size_t)(lo - hidden));
            if (end > hi)
                memset(row + (hi - k0), 0, sizeof(hs_real) * (size_t)(end - hi));
        }
        if (!(steps & MIX))
            continue;
        if (j->rows)
            j->rows->fn(j->rows->ctx, j->layer, thread_id(), b, h, t0, n, P, ldp, smax);
        const hs_real *V = f->v + b * f->vb + kvh * f->vh + smin * f->vs;
        hs_real *Z = j->z + ((size_t)b * L + t0) * HV + (size_t)h * dv;
        hs_gemm(0, 0, n, dv, width, 1, band, ldp, V, (int)f->vs, 0, Z, HV);
    }
}

int hs_attn_form_forward(hs_real *z, hs_real *att, const hs_attn_form *f,
                         const hs_attn_mask *mask, const int *window, int prefix, int B, int L,
                         int S, int H, int G, const hs_attn_hooks *hooks, const char *what)
{
    int rc = hs_attn_mask_check(mask, window, prefix, B, L, S, H);
    if (rc)
        return rc;
    const int layer = hooks ? hooks->layer : 0;
    const int pattern = hooks && hs_site_hooked(hooks->site, HS_SITE_PATTERN);
    const int scores = hooks && hs_site_hooked(hooks->site, HS_SITE_ATTN_SCORES);
    if ((pattern || scores) && !att)
        return hs_fail(HS_EINVAL, "%s: layer %d's %s hook needs the maps kept "
                                  "(activations with maps)",
                       what, layer, pattern ? "pattern" : "attn_scores");
    const hs_row_observer *rows = hooks && hooks->rows.fn ? &hooks->rows : NULL;
    heads_job j = { z, att, NULL, f, mask, window, rows, prefix, B, L, S, H, G, layer };
    if (!att) {
        j.scratch = hs_calloc((size_t)hs_get_threads() * QBLOCK * S, sizeof(hs_real),
                              "attention score block");
        if (!j.scratch)
            return HS_ENOMEM;
    }
    if (!pattern && !scores) {
        run_blocks(&j, SCORES | SOFTMAX | MIX);
    } else {
        hs_site_view v = { HS_SITE_ATTN_SCORES, layer, att, B, L, H, S,
                           (size_t)H * L * S, (size_t)S, (size_t)L * S };
        if (scores) {
            run_blocks(&j, SCORES);
            rc = hs_site_call(hooks->site, &v);
        }
        if (!rc)
            run_blocks(&j, scores ? SOFTMAX : SCORES | SOFTMAX);
        v.site = HS_SITE_PATTERN;
        if (!rc && pattern)
            rc = hs_site_call(hooks->site, &v);
        if (!rc)
            run_blocks(&j, MIX);
    }
    free(j.scratch);
    return rc;
}

int hs_attn_heads_forward(hs_real *z, hs_real *att, const hs_real *q, const hs_kv_view *kv,
                          const hs_attn_mask *mask, const int *window, int prefix, int B, int L,
                          int H, int G, int dh, const hs_attn_hooks *hooks)
{
    return hs_attn_heads_forward_scored(z, att, q, kv, mask, window, prefix, B, L, H, G, dh, NULL,
                                        hooks);
}

int hs_attn_heads_forward_scored(hs_real *z, hs_real *att, const hs_real *q,
                                 const hs_kv_view *kv, const hs_attn_mask *mask,
                                 const int *window, int prefix, int B, int L, int H, int G,
                                 int dh, const hs_attn_scores *sc, const hs_attn_hooks *hooks)
{
    const hs_attn_scores s = scores_of(sc, dh);
    /* one term, q . k over the head's dh, keys and values of the kv view */
    const hs_attn_form f = {
        .term = { { q, kv->k, (size_t)H * dh, (size_t)dh, kv->sb, kv->sh, kv->st, dh } },
        .nterms = 1,
        .v = kv->v, .vb = kv->sb, .vh = kv->sh, .vs = kv->st, .dv = dh,
        .scale = (hs_real)s.scale, .softcap = s.softcap, .rel = s.rel,
    };
    return hs_attn_form_forward(z, att, &f, mask, window, prefix, B, L, kv->S, H, G, hooks,
                                "attention");
}

int hs_attn_heads_backward(hs_real *dq, hs_real *dk, hs_real *dv, const hs_real *dz,
                           const hs_real *att, const hs_real *q, const hs_real *k,
                           const hs_real *v, const hs_attn_mask *mask, const int *window,
                           int B, int L, int S, int H, int G, int dh)
{
    return hs_attn_heads_backward_scored(dq, dk, dv, dz, att, q, k, v, mask, window, B, L, S, H,
                                         G, dh, NULL);
}

int hs_attn_heads_backward_scored(hs_real *dq, hs_real *dk, hs_real *dv, const hs_real *dz,
                                  const hs_real *att, const hs_real *q, const hs_real *k,
                                  const hs_real *v, const hs_attn_mask *mask, const int *window,
                                  int B, int L, int S, int H, int G, int dh,
                                  const hs_attn_scores *sc)
{
    const int HD = H * dh, GD = G * dh, group = H / G;
    const hs_attn_scores score = scores_of(sc, dh);
    const hs_real scale = (hs_real)score.scale;
    const double cap = score.softcap;
    if (mask && mask->sink)
        return hs_fail(HS_EINVAL, "attention backward: attention sinks (a KV plan's streaming "
                                  "heads) have no backward");
    int rc = hs_attn_mask_check(mask, window, 0, B, L, S, H);
    if (rc)
        return rc;
    /* per thread: dP, and with a soft-cap the block's scores besides */
    const size_t block = (size_t)QBLOCK * S, per_thread = cap > 0 ? 2 * block : block;
    hs_real *scratch = hs_calloc((size_t)hs_get_threads() * per_thread, sizeof(hs_real),
                                 "attention backward block");
    if (!scratch)
        return HS_ENOMEM;

    /* One task per (batch, kv-head): it owns dK/dV of that head and dQ of the
     * query heads reading it, so no two threads write the same gradient. Each
     * block works on its band of keys [smin, smax) only (see run_blocks): the
     * maps are 0 outside it, so nothing outside contributes. */
#pragma omp parallel for schedule(dynamic, 1) if ((double)B * H * L * S * dh >= HS_PAR_MIN_MACS)
    for (int task = 0; task < B * G; task++) {
        const int b = task / G, j = task % G;
        const size_t kv0 = (size_t)b * S * GD + (size_t)j * dh;
        hs_real *dP = scratch + (size_t)thread_id() * per_thread, *sc_blk = dP + block;
        for (int h = j * group; h < (j + 1) * group; h++) {
            const int W = head_window(window, h);
            for (int t0 = 0; t0 < L; t0 += QBLOCK) {
                const int n = min_int(QBLOCK, L - t0);
                int smin, smax, unused;
                key_range(mask, W, 0, t0, S, &smin, &unused);
                key_range(mask, W, 0, t0 + n - 1, S, &unused, &smax);
                const int w = smax - smin;
                const size_t band = kv0 + (size_t)smin * GD;
                const hs_real *P = att + (((size_t)b * H + h) * L + t0) * S + smin;
                const size_t qoff = ((size_t)b * L + t0) * HD + (size_t)h * dh;
                /* dP = dZ V^T, then dS = P * (dP - rowsum(P * dP)) in place: the
                 * gradient of the (capped) scores. */
                hs_gemm(0, 1, n, w, dh, 1, dz + qoff, HD, v + band, GD, 0, dP, w);
                if (cap > 0) /* the raw scores again, for d(cap tanh(s / cap)) / ds */
                    hs_gemm(0, 1, n, w, dh, scale, q + qoff, HD, k + band, GD, 0, sc_blk, w);
                for (int r = 0; r < n; r++) {
                    const hs_real *pr = P + (size_t)r * S;
                    hs_real *dr = dP + (size_t)r * w;
                    hs_real dot = 0;
#pragma omp simd reduction(+ : dot)
                    for (int s = 0; s < w; s++)
                        dot += pr[s] * dr[s];
                    for (int s = 0; s < w; s++)
                        dr[s] = pr[s] * (dr[s] - dot);
                    if (cap > 0) {
                        const hs_real *raw = sc_blk + (size_t)r * w;
                        for (int s = 0; s < w; s++) {
                            const double t = tanh((double)raw[s] / cap);
                            dr[s] = (hs_real)(dr[s] * (1 - t * t));
                        }
                    }
                }
                hs_gemm(0, 0, n, dh, w, scale, dP, w, k + band, GD, 1, dq + qoff, HD);
                hs_gemm(1, 0, w, dh, n, scale, dP, w, q + qoff, HD, 1, dk + band, GD);
                hs_gemm(1, 0, w, dh, n, 1, P, S, dz + qoff, HD, 1, dv + band, GD);
            }
        }
    }
    free(scratch);
    return HS_OK;
}
