/* The tokenizer's parts, shared by the files of tokenizer/ only (not
 * installed as an interface): the tables a loaded tokenizer holds, the
 * normalizer / pre-tokenizer / decoder steps (flattened: a Sequence of
 * steps is its steps in order) and the helpers between the files.
 *
 * Everything here is built once by hs_tokenizer_open and only read after,
 * so one handle may encode from several threads; per-call state (the regex
 * match data, the BPE scratch, the pre-token cache) lives in tk_scratch. */
#ifndef HS_TOK_INTERNAL_H
#define HS_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"
#include "utf8.h"

typedef struct {
    char *s;
    size_t n;
} tk_str;

/* U+2581 LOWER ONE EIGHTH BLOCK in UTF-8: SentencePiece's escaped space
 * (Metaspace's default replacement) */
#define TK_SPACE "\xe2\x96\x81"

/* string -> id, open addressing over ids; keys[id] is the key of id */
typedef struct {
    int32_t *slot; /* cap, -1 empty */
    size_t cap;    /* power of two */
    const tk_str *keys;
} tk_strmap;

/* (left id, right id) -> rank and merged id */
typedef struct {
    uint64_t key; /* left << 32 | right; UINT64_MAX empty */
    int32_t rank, id;
} tk_merge;

typedef struct {
    tk_merge *slot;
    size_t cap;
} tk_mergemap;

/* A pattern of the file, compiled twice: unanchored, to find the next match
 * in a short window of the text, and anchored with a callout before every
 * item, to finish one match attempt that needs more, counting its work
 * (tk_regex_each). */
typedef struct {
    pcre2_code *any;
    pcre2_code *at;
} tk_re;

enum { TK_NFC, TK_NFKC, TK_NFD, TK_NFKD, TK_LOWERCASE, TK_PREPEND, TK_REPLACE, TK_BERT,
       TK_PRECOMPILED, TK_STRIP };
/* BertNormalizer's steps (tk_norm.bert), in the order they run */
enum { TK_BERT_CLEAN = 1, TK_BERT_CHINESE = 2, TK_BERT_STRIP = 4, TK_BERT_LOWER = 8 };
typedef struct {
    int type;
    tk_str a;        /* Prepend's text; Replace's string pattern */
    tk_str b;        /* Replace's content */
    tk_re re;        /* Replace with a Regex pattern (any NULL: a string) */
    int bert;        /* BertNormalizer: TK_BERT_* bits; Strip: 1 left, 2 right */
    struct tk_charsmap *cm; /* Precompiled's charsmap */
    char *where;     /* "FILE: normalizer.normalizers[2] (Replace \"...\")", for errors */
} tk_norm;

enum { TK_SPLIT, TK_BYTELEVEL, TK_METASPACE, TK_BERTPRE, TK_WSSPLIT };
enum { TK_ISOLATED, TK_REMOVED, TK_MERGED_PREV, TK_MERGED_NEXT, TK_CONTIGUOUS };
typedef struct {
    int type;
    tk_re re;             /* Split's pattern; ByteLevel's GPT-2 regex (any NULL: use_regex false) */
    char *where;          /* "FILE: pre_tokenizer.pretokenizers[0] (Split \"...\")", for errors */
    int behavior, invert; /* Split */
    int add_prefix_space; /* ByteLevel */
    tk_str repl;          /* Metaspace's replacement: one character (UTF-8) */
    int prepend;          /* Metaspace: 0 never, 1 first, 2 always */
    int split;            /* Metaspace: split on the replacement */
} tk_pre;

enum { TK_D_BYTELEVEL, TK_D_METASPACE, TK_D_BYTEFALLBACK, TK_D_FUSE, TK_D_STRIP, TK_D_REPLACE,
       TK_D_WORDPIECE };
typedef struct {
    int type;
    tk_str a, b;       /* Replace: pattern, content; Metaspace: a = replacement; WordPiece: a = prefix */
    int start, stop;   /* Strip: counts of `a`'s first character; Metaspace: start = strip first
                          space; WordPiece: start = cleanup */
} tk_dec;

typedef struct {
    int32_t id;
    tk_str content;
    tk_str match;   /* what is looked for: the content, normalized when normalized is set */
    int special, lstrip, rstrip, single_word;
    int normalized; /* matched in the normalized text (HF's second pass) */
} tk_added;

