/* The JSON text the api/ functions return: a growing buffer with numbers in
 * 17 significant digits (every double reads back as itself), NaN as null
 * and the infinities as 1e999 and -1e999 (standard JSON, which every reader
 * takes as infinite). Internal to api/. */
#ifndef HS_API_JSON_H
#define HS_API_JSON_H

#include <stddef.h>

typedef struct {
    char *s;
    size_t n, cap;
    int failed; /* an allocation failed: every later write is dropped */
} hs_jbuf;

/* Appends text as it is. */
void hs_jraw(hs_jbuf *b, const char *text);
/* A printf-formatted fragment. */
void hs_jf(hs_jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A number (17 significant digits; NaN null, infinities +-1e999). */
void hs_jnum(hs_jbuf *b, double v);
/* A string, escaped; NULL is null. */
void hs_jstr(hs_jbuf *b, const char *s);
/* ",\"key\":" (first: no comma). */
void hs_jkey(hs_jbuf *b, int first, const char *key);

/* The text (malloc'd) into *out and HS_OK, or HS_ENOMEM with b freed. */
int hs_jdone(hs_jbuf *b, char **out);
void hs_jfree(hs_jbuf *b);

#endif
