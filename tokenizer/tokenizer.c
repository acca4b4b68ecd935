/* The tokenizer's entry points (tokenizer.h): finding and opening the files,
 * and encoding as HF's `tokenizer(text)`: added tokens are cut out of the
 * text first (leftmost, longest first), each stretch between them is
 * normalized, pre-tokenized and merged by BPE, and the post-processor's
 * special tokens wrap the result when add_special is set. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tok_internal.h"

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void join(char *out, size_t cap, const char *dir, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

/* the SentencePiece model files a directory may hold in place of a
 * tokenizer.json whose ids are the model's, in the order they are looked
 * for (Llama-2 / Mistral, T5) */
static const char *const SPM_NAMES[] = { "tokenizer.model", "spiece.model" };

/* the first SentencePiece model file in dir, into out; 0 none */
static int spm_in(const char *dir, char *out, size_t cap)
{
    for (size_t i = 0; i < sizeof SPM_NAMES / sizeof *SPM_NAMES; i++) {
        join(out, cap, dir, SPM_NAMES[i]);
        if (is_file(out))
            return 1;
    }
    return 0;
}

/* a file named as a SentencePiece model: *.model or *.spm */
static int spm_named(const char *path)
{
    size_t n = strlen(path);
    return (n > 6 && !strcmp(path + n - 6, ".model")) || (n > 4 && !strcmp(path + n - 4, ".spm"));
}

/* The error of a directory without a tokenizer: the files whose ids are
 * not the SentencePiece model's are named, with what to do instead */
static int no_tokenizer(const char *dir)
{
    char a[4096];
    join(a, sizeof a, dir, "source.spm");
    if (is_file(a))
        return hs_fail(HS_EIO, "%s: a Marian tokenizer (source.spm, target.spm) needs vocab.json "
                       "beside them (the model's ids); --tokenizer %s gives sentencepiece's own "
                       "ids", dir, a);
    join(a, sizeof a, dir, "sentencepiece.bpe.model");
    if (is_file(a))
        return hs_fail(HS_EIO, "%s: sentencepiece.bpe.model's ids are fairseq's (XLM-R, mBART: "
                       "shifted from sentencepiece's): give the directory a tokenizer.json; "
                       "--tokenizer %s gives sentencepiece's own ids", dir, a);
    return hs_fail(HS_EIO, "%s: no tokenizer.json, nor vocab.json with merges.txt, nor a "
                   "SentencePiece model (tokenizer.model, spiece.model)", dir);
}

int hs_tokenizer_present(const char *dir)
{
    char a[4096], b[4096];
    if (!dir || !is_dir(dir))
        return 0;
    join(a, sizeof a, dir, "tokenizer.json");
    if (is_file(a))
        return 1;
    join(a, sizeof a, dir, "vocab.json");
    join(b, sizeof b, dir, "merges.txt");
    if (is_file(a) && is_file(b))
        return 1;
    join(b, sizeof b, dir, "source.spm");
    return (is_file(a) && is_file(b)) || spm_in(dir, a, sizeof a);
}

void hs_tokenizer_free(hs_tokenizer *t)
{
    if (!t)
        return;
    for (int i = 0; t->tok && i < t->n_ids; i++)
        free(t->tok[i].s);
    for (int i = 0; t->raw && i < t->n_ids; i++)
        free(t->raw[i].s);
    free(t->tok), free(t->raw), free(t->is_special);
    tk_strmap_free(&t->vocab);
    tk_mergemap_free(&t->merges);
    tk_wp_free(t->wp);
    tk_sp_free(t->sp);
    tk_uni_free(t->uni);
    for (int i = 0; i < t->n_added; i++) {
        if (t->added[i].match.s != t->added[i].content.s)
            free(t->added[i].match.s);
        free(t->added[i].content.s);
    }
    free(t->added);
    tk_ac_free(&t->ac[0]), tk_ac_free(&t->ac[1]);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a.s), free(t->norm[i].b.s), free(t->norm[i].where),
            tk_regex_free(&t->norm[i].re);
        if (t->norm[i].cm)
            tk_charsmap_free(t->norm[i].cm), free(t->norm[i].cm);
    }
    free(t->norm);
    for (int i = 0; i < t->n_pre; i++)
        tk_regex_free(&t->pre[i].re), free(t->pre[i].where), free(t->pre[i].repl.s);
    free(t->pre);
    for (int i = 0; i < t->n_dec; i++)
        free(t->dec[i].a.s), free(t->dec[i].b.s);
    free(t->dec);
    for (int i = 0; i < t->n_post; i++) {
        free(t->post[i].pre), free(t->post[i].post);
        for (int k = 0; k < t->post[i].npair; k++)
            free(t->post[i].pair[k].ids);
        free(t->post[i].pair);
    }
    free(t->post);
    free(t->path), free(t->where_model), free(t->where_added);
    tk_marian_free(t->marian);
    free(t);
}

