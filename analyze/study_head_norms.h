/* Head output norms (Kobayashi et al. 2020), with a random-init control. */
#ifndef HS_STUDY_HEAD_NORMS_H
#define HS_STUDY_HEAD_NORMS_H

#include "study.h"

typedef struct {
    long seed; /* the control's (hs_control_model), >= 0 */
} hs_head_norms_opts;

typedef struct {
    hs_study_rows rows;
    /* head_output_norm and head_output_norm_control per head: the mean over
     * sequences of each sequence's mean over its positions (an encoder's:
     * over its real tokens) of ||z_h W_O^h||_2, the head's output as it
     * enters the residual stream before any output norm, with the standard
     * error over sequences */
    hs_head_table table;
    long sequences;
    int top_layer, top_head; /* the largest head_output_norm */
} hs_head_norms_result;

/* HS_OK when env's batches fit its model and data (a whole batch of batch x
 * seq_len); HS_EINVAL naming the option otherwise. */
int hs_head_norms_check(hs_head_norms_opts *o, const hs_study_env *env);

/* The output norm of every head of env's model and of its random-init
 * control on the batches of env's data. Costs one inference forward per batch per model and, per
 * layer, one (B*T, d_head) x (d_head, d) product per head. Stopped by
 * env->io.stop (HS_EINTR). r is initialised here; free it with
 * hs_head_norms_result_free, whatever the status. */
int hs_head_norms_study(hs_head_norms_result *r, const hs_head_norms_opts *o,
                        const hs_study_env *env);
void hs_head_norms_result_free(hs_head_norms_result *r);

extern const hs_study_kind hs_head_norms_kind;

#endif
