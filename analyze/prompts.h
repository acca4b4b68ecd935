/* The prompts file of the causal instruments (SPEC §11): JSONL, one
 * clean/corrupt pair a line, with the answer and the wrong token whose logit
 * difference is measured,
 *   {"clean": S, "corrupt": S, "answer": S, "wrong": S}        (text), or
 *   {"clean_ids": [..], "corrupt_ids": [..], "answer_id": n, "wrong_id": m}.
 * Text is encoded with the model's tokenizer as HF tokenizer(text) does
 * (special tokens added); answer and wrong are the first token of their
 * string encoded without special tokens. Prompts are grouped by length, so
 * each group runs as one batch of equal-length sequences. */
#ifndef HS_PROMPTS_H
#define HS_PROMPTS_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "tokenizer.h"

typedef struct {
    int T;            /* tokens of every clean and corrupt sequence of the group */
    int n;            /* prompts */
    int32_t *clean;   /* (n, T) */
    int32_t *corrupt; /* (n, T) */
    int32_t *answer;  /* (n) */
    int32_t *wrong;   /* (n) */
    int *line;        /* (n) line of each prompt in the file, from 1 */
} hs_prompt_group;

typedef struct {
    hs_prompt_group *group; /* [n_group], by ascending T; prompts in file order */
    int n_group;
    int n;                  /* prompts in all groups */
} hs_prompt_set;

/* Reads path. tok may be NULL when every line gives ids. Every id must lie
 * below vocab_size and every sequence within max_len tokens (the model's
 * context; 0 = no limit). Blank lines are skipped. Errors name the file and
 * line: HS_EFORMAT for malformed JSON, a missing or unknown key, text
 * without a tokenizer, clean and corrupt of different lengths, an empty
 * sequence or answer; HS_EINVAL for an id outside the vocabulary or a
 * sequence longer than max_len; HS_EFORMAT for a file with no prompt. */
/* The JSON array a (of the file's line `line`, under key) as token ids
 * below vocab into *ids (malloc'd, *n of them): a non-empty array of
 * integers, else an error naming path:line and the key (or element). */
int hs_json_ids(const cJSON *a, const char *key, const char *path, int line, int vocab,
                int32_t **ids, int *n);

int hs_prompts_load(hs_prompt_set *set, const char *path, const hs_tokenizer *tok, int vocab_size,
                    int max_len);
void hs_prompt_set_free(hs_prompt_set *set);

#endif
