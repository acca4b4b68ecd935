/* The logit lens (SPEC §11): the residual stream entering each layer l
 * (l = 0 .. L-1: resid_pre of layer l) and the final residual (l = L: after
 * the last layer, before the final norm) decoded as if it were the final
 * residual: through the final norm (with its own scale, computed from that
 * residual) and the unembedding, with the model's own kernels -- its norm
 * ((1 + w) under norm_offset) and its final soft-cap (final_softcap) -- so
 * entry L is exactly the model's output.
 *
 * On a token shard: loss[l] = mean next-token cross-entropy over every
 * predicted position of a sequence, per sequence (SPEC §5's loss).
 * On a prompts file (clean sequences): loss[l] = -log p(answer) at the last
 * position, and logit_diff[l] = logit[answer] - logit[wrong] there, per
 * prompt. */
#ifndef HS_LOGIT_LENS_H
#define HS_LOGIT_LENS_H

#include <stddef.h>

#include "prompts.h"
#include "tokens.h"
#include "weights.h"

/* A sequence's loss when it has no target (--lines: a line of one token). */
#define HS_LENS_NO_TARGET (-1.0)

typedef struct {
    int n_layer;        /* L; entries 0 .. L */
    long n;             /* sequences (shard) or prompts */
    double *loss;       /* (n, L+1): mean over each sequence's targets, or HS_LENS_NO_TARGET */
    double *logit_diff; /* (n, L+1), prompts only (NULL on a shard) */
} hs_lens;

/* Prompts: batch prompts per forward. Costs one inference forward per batch
 * and L+1 unembeddings of one row per prompt. l is initialised here; free it
 * with hs_lens_free. */
int hs_lens_prompts(hs_lens *l, const hs_model *m, const hs_prompt_set *ps, int batch);

/* HS_OK, or HS_EINVAL saying why for a model without next-token logits to
 * decode into (an encoder, whose MLM head is no lens). */
int hs_logit_lens_check(const hs_model_config *c);

/* A token shard in batches of B x T (SPEC §4), at most max_batches (0: all).
 * Costs one forward and L+1 unembeddings of B*T rows per batch (the model's
 * logits buffer is reused, so no more memory than a forward). HS_EINVAL
 * when the shard holds no batch. */
int hs_lens_data(hs_lens *l, const hs_model *m, const hs_tokens *data, int B, int T,
                 size_t max_batches);
void hs_lens_free(hs_lens *l);

#endif
