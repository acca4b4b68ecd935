/* SentencePiece model files (`tokenizer.model`, `spiece.model`, Marian's
 * `source.spm`), read: the ModelProto protobuf field by field, checked as
 * sentencepiece 0.1.97 checks it (one unknown piece, pieces unique and not
 * empty, 256 byte pieces with byte_fallback), and its precompiled_charsmap.
 * Encoding and decoding are tokenizer/spm_encode.c's.
 *
 * Everything the file says is checked against the bytes there are: a
 * truncated or lying protobuf is an error naming the file and the field
 * (`pieces[12].score`), never a read past the buffer. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_json.h"
#include "tok_internal.h"

/* the most pieces a file may hold (the real ones: 32000 to 256000) */
#define SP_MAX_PIECES (1 << 22)

/* ---- the protobuf ---- */

typedef struct {
    const unsigned char *p, *end;
    const unsigned char *base; /* the file's first byte, for offsets */
    const char *file;
} pb_in;

static int pb_bad(const pb_in *b, const char *field, const char *what)
{
    return hs_fail(HS_EFORMAT, "%s: %s: %s (at byte offset %zu)", b->file, field, what,
                   (size_t)(b->p - b->base));
}

static int pb_varint(pb_in *b, const char *field, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end)
            return pb_bad(b, field, "the protobuf ends inside a varint");
        unsigned char c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return HS_OK;
    }
    return pb_bad(b, field, "a varint longer than 10 bytes");
}

/* a length-delimited field's bytes: its length checked against what is left */
static int pb_bytes(pb_in *b, const char *field, pb_in *sub)
{
    uint64_t n;
    int rc = pb_varint(b, field, &n);
    if (rc)
        return rc;
    if (n > (uint64_t)(b->end - b->p)) {
        char what[96];
        snprintf(what, sizeof what, "a length of %llu bytes where %zu are left",
                 (unsigned long long)n, (size_t)(b->end - b->p));
        return pb_bad(b, field, what);
    }
    *sub = (pb_in){ b->p, b->p + n, b->base, b->file };
    b->p += n;
    return HS_OK;
}

/* the next field's number and wire type; HS_OK with *num 0 at the end */
static int pb_key(pb_in *b, const char *msg, uint32_t *num, int *wire)
{
    *num = 0;
    if (b->p >= b->end)
        return HS_OK;
    uint64_t k;
    int rc = pb_varint(b, msg, &k);
    if (rc)
        return rc;
    *wire = (int)(k & 7);
    if (k >> 3 == 0 || k >> 3 > 0x1fffffff)
        return pb_bad(b, msg, "a field number outside 1 .. 2^29-1");
    *num = (uint32_t)(k >> 3);
    return HS_OK;
}

/* skips a field the reader does not need */
static int pb_skip(pb_in *b, const char *msg, int wire)
{
    uint64_t v;
    pb_in sub;
    size_t w = wire == 1 ? 8 : wire == 5 ? 4 : 0;
    switch (wire) {
    case 0:
        return pb_varint(b, msg, &v);
    case 2:
        return pb_bytes(b, msg, &sub);
    case 1:
    case 5:
        if ((size_t)(b->end - b->p) < w)
            return pb_bad(b, msg, "the protobuf ends inside a fixed-width field");
        b->p += w;
        return HS_OK;
    default:
        return pb_bad(b, msg, "a wire type that is not 0, 1, 2 or 5 (groups are not read)");
    }
}

static int pb_want(const pb_in *b, const char *field, int wire, int want)
{
    if (wire == want)
        return HS_OK;
    char what[64];
    snprintf(what, sizeof what, "wire type %d where %d is expected", wire, want);
    return pb_bad(b, field, what);
}

/* a length-delimited field's bytes, its wire type checked */
static int read_bytes(pb_in *m, const char *field, int wire, pb_in *out)
{
    int rc = pb_want(m, field, wire, 2);
    return rc ? rc : pb_bytes(m, field, out);
}

