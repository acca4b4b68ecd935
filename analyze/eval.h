/* Evaluation loss over a token shard (SPEC §5): the mean next-token loss
 * over every predicted position, and the standard error of the
 * per-sequence mean losses (sample std / sqrt(n)). */
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
} hs_eval_result;

/* Progress callback: batches done of total. */
typedef void (*hs_progress_fn)(void *ctx, size_t done, size_t total);

/* max_batches 0: every whole batch. HS_EINVAL when the data holds no batch. */
int hs_evaluate(hs_eval_result *r, const hs_model *m, const hs_tokens *data, int B, int T,
                size_t max_batches, const hs_hooks *hooks, hs_progress_fn progress, void *ctx);

/* HS_OK when r's loss is finite; otherwise HS_EINVAL naming the first
 * non-finite sequence: "the loss of sequence 3 is NaN: the model's weights
 * or inputs are not finite (--allow-nonfinite keeps such results)". A caller
 * that reports or records r calls this unless the user allowed non-finite
 * results. */
int hs_eval_check_finite(const hs_eval_result *r);

#endif
