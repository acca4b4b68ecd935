/* Encoding and decoding with a SentencePiece model file (read by
 * tokenizer/spm.c) as sentencepiece 0.1.97's SentencePieceProcessor does
 * them (SPEC §17):
 *
 *   normalizer  at each position, a user-defined piece as it is (the
 *               longest), else the longest precompiled_charsmap rule, else
 *               one character; remove_extra_whitespaces drops leading,
 *               trailing and repeated spaces (of the normalized text);
 *               add_dummy_prefix puts U+2581 first; escape_whitespaces
 *               writes each space as U+2581
 *   UNIGRAM     the segmentation of maximal total score (Viterbi over the
 *               byte positions, each path's score kept in float and each
 *               candidate summed in double, as sentencepiece does; a
 *               user-defined piece scores length * max_score - 0.1;
 *               a character no piece covers is unknown, scored min_score -
 *               10); ties keep the first candidate found
 *   BPE         characters (user-defined pieces whole and never merged)
 *               merged pairwise, the pair whose merged piece scores highest
 *               first, the leftmost on ties; an UNUSED merged piece is split
 *               back into the two it was made of. When no piece holds a
 *               space after another character and none is UNUSED (the real
 *               models), no merge joins two words: the text is merged word
 *               by word, each word's result cached for the call
 *   then        an unknown piece becomes its bytes' <0xAB> pieces with
 *               byte_fallback, else a run of unknown pieces is one unknown
 *
 * Decoding: control pieces are invisible, the unknown piece is
 * trainer_spec.unk_surface, runs of byte pieces are their bytes (each byte
 * of an ill-formed sequence U+FFFD), U+2581 is a space, and the first
 * piece's leading U+2581 is dropped when add_dummy_prefix or
 * remove_extra_whitespaces is set. */
#include <string.h>

#include "tok_internal.h"

/* sentencepiece's score for an unknown character: min_score - kUnkPenalty */
#define SP_UNK_PENALTY 10.0f

/* ---- encoding ---- */

/* the longest user-defined piece at s, 0 none */
static size_t user_prefix(const tk_sp *sp, const char *s, size_t n)
{
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = 0; i < n && sp->n_user; i++) {
        if ((node = tk_trie_child(&sp->user, node, (unsigned char)s[i])) < 0)
            break;
        if (sp->user.id[node] >= 0)
            best = i + 1;
    }
    return best;
}

/* sentencepiece's NormalizePrefix: what the start of s becomes, and the
 * bytes of s it takes */
static size_t norm_prefix(const tk_sp *sp, const char *s, size_t n, const char **out,
                          size_t *out_n)
{
    size_t k = user_prefix(sp, s, n);
    if (k) {
        *out = s, *out_n = k;
        return k;
    }
    if (sp->cm.n_units && (k = tk_charsmap_match(&sp->cm, s, n, 1, out, out_n)))
        return k;
    uint32_t cp;
    int l = tk_utf8_next(s, n, &cp);
    if (!l) { /* not reached for checked text: U+FFFD for one byte, as sentencepiece */
        *out = "\xef\xbf\xbd", *out_n = 3;
        return 1;
    }
    *out = s, *out_n = (size_t)l;
    return (size_t)l;
}

static int sp_normalize(const hs_tokenizer *t, tk_scratch *s, const char *in, size_t n,
                        tk_buf *out)
{
    const tk_sp *sp = t->sp;
    const char *p;
    size_t pn;
    out->n = 0;
    if (sp->extra_ws) /* leading spaces */
        while (n) {
            size_t k = norm_prefix(sp, in, n, &p, &pn);
            if (pn != 1 || *p != ' ')
                break;
            in += k, n -= k;
        }
    if (!n)
        return HS_OK;
    const size_t space_n = sp->space_n;
    const char *space = sp->space;
    int rc = sp->dummy_prefix ? tk_buf_add(out, space, space_n) : HS_OK;
    int prev_space = sp->extra_ws;
    while (!rc && n) {
        size_t k = norm_prefix(sp, in, n, &p, &pn);
        while (prev_space && pn && *p == ' ')
            p++, pn--;
        if (pn) {
            for (size_t i = 0; !rc && i < pn; i++)
                rc = p[i] == ' ' && sp->escape_ws ? tk_buf_add(out, TK_SPACE, 3)
                                                  : tk_buf_add(out, p + i, 1);
            prev_space = p[pn - 1] == ' ';
        }
        if (!sp->extra_ws)
            prev_space = 0;
        in += k, n -= k;
        if (!rc && out->n > s->norm_room)
            return hs_fail(HS_EINVAL, "%s: normalizer_spec: the normalized text outgrows %d "
                           "times the text", t->path, TK_NORM_GROWTH);
        if (!rc)
            rc = tk_charge(s, k + pn, t->where_model);
    }
    while (!rc && sp->extra_ws && out->n >= space_n &&
           !memcmp(out->p + out->n - space_n, space, space_n))
        out->n -= space_n; /* trailing spaces */
    return rc == HS_ENOMEM ? hs_fail(HS_ENOMEM, "%s: normalizing", t->path) : rc;
}

