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
} hs_eval_result;

/* Progress callback: batches done of total. */
typedef void (*hs_progress_fn)(void *ctx, size_t done, size_t total);

/* max_batches 0: every whole batch. HS_EINVAL when the data holds no batch. */
int hs_evaluate(hs_eval_result *r, const hs_model *m, const hs_tokens *data, int B, int T,
                size_t max_batches, const hs_hooks *hooks, hs_progress_fn progress, void *ctx);

#endif
