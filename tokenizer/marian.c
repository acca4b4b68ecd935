/* Marian's tokenizer (SPEC §17; transformers' MarianTokenizer): a source
 * and a target SentencePiece model whose pieces are turned into the
 * model's ids by vocab.json (target_vocab.json for a target side with a
 * vocabulary of its own), a piece it lacks into <unk>; </s> ends every
 * encoded text; a leading language code ">>xx<<" is a token of its own. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tok_internal.h"

struct tk_marian {
    hs_tokenizer *sp;  /* this side's SentencePiece model (source.spm or target.spm) */
    int32_t *to;       /* sp's id -> the vocabulary's (unk where vocab.json lacks the piece) */
    int32_t eos;
    hs_tokenizer *target; /* the source side's: its target side (owned); NULL on the target's */
};

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The special pieces' ids (-1: vocab.json lacks it); unk required. */
static int specials(hs_tokenizer *t, const char *vocab, int32_t *eos)
{
    static const char *const names[] = { "</s>", "<unk>", "<pad>" };
    int32_t id[3];
    for (int k = 0; k < 3; k++)
        if ((id[k] = tk_strmap_get(&t->vocab, names[k], strlen(names[k]))) >= 0)
            t->is_special[id[k]] = 1;
    if (id[0] < 0 || id[1] < 0)
        return hs_fail(HS_EFORMAT, "%s: no \"%s\" (Marian's vocabulary has </s> and <unk>)",
                       vocab, id[0] < 0 ? names[0] : names[1]);
    t->unk = id[1], *eos = id[0];
    return HS_OK;
}

/* One side: vocab (vocab.json or target_vocab.json) into t, spm beside it. */
static int load_side(hs_tokenizer *t, const char *dir, const char *spm, const char *vocab)
{
    char sp_path[4096], v_path[4096];
    snprintf(sp_path, sizeof sp_path, "%s/%s", dir, spm);
    snprintf(v_path, sizeof v_path, "%s/%s", dir, vocab);
    if (!is_file(sp_path))
        return hs_fail(HS_EIO, "%s: a Marian tokenizer without %s", dir, spm);
    tk_marian *m = t->marian = calloc(1, sizeof *m);
    int rc = m ? tk_load_vocab_json(t, v_path) : HS_ENOMEM;
    if (!rc)
        rc = specials(t, v_path, &m->eos);
    if (!rc)
        rc = hs_tokenizer_open(&m->sp, sp_path);
    if (!rc && !(m->to = calloc((size_t)m->sp->n_ids, sizeof *m->to)))
        rc = HS_ENOMEM;
    for (int i = 0; !rc && i < m->sp->n_ids; i++) {
        const tk_str *p = &m->sp->tok[i];
        const int32_t id = p->s ? tk_strmap_get(&t->vocab, p->s, p->n) : -1;
        m->to[i] = id >= 0 ? id : t->unk;
    }
    return rc;
}

int tk_load_marian(hs_tokenizer *t, const char *dir)
{
    char tv[4096];
    snprintf(tv, sizeof tv, "%s/target_vocab.json", dir);
    int rc = load_side(t, dir, "source.spm", "vocab.json");
    hs_tokenizer *g = rc ? NULL : tk_new(dir);
    if (!rc && !g)
        rc = HS_ENOMEM;
    if (g) {
        t->marian->target = g;
        rc = load_side(g, dir, "target.spm", is_file(tv) ? "target_vocab.json" : "vocab.json");
    }
    return rc ? rc : g ? tk_finish(g) : HS_OK;
}

void tk_marian_free(tk_marian *m)
{
    if (!m)
        return;
    hs_tokenizer_free(m->sp);
    hs_tokenizer_free(m->target);
    free(m->to);
    free(m);
}

const hs_tokenizer *hs_tokenizer_target(const hs_tokenizer *t)
{
    return t->marian && t->marian->target ? t->marian->target : t;
}

/* The first match of Python's re ">>.+<<" at or after s[from] (within a
 * line: `.` stops at a newline; greedy: up to the line's last "<<" that
 * leaves a character after ">>"): its start, and its end in *end; -1 none. */
static long code_at(const char *s, size_t n, size_t from, size_t *end)
{
    for (size_t i = from; i + 5 <= n; i++) {
        if (s[i] != '>' || s[i + 1] != '>')
            continue;
        const char *nl = memchr(s + i + 2, '\n', n - i - 2);
        const size_t eol = nl ? (size_t)(nl - s) : n;
        for (size_t k = eol; k >= i + 5; k--)
            if (s[k - 2] == '<' && s[k - 1] == '<') {
                *end = k;
                return (long)i;
            }
        i = eol; /* a later ">>" of this line has no "<<" after it either: linear time */
    }
    return -1;
}

