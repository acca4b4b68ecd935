/* Text to token ids and back (SPEC §9, §17): Hugging Face tokenizer.json
 * files with a BPE or a WordPiece (BERT) model, GPT-2's vocab.json +
 * merges.txt, and SentencePiece .model files (Unigram or BPE, encoded and
 * decoded as sentencepiece's encode / decode, with no special tokens).
 *
 * Encoding equals HF `tokenizer(text)`: added tokens are split out of the
 * text first, the rest is normalized, pre-tokenized, merged by BPE rank (or
 * cut into the longest WordPiece pieces) and (with add_special) wrapped by
 * the post-processor. Decoding inverts the
 * decoder chain. A tokenizer is immutable once opened, so one handle may
 * encode from several threads at once. */
#ifndef HS_TOKENIZER_H
#define HS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

typedef struct hs_tokenizer hs_tokenizer;

/* path is a tokenizer.json file, a directory holding tokenizer.json, or a
 * directory holding vocab.json + merges.txt (tokenizer.json preferred), or
 * such a vocab.json itself, or a SentencePiece file (*.model, *.spm: its
 * own ids) or a directory holding tokenizer.model or spiece.model (looked
 * for last, in this order). A directory whose SentencePiece file's ids are
 * not the model's (Marian's source.spm with vocab.json, XLM-R's
 * sentencepiece.bpe.model) is refused, saying so.
 * HS_EIO naming the file when none can be read; HS_EFORMAT naming the JSON
 * or protobuf field of anything malformed or unsupported. */
int hs_tokenizer_open(hs_tokenizer **tok, const char *path);
void hs_tokenizer_free(hs_tokenizer *tok);

/* 1 when dir holds a file hs_tokenizer_open would read (a model directory
 * whose tokenizer is found without --tokenizer). */
int hs_tokenizer_present(const char *dir);

/* The path it was opened with (a .model file: the file itself), for
 * messages. */
const char *hs_tokenizer_path(const hs_tokenizer *tok);

/* The tokenizer of an encoder-decoder's targets: a Marian directory's
 * target.spm side (SPEC §17); every other tokenizer itself. */
const hs_tokenizer *hs_tokenizer_target(const hs_tokenizer *tok);

/* The number of ids: 1 + the largest id of the vocabulary or an added token. */
int hs_tokenizer_vocab_size(const hs_tokenizer *tok);

/* The id of a piece as the tokenizer file spells it: an added token's
 * content ("[MASK]", "<|endoftext|>") or a vocabulary entry ("##ing",
 * GPT-2's "Ġthe"); -1 when there is none. A masked-LM loss looks up
 * "[MASK]", "[CLS]", "[SEP]", "[PAD]" and "[UNK]" so. Cost: a scan of the
 * added tokens and one hash look-up (call it once, not per token). */
int32_t hs_tokenizer_token_id(const hs_tokenizer *tok, const char *piece);

/* 1 when id is a special added token (those skip_special leaves out of a
 * decoding, and a masked-LM loss never masks: [CLS], [SEP], [PAD], ...),
 * else 0, also for an id outside the vocabulary. */
int hs_tokenizer_is_special(const hs_tokenizer *tok, int32_t id);

/* Encodes len bytes of UTF-8 text (invalid UTF-8 is HS_EINVAL naming the
 * byte offset). add_special: the post-processor's special tokens (HF
 * add_special_tokens=True). *ids is malloc'd (the caller frees it), *n ids.
 * Cost: linear in the text for pre-tokenized files (BPE per pre-token,
 * O(m log m) for m symbols, results cached for the rest of the call, so
 * encode a document in one call rather than line by line); a file without
 * a pre-tokenizer (Llama-2 style) makes each stretch between added tokens
 * one BPE word, O(n log n) in its length. WordPiece walks each word once
 * per piece it finds, O(n L) for pieces of at most L bytes.
 * A tokenizer file is partly a program (its patterns, its chain of steps),
 * so the work of one call is bounded by a budget proportional to the text
 * (tokenizer/tok_internal.h: 32 units a byte, the real tokenizers spend a
 * few), and the normalized text by 16 times the text: past either the text
 * is refused, HS_EINVAL naming the file and the step ("tokenizer.json:
 * pre_tokenizer.pretokenizers[0] (Split "..."): the work budget of this
 * text is spent"), instead of running for minutes or filling the memory. */
int hs_tokenizer_encode(const hs_tokenizer *tok, const char *text, size_t len, int add_special,
                        int32_t **ids, size_t *n);

/* A text pair through the post-processor's pair template (TemplateProcessing's
 * "pair", BertProcessing's [CLS] A [SEP] B [SEP]): *ids (malloc'd) the
 * template's ids with a's and b's tokens, *types (malloc'd) each id's
 * type_id, *n their count. max_len > 0 truncates as transformers'
 * truncate_sequences (longest_first): one token at a time from the end of
 * the longer sequence, the second on ties, until the whole fits (special
 * tokens kept). HS_EINVAL naming the tokenizer file when it has no pair
 * template (or one post-processor besides it) or the specials alone do not
 * fit; hs_tokenizer_encode's errors. */
int hs_tokenizer_encode_pair(const hs_tokenizer *tok, const char *a, size_t alen, const char *b,
                             size_t blen, size_t max_len, int32_t **ids, unsigned char **types,
                             size_t *n);

/* The longest text hs_tokenizer_encode_file reads (its ids are held in
 * memory too, up to 4 bytes a byte). */
#define HS_TOKENIZER_MAX_TEXT ((size_t)1 << 30)

/* hs_tokenizer_encode of a whole file, read as one document. path is a
 * regular file (a FIFO, a device or a directory is HS_EIO naming it, at
 * once) unless stream_cap > 0: then any file is read, a pipe included, up
 * to stream_cap bytes (an endless stream, /dev/zero, is HS_EINVAL past
 * them). A regular file holds at most HS_TOKENIZER_MAX_TEXT bytes. HS_EIO
 * naming the file; invalid UTF-8 is HS_EINVAL naming the file and the byte
 * offset. */
int hs_tokenizer_encode_file(const hs_tokenizer *tok, const char *path, size_t stream_cap,
                             int add_special, int32_t **ids, size_t *n);

/* The text of ids through the decoder (malloc'd, NUL-terminated; NULL with
 * the message set). skip_special leaves out special added tokens. */
char *hs_tokenizer_decode(const hs_tokenizer *tok, const int32_t *ids, size_t n,
                          int skip_special);

/* The display string of one id, for plots and reports: the token's own
 * decoded text (bytes that are not complete UTF-8 shown as <0xAB>), written
 * NUL-terminated into buf (cap bytes, truncated at a character boundary).
 * The decoder chain runs on the token alone but strips nothing: GPT-2's
 * "Ġthe" and Llama's "▁the" both show as " the", so a label tells a word
 * start from a word piece. Control characters (a newline) are kept as they
 * are; a caller printing labels escapes them. HS_EINVAL for an id outside
 * the vocabulary. */
int hs_tokenizer_token_text(const hs_tokenizer *tok, int32_t id, char *buf, size_t cap);

#endif