/* The added tokens of one pass in an Aho-Corasick automaton over their
 * reversed strings (tokenizer/added.c): one right-to-left scan of a text
 * gives, at every offset, the longest added token starting there, from
 * which the leftmost-longest matches follow left to right, as HF's
 * AhoCorasick with MatchKind::LeftmostLongest finds them. */
typedef struct {
    uint64_t *key;     /* cap: node << 8 | byte + 1 (0 empty) */
    int32_t *child;    /* cap: the node it leads to */
    size_t cap;        /* power of two */
    int32_t root_next[256]; /* the root's children (-1 none): most bytes stop here */
    int32_t *fail;     /* nodes: the longest proper suffix that is a node */
    int32_t *best;     /* nodes: the added token (its index) that is the longest suffix, -1 none */
    int32_t n_nodes;
} tk_ac;

/* A byte trie over strings (tokenizer/trie.c): id[node] is the string
 * that ends at node (the last one given, -1 none); node 0 is the root. */
typedef struct {
    uint32_t key;  /* node << 8 | byte, + 1 (0: empty) */
    int32_t child; /* the node it leads to */
} tk_edge;

typedef struct {
    tk_edge *edge; /* cap: one cache line a probe */
    size_t cap;    /* power of two, at least twice the edges */
    int32_t *id;   /* n_nodes */
    int32_t n_nodes;
    int32_t root[256]; /* the root's children (-1 none): every walk's first step */
} tk_trie;

/* The precompiled_charsmap of a SentencePiece normalizer (tokenizer/spm.c):
 * a darts-clone double array over UTF-8 byte strings whose leaves' values
 * are offsets into NUL-terminated UTF-8 replacement strings. */
typedef struct tk_charsmap {
    uint32_t *unit; /* n_units, in the host's order */
    size_t n_units; /* 0: none */
    char *str;      /* n_str bytes, the last a NUL */
    size_t n_str;
} tk_charsmap;

/* the types of a SentencePiece model's pieces, as its protobuf numbers them */
enum { TK_SP_NORMAL = 1, TK_SP_UNKNOWN, TK_SP_CONTROL, TK_SP_USER, TK_SP_UNUSED, TK_SP_BYTE };

/* A SentencePiece .model file (tokenizer/spm.c): it encodes and decodes on
 * its own, by sentencepiece's rules (no added tokens, pre-tokenizer or
 * post-processor). */
typedef struct {
    int bpe;                 /* trainer_spec.model_type BPE; else UNIGRAM */
    int dummy_prefix, extra_ws, escape_ws; /* normalizer_spec's three switches */
    const char *space;       /* a space in the normalized text: TK_SPACE, or " " without
                                escape_whitespaces */
    size_t space_n;
    unsigned char *type;     /* n_ids: TK_SP_* */
    double *score;           /* n_ids: the file's floats */
    float min_score, max_score; /* over the NORMAL pieces (sentencepiece's, max from FLT_MIN) */
    tk_trie pieces;          /* the NORMAL, USER_DEFINED and UNUSED pieces */
    tk_trie user;            /* the USER_DEFINED pieces */
    int n_user, n_unused;
    int by_words;            /* BPE may run word by word: no piece holds a space after
                                another character, and none is UNUSED (spm_encode.c) */
    tk_charsmap cm;
    tk_str unk_surface;      /* what the unknown piece decodes to */
} tk_sp;

/* tokenizer.json's Unigram model (tokenizer/unigram.c): its pieces' trie
 * and scores (the vocabulary itself is t->raw and t->vocab) */
typedef struct {
    tk_trie trie;
    double *score;    /* n_ids */
    double min_score; /* over every piece, as HF's */
} tk_uni;

/* The WordPiece model (tokenizer/wordpiece.c): its vocabulary as a trie */
typedef struct tk_wp tk_wp;

/* One item of a pair template: special ids, or sequence A or B; its token
 * type. */
typedef struct {
    int seq; /* 0: the special ids below, 1: sequence A, 2: sequence B */
    int type_id;
    int32_t *ids;
    int nids;
} tk_pair_item;

/* The post-processor of one sequence: ids before and after it; and of a
 * pair (TemplateProcessing's "pair", BertProcessing's [CLS] A [SEP] B
 * [SEP]): its items in order (npair 0: none). */
