/* Forward and backward through a whole model (SPEC §3, §14): embeddings
 * (times sqrt(d) with embed_scale; an encoder's with token types, RoBERTa's
 * positions and their norm: encoder.h), layers of attention (+ MLP) with pre
 * or post norms -- or none before the sublayers and one after each
 * (out_norm, no_input_norm) -- causal, or bidirectional over the keys that
 * are not padding (encoders), the MLM transform (encoders), the unembedding
 * (soft-capped with final_softcap) and the cross-entropy against the
 * targets (the next tokens, or an encoder's masked-LM labels, rows of
 * HS_TARGET_IGNORE left out).
 *
 * Shapes: B batch, T positions, d width, F MLP width, V vocabulary. */
#ifndef HS_TRANSFORMER_H
#define HS_TRANSFORMER_H

#include <stdint.h>

#include "attention.h"
#include "mla.h"
#include "weights.h"

typedef struct {
    hs_real *in;                 /* (B,T,d) residual stream entering the layer */
    hs_real *n1, *n1_mean, *n1_rstd; /* (B,T,d), (B,T): pre: attention input; post: norm after it
                                        (NULL with no_input_norm) */
    hs_attn_acts attn;           /* q, k, v, z, maps (B,H,T,T) when kept */
    hs_mla_acts mla;             /* attention "mla" layers: their own buffers (z, maps: attn's) */
    hs_real *attn_raw;           /* (B,T,d) out_norm: W_o's output, before its norm */
    hs_real *attn_on_mean, *attn_on_rstd; /* (B,T) out_norm: that norm's statistics */
    hs_real *attn_out;           /* (B,T,d) what the attention adds to the residual */
    hs_real *r1;                 /* (B,T,d) residual + attention */
    hs_real *n2, *n2_mean, *n2_rstd; /* MLP norm, as n1 */
    hs_real *h_pre;              /* (B,T,F) fc output (gelu) or gate (swiglu, geglu) */
    hs_real *h_up;               /* (B,T,F) gated MLPs' up projection */
    hs_real *h_act;              /* (B,T,F) activation */
    hs_real *mlp_raw;            /* (B,T,d) out_norm: the MLP's output before its norm */
    hs_real *mlp_on_mean, *mlp_on_rstd; /* (B,T) out_norm */
    hs_real *mlp_out;            /* (B,T,d) what the MLP adds to the residual */
    hs_real *r2;                 /* (B,T,d) residual + MLP */
    hs_real *out;                /* the layer's output: one of the buffers above */
} hs_layer_acts;

/* What the activations are for. */
enum {
    HS_ACTS_INFER = 0, /* forward only, no maps */
    HS_ACTS_TRAIN = 1, /* maps of every layer and the backward scratch */
    HS_ACTS_MAPS = 2,  /* forward only; one map buffer that each layer reuses,
                          for observers that stream maps out (capture, scores) */
    HS_ACTS_LOSS = 3,  /* a forward for its losses (eval): the layers use two sets of
                          buffers in turn (layer l's are those of layer l % 2, so a
                          layer's activations last until layer l + 2 runs) and the
                          logits are HS_LOSS_ROWS rows at a time; memory grows with
                          neither n_layer nor V x B x T */
};

/* Rows of logits an HS_ACTS_LOSS forward computes at a time: enough rows
 * for the unembedding's GEMM to run at its blocked rate. */
enum { HS_LOSS_ROWS = 256 };

