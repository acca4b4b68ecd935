/* Q-, K- and V-composition scores (Elhage et al. 2021) of every head A into
 * every head B of a later layer, as TransformerLens computes them
 * (HookedTransformer.all_composition_scores with utils.composition_scores):
 * in the row-vector convention (x W), with W_V^A, W_Q^B, W_K^B (d, dh) and
 * W_O^A, W_O^B (dh, d) of the heads' own slices (a query head's own key/value
 * head under GQA), OV^A = W_V^A W_O^A and QK^B = W_Q^B (W_K^B)^T,
 *   q_composition = |OV^A QK^B|_F     / (|OV^A|_F |QK^B|_F)   (query side)
 *   k_composition = |OV^A (QK^B)^T|_F / (|OV^A|_F |QK^B|_F)   (key side)
 *   v_composition = |OV^A OV^B|_F     / (|OV^A|_F |OV^B|_F)
 * on the raw weights: norms, biases and rotary positions are left out (as
 * TransformerLens on a model loaded with fold_ln=False and
 * center_writing_weights=False). Each lies in [0, 1]. A pair with a head
 * whose circuit is zero (a pruned head: 0/0) gets no score.
 *
 * Every family is scored so, and every norm is left out alike: the input
 * norms, the q/k norms (qwen3, gemma3_text, olmo2) and the norms after the
 * sublayers (out_norm: gemma2, gemma3_text, olmo2). An output norm scales
 * the layer's whole attention output per position (a factor each score
 * cancels) and then by its weight, which -- like an input norm's -- is not
 * folded in; the (1 + w) of norm_offset is a norm weight too. So the scores
 * of those families are weight-space scores, as TransformerLens gives them.
 *
 * Computed without forming d x d matrices: |U M V^T|_F^2 =
 * sum((G_U M) o (M G_V)) with M = W_O^A W_Q^B (dh x dh) and the dh x dh Gram
 * matrices G_U = (W_V^A)^T W_V^A, G_V = (W_K^B)^T W_K^B, in double. */
#ifndef HS_COMPOSITION_H
#define HS_COMPOSITION_H

#include "index.h"
#include "weights.h"

/* rows: every scored pair of m, three rows each (q, k, v), metric names
 * "<kind>_composition" followed by suffix ("" or "_control"; the names are
 * static strings). *rows is malloc'd (the caller frees it). Costs
 * O(pairs * (d dh^2 + dh^3)) in BLAS. */
int hs_composition_scores(hs_pair_row **rows, int *n, const hs_model *m, int control);

#endif
