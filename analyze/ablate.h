/* Head ablation (SPEC §5): for head (l,h), replace its output z by zero, by
 * its mean over the evaluation data, or by z of the next sequence of the
 * same batch, and measure the loss delta per sequence.
 *
 * The fast path never recomputes what an ablation cannot change: the clean
 * forward runs once per batch up to layer l's attention; maps of layer l are
 * unchanged, so the ablated attention output is the clean one plus the
 * head's change (z' - z) W_o^(h); several (head, kind) ablations are stacked
 * into one batched continuation through the layers above. */
#ifndef HS_ABLATE_H
#define HS_ABLATE_H

#include <signal.h>
#include <stddef.h>

#include "stats.h"
#include "tokens.h"
#include "weights.h"

enum { HS_ABLATE_ZERO = 0, HS_ABLATE_MEAN = 1, HS_ABLATE_RESAMPLE = 2, HS_ABLATE_KINDS = 3 };

const char *hs_ablate_kind_name(int kind); /* "zero", "mean", "resample" */

typedef struct {
    double delta;  /* mean over sequences of ablated - clean loss */
    double stderr_delta;
    long n;        /* sequences */
} hs_ablate_stat;

/* Results of one layer: stat[kind * H + h]; heads or kinds not run have n 0. */
typedef struct {
    int layer, n_heads;
    const hs_ablate_stat *stat;
} hs_ablate_layer;

typedef struct {
    int B, T;
    size_t max_batches;          /* 0: every whole batch */
    int kinds;                   /* bit set of 1 << HS_ABLATE_* */
    const unsigned char *head_on; /* (n_layer * HS_MAX_HEADS) 1 = ablate; NULL = all */
    int stack;                   /* ablations per batched continuation (0: choose) */
    int naive;                   /* reference path: one full forward per ablation */
    size_t keep_bytes;           /* budget for the clean activations the fast path keeps
                                    (0: 256 MiB); above it each layer recomputes them */
    double clean_loss;           /* out: the clean loss */
    volatile sig_atomic_t *stop;
    /* Called once per layer when its heads are done; non-zero stops. */
    int (*on_layer)(void *ctx, const hs_ablate_layer *r);
    void (*progress)(void *ctx, size_t done, size_t total);
    void *ctx;
} hs_ablate_opts;

/* Appends one layer's results to t: for each kind, every head that ran
 * (n > 0) as "loss_delta_<kind>" with its stderr and sequence count. */
int hs_ablate_layer_to_table(hs_head_table *t, const hs_ablate_layer *r);

/* The options' own consistency, before any work (HS_EINVAL with a message
 * naming the option): a method, positive B and T, T within a learned
 * position table, and B >= 2 for resample, whose donor is the next sequence
 * of the same batch. hs_ablate checks the same; a caller that records runs
 * calls it first, so bad options record nothing. */
int hs_ablate_check(const hs_model_config *c, const hs_ablate_opts *o);

/* Runs the ablations; results go to on_layer. */
int hs_ablate(const hs_model *m, const hs_tokens *data, hs_ablate_opts *o);

#endif
