/* The position-wise pieces of a transformer block as hs_model_config
 * describes them -- the norm of the configured kind and the MLP -- written
 * once for the full forward and backward (transformer.c) and the decoder
 * (decode.c).
 *
 * Shapes: N rows (B*T, or the decoder's new tokens), d width, F MLP width. */
#ifndef HS_BLOCK_H
#define HS_BLOCK_H

#include <stddef.h>

#include "weights.h"

/* out (N,d) = norm(inp): LayerNorm (mean, rstd kept) or RMSNorm (rstd kept,
 * mean unused), with (1 + w) under norm_offset. */
void hs_block_norm(hs_real *out, hs_real *mean, hs_real *rstd, const hs_real *inp,
                   const hs_real *w, const hs_real *b, const hs_model_config *c, size_t N);

/* sum = x + y and out (N,d) = norm(sum), one pass. */
void hs_block_add_norm(hs_real *sum, hs_real *out, hs_real *mean, hs_real *rstd,
                       const hs_real *x, const hs_real *y, const hs_real *w, const hs_real *b,
                       const hs_model_config *c, size_t N);

/* dinp (N,d) = base + the norm backward of dout: base NULL overwrites, base
 * == dinp accumulates, another buffer adds a residual gradient in the same
 * pass. dw and db (NULL: skipped) accumulate. */
void hs_block_norm_backward(hs_real *dinp, const hs_real *base, hs_real *dw, hs_real *db,
                            const hs_real *dout, const hs_real *inp, const hs_real *w,
                            const hs_real *mean, const hs_real *rstd, const hs_model_config *c,
                            size_t N);

/* What an MLP keeps for its backward, each (N,F): h_pre the fc output (gelu)
 * or the gate (swiglu, geglu), h_up the up projection (gated MLPs only),
 * h_act the activation that the output projection reads. */
typedef struct {
    hs_real *h_pre, *h_up, *h_act;
} hs_mlp_acts;

/* out (N,d) = mlp(inp (N,d)) of kind c->mlp (not HS_MLP_NONE). */
void hs_mlp_forward(hs_real *out, const hs_mlp_acts *a, const hs_layer_weights *lw,
                    const hs_real *inp, const hs_model_config *c, size_t N);

/* dinp (N,d) += the MLP backward of dout (N,d); gw (NULL members skipped)
 * accumulates. scratch: three (N,F) buffers (the third only for gated
 * MLPs), overwritten. */
void hs_mlp_backward(hs_real *dinp, hs_layer_weights *gw, hs_real *const scratch[3],
                     const hs_mlp_acts *a, const hs_layer_weights *lw, const hs_real *dout,
                     const hs_real *inp, const hs_model_config *c, size_t N);

#endif
