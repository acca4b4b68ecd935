/* Normalizers and pre-tokenizers, as Hugging Face `tokenizers` applies them
 * to each stretch of text between added tokens: the normalizers rewrite the
 * text (utf8proc for the Unicode forms), the pre-tokenizers cut it into
 * pieces (PCRE2 with UTF + UCP for the split patterns) that BPE then merges
 * one at a time. Pieces point into the text or into blocks of the scratch. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"

tk_scratch *tk_scratch_new(const hs_tokenizer *t)
{
    (void)t;
    tk_scratch *s = calloc(1, sizeof *s);
    if (s) {
        s->md = pcre2_match_data_create(8, NULL);
        s->mc = pcre2_match_context_create(NULL);
    }
    if (!s || !s->md || !s->mc) {
        if (s)
            pcre2_match_data_free(s->md), pcre2_match_context_free(s->mc);
        free(s);
        hs_fail(HS_ENOMEM, "tokenizer: scratch");
        return NULL;
    }
    pcre2_set_callout(s->mc, tk_regex_callout, s);
    tk_scratch_start(s, 0);
    return s;
}

void tk_scratch_start(tk_scratch *s, size_t n)
{
    s->text_n = n;
    s->spent = s->slow_ns = 0;
    s->budget = (uint64_t)TK_WORK_PER_BYTE * n + TK_WORK_BASE;
    s->norm_room = n > (SIZE_MAX - TK_NORM_SLACK) / TK_NORM_GROWTH
                       ? SIZE_MAX
                       : TK_NORM_GROWTH * n + TK_NORM_SLACK;
}

static void free_blocks(tk_scratch *s)
{
    for (size_t i = 0; i < s->nblocks; i++)
        free(s->blocks[i]);
    s->nblocks = 0;
}

void tk_scratch_free(tk_scratch *s)
{
    if (!s)
        return;
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mc);
    free(s->norm[0].p), free(s->norm[1].p);
    free_blocks(s);
    free(s->blocks);
    free(s->pieces[0].p), free(s->pieces[1].p);
    free(s->found);
    free(s->sym), free(s->heap), free(s->cache), free(s->cache_keys.p), free(s->cache_ids.p);
    free(s->uni_nodes), free(s->uni_segs), free(s->sp_syms), free(s->sp_heap), free(s->sp_rev);
    free(s);
}

/* ---- normalizers ---- */

/* Replace stops adding once its output passes room: a chain that doubles
 * the text is refused at the step that overflows, not after it filled the
 * memory (tk_normalize names it). */
typedef struct {
    const char *s;
    tk_buf *out;
    size_t prev, room;
    const tk_str *content;
} replace_ctx;

static int replace_match(void *p, size_t ms, size_t me)
{
    replace_ctx *c = p;
    if (c->out->n > c->room)
        return HS_OK; /* past the room: nothing more is written (tk_normalize refuses) */
    if (tk_buf_add(c->out, c->s + c->prev, ms - c->prev) ||
        tk_buf_add(c->out, c->content->s, c->content->n))
        return HS_ENOMEM;
    c->prev = me;
    return HS_OK;
}

static int replace_literal(tk_buf *out, const char *s, size_t n, const tk_str *pat,
                           const tk_str *with, size_t room)
{
    size_t i = 0;
    if (!pat->n) /* read as a pattern that matches everywhere (hf_steps.c): never here */
        return tk_buf_add(out, s, n);
    while (i < n && out->n <= room) {
        const char *hit = pat->n <= n - i ? memmem(s + i, n - i, pat->s, pat->n) : NULL;
        if (!hit)
            break;
        if (tk_buf_add(out, s + i, (size_t)(hit - s) - i) || tk_buf_add(out, with->s, with->n))
            return HS_ENOMEM;
        i = (size_t)(hit - s) + pat->n;
    }
    return tk_buf_add(out, s + i, n - i);
}

