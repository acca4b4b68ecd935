#include "utf8.h"

int hs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (!n)
        return 0;
    const unsigned c = s[0];
    /* the length and the range of the second byte, by the first (Table 3-7):
     * E0 and F0 exclude overlong forms, ED the surrogates, F4 what lies past
     * U+10FFFF; C0, C1 and F5..FF never start a sequence */
    int len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80)
        len = 1;
    else if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return 0;
    if ((size_t)len > n || (len > 1 && (s[1] < lo || s[1] > hi)))
        return 0;
    uint32_t v = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (s[k] & 0x3f);
    }
    if (cp)
        *cp = v;
    return len;
}

size_t hs_utf8_check(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* the common case, without the call */
            i++;
            continue;
        }
        const int k = hs_utf8_decode(p + i, n - i, NULL);
        if (!k)
            return i;
        i += (size_t)k;
    }
    return n;
}

int hs_utf8_valid(const char *s, size_t n)
{
    return hs_utf8_check(s, n) == n;
}

void hs_utf8_sanitize(char *s, int controls)
{
    unsigned char *p = (unsigned char *)s;
    size_t n = 0;
    while (p[n])
        n++;
    for (size_t i = 0; i < n;) {
        const int k = hs_utf8_decode(p + i, n - i, NULL);
        if (!k || (controls && k == 1 && (p[i] < 0x20 || p[i] == 0x7f))) {
            p[i++] = '?';
            continue;
        }
        i += (size_t)k;
    }
}
