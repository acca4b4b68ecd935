/* The components of a tokenizer.json around its model, read into the
 * tokenizer's flat step lists: normalizers, pre-tokenizers, decoders (a
 * Sequence is its children in order) and post-processors. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_json.h"

/* "FILE: PATH (TYPE)" or "FILE: PATH (TYPE "PATTERN")": the step as its
 * errors name it (malloc'd; NULL with the message set) */
static char *step_where(const tkj_ctx *c, const char *type, const char *pat)
{
    char buf[512];
    snprintf(buf, sizeof buf, pat ? "%s: %s (%s \"%.200s\")" : "%s: %s (%s)", c->file, c->path,
             type, pat ? pat : "");
    char *w = strdup(buf);
    if (!w)
        hs_fail(HS_ENOMEM, "tokenizer: %s", c->file);
    return w;
}

/* one character of UTF-8, as HF's char fields (Metaspace's replacement,
 * Strip's content): anything else is refused, naming the key */
static int get_char(tkj_ctx *c, const cJSON *o, const char *key, const char *def, tk_str *out)
{
    const char *s;
    int rc = tkj_get_string(c, o, key, def, &s);
    if (rc)
        return rc;
    uint32_t cp;
    size_t n = strlen(s);
    if (!n || (size_t)tk_utf8_next(s, n, &cp) != n) {
        size_t at = tkj_push(c, ".%s", key);
        rc = tkj_bad(c, "one character expected (HF reads a char)");
        c->path[at] = 0;
        return rc;
    }
    return tkj_dup_str(out, s, n);
}

/* The "pattern" child: a non-empty String kept as text in *lit (lit not
 * NULL), else compiled into *re (an empty String too: it matches at every
 * offset, as HF's escaped regex of it does); *text is the pattern's text. */
static int get_pattern(tkj_ctx *c, const cJSON *o, tk_re *re, tk_str *lit, const char **text)
{
    size_t at = tkj_push(c, ".%s", "pattern");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    int rc = HS_OK;
    if (cJSON_IsString(s) && lit && s->valuestring[0])
        rc = tkj_dup_str(lit, s->valuestring, strlen(s->valuestring));
    else if (cJSON_IsString(s) || cJSON_IsString(r)) {
        const char *pat = cJSON_IsString(s) ? s->valuestring : r->valuestring;
        char field[300];
        snprintf(field, sizeof field, "%s: %s", c->file, c->path);
        rc = tk_regex(re, pat, strlen(pat), cJSON_IsString(s), field);
    } else
        rc = tkj_bad(c, "{\"String\": ...} or {\"Regex\": ...} expected");
    *text = cJSON_IsString(s) ? s->valuestring : cJSON_IsString(r) ? r->valuestring : "";
    c->path[at] = 0;
    return rc;
}

static int each_child(tkj_ctx *c, const cJSON *o, const char *key, hs_tokenizer *t,
                      int (*fn)(tkj_ctx *, const cJSON *, hs_tokenizer *))
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, key);
    size_t at = tkj_push(c, ".%s", key);
    if (!cJSON_IsArray(arr)) {
        int rc = tkj_bad(c, "an array expected");
        c->path[at] = 0;
        return rc;
    }
    int i = 0, rc = HS_OK;
    for (const cJSON *e = arr->child; e && !rc; e = e->next, i++) {
        size_t at2 = tkj_push(c, "[%d]", i);
        rc = fn(c, e, t);
        c->path[at2] = 0;
    }
    c->path[at] = 0;
    return rc;
}


/* ---- normalizers ---- */

/* standard base64 with its padding (HF's BASE64_STANDARD) into a malloc'd
 * *out: its length; -1 for anything else, -2 out of memory */
