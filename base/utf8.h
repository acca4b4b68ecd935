/* UTF-8 well-formedness (Unicode 15, Table 3-7), for text read from files
 * that headscope prints or hands on: map files' strings, token strings.
 * One checker, so that every reader agrees on what is text: no overlong
 * forms, no UTF-16 surrogates (U+D800..DFFF), nothing past U+10FFFF, no
 * sequence cut short. */
#ifndef HS_UTF8_H
#define HS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The length (1..4) of the well-formed sequence at s, which has n bytes
 * left, and its code point in *cp (cp may be NULL); 0 when the bytes there
 * do not start one (or n is 0). Reads at most min(n, 4) bytes. */
int hs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* The offset of the first byte of the n at s that does not belong to a
 * well-formed sequence, or n when they are all UTF-8 (NUL is a character). */
size_t hs_utf8_check(const char *s, size_t n);

/* 1 when the n bytes at s are well-formed UTF-8: hs_utf8_check(s, n) == n. */
int hs_utf8_valid(const char *s, size_t n);

/* Replaces in place, in the NUL-terminated s, each byte that does not
 * belong to a well-formed sequence with '?'; with controls set, the ASCII
 * control characters (below 0x20, and 0x7f) too. The length never changes.
 * For strings from a file that reach a terminal or a page. */
void hs_utf8_sanitize(char *s, int controls);

#endif