typedef struct {
    int32_t *pre, *post;
    int npre, npost;
    tk_pair_item *pair;
    int npair;
} tk_template;

struct hs_tokenizer {
    char *path;
    char *where_model, *where_added; /* "PATH: model (BPE)", "PATH: added_tokens": for errors */
    int n_ids;          /* 1 + largest id */
    tk_str *tok;        /* n_ids: the vocabulary's strings (added tokens' content); s NULL: a hole */
    tk_str *raw;        /* n_ids: the model vocabulary's strings as BPE sees them (byte-level:
                           ByteLevel's alphabet undone, the bytes); s NULL: not in the model */
    tk_strmap vocab;    /* model vocabulary over raw */
    tk_mergemap merges;
    tk_wp *wp;          /* the WordPiece model; NULL: BPE */
    tk_uni *uni;        /* the Unigram model; NULL: BPE or WordPiece */
    tk_sp *sp;          /* a SentencePiece model file; NULL: the fields above and below */
    int byte_level;     /* a ByteLevel pre-tokenizer: BPE runs on bytes */
    int16_t cp_byte[512];  /* ByteLevel's code point -> byte (-1 outside the alphabet) */
    int32_t byte_id[256];  /* byte-level: the id of each byte; byte_fallback: <0xAB> ids (-1 none) */
    int byte_fallback, fuse_unk, ignore_merges;
    int bpe_words;      /* BPE without a pre-tokenizer merges by U+2581 words (tk_bpe_words) */
    int32_t unk;        /* -1 none */
    unsigned char *is_special; /* n_ids: 1 for special added tokens, 2 for other added tokens */
    tk_added *added;
    int n_added;
    tk_ac ac[2];        /* [pass]: 0 the tokens matched in the text, 1 in the normalized text */
    tk_norm *norm;
    int n_norm;
    tk_pre *pre;
    int n_pre;
    tk_dec *dec;
    int n_dec;
    tk_template *post;
    int n_post;
    struct tk_marian *marian; /* Marian's (tokenizer/marian.c): the pieces of a SentencePiece
                                 model given the ids of the vocabulary above; NULL: none */
};