static long base64_decode(const char *s, unsigned char **out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t n = strlen(s);
    if (n % 4)
        return -1;
    unsigned char *b = malloc(n / 4 * 3 + 1);
    if (!b)
        return -2;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0; /* '=' only at the end: "xx==" or "xxx=" */
        for (int j = 0; j < 4; j++) {
            const char *at = s[i + j] ? strchr(abc, s[i + j]) : NULL;
            if (s[i + j] == '=' && i + 4 == n && j >= 2 && s[i + 3] == '=')
                pad++, v <<= 6;
            else if (at && !pad)
                v = v << 6 | (uint32_t)(at - abc);
            else {
                free(b);
                return -1;
            }
        }
        b[k++] = (unsigned char)(v >> 16);
        if (pad < 2)
            b[k++] = (unsigned char)(v >> 8);
        if (pad < 1)
            b[k++] = (unsigned char)v;
    }
    *out = b;
    return (long)k;
}

/* Precompiled: its charsmap, base64 */
static int read_precompiled(tkj_ctx *c, const cJSON *o, tk_norm *n)
{
    const char *s;
    int rc = tkj_get_string(c, o, "precompiled_charsmap", NULL, &s);
    if (rc)
        return rc;
    unsigned char *blob = NULL;
    long len = base64_decode(s, &blob);
    size_t at = tkj_push(c, ".%s", "precompiled_charsmap");
    if (len == -2 || (len >= 0 && !(n->cm = calloc(1, sizeof *n->cm))))
        rc = hs_fail(HS_ENOMEM, "%s: %s", c->file, c->path);
    else if (len < 0)
        rc = tkj_bad(c, "standard base64 expected");
    else
        rc = tk_charsmap_read(c->file, c->path, blob, (size_t)len, n->cm);
    c->path[at] = 0;
    free(blob);
    return rc;
}

int tkj_read_normalizer(tkj_ctx *c, const cJSON *o, hs_tokenizer *t)
{
    const char *type = tkj_type_of(o);
    if (type && !strcmp(type, "Sequence"))
        return each_child(c, o, "normalizers", t, tkj_read_normalizer);
    static const char *const simple[] = { "NFC", "NFKC", "NFD", "NFKD", "Lowercase" };
    tk_norm n = { .type = -1 };
    for (int i = 0; i < 5; i++)
        if (type && !strcmp(type, simple[i]))
            n.type = i;
    const char *s = "", *pat = NULL;
    int rc = HS_OK;
    if (n.type >= 0)
        ;
    else if (type && !strcmp(type, "BertNormalizer")) {
        /* HF's flags; strip_accents null (or absent): as lowercase */
        int f[4] = { 1, 1, -1, 1 };
        static const char *const keys[] = { "clean_text", "handle_chinese_chars",
                                            "strip_accents", "lowercase" };
        n.type = TK_BERT;
        for (int i = 0; i < 4 && !rc; i++)
            rc = tkj_get_bool(c, o, keys[i], f[i], &f[i]);
        n.bert = (f[0] ? TK_BERT_CLEAN : 0) | (f[1] ? TK_BERT_CHINESE : 0) |
                 ((f[2] < 0 ? f[3] : f[2]) ? TK_BERT_STRIP : 0) | (f[3] ? TK_BERT_LOWER : 0);
    } else if (type && !strcmp(type, "Prepend")) {
        n.type = TK_PREPEND;
        rc = tkj_get_string(c, o, "prepend", NULL, &s);
        if (!rc)
            rc = tkj_dup_str(&n.a, s, strlen(s));
    } else if (type && !strcmp(type, "Replace")) {
        n.type = TK_REPLACE;
        rc = get_pattern(c, o, &n.re, &n.a, &pat);
        if (!rc && !(rc = tkj_get_string(c, o, "content", NULL, &s)))
            rc = tkj_dup_str(&n.b, s, strlen(s));
    } else if (type && !strcmp(type, "Precompiled")) {
        n.type = TK_PRECOMPILED;
        rc = read_precompiled(c, o, &n);
    } else if (type && !strcmp(type, "Strip")) {
        int left = 1, right = 1;
        n.type = TK_STRIP;
        rc = tkj_get_bool(c, o, "strip_left", 1, &left);
        if (!rc)
            rc = tkj_get_bool(c, o, "strip_right", 1, &right);
        n.bert = (left ? 1 : 0) | (right ? 2 : 0);
    } else
        return tkj_unsupported_type(c, type, "NFC, NFKC, NFD, NFKD, Lowercase, Prepend, Replace, "
                                    "Precompiled, Strip, BertNormalizer, Sequence");
    if (!rc && !(n.where = step_where(c, type, pat)))
        rc = HS_ENOMEM;
    tk_norm *g = tkj_grow(t->norm, t->n_norm, sizeof *g);
    if (!g) {
        free(n.a.s), free(n.b.s), free(n.where), tk_regex_free(&n.re);
        if (n.cm)
            tk_charsmap_free(n.cm), free(n.cm);
        return hs_fail(HS_ENOMEM, "tokenizer: normalizers");
    }
    t->norm = g;
    t->norm[t->n_norm++] = n; /* owned from here, freed with t even on an error */
    return rc;
}

