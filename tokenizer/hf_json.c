/* Reading the two tokenizer formats into a hs_tokenizer: Hugging Face's
 * tokenizer.json (model BPE, WordPiece or Unigram) and GPT-2's vocab.json + merges.txt. Every
 * field is checked; anything the encoder would not honour is refused with
 * the field's path ("pre_tokenizer.pretokenizers[0].behavior"), never
 * silently ignored, because a tokenizer that is almost right gives ids that
 * look right and are not. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_json.h"
#include "json.h"

void *tkj_grow(void *p, int n, size_t size)
{
    return realloc(p, (size_t)(n + 1) * size);
}

int tkj_bad(const tkj_ctx *c, const char *what)
{
    return hs_fail(HS_EFORMAT, "%s: %s: %s", c->file, c->path, what);
}

/* c->path extended by .key or [i]; returns the length to cut it back to */
size_t tkj_push(tkj_ctx *c, const char *fmt, ...)
{
    size_t n = strlen(c->path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->path + n, sizeof c->path - n, fmt, ap);
    va_end(ap);
    return n;
}

/* The file's bytes (NUL-terminated), which must be UTF-8 as HF's JSON
 * reader requires: every string of the file becomes text that the regexes
 * match with PCRE2_NO_UTF_CHECK, so invalid UTF-8 (a Prepend, a Replace
 * content, a Metaspace replacement) would let PCRE2's JIT read past the
 * text. NULL with *rc set (HS_EIO, HS_EFORMAT naming the byte offset). */
static char *read_file(const char *path, size_t *n, int *rc)
{
    char *buf;
    if ((*rc = hs_read_file(&buf, n, path, (size_t)1 << 30, 0)))
        return NULL;
    size_t bad = hs_utf8_check(buf, *n);
    if (bad < *n) {
        *rc = hs_fail(HS_EFORMAT, "%s: invalid UTF-8 at byte offset %zu (a tokenizer file is"
                      " UTF-8 text)", path, bad);
        free(buf);
        return NULL;
    }
    return buf;
}

/* The offset of the first NUL character inside a string of the JSON text
 * (a raw byte, or the escape \u0000), or n. cJSON keeps such a string only
 * up to the NUL: a token "a\u0000b" would be read as "a", a different token
 * from the one HF reads. */
static size_t nul_in_string(const char *s, size_t n)
{
    int in = 0;
    for (size_t i = 0; i < n; i++) {
        if (!s[i])
            return i;
        if (s[i] == '"')
            in = !in;
        else if (in && s[i] == '\\' && i + 1 < n) {
            if (s[i + 1] == 'u' && i + 6 <= n && !memcmp(s + i + 2, "0000", 4))
                return i;
            i++; /* the escaped character: a quote or a backslash does not count */
        }
    }
    return n;
}

/* The JSON value of a tokenizer file, read whole (base/json.h: text after
 * it, or a key repeated in any object, is refused, as a string holding a
 * NUL is): HS_OK and *root, or the status with the message naming path. */
static int read_json(const char *path, cJSON **root)
{
    size_t n;
    int rc;
    *root = NULL;
    char *text = read_file(path, &n, &rc);
    if (!text)
        return rc;
    rc = hs_json_parse(root, text, n, path); /* all n bytes: a NUL does not end the text */
    size_t nul = rc ? n : nul_in_string(text, n);
    free(text);
    if (nul < n) {
        cJSON_Delete(*root);
        *root = NULL;
        rc = hs_fail(HS_EFORMAT, "%s: a NUL character in a string at byte %zu: not supported "
                     "(it would end the string there)", path, nul);
    }
    return rc;
}

int tkj_dup_str(tk_str *d, const char *s, size_t n)
{
    d->s = malloc(n + 1);
    if (!d->s)
        return hs_fail(HS_ENOMEM, "tokenizer: string of %zu bytes", n);
    memcpy(d->s, s, n);
    d->s[n] = 0;
    d->n = n;
    return HS_OK;
}

int tkj_get_string(tkj_ctx *c, const cJSON *o, const char *key, const char *def, const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        if (def)
            return HS_OK;
    } else if (cJSON_IsString(v)) {
        *out = v->valuestring;
        return HS_OK;
    }
    size_t at = tkj_push(c, ".%s", key);
    int rc = tkj_bad(c, v ? "a string expected" : "missing");
    c->path[at] = 0;
    return rc;
}

