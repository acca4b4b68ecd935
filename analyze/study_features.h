/* An SAE's features on a model's data (SPEC §19): `features` (each
 * feature's frequency, mean activation, head share, top examples and their
 * direct feature attribution, the activations in CSR) and `sae-eval`
 * (sparsity, reconstruction and the CE-loss score, as SAELens computes
 * them). */
#ifndef HS_STUDY_FEATURES_H
#define HS_STUDY_FEATURES_H

#include "sae.h"
#include "study.h"

typedef struct {
    const char *sae_dir;  /* --sae DIR */
    const char *out;      /* --out FILE.h5: the activations in CSR (NULL: none) */
    int force;            /* --force: replace an existing --out */
    int top;              /* --top N: examples a feature (default 10) */
    int dfa;              /* --dfa-examples K: the DFA of each feature's first K examples
                             (-1, the default: all of them; 0: none) */
    hs_sae sae;           /* opened and bound by the check; hs_sae_free it after */
} hs_features_opts;

typedef struct {
    hs_study_rows rows;     /* none: the feature tables are written by the study */
    long long tokens;       /* evaluated */
    int d_sae, alive;       /* features, and those active at least once */
    double l0;              /* mean active features a token */
    long n_examples, n_dfa; /* rows written to feature_examples and feature_dfa */
    int top_feature;        /* the most frequent feature (lowest id on ties) */
    double top_frequency;
    char sha256[65];        /* --out's */
    uint64_t bytes;
} hs_features_result;

/* Opens and binds o->sae_dir on env's model (its errors), checks --top
 * (1 .. 1000) and --dfa-examples (-1 .. --top), refuses an existing --out
 * without --force, a task, pairs and mpirun (not implemented). */
int hs_features_check(hs_features_opts *o, const hs_study_env *env);

/* One pass over the data's batches: the hooked activation x of every
 * token encoded; per feature its frequency (share of tokens with f > 0),
 * mean_act (over those tokens) and, for a hook_z SAE, head_share; its top
 * N (sequence = batch B + b, position) by value, ties by (seq, position);
 * with --out each batch's CSR rows. Then, for a hook_z SAE, a second pass
 * over the batches holding examples: DFA_f(h, s | t) = att_h[t, s]
 * (v_h[s] . W_enc[h block, f]) of each, its sum over (h, s) being
 * pre_f(t) - b_enc[f] (+ b_dec . W_enc[:, f] when b_dec is applied). Rows
 * go to env->ix's feature tables (zero DFA values left out). */
int hs_features_study(hs_features_result *r, const hs_features_opts *o, const hs_study_env *env);
void hs_features_result_free(hs_features_result *r);
extern const hs_study_kind hs_features_kind;

typedef struct {
    const char *sae_dir;
    hs_sae sae;
} hs_sae_eval_opts;

typedef struct {
    hs_study_rows rows;
    hs_head_table table;  /* unused: rows go to feature_metrics (feature -1) */
    long long tokens;
    long sequences;
    double l0, explained_variance, mse, ce_loss_score;
    double loss_clean, loss_sae, loss_zero;
    double se_l0, se_mse, se_score; /* standard errors over sequences (the score's: delta method) */
    double gap, se_gap;   /* L_zero - L_clean and its standard error: the score's premise is a
                             gap beyond two of them */
} hs_sae_eval_result;

int hs_sae_eval_check(hs_sae_eval_opts *o, const hs_study_env *env);

/* Per batch three forwards: clean (x kept), with x replaced by x_hat at
 * the hook, with x replaced by 0. l0 = mean active features a token;
 * explained_variance = 1 - sum ||x - x_hat||^2 / sum ||x - mean x||^2 over
 * the tokens; mse = mean over elements; ce_loss_score = (L_zero - L_sae) /
 * (L_zero - L_clean). Rows to feature_metrics, feature -1. */
int hs_sae_eval_study(hs_sae_eval_result *r, const hs_sae_eval_opts *o, const hs_study_env *env);
void hs_sae_eval_result_free(hs_sae_eval_result *r);
extern const hs_study_kind hs_sae_eval_kind;

/* train-sae: a TopK SAE (sae_train.h) on the activations of a hook. */
typedef struct {
    const char *hook;     /* --hook NAME (TransformerLens's) */
    const char *out;      /* --out DIR: SAELens's files */
    int force;
    int d_sae, k;         /* --d-sae M, --k K */
    int aux_k;            /* --aux-k (default 512, at most d_sae) */
    long long dead_tokens; /* --dead-tokens (default 10,000,000) */
    long steps;           /* --steps (default 1000) */
    double lr;            /* --lr (default 1e-3) */
    long buffer;          /* --buffer tokens (default 16 steps' B T; at least one step's) */
    long seed;
    int mean_init;        /* --b-dec-init mean: b_dec the first batch's mean, not its
                             geometric median */
    const char *b_dec_init;
    hs_sae sae;           /* the hook resolved by the check (d_in) */
} hs_train_sae_opts;

typedef struct {
    hs_study_rows rows;   /* its curve train_loss (the step's mean ||x_hat - x||^2) */
    hs_curve_point *curve;
    long steps;
    long long tokens;
    double mse, explained_variance; /* of the last step's batch, before its update */
    double ev_last;       /* the mean explained variance of the last 10% of steps */
    int dead;             /* latents dead at the end */
    double seconds;
} hs_train_sae_result;

int hs_train_sae_check(hs_train_sae_opts *o, const hs_study_env *env);

/* Streams activations: forwards over the data's batches (wrapping) fill a
 * buffer of o->buffer rows, shuffled (seeded) once filled; each step takes
 * the next B T rows, refilling when fewer remain. b_dec starts at the
 * geometric median of the first step's rows (Weiszfeld, 20 iterations) or
 * their mean. Writes o->out with hs_sae_save. */
int hs_train_sae_study(hs_train_sae_result *r, const hs_train_sae_opts *o,
                       const hs_study_env *env);
void hs_train_sae_result_free(hs_train_sae_result *r);
extern const hs_study_kind hs_train_sae_kind;

#endif
