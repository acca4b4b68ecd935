/* What a command reads before it runs a study: a model, its tokens (a token
 * shard, or a text tokenized on the fly) and its prompts, each loaded and
 * checked once, in one place, with errors naming the file and the option. A
 * command loads its inputs before it opens its run (run.h), so that bad
 * input records nothing. */
#ifndef HS_INPUTS_H
#define HS_INPUTS_H

#include "pairs.h"
#include "prompts.h"
#include "run.h"
#include "task.h"
#include "tokenizer.h"
#include "tokens.h"
#include "weights.h"

/* Where tokens come from (SPEC §9): a token shard, or a text file encoded as
 * one document as HF tokenizer(text) does (special tokens added) by the
 * tokenizer at `tokenizer`, or when that is NULL by the one found in the
 * model directory (hs_tokenizer_present). */
typedef struct {
    const char *data;      /* --data FILE.bin */
    const char *text;      /* --text FILE */
    const char *tokenizer; /* --tokenizer PATH (NULL: the model directory's) */
    int lines;             /* --lines (SPEC §21): each line of the text one sequence */
    int bytes;             /* with no tokenizer known, a byte-level model (vocabulary 256)
                              reads the text's bytes as its tokens (retrieval's haystack) */
} hs_source;

/* The file recorded as the data (runs' data_path; the data_sha256 of runs
 * and map files is its sha256): the shard or the text file; NULL for none. */
const char *hs_source_path(const hs_source *s);

/* The tokenizer that applies: `tokenizer` when given, else the model
 * directory's when it holds one (*tk NULL and HS_OK when neither: no
 * tokenizer is known). *used: the path opened. */
int hs_tokenizer_for(hs_tokenizer **tk, const char *tokenizer, const char *model_dir,
                     const char **used);

/* A command's tokenizer is resolved and read once, then handed to every
 * reader that needs it (tokens, prompts, the masked-LM recipe): *tk open
 * already is kept; else hs_tokenizer_for opens the one that applies (or
 * leaves *tk NULL when none is known). The caller frees *tk. */
int hs_tokenizer_resolve(hs_tokenizer **tk, const char *tokenizer, const char *model_dir);

/* Reads the tokens of s into t: the shard, or the text as one document
 * (s->lines is refused: hs_inputs_load cuts a text into its lines, for the
 * commands that take them) encoded by the
 * tokenizer (*tk, resolved by hs_tokenizer_resolve when NULL: it stays open
 * in *tk for the caller to use further and free; a text without one is
 * HS_EINVAL saying --tokenizer is needed). vocab > 0 checks every id against
 * the model's vocabulary of `vocab` ids, the error naming the file, the
 * tokenizer and model_dir. A shard opens no tokenizer. On failure the
 * message is set and t left empty. */
int hs_source_load(hs_tokens *t, const hs_source *s, hs_tokenizer **tk, const char *model_dir,
                   int vocab);

/* The training tokens of an experiment and its validation part, owning
 * their memory: src's tokens, and vsrc's (read with the same tokenizer) or,
 * without vsrc, the last 10% of src's (hs_headcount_split: views). */
typedef struct {
    hs_tokens train, val; /* what an experiment reads */
    hs_tokens all, own;   /* the memory behind them: src's tokens, vsrc's */
} hs_split;

/* Loads the split (model_dir and vocab as hs_source_load's) and, with B > 0,
 * checks that both parts hold a batch of B x T (HS_EINVAL naming src). On failure the
 * message is set and everything freed. */
int hs_split_load(hs_split *s, const hs_source *src, const hs_source *vsrc,
                  const char *model_dir, int vocab, int B, int T);
void hs_split_free(hs_split *s);

/* HS_EINVAL "WHAT: fewer than one batch of B x T (+1) tokens: it holds N
 * (at --batch B, a --seq-len of at most M fits)": every command's message
 * about too few tokens says how many there are (SPEC §21). */
int hs_fail_few_tokens(const char *what, const hs_tokens *t, int B, int T);

/* The one check of a sequence length against a model, for every command
 * (SPEC §3: n_ctx is the context a model is defined for, learned positions
 * or not): HS_EINVAL "OPTION T exceeds the model's n_ctx=N" when T > n_ctx. */
int hs_seq_len_check(const hs_model_config *c, int T, const char *option);

