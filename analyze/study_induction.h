/* The induction study (SPEC §5): pattern scores, copying, the causal check and ICL, each beside its random-init control. */
#ifndef HS_STUDY_INDUCTION_H
#define HS_STUDY_INDUCTION_H

#include "scores.h"
#include "study.h"

typedef struct {
    int seq_len;      /* |r| of r ++ r; 0: min(n_ctx/2, 64) */
    int samples;      /* random sequences (default 64) */
    int batch;        /* sequences per forward (default 8) */
    unsigned long long seed; /* the sequences' seed; the control's is hs_control_model's */
    int causal_k;     /* heads the causal check ablates (default 1) */
    int random_draws; /* random sets of causal_k heads (default 20) */
    double min_score; /* induction score a head needs for the claim (default 0.4) */
    /* the ICL score, of env's token data when it has some: the sequence
     * length (0: min(n_ctx, 1024)) and the early and late positions
     * (default 50, 500) */
    int icl_seq_len, early, late;
    /* where r's tokens are drawn from (uniformly): the ids of --vocab "A:B"
     * ([A, B)) or "A-B" ([A, B]), or of --from-data FILE (the distinct ids
     * of a token shard, or of a text read with env's tokenizer); both NULL:
     * every id of the vocabulary */
    const char *vocab, *from_data;
} hs_induction_opts;

/* The defaults above; seq_len and icl_seq_len stay 0 until resolved. */
hs_induction_opts hs_induction_defaults(void);

/* Resolves o's model-dependent defaults and checks o against env's model:
 * HS_EINVAL with a message naming the option (--seq-len, --causal-k) when it
 * cannot be run; HS_EUNSUPPORTED naming the data when env's data holds no
 * sequence for the ICL score (or the model is an encoder). Cheap. */
int hs_induction_check(hs_induction_opts *o, const hs_study_env *env);

typedef struct {
    hs_study_rows rows;
    /* head_metrics rows: per head induction, duplicate_token, prev_token and
     * copying, then the same with suffix _control (the random-init control);
     * model-wide second_half_loss, causal_loss_delta_top_k,
     * causal_loss_delta_random_k, causal_top_k (one row per targeted head),
     * induction_established, and with ICL data icl, icl_control */
    hs_head_table table;
    hs_study_curve draws; /* causal_random_k: each random draw's loss increase */
    hs_causal_check causal;
    int established;
    int best_layer, best_head;   /* highest induction score */
    double best, best_control;   /* its score, and the same head's in the control */
    /* "" or why there is no causal check (an encoder's: SPEC §14 defines its
     * scores on r ++ r, but the check's second-half loss is a next-token loss;
     * causal.k is then 0 and no causal row is recorded) */
    char note[160];
    int pool, vocab;             /* the ids r's tokens were drawn from, of the model's */
} hs_induction_result;

/* The induction study: the pattern scores of the model and of its random-init
 * control on the same r ++ r sequences, the OV copying scores of both, the
 * causal check (top-k induction heads against random draws), the verdict of
 * hs_induction_established, and the ICL score of both when env has
 * token data. Why one call: the claim "these are induction heads" is only as good
 * as its control and its causal check, so a caller cannot get the scores
 * without them. Costs (3 + random_draws) passes over the sequences of the
 * model, one of the control, and the control's parameters. r is initialised
 * here; free it with hs_induction_result_free (also after a failure). */
int hs_induction_study(hs_induction_result *r, const hs_induction_opts *o,
                       const hs_study_env *env);
void hs_induction_result_free(hs_induction_result *r);

extern const hs_study_kind hs_induction_kind;

#endif
