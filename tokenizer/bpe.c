/* BPE on one pre-token, as HF's merge_word: the pre-token's characters (or
 * bytes, for a byte-level vocabulary) become symbols; the merge of lowest
 * rank among adjacent pairs is applied first, leftmost first among equal
 * ranks, until no adjacent pair has a merge. A binary heap of candidate
 * merges makes a word of n symbols cost O(n log n), not the O(n^2) of
 * rescanning every pair after each merge; stale candidates (a neighbour
 * already merged away) are skipped when popped.
 *
 * A pre-token's ids are cached for the rest of the call (text repeats its
 * words: the cache is most of the speed on English). */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define CACHE_MAX_ENTRIES (1u << 20)

static int cand_less(const tk_cand *a, const tk_cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(tk_cand *h, size_t *n, tk_cand c)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static tk_cand heap_pop(tk_cand *h, size_t *n)
{
    tk_cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const tk_cand *best = &last;
        if (l < *n && cand_less(&h[l], best))
            m = l, best = &h[l];
        if (r < *n && cand_less(&h[r], best))
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* ---- the cache ---- */

tk_cached *tk_cache_find(tk_scratch *s, const char *w, size_t n, uint64_t h)
{
    if (!s->cache_cap)
        return NULL;
    for (size_t i = h & (s->cache_cap - 1);; i = (i + 1) & (s->cache_cap - 1)) {
        tk_cached *e = &s->cache[i];
        if (e->key_n == UINT32_MAX)
            return e;
        if (e->hash == h && e->key_n == n && !memcmp(s->cache_keys.p + e->key_off, w, n))
            return e;
    }
}

static int cache_grow(tk_scratch *s)
{
    size_t cap = s->cache_cap ? 2 * s->cache_cap : 4096;
    tk_cached *g = malloc(cap * sizeof *g);
    if (!g)
        return hs_fail(HS_ENOMEM, "tokenizer: cache of %zu pre-tokens", cap);
    for (size_t i = 0; i < cap; i++)
        g[i].key_n = UINT32_MAX;
    for (size_t i = 0; i < s->cache_cap; i++) {
        tk_cached *e = &s->cache[i];
        if (e->key_n == UINT32_MAX)
            continue;
        size_t k = e->hash & (cap - 1);
        while (g[k].key_n != UINT32_MAX)
            k = (k + 1) & (cap - 1);
        g[k] = *e;
    }
    free(s->cache);
    s->cache = g, s->cache_cap = cap;
    return HS_OK;
}

int tk_cache_put(tk_scratch *s, const char *w, size_t n, uint64_t h, const int32_t *ids,
                 size_t nids)
{
    if (s->cache_n >= CACHE_MAX_ENTRIES)
        return HS_OK;
    if (2 * (s->cache_n + 1) > s->cache_cap && cache_grow(s))
        return HS_ENOMEM;
    tk_cached *e = tk_cache_find(s, w, n, h);
    if (e->key_n != UINT32_MAX)
        return HS_OK;
    size_t key_off = s->cache_keys.n, ids_off = s->cache_ids.n;
    if (tk_buf_add(&s->cache_keys, w, n) || tk_ids_add(&s->cache_ids, ids, nids))
        return HS_ENOMEM;
    *e = (tk_cached){ h, (uint32_t)key_off, (uint32_t)ids_off, (uint32_t)n, (uint32_t)nids };
    s->cache_n++;
    return HS_OK;
}

/* ---- symbols ---- */

static int sym_reserve(tk_scratch *s, size_t n)
{
    if (n <= s->sym_cap)
        return HS_OK;
    size_t cap = s->sym_cap ? s->sym_cap : 64;
    while (cap < n)
        cap *= 2;
    tk_sym *g = realloc(s->sym, cap * sizeof *g);
    /* the heap holds the m - 1 first pairs and at most two per merge */
    tk_cand *h = g ? realloc(s->heap, 3 * cap * sizeof *h) : NULL;
    if (g)
        s->sym = g;
    if (h)
        s->heap = h;
    if (!g || !h)
        return hs_fail(HS_ENOMEM, "tokenizer: pre-token of %zu symbols", n);
    s->sym_cap = cap, s->heap_cap = 3 * cap;
    return HS_OK;
}

/* appends a symbol; an unknown character is the byte-fallback tokens of its
 * bytes, else the unknown token (fused with an unknown before it when
 * fuse_unk), else dropped, as HF does */
static void sym_char(const hs_tokenizer *t, tk_scratch *s, size_t *m, const char *c, size_t len)
{
    int32_t id = t->byte_level ? t->byte_id[(unsigned char)c[0]] : tk_strmap_get(&t->vocab, c, len);
    if (id >= 0) {
        s->sym[(*m)++] = (tk_sym){ id, 0, 0, 0 };
        return;
    }
    if (t->byte_fallback) {
        size_t k = 0;
        while (k < len && t->byte_id[(unsigned char)c[k]] >= 0)
            k++;
        if (k == len) {
            for (k = 0; k < len; k++)
                s->sym[(*m)++] = (tk_sym){ t->byte_id[(unsigned char)c[k]], 0, 0, 0 };
            return;
        }
    }
    if (t->unk < 0)
        return;
    if (t->fuse_unk && *m && s->sym[*m - 1].gone == 2)
        return;
    s->sym[(*m)++] = (tk_sym){ t->unk, 0, 0, 2 };
}

static void push_pair(const hs_tokenizer *t, tk_scratch *s, size_t *nh, int32_t pos)
{
    int32_t nx = s->sym[pos].next;
    if (nx < 0)
        return;
    const tk_merge *mg = tk_mergemap_get(&t->merges, s->sym[pos].id, s->sym[nx].id);
    if (mg)
        heap_push(s->heap, nh, (tk_cand){ mg->rank, pos, mg->id });
}

int tk_bpe(const hs_tokenizer *t, tk_scratch *s, const char *w, size_t n, tk_ids *out)
{
    if (!n)
        return HS_OK;
    uint64_t h = 0;
    if (n <= TK_CACHE_MAX_KEY) {
        h = tk_hash(w, n);
        tk_cached *e = tk_cache_find(s, w, n, h);
        if (e && e->key_n != UINT32_MAX) /* a cached empty result: no ids, maybe no array */
            return e->ids_n ? tk_ids_add(out, s->cache_ids.p + e->ids_off, e->ids_n) : HS_OK;
    }
    if (t->ignore_merges) {
        int32_t id = tk_strmap_get(&t->vocab, w, n);
        if (id >= 0)
            return tk_ids_add(out, &id, 1) || (n <= TK_CACHE_MAX_KEY && tk_cache_put(s, w, n, h, &id, 1));
    }
    /* at most one symbol per byte (byte fallback: one per byte of a character);
     * O(m log m) in the heap, charged m */
    int rc = tk_charge(s, n, t->where_model);
    if (rc || (rc = sym_reserve(s, n)))
        return rc;
    size_t m = 0;
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        int len = t->byte_level ? 1 : tk_utf8_next(w + i, n - i, &cp);
        if (!len)
            len = 1; /* checked before: cannot happen */
        sym_char(t, s, &m, w + i, (size_t)len);
        i += (size_t)len;
    }
    for (size_t i = 0; i < m; i++) {
        s->sym[i].prev = (int32_t)i - 1;
        s->sym[i].next = i + 1 < m ? (int32_t)i + 1 : -1;
        s->sym[i].gone = 0;
    }
    size_t nh = 0;
    for (size_t i = 0; i + 1 < m; i++)
        push_pair(t, s, &nh, (int32_t)i);
    while (nh) {
        tk_cand c = heap_pop(s->heap, &nh);
        tk_sym *a = &s->sym[c.pos];
        if (a->gone || a->next < 0)
            continue;
        tk_sym *b = &s->sym[a->next];
        const tk_merge *mg = tk_mergemap_get(&t->merges, a->id, b->id);
        if (!mg || mg->id != c.id)
            continue; /* stale: a neighbour changed since it was pushed */
        a->id = c.id;
        b->gone = 1;
        a->next = b->next;
        if (b->next >= 0)
            s->sym[b->next].prev = c.pos;
        if (a->prev >= 0)
            push_pair(t, s, &nh, a->prev);
        push_pair(t, s, &nh, c.pos);
    }
    size_t first = out->n;
    for (int32_t i = m ? 0 : -1; i >= 0; i = s->sym[i].next)
        if (tk_ids_add(out, &s->sym[i].id, 1))
            return HS_ENOMEM;
    /* out->p is still NULL when no id came of any pre-token so far (bytes
     * outside the vocabulary, no unknown token) */
    if (n <= TK_CACHE_MAX_KEY)
        return tk_cache_put(s, w, n, h, out->n > first ? out->p + first : NULL, out->n - first);
    return HS_OK;
}

size_t tk_word_end(const char *x, size_t a, size_t n, const char *space, size_t sn)
{
    size_t i = a;
    while (i + sn <= n && !memcmp(x + i, space, sn)) /* the word's leading spaces */
        i += sn;
    for (; i + sn <= n; i++)
        if (!memcmp(x + i, space, sn))
            return i;
    return n;
}

int tk_bpe_words(const hs_tokenizer *t, tk_scratch *s, const char *w, size_t n, tk_ids *out)
{
    int rc = HS_OK;
    for (size_t a = 0, b; !rc && a < n; a = b) {
        b = tk_word_end(w, a, n, TK_SPACE, 3);
        rc = tk_bpe(t, s, w + a, b - a, out);
    }
    return rc;
}

int tk_no_joined_words(const tk_str *strs, int n, const char *space, size_t sn)
{
    for (int i = 0; i < n; i++)
        for (size_t k = 1; strs[i].s && k + sn <= strs[i].n; k++)
            if (!memcmp(strs[i].s + k, space, sn) &&
                (k < sn || memcmp(strs[i].s + k - sn, space, sn)))
                return 0;
    return 1;
}
