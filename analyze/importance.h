/* Head importance (Michel et al. 2019, SPEC §5) and joint pruning.
 *
 * importance: for each sequence n with summed token loss L_n, g = dL_n/dxi
 * at the model's gates; importance_raw = mean over sequences of |g|;
 * importance = each layer's vector divided by its L2 norm. One backward per
 * batch yields every sequence's gradient: the gates are per sequence, and
 * sequence n's loss depends only on its own. */
#ifndef HS_IMPORTANCE_H
#define HS_IMPORTANCE_H

#include <signal.h>
#include <stddef.h>

#include "eval.h"
#include "stats.h"
#include "tokens.h"
#include "weights.h"

typedef struct {
    int n_layer;
    int n_head[HS_MAX_LAYERS];
    /* [l * HS_MAX_HEADS + h] */
    double *raw, *raw_stderr, *norm, *norm_stderr;
    long n; /* sequences */
} hs_importance;

int hs_importance_alloc(hs_importance *r, const hs_model_config *c);
void hs_importance_free(hs_importance *r);

/* Appends r's rows to t: for every head (layer order) "importance" (the
 * normalised value) then "importance_raw", each with its stderr and the
 * sequence count. */
int hs_importance_to_table(hs_head_table *t, const hs_importance *r);

/* r (allocated for the model) from |g| per head over the sequences
 * (examples) in g_abs: raw, normalised and their standard errors. */
void hs_importance_of(hs_importance *r, const hs_head_stats *g_abs);

/* gates: NULL (all 1) or per layer (H_l) gates of a pruned model (0/1).
 * progress (may be NULL): batches done of total. */
int hs_importance_compute(hs_importance *r, const hs_model *m, const hs_tokens *data, int B,
                          int T, size_t max_batches, const hs_real *const *gates,
                          volatile sig_atomic_t *stop, hs_progress_fn progress,
                          void *progress_ctx);

/* The same under mpirun (dist.h): each rank runs its share of the batches
 * and rank 0 gets the result, equal to one process's; other ranks' r is
 * not meaningful. Without mpirun: hs_importance_compute without gates. */
int hs_importance_compute_dist(hs_importance *r, const hs_model *m, const hs_tokens *data, int B,
                               int T, size_t max_batches, volatile sig_atomic_t *stop,
                               hs_progress_fn progress, void *progress_ctx);

typedef struct {
    int B, T;
    size_t max_batches;
    double step_percent;     /* p: step k prunes to floor(k p N / 100) heads, N = all heads */
    double max_percent;      /* stop there (default 100) */
    int min_heads_per_layer; /* protected heads per layer */
    int one_shot;            /* importance computed once instead of every step */
    const hs_tokens *val;    /* validation data (loss after every step) */
    volatile sig_atomic_t *stop;
    /* After every step (step 0: unpruned): heads pruned, fraction, loss. */
    int (*on_step)(void *ctx, int step, int pruned, double fraction, double loss,
                   double stderr_loss);
    void *ctx;
    /* Optional (NULL: not called), after on_step: the mask after the step,
     * (n_layer * HS_MAX_HEADS) 1 = pruned, valid during the call. */
    int (*on_mask)(void *ctx, int step, const unsigned char *pruned);
    /* Optional: the objective when it is not the token data's (a task):
     * importance with the gates (per layer), and the validation loss
     * with gates in the hooks, each with obj_ctx. */
    int (*importance)(void *obj_ctx, hs_importance *imp, const hs_real *const *gates);
    int (*evaluate)(void *obj_ctx, const hs_hooks *hooks, double *loss, double *stderr_loss);
    void *obj_ctx;
    /* The heads pruned, as layers of heads (NULL: the model's): an
     * encoder-decoder's units (pairs_heads.h), with the objective's
     * callbacks; the gates and masks index its layers. */
    const hs_model_config *heads;
} hs_prune_opts;

/* Iterative joint pruning (SPEC §5). Step k (k = 1, 2, ...) prunes, among
 * the heads still in, those of lowest `importance` (recomputed on the pruned
 * model, or once with one_shot; ties: lower layer, then head) until
 * floor(k p N / 100) of the N heads are pruned, skipping heads of a layer
 * down to min_heads_per_layer; so counts never decrease and each step's
 * mask contains the previous one. A step whose count is not above the
 * previous one prunes nothing and is still recorded. It ends at max_percent
 * or when protection leaves nothing to prune. pruned (n_layer *
 * HS_MAX_HEADS) gets 1 for every pruned head; *n_pruned the count. */
int hs_prune(const hs_model *m, const hs_tokens *data, const hs_prune_opts *o,
             unsigned char *pruned, int *n_pruned);

/* Whether hs_prune_structural can cut c's heads: HS_OK, or HS_EINVAL saying
 * why not -- attention "mla" (its heads share one latent), or q/k norms over
 * the whole projection (olmo2: the RMS statistic of each position runs over
 * every head, so no head can go without changing the rest). A caller that
 * records runs calls it before any work. */
int hs_prune_structural_check(const hs_model_config *c);

/* A model without the pruned heads: rows of W_q and columns of W_o go, and
 * K/V heads whose every query head is pruned. GQA needs equal groups: a
 * group left with fewer heads than the largest keeps some pruned heads with
 * W_o zeroed (the gated model's function exactly); a layer left with none
 * keeps one such dead head. Per-head q/k norms (qwen3, gemma3_text) are
 * shared by every head and kept whole; sublayer output norms, soft-caps,
 * windows and the rest of the configuration carry over. The result is of
 * family headscope. HS_EINVAL where hs_prune_structural_check refuses. */
int hs_prune_structural(hs_model *out, const hs_model *m, const unsigned char *pruned);

#endif
