/* Training a TopK SAE (Gao et al. 2024; SPEC §19's train-sae) on rows of
 * activations: z = TopK(relu(W_enc (x - b_dec) + b_enc)), x_hat = z W_dec +
 * b_dec; loss = the mean over tokens of ||x_hat - x||^2 + aux_coef times
 * AuxK's: the residual x - x_hat (held fixed) reconstructed from the
 * aux_k largest pre-activations of the dead latents (those that fired on
 * none of the last dead_tokens tokens), without b_dec. The gradient flows
 * through the selected latents only (TopK's); the decoder's rows are kept
 * at unit norm (their gradient's component along each row removed, then
 * each row renormalised after the step); Adam. */
#ifndef HS_SAE_TRAIN_H
#define HS_SAE_TRAIN_H

#include "sae.h"

typedef struct {
    int aux_k;          /* dead latents AuxK reconstructs from (0: none) */
    double aux_coef;    /* its weight (Gao et al.: 1/32) */
    long long dead_tokens; /* a latent is dead after this many tokens without firing */
    double lr, beta1, beta2, eps;
} hs_sae_train_opts;

typedef struct {
    hs_sae_train_opts o;
    long step;
    size_t n_params;    /* W_enc, W_dec, b_enc, b_dec as the SAE's block holds them */
    hs_real *grad, *m, *v;
    long long *since;   /* (d_sae) tokens since each latent last fired */
    void *scratch;      /* a step's buffers, grown to the largest step */
    size_t scratch_bytes;
} hs_sae_trainer;

/* What one step measured (before its update). */
typedef struct {
    double mse;         /* mean over tokens of ||x_hat - x||^2 */
    double aux;         /* AuxK's loss (before aux_coef) */
    double explained_variance; /* 1 - sum ||x - x_hat||^2 / sum ||x - mean x||^2, this batch */
    int dead;           /* latents dead at the step */
} hs_sae_step_stats;

/* A TopK SAE for hook (TransformerLens name) of d_in x d_sae: W_dec's rows
 * drawn N(0, 1) and scaled to unit norm, W_enc their transpose, b_enc 0,
 * b_dec 0, apply_b_dec_to_input on (Gao et al.'s b_pre). */
int hs_sae_init_topk(hs_sae *s, const char *hook, int d_in, int d_sae, int k,
                     unsigned long long seed);

/* b (d) = the geometric median of the n rows of x (n, d), by Weiszfeld's
 * iterations from their mean (iters of them; 0: the mean). */
void hs_geometric_median(hs_real *b, const hs_real *x, long n, int d, int iters);

int hs_sae_trainer_init(hs_sae_trainer *t, const hs_sae *s, const hs_sae_train_opts *o);
void hs_sae_trainer_free(hs_sae_trainer *t);

/* The gradient of the loss on rows x (n, d_in) into t->grad (overwritten):
 * of rows lo .. hi - 1 only, each weighted as one of n (a share of a batch:
 * the shares' gradients add up to the batch's; 0, n: all of it). fired
 * (d_sae, may be NULL) gets 1 for each latent the TopK selects in those
 * rows; st (may be NULL) the step's numbers over them (mse and aux as sums
 * over n, so that shares add up; explained_variance over the whole batch
 * when the share is all of it, else NAN). The dead latents are those of
 * t->since before the step: hs_sae_trainer_count advances it. No update:
 * hs_sae_trainer_update applies it (after the shares' gradients are
 * summed across processes, where they are). */
int hs_sae_train_grad(hs_sae_trainer *t, const hs_sae *s, const hs_real *x, long n, long lo,
                      long hi, hs_sae_step_stats *st, unsigned char *fired);

/* The dead latents' counters after a step of n tokens: reset where fired. */
void hs_sae_trainer_count(hs_sae_trainer *t, const unsigned char *fired, long n, int d_sae);

/* 1 - sq_err / (the sum over x's n rows of ||x - mean x||^2). */
double hs_sae_explained_variance(const hs_real *x, long n, int d, double sq_err);

/* The Adam step of t->grad (its decoder part first made orthogonal to each
 * decoder row), then the decoder rows renormalised. */
void hs_sae_trainer_update(hs_sae_trainer *t, hs_sae *s);

#endif
