/* The uptraining study of Ainslie et al. (2023), Table 1 on our models: the
 * validation loss of an MHA model, of its conversions to G key/value heads
 * (mean-pooled, model/convert.h) right after conversion, and after
 * uptraining each conversion for a fraction (5%) of the original model's
 * training steps. A study (study.h's conventions): options in, head_metrics
 * rows out, nothing printed. */
#ifndef HS_STUDY_GQA_H
#define HS_STUDY_GQA_H

#include "study.h"
#include "study_prune.h"

enum { HS_GQA_MAX = 8 };

typedef struct {
    const hs_model *mha;       /* the trained MHA model (any family convert takes) */
    const hs_tokens *train;    /* uptraining data (batches in order from the start, SPEC §4) */
    const hs_tokens *val;      /* validation data */
    int kv[HS_GQA_MAX];        /* key/value head counts G; n_kv 0: H/2, H/4, 1 */
    int n_kv;
    long original_steps;       /* steps the MHA model was trained for */
    double fraction;           /* uptraining steps = ceil(fraction * original_steps); 0: 0.05 */
    int batch, seq_len;        /* of uptraining and evaluation */
    double lr;                 /* uptraining learning rate (Adam) */
    size_t val_batches;        /* 0: every validation batch */
    hs_study_io io;
} hs_gqa_opts;

typedef struct {
    /* model-wide rows (layer = head = -1), each a mean over validation
     * sequences with its stderr and n: val_loss_mha, val_loss_mha_uptrained
     * (the control: MHA trained the same extra steps), then per G
     * val_loss_kv_heads_<G> and val_loss_kv_heads_<G>_uptrained */
    hs_head_table table;
    double loss[2 + 2 * HS_GQA_MAX], se[2 + 2 * HS_GQA_MAX]; /* in the table's order */
    long uptrain_steps;
} hs_gqa_result;

/* Resolves the defaults (kv, fraction) and checks every G divides every
 * layer's key/value heads and the sizes fit: HS_EINVAL naming the option.
 * Cheap; call before opening a run. */
int hs_gqa_check(hs_gqa_opts *o);

/* Runs the study: 2 + 2 n_kv evaluations and 1 + n_kv uptrainings of
 * uptrain_steps steps each, on copies (o->mha is not changed). */
int hs_gqa_study(hs_gqa_result *r, const hs_gqa_opts *o);
void hs_gqa_result_free(hs_gqa_result *r);

#endif
