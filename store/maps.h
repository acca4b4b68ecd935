/* HDF5 map files (SPEC §6), written by capture and read by plot, patterns
 * and the tests:
 *   /              attrs format="headscope-maps", version=1, model_sha256,
 *                  model_config, data_path, data_sha256, seq_len, tool_version,
 *                  complete (0|1)
 *   /tokens        int32 [N, T]
 *   /token_text    variable-length UTF-8 strings [N, T], parallel to /tokens:
 *                  the display string of every token (SPEC §9), written when
 *                  a tokenizer is known; optional for readers
 * An encoder-decoder's file (SPEC §17) holds instead /encoder/layer_LL/attn
 * [N, H, S, S], /decoder/layer_LL/attn [N, H, T, T] and /cross [N, H, T, S],
 * /source_tokens [N, S], /target_tokens [N, T] (the decoder inputs; /tokens
 * the same), /source_mask [N, S] and /target_mask [N, T] (int8, 1 = real),
 * and with a tokenizer /source_token_text and /target_token_text (also
 * linked as /source_tokens_text and /target_tokens_text).
 *   /layer_LL/attn float32|float16 [N, H, Q, S], chunked [1,1,Q,S], extendible
 *                  on N; attrs layer, heads (the captured head ids),
 *                  query_start; dimension labels seq, head, query, key.
 * float16 is IEEE half declared as a custom HDF5 type; values are converted
 * in our code, never by HDF5's conversion path. */
#ifndef HS_MAPS_H
#define HS_MAPS_H

#include <stdint.h>

#include "common.h"
#include "config.h"
#include "dtype.h" /* float16 storage: hs_float_to_half, hs_half_to_float */
#include "recorder.h"

enum { HS_MAPS_MAX_LAYERS = 256 };

typedef struct {
    const char *model_sha256, *model_config, *data_path, *data_sha256;
    int seq_len; /* T */
    int half;     /* 1: float16 storage */
    int compress; /* 0: none; 1..9: shuffle + deflate level */
} hs_maps_meta;

typedef struct hs_maps_writer hs_maps_writer;

/* Creates the temporary file PATH.tmp.PID.XXXXXX next to path (hs_tmp_create:
 * an unpredictable name, O_EXCL, so a symlink planted beside path is never
 * followed). Refuses an existing path unless force; without force the
 * finish, too, moves the file into place only where nothing is (an output
 * that appeared meanwhile is kept and the finish fails). First removes the
 * temporaries of path whose process no longer exists on this machine (a
 * capture killed with SIGKILL; hs_tmp_stale, and the PATH.tmp.PID names of
 * earlier versions). On any failure, later, every HDF5 id is closed and the
 * temporary file removed. */
int hs_maps_create(hs_maps_writer **w, const char *path, const hs_maps_meta *meta, int force);

/* Gives the file /token_text: text[id] is the display string of token id
 * (id < n; entries of ids the data does not hold may be NULL). Not copied:
 * it must outlive the writer. Call before the first append. */
int hs_maps_set_token_text(hs_maps_writer *w, const char *const *text, int n);

/* Declares a captured layer: nh heads (ids `heads`), queries [q0, q0+nq) of
 * T, all T keys. Call once per layer before the first append. */
int hs_maps_add_layer(hs_maps_writer *w, int layer, int nh, const int *heads, int q0, int nq);

/* Declares map `id` (an id of its own for hs_maps_append, every other map's
 * id distinct) as the dataset /group/name [N, nh, rows, keys] of heads 0 ..
 * nh-1 and every query row (layer: its layer attribute): an
 * encoder-decoder's (SPEC §17) "encoder/layer_LL" "attn", "decoder/layer_LL"
 * "attn" and "cross" maps, whose appends give att (B, nh, rows, keys). Call
 * before the first append. */
int hs_maps_add_map(hs_maps_writer *w, int id, int layer, const char *group, const char *name,
                    int nh, int rows, int keys);