/* ---- reading the ModelProto ---- */

typedef struct {
    tk_str *piece;
    float *score;
    unsigned char *type;
    int n, cap;
    int64_t model_type, byte_fallback, ws_suffix;
    tk_str unk_surface; /* s NULL: the default */
    pb_in charsmap;     /* p == end: none */
    int64_t dummy_prefix, extra_ws, escape_ws;
    int denormalizer;   /* a denormalizer_spec with rules */
} sp_file;

static int read_piece(pb_in *m, sp_file *f, const char *file)
{
    char field[64];
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 1024;
        if (f->n >= SP_MAX_PIECES)
            return hs_fail(HS_EFORMAT, "%s: pieces: more than %d pieces", file, SP_MAX_PIECES);
        tk_str *p = realloc(f->piece, (size_t)cap * sizeof *p);
        if (p)
            f->piece = p;
        float *s = realloc(f->score, (size_t)cap * sizeof *s);
        if (s)
            f->score = s;
        unsigned char *t = realloc(f->type, (size_t)cap);
        if (t)
            f->type = t;
        if (!p || !s || !t)
            return hs_fail(HS_ENOMEM, "%s: %d pieces", file, cap);
        f->cap = cap;
    }
    const int i = f->n++;
    f->piece[i] = (tk_str){ (char *)"", 0 }; /* a piece without its field: empty, refused */
    f->score[i] = 0, f->type[i] = TK_SP_NORMAL;
    uint32_t num;
    int wire, rc;
    uint64_t v;
    while (!(rc = pb_key(m, (snprintf(field, sizeof field, "pieces[%d]", i), field), &num,
                         &wire)) && num) {
        pb_in s;
        if (num == 1) {
            snprintf(field, sizeof field, "pieces[%d].piece", i);
            if ((rc = read_bytes(m, field, wire, &s)))
                return rc;
            f->piece[i] = (tk_str){ (char *)s.p, (size_t)(s.end - s.p) };
        } else if (num == 2) {
            snprintf(field, sizeof field, "pieces[%d].score", i);
            if ((rc = pb_want(m, field, wire, 5)))
                return rc;
            if (m->end - m->p < 4)
                return pb_bad(m, field, "the protobuf ends inside the float");
            uint32_t u = (uint32_t)m->p[0] | (uint32_t)m->p[1] << 8 | (uint32_t)m->p[2] << 16 |
                         (uint32_t)m->p[3] << 24;
            memcpy(&f->score[i], &u, 4);
            m->p += 4;
        } else if (num == 3) {
            snprintf(field, sizeof field, "pieces[%d].type", i);
            if ((rc = pb_want(m, field, wire, 0)) || (rc = pb_varint(m, field, &v)))
                return rc;
            if (v < TK_SP_NORMAL || v > TK_SP_BYTE)
                return pb_bad(m, field, "a piece type outside 1 (NORMAL) .. 6 (BYTE)");
            f->type[i] = (unsigned char)v;
        } else if ((rc = pb_skip(m, field, wire)))
            return rc;
    }
    return rc;
}

/* a bool or enum of a spec: its varint */
static int read_int(pb_in *m, const char *field, int wire, int64_t *out)
{
    uint64_t v;
    int rc = pb_want(m, field, wire, 0);
    if (!rc && !(rc = pb_varint(m, field, &v)))
        *out = (int64_t)v;
    return rc;
}

static int read_trainer(pb_in *m, sp_file *f)
{
    uint32_t num;
    int wire, rc;
    while (!(rc = pb_key(m, "trainer_spec", &num, &wire)) && num) {
        pb_in s;
        if (num == 3)
            rc = read_int(m, "trainer_spec.model_type", wire, &f->model_type);
        else if (num == 35)
            rc = read_int(m, "trainer_spec.byte_fallback", wire, &f->byte_fallback);
        else if (num == 24)
            rc = read_int(m, "trainer_spec.treat_whitespace_as_suffix", wire, &f->ws_suffix);
        else if (num == 44) {
            if (!(rc = read_bytes(m, "trainer_spec.unk_surface", wire, &s)))
                f->unk_surface = (tk_str){ (char *)s.p, (size_t)(s.end - s.p) };
        } else
            rc = pb_skip(m, "trainer_spec", wire);
        if (rc)
            return rc;
    }
    return rc;
}

