/* Direct logit attribution (SPEC §11): the clean logit difference
 * LD = logit[answer] - logit[wrong] at the last position, split into the
 * additive parts of the final residual stream, each read through the final
 * norm with the forward's own scale frozen (TransformerLens's
 * cache.apply_ln_to_stack(..., layer=-1) followed by a dot product with
 * u[answer] - u[wrong], u the unembedding rows).
 *
 * With x the final residual at the last position (pre-norm models):
 *   x = embed + pos_embed + sum_l (sum_h z_h W_O^h + b_O^l) + sum_l mlp_out_l
 * (the embeddings times sqrt(d) with embed_scale, as the forward scales
 * them) and, with s the frozen scale (LayerNorm: sqrt(var(x) + eps) and the
 * parts centred; RMSNorm: sqrt(mean(x^2) + eps); no final norm: 1), gamma
 * and beta the final norm's scale and bias (gamma = 1 + w under
 * norm_offset, Gemma's) and b_U the unembedding bias,
 *   LD = sum over parts c of (c / s) . (gamma * du) + beta . du + b_U[a] - b_U[w]
 * (du = u[answer] - u[wrong]), exactly, so the parts sum to LD. With a final
 * soft-cap (final_softcap: logits c tanh(l / c), not linear) LD is the
 * difference of the logits before the cap, which the parts sum to; that is
 * the LD reported. The terms, in this order (layer, head, metric):
 *   (l, h, "dla")                  head h of layer l: z_h W_O^h, no bias
 *   (l, -1, "dla")                 layer l's MLP output (its output bias included,
 *                                  as the mlp_out hook site holds it); models
 *                                  with an MLP only
 *   (-1, -1, "dla_embed")          the token embedding of the last token
 *   (-1, -1, "dla_pos_embed")      its learned position embedding (learned
 *                                  positions only)
 *   (-1, -1, "dla_attn_bias")      sum over layers of the attention output
 *                                  bias b_O (models with attention biases)
 *   (-1, -1, "dla_final_norm_bias") beta . du (a final LayerNorm with a bias)
 *   (-1, -1, "dla_lm_head_bias")   b_U[answer] - b_U[wrong] (an unembedding bias)
 * Post-norm models have no additive residual stream and are refused; so are
 * the out_norm families (gemma2, gemma3_text, olmo2), whose sublayer
 * outputs pass a norm before they are added, so the residual stream is not
 * a sum of head outputs. */
#ifndef HS_DLA_H
#define HS_DLA_H

#include "prompts.h"
#include "weights.h"

typedef struct {
    int layer, head;
    const char *metric; /* a static string */
} hs_dla_term;

typedef struct {
    int n_terms;
    hs_dla_term *term;   /* [n_terms] in the order above */
    int n;               /* prompts, in the set's order (group by group) */
    double *value;       /* (n, n_terms): each prompt's parts */
    double *logit_diff;  /* (n): LD from the model's own logits (before the cap
                            with final_softcap) */
    int *line;           /* (n): the prompt's line in its file */
} hs_dla;

/* HS_OK, or HS_EINVAL saying why the model has no attribution (post-norm;
 * out_norm, naming the family). */
int hs_dla_check(const hs_model_config *c);

/* The parts of every prompt of ps (clean sequences), batch prompts per
 * forward. Costs one inference forward per batch plus O(d (V + HD)) per
 * prompt. r is initialised here; free it with hs_dla_free. */
int hs_dla_compute(hs_dla *r, const hs_model *m, const hs_prompt_set *ps, int batch);
void hs_dla_free(hs_dla *r);

#endif