/* Appends B sequences' maps of `layer` from att (B, H_model, T, T): the
 * declared heads and query rows are copied out and converted here, and
 * written by the writer's I/O thread while the caller goes on (att may be
 * reused as soon as this returns). A write failure is reported by a later
 * append or by hs_maps_finish. */
int hs_maps_append(hs_maps_writer *w, int layer, const hs_real *att, int B, int H_model);

/* Appends B rows of tokens (B,T) to /tokens, and their strings to
 * /token_text when the writer has it (an id without a string is
 * HS_EINVAL). */
int hs_maps_append_tokens(hs_maps_writer *w, const int32_t *tokens, int B);

/* A task's padding (SPEC §16): /attention_mask, int8 [n, T], 1 for a real
 * token, 0 for padding, of the n sequences appended (all of them: call
 * after the last append; the writer's I/O is finished first). HS_EINVAL
 * when n is not the sequences written. */
int hs_maps_write_attention_mask(hs_maps_writer *w, const unsigned char *mask, long long n);

/* Whole [n, cols] datasets written after the last append (the writer's
 * I/O finished first): int32 ids (an encoder-decoder's /source_tokens,
 * /target_tokens) and an int8 mask (/source_mask). */
int hs_maps_write_ids(hs_maps_writer *w, const char *name, const int32_t *ids, long long n,
                      int cols);
int hs_maps_write_mask(hs_maps_writer *w, const char *name, const unsigned char *mask,
                       long long n, int cols);

/* The display strings of ids [n, cols] (text[id], id < n_text, each one
 * there: HS_EINVAL naming the id otherwise) as the variable-length UTF-8
 * dataset /name after the last append (an encoder-decoder's
 * /source_token_text and /target_token_text), also reachable as /alias
 * (NULL: none; a hard link, not a copy). */
int hs_maps_write_text(hs_maps_writer *w, const char *name, const char *alias, const int32_t *ids,
                       long long n, int cols, const char *const *text, int n_text);

/* B sequences' sparse SAE features (SPEC §19) in CSR over their B T tokens
 * (sequence-major): row_nnz (B T) the nonzero count of each token's row,
 * indices (int32) and values (float32) of all of them in order, appended to
 * /features/{indptr,indices,values} (indptr int64 [tokens + 1]), the
 * group's attributes d_sae, hook_name and sae set at the first call; and
 * the tokens (B, T) to /tokens (and /token_text). Synchronous, for a file
 * of no maps (HS_EINVAL after hs_maps_add_layer or an append of maps); at
 * most INT_MAX entries a call. */
typedef struct {
    int d_sae, vocab_size;  /* vocab_size: the model's (the viewer's byte-level tokens) */
    long long run_id;       /* the features run that wrote the file (attribute run_id) */
    const char *hook, *sae;
    const int32_t *row_nnz;
    const int32_t *indices;
    const float *values;
} hs_maps_csr;
int hs_maps_append_csr(hs_maps_writer *w, const hs_maps_csr *c, const int32_t *tokens, int B);

/* The writer as the recorder's sink (capture/recorder.h). */
hs_map_sink hs_maps_sink(hs_maps_writer *w);

/* Marks the file complete and moves it to its final name: closed with
 * complete=0, moved (hs_tmp_commit; without force HS_EIO "PATH exists" when
 * another writer finished first), then complete=1 set, so no crash point
 * leaves a file that claims completeness without being it. Frees w. */
int hs_maps_finish(hs_maps_writer *w);

/* hs_maps_finish, giving the sha256 (65 bytes, "" on failure) and size of
 * the file it moved into place, read through the descriptor it held: the
 * digest of that file, not of whatever the name names later. HS_EIO when a
 * --force writer replaced the file before it was marked or hashed. */
int hs_maps_finish_sha(hs_maps_writer *w, char sha256[65], uint64_t *bytes);

/* Closes and deletes the temporary file. Frees w. */
void hs_maps_abort(hs_maps_writer *w);

/* ---- reading ---- */