/* ---- pre-tokenizers ---- */

static int read_metaspace_scheme(tkj_ctx *c, const cJSON *o, int *prepend)
{
    const char *scheme = "";
    int aps = 1;
    int rc = tkj_get_string(c, o, "prepend_scheme", "", &scheme);
    if (!rc)
        rc = tkj_get_bool(c, o, "add_prefix_space", 1, &aps);
    if (rc)
        return rc;
    if (!*scheme)
        *prepend = aps ? 2 : 0;
    else if (!strcmp(scheme, "always") || !strcmp(scheme, "first") || !strcmp(scheme, "never"))
        *prepend = scheme[0] == 'a' ? 2 : scheme[0] == 'f' ? 1 : 0;
    else {
        size_t at = tkj_push(c, ".%s", "prepend_scheme");
        rc = tkj_bad(c, "always, first or never expected");
        c->path[at] = 0;
    }
    return rc;
}

int tkj_read_pre(tkj_ctx *c, const cJSON *o, hs_tokenizer *t)
{
    const char *type = tkj_type_of(o);
    if (type && !strcmp(type, "Sequence"))
        return each_child(c, o, "pretokenizers", t, tkj_read_pre);
    tk_pre p = { .type = -1 };
    int rc = HS_OK;
    const char *s = "";
    if (t->n_pre && t->pre[t->n_pre - 1].type == TK_BYTELEVEL)
        return tkj_bad(c, "a pre-tokenizer after ByteLevel is not supported");
    if (type && !strcmp(type, "ByteLevel")) {
        int use_regex = 1;
        p.type = TK_BYTELEVEL;
        t->byte_level = 1;
        rc = tkj_get_bool(c, o, "add_prefix_space", 1, &p.add_prefix_space);
        if (!rc)
            rc = tkj_get_bool(c, o, "use_regex", 1, &use_regex);
        if (!rc && use_regex)
            rc = tk_regex(&p.re, TK_GPT2_PATTERN, sizeof TK_GPT2_PATTERN - 1, 0, "GPT-2 pattern");
        if (!rc && !(p.where = step_where(c, use_regex ? "ByteLevel, GPT-2's pattern" : "ByteLevel",
                                          NULL)))
            rc = HS_ENOMEM;
    } else if (type && !strcmp(type, "Split")) {
        static const char *const names[] = { "Isolated", "Removed", "MergedWithPrevious",
                                             "MergedWithNext", "Contiguous" };
        const char *pat = "";
        p.type = TK_SPLIT;
        rc = get_pattern(c, o, &p.re, NULL, &pat);
        if (!rc && !(p.where = step_where(c, "Split", pat)))
            rc = HS_ENOMEM;
        if (!rc)
            rc = tkj_get_bool(c, o, "invert", 0, &p.invert);
        if (!rc && !(rc = tkj_get_string(c, o, "behavior", NULL, &s))) {
            p.behavior = -1;
            for (int i = 0; i < 5; i++)
                if (!strcmp(s, names[i]))
                    p.behavior = i;
            if (p.behavior < 0) {
                size_t at = tkj_push(c, ".%s", "behavior");
                rc = tkj_bad(c, "Isolated, Removed, MergedWithPrevious, MergedWithNext or "
                            "Contiguous expected");
                c->path[at] = 0;
            }
        }
    } else if (type && !strcmp(type, "Metaspace")) {
        p.type = TK_METASPACE;
        rc = get_char(c, o, "replacement", TK_SPACE, &p.repl);
        if (!rc && !(p.where = step_where(c, "Metaspace", NULL)))
            rc = HS_ENOMEM;
        if (!rc)
            rc = read_metaspace_scheme(c, o, &p.prepend);
        if (!rc)
            rc = tkj_get_bool(c, o, "split", 1, &p.split);
    } else if (type && !strcmp(type, "BertPreTokenizer")) {
        p.type = TK_BERTPRE;
        if (!(p.where = step_where(c, "BertPreTokenizer", NULL)))
            rc = HS_ENOMEM;
    } else if (type && !strcmp(type, "WhitespaceSplit")) {
        p.type = TK_WSSPLIT;
        if (!(p.where = step_where(c, "WhitespaceSplit", NULL)))
            rc = HS_ENOMEM;
    } else
        return tkj_unsupported_type(c, type, "ByteLevel, Split, Metaspace, BertPreTokenizer, "
                                    "WhitespaceSplit, Sequence");
    tk_pre *g = tkj_grow(t->pre, t->n_pre, sizeof *g);
    if (!g) {
        tk_regex_free(&p.re), free(p.where), free(p.repl.s);
        return hs_fail(HS_ENOMEM, "tokenizer: pre-tokenizers");
    }
    t->pre = g;
    t->pre[t->n_pre++] = p;
    return rc;
}

