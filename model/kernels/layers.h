/* Position-wise kernels of the transformer: norms, activations, embeddings
 * and the loss. Forward: outputs first, then inputs, then sizes; the backward
 * twins keep that order with d-prefixed names and accumulate (+=).
 * N = rows (B*T), C = channels. */
#ifndef HS_LAYERS_H
#define HS_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* LayerNorm with biased variance; b may be NULL (no bias). mean, rstd (N). */
void hs_layernorm_forward(hs_real *out, hs_real *mean, hs_real *rstd, const hs_real *inp,
                          const hs_real *w, const hs_real *b, size_t N, int C, double eps);
void hs_layernorm_backward(hs_real *dinp, hs_real *dw, hs_real *db, const hs_real *dout,
                           const hs_real *inp, const hs_real *w, const hs_real *mean,
                           const hs_real *rstd, size_t N, int C);

/* The same backward writing dinp = base + the gradient: base NULL (dinp =
 * the gradient, nothing to clear first), a residual gradient (the residual
 * add fused in), or dinp itself (hs_layernorm_backward). dw, db accumulate. */
void hs_layernorm_backward_into(hs_real *dinp, const hs_real *base, hs_real *dw, hs_real *db,
                                const hs_real *dout, const hs_real *inp, const hs_real *w,
                                const hs_real *mean, const hs_real *rstd, size_t N, int C);

/* sum (N,C) = x + y and out = LayerNorm(sum), in one pass over the rows
 * (the residual add fused into the norm that reads it). */
void hs_add_layernorm_forward(hs_real *sum, hs_real *out, hs_real *mean, hs_real *rstd,
                              const hs_real *x, const hs_real *y, const hs_real *w,
                              const hs_real *b, size_t N, int C, double eps);

/* RMSNorm: out = inp * rsqrt(mean(inp^2) + eps) * w. rstd (N). */
void hs_rmsnorm_forward(hs_real *out, hs_real *rstd, const hs_real *inp, const hs_real *w,
                        size_t N, int C, double eps);
void hs_rmsnorm_backward(hs_real *dinp, hs_real *dw, const hs_real *dout, const hs_real *inp,
                         const hs_real *w, const hs_real *rstd, size_t N, int C);
/* As hs_layernorm_backward_into and hs_add_layernorm_forward. */
void hs_rmsnorm_backward_into(hs_real *dinp, const hs_real *base, hs_real *dw,
                              const hs_real *dout, const hs_real *inp, const hs_real *w,
                              const hs_real *rstd, size_t N, int C);
void hs_add_rmsnorm_forward(hs_real *sum, hs_real *out, hs_real *rstd, const hs_real *x,
                            const hs_real *y, const hs_real *w, size_t N, int C, double eps);

/* The RMSNorms above with the scale (w + offset): offset 1 is Gemma's
 * (1 + w), formed in hs_real as Hugging Face forms it in float32. out may
 * be inp (in place) and rstd NULL (not kept) in hs_rmsnorm_rows; the
 * backward's dw is offset-free (d/dw of (w + offset) is 1). The unsuffixed
 * functions are these with offset 0. */
void hs_rmsnorm_rows(hs_real *out, hs_real *rstd, const hs_real *inp, const hs_real *w,
                     hs_real offset, size_t N, int C, double eps);
void hs_rmsnorm_backward_off(hs_real *dinp, const hs_real *base, hs_real *dw,
                             const hs_real *dout, const hs_real *inp, const hs_real *w,
                             hs_real offset, const hs_real *rstd, size_t N, int C);
void hs_add_rmsnorm_forward_off(hs_real *sum, hs_real *out, hs_real *rstd, const hs_real *x,
                                const hs_real *y, const hs_real *w, hs_real offset, size_t N,
                                int C, double eps);

/* GELU, tanh approximation (gelu_new), elementwise over n. */
void hs_gelu_forward(hs_real *out, const hs_real *inp, size_t n);
void hs_gelu_backward(hs_real *dinp, const hs_real *inp, const hs_real *dout, size_t n);
/* d (n) *= gelu'(inp): the backward overwriting the gradient it reads, for a
 * caller whose gradient buffer would otherwise start at zero. */
void hs_gelu_backward_inplace(hs_real *d, const hs_real *inp, size_t n);

/* GELU with the exact normal CDF, x * (1 + erf(x / sqrt 2)) / 2 (GPT-NeoX's
 * "gelu"), elementwise over n. */
void hs_gelu_erf_forward(hs_real *out, const hs_real *inp, size_t n);
void hs_gelu_erf_backward(hs_real *dinp, const hs_real *inp, const hs_real *dout, size_t n);

