/* The tokenizer's tables: a string -> id map over the vocabulary, the
 * (left, right) -> merge map of BPE, growable buffers, and the UTF-8 and
 * byte-level alphabet helpers. Open addressing with linear probing at a load
 * of at most one half: a vocabulary of 128k ids costs 1 MB of slots. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

uint64_t tk_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < 2 * n)
        c *= 2;
    return c;
}

int tk_strmap_build(tk_strmap *m, const tk_str *keys, int n)
{
    m->cap = pow2_at_least((size_t)n);
    m->keys = keys;
    m->slot = malloc(m->cap * sizeof *m->slot);
    if (!m->slot)
        return hs_fail(HS_ENOMEM, "tokenizer: vocabulary map of %d tokens", n);
    memset(m->slot, 0xff, m->cap * sizeof *m->slot);
    for (int id = 0; id < n; id++) {
        if (!keys[id].s)
            continue;
        size_t i = tk_hash(keys[id].s, keys[id].n) & (m->cap - 1);
        for (;; i = (i + 1) & (m->cap - 1)) {
            int32_t o = m->slot[i];
            if (o < 0) {
                m->slot[i] = id;
                break;
            }
            if (keys[o].n == keys[id].n && !memcmp(keys[o].s, keys[id].s, keys[id].n))
                break; /* a duplicate string keeps its first id */
        }
    }
    return HS_OK;
}

int32_t tk_strmap_get(const tk_strmap *m, const char *s, size_t n)
{
    size_t i = tk_hash(s, n) & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        int32_t o = m->slot[i];
        if (o < 0)
            return -1;
        if (m->keys[o].n == n && !memcmp(m->keys[o].s, s, n))
            return o;
    }
}

void tk_strmap_free(tk_strmap *m)
{
    free(m->slot);
    m->slot = NULL;
}

static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static size_t pair_slot(uint64_t k, size_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

int tk_mergemap_init(tk_mergemap *m, size_t n)
{
    m->cap = pow2_at_least(n);
    m->slot = malloc(m->cap * sizeof *m->slot);
    if (!m->slot)
        return hs_fail(HS_ENOMEM, "tokenizer: merge map of %zu merges", n);
    for (size_t i = 0; i < m->cap; i++)
        m->slot[i].key = UINT64_MAX;
    return HS_OK;
}

int tk_mergemap_put(tk_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t k = pair_key(a, b);
    for (size_t i = pair_slot(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i].key == k)
            return 1;
        if (m->slot[i].key == UINT64_MAX) {
            m->slot[i] = (tk_merge){ k, rank, id };
            return 0;
        }
    }
}

const tk_merge *tk_mergemap_get(const tk_mergemap *m, int32_t a, int32_t b)
{
    uint64_t k = pair_key(a, b);
    for (size_t i = pair_slot(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i].key == k)
            return &m->slot[i];
        if (m->slot[i].key == UINT64_MAX)
            return NULL;
    }
}

void tk_mergemap_free(tk_mergemap *m)
{
    free(m->slot);
    m->slot = NULL;
}

int tk_buf_add(tk_buf *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return hs_fail(HS_ENOMEM, "tokenizer: buffer of %zu bytes", cap);
        b->p = p, b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return HS_OK;
}

int tk_ids_add(tk_ids *v, const int32_t *s, size_t n)
{
    if (!n)
        return HS_OK;
    if (v->n + n > v->cap) {
        size_t cap = v->cap ? v->cap : 256;
        while (cap < v->n + n)
            cap *= 2;
        int32_t *p = realloc(v->p, cap * sizeof *p);
        if (!p)
            return hs_fail(HS_ENOMEM, "tokenizer: %zu ids", cap);
        v->p = p, v->cap = cap;
    }
    memcpy(v->p + v->n, s, n * sizeof *s);
    v->n += n;
    return HS_OK;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 take the code points from 256 on, in byte order: the three
 * runs 0-32 (256-288), 127-160 (289-322) and 173 (323). */
static int printable(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

uint32_t tk_byte_to_cp(unsigned char b)
{
    if (printable(b))
        return b;
    return b <= 32 ? 256u + b : b <= 160 ? 256u + 33 + (b - 127u) : 256u + 67;
}

int tk_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return printable(cp) ? (int)cp : -1;
    const uint32_t k = cp - 256;
    return k <= 32 ? (int)k : k <= 66 ? (int)(127 + k - 33) : k == 67 ? 173 : -1;
}

int tk_is_space(uint32_t cp)
{
    return (cp >= 9 && cp <= 13) || cp == ' ' || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

int tk_utf8_put(tk_buf *b, uint32_t cp)
{
    char u[4];
    int n;
    if (cp < 0x80)
        u[0] = (char)cp, n = 1;
    else if (cp < 0x800)
        u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3f)),
        u[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
    else
        u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3f)),
        u[2] = (char)(0x80 | (cp >> 6 & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
    return tk_buf_add(b, u, (size_t)n);
}

/* the number of bytes of the longest prefix of an ill-formed sequence at s
 * that could have begun a valid one (WHATWG's "maximal subpart"), >= 1 */
static size_t maximal_subpart(const unsigned char *u, size_t n)
{
    unsigned b = u[0];
    int len = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xc2 && b <= 0xdf ? 2 : 0;
    if (!len)
        return 1;
    unsigned lo = b == 0xe0 ? 0xa0 : b == 0xf0 ? 0x90 : 0x80;
    unsigned hi = b == 0xed ? 0x9f : b == 0xf4 ? 0x8f : 0xbf;
    size_t k = 1;
    if (k < n && u[k] >= lo && u[k] <= hi) {
        k++;
        while (k < (size_t)len && k < n && (u[k] & 0xc0) == 0x80)
            k++;
    }
    return k;
}

int tk_utf8_lossy(tk_buf *out, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t ok = i + hs_utf8_check(s + i, n - i);
        if (tk_buf_add(out, s + i, ok - i))
            return HS_ENOMEM;
        if (ok == n)
            break;
        if (tk_buf_add(out, "\xef\xbf\xbd", 3))
            return HS_ENOMEM;
        i = ok + maximal_subpart((const unsigned char *)s + ok, n - ok);
    }
    return tk_buf_add(out, "", 0);
}
