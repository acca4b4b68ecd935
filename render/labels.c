/* Tokens as people read them in figures, tables and the viewer. */
#include "labels.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

/* Code points gnuplot's default font (DejaVu Sans through cairo) draws. */
static int plot_drawable(uint32_t cp)
{
    return (cp >= 0x20 && cp < 0x7f) || (cp >= 0xa0 && cp <= 0x24f) ||
           (cp >= 0x370 && cp <= 0x4ff) || (cp >= 0x2010 && cp <= 0x2027) ||
           (cp >= 0x2190 && cp <= 0x21ff);
}

void hs_token_display(char *out, size_t n, const char *s, int max_chars, int plot_safe)
{
    if (!n)
        return;
    const unsigned char *p = (const unsigned char *)s;
    size_t k = 0;
    if (!*p)
        p = (const unsigned char *)"''";
    for (int chars = 0; *p;) {
        char piece[16];
        uint32_t cp = 0;
        size_t len = (size_t)hs_utf8_decode(p, strlen((const char *)p), &cp);
        if (max_chars && chars >= max_chars)
            snprintf(piece, sizeof piece, "…"), len = strlen((const char *)p);
        else if (!len)
            snprintf(piece, sizeof piece, "<0x%02X>", *p), len = 1;
        else if (cp == ' ')
            snprintf(piece, sizeof piece, "·");
        else if (cp == '\n')
            snprintf(piece, sizeof piece, "↵");
        else if (cp == '\t')
            snprintf(piece, sizeof piece, "⇥");
        else if (cp == '\r')
            snprintf(piece, sizeof piece, "\\r");
        else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0))
            snprintf(piece, sizeof piece, "<0x%02X>", cp);
        else if (plot_safe && !plot_drawable(cp))
            snprintf(piece, sizeof piece, "<U+%04X>", cp);
        else
            memcpy(piece, p, len), piece[len] = 0;
        const size_t pl = strlen(piece);
        if (k + pl + 1 > n)
            break;
        memcpy(out + k, piece, pl);
        k += pl;
        p += len;
        chars += piece[0] == '<' && pl > 1 ? (int)pl : 1; /* an escape's width */
    }
    out[k] = 0;
}
