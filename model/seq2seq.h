/* Forward through an encoder-decoder model (SPEC §17: t5, bart, marian; the
 * layout of config.h's enc_layers): the encoder over the source tokens,
 * bidirectional over its real tokens (a token equal to pad_id is padding),
 * then the decoder over its inputs, causal, each of its layers attending
 * to the encoder's output through cross-attention (the source's padding
 * masked), and the unembedding and loss of the targets.
 *
 * Shapes: B batch, S source positions, T decoder positions, d width, V
 * vocabulary. */
#ifndef HS_SEQ2SEQ_H
#define HS_SEQ2SEQ_H

#include <stdint.h>

#include "sample.h"
#include "weights.h"

/* The attention types of SPEC §17 (and `self` of one-stack models). */
typedef enum { HS_ATTN_SELF, HS_ATTN_ENC, HS_ATTN_DEC, HS_ATTN_CROSS } hs_attn_type;

/* "self", "enc", "dec", "cross". */
const char *hs_attn_type_name(hs_attn_type t);

/* Activations of one forward of B sequence pairs, S source and T decoder
 * positions, as hs_s2s_acts_alloc sizes them. */
typedef struct {
    int B, S, T, maps, train, n_layer;
    hs_real *enc;          /* (B,S,d) the encoder's output (after its final norm) */
    hs_real *x, *n, *o;    /* (B,max(S,T),d) the residual, a norm's output, a sublayer's */
    hs_real *h_pre, *h_up, *h_act; /* (B,max(S,T),F) the MLP's (h_up: gated MLPs only) */
    hs_real *mean, *rstd;  /* (B,max(S,T)) the last norm's statistics */
    unsigned char *src_valid; /* (B,S) 1 = a real source token */
    int src_padded;        /* src_valid holds a 0 */
    hs_real *rel;          /* T5: (H, 2 max(S,T) - 1) one stack's relative bias by offset */
    hs_attn_acts *self;    /* maps: n_layer, else 2 (encoder, decoder) reused by each layer */
    hs_attn_acts *cross;   /* maps: n_layer (the decoder's), else 1 */
    /* head gates (the caller's; NULL: none): n_layer pointers, each NULL or
     * the H gates multiplying layer l's head outputs z (attention.h's xi):
     * gates on every layer's self-attention, cross_gates on the decoder
     * layers' cross-attention. 0 zero-ablates a head. */
    const hs_real *const *gates, *const *cross_gates;
    int gates_per_seq;     /* each gate vector (B,H): one set per sequence, else (H) */
    /* HS_S2S_TRAIN: what the backward reads and its scratch */
    hs_real *tape;         /* (n_layer, 3, B, max(S,T), d) each sublayer's input residual,
                              by kind: self-attention, cross-attention, MLP */
    hs_real *enc_x;        /* (B,S,d) the encoder's last residual (its final norm's input) */
    hs_real *dres, *dres2, *dn, *dn2; /* (B,max(S,T),d) */
    hs_real *denc;         /* (B,S,d) the gradient of the encoder's output */
    hs_real *dh[3];        /* (B,max(S,T),F) the MLP backward's */
    hs_real *logits;       /* (B,T,V); probabilities after a decode with targets */
    hs_real *losses;       /* (B,T) per-position cross-entropy (0 where ignored) */
    double loss;           /* mean over the targets that are not HS_TARGET_IGNORE */
    size_t n_targets;
} hs_s2s_acts;

/* What hs_s2s_acts_alloc keeps besides one forward's outputs. */
enum {
    HS_S2S_MAPS = 1,  /* every layer's maps (self: att (B,H,S,S) of encoder layers,
                         (B,H,T,T) of decoder layers; cross: att (B,H,T,S)) */
    HS_S2S_TRAIN = 2, /* what hs_s2s_backward needs: each sublayer's input
                         residual (the sublayer itself is recomputed from it) */
};

/* flags: HS_S2S_MAPS, HS_S2S_TRAIN or both (0: the forward alone).
 * HS_EINVAL for a model with one stack or bad sizes. */