/* ---- decoders ---- */

int tkj_read_dec(tkj_ctx *c, const cJSON *o, hs_tokenizer *t)
{
    const char *type = tkj_type_of(o);
    if (type && !strcmp(type, "Sequence"))
        return each_child(c, o, "decoders", t, tkj_read_dec);
    tk_dec d = { .type = -1 };
    int rc = HS_OK;
    const char *s = "";
    if (type && !strcmp(type, "ByteLevel"))
        d.type = TK_D_BYTELEVEL;
    else if (type && !strcmp(type, "ByteFallback"))
        d.type = TK_D_BYTEFALLBACK;
    else if (type && !strcmp(type, "Fuse"))
        d.type = TK_D_FUSE;
    else if (type && !strcmp(type, "Metaspace")) {
        d.type = TK_D_METASPACE;
        rc = get_char(c, o, "replacement", TK_SPACE, &d.a);
        if (!rc)
            rc = read_metaspace_scheme(c, o, &d.start);
    } else if (type && !strcmp(type, "Strip")) {
        d.type = TK_D_STRIP;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "start");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(o, "stop");
        rc = get_char(c, o, "content", NULL, &d.a);
        if (!rc && (!cJSON_IsNumber(st) || !cJSON_IsNumber(sp) || st->valuedouble < 0 ||
                    sp->valuedouble < 0 || st->valuedouble > 1e6 || sp->valuedouble > 1e6))
            rc = tkj_bad(c, "Strip: start and stop counts expected");
        if (!rc)
            d.start = st->valueint, d.stop = sp->valueint;
    } else if (type && !strcmp(type, "Replace")) {
        d.type = TK_D_REPLACE;
        tk_re re = { 0 };
        const char *pat;
        rc = get_pattern(c, o, &re, &d.a, &pat);
        if (re.any) { /* a Regex, or an empty String */
            tk_regex_free(&re);
            rc = tkj_bad(c, "Replace with a Regex or an empty pattern is not supported in a "
                         "decoder");
        }
        if (!rc && !(rc = tkj_get_string(c, o, "content", NULL, &s)))
            rc = tkj_dup_str(&d.b, s, strlen(s));
    } else if (type && !strcmp(type, "WordPiece")) {
        d.type = TK_D_WORDPIECE;
        rc = tkj_get_string(c, o, "prefix", "##", &s);
        if (!rc)
            rc = tkj_dup_str(&d.a, s, strlen(s));
        if (!rc)
            rc = tkj_get_bool(c, o, "cleanup", 1, &d.start);
    } else
        return tkj_unsupported_type(c, type, "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, "
                                         "Replace, WordPiece, Sequence");
    tk_dec *g = tkj_grow(t->dec, t->n_dec, sizeof *g);
    if (!g) {
        free(d.a.s), free(d.b.s);
        return hs_fail(HS_ENOMEM, "tokenizer: decoders");
    }
    t->dec = g;
    t->dec[t->n_dec++] = d;
    return rc;
}

