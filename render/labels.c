/* Tokens as people read them in figures, tables and the viewer. */
#include "labels.h"

#include <stdio.h>
#include <string.h>

/* The length of the well-formed UTF-8 sequence at p (1..4) and its code
 * point, or 0 when the bytes there are not one. */
static int utf8_decode(const unsigned char *p, unsigned *cp)
{
    static const unsigned min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    const int n = p[0] < 0x80 ? 1 : (p[0] & 0xe0) == 0xc0 ? 2 : (p[0] & 0xf0) == 0xe0 ? 3
                : (p[0] & 0xf8) == 0xf0 ? 4 : 0;
    unsigned v = n == 1 ? p[0] : n == 2 ? p[0] & 0x1f : n == 3 ? p[0] & 0x0f : p[0] & 0x07;
    for (int k = 1; k < n; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (p[k] & 0x3f);
    }
    if (!n || v < min[n] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return n;
}

/* Code points gnuplot's default font (DejaVu Sans through cairo) draws. */
static int plot_drawable(unsigned cp)
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
        unsigned cp = 0;
        size_t len = (size_t)utf8_decode(p, &cp);
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
