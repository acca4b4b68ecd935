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

/* SwiGLU gate: out = silu(gate) * up, elementwise over n. */
void hs_swiglu_forward(hs_real *out, const hs_real *gate, const hs_real *up, size_t n);
void hs_swiglu_backward(hs_real *dgate, hs_real *dup, const hs_real *dout, const hs_real *gate,
                        const hs_real *up, size_t n);

/* x (B,T,C) = wte[tokens] (+ wpe[t] when wpe != NULL). */
void hs_embed_forward(hs_real *x, const int32_t *tokens, const hs_real *wte, const hs_real *wpe,
                      int B, int T, int C);
void hs_embed_backward(hs_real *dwte, hs_real *dwpe, const hs_real *dx, const int32_t *tokens,
                       int B, int T, int C);

/* In place: logits (N,V) -> probabilities; losses (N) = -log p[target]. */
void hs_softmax_xent_forward(hs_real *probs_inout, hs_real *losses, const int32_t *targets,
                             size_t N, int V);
/* dlogits (N,V) = (probs - onehot(target)) * scale (overwrites). */
void hs_softmax_xent_backward(hs_real *dlogits, const hs_real *probs, const int32_t *targets,
                              size_t N, int V, hs_real scale);

/* out = a + b, n elements. */
void hs_add(hs_real *out, const hs_real *a, const hs_real *b, size_t n);

#endif