/* ---- hash maps (tokenizer/maps.c) ---- */
uint64_t tk_hash(const char *s, size_t n);
int tk_strmap_build(tk_strmap *m, const tk_str *keys, int n);
int32_t tk_strmap_get(const tk_strmap *m, const char *s, size_t n);
void tk_strmap_free(tk_strmap *m);
int tk_mergemap_init(tk_mergemap *m, size_t n);
/* 0 added, 1 already present (the first rank stays) */
int tk_mergemap_put(tk_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
const tk_merge *tk_mergemap_get(const tk_mergemap *m, int32_t a, int32_t b);
void tk_mergemap_free(tk_mergemap *m);

/* ---- growable buffers ---- */
typedef struct {
    char *p;
    size_t n, cap;
} tk_buf;
int tk_buf_add(tk_buf *b, const void *s, size_t n);
typedef struct {
    int32_t *p;
    size_t n, cap;
} tk_ids;
int tk_ids_add(tk_ids *v, const int32_t *s, size_t n);

/* ---- byte-level alphabet (tokenizer/bytelevel.c) ---- */
/* GPT-2's byte -> code point, and back (-1 for a code point outside it) */
uint32_t tk_byte_to_cp(unsigned char b);
int tk_cp_to_byte(uint32_t cp);
/* The UTF-8 of the code point at s (n bytes left): *cp, returns its length
 * (0 invalid); base/utf8.h's one checker over the tokenizer's char text */
static inline int tk_utf8_next(const char *s, size_t n, uint32_t *cp)
{
    return hs_utf8_decode((const unsigned char *)s, n, cp);
}
int tk_utf8_put(tk_buf *b, uint32_t cp);
/* White_Space, as Rust's char::is_whitespace (HF's whitespace everywhere) */
int tk_is_space(uint32_t cp);
/* Replaces every ill-formed subsequence by U+FFFD, as WHATWG's decoder and
 * Rust's from_utf8_lossy do */
int tk_utf8_lossy(tk_buf *out, const char *s, size_t n);

/* ---- the file formats (tokenizer/hf_json.c, hf_steps.c; tk_regex in tokenizer/regex.c) ---- */
int tk_load_json(hs_tokenizer *t, const char *file);
int tk_load_gpt2(hs_tokenizer *t, const char *vocab_file, const char *merges_file);
/* A vocab.json ({piece: id}) as t's vocabulary alone (tok, raw, the map,
 * is_special zeroed): Marian's. */
int tk_load_vocab_json(hs_tokenizer *t, const char *file);

/* A tokenizer of nothing yet, opened from path (NULL with the message set),
 * and the tables a loaded one derives (tokenizer.c). */
hs_tokenizer *tk_new(const char *path);
int tk_finish(hs_tokenizer *t);

/* ---- Marian (tokenizer/marian.c) ---- */
typedef struct tk_marian tk_marian;
/* dir's source.spm and vocab.json into t, its target.spm (and
 * target_vocab.json where there is one) into t's target side */
int tk_load_marian(hs_tokenizer *t, const char *dir);
void tk_marian_free(tk_marian *m);
int tk_marian_encode(const hs_tokenizer *t, const char *text, size_t len, int add_special,
                     tk_ids *out);
/* display: ids[0] alone as token text shows it */
int tk_marian_decode(const hs_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                     int display, tk_buf *out);
/* Compiles a pattern into *re (PCRE2, UTF + UCP; literal when is_literal):
 * the unanchored code JIT-compiled when possible (complete and hard partial
 * matching), the counted one interpreted (its attempts are few). HS_EFORMAT
 * naming field and the offset of a syntax error. tk_regex_free frees both. */
int tk_regex(tk_re *re, const char *pat, size_t n, int is_literal, const char *field);
void tk_regex_free(tk_re *re);
/* GPT-2's split pattern (HF ByteLevel's use_regex) */
#define TK_GPT2_PATTERN                                                                     \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* ---- normalizers and pre-tokenizers (tokenizer/pretok.c) ---- */
typedef struct {
    const char *p; /* into the text or an arena block */
    size_t n;
    int first;     /* starts at the text's offset 0 (Metaspace's prepend_scheme first) */
} tk_piece;

typedef struct {
    tk_piece *p;
    size_t n, cap;
} tk_pieces;

/* BPE's working state: a linked list of symbols and a heap of candidate
 * merges ordered by (rank, position), as HF's merge_word */
typedef struct {
    int32_t id, prev, next;
    int32_t gone; /* merged into its left neighbour; 2: a fused unknown */
} tk_sym;

typedef struct {
    int32_t rank, pos, id;
} tk_cand;

/* a cached pre-token: its bytes in keys, its ids in ids */
typedef struct {
    uint64_t hash;
    uint32_t key_off, ids_off;
    uint32_t key_n, ids_n; /* key_n == UINT32_MAX: empty */
} tk_cached;

/* an added token found in a text: at offset pos, t->added[k] */
typedef struct {
    size_t pos;
    int32_t k;
} tk_found;

/* per-call state: one encode's scratch, so that a handle is shared freely */
typedef struct tk_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mc; /* the limits of one match attempt (tk_regex_each) */
    size_t window;           /* tk_regex_each's first window in bytes (TK_WINDOW; tests: less) */
    uint64_t budget, spent;  /* units of work (TK_WORK_PER_BYTE) */
    uint64_t slow_ns;        /* CPU time of the counted match attempts (TK_NS_PER_UNIT) */
    uint64_t co_t0, co_calls; /* the counted attempt under way: its start, its callouts */
    size_t co_pos;           /* the subject position at its last callout */
    int co_slow;             /* it was stopped for its CPU time */
    size_t text_n;           /* the bytes of the text, for the messages */
    size_t norm_room;        /* normalized bytes the call may still make (TK_NORM_GROWTH) */
    tk_buf norm[2];
    char **blocks; /* text written by pre-tokenizers, freed per segment */
    size_t nblocks;
    tk_pieces pieces[2];
    tk_found *found;         /* added tokens found in one stretch (tokenizer/added.c) */
    size_t found_n, found_cap;
    tk_sym *sym;
    size_t sym_cap;
    tk_cand *heap;
    size_t heap_cap;
    tk_cached *cache;
    size_t cache_cap, cache_n;
    tk_buf cache_keys;
    tk_ids cache_ids;
    /* Unigram's Viterbi nodes and segments (tokenizer/unigram.c); a
     * SentencePiece BPE's symbols, candidate merges, UNUSED pieces' splits */
    void *uni_nodes, *uni_segs, *sp_syms, *sp_heap, *sp_rev;
    size_t uni_nodes_cap, uni_segs_cap, sp_syms_cap, sp_heap_cap, sp_rev_cap;
} tk_scratch;

