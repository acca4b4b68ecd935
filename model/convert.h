/* MHA -> GQA/MQA conversion by mean-pooling key/value heads (Ainslie et al.
 * 2023, SPEC §10): with G groups, new key/value head j of a layer is the
 * mean of the old heads j*r .. (j+1)*r - 1, r = G_old / G, in its rows of
 * the k and v projection weights and in its biases. Query head h then
 * reads new head h / (H / G), exactly the group its old head fell in.
 * Every other tensor is copied unchanged, so with G = G_old the model is
 * the same model (every pooled value is a mean of one: bit-identical). */
#ifndef HS_CONVERT_H
#define HS_CONVERT_H

#include "weights.h"

/* out (initialised here; free with hs_model_free) = in with G key/value
 * heads in every layer. G must divide every layer's current key/value head
 * count (and so its query head count): HS_EINVAL naming the first layer it
 * does not, so a pruned model with uneven layers is refused rather than
 * converted layer by layer to different group sizes. GPT-2's and GPT-NeoX's
 * file formats cannot hold grouped heads: their models become the headscope
 * family (the same computation: learned or partial rotary positions, pre
 * norm, biases, GELU kind, parallel residual, tying all carried over). Every
 * other family stays itself. */
int hs_convert_kv_heads(hs_model *out, const hs_model *in, int G);

#endif
