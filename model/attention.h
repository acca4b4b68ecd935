/* Grouped-query attention: one module for MHA (G = H), GQA and MQA (G = 1).
 *
 * Dimension names used in every shape comment:
 *   B batch, L queries, S keys (cached + new), d model width, H query heads,
 *   G key/value heads, dh head width (d / H unless set: pruned models keep
 *   dh while losing heads), HD = H*dh, GD = G*dh.
 * Query head h reads key/value head h / (H/G) (SPEC §3); K/V are never
 * repeated across a group, neither in the cache nor in a temporary.
 *
 * The forward is split at the head outputs z so that callers (capture,
 * ablation) can observe or replace them before the output projection, and
 * calls the hook sites q, k, v, pattern and z (hooks.h) on the way:
 *   q,k,v = projections of x (and y for cross-attention), q and k rotated
 *           per head when rope_theta > 0 (Hugging Face rotate-half RoPE)
 *   att   = softmax(q k^T / sqrt(dh) + mask)          (B,H,L,S)
 *   z     = att v                                       (B,L,H,dh)
 *   out   = (xi[h] * z_h concatenated) W_o^T + b_o      (B,L,d)
 */
#ifndef HS_ATTENTION_H
#define HS_ATTENTION_H

#include <stddef.h>

#include "common.h"
#include "hooks.h"

/* How RoPE's inverse frequencies are scaled (Hugging Face rope_type). */
typedef enum { HS_ROPE_DEFAULT, HS_ROPE_LINEAR, HS_ROPE_LLAMA3 } hs_rope_kind;

typedef struct {
    hs_rope_kind kind;
    double factor;           /* linear, llama3: wavelengths stretched by this */
    double low_freq_factor;  /* llama3 */
    double high_freq_factor; /* llama3 */
    double original_max_position_embeddings; /* llama3: the pre-training context */
} hs_rope_scaling;

typedef struct {
    int d_model;       /* d */
    int n_heads;       /* H */
    int n_kv_heads;    /* G; divides H */
    int bias;          /* 1: every projection has a bias (GPT-2) */
    int qkv_bias;      /* 1: q, k and v have biases, o has one only with bias (Qwen2) */
    int head_dim;      /* dh; 0 means d / H, and then H must divide d */
    double rope_theta; /* > 0: rotary positions with this base; 0: none */
    int window;        /* 0: global; W > 0: query t sees key s only when t - W < s
                          (with the causal rule s <= t: a sliding window, SPEC §10) */
    int rotary_dims;   /* with rope_theta > 0: dims 0..rotary_dims-1 of each head rotate
                          (GPT-NeoX's partial rotary), the rest pass; 0 means dh */
    hs_rope_scaling rope_scaling; /* zero: plain RoPE */
} hs_attn_config;

/* HS_OK, or HS_EINVAL naming the offending size. */
int hs_attn_config_check(const hs_attn_config *c);

/* dh of a checked configuration. */
int hs_attn_head_dim(const hs_attn_config *c);

/* Rotated dims per head: rotary_dims, or dh when 0 (no rotation at all
 * without rope_theta > 0). */
int hs_attn_rotary_dims(const hs_attn_config *c);

/* The inverse frequency of rotary pair i (dims i and i + R/2 of a head, R
 * = hs_attn_rotary_dims): theta^(-2i/R), scaled as Hugging Face's
 * rope_type computes it (linear: / factor; llama3: long wavelengths /
 * factor, short ones kept, a smooth blend between). Pair i of the head at
 * position p turns by p times this. */
double hs_rope_inv_freq(const hs_attn_config *c, int i);

/* Projection parameters: 2 d HD + 2 d GD (= 2 d^2 + 2 d G dh when HD = d),
 * plus HD + 2 GD + d with biases (HD + 2 GD with qkv_bias alone). */
size_t hs_attn_param_count(const hs_attn_config *c);

/* Weights in nn.Linear layout (out, in). Biases are NULL when bias == 0
 * (b_q, b_k, b_v are present with qkv_bias too). */
