/* Corpus BLEU as sacreBLEU's defaults compute it (bleu.h). The 13a
 * regexes run through PCRE2 in UTF mode, as Python's re.sub runs them: one
 * global substitution after another, left to right, matches not
 * overlapping. An n-gram is the stretch of the tokenized line from its first
 * token to its last (the tokens are joined by single spaces), so it is
 * compared as bytes. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bleu.h"

#include <math.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* sacreBLEU's TokenizerRegexp, in its order: pattern, replacement */
static const char *const RULES[][2] = {
    { "([\\{-\\~\\[-\\` -\\&\\(-\\+\\:-\\@\\/])", " $1 " },
    { "([^0-9])([\\.,])", "$1 $2 " },
    { "([\\.,])([^0-9])", " $1 $2" },
    { "([0-9])(-)", "$1 $2 " },
};
enum { N_RULES = sizeof RULES / sizeof RULES[0] };

typedef struct {
    pcre2_code *re[N_RULES];
} rules;

static void rules_free(rules *r)
{
    for (int i = 0; i < N_RULES; i++)
        pcre2_code_free(r->re[i]);
}

static int rules_compile(rules *r)
{
    memset(r, 0, sizeof *r);
    for (int i = 0; i < N_RULES; i++) {
        int err;
        PCRE2_SIZE at;
        r->re[i] = pcre2_compile((PCRE2_SPTR)RULES[i][0], PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err,
                                 &at, NULL);
        if (!r->re[i]) {
            rules_free(r);
            return hs_fail(HS_ENOMEM, "bleu: the 13a rules");
        }
    }
    return HS_OK;
}

