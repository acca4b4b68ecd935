/* The WordPiece model and the steps BERT's tokenizer.json files run around
 * it, as Hugging Face `tokenizers` (Rust) does them:
 *
 *   BertNormalizer    clean_text (U+0000, U+FFFD and the other characters
 *                     of category C removed, except tab, newline and CR;
 *                     whitespace to a space), handle_chinese_chars (a space
 *                     either side of each CJK ideograph), strip_accents (NFD,
 *                     then the nonspacing marks Mn removed), lowercase
 *   BertPreTokenizer  split on whitespace (removed) and around each
 *                     punctuation character (ASCII's, and Unicode's P*)
 *   WordPiece         per word: the longest vocabulary piece at the start,
 *                     then the longest "##" piece at each next position;
 *                     a word longer than max_input_chars_per_word, or with
 *                     a position no piece covers, is one unknown token
 *
 * The vocabulary is a byte trie (tk_trie), so that finding the longest piece at a
 * position walks the word once (HF looks up each shorter substring in
 * turn: up to n look-ups of up to n bytes a position). The character classes
 * are utf8proc's (Unicode 15); HF's `unicode_categories` tables are older, so
 * a character assigned since (category Cn there) that HF removes is kept. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"

struct tk_wp {
    tk_trie trie;      /* the pieces: trie.id[node] the piece ending there */
    int32_t cont;      /* the node of the continuing-subword prefix; -1: no piece has it */
    int32_t first[2][256]; /* the children of the root and of cont (-1 none): every walk's
                              first step */
    size_t max_chars;  /* max_input_chars_per_word */
};

void tk_wp_free(tk_wp *wp)
{
    if (wp)
        tk_trie_free(&wp->trie);
    free(wp);
}

int tk_wp_build(hs_tokenizer *t, const char *prefix, size_t max_chars)
{
    tk_wp *wp = calloc(1, sizeof *wp);
    if (!wp)
        return hs_fail(HS_ENOMEM, "tokenizer: WordPiece trie");
    t->wp = wp; /* freed with t from here */
    int rc = tk_trie_build(&wp->trie, t->raw, t->n_ids, t->path, "model.vocab");
    if (rc)
        return rc;
    /* the prefix's node without making one: no piece starts with it, no
     * continuation is found */
    const int32_t node = tk_trie_find(&wp->trie, prefix, strlen(prefix));
    wp->cont = node;
    for (int b = 0; b < 256; b++) {
        wp->first[0][b] = wp->trie.root[b];
        wp->first[1][b] = node >= 0 ? tk_trie_child(&wp->trie, node, (unsigned char)b) : -1;
    }
    wp->max_chars = max_chars;
    return HS_OK;
}

int tk_wordpiece(const hs_tokenizer *t, tk_scratch *s, const char *w, size_t n, tk_ids *out)
{
    const tk_wp *wp = t->wp;
    size_t chars = 0;
    for (size_t i = 0; i < n && chars <= wp->max_chars; i++)
        chars += ((unsigned char)w[i] & 0xc0) != 0x80;
    int rc = tk_charge(s, n, t->where_model);
    if (rc)
        return rc;
    if (chars > wp->max_chars)
        return tk_ids_add(out, &t->unk, 1);
    const size_t first = out->n;
    for (size_t start = 0; start < n;) {
        /* the longest piece from start: the last node on the walk that ends
         * a piece at a character boundary (node: the walk after w[start, k);
         * the root or the prefix's node itself never counts, a piece "##"
         * covers nothing of the word) */
        int32_t node = wp->first[start > 0][(unsigned char)w[start]], best = -1;
        size_t end = start, k = start + 1;
        while (node >= 0) {
            if (wp->trie.id[node] >= 0 && (k == n || ((unsigned char)w[k] & 0xc0) != 0x80))
                best = wp->trie.id[node], end = k;
            if (k == n)
                break;
            node = tk_trie_child(&wp->trie, node, (unsigned char)w[k++]);
        }
        if ((rc = tk_charge(s, k - start, t->where_model)))
            return rc;
        if (best < 0) { /* HF: the whole word is unknown, its pieces so far dropped */
            out->n = first;
            return tk_ids_add(out, &t->unk, 1);
        }
        if (tk_ids_add(out, &best, 1))
            return HS_ENOMEM;
        start = end; /* end > start: each turn moves on */
    }
    return HS_OK;
}

/* ---- BertNormalizer ---- */

