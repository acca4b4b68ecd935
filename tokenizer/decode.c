/* Ids back to text through the decoder chain of the file (HF's
 * decode_chain: each decoder maps a list of token strings to another). The
 * display form of hs_tokenizer_token_text runs the same chain on one token
 * but keeps its leading space (a label " the" says the token holds the
 * space) and its bytes as they are, showing incomplete UTF-8 as <0xAB>. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct {
    tk_buf *s;   /* n strings */
    char *added; /* added token: ByteLevel leaves it alone (as transformers.js) */
    size_t n, cap;
} toklist;

static void list_free(toklist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->s[i].p);
    free(l->s), free(l->added);
    l->s = NULL, l->added = NULL, l->n = l->cap = 0;
}

/* grows by doubling: one realloc a token made decoding n tokens O(n^2) in
 * copies wherever realloc moves the block */
static int list_add(toklist *l, const char *s, size_t n, int added)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        tk_buf *g = realloc(l->s, cap * sizeof *g);
        if (g)
            l->s = g;
        char *a = g ? realloc(l->added, cap) : NULL;
        if (a)
            l->added = a;
        if (!g || !a)
            return hs_fail(HS_ENOMEM, "tokenizer: decoding");
        l->cap = cap;
    }
    l->s[l->n] = (tk_buf){ 0 };
    l->added[l->n] = (char)added;
    return tk_buf_add(&l->s[l->n++], s, n);
}