int tkj_get_bool(tkj_ctx *c, const cJSON *o, const char *key, int def, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return HS_OK;
    }
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return HS_OK;
    }
    size_t at = tkj_push(c, ".%s", key);
    int rc = tkj_bad(c, "true or false expected");
    c->path[at] = 0;
    return rc;
}

/* pattern {"String": s} or {"Regex": r}; *re NULL for a string when want_string */
const char *tkj_type_of(const cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

int tkj_unsupported_type(tkj_ctx *c, const char *type, const char *supported)
{
    size_t at = tkj_push(c, ".%s", "type");
    char msg[300];
    snprintf(msg, sizeof msg, "\"%s\" is not supported (%s)", type ? type : "(missing)", supported);
    int rc = tkj_bad(c, msg);
    c->path[at] = 0;
    return rc;
}

/* the children of a Sequence, each read by fn */
/* ---- the model ---- */

/* the raw bytes of a byte-level string into out (n bytes at most): their
 * count, or -1 when a character is outside the alphabet (the string then
 * stands for itself, as in undo_bytelevel) */
static long undo_bytelevel_into(const char *s, size_t n, char *out)
{
    size_t i = 0, k = 0;
    uint32_t cp;
    while (i < n) {
        int l = tk_utf8_next(s + i, n - i, &cp);
        int byte = l ? tk_cp_to_byte(cp) : -1;
        if (byte < 0)
            return -1;
        out[k++] = (char)byte;
        i += (size_t)l;
    }
    return (long)k;
}

/* the byte-level alphabet undone: raw bytes of a vocabulary string, or the
 * string itself when a character is outside the alphabet (as HF's decoder) */
static int undo_bytelevel(const char *s, size_t n, tk_str *out)
{
    char *p = malloc(n + 1);
    if (!p)
        return hs_fail(HS_ENOMEM, "tokenizer: string of %zu bytes", n);
    const long k = undo_bytelevel_into(s, n, p);
    if (k < 0) {
        free(p);
        return tkj_dup_str(out, s, n);
    }
    p[k] = 0;
    out->s = p, out->n = (size_t)k;
    return HS_OK;
}

/* model-form string -> id (the raw form for byte-level; raw: n bytes) */
static int32_t model_id(const hs_tokenizer *t, const char *s, size_t n, char *raw)
{
    long r = t->byte_level ? undo_bytelevel_into(s, n, raw) : -1;
    return r >= 0 ? tk_strmap_get(&t->vocab, raw, (size_t)r) : tk_strmap_get(&t->vocab, s, n);
}

/* the strings of a merge live on the stack (those of real vocabularies are
 * short): the two joined, then the raw form of each lookup */
static int add_merge(tkj_ctx *c, hs_tokenizer *t, const char *a, size_t an, const char *b, size_t bn,
                     int rank)
{
    char stack[1024];
    const size_t need = 2 * (an + bn);
    char *ab = need <= sizeof stack ? stack : malloc(need);
    if (!ab)
        return hs_fail(HS_ENOMEM, "tokenizer: merges");
    char *raw = ab + an + bn;
    memcpy(ab, a, an), memcpy(ab + an, b, bn);
    const int32_t ia = model_id(t, a, an, raw), ib = model_id(t, b, bn, raw),
                  iab = model_id(t, ab, an + bn, raw);
    if (ab != stack)
        free(ab);
    if (ia < 0 || ib < 0 || iab < 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "\"%.*s %.*s\": %s is not in the vocabulary", (int)(an < 60 ? an : 60),
                 a, (int)(bn < 60 ? bn : 60), b, ia < 0 ? "the left token" : ib < 0 ? "the right token" : "the merged token");
        return tkj_bad(c, msg);
    }
    tk_mergemap_put(&t->merges, ia, ib, rank, iab);
    return HS_OK;
}