/* The work of one encode is bounded by a budget proportional to its text:
 * TK_WORK_PER_BYTE units for each byte of the text (and of what the
 * normalizers add to it), plus TK_WORK_BASE for a short text. A unit is one
 * byte a step reads or one step of PCRE2's match limit: about 1 to 25 ns,
 * so that no file can make a megabyte of text cost more than about a
 * second before it is refused, while the real tokenizers spend 4 to 10
 * units a byte (bench/tokenizer.sh). A tokenizer file is partly a program
 * (its patterns, its chain of steps): this is the bound on its running
 * time that a per-match limit alone is not, since a pattern may cost
 * little per match and still be quadratic in the text ("a(?=a*!)|a"). */
#define TK_WORK_PER_BYTE 32
#define TK_WORK_BASE (1u << 16)

/* Charges units of work to the call's budget: HS_OK, or HS_EINVAL naming
 * who (the step: "FILE: pre_tokenizer.pretokenizers[0] (Split ...)") once
 * the budget is spent. Inline: it is called for every match and piece. */
int tk_spent(const tk_scratch *s, const char *who);
static inline int tk_charge(tk_scratch *s, uint64_t units, const char *who)
{
    s->spent += units;
    return s->spent <= s->budget ? HS_OK : tk_spent(s, who);
}

/* The normalized text of a call may be at most TK_NORM_GROWTH times the
 * text plus TK_NORM_SLACK bytes: NFKC's largest expansion is 11 times in
 * UTF-8 (U+FDFA), Llama-2's space -> U+2581 three times; 16 holds NFKC then
 * such a Replace on any text, and stops a chain that doubles the text
 * ("a" -> "aa" forty times) before it fills the memory. */
#define TK_NORM_GROWTH 16
#define TK_NORM_SLACK 1024

tk_scratch *tk_scratch_new(const hs_tokenizer *t);
/* the budget and the normalized room of a call on a text of n bytes */
void tk_scratch_start(tk_scratch *s, size_t n);
void tk_scratch_free(tk_scratch *s);

/* normalizes seg into *out (owned by the scratch, valid until the next call) */
int tk_normalize(const hs_tokenizer *t, tk_scratch *s, const char *seg, size_t n,
                 const char **out, size_t *out_n);
/* the pre-tokens of a normalized segment (valid until the next call) */
int tk_pretokenize(const hs_tokenizer *t, tk_scratch *s, const char *seg, size_t n, int first,
                   tk_pieces **out);
/* The per-call cache of pre-tokens' ids (tokenizer/bpe.c): the entry of
 * w[0, n) (hash h = tk_hash(w, n)), empty (key_n UINT32_MAX) when absent,
 * or NULL before the first put; tk_cache_put adds one (up to a bound of
 * entries; HS_ENOMEM). Keys of at most TK_CACHE_MAX_KEY bytes. */
#define TK_CACHE_MAX_KEY 64
tk_cached *tk_cache_find(tk_scratch *s, const char *w, size_t n, uint64_t h);
int tk_cache_put(tk_scratch *s, const char *w, size_t n, uint64_t h, const int32_t *ids,
                 size_t nids);
/* The end of the word at x[a, n): before the next space (space[0, sn))
 * that follows another character. */
size_t tk_word_end(const char *x, size_t a, size_t n, const char *space, size_t sn);
/* tk_bpe of each U+2581 word of a pre-token in turn (t->bpe_words: no merge
 * can join two words, so the merges of the whole are the words') */
int tk_bpe_words(const hs_tokenizer *t, tk_scratch *s, const char *w, size_t n, tk_ids *out);
/* 1 when no string of strs[0, n) (NULL ones skipped) holds space[0, sn)
 * after another character: no merge or piece joins two words */
int tk_no_joined_words(const tk_str *strs, int n, const char *space, size_t sn);
/* appends the BPE ids of one pre-token */
int tk_bpe(const hs_tokenizer *t, tk_scratch *s, const char *w, size_t n, tk_ids *out);
/* a pre-token piece (tokenizer/pretok.c; nothing for an empty one) */
int tk_piece_add(tk_pieces *v, const char *p, size_t n, int first);
/* HF's Lowercase: each character's full lowercase mapping (U+0130 is two) */
int tk_lowercase(tk_buf *out, const char *s, size_t n);

