#include "api_json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static void put(hs_jbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void hs_jraw(hs_jbuf *b, const char *text) { put(b, text, strlen(text)); }

void hs_jf(hs_jbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        put(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    put(b, big, (size_t)n);
    free(big);
}

void hs_jnum(hs_jbuf *b, double v)
{
    if (isnan(v))
        hs_jraw(b, "null");
    else if (isinf(v)) /* standard JSON that every reader takes as infinite */
        hs_jraw(b, v > 0 ? "1e999" : "-1e999");
    else
        hs_jf(b, "%.17g", v);
}

void hs_jstr(hs_jbuf *b, const char *s)
{
    if (!s) {
        hs_jraw(b, "null");
        return;
    }
    put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            const char e[2] = { '\\', (char)*c };
            put(b, e, 2);
        } else if (*c < 0x20) {
            hs_jf(b, "\\u%04x", *c);
        } else {
            put(b, (const char *)c, 1);
        }
    }
    put(b, "\"", 1);
}

void hs_jkey(hs_jbuf *b, int first, const char *key)
{
    if (!first)
        put(b, ",", 1);
    hs_jstr(b, key);
    put(b, ":", 1);
}

int hs_jdone(hs_jbuf *b, char **out)
{
    *out = NULL;
    if (b->failed || !b->s) {
        hs_jfree(b);
        return hs_fail(HS_ENOMEM, "out of memory writing a JSON result");
    }
    *out = b->s;
    b->s = NULL, b->n = b->cap = 0;
    return HS_OK;
}

void hs_jfree(hs_jbuf *b)
{
    free(b->s);
    b->s = NULL, b->n = b->cap = 0;
}