/* ByteLevel: runs of model tokens to their bytes, one string per run */
static int dec_bytelevel(const hs_tokenizer *t, const toklist *in, toklist *out, int display)
{
    tk_buf run = { 0 };
    int rc = HS_OK;
    for (size_t i = 0; i <= in->n && !rc; i++) {
        if (i == in->n || in->added[i]) {
            if (run.n) {
                tk_buf fixed = { 0 };
                rc = display ? list_add(out, run.p, run.n, 0)
                             : tk_utf8_lossy(&fixed, run.p, run.n) || list_add(out, fixed.p, fixed.n, 0);
                free(fixed.p);
                run.n = 0;
            }
            if (i < in->n && !rc)
                rc = list_add(out, in->s[i].p, in->s[i].n, 1);
            continue;
        }
        const char *s = in->s[i].p;
        size_t n = in->s[i].n, k = 0;
        uint32_t cp;
        while (k < n && !rc) {
            int l = tk_utf8_next(s + k, n - k, &cp);
            int b = l && cp < 512 ? t->cp_byte[cp] : -1;
            if (b < 0) { /* outside the alphabet: the character itself */
                rc = tk_buf_add(&run, s + k, (size_t)(l ? l : 1));
                k += (size_t)(l ? l : 1);
                continue;
            }
            unsigned char ch = (unsigned char)b;
            rc = tk_buf_add(&run, &ch, 1);
            k += (size_t)l;
        }
    }
    free(run.p);
    return rc;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int byte_token(const tk_buf *s)
{
    if (s->n != 6 || memcmp(s->p, "<0x", 3) || s->p[5] != '>')
        return -1;
    int hi = hexval(s->p[3]), lo = hexval(s->p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* ByteFallback: runs of <0xAB> tokens to their text; one U+FFFD per byte
 * when a run is not valid UTF-8 (HF) */
static int dec_bytefallback(const toklist *in, toklist *out, int display)
{
    tk_buf run = { 0 };
    int rc = HS_OK;
    for (size_t i = 0; i <= in->n && !rc; i++) {
        int b = i < in->n ? byte_token(&in->s[i]) : -1;
        if (b >= 0) {
            unsigned char ch = (unsigned char)b;
            rc = tk_buf_add(&run, &ch, 1);
            continue;
        }
        if (run.n) {
            if (display || hs_utf8_check(run.p, run.n) == run.n)
                rc = list_add(out, run.p, run.n, 0);
            else
                for (size_t k = 0; k < run.n && !rc; k++)
                    rc = list_add(out, "\xef\xbf\xbd", 3, 0);
            run.n = 0;
        }
        if (i < in->n && !rc)
            rc = list_add(out, in->s[i].p, in->s[i].n, in->added[i]);
    }
    free(run.p);
    return rc;
}

static int replace_all(tk_buf *out, const tk_buf *s, const tk_str *pat, const char *with,
                       size_t with_n)
{
    size_t i = 0;
    while (i < s->n) {
        const char *hit = pat->n && pat->n <= s->n - i ? memmem(s->p + i, s->n - i, pat->s, pat->n) : NULL;
        if (!hit)
            break;
        if (tk_buf_add(out, s->p + i, (size_t)(hit - s->p) - i) || tk_buf_add(out, with, with_n))
            return HS_ENOMEM;
        i = (size_t)(hit - s->p) + pat->n;
    }
    return tk_buf_add(out, s->p + i, s->n - i);
}

/* WordPiece: a token after the first loses its prefix ("##ing"), or a
 * space comes before it; cleanup: HF's replacements, in its order, on each
 * token (" ." to ".", " do not" to " don't", ...) */
static int dec_wordpiece(tk_buf *out, const tk_buf *s, const tk_dec *d, int first)
{
    static const char *const fix[][2] = { { " .", "." }, { " ?", "?" }, { " !", "!" },
                                          { " ,", "," }, { " ' ", "'" }, { " n't", "n't" },
                                          { " 'm", "'m" }, { " do not", " don't" },
                                          { " 's", "'s" }, { " 've", "'ve" }, { " 're", "'re" } };
    tk_buf a = { 0 }, b = { 0 };
    int rc;
    if (first)
        rc = tk_buf_add(&a, s->p, s->n);
    else if (s->n >= d->a.n && !memcmp(s->p, d->a.s, d->a.n))
        rc = tk_buf_add(&a, s->p + d->a.n, s->n - d->a.n);
    else
        rc = tk_buf_add(&a, " ", 1) || tk_buf_add(&a, s->p, s->n);
    for (size_t k = 0; d->start && !rc && k < sizeof fix / sizeof fix[0]; k++) {
        tk_str pat = { (char *)fix[k][0], strlen(fix[k][0]) };
        b.n = 0;
        rc = replace_all(&b, &a, &pat, fix[k][1], strlen(fix[k][1]));
        tk_buf x = a;
        a = b, b = x;
    }
    if (!rc)
        rc = tk_buf_add(out, a.p ? a.p : "", a.n);
    free(a.p), free(b.p);
    return rc ? HS_ENOMEM : HS_OK;
}

static int dec_step(const hs_tokenizer *t, const tk_dec *d, const toklist *in, toklist *out,
                    int display)
{
    int rc = HS_OK;
    if (d->type == TK_D_BYTELEVEL)
        return dec_bytelevel(t, in, out, display);
    if (d->type == TK_D_BYTEFALLBACK)
        return dec_bytefallback(in, out, display);
    if (d->type == TK_D_FUSE) {
        tk_buf all = { 0 };
        for (size_t i = 0; i < in->n && !rc; i++)
            rc = tk_buf_add(&all, in->s[i].p, in->s[i].n);
        if (!rc)
            rc = list_add(out, all.p ? all.p : "", all.n, 0);
        free(all.p);
        return rc;
    }
    for (size_t i = 0; i < in->n && !rc; i++) {
        tk_buf r = { 0 };
        const tk_buf *s = &in->s[i];
        if (d->type == TK_D_REPLACE)
            rc = replace_all(&r, s, &d->a, d->b.s, d->b.n);
        else if (d->type == TK_D_WORDPIECE)
            rc = dec_wordpiece(&r, s, d, i == 0);
        else if (d->type == TK_D_METASPACE) {
            /* HF: the first token's replacements vanish when a space was prepended */
            int drop = i == 0 && d->start != 0 && !display;
            rc = replace_all(&r, s, &d->a, " ", drop ? 0 : 1);
        } else { /* Strip: up to start leading and stop trailing copies of a (a display
                  * string keeps them: stripping is for the text as a whole) */
            size_t a = 0, b = s->n;
            for (int k = 0; k < d->start && !display && a + d->a.n <= b && !memcmp(s->p + a, d->a.s, d->a.n); k++)
                a += d->a.n;
            for (int k = 0; k < d->stop && !display && b >= a + d->a.n && !memcmp(s->p + b - d->a.n, d->a.s, d->a.n); k++)
                b -= d->a.n;
            rc = tk_buf_add(&r, s->p + a, b - a);
        }
        if (!rc)
            rc = list_add(out, r.p ? r.p : "", r.n, in->added[i]);
        free(r.p);
    }
    return rc;
}

/* display: bytes that are not complete UTF-8 as <0xAB> */
static int show_bytes(tk_buf *out, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t ok = i + hs_utf8_check(s + i, n - i);
        if (tk_buf_add(out, s + i, ok - i))
            return HS_ENOMEM;
        if (ok == n)
            break;
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", (unsigned char)s[ok]);
        if (tk_buf_add(out, hex, 6))
            return HS_ENOMEM;
        i = ok + 1;
    }
    return tk_buf_add(out, "", 0);
}

int tk_decode(const hs_tokenizer *t, const int32_t *ids, size_t n, int skip_special, int display,
              tk_buf *out)
{
    if (t->sp) /* control pieces decode to nothing: skip_special changes nothing */
        return tk_sp_decode(t, ids, n, display, out);
    toklist a = { 0 }, b = { 0 };
    int rc = HS_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->tok[id].s)
            rc = hs_fail(HS_EINVAL, "tokenizer: id %d is not in the vocabulary (%d ids)", (int)id,
                         t->n_ids);
        else if (!(skip_special && t->is_special[id] == 1))
            rc = list_add(&a, t->tok[id].s, t->tok[id].n, t->is_special[id] != 0);
    }
    for (int k = 0; k < t->n_dec && !rc; k++) {
        rc = dec_step(t, &t->dec[k], &a, &b, display);
        list_free(&a);
        a = b;
        b = (toklist){ 0 };
    }
    tk_buf all = { 0 };
    /* without a decoder HF joins the tokens with spaces */
    for (size_t i = 0; i < a.n && !rc; i++)
        rc = (!t->n_dec && i && tk_buf_add(&all, " ", 1)) || tk_buf_add(&all, a.s[i].p, a.s[i].n);
    list_free(&a);
    list_free(&b);
    out->n = 0;
    if (!rc)
        rc = display ? show_bytes(out, all.p, all.n) : tk_utf8_lossy(out, all.p, all.n);
    free(all.p);
    return rc;
}
