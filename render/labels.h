/* Tokens as labels people can read (figures, the report, `maps`). */
#ifndef HS_RENDER_LABELS_H
#define HS_RENDER_LABELS_H

#include <stddef.h>

/* A token's display string (a map file's /token_text) as a label, written
 * NUL-terminated into out (n bytes): a space shows as '·', a newline as
 * '↵', a tab as '⇥', a carriage return as "\r", any other control byte or
 * byte that is not well-formed UTF-8 as <0xAB>, the empty string as "''";
 * cut after max_chars characters with '…' (0: no limit). plot_safe also
 * shows code points outside what gnuplot's default font draws (Latin,
 * Greek, Cyrillic, general punctuation, arrows) as <U+ABCD>: cairo's
 * fallback for a missing glyph ruins a whole PNG. */
void hs_token_display(char *out, size_t n, const char *s, int max_chars, int plot_safe);

#endif