typedef struct {
    int B, T, training;
    int B_alloc;                    /* rows allocated; hs_acts_set_batch may run fewer */
    int mode;
    int n_layer;
    hs_real *shared_maps;           /* HS_ACTS_MAPS: (B, max H, T, T) */
    hs_real *emb;                   /* (B,T,d) embeddings, input of layer 0 */
    hs_real *emb_raw, *emb_mean, *emb_rstd; /* (B,T,d), (B,T) embed_norm: the sum before its
                                       norm, and the norm's statistics */
    hs_real *mlm_pre, *mlm_act;     /* (B,T,d) mlm_transform: its dense output and GELU */
    unsigned char *valid;           /* (B,T) encoders: 1 = a real token, 0 = padding (a key
                                       attention masks); what the last forward with tokens
                                       (or hs_acts_set_valid) found */
    int padded;                     /* encoders: valid holds a 0 (else the mask is left out) */
    const unsigned char *types;     /* (B,T) encoders: the caller's token type ids for the next
                                       forwards and backwards (each below type_vocab), or NULL:
                                       type 0 everywhere */
    hs_layer_acts *layer;           /* n_layer */
    hs_real *lnf, *lnf_mean, *lnf_rstd; /* (B,T,d), (B,T) */
    hs_real *logits;                /* (B,T,V) (soft-capped with final_softcap);
                                       probabilities after a forward with targets;
                                       HS_ACTS_LOSS: the last (up to) HS_LOSS_ROWS rows' */
    hs_real *losses;                /* (B,T) per-position cross-entropy */
    hs_real *lse;                   /* (B,T) training with final_softcap: each row's
                                       log-sum-exp, from which the backward recovers
                                       the capped logits */
    double loss;                    /* mean of losses over the targets that are not
                                       HS_TARGET_IGNORE (0 when every one is) */
    size_t n_targets;               /* those targets */
    /* backward scratch (training only) */
    hs_real *dres, *dres2, *dnorm, *dbranch; /* (B,T,d) */
    hs_real *dh, *dh2, *dh3;                 /* (B,T,F) */
    void *block;                    /* the one allocation every buffer above lies in */
    size_t bytes;                   /* its usable size: hs_acts_bytes(c, B_alloc, T, mode) */
} hs_acts;

/* Bytes hs_acts_alloc(c, B, T, mode) allocates: every buffer of the mode
 * in hs_real (so twice as many in the double build), each starting on a
 * 64-byte boundary, and the per-layer records. 0 with HS_EINVAL (bad
 * sizes or configuration) or HS_ENOMEM (overflow) recorded. Computed from
 * the same size table as the allocation, for memory budgets. */
size_t hs_acts_bytes(const hs_model_config *c, int B, int T, int mode);

/* mode: HS_ACTS_INFER, HS_ACTS_TRAIN, HS_ACTS_MAPS or HS_ACTS_LOSS. One zeroed allocation
 * (a->block, a->bytes) holds every buffer; hs_acts_free releases it, a large
 * one kept for the next allocation of its size (hs_free_kept, memory.h). */
int hs_acts_alloc(hs_acts *a, const hs_model_config *c, int B, int T, int mode);

/* An encoder's padding mask for the a->B rows of a continuation
 * (hs_forward_from*) that never saw tokens: `copies` stacked copies of the
 * B / copies sequences of tokens ((B / copies), T). Nothing for a causal LM. */
void hs_acts_set_valid(hs_acts *a, const hs_model *m, const int32_t *tokens, int copies);

/* The attention mask of the model over a's rows: causal, or an encoder's
 * bidirectional one over the keys that are not padding (no valid array
 * when none is). */
hs_attn_mask hs_acts_attn_mask(const hs_acts *a, const hs_model_config *c);

/* Runs the next forwards on the first B of the allocated rows (B <= B_alloc). */
int hs_acts_set_batch(hs_acts *a, int B);
void hs_acts_free(hs_acts *a);

/* 1 when a is the block hs_acts_alloc laid out for configuration c: its
 * size the size table's, 1 <= B <= the batch allocated, every buffer the
 * forward writes inside the block (the logits excepted), each layer's input
 * the previous layer's output. The forwards and the backward assert it at entry in debug builds
 * (they index every buffer by B, T and the layer's widths alone). */
int hs_acts_sane(const hs_acts *a, const hs_model_config *c);

/* Hook points on the forward pass (SPEC §5): the table the model calls.
 * Observers (gates, maps, map rows) and the writable sites of hooks.h:
 * resid_pre, attn_out, mlp_out, q, k, v, z and pattern, each a function
 * with its own context, so interventions, an activation cache and an
 * observer can share one forward. A site with no function costs a pointer
 * test. Analyses do not write site functions: capture/ fills `site` from
 * data (intervene.h: zero, mean, resample, replace, add; cache.h: record).
 * A callback returning non-zero stops the forward with that status (its
 * message set by the callback). */
typedef struct {
    void *ctx; /* of on_maps and on_rows */
    /* NULL, or n_layer pointers each NULL or gates xi multiplying z: (H_l),
     * or (B, H_l) with gates_per_seq (per-sequence gradients, importance).
     * Gates act after the z site and are seen by the backward. */
    const hs_real *const *gates;
    int gates_per_seq;
    /* post-softmax maps (B,H,T,T) of layer l, after its pattern hook; needs
     * maps (TRAIN or MAPS acts) */
    int (*on_maps)(void *ctx, int layer, const hs_real *att, int B, int H, int T);
    /* map rows as the attention kernel mixes them (see hs_row_observer):
     * statistics over long contexts without keeping maps */
    void (*on_rows)(void *ctx, int layer, int thread, int b, int h, int t0, int n,
                    const hs_real *P, int ldp, int keys);
    /* writable sites (hooks.h), called for every layer; forward only: the
     * backward does not see what they change. A pattern hook needs maps. */
    hs_site_hook site[HS_N_SITES];
} hs_hooks;