static int read_normalizer(pb_in *m, sp_file *f, int denormalizer)
{
    const char *msg = denormalizer ? "denormalizer_spec" : "normalizer_spec";
    char field[64];
    uint32_t num;
    int wire, rc;
    int64_t ignored;
    while (!(rc = pb_key(m, msg, &num, &wire)) && num) {
        pb_in s;
        if (num == 2) {
            snprintf(field, sizeof field, "%s.precompiled_charsmap", msg);
            if ((rc = read_bytes(m, field, wire, &s)))
                return rc;
            if (denormalizer)
                f->denormalizer |= s.p < s.end;
            else
                f->charsmap = s;
        } else if (num >= 3 && num <= 5) {
            static const char *names[] = { "add_dummy_prefix", "remove_extra_whitespaces",
                                           "escape_whitespaces" };
            int64_t *to[] = { &f->dummy_prefix, &f->extra_ws, &f->escape_ws };
            snprintf(field, sizeof field, "%s.%s", msg, names[num - 3]);
            rc = read_int(m, field, wire, denormalizer ? &ignored : to[num - 3]);
        } else if (num == 6 && denormalizer) {
            /* rules as TSV text: a denormalizer that does something */
            if (!(rc = read_bytes(m, "denormalizer_spec.normalization_rule_tsv", wire, &s)))
                f->denormalizer |= s.p < s.end;
        } else
            rc = pb_skip(m, msg, wire);
        if (rc)
            return rc;
    }
    return rc;
}

static int read_proto(pb_in *b, sp_file *f)
{
    uint32_t num;
    int wire, rc;
    while (!(rc = pb_key(b, "the model", &num, &wire)) && num) {
        pb_in m;
        static const char *msgs[] = { NULL, "pieces", "trainer_spec", "normalizer_spec", NULL,
                                      "denormalizer_spec" };
        const char *msg = num <= 5 ? msgs[num] : NULL;
        char name[32];
        if (num == 1) /* the piece's index, for a piece cut short */
            snprintf(name, sizeof name, "pieces[%d]", f->n), msg = name;
        if (!msg) {
            if ((rc = pb_skip(b, "the model", wire)))
                return rc;
            continue;
        }
        if ((rc = read_bytes(b, msg, wire, &m)))
            return rc;
        rc = num == 1   ? read_piece(&m, f, b->file)
             : num == 2 ? read_trainer(&m, f)
                        : read_normalizer(&m, f, num == 5);
        if (rc)
            return rc;
    }
    return rc;
}

/* ---- the precompiled charsmap (a Darts double array) ---- */

