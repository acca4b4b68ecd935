/* The interactive viewer's data (`headscope view`, `report`): a map file
 * (SPEC §6) exported for a browser page opened from file://.
 *
 *   maps.bin   the blocks, one per (sequence, layer, head), back to back:
 *              u8:  float32 scale[nq] (little-endian), then the rows as
 *                   uint8 q with p = q * scale[row] (scale = row max / 255)
 *              f16: the rows as IEEE binary16 (little-endian)
 *              A block whose map is causal (every key after its query is
 *              exactly 0) stores row r's first min(S, q0 + r + 1) keys only
 *              ("packed"); otherwise every row holds S keys.
 *              A map of more than 2048 x 2048 cells (every map with
 *              on_demand) is not there: rows/I_C.js holds rows
 *              [16 C, 16 C + 16) of block I in the same layout (the scales
 *              of those rows, then the rows) as
 *              `HS_ROWS("I_C", "base64");`, and rows/I_ov.js its overview
 *              (max-pooled to at most 512 x 512, u8 on 0..1), so that a
 *              page of T = 8,192 loads a few rows at a time; the block's
 *              entry in maps.js is "" and its index entry says rows (16),
 *              ov_rows and ov_cols.
 *   maps.js    the same blocks as base64 strings, one per block:
 *              `HS_MAPS_B64 = ["...", ...];` (browsers refuse fetch() from
 *              file://, but load a <script>)
 *   data.js    `HS_DATA = {...};` the JSON index: format, version, source,
 *              model (family, layers, heads, kv heads, GQA groups), dtype,
 *              sequences (ids, tokens, token strings; an encoder-decoder's
 *              also src_tokens, src_text), layers (heads, q0, nq, S; an
 *              encoder-decoder's attn: enc, dec or cross, rows the source's
 *              or the target's, keys the source's for enc and cross), seq2seq,
 *              blocks (sequence, layer, head, offset, bytes, packed),
 *              64x64 thumbnails (max over each cell, u8 on 0..1, base64),
 *              and the index's per-head scores for this model when given.
 * Each file is written under a temporary name and renamed when complete;
 * on failure the temporaries are removed and nothing is renamed. */
#ifndef HS_VIEWER_EXPORT_H
#define HS_VIEWER_EXPORT_H

#include "index.h"
#include "maps.h"

enum { HS_VIEWER_THUMB = 64, HS_VIEWER_MAX_SEQS = 64 };

typedef struct {
    const char *maps;      /* the map file */
    const char *dir;       /* existing output directory */
    const char *sequences; /* "0,3,5", or "all" (at most HS_VIEWER_MAX_SEQS; NULL: sequence 0) */
    const char *layers;    /* model layer ids "0,2" (NULL: every captured layer) */
    int half;              /* 1: float16 rows; 0: uint8 with a scale per row */
    hs_index *ix;          /* scores for the head panel (NULL: none) */
    const char *runs;      /* "3,7": the runs whose scores the panel shows (NULL: the latest
                              of each kind and metric) */
    const char *heads;     /* "1.6,0.3": heads of interest, listed in the panel, the first
                              shown when the link names none (NULL: none) */
    const char *compare;   /* a second map file of the same shapes, exported into dir/compare
                              for the page's side-by-side view (NULL: none) */
    const char *var;       /* the globals' suffix: HS_DATA<var>, HS_MAPS_B64<var>, HS_ROWS<var>
                              (NULL: "") */
    int on_demand;         /* 1: every map as row files (default: those over 2048 x 2048 cells) */
} hs_viewer_request;

typedef struct {
    long long bin_bytes, js_bytes, data_bytes; /* maps.bin, maps.js, data.js */
    long long rows_bytes;  /* rows/: the long maps' row files and overviews */
    int blocks, sequences, layers, metrics;
    int features;          /* a features file's page: the features written */
    int token_text;        /* 1: token strings from the file's /token_text */
} hs_viewer_summary;

/* Writes dir/maps.bin, dir/maps.js and dir/data.js for the request. Reads
 * one (nq x S) map at a time, so memory is a few maps whatever the file
 * holds. HS_EINVAL naming the option for a sequence or layer the file lacks
 * (or a list that does not parse), the maps reader's errors for the file,
 * HS_EIO naming the output for a failed write. */
int hs_viewer_export(const hs_viewer_request *rq, hs_viewer_summary *sum);

/* A features file's page data (SPEC §19; store/viewer_features.c): data.js
 * as `HS_DATA = {...};` into f (tmp: its name, for messages) with mode
 * "features", the run's hook, d_sae and heads, and per feature with an
 * example its frequency, mean_act, head_share and examples: each a window
 * of tokens (64 before it, itself, 8 after), the feature's activation on
 * each (from the file's CSR) and, where the index holds it, its DFA as
 * heads x window (dfa_outside: the attribution through earlier sources).
 * *count: the features written. */
int hs_viewer_features_data(FILE *f, const char *tmp, hs_maps_reader *r, hs_index *ix,
                            long long run, const char *source, int *count);

#endif
