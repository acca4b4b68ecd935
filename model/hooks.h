/* Hook sites of the forward pass: the activations an analysis may read or
 * overwrite while the forward runs (SPEC §5, §11). The model only calls the
 * hooks; capture/ says what they do (interventions as data, the activation
 * cache, the map recorder).
 *
 * Shapes (B batch, T positions, d width, H query heads, G key/value heads,
 * dh head width, S keys):
 *
 *   resid_pre (B,T,d)    residual stream entering layer l; layer n_layer:
 *                        after the last layer, before the final norm
 *   attn_out  (B,T,d)    attention output (W_o and its bias applied, then the
 *                        output norm of out_norm models), before it is added
 *                        to the residual: what the attention adds
 *   mlp_out   (B,T,d)    MLP output (after an output norm), before it is added
 *                        to the residual
 *   q         (B,T,H,dh) queries after the q norm and RoPE: the scores use
 *                        exactly what the hook leaves, so a patched q is a
 *                        patched score input
 *   k, v      (B,T,G,dh) the new keys (after the k norm and RoPE) and values, before they
 *                        enter the KV cache; G heads, shared by H/G query heads
 *   z         (B,T,H,dh) head outputs before the gates and W_o
 *   pattern   (B,H,T,S)  post-softmax maps; z is then computed from what the
 *                        hook leaves (z = pattern v). Needs activations that
 *                        keep maps; keys past the causal limit are reset to 0
 *                        after the hook.
 *   attn_scores (B,H,T,S) the scores before the softmax: scaled q k^T, after
 *                        the soft-cap; -inf at every key a query may not see
 *                        (after it, outside its window, padding). The softmax
 *                        reads what the hook leaves at the visible keys; the
 *                        others stay masked. Needs activations that keep maps.
 *                        Hooking it (or pattern) splits the attention kernel's
 *                        one pass into scores, softmax and mix.
 *
 * A hook is forward-only: the backward does not see what it changed.
 *
 * The backward from a gradient of the logits (hs_backward_from) reports, at
 * the same sites, the gradient of its objective with respect to each site's
 * tensor (gradient observers, in the layout of the forward's view), and the
 * gradient with respect to the input of each receiver of the circuit graph
 * (SPEC §15): the residual stream as one query head, one key/value head's
 * keys or values, an MLP or the final norm reads it, before its input norm.
 * MLA layers have no per-head key/value tensor: their k and v gradient
 * sites are the normalised latent (B,T,1,C) as the keys (through W^UK) and
 * the values (through W^UV) read it, the shared rope key left out; their
 * key/value receivers are one (head 0). */
#ifndef HS_HOOKS_H
#define HS_HOOKS_H

#include <stddef.h>

#include "common.h"

typedef enum {
    HS_SITE_RESID_PRE = 0,
    HS_SITE_ATTN_OUT,
    HS_SITE_MLP_OUT,
    HS_SITE_Q,
    HS_SITE_K,
    HS_SITE_V,
    HS_SITE_Z,
    HS_SITE_PATTERN,
    HS_SITE_ATTN_SCORES,
    HS_N_SITES
} hs_site;

/* One site's tensor as a hook sees it: element (b, t, h, i) lives at
 * x[b*sb + t*st + h*sh + i], i < width. The tensor is contiguous: B*sb
 * elements. Residual sites have one "head" (heads 1, width d); the pattern's
 * and the scores' positions are their queries and their width the S keys. */
typedef struct {
    hs_site site;
    int layer;
    hs_real *x;        /* writable: the rest of the forward uses what is left */
    int B, T;          /* sequences, positions */
    int heads;         /* H (q, z, pattern, attn_scores), G (k, v), 1 (residual sites) */
    int width;         /* dh, d, or S */
    size_t sb, st, sh; /* element strides of a sequence, a position, a head */
} hs_site_view;

/* Returns HS_OK, or a status (message set) that stops the forward. */
typedef int (*hs_site_fn)(void *ctx, const hs_site_view *v);

typedef struct {
    hs_site_fn fn; /* NULL: no hook (costs one test of the pointer) */
    void *ctx;
} hs_site_hook;

/* A gradient observer: grad is the gradient of the backward's objective
 * with respect to the site's tensor, laid out as the forward's view of it
 * (pattern: (B,H,T,S), 0 where a key is masked). HS_OK, or a status (message
 * set) that stops the backward. */
typedef int (*hs_grad_fn)(void *ctx, const hs_site_view *grad);

/* What reads the residual stream (SPEC §15's receivers): a query head, a
 * key/value head's keys or values, an MLP, the final norm and unembedding. */
typedef enum { HS_RECV_Q, HS_RECV_K, HS_RECV_V, HS_RECV_MLP, HS_RECV_LOGITS } hs_recv_kind;

/* The gradient dx (B,T,d) with respect to the input of receiver (layer,
 * kind, head): head is the query head (q), the key/value head (k, v), 0
 * otherwise; the logits' receiver has layer n_layer. */
typedef int (*hs_recv_fn)(void *ctx, int layer, hs_recv_kind kind, int head, const hs_real *dx);

/* Whether table (NULL: no hooks) has a hook at site s. Callers test this
 * before they build a view, so an unhooked site costs two pointer tests. */
static inline int hs_site_hooked(const hs_site_hook *table, hs_site s)
{
    return table && table[s].fn;
}

/* Calls the hook of v->site, which the caller found hooked. */
static inline int hs_site_call(const hs_site_hook *table, const hs_site_view *v)
{
    return table[v->site].fn(table[v->site].ctx, v);
}

/* A view of a contiguous (B, T, heads, width) tensor (every site but the
 * pattern). */
static inline hs_site_view hs_site_view_btw(hs_site site, int layer, hs_real *x, int B, int T,
                                            int heads, int width)
{
    const size_t st = (size_t)heads * width;
    return (hs_site_view){ site, layer, x, B, T, heads, width, st * T, st, (size_t)width };
}

#endif
