/* The parts of an encoder (BERT, RoBERTa: SPEC §14) that a causal LM lacks,
 * for the forward and backward of transformer.c: the padding mask, the
 * embeddings (word + token type 0 + position, RoBERTa's positions counted
 * over the real tokens, then a LayerNorm) and the MLM head's transform
 * (dense + GELU, before the final norm). hs_model_config says which of them
 * a model has (encoder, type_vocab, embed_norm, pos_offset, mlm_transform).
 *
 * Shapes: B batch, T positions, d width, N = B*T rows. */
#ifndef HS_ENCODER_H
#define HS_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "weights.h"

/* valid (N) = 1 where tokens (N) is not c->pad_id, else 0 (padding, which
 * an encoder's attention masks as a key). Returns the number of padding
 * tokens (0: the mask can be left out). */
size_t hs_encoder_valid(unsigned char *valid, const int32_t *tokens, const hs_model_config *c,
                        size_t N);

/* The position-table row of token t of sequence b (tokens (B,T)): t, or
 * with RoBERTa's positions (pos_offset > 0) pad_id for padding and
 * pos_offset + (real tokens before t) for a real token. pos (T) for one
 * sequence of T tokens. */
void hs_encoder_positions(int *pos, const int32_t *tokens, const hs_model_config *c, int T);

/* raw (B,T,d) = wte[token] + tte[type] (type_vocab > 0; types (B,T) each
 * below type_vocab, or NULL: type 0 everywhere) + wpe[position] (learned
 * positions), in Hugging Face's order of addition; with embed_norm emb =
 * LayerNorm(raw) (mean, rstd (B,T) kept), else emb = raw (raw may be emb
 * then). */
void hs_encoder_embed_forward(hs_real *emb, hs_real *raw, hs_real *mean, hs_real *rstd,
                              const int32_t *tokens, const unsigned char *types,
                              const hs_weights *w, const hs_model_config *c, int B, int T);

/* The backward of hs_encoder_embed_forward from demb (B,T,d): accumulates
 * into g's wte, tte and wpe rows and the norm's weights (NULL members
 * skipped). scratch (B,T,d) is overwritten (the gradient of raw). */
void hs_encoder_embed_backward(hs_weights *g, hs_real *scratch, const hs_real *demb,
                               const hs_real *raw, const hs_real *mean, const hs_real *rstd,
                               const int32_t *tokens, const unsigned char *types,
                               const hs_weights *w, const hs_model_config *c, int B, int T);

/* The MLM transform before the final norm: pre (N,d) = h mlm_w^T + mlm_b,
 * act = GELU(pre) (the MLP's: exact erf with gelu_exact). */
void hs_mlm_transform_forward(hs_real *act, hs_real *pre, const hs_real *h, const hs_weights *w,
                              const hs_model_config *c, size_t N);

/* Its backward: dh (N,d) = the gradient of h (overwritten) from dact (N,d);
 * g->mlm_w, mlm_b accumulate (NULL: skipped). scratch (N,d) overwritten. */
void hs_mlm_transform_backward(hs_real *dh, hs_weights *g, hs_real *scratch, const hs_real *dact,
                               const hs_real *pre, const hs_real *h, const hs_weights *w,
                               const hs_model_config *c, size_t N);

#endif