static int read_merges(tkj_ctx *c, hs_tokenizer *t, const cJSON *merges)
{
    int n = cJSON_GetArraySize(merges), rank = 0, rc;
    if ((rc = tk_mergemap_init(&t->merges, (size_t)n)))
        return rc;
    for (const cJSON *e = merges->child; e; e = e->next, rank++) {
        size_t at = tkj_push(c, "[%d]", rank);
        if (cJSON_IsString(e)) {
            const char *s = e->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                rc = tkj_bad(c, "\"left right\" expected (one space)");
            else
                rc = add_merge(c, t, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), rank);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            const char *a = e->child->valuestring, *b = e->child->next->valuestring;
            rc = add_merge(c, t, a, strlen(a), b, strlen(b), rank);
        } else
            rc = tkj_bad(c, "\"left right\" or [\"left\", \"right\"] expected");
        c->path[at] = 0;
        if (rc)
            return rc;
    }
    return HS_OK;
}

/* the vocabulary object {token: id}: tok and raw filled (n_ids known) */
static int read_vocab(tkj_ctx *c, hs_tokenizer *t, const cJSON *vocab)
{
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int id = (int)e->valuedouble;
        if (t->tok[id].s) {
            size_t at = tkj_push(c, ".\"%.80s\"", e->string ? e->string : "");
            int rc = tkj_bad(c, "a second token with this id");
            c->path[at] = 0;
            return rc;
        }
        int rc = tkj_dup_str(&t->tok[id], e->string, strlen(e->string));
        if (!rc)
            rc = t->byte_level ? undo_bytelevel(e->string, strlen(e->string), &t->raw[id])
                               : tkj_dup_str(&t->raw[id], e->string, strlen(e->string));
        if (rc)
            return rc;
    }
    return tk_strmap_build(&t->vocab, t->raw, t->n_ids);
}

/* the largest id of the vocabulary and the added tokens; ids checked */
static int max_id(tkj_ctx *c, const cJSON *vocab, const cJSON *added, int *n_ids)
{
    double top = -1;
    size_t at = tkj_push(c, ".%s", "vocab");
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8 ||
            e->valuedouble != (int)e->valuedouble) {
            size_t at2 = tkj_push(c, ".\"%.80s\"", e->string ? e->string : "");
            int rc = tkj_bad(c, "an id from 0 to 10^8 expected");
            c->path[at2] = 0;
            return rc;
        }
        top = e->valuedouble > top ? e->valuedouble : top;
    }
    c->path[at] = 0;
    int i = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e8 ||
            !cJSON_IsString(ct) || !ct->valuestring[0]) {
            snprintf(c->path, sizeof c->path, "added_tokens[%d]", i);
            return tkj_bad(c, "an object with an id and a non-empty content expected");
        }
        top = id->valuedouble > top ? id->valuedouble : top;
    }
    /* real vocabularies are dense; a stray huge id would allocate gigabytes */
    int count = cJSON_GetArraySize(vocab) + (added ? cJSON_GetArraySize(added) : 0);
    if (top >= 4.0 * count + 1024) {
        snprintf(c->path, sizeof c->path, "model.vocab");
        return tkj_bad(c, "the largest id is far beyond the number of tokens (ids must be dense)");
    }
    if (top < 0) { /* no id at all: a tokenizer of 0 ids encodes nothing a model can read */
        snprintf(c->path, sizeof c->path, "model.vocab");
        return tkj_bad(c, "an empty vocabulary (no token, no added token)");
    }
    *n_ids = (int)top + 1;
    return HS_OK;
}

static int read_added(tkj_ctx *c, hs_tokenizer *t, const cJSON *added)
{
    int i = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, i++) {
        snprintf(c->path, sizeof c->path, "added_tokens[%d]", i);
        tk_added a = { .id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble };
        const char *s = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        int rc = tkj_get_bool(c, e, "special", 0, &a.special);
        if (!rc)
            rc = tkj_get_bool(c, e, "lstrip", 0, &a.lstrip);
        if (!rc)
            rc = tkj_get_bool(c, e, "rstrip", 0, &a.rstrip);
        if (!rc)
            rc = tkj_get_bool(c, e, "single_word", 0, &a.single_word);
        if (!rc)
            rc = tkj_get_bool(c, e, "normalized", !a.special, &a.normalized);
        if (rc)
            return rc;
        tk_added *g = tkj_grow(t->added, t->n_added, sizeof *g);
        if (!g)
            return hs_fail(HS_ENOMEM, "tokenizer: added tokens");
        t->added = g;
        if ((rc = tkj_dup_str(&a.content, s, strlen(s))))
            return rc;
        t->added[t->n_added++] = a;
        free(t->tok[a.id].s);
        t->tok[a.id] = (tk_str){ 0 };
        if ((rc = tkj_dup_str(&t->tok[a.id], s, strlen(s))))
            return rc;
        t->is_special[a.id] = a.special ? 1 : 2;
    }
    c->path[0] = 0;
    return HS_OK;
}

