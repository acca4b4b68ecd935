/* Per-head scores of SPEC §5 on repeated random sequences r ++ r (positions
 * 0..2T-1): induction (mass on the token after the earlier copy), duplicate
 * token (mass on the earlier copy) and previous token; and the OV copying
 * score of Olsson et al. Each with the standard error over samples. */
#ifndef HS_SCORES_H
#define HS_SCORES_H

#include <stdint.h>

#include "eval.h"
#include "stats.h"
#include "tokens.h"
#include "weights.h"

enum { HS_SCORE_INDUCTION, HS_SCORE_DUPLICATE, HS_SCORE_PREV, HS_SCORE_KINDS };

const char *hs_score_name(int kind); /* induction, duplicate_token, prev_token */

typedef struct {
    int n_layer;
    int n_head[HS_MAX_LAYERS];
    /* [kind][l * HS_MAX_HEADS + h] */
    double *value[HS_SCORE_KINDS], *stderr_value[HS_SCORE_KINDS];
    long n; /* samples */
} hs_scores;

int hs_scores_alloc(hs_scores *s, const hs_model_config *c);
void hs_scores_free(hs_scores *s);

/* Appends s's rows to t: for each kind, every head (layer order) named
 * hs_score_name(kind) + suffix ("" or "_control"), with its stderr and the
 * sample count; then, when copying is not NULL, "copying" + suffix (stderr
 * 0, n 1). HS_ENOMEM on failure. */
int hs_scores_to_table(hs_head_table *t, const hs_scores *s, const double *copying,
                       const char *suffix);

/* tokens (N, 2T), rows r ++ r with r uniform over the V ids of pool (NULL:
 * the ids 0 .. V-1), from a seed. */
void hs_repeated_sequences(int32_t *tokens, int N, int T, const int32_t *pool, int V,
                           unsigned long long seed);

/* Scores of m on tokens (N, 2T), forwards of B rows at a time. */
/* progress (may be NULL): batches done of total. */
int hs_pattern_scores(hs_scores *s, const hs_model *m, const int32_t *tokens, int N, int T, int B,
                      hs_progress_fn progress, void *progress_ctx);

/* copying[l * HS_MAX_HEADS + h] = sum Re(lambda) / sum |lambda| over the
 * eigenvalues of W_O^h W_U W_E W_V^h (dh x dh; the nonzero spectrum of the
 * full OV circuit W_E W_V^h W_O^h W_U), norms and biases ignored. */
int hs_copying_scores(double *copying, const hs_model *m);

/* The causal check of the induction claim: the loss on the second half of
 * the repeated sequences (positions T..2T-2, whose next token the first half
 * already showed) with the k heads of highest induction score gated off at
 * once, against k heads drawn at random from the other heads (draws
 * times). beats: the targeted increase lies beyond the random draws' spread
 * (above their mean by more than their standard deviation) and is itself
 * larger than two standard errors over sequences. random_delta (NULL, or
 * room for draws values) gets each draw's increase, in draw order.
 * progress (may be NULL): passes over the sequences done of 2 + draws. */
typedef struct {
    int k, draws;
    int layer[64], head[64]; /* the targeted heads */
    double clean;            /* second-half loss, nothing ablated */
    double targeted;         /* increase with the targeted heads off */
    double targeted_stderr;  /* over sequences */
    double random_mean, random_std; /* increase over the random draws */
    int beats;
    /* the first half's loss, nothing ablated (random tokens predicting random
     * ones: about ln V for a model at chance, more for one that finds them
     * improbable), over sequences */
    hs_welford first_half;
} hs_causal_check;

/* Under mpirun (dist.h) each rank runs its share of the random draws and
 * only rank 0's r and random_delta are the result (one process's). */
int hs_induction_causal_check(hs_causal_check *r, const hs_model *m, const int32_t *tokens, int N,
                              int T, int B, const hs_scores *s, int k, int draws,
                              unsigned long long seed, double *random_delta,
                              hs_progress_fn progress, void *progress_ctx);

/* The claim "these are induction heads": the causal check beats the random
 * draws (cc->beats), and every targeted head's induction score is at least
 * min_score and exceeds the same head's score in the random-init control by
 * more than two combined standard errors (a significant but tiny excess over
 * chance is no induction head). Returns 1 when all hold. */
int hs_induction_established(const hs_causal_check *cc, const hs_scores *s,
                             const hs_scores *control, double min_score);

/* In-context learning score (SPEC §5): mean loss at position `late` minus
 * mean loss at position `early` (both clipped to T-1) over the evaluation
 * sequences, with the standard error of the per-sequence differences. */
int hs_icl_score(double *icl, double *stderr_icl, long *n, const hs_model *m,
                 const hs_tokens *data, int B, int T, size_t max_batches, int early, int late);

#endif
