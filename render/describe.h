/* What `info` and `maps` print: a checkpoint's configuration, parameters,
 * heads per layer, KV-cache bytes and dead heads, and a map file's layers,
 * shapes, dtype, provenance and token text, as text or as one JSON object. */
#ifndef HS_RENDER_DESCRIBE_H
#define HS_RENDER_DESCRIBE_H

#include <stdio.h>

#include "maps.h"
#include "weights.h"

/* m, loaded from path, described on f. */
void hs_describe_model(FILE *f, const hs_model *m, const char *path, int json);

/* The map file at path (open as r) described on f. */
void hs_describe_maps(FILE *f, hs_maps_reader *r, const char *path, int json);

#endif
