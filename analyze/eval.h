/* Evaluation loss over a token shard (SPEC §5): the mean next-token loss
 * over every predicted position (an encoder's: the masked-LM loss over the
 * chosen positions, SPEC §14), and the standard error of the per-sequence
 * mean losses (sample std / sqrt(n)). */
#ifndef HS_EVAL_H
#define HS_EVAL_H

#include <stddef.h>

#include "tokens.h"
#include "transformer.h"

typedef struct {
    double loss;
    double stderr_loss;
    size_t tokens;    /* predicted positions */
    size_t sequences;
    size_t batches;
    /* the first sequence (0-based) whose loss is not finite, and that loss
     * (NaN or +-inf); nonfinite_seq is -1 when every loss is finite */
    long nonfinite_seq;
    double nonfinite_loss;
    int has_bleu;  /* an encoder-decoder's pairs with --bleu: */
    double bleu;   /* corpus BLEU (0-100, sacreBLEU's defaults) of the greedy outputs */
} hs_eval_result;

/* Progress callback: batches done of total. */
typedef void (*hs_progress_fn)(void *ctx, size_t done, size_t total);

/* The summed loss of one sequence's T positions (losses and targets of a
 * forward with targets) over the targets that are not HS_TARGET_IGNORE,
 * *n of them: T for a causal LM, the chosen positions for an encoder's
 * masked-LM batch. */
double hs_seq_loss_sum(const hs_real *losses, const int32_t *targets, int T, int *n);

/* max_batches 0: every whole batch. HS_EINVAL when the data holds no batch.
 * With masked-LM data (data->mlm.on: an encoder's, mlm.h) the loss pools
 * every chosen position and the stderr runs over the per-sequence means of
 * the sequences with at least one (SPEC §14); tokens counts the chosen
 * positions. */
int hs_evaluate(hs_eval_result *r, const hs_model *m, const hs_tokens *data, int B, int T,
                size_t max_batches, const hs_hooks *hooks, hs_progress_fn progress, void *ctx);

/* HS_OK when r's loss is finite; otherwise HS_EINVAL naming the first
 * non-finite sequence: "the loss of sequence 3 is NaN: the model's weights
 * or inputs are not finite (--allow-nonfinite keeps such results)". A caller
 * that reports or records r calls this unless the user allowed non-finite
 * results. */
int hs_eval_check_finite(const hs_eval_result *r);

#endif