int hs_s2s_acts_alloc(hs_s2s_acts *a, const hs_model_config *c, int B, int S, int T, int flags);
void hs_s2s_acts_free(hs_s2s_acts *a);

/* The encoder over src (B,S) into a->enc. HS_EINVAL naming the position for
 * a token outside the vocabulary, a source longer than the learned
 * positions, or a sequence with no real token. */
int hs_s2s_encode(hs_s2s_acts *a, const hs_model *m, const int32_t *src);

/* What hs_s2s_encode(src) leaves, from an encoding of src computed before
 * (enc: a->enc of that pass, (B,S,d)) without running the encoder: the
 * decoder's heads ablated over one encoding. */
int hs_s2s_use_encoding(hs_s2s_acts *a, const hs_model *m, const int32_t *src,
                        const hs_real *enc);

/* The decoder over dec_in (B,T) attending to a->enc (hs_s2s_encode's),
 * then the logits; with targets (B,T) (HS_TARGET_IGNORE left out) also
 * the losses and their mean. */
int hs_s2s_decode(hs_s2s_acts *a, const hs_model *m, const int32_t *dec_in,
                  const int32_t *targets);

/* The backward of sum(losses) * loss_scale (1/n_targets: the mean) after
 * hs_s2s_encode(src) and hs_s2s_decode(dec_in, targets) on activations
 * allocated with HS_S2S_TRAIN, the gates unchanged between. Each sublayer
 * is recomputed from its input residual before its backward (one more
 * forward's work, no per-layer activations kept). Accumulates the weight
 * gradients into g (NULL: none; bound with hs_weights_bind), T5's
 * relative bias tables included, BART's final_logits_bias (a buffer HF
 * does not train) excluded; and the gates' gradients into dgates[l] and
 * dcross[l] (NULL, or NULL entries: none) in the gates' shapes. Overwrites
 * the logits (their gradient) and the forward's scratch. */
int hs_s2s_backward(hs_weights *g, hs_real *const *dgates, hs_real *const *dcross,
                    hs_s2s_acts *a, const hs_model *m, const int32_t *src, const int32_t *dec_in,
                    const int32_t *targets, hs_real loss_scale);

/* The losses (B,T) and their mean of the logits a decode without targets
 * left in a (which become probabilities): hs_s2s_decode's with targets,
 * after the logits were read. HS_EINVAL naming a target outside the
 * vocabulary. */
int hs_s2s_loss(hs_s2s_acts *a, const hs_model_config *c, const int32_t *targets);

/* Decodes source src (S ids) by o's rule (greedy at temperature 0: the
 * argmax, ties to the lowest id): out (max_new + 1) gets
 * [decoder_start_token_id] and then each new id, stopping after
 * eos_token_id (kept) or at max_new; st->n_new their count. The encoder
 * runs once, each decoder layer's cross-attention keys and values are
 * projected once from its output, and the decoder's self-attention keeps a
 * compact cache of its key/value heads. HS_EINVAL naming --max-new beyond
 * the decoder's learned or sinusoidal positions. */
int hs_s2s_generate(int32_t *out, hs_generate_stats *st, const hs_model *m, const int32_t *src,
                    int S, int max_new, const hs_sample_opts *o);

/* New tokens decoded from a source when no count is asked for (generate's
 * --max-new, BLEU's decoding): 64, or the decoder's learned or sinusoidal
 * positions when fewer. */
int hs_s2s_max_new(const hs_model_config *c);

/* T5's bucket of relative position rel = key - query (HF's
 * _relative_position_bucket, its logarithm in float as torch computes it):
 * bidirectional (the encoder) or causal (the decoder). */
int hs_t5_bucket(int rel, int bidirectional, int buckets, int max_distance);

/* Row p of the sinusoidal position table (MarianSinusoidalPositionalEmbedding)
 * into out (d): sin(p / 10000^(2i/d)) for i < d/2, then the cosines, each
 * computed in double and rounded to float (HF's table is a FloatTensor). */
void hs_sinusoid_row(hs_real *out, int p, int d);

#endif