/* Forward over tokens (B,T); with targets (B,T) also the loss (a->loss,
 * a->losses). hooks may be NULL. Fails on tokens outside the vocabulary,
 * targets outside it other than HS_TARGET_IGNORE (layers.h), or T beyond
 * n_ctx with learned positions. */
int hs_forward(hs_acts *a, const hs_model *m, const int32_t *tokens, const int32_t *targets,
               const hs_hooks *hooks);

/* A sequence classifier's outputs (SPEC §16) after a forward without
 * targets: out (B, n_labels) from row pool[b] of each sequence -- an
 * encoder's through dense + tanh into the classifier, a decoder's final-norm
 * output into `score`. HS_EINVAL for a model without a classification head
 * or a position outside the sequence. */
int hs_classify(hs_real *out, const hs_acts *a, const hs_model *m, const int *pool);

/* The backward of hs_classify after a training forward: dhidden (B,T,d) =
 * the gradient of sum(dout . out) with respect to the hidden state the
 * head read (0 but at the pooled rows); with g (may be NULL) the head's
 * weight gradients accumulated into g's cls_* tensors. */
int hs_classify_backward(hs_real *dhidden, hs_weights *g, const hs_real *dout, const hs_acts *a,
                         const hs_model *m, const int *pool);

/* The row HF's classifier pools in one sequence of T tokens: an encoder's
 * first; a decoder's last that is not pad_id (0 when every one is), or T-1
 * without a pad_id. */
int hs_classify_pool(const hs_model_config *c, const int32_t *tokens, int T);

/* The clean forward of tokens up to layer `layer`'s residual after
 * attention (acts' r1 of that layer), for analyses that continue from there. */
int hs_forward_to(hs_acts *a, const hs_model *m, const int32_t *tokens, int layer,
                  const hs_hooks *hooks);

/* Continues a forward from the residual after attention of `layer`, which
 * the caller has written into a->layer[layer].r1 (with a parallel residual
 * also the layer's input a->layer[layer].in, whose ln2 the MLP reads): the
 * rest of that layer, the layers above, logits and (with targets) the loss.
 * Rows of the batch may hold different interventions of the same sequences:
 * the layers below are not recomputed. */
int hs_forward_from(hs_acts *a, const hs_model *m, int layer, const int32_t *targets);

/* hs_forward_from with hooks: the site hooks of the part that runs (layer
 * `layer`'s mlp_out, every site of the layers above, resid_pre of
 * n_layer). Activation patching continues stacked copies of a batch this
 * way, each copy with its own intervention. */
int hs_forward_from_hooks(hs_acts *a, const hs_model *m, int layer, const int32_t *targets,
                          const hs_hooks *hooks);

/* hs_forward_from_hooks for callers that read only the last position's
 * logits (activation patching's logit difference): the layers below the
 * last run whole, the last layer's attention too (its keys span every
 * position), then its MLP, the final norm and the unembedding run on the
 * last position alone. The logits of sequence b are a->logits[b*V ..
 * b*V+V). What the last layer keeps (and the previous layer's output, its
 * input) is left holding that one position per sequence, and hooks after
 * the last layer's attention see views of one position. a->T is unchanged
 * on return. Saves the last layer's MLP and the unembedding at T-1
 * positions. */
int hs_forward_from_last(hs_acts *a, const hs_model *m, int layer, const hs_hooks *hooks);

/* The forward tensor of site s of layer l as the forward left it in a, the
 * view a site hook saw: resid_pre (layer 0..n_layer; n_layer: the final
 * residual), attn_out, mlp_out, q, k, v, z, and pattern where a keeps maps
 * (training activations: every layer's; HS_EINVAL otherwise; attn_scores
 * is never kept, HS_EINVAL). MLA layers:
 * q (B,T,H,n+r) after RoPE, k and v the normalised latent (B,T,1,C), the
 * tensor their gradient observers see. For analyses that compare two runs'
 * sites (attribution patching). */
int hs_acts_site_view(hs_site_view *v, const hs_acts *a, const hs_model_config *c, hs_site s,
                      int layer);

