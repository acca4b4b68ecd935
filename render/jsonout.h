/* JSON values on a stream, for the one-object summaries of --json (SPEC
 * §8) and the descriptions of models and map files. */
#ifndef HS_RENDER_JSONOUT_H
#define HS_RENDER_JSONOUT_H

#include <stdio.h>

#include "index.h"

/* s as a JSON string literal (quoted; quotes, backslashes and control
 * characters escaped). */
void hs_json_string(FILE *f, const char *s);

/* v with `digits` significant digits (%.*g), or null when it is NaN or
 * infinite (JSON has no such numbers). */
void hs_json_number(FILE *f, double v, int digits);

/* The same with `decimals` digits after the point (%.*f). */
void hs_json_fixed(FILE *f, double v, int decimals);

/* Rows as a JSON array of objects: {layer, head, metric, value, stderr, n},
 * {layer, position, ...}, {sender, receiver, metric, value, stderr, n}. */
void hs_json_head_rows(FILE *f, const hs_metric_row *rows, int n);
void hs_json_position_rows(FILE *f, const hs_position_row *rows, int n);
void hs_json_edge_rows(FILE *f, const hs_edge_row *rows, long n);

#endif