/* ---- tries (tokenizer/trie.c) ---- */
/* The trie of keys[0, n) (a key with s NULL left out), id i for keys[i].
 * HS_ENOMEM; HS_EFORMAT naming file and field past 2^24 bytes of keys. */
int tk_trie_build(tk_trie *tr, const tk_str *keys, int n, const char *file, const char *field);
static inline size_t tk_trie_slot(const tk_trie *tr, uint32_t key)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (tr->cap - 1);
}
/* the node of s[0, n) from the root, or -1 */
int32_t tk_trie_find(const tk_trie *tr, const char *s, size_t n);
/* the child of node by byte b, or -1 (inline: a walk calls it every byte) */
static inline int32_t tk_trie_child(const tk_trie *tr, int32_t node, unsigned char b)
{
    uint32_t key = ((uint32_t)node << 8 | b) + 1;
    for (size_t i = tk_trie_slot(tr, key);; i = (i + 1) & (tr->cap - 1)) {
        if (tr->edge[i].key == key)
            return tr->edge[i].child;
        if (!tr->edge[i].key)
            return -1;
    }
}
void tk_trie_free(tk_trie *tr);

/* ---- Unigram (tokenizer/unigram.c) ---- */
/* one piece of a segmentation: text[start, end) is id */
typedef struct {
    uint32_t start, end;
    int32_t id;
} tk_seg;

/* what the Viterbi pass needs of a model */
typedef struct {
    const tk_trie *trie;       /* the pieces it may use */
    const double *score;       /* n_ids */
    const unsigned char *type; /* n_ids, TK_SP_*; NULL: every piece NORMAL (HF) */
    float max_score;           /* sentencepiece: a user-defined piece scores length * it - 0.1 */
    double unk_score;          /* an uncovered character's */
    int32_t unk;               /* its id; -1: none (HF's unk_id null: an error) */
    int round_float;           /* sentencepiece: each path's score kept as a float */
    const char *where;         /* the model, for messages */
} tk_lattice;

/* The segmentation of x[0, n) of maximal total score into s->uni_segs
 * (*nseg segments, in order). HS_EINVAL naming m->where when the work
 * budget is spent or a character needs the unknown id there is none of. */
int tk_viterbi(const tk_lattice *m, tk_scratch *s, const char *x, size_t n, size_t *nseg);
/* appends the ids of one pre-token with tokenizer.json's Unigram model */
int tk_unigram(const hs_tokenizer *t, tk_scratch *s, const char *w, size_t n, tk_ids *out);
void tk_uni_free(tk_uni *u);
/* HF's Precompiled normalizer: s[0, n) (UTF-8) with the charsmap's rules
 * applied per grapheme cluster, appended to out */
int tk_precompiled(const tk_charsmap *cm, tk_buf *out, const char *s, size_t n);
/* *p grown to hold need items of size bytes (*cap doubled) */
int tk_scratch_grow(void **p, size_t *cap, size_t need, size_t size);
/* sentencepiece's OneCharLen: the length s's first byte announces, at most n */
size_t tk_one_char(const char *s, size_t n);

/* ---- SentencePiece model files (tokenizer/spm.c) ---- */
/* Reads a .model file into t (t->sp and the vocabulary; t->path becomes
 * file): HS_EIO, HS_EFORMAT naming the file and the protobuf field. */
int tk_load_spm(hs_tokenizer *t, const char *file);
void tk_sp_free(tk_sp *sp);
/* the byte of a byte piece "<0xAB>" (upper-case hex, as sentencepiece
 * writes them), -1 for any other piece */
int tk_sp_piece_byte(const tk_str *p);
/* appends the ids of a whole text, as sentencepiece's encode */
int tk_sp_encode(const hs_tokenizer *t, tk_scratch *s, const char *text, size_t len,
                 tk_ids *out);
/* the text of ids, as sentencepiece's decode; display: each piece by itself
 * (U+2581 a space, control and unknown pieces by name, bytes <0xAB>) */
