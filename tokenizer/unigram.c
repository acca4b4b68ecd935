/* Unigram segmentation, shared by SentencePiece .model files
 * (tokenizer/spm_encode.c) and tokenizer.json's `Unigram` model, and HF's
 * `Precompiled` normalizer (SPEC §17).
 *
 * The Viterbi pass is sentencepiece's EncodeOptimized, which HF's
 * encode_optimized copies: for each character start, in order, every piece
 * the trie finds there offers a path to its end (the best path to the start
 * plus the piece's score), kept when it is the first or strictly better; a
 * character no piece covers on its own offers the unknown id at min_score -
 * 10. The two differ in rounding only: sentencepiece keeps each path's score
 * as a float (a candidate summed in double), HF keeps doubles; and
 * sentencepiece alone knows user-defined and unused pieces.
 *
 * HF's Unigram model then fuses each run of unknown characters into one
 * string and maps every string to its id; a string not in the vocabulary is
 * its bytes' <0xAB> pieces with byte_fallback (when all exist), else the
 * unknown id.
 *
 * HF's Precompiled normalizer applies the charsmap per extended grapheme
 * cluster (utf8proc's): a cluster of fewer than 6 bytes with a rule at its
 * start (the shortest) is replaced whole by that rule's text; otherwise each
 * of its characters is replaced by its own shortest rule, or kept. It is
 * not sentencepiece's longest-match (tokenizer/spm_encode.c), and a
 * tokenizer.json follows HF. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"

/* a node of the pass: the best path ending at a byte position */
typedef struct {
    double score;
    int32_t start, id; /* start -1: not reached yet */
} lat_node;

int tk_scratch_grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return HS_OK;
    /* the first size is the need itself: a call's scratch is then one block
     * of the text's size, which malloc hands out again to the next call
     * (its mmap threshold follows the blocks freed) instead of mapping fresh
     * pages through a chain of doublings every call */
    size_t c = *cap ? *cap : need;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (!q)
        return hs_fail(HS_ENOMEM, "tokenizer: %zu items of scratch", c);
    *p = q, *cap = c;
    return HS_OK;
}