/* --seq-len auto (SPEC §21): the whole text (or shard) one sequence. */
#define HS_SEQ_LEN_AUTO (-1)

/* T, or for T 0 the default sequence length of every command: min(n_ctx, 256). */
int hs_seq_len_or_default(const hs_model_config *c, int T);

typedef struct {
    const char *model;    /* checkpoint directory: loaded (NULL: none) */
    hs_source source;     /* tokens (data or text NULL: none) */
    hs_source val;        /* validation tokens, read as source's (data or text NULL: none) */
    const char *prompts;  /* prompts file (SPEC §11; NULL: none) */
    const char *maps;     /* a capture file the study reads itself: the run's data (NULL: none) */
    int batch, seq_len;   /* the tokens' batches; seq_len 0: min(n_ctx, 256) */
    int need_batch;       /* the tokens are cut in batches of batch x seq_len (+1), seq_len
                             checked against the context, and must hold one */
    int keep_tokenizer;   /* open the tokenizer that applies (in.tk) even where no input needs it */
    /* the masked-LM options of a command that computes a loss (mlm.h; NULL: none):
     * for an encoder the tokens get the recipe (in.tok.mlm), for a causal LM
     * a given option is a usage error */
    const struct hs_mlm_opts *mlm;
    /* a labelled task (SPEC §16; NULL: none), read with the tokenizer that
     * applies, instead of tokens; its seq_len is --seq-len */
    const hs_task_opts *task;
    const char *kv_plan;  /* a KV plan (SPEC §18) the model runs under (NULL: none) */
    const char *pairs;    /* an encoder-decoder's source-target pairs (SPEC §17; NULL: none),
                             sources bounded by a given seq_len */
    int allow_pairs;      /* the command takes pairs (else given pairs are refused) */
} hs_inputs_spec;

typedef struct {
    hs_model m;           /* zero without a model */
    hs_tokens tok;        /* empty without tokens */
    hs_tokens val;        /* empty without validation tokens; the same batches and recipe */
    hs_prompt_set ps;     /* empty without prompts */
    hs_task task;         /* empty (n 0) without a task; seq_len is then its padded length */
    hs_pairs pairs;       /* empty (n 0) without pairs */
    hs_tokenizer *tk;     /* the one that applies, read once: opened where an input needed it
                             or with keep_tokenizer; NULL when none was (or none is known) */
    int seq_len;          /* resolved */
    int whole;            /* --seq-len auto: seq_len is the tokens' count - 1, in one batch of 1 */
    int batch;            /* the batch the tokens are read in: the spec's, 1 (whole), or with
                             lines the largest divisor of their count at most the spec's */
    const char *data_path; /* what was read as the data (runs.data_path): prompts, shard or text */
    int usage;            /* the failure was an option's value (--seq-len) */
} hs_inputs;

/* Loads and checks s into in: the model, then with need_batch the sequence
 * length against it (hs_seq_len_check, "--seq-len"), the tokens (ids within
 * the vocabulary; with need_batch at least one batch) and the prompts (encoded
 * with the source's tokenizer, or the model directory's; ids within the
 * vocabulary, lengths within the context). The tokenizer is read at most
 * once, into in->tk, for all of them. On failure everything is freed
 * and the status returned with the message naming the file. */
int hs_inputs_load(hs_inputs *in, const hs_inputs_spec *s);
void hs_inputs_free(hs_inputs *in);

/* A prompt's ids (*ids malloc'd): ids_s "1,2,3" (--prompt-ids), else text
 * encoded by tok as a document (special tokens added), or without tok as
 * bytes for a byte-level model (vocabulary V = 256). The count, or -1 with
 * the message set and *usage 1 when an option's value is at fault. */
int hs_prompt_ids(const char *ids_s, const char *text, const hs_tokenizer *tok, int V,
                  int32_t **ids, int *usage);

/* Records into the run what its figures need to know of the inputs
 * (run_params): "seq_len" (what entropy and distance are scaled by),
 * "n_head" and "n_kv_head" (JSON arrays of the query and the key/value heads
 * per layer: a grid's cells, a KV plan's heads) and the
 * prompts' position labels (hs_run_position_labels). HS_OK and nothing done
 * without an index. */
int hs_inputs_record(hs_run *run, const hs_inputs *in);

#endif
