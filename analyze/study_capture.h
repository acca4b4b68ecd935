/* Capture (SPEC §6): per-head maps streamed to an HDF5 file while the forward runs. */
#ifndef HS_STUDY_CAPTURE_H
#define HS_STUDY_CAPTURE_H

#include "inputs.h"
#include "maps.h"
#include "study.h"
#include "task.h"

typedef struct {
    const char *out;        /* the map file: written under a temporary name, renamed when complete */
    int force;              /* overwrite an existing out */
    int half, compress;     /* f16 storage; shuffle + deflate level 1-9 (0: off) */
    int batch, seq_len;     /* seq_len 0: min(n_ctx, 256) */
    size_t max_batches;     /* 0: every whole batch */
    /* the selection as the options spell it, NULL: all. layers "L,L,..."
     * and heads "H,H,..." (the same heads of every captured layer) are
     * distinct indices; queries "A:B" the rows [A, B) */
    const char *layers, *heads, *queries;
    const char *model_dir, *data_path; /* provenance: model_dir/config.json goes into the file */
    const char *kv_plan; /* the command runs the model under this KV plan (SPEC §18; NULL: none) */
    const char *model_sha, *data_sha;  /* sha256 hex of model and data; NULL: hashed here */
    const hs_tokenizer *tokenizer;     /* the data's tokenizer: /token_text (NULL: none) */
    /* a task's or text lines' padding (SPEC §16, §21): 1 real / 0 padding
     * per position of the data's sequences (T each), written as
     * /attention_mask of those captured, and the maps' rows and columns of
     * padding written as exactly 0; NULL: none */
    const unsigned char *attention_mask;
    const char *pairs; /* an encoder-decoder's pairs file (hs_capture_pairs; NULL: none) */
} hs_capture_opts;

/* The resolved selection. */
typedef struct {
    unsigned char layer_on[HS_MAX_LAYERS];
    int heads[HS_MAX_HEADS], n_heads; /* n_heads 0: every head */
    int q0, q1;
} hs_capture_plan;

/* Resolves o->seq_len and the selection against the model: HS_EINVAL with
 * a message naming the option (--layers, --heads, --queries, --seq-len). */
int hs_capture_check(hs_capture_plan *p, hs_capture_opts *o, const hs_model_config *c);

/* The batches a capture of tok runs (HS_EINVAL naming data_path when there
 * is not one whole batch). */
int hs_capture_batches(size_t *n_batches, const hs_capture_opts *o, const hs_tokens *tok);

typedef struct {
    size_t sequences;
    double seconds; /* of the forwards and writes */
    char sha256[65]; /* of the file moved into place, as moved (rank 0; "" elsewhere) */
    uint64_t bytes;
} hs_capture_result;

/* Captures the selected per-head maps of m over tok into o->out (SPEC §6),
 * one batch's maps of one layer in memory at a time. Why one call: the file
 * is all or nothing: on any failure or a stop (HS_EINTR, whose message says
 * that out was not written) the temporary file is removed, and only a
 * complete file is renamed to out. Costs one inference forward per batch
 * plus the writes; hashing model and data when their sha256 is not given. */
int hs_capture(hs_capture_result *r, const hs_model *m, const hs_tokens *tok,
               hs_capture_opts o, const hs_study_io *io);

/* An encoder-decoder's maps of every pair (SPEC §17), every layer, head and
 * query, o->batch pairs a forward, into o->out: /encoder/layer_LL/attn [N, H,
 * S, S], /decoder/layer_LL/attn [N, H, T, T] and /decoder/layer_LL/cross
 * [N, H, T, S] (LL within the stack; S the longest source, T the longest
 * decoder input; what padding holds exactly 0), /source_tokens,
 * /target_tokens (the decoder inputs; /tokens too), /source_mask; all or
 * nothing as hs_capture. */
struct hs_pairs;
int hs_capture_pairs(hs_capture_result *r, const hs_model *m, const struct hs_pairs *p,
                     hs_capture_opts o, const hs_study_io *io);

/* capture --task (SPEC §16): the task of o (read with the tokenizer at
 * `tokenizer`, else co's model directory's) as token data -- its examples
 * right-padded to its length, which becomes co->seq_len -- with their
 * padding as co->attention_mask, every one captured: co->batch becomes the
 * largest divisor of their count that is at most co->batch. Free with
 * hs_capture_task_free. */
typedef struct {
    hs_task task;
    hs_tokens tokens;
    unsigned char *mask;
} hs_capture_task;

int hs_capture_task_load(hs_capture_task *ct, hs_capture_opts *co, const hs_task_opts *o,
                         const hs_model *m, const char *tokenizer);

/* capture --text FILE --lines, or (whole) --seq-len auto (SPEC §21): each
 * line of src's text, or the whole text or shard, one sequence
 * (hs_task_load_lines: co->seq_len 0, else that length; a shard: all its
 * tokens) as capture --task's examples, batched as those. The maps' padded
 * rows and columns are written as 0. */
int hs_capture_lines_load(hs_capture_task *ct, hs_capture_opts *co, const hs_source *src,
                          int whole, const hs_model *m);
void hs_capture_task_free(hs_capture_task *ct);

/* The display string of every token id in tok (the tokenizer's
 * hs_tokenizer_token_text), indexed by id; *n ids. NULL entries for ids
 * the data does not hold. Free with hs_token_table_free. */
int hs_token_table(char ***table, int *n, const hs_tokenizer *tk, const hs_tokens *tok);
void hs_token_table_free(char **table, int n);

#endif