typedef struct {
    hs_real *w_q; /* (HD, d)  */
    hs_real *w_k; /* (GD, d)  */
    hs_real *w_v; /* (GD, d)  */
    hs_real *w_o; /* (d, HD)  */
    hs_real *b_q; /* (HD)     */
    hs_real *b_k; /* (GD)     */
    hs_real *b_v; /* (GD)     */
    hs_real *b_o; /* (d)      */
} hs_attn_weights;

/* Points w at consecutive slices of mem (hs_attn_param_count elements) in the
 * order w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o. */
void hs_attn_weights_bind(hs_attn_weights *w, const hs_attn_config *c, hs_real *mem);

/* Which keys a query may see. */
typedef struct {
    int causal;                 /* query t sees key s iff s <= prefix + t */
    const unsigned char *valid; /* (B, S) 1 = real key, 0 = padding; NULL = all real.
                                   Spans the cached keys followed by the new ones. */
} hs_attn_mask;

/* Compact KV cache for incremental decoding: only the G key/value heads. */
typedef struct {
    int B, G, dh;
    int cap; /* positions allocated */
    int len; /* positions filled */
    hs_real *k; /* (B, G, cap, dh) */
    hs_real *v; /* (B, G, cap, dh) */
} hs_kv_cache;

int hs_kv_cache_init(hs_kv_cache *cache, int B, int G, int dh, int cap);
void hs_kv_cache_free(hs_kv_cache *cache);

/* Sees rows of post-softmax maps as the kernel makes them, one block of
 * query rows of one head at a time: P (n rows, ldp apart) are the maps of
 * queries t0..t0+n-1 of head h in batch row b over keys 0..keys-1 (later keys
 * are masked: 0). Called from several threads at once; `thread` (below
 * hs_get_threads()) lets the callee keep per-thread sums. Lets statistics run
 * over long contexts without a T x T buffer. */
typedef struct {
    void (*fn)(void *ctx, int layer, int thread, int b, int h, int t0, int n, const hs_real *P,
               int ldp, int keys);
    void *ctx;
} hs_row_observer;

/* What one layer's attention calls during its forward: the row observer
 * (after any pattern hook, so it sees the maps z is made of) and the site
 * hooks q, k, v, pattern and z of `site` (NULL: none), as layer `layer`. */
typedef struct {
    hs_row_observer rows;
    const hs_site_hook *site; /* NULL, or HS_N_SITES hooks (the others are not called here) */
    int layer;
} hs_attn_hooks;

/* Activations of one forward, kept for the backward and for observers.
 * Allocate with hs_attn_acts_alloc; att is allocated only when asked for. */
typedef struct {
    int B, L, S_new;
    hs_real *q;   /* (B, L, HD)        after RoPE when rotary */
    hs_real *k;   /* (B, S_new, GD)    new keys, after projection (and RoPE) */
    hs_real *v;   /* (B, S_new, GD)    */
    hs_real *z;   /* (B, L, HD)        head outputs before the gates */
    hs_real *att; /* (B, H, L, S) or NULL: per-head maps; the backward needs them */
    int S;        /* keys the maps span: S_new, or cache length + S_new with a cache */
    hs_attn_hooks hooks;  /* optional: observers and hook sites of the forward */
    /* Scratch kept between calls, so repeated steps do not map and unmap
     * large buffers (with several threads every unmap is a TLB shootdown). */
    hs_real *zg;     /* (B, L, HD)     gated head outputs */
    hs_real *dz;     /* (B, L, HD)     backward only (allocated with att) */
    hs_real *dq;     /* (B, L, HD)     backward only */
    hs_real *dk;     /* (B, S_new, GD) backward only */
    hs_real *dv;     /* (B, S_new, GD) backward only */
} hs_attn_acts;

/* S_att: keys the maps span (S_new without a cache, cache length + L with
 * one); want_att = 0 leaves att and the backward scratch NULL, and the
 * forward then keeps only a per-thread block of scores. */
int hs_attn_acts_alloc(hs_attn_acts *a, const hs_attn_config *c, int B, int L, int S_new,
                       int S_att, int want_att);
void hs_attn_acts_free(hs_attn_acts *a);

