/* Multi-head latent attention (DeepSeek-V2 §2.1), exactly as Hugging Face's
 * deepseek_v2 computes it (SPEC §10), for `attention: "mla"` layers of the
 * headscope family.
 *
 * Dimension names used in every shape comment:
 *   B batch, T positions, d model width, H heads, C kv_lora_rank (the
 *   latent), Q q_lora_rank (0: a plain q_proj), n qk_nope_head_dim, r
 *   qk_rope_head_dim, v v_head_dim, HQ = H (n + r), HKV = H (n + v).
 *
 *   q        = q_proj x, or q_b_proj rms(q_a_proj x)   (B,T,H,n+r), per head [q_nope; q_pe]
 *   [c; k_pe]= kv_a_proj_with_mqa x                     (B,T,C+r)
 *   ckv      = rms(c) (kv_a_layernorm)                  (B,T,C)  the cached latent
 *   [k_nope; v] per head = kv_b_proj ckv                (B,T,H,n+v)
 *   q_pe, k_pe: de-interleaved (view(.., r/2, 2).transpose(-1,-2)), then
 *            rotate-half RoPE (base rope_theta) at the token's position;
 *            k_pe is one key shared by every head
 *   att_h    = softmax((q_nope_h k_nope_h^T + q_pe_h k_pe^T) / sqrt(n + r) + causal)
 *   z_h      = att_h v_h                                (B,T,H,v), the head output
 *   out      = o_proj (xi[h] z_h concatenated)          (B,T,d)
 *
 * The RMSNorms (q_a_layernorm, kv_a_layernorm) use the model's norm eps.
 * There are no biases (attention_bias is refused with MLA).
 *
 * Hook sites of an MLA layer (hooks.h): q (B,T,H,n+r, after RoPE; the
 * scores use what the hook leaves), pattern (B,H,T,T) and z (B,T,H,v).
 * The k and v sites are not called: MLA has no per-head key/value tensor
 * of the GQA layout (keys are [k_nope_h; k_pe], values the tail of
 * kv_b_proj's output); intervene on z or the pattern instead.
 *
 * Decoding reads a cache of only C + r values per token and layer (the
 * normalised latent and the rotated k_pe) through the absorbed path: W^UK
 * (the k_nope rows of kv_b_proj) folded into the query, W^UV (its v rows)
 * applied to the attention-mixed latent (hs_mla_forward_cached). */
#ifndef HS_MLA_H
#define HS_MLA_H

#include <stddef.h>

#include "attention.h"
#include "common.h"
#include "layers.h"

/* The widest decoupled rotary key supported (a stack buffer per vector). */
enum { HS_MLA_MAX_ROPE = HS_ROPE_MAX_INTERLEAVED };

typedef struct {
    int d_model;      /* d */
    int n_heads;      /* H */
    int q_lora_rank;  /* Q; 0: q_proj */
    int kv_lora_rank; /* C */
    int qk_nope;      /* n */
    int qk_rope;      /* r, even */
    int v_dim;        /* v */
    double rope_theta;
    double norm_eps;  /* of q_a_layernorm and kv_a_layernorm */
} hs_mla_config;

/* HS_OK or HS_EINVAL naming the size. */
int hs_mla_config_check(const hs_mla_config *c);

/* Parameters of one MLA layer (HQ d, or Q d + Q + HQ Q; (C + r) d + C +
 * HKV C + d H v). */
size_t hs_mla_param_count(const hs_mla_config *c);

/* nn.Linear layout (out, in); unused members NULL. */
typedef struct {
    hs_real *w_q;      /* (HQ, d)   q_proj (Q = 0) */
    hs_real *w_qa;     /* (Q, d)    q_a_proj */
    hs_real *qa_norm;  /* (Q)       q_a_layernorm */
    hs_real *w_qb;     /* (HQ, Q)   q_b_proj */
    hs_real *w_kva;    /* (C+r, d)  kv_a_proj_with_mqa */
    hs_real *kva_norm; /* (C)       kv_a_layernorm */
    hs_real *w_kvb;    /* (HKV, C)  kv_b_proj */
    hs_real *w_o;      /* (d, H v)  o_proj */
} hs_mla_weights;

/* The layer's own activations (N = B T); the head outputs z, the gated zg,
 * the maps att and dz live in the layer's hs_attn_acts (z width v). */
typedef struct {
    hs_real *cq, *cqn, *cq_rstd; /* (N,Q), (N,Q), (N): q_a_proj output, normed; Q > 0 */
    hs_real *q;                  /* (N,HQ) after RoPE */
    hs_real *kva;                /* (N,C+r) kv_a_proj_with_mqa output */
    hs_real *lat;                /* (N,C) its latent part, before the norm */
    hs_real *ckv, *ckv_rstd;     /* (N,C) normalised latent, (N) */
    hs_real *kpe;                /* (N,r) rotated shared rope key */
    hs_real *kvb;                /* (N,HKV) [k_nope; v] per head */
    /* backward scratch (training only) */
    hs_real *dq;                 /* (N,HQ) */
    hs_real *dkvb;               /* (N,HKV) */
    hs_real *dkva;               /* (N,C+r) */
    hs_real *dckv, *dlat;        /* (N,C) */
    hs_real *dcqn, *dcq;         /* (N,Q) */
} hs_mla_acts;

/* Elements of the buffers above for B sequences of T positions (training:
 * with the backward scratch); hs_mla_acts_bind points a at consecutive
 * slices of mem (that many elements). */
