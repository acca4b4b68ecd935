/* Gradient studies of an encoder-decoder's heads on its pairs (SPEC §17):
 * Michel et al.'s importance of every head of every attention type and
 * their joint pruning. Both run over units, one per (attention type,
 * layer) -- the encoder's layers, then the decoder's self-attention, then
 * its cross-attention, of the types selected -- which importance.h's
 * results and hs_prune's masks index as they index layers. */
#ifndef HS_PAIRS_HEADS_H
#define HS_PAIRS_HEADS_H

#include <signal.h>

#include "importance.h"
#include "pairs.h"
#include "task_heads.h"
#include "train.h"

typedef struct {
    int n;                                 /* units */
    hs_attn_type type[HS_MAX_LAYERS];      /* each unit's: enc, dec or cross */
    int layer[HS_MAX_LAYERS];              /* its layer of the model */
    hs_model_config cfg;                   /* the model's, n_layer = n, n_head per unit */
} hs_pairs_units;

/* The units of c's layers of the types set in types (1 << HS_ATTN_ENC |
 * DEC | CROSS). HS_EINVAL when more than HS_MAX_LAYERS. */
int hs_pairs_units_init(hs_pairs_units *u, const hs_model_config *c, unsigned types);

/* types from a list of "enc", "dec", "cross" separated by commas (--attn);
 * HS_EINVAL naming the word otherwise. */
int hs_attn_types_parse(unsigned *types, const char *list);

/* The model's gates (n_layer pointers each, as hs_s2s_acts takes them) of
 * unit gates g (a pointer per unit, NULL: none). */
void hs_pairs_units_gates(const hs_real **self, const hs_real **cross, const hs_pairs_units *u,
                          const hs_real *const *g, int n_layer);

/* Every unit's heads' importance on the pairs, B a batch: for each pair,
 * its summed target-token loss L, |dL / dxi| at the gates (unit gates,
 * NULL: all 1; heads outside the units ungated) into r (allocated for
 * u->cfg). progress after each batch. */
int hs_pairs_importance(hs_importance *r, const hs_model *m, const hs_pairs *p,
                        const hs_pairs_units *u, int B, const hs_real *const *gates,
                        volatile sig_atomic_t *stop, hs_progress_fn progress, void *ctx);

/* Appends r's rows as hs_importance_to_table does, each head at its layer
 * within its stack with its attention type (rows' attn). */
int hs_pairs_importance_to_table(hs_head_table *t, const hs_importance *r,
                                 const hs_pairs_units *u, const hs_model_config *c);

/* hs_prune's objective on pairs (hs_prune_opts' importance and evaluate,
 * obj_ctx an hs_pairs_objective; the gates are the units'). */
typedef struct {
    const hs_model *m;
    const hs_pairs *p;
    const hs_pairs_units *u;
    int B;
    volatile sig_atomic_t *stop;
} hs_pairs_objective;

int hs_pairs_objective_importance(void *obj, hs_importance *imp, const hs_real *const *gates);
int hs_pairs_objective_evaluate(void *obj, const hs_hooks *hooks, double *loss,
                                double *stderr_loss);

/* Voita et al.'s L0 gates on the units' heads (hs_task_l0's gates, SPEC
 * §16): each step the next o->batch pairs (file order, each pass's last
 * batch what is left), their mean target-token loss plus the penalty; then
 * the pooled loss of every pair with the deterministic gates (r->lm set,
 * r->eval's loss, loss_se, n). r's arrays are indexed by unit. */
int hs_pairs_l0(hs_l0_result *r, const hs_model *m, const hs_pairs *p, const hs_pairs_units *u,
                const hs_l0_opts *o);

/* Trains the encoder-decoder m in place on the pairs (SPEC §17): each step
 * the next batch of o->B pairs in file order (each pass's last batch what
 * is left), the mean target-token loss, its backward (hs_s2s_backward),
 * clipping and Adam/AdamW as hs_train; on val (NULL: none) the pooled loss
 * every o->val_every steps and after the last (o->val_batches batches, 0:
 * all). o->T is not read. HS_EINTR when stopped (m holds the last step),
 * HS_EINVAL when the loss is not finite. */
int hs_pairs_train(hs_model *m, const hs_pairs *p, const hs_pairs *val, const hs_train_opts *o);

#endif
