/* Gradient head importance (SPEC §5). */
#ifndef HS_STUDY_IMPORTANCE_H
#define HS_STUDY_IMPORTANCE_H

#include "importance.h"
#include "study.h"

/* No options of its own: the data and its batches are the environment's. */
typedef struct {
    char none;
} hs_importance_opts;

typedef struct {
    hs_study_rows rows;
    /* importance (each layer's vector over its L2 norm) and importance_raw
     * per head, with the standard error over sequences */
    hs_head_table table;
    long sequences;
    int least_layer, least_head; /* the lowest importance */
    const char *least_attn;      /* its attention type (--pairs; NULL: self) */
} hs_importance_result;

/* Nothing to refuse beyond what the inputs checked: HS_OK. */
int hs_importance_check(hs_importance_opts *o, const hs_study_env *env);

/* Gradient head importance (hs_importance_compute) of env's model on its
 * data as rows. Costs one forward and backward per batch. Stopped by
 * env->io.stop (HS_EINTR). r is initialised here; free it with
 * hs_importance_result_free. */
int hs_importance_study(hs_importance_result *r, const hs_importance_opts *o,
                        const hs_study_env *env);
void hs_importance_result_free(hs_importance_result *r);

extern const hs_study_kind hs_importance_kind;

#endif
