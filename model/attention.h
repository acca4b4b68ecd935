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
 *   q,k,v = projections of x (and y for cross-attention); q and k
 *           RMS-normed (qk_norm: per head, or over the whole projection),
 *           then rotated per head when rope_theta > 0 (rotate-half RoPE)
 *   s     = scale q k^T, scale = 1/sqrt(dh) unless set; soft-capped
 *           softcap tanh(s / softcap) when softcap > 0
 *   att   = softmax(s + mask)                           (B,H,L,S)
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

/* RMSNorm of the queries and keys before RoPE: none, per head (weight dh,
 * shared by every head: Qwen3, Gemma 3) or over each position's whole
 * projection (weights HD and GD: OLMo-2). */
typedef enum { HS_QK_NORM_NONE, HS_QK_NORM_HEAD, HS_QK_NORM_PROJ } hs_qk_norm_kind;

/* A bias added to the scores by relative position (T5's buckets, resolved):
 * query t at position prefix + t and key s get bias[h n + zero + s - (prefix
 * + t)] for query head h, after the scale and before any soft-cap and the
 * mask. The caller's table spans every pair the forward sees. Forward only
 * (the backward's gradients of q, k and v are unchanged by it; the bias's own
 * gradient is not computed). */
typedef struct {
    const hs_real *bias; /* (H, n) */
    int n, zero;
} hs_attn_rel;

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
    const int *head_window; /* NULL: every head uses window; else n_heads windows,
                               one per query head (0 = global), replacing window */
    int sink;          /* > 0: a head with a window also sees keys s < sink (attention
                          sinks: a KV plan's streaming heads, SPEC §18); forward only */
    double scale;      /* > 0: the scores' scale; 0 means 1/sqrt(dh) */
    double softcap;    /* > 0: scores soft-capped softcap tanh(s / softcap) before the
                          mask (Gemma 2's attn_logit_softcapping); 0: none */
    hs_qk_norm_kind qk_norm;
    double qk_norm_eps;  /* the q/k norms' epsilon */
    int qk_norm_offset;  /* 1: the q/k norms scale by (1 + w) (Gemma 3) */
    hs_attn_rel rel;     /* a relative position bias (T5); rel.bias NULL: none */
} hs_attn_config;

/* Sliding windows. Query t sits at position prefix + t (prefix: the cached
 * keys before it); with window W > 0 it sees key s only when
 * prefix + t - W < s <= prefix + t, on top of the padding mask: itself and the
 * W - 1 keys before it. Blocks of keys wholly outside a block of queries'
 * windows are never computed, in the forward and the backward: O(L W) work
 * instead of O(L S). Maps hold exactly 0 outside the window. A window needs
 * the causal mask (HS_EINVAL naming `window` otherwise, so cross-attention
 * has none): a window is a look-back, and no family defines a two-sided one.
 * With a KV cache the keys before the window stay in the cache, unread. */

/* HS_OK, or HS_EINVAL naming the offending size (or a negative window). */
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

/* The scores' scale: scale, or 1/sqrt(dh) when 0. */
double hs_attn_scale(const hs_attn_config *c);

/* Projection parameters: 2 d HD + 2 d GD (= 2 d^2 + 2 d G dh when HD = d),
 * plus HD + 2 GD + d with biases (HD + 2 GD with qkv_bias alone), plus the
 * q/k norms' weights (2 dh per head, or HD + GD over the projection). */
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
    hs_real *q_norm; /* (dh) per head, (HD) over the projection; NULL without qk_norm */
    hs_real *k_norm; /* (dh) per head, (GD) over the projection */
} hs_attn_weights;

/* Points w at consecutive slices of mem (hs_attn_param_count elements) in the
 * order w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, q_norm, k_norm. */
void hs_attn_weights_bind(hs_attn_weights *w, const hs_attn_config *c, hs_real *mem);