int tk_sp_decode(const hs_tokenizer *t, const int32_t *ids, size_t n, int display, tk_buf *out);
/* The charsmap blob p[0, n) (<trie bytes, uint32 LE><units><NUL-terminated
 * UTF-8 strings>) into cm: HS_EFORMAT naming file and field when it is cut
 * short or its strings are not UTF-8; HS_ENOMEM. tk_charsmap_free frees it. */
int tk_charsmap_read(const char *file, const char *field, const unsigned char *p, size_t n,
                     tk_charsmap *cm);
/* The charsmap's rule at the start of s[0, n): the longest (longest set,
 * sentencepiece) or the shortest (HF's Precompiled, which also stops at a
 * NUL byte) prefix it maps; its length, 0 when none, and its replacement
 * in *repl. */
size_t tk_charsmap_match(const tk_charsmap *cm, const char *s, size_t n, int longest,
                         const char **repl, size_t *repl_n);
void tk_charsmap_free(tk_charsmap *cm);

/* ---- WordPiece (tokenizer/wordpiece.c) ---- */
/* The model's trie over t->raw, the continuing-subword prefix and the
 * longest word in characters (longer: one unknown token). HS_ENOMEM;
 * HS_EFORMAT for a vocabulary past 2^31 trie nodes. */
int tk_wp_build(hs_tokenizer *t, const char *prefix, size_t max_chars);
void tk_wp_free(tk_wp *wp);
/* appends the WordPiece ids of one pre-token: longest match first, greedy
 * (HF's WordPiece::tokenize); a word with a part no piece covers is one
 * unknown token. O(n L) for a word of n bytes and pieces of at most L. */
int tk_wordpiece(const hs_tokenizer *t, tk_scratch *s, const char *w, size_t n, tk_ids *out);
/* BertNormalizer's steps (flags: TK_BERT_*) on s into out */
int tk_bert_normalize(tk_buf *out, const char *s, size_t n, int flags);
/* BertPreTokenizer: whitespace removed, each punctuation character alone */
int tk_bert_pre(const tk_piece *in, tk_pieces *out);

/* Regex matches (tokenizer/regex.c): calls back (start, end) for every
 * match of re in [0, n), as an unanchored search from each match's end
 * would find them (an empty match moves on by one character).
 *
 * The search runs in a window of sc->window bytes under PCRE2's hard
 * partial matching and a match limit of TK_LIMIT0 to TK_LIMIT_FAST steps
 * an offset (doubled as an offset needs it, each try charged): a
 * result that is neither partial nor out of steps is the result on the
 * whole text, and cost little. An attempt that needs more (one that reads
 * past the window, or backtracks more) is finished alone, anchored, by the
 * compilation with callouts, which charges every item it runs one unit and
 * every byte the subject position moves one more: the bytes a pattern reads
 * ahead or scans again are paid for, and the attempt is stopped mid-way
 * once the budget is spent (HS_EINVAL naming who) instead of hanging the
 * tool. What a callout cannot see (a backreference compared in vain) is
 * bounded by the CPU time of those attempts: TK_NS_PER_UNIT for each unit
 * of the budget, 20 ms at least (0.3 s for a megabyte; the real tokenizers'
 * take a few milliseconds). Real patterns cost 4 to 8 units a byte. */
#define TK_WINDOW 64
#define TK_LIMIT0 2
#define TK_LIMIT_FAST 64
#define TK_NS_PER_UNIT 10
/* the callout of the counted compilation (data: the scratch) */
int tk_regex_callout(pcre2_callout_block *cb, void *data);
int tk_regex_each(const tk_re *re, const char *who, tk_scratch *sc, const char *s, size_t n,
                  int (*fn)(void *, size_t, size_t), void *ctx);

/* ---- added tokens (tokenizer/added.c) ---- */
/* The automata of the two passes, built once the added tokens are read
 * (their match strings set). HS_ENOMEM. */
int tk_ac_build(hs_tokenizer *t);
void tk_ac_free(tk_ac *ac);
/* The leftmost-longest matches of pass's added tokens in s[0, n), in
 * order, into s->found: O(n) plus the number of offsets where a token starts. */
int tk_ac_find(const hs_tokenizer *t, int pass, tk_scratch *sc, const char *s, size_t n);

/* ---- decoding (tokenizer/decode.c) ---- */
/* The bytes of ids through the decoder chain. display: the token text for
 * labels (no stripping of leading spaces, bytes kept raw). */
int tk_decode(const hs_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
              int display, tk_buf *out);

#endif