/* ---- post-processors ---- */

static int special_ids(tkj_ctx *c, const cJSON *specials, const char *name, tk_template *tp, int after)
{
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(sp, "ids");
    if (!cJSON_IsArray(ids)) {
        char msg[200];
        snprintf(msg, sizeof msg, "special token \"%.100s\" has no ids in special_tokens", name);
        return tkj_bad(c, msg);
    }
    for (const cJSON *e = ids->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e9)
            return tkj_bad(c, "special_tokens: ids must be non-negative integers");
        int32_t **arr = after ? &tp->post : &tp->pre;
        int *n = after ? &tp->npost : &tp->npre;
        int32_t *g = realloc(*arr, (size_t)(*n + 1) * sizeof *g);
        if (!g)
            return hs_fail(HS_ENOMEM, "tokenizer: template");
        *arr = g;
        g[(*n)++] = (int32_t)e->valuedouble;
    }
    return HS_OK;
}

/* Appends an item to tp's pair template (ids: n special ids, or NULL for a
 * sequence). */
static int pair_add(tk_template *tp, int seq, int type_id, const int32_t *ids, int n)
{
    tk_pair_item *g = realloc(tp->pair, sizeof *g * (size_t)(tp->npair + 1));
    if (!g)
        return hs_fail(HS_ENOMEM, "tokenizer: pair template");
    tp->pair = g;
    tk_pair_item *it = &g[tp->npair];
    *it = (tk_pair_item){ seq, type_id, NULL, n };
    if (n && !(it->ids = malloc(sizeof *ids * (size_t)n)))
        return hs_fail(HS_ENOMEM, "tokenizer: pair template");
    if (n)
        memcpy(it->ids, ids, sizeof *ids * (size_t)n);
    tp->npair++;
    return HS_OK;
}

/* TemplateProcessing's "pair" (absent: none): SpecialToken and Sequence A,
 * B items with their type_ids, A and B once each. */
static int read_pair(tkj_ctx *c, const cJSON *o, const cJSON *specials, tk_template *tp)
{
    const cJSON *pair = cJSON_GetObjectItemCaseSensitive(o, "pair");
    if (!pair || cJSON_IsNull(pair))
        return HS_OK;
    size_t at = tkj_push(c, ".%s", "pair");
    int rc = cJSON_IsArray(pair) ? HS_OK : tkj_bad(c, "an array expected");
    int seen = 0, i = 0;
    for (const cJSON *e = pair->child; e && !rc; e = e->next, i++) {
        size_t at2 = tkj_push(c, "[%d]", i);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(st ? st : sq, "id");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(st ? st : sq, "type_id");
        const int type_id = cJSON_IsNumber(ty) ? (int)ty->valuedouble : 0;
        if (!cJSON_IsString(id) || (ty && (!cJSON_IsNumber(ty) || ty->valuedouble < 0 ||
                                           ty->valuedouble > 255)))
            rc = tkj_bad(c, "{\"SpecialToken\": {\"id\": ..., \"type_id\": n}} or "
                            "{\"Sequence\": {\"id\": \"A\" or \"B\", \"type_id\": n}} expected");
        else if (sq) {
            const int s = !strcmp(id->valuestring, "A") ? 1 : !strcmp(id->valuestring, "B") ? 2 : 0;
            if (!s || (seen & s))
                rc = tkj_bad(c, "a pair holds sequences A and B once each");
            else
                seen |= s, rc = pair_add(tp, s, type_id, NULL, 0);
        } else { /* the special token's ids, read as the single template reads them */
            tk_template one = { 0 };
            rc = special_ids(c, specials, id->valuestring, &one, 0);
            if (!rc)
                rc = pair_add(tp, 0, type_id, one.pre, one.npre);
            free(one.pre);
        }
        c->path[at2] = 0;
    }
    if (!rc && seen != 3)
        rc = tkj_bad(c, "a pair holds sequences A and B once each");
    c->path[at] = 0;
    return rc;
}