/* sentencepiece's OneCharLen: the length the first byte announces */
size_t tk_one_char(const char *s, size_t n)
{
    static const unsigned char len[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    size_t l = len[(unsigned char)s[0] >> 4];
    return l < n ? l : n;
}

/* keeps cand at *b when it is the first or strictly better */
static void offer(const tk_lattice *m, lat_node *b, double cand, size_t start, int32_t id)
{
    if (b->start < 0 || cand > b->score)
        *b = (lat_node){ m->round_float ? (double)(float)cand : cand, (int32_t)start, id };
}

int tk_viterbi(const tk_lattice *m, tk_scratch *s, const char *x, size_t n, size_t *nseg)
{
    int rc = tk_scratch_grow(&s->uni_nodes, &s->uni_nodes_cap, n + 1, sizeof(lat_node));
    if (rc)
        return rc;
    lat_node *best = s->uni_nodes;
    for (size_t i = 0; i <= n; i++)
        best[i] = (lat_node){ 0.0, -1, -1 };
    for (size_t at = 0; at < n;) {
        const double here = best[at].score;
        const size_t mblen = tk_one_char(x + at, n - at);
        int single = 0;
        size_t k = at; /* node: the walk over x[at, k) */
        for (int32_t node = m->trie->root[(unsigned char)x[k++]]; node >= 0;
             node = k < n ? tk_trie_child(m->trie, node, (unsigned char)x[k++]) : -1) {
            const int32_t id = m->trie->id[node];
            const int type = id < 0 ? 0 : m->type ? m->type[id] : TK_SP_NORMAL;
            if (id < 0 || type == TK_SP_UNUSED)
                continue;
            /* sentencepiece's `auto score = user ? length * max_score - 0.1
             * : score` is a double either way (the 0.1) */
            const double score = type == TK_SP_USER
                                     ? (double)((float)(k - at) * m->max_score) - 0.1
                                     : m->score[id];
            offer(m, &best[k], score + here, at, id);
            single |= k - at == mblen;
        }
        if ((rc = tk_charge(s, k - at, m->where)))
            return rc;
        if (!single) {
            lat_node *b = &best[at + mblen];
            /* sentencepiece sums this one in float */
            const double cand = m->round_float ? (double)((float)m->unk_score + (float)here)
                                               : m->unk_score + here;
            if (m->unk < 0 && (b->start < 0 || cand > b->score))
                return hs_fail(HS_EINVAL, "%s: a character no piece covers (\"%.*s\"), and no "
                               "unk_id", m->where, (int)mblen, x + at);
            offer(m, b, cand, at, m->unk);
        }
        at += mblen;
    }
    size_t cnt = 0;
    for (size_t end = n; end > 0; end = (size_t)best[end].start)
        cnt++;
    if ((rc = tk_scratch_grow(&s->uni_segs, &s->uni_segs_cap, cnt, sizeof(tk_seg))))
        return rc;
    tk_seg *seg = s->uni_segs;
    *nseg = cnt;
    for (size_t end = n; end > 0; end = (size_t)best[end].start)
        seg[--cnt] = (tk_seg){ (uint32_t)best[end].start, (uint32_t)end, best[end].id };
    return HS_OK;
}

/* ---- tokenizer.json's Unigram ---- */

void tk_uni_free(tk_uni *u)
{
    if (u)
        tk_trie_free(&u->trie), free(u->score);
    free(u);
}

/* the id of one string of the segmentation: itself, else its bytes (byte
 * fallback, when every byte has its piece), else the unknown id */
static int string_ids(const hs_tokenizer *t, const char *p, size_t n, tk_ids *out)
{
    int32_t id = tk_strmap_get(&t->vocab, p, n);
    if (id >= 0)
        return tk_ids_add(out, &id, 1);
    int bytes = t->byte_fallback;
    for (size_t i = 0; bytes && i < n; i++)
        bytes = t->byte_id[(unsigned char)p[i]] >= 0;
    for (size_t i = 0; bytes && i < n; i++)
        if (tk_ids_add(out, &t->byte_id[(unsigned char)p[i]], 1))
            return HS_ENOMEM;
    if (bytes)
        return HS_OK;
    if (t->unk < 0)
        return hs_fail(HS_EINVAL, "%s: \"%.*s\" is not in the vocabulary, and no unk_id",
                       t->where_model, (int)(n > 40 ? 40 : n), p);
    return tk_ids_add(out, &t->unk, 1);
}

int tk_unigram(const hs_tokenizer *t, tk_scratch *s, const char *w, size_t n, tk_ids *out)
{
    const tk_uni *u = t->uni;
    const tk_lattice m = { &u->trie, u->score, NULL, 0.0f, u->min_score - 10.0, t->unk, 0,
                           t->where_model };
    size_t cnt = 0;
    int rc = tk_viterbi(&m, s, w, n, &cnt);
    const tk_seg *seg = s->uni_segs;
    for (size_t i = 0; !rc && i < cnt;) {
        size_t j = i + 1; /* a run of unknown characters is one string (HF's fuse_unk) */
        while (seg[i].id == t->unk && j < cnt && seg[j].id == t->unk)
            j++;
        rc = string_ids(t, w + seg[i].start, seg[j - 1].end - seg[i].start, out);
        i = j;
    }
    return rc == HS_ENOMEM ? hs_fail(HS_ENOMEM, "%s: encoding", t->where_model) : rc;
}

/* ---- HF's Precompiled normalizer ---- */

/* the shortest rule for s[0, n), appended; 0 when none */
static int rule(const tk_charsmap *cm, const char *s, size_t n, tk_buf *out, int *rc)
{
    const char *r;
    size_t rn;
    if (!tk_charsmap_match(cm, s, n, 0, &r, &rn))
        return 0;
    *rc = tk_buf_add(out, r, rn);
    return 1;
}

int tk_precompiled(const tk_charsmap *cm, tk_buf *out, const char *s, size_t n)
{
    int rc = HS_OK;
    utf8proc_int32_t state = 0;
    uint32_t cp, prev = 0;
    for (size_t i = 0; !rc && i < n;) {
        /* the cluster [i, e): up to the next grapheme break */
        size_t e = i;
        for (int first = 1; e < n; first = 0) {
            int l = tk_utf8_next(s + e, n - e, &cp);
            if (!l)
                return hs_fail(HS_EINVAL, "Precompiled: invalid UTF-8");
            if (!first && utf8proc_grapheme_break_stateful((utf8proc_int32_t)prev,
                                                           (utf8proc_int32_t)cp, &state))
                break;
            prev = cp, e += (size_t)l;
        }
        if (e - i < 6 && rule(cm, s + i, e - i, out, &rc)) {
            i = e;
            continue;
        }
        while (!rc && i < e) {
            size_t l = (size_t)tk_utf8_next(s + i, e - i, &cp);
            if (!rule(cm, s + i, l, out, &rc))
                rc = tk_buf_add(out, s + i, l);
            i += l;
        }
    }
    return rc;
}
