/* Heads measured on a labelled task (SPEC §16): ablation with the task's
 * loss and headline metric, gradient importance with each example's loss,
 * the objective of iterative pruning, and Voita et al.'s L0 head gates.
 * Every pass reads the task's examples in batches of `batch` in file order
 * (the last one shorter), each right-padded to the task's length with the
 * attention mask; a result does not depend on the batching except where
 * resample ablation takes its donors from the batch. */
#ifndef HS_TASK_HEADS_H
#define HS_TASK_HEADS_H

#include <signal.h>

#include "importance.h"
#include "stats.h"
#include "task.h"
#include "train.h"

/* Iterative pruning's objective on a task (hs_prune_opts' importance and
 * evaluate, with a pointer to this as obj_ctx): importance with each
 * example's loss, and the task loss with the gates; `last` holds the
 * numbers of the last evaluation (the pruning curve of the metric). */
typedef struct {
    const hs_model *m;
    const hs_task *t;
    int batch;
    volatile sig_atomic_t *stop;
    hs_task_eval_result last;
} hs_task_objective;

int hs_task_objective_importance(void *obj, hs_importance *imp, const hs_real *const *gates);
int hs_task_objective_evaluate(void *obj, const hs_hooks *hooks, double *loss, double *stderr_loss);

typedef struct {
    int batch;
    int kinds;                    /* bit set of 1 << HS_ABLATE_* (ablate.h) */
    const unsigned char *head_on; /* (n_layer * HS_MAX_HEADS) 1 = ablate; NULL = all */
    volatile sig_atomic_t *stop;
    hs_progress_fn progress;      /* ablations done of total (may be NULL) */
    void *ctx;
} hs_task_ablate_opts;

/* For every head asked and every kind: "loss_delta_<kind>" (the mean over
 * examples of the ablated minus the clean loss, SPEC §5's standard error)
 * and "<metric>_delta_<kind>" of the task's headline metric (the paired
 * jackknife), appended to tb, after the clean model's numbers as
 * model-wide rows (hs_task_numbers_to_table). zero sets the head's z to 0;
 * mean to its mean over every non-padding position of every example;
 * resample gives example i the z of example (i+1) mod B of its batch, at
 * the positions the donor has (the rest keep their own). One pass over the
 * task per ablation. */
int hs_task_ablate(hs_head_table *tb, const hs_model *m, const hs_task *t,
                   const hs_task_ablate_opts *o);

/* Gradient importance (importance.h) with L_n the loss of example n: one
 * forward and backward per batch, gates per example (NULL: all 1; else per
 * layer, as hs_importance_compute's); out (n x k, may be NULL) gets the
 * outputs of those forwards (with gates 1: the model's own). */
int hs_task_importance(hs_importance *r, double *out, const hs_model *m, const hs_task *t,
                       int batch, const hs_real *const *gates, volatile sig_atomic_t *stop,
                       hs_progress_fn progress, void *progress_ctx);

/* The L0 gates of one λ (SPEC §16). */
typedef struct {
    double lambda;
    int steps;               /* 0: 500 */
    double lr;               /* 0: 0.1 */
    unsigned long long seed; /* of u, drawn per head per step */
    int batch;
    int train_model;         /* also Adam on the weights, at lr (a float copy trained with the
                                gates; the numbers are the copy's; the model is not changed) */
    volatile sig_atomic_t *stop;
    hs_progress_fn progress; /* steps done of steps */
    void *ctx;
} hs_l0_opts;

typedef struct {
    double *log_alpha, *gate;  /* [l * HS_MAX_HEADS + h]: log alpha, the deterministic gate */
    int open;                  /* heads with gate > 0 */
    hs_task_eval_result eval;  /* the task's numbers with the gates (lm: loss, loss_se, n) */
    int lm;                    /* gates on the language-model loss (hs_lm_l0) */
} hs_l0_result;

/* The gate of each head g = clip(s (r - l) + l, 0, 1), s = sigma((ln u -
 * ln(1-u) + log_alpha) / beta), beta 1/3, l -0.1, r 1.1, log_alpha from 3;
 * each step the next `batch` examples (in file order, wrapping), loss =
 * their mean task loss + lambda * sum_heads sigma(log_alpha - beta
 * ln(-l/r)), Adam on log_alpha (lr, torch's betas and eps; with
 * train_model on a copy's weights too). Then the
 * deterministic gates clip(sigma(log_alpha)(r - l) + l, 0, 1) and the task's
 * numbers with them. r is initialised here; free it with hs_l0_result_free. */
int hs_task_l0(hs_l0_result *r, const hs_model *m, const hs_task *t, const hs_l0_opts *o);
void hs_l0_result_free(hs_l0_result *r);

/* What L0 gates are trained on: each step's batch (the gates in hooks; the
 * gate gradients of its mean loss into dgates; with grads, the weights'
 * too), and the numbers with the final gates; the gated heads as layers of
 * heads (heads NULL: the model's; an encoder-decoder's units, pairs_heads.h,
 * whose gates the objective maps onto the model). */
typedef struct {
    int (*step)(void *ctx, const hs_model *m, const hs_hooks *hooks, hs_real *const *dgates,
                hs_weights *grads);
    int (*finish)(void *ctx, const hs_model *m, const hs_hooks *hooks, hs_l0_result *r);
    void *ctx;
    const hs_model_config *heads;
} hs_l0_objective;

/* hs_task_l0's gates and their training on any objective (r's arrays
 * indexed by obj's layers of heads). */
int hs_l0_gates(hs_l0_result *r, const hs_model *m, const hs_l0_opts *o,
                const hs_l0_objective *obj);

/* The same gates on the language-model loss (SPEC §16: `--method l0`
 * without --task): each step the next batch of data (B = o->batch, T; in
 * order, wrapping), its mean token loss (an encoder's: masked-LM) plus the
 * penalty; then the loss over max_batches (0: all) with the gates. */
int hs_lm_l0(hs_l0_result *r, const hs_model *m, const hs_tokens *data, int T, size_t max_batches,
             const hs_l0_opts *o);

/* Fine-tunes m (float parameters) on t: each step the next B examples (in
 * file order, wrapping), their mean task loss, Adam (AdamW with
 * weight_decay) on every parameter, the classifier's included; warmup and
 * clip as hs_train's, on_step each step (o->val is not read). */
int hs_task_train(hs_model *m, const hs_task *t, const hs_train_opts *o);

/* m with a new sequence-classification head of k labels (SPEC §16: train
 * --num-labels): the language-model head gone, the classifier (and an
 * encoder's pooler, where m has none) drawn N(0, init_std) from seed,
 * biases 0, id2label LABEL_0 .. LABEL_k-1; a head of m with k outputs is
 * kept. out is initialised here. HS_EUNSUPPORTED for a family without one. */
int hs_task_add_head(hs_model *out, const hs_model *m, int k, unsigned long long seed);

#endif