/* Forward. x (B,L,d) queries; y (B,S_new,d) keys/values for cross-attention
 * or NULL for self-attention (S_new = L); xi (H) head gates or NULL for all 1;
 * cache NULL, or a cache (self-attention, causal only) that the new keys are
 * appended to before attending over all of it. out (B,L,d).
 * Fails with HS_EINVAL on a query row whose every key is masked. */
int hs_attn_forward(hs_real *out, hs_attn_acts *a, const hs_attn_weights *w,
                    const hs_attn_config *c, const hs_real *x, const hs_real *y,
                    const hs_real *xi, const hs_attn_mask *mask, hs_kv_cache *cache);

/* Gates: xi (H) shared by every sequence, or with xi_per_seq (B, H) one
 * set per sequence (per-sequence gradients in one backward: sequence b's
 * loss depends only on its own gates). dxi has xi's shape.
 *
 * hs_attn_forward in its two halves, for callers that observe or replace the
 * head outputs between them: _heads runs the projections (RoPE, cache) and
 * the per-head kernel into a->z and a->att, calling a->hooks' sites q, k, v
 * (before the cache), pattern and z; _output applies the gates and W_o to
 * a->z. */
int hs_attn_forward_heads(hs_attn_acts *a, const hs_attn_weights *w, const hs_attn_config *c,
                          const hs_real *x, const hs_real *y, const hs_attn_mask *mask,
                          hs_kv_cache *cache);
void hs_attn_forward_output(hs_real *out, hs_attn_acts *a, const hs_attn_weights *w,
                            const hs_attn_config *c, const hs_real *xi, int xi_per_seq);

/* Backward of a cache-free forward whose acts hold att (and its backward
 * scratch, which this call overwrites). Accumulates (+=)
 * into dx (B,L,d), dy (B,S,d) (cross-attention; NULL for self-attention,
 * whose key/value gradient goes to dx), the weight gradients dw (same layout
 * as w; NULL members are skipped) and dxi (H) (NULL to skip). */
int hs_attn_backward(hs_real *dx, hs_real *dy, hs_attn_weights *dw, hs_real *dxi,
                     const hs_real *dout, const hs_attn_acts *a, const hs_attn_weights *w,
                     const hs_attn_config *c, const hs_real *x, const hs_real *y,
                     const hs_real *xi, int xi_per_seq, const hs_attn_mask *mask);

/* ---- The head-level kernel, for callers that hold q, k, v themselves ---- */

/* HS_OK when every query row has at least one key it may see; otherwise
 * HS_EINVAL naming the first fully masked row (the seed's rule: such a row
 * has no softmax). valid is (B,S). */
int hs_attn_mask_check(const hs_attn_mask *mask, int prefix, int B, int L, int S);

/* Where key/value rows live: row s of kv-head j in batch b starts at
 * k + b*sb + j*sh + s*st (same strides for v). Covers both the projection
 * layout (B,S,GD) and the cache layout (B,G,cap,dh). */
typedef struct {
    const hs_real *k, *v;
    size_t sb, sh, st;
    int S;
} hs_kv_view;

/* z (B,L,H*dh) and, when att != NULL, att (B,H,L,S) from q (B,L,H*dh).
 * prefix is the number of cached keys before the first query's own key.
 * hooks (NULL: none) gives the row observer and the pattern hook. Without a
 * pattern hook each block of query rows goes from scores to z in one pass
 * and the maps need not be kept; with one (att required) every map is made
 * first, the hook runs on all of them, and z is mixed from what it left. */
int hs_attn_heads_forward(hs_real *z, hs_real *att, const hs_real *q, const hs_kv_view *kv,
                          const hs_attn_mask *mask, int prefix, int B, int L, int H, int G,
                          int dh, const hs_attn_hooks *hooks);

/* Backward of hs_attn_heads_forward for prefix 0 and the projection layout:
 * accumulates dq (B,L,H*dh), dk and dv (B,S,G*dh) from dz (B,L,H*dh) and att.
 * Parallel over (batch, kv-head), so heads sharing K/V never race. */
int hs_attn_heads_backward(hs_real *dq, hs_real *dk, hs_real *dv, const hs_real *dz,
                           const hs_real *att, const hs_real *q, const hs_real *k,
                           const hs_real *v, const hs_attn_mask *mask, int B, int L, int S,
                           int H, int G, int dh);

#endif