/* What each added token is looked for as: its content, or for a normalized
 * one (matched in the normalized text, HF's second pass) its content
 * normalized, as HF builds its normalized trie. Then the two automata. */
static int added_matches(hs_tokenizer *t)
{
    tk_scratch *s = t->n_norm ? tk_scratch_new(t) : NULL;
    int rc = t->n_norm && !s ? HS_ENOMEM : HS_OK;
    for (int k = 0; !rc && k < t->n_added; k++) {
        tk_added *a = &t->added[k];
        a->match = a->content;
        if (!a->normalized || !t->n_norm)
            continue;
        const char *p;
        size_t n;
        tk_scratch_start(s, a->content.n);
        if ((rc = tk_normalize(t, s, a->content.s, a->content.n, &p, &n)))
            break;
        if (!(a->match.s = malloc(n + 1))) {
            a->match = a->content;
            rc = hs_fail(HS_ENOMEM, "%s: added tokens", t->path);
            break;
        }
        memcpy(a->match.s, p, n);
        a->match.s[n] = 0, a->match.n = n;
    }
    tk_scratch_free(s);
    return rc ? rc : tk_ac_build(t);
}

/* the tables derived from the vocabulary: single bytes' ids (byte-level) or
 * <0xAB> ids (byte fallback), the byte-level alphabet */
static void derive(hs_tokenizer *t)
{
    /* a BPE without a pre-tokenizer (Llama-2 style) merges each stretch as
     * one word, as HF; when no vocabulary string joins two U+2581 words, a
     * merge never crosses from one to the next, so it may run word by word
     * (each cached) with the same result. Not with ignore_merges (the whole
     * stretch looked up first), nor when fused unknown characters could run
     * across a word's start (U+2581 itself unknown). */
    t->bpe_words = !t->wp && !t->uni && !t->sp && !t->byte_level && !t->n_pre &&
                   !t->ignore_merges &&
                   (!t->fuse_unk || tk_strmap_get(&t->vocab, TK_SPACE, 3) >= 0) &&
                   tk_no_joined_words(t->raw, t->n_ids, TK_SPACE, 3);
    for (int cp = 0; cp < 512; cp++)
        t->cp_byte[cp] = (int16_t)tk_cp_to_byte((uint32_t)cp);
    for (int b = 0; b < 256; b++) {
        char s[8];
        if (t->byte_level) {
            s[0] = (char)b;
            t->byte_id[b] = tk_strmap_get(&t->vocab, s, 1);
        } else {
            snprintf(s, sizeof s, "<0x%02X>", b);
            t->byte_id[b] = t->byte_fallback ? tk_strmap_get(&t->vocab, s, 6) : -1;
        }
    }
}

int hs_tokenizer_open(hs_tokenizer **tok, const char *path)
{
    *tok = NULL;
    char json[4096], vocab[4096], merges[4096];
    const char *file = path;
    int dir = is_dir(path), gpt2 = 0, spm = !dir && spm_named(path), marian = 0;
    /* GPT-2's vocab.json named itself: merges.txt beside it */
    size_t len = strlen(path);
    if (!dir && len >= 10 && !strcmp(path + len - 10, "vocab.json") &&
        (len == 10 || path[len - 11] == '/') && len < sizeof vocab) {
        snprintf(vocab, sizeof vocab, "%s", path);
        snprintf(merges, sizeof merges, "%.*smerges.txt", (int)(len - 10), path);
        gpt2 = is_file(merges);
    }
    if (dir) {
        join(json, sizeof json, path, "tokenizer.json");
        join(vocab, sizeof vocab, path, "vocab.json");
        join(merges, sizeof merges, path, "merges.txt");
        char src[4096];
        join(src, sizeof src, path, "source.spm");
        if (is_file(json))
            file = json;
        else if (!(gpt2 = is_file(vocab) && is_file(merges)) &&
                 !(spm = spm_in(path, json, sizeof json)) &&
                 !(marian = is_file(vocab) && is_file(src)))
            return no_tokenizer(path);
        else if (spm)
            file = json;
    }
    hs_tokenizer *t = tk_new(path);
    if (!t)
        return HS_ENOMEM;
    int rc = gpt2     ? tk_load_gpt2(t, vocab, merges)
             : marian ? tk_load_marian(t, path)
             : spm    ? tk_load_spm(t, file)
                      : tk_load_json(t, file);
    if (!rc)
        rc = tk_finish(t);
    if (rc) {
        hs_tokenizer_free(t);
        return rc;
    }
    *tok = t;
    return HS_OK;
}