typedef struct {
    int layer;   /* model layer index (an encoder-decoder's: within its stack) */
    int attn;    /* 0 one stack's; an encoder-decoder's 1 encoder self, 2 decoder
                    self, 3 cross (hs_attn_type's values) */
    int nh;      /* captured heads */
    int heads[HS_MAX_HEADS];
    int q0, nq;  /* query rows */
    int S;       /* keys (cross: the source's positions) */
    int half;    /* stored as float16 */
} hs_maps_layer_info;

typedef struct hs_maps_reader hs_maps_reader;

typedef struct {
    int version, complete, seq_len;
    int has_token_text; /* the file holds /token_text (an encoder-decoder's: /target_token_text) */
    int seq2seq;        /* an encoder-decoder's file: seq_len is T (the decoder inputs, /tokens) */
    int src_len;        /* seq2seq: S, /source_tokens' columns */
    int has_source_text; /* seq2seq: /source_token_text */
    int features;       /* a features file (SPEC §19): /features in CSR over the tokens */
    int has_attention_mask; /* /attention_mask: a task's or --lines' padding */
    int d_sae, features_run, vocab_size;
    char features_hook[128];
    long long n_seq;
    char model_sha256[80], data_sha256[80], tool_version[32];
    char data_path[512];
    char *model_config; /* JSON text (owned by the reader) */
    int n_layers;
    hs_maps_layer_info layers[HS_MAPS_MAX_LAYERS];
} hs_maps_info;

/* Opens and checks the layout (format, version, shapes, dtypes) and every
 * attribute's type, size and range before use: a hostile file is refused
 * with HS_EFORMAT and nothing left open. An encoder-decoder's file (the
 * group /encoder) lists its maps as layers: every encoder layer's, then the
 * decoder's self-attention, then its cross-attention (attn 1, 2, 3). No global state: callable on any
 * path, any number of times. */
int hs_maps_open(hs_maps_reader **r, const char *path);
/* hs_maps_open without its first step, a probe of the file in a child
 * process (time limit 20 s) that turns a crash or hang of libhdf5 on a
 * malformed file into a refusal. For fuzzing our own checks in process. */
int hs_maps_open_here(hs_maps_reader **r, const char *path);
const hs_maps_info *hs_maps_get_info(const hs_maps_reader *r);
/* The map of captured layer index li (0..n_layers-1), sequence n, captured
 * head index hi, as float (nq x S). */
int hs_maps_read(hs_maps_reader *r, int li, long long n, int hi, float *out);
/* Tokens of sequence n (T). */
int hs_maps_read_tokens(hs_maps_reader *r, long long n, int32_t *out);
/* Sequence n's /attention_mask (T values, 1 a real token, 0 padding; HS_EINVAL
 * when the file has none, HS_EFORMAT naming it for another value). */
int hs_maps_read_attention_mask(hs_maps_reader *r, long long n, int32_t *out);
/* An encoder-decoder's file: the source tokens of sequence n (src_len) and,
 * text not NULL, their display strings (as hs_maps_read_token_text). */
int hs_maps_read_source(hs_maps_reader *r, long long n, int32_t *ids, char **text);
/* A features file's rows of sequence n (its T tokens): indptr (T + 1, from
 * 0), and *indices and *values (malloc'd, indptr[T] of them; NULL when 0)
 * the active features and their values, token by token. HS_EFORMAT naming
 * the file when the rows are not increasing, point outside the arrays or
 * name a feature outside 0 .. d_sae - 1. */
int hs_maps_read_features(hs_maps_reader *r, long long n, long long *indptr, int32_t **indices,
                          float **values);

/* The display strings of sequence n's tokens (T, from /token_text): each
 * out[t] malloc'd (free them with hs_maps_free_token_text), bytes that are
 * not well-formed UTF-8 replaced by '?'. HS_EINVAL when the file has none. */
int hs_maps_read_token_text(hs_maps_reader *r, long long n, char **out);
void hs_maps_free_token_text(char **text, int T);
void hs_maps_close(hs_maps_reader *r);

/* HDF5 ids open in this process (files, datasets, attributes, ...): 0 when
 * every writer and reader is closed, on every error path (tests). */
long long hs_maps_open_ids(void);

#endif