static int read_ids(tkj_ctx *c, hs_tokenizer *t, const cJSON *root, const cJSON *vocab,
                    const cJSON *merges, const char *unk);

/* WordPiece (BERT): its vocabulary, unknown token (required, as HF's
 * serde reads it), prefix and longest word; then the trie */
static int read_wordpiece(tkj_ctx *c, hs_tokenizer *t, const cJSON *root, const cJSON *m)
{
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *max = cJSON_GetObjectItemCaseSensitive(m, "max_input_chars_per_word");
    const char *unk, *prefix;
    if (t->byte_level)
        return tkj_bad(c, "WordPiece after a ByteLevel pre-tokenizer is not supported");
    int rc = tkj_get_string(c, m, "unk_token", NULL, &unk);
    if (!rc)
        rc = tkj_get_string(c, m, "continuing_subword_prefix", NULL, &prefix);
    if (rc)
        return rc;
    if (!cJSON_IsNumber(max) || max->valuedouble < 0 || max->valuedouble > 1e15 ||
        max->valuedouble != (double)(int64_t)max->valuedouble) {
        tkj_push(c, ".%s", "max_input_chars_per_word");
        return tkj_bad(c, "a count of characters from 0 to 10^15 expected");
    }
    if (!cJSON_IsObject(vocab)) {
        tkj_push(c, ".%s", "vocab");
        return tkj_bad(c, "an object expected");
    }
    if (!*unk) {
        tkj_push(c, ".%s", "unk_token");
        return tkj_bad(c, "an unknown token expected (WordPiece's words without pieces)");
    }
    sprintf(t->where_model, "%s: model (WordPiece)", t->path);
    rc = read_ids(c, t, root, vocab, NULL, unk);
    return rc ? rc : tk_wp_build(t, prefix, (size_t)max->valuedouble);
}

/* Unigram (T5, XLM-R, mBART): vocab [[piece, score], ...], a piece's id its
 * index; unk_id (null: none); byte_fallback. The pieces, unique, go through
 * read_ids as an object {piece: index}; then the scores and the trie. */