hs_tokenizer *tk_new(const char *path)
{
    hs_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        hs_fail(HS_ENOMEM, "tokenizer: %s", path);
        return NULL;
    }
    t->unk = -1;
    t->path = strdup(path);
    if (t->path && (t->where_model = malloc(strlen(path) + 40)) &&
        (t->where_added = malloc(strlen(path) + 40))) {
        sprintf(t->where_model, "%s: model (BPE)", path);
        sprintf(t->where_added, "%s: added_tokens", path);
        return t;
    }
    hs_tokenizer_free(t);
    hs_fail(HS_ENOMEM, "tokenizer: %s", path);
    return NULL;
}

int tk_finish(hs_tokenizer *t)
{
    const int rc = added_matches(t);
    if (!rc)
        derive(t);
    return rc;
}

int hs_tokenizer_vocab_size(const hs_tokenizer *t) { return t->n_ids; }

const char *hs_tokenizer_path(const hs_tokenizer *t) { return t->path; }

int32_t hs_tokenizer_token_id(const hs_tokenizer *t, const char *piece)
{
    size_t n = strlen(piece);
    for (int k = 0; k < t->n_added; k++)
        if (t->added[k].content.n == n && !memcmp(t->added[k].content.s, piece, n))
            return t->added[k].id;
    if (!t->byte_level)
        return tk_strmap_get(&t->vocab, piece, n);
    /* the vocabulary holds the bytes a byte-level piece stands for (a
     * character outside the alphabet: the piece as it is, as it was read;
     * then the bytes found must be spelled so in the file, " the" is no
     * spelling of GPT-2's "Ġthe") */
    char *raw = malloc(n + 1);
    if (!raw)
        return -1;
    size_t k = 0;
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        int l = tk_utf8_next(piece + i, n - i, &cp);
        if (!l || cp >= 512 || t->cp_byte[cp] < 0) {
            memcpy(raw, piece, n), k = n;
            break;
        }
        raw[k++] = (char)t->cp_byte[cp];
        i += (size_t)l;
    }
    int32_t id = tk_strmap_get(&t->vocab, raw, k);
    free(raw);
    return id >= 0 && t->tok[id].n == n && !memcmp(t->tok[id].s, piece, n) ? id : -1;
}

int hs_tokenizer_is_special(const hs_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && t->is_special[id] == 1;
}

/* ---- added tokens ---- */

static int is_word_byte(unsigned char c)
{
    return c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           c == '_';
}

/* the length of the whitespace run before s[end] (lstrip) */
static size_t space_before(const char *s, size_t from, size_t end)
{
    size_t k = end;
    while (k > from) {
        size_t j = k - 1;
        while (j > from && ((unsigned char)s[j] & 0xc0) == 0x80)
            j--;
        uint32_t cp;
        if (!tk_utf8_next(s + j, k - j, &cp) || !tk_is_space(cp))
            break;
        k = j;
    }
    return end - k;
}

static size_t space_after(const char *s, size_t start, size_t n)
{
    size_t k = start;
    uint32_t cp;
    int l;
    while (k < n && (l = tk_utf8_next(s + k, n - k, &cp)) && tk_is_space(cp))
        k += (size_t)l;
    return k - start;
}

typedef int (*stretch_fn)(const hs_tokenizer *t, tk_scratch *s, const char *p, size_t n,
                          int first, tk_ids *out);

/* Cuts the added tokens of a pass out of text and hands each stretch
 * between them to fn, as HF's find_matches: the leftmost-longest matches
 * in order (tk_ac_find); a single_word token with a word character beside
 * it is no match, and the text it covers stays text (HF discards it, it
 * does not look for a shorter token there); an lstrip / rstrip token takes
 * the whitespace beside it. first: text starts at the input's offset 0. */