/* The maps att (B,T,T) of query head h of layer l with the queries of run
 * q_run and the keys of run k_run (their key/value head h / (H/G); MLA: the
 * k_nope from k_run's latent, the rope key from pe_run), other members of
 * the runs' activations of one model and batch: the pattern a patch of a
 * head's queries or keys makes, for AtP*'s QK fix. */
int hs_acts_head_maps(hs_real *att, const hs_model *m, int l, int h, const hs_acts *q_run,
                      const hs_acts *k_run, const hs_acts *pe_run);

/* What hs_backward_from reports and where it stops the gradient (hooks.h);
 * every member may be NULL. */
typedef struct {
    void *ctx;                    /* of every function below */
    /* gradient observers: site s's gradient at every layer, in the site's
     * layout (resid_pre also at layer n_layer, the final residual) */
    hs_grad_fn site[HS_N_SITES];
    /* the gradient with respect to each receiver's input (SPEC §15): every
     * query head, key/value head (keys and values apart), MLP of every
     * layer and the final norm (layer n_layer). One backward reports them
     * all: a head's share is taken through its own rows of the projection
     * and its own input norm backward, at the cost of one norm backward per
     * receiver. Needs q/k norms per head or none. */
    hs_recv_fn receiver;
    /* NULL, or n_layer flags: no gradient flows back through the attention
     * and MLP outputs of a flagged layer into the residual (GradDrop, AtP*):
     * its sites and receivers see 0; the residual passes it unchanged (post-norm
     * layers: through their norms). */
    const unsigned char *stop;
} hs_grad_hooks;

/* The backward of an objective from its gradient dlogits (B,T,V) with
 * respect to the logits (after the final soft-cap: the logits a forward
 * without targets left) after a training forward with the same hooks:
 * reports what gh asks for (NULL: nothing) and computes no weight gradient.
 * Rows of dlogits that are all 0 cost nothing in the unembedding (a logit
 * difference at the last position runs B of B*T rows through it). Costs
 * about one training backward without weight gradients, plus what the
 * observers do. Overwrites the backward scratch only, so several backwards
 * (other objectives, other stopped layers) may follow one forward. */
int hs_backward_from(hs_acts *a, const hs_model *m, const hs_real *dlogits, const hs_hooks *hooks,
                     const hs_grad_hooks *gh);

/* A forward in which every receiver of the circuit graph reads a residual
 * stream of its own (SPEC §15's faithfulness run): for each layer the plan
 * gives each query head's, key/value head's keys' and values' input, then
 * hears each head's output z^h W_o^h (no bias) of this run; then the MLP's
 * input, and hears its output (head -1); at last the final norm's input
 * (layer n_layer). Each input passes its own input norm. The logits land
 * in a->logits (soft-capped). Pre-norm layers without output norms or q/k
 * norms over the whole projection only (HS_EINVAL naming the reason: there
 * the residual is not a sum of the nodes' outputs, or no head's query is
 * its own input's). Costs a forward plus, per head, one norm and the head's
 * projection rows (MLA: each head's whole query projection). */
typedef struct {
    void *ctx;
    int (*input)(void *ctx, int layer, hs_recv_kind kind, int head, hs_real *x /* (B,T,d) */);
    int (*output)(void *ctx, int layer, int head, const hs_real *y /* (B,T,d) */);
} hs_split_plan;

/* HS_OK when hs_forward_split can run c, else HS_EINVAL saying why. */
int hs_split_check(const hs_model_config *c);

int hs_forward_split(hs_acts *a, const hs_model *m, const hs_split_plan *p);

/* The backward of an objective from its gradient dhidden (B,T,d) with
 * respect to the hidden state a classifier reads (the final norm's output,
 * or the last layer's: hs_classify_backward) after a training forward with
 * the same hooks: weight gradients into grads (NULL: none) and gate
 * gradients into dgates (NULL: none), as hs_backward. */
int hs_backward_hidden(hs_weights *grads, hs_real *const *dgates, hs_acts *a, const hs_model *m,
                       const int32_t *tokens, const hs_real *dhidden, const hs_hooks *hooks);

/* Backward of the loss sum(losses) * loss_scale (1/(B*T): the mean) after a
 * training forward with targets and the same hooks. Accumulates into grads
 * (bound to a buffer with hs_weights_bind; NULL skips every weight
 * gradient) and, when dgates is non-NULL, into dgates[l] (the gates' shape)
 * for every layer with gates. */
int hs_backward(hs_weights *grads, hs_real *const *dgates, hs_acts *a, const hs_model *m,
                const int32_t *tokens, const int32_t *targets, const hs_hooks *hooks,
                hs_real loss_scale);

#endif
