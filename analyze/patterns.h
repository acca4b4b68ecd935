/* Attention pattern statistics of Clark et al. 2019 (SPEC §5), each the mean
 * over every query of every evaluated sequence, with the standard error over
 * sequences: entropy (-sum a ln a, nats), self, prev_token, next_token
 * (mass on t, t-1, t+1), first_token (mass on position 0), delim (mass on the
 * given token ids), distance (sum_s a_s |t - s|). A query lacking the key in
 * question (t-1 at t = 0) contributes 0. Computed one block of query rows at
 * a time during the forward, so long contexts need no T x T buffer; or from a
 * capture file, with the same numbers. */
#ifndef HS_PATTERNS_H
#define HS_PATTERNS_H

#include <stddef.h>
#include <stdint.h>

#include "eval.h"
#include "maps.h"
#include "mlm.h"
#include "seq2seq.h"
#include "stats.h"
#include "tokens.h"
#include "weights.h"

/* SPEC §5's statistics (HS_PAT_KINDS of them), then the encoders' of §14:
 * cls (mass on [CLS]), sep (on [SEP] tokens), punct (on "." and ","). */
/* The most alpha_k positions one run keeps (--sink-positions). */
enum { HS_MAX_SINK_POSITIONS = 256 };

enum { HS_PAT_ENTROPY, HS_PAT_SELF, HS_PAT_PREV, HS_PAT_NEXT, HS_PAT_FIRST, HS_PAT_DELIM,
       HS_PAT_DISTANCE, HS_PAT_KINDS,
       HS_PAT_CLS = HS_PAT_KINDS, HS_PAT_SEP, HS_PAT_PUNCT, HS_PAT_ALL_KINDS };

const char *hs_pattern_name(int kind);

typedef struct {
    int n_layer;
    int layer[HS_MAX_LAYERS];  /* model layer of each result row */
    int n_head[HS_MAX_LAYERS];
    int *head; /* [li * HS_MAX_HEADS + hi]: model head ids (capture files may hold a subset) */
    /* [kind][li * HS_MAX_HEADS + hi] */
    double *value[HS_PAT_ALL_KINDS], *stderr_value[HS_PAT_ALL_KINDS];
    unsigned char recorded[HS_PAT_ALL_KINDS]; /* the kinds computed (and tabled) */
    long n; /* sequences (an encoder's: those with a real token) */
    /* SPEC §18's alpha_k for k < n_sink, [(li * HS_MAX_HEADS + hi) * n_sink + k]: per
     * sequence the mean of att[t, k] over its real queries t >= k, then the mean over
     * the sequences that have such a query (sink_n of them) */
    int n_sink;
    double *sink_value, *sink_stderr;
    long *sink_n;
    hs_attn_type attn; /* the heads' attention type (an encoder-decoder's; else self) */
} hs_patterns;

void hs_patterns_free(hs_patterns *p);

/* Appends p's rows to t: for each statistic, every head of every result
 * row (model layer and head ids) named hs_pattern_name(kind) + suffix (""
 * or "_control"), with its stderr and the sequence count; their attn
 * p->attn's name unless self. */
int hs_patterns_to_table(hs_head_table *t, const hs_patterns *p, const char *suffix);

/* delim: token ids counted by `delim` (n_delim of them, may be 0).
 * progress (may be NULL): batches done of total.
 *
 * Encoders (SPEC §14): the rows are bidirectional; padding (the model's
 * pad_id) is no query, and each statistic is per document (sequence) the
 * mean over its real queries, then the mean over documents, Clark et al.'s
 * order (a document of padding only is left out); cls, sep and punct are
 * recorded besides, for the ids that are known (hs_patterns_run: from
 * config.json, mlm.h; the _dist form takes them from a tokenizer too).
 * data->valid (--task, --text --lines: sequences padded to T) names the
 * padding instead, for any model: a padded query is no query. */
int hs_patterns_run(hs_patterns *p, const hs_model *m, const hs_tokens *data, int B, int T,
                    size_t max_batches, const int32_t *delim, int n_delim,
                    hs_progress_fn progress, void *progress_ctx);

/* The same under mpirun (dist.h): each rank runs its share of the batches,
 * rank 0 gets the result of one process (with the same threads per rank:
 * a sequence's sums are added per thread); other ranks' p is not
 * meaningful. ids: an encoder's special ids (NULL: config.json's). n_sink:
 * alpha_k for k < n_sink too (0: none). */
int hs_patterns_run_dist(hs_patterns *p, const hs_model *m, const hs_tokens *data, int B, int T,
                         size_t max_batches, const int32_t *delim, int n_delim,
                         const hs_special_ids *ids, int n_sink, hs_progress_fn progress,
                         void *progress_ctx);

/* SPEC §17's statistics of an encoder-decoder on its pairs, B a forward
 * (max_batches 0: all): out[0] of the encoder's self-attention, out[1] of
 * the decoder's, out[2] of its cross-attention, their layers numbered
 * within the stack. Each pair's real queries are its source's tokens
 * (enc) or its decoder inputs (dec, cross); the keys are the source's
 * tokens (enc, cross: query t of the target against source position s,
 * self meaning s = t, delim the source's ids) or the decoder inputs up to
 * the query (dec). Per pair the mean over its queries, then the mean over
 * pairs (§14's order for padded inputs); the §5 kinds only. Costs one
 * forward keeping every map of a batch (B x H x (S² + 2 T² ...) values). */
struct hs_pairs;
int hs_pairs_patterns(hs_patterns out[3], const hs_model *m, const struct hs_pairs *p, int B,
                      size_t max_batches, const int32_t *delim, int n_delim,
                      hs_progress_fn progress, void *progress_ctx);

/* The same from an encoder-decoder's capture file (capture --pairs; a
 * query row of exactly 0 is padding). */
int hs_pairs_patterns_from_maps(hs_patterns out[3], hs_maps_reader *r, const int32_t *delim,
                                int n_delim);

/* The same statistics from a capture file's maps (captured queries only);
 * an encoder's (the file's model_config says so) with the ids its
 * config.json gives. */
int hs_patterns_from_maps(hs_patterns *p, hs_maps_reader *r, const int32_t *delim, int n_delim,
                          int n_sink);

/* Head-to-head Jensen-Shannon distances from a capture file: D (n x n, n =
 * every captured head, layer by layer, in file order) with
 * D[i][j] = mean over the queries of every sequence of sqrt(JSD(a_i, a_j)),
 * JSD in nats (0 .. ln 2), a_i head i's attention distribution of the query.
 * *n_heads gets n; D is malloc'd. Layers must share the query range. */
int hs_js_distances(double **D, int *n_heads, hs_maps_reader *r);

/* The same distances from forwards of the model over sequences of T (batch 1,
 * as a capture of every layer with --batch 1 would hold them; max_batches 0:
 * all), heads layer by layer. It keeps one sequence's maps of every head
 * (n * T * T floats) and refuses (HS_EINVAL) when that exceeds max_bytes. */
int hs_js_distances_model(double **D, int *n_heads, const hs_model *m, const hs_tokens *data,
                          int T, size_t max_batches, size_t max_bytes);

#endif