int tk_charsmap_read(const char *file, const char *field, const unsigned char *p, size_t n,
                     tk_charsmap *cm)
{
    if (n <= 4)
        return hs_fail(HS_EFORMAT, "%s: %s: %zu bytes, too short for its trie's size", file,
                       field, n);
    size_t trie = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
    if (trie >= n - 4 || trie % 4 || !trie)
        return hs_fail(HS_EFORMAT, "%s: %s: a trie of %zu bytes in a blob of %zu (a positive "
                       "multiple of 4 below the blob's size expected)", file, field, trie, n);
    cm->n_units = trie / 4;
    cm->n_str = n - 4 - trie;
    cm->unit = malloc(trie);
    cm->str = malloc(cm->n_str);
    if (!cm->unit || !cm->str)
        return hs_fail(HS_ENOMEM, "%s: %s", file, field);
    for (size_t i = 0; i < cm->n_units; i++) {
        const unsigned char *u = p + 4 + 4 * i;
        cm->unit[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
                      (uint32_t)u[3] << 24;
    }
    memcpy(cm->str, p + 4 + trie, cm->n_str);
    if (cm->str[cm->n_str - 1])
        return hs_fail(HS_EFORMAT, "%s: %s: its replacement strings do not end with a NUL",
                       file, field);
    for (size_t i = 0; i < cm->n_str;) {
        size_t k = strlen(cm->str + i);
        if (!hs_utf8_valid(cm->str + i, k))
            return hs_fail(HS_EFORMAT, "%s: %s: the replacement at offset %zu is not UTF-8",
                           file, field, i);
        i += k + 1;
    }
    return HS_OK;
}

size_t tk_charsmap_match(const tk_charsmap *cm, const char *s, size_t n, int longest,
                         const char **repl, size_t *repl_n)
{
    /* darts-clone's unit: has_leaf bit 8, value the low 31 bits, label the
     * low 8 bits and bit 31, offset (unit >> 10) << ((unit & 1 << 9) >> 6) */
#define UNIT_OFFSET(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))
    size_t pos = UNIT_OFFSET(cm->unit[0]), found = 0, value = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (!c && !longest) /* HF's search stops at a NUL byte, sentencepiece's not */
            break;
        pos ^= c;
        if (pos >= cm->n_units)
            break;
        const uint32_t u = cm->unit[pos];
        if ((u & (0x80000000u | 0xffu)) != c)
            break;
        pos ^= UNIT_OFFSET(u);
        if (pos >= cm->n_units)
            break;
        if (u >> 8 & 1) {
            found = i + 1, value = cm->unit[pos] & 0x7fffffffu;
            if (!longest)
                break;
        }
    }
#undef UNIT_OFFSET
    /* a value outside the strings, or inside a character: no rule (the file
     * is checked to hold UTF-8 strings, so a rule never writes a broken one) */
    if (!found || value >= cm->n_str || ((unsigned char)cm->str[value] & 0xc0) == 0x80)
        return 0;
    *repl = cm->str + value, *repl_n = strlen(cm->str + value);
    return found;
}

void tk_charsmap_free(tk_charsmap *cm)
{
    free(cm->unit), free(cm->str);
    cm->unit = NULL, cm->str = NULL, cm->n_units = cm->n_str = 0;
}

/* ---- building the tokenizer ---- */

int tk_sp_piece_byte(const tk_str *p)
{
    static const char hex[] = "0123456789ABCDEF";
    if (p->n != 6 || memcmp(p->s, "<0x", 3) || p->s[5] != '>')
        return -1;
    const char *h = strchr(hex, p->s[3]), *l = strchr(hex, p->s[4]);
    return h && l && p->s[3] && p->s[4] ? (int)((h - hex) << 4 | (l - hex)) : -1;
}

static int check_pieces(hs_tokenizer *t, const sp_file *f)
{
    int unk = -1, bytes = 0;
    for (int i = 0; i < f->n; i++) {
        const tk_str *p = &f->piece[i];
        if (!p->n)
            return hs_fail(HS_EFORMAT, "%s: pieces[%d].piece: empty (a piece must not be)",
                           t->path, i);
        if (!hs_utf8_valid(p->s, p->n))
            return hs_fail(HS_EFORMAT, "%s: pieces[%d].piece: not UTF-8", t->path, i);
        if (f->type[i] == TK_SP_UNKNOWN) {
            if (unk >= 0)
                return hs_fail(HS_EFORMAT, "%s: pieces[%d].type: a second unknown piece (the "
                               "first is pieces[%d])", t->path, i, unk);
            unk = i;
        }
        if (f->type[i] == TK_SP_BYTE) {
            if (!f->byte_fallback)
                return hs_fail(HS_EFORMAT, "%s: pieces[%d]: a byte piece, but "
                               "trainer_spec.byte_fallback is false", t->path, i);
            if (tk_sp_piece_byte(p) < 0)
                return hs_fail(HS_EFORMAT, "%s: pieces[%d]: a byte piece that is not <0xAB>",
                               t->path, i);
            bytes++;
        }
    }
    if (unk < 0)
        return hs_fail(HS_EFORMAT, "%s: pieces: no piece of type UNKNOWN (2)", t->path);
    t->unk = unk;
    /* the map finds each piece once: two pieces alike are refused */
    if (tk_strmap_build(&t->vocab, t->raw, t->n_ids))
        return hs_fail(HS_ENOMEM, "%s: %d pieces", t->path, t->n_ids);
    for (int i = 0; i < f->n; i++) {
        int32_t j = tk_strmap_get(&t->vocab, f->piece[i].s, f->piece[i].n);
        if (j != i)
            return hs_fail(HS_EFORMAT, "%s: pieces[%d].piece: \"%.*s\" is pieces[%d] too",
                           t->path, i, (int)(f->piece[i].n > 40 ? 40 : f->piece[i].n),
                           f->piece[i].s, i < j ? j : (int)j);
    }
    if (f->byte_fallback && bytes != 256)
        return hs_fail(HS_EFORMAT, "%s: trainer_spec.byte_fallback is true but the file has %d "
                       "distinct byte pieces, not 256", t->path, bytes);
    return HS_OK;
}

