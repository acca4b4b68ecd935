/* The training loop over a token shard (SPEC §8 train): batches in data
 * order wrapping around (SPEC §4), constant learning rate unless a warmup is
 * asked for, optional validation every N steps. Reports through callbacks so
 * the command can draw progress and record curves. */
#ifndef HS_TRAIN_H
#define HS_TRAIN_H

#include <signal.h>

#include "tokens.h"
#include "weights.h"

typedef struct {
    int B, T;
    long steps;
    double lr, weight_decay, clip;
    long warmup;                 /* > 0: linear warmup over this many steps */
    const hs_tokens *val;        /* NULL: no validation */
    long val_every;              /* validate every N steps (and after the last) */
    size_t val_batches;          /* 0: all */
    void (*on_step)(void *ctx, long step, double loss, double lr);
    void (*on_val)(void *ctx, long step, double loss, double stderr_loss);
    void *ctx;
    volatile sig_atomic_t *stop; /* set asynchronously to stop after the current step */
} hs_train_opts;

/* Trains m in place. HS_EINTR when stopped early (m holds the last step).
 * With masked-LM data (data->mlm.on: an encoder's, mlm.h) each step's
 * batch gets its own choice of positions, from the recipe's seed and the
 * step; the loss is the mean over the chosen positions. */
int hs_train(hs_model *m, const hs_tokens *data, const hs_train_opts *o);

#endif