/* GeGLU gate: out = gelu(gate) * up, elementwise over n, GELU by the tanh
 * formula (gelu_new = gelu_pytorch_tanh) or, with exact, by erf. The
 * backward accumulates into dgate and dup. */
void hs_geglu_forward(hs_real *out, const hs_real *gate, const hs_real *up, size_t n, int exact);
void hs_geglu_backward(hs_real *dgate, hs_real *dup, const hs_real *dout, const hs_real *gate,
                       const hs_real *up, size_t n, int exact);

/* SwiGLU gate: out = silu(gate) * up, elementwise over n. */
void hs_swiglu_forward(hs_real *out, const hs_real *gate, const hs_real *up, size_t n);
void hs_swiglu_backward(hs_real *dgate, hs_real *dup, const hs_real *dout, const hs_real *gate,
                        const hs_real *up, size_t n);

/* x (B,T,C) = wte[tokens] (+ wpe[t] when wpe != NULL). */
void hs_embed_forward(hs_real *x, const int32_t *tokens, const hs_real *wte, const hs_real *wpe,
                      int B, int T, int C);
void hs_embed_backward(hs_real *dwte, hs_real *dwpe, const hs_real *dx, const int32_t *tokens,
                       int B, int T, int C);

/* A target that asks for no loss at its row (a position the masked-LM loss
 * did not choose; HF's label -100): loss 0 and no gradient. */
enum { HS_TARGET_IGNORE = -1 };

/* In place: logits (N,V) -> probabilities; losses (N) = -log p[target], 0
 * where the target is HS_TARGET_IGNORE (as in the backwards below). */
void hs_softmax_xent_forward(hs_real *probs_inout, hs_real *losses, const int32_t *targets,
                             size_t N, int V);
/* dlogits (N,V) = (probs - onehot(target)) * scale (overwrites). */
void hs_softmax_xent_backward(hs_real *dlogits, const hs_real *probs, const int32_t *targets,
                              size_t N, int V, hs_real scale);

/* Soft-capping in place: x <- cap tanh(x / cap), elementwise over n (tanh
 * in double: the cap multiplies its error). */
void hs_softcap_forward(hs_real *x, double cap, size_t n);

/* hs_softmax_xent_backward for soft-capped logits: dlogits (N,V) = (probs -
 * onehot(target)) * scale * (1 - (c / cap)^2), the chain through
 * cap tanh(l / cap), where each capped logit c = log p + lse[n] is
 * recovered from its probability and the row's log-sum-exp lse (N), so no
 * second (N,V) buffer is kept. dlogits may be probs (in place). */
void hs_softcap_xent_backward(hs_real *dlogits, const hs_real *probs, const hs_real *lse,
                              const int32_t *targets, size_t N, int V, hs_real scale, double cap);

/* out = a + b, n elements. */
void hs_add(hs_real *out, const hs_real *a, const hs_real *b, size_t n);

/* x *= s, n elements. */
void hs_scale(hs_real *x, hs_real s, size_t n);

/* Where a vector's rotary pairs lie. HALF: pair k is dims (k, k + R/2)
 * (Hugging Face's rotate_half, every family's). INTERLEAVED: pair k is
 * dims (2k, 2k + 1), moved to (k, k + R/2) before the rotation (MLA's
 * view(R/2, 2).transpose(-1, -2)), so the output is in HALF order. */
typedef enum { HS_ROPE_HALF, HS_ROPE_INTERLEAVED } hs_rope_layout;

/* The longest rotary part an INTERLEAVED vector may have. */
enum { HS_ROPE_MAX_INTERLEAVED = 1024 };

/* Rotary position embedding in place: the one kernel of standard attention
 * and MLA. x holds B T rows (row b T + t at x + (b T + t) ld), each of nh
 * vectors (vector j at + j hd); the first R dims (R even) of each vector
 * turn, pair k by the angle (pos0 + t) inv_freq(ctx, k), in hs_real as
 * Hugging Face does in float: x1 c - x2 s, x2 c + x1 s with c, s the
 * angle's cosine and sine rounded to hs_real; the other dims pass
 * unchanged. inverse: turned back by the same angles (the rotation's
 * transpose, i.e. its backward), INTERLEAVED dims then moved back.
 * inv_freq is called T R/2 times; R <= HS_ROPE_MAX_INTERLEAVED for
 * INTERLEAVED. */
void hs_rope_rows(hs_real *x, int B, int T, int nh, size_t ld, size_t hd, int R, int pos0,
                  double (*inv_freq)(const void *ctx, int k), const void *ctx,
                  hs_rope_layout layout, int inverse);

#endif