size_t hs_mla_acts_elems(const hs_mla_config *c, int B, int T, int training);
void hs_mla_acts_bind(hs_mla_acts *a, const hs_mla_config *c, int B, int T, int training,
                      hs_real *mem);

/* The heads half of the forward over x (B,T,d), B = at->B, T = at->L:
 * projections, norms, RoPE, the hook sites q, pattern and z of at->hooks,
 * the row observer, maps into at->att when it is not NULL (the backward
 * needs them) and z into at->z. Causal self-attention from position 0.
 * The output projection is hs_attn_forward_output's (its W_o is o_proj,
 * head width v). */
int hs_mla_forward_heads(hs_mla_acts *m, hs_attn_acts *at, const hs_mla_weights *w,
                         const hs_mla_config *c, const hs_real *x);

/* hs_mla_forward_heads (without maps, hooks or observers) in which each
 * head's queries and the latent's keys and values read inputs of their own:
 * input(ctx, kind, head, x) fills x (B,T,d) with the input of that path
 * (HS_RECV_Q of each head, HS_RECV_K and HS_RECV_V of "head" 0: the keys'
 * latent and rope key, the values' latent). z into at->z. Costs each head
 * a whole query projection. */
int hs_mla_forward_split(hs_mla_acts *m, hs_attn_acts *at, const hs_mla_weights *w,
                         const hs_mla_config *c,
                         int (*input)(void *ctx, hs_recv_kind kind, int head, hs_real *x),
                         void *ctx, hs_real *x);

/* The causal maps att (B,T,T) of head h from its queries q (B,T,n+r,
 * contiguous, RoPE applied), the k_nope of kv_b_proj's output kvb (B*T rows
 * of H (n+v)) and the rope keys kpe (B,T,r): for maps of patched queries or
 * latents (AtP*'s QK fix). */
int hs_mla_head_maps(hs_real *att, const hs_real *q, const hs_real *kvb, const hs_real *kpe,
                     const hs_mla_config *c, int B, int T, int h);

/* Backward of o_proj(gates z) after hs_mla_forward_heads with maps kept:
 * accumulates (+=) dx (B,T,d), the weight gradients dw (NULL members
 * skipped; dw may be NULL) and dxi (the gates' shape; NULL to skip) from
 * dout (B,T,d). Overwrites the backward scratch of m and at. Reports what
 * at->grad asks for (attention.h): the gradients of sites z, pattern, q
 * (after RoPE), k and v (the normalised latent (B,T,1,C) as the keys'
 * k_nope and the values read it) and the paths' shares of dx: each head's
 * queries, and the latent's one key/value "head" 0 (keys: through k_nope
 * and the rope key; values: through v). */
int hs_mla_backward(hs_real *dx, hs_mla_weights *dw, hs_real *dxi, const hs_real *dout,
                    hs_mla_acts *m, hs_attn_acts *at, const hs_mla_weights *w,
                    const hs_mla_config *c, const hs_real *x, const hs_real *xi, int xi_per_seq);

/* The value path of each head as one linear map of the layer input, the
 * latent's RMSNorm ignored (as analyses of the OV circuit ignore norms):
 * w_v (H v, d) rows h v .. h v + v - 1 = W^UV_h (v, C) times the latent
 * rows of kv_a_proj_with_mqa (C, d). Lets GQA-layout analyses (the copying
 * score) read an MLA layer as if it had a v_proj. */
void hs_mla_value_weights(hs_real *w_v, const hs_mla_weights *w, const hs_mla_config *c);

/* ---- decoding with the latent cache ------------------------------------ */

/* One layer's cache: per sequence and token only the normalised latent (C)
 * and the rotated shared rope key (r). */
typedef struct {
    int B, C, r;
    int cap;        /* positions allocated */
    int len;        /* positions filled */
    hs_real *latent; /* (B, cap, C) */
    hs_real *k_pe;   /* (B, cap, r) */
} hs_mla_cache;

int hs_mla_cache_init(hs_mla_cache *cache, int B, int kv_lora_rank, int qk_rope_head_dim,
                      int cap);
void hs_mla_cache_free(hs_mla_cache *cache);

/* Bytes the cache of B sequences of `tokens` positions holds: (C + r)
 * sizeof(hs_real) tokens B, the figure `kv-bytes --mla-latent C --mla-rope
 * r --bytes sizeof(hs_real)` prints for one layer. */
size_t hs_mla_cache_bytes(int B, int kv_lora_rank, int qk_rope_head_dim, int tokens);

/* A cached step: L new tokens x (B,L,d) of each of the cache's B sequences
 * at positions cache->len .. cache->len + L - 1 (a prefill when L > 1,
 * causal inside it). Appends their latents and rope keys to the cache,
 * then attends over the whole cache through the absorbed path: q_nope_h
 * W^UK_h is the query against the latents, the mixed latent times W^UV_h
 * is z_h; no key or value per head is ever formed. out (B,L,d) =
 * o_proj(xi z); z (B,L,H v) receives the head outputs when not NULL; xi
 * (H) or NULL. Equals the full forward on the whole sequence at the new
 * positions (test_mla). HS_EINVAL when the cache is full or its widths are
 * not c's. Costs O(L S H C) per step, S = cache length, and allocates
 * only per-step scratch. */
int hs_mla_forward_cached(hs_real *out, hs_real *z, const hs_mla_weights *w,
                          const hs_mla_config *c, const hs_real *x, int L, const hs_real *xi,
                          hs_mla_cache *cache);

#endif