static int read_unigram(tkj_ctx *c, hs_tokenizer *t, const cJSON *root, const cJSON *m)
{
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(m, "unk_id");
    const int nv = cJSON_GetArraySize(vocab);
    sprintf(t->where_model, "%s: model (Unigram)", t->path);
    int rc = tkj_get_bool(c, m, "byte_fallback", 0, &t->byte_fallback);
    if (rc)
        return rc;
    if (!cJSON_IsArray(vocab) || !nv) {
        tkj_push(c, ".%s", "vocab");
        return tkj_bad(c, "a non-empty array of [piece, score] expected");
    }
    if (unk && !cJSON_IsNull(unk) &&
        !(cJSON_IsNumber(unk) && unk->valuedouble >= 0 && unk->valuedouble < nv &&
          unk->valuedouble == (int)unk->valuedouble)) {
        tkj_push(c, ".%s", "unk_id");
        return tkj_bad(c, "null or the index of a piece of the vocabulary expected");
    }
    cJSON *ids = cJSON_CreateObject();
    double *score = malloc((size_t)nv * sizeof *score);
    int i = 0;
    rc = ids && score ? HS_OK : hs_fail(HS_ENOMEM, "%s: model.vocab", c->file);
    for (const cJSON *e = vocab->child; !rc && e; e = e->next, i++) {
        const cJSON *p = e->child, *v = p ? p->next : NULL;
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(p) ||
            !p->valuestring[0] || !cJSON_IsNumber(v)) {
            tkj_push(c, ".vocab[%d]", i);
            rc = tkj_bad(c, "[piece, score] expected (a non-empty piece)");
        } else if (!cJSON_AddItemToObject(ids, p->valuestring, cJSON_CreateNumber(i)))
            rc = hs_fail(HS_ENOMEM, "%s: model.vocab", c->file);
        else
            score[i] = v->valuedouble;
    }
    if (!rc)
        rc = read_ids(c, t, root, ids, NULL, "");
    cJSON_Delete(ids);
    for (i = 0; !rc && i < nv; i++) { /* HF keeps a repeated piece's last id: refused here */
        int32_t j = tk_strmap_get(&t->vocab, t->raw[i].s, t->raw[i].n);
        if (j != i) {
            snprintf(c->path, sizeof c->path, "model.vocab[%d]", i);
            rc = tkj_bad(c, "a piece that model.vocab holds twice");
        }
    }
    if (!rc && !(t->uni = calloc(1, sizeof *t->uni)))
        rc = hs_fail(HS_ENOMEM, "%s: model", c->file);
    if (rc) {
        free(score);
        return rc;
    }
    t->uni->score = score;
    t->uni->min_score = score[0];
    for (i = 1; i < nv; i++)
        t->uni->min_score = score[i] < t->uni->min_score ? score[i] : t->uni->min_score;
    t->unk = unk && cJSON_IsNumber(unk) ? (int32_t)unk->valuedouble : -1;
    /* the model's pieces only: an added token past them is no piece */
    return tk_trie_build(&t->uni->trie, t->raw, nv < t->n_ids ? nv : t->n_ids, c->file,
                         "model.vocab");
}

static int read_model(tkj_ctx *c, hs_tokenizer *t, const cJSON *root)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    strcpy(c->path, "model");
    if (!cJSON_IsObject(m))
        return tkj_bad(c, "an object expected");
    const char *type = tkj_type_of(m);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (type && !strcmp(type, "WordPiece"))
        return read_wordpiece(c, t, root, m);
    if (type && !strcmp(type, "Unigram"))
        return read_unigram(c, t, root, m);
    if (type ? strcmp(type, "BPE") : !merges)
        return tkj_unsupported_type(c, type, "BPE, WordPiece, Unigram");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0))
        return tkj_bad(c, "dropout is not supported (null expected)");
    static const char *const affixes[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (int i = 0; i < 2; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(m, affixes[i]);
        if (a && !cJSON_IsNull(a) && !(cJSON_IsString(a) && !a->valuestring[0])) {
            tkj_push(c, ".%s", affixes[i]);
            return tkj_bad(c, "not supported (null expected)");
        }
    }
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        tkj_push(c, ".%s", cJSON_IsObject(vocab) ? "merges" : "vocab");
        return tkj_bad(c, cJSON_IsObject(vocab) ? "an array expected" : "an object expected");
    }
    const char *unk = "";
    int rc = tkj_get_bool(c, m, "byte_fallback", 0, &t->byte_fallback);
    if (!rc)
        rc = tkj_get_bool(c, m, "fuse_unk", 0, &t->fuse_unk);
    if (!rc)
        rc = tkj_get_bool(c, m, "ignore_merges", 0, &t->ignore_merges);
    if (!rc)
        rc = tkj_get_string(c, m, "unk_token", "", &unk);
    return rc ? rc : read_ids(c, t, root, vocab, merges, unk);
}

/* The ids of either model: the vocabulary, the merges (BPE: merges not
 * NULL), the unknown token (unk "" none) and the added tokens. */
