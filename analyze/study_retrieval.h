/* Retrieval heads (SPEC §18, Wu et al. 2024): a needle-in-a-haystack grid
 * decoded greedily with the compact cache, each decoding step's copy rule
 * per head, the retrieval score of every head, the needle accuracy, and the
 * causal check with its control (the top K heads masked against K random
 * others). */
#ifndef HS_STUDY_RETRIEVAL_H
#define HS_STUDY_RETRIEVAL_H

#include "kv_plan.h"
#include "study.h"

enum { HS_RETRIEVAL_MAX_GRID = 64 }; /* lengths, and depths, at most */

/* The grid: every needle line of `needles` (JSONL {"needle", "question",
 * "answer"}, each a non-empty string tokenized without special tokens) at
 * every length N of `lengths` and depth D (percent) of `depths`. The prompt
 * is the haystack's (env->data: the text as the tokenizer encodes a
 * document) first N tokens with the needle's inserted at floor(D N / 100),
 * then the question; greedy decoding runs |answer| + 8 steps. */
typedef struct {
    const char *needles;
    const char *lengths, *depths;
    int mask_top;  /* K > 0: also the grid with the top K, then K random other, heads masked */
    long seed;     /* of the random heads */
    /* resolved by the check */
    int n_lengths, length[HS_RETRIEVAL_MAX_GRID];
    int n_depths;
    double depth[HS_RETRIEVAL_MAX_GRID];
} hs_retrieval_opts;

typedef struct {
    int layer, head;
} hs_head_ref;

typedef struct {
    hs_study_rows rows;
    /* head_metrics rows: retrieval per head (stderr over the runs), and
     * model-wide needle_accuracy (+ _masked_top, _masked_random with K),
     * kv_cache_bytes and haystack_loss (what the run's KV plan costs) */
    hs_head_table table;
    int runs, succeeded, heads;
    hs_head_ref best;   /* the highest retrieval score (lowest layer, head on ties) */
    double best_score;
    int k;              /* heads masked by each arm of the causal check */
    hs_head_ref *top, *random;
    int top_succeeded, random_succeeded;
    size_t cache_bytes;   /* the decoder's cache at the longest run (kv_cache_bytes) */
    double haystack_loss; /* the haystack's first N tokens' loss (haystack_loss) */
} hs_retrieval_result;

/* Resolves the lengths and depths (HS_EINVAL naming --lengths, --depths:
 * lengths >= 1, depths 0-100), reads the needles (HS_EINVAL/HS_EFORMAT
 * naming the file and line: a missing key, a text that encodes to no token,
 * a prompt and its decoding beyond the model's context at the longest
 * length), and refuses a haystack shorter than the longest length, a
 * --mask-top larger than half the heads, an encoder or latent attention
 * (no per-head decoding row) and a missing tokenizer. */
int hs_retrieval_check(hs_retrieval_opts *o, const hs_study_env *env);

/* The grid (then the masked grids with K): one prefill and |answer| + 8
 * steps per run, no T x T buffer (the copy rule reads each head's last row
 * as the kernel makes it). Polls env->io.stop between runs. */
int hs_retrieval_study(hs_retrieval_result *r, const hs_retrieval_opts *o,
                       const hs_study_env *env);
void hs_retrieval_result_free(hs_retrieval_result *r);

extern const hs_study_kind hs_retrieval_kind;

/* SPEC §18's kv-plan from retrieval run `run` of the index at db (opened
 * read-only; HS_EIO naming it): the ceil(keep * sum_l
 * G_l) kv heads with the highest retrieval score kept full (a kv head scores
 * the largest of its query heads'; ties to the lower (layer, kv head)), the
 * others streaming with `sink` and `window`. p is initialised here (free it
 * with hs_kv_plan_free). HS_EINVAL naming the option for keep outside [0, 1],
 * a negative sink or a window below 1, and naming --run for a run without
 * retrieval rows or its heads per layer (run_params n_head, n_kv_head). */
int hs_kv_plan_from_run(hs_kv_plan *p, const char *db, long long run, double keep, int sink,
                        int window);

/* ROUGE-1 recall of text against reference, both split at whitespace as
 * Python's str.split() does (its str.isspace characters), case-sensitive: the reference's words found in text (each
 * word counted at most as often as text has it) over the reference's word
 * count (0 for a reference of no word). */
double hs_rouge1_recall(const char *text, const char *reference);

#endif
