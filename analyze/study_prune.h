/* Iterative pruning by importance, and the pruned model written. */
#ifndef HS_STUDY_PRUNE_H
#define HS_STUDY_PRUNE_H

#include "importance.h"
#include "study.h"
#include "task_heads.h"

/* Pruning on env's data (importance) evaluated on env->val (or the data),
 * env->batch x env->seq_len, env->max_batches per evaluation. */
typedef struct {
    /* step_percent, max_percent, min_heads_per_layer, one_shot as hs_prune
     * takes them (the batches, val, stop and on_step are the study's) */
    hs_prune_opts prune;
    const char *out; /* NULL, or a directory for the pruned model */
    int structural;  /* out without the pruned heads; else W_o columns zeroed (dense) */
    int force;       /* overwrite a checkpoint in out */
    /* --method: "importance" (the default, NULL) or "l0" (a task's L0 gates,
     * SPEC §16: one run per lambda, l0.lambda the run's) */
    const char *method;
    hs_l0_opts l0;   /* batch, stop and progress are the study's */
    /* --pairs: the attention types pruned jointly, "enc,dec,cross" or a
     * subset (NULL: all three) */
    const char *attn;
    /* after every step (step 0: unpruned), for a caller's report */
    void (*on_step)(void *ctx, int step, int pruned, double fraction, double loss,
                    double stderr_loss);
    void *ctx;
} hs_prune_study_opts;

typedef struct {
    hs_study_rows rows;   /* the mask and latencies (each step's curve point is committed to
                             env->ix as it completes: an interrupted run keeps its curve) */
    hs_head_table table;  /* pruned (0/1 per head); with out: forward_ms_unpruned, forward_ms_pruned */
    hs_study_curve curve; /* pruning: x = fraction pruned, y = validation loss (a task's) */
    hs_study_curve metric_curve; /* --task: pruning_<metric>, y = the headline metric; l0:
                                    l0, x = heads open, y = the headline metric */
    hs_l0_result l0;      /* --method l0 */
    int n_pruned, heads;
    double ms[2];         /* with out: hs_forward_ms of the model and of the written one */
    int hf_form;          /* with out --structural: written as config.json's pruned_heads
                             (bert, roberta, gpt2); 0: headscope's own form */
} hs_prune_result;

/* The percentages in (0, 100] (HS_EINVAL naming them); with out, no
 * checkpoint there unless force (HS_EIO) and a written model that can be
 * made: --structural of a model whose heads cannot be cut apart (MLA,
 * olmo2's whole-projection q/k norms) is HS_EUNSUPPORTED. Cheap. */
int hs_prune_study_check(hs_prune_study_opts *o, const hs_study_env *env);

/* Iterative pruning by importance (hs_prune), the final mask as rows, and
 * with o->out the pruned model written (hs_checkpoint_save) beside its
 * forward latency and the unpruned model's (the written model recorded as
 * the run's artifact): gating alone makes nothing
 * faster, a structural model is smaller. Costs one importance pass (a
 * forward and backward over the data) per step, plus a validation
 * evaluation per step. r is initialised here; free it with
 * hs_prune_result_free (also after a failure). */
int hs_prune_study(hs_prune_result *r, const hs_prune_study_opts *o, const hs_study_env *env);
void hs_prune_result_free(hs_prune_result *r);

extern const hs_study_kind hs_prune_kind;

#endif
