/* JSON values on a stream, for the one-object summaries of --json (SPEC
 * §8) and the descriptions of models and map files. */
#ifndef HS_RENDER_JSONOUT_H
#define HS_RENDER_JSONOUT_H

#include <stdio.h>

/* s as a JSON string literal (quoted; quotes, backslashes and control
 * characters escaped). */
void hs_json_string(FILE *f, const char *s);

/* v with `digits` significant digits (%.*g), or null when it is NaN or
 * infinite (JSON has no such numbers). */
void hs_json_number(FILE *f, double v, int digits);

/* The same with `decimals` digits after the point (%.*f). */
void hs_json_fixed(FILE *f, double v, int decimals);

#endif