static int split_added(const hs_tokenizer *t, tk_scratch *s, const char *text, size_t len,
                       int pass, int first, stretch_fn fn, tk_ids *out)
{
    int rc = tk_ac_find(t, pass, s, text, len);
    if (rc)
        return rc;
    /* fn may find added tokens of the other pass: the matches are copied */
    size_t nf = s->found_n;
    tk_found *found = nf ? malloc(nf * sizeof *found) : NULL;
    if (nf && !found)
        return hs_fail(HS_ENOMEM, "tokenizer: %zu added tokens", nf);
    if (nf)
        memcpy(found, s->found, nf * sizeof *found);
    size_t start = 0; /* of the stretch not yet encoded */
    for (size_t j = 0; j < nf && !rc; j++) {
        const tk_added *a = &t->added[found[j].k];
        size_t i = found[j].pos, end = i + a->match.n, cut = i;
        if (i < start) /* inside what an rstrip token took */
            continue;
        if (a->single_word && ((i > 0 && is_word_byte((unsigned char)text[i - 1])) ||
                               (end < len && is_word_byte((unsigned char)text[end]))))
            continue;
        if (a->lstrip)
            cut -= space_before(text, start, i);
        if (a->rstrip)
            end += space_after(text, end, len);
        rc = fn(t, s, text + start, cut - start, first && start == 0, out);
        if (!rc)
            rc = tk_ids_add(out, &a->id, 1);
        start = end;
    }
    free(found);
    if (!rc)
        rc = fn(t, s, text + start, len - start, first && start == 0, out);
    return rc;
}

/* a normalized stretch free of added tokens: pre-tokens, each merged by BPE
 * (or cut by WordPiece) */
static int encode_pieces(const hs_tokenizer *t, tk_scratch *s, const char *p, size_t n, int first,
                         tk_ids *out)
{
    tk_pieces *pieces;
    if (!n)
        return HS_OK;
    int rc = tk_pretokenize(t, s, p, n, first, &pieces);
    for (size_t i = 0; !rc && i < pieces->n; i++)
        rc = t->wp          ? tk_wordpiece(t, s, pieces->p[i].p, pieces->p[i].n, out)
             : t->uni       ? tk_unigram(t, s, pieces->p[i].p, pieces->p[i].n, out)
             : t->bpe_words ? tk_bpe_words(t, s, pieces->p[i].p, pieces->p[i].n, out)
                            : tk_bpe(t, s, pieces->p[i].p, pieces->p[i].n, out);
    return rc;
}

/* a stretch of the text between added tokens: normalized, then the
 * normalized added tokens cut out of it */
static int encode_stretch(const hs_tokenizer *t, tk_scratch *s, const char *p, size_t n, int first,
                          tk_ids *out)
{
    const char *norm;
    size_t nn;
    if (!n)
        return HS_OK;
    int rc = tk_normalize(t, s, p, n, &norm, &nn);
    return rc ? rc : split_added(t, s, norm, nn, 1, first, encode_pieces, out);
}

static int encode_text(const hs_tokenizer *t, tk_scratch *s, const char *text, size_t len,
                       tk_ids *out)
{
    return split_added(t, s, text, len, 0, 1, encode_stretch, out);
}

int hs_tokenizer_encode(const hs_tokenizer *t, const char *text, size_t len, int add_special,
                        int32_t **ids, size_t *n)
{
    *ids = NULL, *n = 0;
    size_t bad = hs_utf8_check(text, len);
    if (bad < len)
        return hs_fail(HS_EINVAL, "text: invalid UTF-8 at byte offset %zu", bad);
    tk_scratch *s = tk_scratch_new(t);
    if (!s)
        return HS_ENOMEM;
    tk_scratch_start(s, len);
    tk_ids body = { 0 }, out = { 0 };
    int rc = t->marian ? tk_marian_encode(t, text, len, add_special, &body)
             : t->sp   ? tk_sp_encode(t, s, text, len, &body)
                       : encode_text(t, s, text, len, &body);
    tk_scratch_free(s);
    /* the templates in order, each wrapping what the one before made */
    for (int k = 0; !rc && add_special && k < t->n_post; k++) {
        const tk_template *tp = &t->post[k];
        out.n = 0;
        rc = tk_ids_add(&out, tp->pre, (size_t)tp->npre) || tk_ids_add(&out, body.p, body.n) ||
             tk_ids_add(&out, tp->post, (size_t)tp->npost);
        tk_ids x = body;
        body = out, out = x;
    }
    free(out.p);
    if (rc) {
        free(body.p);
        return rc == HS_OK ? HS_ENOMEM : rc;
    }
    if (!body.p) /* an empty text: a valid, freeable pointer all the same */
        body.p = malloc(sizeof *body.p);
    if (!body.p)
        return hs_fail(HS_ENOMEM, "tokenizer: ids");
    *ids = body.p, *n = body.n;
    return HS_OK;
}

