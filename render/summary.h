/* What a command prints when a study is done: a few lines for people, or
 * with json one JSON object on one line (the fields SPEC §8 and the
 * commands' --help promise), written to f. Here rather than in cli/ so that
 * the library's suites, which the sanitizer builds run, print them too, and
 * a binding's summary is the command's. */
#ifndef HS_SUMMARY_H
#define HS_SUMMARY_H

#include <stdio.h>

#include "decode.h"
#include "patch.h"
#include "study_patch.h"
#include "predict.h"
#include "study.h"
#include "study_gqa.h"
#include "study_head_norms.h"
#include "study_patterns.h"
#include "study_retrieval.h"
#include "study_features.h"
#include "study_windows.h"
#include "study_ablate.h"
#include "study_prune.h"
#include "study_capture.h"
#include "study_headcount.h"
#include "study_interp.h"
#include "study_train.h"
#include "study_importance.h"
#include "study_atp.h"
#include "study_induction.h"
#include "task.h"

/* What every summary names besides the result. */
typedef struct {
    long long run_id; /* 0: no index */
    const char *db;   /* the index (NULL: none) */
    double seconds;   /* the study's wall time, where a summary reports it */
    int json;
} hs_summary;

void hs_print_ablate(FILE *f, const hs_summary *s, const hs_ablate_result *r,
                     const hs_ablate_study_opts *o);
/* out: the written model (NULL: none), structural or pruned by zeroing */
void hs_print_prune(FILE *f, const hs_summary *s, const hs_prune_result *r,
                    const hs_prune_study_opts *o);
/* the size of o->out when r does not carry it */
void hs_print_capture(FILE *f, const hs_summary *s, const hs_capture_opts *o,
                      const hs_capture_result *r);
void hs_print_headcount(FILE *f, const hs_summary *s, const hs_headcount_result *r,
                        const hs_headcount_opts *o);
void hs_print_gqa(FILE *f, const hs_summary *s, const hs_gqa_result *r, const hs_gqa_opts *o);
void hs_print_windows(FILE *f, const hs_summary *s, const hs_windows_result *r,
                      const hs_windows_opts *o);
void hs_print_dla(FILE *f, const hs_summary *s, const hs_dla_result *r, const hs_dla_opts *o);
void hs_print_logit_lens(FILE *f, const hs_summary *s, const hs_logit_lens_result *r,
                         const hs_logit_lens_opts *o);
/* control: r holds a random-init control */
void hs_print_composition(FILE *f, const hs_summary *s, const hs_composition_result *r,
                          const hs_composition_opts *o);
void hs_print_train(FILE *f, const hs_summary *s, const hs_train_result *r,
                    const hs_train_opts *to, const char *out);
void hs_print_patch(FILE *f, const hs_summary *s, const hs_patch_result *r);
void hs_print_head_norms(FILE *f, const hs_summary *s, const hs_head_norms_result *r,
                         const hs_head_norms_opts *o);
void hs_print_patterns(FILE *f, const hs_summary *s, const hs_patterns_result *r,
                       const hs_patterns_opts *o);
/* eval's: the loss with its standard error, no run */
void hs_print_eval(FILE *f, const hs_summary *s, const hs_eval_result *r);
void hs_print_task_eval(FILE *f, const hs_summary *s, const hs_task_eval_result *r);
void hs_print_importance(FILE *f, const hs_summary *s, const hs_importance_result *r,
                         const hs_importance_opts *o);
/* the largest |value| of each head metric, and the positions' rows in JSON */
void hs_print_atp(FILE *f, const hs_summary *s, const hs_atp_result *r);
/* order: the edges by rank (hs_circuit_rank); the top five and the curve */
void hs_print_circuit(FILE *f, const hs_summary *s, const hs_circuit_result *r,
                      const long *order);
void hs_print_path_patch(FILE *f, const hs_summary *s, const hs_path_patch_result *r,
                         const hs_path_patch_opts *o);
void hs_print_induction(FILE *f, const hs_summary *s, const hs_induction_result *r,
                        const hs_induction_opts *o);

/* predict (SPEC §21): the top k next tokens (tk: their strings, NULL:
 * none), and each prompts line's answer and wrong standing. */
void hs_print_predict_top(FILE *f, const hs_prediction *top, int k, const hs_tokenizer *tk,
                          int json);
void hs_print_predict_lines(FILE *f, const hs_prediction_line *r, int n, int json);

/* generate's: the text (tok's decoding, a byte-level model's bytes, else
 * the ids) and a line of rates on stderr, or with json the ids, the new ids,
 * cache_bytes and tokens_per_s. answer: an encoder-decoder's, whose text is
 * the new ids' alone, without special tokens. */
void hs_print_generation(FILE *f, const int32_t *out, int n_prompt, int n,
                         const hs_generate_stats *st, const hs_tokenizer *tok, int V, int json,
                         int answer);

/* tokenize's: one line per token (the id, a tab, the token's display
 * string as a JSON string), or with json {"ids": [...], "tokens": [...]}.
 * HS_EINVAL for an id outside tok's vocabulary, HS_ENOMEM. */
int hs_print_tokens(FILE *f, const hs_tokenizer *tok, const int32_t *ids, size_t n, int json);

/* kv-bytes': the cache bytes and, with mla_line, MLA's (its bytes per token
 * and in all). */
void hs_print_kv_bytes(FILE *f, double bytes, int mla_line, double mla_per_token, double mla,
                       int json);

/* retrieval's: the needle accuracy, the best head, the causal check. */
/* features and sae-eval (SPEC §19). */
void hs_print_features(FILE *f, const hs_summary *s, const hs_features_result *r,
                       const hs_features_opts *o);
void hs_print_sae_eval(FILE *f, const hs_summary *s, const hs_sae_eval_result *r,
                       const hs_sae_eval_opts *o);
void hs_print_train_sae(FILE *f, const hs_summary *s, const hs_train_sae_result *r,
                        const hs_train_sae_opts *o);
void hs_print_retrieval(FILE *f, const hs_summary *s, const hs_retrieval_result *r,
                        const hs_retrieval_opts *o);

#endif
