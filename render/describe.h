/* What `info` and `maps` print: a checkpoint's configuration, parameters,
 * heads per layer, KV-cache bytes and dead heads, and a map file's layers,
 * shapes, dtype, provenance and token text, as text or as one JSON object. */
#ifndef HS_RENDER_DESCRIBE_H
#define HS_RENDER_DESCRIBE_H

#include <stdio.h>

#include "maps.h"
#include "weights.h"

/* What `info` knows of a checkpoint beside m (hs_checkpoint_probe): its
 * dead heads, the bytes its files store, and the batch and sequence length
 * of a memory plan (B 0: none asked for). */
typedef struct {
    const unsigned char *dead; /* hs_dead_heads' layout */
    int n_dead;
    size_t stored;
    int B, T;
} hs_model_facts;

/* m, read from path (its parameters not needed), described on f; with
 * facts->B, the memory plan: the least each kind of command allocates for
 * the parameters as loaded and the activations of B x T (hs_acts_bytes). */
void hs_describe_model(FILE *f, const hs_model *m, const hs_model_facts *facts, const char *path,
                       int json);

/* The map file at path (open as r) described on f. */
void hs_describe_maps(FILE *f, hs_maps_reader *r, const char *path, int json);

#endif
