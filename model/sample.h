/* The choice of the next token from logits, and what a generation reports:
 * shared by the decoders of one stack (decode.h) and of an encoder-decoder
 * (seq2seq.h). */
#ifndef HS_SAMPLE_H
#define HS_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "rng.h"

/* Sampling rule of the generations. temperature 0: greedy, the argmax of the
 * logits (ties to the lowest id). temperature > 0: the top_k largest
 * logits (top_k 0: all; ties to the lower id), softmax of logits /
 * temperature over them, one uniform draw of rng picks by the cumulative
 * probability in ascending id order. */
typedef struct {
    double temperature;
    int top_k;
    unsigned long long seed; /* of the hs_rng (xorshift) that draws */
} hs_sample_opts;

/* The next token from logits (V) by o's rule; rng draws only when sampling. */
int32_t hs_sample_token(const hs_real *logits, int V, const hs_sample_opts *o, hs_rng *rng);

typedef struct {
    double seconds;        /* wall time of the prefill and every step */
    double tokens_per_s;   /* new tokens / seconds */
    double prefill_seconds;   /* the prompt's feed */
    double step_tokens_per_s; /* the one-token steps after it: (new tokens - 1) / their time */
    size_t cache_bytes;    /* hs_decoder_cache_bytes */
    int n_new;             /* new tokens (an encoder-decoder stops after eos) */
} hs_generate_stats;

#endif
