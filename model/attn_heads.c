/* The per-head attention kernel: scores, masks, softmax and the value mix,
 * one block of QBLOCK query rows of one head at a time.
 *
 * Blocking keeps the scores of a block (QBLOCK x S) in cache and bounds the
 * scratch memory to one block per thread, so maps are never materialised
 * unless the caller asks for them. With a causal mask a block needs only the
 * keys up to its last query (prefix + t1), so the GEMMs skip most of the
 * masked upper triangle. */
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

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Keys visible to query t: [0, limit) filtered by valid. */
static int key_limit(const hs_attn_mask *mask, int prefix, int t, int S)
{
    return mask && mask->causal ? min_int(S, prefix + t + 1) : S;
}

int hs_attn_mask_check(const hs_attn_mask *mask, int prefix, int B, int L, int S)
{
    if (S <= 0 || L <= 0)
        return hs_fail(HS_EINVAL, "attention: empty sequence (L=%d, S=%d)", L, S);
    for (int b = 0; b < B; b++) {
        int first = 0;
        if (mask && mask->valid) {
            const unsigned char *vb = mask->valid + (size_t)b * S;
            while (first < S && !vb[first])
                first++;
        }
        /* Query 0 sees the fewest keys; if it has one, every row has one. */
        if (first >= key_limit(mask, prefix, 0, S))
            return hs_fail(HS_EINVAL,
                           "attention: query 0 of batch row %d has every key masked "
                           "(first valid key %d, causal prefix %d)",
                           b, first, prefix);
    }
    (void)L;
    return HS_OK;
}

/* What every block of one forward shares. */
typedef struct {
    hs_real *z, *att, *scratch;
    const hs_real *q;
    const hs_kv_view *kv;
    const hs_attn_mask *mask;
    const hs_row_observer *rows; /* NULL: none */
    int prefix, B, L, H, G, dh, layer;
} heads_job;

enum { SCORES = 1, MIX = 2 };

/* Every block of query rows of every (batch row, head): with SCORES, its
 * scores and softmax into P (att, or a per-thread block); with MIX, the row
 * observer and z = P V. Both in one pass keep a block's scores in cache and
 * need no maps; a pattern hook needs the two apart. */
static void run_blocks(const heads_job *j, int steps)
{
    const int S = j->kv->S, L = j->L, H = j->H, dh = j->dh, HD = H * dh, group = H / j->G;
    const int causal = j->mask && j->mask->causal;
    const hs_real scale = (hs_real)1 / sqrt((hs_real)dh);
    const int nqb = (L + QBLOCK - 1) / QBLOCK;
    const long ntask = (long)j->B * H * nqb;
    const hs_kv_view *kv = j->kv;

#pragma omp parallel for schedule(dynamic, 1)
    for (long task = 0; task < ntask; task++) {
        const int b = (int)(task / ((long)H * nqb));
        const int h = (int)(task / nqb % H);
        const int t0 = (int)(task % nqb) * QBLOCK;
        const int n = min_int(QBLOCK, L - t0);
        const int kvh = h / group;
        const int smax = causal ? min_int(S, j->prefix + t0 + n) : S;
        const hs_real *Q = j->q + ((size_t)b * L + t0) * HD + (size_t)h * dh;
        const hs_real *K = kv->k + b * kv->sb + kvh * kv->sh;
        const hs_real *V = kv->v + b * kv->sb + kvh * kv->sh;
        const unsigned char *valid =
            j->mask && j->mask->valid ? j->mask->valid + (size_t)b * S : NULL;

        hs_real *P;
        int ldp;
        if (j->att) {
            P = j->att + (((size_t)b * H + h) * L + t0) * S;
            ldp = S;
        } else {
            P = j->scratch + (size_t)thread_id() * QBLOCK * S;
            ldp = smax;
        }
        if (steps & SCORES) {
            hs_gemm(0, 1, n, smax, dh, scale, Q, HD, K, (int)kv->st, 0, P, ldp);
            for (int r = 0; r < n; r++) {
                hs_real *row = P + (size_t)r * ldp;
                int lim = key_limit(j->mask, j->prefix, t0 + r, S);
                hs_softmax_row(row, valid, lim);
                /* Keys after the causal limit: exactly 0 in the map and in the mix. */
                int end = j->att ? S : smax;
                if (end > lim)
                    memset(row + lim, 0, sizeof(hs_real) * (size_t)(end - lim));
            }
        } else {
            /* After a pattern hook: keys past the causal limit stay 0 whatever
             * the hook wrote, so the block's mix below sees only visible keys. */
            for (int r = 0; r < n; r++) {
                int lim = key_limit(j->mask, j->prefix, t0 + r, S);
                if (S > lim)
                    memset(P + (size_t)r * ldp + lim, 0, sizeof(hs_real) * (size_t)(S - lim));
            }
        }
        if (!(steps & MIX))
            continue;
        if (j->rows)
            j->rows->fn(j->rows->ctx, j->layer, thread_id(), b, h, t0, n, P, ldp, smax);
        hs_real *Z = j->z + ((size_t)b * L + t0) * HD + (size_t)h * dh;
        hs_gemm(0, 0, n, dh, smax, 1, P, ldp, V, (int)kv->st, 0, Z, HD);
    }
}

