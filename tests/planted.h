/* The planted-heads model several suites study. */
#ifndef HS_TEST_PLANTED_H
#define HS_TEST_PLANTED_H

#include "weights.h"

/* A hand-built attention-only model with a previous-token head (layer 0,
 * head 0: queries read the position, keys the position + 1, values the token,
 * written to a PREV subspace) and an induction head (layer 1, head 0: queries
 * read the token, keys the PREV subspace, so position s matches when the token
 * before it equals the current one; values the token, written to an OUT
 * subspace that the unembedding reads). The other heads of each layer are
 * all zeros (uniform attention, no output). */
enum { PV = 32, PP = 16, PD = 3 * PV + PP, PDH = 32, PH = 8 };

void build_planted(hs_model *m);

#endif
