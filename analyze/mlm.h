/* What an encoder's analyses need beside the model (SPEC §14): its special
 * token ids -- from the tokenizer, else from config.json -- and the
 * masked-LM recipe of --mlm-prob / --mlm-mask / --seed, set on the tokens
 * (store/tokens.h: hs_batch_at then makes masked-LM batches), so that eval,
 * ablate, importance and prune compute the masked-LM loss with the code
 * they run for a causal LM.
 *
 * Ids. A tokenizer (--tokenizer, or the model directory's) gives each
 * special token by its text: BERT's [CLS] [SEP] [PAD] [MASK] [UNK],
 * RoBERTa's <s> </s> <pad> <mask> <unk> (a headscope-family encoder: either
 * set), and "." and "," (punct) as the ids those texts encode to. Without a
 * tokenizer (or where it lacks one): config.json's cls_token_id
 * (RoBERTa: bos_token_id), sep_token_id (eos_token_id), pad_token_id,
 * mask_token_id, unk_token_id; "." and "," are then the byte ids 46 and 44
 * (the byte-level vocabulary of `headscope tokens`). */
#ifndef HS_MLM_H
#define HS_MLM_H

#include "tokenizer.h"
#include "tokens.h"
#include "weights.h"

typedef struct {
    int32_t cls, sep, pad, mask, unk; /* -1: unknown */
    int32_t punct[2];                 /* "." and "," (-1: unknown) */
} hs_special_ids;

/* The special ids of encoder c: tk's (NULL: none), else c's. */
void hs_special_ids_of(hs_special_ids *ids, const hs_model_config *c, const hs_tokenizer *tk);

/* --mlm-prob P, --mlm-mask every:K[:O], --seed S of the commands that
 * compute an encoder's loss; unset: prob < 0, mask NULL, seed < 0. */
typedef struct hs_mlm_opts {
    double prob;
    const char *mask;
    long seed;
} hs_mlm_opts;

/* "unset" options: prob -1, mask NULL, seed -1. */
#define HS_MLM_OPTS_UNSET { -1, NULL, -1 }

/* 1 when any of o's options is given. */
int hs_mlm_given(const hs_mlm_opts *o);

/* The masked-LM recipe for encoder c into *out (defaults: prob 0.15, seed
 * 0): HS_EINVAL naming the option for a prob outside (0, 1), a malformed
 * --mlm-mask; HS_EFORMAT for a mask id that neither the tokenizer ([MASK],
 * RoBERTa's <mask>) nor config.json's mask_token_id gives; every special id known is
 * excluded from the choice. For a causal LM, HS_EINVAL when an option was
 * given (they apply to encoders only), else out->on = 0. */
int hs_mlm_setup(hs_mlm *out, const hs_model_config *c, const hs_tokenizer *tk,
                 const hs_mlm_opts *o);

/* HS_EINVAL naming `command` and why, for a command that has no meaning on
 * an encoder (why: "it decodes next tokens"); HS_OK for a causal LM. */
int hs_causal_only(const hs_model_config *c, const char *command, const char *why);

#endif
