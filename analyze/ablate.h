/* Head ablation (SPEC §5): for head (l,h), replace its output z by zero, by
 * its mean over the evaluation data, or by z of the next sequence of the
 * same batch, and measure the loss delta per sequence.
 *
 * The fast path never recomputes what an ablation cannot change: the clean
 * forward runs once per batch up to layer l's attention; maps of layer l are
 * unchanged, so W_o's output is the clean one plus the head's change
 * (z' - z) W_o^(h) (hs_head_change_resid: where an output norm follows the
 * attention it is applied again); several (head, kind) ablations are
 * stacked into one batched continuation through the layers above. */
#ifndef HS_ABLATE_H
#define HS_ABLATE_H

#include <signal.h>
#include <stddef.h>

#include "stats.h"
#include "tokens.h"
#include "transformer.h"
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

/* The residual after attention of layer l when the output z of head h
 * changes by dz (N, dh) from a run in which the layer's input was in (N, d):
 *   base + dz W_o^(h)T                   base: that run's residual after
 *                                        attention (the attention output is
 *                                        added as it is)
 *   in + norm_out(base + dz W_o^(h)T)    out_norm (gemma2, gemma3_text, olmo2):
 *                                        base is W_o's output there (bias
 *                                        included, before the norm), and the
 *                                        change passes the output norm
 * (in is read only with out_norm). The result goes to rows [row0, row0 + N)
 * of la's r1 -- with out_norm also of its attn_raw, attn_out and that
 * norm's statistics, as a forward leaves them -- from where hs_forward_from
 * continues. Why one function: ablation and patching both continue from a
 * head's change, and adding dz W_o^(h) to r1 is exact only without an
 * output norm. Costs one (N, dh) x (dh, d) product, and with out_norm one
 * norm of N rows. */
void hs_head_change_resid(hs_layer_acts *la, size_t row0, const hs_real *base, const hs_real *in,
                          const hs_real *dz, int h, const hs_model *m, int l, size_t N);

#endif