static int check_spec(const hs_tokenizer *t, const sp_file *f)
{
    if (f->model_type != 1 && f->model_type != 2)
        return hs_fail(HS_EFORMAT, "%s: trainer_spec.model_type: %lld is not supported (1 "
                       "UNIGRAM, 2 BPE; WORD and CHAR models are not read)", t->path,
                       (long long)f->model_type);
    if (f->ws_suffix)
        return hs_fail(HS_EFORMAT, "%s: trainer_spec.treat_whitespace_as_suffix: true is not "
                       "supported", t->path);
    if (f->denormalizer)
        return hs_fail(HS_EFORMAT, "%s: denormalizer_spec: denormalization rules are not "
                       "supported", t->path);
    if (f->unk_surface.s && !hs_utf8_valid(f->unk_surface.s, f->unk_surface.n))
        return hs_fail(HS_EFORMAT, "%s: trainer_spec.unk_surface: not UTF-8", t->path);
    return HS_OK;
}

/* the vocabulary, types and scores of a checked file */
static int build(hs_tokenizer *t, const sp_file *f)
{
    tk_sp *sp = t->sp;
    t->n_ids = f->n;
    t->tok = calloc((size_t)f->n, sizeof *t->tok);
    t->raw = calloc((size_t)f->n, sizeof *t->raw);
    t->is_special = calloc((size_t)f->n, 1);
    sp->type = malloc((size_t)f->n);
    sp->score = malloc((size_t)f->n * sizeof *sp->score);
    tk_str *model = calloc((size_t)f->n, sizeof *model), *user = calloc((size_t)f->n, sizeof *user);
    int rc = !t->tok || !t->raw || !t->is_special || !sp->type || !sp->score || !model || !user
                 ? hs_fail(HS_ENOMEM, "%s: %d pieces", t->path, f->n)
                 : HS_OK;
    for (int i = 0; !rc && i < f->n; i++) {
        if (tkj_dup_str(&t->tok[i], f->piece[i].s, f->piece[i].n) ||
            tkj_dup_str(&t->raw[i], f->piece[i].s, f->piece[i].n))
            rc = hs_fail(HS_ENOMEM, "%s: %d pieces", t->path, f->n);
        sp->type[i] = f->type[i];
        sp->score[i] = f->score[i];
        t->is_special[i] = f->type[i] == TK_SP_CONTROL;
        if (f->type[i] == TK_SP_NORMAL || f->type[i] == TK_SP_USER || f->type[i] == TK_SP_UNUSED)
            model[i] = f->piece[i];
        if (f->type[i] == TK_SP_USER)
            user[i] = f->piece[i], sp->n_user++;
        sp->n_unused += f->type[i] == TK_SP_UNUSED;
    }
    /* sentencepiece's bounds: min from FLT_MAX, max from FLT_MIN (the
     * least positive float), over the NORMAL pieces */
    sp->min_score = FLT_MAX, sp->max_score = FLT_MIN;
    for (int i = 0; i < f->n; i++)
        if (f->type[i] == TK_SP_NORMAL) {
            sp->min_score = f->score[i] < sp->min_score ? f->score[i] : sp->min_score;
            sp->max_score = f->score[i] > sp->max_score ? f->score[i] : sp->max_score;
        }
    if (!rc)
        rc = check_pieces(t, f);
    /* word by word needs no piece with a space after another character
     * (a merge joining two words) and no UNUSED piece (whose split back
     * depends on every merge of the text) */
    sp->by_words = !rc && !sp->n_unused && tk_no_joined_words(model, f->n, sp->space, sp->space_n);
    if (!rc)
        rc = tk_trie_build(&sp->pieces, model, f->n, t->path, "pieces");
    if (!rc)
        rc = tk_trie_build(&sp->user, user, f->n, t->path, "pieces");
    free(model), free(user);
    return rc;
}