int tk_marian_encode(const hs_tokenizer *t, const char *text, size_t len, int add_special,
                     tk_ids *out)
{
    const tk_marian *m = t->marian;
    char *rest = malloc(len + 1);
    if (!rest)
        return hs_fail(HS_ENOMEM, "tokenizer: text");
    /* MarianTokenizer: the code re.match finds first, then re.sub removes
     * every match from the text the pieces come from */
    size_t n = 0, from = 0, end;
    int rc = HS_OK;
    for (long at; (at = code_at(text, len, from, &end)) >= 0; from = end) {
        if (at == 0) {
            int32_t id = tk_strmap_get(&t->vocab, text, end);
            rc = tk_ids_add(out, id >= 0 ? &id : &t->unk, 1);
        }
        memcpy(rest + n, text + from, (size_t)at - from);
        n += (size_t)at - from;
    }
    memcpy(rest + n, text + from, len - from);
    n += len - from;
    int32_t *ids = NULL;
    size_t k = 0;
    if (!rc)
        rc = hs_tokenizer_encode(m->sp, rest, n, 0, &ids, &k);
    for (size_t i = 0; !rc && i < k; i++)
        rc = tk_ids_add(out, &m->to[ids[i]], 1);
    if (!rc && add_special)
        rc = tk_ids_add(out, &m->eos, 1);
    free(ids);
    free(rest);
    return rc;
}

/* A run of pieces (vocab ids) as one sentencepiece DecodePieces call
 * (sentencepiece's decode of the pieces it has, where only the run's first
 * piece loses its leading space; a piece it lacks kept as its text),
 * appended to out. */
static int decode_run(const hs_tokenizer *t, const int32_t *ids, size_t n, tk_buf *out)
{
    const hs_tokenizer *sp = t->marian->sp;
    int32_t *sids = malloc((n ? n : 1) * sizeof *sids);
    tk_buf r = { 0 };
    int rc = sids ? HS_OK : hs_fail(HS_ENOMEM, "tokenizer: ids");
    for (size_t i = 0, k = 0; !rc && i <= n; i++) {
        const tk_str *p = i < n ? &t->tok[ids[i]] : NULL;
        const int32_t id = p ? tk_strmap_get(&sp->vocab, p->s, p->n) : -1;
        if (id >= 0) {
            sids[k++] = id;
            continue;
        }
        if (k) /* the pieces before, in r: only r's start strips a space */
            rc = tk_sp_decode(sp, sids, k, 0, &r);
        k = 0;
        if (!rc && p)
            rc = tk_buf_add(&r, p->s, p->n);
    }
    if (!rc && r.n)
        rc = tk_buf_add(out, r.p, r.n);
    free(r.p);
    free(sids);
    return rc;
}

int tk_marian_decode(const hs_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                     int display, tk_buf *out)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_ids || !t->tok[ids[i]].s)
            return hs_fail(HS_EINVAL, "tokenizer: id %d is not in the vocabulary (%d ids)",
                           (int)ids[i], t->n_ids);
    if (display) { /* one piece: the spm's display of it, or its string */
        const tk_str *p = &t->tok[ids[0]];
        const int32_t id = tk_strmap_get(&t->marian->sp->vocab, p->s, p->n);
        if (id < 0 || t->is_special[ids[0]])
            return tk_buf_add(out, p->s, p->n);
        char buf[1024];
        const int rc = hs_tokenizer_token_text(t->marian->sp, id, buf, sizeof buf);
        return rc ? rc : tk_buf_add(out, buf, strlen(buf));
    }
    /* MarianTokenizer.convert_tokens_to_string: runs of pieces decoded by the
     * side's model, a special token kept as its string and a space, every
     * U+2581 left a space, the whole stripped */
    tk_buf b = { 0 };
    int32_t *kept = malloc((n ? n : 1) * sizeof *kept); /* skip_special: the others, one run */
    size_t k = 0, start = 0;
    int rc = kept ? HS_OK : hs_fail(HS_ENOMEM, "tokenizer: ids");
    for (size_t i = 0; kept && i < n; i++)
        if (!skip_special || !t->is_special[ids[i]])
            kept[k++] = ids[i];
    for (size_t i = 0; !rc && i <= k; i++) {
        if (i < k && !t->is_special[kept[i]])
            continue;
        rc = decode_run(t, kept + start, i - start, &b);
        if (!rc && i < k)
            rc = tk_buf_add(&b, t->tok[kept[i]].s, t->tok[kept[i]].n) || tk_buf_add(&b, " ", 1);
        start = i + 1;
    }
    free(kept);
    size_t lo = 0, hi = b.n;
    for (size_t i = 0; !rc && b.p && i + 3 <= b.n; i++)
        if (!memcmp(b.p + i, TK_SPACE, 3)) /* U+2581 -> a space: 3 bytes to 1 */
            memmove(b.p + i + 1, b.p + i + 3, b.n - i - 3), b.p[i] = ' ', b.n -= 2, hi = b.n;
    while (lo < hi && (b.p[lo] == ' ' || (b.p[lo] >= '\t' && b.p[lo] <= '\r')))
        lo++;
    while (hi > lo && (b.p[hi - 1] == ' ' || (b.p[hi - 1] >= '\t' && b.p[hi - 1] <= '\r')))
        hi--;
    if (!rc)
        rc = tk_buf_add(out, b.p ? b.p + lo : "", hi - lo);
    free(b.p);
    return rc;
}