int hs_attn_heads_forward(hs_real *z, hs_real *att, const hs_real *q, const hs_kv_view *kv,
                          const hs_attn_mask *mask, int prefix, int B, int L, int H, int G,
                          int dh, const hs_attn_hooks *hooks)
{
    const int S = kv->S;
    int rc = hs_attn_mask_check(mask, prefix, B, L, S);
    if (rc)
        return rc;
    const int layer = hooks ? hooks->layer : 0;
    const int pattern = hooks && hs_site_hooked(hooks->site, HS_SITE_PATTERN);
    if (pattern && !att)
        return hs_fail(HS_EINVAL, "attention: layer %d's pattern hook needs the maps kept "
                                  "(activations with maps)",
                       layer);
    heads_job j = { z, att, NULL, q, kv, mask, hooks && hooks->rows.fn ? &hooks->rows : NULL,
                    prefix, B, L, H, G, dh, layer };
    if (!att) {
        j.scratch = hs_calloc((size_t)hs_get_threads() * QBLOCK * S, sizeof(hs_real),
                              "attention score block");
        if (!j.scratch)
            return HS_ENOMEM;
    }
    if (!pattern) {
        run_blocks(&j, SCORES | MIX);
    } else {
        run_blocks(&j, SCORES);
        const hs_site_view v = { HS_SITE_PATTERN, layer, att, B, L, H, S,
                                 (size_t)H * L * S, (size_t)S, (size_t)L * S };
        rc = hs_site_call(hooks->site, &v);
        if (!rc)
            run_blocks(&j, MIX);
    }
    free(j.scratch);
    return rc;
}

int hs_attn_heads_backward(hs_real *dq, hs_real *dk, hs_real *dv, const hs_real *dz,
                           const hs_real *att, const hs_real *q, const hs_real *k,
                           const hs_real *v, const hs_attn_mask *mask, int B, int L, int S,
                           int H, int G, int dh)
{
    const int HD = H * dh, GD = G * dh, group = H / G;
    const int causal = mask && mask->causal;
    const hs_real scale = (hs_real)1 / sqrt((hs_real)dh);
    hs_real *scratch = hs_calloc((size_t)hs_get_threads() * QBLOCK * S, sizeof(hs_real),
                                 "attention backward block");
    if (!scratch)
        return HS_ENOMEM;

    /* One task per (batch, kv-head): it owns dK/dV of that head and dQ of the
     * query heads reading it, so no two threads write the same gradient. */
#pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < B * G; task++) {
        const int b = task / G, j = task % G;
        const hs_real *K = k + (size_t)b * S * GD + (size_t)j * dh;
        const hs_real *V = v + (size_t)b * S * GD + (size_t)j * dh;
        hs_real *dK = dk + (size_t)b * S * GD + (size_t)j * dh;
        hs_real *dV = dv + (size_t)b * S * GD + (size_t)j * dh;
        hs_real *dP = scratch + (size_t)thread_id() * QBLOCK * S;
        for (int h = j * group; h < (j + 1) * group; h++) {
            for (int t0 = 0; t0 < L; t0 += QBLOCK) {
                const int n = min_int(QBLOCK, L - t0);
                const int smax = causal ? min_int(S, t0 + n) : S;
                const hs_real *P = att + (((size_t)b * H + h) * L + t0) * S;
                const size_t qoff = ((size_t)b * L + t0) * HD + (size_t)h * dh;
                /* dP = dZ V^T, then dS = P * (dP - rowsum(P * dP)) in place. */
                hs_gemm(0, 1, n, smax, dh, 1, dz + qoff, HD, V, GD, 0, dP, smax);
                for (int r = 0; r < n; r++) {
                    const hs_real *pr = P + (size_t)r * S;
                    hs_real *dr = dP + (size_t)r * smax;
                    hs_real dot = 0;
#pragma omp simd reduction(+ : dot)
                    for (int s = 0; s < smax; s++)
                        dot += pr[s] * dr[s];
                    for (int s = 0; s < smax; s++)
                        dr[s] = pr[s] * (dr[s] - dot);
                }
                hs_gemm(0, 0, n, dh, smax, scale, dP, smax, K, GD, 1, dq + qoff, HD);
                hs_gemm(1, 0, smax, dh, n, scale, dP, smax, q + qoff, HD, 1, dK, GD);
                hs_gemm(1, 0, smax, dh, n, 1, P, S, dz + qoff, HD, 1, dV, GD);
            }
        }
    }
    free(scratch);
    return HS_OK;
}