int hs_tokenizer_encode_pair(const hs_tokenizer *t, const char *a, size_t alen, const char *b,
                             size_t blen, size_t max_len, int32_t **ids, unsigned char **types,
                             size_t *n)
{
    *ids = NULL, *types = NULL, *n = 0;
    const tk_template *tp = t->n_post == 1 ? &t->post[0] : NULL;
    if (!tp || !tp->npair)
        return hs_fail(HS_EINVAL, "%s: the post-processor has no pair template (a text pair "
                                  "needs TemplateProcessing's \"pair\" or BertProcessing)",
                       t->path);
    size_t specials = 0;
    for (int k = 0; k < tp->npair; k++)
        specials += (size_t)tp->pair[k].nids;
    int32_t *seq[3] = { NULL, NULL, NULL };
    size_t len[3] = { 0, 0, 0 };
    int rc = hs_tokenizer_encode(t, a, alen, 0, &seq[1], &len[1]);
    if (!rc)
        rc = hs_tokenizer_encode(t, b, blen, 0, &seq[2], &len[2]);
    if (!rc && max_len && specials >= max_len)
        rc = hs_fail(HS_EINVAL, "%s: the pair template's %zu special tokens leave no room in %zu",
                     t->path, specials, max_len);
    /* transformers' truncate_sequences, longest_first: one token at a time
     * from the end of the longer sequence, the second on ties */
    while (!rc && max_len && len[1] + len[2] + specials > max_len)
        len[len[1] > len[2] ? 1 : 2]--;
    const size_t total = len[1] + len[2] + specials;
    if (!rc && (!(*ids = malloc(sizeof **ids * (total + 1))) || !(*types = malloc(total + 1))))
        rc = hs_fail(HS_ENOMEM, "tokenizer: ids");
    for (int k = 0; !rc && k < tp->npair; k++) {
        const tk_pair_item *it = &tp->pair[k];
        const int32_t *from = it->seq ? seq[it->seq] : it->ids;
        const size_t m = it->seq ? len[it->seq] : (size_t)it->nids;
        memcpy(*ids + *n, from, sizeof *from * m);
        memset(*types + *n, it->type_id, m);
        *n += m;
    }
    free(seq[1]), free(seq[2]);
    if (rc) {
        free(*ids), free(*types);
        *ids = NULL, *types = NULL, *n = 0;
    }
    return rc;
}

char *hs_tokenizer_decode(const hs_tokenizer *t, const int32_t *ids, size_t n, int skip_special)
{
    tk_buf out = { 0 };
    if (t->marian ? tk_marian_decode(t, ids, n, skip_special, 0, &out)
                  : tk_decode(t, ids, n, skip_special, 0, &out)) {
        free(out.p);
        return NULL;
    }
    if (!out.p && tk_buf_add(&out, "", 0))
        return NULL;
    return out.p;
}

int hs_tokenizer_token_text(const hs_tokenizer *t, int32_t id, char *buf, size_t cap)
{
    if (id < 0 || id >= t->n_ids || !t->tok[id].s)
        return hs_fail(HS_EINVAL, "tokenizer: id %d is not in the vocabulary (%d ids)", (int)id,
                       t->n_ids);
    tk_buf out = { 0 };
    int rc = t->marian ? tk_marian_decode(t, &id, 1, 0, 1, &out) : tk_decode(t, &id, 1, 0, 1, &out);
    if (!rc && cap) {
        size_t n = out.n < cap - 1 ? out.n : cap - 1;
        while (n < out.n && n > 0 && ((unsigned char)out.p[n] & 0xc0) == 0x80)
            n--; /* not inside a character */
        if (n)
            memcpy(buf, out.p, n);
        buf[n] = 0;
    }
    free(out.p);
    return rc;
}

int hs_tokenizer_encode_file(const hs_tokenizer *t, const char *path, size_t stream_cap,
                             int add_special, int32_t **ids, size_t *n)
{
    *ids = NULL, *n = 0;
    char *text;
    size_t len;
    int rc = hs_read_file(&text, &len, path, HS_TOKENIZER_MAX_TEXT,
                          stream_cap > HS_TOKENIZER_MAX_TEXT ? HS_TOKENIZER_MAX_TEXT : stream_cap);
    if (!rc) {
        size_t bad = hs_utf8_check(text, len);
        rc = bad < len ? hs_fail(HS_EINVAL, "%s: invalid UTF-8 at byte offset %zu", path, bad)
                       : hs_tokenizer_encode(t, text, len, add_special, ids, n);
    }
    free(text);
    return rc;
}
