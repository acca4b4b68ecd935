/* What `info` and `maps` print: a checkpoint's configuration, parameters,
 * heads per layer, KV-cache bytes and dead heads, and a map file's layers,
 * shapes, dtype, provenance and token text, as text or as one JSON object. */
#ifndef HS_RENDER_DESCRIBE_H
#define HS_RENDER_DESCRIBE_H

#include <stdio.h>

#include "maps.h"
#include "weights.h"

/* `info`: the checkpoint in dir read as hs_checkpoint_probe reads it
 * (headers, and W_o up to each head's first nonzero element) and described
 * on f -- configuration, parameters, heads, KV-cache bytes, dead heads --
 * with, for B > 0, the memory plan of B x T: what each kind of command
 * holds for the parameters as loaded and the activations (T 0: min(n_ctx,
 * 256); a T past the context is HS_EINVAL). The status, the message set. */
int hs_describe_checkpoint(FILE *f, const char *dir, int B, int T, int json);

/* The map file at path (open as r) described on f. */
void hs_describe_maps(FILE *f, hs_maps_reader *r, const char *path, int json);

#endif