/* Unigram: the shared Viterbi pass (tokenizer/unigram.c) with
 * sentencepiece's rounding, user-defined and unused pieces */
static int unigram(const hs_tokenizer *t, tk_scratch *s, const char *x, size_t n, size_t *nseg)
{
    const tk_sp *sp = t->sp;
    const tk_lattice m = { &sp->pieces, sp->score, sp->type, sp->max_score,
                           (double)(sp->min_score - SP_UNK_PENALTY), t->unk, 1, t->where_model };
    return tk_viterbi(&m, s, x, n, nseg);
}

/* BPE's symbols and candidate merges (sentencepiece's bpe::Model::Encode) */
typedef struct {
    uint32_t start, len;
    int32_t prev, next;
    int freeze;
} sp_sym;

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size;
} sp_pair;

/* the heap's order: the higher score first, then the leftmost */
static int pair_before(const sp_pair *a, const sp_pair *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int32_t piece_id(const tk_sp *sp, const char *s, size_t n)
{
    const int32_t node = tk_trie_find(&sp->pieces, s, n);
    return node >= 0 ? sp->pieces.id[node] : -1;
}

typedef struct {
    const hs_tokenizer *t;
    tk_scratch *s;
    const char *x;
    sp_sym *sym;
    int32_t *rev; /* n_ids: an UNUSED piece's last split (its left length), -1 none */
    size_t heap_n;
} bpe_ctx;

static int push_pair(bpe_ctx *c, int32_t left, int32_t right)
{
    if (left < 0 || right < 0 || c->sym[left].freeze || c->sym[right].freeze)
        return HS_OK;
    const tk_sp *sp = c->t->sp;
    const uint32_t size = c->sym[left].len + c->sym[right].len;
    const int32_t id = piece_id(sp, c->x + c->sym[left].start, size);
    int rc = tk_charge(c->s, size, c->t->where_model);
    if (rc || id < 0)
        return rc;
    if (sp->type[id] == TK_SP_UNUSED) /* the last split seen, as sentencepiece's rev_merge */
        c->rev[id] = (int32_t)c->sym[left].len;
    if ((rc = tk_scratch_grow(&c->s->sp_heap, &c->s->sp_heap_cap, c->heap_n + 1, sizeof(sp_pair))))
        return rc;
    sp_pair *h = c->s->sp_heap;
    size_t i = c->heap_n++;
    const sp_pair p = { sp->score[id], left, right, size };
    while (i && pair_before(&p, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = p;
    return HS_OK;
}

static sp_pair pop_pair(bpe_ctx *c)
{
    sp_pair *h = c->s->sp_heap, top = h[0], last = h[--c->heap_n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, b = i;
        const sp_pair *at = &last;
        if (l < c->heap_n && pair_before(&h[l], at))
            b = l, at = &h[l];
        if (l + 1 < c->heap_n && pair_before(&h[l + 1], at))
            b = l + 1;
        if (b == i)
            break;
        h[i] = h[b];
        i = b;
    }
    if (c->heap_n)
        h[i] = last;
    return top;
}

/* the segments of an UNUSED piece: split back as it was merged */
static int resegment(bpe_ctx *c, uint32_t start, uint32_t len, size_t *m, int depth)
{
    const tk_sp *sp = c->t->sp;
    int32_t id = tk_strmap_get(&c->t->vocab, c->x + start, len);
    if (id >= 0 && sp->type[id] == TK_SP_UNUSED && c->rev && c->rev[id] > 0 && depth < 64) {
        const uint32_t l = (uint32_t)c->rev[id];
        int rc = resegment(c, start, l, m, depth + 1);
        return rc ? rc : resegment(c, start + l, len - l, m, depth + 1);
    }
    int rc = tk_scratch_grow(&c->s->uni_segs, &c->s->uni_segs_cap, *m + 1, sizeof(tk_seg));
    if (!rc)
        ((tk_seg *)c->s->uni_segs)[(*m)++] = (tk_seg){ start, start + len, id < 0 ? c->t->unk : id };
    return rc;
}

/* the merges of x[a, b), its segments appended from uni_segs[*nseg] */
static int bpe(const hs_tokenizer *t, tk_scratch *s, const char *x, size_t a, size_t b,
               size_t *nseg)
{
    const tk_sp *sp = t->sp;
    bpe_ctx c = { t, s, x, NULL, NULL, 0 };
    size_t m = 0;
    int rc = tk_scratch_grow(&s->sp_syms, &s->sp_syms_cap, b - a, sizeof(sp_sym));
    if (!rc && sp->n_unused) {
        rc = tk_scratch_grow(&s->sp_rev, &s->sp_rev_cap, (size_t)t->n_ids, sizeof(int32_t));
        for (int i = 0; !rc && i < t->n_ids; i++)
            ((int32_t *)s->sp_rev)[i] = -1;
    }
    if (rc)
        return rc;
    c.sym = s->sp_syms;
    c.rev = sp->n_unused ? s->sp_rev : NULL;
    for (size_t at = a; at < b; m++) {
        size_t k = user_prefix(sp, x + at, b - at);
        c.sym[m] = (sp_sym){ (uint32_t)at, (uint32_t)(k ? k : tk_one_char(x + at, b - at)),
                             (int32_t)m - 1, -1, k > 0 };
        at += c.sym[m].len;
        if (at < b)
            c.sym[m].next = (int32_t)m + 1;
    }
    for (size_t i = 1; !rc && i < m; i++)
        rc = push_pair(&c, (int32_t)i - 1, (int32_t)i);
    while (!rc && c.heap_n) {
        const sp_pair top = pop_pair(&c);
        sp_sym *l = &c.sym[top.left], *r = &c.sym[top.right];
        if (!l->len || !r->len || l->len + r->len != top.size)
            continue; /* stale: one side has changed since */
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0)
            c.sym[r->next].prev = top.left;
        r->len = 0;
        rc = push_pair(&c, l->prev, top.left);
        if (!rc)
            rc = push_pair(&c, top.left, l->next);
    }
    for (int32_t i = m ? 0 : -1; !rc && i >= 0; i = c.sym[i].next)
        rc = resegment(&c, c.sym[i].start, c.sym[i].len, nseg, 0);
    return rc;
}

/* BPE word by word (sp->by_words: no merge can join two words, so each
 * word's merges are the whole text's), each word's segments (id, length)
 * cached for the rest of the call as HF's BPE caches its pre-tokens */
static int bpe_words(const hs_tokenizer *t, tk_scratch *s, const char *x, size_t n,
                     size_t *nseg)
{
    int rc = HS_OK;
    for (size_t a = 0, b; !rc && a < n; a = b) {
        b = tk_word_end(x, a, n, t->sp->space, t->sp->space_n);
        const uint64_t h = b - a <= TK_CACHE_MAX_KEY ? tk_hash(x + a, b - a) : 0;
        const tk_cached *e = b - a <= TK_CACHE_MAX_KEY ? tk_cache_find(s, x + a, b - a, h) : NULL;
        if (e && e->key_n != UINT32_MAX) { /* cached: (id, length) pairs */
            const int32_t *v = s->cache_ids.p + e->ids_off;
            if ((rc = tk_scratch_grow(&s->uni_segs, &s->uni_segs_cap, *nseg + e->ids_n / 2,
                                      sizeof(tk_seg))))
                break;
            uint32_t at = (uint32_t)a;
            for (uint32_t k = 0; k < e->ids_n; k += 2) {
                const tk_seg g = { at, at + (uint32_t)v[k + 1], v[k] };
                ((tk_seg *)s->uni_segs)[(*nseg)++] = g;
                at = g.end;
            }
            rc = tk_charge(s, b - a, t->where_model);
            continue;
        }
        const size_t first = *nseg;
        if ((rc = bpe(t, s, x, a, b, nseg)) || b - a > TK_CACHE_MAX_KEY)
            continue;
        int32_t v[2 * TK_CACHE_MAX_KEY]; /* a word of at most 64 bytes: as many segments */
        const tk_seg *seg = s->uni_segs;
        for (size_t k = first; k < *nseg; k++) {
            v[2 * (k - first)] = seg[k].id;
            v[2 * (k - first) + 1] = (int32_t)(seg[k].end - seg[k].start);
        }
        rc = tk_cache_put(s, x + a, b - a, h, v, 2 * (*nseg - first));
    }
    return rc;
}

int tk_sp_encode(const hs_tokenizer *t, tk_scratch *s, const char *text, size_t len, tk_ids *out)
{
    const tk_sp *sp = t->sp;
    tk_buf *norm = &s->norm[0];
    int rc = sp_normalize(t, s, text, len, norm);
    size_t m = 0;
    if (rc || !norm->n)
        return rc;
    if (norm->n > UINT32_MAX / 2)
        return hs_fail(HS_EINVAL, "%s: a text of %zu normalized bytes: at most %u are encoded",
                       t->path, norm->n, UINT32_MAX / 2);
    rc = !sp->bpe        ? unigram(t, s, norm->p, norm->n, &m)
         : sp->by_words ? bpe_words(t, s, norm->p, norm->n, &m)
                        : bpe(t, s, norm->p, 0, norm->n, &m);
    const tk_seg *seg = s->uni_segs;
    int prev_unk = 0;
    for (size_t i = 0; !rc && i < m; i++) {
        const int unk = sp->type[seg[i].id] == TK_SP_UNKNOWN;
        if (unk && t->byte_fallback)
            for (uint32_t b = seg[i].start; !rc && b < seg[i].end; b++)
                rc = tk_ids_add(out, &t->byte_id[(unsigned char)norm->p[b]], 1);
        else if (!(unk && prev_unk)) /* a run of unknown pieces is one */
            rc = tk_ids_add(out, &seg[i].id, 1);
        prev_unk = unk;
    }
    return rc;
}

/* ---- decoding ---- */

/* pending byte pieces as sentencepiece shows them: each well-formed
 * character as it is, each byte of an ill-formed sequence as U+FFFD */
static int flush_bytes(tk_buf *out, tk_buf *bytes)
{
    int rc = HS_OK;
    uint32_t cp;
    for (size_t i = 0; !rc && i < bytes->n;) {
        int l = tk_utf8_next(bytes->p + i, bytes->n - i, &cp);
        rc = l ? tk_buf_add(out, bytes->p + i, (size_t)l) : tk_buf_add(out, "\xef\xbf\xbd", 3);
        i += l ? (size_t)l : 1;
    }
    bytes->n = 0;
    return rc;
}

/* a piece with each U+2581 a space */
static int add_unescaped(tk_buf *out, const char *p, size_t n)
{
    int rc = HS_OK;
    for (size_t i = 0; !rc && i < n;)
        if (n - i >= 3 && !memcmp(p + i, TK_SPACE, 3))
            rc = tk_buf_add(out, " ", 1), i += 3;
        else
            rc = tk_buf_add(out, p + i, 1), i++;
    return rc;
}

int tk_sp_decode(const hs_tokenizer *t, const int32_t *ids, size_t n, int display, tk_buf *out)
{
    const tk_sp *sp = t->sp;
    tk_buf bytes = { 0 };
    int rc = HS_OK, bos_ws = 1, bos_ws_seen = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        const int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids) {
            rc = hs_fail(HS_EINVAL, "tokenizer: id %d is not in the vocabulary (%d ids)", (int)id,
                         t->n_ids);
            break;
        }
        const tk_str *p = &t->tok[id];
        const int type = sp->type[id];
        if (display) { /* the piece itself: controls and <unk> by name, bytes as <0xAB> */
            int b = type == TK_SP_BYTE ? tk_sp_piece_byte(p) : -1;
            rc = b >= 0x20 && b < 0x7f ? tk_buf_add(out, &(char){ (char)b }, 1)
                 : type == TK_SP_NORMAL || type == TK_SP_USER || type == TK_SP_UNUSED
                     ? add_unescaped(out, p->s, p->n)
                     : tk_buf_add(out, p->s, p->n);
            continue;
        }
        if (type == TK_SP_BYTE) {
            int b = tk_sp_piece_byte(p);
            rc = tk_buf_add(&bytes, &(char){ (char)b }, 1);
            continue;
        }
        if ((rc = flush_bytes(out, &bytes)))
            break;
        if (bos_ws_seen || out->n)
            bos_ws = 0;
        bos_ws_seen = 0;
        if (type == TK_SP_CONTROL)
            continue;
        if (type == TK_SP_UNKNOWN) {
            rc = tk_buf_add(out, sp->unk_surface.s, sp->unk_surface.n);
            continue;
        }
        const char *s = p->s;
        size_t sn = p->n;
        if (bos_ws && (sp->dummy_prefix || sp->extra_ws) && sn >= 3 && !memcmp(s, TK_SPACE, 3)) {
            s += 3, sn -= 3;
            bos_ws_seen = !sp->extra_ws;
        }
        rc = add_unescaped(out, s, sn);
    }
    if (!rc)
        rc = flush_bytes(out, &bytes);
    free(bytes.p);
    return rc == HS_ENOMEM ? hs_fail(HS_ENOMEM, "%s: decoding", t->path) : rc;
}
