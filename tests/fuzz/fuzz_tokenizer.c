/* Tokenizer load + encode + decode + token_text (tokenizer/). The first
 * byte chooses the mode and the flags; from 64 to 127 it is the regex mode
 * (below), else:
 *   mode (byte % 4)  0: the input is tokenizer.json, a NUL byte, then the
 *                       text (the file's structure and the text both fuzzed)
 *                    1: a fixed byte-level BPE tokenizer.json (GPT-2 regex,
 *                       a Split, added tokens, TemplateProcessing); the rest
 *                       is the text. With bit 4 of the first byte: a fixed
 *                       WordPiece one as BERT's (BertNormalizer,
 *                       BertPreTokenizer, [CLS] $A [SEP], the WordPiece
 *                       decoder, a 12-character word limit)
 *                    2: a fixed Metaspace + byte_fallback tokenizer.json with
 *                       normalizers (NFKC, Replace, Prepend); the rest is text
 *                    3: GPT-2's files: vocab.json NUL merges.txt NUL text
 *   flags (byte / 4) bit 0 add_special, bit 1 skip_special.
 * An opened tokenizer encodes the text; every id must lie in the vocabulary;
 * the ids are decoded and each one's token_text is read into buffers of
 * several sizes (the result NUL-terminated within cap). The text's bytes,
 * read as ids (outside the vocabulary too), are decoded and shown as well:
 * an unknown id is an error, never a read out of bounds.
 *
 * SentencePiece mode (first byte 128..191): bytes 1 and 2 are a length L
 * (little-endian), then come L bytes of text and, to the end, a .model
 * file (its protobuf fuzzed; bits 0 and 1 of the first byte are the flags).
 *
 * Regex mode (first byte 64..127): the input is a pattern, a NUL, then a
 * text. tk_regex_each, which runs a pattern in windows of the text
 * (1 + bits 2..4 of the first byte bytes, from 1 to 8) and finishes longer
 * attempts alone, must find exactly the matches of PCRE2 run on the whole
 * text (bit 5: the pattern as a literal); a run the budget stops is no
 * finding. Each encode is bounded by its work budget: a slow input is a
 * finding (libFuzzer's -timeout). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tok_internal.h"
#include "tokenizer.h"

/* a byte-level BPE as GPT-2 / Llama-3 files are, kept small */
static const char BYTELEVEL_JSON[] =
    "{\"version\":\"1.0\",\"added_tokens\":["
    "{\"id\":20,\"content\":\"<|bos|>\",\"special\":true,\"normalized\":false},"
    "{\"id\":21,\"content\":\"<|eos|>\",\"special\":true,\"lstrip\":true,\"rstrip\":true},"
    "{\"id\":22,\"content\":\" hello\",\"special\":false,\"single_word\":true,\"normalized\":true}],"
    "\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{N}{1,3}\"},\"behavior\":\"Isolated\","
    "\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
    "{\"SpecialToken\":{\"id\":\"<|bos|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
    "{\"SpecialToken\":{\"id\":\"<|eos|>\",\"type_id\":0}}],"
    "\"special_tokens\":{\"<|bos|>\":{\"id\":\"<|bos|>\",\"ids\":[20],\"tokens\":[\"<|bos|>\"]},"
    "\"<|eos|>\":{\"id\":\"<|eos|>\",\"ids\":[21],\"tokens\":[\"<|eos|>\"]}}},"
    "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
    "\"use_regex\":true},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,"
    "\"byte_fallback\":false,\"ignore_merges\":false,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,"
    "\"\\u0120\":3,\"\\u0120a\":4,\"ab\":5,\"\\u0120ab\":6,\"1\":7,\"2\":8,\"12\":9,\"\\u010a\":10,"
    "\"\\u00c3\":11,\"\\u00a9\":12,\"\\u00c3\\u00a9\":13,\"\\u0120\\u0120\":14,\"\\u00f0\":15,"
    "\"\\u0141\":16,\"\\u013a\":17,\"\\u00a4\":18,\"\\u010d\":19},"
    "\"merges\":[\"\\u0120 a\",\"a b\",\"\\u0120a b\",\"1 2\",\"\\u00c3 \\u00a9\","
    "\"\\u0120 \\u0120\"]}}";

