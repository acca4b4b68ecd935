/* Checkpoints with pruned_heads (SPEC §16), as transformers' prune_heads +
 * save_pretrained writes them for bert, roberta and gpt2: layer l's
 * attention tensors hold only the kept heads, in ascending original order
 * (find_pruneable_heads_and_indices) -- q, k and v rows (GPT-2's c_attn:
 * the columns of each of its q | k | v blocks) and the output projection's
 * columns (GPT-2's c_proj: rows). headscope keeps every head in memory (a
 * pruned one dead: its weights 0), so results keep the original head
 * numbers; these functions move one file tensor between the two forms. */
#ifndef HS_PRUNED_H
#define HS_PRUNED_H

#include <stdint.h>

#include "common.h"
#include "config.h"

/* Where a file tensor holds the heads of one layer: along axis (0: rows or
 * a 1-D tensor's elements, 1: columns) in `blocks` runs of H x dh
 * elements, head by head. */
typedef struct {
    int layer, axis, blocks;
} hs_pruned_span;

/* 1 when the file tensor `name` (ndim dimensions) of c's family holds the
 * heads of a layer some of whose heads c->pruned names (*s: how); else 0. */
int hs_pruned_span_of(const hs_model_config *c, const char *name, int ndim, hs_pruned_span *s);

/* The file's shape of a tensor whose full shape is `shape` (ndim): the
 * span's axis without the pruned heads. */
void hs_pruned_shape(const hs_model_config *c, const hs_pruned_span *s, int64_t *shape);

/* in (the file's tensor, pruned shape) into out (the full shape, `full`):
 * the kept heads in place, zeros at the pruned ones. */
int hs_pruned_expand(const hs_model_config *c, const hs_pruned_span *s, const int64_t *full,
                     int ndim, const float *in, float *out);

/* The reverse: in (full shape) into out (the file's, pruned shape). Each
 * HS_OK, or HS_ENOMEM. */
int hs_pruned_reduce(const hs_model_config *c, const hs_pruned_span *s, const int64_t *full,
                     int ndim, const double *in, double *out);

#endif