static int read_ids(tkj_ctx *c, hs_tokenizer *t, const cJSON *root, const cJSON *vocab,
                    const cJSON *merges, const char *unk)
{
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added)) {
        strcpy(c->path, "added_tokens");
        return tkj_bad(c, "an array expected");
    }
    int rc = max_id(c, vocab, added, &t->n_ids);
    if (rc)
        return rc;
    t->tok = hs_calloc((size_t)t->n_ids, sizeof *t->tok, "tokenizer vocabulary");
    t->raw = hs_calloc((size_t)t->n_ids, sizeof *t->raw, "tokenizer vocabulary");
    t->is_special = hs_calloc((size_t)t->n_ids, 1, "tokenizer vocabulary");
    if (!t->tok || !t->raw || !t->is_special)
        return HS_ENOMEM;
    strcpy(c->path, "model.vocab");
    if ((rc = read_vocab(c, t, vocab)))
        return rc;
    strcpy(c->path, "model.merges");
    if (merges && (rc = read_merges(c, t, merges)))
        return rc;
    t->unk = *unk ? tk_strmap_get(&t->vocab, unk, strlen(unk)) : -1;
    if (*unk && t->unk < 0) {
        strcpy(c->path, "model.unk_token");
        return tkj_bad(c, "not in the vocabulary");
    }
    return read_added(c, t, added);
}

/* a top-level component: null, or read by fn */
static int component(tkj_ctx *c, const cJSON *root, const char *key, hs_tokenizer *t,
                     int (*fn)(tkj_ctx *, const cJSON *, hs_tokenizer *))
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    snprintf(c->path, sizeof c->path, "%s", key);
    if (!o || cJSON_IsNull(o))
        return HS_OK;
    if (!cJSON_IsObject(o))
        return tkj_bad(c, "an object or null expected");
    return fn(c, o, t);
}

int tk_load_json(hs_tokenizer *t, const char *file)
{
    cJSON *root;
    int rc = read_json(file, &root);
    if (rc)
        return rc;
    tkj_ctx c = { .file = file };
    rc = cJSON_IsObject(root) ? HS_OK : hs_fail(HS_EFORMAT, "%s: a JSON object expected", file);
    const cJSON *trunc = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (!rc && trunc && !cJSON_IsNull(trunc))
        rc = hs_fail(HS_EFORMAT, "%s: truncation: not supported (null expected)", file);
    /* padding changes the ids of one text unless it pads to the longest of
     * a batch (BatchLongest) with no multiple */
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(root, "padding");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(pad, "strategy");
    const cJSON *mult = cJSON_GetObjectItemCaseSensitive(pad, "pad_to_multiple_of");
    if (!rc && pad && !cJSON_IsNull(pad) &&
        !(cJSON_IsString(st) && !strcmp(st->valuestring, "BatchLongest") &&
          (!mult || cJSON_IsNull(mult))))
        rc = hs_fail(HS_EFORMAT, "%s: padding: not supported (null, or strategy BatchLongest "
                     "without pad_to_multiple_of, expected)", file);
    /* the pre-tokenizer first: it decides whether the model works on bytes */
    if (!rc)
        rc = component(&c, root, "normalizer", t, tkj_read_normalizer);
    if (!rc)
        rc = component(&c, root, "pre_tokenizer", t, tkj_read_pre);
    if (!rc)
        rc = read_model(&c, t, root);
    if (!rc)
        rc = component(&c, root, "post_processor", t, tkj_read_post);
    if (!rc)
        rc = component(&c, root, "decoder", t, tkj_read_dec);
    for (int i = 0; !rc && i < t->n_post; i++)
        for (int k = 0; k < t->post[i].npre + t->post[i].npost; k++) {
            int32_t id = k < t->post[i].npre ? t->post[i].pre[k] : t->post[i].post[k - t->post[i].npre];
            if (id >= t->n_ids || !t->tok[id].s)
                rc = hs_fail(HS_EFORMAT, "%s: post_processor: special token id %d is not in the "
                             "vocabulary", file, (int)id);
        }
    cJSON_Delete(root);
    return rc;
}

/* t's vocabulary (tok, raw, the map, is_special zeroed) from a {piece: id}
 * object. */
static int vocab_object(tkj_ctx *c, hs_tokenizer *t, const cJSON *vocab)
{
    int rc = max_id(c, vocab, NULL, &t->n_ids);
    if (!rc) {
        t->tok = hs_calloc((size_t)t->n_ids, sizeof *t->tok, "tokenizer vocabulary");
        t->raw = hs_calloc((size_t)t->n_ids, sizeof *t->raw, "tokenizer vocabulary");
        t->is_special = hs_calloc((size_t)t->n_ids, 1, "tokenizer vocabulary");
        rc = t->tok && t->raw && t->is_special ? HS_OK : HS_ENOMEM;
    }
    return rc ? rc : read_vocab(c, t, vocab);
}

