/* The recorder: runs forwards batch after batch and streams the selected
 * per-head maps of every batch to a sink (the HDF5 writer of store/ in
 * practice) while the forward runs, through the forward's on_maps hook. Only
 * one layer's maps of one batch exist at a time, so memory is flat in the
 * number of batches captured. */
#ifndef HS_RECORDER_H
#define HS_RECORDER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "transformer.h"

/* Where captured data goes. Functions return HS_OK or a status with the
 * message set. */
typedef struct {
    void *ctx;
    /* att (B, H_model, T, T) of model layer `layer` */
    int (*write_maps)(void *ctx, int layer, const hs_real *att, int B, int H_model);
    /* tokens (B, T) of the batch, before its maps */
    int (*write_tokens)(void *ctx, const int32_t *tokens, int B);
} hs_map_sink;

/* Supplies batch i's inputs (B,T); returns HS_OK, or a status. */
typedef int (*hs_batch_fn)(void *ctx, size_t i, int32_t *inputs);

typedef struct {
    int B, T;
    size_t n_batches;
    const unsigned char *layer_on; /* (n_layer) 1 = capture this layer; NULL = all */
    volatile sig_atomic_t *stop;   /* set asynchronously: stop after the current batch */
    void (*progress)(void *ctx, size_t done, size_t total);
    void *progress_ctx;
} hs_record_opts;

/* Runs n_batches forwards of m, sending each batch's tokens and then the
 * maps of every selected layer to sink. HS_EINTR when stopped. */
int hs_record(const hs_model *m, hs_batch_fn next, void *batch_ctx, const hs_map_sink *sink,
              const hs_record_opts *o);

#endif