/* a SentencePiece-style BPE as Llama-2 / Mistral files are */
static const char METASPACE_JSON[] =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},"
    "{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
    "{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
    "\"pair\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\","
    "\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":1}},"
    "{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":["
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
    "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
    "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"fuse_unk\":true,"
    "\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x0A>\":3,"
    "\"<0xC3>\":4,\"<0xA9>\":5,\"<0xF0>\":6,\"<0x9F>\":7,\"\\u2581\":8,\"a\":9,\"b\":10,"
    "\"\\u2581a\":11,\"ab\":12,\"\\u2581ab\":13,\"fi\":14,\"f\":15,\"i\":16},"
    "\"merges\":[\"\\u2581 a\",\"a b\",\"\\u2581a b\",\"f i\"]}}";

/* a WordPiece tokenizer as bert-base-uncased's, kept small */
static const char WORDPIECE_JSON[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":["
    "{\"id\":0,\"content\":\"[PAD]\",\"special\":true,\"normalized\":false},"
    "{\"id\":1,\"content\":\"[UNK]\",\"special\":true,\"normalized\":false},"
    "{\"id\":2,\"content\":\"[CLS]\",\"special\":true,\"normalized\":false},"
    "{\"id\":3,\"content\":\"[SEP]\",\"special\":true,\"normalized\":false},"
    "{\"id\":4,\"content\":\"[MASK]\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,"
    "\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true},"
    "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
    "{\"SpecialToken\":{\"id\":\"[CLS]\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
    "{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}}],\"pair\":["
    "{\"SpecialToken\":{\"id\":\"[CLS]\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
    "{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}},"
    "{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":1}}],"
    "\"special_tokens\":{\"[CLS]\":{\"id\":\"[CLS]\",\"ids\":[2],\"tokens\":[\"[CLS]\"]},"
    "\"[SEP]\":{\"id\":\"[SEP]\",\"ids\":[3],\"tokens\":[\"[SEP]\"]}}},"
    "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
    "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
    "\"continuing_subword_prefix\":\"##\","
    "\"max_input_chars_per_word\":12,\"vocab\":{\"[PAD]\":0,\"[UNK]\":1,\"[CLS]\":2,\"[SEP]\":3,"
    "\"[MASK]\":4,\"a\":5,\"b\":6,\"ab\":7,\"##b\":8,\"##a\":9,\"##ab\":10,\"abab\":11,\"##\":12,"
    "\"!\":13,\".\":14,\"'\":15,\"s\":16,\"##s\":17,\"\\u4e2d\":18,\"e\":19,\"##e\":20,"
    "\"\\u00e9\":21,\"1\":22,\"##1\":23,\"##\\u0301\":24,\"i\":25,\"##\\u0307\":26}}}";

static hs_tokenizer *fixed[3];

static hs_tokenizer *open_fixed(int k)
{
    static const char *const names[] = { "bytelevel.json", "metaspace.json", "wordpiece.json" };
    if (!fixed[k]) {
        const char *json = k == 2 ? WORDPIECE_JSON : k ? METASPACE_JSON : BYTELEVEL_JSON;
        const char *path = hs_fuzz_write(names[k], (const uint8_t *)json, strlen(json));
        if (hs_tokenizer_open(&fixed[k], path) != HS_OK)
            abort(); /* the fixed files are valid */
    }
    return fixed[k];
}

/* the part of [*p, end) before the next NUL (all of it when none); *p after it */
static size_t cut(const uint8_t **p, const uint8_t *end)
{
    const uint8_t *z = memchr(*p, 0, (size_t)(end - *p));
    size_t n = (size_t)((z ? z : end) - *p);
    *p = z ? z + 1 : end;
    return n;
}

static void show(const hs_tokenizer *t, int32_t id)
{
    static const size_t caps[] = { 1, 3, 64 };
    char buf[64];
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
        memset(buf, 'x', sizeof buf);
        if (hs_tokenizer_token_text(t, id, buf, caps[k]) == HS_OK &&
            !memchr(buf, 0, caps[k]))
            abort(); /* not terminated within cap */
    }
}

static void exercise(const hs_tokenizer *t, const uint8_t *text, size_t n, int flags)
{
    int vocab = hs_tokenizer_vocab_size(t);
    if (vocab <= 0)
        abort();
    int32_t *ids = NULL;
    size_t nid = 0;
    if (hs_tokenizer_encode(t, (const char *)text, n, flags & 1, &ids, &nid) == HS_OK) {
        if (!ids)
            abort();
        for (size_t i = 0; i < nid; i++) {
            if (ids[i] < 0 || ids[i] >= vocab)
                abort(); /* an id outside the vocabulary */
            if (i < 64)
                show(t, ids[i]);
        }
        free(hs_tokenizer_decode(t, ids, nid, (flags >> 1) & 1));
        free(ids);
    }
    /* the text as a pair cut at its first NUL, truncated to a length of
     * the flags' choosing (0: none); a tokenizer without a pair template
     * refuses */
    const uint8_t *b = text, *end = text + n;
    size_t na = cut(&b, end);
    unsigned char *types = NULL;
    if (hs_tokenizer_encode_pair(t, (const char *)text, na, (const char *)b, (size_t)(end - b),
                                 (size_t)(flags >> 2), &ids, &types, &nid) == HS_OK) {
        for (size_t i = 0; i < nid; i++)
            if (ids[i] < 0 || ids[i] >= vocab)
                abort(); /* an id outside the vocabulary */
        if (flags >> 2 && nid > (size_t)(flags >> 2))
            abort(); /* longer than the truncation asked */
        free(ids);
        free(types);
    }
    /* the text's bytes as ids: in and out of the vocabulary */
    int32_t raw[64];
    size_t nraw = n / 2 < 64 ? n / 2 : 64;
    for (size_t i = 0; i < nraw; i++) {
        int v = (int)text[2 * i] | (int)text[2 * i + 1] << 8;
        raw[i] = (int32_t)(v % (vocab + 2)) - 1; /* -1 .. vocab */
        show(t, raw[i]);
    }
    free(hs_tokenizer_decode(t, raw, nraw, (flags >> 1) & 1));
}