static int unicode_form(tk_buf *out, const char *s, size_t n, int type)
{
    static const int opts[] = {
        [TK_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
        [TK_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
        [TK_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
        [TK_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
    };
    if (!n)
        return tk_buf_add(out, "", 0);
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                        (utf8proc_option_t)opts[type]);
    if (len < 0)
        return hs_fail(HS_EINVAL, "tokenizer: normalizing: %s", utf8proc_errmsg(len));
    int rc = tk_buf_add(out, dst, (size_t)len);
    free(dst);
    return rc;
}

int tk_lowercase(tk_buf *out, const char *s, size_t n)
{
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        int l = tk_utf8_next(s + i, n - i, &cp);
        if (!l)
            return hs_fail(HS_EINVAL, "tokenizer: invalid UTF-8 while lowercasing");
        if (cp < 0x80) { /* ASCII: its own mapping */
            char ch = (char)(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
            if (tk_buf_add(out, &ch, 1))
                return HS_ENOMEM;
        } else if (cp == 0x130) { /* Rust's to_lowercase: i and a combining dot above */
            if (tk_buf_add(out, "i\xcc\x87", 3))
                return HS_ENOMEM;
        } else if (tk_utf8_put(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp)))
            return HS_ENOMEM;
        i += (size_t)l;
    }
    return tk_buf_add(out, "", 0);
}

/* HF's Strip: whitespace (char::is_whitespace) off the left (sides & 1)
 * and the right (sides & 2) */
static int strip(tk_buf *out, const char *s, size_t n, int sides)
{
    uint32_t cp;
    int l;
    while ((sides & 1) && n && (l = tk_utf8_next(s, n, &cp)) && tk_is_space(cp))
        s += l, n -= (size_t)l;
    while ((sides & 2) && n) {
        size_t j = n - 1;
        while (j > 0 && ((unsigned char)s[j] & 0xc0) == 0x80)
            j--;
        if (!tk_utf8_next(s + j, n - j, &cp) || !tk_is_space(cp))
            break;
        n = j;
    }
    return tk_buf_add(out, s, n);
}

int tk_normalize(const hs_tokenizer *t, tk_scratch *s, const char *seg, size_t n,
                 const char **out, size_t *out_n)
{
    const char *cur = seg;
    size_t peak = n; /* the longest the text has been */
    int which = 0;
    for (int k = 0; k < t->n_norm; k++) {
        const tk_norm *nm = &t->norm[k];
        tk_buf *dst = &s->norm[which];
        dst->n = 0;
        int rc;
        if (nm->type <= TK_NFKD)
            rc = unicode_form(dst, cur, n, nm->type);
        else if (nm->type == TK_LOWERCASE)
            rc = tk_lowercase(dst, cur, n);
        else if (nm->type == TK_BERT)
            rc = tk_bert_normalize(dst, cur, n, nm->bert);
        else if (nm->type == TK_PRECOMPILED)
            rc = tk_precompiled(nm->cm, dst, cur, n);
        else if (nm->type == TK_STRIP)
            rc = strip(dst, cur, n, nm->bert);
        else if (nm->type == TK_PREPEND)
            rc = n ? tk_buf_add(dst, nm->a.s, nm->a.n) || tk_buf_add(dst, cur, n) : tk_buf_add(dst, "", 0);
        else if (!nm->re.any)
            rc = replace_literal(dst, cur, n, &nm->a, &nm->b, s->norm_room);
        else {
            replace_ctx c = { cur, dst, 0, s->norm_room, &nm->b };
            rc = tk_regex_each(&nm->re, nm->where, s, cur, n, replace_match, &c);
            if (!rc && dst->n <= s->norm_room)
                rc = tk_buf_add(dst, cur + c.prev, n - c.prev);
        }
        if (!rc && dst->n > s->norm_room)
            rc = hs_fail(HS_EINVAL, "%s: the normalized text grows past %d times the text (%zu "
                         "bytes from a %zu-byte text): refused", nm->where, TK_NORM_GROWTH,
                         dst->n, s->text_n);
        /* what a normalizer adds is text too: its share of the budget (the
         * growth is bounded just above, so the budget stays proportional) */
        if (!rc && dst->n > peak) {
            s->budget += (uint64_t)TK_WORK_PER_BYTE * (dst->n - peak);
            peak = dst->n;
        }
        if (!rc) /* each step reads what it is given and writes what it makes */
            rc = tk_charge(s, (uint64_t)n + dst->n, nm->where);
        if (rc)
            return rc;
        cur = dst->p, n = dst->n;
        which ^= 1;
    }
    s->norm_room -= n < s->norm_room ? n : s->norm_room;
    *out = cur, *out_n = n;
    return HS_OK;
}

/* ---- pre-tokenizers ---- */

static int piece_add(tk_pieces *v, const char *p, size_t n, int first)
{
    if (!n)
        return HS_OK;
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 256;
        tk_piece *g = realloc(v->p, cap * sizeof *g);
        if (!g)
            return hs_fail(HS_ENOMEM, "tokenizer: %zu pre-tokens", cap);
        v->p = g, v->cap = cap;
    }
    v->p[v->n++] = (tk_piece){ p, n, first };
    return HS_OK;
}

int tk_piece_add(tk_pieces *v, const char *p, size_t n, int first)
{
    return piece_add(v, p, n, first);
}

/* a copy of n bytes that lives until the segment is done */
static char *block(tk_scratch *s, size_t n)
{
    if (!(s->nblocks & (s->nblocks + 1)) || !s->blocks) { /* 0, 1, 3, 7, ...: grow */
        char **g = realloc(s->blocks, (2 * s->nblocks + 2) * sizeof *g);
        if (!g)
            return NULL;
        s->blocks = g;
    }
    char *b = malloc(n + 1);
    if (b)
        s->blocks[s->nblocks++] = b;
    return b;
}

/* Split: the matches and the stretches between them, then grouped as the
 * behaviour says (HF's SplitDelimiterBehavior) */
typedef struct {
    const tk_pre *pr;
    const tk_piece *in;
    tk_pieces *out;
    size_t prev;  /* end of the previous match */
    size_t open_start; /* a piece not yet emitted: [open_start, open_end) */
    size_t open_end;
    int open, open_is_match;
} split_ctx;

static int flush(split_ctx *c)
{
    if (!c->open)
        return HS_OK;
    c->open = 0;
    return piece_add(c->out, c->in->p + c->open_start, c->open_end - c->open_start,
                     c->in->first && c->open_start == 0);
}

/* one stretch (match or not) in order */
static int stretch(split_ctx *c, size_t a, size_t b, int is_match)
{
    if (c->pr->invert)
        is_match = !is_match;
    int rc = HS_OK;
    switch (c->pr->behavior) {
    case TK_REMOVED:
        return is_match ? HS_OK : piece_add(c->out, c->in->p + a, b - a, c->in->first && a == 0);
    case TK_ISOLATED:
        return piece_add(c->out, c->in->p + a, b - a, c->in->first && a == 0);
    case TK_MERGED_PREV:
        if (is_match && c->open && !c->open_is_match) {
            c->open_end = b;
            c->open_is_match = 1;
            return HS_OK;
        }
        break;
    case TK_MERGED_NEXT:
        if (c->open && c->open_is_match && !is_match) {
            c->open_end = b;
            c->open_is_match = 0;
            return HS_OK;
        }
        break;
    case TK_CONTIGUOUS:
        if (c->open && c->open_is_match == is_match) {
            c->open_end = b;
            return HS_OK;
        }
        break;
    }
    if ((rc = flush(c)))
        return rc;
    c->open = 1, c->open_start = a, c->open_end = b, c->open_is_match = is_match;
    return HS_OK;
}

static int split_match(void *p, size_t ms, size_t me)
{
    split_ctx *c = p;
    int rc = HS_OK;
    if (ms > c->prev)
        rc = stretch(c, c->prev, ms, 0);
    if (!rc)
        rc = stretch(c, ms, me, 1);
    c->prev = me;
    return rc;
}

/* pr's pattern cuts in as its behaviour says (a ByteLevel step: Isolated,
 * its fields zero) */
static int split_piece(tk_scratch *s, const tk_pre *pr, const tk_piece *in, tk_pieces *out)
{
    split_ctx c = { .pr = pr, .in = in, .out = out };
    int rc = tk_regex_each(&pr->re, pr->where, s, in->p, in->n, split_match, &c);
    if (!rc && c.prev < in->n)
        rc = stretch(&c, c.prev, in->n, 0);
    return rc ? rc : flush(&c);
}

static int starts_with(const tk_piece *p, const tk_str *x)
{
    return p->n >= x->n && !memcmp(p->p, x->s, x->n);
}

/* Metaspace: spaces become the replacement, which is prepended as the scheme
 * says, and each replacement starts a new piece when split is set */
static int metaspace(tk_scratch *s, const tk_pre *pr, const tk_piece *in, tk_pieces *out)
{
    size_t spaces = 0;
    for (size_t i = 0; i < in->n; i++)
        spaces += in->p[i] == ' ';
    int prepend = (pr->prepend == 2 || (pr->prepend == 1 && in->first));
    if (prepend && (starts_with(in, &pr->repl) || (in->n && in->p[0] == ' ')))
        prepend = 0; /* HF: not when the text, spaces replaced, starts with one */
    size_t n = in->n + spaces * (pr->repl.n - 1) + (prepend ? pr->repl.n : 0);
    char *b = block(s, n);
    if (!b)
        return hs_fail(HS_ENOMEM, "tokenizer: pre-token of %zu bytes", n);
    size_t k = 0;
    if (prepend)
        memcpy(b, pr->repl.s, pr->repl.n), k = pr->repl.n;
    for (size_t i = 0; i < in->n; i++) {
        if (in->p[i] == ' ')
            memcpy(b + k, pr->repl.s, pr->repl.n), k += pr->repl.n;
        else
            b[k++] = in->p[i];
    }
    if (!pr->split)
        return piece_add(out, b, n, in->first);
    /* the replacement is one character (the file's is checked): each turn
     * moves on by it or by a byte */
    const size_t r = pr->repl.n ? pr->repl.n : 1;
    size_t start = 0;
    for (size_t i = r; i + r <= n;) {
        if (!memcmp(b + i, pr->repl.s, r)) {
            int rc = piece_add(out, b + start, i - start, in->first && start == 0);
            if (rc)
                return rc;
            start = i;
            i += r;
        } else
            i++;
    }
    return piece_add(out, b + start, n - start, in->first && start == 0);
}

/* WhitespaceSplit: the runs between whitespace (Rust's char::is_whitespace) */
static int ws_split(const tk_piece *in, tk_pieces *out)
{
    size_t start = 0;
    uint32_t cp;
    for (size_t i = 0; i < in->n;) {
        int l = tk_utf8_next(in->p + i, in->n - i, &cp);
        if (!l)
            return hs_fail(HS_EINVAL, "WhitespaceSplit: invalid UTF-8");
        if (tk_is_space(cp)) {
            int rc = piece_add(out, in->p + start, i - start, in->first && start == 0);
            if (rc)
                return rc;
            start = i + (size_t)l;
        }
        i += (size_t)l;
    }
    return piece_add(out, in->p + start, in->n - start, in->first && start == 0);
}

static int bytelevel(tk_scratch *s, const tk_pre *pr, const tk_piece *in, tk_pieces *out)
{
    tk_piece p = *in;
    if (pr->add_prefix_space && (!in->n || in->p[0] != ' ')) {
        char *b = block(s, in->n + 1);
        if (!b)
            return hs_fail(HS_ENOMEM, "tokenizer: pre-token of %zu bytes", in->n + 1);
        b[0] = ' ';
        memcpy(b + 1, in->p, in->n);
        p.p = b, p.n = in->n + 1;
    }
    if (!pr->re.any)
        return piece_add(out, p.p, p.n, p.first);
    return split_piece(s, pr, &p, out);
}

int tk_pretokenize(const hs_tokenizer *t, tk_scratch *s, const char *seg, size_t n, int first,
                   tk_pieces **out)
{
    free_blocks(s);
    tk_pieces *cur = &s->pieces[0];
    cur->n = 0;
    int rc = piece_add(cur, seg, n, first);
    for (int k = 0; !rc && k < t->n_pre; k++) {
        const tk_pre *pr = &t->pre[k];
        tk_pieces *dst = cur == &s->pieces[0] ? &s->pieces[1] : &s->pieces[0];
        dst->n = 0;
        for (size_t i = 0; !rc && i < cur->n; i++) {
            tk_piece in = cur->p[i]; /* dst may move while growing; cur does not */
            if ((rc = tk_charge(s, in.n, pr->where))) /* a step reads each piece */
                break;
            if (pr->type == TK_SPLIT)
                rc = split_piece(s, pr, &in, dst);
            else if (pr->type == TK_METASPACE)
                rc = metaspace(s, pr, &in, dst);
            else if (pr->type == TK_BERTPRE)
                rc = tk_bert_pre(&in, dst);
            else if (pr->type == TK_WSSPLIT)
                rc = ws_split(&in, dst);
            else
                rc = bytelevel(s, pr, &in, dst);
        }
        cur = dst;
    }
    *out = cur;
    return rc;
}