int tk_load_spm(hs_tokenizer *t, const char *file)
{
    /* the file itself names every message (t->path may be its directory) */
    char *path = strdup(file), *where = malloc(strlen(file) + 32);
    if (!path || !where) {
        free(path), free(where);
        return hs_fail(HS_ENOMEM, "%s", file);
    }
    free(t->path), free(t->where_model);
    t->path = path, t->where_model = where;
    char *buf;
    size_t n;
    int rc = hs_read_file(&buf, &n, file, (size_t)1 << 30, 0);
    if (rc)
        return rc;
    sp_file f = { .model_type = 1, .dummy_prefix = 1, .extra_ws = 1, .escape_ws = 1 };
    pb_in b = { (const unsigned char *)buf, (const unsigned char *)buf + n,
                (const unsigned char *)buf, file };
    if (!(t->sp = calloc(1, sizeof *t->sp)))
        rc = hs_fail(HS_ENOMEM, "%s", file);
    if (!rc)
        rc = read_proto(&b, &f);
    if (!rc && !f.n)
        rc = hs_fail(HS_EFORMAT, "%s: no pieces (not a SentencePiece model file?)", file);
    if (!rc)
        rc = check_spec(t, &f);
    if (!rc) {
        t->byte_fallback = f.byte_fallback != 0;
        t->sp->bpe = f.model_type == 2;
        t->sp->dummy_prefix = f.dummy_prefix != 0;
        t->sp->extra_ws = f.extra_ws != 0;
        t->sp->escape_ws = f.escape_ws != 0;
        t->sp->space = t->sp->escape_ws ? TK_SPACE : " ";
        t->sp->space_n = strlen(t->sp->space);
        rc = build(t, &f);
    }
    if (!rc && f.charsmap.p < f.charsmap.end)
        rc = tk_charsmap_read(file, "normalizer_spec.precompiled_charsmap", f.charsmap.p,
                              (size_t)(f.charsmap.end - f.charsmap.p), &t->sp->cm);
    if (!rc) {
        const char *u = f.unk_surface.s ? f.unk_surface.s : " \xe2\x81\x87 ";
        size_t un = f.unk_surface.s ? f.unk_surface.n : strlen(u);
        rc = tkj_dup_str(&t->sp->unk_surface, u, un) ? hs_fail(HS_ENOMEM, "%s", file) : HS_OK;
    }
    if (!rc)
        sprintf(t->where_model, "%s: pieces (%s)", file, t->sp->bpe ? "BPE" : "UNIGRAM");
    free(f.piece), free(f.score), free(f.type);
    free(buf);
    return rc;
}

void tk_sp_free(tk_sp *sp)
{
    if (!sp)
        return;
    free(sp->type), free(sp->score), free(sp->unk_surface.s);
    tk_trie_free(&sp->pieces), tk_trie_free(&sp->user);
    tk_charsmap_free(&sp->cm);
    free(sp);
}