/* the matches of a pattern as "ms-me ..." into out (cap bytes): whole,
 * PCRE2 on all the text, an empty match moving on by a character; -1
 * when PCRE2 gives up (its default limits) */
static int whole_text(const char *pat, size_t pn, int literal, const char *s, size_t n, char *out,
                      size_t cap)
{
    int err;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, pn,
                                   PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &err, &at,
                                   NULL);
    if (!re)
        return -1;
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_set_match_limit(mc, 100000);
    size_t k = 0, start = 0;
    int rc = 0;
    out[0] = 0;
    while (start <= n && k < cap - 48) {
        int m = pcre2_match(re, (PCRE2_SPTR)s, n, start, 0, md, mc);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            rc = -1;
            break;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        k += (size_t)snprintf(out + k, cap - k, "%zu-%zu ", (size_t)ov[0], (size_t)ov[1]);
        if (ov[1] > ov[0])
            start = ov[1];
        else
            for (start = ov[0] + 1; start < n && ((unsigned char)s[start] & 0xc0) == 0x80;)
                start++;
    }
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc;
}

typedef struct {
    char *out;
    size_t k, cap;
} match_list;

static int note(void *p, size_t ms, size_t me)
{
    match_list *l = p;
    if (l->k < l->cap - 48)
        l->k += (size_t)snprintf(l->out + l->k, l->cap - l->k, "%zu-%zu ", ms, me);
    return HS_OK;
}

static void regex_mode(const uint8_t *data, size_t size)
{
    static char want[1 << 16], got[1 << 16];
    const uint8_t *p = data + 1, *end = data + size;
    const char *pat = (const char *)p;
    size_t pn = cut(&p, end), n = (size_t)(end - p);
    const char *text = (const char *)p;
    const int literal = (data[0] >> 5) & 1;
    if (!hs_utf8_valid(pat, pn) || !hs_utf8_valid(text, n))
        return; /* the tokenizer reads only UTF-8 */
    tk_re re;
    if (tk_regex(&re, pat, pn, literal, "fuzz"))
        return;
    tk_scratch *sc = tk_scratch_new(NULL);
    if (!sc)
        abort();
    sc->window = 1 + (size_t)((data[0] >> 2) & 7);
    tk_scratch_start(sc, n);
    match_list l = { got, 0, sizeof got };
    got[0] = 0;
    int rc = tk_regex_each(&re, "fuzz", sc, text, n, note, &l);
    if (!rc && l.k < sizeof got - 48 && !whole_text(pat, pn, literal, text, n, want, sizeof want) &&
        strlen(want) < sizeof want - 48 && strcmp(got, want)) {
        fprintf(stderr, "windowed %s\nwhole    %s\n", got, want);
        abort(); /* the windows changed a match */
    }
    tk_scratch_free(sc);
    tk_regex_free(&re);
}

static void spm_mode(const uint8_t *data, size_t size)
{
    if (size < 3)
        return;
    size_t n = (size_t)data[1] | (size_t)data[2] << 8;
    if (n > size - 3)
        n = size - 3;
    const uint8_t *text = data + 3, *model = text + n;
    hs_tokenizer *t = NULL;
    if (hs_tokenizer_open(&t, hs_fuzz_write("fuzz.model", model,
                                            (size_t)(data + size - model))) != HS_OK)
        return;
    exercise(t, text, n, data[0] & 3);
    hs_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if ((data[0] & 0xc0) == 0x40) {
        regex_mode(data, size);
        return 0;
    }
    if ((data[0] & 0xc0) == 0x80) {
        spm_mode(data, size);
        return 0;
    }
    int mode = data[0] % 4, flags = data[0] / 4;
    const uint8_t *p = data + 1, *end = data + size;
    hs_tokenizer *t = NULL;
    if (mode == 1 || mode == 2) {
        exercise(open_fixed(mode == 1 && (data[0] & 0x10) ? 2 : mode - 1), p, (size_t)(end - p),
                 flags);
        return 0;
    }
    if (mode == 0) {
        const uint8_t *json = p;
        size_t n = cut(&p, end);
        if (hs_tokenizer_open(&t, hs_fuzz_write("tokenizer.json", json, n)) != HS_OK)
            return 0;
    } else {
        const uint8_t *vocab = p;
        size_t nv = cut(&p, end);
        const uint8_t *merges = p;
        size_t nm = cut(&p, end);
        hs_fuzz_write("merges.txt", merges, nm);
        if (hs_tokenizer_open(&t, hs_fuzz_write("vocab.json", vocab, nv)) != HS_OK)
            return 0;
    }
    exercise(t, p, (size_t)(end - p), flags);
    hs_tokenizer_free(t);
    return 0;
}
