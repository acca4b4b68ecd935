/* What the model predicts next (SPEC §21, `headscope predict`): the
 * next-token distribution at the last position of a prompt, and for a
 * prompt pair the ranks, logits and probabilities of its answer and wrong
 * tokens and their logit difference, as TransformerLens's test_prompt
 * shows them. Logits are the model's (after a final soft-cap);
 * probabilities their softmax in double. */
#ifndef HS_PREDICT_H
#define HS_PREDICT_H

#include <stdint.h>

#include "prompts.h"
#include "weights.h"

typedef struct {
    int32_t id;
    double logit, prob;
} hs_prediction;

/* The k most likely next ids after ids (n), most likely first (ties: the
 * lower id first) into top (k entries; k at most the vocabulary). */
int hs_predict_top(hs_prediction *top, int k, const hs_model *m, const int32_t *ids, int n);

typedef struct {
    int answer_rank, wrong_rank; /* 1 = the most likely id (ties: the lower id first) */
    hs_prediction answer, wrong;
    double ld;                   /* answer's logit - wrong's */
} hs_prediction_pair;

/* The answer and wrong ids' standing after ids (n). */
int hs_predict_pair(hs_prediction_pair *r, const hs_model *m, const int32_t *ids, int n,
                    int32_t answer, int32_t wrong);

/* Every prompt pair of ps, in file order: its line and the answer's and
 * wrong's standing on the clean and the corrupt prompt, into *out
 * (malloc'd, ps->n of them). */
typedef struct {
    int line;
    hs_prediction_pair clean, corrupt;
} hs_prediction_line;

int hs_predict_prompts(hs_prediction_line **out, const hs_model *m, const hs_prompt_set *ps);

#endif