int tk_load_vocab_json(hs_tokenizer *t, const char *file)
{
    cJSON *vocab;
    int rc = read_json(file, &vocab);
    if (rc)
        return rc;
    tkj_ctx c = { .file = file };
    rc = cJSON_IsObject(vocab) ? vocab_object(&c, t, vocab)
                               : hs_fail(HS_EFORMAT, "%s: a JSON object {token: id} expected", file);
    cJSON_Delete(vocab);
    return rc;
}

/* ---- GPT-2's vocab.json + merges.txt ---- */

int tk_load_gpt2(hs_tokenizer *t, const char *vocab_file, const char *merges_file)
{
    size_t n;
    cJSON *vocab;
    int rc = read_json(vocab_file, &vocab);
    if (rc)
        return rc;
    if (!cJSON_IsObject(vocab)) {
        cJSON_Delete(vocab);
        return hs_fail(HS_EFORMAT, "%s: a JSON object {token: id} expected", vocab_file);
    }
    tkj_ctx c = { .file = vocab_file };
    tk_pre p = { .type = TK_BYTELEVEL };
    char where[4200];
    snprintf(where, sizeof where, "%s: GPT-2's pre-tokenizer (ByteLevel, GPT-2's pattern)",
             vocab_file);
    rc = tk_regex(&p.re, TK_GPT2_PATTERN, sizeof TK_GPT2_PATTERN - 1, 0, "GPT-2 pattern");
    p.where = rc ? NULL : strdup(where);
    t->pre = malloc(sizeof *t->pre);
    t->dec = calloc(1, sizeof *t->dec);
    rc = rc ? rc : p.where && t->pre && t->dec ? HS_OK : hs_fail(HS_ENOMEM, "%s", vocab_file);
    if (t->pre)
        t->pre[t->n_pre++] = p;
    else
        tk_regex_free(&p.re), free(p.where);
    if (t->dec)
        t->dec[t->n_dec++].type = TK_D_BYTELEVEL;
    t->byte_level = 1;
    t->unk = -1;
    if (!rc)
        rc = vocab_object(&c, t, vocab);
    cJSON_Delete(vocab);
    char *m = rc ? NULL : read_file(merges_file, &n, &rc);
    /* lines "left right"; a first line "#version: ..." and empty lines skipped */
    size_t lines = 0;
    for (size_t i = 0; m && i < n; i++)
        lines += m[i] == '\n';
    if (!rc)
        rc = tk_mergemap_init(&t->merges, lines + 1);
    c.file = merges_file;
    int rank = 0, line = 0;
    for (char *s = m; !rc && s && s < m + n; line++) {
        char *eol = memchr(s, '\n', (size_t)(m + n - s));
        char *end = eol ? eol : m + n;
        if (end > s && end[-1] == '\r')
            end--;
        snprintf(c.path, sizeof c.path, "line %d", line + 1);
        if (end > s && !(line == 0 && !strncmp(s, "#version", 8))) {
            char *sp = memchr(s, ' ', (size_t)(end - s));
            if (!sp || memchr(sp + 1, ' ', (size_t)(end - sp - 1)))
                rc = tkj_bad(&c, "\"left right\" expected (one space)");
            else
                rc = add_merge(&c, t, s, (size_t)(sp - s), sp + 1, (size_t)(end - sp - 1), rank++);
        }
        s = eol ? eol + 1 : NULL;
    }
    free(m);
    /* GPT-2's end of text is a special token, as in HF's GPT2Tokenizer */
    int32_t eot = rc ? -1 : tk_strmap_get(&t->vocab, "<|endoftext|>", 13);
    if (eot >= 0) {
        t->added = calloc(1, sizeof *t->added);
        if (!t->added)
            return hs_fail(HS_ENOMEM, "tokenizer: added tokens");
        t->added[0] = (tk_added){ .id = eot, .special = 1 };
        rc = tkj_dup_str(&t->added[0].content, "<|endoftext|>", 13);
        t->n_added = rc ? 0 : 1;
        t->is_special[eot] = 1;
    }
    return rc;
}