/* BertProcessing's cls or sep: ["[CLS]", 101], one id before or after */
static int bert_special(tkj_ctx *c, const cJSON *o, const char *key, tk_template *tp, int after)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    const cJSON *id = cJSON_GetArrayItem(v, 1);
    size_t at = tkj_push(c, ".%s", key);
    int rc = HS_OK;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !cJSON_IsString(v->child) ||
        !cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e9)
        rc = tkj_bad(c, "[\"token\", id] expected");
    else if (!(*(after ? &tp->post : &tp->pre) = malloc(sizeof(int32_t))))
        rc = hs_fail(HS_ENOMEM, "tokenizer: post-processor");
    else {
        (after ? tp->post : tp->pre)[0] = (int32_t)id->valuedouble;
        *(after ? &tp->npost : &tp->npre) = 1;
    }
    c->path[at] = 0;
    return rc;
}

int tkj_read_post(tkj_ctx *c, const cJSON *o, hs_tokenizer *t)
{
    const char *type = tkj_type_of(o);
    if (type && !strcmp(type, "Sequence"))
        return each_child(c, o, "processors", t, tkj_read_post);
    if (type && !strcmp(type, "ByteLevel"))
        return HS_OK; /* offsets only */
    int bert = type && !strcmp(type, "BertProcessing");
    if (!type || (!bert && strcmp(type, "TemplateProcessing")))
        return tkj_unsupported_type(c, type, "TemplateProcessing, BertProcessing, ByteLevel, "
                                    "Sequence");
    tk_template *g = tkj_grow(t->post, t->n_post, sizeof *g);
    if (!g)
        return hs_fail(HS_ENOMEM, "tokenizer: post-processors");
    t->post = g;
    tk_template *tp = &t->post[t->n_post++];
    memset(tp, 0, sizeof *tp);
    if (bert) { /* [CLS] $A [SEP], and the pair [CLS] $A [SEP] $B:1 [SEP]:1 */
        int rc = bert_special(c, o, "cls", tp, 0);
        if (!rc)
            rc = bert_special(c, o, "sep", tp, 1);
        static const int seq[] = { 0, 1, 0, 2, 0 }, type[] = { 0, 0, 0, 1, 1 };
        for (int k = 0; !rc && k < 5; k++) {
            const int32_t id = k ? tp->post[0] : tp->pre[0];
            rc = pair_add(tp, seq[k], type[k], seq[k] ? NULL : &id, seq[k] ? 0 : 1);
        }
        return rc;
    }
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(o, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens");
    size_t at = tkj_push(c, ".%s", "single");
    int rc = cJSON_IsArray(single) ? HS_OK : tkj_bad(c, "an array expected");
    int seen_a = 0, i = 0;
    for (const cJSON *e = single ? single->child : NULL; e && !rc; e = e->next, i++) {
        size_t at2 = tkj_push(c, "[%d]", i);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(st ? st : sq, "id");
        if (!cJSON_IsString(id))
            rc = tkj_bad(c, "{\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": {\"id\": \"A\"}} expected");
        else if (sq && (strcmp(id->valuestring, "A") || seen_a))
            rc = tkj_bad(c, "a single sequence holds sequence A once");
        else if (sq)
            seen_a = 1;
        else
            rc = special_ids(c, specials, id->valuestring, tp, seen_a);
        c->path[at2] = 0;
    }
    if (!rc && !seen_a)
        rc = tkj_bad(c, "no {\"Sequence\": {\"id\": \"A\"}}");
    c->path[at] = 0;
    return rc ? rc : read_pair(c, o, specials, tp);
}