/* HF's is_control: category C (Cc, Cf, Cn, Co, Cs) but tab, newline, CR */
static int is_control(uint32_t cp)
{
    if (cp < 0x80)
        return (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0x7f;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_CN || c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF ||
           c == UTF8PROC_CATEGORY_CO || c == UTF8PROC_CATEGORY_CS;
}

/* HF's is_chinese_char: the CJK ideograph blocks (its ranges, 0x2B920 included) */
static int is_chinese(uint32_t cp)
{
    return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
           (cp >= 0x20000 && cp <= 0x2a6df) || (cp >= 0x2a700 && cp <= 0x2b73f) ||
           (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b920 && cp <= 0x2ceaf) ||
           (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

/* clean_text and handle_chinese_chars, one pass (a printable ASCII
 * character is itself in both) */
static int clean_and_pad(tk_buf *out, const char *s, size_t n, int flags)
{
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        size_t k = i;
        while (k < n && (unsigned char)s[k] >= 0x20 && (unsigned char)s[k] < 0x7f)
            k++;
        if (k > i && tk_buf_add(out, s + i, k - i))
            return HS_ENOMEM;
        if ((i = k) == n)
            break;
        int l = tk_utf8_next(s + i, n - i, &cp);
        if (!l)
            return hs_fail(HS_EINVAL, "tokenizer: invalid UTF-8 in BertNormalizer");
        i += (size_t)l;
        if ((flags & TK_BERT_CLEAN) && (cp == 0 || cp == 0xfffd || is_control(cp)))
            continue;
        if ((flags & TK_BERT_CLEAN) && (cp == '\t' || cp == '\n' || cp == '\r' || tk_is_space(cp)))
            cp = ' ';
        int pad = (flags & TK_BERT_CHINESE) && is_chinese(cp);
        if ((pad && tk_buf_add(out, " ", 1)) || tk_utf8_put(out, cp) ||
            (pad && tk_buf_add(out, " ", 1)))
            return HS_ENOMEM;
    }
    return HS_OK;
}

/* NFD of a stretch, then its nonspacing marks removed */
static int strip_run(tk_buf *out, const char *s, size_t n)
{
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d,
                                        UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    if (len < 0)
        return hs_fail(HS_EINVAL, "tokenizer: BertNormalizer: %s", utf8proc_errmsg(len));
    int rc = HS_OK;
    utf8proc_int32_t cp;
    for (utf8proc_ssize_t i = 0; i < len && !rc;) {
        utf8proc_ssize_t l = utf8proc_iterate(d + i, len - i, &cp);
        if (l <= 0) {
            rc = hs_fail(HS_EINVAL, "tokenizer: BertNormalizer: NFD gave invalid UTF-8");
            break;
        }
        if (utf8proc_category(cp) != UTF8PROC_CATEGORY_MN)
            rc = tk_buf_add(out, d + i, (size_t)l);
        i += l;
    }
    free(d);
    return rc;
}

/* strip_accents: NFD, then the nonspacing marks removed. An ASCII
 * character decomposes to itself and is a starter (combining class 0), so
 * NFD of the text is the ASCII runs as they are and NFD of each stretch
 * between them: only those go through utf8proc. */
static int strip_accents(tk_buf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = i;
        while (k < n && (unsigned char)s[k] < 0x80)
            k++;
        if (k > i && tk_buf_add(out, s + i, k - i))
            return HS_ENOMEM;
        for (i = k; k < n && (unsigned char)s[k] >= 0x80;)
            k++;
        int rc = k > i ? strip_run(out, s + i, k - i) : HS_OK;
        if (rc)
            return rc;
        i = k;
    }
    return HS_OK;
}

int tk_bert_normalize(tk_buf *out, const char *s, size_t n, int flags)
{
    tk_buf a = { 0 }, b = { 0 };
    int rc = HS_OK;
    if (flags & (TK_BERT_CLEAN | TK_BERT_CHINESE)) {
        rc = clean_and_pad(&a, s, n, flags);
        s = a.p ? a.p : "", n = a.n;
    }
    if (!rc && (flags & TK_BERT_STRIP)) {
        rc = strip_accents(&b, s, n);
        s = b.p ? b.p : "", n = b.n;
    }
    if (!rc)
        rc = flags & TK_BERT_LOWER ? tk_lowercase(out, s, n) : tk_buf_add(out, s, n);
    free(a.p), free(b.p);
    return rc;
}

/* ---- BertPreTokenizer ---- */

/* HF's is_bert_punc: ASCII punctuation (33-47, 58-64, 91-96, 123-126) or P* */
static int is_punct(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
               (cp >= 123 && cp <= 126);
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

int tk_bert_pre(const tk_piece *in, tk_pieces *out)
{
    size_t start = 0; /* of the word under way */
    uint32_t cp;
    for (size_t i = 0; i < in->n;) {
        unsigned char c = (unsigned char)in->p[i];
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z')) {
            i++; /* the common case: in the word */
            continue;
        }
        int l = tk_utf8_next(in->p + i, in->n - i, &cp);
        if (!l)
            return hs_fail(HS_EINVAL, "tokenizer: invalid UTF-8 in BertPreTokenizer");
        int sp = tk_is_space(cp), pu = !sp && is_punct(cp);
        if (sp || pu) {
            int rc = tk_piece_add(out, in->p + start, i - start, in->first && start == 0);
            if (!rc && pu)
                rc = tk_piece_add(out, in->p + i, (size_t)l, in->first && i == 0);
            if (rc)
                return rc;
            start = i + (size_t)l;
        }
        i += (size_t)l;
    }
    return tk_piece_add(out, in->p + start, in->n - start, in->first && start == 0);
}
