/* llm.c token shards (SPEC §4): a header of 256 little-endian int32
 * ([0] magic 20240520 with uint16 tokens, or 20240801 with uint32; [1]
 * version 1 or 7; [2] token count) followed by the tokens. */
#ifndef HS_TOKENS_H
#define HS_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* The masked-LM recipe of an encoder's batches (SPEC §14), applied by
 * hs_batch_at: each position of the data is chosen, never a special token
 * (padding among them), either with probability prob from a hash of (seed,
 * its place in the data) -- so every pass, command and rank sees the same
 * choice at the same place -- then replaced 80% by mask_id, 10% by an id
 * uniform over the vocabulary, 10% left as it is; or, with every K > 0, at
 * the positions t = offset mod K of each sequence, each replaced by
 * mask_id. The target of a chosen position is its original token, of any
 * other HS_TARGET_IGNORE (model/kernels/layers.h). */
enum { HS_MLM_MAX_SPECIAL = 8 };
typedef struct {
    int on;            /* 0: next-token batches (SPEC §4) */
    double prob;
    int every, offset; /* every > 0: the deterministic choice */
    unsigned long long seed;
    int32_t mask_id;
    int vocab;
    int n_special;
    int32_t special[HS_MLM_MAX_SPECIAL]; /* ids never chosen */
} hs_mlm;

typedef struct {
    int32_t *tok; /* n tokens */
    size_t n;
    int version;  /* 1: uint16, 7: uint32 */
    hs_mlm mlm;   /* an encoder's masked-LM batches (set by the analyses' setup) */
    /* NULL, or (owned, n) 1 a token / 0 padding, the tokens being sequences
     * of the batches' T each (--text --lines): a target on padding or past
     * its sequence's end is HS_TARGET_IGNORE */
    unsigned char *valid;
} hs_tokens;

/* Reads and checks a shard: magic, version, that the file size equals the
 * header's token count, and (uint32 shards) that every id fits int32.
 * HS_EIO / HS_EFORMAT naming the file. */
int hs_tokens_read(hs_tokens *t, const char *path);
void hs_tokens_free(hs_tokens *t);

/* Tokens held in memory (text tokenized on the fly, SPEC §9), used exactly
 * like a shard's: t takes ownership of ids (malloc'd, n of them; freed by
 * hs_tokens_free). version is what a shard of them would be: 1 when every
 * id fits uint16, else 7. HS_EINVAL for a negative id (ids stays owned by
 * the caller then). */
int hs_tokens_adopt(hs_tokens *t, int32_t *ids, size_t n);

/* The bytes of the file at path as tokens of the byte-level vocabulary
 * (`tokens --in`, SPEC §4): *ids malloc'd, *n of them (n may be 0). Any
 * file is read, a pipe included (tokens --in /dev/stdin), up to stream_cap
 * bytes (an endless one, /dev/zero, is refused past them: its size is not
 * known before, and it would fill the memory with 4 bytes of ids a byte);
 * a regular file up to 1 GiB. HS_EIO / HS_EINVAL naming the file. */
int hs_tokens_read_bytes(int32_t **ids, size_t *n, const char *path, size_t stream_cap);

/* Writes tokens (all < 65536) as a version-1 shard, via a temporary file
 * (hs_tmp_fopen) moved over path. */
int hs_tokens_write(const char *path, const int32_t *tok, size_t n);

/* The same with the shard version chosen: 1 (uint16 tokens, magic 20240520)
 * or 7 (uint32, magic 20240801), for vocabularies of 65536 ids or more. */
int hs_tokens_write_version(const char *path, const int32_t *tok, size_t n, int version);

/* Repeated segments for induction studies, planted in place: the tokens are
 * read as sequences of T (sequence i: tok[i*T .. i*T+T), the sequences a
 * batch of SPEC §4 reads); in a share `share` of them a segment of length
 * len, uniform in lo..hi (2 len <= T), at a uniform offset p is copied right
 * after itself (tok[p+len+j] = tok[p+j]); in a share `random_share` of those
 * the first copy is first replaced by uniform tokens in 0..vocab-1, so the
 * repeat can only be predicted by copying. Returns the sequences changed. */
size_t hs_tokens_plant_repeats(int32_t *tok, size_t n, int T, double share, int lo, int hi,
                               double random_share, int vocab, unsigned long long seed);

/* What `headscope tokens` makes: a shard of the bytes of `in`, or of its
 * text encoded by the tokenizer at `tokenizer` as one document, with
 * repeated segments planted (hs_tokens_plant_repeats) when share > 0. */
typedef struct {
    const char *in, *out;  /* the text (any stream, up to stream_cap) and the shard */
    const char *tokenizer; /* NULL: byte-level ids */
    int special;           /* with a tokenizer: its post-processor's special tokens */
    double share, random_share; /* planted segments (share 0: none) */
    int seq_len;           /* the sequences they are planted in (needed with share) */
    const char *repeat_len; /* "MIN:MAX" (NULL: 8 : seq_len/2) */
    unsigned long long seed;
    int force;             /* overwrite an existing out */
    size_t stream_cap;
} hs_tokens_recipe;

typedef struct {
    size_t n, planted;
    int vocab;             /* the ids' vocabulary: 256, or the tokenizer's */
} hs_tokens_made;

/* The recipe's options: HS_EINVAL naming the one at fault; *lo, *hi the
 * planted segments' lengths. */
int hs_tokens_recipe_check(const hs_tokens_recipe *r, int *lo, int *hi);

/* hs_tokens_recipe_check, then refuses an existing out without force
 * (HS_EIO), reads, encodes, plants and writes the shard (version 1 below
 * 65536 ids, else 7) whole under a temporary name. */
int hs_tokens_make(hs_tokens_made *m, const hs_tokens_recipe *r);

/* Batches of B sequences of T (SPEC §4): batch i reads B*T+1 tokens from
 * i*B*T. Without wrap, returns the number of whole batches; with wrap
 * (training) the position returns to 0 whenever a batch would run past the
 * end, as llm.c's loader does. */
size_t hs_batch_count(const hs_tokens *t, int B, int T);

/* *nb = the whole batches an evaluation runs: all of them, or at most
 * max_batches when that is non-zero. HS_EINVAL when there is none. */
int hs_batches_to_run(const hs_tokens *t, int B, int T, size_t max_batches, size_t *nb);

/* Position of the first token of batch `step` when wrapping. */
size_t hs_batch_start_wrapped(const hs_tokens *t, int B, int T, size_t step);

/* inputs and targets (B,T) from the B*T+1 tokens at start; with t->mlm.on
 * the B*T tokens at start, masked as t->mlm says, and their MLM targets
 * (the (B*T+1)-th token is then unread). */
void hs_batch_at(const hs_tokens *t, size_t start, int B, int T, int32_t *inputs,
                 int32_t *targets);

#endif
