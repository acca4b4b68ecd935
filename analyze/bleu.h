/* Corpus BLEU as sacreBLEU computes it by default (SPEC §17's `eval --pairs
 * --bleu`): each hypothesis and its one reference right-stripped and
 * tokenized by `13a` (mteval-v13a: <skipped> dropped, "-\n" joined, newlines
 * to spaces, four HTML entities undone, then the regexes that isolate
 * punctuation, periods and commas not beside a digit and a dash after a
 * digit), split on whitespace (Python's str.split), 1- to 4-gram matches
 * clipped by the reference's counts and summed over the corpus, `exp`
 * smoothing (a zero count's precision 100 / (2^k total) for the k-th such
 * order), the brevity penalty exp(1 - ref_len / sys_len), on the 0-100
 * scale. Every step is in double in sacreBLEU's order, so the score equals
 * its corpus_score(...).score to the last bit on the same C library. */
#ifndef HS_BLEU_H
#define HS_BLEU_H

#include <stddef.h>

#include "common.h"

enum { HS_BLEU_ORDER = 4 };

typedef struct {
    double score;                       /* 0-100 */
    double bp;                          /* brevity penalty */
    double precisions[HS_BLEU_ORDER];   /* 0-100, smoothed */
    long long correct[HS_BLEU_ORDER];   /* clipped n-gram matches */
    long long total[HS_BLEU_ORDER];     /* the hypotheses' n-grams */
    long long sys_len, ref_len;         /* tokens */
} hs_bleu;

/* The 13a tokenization of one segment (right-stripped first), malloc'd,
 * NUL-terminated: tokens joined by single spaces. NULL with the message set
 * (HS_ENOMEM; HS_EINVAL for text that is not UTF-8). */
char *hs_bleu_tokenize(const char *text);

/* Corpus BLEU of n hypotheses against their references (one each), UTF-8
 * strings. HS_OK; HS_EINVAL naming the segment that is not UTF-8;
 * HS_ENOMEM. n = 0 scores 0. */
int hs_bleu_corpus(const char *const *hyps, const char *const *refs, size_t n, hs_bleu *out);

#endif