/* Which keys a query may see, besides the configuration's windows (above). */
typedef struct {
    int causal;                 /* query t sees key s iff s <= prefix + t */
    const unsigned char *valid; /* (B, S) 1 = real key, 0 = padding; NULL = all real.
                                   Spans the cached keys followed by the new ones. */
    int sink;                   /* > 0: a head with a window W also sees keys s < sink:
                                   query t sees s < sink or t - W < s <= t (SPEC §18's
                                   streaming heads); the forward kernel only */
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

/* 1 when cache is as hs_kv_cache_init made it and appends kept it: sizes
 * positive, 0 <= len <= cap, both buffers held. The attention asserts it
 * at entry in debug builds (the positions it writes at trust len). */
int hs_kv_cache_sane(const hs_kv_cache *cache);

/* Sees rows of post-softmax maps as the kernel makes them, one block of
 * query rows of one head at a time: P (n rows, ldp apart) are the maps of
 * queries t0..t0+n-1 of head h in batch row b over keys 0..keys-1 (later keys
 * are masked: 0; so are keys before a sliding window, which an observed
 * windowed forward zero-fills: O(L S) stores, as the observer reads them).
 * Called from several threads at once; `thread` (below hs_get_threads())
 * lets the callee keep per-thread sums. Lets statistics run over long
 * contexts without a T x T buffer. */
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

/* What one layer's attention backward reports (hs_backward_from): the
 * gradients of its sites q, k, v, z, pattern and attn_scores (site NULL, or HS_N_SITES
 * observers each NULL or called with layer `layer`) and, with path set, the
 * gradient with respect to the attention's input x through each path alone
 * -- the queries of query head h (HS_RECV_Q), the keys or the values of
 * key/value head g (HS_RECV_K, HS_RECV_V) -- dx (B,L,d), whose sum over the
 * paths is the input's gradient. Paths need self-attention and q/k norms per
 * head or none (a norm over the whole projection mixes the heads). */
typedef struct {
    const hs_grad_fn *site;
    void *ctx;
    int layer;
    int (*path)(void *ctx, hs_recv_kind kind, int head, const hs_real *dx);
    void *path_ctx;
} hs_attn_grad_hooks;

/* Activations of one forward, kept for the backward and for observers.
 * Allocate with hs_attn_acts_alloc; att is allocated only when asked for. */
typedef struct {
    int B, L, S_new;
    hs_real *q;   /* (B, L, HD)        after the q norm and RoPE */
    hs_real *k;   /* (B, S_new, GD)    new keys, after projection (norm, RoPE) */
    hs_real *q_raw; /* (B, L, HD)      qk_norm: q before its norm; the backward needs it */
    hs_real *k_raw; /* (B, S_new, GD)  qk_norm: k before its norm */
    hs_real *v;   /* (B, S_new, GD)    */
    hs_real *z;   /* (B, L, HD)        head outputs before the gates */
    hs_real *att; /* (B, H, L, S) or NULL: per-head maps; the backward needs them */
    int S;        /* keys the maps span: S_new, or cache length + S_new with a cache */
    hs_attn_hooks hooks;  /* optional: observers and hook sites of the forward */
    hs_attn_grad_hooks grad; /* optional: what the backward reports */
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

/* The projections of attention for B rows of L queries (x) and S keys and
 * values (kv_in: x for self-attention): q (B,L,HD), k and v (B,S,GD), q and
 * k normed (qk_norm) and rotated (rope_theta > 0) at positions pos0 + t.
 * q_raw and k_raw (NULL: not kept; then the norms run in place) get the
 * projections before the norms, for the backward. Every attention path --
 * the forward, its cached decoding, the decoder's ring cache -- projects
 * through this one function. */
void hs_attn_project(hs_real *q, hs_real *k, hs_real *v, hs_real *q_raw, hs_real *k_raw,
                     const hs_attn_weights *w, const hs_attn_config *c, const hs_real *x,
                     const hs_real *kv_in, int B, int L, int S, int pos0);

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

/* HS_OK when every query row of every head has at least one key it may see;
 * otherwise HS_EINVAL naming the first fully masked row (the seed's rule: such
 * a row has no softmax). window: NULL (every head global) or H windows, one
 * per query head, 0 = global. A window cannot empty a row by itself (a query
 * sees its own key), but padding can: the W keys up to query t all padding.
 * Also HS_EINVAL for a window without the causal mask or a negative one.
 * valid is (B,S). */
int hs_attn_mask_check(const hs_attn_mask *mask, const int *window, int prefix, int B, int L,
                       int S, int H);

/* Where key/value rows live: row s of kv-head j in batch b starts at
 * k + b*sb + j*sh + s*st (same strides for v). Covers both the projection
 * layout (B,S,GD) and the cache layout (B,G,cap,dh). */
typedef struct {
    const hs_real *k, *v;
    size_t sb, sh, st;
    int S;
} hs_kv_view;

/* How a head's scores are formed: s = scale q . k (scale 0: 1/sqrt(dh)),
 * then, with softcap > 0, softcap tanh(s / softcap), before the mask and the
 * softmax. */
typedef struct {
    double scale, softcap;
    hs_attn_rel rel; /* bias NULL: none */
} hs_attn_scores;

/* The scores of configuration c. */
hs_attn_scores hs_attn_config_scores(const hs_attn_config *c);

/* One product of a block's scores: query row t of head h in batch row b at
 * q + (b L + t) ldq + h qh, key row s of kv-head j at k + b kb + j kh + s ks
 * (kh 0: one key row shared by every head), d wide. */
typedef struct {
    const hs_real *q, *k;
    size_t ldq, qh, kb, kh, ks;
    int d;
} hs_attn_term;

/* How the staged kernel forms a block's scores and mixes its values, as
 * data: scores = scale * the sum of the terms' q . k (standard attention:
 * one term over dh; MLA: q_nope . k_nope of the head plus q_pe . k_pe shared
 * by every head), soft-capped when softcap > 0; the mix z = P v with value
 * row s of kv-head j at v + j vh + b vb + s vs, dv wide; z is (B, L, H dv). */
typedef struct {
    hs_attn_term term[2];
    int nterms;
    const hs_real *v;
    size_t vb, vh, vs;
    int dv;
    hs_real scale;
    double softcap;
    hs_attn_rel rel; /* bias NULL: none */
} hs_attn_form;

/* The staged block driver under both kinds of attention: z and, when att !=
 * NULL, the maps (B,H,L,S) from the form f, with masks, windows, prefix and
 * hooks (pattern, attn_scores, row observers) as hs_attn_heads_forward's.
 * `what` names the kernel in its errors. */
int hs_attn_form_forward(hs_real *z, hs_real *att, const hs_attn_form *f,
                         const hs_attn_mask *mask, const int *window, int prefix, int B, int L,
                         int S, int H, int G, const hs_attn_hooks *hooks, const char *what);

/* z (B,L,H*dh) and, when att != NULL, att (B,H,L,S) from q (B,L,H*dh).
 * prefix is the number of cached keys before the first query's own key;
 * window NULL or H windows (hs_attn_mask_check). Every entry of att that the
 * mask or a window hides is written 0 (with a window that is O(L S) stores,
 * while the scores and the mix stay O(L W)).
 * hooks (NULL: none) gives the row observer and the pattern hook. Without a
 * pattern hook each block of query rows goes from scores to z in one pass
 * and the maps need not be kept; with one (att required) every map is made
 * first, the hook runs on all of them, and z is mixed from what it left. */
int hs_attn_heads_forward(hs_real *z, hs_real *att, const hs_real *q, const hs_kv_view *kv,
                          const hs_attn_mask *mask, const int *window, int prefix, int B, int L,
                          int H, int G, int dh, const hs_attn_hooks *hooks);

/* hs_attn_heads_forward with the scores of sc (NULL: the plain ones,
 * 1/sqrt(dh) without a cap, which is what hs_attn_heads_forward uses). */
int hs_attn_heads_forward_scored(hs_real *z, hs_real *att, const hs_real *q,
                                 const hs_kv_view *kv, const hs_attn_mask *mask,
                                 const int *window, int prefix, int B, int L, int H, int G,
                                 int dh, const hs_attn_scores *sc, const hs_attn_hooks *hooks);

/* Backward of hs_attn_heads_forward for prefix 0 and the projection layout:
 * accumulates dq (B,L,H*dh), dk and dv (B,S,G*dh) from dz (B,L,H*dh) and att.
 * Reads att only inside each block's causal window (O(L W) with a window);
 * with a soft-cap it recomputes the block's scores for tanh's derivative.
 * Parallel over (batch, kv-head), so heads sharing K/V never race. */
int hs_attn_heads_backward(hs_real *dq, hs_real *dk, hs_real *dv, const hs_real *dz,
                           const hs_real *att, const hs_real *q, const hs_real *k,
                           const hs_real *v, const hs_attn_mask *mask, const int *window,
                           int B, int L, int S, int H, int G, int dh);

/* hs_attn_heads_backward of hs_attn_heads_forward_scored's scores sc. */
int hs_attn_heads_backward_scored(hs_real *dq, hs_real *dk, hs_real *dv, const hs_real *dz,
                                  const hs_real *att, const hs_real *q, const hs_real *k,
                                  const hs_real *v, const hs_attn_mask *mask, const int *window,
                                  int B, int L, int S, int H, int G, int dh,
                                  const hs_attn_scores *sc);

/* ---- Heads that read inputs of their own, maps of patched heads ---------- */

/* Head `head`'s queries (which HS_RECV_Q) or key/value head `head`'s keys
 * (HS_RECV_K) or values (HS_RECV_V) from x (B,L,d) alone, at positions pos0
 * + t: out (B,L,dh) = the head's rows of the projection (and bias), normed
 * (q/k norms per head) and rotated as hs_attn_project does. HS_EINVAL for q/k
 * norms over the whole projection, which no head's rows compute alone. For
 * forwards in which each head reads an input of its own (the faithfulness run
 * of SPEC §15). */
int hs_attn_project_head(hs_real *out, const hs_attn_weights *w, const hs_attn_config *c,
                         hs_recv_kind which, int head, const hs_real *x, int B, int L, int pos0);

/* The observer of site s in g (if any) on the gradient x (B, T, heads, w),
 * contiguous. */
int hs_attn_grad_site(const hs_attn_grad_hooks *g, hs_site s, const hs_real *x, int B, int T,
                      int heads, int w);

/* The map sites' gradients to their observers (g->site): dA (B,H,L,S), the
 * pattern's (0 where a key is masked), to the pattern's; then, overwritten
 * in place with the softmax's backward dS = A (dA - sum_s A dA) row by row
 * at the pattern A (B,H,L,S), the scores' (the softmax's input, so 0 where
 * a key is masked) to attn_scores'. HS_OK when neither is observed. */
int hs_attn_map_grads(const hs_attn_grad_hooks *g, hs_real *dA, const hs_real *A, int B, int L,
                      int H, int S);

/* 1 when the backward reports a map site's gradient (pattern or
 * attn_scores): the caller forms dA only then. */
int hs_attn_map_grads_wanted(const hs_attn_grad_hooks *g);

/* The causal maps of query head h over the queries q (B,L,dh, contiguous)
 * and key/value view kv (prefix 0), with c's scores and head h's window:
 * att (B,L,S). For maps of patched queries or keys (AtP*'s QK fix). */
int hs_attn_head_maps(hs_real *att, const hs_real *q, const hs_kv_view *kv,
                      const hs_attn_config *c, int h, int B, int L);

/* The windows of c's query heads (H of them) into *win, or NULL when every
 * head is global; *owned is what the caller frees (NULL when none was made). */
int hs_attn_windows(const int **win, int **owned, const hs_attn_config *c);

#endif
