/* Source-target pairs of an encoder-decoder model (SPEC §17's `--pairs
 * FILE.jsonl`): each line {"source": S, "target": S}, tokenized as the
 * model's tokenizer does (special tokens added, eos_token_id appended where
 * the tokenizer does not end the sequence with it), or {"source_ids": [...],
 * "target_ids": [...]} taken as given; and their teacher-forced loss. */
#ifndef HS_PAIRS_H
#define HS_PAIRS_H

#include <stdint.h>

#include "eval.h"
#include "seq2seq.h"
#include "stats.h"
#include "tokenizer.h"
#include "weights.h"

typedef struct hs_pairs {
    int n;                /* pairs */
    int32_t **src, **tgt; /* each pair's ids (the target ending in eos when tokenized) */
    char **tgt_text;      /* each text pair's target as given (NULL for an ids pair) */
    int *src_len, *tgt_len;
    int max_src, max_tgt; /* the longest of each */
} hs_pairs;

/* Reads path into p for model configuration c: tokens within the
 * vocabulary, neither side empty, sources at most max_src (0: no bound
 * beyond the model's positions) and both sides within the model's learned
 * or sinusoidal positions. Text lines are encoded by *tk, which the first
 * of them opens when NULL (hs_tokenizer_resolve of tokenizer and model_dir:
 * the caller frees it); a file of ids opens none. Errors name path:line and
 * the key. */
int hs_pairs_load(hs_pairs *p, const char *path, const hs_model_config *c, hs_tokenizer **tk,
                  const char *tokenizer, const char *model_dir, int max_src);
void hs_pairs_free(hs_pairs *p);

/* Pairs i0 .. i0 + B - 1 padded to S and T: sources src (B,S) padded with
 * pad_token_id, decoder inputs dec (B,T) [decoder_start_token_id] +
 * target[:-1] padded with pad_token_id, and (tgt not NULL) targets (B,T)
 * padded with HS_TARGET_IGNORE. */
void hs_pairs_fill(int32_t *src, int32_t *dec, int32_t *tgt, const hs_pairs *p,
                   const hs_model_config *c, int i0, int B, int S, int T);

/* The ids of a source or target text as the pairs file's: tk's encoding
 * with special tokens, eos_token_id appended unless it ends it, each id
 * checked against c's vocabulary. The count, or -1 with the message set
 * (tk NULL: no tokenizer known). *ids is malloc'd. */
int hs_source_ids(const hs_tokenizer *tk, const char *text, const hs_model_config *c,
                  int32_t **ids);

/* The teacher-forced loss of every pair, B at a time: decoder input
 * [decoder_start_token_id] + target[:-1], the cross-entropy of each
 * target token, summed over all pairs' target tokens and divided by
 * their count (HF's pooled loss); stderr the sample sd of the pairs' mean
 * losses over sqrt(n). r: loss, stderr_loss, tokens (target tokens),
 * sequences (pairs), batches and the first pair whose loss is not finite.
 * max_batches > 0 stops after that many batches. progress (may be NULL)
 * after each batch. */
int hs_pairs_eval(hs_eval_result *r, const hs_model *m, const hs_pairs *p, int B,
                  size_t max_batches, hs_progress_fn progress, void *ctx);

/* hs_pairs_eval of every pair with head gates (seq2seq.h's gates and
 * cross_gates; NULL: none), without progress. */
int hs_pairs_eval_gated(hs_eval_result *r, const hs_model *m, const hs_pairs *p, int B,
                        const hs_real *const *gates, const hs_real *const *cross_gates);

/* The shape of the batch of pairs i0 .. i0 + n - 1: their longest source S
 * and target T. */
void hs_pairs_batch_shape(const hs_pairs *p, int i0, int n, int *S, int *T);

/* Activations a (hs_s2s_acts_alloc's flags) for a batch of B x (S, T), kept
 * from batch to batch and pass to pass: reallocated only when the shape
 * differs (a fresh allocation's every page faults on first use). */
int hs_pairs_acts_for(hs_s2s_acts *a, const hs_model_config *c, int B, int S, int T, int flags);

/* What hs_pairs_ablate takes. */
typedef struct {
    int B;                          /* pairs a forward */
    const unsigned char *head_on;   /* n_layer * HS_MAX_HEADS over the model's layers (the
                                       encoder's, then the decoder's; NULL: every head) */
    unsigned types;                 /* 1 << HS_ATTN_ENC | DEC | CROSS: the types ablated */
    volatile const int *stop;       /* set: stop at the next head (HS_EINTR) */
    hs_progress_fn progress;        /* after each head (may be NULL) */
    void *ctx;
} hs_pairs_ablate_opts;

/* Zero ablation of every selected head of every attention type of an
 * encoder-decoder on the pairs (SPEC §17; Michel et al.'s per-type table):
 * into t the clean loss (layer = head = -1, "loss") and per (type, layer
 * within its stack, head) "loss_delta_zero" = the pooled loss with the head's
 * output z zeroed - the clean one, its stderr the sample sd of the pairs'
 * differences of mean losses over sqrt(n), n the pairs; rows' attn "enc",
 * "dec" or "cross". */
int hs_pairs_ablate(hs_head_table *t, const hs_model *m, const hs_pairs *p,
                    const hs_pairs_ablate_opts *o);

/* With bleu, also r->bleu (has_bleu set): every source decoded greedily
 * (hs_s2s_generate, at most hs_s2s_max_new tokens), the
 * new ids detokenized by tk without special tokens, against the target text
 * as given (an ids pair's: its target ids detokenized the same way), scored
 * by hs_bleu_corpus. HS_EINVAL without a tokenizer. */
int hs_pairs_bleu(hs_eval_result *r, const hs_model *m, const hs_pairs *p,
                  const hs_tokenizer *tk);

#endif
