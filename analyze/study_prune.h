/* Iterative pruning by importance, and the pruned model written. */
#ifndef HS_STUDY_PRUNE_H
#define HS_STUDY_PRUNE_H

#include "importance.h"
#include "study.h"
#include "study_prune.h"

typedef struct {
    /* B, T, max_batches, step_percent, max_percent, min_heads_per_layer,
     * one_shot, val and stop as hs_prune takes them (its on_step and ctx are
     * the study's own) */
    hs_prune_opts prune;
    const char *out; /* NULL, or a directory for the pruned model */
    int structural;  /* out without the pruned heads; else W_o columns zeroed (dense) */
    /* each step's curve point is committed to this run as it completes, so
     * that an interrupted run keeps its curve (ix NULL: not recorded) */
    hs_index *ix;
    int64_t run_id;
    /* after every step (step 0: unpruned), for a caller's report */
    void (*on_step)(void *ctx, int step, int pruned, double fraction, double loss,
                    double stderr_loss);
    void *ctx;
    /* 0: a non-finite validation loss fails the study (HS_EINVAL) before
     * its curve point is recorded; 1: kept (as hs_study_io's) */
    int allow_nonfinite;
} hs_prune_study_opts;

typedef struct {
    hs_head_table table;  /* pruned (0/1 per head); with out: forward_ms_unpruned, forward_ms_pruned */
    hs_study_curve curve; /* pruning: x = fraction pruned, y = validation loss */
    int n_pruned, heads;
    double ms[2];         /* with out: hs_forward_ms of the model and of the written one */
} hs_prune_result;

/* HS_EINVAL (saying why) when the written model cannot be made: --structural
 * of a model whose heads cannot be cut apart (MLA, olmo2's whole-projection
 * q/k norms). Cheap: a command calls it before it opens its run. */
int hs_prune_study_check(const hs_prune_study_opts *o, const hs_model_config *c);

/* Iterative pruning by importance (hs_prune), the final mask as rows, and
 * with o->out the pruned model written (hs_checkpoint_save) beside its
 * forward latency and the unpruned model's: gating alone makes nothing
 * faster, a structural model is smaller. Costs one importance pass (a
 * forward and backward over the data) per step, plus a validation
 * evaluation per step. r is initialised here; free it with
 * hs_prune_result_free (also after a failure). */
int hs_prune_study(hs_prune_result *r, const hs_model *m, const hs_tokens *data,
                   const hs_prune_study_opts *o);
void hs_prune_result_free(hs_prune_result *r);

#endif
