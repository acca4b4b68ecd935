/* Direct logit attribution, the logit lens and composition scores (SPEC §11). */
#ifndef HS_STUDY_INTERP_H
#define HS_STUDY_INTERP_H

#include "composition.h"
#include "dla.h"
#include "logit_lens.h"
#include "prompts.h"
#include "study.h"

/* ---- dla: env's clean prompts, env->batch prompts per forward ---------------------- */

typedef struct {
    char none; /* no options of its own */
} hs_dla_opts;

typedef struct {
    hs_study_rows rows;
    /* head_metrics rows, each the mean over prompts with its standard error
     * (n prompts): dla per head (l, h) and per MLP (l, -1); the model-wide
     * parts dla_embed, dla_pos_embed, dla_attn_bias, dla_final_norm_bias,
     * dla_lm_head_bias that the model has (dla.h); logit_diff_clean, the
     * model's own logit difference. The parts' means sum to its mean. */
    hs_head_table table;
    hs_dla parts;          /* every prompt's parts */
    double logit_diff;     /* mean LD */
    double max_gap;        /* max over prompts of |sum of parts - LD| / max(|LD|, 1) */
    int max_gap_line;      /* that prompt's line */
    int top_layer, top_head; /* the head of largest mean dla (toward the answer) */
    double top;
} hs_dla_result;

/* HS_EUNSUPPORTED (hs_dla_check's message) for a model whose residual
 * stream is not a sum of its parts: post-norm, sublayer output norms. */
int hs_dla_study_check(hs_dla_opts *o, const hs_study_env *env);

/* Direct logit attribution (dla.h) of every prompt of env->ps as rows.
 * Costs one inference forward per batch. r is initialised here; free it
 * with hs_dla_result_free (also after a failure). */
int hs_dla_study(hs_dla_result *r, const hs_dla_opts *o, const hs_study_env *env);
void hs_dla_result_free(hs_dla_result *r);

extern const hs_study_kind hs_dla_kind;

/* ---- logit lens: env's prompts or its token data (one of them) --------------------- */

typedef struct {
    char none; /* no options of its own */
} hs_logit_lens_opts;

typedef struct {
    hs_study_rows rows;
    /* head_metrics rows at (l, -1), l = 0 .. L (L: the final residual, the
     * model's own output): logit_lens_loss and, with prompts,
     * logit_lens_logit_diff, each the mean over sequences or prompts with
     * its standard error */
    hs_head_table table;
    hs_lens lens;
    double final_loss, final_logit_diff; /* entry L's means */
} hs_logit_lens_result;

/* HS_EINVAL unless env holds exactly one of prompts and data;
 * HS_EUNSUPPORTED (hs_logit_lens_check's message) for a model the lens
 * cannot decode. */
int hs_logit_lens_study_check(hs_logit_lens_opts *o, const hs_study_env *env);

/* The logit lens (logit_lens.h) on env's prompts or data. Costs one forward
 * and L+1 unembeddings per batch. r is initialised here; free it with
 * hs_logit_lens_result_free (also after a failure). */
int hs_logit_lens_study(hs_logit_lens_result *r, const hs_logit_lens_opts *o,
                        const hs_study_env *env);
void hs_logit_lens_result_free(hs_logit_lens_result *r);

extern const hs_study_kind hs_logit_lens_kind;

/* ---- composition: env's model alone ----------------------------------------------- */

typedef struct {
    int no_control; /* leave out the random-init control */
    long seed;      /* the control's (hs_control_model), >= 0 */
} hs_composition_opts;

typedef struct {
    hs_study_rows rows;
    /* head_pair_metrics rows: q_, k_, v_composition of every scored pair of
     * the model, then (with control) the same of hs_control_model(seed)
     * with suffix _control */
    hs_pair_row *pairs;
    int n_pairs;
    /* head_metrics rows (-1, -1): <kind>_composition_mean and, with control,
     * <kind>_composition_control_mean: the mean over pairs with its
     * standard error (n pairs) */
    hs_head_table table;
    /* per kind (q, k, v): the model's highest pair */
    int best[3][4];
    double best_value[3], mean[3], control_mean[3];
} hs_composition_result;

/* HS_EUNSUPPORTED when the model has fewer than two layers (no head reads
 * another's output). */
int hs_composition_check(hs_composition_opts *o, const hs_study_env *env);

/* Composition scores (composition.h) of env's model and, unless
 * o->no_control, of its random-init control. Costs O(pairs (d dh^2 +
 * dh^3)) per model. r is initialised here; free it with
 * hs_composition_result_free. */
int hs_composition_study(hs_composition_result *r, const hs_composition_opts *o,
                         const hs_study_env *env);
void hs_composition_result_free(hs_composition_result *r);

extern const hs_study_kind hs_composition_kind;

#endif