/* Python's str.isspace: Unicode White_Space and the separators 0x1c..0x1f */
static int py_space(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* the length of s without its trailing whitespace */
static size_t rstrip(const char *s, size_t n)
{
    while (n) {
        size_t j = n - 1;
        while (j > 0 && ((unsigned char)s[j] & 0xc0) == 0x80)
            j--;
        uint32_t cp;
        if (!hs_utf8_decode((const unsigned char *)s + j, n - j, &cp) || !py_space(cp))
            break;
        n = j;
    }
    return n;
}

/* every `from` in s[0, *n) replaced by `to` (no longer than from), in place */
static void replace_all(char *s, size_t *n, const char *from, const char *to)
{
    const size_t fn = strlen(from), tn = strlen(to);
    size_t r = 0, w = 0;
    while (r < *n) {
        if (*n - r >= fn && !memcmp(s + r, from, fn)) {
            memcpy(s + w, to, tn);
            w += tn, r += fn;
        } else
            s[w++] = s[r++];
    }
    *n = w;
}

/* one global substitution: *s (malloc'd, *n bytes) replaced */
static int substitute(const pcre2_code *re, const char *repl, char **s, size_t *n)
{
    PCRE2_SIZE cap = 2 * *n + 64, len;
    for (;;) {
        char *out = malloc(cap);
        if (!out)
            return hs_fail(HS_ENOMEM, "%zu bytes", *n);
        len = cap;
        int rc = pcre2_substitute(re, (PCRE2_SPTR)*s, *n, 0,
                                  PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH |
                                      PCRE2_NO_UTF_CHECK,
                                  NULL, NULL, (PCRE2_SPTR)repl, PCRE2_ZERO_TERMINATED,
                                  (PCRE2_UCHAR *)out, &len);
        if (rc >= 0) {
            free(*s);
            *s = out, *n = len;
            return HS_OK;
        }
        free(out);
        if (rc != PCRE2_ERROR_NOMEMORY)
            return hs_fail(HS_EINVAL, "the 13a rules failed (PCRE2 %d)", rc);
        cap = len; /* the length it needs */
    }
}

/* the 13a tokens of text joined by spaces into *out (malloc'd) */
static int tokenize_with(const rules *r, const char *text, char **out)
{
    *out = NULL;
    size_t n = strlen(text);
    if (!hs_utf8_valid(text, n))
        return hs_fail(HS_EINVAL, "not UTF-8");
    n = rstrip(text, n);
    char *s = malloc(n + 3);
    if (!s)
        return hs_fail(HS_ENOMEM, "%zu bytes", n);
    memcpy(s + 1, text, n); /* the line between two spaces, as 13a pads it */
    size_t len = n;
    char *body = s + 1;
    replace_all(body, &len, "<skipped>", "");
    replace_all(body, &len, "-\n", "");
    replace_all(body, &len, "\n", " ");
    if (memchr(body, '&', len)) {
        replace_all(body, &len, "&quot;", "\"");
        replace_all(body, &len, "&amp;", "&");
        replace_all(body, &len, "&lt;", "<");
        replace_all(body, &len, "&gt;", ">");
    }
    s[0] = ' ', s[len + 1] = ' ';
    len += 2;
    for (int i = 0; i < N_RULES; i++) {
        int rc = substitute(r->re[i], RULES[i][1], &s, &len);
        if (rc) {
            free(s);
            return rc;
        }
    }
    /* ' '.join(line.split()) */
    size_t w = 0;
    uint32_t cp;
    for (size_t i = 0; i < len;) {
        int l = hs_utf8_decode((const unsigned char *)s + i, len - i, &cp);
        l = l ? l : 1;
        if (py_space(cp)) {
            i += (size_t)l;
            continue;
        }
        if (w)
            s[w++] = ' ';
        while (i < len) {
            l = hs_utf8_decode((const unsigned char *)s + i, len - i, &cp);
            l = l ? l : 1;
            if (py_space(cp))
                break;
            memmove(s + w, s + i, (size_t)l);
            w += (size_t)l, i += (size_t)l;
        }
    }
    s[w] = 0; /* w < len: the padded line starts with a space */
    *out = s;
    return HS_OK;
}

char *hs_bleu_tokenize(const char *text)
{
    rules r;
    char *s = NULL;
    if (!rules_compile(&r) && tokenize_with(&r, text, &s))
        hs_fail(HS_EINVAL, "bleu: %s", hs_last_error());
    rules_free(&r);
    return s;
}

/* ---- n-gram counts ---- */

typedef struct {
    const char *s; /* the tokenized line the n-gram is in */
    uint32_t off, len, count;
    int order;     /* 0 .. HS_BLEU_ORDER - 1 */
} gram;

typedef struct {
    gram *slot; /* cap; len 0: empty */
    size_t cap;
} gram_map;

static uint64_t hash_of(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* the slot of s[0, n), or the empty one where it would go */
static gram *find(const gram_map *m, const char *s, size_t n)
{
    for (size_t i = hash_of(s, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        gram *g = &m->slot[i];
        if (!g->len || (g->len == n && !memcmp(g->s + g->off, s, n)))
            return g;
    }
}

/* the 1- to 4-grams of a tokenized line into m (sized for them); *tokens */
static int count_grams(gram_map *m, const char *s, long long *tokens)
{
    size_t n = strlen(s), ntok = 0;
    uint32_t *start = malloc((n / 2 + 2) * sizeof *start);
    if (!start)
        return hs_fail(HS_ENOMEM, "bleu: a segment of %zu bytes", n);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || s[i - 1] == ' ')
            start[ntok++] = (uint32_t)i;
    m->cap = 16;
    while (m->cap < 2 * HS_BLEU_ORDER * ntok + 2)
        m->cap *= 2;
    m->slot = calloc(m->cap, sizeof *m->slot);
    if (!m->slot) {
        free(start);
        return hs_fail(HS_ENOMEM, "bleu: the n-grams of %zu tokens", ntok);
    }
    for (size_t i = 0; i < ntok; i++)
        for (int k = 0; k < HS_BLEU_ORDER && i + (size_t)k < ntok; k++) {
            const size_t last = i + (size_t)k;
            const size_t end = last + 1 < ntok ? start[last + 1] - 1 : n;
            gram *g = find(m, s + start[i], end - start[i]);
            if (!g->len)
                *g = (gram){ s, start[i], (uint32_t)(end - start[i]), 0, k };
            g->count++;
        }
    free(start);
    *tokens = (long long)ntok;
    return HS_OK;
}

/* adds one segment's statistics: hypothesis and reference tokenized */
static int segment(hs_bleu *b, const char *hyp, const char *ref)
{
    gram_map h = { 0 }, r = { 0 };
    long long hl, rl;
    int rc = count_grams(&h, hyp, &hl);
    if (!rc)
        rc = count_grams(&r, ref, &rl);
    for (size_t i = 0; !rc && i < h.cap; i++) {
        const gram *g = &h.slot[i];
        if (!g->len)
            continue;
        const gram *in = find(&r, g->s + g->off, g->len);
        b->total[g->order] += g->count;
        b->correct[g->order] += in->len ? (g->count < in->count ? g->count : in->count) : 0;
    }
    if (!rc)
        b->sys_len += hl, b->ref_len += rl;
    free(h.slot), free(r.slot);
    return rc;
}

/* sacreBLEU's my_log: log, with 0 as -9999999999 */
static double my_log(double x)
{
    return x == 0.0 ? -9999999999.0 : log(x);
}

/* BLEU.compute_bleu with smooth_method "exp", effective_order off */
static void score(hs_bleu *b)
{
    b->bp = 1.0;
    if (b->sys_len < b->ref_len)
        b->bp = b->sys_len > 0 ? exp(1.0 - (double)b->ref_len / (double)b->sys_len) : 0.0;
    int any = 0;
    for (int k = 0; k < HS_BLEU_ORDER; k++)
        any |= b->correct[k] != 0;
    b->score = 0.0;
    if (!any)
        return;
    double smooth = 1.0, sum = 0.0;
    for (int k = 0; k < HS_BLEU_ORDER; k++) {
        if (b->total[k] == 0)
            break;
        if (b->correct[k] == 0) {
            smooth *= 2;
            b->precisions[k] = 100.0 / (smooth * (double)b->total[k]);
        } else
            b->precisions[k] = 100.0 * (double)b->correct[k] / (double)b->total[k];
    }
    for (int k = 0; k < HS_BLEU_ORDER; k++)
        sum += my_log(b->precisions[k]);
    b->score = b->bp * exp(sum / HS_BLEU_ORDER);
}

int hs_bleu_corpus(const char *const *hyps, const char *const *refs, size_t n, hs_bleu *out)
{
    memset(out, 0, sizeof *out);
    rules r;
    int rc = rules_compile(&r);
    for (size_t i = 0; !rc && i < n; i++) {
        char *h = NULL, *f = NULL;
        rc = tokenize_with(&r, hyps[i], &h);
        const char *side = rc ? "hypothesis" : "reference";
        if (!rc)
            rc = tokenize_with(&r, refs[i], &f);
        if (rc)
            rc = hs_fail(rc, "bleu: segment %zu's %s: %s", i, side, hs_last_error());
        else
            rc = segment(out, h, f);
        free(h), free(f);
    }
    if (!rc)
        score(out);
    rules_free(&r);
    return rc;
}
